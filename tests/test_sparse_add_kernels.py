"""The CSR + CSR -> CSR kernel (issue 16) against scipy: every value dtype, both CPU backends,
empty rows, empty and single-entry matrices, real matrices, thread ranges of every width on
both pools; and the facts lowering records for it (each row reserves room for its appends
once, and rows that every loop visits need no ``pos`` fill)."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
import tensoralg.api as api
import tensoralg.runtime.threads as threads_module
from tensoralg.runtime.args import OutputBuffers
from tensoralg.runtime.native_split import NativeSplit
from tensoralg.runtime.pool import native_pool_supported
from tensoralg.runtime.stitch import join_rows, run_ranges, varying_slots
from tensoralg.runtime.threads import row_weights

ADD = "C(i,j) = A(i,j) + B(i,j)"
CSR = {"A": "csr", "B": "csr", "C": "csr"}
DATA = Path(ta.__file__).resolve().parent / "data"


def _random(rows: int, cols: int, density: float, rng: np.random.Generator, dtype: str,
            empty_rows: bool = True) -> sp.csr_array:
    """A canonical CSR matrix without stored zeros (values 1..9, negated at random), a third of
    its rows emptied."""
    matrix = sp.random(rows, cols, density, format="csr", random_state=rng,
                       data_rvs=lambda n: rng.integers(1, 10, n) * rng.choice([-1, 1], n))
    if empty_rows and rows:
        keep = (rng.random(rows) > 0.33).astype(matrix.dtype)
        matrix = sp.diags(keep) @ matrix
        matrix.eliminate_zeros()
    matrix = sp.csr_array(matrix.astype(dtype))
    matrix.sort_indices()
    return matrix


def _check(got, A, B) -> None:
    """``got`` is A + B with the union of A's and B's stored entries, sorted, in CSR (values
    that cancel stay stored as zeros, where scipy drops them)."""
    got = sp.csr_array(got)
    assert got.has_sorted_indices and got.dtype == A.dtype
    pattern = sp.csr_array((A != 0).astype(np.int8) + (B != 0).astype(np.int8))
    pattern.sort_indices()
    np.testing.assert_array_equal(got.indptr, pattern.indptr)
    np.testing.assert_array_equal(got.indices, pattern.indices)
    want = (A + B).toarray()
    if np.issubdtype(A.dtype, np.floating):
        np.testing.assert_allclose(got.toarray(), want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got.toarray(), want)


def _cases(rng: np.random.Generator, dtype: str):
    yield _random(50, 40, 0.1, rng, dtype), _random(50, 40, 0.1, rng, dtype)
    yield _random(7, 300, 0.3, rng, dtype), _random(7, 300, 0.02, rng, dtype)   # long rows
    zero = sp.csr_array((9, 6), dtype=dtype)
    yield zero, zero                                                            # all zero
    one = sp.csr_array((np.array([3], dtype), (np.array([4]), np.array([2]))), shape=(9, 6))
    yield one, zero                                                             # one entry
    yield zero, one
    yield one, one                                                              # both match
    yield sp.csr_array((0, 5), dtype=dtype), sp.csr_array((0, 5), dtype=dtype)  # no rows
    yield sp.csr_array((4, 0), dtype=dtype), sp.csr_array((4, 0), dtype=dtype)  # no columns
    A = _random(60, 60, 0.08, rng, dtype)
    yield A, sp.csr_array(A.T)                                                  # A + A.T
    yield A, -A                                                                 # all cancel


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int32"])
def test_csr_add_matches_scipy(backend, dtype):
    rng = np.random.default_rng(16)
    kernel = ta.compile(ADD, formats=CSR, dtype=dtype, backend=backend)
    for A, B in _cases(rng, dtype):
        _check(kernel(A=A, B=B), A, B)
        # einsum's "ij,ij->ij" is the elementwise product: an intersection, whose rows reserve
        # the same bound.
        product = sp.csr_array(ta.einsum("ij,ij->ij", A, B, backend=backend))
        assert product.has_sorted_indices and product.dtype == A.dtype
        np.testing.assert_array_equal(product.toarray(), (A * B).toarray())


@pytest.mark.parametrize("name", ["bcspwr10", "ca-GrQc", "lp_ship04l"])
def test_csr_add_matches_scipy_on_real_matrices(name):
    A = sp.csr_array(ta.read(DATA / f"{name}.mtx.gz").to_scipy()).astype(np.float64)
    A.sort_indices()
    rows = np.random.default_rng(0).permutation(A.shape[0])
    B = sp.csr_array(A.T) if A.shape[0] == A.shape[1] else sp.csr_array(A[rows])
    B.sort_indices()
    kernel = ta.compile(ADD, formats=CSR, dtype="float64")
    _check(kernel(A=A, B=B), A, B)


@pytest.fixture
def any_work_splits(monkeypatch):
    """Every call is worth splitting: small inputs take the threaded path."""
    monkeypatch.setattr(threads_module, "MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr(threads_module, "MIN_WORK_PER_THREAD_NATIVE", 1)
    before = ta.get_num_threads()
    yield
    ta.set_num_threads(before)


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_thread_ranges_of_every_width_give_the_same_sum(backend, any_work_splits,
                                                       counted_calls):
    # A scheduled sum of two CSR operands counts its rows first (tests/test_counted_sums.py)
    rng = np.random.default_rng(3)
    kernel = ta.compile(ADD, formats=CSR, dtype="float64", backend=backend,
                        schedule="parallelize(i)")
    for threads in (2, 3, 5):
        ta.set_num_threads(threads)
        # From fewer rows than a range's least (8) to several ranges of them.
        for rows in (1, 7, 8, 9, 16, 17, 24, 41, 130):
            A, B = _random(rows, 33, 0.2, rng, "float64"), _random(rows, 33, 0.2, rng, "float64")
            _check(kernel(A=A, B=B), A, B)
    assert max(counted_calls) >= 5     # on the native pool, several ranges a thread


def _compiled(kernel, A, B):
    kernel(A=A, B=B)
    return kernel._default


@pytest.mark.skipif(not native_pool_supported(), reason="no native pool here")
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_native_pool_ranges_with_buffers_of_their_own(parts):
    """``run_ranges`` on the native pool, each range's buffers sized by its share of the
    work, joined into the same matrix as one serial call."""
    rng = np.random.default_rng(parts)
    kernel = ta.compile(ADD, formats=CSR, dtype="float64")
    A, B = _random(90, 70, 0.15, rng, "float64"), _random(90, 70, 0.15, rng, "float64")
    compiled = _compiled(kernel, A, B)
    tensors = {"A": ta.Tensor.from_scipy(A), "B": ta.Tensor.from_scipy(B)}
    sizes = api.index_sizes(compiled, tensors)
    capacity = A.nnz + B.nnz
    buffers = OutputBuffers(sizes=np.zeros(2, dtype=np.int64), capacity=capacity)
    args = compiled.arguments.pack(tensors, sizes, buffers)
    weights = row_weights(compiled.balance_by, tensors)
    bounds = threads_module.split(A.shape[0], parts, weights)
    function = compiled.kernel.function
    pool = api.kernel_cache().threads.native_pool()
    native = NativeSplit(function, compiled.arguments.range_slots, parts, pool,
                         varying=varying_slots(compiled.arguments))
    grown: list[int] = []
    status, pieces = run_ranges(function, args, compiled.arguments, bounds, capacity,
                                api.kernel_cache().threads.run_calls, native=native,
                                weights=weights)
    assert status == 0
    for piece, lo, hi in zip(pieces, bounds[:-1], bounds[1:]):
        # A CSR sum's share is exactly the most its rows can append: nothing grew.
        grown.append(int(piece.sizes[1]) <= int(weights[hi] - weights[lo]))
    output = compiled.program.output
    joined = join_rows(A.shape, output.format, output.index_dtype, np.dtype(np.float64),
                       pieces, bounds)
    assert all(grown)
    _check(joined.to_scipy(), A, B)


def _append_grows(source: str) -> int:
    """The capacity checks inside the loops that append (``while`` bodies) of a kernel's IR."""
    inside = 0
    depth_of_while: list[int] = []
    for line in source.splitlines():
        indent = len(line) - len(line.lstrip())
        while depth_of_while and indent <= depth_of_while[-1]:
            depth_of_while.pop()
        if line.lstrip().startswith("while ("):
            depth_of_while.append(indent)
        elif depth_of_while and line.lstrip().startswith("grow("):
            inside += 1
    return inside


