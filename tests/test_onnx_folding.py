"""Conv + BatchNormalization folding (opt level 2, :mod:`tensoralg.onnx.passes.folding`): folded
models match onnxruntime at every opt level, and each pair that may not be folded is left as it
is, still correct."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx import helper as h  # noqa: E402
from test_onnx_ops_extra import small_cnn  # noqa: E402  (the CNN of the importer issue)

import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.frontend.load import build_graph  # noqa: E402
from tensoralg.onnx.passes.folding import fold_conv_batchnorm  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def _conv_bn(rng, *, group=1, bias=True, dtype=np.float32, extra_nodes=(), extra_outputs=(),
             graph_inputs=(), channels=4, out_channels=6, epsilon=1e-3):
    """x -> Conv(3x3, pads 1) -> BatchNormalization -> Relu -> y, on 2 x channels x 5 x 5."""
    elem = F64 if dtype == np.float64 else F32
    conv_inputs = ["x", "W", "B"] if bias else ["x", "W"]
    nodes = [h.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1], group=group,
                         name="conv"),
             h.make_node("BatchNormalization", ["c", "gamma", "beta", "mu", "var"], ["bn"],
                         epsilon=epsilon, name="bn"),
             h.make_node("Relu", ["bn"], ["y"], name="relu"), *extra_nodes]
    values = {"W": rng.standard_normal((out_channels, channels // group, 3, 3)) * 0.3,
              "B": rng.standard_normal(out_channels) * 0.1,
              "gamma": rng.uniform(0.5, 1.5, out_channels),
              "beta": rng.standard_normal(out_channels) * 0.1,
              "mu": rng.standard_normal(out_channels) * 0.1,
              "var": rng.uniform(0.5, 2.0, out_channels)}
    if not bias:
        del values["B"]
    values = {name: value.astype(dtype) for name, value in values.items()}
    inputs = [h.make_tensor_value_info("x", elem, [2, channels, 5, 5])]
    feeds = {"x": rng.standard_normal((2, channels, 5, 5)).astype(dtype)}
    for name in graph_inputs:   # a statistic fed at run time instead of an initializer
        inputs.append(h.make_tensor_value_info(name, elem, [out_channels]))
        feeds[name] = values.pop(name)
    outputs = [h.make_tensor_value_info(name, elem, [2, out_channels, 5, 5])
               for name in ("y", *extra_outputs)]
    graph = h.make_graph(nodes, "conv_bn", inputs, outputs,
                         [numpy_helper.from_array(a, n) for n, a in values.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, feeds


def _check_all_levels(model, feeds, expected=None):
    """Outputs at opt levels 0..3 match ``expected`` (by default onnxruntime's); returns the
    level-2 model."""
    if expected is None:
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    loaded = {}
    for level in (0, 1, 2, 3):
        loaded[level] = tonnx.load(model, opt_level=level)
        got = loaded[level].run(feeds)
        for name, want in expected.items():
            assert got[name].dtype == want.dtype, (level, name)
            assert got[name].shape == want.shape, (level, name)
            np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name} at opt level {level}")
    return loaded[2]


def _ops(compiled):
    return [node.op_type for node in compiled.graph.nodes]


def _note(compiled):
    return next(n for n in compiled.graph.notes if n.startswith("conv+batchnorm:"))


def test_small_cnn_folds_its_batchnorm_and_matches_onnxruntime():
    model, feeds = small_cnn(np.random.default_rng(7))
    level2 = _check_all_levels(model, feeds)
    assert "BatchNormalization" not in _ops(level2)
    assert _note(level2) == "conv+batchnorm: 1 folded (bn1 into conv1)"
    # relu1 then joins the folded Conv (fuse_conv_activations)
    assert "conv1: Conv(x, W1*bn1, b1*bn1) -> r1 [activation=Relu]" in level2.ir()
    # the folded constants replace the originals, in the weights' dtype
    assert not {"W1", "b1", "gamma", "beta", "mu", "var"} & set(level2.graph.constants)
    assert level2.graph.constants["W1*bn1"].dtype == np.float32
    assert "BatchNormalization" in _ops(tonnx.load(model, opt_level=1))
    assert "BatchNormalization" not in _ops(tonnx.load(model, opt_level=3))


def test_grouped_conv_folds():
    model, feeds = _conv_bn(np.random.default_rng(1), group=2)
    level2 = _check_all_levels(model, feeds)
    assert _ops(level2)[0] == "Conv" and "BatchNormalization" not in _ops(level2)
    assert _note(level2).startswith("conv+batchnorm: 1 folded")


def test_conv_without_bias_gets_one():
    model, feeds = _conv_bn(np.random.default_rng(2), bias=False)
    level2 = _check_all_levels(model, feeds)
    assert "BatchNormalization" not in _ops(level2)
    conv = level2.graph.nodes[0]
    assert conv.inputs == ("x", "W*bn", "conv.bias*bn")
    assert level2.graph.constants["conv.bias*bn"].shape == (6,)


def _reference_conv_bn_relu(model, x):
    """NumPy float64 oracle of :func:`_conv_bn` (group 1): onnxruntime has no double Conv."""
    c = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,mcij->nmhw", windows, c["W"]) + c["B"][:, None, None]
    per_channel = {k: c[k][:, None, None] for k in ("gamma", "beta", "mu", "var")}
    bn = (conv - per_channel["mu"]) / np.sqrt(per_channel["var"] + 1e-3) * \
        per_channel["gamma"] + per_channel["beta"]
    return np.maximum(bn, 0)


def test_float64_model_folds_in_float64():
    model, feeds = _conv_bn(np.random.default_rng(3), dtype=np.float64)
    expected = {"y": _reference_conv_bn_relu(model, feeds["x"])}
    level2 = _check_all_levels(model, feeds, expected)
    assert "BatchNormalization" not in _ops(level2)
    # a float32 round trip of the folded constants would show at about 1e-7
    np.testing.assert_allclose(level2.run(feeds)["y"], expected["y"], rtol=1e-9, atol=1e-12)
    assert {level2.graph.constants[n].dtype for n in level2.graph.nodes[0].inputs[1:]} == \
        {np.dtype(np.float64)}


def test_conv_output_used_elsewhere_is_not_folded():
    side = h.make_node("Sigmoid", ["c"], ["side"], name="side")
    model, feeds = _conv_bn(np.random.default_rng(4), extra_nodes=[side],
                            extra_outputs=["side"])
    level2 = _check_all_levels(model, feeds)
    # Not folded into the Conv: a multiply-add of its own (batchnorm_as_affine), fused.
    assert _note(level2) == "conv+batchnorm: 0 folded"
    assert "batchnorm as affine: 1 rewritten" in level2.graph.notes
    assert "Fused" in _ops(level2) and "BatchNormalization" not in _ops(level2)


def test_conv_output_that_is_a_graph_output_is_not_folded():
    model, feeds = _conv_bn(np.random.default_rng(5), extra_outputs=["c"])
    level2 = _check_all_levels(model, feeds)
    assert "batchnorm as affine: 1 rewritten" in level2.graph.notes
    assert "BatchNormalization" not in _ops(level2)


def test_a_batchnorm_after_a_concat_is_a_fused_multiply_add():
    """DenseNet's BatchNormalization of a Concat, then Relu: one fused statement
    ``max(x * s + t, 0)`` over (image, channel, positions), values as onnxruntime's at every level."""
    rng = np.random.default_rng(8)
    c = 6
    stats = {"gamma": rng.random(c) + 0.5, "beta": rng.standard_normal(c),
             "mu": rng.standard_normal(c), "var": rng.random(c) + 0.1}
    nodes = [h.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
             h.make_node("BatchNormalization", ["cat", "gamma", "beta", "mu", "var"], ["n"],
                         name="bn", epsilon=1e-3),
             h.make_node("Relu", ["n"], ["y"], name="relu")]
    graph = h.make_graph(
        nodes, "densenet", [h.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4, 5, 5]),
                            h.make_tensor_value_info("b", TensorProto.FLOAT, [2, 2, 5, 5])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 5, 5])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in stats.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 15)])
    feeds = {"a": rng.standard_normal((2, 4, 5, 5)).astype(np.float32),
             "b": rng.standard_normal((2, 2, 5, 5)).astype(np.float32)}
    level2 = _check_all_levels(model, feeds)
    assert _ops(level2) == ["Concat", "Fused"]
    level3 = tonnx.load(model, opt_level=3)
    for _ in range(3):
        level3.run(feeds)
    plans = [row.plan for row in level3.profile(feeds, repeat=1).rows if row.op_type == "Fused"]
    assert plans == ["Y(i,j,k) = max(((A(i,j,k) * B(j)) + C(j)), 0)"], plans


