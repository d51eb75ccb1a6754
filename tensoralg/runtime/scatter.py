"""Rows combined into a table by max or min at row indices, in one compiled pass.

Graph networks take the largest (or smallest) message arriving at each node: ONNX
``ScatterElements(reduction="max")`` along axis 0 with the edge's target repeated over the
feature axes (PyTorch Geometric's ``aggr="max"``, and the ``include_self=False`` start of
every ``scatter_reduce`` it exports). NumPy's ``np.maximum.at`` walks such a scatter one
element at a time (~11 ns an element on 10^4 edges of 32 features, Intel Xeon VM, ad hoc,
2026-12-07), and sorting the edges for ``reduceat`` costs the same again. A sum is a product with a sparse
matrix and runs as the core's kernel; a max is not a sum, so it is this loop: each update row
combined into its target row of the output, the feature loop vectorised by LLVM. The kernel is
written in the statement IR and compiled by tensoralg's own code generator, like
``runtime/nonzeros.py``.

Every row index is checked against the table first; with one outside it nothing is written
and the kernel reports how many (the caller raises). The comparison keeps NaN wherever one is
among the values combined, as ``np.maximum`` and ``np.minimum`` do.
"""
from __future__ import annotations

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F32, F64, I32, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

_VALUES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
           np.dtype(np.int32): I32, np.dtype(np.int64): I64}


def scatter_function(value: Scalar, largest: bool) -> Function:
    """The IR of ``scatter(n, width, count, rows, updates, out, status*)``: for each ``e``
    below ``count``, row ``e`` of ``updates`` (``width`` values) combined by max
    (``largest``) or min into row ``rows[e]`` of ``out`` (``n`` rows), in place.
    ``status[0]`` is the number of row indices outside ``[0, n)``; when it is not zero,
    ``out`` is left as it was.

    >>> "ta_scatter_max_f32" in str(scatter_function(F32, True))
    True
    """
    n, width, count = Var("n", I64), Var("width", I64), Var("count", I64)
    rows, updates, out = Var("rows", Ptr(I64)), Var("updates", Ptr(value)), Var("out", Ptr(value))
    status = Var("status", Ptr(I64))
    e, j, r, bad = Var("e", I64), Var("j", I64), Var("r", I64), Var("bad", I64)
    at, x, cur = Var("at", I64), Var("x", value), Var("cur", value)
    better = b.gt(x, cur) if largest else b.lt(x, cur)
    check = b.for_(e, 0, count,
                   b.declare(r, b.load(rows, e)),
                   b.assign(bad, b.add(bad, b.select(b.lor(b.lt(r, 0), b.ge(r, n)),
                                                     b.i64(1), b.i64(0)))))
    combine = b.for_(e, 0, count,
                     b.declare(at, b.mul(b.load(rows, e), width)),
                     b.for_(j, 0, width,
                            b.declare(x, b.load(updates, b.add(b.mul(e, width), j))),
                            b.declare(cur, b.load(out, b.add(at, j))),
                            # x wins when it is NaN, so a NaN update propagates; a NaN
                            # already in the output never loses a comparison
                            b.store(out, b.add(at, j),
                                    b.select(b.lor(better, b.ne(x, x)), x, cur))))
    params = [b.param(n, "n"), b.param(width, "width"), b.param(count, "count"),
              b.param(rows, "rows"), b.param(updates, "updates"), b.param(out, "out", True),
              b.param(status, "status", True)]
    return b.function(f"ta_scatter_{'max' if largest else 'min'}_{value.value}", params,
                      b.declare(bad, 0), check, b.if_(b.eq(bad, 0), combine),
                      b.store(status, 0, bad))


class RowScatterer:
    """Builds the scatter kernels once (per value dtype and reduction) and runs them.

    >>> import tempfile
    >>> scatterer = RowScatterer(DiskCache(tempfile.mkdtemp()))
    >>> scatterer.combined(np.zeros((2, 2)), np.array([1, 1]),
    ...                    np.array([[3.0, -1.0], [2.0, 5.0]]), largest=True).tolist()
    [[0.0, 0.0], [3.0, 5.0]]
    """

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(
            lambda value, largest: scatter_function(_VALUES[value], largest), disk)

    @staticmethod
    def takes(dtype: np.dtype) -> bool:
        """Whether values of ``dtype`` are scattered here (float32/64, int32/64)."""
        return np.dtype(dtype) in _VALUES

    def combined(self, data: np.ndarray, rows: np.ndarray, updates: np.ndarray,
                 largest: bool) -> np.ndarray:
        """A copy of ``data`` (N, ...) with each ``updates[e]`` (one row of ``data``'s shape)
        combined into row ``rows[e]`` by max (``largest``) or min; ``data`` of a dtype
        ``takes`` accepts, ``updates`` cast to it. A ValueError for a row index outside
        ``[0, N)`` or updates of another shape."""
        out = np.array(data, copy=True, order="C")
        values = np.ascontiguousarray(updates, dtype=out.dtype)
        index = np.ascontiguousarray(rows, dtype=np.int64)
        if values.shape != index.shape + out.shape[1:] or index.ndim != 1:
            raise ValueError(f"updates {values.shape} must be rows {index.shape} of the data's "
                             f"{out.shape[1:]}")
        if not index.size:
            return out
        if (index < 0).any() or (index >= out.shape[0]).any():
            raise ValueError(f"a row index is outside [0, {out.shape[0]})")
        if not out.size:
            return out
        status = np.zeros(1, np.int64)
        kernel = self.kernels.get(out.dtype, bool(largest))
        (kernel.call or kernel.function)(
            out.shape[0], out.size // out.shape[0], index.size, data_address(index),
            data_address(values), data_address(out), data_address(status))
        if int(status[0]):
            raise ValueError(f"{int(status[0])} row index(es) outside [0, {out.shape[0]})")
        return out


__all__ = ["RowScatterer", "scatter_function"]
