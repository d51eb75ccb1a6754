"""Dense contractions that are stacks of matrix products once their indices are grouped
(``lower/gemm_form.ContractionForm``): run on BLAS by ``ta.einsum`` (runtime/blas.py's
``blas_contraction``), visibly, with every layout of operands and result, against NumPy."""
from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.lower.gemm_form import contraction_form
from tensoralg.notation import parse_statement


@pytest.mark.parametrize("statement, groups", [
    ("C(b,n,h) = X(b,n,d) * W(d,h)", ((), ("b", "n"), ("h",), ("d",))),
    ("C(b,i,k) = A(b,i,j) * B(b,j,k)", (("b",), ("i",), ("k",), ("j",))),
    ("C(a,b,e,f) = A(a,b,c,d) * B(c,d,e,f)", ((), ("a", "b"), ("e", "f"), ("c", "d"))),
    ("C(h,k,b,q) = A(b,h,q,d) * B(b,h,k,d)", (("h", "b"), ("q",), ("k",), ("d",))),
    ("C(i,j) = A(i,k) * B(k,j)", None),                  # a plain product: gemm_form's
    ("C(i,j) = A(i,j) * B(i,j)", None),                  # nothing summed
    ("C(i) = A(i,j,k) * B(j)", None),                    # k summed in one operand only
    ("C(i,j) = A(i,i,k) * B(k,j)", None),                # a repeated index
    ("C(i,j) = A(i,k) * B(k,j) + D(i,j)", None),
    ("C(i,j,l) = A(i,k) * B(k,j) * D(l)", None),
])
def test_which_contractions_are_stacks_of_products(statement, groups):
    form = contraction_form(parse_statement(statement))
    if groups is None:
        assert form is None
    else:
        assert (form.batch, form.rows, form.cols, form.summed) == groups


SIZES = {"b": 3, "h": 2, "i": 17, "j": 19, "k": 23, "l": 9}


def _layouts():
    """Every order of each operand's and the result's indices for a batched product with two
    row indices (b stacks, i and l are rows, j is summed, k is a column)."""
    for a, b, out in itertools.product(itertools.permutations("bijl"),
                                       itertools.permutations("bjk"),
                                       [("b", "i", "l", "k"), ("b", "k", "i", "l"),
                                        ("k", "l", "b", "i"), ("i", "b", "k", "l")]):
        yield "".join(a), "".join(b), "".join(out)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_every_layout_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    checked = 0
    for a_sub, b_sub, out_sub in list(_layouts())[::7]:
        a = rng.standard_normal([SIZES[i] for i in a_sub]).astype(dtype)
        b = rng.standard_normal([SIZES[i] for i in b_sub]).astype(dtype)
        if dtype == np.complex128:
            a = a + 1j * rng.standard_normal(a.shape)
        subscripts = f"{a_sub},{b_sub}->{out_sub}"
        got = ta.einsum(subscripts, a, b, schedule="gemm(blas)")
        expected = np.einsum(subscripts, a.astype(np.complex128), b.astype(np.complex128))
        assert got.dtype == dtype and got.shape == expected.shape and got.flags.c_contiguous
        tolerance = 1e-4 if dtype == np.float32 else 1e-11
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance,
                                   err_msg=subscripts)
        checked += 1
    assert checked >= 40


def test_transposed_and_strided_operands_and_out():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 30, 64))
    w = rng.standard_normal((96, 64)).T                    # a transposed view: read as stored
    expected = np.einsum("bnd,dh->bnh", x, w)
    np.testing.assert_allclose(ta.einsum("bnd,dh->bnh", x, w), expected, rtol=1e-10, atol=1e-10)
    strided = x[:, ::2]                                    # not contiguous: copied once
    np.testing.assert_allclose(ta.einsum("bnd,dh->bnh", strided, w),
                               np.einsum("bnd,dh->bnh", strided, w), rtol=1e-10, atol=1e-10)
    out = np.full((40, 30, 96), np.nan)
    assert ta.einsum("bnd,dh->bnh", x, w, out=out) is out
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)
    transposed = np.full((96, 40, 30), np.nan)             # a result order BLAS cannot write
    assert ta.einsum("bnd,dh->hbn", x, w, out=transposed) is transposed
    np.testing.assert_allclose(transposed, expected.transpose(2, 0, 1), rtol=1e-10, atol=1e-10)
    overlapping = x.copy()                                 # out is an operand: computed apart
    ta.einsum("bnd,de->bne", overlapping, np.eye(64) * 2, out=overlapping)
    np.testing.assert_allclose(overlapping, 2 * x, rtol=1e-10, atol=1e-10)


