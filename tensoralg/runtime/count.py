"""How many entries each row of a sparse product ``C = A B`` (or sum ``A + B``) holds, counted
natively.

Row ``i`` of a Gustavson product (CSR times CSR) holds the distinct columns of B's rows that
A's row ``i`` names. A split product whose rows are counted first (``lower/counted.py``) gets
its output's ``pos`` from these counts, so that every thread range writes its rows in place.
The counter marks each column it meets with the row it is counting, so its marks never need
clearing; each call allocates its own marks, and ranges of rows run on the native pool side by
side, as the kernel's do.

Its reads are in bounds for storage the validator has passed (``runtime/validate.py``): A's
``pos`` bounds the loop over its ``crd``, whose coordinates are below B's row count, and B's
coordinates are below ``columns``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tensoralg.codegen import CompiledKernel, DiskCache, HelperKernels
from tensoralg.errors import KernelRuntimeError
from tensoralg.ir import build as b
from tensoralg.ir.nodes import I32, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

_INDEX = {np.dtype(np.int32): I32, np.dtype(np.int64): I64}
RANGE_SLOTS = (6, 7)   # the counter's begin and end arguments (``row_counter``'s order)


class _Arguments:
    """The counters' arguments, in ``RANGE_SLOTS``' order: ``(a_pos, a_crd, b_pos, b_crd,
    columns, counts*, begin, end)``."""

    def __init__(self, a_index: Scalar, b_index: Scalar) -> None:
        self.a_pos, self.a_crd = Var("a_pos", Ptr(a_index)), Var("a_crd", Ptr(a_index))
        self.b_pos, self.b_crd = Var("b_pos", Ptr(b_index)), Var("b_crd", Ptr(b_index))
        self.columns, self.counts = Var("columns", I64), Var("counts", Ptr(I64))
        self.begin, self.end = Var("begin", I64), Var("end", I64)

    def params(self) -> list:
        return [b.param(self.a_pos, "a_pos"), b.param(self.a_crd, "a_crd"),
                b.param(self.b_pos, "b_pos"), b.param(self.b_crd, "b_crd"),
                b.param(self.columns, "columns"), b.param(self.counts, "counts", True),
                b.param(self.begin, "begin"), b.param(self.end, "end")]


def _at(array: Var, index: object) -> object:
    return b.cast(b.load(array, index), I64)


def row_counter(a_index: Scalar, b_index: Scalar) -> Function:
    """The IR of ``count(a_pos, a_crd, b_pos, b_crd, columns, counts*, begin, end)``:
    ``counts[i + 1]`` is the number of distinct ``b_crd[q]`` over the entries ``q`` of B's rows
    ``a_crd[a_pos[i]:a_pos[i + 1]]``, summed over the rows ``begin..i`` (a running total from
    ``begin``), for each row ``i`` in ``[begin, end)``; ``RowCounter.pos`` joins the ranges'
    totals.

    Each column met is marked with the row being counted (``marks[k] == i + 1``), so the marks
    never need clearing. (A bitmap cleared by a second walk over the row's entries, 64 times
    smaller, counted bayer10 squared at half this speed.)
    """
    args = _Arguments(a_index, b_index)
    a_pos, a_crd, b_pos, b_crd = args.a_pos, args.a_crd, args.b_pos, args.b_crd
    columns, counts, begin, end = args.columns, args.counts, args.begin, args.end
    marks = Var("marks", Ptr(I64))
    i, p, q, j, k = (Var(name, I64) for name in ("i", "p", "q", "j", "k"))
    row, mark, total = Var("row", I64), Var("mark", I64), Var("total", I64)
    body = [
        b.allocate(marks, b.add(columns, 1), zero=True),
        b.declare(total, 0),
        b.for_(i, begin, end,
               b.declare(row, 0),
               b.declare(mark, b.add(i, 1)),
               b.for_(p, _at(a_pos, i), _at(a_pos, b.add(i, 1)),
                      b.declare(j, _at(a_crd, p)),
                      b.for_(q, _at(b_pos, j), _at(b_pos, b.add(j, 1)),
                             b.declare(k, _at(b_crd, q)),
                             b.if_(b.ne(b.load(marks, k), mark),
                                   [b.store(marks, k, mark), b.assign(row, b.add(row, 1))]))),
               b.assign(total, b.add(total, row)),
               b.store(counts, b.add(i, 1), total)),
        b.free(marks),
    ]
    return b.function(f"ta_product_rows_{a_index.value}_{b_index.value}", args.params(),
                      *body)


def union_counter(a_index: Scalar, b_index: Scalar) -> Function:
    """The IR of ``count(a_pos, a_crd, b_pos, b_crd, columns, counts*, begin, end)`` for a
    sum (``row_counter``'s arguments): ``counts[i + 1]`` is the number of distinct columns in
    row ``i`` of A and of B together (a running total from ``begin``, as ``row_counter``
    writes), for each row ``i`` in ``[begin, end)``; both rows sorted
    and without duplicates, as the storage validator passes them, and their columns below
    ``columns``.

    A's columns are marked with the row (as ``row_counter`` marks), and B's entries count where
    they find no mark, through a select rather than a branch: every load is independent of the
    last, where a merge of the two rows waits on each comparison before its next load (a merge
    stepping without branches counted the uniform 2e4 x 2e4 matrix plus its transpose, 4e5
    entries each, in 3.5 ms; the marks take ~0.7 ms, 2026-12-06).
    """
    args = _Arguments(a_index, b_index)
    a_pos, a_crd, b_pos, b_crd = args.a_pos, args.a_crd, args.b_pos, args.b_crd
    columns, counts, begin, end = args.columns, args.counts, args.begin, args.end
    marks = Var("marks", Ptr(I64))
    i, p, q, mark, row, total = (Var(name, I64)
                                 for name in ("i", "p", "q", "mark", "row", "total"))
    body = [
        b.allocate(marks, b.add(columns, 1), zero=True),
        b.declare(total, 0),
        b.for_(i, begin, end,
               b.declare(mark, b.add(i, 1)),
               b.for_(p, _at(a_pos, i), _at(a_pos, b.add(i, 1)),
                      b.store(marks, _at(a_crd, p), mark)),
               b.declare(row, b.sub(_at(a_pos, b.add(i, 1)), _at(a_pos, i))),
               b.for_(q, _at(b_pos, i), _at(b_pos, b.add(i, 1)),
                      b.assign(row, b.add(row, b.select(
                          b.eq(b.load(marks, _at(b_crd, q)), mark), b.i64(0), b.i64(1))))),
               b.assign(total, b.add(total, row)),
               b.store(counts, b.add(i, 1), total)),
        b.free(marks),
    ]
    return b.function(f"ta_sum_rows_{a_index.value}_{b_index.value}", args.params(), *body)


def union_merge_counter(a_index: Scalar, b_index: Scalar) -> Function:
    """``union_counter``'s counts, by merging the two sorted rows (``columns`` unused): for
    sums whose rows are too wide for marks (``MARKS_MAX_COLUMNS``). The merge advances without
    branching on the comparison (each side steps when its column is the smaller or equal one)."""
    args = _Arguments(a_index, b_index)
    a_pos, a_crd, b_pos, b_crd = args.a_pos, args.a_crd, args.b_pos, args.b_crd
    counts, begin, end = args.counts, args.begin, args.end
    i, p, q, p_end, q_end = (Var(name, I64) for name in ("i", "p", "q", "p_end", "q_end"))
    row, ja, jb, total = Var("row", I64), Var("ja", I64), Var("jb", I64), Var("total", I64)
    body = [
        b.declare(total, 0),
        b.for_(i, begin, end,
               b.declare(p, _at(a_pos, i)), b.declare(p_end, _at(a_pos, b.add(i, 1))),
               b.declare(q, _at(b_pos, i)), b.declare(q_end, _at(b_pos, b.add(i, 1))),
               b.declare(row, 0),
               b.while_(b.land(b.lt(p, p_end), b.lt(q, q_end)),
                        b.declare(ja, _at(a_crd, p)),
                        b.declare(jb, _at(b_crd, q)),
                        b.assign(p, b.add(p, b.select(b.le(ja, jb), b.i64(1), b.i64(0)))),
                        b.assign(q, b.add(q, b.select(b.le(jb, ja), b.i64(1), b.i64(0)))),
                        b.assign(row, b.add(row, 1))),
               b.assign(total, b.add(total, b.add(row, b.add(b.sub(p_end, p),
                                                             b.sub(q_end, q))))),
               b.store(counts, b.add(i, 1), total)),
    ]
    return b.function(f"ta_sum_rows_merged_{a_index.value}_{b_index.value}", args.params(),
                      *body)


# Each range of a union count by marks allocates and zeroes 8 bytes a column; past this many
# columns (2 MiB a range) the merge counts instead, which needs no memory (a hypersparse sum of
# 1e7 columns would have zeroed 80 MB per range and faulted a page for most entries).
MARKS_MAX_COLUMNS = 1 << 18


class RowCounter:
    """Builds the row-counting kernels once per pair of index dtypes (through the on-disk
    kernel cache) and runs them over thread ranges."""

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(lambda a, b: row_counter(_INDEX[a], _INDEX[b]), disk)
        self.unions = HelperKernels(lambda a, b: union_counter(_INDEX[a], _INDEX[b]), disk)
        self.merges = HelperKernels(lambda a, b: union_merge_counter(_INDEX[a], _INDEX[b]),
                                    disk)

    def kernel(self, a_dtype: np.dtype, b_dtype: np.dtype, union: bool = False,
               columns: int = 0) -> CompiledKernel:
        """The counter for A's and B's index dtypes (of a product, or of a sum with
        ``union``: by marks up to ``MARKS_MAX_COLUMNS`` columns, else by merging), built on
        first use."""
        if not union:
            return self.kernels.get(a_dtype, b_dtype)
        helpers = self.unions if columns <= MARKS_MAX_COLUMNS else self.merges
        return helpers.get(a_dtype, b_dtype)

    def pos(self, a: Any, b: Any, columns: int, bounds: Sequence[int], index_dtype: np.dtype,
            run: Callable[[Any, list, Sequence[int]], int], union: bool = False
            ) -> np.ndarray:
        """The ``pos`` array (``index_dtype``) of the CSR product of ``a`` and ``b`` (CSR
        ``Tensor``s whose storage the validator passed; with ``union``, of their sum),
        counted over the row ranges ``[bounds[k], bounds[k+1])`` by ``run(function, args,
        bounds)``, which runs the counter's ranges (on the native pool) and returns its worst
        status.

        >>> from tensoralg.formats import CSR, Tensor
        >>> import scipy.sparse as sp
        >>> m = Tensor.from_scipy(sp.csr_matrix(np.array([[1.0, 0, 2], [0, 0, 0], [0, 3, 0]])))
        >>> def serial(function, args, bounds):
        ...     for lo, hi in zip(bounds[:-1], bounds[1:]):
        ...         function(*args[:6], int(lo), int(hi))
        ...     return 0
        >>> RowCounter().pos(m, m, 3, [0, 1, 3], np.dtype(np.int32), serial).tolist()
        [0, 3, 3, 3]
        >>> RowCounter().pos(m, m, 3, [0, 1, 3], np.dtype(np.int32), serial, union=True).tolist()
        [0, 2, 2, 3]
        """
        a_pos, a_crd = a.levels[1].pos, a.levels[1].crd
        b_pos, b_crd = b.levels[1].pos, b.levels[1].crd
        if a_pos.dtype != a_crd.dtype or b_pos.dtype != b_crd.dtype:
            raise KernelRuntimeError("internal: a CSR operand's pos and crd differ in dtype")
        rows = a_pos.shape[0] - 1
        counts = np.empty(rows + 1, dtype=np.int64)
        counts[0] = 0
        function = self.kernel(a_pos.dtype, b_pos.dtype, union, columns).function
        args = [data_address(a_pos), data_address(a_crd), data_address(b_pos),
                data_address(b_crd), int(columns), counts.ctypes.data, 0, rows]
        if run(function, args, bounds) != 0:
            raise KernelRuntimeError(f"could not allocate {8 * (columns + 1)} bytes to count "
                                     f"the rows of a sparse product")
        # Each range wrote its rows' running total from 0: shift each by the ranges before it,
        # narrowing to the index dtype on the way (NumPy's cumsum of 10^6 counts took ~2 ms).
        ranges = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
        offsets = np.cumsum([0] + [int(counts[hi]) for _, hi in ranges]).tolist()
        if offsets[-1] > np.iinfo(index_dtype).max:
            raise KernelRuntimeError(
                f"internal: the sparse product has {offsets[-1]} entries, more than its "
                f"{index_dtype} positions hold (the output's index dtype follows its shape)")
        pos = counts if index_dtype == counts.dtype else np.empty(rows + 1, dtype=index_dtype)
        pos[0] = 0
        for (lo, hi), offset in zip(ranges, offsets):
            if offset or pos is not counts:     # (in place, the first range is done)
                np.add(counts[lo + 1:hi + 1], offset, out=pos[lo + 1:hi + 1], casting="unsafe")
        return pos


__all__ = ["MARKS_MAX_COLUMNS", "RANGE_SLOTS", "RowCounter", "row_counter", "union_counter",
           "union_merge_counter"]
