"""ScatterND, ScatterElements, OneHot, MaxUnpool and Col2Im: values written at positions read
from a tensor (Col2Im: at the positions of sliding blocks).

NumPy steps (data movement, like GatherND in ``indexing.py``), but for one case that graph
networks make hot: a ScatterElements ``add`` along axis 0 whose index is the same along every
other axis (PyTorch Geometric's message aggregation, ``out.index_add_(0, dst, messages)``
exported as an index expanded over the feature axes). That is a product with a sparse matrix of
one entry per column, ``Y(i,j) = D(i,j) + A(i,e) * U(e,j)`` with ``A`` in CSC (``A(dst[e], e)
= 1``), and runs as the core's compiled kernel (``np.add.at`` was two thirds of GCN's time;
``benchmarks/ONNX_HELD_OUT_THIRTEENTH_RESULTS.md`` has PyTorch Geometric's models before and
after). A ScatterND with a reduction whose indices each pick a whole row
(``x.index_put_((idx,), y, accumulate=True)``) takes the same route. Every index is checked
against its axis before anything is written: an index
outside the data is a ``ShapeError`` naming the node, never a write out of bounds. Negative
indices count from the end, as ONNX allows. Duplicate indices with ``reduction="none"`` leave
one of the written values, as onnxruntime does (ONNX leaves which undefined); the reductions
``add``, ``mul``, ``max`` and ``min`` combine every one of them (unbuffered ``ufunc.at``).
"""
from __future__ import annotations

import math

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op

_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(node: NodeContext, reduction: str):  # type: ignore[no-untyped-def]
    if reduction == "none":
        return None
    if reduction not in _REDUCTIONS:
        raise ta.UnsupportedError(f"{node}: reduction {reduction!r} is not one of none, "
                                  f"{', '.join(_REDUCTIONS)}")
    return _REDUCTIONS[reduction]


def in_range(node: NodeContext, index: np.ndarray, size: np.ndarray | int, what: str
             ) -> np.ndarray:
    """``index`` (int64) with negative entries counted from the end; ShapeError if any entry
    lies outside ``[-size, size)``."""
    index = index.astype(np.int64, copy=False)
    if index.size and ((index < -np.asarray(size)).any() or (index >= np.asarray(size)).any()):
        raise ta.ShapeError(f"{node}: an index of {what} is outside the data")
    return np.where(index < 0, index + size, index)


@op("ScatterND", since=11)
def scatter_nd(node: NodeContext, data: np.ndarray, indices: np.ndarray, updates: np.ndarray,
               *, reduction: str = "none") -> np.ndarray:
    """A copy of ``data`` with the slices addressed by the last axis of ``indices`` replaced by
    (or combined with) ``updates``: ``indices`` (*q, m) picks ``data[i_1, ..., i_m]``, and
    ``updates`` is (*q, *data.shape[m:])."""
    combine = _reduction(node, reduction)
    if indices.ndim < 1 or indices.shape[-1] > data.ndim:
        raise ta.ShapeError(f"{node}: indices {indices.shape} address more axes than data "
                            f"{data.shape} has")
    depth = indices.shape[-1]
    expected = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != expected:
        raise ta.ShapeError(f"{node}: updates {updates.shape} must be {expected} for data "
                            f"{data.shape} and indices {indices.shape}")
    flat = in_range(node, indices.reshape(-1, depth), np.array(data.shape[:depth]),
                     node.inputs[1])
    if depth == 1 and combine is not None and data.ndim >= 1:
        # whole rows at row indices (``x.index_put_(idx, y, accumulate=True)``, ``x[idx] +=
        # y``): the row scatter of ScatterElements
        return scatter_rows(node, data, flat.reshape(-1),
                            updates.reshape(flat.shape[0], *data.shape[1:]), reduction)
    out = data.copy()
    where = tuple(flat.T)
    values = updates.reshape(flat.shape[0], *data.shape[depth:]).astype(data.dtype, copy=False)
    node.note(f"numpy scatter ({reduction}, copy of the data)")
    if combine is None:
        out[where] = values
    else:
        combine.at(out, where, values)
    return out


