"""Dense operands stored transposed for the loops (``lower/concretize.py``, ``strided_dense``).

SDDMM's loops run i, j, k over a CSR ``A``: ``Y(k,j)`` is read along k, its first stored mode,
once per stored entry. The compiler converts ``Y`` to mode order (1, 0) on each call; these
tests check the results against NumPy and against the unconverted kernel, and that the
conversion is made only where the rule asks for it.
"""
import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.formats.format import Format, dense
from tensoralg.lower.concretize import concretize
from tensoralg.notation import parse_statement

SDDMM = "Z(i,j) = A(i,j) * X(i,k) * Y(k,j)"
DTYPES = ("float32", "float64", "int64")
BACKENDS = ("llvm", "c")
# (rows, columns, rank): one element, widths past 4/8/16-lane vectors and 8-row tiles,
# rank 1 and rank 0 (every dot product empty).
SHAPES = ((1, 1, 1), (7, 9, 17), (33, 70, 3), (19, 5, 1), (6, 11, 0))


def _fresh_cache(monkeypatch) -> None:
    """A kernel cache of its own: an explicit ``"dd"`` and the default dense format compare
    equal in the cache's key (``api.KernelKey``), so one cache would hand the second of them
    the kernel compiled for the first."""
    from tensoralg import api

    monkeypatch.setattr(api, "_cache", api.KernelCache(api.CompileOptions(cache_dir=None)))


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    _fresh_cache(monkeypatch)


def _operands(shape: tuple[int, int, int], dtype: str, seed: int = 0):
    """A CSR ``A`` with some rows emptied, and dense ``X`` (rows x rank), ``Y`` (rank x cols)."""
    rows, cols, rank = shape
    rng = np.random.default_rng(seed)
    mask = rng.random((rows, cols)) < 0.4
    mask[::3] = False                                   # empty rows, the first among them
    values = rng.integers(-4, 5, size=(rows, cols)) * mask
    X = rng.integers(-3, 4, size=(rows, rank))
    Y = rng.integers(-3, 4, size=(rank, cols))
    if dtype != "int64":
        values = values + 0.25 * mask
        X, Y = X + rng.random(X.shape), Y + rng.random(Y.shape)
    dt = np.dtype(dtype)
    return sp.csr_array(values.astype(dt)), X.astype(dt), Y.astype(dt)


def _expected(A, X, Y) -> np.ndarray:
    return A.toarray() * (X @ Y)


def _dense(result) -> np.ndarray:
    """A kernel's result as an array: scipy operands give a scipy result, others a Tensor."""
    for method in ("toarray", "to_numpy"):
        if hasattr(result, method):
            return getattr(result, method)()
    return np.asarray(result)


def _check_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    if dtype == "int64":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-12,
                                   atol=1e-4 if dtype == "float32" else 1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_sddmm_converts_y_and_matches_numpy(shape, dtype, backend, monkeypatch):
    A, X, Y = _operands(shape, dtype)
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, dtype=dtype, backend=backend)
    assert dict(kernel.program.conversions) == {"Y__10": "Y"}
    assert kernel.program.tensor("Y__10").format == Format("dd", order=(1, 0))
    got = _dense(kernel(A=A, X=X, Y=Y))
    _check_close(got, _expected(A, X, Y), dtype)
    # The same statement with Y's format given (no conversion) sums the same products; a
    # contiguous k loop may be vectorized into partial sums, so floats agree to rounding and
    # integers exactly.
    _fresh_cache(monkeypatch)
    kept = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr", "Y": "dd"}, dtype=dtype,
                      backend=backend)
    assert kept.program.conversions == ()
    _check_close(got, _dense(kept(A=A, X=X, Y=Y)), dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sddmm_note_names_the_conversion(backend):
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, backend=backend)
    notes = [line for line in kernel.source("ir").splitlines() if "operand Y" in line]
    assert len(notes) == 1 and "innermost loop over k" in notes[0] and "(1, 0)" in notes[0]
    assert str(kernel.schedule).startswith("reorder(i, j, k)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_einsum_sddmm(dtype):
    A, X, Y = _operands((23, 40, 5), dtype, seed=1)
    got = ta.einsum("ij,ik,kj->ij", A, X, Y, optimize=False)
    _check_close(_dense(got), _expected(A, X, Y), dtype)


@pytest.mark.parametrize("given", ["dd", Format("dd"), Format("dd", order=(1, 0))])
def test_given_y_format_is_kept(given):
    A, X, Y = _operands((9, 12, 4), "float64")
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr", "Y": given})
    assert kernel.program.conversions == ()
    assert "operand Y" not in kernel.source("ir")
    if isinstance(given, Format) and not given.is_identity_order:
        Y = ta.Tensor.from_numpy(Y, given)        # stored as compiled for: no warning
    _check_close(_dense(kernel(A=A, X=X, Y=Y)), _expected(A, X, Y), "float64")


def test_scheduled_order_keeps_layout():
    A, X, Y = _operands((9, 12, 4), "float64")
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"},
                        schedule=ta.Schedule().reorder("i", "j", "k"))
    assert kernel.program.conversions == ()
    _check_close(_dense(kernel(A=A, X=X, Y=Y)), _expected(A, X, Y), "float64")


