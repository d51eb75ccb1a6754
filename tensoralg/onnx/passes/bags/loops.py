"""The ``Loop`` forms of ``nn.EmbeddingBag``, recognised when a model is loaded.

A ``Loop`` is the one node with a subgraph the loader accepts, and only in the two forms PyTorch
exports an embedding bag as; each becomes one ``EmbeddingBag`` node
(:func:`tensoralg.onnx.passes.bags.recognise.run_loop_bag`: one sparse·dense contraction). Any other ``Loop`` is
refused here, at load time and at every opt level, naming the node and what did not match.

The TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, 1-D input + offsets; a 2-D
input gets ``offsets = Range(0, numel, bag size)`` and ``Reshape(input, [-1])``)::

    bounds = Concat(offsets, Unsqueeze(Gather(Shape(input), 0)))  # include_last_offset: offsets
    ends = Slice(bounds, [1], [INT64_MAX], [0], [1])
    y = Loop(Gather(Shape(ends), 0), true) body(i, cond):
        s, e = Unsqueeze(Gather(bounds, i), [0]), Unsqueeze(Gather(ends, i), [0])
        rows = Gather(table, Slice(input, s, e, [0]))
        rows = Mul(rows, Unsqueeze(Slice(weights, s, e, [0]), [1]))       # per_sample_weights
        return Cast(true, BOOL), ReduceSum|ReduceMean(rows, axes=[0], keepdims=0)

The dynamo exporter (onnxscript's ``aten_embedding_bag``) gathers first and fills a sequence::

    rows = Mul(Gather(table, Reshape(input, [-1])), Unsqueeze(weights or ones, [1]))
    bounds = Concat(offsets, Shape(indices_1d))
    _, seq = Loop("", 0 < count, 0, SequenceEmpty()) body(_, cond, k, seq):   # either order
        start = Slice(bounds, [k], [k] + 1); end = Slice(bounds, [k] + 1, [k] + 2)
        row = If(start == end, zeros(1, dim), ReduceSum(Slice(rows, start, end), [0]))
        return k + 1 < count, k + 1, SequenceInsert(seq, row)
    y = ConcatFromSequence(seq, axis=0)

Its mean (ReduceMean, and for the last bag a ReduceSum divided by ``len(input) - start``) is
recognised by the ops of the two nested ``If``s. ``rows`` is traced back to the table, indices
and weights when it is that Gather[·Mul]; otherwise the bag sums rows of ``rows`` itself.

A graph without Loops is left alone (no replacements, no note):

>>> recognise_bag_loops(onnx.helper.make_graph([], "g", [], []), [])
({}, [])
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Node
from tensoralg.onnx.passes.bags.recognise import EMBEDDING_BAG_LOOP, LoopBag

TORCHSCRIPT = "TorchScript Loop"
SEQUENCE = "sequence-op Loop"
_SUPPORTED = ("only the EmbeddingBag loop form is supported (the Gather/Slice/ReduceSum body of "
              "the TorchScript exporter or the sequence-op loop of the dynamo exporter, sum, "
              "mean or max)")
# Ops of the dynamo mean's last-bag branch: sum / (len(input) - start), when positive.
_LAST_MEAN_OPS = frozenset({"ReduceSum", "Shape", "Sub", "CastLike", "Greater", "If", "Cast",
                            "Div", "Identity", "Constant"})


class _NoMatch(Exception):
    """Why a Loop is not an embedding bag (becomes the UnsupportedError's reason)."""


def _need(condition: object, reason: str) -> None:
    if not condition:
        raise _NoMatch(reason)


@dataclass
class _Scope:
    """One graph level: who produces each value, and the constants known there."""

    nodes: list[onnx.NodeProto]           # one list, so that ``used`` holds these very objects
    producers: dict[str, onnx.NodeProto]
    constants: dict[str, np.ndarray]
    parent: "_Scope | None" = None
    used: list[onnx.NodeProto] = field(default_factory=list)

    @classmethod
    def of(cls, graph: onnx.GraphProto, parent: "_Scope | None" = None) -> "_Scope":
        constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
        nodes = list(graph.node)
        producers = {}
        for node in nodes:
            for name in node.output:
                producers[name] = node
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                value = _constant_value(node)
                if value is not None:
                    constants[node.output[0]] = value
        return cls(nodes, producers, constants, parent)

    def const(self, name: str) -> np.ndarray | None:
        if name in self.constants:
            return self.constants[name]
        if name in self.producers:        # computed here: not a constant, whatever outside says
            return None
        return self.parent.const(name) if self.parent else None

    def take(self, name: str, *op_types: str) -> onnx.NodeProto:
        """The node of this level producing ``name``, which must be one of ``op_types``."""
        node = self.producers.get(name)
        _need(node is not None and node.op_type in op_types,
              f"{name!r} is not computed by {' or '.join(op_types)}"
              + (f" but by {node.op_type}" if node is not None else ""))
        self.used.append(node)
        return node

    def ints(self, name: str) -> list[int] | None:
        value = self.const(name) if name else None
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]

    def check_all_used(self) -> None:
        """Every node of this level but Constants is part of the pattern."""
        used = {id(n) for n in self.used}
        extra = [n.op_type for n in self.nodes if n.op_type != "Constant" and id(n) not in used]
        _need(not extra, f"the body also computes {', '.join(sorted(set(extra)))}")


