"""NumPy's broadcasting of size-1 dimensions in einsum, as a rewrite of the statement.

In ``np.einsum("ij,ij->j", a, b)`` with ``a`` of shape ``(1, n)`` and ``b`` of shape ``(m, n)``,
``a``'s row is reused for every ``i``. Here that operand simply stops reading ``i``: the access
``A(i,j)`` becomes ``A(j)`` over ``a`` reshaped to ``(n,)``, and the kernel reads the one row
for every ``i``. No operand is stretched in memory, and the statement stays one kernel.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Collection, Mapping

from tensoralg.notation.ast import (
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Expr,
    Mul,
    Neg,
    Reduce,
    Sub,
    accesses,
)


def broadcast(stmt: Assignment, shapes: Mapping[str, tuple[int, ...]],
              dense: Collection[str]) -> tuple[Assignment, dict[str, tuple[int, ...]]] | None:
    """``(statement, axes to drop per operand)`` when some dense operand has size 1 along an
    index that another operand gives a larger size; None when nothing broadcasts (or a sparse
    operand would have to, which NumPy does not do either: the shape error then stands).

    >>> from tensoralg.notation import parse_einsum
    >>> stmt, drop = broadcast(parse_einsum("ij,ij->j", [2, 2]), {"A": (1, 4), "B": (3, 4)},
    ...                        {"A", "B"})
    >>> str(stmt), drop
    ('out(j) = sum(i, A(j) * B(i,j))', {'A': (0,)})
    """
    sizes: dict[str, set[int]] = {}
    for access in accesses(stmt.rhs):
        for mode, index in enumerate(access.indices):
            sizes.setdefault(index, set()).add(shapes[access.tensor][mode])
    stretched = {index for index, found in sizes.items() if 1 in found and len(found) == 2}
    if not stretched:
        return None
    drop: dict[str, tuple[int, ...]] = {}
    for access in dict.fromkeys(accesses(stmt.rhs)):
        axes = tuple(mode for mode, index in enumerate(access.indices)
                     if index in stretched and shapes[access.tensor][mode] == 1)
        if axes:
            if access.tensor not in dense:
                return None
            drop[access.tensor] = axes
    return replace(stmt, rhs=_without(stmt.rhs, drop)), drop


def _without(expr: Expr, drop: Mapping[str, tuple[int, ...]]) -> Expr:
    match expr:
        case Access(tensor, indices) if tensor in drop:
            return Access(tensor, tuple(i for m, i in enumerate(indices)
                                        if m not in drop[tensor]))
        case Neg(x):
            return Neg(_without(x, drop))
        case Add() | Sub() | Mul() | Div():
            return type(expr)(_without(expr.lhs, drop), _without(expr.rhs, drop))
        case Call(func, args):
            return Call(func, tuple(_without(a, drop) for a in args))
        case Reduce(index, body):
            return Reduce(index, _without(body, drop))
    return expr


__all__ = ["broadcast"]
