"""The CUDA kernels run on the CPU emulator (``tensoralg/gpu/emulate.py``) against NumPy.

The emulator compiles the very translation unit the GPU gets, as C++ with one OS thread per CUDA
thread, and the runtime drives it as it drives a GPU: the same mapping choices, grids, scans and
fix-ups. Small blocks (64 threads) and grids (3 blocks) make every grid-striding loop take
several turns; merge-path shares of 4 steps split rows across threads; scans of 4 values a
thread recurse. Every mapping a kernel allows runs, on random data, on rows that are mostly
empty, on a single nonzero, and on zero-size dimensions.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import densify, random_dense

import tensoralg as ta
from tensoralg.gpu.context import GpuContext
from tensoralg.gpu.execute import launch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

# name -> (statement, operands as (name, letters, format), einsum of the reference)
CASES = {
    "spmv": ("y(i) = A(i,j) * x(j)", [("A", "ij", "csr"), ("x", "j", None)], "ij,j->i"),
    "spmm": ("Y(i,k) = A(i,j) * B(j,k)", [("A", "ij", "csr"), ("B", "jk", None)], "ij,jk->ik"),
    "sddmm": ("Z(i,j) = A(i,j) * X(i,k) * Y(j,k)",
              [("A", "ij", "csr"), ("X", "ik", None), ("Y", "jk", None)], "ij,ik,jk->ij"),
    "spgemm": ("Z(i,j) = A(i,k) * B(k,j)", [("A", "ik", "csr"), ("B", "kj", "csr")],
               "ik,kj->ij"),
    "add": ("Z(i,j) = A(i,j) + B(i,j)", [("A", "ij", "csr"), ("B", "ij", "csr")], None),
    "mttkrp": ("Z(i,j) = T(i,k,l) * C(k,j) * D(l,j)",
               [("T", "ikl", "sss"), ("C", "kj", None), ("D", "lj", None)], "ikl,kj,lj->ij"),
    "ttv": ("Z(i,j) = T(i,j,k) * c(k)", [("T", "ijk", "sss"), ("c", "k", None)], "ijk,k->ij"),
    "dense_layer": ("Z(i,j) = max(sum(k, X(i,k) * W(k,j)) + b(j), 0)",
                    [("X", "ik", None), ("W", "kj", None), ("b", "j", None)], None),
    "sparse_layer": ("Z(j,i) = max(sum(k, W(j,k) * X(k,i)) + b(j), 0)",
                     [("W", "jk", "csr"), ("X", "ki", None), ("b", "j", None)], None),
    "dot": ("a = A(i,j) * E(i,j)", [("A", "ij", "csr"), ("E", "ij", None)], "ij,ij->"),
    "transposed_spmv": ("y(j) = A(i,j) * x(i)", [("A", "ij", "csr"), ("x", "i", None)],
                        "ij,i->j"),
    "dense_add": ("Z(i,j) = E(i,j) + F(i,j)", [("E", "ij", None), ("F", "ij", None)], None),
    "sparse_vectors": ("y(i) = a(i) + b(i)", [("a", "i", "s"), ("b", "i", "s")], None),
}
OUTPUT_FORMATS = {"mttkrp": {"Z": "dense"}, "ttv": {"Z": "dense"},
                  "sparse_vectors": {"y": "dense"}}

# variant -> (sizes of the letters, density)
VARIANTS = {
    "random": ({"i": 37, "j": 29, "k": 11, "l": 6}, 0.3),
    "mostly_empty_rows": ({"i": 40, "j": 33, "k": 9, "l": 5}, 0.02),
    "one_nonzero": ({"i": 9, "j": 7, "k": 5, "l": 3}, "one"),
    "no_rows": ({"i": 0, "j": 6, "k": 4, "l": 3}, 0.5),
    "empty_sum": ({"i": 6, "j": 5, "k": 0, "l": 0}, 0.5),
}


@pytest.fixture(scope="module")
def context():
    from tensoralg.gpu.emulate import EmulatedDriver

    return GpuContext(EmulatedDriver())


def reference(case: str, dense: dict[str, np.ndarray]) -> np.ndarray:
    statement, operands, subscripts = CASES[case]
    if subscripts is not None:
        return np.einsum(subscripts, *(dense[name] for name, _, _ in operands))
    if case == "dense_layer":
        return np.maximum(dense["X"] @ dense["W"] + dense["b"], 0)
    if case == "sparse_layer":
        return np.maximum(dense["W"] @ dense["X"] + dense["b"][:, None], 0)
    first, second = (dense[name] for name, _, _ in operands)
    return first + second


def run_case(context, case: str, variant: str, mapping: str | None, dtype=np.float64,
            seed: int = 0):
    statement, operands, _ = CASES[case]
    sizes, density = VARIANTS[variant]
    rng = np.random.default_rng(seed)
    formats = {name: fmt for name, _, fmt in operands if fmt is not None}
    formats.update(OUTPUT_FORMATS.get(case, {}))
    kernel = ta.compile(statement, formats=formats, dtype=np.dtype(dtype).name)
    dense, given = {}, {}
    for name, letters, fmt in operands:
        array = random_dense(tuple(sizes[c] for c in letters), density if fmt else 1.0, rng,
                             dtype)
        dense[name] = array
        given[name] = ta.Tensor.from_numpy(array, format=fmt) if fmt else array
    bound = kernel._bound(given)
    shape = kernel._output_shape(bound)
    compiled = kernel._program_for(bound, shape)
    result, choice = launch(context, compiled, bound, np.dtype(dtype), shape, None, mapping)
    host = result.to_host()
    return densify(host).reshape(shape), reference(case, dense), choice


def check(got, want, dtype, note):
    tolerance = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else \
        dict(rtol=1e-10, atol=1e-10)
    assert got.shape == want.shape, note
    np.testing.assert_allclose(got, want, err_msg=note, **tolerance)


def mappings_of(context, case: str) -> list[str | None]:
    from tensoralg.codegen.cuda import cuda_program
    from tensoralg.gpu.function import gpu_function

    statement, operands, _ = CASES[case]
    formats = {name: fmt for name, _, fmt in operands if fmt is not None}
    formats.update(OUTPUT_FORMATS.get(case, {}))
    kernel = ta.compile(statement, formats=formats)
    return [None, *cuda_program(gpu_function(kernel._default)).mappings]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", CASES)
def test_every_mapping_matches_numpy(context, case, variant):
    for mapping in mappings_of(context, case):
        got, want, choice = run_case(context, case, variant, mapping)
        check(got, want, np.float64, f"{case} {variant} {mapping} -> {choice}")


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
@pytest.mark.parametrize("case", ["spmv", "spgemm", "mttkrp", "dot", "transposed_spmv"])
def test_other_dtypes(context, case, dtype):
    for mapping in mappings_of(context, case):
        got, want, choice = run_case(context, case, "random", mapping, dtype, seed=3)
        check(got, want, dtype, f"{case} {dtype.__name__} {mapping} -> {choice}")


def test_skewed_rows_choose_the_merge_path(context):
    rng = np.random.default_rng(5)
    a = random_dense((300, 2000), 0.002, rng)
    a[7] = rng.uniform(0.5, 2.0, 2000)          # one row with every column: 2000 nonzeros
    x = rng.standard_normal(2000)
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    bound = kernel._bound({"A": ta.Tensor.from_numpy(a, format="csr"), "x": x})
    compiled = kernel._program_for(bound, (300,))
    result, choice = launch(context, compiled, bound, np.dtype("float64"), (300,), None, None)
    assert choice.mapping == "nonzero-split", choice
    np.testing.assert_allclose(result.to_host(), a @ x, rtol=1e-10, atol=1e-10)


def test_lanes_follow_the_row_lengths(context):
    _, _, choice = run_case(context, "spmv", "random", None)
    assert choice.mapping == "warp-per-row" and choice.lanes == {"rows": 8}, choice
    _, _, choice = run_case(context, "spmv", "mostly_empty_rows", None)
    assert choice.mapping == "thread-per-row", choice
    _, _, choice = run_case(context, "spmm", "random", None)
    assert choice.mapping == "warp-per-row" and choice.lanes == {"rows": 16}, choice


def test_device_results_stay_on_the_device(context):
    from tensoralg.gpu.memory import DeviceArray, DeviceTensor, upload_tensor

    rng = np.random.default_rng(1)
    a = random_dense((20, 30), 0.2, rng)
    kernel = ta.compile("Z(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr"})
    host = {"A": ta.Tensor.from_numpy(a, format="csr"),
            "B": ta.Tensor.from_numpy(a.T.copy(), format="csr")}
    device = {name: upload_tensor(context.driver, t) for name, t in host.items()}
    compiled = kernel._program_for(host, (20, 20))
    result, _ = launch(context, compiled, device, np.dtype("float64"), (20, 20), None, None)
    assert isinstance(result, DeviceTensor) and isinstance(result.vals, DeviceArray)
    np.testing.assert_allclose(result.to_host().to_numpy(), a @ a.T, rtol=1e-12)
    # the result feeds the next kernel without leaving the device
    spmv = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    x = upload_tensor(context.driver, ta.Tensor.from_numpy(np.ones(20)))
    compiled = spmv._program_for(spmv._bound({"A": result.to_host(), "x": np.ones(20)}), (20,))
    y, _ = launch(context, compiled, {"A": result, "x": x}, np.dtype("float64"), (20,), None,
                  None)
    np.testing.assert_allclose(y.to_host(), (a @ a.T).sum(axis=1), rtol=1e-12)


def test_device_operand_of_the_wrong_dtype_is_refused(context):
    from tensoralg.gpu.memory import upload_tensor

    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    a = ta.Tensor.from_numpy(np.eye(3, dtype=np.float32), format="csr")
    x = ta.Tensor.from_numpy(np.ones(3))
    compiled = kernel._program_for({"A": a.astype(np.float64), "x": x}, (3,))
    device = {"A": upload_tensor(context.driver, a), "x": x}
    with pytest.raises(ta.InputError, match="device operand A holds float32"):
        launch(context, compiled, device, np.dtype("float64"), (3,), None, None)


def test_tensor_to_device_and_back_on_the_emulated_driver(context):
    # ta.Tensor.to_device() copies every storage array; the device tensor's to_host() gives
    # back the same tensor.
    import scipy.sparse as sp

    A = sp.random_array((30, 20), density=0.2, format="csr", random_state=3)
    tensor = ta.Tensor.from_scipy(A)
    on_device = tensor.to_device(context)
    assert on_device.shape == tensor.shape and on_device.format == tensor.format
    back = on_device.to_host()
    np.testing.assert_array_equal(back.to_numpy(), A.toarray())
    assert tensor.to_host() is tensor
