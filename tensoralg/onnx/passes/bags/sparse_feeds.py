"""Graph inputs fed as SciPy sparse matrices: the multi-hot features of recommender models.

A 2-D float input may be fed as any ``scipy.sparse`` matrix or array of its declared shape and
dtype instead of a dense array, with the same results. Recommender pipelines hold multi-hot
features as ids, i.e. sparse rows; densifying them only for the model to re-sparsify them costs
a pass over the whole dense matrix (10 MB for a 256 x 10^4 batch), which at level 3 is most of
a Wide&Deep or factorization-machine run.

- At level 3, a static plan whose every reader of that input takes it in CSR (the multi-hot
  products of :mod:`tensoralg.onnx.plan.static_steps`, which otherwise scan the dense input into
  CSR once per run) copies the feed's CSR arrays into the plan's buffers: no dense matrix is
  ever made.
- Anywhere else (node-by-node runs, lower levels, a plan with a dense reader of the input) the
  feed is densified once per run, so every path gives the same values.

The feed is validated (row pointers, indices in range) and, when it is not canonical, brought
to canonical form (sorted indices, duplicates summed, as the dense matrix would hold them) on a
copy, never in the caller's matrix. A canonical CSR feed (checked by one compiled pass each
run: a data loader may refill its buffers in place) is read in place during the run; at level 3
a compiled call copies its arrays into the plan's buffers as the first call of the plan's
sequence, so a CSR-fed model is one native call, like a dense-fed one.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from tensoralg import program
from tensoralg.onnx.frontend.errors import InputError


class SparseFeed:
    """A checked sparse feed: ``csr`` (a SciPy CSR matrix or array in canonical form, the
    feed's dtype, pointers and indices of one integer dtype), ``shape``, ``dtype``, and
    :meth:`dense` on demand.

    >>> feed = SparseFeed(sp.csr_array(np.eye(2, dtype=np.float32)))
    >>> feed.shape, feed.dense().tolist()
    ((2, 2), [[1.0, 0.0], [0.0, 1.0]])
    """

    def __init__(self, csr: Any) -> None:
        self.csr = csr
        self.shape: tuple[int, ...] = tuple(csr.shape)
        self.dtype = csr.dtype
        self.ndim = 2
        self._dense: np.ndarray | None = None

    def dense(self) -> np.ndarray:
        """The feed as a dense C-contiguous array (made once)."""
        if self._dense is None:
            self._dense = np.ascontiguousarray(self.csr.toarray())
        return self._dense


def is_sparse(value: Any) -> bool:
    """Whether ``value`` is a SciPy sparse matrix or array."""
    return sp.issparse(value)


def sparse_feed(name: str, value: Any, dtype: np.dtype | None) -> SparseFeed:
    """``value`` checked and in canonical CSR, or an :class:`InputError` naming input ``name``.
    ``dtype`` is the input's declared dtype (None: any float)."""
    if value.ndim != 2:
        raise InputError(f"input {name!r}: a sparse feed must be 2-D, got {value.ndim}-D")
    if value.dtype.kind != "f":
        raise InputError(f"input {name!r}: a sparse feed must hold floats, got "
                         f"{value.dtype}; feed a dense array instead")
    if dtype is not None and value.dtype != dtype:
        raise InputError(f"input {name!r} must be {dtype}, got a sparse {value.dtype} matrix")
    csr = value if value.format == "csr" else value.tocsr()
    if program.canonical_csr(csr):      # one compiled pass; details and repairs only if not
        return SparseFeed(csr)
    problem = _csr_problem(csr)
    if problem:
        raise InputError(f"input {name!r}: invalid sparse matrix ({problem})")
    count = int(csr.indptr[-1])
    index = np.result_type(csr.indptr.dtype, csr.indices.dtype, np.int32)
    fixed = sp.csr_array((csr.data[:count], csr.indices[:count].astype(index),
                          csr.indptr.astype(index)), shape=csr.shape, copy=True)
    if not _canonical(fixed):
        fixed.sum_duplicates()           # also sorts the indices of every row
    return SparseFeed(fixed)


def _csr_problem(csr: Any) -> str:
    """What is wrong with ``csr``'s arrays, or "" (NumPy checks: scipy's own full check costs
    more than a batch-1 model run)."""
    rows, cols = csr.shape
    indptr, indices, data = csr.indptr, csr.indices, csr.data
    if indptr.ndim != 1 or len(indptr) != rows + 1 or indptr[0] != 0:
        return f"{len(indptr)} row pointers starting at {indptr[:1].tolist()} for {rows} rows"
    if rows and np.any(indptr[1:] < indptr[:-1]):
        return "row pointers decrease"
    count = int(indptr[-1])
    if count > len(indices) or count > len(data):
        return f"{count} entries but {len(indices)} indices and {len(data)} values"
    used = indices[:count]
    if count and (used.min() < 0 or used.max() >= cols):
        return f"a column index outside [0, {cols})"
    return ""


def _canonical(csr: Any) -> bool:
    """Whether every row's indices are strictly increasing (sorted, no duplicates)."""
    indptr, count = csr.indptr, int(csr.indptr[-1])
    if count < 2:
        return True
    rising = csr.indices[1:count] > csr.indices[:count - 1]
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < count)]
    rising[starts - 1] = True            # a new row may start anywhere
    return bool(rising.all())


def densified(feeds: Mapping[str, Any]) -> dict[str, Any]:
    """``feeds`` with every :class:`SparseFeed` replaced by its dense array."""
    return {name: value.dense() if isinstance(value, SparseFeed) else value
            for name, value in feeds.items()}


__all__ = ["SparseFeed", "is_sparse", "sparse_feed", "densified"]
