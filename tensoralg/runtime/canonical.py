"""Coordinates to canonical compressed storage (sorted, duplicates summed) in compiled passes.

A scipy COO matrix arrives with its entries in any order and possibly repeated; kernels want
them sorted by row, then column, each coordinate once. scipy's own ``tocsr`` counts rows in one
pass but then sorts each row with a comparison sort (100k entries over 2000 rows: ~2.2 ms of
a ~2.4 ms conversion, measured on the 2-core VM the benchmarks run on). Here the order comes
from one stable counting sort per dimension, last dimension first (least-significant-digit
radix order: O(entries + extent) each), and a last pass sums runs of equal coordinates while it
writes the compressed arrays: ~0.3-0.4 ms for the same matrix. The kernel is written in the
statement IR and compiled by tensoralg's own code generator, like ``runtime/validate.py``.

Coordinates outside the shape are found in the counting passes (nothing is written where they
point); the kernel then reports -1 and the caller raises.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.formats import Format, LevelArrays, LevelKind, Tensor
from tensoralg.formats.pack import pack, to_coords
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F32, F64, I32, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import address_of, data_address

_INDEX = {np.dtype(np.int32): I32, np.dtype(np.int64): I64}
KEPT_BYTES = 1 << 27     # scratch kept per array between sorts (128 MiB: 16M int64 entries)
_VALUES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
           np.dtype(np.int32): I32, np.dtype(np.int64): I64}


def sorting_function(rank: int, index: Scalar, out_index: Scalar, value: Scalar) -> Function:
    """The IR of ``sort(n, extent_0.., crd_0.., vals, spare_crd_0.., spare_vals, other_crd_0..,
    other_vals, out_crd_0.., out_vals, count, out_pos, want_rows, status*)``: ``n`` entries at
    coordinates ``crd_k[e]`` (``index``) sorted lexicographically, equal coordinates summed,
    into ``out_crd_k`` and ``out_vals``; ``out_pos`` (``extent_0 + 1`` long) counts the entries
    under each first coordinate, as a compressed level's positions. The spare and other arrays
    (``n`` long, ``out_index`` and values; the other set used from rank 3) carry the entries
    between passes and ``count`` holds ``max(extent) + 1`` int64. ``status[0]`` is the number
    of distinct coordinates, or -1 when one lies outside ``[0, extent_k)`` (then nothing is
    written to the outputs). ``out_crd_0`` is written only when ``want_rows`` is set: a
    compressed level has ``out_pos`` instead.

    Entries already in canonical order (strictly increasing coordinates) are copied with one
    counting pass for ``out_pos``. Otherwise each pass moves every entry (sequential reads, scattered writes), so that no pass reads
    through a permutation; the last pass, over dimension 0, leaves its groups' ends in
    ``count``, and the summing pass walks those rows in place.

    >>> "spare_vals" in str(sorting_function(2, I32, I32, F64))
    True
    """
    n = Var("n", I64)
    extents = [Var(f"extent_{k}", I64) for k in range(rank)]

    def entries(name: str, kind: Scalar) -> tuple[list[Var], Var]:
        return [Var(f"{name}crd_{k}", Ptr(kind)) for k in range(rank)], \
            Var(f"{name}vals", Ptr(value))

    given, spare, other, out = (entries("", index), entries("spare_", out_index),
                                entries("other_", out_index), entries("out_", out_index))
    count = Var("count", Ptr(I64))
    out_pos, status = Var("out_pos", Ptr(out_index)), Var("status", Ptr(I64))
    t, c, q, r = Var("t", I64), Var("c", I64), Var("q", I64), Var("r", I64)
    bad, total, kept = Var("bad", I64), Var("total", I64), Var("kept", I64)
    begin, first = Var("begin", I64), Var("first", I64)
    want_rows = Var("want_rows", I64)

    def at(array: Var, i: Any) -> Any:
        return b.cast(b.load(array, i), I64)

    # Bounds first, every dimension (the passes below index ``count`` by coordinate), and
    # whether the entries are in canonical order already (then one counting pass will do).
    low, high, unsorted = Var("low", I64), Var("high", I64), Var("unsorted", I64)
    body: list[Any] = [b.declare(bad, 0), b.declare(low, 0), b.declare(high, -1)]
    for k in range(rank):
        body += [b.assign(low, 0), b.assign(high, -1),
                 b.for_(t, 0, n, b.assign(low, b.minimum(low, at(given[0][k], t))),
                        b.assign(high, b.maximum(high, at(given[0][k], t)))),
                 b.if_(b.lor(b.lt(low, 0), b.ge(high, extents[k])), b.assign(bad, 1))]
    after = b.lt(at(given[0][rank - 1], b.sub(t, 1)), at(given[0][rank - 1], t))
    for k in reversed(range(rank - 1)):
        before, now = at(given[0][k], b.sub(t, 1)), at(given[0][k], t)
        after = b.lor(b.lt(before, now), b.land(b.eq(before, now), after))
    body += [b.declare(unsorted, 0),
             b.for_(t, 1, n, b.assign(unsorted, b.add(unsorted, b.select(
                 after, b.i64(0), b.i64(1)))))]
    (rows, vals) = out
    in_order = [
        b.for_(c, 0, b.add(extents[0], 1), b.store(out_pos, c, b.cast(b.i64(0), out_index))),
        b.for_(t, 0, n,
               b.store(out_pos, b.add(at(given[0][0], t), 1), b.cast(b.i64(1), out_index),
                       accumulate=True),
               *[b.store(rows[m], t, b.cast(b.load(given[0][m], t), out_index))
                 for m in range(1, rank)],
               b.store(vals, t, b.load(given[1], t))),
        b.if_(b.ne(want_rows, 0), b.for_(t, 0, n, b.store(
            rows[0], t, b.cast(b.load(given[0][0], t), out_index)))),
        b.declare(total, 0),
        b.for_(c, 0, b.add(extents[0], 1),
               b.assign(total, b.add(total, at(out_pos, c))),
               b.store(out_pos, c, b.cast(total, out_index))),
        b.store(status, 0, n)]
    passes: list[Any] = []
    # One stable counting sort per dimension, the last first (least significant digit first):
    # after the pass over dimension 0 the entries are in lexicographic order.
    sets = [given] + [spare if j % 2 == 0 else other for j in range(rank - 1)] + [out]
    for j, k in enumerate(reversed(range(rank))):
        (read, read_vals), (write, write_vals) = sets[j], sets[j + 1]
        moved = [m for m in range(rank) if m != k or k != 0]   # dimension 0 is implied at the end
        passes += [
            b.for_(c, 0, b.add(extents[k], 1), b.store(count, c, b.i64(0))),
            b.for_(t, 0, n, b.store(count, b.add(at(read[k], t), 1), b.i64(1), accumulate=True)),
            b.declare(total, 0) if j == 0 else b.assign(total, 0),
            b.for_(c, 0, b.add(extents[k], 1),
                   b.assign(total, b.add(total, b.load(count, c))),
                   b.store(count, c, total)),
            b.for_(t, 0, n,
                   b.declare(c, at(read[k], t)),
                   b.declare(q, b.load(count, c)),
                   *[b.store(write[m], q, b.cast(b.load(read[m], t), out_index)) for m in moved],
                   b.store(write_vals, q, b.load(read_vals, t)),
                   b.store(count, c, b.add(q, 1)))]
    # Rows of dimension 0 are [count[r - 1], count[r]); runs of equal coordinates in them
    # become one entry, moved down in place.
    same = b.gt(kept, first)
    for m in range(1, rank):
        same = b.land(same, b.eq(at(rows[m], t), at(rows[m], b.sub(kept, 1))))
    passes += [
        b.declare(kept, 0),
        b.declare(begin, 0),
        b.store(out_pos, 0, b.cast(b.i64(0), out_index)),
        b.for_(r, 0, extents[0],
               b.declare(first, kept),
               b.for_(t, begin, b.load(count, r),
                      b.if_(same, b.store(vals, b.sub(kept, 1), b.load(vals, t), accumulate=True), [
                          *[b.store(rows[m], kept, b.load(rows[m], t)) for m in range(1, rank)],
                          b.if_(b.ne(want_rows, 0), b.store(rows[0], kept, b.cast(r, out_index))),
                          b.store(vals, kept, b.load(vals, t)),
                          b.assign(kept, b.add(kept, 1))])),
               b.assign(begin, b.load(count, r)),
               b.store(out_pos, b.add(r, 1), b.cast(kept, out_index))),
        b.store(status, 0, kept)]
    body.append(b.if_(b.eq(bad, 0), b.if_(b.eq(unsorted, 0), in_order, passes),
                      b.store(status, 0, b.i64(-1))))
    params = [b.param(n, "n"), *[b.param(x, f"extent.{k}") for k, x in enumerate(extents)]]
    for name, (crd, vals_) in (("", given), ("spare.", spare), ("other.", other),
                               ("out.", out)):
        output = bool(name)
        params += [*[b.param(x, f"{name}crd.{k}", output) for k, x in enumerate(crd)],
                   b.param(vals_, f"{name}vals", output)]
    params += [b.param(count, "count", True), b.param(out_pos, "out.pos", True),
               b.param(want_rows, "want_rows"), b.param(status, "status", True)]
    return b.function(f"ta_sort_coords_{rank}_{index.value}_{out_index.value}_{value.value}",
                      params, *body)


class Sorted(NamedTuple):
    """Canonical coordinates: ``crd[k][:nnz]`` sorted lexicographically, each coordinate
    once, ``vals[:nnz]`` their summed values, ``pos`` the count of entries under each first
    coordinate as a compressed level's positions (``extent_0 + 1`` long)."""

    crd: tuple[np.ndarray, ...]
    vals: np.ndarray
    pos: np.ndarray
    nnz: int


