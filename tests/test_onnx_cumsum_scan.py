"""Integer ``CumSum`` (the offsets of exported KeyedJaggedTensors) as a compiled scan in level
3's plan, against onnxruntime for every axis, exclusive and reverse combination, int32 and
int64, including sums that wrap."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import onnxruntime_outputs, planned_model  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402

TYPES = {np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}


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


def test_float_cumsum_keeps_its_numpy_step_and_agrees():
    shape = (4, 9)
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=1)]
    graph = helper.make_graph(
        nodes, "scan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.array(1, np.int64), "axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    feeds = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(4):
        got = compiled.run(feeds)["y"]
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, feeds)[0])
