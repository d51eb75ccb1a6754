"""Outputs: ``out=`` that overlaps an operand, the memory limit on dense outputs and
temporaries, and the inferred format of a result whose operands are converted first."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta


@pytest.fixture
def limit():
    """Restore the default memory limit after a test that sets one."""
    yield ta.set_memory_limit
    ta.set_memory_limit(None)


@pytest.mark.parametrize("n", [4, 70])           # the loop nest, and the BLAS route
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_out_that_is_an_operand_gives_numpys_answer(n, dtype):
    rng = np.random.default_rng(n)
    a = rng.integers(-5, 5, (n, n)).astype(dtype)
    b = rng.integers(-5, 5, (n, n)).astype(dtype)
    expected = a @ b
    for _ in range(3):                    # the first call and the remembered ones
        into = b.copy()
        got = ta.einsum("ij,jk->ik", a, into, out=into)
        assert got is into
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    square = a.copy()
    got = ta.einsum("ij->ji", square, out=square)
    assert got is square
    np.testing.assert_array_equal(got, a.T)


def test_out_overlapping_through_a_view_and_a_sparse_operand():
    rng = np.random.default_rng(1)
    buffer = rng.standard_normal((6, 6))
    a, x = buffer.copy(), buffer[0].copy()
    got = ta.einsum("ij,j->i", a, buffer[0], out=buffer[0])    # reads and writes row 0
    np.testing.assert_allclose(got, a @ x, rtol=1e-12)
    # A CSR matrix whose values live in the output buffer.
    m = sp.random_array((30, 30), density=0.02, format="csr", random_state=2)
    storage = np.arange(1.0, 31.0)
    shared = sp.csr_array((storage[: m.nnz], m.indices, m.indptr), shape=m.shape)
    expected = shared.copy() @ np.arange(30.0)
    got = ta.einsum("ij,j->i", shared, np.arange(30.0), out=storage)
    assert got is storage
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_outputs_that_do_not_overlap_are_written_in_place():
    a, b = np.ones((5, 5)), np.ones((5, 5))
    out = np.full((5, 5), np.nan)
    assert ta.einsum("ij,jk->ik", a, b, out=out) is out
    np.testing.assert_array_equal(out, np.full((5, 5), 5.0))


def test_a_dense_output_over_the_limit_is_refused_before_it_is_allocated(limit):
    n = 200_000
    rng = np.random.default_rng(0)
    A = sp.csr_array((np.ones(100), (rng.integers(0, n, 100), rng.integers(0, n, 100))),
                     shape=(n, n))
    with pytest.raises(ta.MemoryLimitError, match=r"298\.0 GiB .*out_format='csr'"):
        ta.compile("C(i,j) = A(i,j) + A(j,i)", formats={"A": "csr", "C": "dense"})(A=A)
    with pytest.raises(MemoryError):          # also what NumPy users catch
        ta.einsum("i,j->ij", np.ones(n), np.ones(n))
    limit("64K")
    assert ta.get_memory_limit() == 65536
    with pytest.raises(ta.MemoryLimitError, match="over the memory limit of 64.0 KiB"):
        ta.einsum("ik,kj->ij", np.ones((100, 2)), np.ones((2, 100)))   # BLAS route, 78 KiB
    x = np.ones(100)
    ta.einsum("i,j->ij", x[:50], x[:50])                              # 20 KiB: fine
    with pytest.raises(ta.MemoryLimitError):                          # the remembered route
        ta.einsum("i,j->ij", x, x)
    # A sparse result of the same product is not limited.
    assert ta.einsum("ij,jk->ik", sp.eye_array(n, format="csr"), sp.eye_array(n, format="csr")
                     ).nnz == n


@pytest.mark.parametrize("bad", [0, -1, "lots", 1.5, True])
def test_bad_memory_limits_are_refused(limit, bad):
    with pytest.raises(ta.InputError):
        limit(bad)


def test_the_environment_sets_the_default(monkeypatch):
    from tensoralg.runtime import memory

    monkeypatch.setenv("TENSORALG_MEMORY_LIMIT", "3M")
    ta.set_memory_limit(None)
    try:
        assert ta.get_memory_limit() == 3 * 2 ** 20
    finally:
        monkeypatch.delenv("TENSORALG_MEMORY_LIMIT")
        ta.set_memory_limit(None)
    # back to the default: half the memory available (which moves a little between reads)
    half = memory.available_memory() // 2
    assert abs(memory.memory_limit() - half) < max(half // 10, 2 ** 20)


@pytest.mark.parametrize("statement", ["C(i,j) = A(i,j) + A(j,i)", "C(i,j) = A(j,i) + A(i,j)",
                                       "C(i,j) = A(i,j) * A(j,i)"])
def test_terms_read_through_a_conversion_keep_a_sparse_result(statement):
    rng = np.random.default_rng(7)
    n = 60
    A = sp.random_array((n, n), density=0.05, format="csr", random_state=rng)
    got = ta.compile(statement, formats={"A": "csr"})(A=A)
    assert sp.issparse(got)        # was a dense n x n array: 1.4 GB at 13436^2
    dense_a = A.toarray()
    expected = dense_a * dense_a.T if "*" in statement else dense_a + dense_a.T
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-12)


def test_kernels_take_operands_by_position_in_the_statements_order():
    k = ta.compile("y(i) = x(j) * A(i,j)", formats={"A": "csr"})
    A = sp.random_array((5, 4), density=0.5, format="csr", random_state=1)
    x = np.arange(4.0)
    np.testing.assert_allclose(k(x, A), A @ x, rtol=1e-12)
    np.testing.assert_allclose(k(x, A=A), A @ x, rtol=1e-12)
    with pytest.raises(ta.ShapeError, match="given both by position and by name"):
        k(x, x=x, A=A)
    with pytest.raises(ta.ShapeError, match="takes 2 operand"):
        k(x, A, A)


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("threads", [1, 2])
def test_mttkrp_on_csf_returns_dense_rows_under_compressed_ones(backend, threads):
    """No compressed level iterates r, so the output's second level is dense (``sd``), not
    ``ss`` (issue 18); rows of T without entries are absent, rows with them hold all of r."""
    rng = np.random.default_rng(7)
    dense = rng.random((40, 12, 9)) * (rng.random((40, 12, 9)) < 0.15)
    dense[[0, 5, 39]] = 0.0                          # empty slices, first and last included
    T = ta.Tensor.from_numpy(dense, "csf")
    B, C = rng.random((12, 5)), rng.random((9, 5))
    expected = np.einsum("ijk,jr,kr->ir", dense, B, C)
    previous = ta.get_num_threads()
    ta.set_num_threads(threads)
    try:
        for _ in range(2):                               # the second call takes the fast path
            got = ta.einsum("ijk,jr,kr->ir", T, B, C, backend=backend)
            assert isinstance(got, ta.Tensor) and got.format.spec == "sd"
            np.testing.assert_allclose(got.to_numpy(), expected)
        kernel = ta.compile("M(i,r) = T(i,j,k) * B(j,r) * C(k,r)", formats={"T": "csf"},
                            backend=backend)
        got = kernel(T=T, B=B, C=C)
        assert got.format.spec == "sd"
        assert got.levels[0].crd.size == np.count_nonzero(np.abs(dense).sum(axis=(1, 2)))
        np.testing.assert_allclose(got.to_numpy(), expected)
        asked = ta.einsum("ijk,jr,kr->ir", T, B, C, out_format="ss", backend=backend)
        assert asked.format.spec == "ss"                 # what is asked for is kept
        np.testing.assert_allclose(asked.to_numpy(), expected)
    finally:
        ta.set_num_threads(previous)
