"""COO coordinates made canonical by compiled counting sorts (``runtime/canonical.py``), and
scipy COO operands of ``ta.einsum`` through it: as CSR on the plain path, as a COO tensor where
``formats=`` asks for COO."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.api import _bind_coo, _csr_operands, kernel_cache

RNG = np.random.default_rng(20261206)


def _sorter():
    return kernel_cache().coordinates


def _reference(coords, vals, shape):
    dense = np.zeros(shape, dtype=np.result_type(vals.dtype, np.float64))
    np.add.at(dense, tuple(coords), vals)
    return dense


@pytest.mark.parametrize("trial", range(60))
def test_sort_matches_a_dense_sum_and_is_canonical(trial):
    rng = np.random.default_rng(trial)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(x) for x in rng.integers(1, 9, size=rank))
    n = int(rng.choice([0, 1, 2, 7, 40, 300]))
    index = rng.choice([np.int32, np.int64])
    coords = tuple(rng.integers(0, e, size=n).astype(index) for e in shape)
    if trial % 3 == 0 and n:          # entries already in order: the copying path
        order = np.lexsort(coords[::-1])
        coords = tuple(c[order] for c in coords)
    vals = rng.standard_normal(n).astype(rng.choice([np.float32, np.float64]))
    done = _sorter().sort(coords, vals, shape)
    got = np.zeros(shape, dtype=np.float64)
    got[tuple(done.crd)] = done.vals
    np.testing.assert_allclose(got, _reference(coords, vals, shape), rtol=1e-5, atol=1e-5)
    keys = np.ravel_multi_index(done.crd, shape) if done.nnz else np.zeros(0, np.int64)
    assert np.all(np.diff(keys) > 0)                 # sorted, each coordinate once
    assert done.vals.dtype == vals.dtype and done.crd[0].dtype == np.int32
    assert done.pos.tolist() == [0, *np.cumsum(np.bincount(done.crd[0], minlength=shape[0]))]


def test_sort_of_integers_and_without_rows():
    coords = (np.array([2, 0, 2, 2]), np.array([1, 3, 1, 0]))
    done = _sorter().sort(coords, np.array([5, 1, 7, 2], np.int64), (3, 4), rows=False)
    assert done.crd[0].size == 0
    assert done.crd[1].tolist() == [3, 0, 1] and done.vals.tolist() == [1, 2, 12]
    assert done.pos.tolist() == [0, 1, 1, 3]


@pytest.mark.parametrize("bad", [([0, 3], [0, 0]), ([0, -1], [0, 0]), ([0, 0], [0, 4])])
def test_sort_refuses_coordinates_outside_the_shape(bad):
    with pytest.raises(ValueError, match="outside the shape"):
        _sorter().sort(tuple(np.array(c) for c in bad), np.ones(2), (3, 4))


def _coo(shape, n, dtype=np.float64, index=np.int32, duplicates=True, family=sp.coo_array,
         rng=RNG):
    rows = rng.integers(0, shape[0], size=n).astype(index)
    cols = rng.integers(0, shape[1], size=n).astype(index)
    if not duplicates:
        keys = np.unique(rows.astype(np.int64) * shape[1] + cols)
        rng.shuffle(keys)
        rows, cols = (keys // shape[1]).astype(index), (keys % shape[1]).astype(index)
    vals = (rng.standard_normal(rows.shape[0]) * 4).astype(dtype)
    return family((vals, (rows, cols)), shape=shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("subscripts", ["ij,j->i", "ij,ij->ij", "ij,jk->ik", "ji,jk->ik",
                                        "ij->", "ij,i->j"])
def test_einsum_of_a_scipy_coo_matches_its_dense_array(subscripts, dtype):
    a = _coo((40, 30), 300, dtype)                    # unsorted, with repeated coordinates
    others = [np.arange(np.prod(s), dtype=dtype).reshape(s) % 7 - 3 for s in
              {"ij,j->i": [(30,)], "ij,ij->ij": [(40, 30)], "ij,jk->ik": [(30, 5)],
               "ji,jk->ik": [(40, 5)], "ij->": [], "ij,i->j": [(40,)]}[subscripts]]
    expected = np.einsum(subscripts, a.toarray(), *others)
    for _ in range(2):                                # the second call replays
        got = ta.einsum(subscripts, a, *others)
        got = got.toarray() if sp.issparse(got) else np.asarray(got)
        tolerance = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def test_a_coo_operand_is_not_changed_and_its_sparse_result_is_csr():
    a = _coo((6, 5), 40)
    rows, cols, vals = a.row.copy(), a.col.copy(), a.data.copy()
    out = ta.einsum("ij,ij->ij", a, np.ones((6, 5)))
    assert out.format == "csr" and isinstance(out, sp.sparray)
    np.testing.assert_allclose(out.toarray(), a.toarray())
    assert np.array_equal(a.row, rows) and np.array_equal(a.col, cols) and \
        np.array_equal(a.data, vals)
    matrix = ta.einsum("ij,ij->ij", _coo((6, 5), 9, family=sp.coo_matrix), np.ones((6, 5)))
    assert isinstance(matrix, sp.spmatrix)


@pytest.mark.parametrize("shape, n", [((0, 4), 0), ((3, 0), 0), ((5, 5), 0), ((5, 5), 1),
                                      ((1, 1), 3)])
def test_coo_edge_cases(shape, n):
    a = _coo(shape, n)
    x = np.ones(shape[1])
    np.testing.assert_allclose(ta.einsum("ij,j->i", a, x), a.toarray() @ x)


def test_coo_with_all_zero_rows_int64_coordinates_and_sorted_entries():
    a = _coo((50, 40), 60, index=np.int64, duplicates=False)
    a.row[a.row % 3 == 0] = 1                          # rows divisible by 3 left empty
    x = RNG.standard_normal(40)
    np.testing.assert_allclose(ta.einsum("ij,j->i", a, x), a.toarray() @ x)
    ordered = a.tocsr().tocoo()                        # canonical order: the copying path
    np.testing.assert_allclose(ta.einsum("ij,j->i", ordered, x), ordered.toarray() @ x)


def test_coo_on_the_general_path_binds_sorted_and_unique():
    a = _coo((30, 20), 200)
    tensor = _bind_coo(a)
    assert tensor.format.spec == ta.Tensor.from_scipy(a).format.spec
    np.testing.assert_allclose(tensor.to_numpy(), a.toarray())
    rows, cols = tensor.levels[0].crd, tensor.levels[1].crd
    keys = rows.astype(np.int64) * 20 + cols
    assert np.all(np.diff(keys) > 0)
    x = RNG.standard_normal(20)
    np.testing.assert_allclose(ta.einsum("ij,j->i", a, x, formats=["coo", "d"]),
                               a.toarray() @ x)


def test_malformed_coo_still_gets_the_general_paths_error():
    a = sp.coo_array((np.ones(2), (np.array([0, 1]), np.array([0, 1]))), shape=(2, 2))
    a.row[1] = 7                                       # corrupted after construction
    assert _csr_operands((a,)) is None                   # left for the general path to name
    with pytest.raises(ta.TensorAlgebraError, match="outside its shape"):
        ta.einsum("ij,j->i", a, np.ones(2))


def test_bool_coo_keeps_the_general_path():
    a = sp.coo_array((np.array([True, True]), ([1, 0], [1, 1])), shape=(2, 2))
    assert _csr_operands((a,)) is None
    np.testing.assert_allclose(ta.einsum("ij,j->i", a, np.ones(2)), a.toarray() @ np.ones(2))


@pytest.mark.parametrize("subscripts", ["abc,c->ab", "abc,a->", "abc,a->cb", "abc->b"])
def test_pydata_coo_of_rank_three_through_the_sorter(subscripts):
    sparse = pytest.importorskip("sparse")
    rng = np.random.default_rng(5)
    coords = np.stack([rng.integers(0, n, size=200) for n in (6, 7, 8)])
    values = rng.standard_normal(200)
    # unsorted and with repeated coordinates, as a caller may build it
    a = sparse.COO(coords, values, shape=(6, 7, 8), has_duplicates=True, sorted=False)
    tensor = _bind_coo(a)
    assert tensor.format.spec == "uqq"
    np.testing.assert_allclose(tensor.to_numpy(), a.todense())
    terms = subscripts.split("->")[0].split(",")
    others = [rng.standard_normal([{"a": 6, "b": 7, "c": 8}[c] for c in t]) for t in terms[1:]]
    got = ta.einsum(subscripts, a, *others)
    got = got.todense() if hasattr(got, "todense") else np.asarray(got)
    np.testing.assert_allclose(got, np.einsum(subscripts, a.todense(), *others), atol=1e-12)


def test_pydata_coo_of_rank_one_and_a_nonzero_fill_value():
    sparse = pytest.importorskip("sparse")
    v = sparse.COO(np.array([[4, 1, 4]]), np.array([1.0, 2.0, 3.0]), shape=(6,),
                   has_duplicates=True, sorted=False)
    assert _bind_coo(v).format.spec == "s"
    np.testing.assert_allclose(np.asarray(ta.einsum("a,a->", v, np.ones(6)).todense()), 6.0)
    filled = sparse.COO(np.array([[0]]), np.array([1.0]), shape=(2,), fill_value=1.0)
    assert _bind_coo(filled) is None
    with pytest.raises(ta.TensorAlgebraError, match="fill value"):
        ta.einsum("a->", filled)


@pytest.mark.parametrize("kind", ["dia", "bsr", "lil", "dok"])
def test_other_scipy_formats_replay_as_csr(kind):
    a = sp.random_array((30, 20), density=0.2, format="csr", random_state=4).asformat(kind)
    x = RNG.standard_normal(20)
    assert _csr_operands((a, x))[0].format == "csr"
    for _ in range(2):
        np.testing.assert_allclose(ta.einsum("ij,j->i", a, x), a.toarray() @ x)
    product = ta.einsum("ij,kj->ik", a, a)
    np.testing.assert_allclose(product.toarray() if sp.issparse(product) else product,
                               a.toarray() @ a.toarray().T)


@pytest.mark.parametrize("source, target", [
    ("csc", "csr"), ("csr", "csc"), ("coo", "csr"), ("csr", "coo"), ("dcsr", "csc"),
    (("sss", (2, 0, 1)), "sss"), ("sss", ("sss", (1, 2, 0))), (("uqq", (1, 0, 2)), "csf"),
    ("s", ("s", (0,)))])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_runtime_conversion_through_the_sorter_matches_tensor_convert(source, target, index):
    from tensoralg.runtime.canonical import converted

    rng = np.random.default_rng(11)
    fmt = ta.Format(*source) if isinstance(source, tuple) else \
        ta.Format({"csc": "ds", "csr": "ds", "coo": "uq", "dcsr": "ss", "sss": "sss",
                   "s": "s"}[source], order=(1, 0) if source == "csc" else None)
    shape = (7, 5, 6)[:fmt.rank]
    dense = rng.standard_normal(shape) * (rng.random(shape) < 0.3)
    tensor = ta.Tensor.from_numpy(dense, fmt, index_dtype=index)
    wanted = ta.Format(*target) if isinstance(target, tuple) else target
    expected = tensor.convert(wanted)
    got = converted(tensor, expected.format, _sorter())
    assert got is not None and got.format == expected.format
    assert got.index_dtype == tensor.index_dtype
    for mine, theirs in zip(got.levels, expected.levels):
        for a, b in ((mine.pos, theirs.pos), (mine.crd, theirs.crd)):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.tolist() == b.tolist()
    np.testing.assert_array_equal(got.vals, expected.vals)


def test_conversion_of_a_csc_operand_in_an_elementwise_product():
    a = sp.random_array((300, 200), density=0.05, format="csr", random_state=0)
    b = sp.random_array((300, 200), density=0.05, format="csc", random_state=1)
    x = RNG.standard_normal(200)
    np.testing.assert_allclose(ta.einsum("ab,ab,b->b", a, b, x),
                               np.einsum("ab,ab,b->b", a.toarray(), b.toarray(), x))
