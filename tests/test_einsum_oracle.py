"""ta.einsum against np.einsum on densified operands, across level formats, backends, dtypes.

The format cross product of each subscript is sampled (seeded): the all-dense and all-sparse
combinations always, plus a random subset, so the file stays fast. Every failure message names
the subscripts, the formats, the backend and the dtype.
"""
from __future__ import annotations

import itertools
import random
import warnings
import zlib

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import densify, random_dense

import tensoralg as ta

SIZES = {"i": 5, "j": 4, "k": 3, "l": 6, "m": 2}

# (subscripts, density); operand shapes come from SIZES
CORPUS = [
    "ij,j->i",            # SpMV
    "ij,i->j",            # transposed SpMV
    "ij,jk->ik",          # SpMM / SpGEMM
    "ik,kj->ij",
    "ij,kj->ik",          # A @ B.T
    "ji,jk->ik",          # A.T @ B
    "ij,ik,kj->ij",       # SDDMM
    "ij->ji",             # transpose
    "ijk->kij",           # 3-D transpose
    "ii->i",              # diagonal
    "ii",                 # trace
    "iij->j",
    "ij,ij->",            # inner product
    "i,i->",
    "i,j->ij",            # outer product
    "ij,ij->ij",          # Hadamard
    "ijk,k->ij",          # TTV
    "ijk,jl,kl->il",      # MTTKRP
    "ijk,lk->ijl",        # TTM
    "ij->",               # sum
    "ij->j",              # column sums
    "ij->i",              # row sums
    ",ij->ij",            # scalar times matrix
    "ij,jk,kl->il",       # 3-operand chain
    "i,ij,j->",           # bilinear form
    "ij,jk",              # implicit output
    "ji",                 # implicit transpose
    "ijk->",
    "ijk,ijk->ijk",
    "ij,j,i->i",
]

INT_SUBSET = ["ij,j->i", "ij,jk->ik", "ij,ij->", "ii->i", "ijk,k->ij", "i,j->ij", "ij->j"]


def _operand_specs(subscripts: str) -> list[str]:
    return subscripts.split("->")[0].split(",")


def _shape(spec: str) -> tuple[int, ...]:
    return tuple(SIZES[c] for c in spec)


def formats_for_rank(rank: int) -> list:
    """Every d/s string, COO, and non-identity mode orders."""
    if rank == 0:
        return [None]
    out: list = ["".join(p) for p in itertools.product("ds", repeat=rank)]
    if rank >= 2:
        out.append("u" + "q" * (rank - 1))
    if rank == 2:
        out += [("ds", (1, 0)), ("ss", (1, 0))]
    if rank == 3:
        out += [("sss", (2, 0, 1)), ("dss", (1, 0, 2))]
    return out


def sampled_formats(subscripts: str, count: int, seed: int) -> list[tuple]:
    """all-sparse and all-dense first, then a seeded random sample of the cross product."""
    ranks = [len(s) for s in _operand_specs(subscripts)]
    choices = [formats_for_rank(r) for r in ranks]
    product = list(itertools.product(*choices))
    first = [tuple("s" * r if r else None for r in ranks), tuple("d" * r if r else None
                                                                   for r in ranks)]
    rest = [c for c in product if c not in first]
    random.Random(seed).shuffle(rest)
    picked = []
    for c in first + rest:
        if c not in picked:
            picked.append(c)
        if len(picked) >= count:
            break
    return picked


def _fmt_id(f) -> str:
    if f is None:
        return "-"
    if isinstance(f, tuple):
        return f"{f[0]}{''.join(map(str, f[1]))}"
    return f


def make_operands(subscripts, formats, dtype, seed, density=0.4):
    rng = np.random.default_rng(seed)
    ops = []
    for spec, fmt in zip(_operand_specs(subscripts), formats):
        if len(spec) == 0:
            ops.append(dtype(2) if np.dtype(dtype).kind in "iu" else dtype(1.5))
            continue
        a = random_dense(_shape(spec), density, rng, dtype)
        ops.append(ta.Tensor.from_numpy(a, format=fmt))
    return ops


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype) == np.float32 else \
        dict(rtol=1e-12, atol=1e-12)


