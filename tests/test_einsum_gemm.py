"""Dense matrix products from ta.einsum and compiled kernels run on the generated GEMM."""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.lower.gemm_form import GEMM_MIN_FMAS, GemmForm, gemm_form
from tensoralg.notation import parse_statement


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
def test_einsum_products_match_numpy(subscripts, transpose_a, transpose_b, dtype):
    rng = np.random.default_rng(0)
    m, k, n = 70, 65, 90              # above the threshold, ragged against every tile
    a = rng.standard_normal((k, m) if transpose_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if transpose_b else (k, n)).astype(dtype)
    got = ta.einsum(subscripts, a, b)
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
    assert "run on the generated GEMM" in k.source("ir")
    scheduled = ta.compile("C(i,j) = A(i,k) * B(k,j)", schedule="jam(4)")
    assert "generated GEMM" not in scheduled.source("ir")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((90, 80)), rng.standard_normal((80, 70))
    np.testing.assert_allclose(k(A=a, B=b), a @ b, rtol=1e-10)
    np.testing.assert_allclose(scheduled(A=a, B=b), a @ b, rtol=1e-10)
    with pytest.raises(ta.ShapeError):
        k(A=a, B=np.ones((79, 70)))
    small = np.ones((4, 4))
    np.testing.assert_array_equal(k(A=small, B=small), small @ small)   # the loop nest


def test_integer_and_sparse_products_keep_the_loop_nest():
    import scipy.sparse as sp

    a = np.arange(100 * 100, dtype=np.int64).reshape(100, 100) % 7
    np.testing.assert_array_equal(ta.einsum("ik,kj->ij", a, a), a @ a)
    s = sp.random_array((100, 100), density=0.1, format="csr", random_state=3)
    np.testing.assert_allclose(ta.einsum("ik,kj->ij", s, a.astype(float)), s @ a, rtol=1e-10)
    assert 100 ** 3 >= GEMM_MIN_FMAS
