"""Less common ONNX ops against onnxruntime (or NumPy where onnxruntime lacks the op's opset)
at every opt level (level 3 three times, for the static plan): GlobalLpPool, CumProd,
ReverseSequence, CenterCropPad, Unique, Det, the spectral windows, AffineGrid feeding
GridSample as a spatial transformer does, and MaxPool's indices feeding MaxUnpool as SegNet's
decoder does; then the errors bad inputs get."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402


def _check(model, feeds, expected=None, rtol=1e-5, atol=1e-6):
    """Every level against onnxruntime, or against ``expected`` (a list, in output order)."""
    if expected is not None:
        expected = dict(zip([o.name for o in model.graph.output], expected))
    check_every_level(model, feeds, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    x = np.random.default_rng(p).standard_normal((2, 3, 5, 4)).astype(np.float32)
    model = onnx_model([helper.make_node("GlobalLpPool", ["x"], ["y"], p=p)], {"x": x},
                       [("y", TensorProto.FLOAT, [2, 3, 1, 1])])
    _check(model, {"x": x})


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_cumprod(exclusive, reverse, dtype):
    x = np.random.default_rng(2).integers(-3, 4, (3, 5)).astype(dtype)
    model = onnx_model([helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive,
                                         reverse=reverse)],
                       {"x": x}, [("y", helper.np_dtype_to_tensor_dtype(x.dtype), [3, 5])],
                       {"axis": np.array(1, np.int64)}, opset=26)
    values = x[:, ::-1] if reverse else x
    running = np.cumprod(values, axis=1)
    if exclusive:
        running = np.concatenate([np.ones((3, 1), dtype), running[:, :-1]], axis=1)
    _check(model, {"x": x}, [running[:, ::-1] if reverse else running])


@pytest.mark.parametrize("batch_axis, time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = np.arange(4 * 5 * 2, dtype=np.float32).reshape(4, 5, 2)
    if batch_axis == 0:
        x = x.reshape(5, 4, 2)
    lengths = np.array([4, 0, 1, 3, 2][:x.shape[batch_axis]], np.int64)
    model = onnx_model([helper.make_node("ReverseSequence", ["x", "lens"], ["y"],
                                         batch_axis=batch_axis, time_axis=time_axis)],
                       {"x": x, "lens": lengths}, [("y", TensorProto.FLOAT, list(x.shape))])
    _check(model, {"x": x, "lens": lengths})


@pytest.mark.parametrize("shape, axes", [([3, 6], None), ([5, 2], [1, 2]), ([1], [-1])])
def test_center_crop_pad(shape, axes):
    x = np.random.default_rng(3).standard_normal((2, 4, 5)).astype(np.float32)
    attributes = {} if axes is None else {"axes": axes}
    target = [*shape] if axes is not None else [2, *shape]
    if axes is None:
        target = [2, 3, 6]
    out = list(x.shape)
    for axis, size in zip(axes if axes is not None else range(3), target):
        out[axis] = size
    model = onnx_model([helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attributes)],
                       {"x": x}, [("y", TensorProto.FLOAT, out)],
                       {"s": np.array(target, np.int64)}, opset=18)
    _check(model, {"x": x})


@pytest.mark.parametrize("sorted_", [1, 0])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique(sorted_, axis):
    x = np.array([[2, 1, 2], [0, 1, 0], [2, 1, 2], [5, 5, 5]], np.float32)
    attributes = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    model = onnx_model([helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"],
                                         **attributes)],
                       {"x": x}, [("y", TensorProto.FLOAT, ["a", "b"] if axis is not None
                                   else ["u"]),
                                  ("first", TensorProto.INT64, ["u"]),
                                  ("inverse", TensorProto.INT64, ["v"]),
                                  ("counts", TensorProto.INT64, ["u"])])
    _check(model, {"x": x})


def test_det():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4, 4)).astype(np.float32)
    x[1] = 0.0      # singular
    model = onnx_model([helper.make_node("Det", ["x"], ["y"])], {"x": x},
                       [("y", TensorProto.FLOAT, [3])])
    _check(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 5, 16])
def test_windows(name, periodic, size):
    n = np.array(size, np.int64)
    model = onnx_model([helper.make_node(name, ["n"], ["y"], periodic=periodic)], {"n": n},
                       [("y", TensorProto.FLOAT, [size])], opset=17)
    _check(model, {"n": n})


@pytest.mark.parametrize("align_corners", [0, 1])
def test_spatial_transformer(align_corners):
    """AffineGrid's grid fed to GridSample (a spatial transformer network's sampler)."""
    rng = np.random.default_rng(5)
    theta = (np.eye(2, 3)[None] + rng.standard_normal((2, 2, 3)) * 0.2).astype(np.float32)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    size = np.array([2, 3, 5, 4], np.int64)
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"],
                              align_corners=align_corners),
             helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align_corners)]
    model = onnx_model(nodes, {"x": x, "theta": theta},
                       [("grid", TensorProto.FLOAT, [2, 5, 4, 2]),
                        ("y", TensorProto.FLOAT, [2, 3, 5, 4])], {"size": size}, opset=20)
    _check(model, {"x": x, "theta": theta})


def test_volumetric_affine_grid():
    rng = np.random.default_rng(6)
    theta = rng.standard_normal((1, 3, 4)).astype(np.float32)
    size = np.array([1, 1, 2, 3, 4], np.int64)
    model = onnx_model([helper.make_node("AffineGrid", ["theta", "size"], ["grid"])],
                       {"theta": theta}, [("grid", TensorProto.FLOAT, [1, 2, 3, 4, 3])],
                       {"size": size}, opset=20)
    _check(model, {"theta": theta})


@pytest.mark.parametrize("size", [8, 9])
def test_segnet_unpooling(size):
    """MaxPool with indices, a convolution, then MaxUnpool back to the pooled input's shape
    (odd sizes need ``output_shape``): the indices are flat positions in that shape."""
    rng = np.random.default_rng(size)
    x = rng.standard_normal((2, 3, size, size)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("MaxUnpool", ["c", "i", "s"], ["y"], kernel_shape=[2, 2],
                              strides=[2, 2])]
    model = onnx_model(nodes, {"x": x}, [("y", TensorProto.FLOAT, [2, 3, size, size])],
                       {"w": w})
    _check(model, {"x": x}, rtol=1e-5, atol=1e-5)


def test_bad_inputs_get_clear_errors():
    pooled = np.ones((1, 1, 2, 2), np.float32)
    unpool = onnx_model([helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2],
                                          strides=[2, 2])],
                        {"x": pooled, "i": np.array([[[[0, 1, 2, 16]]]]).reshape(1, 1, 2, 2)},
                        [("y", TensorProto.FLOAT, [1, 1, 4, 4])])
    with pytest.raises(ta.ShapeError, match="outside the output"):
        tonnx.load(unpool, opt_level=0).run(
            {"x": pooled, "i": np.array([0, 1, 2, 16]).reshape(1, 1, 2, 2)})
    x = np.ones((2, 3, 3), np.float32)
    lengths = np.array([4, 1, 1], np.int64)
    model = onnx_model([helper.make_node("ReverseSequence", ["x", "l"], ["y"])],
                       {"x": x, "l": lengths}, [("y", TensorProto.FLOAT, [2, 3, 3])])
    with pytest.raises(ta.ShapeError, match="sequence_lens"):
        tonnx.load(model, opt_level=0).run({"x": x, "l": lengths})
    wide = np.ones((2, 3, 4), np.float32)
    det = onnx_model([helper.make_node("Det", ["x"], ["y"])], {"x": wide},
                     [("y", TensorProto.FLOAT, [2])])
    with pytest.raises(ta.ShapeError, match="square"):
        tonnx.load(det, opt_level=0).run({"x": wide})
    theta = np.ones((1, 2, 3), np.float32)
    affine = onnx_model([helper.make_node("AffineGrid", ["t", "s"], ["g"])], {"t": theta},
                        [("g", TensorProto.FLOAT, [2, 3, 3, 2])],
                        {"s": np.array([2, 1, 3, 3], np.int64)}, opset=20)
    with pytest.raises(ta.ShapeError, match="theta"):
        tonnx.load(affine, opt_level=0).run({"t": theta})
