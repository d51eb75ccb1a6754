"""Strided 1-, 2- and 3-D ConvTranspose as one Conv over its sub-pixel phases
(``onnx/passes/conv_transposes.py``): against onnxruntime at every opt level, for kernels that
are and are not multiples of the stride, pads, output_padding, bias or none, float32 and
float64; and the forms the rewrite leaves to the op (groups, dilations, auto_pad,
output_shape, stride 1)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level  # noqa: E402
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx import helper as h  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.passes.conv_transposes import phase_weights  # noqa: E402

NOTE = "ConvTranspose(s) run as one Conv over their sub-pixel phases"


def _model(x_shape, out_channels, kernel, *, bias=True, dtype=np.float32, group=1,
           **attributes):
    rng = np.random.default_rng(sum(kernel) + out_channels)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = (rng.standard_normal((x_shape[1], out_channels // group, *kernel)) * 0.3).astype(dtype)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inputs = ["x", "W"] + (["B"] if bias else [])
    initializers = [numpy_helper.from_array(w, "W")]
    if bias:
        initializers.append(numpy_helper.from_array(rng.standard_normal(out_channels)
                                                    .astype(dtype), "B"))
    nodes = [h.make_node("Relu", ["x"], ["r"]),     # computed, so the plan runs the step
             h.make_node("ConvTranspose", ["r", *inputs[1:]], ["y"], kernel_shape=list(kernel),
                         group=group, **attributes)]
    graph = h.make_graph(nodes,
                         "ct", [h.make_tensor_value_info("x", elem, list(x_shape))],
                         [h.make_tensor_value_info("y", elem, [f"d{i}" for i in range(len(x_shape))])],
                         initializers)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    return model, {"x": x}


@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes", [
    ((1, 3, 5, 6), 4, (2, 2), {"strides": [2, 2]}),                      # U-Net's upsampler
    ((2, 4, 6, 6), 3, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # LinkNet, DCGAN
    ((1, 3, 5, 5), 2, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                               "output_padding": [1, 1]}),              # a kernel not a multiple
    ((1, 2, 4, 7), 3, (3, 3), {"strides": [2, 2]}),
    ((1, 2, 4, 5), 3, (3, 2), {"strides": [2, 1], "pads": [1, 0, 0, 0]}),
    ((1, 2, 3, 4), 2, (5, 5), {"strides": [3, 3], "pads": [2, 1, 0, 2],
                               "output_padding": [2, 1]}),
    ((1, 1, 1, 1), 1, (2, 2), {"strides": [2, 2]}),                      # a single pixel
    ((1, 4, 3, 4, 5), 3, (2, 2, 2), {"strides": [2, 2, 2]}),             # MONAI's 3-D U-Nets
    ((2, 3, 3, 3, 4), 2, (3, 3, 2), {"strides": [2, 2, 1], "pads": [1, 0, 1, 1, 1, 0],
                                     "output_padding": [1, 0, 0]}),
    ((2, 3, 7), 4, (4,), {"strides": [2], "pads": [1, 1]}),               # a 1-D upsampler
    ((1, 2, 5), 3, (5,), {"strides": [3], "output_padding": [2]}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_strided_conv_transpose_as_phases(x_shape, out_channels, kernel, attributes, dtype,
                                          bias):
    model, feeds = _model(x_shape, out_channels, kernel, bias=bias, dtype=dtype, **attributes)
    expected = None
    if dtype == np.float64:
        # onnxruntime has no float64 ConvTranspose: the op's own scatter (level 0, held to
        # onnxruntime in float32 by the cases above) is the oracle
        expected = tonnx.load(model, opt_level=0).run(feeds)
    compiled = check_every_level(model, feeds, expected, rtol=1e-4, atol=1e-5)
    assert NOTE in compiled.stage_text("plan")
    assert "ConvTranspose" not in [n.op_type for n in compiled.graph.nodes]


@pytest.mark.parametrize("kernel, attributes", [
    ((3, 3), {"strides": [2, 2], "dilations": [2, 2]}),
    ((3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((3, 3), {"strides": [2, 2], "output_shape": [11, 11]}),
    ((3, 3), {"strides": [1, 1], "pads": [1, 1, 1, 1]}),
    ((2, 2), {"strides": [2, 2], "group": 2}),
])
def test_other_conv_transposes_are_left_to_the_op(kernel, attributes):
    attributes = dict(attributes)
    group = attributes.pop("group", 1)
    model, feeds = _model((1, 4, 5, 5), 4, kernel, group=group, **attributes)
    compiled = check_every_level(model, feeds, rtol=1e-4, atol=1e-5)
    assert NOTE not in compiled.stage_text("plan")


def test_phase_weights_hold_every_tap_once():
    w = np.random.default_rng(0).standard_normal((3, 2, 3, 5))
    v = phase_weights(w, (2, 2))                     # 3 x 5 taps padded to 4 x 6
    assert v.shape == (2 * 2 * 2, 3, 2, 3)
    assert np.isclose(np.sort(v[v != 0]), np.sort(w.reshape(-1))).all()
    w = np.random.default_rng(1).standard_normal((3, 2, 3, 2, 5))
    v = phase_weights(w, (2, 1, 3))                  # 3 x 2 x 5 taps padded to 4 x 2 x 6
    assert v.shape == (2 * 1 * 3 * 2, 3, 2, 2, 2)
    assert np.isclose(np.sort(v[v != 0]), np.sort(w.reshape(-1))).all()


def _dynamic(model):
    """``model`` with a symbolic batch and spatial size: no static shape reaches the pass."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, name in zip(dims, ["n", None, "h", "w"]):
        if name is not None:
            dim.dim_param = name
    return model


@pytest.mark.parametrize("x_shape, out_channels, kernel, attributes", [
    ((2, 6, 5, 7), 4, (4, 4), {"strides": [4, 4]}),                     # DPT's reassembling
    ((1, 4, 6, 6), 3, (4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 3, 5, 5), 2, (3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2],
                               "output_padding": [1, 1]}),
    ((1, 2, 3, 4), 2, (5, 5), {"strides": [3, 3], "pads": [2, 1, 0, 2]}),
])
def test_equal_strides_are_rewritten_without_static_shapes(x_shape, out_channels, kernel,
                                                            attributes):
    model, feeds = _model(x_shape, out_channels, kernel, **attributes)
    model = _dynamic(model)
    compiled = check_every_level(model, feeds, rtol=1e-4, atol=1e-5)
    assert NOTE in compiled.stage_text("plan")
    assert "compiled transpose (DepthToSpace DCR" in str(compiled.profile(feeds))
    # the same model at another input size: the rewrite holds for any size
    other = {"x": np.random.default_rng(3).standard_normal(
        (x_shape[0] + 1, x_shape[1], x_shape[2] + 2, x_shape[3] + 1)).astype(np.float32)}
    check_every_level(model, other, rtol=1e-4, atol=1e-5, levels=(3,))


def test_unequal_strides_without_static_shapes_are_left_to_the_op():
    model, feeds = _model((1, 2, 4, 5), 3, (3, 2), strides=[2, 1], pads=[1, 0, 0, 0])
    compiled = check_every_level(_dynamic(model), feeds, rtol=1e-4, atol=1e-5)
    assert NOTE not in compiled.stage_text("plan")
