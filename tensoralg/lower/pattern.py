"""Sparse outputs that share an operand's pattern: ``Z(i,j) = A(i,j) * X(i,k) * Y(k,j)``.

When a product's only sparse factor is stored exactly as the output is (same levels, same mode
order, same indices), the loops over the output's indices visit that operand's entries and
nothing else, and the appending kernel would rebuild the operand's ``pos`` and ``crd`` arrays
entry by entry. Instead the kernel stores each value at the operand's own position, like a
dense output, and the runtime gives the result copies of the operand's level arrays
(``runtime/wrap.py``'s ``pattern_result``). What that saves: the coordinate stores, the
capacity checks and growth, and on several threads the copy that joins the ranges' pieces,
since each range writes the values of its own rows in place (SDDMM split over two threads ran
slower than one while its pieces were joined).

Invariant: the result is the one the appending kernel makes, entry for entry: the iteration
space over the output's indices is exactly the operand's stored entries when every other
operand with an output index is all dense and the expression multiplies (``*``, negation,
constants) so that no case of the merge lattice runs without the operand. Reductions run over
dense operands, or over the operand's own levels below the output's, so every entry is written
once (the appending kernel appends every visited entry too, explicit zeros included).

The output may also share the operand's first levels only, when the operand's remaining levels
run over indices the statement sums: TTV, ``Y(i,j) = T(i,j,k) * v(k)`` with T stored CSF and Y
DCSR, stores one sum per fibre of T's second level, and the result's levels are copies of T's
first two (``pattern_levels``). On several threads the ranges of T's fibres then write their
values in place instead of assembling pieces to be joined.
"""
from __future__ import annotations

from dataclasses import replace

from tensoralg.formats.level import LevelKind
from tensoralg.ir.nodes import Block, For, Function, If, Stmt, Store, While
from tensoralg.lower.program import LoopNest, OutputMode, Program, TensorRole
from tensoralg.notation.ast import Access, Expr, Literal, Mul, Neg, accesses


def share_pattern(program: Program) -> Program:
    """``program`` with its sparse output written at the positions of the operand whose pattern
    it shares (``OutputMode.PATTERN``), when one does; otherwise ``program`` unchanged.

    >>> import numpy as np
    >>> from tensoralg.formats import CSR, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> stmt = parse_statement("Z(i,j) = A(i,j) * X(i,k) * Y(j,k)")
    >>> p = concretize(stmt, {"A": CSR, "X": dense(2), "Y": dense(2)},
    ...                {"A": np.dtype(np.int32)}, np.dtype(np.float64), CSR)
    >>> share_pattern(p).pattern
    'A'
    >>> q = concretize(parse_statement("Z(i,j) = A(i,j) + B(i,j)"), {"A": CSR, "B": CSR},
    ...                {"A": np.dtype(np.int32), "B": np.dtype(np.int32)}, np.dtype(np.float64), CSR)
    >>> share_pattern(q).pattern is None
    True
    """
    source = pattern_source(program)
    if source is None:
        return program
    nest = program.nests[0]
    return replace(program, nests=(replace(nest, mode=OutputMode.PATTERN, pattern=source),),
                   notes=(*program.notes, _note(nest, source)))


def _note(nest: LoopNest, source: str) -> str:
    """What ``share_pattern`` tells the reader of the kernel's notes."""
    return (f"{nest.output} has the pattern of {source} (its only sparse factor): the kernel "
            f"stores values at {source}'s positions and the result gets copies of {source}'s "
            f"index arrays")


def without_pattern(program: Program) -> Program:
    """``program`` assembling its sparse output by appending, as before ``share_pattern``:
    for a backend whose runtime does not write values at a pattern's positions (the GPU's).

    >>> import numpy as np
    >>> from tensoralg.formats import CSR, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> p = concretize(parse_statement("Z(i,j) = A(i,j) * X(i,j)"), {"A": CSR, "X": dense(2)},
    ...                {"A": np.dtype(np.int32)}, np.dtype(np.float64), CSR)
    >>> without_pattern(share_pattern(p)) == p
    True
    """
    source = program.pattern
    if source is None:
        return program
    nest = program.nests[0]
    return replace(program, nests=(replace(nest, mode=OutputMode.APPEND, pattern=None),),
                   notes=tuple(note for note in program.notes if note != _note(nest, source)))