def check(subscripts, operands, expect_dtype=None, **kw):
    got = ta.einsum(subscripts, *operands, **kw)
    want = np.einsum(subscripts, *[densify(o) for o in operands])
    dtype = expect_dtype or want.dtype
    np.testing.assert_allclose(densify(got).astype(np.float64), want.astype(np.float64),
                               **_tol(dtype), err_msg=f"{subscripts} {kw}")
    return got


CASES = []
for _n, _s in enumerate(CORPUS):
    for _f in sampled_formats(_s, 6, _n):
        CASES.append(pytest.param(_s, _f, "llvm", np.float64,
                                  id=f"{_s}-{'|'.join(map(_fmt_id, _f))}-llvm-f64"))
    for _f in sampled_formats(_s, 3, 100 + _n):
        CASES.append(pytest.param(_s, _f, "c", np.float64,
                                  id=f"{_s}-{'|'.join(map(_fmt_id, _f))}-c-f64"))
    for _f in sampled_formats(_s, 2, 200 + _n):
        CASES.append(pytest.param(_s, _f, "llvm", np.float32,
                                  id=f"{_s}-{'|'.join(map(_fmt_id, _f))}-llvm-f32"))
    for _f in sampled_formats(_s, 1, 300 + _n):
        CASES.append(pytest.param(_s, _f, "c", np.float32,
                                  id=f"{_s}-{'|'.join(map(_fmt_id, _f))}-c-f32"))
    if _s in INT_SUBSET:
        for _f in sampled_formats(_s, 2, 400 + _n):
            CASES.append(pytest.param(_s, _f, "llvm", np.int64,
                                      id=f"{_s}-{'|'.join(map(_fmt_id, _f))}-llvm-i64"))


@pytest.mark.parametrize("subscripts, formats, backend, dtype", CASES)
def test_matches_numpy(subscripts, formats, backend, dtype):
    operands = make_operands(subscripts, formats, dtype, seed=zlib.crc32(subscripts.encode()) % 1000)
    got = ta.einsum(subscripts, *operands, backend=backend)
    want = np.einsum(subscripts, *[densify(o) for o in operands])
    assert np.shape(got) == want.shape, f"{subscripts} {formats}"
    if np.dtype(dtype).kind in "iu":
        assert densify(got).dtype.kind in "iu", f"int in, {densify(got).dtype} out"
        np.testing.assert_array_equal(densify(got), want, err_msg=f"{subscripts} {formats}")
    else:
        assert densify(got).dtype == np.dtype(dtype), f"{subscripts}: dtype {densify(got).dtype}"
        np.testing.assert_allclose(densify(got), want, **_tol(dtype),
                                   err_msg=f"{subscripts} {formats} {backend}")


@pytest.mark.parametrize("subscripts", ["ij,j->i", "ij,jk->ik", "ij->ji", "ijk,k->ij",
                                        "ij,ij->ij", "ii->i"])
def test_the_same_tensor_twice_in_one_call(subscripts):
    """Operands given as the same Python object, across formats."""
    rng = np.random.default_rng(3)
    n = 4
    specs = _operand_specs(subscripts)
    dims = {c: n for c in "ijk"}
    a = random_dense(tuple(dims[c] for c in specs[0]), 0.5, rng)
    for fmt in formats_for_rank(a.ndim)[:4]:
        t = ta.Tensor.from_numpy(a, format=fmt)
        ops = [t if len(s) == a.ndim else random_dense(tuple(dims[c] for c in s), 0.5, rng)
               for s in specs]
        check(subscripts, ops)


@pytest.mark.parametrize("subscripts, shapes", [
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 2, 3, 4), (2, 2, 4, 5)]),
    ("...i,...i->...", [(3, 4), (3, 4)]),
    ("i...->...", [(3, 2, 2)]),
    ("ij...,j->i...", [(3, 4, 2), (4,)]),
])
def test_ellipsis_with_dense_operands(subscripts, shapes, rng):
    ops = [rng.standard_normal(s) for s in shapes]
    check(subscripts, ops)


# ---------------------------------------------------------------------------------------------
# out_format variants and result types


OUT_FORMATS = [None, "dense", "csr", "csc", "coo", "ss", ta.Format("ds", order=(1, 0)), ta.CSR]


