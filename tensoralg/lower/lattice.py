"""Merge lattices: which combinations of sparse operands a loop must visit, and what to compute.

At one index variable, each access whose next storage level is sparse (compressed or singleton)
is an *iterator*. A lattice point is a set of iterators that are present together, with the
expression that remains when every other iterator's access is absent (zero). Points whose
expression is identically zero are dropped; that is what makes ``*`` an intersection and ``+`` a
union (Kjolstad et al., OOPSLA 2017). When the expression with *no* iterator present is not zero
(``b + 1``, ``exp(b)``, ``b + d`` with ``d`` dense), the loop must visit every coordinate of the
dimension: the lattice is ``dense``.

Absent operands are substituted by zero and the expression is folded with the rules of
``without``: ``0 * x = 0`` (the usual sparse convention, even when a dense ``x`` holds inf or
NaN), ``0 / c = 0`` for a non-zero literal ``c`` only — ``0 / x`` for a tensor ``x`` stays, so a
division by a tensor makes the loop dense and gives NumPy's inf and NaN where ``x`` is zero —
and ``f(0, ..., 0)`` evaluated for the elementwise functions.

>>> from tensoralg.notation import parse_statement
>>> print(lattice_for("a(i) = b(i) + c(i)", {"b": "s", "c": "s"}, "i"))
[b,c] [b] [c]
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

from tensoralg.notation.ast import (
    FUNCTIONS,
    Access,
    Add,
    Call,
    Div,
    Expr,
    Literal,
    Mul,
    Neg,
    Reduce,
    Sub,
    accesses,
)

ZERO = Literal(0)


def is_zero(expr: Expr) -> bool:
    """Whether ``expr`` is the literal zero."""
    return isinstance(expr, Literal) and expr.value == 0


def without(expr: Expr, absent: frozenset[Access] | set[Access]) -> Expr:
    """``expr`` with every access in ``absent`` replaced by zero, then folded."""
    match expr:
        case Access():
            return ZERO if expr in absent else expr
        case Literal():
            return expr
        case Neg(operand):
            inner = without(operand, absent)
            if isinstance(inner, Literal):
                return Literal(-inner.value)
            return expr if inner is operand else Neg(inner)
        case Add(lhs, rhs):
            a, b = without(lhs, absent), without(rhs, absent)
            if is_zero(a):
                return b
            if is_zero(b):
                return a
            if isinstance(a, Literal) and isinstance(b, Literal):
                return Literal(a.value + b.value)
            return expr if (a is lhs and b is rhs) else Add(a, b)
        case Sub(lhs, rhs):
            a, b = without(lhs, absent), without(rhs, absent)
            if is_zero(b):
                return a
            if isinstance(a, Literal) and isinstance(b, Literal):
                return Literal(a.value - b.value)
            if is_zero(a):
                return Literal(-b.value) if isinstance(b, Literal) else Neg(b)
            return expr if (a is lhs and b is rhs) else Sub(a, b)
        case Mul(lhs, rhs):
            a, b = without(lhs, absent), without(rhs, absent)
            if is_zero(a) or is_zero(b):
                return ZERO
            if isinstance(a, Literal) and isinstance(b, Literal):
                return Literal(a.value * b.value)
            return expr if (a is lhs and b is rhs) else Mul(a, b)
        case Div(lhs, rhs):
            a, b = without(lhs, absent), without(rhs, absent)
            if is_zero(a) and isinstance(b, Literal) and b.value != 0:
                return ZERO
            if isinstance(a, Literal) and isinstance(b, Literal) and b.value != 0:
                return Literal(a.value / b.value)
            return expr if (a is lhs and b is rhs) else Div(a, b)
        case Call(func, args):
            new_args = tuple(without(arg, absent) for arg in args)
            if all(isinstance(arg, Literal) for arg in new_args):
                value = _evaluate(func, [arg.value for arg in new_args])  # type: ignore[union-attr]
                if value is not None:
                    return Literal(value)
            return expr if new_args == args else Call(func, new_args)
        case Reduce(index, body):
            inner = without(body, absent)
            return ZERO if is_zero(inner) else Reduce(index, inner)
    raise TypeError(f"not an index expression: {expr!r}")


def _evaluate(func: str, values: list[float]) -> float | None:
    """The value of ``func`` on constants, or None when it is not a finite real number."""
    try:
        value = FUNCTIONS[func][1](*[float(v) for v in values])
    except (ValueError, OverflowError, ZeroDivisionError):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True, slots=True)
class LatticePoint:
    """A set of iterators present together and the expression computed there."""

    iterators: tuple[Access, ...]
    expr: Expr

    def __str__(self) -> str:
        return "[" + ",".join(str(a.tensor) for a in self.iterators) + "]"


@dataclass(frozen=True, slots=True)
class Lattice:
    """The merge lattice of one index variable.

    ``points`` are ordered from the most iterators to the fewest; ``dense`` says that the loop
    covers the whole dimension (then the empty point, if its expression is not zero, is last).
    ``iterators`` lists every iterator, in order of first appearance.
    """

    index: str
    iterators: tuple[Access, ...]
    points: tuple[LatticePoint, ...]
    dense: bool

    def __str__(self) -> str:
        text = " ".join(str(point) for point in self.points if point.iterators)
        if self.dense:
            text = (text + " " if text else "") + "dense"
        return text or "empty"

    def point(self, present: Iterable[Access]) -> LatticePoint | None:
        """The point for exactly this set of present iterators, if it computes anything."""
        key = frozenset(present)
        for p in self.points:
            if frozenset(p.iterators) == key:
                return p
        return None


def build_lattice(index: str, expr: Expr, iterators: Iterable[Access]) -> Lattice:
    """The lattice of ``expr`` at ``index``, given the accesses that are sparse iterators there.

    Every subset of iterators is a candidate point; a subset whose expression folds to zero
    is not a point. Enumerating subsets is exact and cheap for the handful of operands a
    statement has (at most 2**len(iterators) folds).
    """
    order = tuple(dict.fromkeys(iterators))
    points = []
    for size in range(len(order), -1, -1):
        for subset in itertools.combinations(order, size):
            absent = frozenset(order) - frozenset(subset)
            specialised = without(expr, absent)
            if not is_zero(specialised):
                points.append(LatticePoint(subset, specialised))
    dense = any(not p.iterators for p in points)
    return Lattice(index, order, tuple(points), dense)


def lattice_for(statement: str, formats: Mapping[str, str], index: str) -> Lattice:
    """Build the lattice of ``index`` in a parsed statement, for tests and for reading.

    ``formats`` maps tensor names to level strings in natural mode order; an access is an
    iterator at ``index`` when the level storing ``index`` is not dense. Reductions are
    ignored (the lattice of the statement's body is built).
    """
    from tensoralg.notation import parse_statement

    stmt = parse_statement(statement)
    body = stmt.rhs
    while isinstance(body, Reduce):
        body = body.body
    its = [a for a in accesses(body)
           if index in a.indices and formats.get(a.tensor, "d" * len(a.indices))[
               a.indices.index(index)] != "d"]
    return build_lattice(index, body, its)
