"""Opt level 2: a ScatterND whose constant indices address a box of the data becomes a strided
copy (``BoxScatter``), or, where the box is all of it, the updates themselves; a
ScatterElements whose indices are an ``Expand`` reads the Expand's input instead
(``RowScatter``, below).

PyTorch exports a slice assignment (``attn[:, :, a:, b:] = ...``, as timm's MViTv2 adds its
relative position terms) as ScatterND with the coordinates of every element of the slice:
indices of shape ``(*q, m)`` built from one ``arange`` per axis. Scattering them one
coordinate tuple at a time (NumPy's fancy indexing) costs ~20 ns an element: 51 ms of
MViTv2-T's 250 at batch 1, for writes a slice assignment makes at memory speed. The pass
reads the indices once at load: where column ``k`` is ``start_k + step_k * i_k`` along the
``k``-th axis of ``q`` and constant along the others, the node keeps ``starts`` and ``steps``
and drops the indices. The bounds are checked at run time against the data's shape, as
ScatterND checks each index.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Graph, Node
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import OpImpl
from tensoralg.onnx.ops.scatter import in_range, scatter_elements, scatter_rows

BOX_OP = "BoxScatter"
ROW_OP = "RowScatter"


def box_of(indices: np.ndarray) -> tuple[list[int], list[int]] | None:
    """The ``(starts, steps)`` of a ScatterND's ``indices`` that address a box: shape
    ``(*q, m)`` with ``len(q) == m``, column ``k`` equal to ``start_k + step_k * i_k`` over
    the ``k``-th axis of ``q`` and constant over the others, starts non-negative, steps
    positive; None for any other indices.

    >>> grid = np.stack(np.meshgrid(np.arange(2), np.arange(1, 7, 2), indexing="ij"), -1)
    >>> box_of(grid)
    ([0, 1], [1, 2])
    >>> box_of(grid[::-1]) is None
    True
    """
    if indices.ndim < 2 or indices.shape[-1] != indices.ndim - 1 or indices.size == 0 or \
            indices.dtype.kind not in "iu":
        return None
    extents = indices.shape[:-1]
    starts, steps = [], []
    for k, extent in enumerate(extents):
        column = indices[..., k]
        start = int(column.reshape(-1)[0])
        step = int(column[(0,) * k + (1,) + (0,) * (len(extents) - k - 1)]) - start \
            if extent > 1 else 1
        if start < 0 or step < 1:
            return None
        along = start + step * np.arange(extent, dtype=np.int64)
        shape = [1] * len(extents)
        shape[k] = extent
        if not np.array_equal(column, np.broadcast_to(along.reshape(shape), extents)):
            return None
        starts.append(start)
        steps.append(step)
    return starts, steps


def box_scatter(node: NodeContext, data: np.ndarray, updates: np.ndarray, *,
                starts: list[int], steps: list[int]) -> np.ndarray:
    """The op function of a ``BoxScatter`` node: ``data`` with the box at ``starts`` (by
    ``steps``, as large as ``updates``' leading axes) replaced by ``updates``."""
    depth = len(starts)
    extents = updates.shape[:depth]
    if data.ndim < depth or updates.shape[depth:] != data.shape[depth:] or \
            len(extents) != depth:
        raise ta.ShapeError(f"{node}: the ScatterND's updates {updates.shape} do not fit a "
                            f"box of data "
                            f"{data.shape} over its first {depth} axes")
    if any(start + step * (extent - 1) >= size
           for start, step, extent, size in zip(starts, steps, extents, data.shape)
           if extent):
        raise ta.ShapeError(f"{node}: an index of the ScatterND is outside the data (its "
                            f"constant indices address the box at {starts} by steps {steps} "
                            f"of extents {extents}; the data has shape {data.shape})")
    values = updates.astype(data.dtype, copy=False)
    if all(start == 0 and step == 1 for start, step in zip(starts, steps)) and \
            extents == data.shape[:depth]:
        node.note("every element replaced: the updates (no copy)")
        return values
    node.note("strided copy of the updates into a copy of the data")
    out = data.copy()
    out[tuple(slice(start, start + step * (extent - 1) + 1, step)
              for start, step, extent in zip(starts, steps, extents))] = values
    return out


BOX_IMPL = OpImpl(BOX_OP, 1, box_scatter, None, frozenset({"starts", "steps"}))


def box_scatters(graph: Graph) -> Graph:
    """Replace each ScatterND (reduction none) whose constant indices address a box (see
    :func:`box_of`) by a ``BoxScatter`` of its data and updates; the indices constants no
    other node reads are dropped (MViTv2's first one holds 2.5 million int64 values)."""
    nodes: list[Node] = []
    replaced = 0
    dropped: set[str] = set()
    for node in graph.nodes:
        indices = graph.constants.get(node.inputs[1]) \
            if node.op_type == "ScatterND" and len(node.inputs) == 3 else None
        box = box_of(indices) if indices is not None and \
            node.attributes.get("reduction", "none") == "none" else None
        if box is None:
            nodes.append(node)
            continue
        nodes.append(Node(node.name, BOX_OP, (node.inputs[0], node.inputs[2]), node.outputs,
                          {"starts": box[0], "steps": box[1]}, 1, BOX_IMPL))
        dropped.add(node.inputs[1])
        replaced += 1
    read = {name for node in nodes for name in node.inputs} | {v.name for v in graph.outputs}
    for name in dropped - read:
        del graph.constants[name]
    graph.nodes = nodes
    graph.notes.append(f"box scatters: {replaced} ScatterND as strided copies")
    return graph


def row_scatter(node: NodeContext, data: np.ndarray, index: np.ndarray, shape: np.ndarray,
                updates: np.ndarray, *, axis: int = 0, reduction: str = "none") -> np.ndarray:
    """The op function of a ``RowScatter`` node: ``ScatterElements(data, Expand(index,
    shape), updates)``. Where ``index`` broadcasts along every axis but 0, and the updates
    are whole rows of the data, the scatter reads the index vector itself
    (:func:`~tensoralg.onnx.ops.scatter.scatter_rows`: no expanded index is built or
    compared); otherwise the Expand is made and the ScatterElements runs as it was written.

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> node = NodeContext("s", ROW_OP, ("d", "i", "s", "u"), ("y",), 1, KernelSet("llvm"))
    >>> row_scatter(node, np.zeros((3, 2)), np.array([[2], [2]]), np.array([2, 2]),
    ...             np.ones((2, 2)), reduction="max").tolist()
    [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    """
    target = np.asarray(shape).reshape(-1).astype(np.int64).tolist()
    try:
        expanded = np.broadcast_shapes(index.shape, tuple(target))
    except ValueError:
        raise ta.ShapeError(f"{node}: the index {index.shape} of the scatter does not expand "
                            f"to {target}") from None
    rank = len(expanded)
    lead = (1,) * (rank - index.ndim) + index.shape
    if reduction != "none" and rank == data.ndim and -rank <= axis < rank and \
            axis % rank == 0 and expanded == updates.shape and \
            updates.shape[1:] == data.shape[1:] and all(size == 1 for size in lead[1:]) and \
            updates.size and index.dtype.kind in "iu":
        rows = np.broadcast_to(index.reshape(-1), (expanded[0],))
        return scatter_rows(node, data, in_range(node, rows, data.shape[0], node.inputs[1]),
                            updates, reduction)
    node.note("the index expanded, then scattered element by element")
    return scatter_elements(node, data, np.broadcast_to(index, expanded), updates, axis=axis,
                            reduction=reduction)


ROW_IMPL = OpImpl(ROW_OP, 1, row_scatter, None, frozenset({"axis", "reduction"}))


def row_scatters(graph: Graph) -> Graph:
    """Give each ScatterElements that combines (a reduction other than "none") and whose
    indices an ``Expand`` makes the Expand's inputs instead (a ``RowScatter``); an Expand no
    other node reads is dropped. PyTorch Geometric's aggregations export this way (the edge
    index expanded over the feature axes): the expanded index is as large as the messages."""
    made = {out: node for node in graph.nodes for out in node.outputs}
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        expand = made.get(node.inputs[1]) if node.op_type == "ScatterElements" and \
            len(node.inputs) == 3 else None
        if expand is None or expand.op_type != "Expand" or \
                node.attributes.get("reduction", "none") == "none":
            nodes.append(node)
            continue
        nodes.append(Node(node.name, ROW_OP,
                          (node.inputs[0], *expand.inputs, node.inputs[2]), node.outputs,
                          {"axis": node.attributes.get("axis", 0),
                           "reduction": node.attributes["reduction"]}, 1, ROW_IMPL))
        replaced += 1
    read = {name for node in nodes for name in node.inputs} | {v.name for v in graph.outputs}
    graph.nodes = [node for node in nodes
                   if node.op_type != "Expand" or any(out in read for out in node.outputs)]
    graph.notes.append(f"row scatters: {replaced} ScatterElements read their index before "
                       f"its Expand")
    return graph


__all__ = ["BOX_OP", "ROW_OP", "box_of", "box_scatter", "box_scatters", "row_scatter",
           "row_scatters"]
