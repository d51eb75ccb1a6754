"""``CumSum`` as a compiled scan in level 3's plan: integers (the offsets of exported
KeyedJaggedTensors) against onnxruntime for every axis, exclusive and reverse combination,
int32 and int64, including sums that wrap; floats (TabNet's sparsemax) equal to NumPy's
``cumsum`` to the bit, as the scan adds in NumPy's order."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import onnxruntime_outputs, planned_model  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TYPES = {np.int32: TensorProto.INT32, np.int64: TensorProto.INT64,
         np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def _model(shape: tuple[int, ...], dtype, axis: int, exclusive: int, reverse: int):
    # CumSum feeding an Add, so that the scan sits inside the compiled sequence
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["s"], exclusive=exclusive,
                              reverse=reverse),
             helper.make_node("Add", ["s", "x"], ["y"])]
    graph = helper.make_graph(
        nodes, "scan", [helper.make_tensor_value_info("x", TYPES[dtype], shape)],
        [helper.make_tensor_value_info("y", TYPES[dtype], shape),
         helper.make_tensor_value_info("s", TYPES[dtype], shape)],
        [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_integer_cumsum_is_a_compiled_scan(dtype, axis, exclusive, reverse):
    shape = (3, 17, 5)
    model = _model(shape, dtype, axis, exclusive, reverse)
    rng = np.random.default_rng(abs(axis) * 4 + exclusive * 2 + reverse)
    feeds = {"x": rng.integers(-50, 50, shape).astype(dtype)}
    compiled = planned_model(model, feeds)
    plan = compiled.specialiser.latest()
    assert any((s.plan or "").startswith("compiled scan") for s in plan.steps)
    for _ in range(3):          # new values through the same plan
        feeds = {"x": rng.integers(-50, 50, shape).astype(dtype)}
        for got, want in zip(compiled.run(feeds).values(), onnxruntime_outputs(model, feeds)):
            np.testing.assert_array_equal(got, want)


def test_integer_cumsum_wraps_as_onnxruntime_does():
    model = _model((2, 4), np.int32, 1, 0, 0)
    feeds = {"x": np.full((2, 4), 2**30 + 7, np.int32)}
    compiled = planned_model(model, feeds)
    for got, want in zip(compiled.run(feeds).values(), onnxruntime_outputs(model, feeds)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_float_cumsum_is_a_compiled_scan_with_numpys_sums(dtype, axis, exclusive, reverse):
    shape = (3, 17, 5)
    model = _model(shape, dtype, axis, exclusive, reverse)
    rng = np.random.default_rng(abs(axis) * 4 + exclusive * 2 + reverse)
    feeds = {"x": (rng.standard_normal(shape) * 1e3).astype(dtype)}
    compiled = planned_model(model, feeds)
    plan = compiled.specialiser.latest()
    assert any((s.plan or "").startswith("compiled scan") for s in plan.steps)
    for _ in range(3):
        x = (rng.standard_normal(shape) * 1e3).astype(dtype)
        values = np.flip(x, axis) if reverse else x
        sums = np.cumsum(values, axis=axis, dtype=dtype)
        if exclusive:
            sums = np.concatenate([np.zeros_like(np.take(sums, [0], axis=axis)),
                                   np.delete(sums, -1, axis=axis)], axis=axis)
        want = np.flip(sums, axis) if reverse else sums
        got = compiled.run({"x": x})
        np.testing.assert_array_equal(got["s"], want)
        np.testing.assert_allclose(got["s"], onnxruntime_outputs(model, {"x": x})[1],
                                   rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-3)
