"""Evaluating the IR's scalar expressions on the host, for launch decisions.

The runtime sizes grids and per-thread heap buffers from the kernel's own expressions (a loop's
bounds, an allocation's element count), evaluated over the call's sizes: the same arithmetic
the kernel does, with C's integer division.
"""
from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping

from tensoralg.ir.nodes import Binary, Cast, Const, Declare, Expr, Scalar, Select, Unary, Var


class Unevaluable(Exception):
    """The expression reads memory or a variable the host does not know."""


_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul, "min": min, "max": max,
               "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
               "==": operator.eq, "!=": operator.ne}


def evaluate(expr: Expr, env: Mapping[str, int | float]) -> int | float:
    """The value of ``expr`` with variables from ``env``; `Unevaluable` when it loads memory
    or names a variable ``env`` lacks.

    >>> from tensoralg.ir.build import var, div, add
    >>> from tensoralg.ir.nodes import I64
    >>> evaluate(add(div(var("n", I64), 64), 1), {"n": -130})
    -1
    """
    match expr:
        case Const(value):
            return value
        case Var(name):
            if name not in env:
                raise Unevaluable(name)
            return env[name]
        case Cast(operand, to):
            value = evaluate(operand, env)
            return float(value) if to.is_float else int(value) if to != Scalar.BOOL \
                else bool(value)
        case Select(cond, if_true, if_false):
            return evaluate(if_true if evaluate(cond, env) else if_false, env)
        case Unary("neg", operand):
            return -evaluate(operand, env)
        case Binary(op, lhs, rhs):
            a, b = evaluate(lhs, env), evaluate(rhs, env)
            if op in _ARITHMETIC:
                return _ARITHMETIC[op](a, b)
            if op == "/" and isinstance(a, int) and isinstance(b, int) and b:
                quotient = abs(a) // abs(b)
                return quotient if (a >= 0) == (b > 0) else -quotient
            if op == "/" and b:
                return a / b
    raise Unevaluable(type(expr).__name__)


def environment(values: Mapping[str, int | float],
                scalars: Iterable[Declare]) -> dict[str, int | float]:
    """``values`` extended by each declaration whose initial value can be evaluated, in order
    (a local is taken at its declared value: the kernels size buffers before changing them)."""
    env = dict(values)
    for declaration in scalars:
        try:
            env.setdefault(declaration.var.name, evaluate(declaration.init, env))
        except Unevaluable:
            continue
    return env


__all__ = ["Unevaluable", "environment", "evaluate"]
