"""ta.dask without a cluster: plans, partitioning, readers, errors, and results on dask's
synchronous scheduler (the cluster tests are in test_dask_cluster.py)."""
from __future__ import annotations

import builtins
import gzip

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

da = pytest.importorskip("dask.array", reason="tensoralg.dask needs dask[distributed]")

from tensoralg.dask.plan import tree_pairs  # noqa: E402


def run(x):
    return x.compute(scheduler="synchronous")


@pytest.fixture
def A():
    return sp.random_array((50, 30), density=0.15, format="csr", random_state=1)


def test_from_scipy_balances_nonzeros_not_rows():
    # row 0 holds 30 entries, rows 1..30 one each
    A = sp.csr_array((np.ones(60), (np.concatenate([np.zeros(30, int), np.arange(1, 31)]),
                                    np.concatenate([np.arange(30), np.arange(30)]))),
                     shape=(31, 30))
    chunks = ta.dask.from_scipy(A, chunks=2).chunks[0]
    assert sum(chunks) == 31 and chunks[0] < 5       # the heavy row is a block nearly alone


def test_balanced_bounds_allows_empty_blocks():
    assert ta.dask.balanced_bounds(np.array([0, 100, 100]), 3) == (1, 0, 1)


def test_from_scipy_blocks_share_the_matrix_arrays(A):
    d = ta.dask.from_scipy(A, chunks=3)
    blocks = [d.dask[(d.name, b, 0)] for b in range(3)]   # the graph holds the blocks
    assert any(np.shares_memory(b.data, A.data) for b in blocks if b.nnz)
    assert abs(sp.vstack(blocks) - A).max() == 0


@pytest.mark.parametrize("chunks", [1, 4, (10, 0, 25, 15)])
def test_spmv_and_spmm_on_uneven_and_empty_blocks(A, chunks):
    d = ta.dask.from_scipy(A, chunks=chunks)
    x = np.arange(30.0)
    X = np.random.default_rng(0).random((30, 4))
    np.testing.assert_allclose(run(ta.einsum("ij,j->i", d, x)), A @ x)
    np.testing.assert_allclose(run(ta.einsum("ij,jk->ik", d, X)), A @ X)


def test_split_sum_is_added_in_a_tree(A):
    d = ta.dask.from_scipy(A, chunks=2, column_chunks=3)
    X = da.from_array(np.ones((30, 2)), chunks=(10, 2))
    result = ta.einsum("ij,jk->ik", d, X)
    np.testing.assert_allclose(run(result), A @ np.ones((30, 2)))
    text = ta.dask.explain("ij,jk->ik", d, X)
    assert "6 block task(s), 4 addition task(s)" in text and "summed" in text


def test_dense_operand_is_rechunked_to_the_sparse_bounds(A):
    d = ta.dask.from_scipy(A, chunks=(10, 0, 25, 15))
    B = np.random.default_rng(2).random((50, 30))
    dB = da.from_array(B, chunks=(25, 30))
    C = np.random.default_rng(3).random((30, 30))
    result = ta.einsum("ij,ij->ij", d, dB)            # CSR ⊙ dense: CSR
    np.testing.assert_allclose(run(result).toarray(), (A.multiply(B)).toarray())
    assert "rechunked" in ta.dask.explain("ij,ij->ij", d, dB)
    sddmm = run(ta.einsum("ij,ik,jk->ij", d, B[:, :30], C))
    np.testing.assert_allclose(sddmm.toarray(), A.multiply(B[:, :30] @ C.T).toarray())


def test_spgemm_returns_scipy_blocks(A):
    d = ta.dask.from_scipy(A, chunks=3)
    product = ta.einsum("ij,jk->ik", d, sp.csr_array(A.T))
    assert isinstance(product._meta, sp.csr_array)
    assert abs(run(product) - A @ A.T).max() < 1e-12


def test_kernel_sparse_add_and_scalar_sum(A):
    B = sp.random_array((50, 30), density=0.2, format="csr", random_state=5)
    add = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": "ds", "C": "ds"})
    dA, dB = ta.dask.from_scipy(A, chunks=3), ta.dask.from_scipy(B, chunks=3)
    chunks = dA.chunks[0]
    dB = ta.dask.from_scipy(B, chunks=chunks)
    assert abs(run(add(A=dA, B=dB)) - (A + B)).max() < 1e-12
    total = ta.einsum("ij->", ta.dask.from_scipy(A, chunks=2, column_chunks=2))
    assert np.isclose(run(total), A.sum())


def test_three_operands_follow_the_contraction_path(A):
    x, M = np.ones(30), np.random.default_rng(0).random((30, 30))
    d = ta.dask.from_scipy(A, chunks=2)
    text = ta.dask.explain("ij,jk,k->i", d, M, x)
    assert "2 step(s)" in text
    np.testing.assert_allclose(run(ta.einsum("ij,jk,k->i", d, M, x)), A @ (M @ x))


def test_mttkrp_on_tensor_slices():
    rng = np.random.default_rng(0)
    dense = (rng.random((12, 5, 6)) < 0.2) * rng.random((12, 5, 6))
    T = ta.Tensor.from_numpy(dense, format="sss")
    B, C = rng.random((5, 3)), rng.random((6, 3))
    d = ta.dask.from_tensor(T, chunks=3)
    result = ta.einsum("ijk,jl,kl->il", d, B, C)
    assert "1 step(s)" in ta.dask.explain("ijk,jl,kl->il", d, B, C)
    np.testing.assert_allclose(run(result), np.einsum("ijk,jl,kl->il", dense, B, C))


