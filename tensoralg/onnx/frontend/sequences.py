"""Sequences whose length and positions are known at load, rewritten as tensor ops.

Scripted PyTorch code exported to ONNX keeps Python lists as ONNX sequences: ``torch.unbind``
becomes ``SplitToSequence``, indexing ``SequenceAt``, ``torch.stack``/``torch.cat`` of a list
``ConcatFromSequence``, ``len`` ``SequenceLength``, and list building ``SequenceConstruct``/
``SequenceEmpty``/``SequenceInsert``/``SequenceErase``. When every sequence's length and every
position are known at load, the sequence is only a list of tensor names, and each op becomes
tensor ops the rest of the compiler handles (and fuses) as any other:

- ``SplitToSequence`` -> ``Split`` (then ``Squeeze`` per piece when ``keepdims=0``);
- ``SequenceAt`` -> ``Identity`` of the element; ``SequenceLength`` -> a constant;
- ``ConcatFromSequence`` -> ``Concat`` (``new_axis=1``: each piece ``Unsqueeze``d first);
- the list-building ops -> nothing: the list is tracked here.

A sequence that a Loop, an If or ``SequenceMap`` reads, that is a graph output, or that is
built from one of those, is left as it is (the embedding-bag Loop recogniser takes the
exporters' sequence loops; anything else is refused at load, naming the node). A position or a
split size known only at run time is refused here, naming the node and what to change.

>>> from onnx import helper, TensorProto
>>> nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
...          helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=1)]
>>> graph = helper.make_graph(nodes, "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
>>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
>>> rewritten, notes = static_sequences(model, 17)
>>> [n.op_type for n in rewritten.graph.node]
['Split', 'Squeeze', 'Squeeze', 'Unsqueeze', 'Unsqueeze', 'Concat']
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

import tensoralg as ta
from tensoralg.onnx.frontend.conditionals import free_names, static_dims, values_known_at_load
from tensoralg.onnx.frontend.graph import fresh_name
from tensoralg.onnx.frontend.reference import DEFAULT_DOMAINS
from tensoralg.onnx.passes.bags.loops import SEQUENCE_OPS

# sequence ops rewritten here, and the positions of their sequence inputs
SEQUENCE_INPUTS = {"SequenceEmpty": (), "SequenceConstruct": (), "SequenceInsert": (0,),
                   "SequenceErase": (0,), "SequenceAt": (0,), "SequenceLength": (0,),
                   "SplitToSequence": (), "ConcatFromSequence": (0,)}
# those whose output is a sequence
MAKES_SEQUENCE = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert",
                            "SequenceErase", "SplitToSequence"})


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _input(node: onnx.NodeProto, position: int) -> str:
    return node.input[position] if position < len(node.input) else ""


def _kept(model: onnx.ModelProto) -> set[str]:
    """The sequence values this pass may rewrite: made and read only by the ops it knows,
    not graph outputs. A value outside the set keeps its producer and readers as they are,
    and so, through the list-building ops, do the sequences it is built from or into."""
    graph = model.graph
    sequences: set[str] = set()
    for node in graph.node:
        if node.domain in DEFAULT_DOMAINS and node.op_type in MAKES_SEQUENCE:
            sequences.update(name for name in node.output if name)
    bad = {o.name for o in graph.output} & sequences
    for node in graph.node:
        known_op = node.domain in DEFAULT_DOMAINS and node.op_type in SEQUENCE_INPUTS
        reads = [n for n in node.input if n in sequences]
        if not known_op:
            bad.update(reads)
        else:
            positions = SEQUENCE_INPUTS[node.op_type]
            # a sequence read where a tensor is expected (SequenceConstruct of sequences)
            bad.update(n for k, n in enumerate(node.input) if n in sequences and
                       k not in positions)
        # names read inside subgraphs (a Loop body reading an outer sequence)
        for attribute in node.attribute:
            for body in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else
                         list(attribute.graphs)):
                bad.update(set(free_names(body)) & sequences)
    changed = True
    while changed:          # list building links its input and output sequences
        changed = False
        for node in graph.node:
            if node.op_type in ("SequenceInsert", "SequenceErase") and \
                    node.domain in DEFAULT_DOMAINS:
                linked = {node.input[0], node.output[0]}
                if linked & bad and not linked <= bad:
                    bad |= linked
                    changed = True
    return sequences - bad


class _Writer:
    """The rewritten node list, fresh names, and the refusals met."""

    def __init__(self, model: onnx.ModelProto, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.taken = {name for node in model.graph.node for name in node.output} | \
            {v.name for v in model.graph.input} | {i.name for i in model.graph.initializer}
        self.refused: list[str] = []
        self.constants: list[onnx.TensorProto] = []

    def name(self, base: str) -> str:
        return fresh_name(base, self.taken)

    def add(self, op_type: str, inputs: list[str], outputs: list[str], name: str,
            **attributes: Any) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.name(name),
                                           **attributes))

    def constant(self, value: np.ndarray, base: str) -> str:
        name = self.name(base)
        self.constants.append(onnx.numpy_helper.from_array(value, name))
        return name

    def each(self, op_type: str, items: list[str], base: str, node_name: str, axis: int
             ) -> list[str]:
        """``op_type`` (Squeeze or Unsqueeze) of each of ``items`` along ``axis``: the new
        values' names."""
        made = []
        for k, item in enumerate(items):
            target = self.name(f"{base}_{k}")
            inputs, extra = self.axes(node_name, axis)
            self.add(op_type, [item, *inputs], [target], f"{node_name}/{op_type.lower()}_{k}",
                     **extra)
            made.append(target)
        return made

    def axes(self, node_name: str, axis: int) -> tuple[list[str], dict[str, Any]]:
        """Squeeze/Unsqueeze's axes: an input from opset 13, an attribute before."""
        if self.opset >= 13:
            return [self.constant(np.array([axis], np.int64), f"{node_name}/axes")], {}
        return [], {"axes": [axis]}


