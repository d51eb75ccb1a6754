"""Whole models built with onnx.helper, run by tensoralg.onnx and compared with onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _weights(rng, **shapes):
    return [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
            for name, shape in shapes.items()]


def _model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "model", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def mlp(rng):
    """Gemm -> Relu -> Gemm; the first layer is large enough to go to BLAS."""
    nodes = [helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], transB=1, name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "W2", "b2"], ["y"], alpha=0.5, beta=2.0,
                              name="fc2")]
    inits = _weights(rng, W1=(64, 48), b1=(64,), W2=(64, 3), b2=(3,))
    return _model(nodes, [helper.make_tensor_value_info("x", F32, ["N", 48])],
                  [helper.make_tensor_value_info("y", F32, ["N", 3])], inits), \
        {"x": rng.standard_normal((16, 48)).astype(np.float32)}


def factorization_machine(rng):
    """y = w0 + x.w + 0.5 * sum_f((xV)_f^2 - (x^2)(V^2)_f)."""
    h = helper
    nodes = [h.make_node("MatMul", ["x", "w"], ["linear"]),
             h.make_node("Add", ["linear", "w0"], ["first"]),
             h.make_node("MatMul", ["x", "V"], ["xv"]),
             h.make_node("Mul", ["xv", "xv"], ["xv2"]),
             h.make_node("Mul", ["x", "x"], ["x2"]),
             h.make_node("Mul", ["V", "V"], ["v2"]),
             h.make_node("MatMul", ["x2", "v2"], ["x2v2"]),
             h.make_node("Sub", ["xv2", "x2v2"], ["diff"]),
             h.make_node("ReduceSum", ["diff", "axes"], ["pair"], keepdims=1),
             h.make_node("Mul", ["pair", "half"], ["second"]),
             h.make_node("Add", ["first", "second"], ["logit"]),
             h.make_node("Sigmoid", ["logit"], ["y"])]
    inits = _weights(rng, w=(10, 1), w0=(1,), V=(10, 4)) + [
        numpy_helper.from_array(np.array([1], np.int64), "axes"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 10])],
                  [h.make_tensor_value_info("y", F32, ["N", 1])], inits), \
        {"x": rng.random((8, 10)).astype(np.float32)}


def two_tower(rng):
    """User and item towers over Gather embeddings, scored by a dot product."""
    h = helper
    nodes = [h.make_node("Gather", ["user_table", "user"], ["ue"]),
             h.make_node("Gemm", ["ue", "Wu", "bu"], ["uh"]),
             h.make_node("Tanh", ["uh"], ["u"]),
             h.make_node("Gather", ["item_table", "item"], ["ie"]),
             h.make_node("MatMul", ["ie", "Wi"], ["ih"]),
             h.make_node("Add", ["ih", "bi"], ["ihb"]),
             h.make_node("Relu", ["ihb"], ["i"]),
             h.make_node("Mul", ["u", "i"], ["ui"]),
             h.make_node("ReduceSum", ["ui", "axes"], ["score"], keepdims=0),
             h.make_node("Sigmoid", ["score"], ["y"])]
    inits = _weights(rng, user_table=(50, 8), Wu=(8, 6), bu=(6,), item_table=(40, 8),
                     Wi=(8, 6), bi=(6,)) + [
        numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    feeds = {"user": rng.integers(0, 50, 12).astype(np.int64),
             "item": rng.integers(-40, 40, 12).astype(np.int64)}
    return _model(nodes, [h.make_tensor_value_info("user", I64, ["N"]),
                          h.make_tensor_value_info("item", I64, ["N"])],
                  [h.make_tensor_value_info("y", F32, ["N"])], inits), feeds


def dlrm(rng):
    """Embeddings + bottom MLP, pairwise dot interactions via MatMul, top MLP."""
    h = helper
    d = 4
    nodes = [h.make_node("Gemm", ["dense", "B1", "c1"], ["b1"]),
             h.make_node("Relu", ["b1"], ["r1"]),
             h.make_node("Gemm", ["r1", "B2", "c2"], ["b2"]),
             h.make_node("Relu", ["b2"], ["bottom"])]
    parts = ["bottom3"]
    nodes.append(h.make_node("Unsqueeze", ["bottom", "one"], ["bottom3"]))
    for t in range(3):
        nodes += [h.make_node("Gather", ["ids", f"col{t}"], [f"id{t}"], axis=1),
                  h.make_node("Gather", [f"E{t}", f"id{t}"], [f"e{t}"]),
                  h.make_node("Unsqueeze", [f"e{t}", "one"], [f"e3_{t}"])]
        parts.append(f"e3_{t}")
    nodes += [h.make_node("Concat", parts, ["feats"], axis=1),
              h.make_node("Transpose", ["feats"], ["featsT"], perm=[0, 2, 1]),
              h.make_node("MatMul", ["feats", "featsT"], ["z"]),
              h.make_node("Flatten", ["z"], ["zf"], axis=1),
              h.make_node("Concat", ["bottom", "zf"], ["top_in"], axis=1),
              h.make_node("Gemm", ["top_in", "T1", "t1"], ["a1"]),
              h.make_node("Relu", ["a1"], ["ar1"]),
              h.make_node("Gemm", ["ar1", "T2", "t2"], ["a2"]),
              h.make_node("Sigmoid", ["a2"], ["y"])]
    inits = _weights(rng, B1=(5, 8), c1=(8,), B2=(8, d), c2=(d,), E0=(20, d), E1=(15, d),
                     E2=(10, d), T1=(d + 16, 8), t1=(8,), T2=(8, 1), t2=(1,))
    inits += [numpy_helper.from_array(np.array([1], np.int64), "one")]
    inits += [numpy_helper.from_array(np.array(t, np.int64), f"col{t}") for t in range(3)]
    ids = np.stack([rng.integers(0, n, 6) for n in (20, 15, 10)], axis=1).astype(np.int64)
    feeds = {"dense": rng.standard_normal((6, 5)).astype(np.float32), "ids": ids}
    return _model(nodes, [h.make_tensor_value_info("dense", F32, ["N", 5]),
                          h.make_tensor_value_info("ids", I64, ["N", 3])],
                  [h.make_tensor_value_info("y", F32, ["N", 1])], inits), feeds


def assorted(rng):
    """BatchNormalization, Reshape from Shape (folded at level 1), Softmax, Clip, Where, Cast."""
    h = helper
    nodes = [h.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["bn"],
                         epsilon=1e-3),
             h.make_node("Shape", ["bn"], ["shape"]),
             h.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
             h.make_node("Concat", ["batch", "minus1"], ["newshape"], axis=0),
             h.make_node("Reshape", ["bn", "newshape"], ["flat"]),
             h.make_node("Softmax", ["flat"], ["soft"], axis=-1),
             h.make_node("LogSoftmax", ["flat"], ["logsoft"], axis=0),
             h.make_node("Clip", ["flat", "lo", "hi"], ["clipped"]),
             h.make_node("Greater", ["flat", "zero_f"], ["positive"]),
             h.make_node("Where", ["positive", "clipped", "soft"], ["mixed"]),
             h.make_node("ReduceMean", ["mixed"], ["mean_out"], axes=[1], keepdims=1),
             h.make_node("ReduceMax", ["logsoft"], ["max_out"], axes=[1], keepdims=0),
             h.make_node("Dropout", ["mean_out"], ["dropped"]),
             h.make_node("Cast", ["positive"], ["pos_f"], to=F32),
             h.make_node("LeakyRelu", ["flat"], ["leaky"], alpha=0.2),
             h.make_node("Add", ["leaky", "pos_f"], ["sum_out"])]
    inits = _weights(rng, scale=(3,), bias=(3,), mean=(3,)) + [
        numpy_helper.from_array(rng.random(3).astype(np.float32) + 0.5, "var"),
        numpy_helper.from_array(np.array([0], np.int64), "zero"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
        numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
        numpy_helper.from_array(np.array(0.5, np.float32), "hi"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero_f")]
    outputs = [h.make_tensor_value_info("dropped", F32, [2, 1]),
               h.make_tensor_value_info("max_out", F32, [2]),
               h.make_tensor_value_info("sum_out", F32, [2, 60])]
    return _model(nodes, [h.make_tensor_value_info("x", F32, [2, 3, 4, 5])], outputs,
                  inits, opset=14), {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)}


def neumf(rng):
    """NCF/NeuMF: GMF (product of user and item embeddings) and an MLP tower, concatenated."""
    h = helper
    d = 4
    nodes = [h.make_node("Gather", ["U1", "user"], ["u1"]),
             h.make_node("Gather", ["I1", "item"], ["i1"]),
             h.make_node("Mul", ["u1", "i1"], ["gmf"]),
             h.make_node("Gather", ["U2", "user"], ["u2"]),
             h.make_node("Gather", ["I2", "item"], ["i2"]),
             h.make_node("Concat", ["u2", "i2"], ["mlp_in"], axis=1),
             h.make_node("Gemm", ["mlp_in", "W1", "b1"], ["h1"]),
             h.make_node("Relu", ["h1"], ["r1"]),
             h.make_node("MatMul", ["r1", "W2"], ["m2"]),
             h.make_node("Add", ["m2", "b2"], ["h2"]),
             h.make_node("Relu", ["h2"], ["r2"]),
             h.make_node("Concat", ["gmf", "r2"], ["both"], axis=1),
             h.make_node("Gemm", ["both", "W3", "b3"], ["logit"]),
             h.make_node("Sigmoid", ["logit"], ["y"])]
    inits = _weights(rng, U1=(30, d), I1=(20, d), U2=(30, d), I2=(20, d), W1=(2 * d, 16),
                     b1=(16,), W2=(16, 8), b2=(8,), W3=(d + 8, 1), b3=(1,))
    feeds = {"user": rng.integers(0, 30, 7).astype(np.int64),
             "item": rng.integers(0, 20, 7).astype(np.int64)}
    return _model(nodes, [h.make_tensor_value_info("user", I64, ["N"]),
                          h.make_tensor_value_info("item", I64, ["N"])],
                  [h.make_tensor_value_info("y", F32, ["N", 1])], inits), feeds


def wide_deep(rng):
    """Wide (a multi-hot input times a weight column) plus deep (embeddings + dense -> MLP)."""
    h = helper
    d, width = 4, 80
    nodes = [h.make_node("MatMul", ["wide", "Ww"], ["w"])]
    for t in range(2):
        nodes += [h.make_node("Gather", ["cats", f"col{t}"], [f"c{t}"], axis=1),
                  h.make_node("Gather", [f"E{t}", f"c{t}"], [f"e{t}"])]
    nodes += [h.make_node("Concat", ["e0", "e1", "dense"], ["deep_in"], axis=1),
              h.make_node("Gemm", ["deep_in", "W1", "b1"], ["h1"]),
              h.make_node("Relu", ["h1"], ["r1"]),
              h.make_node("Gemm", ["r1", "W2", "b2"], ["deep"]),
              h.make_node("Add", ["w", "deep"], ["logit"]),
              h.make_node("Sigmoid", ["logit"], ["y"])]
    inits = _weights(rng, Ww=(width, 1), E0=(25, d), E1=(12, d), W1=(2 * d + 3, 16),
                     b1=(16,), W2=(16, 1), b2=(1,))
    inits += [numpy_helper.from_array(np.array(t, np.int64), f"col{t}") for t in range(2)]
    wide = np.zeros((9, width), np.float32)
    for row in wide:
        row[rng.choice(width, 5, replace=False)] = 1.0
    cats = np.stack([rng.integers(0, n, 9) for n in (25, 12)], axis=1).astype(np.int64)
    feeds = {"wide": wide, "dense": rng.standard_normal((9, 3)).astype(np.float32),
             "cats": cats}
    return _model(nodes, [h.make_tensor_value_info("wide", F32, ["N", width]),
                          h.make_tensor_value_info("dense", F32, ["N", 3]),
                          h.make_tensor_value_info("cats", I64, ["N", 2])],
                  [h.make_tensor_value_info("y", F32, ["N", 1])], inits), feeds


MODELS = {"mlp": mlp, "factorization_machine": factorization_machine, "two_tower": two_tower,
          "dlrm": dlrm, "neumf": neumf, "wide_deep": wide_deep, "assorted": assorted}


def _reference(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name, opt_level):
    model, feeds = MODELS[name](np.random.default_rng(7))
    expected = _reference(model, feeds)
    compiled = tonnx.load(model, opt_level=opt_level)
    got = compiled.run(feeds)
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key].dtype == value.dtype
        np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL, err_msg=key)


def test_inference_session_is_onnxruntime_shaped(tmp_path):
    model, feeds = two_tower(np.random.default_rng(1))
    path = tmp_path / "two_tower.onnx"
    onnx.save(model, path)
    session = tonnx.InferenceSession(str(path))
    (y,) = session.run(None, feeds)
    (y_ort,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds)
    np.testing.assert_allclose(y, y_ort, rtol=RTOL, atol=ATOL)
    assert [v.name for v in session.get_inputs()] == ["user", "item"]
    assert session.run(["y"], feeds)[0].shape == (12,)


def test_call_inputs_outputs_and_print_ir(capsys):
    model, feeds = mlp(np.random.default_rng(2))
    compiled = tonnx.load(model, opt_level=2)
    y = compiled(feeds["x"])
    assert y.shape == (16, 3)
    assert [(v.name, v.shape, str(v.dtype)) for v in compiled.inputs] == \
        [("x", ("N", 48), "float32")]
    assert compiled.outputs[0].name == "y"
    compiled.print_ir()
    text = capsys.readouterr().out
    assert "fusion: 2 node(s) into 1 statement(s)" in text
    # fc1 goes to BLAS; its bias and the Relu are one epilogue statement
    assert "fused_relu: Fused(x, W1, b1) -> r  :  BLAS (dense 16x48x64) then:" in text
    assert "Y(i,j) = max((A(i,j) + B(j)), 0)" in text
    assert "Y(i,j) = 0.5 * A(i,k) * B(k,j) + 2.0 * C(j)" in text   # fc2: a kernel


def test_profile_table_sorted_with_percentages():
    model, feeds = dlrm(np.random.default_rng(3))
    profile = tonnx.load(model).profile(feeds, repeat=2)
    seconds = [row.seconds for row in profile.rows]
    assert seconds == sorted(seconds, reverse=True)
    assert abs(sum(row.percent for row in profile.rows) - 100.0) < 1e-6
    text = str(profile)
    assert text.splitlines()[0].split()[:3] == ["node", "op", "time"]
    assert "total" in text.splitlines()[-2]
    assert "intermediate memory" in text.splitlines()[-1]
    assert 0 < profile.peak_bytes <= profile.total_bytes


def test_level_one_folds_constants_and_removes_dead_nodes():
    h = helper
    nodes = [h.make_node("Add", ["w", "w"], ["w2"]),             # constant: folded at load
             h.make_node("Shape", ["x"], ["s"]),                  # static shape: folded
             h.make_node("Reshape", ["x", "s"], ["x2"]),
             h.make_node("Mul", ["x2", "w2"], ["y"]),
             h.make_node("Exp", ["x"], ["unused"])]               # dead
    inits = [numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, [2, 3])],
                   [h.make_tensor_value_info("y", F32, [2, 3])], inits)
    x = np.ones((2, 3), np.float32)
    level0 = tonnx.load(model, opt_level=0)
    level1 = tonnx.load(model, opt_level=1)
    assert [s.node.op_type for s in level1.executor.steps] == ["Reshape", "Mul"]
    assert len(level0.executor.steps) == 5
    np.testing.assert_array_equal(level0.run({"x": x})["y"], level1.run({"x": x})["y"])


def test_erf_and_gelu_accuracy():
    h = helper
    x = np.linspace(-6, 6, 2001).astype(np.float64)
    nodes = [h.make_node("Erf", ["x"], ["e"]), h.make_node("Gelu", ["x"], ["g"])]
    model = _model(nodes, [h.make_tensor_value_info("x", TensorProto.DOUBLE, [2001])],
                   [h.make_tensor_value_info("e", TensorProto.DOUBLE, [2001]),
                    h.make_tensor_value_info("g", TensorProto.DOUBLE, [2001])], [], opset=20)
    out = tonnx.load(model).run({"x": x})
    from math import erf
    exact = np.array([erf(v) for v in x])
    assert np.max(np.abs(out["e"] - exact)) < 1e-6
    assert np.max(np.abs(out["g"] - 0.5 * x * (1 + np.array([erf(v / 2**0.5) for v in x])))) < 1e-5
