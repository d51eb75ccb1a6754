"""LayerNormalization (opset 17), InstanceNormalization, GroupNormalization, RMSNormalization,
MeanVarianceNormalization, LpNormalization and LRN, each as a few tensoralg statements.

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
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.onnx.ops.constant import numpy_dtype
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, literal
from tensoralg.onnx.ops.reduce import normalize_axes
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


def _trailing_rows(node: NodeContext, x: np.ndarray, axis: int
                   ) -> tuple[int, tuple[int, ...], np.ndarray]:
    """``axis`` made non-negative, the shape of the axes from it on, and ``x`` as rows of
    them (the matrix LayerNormalization and RMSNormalization normalise)."""
    if not -x.ndim <= axis < max(x.ndim, 1):
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {x.ndim}")
    axis %= max(x.ndim, 1)
    normalised = x.shape[axis:]
    return axis, normalised, x.reshape(math.prod(x.shape[:axis]), math.prod(normalised))


@op("LayerNormalization", since=17)
def layer_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray,
                        bias: np.ndarray | None = None, *, axis: int = -1,
                        epsilon: float = 1e-5, stash_type: int = 1
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Y = (X - mean) / sqrt(var + eps) * Scale + B`` over the axes from ``axis`` on."""
    axis, normalised, rows = _trailing_rows(node, x, axis)
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


def _groups_of(node: NodeContext, name: str, value: np.ndarray, channels: int, groups: int
               ) -> np.ndarray:
    """GroupNormalization's scale or bias as ``(groups, channels per group)``: one value per
    channel (opset 21) or per group (opset 18, repeated over its channels)."""
    if value.shape == (channels,):
        return value.reshape(groups, channels // groups)
    if value.shape == (groups,):
        return np.repeat(value, channels // groups).reshape(groups, channels // groups)
    raise ta.ShapeError(f"{node}: {name} has shape {value.shape}; it must be ({channels},) or "
                        f"({groups},)")


@op("GroupNormalization", since=18)
def group_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                        *, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1
                        ) -> np.ndarray:
    """``Y = (X - mean) / sqrt(var + eps) * scale + bias``, the moments over each group of
    channels of an image (and its spatial axes), scale and bias per channel."""
    if x.ndim < 2:
        raise ta.ShapeError(f"{node}: X must be (N, C, ...), got {x.shape}")
    n, channels = x.shape[:2]
    if num_groups < 1 or channels % num_groups:
        raise ta.ShapeError(f"{node}: {channels} channels do not split into num_groups="
                            f"{num_groups} groups")
    dtype = compute_dtype(x.dtype, needs_float=True)
    rows = x.reshape(n * num_groups, -1)
    mean, inverse_std = moments(node, rows, epsilon, dtype)
    per_group = channels // num_groups
    statement = "Y(i,g,c,j) = (X(i,g,c,j) - M(i,g)) * R(i,g) * S(g,c) + B(g,c)"
    y = node.run(statement, dtype, X=x.reshape(n, num_groups, per_group, -1),
                 M=mean.reshape(n, num_groups), R=inverse_std.reshape(n, num_groups),
                 S=_groups_of(node, "scale", scale, channels, num_groups),
                 B=_groups_of(node, "bias", bias, channels, num_groups))
    return y.reshape(x.shape).astype(x.dtype, copy=False)


@op("RMSNormalization", since=23)
def rms_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray, *, axis: int = -1,
                      epsilon: float = 1e-5, stash_type: int = 1) -> np.ndarray:
    """``Y = X / sqrt(mean(X^2) + eps) * scale`` over the axes from ``axis`` on."""
    _, normalised, rows = _trailing_rows(node, x, axis)
    dtype = compute_dtype(x.dtype, needs_float=True)
    share = literal(1.0 / max(rows.shape[1], 1))
    inverse = node.run(f"Y(i) = 1 / sqrt(sum(j, X(i,j) * X(i,j)) * {share} + "
                       f"{literal(epsilon)})", dtype, X=rows)
    y = node.run("Y(i,j) = X(i,j) * R(i) * S(j)", dtype, X=rows, R=inverse.reshape(-1),
                 S=_broadcast_to(node, "scale", scale, normalised))
    return y.reshape(x.shape).astype(x.dtype, copy=False)


