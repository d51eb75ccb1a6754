"""Sparse outputs assembled on several threads: each range of rows is a kernel call of its own,
with buffers of its own, and the pieces are joined into one matrix afterwards.

A kernel whose sparse output is a matrix whose first stored level runs over the split index
(CSR, CSC with its columns first, or DCSR) may run over ranges of its outer loop
(``lower/scheduling.py``, ``stitchable``). Each range's call allocates and grows its own
buffers. For CSR its ``pos`` covers every row, with zeros before the range and its own total
after it; for DCSR it lists only the rows of its range that hold entries.

Joining copies every range's coordinates and values into one new array, in chunks, on as many
threads as ran the ranges (``memcpy`` through ctypes releases the GIL). Growing the first
range's buffers in place with ``realloc`` and copying only the others behind them looked
cheaper, but glibc raises its mmap threshold after every large ``free``, so the next large
blocks come from the heap and ``realloc`` copies them into fresh pages: joining the halves of
rajat01 squared (4.7e6 entries) took 50-76 ms that way, 10 ms this way. Ranges start with room
for what their rows can hold where that is known (``threads.entry_bounds``), so they do not
grow either.
"""
from __future__ import annotations

import ctypes
from typing import Callable, Sequence

import numpy as np

from tensoralg.errors import KernelRuntimeError
from tensoralg.formats.format import Format
from tensoralg.formats.tensor import LevelArrays, Tensor
from tensoralg.runtime.args import CAPACITY, OUT_HANDLE, OUT_SIZES, ArgumentPlan, OutputBuffers
from tensoralg.runtime.native_split import NativeSplit
from tensoralg.runtime.wrap import narrowed_indices, release

RunCalls = Callable[[Callable[[list], int], list[list]], list[int]]

_libc = ctypes.CDLL(None)
_realloc = _libc.realloc
_realloc.argtypes, _realloc.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p
_memcpy = _libc.memcpy
_memcpy.argtypes, _memcpy.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t], \
    ctypes.c_void_p

# Below this many bytes a copy is not worth handing to another thread.
MIN_COPY_BYTES_PER_THREAD = 1 << 20


def varying_slots(plan: ArgumentPlan) -> tuple[int, ...]:
    """The arguments each range of a sparse output's call gets its own value of, in the order
    ``run_ranges`` hands them to a :class:`~tensoralg.runtime.native_split.NativeSplit`: the
    range's bounds, then its output handles, sizes and capacity, in parameter order."""
    begin, end = plan.range_slots   # type: ignore[misc]
    return (begin, end, *(slot for slot, (kind, _, _) in enumerate(plan.steps)
                          if kind in (OUT_HANDLE, OUT_SIZES, CAPACITY)))


def run_ranges(function: Callable[..., int], args: list, plan: ArgumentPlan,
               bounds: Sequence[int], capacity: int, run_calls: RunCalls,
               native: NativeSplit | None = None, weights: np.ndarray | None = None
               ) -> tuple[int, list[OutputBuffers]]:
    """Run one call per range, each with output buffers of its own; returns the worst status
    and each range's buffers.

    ``native`` (built with ``varying=varying_slots(plan)``) runs the ranges on the native pool
    instead of ``run_calls``'s Python threads. Each range's buffers start with its share of
    ``capacity``: in proportion to its work when ``weights`` (``threads.row_weights``, the
    cumulative work at each row boundary) are given, else evenly. For a sum of CSR operands the
    weights are their ``pos`` arrays added, and each range's share is exactly the most it can
    append, so no range grows its buffers.
    """
    begin, end = plan.range_slots   # type: ignore[misc]
    parts: list[OutputBuffers] = []
    calls: list[list] = []
    varying = varying_slots(plan)
    count = len(bounds) - 1
    shares = _shares(capacity, bounds, weights)
    for k in range(count):
        share = shares[k]
        buffers = OutputBuffers(sizes=np.zeros(2, dtype=np.int64), capacity=share)
        call = list(args) if native is None else {}
        for slot, (kind, name, _) in enumerate(plan.steps):
            if kind == OUT_HANDLE:
                handle = buffers.handles[name] = ctypes.c_void_p(0)
                call[slot] = ctypes.addressof(handle)
            elif kind == OUT_SIZES:
                call[slot] = buffers.sizes.ctypes.data   # type: ignore[union-attr]
            elif kind == CAPACITY:
                call[slot] = share
        call[begin], call[end] = int(bounds[k]), int(bounds[k + 1])
        calls.append(call if native is None else [call[slot] for slot in varying])
        parts.append(buffers)
    if native is not None:
        status = native.run(args, calls)
    else:
        status = max(run_calls(lambda part: function(*part), calls))
    if status != 0:
        for buffers in parts:
            release(buffers)
    return status, parts


