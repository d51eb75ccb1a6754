"""Grouped convolutions with few channels a group (ResNeXt's 32 groups of 4 or 8, RegNet's
groups of 8, depthwise layers with a channel multiplier) through the generated window kernel
of a level-3 plan (``onnx/plan/window_steps.grouped_window_spec``, ``codegen/window.py``),
against onnxruntime and a float64 NumPy reference: blocks of a group's output planes that
divide it unevenly, strides 1, 2 and 3, dilations, asymmetric pads, rows shorter and longer
than a vector (interior and border vectors), a fused ReLU, float32 and float64, and thread
ranges that split blocks between threads.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.codegen.window import MAX_BLOCK, ChannelGroups, block_limit  # noqa: E402
from tensoralg.onnx.plan.product_steps import FEW_GROUP_ROWS  # noqa: E402


def _model(nodes, x, y_shape, constants):
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        nodes, "grouped", [helper.make_tensor_value_info("x", elem, list(x.shape))],
        [helper.make_tensor_value_info("y", elem, list(y_shape))],
        [numpy_helper.from_array(a, n) for n, a in constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _reference(x, w, b, group, strides, pads, dilations):
    """A float64 grouped convolution by its definition, one window at a time."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    mg = m // group
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (x.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, m, oh, ow))
    for o in range(m):
        g = o // mg
        for i in range(kh):
            for j in range(kw):
                cells = x[:, g * cg:(g + 1) * cg,
                          i * dilations[0]:i * dilations[0] + strides[0] * oh:strides[0],
                          j * dilations[1]:j * dilations[1] + strides[1] * ow:strides[1]]
                out[:, o] += np.einsum("ncyx,c->nyx", cells, w[o, :, i, j].astype(np.float64))
        if b is not None:
            out[:, o] += b[o]
    return out


def _run(x, w, b, group, strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), relu=False,
         threads=None):
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    constants = [("w", w)] + ([("b", b)] if b is not None else [])
    nodes = [helper.make_node("Conv", inputs, ["c" if relu else "y"], group=group,
                              kernel_shape=list(w.shape[2:]), strides=list(strides),
                              pads=list(pads), dilations=list(dilations))]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    want = _reference(x, w, b, group, strides, pads, dilations)
    if relu:
        want = np.maximum(want, 0)
    model = _model(nodes, x, want.shape, constants)
    theirs = want        # onnxruntime has no float64 Conv: the float64 reference alone
    if x.dtype == np.float32:
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        theirs = session.run(None, {"x": x})[0]
    if threads is not None:
        before = ta.get_num_threads()
        ta.set_num_threads(threads)
    try:
        compiled = tonnx.load(model, opt_level=3)
        plan = _compare(compiled, x, want, theirs)
    finally:
        if threads is not None:
            ta.set_num_threads(before)
    return plan


def _compare(compiled, x, want, theirs):
    tol = dict(rtol=1e-4, atol=1e-4) if x.dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    for run in range(3):          # the third run goes through the static plan
        got = compiled.run({"x": x})["y"]
        np.testing.assert_allclose(got, want, err_msg=f"run {run + 1}", **tol)
        np.testing.assert_allclose(got, theirs, err_msg=f"run {run + 1}", **tol)
    plan = compiled.specialiser.latest()
    return "\n".join([plan.describe()] + [str(step.plan) for step in plan.steps])


