"""einsum's fast path: a repeated plain call replays the first call's decisions, and anything
unusual falls back to the general path with its checks and errors."""
import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
import tensoralg.api as api
from tensoralg.api import _signature, kernel_cache


@pytest.fixture(autouse=True)
def _optimised_builds():
    """Replays are recorded once a kernel runs its optimised code: these tests compile
    optimised kernels, so the second call replays (tests/test_tiered_builds.py checks the quick
    first builds)."""
    with ta.optimised_builds():
        yield


def test_second_call_replays_and_agrees():
    A = sp.random_array((30, 20), density=0.2, format="csr", random_state=4)
    x = np.random.default_rng(1).standard_normal(20)
    first = ta.einsum("ij,j->i", A, x)
    assert any(key[0] == "ij,j->i" for key in kernel_cache().dispatch)
    second = ta.einsum("ij,j->i", A, x)
    np.testing.assert_allclose(second, A @ x)
    np.testing.assert_array_equal(first, second)


def test_fast_path_checks_sizes_and_falls_back_to_the_shape_error():
    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=2)
    ta.einsum("ij,j->i", A, np.ones(5))
    with pytest.raises(ta.ShapeError, match="index j"):
        ta.einsum("ij,j->i", A, np.ones(4))


def test_fast_path_canonicalizes_unsorted_scipy_input_on_a_copy():
    good = sp.random_array((5, 5), density=0.6, format="csr", random_state=3)
    ta.einsum("ij,j->i", good, np.ones(5))
    bad = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 1]), np.array([0, 3, 3, 3, 3, 3])),
                       shape=(5, 5))
    before = bad.indices.copy()
    got = ta.einsum("ij,j->i", bad, np.arange(5.0))
    np.testing.assert_allclose(got, bad.toarray() @ np.arange(5.0))
    np.testing.assert_array_equal(bad.indices, before)


def test_fast_path_rejects_corrupt_indices():
    A = sp.random_array((5, 5), density=0.6, format="csr", random_state=5)
    ta.einsum("ij,j->i", A, np.ones(5))
    broken = A.copy()
    broken.indices[0] = 99                       # out of range: must never be read
    broken._has_canonical_format = True          # scipy's cached flag cannot be trusted for bounds
    with pytest.raises(ta.FormatError):
        ta.einsum("ij,j->i", broken, np.ones(5))


def test_scalar_result_on_the_fast_path():
    x = np.arange(4.0)
    assert ta.einsum("i,i->", x, x) == ta.einsum("i,i->", x, x) == 14.0
    assert np.ndim(ta.einsum("i,i->", x, x)) == 0


def _replays_without_general_path(monkeypatch, subscripts, *operands):
    """The second call's result, with the general path (``api.execute``) made to fail: the
    replay must pack the kernel's arguments itself."""
    import tensoralg.api as api

    first = ta.einsum(subscripts, *operands)

    def general(*args, **kwargs):
        raise AssertionError("the replay fell back to the general path")

    monkeypatch.setattr(api, "execute", general)
    second = ta.einsum(subscripts, *operands)
    monkeypatch.undo()
    np.testing.assert_array_equal(first, second)
    return second


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_replay_packs_arguments_itself_across_formats_and_dtypes(monkeypatch, dtype, fmt):
    rng = np.random.default_rng(7)
    A = sp.random_array((40, 30), density=0.2, format=fmt, random_state=7,
                        data_sampler=lambda size: rng.integers(-5, 6, size)).astype(dtype)
    x = rng.integers(-3, 4, 30).astype(dtype)
    B = np.ascontiguousarray(rng.integers(-3, 4, (30, 70)).astype(dtype))
    np.testing.assert_allclose(_replays_without_general_path(monkeypatch, "ij,j->i", A, x),
                               A @ x, rtol=1e-6)
    np.testing.assert_allclose(_replays_without_general_path(monkeypatch, "ij,jk->ik", A, B),
                               A @ B, rtol=1e-6)


