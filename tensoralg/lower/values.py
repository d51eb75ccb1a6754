"""The scalar computation at the innermost point of a loop nest: index expression → IR value.

Elementwise functions are expressed with IR primitives (``relu(x) = max(x, 0)``,
``sigmoid(x) = 1 / (1 + exp(-x))``, comparisons give 1 or 0 in the value dtype), so every
backend supports them without a runtime library of its own.
"""
from __future__ import annotations

from typing import Callable

from tensoralg.errors import UnsupportedError
from tensoralg.ir import build as b
from tensoralg.ir.nodes import Expr as IRExpr
from tensoralg.ir.nodes import Scalar
from tensoralg.notation.ast import Access, Add, Call, Div, Expr, Literal, Mul, Neg, Sub

_COMPARISONS = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
_FLOAT_ONLY = {"sqrt", "exp", "log", "sin", "cos", "tanh", "sigmoid", "pow"}


def value(expr: Expr, dtype: Scalar, load: Callable[[Access], IRExpr]) -> IRExpr:
    """The IR expression computing ``expr`` in ``dtype``; ``load`` reads one access's value."""

    def go(node: Expr) -> IRExpr:
        match node:
            case Access():
                return load(node)
            case Literal(v):
                return b.const(v, dtype)
            case Neg(x):
                return b.neg(go(x))
            case Add(x, y):
                return b.add(go(x), go(y))
            case Sub(x, y):
                return b.sub(go(x), go(y))
            case Mul(x, y):
                return b.mul(go(x), go(y))
            case Div(x, y):
                return b.div(go(x), go(y))
            case Call(func, args):
                return _call(func, [go(a) for a in args], dtype)
        raise TypeError(f"cannot compute {node!r}")

    return go(expr)


def _call(func: str, args: list[IRExpr], dtype: Scalar) -> IRExpr:
    if dtype.is_complex:
        # Complex values have no order (max, relu, comparisons) and the IR has no complex
        # math functions: only + - * / reach the kernels (ir/nodes.py).
        raise UnsupportedError(f"function {func} is not defined on complex values (the kernel "
                               f"computes in {dtype}); complex kernels take + - * / only, "
                               f"so pass real operands or compute {func} with NumPy")
    if func in _FLOAT_ONLY and not dtype.is_float:
        raise UnsupportedError(f"{func} needs floating-point values, but the kernel computes in "
                               f"{dtype}; pass float operands or dtype='float64'")
    match func, args:
        case ("abs" | "sqrt" | "exp" | "log" | "sin" | "cos" | "tanh"), [x]:
            return b.unary(func, x)
        case ("floor" | "ceil" | "round"), [x]:
            # An integer is its own floor, ceiling and rounding.
            return b.unary(func, x) if dtype.is_float else x
        case "relu", [x]:
            return b.maximum(x, 0)
        case "sigmoid", [x]:
            return b.div(b.const(1, dtype), b.add(b.const(1, dtype), b.unary("exp", b.neg(x))))
        case "pow", [x, y]:
            return b.binary("pow", x, y)
        case "max", [x, y]:
            return b.maximum(x, y)
        case "min", [x, y]:
            return b.minimum(x, y)
        case "where", [c, x, y]:
            return b.select(b.binary("!=", c, b.const(0, dtype)), x, y)
        case _ if func in _COMPARISONS and len(args) == 2:
            return b.select(b.binary(_COMPARISONS[func], args[0], args[1]),
                            b.const(1, dtype), b.const(0, dtype))
    raise UnsupportedError(f"function {func} with {len(args)} arguments is not supported")
