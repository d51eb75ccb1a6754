"""Sparse sums whose rows are counted before they are filled (``lower/counted.py``'s
``counted_summands``): ``C = A + B`` (or ``-``) of two CSR operands split over threads counts
each row's union of columns (``runtime/count.py``'s union counter), allocates the output exactly
and fills every range's rows in place. Its arrays are the serial kernel's, bit for bit; a count
that disagrees is an error, never a write past the arrays."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
import tensoralg.api as api
from tensoralg.formats import CSR, dense
from tensoralg.lower.concretize import concretize
from tensoralg.lower.counted import count_rows, counted_factors, counted_summands
from tensoralg.notation.parse_statement import parse_statement

ADD = "C(i,j) = A(i,j) + B(i,j)"
FORMATS = {"A": "csr", "B": "csr", "C": "csr"}


def _program(text: str, out=CSR, **formats):
    return concretize(parse_statement(text), formats, {}, np.dtype(np.float64), out)


@pytest.mark.parametrize("text", [ADD, "C(i,j) = A(i,j) - B(i,j)", "C(i,j) = -A(i,j) + B(i,j)",
                                  "C(i,j) = A(i,j) + A(i,j)"])
def test_a_sum_of_two_csr_terms_counts_its_rows(text):
    program = _program(text, A=CSR, B=CSR)
    terms = counted_summands(program)
    assert terms is not None and counted_factors(program) is None
    assert count_rows(program).counted == terms


@pytest.mark.parametrize("text, formats, out", [
    ("C(i,j) = A(i,j) + B(i,j) + D(i,j)", {"A": CSR, "B": CSR, "D": CSR}, CSR),
    ("C(i,j) = A(i,j) * B(i,j)", {"A": CSR, "B": CSR}, CSR),
    ("C(i,j) = A(i,j) + X(i,j)", {"A": CSR, "X": dense(2)}, CSR),
    ("C(i,j) = 2 * A(i,j) + B(i,j)", {"A": CSR, "B": CSR}, CSR),
    (ADD, {"A": CSR, "B": CSR}, ta.formats.DCSR),
])
def test_other_sums_and_formats_keep_appending(text, formats, out):
    assert counted_summands(_program(text, out=out, **formats)) is None


def _random(rows: int, cols: int, density: float, rng: np.random.Generator, dtype: str,
            index=np.int32) -> sp.csr_array:
    """Values -3..3 (explicit zeros among them), a third of the rows empty, one row full."""
    mask = rng.random((rows, cols)) < density
    if rows > 2 and cols:
        mask[rows // 2] = True
    mask[rng.random(rows) < 0.33] = False
    values = np.where(mask, rng.integers(-3, 4, (rows, cols)), 0).astype(dtype)
    r, c = np.nonzero(mask)
    matrix = sp.csr_array((values[r, c], (r, c)), shape=(rows, cols))
    matrix.indices, matrix.indptr = matrix.indices.astype(index), matrix.indptr.astype(index)
    return matrix


def _arrays(result) -> list[np.ndarray]:
    return [result.indptr, result.indices, result.data]


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32"])
@pytest.mark.parametrize("text", [ADD, "C(i,j) = A(i,j) - B(i,j)"])
def test_counted_rows_give_the_serial_kernels_arrays(text, dtype, backend, counted_calls):
    rng = np.random.default_rng(len(dtype) + len(backend) + len(text))
    serial = ta.compile(text, FORMATS, dtype=dtype, backend=backend, schedule="serial()")
    split = ta.compile(text, FORMATS, dtype=dtype, backend=backend,
                       schedule="parallelize(i, threads=3)")
    for rows, cols in [(90, 110), (40, 40), (5, 4), (1, 6), (0, 3), (6, 0), (3, 1)]:
        A, B = _random(rows, cols, 0.1, rng, dtype), _random(rows, cols, 0.2, rng, dtype)
        got, want = split(A=A, B=B), serial(A=A, B=B)
        for a, b in zip(_arrays(got), _arrays(want), strict=True):
            np.testing.assert_array_equal(a, b)
        expected = A.toarray() + B.toarray() if "+" in text else A.toarray() - B.toarray()
        np.testing.assert_array_equal(got.toarray(), expected)
    assert max(counted_calls) == 3


def test_a_csc_term_is_counted_after_its_conversion(counted_calls):
    rng = np.random.default_rng(6)
    A, B = _random(60, 50, 0.1, rng, "float64"), _random(60, 50, 0.2, rng, "float64")
    split = ta.compile(ADD, {"A": "csr", "B": "csc", "C": "csr"},
                       schedule="parallelize(i, threads=2)")
    got = split(A=A, B=sp.csc_array(B))
    np.testing.assert_array_equal(got.toarray(), A.toarray() + B.toarray())
    assert counted_calls == [2]


def test_the_same_matrix_twice_and_int64_indices(counted_calls):
    rng = np.random.default_rng(8)
    A = _random(70, 60, 0.15, rng, "float64", index=np.int64)
    split = ta.compile("C(i,j) = A(i,j) + A(i,j)", {"A": "csr", "C": "csr"},
                       schedule="parallelize(i, threads=2)")
    got = split(A=A)
    np.testing.assert_array_equal(got.indices, A.indices)
    np.testing.assert_array_equal(got.data, 2 * A.data)
    assert counted_calls == [2]


def test_parallelize_without_a_thread_count_splits_a_large_sum(counted_calls, two_threads):
    rng = np.random.default_rng(9)
    A, B = _random(2000, 1000, 0.05, rng, "float64"), _random(2000, 1000, 0.05, rng, "float64")
    got = ta.compile(ADD, FORMATS, schedule="parallelize(i)")(A=A, B=B)
    whole = ta.compile(ADD, FORMATS)(A=A, B=B)
    assert len(counted_calls) == 1 and counted_calls[0] >= 2   # the default stays whole
    for a, b in zip(_arrays(got), _arrays(whole), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got.toarray(), A.toarray() + B.toarray())


def test_without_a_schedule_a_sum_stays_one_appending_call(counted_calls, two_threads):
    rng = np.random.default_rng(10)
    A, B = _random(2000, 1000, 0.1, rng, "float64"), _random(2000, 1000, 0.1, rng, "float64")
    ta.compile(ADD, FORMATS)(A=A, B=B)
    assert counted_calls == []


@pytest.mark.parametrize("shift", [-1, 1])
def test_a_wrong_count_is_an_error_not_a_write_past_the_arrays(monkeypatch, shift):
    rng = np.random.default_rng(2)
    A, B = _random(50, 40, 0.2, rng, "float64"), _random(50, 40, 0.2, rng, "float64")
    split = ta.compile(ADD, FORMATS, schedule="parallelize(i, threads=2)")
    counter = api.kernel_cache().rows
    original = counter.pos

    def wrong(*args, **kwargs):
        pos = original(*args, **kwargs)
        counts = np.maximum(np.diff(pos) + shift, 0)   # every row one entry off
        return np.r_[0, np.cumsum(counts)].astype(pos.dtype)

    monkeypatch.setattr(counter, "pos", wrong)
    with pytest.raises(ta.KernelRuntimeError, match="differ from their count"):
        split(A=A, B=B)


@pytest.mark.parametrize("marks", [True, False])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_the_union_counter_counts_each_rows_columns(index, marks, monkeypatch):
    """By marks (up to count.MARKS_MAX_COLUMNS columns) and by merging the rows (wider)."""
    import tensoralg.runtime.count as count_module

    monkeypatch.setattr(count_module, "MARKS_MAX_COLUMNS", 1 << 18 if marks else 10)
    rng = np.random.default_rng(4)
    A, B = _random(70, 50, 0.1, rng, "float64", index), _random(70, 50, 0.3, rng, "float64",
                                                                   index)
    operands = [ta.Tensor.from_scipy(m) for m in (A, B)]

    def serial(function, args, bounds):
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            assert function(*args[:6], int(lo), int(hi)) == 0
        return 0

    pos = api.kernel_cache().rows.pos(*operands, 50, [0, 20, 21, 70], np.dtype(np.int64),
                                      serial, union=True)
    union = [len(set(A.indices[A.indptr[i]:A.indptr[i + 1]]) |
                 set(B.indices[B.indptr[i]:B.indptr[i + 1]])) for i in range(70)]
    np.testing.assert_array_equal(np.diff(pos), union)
