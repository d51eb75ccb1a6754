"""COO operands read in any order (``lower/unordered.py``): where a COO tensor is the only
sparse operand of a product with a dense output, ``ta.einsum`` binds it as it comes (no sort,
duplicates kept, ``api._bind_any_order``) and the kernel's stores add. Results must match
NumPy on unsorted entries with duplicates, through the general path and the replay, and
every other call must still sort."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.api import kernel_cache
from tensoralg.runtime.canonical import CoordinateSorter

sparse = pytest.importorskip("sparse")

DTYPES = [np.float32, np.float64, np.int64, np.complex128]


def _values(rng, count, dtype):
    values = rng.integers(-5, 6, count) if np.dtype(dtype).kind == "i" else \
        rng.standard_normal(count)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(count)
    return values.astype(dtype)


def _coo(rng, shape, count, dtype, family=sp.coo_array):
    """Unsorted entries with duplicates: every second entry repeats an earlier one."""
    rows, cols = rng.integers(0, shape[0], count), rng.integers(0, shape[1], count)
    if count > 2:
        rows[1::2], cols[1::2] = rows[: count // 2], cols[: count // 2]
    return family((_values(rng, count, dtype), (rows, cols)), shape=shape)


def _check(subscripts, operands, dense, dtype):
    expected = np.einsum(subscripts, *dense)
    tolerance = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    for _ in range(3):                     # the general path, then the replay
        got = ta.einsum(subscripts, *operands)
        got = got.todense() if hasattr(got, "todense") else got
        np.testing.assert_allclose(np.asarray(got), expected, rtol=tolerance,
                                   atol=tolerance * max(1.0, float(np.abs(expected).max(
                                       initial=0))))


@pytest.fixture
def no_sort(monkeypatch):
    """Fail any call of the coordinate sorter: the any-order path must not sort."""
    def refuse(*args, **kwargs):
        raise AssertionError("the COO operand was sorted")

    monkeypatch.setattr(CoordinateSorter, "sort", refuse)


CASES = [
    ("ij,j->i", lambda r, d: [r.standard_normal(30).astype(d)]),
    ("ji,j->i", lambda r, d: [r.standard_normal(40).astype(d)]),
    ("ij->j", lambda r, d: []),
    ("ij,i->", lambda r, d: [r.standard_normal(40).astype(d)]),
    ("ij,j,i->", lambda r, d: [r.standard_normal(30).astype(d),
                               r.standard_normal(40).astype(d)]),
]
# A product whose result COO's format inference makes sparse: converted into CSR on the
# first call (a dense result, as the CSR kernel gives), read in any order into a dense
# result after.
DENSE_CASES = [
    ("ij,jk->ik", lambda r, d: [r.standard_normal((30, 5)).astype(d)]),
    ("ij,kj->ik", lambda r, d: [r.standard_normal((6, 30)).astype(d)]),
]


@pytest.mark.parametrize("subscripts, others", CASES + DENSE_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [0, 1, 7, 500])
def test_scipy_coo(subscripts, others, dtype, count, request):
    rng = np.random.default_rng(count)
    matrix = _coo(rng, (40, 30), count, dtype)
    rest = others(rng, dtype)
    plain = (subscripts, others) in CASES
    if plain:
        request.getfixturevalue("no_sort")
    else:
        ta.einsum(subscripts, matrix, *rest)        # the first call goes through CSR
        request.getfixturevalue("no_sort")
    for _ in range(2):
        result = ta.einsum(subscripts, matrix, *rest)
        assert type(result) is type(ta.einsum(subscripts, matrix.tocsr(), *rest))
    _check(subscripts, [matrix, *rest], [matrix.toarray(), *rest], dtype)
    signature = next(k for k in kernel_cache().any_order if k[0] == subscripts)
    assert kernel_cache().any_order[signature] == (True if plain else "dense")


def test_a_dense_result_asked_for_reads_the_coo_in_any_order(no_sort):
    rng = np.random.default_rng(2)
    matrix = _coo(rng, (40, 30), 300, np.float64)
    dense = rng.standard_normal((30, 5))
    for _ in range(3):
        got = ta.einsum("ij,jk->ik", matrix, dense, out_format="dense")
        np.testing.assert_allclose(got, matrix.toarray() @ dense, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pydata_coo_of_rank_three(dtype):
    """pydata's einsum returns a sparse result for a sparse operand, and tensoralg's format
    inference agrees: those kernels append in order, so the entries are sorted first."""
    rng = np.random.default_rng(3)
    coords = rng.integers(0, 12, (3, 400))
    coords[:, 200:] = coords[:, :200]                    # duplicates
    tensor = sparse.COO(coords, _values(rng, 400, dtype), shape=(12, 12, 12),
                        has_duplicates=True, sorted=False)
    dense_t = tensor.todense()
    v, m = rng.standard_normal(12).astype(dtype), rng.standard_normal((12, 4)).astype(dtype)
    _check("abc,bk->ak", [tensor, m], [dense_t, m], dtype)
    _check("abc,c->ab", [tensor, v], [dense_t, v], dtype)
    _check("abc,a->", [tensor, v], [dense_t, v], dtype)


def test_zero_size_and_all_zero_rows(no_sort):
    empty = sp.coo_array((np.zeros(0), (np.zeros(0, np.int32), np.zeros(0, np.int32))),
                         shape=(0, 5))
    assert ta.einsum("ij,j->i", empty, np.ones(5)).shape == (0,)
    one = sp.coo_array(([2.0], ([3], [1])), shape=(6, 4))    # one entry, five empty rows
    np.testing.assert_array_equal(ta.einsum("ij,j->i", one, np.arange(4.0)),
                                  [0, 0, 0, 2, 0, 0])


def test_the_kernel_says_so():
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"})
    text = kernel.source("ir")
    assert "A's entries are read in any order" in text and "y_vals[i] += " in text
    assert "while" not in text                 # no runs of equal coordinates to find
    for statement, formats in [
        ("y(i) = A(i,j) * x(j) + A(i,j)", {"A": "COO", "x": "d"}),           # merges
        ("y(i) = A(i,j) * B(i,j)", {"A": "COO", "B": "COO"}),                # two sparse
        ("y(i) = A(i,j) * x(j)", {"A": "CSR", "x": "d"}),
    ]:
        assert "any order" not in ta.compile(statement, formats).source("ir"), statement


NEST_CASES = [
    # the COO summed over the index it alone holds into a vector, the dense factor apart
    ("cb,a->b", lambda r, d: [r.standard_normal(6).astype(d)]),
    ("ab,b,c->a", lambda r, d: [r.standard_normal(30).astype(d),
                                r.standard_normal(4).astype(d)]),
    ("ba,a->", lambda r, d: [r.standard_normal(30).astype(d)]),
]


@pytest.mark.parametrize("subscripts, others", NEST_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [0, 1, 7, 500])
def test_a_coo_read_in_a_nest_of_its_own(subscripts, others, dtype, count, no_sort):
    """Programs of several nests where one nest reads the COO into dense storage: every
    store of the program adds, so the other nests (a dense factor summed apart, the
    product of the temporaries) stay exact."""
    rng = np.random.default_rng(count + 11)
    matrix = _coo(rng, (40, 30), count, dtype)
    rest = others(rng, dtype)
    _check(subscripts, [matrix, *rest], [matrix.toarray(), *rest], dtype)
    signature = next(k for k in kernel_cache().any_order if k[0] == subscripts)
    assert kernel_cache().any_order[signature] is True


def test_a_statement_of_several_nests_reads_in_any_order(no_sort):
    kernel = ta.compile("y(i) = A(i,j) * x(j) + b(i)", {"A": "COO", "x": "d", "b": "d"})
    assert len(kernel._default.program.nests) == 2
    assert "A's entries are read in any order" in kernel.source("ir")
    rng = np.random.default_rng(4)
    matrix, x, b = _coo(rng, (9, 7), 40, np.float64), rng.standard_normal(7), \
        rng.standard_normal(9)
    np.testing.assert_allclose(kernel(A=matrix, x=x, b=b), matrix.toarray() @ x + b,
                               rtol=1e-12, atol=1e-12)


def _written_out(subscripts, operands):
    """Call until the optimised kernel is in place and the call's written-out replay is
    what ``ta.einsum`` tries first; that replay."""
    from tensoralg.codegen import tiered

    ta.einsum(subscripts, *operands)
    assert tiered.finish(timeout=120)
    for _ in range(3):
        ta.einsum(subscripts, *operands)
    fast = kernel_cache().recent.get(subscripts)
    assert fast is not None and "entries" in fast.source, "no written-out replay"
    return fast


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_repeated_coo_calls_replay_written_out(dtype, no_sort):
    rng = np.random.default_rng(5)
    matrix = _coo(rng, (50, 40), 300, dtype)
    x = _values(rng, 40, dtype)
    fast = _written_out("ij,j->i", [matrix, x])
    assert fast((matrix, x)) is not None
    np.testing.assert_allclose(ta.einsum("ij,j->i", matrix, x), matrix.toarray() @ x,
                               rtol=1e-5)
    # values replaced, values written in place, other coordinates, other shapes: all read
    matrix.data = _values(rng, 300, dtype)
    matrix.data[:5] = 3
    other = _coo(rng, (17, 40), 90, dtype)
    for m in (matrix, other, _coo(rng, (1, 40), 1, dtype), _coo(rng, (3, 40), 0, dtype)):
        got = ta.einsum("ij,j->i", m, x)
        assert fast((m, x)) is not None
        np.testing.assert_allclose(got, m.toarray() @ x, rtol=1e-5)
    # sizes that disagree, or a new operand with a coordinate outside its shape: the
    # general path says so
    assert fast((matrix, x[:-1])) is None
    with pytest.raises(ta.ShapeError):
        ta.einsum("ij,j->i", matrix, x[:-1])
    # other kinds of operands are not this replay's
    assert fast((matrix.tocsr(), x)) is None
    assert fast((matrix, x.astype(np.complex128))) is None
    other_index = matrix.copy()      # coordinates of the other index dtype
    other_index.coords = tuple(c.astype(np.int32 if c.dtype == np.int64 else np.int64)
                               for c in matrix.coords)
    assert fast((other_index, x)) is None
    np.testing.assert_allclose(ta.einsum("ij,j->i", other_index, x), matrix.toarray() @ x,
                               rtol=1e-5)


def test_a_written_out_replay_leaves_bad_operands_to_the_general_path():
    rng = np.random.default_rng(7)
    matrix, x = _coo(rng, (50, 40), 300, np.float64), rng.standard_normal(40)
    fast = _written_out("ij,j->i", [matrix, x])
    for bad_coordinate in (40, -1):
        bad = _coo(rng, (50, 40), 10, np.float64)
        bad.coords[1][3] = bad_coordinate
        assert fast((bad, x)) is None
        with pytest.raises(ta.TensorAlgebraError, match="operand"):
            ta.einsum("ij,j->i", bad, x)
    short = sp.coo_array((np.ones(3), (np.arange(3), np.arange(3))), shape=(3, 40))
    short.data = np.ones(2)                       # fewer values than coordinates
    assert fast((short, x)) is None
    with pytest.raises(ta.TensorAlgebraError):
        ta.einsum("ij,j->i", short, x)


def test_a_written_out_replay_gives_what_the_general_path_gives(no_sort):
    rng = np.random.default_rng(6)
    matrix = _coo(rng, (30, 20), 100, np.float64)
    x = rng.standard_normal(30)
    _written_out("ij,i->", [matrix, x])
    got = ta.einsum("ij,i->", matrix, x)             # a 0-d result: a NumPy scalar
    assert np.ndim(got) == 0 and not isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, (x @ matrix.toarray()).sum(), rtol=1e-12)
    tensor = sparse.COO.from_scipy_sparse(matrix.tocsr())
    tensor = sparse.COO(tensor.coords[:, ::-1], tensor.data[::-1], shape=tensor.shape,
                        sorted=False)             # pydata's coordinates, in reverse order
    y = rng.standard_normal(20)
    _written_out("ij,j->i", [tensor, y])
    got = ta.einsum("ij,j->i", tensor, y)            # as sparse.einsum: a COO
    assert type(got) is sparse.COO
    np.testing.assert_allclose(got.todense(), matrix.toarray() @ y, rtol=1e-12)
    expected = sparse.einsum("ij,j->i", tensor, y)
    assert type(expected) is type(got) and expected.shape == got.shape


def test_other_calls_still_sort():
    rng = np.random.default_rng(1)
    matrix = _coo(rng, (20, 20), 60, np.float64)
    dense = rng.standard_normal((20, 20))
    # the product is sparse (it shares the COO's pattern): sorted into CSR, as before
    _check("ij,ij->ij", [matrix, dense], [matrix.toarray(), dense], np.float64)
    signature = next(k for k in kernel_cache().any_order if k[0] == "ij,ij->ij")
    assert kernel_cache().any_order[signature] is False
    # an operand that adds to the product: the loops merge the COO with a dense vector
    _check("ij,j->ij", [matrix, np.ones(20)], [matrix.toarray(), np.ones(20)], np.float64)


@pytest.mark.parametrize("bad", [10**6, -1])
def test_coordinates_outside_the_shape_are_refused(bad):
    matrix = sp.coo_array(([1.0, 2.0, 3.0], ([0, 1, 2], [2, 1, 0])), shape=(3, 3))
    matrix.coords[1][1] = bad
    with pytest.raises(ta.TensorAlgebraError, match="operand"):
        ta.einsum("ij,j->i", matrix, np.ones(3))
    tensor = sparse.COO(np.array([[0, 1], [1, 0]]), np.array([1.0, 2.0]), shape=(2, 2))
    tensor.coords[0, 1] = bad
    with pytest.raises(ta.TensorAlgebraError, match="operand"):
        ta.einsum("ij,j->i", tensor, np.ones(2))


def test_the_gpu_lowers_the_sorted_kernel():
    from tensoralg.gpu.function import gpu_function

    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"})
    assert kernel._default.program.tensor("A").unordered
    assert "any order" not in "\n".join(gpu_function(kernel._default).notes)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_ranges_of_entries_sum_into_partial_outputs(threads, monkeypatch, no_sort,
                                                    partial_calls):
    """Ranges of unsorted entries may meet the same row: each sums into its own copy."""
    monkeypatch.setattr(kernel_cache().threads, "threads", threads)
    calls = partial_calls
    rng = np.random.default_rng(9)
    matrix = _coo(rng, (300, 5000), 400_000, np.float64)
    x = rng.standard_normal(5000)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"})
    assert str(kernel.schedule) == "reorder(i, j); parallelize(i, reduction=partials)"
    for _ in range(3):
        np.testing.assert_allclose(ta.einsum("ij,j->i", matrix, x), matrix @ x, rtol=1e-10,
                                   atol=1e-10)
    assert (max(calls) > 1) if threads > 1 else not calls


def test_few_entries_a_row_are_not_scattered_from_two_threads(monkeypatch, partial_calls):
    """Under ``SCATTER_ENTRIES_PER_VALUE`` entries an output value, the copies' zeroing and
    adding outweigh the second thread."""
    import tensoralg.api as api

    monkeypatch.setattr(kernel_cache().threads, "threads", 2)
    rows = 300_000
    for per_row, split in [(api.SCATTER_ENTRIES_PER_VALUE // 2, False),
                           (api.SCATTER_ENTRIES_PER_VALUE * 2, True)]:
        partial_calls.clear()
        matrix = _coo(np.random.default_rng(4), (rows, 50), rows * per_row, np.float64)
        y = ta.einsum("ij,j->i", matrix, np.ones(50))
        np.testing.assert_allclose(y, matrix @ np.ones(50), rtol=1e-12, atol=1e-12)
        assert bool(partial_calls) is split


def test_partial_copies_are_reused_and_zeroed():
    from tensoralg.api import _partial_copies

    first = _partial_copies(np.ones((3, 4)), 1)[0]
    first += 5
    again = _partial_copies(np.ones((3, 4)), 1)[0]
    assert np.shares_memory(first, again) and not again.any()
    smaller = _partial_copies(np.ones(5, np.float32), 2)
    assert [c.shape for c in smaller] == [(5,), (5,)] and not any(c.any() for c in smaller)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_a_compiled_kernel_binds_coo_unsorted_too(dtype, no_sort):
    rng = np.random.default_rng(11)
    matrix = _coo(rng, (50, 40), 300, dtype)
    x = _values(rng, 40, dtype)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"}, dtype=dtype)
    for _ in range(2):
        np.testing.assert_allclose(kernel(A=matrix, x=x), matrix.toarray() @ x, rtol=1e-5)
        np.testing.assert_allclose(kernel(matrix, x), matrix.toarray() @ x, rtol=1e-5)
    tensor = sparse.COO(rng.integers(0, 9, (3, 200)), rng.standard_normal(200), shape=(9, 9, 9))
    kernel3 = ta.compile("y(i) = T(i,j,k) * v(k)", {"T": "COO", "v": "d"})
    np.testing.assert_allclose(kernel3(T=tensor, v=np.arange(9.0)),
                               np.einsum("ijk,k->i", tensor.todense(), np.arange(9.0)))


def test_a_compiled_kernel_refuses_coordinates_outside_the_shape():
    matrix = sp.coo_array(([1.0, 2.0], ([0, 1], [1, 0])), shape=(2, 2))
    matrix.coords[0][0] = 7
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"})
    with pytest.raises(ta.TensorAlgebraError, match="operand A"):
        kernel(A=matrix, x=np.ones(2))


def test_a_program_that_reads_in_order_gets_the_operand_sorted(monkeypatch):
    """Where the program a call runs does not read the COO in any order (a tuned schedule's,
    say), the call binds it sorted: here the binding is told the kernel reads it in any order,
    and the program the call then runs is said not to."""
    import tensoralg.api as api

    rng = np.random.default_rng(12)
    matrix = _coo(rng, (30, 30), 200, np.float64)
    x = rng.standard_normal(30)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"})
    answers = iter([True])             # the binding's question; every later one: no
    monkeypatch.setattr(api, "_reads_any_order", lambda compiled, name: next(answers, False))
    sorts = []
    real = CoordinateSorter.sort
    monkeypatch.setattr(CoordinateSorter, "sort",
                        lambda *a, **k: sorts.append(1) or real(*a, **k))
    np.testing.assert_allclose(kernel(A=matrix, x=x), matrix.toarray() @ x, rtol=1e-12)
    assert sorts


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("shape, count", [((50, 40), 300), ((300, 5000), 400_000)])
def test_both_cpu_backends_read_coo_in_any_order(backend, shape, count, no_sort):
    rng = np.random.default_rng(count)
    matrix = _coo(rng, shape, count, np.float64)
    x = rng.standard_normal(shape[1])
    kernel = ta.compile("y(i) = A(i,j) * x(j)", {"A": "COO", "x": "d"}, backend=backend)
    assert "any order" in kernel.source("ir")
    for _ in range(2):
        np.testing.assert_allclose(kernel(A=matrix, x=x), matrix @ x, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(ta.einsum("ij,j->i", matrix, x, backend=backend), matrix @ x,
                                   rtol=1e-10, atol=1e-10)