def pattern_source(program: Program) -> str | None:
    """The operand whose pattern ``program``'s sparse output shares, or None (see the module
    docstring for when one does)."""
    if len(program.nests) != 1:
        return None
    nest = program.nests[0]
    out = program.output
    fmt = out.format
    if nest.mode is not OutputMode.APPEND or fmt.is_dense or out.name != nest.output.tensor or \
            any(kind not in (LevelKind.DENSE, LevelKind.COMPRESSED) for kind in fmt.levels):
        return None
    factors = product_factors(nest.expr)
    if factors is None:
        return None
    sparse = [a for a in factors if not program.tensor(a.tensor).format.is_dense]
    if len(sparse) != 1:
        return None
    access = sparse[0]
    info = program.tensor(access.tensor)
    if info.role is not TensorRole.INPUT or sum(a == access for a in accesses(nest.expr)) != 1 \
            or nest.loop_order[:len(fmt.order)] != tuple(nest.output.indices[m]
                                                         for m in fmt.order):
        return None
    if info.format.rank == fmt.rank:
        same = access.indices == nest.output.indices and info.format.levels == fmt.levels and \
            tuple(info.format.order) == tuple(fmt.order)
        return access.tensor if same else None
    # a prefix: the output's levels are the operand's first ones, in storage order, and the
    # operand's levels below them run over summed indices only
    rank, identity = fmt.rank, tuple(range(info.format.rank))
    if tuple(info.format.order) != identity or tuple(fmt.order) != identity[:rank] or \
            access.indices[:rank] != nest.output.indices or \
            tuple(info.format.levels[:rank]) != tuple(fmt.levels) or \
            any(index in nest.output.indices for index in access.indices[rank:]):
        return None
    return access.tensor


def pattern_levels(program: Program) -> int:
    """How many of the pattern operand's first levels the output shares (all of them, or a
    prefix: see the module docstring).

    >>> import numpy as np
    >>> from tensoralg.formats import Format, LevelKind, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> s, c = LevelKind.COMPRESSED, Format([LevelKind.COMPRESSED] * 3)
    >>> p = share_pattern(concretize(parse_statement("Y(i,j) = T(i,j,k) * v(k)"),
    ...                              {"T": c, "v": dense(1)}, {"T": np.dtype(np.int32)},
    ...                              np.dtype(np.float64), Format([s, s])))
    >>> p.pattern, pattern_levels(p)
    ('T', 2)
    """
    return program.output.format.rank


def assigns_every_position(function: Function) -> bool:
    """Whether a kernel lowered with ``OutputMode.PATTERN`` assigns the value at every position
    of its pattern, so that the runtime need not zero the buffer: one store writes the output,
    with ``=``, and only loops enclose it (the loops over the pattern's levels, which visit
    every entry, and thread ranges that cover the rows together; no ``if`` or ``while``)."""
    outputs = [p.var for p in function.params if p.output]
    if len(outputs) != 1:
        return False
    found: list[tuple[Store, bool]] = []

    def visit(stmts: tuple[Stmt, ...], plain: bool) -> None:
        for stmt in stmts:
            match stmt:
                case Store() if stmt.array == outputs[0]:
                    found.append((stmt, plain))
                case For(body=body):
                    visit(body.body, plain)
                case Block(body=body):
                    visit(body, plain)
                case If(then=then, otherwise=otherwise):
                    visit(then.body, False)
                    visit(otherwise.body, False)
                case While(body=body):
                    visit(body.body, False)

    visit(function.body.body, True)
    return len(found) == 1 and found[0][1] and not found[0][0].accumulate


def product_factors(expr: Expr) -> list[Access] | None:
    """The accesses of a product of accesses, negations and constants (None: anything else)."""
    match expr:
        case Access():
            return [expr]
        case Literal():
            return []
        case Neg(operand):
            return product_factors(operand)
        case Mul(lhs, rhs):
            left, right = product_factors(lhs), product_factors(rhs)
            return None if left is None or right is None else left + right
    return None


__all__ = ["assigns_every_position", "pattern_levels", "pattern_source", "product_factors",
           "share_pattern", "without_pattern"]
