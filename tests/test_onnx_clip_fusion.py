"""A Clip with constant bounds (ReLU6 and others) after a Conv is fused into the Conv's kernel,
as a Relu is: every Conv path (generated GEMM, compiled-in weights, depthwise window kernel,
pointwise statement, node by node) clamps ``min(max(x, low), high)`` as onnxruntime does."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx import helper as h  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
F32 = TensorProto.FLOAT


def _conv_clip(x_shape, w, b, low, high, *, opset=13, group=1, pads=1, also_read=False):
    """``y = Clip(Conv(x, w, b), low, high)`` (bounds as initializers from opset 11, else
    attributes; a None bound is left out); with ``also_read``, ``z = c + c`` reads the Conv's
    output too, so the Clip must not be fused."""
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", group=group,
                         pads=[pads] * 4, kernel_shape=list(w.shape[2:]))]
    if opset >= 11:
        names = []
        for name, value in (("lo", low), ("hi", high)):
            if value is None:
                names.append("")
            else:
                names.append(name)
                inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
        while names and not names[-1]:
            names.pop()
        nodes.append(h.make_node("Clip", ["c", *names], ["y"], name="clip"))
    else:
        bounds = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
        nodes.append(h.make_node("Clip", ["c"], ["y"], name="clip", **bounds))
    outputs = [h.make_tensor_value_info("y", F32, [None] * 4)]
    if also_read:
        nodes.append(h.make_node("Add", ["c", "c"], ["z"], name="add"))
        outputs.append(h.make_tensor_value_info("z", F32, [None] * 4))
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F32, list(x_shape))],
                         outputs, inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(model, x, fused):
    """Every opt level matches onnxruntime; at levels 2 and 3 the Clip is (or is not) fused."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, {"x": x})))
    for level in (0, 1, 2, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(2):      # the second run goes through the static plan where one is built
            got = compiled.run({"x": x})
            for name in names:
                np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL,
                                           err_msg=f"level {level} {name}")
        if level >= 2:
            ops = [s.node.op_type for s in compiled.executor.steps]
            assert ("Clip" not in ops) == fused, (level, ops)
            if fused:
                assert " Clip" not in str(compiled.profile({"x": x}))


def _data(seed, x_shape, w_shape, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(x_shape) * scale).astype(np.float32)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:])) * 4).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize("low, high", [(0.0, 6.0), (-0.5, 0.75), (-1.0, None), (None, 0.5)])
def test_conv_clip_fused(low, high):
    x, w, b = _data(0, (2, 8, 10, 10), (16, 8, 3, 3), scale=3.0)
    _check(_conv_clip(x.shape, w, b, low, high), x, fused=True)


@pytest.mark.parametrize("low, high", [(0.0, 6.0), (-0.25, 1.5), (None, None)])
def test_conv_clip_opset6_attributes_fused(low, high):
    # tensoralg loads opset 11 on, so the opset-6 model goes through onnx's converter (which
    # turns the attributes into constant inputs), the path its loader's error message names
    from onnx import version_converter

    x, w, b = _data(1, (1, 8, 9, 9), (12, 8, 3, 3), scale=3.0)
    model = version_converter.convert_version(
        _conv_clip(x.shape, w, b, low, high, opset=6), 13)
    _check(model, x, fused=True)


def test_depthwise_conv_clip_fused():
    x, w, b = _data(2, (2, 16, 12, 12), (16, 1, 3, 3), scale=3.0)
    _check(_conv_clip(x.shape, w, b, 0.0, 6.0, group=16), x, fused=True)


@pytest.mark.parametrize("shape, out", [((1, 8, 6, 6), 12), ((1, 32, 56, 56), 96)])
def test_pointwise_conv_clip_fused(shape, out):
    # small: the pointwise statement; large: the generated GEMM's epilogue
    x, w, b = _data(3, shape, (out, shape[1], 1, 1), scale=3.0)
    _check(_conv_clip(x.shape, w, b, 0.0, 6.0, pads=0), x, fused=True)


def test_large_conv_clip_fused():
    x, w, b = _data(4, (1, 32, 28, 28), (64, 32, 3, 3), scale=0.5)
    _check(_conv_clip(x.shape, w, b, -1.0, 1.5), x, fused=True)


def test_conv_output_read_elsewhere_is_not_fused():
    x, w, b = _data(5, (1, 8, 10, 10), (16, 8, 3, 3), scale=3.0)
    _check(_conv_clip(x.shape, w, b, 0.0, 6.0, also_read=True), x, fused=False)


def test_runtime_bound_is_not_fused():
    x, w, b = _data(6, (1, 8, 6, 6), (8, 8, 3, 3))
    model = _conv_clip(x.shape, w, b, 0.0, 6.0)
    # the upper bound computed at run time: Clip stays a separate node
    model.graph.node.insert(0, h.make_node("ReduceMax", ["x"], ["hi2"], name="top",
                                           keepdims=0))
    model.graph.node[2].input[2] = "hi2"
    _check(model, x, fused=False)


@pytest.mark.parametrize("group", [1, 8])
def test_nan_kept_like_onnxruntime(group):
    x, w, b = _data(7, (1, 8, 10, 10), (8, 8 // group, 3, 3), scale=3.0)
    x[0, :, 4, 4] = np.nan
    x[0, :, 1, 7] = np.inf
    _check(_conv_clip(x.shape, w, b, 0.0, 6.0, group=group), x, fused=True)
