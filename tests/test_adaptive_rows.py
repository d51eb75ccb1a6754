"""The adaptive tail of a CSR row loop (``vectorize(j, 8, tail=adaptive)``, which the compiler
gives SpMV-like kernels itself): three kernels (plain, tail masked, unrolled), picked per matrix
by how often consecutive rows differ in length and how long they are (runtime/rows.py), equal
to scipy on every path a call can take."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.api import kernel_cache
from tensoralg.api import row_variant_pays as MEASURED_ROW_VARIANT_PAYS
from tensoralg.ir.printer import format_function
from tensoralg.runtime.rows import (
    ADAPTIVE_CHANGES,
    MASKED,
    PLAIN,
    ROW_BLOCK_PAIRS,
    ROW_BLOCKS,
    UNROLLED,
    changing_share,
    row_kernel_kind,
)
from tensoralg.schedule import Vectorize, VectorTail, parse_schedule

SPMV = "y(i) = A(i,j) * x(j)"


def _rows(lengths: np.ndarray, cols: int, dtype: str, seed: int = 0) -> sp.csr_matrix:
    """A CSR matrix with these row lengths (sorted, unique columns, random values)."""
    rng = np.random.default_rng(seed)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]
                             + [np.zeros(0, np.int64)]).astype(np.int32)
    values = rng.standard_normal(indptr[-1]).astype(dtype)
    return sp.csr_matrix((values, indices, indptr), shape=(len(lengths), cols))


def _irregular(rows: int, dtype: str = "float64", seed: int = 0) -> sp.csr_matrix:
    """Short rows of random lengths (empty ones, a row longer than 8 lanes many times over)."""
    lengths = np.random.default_rng(seed).integers(0, 13, rows)
    lengths[min(7, rows - 1)] = 300
    return _rows(lengths, 400, dtype, seed)


def _regular(rows: int, dtype: str = "float64", length: int = 5) -> sp.csr_matrix:
    return _rows(np.full(rows, length), 400, dtype)


@pytest.fixture(autouse=True)
def row_variants_pay(monkeypatch):
    """The variants win on this host (whether they do is measured per host,
    ``api.row_variant_pays``; ``test_a_variant_runs_only_where_it_pays`` covers both)."""
    import tensoralg.api as api

    monkeypatch.setattr(api, "row_variant_pays", lambda kind, rows: True)


def _built(statement: str, kind: str) -> bool:
    return any(key.row_loop == kind and key.statement == statement
               for key in kernel_cache().kernels)


def test_text_form_and_the_compilers_own_choice():
    schedule = parse_schedule("vectorize(j, 8, tail=adaptive)")
    assert schedule.commands == (Vectorize("j", 8, VectorTail.ADAPTIVE),)
    assert str(schedule) == "vectorize(j, 8, tail=adaptive)"
    k = ta.compile(SPMV, formats={"A": "csr"})
    assert str(k.schedule) == "reorder(i, j); vectorize(j, 8, tail=adaptive); parallelize(i)"
    # the kernel itself keeps the backend's vectorizing; the masked one is its variant
    assert "masked tail" not in k.source("ir")
    given = ta.compile(SPMV, formats={"A": "csr"}, schedule="vectorize(j, 4, tail=adaptive)")
    assert "vectorize(j, 4, tail=adaptive)" in str(given.schedule)


@pytest.mark.parametrize("statement, formats, why", [
    (SPMV, {"A": "dense"}, "does not run over a CSR row"),
    ("y(i) = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"}, "one\nsparse operand"),
])
def test_adaptive_where_no_csr_row_loop_runs_is_refused(statement, formats, why):
    with pytest.raises(ta.CompileError, match="tail=adaptive") as error:
        ta.compile(statement, formats=formats, schedule="vectorize(j, 8, tail=adaptive)")
    assert " ".join(why.split()) in " ".join(str(error.value).split())


def test_no_adaptive_choice_where_it_does_not_apply():
    # a CSR output, SpMM (the inner loop is over the dense columns), the C backend, integers
    for statement, formats, options in [
            ("y(i) = A(i,j) * B(i,j)", {"A": "csr", "B": "csr"}, {}),
            ("C(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, {}),
            (SPMV, {"A": "csr"}, {"backend": "c"}),
            (SPMV, {"A": "csr"}, {"dtype": "int64"})]:
        k = ta.compile(statement, formats=formats, **options)
        assert "adaptive" not in str(k.schedule), (statement, options)


def test_the_share_counts_changing_lengths_over_sampled_blocks():
    assert changing_share(np.array([0])) == 0.0
    assert changing_share(np.array([0, 3])) == 0.0
    assert changing_share(np.array([0, 1, 2, 3, 4])) == 0.0
    assert changing_share(np.array([0, 1, 3, 4, 6])) == 1.0
    rng = np.random.default_rng(1)
    small = np.concatenate([[0], np.cumsum(rng.integers(0, 3, 1000))])
    lengths = np.diff(small)
    assert changing_share(small) == np.count_nonzero(lengths[1:] != lengths[:-1]) / 999
    # a large matrix: blocks of consecutive rows spread over it, first and last rows included
    rows = 10 * ROW_BLOCKS * ROW_BLOCK_PAIRS
    lengths = np.full(rows, 4)
    lengths[1::2] = 5                       # every pair differs ...
    lengths[rows // 4: 3 * rows // 4] = 4   # ... but the middle half repeats one length
    pos = np.concatenate([[0], np.cumsum(lengths)])
    share = changing_share(pos)
    assert 0.4 < share < 0.6
    assert changing_share(pos.astype(np.int32)) == share


def test_the_choice_is_remembered_per_array():
    pos = _irregular(2000).indptr
    assert row_kernel_kind(pos) == MASKED
    assert row_kernel_kind(pos.copy()) == MASKED
    assert row_kernel_kind(_regular(2000).indptr) == UNROLLED
    assert row_kernel_kind(_regular(5000, length=2).indptr) == PLAIN
    assert row_kernel_kind(_regular(2000, length=20).indptr) == PLAIN
    assert row_kernel_kind(np.zeros(1, np.int32)) == PLAIN
    # too few stored values for the choice to pay: the plain kernel
    assert row_kernel_kind(_irregular(300).indptr) == PLAIN
    assert row_kernel_kind(_regular(1000).indptr) == PLAIN
    assert ADAPTIVE_CHANGES == 0.6


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("threads", [1, 2])
def test_both_kernels_give_scipys_sums_on_every_path(dtype, threads, monkeypatch):
    """Compiled kernel, einsum (general path, replay, written-out replay) and thread splits, on
    a matrix whose rows take the masked kernel and one whose rows keep the plain one, with
    empty rows, a single nonzero and an empty matrix."""
    monkeypatch.setattr(kernel_cache().threads, "threads", threads)
    tolerance = 1e-4 if dtype == "float32" else 1e-12
    k = ta.compile(SPMV, formats={"A": "csr"}, dtype=dtype)
    single = sp.csr_matrix((np.ones(1, dtype), ([3], [5])), shape=(9, 400))
    empty = sp.csr_matrix((6, 400), dtype=dtype)
    # 6e4 rows: enough stored values for a split over two threads
    for A in (_irregular(60_000, dtype), _regular(60_000, dtype), _irregular(300, dtype),
              _regular(300, dtype), _regular(300, dtype, 2), _regular(60_000, dtype, 20),
              single, empty):
        x = np.random.default_rng(2).standard_normal(400).astype(dtype)
        expected = A.astype(np.float64) @ x.astype(np.float64)
        for _ in range(3):                   # the general path, then the replays
            for got in (k(A=A, x=x), ta.einsum("ij,j->i", A, x)):
                assert got.dtype == np.dtype(dtype)
                np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)
    statement = k._default.key.statement
    assert _built(statement, MASKED) and _built(statement, UNROLLED)


def test_each_variant_is_built_only_for_a_matrix_that_takes_it():
    k = ta.compile("z(r) = M(r,c) * v(c)", formats={"M": "csr"})
    statement, v = k._default.key.statement, np.ones(400)
    for M, kind in ((_regular(2000, length=2), None), (_regular(2000), UNROLLED),
                    (_irregular(2000), MASKED)):
        for _ in range(3):
            np.testing.assert_allclose(k(M=M, v=v), M @ v)
        assert kind is None or _built(statement, kind)
        if kind is None:
            assert not _built(statement, MASKED) and not _built(statement, UNROLLED)
    variants = {key.row_loop: format_function(c.function)
                for key, c in kernel_cache().kernels.items() if key.statement == statement}
    assert "// hints: unroll 4" in variants[UNROLLED]
    assert "vectorize 8, masked tail" in variants[MASKED]
    assert "hints" not in variants[PLAIN]


def test_spmv_plus_a_vector_takes_the_choice_too():
    k = ta.compile("y(i) = A(i,j) * x(j) + b(i)", formats={"A": "csr"})
    assert "vectorize(j, 8, tail=adaptive)" in str(k.schedule)
    x, b = np.arange(400.0), np.arange(2000.0)
    for A in (_irregular(2000), _regular(2000)):
        for _ in range(2):
            np.testing.assert_allclose(k(A=A, x=x, b=b), A @ x + b)
    assert _built(k._default.key.statement, MASKED)


def test_a_stated_adaptive_tail_on_a_scaled_spmv_and_a_row_scaling():
    A = _irregular(700)
    k = ta.compile("Y(i,j) = A(i,j) * x(j)", formats={"A": "csr"},
                   schedule="vectorize(j, 8, tail=adaptive)")
    x = np.arange(400.0)
    got = k(A=A, x=x)
    np.testing.assert_allclose(got.toarray() if sp.issparse(got) else got,
                               (A @ sp.diags(x)).toarray())
    k = ta.compile("y(i) = 2 * A(i,j) * x(j) * w(j)", formats={"A": "csr"},
                   schedule="vectorize(j, 4, tail=adaptive)")
    w = np.linspace(0, 1, 400)
    np.testing.assert_allclose(k(A=A, x=x, w=w), 2 * (A @ (x * w)))


def test_a_variant_is_built_at_the_second_call_that_asks_for_it():
    k = ta.compile("w(r) = N(r,c) * u(c)", formats={"N": "csr"})
    statement, u = k._default.key.statement, np.ones(400)
    N = _irregular(3000)
    np.testing.assert_allclose(k(N=N, u=u), N @ u)          # a one-off call: no compile
    assert not _built(statement, MASKED)
    np.testing.assert_allclose(ta.einsum("ij,j->i", N, u), N @ u)
    np.testing.assert_allclose(k(N=N, u=u), N @ u)
    assert _built(statement, MASKED)
    bound = ta.compile("v(r) = M(r,c) * u(c)", formats={"M": "csr"})
    bound.bind(M=_regular(3000), u=u)                        # bound: at once
    assert _built(bound._default.key.statement, UNROLLED)


@pytest.mark.parametrize("matrix, kind", [(_irregular(2000), MASKED),
                                           (_regular(3000), UNROLLED)])
def test_a_variant_runs_only_where_it_pays(matrix, kind, monkeypatch):
    import tensoralg.api as api

    x = np.random.default_rng(1).standard_normal(400)
    k = ta.compile(SPMV, {"A": "CSR", "x": "d"})
    ran = []
    real = api._row_kernel

    def spied(compiled, pos, eager=False):
        chosen = real(compiled, pos, eager)
        ran.append(chosen.key.row_loop)
        return chosen

    monkeypatch.setattr(api, "_row_kernel", spied)
    for pays in (False, True):
        monkeypatch.setattr(api, "row_variant_pays", lambda kind, rows: pays)
        ran.clear()
        for _ in range(3):
            np.testing.assert_allclose(k(A=matrix, x=x), matrix @ x, rtol=1e-12, atol=1e-12)
        assert ran and (kind in ran) is pays


@pytest.mark.parametrize("given, expected", [("1", True), ("0", False)])
def test_the_host_measurement_and_its_override(given, expected, monkeypatch):
    import tensoralg.api as api

    for kind in (MASKED, UNROLLED):
        assert isinstance(api._row_variant_measured(kind, 1 << 12, repeats=2), bool)
    monkeypatch.setattr(api, "_row_variants_pay", {})
    monkeypatch.setenv("TENSORALG_ROW_VARIANTS", given)
    assert MEASURED_ROW_VARIANT_PAYS(MASKED, 3000) is expected
    assert set(api._row_variants_pay) == {(MASKED, 12)}      # 3000 rows: the smallest class
    assert MEASURED_ROW_VARIANT_PAYS(UNROLLED, 40_000) is expected
    assert set(api._row_variants_pay) == {(MASKED, 12), (UNROLLED, 16)}
