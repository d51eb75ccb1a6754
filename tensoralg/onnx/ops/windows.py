"""Sliding windows for Conv and the pooling ops: geometry, padding and patch extraction.

The windows of an N-d convolution or pooling are pure data movement, done here in NumPy; the
arithmetic on them (the contraction of Conv, the sums and maxima of pooling) is left to
tensoralg statements in ``conv.py`` and ``pool.py``.

Geometry, per spatial axis of size ``n`` with kernel ``k``, stride ``s`` and dilation ``d``
(window span ``(k - 1) * d + 1``): output position ``o`` reads input positions
``o * s - pad_begin + j * d`` for ``j < k``; positions outside ``[0, n)`` are padding.
``auto_pad`` SAME_UPPER/SAME_LOWER choose ``ceil(n / s)`` outputs and split the needed padding
with the odd element at the end/beginning; ``ceil_mode`` rounds the output count up but drops a
last window that would start in the end padding (the PyTorch and onnxruntime rule).

:func:`patches` pads the input once and returns a strided view ``(N, C, *out, *kernel)`` built
with ``sliding_window_view`` (no copy and no Python loop over pixels); reshaping that view into
a patch matrix is the one copy of im2col.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows of one op over the spatial axes of its input."""

    spatial: tuple[int, ...]      # input sizes
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]     # as the model gives them (without the ceil_mode overhang)
    out: tuple[int, ...]

    def starts(self, axis: int) -> np.ndarray:
        """Input positions read by every (output, kernel) pair on ``axis``: shape (out, k)."""
        o = np.arange(self.out[axis])[:, None] * self.strides[axis]
        j = np.arange(self.kernel[axis])[None, :] * self.dilations[axis]
        return o + j - self.pads_begin[axis]

    def overhang(self, axis: int) -> int:
        """Cells past the padded end that the last window reaches (ceil_mode only)."""
        span = (self.kernel[axis] - 1) * self.dilations[axis] + 1
        needed = (self.out[axis] - 1) * self.strides[axis] + span
        padded = self.spatial[axis] + self.pads_begin[axis] + self.pads_end[axis]
        return max(0, needed - padded)


def _ints(value: Sequence[int] | None, default: int, rank: int, node: NodeContext,
          name: str) -> tuple[int, ...]:
    if value is None or len(value) == 0:
        return (default,) * rank
    result = tuple(int(v) for v in value)
    if len(result) != rank:
        raise ta.ShapeError(f"{node}: {name} {list(result)} needs {rank} values")
    return result


def windows(node: NodeContext, spatial: Sequence[int], kernel: Sequence[int], *,
            strides: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
            pads: Sequence[int] | None = None, auto_pad: str = "NOTSET",
            ceil_mode: int = 0) -> Windows:
    """The window geometry of an op (attributes as ONNX spells them)."""
    rank = len(spatial)
    kernel = _ints(kernel, 1, rank, node, "kernel_shape")
    strides = _ints(strides, 1, rank, node, "strides")
    dilations = _ints(dilations, 1, rank, node, "dilations")
    pads = _ints(pads, 0, 2 * rank, node, "pads")
    if min(strides + dilations + kernel, default=1) < 1:
        raise ta.ShapeError(f"{node}: kernel_shape, strides and dilations must be positive")
    begin, end, out = [], [], []
    for n, k, s, d, pb, pe in zip(spatial, kernel, strides, dilations, pads[:rank],
                                  pads[rank:]):
        span = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            size = -(-n // s)
            total = max(0, (size - 1) * s + span - n)
            small = total // 2
            pb, pe = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        elif auto_pad == "VALID":
            pb = pe = 0
            size = (n - span) // s + 1
        elif auto_pad in ("NOTSET", ""):
            room = n + pb + pe - span
            size = (-(-room // s) if ceil_mode else room // s) + 1
            if ceil_mode and (size - 1) * s >= n + pb:
                size -= 1
        else:
            raise ta.UnsupportedError(f"{node}: auto_pad={auto_pad!r} is not defined")
        if size < 1:
            raise ta.ShapeError(f"{node}: a window of span {span} does not fit an input of "
                                f"size {n} with pads ({pb}, {pe})")
        begin.append(pb)
        end.append(pe)
        out.append(size)
    return Windows(tuple(spatial), kernel, strides, dilations, tuple(begin), tuple(end),
                   tuple(out))


def patches(x: np.ndarray, geometry: Windows, fill: float | int) -> np.ndarray:
    """A read-only view ``(N, C, *out, *kernel)`` of the windows of ``x`` padded with ``fill``.

    >>> g = Windows((4,), (2,), (2,), (1,), (0,), (0,), (2,))
    >>> patches(np.arange(4.0).reshape(1, 1, 4), g, 0.0)[0, 0]
    array([[0., 1.],
           [2., 3.]])
    """
    rank = len(geometry.spatial)
    widths = [(0, 0)] * (x.ndim - rank) + [
        (geometry.pads_begin[a], geometry.pads_end[a] + geometry.overhang(a))
        for a in range(rank)]
    padded = np.pad(x, widths, constant_values=fill) if any(map(any, widths)) else x
    spans = [(k - 1) * d + 1 for k, d in zip(geometry.kernel, geometry.dilations)]
    axes = tuple(range(x.ndim - rank, x.ndim))
    view = np.lib.stride_tricks.sliding_window_view(padded, spans, axis=axes)
    # view: (N, C, *positions, *span); keep every stride-th position, every dilation-th cell.
    index = [slice(None)] * (x.ndim - rank)
    index += [slice(None, o * s, s) for o, s in zip(geometry.out, geometry.strides)]
    index += [slice(None, None, d) for d in geometry.dilations]
    return view[tuple(index)]


def window_counts(geometry: Windows, include_pad: bool) -> np.ndarray:
    """How many cells each output window covers, shape ``out``: inside the input, or inside
    the explicitly padded input when ``include_pad`` (never the ceil_mode overhang)."""
    counts = np.ones((), dtype=np.int64)
    for axis in range(len(geometry.spatial)):
        position = geometry.starts(axis)
        low = -geometry.pads_begin[axis] if include_pad else 0
        high = geometry.spatial[axis] + (geometry.pads_end[axis] if include_pad else 0)
        inside = ((position >= low) & (position < high)).sum(axis=1)
        counts = np.multiply.outer(counts, inside)
    return counts


def lowest(dtype: np.dtype) -> float | int:
    """The padding value that never wins a maximum."""
    if dtype.kind == "f":
        return -math.inf
    if dtype.kind == "b":
        return False
    return int(np.iinfo(dtype).min)
