"""ConvTranspose (1-, 2- and 3-D; strides, pads, output_padding, output_shape, auto_pad,
dilations, groups, bias) as a Conv of the stride-spread input with the flipped weights.

Output position ``o`` of a transposed convolution adds ``x[i] * w[k]`` for every input position
``i`` and kernel cell ``k`` with ``o = i * s - pad_begin + k * d``. That is an ordinary
convolution (stride 1, dilation ``d``) of

- the input *spread* by the stride (``s - 1`` zeros between neighbours), padded with
  ``d (K - 1) - pad_begin`` zeros before and ``d (K - 1) - pad_end + output_padding`` after (a
  negative amount crops instead), a NumPy copy; with
- the weights flipped along every spatial axis and, per group, with input and output channels
  swapped: ``W'(g*m + j, c) = W(g*c_in + c, j)`` reversed in space;

so the arithmetic runs in :func:`tensoralg.onnx.ops.conv.conv`, as a tensoralg contraction or
in BLAS. That is the route of stride 1. With a larger stride the zeros of the spread input
would cost ``s^d`` times the multiply-adds (and its patch matrix as much memory: Keypoint
R-CNN's 4 x 4, stride-2 upsampling of 100 regions of 512 x 14 x 14 made a 2.5 GB matrix and
took 5.5 s), so strided ones run the other way round (:func:`_scattered`): one product of the
weights with the input's columns gives every (output channel, kernel cell) contribution at
every input position, and each kernel cell's block is added into the output at a stride.

Output size per spatial axis, unless ``output_shape`` is given (then the total padding follows
from it and ``auto_pad`` splits it: SAME_UPPER puts the odd cell at the end):
``s (in - 1) + output_padding + d (K - 1) + 1 - pad_begin - pad_end``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.conv import conv
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, elementwise
from tensoralg.onnx.ops.matmul import use_blas
from tensoralg.onnx.ops.registry import op


def _ints(node: NodeContext, value: Sequence[int] | None, default: int, count: int,
          name: str) -> list[int]:
    if value is None or len(value) == 0:
        return [default] * count
    if len(value) != count:
        raise ta.ShapeError(f"{node}: {name} {list(value)} needs {count} values")
    return [int(v) for v in value]


def transposed_pads(node: NodeContext, spatial: Sequence[int], kernel: Sequence[int],
                    strides: list[int], dilations: list[int], output_padding: list[int],
                    pads: list[int], auto_pad: str, output_shape: Sequence[int] | None
                    ) -> tuple[list[int], list[int]]:
    """The padding (begin, end) of each spatial axis, from ``pads`` or from the output shape
    that ``output_shape`` or ``auto_pad`` SAME_* asks for."""
    rank = len(spatial)
    if auto_pad not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ta.UnsupportedError(f"{node}: auto_pad={auto_pad!r} is not defined")
    wanted: list[int] | None = None
    if output_shape is not None and len(output_shape):
        wanted = [int(n) for n in output_shape][-rank:]
        if len(wanted) != rank:
            raise ta.ShapeError(f"{node}: output_shape {list(output_shape)} needs {rank} "
                                f"spatial sizes")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = [n * s for n, s in zip(spatial, strides)]
    if wanted is None:
        if auto_pad == "VALID":
            return [0] * rank, [0] * rank
        return pads[:rank], pads[rank:]
    begin, end = [], []
    for n, k, s, d, extra, out in zip(spatial, kernel, strides, dilations, output_padding,
                                      wanted):
        # Negative when the output is larger than the transposed convolution: the cells
        # past its end are zeros (negative pads), as onnxruntime gives them.
        total = s * (n - 1) + extra + (k - 1) * d + 1 - out
        small = total // 2
        first = small if auto_pad == "SAME_UPPER" else total - small
        begin.append(first)
        end.append(total - first)
    return begin, end


def spread_input(x: np.ndarray, strides: list[int], before: list[int], after: list[int]
                 ) -> np.ndarray:
    """``x`` with ``s - 1`` zeros between neighbours on each spatial axis, then ``before`` /
    ``after`` zeros at its ends (negative amounts crop)."""
    rank = len(strides)
    spread = [(n - 1) * s + 1 if n else 0 for n, s in zip(x.shape[2:], strides)]
    sizes = [n + max(b, 0) + max(a, 0) for n, b, a in zip(spread, before, after)]
    padded = np.zeros(x.shape[:2] + tuple(sizes), dtype=x.dtype)
    padded[(slice(None), slice(None)) + tuple(
        slice(max(b, 0), max(b, 0) + n, s) for b, n, s in zip(before, spread, strides))] = x
    crop = tuple(slice(max(-b, 0), size - max(-a, 0))
                 for b, a, size in zip(before, after, sizes))
    return padded[(slice(None), slice(None)) + crop] if rank else padded


def flipped_weights(w: np.ndarray, group: int) -> np.ndarray:
    """ConvTranspose weights (C_in, C_out/g, *K) as Conv weights (C_out, C_in/g, *K), each
    kernel reversed along every spatial axis."""
    c_in, per_group = w.shape[:2]
    kernel = w.shape[2:]
    grouped = w.reshape(group, c_in // group, per_group, *kernel)
    swapped = np.swapaxes(grouped, 1, 2).reshape(group * per_group, c_in // group, *kernel)
    return np.ascontiguousarray(np.flip(swapped, axis=tuple(range(2, w.ndim))))


@op("ConvTranspose", since=1)
def conv_transpose(node: NodeContext, x: np.ndarray, w: np.ndarray,
                   b: np.ndarray | None = None, *, auto_pad: str = "NOTSET",
                   dilations: Sequence[int] | None = None, group: int = 1,
                   kernel_shape: Sequence[int] | None = None,
                   output_padding: Sequence[int] | None = None,
                   output_shape: Sequence[int] | None = None,
                   pads: Sequence[int] | None = None,
                   strides: Sequence[int] | None = None) -> np.ndarray:
    """The gradient of Conv with respect to its input, as a Conv (see the module docstring)."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ta.ShapeError(f"{node}: X {x.shape} and W {w.shape} must both be (N, C, ...)")
    rank = x.ndim - 2
    if group < 1 or x.shape[1] != w.shape[0] or w.shape[0] % group:
        raise ta.ShapeError(f"{node}: {x.shape[1]} input channels, W {w.shape} and "
                            f"group={group} do not agree")
    kernel = list(w.shape[2:])
    if kernel_shape is not None and list(kernel_shape) != kernel:
        raise ta.ShapeError(f"{node}: kernel_shape {list(kernel_shape)} differs from W "
                            f"{w.shape}")
    strides_ = _ints(node, strides, 1, rank, "strides")
    dilations_ = _ints(node, dilations, 1, rank, "dilations")
    extra = _ints(node, output_padding, 0, rank, "output_padding")
    pads_ = _ints(node, pads, 0, 2 * rank, "pads")
    if min(strides_ + dilations_, default=1) < 1 or min(extra + pads_, default=0) < 0:
        raise ta.ShapeError(f"{node}: strides and dilations must be positive, pads and "
                            f"output_padding not negative")
    begin, end = transposed_pads(node, x.shape[2:], kernel, strides_, dilations_, extra,
                                 pads_, auto_pad, output_shape)
    if max(strides_, default=1) > 1:
        sizes = [s * (n - 1) + e + d * (k - 1) + 1 - p - q for n, k, s, d, e, p, q in
                 zip(x.shape[2:], kernel, strides_, dilations_, extra, begin, end)]
        if min(sizes, default=1) < 1:
            raise ta.ShapeError(f"{node}: pads {begin + end} leave no output for input "
                                f"{x.shape} and kernel {kernel}")
        return _scattered(node, x, w, b, group, strides_, dilations_, begin, sizes)
    reach = [d * (k - 1) for d, k in zip(dilations_, kernel)]
    before = [r - p for r, p in zip(reach, begin)]
    after = [r - p + e for r, p, e in zip(reach, end, extra)]
    spread = spread_input(x, strides_, before, after)
    if any(n < r + 1 for n, r in zip(spread.shape[2:], reach)):
        raise ta.ShapeError(f"{node}: pads {begin + end} leave no output for input "
                            f"{x.shape} and kernel {kernel}")
    node.note(f"numpy: input spread by strides {strides_} and padded, weights flipped; then:")
    return conv(node, spread, flipped_weights(w, group), b, dilations=dilations_, group=group)


