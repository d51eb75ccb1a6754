"""MobileNet-style speed-ups (issue 19): a 2-D 1x1 convolution large enough for BLAS runs as a
direct convolution on the generated GEMM (one thread, as ``ta.set_num_threads`` says; NumPy's
OpenBLAS ran its own threads), and a whole inverted-residual block still matches onnxruntime.

Sizes cross the vector width (16 float32 lanes), the 6- and 12-row register tiles and the
64-wide weight panels, with tails on each; batches 1 and 3.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
import tensoralg.onnx  # noqa: F401  (ta.onnx)
from tensoralg.runtime.planar import planar_pays


def _model(nodes: list, x_shape: tuple, out_channels: int, inits: list) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g",
                         [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                   ["N", *x_shape[1:]])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT,
                                                   ["N", out_channels, *[None] * (len(x_shape) - 2)])],
                         inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _check(model: onnx.ModelProto, x: np.ndarray, rng: np.random.Generator) -> str:
    """Level 3 against onnxruntime on ``x`` (three runs: compile, plan, replay) and on a second
    input of the same shape; returns the printed profile."""
    compiled = ta.onnx.load(model, opt_level=3)
    want = _ort(model, x)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)
    other = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": other})["y"], _ort(model, other), rtol=1e-4,
                               atol=1e-5)
    return str(compiled.profile({"x": x}))


# (C, M, H, W): in and out channels, image; each at least BLAS_MIN_WORK multiply-adds and
# more weights than a compiled-in convolution unrolls.
POINTWISE = [
    (40, 70, 5, 7),      # 35 positions: 6-row tiles with a tail, two panels (70 = 64 + 6)
    (17, 160, 7, 7),     # C tail past 16 lanes, three panels
    (96, 24, 12, 13),    # one-vector panel (24 > 16: two vectors) and 156 rows
    (144, 16, 9, 9),     # one-vector panel: 12-row tiles, K past the 128-deep block
    (19, 13, 8, 18),     # NCHW planes: 144 positions (two panels and a one-vector tail)
    (200, 7, 15, 17),    # NCHW planes: 255 positions, C past two 128-deep blocks
]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("case", POINTWISE)
def test_pointwise_conv_on_the_generated_gemm_matches_onnxruntime(case, relu, batch):
    c, m, height, width = case
    rng = np.random.default_rng(c * m + batch)
    x = rng.standard_normal((batch, c, height, width)).astype(np.float32)
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], name="conv")]
    if relu:
        nodes.append(h.make_node("Relu", ["c"], ["y"], name="relu"))
    model = _model(nodes, x.shape, m, [numpy_helper.from_array(w, "w"),
                                       numpy_helper.from_array(b, "b")])
    profile = _check(model, x, rng)
    conv_line = next(line for line in profile.splitlines() if line.startswith("conv "))
    # The point of the change: no BLAS for a 2-D 1x1 convolution.
    assert "BLAS" not in conv_line, conv_line
    # NCHW planes where the positions fill the vector lanes, else the channels-last GEMM
    assert ("pointwise convolution on NCHW planes" in conv_line) == \
        planar_pays(x.dtype, height * width), conv_line
    assert "pointwise convolution on NCHW planes" in conv_line or \
        "generated GEMM" in conv_line, conv_line


def test_pointwise_conv_1d_keeps_its_product():
    # A 1-D pointwise convolution (xDeepFM's CIN layers) keeps the (N, C, positions) product.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 40, 50)).astype(np.float32)
    w = (rng.standard_normal((70, 40, 1)) / 7).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    model = _model([h.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")], x.shape, 70,
                   [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    _check(model, x, rng)


@pytest.mark.parametrize("batch", [1, 2])
def test_inverted_residual_block_matches_onnxruntime(batch):
    # MobileNetV2's block: 1x1 expand, ReLU6 (Clip), 3x3 depthwise (stride 1, pad 1), ReLU6,
    # 1x1 project, residual Add; 24 -> 144 -> 24 channels on 13 x 11 (tails everywhere).
    rng = np.random.default_rng(batch)
    c, e, height, width = 24, 144, 13, 11
    x = rng.standard_normal((batch, c, height, width)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", (rng.standard_normal((e, c, 1, 1)) / 5).astype(np.float32)),
        ("b1", rng.standard_normal(e).astype(np.float32)),
        ("w2", (rng.standard_normal((e, 1, 3, 3)) / 3).astype(np.float32)),
        ("b2", rng.standard_normal(e).astype(np.float32)),
        ("w3", (rng.standard_normal((c, e, 1, 1)) / 12).astype(np.float32)),
        ("b3", rng.standard_normal(c).astype(np.float32)),
        ("lo", np.array(0.0, np.float32)), ("hi", np.array(6.0, np.float32))]]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["e"], name="expand"),
             h.make_node("Clip", ["e", "lo", "hi"], ["er"], name="clip1"),
             h.make_node("Conv", ["er", "w2", "b2"], ["d"], group=e, pads=[1, 1, 1, 1],
                         name="depthwise"),
             h.make_node("Clip", ["d", "lo", "hi"], ["dr"], name="clip2"),
             h.make_node("Conv", ["dr", "w3", "b3"], ["p"], name="project"),
             h.make_node("Add", ["x", "p"], ["y"], name="add")]
    profile = _check(_model(nodes, x.shape, c, inits), x, rng)
    assert "BLAS" not in profile, profile
