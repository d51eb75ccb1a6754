"""The generated last-axis interpolation (codegen/interpolate.py, runtime/interpolate.py,
``program.interpolation_call``): against scipy's product on random tap matrices of 1 to 16
entries a row, across output widths that do and do not fill a vector, float32 and float64,
split over threads, with empty inputs; bad tap tables refused."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import program
from tensoralg.runtime.interpolate import MOST_TAPS, BoundTaps, tap_tables
from tensoralg.runtime.threads import KernelThreads


def _matrix(rows: int, columns: int, most: int, rng: np.random.Generator) -> sp.csr_matrix:
    """A CSR matrix with 1..most entries a row, in random columns (unsorted in each row)."""
    indptr, indices, data = [0], [], []
    for _ in range(rows):
        count = int(rng.integers(1, most + 1))
        picked = rng.choice(columns, size=min(count, columns), replace=False)
        indices += picked.tolist()
        data += rng.standard_normal(len(picked)).tolist()
        indptr.append(len(indices))
    return sp.csr_matrix((data, indices, indptr), shape=(rows, columns))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, size_in, size_out, most", [
    (7, 5, 9, 2), (3, 64, 128, 2), (33, 40, 17, 4), (2, 100, 31, MOST_TAPS), (1, 1, 1, 1),
    (5, 3, 64, 3), (0, 4, 8, 2)])
def test_taps_match_the_sparse_product(dtype, rows, size_in, size_out, most):
    rng = np.random.default_rng(rows + size_in + size_out)
    matrix = _matrix(size_out, size_in, most, rng).astype(dtype)
    x = rng.standard_normal((rows, size_in)).astype(dtype)
    out = np.full((rows, size_out), np.nan, dtype)
    call = program.interpolation_call(x, out, matrix)
    assert call is not None
    call()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, (matrix @ x.T).T, rtol=tol, atol=tol)


def test_threads_split_the_rows_with_the_same_result():
    rng = np.random.default_rng(2)
    matrix = _matrix(200, 100, 3, rng)
    x = rng.standard_normal((3000, 100))
    one, two = np.empty((3000, 200)), np.empty((3000, 200))
    tables = tap_tables(matrix, np.float64)
    BoundTaps(x, one, *tables)()
    split = BoundTaps(x, two, *tables, threads=KernelThreads(2))
    assert len(split.calls) == 2
    split()
    np.testing.assert_array_equal(one, two)


def test_rebinding_the_input():
    rng = np.random.default_rng(3)
    matrix = _matrix(9, 4, 2, rng)
    x, y = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    out = np.empty((2, 9))
    call = program.interpolation_call(x, out, matrix)
    call.rebind("x", y)
    np.testing.assert_allclose(call(), (matrix @ y.T).T, rtol=1e-12)
    with pytest.raises(ta.ShapeError):
        call.rebind("x", np.zeros((3, 4)))


def test_what_the_call_does_not_take():
    matrix = sp.csr_matrix(np.ones((3, 20)))           # 20 entries a row
    assert program.interpolation_call(np.zeros((1, 20)), np.zeros((1, 3)), matrix) is None
    small = sp.csr_matrix(np.eye(3))
    assert program.interpolation_call(np.zeros((1, 3), np.int64), np.zeros((1, 3), np.int64),
                                      small) is None
    j, w = tap_tables(small, np.float64)
    with pytest.raises(ta.ShapeError, match="tap indices"):
        BoundTaps(np.zeros((1, 3)), np.zeros((1, 3)), j + 1, w)      # index 3 past the row
    with pytest.raises(ta.ShapeError, match="tap indices"):
        BoundTaps(np.zeros((1, 3)), np.zeros((1, 3)), j - 2, w)      # -2: neither a tap nor -1
    with pytest.raises(ta.ShapeError, match="cannot compute"):
        BoundTaps(np.zeros((2, 3)), np.zeros((1, 3)), j, w)          # rows differ
    with pytest.raises(ta.ShapeError, match="cannot compute"):
        BoundTaps(np.zeros((1, 3), np.float32), np.zeros((1, 3), np.float32), j, w)  # w float64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_block_of_rows_reads_its_own_table(dtype):
    # GridSample's form: one table per image, its channels the rows of a block
    rng = np.random.default_rng(8)
    tables, channels, size_in, size_out = 4, 3, 30, 21
    matrices = [_matrix(size_out, size_in, 4, rng).astype(dtype) for _ in range(tables)]
    stacked = [tap_tables(m, dtype) for m in matrices]
    count = max(j.shape[0] for j, _ in stacked)
    taps = np.full((tables, count, size_out), -1, np.int32)
    weights = np.zeros((tables, count, size_out), dtype)
    for k, (j, w) in enumerate(stacked):
        taps[k, :len(j)], weights[k, :len(w)] = j, w
    x = rng.standard_normal((tables * channels, size_in)).astype(dtype)
    out = np.empty((tables * channels, size_out), dtype)
    program.interpolation_call(x, out, taps=taps, weights=weights)()
    want = np.concatenate([(m @ x[k * channels:(k + 1) * channels].T).T
                           for k, m in enumerate(matrices)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ta.ShapeError, match="cannot compute"):
        BoundTaps(x[:-1], out[:-1], taps, weights)       # 11 rows are not 4 blocks
