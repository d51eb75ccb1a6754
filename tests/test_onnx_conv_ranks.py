"""1-D and 3-D convolutions as 2-D ones (``passes.conv_ranks``): every attribute a 1-D Conv
takes (strides, dilations, pads, auto_pad, group, bias or none) and the 3-D kernels of video
networks (spatial, temporal, strided, dilated, padded), against onnxruntime at every level; a
dynamic batch; the static plan running them as generated kernels, not the NumPy im2col (grouped
pointwise 1-D ones as one kernel on a grouped view); and what the passes leave alone.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg.onnx as tonnx


def _model(x_shape, out_channels, kernel, *, batch_dim=None, bias=True, dtype=np.float32,
           activation="Relu", constant=True, **attributes):
    """``y = act(Conv1d(x))`` over ``x`` (N, C, L)."""
    rng = np.random.default_rng(sum(x_shape) + out_channels + kernel)
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    group = attributes.get("group", 1)
    weight = (rng.standard_normal((out_channels, x_shape[1] // group, kernel)) /
              np.sqrt(kernel * x_shape[1] // group)).astype(dtype)
    declared = [batch_dim or x_shape[0], *x_shape[1:]]
    inputs = [h.make_tensor_value_info("x", kind, declared)]
    inits = []
    names = ["x", "W"]
    if constant:
        inits.append(numpy_helper.from_array(weight, "W"))
    else:
        inputs.append(h.make_tensor_value_info("W", kind, list(weight.shape)))
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(out_channels).astype(dtype),
                                             "B"))
        names.append("B")
    nodes = [h.make_node("Conv", names, ["c"], name="conv", **attributes)]
    last = "c"
    if activation:
        nodes.append(h.make_node(activation, ["c"], ["y"], name="act"))
        last = "y"
    graph = h.make_graph(nodes, "g", inputs, [h.make_tensor_value_info(last, kind, [None] * 3)],
                         inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), last, weight


CASES = [
    # (x shape, out channels, kernel, attributes)
    ((1, 16, 100), 64, 3, {"pads": [1, 1]}),                       # Whisper's first
    ((1, 64, 100), 64, 3, {"pads": [1, 1], "strides": [2]}),       # and second
    ((2, 1, 400), 32, 10, {"strides": [5]}),                       # wav2vec2's first
    ((3, 8, 37), 12, 5, {"dilations": [2], "pads": [4, 0]}),
    ((2, 12, 29), 12, 4, {"group": 12, "pads": [2, 1]}),           # depthwise
    ((2, 12, 29), 6, 3, {"group": 3, "auto_pad": "SAME_UPPER"}),
    ((1, 4, 9), 5, 9, {"auto_pad": "VALID"}),                      # one output position
    ((1, 3, 1), 2, 1, {"pads": [1, 0]}),
]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes", CASES)
def test_conv1d_matches_onnxruntime(level, x_shape, out_channels, kernel, attributes):
    model, out, _ = _model(x_shape, out_channels, kernel, **attributes)
    feeds = {"x": np.random.default_rng(level).standard_normal(x_shape).astype(np.float32)}
    compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=level)
    got = compiled.run(feeds)[out]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=1e-4, atol=1e-5)
    note = "1-D convolutions: 1 Conv(s) run as 2-D over planes one row high"
    assert (note in compiled.stage_text("plan")) == (level >= 2)


def test_the_plan_runs_a_generated_kernel_not_numpy():
    model, out, _ = _model((1, 16, 100), 64, 3, pads=[1, 1])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16, 100)).astype(np.float32)}
    compiled = planned_model(model, feeds)
    rows = {r.node: r.plan for r in compiled.profile(feeds, repeat=1).rows}
    assert "im2col" not in rows["conv"] and "numpy" not in rows["conv"], rows["conv"]


@pytest.mark.parametrize("batch", [1, 3])
def test_dynamic_batch_and_no_bias(batch):
    model, out, _ = _model((batch, 6, 20), 8, 3, batch_dim="N", bias=False, activation=None,
                           strides=[2], pads=[1, 1])
    feeds = {"x": np.random.default_rng(batch).standard_normal((batch, 6, 20))
             .astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)[out], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)


def test_float64_matches_numpy():
    model, out, weight = _model((2, 3, 11), 4, 3, bias=False, activation=None,
                                dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((2, 3, 11))
    got = planned_model(model, {"x": x}).run({"x": x})[out]
    windows = np.lib.stride_tricks.sliding_window_view(x, 3, axis=2)   # (2, 3, 9, 3)
    np.testing.assert_allclose(got, np.einsum("nclk,mck->nml", windows, weight),
                               rtol=1e-12, atol=1e-12)


def test_a_pointwise_conv1d_keeps_its_own_kernel():
    """Kernel 1, stride 1, unpadded (xDeepFM's CIN): a prebound kernel with its ReLU already,
    not rewritten."""
    model, out, _ = _model((2, 6, 4), 5, 1)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 6, 4)).astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)[out], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    assert "1-D convolutions" not in compiled.stage_text("plan")


GROUPED_POINTWISE = [
    # (x shape, out channels, group, bias, dtype): SqueezeBERT's grouped projections are
    # (N, 128, 32) with groups of 2 and 4; the large one runs as one batched BLAS product
    ((1, 128, 32), 128, 2, True, np.float32),
    ((2, 12, 7), 8, 4, False, np.float32),
    ((3, 6, 5), 9, 3, True, np.float64),
    ((8, 512, 64), 512, 4, True, np.float32),
    ((2, 4, 1), 4, 4, True, np.float32),                               # depthwise, one cell
]


@pytest.mark.parametrize("x_shape, out_channels, group, bias, dtype", GROUPED_POINTWISE)
def test_a_grouped_pointwise_conv1d_is_one_prebound_step(x_shape, out_channels, group, bias,
                                                           dtype):
    """A grouped kernel-1 Conv over (N, C, L) runs as one kernel (or one batched BLAS
    product and an epilogue) on the input viewed as (N, G, C / G, L): before, it ran node by
    node (0.14-0.42x onnxruntime on SqueezeBERT)."""
    model, out, _ = _model(x_shape, out_channels, 1, group=group, bias=bias, dtype=dtype)
    feeds = {"x": np.random.default_rng(1).standard_normal(x_shape).astype(dtype)}
    compiled = planned_model(model, feeds)
    if dtype == np.float32:
        want, tolerance = onnxruntime_outputs(model, feeds)[0], 1e-4
    else:       # onnxruntime has no float64 Conv: the node's own run at level 0
        want, tolerance = tonnx.load(model, opt_level=0).run(feeds)[out], 1e-10
    np.testing.assert_allclose(compiled.run(feeds)[out], want, rtol=tolerance, atol=tolerance)
    plan = {r.node: r.plan for r in compiled.profile(feeds, repeat=1).rows}["conv"]
    assert "W(g,o,c) * X(n,g,c,p)" in plan or f"{group} groups" in plan, plan


def test_the_activation_joins_the_2d_conv():
    model, out, _ = _model((1, 16, 100), 64, 3, pads=[1, 1])
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16, 100)).astype(np.float32)}
    compiled = planned_model(model, feeds)
    ran = {r.node for r in compiled.profile(feeds, repeat=1).rows if "not run" not in r.plan}
    assert "act" not in ran, ran


def test_a_weight_given_as_input_is_left_alone():
    model, out, weight = _model((1, 4, 10), 3, 3, constant=False)
    x = np.random.default_rng(0).standard_normal((1, 4, 10)).astype(np.float32)
    compiled = tonnx.load(model, opt_level=3)
    got = compiled.run({"x": x, "W": weight})[out]
    np.testing.assert_allclose(got, onnxruntime_outputs(model, {"x": x, "W": weight})[0],
                               rtol=1e-4, atol=1e-5)
    assert "1-D convolutions" not in compiled.stage_text("plan")


def test_a_wrong_rank_input_is_the_convs_own_error():
    model, out, _ = _model((1, 4, 10), 3, 3)
    compiled = tonnx.load(model, opt_level=3)
    with pytest.raises(Exception) as error:
        compiled.run({"x": np.zeros((1, 4, 10, 1), np.float32)})
    assert "x" in str(error.value)


# --- 3-D convolutions as 2-D ones over stacked frames ----------------------------------------

def _model3d(x_shape, out_channels, kernel, *, bias=True, batch_dim=None, group=1,
             **attributes):
    """``y = relu(Conv3d(x))`` over ``x`` (N, C, T, H, W), ``kernel`` (KT, KH, KW)."""
    rng = np.random.default_rng(sum(x_shape) + out_channels + sum(kernel))
    weight = (rng.standard_normal((out_channels, x_shape[1] // group, *kernel)) /
              np.sqrt(np.prod(kernel) * x_shape[1] // group)).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "W")]
    names = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(out_channels)
                                             .astype(np.float32), "B"))
        names.append("B")
    nodes = [h.make_node("Conv", names, ["c"], name="conv", kernel_shape=list(kernel),
                         group=group, **attributes),
             h.make_node("Relu", ["c"], ["y"], name="act")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info(
        "x", TensorProto.FLOAT, [batch_dim or x_shape[0], *x_shape[1:]])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 5)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


CASES_3D = [
    # (x shape, out channels, kernel, attributes)
    ((1, 3, 8, 16, 16), 8, (3, 7, 7), {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]}),
    ((2, 4, 6, 9, 9), 6, (3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}),      # r3d's blocks
    ((1, 4, 7, 8, 8), 5, (3, 3, 3), {"strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]}),
    ((1, 4, 8, 6, 6), 8, (1, 1, 1), {"strides": [2, 2, 2]}),            # r3d's downsampling
    ((1, 3, 9, 5, 5), 4, (3, 1, 1), {"dilations": [2, 1, 1], "pads": [2, 0, 0, 1, 0, 0]}),
    ((1, 3, 4, 7, 7), 4, (1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1]}),      # (2+1)-D spatial
    ((1, 2, 3, 4, 4), 3, (3, 2, 2), {}),                                # one output frame
]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes", CASES_3D)
def test_conv3d_matches_onnxruntime(level, x_shape, out_channels, kernel, attributes):
    model = _model3d(x_shape, out_channels, kernel, **attributes)
    feeds = {"x": np.random.default_rng(level).standard_normal(x_shape).astype(np.float32)}
    compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=level)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    note = "3-D convolutions: 1 Conv(s) run as 2-D over stacked frames"
    assert (note in compiled.stage_text("plan")) == (level >= 2)


@pytest.mark.parametrize("case", ["grouped", "dynamic batch", "no bias"])
def test_conv3d_cases_left_alone_or_without_bias(case):
    x_shape = (2, 4, 5, 6, 6)
    options = {"grouped": {"group": 2}, "dynamic batch": {"batch_dim": "N"},
               "no bias": {"bias": False}}[case]
    model = _model3d(x_shape, 4, (3, 3, 3), pads=[1, 1, 1, 1, 1, 1], **options)
    feeds = {"x": np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    rewritten = "3-D convolutions" in compiled.stage_text("plan")
    assert rewritten == (case == "no bias")


# --- dilated convolutions over phase images --------------------------------------------------

def _model_dilated(x_shape, out_channels, kernel, group=1, **attributes):
    rng = np.random.default_rng(sum(x_shape) + out_channels)
    weight = (rng.standard_normal((out_channels, x_shape[1] // group, *kernel)) /
              np.sqrt(np.prod(kernel) * x_shape[1] // group)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", kernel_shape=list(kernel),
                         group=group, **attributes),
             h.make_node("Relu", ["c"], ["y"], name="act")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               list(x_shape))],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)],
                         [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(
                             rng.standard_normal(out_channels).astype(np.float32), "B")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


DILATED = [
    # (x shape, out channels, kernel, attributes, rewritten)
    ((1, 64, 28, 28), 64, (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, True),  # FCN
    ((2, 16, 16, 16), 24, (3, 3), {"dilations": [4, 4], "pads": [4, 4, 4, 4]}, True),
    ((1, 8, 12, 10), 8, (3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 1]}, True),
    ((1, 8, 12, 12), 8, (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2], "group": 8},
     True),                                                     # depthwise, dilated
    ((1, 6, 10, 10), 4, (2, 2), {"dilations": [2, 2]}, True),   # unpadded: the output shrinks
    ((1, 8, 14, 14), 8, (3, 3), {"dilations": [3, 3], "pads": [3, 3, 3, 3]}, False),  # 14 % 3
    ((1, 8, 12, 12), 8, (3, 3), {"dilations": [2, 2], "pads": [1, 1, 1, 1]}, False),  # pads
    ((1, 8, 12, 12), 8, (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2],
                                 "strides": [2, 2]}, False),
]


@pytest.mark.parametrize("level", [0, 3])
@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes, rewritten", DILATED)
def test_dilated_conv_matches_onnxruntime(level, x_shape, out_channels, kernel, attributes,
                                          rewritten):
    attributes = dict(attributes)
    group = attributes.pop("group", 1)
    model = _model_dilated(x_shape, out_channels, kernel, group, **attributes)
    feeds = {"x": np.random.default_rng(level).standard_normal(x_shape).astype(np.float32)}
    compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=level)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    note = "dilated convolutions: 1 Conv(s) run undilated over phase images"
    assert (note in compiled.stage_text("plan")) == (rewritten and level >= 2)


def test_a_3d_conv_whose_weight_does_not_fit_its_input_is_the_convs_own_error():
    """Channels that do not match are left to the Conv, which names the node; the rewrite
    never turns a bad model into a different error or a wrong answer."""
    model = _model3d((1, 4, 5, 6, 6), 4, (3, 3, 3), pads=[1, 1, 1, 1, 1, 1])
    weight = next(t for t in model.graph.initializer if t.name == "W")
    bad = numpy_helper.from_array(np.zeros((4, 3, 3, 3, 3), np.float32), "W")   # 3 channels
    weight.CopyFrom(bad)
    compiled = tonnx.load(model, opt_level=3)
    with pytest.raises(Exception) as error:
        compiled.run({"x": np.zeros((1, 4, 5, 6, 6), np.float32)})
    assert "conv" in str(error.value)
    assert "3-D convolutions" not in compiled.stage_text("plan")


def _conv2d_model(x_shape, out_channels, kernel, dtype=np.float32, **attributes):
    """``y = Relu(Conv2d(x))`` with a constant weight and bias, static shapes."""
    rng = np.random.default_rng(sum(x_shape) + out_channels)
    group = attributes.get("group", 1)
    weight = (rng.standard_normal((out_channels, x_shape[1] // group, *kernel)) /
              np.sqrt(np.prod(kernel) * x_shape[1] // group)).astype(dtype)
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inits = [numpy_helper.from_array(weight, "W"),
             numpy_helper.from_array(rng.standard_normal(out_channels).astype(dtype), "B")]
    nodes = [h.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", **attributes),
             h.make_node("Relu", ["c"], ["y"], name="act")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", kind, list(x_shape))],
                         [h.make_tensor_value_info("y", kind, [None] * 4)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


DEAD_TAPS = [
    # (x shape, out channels, kernel, attributes, kernel left)
    ((1, 32, 14, 14), 16, (3, 3), {"dilations": [24, 24], "pads": [24, 24, 24, 24]}, [1, 1]),
    ((2, 8, 14, 14), 8, (3, 3), {"dilations": [36, 36], "pads": [36, 36, 36, 36]}, [1, 1]),
    ((1, 4, 3, 9), 6, (5, 3), {"dilations": [2, 2], "pads": [4, 2, 4, 2]}, [3, 3]),
    ((1, 6, 4, 20), 6, (3, 3), {"dilations": [8, 2], "pads": [8, 2, 8, 2], "group": 3},
     [1, 3]),
    ((1, 4, 6, 6), 4, (3, 3), {"dilations": [9, 9], "pads": [9, 9, 9, 9],
                               "strides": [2, 2]}, [1, 1]),
]


@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes, left", DEAD_TAPS)
def test_kernel_taps_that_read_only_padding_are_cut(x_shape, out_channels, kernel, attributes,
                                                      left):
    """An atrous rate past the feature map (DeepLabV3's ASPP at rates 24 and 36 on 14 x 14)
    leaves taps that read only padding: they are cut, the pads shrunk, and the result is
    onnxruntime's at every level."""
    model = _conv2d_model(x_shape, out_channels, kernel, **attributes)
    feeds = {"x": np.random.default_rng(5).standard_normal(x_shape).astype(np.float32)}
    want = onnxruntime_outputs(model, feeds)[0]
    for level in (0, 2, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3):
            np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-4, atol=1e-5)
        if level >= 2:
            # the cut Conv, or the regions it was split into after the cut (no wider)
            convs = [n for n in compiled.graph.nodes if n.name.startswith("conv")
                     and n.op_type == "Conv"]
            if len(convs) == 1:
                assert convs[0].attributes["kernel_shape"] == left, convs[0].attributes
            else:
                assert "padded borders: 1 Conv(s)" in compiled.stage_text("plan")
                assert max(n.attributes["kernel_shape"] for n in convs) <= left
            assert "dead kernel taps: 1 Conv(s)" in compiled.stage_text("plan")


def test_a_dilated_conv_whose_taps_all_read_input_keeps_its_kernel():
    """Rate 12 on 14 x 14: every tap reads the input somewhere, so none is cut (the padded
    borders are split into regions instead, below)."""
    model = _conv2d_model((1, 4, 14, 14), 4, (3, 3), dilations=[12, 12], pads=[12] * 4)
    compiled = tonnx.load(model, opt_level=2)
    assert "dead kernel taps" not in compiled.stage_text("plan")
    regions = [n for n in compiled.graph.nodes if n.name.startswith("conv/region_")]
    assert all(n.inputs[1] != "W" for n in regions) and len(regions) == 9


def _relu_conv_reference(model, x, strides=(1, 1), dilations=(1, 1), pads=(0, 0, 0, 0),
                         group=1):
    """``Relu(Conv(x))`` of a :func:`_conv2d_model` in NumPy, one tap at a time (onnxruntime
    has no float64 Conv)."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weight, bias = constants["W"], constants["B"]
    padded = np.pad(x, [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    out_h = (padded.shape[2] - dilations[0] * (weight.shape[2] - 1) - 1) // strides[0] + 1
    out_w = (padded.shape[3] - dilations[1] * (weight.shape[3] - 1) - 1) // strides[1] + 1
    per = weight.shape[0] // group
    out = np.zeros((x.shape[0], weight.shape[0], out_h, out_w), x.dtype)
    for g in range(group):
        part = padded[:, g * weight.shape[1]:(g + 1) * weight.shape[1]]
        for ky in range(weight.shape[2]):
            for kx in range(weight.shape[3]):
                window = part[:, :, ky * dilations[0]::strides[0], kx * dilations[1]::strides[1]]
                out[:, g * per:(g + 1) * per] += np.einsum(
                    "mc,nchw->nmhw", weight[g * per:(g + 1) * per, :, ky, kx],
                    window[:, :, :out_h, :out_w])
    return np.maximum(out + bias[:, None, None], 0)


REGIONS = [
    # (x shape, out channels, kernel, attributes, regions)
    ((2, 32, 14, 14), 16, (3, 3), {"dilations": [12, 12], "pads": [12] * 4}, 9),  # DeepLabV3
    ((1, 8, 9, 11), 6, (3, 3), {"dilations": [6, 4], "pads": [6, 4, 6, 4], "group": 2}, 9),
    ((1, 8, 9, 11), 6, (3, 3), {"dilations": [5, 5], "pads": [5] * 4, "strides": [2, 2]}, 6),
    ((1, 3, 10, 13), 5, (3, 5), {"dilations": [6, 4], "pads": [6, 8, 3, 5],
                                 "strides": [1, 2]}, 12),
    ((3, 4, 1, 9), 4, (3, 3), {"dilations": [1, 7], "pads": [1, 7, 1, 7]}, 3),   # one row
    ((1, 4, 5, 5), 6, (5, 5), {"pads": [4] * 4}, 0),              # 81 regions: too many
    ((1, 4, 8, 8), 6, (3, 3), {"pads": [1] * 4}, 0),              # the border is thin
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes, regions", REGIONS)
def test_padded_borders_run_as_regions(x_shape, out_channels, kernel, attributes, regions,
                                       dtype):
    """A Conv whose patch matrix is mostly padding runs as one unpadded Conv per region of
    outputs with the same live taps (bias and activation in each), joined by Concats: the
    result is onnxruntime's at every level, and each region reads only the input."""
    model = _conv2d_model(x_shape, out_channels, kernel, dtype=dtype, **attributes)
    feeds = {"x": np.random.default_rng(7).standard_normal(x_shape).astype(dtype)}
    want = onnxruntime_outputs(model, feeds)[0] if dtype == np.float32 else \
        _relu_conv_reference(model, feeds["x"], **attributes)
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-10}
    for level in (0, 2, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3):
            np.testing.assert_allclose(compiled.run(feeds)["y"], want, **tolerance)
        split = [n for n in compiled.graph.nodes if n.name.startswith("conv/region_")
                 and n.op_type == "Conv"]
        assert len(split) == (regions if level >= 2 else 0)
        assert all(not any(n.attributes["pads"]) for n in split)
        note = "padded borders: 1 Conv(s) split into regions"
        assert (note in compiled.stage_text("plan")) == (level >= 2 and regions > 0)


