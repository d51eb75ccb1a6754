"""BatchNormalization as one statement over the channel index (inference), or with the batch's
own statistics (``training_mode=1``)."""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import (
    INDICES,
    NodeContext,
    compute_dtype,
    literal,
    minus,
    output_access,
)
from tensoralg.onnx.ops.registry import op


@op("BatchNormalization", since=9)
def batch_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                        mean: np.ndarray, var: np.ndarray, *, epsilon: float = 1e-5,
                        momentum: float = 0.9, training_mode: int = 0
                        ) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Y(n,c,...) = (X(n,c,...) - M(c)) * S(c) / sqrt(V(c) + eps) + B(c)``: with the
    running statistics given (inference), or, with ``training_mode=1`` (opset 14), with the
    batch's own mean and (biased) variance per channel, the running statistics updated by
    ``momentum`` as the two further outputs.

    timm's normaliser-free networks standardise their convolution weights so: a
    training-mode BatchNormalization over the reshaped weight, constant, folded at load.
    """
    if x.ndim < 2:
        raise ta.ShapeError(f"{node}: X must have a channel dimension, got shape {x.shape}")
    channels = x.shape[1]
    for name, value in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if value.shape != (channels,):
            raise ta.ShapeError(f"{node}: {name} has shape {value.shape}, expected ({channels},)")
    dtype = compute_dtype(x.dtype, needs_float=True)
    if training_mode:
        return _batch_statistics(node, x, scale, bias, mean, var, epsilon, momentum, dtype)
    indices = INDICES[:x.ndim]
    c = indices[1]
    x_access = f"X({','.join(indices)})"
    rhs = f"({minus(x_access, f'M({c})')}) * S({c}) / sqrt(V({c}) + {literal(epsilon)}) + B({c})"
    result = node.run(f"{output_access(indices)} = {rhs}", dtype, X=x, M=mean, S=scale,
                      V=var, B=bias)
    return result.reshape(x.shape).astype(x.dtype, copy=False)


def _batch_statistics(node: NodeContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                      mean: np.ndarray, var: np.ndarray, epsilon: float, momentum: float,
                      dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training-mode BatchNormalization: Y normalised by the batch's statistics per channel
    (the variance around the mean, divided by the count, as ONNX's reference), and the
    running mean and variance moved toward them."""
    cube = x.reshape(x.shape[0], x.shape[1], -1)
    if cube.shape[0] * cube.shape[2] == 0:
        raise ta.ShapeError(f"{node}: batch statistics of an empty batch (X has shape "
                            f"{x.shape}) are undefined")
    share = literal(1.0 / (cube.shape[0] * cube.shape[2]))
    batch_mean = node.run(f"Y(c) = sum(n, sum(s, X(n,c,s))) * {share}", dtype, X=cube)
    centred = "(X(n,c,s) - M(c))"
    batch_var = node.run(f"Y(c) = sum(n, sum(s, {centred} * {centred})) * {share}", dtype,
                         X=cube, M=batch_mean)
    y = node.run(f"Y(n,c,s) = {centred} * S(c) / sqrt(V(c) + {literal(epsilon)}) + B(c)",
                 dtype, X=cube, M=batch_mean, S=scale, V=batch_var, B=bias)
    kept, moved = literal(momentum), literal(1.0 - momentum)
    running = [node.run(f"Y(c) = R(c) * {kept} + N(c) * {moved}", dtype, R=old, N=new)
               .astype(x.dtype, copy=False) if len(node.outputs) > 1 + k else old
               for k, (old, new) in enumerate(((mean, batch_mean), (var, batch_var)))]
    return (y.reshape(x.shape).astype(x.dtype, copy=False), running[0], running[1])
