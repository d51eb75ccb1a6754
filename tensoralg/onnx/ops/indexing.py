"""Expand, GatherND and GatherElements: data movement in NumPy (Expand is a broadcast view, no copy)."""
from __future__ import annotations

import math

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


@op("Expand", since=8)
def expand(node: NodeContext, x: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Bidirectional NumPy broadcasting of ``x`` with ``shape``: a read-only strided view."""
    target = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    try:
        out = np.broadcast_shapes(x.shape, target)
    except ValueError:
        raise ta.ShapeError(f"{node}: {x.shape} does not broadcast with {list(target)}"
                            ) from None
    node.note("numpy broadcast_to (strided view, no copy)")
    return np.broadcast_to(x, out)


@op("GatherND", since=11)
def gather_nd(node: NodeContext, data: np.ndarray, indices: np.ndarray, *,
              batch_dims: int = 0) -> np.ndarray:
    """Slices of ``data`` addressed by the last axis of ``indices``, per batch entry.

    With ``b`` batch axes, ``indices`` of shape ``(*batch, *q, m)`` picks
    ``data[batch][i_1, ..., i_m]`` for every ``q``; the result is ``(*batch, *q, *rest)``.
    """
    if indices.ndim < 1 or not 0 <= batch_dims < min(data.ndim, indices.ndim):
        raise ta.ShapeError(f"{node}: batch_dims={batch_dims} with data {data.shape} and "
                            f"indices {indices.shape}")
    batch = data.shape[:batch_dims]
    if indices.shape[:batch_dims] != batch:
        raise ta.ShapeError(f"{node}: batch axes differ: {data.shape} and {indices.shape}")
    depth = indices.shape[-1]
    if depth > data.ndim - batch_dims:
        raise ta.ShapeError(f"{node}: index depth {depth} exceeds the rank of a data slice")
    sizes = data.shape[batch_dims:batch_dims + depth]
    rest = data.shape[batch_dims + depth:]
    queries = indices.shape[batch_dims:-1]
    flat_data = data.reshape(math.prod(batch), *data.shape[batch_dims:])
    flat_index = indices.reshape(math.prod(batch), math.prod(queries), depth).astype(np.int64)
    bounds = np.array(sizes, dtype=np.int64)
    if flat_index.size and ((flat_index < -bounds).any() or (flat_index >= bounds).any()):
        raise ta.ShapeError(f"{node}: an index of {node.inputs[1]} is outside data {data.shape}")
    rows = np.arange(flat_data.shape[0])[:, None]
    node.note("numpy advanced indexing (copy)")
    picked = flat_data[(rows, *np.moveaxis(flat_index, -1, 0))]
    return picked.reshape(*batch, *queries, *rest)


@op("GatherElements", since=11)
def gather_elements(node: NodeContext, data: np.ndarray, indices: np.ndarray, *,
                    axis: int = 0) -> np.ndarray:
    """``out[..., i, ...] = data[..., indices[..., i, ...], ...]`` along ``axis``: NumPy's
    ``take_along_axis`` (BERT's position ids of transformers 5 come through it).

    ``indices`` has the rank of ``data``; negative indices count from the end."""
    if indices.ndim != data.ndim or not -data.ndim <= axis < data.ndim:
        raise ta.ShapeError(f"{node}: indices {indices.shape} must have the rank of data "
                            f"{data.shape}, and axis {axis} be one of its axes")
    axis %= data.ndim
    size = data.shape[axis]
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        raise ta.ShapeError(f"{node}: indices {indices.shape} exceed data {data.shape} "
                            f"outside axis {axis}")
    index = indices.astype(np.int64, copy=False)
    if index.size and (index.min() < -size or index.max() >= size):
        raise ta.ShapeError(f"{node}: an index of {node.inputs[1]} is outside [-{size}, {size})")
    node.note(f"numpy take_along_axis {axis} (copy)")
    window = data[tuple(slice(0, i) if a != axis else slice(None)
                        for a, i in enumerate(indices.shape))]
    return np.take_along_axis(window, np.where(index < 0, index + size, index), axis=axis)