@pytest.mark.parametrize("out_format", OUT_FORMATS, ids=str)
@pytest.mark.parametrize("subscripts", ["ik,kj->ij", "ij,ij->ij", "ij->ji", "ij,j->ij"])
def test_out_format_variants(subscripts, out_format):
    rng = np.random.default_rng(7)
    shapes = {"i": 6, "j": 5, "k": 4}
    ops = []
    for s in _operand_specs(subscripts):
        a = random_dense(tuple(shapes[c] for c in s), 0.4, rng)
        ops.append(sp.csr_array(a) if len(s) == 2 else a)
    got = ta.einsum(subscripts, *ops, out_format=out_format)
    want = np.einsum(subscripts, *[densify(o) for o in ops])
    np.testing.assert_allclose(densify(got), want, rtol=1e-12, atol=1e-12)
    if out_format == "dense":
        assert isinstance(got, np.ndarray)
    elif out_format in ("csr", "csc", "coo"):
        assert sp.issparse(got) and isinstance(got, sp.sparray), type(got)
        assert got.format == out_format, (got.format, out_format)
    elif out_format is not None:
        assert sp.issparse(got) or isinstance(got, ta.Tensor), type(got)


def test_inferred_output_formats_follow_design(rng):
    A = sp.random_array((8, 6), density=0.3, format="csr", random_state=1)
    B = sp.random_array((6, 5), density=0.3, format="csr", random_state=2)
    x = rng.standard_normal(6)
    D = rng.standard_normal((6, 3))
    assert isinstance(ta.einsum("ij,j->i", A, x), np.ndarray)             # SpMV dense
    assert isinstance(ta.einsum("ij,jk->ik", A, D), np.ndarray)           # SpMM dense
    assert isinstance(ta.einsum("ij->i", A), np.ndarray)                  # row sums dense
    C = ta.einsum("ij,jk->ik", A, B)                                      # SpGEMM CSR
    assert isinstance(C, sp.sparray) and C.format == "csr"
    S = ta.einsum("ij,ij->ij", A, A)                                      # CSR+CSR-like: CSR
    assert isinstance(S, sp.sparray) and S.format == "csr"
    H = ta.einsum("ij,ij->ij", A, rng.standard_normal((8, 6)))            # CSR ⊙ dense: CSR
    assert isinstance(H, sp.sparray) and H.format == "csr"
    T = ta.einsum("ij->ji", A)                                            # transpose: CSC
    assert isinstance(T, sp.sparray) and T.format == "csc"
    np.testing.assert_allclose(T.toarray(), A.toarray().T)


@pytest.mark.parametrize("cls, family", [
    (sp.csr_array, sp.sparray), (sp.csr_matrix, sp.spmatrix), (sp.csc_array, sp.sparray),
    (sp.csc_matrix, sp.spmatrix), (sp.coo_array, sp.sparray), (sp.coo_matrix, sp.spmatrix),
    (sp.bsr_array, sp.sparray), (sp.dok_array, sp.sparray), (sp.lil_matrix, sp.spmatrix),
    (sp.dia_array, sp.sparray),
])
def test_scipy_in_scipy_out_same_family(cls, family):
    a = random_dense((6, 6), 0.4, np.random.default_rng(1))
    A = cls(a)
    got = ta.einsum("ij,jk->ik", A, A)
    assert sp.issparse(got) and isinstance(got, family), type(got)
    np.testing.assert_allclose(densify(got), a @ a, rtol=1e-12, atol=1e-12)
    y = ta.einsum("ij,j->i", A, np.ones(6))
    assert isinstance(y, np.ndarray)
    np.testing.assert_allclose(y, a.sum(axis=1), rtol=1e-12)


def test_nd_sparse_result_is_tensor(rng):
    a = random_dense((3, 4, 5), 0.3, rng)
    T = ta.Tensor.from_numpy(a, format="sss")
    got = ta.einsum("ijk->kji", T)
    assert isinstance(got, ta.Tensor)
    np.testing.assert_allclose(got.to_numpy(), a.transpose(2, 1, 0))


