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

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tensoralg.formats.format import Format
from tensoralg.notation.ast import Access, Assignment, Mul, Reduce
from tensoralg.schedule import Gemm, GemmRoute, Schedule

# Below this many multiply-adds the loop nest is as fast and its call is cheaper (measured
# on this kind of machine: packing and blocking pay from about 64^3).
GEMM_MIN_FMAS = 64 ** 3
# A stack of products (``ContractionForm``) goes to BLAS when each product's three sides are at
# least this long: below, a gemm call per product costs more than the loop nest's whole work.
CONTRACTION_MIN_SIDE = 4
# ... and when each product has at least so many multiply-adds (one product: GEMM_MIN_FMAS),
# as the loop nest's register tile decides: numpy.matmul calls gemm once per product of a
# stack (~5 µs each here), the loop nest runs the whole stack on tensoralg's threads, at
# the speed of its tile, a strip of the output's last axis held in registers across the sum
# (``lower/concretize.dense_score`` runs every layout so: dot products ``bij,bkj->bik`` and a
# last index strided in its operand ``bij,bjk->bki`` by reading an operand transposed).
# gemm(loops) / gemm(blas), two threads, float32 and float64, 2026-12-06 (development VM;
# `python benchmarks/dense_einsum.py --stacks 48` and ad hoc stacks of each layout, 2^22
# multiply-adds a call):
# - the output's last axis fills a 512-bit register (16 float32, 8 float64) or more:
#   products along rows (``bij,bjk->bik``) 0.29-0.84 up to 2^20 a product (one at 1.18), with
#   six rows jammed over the tiles (AVX-512, ``jam(4, tiles=6)``); ad hoc on eight shapes
#   0.72-1.09 at 2^21, 1.17-1.36 at 2^23, 1.5-1.7 at 256^3; dot products 0.30-1.07 up to
#   2^21 (the second operand copied transposed from 32 rows, ``api.DENSE_COPY_REUSE``; the
#   dot products themselves below); a strided last index (its operand copied) 0.37-0.98 up
#   to 2^21; last axes of 24, 48, 50 and 100: 0.30-0.98;
# - a narrower last axis (8 or 12 float32): the strip is cut into scalar rests, 1.17-1.84
#   from 2^15 (before the copies, the strided layout was 1.8-2.5 at 2^12-2^15).
STACK_TILED_MIN_FMAS = 2 ** 21
STACK_MIN_FMAS = 2 ** 12
# The bytes of the output's last axis from which the register tile runs at its speed.
STACK_TILE_MIN_BYTES = 64
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


@dataclass(frozen=True, slots=True)
class ContractionForm:
    """``out = sum(summed, a * b)`` over dense operands, read as a stack of matrix products:
    the indices of both operands and of the output are the stack (``batch``), those of ``a``
    alone and of the output its rows, those of ``b`` alone and of the output its columns, and
    those of both operands but not the output are summed. ``tensordot`` and batched
    ``matmul`` are this form; NumPy's ``einsum(optimize=True)`` sends it to BLAS the same way.
    """

    a: str
    a_indices: tuple[str, ...]
    b: str
    b_indices: tuple[str, ...]
    out: tuple[str, ...]
    batch: tuple[str, ...]
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    summed: tuple[str, ...]

    @property
    def along_rows(self) -> bool:
        """Whether the output's last index is the last index of the one operand that holds
        it: the loop nest's innermost loop then runs contiguously through that operand and
        the output (a row of the output held in registers across the sum)."""
        last = self.out[-1] if self.out else None
        return (last in self.cols and self.b_indices[-1] == last) or \
            (last in self.rows and self.a_indices[-1] == last)

    @property
    def dots(self) -> bool:
        """Whether a summed index is the last index of both operands (``bij,bkj->bik``): the
        loop nest's innermost loop is a dot product of two contiguous runs."""
        return bool(self.a_indices) and bool(self.b_indices) and \
            self.a_indices[-1] == self.b_indices[-1] and self.a_indices[-1] in self.summed

    def sizes(self, shape_a: Any, shape_b: Any) -> dict[str, int] | None:
        """Each index's size from the operands' shapes; None where a rank or a shared size
        disagrees (or broadcasts): the general path then reports it.

        >>> from tensoralg.notation import parse_statement
        >>> form = contraction_form(parse_statement("C(b,i,k) = A(b,i,j) * B(b,j,k)"))
        >>> form.sizes((2, 3, 4), (2, 4, 5)), form.sizes((2, 3, 4), (2, 5, 5))
        ({'b': 2, 'i': 3, 'j': 4, 'k': 5}, None)
        """
        if shape_a is None or shape_b is None or len(shape_a) != len(self.a_indices) or \
                len(shape_b) != len(self.b_indices):
            return None
        dims = dict(zip(self.a_indices, shape_a))
        if any(dims.setdefault(i, n) != n for i, n in zip(self.b_indices, shape_b)):
            return None
        return dims

    def extents(self, dims: Mapping[str, int]) -> tuple[int, int, int, int]:
        """``(stack, m, k, n)``: the number of products and each product's sizes."""
        size = lambda group: math.prod(dims[i] for i in group)  # noqa: E731
        return size(self.batch), size(self.rows), size(self.summed), size(self.cols)


