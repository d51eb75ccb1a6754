"""The native count of a sparse product's work per row (``runtime/reach.py``) against NumPy."""
from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np
import pytest
import scipy.sparse as sp

from tensoralg.runtime import reach as reach_module
from tensoralg.runtime.reach import ReachCounter, numpy_reach
from tensoralg.runtime.threads import entry_bounds, row_weights


@pytest.fixture
def counter(tmp_path, monkeypatch):
    # Native from the first coordinate, so that small cases exercise the kernel too.
    monkeypatch.setattr(reach_module, "NUMPY_COUNT_MOST", -1)
    from tensoralg.codegen import DiskCache
    return ReachCounter(DiskCache(str(tmp_path)))


def _expected(a: sp.csr_matrix, b: sp.csr_matrix, columns: int) -> tuple[list, list]:
    lengths = np.diff(b.indptr)
    rows = [int(lengths[a.indices[a.indptr[i]:a.indptr[i + 1]]].sum())
            for i in range(a.shape[0])]
    return np.concatenate([[0], np.cumsum(rows)]).tolist(), \
        np.concatenate([[0], np.cumsum(np.minimum(rows, columns))]).tolist()


@pytest.mark.parametrize("a_index", [np.int32, np.int64])
@pytest.mark.parametrize("b_index", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(0, 5), (7, 0), (1, 1), (40, 30), (300, 200)])
def test_native_reach_matches_a_row_by_row_count(counter, a_index, b_index, shape):
    rng = np.random.default_rng(sum(shape))
    a = sp.random(*shape, density=0.1, format="csr", random_state=rng)
    b = sp.random(shape[1], 25, density=0.3, format="csr", random_state=rng)
    if shape[0] > 1:                     # an all-zero first row
        a = sp.vstack([sp.csr_matrix((1, shape[1])), a[1:]], format="csr")
    pos, crd = a.indptr.astype(a_index), a.indices.astype(a_index)
    columns = 3
    reach, capped = counter.reach(pos, crd, b.indptr.astype(b_index), columns)
    want_reach, want_capped = _expected(a, b, columns)
    assert reach.tolist() == want_reach and capped.tolist() == want_capped
    assert [x.tolist() for x in numpy_reach(pos, crd, b.indptr.astype(b_index), columns)] == \
        [want_reach, want_capped]
    uncapped = counter.reach(pos, crd, b.indptr.astype(b_index))
    assert uncapped[0].tolist() == uncapped[1].tolist() == want_reach


def test_mixed_index_dtypes_within_a_take_numpy(counter):
    """pos and crd of different dtypes are no kernel's signature: NumPy counts them."""
    reach, capped = counter.reach(np.array([0, 1, 3], np.int64), np.array([1, 0, 1], np.int32),
                                  np.array([0, 4, 5], np.int32), 4)
    assert reach.tolist() == [0, 1, 6] and capped.tolist() == [0, 1, 5]


def test_row_weights_and_bounds_agree_with_and_without_the_kernel(counter):
    rng = np.random.default_rng(3)
    a = sp.random(500, 400, density=0.02, format="csr", random_state=rng)
    b = sp.random(400, 300, density=0.05, format="csr", random_state=rng)

    def view(m: sp.csr_matrix) -> NS:
        level = NS(pos=m.indptr, crd=m.indices)
        return NS(levels=(None, level))

    tensors = {"A": view(a), "B": view(b)}
    work = NS(rows=("A",), products=(("A", "B"),))
    plain = row_weights(work, tensors)
    assert plain.tolist() == row_weights(work, tensors, counter).tolist()
    want = np.concatenate([[0], np.cumsum(np.minimum(
        np.diff(_expected(a, b, 300)[0]), 7))]).tolist()
    assert entry_bounds(work, tensors, 7, smallest=0).tolist() == want
    assert entry_bounds(work, tensors, 7, smallest=0, counter=counter).tolist() == want
    # The bound holds the product's entries, row by row.
    product = (a @ b).tocsr()
    assert np.all(np.diff(product.indptr) <= np.diff(np.asarray(
        entry_bounds(work, tensors, 300, smallest=0, counter=counter))))


def test_small_counts_load_the_kernel_after_the_first_few(tmp_path, monkeypatch):
    """NumPy counts a process's first few small products; later ones take the kernel."""
    from tensoralg.codegen import DiskCache
    built = []
    counter = ReachCounter(DiskCache(str(tmp_path)))
    original = counter.kernels.get
    monkeypatch.setattr(counter.kernels, "get", lambda *a: built.append(a) or original(*a))
    a = sp.random(60, 50, density=0.1, format="csr", random_state=4)
    b = sp.random(50, 40, density=0.2, format="csr", random_state=5)
    want = _expected(a, b, 7)
    for call in range(reach_module.NUMPY_COUNTS_FIRST + 2):
        reach, capped = counter.reach(a.indptr, a.indices, b.indptr, 7)
        assert reach.tolist() == want[0] and capped.tolist() == want[1]
        assert bool(built) == (call >= reach_module.NUMPY_COUNTS_FIRST)
