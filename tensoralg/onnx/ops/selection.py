"""ArgMax, ArgMin, TopK, Hardmax, NonZero and Compress: elements chosen by comparing them.

NumPy steps, but for TopK: their results are positions, and the statement language reduces
values, not the indices of extremes (``max`` keeps the value, not where it was). Ties go to the
first position, as in onnxruntime, unless ``select_last_index`` asks for the last; TopK's order
among equal values is by position, as ONNX specifies. TopK with ``k`` up to
``runtime.select.MAX_K`` runs a generated row kernel (``program.top_k``): one insertion pass
per row instead of a sort of every row; larger ``k`` over float32 or int32 rows sorts packed
(value, position) keys (``_packed_order``), others NumPy's stable argsort.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.movement import _axis
from tensoralg.onnx.ops.registry import op


def _arg_extreme(node: NodeContext, x: np.ndarray, axis: int, keepdims: int,
                 select_last_index: int, largest: bool) -> np.ndarray:
    axis = _axis(node, axis, x.ndim)
    if x.shape[axis] == 0:
        raise ta.ShapeError(f"{node}: axis {axis} of {x.shape} is empty: no position to return")
    pick = np.argmax if largest else np.argmin
    name = "argmax" if largest else "argmin"
    if select_last_index:
        # The last of equal extremes: the first one in the reversed axis, counted back.
        flipped = np.flip(x, axis)
        found = x.shape[axis] - 1 - pick(flipped, axis=axis)
        node.note(f"numpy {name} (last index)")
    else:
        found = pick(x, axis=axis)
        node.note(f"numpy {name}")
    found = found.astype(np.int64)
    return np.expand_dims(found, axis) if keepdims else found


@op("ArgMax", since=11)
def arg_max(node: NodeContext, x: np.ndarray, *, axis: int = 0, keepdims: int = 1,
            select_last_index: int = 0) -> np.ndarray:
    """The position (int64) of the largest value along ``axis``; the first of equals unless
    ``select_last_index``. A NaN counts as the largest, as in NumPy."""
    return _arg_extreme(node, x, axis, keepdims, select_last_index, True)


@op("ArgMin", since=11)
def arg_min(node: NodeContext, x: np.ndarray, *, axis: int = 0, keepdims: int = 1,
            select_last_index: int = 0) -> np.ndarray:
    """The position (int64) of the smallest value along ``axis`` (see ArgMax)."""
    return _arg_extreme(node, x, axis, keepdims, select_last_index, False)


# Arrays of at least this many values take the packed sort; on fewer the stable argsort costs
# less than building the keys (TabNet at batch 1, one row of 221: ~5 µs against ~20).
PACKED_MIN_VALUES = 8192


def _packed_order(x: np.ndarray, axis: int, largest: bool, count: int | None = None
                  ) -> np.ndarray | None:
    """The positions along ``axis`` of ``x`` (float32 or int32) in TopK's order, by one
    unstable sort of 64-bit keys, the value's order-preserving bits above its position: ties
    then come in position order as a stable sort puts them, and NaNs (whichever end) last;
    -0.0 and 0.0 tie. NumPy's vectorised sort of integers takes ~0.6 ms for TabNet's
    256 x 221 sparsemax rows where the stable argsort of the values took ~1.7 (ad hoc,
    2026-12-06). With ``count``, only the first ``count`` positions (when they are a
    quarter of the axis or less: partitioned first, then sorted). None for other dtypes and
    small arrays."""
    length = x.shape[axis]
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.int32)) or x.size < PACKED_MIN_VALUES \
            or length >= 2**32:
        return None
    moved = np.moveaxis(x, axis, -1)
    if x.dtype.kind == "f":
        values = moved + np.float32(0.0)                       # -0.0 becomes 0.0
        bits = values.view(np.uint32)
        ordered = np.where(bits >> 31, ~bits, bits | np.uint32(0x80000000))
    else:
        ordered = moved.view(np.uint32) ^ np.uint32(0x80000000)
    high = ~ordered if largest else ordered
    if x.dtype.kind == "f":
        high = np.where(np.isnan(moved), np.uint32(0xFFFFFFFF), high)
    keys = (high.astype(np.uint64) << np.uint64(32)) | np.arange(length, dtype=np.uint64)
    if count is not None and 0 < count < length // 4:
        # The keys are distinct (each holds its position), so the ``count`` smallest are
        # exactly TopK's: a partition then a sort of those (the best 1000 of 1.3e6 float32
        # scores, RetinaNet's TopK size: 32 ms against 95 for the full sort; ad hoc, AMD
        # EPYC VM, 2026-12-07)
        keys = np.partition(keys, count - 1, axis=-1)[..., :count]
    keys.sort(axis=-1)
    order = (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
    return np.moveaxis(order, -1, axis)


@op("TopK", since=11)
def top_k(node: NodeContext, x: np.ndarray, k: np.ndarray, *, axis: int = -1, largest: int = 1,
          sorted: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (or smallest) values along ``axis`` and their positions (int64), in
    order; equal values by position. ``sorted=0`` is answered sorted too (ONNX leaves the
    order free then)."""
    axis = _axis(node, axis, x.ndim)
    count = int(np.asarray(k).reshape(-1)[0]) if np.size(k) == 1 else -1
    if not 0 <= count <= x.shape[axis]:
        raise ta.ShapeError(f"{node}: k = {np.asarray(k).tolist()} must be one value in "
                            f"[0, {x.shape[axis]}] for axis {axis} of {x.shape}")
    compiled = program.top_k(x, count, axis, bool(largest))
    if compiled is not None:
        node.note("generated top-k row kernel (one insertion pass per row)")
        return compiled
    packed = _packed_order(x, axis, bool(largest), count)
    if packed is not None:
        node.note("numpy sort of packed (value, position) keys")
        chosen = packed[(slice(None),) * axis + (slice(0, count),)]
        return np.take_along_axis(x, chosen, axis=axis), np.ascontiguousarray(chosen)
    # A stable sort keeps equal values in position order; the largest come first by sorting
    # keys in the reverse order: -x for floats, the complement ~x for integers and bools (-x
    # overflows for the most negative integer; ~x reverses unsigned values too).
    keys = x if not largest else -x if x.dtype.kind == "f" else ~x
    order = np.argsort(keys, axis=axis, kind="stable")
    chosen = order[(slice(None),) * axis + (slice(0, count),)]     # a view, not a take
    node.note("numpy stable argsort")
    return (np.take_along_axis(x, chosen, axis=axis),
            np.ascontiguousarray(chosen, dtype=np.int64))


