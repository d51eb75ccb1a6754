"""How many entries of ``B`` each row of a sparse product ``A B`` reaches, counted natively.

A Gustavson product ``C = A B`` (CSR times CSR) makes, in row ``i``, one multiply-add for each
entry of ``B``'s rows that ``A``'s row ``i`` names: ``sum(len(B[k, :]) for k in A[i, :])``. The
runtime needs these counts before the kernel runs, cumulatively over the rows: to start the
output's buffers with room for every row (``threads.entry_bounds``, capped at the output's
columns per row) and to cut the rows into ranges of equal work for threads
(``threads.row_weights``).

With NumPy that is a gather of ``B``'s row lengths at every coordinate of ``A``, a cumulative
sum and a second gather at ``A``'s row starts: three passes and two temporaries the size of
``A``, ~2.5 ms of a 20 ms product on luxembourg_osm squared (2.4e5 entries). The kernel here,
built from tensoralg's own IR like the storage validator's, makes one pass and writes both
cumulative arrays (the plain counts and the capped ones) directly.

Its reads are in bounds for storage the validator has passed: ``A``'s ``pos`` bounds the
loop over ``crd`` and every coordinate is below ``B``'s row count, whose ``pos`` has one more
entry. Below :data:`NUMPY_COUNT_MOST` coordinates, and until a process has the kernel loaded,
NumPy counts instead (loading the kernel costs 1-2 ms of a new process's first product), for
the first :data:`NUMPY_COUNTS_FIRST` counts only.
"""
from __future__ import annotations

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.ir import build as b
from tensoralg.ir.nodes import I32, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

_INDEX = {np.dtype(np.int32): I32, np.dtype(np.int64): I64}
NUMPY_COUNT_MOST = 20_000
# ... but only for a process's first few counts: NumPy takes ~90 µs for 1.2e4 coordinates (two
# gathers, two cumulative sums; cryg2500 squared, whose kernel runs in ~100 µs), the native
# kernel a few, so a process that keeps multiplying small matrices loads it after these
# (cProfile, 2026-12-04, not kept).
NUMPY_COUNTS_FIRST = 4


def reach_counter(a_index: Scalar, b_index: Scalar) -> Function:
    """The IR of ``reach(a_pos, a_crd, b_pos, rows, columns, reach*, capped*)``.

    ``reach[i + 1] = reach[i] + sum(b_pos[k + 1] - b_pos[k] for k in a_crd[a_pos[i]:a_pos[i +
    1]])`` and ``capped`` the same with each row's count capped at ``columns``; both start at 0.
    """
    a_pos, a_crd = Var("a_pos", Ptr(a_index)), Var("a_crd", Ptr(a_index))
    b_pos = Var("b_pos", Ptr(b_index))
    rows, columns = Var("rows", I64), Var("columns", I64)
    reach, capped = Var("reach", Ptr(I64)), Var("capped", Ptr(I64))
    i, p, k = Var("i", I64), Var("p", I64), Var("k", I64)
    row, total, total_capped = Var("row", I64), Var("total", I64), Var("total_capped", I64)

    def at(array: Var, index: object) -> object:
        return b.cast(b.load(array, index), I64)

    body = [
        b.declare(total, 0),
        b.declare(total_capped, 0),
        b.store(reach, 0, total),
        b.store(capped, 0, total_capped),
        b.for_(i, 0, rows,
               b.declare(row, 0),
               b.for_(p, at(a_pos, i), at(a_pos, b.add(i, 1)),
                      b.declare(k, at(a_crd, p)),
                      b.assign(row, b.add(row, b.sub(at(b_pos, b.add(k, 1)), at(b_pos, k))))),
               b.assign(total, b.add(total, row)),
               b.assign(total_capped, b.add(total_capped, b.minimum(row, columns))),
               b.store(reach, b.add(i, 1), total),
               b.store(capped, b.add(i, 1), total_capped)),
    ]
    params = [b.param(a_pos, "a_pos"), b.param(a_crd, "a_crd"), b.param(b_pos, "b_pos"),
              b.param(rows, "rows"), b.param(columns, "columns"),
              b.param(reach, "reach", True), b.param(capped, "capped", True)]
    return b.function(f"ta_product_reach_{a_index.value}_{b_index.value}", params, *body)


def numpy_reach(a_pos: np.ndarray, a_crd: np.ndarray, b_pos: np.ndarray,
                columns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`reach_counter`'s kernel writes, computed with NumPy (``columns`` None:
    uncapped).

    >>> r, c = numpy_reach(np.array([0, 1, 3]), np.array([1, 0, 1]), np.array([0, 4, 5]), 4)
    >>> r.tolist(), c.tolist()
    ([0, 1, 6], [0, 1, 5])
    """
    a_pos, a_crd, b_pos = np.asarray(a_pos), np.asarray(a_crd), np.asarray(b_pos)
    lengths = np.diff(b_pos).astype(np.int64, copy=False)
    running = np.zeros(a_crd.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths.take(a_crd), out=running[1:])
    reach = running.take(a_pos)
    if columns is None:
        return reach, reach
    capped = np.zeros_like(reach)
    np.cumsum(np.minimum(np.diff(reach), max(0, int(columns))), out=capped[1:])
    return reach, capped


class ReachCounter:
    """Builds the reach kernels once per pair of index dtypes (through the on-disk kernel
    cache) and runs them."""

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(lambda a, b: reach_counter(_INDEX[a], _INDEX[b]), disk)
        self._numpy_counts = 0

    def reach(self, a_pos: np.ndarray, a_crd: np.ndarray, b_pos: np.ndarray,
              columns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(reach, capped)``: for each row boundary of ``A`` (``len(a_pos)`` entries), the
        entries of ``B``'s rows that ``A``'s rows so far reach, plain and with each row's
        count capped at ``columns`` (uncapped when None). ``A``'s and ``B``'s levels must be
        sound (``runtime/validate.py``): ``a_crd``'s coordinates index ``b_pos``.

        >>> counter = ReachCounter()
        >>> r, c = counter.reach(np.array([0, 1, 3]), np.array([1, 0, 1]), np.array([0, 4, 5]))
        >>> r.tolist(), c.tolist()
        ([0, 1, 6], [0, 1, 6])
        """
        a_pos, a_crd, b_pos = np.asarray(a_pos), np.asarray(a_crd), np.asarray(b_pos)
        dtypes = (a_pos.dtype, b_pos.dtype)
        native = a_pos.dtype == a_crd.dtype and all(d in _INDEX for d in dtypes) and \
            a_pos.ndim == a_crd.ndim == b_pos.ndim == 1 and a_pos.shape[0] >= 1 and \
            all(x.flags.c_contiguous for x in (a_pos, a_crd, b_pos))
        if not native or (a_crd.shape[0] <= NUMPY_COUNT_MOST and dtypes not in self.kernels
                          and self._numpy_counts < NUMPY_COUNTS_FIRST):
            self._numpy_counts += 1
            return numpy_reach(a_pos, a_crd, b_pos, columns)
        cap = np.iinfo(np.int64).max if columns is None else max(0, int(columns))
        rows = a_pos.shape[0] - 1
        reach = np.empty(rows + 1, dtype=np.int64)
        capped = np.empty(rows + 1, dtype=np.int64)
        self.kernels.get(*dtypes).function(data_address(a_pos), data_address(a_crd),
                                       data_address(b_pos), rows, cap, data_address(reach),
                                       data_address(capped))
        return reach, capped


__all__ = ["NUMPY_COUNT_MOST", "ReachCounter", "numpy_reach", "reach_counter"]