class CoordinateSorter:
    """Builds the sorting kernels once (per rank and dtypes) and runs them.

    >>> import tempfile
    >>> s = CoordinateSorter(DiskCache(tempfile.mkdtemp()))
    >>> out = s.sort((np.array([1, 0, 1]), np.array([2, 3, 2])), np.array([1., 2., 4.]), (2, 4))
    >>> out.nnz, [c.tolist() for c in out.crd], out.vals.tolist(), out.pos.tolist()
    (2, [[0, 1], [3, 2]], [2.0, 5.0], [0, 1, 2])
    """

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(
            lambda rank, index, out, value: sorting_function(
                rank, _INDEX[index], _INDEX[out], _VALUES[value]), disk)
        self._scratch = threading.local()

    @staticmethod
    def takes(values: np.dtype) -> bool:
        """Whether values of this dtype can be sorted here (sums of bools, scipy's logical
        or, and other dtypes are left to the caller)."""
        return np.dtype(values) in _VALUES

    def sort(self, coords: tuple[np.ndarray, ...], vals: np.ndarray,
             shape: tuple[int, ...], rows: bool = True) -> Sorted:
        """``coords`` (one array per dimension, each as long as ``vals``) and ``vals`` in
        canonical order; raises ValueError when a coordinate lies outside ``shape``. The
        index arrays are int32 when every extent and the entry count fit, as scipy chooses.
        Without ``rows`` the first dimension's coordinates are not written (``crd[0]`` is
        then empty; ``pos`` says the same).
        """
        rank, n = len(shape), int(vals.shape[0])
        index = np.dtype(np.int64) if any(c.dtype != np.int32 for c in coords) \
            else np.dtype(np.int32)
        coords = tuple(np.ascontiguousarray(c, dtype=index) for c in coords)
        vals = np.ascontiguousarray(vals)
        out = np.dtype(np.int32) if max((*shape, n)) < 2 ** 31 else np.dtype(np.int64)
        spare = self._buffers("spare", rank, n, out, vals.dtype)
        other = self._buffers("other", rank, n if rank > 2 else 0, out, vals.dtype)
        count = self._buffer("count", max(shape, default=0) + 1, np.dtype(np.int64))
        result = [np.empty(n if rows or k else 0, out) for k in range(rank)] + \
            [np.empty(n, vals.dtype)]
        out_pos = np.empty(shape[0] + 1, out)
        status = np.zeros(1, np.int64)
        kernel = self.kernels.get(rank, index, out, vals.dtype)
        # scratch arrays are kept (their addresses memoised); the inputs and outputs are
        # new objects on most calls, read through the buffer protocol
        (kernel.call or kernel.function)(
            n, *shape, *map(data_address, coords), data_address(vals),
            *map(address_of, spare + other), *map(data_address, result), address_of(count),
            data_address(out_pos), int(rows), data_address(status))
        kept = int(status[0])
        if kept < 0:
            raise ValueError(f"a coordinate lies outside the shape {shape}")
        return Sorted(tuple(c[:kept] for c in result[:-1]), result[-1][:kept], out_pos, kept)

    def _buffers(self, name: str, rank: int, n: int, index: np.dtype, values: np.dtype
                 ) -> list[np.ndarray]:
        return [self._buffer(f"{name}{k}", n, index) for k in range(rank)] + \
            [self._buffer(f"{name}vals", n, values)]

    def _buffer(self, name: str, n: int, dtype: np.dtype) -> np.ndarray:
        """Scratch of at least ``n`` ``dtype`` values, kept for this thread's next sort (up to
        ``KEPT_BYTES`` each): a fresh array can cost its page faults on every call (up to
        1 ms for 2.4 MB on the 2-core VM, measured), more than the passes over it."""
        kept = self._scratch.__dict__.setdefault("arrays", {})
        array = kept.get((name, dtype))
        if array is not None and array.shape[0] >= n:
            return array
        array = np.empty(max(n, 1), dtype)
        if array.nbytes <= KEPT_BYTES:
            kept[(name, dtype)] = array
        return array


