"""Quick first builds (``codegen/tiered.py``): a new kernel runs unoptimised at once, its
optimised build takes its place when ready, and nothing a caller holds ever runs stale or
wrong code.

The tests hold the optimised builds back (``held``: queued, started only by a wait), so that
what runs before and after the swap is known, not left to the background thread's timing.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import api
from tensoralg.codegen import tiered

SPMV = "y(i) = A(i,j) * x(j)"


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A kernel cache of its own (on ``tmp_path``), with quick builds on."""
    cache = api.KernelCache(api.CompileOptions(cache_dir=tmp_path, quick_builds=True))
    monkeypatch.setattr(api, "_cache", cache)
    yield cache
    assert tiered.finish(timeout=120)


@pytest.fixture
def held(monkeypatch):
    """Optimised builds queue without starting: a wait (or ``finish``) starts them."""
    monkeypatch.setattr(tiered, "submit", lambda build: tiered._queue.append(build))
    yield
    assert tiered.finish(timeout=120)


def _matrix(n: int, density: float, seed: int = 0) -> sp.csr_matrix:
    return sp.random(n, n, density=density, format="csr", random_state=seed)


def test_a_new_kernel_runs_quick_code_then_its_optimised_build(fresh, held):
    A, x = _matrix(200, 0.05), np.arange(200.0)
    k = ta.compile(SPMV, formats={"A": "csr"})
    quick = k._default.kernel
    assert quick.pending and quick.optimised is not None
    np.testing.assert_allclose(k(A=A, x=x), A @ x)
    assert quick.pending, "a small call must not wait for the optimised build"
    optimised = quick.settled()
    assert not quick.pending and optimised is not quick
    assert optimised.source == ""          # no IR text printed off the main thread
    # The quick entry now calls the optimised code: the same call, through the quick kernel.
    np.testing.assert_allclose(k(A=A, x=x), A @ x)
    assert k._default.kernel is quick       # callers keep the quick addresses
    text = k.source("llvm")                 # optimised again and printed here
    assert "define" in text and ".quick" not in text


def test_a_large_call_waits_for_the_optimised_build(fresh, held, monkeypatch):
    monkeypatch.setattr(api, "QUICK_WORK", 10_000)
    A, x = _matrix(300, 0.2), np.ones(300)        # ~18000 stored entries: above the bound
    k = ta.compile(SPMV, formats={"A": "csr"})
    assert k._default.kernel.pending
    np.testing.assert_allclose(k(A=A, x=x), A @ x)
    assert not k._default.kernel.pending


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("statement, formats, make", [
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, lambda A, r: {"A": A, "B": r((A.shape[1], 16))}),
    ("C(i,j) = A(i,j) + B(i,j)", {"A": "csr", "B": "csr", "C": "csr"},
     lambda A, r: {"A": A, "B": A.T.tocsr()}),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"},
     lambda A, r: {"A": A, "B": A.T.tocsr()}),
    ("C(i,j) = A(i,k) * B(k,j)", {}, lambda A, r: {"A": A.toarray(), "B": r((A.shape[1], 9))}),
])
def test_quick_and_optimised_code_agree(fresh, held, statement, formats, make, dtype):
    rng = np.random.default_rng(3)
    A = _matrix(120, 0.08, seed=4).astype(dtype)
    ops = make(A, lambda shape: rng.integers(-3, 4, shape).astype(dtype))
    k = ta.compile(statement, formats=formats or None, dtype=dtype)
    assert k._default.kernel.pending
    before = k(**ops)
    assert k._default.kernel.pending
    k._default.kernel.settled()
    after = k(**ops)
    dense = lambda v: v.toarray() if hasattr(v, "toarray") else np.asarray(v)  # noqa: E731
    # The optimised code may sum in another order (vector lanes, fused multiply-adds): the
    # floats agree to rounding, the integers exactly.
    if np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(dense(before), dense(after))
    else:
        tolerance = 1e-4 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(dense(before), dense(after), rtol=tolerance, atol=tolerance)
    reference = {name: dense(v).astype(np.float64) for name, v in ops.items()}
    expected = reference["A"] @ reference["B"] if "*" in statement else \
        reference["A"] + reference["B"]
    np.testing.assert_allclose(dense(after), expected, rtol=1e-4, atol=1e-4)