def test_batchnorm_with_a_non_constant_mean_is_not_folded():
    model, feeds = _conv_bn(np.random.default_rng(6), graph_inputs=["mu"])
    level2 = _check_all_levels(model, feeds)
    assert "BatchNormalization" in _ops(level2)
    assert _note(level2) == "conv+batchnorm: 0 folded"


def test_two_batchnorms_in_a_row_both_fold():
    second = h.make_node("BatchNormalization", ["y0", "gamma", "beta", "mu", "var"], ["y"],
                         name="bn2")
    model, feeds = _conv_bn(np.random.default_rng(8))
    # reroute: conv -> bn -> bn2 -> y (the Relu now feeds nothing and is dropped at level 1)
    graph = model.graph
    graph.node[1].output[0] = "y0"
    graph.node[2].input[0] = "y0"
    graph.node[2].output[0] = "unused"
    graph.node.append(second)
    onnx.checker.check_model(model)
    level2 = _check_all_levels(model, feeds)
    assert _ops(level2) == ["Conv"]
    assert _note(level2) == "conv+batchnorm: 2 folded (bn into conv, bn2 into conv)"
    assert set(level2.graph.constants) == {"W*bn*bn2", "B*bn*bn2"}


def test_non_float_weights_are_not_folded():
    # No valid ONNX model has integer Conv weights; the pass alone checks the guard.
    model, _ = _conv_bn(np.random.default_rng(9))
    graph = build_graph(model)
    graph.constants["W"] = graph.constants["W"].astype(np.int32)
    graph = fold_conv_batchnorm(graph)
    assert [n.op_type for n in graph.nodes] == ["Conv", "BatchNormalization", "Relu"]
    assert graph.notes == ["conv+batchnorm: 0 folded"]


def test_fresh_names_do_not_shadow_existing_values():
    model, _ = _conv_bn(np.random.default_rng(10))
    graph = build_graph(model)
    graph.constants["W*bn"] = np.zeros(1, np.float32)   # a value already named like the fold
    graph = fold_conv_batchnorm(graph)
    assert graph.nodes[0].inputs == ("x", "W*bn#1", "B*bn")
    assert graph.constants["W*bn"].shape == (1,)
