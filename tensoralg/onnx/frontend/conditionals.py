"""``If``: decided at load and replaced by the branch it takes, or run at run time.

Exporters turn Python ``if``s on tensor shapes into ``If`` nodes (deepctr's DCN tests the rank
of its input). When the condition is known at load, :func:`inline_decided_ifs` replaces the
node by the nodes of the branch it takes, before the graph is built, so that every opt level
sees one straight graph: fusion, the memory plan and the static plan run through it as if the
export had no ``If``. A condition is known when its value follows from

- initializers and ``Constant`` nodes;
- the parts of shapes that ``onnx.shape_inference`` proves static: ``Shape`` (or a slice of
  it), ``Size``, and ``Gather`` or ``Slice`` of known dimensions, even when other dimensions
  (the batch) are free;
- nodes computing on known values, evaluated by onnx's reference implementation
  (:mod:`tensoralg.onnx.frontend.reference`; only the nodes the conditions depend on, only on small
  values).

The inlined nodes keep their names under the If's (``if_1.then/Add``); a branch value whose
name is also used outside the branch is renamed the same way, and each branch output takes the
name of the If output it becomes.

Any other ``If`` becomes a node whose inputs are its condition and every outer value its
branches read (so liveness, dead-node removal and the static plan see them); at run time it
runs the branch its condition picks, node by node (:class:`Branch`).
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from tensoralg.onnx.frontend.graph import Graph, fresh_name
from tensoralg.onnx.frontend.reference import reference_fold
from tensoralg.onnx.ops.kernels import KernelSet
from tensoralg.onnx.ops.sampling import RANDOM_OPS
from tensoralg.onnx.plan.executor import Executor

# An inlined branch may hold Ifs of its own, decided in the next round; nesting deeper than
# this many rounds runs at run time.
MAX_ROUNDS = 16
# Values read or made while deciding conditions: shape arithmetic is small, and a larger value
# (a weight) is never a condition's input worth evaluating at load.
MAX_ELEMENTS = 4096
# Ops whose output size is an input's value: never evaluated while deciding.
_SIZED_BY_VALUE = frozenset({"ConstantOfShape", "Expand", "Range", "Tile", "Resize", "Pad"})


def inline_decided_ifs(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with every top-level ``If`` whose condition is known at load replaced by the
    taken branch's nodes (a new ModelProto; ``model`` itself is not changed), and a note per
    decided If. A model without decided Ifs comes back as it is."""
    notes: list[str] = []
    for _ in range(MAX_ROUNDS):
        ifs = [k for k, node in enumerate(model.graph.node) if node.op_type == "If"]
        if not ifs:
            break
        known = condition_values(model)
        decided = {}
        for k in ifs:
            value = known.get(model.graph.node[k].input[0])
            if value is not None and value.size == 1:
                decided[k] = bool(value.reshape(-1)[0])
        if not decided:
            break
        model = _inlined_model(model, decided, notes)
    return model, notes


# ---- deciding conditions ------------------------------------------------------------------


def condition_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The values known at load among those the top-level Ifs' conditions depend on."""
    return values_known_at_load(model, [node.input[0] for node in model.graph.node
                                        if node.op_type == "If" and node.input])