def test_read_mtx_and_tns_match_ta_read(tmp_path):
    from tensoralg import data

    whole = ta.read(data.path("bcspwr10")).to_scipy()
    chunked = ta.dask.read_mtx(data.path("bcspwr10"), chunks=3)
    x = np.arange(whole.shape[1], dtype=float)
    np.testing.assert_allclose(run(ta.einsum("ij,j->i", chunked, x)), whole @ x)
    path = tmp_path / "t.tns.gz"
    with gzip.open(path, "wt") as f:
        f.write("1 1 1 1.5\n3 2 1 2.0\n3 1 2 -1.0\n")
    T = ta.dask.read_tns(path, chunks=2)
    assert T.shape == (3, 2, 2)
    got = run(ta.einsum("ijk,jl,kl->il", T, np.ones((2, 1)), np.ones((2, 1))))
    np.testing.assert_allclose(got.ravel(), [1.5, 0.0, 1.0])


def test_tree_pairs():
    assert tree_pairs(1) == [] and tree_pairs(4) == [[(0, 1), (2, 3)], [(0, 1)]]


# -- one test per user mistake ----------------------------------------------------------------


def test_sparse_operands_split_differently_are_refused(A):
    dA = ta.dask.from_scipy(A, chunks=2)
    dB = ta.dask.from_scipy(A, chunks=3)
    with pytest.raises(ta.UnsupportedError, match="same bounds"):
        ta.einsum("ij,ij->ij", dA, dB)


def test_shape_mismatch_names_the_index(A):
    with pytest.raises(ta.ShapeError, match="index j"):
        ta.einsum("ij,j->i", ta.dask.from_scipy(A, chunks=2), np.ones(7))


def test_out_is_refused(A):
    with pytest.raises(ta.UnsupportedError, match="out="):
        ta.einsum("ij,j->i", ta.dask.from_scipy(A), np.ones(30), out=np.empty(50))


def test_split_sum_inside_a_sum_of_terms_is_refused():
    k = ta.compile("y(i) = A(i,j) * x(j) + z(i)")
    dA = da.from_array(np.ones((4, 6)), chunks=(2, 3))
    with pytest.raises(ta.UnsupportedError, match="single product"):
        k(A=dA, x=np.ones(6), z=np.ones(4))


def test_bad_inputs_to_constructors(A, tmp_path):
    with pytest.raises(ta.InputError, match="from_scipy takes"):
        ta.dask.from_scipy(np.ones((2, 2)))
    with pytest.raises(ta.ShapeError, match="add up to 50"):
        ta.dask.from_scipy(A, chunks=(10, 10))
    with pytest.raises(ta.InputError, match="no such file"):
        ta.dask.read_mtx(tmp_path / "missing.mtx")
    bad = tmp_path / "bad.mtx"
    bad.write_text("hello\n")
    with pytest.raises(ta.FormatError, match="not a Matrix Market file"):
        ta.dask.read_mtx(bad)


def test_missing_dask_names_the_extra(monkeypatch, A):
    real_import = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "dask" or name.startswith("dask."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(ta.UnsupportedError, match=r"tensoralg\[dask\]"):
        ta.dask.from_scipy(A)


def test_import_tensoralg_does_not_import_dask():
    import subprocess
    import sys

    code = "import sys, tensoralg; assert 'dask' not in sys.modules, 'dask imported'; " \
           "assert tensoralg.dask.from_scipy"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_benchmark_report_renders_speedups():
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import dask_scale

    run = {"workers": 2, "blocks": 4, "compute_s": 0.5, "first_s": 1.0, "gather_s": 1.5,
           "bytes_moved": 2**20, "peak_rss_per_worker": [2**29, 2**29]}
    result = {"date": "d", "git": {"short": "abc"}, "machine": {"cores": 2},
              "runs": [{"case": "SpMM", "nnz": 10, "single": {"one_thread_s": 1.0,
                                                              "all_cores_s": 0.6},
                        "dask": [run], "pydata": [{"workers": 2, "blocks": 4,
                                                   "error": "not done after 60 s"}]}]}
    text = dask_scale.render(result, {"capped": [{"nnz": 1e8, "workers": 2, "blocks": 64,
                                                  "memory_limit_per_worker": 2**29,
                                                  "operand_bytes": 2**30, "completed": True,
                                                  "seconds": 3.0, "matches_one_process": True,
                                                  "peak_rss_per_worker": [2**28]}]})
    assert "| 2 | 4 | 0.500 | 2.00x |" in text and "not done after 60 s" in text
    assert "completed in 3.0 s (its sum matches" in text


def test_kernel_by_position_and_its_plan(A):
    scale = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    d = ta.dask.from_scipy(A, chunks=(20, 30), column_chunks=(10, 20))
    x = np.arange(30.0)
    np.testing.assert_allclose(run(scale(d, x)), A @ x)     # one product: j may be split
    text = ta.dask.explain(scale, d, x)
    assert text.startswith("kernel y(i) = ") and "2 addition task(s)" in text