def _constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attribute in node.attribute:
        value = onnx.helper.get_attribute_value(attribute)
        if isinstance(value, onnx.TensorProto):
            return numpy_helper.to_array(value)
        if attribute.name in ("value_int", "value_ints"):
            return np.array(value, dtype=np.int64)
        if attribute.name in ("value_float", "value_floats"):
            return np.array(value, dtype=np.float32)
    return None


def _attribute(node: onnx.NodeProto, name: str, default: object = None) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _subgraph(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    graph = _attribute(node, name)
    _need(isinstance(graph, onnx.GraphProto), f"{node.op_type} has no {name}")
    return graph


def _axes(scope: _Scope, node: onnx.NodeProto, position: int) -> list[int] | None:
    """A node's axes, from the attribute (older opsets) or the constant input at ``position``."""
    attribute = _attribute(node, "axes")
    if attribute is not None:
        return [int(a) for a in attribute]
    if len(node.input) > position and node.input[position]:
        axes = scope.ints(node.input[position])
        _need(axes is not None, f"the axes of {node.op_type} are not constant")
        return axes
    return None


def _is_true(scope: _Scope, name: str) -> bool:
    value = scope.const(name)
    return value is not None and value.size == 1 and bool(value.reshape(-1)[0])


def _slice_axis0(scope: _Scope, node: onnx.NodeProto) -> None:
    """A Slice along axis 0 with step 1 (axes and steps absent or so)."""
    _need(_axes(scope, node, 3) in (None, [0]), "a Slice is not along axis 0")
    _need(len(node.input) < 5 or not node.input[4] or scope.ints(node.input[4]) == [1],
          "a Slice has a step other than 1")


def _reduction(scope: _Scope, node: onnx.NodeProto, keepdims: int) -> None:
    _need(_axes(scope, node, 1) == [0], f"{node.op_type} is not over axis 0")
    _need(int(_attribute(node, "keepdims", 1)) == keepdims,
          f"{node.op_type} has keepdims={_attribute(node, 'keepdims', 1)}")


@dataclass
class _Main:
    """The main graph as the matchers see it."""

    scope: _Scope
    visible: set[str]                      # names a node there may read
    outputs: set[str]
    consumers: dict[str, list[int]]        # value -> positions of the nodes reading it

    @classmethod
    def of(cls, graph: onnx.GraphProto) -> "_Main":
        scope = _Scope.of(graph)
        visible = {v.name for v in graph.input} | {i.name for i in graph.initializer}
        consumers: dict[str, list[int]] = {}
        for k, node in enumerate(scope.nodes):
            visible.update(n for n in node.output if n)
            for name in node.input:
                consumers.setdefault(name, []).append(k)
        return cls(scope, visible, {v.name for v in graph.output}, consumers)

    def position(self, node: onnx.NodeProto) -> int:
        return next(k for k, n in enumerate(self.scope.nodes) if n is node)

    def outer(self, *names: str) -> None:
        for name in names:
            _need(name in self.visible, f"the body reads {name!r}, which is not a value of the "
                                        f"main graph")


@dataclass
class _Match:
    """What replaces a recognised Loop: the bag node's inputs and output, and the main-graph
    nodes it absorbs (the dynamo form's SequenceEmpty and ConcatFromSequence)."""

    inputs: tuple[str, ...]
    output: str
    mode: str
    end_shift: int
    dropped: tuple[int, ...] = ()
    empty: float = 0.0             # an empty bag's value (a max bag's: its ReduceMax of nothing)
    # (id, rows): members with this id (a negative one moved by rows first) are left out
    padding: tuple[int, int | None] | None = None


def _torchscript(loop: onnx.NodeProto, main: _Main) -> _Match:
    """The TorchScript form: bounds and ends read at the iteration number."""
    _need(len(loop.input) == 2 and loop.input[0] and len(loop.output) == 1,
          "it has no trip count or more than one output")
    _need(not loop.input[1] or _is_true(main.scope, loop.input[1]),
          "its condition is not constant true")
    body = _subgraph(loop, "body")
    _need(len(body.input) == 2 and len(body.output) == 2, "its body is not (i, cond) -> (cond, row)")
    scope = _Scope.of(body, main.scope)
    step, cond_in = body.input[0].name, body.input[1].name
    cond_out = body.output[0].name
    if cond_out != cond_in and not _is_true(scope, cond_out):
        cast = scope.take(cond_out, "Cast", "Identity")
        _need(cast.input[0] == cond_in or _is_true(scope, cast.input[0]),
              "its body's condition is not constant true")
    reduce = scope.take(body.output[1].name, "ReduceSum", "ReduceMean", "ReduceMax")
    _reduction(scope, reduce, keepdims=0)
    source, weights, weight_bounds = reduce.input[0], None, None
    if scope.producers.get(source) is not None and scope.producers[source].op_type == "Mul":
        _need(reduce.op_type != "ReduceMax", "its max bag scales its rows")
        mul = scope.take(source, "Mul")
        gathered = [n for n in mul.input if getattr(scope.producers.get(n), "op_type", "") ==
                    "Gather"]
        _need(len(gathered) == 1, "its Mul does not scale the gathered rows")
        source = gathered[0]
        factor = scope.take(mul.input[1] if mul.input[0] == source else mul.input[0],
                            "Unsqueeze")
        _need(_axes(scope, factor, 1) in ([1], [-1]), "its weights are not unsqueezed on axis 1")
        weight_slice = scope.take(factor.input[0], "Slice")
        _slice_axis0(scope, weight_slice)
        weights, weight_bounds = weight_slice.input[0], tuple(weight_slice.input[1:3])
    gather = scope.take(source, "Gather")
    _need(int(_attribute(gather, "axis", 0)) == 0, "its Gather is not along axis 0")
    table = gather.input[0]
    ids = scope.take(gather.input[1], "Slice")
    _slice_axis0(scope, ids)
    indices, start, end = ids.input[:3]
    _need(weight_bounds in (None, (start, end)), "its weights are sliced by other bounds")
    bounds = []
    for name in (start, end):
        unsqueeze = scope.take(name, "Unsqueeze")
        _need(_axes(scope, unsqueeze, 1) == [0], "a bag bound is not unsqueezed on axis 0")
        pick = scope.take(unsqueeze.input[0], "Gather")
        _need(pick.input[1] == step and int(_attribute(pick, "axis", 0)) == 0,
              "a bag bound is not read at the iteration number")
        bounds.append(pick.input[0])
    scope.check_all_used()
    main.outer(table, indices, *bounds, *([weights] if weights else []))
    mode = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max"}[reduce.op_type]
    # ReduceMax of no rows is -inf in onnxruntime (the ONNX reduction's identity), where
    # PyTorch's own max bag gives 0
    empty = -np.inf if mode == "max" else 0.0
    weighted = (weights,) if weights else ()
    if _shifted(main.scope, bounds[1], bounds[0]):
        # ends = bounds[1:]: bag b ends where bag b + 1 starts, read as the dynamo form reads
        # it (the next entry of one array), which the static plan runs as one CSR matrix
        return _Match((table, indices, bounds[0], bounds[0], loop.input[0]) + weighted,
                      loop.output[0], mode, 1, empty=empty)
    return _Match((table, indices, bounds[0], bounds[1], loop.input[0]) + weighted,
                  loop.output[0], mode, 0, empty=empty)


# A Slice end at least this large runs to the end of any array of bag offsets.
_TO_THE_END = 2 ** 31 - 1


def _shifted(scope: _Scope, ends: str, bounds: str) -> bool:
    """Whether ``ends`` is ``Slice(bounds, [1], [to the end])`` along axis 0, step 1 (the
    TorchScript exporter's ``ends``)."""
    node = scope.producers.get(ends)
    if node is None or node.op_type != "Slice" or len(node.input) < 3 or \
            node.input[0] != bounds:
        return False
    try:
        _slice_axis0(scope, node)
    except _NoMatch:
        return False
    starts, stops = scope.ints(node.input[1]), scope.ints(node.input[2])
    return starts == [1] and stops is not None and len(stops) == 1 and stops[0] >= _TO_THE_END


def _position(scope: _Scope, name: str, step: str) -> int:
    """k where ``name`` is ``Reshape(step, [-1]) + k`` (the Add's constant maybe CastLike'd)."""
    node = scope.take(name, "Reshape", "Add")
    if node.op_type == "Reshape":
        _need(node.input[0] == step and scope.ints(node.input[1]) == [-1],
              "a bag bound is not read at the loop counter")
        return 0
    for base, other in (node.input, node.input[::-1]):
        if getattr(scope.producers.get(base), "op_type", "") in ("Reshape", "Add"):
            amount = scope.ints(other)
            if amount is None:
                like = scope.take(other, "CastLike")
                amount = scope.ints(like.input[0])
            _need(amount is not None and len(amount) == 1, "a bag bound is not counter + k")
            return _position(scope, base, step) + amount[0]
    raise _NoMatch("a bag bound is not counter + k")


def _ops(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _ops(attribute.g)


def _zeros(scope: _Scope, branch: onnx.GraphProto) -> bool:
    """Whether ``branch`` returns zeros (a constant, or zeros Expanded to a computed shape)."""
    inner = _Scope.of(branch, scope)
    out = branch.output[0].name
    value = inner.const(out)
    if value is None and getattr(inner.producers.get(out), "op_type", "") == "Expand":
        value = inner.const(inner.producers[out].input[0])
        _need(all(n.op_type in ("Expand", "Concat", "Constant", "Shape", "Reshape")
                  for n in branch.node), "its empty-bag branch computes more than zeros")
    return value is not None and not np.any(value)


def _sequence(loop: onnx.NodeProto, main: _Main, protos: list[onnx.NodeProto]) -> _Match:
    """The dynamo sequence-op form: offsets[k] and offsets[k + 1], rows gathered before."""
    _need(len(loop.input) == 4, f"it carries {len(loop.input) - 2} value(s); a bag loop "
                                f"carries none (TorchScript) or a counter and a sequence (dynamo)")
    _need(not loop.input[0] and len(loop.output) == 2,
          "it has a trip count or scan outputs besides its sequence")
    body = _subgraph(loop, "body")
    _need(len(body.input) == 4 and len(body.output) == 3, "its body is not (_, cond, k, seq)")
    scope = _Scope.of(body, main.scope)
    ins, outs = [v.name for v in body.input[2:]], [v.name for v in body.output[1:]]
    seq = next((s for s in (0, 1) if getattr(scope.producers.get(outs[s]), "op_type", "") ==
                "SequenceInsert"), None)
    _need(seq is not None, "no loop-carried value is a SequenceInsert")
    k = 1 - seq
    insert = scope.take(outs[seq], "SequenceInsert")
    _need(len(insert.input) == 2 and insert.input[0] == ins[seq], "it inserts elsewhere")
    counter = ins[k]
    step = scope.take(outs[k], "Add")
    _need(counter in step.input, "its counter is not incremented")
    one = step.input[1] if step.input[0] == counter else step.input[0]
    if scope.ints(one) is None:
        one = scope.take(one, "CastLike").input[0]
    _need(scope.ints(one) == [1], "its counter does not step by 1")
    less = scope.take(body.output[0].name, "Less")
    _need(less.input[0] == outs[k], "its condition is not counter + 1 < count")
    count = less.input[1]
    # The main graph: a counter from 0, an empty sequence, concatenated along axis 0. The
    # dynamo exporter shares one SequenceEmpty between the loops of several bags: it may start
    # other Loops (each must be a bag too, or the load fails), but nothing else may read it,
    # since every bag that matches drops it.
    _need(main.scope.ints(loop.input[2 + k]) == [0], "its counter does not start at 0")
    empty = main.scope.producers.get(loop.input[2 + seq])
    readers = [protos[r] for r in main.consumers.get(loop.input[2 + seq], [])]
    _need(empty is not None and empty.op_type == "SequenceEmpty" and
          all(r.op_type == "Loop" and list(r.input[2:]).count(loop.input[2 + seq]) == 1 and
              loop.input[2 + seq] not in r.input[:2] for r in readers),
          "its sequence does not start empty")
    first = main.scope.producers.get(loop.input[1])
    if first is not None and first.op_type == "Less":
        _need(main.scope.ints(first.input[0]) == [0] and first.input[1] == count,
              "its first condition is not 0 < count")
    else:
        _need(_is_true(main.scope, loop.input[1]) and (main.scope.ints(count) or [0])[0] >= 1,
              "its first condition is not 0 < count")
    final, done = loop.output[seq], loop.output[k]
    _need(not done or (done not in main.outputs and not main.consumers.get(done)),
          "its final counter is used")
    users = main.consumers.get(final, [])
    concat = protos[users[0]] if len(users) == 1 else None
    _need(concat is not None and concat.op_type == "ConcatFromSequence" and final not in
          main.outputs and int(_attribute(concat, "axis", 0)) == 0 and
          int(_attribute(concat, "new_axis", 0)) == 0,
          "its sequence is not concatenated along axis 0")
    # One bag: rows start:end of the gathered rows, reduced; zeros for an empty bag.
    branch = scope.take(insert.input[1], "If")
    equal = scope.take(branch.input[0], "Equal")
    if any(getattr(scope.producers.get(n), "op_type", "") == "Size" for n in equal.input):
        # padding_idx: an inner Loop keeps the members whose id is not the padding id
        bounds, rows, ids, padding, mode = _padded(scope, branch, equal, counter)
        scope.check_all_used()
        main.outer(bounds, rows, ids, count)
        table, indices, weights = _gathered_rows(main, rows)
        _need(mode != "max" or weights is None, "its max bag scales its rows")
        inputs = (table, indices, bounds, bounds, count, weights or "", ids)
        return _Match(inputs, concat.output[0], mode, 1,
                      (main.position(empty), main.position(concat)), padding=padding)
    slices = [scope.take(name, "Slice") for name in equal.input]
    for s in slices:
        _need(len(s.input) == 3 or _axes(scope, s, 3) == [0], "a bag bound slice has axes")
    positions = [(_position(scope, s.input[1], counter), _position(scope, s.input[2], counter))
                 for s in slices]
    _need(sorted(positions) == [(0, 1), (1, 2)] and slices[0].input[0] == slices[1].input[0],
          "its bag bounds are not offsets[k] and offsets[k + 1]")
    start, end = (equal.input if positions[0] == (0, 1) else equal.input[::-1])
    bounds = slices[0].input[0]
    _need(_zeros(scope, _subgraph(branch, "then_branch")), "an empty bag is not zeros")
    otherwise = _subgraph(branch, "else_branch")
    inner = _Scope.of(otherwise, scope)
    out = inner.producers.get(otherwise.output[0].name)
    _need(out is not None and out.op_type in ("ReduceSum", "If", "ReduceMax"),
          "a bag is not a ReduceSum, the mean's If or a ReduceMax")
    if out.op_type == "ReduceMax":
        rows = _max_rows(inner, out, start, end, bounds, counter, count)
        inner.check_all_used()
        scope.check_all_used()
        main.outer(bounds, rows, count)
        table, indices, weights = _gathered_rows(main, rows)
        _need(weights is None, "its max bag scales its rows")
        return _Match((table, indices, bounds, bounds, count), concat.output[0], "max", 1,
                      (main.position(empty), main.position(concat)))
    rows_slice = next((n for n in inner.nodes if n.op_type == "Slice"), None)
    _need(rows_slice is not None and tuple(rows_slice.input[1:3]) == (start, end) and
          len(rows_slice.input) == 3, "a bag's rows are not sliced at its bounds")
    rows = rows_slice.input[0]
    inner.used.append(rows_slice)
    if out.op_type == "ReduceSum":
        mode = "sum"
        inner.used.append(out)
        _reduction(inner, out, keepdims=1)
        _need(out.input[0] == rows_slice.output[0], "a bag does not sum its rows")
    else:
        mode = "mean"
        last, others = _subgraph(out, "then_branch"), _subgraph(out, "else_branch")
        mean = _Scope.of(others, inner)
        reduce = mean.take(others.output[0].name, "ReduceMean")
        _reduction(mean, reduce, keepdims=1)
        mean.check_all_used()
        _need(reduce.input[0] == rows_slice.output[0], "a bag does not average its rows")
        ops = Counter(n.op_type for n in _ops(last))
        _need(set(ops) <= _LAST_MEAN_OPS and ops["ReduceSum"] == 1 and ops["Div"] == 1,
              "its last bag is not a sum divided by its length")
        inner.used.append(out)
        test = inner.take(out.input[0], "Equal")
        _need(counter in test.input, "its mean does not single out the last bag")
        inner.used.extend(n for n in inner.nodes if n.op_type == "Sub")
    inner.check_all_used()
    scope.check_all_used()
    main.outer(bounds, rows, count)
    table, indices, weights = _gathered_rows(main, rows)
    inputs = (table, indices, bounds, bounds, count) + ((weights,) if weights else ())
    return _Match(inputs, concat.output[0], mode, 1, (main.position(empty), main.position(concat)))


_REDUCTIONS = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max"}


def _padded(scope: _Scope, branch: onnx.NodeProto, equal: onnx.NodeProto, counter: str
            ) -> tuple[str, str, str, tuple[int, int | None], str]:
    """The dynamo form of a bag with ``padding_idx`` (``bounds``, ``rows``, ``ids``, (the
    padding id, the rows a negative id is moved by, if any), the mode): an inner Loop over the
    members ``bounds[k] <= j < bounds[k + 1]`` keeps the
    positions whose id (plus the table's rows when negative) is not the padding id; the bag is
    zeros when none is kept, else the reduction of ``rows`` gathered at the kept positions::

        kept, _ = Loop("", start < end, [], start) body(_, cond, kept, j):
            id = Gather(ids, j); id = If(id < 0, id + rows_of_table, id)
            kept = If(Not(id == padding), Concat(kept, Reshape(j, [-1])), kept)
            return j + 1 < end, kept, j + 1
        row = If(Size(kept) == 0, zeros, Reduce(Gather(rows, kept), [0]))
    """
    size = next(scope.producers[n] for n in equal.input
                if getattr(scope.producers.get(n), "op_type", "") == "Size")
    scope.used.append(size)
    zero = next(n for n in equal.input if n != size.output[0])
    if scope.ints(zero) is None:
        zero = scope.take(zero, "CastLike").input[0]
    _need(scope.ints(zero) == [0], "its empty-bag test is not Size(kept) == 0")
    _need(_zeros(scope, _subgraph(branch, "then_branch")), "an empty bag is not zeros")
    inner_loop = scope.take(size.input[0], "Loop")
    _need(len(inner_loop.input) == 4 and not inner_loop.input[0] and
          len(inner_loop.output) == 2 and size.input[0] in inner_loop.output,
          "its member loop does not carry (kept, j)")
    slot = list(inner_loop.output).index(size.input[0])      # either order, as exported
    kept_init = scope.const(inner_loop.input[2 + slot])
    _need(kept_init is not None and kept_init.size == 0, "its kept positions do not start empty")
    go = scope.take(inner_loop.input[1], "Less")
    start, end = go.input
    _need(start == inner_loop.input[3 - slot], "its member loop does not start at the bag's "
                                              "start")
    bounds = []
    for name, shift in ((start, 0), (end, 1)):
        pick = scope.take(name, "Gather")
        _need(int(_attribute(pick, "axis", 0)) == 0, "a bag bound is not read along axis 0")
        if shift:
            step = scope.take(pick.input[1], "Add")
            one = next(x for x in step.input if x != counter)
            if scope.ints(one) is None:
                one = scope.take(one, "CastLike").input[0]
            _need(counter in step.input and scope.ints(one) == [1],
                  "its bag ends are not offsets[k + 1]")
        else:
            _need(pick.input[1] == counter, "its bag starts are not offsets[k]")
        bounds.append(pick.input[0])
    _need(bounds[0] == bounds[1], "its bag bounds come from two arrays")
    body = _subgraph(inner_loop, "body")
    _need(len(body.input) == 4 and len(body.output) == 3, "its member loop's body is not "
                                                         "(_, cond, kept, j)")
    inner = _Scope.of(body, scope)
    j, kept_in = body.input[3 - slot].name, body.input[2 + slot].name
    cond_out, kept_out, j_out = body.output[0].name, body.output[1 + slot].name, \
        body.output[2 - slot].name
    advance = inner.take(j_out, "Add")
    _need(j in advance.input, "its member loop does not step j")
    less = inner.take(cond_out, "Less")
    _need(list(less.input) == [j_out, end], "its member loop does not run to the bag's end")
    keep = inner.take(kept_out, "If")
    negate = inner.take(keep.input[0], "Not")
    test = inner.take(negate.input[0], "Equal")
    padding_name = next((x for x in test.input if inner.ints(x) is not None), None)
    _need(padding_name is not None, "its padding id is not a constant")
    padding = inner.ints(padding_name)[0]
    normal = inner.take(next(x for x in test.input if x != padding_name), "If", "Gather")
    if normal.op_type == "If":                 # a negative id counts from the table's end
        negative = inner.take(normal.input[0], "Less")
        gather = inner.take(negative.input[0], "Gather")
        inner.used.extend(n for n in inner.nodes if n.op_type == "CastLike")
        moved_graph = _subgraph(normal, "then_branch")
        then_ops = [n.op_type for n in moved_graph.node]
        else_ops = [n.op_type for n in _subgraph(normal, "else_branch").node]
        _need(then_ops == ["Add"] and else_ops == ["Identity"] and
              negative.input[0] in moved_graph.node[0].input,
              "its negative ids are not moved by the table's rows")
        add = moved_graph.node[0]
        shift = _Scope.of(moved_graph, inner).ints(
            next(x for x in add.input if x != negative.input[0]))
        _need(shift is not None and len(shift) == 1, "its negative ids are not moved by a "
                                                     "constant")
        table_rows = shift[0]
    else:
        gather, table_rows = normal, None
    _need(gather.input[1] == j and int(_attribute(gather, "axis", 0)) == 0,
          "its member's id is not ids[j]")
    ids = gather.input[0]
    appended = {n.op_type: n for n in _subgraph(keep, "then_branch").node}
    skipped = list(_subgraph(keep, "else_branch").node)
    _need(sorted(appended) == ["Concat", "Reshape"] and
          list(appended["Concat"].input) == [kept_in, appended["Reshape"].output[0]] and
          appended["Reshape"].input[0] == j and len(skipped) == 1 and
          skipped[0].op_type == "Identity" and skipped[0].input[0] == kept_in,
          "it keeps a member otherwise than by appending j")
    inner.used.extend(n for n in inner.nodes if n.op_type == "CastLike")
    inner.check_all_used()
    otherwise = _subgraph(branch, "else_branch")
    reduce_scope = _Scope.of(otherwise, scope)
    reduce = reduce_scope.take(otherwise.output[0].name, *_REDUCTIONS)
    _reduction(reduce_scope, reduce, keepdims=1)
    picked = reduce_scope.take(reduce.input[0], "Gather")
    _need(picked.input[1] == size.input[0] and int(_attribute(picked, "axis", 0)) == 0,
          "a bag does not reduce the rows at its kept positions")
    reduce_scope.check_all_used()
    scope.used.append(scope.producers[inner_loop.input[1]])
    return bounds[0], picked.input[0], ids, (padding, table_rows), _REDUCTIONS[reduce.op_type]


def _max_rows(inner: _Scope, reduce: onnx.NodeProto, start: str, end: str, bounds: str,
              counter: str, count: str) -> str:
    """The gathered rows a dynamo max bag reduces: ``ReduceMax(If(k == count - 1,
    rows[start:size], rows[start:end]))`` over axis 0, keepdims 1, where ``size`` is the last
    entry of ``bounds`` (``Concat(offsets, size)``): the last bag ends there, so both branches
    take the bag's members."""
    inner.used.append(reduce)
    _reduction(inner, reduce, keepdims=1)
    picked = inner.take(reduce.input[0], "If", "Slice")
    branches = [picked] if picked.op_type == "Slice" else \
        [_only_node(_subgraph(picked, name)) for name in ("then_branch", "else_branch")]
    if picked.op_type == "If":
        test = inner.take(picked.input[0], "Equal")
        _need(counter in test.input, "its max bag's If does not single out the last bag")
        last = next((x for x in test.input if x != counter), counter)
        value, total = inner.ints(last), inner.ints(count)
        if value is None:           # count - 1, computed (a dynamic number of bags)
            minus = inner.take(last, "Sub")
            _need(minus.input[0] == count and inner.ints(minus.input[1]) == [1],
                  "its max bag's If does not single out the last bag")
        else:
            _need(total is not None and value == [total[0] - 1],
                  "its max bag's If does not single out the last bag")
        level, concat = inner, None
        while level is not None and concat is None:    # bounds come from the main graph
            concat, level = level.producers.get(bounds), level.parent
        to_end = concat.input[-1] if concat is not None and concat.op_type == "Concat" else None
    rows = {b.input[0] for b in branches}
    _need(len(rows) == 1 and all(len(b.input) == 3 for b in branches),
          "its max bag's slices read different rows or have axes")
    for branch in branches:
        _need(branch.input[1] == start and (branch.input[2] == end or (
            picked.op_type == "If" and branch.input[2] == to_end)),
              "a max bag's rows are not sliced at its bounds")
    return rows.pop()


def _only_node(graph: onnx.GraphProto) -> onnx.NodeProto:
    _need(len(graph.node) == 1 and len(graph.output) == 1 and
          graph.node[0].output[0] == graph.output[0].name,
          "a branch of its max bag is more than one Slice")
    _need(graph.node[0].op_type == "Slice", "a branch of its max bag is not a Slice")
    return graph.node[0]


def _gathered_rows(main: _Main, rows: str) -> tuple[str, str, str | None]:
    """(table, indices, weights) when ``rows`` is ``Gather(table, Reshape(x, [-1]))``, maybe
    times ``Unsqueeze(weights, [1])`` (ones: no weights); else ``(rows, "", None)``."""
    node = main.scope.producers.get(rows)
    while node is not None and node.op_type == "Identity":
        node = main.scope.producers.get(node.input[0])
    weights = None
    if node is not None and node.op_type == "Mul":
        gathered = [n for n in node.input
                    if getattr(main.scope.producers.get(n), "op_type", "") == "Gather"]
        if len(gathered) != 1:
            return rows, "", None
        factor = node.input[1] if node.input[0] == gathered[0] else node.input[0]
        weights = _weights_of(main.scope, factor)
        if weights is None:
            return rows, "", None
        node = main.scope.producers[gathered[0]]
        weights = weights or None
    if node is None or node.op_type != "Gather" or int(_attribute(node, "axis", 0)) != 0:
        return rows, "", None
    flat = main.scope.producers.get(node.input[1])
    if flat is None or flat.op_type != "Reshape" or main.scope.ints(flat.input[1]) != [-1]:
        return rows, "", None          # only a 1-D index keeps "row p of rows" = table[ids[p]]
    return node.input[0], node.input[1], weights


def _weights_of(scope: _Scope, factor: str) -> str | None:
    """The per-sample weights scaling the gathered rows: "" for ones, None if not that form."""
    value = scope.const(factor)
    if value is not None:
        return "" if value.ndim == 2 and value.shape[1] == 1 and np.all(value == 1) else None
    unsqueeze = scope.producers.get(factor)
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze":
        return None
    try:
        if _axes(scope, unsqueeze, 1) not in ([1], [-1]):
            return None
    except _NoMatch:
        return None
    source = unsqueeze.input[0]
    expand = scope.producers.get(source)
    if expand is not None and expand.op_type == "Expand":
        ones = scope.const(expand.input[0])
        if ones is not None and ones.size == 1 and ones.reshape(-1)[0] == 1:
            return ""
    ones = scope.const(source)
    if ones is not None and np.all(ones == 1) and ones.ndim <= 1:
        return ""
    return source


# ops whose values are sequences (which a Loop run iteration by iteration does not take)
SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert",
                           "SequenceAt", "SequenceErase", "SequenceLength", "SplitToSequence",
                           "ConcatFromSequence", "SequenceMap"})


