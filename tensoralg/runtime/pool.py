"""Worker threads parked in the native fork-join pool (``codegen/pool.py``).

A :class:`NativePool` owns a control block and ``workers`` threads, each inside one long
ctypes call of the pool's worker loop (the GIL is released for the whole of it). Compiled call
sequences hand their thread ranges to the pool with the pool's ``run`` function; the thread
running the sequence takes ranges too, so the pool may have no workers at all.

A forked child inherits the control block but none of the threads: its sequences then run
every range on their own thread, until the pool is asked for again (a plan built, a thread
count set), which starts workers of the child's own.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading
import time
import warnings
from typing import Any

import numpy as np

from tensoralg.codegen.pool import BUSY, HALT, RUN, SLEEPERS, SPIN, STOP, TICKS, WORDS, WORKER

_PROTOTYPES = {RUN: ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_void_p, ctypes.c_int64),
               WORKER: ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p),
               STOP: ctypes.CFUNCTYPE(None, ctypes.c_void_p),
               TICKS: ctypes.CFUNCTYPE(ctypes.c_int64)}
# How long a worker spins after its last task before it sleeps: longer than the gaps between
# the parallel calls of one run and between the runs of a serving loop (ranges handed to a
# sleeping worker wait for the OS to wake it: tens of µs in a VM), short enough that an idle
# process frees its cores at once. ``TENSORALG_POOL_SPIN_US`` sets it.
SPIN_US = 1000
_CODE: dict[str, Any] = {}
_CODE_LOCK = threading.Lock()
# Every pool ever made, for good: compiled sequences hold its control block's address.
_POOLS: list["NativePool"] = []


# Asked on every threaded call: platform.machine() alone took ~10 µs of it.
_NATIVE_PLATFORM = sys.platform.startswith("linux") and \
    platform.machine() in ("x86_64", "aarch64")


def native_pool_supported() -> bool:
    """Whether compiled sequences can run their thread ranges on a native pool here: Linux on
    x86-64 or AArch64 (the pool sleeps on ``futex``), unless ``TENSORALG_NATIVE_POOL=0``.

    >>> isinstance(native_pool_supported(), bool)
    True
    """
    return _NATIVE_PLATFORM and os.environ.get("TENSORALG_NATIVE_POOL", "1") != "0"


def _code() -> dict[str, Any]:
    """The pool's functions (run, worker loop, stop, cycle counter), compiled once per
    process, and the cycle counter's rate."""
    with _CODE_LOCK:
        if not _CODE:
            from tensoralg.codegen.build import build_llvm_module, function_address
            from tensoralg.codegen.pool import pool_module

            run, _, keepalive = build_llvm_module(pool_module(platform.machine()), RUN,
                                                  _PROTOTYPES[RUN])
            _CODE[RUN] = run
            for name in (WORKER, STOP, TICKS):
                _CODE[name] = _PROTOTYPES[name](function_address(keepalive, name))
            _CODE["keepalive"] = keepalive
            _CODE["ticks per µs"] = _ticks_per_us(_CODE[TICKS])
        return _CODE


def _ticks_per_us(ticks: Any) -> float:
    """The cycle counter's rate, from a 2 ms wall-clock interval."""
    wall, count = time.perf_counter(), ticks()
    time.sleep(0.002)
    return max(1.0, (ticks() - count) / ((time.perf_counter() - wall) * 1e6))


def _spin_us() -> float:
    text = os.environ.get("TENSORALG_POOL_SPIN_US", "")
    try:
        return max(0.0, float(text)) if text else float(SPIN_US)
    except ValueError:
        warnings.warn(f"TENSORALG_POOL_SPIN_US={text!r} is not a number of microseconds; "
                      f"using {SPIN_US}", stacklevel=2)
        return float(SPIN_US)


class NativePool:
    """A control block and ``workers`` threads parked in the native worker loop.

    >>> pool = NativePool(1)
    >>> pool.workers
    1
    >>> pool.resize(0); pool.workers
    0
    """

    def __init__(self, workers: int) -> None:
        code = _code()
        self._run, self._worker, self._stop = code[RUN], code[WORKER], code[STOP]
        self.run_address = ctypes.cast(self._run, ctypes.c_void_p).value or 0
        # One cache line per hot word, so the block starts on a line of its own.
        self._memory = np.zeros(WORDS + 8, np.int64)
        start = (-self._memory.ctypes.data % 64) // 8
        self.words = self._memory[start:start + WORDS]
        self.address = self.words.ctypes.data
        self.words[SPIN] = int(_spin_us() * code["ticks per µs"])
        self._threads: list[threading.Thread] = []
        self._pid = os.getpid()
        self._lock = threading.Lock()
        _POOLS.append(self)
        self.resize(workers)

    @property
    def workers(self) -> int:
        """How many worker threads the pool runs now."""
        return len(self._threads) if self._pid == os.getpid() else 0

    def resize(self, workers: int) -> None:
        """Run ``workers`` worker threads from now on (0: every range on the caller)."""
        workers = max(0, int(workers))
        with self._lock:
            if self._pid == os.getpid() and len(self._threads) == workers:
                return
            self._halt()
            self.words[HALT] = 0
            self._threads = [threading.Thread(target=self._worker, args=(self.address,),
                                              name=f"tensoralg-pool-{k}", daemon=True)
                             for k in range(workers)]
            for thread in self._threads:
                thread.start()

    def run(self, task: Any, env: int, parts: int) -> int:
        """Run ``task(env, part)`` for every part on the pool (a ctypes ``int32(void*, int64)``
        function); returns the largest status. For tests: sequences call the pool natively."""
        return self._run(self.address, ctypes.cast(task, ctypes.c_void_p).value, env, parts)

    def _halt(self) -> None:
        if self._pid != os.getpid():
            # A forked child: the parent's threads are not here, and whatever they left
            # half-done in the block is nobody's now.
            self._pid = os.getpid()
            self.words[SLEEPERS] = self.words[BUSY] = 0
        elif self._threads:
            self._stop(self.address)
            for thread in self._threads:
                thread.join(timeout=5.0)
        self._threads = []

    def close(self) -> None:
        """Stop every worker (they finish the part they are running first)."""
        with self._lock:
            self._halt()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()


__all__ = ["NativePool", "native_pool_supported"]
