"""A constant's products with batches of columns as row products
(``einsum_products.column_products_as_row_products``): ``MatMul(W, X)`` with ``W`` (M, K)
constant and ``X`` (..., K, 1) runs as ``X' @ W^T`` between two reshapes (DCN-Mix's experts),
against onnxruntime at every level; what the pass leaves alone stays as exported.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg.onnx as tonnx


def _model(x_shape, weight_shape, *, constant=True, dtype=np.float32, axis=-1):
    """``y = tanh(W @ unsqueeze(x, axis))`` (``x_shape`` before the unsqueeze)."""
    rng = np.random.default_rng(sum(x_shape) + sum(weight_shape))
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    weight = (rng.standard_normal(weight_shape) / np.sqrt(weight_shape[-1])).astype(dtype)
    inputs = [h.make_tensor_value_info("x", kind, list(x_shape))]
    inits = [numpy_helper.from_array(np.array([axis], np.int64), "axes")]
    if constant:
        inits.append(numpy_helper.from_array(weight, "W"))
    else:
        inputs.append(h.make_tensor_value_info("W", kind, list(weight_shape)))
    nodes = [h.make_node("Unsqueeze", ["x", "axes"], ["columns"], name="unsqueeze"),
             h.make_node("MatMul", ["W", "columns"], ["p"], name="expert"),
             h.make_node("Tanh", ["p"], ["y"], name="act")]
    graph = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info("y", kind, [None] * (len(x_shape) + 1))],
                         inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), weight


@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("x_shape, weight_shape", [
    ((256, 221), (32, 221)),        # DCN-Mix's V^T x
    ((7, 32), (221, 32)),           # its U C ... back to the input width
    ((2, 3, 5), (4, 5)),            # two batch axes
    ((1, 1), (1, 1)),
])
def test_column_products_match_onnxruntime(level, x_shape, weight_shape):
    model, _ = _model(x_shape, weight_shape)
    feeds = {"x": np.random.default_rng(level).standard_normal(x_shape).astype(np.float32)}
    compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=level)
    got = compiled.run(feeds)["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)
    note = "column products: 1 MatMul(s) of a constant by columns as row products"
    assert (note in compiled.stage_text("plan")) == (level >= 2)


def test_float64_column_products_match_numpy():
    model, weight = _model((6, 9), (4, 9), dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((6, 9))
    got = planned_model(model, {"x": x}).run({"x": x})["y"]
    np.testing.assert_allclose(got, np.tanh(weight @ x[..., None]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["weight is an input", "rows, not columns"])
def test_products_the_pass_cannot_take_stay(case):
    if case == "weight is an input":
        model, weight = _model((5, 8), (3, 8), constant=False)
        feeds = {"x": np.ones((5, 8), np.float32), "W": weight}
    else:
        model, _ = _model((5, 8), (3, 1), axis=-2)     # W (3, 1) @ (5, 1, 8): rows of 8
        feeds = {"x": np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)}
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        got = compiled.run(feeds)["y"]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=1e-5, atol=1e-5)
    assert "column products: 0" in compiled.stage_text("plan")
