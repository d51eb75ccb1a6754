"""The inverse and hyperbolic trigonometric functions, in NumPy.

The statement language has no ``asin``/``sinh``... (its functions are ``FUNCTIONS`` in
``notation/ast.py``), and writing them out of the ones it has would not be exact (``sinh`` as a
difference of exponentials loses every digit near 0). So, like ``Mod``, these are NumPy ufuncs,
which follow C's libm as onnxruntime does. (Floor, Ceil and Round are statement functions and
run as kernels: ``elementwise.py``.)
"""
from __future__ import annotations

from typing import Any

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


def _numpy_unary(name: str, function: Any) -> Any:
    def run(node: NodeContext, x: np.ndarray) -> np.ndarray:
        if x.dtype.kind != "f":
            raise ta.UnsupportedError(f"{node}: {name} takes float tensors, not {x.dtype}")
        node.note(f"numpy {function.__name__} (no such function in the statement language)")
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return function(x)
    return run


for _name, _function, _since in [
    ("Asin", np.arcsin, 7), ("Acos", np.arccos, 7), ("Atan", np.arctan, 7),
    ("Sinh", np.sinh, 9), ("Cosh", np.cosh, 9), ("Asinh", np.arcsinh, 9),
    ("Acosh", np.arccosh, 9), ("Atanh", np.arctanh, 9),
]:
    op(_name, since=_since)(_numpy_unary(_name, _function))