def test_quick_code_on_threads_then_swapped(fresh, held, monkeypatch):
    """Thread ranges on the native pool hold the quick entry's address: they run the quick code
    first and the optimised code after the swap, exactly both times."""
    monkeypatch.setattr(api, "QUICK_WORK", 1 << 40)
    threads = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        A, B = _matrix(4000, 0.02, seed=5), np.random.default_rng(0).random((4000, 8))
        k = ta.compile("Y(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
        expected = A @ B
        np.testing.assert_allclose(k(A=A, B=B), expected)
        assert k._default.kernel.pending
        k._default.kernel.settled()
        np.testing.assert_allclose(k(A=A, B=B), expected)
    finally:
        ta.set_num_threads(threads)


def test_einsum_records_its_replay_only_once_optimised(fresh, held):
    A, x = _matrix(50, 0.1, seed=6), np.arange(50.0)
    np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x)
    assert not fresh.dispatch, "a replay skips the size check: not recorded on quick code"
    assert tiered.finish(timeout=120)
    np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x)
    assert fresh.dispatch
    np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x)


def test_the_optimised_build_goes_into_the_disk_cache(tmp_path, monkeypatch, held):
    first = api.KernelCache(api.CompileOptions(cache_dir=tmp_path, quick_builds=True))
    monkeypatch.setattr(api, "_cache", first)
    A, x = _matrix(40, 0.2, seed=7), np.ones(40)
    ta.compile(SPMV, formats={"A": "csr"})(A=A, x=x)
    # A second cache on the same directory, while the first build is still queued: it waits
    # for that build instead of compiling the kernel again.
    second = api.KernelCache(api.CompileOptions(cache_dir=tmp_path, quick_builds=True))
    monkeypatch.setattr(api, "_cache", second)
    k = ta.compile(SPMV, formats={"A": "csr"})
    assert not k._default.kernel.pending and second.compiles == 0
    np.testing.assert_allclose(k(A=A, x=x), A @ x)
    third = api.KernelCache(api.CompileOptions(cache_dir=tmp_path, quick_builds=True))
    monkeypatch.setattr(api, "_cache", third)
    k = ta.compile(SPMV, formats={"A": "csr"})
    assert k._default.kernel.from_cache and third.compiles == 0


def test_optimised_only_and_the_switch(fresh, monkeypatch):
    with tiered.optimised_only():
        k = ta.compile("y(i) = A(i,j) * x(j) + x(i)", formats={"A": "csr"})
    assert k._default.kernel.optimised is None
    assert not api.CompileOptions.from_environment({"TENSORALG_QUICK_BUILDS": "0"}).quick_builds
    assert api.CompileOptions.from_environment({}).quick_builds


def test_bound_calls_and_autotune_run_optimised_code(fresh, held):
    A, x = _matrix(60, 0.1, seed=8), np.arange(60.0)
    k = ta.compile(SPMV, formats={"A": "csr"})
    call = k.bind(A=A, x=x)
    # the kernel the call runs: the default one, or the variant its matrix's rows pick
    assert call.owner.optimised is None or not call.owner.pending
    assert call.owner.name in {p.kernel.name for p in fresh.kernels.values()}
    np.testing.assert_allclose(call(), A @ x)
    result = ta.autotune("ij,jk->ik", [A, np.ones((60, 3))], budget_s=5, max_trials=2,
                         store=False, progress=False)
    tuned = [p for p in fresh.kernels.values() if p.key.statement != k._default.key.statement]
    assert tuned and all(not p.kernel.pending for p in tuned), result


