"""Static-plan steps of a transformer's attention-mask path (tensoralg/onnx/plan/mask_steps.py):
mixed-dtype Cast, And/Or/Xor/Not, comparisons, Expand and Where as compiled broadcast kernels
(``tensoralg.program.broadcast_call``), bool block copies, and a Reshape to a graph output as a
compiled copy, so that the plan stays one compiled sequence. Each model is compared with
onnxruntime on fresh values after the plan is built (level 3 plans on the second run).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.onnx.plan.step_base import parts_of

RTOL, ATOL = 1e-4, 1e-5
F32, I64, I32, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None,
           opset: int = 17) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs, inits or [])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(compiled: tonnx.CompiledModel, model: onnx.ModelProto,
           feeds: dict[str, np.ndarray]) -> None:
    expected = onnxruntime_outputs(model, feeds)
    got = compiled.run(feeds)
    for info, want in zip(model.graph.output, expected):
        assert got[info.name].dtype == want.dtype, info.name
        assert got[info.name].shape == want.shape, info.name
        np.testing.assert_allclose(got[info.name], want, rtol=RTOL, atol=ATOL)


def _python_steps(compiled: tonnx.CompiledModel) -> list[str]:
    plan = compiled.specialiser.latest()
    return [s.step.node.op_type for s in plan.steps if parts_of(s.run) is None]


def _mask_model(mask_type: int, batch: int, heads: int, tokens: int) -> onnx.ModelProto:
    """GPT-2's mask path: the padding mask reshaped to (B, 1, 1, T), cast to bool, and-ed with
    the causal matrix, expanded to the scores' shape, turned into 0 / -max by Where, added to
    the scores and softmaxed; the result reshaped into a graph output."""
    causal = np.tril(np.ones((tokens, tokens), np.bool_)).reshape(1, 1, tokens, tokens)
    inits = [numpy_helper.from_array(causal, "causal"),
             numpy_helper.from_array(np.array([batch, 1, 1, tokens], np.int64), "mshape"),
             numpy_helper.from_array(np.array([batch, heads, tokens, tokens], np.int64),
                                     "eshape"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "low"),
             numpy_helper.from_array(np.array([batch * heads, tokens * tokens], np.int64),
                                     "oshape")]
    nodes = [h.make_node("Reshape", ["mask", "mshape"], ["m4"]),
             h.make_node("Cast", ["m4"], ["mb"], to=BOOL),
             h.make_node("And", ["causal", "mb"], ["both"]),
             h.make_node("Expand", ["both", "eshape"], ["full"]),
             h.make_node("Where", ["full", "zero", "low"], ["bias"]),
             h.make_node("Add", ["scores", "bias"], ["masked"]),
             h.make_node("Softmax", ["masked"], ["probs"], axis=-1),
             h.make_node("Reshape", ["probs", "oshape"], ["out"])]
    return _model(nodes, [h.make_tensor_value_info("mask", mask_type, [batch, tokens]),
                          h.make_tensor_value_info("scores", F32,
                                                   [batch, heads, tokens, tokens])],
                  [h.make_tensor_value_info("out", F32, [batch * heads, tokens * tokens])],
                  inits)


@pytest.mark.parametrize("mask_type,dtype", [(I64, np.int64), (I32, np.int32),
                                             (BOOL, np.bool_), (F32, np.float32)])
@pytest.mark.parametrize("batch,heads,tokens", [(1, 2, 7), (3, 1, 5)])
def test_mask_path_is_native(mask_type: int, dtype: type, batch: int, heads: int,
                             tokens: int) -> None:
    model = _mask_model(mask_type, batch, heads, tokens)
    rng = np.random.default_rng(tokens)

    def feeds() -> dict[str, np.ndarray]:
        mask = rng.integers(0, 2, (batch, tokens))
        mask[:, 0] = 1              # every row keeps one position, as real masks do
        if dtype is np.float32:
            mask = mask * rng.choice([1.0, -0.5, 3.0], mask.shape)   # nonzero is true
        return {"mask": mask.astype(dtype),
                "scores": rng.standard_normal((batch, heads, tokens, tokens)).astype(np.float32)}
    compiled = planned_model(model, feeds())
    assert _python_steps(compiled) == []
    plan = compiled.specialiser.latest()
    assert len(plan.sequences) == 1, plan.describe()
    kinds = {s.step.node.op_type: s.kind for s in plan.steps}
    assert kinds["Where"] == kinds["And"] == kinds["Expand"] == "broadcast kernel"
    for _ in range(3):        # fresh values through the same plan
        _check(compiled, model, feeds())


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_ops_broadcast(op: str) -> None:
    model = _model([h.make_node(op, ["a", "b"], ["y"]), h.make_node("Not", ["y"], ["z"]),
                    h.make_node("Cast", ["z"], ["w"], to=F32),
                    h.make_node("Mul", ["w", "x"], ["out"])],
                   [h.make_tensor_value_info("a", BOOL, [3, 1, 5]),
                    h.make_tensor_value_info("b", BOOL, [4, 1]),
                    h.make_tensor_value_info("x", F32, [3, 4, 5])],
                   [h.make_tensor_value_info("out", F32, [3, 4, 5]),
                    h.make_tensor_value_info("y", BOOL, [3, 4, 5])])
    rng = np.random.default_rng(3)

    def feeds() -> dict[str, np.ndarray]:
        return {"a": rng.integers(0, 2, (3, 1, 5)).astype(bool),
                "b": rng.integers(0, 2, (4, 1)).astype(bool),
                "x": rng.standard_normal((3, 4, 5)).astype(np.float32)}
    compiled = planned_model(model, feeds())
    assert _python_steps(compiled) == []
    for _ in range(2):
        _check(compiled, model, feeds())


@pytest.mark.parametrize("op", ["Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"])
@pytest.mark.parametrize("dtype,kind", [(np.int64, I64), (np.float32, F32), (np.int32, I32)])
def test_comparisons_broadcast(op: str, dtype: type, kind: int) -> None:
    """DIN's history mask: positions ``arange(L)`` (1, L) compared with each row's length
    (B, 1), then a Where; every step a compiled broadcast kernel. Float inputs with NaN
    compare false, as onnxruntime's do."""
    positions = numpy_helper.from_array(np.arange(6, dtype=dtype).reshape(1, 6), "positions")
    model = _model([h.make_node(op, ["positions", "length"], ["mask"]),
                    h.make_node("Where", ["mask", "x", "zero"], ["out"])],
                   [h.make_tensor_value_info("length", kind, [4, 1]),
                    h.make_tensor_value_info("x", F32, [4, 6])],
                   [h.make_tensor_value_info("out", F32, [4, 6]),
                    h.make_tensor_value_info("mask", BOOL, [4, 6])],
                   [positions, numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    rng = np.random.default_rng(4)

    def feeds() -> dict[str, np.ndarray]:
        length = rng.integers(0, 7, (4, 1)).astype(dtype)
        if dtype == np.float32:
            length[0, 0] = np.nan
        return {"length": length, "x": rng.standard_normal((4, 6)).astype(np.float32)}
    compiled = planned_model(model, feeds())
    assert _python_steps(compiled) == []
    for _ in range(2):
        _check(compiled, model, feeds())


def test_a_comparison_of_two_dtypes_has_no_broadcast_kernel() -> None:
    out = np.zeros((2, 3), np.bool_)
    assert ta.api.broadcast_call("lt", [np.zeros((2, 3), np.int64), np.zeros(3, np.int64)],
                                 out, "t") is not None
    assert ta.api.broadcast_call("lt", [np.zeros((2, 3), np.int64), np.zeros(3, np.int32)],
                                 out, "t") is None
    assert ta.api.broadcast_call("eq", [np.zeros(3), np.zeros(3)], np.zeros(3), "t") is None


@pytest.mark.parametrize("source,target", [(np.int64, I32), (np.int32, I64), (np.int64, F32),
                                           (np.bool_, I64), (np.float32, BOOL),
                                           (np.float64, F32)])
def test_casts_match_onnxruntime(source: type, target: int) -> None:
    model = _model([h.make_node("Cast", ["x"], ["y"], to=target),
                    h.make_node("Identity", ["y"], ["out"])],
                   [h.make_tensor_value_info("x", onnx.helper.np_dtype_to_tensor_dtype(
                       np.dtype(source)), [2, 9])],
                   [h.make_tensor_value_info("out", target, [2, 9])])
    rng = np.random.default_rng(9)

    def feeds() -> dict[str, np.ndarray]:
        if source in (np.float32, np.float64):
            x = rng.choice([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, 1e-30], (2, 9))
        elif source is np.bool_:
            x = rng.integers(0, 2, (2, 9))
        else:
            # past int32 in the int64 case, so a narrowing cast must wrap as onnxruntime's
            x = rng.integers(-2**31 if source is np.int32 else -2**40,
                             2**31 - 1 if source is np.int32 else 2**40, (2, 9))
        return {"x": x.astype(source)}
    compiled = planned_model(model, feeds())
    assert _python_steps(compiled) == []
    for _ in range(2):
        _check(compiled, model, feeds())


def test_float_to_int_cast_stays_generic() -> None:
    """A float to integer Cast is undefined in C for values out of range: not a kernel."""
    model = _model([h.make_node("Cast", ["x"], ["y"], to=I64),
                    h.make_node("Identity", ["y"], ["out"])],
                   [h.make_tensor_value_info("x", F32, [6])],
                   [h.make_tensor_value_info("out", I64, [6])])
    feeds = {"x": np.array([-2.7, -0.5, 0.0, 0.9, 3.5, 1e6], np.float32)}
    compiled = planned_model(model, feeds)
    assert "Cast" in _python_steps(compiled)
    _check(compiled, model, feeds)


def test_reshape_to_graph_output_is_a_copy() -> None:
    """A Reshape (and an Unsqueeze) writing graph outputs: compiled copies, not Python."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((5, 3))
                                .astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1], np.int64), "shape")
    axes = numpy_helper.from_array(np.array([0, 3], np.int64), "axes")
    model = _model([h.make_node("MatMul", ["x", "w"], ["y"]),
                    h.make_node("Reshape", ["y", "shape"], ["flat"]),
                    h.make_node("Unsqueeze", ["y", "axes"], ["wide"])],
                   [h.make_tensor_value_info("x", F32, [7, 5])],
                   [h.make_tensor_value_info("flat", F32, [21]),
                    h.make_tensor_value_info("wide", F32, [1, 7, 3, 1])], [w, shape, axes])
    rng = np.random.default_rng(1)
    compiled = planned_model(model, {"x": rng.standard_normal((7, 5)).astype(np.float32)})
    kinds = {s.step.node.op_type: s.kind for s in compiled.specialiser.latest().steps}
    assert kinds["Reshape"] == kinds["Unsqueeze"] == "broadcast kernel"
    for _ in range(2):
        _check(compiled, model, {"x": rng.standard_normal((7, 5)).astype(np.float32)})


def test_broadcast_call_refuses_what_it_cannot_do() -> None:
    out = np.zeros((2, 3), np.float32)
    assert ta.api.broadcast_call("cast", [np.zeros((2, 3), np.float32)], out, "t") is not None
    # float to integer, a non-broadcastable shape, rank 5, a logical op into floats, int8
    assert ta.api.broadcast_call("cast", [np.zeros(3, np.float32)],
                                 np.zeros(3, np.int64), "t") is None
    assert ta.api.broadcast_call("cast", [np.zeros(2, np.float32)], out, "t") is None
    assert ta.api.broadcast_call("cast", [np.zeros((1,) * 5, np.float32)],
                                 np.zeros((1,) * 5, np.float32), "t") is None
    assert ta.api.broadcast_call("and", [np.zeros(3, bool), np.zeros(3, bool)],
                                 np.zeros(3, np.float32), "t") is None
    assert ta.api.broadcast_call("cast", [np.zeros(3, np.int8)], np.zeros(3, np.int8),
                                 "t") is None


def test_broadcast_where_selects_without_mixing() -> None:
    """Where reads only the branch it picks: an infinite other branch does not leak in."""
    cond = np.array([[True], [False]])
    a = np.array([1.0, np.inf, 3.0], np.float32)
    b = np.array(-np.inf, np.float32)
    out = np.zeros((2, 3), np.float32)
    call = ta.api.broadcast_call("where", [cond, a, b], out, "t")
    assert call is not None
    call()
    np.testing.assert_array_equal(out, np.where(cond, a, b))