def test_replay_of_dense_operands_empty_rows_and_read_only_arrays(monkeypatch):
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((5, 6)), rng.standard_normal((6, 3))
    a.flags.writeable = False
    np.testing.assert_allclose(_replays_without_general_path(monkeypatch, "ij,jk->ik", a, b),
                               a @ b)
    empty = sp.csr_array((0, 4))
    assert _replays_without_general_path(monkeypatch, "ij,j->i", empty, np.ones(4)).shape == (0,)
    rows = sp.csr_array(np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]]))
    np.testing.assert_array_equal(
        _replays_without_general_path(monkeypatch, "ij,j->i", rows, np.ones(2)), [0, 3, 0])


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_replay_relays_dense_operands_out_itself(monkeypatch, dtype):
    """Operands the kernel reads in another mode order (B(k,j) under loops i, j, k, and SDDMM's
    Y(k,j)) are copied so by the written-out replay; the output is dense, or the values at A's
    positions."""
    rng = np.random.default_rng(9)
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=9,
                        data_sampler=lambda size: rng.integers(-5, 6, size)).astype(dtype)
    B = rng.integers(-3, 4, (25, 30)).astype(dtype)
    X, Y = rng.integers(-3, 4, (40, 7)).astype(dtype), rng.integers(-3, 4, (7, 30)).astype(dtype)
    np.testing.assert_array_equal(
        _replays_without_general_path(monkeypatch, "ij,kj->ik", A, B), A @ B.T)
    first = ta.einsum("ij,ik,kj->ij", A, X, Y)
    monkeypatch.setattr(api, "execute", lambda *args, **kwargs: pytest.fail("general path"))
    second = ta.einsum("ij,ik,kj->ij", A, X, Y)
    monkeypatch.undo()
    np.testing.assert_array_equal(second.toarray(), A.toarray() * (X @ Y))
    np.testing.assert_array_equal(first.toarray(), second.toarray())
    sources = [e.fast.source for e in kernel_cache().dispatch.values() if e.fast is not None]
    assert any("relayout(o2, (1, 0))" in source and "finish(out" in source for source in sources)


def test_replay_splits_work_worth_two_threads_itself(monkeypatch):
    """Large calls run over thread ranges from the replay, with the general path's split:
    the same ranges on the native pool, and the same result."""
    import tensoralg.api as api

    saved = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        A = sp.random_array((4000, 4000), density=0.05, format="csr", random_state=9)
        x = np.random.default_rng(9).standard_normal(4000)
        ta.einsum("ij,j->i", A, x)
        # This call's own entry (the signature holds the dtypes its kernel was compiled for).
        entry = kernel_cache().dispatch[_signature("ij,j->i", (A, x), None)]
        monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
        calls = []
        real = api._native_split
        monkeypatch.setattr(api, "_native_split",
                            lambda compiled, parts: calls.append(parts) or real(compiled, parts))
        np.testing.assert_allclose(entry.run((A, x)), A @ x, rtol=1e-10)
        np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-10)
        if api.native_pool_supported():
            assert calls and all(parts >= 2 for parts in calls)
        # rows of very different lengths: ranges balanced by stored entries still agree
        skewed = sp.random_array((4000, 4000), density=0.01, format="csr", random_state=3)
        skewed = sp.vstack([sp.random_array((8, 4000), density=0.9, format="csr",
                                            random_state=4), skewed[8:]]).tocsr()
        skewed.sort_indices()
        np.testing.assert_allclose(ta.einsum("ij,j->i", skewed, x), skewed @ x, rtol=1e-10)
    finally:
        ta.set_num_threads(saved)


def test_replay_reuses_its_ranges_only_for_the_same_arrays(monkeypatch):
    """A repeated split call on the same matrix reuses the ranges it made; another matrix (of
    another size, or the same size with other row lengths) gets its own, and every call's
    result is exact."""
    import tensoralg.api as api

    saved = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        made = []
        real = api.range_bounds
        monkeypatch.setattr(api, "range_bounds", lambda *a: made.append(a[:2]) or real(*a))
        x = np.random.default_rng(5).standard_normal(5000)
        A = sp.random_array((4000, 5000), density=0.05, format="csr", random_state=5)
        for _ in range(3):
            np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-10)
        first = len(made)
        B = sp.random_array((3000, 5000), density=0.08, format="csr", random_state=6)
        np.testing.assert_allclose(ta.einsum("ij,j->i", B, x), B @ x, rtol=1e-10)
        C = sp.vstack([sp.random_array((8, 5000), density=0.9, format="csr", random_state=7),
                       A[8:]]).tocsr()
        np.testing.assert_allclose(ta.einsum("ij,j->i", C, x), C @ x, rtol=1e-10)
        np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-10)
        if api.native_pool_supported():
            assert first <= 2 and len(made) == first + 3
            assert made[-3][0] == 3000 and made[-2][0] == made[-1][0] == 4000
    finally:
        ta.set_num_threads(saved)