def test_a_failed_optimised_build_leaves_the_quick_code_running(fresh, held, monkeypatch):
    from tensoralg.codegen import llvm

    def broken(*args, **kwargs):
        raise RuntimeError("no optimiser today")

    monkeypatch.setattr(llvm, "compile_object", broken)
    A, x = _matrix(30, 0.2, seed=9), np.ones(30)
    k = ta.compile(SPMV, formats={"A": "csr"})
    with pytest.warns(RuntimeWarning, match="keeps running unoptimised"):
        k._default.kernel.settled()
    assert not k._default.kernel.pending and k._default.kernel.optimised.kernel is None
    np.testing.assert_allclose(k(A=A, x=x), A @ x)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin",
                    reason="fork semantics of Linux")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_forked_child_makes_the_builds_still_queued(fresh, held):
    A, x = _matrix(50, 0.1, seed=10), np.arange(50.0)
    k = ta.compile(SPMV, formats={"A": "csr"})
    assert k._default.kernel.pending
    pid = os.fork()
    if pid == 0:   # the child: its own worker makes the build the parent had queued
        code = 1
        try:
            ok = np.allclose(k(A=A, x=x), A @ x) and tiered.finish(timeout=120) and \
                not k._default.kernel.pending and np.allclose(k(A=A, x=x), A @ x)
            code = 0 if ok else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert k._default.kernel.pending          # the parent's build is still its own to make


def test_a_dense_product_compiles_its_loop_nest_only_when_a_call_needs_it(fresh):
    k = ta.compile("C(i,j) = A(i,k) * B(k,j)")
    assert fresh.compiles == 0                       # BLAS may take every call
    large = np.arange(64 * 64, dtype=np.float64).reshape(64, 64) % 7
    np.testing.assert_allclose(k(A=large, B=large), large @ large)
    assert fresh.compiles == 0                       # 64^3: BLAS took it
    small = large[:5, :6]
    np.testing.assert_allclose(k(A=small, B=small.T), small @ small.T)
    assert fresh.compiles == 1                       # the loop nest, for a small product
    assert "for" in k.source("ir")


def test_a_kernel_compiled_inside_optimised_builds_stays_optimised_later(fresh):
    with ta.optimised_builds():
        k = ta.compile("C(i,j) = A(i,k) * B(k,j)")
        s = ta.compile(SPMV, formats={"A": "csr"})
    small = np.ones((4, 3))
    np.testing.assert_allclose(k(A=small, B=small.T), small @ small.T)   # compiled now
    assert k._default.kernel.optimised is None
    # int64 indices: a second program of the same kernel, compiled at this call
    A = _matrix(20, 0.3, seed=11)
    A64 = A.copy()
    A64.indices, A64.indptr = A.indices.astype(np.int64), A.indptr.astype(np.int64)
    np.testing.assert_allclose(s(A=A64, x=np.ones(20)), A64 @ np.ones(20))
    later = [p for p in s._programs.values() if p is not s._default]
    assert later and all(p.kernel.optimised is None for p in later)


@pytest.mark.parametrize("timeout", [-1, "1", True, float("nan")])
def test_wait_for_optimised_refuses_a_timeout_that_is_not_seconds(timeout):
    with pytest.raises(ta.InputError, match="timeout"):
        ta.wait_for_optimised(timeout)


def test_the_background_build_prints_no_module(fresh, monkeypatch):
    """LLVM's module printer switches the process's C locale while it runs: Python code on
    another thread then saw "ascii" as the locale's encoding. The background build must not
    print a module (codegen/llvm.compile_object)."""
    import threading

    import llvmlite.binding as llvm

    printed = []
    original = llvm.ModuleRef.__str__

    def spy(module):
        printed.append(threading.current_thread().name)
        return original(module)

    monkeypatch.setattr(llvm.ModuleRef, "__str__", spy)
    A, x = _matrix(40, 0.2, seed=12), np.ones(40)
    k = ta.compile(SPMV, formats={"A": "csr"})
    assert tiered.finish(timeout=120) and not k._default.kernel.pending
    np.testing.assert_allclose(k(A=A, x=x), A @ x)
    assert "tensoralg-optimise" not in printed, printed