def test_padded_regions_leave_a_conv_of_dynamic_shape_alone():
    """The regions need the map's size: a Conv whose input shape is not static keeps its one
    node, and its result."""
    model = _conv2d_model((1, 4, 14, 14), 4, (3, 3), dilations=[12, 12], pads=[12] * 4)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    feeds = {"x": np.random.default_rng(8).standard_normal((2, 4, 14, 14)).astype(np.float32)}
    compiled = planned_model(model, feeds)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    assert "padded borders" not in compiled.stage_text("plan")


@pytest.mark.parametrize("level", [0, 2, 3])
@pytest.mark.parametrize("kernel, pads", [((1, 1), [0, 0, 0, 0]), ((3, 3), [2, 2, 2, 2])])
def test_a_dilated_conv_with_a_skip_connection(level, kernel, pads):
    """DeepLabV3+'s dilated stage (smp dilates every Conv of it, its 1 x 1 shortcut too): the
    residual Add joins the Conv at level 2, and the Conv keeps its layout, where it was
    rewritten over phase images while the residual stayed in the input's (a ShapeError
    before); a 1 x 1 kernel's dilation is dropped, since it changes nothing."""
    rng = np.random.default_rng(sum(kernel) + level)
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    w = (rng.standard_normal((8, 8, *kernel)) * 0.2).astype(np.float32)
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Conv", ["x", "W", "B"], ["c"], dilations=[2, 2], pads=pads,
                         kernel_shape=list(kernel)),
             h.make_node("Add", ["c", "r"], ["y"])]
    graph = h.make_graph(nodes, "skip",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))],
                         [numpy_helper.from_array(w, "W"),
                          numpy_helper.from_array(rng.standard_normal(8).astype(np.float32),
                                                  "B")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    feeds = {"x": x}
    compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=level)
    np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    if kernel == (1, 1) and level >= 2:
        assert all(n.attributes.get("dilations", [1, 1]) == [1, 1]
                   for n in compiled.graph.nodes if n.op_type == "Conv")