def _rows_over(x: np.ndarray, axes: list[int]) -> tuple[np.ndarray, list[int]]:
    """``x`` with ``axes`` moved last and flattened into rows of (the other axes, ``axes``),
    and the order that moved them (to move the rows' result back)."""
    kept = [d for d in range(x.ndim) if d not in axes]
    order = kept + axes
    moved = np.transpose(x, order)
    rows = moved.reshape(math.prod(x.shape[d] for d in kept), math.prod(x.shape[d] for d in axes))
    return rows, order


def _rows_back(y: np.ndarray, x: np.ndarray, order: list[int]) -> np.ndarray:
    """The result of :func:`_rows_over`'s rows back in ``x``'s shape, order and dtype."""
    moved = y.reshape([x.shape[d] for d in order])
    return np.transpose(moved, np.argsort(order)).astype(x.dtype, copy=False)


@op("MeanVarianceNormalization", since=13)
def mean_variance_normalization(node: NodeContext, x: np.ndarray, *,
                                axes: list[int] | None = None) -> np.ndarray:
    """``Y = (X - mean) / (sqrt(var) + 1e-9)`` over ``axes`` (default 0, 2, 3), as ONNX's
    function body (the variance taken around the mean)."""
    chosen = normalize_axes(node, [0, 2, 3] if axes is None else axes, x.ndim)
    dtype = compute_dtype(x.dtype, needs_float=True)
    rows, order = _rows_over(x, chosen)
    mean, inverse_std = moments(node, rows, 0.0, dtype)
    # moments gives 1 / sqrt(var); MVN divides by sqrt(var) + 1e-9
    y = node.run("Y(i,j) = (X(i,j) - M(i)) / (1 / R(i) + 1e-09)", dtype, X=rows, M=mean,
                 R=inverse_std)
    return _rows_back(y, x, order)


@op("LpNormalization", since=1)
def lp_normalization(node: NodeContext, x: np.ndarray, *, axis: int = -1, p: int = 2
                     ) -> np.ndarray:
    """``x / ||x||_p`` along ``axis`` (p 1 or 2); a norm of 0 gives 0, as onnxruntime."""
    if p not in (1, 2):
        raise ta.UnsupportedError(f"{node}: LpNormalization takes p=1 or p=2, not {p}")
    dtype = compute_dtype(x.dtype, needs_float=True)
    rows, order = _rows_over(x, normalize_axes(node, [axis], x.ndim))
    norm = "sqrt(sum(j, X(i,j) * X(i,j)))" if p == 2 else "sum(j, abs(X(i,j)))"
    norms = node.run(f"Y(i) = {norm}", dtype, X=rows)
    y = node.run("Y(i,j) = where(ne(N(i), 0), X(i,j) / N(i), 0)", dtype, X=rows,
                 N=norms.reshape(-1))
    return _rows_back(y, x, order)


@op("LRN", since=1)
def lrn(node: NodeContext, x: np.ndarray, *, size: int, alpha: float = 1e-4,
        beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """Local response normalisation across channels: ``x / (bias + alpha / size *
    sum of x^2 over the size channels around it) ^ beta``; the window's channels are a banded
    0/1 CSR matrix, so the sums are one sparse·dense kernel."""
    if x.ndim < 3 or size < 1:
        raise ta.ShapeError(f"{node}: LRN takes X (N, C, ...) and size >= 1, got {x.shape} and "
                            f"size={size}")
    n, channels = x.shape[:2]
    dtype = compute_dtype(x.dtype, needs_float=True)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    rows = np.repeat(np.arange(channels), size)
    cols = rows + np.tile(np.arange(-before, after + 1), channels)
    kept = (cols >= 0) & (cols < channels)
    window = sp.csr_array((np.ones(int(kept.sum()), dtype), (rows[kept], cols[kept])),
                          shape=(channels, channels))
    planes = x.reshape(n, channels, -1)
    sums = node.run("Y(i,c,j) = W(c,k) * X(i,k,j) * X(i,k,j)", dtype, formats={"W": ta.CSR},
                    W=window, X=planes)
    scale = literal(alpha / size)
    y = node.run(f"Y(i,c,j) = X(i,c,j) / pow({literal(bias)} + {scale} * Q(i,c,j), "
                 f"{literal(beta)})", dtype, X=planes, Q=sums.reshape(planes.shape))
    return y.reshape(x.shape).astype(x.dtype, copy=False)
