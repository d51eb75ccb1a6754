"""Running one kernel on several threads, each over its own range of the outer loop.

A kernel whose outer loop the lowering marked splittable takes ``range.begin``/``range.end``
arguments; each range writes disjoint output positions, so ranges run concurrently without
synchronisation. ctypes releases the GIL while a kernel runs, so plain Python threads give real
parallelism. Ranges are balanced by the number of stored entries when a CSR-like operand is
indexed by the outer loop, and by rows otherwise.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import numpy as np

# Below this many stored values (operands plus output) per thread, handing a range to another
# thread costs more than it saves (measured: an SpMV over 600k entries is faster on one thread).
MIN_WORK_PER_THREAD = 400_000
# The same through the native pool (runtime/native_split.py), which hands a range over in 1-2 µs
# instead of 30-50 and cuts a call into NATIVE_RANGES_PER_THREAD ranges a thread. Measured on
# the 2-core development VM, quiet, one thread against two (SpMV / SpMM with 16 columns,
# medians of 150-300 alternating calls): SpMV gains from ~3e5 stored values (bcsstk16 290k:
# 1.2x, bcsstk33 592k: 1.3x) and loses below 1e5 (bcsstk13 84k: 0.75x); SpMM, 5 units of work
# an entry, gains from ~6e4 (bcsstk13: 1.08x, wiki-Vote 104k: 1.17x, ego-Facebook: 1.37x) with
# a few losses of 5-10% around 5e4-1e5 (bayer10, fidapex6). Under load from other processes
# the second thread seldom pays at these sizes; the ranges claimed one at a time bound the loss.
# That was at 150k, with ~100 µs of cold Python per split call (ranges made after the kernel had
# swept the caches), which replays now skip by reusing their ranges. At 50k, on another 2-core
# VM (2026-12-04): SpMV ran 0.56-0.72x one thread's time from 1e5 entries (bayer10, wiki-Vote,
# bcsstk16, random 1e5-4e5), SpMM with 16 columns 0.62-0.78x from 2e4; 1e4 entries stay on one
# thread (a split there cost 4-13%).
MIN_WORK_PER_THREAD_NATIVE = 50_000

# What a stored entry costs at least, in units of work, when it reads a dense operand at the
# entry's coordinate (SpMV's x[j], a narrow row of B) into a dense output: a gather, whose
# latency a second core's misses overlap (api.work_of; runtime/replay.py writes it out).
# Counted as one, SpMV split only from ~1e5 entries; at four from ~2.5e4: ca-GrQc (2.9e4
# entries) 39 -> 24.5 µs, bcsstk13 29.6 -> 25.7, rajat01 26.8 -> 26.1, while hangGlider_2
# (1.5e4), which lost 10.8 -> 16.2 µs when split, stays whole (2 threads, thresholds swapped
# in one process on 2026-12-04; an ad hoc A/B, not kept: `benchmarks/run.py --only spmv`
# measures the result).
GATHER_UNITS = 4
# Ranges per thread on the native pool: its threads claim ranges one at a time, so a thread
# that the OS deschedules (a busy machine) holds up only a small range while the others take
# the rest, instead of half the call.
NATIVE_RANGES_PER_THREAD = 4
# A sum of two CSR operands splits only from this many stored entries together: its rows are
# counted first (runtime/count.py), which pays where the merge mispredicts, on rows whose
# columns interleave at random (a uniform 2e4 x 2e4 matrix plus its transpose, 8e5 entries:
# 3.3 ms split, 4.2 whole; a power-law one 2.5 and 2.9), and not where the two rows mostly
# hold the same columns (A + A.T of a structurally symmetric matrix: bcsstk16, 5.8e5 entries,
# ran 1.3x slower split; bcsstk33, 1.2e6, even; 2026-12-06).
COUNTED_SUM_MIN_WORK = 600_000
# A range of a few outer iterations is not worth a thread either, whatever the work estimate
# says (the estimate counts a dense operand whole, e.g. a table that a 1-row bag touches once).
MIN_ROWS_PER_THREAD = 8


def min_rows_per_thread(all_dense: bool, work: int, rows: int) -> int:
    """The fewest outer iterations a thread's range takes: ``MIN_ROWS_PER_THREAD``, unless
    every operand is dense (the estimate is then the work itself, not a table counted whole
    that a sparse operand touches once) and each outer iteration holds at least
    ``DENSE_ROW_WORK`` of it: then one (a stack of 8 products, ``C(b,h,q,d)`` over 8 values of
    ``b``, took 1.28 ms on one thread and 0.66 ms split in two, ad hoc).

    >>> min_rows_per_thread(False, 10**8, 4), min_rows_per_thread(True, 10**8, 4)
    (8, 1)
    >>> min_rows_per_thread(True, 1000, 4)
    8
    """
    heavy = all_dense and rows > 0 and work // rows >= DENSE_ROW_WORK
    return 1 if heavy else MIN_ROWS_PER_THREAD


# Estimated work (stored values touched) an outer iteration of an all-dense kernel holds
# before a thread takes fewer than MIN_ROWS_PER_THREAD of them.
DENSE_ROW_WORK = 1 << 16
# Per thread range of a generated GEMM or convolution: below this many multiply-adds a second
# thread costs about what it saves. Through the Python pool a range costs 30-50 µs of
# hand-over (~120 µs of work at 70 GFMA/s); through the native pool (runtime/pool.py) 1-2 µs
# while its workers spin (measured in a compiled sequence on the 2-core VM: layers of 26 µs
# ran 1.7x faster on two threads).
MIN_FMAS_PER_RANGE_PYTHON = 8_000_000
MIN_FMAS_PER_RANGE_NATIVE = 500_000


class KernelThreads:
    """A small pool owned by the kernel cache; ``threads=1`` disables splitting."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = max(1, threads if threads is not None else (os.cpu_count() or 1))
        self._pool: ThreadPoolExecutor | None = None
        self._pid = os.getpid()      # the process whose threads the pool holds
        self._native: Any = None     # the NativePool of compiled sequences, once asked for
        self._native_supported: bool | None = None
        # Guards the pool between a resize and calls handing it ranges from other threads: a
        # pool shut down between a caller's lookup and its submit raised RuntimeError there.
        self._lock = threading.Lock()

    def resize(self, threads: int) -> None:
        """Use ``threads`` threads for calls bound or split from now on; calls already
        running finish on the threads they started with."""
        threads = max(1, int(threads))
        with self._lock:
            if threads == self.threads:
                return
            self.threads = threads
            if self._native is not None:
                self._native.resize(self.threads - 1)
            if self._pool is not None:
                if self._pid == os.getpid():  # a forked child's copy has no threads to stop
                    self._pool.shutdown(wait=False)   # ranges already handed over still run
                self._pool = None

    def native_pool(self) -> Any:
        """The native fork-join pool (``runtime/pool.py``) that compiled sequences hand thread
        ranges to, with ``threads - 1`` workers; None where there is none. In a forked child
        this starts the child's own workers."""
        from tensoralg.runtime.pool import NativePool, native_pool_supported

        if not native_pool_supported():
            return None
        if self._native is None:
            self._native = NativePool(self.threads - 1)
        else:
            self._native.resize(self.threads - 1)
        return self._native

    def dense_parts(self, fmas: int, most: int) -> int:
        """How many ranges to split a dense product of ``fmas`` multiply-adds into (at most
        ``most``): the native pool takes far smaller ranges than the Python one."""
        from tensoralg.runtime.pool import native_pool_supported

        least = MIN_FMAS_PER_RANGE_NATIVE if native_pool_supported() else \
            MIN_FMAS_PER_RANGE_PYTHON
        return max(1, min(self.threads, fmas // least, most))

    def parts(self, work: int, native: bool = False) -> int:
        """How many ranges to run for a call that touches ``work`` stored values (``native``:
        on the native pool, whose hand-over is cheap)."""
        least = MIN_WORK_PER_THREAD_NATIVE if native else MIN_WORK_PER_THREAD
        return max(1, min(self.threads, work // least))

    def splits_sum(self, work: int) -> bool:
        """Whether a sum of two CSR operands whose rows are counted first, touching ``work``
        stored values, runs on several threads (``COUNTED_SUM_MIN_WORK``)."""
        return self.threads > 1 and work >= COUNTED_SUM_MIN_WORK

    def split_work(self) -> int:
        """The least work a plain call with a dense output is split for: two threads' worth,
        on the native pool where there is one (asked once: replayed calls ask every time)."""
        if self._native_supported is None:
            from tensoralg.runtime.pool import native_pool_supported

            self._native_supported = native_pool_supported()
        native = self._native_supported
        return 2 * (MIN_WORK_PER_THREAD_NATIVE if native else MIN_WORK_PER_THREAD)

    def run(self, call: Callable[[list], int], args: list, slots: tuple[int, int],
            bounds: Sequence[int]) -> list[int]:
        """Run ``call`` once per range ``[bounds[k], bounds[k+1])``; returns each status."""
        begin, end = slots
        calls = []
        for k in range(len(bounds) - 1):
            part = list(args)
            part[begin], part[end] = int(bounds[k]), int(bounds[k + 1])
            calls.append(part)
        return self.run_calls(call, calls)

    def run_calls(self, call: Callable[[list], int], calls: Sequence[list]) -> list[int]:
        """Run ``call`` on each prepared argument list concurrently; returns each status."""
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                # A forked child inherits the pool object but not its threads: work handed to
                # it would wait forever, so the child starts a pool of its own.
                self._pool = ThreadPoolExecutor(self.threads - 1 or 1,
                                                thread_name_prefix="tensoralg")
                self._pid = os.getpid()
            futures = [self._pool.submit(call, part) for part in calls[1:]]
        return [call(calls[0]), *[future.result() for future in futures]]


def row_weights(work: Any, tensors: Mapping[str, Any], counter: Any = None
                ) -> np.ndarray | None:
    """Cumulative work at each row boundary of a split loop (``size + 1`` entries), from a
    ``RowWork`` (``lower/scheduling.py``): the stored entries of its ``rows`` operands, plus,
    for each product ``(A, B)``, the entries of B's rows that A's entries reach (counted by
    ``counter``, a ``runtime.reach.ReachCounter``, natively; by NumPy without one). None: rows
    count alike.

    >>> from types import SimpleNamespace as NS
    >>> A = NS(levels=(None, NS(pos=np.array([0, 1, 3]), crd=np.array([1, 0, 1]))))
    >>> B = NS(levels=(None, NS(pos=np.array([0, 4, 5]), crd=None)))
    >>> row_weights(NS(rows=("A",), products=(("A", "B"),)), {"A": A, "B": B}).tolist()
    [0, 2, 9]
    >>> row_weights(NS(rows=("A", "B"), products=()), {"A": A, "B": B})[-1]
    8
    """
    if work is None:
        return None
    if len(work.rows) == 1 and not work.products:     # the one operand's pos, as it is
        return np.asarray(tensors[work.rows[0]].levels[1].pos)
    if not work.products:
        return PositionSum([tensors[name].levels[1].pos for name in work.rows])
    total: np.ndarray | None = None
    for name in work.rows:
        pos = np.asarray(tensors[name].levels[1].pos, dtype=np.int64)
        total = pos.copy() if total is None else total + pos
    for reach, _ in _reaches(work, tensors, None, counter):
        total = reach if total is None else total + reach
    return total


class PositionSum:
    """The element-wise sum of nondecreasing ``pos`` arrays of one length, as ``split`` reads
    weights (``shape``, an element, ``searchsorted``) but never added up: a sum of two CSR
    operands of 10^6 rows spent ~2 ms a call widening and adding their ``pos`` to place one
    thread boundary (ad hoc, 2026-12-06); each boundary is found by bisection instead.

    >>> w = PositionSum([np.array([0, 1, 3]), np.array([0, 4, 5])])
    >>> w.shape, w[-1], w.searchsorted([0, 4, 5, 9]).tolist()
    ((3,), 8, [0, 1, 1, 3])
    """

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.arrays = list(arrays)
        self.shape = self.arrays[0].shape

    def __getitem__(self, k: int) -> int:
        return sum(int(a[k]) for a in self.arrays)

    def searchsorted(self, targets: Sequence[int]) -> np.ndarray:
        """For each target, the first index whose sum is at least it (``np.searchsorted``'s
        left side); the length when there is none."""
        found = []
        for target in targets:
            lo, hi = 0, self.shape[0]
            while lo < hi:
                mid = (lo + hi) // 2
                if self[mid] < target:
                    lo = mid + 1
                else:
                    hi = mid
            found.append(lo)
        return np.array(found, dtype=np.int64)


def _reaches(work: Any, tensors: Mapping[str, Any], columns: int | None, counter: Any
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(reach, capped)`` of each product of ``work`` (``runtime.reach``)."""
    from tensoralg.runtime.reach import numpy_reach

    count = numpy_reach if counter is None else counter.reach
    return [count(tensors[a].levels[1].pos, tensors[a].levels[1].crd, tensors[b].levels[1].pos,
                  columns) for a, b in work.products]


# A sparse product's multiply-adds per unit of work (``KernelThreads.parts``): its ranges'
# pieces are copied into one output afterwards (runtime/stitch.py), which costs about what
# computing an output entry does, and a product makes up to one entry per multiply-add. Measured
# on the 2-core VM, CSR squares, one thread against two: 6e6-9e7 multiply-adds gained 1.3-1.6x
# (bcsstk16, bcsstk33, kos_docword), 2e6-5e6 lost where the output is about as large as the
# work (adder_dcop_05, rajat01, hangGlider_2: 0.44-0.9x) and gained 1.2-1.5x where it is not
# (bcsstk13, wiki-Vote): the split starts at ~6e6.
MULTIPLY_ADDS_PER_UNIT = 8
# The same for a product whose rows are counted first (lower/counted.py): its ranges write in
# place and nothing is joined, so a multiply-add counts whole, on the native pool's thresholds.
COUNTED_MULTIPLY_ADDS_PER_UNIT = 1
# ... but only where rows hold this many multiply-adds on average (A's entries counted too):
# counting walks every row a second time, and on short rows that walk is a cache miss per
# entry, as the product's is (luxembourg_osm squared, 4.5 a row: 3.4 ms on one thread, 4.5-6
# split and counted; bcspwr10, 19: about even; bayer10, 49: 1.2x faster split; one thread
# against two in one process, 2026-12-04, an ad hoc A/B, not kept: `benchmarks/run.py --only
# spgemm` measures the result).
COUNTED_MIN_PER_ROW = 24


def product_work(multiply_adds: int, rows: int, counted: bool) -> int:
    """A sparse product's units of work (``KernelThreads.parts``) from its multiply-adds over
    ``rows`` rows: ``MULTIPLY_ADDS_PER_UNIT`` to a unit when its ranges are joined; whole when
    its rows are ``counted`` first, but none (it stays whole) where they average fewer than
    ``COUNTED_MIN_PER_ROW``.

    >>> product_work(800, 10, False), product_work(800, 10, True), product_work(100, 10, True)
    (100, 800, 0)
    """
    if not counted:
        return multiply_adds // MULTIPLY_ADDS_PER_UNIT
    if multiply_adds < COUNTED_MIN_PER_ROW * rows:
        return 0
    return multiply_adds // COUNTED_MULTIPLY_ADDS_PER_UNIT
# The most entries a sparse product's output buffers start with (``entry_bounds``): ~100 MB of
# float64 values and int32 coordinates. Past it the kernel grows its buffers as it goes. A
# bound can be loose many times over (bcsstk33 squared: 4.3e7 multiply-adds, 2.6e6 entries),
# and mapping, advising and unmapping room for all of it (2^25) cost bcsstk16 squared ~20%;
# at 2^22 rajat01 squared (4.7e6 entries, bound 5.4e6) grew once at its end: 34 ms, not 25.
MAX_FIRST_CAPACITY = 1 << 23
# Below this many entries in a product's left factor, growing the output as the kernel goes
# costs a few small reallocations, less than computing the bound (~10-20 µs).
MIN_BOUND_ENTRIES = 1 << 13


def entry_bounds(work: Any, tensors: Mapping[str, Any], columns: int,
                 smallest: int | None = None, counter: Any = None) -> np.ndarray | None:
    """Cumulative bound on the entries of each row of a sparse product's output (``size + 1``
    entries), or None when ``work`` (a ``RowWork``) has no products or when their left factors
    have fewer than ``smallest`` entries (``MIN_BOUND_ENTRIES`` by default). ``counter`` (a
    ``runtime.reach.ReachCounter``) counts natively; without one NumPy does.

    A row of ``C = A B`` holds at most the entries of B's rows that A's entries reach, and at
    most ``columns``: started with that much room, a Gustavson kernel never grows its buffers
    (adder_dcop_05 squared, 54% dense: its buffers doubled from 2e4 entries to 1.8e6, and
    copying and faulting them in took two thirds of the call). Where the statement has more
    than ``work``'s products (a third factor, a dense term) the bound is short and the kernel
    grows its buffers past it as before: it is a first capacity, never a limit.

    >>> from types import SimpleNamespace as NS
    >>> A = NS(levels=(None, NS(pos=np.array([0, 1, 3]), crd=np.array([1, 0, 1]))))
    >>> B = NS(levels=(None, NS(pos=np.array([0, 4, 5]), crd=None)))
    >>> work, operands = NS(rows=("A",), products=(("A", "B"),)), {"A": A, "B": B}
    >>> entry_bounds(work, operands, 4, smallest=0).tolist()
    [0, 1, 5]
    >>> entry_bounds(work, operands, 4) is None    # too few entries to be worth it
    True
    """
    smallest = MIN_BOUND_ENTRIES if smallest is None else smallest
    if work is None or not work.products or \
            max(len(tensors[a].levels[1].crd) for a, _ in work.products) < smallest:
        return None
    found = _reaches(work, tensors, columns, counter)
    if len(found) == 1:
        return found[0][1]
    reach = sum(r for r, _ in found)
    bounds = np.zeros_like(reach)
    np.cumsum(np.minimum(np.diff(reach), max(0, int(columns))), out=bounds[1:])
    return bounds


def first_guess(stored: Sequence[int], dense: Sequence[int]) -> int:
    """A sparse output's first capacity when nothing bounds its entries: its sparse operands'
    stored entries (the dense ones' sizes only when every operand is dense). A dense operand
    beside a sparse one rarely widens the output (``A(i,j) * X(i,k) * Y(k,j)`` holds A's
    entries): counted, SDDMM on bayer10 asked for 5.5x A's entries, past the size at which
    buffers are mapped on huge pages, and faulting them in cost a fifth of the call (a perf
    profile, 2026-12-04, not kept). Where the
    output does outgrow the guess, the kernel grows its buffers.

    >>> first_guess([100], [5000]), first_guess([], [5000, 7]), first_guess([], [])
    (100, 5007, 16)
    """
    return max(16, sum(stored) if stored else sum(dense))


def first_capacity(bounds: np.ndarray | None, floor: int) -> int:
    """The first capacity of a sparse output's buffers: ``bounds[-1]`` (``entry_bounds``) up
    to ``MAX_FIRST_CAPACITY``, and never less than ``floor`` (the runtime's usual guess, the
    operands' entries)."""
    if bounds is None:
        return floor
    return max(floor, min(int(bounds[-1]), MAX_FIRST_CAPACITY))


def split(size: int, parts: int, weights: np.ndarray | None = None) -> np.ndarray:
    """``parts + 1`` nondecreasing bounds over ``[0, size)``.

    With ``weights`` (a ``pos`` array of ``size + 1`` cumulative counts) each range holds about
    the same number of stored values; otherwise the same number of rows.
    """
    # Integer arithmetic on a few Python ints: np.linspace and friends cost ~40 µs a call on a
    # slow VM, a third of what a split SpMM's second thread saved on a 1e5-entry matrix.
    if weights is None or weights.shape[0] != size + 1 or weights[-1] == 0:
        return np.array([k * size // parts for k in range(parts + 1)], dtype=np.int64)
    total = int(weights[-1])
    # the first row boundary at or past each k/parts of the work (the targets only grow)
    bounds = weights.searchsorted([-(-k * total // parts) for k in range(parts + 1)])
    bounds = np.minimum(bounds, size).astype(np.int64, copy=False)
    bounds[0], bounds[-1] = 0, size
    return bounds
