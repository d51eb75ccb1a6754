"""Data movement in NumPy, without copies where NumPy allows: views for Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Slice and Identity; Gather (embedding lookups) and Concat copy.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


def _axis(node: NodeContext, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ta.ShapeError(f"{node}: {what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


@op("Identity", since=1)
def identity(node: NodeContext, x: np.ndarray) -> np.ndarray:
    node.note("alias (no copy)")
    return x


@op("Reshape", since=5)
def reshape(node: NodeContext, x: np.ndarray, shape: np.ndarray, *, allowzero: int = 0
            ) -> np.ndarray:
    """NumPy reshape; 0 copies the input's dimension unless ``allowzero``; -1 is inferred."""
    target = [int(d) for d in np.asarray(shape).reshape(-1)]
    if not allowzero:
        target = [x.shape[k] if d == 0 and k < x.ndim else d for k, d in enumerate(target)]
    node.note("numpy reshape (view when contiguous)")
    try:
        return x.reshape(target)
    except ValueError:
        raise ta.ShapeError(f"{node}: cannot reshape {x.shape} to {target}") from None


@op("Flatten", since=1)
def flatten(node: NodeContext, x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    if not -x.ndim <= axis <= x.ndim:
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {x.ndim}")
    if axis < 0:
        axis += x.ndim
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    node.note("numpy reshape to 2-D (view when contiguous)")
    return x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))


@op("Transpose", since=1)
def transpose(node: NodeContext, x: np.ndarray, *, perm: Sequence[int] | None = None
              ) -> np.ndarray:
    # A contiguous copy, not a strided view: every kernel reading it would copy it anyway.
    node.note("numpy transpose (copy, C order)")
    if perm is not None and sorted(perm) != list(range(x.ndim)):
        raise ta.ShapeError(f"{node}: perm {list(perm)} is not a permutation of {x.ndim} axes")
    return np.ascontiguousarray(np.transpose(x, perm)) if x.ndim else x.copy()


def _squeeze(node: NodeContext, x: np.ndarray, axes: Sequence[int] | None) -> np.ndarray:
    node.note("numpy squeeze (view)")
    if axes is None or len(axes) == 0:
        return np.squeeze(x)
    chosen = tuple(_axis(node, int(a), x.ndim) for a in np.asarray(axes).reshape(-1))
    for a in chosen:
        if x.shape[a] != 1:
            raise ta.ShapeError(f"{node}: cannot squeeze axis {a} of size {x.shape[a]}")
    return np.squeeze(x, axis=chosen)


@op("Squeeze", since=1)
def squeeze_v1(node: NodeContext, x: np.ndarray, *, axes: Sequence[int] | None = None
               ) -> np.ndarray:
    return _squeeze(node, x, axes)


