"""Skip connections joined to the pointwise Conv before them (``folding.fuse_conv_residuals``):
``act(conv1x1(x) + b + r)`` as one call of the generated planar convolution, which adds the
residual in registers (``codegen/planar.py``, ``FLAG_RESIDUAL``); what the pass leaves alone
(broadcasting Adds, 3x3 kernels, small planes, outputs read twice) keeps the Add. Against
onnxruntime at every level, and the kernel alone against NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg import program
from tensoralg.runtime.planar import PlanarConv

RTOL, ATOL = 1e-4, 1e-5


def _bottleneck(shape=(2, 16, 14, 14), *, after="Relu", bias=True, swap=False,
                skip_later=False, kernel=1, skip_shape=None, residual_input=False,
                extra_reader=False, skip_conv=False, dtype=np.float32):
    """x -> main Conv (kernel x kernel, as many output channels as input) -> Add(skip) ->
    after; the skip is ``x * x`` (a 1x1 Conv of x with ``skip_conv``, a graph input ``r`` of
    ``skip_shape`` with ``residual_input``)."""
    n, c, hh, ww = shape
    out = c
    rng = np.random.default_rng(out + kernel)
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    inits = [numpy_helper.from_array((rng.standard_normal((out, c, kernel, kernel)) /
                                      np.sqrt(c)).astype(dtype), "W"),
             numpy_helper.from_array((rng.standard_normal((out, c, 1, 1)) /
                                      np.sqrt(c)).astype(dtype), "W2")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(out).astype(dtype), "B"))
    pad = [kernel // 2] * 4
    main = h.make_node("Conv", ["x", "W"] + ["B"] * bias, ["h"], name="main", pads=pad)
    inputs = [h.make_tensor_value_info("x", kind, list(shape))]
    nodes = [main]
    if residual_input:
        inputs.append(h.make_tensor_value_info("r", kind, list(skip_shape or
                                                                (n, out, hh, ww))))
    else:
        skip = h.make_node("Conv", ["x", "W2"], ["r"], name="skip") if skip_conv else \
            h.make_node("Mul", ["x", "x"], ["r"], name="skip")
        nodes = [main, skip] if skip_later else [skip, main]
    nodes.append(h.make_node("Add", ["r", "h"] if swap else ["h", "r"], ["s"], name="add"))
    if after == "Relu":
        nodes.append(h.make_node("Relu", ["s"], ["y"], name="relu"))
    elif after == "Clip":
        inits += [numpy_helper.from_array(np.array(v, dtype), k)
                  for k, v in (("lo", 0.0), ("hi", 1.5))]
        nodes.append(h.make_node("Clip", ["s", "lo", "hi"], ["y"], name="clip"))
    else:
        nodes.append(h.make_node("Identity", ["s"], ["y"], name="same"))
    outputs = [h.make_tensor_value_info("y", kind, [None] * 4)]
    if extra_reader:
        outputs.append(h.make_tensor_value_info("h", kind, [None] * 4))
    graph = h.make_graph(nodes, "g", inputs, outputs, inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        dtype = np.float32 if value.type.tensor_type.elem_type == TensorProto.FLOAT else \
            np.float64
        feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def _check(model, feeds, level):
    want = onnxruntime_outputs(model, feeds)
    compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=level)
    got = compiled.run(feeds)
    for value, name in zip(want, [o.name for o in model.graph.output]):
        np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL)
    return compiled


FUSED = {
    "relu": {},
    "clip": {"after": "Clip"},
    "no activation": {"after": None},
    "no bias": {"bias": False},
    "skip first in the Add": {"swap": True},
    "skip computed after the conv": {"skip_later": True},
    "one image": {"shape": (1, 16, 8, 8)},
    "many channels (several K blocks)": {"shape": (1, 700, 8, 8)},
    "residual is a graph input": {"residual_input": True},
}
EITHER_SIDE = {"downsampling block (a Conv on either side)": {"skip_conv": True}}


@pytest.mark.parametrize("case", list(FUSED) + list(EITHER_SIDE))
@pytest.mark.parametrize("level", [0, 2, 3])
def test_residual_conv_matches_onnxruntime(case, level):
    model = _bottleneck(**{**FUSED, **EITHER_SIDE}[case])
    feeds = _feeds(model)
    compiled = _check(model, feeds, level)
    if level >= 2:
        text = compiled.stage_text("plan")
        assert "conv+residual: 1 fused (add into " + ("main" if case in FUSED else "") in text
        assert "Add(" not in text        # the Add left the graph
    if level == 3:
        plans = [row.plan for row in compiled.profile(feeds).rows]
        assert any("pointwise convolution on NCHW planes" in plan and "residual" in plan
                   for plan in plans), plans


def test_residual_graph_input_is_read_afresh_each_run():
    model = _bottleneck(residual_input=True)
    compiled = planned_model(model, _feeds(model))
    for seed in (5, 6):
        feeds = _feeds(model, seed)
        np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                                   rtol=RTOL, atol=ATOL)


NOT_FUSED = {
    "broadcast residual": {"residual_input": True, "skip_shape": (1, 16, 1, 1)},
    "3x3 kernel": {"kernel": 3},
    "7x7 plane (idle lanes)": {"shape": (2, 16, 7, 7)},
    "conv output read twice": {"extra_reader": True},
}


@pytest.mark.parametrize("case", list(NOT_FUSED))
@pytest.mark.parametrize("level", [2, 3])
def test_adds_the_kernel_cannot_take_stay(case, level):
    model = _bottleneck(**NOT_FUSED[case])
    compiled = _check(model, _feeds(model), level)
    assert "conv+residual: 0 fused" in compiled.stage_text("plan")


def test_float64_residual_conv_matches_numpy():
    model = _bottleneck(dtype=np.float64)
    feeds = _feeds(model)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = feeds["x"]
    want = np.maximum(np.einsum("mc,nchw->nmhw", weights["W"][:, :, 0, 0], x) +
                      weights["B"][:, None, None] + x * x, 0)
    for level in (0, 3):
        compiled = planned_model(model, feeds) if level == 3 else tonnx.load(model, opt_level=0)
        np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-12, atol=1e-12)


# --- the kernel alone ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 3, 2, 1, 2), (2, 37, 13, 7, 9), (1, 1300, 7, 1, 100),
                                   (2, 5, 6, 56, 56), (1, 0, 4, 3, 3)])
@pytest.mark.parametrize("threaded", [False, True])
def test_planar_kernel_adds_the_residual_before_the_activation(dtype, shape, threaded):
    n, c, m, hh, ww = shape
    rng = np.random.default_rng(c + m)
    x = rng.standard_normal((n, c, hh, ww)).astype(dtype)
    weight = rng.standard_normal((m, c)).astype(dtype)
    bias = rng.standard_normal(m).astype(dtype)
    r = rng.standard_normal((n, m, hh, ww)).astype(dtype)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    threads = program.kernel_cache().threads if threaded else None
    for activation in (None, (0.0, float("inf")), (-0.5, 0.5)):
        conv = PlanarConv(weight, bias, activation, threads=threads, residual=True)
        want = np.einsum("mc,nchw->nmhw", weight, x) + bias[:, None, None] + r
        if activation is not None:
            want = np.clip(want, *activation)
        np.testing.assert_allclose(conv(x, r=r), want, rtol=tol, atol=tol * max(1, c) ** 0.5)
        # a channel block of a larger array, as a Concat's producer may hold it
        wide = np.zeros((n, m + 3, hh, ww), dtype)
        wide[:, 1:m + 1] = r
        np.testing.assert_allclose(conv(x, r=wide[:, 1:m + 1]), want, rtol=tol,
                                   atol=tol * max(1, c) ** 0.5)
        bound = conv.bind(x, np.empty_like(r), r.copy())
        bound.rebind("r", r)
        np.testing.assert_allclose(bound(), want, rtol=tol, atol=tol * max(1, c) ** 0.5)


def test_planar_residual_refuses_what_it_cannot_read():
    weight = np.ones((4, 3), np.float32)
    x = np.ones((1, 3, 2, 2), np.float32)
    r = np.ones((1, 4, 2, 2), np.float32)
    with pytest.raises(ta.ShapeError, match="needs the residual"):
        PlanarConv(weight, None, residual=True)(x)
    with pytest.raises(ta.ShapeError, match="without a residual"):
        PlanarConv(weight, None)(x, r=r)
    with pytest.raises(ta.ShapeError, match="residual must be a float32 array of shape"):
        PlanarConv(weight, None, residual=True)(x, r=r[..., :1])
    with pytest.raises(ta.ShapeError, match="residual must be a float32"):
        PlanarConv(weight, None, residual=True)(x, r=r.astype(np.float64))
    with pytest.raises(ta.ShapeError, match="must not overlap the output"):
        PlanarConv(weight, None, residual=True)(x, r, r=r)
    bound = PlanarConv(weight, None, residual=True).bind(x, np.empty_like(r), r)
    with pytest.raises(ta.ShapeError, match="in place of the residual"):
        bound.rebind("r", r[:, :2])
    with pytest.raises(ta.ShapeError, match="in place of the residual"):
        bound.rebind("r", bound.out)
