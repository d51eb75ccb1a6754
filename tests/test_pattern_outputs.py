"""Sparse outputs that share an operand's pattern (``lower/pattern.py``), the reduction
factoring (``ir/passes/factor.py``) and the jam of a pattern's entries (``ir/passes/jam.py``).

``Z(i,j) = A(i,j) * X(i,k) * Y(k,j)`` writes its values at A's positions and the result gets
copies of A's index arrays. These tests check when the mode is chosen, that results equal the
dense reference across formats, dtypes, backends, thread counts and odd inputs (empty, zero
rows or columns, explicit zeros, rank 0, duplicates and unsorted entries), that the result
never shares memory with the operand, and that rows of 0-9 entries (across the jam of 4) and
every thread split give the serial kernel's values.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import api
from tensoralg.formats.format import CSC, CSR, DCSR, dense
from tensoralg.ir import build as b
from tensoralg.ir import nodes as n
from tensoralg.ir.passes.factor import factor_reductions
from tensoralg.ir.printer import format_function
from tensoralg.lower.concretize import concretize
from tensoralg.lower.pattern import share_pattern, without_pattern
from tensoralg.notation import parse_statement


@pytest.fixture(autouse=True)
def _optimised_builds():
    """Optimised kernels from the first call: the replays and bit-for-bit comparisons
    here assume them (tests/test_tiered_builds.py checks the quick first builds)."""
    with ta.optimised_builds():
        yield


SDDMM = "Z(i,j) = A(i,j) * X(i,k) * Y(k,j)"
DTYPES = ("float32", "float64", "int32", "int64")


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    """A kernel cache of this test's own, without a disk cache."""
    monkeypatch.setattr(api, "_cache", api.KernelCache(api.CompileOptions(cache_dir=None)))


def _program(statement: str, formats: dict, out_format=None):
    stmt = parse_statement(statement)
    index = {name: np.dtype(np.int32) for name in formats}
    return share_pattern(concretize(stmt, formats, index, np.dtype(np.float64), out_format))


def _operands(rows: int, cols: int, rank: int, dtype: str, seed: int = 0):
    """A CSR ``A`` whose row r holds r % 10 entries (so rows cross the jam of 4, and every
    tenth row is empty), one explicit zero, and dense ``X``, ``Y``."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum(np.arange(rows) % 10, cols)
    indptr = np.r_[0, np.cumsum(lengths)].astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(cols, k, replace=False)) for k in lengths]) \
        if rows and cols else np.empty(0, int)
    data = rng.integers(-4, 5, indices.shape[0])
    if data.size:
        data[data.size // 2] = 0                      # an explicit zero: kept in the pattern
    X = rng.integers(-3, 4, (rows, rank))
    Y = rng.integers(-3, 4, (rank, cols))
    dt = np.dtype(dtype)
    A = sp.csr_array((data.astype(dt), indices.astype(np.int32), indptr), shape=(rows, cols))
    return A, X.astype(dt), Y.astype(dt)


def _check(result, A, X, Y, dtype: str) -> None:
    """Values equal to the dense reference, on exactly A's pattern (explicit zeros too)."""
    want = A.toarray() * (X @ Y)
    assert result.shape == A.shape
    np.testing.assert_array_equal(result.indptr, A.indptr)
    np.testing.assert_array_equal(result.indices, A.indices)
    if np.dtype(dtype).kind == "i":
        np.testing.assert_array_equal(result.toarray(), want)
    else:
        tol = 1e-4 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(result.toarray(), want, rtol=tol, atol=tol)


# -- when the mode is chosen -------------------------------------------------------------------

def test_sddmm_shares_the_pattern():
    program = _program(SDDMM, {"A": CSR, "X": dense(2), "Y": dense(2)}, CSR)
    assert program.pattern == "A"
    assert program.nests[0].mode.value == "pattern"
    assert any("has the pattern of A" in note for note in program.notes)


@pytest.mark.parametrize("statement, formats, out", [
    # a union: B's entries are not A's
    ("Z(i,j) = A(i,j) + B(i,j)", {"A": CSR, "B": CSR}, CSR),
    # two sparse factors: the output is their intersection
    ("Z(i,j) = A(i,j) * B(i,j)", {"A": CSR, "B": CSR}, CSR),
    # read transposed: the output's coordinates are not A's
    ("Z(i,j) = A(j,i) * X(i,j)", {"A": CSR, "X": dense(2)}, CSR),
    # a function of A: not a product
    ("Z(i,j) = exp(A(i,j)) * X(i,j)", {"A": CSR, "X": dense(2)}, CSR),
    # a dense output
    ("Z(i,j) = A(i,j) * X(i,j)", {"A": CSR, "X": dense(2)}, dense(2)),
    # a product of sparse matrices (Gustavson's workspace)
    ("Z(i,j) = A(i,k) * B(k,j)", {"A": CSR, "B": CSR}, CSR),
])
def test_other_statements_keep_their_output(statement, formats, out):
    assert _program(statement, formats, out).pattern is None


