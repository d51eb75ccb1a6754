"""Named kernels on real matrices and one real tensor, each against scipy / NumPy.

Bundled data (tensoralg.data) always runs; the larger files of ../shared/data run in tests
marked slow and skip when that directory is missing.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import densify, real_matrix, real_scipy

import tensoralg as ta

BACKENDS = ["llvm", "c"]
MATRICES = ["bcspwr10", "lp_ship04l", "ca-GrQc"]
SHARED_MATRICES = ["bcsstk16", "fidapex6", "bayer10", "rajat01", "adder_dcop_05",
                   "hangGlider_2", "cryg2500", "wiki-Vote", "ego-Facebook", "kos_docword"]


def _close(got, want, rtol=1e-10):
    if np.prod(np.shape(want)) > 10**7:  # compare large sparse results without densifying
        if isinstance(got, ta.Tensor):
            got = got.to_scipy()
        assert sp.issparse(got) and got.shape == want.shape, type(got)
        diff = abs(sp.csr_array(got) - sp.csr_array(want))
        assert diff.max() <= 1e-10 + rtol * abs(want).max()
        return
    np.testing.assert_allclose(densify(got), densify(want), rtol=rtol, atol=1e-10)


def _with_values(A: sp.csr_array, seed=0) -> sp.csr_array:
    """Pattern matrices load as all ones; give them distinct values to catch permutations."""
    B = A.copy()
    B.data = np.random.default_rng(seed).uniform(0.5, 1.5, B.nnz)
    return B


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MATRICES)
def test_spmv(name, backend):
    A = _with_values(real_scipy(name))
    x = np.random.default_rng(1).standard_normal(A.shape[1])
    _close(ta.einsum("ij,j->i", A, x, backend=backend), A @ x)


@pytest.mark.parametrize("name", MATRICES)
def test_spmv_on_the_loaded_tensor(name):
    T = real_matrix(name)
    x = np.ones(T.shape[1])
    _close(ta.einsum("ij,j->i", T, x), T.to_scipy() @ x)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MATRICES)
def test_spmm_eight_columns(name, backend):
    A = _with_values(real_scipy(name))
    D = np.random.default_rng(2).standard_normal((A.shape[1], 8))
    _close(ta.einsum("ik,kj->ij", A, D, backend=backend), A @ D)


@pytest.mark.parametrize("name", MATRICES)
def test_sddmm(name):
    A = _with_values(real_scipy(name))
    rng = np.random.default_rng(3)
    U = rng.standard_normal((A.shape[0], 8))
    V = rng.standard_normal((8, A.shape[1]))
    got = ta.einsum("ij,ik,kj->ij", A, U, V)
    coo = A.tocoo()
    want_vals = coo.data * np.einsum("nk,kn->n", U[coo.row], V[:, coo.col])
    want = sp.csr_array((want_vals, (coo.row, coo.col)), shape=A.shape)
    assert sp.issparse(got)
    _close(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_spgemm_bcspwr10_squared(backend):
    A = _with_values(real_scipy("bcspwr10"))
    got = ta.einsum("ik,kj->ij", A, A, backend=backend)
    assert isinstance(got, sp.sparray) and got.format == "csr"
    _close(got, A @ A)


def test_spgemm_lp_ship04l_times_transpose():
    A = _with_values(real_scipy("lp_ship04l"))
    got = ta.einsum("ik,jk->ij", A, A)
    _close(got, A @ A.T)
    got_csc = ta.einsum("ik,kj->ij", A, A.T.tocsc())
    _close(got_csc, A @ A.T)


@pytest.mark.parametrize("name", ["bcspwr10", "ca-GrQc"])
def test_sparse_add_a_plus_a_transpose(name):
    A = _with_values(real_scipy(name))
    k = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": "ds", "C": "ds"})
    got = k(A=A, B=sp.csr_array(A.T))
    _close(got, A + A.T)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MATRICES)
def test_transpose_multiply_with_csc(name, backend):
    A = _with_values(real_scipy(name))
    C = A.tocsc()
    x = np.random.default_rng(4).standard_normal(A.shape[0])
    _close(ta.einsum("ij,i->j", C, x, backend=backend), A.T @ x)
    _close(ta.einsum("ij,i->j", A, x, backend=backend), A.T @ x)
    D = np.random.default_rng(5).standard_normal((A.shape[0], 4))
    _close(ta.einsum("ij,ik->jk", C, D, backend=backend), A.T @ D)


def _college():
    T = real_matrix("collegemsg")
    coords, vals = T.to_coords()
    coords = np.asarray(coords)
    if coords.shape[0] == 3 and coords.shape[1] != 3:
        coords = coords.T
    return T.convert("sss"), coords, np.asarray(vals, dtype=np.float64)


def test_collegemsg_ttv():
    T, c, v = _college()
    w = np.random.default_rng(6).standard_normal(T.shape[2])
    got = ta.einsum("ijk,k->ij", T, w)
    want = sp.coo_array((v * w[c[:, 2]], (c[:, 0], c[:, 1])), shape=T.shape[:2]).tocsr()
    _close(got, want)


def test_collegemsg_ttm():
    T, c, v = _college()
    U = np.random.default_rng(7).standard_normal((3, T.shape[2]))
    got = ta.einsum("ijk,lk->ijl", T, U)
    # reference only on the (i, j) fibers that exist: out[i,j,:] = sum_k T[i,j,k] U[:,k]
    fib = c[:, 0] * T.shape[1] + c[:, 1]
    keys, inverse = np.unique(fib, return_inverse=True)
    want = np.zeros((len(keys), 3))
    np.add.at(want, inverse, v[:, None] * U[:, c[:, 2]].T)
    if isinstance(got, np.ndarray):
        flat = got.reshape(-1, 3)
        np.testing.assert_allclose(flat[keys], want, rtol=1e-10, atol=1e-10)
        assert np.abs(got).sum() == pytest.approx(np.abs(want).sum())
        return
    gc, gv = got.to_coords()
    gc = np.asarray(gc)
    if gc.shape[0] == 3 and gc.shape[1] != 3:
        gc = gc.T
    dense_fibers = np.zeros((len(keys), 3))
    pos = np.searchsorted(keys, gc[:, 0] * T.shape[1] + gc[:, 1])
    assert np.all(keys[np.minimum(pos, len(keys) - 1)] == gc[:, 0] * T.shape[1] + gc[:, 1])
    np.add.at(dense_fibers, (pos, gc[:, 2]), gv)
    np.testing.assert_allclose(dense_fibers, want, rtol=1e-10, atol=1e-10)


def test_collegemsg_mttkrp():
    T, c, v = _college()
    rng = np.random.default_rng(8)
    B = rng.standard_normal((T.shape[1], 8))
    C = rng.standard_normal((T.shape[2], 8))
    got = ta.einsum("ijk,jl,kl->il", T, B, C)
    want = np.zeros((T.shape[0], 8))
    np.add.at(want, c[:, 0], v[:, None] * B[c[:, 1]] * C[c[:, 2]])
    _close(got, want)


def test_collegemsg_integer_values_sum():
    T = real_matrix("collegemsg")
    total = ta.einsum("ijk->", T)
    assert float(total) == 59835  # documented sum of message counts


@pytest.mark.parametrize("name", MATRICES)
def test_inner_product(name):
    A = _with_values(real_scipy(name))
    got = ta.einsum("ij,ij->", A, A)
    assert np.ndim(got) == 0
    assert float(got) == pytest.approx(float((A.multiply(A)).sum()), rel=1e-12)


def test_outer_product_of_sparse_vectors():
    A = _with_values(real_scipy("lp_ship04l"))
    r = ta.Tensor.from_numpy(A[[3]].toarray().ravel(), format="s")
    s = ta.Tensor.from_numpy(A[[7]].toarray().ravel(), format="s")
    got = ta.einsum("i,j->ij", r, s)
    _close(got, np.outer(r.to_numpy(), s.to_numpy()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MATRICES)
def test_residual_via_compile(name, backend):
    A = _with_values(real_scipy(name))
    rng = np.random.default_rng(9)
    x = rng.standard_normal(A.shape[1])
    b = rng.standard_normal(A.shape[0])
    k = ta.compile("r(i) = b(i) - A(i,j) * x(j)", formats={"A": "ds"}, backend=backend)
    _close(k(A=A, b=b, x=x), b - A @ x)


@pytest.mark.parametrize("name", ["bcspwr10", "ca-GrQc"])
def test_trace_and_diagonal(name):
    A = _with_values(real_scipy(name))
    A = (A + sp.diags_array(np.arange(A.shape[0], dtype=float))).tocsr()
    t = ta.einsum("ii", A)
    assert float(t) == pytest.approx(A.diagonal().sum(), rel=1e-12)
    _close(ta.einsum("ii->i", A), A.diagonal())


# ---------------------------------------------------------------------------------------------
# larger files of ../shared/data


@pytest.mark.slow
@pytest.mark.parametrize("name", SHARED_MATRICES)
def test_shared_spmv_spmm_and_transpose(name):
    A = real_scipy(name)
    rng = np.random.default_rng(10)
    x = rng.standard_normal(A.shape[1])
    _close(ta.einsum("ij,j->i", A, x), A @ x, rtol=1e-9)
    D = rng.standard_normal((A.shape[1], 8))
    _close(ta.einsum("ik,kj->ij", A, D), A @ D, rtol=1e-9)
    y = rng.standard_normal(A.shape[0])
    _close(ta.einsum("ij,i->j", A.tocsc(), y), A.T @ y, rtol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bcsstk16", "cryg2500", "hangGlider_2", "fidapex6"])
def test_shared_spgemm(name):
    A = real_scipy(name)
    _close(ta.einsum("ik,kj->ij", A, A), A @ A, rtol=1e-9)


@pytest.mark.slow
def test_shared_wn18rr_ttv():
    T = real_matrix("wn18rr")
    w = np.arange(T.shape[1], dtype=float) + 1
    got = ta.einsum("ijk,j->ik", T.convert("sss"), w)
    coords, vals = T.to_coords()
    c = np.asarray(coords)
    if c.shape[0] == 3 and c.shape[1] != 3:
        c = c.T
    want = sp.coo_array((np.asarray(vals, float) * w[c[:, 1]], (c[:, 0], c[:, 2])),
                        shape=(T.shape[0], T.shape[2])).tocsr()
    _close(got, want)