@op("Squeeze", since=13)
def squeeze(node: NodeContext, x: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    return _squeeze(node, x, axes)


def _unsqueeze(node: NodeContext, x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    node.note("numpy expand_dims (view)")
    rank = x.ndim + len(axes)
    chosen = sorted(_axis(node, int(a), rank) for a in np.asarray(axes).reshape(-1))
    if len(set(chosen)) != len(chosen):
        raise ta.ShapeError(f"{node}: repeated axes {list(axes)}")
    return np.expand_dims(x, tuple(chosen))


@op("Unsqueeze", since=1)
def unsqueeze_v1(node: NodeContext, x: np.ndarray, *, axes: Sequence[int]) -> np.ndarray:
    return _unsqueeze(node, x, axes)


@op("Unsqueeze", since=13)
def unsqueeze(node: NodeContext, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    return _unsqueeze(node, x, np.asarray(axes).reshape(-1).tolist())


@op("Slice", since=10)
def slice_(node: NodeContext, x: np.ndarray, starts: np.ndarray, ends: np.ndarray,
           axes: np.ndarray | None = None, steps: np.ndarray | None = None) -> np.ndarray:
    """Basic NumPy slicing (a view); ONNX clamps out-of-range starts and ends as NumPy does."""
    starts = np.asarray(starts).reshape(-1).tolist()
    ends = np.asarray(ends).reshape(-1).tolist()
    axes_list = list(range(len(starts))) if axes is None else \
        [_axis(node, int(a), x.ndim) for a in np.asarray(axes).reshape(-1)]
    steps_list = [1] * len(starts) if steps is None else np.asarray(steps).reshape(-1).tolist()
    if not len(starts) == len(ends) == len(axes_list) == len(steps_list):
        raise ta.ShapeError(f"{node}: starts, ends, axes and steps differ in length")
    index: list[slice] = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes_list, steps_list):
        if step == 0:
            raise ta.ShapeError(f"{node}: step 0 on axis {axis}")
        size = x.shape[axis]
        # Huge sentinels (INT64_MAX / INT64_MIN) mean "to the end": clamp before slicing.
        start = max(min(start, size), -size - 1)
        end = max(min(end, size), -size - 1)
        if step < 0 and end < -size:
            end = None
        index[axis] = slice(start, end, step)
    node.note("numpy slice (view)")
    return x[tuple(index)]


def _split(node: NodeContext, x: np.ndarray, sizes: np.ndarray | Sequence[int] | None,
           axis: int, parts: int | None = None) -> tuple[np.ndarray, ...]:
    """``x`` cut along ``axis`` into pieces of ``sizes``, or into ``parts`` (by default one per
    output) equal pieces, the last one smaller when they cannot be equal (opset 18's rule)."""
    axis = _axis(node, int(axis), x.ndim)
    length = x.shape[axis]
    if sizes is not None and np.asarray(sizes).size:
        pieces = [int(n) for n in np.asarray(sizes).reshape(-1)]
        if any(n < 0 for n in pieces) or sum(pieces) != length:
            raise ta.ShapeError(f"{node}: split sizes {pieces} do not add up to {length}, the "
                                f"length of axis {axis}")
    else:
        count = int(parts) if parts is not None else len(node.outputs)
        if count < 1:
            raise ta.ShapeError(f"{node}: cannot split into {count} parts")
        chunk = -(-length // count)
        pieces = [min(chunk, max(0, length - k * chunk)) for k in range(count)]
    if len(pieces) != len(node.outputs):
        raise ta.ShapeError(f"{node}: {len(pieces)} pieces for {len(node.outputs)} outputs")
    node.note("numpy split (views)")
    return tuple(np.split(x, np.cumsum(pieces)[:-1], axis=axis))


@op("Split", since=2)
def split_v2(node: NodeContext, x: np.ndarray, *, axis: int = 0,
             split: Sequence[int] | None = None) -> tuple[np.ndarray, ...]:
    return _split(node, x, split, axis)


@op("Split", since=13)
def split_v13(node: NodeContext, x: np.ndarray, split: np.ndarray | None = None, *,
              axis: int = 0) -> tuple[np.ndarray, ...]:
    return _split(node, x, split, axis)


@op("Split", since=18)
def split_v18(node: NodeContext, x: np.ndarray, split: np.ndarray | None = None, *,
              axis: int = 0, num_outputs: int | None = None) -> tuple[np.ndarray, ...]:
    return _split(node, x, split, axis, num_outputs)


@op("Trilu", since=14)
def trilu(node: NodeContext, x: np.ndarray, k: np.ndarray | None = None, *,
          upper: int = 1) -> np.ndarray:
    """The upper (or lower) triangle of the last two axes from diagonal ``k`` on, the rest
    zero (a causal mask): NumPy's ``triu``/``tril``, a copy."""
    if x.ndim < 2:
        raise ta.ShapeError(f"{node}: Trilu takes a tensor of rank 2 or more, got rank {x.ndim}")
    diagonal = int(np.asarray(k).reshape(-1)[0]) if k is not None else 0
    node.note(f"numpy {'triu' if upper else 'tril'} (copy)")
    return np.triu(x, diagonal) if upper else np.tril(x, diagonal)


@op("Concat", since=4)
def concat(node: NodeContext, *inputs: np.ndarray, axis: int) -> np.ndarray:
    arrays = [a for a in inputs if a is not None]
    node.note("numpy concatenate (copy)")
    try:
        return np.concatenate(arrays, axis=_axis(node, axis, arrays[0].ndim))
    except ValueError as err:
        raise ta.ShapeError(f"{node}: {err}") from None


@op("Gather", since=1)
def gather(node: NodeContext, data: np.ndarray, indices: np.ndarray, *, axis: int = 0
           ) -> np.ndarray:
    """``numpy.take`` along ``axis`` (negative indices count from the end, as in ONNX)."""
    axis = _axis(node, axis, data.ndim)
    node.note(f"numpy take along axis {axis} (embedding lookup)")
    size = data.shape[axis]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise ta.ShapeError(f"{node}: an index of {node.inputs[1]} is outside [-{size}, {size})")
    return np.take(data, indices.astype(np.int64, copy=False), axis=axis)


@op("Shape", since=1)
def shape(node: NodeContext, x: np.ndarray, *, start: int = 0, end: int | None = None
          ) -> np.ndarray:
    node.note("shape of the input")
    return np.array(x.shape[start:end], dtype=np.int64)


@op("Dropout", since=7)
def dropout_v7(node: NodeContext, x: np.ndarray, *, ratio: float = 0.5
               ) -> tuple[np.ndarray, np.ndarray]:
    node.note("alias (inference: no dropout)")
    return x, np.ones(x.shape, dtype=np.bool_)


@op("Dropout", since=12)
def dropout(node: NodeContext, x: np.ndarray, ratio: np.ndarray | None = None,
            training_mode: np.ndarray | None = None, *, seed: int = 0
            ) -> tuple[np.ndarray, np.ndarray]:
    """Inference: the input unchanged and an all-true mask."""
    if training_mode is not None and bool(np.asarray(training_mode)):
        raise ta.UnsupportedError(f"{node}: Dropout in training mode is not supported")
    node.note("alias (inference: no dropout)")
    return x, np.ones(x.shape, dtype=np.bool_)


@op("ReverseSequence", since=10)
def reverse_sequence(node: NodeContext, x: np.ndarray, lengths: np.ndarray, *,
                     batch_axis: int = 1, time_axis: int = 0) -> np.ndarray:
    """Each batch entry's first ``lengths[b]`` steps along ``time_axis`` in reverse order."""
    batch, time = _axis(node, batch_axis, x.ndim), _axis(node, time_axis, x.ndim)
    if x.ndim < 2 or {batch, time} != {0, 1}:
        raise ta.ShapeError(f"{node}: batch_axis and time_axis must be 0 and 1 (in either "
                            f"order) of a tensor of rank 2 or more, got {batch_axis}, "
                            f"{time_axis} for {x.shape}")
    lengths = np.asarray(lengths).reshape(-1)
    if lengths.shape[0] != x.shape[batch] or (lengths < 0).any() or \
            (lengths > x.shape[time]).any():
        raise ta.ShapeError(f"{node}: sequence_lens {lengths.tolist()} must hold one length in "
                            f"[0, {x.shape[time]}] per batch entry ({x.shape[batch]})")
    node.note("numpy flips of each sequence's first steps")
    result = x.copy()
    steps = np.moveaxis(result, (batch, time), (0, 1))
    source = np.moveaxis(x, (batch, time), (0, 1))
    for b, length in enumerate(lengths.tolist()):
        steps[b, :length] = source[b, :length][::-1]
    return result


@op("CenterCropPad", since=18)
def center_crop_pad(node: NodeContext, x: np.ndarray, shape: np.ndarray, *,
                    axes: Sequence[int] | None = None) -> np.ndarray:
    """Each of ``axes`` cropped or zero-padded to its target size about its centre, as ONNX's
    function body: a crop starts at ``(size - target) // 2``; a pad puts
    ``(target - size) // 2`` zeros before and the rest after."""
    chosen = [_axis(node, a, x.ndim) for a in (range(x.ndim) if axes is None else axes)]
    target = [int(v) for v in np.asarray(shape).reshape(-1)]
    if len(target) != len(chosen) or any(t < 0 for t in target):
        raise ta.ShapeError(f"{node}: shape {target} must give one non-negative size for each "
                            f"of the axes {chosen}")
    node.note("numpy crop and zero pad")
    crop = [slice(None)] * x.ndim
    pads = [(0, 0)] * x.ndim
    for axis, size in zip(chosen, target):
        have = x.shape[axis]
        if have >= size:
            start = (have - size) // 2
            crop[axis] = slice(start, start + size)
        else:
            before = (size - have) // 2
            pads[axis] = (before, size - have - before)
    return np.pad(x[tuple(crop)], pads)
