"""``parallelize(i, unit=gpu-...)`` chooses the CUDA mapping, checked on the CPU emulator of
the grid (``tensoralg/gpu/emulate.py``); on a CPU backend GPU units are refused."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.gpu.context import GpuContext
from tensoralg.gpu.execute import launch

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")


@pytest.fixture(scope="module")
def context():
    from tensoralg.gpu.emulate import EmulatedDriver

    return GpuContext(EmulatedDriver())


def sparse(shape, density, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.5, 2.0, shape) * (rng.random(shape) < density)


def run(context, statement, formats, operands, shape, schedule):
    kernel = ta.compile(statement, formats=formats, backend="cuda", schedule=schedule)
    given = {name: ta.Tensor.from_numpy(value, format=formats[name]) if name in formats
             else value for name, value in operands.items()}
    bound = kernel._bound(given)
    compiled = kernel._program_for(bound, shape)
    result, choice = launch(context, compiled, bound, np.dtype("float64"), shape, None, None)
    return result.to_host(), choice, kernel


@needs_gxx
@pytest.mark.parametrize("unit, mapping", [("gpu-threads", "thread-per-row"),
                                           ("gpu-warps", "warp-per-row"),
                                           ("gpu-blocks", "nonzero-split")])
def test_each_unit_picks_its_mapping_for_spmv_and_spmm(context, unit, mapping):
    a = sparse((53, 41), 0.2, 1)
    x = np.random.default_rng(2).standard_normal(41)
    got, choice, kernel = run(context, "y(i) = A(i,j) * x(j)", {"A": "csr"}, {"A": a, "x": x},
                              (53,), ta.Schedule().parallelize("i", unit=unit))
    assert choice.mapping == mapping, choice
    np.testing.assert_allclose(got, a @ x, rtol=1e-10, atol=1e-12)
    assert f"parallelize(i, unit={unit})" in str(kernel.schedule)
    if unit != "gpu-blocks":          # SpMM's rows share a loop over columns, not a merge path
        b = np.random.default_rng(3).standard_normal((41, 5))
        got, choice, _ = run(context, "Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"},
                             {"A": a, "B": b}, (53, 5),
                             ta.Schedule().parallelize("i", unit=unit))
        assert choice.mapping == mapping, choice
        np.testing.assert_allclose(got, a @ b, rtol=1e-10, atol=1e-12)


@needs_gxx
def test_scattered_additions_need_atomics_stated(context):
    a = sparse((30, 22), 0.3, 4)
    x = np.random.default_rng(5).standard_normal(30)
    statement, formats = "y(j) = A(i,j) * x(i)", {"A": "csr"}
    with pytest.raises(ta.CompileError, match="reduction=atomics"):
        run(context, statement, formats, {"A": a, "x": x}, (22,),
            ta.Schedule().parallelize("i", unit="gpu-threads"))
    got, choice, _ = run(context, statement, formats, {"A": a, "x": x}, (22,),
                         ta.Schedule().parallelize("i", unit="gpu-threads",
                                                   reduction="atomics"))
    assert choice.mapping == "atomic"
    np.testing.assert_allclose(got, a.T @ x, rtol=1e-10, atol=1e-12)


@needs_gxx
def test_a_sum_to_a_scalar_takes_a_block_reduction(context):
    a, e = sparse((25, 18), 0.3, 6), np.random.default_rng(7).standard_normal((25, 18))
    got, choice, _ = run(context, "s = A(i,j) * E(i,j)", {"A": "csr"}, {"A": a, "E": e}, (),
                         ta.Schedule().parallelize("i", unit="gpu-blocks"))
    assert choice.mapping == "block-reduce"
    np.testing.assert_allclose(got, np.sum(a * e), rtol=1e-10)


@needs_gxx
def test_refusals_name_the_command(context):
    a = sparse((20, 15), 0.3, 8)
    x = np.ones(15)
    with pytest.raises(ta.UnsupportedError, match=r"parallelize\(j, unit=gpu-warps\).*over i"):
        run(context, "y(i) = A(i,j) * x(j)", {"A": "csr"}, {"A": a, "x": x}, (20,),
            ta.Schedule().parallelize("j", unit="gpu-warps"))
    with pytest.raises(ta.UnsupportedError, match="no atomic mapping"):
        run(context, "y(i) = A(i,j) * x(j)", {"A": "csr"}, {"A": a, "x": x}, (20,),
            ta.Schedule().parallelize("i", unit="gpu-threads", reduction="atomics"))
    e, f = np.ones((6, 7)), np.ones((6, 7))
    with pytest.raises(ta.UnsupportedError, match="gpu-warps"):
        run(context, "Z(i,j) = E(i,j) + F(i,j)", {}, {"E": e, "F": f}, (6, 7),
            ta.Schedule().parallelize("i", unit="gpu-warps"))


@pytest.mark.parametrize("schedule, match", [
    (ta.Schedule().parallelize("i", unit="gpu-warps"), "backend='cuda'"),
    (ta.Schedule().parallelize("i", unit="gpu-blocks", reduction="partials"), "CPU strategy"),
])
def test_gpu_units_on_the_cpu_and_partials_on_the_gpu_are_refused(schedule, match):
    backend = "cuda" if "partials" in str(schedule) else "llvm"
    with pytest.raises(ta.UnsupportedError, match=match):
        ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, backend=backend,
                   schedule=schedule)
