"""The GEMM convolution's speed-ups (issue 19): register tiles across output rows and images,
K blocks cut from long kernel rows, near-equal row tiles, and the gathered channels-last copy.

Every case is checked against onnxruntime (a whole ONNX model at level 3) or NumPy, at sizes
that cross the vector width (16 float32 / 8 float64 lanes), the 6- and 12-row register tiles,
the 64-wide weight panels and the 128-deep K blocks, with tails on each.
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
from tensoralg.runtime.gemm import BoundChannelsLast, ConvLayer, DenseLayer


def _onnx_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides, pads, relu: bool = False,
               dynamic_batch: bool = False) -> onnx.ModelProto:
    elem = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.DOUBLE
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], strides=list(strides),
                         pads=list(pads), name="conv")]
    if relu:
        nodes.append(h.make_node("Relu", ["c"], ["y"], name="relu"))
    shape = ["N", *x.shape[1:]] if dynamic_batch else list(x.shape)
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, shape)],
                         [h.make_tensor_value_info("y", elem, ["N", w.shape[0], None, None])],
                         [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _numpy_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, strides, pads) -> np.ndarray:
    """The reference convolution in float64 (onnxruntime has no float64 Conv)."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]),
                                           (pads[1], pads[3])))
    view = np.lib.stride_tricks.sliding_window_view(padded, w.shape[2:], axis=(2, 3))
    view = view[:, :, ::strides[0], ::strides[1]]
    return np.einsum("nchwij,mcij->nmhw", view, w.astype(np.float64)) + b[:, None, None]


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


# (N, C, H, W, M, K, strides, pads (begin + end)); the comments say which edge each crosses.
GEOMETRIES = [
    (2, 16, 7, 7, 70, 3, (1, 1), (1, 1, 1, 1)),    # 7-wide rows: tiles span rows and images
    (3, 8, 5, 6, 20, 3, (2, 2), (1, 0, 0, 1)),     # strided, uneven pads, 3 x 3 outputs
    (1, 70, 6, 5, 33, 3, (1, 1), (1, 1, 1, 1)),    # kernel row of 210 values: two K pieces
    (2, 3, 11, 13, 17, 7, (2, 2), (3, 3, 3, 3)),   # 3 channels: the narrow copy, 7 runs of 21
    (1, 260, 3, 3, 65, 1, (1, 1), (0, 0, 0, 0)),   # 1 x 1, K = 260: three K pieces, 2 panels
    (2, 17, 14, 14, 16, 3, (1, 1), (1, 1, 1, 1)),  # one-vector panel: 12-row tiles, C tail
    (1, 40, 1, 1, 130, 1, (1, 1), (0, 0, 0, 0)),   # a single output position
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_conv_layer_matches_onnxruntime(geometry, dtype):
    n, c, hgt, wid, m, k, strides, pads = geometry
    rng = np.random.default_rng(c * 100 + m)
    x = rng.standard_normal((n, c, hgt, wid)).astype(dtype)
    w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    want = _ort(_onnx_conv(x, w, b, strides, pads), x) if dtype == np.float32 else \
        _numpy_conv(x, w, b, strides, pads)
    for relu in (False, True):
        conv = ConvLayer(w, b, strides, tuple(pads[:2]), tuple(pads[2:]), relu)
        oh, ow = conv.out_shape(hgt, wid)
        # A guard band after the output: the kernel writes inside its rows only.
        store = np.full(n * oh * ow * m + 64, 7.0, dtype)
        out = store[:n * oh * ow * m].reshape(n * oh * ow, m)
        got = conv.bind(x, out)().reshape(n, oh, ow, m).transpose(0, 3, 1, 2)
        expected = np.maximum(want, 0) if relu else want
        tol = 1e-4 if dtype == np.float32 else 1e-10
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
        assert (store[n * oh * ow * m:] == 7.0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [1, 3, 5, 7, 8, 15, 16, 17, 33])
def test_channels_last_copy_matches_numpy(channels, dtype):
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((2, channels, 5, 19)).astype(dtype)
    pads = (2, 1)
    store = np.zeros(2 * 8 * 22 * channels + 32, dtype)
    store[2 * 8 * 22 * channels:] = 7.0
    out = store[:2 * 8 * 22 * channels].reshape(2, 8, 22, channels)
    copy = BoundChannelsLast(x, out, pads)
    copy()
    want = np.zeros_like(out)
    want[:, 2:7, 1:20, :] = x.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out, want)          # the border stays zero
    assert (store[2 * 8 * 22 * channels:] == 7.0).all()
    other = rng.standard_normal(x.shape).astype(dtype)
    copy.rebind("x", other)
    copy()
    np.testing.assert_array_equal(out[:, 2:7, 1:20, :], other.transpose(0, 2, 3, 1))
    with pytest.raises(ta.ShapeError):
        BoundChannelsLast(x, np.zeros((2, 4, 4, channels), dtype), pads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels, width", [(16, 16), (32, 33), (64, 8), (24, 1), (40, 47)])
def test_channels_last_blocks_cross_every_tail(channels, width, dtype):
    # Whole and partial lanes x lanes blocks in both directions, from a channel block of a
    # larger batch (images further apart than one image).
    rng = np.random.default_rng(width)
    batch = rng.standard_normal((3, channels + 5, 4, width)).astype(dtype)
    x = batch[:, 2:2 + channels]
    out = np.full((3, 6, width + 2, channels), -1.0, dtype)
    BoundChannelsLast(x, out, (1, 1))()
    want = np.full_like(out, -1.0)
    want[:, 1:5, 1:width + 1, :] = x.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("m", [1, 5, 7, 11, 13, 25, 49, 50])
@pytest.mark.parametrize("n", [16, 24, 64, 96, 100])
def test_near_equal_row_tiles_match_numpy(m, n):
    # 49 rows run as tiles of 6 and 5 (and 13 rows of a one- or two-vector panel as 7 and 6, of
    # a three-vector one as 7 and 6 too): every row must be computed exactly once.
    rng = np.random.default_rng(m * n)
    a = rng.standard_normal((m, 300)).astype(np.float32)
    w = rng.standard_normal((300, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    got = DenseLayer(w, bias, relu=True)(a)
    want = np.maximum(a.astype(np.float64) @ w + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("batch", [1, 3])
def test_level3_conv_on_the_generated_gemm_matches_onnxruntime(batch, monkeypatch):
    # More weights than a compiled-in convolution unrolls: the plan takes the GEMM path, and
    # the 7 x 7 outputs put register tiles across output rows and images (Winograd off, which
    # would take this 3x3 layer: tests/test_winograd.py).
    monkeypatch.setenv("TENSORALG_WINOGRAD", "0")
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 48, 7, 7)).astype(np.float32)
    w = (rng.standard_normal((80, 48, 3, 3)) / 20).astype(np.float32)
    b = rng.standard_normal(80).astype(np.float32)
    model = _onnx_conv(x, w, b, (1, 1), (1, 1, 1, 1), relu=True, dynamic_batch=True)
    want = _ort(model, x)
    compiled = ta.onnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)
    other = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": other})["y"], _ort(model, other), rtol=1e-4,
                               atol=1e-5)
    assert "direct convolution on the generated GEMM" in str(compiled.profile({"x": x}))


