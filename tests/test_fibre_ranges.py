"""Kernels whose outer loop runs over the stored positions of a compressed first level (the
fibres of a CSF tensor): thread ranges of those positions (``RangeBound.over``), and sparse
outputs that share the operand's first levels (``lower/pattern.py``'s prefix patterns: TTV into
DCSR writes one sum per fibre in place). Every thread count gives the serial kernel's arrays,
bit for bit, on both CPU backends, with empty slices, a single entry and empty tensors."""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.lower.pattern import pattern_levels
from tensoralg.lower.scheduling import loop_plan
from tensoralg.runtime.args import ArgumentPlan

TTV = "Y(i,j) = T(i,j,k) * v(k)"
MTTKRP = "M(i,r) = T(i,j,k) * C(j,r) * D(k,r)"


@pytest.fixture(autouse=True)
def _optimised_builds():
    """Optimised kernels from the first call: the bit-for-bit comparisons assume them (a quick
    first build may contract or order sums otherwise; tests/test_tiered_builds.py)."""
    with ta.optimised_builds():
        yield


def _tensor(shape, density, seed, dtype="float64"):
    """A random order-3 tensor with a third of its first-mode slices empty, as dense and CSF."""
    rng = np.random.default_rng(seed)
    dense = rng.integers(-4, 5, shape) * (rng.random(shape) < density)
    if shape[0]:
        dense[rng.random(shape[0]) < 0.33] = 0
    dense = dense.astype(dtype)
    return dense, ta.Tensor.from_numpy(dense, "csf")


