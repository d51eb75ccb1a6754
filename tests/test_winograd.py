"""3x3 convolutions by Winograd's F(2x2, 3x3) and F(4x4, 3x3) (``runtime/winograd.py``,
``codegen/winograd.py``): both kernels against a float64 NumPy convolution across odd and even
maps, uneven pads, channel counts off the vector width, blocks cut mid-row, tile rows longer
than one transposed run, two thread ranges, every fused activation and both float types; the
ONNX plan choosing a tile (and no Winograd where it does not pay, or when switched off), a
second input through the plan, its output written into a Concat's block; bad shapes.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.program import (
    HARD_SWISH,
    RELU,
    SILU,
    Activation,
    winograd_conv,
    winograd_host,
    winograd_pays,
    winograd_tile,
)

TILES = pytest.mark.parametrize("tile", [2, 4])


def _reference(x, w, b, pads, activation=None):
    """The convolution in float64, one tap at a time, then the activation."""
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (pads[0], pads[2]),
                                           (pads[1], pads[3])])
    oh, ow = padded.shape[2] - 2, padded.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            out += np.einsum("mc,nchw->nmhw", w[:, :, i, j].astype(np.float64),
                             padded[:, :, i:i + oh, j:j + ow])
    out += b.astype(np.float64)[:, None, None]
    if activation is RELU:
        return np.maximum(out, 0)
    if activation is SILU:
        return out / (1 + np.exp(-out))
    if activation is HARD_SWISH:
        return out * np.clip(out / 6 + 0.5, 0, 1)
    if isinstance(activation, Activation) and activation.kind == "Clip":
        return np.clip(out, *activation.bounds)
    return out


def _operands(n, c, hw, m, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, *hw)).astype(dtype)
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(dtype)
    return x, w, rng.standard_normal(m).astype(dtype)


SHAPES = [
    # (N, C, (H, W), M, pads (top, left, bottom, right))
    (1, 16, (4, 4), 16, (1, 1, 1, 1)),
    (2, 19, (7, 9), 33, (1, 1, 1, 1)),        # odd maps: the last tiles half outside
    (1, 64, (5, 6), 70, (0, 0, 0, 0)),        # unpadded; 70 channels: a masked last vector
    (3, 17, (8, 8), 16, (2, 1, 0, 2)),        # uneven pads
    (1, 32, (1, 1), 32, (1, 1, 1, 1)),        # one output: a tile of one
    (2, 24, (13, 11), 40, (1, 1, 1, 1)),      # blocks of tiles cut mid-row
    (1, 20, (6, 37), 17, (1, 1, 1, 1)),       # 19 tiles a row: runs of 8, 8 and 3 tiles
]


@TILES
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n, c, hw, m, pads", SHAPES)
def test_winograd_matches_a_float64_convolution(n, c, hw, m, pads, dtype, tile):
    x, w, b = _operands(n, c, hw, m, dtype)
    conv = winograd_conv(w, b, pads[:2], pads[2:], tile=tile)
    oh, ow = conv.out_shape(*hw)
    out = np.full((n, m, oh, ow), np.nan, dtype)
    conv.bind(x, out)()
    tolerance = {"rtol": 1e-4, "atol": 1e-5} if dtype == np.float32 else {"rtol": 1e-12,
                                                                         "atol": 1e-12}
    np.testing.assert_allclose(out, _reference(x, w, b, pads), **tolerance)


@pytest.mark.parametrize("activation", [RELU, SILU, HARD_SWISH, Activation.clip(0.0, 6.0)],
                         ids=["relu", "silu", "hardswish", "relu6"])
@TILES
def test_every_fused_activation_is_applied_after_the_bias(activation, tile):
    x, w, b = _operands(2, 24, (9, 10), 20, np.float32, seed=1)
    x *= 3
    conv = winograd_conv(w, b, (1, 1), (1, 1), activation, tile)
    out = np.zeros((2, 20, 9, 10), np.float32)
    conv.bind(x, out)()
    np.testing.assert_allclose(out, _reference(x, w, b, (1, 1, 1, 1), activation), rtol=1e-4,
                               atol=1e-5)


@TILES
def test_tile_blocks_and_thread_ranges_cover_every_tile_once(two_threads, monkeypatch, tile):
    """Small blocks (the last one short) over two thread ranges, each with its own scratch:
    every output written once, nothing outside the output touched, and a second input
    through the same call."""
    x, w, b = _operands(4, 32, (14, 15), 48, np.float32, seed=2)
    conv = winograd_conv(w, b, (1, 1), (1, 1), tile=tile)
    monkeypatch.setattr(conv, "block_tiles", lambda tiles: min(tiles, 7))
    monkeypatch.setattr(conv.threads, "dense_parts", lambda work, most: min(2, most))
    planes = np.full((4, 50, 14, 15), -7.0, np.float32)     # a block of a wider output
    bound = conv.bind(x, planes[:, 1:49])
    assert len(bound.kernel.calls) == 2
    bound()
    np.testing.assert_allclose(planes[:, 1:49], _reference(x, w, b, (1, 1, 1, 1)), rtol=1e-4,
                               atol=1e-5)
    assert np.all(planes[:, [0, 49]] == -7.0)
    other = np.ascontiguousarray(x[::-1])
    bound.rebind("x", other)
    bound()
    np.testing.assert_allclose(planes[:, 1:49], _reference(other, w, b, (1, 1, 1, 1)),
                               rtol=1e-4, atol=1e-5)


@TILES
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_wide_layer_on_few_tiles_splits_its_output_channels(two_threads, monkeypatch, dtype,
                                                              tile):
    """Few tiles, a large transformed weight: the threads take ranges of weight panels (the
    last one short, past the last whole panel), each transforming the input itself."""
    x, w, b = _operands(1, 48, (5, 6), 150, dtype, seed=3)
    conv = winograd_conv(w, b, (1, 1), (1, 1), tile=tile)
    monkeypatch.setattr(conv.threads, "dense_parts", lambda work, most: min(2, most))
    planes = np.full((1, 152, 5, 6), -7.0, dtype)          # channels 1..150 of a wider output
    bound = conv.bind(x, planes[:, 1:151])
    calls = bound.kernel.calls
    assert len(calls) == 2
    item, plane = np.dtype(dtype).itemsize, 5 * 6
    first = (calls[1][1] - calls[0][1]) // (plane * item)   # the second range's first channel
    assert first % conv.shape.nr == 0 and calls[0][13] == first and calls[1][13] == 150 - first
    tiles = -(-5 // tile) * -(-6 // tile)
    assert calls[0][7:9] == calls[1][7:9] == [0, tiles]    # every tile in both ranges
    bound()
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(planes[:, 1:151], _reference(x, w, b, (1, 1, 1, 1)),
                               rtol=tolerance, atol=tolerance)
    assert np.all(planes[:, [0, 151]] == -7.0)


@TILES
def test_an_empty_batch_runs_nothing(tile):
    x, w, b = _operands(0, 16, (6, 6), 16, np.float32)
    out = np.zeros((0, 16, 6, 6), np.float32)
    winograd_conv(w, b, (1, 1), (1, 1), tile=tile).bind(x, out)()
    assert out.shape == (0, 16, 6, 6)


def test_shapes_that_do_not_match_are_refused():
    x, w, b = _operands(1, 16, (6, 6), 16, np.float32)
    conv = winograd_conv(w, b, (1, 1), (1, 1))
    with pytest.raises(ta.ShapeError, match="do not match"):
        conv.bind(x[:, :8], np.zeros((1, 16, 6, 6), np.float32))
    with pytest.raises(ta.ShapeError, match="do not match"):
        conv.bind(x, np.zeros((1, 16, 5, 6), np.float32))
    with pytest.raises(ta.ShapeError, match="do not match"):
        conv.bind(x.astype(np.float64), np.zeros((1, 16, 6, 6), np.float32))
    with pytest.raises(ta.ShapeError, match=r"\(M, C, 3, 3\)"):
        winograd_conv(np.zeros((4, 4, 5, 5), np.float32), None, (1, 1), (1, 1))
    with pytest.raises(ta.ShapeError, match="bias"):
        winograd_conv(w, np.zeros(3, np.float32), (1, 1), (1, 1))
    with pytest.raises(ta.ShapeError, match=r"tiles of 3 x 3 outputs are not built"):
        winograd_conv(w, b, (1, 1), (1, 1), tile=3)


def test_where_winograd_pays():
    assert winograd_pays(64, 64, 56, 56) and winograd_pays(512, 512, 7, 7)
    assert not winograd_pays(3, 64, 224, 224)        # an RGB stem: K too short
    assert not winograd_pays(64, 8, 56, 56)          # too few outputs for the GEMM's panels
    assert not winograd_pays(256, 256, 1, 1)         # a tile for one output
    assert winograd_pays(256, 256, 3, 3, tile=4)      # one 4 x 4 tile: 36 products for 81


def test_which_tile_is_estimated_fastest():
    # large maps: F(4x4)'s 36 products for 16 outputs against F(2x2)'s 64
    assert winograd_tile(64, 64, 56, 56, images=8) == 4
    assert winograd_tile(16, 16, 128, 128, images=1) == 4
    # few tiles of a wide layer stream more transformed weight than they multiply
    assert winograd_tile(512, 512, 7, 7, images=1) == 2
    assert winograd_tile(512, 512, 7, 7, images=4) == 4
    assert winograd_tile(64, 64, 56, 56, tiles=(2,)) == 2
    assert winograd_tile(3, 64, 224, 224) is None
    assert winograd_tile(64, 64, 56, 56, tiles=()) is None


def _model(x_shape, m, concat=False):
    """``Relu(Conv3x3(x))``, or with ``concat`` that joined to a 1x1 Conv's output along the
    channels (SqueezeNet's expand): the 3x3 output is a block of the Concat's."""
    rng = np.random.default_rng(sum(x_shape) + m)
    c = x_shape[1]
    w = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"], name="relu")]
    last = "r"
    if concat:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32), "w1"))
        nodes += [h.make_node("Conv", ["x", "w1"], ["p"], name="pointwise"),
                  h.make_node("Concat", ["p", "r"], ["y"], name="concat", axis=1)]
        last = "y"
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               list(x_shape))],
                         [h.make_tensor_value_info(last, TensorProto.FLOAT, [None] * 4)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), last


def _ort(model, feeds):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.skipif(not winograd_host(), reason="the plan takes Winograd on AVX-512 hosts only")
@pytest.mark.parametrize("concat", [False, True])
def test_the_plan_runs_3x3_layers_by_winograd(concat):
    model, out = _model((2, 32, 12, 13), 48, concat)
    x = np.random.default_rng(3).standard_normal((2, 32, 12, 13)).astype(np.float32)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})[out], _ort(model, {"x": x}),
                                   rtol=1e-4, atol=1e-5)
    other = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": other})[out], _ort(model, {"x": other}),
                               rtol=1e-4, atol=1e-5)
    plans = {r.node: r.plan for r in compiled.profile({"x": x}).rows}
    assert plans["conv"].startswith("Winograd F(4x4, 3x3): 24 tiles"), plans["conv"]
    if concat:      # both convolutions write their channel blocks of the Concat's output
        assert plans["concat"].startswith("no copy: 2 of 2 inputs"), plans["concat"]


def test_winograd_can_be_switched_off_and_is_not_used_where_it_does_not_pay(monkeypatch):
    model, out = _model((1, 32, 1, 1), 48)        # one output per image
    x = np.random.default_rng(5).standard_normal((1, 32, 1, 1)).astype(np.float32)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run({"x": x})
    assert "Winograd" not in str(compiled.profile({"x": x}))

    model, out = _model((1, 32, 12, 13), 48)
    x = np.random.default_rng(6).standard_normal((1, 32, 12, 13)).astype(np.float32)
    monkeypatch.setenv("TENSORALG_WINOGRAD", "2")          # F(2x2) only
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})[out], _ort(model, {"x": x}),
                                   rtol=1e-4, atol=1e-5)
    assert "Winograd F(2x2, 3x3): 42 tiles" in str(compiled.profile({"x": x}))

    monkeypatch.setenv("TENSORALG_WINOGRAD", "4")          # not a setting: the default
    compiled = tonnx.load(model, opt_level=3)
    with pytest.warns(UserWarning, match="TENSORALG_WINOGRAD='4' is not 0"):
        for _ in range(3):                  # read when the plan is built
            compiled.run({"x": x})
    assert "Winograd F(4x4, 3x3): 12 tiles" in str(compiled.profile({"x": x}))

    monkeypatch.setenv("TENSORALG_WINOGRAD", "0")
    x = np.random.default_rng(6).standard_normal((1, 32, 12, 13)).astype(np.float32)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})[out], _ort(model, {"x": x}),
                                   rtol=1e-4, atol=1e-5)
    profile = str(compiled.profile({"x": x}))
    assert "Winograd" not in profile and "direct convolution" in profile


def _normalized_model(norm: str):
    """``conv1 -> norm -> conv2`` on 32 channels at 12 x 13: ``norm`` an InstanceNormalization,
    ``x - ReduceMean(x)`` (a normalization as exporters decompose one) or a Relu."""
    rng = np.random.default_rng(7)
    weights = [(rng.standard_normal((32, 32, 3, 3)) / np.sqrt(288)).astype(np.float32)
               for _ in range(2)]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    inits.append(numpy_helper.from_array(np.full(32, 3.0, np.float32), "b"))
    nodes = [h.make_node("Conv", ["x", "w0", "b"], ["c1"], name="conv1", pads=[1, 1, 1, 1])]
    if norm == "instance":
        inits += [numpy_helper.from_array(np.ones(32, np.float32), "scale"),
                  numpy_helper.from_array(np.zeros(32, np.float32), "shift")]
        nodes.append(h.make_node("InstanceNormalization", ["c1", "scale", "shift"], ["n"],
                                 name="norm"))
    elif norm == "centred":
        inits.append(numpy_helper.from_array(np.array([2, 3], np.int64), "axes"))
        nodes += [h.make_node("ReduceMean", ["c1", "axes"], ["mean"], name="mean"),
                  h.make_node("Sub", ["c1", "mean"], ["n"], name="centre")]
    else:
        nodes.append(h.make_node("Relu", ["c1"], ["n"], name="norm"))
    nodes.append(h.make_node("Conv", ["n", "w1"], ["y"], name="conv2", pads=[1, 1, 1, 1]))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [2, 32, 12, 13])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [None] * 4)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


@pytest.mark.skipif(not winograd_host(), reason="the plan takes Winograd on AVX-512 hosts only")
@pytest.mark.parametrize("norm, first", [("instance", "F(2x2"), ("centred", "F(2x2"),
                                         ("relu", "F(4x4")])
def test_a_conv_ahead_of_a_normalization_by_the_data_keeps_f2(norm, first):
    """F(4x4)'s rounding, amplified by a normalization dividing by the channel's spread, is
    kept out: the Conv ahead of one takes F(2x2); the Conv after it, and any Conv where no
    such normalization follows, F(4x4)."""
    model = _normalized_model(norm)
    x = np.random.default_rng(8).standard_normal((2, 32, 12, 13)).astype(np.float32)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], _ort(model, {"x": x}),
                                   rtol=1e-4, atol=1e-5)
    plans = {r.node: r.plan for r in compiled.profile({"x": x}).rows}
    assert plans["conv1"].startswith(f"Winograd {first}"), plans["conv1"]
    assert plans["conv2"].startswith("Winograd F(4x4"), plans["conv2"]
