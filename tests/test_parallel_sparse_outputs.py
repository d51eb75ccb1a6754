"""Sparse outputs assembled on several threads: each thread range assembles its own rows and
the runtime joins the pieces (``runtime/stitch.py``), or, for a CSR product, writes the rows
the runtime counted first in place (``lower/counted.py``). On skewed matrices with empty rows, every
thread count gives exactly the serial kernel's arrays (the same sums, in the same order), for
CSR, CSC and DCSR outputs, on both CPU backends; ranges are cut by work (a sparse product's
multiply-adds per row), and the automatic split (``ta.set_num_threads``) takes the same path."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
import tensoralg.api as api
import tensoralg.runtime.threads as threads_module
from tensoralg.lower.scheduling import RowWork, row_work
from tensoralg.runtime.threads import row_weights

ROOT = Path(__file__).resolve().parents[1]
SPGEMM = "C(i,j) = A(i,k) * B(k,j)"
ADD = "C(i,j) = A(i,j) + B(i,j)"
SDDMM = "C(i,j) = A(i,j) * P(i,k) * Q(k,j)"


def _skewed(rows: int, cols: int, rng: np.random.Generator, dtype: str) -> sp.csr_array:
    """Power-law row lengths, a third of the rows empty, one full row."""
    lengths = np.minimum((rng.pareto(1.2, rows) * 2).astype(int), cols)
    lengths[rng.random(rows) < 0.33] = 0
    if rows > 3 and cols:
        lengths[rows // 3] = cols
    indptr = np.r_[0, np.cumsum(lengths)]
    indices = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]) \
        if rows else np.empty(0, int)
    data = rng.integers(-4, 5, len(indices)).astype(dtype)
    data[data == 0] = 2
    return sp.csr_array((data, indices.astype(np.int32), indptr), shape=(rows, cols))


def _arrays(result) -> list[np.ndarray]:
    """Every stored array of a result (scipy or ta.Tensor), to compare bit for bit."""
    if isinstance(result, ta.Tensor):
        return [a for level in result.levels for a in (level.pos, level.crd) if a is not None] \
            + [result.vals]
    return [result.indptr, result.indices, result.data]


def _assert_same(got, want) -> None:
    for a, b in zip(_arrays(got), _arrays(want), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def count_ranges(monkeypatch):
    """How many ranges each sparse-output call ran (0: it ran whole, on one thread): joined
    pieces (``run_ranges``), or values written in place at a pattern's positions or at the
    offsets of counted rows (``_launch``, as a dense output's ranges run)."""
    seen: list[int] = []
    original, launch = api.run_ranges, api._launch

    def spy(function, args, plan, bounds, capacity, run_calls, **options):
        seen.append(len(bounds) - 1)
        return original(function, args, plan, bounds, capacity, run_calls, **options)

    def spy_launch(compiled, args, buffers, bounds):
        if bounds is not None and (compiled.program.pattern is not None or
                                   compiled.program.counted is not None):
            seen.append(len(bounds) - 1)
        return launch(compiled, args, buffers, bounds)

    monkeypatch.setattr(api, "run_ranges", spy)
    monkeypatch.setattr(api, "_launch", spy_launch)
    return seen


CASES = [
    (SPGEMM, {"A": "ds", "B": "ds", "C": "ds"}, None),
    (SPGEMM, {"A": "ds", "B": "ds", "C": "ss"}, None),
    (SPGEMM, {"A": "ds", "B": "ds", "C": "ds"}, "precompute('A(i,k) * B(k,j)', j)"),
    (ADD, {"A": "ds", "B": "ds", "C": "ds"}, None),
    (ADD, {"A": "ds", "B": "ds", "C": "ss"}, None),
    (ADD, {"A": "ds", "B": "ds", "C": "ds"}, "precompute('A(i,j) + B(i,j)', j)"),
    (SDDMM, {"A": "ds", "C": "ds"}, None),
]


def _operands(statement: str, rng: np.random.Generator, rows: int, cols: int, dtype: str):
    A = _skewed(rows, cols, rng, dtype)
    if statement == SPGEMM:
        return dict(A=A, B=_skewed(cols, rows, rng, dtype))
    if statement == ADD:
        return dict(A=A, B=_skewed(rows, cols, rng, dtype))
    return dict(A=A, P=rng.integers(-3, 4, (rows, 3)).astype(dtype),
                Q=rng.integers(-3, 4, (3, cols)).astype(dtype))


SIZES = [(90, 70), (5, 3), (1, 4), (0, 5), (6, 0), (400, 300)]


@pytest.fixture
def any_work_splits(monkeypatch):
    """Every call is worth splitting: small inputs take the threaded path."""
    monkeypatch.setattr(threads_module, "MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr(threads_module, "MIN_WORK_PER_THREAD_NATIVE", 1)
    monkeypatch.setattr(threads_module, "COUNTED_MIN_PER_ROW", 0)   # short rows counted too
    before = ta.get_num_threads()
    yield
    ta.set_num_threads(before)


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("statement, formats, extra", CASES)
def test_thread_ranges_give_the_serial_kernels_arrays(statement, formats, extra, backend,
                                                      count_ranges, any_work_splits):
    rng = np.random.default_rng(len(statement) + len(formats["C"]))
    dtype = "float64" if backend == "llvm" else "int64"
    serial = ta.compile(statement, formats=formats, dtype=dtype, backend=backend,
                        schedule="; ".join(filter(None, [extra, "serial()"])))
    split = ta.compile(statement, formats=formats, dtype=dtype, backend=backend,
                       schedule="; ".join(filter(None, [extra, "parallelize(i)"])))
    for threads in (2, 3):
        ta.set_num_threads(threads)
        for rows, cols in SIZES:
            operands = _operands(statement, rng, rows, cols, dtype)
            _assert_same(split(**operands), serial(**operands))
    if split.program.pattern is not None or split._default.counted_by is not None:
        # SDDMM writes its values at A's positions, and a CSR product its counted rows in
        # place: their rows split as a dense output's do (on the native pool, several ranges
        # per thread), and nothing is joined
        assert max(count_ranges) >= 3 and min(count_ranges) >= 1
    else:
        assert max(count_ranges) == 3 and min(count_ranges) >= 1


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_automatic_split_joins_the_same_arrays(dtype, count_ranges, any_work_splits):
    rng = np.random.default_rng(7)
    formats = {"A": "ds", "B": "ds", "C": "ds"}
    kernels = [ta.compile(s, formats=formats, dtype=dtype) for s in (SPGEMM, ADD)]
    serial = [ta.compile(s, formats=formats, dtype=dtype, schedule="serial()")
              for s in (SPGEMM, ADD)]
    for threads in (1, 2, 3):
        ta.set_num_threads(threads)
        for rows, cols in [(200, 150), (40, 40)]:
            for kernel, reference, statement in zip(kernels, serial, (SPGEMM, ADD)):
                count_ranges.clear()
                operands = _operands(statement, rng, rows, cols, dtype)
                _assert_same(kernel(**operands), reference(**operands))
                # A sum's pieces would cost as much to join as the threads save: it runs
                # whole unless a schedule asks for threads. The product's rows are counted
                # and written in place, several ranges a thread on the native pool.
                split = threads > 1 and statement == SPGEMM
                assert (max(count_ranges) >= threads) if split else not count_ranges


def test_spgemm_ranges_are_cut_by_multiply_adds():
    # Row 0 of A reaches B's one long row; rows 1-5 reach short ones: by A's entries the rows
    # weigh alike (halves [0, 3) and [3, 6)), by multiply-adds row 0 outweighs all the others.
    A = sp.csr_array(np.array([[1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 1],
                               [0, 1, 0]], dtype=float))
    B = sp.csr_array(np.array([[1] * 100, [1, 1] + [0] * 98, [0, 0, 1, 1] + [0] * 96],
                              dtype=float))
    operands = {name: ta.Tensor.from_scipy(m) for name, m in (("A", A), ("B", B))}
    weights = row_weights(RowWork(("A",), (("A", "B"),)), operands)
    assert weights.tolist() == [0, 101, 104, 107, 110, 113, 116]
    assert threads_module.split(6, 2, weights).tolist() == [0, 1, 6]
    assert threads_module.split(6, 2, operands["A"].levels[1].pos).tolist() == [0, 3, 6]
    program = ta.compile(SPGEMM, formats={"A": "ds", "B": "ds", "C": "ds"}).program
    assert row_work(program, "i") == RowWork(("A",), (("A", "B"),))


def test_a_product_with_few_entries_but_many_multiply_adds_is_split(count_ranges):
    # 2 x 8e4 stored entries would not be worth a second thread; their 8e6 multiply-adds are.
    A = sp.random_array((800, 800), density=0.125, format="csr", random_state=5)
    kernel = ta.compile(SPGEMM, formats={"A": "ds", "B": "ds", "C": "ds"})
    before = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        got = kernel(A=A, B=A)
    finally:
        ta.set_num_threads(before)
    assert len(count_ranges) == 1 and count_ranges[0] >= 2
    np.testing.assert_allclose(got.toarray(), (A @ A).toarray(), rtol=1e-12, atol=1e-12)


def test_a_csf_output_still_runs_on_one_thread():
    with pytest.raises(ta.CompileError, match="only a matrix whose second level is compressed"):
        ta.compile("C(i,j,k) = A(i,j,k) + B(i,j,k)",
                   formats={"A": "sss", "B": "sss", "C": "sss"}, schedule="parallelize(i)")


SANITIZED = textwrap.dedent("""
    import numpy as np, scipy.sparse as sp, tensoralg as ta
    import tensoralg.api as api
    import tensoralg.runtime.threads as threads
    threads.MIN_WORK_PER_THREAD = threads.MIN_WORK_PER_THREAD_NATIVE = 1
    threads.COUNTED_MIN_PER_ROW = 0  # CSR products count their rows and fill them in place
    rng = np.random.default_rng(0)
    A = sp.random_array((37, 70), density=0.15, format="csr", random_state=1)
    A = sp.csr_array(A.toarray() * (rng.random((37, 1)) > 0.3))     # all-zero rows
    B = sp.random_array((37, 70), density=0.15, format="csr", random_state=2)
    M = sp.random_array((70, 45), density=0.1, format="csr", random_state=3)
    x = rng.standard_normal(70)
    cases = [(%(SPGEMM)r, dict(A=A, B=M), (A @ M).toarray()),
             (%(ADD)r, dict(A=A, B=B), (A + B).toarray())]
    count = 0
    for statement, operands, want in cases:
        for out in ("ds", "ss"):
            for extra in ("", "precompute('%%s', j); " %% statement.split(" = ")[1]):
                k = ta.compile(statement, formats={"A": "ds", "B": "ds", "C": out},
                               backend="c", schedule=extra + "parallelize(i)")
                for n in (1, 2, 3):
                    ta.set_num_threads(n)
                    got = k(**operands)
                    got = got.to_numpy() if isinstance(got, ta.Tensor) else got.toarray()
                    assert np.allclose(got, want), (statement, out, extra, n)
                count += 1
    S = sp.random_array((70, 70), density=0.1, format="csr", random_state=4)
    k = ta.compile("y(i) = A(i,j) * (B(j,k) * x(k))", formats={"A": "ds", "B": "ds"},
                   backend="c", schedule="precompute('B(j,k) * x(k)', j)")
    assert np.allclose(k(A=A, B=S, x=x), A @ (S @ x))
    # a count that disagrees with the kernel's rows is reported, and nothing is written past
    k = ta.compile(%(SPGEMM)r, formats={"A": "ds", "B": "ds", "C": "ds"}, backend="c",
                   schedule="parallelize(i, threads=2)")
    counter = api.kernel_cache().rows
    right = counter.pos
    counter.pos = lambda *a, **o: np.maximum(right(*a, **o) - 1, 0)
    try:
        k(A=A, B=M)
        raise SystemExit("a wrong count was not reported")
    except ta.KernelRuntimeError:
        pass
    print("kernels", count + 2)
""" % {"SPGEMM": SPGEMM, "ADD": ADD})


@pytest.mark.slow
def test_thread_ranges_and_joins_stay_in_bounds_under_sanitizers(tmp_path):
    gcc = shutil.which("gcc")
    runtime = gcc and subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True,
                                     text=True).stdout.strip()
    if not runtime or not os.path.isabs(runtime) or not os.path.exists(runtime):
        pytest.skip("gcc with AddressSanitizer is not installed")
    env = dict(os.environ, LD_PRELOAD=runtime, ASAN_OPTIONS="detect_leaks=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
               CC="gcc -fsanitize=address,undefined -fno-sanitize-recover=all",
               TENSORALG_CACHE_DIR=str(tmp_path), TENSORALG_DISK_CACHE="0",
               PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", SANITIZED], env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert int(result.stdout.split("kernels")[-1]) == 10


@pytest.fixture
def bounded(monkeypatch):
    """Every product starts from its bound on the output's entries (``threads.entry_bounds``),
    and every result gives back the room it did not use (``wrap.shrunk``)."""
    import tensoralg.runtime.wrap as wrap
    monkeypatch.setattr(threads_module, "MIN_BOUND_ENTRIES", 0)
    monkeypatch.setattr(wrap, "SHRINK_MIN_BYTES", 0)
    seen: list[int] = []
    original = api.first_capacity

    def spy(bounds, floor):
        seen.append(original(bounds, floor))
        return seen[-1]

    monkeypatch.setattr(api, "first_capacity", spy)
    return seen


def _dense_rows(rows: int, cols: int, rng: np.random.Generator, dtype: str) -> sp.csr_array:
    """Mostly short rows, a few full ones: a square has dense rows and columns, whose products
    fill most of the output (as adder_dcop_05 squared)."""
    A = _skewed(rows, cols, rng, dtype).tolil()
    for r in range(0, rows, max(1, rows // 4)):
        A[r, :] = 1
    A[:, : max(1, cols // 5)] = 2
    return sp.csr_array(A, dtype=dtype)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("out", ["ds", "ss"])
def test_products_start_from_their_entry_bound(threads, out, bounded, any_work_splits):
    rng = np.random.default_rng(threads)
    kernel = ta.compile(SPGEMM, formats={"A": "ds", "B": "ds", "C": out})
    ta.set_num_threads(threads)
    for rows, cols, dtype in [(120, 90, "float64"), (7, 300, "float32"), (0, 4, "float64"),
                              (5, 0, "float64")]:
        A, B = _dense_rows(rows, cols, rng, dtype), _dense_rows(cols, rows, rng, dtype)
        bounded.clear()
        got = kernel(A=A, B=B)
        want = (A.astype(np.float64) @ B.astype(np.float64)).toarray()
        dense = got.to_numpy() if isinstance(got, ta.Tensor) else got.toarray()
        np.testing.assert_allclose(dense, want, rtol=1e-5)
        if not bounded:
            # a CSR product split over threads counts its rows first and allocates exactly
            assert out == "ds" and threads > 1 and rows >= 2 * threads_module.MIN_ROWS_PER_THREAD
            continue
        # The first capacity is the bound: a row's multiply-adds, at most a full row of the
        # output.
        reach = np.add.reduceat(np.r_[np.diff(B.indptr)[A.indices], 0], A.indptr[:-1]) \
            * (np.diff(A.indptr) > 0) if rows else np.zeros(0, int)
        bound = np.minimum(reach, B.shape[1]).sum()
        assert bounded[0] == max(16, A.nnz + B.nnz, bound)


def test_a_short_bound_or_a_capped_one_only_means_growing(bounded, monkeypatch):
    rng = np.random.default_rng(3)
    A, B, D = (_dense_rows(60, 60, rng, "float64") for _ in range(3))
    # Three factors: the bound counts A times B only, short of what A B D fills.
    three = ta.compile("C(i,j) = A(i,k) * B(k,l) * D(l,j)",
                       formats={"A": "ds", "B": "ds", "D": "ds", "C": "ds"})
    np.testing.assert_allclose(three(A=A, B=B, D=D).toarray(), (A @ B @ D).toarray())
    monkeypatch.setattr(threads_module, "MAX_FIRST_CAPACITY", 5)
    kernel = ta.compile(SPGEMM, formats={"A": "ds", "B": "ds", "C": "ds"})
    for threads in (1, 2):
        ta.set_num_threads(threads)
        np.testing.assert_allclose(kernel(A=A, B=B).toarray(), (A @ B).toarray())
    assert bounded[-1] == A.nnz + B.nnz      # the capped bound gives way to the usual guess


@pytest.mark.parametrize("threads", [1, 2])
def test_an_output_past_two_billion_elements_keeps_int32_indices(threads, any_work_splits):
    """A 60000 x 60000 product has more elements than int32 counts, so its kernel assembles
    int64 indices; its entries fit, and the result comes back with int32 ones, as scipy's own
    product does, whether one range or several assembled it."""
    rng = np.random.default_rng(threads)
    A = sp.random(60000, 60000, density=3e-5, format="csr", random_state=rng)
    A.sort_indices()
    ta.set_num_threads(threads)
    schedule = "parallelize(i)" if threads > 1 else None
    got = ta.compile(SPGEMM, formats={"A": "ds", "B": "ds", "C": "ds"},
                     schedule=schedule)(A=A, B=A)
    want = (A @ A).tocsr()
    want.sort_indices()
    assert got.indices.dtype == got.indptr.dtype == np.int32
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_allclose(got.data, want.data)
    T = ta.Tensor.from_scipy(A)
    tensor = ta.einsum("ij,jk->ik", T, T, out_format="csr")
    assert tensor.index_dtype == np.int32 and tensor.nnz == want.nnz


def test_a_large_shape_product_bounded_below_two_billion_entries_assembles_int32():
    """Past 2**31 elements, a two-factor product whose bound on entries (the right factor's
    stored entries times the longest row of the left... as ``api._bounding_pair`` picks them)
    fits is compiled with int32 positions directly; one whose bound does not fit keeps int64
    (narrowed after), and a call of that kind after an int32 one is not replayed with the
    int32 kernel. Every result is exact."""
    from tensoralg.api import _signature, kernel_cache

    rng = np.random.default_rng(31)
    n = 60000
    A = sp.random(n, n, density=3e-5, format="csr", random_state=rng)
    A.sort_indices()
    first = ta.einsum("ij,jk->ik", A, A)
    entry = kernel_cache().dispatch[_signature("ij,jk->ik", (A, A), None)]
    assert entry.compiled.key.out_index_dtype == np.int32 and entry.bounded_by is not None
    want = (A @ A).tocsr()
    want.sort_indices()
    np.testing.assert_array_equal(first.indptr, want.indptr)
    np.testing.assert_array_equal(first.indices, want.indices)
    np.testing.assert_allclose(first.data, want.data)
    # one full row on the right: 36000 * 60000 > 2**31 bounds the output, though it is small
    full = sp.csr_matrix((np.ones(n), (np.zeros(n, np.int64), np.arange(n))), shape=(n, n))
    B = (A + full).tocsr()
    B.sort_indices()
    C = sp.random(n, n, density=1e-5, format="csr", random_state=rng)
    C.sort_indices()
    got = ta.einsum("ij,jk->ik", C, B)
    expected = (C @ B).tocsr()
    expected.sort_indices()
    assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int32
    np.testing.assert_array_equal(got.indptr, expected.indptr)
    np.testing.assert_array_equal(got.indices, expected.indices)
    np.testing.assert_allclose(got.data, expected.data)
    assert not entry._narrow_fits((C, B), (n, n))
