"""Sparse products (and sums) whose output rows are counted before they are filled on threads.

A Gustavson product (``C(i,k) = A(i,j) * B(j,k)``, CSR times CSR into CSR) assembles each
output row in a dense workspace and appends it. On several threads each range of rows used to
append into buffers of its own, and the pieces were copied into one matrix afterwards
(``runtime/stitch.py``); on a virtual machine that copy, into freshly faulted pages, cost about
what the second thread saved (bayer10 squared, split by force: 2.9 ms on one thread, 2.9 on
two, about 1.8 of them in the join by a cProfile; 2026-12-04, not kept). Counting first, as MKL's and scipy's products do, removes the join: the runtime counts
the distinct columns of every row (``runtime/count.py``, split over the same thread ranges),
sums them into the output's ``pos``, allocates ``crd`` and ``vals`` exactly, and each range of
the kernel lowered here writes its rows in place.

When this is exact: the output's row ``i`` holds exactly the columns of B's rows that A's row
``i`` names, explicit zeros included, which is what the counter counts. That holds when the
product's only sparse factors are ``A(i,j)``, stored CSR along ``(i, j)``, and ``B(j,k)``,
stored CSR along ``(j, k)``, the other factors are dense (they never skip an entry) and the loops
run ``i, j, k``. The kernel still checks each row: if the count it is given differs from the
entries its workspace holds, it writes nothing for that row and reports the mismatch, so a wrong
count is an error, never a write out of bounds.

The counted kernel is a variant of the appending one (``KernelKey.counted``), built the first
time a call of the product is split over threads; a call that runs on one thread keeps the
one-pass appending kernel, which does not count twice.

A sum of two CSR operands (``counted_summands``) is counted the same way when a schedule splits
it: its row ``i`` holds exactly the union of the operands' columns in row ``i``. Its kernel
appends while it merges rather than through a workspace, so each append is checked against the
row's counted end and a row that ends elsewhere is reported.
"""
from __future__ import annotations

from dataclasses import replace

from tensoralg.formats.level import LevelKind
from tensoralg.lower.pattern import product_factors
from tensoralg.lower.program import LoopNest, OutputMode, Program, TensorRole
from tensoralg.notation.ast import Access, Add, Neg, Sub

_CSR = (LevelKind.DENSE, LevelKind.COMPRESSED)


def counted_factors(program: Program) -> tuple[str, str] | None:
    """``(A, B)``, the names of the two CSR factors of ``program``'s sparse product
    ``C(i,k) = A(i,j) * B(j,k)`` (times dense factors), when its rows can be counted first;
    otherwise None.

    >>> import numpy as np
    >>> from tensoralg.formats import CSR, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> def program(text, **formats):
    ...     return concretize(parse_statement(text), formats, {}, np.dtype(np.float64), CSR)
    >>> counted_factors(program("C(i,k) = A(i,j) * B(j,k)", A=CSR, B=CSR))
    ('A', 'B')
    >>> counted_factors(program("C(i,k) = A(i,j) * B(j,k) * d(j)", A=CSR, B=CSR, d=dense(1)))
    ('A', 'B')
    >>> counted_factors(program("C(i,k) = A(i,j) * B(j,k) + D(i,k)", A=CSR, B=CSR, D=CSR)) is None
    True
    """
    nest = _csr_nest(program, OutputMode.WORKSPACE)
    if nest is None:
        return None
    factors = product_factors(nest.expr)
    if factors is None:
        return None
    sparse = [a for a in factors if not program.tensor(a.tensor).format.is_dense]
    if len(sparse) != 2:
        return None
    i, k = nest.output.indices
    if len(nest.loop_order) != 3 or nest.loop_order[0] != i or nest.loop_order[2] != k:
        return None
    j = nest.loop_order[1]
    first = next((a for a in sparse if a.indices == (i, j)), None)
    second = next((a for a in sparse if a.indices == (j, k) and a is not first), None)
    if first is None or second is None or len({i, j, k}) != 3:
        return None
    if not all(_csr_input(program, a) for a in (first, second)):
        return None
    return first.tensor, second.tensor


def counted_summands(program: Program) -> tuple[str, str] | None:
    """``(A, B)``, the names of the two CSR operands of ``program``'s sparse sum
    ``C(i,j) = A(i,j) + B(i,j)`` (or ``-``, either negated), when its rows can be counted
    first: row ``i`` of the result holds exactly the union of A's and B's columns in row ``i``,
    explicit zeros included, which is what ``runtime/count.py``'s union counter counts.
    Otherwise None.

    >>> import numpy as np
    >>> from tensoralg.formats import CSR
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> [counted_summands(concretize(parse_statement(f"C(i,j) = A(i,j) {op} B(i,j)"),
    ...                              {"A": CSR, "B": CSR}, {}, np.dtype(float), CSR))
    ...  for op in "-*"]
    [('A', 'B'), None]
    """
    nest = _csr_nest(program, OutputMode.APPEND)
    if nest is None or nest.loop_order != nest.output.indices:
        return None
    terms = _summands(nest.expr)
    if terms is None or len(terms) != 2 or \
            any(a.indices != nest.output.indices or not _csr_input(program, a) for a in terms):
        return None
    return terms[0].tensor, terms[1].tensor


def _csr_nest(program: Program, mode: OutputMode) -> LoopNest | None:
    """``program``'s only loop nest, when it assembles (in ``mode``) the program's CSR output
    with no temporaries and no shared pattern; otherwise None."""
    if len(program.nests) != 1:
        return None
    nest, out = program.nests[0], program.output
    if nest.mode is not mode or nest.pattern is not None or \
            out.name != nest.output.tensor or out.format.levels != _CSR or \
            tuple(out.format.order) != (0, 1) or \
            any(t.role is TensorRole.TEMPORARY for t in program.tensors):
        return None
    return nest


def _summands(expr: object) -> list[Access] | None:
    """The accesses of a sum or difference of (negated) accesses; None for anything else."""
    match expr:
        case Access():
            return [expr]
        case Neg(operand):
            return _summands(operand)
        case Add(lhs, rhs) | Sub(lhs, rhs):
            left, right = _summands(lhs), _summands(rhs)
            return None if left is None or right is None else left + right
    return None


def _csr_input(program: Program, access: Access) -> bool:
    """Whether ``access`` reads an input stored CSR in its written mode order."""
    info = program.tensor(access.tensor)
    return info.role is TensorRole.INPUT and info.format.levels == _CSR and \
        tuple(info.format.order) == (0, 1)


def count_rows(program: Program) -> Program:
    """``program`` lowered to fill rows whose lengths the runtime counted first
    (``LoopNest.counted``); ``program`` must have ``counted_factors``.

    >>> import numpy as np
    >>> from tensoralg.formats import CSR
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> p = concretize(parse_statement("C(i,k) = A(i,j) * B(j,k)"), {"A": CSR, "B": CSR}, {},
    ...                np.dtype(np.float64), CSR)
    >>> count_rows(p).counted
    ('A', 'B')
    """
    factors = counted_factors(program) or counted_summands(program)
    if factors is None:
        raise ValueError("internal: count_rows on a program whose rows cannot be counted")
    nest: LoopNest = program.nests[0]
    note = (f"{nest.output}'s rows are counted first from the patterns of {factors[0]} and "
            f"{factors[1]} (runtime/count.py); each row is written in place at its offset")
    return replace(program, nests=(replace(nest, counted=factors),),
                   notes=(*program.notes, note))


__all__ = ["count_rows", "counted_factors", "counted_summands"]