def test_replayed_ranges_stay_right_under_concurrent_callers():
    """Two Python threads replaying one entry on matrices of different sizes: each call's
    ranges are its own matrix's (the remembered ranges are read and replaced whole)."""
    from concurrent.futures import ThreadPoolExecutor

    saved = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        x = np.random.default_rng(8).standard_normal(5000)
        mats = [sp.random_array((rows, 5000), density=0.04, format="csr", random_state=rows)
                for rows in (4000, 2500)]
        want = [m @ x for m in mats]
        ta.einsum("ij,j->i", mats[0], x)

        def worker(k: int) -> bool:
            return all(np.allclose(ta.einsum("ij,j->i", mats[k], x), want[k])
                       for _ in range(30))

        with ThreadPoolExecutor(2) as pool:
            assert all(pool.map(worker, [0, 1, 0, 1]))
    finally:
        ta.set_num_threads(saved)


@pytest.mark.parametrize("size, parts", [(0, 2), (1, 4), (7, 2), (4000, 8), (13437, 16)])
def test_thread_ranges_cover_the_rows_in_order(size, parts):
    from tensoralg.runtime.threads import split

    rng = np.random.default_rng(size)
    lengths = rng.integers(0, 50, size) * (rng.random(size) < 0.3)
    for weights in (None, np.r_[0, np.cumsum(lengths)].astype(np.int32)):
        bounds = split(size, parts, weights)
        assert bounds.dtype == np.int64 and len(bounds) == parts + 1
        assert bounds[0] == 0 and bounds[-1] == size and (np.diff(bounds) >= 0).all()
        if weights is not None and weights[-1] > 0:
            work = np.diff(weights[bounds])     # each range near an equal share
            assert work.max() <= weights[-1] / parts + lengths.max()


def test_a_declined_replay_is_not_written_out_again(monkeypatch):
    """A call the replay declines (work for two threads) keeps the entry it has: rebuilding it
    on every call cost ~0.5 ms of compile() each time, for einsum and compiled kernels."""
    import tensoralg.api as api

    saved = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        A = sp.random_array((4000, 4000), density=0.05, format="csr", random_state=9)
        x = np.random.default_rng(9).standard_normal(4000)
        spmv = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
        ta.einsum("ij,j->i", A, x), spmv(A=A, x=x)
        monkeypatch.setattr(api, "_remember", lambda *a, **k: pytest.fail("written again"))
        for _ in range(2):
            np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-10)
            np.testing.assert_allclose(spmv(A=A, x=x), A @ x, rtol=1e-10)
    finally:
        ta.set_num_threads(saved)


def _kernel_replays(monkeypatch, kernel, **operands):
    """The second call of ``kernel`` with the general path made to fail (see above)."""
    import tensoralg.api as api

    first = kernel(**operands)
    monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
    second = kernel(**operands)
    monkeypatch.undo()
    np.testing.assert_array_equal(first, second)
    return second


def test_compiled_kernel_calls_replay_too(monkeypatch):
    rng = np.random.default_rng(11)
    A = sp.random_array((30, 20), density=0.3, format="csr", random_state=11)
    x, B = rng.standard_normal(20), rng.standard_normal((20, 5))
    spmv = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    np.testing.assert_allclose(_kernel_replays(monkeypatch, spmv, x=x, A=A), A @ x)
    twice = ta.compile("y(i) = A(i,j) * A(i,j) * x(j)", formats={"A": "csr"})
    np.testing.assert_allclose(_kernel_replays(monkeypatch, twice, A=A, x=x),
                               A.multiply(A) @ x)
    dense = ta.compile("C(i,k) = A(i,j) * B(j,k)")
    a = rng.standard_normal((4, 20))
    np.testing.assert_allclose(_kernel_replays(monkeypatch, dense, A=a, B=B), a @ B)


