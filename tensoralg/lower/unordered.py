"""COO operands a kernel reads in any order.

A kernel over a COO tensor walks its entries in runs of equal first coordinate; sorted and
without duplicates, each run is the whole row, so the dense output's element is assigned once
(``y[i] = acc``). Where the COO tensor is the only sparse operand, its one access sits in a
product of dense factors, and that product is summed into dense storage (the output, or a
temporary of a program of several nests: ``cb,a->b`` sums the COO over ``c`` into a vector
before the product with ``x``'s sum), the same loops are exact over entries in any order,
duplicates included, if every store adds into zeroed storage (``y[i] += acc``): a row met in
several runs gets each run's sum. The runtime then binds a COO operand as it
comes, without sorting it (``api._bind_any_order``): scipy's COO products work that way, and
a sort costs many times the product (a 2e4^2 COO with 2e5 random entries, ``ij,j->i``: 5.7
ms sorted first at 4906c9b, 0.22 ms read in any order, scipy 0.27; AMD EPYC VM).

Only the compiler's own loops qualify: a split or thread range over the entries (``pos``,
``parallelize``) is the schedule's to ask for, on a sorted operand.
"""
from __future__ import annotations

import dataclasses

from tensoralg.formats.level import LevelKind
from tensoralg.lower.program import OutputMode, Program, TensorRole
from tensoralg.notation.ast import Access, Expr, Literal, Mul, Neg, accesses


def any_order(program: Program) -> Program:
    """``program`` with its COO operand marked ``unordered`` where the kernel's result does not
    depend on the order of its entries; else ``program`` itself.

    >>> import numpy as np
    >>> from tensoralg.formats import COO, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation import parse_statement
    >>> p = concretize(parse_statement("y(i) = A(i,j) * x(j)"), {"A": COO, "x": dense(1)},
    ...                {"A": np.dtype(np.int32)}, np.dtype(np.float64), None)
    >>> any_order(p).tensor("A").unordered
    True
    """
    name = unordered_operand(program)
    if name is None:
        return program
    tensors = tuple(dataclasses.replace(t, unordered=True) if t.name == name else t
                    for t in program.tensors)
    return dataclasses.replace(program, tensors=tensors)


def unordered_operand(program: Program) -> str | None:
    """The COO input ``any_order`` would mark, or None: the one sparse input, read once, in
    one nest that sums a product into dense storage (the output, or a temporary another nest
    reads: ``cb,a->b`` sums the COO over ``c`` into a vector first). Every store of the
    program then adds (``rows_cut``), into an output the runtime zeroes and temporaries the
    kernel allocates zeroed, so the other nests stay exact too."""
    if program.conversions or program.pattern is not None or \
            not program.output.format.is_dense:
        return None
    sparse = [t for t in program.tensors
              if t.role is TensorRole.INPUT and not t.format.is_dense]
    if len(sparse) != 1:
        return None
    levels = sparse[0].format.levels
    if levels[0] is not LevelKind.COMPRESSED_NONUNIQUE or \
            any(kind is not LevelKind.SINGLETON for kind in levels[1:]):
        return None
    readers = [n for n in program.nests
               if any(a.tensor == sparse[0].name for a in accesses(n.expr))]
    if len(readers) != 1:
        return None
    nest = readers[0]
    if nest.mode is not OutputMode.DENSE or \
            not program.tensor(nest.output.tensor).format.is_dense or \
            not _product(nest.expr) or \
            sum(a.tensor == sparse[0].name for a in accesses(nest.expr)) != 1:
        return None
    return sparse[0].name


def ordered(program: Program) -> Program:
    """``program`` with no operand marked ``unordered`` (the GPU's runtime binds COO sorted).

    >>> import numpy as np
    >>> from tensoralg.formats import COO, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation import parse_statement
    >>> p = any_order(concretize(parse_statement("y(i) = A(i,j) * x(j)"),
    ...                          {"A": COO, "x": dense(1)}, {"A": np.dtype(np.int32)},
    ...                          np.dtype(np.float64), None))
    >>> p.tensor("A").unordered, ordered(p).tensor("A").unordered
    (True, False)
    """
    if not any(t.unordered for t in program.tensors):
        return program
    return dataclasses.replace(program, tensors=tuple(
        dataclasses.replace(t, unordered=False) for t in program.tensors))


def _product(expr: Expr) -> bool:
    """Whether ``expr`` is a product of accesses and constants: its nonzeros are where every
    factor's are, so the loops iterate the COO tensor's entries alone, never merge them."""
    match expr:
        case Access() | Literal():
            return True
        case Neg(operand):
            return _product(operand)
        case Mul(lhs, rhs):
            return _product(lhs) and _product(rhs)
    return False


__all__ = ["any_order", "ordered", "unordered_operand"]