def values_known_at_load(model: onnx.ModelProto, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The values known at load among ``names`` and those they depend on in the top-level
    graph: initializers, and what Shape, Size and small arithmetic on known values give."""
    graph = model.graph
    nodes = list(graph.node)        # one wrapper per node, so that ids below stay valid
    producer = {name: node for node in nodes for name in node.output if name}
    wanted: set[str] = set()
    cone: set[int] = set()
    stack = [name for name in names if name]
    while stack:
        name = stack.pop()
        if not name or name in wanted:
            continue
        wanted.add(name)
        node = producer.get(name)
        if node is not None and id(node) not in cone:
            cone.add(id(node))
            # Shape and Size read only the shape of their input, which inference gives.
            if node.op_type not in ("Shape", "Size"):
                stack.extend(node.input)
    if not cone and not wanted:
        return {}
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer
             if init.name in wanted and math.prod(init.dims) <= MAX_ELEMENTS}
    partial: dict[str, list[int | None]] = {}
    dims = static_dims(model) if any(
        producer[name].op_type in ("Shape", "Size") for name in wanted if name in producer) \
        else {}
    for node in nodes:
        if id(node) in cone:
            _evaluate(node, known, partial, dims, model.opset_import)
    return known


def static_dims(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The dimensions shape inference finds for each value: an int where static, else None."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - without shapes, shape-decided Ifs run at run time
        inferred = model
    found: dict[str, list[int | None]] = {}
    graph = inferred.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tensor is not None and tensor.HasField("shape"):
            found[value.name] = [d.dim_value if d.HasField("dim_value") else None
                                 for d in tensor.shape.dim]
    found.update((init.name, list(init.dims)) for init in model.graph.initializer)
    return found


def _evaluate(node: onnx.NodeProto, known: dict[str, np.ndarray],
              partial: dict[str, list[int | None]], dims: dict[str, list[int | None]],
              opsets: Iterable[onnx.OperatorSetIdProto]) -> None:
    """Add what ``node`` makes known: a (partial) shape vector, or a value computed on known
    values. A node it cannot evaluate adds nothing."""
    op_type, inputs = node.op_type, list(node.input)
    if op_type in ("Shape", "Size"):
        shape = dims.get(inputs[0])
        if shape is None and inputs[0] in known:
            shape = list(known[inputs[0]].shape)
        if shape is None:
            return
        if op_type == "Size":
            if None not in shape:
                known[node.output[0]] = np.array(math.prod(shape), dtype=np.int64)
            return
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        # ONNX clamps start and end as Python's slicing does.
        _set_vector(node.output[0], shape[attributes.get("start", 0):attributes.get("end")],
                    known, partial)
        return
    if op_type == "Gather" and inputs[0] in partial and len(inputs) > 1 and \
            inputs[1] in known and _axis(node) == 0:
        vector, index = partial[inputs[0]], known[inputs[1]]
        if index.ndim > 1 or index.dtype.kind not in "iu" or \
                any(not -len(vector) <= i < len(vector) for i in index.reshape(-1).tolist()):
            return
        picked = [vector[i] for i in index.reshape(-1).tolist()]
        if index.ndim == 0:
            if picked[0] is not None:
                known[node.output[0]] = np.array(picked[0], dtype=np.int64)
        else:
            _set_vector(node.output[0], picked, known, partial)
        return
    if op_type == "Slice" and inputs[0] in partial and len(inputs) < 4 and \
            all(name in known for name in inputs[1:3]):
        # x.shape[a:b]: a slice of a partly known shape vector (axis 0, step 1)
        start, end = (int(known[name].reshape(-1)[0]) for name in inputs[1:3])
        _set_vector(node.output[0], partial[inputs[0]][start:end], known, partial)
        return
    if op_type in _SIZED_BY_VALUE or op_type in RANDOM_OPS or \
            any(name and name not in known for name in inputs):
        return
    if any(known[name].size > MAX_ELEMENTS for name in inputs if name):
        return
    results = reference_fold(node, known, opsets) or {}
    if all(value.size <= MAX_ELEMENTS for value in results.values()):
        known.update(results)


def _axis(node: onnx.NodeProto) -> int:
    for attribute in node.attribute:
        if attribute.name == "axis":
            return int(attribute.i)
    return 0


def _set_vector(name: str, vector: list[int | None], known: dict[str, np.ndarray],
                partial: dict[str, list[int | None]]) -> None:
    if None in vector:
        partial[name] = vector
    else:
        known[name] = np.array(vector, dtype=np.int64)


# ---- inlining the taken branch ------------------------------------------------------------


def _inlined_model(model: onnx.ModelProto, decided: dict[int, bool], notes: list[str]
                   ) -> onnx.ModelProto:
    graph = model.graph
    nodes: list[onnx.NodeProto] = []
    initializers: list[onnx.TensorProto] = []
    for k, node in enumerate(graph.node):
        if k not in decided:
            nodes.append(node)
            continue
        which = "then" if decided[k] else "else"
        branch = subgraph(node, f"{which}_branch")
        name = node.name or f"If_{k}"
        outside = _names_outside(model, k)
        inlined, constants = inlined_branch(node, branch, f"{name}.{which}", outside)
        nodes.extend(inlined)
        initializers.extend(constants)
        notes.append(f"node {name} (If) decided at load: its condition {node.input[0]} is "
                     f"{decided[k]}, so the {len(branch.node)} node(s) of its {which} branch "
                     f"replace it")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    result.graph.initializer.extend(initializers)
    return result


def subgraph(node: onnx.NodeProto, name: str) -> onnx.GraphProto:
    for attribute in node.attribute:
        if attribute.name == name and attribute.type == onnx.AttributeProto.GRAPH:
            return attribute.g
    raise onnx.checker.ValidationError(f"If node {node.name} has no {name}")


def inlined_branch(node: onnx.NodeProto, branch: onnx.GraphProto, prefix: str,
                   outside: set[str]) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes and initializers that compute ``node``'s outputs as ``branch`` does, named
    under ``prefix``; ``outside`` holds the value names used elsewhere (extended here)."""
    rename: dict[str, str] = {}
    for name in defined_names(branch):
        if name in outside:
            rename[name] = fresh_name(f"{prefix}/{name}", outside)
    produced = {name for n in branch.node for name in n.output if name}
    copies: list[tuple[str, str]] = []       # (branch value, If output) joined by an Identity
    for value, target in zip(branch.output, node.output):
        if not target:
            continue
        if value.name in produced and rename.get(value.name) not in node.output:
            rename[value.name] = target
        else:
            copies.append((value.name, target))
    nodes = [renamed_node(n, rename, f"{prefix}/{n.name or f'{n.op_type}_{j}'}")
             for j, n in enumerate(branch.node)]
    nodes += [onnx.helper.make_node("Identity", [rename.get(source, source)], [target],
                                    name=f"{prefix}/{target}") for source, target in copies]
    constants = []
    for tensor in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(tensor)
        copy.name = rename.get(tensor.name, tensor.name)
        constants.append(copy)
    return nodes, constants


def renamed_node(node: onnx.NodeProto, rename: dict[str, str], name: str) -> onnx.NodeProto:
    """A copy of ``node`` named ``name`` whose values are renamed by ``rename`` (also where
    its subgraphs read them from the outer scope)."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = name
    _rename_list(copy.input, rename)
    _rename_list(copy.output, rename)
    for attribute in copy.attribute:
        for graph in _graphs_of(attribute):
            _rename_free(graph, rename)
    return copy


def _rename_free(graph: onnx.GraphProto, rename: dict[str, str]) -> None:
    """Rename, in place, the outer values ``graph`` reads (its own values shadow outer ones)."""
    inner = {k: v for k, v in rename.items() if k not in defined_names(graph)}
    if not inner:
        return
    for node in graph.node:
        _rename_list(node.input, inner)
        for attribute in node.attribute:
            for sub in _graphs_of(attribute):
                _rename_free(sub, inner)
    for value in graph.output:
        value.name = inner.get(value.name, value.name)


def _rename_list(names: object, rename: dict[str, str]) -> None:
    renamed = [rename.get(n, n) for n in names]        # type: ignore[attr-defined]
    del names[:]                                       # type: ignore[index]
    names.extend(renamed)                              # type: ignore[attr-defined]


def _graphs_of(attribute: onnx.AttributeProto) -> Iterator[onnx.GraphProto]:
    if attribute.type == onnx.AttributeProto.GRAPH:
        yield attribute.g
    elif attribute.type == onnx.AttributeProto.GRAPHS:
        yield from attribute.graphs


def defined_names(graph: onnx.GraphProto) -> set[str]:
    """The values a graph defines: its inputs, initializers and node outputs."""
    names = {value.name for value in graph.input}
    names.update(tensor.name for tensor in graph.initializer)
    names.update(sparse.values.name for sparse in graph.sparse_initializer)
    names.update(name for node in graph.node for name in node.output if name)
    return names


def free_names(graph: onnx.GraphProto) -> list[str]:
    """The outer values a subgraph reads (through its nodes, nested subgraphs or outputs)."""
    local = defined_names(graph)
    found: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in local:
                found.setdefault(name)
        for attribute in node.attribute:
            for sub in _graphs_of(attribute):
                found.update((name, None) for name in free_names(sub) if name not in local)
    for value in graph.output:
        if value.name not in local:
            found.setdefault(value.name)
    return list(found)


def _names_outside(model: onnx.ModelProto, skipped: int) -> set[str]:
    """Every value name of ``model`` at any depth, except inside the subgraphs of its node
    number ``skipped``."""
    graph = model.graph
    names = defined_names(graph) | {value.name for value in graph.output}
    for k, node in enumerate(graph.node):
        names.update(n for n in [*node.input, *node.output] if n)
        if k != skipped:
            for attribute in node.attribute:
                for sub in _graphs_of(attribute):
                    names.update(_all_names(sub))
    return names


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = defined_names(graph) | {value.name for value in graph.output}
    for node in graph.node:
        names.update(n for n in node.input if n)
        for attribute in node.attribute:
            for sub in _graphs_of(attribute):
                names.update(_all_names(sub))
    return names


# ---- run-time Ifs ---------------------------------------------------------------------------


class Branch:
    """One branch of a run-time If: its graph (inputs: the outer values it reads), run node by
    node on the model's kernels."""

    def __init__(self, graph: Graph, label: str) -> None:
        self.graph = graph
        self.label = label
        self._executor: Executor | None = None

    def __str__(self) -> str:
        return f"{self.label} ({len(self.graph.nodes)} node(s))"

    def __repr__(self) -> str:
        return f"Branch({self})"

    def run(self, kernels: KernelSet, outer: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """The branch's outputs computed from the outer values ``outer`` (by name)."""
        executor = self._executor
        if executor is None or executor.kernels is not kernels:
            executor = self._executor = Executor(self.graph, kernels)
        values = executor.run({v.name: outer[v.name] for v in self.graph.inputs})
        return tuple(values[v.name] for v in self.graph.outputs)


__all__ = ["Branch", "condition_values", "defined_names", "free_names", "inline_decided_ifs",
           "inlined_branch", "renamed_node", "static_dims", "subgraph"]
