"""Call forms NumPy's einsum takes: broadcasting of size-1 dimensions (named and under an
ellipsis), array-likes, and empty subscripts with scalars."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

BROADCASTS = [
    ("ij,ij->j", (1, 4), (3, 4)),
    ("ij,ij->ij", (3, 1), (3, 4)),
    ("ij,ij->", (1, 1), (2, 3)),
    ("ij,jk->ik", (2, 1), (3, 2)),
    ("...j,...j->...", (2, 1, 4), (3, 4)),
    ("...ij,...jk->...ik", (1, 2, 3), (4, 3, 2)),
    ("i,i->i", (1,), (5,)),
]


@pytest.mark.parametrize("subscripts, shape_a, shape_b", BROADCASTS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_size_one_dimensions_broadcast_as_in_numpy(subscripts, shape_a, shape_b, dtype):
    rng = np.random.default_rng(len(subscripts))
    a = rng.integers(-5, 5, shape_a).astype(dtype)
    b = rng.integers(-5, 5, shape_b).astype(dtype)
    expected = np.einsum(subscripts, a, b)
    for _ in range(2):                                  # the first call and a repeated one
        got = ta.einsum(subscripts, a, b)
        assert np.shape(got) == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_a_broadcast_call_does_not_replay_into_a_call_of_full_shapes():
    rng = np.random.default_rng(1)
    full, row = rng.random((3, 4)), rng.random((1, 4))
    for a in (row, full, row, full):
        np.testing.assert_allclose(ta.einsum("ij,ij->j", a, full),
                                   np.einsum("ij,ij->j", a, full), rtol=1e-12)


def test_sparse_operands_do_not_broadcast():
    A = sp.random_array((1, 4), density=0.5, format="csr", random_state=0)
    with pytest.raises(ta.ShapeError):
        ta.einsum("ij,ij->j", A, np.ones((3, 4)))


def test_mismatched_sizes_other_than_one_are_still_refused():
    with pytest.raises(ta.ShapeError):
        ta.einsum("ij,ij->j", np.ones((2, 4)), np.ones((3, 4)))


def test_array_likes_and_scalars():
    assert ta.einsum("i,i", [1, 2], [3, 4]) == 11
    np.testing.assert_array_equal(ta.einsum("ij->ji", ((1.0, 2.0), (3.0, 4.0))),
                                  [[1.0, 3.0], [2.0, 4.0]])
    assert ta.einsum("", 3.0) == 3.0
    assert ta.einsum(",", 2.0, np.float32(3.0)) == 6.0
    assert ta.einsum(",i->i", 2, [1, 2]).tolist() == [2, 4]
    with pytest.raises(ta.NotationError, match="empty subscripts"):
        ta.einsum("", np.ones(3))


LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@pytest.mark.parametrize("count", [9, pytest.param(26, marks=pytest.mark.slow),
                                   pytest.param(52, marks=pytest.mark.slow)])
def test_up_to_52_index_letters(count):    # 26 and 52 nested loops take minutes to compile
    rng = np.random.default_rng(count)
    shape = tuple(2 if k < 6 else 1 for k in range(count))       # 64 elements at most
    a = rng.random(shape)
    b = rng.random(shape[:3])
    letters = LETTERS[:count]
    for subscripts in (f"{letters}->", f"{letters}->{letters[0]}",
                       f"{letters},{letters[:3]}->{letters[1]}{letters[-1]}"):
        ops = (a, b) if "," in subscripts else (a,)
        np.testing.assert_allclose(ta.einsum(subscripts, *ops), np.einsum(subscripts, *ops),
                                   rtol=1e-12)


def test_many_indices_with_a_sparse_operand():
    rng = np.random.default_rng(3)
    A = sp.random_array((6, 5), density=0.4, format="csr", random_state=4)
    dense = rng.random((5, 2, 1, 2, 1, 2, 1, 2, 1))
    subscripts = "ij,jklmnopqr->ikmr"
    np.testing.assert_allclose(ta.einsum(subscripts, A, dense),
                               np.einsum(subscripts, A.toarray(), dense), rtol=1e-12)
    At = A.tocsc()
    np.testing.assert_allclose(ta.einsum(subscripts, At, dense),
                               np.einsum(subscripts, A.toarray(), dense), rtol=1e-12)


def test_pydata_inputs_get_what_sparse_einsum_returns():
    sparse = pytest.importorskip("sparse")
    A = sparse.random((6, 6), density=0.4, random_state=0)
    d = np.ones((6, 6))
    for subscripts, operands in [("ij->", (A,)), ("ij,jk->ik", (A, d)), ("ij,jk->ik", (A, A)),
                                 ("ij->i", (A,)), ("ij,ij->ij", (A, d))]:
        got, expected = ta.einsum(subscripts, *operands), sparse.einsum(subscripts, *operands)
        assert type(got) is type(expected), subscripts
        np.testing.assert_allclose(got.todense(), expected.todense(), rtol=1e-12)


def test_letters_past_the_52_ascii_ones():
    rng = np.random.default_rng(5)
    x, y, z = rng.random((3, 4)), rng.random((4, 5)), rng.random(5)
    np.testing.assert_allclose(ta.einsum("αβ,βγ,γ->α", x, y, z), x @ y @ z, rtol=1e-12)
    np.testing.assert_allclose(ta.einsum("αβ,βγ->αγ", x, y, optimize=False), x @ y, rtol=1e-12)


def test_a_remembered_blas_product_checks_every_later_call():
    rng = np.random.default_rng(6)
    a, b = rng.random((80, 70)), rng.random((70, 90))
    for _ in range(2):
        np.testing.assert_allclose(ta.einsum("ik,kj->ij", a, b), a @ b, rtol=1e-12)
    small = rng.random((3, 3))
    np.testing.assert_allclose(ta.einsum("ik,kj->ij", small, small), small @ small, rtol=1e-12)
    with pytest.raises(ta.ShapeError):
        ta.einsum("ik,kj->ij", a, rng.random((71, 90)))
    np.testing.assert_allclose(ta.einsum("ik,kj->ij", a.astype(np.float32), b.astype(np.float32)),
                               a @ b, rtol=1e-4)


def test_zero_dimensional_pydata_operands():
    sparse = pytest.importorskip("sparse")
    a = sparse.COO.from_numpy(np.array([0.0, 2.0, 0.0, 5.0]))
    three, empty = sparse.COO.from_numpy(np.array(3.0)), sparse.COO.from_numpy(np.array(0.0))
    np.testing.assert_array_equal(ta.einsum("a,->a", a, three).todense(), [0.0, 6.0, 0.0, 15.0])
    np.testing.assert_array_equal(ta.einsum("a,->a", a, empty).todense(), np.zeros(4))


def test_order_letters_in_either_case():
    a = np.arange(6.0).reshape(2, 3)
    assert ta.einsum("ij->ij", a, order="f").flags.f_contiguous
    assert ta.einsum("ij->ij", a, order="F").flags.f_contiguous
    assert ta.einsum("ij->ij", a, order="c").flags.c_contiguous
    with pytest.raises(ta.InputError, match="order one of"):
        ta.einsum("ij->ij", a, order="x")


def test_order_a_follows_fortran_operands_as_numpy_does():
    fortran, fortran2 = np.ones((2, 3, 5), order="F"), np.asfortranarray(np.arange(12.0).reshape(4, 3))
    c_ordered = np.arange(12.0).reshape(4, 3)
    expected = np.einsum("...ft,mf->...mt", fortran, fortran2)
    for order in ("a", "A", "k", "K"):
        got = ta.einsum("...ft,mf->...mt", fortran, fortran2, order=order)
        assert got.flags.f_contiguous and not got.flags.c_contiguous, order
        np.testing.assert_array_equal(got, expected)
    mixed = ta.einsum("...ft,mf->...mt", fortran, c_ordered, order="A")
    assert mixed.flags.c_contiguous            # not every operand is Fortran-ordered
    np.testing.assert_array_equal(mixed, np.einsum("...ft,mf->...mt", fortran, c_ordered))
    vector = ta.einsum("i,i->i", np.ones(3), np.ones(3), order="A")   # 1-D: both orders at once
    assert vector.flags.c_contiguous and vector.flags.f_contiguous
