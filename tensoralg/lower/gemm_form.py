"""Which statements are a dense matrix product, and which code runs one.

``C(i,j) = sum(k, A(i,k) * B(k,j))``, with either operand read transposed, is the one
contraction for which a tuned library beats anything a general loop compiler emits on this
kind of machine. It has three implementations (``schedule.GemmRoute``): BLAS
(``runtime/blas.py``: the gemm NumPy links), tensoralg's register-tiled GEMM (``codegen/gemm.py``, about 40% of
OpenBLAS here) and the statement's own loop nest (a fraction of either). A schedule's
``gemm(route)`` picks one; any other schedule keeps the loop nest it schedules; without a
schedule, float products of at least ``GEMM_MIN_FMAS`` multiply-adds go to BLAS and smaller
ones to the loop nest, whose call is cheaper. The kernel's notes say which: a visible dispatch,
not a fallback.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tensoralg.formats.format import Format
from tensoralg.notation.ast import Access, Assignment, Mul, Reduce
from tensoralg.schedule import Gemm, GemmRoute, Schedule

# Below this many multiply-adds the loop nest is as fast and its call is cheaper (measured
# on this kind of machine: packing and blocking pay from about 64^3).
GEMM_MIN_FMAS = 64 ** 3
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))


@dataclass(frozen=True, slots=True)
class GemmForm:
    """``out = op(a) @ op(b)``, where ``op`` transposes when the flag says so."""

    a: str
    a_transposed: bool
    b: str
    b_transposed: bool

    def dims(self, shape_a: tuple[int, ...], shape_b: tuple[int, ...]
             ) -> tuple[int, int, int, int]:
        """``(m, k, n, k_b)`` of the product of operands of these (2-D) shapes: ``op(a)`` is
        m x k and ``op(b)`` is k_b x n (``k == k_b`` when the shapes agree).

        >>> GemmForm("A", True, "B", False).dims((5, 2), (5, 3))
        (2, 5, 3, 5)
        """
        m, k = (shape_a[1], shape_a[0]) if self.a_transposed else (shape_a[0], shape_a[1])
        k_b, n = (shape_b[1], shape_b[0]) if self.b_transposed else (shape_b[0], shape_b[1])
        return m, k, n, k_b


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


def gemm_route(schedule: Schedule | None) -> GemmRoute | None:
    """The route a schedule asks for: its ``gemm(...)`` command, the loop nest for any other
    schedule, None (the compiler decides) without one.

    >>> gemm_route(None) is None, gemm_route(Schedule().jam(4))
    (True, <GemmRoute.LOOPS: 'loops'>)
    """
    if schedule is None:
        return None
    command = schedule.last(Gemm)
    return command.route if command is not None else GemmRoute.LOOPS


def route_note(route: GemmRoute | None) -> str:
    """What a kernel's notes say about its dense products (empty for the loop nest)."""
    if route is GemmRoute.LOOPS:
        return ""
    if route is GemmRoute.GENERATED:
        return ("calls run on the generated GEMM (codegen/gemm.py, schedule gemm(generated)) "
                "instead of this loop nest")
    where = "calls" if route is GemmRoute.BLAS else \
        f"float calls with at least {GEMM_MIN_FMAS} multiply-adds"
    return (f"{where} run on BLAS (the gemm NumPy links, through numpy.matmul, on its own "
            f"threads) instead of this loop nest; schedule gemm(generated) for tensoralg's generated "
            f"GEMM, gemm(loops) or any other schedule for this loop nest")


def gemm_refusal(form: GemmForm | None, formats: Mapping[str, Format], value_dtype: np.dtype,
                 route: GemmRoute | None = None) -> str | None:
    """Why the GEMM routes (or ``route``, when given) cannot run a call (None: they can).

    Complex products go to BLAS (``zgemm``/``cgemm`` through ``numpy.matmul``), never to the
    generated GEMM, whose hand-built module computes in real lanes only.
    """
    if form is None:
        return "the statement is not a matrix product C(i,j) = A(i,k) * B(k,j)"
    sparse = [name for name in (form.a, form.b) if not formats[name].is_dense]
    if sparse:
        return f"operand {sparse[0]} is stored {formats[sparse[0]]}, not dense"
    if np.dtype(value_dtype) in _COMPLEX and route is not GemmRoute.GENERATED:
        return None
    if np.dtype(value_dtype) in _COMPLEX:
        return (f"the values are {value_dtype}; the generated GEMM takes float32 and float64 "
                f"(gemm(blas) takes complex values too)")
    if np.dtype(value_dtype) not in _FLOATS:
        return f"the values are {value_dtype}; the GEMM routes take float32 and float64"
    return None


def large_product(form: GemmForm, operands: Mapping[str, Any]) -> bool:
    """Whether a call's operands (by name) may be a product large enough for the compiler to
    send to BLAS: a cheap look at their shapes before anything is bound."""
    a, b = operands.get(form.a), operands.get(form.b)
    shape_a, shape_b = getattr(a, "shape", ()), getattr(b, "shape", ())
    if len(shape_a) != 2 or len(shape_b) != 2:
        return False
    m, k, n, _ = form.dims(shape_a, shape_b)
    return m * k * n >= GEMM_MIN_FMAS


__all__ = ["GEMM_MIN_FMAS", "GemmForm", "gemm_form", "gemm_refusal", "gemm_route",
           "large_product", "route_note"]