def tensor_loop(loop: onnx.NodeProto) -> bool:
    """Whether ``loop`` (a Loop that is not an embedding bag) carries and makes tensors
    alone, so that it can run iteration by iteration on its body's nodes: no sequence op in
    its body (at any depth) and every value its body declares a tensor (or untyped)."""
    body = next((a.g for a in loop.attribute if a.name == "body"), None)
    if body is None:
        return False

    def tensors_only(graph: onnx.GraphProto) -> bool:
        for value in (*graph.input, *graph.output):
            if value.type.WhichOneof("value") not in (None, "tensor_type"):
                return False
        for node in graph.node:
            if node.op_type in SEQUENCE_OPS:
                return False
            for attribute in node.attribute:
                inner = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else \
                    list(attribute.graphs)
                if not all(tensors_only(g) for g in inner):
                    return False
        return True

    return tensors_only(body)


def recognise_bag_loops(graph: onnx.GraphProto, names: list[str]
                        ) -> tuple[dict[int, Node | None], list[str]]:
    """The ``EmbeddingBag`` node replacing each Loop of ``graph`` (by position; None for the
    SequenceEmpty/ConcatFromSequence it absorbs) and the notes for ``Graph.notes``. Any other
    Loop over tensors alone is left in place (the loader runs it iteration by iteration,
    ``frontend/load.runtime_loop``); one that carries sequences raises
    ``ta.UnsupportedError`` naming the node."""
    loops = [k for k, n in enumerate(graph.node) if n.op_type == "Loop" and
             n.domain in ("", "ai.onnx")]
    if not loops:
        return {}, []
    main = _Main.of(graph)
    protos = main.scope.nodes
    replaced: dict[int, Node | None] = {}
    forms: Counter[str] = Counter()
    for k in loops:
        loop = protos[k]
        form = TORCHSCRIPT if len(loop.input) <= 2 else SEQUENCE
        try:
            match = _torchscript(loop, main) if form == TORCHSCRIPT else \
                _sequence(loop, main, protos)
        except _NoMatch as why:
            if tensor_loop(loop):
                continue       # the loader runs it as it is (frontend/load.runtime_loop)
            raise ta.UnsupportedError(f"node {names[k]} (Loop, inputs {list(loop.input)}): "
                                      f"{_SUPPORTED}, or a loop over tensors alone; this one "
                                      f"does not match ({why}) and carries sequences") from None
        bag = LoopBag(names[k], form, match.mode, match.end_shift, match.empty, match.padding)
        replaced[k] = Node(names[k], "EmbeddingBag", match.inputs, (match.output,),
                           {"bag": bag}, 1, EMBEDDING_BAG_LOOP)
        replaced.update({d: None for d in match.dropped})
        forms[form] += 1
    if not forms:
        return replaced, []
    note = ", ".join(f"{n} {form}" for form, n in sorted(forms.items()))
    return replaced, [f"embedding bag loops: {sum(forms.values())} recognised at load "
                      f"({note})"]


__all__ = ["recognise_bag_loops", "TORCHSCRIPT", "SEQUENCE", "SEQUENCE_OPS"]
