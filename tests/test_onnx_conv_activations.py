"""Sigmoid-family activations fused into the Conv before them (``folding.fuse_conv_activations``,
``codegen/activation.py``): SiLU (``Mul(h, Sigmoid(h))``), Sigmoid, HardSigmoid and HardSwish,
applied in registers by every convolution kernel a plan picks (generated GEMM, planar 1x1,
depthwise and grouped windows, patch blocks, the compiled-weights kernel) or, on the statement
path, as a second kernel in place; against onnxruntime at every level.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg.onnx as tonnx
from tensoralg.program import HARD_SWISH, SILU, Activation, as_activation

RTOL, ATOL = 1e-4, 1e-5

ACTIVATIONS = ["silu", "silu_swapped", "sigmoid", "hardswish", "hardsigmoid"]
# (N, C, H, W), (M, KH, KW), group, strides, pads, dilations, what the plan line says
CONVS = {
    "planar 1x1": ((2, 16, 9, 15), (24, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
    "gemm 3x3": ((2, 64, 10, 9), (70, 3, 3), 1, (1, 1), (1, 1, 1, 1), (1, 1)),
    "depthwise": ((2, 32, 11, 13), (32, 3, 3), 32, (2, 2), (1, 1, 1, 1), (1, 1)),
    "grouped": ((1, 32, 9, 9), (32, 3, 3), 4, (1, 1), (1, 1, 1, 1), (1, 1)),
    "squeeze 1x1 on 1x1": ((2, 40, 1, 1), (10, 1, 1), 1, (1, 1), (0, 0, 0, 0), (1, 1)),
    # 13 rows and columns: no phase images (passes/conv_ranks.py), the patch-matrix path
    "dilated": ((1, 8, 13, 13), (9, 3, 3), 1, (1, 1), (2, 2, 2, 2), (2, 2)),
    "dilated over phases": ((1, 8, 12, 12), (9, 3, 3), 1, (1, 1), (2, 2, 2, 2), (2, 2)),
    "stem 3 channels": ((2, 3, 30, 31), (32, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
}


def _model(x_shape, conv, activation, dtype=np.float32, extra_reader=False):
    (m, kh, kw), group, strides, pads, dilations = conv[1], conv[2], conv[3], conv[4], conv[5]
    rng = np.random.default_rng(m + kh + group)
    c = x_shape[1]
    w = (rng.standard_normal((m, c // group, kh, kw)) / math.sqrt(c // group * kh * kw) * 2)
    constants = {"w": w.astype(dtype), "b": rng.standard_normal(m).astype(dtype)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["h"], name="conv", group=group,
                         strides=list(strides), pads=list(pads), dilations=list(dilations))]
    if activation.startswith("silu"):
        nodes.append(h.make_node("Sigmoid", ["h"], ["s"], name="sigmoid"))
        pair = ["s", "h"] if activation == "silu_swapped" else ["h", "s"]
        nodes.append(h.make_node("Mul", pair, ["y"], name="mul"))
    elif activation == "sigmoid":
        nodes.append(h.make_node("Sigmoid", ["h"], ["y"], name="act"))
    elif activation == "hardswish":
        nodes.append(h.make_node("HardSwish", ["h"], ["y"], name="act"))
    else:
        nodes.append(h.make_node("HardSigmoid", ["h"], ["y"], name="act", alpha=0.3, beta=0.4))
    outputs = [h.make_tensor_value_info("y", TensorProto.FLOAT if dtype == np.float32 else
                                       TensorProto.DOUBLE, [None] * 4)]
    if extra_reader:
        outputs.append(h.make_tensor_value_info("h", outputs[0].type.tensor_type.elem_type,
                                                [None] * 4))
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx_type, list(x_shape))],
                         outputs, [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _check(model, x, level):
    want = onnxruntime_outputs(model, {"x": x})
    if level == 3:
        compiled = planned_model(model, {"x": x})
    else:
        compiled = tonnx.load(model, opt_level=level)
    got = compiled.run({"x": x})
    for value, name in zip(want, [o.name for o in model.graph.output]):
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL)
    return compiled


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("kind", list(CONVS))
def test_conv_with_fused_smooth_activation_matches_onnxruntime(kind, activation):
    conv = CONVS[kind]
    model = _model(conv[0], conv, activation)
    x = (np.random.default_rng(3).standard_normal(conv[0]) * 2).astype(np.float32)
    compiled = _check(model, x, 3)
    # the activation is fused: one Conv node (between the phase images' reshapes and
    # transposes for a dilated one), and the plan names the activation
    assert [n.op_type for n in compiled.graph.nodes
            if n.op_type not in ("Reshape", "Transpose")] == ["Conv"]
    plan = [r.plan for r in compiled.profile({"x": x}).rows if r.op_type == "Conv"][0].lower()
    words = {"silu": ("silu", "* sigmoid("), "sigmoid": ("sigmoid",),
             "hardswish": ("hardswish", "max(min("), "hardsigmoid": ("hardsigmoid", "max(min(")}
    assert any(word in plan for word in words[activation.replace("_swapped", "")]), plan
    # a second input through the same plan
    other = np.random.default_rng(5).standard_normal(conv[0]).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": other})["y"],
                               onnxruntime_outputs(model, {"x": other})[0], rtol=RTOL,
                               atol=ATOL)


@pytest.mark.parametrize("level", [0, 1, 2])
@pytest.mark.parametrize("activation", ["silu", "hardswish", "hardsigmoid"])
def test_fused_activation_node_by_node_matches_onnxruntime(activation, level):
    conv = CONVS["gemm 3x3"]
    x = np.random.default_rng(4).standard_normal(conv[0]).astype(np.float32)
    _check(_model(conv[0], conv, activation), x, level)


@pytest.mark.parametrize("kind", ["planar 1x1", "gemm 3x3", "depthwise"])
def test_fused_silu_in_float64_matches_the_unfused_graph(kind):
    # onnxruntime has no float64 Conv: level 0 (no fusion, node by node) is the reference
    conv = CONVS[kind]
    x = np.random.default_rng(6).standard_normal(conv[0])
    model = _model(conv[0], conv, "silu", dtype=np.float64)
    want = tonnx.load(model, opt_level=0).run({"x": x})["y"]
    compiled = planned_model(model, {"x": x})
    assert [n.op_type for n in compiled.graph.nodes] == ["Conv"]
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-12, atol=1e-13)


def test_silu_is_not_fused_when_the_conv_output_is_read_elsewhere():
    conv = CONVS["planar 1x1"]
    model = _model(conv[0], conv, "silu", extra_reader=True)
    x = np.random.default_rng(7).standard_normal(conv[0]).astype(np.float32)
    compiled = _check(model, x, 3)
    assert [n.op_type for n in compiled.graph.nodes][0] == "Conv"
    assert "activation" not in compiled.graph.nodes[0].attributes


def test_extreme_inputs_keep_the_unfused_graphs_values():
    # sigmoid's exp overflows for large |x|; NaN propagates; SiLU(-inf) is NaN as
    # Mul(-inf, Sigmoid(-inf)) = -inf * 0 is in the graph
    conv = CONVS["planar 1x1"]
    model = _model(conv[0], conv, "silu")
    x = np.random.default_rng(8).standard_normal(conv[0]).astype(np.float32) * 60
    x[0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    want = onnxruntime_outputs(model, {"x": x})[0]
    got = planned_model(model, {"x": x}).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_activation_values_are_checked():
    assert as_activation(SILU) is SILU and str(HARD_SWISH) == "HardSwish"
    assert Activation.hard_sigmoid(0.2, 0.5).text("A(i)") == \
        "max(min(((A(i)) * 0.2 + 0.5), 1), 0)"
    with pytest.raises(ValueError, match="no clamp bounds"):
        Activation("Silu", 0.0, 1.0)
    with pytest.raises(ValueError, match="alpha 1/6"):
        Activation("HardSwish", alpha=0.2, beta=0.5)
    with pytest.raises(ValueError, match="unknown fused activation"):
        Activation("Mish")


def _reference(y: np.ndarray, activation: Activation) -> np.ndarray:
    sigmoid = 1 / (1 + np.exp(-y))
    if activation.kind == "Sigmoid":
        return sigmoid
    if activation.kind == "Silu":
        return y * sigmoid
    hard = np.clip(y * activation.alpha + activation.beta, 0, 1)
    return hard if activation.kind == "HardSigmoid" else y * hard


@pytest.mark.parametrize("avx512", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", [SILU, HARD_SWISH, Activation("Sigmoid"),
                                        Activation.hard_sigmoid(0.3, 0.4)])
def test_shared_modules_apply_each_activation(activation, dtype, avx512, monkeypatch):
    # the modules one dtype shares (generated GEMM, planar 1x1) select the activation at run
    # time; built for 16 and for 8 float32 lanes (an AVX2 host's), tails in every direction
    import tensoralg.runtime.gemm as gemm
    import tensoralg.runtime.planar as planar

    if not avx512:
        monkeypatch.setattr(gemm, "host_has_feature", lambda *_: False)
        monkeypatch.setattr(planar, "host_has_feature", lambda *_: False)
    rng = np.random.default_rng(11)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    w, b = rng.standard_normal((37, 70)).astype(dtype), rng.standard_normal(70).astype(dtype)
    a = (rng.standard_normal((23, 37)) * 2).astype(dtype)
    layer = gemm.DenseLayer(w, b, activation)
    assert str(activation).lower() in layer.describe(23)
    np.testing.assert_allclose(layer(a), _reference(a @ w + b, activation), **tol)
    pw, pb = rng.standard_normal((19, 13)).astype(dtype), rng.standard_normal(19).astype(dtype)
    x = rng.standard_normal((2, 13, 9, 11)).astype(dtype)
    want = _reference(np.einsum("mc,nchw->nmhw", pw, x) + pb[:, None, None], activation)
    np.testing.assert_allclose(planar.PlanarConv(pw, pb, activation)(x), want, **tol)
