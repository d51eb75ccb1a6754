"""GELU written out with Erf (``tensoralg/onnx/passes/gelu.py``) as one Gelu node, applied by
the generated GEMM in registers after the dense layer that feeds it: every form the PyTorch
exporters emit, the forms the pass must leave alone, and the fused kernel's numbers against
onnxruntime and NumPy (float32, float64, NaN and infinities).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg.onnx as tonnx
from tensoralg.onnx.frontend.graph import Graph
from tensoralg.onnx.passes.gelu import erf_gelus_as_gelu
from tensoralg.program import GELU, DenseLayer

RTOL, ATOL = 1e-4, 1e-5
SQRT2 = math.sqrt(2.0)


def _gelu_nodes(form: str, x: str, y: str) -> tuple[list, dict[str, np.ndarray]]:
    """The exporters' ways of writing ``y = gelu(x)`` with Erf."""
    c = {"sqrt2": np.array(SQRT2, np.float32), "one": np.array(1.0, np.float32),
         "half": np.array(0.5, np.float32), "rsqrt2": np.array(1 / SQRT2, np.float32)}
    if form == "torchscript":       # x / sqrt2 -> erf -> +1 -> * x -> * 0.5
        nodes = [h.make_node("Div", [x, "sqrt2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
                 h.make_node("Add", ["e", "one"], ["a"]), h.make_node("Mul", [x, "a"], ["m"]),
                 h.make_node("Mul", ["m", "half"], [y])]
    elif form == "dynamo":          # 0.5 * (1 + erf) first, then * x
        nodes = [h.make_node("Div", [x, "sqrt2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
                 h.make_node("Add", ["one", "e"], ["a"]), h.make_node("Mul", ["half", "a"], ["m"]),
                 h.make_node("Mul", [x, "m"], [y])]
    else:                           # transformers: x * 0.5 * (1 + erf(x * (1 / sqrt2)))
        nodes = [h.make_node("Mul", [x, "half"], ["xh"]),
                 h.make_node("Mul", ["rsqrt2", x], ["d"]), h.make_node("Erf", ["d"], ["e"]),
                 h.make_node("Add", ["e", "one"], ["a"]), h.make_node("Mul", ["xh", "a"], [y])]
    return nodes, c


def _dense_gelu_model(form: str, k: int, n: int, elem=TensorProto.FLOAT, rng=None):
    rng = rng or np.random.default_rng(0)
    dtype = np.float32 if elem == TensorProto.FLOAT else np.float64
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    gelu, constants = _gelu_nodes(form, "h", "y")
    nodes = [h.make_node("MatMul", ["x", "w"], ["p"]), h.make_node("Add", ["p", "b"], ["h"]),
             *gelu]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")] + \
        [numpy_helper.from_array(v.astype(dtype), name) for name, v in constants.items()]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, ["m", k])],
                         [h.make_tensor_value_info("y", elem, ["m", n])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("form", ["torchscript", "dynamo", "transformers"])
def test_dense_layer_with_gelu_matches_onnxruntime(form):
    model = _dense_gelu_model(form, 70, 150)
    x = np.random.default_rng(1).standard_normal((37, 70)).astype(np.float32) * 2
    want = onnxruntime_outputs(model, {"x": x})[0]
    for level in (0, 1, 2):
        np.testing.assert_allclose(tonnx.load(model, opt_level=level).run({"x": x})["y"], want,
                                   rtol=RTOL, atol=ATOL, err_msg=f"level {level}")
    compiled = planned_model(model, {"x": x})
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=RTOL, atol=ATOL)
    other = np.random.default_rng(2).standard_normal((37, 70)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": other})["y"],
                               onnxruntime_outputs(model, {"x": other})[0], rtol=RTOL, atol=ATOL)
    assert "bias + gelu in registers" in str(compiled.profile({"x": x}))
    assert [n.op_type for n in compiled.graph.nodes] == ["Fused"]


def test_dense_layer_with_gelu_in_float64_against_level_0_and_scipy():
    # onnxruntime has no float64 Erf: level 0 (node by node) and SciPy's erf are the
    # references; both paths evaluate erf to the approximation's 1.5e-7
    from scipy.special import erf

    model = _dense_gelu_model("torchscript", 70, 150, TensorProto.DOUBLE)
    x = np.random.default_rng(3).standard_normal((37, 70)) * 3
    compiled = planned_model(model, {"x": x})
    got = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(got, tonnx.load(model, opt_level=0).run({"x": x})["y"],
                               rtol=0, atol=1e-7)
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer[:2])
    z = x @ w + b
    np.testing.assert_allclose(got, 0.5 * z * (1 + erf(z / SQRT2)), rtol=0,
                               atol=2e-7 * np.abs(z).max())
    assert "gelu in registers" in str(compiled.profile({"x": x}))


def test_fused_gelu_keeps_nan_and_infinities():
    # the unfused formula's values: gelu(inf) = inf, gelu(-inf) = -inf * 0 = NaN, NaN stays
    for dtype in (np.float32, np.float64):
        layer = DenseLayer(np.ones((1, 1), dtype), np.zeros(1, dtype), GELU)
        x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 30.0, -30.0], dtype)
        got = layer(x.reshape(-1, 1))[:, 0]      # one row each: no product mixes them
        assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2])
        assert got[3] == 0 and got[4] == 0 and abs(got[5]) < 1e-29
        assert got[6] == 30 and got[7] == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_epilogue_on_every_tile_shape(dtype):
    # columns across a full panel, a narrow last panel and a masked vector; rows past a tile
    from scipy.special import erf

    rng = np.random.default_rng(4)
    for n in (5, 64, 100, 131):
        weight = rng.standard_normal((19, n)).astype(dtype)
        bias = rng.standard_normal(n).astype(dtype)
        x = rng.standard_normal((13, 19)).astype(dtype)
        z = x.astype(np.float64) @ weight + bias
        want = 0.5 * z * (1 + erf(z / SQRT2))
        np.testing.assert_allclose(DenseLayer(weight, bias, GELU)(x), want, rtol=2e-5,
                                   atol=2e-5)


