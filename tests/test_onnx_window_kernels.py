"""MaxPool, AveragePool and depthwise Conv through the generated window kernel of a level-3
plan (``tensoralg/onnx/plan/window_steps.py``, ``codegen/window.py``), against onnxruntime: every
geometry the kernel handles differently (unit and other strides, dilations, pads, ceil_mode,
count_include_pad, fused ReLU, a row of outputs wider than one vector), and the forms it leaves
to the node-by-node path.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-5, 1e-5


def _model(node, x_shape, y_shape, constants=(), elem=TensorProto.FLOAT):
    graph = helper.make_graph(
        [node], "window", [helper.make_tensor_value_info("x", elem, list(x_shape))],
        [helper.make_tensor_value_info("y", elem, list(y_shape))],
        [numpy_helper.from_array(a, n) for n, a in constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(node, x, constants=(), kernel_expected=True):
    session = ort.InferenceSession(
        _model(node, x.shape, [None] * x.ndim, constants,
               helper.np_dtype_to_tensor_dtype(x.dtype)).SerializeToString(),
        providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    model = tonnx.load(_model(node, x.shape, want.shape, constants,
                              helper.np_dtype_to_tensor_dtype(x.dtype)), opt_level=3)
    for run in range(3):          # the third run goes through the static plan
        got = model.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"run {run + 1}")
    plan = model.specialiser.latest().describe()
    assert ("window kernel" in plan) == kernel_expected, plan
    return model


def _x(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("attributes, shape", [
    ({"kernel_shape": [3, 3], "strides": [2, 2]}, (2, 3, 13, 13)),                 # squeezenet
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 4, 20, 21)),  # resnet
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 2, 12, 12)),
    ({"kernel_shape": [2, 3], "strides": [1, 1], "pads": [0, 1, 1, 1]}, (2, 2, 5, 37)),
    ({"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]}, (1, 3, 9, 9)),
    ({"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, (1, 2, 8, 7)),
    # Rows wide enough for interior vectors (plain loads) beside the masked ends and borders.
    ({"kernel_shape": [3, 3], "strides": [2, 2]}, (1, 3, 11, 75)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 2, 9, 99)),
    ({"kernel_shape": [3, 2], "strides": [1, 1], "dilations": [1, 2]}, (1, 2, 6, 53)),
])
def test_max_pool_matches_onnxruntime(attributes, shape):
    _check(helper.make_node("MaxPool", ["x"], ["y"], **attributes), _x(shape))


def test_max_pool_float64_and_nan():
    x = _x((1, 2, 6, 6), dtype=np.float64)
    x[0, 1, 2, 3] = np.inf
    _check(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), x)


@pytest.mark.parametrize("stride", [1, 2])
def test_max_pool_interior_vectors_float64_and_nan(stride):
    # float64: 8 lanes, so a 40-wide row has interior vectors; NaN and inf inside them.
    x = _x((1, 2, 7, 40 * stride + 3), dtype=np.float64)
    x[0, 1, 4, 33] = np.inf
    x[0, 1, 2, 17] = -np.inf
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3],
                            strides=[stride, stride], pads=[1, 1, 1, 1])
    model = _check(node, x)
    # NaN wins, as in NumPy's max (onnxruntime's MaxPool may drop it): against NumPy.
    x[0, 0, 3, 20] = np.nan
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    out_h, out_w = (x.shape[2] - 1) // stride + 1, (x.shape[3] - 1) // stride + 1
    want = np.max([padded[:, :, i:i + stride * out_h:stride, j:j + stride * out_w:stride]
                   for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_array_equal(model.run({"x": x})["y"], want)


@pytest.mark.parametrize("attributes, shape", [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 3, 14, 14)),          # inception
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, (2, 2, 20, 20)),          # SPPF
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, (1, 2, 9, 70)),           # 5 vectors
    ({"kernel_shape": [3, 4], "pads": [2, 0, 0, 3]}, (1, 2, 6, 17)),           # uneven pads
    ({"kernel_shape": [7, 7], "pads": [3, 3, 3, 3]}, (1, 2, 5, 5)),            # past the image
    ({"kernel_shape": [1, 3], "pads": [0, 1, 0, 1]}, (1, 3, 4, 33)),
    ({"kernel_shape": [2, 2]}, (1, 2, 7, 7)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unit_stride_max_pool_takes_row_maxima(attributes, shape, dtype):
    """Unit-stride max pools run as row maxima kept in a ring, then maxima over rows: the
    same numbers as onnxruntime's, and NaN and infinities as NumPy's max gives them."""
    x = _x(shape, seed=len(attributes["kernel_shape"]), dtype=dtype)
    model = _check(helper.make_node("MaxPool", ["x"], ["y"], **attributes), x)
    assert "row by row" in str(model.profile({"x": x}))
    x[0, -1, shape[2] // 2, shape[3] // 3] = np.nan
    x[0, 0, 0, -1] = np.inf
    x[0, 0, -1, 0] = -np.inf
    kh, kw = attributes["kernel_shape"]
    pt, pl, pb, pr = attributes.get("pads", [0, 0, 0, 0])
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    out_h, out_w = padded.shape[2] - kh + 1, padded.shape[3] - kw + 1
    want = np.max([padded[:, :, i:i + out_h, j:j + out_w] for i in range(kh)
                   for j in range(kw)], axis=0)
    np.testing.assert_array_equal(model.run({"x": x})["y"], want)


@pytest.mark.parametrize("attributes, shape", [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 3, 17, 17)),          # Inception
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, (1, 2, 9, 70)),
    ({"kernel_shape": [3, 4], "pads": [2, 0, 0, 3]}, (1, 2, 6, 17)),           # uneven pads
    ({"kernel_shape": [5, 5], "pads": [4, 4, 4, 4]}, (1, 2, 3, 3)),            # past the image
    ({"kernel_shape": [2, 2]}, (2, 2, 7, 7)),
])
@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unit_stride_average_pool_sums_row_by_row(attributes, shape, count_include_pad, dtype):
    """Unit-stride average pools sum row by row too, dividing by the cells the window
    counts (inside the image, or the padded image with count_include_pad): against NumPy in
    float64 (every cell's count written out) and onnxruntime in float32."""
    x = _x(shape, seed=shape[-1], dtype=dtype)
    node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=count_include_pad,
                            **attributes)
    kh, kw = attributes["kernel_shape"]
    pt, pl, pb, pr = attributes.get("pads", [0, 0, 0, 0])
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    counted = np.pad(np.ones(shape[2:]), ((pt, pb), (pl, pr)), constant_values=count_include_pad)
    out_h, out_w = padded.shape[2] - kh + 1, padded.shape[3] - kw + 1
    windows = [(i, j) for i in range(kh) for j in range(kw)]
    total = sum(padded[:, :, i:i + out_h, j:j + out_w] for i, j in windows)
    cells = sum(counted[i:i + out_h, j:j + out_w] for i, j in windows)
    want = total / np.maximum(cells, 1)
    if dtype == np.float32:
        model = _check(node, x)
    else:
        model = tonnx.load(_model(node, x.shape, want.shape, (), helper.np_dtype_to_tensor_dtype(
            x.dtype)), opt_level=3)
        for _ in range(2):
            model.run({"x": x})
    assert "row by row" in str(model.profile({"x": x}))
    np.testing.assert_allclose(model.run({"x": x})["y"], want, rtol=1e-5 if dtype == np.float32
                               else 1e-12, atol=1e-6 if dtype == np.float32 else 1e-12)