@op("ScatterElements", since=11)
def scatter_elements(node: NodeContext, data: np.ndarray, indices: np.ndarray,
                     updates: np.ndarray, *, axis: int = 0, reduction: str = "none"
                     ) -> np.ndarray:
    """A copy of ``data`` with ``out[..., indices[..., i, ...], ...] = updates[..., i, ...]``
    along ``axis`` (or combined by ``reduction``); ``indices`` and ``updates`` share a shape of
    the rank of ``data``, no larger than it off the axis."""
    combine = _reduction(node, reduction)
    if indices.shape != updates.shape or indices.ndim != data.ndim or \
            not -data.ndim <= axis < max(data.ndim, 1):
        raise ta.ShapeError(f"{node}: indices {indices.shape} and updates {updates.shape} must "
                            f"match, with the rank of data {data.shape} and axis {axis} in it")
    axis %= max(data.ndim, 1)
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        raise ta.ShapeError(f"{node}: indices {indices.shape} exceed data {data.shape} off "
                            f"axis {axis}")
    rows = row_index(indices, updates, data, axis)
    if rows is not None and reduction != "none":
        return scatter_rows(node, data, in_range(node, rows, data.shape[0], node.inputs[1]),
                            updates, reduction)
    index = in_range(node, indices, data.shape[axis], node.inputs[1])
    out = data.copy()
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = index
    values = updates.astype(data.dtype, copy=False)
    node.note(f"numpy scatter along axis {axis} ({reduction}, copy of the data)")
    if combine is None:
        out[tuple(grid)] = values
    else:
        combine.at(out, tuple(np.broadcast_arrays(*grid)), values)
    return out


ROW_SUM = "Y(i,j) = A(i,e) * U(e,j)"
ROW_SUM_ONTO = "Y(i,j) = D(i,j) + A(i,e) * U(e,j)"
ROW_SUM_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64))


def row_index(indices: np.ndarray, updates: np.ndarray, data: np.ndarray, axis: int
              ) -> np.ndarray | None:
    """The index vector of a ScatterElements along axis 0 whose ``indices`` are the same along
    every other axis and whose updates span the data's other axes (so each update is a whole
    row of the data): ``indices[:, 0, ..., 0]``; None otherwise. Costs one comparison pass
    over ``indices`` (a nanosecond an element, where ``ufunc.at`` takes tens).

    >>> row_index(np.array([[2, 2], [0, 0]]), np.ones((2, 2)), np.zeros((3, 2)), 0).tolist()
    [2, 0]
    >>> row_index(np.array([[2, 1], [0, 0]]), np.ones((2, 2)), np.zeros((3, 2)), 0) is None
    True
    """
    if axis != 0 or data.ndim < 1 or updates.shape[1:] != data.shape[1:] or \
            indices.shape != updates.shape or not indices.size:
        return None
    rows = indices.reshape(indices.shape[0], -1)
    first = rows[:, :1]
    if rows.shape[1] > 1 and not (rows == first).all():
        return None
    return first.reshape(-1)


def scatter_rows(node: NodeContext, data: np.ndarray, rows: np.ndarray, updates: np.ndarray,
                 reduction: str) -> np.ndarray:
    """``data`` (N, ...) with each ``updates[e]`` combined into row ``rows[e]`` by
    ``reduction`` (not "none"); ``rows`` in range, ``updates`` (len(rows), *data.shape[1:]).

    ``add`` in float32, float64, int32 or int64 is the core's product with the one-entry-per-
    column CSC matrix ``A(rows[e], e) = 1`` (the module docstring says why); ``max`` and
    ``min`` a generated loop (``program.scattered_extremes``) in the same dtypes; ``mul``,
    and the other dtypes, ``ufunc.at`` in the updates' order (as onnxruntime rounds).
    """
    combine = _reduction(node, reduction)
    values = updates.astype(data.dtype, copy=False)
    count = rows.shape[0]
    if not count or not data.size:
        node.note("empty scatter: a copy of the data")
        return data.copy()
    if reduction in ("max", "min"):
        out = program.scattered_extremes(data, rows, values, reduction == "max")
        if out is not None:
            node.note(f"generated scatter of {count} rows ({reduction})")
            return out
    elif reduction == "add" and data.dtype in ROW_SUM_DTYPES:
        table = data.reshape(data.shape[0], -1)
        matrix = ta.Tensor((table.shape[0], count), ta.CSC,
                           [None, (np.arange(count + 1, dtype=np.int64), rows)],
                           np.ones(count, data.dtype), check=False)  # rows checked by the caller
        parts = values.reshape(count, -1)
        if table.any():
            out = node.run(ROW_SUM_ONTO, data.dtype, formats={"A": ta.CSC}, D=table,
                           A=matrix, U=parts)
        else:
            out = node.run(ROW_SUM, data.dtype, formats={"A": ta.CSC}, A=matrix, U=parts)
        return np.asarray(out).reshape(data.shape)
    # mul, and the dtypes above take neither: in the order the updates come, as onnxruntime
    # combines them
    node.note(f"numpy scatter of {count} rows ({reduction}, copy of the data)")
    out = data.copy()
    combine.at(out, rows, values)
    return out


