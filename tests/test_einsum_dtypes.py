"""ta.einsum on the value dtypes kernels do not compute in (runtime/widen.py): bool, 8- to
32-bit and unsigned integers, float16 — NumPy's result dtype and NumPy's numbers, wrap-around
included, on dense and sparse operands and both CPU backends."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

NARROW = [np.bool_, np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64, np.float16]
CALLS = [("ij,jk->ik", 2), ("ij->", 1), ("ij,ij->i", 2), ("ij->ji", 1), ("ij,j->i", 2),
         ("i,j->ij", 2)]


def _operands(subscripts, dtype, rng):
    inputs = subscripts.split("->")[0].split(",")
    shapes = {"i": 5, "j": 7, "k": 3}
    high = 2 if dtype is np.bool_ else 120        # products and sums that wrap at 8 bits
    return [rng.integers(0, high, tuple(shapes[c] for c in term)).astype(dtype)
            for term in inputs]


@pytest.mark.parametrize("dtype", NARROW)
@pytest.mark.parametrize("subscripts, count", CALLS)
@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_narrow_dtypes_give_numpys_dtype_and_numbers(dtype, subscripts, count, backend):
    rng = np.random.default_rng(count)
    operands = _operands(subscripts, dtype, rng)
    got = ta.einsum(subscripts, *operands, backend=backend)
    with np.errstate(over="ignore"):
        expected = np.einsum(subscripts, *operands)
    assert np.asarray(got).dtype == expected.dtype
    if dtype is np.float16:
        np.testing.assert_allclose(np.asarray(got, np.float64), expected.astype(np.float64),
                                   rtol=2e-3)
    else:
        np.testing.assert_array_equal(got, expected)      # wrapped exactly as NumPy wraps


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.bool_, np.uint64])   # scipy has no float16
def test_narrow_sparse_operands_keep_scipys_family_and_dtype(dtype):
    A = sp.random_array((6, 6), density=0.4, format="csr", random_state=1)
    A = (A * 50).astype(dtype)
    got = ta.einsum("ij,jk->ik", A, A)
    expected = A @ A
    assert sp.issparse(got) and got.dtype == expected.dtype
    np.testing.assert_array_equal(got.toarray(), expected.toarray())
    x = np.arange(6).astype(dtype)
    np.testing.assert_array_equal(ta.einsum("ij,j->i", A, x), np.einsum("ij,j->i", A.toarray(), x))


def test_sparse_result_of_float16_stays_float32_with_a_warning():
    """A sparse (scipy) result that NumPy's rules make float16, which scipy cannot hold: the
    float32 values come back, and a warning says why (scipy raised ValueError before)."""
    A = sp.csr_array(np.eye(3, dtype=np.uint8))
    with pytest.warns(UserWarning, match="scipy cannot hold float16 values here"):
        got = ta.einsum("ij,ij->ij", A, np.full((3, 3), 2, np.float16))
    assert sp.issparse(got) and got.dtype == np.float32
    np.testing.assert_array_equal(got.toarray(), 2 * np.eye(3))


def test_sparse_result_that_cannot_be_narrow_keeps_numpys_values():
    """A rank-3 sparse result (a ta.Tensor, which holds no uint8) of uint8 operands: stored as
    int64, with the values wrapped as NumPy's uint8 product wraps them (found by fuzzing:
    253 * 254 came back as 64262 where NumPy gives 6)."""
    a = np.array([[253, 0], [0, 2]], np.uint8)
    b = sp.csr_matrix(np.array([[254, 0], [0, 3]], np.uint8))
    with pytest.warns(UserWarning, match="cannot hold uint8 values here"):
        got = ta.einsum("ij,jk->ijk", a, b)
    np.testing.assert_array_equal(got.to_numpy(), np.einsum("ij,jk->ijk", a, b.toarray()))


@pytest.mark.parametrize("values, dtype", [([True, True], np.bool_), ([200, 200], np.uint8)])
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_duplicate_entries_add_up_in_their_own_dtype(values, dtype, layout):
    """Two stored entries at one position are one value of the matrix's own dtype (True,
    or 144 after uint8 wraps), as scipy's toarray gives, before being widened for the
    product (they were added after widening: 2, 400)."""
    A = sp.coo_matrix((np.array(values, dtype), ([0, 0], [1, 1])), shape=(2, 3))
    A = A if layout == "coo" else sp.csr_matrix((A.data, A.col, [0, 2, 2]), shape=(2, 3))
    b = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(ta.einsum("ij,jk->ik", A, b),
                                  np.einsum("ij,jk->ik", A.toarray(), b))


@pytest.mark.parametrize("sparse_factor", [False, True])
def test_steps_of_mixed_dtypes_compute_in_the_common_type(sparse_factor):
    """Three operands contracted in two steps: a uint8 and a bool factor contracted first
    used to make a uint8 intermediate that wrapped (200 * 2 -> 144); NumPy's einsum computes
    the whole expression in the common type (found by fuzzing, 2026-12-07)."""
    a = np.full((3, 4), 200, np.uint8)
    b = np.ones((4, 2), bool)
    c = np.arange(1, 7, dtype=np.complex128).reshape(2, 3)
    first = sp.coo_matrix(a) if sparse_factor else a
    want = np.einsum("ij,jk,ki->", a, b, c)
    np.testing.assert_allclose(ta.einsum("ij,jk,ki->", first, b, c), want)
    np.testing.assert_allclose(ta.einsum("ij,jk,ki->", first, b, c), want)   # a replay


def test_mixed_dtypes_promote_as_numpy_does():
    a8, a16, u64, i64 = (np.arange(6).reshape(2, 3).astype(t)
                         for t in (np.int8, np.float16, np.uint64, np.int64))
    for x, y in [(a8, a16), (a8, i64), (u64, i64), (u64, u64), (a8, a8.astype(np.uint8))]:
        got, expected = ta.einsum("ij,ij->i", x, y), np.einsum("ij,ij->i", x, y)
        assert got.dtype == expected.dtype, (x.dtype, y.dtype)
        np.testing.assert_allclose(got.astype(float), expected.astype(float), rtol=1e-3)


def test_dtype_and_out_arguments_in_narrow_dtypes():
    a = np.arange(12).reshape(3, 4)
    got = ta.einsum("ij,ij->i", a, a, dtype=np.int8, casting="unsafe")
    with pytest.raises(TypeError):                       # NumPy's "safe" rule, by default
        ta.einsum("ij,ij->i", a, a, dtype=np.int8)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, np.einsum("ij,ij->i", a, a).astype(np.int8))
    out = np.zeros(3, np.int16)
    assert ta.einsum("ij,ij->i", a.astype(np.int16), a.astype(np.int16), out=out) is out
    np.testing.assert_array_equal(out, np.einsum("ij,ij->i", a, a))


def test_extended_precision_values_are_refused_with_the_reason():
    # complex64/complex128 compute natively (tests/test_einsum_complex.py); long double has
    # no kernel type, and is refused rather than silently rounded.
    with pytest.raises(ta.UnsupportedError, match="not support"):
        ta.einsum("ij->i", np.ones((2, 2), np.clongdouble))
