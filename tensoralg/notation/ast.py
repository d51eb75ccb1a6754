"""Index-notation AST: *what* a kernel computes, as frozen values.

A statement assigns an index expression to an output access: ``y(i) = A(i,j) * x(j)``.
Reductions are explicit after parsing: ``Reduce("j", ...)`` sums its body over ``j``; the parsers
place every reduction (TACO's rule: an index missing from the left side is summed over the
smallest subexpression holding all its uses; ``sum(j, ...)`` places one explicitly).

Functions (``Call``) name the elementwise functions of ``FUNCTIONS``; each maps scalars to a
scalar. ``ZERO_PRESERVING`` lists those with ``f(0, ..., 0) == 0``: they keep their arguments'
sparsity. The others make their subexpression dense.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Union

import numpy as np


@dataclass(frozen=True, slots=True)
class Access:
    """``tensor(i, j, ...)``: one operand (or the output) read at index variables.

    An access with no indices is a scalar operand (``alpha``).
    """

    tensor: str
    indices: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.tensor if not self.indices else f"{self.tensor}({','.join(self.indices)})"


@dataclass(frozen=True, slots=True)
class Literal:
    """A numeric constant."""

    value: float | int

    def __str__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True, slots=True)
class Neg:
    """``-operand``."""

    operand: "Expr"


@dataclass(frozen=True, slots=True)
class Add:
    """``lhs + rhs``: a union of sparsity patterns."""

    lhs: "Expr"
    rhs: "Expr"


@dataclass(frozen=True, slots=True)
class Sub:
    """``lhs - rhs``: a union of sparsity patterns."""

    lhs: "Expr"
    rhs: "Expr"


@dataclass(frozen=True, slots=True)
class Mul:
    """``lhs * rhs``: an intersection of sparsity patterns."""

    lhs: "Expr"
    rhs: "Expr"


@dataclass(frozen=True, slots=True)
class Div:
    """``lhs / rhs``: an absent numerator gives 0; a sparse denominator makes the result dense."""

    lhs: "Expr"
    rhs: "Expr"


@dataclass(frozen=True, slots=True)
class Call:
    """``func(args...)`` for a function named in ``FUNCTIONS``."""

    func: str
    args: tuple["Expr", ...]


@dataclass(frozen=True, slots=True)
class Reduce:
    """``sum(index, body)``: the sum of ``body`` over every value of ``index``."""

    index: str
    body: "Expr"


Expr = Union[Access, Literal, Neg, Add, Sub, Mul, Div, Call, Reduce]


@dataclass(frozen=True, slots=True)
class Assignment:
    """``lhs = rhs``: the statement a kernel computes. Reductions in ``rhs`` are explicit."""

    lhs: Access
    rhs: Expr

    def __str__(self) -> str:
        from tensoralg.notation.printer import format_statement

        return format_statement(self)


Statement = Assignment


def _relu(x: float) -> float:
    return x if x > 0 else 0.0 * x


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


# Name -> (arity, scalar reference implementation). The reference implementations are used to
# decide whether f(0, ..., 0) == 0 and for constant folding; kernels compute with libm.
FUNCTIONS: dict[str, tuple[int, Callable[..., float]]] = {
    "abs": (1, abs),
    "sqrt": (1, math.sqrt),
    "exp": (1, math.exp),
    "log": (1, lambda x: math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)),
    "pow": (2, lambda x, y: math.pow(x, y)),
    "max": (2, max),
    "min": (2, min),
    "relu": (1, _relu),
    "sigmoid": (1, _sigmoid),
    "tanh": (1, math.tanh),
    "sin": (1, math.sin),
    "cos": (1, math.cos),
    # Rounding to an integral value (float results; integers are unchanged). ``round`` rounds
    # half to even, as NumPy's ``rint`` and ONNX's Round do (not half away from zero as C's
    # ``round``). NumPy's, so that folding a NaN or an infinity gives it back instead of raising.
    "floor": (1, lambda x: float(np.floor(x))),
    "ceil": (1, lambda x: float(np.ceil(x))),
    "round": (1, lambda x: float(np.rint(x))),
    "gt": (2, lambda x, y: float(x > y)),
    "lt": (2, lambda x, y: float(x < y)),
    "ge": (2, lambda x, y: float(x >= y)),
    "le": (2, lambda x, y: float(x <= y)),
    "eq": (2, lambda x, y: float(x == y)),
    "ne": (2, lambda x, y: float(x != y)),
    # where(c, a, b): a where c is nonzero, else b; the branch not taken never reaches the
    # result (unlike c * a + (1 - c) * b, where an inf or NaN in it poisons it).
    "where": (3, lambda c, a, b: a if c != 0 else b),
}

ZERO_PRESERVING = frozenset(
    name for name, (arity, fn) in FUNCTIONS.items() if fn(*([0.0] * arity)) == 0
)


def accesses(expr: Expr) -> list[Access]:
    """Every access in ``expr``, left to right (duplicates kept)."""
    match expr:
        case Access():
            return [expr]
        case Literal():
            return []
        case Neg(operand) | Reduce(_, operand):
            return accesses(operand)
        case Add(lhs, rhs) | Sub(lhs, rhs) | Mul(lhs, rhs) | Div(lhs, rhs):
            return accesses(lhs) + accesses(rhs)
        case Call(_, args):
            return [a for arg in args for a in accesses(arg)]
    raise TypeError(f"not an index expression: {expr!r}")


def index_vars(expr: Expr) -> list[str]:
    """Index variables used in ``expr``, in order of first appearance (reduced ones included)."""
    seen: dict[str, None] = {}
    for access in accesses(expr):
        for index in access.indices:
            seen.setdefault(index, None)
    return list(seen)


def free_indices(expr: Expr) -> frozenset[str]:
    """Index variables used in ``expr`` and not bound by an enclosing ``Reduce``.

    >>> free_indices(Reduce("j", Mul(Access("A", ("i", "j")), Access("x", ("j",)))))
    frozenset({'i'})
    """
    match expr:
        case Access(_, indices):
            return frozenset(indices)
        case Literal():
            return frozenset()
        case Neg(operand):
            return free_indices(operand)
        case Reduce(index, body):
            return free_indices(body) - {index}
        case Add(lhs, rhs) | Sub(lhs, rhs) | Mul(lhs, rhs) | Div(lhs, rhs):
            return free_indices(lhs) | free_indices(rhs)
        case Call(_, args):
            return frozenset().union(*(free_indices(arg) for arg in args))
    raise TypeError(f"not an index expression: {expr!r}")


def tensors(stmt: Assignment) -> dict[str, int]:
    """Operand name -> rank, in order of first appearance on the right side (output excluded).

    >>> tensors(Assignment(Access("y", ("i",)), Mul(Access("A", ("i", "j")), Access("x", ("j",)))))
    {'A': 2, 'x': 1}
    """
    found: dict[str, int] = {}
    for access in accesses(stmt.rhs):
        if access.tensor != stmt.lhs.tensor:
            found.setdefault(access.tensor, len(access.indices))
    return found


def _print_expr(expr: object) -> str:
    from tensoralg.notation.printer import format_expr

    return format_expr(expr)  # type: ignore[arg-type]


# Every expression node prints in TACO syntax, as the parser reads it back.
for _node_class in (Literal, Neg, Add, Sub, Mul, Div, Call, Reduce):
    _node_class.__str__ = _print_expr  # type: ignore[method-assign]