def _conversions(statement: str, formats: dict) -> dict:
    stmt = parse_statement(statement)
    program = concretize(stmt, formats, {}, np.dtype(np.float64), None)
    return dict(program.conversions)


def test_rule_at_the_program_level():
    csr = Format("ds", name="csr")
    assert _conversions(SDDMM, {"A": csr, "X": dense(2), "Y": dense(2)}) == {"Y__10": "Y"}
    # A format the user wrote, even equal to the default, is kept.
    assert _conversions(SDDMM, {"A": csr, "X": dense(2), "Y": Format("dd")}) == {}
    # Dense-only: the dense path lays out and tiles its own operands.
    assert _conversions(SDDMM, {"A": dense(2), "X": dense(2), "Y": dense(2)}) == {}
    # SpMM reads B(k,j) along j, its last stored mode.
    assert _conversions("C(i,j) = A(i,k) * B(k,j)", {"A": csr, "B": dense(2)}) == {}
    # Every loop addresses X: each element is read at most once, a copy could not pay.
    assert _conversions("y(i) = A(i,j) * X(j,i)", {"A": csr, "X": dense(2)}) == {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_transposed_factor_in_a_three_way_product(backend):
    """MTTKRP's ``D(l,j)`` under loops i, j, k, l: converted, and still equal to NumPy."""
    rng = np.random.default_rng(3)
    B = rng.integers(-2, 3, size=(5, 6, 7)) * (rng.random((5, 6, 7)) < 0.3)
    C, D = rng.integers(-3, 4, size=(6, 3)), rng.integers(-3, 4, size=(7, 3))
    kernel = ta.compile("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", formats={"B": "csf"},
                        dtype="int64", backend=backend)
    assert "D" in dict(kernel.program.conversions).values()
    got = kernel(B=ta.Tensor.from_numpy(B, "csf"), C=C, D=D)
    np.testing.assert_array_equal(_dense(got), np.einsum("ikl,kj,lj->ij", B, C, D))


def test_a_written_dense_format_and_the_default_are_different_cached_kernels():
    # Format equality ignores names: the kernel key keeps the operands whose layout the
    # compiler may choose, so a written "dd" never gets the default's relaid kernel.
    import warnings

    import scipy.sparse as sp

    import tensoralg as ta

    A = sp.random_array((20, 30), density=0.2, format="csr", random_state=0)
    X, Y = np.ones((20, 3)), np.arange(90.0).reshape(3, 30)
    statement = "Z(i,j) = A(i,j) * X(i,k) * Y(k,j)"
    default = ta.compile(statement, formats={"A": "csr", "Z": "csr"})
    written = ta.compile(statement, formats={"A": "csr", "Z": "csr", "Y": "dd"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kernel in (default, written):
            np.testing.assert_allclose(kernel(A=A, X=X, Y=Y).toarray(),
                                       A.toarray() * (X @ Y))
    assert "Y__10" in default.source("ir") and "Y__10" not in written.source("ir")


# -- the variant that keeps Y's layout, for calls that read Y fewer times than it holds values


def _hypersparse(columns: int, entries: int, dtype: str, rank: int = 16, seed: int = 5):
    """A CSR ``A`` (64 x columns) with ``entries`` stored values (a row left empty), and dense
    ``X`` (64 x rank) and ``Y`` (rank x columns): ``Y`` holds far more values than the loops
    read when entries * rank < rank * columns."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(1, 64, entries)
    cols = rng.integers(0, columns, entries)
    values = rng.integers(-4, 5, entries).astype(dtype)
    A = sp.csr_array((values, (rows, cols)), shape=(64, columns))
    A.sum_duplicates()
    X = rng.integers(-3, 4, size=(64, rank)).astype(dtype)
    Y = rng.integers(-3, 4, size=(rank, columns)).astype(dtype)
    return A, X, Y


def _kept_keys() -> list:
    from tensoralg import api

    return [key for key in api.kernel_cache().kernels if key.kept_layouts]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_few_reads_run_the_kept_layout_variant(dtype, backend):
    from tensoralg import api
    from tensoralg.api import COPY_MIN_VALUES, copies_pay

    A, X, Y = _hypersparse(8192, 40, dtype)
    assert Y.size >= COPY_MIN_VALUES and A.nnz * Y.shape[0] < Y.size
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"}, dtype=dtype, backend=backend)
    for _ in range(3):          # the general path, then the recorded replay, which declines
        _check_close(_dense(kernel(A=A, X=X, Y=Y)), _expected(A, X, Y), dtype)
    relaid = [c for key, c in api.kernel_cache().kernels.items()
              if not key.kept_layouts and c.program.conversions]
    assert relaid and not any(copies_pay(c, {"A": A, "X": X, "Y": Y}) for c in relaid)
    kept = _kept_keys()
    assert len(kept) == 1 and kept[0].backend == backend
    # many entries: the relaid kernel itself (the recorded replay accepts the call)
    B, X2, Y2 = _hypersparse(8192, 20000, dtype, seed=6)
    _check_close(_dense(kernel(A=B, X=X2, Y=Y2)), _expected(B, X2, Y2), dtype)
    _check_close(_dense(kernel(A=A, X=X, Y=Y)), _expected(A, X, Y), dtype)
    assert len(_kept_keys()) == 1


def test_einsum_keeps_layout_for_few_reads_and_copies_for_many():
    A, X, Y = _hypersparse(8192, 40, "float64")
    for _ in range(3):
        got = ta.einsum("ij,ik,kj->ij", A, X, Y, optimize=False)
        _check_close(_dense(got), _expected(A, X, Y), "float64")
    assert len(_kept_keys()) == 1
    B, X2, Y2 = _hypersparse(8192, 20000, "float64", seed=6)
    for _ in range(2):
        got = ta.einsum("ij,ik,kj->ij", B, X2, Y2, optimize=False)
        _check_close(_dense(got), _expected(B, X2, Y2), "float64")


def test_small_operands_are_copied_whatever_the_reads():
    """Under ``COPY_MIN_VALUES`` the copy is cheap: one kernel, no variant."""
    A, X, Y = _hypersparse(1000, 3, "float64")
    kernel = ta.compile(SDDMM, formats={"A": "csr", "Z": "csr"})
    _check_close(_dense(kernel(A=A, X=X, Y=Y)), _expected(A, X, Y), "float64")
    assert _kept_keys() == []


def test_kept_layouts_at_the_program_level():
    from tensoralg.lower.concretize import kept_layouts

    csr = Format("ds", name="csr")
    formats = {"A": csr, "X": dense(2), "Y": dense(2)}
    program = concretize(parse_statement(SDDMM), formats, {}, np.dtype(np.float64), None)
    kept = kept_layouts(program, formats)
    assert kept.conversions == () and kept.tensor("Y").format == dense(2)
    assert "Y__10" not in str(kept) and "Y(k,j)" in str(kept)
    assert any("own layout" in note for note in kept.notes)
    assert not any("converted to" in note for note in kept.notes)
    # nothing to keep: the same program
    plain = concretize(parse_statement("y(i) = A(i,j) * x(j)"), {"A": csr, "x": dense(1)}, {},
                       np.dtype(np.float64), None)
    assert kept_layouts(plain, {"A": csr, "x": dense(1)}) is plain
    # a sparse operand converted for the loops stays converted
    csc = Format("ds", order=(1, 0), name="csc")
    both = {"A": csr, "B": csc}
    mixed = concretize(parse_statement("C(i,j) = A(i,j) * B(i,j)"), both, {},
                       np.dtype(np.float64), None)
    assert kept_layouts(mixed, both).conversions == mixed.conversions