def contraction_form(stmt: Assignment) -> ContractionForm | None:
    """The stack of matrix products ``stmt`` computes, or None when it is not one (an index
    repeated within an operand, an index summed in one operand only, no summed index, or a
    plain matrix product, which ``gemm_form`` reads).

    >>> from tensoralg.notation import parse_statement
    >>> f = contraction_form(parse_statement("C(b,n,h) = X(b,n,d) * W(d,h)"))
    >>> f.batch, f.rows, f.cols, f.summed
    ((), ('b', 'n'), ('h',), ('d',))
    >>> contraction_form(parse_statement("C(b,i,k) = A(b,i,j) * B(b,j,k)")).batch
    ('b',)
    >>> contraction_form(parse_statement("y(i) = A(i,j) * x(j)")).cols      # a matrix-vector
    ()
    >>> contraction_form(parse_statement("C(i,j) = A(i,k) * B(k,j)")) is None
    True
    """
    summed: list[str] = []
    body = stmt.rhs
    while isinstance(body, Reduce):
        summed.append(body.index)
        body = body.body
    if not summed or not isinstance(body, Mul) or not isinstance(body.lhs, Access) or \
            not isinstance(body.rhs, Access) or gemm_form(stmt) is not None:
        return None
    a, b, out = body.lhs, body.rhs, stmt.lhs.indices
    if len(set(a.indices)) != len(a.indices) or len(set(b.indices)) != len(b.indices) or \
            len(set(out)) != len(out) or set(summed) & set(out) or \
            len(set(summed)) != len(summed):
        return None
    both = set(a.indices) & set(b.indices)
    if set(summed) != both - set(out) or not set(out) <= set(a.indices) | set(b.indices):
        return None
    batch = tuple(i for i in out if i in both)
    rows = tuple(i for i in out if i in a.indices and i not in both)
    cols = tuple(i for i in out if i in b.indices and i not in both)
    return ContractionForm(a.tensor, a.indices, b.tensor, b.indices, out, batch, rows, cols,
                           tuple(i for i in a.indices if i in summed))


def stack_pays(form: ContractionForm, dims: Mapping[str, int], itemsize: int = 8) -> bool:
    """Whether the compiler sends a call of ``form`` with these index sizes (values of
    ``itemsize`` bytes) to BLAS: each product's sides at least ``CONTRACTION_MIN_SIDE``, and
    at least ``GEMM_MIN_FMAS`` multiply-adds for a single product; for each product of a
    stack, ``STACK_TILED_MIN_FMAS`` where the output's last axis holds at least
    ``STACK_TILE_MIN_BYTES``, ``STACK_MIN_FMAS`` where it is narrower.

    >>> from tensoralg.notation import parse_statement
    >>> form = contraction_form(parse_statement("C(b,i,k) = A(b,i,j) * B(b,j,k)"))
    >>> stack_pays(form, {"b": 50, "i": 6, "j": 7, "k": 5})
    False
    >>> stack_pays(form, {"b": 8, "i": 256, "j": 256, "k": 256})
    True
    >>> [stack_pays(form, {"b": 8, "i": 64, "j": 64, "k": k}, 4) for k in (16, 8)]
    [False, True]
    """
    stack, m, k, n = form.extents(dims)
    if stack == 1:
        least = GEMM_MIN_FMAS
    elif dims[form.out[-1]] * itemsize >= STACK_TILE_MIN_BYTES:
        least = STACK_TILED_MIN_FMAS
    else:
        least = STACK_MIN_FMAS
    return min(m, k, n) >= CONTRACTION_MIN_SIDE and m * k * n >= least


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
    >>> gemm_route(Schedule().jam(4).gemm("auto")) is None    # as without a schedule
    True
    """
    if schedule is None:
        return None
    command = schedule.last(Gemm)
    if command is not None and command.route is GemmRoute.AUTO:
        return None
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


def stack_note(route: GemmRoute | None) -> str:
    """What a kernel's notes say about a stack of dense products (``ContractionForm``)."""
    where = "calls" if route is GemmRoute.BLAS else "float calls whose products are large enough"
    return (f"{where} run as a stack of matrix products on BLAS (numpy.matmul, on its own "
            f"threads) instead of this loop nest; schedule gemm(loops) or any other schedule "
            f"for this loop nest")


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


__all__ = ["CONTRACTION_MIN_SIDE", "GEMM_MIN_FMAS", "STACK_TILED_MIN_FMAS", "STACK_TILE_MIN_BYTES", "STACK_MIN_FMAS", "ContractionForm", "GemmForm", "contraction_form", "gemm_form", "stack_note", "stack_pays", "gemm_refusal", "gemm_route",
           "large_product", "route_note"]
