"""The native fork-join pool (runtime/pool.py, codegen/pool.py) and the compiled sequences that
hand their thread ranges to it."""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from conftest import passes_in_forked_child, split_product, split_sum_product

import tensoralg as ta
from tensoralg.runtime.gemm import DenseLayer
from tensoralg.runtime.pool import NativePool, native_pool_supported
from tensoralg.runtime.sequence import CallSequence
from tensoralg.runtime.threads import KernelThreads

pytestmark = pytest.mark.skipif(not native_pool_supported(),
                                reason="the native pool needs Linux on x86-64 or AArch64")

TASK = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64)


class Recorder:
    """A task that records which parts ran (and on which thread) and fails on ``bad`` parts."""

    def __init__(self, bad: dict[int, int] | None = None) -> None:
        self.parts: list[tuple[int, int]] = []
        self.bad = bad or {}
        self.lock = threading.Lock()
        self.task = TASK(self._run)

    def _run(self, env: int, part: int) -> int:
        with self.lock:
            self.parts.append((part, threading.get_ident()))
        return self.bad.get(part, 0)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_every_part_runs_once_and_the_worst_status_comes_back(workers):
    pool = NativePool(workers)
    try:
        for parts in (1, 2, 7, 40):
            rec = Recorder()
            assert pool.run(rec.task, 0, parts) == 0
            assert sorted(p for p, _ in rec.parts) == list(range(parts))
        rec = Recorder({2: 5, 4: 9})
        assert pool.run(rec.task, 0, 6) == 9
        assert pool.run(Recorder().task, 0, 0) == 0
    finally:
        pool.close()
    assert pool.workers == 0


def test_workers_take_parts_and_sleeping_workers_wake():
    pool = NativePool(1)
    try:
        rec = Recorder()
        # A task that runs long enough for the worker to take part of it.
        slow = TASK(lambda env, part: (rec._run(env, part), threading.Event().wait(0.01))[0])

        def both_threads_take_parts(asleep: bool) -> bool:
            # A few tries: on a loaded machine the OS may not run the worker within one task.
            for _ in range(5):
                if asleep:
                    threading.Event().wait(0.3)   # far past the spin: the worker sleeps
                rec.parts.clear()
                assert pool.run(slow, 0, 8) == 0
                assert sorted(p for p, _ in rec.parts) == list(range(8))
                if len({thread for _, thread in rec.parts}) == 2:
                    return True
            return False

        assert both_threads_take_parts(asleep=False)
        assert both_threads_take_parts(asleep=True)
    finally:
        pool.close()


def test_a_second_caller_finds_the_pool_busy_and_runs_alone():
    pool = NativePool(1)
    inner = Recorder()
    seen: list[int] = []

    def outer_part(env: int, part: int) -> int:
        if part == 0:       # while this task holds the pool, another thread calls it
            other = threading.Thread(target=lambda: seen.append(pool.run(inner.task, 0, 3)))
            other.start()
            other.join()
        return 0

    outer = TASK(outer_part)
    try:
        assert pool.run(outer, 0, 2) == 0
        assert seen == [0]
        assert sorted(p for p, _ in inner.parts) == [0, 1, 2]
    finally:
        pool.close()


def test_resize_stops_and_starts_workers():
    pool = NativePool(2)
    try:
        assert pool.workers == 2
        pool.resize(0)
        assert pool.workers == 0
        rec = Recorder()
        assert pool.run(rec.task, 0, 5) == 0
        assert {thread for _, thread in rec.parts} == {threading.get_ident()}
        pool.resize(1)
        assert pool.workers == 1 and pool.run(Recorder().task, 0, 5) == 0
    finally:
        pool.close()


def _layers(threads):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 96)).astype(np.float32)
    w2 = rng.standard_normal((96, 32)).astype(np.float32)
    a = rng.standard_normal((300, 64)).astype(np.float32)
    h, out = np.empty((300, 96), np.float32), np.empty((300, 32), np.float32)
    first = DenseLayer(w1, relu=True, threads=threads).bind(a, h)
    second = DenseLayer(w2, threads=threads).bind(h, out)
    return first, second, np.maximum(a @ w1, 0) @ w2