@pytest.mark.parametrize("out_format", [None, "dd"])
def test_compiled_kernel_with_a_dense_output_format_replays(monkeypatch, out_format):
    """An output format asked for explicitly as dense returns what none asked for, and
    replays the same way (it ran the general path on every call before)."""
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((7, 9)), rng.standard_normal((7, 9))
    formats = {} if out_format is None else {"Y": out_format}
    k = ta.compile("Y(i,j) = A(i,j) * B(i,j) + 1", formats=formats)
    result = _kernel_replays(monkeypatch, k, A=a, B=b)
    assert type(result) is np.ndarray
    np.testing.assert_array_equal(result, a * b + 1)
    b[:] = 2.0      # new values in the same arrays: the replay reads them
    np.testing.assert_array_equal(k(A=a, B=b), a * 2.0 + 1)


def test_compiled_kernel_replay_keeps_the_general_checks():
    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=12)
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    k(A=A, x=np.ones(5))
    k(A=A, x=np.ones(5))
    with pytest.raises(ta.ShapeError):
        k(A=A, x=np.ones(4))
    with pytest.raises(ta.ShapeError):
        k(A=A)
    with pytest.raises(ta.ShapeError):
        k(A=A, x=np.ones(5), z=np.ones(5))


def test_compiled_kernel_converting_an_operand_is_never_replayed():
    """A dense array given for a CSR operand is converted on every call (with one warning);
    the replay, which reads arrays in place, must not take such a call."""
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    a = np.array([[0.0, 2.0], [3.0, 0.0]])
    with pytest.warns(UserWarning, match="converting"):
        first = k(A=a, x=np.ones(2))
    assert not k._replays
    np.testing.assert_array_equal(first, a @ np.ones(2))
    np.testing.assert_array_equal(k(A=a, x=np.ones(2)), first)


@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_sparse_results_replay_in_the_family_of_the_inputs(monkeypatch, kind):
    """A sparse result (sparse add, an elementwise product) is assembled from the kernel's
    buffers on the replay too, as the general path does: same class, same canonical arrays."""
    make = sp.csr_array if kind == "array" else sp.csr_matrix
    A = make(sp.random_array((30, 40), density=0.2, format="csr", random_state=13))
    B = make(sp.random_array((30, 40), density=0.2, format="csr", random_state=14))
    A.sum_duplicates(), B.sum_duplicates()
    add = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    for call in (lambda: add(A=A, B=B), lambda: ta.einsum("ij,ij->ij", A, B)):
        first = call()
        import tensoralg.api as api
        monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
        second = call()
        monkeypatch.undo()
        assert type(second) is type(first) and second.has_canonical_format
        np.testing.assert_array_equal(second.indptr, first.indptr)
        np.testing.assert_array_equal(second.indices, first.indices)
        np.testing.assert_array_equal(second.data, first.data)
    np.testing.assert_allclose(add(A=A, B=B).toarray(), (A + B).toarray())
    empty = make((30, 40))
    np.testing.assert_array_equal(add(A=empty, B=empty).toarray(), np.zeros((30, 40)))
    np.testing.assert_array_equal(add(A=empty, B=empty).toarray(), np.zeros((30, 40)))


@pytest.mark.parametrize("fmt, assigns_all", [("ds", True), ("ss", False)])
def test_output_is_zeroed_only_when_the_kernel_skips_elements(fmt, assigns_all, monkeypatch):
    """A kernel that assigns every output element (CSR SpMV: every row, empty ones too) writes
    into an uninitialised buffer; one that visits only stored rows (DCSR) gets a zeroed one.
    Buffers handed out here start full of NaN, so a skipped zeroing would show."""
    A = sp.random_array((40, 30), density=0.1, format="csr", random_state=3)
    A = sp.csr_array(A.toarray() * (np.arange(40) % 3 != 0)[:, None])   # empty rows
    x = np.random.default_rng(2).standard_normal(30)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": fmt, "x": "d"})
    assert kernel._default.overwrites == assigns_all
    real_empty = np.empty

    def poisoned(shape, dtype=float, **kwargs):
        array = real_empty(shape, dtype, **kwargs)
        if np.dtype(dtype).kind == "f":
            array.fill(np.nan)
        return array
    monkeypatch.setattr(np, "empty", poisoned)
    operand = A if fmt == "ds" else ta.Tensor.from_scipy(A).convert(fmt)
    for _ in range(2):                          # the general path, then the replay
        np.testing.assert_allclose(kernel(A=operand, x=x), A @ x)
        np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x)
    out = np.full(40, np.nan)
    ta.einsum("ij,j->i", operand, x, out=out)
    np.testing.assert_allclose(out, A @ x)