@pytest.mark.parametrize("subscripts", ["i,i->", "ij,ij->", "ii", "ij->", "ijk->"])
def test_scalar_output_is_numpy_scalar(subscripts, rng):
    specs = _operand_specs(subscripts)
    ops = [sp.csr_array(random_dense((4, 4), 0.5, rng)) if len(s) == 2 else
           ta.Tensor.from_numpy(random_dense((4,) * len(s), 0.5, rng), format="s" * len(s))
           for s in specs]
    got = ta.einsum(subscripts, *ops)
    assert isinstance(got, np.generic) and np.ndim(got) == 0, type(got)
    want = np.einsum(subscripts, *[densify(o) for o in ops])
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_pydata_sparse_in(backend):
    sparse = pytest.importorskip("sparse")
    a = random_dense((5, 4, 3), 0.3, np.random.default_rng(2))
    s = sparse.COO.from_numpy(a)
    got = ta.einsum("ijk,k->ij", s, np.ones(3), backend=backend)
    np.testing.assert_allclose(densify(got), a.sum(axis=2), rtol=1e-12)
    g = sparse.GCXS.from_numpy(a[:, :, 0])
    got = ta.einsum("ij,jk->ik", g, a[:, :, 1].T.copy(), backend=backend)
    np.testing.assert_allclose(densify(got), a[:, :, 0] @ a[:, :, 1].T, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# edge data


EDGE_SUBSCRIPTS = ["ij,j->i", "ij,jk->ik", "ij->ji", "ij,ij->", "ij->j", "ij,ij->ij",
                   "ii->i"]


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("fmt", ["ds", "ss", "uq", ("ds", (1, 0)), "dd"], ids=_fmt_id)
@pytest.mark.parametrize("subscripts", EDGE_SUBSCRIPTS)
def test_empty_tensor_nnz_zero(subscripts, fmt, backend):
    a = np.zeros((4, 4))
    ops = [ta.Tensor.from_numpy(a, format=fmt) if len(s) == 2 else np.ones(4)
           for s in _operand_specs(subscripts)]
    check(subscripts, ops, backend=backend)


@pytest.mark.parametrize("fmt", ["ds", "ss", "uq", ("ds", (1, 0)), "dd"], ids=_fmt_id)
@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0)])
@pytest.mark.parametrize("subscripts", ["ij,j->i", "ij->ji", "ij,ij->", "ij->j", "ij,ij->ij",
                                        "ij,jk->ik"])
def test_zero_size_dimensions(subscripts, shape, fmt):
    a = np.zeros(shape)
    ops = []
    for s in _operand_specs(subscripts):
        if s == "ij":
            ops.append(ta.Tensor.from_numpy(a, format=fmt))
        elif s == "j":
            ops.append(np.ones(shape[1]))
        else:  # jk
            ops.append(np.ones((shape[1], 2)))
    check(subscripts, ops)


@pytest.mark.parametrize("fmt", ["ds", "ss", "uq", ("ds", (1, 0)), ("ss", (1, 0))], ids=_fmt_id)
@pytest.mark.parametrize("subscripts", EDGE_SUBSCRIPTS)
def test_all_zero_rows_and_a_single_nonzero(subscripts, fmt):
    a = np.zeros((5, 5))
    a[1, 3] = 2.5
    b = np.zeros((5, 5))
    b[[0, 4], :] = np.arange(1.0, 11.0).reshape(2, 5)       # rows 1..3 empty
    b[3, 3] = -1.0
    for m in (a, b):
        ops = [ta.Tensor.from_numpy(m, format=fmt) if len(s) == 2 else np.arange(1.0, 6.0)
               for s in _operand_specs(subscripts)]
        check(subscripts, ops)


def _messy_csr(cls=sp.csr_array, index_dtype=np.int32):
    """3x4 CSR with unsorted indices and a duplicate (0,1) entry."""
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    indices = np.array([3, 1, 1, 0, 2, 0], dtype=index_dtype)
    indptr = np.array([0, 3, 3, 6], dtype=index_dtype)
    m = cls((data, indices, indptr), shape=(3, 4))
    dense = np.zeros((3, 4))
    dense[0, 3] = 1
    dense[0, 1] = 2 + 3
    dense[2, 0] = 4 + 6
    dense[2, 2] = 5
    return m, dense


