"""ta.Tensor as an array (tensoralg/arrays.py): operators and NumPy's protocols, compiled
through the core, checked against NumPy on the densified operands."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta


def _dense(x):
    return x.to_numpy() if isinstance(x, ta.Tensor) else np.asarray(x)


@pytest.fixture(params=["csr", "csc", "coo", "dcsr"])
def pair(request):
    rng = np.random.default_rng(0)
    m = sp.random_array((6, 5), density=0.35, format="csr", random_state=1).toarray()
    m[2] = 0                                                    # an all-zero row
    n = rng.integers(-3, 4, (6, 5)) * (rng.random((6, 5)) < 0.4)
    return (ta.Tensor.from_numpy(m, request.param), m,
            ta.Tensor.from_numpy(n.astype(float), request.param), n.astype(float))


def test_elementwise_operators(pair):
    A, a, B, b = pair
    for got, expected in [(A + B, a + b), (A - B, a - b), (A * B, a * b), (A * 2.5, a * 2.5),
                          (3 * A, 3 * a), (-A, -a), (A + 0, a), (A + b, a + b), (b - A, b - a),
                          (b * A, b * a), (np.add(A, B), a + b), (np.multiply(A, b), a * b),
                          (np.negative(A), -a)]:
        np.testing.assert_allclose(_dense(got), expected, rtol=1e-12)
    assert isinstance(A * B, ta.Tensor) and isinstance(A + b, np.ndarray)   # sparse, dense


def test_products_transposes_and_sums(pair):
    A, a, B, b = pair
    x = np.arange(5.0)
    for got, expected in [(A @ x, a @ x), (np.ones(6) @ A, np.ones(6) @ a), (A @ B.T, a @ b.T),
                          (A.T, a.T), (A.transpose(), a.T), (A.transpose((1, 0)), a.T),
                          (np.transpose(A), a.T), (A.sum(), a.sum()), (A.sum(axis=0), a.sum(0)),
                          (A.sum(1), a.sum(1)), (np.sum(A, axis=1), a.sum(1)),
                          (np.einsum("ij,ij->i", A, B), np.einsum("ij,ij->i", a, b)),
                          (np.matmul(A, x), a @ x)]:
        np.testing.assert_allclose(_dense(got), expected, rtol=1e-12, atol=1e-12)


def test_reshape_astype_and_conversion_to_numpy(pair):
    A, a, _, _ = pair
    for shape in [(5, 6), (30,), (-1,), (2, 3, 5), (3, -1)]:
        got = A.reshape(shape)
        assert got.shape == a.reshape(shape).shape
        np.testing.assert_array_equal(_dense(got), a.reshape(shape))
    np.testing.assert_array_equal(np.asarray(A), a)
    assert (np.shape(A), np.ndim(A), np.size(A)) == (a.shape, a.ndim, a.size)
    assert np.asarray(A, dtype=np.float32).dtype == np.float32
    assert A.astype(np.float32).dtype == np.float32


def test_elementwise_functions_keep_or_fill_zeros(pair):
    A, a, _, _ = pair
    np.testing.assert_allclose(_dense(np.sqrt(A * A)), np.abs(a), rtol=1e-12)
    np.testing.assert_allclose(_dense(np.abs(-A)), np.abs(a), rtol=1e-12)
    np.testing.assert_allclose(_dense(np.exp(A)), np.exp(a), rtol=1e-12)    # dense: exp(0) = 1
    np.testing.assert_allclose(_dense(np.sin(A)), np.sin(a), rtol=1e-12)


def test_empty_and_integer_tensors():
    z = ta.Tensor.from_numpy(np.zeros((0, 3)), "csr")
    assert (z + z).shape == (0, 3) and z.sum(axis=0).tolist() == [0.0, 0.0, 0.0]
    i = ta.Tensor.from_numpy(np.array([[1, 0], [0, 2]], dtype=np.int64), "csr")
    assert (i * i).dtype == np.int64
    np.testing.assert_array_equal(_dense(i * i), [[1, 0], [0, 4]])


def test_what_is_refused_says_why():
    A = ta.Tensor.from_numpy(np.eye(3), "csr")
    with pytest.raises(ta.UnsupportedError, match="would be dense"):
        A + 1
    with pytest.raises(ta.ShapeError, match="does not broadcast"):
        A + np.ones((3, 1))
    with pytest.raises(ta.ShapeError, match="not a permutation"):
        A.transpose((0, 0))
    with pytest.raises(ta.ShapeError, match="cannot reshape"):
        A.reshape(4, 2)
    with pytest.raises(ta.UnsupportedError, match="vectors and matrices"):
        A @ np.ones((3, 3, 3))
    with pytest.raises(TypeError):
        np.cumsum(A)             # not one of the functions the protocol takes: NumPy's error