def test_replays_are_written_out_and_revalidate_new_arrays():
    """Replayed calls run a function written for the kernel (runtime/replay.py); a matrix with
    new arrays is validated again before its arrays are read in place."""
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=21)
    x = np.random.default_rng(21).standard_normal(30)
    ta.einsum("ij,j->i", A, x)
    # The entry of exactly these operands' kinds (a replay trusts its caller's signature).
    entry = kernel_cache().dispatch[_signature("ij,j->i", (A, x), None)]
    assert entry.fast is not None
    np.testing.assert_allclose(entry.fast((A, x)), A @ x)
    bad = A.copy()
    bad.indices = bad.indices.copy()
    bad.indices[3] = 10_000                       # out of bounds: never read in place
    assert entry.fast((bad, x)) is None
    with pytest.raises(ta.FormatError):
        ta.einsum("ij,j->i", bad, x)
    np.testing.assert_allclose(ta.einsum("i,i->", x, x), x @ x)
    np.testing.assert_allclose(ta.einsum("i,i->", x, x), x @ x)   # the replayed scalar
    assert np.ndim(ta.einsum("i,i->", x, x)) == 0


def test_the_replay_tried_first_checks_the_kinds_of_its_operands():
    # A repeated call tries the latest replay of its subscripts (or of its kernel) before
    # computing a signature; operands of any other kind must reach their own kernels.
    rng = np.random.default_rng(7)
    base = sp.random_array((40, 30), density=0.2, format="csr", random_state=7, dtype=np.float64)
    x = rng.standard_normal(30)
    kinds = [
        (base, x),
        (base.astype(np.float32), x.astype(np.float32)),
        (base, x.astype(np.float32)),
        (base.tocsc(), x),
        (sp.csr_matrix(base), x),
        (base, np.asfortranarray(np.stack([x, x], 1))[:, 0]),     # a strided view
        (sp.csr_array((base.data, base.indices.astype(np.int64), base.indptr.astype(np.int64)),
                      shape=base.shape), x),
        (base.astype(np.int64), np.arange(30)),
    ]
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    for _ in range(3):
        for A, v in kinds:
            expected = np.asarray(A @ v)
            got = ta.einsum("ij,j->i", A, v)
            assert got.dtype == np.result_type(A.dtype, v.dtype)
            np.testing.assert_allclose(got, expected, rtol=1e-5)
            np.testing.assert_allclose(kernel(A=A, x=v), expected, rtol=1e-5)
    assert kernel_cache().recent["ij,j->i"].source.count("return None") >= 3


def test_the_replay_tried_first_rejects_a_one_dimensional_sparse_array():
    A = sp.random_array((6, 5), density=0.5, format="csr", random_state=2)
    ta.einsum("ij,j->i", A, np.ones(5))
    ta.einsum("ij,j->i", A, np.ones(5))
    vector = sp.csr_array(np.ones(5))
    assert vector.ndim == 1 or vector.shape == (1, 5)
    with pytest.raises(ta.TensorAlgebraError):
        ta.einsum("ij,j->i", vector, np.ones(5))


@pytest.mark.parametrize("shape", [(37, 53, 5), (1, 7, 3), (9, 4, 0), (300, 200, 16)])
def test_a_dense_operand_relaid_by_lowering_is_replayed_with_its_copy(shape):
    # SDDMM reads Y(k,j) along k: lowering stores Y in mode order (1,0), and the remembered
    # call copies Y so before each call instead of leaving the fast path.
    m, n, r = shape
    rng = np.random.default_rng(m + n + r)
    A = sp.random_array((m, n), density=0.1, format="csr", random_state=m)
    for _ in range(3):
        X, Y = rng.standard_normal((m, r)), rng.standard_normal((r, n))
        got = ta.einsum("ij,ik,kj->ij", A, X, Y)
        np.testing.assert_allclose(got.toarray(), A.toarray() * (X @ Y), rtol=1e-12,
                                   atol=1e-12)
    entries = [entry for key, entry in kernel_cache().dispatch.items()
               if key[0] == "ij,ik,kj->ij"]
    assert any(entry.relayouts == ((2, (1, 0)),) for entry in entries)


