"""einsum's fast path: a repeated plain call replays the first call's decisions, and anything
unusual falls back to the general path with its checks and errors."""
import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.api import kernel_cache


def test_second_call_replays_and_agrees():
    A = sp.random_array((30, 20), density=0.2, format="csr", random_state=4)
    x = np.random.default_rng(1).standard_normal(20)
    first = ta.einsum("ij,j->i", A, x)
    assert any(key[0] == "ij,j->i" for key in kernel_cache().dispatch)
    second = ta.einsum("ij,j->i", A, x)
    np.testing.assert_allclose(second, A @ x)
    np.testing.assert_array_equal(first, second)


def test_fast_path_checks_sizes_and_falls_back_to_the_shape_error():
    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=2)
    ta.einsum("ij,j->i", A, np.ones(5))
    with pytest.raises(ta.ShapeError, match="index j"):
        ta.einsum("ij,j->i", A, np.ones(4))


def test_fast_path_canonicalizes_unsorted_scipy_input_on_a_copy():
    good = sp.random_array((5, 5), density=0.6, format="csr", random_state=3)
    ta.einsum("ij,j->i", good, np.ones(5))
    bad = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 1]), np.array([0, 3, 3, 3, 3, 3])),
                       shape=(5, 5))
    before = bad.indices.copy()
    got = ta.einsum("ij,j->i", bad, np.arange(5.0))
    np.testing.assert_allclose(got, bad.toarray() @ np.arange(5.0))
    np.testing.assert_array_equal(bad.indices, before)


def test_fast_path_rejects_corrupt_indices():
    A = sp.random_array((5, 5), density=0.6, format="csr", random_state=5)
    ta.einsum("ij,j->i", A, np.ones(5))
    broken = A.copy()
    broken.indices[0] = 99                       # out of range: must never be read
    broken._has_canonical_format = True          # scipy's cached flag cannot be trusted for bounds
    with pytest.raises(ta.FormatError):
        ta.einsum("ij,j->i", broken, np.ones(5))


def test_scalar_result_on_the_fast_path():
    x = np.arange(4.0)
    assert ta.einsum("i,i->", x, x) == ta.einsum("i,i->", x, x) == 14.0
    assert np.ndim(ta.einsum("i,i->", x, x)) == 0
