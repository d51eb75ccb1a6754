"""A dense array's nonzeros as COO coordinates, in one compiled pass.

pydata's ``sparse.einsum`` returns a COO for every result, so a ``ta.einsum`` call with pydata
operands whose kernel writes a dense result hands back that result's nonzeros. ``np.nonzero``
on a 2-D array counts, then writes one index array per dimension, and the values are gathered
after through those indices: ~170 µs for a 200 x 200 float64 result with 5% nonzeros, ~350 with
half (AMD EPYC VM, 2026-12-06), several times the kernel that made it; ~55 µs either way here. Here ``np.count_nonzero`` (one vectorised pass) sizes
the output and one compiled pass over the array in row-major order writes each nonzero's
coordinates and value together. A value counts as nonzero as NumPy counts it: NaN does,
-0.0 does not. The kernel is written in the statement IR and compiled by tensoralg's own code
generator, like ``runtime/canonical.py``'s sorts.
"""
from __future__ import annotations

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F32, F64, I32, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

_VALUES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
           np.dtype(np.int32): I32, np.dtype(np.int64): I64}


def listing_function(rank: int, value: Scalar) -> Function:
    """The IR of ``list(extent_0.., vals, count, out_crd, out_vals, status*)``: the nonzero
    values of the row-major array ``vals`` in row-major order into ``out_vals`` (``count + 1``
    long), and their coordinates into ``out_crd`` as a ``(rank, count + 1)`` row-major int64
    array (the layout of a pydata COO's ``coords``, a spare last column). ``status[0]`` is
    the number of nonzeros found, which the caller compares with ``count``.

    >>> "out_crd" in str(listing_function(2, F64))
    True
    """
    extents = [Var(f"extent_{k}", I64) for k in range(rank)]
    loops = [Var(f"i{k}", I64) for k in range(rank)]
    vals, count = Var("vals", Ptr(value)), Var("count", I64)
    out_crd, out_vals = Var("out_crd", Ptr(I64)), Var("out_vals", Ptr(value))
    status, found, v = Var("status", Ptr(I64)), Var("found", I64), Var("v", value)
    flat = b.i64(0)
    for extent, index in zip(extents, loops):
        flat = b.add(b.mul(flat, extent), index)
    # Every element is written at the next free slot and the slot kept only if it is
    # nonzero: no branch to mispredict. ~0.9 ns an element whatever the share of nonzeros,
    # where a branch on each value took ~0.7 at 5% and mispredicts half the time at 50%
    # (200 x 200 float64, AMD EPYC VM, 2026-12-06).
    # The slot is clamped to ``count``, the spare last one, so no write goes past the end
    # whatever the caller counted.
    slot = Var("slot", I64)
    inner: list = [b.declare(v, b.load(vals, flat)),
                   b.declare(slot, b.minimum(found, count)),
                   *[b.store(out_crd, b.add(b.mul(b.i64(m), b.add(count, 1)), slot), index)
                     for m, index in enumerate(loops)],
                   b.store(out_vals, slot, v),
                   b.assign(found, b.add(found, b.select(b.ne(v, b.const(0, value)),
                                                         b.i64(1), b.i64(0))))]
    for extent, index in reversed(list(zip(extents, loops))):
        inner = [b.for_(index, 0, extent, *inner)]
    params = [*[b.param(x, f"extent.{k}") for k, x in enumerate(extents)],
              b.param(vals, "vals"), b.param(count, "count"),
              b.param(out_crd, "out.crd", True), b.param(out_vals, "out.vals", True),
              b.param(status, "status", True)]
    return b.function(f"ta_list_nonzeros_{rank}_{value.value}", params,
                      b.declare(found, 0), *inner, b.store(status, 0, found))


class NonzeroLister:
    """Builds the listing kernels once (per rank and value dtype) and runs them.

    >>> import tempfile
    >>> lister = NonzeroLister(DiskCache(tempfile.mkdtemp()))
    >>> coords, values = lister.nonzeros(np.array([[0.0, 2.0], [3.0, 0.0]]))
    >>> coords.tolist(), values.tolist()
    ([[0, 1], [1, 0]], [2.0, 3.0])
    """

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(
            lambda rank, value: listing_function(rank, _VALUES[value]), disk)

    @staticmethod
    def takes(array: np.ndarray) -> bool:
        """Whether ``array`` can be listed here: C-ordered, of rank 1 or more, of a dtype the
        kernels are built for (others are left to ``np.nonzero``)."""
        return type(array) is np.ndarray and array.ndim >= 1 and \
            array.dtype in _VALUES and array.flags.c_contiguous

    def nonzeros(self, array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The coordinates (int64, one row per dimension) and values of ``array``'s nonzeros,
        in row-major order. ``array`` must be one ``takes`` accepts."""
        count = int(np.count_nonzero(array))
        coords = np.empty((array.ndim, count + 1), np.int64)
        values = np.empty(count + 1, array.dtype)
        status = np.zeros(1, np.int64)
        kernel = self.kernels.get(array.ndim, array.dtype)
        (kernel.call or kernel.function)(
            *array.shape, data_address(array), count, data_address(coords),
            data_address(values), data_address(status))
        if int(status[0]) != count:
            raise AssertionError(f"listed {int(status[0])} nonzeros where NumPy counts {count}")
        return coords[:, :count], values[:count]


__all__ = ["NonzeroLister", "listing_function"]