def test_zero_sized_and_size_one_dimensions():
    for shape_a, shape_b in [((0, 30, 40), (40, 50)), ((20, 30, 0), (0, 50)),
                             ((20, 30, 40), (40, 0)), ((1, 30, 40), (40, 50)),
                             ((20, 1, 40), (40, 1))]:
        a, b = np.ones(shape_a), np.ones(shape_b)
        for schedule in (None, "gemm(blas)"):
            got = ta.einsum("bnd,dh->bnh", a, b, schedule=schedule)
            np.testing.assert_array_equal(got, np.einsum("bnd,dh->bnh", a, b))
    # a stacked index of size one in one operand broadcasts, as in NumPy
    a, b = np.ones((1, 20, 30)), np.ones((4, 30, 25))
    np.testing.assert_array_equal(ta.einsum("bij,bjk->bik", a, b),
                                  np.einsum("bij,bjk->bik", a, b))


def test_the_dispatch_is_logged_and_small_stacks_keep_the_loop_nest(caplog):
    # The general path logs the route (a replay of the same call, recorded by an earlier
    # test in this process, runs without a word): start from no recorded calls.
    ta.api.kernel_cache().forget_replays()
    rng = np.random.default_rng(2)
    big_a, big_b = rng.standard_normal((4, 160, 128)), rng.standard_normal((4, 112, 128))
    with caplog.at_level(logging.INFO, logger="tensoralg"):
        got = ta.einsum("bij,bkj->bik", big_a, big_b)
    assert any("4 matrix product(s) of 160 x 128 x 112 on BLAS" in r.getMessage()
               for r in caplog.records)
    np.testing.assert_allclose(got, np.einsum("bij,bkj->bik", big_a, big_b), rtol=1e-10, atol=1e-10)
    caplog.clear()
    small_a, small_b = rng.standard_normal((50, 6, 7)), rng.standard_normal((50, 7, 5))
    with caplog.at_level(logging.INFO, logger="tensoralg"):
        got = ta.einsum("bij,bjk->bik", small_a, small_b)
        looped = ta.einsum("bij,bkj->bik", big_a, big_b, schedule="gemm(loops)")
    assert not any("on BLAS" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(got, small_a @ small_b, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(looped, np.einsum("bij,bkj->bik", big_a, big_b), rtol=1e-10, atol=1e-10)


def test_repeated_calls_replay_the_dispatch_and_check_each_call():
    rng = np.random.default_rng(3)
    for shape in [(6, 70, 80), (5, 90, 80), (1, 70, 80), (5, 2, 80)]:
        a, w = rng.standard_normal(shape), rng.standard_normal((80, 60))
        np.testing.assert_allclose(ta.einsum("bnd,dh->bnh", a, w),
                                   np.einsum("bnd,dh->bnh", a, w), rtol=1e-10, atol=1e-10)
    with pytest.raises(ta.ShapeError):
        ta.einsum("bnd,dh->bnh", np.ones((5, 70, 80)), np.ones((81, 60)))


def test_an_explicit_blas_route_that_cannot_run_is_refused():
    ints = np.ones((4, 20, 30), dtype=np.int64)
    with pytest.raises(ta.UnsupportedError, match="gemm\\(blas\\).*int64"):
        ta.einsum("bij,bjk->bik", ints, ints.transpose(0, 2, 1).copy(), schedule="gemm(blas)")
    np.testing.assert_array_equal(ta.einsum("bij,bjk->bik", ints, ints.transpose(0, 2, 1).copy()),
                                  ints @ ints.transpose(0, 2, 1))
    sparse = sp.random_array((30, 40), density=0.2, format="csr", random_state=0)
    with pytest.raises(ta.UnsupportedError, match="stored csr"):
        ta.einsum("bij,jk->bik", np.ones((3, 20, 30)), sparse, schedule="gemm(blas)")


@pytest.mark.parametrize("a_sub", ["ijk", "jik", "ikj", "kji"])
@pytest.mark.parametrize("b_sub", ["jl", "lj"])
@pytest.mark.parametrize("out_sub", ["ikl", "kil", "lik"])
def test_unbatched_layouts_with_leading_rows_match_numpy(a_sub, b_sub, out_sub):
    # "ijk,jl->ikl": A's leading rows become a stack over which B is broadcast (no copy of A)
    rng = np.random.default_rng(4)
    sizes = {"i": 9, "j": 33, "k": 12, "l": 20}
    a = rng.standard_normal([sizes[i] for i in a_sub])
    b = rng.standard_normal([sizes[i] for i in b_sub])
    subscripts = f"{a_sub},{b_sub}->{out_sub}"
    expected = np.einsum(subscripts, a, b)
    for schedule in (None, "gemm(blas)"):
        got = ta.einsum(subscripts, a, b, schedule=schedule)
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10, err_msg=subscripts)
    out = np.empty(expected.shape)
    assert ta.einsum(subscripts, a, b, out=out, schedule="gemm(blas)") is out
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)


