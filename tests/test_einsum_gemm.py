"""Dense matrix products from ta.einsum and compiled kernels: the BLAS, generated-GEMM and
loop-nest routes (lower/gemm_form.py), chosen by default or by a schedule's gemm(...)."""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.lower.gemm_form import GEMM_MIN_FMAS, GemmForm, gemm_form, gemm_route
from tensoralg.notation import parse_statement
from tensoralg.schedule import GemmRoute, Schedule


@pytest.mark.parametrize("statement, expected", [
    ("C(i,j) = A(i,k) * B(k,j)", GemmForm("A", False, "B", False)),
    ("C(i,j) = A(k,i) * B(j,k)", GemmForm("A", True, "B", True)),
    ("C(i,j) = B(k,j) * A(i,k)", GemmForm("A", False, "B", False)),
    ("C(i,j) = A(i,k) * A(k,j)", GemmForm("A", False, "A", False)),
    ("C(i,j) = A(i,k) * B(k,j) * 2", None),
    ("C(i,j) = A(i,k) * B(k,j) + D(i,j)", None),
    ("C(i,j) = A(i,j) * B(i,j)", None),
    ("c(i) = A(i,k) * b(k)", None),
    ("C(i,j,l) = A(i,k) * B(k,j,l)", None),
])
def test_which_statements_are_matrix_products(statement, expected):
    assert gemm_form(parse_statement(statement)) == expected


@pytest.mark.parametrize("subscripts, transpose_a, transpose_b", [
    ("ik,kj->ij", False, False), ("ki,kj->ij", True, False),
    ("ik,jk->ij", False, True), ("ki,jk->ij", True, True), ("ij,jk", False, False)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("schedule", [None, "gemm(blas)", "gemm(generated)", "gemm(loops)"])
def test_einsum_products_match_numpy(subscripts, transpose_a, transpose_b, dtype, schedule):
    rng = np.random.default_rng(0)
    m, k, n = 70, 65, 90              # above the threshold, ragged against every tile
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    got = ta.einsum(subscripts, a, b, schedule=schedule)
    expected = np.einsum(subscripts, a.astype(np.float64), b.astype(np.float64))
    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4 if dtype == np.float32 else 1e-10,
                               atol=1e-4 if dtype == np.float32 else 1e-10)


def test_out_and_zero_sized_products():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((80, 70)), rng.standard_normal((70, 60))
    out = np.empty((80, 60))
    assert ta.einsum("ik,kj->ij", a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-10)
    assert ta.einsum("ik,kj->ij", np.ones((0, 70)), b).shape == (0, 60)
    np.testing.assert_array_equal(ta.einsum("ik,kj->ij", np.ones((80, 0)), np.ones((0, 60))),
                                  np.zeros((80, 60)))


def test_compiled_kernels_take_the_same_route_and_say_so():
    k = ta.compile("C(i,j) = A(i,k) * B(k,j)")
    assert "run on BLAS" in k.source("ir") and "at least" in k.source("ir")
    scheduled = ta.compile("C(i,j) = A(i,k) * B(k,j)", schedule="jam(4)")
    assert "BLAS" not in scheduled.source("ir") and "GEMM" not in scheduled.source("ir")
    generated = ta.compile("C(i,j) = A(i,k) * B(k,j)", schedule="gemm(generated)")
    assert "run on the generated GEMM" in generated.source("ir")
    assert "gemm(generated)" in str(generated.schedule)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((90, 80)), rng.standard_normal((80, 70))
    for kernel in (k, scheduled, generated):
        np.testing.assert_allclose(kernel(A=a, B=b), a @ b, rtol=1e-10)
    with pytest.raises(ta.ShapeError):
        k(A=a, B=np.ones((79, 70)))
    small = np.ones((4, 4))
    np.testing.assert_array_equal(k(A=small, B=small), small @ small)   # the loop nest
    np.testing.assert_array_equal(generated(A=small, B=small), small @ small)


def test_the_route_a_schedule_names():
    assert gemm_route(None) is None
    assert gemm_route(Schedule().jam(4)) is GemmRoute.LOOPS
    assert gemm_route(Schedule.parse("gemm(blas); jam(2); gemm(generated)")) is \
        GemmRoute.GENERATED
    assert str(Schedule().gemm("blas")) == "gemm(blas)"
    with pytest.raises(ta.NotationError, match="not one of blas, generated, loops"):
        Schedule.parse("gemm(fast)")


def test_blas_writes_into_out_and_handles_empty_products():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((100, 90)), rng.standard_normal((90, 80))
    out = np.full((100, 80), np.nan)
    assert ta.einsum("ik,kj->ij", a, b, out=out, schedule="gemm(blas)") is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    empty = ta.einsum("ik,kj->ij", np.ones((3, 0)), np.ones((0, 4)), schedule="gemm(blas)")
    np.testing.assert_array_equal(empty, np.zeros((3, 4)))
    assert ta.einsum("ik,kj->ij", np.ones((0, 5)), np.ones((5, 4)),
                     schedule="gemm(blas)").shape == (0, 4)


def test_an_explicit_route_that_cannot_run_is_refused():
    import scipy.sparse as sp

    s = sp.random_array((100, 100), density=0.1, format="csr", random_state=3)
    dense = np.ones((100, 100))
    with pytest.raises(ta.UnsupportedError, match="operand A is stored csr"):
        ta.einsum("ik,kj->ij", s, dense, schedule="gemm(blas)")
    with pytest.raises(ta.UnsupportedError, match="int64"):
        ta.einsum("ik,kj->ij", dense.astype(np.int64), dense.astype(np.int64),
                  schedule="gemm(generated)")
    with pytest.raises(ta.UnsupportedError, match="not a matrix product"):
        ta.einsum("ij,ij->ij", dense, dense, schedule="gemm(blas)")
    with pytest.raises(ta.UnsupportedError, match="stored csr"):
        ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr"}, schedule="gemm(blas)")
    with pytest.raises(ta.UnsupportedError, match="output is sparse"):
        ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"C": "csr"}, schedule="gemm(blas)")


def test_integer_and_sparse_products_keep_the_loop_nest():
    import scipy.sparse as sp

    a = np.arange(100 * 100, dtype=np.int64).reshape(100, 100) % 7
    np.testing.assert_array_equal(ta.einsum("ik,kj->ij", a, a), a @ a)
    s = sp.random_array((100, 100), density=0.1, format="csr", random_state=3)
    np.testing.assert_allclose(ta.einsum("ik,kj->ij", s, a.astype(float)), s @ a, rtol=1e-10)
    assert 100 ** 3 >= GEMM_MIN_FMAS