def _scattered(node: NodeContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None,
               group: int, strides: list[int], dilations: list[int], begin: list[int],
               sizes: list[int]) -> np.ndarray:
    """A strided transposed convolution as one product and strided adds: ``C(n, g, (m, k),
    p) = sum(c, W(g, c, (m, k)) * X(n, g, c, p))`` for every input position ``p``, output
    channel ``m`` and kernel cell ``k``, then each cell's block added into the output at
    ``p * s + k * d - pad_begin`` (cells that land outside it are dropped)."""
    n, channels = x.shape[:2]
    spatial, kernel = list(x.shape[2:]), list(w.shape[2:])
    per_group = w.shape[1]
    dtype = compute_dtype(np.result_type(x.dtype, w.dtype))
    cells = math.prod(kernel)
    # W (C_in, m, *K) as (g, m*K, C_in/g): each group's weights transposed, once per call
    weights = np.ascontiguousarray(np.swapaxes(
        w.reshape(group, channels // group, per_group * cells), 1, 2)).astype(dtype, copy=False)
    columns = x.reshape(n, group, channels // group, math.prod(spatial)).astype(dtype,
                                                                              copy=False)
    work = n * group * per_group * cells * (channels // group) * math.prod(spatial)
    if use_blas(dtype, work):
        node.note(f"BLAS (dense {n}x{group}: {per_group * cells}x{channels // group}x"
                  f"{math.prod(spatial)}) for every (channel, kernel cell) contribution")
        contributions = np.matmul(weights, columns)
    else:
        contributions = node.run("Y(n,g,j,p) = sum(c, W(g,j,c) * X(n,g,c,p))", dtype,
                                 W=weights, X=columns)
    contributions = contributions.reshape(n, group * per_group, *kernel, *spatial)
    # the whole reach of the output (every p * s + k * d), shifted so that negative pads
    # (cells before the input's first) and a long output_shape fit too
    shift = [max(0, -p) for p in begin]
    reach = [s * (m - 1) + d * (k - 1) + 1 for m, k, s, d in
             zip(spatial, kernel, strides, dilations)]
    canvas = np.zeros((n, group * per_group, *[max(r, p + size) + h for r, p, size, h in
                                              zip(reach, begin, sizes, shift)]), dtype)
    node.note(f"numpy: {cells} kernel cell(s) added into the output at strides {strides}")
    for cell in np.ndindex(*kernel):
        where = tuple(slice(h + c * d, h + c * d + s * (m - 1) + 1, s) for h, c, d, s, m in
                      zip(shift, cell, dilations, strides, spatial))
        canvas[(slice(None), slice(None), *where)] += contributions[(slice(None), slice(None),
                                                                     *cell)]
    result = canvas[(slice(None), slice(None), *[slice(h + p, h + p + size) for h, p, size in
                                                 zip(shift, begin, sizes)])]
    if b is not None:
        if b.shape != (group * per_group,):
            raise ta.ShapeError(f"{node}: B has shape {b.shape}, expected "
                                f"({group * per_group},)")
        result = elementwise(node, "{0} + {1}", np.ascontiguousarray(result),
                             b.reshape(-1, *[1] * len(spatial)), dtype=dtype)
    return np.ascontiguousarray(result).astype(x.dtype, copy=False)
