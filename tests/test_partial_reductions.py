"""The compiler's own thread split of an all-dense reduction whose outer loop sums
(``api._with_partials``): ``parallelize(a, reduction=partials)``, each range summing into its
own copy of the output. Results must match NumPy whether a call splits or not, through the
general path and through replays, and the split must not be taken where its copies cost more
than the work (``PARTIAL_COPY_WORK``)."""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.api import _partial_parts, kernel_cache

CASES = [
    ("abc->bc", [(48, 40, 64)]),
    ("ij->j", [(3000, 100)]),
    ("i,i->", [(300_000,), (300_000,)]),
    ("ij,ij->j", [(2000, 150), (2000, 150)]),
    ("abc,ab->c", [(64, 50, 40), (64, 50)]),
]


@pytest.fixture(params=[1, 2, 4])
def threads(request, monkeypatch):
    monkeypatch.setattr(kernel_cache().threads, "threads", request.param)
    return request.param


@pytest.mark.parametrize("subscripts, shapes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_partial_reductions_match_numpy(subscripts, shapes, dtype, threads):
    rng = np.random.default_rng(len(subscripts))
    operands = [(rng.standard_normal(s) * 4).astype(dtype) for s in shapes]
    expected = np.einsum(subscripts, *[op.astype(np.float64) for op in operands])
    tolerance = 1e-3 if dtype == np.float32 else 1e-9
    for _ in range(3):                 # the general path, then replays
        got = np.asarray(ta.einsum(subscripts, *operands), dtype=np.float64)
        np.testing.assert_allclose(got, expected, rtol=tolerance,
                                   atol=tolerance * max(1.0, np.abs(expected).max()))


def test_the_schedule_says_so_and_passes_back():
    kernel = ta.compile("Z(b,c) = X(a,b,c)", {"X": "ddd"})
    assert str(kernel.schedule) == "reorder(a, b, c); parallelize(a, reduction=partials)"
    again = ta.compile("Z(b,c) = X(a,b,c)", {"X": "ddd"}, schedule=kernel.schedule)
    assert again.source("ir").splitlines()[1:] == kernel.source("ir").splitlines()[1:]
    # an output-major nest keeps its plain thread split
    assert "partials" not in str(ta.compile("Z(a) = X(a,b,c)", {"X": "ddd"}).schedule)


def test_copies_must_pay():
    assert _partial_parts(2, 10**6, (100,)) == 2
    assert _partial_parts(2, 10**6, (1000, 1000)) == 1        # the copy is the whole work
    assert _partial_parts(8, 80, ()) == 8                      # a scalar copies nothing
    assert _partial_parts(1, 10**9, ()) == 1


def test_empty_and_zero_size_reductions(threads):
    for shape in [(0, 5, 6), (4, 0, 6), (4, 5, 0)]:
        x = np.ones(shape)
        np.testing.assert_array_equal(ta.einsum("abc->bc", x), x.sum(0))


def test_large_calls_do_split(monkeypatch, partial_calls):
    monkeypatch.setattr(kernel_cache().threads, "threads", 2)
    calls = partial_calls
    x = np.arange(400_000, dtype=np.float64) % 7
    for _ in range(3):
        assert ta.einsum("i,i->", x, x) == pytest.approx(float(x @ x))
    assert calls and all(parts == 2 for parts in calls)


def _random_csc(n: int, m: int, nnz: int, dtype: type, seed: int):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, n, nnz), rng.integers(0, m, nnz)
    matrix = sp.coo_matrix(((rng.standard_normal(nnz) * 4).astype(dtype), (rows, cols)),
                           shape=(n, m)).tocsc()
    matrix.sum_duplicates()
    return matrix


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("n, m, nnz", [(3000, 40_000, 200_000), (5, 300_000, 300_000),
                                       (40_000, 7, 0), (1, 1, 1)])
def test_csc_spmv_splits_its_columns_into_partials(dtype, n, m, nnz, threads):
    """A CSC matrix's dense first level runs over the summed index: each range of columns
    sums into its own copy of y."""
    matrix = _random_csc(n, m, nnz, dtype, seed=n)
    x = (np.random.default_rng(1).standard_normal(m) * 4).astype(dtype)
    expected = matrix.astype(np.float64) @ x.astype(np.float64)
    tolerance = 1e-3 if dtype == np.float32 else 1e-9
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "CSC", "x": "d"})
    assert str(kernel.schedule) == "reorder(j, i); parallelize(j, reduction=partials)"
    for _ in range(3):                 # the general path, then replays
        for got in (ta.einsum("ij,j->i", matrix, x), kernel(A=matrix, x=x)):
            np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected,
                                       rtol=tolerance,
                                       atol=tolerance * max(1.0, np.abs(expected).max()))


def test_a_dense_first_level_of_a_higher_order_tensor(threads):
    rng = np.random.default_rng(3)
    dense_t = rng.standard_normal((400, 30, 20)) * (rng.random((400, 30, 20)) < 0.1)
    v = rng.standard_normal(20)
    kernel = ta.compile("y(j) = T(i,j,k) * v(k)", {"T": "dss", "v": "d"})
    assert "reduction=partials" in str(kernel.schedule)
    got = kernel(T=ta.Tensor.from_numpy(dense_t, "dss"), v=v)
    np.testing.assert_allclose(got, np.einsum("ijk,k->j", dense_t, v), rtol=1e-9, atol=1e-9)


def test_compressed_first_levels_keep_a_single_range():
    # a compressed first level's loop iterates stored coordinates: no partial split
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": ta.Format("ss", order=(1, 0)), "x": "d"})
    assert "partials" not in str(kernel.schedule)


def test_the_gpu_plan_drops_the_cpu_partials():
    from tensoralg.gpu.function import gpu_plan

    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "CSC", "x": "d"})
    assert kernel._default.plan.partials and not gpu_plan(kernel._default).partials
    asked = ta.compile("y(i) = A(i,j) * x(j)", {"A": "CSC", "x": "d"},
                       schedule=kernel.schedule)
    assert gpu_plan(asked._default).partials      # a schedule that asks keeps them


def test_large_csc_calls_do_split(monkeypatch, partial_calls):
    monkeypatch.setattr(kernel_cache().threads, "threads", 2)
    calls = partial_calls
    matrix = _random_csc(3000, 40_000, 200_000, np.float64, seed=5)
    x = np.ones(40_000)
    for _ in range(3):
        np.testing.assert_allclose(ta.einsum("ij,j->i", matrix, x), matrix @ x, rtol=1e-12)
    assert calls and all(parts == 2 for parts in calls)
