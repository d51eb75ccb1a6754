"""Softmax and LogSoftmax: a max tree, then two statements.

With ``M`` the maxima along the axis (:func:`reduce_extreme`), ``S(i,k) = sum(j, exp(X(i,j,k)
- M(i,k)))`` sums over the axis ``j`` and ``Y(i,j,k) = exp(X(i,j,k) - M(i,k)) / S(i,k)``
(LogSoftmax: ``X(i,j,k) - M(i,k) - log(S(i,k))``). Before opset 13 the input is coerced to 2-D
at ``axis`` and the softmax runs over the whole second dimension.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import INDICES, NodeContext, compute_dtype, minus, output_access
from tensoralg.onnx.ops.reduce import reduce_extreme
from tensoralg.onnx.ops.registry import op


def softmax_along(node: NodeContext, x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {x.ndim}")
    if x.ndim == 0:
        x = x.reshape(1)
    axis %= x.ndim
    dtype = compute_dtype(x.dtype, needs_float=True)
    if x.size == 0:
        return x.copy()
    indices = INDICES[:x.ndim]
    kept = indices.replace(indices[axis], "")
    maxima = reduce_extreme(node, x, [axis], 0, "max")
    x_access = f"X({','.join(indices)})"
    m_access = f"M({','.join(kept)})" if kept else "M"
    s_access = f"S({','.join(kept)})" if kept else "S"
    shifted = minus(x_access, m_access)
    # An explicit sum: the implicit rule would sum X inside exp (the smallest subexpression).
    summed = indices[axis]
    sums = node.run(f"{output_access(kept)} = sum({summed}, exp({shifted}))", dtype, X=x,
                    M=maxima)
    rhs = minus(shifted, f"log({s_access})") if log else f"exp({shifted}) / {s_access}"
    result = node.run(f"{output_access(indices)} = {rhs}", dtype, X=x, M=maxima, S=sums)
    return result.reshape(x.shape).astype(x.dtype, copy=False)


def _coerced(node: NodeContext, x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if not -x.ndim <= axis <= x.ndim:
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {x.ndim}")
    if axis < 0:
        axis += x.ndim
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))
    return softmax_along(node, flat, 1, log).reshape(x.shape)


@op("Softmax", since=1)
def softmax_v1(node: NodeContext, x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    return _coerced(node, x, axis, log=False)


@op("Softmax", since=13)
def softmax(node: NodeContext, x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    return softmax_along(node, x, axis, log=False)


@op("LogSoftmax", since=1)
def log_softmax_v1(node: NodeContext, x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    return _coerced(node, x, axis, log=True)


@op("LogSoftmax", since=13)
def log_softmax(node: NodeContext, x: np.ndarray, *, axis: int = -1) -> np.ndarray:
    return softmax_along(node, x, axis, log=True)