@pytest.mark.parametrize("fmt", [CSR, CSC, DCSR])
def test_formats_of_the_pattern(fmt):
    program = _program("Z(i,j) = A(i,j) * X(i,j) * 2", {"A": fmt, "X": dense(2)}, fmt)
    assert program.pattern == "A"


def test_pattern_assembled_in_the_operands_order_then_converted():
    """A CSC operand, a CSR output: the loops follow A, the output is assembled as CSC at
    A's positions and converted after the kernel."""
    program = _program("Z(i,j) = A(i,j) * X(i,j)", {"A": CSC, "X": dense(2)}, CSR)
    assert program.pattern == "A" and program.output.format == CSC
    A, _, _ = _operands(14, 11, 1, "float64")
    W = np.random.default_rng(3).standard_normal(A.shape)
    kernel = ta.compile("Z(i,j) = A(i,j) * W(i,j)", formats={"A": "csc", "Z": "csr"})
    result = kernel(A=A.tocsc(), W=W)
    assert result.format == "csr"
    np.testing.assert_allclose(result.toarray(), A.toarray() * W)


def test_gpu_and_partial_schedules_keep_appending():
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, backend="cuda")
    assert kernel.program.pattern is None
    assert not any("has the pattern of" in note for note in kernel.program.notes)
    partials = ta.Schedule().reorder("i", "j", "k").parallelize("i", reduction="partials")
    with pytest.raises(ta.CompileError, match="reduction=partials"):
        # a sparse output never takes per-thread partial outputs; the refusal still names it
        ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, schedule=partials)


def test_gpu_lowering_drops_the_pattern_and_its_note():
    program = _program(SDDMM, {"A": CSR, "X": dense(2), "Y": dense(2)}, CSR)
    appended = without_pattern(program)
    assert appended.pattern is None and appended.nests[0].mode.value == "append"
    assert not any("has the pattern of" in note for note in appended.notes)
    assert len(appended.notes) == len(program.notes) - 1


# -- results -----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ("llvm", "c"))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 23, 16), (41, 9, 3), (12, 30, 0), (0, 5, 4),
                                   (6, 0, 4)])
def test_kernel_matches_reference(shape, dtype, backend):
    A, X, Y = _operands(*shape, dtype)
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, dtype=dtype, backend=backend)
    assert kernel.program.pattern == "A"
    result = kernel(A=A, X=X, Y=Y)
    _check(result, A, X, Y, dtype)
    assert result.data.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ("float64", "int64"))
def test_einsum_matches_reference_and_replays(dtype):
    A, X, Y = _operands(57, 31, 8, dtype)
    for _ in range(3):                     # the first call plans, the next ones replay
        _check(ta.einsum("ij,ik,kj->ij", A, X, Y), A, X, Y, dtype)
    B, P, Q = _operands(20, 44, 8, dtype, seed=5)   # same kinds, another matrix
    _check(ta.einsum("ij,ik,kj->ij", B, P, Q), B, P, Q, dtype)
    # the replay is written out: Y relaid along k, values at A's positions
    entries = [e for e in api.kernel_cache().dispatch.values() if e.fast is not None]
    assert entries and all(e.pattern == 0 for e in entries)
    source = entries[0].fast.source
    assert "relayout(o2, (1, 0))" in source and "finish(out, o0" in source


def test_result_owns_its_arrays():
    A, X, Y = _operands(30, 20, 4, "float64")
    kept = A.copy()
    result = ta.einsum("ij,ik,kj->ij", A, X, Y)
    for array in (result.indptr, result.indices):
        assert not np.shares_memory(array, A.indptr) and not np.shares_memory(array, A.indices)
    A.indices[:] = 0                       # the operand changes: the result does not
    A.indptr[1:] = A.indptr[-1]
    _check(result, kept, X, Y, "float64")


def test_non_canonical_operand():
    """Duplicates and unsorted columns: bound as the summed, sorted matrix, as before."""
    A = sp.csr_array((np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 0, 2, 1]),
                      np.array([0, 3, 3, 4])), shape=(3, 4))
    assert not A.has_canonical_format
    X, Y = np.arange(6.0).reshape(3, 2), np.arange(8.0).reshape(2, 4)
    result = ta.einsum("ij,ik,kj->ij", A, X, Y)
    np.testing.assert_allclose(result.toarray(), A.toarray() * (X @ Y))
    assert result.nnz == 3


def test_single_entry_and_all_zero_rows():
    A = sp.csr_array(([5.0], [3], [0, 0, 0, 1, 1]), shape=(4, 7))
    X, Y = np.ones((4, 3)), np.arange(21.0).reshape(3, 7)
    result = ta.einsum("ij,ik,kj->ij", A, X, Y)
    assert result.nnz == 1 and result[2, 3] == 5.0 * (3 + 10 + 17)