def test_sparse_outputs_are_written_out_but_products_keep_their_bounds(monkeypatch):
    """A sparse sum's repeated call runs a function written for it (its buffers made and
    finished there); a sparse product's stays on the recorded path, which bounds its rows'
    entries first (threads.entry_bounds); work for two threads goes to the general path."""
    import tensoralg.runtime.threads as threads_module

    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=21)
    B = sp.random_array((40, 30), density=0.2, format="csr", random_state=22)
    add = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    add(A=A, B=B)
    (entry,) = add._replays.values()
    assert entry.fast is not None and "new_buffers" in entry.fast.source
    got = entry.fast((A, B))
    assert type(got) is sp.csr_array and got.has_canonical_format
    np.testing.assert_array_equal(got.toarray(), (A + B).toarray())
    with pytest.raises(ta.ShapeError):
        add(A=A, B=sp.random_array((40, 31), density=0.2, format="csr", random_state=23))
    product = ta.compile("C(i,j) = A(i,k) * B(k,j)",
                         formats={"A": "csr", "B": "csr", "C": "csr"})
    product(A=A, B=B.T.tocsr())
    assert all(e.fast is None for e in product._replays.values())
    # Work for two threads: the written-out call declines and the general path runs it.
    monkeypatch.setattr(threads_module, "MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr(threads_module, "COUNTED_SUM_MIN_WORK", 1)
    before = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        assert entry.fast((A, B)) is None
        np.testing.assert_array_equal(add(A=A, B=B).toarray(), (A + B).toarray())
    finally:
        ta.set_num_threads(before)


@pytest.mark.parametrize("schedule", ["parallelize(i)", "reorder(i,j,k); parallelize(i); tile(256)",
                                      "split(i, 64); parallelize(i0)"])
def test_a_schedule_that_parallelizes_a_dense_output_replays(monkeypatch, schedule, two_threads):
    """``parallelize(i)`` without a thread count lets the work decide, which the replay's split
    does too (a split loop's ranges start on its blocks): a scheduled SpMM replays, large
    enough to run on two threads, and agrees bit for bit with the general path."""
    A = sp.random_array((3000, 2000), density=0.02, format="csr", random_state=21)
    B = np.random.default_rng(21).standard_normal((2000, 16))
    spmm = ta.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"}, schedule=schedule)
    np.testing.assert_allclose(_kernel_replays(monkeypatch, spmm, A=A, B=B), A @ B,
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("statement, schedule", [
    ("C(i,k) = A(i,j) * B(j,k)", "parallelize(i, threads=2)"),
    ("C(i,j) = A(i,j) + D(i,j)", "parallelize(i)"),
])
def test_a_stated_thread_count_or_a_counted_sum_keeps_the_general_path(statement, schedule):
    """A stated thread count, or a sparse sum a schedule splits (counted rows), is what the
    general path does and a replay does not: no replay is remembered for them."""
    A = sp.random_array((50, 40), density=0.2, format="csr", random_state=22)
    other = {"B": np.ones((40, 3))} if "B(" in statement else \
        {"D": sp.random_array((50, 40), density=0.2, format="csr", random_state=23)}
    formats = {"A": "csr", **({"D": "csr"} if "D" in other else {})}
    kernel = ta.compile(statement, formats=formats, schedule=schedule)
    kernel(A=A, **other)
    kernel(A=A, **other)
    assert not kernel._replays and kernel._recent is None


def test_einsum_with_a_schedule_replays_its_own_kernel(monkeypatch):
    """A repeated ``ta.einsum(..., schedule=...)`` replays the scheduled kernel; a plain call of
    the same subscripts never picks that replay up (nor a scheduled call the plain one's)."""
    A = sp.random_array((60, 50), density=0.2, format="csr", random_state=24)
    x = np.random.default_rng(24).standard_normal(50)
    schedule = "split(i, 8); parallelize(i0)"
    first = ta.einsum("ij,j->i", A, x, schedule=schedule)
    plain = ta.einsum("ij,j->i", A, x)
    scheduled = kernel_cache().dispatch[api._scheduled(_signature("ij,j->i", (A, x), None),
                                                       schedule)]
    unscheduled = kernel_cache().dispatch[_signature("ij,j->i", (A, x), None)]
    assert str(scheduled.compiled.key.schedule).startswith("split(i, 8")
    assert unscheduled.compiled.key.schedule is None
    monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
    np.testing.assert_array_equal(ta.einsum("ij,j->i", A, x, schedule=schedule), first)
    np.testing.assert_array_equal(ta.einsum("ij,j->i", A, x), plain)
    np.testing.assert_allclose(first, A @ x, rtol=1e-12)


@pytest.mark.parametrize("dtypes", [(np.float32, np.float64), (np.int32, np.float32),
                                    (np.float64, np.complex64), (np.int64, np.int32)])
def test_mixed_dtypes_replay_in_the_result_type(monkeypatch, dtypes):
    """A call mixing dtypes is made uniform (NumPy's result type) before its signature, so a
    repeated one replays; every call agrees bit for bit with the operands cast first."""
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=25).astype(dtypes[0])
    x = np.arange(30).astype(dtypes[1])
    common = np.result_type(*dtypes)
    expected = ta.einsum("ij,j->i", A.astype(common), x.astype(common))
    first = ta.einsum("ij,j->i", A, x)
    assert first.dtype == common
    monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
    again = ta.einsum("ij,j->i", A, x)
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(again, expected)
    assert A.dtype == dtypes[0] and x.dtype == dtypes[1]          # the inputs are not cast


def test_fortran_ordered_and_strided_operands_replay(monkeypatch):
    """A Fortran-ordered or strided array beside a C-ordered one is copied to C order first and
    the call replays; where every array is Fortran-ordered, NumPy's order="K" gives a Fortran
    result, which the general path makes."""
    rng = np.random.default_rng(26)
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=26)
    X, Y = np.asfortranarray(rng.standard_normal((40, 5))), rng.standard_normal((5, 30))
    wide = rng.standard_normal((30, 10))[:, ::2]
    first = ta.einsum("ij,ik,kj->ij", A, X, Y)
    ta.einsum("ij,jk->ik", A, wide)
    every = ta.einsum("ij,jk->ik", A, np.asfortranarray(wide))
    assert every.flags.f_contiguous and not every.flags.c_contiguous
    monkeypatch.setattr(api, "execute", lambda *a, **k: pytest.fail("general path"))
    again = ta.einsum("ij,ik,kj->ij", A, X, Y)
    np.testing.assert_array_equal(again.toarray(), first.toarray())
    np.testing.assert_allclose(first.toarray(), A.toarray() * (X @ Y), rtol=1e-12)
    np.testing.assert_allclose(ta.einsum("ij,jk->ik", A, wide), A @ wide, rtol=1e-12)