@pytest.mark.parametrize("attributes, shape", [
    ({"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, (2, 3, 7, 20)),
    ({"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1],
      "count_include_pad": 1}, (2, 3, 7, 20)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
     (1, 2, 10, 10)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1],
      "count_include_pad": 1}, (1, 2, 10, 10)),
    ({"kernel_shape": [2, 2], "strides": [2, 2]}, (3, 4, 8, 8)),
])
def test_average_pool_matches_onnxruntime(attributes, shape):
    _check(helper.make_node("AveragePool", ["x"], ["y"], **attributes), _x(shape))


@pytest.mark.parametrize("attributes, shape", [
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (2, 24, 10, 19)),            # mobilenet
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, (1, 24, 11, 11)),
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "dilations": [1, 1]}, (1, 40, 7, 7)),
    ({"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "dilations": [2, 2]}, (1, 8, 9, 9)),
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 8, 6, 50)),           # interior
    ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, (2, 8, 7, 81)),
    ({"kernel_shape": [3, 3], "pads": [0, 2, 0, 2], "dilations": [1, 2]}, (1, 4, 5, 60)),
    # column stride 2 over output rows of more than one vector: input rows split once into
    # even and odd cells (codegen/window.py), row strides below, at and past the kernel's
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "strides": [2, 2]}, (1, 6, 23, 70)),
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "strides": [2, 2]}, (1, 4, 11, 52)),
    ({"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "strides": [1, 2]}, (1, 5, 9, 70)),
    ({"kernel_shape": [4, 4], "pads": [0, 1, 2, 1], "strides": [3, 2]}, (2, 3, 20, 64)),
    ({"kernel_shape": [2, 2], "strides": [3, 2]}, (1, 3, 11, 40)),
])
@pytest.mark.parametrize("bias", [False, True])
def test_depthwise_conv_matches_onnxruntime(attributes, shape, bias):
    channels = shape[1]
    rng = np.random.default_rng(1)
    w = rng.standard_normal((channels, 1, *attributes["kernel_shape"])).astype(np.float32)
    constants = [("w", w)]
    inputs = ["x", "w"]
    if bias:
        constants.append(("b", rng.standard_normal(channels).astype(np.float32)))
        inputs.append("b")
    node = helper.make_node("Conv", inputs, ["y"], group=channels, **attributes)
    _check(node, _x(shape), constants)