def _arrays(result):
    if isinstance(result, ta.Tensor):
        return [a for level in result.levels for a in (level.pos, level.crd) if a is not None] \
            + [result.vals]
    return [np.asarray(result)]


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_ttv_into_dcsr_shares_the_fibres_and_splits_them(backend, dtype):
    dense, T = _tensor((40, 9, 13), 0.25, 1, dtype)
    v = np.random.default_rng(2).standard_normal(13).astype(dtype)
    serial = ta.compile(TTV, formats={"T": "csf", "Y": "dcsr"}, backend=backend,
                        schedule="serial()")(T=T, v=v)
    assert serial.nnz == int(np.count_nonzero(np.any(dense != 0, axis=2)))
    np.testing.assert_allclose(serial.to_numpy(), dense @ v, rtol=1e-5 if dtype == "float32"
                               else 1e-12)
    # the result's levels are copies of T's first two: every fibre, in T's order
    np.testing.assert_array_equal(serial.levels[1].crd, T.levels[1].crd)
    assert serial.levels[1].crd is not T.levels[1].crd
    for threads in (2, 3, 7):
        kernel = ta.compile(TTV, formats={"T": "csf", "Y": "dcsr"}, backend=backend,
                            schedule=f"parallelize(i, threads={threads})")
        assert kernel.program.pattern == "T" and pattern_levels(kernel.program) == 2
        for got, want in zip(_arrays(kernel(T=T, v=v)), _arrays(serial), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("out", ["dense", "dcsr"])
def test_thread_ranges_over_fibres_run_positions_not_rows(backend, out):
    """The range's bound parameters name the tensor whose positions they count, and its extent
    is that level's stored positions (not the size of i): a tensor whose non-empty slices are
    few and far apart still splits into ranges that each own some of them."""
    dense = np.zeros((1000, 4, 5))
    dense[[3, 500, 501, 998], 1, 2] = [1.0, 2.0, 3.0, 4.0]
    dense[500, 3, :] = 1.5
    T, v = ta.Tensor.from_numpy(dense, "csf"), np.arange(1.0, 6.0)
    kernel = ta.compile(TTV, formats={"T": "csf", "Y": out}, backend=backend,
                        schedule="parallelize(i, threads=4)")
    compiled = kernel._program_for(kernel._bound({"T": T, "v": v}), (1000, 4))
    plan = ArgumentPlan.from_params(compiled.function.params, "Y")
    assert (plan.range_index, plan.range_over) == ("i", "T")
    assert plan.range_size({"i": 1000}, {"T": T}) == 4
    np.testing.assert_array_equal(plan.range_weights({"T": T}), T.levels[1].pos)
    got = kernel(T=T, v=v)
    np.testing.assert_allclose(got.to_numpy() if out == "dcsr" else got, dense @ v)


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_mttkrp_over_fibre_ranges_matches_serial(backend):
    dense, T = _tensor((50, 12, 11), 0.2, 3)
    rng = np.random.default_rng(4)
    C, D = rng.standard_normal((12, 5)), rng.standard_normal((11, 5))
    want = np.einsum("ijk,jr,kr->ir", dense, C, D)
    serial = ta.compile(MTTKRP, formats={"T": "csf"}, backend=backend, schedule="serial()")
    base = serial(T=T, C=C, D=D)
    np.testing.assert_allclose(base, want, rtol=1e-12, atol=1e-12)
    for threads in (2, 5):
        split = ta.compile(MTTKRP, formats={"T": "csf"}, backend=backend,
                           schedule=f"parallelize(i, threads={threads})")
        np.testing.assert_array_equal(split(T=T, C=C, D=D), base)


@pytest.mark.parametrize("shape, density", [((0, 3, 4), 0.5), ((5, 0, 4), 0.5),
                                            ((6, 3, 4), 0.0), ((6, 3, 4), 1.0)])
def test_empty_and_full_tensors(shape, density):
    dense, T = _tensor(shape, density, 5)
    v = np.ones(shape[2])
    for text in (None, "parallelize(i, threads=3)"):
        got = ta.compile(TTV, formats={"T": "csf", "Y": "dcsr"}, schedule=text)(T=T, v=v)
        np.testing.assert_allclose(got.to_numpy(), dense @ v)


def test_a_single_entry():
    dense = np.zeros((7, 5, 3))
    dense[4, 2, 1] = -2.5
    T = ta.Tensor.from_numpy(dense, "csf")
    got = ta.einsum("ijk,k->ij", T, np.array([1.0, 2.0, 3.0]))
    assert got.nnz == 1 and got.to_numpy()[4, 2] == -5.0


def test_csr_outputs_and_gpu_plans_keep_row_ranges():
    """A CSR output joins its ranges by rows (runtime/stitch.py), so a loop over fibres feeding
    one runs whole; CUDA plans take no position ranges (their mappings read ranges as rows)."""
    dense, T = _tensor((30, 6, 7), 0.3, 6)
    v = np.random.default_rng(7).standard_normal(7)
    kernel = ta.compile(TTV, formats={"T": "csf", "Y": "csr"})
    compiled = kernel._program_for(kernel._bound({"T": T, "v": v}), (30, 6))
    assert compiled.function.thread_range is None
    np.testing.assert_allclose(kernel(T=T, v=v).to_numpy(), dense @ v)
    assert not loop_plan(None, "cuda").position_ranges and loop_plan(None).position_ranges


@pytest.fixture
def split_parts(monkeypatch):
    """The number of thread ranges of each general-path call (None: one call), on two
    threads, with the least work a thread takes set by ``least(work)``."""
    import tensoralg.api as api

    seen: list[int | None] = []
    original = api._thread_ranges

    def spy(*args, **kwargs):
        bounds = original(*args, **kwargs)
        seen.append(None if bounds is None else len(bounds) - 1)
        return bounds

    def least(work: int) -> None:
        monkeypatch.setattr(ta.runtime.threads, "MIN_WORK_PER_THREAD_NATIVE", work)
        monkeypatch.setattr(ta.runtime.threads, "MIN_WORK_PER_THREAD", work)

    monkeypatch.setattr(api, "_thread_ranges", spy)
    before = ta.get_num_threads()
    ta.set_num_threads(2)
    yield seen, least
    ta.set_num_threads(before)


def test_einsum_splits_a_large_ttv_on_two_threads(split_parts):
    """The automatic split: work enough for two threads cuts T's fibres by their entries."""
    seen, least = split_parts
    dense, T = _tensor((300, 40, 30), 0.05, 8)
    v = np.random.default_rng(9).standard_normal(30)
    least(100)
    got = ta.einsum("ijk,k->ij", T, v)
    assert seen and seen[-1] is not None and seen[-1] > 1
    np.testing.assert_allclose(got.to_numpy(), dense @ v, rtol=1e-12, atol=1e-12)


def test_a_fibre_loop_takes_a_masked_four_lane_vector_unless_the_schedule_says_otherwise():
    """The compiler's own hint for TTV's loop over a fibre (scheduling.fibre_vector_hint) is
    shown in the kernel's schedule, which reproduces the kernel; a schedule's own hint wins, and
    kernels whose output is not a prefix of a tensor's levels get none."""
    kernel = ta.compile(TTV, formats={"T": "csf", "Y": "dcsr"})
    assert "vectorize(k, 4, tail=mask)" in str(kernel.schedule)
    assert "vectorize 4, masked tail" in kernel.source("ir")
    again = ta.compile(TTV, formats={"T": "csf", "Y": "dcsr"}, schedule=kernel.schedule)
    assert str(again.schedule) == str(kernel.schedule)
    own = ta.compile(TTV, formats={"T": "csf", "Y": "dcsr"}, schedule="vectorize(k, 8)")
    assert "vectorize(k, 8)" in str(own.schedule) and "tail=mask" not in str(own.schedule)
    for other in (ta.compile(TTV, formats={"T": "csf", "Y": "csr"}),
                  ta.compile(MTTKRP, formats={"T": "csf"}),
                  ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})):
        assert "tail=mask" not in str(other.schedule)
    dense, T = _tensor((20, 7, 9), 0.3, 11)
    v = np.arange(1.0, 10.0)
    np.testing.assert_allclose(kernel(T=T, v=v).to_numpy(), dense @ v, rtol=1e-12)


def test_a_ttvs_work_counts_its_fibres_beside_its_entries(split_parts):
    """Each fibre is a loop of its own: a tensor of short fibres splits where its entries alone
    would not have been work enough for two threads."""
    seen, least = split_parts
    dense, T = _tensor((400, 30, 20), 0.02, 12)
    entries, fibres = T.nnz, len(T.levels[1].crd)
    v = np.random.default_rng(13).standard_normal(20)
    threshold = (entries + fibres) // 2          # two parts only when fibres count
    least(threshold)
    got = ta.einsum("ijk,k->ij", T, v)
    assert entries < 2 * threshold and seen and seen[-1] is not None and seen[-1] >= 2
    np.testing.assert_allclose(got.to_numpy(), dense @ v, rtol=1e-12, atol=1e-12)