def test_compiled_kernels_take_the_same_route_and_say_so():
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((6, 40, 64)), rng.standard_normal((64, 96))
    kernel = ta.compile("C(b,n,h) = X(b,n,d) * W(d,h)")
    assert "stack of matrix products on BLAS" in kernel.source("ir")
    np.testing.assert_allclose(kernel(X=x, W=w), x @ w, rtol=1e-10, atol=1e-10)
    small, tiny = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    np.testing.assert_allclose(kernel(X=small, W=tiny), small @ tiny, rtol=1e-12)  # the nest
    with pytest.raises(ta.ShapeError):
        kernel(X=x, W=np.ones((63, 96)))
    forced = ta.compile("C(b,i,k) = A(b,i,j) * B(b,j,k)", schedule="gemm(blas)")
    a, b = rng.standard_normal((50, 6, 7)), rng.standard_normal((50, 7, 5))
    np.testing.assert_allclose(forced(A=a, B=b), a @ b, rtol=1e-10, atol=1e-10)
    looped = ta.compile("C(b,n,h) = X(b,n,d) * W(d,h)", schedule="gemm(loops)")
    assert "BLAS" not in looped.source("ir")
    np.testing.assert_allclose(looped(X=x, W=w), x @ w, rtol=1e-10, atol=1e-10)
    with pytest.raises(ta.UnsupportedError, match="gemm\\(blas\\)"):
        ta.compile("C(b,i,k) = A(b,i,j) * B(b,j,k)", dtype="int64", schedule="gemm(blas)")


@pytest.mark.parametrize("subscripts, small, large", [
    ("ik,kj->ij", [(6, 5), (5, 7)], [(90, 80), (80, 70)]),
    ("bnd,dh->bnh", [(2, 3, 4), (4, 5)], [(6, 40, 64), (64, 96)]),
])
def test_the_route_follows_each_calls_sizes_whatever_came_first(subscripts, small, large,
                                                                 monkeypatch):
    # A small call's loop-nest replay must not take later large calls of the same
    # subscripts from BLAS, nor a large call's BLAS replay send small calls the long way.
    import tensoralg.api as api

    routed = []
    for name in ("blas_product", "blas_contraction"):
        original = getattr(api, name)
        monkeypatch.setattr(api, name, lambda *a, _f=original, **k: routed.append(1) or _f(*a, **k))
    rng = np.random.default_rng(6)
    calls = [[rng.standard_normal(s) for s in shapes]
             for shapes in (small, small, large, small, small, large)]
    for order in (calls, calls[2:]):
        api.kernel_cache().forget_replays()
        for operands in order:
            before = len(routed)
            got = ta.einsum(subscripts, *operands)
            ta.wait_for_optimised()      # a call replays only once its optimised code is in
            np.testing.assert_allclose(got, np.einsum(subscripts, *operands), rtol=1e-10,
                                       atol=1e-10)
            assert (len(routed) > before) == (operands[0].size > 100), (order is calls, operands[0].shape)


@pytest.mark.parametrize("subscripts, shapes, grouped", [
    ("bhqk,bhkd->bhqd", [(2, 3, 4, 5), (2, 3, 5, 6)], "bqk,bkd->bqd"),
    ("abcd,cdef->abef", [(2, 3, 4, 5), (4, 5, 6, 7)], "ac,ce->ae"),
    ("abc,abc->", [(2, 3, 4), (2, 3, 4)], "a,a->"),
    ("abc,abc->ab", [(2, 3, 4), (2, 3, 4)], "ac,ac->a"),
    ("ij,jk->ik", [(2, 3), (3, 4)], None),
    ("bij,bjk->bik", [(1, 3, 4), (5, 4, 6)], None),        # a size that broadcasts
    ("ab,ab->ba", [(2, 3), (2, 3)], None),                 # the output reorders them
])
def test_indices_that_always_stand_together_merge(subscripts, shapes, grouped):
    from tensoralg.notation.grouping import group_indices

    found = group_indices(subscripts, tuple(shapes))
    assert (found.subscripts if found else None) == grouped
    rng = np.random.default_rng(7)
    operands = [rng.standard_normal(s) for s in shapes]
    got = ta.einsum(subscripts, *operands)
    expected = np.einsum(subscripts, *operands)
    assert np.shape(got) == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    # Fortran-ordered operands do not merge (their axes are not C-ordered): the general path
    np.testing.assert_allclose(ta.einsum(subscripts, *[np.asfortranarray(op) for op in operands]),
                               expected, rtol=1e-10, atol=1e-10)