def test_strided_depthwise_splits_rows_once_in_float64():
    # onnxruntime has no float64 Conv: level 0 (NumPy, node by node) is the reference
    channels, x = 4, _x((2, 4, 13, 37), seed=5, dtype=np.float64)
    w = np.random.default_rng(6).standard_normal((channels, 1, 3, 3))
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=channels, pads=[1, 1, 1, 1],
                            strides=[2, 2])
    model = _model(node, x.shape, [2, 4, 7, 19], [("w", w)], TensorProto.DOUBLE)
    want = tonnx.load(model, opt_level=0).run({"x": x})["y"]
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-12, atol=1e-12)
    assert "split once into even and odd cells" in compiled.profile({"x": x}).rows[0].plan


def test_depthwise_conv_with_relu_fused_into_it():
    channels = 300        # more weights than a convolution with weights compiled in unrolls
    w = _x((channels, 1, 3, 3), seed=3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=channels, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    x = _x((1, channels, 6, 6))
    graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", 1, list(x.shape))],
                              [helper.make_tensor_value_info("y", 1, list(x.shape))],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=RTOL, atol=ATOL)
    assert "window kernel" in compiled.specialiser.latest().describe()


def test_forms_the_kernel_leaves_alone_still_match():
    # 1-D pooling
    _check(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3]), _x((2, 3, 10)),
           kernel_expected=False)