@op("OneHot", since=11)
def one_hot(node: NodeContext, indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *,
            axis: int = -1) -> np.ndarray:
    """``values[1]`` where the new axis's position equals the index, ``values[0]`` elsewhere;
    negative indices count from the end of ``depth``, others outside it give a row of
    ``values[0]`` (as ONNX specifies)."""
    size = np.asarray(depth).reshape(-1)
    if size.size != 1 or np.asarray(values).size != 2:
        raise ta.ShapeError(f"{node}: depth must be one value and values two (off, on)")
    count = int(size[0])
    if count < 1:
        raise ta.ShapeError(f"{node}: depth {count} must be positive")
    rank = indices.ndim + 1
    if not -rank <= axis < rank:
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    off, on = np.asarray(values).reshape(-1)
    index = indices.astype(np.int64) if indices.dtype.kind in "iub" else \
        np.trunc(indices).astype(np.int64)
    index = np.where(index < 0, index + count, index)
    positions = np.arange(count).reshape([count if d == axis else 1 for d in range(rank)])
    hot = np.expand_dims(index, axis) == positions
    node.note("numpy one-hot comparison")
    return np.where(hot, on, off).astype(np.asarray(values).dtype)


@op("MaxUnpool", since=11)
def max_unpool(node: NodeContext, x: np.ndarray, indices: np.ndarray,
               output_shape: np.ndarray | None = None, *, kernel_shape: list[int],
               pads: list[int] | None = None, strides: list[int] | None = None) -> np.ndarray:
    """The inverse of MaxPool with indices (SegNet's decoder): zeros of the pooled input's
    shape with each value of ``x`` written at its flat index from MaxPool's ``Indices``
    (which count over the whole ``(N, C, *spatial)`` tensor). The shape is ``output_shape``
    when given, else ``(in - 1) * stride + kernel - pad_begin - pad_end`` per spatial axis.

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> node = NodeContext("u", "MaxUnpool", ("x", "i"), ("y",), 11, KernelSet("llvm"))
    >>> max_unpool(node, np.array([[[[5.0]]]]), np.array([[[[3]]]]), kernel_shape=[2, 2],
    ...            strides=[2, 2]).tolist()
    [[[[0.0, 0.0], [0.0, 5.0]]]]
    """
    rank = len(kernel_shape)
    strides = list(strides or [1] * rank)
    pads = list(pads or [0] * (2 * rank))
    if x.ndim != rank + 2 or indices.shape != x.shape or len(strides) != rank or \
            len(pads) != 2 * rank:
        raise ta.ShapeError(f"{node}: x {x.shape} must be (N, C, *spatial) of the rank of "
                            f"kernel_shape {list(kernel_shape)} (strides {strides}, pads "
                            f"{pads}), and indices {indices.shape} the same shape")
    if indices.dtype.kind not in "iu":
        raise ta.ShapeError(f"{node}: indices must be integers, got {indices.dtype}")
    if output_shape is not None:
        shape = tuple(int(v) for v in np.asarray(output_shape).reshape(-1))
        if len(shape) != x.ndim or shape[:2] != x.shape[:2] or min(shape) < 0:
            raise ta.ShapeError(f"{node}: output_shape {list(shape)} must be (N, C, *spatial) "
                                f"with x's N and C {list(x.shape[:2])}")
    else:
        shape = x.shape[:2] + tuple(
            (x.shape[d + 2] - 1) * strides[d] + kernel_shape[d] - pads[d] - pads[d + rank]
            for d in range(rank))
        if min(shape) < 0:
            raise ta.ShapeError(f"{node}: kernel_shape {list(kernel_shape)}, strides {strides}"
                                f" and pads {pads} give a negative output shape {shape}")
    out = np.zeros(math.prod(shape), dtype=x.dtype)
    flat = indices.reshape(-1).astype(np.int64, copy=False)
    if flat.size and (flat.min() < 0 or flat.max() >= out.size):
        raise ta.ShapeError(f"{node}: an index of {node.inputs[1]} is outside the output "
                            f"{list(shape)} ({out.size} values)")
    node.note(f"numpy scatter into zeros {list(shape)}")
    out[flat] = x.reshape(-1)
    return out.reshape(shape)


