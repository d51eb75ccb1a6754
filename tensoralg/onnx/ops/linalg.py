"""Det: determinants of square matrices, by NumPy's LU factorisation (LAPACK).

A determinant is a product of a factorisation's pivots, which the statement language (sums of
products over fixed index sets) cannot write; onnxruntime factors too (Eigen's LU), so the two
agree to rounding.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


@op("Det", since=11)
def det(node: NodeContext, x: np.ndarray) -> np.ndarray:
    """The determinant of each of the ``(..., M, M)`` matrices of ``x``."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ta.ShapeError(f"{node}: Det takes square matrices (..., M, M), not {x.shape}")
    if x.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: Det takes float tensors, not {x.dtype}")
    node.note("numpy LU determinant (no factorisation in the statement language)")
    wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
    return np.asarray(np.linalg.det(wide)).astype(x.dtype)