def test_a_rows_appends_are_reserved_once_before_its_merge():
    """The union of a row of A and a row of B appends at most nnz(A row) + nnz(B row)
    entries: one reservation per row, and no capacity check per appended entry."""
    source = ta.compile(ADD, formats=CSR, dtype="float64").source("ir")
    assert _append_grows(source) == 0
    room = re.search(r"i64 (room\w*) = C1_size \+ \(.*A1_pos\[i \+ 1\].*B1_pos\[i \+ 1\]", source)
    assert room is not None
    assert source.count(f"grow(C1_crd, C1_crd_cap, {room.group(1)});") == 1
    assert source.count(f"grow(C_vals, C_vals_cap, {room.group(1)});") == 1


def test_a_workspace_flush_reserves_its_count_once():
    source = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats=CSR, dtype="float64").source("ir")
    assert "= C1_size + count;" in source
    assert _append_grows(source) == 0


def test_rows_every_loop_visits_need_no_pos_fill():
    """A CSR add visits every row; a CSR output of a DCSR product may skip some, whose ``pos``
    entries the kernel fills after the loops (and gets right)."""
    assert "never visited" not in ta.compile(ADD, formats=CSR, dtype="float64").source("ir")
    product = ta.compile("C(i,j) = A(i,j) * B(i,j)",
                         formats={"A": "ss", "B": "csr", "C": "csr"}, dtype="float64")
    assert "never visited" in product.source("ir")
    rng = np.random.default_rng(5)
    A, B = _random(40, 30, 0.2, rng, "float64"), _random(40, 30, 0.5, rng, "float64")
    got = sp.csr_array(product(A=ta.Tensor.from_scipy(A).convert(ta.Format("ss")), B=B))
    np.testing.assert_array_equal(got.toarray(), (A * B).toarray())
    assert np.all(np.diff(got.indptr) >= 0) and got.indptr[-1] == got.nnz