@op("Hardmax", since=13)
def hardmax(node: NodeContext, x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """1 at the first largest value along ``axis``, 0 elsewhere, in the dtype of ``x``."""
    axis = _axis(node, axis, x.ndim)
    out = np.zeros_like(x)
    if x.size:
        np.put_along_axis(out, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    node.note("numpy argmax, one-hot")
    return out


@op("NonZero", since=9)
def non_zero(node: NodeContext, x: np.ndarray) -> np.ndarray:
    """The coordinates (int64, rank x count) of the nonzero elements, in row-major order."""
    node.note("numpy nonzero")
    if x.ndim == 0:      # as a 1-element vector, as onnx's reference answers
        return np.zeros((1, int(bool(x))), np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@op("Compress", since=11)
def compress(node: NodeContext, x: np.ndarray, condition: np.ndarray, *, axis: int | None = None
             ) -> np.ndarray:
    """The slices of ``x`` along ``axis`` (of the flattened ``x`` without one) where
    ``condition`` is true; ``condition`` may be shorter than the axis."""
    keep = np.asarray(condition).reshape(-1).astype(bool)
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = _axis(node, axis, x.ndim)
    if keep.size > x.shape[axis]:
        raise ta.ShapeError(f"{node}: condition has {keep.size} values for {x.shape[axis]} "
                            "slices")
    node.note("numpy compress")
    return np.compress(keep, x, axis=axis)


@op("Unique", since=11)
def unique(node: NodeContext, x: np.ndarray, *, axis: int | None = None, sorted: int = 1
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct values (or slices along ``axis``) of ``x``, sorted or in order of first
    appearance, with the index of each one's first appearance, each element's index among
    them, and their counts (int64), in NumPy."""
    if axis is not None:
        axis = _axis(node, axis, x.ndim)
    node.note("numpy unique")
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        # the order of first appearance: renumber the sorted groups by where each begins
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return (values, first.astype(np.int64), inverse.astype(np.int64),
            counts.astype(np.int64))
