"""Dense layers of a static plan on the generated GEMM (``tensoralg.api.dense_layer``).

A fused program whose head went to BLAS and whose weight is a constant runs its product on the
generated GEMM instead: the weight is packed once when the plan is built. When the epilogue is
only a bias over the columns and/or a ReLU (``max(P(i,j) + b(j), 0)`` and its sub-forms, by
far the most common layer), the GEMM applies it to the tile in registers and the step is one
call; any other epilogue keeps its own kernel, reading the product from a scratch buffer as it
did after BLAS. The plan and the profile say which (``generated GEMM ... + bias + relu``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tensoralg.api import DenseLayer, dense_layer

# Narrower products stay with BLAS or the statement compiler: a register tile is one vector
# (16 float32) wide at least, so an n=1 output layer would do 16x the work (measured: 256x256x1
# took 21 µs against NumPy's 5.5 µs; from n=16 on the generated GEMM was faster).
MIN_COLUMNS = 16
_ATOM = re.compile(r"\(([A-Za-z_]\w*\([a-z,]*\))\)")   # (A(i,j)) -> A(i,j)


@dataclass(frozen=True)
class Epilogue:
    """What the GEMM can apply itself: a column bias (an operand name) and/or a ReLU."""

    bias: str | None
    relu: bool


def _strip(text: str) -> str:
    text = text.replace(" ", "")
    while True:
        shorter = _ATOM.sub(r"\1", text)
        if shorter == text:
            break
        text = shorter
    while text.startswith("(") and _closing(text, 0) == len(text) - 1:
        text = text[1:-1]
    return text


def _closing(text: str, start: int) -> int:
    depth = 0
    for k in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[k], 0)
        if depth == 0:
            return k
    return -1


def gemm_epilogue(statement: str, operands: Mapping[str, tuple[str, tuple[int, ...], Any]],
                  product: str, n: int) -> Epilogue | None:
    """The epilogue of ``statement`` if the GEMM can apply it all, else None. ``product`` is
    the letter of the head's product; a bias must be an operand of shape ``(n,)`` indexed by
    the column.

    >>> ops = {"A": ("P", (4, 3), "view"), "B": ("b", (3,), "view")}
    >>> gemm_epilogue("Y(i,j) = max(((A(i,j)) + B(j)), 0)", ops, "A", 3)
    Epilogue(bias='b', relu=True)
    >>> gemm_epilogue("Y(i,j) = sigmoid(A(i,j))", ops, "A", 3) is None
    True
    """
    lhs, _, rhs = statement.partition("=")
    if lhs.replace(" ", "") != "Y(i,j)":
        return None
    body = _strip(rhs)
    relu = False
    if body.startswith("max(") and body.endswith(",0)") and _closing(body, 3) == len(body) - 1:
        body, relu = _strip(body[4:-3]), True
    p = f"{product}(i,j)"
    if body == p:
        return Epilogue(None, relu)
    parts = body.split("+")
    if len(parts) != 2 or p not in parts:
        return None
    other = parts[1] if parts[0] == p else parts[0]
    match = re.fullmatch(r"([A-Za-z_]\w*)\(j\)", other)
    if match and match.group(1) in operands:
        name, shape, _ = operands[match.group(1)]
        if tuple(shape) == (n,):
            return Epilogue(name, relu)
    return None


def layer_of(weight: np.ndarray, trans_b: bool, epilogue: Epilogue | None,
             constants: Mapping[str, np.ndarray], dtype: np.dtype) -> DenseLayer | None:
    """The dense layer for a constant ``weight`` (K x N, or N x K with ``trans_b``) and the
    epilogue, or None when the bias is not a constant of ``dtype``."""
    w = weight.T if trans_b else weight
    if w.ndim != 2 or w.dtype != dtype:
        return None
    bias = None
    if epilogue is not None and epilogue.bias is not None:
        bias = constants.get(epilogue.bias)
        if bias is None or bias.dtype != dtype:
            return None
        bias = bias.reshape(-1)
    return dense_layer(np.ascontiguousarray(w), bias,
                       relu=epilogue is not None and epilogue.relu)


__all__ = ["MIN_COLUMNS", "Epilogue", "gemm_epilogue", "layer_of"]
