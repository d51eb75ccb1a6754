"""``floor``, ``ceil`` and ``round`` in statements: compiled on both CPU backends and printed
for CUDA, against NumPy's ``floor``/``ceil``/``rint`` (half to even) bit for bit.

The cases hold the values rounding gets wrong most easily: halves of both signs (``round``
must go to even, not away from zero as C's ``round``), -0.0 (its sign kept), values past
2^23 / 2^52 (already integral), NaN and both infinities, and integer operands (unchanged).
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.codegen.cuda import cuda_program
from tensoralg.gpu.function import gpu_function

FUNCTIONS = {"floor": np.floor, "ceil": np.ceil, "round": np.rint}
HARD = [-2.5, -1.5, -0.5, -0.0, 0.0, 0.5, 1.5, 2.5, 0.49999997, -0.49999997, 2.7, -2.7,
        8388609.5, -8388609.5, 2.0 ** 52 + 1, 1e300, -1e300, np.nan, np.inf, -np.inf, 1e-40]


def _values(dtype: np.dtype, size: int = 1000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        hard = np.array(HARD).astype(dtype)
    # Random halves and near-halves, spread over several binades, then the hard cases.
    scale = 2.0 ** rng.integers(-3, 12, size)
    values = np.round(rng.standard_normal(size) * scale * 2) / 2
    values[::3] += rng.standard_normal(len(values[::3])) * 1e-3
    return np.concatenate([values.astype(dtype), hard])


def _same(result: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(np.signbit(result), np.signbit(expected))


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_dense_matches_numpy(backend, dtype, name):
    x = _values(np.dtype(dtype))
    kernel = ta.compile(f"y(i) = {name}(x(i))", formats={"x": "d", "y": "d"}, dtype=dtype,
                        backend=backend)
    _same(kernel(x=x), FUNCTIONS[name](x))


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_inside_an_expression(backend, dtype):
    """Rounding inside arithmetic (a quantize-dequantize step) and on a 2-D operand whose rows
    cross the vector width, so that the vectorised body and its tail both run."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 67)) * 40).astype(dtype)
    s = np.asarray(0.37, dtype=dtype)
    kernel = ta.compile("Y(i,j) = (min(max(round(X(i,j) / s) + 3, 0), 255) - 3) * s",
                        formats={"X": "dd", "Y": "dd"}, dtype=dtype, backend=backend)
    with np.errstate(invalid="ignore"):
        expected = (np.clip(np.rint(x / s) + 3, 0, 255) - 3) * s
    np.testing.assert_array_equal(kernel(X=x, s=s), expected.astype(dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_integers_are_unchanged(dtype, name):
    x = np.arange(-50, 50, dtype=dtype) * 3
    result = ta.compile(f"y(i) = {name}(x(i)) + 1", formats={"x": "d", "y": "d"},
                        dtype=dtype)(x=x)
    np.testing.assert_array_equal(result, x + 1)
    assert result.dtype == np.dtype(dtype)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_sparse_operand_keeps_its_pattern(name):
    """Each function maps 0 to 0, so the result of a sparse operand is sparse, within the
    operand's pattern (values that round to 0 included)."""
    rng = np.random.default_rng(2)
    a = sp.random(40, 30, density=0.1, format="csr", random_state=rng)
    a.data = a.data * 8 - 4
    a.data[:5] = 0.25
    kernel = ta.compile(f"Y(i,j) = {name}(A(i,j))", formats={"A": "csr", "Y": "csr"},
                        dtype="float64")
    result = kernel(A=a)
    expected = a.copy()
    expected.data = FUNCTIONS[name](expected.data)
    assert sp.issparse(result) and result.nnz <= a.nnz
    np.testing.assert_array_equal(result.toarray(), expected.toarray())


def test_einsum_arrays_route():
    x = ta.Tensor.from_numpy(np.array([[0.0, -1.5], [2.5, 0.0]]), "csr")
    np.testing.assert_array_equal(np.asarray(np.rint(x).to_numpy()), [[0.0, -2.0], [2.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(np.floor(x).to_numpy()), [[0.0, -2.0], [2.0, 0.0]])
    np.testing.assert_array_equal(np.asarray(np.ceil(x).to_numpy()), [[0.0, -1.0], [3.0, 0.0]])


def test_wrong_arity_is_a_notation_error():
    with pytest.raises(ta.NotationError, match="round"):
        ta.compile("y(i) = round(x(i), x(i))", formats={"x": "d", "y": "d"})


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_source_compiles(tmp_path):
    sources = []
    for dtype in ("float32", "float64"):
        kernel = ta.compile("y(i) = floor(x(i)) + ceil(x(i)) + round(x(i))",
                            formats={"x": "d", "y": "d"}, dtype=dtype)
        source = cuda_program(gpu_function(kernel._default)).source
        assert "nearbyint" in source
        sources.append(source)
    path = tmp_path / "rounding.cu"
    path.write_text("\n".join(sources))
    result = subprocess.run(["nvcc", "--ptx", "-arch=sm_90", "-Werror", "all-warnings", "-o",
                             str(tmp_path / "rounding.ptx"), str(path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]


def test_onnx_rounding_ops_fuse_and_match_onnxruntime():
    """ONNX Floor, Ceil and Round run as these functions and join fused statements."""
    pytest.importorskip("onnxruntime")
    from conftest import onnx_model, onnxruntime_outputs
    from onnx import TensorProto, helper

    import tensoralg.onnx as tonnx

    x = (_values(np.dtype(np.float32), 200)[:200] / 3).reshape(8, 25)
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"]), helper.make_node("Round", ["m"], ["r"]),
             helper.make_node("Floor", ["r"], ["f"]), helper.make_node("Add", ["f", "x"], ["a"]),
             helper.make_node("Ceil", ["a"], ["y"])]
    model = onnx_model(nodes, {"x": x}, [("y", TensorProto.FLOAT, [8, 25])],
                       {"k": np.array(2.5, np.float32)})
    expected = onnxruntime_outputs(model, {"x": x})[0]
    for level in (0, 2, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3 if level == 3 else 1):
            got = compiled.run({"x": x})["y"]
        np.testing.assert_array_equal(got, expected)
    assert "ceil(" in compiled.stage_text("plan") and "round(" in compiled.stage_text("plan")