__all__ = ["ROW_SUM", "ROW_SUM_ONTO", "in_range", "max_unpool", "one_hot", "row_index",
           "scatter_elements", "scatter_nd", "scatter_rows"]


@op("Col2Im", since=18)
def col2im(node: NodeContext, x: np.ndarray, image_shape: np.ndarray, block_shape: np.ndarray,
           *, dilations: list[int] | None = None, pads: list[int] | None = None,
           strides: list[int] | None = None) -> np.ndarray:
    """The inverse of im2col (PyTorch's ``nn.Fold``): ``x`` of shape ``(N, C * prod(block),
    L)`` holds one column per sliding block of the padded image; each column's values are
    added back at the positions its block covers, and the padding is cut off, giving
    ``(N, C, *image_shape)``. Overlapping blocks sum, in block order (one strided NumPy add
    per position within a block: as many adds as the block has positions, each over every
    block at once)."""
    image = [int(v) for v in np.asarray(image_shape).reshape(-1)]
    block = [int(v) for v in np.asarray(block_shape).reshape(-1)]
    rank = len(image)
    dilations = list(dilations or [1] * rank)
    strides = list(strides or [1] * rank)
    pads = list(pads or [0] * (2 * rank))
    if len(block) != rank or len(dilations) != rank or len(strides) != rank or \
            len(pads) != 2 * rank or rank == 0 or x.ndim != 3:
        raise ta.ShapeError(f"{node}: input {x.shape} must be (N, C * prod(block), L); "
                            f"image_shape {image}, block_shape {block}, dilations "
                            f"{dilations}, strides {strides} and pads {pads} must agree in "
                            f"rank")
    if min(block + dilations + strides) < 1 or min(image) < 0 or min(pads) < 0:
        raise ta.ShapeError(f"{node}: block_shape {block}, dilations {dilations} and strides "
                            f"{strides} must be positive, image_shape {image} and pads {pads} "
                            f"not negative")
    padded = [size + pads[d] + pads[d + rank] for d, size in enumerate(image)]
    reach = [dilations[d] * (block[d] - 1) + 1 for d in range(rank)]
    counts = [(padded[d] - reach[d]) // strides[d] + 1 if padded[d] >= reach[d] else 0
              for d in range(rank)]
    per_block = math.prod(block)
    if x.shape[1] % per_block or x.shape[2] != math.prod(counts):
        raise ta.ShapeError(f"{node}: input {x.shape} does not hold C * {per_block} rows and "
                            f"{math.prod(counts)} blocks ({' x '.join(map(str, counts))}) "
                            f"of the padded image {padded}")
    n, channels = x.shape[0], x.shape[1] // per_block
    columns = x.reshape(n, channels, *block, *counts)
    out = np.zeros((n, channels, *padded), dtype=x.dtype)
    node.note(f"numpy strided adds ({per_block} block positions)")
    for offset in np.ndindex(*block):
        target = tuple(slice(o * dilations[d], o * dilations[d] + strides[d] * (counts[d] - 1) + 1,
                             strides[d]) for d, o in enumerate(offset))
        out[(slice(None), slice(None), *target)] += columns[(slice(None), slice(None), *offset)]
    return np.ascontiguousarray(out[(slice(None), slice(None),
                                     *(slice(pads[d], pads[d] + image[d]) for d in range(rank)))])