def test_sequence_runs_split_layers_on_the_pool(monkeypatch):
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_FMAS_PER_RANGE_NATIVE", 1000)
    threads = KernelThreads(3)
    first, second, want = _layers(threads)
    assert len(first.calls) == 3 and len(second.calls) == 3
    calls = [first.native({}), second.native({})]
    assert all(len(call.more) == 2 for call in calls)
    sequence = CallSequence(calls, slots=0)
    for _ in range(20):
        second.out.fill(np.nan)
        assert sequence.run() == 0
        np.testing.assert_allclose(second.out, want, rtol=1e-4, atol=1e-4)
    threads.resize(1)           # no workers: the sequence's own thread runs every range
    second.out.fill(np.nan)
    assert sequence.run() == 0
    np.testing.assert_allclose(second.out, want, rtol=1e-4, atol=1e-4)
    threads.native_pool().close()


def test_a_failing_range_fails_its_call_in_the_sequence():
    # A statement kernel with a bad-id check, split over threads; one range sees a bad id.
    threads = KernelThreads(2)
    pool = threads.native_pool()
    bad = Recorder({1: 3})
    address = ctypes.cast(bad.task, ctypes.c_void_p).value
    from tensoralg.codegen.sequence import NativeCall

    call = NativeCall(address, (ctypes.c_void_p, ctypes.c_int64), (0, 0), None, "k",
                      more=((0, 1), (0, 2)), pool=(pool.run_address, pool.address))
    ok = NativeCall(address, (ctypes.c_void_p, ctypes.c_int64), (0, 0), None, "k0")
    assert CallSequence([ok, call], slots=0).run() == 2      # 1 + the failed call's index
    assert sorted(p for p, _ in bad.parts) == [0, 0, 1, 2]
    pool.close()


def test_a_forked_child_runs_the_parents_sequence_without_workers(two_threads):
    call, want = split_product()
    native = call.native({})
    assert native is not None and len(native.more) == 1
    sequence = CallSequence([native, native], slots=0)
    assert sequence.run() == 0
    np.testing.assert_allclose(call.out, want)

    def in_child() -> bool:
        call.out.fill(0)
        ok = sequence.run() == 0 and np.allclose(call.out, want)
        ta.set_num_threads(2)                    # the child's own worker starts
        call.out.fill(0)
        return ok and sequence.run() == 0 and np.allclose(call.out, want)

    passes_in_forked_child(in_child)


def test_a_split_layer_called_from_python_runs_on_the_pool(monkeypatch):
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_FMAS_PER_RANGE_NATIVE", 1000)
    threads = KernelThreads(2)
    first, second, want = _layers(threads)
    assert len(first.calls) == 2
    first()
    second()
    np.testing.assert_allclose(second.out, want, rtol=1e-4, atol=1e-4)
    assert first._pooled() is not None               # a compiled one-call sequence
    other = np.ascontiguousarray(first.input[::-1])  # a rebound input is read from its slot
    first.rebind("A", other)
    first()
    second()
    np.testing.assert_allclose(second.out, want[::-1], rtol=1e-4, atol=1e-4)
    threads.native_pool().close()


def test_each_range_zeroes_its_own_rows_of_an_accumulated_output(two_threads):
    call, want = split_sum_product()     # Y(i,j) += ..., ranges over i
    native = call.native({})
    assert native.zero is None and len(native.zeros) == 2
    assert sum(count for _, count in native.zeros) == call.out.nbytes
    sequence = CallSequence([native], slots=0)
    for _ in range(3):
        call.out.fill(np.nan)            # whatever the buffer held, each range clears its rows
        assert sequence.run() == 0
        np.testing.assert_allclose(call.out, want)


def test_spin_time_comes_from_the_environment(monkeypatch):
    from tensoralg.codegen.pool import SPIN
    from tensoralg.runtime.pool import _code

    rate = _code()["ticks per µs"]
    monkeypatch.setenv("TENSORALG_POOL_SPIN_US", "50")
    pool = NativePool(0)
    assert pool.words[SPIN] == int(50 * rate)
    monkeypatch.setenv("TENSORALG_POOL_SPIN_US", "soon")
    with pytest.warns(UserWarning, match="TENSORALG_POOL_SPIN_US"):
        NativePool(0)
