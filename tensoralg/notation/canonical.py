"""Canonical text of a statement: the same for statements equal up to renaming index variables."""
from __future__ import annotations

from typing import Mapping

from tensoralg.notation.ast import Access, Assignment, Expr, Reduce
from tensoralg.notation.printer import format_statement
from tensoralg.notation.reductions import children, with_children


def canonical_text(stmt: Assignment) -> str:
    """``stmt`` printed with its index variables renamed i0, i1, ... in order of first appearance.

    The left side comes first, then the right side left to right as printed (a ``sum``'s index
    before its body). Tensor names are kept.

    >>> from tensoralg.notation.parse_einsum import parse_einsum
    >>> canonical_text(parse_einsum("ab,b->a", [2, 1]))
    'out(i0) = sum(i1, A(i0,i1) * B(i1))'
    """
    names = {index: f"i{n}" for n, index in enumerate(index_order(stmt))}
    return format_statement(rename_indices(stmt, names))


def index_order(stmt: Assignment) -> tuple[str, ...]:
    """``stmt``'s index variables in the order ``canonical_text`` numbers them: two statements
    with the same canonical text name the same index at the same place of this tuple.

    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> index_order(parse_statement("C(i,j) = A(i,k) * B(k,j)"))
    ('i', 'j', 'k')
    """
    order: dict[str, None] = dict.fromkeys(stmt.lhs.indices)
    _appearance(stmt.rhs, order)
    return tuple(order)


def rename_indices(stmt: Assignment, names: Mapping[str, str]) -> Assignment:
    """``stmt`` with every index variable ``k`` replaced by ``names[k]`` (others kept).

    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> str(rename_indices(parse_statement("y(i) = x(i)"), {"i": "p"}))
    'y(p) = x(p)'
    """
    lhs = Access(stmt.lhs.tensor, tuple(names.get(i, i) for i in stmt.lhs.indices))
    return Assignment(lhs, rename_expr(stmt.rhs, names))


def rename_expr(expr: Expr, names: Mapping[str, str]) -> Expr:
    """``expr`` with every index variable ``k`` replaced by ``names[k]`` (others kept)."""
    match expr:
        case Access(tensor, indices):
            return Access(tensor, tuple(names.get(i, i) for i in indices))
        case Reduce(index, body):
            return Reduce(names.get(index, index), rename_expr(body, names))
    return with_children(expr, [rename_expr(child, names) for child in children(expr)])


def _appearance(expr: Expr, order: dict[str, None]) -> None:
    match expr:
        case Access(_, indices):
            order.update(dict.fromkeys(i for i in indices if i not in order))
        case Reduce(index, body):
            order.setdefault(index, None)
            _appearance(body, order)
        case _:
            for child in children(expr):
                _appearance(child, order)
