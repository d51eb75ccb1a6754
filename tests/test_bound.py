"""Kernel.bind: the repeated-call fast path with fixed operands and output."""
from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import passes_in_forked_child, split_product

import tensoralg as ta
from tensoralg.api import kernel_cache


def test_bound_call_sees_new_contents_and_matches_call():
    k = ta.compile("Y(i,j) = max(A(i,j) + B(j), 0)", dtype=np.float32)
    a = np.zeros((3, 4), np.float32)
    b = np.zeros(4, np.float32)
    call = k.bind(A=a, B=b)
    rng = np.random.default_rng(0)
    for _ in range(3):
        a[...] = rng.standard_normal(a.shape)
        b[...] = rng.standard_normal(b.shape)
        np.testing.assert_array_equal(call(), k(A=a, B=b))
        np.testing.assert_allclose(call(), np.maximum(a + b, 0))


def test_bound_output_is_zeroed_between_calls():
    # A reduction accumulates into its output: a second call must not add to the first.
    k = ta.compile("y(i) = A(i,j) * x(j)")
    a, x = np.ones((2, 3)), np.ones(3)
    call = k.bind(A=a, x=x)
    call()
    np.testing.assert_array_equal(call(), [3.0, 3.0])


def test_bound_into_given_out_and_rebind():
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    a = sp.random(50, 40, density=0.2, format="csr", random_state=1)
    x = np.arange(40.0)
    out = np.empty(50)
    call = k.bind(out=out, A=a, x=x)
    assert call() is out
    np.testing.assert_allclose(out, a @ x)
    other = np.ones(40)
    call.rebind("x", other)
    np.testing.assert_allclose(call(), a @ other)


def test_bound_threaded_split_matches():
    # Large enough that the runtime splits the outer loop over the threads it has.
    k = ta.compile("Y(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"})
    rng = np.random.default_rng(2)
    a = sp.random(3000, 2000, density=0.2, format="csr", random_state=2)
    b = rng.standard_normal((2000, 16))
    call = k.bind(A=a, B=b)
    if kernel_cache().threads.threads > 1:
        assert len(call.calls) > 1
    np.testing.assert_allclose(call(), a @ b)
    b *= 2
    np.testing.assert_allclose(call(), a @ b)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_threaded_call_in_a_forked_child_does_not_hang(two_threads):
    # A forked child inherits the thread pool object but not its threads (multiprocessing's
    # default on Linux, data loader workers): work handed to the parent's pool would wait
    # forever. The child must start its own pool.
    call, want = split_product()
    np.testing.assert_allclose(call(), want)         # the parent's pool now exists
    passes_in_forked_child(lambda: np.allclose(call(), want))


@pytest.mark.parametrize("bad", [
    np.zeros((3, 4), np.float64),          # wrong dtype
    np.zeros((4, 3), np.float32).T,         # not C-contiguous
    [[0.0] * 4] * 3,                        # not an array
])
def test_bind_refuses_operands_it_would_have_to_copy(bad):
    k = ta.compile("Y(i,j) = A(i,j) + B(j)", dtype=np.float32)
    with pytest.raises(ta.ShapeError, match="operand A"):
        k.bind(A=bad, B=np.zeros(4, np.float32))


def test_bind_refuses_bad_out_and_bad_rebind():
    k = ta.compile("Y(i,j) = A(i,j) + B(j)", dtype=np.float32)
    a, b = np.zeros((3, 4), np.float32), np.zeros(4, np.float32)
    with pytest.raises(ta.ShapeError, match="out must be"):
        k.bind(out=np.zeros((4, 3), np.float32), A=a, B=b)
    call = k.bind(A=a, B=b)
    with pytest.raises(ta.ShapeError, match="shape"):
        call.rebind("A", np.zeros((2, 4), np.float32))
    with pytest.raises(ta.ShapeError, match="not a dense operand"):
        call.rebind("Z", a)


def test_bind_refuses_sparse_output_and_missing_operands():
    k = ta.compile("Y(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": "ds", "Y": "ds"})
    a = sp.random(5, 5, density=0.3, format="csr", random_state=3)
    with pytest.raises(ta.UnsupportedError, match="dense outputs"):
        k.bind(A=a, B=a)
    dense = ta.compile("Y(i,j) = A(i,j) + B(i,j)")
    with pytest.raises(ta.ShapeError, match="needs operand"):
        dense.bind(A=np.zeros((2, 2)))


def test_zeroing_is_skipped_only_when_every_element_is_assigned():
    dense = ta.compile("Y(i,j) = A(i,j) * B(i,j)", dtype=np.float32)
    a = np.ones((4, 5), np.float32)
    call = dense.bind(A=a, B=a)
    assert call.overwrites
    call.out[...] = 7.0            # stale contents are overwritten, not added to
    np.testing.assert_array_equal(call(), np.ones((4, 5)))
    # A sparse operand drives the loop: unvisited positions must read 0 on every call.
    masked = ta.compile("y(i) = a(i) * x(i)", formats={"a": "s"})
    vec = ta.Tensor.from_numpy(np.array([0.0, 2.0, 0.0, 3.0]), "s")
    x = np.arange(4.0)
    call = masked.bind(a=vec, x=x)
    assert not call.overwrites
    call.out[...] = 7.0
    np.testing.assert_array_equal(call(), [0.0, 2.0, 0.0, 9.0])
    reduction = ta.compile("y(i) = A(i,j) * x(j)").bind(A=np.ones((2, 3)), x=np.ones(3))
    reduction()                    # whether it assigns or accumulates, a second call agrees
    np.testing.assert_array_equal(reduction(), [3.0, 3.0])


def test_changing_the_thread_count_while_kernels_run():
    """set_num_threads from one thread while another runs split kernels: calls already
    running finish on the threads they started with (the pool was shut down under them:
    RuntimeError 'cannot schedule new futures after shutdown')."""
    import threading
    import time

    a = sp.random_array((2000, 2000), density=0.25, format="csr", random_state=0)
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    x = np.ones(2000)
    want = a @ x
    call = k.bind(A=a, x=x)
    errors, stop = [], threading.Event()

    def work():
        while not stop.is_set():
            try:
                np.testing.assert_allclose(call(), want)
                np.testing.assert_allclose(k(A=a, x=x), want)
            except Exception as err:  # noqa: BLE001 - collected and reported below
                errors.append(repr(err))

    before = ta.get_num_threads()
    worker = threading.Thread(target=work)
    worker.start()
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            ta.set_num_threads(2)          # the same count again, and then another
            time.sleep(0.001)
            ta.set_num_threads(3)
            time.sleep(0.001)
    finally:
        stop.set()
        worker.join()
        ta.set_num_threads(before)
    assert not errors, errors[:3]
