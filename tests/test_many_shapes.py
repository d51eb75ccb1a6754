"""A model served with many input shapes (graph sizes, sequence lengths): the light-plan
policy that plans a shape only once it has come back often enough to repay the build
(``onnx/plan/static.LightPlanCosts``), row kernels built once for any length, and threaded
calls bound anew for each shape without a compile each (``runtime/ranges.py``'s shared
``NativeSplit``, whose slots now carry 32-bit integers and floats too)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.codegen.build import build_llvm_module
from tensoralg.runtime import ranges
from tensoralg.runtime.gemm import DenseLayer
from tensoralg.runtime.native_split import NativeSplit
from tensoralg.runtime.softmax import SoftmaxKernel
from tensoralg.runtime.threads import KernelThreads

onnx = pytest.importorskip("onnx")
from conftest import onnx_model  # noqa: E402
from onnx import helper  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.plan import static  # noqa: E402


def _softmax_model():
    """``y = Softmax(x * 2)`` over the last axis, whose length is dynamic."""
    nodes = [helper.make_node("Mul", ["x", "two"], ["d"]),
             helper.make_node("Softmax", ["d"], ["y"], axis=-1)]
    x = np.zeros((3, 5), np.float32)
    return onnx_model(nodes, {"x": x}, [("y", onnx.TensorProto.FLOAT, [3, "n"])],
                      {"two": np.array(2, np.float32)}, shapes={"x": [3, "n"]})


def _softmax(x):
    e = np.exp(2 * x - (2 * x).max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_light_plans_run_one_softmax_kernel_for_every_length():
    model = tonnx.load(_softmax_model(), opt_level=3)
    rng = np.random.default_rng(0)
    lengths = list(range(3, 3 + static.LIGHT_PLANS_FROM + 4))
    for _ in range(3):
        for n in lengths:
            x = rng.standard_normal((3, n)).astype(np.float32)
            np.testing.assert_allclose(model.run({"x": x})["y"], _softmax(x), rtol=1e-5,
                                       atol=1e-6)
    plans = [p for p in model.specialiser.plans.values() if p is not None]
    assert any(p.light for p in plans)
    texts = [" ".join(str(s.plan) for s in p.steps) for p in plans]
    assert any("any row length" in t for t in texts), texts
    assert any("any row length" not in t and "row kernel" in t for t in texts), texts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("length", [1, 7, 16, 33, 100])
@pytest.mark.parametrize("log", [False, True])
def test_the_any_length_softmax_matches_the_compiled_in_length(dtype, length, log):
    x = np.random.default_rng(length).standard_normal((5, length)).astype(dtype) * 3
    fixed = SoftmaxKernel(length, np.dtype(dtype), log)(x)
    anyway = SoftmaxKernel(length, np.dtype(dtype), log, any_length=True)(x)
    np.testing.assert_allclose(anyway, fixed, rtol=1e-6 if dtype == np.float32 else 1e-12,
                               atol=1e-7)


@pytest.mark.parametrize("any_length", [False, True])
@pytest.mark.parametrize("log", [False, True])
def test_masked_logits_give_zeros_not_denormals(any_length, log):
    """Logits 80 to 120 below the row's max (a masked attention row): their exponentials,
    denormal or near it in float32, are flushed to 0 (not computed: a denormal step is slow);
    the rest of the row, its sum and LogSoftmax's values are as NumPy computes them in
    float64."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 37)).astype(np.float32)
    x[:, 20:] -= np.linspace(80, 120, 17, dtype=np.float32)
    x[3, 30] = np.nan                      # NaN stays NaN along its row
    got = SoftmaxKernel(37, np.dtype(np.float32), log, any_length=any_length)(x)
    wide = x[:3].astype(np.float64)
    shifted = wide - wide.max(-1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)) if log else \
        np.exp(shifted) / np.exp(shifted).sum(-1, keepdims=True)
    np.testing.assert_allclose(got[:3], expected, rtol=1e-5, atol=1e-30 if not log else 1e-5)
    if not log:
        tiny = np.finfo(np.float32).tiny
        assert not np.any((got[:3] != 0) & (np.abs(got[:3]) < tiny))     # no denormals
        assert np.all(got[:3, 20:][expected[:, 20:] < 1e-38] == 0)
    assert np.isnan(got[3]).all()


def test_a_shape_is_planned_once_it_repays_its_build():
    costs = static.LightPlanCosts()
    assert costs.runs_before_plan(2) == 2                # nothing measured: as before
    costs.built(node_s=1.0, build_s=30.0)                # the first build is not counted
    assert costs.runs_before_plan(2) == 2
    costs.built(node_s=1.0, build_s=4.0)                 # 3 node runs beyond its own
    assert costs.runs_before_plan(2) == 6                # a planned run taken to save half
    costs.planned(node_s=1.0, run_s=0.25)
    assert costs.runs_before_plan(2) == 4                # 3 / 0.75
    costs.built(node_s=1.0, build_s=40.0)                # one build that compiled: the
    costs.built(node_s=1.0, build_s=4.0)                 # median of 3, 39, 3 stays 3
    assert costs.runs_before_plan(2) == 4
    for _ in range(3):                                   # plans that cost more than they save
        costs.planned(node_s=1.0, run_s=2.0)
    assert costs.runs_before_plan(2) == static.LIGHT_PLAN_MOST_RUNS
    assert costs.runs_before_plan(8) >= 8


