"""Einsum: the equation is the core's own notation, so it goes straight to ``ta.einsum``.

ONNX equations are NumPy subscripts, possibly with spaces (``"bij, bjk -> bik"``), an
ellipsis, or no ``->`` (the implicit output); ``ta.einsum`` reads all of these once the spaces
are removed. Operands are widened to the kernel dtype (:func:`compute_dtype`) and the result is
narrowed back to the inputs' type.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.registry import op


@op("Einsum", since=12)
def einsum(node: NodeContext, *inputs: np.ndarray, equation: str) -> np.ndarray:
    """``ta.einsum(equation, *inputs)``, compiled by the core like any other statement."""
    subscripts = "".join(equation.split())
    if subscripts.split("->")[0].count(",") + 1 != len(inputs):
        raise ta.ShapeError(f"{node}: equation {equation!r} does not name {len(inputs)} "
                            f"operand(s)")
    dtype = compute_dtype(np.result_type(*inputs))
    node.note(f"ta.einsum {subscripts!r}")
    operands = [np.asarray(a, dtype=dtype) for a in inputs]
    result = ta.einsum(subscripts, *operands, dtype=dtype, backend=node.kernels.backend)
    return np.asarray(result).astype(inputs[0].dtype, copy=False)
