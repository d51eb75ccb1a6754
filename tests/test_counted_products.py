"""Sparse products whose rows are counted before they are filled (``lower/counted.py``): a CSR
product split over threads counts each output row's entries (``runtime/count.py``), allocates
the output exactly and fills every range's rows in place. Its arrays are the serial appending
kernel's, bit for bit; a count that disagrees with the kernel is an error, never a write past
the arrays."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
import tensoralg.api as api
from tensoralg.formats import CSR, dense
from tensoralg.lower.concretize import concretize
from tensoralg.lower.counted import count_rows, counted_factors
from tensoralg.notation.parse_statement import parse_statement
from tensoralg.runtime.count import RowCounter

SPGEMM = "C(i,k) = A(i,j) * B(j,k)"
CSR_FORMATS = {"A": "csr", "B": "csr", "C": "csr"}


def _program(text: str, out=CSR, **formats):
    return concretize(parse_statement(text), formats, {}, np.dtype(np.float64), out)


@pytest.mark.parametrize("text, formats, factors", [
    (SPGEMM, {"A": CSR, "B": CSR}, ("A", "B")),
    ("C(i,k) = A(i,j) * B(j,k) * d(j)", {"A": CSR, "B": CSR, "d": dense(1)}, ("A", "B")),
    ("C(i,k) = 2 * A(i,j) * X(i,k) * B(j,k)", {"A": CSR, "B": CSR, "X": dense(2)},
     ("A", "B")),
    ("C(i,k) = A(i,j) * A(j,k)", {"A": CSR}, ("A", "A")),
])
def test_a_csr_product_of_two_csr_factors_counts_its_rows(text, formats, factors):
    program = _program(text, **formats)
    assert counted_factors(program) == factors
    counted = count_rows(program)
    assert counted.counted == factors and any("counted first" in n for n in counted.notes)


@pytest.mark.parametrize("text, formats, out", [
    ("C(i,k) = A(i,j) * B(j,k) + D(i,k)", {"A": CSR, "B": CSR, "D": CSR}, CSR),
    ("C(i,k) = A(i,j) * B(j,k) * E(j,k)", {"A": CSR, "B": CSR, "E": CSR}, CSR),
    (SPGEMM, {"A": CSR, "B": CSR}, ta.formats.DCSR),
    ("C(i,j) = A(i,j) * B(i,j)", {"A": CSR, "B": CSR}, CSR),
    ("C(i,k) = A(i,j) * B(j,k)", {"A": CSR, "B": ta.formats.CSC}, CSR),
])
def test_other_statements_and_formats_keep_appending(text, formats, out):
    program = _program(text, out=out, **formats)
    assert counted_factors(program) is None
    with pytest.raises(ValueError, match="cannot be counted"):
        count_rows(program)


def _skewed(rows: int, cols: int, rng: np.random.Generator, dtype: str,
            index=np.int32) -> sp.csr_array:
    """Power-law rows, a third of them empty, one full row, explicit zeros among the values."""
    lengths = np.minimum((rng.pareto(1.2, rows) * 2).astype(int), cols)
    lengths[rng.random(rows) < 0.33] = 0
    if rows > 3 and cols:
        lengths[rows // 3] = cols
    indptr = np.r_[0, np.cumsum(lengths)].astype(index)
    indices = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]) \
        if rows else np.empty(0, int)
    data = rng.integers(-3, 4, len(indices)).astype(dtype)
    return sp.csr_array((data, indices.astype(index), indptr), shape=(rows, cols))


def _arrays(result) -> list[np.ndarray]:
    return [result.indptr, result.indices, result.data]


def _serial_and_split(dtype: str, backend: str, threads: int = 3):
    serial = ta.compile(SPGEMM, CSR_FORMATS, dtype=dtype, backend=backend, schedule="serial()")
    split = ta.compile(SPGEMM, CSR_FORMATS, dtype=dtype, backend=backend,
                       schedule=f"parallelize(i, threads={threads})")
    return serial, split


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32"])
def test_counted_rows_give_the_serial_kernels_arrays(dtype, backend, counted_calls):
    rng = np.random.default_rng(len(dtype) + len(backend))
    serial, split = _serial_and_split(dtype, backend)
    for rows, inner, cols in [(90, 70, 110), (40, 40, 40), (5, 3, 4), (1, 4, 6), (0, 5, 3),
                              (6, 0, 4), (7, 5, 0)]:
        A, B = _skewed(rows, inner, rng, dtype), _skewed(inner, cols, rng, dtype)
        got, want = split(A=A, B=B), serial(A=A, B=B)
        for a, b in zip(_arrays(got), _arrays(want), strict=True):
            np.testing.assert_array_equal(a, b)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.toarray(), (A.astype(np.float64) @ B.astype(
            np.float64)).toarray().astype(dtype))
    assert max(counted_calls) == 3


def test_a_single_entry_and_explicit_zeros_keep_their_entries(counted_calls):
    serial, split = _serial_and_split("float64", "llvm", threads=2)
    A = sp.csr_array(([2.0], [3], [0, 0, 1, 1]), shape=(3, 5))
    B = sp.csr_array(([0.0, 4.0], [1, 2], [0, 0, 0, 0, 2, 2]), shape=(5, 3))
    got = split(A=A, B=B)
    assert got.indptr.tolist() == [0, 0, 2, 2] and got.indices.tolist() == [1, 2]
    assert got.data.tolist() == [0.0, 8.0]          # the stored zero's product is kept
    assert counted_calls == [2]
    for a, b in zip(_arrays(got), _arrays(serial(A=A, B=B)), strict=True):
        np.testing.assert_array_equal(a, b)


def test_duplicates_unsorted_rows_and_int64_indices(counted_calls):
    rng = np.random.default_rng(5)
    serial, split = _serial_and_split("float64", "llvm")
    A = _skewed(60, 50, rng, "float64", index=np.int64)
    B = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0] * 10),
                       (np.repeat(np.arange(0, 50, 5), 4), np.tile([7, 3, 7, 1], 10))),
                      shape=(50, 9))
    B.has_canonical_format = False                   # unsorted, with a duplicate a row
    B = sp.csr_matrix((B.data, B.indices, B.indptr), shape=B.shape)
    want = A.toarray() @ B.toarray()
    got = split(A=A, B=B)
    np.testing.assert_allclose(got.toarray(), want)
    assert np.all(np.diff(got.indices[got.indptr[1]:got.indptr[2]]) > 0) if got.nnz else True
    for a, b in zip(_arrays(got), _arrays(serial(A=A, B=B)), strict=True):
        np.testing.assert_array_equal(a, b)
    assert counted_calls


def test_the_same_matrix_twice_and_a_dense_factor(counted_calls):
    rng = np.random.default_rng(11)
    A = _skewed(80, 80, rng, "float64")
    d = rng.standard_normal(80)
    k = ta.compile("C(i,k) = A(i,j) * A(j,k) * d(j)", {"A": "csr", "C": "csr"},
                   schedule="parallelize(i, threads=2)")
    got = k(A=A, d=d)
    want = (A.toarray() * d) @ A.toarray()
    np.testing.assert_allclose(got.toarray(), want, atol=1e-12)
    assert counted_calls == [2]
    # A DCSR output appends on each range and joins the pieces; k is sized by A's second mode
    joined = ta.compile("C(i,k) = A(i,j) * A(j,k) * d(j)", {"A": "csr", "C": "dcsr"},
                        schedule="parallelize(i, threads=2)")(A=A, d=d)
    np.testing.assert_allclose(joined.toarray(), want, atol=1e-12)
    assert counted_calls == [2]


def test_the_automatic_split_counts_rows_of_a_real_product(counted_calls, two_threads):
    # ~1e6 multiply-adds, 100 a row: worth two threads, counted first
    A = sp.random_array((4000, 4000), density=0.0025, format="csr", random_state=3)
    kernel = ta.compile(SPGEMM, CSR_FORMATS)
    got = kernel(A=A, B=A)
    via_einsum = ta.einsum("ij,jk->ik", A, A)
    want = (A @ A).tocsr()
    want.sort_indices()
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-12)
    np.testing.assert_allclose(via_einsum.toarray(), want.toarray(), rtol=1e-12)
    assert len(counted_calls) == 2 and min(counted_calls) >= 2


def test_short_rows_are_not_counted_twice(counted_calls, two_threads):
    # A road-network-like product (a few multiply-adds a row) stays one appending call
    n = 60_000
    A = sp.diags([np.ones(n - 1), np.ones(n), np.ones(n - 1)], [-1, 0, 1], format="csr")
    got = ta.compile(SPGEMM, CSR_FORMATS)(A=A, B=A)
    assert counted_calls == []
    np.testing.assert_allclose(got[:5, :5].toarray(), (A @ A)[:5, :5].toarray())


def test_a_wrong_count_is_an_error_not_a_write_past_the_arrays(monkeypatch):
    rng = np.random.default_rng(2)
    A, B = _skewed(50, 40, rng, "float64"), _skewed(40, 30, rng, "float64")
    split = ta.compile(SPGEMM, CSR_FORMATS, schedule="parallelize(i, threads=2)")
    counter = api.kernel_cache().rows
    original = counter.pos

    def short(*args, **kwargs):
        pos = original(*args, **kwargs)
        pos[1:] -= np.minimum(np.arange(1, len(pos)), pos[1:])   # every row one entry short
        return np.maximum.accumulate(pos)

    monkeypatch.setattr(counter, "pos", short)
    with pytest.raises(ta.KernelRuntimeError, match="differ from their count"):
        split(A=A, B=B)


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_the_row_counter_matches_the_products_pattern(index):
    rng = np.random.default_rng(4)
    A, B = _skewed(70, 50, rng, "float64", index), _skewed(50, 90, rng, "float64", index)
    operands = [ta.Tensor.from_scipy(m) for m in (A, B)]

    def serial(function, args, bounds):
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            assert function(*args[:6], int(lo), int(hi)) == 0
        return 0

    for bounds in ([0, 70], [0, 13, 40, 70], [0, 0, 70]):
        pos = RowCounter().pos(*operands, 90, bounds, np.dtype(np.int64), serial)
        ones = sp.csr_array((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
        pattern = ones @ sp.csr_array((np.ones(B.nnz), B.indices, B.indptr), shape=B.shape)
        np.testing.assert_array_equal(pos, pattern.indptr)   # every product kept, zero or not
