"""``precompute``: the text form, the sparse output's row workspace (SpGEMM, sparse add), a
subexpression computed into a dense temporary first, the compiler's own row workspace shown as
the command, and one refusal per mistake. Values are small integers, so every dtype's result
is exact and compared with ``assert_array_equal``."""
from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.schedule import Precompute, Schedule

BACKENDS = ["llvm", "c"]
DTYPES = ["float64", "float32", "int64"]
SPGEMM = "C(i,j) = A(i,k) * B(k,j)"
ADD = "C(i,j) = A(i,j) + B(i,j)"
CSR3 = {"A": "ds", "B": "ds", "C": "ds"}


def _skewed(rows: int, cols: int, rng: np.random.Generator, dtype: str) -> sp.csr_array:
    """Rows of very different lengths: empty ones, one full one, one with a single entry."""
    lengths = rng.integers(0, max(1, cols // 3) + 1, rows)
    lengths[rng.random(rows) < 0.3] = 0
    if rows > 2 and cols:
        lengths[rows // 2], lengths[-1] = cols, 1
    lengths = np.minimum(lengths, cols)
    indptr = np.r_[0, np.cumsum(lengths)]
    indices = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]) \
        if rows else np.empty(0, int)
    data = rng.integers(-4, 5, len(indices)).astype(dtype)
    data[data == 0] = 1
    return sp.csr_array((data, indices.astype(np.int32), indptr), shape=(rows, cols))


SHAPES = [(30, 20, 25), (1, 1, 1), (6, 1, 9), (0, 4, 3), (4, 0, 3), (5, 3, 0), (70, 90, 40)]


def _single(rows: int, cols: int, dtype: str) -> sp.csr_array:
    dense = np.zeros((rows, cols), dtype=dtype)
    if rows and cols:
        dense[rows - 1, cols // 2] = 3
    return sp.csr_array(dense)


def _pairs(rng: np.random.Generator, dtype: str, same_shape: bool):
    for m, k, n in SHAPES:
        left = _skewed(m, k, rng, dtype)
        right = _skewed(m if same_shape else k, k if same_shape else n, rng, dtype)
        yield left, right
        yield _single(*left.shape, dtype), right


# ---------------------------------------------------------------------------------------------
# the command as data and text


def test_text_form_round_trips_and_matches_the_python_form():
    schedule = Schedule().precompute("A(i,k) * B(k,j)", "j").precompute(
        "B(j,k) * x(k)", ("j", "k"), "ws")
    text = str(schedule)
    assert text == ("precompute('A(i,k) * B(k,j)', j, workspace=w, format=dense); "
                    "precompute('B(j,k) * x(k)', j, k, workspace=ws, format=dense)")
    assert Schedule.parse(text) == schedule
    assert Schedule.parse("precompute('A(i,j)')").commands == (Precompute("A(i,j)", ()),)


@pytest.mark.parametrize("text, message", [
    ("precompute(A, j)", "first argument is the subexpression, quoted"),
    ("precompute('A(i,', j)", "is not an index expression"),
    ("precompute('A(i,j)', j, j)", "an index is named twice"),
    ("precompute('A(i,j)', indices=j)", "precompute has no option 'indices'"),
])
def test_malformed_precompute_is_a_notation_error(text, message):
    with pytest.raises(ta.NotationError, match=message):
        Schedule.parse(text)


# ---------------------------------------------------------------------------------------------
# the sparse output's row workspace


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_spgemm_row_workspace_matches_scipy_and_the_unscheduled_kernel(backend, dtype):
    rng = np.random.default_rng(1)
    scheduled = ta.compile(SPGEMM, formats=CSR3, dtype=dtype, backend=backend,
                           schedule="precompute('A(i,k) * B(k,j)', j)")
    plain = ta.compile(SPGEMM, formats=CSR3, dtype=dtype, backend=backend)
    assert "precompute('A(i,k) * B(k,j)', j, workspace=w, format=dense)" in str(
        scheduled.schedule)
    for A, B in _pairs(rng, dtype, same_shape=False):
        got = scheduled(A=A, B=B)
        assert got.has_sorted_indices
        np.testing.assert_array_equal(got.toarray(), (A @ B).toarray())
        np.testing.assert_array_equal(got.toarray(), plain(A=A, B=B).toarray())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_add_through_a_row_workspace_matches(backend, dtype):
    rng = np.random.default_rng(2)
    scheduled = ta.compile(ADD, formats=CSR3, dtype=dtype, backend=backend,
                           schedule="precompute('A(i,j) + B(i,j)', j)")
    plain = ta.compile(ADD, formats=CSR3, dtype=dtype, backend=backend)
    assert "workspace" in scheduled.source("ir") and "workspace" not in plain.source("ir")
    for A, B in _pairs(rng, dtype, same_shape=True):
        got, appended = scheduled(A=A, B=B), plain(A=A, B=B)
        np.testing.assert_array_equal(got.toarray(), (A + B).toarray())
        # The same entries as the appending kernel: the union of A's and B's, sorted.
        np.testing.assert_array_equal(got.indptr, appended.indptr)
        np.testing.assert_array_equal(got.indices, appended.indices)


def _named_apart(kernel) -> str:
    """A kernel's IR below its signature, its index variables written by their canonical
    position: the cache shares one program among statements that differ only in index names,
    and its IR keeps the names of the statement that compiled it first."""
    text = kernel.source("ir").split("\n", 1)[1]    # the signature orders sizes by name
    for n, name in enumerate(kernel._default.names):
        text = re.sub(rf"\b(n_)?{name}\b", rf"\g<1>@{n}", text)
    return text


def test_the_compilers_row_workspace_is_shown_as_the_command_and_reproduces_it(monkeypatch):
    # A kernel cache of its own: a program compiled earlier in the session from a statement
    # that names its indices otherwise would be shared, and its IR printed in those names.
    from tensoralg import api

    monkeypatch.setattr(api, "_cache", api.KernelCache(api.CompileOptions(cache_dir=None)))
    chosen = ta.compile(SPGEMM, formats=CSR3)
    schedule = chosen.schedule
    assert schedule.find(Precompute) == [Precompute("A(i,k) * B(k,j)", ("j",))]
    again = ta.compile(SPGEMM, formats=CSR3, schedule=schedule)
    assert again.schedule == schedule
    assert _named_apart(again) == _named_apart(chosen)
    appending = ta.compile(ADD, formats=CSR3)             # appends in order: no workspace
    assert appending.schedule.find(Precompute) == []


def test_einsum_takes_a_precompute():
    rng = np.random.default_rng(3)
    A, B = _skewed(20, 15, rng, "float64"), _skewed(15, 12, rng, "float64")
    got = ta.einsum("ik,kj->ij", A, B, schedule="precompute('A(i,k) * B(k,j)', j)")
    np.testing.assert_array_equal(got.toarray(), (A @ B).toarray())


# ---------------------------------------------------------------------------------------------
# a subexpression into a dense temporary


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_inner_product_is_computed_once_into_a_temporary(backend, dtype):
    rng = np.random.default_rng(4)
    stmt = "y(i) = A(i,j) * (B(j,k) * x(k))"
    scheduled = ta.compile(stmt, formats={"A": "ds", "B": "ds"}, dtype=dtype, backend=backend,
                           schedule="precompute('B(j,k) * x(k)', j)")
    ir = scheduled.source("ir")
    assert "w(j) = ... over j, k" in ir and "y(i) = ... over i, j" in ir   # two nests
    for A, B in _pairs(rng, dtype, same_shape=False):
        x = rng.integers(-3, 4, B.shape[1]).astype(dtype)
        np.testing.assert_array_equal(scheduled(A=A, B=B, x=x), A @ (B @ x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sum_under_a_product_is_precomputed_per_row(backend):
    rng = np.random.default_rng(5)
    stmt = "C(i,j) = A(i,j) * (P(i,k) * Q(k,j))"
    scheduled = ta.compile(stmt, formats={"A": "ds"}, dtype="float64", backend=backend,
                           schedule="precompute('P(i,k) * Q(k,j)', j, workspace=pq)")
    assert "pq(i,j) += ... over i, k, j" in scheduled.source("ir")
    for rows, cols, rank in [(30, 20, 4), (0, 3, 2), (3, 0, 2), (4, 5, 0), (1, 1, 1)]:
        A = _skewed(rows, cols, rng, "float64")
        P = rng.integers(-3, 4, (rows, rank)).astype(float)
        Q = rng.integers(-3, 4, (rank, cols)).astype(float)
        np.testing.assert_array_equal(scheduled(A=A, P=P, Q=Q).toarray(),
                                      A.toarray() * (P @ Q))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dense_consumer_keeps_one_row_of_the_workspace(backend):
    rng = np.random.default_rng(8)
    k = ta.compile("C(i,j) = X(i,j) * (P(i,k) * Q(k,j))", backend=backend,
                   schedule="precompute('P(i,k) * Q(k,j)', j, workspace=pq)")
    assert "pq_vals holds one row" in k.source("ir") and "workspaces(on)" in str(k.schedule)
    for rows, cols, rank in [(37, 70, 5), (0, 3, 2), (3, 0, 2), (4, 5, 0), (1, 1, 1)]:
        X = rng.integers(-3, 4, (rows, cols)).astype(float)
        P = rng.integers(-3, 4, (rows, rank)).astype(float)
        Q = rng.integers(-3, 4, (rank, cols)).astype(float)
        np.testing.assert_array_equal(k(X=X, P=P, Q=Q), X * (P @ Q))


def test_a_dense_output_precomputed_whole_is_copied_from_its_temporary():
    rng = np.random.default_rng(6)
    A = _skewed(12, 9, rng, "float64")
    x = rng.integers(-3, 4, 9).astype(float)
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"},
                   schedule="precompute('A(i,j) * x(j)', i)")
    assert "w(i) = ... over i, j" in k.source("ir")
    np.testing.assert_array_equal(k(A=A, x=x), A @ x)


# ---------------------------------------------------------------------------------------------
# refusals


@pytest.mark.parametrize("statement, schedule, message", [
    (SPGEMM, "precompute('A(i,k) * D(k,j)', j)", "has no subexpression A\\(i,k\\) \\* D\\(k,j\\)"),
    (SPGEMM, "precompute('B(k,j) * A(i,k)', j)", "as the statement writes it"),
    (SPGEMM, "precompute('A(i,k) * B(k,j)', i)", "over its last stored index: "
     "precompute\\('A\\(i,k\\) \\* B\\(k,j\\)', j\\)"),
    (SPGEMM, "precompute('A(i,k) * B(k,j)', j, format=sparse)", "'sparse' is not supported"),
    (SPGEMM, "precompute('A(i,k) * B(k,j)', j, workspace=B)", "B is a tensor of the statement"),
    (SPGEMM, "precompute('A(i,k) * B(k,j)', j); precompute('A(i,k)', i)",
     "another precompute already names its workspace w"),
    ("y(i) = A(i,j) * (B(j,k) * x(k))", "precompute('B(j,k) * x(k)', i)",
     "has the free indices j; the workspace's indices \\(i\\) must be among them"),
])
def test_precompute_refusals_name_the_command_and_the_reason(statement, schedule, message):
    formats = {name: "ds" for name in ("A", "B") if f"{name}(" in statement}
    with pytest.raises(ta.CompileError, match=message) as caught:
        ta.compile(statement, formats=formats, schedule=schedule)
    assert str(caught.value).startswith("precompute(")


def test_a_shared_program_is_scheduled_in_each_statements_own_names():
    first = ta.compile("C(a,c) = A(a,b) * B(b,c)", formats=CSR3)
    second = ta.compile(SPGEMM, formats=CSR3)
    assert second._default is first._default          # one compiled program for both
    assert first.schedule.find(Precompute) == [Precompute("A(a,b) * B(b,c)", ("c",))]
    assert second.schedule.find(Precompute) == [Precompute("A(i,k) * B(k,j)", ("j",))]
    assert "reorder(a, b, c)" in str(first.schedule)
    assert "reorder(i, k, j)" in str(second.schedule)
