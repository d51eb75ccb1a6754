"""A Pad of zeros before a Conv folded into the Conv's pads (``passes.folding.
fold_pads_into_convs``), and the pairs left alone; every model against onnxruntime at every
level. Also the constant Pad op itself (a filled buffer instead of ``np.pad``)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx import helper as h  # noqa: E402
from test_onnx_passes import check_all_levels  # noqa: E402

F32 = TensorProto.FLOAT


def _model(pads, *, value=None, mode="constant", conv_pads=(1, 0, 1, 0), axes=None,
           opset=17, also_output=False, x_shape=(2, 3, 7, 6)):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, x_shape[1], 3, 2)).astype(np.float32)
    inits = [numpy_helper.from_array(np.asarray(pads, np.int64), "pads"),
             numpy_helper.from_array(weight, "W"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B")]
    pad_inputs = ["x", "pads"]
    if value is not None:
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), "value"))
        pad_inputs.append("value")
    if axes is not None:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        pad_inputs += [""] * (3 - len(pad_inputs)) + ["axes"]
    nodes = [h.make_node("Pad", pad_inputs, ["xp"], name="pad", mode=mode),
             h.make_node("Conv", ["xp", "W", "B"], ["y"], name="conv",
                         pads=list(conv_pads))]
    outputs = [h.make_tensor_value_info("y", F32, ["N", "M", "H", "W"])]
    if also_output:
        outputs.append(h.make_tensor_value_info("xp", F32, ["N", "C", "H2", "W2"]))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F32, list(x_shape))],
                         outputs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    feeds = {"x": np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)}
    return model, feeds


def _folded(models) -> bool:
    notes = models[3].stage_text("plan")
    return "pad+conv: 1 folded" in notes


@pytest.mark.parametrize("pads, kwargs", [
    ((0, 0, 2, 1, 0, 0, 3, 0), {}),                       # rows and columns, uneven
    ((0, 0, 0, 0, 0, 0, 0, 0), {}),                       # nothing to add
    ((0, 0, 1, 1, 0, 0, 1, 1), {"value": 0.0}),           # an explicit zero
    ((0, 0, 2, 0, 0, 0, 1, 0), {"conv_pads": (0, 0, 0, 0)}),
    ((2, 3, 1, 4), {"axes": (2, -1), "opset": 18}),       # pads over the spatial axes named
])
def test_a_zero_pad_folds_into_the_conv(pads, kwargs):
    model, feeds = _model(pads, **kwargs)
    models = check_all_levels(model, feeds)
    assert _folded(models)
    assert [s.node.op_type for s in models[3].executor.steps].count("Pad") == 0


@pytest.mark.parametrize("pads, kwargs", [
    ((0, 0, 1, 1, 0, 0, 1, 1), {"value": 0.5}),           # not zeros
    ((1, 0, 1, 1, 0, 0, 1, 1), {}),                       # an image of zeros added
    ((0, 0, 1, -1, 0, 0, 1, 1), {}),                      # a crop
    ((0, 0, 1, 1, 0, 0, 1, 1), {"mode": "reflect"}),
    ((0, 0, 1, 1, 0, 0, 1, 1), {"also_output": True}),    # the padded value is an output
])
def test_other_pads_stay(pads, kwargs):
    model, feeds = _model(pads, **kwargs)
    models = check_all_levels(model, feeds)
    assert not _folded(models)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_the_constant_pad_op_fills_and_copies(dtype):
    from tensoralg.onnx.ops.rearrange import _pad

    class Node:
        def note(self, text):
            self.text = text

        def __str__(self):
            return "pad"

    x = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    for pads, value in [((0, 1, 2, 1, 0, 3), None), ((1, 0, -1, 0, 2, 1), 1),
                        ((0, 0, 0, 0, 0, 0), 0)]:
        node = Node()
        got = _pad(node, x, np.array(pads), None if value is None else np.array(value),
                   None, "constant")
        widths = [(pads[k], pads[k + 3]) for k in range(3)]
        cropped = x[:, :, 1:] if pads[2] < 0 else x
        grow = [(max(b, 0), max(e, 0)) for b, e in widths]
        expected = np.pad(cropped, grow, constant_values=np.asarray(value or 0, dtype))
        assert got.dtype == x.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, expected)
        assert "fill" in node.text