def test_window_kernel_refuses_a_wrong_buffer():
    kernel = ta.api.window_kernel("max", (2, 4, 4), (2, 2), np.float32, (2, 2))
    with pytest.raises(ta.ShapeError, match="input"):
        kernel(np.zeros((1, 3, 4, 4), np.float32))
    with pytest.raises(ta.ShapeError, match="depthwise or grouped weight"):
        ta.api.window_kernel("depthwise", (2, 4, 4), (3, 3), np.float32,
                             weight=np.zeros((2, 2, 2, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="depthwise or grouped weight"):
        ta.api.window_kernel("depthwise", (6, 4, 4), (3, 3), np.float32,
                             weight=np.zeros((2, 4, 3, 3), np.float32))   # 4 does not divide 6
    assert ta.api.window_kernel("max", (2, 4, 4), (2, 2), np.int64) is None


def _check_model(model, feeds, kind):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    compiled = tonnx.load(model, opt_level=3)
    for run in range(3):
        got = compiled.run(feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"run {run + 1}")
    return kind in compiled.specialiser.latest().describe()


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis, opset, kernel", [
    ((8, 2, 32, 32), -1, 17, True),        # attention scores
    ((4, 26), 1, 17, True),                # a row shorter than two vectors, with a tail
    ((3, 5, 7), 1, 11, True),              # before opset 13: rows flattened from the axis on
    ((3, 1), -1, 17, True),                # rows of one value
    ((3, 5, 7), 1, 17, False),             # not the last axis: node by node
    ((4, 325, 1), 1, 17, True),            # only axes of size 1 after it (AFM's attention)
    ((2, 4, 1, 1), 1, 17, True),
    ((3, 1, 5), 0, 17, False),             # a later axis of size 5: node by node
])
def test_softmax_row_kernel_matches_onnxruntime(op_type, shape, axis, opset, kernel):
    x = _x(shape, seed=5) * 4
    node = helper.make_node(op_type, ["x"], ["y"], axis=axis)
    graph = helper.make_graph([node], "sm", [helper.make_tensor_value_info("x", 1, list(shape))],
                              [helper.make_tensor_value_info("y", 1, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    assert _check_model(model, {"x": x}, "row kernel") == kernel


def test_softmax_row_kernel_with_a_fully_masked_row_and_float64():
    x = _x((3, 20), seed=6, dtype=np.float64)
    x[1] = -np.inf
    x[2, 3] = np.inf
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([node], "sm", [helper.make_tensor_value_info("x", 11, [3, 20])],
                              [helper.make_tensor_value_info("y", 11, [3, 20])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _check_model(model, {"x": x}, "row kernel")


def test_softmax_row_kernel_exp_over_the_whole_float32_range():
    """The kernel's own vector exp: differences to the row maximum from 0 down past the
    underflow of float32 (-87.3), NaN and infinities in a row."""
    x = np.linspace(-120.0, 0.0, 4 * 37, dtype=np.float32).reshape(4, 37)
    x[1, 5] = np.nan
    x[2, 7] = -np.inf
    x[3, :] = np.linspace(-3.0, 3.0, 37, dtype=np.float32)
    soft = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    graph = helper.make_graph([soft], "sm", [helper.make_tensor_value_info("x", 1, [4, 37])],
                              [helper.make_tensor_value_info("y", 1, [4, 37])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _check_model(model, {"x": x}, "row kernel")
    kernel = ta.api.softmax_kernel(37, np.float32)
    got = kernel(x)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = x.astype(np.float64) - x.max(axis=1, keepdims=True)
        want = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30)
    with pytest.raises(ta.ShapeError, match="whole number of rows"):
        kernel(np.zeros((2, 36), np.float32))


@pytest.mark.parametrize("attributes, shape", [
    ({"kernel_shape": [3, 3, 3], "pads": [1] * 6}, (1, 4, 5, 9, 10)),             # S3D's
    ({"kernel_shape": [1, 3, 3], "strides": [1, 2, 2], "pads": [0, 1, 1, 0, 1, 1]},
     (2, 3, 4, 11, 12)),                                                            # S3D's stem
    ({"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, (1, 2, 6, 8, 8)),          # R3D-style
    ({"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1] * 6}, (1, 2, 7, 9, 9)),
    ({"kernel_shape": [3, 2, 2], "strides": [2, 1, 2], "ceil_mode": 1}, (1, 3, 8, 7, 9)),
    ({"kernel_shape": [2, 3, 3], "dilations": [2, 1, 2], "pads": [1, 1, 2, 0, 1, 2]},
     (1, 2, 6, 7, 8)),
    ({"kernel_shape": [3, 1, 1], "strides": [2, 1, 1]}, (1, 3, 9, 4, 5)),          # depth only
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_3d_max_pool_as_two_window_kernels(attributes, shape, dtype):
    x = _x(shape, dtype=dtype)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attributes)
    model = _check(node, x)
    assert "3-D max pool as two generated window kernels" in str(model.profile({"x": x}))
    # NaN (which onnxruntime's pooling does not define) is kept as the node's own run keeps it
    x.reshape(-1)[::37] = np.nan
    want = tonnx.load(_model(node, x.shape, [None] * x.ndim, (),
                             helper.np_dtype_to_tensor_dtype(x.dtype)),
                      opt_level=0).run({"x": x})["y"]
    np.testing.assert_array_equal(model.run({"x": x})["y"], want)