def static_sequences(model: onnx.ModelProto, opset: int) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with its load-time sequences as tensor ops (module docstring), and a note of
    what was rewritten; ``model`` itself when it has none. UnsupportedError names every
    sequence op whose positions are known only at run time."""
    graph = model.graph
    if not any(n.op_type in SEQUENCE_OPS and n.domain in DEFAULT_DOMAINS
               for n in graph.node):
        return model, []
    kept = _kept(model)
    if not kept:
        return model, []
    wanted = [n for node in graph.node if node.op_type in SEQUENCE_INPUTS and
              node.domain in DEFAULT_DOMAINS for n in node.input[1:]]
    known = values_known_at_load(model, wanted)
    dims = static_dims(model)
    w = _Writer(model, opset)
    lists: dict[str, list[str]] = {}
    rewritten = 0
    for node in graph.node:
        op_type = node.op_type
        touches = [n for n in list(node.input) + list(node.output) if n in kept]
        if node.domain not in DEFAULT_DOMAINS or op_type not in SEQUENCE_INPUTS or not touches:
            w.nodes.append(node)
            continue
        where = f"node {node.name or node.output[0]} ({op_type})"
        rewritten += 1
        try:
            _rewrite(w, node, lists, known, dims)
        except _Refused as why:
            w.refused.append(f"{where}: {why}")
    if w.refused:
        raise ta.UnsupportedError(
            "sequence ops whose positions or sizes are known only at run time (tensoralg "
            "resolves sequences at load; export with static lengths, or unroll the list in "
            "the model):\n  " + "\n  ".join(w.refused))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(w.nodes)
    out.graph.initializer.extend(w.constants)
    # the sequences are gone: drop their declared types
    kept_infos = [v for v in out.graph.value_info if v.name not in kept]
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept_infos)
    return out, [f"sequences at load: {rewritten} sequence op(s) as tensor ops "
                 f"({len(kept)} sequence value(s), every length and position static)"]


class _Refused(Exception):
    """Why one sequence op cannot be resolved at load."""


def _integer(known: dict[str, np.ndarray], name: str, what: str) -> int:
    value = known.get(name)
    if value is None:
        raise _Refused(f"its {what} ({name!r}) is computed at run time")
    if value.size != 1 or value.dtype.kind not in "iu":
        raise _Refused(f"its {what} must be one integer, got {value!r}")
    return int(value.reshape(-1)[0])


def _position(known: dict[str, np.ndarray], name: str, length: int, what: str,
              inserting: bool = False) -> int:
    """A position in ``[-length, length)`` (``inserting``: ``[-length, length]``), counted
    from the back when negative."""
    position = _integer(known, name, what)
    if not -length <= position < length + inserting:
        raise _Refused(f"{what} {position} is outside a sequence of {length} element(s)")
    return position + length if position < 0 else position


def _rewrite(w: _Writer, node: onnx.NodeProto, lists: dict[str, list[str]],
             known: dict[str, np.ndarray], dims: dict[str, list[int | None]]) -> None:
    op_type, out = node.op_type, node.output[0]
    attributes = _attributes(node)
    name = node.name or out
    if op_type == "SequenceEmpty":
        lists[out] = []
    elif op_type == "SequenceConstruct":
        lists[out] = list(node.input)
    elif op_type == "SequenceInsert":
        items = list(lists[node.input[0]])
        at = _input(node, 2)
        items.insert(_position(known, at, len(items), "position", inserting=True)
                     if at else len(items), node.input[1])
        lists[out] = items
    elif op_type == "SequenceErase":
        items = list(lists[node.input[0]])
        if not items:
            raise _Refused("it erases from an empty sequence")
        at = _input(node, 1)
        del items[_position(known, at, len(items), "position") if at else -1]
        lists[out] = items
    elif op_type == "SequenceAt":
        items = lists[node.input[0]]
        w.add("Identity", [items[_position(known, node.input[1], len(items), "position")]],
              [out], name)
    elif op_type == "SequenceLength":
        w.add("Constant", [], [out], name,
              value=onnx.numpy_helper.from_array(np.array(len(lists[node.input[0]]), np.int64)))
    elif op_type == "ConcatFromSequence":
        _concat(w, node, lists[node.input[0]], attributes, dims)
    else:
        lists[out] = _split(w, node, attributes, known, dims)


def _concat(w: _Writer, node: onnx.NodeProto, items: list[str], attributes: dict[str, Any],
            dims: dict[str, list[int | None]]) -> None:
    name, out = node.name or node.output[0], node.output[0]
    if not items:
        raise _Refused("it concatenates an empty sequence (ONNX leaves the result undefined)")
    axis = int(attributes["axis"])
    if not attributes.get("new_axis", 0):
        w.add("Concat", items, [out], name, axis=axis)
        return
    if axis < 0:
        # new_axis counts the new dimension: -1 is after the last one
        shape = dims.get(items[0])
        if shape is None:
            raise _Refused("a negative axis with new_axis=1 needs its elements' rank, which "
                           "shape inference does not give")
        axis += len(shape) + 1
    w.add("Concat", w.each("Unsqueeze", items, f"{out}/unsqueezed", name, axis), [out], name,
          axis=axis)


def _split(w: _Writer, node: onnx.NodeProto, attributes: dict[str, Any],
           known: dict[str, np.ndarray], dims: dict[str, list[int | None]]) -> list[str]:
    name, x = node.name or node.output[0], node.input[0]
    axis = int(attributes.get("axis", 0))
    keepdims = int(attributes.get("keepdims", 1))
    given = _input(node, 1)
    shape = dims.get(x)
    if given:
        split = known.get(given)
        if split is None:
            raise _Refused(f"its split ({given!r}) is computed at run time")
        split = split.astype(np.int64).reshape(-1) if split.ndim else split.astype(np.int64)
    if shape is None or not -len(shape) <= axis < len(shape):
        size = None
    else:
        axis %= len(shape)
        size = shape[axis]
    if given and split.ndim == 1:
        sizes = [int(v) for v in split]
        if size is not None and sum(sizes) != size:
            raise _Refused(f"its split {sizes} does not add up to the axis's {size}")
    else:
        if size is None:
            raise _Refused(f"the length of axis {axis} of {x!r} is known only at run time")
        step = int(split) if given else 1
        if step < 1:
            raise _Refused(f"its split {step} must be positive")
        sizes = [min(step, size - start) for start in range(0, size, step)]
    if not sizes:
        return []
    if axis < 0:
        raise _Refused(f"axis {axis} of {x!r} needs its rank, which shape inference does not "
                       f"give")
    pieces = [w.name(f"{node.output[0]}/piece_{k}") for k in range(len(sizes))]
    if w.opset >= 13:
        split_input = [w.constant(np.array(sizes, np.int64), f"{name}/split")]
        w.add("Split", [x, *split_input], pieces, name, axis=axis)
    else:
        w.add("Split", [x], pieces, name, axis=axis, split=sizes)
    if keepdims or given:
        # keepdims=0 applies only when no split is given (each piece then has length 1)
        return pieces
    return w.each("Squeeze", pieces, f"{node.output[0]}/element", name, axis)


__all__ = ["static_sequences"]
