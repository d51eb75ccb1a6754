"""The pieces of exported transformers (BERT, GPT-2) on the compiled path of a level-3 plan,
against onnxruntime: a projection ``(batch, tokens, hidden) @ W`` with its bias and residual as
one 2-D product on the generated GEMM (``fusion.flattened_head``), LayerNormalization as a
chain of prebound kernels, the ``where(isnan(x), 0, x)`` guard after Softmax fused into one
statement, and GPT-2's tanh GELU as one fused statement.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.plan.step_base import parts_of  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def _model(nodes, inputs, output_shape, constants=(), opset=17):
    graph = helper.make_graph(
        nodes, "transformer",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(a.shape))
         for name, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(output_shape))],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _check(nodes, inputs, constants=(), opt_level=3, opset=17):
    """Outputs against onnxruntime over three runs (the third through the static plan);
    returns the model."""
    probe = _model(nodes, inputs, [], constants, opset)
    probe.graph.output[0].type.tensor_type.ClearField("shape")
    session = ort.InferenceSession(probe.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, inputs)[0]
    model = tonnx.load(_model(nodes, inputs, want.shape, constants, opset),
                       opt_level=opt_level)
    for run in range(3):
        got = model.run(inputs)["y"]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"run {run + 1}")
    return model


def _steps(model):
    """(op, kind, native) of every step of the latest static plan."""
    return [(s.step.node.op_type, s.kind, parts_of(s.run) is not None)
            for s in model.specialiser.latest().steps]


def _rand(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _projection(residual_lead, batch=2, tokens=16, hidden=64, out=64):
    # x reaches the MatMul through a node, as hidden states do (a MatMul of a graph input may
    # take it in CSR: the multi-hot path).
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["p"]),
             helper.make_node("Add", ["b", "p"], ["q"]),
             helper.make_node("Add", ["q", "r"], ["y"])]
    inputs = {"x": _rand((batch, tokens, hidden)), "r": _rand((*residual_lead, out), 1)}
    constants = [("w", _rand((hidden, out), 2, 0.3)), ("b", _rand((out,), 3))]
    return nodes, inputs, constants


@pytest.mark.parametrize("batch", [1, 3])
def test_nd_projection_is_one_2d_product_on_the_generated_gemm(batch):
    nodes, inputs, constants = _projection((batch, 16), batch=batch, out=48)
    model = _check(nodes, inputs, constants)
    steps = _steps(model)
    assert steps[-1] == ("Fused", "generated GEMM + kernel", True), steps


def test_nd_projection_with_bias_only_is_one_gemm_call():
    nodes = [helper.make_node("Relu", ["x"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["p"]),
             helper.make_node("Add", ["p", "b"], ["y"])]
    inputs = {"x": _rand((2, 16, 64))}
    constants = [("w", _rand((64, 40), 2, 0.3)), ("b", _rand((40,), 3))]
    model = _check(nodes, inputs, constants)
    assert _steps(model)[-1] == ("Fused", "generated GEMM", True), _steps(model)


@pytest.mark.parametrize("opt_level", [2, 3])
def test_nd_projection_epilogue_broadcast_over_some_leading_dims_stays_exact(opt_level):
    # The residual (1, 5, 24) broadcasts over the batch of 3 only: no 2-D view of it, so the
    # product runs on its own, and the answer must not change.
    nodes, inputs, constants = _projection((1, 16), batch=3)
    _check(nodes, inputs, constants, opt_level=opt_level)


def test_nd_projection_at_level_2_notes_the_flattened_product():
    nodes, inputs, constants = _projection((2, 16))
    model = _check(nodes, inputs, constants, opt_level=2)
    assert "leading dimensions flattened" in model.ir()


def test_flattened_head_views():
    from tensoralg.onnx.frontend.graph import Node
    from tensoralg.onnx.passes.fusion import Program, flattened_head

    mm = Node("m", "MatMul", ("a", "w"), ("p",), {}, 13, None)
    add = Node("s", "Add", ("p", "r"), ("y",), {}, 14, None)
    program = Program((mm, add), ("a", "w", "r"), "y", mm)
    a, w = np.ones((2, 3, 4)), np.ones((4, 5))
    flat, shape = flattened_head(program, {"a": a, "w": w, "r": np.ones((5,))})
    assert flat["a"].shape == (6, 4) and flat["r"].shape == (1, 5) and shape == (2, 3, 5)
    assert flattened_head(program, {"a": a, "w": w, "r": np.ones((1, 3, 5))}) is None
    assert flattened_head(program, {"a": np.ones((3, 4)), "w": w, "r": np.ones(5)}) is None


@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_normalization_is_a_native_kernel_chain(with_bias):
    names = ["x", "s", "b"] if with_bias else ["x", "s"]
    nodes = [helper.make_node("LayerNormalization", names, ["y"], axis=-1, epsilon=1e-12)]
    constants = [("s", _rand((48,), 1)), ("b", _rand((48,), 2))][:len(names) - 1]
    model = _check(nodes, {"x": _rand((2, 9, 48), 0, 3.0) + 5}, constants)
    assert _steps(model) == [("LayerNormalization", "kernel chain", True)]


def _attention_tail(guard=True):
    """Softmax of scores plus a mask, guarded by ``where(isnan(p), 0, p)`` as exported
    attention does."""
    nodes = [helper.make_node("Add", ["x", "m"], ["s"]),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1)]
    if guard:
        nodes += [helper.make_node("IsNaN", ["p"], ["n"]),
                  helper.make_node("Where", ["n", "zero", "p"], ["y"])]
    else:
        nodes[-1].output[0] = "y"
    return nodes


def test_isnan_guard_after_softmax_is_one_fused_statement():
    x = _rand((2, 2, 6, 6))
    x[0, 1, 2, :] = np.nan            # a row of NaN: the guard's reason to exist
    mask = np.zeros((6, 6), np.float32)
    mask[:, 4:] = -1e9
    model = _check(_attention_tail(), {"x": x}, [("m", mask), ("zero", np.float32(0))])
    ops = [op for op, _, _ in _steps(model)]
    assert "IsNaN" not in ops and "Where" not in ops, ops
    assert all(native for _, _, native in _steps(model)), _steps(model)
    assert "where(ne(" in model.ir()


@pytest.mark.parametrize("opt_level", [2, 3])
def test_batched_scores_with_mask_run_blas_then_one_prebound_kernel(opt_level):
    # Q K^T per head (batched, BLAS-sized), scaled and masked: the dynamo export's fused
    # MatMul -> Mul -> Add before the Softmax.
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["t"]),
             helper.make_node("Add", ["t", "m"], ["y"])]
    inputs = {"q": _rand((2, 2, 32, 64)), "k": _rand((2, 2, 64, 32), 1)}
    mask = np.triu(np.full((32, 32), -1e9, np.float32), 1)
    model = _check(nodes, inputs, [("scale", np.float32(0.125)), ("m", mask)],
                   opt_level=opt_level)
    if opt_level == 3:
        assert _steps(model) == [("Fused", "BLAS + kernel", False)], _steps(model)


def test_where_on_a_bool_input_is_not_fused():
    nodes = [helper.make_node("Greater", ["x", "zero"], ["c"]),
             helper.make_node("Where", ["c", "x", "neg"], ["w"]),
             helper.make_node("Mul", ["w", "two"], ["y"])]
    model = _check(nodes, {"x": _rand((4, 8))},
                   [("zero", np.float32(0)), ("neg", np.float32(-1)), ("two", np.float32(2))])
    assert any(step.node.op_type == "Where" for step in model.executor.steps)


def test_gpt2_gelu_tanh_chain_against_onnxruntime():
    # GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), node by node.
    nodes = [helper.make_node("Mul", ["x", "x"], ["x2"]),
             helper.make_node("Mul", ["x2", "x"], ["x3"]),
             helper.make_node("Mul", ["x3", "c"], ["cx3"]),
             helper.make_node("Add", ["x", "cx3"], ["inner"]),
             helper.make_node("Mul", ["inner", "k"], ["z"]),
             helper.make_node("Tanh", ["z"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["u"]),
             helper.make_node("Mul", ["x", "half"], ["hx"]),
             helper.make_node("Mul", ["hx", "u"], ["y"])]
    constants = [("c", np.float32(0.044715)), ("k", np.float32(0.7978845608)),
                 ("one", np.float32(1)), ("half", np.float32(0.5))]
    model = _check(nodes, {"x": _rand((3, 7, 40), 0, 3.0)}, constants)
    assert _steps(model) == [("Fused", "kernel", True)]