def test_a_stream_of_rarely_repeated_shapes_builds_no_plan_per_shape(monkeypatch):
    model = tonnx.load(_softmax_model(), opt_level=3)
    specialiser = model.specialiser
    rng = np.random.default_rng(1)
    for n in range(3, 3 + static.LIGHT_PLANS_FROM):        # the model's first plans
        for _ in range(2):
            model.run({"x": rng.standard_normal((3, n)).astype(np.float32)})
    specialiser.light_costs.builds = 2
    specialiser.light_costs.build_samples[:] = [20.0]     # builds cost 20 node runs
    specialiser.light_costs.saved_samples[:] = [0.5]
    before = len([p for p in specialiser.plans.values() if p is not None])
    for n in range(20, 30):                               # each new length seen 3 times
        x = rng.standard_normal((3, n)).astype(np.float32)
        for _ in range(3):
            np.testing.assert_allclose(model.run({"x": x})["y"], _softmax(x), rtol=1e-5,
                                       atol=1e-6)
    assert len([p for p in specialiser.plans.values() if p is not None]) == before


def test_threaded_calls_bound_for_new_shapes_share_one_native_split():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((256, 512)).astype(np.float32)
    bias = rng.standard_normal(512).astype(np.float32)
    layer = DenseLayer(w, bias, relu=True, threads=KernelThreads(2))
    built = None
    for m in (240, 252, 264, 276, 276):
        a = rng.standard_normal((m, 256)).astype(np.float32)
        out = np.empty((m, 512), np.float32)
        bound = layer.bind(a, out)
        if len(bound.calls) < 2:
            continue
        bound()
        np.testing.assert_allclose(out, np.maximum(a @ w + bias, 0), rtol=1e-4, atol=1e-3)
        again = rng.standard_normal((m, 256)).astype(np.float32)
        bound.rebind("A", again)                          # the input rebound: rewritten
        bound()
        np.testing.assert_allclose(out, np.maximum(again @ w + bias, 0), rtol=1e-4,
                                   atol=1e-3)
        if built is None:
            built = len(ranges._SPLITS)
        assert len(ranges._SPLITS) == built               # no new split for a new shape
    assert built is not None, "no call was split over two threads"


def test_native_split_slots_carry_int32_and_float_arguments():
    """``f(out, scale (double), offset (float), add (i32), lo, hi)``: out[i] = i * scale +
    offset + add over [lo, hi), two ranges on the native pool."""
    from llvmlite import ir

    i32, i64, f32, f64 = ir.IntType(32), ir.IntType(64), ir.FloatType(), ir.DoubleType()
    module = ir.Module("fill")
    fn = ir.Function(module, ir.FunctionType(i32, (ir.PointerType(), f64, f32, i32, i64,
                                                   i64)), "fill")
    out, scale, offset, add, lo, hi = fn.args
    entry, loop, done = (fn.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed("<", lo, hi), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(lo, entry)
    value = b.fadd(b.fadd(b.fmul(b.sitofp(i, f64), scale), b.fpext(offset, f64)),
                   b.sitofp(add, f64))
    b.store(value, b.gep(out, [i], source_etype=f64))
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, hi), loop, done)
    b.position_at_end(done)
    b.ret(ir.Constant(i32, 0))
    prototype = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_double,
                                 ctypes.c_float, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64)
    function, _, keep = build_llvm_module(module, "fill", prototype)
    assert NativeSplit.supports(function)
    pool = KernelThreads(2).native_pool()
    if pool is None:
        pytest.skip("no native pool on this host")
    split = NativeSplit(function, (4, 5), 2, pool, "fill", varying=range(6))
    result = np.zeros(10)
    calls = [[result.ctypes.data, 0.5, 0.25, -3, 0, 4], [result.ctypes.data, 0.5, 0.25, -3, 4, 10]]
    assert split.run(calls[0], calls) == 0
    np.testing.assert_array_equal(result, np.arange(10) * 0.5 + 0.25 - 3)
    calls[1][1] = 2.0                                     # a changed float in one range
    assert split.run(calls[0], calls, owner=calls) == 0
    assert split.run(calls[0], calls, owner=calls) == 0
    want = np.arange(10) * 0.5 + 0.25 - 3
    want[4:] = np.arange(4, 10) * 2.0 + 0.25 - 3
    np.testing.assert_array_equal(result, want)
    del keep


def test_a_model_with_many_shapes_matches_on_two_threads():
    """Node-by-node runs, full and light plans of a dense model on two threads, each shape's
    calls bound anew."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 48)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    model = onnx_model(nodes, {"x": np.zeros((4, 32), np.float32)},
                       [("y", onnx.TensorProto.FLOAT, ["m", 48])], {"w": w},
                       shapes={"x": ["m", 32]})
    before = ta.get_num_threads()
    ta.set_num_threads(2)
    try:
        compiled = tonnx.load(model, opt_level=3)
        for _ in range(3):
            for m in (64, 80, 96, 112, 128, 144):
                x = rng.standard_normal((m, 32)).astype(np.float32)
                h = np.maximum(x @ w, 0)
                e = np.exp(h - h.max(-1, keepdims=True))
                np.testing.assert_allclose(compiled.run({"x": x})["y"],
                                           e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    finally:
        ta.set_num_threads(before)
