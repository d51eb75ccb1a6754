"""Which statements are a dense matrix product, the shape the generated GEMM computes.

``C(i,j) = sum(k, A(i,k) * B(k,j))``, with either operand read transposed, is the one
contraction that ``codegen/gemm.py``'s register-tiled kernel runs at the machine's FMA rate;
the statement compiler's own loops reach a fraction of it (see that module). The API sends such
statements on dense operands there, visibly (a kernel's notes say so, and any schedule keeps
the loop nest), instead of to the loops lowering would build.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.notation.ast import Access, Assignment, Mul, Reduce

# Below this many multiply-adds the loop nest is as fast and its call is cheaper (measured
# on this kind of machine: the generated GEMM's packing and blocking pay from about 64^3).
GEMM_MIN_FMAS = 64 ** 3


@dataclass(frozen=True, slots=True)
class GemmForm:
    """``out = op(a) @ op(b)``, where ``op`` transposes when the flag says so."""

    a: str
    a_transposed: bool
    b: str
    b_transposed: bool


def gemm_form(stmt: Assignment) -> GemmForm | None:
    """The matrix product ``stmt`` computes, or None when it is not one.

    >>> from tensoralg.notation import parse_statement
    >>> gemm_form(parse_statement("C(i,j) = A(k,i) * B(k,j)"))
    GemmForm(a='A', a_transposed=True, b='B', b_transposed=False)
    >>> gemm_form(parse_statement("C(i,j) = A(i,k) * B(k,j) + D(i,j)")) is None
    True
    """
    out = stmt.lhs.indices
    match stmt.rhs:
        case Reduce(k, Mul(Access() as left, Access() as right)):
            pass
        case _:
            return None
    if len(out) != 2 or len(set(out)) != 2 or k in out:
        return None
    i, j = out
    for first, second in ((left, right), (right, left)):
        a = _oriented(first, i, k)
        b = _oriented(second, k, j)
        if a is not None and b is not None:
            return GemmForm(first.tensor, a, second.tensor, b)
    return None


def _oriented(access: Access, row: str, column: str) -> bool | None:
    """False when ``access`` reads ``(row, column)``, True for ``(column, row)``, else None."""
    if access.indices == (row, column):
        return False
    if access.indices == (column, row):
        return True
    return None


__all__ = ["GEMM_MIN_FMAS", "GemmForm", "gemm_form"]
