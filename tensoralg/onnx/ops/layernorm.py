"""LayerNormalization (opset 17) and InstanceNormalization, as three tensoralg statements.

Both normalise the rows of a matrix ``X(i,j)`` (LayerNormalization: the axes from ``axis`` on
form ``j``; InstanceNormalization: the spatial axes of one (image, channel) form ``j``)::

    M(i) = sum(j, X(i,j)) * (1/n)                                       mean
    R(i) = 1 / sqrt(sum(j, (X(i,j) - M(i)) * (X(i,j) - M(i))) * (1/n) + eps)   inverse std
    Y(i,j) = (X(i,j) - M(i)) * R(i) * S(j) + B(j)                       normalise, scale, shift

(InstanceNormalization indexes scale and bias by the channel, ``S(c)`` with ``i = (n, c)``.)
The variance is taken around the mean, not as ``E[x^2] - E[x]^2``, which loses precision.
"""
from __future__ import annotations

import math

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.constant import numpy_dtype
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, literal
from tensoralg.onnx.ops.registry import op


def moments(node: NodeContext, rows: np.ndarray, epsilon: float, dtype: np.dtype
            ) -> tuple[np.ndarray, np.ndarray]:
    """The mean and inverse standard deviation of every row of a matrix."""
    share = literal(1.0 / rows.shape[1])
    mean = node.run(f"Y(i) = sum(j, X(i,j)) * {share}", dtype, X=rows)
    centred = "(X(i,j) - M(i))"
    statement = (f"Y(i) = 1 / sqrt(sum(j, {centred} * {centred}) * {share} + "
                 f"{literal(epsilon)})")
    inverse_std = node.run(statement, dtype, X=rows, M=mean)
    return mean.reshape(-1), inverse_std.reshape(-1)


def _broadcast_to(node: NodeContext, name: str, value: np.ndarray, shape: tuple[int, ...]
                  ) -> np.ndarray:
    try:
        return np.broadcast_to(value, shape).reshape(-1)
    except ValueError:
        raise ta.ShapeError(f"{node}: {name} of shape {value.shape} does not broadcast to the "
                            f"normalised shape {shape}") from None


@op("LayerNormalization", since=17)
def layer_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray,
                        bias: np.ndarray | None = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Y = (X - mean) / sqrt(var + eps) * Scale + B`` over the axes from ``axis`` on."""
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {x.ndim}")
    axis %= max(x.ndim, 1)
    normalised = x.shape[axis:]
    rows = x.reshape(math.prod(x.shape[:axis]), math.prod(normalised))
    dtype = compute_dtype(x.dtype, needs_float=True)
    mean, inverse_std = moments(node, rows, epsilon, dtype)
    operands = {"X": rows, "M": mean, "R": inverse_std,
                "S": _broadcast_to(node, "Scale", scale, normalised)}
    statement = "Y(i,j) = (X(i,j) - M(i)) * R(i) * S(j)"
    if bias is not None:
        statement += " + B(j)"
        operands["B"] = _broadcast_to(node, "B", bias, normalised)
    y = node.run(statement, dtype, **operands).reshape(x.shape).astype(x.dtype, copy=False)
    stats_shape = x.shape[:axis] + (1,) * (x.ndim - axis)
    stash = numpy_dtype(stash_type)
    return (y, mean.reshape(stats_shape).astype(stash, copy=False),
            inverse_std.reshape(stats_shape).astype(stash, copy=False))


@op("InstanceNormalization", since=6)
def instance_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray,
                           bias: np.ndarray, *, epsilon: float = 1e-5) -> np.ndarray:
    """``Y(n,c,...) = (X - mean(n,c)) / sqrt(var(n,c) + eps) * S(c) + B(c)``."""
    if x.ndim < 3:
        raise ta.ShapeError(f"{node}: X must be (N, C, ...) with spatial axes, got {x.shape}")
    n, channels = x.shape[:2]
    for name, value in (("scale", scale), ("B", bias)):
        if value.shape != (channels,):
            raise ta.ShapeError(f"{node}: {name} has shape {value.shape}, expected ({channels},)")
    dtype = compute_dtype(x.dtype, needs_float=True)
    rows = x.reshape(n * channels, -1)
    mean, inverse_std = moments(node, rows, epsilon, dtype)
    statement = "Y(i,c,j) = (X(i,c,j) - M(i,c)) * R(i,c) * S(c) + B(c)"
    y = node.run(statement, dtype, X=rows.reshape(n, channels, -1),
                 M=mean.reshape(n, channels), R=inverse_std.reshape(n, channels), S=scale,
                 B=bias)
    return y.reshape(x.shape).astype(x.dtype, copy=False)
