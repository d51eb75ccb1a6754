"""The memory plan: value lifetimes, release after last use, and buffer reuse by lifetime.

The executor frees every value after the step that uses it last (the ``release`` list of each
step, computed from the lifetimes below). :class:`MemoryTrace` measures one run: the bytes
of every buffer a node produced (views of inputs and constants are not counted), the sum over
all of them, and the peak of what is alive at once. :func:`reuse_plan` then assigns those
buffers to arenas by lifetime (a buffer may take an arena whose previous tenant is dead and
which is large enough), the plan that a runtime writing kernel outputs into preallocated
buffers would follow; its total is what such a runtime would hold.
"""
from __future__ import annotations

import ctypes
import mmap
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Iterable

import numpy as np


def last_uses(nodes: Iterable, keep: set[str]) -> list[tuple[str, ...]]:
    """For each node, the values it uses for the last time (never those in ``keep``)."""
    nodes = list(nodes)
    last: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for name in node.inputs:
            last[name] = k
    return [tuple(name for name in dict.fromkeys(node.inputs)
                  if name and last.get(name) == k and name not in keep)
            for k, node in enumerate(nodes)]


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


@dataclass
class MemoryTrace:
    """Buffers produced during one run, with their lifetimes (step of birth, step of death)."""

    foreign: set[int] = field(default_factory=set)       # roots of feeds and constants
    owners: dict[str, int] = field(default_factory=dict)  # value -> root id
    counts: dict[int, int] = field(default_factory=dict)  # of buffers alive, by root id
    sizes: dict[object, int] = field(default_factory=dict)
    born: dict[object, int] = field(default_factory=dict)
    died: dict[object, int] = field(default_factory=dict)
    live: int = 0
    peak: int = 0

    @staticmethod
    def start(values: dict[str, np.ndarray]) -> "MemoryTrace":
        return MemoryTrace(foreign={id(_root(v)) for v in values.values()
                                    if isinstance(v, np.ndarray)})

    def produced(self, step: int, outputs: dict[str, np.ndarray]) -> None:
        for name, value in outputs.items():
            root = _root(value)
            key = id(root)
            if key in self.foreign:
                continue
            self.owners[name] = key
            if key not in self.counts:
                self.counts[key] = 0
                self.sizes[key] = root.nbytes
                self.born[key] = step
                self.live += root.nbytes
                self.peak = max(self.peak, self.live)
            self.counts[key] += 1

    def released(self, step: int, names: Iterable[str]) -> None:
        for name in names:
            key = self.owners.pop(name, None)
            if key is None:
                continue
            self.counts[key] -= 1
            if self.counts[key] == 0:
                self.live -= self.sizes[key]
                self.died[key] = step
                # A later buffer may get this id (its memory reused): it is a new buffer, so
                # the dead one's record moves to a key of its own. Keeping it under the id
                # made such a buffer go uncounted (a flaky peak == total in a profile test).
                del self.counts[key]
                retired = ("released", len(self.sizes), key)
                for record in (self.sizes, self.born, self.died):
                    record[retired] = record.pop(key)

    def stats(self, steps: int) -> "MemoryStats":
        total = sum(self.sizes.values())
        lifetimes = [(self.born[k], self.died.get(k, steps), self.sizes[k]) for k in self.sizes]
        return MemoryStats(total, self.peak, reuse_plan(lifetimes), len(self.sizes))


def reuse_plan(lifetimes: list[tuple[int, int, int]]) -> int:
    """Bytes of arenas when each buffer (birth, death, bytes) takes a free arena (see
    :func:`assign_arenas`).

    >>> reuse_plan([(0, 1, 100), (1, 2, 100), (2, 3, 50)])   # the third reuses the first's
    200
    """
    return sum(assign_arenas(lifetimes)[0])