@pytest.mark.parametrize("channels, kernel, stride, pad, route", [
    (3, 3, 2, 1, "patch blocks"),         # K = 27: a 3x3 stem
    (3, 4, 4, 0, "patch blocks"),         # K = 48: a patchify stem
    (12, 3, 1, 1, "patch blocks"),        # K = 108
    (3, 7, 2, 3, "patch blocks"),         # K = 147 but an RGB stem (PATCH_FIRST_CHANNELS)
    (16, 3, 1, 1, "generated GEMM"),      # K = 144: past PATCH_FIRST_DEPTH
])
def test_few_patch_rows_go_to_patch_blocks_before_the_gemm(channels, kernel, stride, pad, route):
    """A convolution with 48 or more output channels but a short K (C * KH * KW) or few input
    channels runs on patch blocks, where the GEMM's per-tile costs would outweigh its
    multiply-adds; past ``PATCH_FIRST_DEPTH`` and ``PATCH_FIRST_CHANNELS`` it keeps the GEMM. Both give onnxruntime's numbers, odd sizes
    included."""
    rng = np.random.default_rng(channels * kernel)
    x = rng.standard_normal((2, channels, 67, 67)).astype(np.float32)
    w = (rng.standard_normal((67, channels, kernel, kernel)) / 10).astype(np.float32)
    b = rng.standard_normal(67).astype(np.float32)
    model = _onnx_conv(x, w, b, (stride, stride), (pad,) * 4, relu=True)
    compiled = ta.onnx.load(model, opt_level=3)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], _ort(model, x), rtol=1e-4,
                               atol=1e-5)
    assert route in str(compiled.profile({"x": x}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows, columns", [(784, 128), (49, 512), (17, 33), (1, 5), (16, 16)])
def test_transpose_call_writes_each_matrix_transposed(rows, columns, dtype):
    from tensoralg import program

    rng = np.random.default_rng(rows)
    wide = rng.standard_normal((3, rows + 2, columns)).astype(dtype)
    source = wide[:, 1:rows + 1]            # matrices C-contiguous, further apart
    target = np.full((3, columns, rows), -1.0, dtype)
    program.transpose_call(source, target)()
    np.testing.assert_array_equal(target, source.transpose(0, 2, 1))


def test_transpose_call_refuses_what_it_cannot_write():
    from tensoralg import program

    x = np.ones((2, 3, 4), np.float32)
    for target in (np.empty((2, 3, 4), np.float32), np.empty((2, 4, 3), np.float64),
                   np.empty((2, 3, 4), np.float32).transpose(0, 2, 1)):
        with pytest.raises(ta.ShapeError, match="transpose_call"):
            program.transpose_call(x, target)
    with pytest.raises(ta.ShapeError, match="transpose_call"):
        program.transpose_call(x.astype(np.int32), np.empty((2, 4, 3), np.int32))