@pytest.mark.parametrize("cls", [sp.csr_array, sp.csr_matrix])
@pytest.mark.parametrize("subscripts", ["ij,j->i", "ij->ji", "ij,ij->ij", "ij->", "ij,kj->ik"])
def test_unsorted_duplicate_scipy_input_is_right_and_untouched(cls, subscripts):
    m, dense = _messy_csr(cls)
    before = (m.data.copy(), m.indices.copy(), m.indptr.copy())
    ops = [m if len(s) == 2 else np.arange(1.0, 5.0) for s in _operand_specs(subscripts)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ta.einsum(subscripts, *ops)
    dense_ops = [dense if len(s) == 2 else np.arange(1.0, 5.0)
                 for s in _operand_specs(subscripts)]
    np.testing.assert_allclose(densify(got), np.einsum(subscripts, *dense_ops), rtol=1e-12)
    for arr, old in zip((m.data, m.indices, m.indptr), before):
        np.testing.assert_array_equal(arr, old)
    assert not m.has_sorted_indices


def test_unsorted_csc_and_duplicate_coo_untouched():
    m, dense = _messy_csr()
    c = sp.csc_array((m.data.copy(), m.indices.copy(), m.indptr.copy()), shape=(4, 3))
    before = c.indices.copy()
    np.testing.assert_allclose(ta.einsum("ij,j->i", c, np.ones(3)), dense.T @ np.ones(3))
    np.testing.assert_array_equal(c.indices, before)
    coo = sp.coo_array((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 0]))),
                       shape=(2, 2))
    row = coo.row.copy()
    np.testing.assert_allclose(ta.einsum("ij->ji", coo).toarray(), [[0, 3], [3, 0]])
    np.testing.assert_array_equal(coo.row, row)
    assert coo.nnz == 3


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_int64_scipy_indices(backend):
    m, dense = _messy_csr(index_dtype=np.int64)
    m.sum_duplicates()
    assert m.indices.dtype == np.int64
    x = np.arange(1.0, 5.0)
    np.testing.assert_allclose(ta.einsum("ij,j->i", m, x, backend=backend), dense @ x)
    got = ta.einsum("ij,kj->ik", m, m, backend=backend)
    np.testing.assert_allclose(densify(got), dense @ dense.T)
    mixed = sp.csr_array(dense)  # int32 indices
    got = ta.einsum("ij,ij->ij", m, mixed, backend=backend)
    np.testing.assert_allclose(densify(got), dense * dense)


def test_mixed_int_and_float_operands_promote():
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    x = np.linspace(0.0, 1.0, 4)
    got = ta.einsum("ij,j->i", sp.csr_array(a), x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, a @ x)
    got = ta.einsum("ij,j->i", a.astype(np.int32), np.arange(4, dtype=np.int64))
    assert got.dtype == np.result_type(np.int32, np.int64)
    np.testing.assert_array_equal(got, a @ np.arange(4))
    got = ta.einsum("ij,j->i", a.astype(np.float32), x.astype(np.float64))
    assert got.dtype == np.float64