def test_an_adopted_buffer_is_freed_with_its_last_array():
    from tensoralg.runtime import wrap

    freed: list[int] = []
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    address = libc.malloc(64)
    original = wrap._Owner.__del__

    def spy(self, free=wrap._free):
        freed.append(self.address)
        original(self, free)

    wrap._Owner.__del__ = spy
    try:
        array = wrap.adopt(address, 8, np.float64)
        view = array[2:]
        del array
        assert freed == []
        del view
        import gc
        gc.collect()
        assert freed == [address]
    finally:
        wrap._Owner.__del__ = original


def test_an_output_its_operands_bound_reserves_no_projection():
    """A sum's entries are at most its operands' (the runtime's first capacity): no growth
    projected from the rows done so far (rows in degree order fooled it into reserving 16x).
    A product's output has no such bound and keeps its projection."""
    assert "want" not in ta.compile(ADD, formats=CSR, dtype="float64").source("ir")
    assert "want" in ta.compile("C(i,j) = A(i,k) * B(k,j)", formats=CSR,
                                dtype="float64").source("ir")


def test_skewed_rows_first_sum_matches_scipy():
    """Rows in degree order (the first rows hold most entries) plus the transpose."""
    rng = np.random.default_rng(11)
    n, count = 3000, 60000
    weights = 1.0 / np.arange(1, n + 1) ** 1.3
    rows = rng.choice(n, count, p=weights / weights.sum())
    A = sp.csr_array((rng.integers(1, 10, count).astype(np.float64),
                      (rows, rng.integers(0, n, count))), shape=(n, n))
    A.sum_duplicates()
    B = sp.csr_array(A.T)
    B.sort_indices()
    kernel = ta.compile(ADD, formats=CSR, dtype="float64")
    _check(kernel(A=A, B=B), A, B)