@pytest.mark.parametrize("fmt, convert", [("csc", "tocsc"), ("dcsr", None)])
def test_other_pattern_formats(fmt, convert):
    A, X, _ = _operands(25, 18, 1, "float64")
    W = np.random.default_rng(2).standard_normal(A.shape)
    kernel = ta.compile("Z(i,j) = A(i,j) * W(i,j)", formats={"A": fmt, "Z": fmt})
    assert kernel.program.pattern == "A"
    operand = getattr(A, convert)() if convert else ta.Tensor.from_scipy(A, fmt)
    result = kernel(A=operand, W=W)
    got = result.toarray() if hasattr(result, "toarray") else result.to_numpy()
    np.testing.assert_allclose(got, A.toarray() * W)


def test_csf_pattern():
    rng = np.random.default_rng(4)
    dense_b = rng.integers(-3, 4, (6, 5, 7)) * (rng.random((6, 5, 7)) < 0.3)
    B = ta.Tensor.from_numpy(dense_b.astype(float), "csf")
    c = rng.standard_normal(7)
    kernel = ta.compile("Z(i,j,k) = B(i,j,k) * c(k)", formats={"B": "csf", "Z": "csf"})
    assert kernel.program.pattern == "B"
    result = kernel(B=B, c=c)
    np.testing.assert_allclose(result.to_numpy(), dense_b * c)
    assert result.nnz == B.nnz


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_thread_ranges_give_the_serial_values(threads):
    A, X, Y = _operands(301, 150, 16, "float64", seed=3)
    serial = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"})(A=A, X=X, Y=Y)
    split = ta.Schedule().reorder("i", "j", "k").parallelize("i", threads=threads)
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, schedule=split)
    assert kernel.program.pattern == "A"
    result = kernel(A=A, X=X, Y=Y)
    np.testing.assert_array_equal(result.data, serial.data)
    _check(result, A, X, Y, "float64")


def test_automatic_split(two_threads):
    """Work enough for two threads: the general path splits the rows; same values."""
    A = sp.random(4000, 3000, density=0.01, format="csr", random_state=1)
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((4000, 16)), rng.standard_normal((16, 3000))
    result = ta.einsum("ij,ik,kj->ij", A, X, Y)
    np.testing.assert_allclose(result.toarray(), A.toarray() * (X @ Y), rtol=1e-12, atol=1e-12)


def test_jammed_entries_in_the_kernel():
    source = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}).source("ir")
    assert "jam0_l3_sum" in source           # four entries' dot products side by side
    assert "A_vals[jam0_r0] * jam0_l0_sum;" in source   # A's value factored out of the sum


# -- the factoring pass ------------------------------------------------------------------------

def _reduction(body_extra: tuple = ()) -> n.Function:
    k, m, p = b.var("k", n.I64), b.var("m", n.I64), b.var("p", n.I64)
    a, x, y = b.var("a", n.Ptr(n.F64)), b.var("x", n.Ptr(n.F64)), b.var("y", n.Ptr(n.F64))
    acc = b.var("acc", n.F64)
    loop = b.for_(k, 0, m, b.assign(acc, b.add(acc, b.mul(b.load(a, p), b.load(x, k)))),
                  *body_extra)
    return b.function("f", [b.param(m, "m"), b.param(p, "p"), b.param(a, "a"),
                            b.param(x, "x"), b.param(y, "y", output=True)],
                      b.block(b.declare(acc, 0.0), loop, b.store(y, b.i64(0), acc)))


def test_factor_moves_the_invariant_factor_out():
    text = format_function(factor_reductions(_reduction()))
    assert "sum = sum + x[k];" in text and "acc = acc + a[p] * sum;" in text


def test_factor_leaves_loops_with_other_statements():
    y, k = b.var("y", n.Ptr(n.F64)), b.var("k", n.I64)
    f = _reduction((b.store(y, k, b.const(1.0, n.F64)),))
    assert factor_reductions(f) == f


def test_factor_leaves_a_variant_factor():
    k, m = b.var("k", n.I64), b.var("m", n.I64)
    x = b.var("x", n.Ptr(n.F64))
    acc = b.var("acc", n.F64)
    f = b.function("f", [b.param(m, "m"), b.param(x, "x")],
                   b.block(b.declare(acc, 0.0),
                           b.for_(k, 0, m, b.assign(acc, b.add(acc, b.mul(b.load(x, k),
                                                                          b.load(x, k)))))))
    assert factor_reductions(f) == f


def test_factored_program_results():
    """A scaled reduction into a dense output (factored) against NumPy, integers exactly."""
    rng = np.random.default_rng(8)
    A = rng.integers(-5, 6, (9, 13))
    s = rng.integers(-3, 4, 9)
    got = ta.einsum("i,ij,ij->i", s, A, A)
    np.testing.assert_array_equal(got, s * (A * A).sum(axis=1))