def _graph(form: str, extra_reader: str | None = None, half: float = 0.5) -> Graph:
    nodes, constants = _gelu_nodes(form, "x", "y")
    constants["half"] = np.array(half, np.float32)
    outputs = [h.make_tensor_value_info("y", TensorProto.FLOAT, [4])]
    if extra_reader is not None:
        nodes.append(h.make_node("Neg", [extra_reader], ["z"]))
        outputs.append(h.make_tensor_value_info("z", TensorProto.FLOAT, [4]))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                         outputs, [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return tonnx.load(model, opt_level=0).graph


@pytest.mark.parametrize("form", ["torchscript", "dynamo", "transformers"])
def test_the_pass_replaces_each_form_by_one_gelu(form):
    graph = erf_gelus_as_gelu(_graph(form))
    assert [(n.op_type, n.inputs, n.outputs) for n in graph.nodes] == [("Gelu", ("x",), ("y",))]


@pytest.mark.parametrize("form, case", [
    ("torchscript", "an intermediate read elsewhere"),
    ("dynamo", "an intermediate read elsewhere"),
    ("torchscript", "not a half"),
])
def test_the_pass_leaves_other_forms_alone(form, case):
    graph = _graph(form, extra_reader="e" if "elsewhere" in case else None,
                   half=0.5 if "elsewhere" in case else 0.25)
    before = [n.op_type for n in graph.nodes]
    assert [n.op_type for n in erf_gelus_as_gelu(graph).nodes] == before
    assert "Gelu" not in before


def test_x_read_elsewhere_still_fuses():
    # the GELU's input may have other readers (a residual branch); the output keeps its name
    graph = erf_gelus_as_gelu(_graph("torchscript", extra_reader="x"))
    assert [n.op_type for n in graph.nodes] == ["Gelu", "Neg"]