def assign_arenas(lifetimes: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """Arena sizes, and the arena of each buffer (birth step, death step, bytes).

    A buffer takes a free arena (its tenant died at an earlier step than this buffer's birth,
    so a step never writes over one of its own inputs): the smallest that fits, else the
    largest free one, grown; a new arena only when none is free.

    >>> assign_arenas([(0, 1, 100), (1, 2, 100), (2, 3, 50)])
    ([100, 100], [0, 1, 0])
    """
    sizes: list[int] = []
    busy: list[int] = []
    where = [0] * len(lifetimes)
    for k in sorted(range(len(lifetimes)), key=lambda k: lifetimes[k]):
        born, died, size = lifetimes[k]
        free = [a for a in range(len(sizes)) if busy[a] < born]
        fits = [a for a in free if sizes[a] >= size]
        if fits:
            arena = min(fits, key=lambda a: sizes[a])
        elif free:
            arena = max(free, key=lambda a: sizes[a])
            sizes[arena] = size
        else:
            arena = len(sizes)
            sizes.append(size)
            busy.append(died)
        busy[arena] = died
        where[k] = arena
    return sizes, where


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """Bytes of node-produced buffers in one run: their sum, the peak alive at once, and the
    arena total of the lifetime reuse plan (``held``: the static plan really allocates those
    arenas; otherwise values are released after their last use and the plan is what arenas
    would hold)."""

    total: int
    peak: int
    planned: int
    buffers: int
    held: bool = False

    def __str__(self) -> str:
        if self.held:
            return (f"intermediate memory (static plan): {self.buffers} buffers, sum "
                    f"{_kib(self.total)}, peak alive {_kib(self.peak)}, arenas held "
                    f"{_kib(self.planned)}")
        return (f"intermediate memory: {self.buffers} buffers, sum {_kib(self.total)}, "
                f"peak alive {_kib(self.peak)} (released after last use); arenas by lifetime "
                f"would hold {_kib(self.planned)}")


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


__all__ = ["last_uses", "MemoryTrace", "MemoryStats", "reuse_plan", "assign_arenas"]


# Buffers from this size up give their pages back after their last use in a recording run.
DROP_PAGES_BYTES = 1 << 20
_MADV_DONTNEED = 4


def _madvise() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_MADVISE = _madvise()


def drop_pages(array: np.ndarray) -> int:
    """Give the whole memory pages inside ``array``'s buffer back to the operating system
    (Linux ``madvise(MADV_DONTNEED)``); the bytes given back, 0 where that is not available.

    The array keeps its address, shape, dtype and strides, so views of it and anything that
    compares addresses still see the same buffer, but its values read as zeros afterwards: only
    for a buffer nothing will read again. The partial pages at either end stay (the memory
    allocator keeps its own records there).
    """
    if _MADVISE is None or not array.nbytes:
        return 0
    start = array.ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    end = (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if end <= first or _MADVISE(first, end - first, _MADV_DONTNEED) != 0:
        return 0
    return end - first


class PageDropper:
    """Where a recording run keeps every value (the static plan reads their shapes, dtypes and
    addresses, and only the values of a few), the pages of a buffer go back to the system
    once no value still to be read lives in it: that run then peaks near a normal run's
    memory instead of holding every intermediate of the graph at once (r(2+1)D-18 at batch
    8: the recording run's peak resident memory 8.4 GB before, 2.4 GB after, measured ad hoc
    with ``resource.getrusage`` on 2026-12-05; its plan's own intermediates sum to ~8 GB,
    the most alive at once ~0.7 GB, as ``CompiledModel.ir()``'s memory line says at batch 1
    times 8).

    Only float buffers of ``DROP_PAGES_BYTES`` or more (activations; ids, masks and shapes
    keep their values), never those of feeds and constants (``foreign``) or of the values
    named in ``keep`` (whose values the plan reads: the ones it takes as constants)."""

    def __init__(self, values: dict[str, np.ndarray], keep: Collection[str]) -> None:
        self.foreign = MemoryTrace.start(values).foreign
        self.keep = set(keep)
        self.kept: set[int] = set()
        self.live: Counter[int] = Counter()
        self.roots: dict[int, np.ndarray] = {}

    def produced(self, outputs: dict[str, np.ndarray]) -> None:
        for name, value in outputs.items():
            if not isinstance(value, np.ndarray):
                continue
            root = _root(value)
            key = id(root)
            if key in self.foreign:
                continue
            self.roots[key] = root
            self.live[key] += 1
            if name in self.keep:
                self.kept.add(key)

    def released(self, names: Iterable[str], values: dict[str, np.ndarray]) -> None:
        for name in names:
            value = values.get(name)
            if not isinstance(value, np.ndarray):
                continue
            key = id(_root(value))
            if key not in self.live:
                continue
            self.live[key] -= 1
            if self.live[key] == 0:
                del self.live[key]
                root = self.roots.pop(key)
                if key not in self.kept and root.nbytes >= DROP_PAGES_BYTES and \
                        root.dtype.kind in "fc":
                    drop_pages(root)