def test_replaced_values_on_a_checked_pattern_replay_and_bad_ones_do_not():
    """New values on the same index arrays (``A.data`` replaced) replay with those values; a
    values array of another length goes to the general path and its error."""
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=28)
    x = np.random.default_rng(28).standard_normal(30)
    ta.einsum("ij,j->i", A, x)
    ta.einsum("ij,j->i", A, x)
    A.data = A.data * 3.0
    np.testing.assert_allclose(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-12)
    A.data = A.data[:-1].copy()
    with pytest.raises(ta.TensorAlgebraError):
        ta.einsum("ij,j->i", A, x)


def test_compiled_kernel_replays_operands_cast_safely_to_its_dtype(monkeypatch):
    """A float64 kernel given float32 or int32 operands, or a Fortran-ordered one, casts and
    copies them as its general path does (same result, bit for bit) and replays."""
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=29)
    x = np.random.default_rng(29).standard_normal(30)
    B = np.asfortranarray(np.random.default_rng(30).standard_normal((30, 4)))
    spmv = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    spmm = ta.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"})
    cases = [(spmv, {"A": A.astype(np.float32), "x": x}, {"A": A.astype(np.float32)
                                                          .astype(np.float64), "x": x}),
             (spmv, {"A": A, "x": np.arange(30, dtype=np.int32)},
              {"A": A, "x": np.arange(30.0)}),
             (spmm, {"A": A, "B": B}, {"A": A, "B": np.ascontiguousarray(B)})]
    for kernel, given, plain in cases:
        expected = kernel(**plain)
        np.testing.assert_array_equal(_kernel_replays(monkeypatch, kernel, **given), expected)