def _shares(capacity: int, bounds: Sequence[int], weights: np.ndarray | None) -> list[int]:
    """Each range's first capacity: ``capacity`` split by the ranges' work, at least 16.

    >>> _shares(100, [0, 2, 3], np.array([0, 10, 70, 100]))
    [70, 30]
    >>> _shares(100, [0, 2, 3], None)
    [50, 50]
    """
    count = len(bounds) - 1
    if weights is None or int(weights[-1]) <= 0:
        return [max(16, capacity // max(1, count))] * count
    total = int(weights[-1])
    return [max(16, -(-capacity * int(weights[hi] - weights[lo]) // total))
            for lo, hi in zip(bounds[:-1], bounds[1:])]


def join_rows(shape: tuple[int, ...], fmt: Format, index_dtype: np.dtype,
              value_dtype: np.dtype, parts: list[OutputBuffers], bounds: Sequence[int],
              run_calls: RunCalls | None = None) -> Tensor:
    """One matrix from the pieces that ranges ``[bounds[k], bounds[k+1])`` of its first
    stored level assembled (``parts`` in range order); the pieces' buffers are taken over.

    >>> from tensoralg.formats.level import LevelKind
    >>> fmt = Format([LevelKind.DENSE, LevelKind.COMPRESSED])
    >>> pieces = [_piece({"1.pos": [0, 1, 2, 2], "1.crd": [5, 6], "vals": [1.0, 2.0]}),
    ...           _piece({"1.pos": [0, 0, 0, 1], "1.crd": [7], "vals": [3.0]})]
    >>> t = join_rows((3, 8), fmt, np.dtype(np.int64), np.dtype(np.float64), pieces, [0, 2, 3])
    >>> t.levels[1].pos.tolist(), t.levels[1].crd.tolist(), t.vals.tolist()
    ([0, 1, 2, 3], [5, 6, 7], [1.0, 2.0, 3.0])
    """
    index_dtype, value_dtype = np.dtype(index_dtype), np.dtype(value_dtype)
    counts = [int(part.sizes[1]) for part in parts]   # type: ignore[index]
    try:
        if fmt.levels[0].is_sparse:
            top, pos = _join_sparse_rows(parts, counts, index_dtype)
        else:
            top, pos = LevelArrays(), _join_dense_rows(parts, shape[fmt.order[0]], bounds,
                                                        index_dtype)
        threads = run_calls if run_calls is not None and len(parts) > 1 else None
        crd = _concatenate(parts, "1.crd", counts, index_dtype, threads)
        vals = _concatenate(parts, "vals", counts, value_dtype, threads)
    finally:
        for part in parts:
            release(part)
    return narrowed_indices(Tensor.trusted(tuple(shape), fmt, (top, LevelArrays(pos, crd)),
                                           vals))


def _view(address: int | None, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` elements at ``address``, not owned (the caller frees the memory)."""
    if not address or count == 0:
        return np.zeros(count, dtype)
    return np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(address),
                         dtype=dtype, count=count)


def _join_dense_rows(parts: list[OutputBuffers], rows: int, bounds: Sequence[int],
                     index_dtype: np.dtype) -> np.ndarray:
    """CSR's ``pos``: each range's own rows, offset by the entries of the ranges before."""
    pos = np.zeros(rows + 1, dtype=index_dtype)
    offset = 0
    for part, lo, hi in zip(parts, bounds[:-1], bounds[1:]):
        piece = _view(part.handles["1.pos"].value, rows + 1, index_dtype)
        pos[lo + 1:hi + 1] = piece[lo + 1:hi + 1] + offset
        offset += int(part.sizes[1])   # type: ignore[index]
    return pos


def _join_sparse_rows(parts: list[OutputBuffers], counts: list[int], index_dtype: np.dtype
                      ) -> tuple[LevelArrays, np.ndarray]:
    """DCSR's row level (the rows each range stored, in order) and its entries' ``pos``."""
    rows = [int(part.sizes[0]) for part in parts]   # type: ignore[index]
    crd0 = np.concatenate([_view(part.handles["0.crd"].value, n, index_dtype)
                           for part, n in zip(parts, rows)]).astype(index_dtype, copy=False)
    pos1 = np.zeros(sum(rows) + 1, dtype=index_dtype)
    at, offset = 0, 0
    for part, n, count in zip(parts, rows, counts):
        pos1[at + 1:at + n + 1] = _view(part.handles["1.pos"].value, n + 1, index_dtype)[1:] \
            + offset
        at, offset = at + n, offset + count
    return LevelArrays(np.array([0, sum(rows)], dtype=index_dtype), crd0), pos1


def _concatenate(parts: list[OutputBuffers], key: str, counts: list[int], dtype: np.dtype,
                 run_calls: RunCalls | None) -> np.ndarray:
    """The pieces' ``key`` buffers copied into one new array (on the threads of
    ``run_calls`` when large); the caller frees the pieces."""
    size, total = dtype.itemsize, sum(counts)
    try:
        joined = np.empty(total, dtype)     # NumPy advises huge pages for a large block
    except MemoryError:
        raise KernelRuntimeError(f"could not allocate {total * size} bytes to join the "
                                 f"{len(parts)} ranges of a sparse output computed on "
                                 f"threads") from None
    jobs: list[tuple[int, int, int]] = []
    offset = 0
    for part, count in zip(parts, counts):
        if count:
            jobs.append((joined.ctypes.data + offset * size, part.handles[key].value,
                         count * size))
        offset += count
    _copy(jobs, run_calls)
    return joined


def _copy(jobs: list[tuple[int, int, int]], run_calls: RunCalls | None) -> None:
    """Run the ``(destination, source, bytes)`` copies, cut into about equal shares for the
    threads when they are large."""
    total = sum(n for _, _, n in jobs)
    shares = 1 if run_calls is None else max(1, min(8, total // MIN_COPY_BYTES_PER_THREAD))
    if shares == 1:
        for destination, source, count in jobs:
            _memcpy(destination, source, count)
        return
    chunk = -(-total // shares)
    groups: list[list] = [[] for _ in range(shares)]
    done = 0
    for destination, source, count in jobs:
        at = 0
        while at < count:
            take = min(count - at, chunk - done % chunk)
            groups[min(done // chunk, shares - 1)].append((destination + at, source + at, take))
            at, done = at + take, done + take

    def run(group: list) -> int:
        for destination, source, count in group:
            _memcpy(destination, source, count)
        return 0

    assert run_calls is not None
    run_calls(run, [g for g in groups if g])


def _piece(arrays: dict[str, list]) -> OutputBuffers:
    """A hand-made range result in malloc'd buffers, for the example above."""
    buffers = OutputBuffers(sizes=np.array([0, len(arrays["1.crd"])], dtype=np.int64))
    for key, values in arrays.items():
        data = np.asarray(values, dtype=np.float64 if key == "vals" else np.int64)
        address = _realloc(None, max(1, data.nbytes))
        ctypes.memmove(address, data.ctypes.data, data.nbytes)
        buffers.handles[key] = ctypes.c_void_p(address)
    return buffers


__all__ = ["join_rows", "run_ranges", "varying_slots"]