def test_out_argument_is_filled(rng):
    A = sp.random_array((5, 4), density=0.5, format="csr", random_state=0)
    x = rng.standard_normal(4)
    out = np.full(5, 99.0)
    got = ta.einsum("ij,j->i", A, x, out=out)
    assert got is out
    np.testing.assert_allclose(out, A @ x)


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("width", [1, 63, 64, 65, 128, 1000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_spgemm_rows_come_out_sorted_across_bitmap_words(width, dtype, backend):
    """A sparse product's workspace marks the coordinates of a row as bits in 64-bit words
    (lower/assemble.py): a few scattered coordinates are sorted as a list, many are read off
    the words. Rows of both kinds, with coordinates at word edges (0, 63, 64, the last column),
    must come out sorted, complete and right."""
    rng = np.random.default_rng(width)
    n = 40
    b = np.zeros((n, width), dtype)
    edges = sorted({c for c in (0, 63, 64, 127, 128, width - 1) if 0 <= c < width})
    for j in range(n):
        if j % 3 == 0:                    # a few coordinates over the whole width
            cols = rng.choice(width, size=min(width, 3), replace=False)
        elif j % 3 == 1:                  # many: the bitmap
            cols = rng.choice(width, size=min(width, max(1, width // 2)), replace=False)
        else:
            cols = np.array(edges)
        b[j, cols] = rng.integers(1, 5, cols.size)
    a = np.zeros((6, n), dtype)
    a[0, 0] = 1                           # one row of b: a few coordinates
    a[1, :] = 1                           # every row of b
    a[2, 2::3] = 2                        # the word-edge rows only
    a[3, 1] = 3                           # row 4 stays empty
    a[5, rng.choice(n, 5, replace=False)] = 1
    got = ta.einsum("ij,jk->ik", sp.csr_array(a), sp.csr_array(b), backend=backend)
    assert isinstance(got, sp.csr_array) and got.dtype == dtype
    for r in range(got.shape[0]):
        row = got.indices[got.indptr[r]:got.indptr[r + 1]]
        assert np.all(np.diff(row) > 0), f"row {r} not sorted: {row}"
    np.testing.assert_array_equal(got.toarray(), a @ b)



@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("shape", ["uniform", "denser later", "denser first", "one dense row"])
def test_sparse_outputs_far_larger_than_their_first_capacity(shape, backend):
    """A sparse output starts with room for its operands' nonzeros and, once half full after
    some row, grows at once to the size the rows so far project (lower/assemble.py,
    ``_reserve``). Projections that fall short (rows denser later), overshoot (denser first)
    or are absurd (one dense row, then nothing) must all end with every entry in place:
    the appends' own doubling finishes what a short projection leaves."""
    rng = np.random.default_rng(7)
    n, m, width = 2000, 20, 400
    # Row i of the product is row picks[i] of b, and b's row k holds 20 (k + 1) entries.
    b = sp.csr_array(rng.integers(1, 4, (m, width)).astype(np.float64) *
                     (np.arange(width) < 20 * (np.arange(m)[:, None] + 1)))
    if shape == "uniform":
        picks = rng.integers(0, m, n)
    elif shape == "denser later":
        picks = np.arange(n) * m // n
    elif shape == "denser first":
        picks = (np.arange(n) * m // n)[::-1]
    else:
        picks = np.full(n, -1)
        picks[0] = m - 1
    rows = np.flatnonzero(picks >= 0)
    a = sp.csr_array((np.ones(rows.size), (rows, picks[rows])), shape=(n, m))
    want = a @ b
    assert want.nnz > 50 * (a.nnz + b.nnz) or shape == "one dense row"
    got = ta.einsum("ij,jk->ik", a, b, backend=backend)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.toarray(), want.toarray())
    # Three levels (dense, compressed, compressed): the middle level's pos grows with its crd.
    k = ta.compile("C(i,j,k) = A(i,j) * B(j,k)", formats={"A": "csr", "B": "csr", "C": "dss"},
                   dtype="float64", backend=backend)
    np.testing.assert_array_equal(k(A=a, B=b).to_numpy(),
                                  np.einsum("ij,jk->ijk", a.toarray(), b.toarray()))


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("subscripts, out_format", [
    ("ij,ij->", None), ("ij->ji", None), ("ij->ij", "coo"), ("ij,ij->ij", "dense"),
    ("ij,jk->ik", None), ("ij,ji->ij", "coo"), ("ij,j->i", None)])
def test_coo_tensors_holding_repeated_coordinates(subscripts, out_format, backend):
    """A 'u' level may hold one coordinate several times, meaning their sum (to_numpy adds
    them). Copies, products and intersections took one of the entries, or paired them up,
    until the runtime summed repeats before running a kernel (formats.summed_duplicates)."""
    coords = np.array([[0, 1], [0, 1], [2, 2], [1, 0], [1, 0], [1, 0]])
    t = ta.Tensor.from_coords(coords, np.array([1.0, 2.0, 3.0, 4.0, -1.0, 0.5]), (3, 3),
                              format="coo", sum_duplicates=False)
    assert t.nnz == 6
    dense = t.to_numpy()
    operands = [t] * (subscripts.count(",") + 1)
    if subscripts == "ij,j->i":
        operands = [t, np.arange(1.0, 4.0)]
    got = ta.einsum(subscripts, *operands, out_format=out_format, backend=backend)
    got = got.to_numpy() if isinstance(got, ta.Tensor) else np.asarray(got)
    want = np.einsum(subscripts, *[dense if o is t else o for o in operands])
    np.testing.assert_allclose(got, want)
    assert t.nnz == 6                      # the caller's tensor is left as it was
