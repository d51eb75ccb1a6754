"""Fast validation of compressed levels the runtime did not build (scipy arrays, every call).

A kernel trusts its storage: ``pos`` bounds every loop and ``crd`` indexes dense operands, so a
corrupt array would read out of bounds. Arrays handed in by the user are therefore checked on
every call. NumPy checks cost several passes over the data; this module checks a compressed level
in one pass with a kernel built by tensoralg's own code generator (IR → LLVM), so validating a
600k-entry CSR matrix costs a fraction of an SpMV. On failure it returns a status, and the caller
falls back to the detailed (and canonicalizing) checks of ``formats``.

The bounds are checked the first time tensoralg sees a pair of arrays; while those very array
objects live, with the same addresses, lengths and dimension, the result is remembered. Like
scipy itself, tensoralg does not notice a later in-place write into a matrix's index arrays. Whether coordinates are sorted and unique within each row
is taken from scipy's own ``has_canonical_format`` flag (which scipy computes once and keeps, and
which its own kernels rely on); a non-canonical matrix is canonicalized on a copy.

Status codes: 0 valid; 1 ``pos[0] != 0``; 2 a segment is reversed or leaves ``crd``;
3 ``pos[-1] != len(crd)``; 4 a coordinate is outside ``[0, dim)``; 5 coordinates within a
segment are not strictly increasing (unsorted or duplicated).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.ir import build as b
from tensoralg.ir.nodes import I32, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import address_of

VALID, BAD_START, BAD_SEGMENT, BAD_END, OUT_OF_RANGE, UNSORTED = range(6)

_INDEX = {np.dtype(np.int32): I32, np.dtype(np.int64): I64}

# Up to this many coordinates, a level first seen before its dtype's validation kernel is loaded
# is checked with NumPy (~20 µs) instead: loading the kernel costs 1-2 ms of a new process's
# first call, and for small operands that was a third of a cached kernel's first call.
NUMPY_CHECK_MOST = 20_000


def compressed_validator(index: Scalar) -> Function:
    """The IR of ``check(pos, crd, parents, dim, count, check_order, status*)``.

    Three passes, each a reduction that LLVM vectorizes: ``pos`` is nondecreasing and inside
    ``crd``; every coordinate is inside ``[0, dim)``; and, when ``check_order`` is set,
    coordinates increase within each segment (run only when ``pos`` is sound, so every read is
    in bounds). The first two are what memory safety needs; order only affects results.
    """
    pos, crd = Var("pos", Ptr(index)), Var("crd", Ptr(index))
    parents, dim, count = Var("parents", I64), Var("dim", I64), Var("count", I64)
    check_order, status = Var("check_order", I64), Var("status", Ptr(I64))
    q, p, r = Var("q", I64), Var("p", I64), Var("r", I64)
    reversed_, low, high = Var("reversed", I64), Var("low", I64), Var("high", I64)
    unsorted, bad = Var("unsorted", I64), Var("bad", I64)
    first, last = b.cast(b.load(pos, 0), I64), b.cast(b.load(pos, parents), I64)

    def at(array: Var, i) -> object:
        return b.cast(b.load(array, i), I64)

    body = [
        b.declare(bad, 0),
        b.if_(b.ne(first, 0), b.assign(bad, BAD_START)),
        b.if_(b.ne(last, count), b.assign(bad, b.maximum(bad, BAD_END))),
        b.declare(reversed_, 0),
        b.for_(q, 0, parents, b.assign(reversed_, b.add(reversed_, b.select(
            b.lt(at(pos, b.add(q, 1)), at(pos, q)), b.i64(1), b.i64(0))))),
        b.if_(b.ne(reversed_, 0), b.assign(bad, b.maximum(bad, BAD_SEGMENT))),
        b.declare(low, 0),
        b.declare(high, -1),
        b.for_(p, 0, count,
               b.assign(low, b.minimum(low, at(crd, p))),
               b.assign(high, b.maximum(high, at(crd, p)))),
        b.if_(b.lor(b.lt(low, 0), b.le(dim, high)), b.assign(bad, b.maximum(bad, OUT_OF_RANGE))),
        b.if_(b.land(b.eq(bad, 0), b.ne(check_order, 0)), [
            b.declare(unsorted, 0),
            b.for_(q, 0, parents,
                   b.for_(r, b.add(at(pos, q), 1), at(pos, b.add(q, 1)),
                          b.assign(unsorted, b.add(unsorted, b.select(
                              b.le(at(crd, r), at(crd, b.sub(r, 1))), b.i64(1), b.i64(0)))))),
            b.if_(b.ne(unsorted, 0), b.assign(bad, UNSORTED))]),
        b.store(status, 0, bad),
    ]
    params = [b.param(pos, "pos"), b.param(crd, "crd"), b.param(parents, "parents"),
              b.param(dim, "dim"), b.param(count, "count"), b.param(check_order, "check_order"),
              b.param(status, "status", True)]
    return b.function(f"ta_check_compressed_{index.value}", params, *body)


def numpy_status(pos: np.ndarray, crd: np.ndarray, dim: int, check_order: bool) -> int:
    """The status :func:`compressed_validator`'s kernel gives, computed with NumPy.

    >>> numpy_status(np.array([0, 2, 3]), np.array([0, 4, 1]), 5, True)
    0
    >>> numpy_status(np.array([0, 2, 3]), np.array([4, 0, 1]), 5, True)
    5
    >>> numpy_status(np.array([0, 2, 3]), np.array([0, 5, 1]), 5, True)
    4
    """
    count = crd.shape[0]
    p = pos.astype(np.int64, copy=False)
    bad = VALID
    if p[0] != 0:
        bad = BAD_START
    if p[-1] != count:
        bad = max(bad, BAD_END)
    if np.any(p[1:] < p[:-1]):
        bad = max(bad, BAD_SEGMENT)
    if count and (int(crd.min()) < 0 or int(crd.max()) >= dim):
        bad = max(bad, OUT_OF_RANGE)
    if bad == VALID and check_order and count > 1:
        c = crd.astype(np.int64, copy=False)
        starts = np.zeros(count, dtype=bool)
        starts[p[:-1][p[:-1] < count]] = True        # a segment's first entry has no left
        if np.any((c[1:] <= c[:-1]) & ~starts[1:]):
            bad = UNSORTED
    return bad


class StorageValidator:
    """Builds the validation kernels once (per index dtype) and runs them."""

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.disk = disk
        self.kernels = HelperKernels(lambda dtype: compressed_validator(_INDEX[dtype]), disk)
        self._status = threading.local()   # one status word per thread, reused across calls
        # (id(pos), id(crd)) -> addresses, lengths, dim of arrays already found valid
        self._seen: dict[tuple[int, int], tuple] = {}

    def compressed(self, pos: np.ndarray, crd: np.ndarray, dim: int, check_order: bool = True,
                   remember: bool = True) -> int:
        """The status of one compressed level with ``len(pos) - 1`` parent positions.

        With ``check_order=False`` only what memory safety needs is checked (bounds). With
        ``remember=False`` the arrays are checked even if seen before, and not remembered
        (buffers a caller refills in place, such as a data loader's).
        """
        if pos.dtype != crd.dtype or pos.dtype not in _INDEX or pos.ndim != 1 or crd.ndim != 1 \
                or pos.shape[0] < 1 or not (pos.flags.c_contiguous and crd.flags.c_contiguous):
            return BAD_SEGMENT
        facts = (address_of(pos), address_of(crd), pos.shape[0], crd.shape[0], dim, check_order)
        if remember and self._seen.get((id(pos), id(crd))) == facts:
            return VALID
        if remember and crd.shape[0] <= NUMPY_CHECK_MOST and (pos.dtype,) not in self.kernels:
            result = numpy_status(pos, crd, dim, check_order)
            if result == VALID:
                self._remember(pos, crd, facts)
            return result
        status = self._status.__dict__.get("buffer")
        if status is None:
            status = self._status.buffer = np.zeros(1, dtype=np.int64)
        self.kernels.get(pos.dtype).function(facts[0], facts[1], pos.shape[0] - 1, dim,
                                         crd.shape[0], int(check_order), address_of(status))
        result = int(status[0])
        if result == VALID and remember:
            self._remember(pos, crd, facts)
        return result

    def trust(self, pos: np.ndarray, crd: np.ndarray, dim: int) -> None:
        """Take one compressed level that the runtime built itself (``runtime/canonical.py``)
        as valid while these arrays live, without a check: the next call that binds them
        skips its pass over them."""
        if pos.dtype in _INDEX and crd.dtype == pos.dtype and pos.flags.c_contiguous and \
                crd.flags.c_contiguous:
            self._remember(pos, crd, (address_of(pos), address_of(crd), pos.shape[0],
                                      crd.shape[0], dim, False))

    def _remember(self, pos: np.ndarray, crd: np.ndarray, facts: tuple) -> None:
        """Skip re-checking these very arrays while both live (ids are dropped with them)."""
        key = (id(pos), id(crd))
        if len(self._seen) >= 4096:
            self._seen.clear()
        self._seen[key] = facts
        forget = self._seen.pop
        weakref.finalize(pos, forget, key, None)
        weakref.finalize(crd, forget, key, None)
