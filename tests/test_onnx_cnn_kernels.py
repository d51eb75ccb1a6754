"""The CNN kernels of a level-3 plan against onnxruntime: pointwise convolutions on NCHW planes
(``codegen/planar.py``: no layout copy), stride-2 window kernels reading paired loads instead
of gathers (``codegen/window.py``), and the typed fused activation (``fusion.Activation``)
that carries a Clip's bounds from the Conv+Clip fusion to every kernel.

Sizes are chosen to leave tails: output positions past whole panels (64 float32 lanes x 4)
and past whole vectors, output channels past whole 6-row tiles, input channels past the
128-deep block, rows whose stride-2 windows end inside or past the image.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

from tensoralg.onnx.passes.fusion import RELU, Activation, activation_bounds, fused_activation
from tensoralg.runtime.planar import PlanarConv, planar_pays

RTOL, ATOL = 1e-4, 1e-5


def _model(nodes, x_shape, y_shape, constants, dtype=TensorProto.FLOAT, opset=17):
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", dtype, list(x_shape))],
                         [h.make_tensor_value_info("y", dtype, list(y_shape))],
                         [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _check(model, x, plan_text):
    want = onnxruntime_outputs(model, {"x": x})[0]
    compiled = planned_model(model, {"x": x})
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=RTOL, atol=ATOL)
    # a second input through the same plan: the kernel reads the input it is given
    other = np.random.default_rng(99).standard_normal(x.shape).astype(x.dtype)
    np.testing.assert_allclose(compiled.run({"x": other})["y"],
                               onnxruntime_outputs(model, {"x": other})[0], rtol=RTOL,
                               atol=ATOL)
    profile = str(compiled.profile({"x": x}))
    assert plan_text in profile, profile


def _pointwise(x_shape, out_channels, activation, bias, rng, dtype=np.float32):
    n, c, height, width = x_shape
    w = (rng.standard_normal((out_channels, c, 1, 1)) / math.sqrt(max(c, 1))).astype(dtype)
    constants = {"w": w}
    inputs = ["x", "w"]
    if bias:
        constants["b"] = rng.standard_normal(out_channels).astype(dtype)
        inputs.append("b")
    nodes = [h.make_node("Conv", inputs, ["c" if activation else "y"], name="conv")]
    if activation == "relu":
        nodes.append(h.make_node("Relu", ["c"], ["y"], name="act"))
    elif activation == "clip":
        constants["lo"] = np.array(0.0, dtype)
        constants["hi"] = np.array(0.5, dtype)
        nodes.append(h.make_node("Clip", ["c", "lo", "hi"], ["y"], name="act"))
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    return _model(nodes, x_shape, (n, out_channels, height, width), constants, onnx_type)


PLANAR = [
    # (N, C, H, W), M: positions past whole panels and vectors, M past whole 6-row tiles
    ((1, 16, 8, 8), 24),         # one panel, whole vectors
    ((2, 5, 9, 15), 13),         # 135 positions: two panels and a 7-lane vector
    ((3, 130, 8, 20), 7),        # C past the 128-deep block (two blocks), one short tile
    ((1, 3, 23, 29), 31),        # 667 positions: ten panels and a 27-column tail
    ((2, 300, 6, 25), 11),       # three blocks of input planes, 150 positions
]


@pytest.mark.parametrize("activation", [None, "relu", "clip"])
@pytest.mark.parametrize("shape, out_channels", PLANAR)
def test_pointwise_conv_on_nchw_planes_matches_onnxruntime(shape, out_channels, activation):
    rng = np.random.default_rng(sum(shape) + out_channels)
    assert planar_pays(np.dtype(np.float32), shape[2] * shape[3])
    x = rng.standard_normal(shape).astype(np.float32)
    model = _pointwise(shape, out_channels, activation, bias=True, rng=rng)
    _check(model, x, "pointwise convolution on NCHW planes")


def test_pointwise_conv_on_nchw_planes_float64_without_bias():
    # onnxruntime has no float64 Conv: NumPy is the oracle here
    import tensoralg.onnx as tonnx

    rng = np.random.default_rng(3)
    shape = (2, 9, 10, 11)
    x = rng.standard_normal(shape)
    model = _pointwise(shape, 14, "relu", bias=False, rng=rng, dtype=np.float64)
    w = numpy_helper.to_array(model.graph.initializer[0]).reshape(14, 9)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        got = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(got, np.maximum(np.einsum("mc,nchw->nmhw", w, x), 0),
                               rtol=1e-12, atol=1e-12)
    assert "pointwise convolution on NCHW planes" in str(compiled.profile({"x": x}))


def test_planar_conv_against_numpy_with_nan_and_no_input_channels():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    x = rng.standard_normal((2, 5, 3, 37)).astype(np.float32)
    x[1, 2, 1, 5] = np.nan
    want = np.einsum("mc,nchw->nmhw", w.astype(np.float64), x) + b[:, None, None]
    got = PlanarConv(w, b, (-0.5, 0.5))(x)
    # the clamp keeps NaN, as onnxruntime's Clip
    np.testing.assert_allclose(got, np.clip(want, -0.5, 0.5), rtol=1e-5, atol=1e-6)
    assert np.isnan(got[1, :, 1, 5]).all()
    empty = PlanarConv(np.zeros((4, 0), np.float32), b[:4], (0.0, math.inf))
    np.testing.assert_array_equal(empty(np.zeros((1, 0, 2, 3), np.float32)),
                                  np.broadcast_to(np.maximum(b[:4], 0)[None, :, None, None],
                                                  (1, 4, 2, 3)))


def test_small_planes_keep_the_channels_last_gemm():
    # 7 x 7 = 49 positions fill 49 of 64 lanes: the channels-last GEMM instead
    rng = np.random.default_rng(5)
    shape = (2, 40, 7, 7)
    assert not planar_pays(np.dtype(np.float32), 49)
    x = rng.standard_normal(shape).astype(np.float32)
    _check(_pointwise(shape, 70, "clip", bias=True, rng=rng), x, "generated GEMM")


SPLIT, PAIRED = "split once into even and odd cells", "paired masked loads"
WINDOWS = [
    # stride 2 along the row, output rows past whole vectors, windows leaving the image; max
    # windows without dilation read rows split into even and odd cells (codegen/window.py)
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     (1, 3, 9, 71), SPLIT),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (2, 2, 7, 68),
     SPLIT),
    ("MaxPool", {"kernel_shape": [2, 3], "strides": [1, 2], "dilations": [1, 2]},
     (1, 2, 5, 50), PAIRED),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
     (1, 3, 9, 29), PAIRED),     # output rows of one vector
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1}, (1, 3, 6, 67), PAIRED),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 1, 1, 2],
                     "ceil_mode": 1}, (1, 2, 6, 36), PAIRED),
]


@pytest.mark.parametrize("op, attributes, shape, reads", WINDOWS)
def test_stride2_window_kernels_match_onnxruntime(op, attributes, shape, reads):
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    import onnx

    node = h.make_node(op, ["x"], ["y"], **attributes)
    probe = _model([node], shape, [None] * 4, {})
    out = onnxruntime_outputs(probe, {"x": x})[0]
    model = _model([node], shape, out.shape, {})
    onnx.checker.check_model(model)
    _check(model, x, reads)


@pytest.mark.parametrize("width, pads, dilation", [(67, [1, 1, 1, 1], 1), (40, [1, 0, 1, 3], 1),
                                                   (35, [2, 2, 2, 2], 2)])
@pytest.mark.parametrize("activation", [None, "clip"])
def test_stride2_depthwise_conv_matches_onnxruntime(width, pads, dilation, activation):
    rng = np.random.default_rng(width + dilation)
    channels = 5
    x = rng.standard_normal((2, channels, 9, width)).astype(np.float32)
    w = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    constants = {"w": w, "b": b}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c" if activation else "y"], group=channels,
                         kernel_shape=[3, 3], strides=[2, 2], pads=pads,
                         dilations=[dilation, dilation])]
    if activation:
        constants["lo"], constants["hi"] = np.array(-0.25, np.float32), np.array(1.0,
                                                                                 np.float32)
        nodes.append(h.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    probe = _model(nodes, x.shape, [None] * 4, constants)
    out = onnxruntime_outputs(probe, {"x": x})[0]
    # 3x3 windows over output rows of more than two vectors without dilation are split into
    # even and odd cells once (codegen/window.py); dilated windows and shorter rows keep the
    # paired loads
    _check(_model(nodes, x.shape, out.shape, constants), x,
           SPLIT if dilation == 1 and out.shape[3] > 32 else PAIRED)


PADDED, MASKED = "input rows copied once into padded rows", "masked loads"
ROWS = "row by row"
UNIT_WINDOWS = [
    # unit column stride: max pools with unit strides take row maxima (a ring of rows), other
    # row strides read masked loads, their window a chain per kernel row; row strides below,
    # at and past the kernel's, asymmetric pads, ceil_mode
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 3, 9, 28), ROWS),
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (2, 2, 7, 7), ROWS),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 2, 0]},
     (1, 2, 9, 20), MASKED),
    ("MaxPool", {"kernel_shape": [5, 5], "strides": [3, 1], "pads": [2, 2, 2, 2]},
     (1, 2, 8, 17), MASKED),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [4, 1]}, (1, 2, 13, 20), MASKED),
    ("MaxPool", {"kernel_shape": [3, 3], "ceil_mode": 1}, (1, 2, 6, 30), ROWS),
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "dilations": [1, 2]},
     (1, 2, 5, 20), MASKED),
]


def test_padded_rows_stay_within_the_stack_bound():
    from tensoralg.codegen.window import ChannelGroups, WindowGeometry, pads_rows

    def geometry(kernel_rows):
        # 5-wide depthwise windows over rows of 15 vectors: padded rows of 256 cells
        return WindowGeometry(64, 244, 64 - kernel_rows + 1, 240, (kernel_rows, 5),
                              (1, 1), (1, 1), (0, 0), (0, 0))
    # a ring of 31 rows of 256 cells fits 64 KiB; one of 41 does not
    assert pads_rows(geometry(30), "depthwise", ChannelGroups(), 16)
    assert not pads_rows(geometry(40), "depthwise", ChannelGroups(), 16)


@pytest.mark.parametrize("op, attributes, shape, reads", UNIT_WINDOWS)
def test_unit_stride_max_pools_match_onnxruntime(op, attributes, shape, reads):
    rng = np.random.default_rng(shape[-1] + len(attributes))
    x = rng.standard_normal(shape).astype(np.float32)
    node = h.make_node(op, ["x"], ["y"], **attributes)
    out = onnxruntime_outputs(_model([node], shape, [None] * 4, {}), {"x": x})[0]
    _check(_model([node], shape, out.shape, {}), x, reads)


@pytest.mark.parametrize("width, kernel, strides, pads, reads", [
    (28, 5, [1, 1], [2, 2, 2, 2], PADDED),       # MnasNet's 5x5 layers at 28 x 28
    (21, 5, [2, 1], [1, 2, 3, 0], PADDED),
    (33, 7, [1, 1], [3, 3, 3, 3], PADDED),
    (40, 5, [5, 1], [2, 2, 2, 2], PADDED),       # row stride at the kernel's height
    (40, 5, [6, 1], [2, 2, 2, 2], MASKED),       # past it
    (14, 5, [1, 1], [2, 2, 2, 2], MASKED),       # one vector a row
    (28, 3, [1, 1], [1, 1, 1, 1], MASKED),       # 3x3: a row's copy costs more than its taps
])
@pytest.mark.parametrize("activation", [None, "clip"])
def test_unit_stride_depthwise_conv_matches_onnxruntime(width, kernel, strides, pads, reads,
                                                        activation):
    rng = np.random.default_rng(width + kernel)
    channels = 6
    x = rng.standard_normal((2, channels, 11, width)).astype(np.float32)
    constants = {"w": rng.standard_normal((channels, 1, kernel, kernel)).astype(np.float32),
                 "b": rng.standard_normal(channels).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c" if activation else "y"], group=channels,
                         kernel_shape=[kernel, kernel], strides=strides, pads=pads)]
    if activation:
        constants["lo"], constants["hi"] = np.array(-0.25, np.float32), np.array(1.0,
                                                                                 np.float32)
        nodes.append(h.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    out = onnxruntime_outputs(_model(nodes, x.shape, [None] * 4, constants), {"x": x})[0]
    _check(_model(nodes, x.shape, out.shape, constants), x, reads)


@pytest.mark.parametrize("shape", [(2, 3, 9, 12), (1, 2, 5, 3), (1, 1, 4, 40)])
def test_max_window_chains_keep_nan_and_infinities_in_float64(shape):
    # onnxruntime's MaxPool may drop NaN: NumPy is the reference (NaN wins, as in NumPy's max),
    # a NaN in every position of the window, and infinities beside it
    rng = np.random.default_rng(9)
    h_, w_ = shape[2:]
    node = h.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    model = _model([node], shape, shape, {}, TensorProto.DOUBLE)
    x = rng.standard_normal(shape)
    compiled = planned_model(model, {"x": x})
    for i in range(3):
        for j in range(3):
            x = rng.standard_normal(shape)
            x[0, 0, i, j], x[0, -1, h_ - 1 - i, w_ - 1 - j] = np.nan, np.inf
            x[0, 0, h_ - 1, (j + 1) % w_] = -np.inf
            padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
            want = np.max([padded[:, :, a:a + h_, b:b + w_] for a in range(3) for b in range(3)],
                          axis=0)
            np.testing.assert_array_equal(compiled.run({"x": x})["y"], want)


def test_padded_rows_in_float64():
    # float64: 8 lanes, so 12-wide rows are two vectors; onnxruntime has no float64 Conv
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 9, 12))
    w = rng.standard_normal((3, 1, 5, 5))
    zero = np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)))
    want = sum(zero[:, :, i:i + 9, j:j + 12] * w[None, :, 0, i, j, None, None]
               for i in range(5) for j in range(5))
    node = h.make_node("Conv", ["x", "w"], ["y"], group=3, kernel_shape=[5, 5],
                       pads=[2, 2, 2, 2])
    model = _model([node], x.shape, want.shape, {"w": w}, TensorProto.DOUBLE)
    compiled = planned_model(model, {"x": x})
    np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-12, atol=1e-12)
    assert PADDED in compiled.profile({"x": x}).rows[0].plan


def test_fused_activation_is_typed():
    clip = Activation.clip(0, 6)
    assert clip.bounds == (0.0, 6.0) and clip.kernel_argument == (0.0, 6.0)
    assert RELU.kernel_argument is True and RELU.bounds == (0.0, math.inf)
    assert str(clip) == "Clip(0.0, 6.0)" and str(RELU) == "Relu"
    # bounds are carried as floats, not through text: an odd value survives exactly
    odd = Activation.clip(-1 / 3, 2 ** -30)
    assert activation_bounds({"activation": odd}) == (-1 / 3, 2 ** -30)
    assert fused_activation({}) is False and activation_bounds({}) is None
    with pytest.raises(TypeError):
        fused_activation({"activation": "Clip(0.0, 6.0)"})
    with pytest.raises(ValueError):
        Activation("Sigmoid", 0.0, 1.0)
    with pytest.raises(ValueError):
        Activation("Relu", 0.0, 6.0)


def test_conv_clip_fusion_sets_the_typed_activation():
    from tensoralg.onnx.frontend.load import load_graph
    from tensoralg.onnx.passes.folding import fuse_conv_activations

    rng = np.random.default_rng(6)
    lo, hi = np.float32(-0.1), np.float32(0.7)
    model = _model([h.make_node("Conv", ["x", "w"], ["c"], name="conv"),
                    h.make_node("Clip", ["c", "lo", "hi"], ["y"], name="clip")],
                   (1, 2, 4, 4), (1, 3, 4, 4),
                   {"w": rng.standard_normal((3, 2, 1, 1)).astype(np.float32),
                    "lo": np.array(lo), "hi": np.array(hi)})
    graph = fuse_conv_activations(load_graph(model)[0])
    (conv,) = graph.nodes
    assert conv.attributes["activation"] == Activation.clip(float(lo), float(hi))
    assert "[activation=Clip(" in str(conv)


PATCHES = [
    # (N, C, H, W), (M, KH, KW), strides, pads, dilations: vectors within one output row
    # (contiguous or paired loads) and across two rows (gathers), padding on every side; M
    # odd or past whole 6-row tiles, and more weights than a convolution with its weights
    # compiled in unrolls (MAX_UNROLLED_DENSE), which the plan would take first
    ((1, 3, 37, 45), (43, 7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),     # ResNet's first layer
    ((2, 3, 29, 40), (77, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),     # MobileNet's, odd M
    ((1, 5, 12, 70), (47, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # stride 1, OW > 64
    ((2, 2, 26, 50), (173, 3, 2), (3, 3), (1, 0, 2, 1), (1, 1)),      # stride 3: gathers only
    ((1, 4, 19, 61), (59, 3, 3), (1, 2), (2, 1, 2, 0), (2, 2)),      # dilated, uneven pads
    ((1, 16, 9, 33), (20, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),     # K = 144, two blocks
    ((2, 16, 9, 33), (53, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),     # default: the GEMM
]


@pytest.mark.parametrize("route", ["patches", "default"])
@pytest.mark.parametrize("activation", [None, "clip"])
@pytest.mark.parametrize("shape, kernel, strides, pads, dilations", PATCHES)
def test_few_channel_conv_through_patch_blocks_matches_onnxruntime(shape, kernel, strides,
                                                                   pads, dilations,
                                                                   activation, route,
                                                                   monkeypatch):
    # "patches": the plan's GEMM threshold raised so patch blocks take every layer here;
    # "default": layers of 48 channels or more without dilation and with more patch rows
    # than PATCH_FIRST_DEPTH go to the generated GEMM, which scatters its tiles into the NCHW
    # output. (Winograd, which would take the 3x3 layers of 16 channels, is off here: its
    # route has tests of its own, tests/test_winograd.py.)
    from tensoralg.codegen.llvm import host_has
    from tensoralg.onnx.plan import product_steps

    monkeypatch.setenv("TENSORALG_WINOGRAD", "0")

    gemm = route == "default" and kernel[0] >= product_steps.GEMM_MIN_CHANNELS and \
        dilations == (1, 1) and host_has("avx512f") and \
        shape[1] * kernel[1] * kernel[2] > product_steps.PATCH_FIRST_DEPTH and \
        shape[1] > product_steps.PATCH_FIRST_CHANNELS
    if route == "patches":
        monkeypatch.setattr(product_steps, "GEMM_MIN_CHANNELS", 1 << 30)
    rng = np.random.default_rng(shape[-1] + kernel[0])
    m, kh, kw = kernel
    x = rng.standard_normal(shape).astype(np.float32)
    constants = {"w": (rng.standard_normal((m, shape[1], kh, kw)) / 4).astype(np.float32),
                 "b": rng.standard_normal(m).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c" if activation else "y"],
                         kernel_shape=[kh, kw], strides=list(strides), pads=list(pads),
                         dilations=list(dilations))]
    if activation:
        constants["lo"], constants["hi"] = np.array(-0.5, np.float32), np.array(0.75,
                                                                                np.float32)
        nodes.append(h.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    probe = _model(nodes, shape, [None] * 4, constants)
    out = onnxruntime_outputs(probe, {"x": x})[0]
    model = _model(nodes, shape, out.shape, constants)
    import tensoralg.onnx as tonnx
    from tensoralg.codegen.conv import MAX_UNROLLED_DENSE

    assert constants["w"].size > MAX_UNROLLED_DENSE

    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        got = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(got, out, rtol=RTOL, atol=ATOL)
    profile = str(compiled.profile({"x": x}))
    assert planar_pays(np.dtype(np.float32), out.shape[2] * out.shape[3])
    assert ("tiles scattered into the NCHW output" if gemm else "through patch blocks") \
        in profile, profile


def test_patch_conv_against_numpy_float64_and_nan():
    from tensoralg.codegen.conv import ConvGeometry
    from tensoralg.runtime.planar import patch_conv

    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 11, 35))
    x[1, 0, 4, 9] = np.nan
    w = rng.standard_normal((5, 3, 3, 3))
    conv = patch_conv(ConvGeometry(3, 11, 35, 5, 6, 18, (3, 3), (2, 2), (1, 1), (1, 1), 1), w,
                      None)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 5, 6, 18))
    for kh in range(3):
        for kw in range(3):
            window = padded[:, :, kh:kh + 11:2, kw:kw + 35:2][:, :, :6, :18]
            want += np.einsum("mc,nchw->nmhw", w[:, :, kh, kw], window)
    got = conv(x)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # input cell (4, 9) is read by output cells (2, 4) and (2, 5) of every channel
    assert np.isnan(got[1, :, 2, 4:6]).all() and np.isnan(got).sum() == 5 * 2
