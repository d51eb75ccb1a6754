"""The cuda backend on a real GPU: every kernel and mapping against NumPy, device residency,
CuPy interop, the cubin cache, and random einsum expressions through the public API.

Skipped, with the reason ``tensoralg.gpu.available()`` gives, where there is no GPU or neither
pycuda nor cuda-python (CI); ``benchmarks/gpu_check.sh`` runs them on a GPU machine.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import densify, random_dense
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cuda_emulate import CASES, VARIANTS, check, mappings_of, run_case

import tensoralg as ta
import tensoralg.gpu as gpu

REASON = gpu.available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no GPU: {REASON}")


@pytest.fixture(scope="module")
def context():
    return gpu.gpu_context()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", CASES)
def test_every_mapping_matches_numpy(context, case, variant):
    for mapping in mappings_of(context, case):
        got, want, choice = run_case(context, case, variant, mapping)
        check(got, want, np.float64, f"{case} {variant} {mapping} -> {choice}")


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("case", ["spmv", "spmm", "sddmm", "spgemm", "mttkrp", "dot"])
def test_other_dtypes(context, case, dtype):
    for mapping in mappings_of(context, case):
        got, want, choice = run_case(context, case, "random", mapping, dtype, seed=3)
        check(got, want, dtype, f"{case} {dtype.__name__} {mapping} -> {choice}")


def test_large_spmv_every_mapping(context):
    """Grids of many blocks, long rows across merge-path shares, lanes of every width."""
    import scipy.sparse as sp

    rng = np.random.default_rng(2)
    a = sp.random_array((200_000, 50_000), density=2e-4, format="csr", rng=rng)
    a = sp.csr_array(a + sp.csr_array((rng.random(50_000), (np.full(50_000, 7),
                                                            np.arange(50_000))),
                                      shape=a.shape))
    x = rng.standard_normal(50_000)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    bound = kernel._bound({"A": a, "x": x})
    compiled = kernel._program_for(bound, (200_000,))
    for mapping in (None, "thread-per-row", "warp-per-row", "nonzero-split"):
        result, choice = gpu.launch(context, compiled, bound, np.dtype("float64"), (200_000,),
                                    None, mapping)
        np.testing.assert_allclose(result.to_host(), a @ x, rtol=1e-9, atol=1e-9,
                                   err_msg=str(choice))


def test_cubins_come_from_the_disk_cache(tmp_path):
    from tensoralg.codegen.cache import DiskCache

    kernel = ta.compile("y(i) = A(i,j) * x(j) + z(i)", formats={"A": "csr"})
    cache = DiskCache(tmp_path / "kernels")
    first = gpu.GpuContext(gpu.gpu_context().driver, cache)
    first.kernel(kernel._default)
    entries = list((tmp_path / "kernels").glob("cuda-*.kernel"))
    assert len(entries) == 1
    stamp = entries[0].stat().st_mtime_ns
    second = gpu.GpuContext(gpu.gpu_context().driver, cache)
    second.kernel(kernel._default)
    assert entries[0].stat().st_mtime_ns == stamp     # read, not written again


def test_cupy_in_cupy_out():
    cupy = pytest.importorskip("cupy")
    cusparse = pytest.importorskip("cupyx.scipy.sparse")
    rng = np.random.default_rng(4)
    a = random_dense((300, 200), 0.05, rng)
    x = rng.standard_normal(200)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    host = kernel._bound({"A": ta.Tensor.from_numpy(a, format="csr"), "x": x})
    compiled = kernel._program_for(host, (300,))
    a_gpu = cusparse.csr_matrix(cupy.asarray(a))
    y = gpu.run(compiled, {"A": a_gpu, "x": cupy.asarray(x)}, np.float64, (300,))
    assert isinstance(y, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(y), a @ x, rtol=1e-12)
    spgemm = ta.compile("Z(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr"})
    bound = spgemm._bound({"A": a, "B": a.T.copy()})
    compiled = spgemm._program_for(bound, (300, 300))
    z = gpu.run(compiled, {"A": a_gpu, "B": cusparse.csr_matrix(cupy.asarray(a.T.copy()))},
                np.float64, (300, 300))
    assert isinstance(z, cusparse.csr_matrix)
    np.testing.assert_allclose(z.get().toarray(), a @ a.T, rtol=1e-12, atol=1e-12)


def _public_api_runs_cuda() -> bool:
    try:
        ta.einsum("ij,j->i", np.eye(2), np.ones(2), backend="cuda")
    except ta.UnsupportedError as error:
        return "yet" not in str(error)
    return True


@pytest.mark.skipif(REASON is None and not _public_api_runs_cuda(),
                    reason="api.py does not route backend='cuda' to tensoralg.gpu yet")
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_random_einsum_matches_numpy_or_is_refused(data):
    """The property test of ``test_properties.py`` with ``backend="cuda"``: every expression
    gives NumPy's answer or an UnsupportedError that says what is not mapped, never a wrong
    answer."""
    from test_properties import cases

    subscripts, sizes, fmts, densities, out_format, _, dtype, seed = data.draw(cases())
    rng = np.random.default_rng(seed)
    terms = subscripts.split("->")[0].split(",")
    operands, dense = [], []
    for term, fmt, density in zip(terms, fmts, densities):
        a = random_dense(tuple(sizes[c] for c in term), density, rng, dtype)
        dense.append(a)
        operands.append(dtype(a[()]) if not term else ta.Tensor.from_numpy(a, format=fmt))
    try:
        got = ta.einsum(subscripts, *operands, backend="cuda", out_format=out_format)
    except ta.UnsupportedError as error:
        assert "GPU" in str(error) or "cuda" in str(error)
        return
    want = np.einsum(subscripts, *dense)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(densify(got), want, err_msg=subscripts, **tol)