def _operands(shape, out_channels, group, kernel, dtype=np.float32, seed=0, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    # Large enough weights that a wrong tap or group shows above the tolerance.
    w = rng.standard_normal((out_channels, shape[1] // group, *kernel)).astype(dtype)
    b = rng.standard_normal(out_channels).astype(dtype) if bias else None
    return x, w, b


# More weights than the compiled-weights convolution unrolls (codegen.conv.MAX_UNROLLED_DENSE),
# which would take the smaller ones first.
@pytest.mark.parametrize("shape, out_channels, group, kernel, strides, pads, dilations", [
    ((2, 128, 9, 20), 128, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # ResNeXt, 4 a group
    ((1, 64, 12, 37), 64, 8, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),        # RegNet, 8, stride 2
    ((1, 30, 7, 40), 60, 6, (3, 3), (1, 1), (1, 0, 2, 1), (1, 1)),          # 5 -> 10: block 5
    ((2, 96, 6, 19), 288, 48, (3, 2), (3, 3), (0, 2, 1, 0), (1, 1)),       # 2 -> 6, stride 3
    ((1, 32, 9, 33), 192, 16, (3, 3), (1, 2), (2, 2, 2, 2), (2, 2)),       # 2 -> 12: blocks of 6
    ((1, 64, 5, 50), 128, 64, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)),       # multiplier 2
    ((1, 36, 4, 4), 36, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),          # 9 a group, tiny
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grouped_conv_matches_references(shape, out_channels, group, kernel, strides, pads,
                                         dilations, dtype):
    x, w, b = _operands(shape, out_channels, group, kernel, dtype)
    plan = _run(x, w, b, group, strides, pads, dilations)
    assert "grouped" in plan and "window kernel" in plan, plan


def test_grouped_conv_with_relu_without_bias_and_threads():
    x, w, _ = _operands((3, 96, 10, 45), 96, 12, (3, 3), bias=False, seed=2)
    plan = _run(x, w, None, 12, relu=True, threads=2)
    block = block_limit()         # 8 with AVX-512, 4 without
    assert f"grouped (8 -> 8 channels a group, {block} output planes a block)" in plan, plan
    assert "relu" in plan


def test_depthwise_with_a_channel_multiplier_takes_the_kernel():
    x, w, b = _operands((1, 4, 6, 6), 8, 4, (3, 3), seed=4)
    plan = _run(x, w, b, 4)
    assert "grouped (1 -> 2 channels a group" in plan, plan


def test_sixteen_channels_a_group_chooses_by_row_width():
    # Rows that fill the kernel's vectors take it; 7-wide rows fill under half of 16 lanes and
    # keep one GEMM per group, unless the output positions are so few (42 here, at most
    # FEW_GROUP_ROWS) that the GEMMs' calls outweigh their work.
    x, w, b = _operands((1, 64, 6, 14), 64, 4, (3, 3), seed=5)
    assert "grouped (16 -> 16" in _run(x, w, b, 4)
    x, w, b = _operands((2, 64, 6, 7), 64, 4, (3, 3), seed=6)
    assert 2 * 6 * 7 > FEW_GROUP_ROWS
    assert "window kernel" not in _run(x, w, b, 4)
    x, w, b = _operands((1, 64, 6, 7), 64, 4, (3, 3), seed=6)
    assert "grouped (16 -> 16" in _run(x, w, b, 4)


def test_channel_groups_blocks_and_refusals():
    assert ChannelGroups.of(128, (128, 4, 3, 3)) == ChannelGroups(4, 4, 4)
    assert ChannelGroups.of(16, (96, 2, 3, 3)) == ChannelGroups(2, 12, 6)
    assert ChannelGroups.of(32, (32, 1, 3, 3)) == ChannelGroups(1, 1, 1)
    assert ChannelGroups.of(4, (44, 1, 3, 3)).block == 1      # 11 a group: no divisor <= 8
    assert ChannelGroups.of(2, (2 * 64, 1, 1, 1)).block == MAX_BLOCK
    assert ChannelGroups.of(2, (2 * 64, 1, 1, 1), limit=4).block == 4
    with pytest.raises(ta.ShapeError):
        ChannelGroups.of(12, (12, 5, 3, 3))
    with pytest.raises(ta.ShapeError):
        ChannelGroups(2, 6, 4)


def test_grouped_kernel_refuses_wrong_buffers():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((12, 2, 3, 3)).astype(np.float32)
    kernel = ta.api.window_kernel("depthwise", (6, 8, 8), (3, 3), np.float32, (1, 1), (1, 1),
                                  (1, 1), (1, 1), weight=w)
    x = rng.standard_normal((2, 6, 8, 8)).astype(np.float32)
    assert kernel(x).shape == (2, 12, 8, 8)
    with pytest.raises(ta.ShapeError, match="output"):
        kernel.bind(x, np.empty((2, 6, 8, 8), np.float32))
    with pytest.raises(ta.ShapeError, match="input"):
        kernel(np.zeros((2, 12, 8, 8), np.float32))
    with pytest.raises(ta.ShapeError, match="bias"):
        ta.api.window_kernel("depthwise", (6, 8, 8), (3, 3), np.float32, weight=w,
                             bias=np.zeros(6, np.float32))