def test_tensor_operands_replay_their_kernel(monkeypatch):
    """A repeated einsum call on ``ta.Tensor`` operands (CSF beside NumPy factors) skips the
    parsing and the kernel's key; operands of another format, or sizes that disagree, go to
    the general path and its checks."""
    rng = np.random.default_rng(32)
    coords = np.unique(rng.integers(0, 12, (150, 3)), axis=0)
    T = ta.Tensor.from_coords(coords, rng.random(len(coords)), (12, 12, 12), "sss")
    C, D = rng.random((12, 4)), rng.random((12, 4))
    expected = np.einsum("ijk,jr,kr->ir", T.to_numpy(), C, D)
    first = ta.einsum("ijk,jr,kr->ir", T, C, D, out_format="dense")
    np.testing.assert_allclose(first, expected, rtol=1e-12)
    monkeypatch.setattr(api, "_run", lambda *a, **k: pytest.fail("general path"))
    np.testing.assert_array_equal(ta.einsum("ijk,jr,kr->ir", T, C, D, out_format="dense"),
                                  first)
    monkeypatch.undo()
    other = ta.Tensor.from_coords(coords, rng.random(len(coords)), (12, 12, 12), "dss")
    np.testing.assert_allclose(ta.einsum("ijk,jr,kr->ir", other, C, D, out_format="dense"),
                               np.einsum("ijk,jr,kr->ir", other.to_numpy(), C, D), rtol=1e-12)
    with pytest.raises(ta.ShapeError):
        ta.einsum("ijk,jr,kr->ir", T, rng.random((11, 4)), D, out_format="dense")


def test_a_cuda_call_on_tensor_operands_is_never_replayed_on_the_host(monkeypatch):
    """A ``backend="cuda"`` call runs on the device each time: its kernel is not recorded for
    the host replay of ``ta.Tensor`` operands (the device run is stood in for here)."""
    rng = np.random.default_rng(33)
    coords = np.unique(rng.integers(0, 8, (40, 3)), axis=0)
    T = ta.Tensor.from_coords(coords, rng.random(len(coords)), (8, 8, 8), "sss")
    C, D = rng.random((8, 2)), rng.random((8, 2))
    host = api._run
    monkeypatch.setattr(api, "_device_operand", lambda operand, backend: None)
    monkeypatch.setattr(api, "_run", lambda stmt, canonical, bound, families, out_format,
                        backend, *rest: host(stmt, canonical, bound, families, out_format,
                                             None, *rest))
    ta.einsum("ijk,jr,kr->ir", T, C, D, out_format="dense", backend="cuda")
    assert not any(key[1] == "cuda" for key in api.kernel_cache().tensor_calls)


def test_a_scalar_operand_beside_a_strided_one_stays_a_scalar():
    """A call with a non-contiguous operand is made C-ordered first (``api._uniform``); a 0-d
    operand beside it must stay 0-d (``np.ascontiguousarray`` would make it 1-d and the kernel
    refuse it: MPNet's attention scale at batch 8, a held-out export, 2026-12-06)."""
    kernel = ta.compile("Y(i,j,k) = A(i,j,k) / B + D(i,k)", dtype="float32")
    A = np.arange(64, dtype=np.float32).reshape(2, 2, 16)[:, :, ::2]
    D = np.ones((2, 8), np.float32)
    B = np.array(4.0, np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(kernel(A=A, B=B, D=D), A / B + D[:, None, :])
    np.testing.assert_array_equal(ta.einsum(",i->i", np.array(2.0), np.arange(8.0)[::2]),
                                  2.0 * np.arange(8.0)[::2])


def test_pattern_replay_of_a_kernel_first_compiled_under_other_index_names():
    # ``ij,k->ij`` and ``dc,b->dc`` share one kernel (equal up to index names); the second
    # call's replay reads the summed index of the program in its own names
    a = sp.random_array((50, 40), density=0.1, format="csr", random_state=0)
    x = np.arange(8.0)
    np.testing.assert_allclose(ta.einsum("ij,k->ij", a, x).toarray(), a.toarray() * x.sum())
    for _ in range(2):
        np.testing.assert_allclose(ta.einsum("dc,b->dc", a, x).toarray(),
                                   a.toarray() * x.sum())