_DS = (LevelKind.DENSE, LevelKind.COMPRESSED)


def converted(tensor: Tensor, fmt: Format, sorter: CoordinateSorter) -> Tensor | None:
    """``tensor`` (sparse) stored in ``fmt`` (sparse), its entries put in ``fmt``'s storage
    order by ``sorter`` instead of ``formats.pack``'s NumPy sort (a 5000 x 5000 CSC with
    7.5e5 entries as CSR: ~77 ms there, a few here); the index dtype is kept. None where the
    values are of a dtype the sorter does not take, or a level of either format is dense
    below a sparse one (``Tensor.convert`` then does it).

    >>> import numpy as np, tempfile
    >>> from tensoralg.formats import CSC, CSR
    >>> t = Tensor.from_numpy(np.array([[0.0, 2.0], [3.0, 4.0]]), CSC)
    >>> c = converted(t, CSR, CoordinateSorter(DiskCache(tempfile.mkdtemp())))
    >>> c.format == CSR, c.levels[1].crd.tolist(), c.vals.tolist()
    (True, [1, 0, 1], [2.0, 3.0, 4.0])
    """
    source = tensor.format
    if not CoordinateSorter.takes(tensor.dtype) or fmt.is_dense or source.is_dense or \
            not _sparse_below(source) or not _sparse_below(fmt):
        return None
    index = tensor.index_dtype
    if source.levels == _DS:       # a CSR-like source: its coordinates without to_coords
        pos, crd = tensor.levels[1].pos, tensor.levels[1].crd
        stored = (np.repeat(np.arange(tensor.shape[source.order[0]], dtype=index),
                            np.diff(pos)), crd[:int(pos[-1])])
        coords = [np.empty(0, index)] * 2
        for k, mode in enumerate(source.order):
            coords[mode] = stored[k]
        vals = tensor.vals[:int(pos[-1])]
    else:
        matrix, vals = to_coords(tensor)
        coords = list(matrix.T)
    storage = tuple(coords[mode] for mode in fmt.order)
    sizes = tuple(tensor.shape[mode] for mode in fmt.order)
    done = sorter.sort(storage, vals, sizes, rows=fmt.levels != _DS)
    if fmt.levels == _DS:
        levels = (LevelArrays(), LevelArrays(done.pos.astype(index, copy=False),
                                             done.crd[1].astype(index, copy=False)))
        return Tensor(tensor.shape, fmt, levels, done.vals, check=False)
    back = np.empty((done.nnz, tensor.ndim), dtype=np.int64)
    for k, mode in enumerate(fmt.order):
        back[:, mode] = done.crd[k]
    return pack(back, done.vals, tensor.shape, fmt, sorted_unique=True, index_dtype=index)


def _sparse_below(fmt: Format) -> bool:
    """Whether no dense level lies below a sparse one (padding ``to_coords`` would list)."""
    seen = False
    for kind in fmt.levels:
        if kind is LevelKind.DENSE and seen:
            return False
        seen = seen or kind is not LevelKind.DENSE
    return True
