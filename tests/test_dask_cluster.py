"""ta.dask on a real distributed.LocalCluster with two worker processes: each kernel against
the single-machine result, the on-disk kernel cache on the workers, and a worker killed in the
middle of a computation."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

pytest.importorskip("dask.array", reason="tensoralg.dask needs dask[distributed]")
distributed = pytest.importorskip("distributed", reason="the cluster tests need distributed")

from tensoralg.dask import worker_stats  # noqa: E402


@pytest.fixture(scope="module")
def client():
    # Workers are spawned processes: they inherit os.environ, so conftest's temporary
    # TENSORALG_CACHE_DIR is their on-disk kernel cache too. The active memory manager is off:
    # it drops the replicas of a broadcast operand that no task waits for yet (docs/guide/dask.md).
    import dask

    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None, memory_limit="2GiB") as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(7)
    A = sp.random_array((400, 300), density=0.05, format="csr", random_state=3)
    keep = np.ones(400)
    keep[150:220] = 0                                # rows with no entries: empty blocks
    A = sp.csr_array(sp.diags_array(keep) @ A)
    A.eliminate_zeros()
    B = sp.random_array((400, 300), density=0.03, format="csr", random_state=4)
    return A, B, rng.random(300), rng.random((300, 8)), rng.random((400, 8))


UNEVEN = (100, 50, 0, 70, 180)        # the third block is empty, the fourth has no entries


@pytest.mark.parametrize("chunks", [3, UNEVEN])
def test_spmv_spmm_sddmm_match_one_machine(client, operands, chunks):
    A, _, x, X, U = operands
    d = ta.dask.from_scipy(A, chunks=chunks)
    spmv, spmm, sddmm = client.compute([ta.einsum("ij,j->i", d, x),
                                        ta.einsum("ij,jk->ik", d, X),
                                        ta.einsum("ij,ik,jk->ij", d, U, X)], sync=True)
    np.testing.assert_allclose(spmv, ta.einsum("ij,j->i", A, x))
    np.testing.assert_allclose(spmm, ta.einsum("ij,jk->ik", A, X))
    assert abs(sddmm - ta.einsum("ij,ik,jk->ij", A, U, X)).max() < 1e-12


def test_spgemm_and_sparse_add_match_one_machine(client, operands):
    A, B, *_ = operands
    d = ta.dask.from_scipy(A, chunks=UNEVEN)
    product = client.compute(ta.einsum("ij,jk->ik", d, sp.csr_array(B.T)), sync=True)
    assert abs(product - ta.einsum("ij,jk->ik", A, sp.csr_array(B.T))).max() < 1e-12
    add = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": "ds", "C": "ds"})
    total = client.compute(add(A=d, B=ta.dask.from_scipy(B, chunks=UNEVEN)), sync=True)
    assert abs(total - add(A=A, B=B)).max() < 1e-12


def test_split_sum_and_mttkrp_match_one_machine(client, operands):
    A, _, x, *_ = operands
    d = ta.dask.from_scipy(A, chunks=2, column_chunks=(100, 0, 200))
    np.testing.assert_allclose(client.compute(ta.einsum("ij,j->i", d, x), sync=True), A @ x)
    rng = np.random.default_rng(0)
    dense = (rng.random((40, 12, 10)) < 0.1) * rng.random((40, 12, 10))
    T = ta.Tensor.from_numpy(dense, format="sss")
    Bm, Cm = rng.random((12, 4)), rng.random((10, 4))
    got = client.compute(ta.einsum("ijk,jl,kl->il", ta.dask.from_tensor(T, chunks=(5, 25, 0, 10)),
                                   Bm, Cm), sync=True)
    np.testing.assert_allclose(got, ta.einsum("ijk,jl,kl->il", T, Bm, Cm))


def test_workers_load_kernels_from_the_disk_cache(client, operands):
    A, _, x, X, _ = operands
    d = ta.dask.from_scipy(A, chunks=4, column_chunks=2)
    expected = A @ X
    np.testing.assert_allclose(client.compute(ta.einsum("ij,jk->ik", d, X), sync=True),
                               expected)
    before = client.run(worker_stats)
    assert all(s["kernels"] >= 1 for s in before.values())   # the addition, compiled once
    client.restart()                   # the blocks sent to the workers went with them
    d = ta.dask.from_scipy(A, chunks=4, column_chunks=2)
    np.testing.assert_allclose(client.compute(ta.einsum("ij,jk->ik", d, X), sync=True),
                               expected)
    after = client.run(worker_stats)
    assert {s["pid"] for s in after.values()}.isdisjoint(s["pid"] for s in before.values())
    if len({s["fingerprint"] for s in (*before.values(), *after.values())}) > 1:
        pytest.skip("the compiler's sources changed during the test (a shared checkout being "
                    "edited): the on-disk cache keys changed with them")
    # fresh processes, every kernel (block product and addition) found on disk; the scheduler
    # may give every task to one worker on a loaded machine, so not every worker need load one
    assert all(s["compiles"] == 0 for s in after.values()), after
    assert any(s["in_memory"] >= 1 for s in after.values()), after


@pytest.mark.slow
def test_a_worker_killed_mid_computation_is_retried(client, tmp_path):
    # Blocks read straight from a file: each task streams the whole file (~0.2 s), so the
    # computation is still running when a worker dies.
    A = sp.random_array((3000, 2000), density=0.05, format="coo", random_state=9)
    path = tmp_path / "a.mtx"
    with open(path, "w") as f:
        f.write(f"%%MatrixMarket matrix coordinate real general\n3000 2000 {A.nnz}\n")
        np.savetxt(f, np.column_stack([A.row + 1, A.col + 1, A.data]), fmt="%d %d %.17g")
    X = np.random.default_rng(1).random((2000, 4))
    y = ta.einsum("ij,jk->ik", ta.dask.read_mtx(path, chunks=12), X)
    future = client.compute(y)
    deadline = time.monotonic() + 30
    while not any(client.processing().values()):
        assert time.monotonic() < deadline, "the computation never started"
        time.sleep(0.01)
    busy = next(addr for addr, keys in client.processing().items() if keys)
    pid = client.run(os.getpid, workers=[busy])[busy]
    os.kill(pid, signal.SIGKILL)          # a worker process this test's cluster started
    assert not future.done()              # killed in the middle, not after the end
    np.testing.assert_allclose(future.result(timeout=120), A.tocsr() @ X)
    assert pid not in client.run(os.getpid).values()


def test_a_large_broadcast_operand_reaches_every_worker(client, operands):
    A, *_ = operands
    client.wait_for_workers(2, timeout=60)     # a worker killed by an earlier test is back
    X = np.random.default_rng(3).random((300, 600))      # 1.4 MB: sent to each worker
    d = ta.dask.from_scipy(A, chunks=8)         # blocks sent round-robin to the workers
    assert len({w for ws in client.who_has().values() for w in ws}) == 2
    y = client.persist(ta.einsum("ij,jk->ik", d, X))
    distributed.wait(y)
    holders = {w for workers in client.who_has(y).values() for w in workers}
    assert len(holders) == 2          # both workers computed blocks
    np.testing.assert_allclose(y.compute(), A @ X)
