"""Conv (1-, 2- and 3-D; pads, auto_pad, strides, dilations, groups, bias) by im2col.

Two steps, the first data movement and the second arithmetic:

1. im2col in NumPy: :func:`windows.patches` gives the strided view ``(N, C, *out, *kernel)`` of
   the zero-padded input; it is reordered into the patch matrix ``P(n, g, k, p)``, where ``g``
   is the group, ``k`` runs over (channel of the group, kernel cell) and ``p`` over output
   positions. This reshape is the only copy.
2. One tensoralg contraction per node, all groups and images at once::

       Y(n,g,m,p) = sum(k, W(g,m,k) * P(n,g,k,p)) + B(g,m)

   with ``W`` the weights viewed as (group, output channel of the group, k). Contractions of at
   least ``matmul.BLAS_MIN_WORK`` float multiply-adds run in BLAS instead (the same visible
   decision as MatMul), followed by the bias as a tensoralg statement.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, elementwise
from tensoralg.onnx.ops.matmul import use_blas
from tensoralg.onnx.ops.registry import op
from tensoralg.onnx.ops.windows import patches, windows


def patch_matrix(x: np.ndarray, view: np.ndarray, group: int) -> np.ndarray:
    """im2col: the windows ``view`` (N, C, *out, *kernel) as ``P(n, g, k, p)``."""
    n, channels = x.shape[:2]
    rank = x.ndim - 2
    out, kernel = view.shape[2:2 + rank], view.shape[2 + rank:]
    grouped = view.reshape(n, group, channels // group, *out, *kernel)
    # (n, g, c, *out, *kernel) -> (n, g, c, *kernel, *out): k = (c, kernel cell), p = position.
    order = [0, 1, 2, *range(3 + rank, 3 + 2 * rank), *range(3, 3 + rank)]
    columns = channels // group * math.prod(kernel)
    return np.transpose(grouped, order).reshape(n, group, columns, math.prod(out))


@op("Conv", since=1)
def conv(node: NodeContext, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
         auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None, group: int = 1,
         kernel_shape: Sequence[int] | None = None, pads: Sequence[int] | None = None,
         strides: Sequence[int] | None = None) -> np.ndarray:
    """``Y = W * X + B``, cross-correlation over the spatial axes, by im2col."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ta.ShapeError(f"{node}: X {x.shape} and W {w.shape} must both be (N, C, ...)")
    channels, out_channels = x.shape[1], w.shape[0]
    if group < 1 or channels % group or out_channels % group or w.shape[1] * group != channels:
        raise ta.ShapeError(f"{node}: {channels} input channels, W {w.shape} and group={group}"
                            f" do not agree")
    if kernel_shape is not None and tuple(kernel_shape) != w.shape[2:]:
        raise ta.ShapeError(f"{node}: kernel_shape {list(kernel_shape)} differs from W "
                            f"{w.shape}")
    if b is not None and b.shape != (out_channels,):
        raise ta.ShapeError(f"{node}: B has shape {b.shape}, expected ({out_channels},)")
    geometry = windows(node, x.shape[2:], w.shape[2:], strides=strides, dilations=dilations,
                       pads=pads, auto_pad=auto_pad)
    dtype = compute_dtype(np.result_type(x.dtype, w.dtype))
    node.note("im2col: numpy sliding-window view, reshaped to the patch matrix P(n,g,k,p)")
    columns = patch_matrix(x, patches(x, geometry, 0), group)
    weights = w.reshape(group, out_channels // group, columns.shape[2])
    n, positions = x.shape[0], columns.shape[3]
    work = n * out_channels * columns.shape[2] * positions
    if use_blas(dtype, work):
        node.note(f"BLAS (dense {n}x{group}: {weights.shape[1]}x{columns.shape[2]}x{positions})")
        result = np.matmul(weights.astype(dtype, copy=False), columns.astype(dtype, copy=False))
        if b is not None:
            result = elementwise(node, "{0} + {1}", result,
                                 b.reshape(group, out_channels // group, 1), dtype=dtype)
    else:
        statement = "Y(n,g,m,p) = sum(k, W(g,m,k) * P(n,g,k,p))"
        operands = {"W": weights, "P": columns}
        if b is not None:
            statement += " + B(g,m)"
            operands["B"] = b.reshape(group, out_channels // group)
        result = node.run(statement, dtype, **operands)
    shape = (n, out_channels, *geometry.out)
    return result.reshape(shape).astype(x.dtype, copy=False)
