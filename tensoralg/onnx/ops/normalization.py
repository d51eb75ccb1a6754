"""BatchNormalization in inference mode, as one statement over the channel index."""
from __future__ import annotations

from typing import Any

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


def _inference_only(attributes: dict[str, Any]) -> str | None:
    if attributes.get("training_mode", 0):
        return "training_mode=1 (batch statistics) is not supported; export in eval mode"
    return None


@op("BatchNormalization", since=9, check=_inference_only)
def batch_normalization(node: NodeContext, x: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                        mean: np.ndarray, var: np.ndarray, *, epsilon: float = 1e-5,
                        momentum: float = 0.9, training_mode: int = 0) -> np.ndarray:
    """``Y(n,c,...) = (X(n,c,...) - M(c)) * S(c) / sqrt(V(c) + eps) + B(c)``."""
    if x.ndim < 2:
        raise ta.ShapeError(f"{node}: X must have a channel dimension, got shape {x.shape}")
    channels = x.shape[1]
    for name, value in (("scale", scale), ("B", bias), ("mean", mean), ("var", var)):
        if value.shape != (channels,):
            raise ta.ShapeError(f"{node}: {name} has shape {value.shape}, expected ({channels},)")
    dtype = compute_dtype(x.dtype, needs_float=True)
    indices = INDICES[:x.ndim]
    c = indices[1]
    x_access = f"X({','.join(indices)})"
    rhs = f"({minus(x_access, f'M({c})')}) * S({c}) / sqrt(V({c}) + {literal(epsilon)}) + B({c})"
    result = node.run(f"{output_access(indices)} = {rhs}", dtype, X=x, M=mean, S=scale,
                      V=var, B=bias)
    return result.reshape(x.shape).astype(x.dtype, copy=False)