def test_a_small_first_capacity_still_grows_to_the_sum(monkeypatch):
    """The capacity is a bound for a sum, but the kernel still checks each row's room: a
    first capacity far too small grows and gives the same sum."""
    monkeypatch.setattr(api, "first_guess", lambda stored, dense: 16)
    rng = np.random.default_rng(12)
    A, B = _random(300, 200, 0.1, rng, "float64"), _random(300, 200, 0.2, rng, "float64")
    _check(ta.compile(ADD, formats=CSR, dtype="float64")(A=A, B=B), A, B)


def _large_pair(seed: int, entries: int) -> tuple:
    """A 60000 x 60000 CSR matrix of about ``entries`` ones (past 2**31 elements) and its
    transpose."""
    n = 60_000
    rng = np.random.default_rng(seed)
    A = sp.csr_array((np.ones(entries), (rng.integers(0, n, entries),
                                         rng.integers(0, n, entries))), shape=(n, n))
    A.sum_duplicates()
    B = sp.csr_array(A.T)
    B.sort_indices()
    return A, B


@pytest.mark.parametrize("route", ["compiled", "einsum"])
def test_a_large_sum_assembles_int32_indices_its_entries_bound(route):
    """Matrices past 46341 rows and columns hold more than 2**31 elements, but a sum holds at
    most its operands' entries: its kernel writes int32 indices directly (no int64 buffers
    narrowed afterwards); so does a product, bounded by one factor's entries times the other's
    longest row (``api._bounding_pair``)."""
    A, B = _large_pair(13, 500)
    if route == "compiled":
        kernel = ta.compile(ADD, formats=CSR, dtype="float64")
        got, want = sp.csr_array(kernel(A=A, B=B)), sp.csr_array(A + B)
    else:
        got, want = sp.csr_array(ta.einsum("ij,ij->ij", A, B)), sp.csr_array(A * B)
    want.sort_indices()
    assert got.indices.dtype == np.int32 and got.indptr.dtype == np.int32
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)
    if route == "compiled":
        assert [p.key.out_index_dtype for p in kernel._programs.values()] == \
            [np.dtype(np.int32)]
        product = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats=CSR, dtype="float64")
        product(A=A, B=B)
        assert [p.key.out_index_dtype for p in product._programs.values()] == \
            [np.dtype(np.int32)]
    else:
        # the elementwise product's remembered kernel (its result narrowed or not, the
        # indices above are int32 either way) assembles int32 indices itself
        entries = [e for key, e in api.kernel_cache().dispatch.items()
                   if key[0] == "ij,ij->ij" and hasattr(e, "compiled")]
        assert entries and all(e.compiled.key.out_index_dtype == np.dtype(np.int32)
                               for e in entries)


def test_a_large_sum_with_int32_indices_replays_while_its_entries_fit(monkeypatch):
    """The repeated call of a sum past 2**31 elements replays its int32 kernel (its operands'
    entries bound its output and fit), without the general path."""
    A, B = _large_pair(14, 400)
    kernel = ta.compile(ADD, formats=CSR, dtype="float64")
    first = sp.csr_array(kernel(A=A, B=B))
    monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
    again = sp.csr_array(kernel(A=A, B=B))
    assert again.indices.dtype == np.int32
    np.testing.assert_array_equal(again.indices, first.indices)
    np.testing.assert_array_equal(again.data, first.data)
