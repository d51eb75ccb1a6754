"""Training-mode BatchNormalization (``training_mode=1``, opset 14+): the batch's own mean and
variance per channel normalise ``X``, and the running statistics move toward them. timm's
normaliser-free networks (NF-ResNet, NFNet) standardise their convolution weights with it, so
the node's input there is a constant. Checked against ONNX's reference implementation at every
opt level (onnxruntime's CPU build runs training mode only in its training package)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402


def _model(x: np.ndarray, outputs: int, momentum: float = 0.9, epsilon: float = 1e-5):
    channels = x.shape[1]
    rng = np.random.default_rng(3)
    constants = {"s": rng.uniform(0.5, 1.5, channels), "b": rng.standard_normal(channels),
                 "m": rng.standard_normal(channels), "v": rng.uniform(0.5, 2.0, channels)}
    constants = {k: v.astype(x.dtype) for k, v in constants.items()}
    names = ["y", "running_mean", "running_var"][:outputs]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], names,
                            training_mode=1, momentum=momentum, epsilon=epsilon)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    shapes = [list(x.shape), [channels], [channels]]
    return onnx_model([node], {"x": x}, [(n, elem, s) for n, s in zip(names, shapes)],
                      constants, opset=15)


def _reference(model, feeds):
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 7), (3, 4, 6, 5), (1, 8, 1, 1), (2, 3, 0)])
def test_batch_statistics_and_running_updates(shape, dtype):
    x = (np.random.default_rng(1).standard_normal(shape) * 3 + 2).astype(dtype)
    if 0 in shape:
        with pytest.raises(ta.ShapeError, match="empty batch"):
            tonnx.load(_model(x, 3)).run({"x": x})
        return
    model = _model(x, 3, momentum=0.7, epsilon=1e-3)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    check_every_level(model, {"x": x}, _reference(model, {"x": x}), rtol=rtol, atol=rtol)


def test_only_y_requested():
    x = np.random.default_rng(2).standard_normal((6, 4, 3)).astype(np.float32)
    model = _model(x, 1)
    check_every_level(model, {"x": x}, _reference(model, {"x": x}), rtol=1e-4, atol=1e-5)


def test_standardised_weight_of_a_convolution():
    """NF-ResNet's ScaledStdConv2d as the TorchScript exporter writes it: the weight reshaped
    to (1, out, fan_in), batch-normalised in training mode with the gain as scale, reshaped
    back and used by a Conv; the weight's statistics are constant and fold at load."""
    rng = np.random.default_rng(4)
    out_channels, fan = 6, 3 * 3 * 3
    weight = rng.standard_normal((1, out_channels, fan)).astype(np.float32)
    gain = rng.uniform(0.5, 1.5, out_channels).astype(np.float32)
    constants = {"w": weight, "gain": gain, "zero": np.zeros(out_channels, np.float32),
                 "one": np.ones(out_channels, np.float32),
                 "shape": np.array([out_channels, 3, 3, 3], np.int64)}
    nodes = [helper.make_node("BatchNormalization", ["w", "gain", "zero", "zero", "one"],
                              ["standard"], training_mode=1, momentum=0.0, epsilon=1e-6),
             helper.make_node("Reshape", ["standard", "shape"], ["kernel"]),
             helper.make_node("Conv", ["x", "kernel"], ["y"], pads=[1, 1, 1, 1])]
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    model = onnx_model(nodes, {"x": x}, [("y", onnx.TensorProto.FLOAT, [2, 6, 8, 8])],
                       constants, opset=17)
    check_every_level(model, {"x": x}, _reference(model, {"x": x}), rtol=1e-4, atol=1e-4)
