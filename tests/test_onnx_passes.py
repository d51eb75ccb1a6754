"""Opt levels 2 and 3: fusion, re-association, embedding bags, sparse weights, memory plan,
print_ir. Every model is checked at every opt level against level 0 and onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, numpy_helper  # noqa: E402
from onnx import helper as h  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, inits, opset=17, sparse=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, inits, sparse_initializer=list(sparse))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def check_all_levels(model, feeds, **load_options):
    """Outputs at opt levels 0..3 equal level 0 and onnxruntime; returns the loaded models."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    loaded = {}
    for level in (0, 1, 2, 3):
        compiled = tonnx.load(model, opt_level=level, **load_options)
        got = compiled.run(feeds)
        for name, value in expected.items():
            assert got[name].dtype == value.dtype, (level, name)
            np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=ATOL,
                                       err_msg=f"level {level} {name}")
            if level:
                np.testing.assert_allclose(got[name], loaded[0][1][name], rtol=RTOL, atol=ATOL)
        loaded[level] = (compiled, got)
    return {level: m for level, (m, _) in loaded.items()}


def _ops(compiled):
    return [s.node.op_type for s in compiled.executor.steps]


def test_elementwise_chain_is_one_statement():
    rng = np.random.default_rng(0)
    nodes = [h.make_node("Mul", ["x", "s"], ["xs"]), h.make_node("Add", ["xs", "b"], ["xb"]),
             h.make_node("Relu", ["xb"], ["r"]), h.make_node("Sub", ["r", "x"], ["d"]),
             h.make_node("Neg", ["d"], ["y"])]
    inits = [_const("s", rng.standard_normal(5).astype(np.float32)),
             _const("b", rng.standard_normal(5).astype(np.float32))]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 5])],
                   [h.make_tensor_value_info("y", F32, ["N", 5])], inits)
    levels = check_all_levels(model, {"x": rng.standard_normal((4, 5)).astype(np.float32)})
    assert _ops(levels[2]) == ["Fused"]
    assert "Y(i,j) = (-(max(((A(i,j) * B(j)) + C(j)), 0) - A(i,j)))" in levels[2].ir()


def test_gemm_bias_and_activation_fused_into_contraction():
    rng = np.random.default_rng(1)
    nodes = [h.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1, alpha=0.5),
             h.make_node("Sigmoid", ["g"], ["y"])]
    inits = [_const("W", rng.standard_normal((6, 8)).astype(np.float32)),
             _const("b", rng.standard_normal(6).astype(np.float32))]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 8])],
                   [h.make_tensor_value_info("y", F32, ["N", 6])], inits)
    levels = check_all_levels(model, {"x": rng.standard_normal((3, 8)).astype(np.float32)})
    assert _ops(levels[2]) == ["Fused"]
    assert "Y(i,j) = sigmoid((0.5 * sum(k, A(i,k) * B(j,k)) + C(j)))" in levels[2].ir()


def test_matmul_epilogue_fused_and_graph_output_not_absorbed():
    rng = np.random.default_rng(2)
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
             h.make_node("Tanh", ["a"], ["y"]), h.make_node("Exp", ["y"], ["z"])]
    inits = [_const("W", rng.standard_normal((4, 3)).astype(np.float32)),
             _const("b", rng.standard_normal(3).astype(np.float32))]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 4])],
                   [h.make_tensor_value_info("y", F32, ["N", 3]),
                    h.make_tensor_value_info("z", F32, ["N", 3])], inits)
    levels = check_all_levels(model, {"x": rng.standard_normal((2, 4)).astype(np.float32)})
    assert _ops(levels[2]) == ["Fused", "Exp"]   # y is a graph output: Exp stays apart


def test_integer_chain_runs_original_nodes():
    nodes = [h.make_node("Add", ["x", "x"], ["a"]), h.make_node("Div", ["a", "three"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", I64, [5])],
                   [h.make_tensor_value_info("y", I64, [5])],
                   [_const("three", np.array(3, np.int64))])
    levels = check_all_levels(model, {"x": np.array([-4, -1, 0, 2, 7], np.int64)})
    assert "nodes run one by one" in levels[2].ir()


def test_matmul_chain_reassociated_by_cost():
    rng = np.random.default_rng(3)
    nodes = [h.make_node("MatMul", ["x", "B"], ["t"]), h.make_node("MatMul", ["t", "C"], ["y"])]
    inits = [_const("B", rng.standard_normal((16, 32)).astype(np.float32)),
             _const("C", rng.standard_normal((32, 4)).astype(np.float32))]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 16])],
                   [h.make_tensor_value_info("y", F32, ["N", 4])], inits)
    levels = check_all_levels(model, {"x": rng.standard_normal((5, 16)).astype(np.float32)})
    assert _ops(levels[2]) == ["Fused"]   # one MatMul of the input (a multi-hot candidate)
    assert "matmul re-association: 1 chain(s) folded" in levels[2].ir()


def _bag_model(reduce, keepdims, weighted=False, opset=17):
    nodes = [h.make_node("Gather", ["T", "ids"], ["e"])]
    src = "e"
    if weighted:
        nodes.append(h.make_node("Mul", ["w", "e"], ["we"]))
        src = "we"
    if opset >= 18 or reduce == "ReduceSum":
        nodes.append(h.make_node(reduce, [src, "axes"], ["y"], keepdims=keepdims))
    else:
        nodes.append(h.make_node(reduce, [src], ["y"], axes=[1], keepdims=keepdims))
    rng = np.random.default_rng(4)
    inits = [_const("T", rng.standard_normal((30, 6)).astype(np.float32)),
             _const("axes", np.array([1], np.int64))]
    inputs = [h.make_tensor_value_info("ids", I64, ["N", 5])]
    if weighted:
        inputs.append(h.make_tensor_value_info("w", F32, ["N", 5, 1]))
    out_shape = ["N", 1, 6] if keepdims else ["N", 6]
    model = _model(nodes, inputs, [h.make_tensor_value_info("y", F32, out_shape)], inits,
                   opset=opset)
    ids = rng.integers(-30, 30, (7, 5)).astype(np.int64)
    ids[0] = [3, 3, 3, 1, 3]                       # repeated ids in one bag
    feeds = {"ids": ids}
    if weighted:
        feeds["w"] = rng.random((7, 5, 1)).astype(np.float32)
    return model, feeds


@pytest.mark.parametrize("reduce, keepdims, weighted, opset", [
    ("ReduceSum", 0, False, 17), ("ReduceMean", 1, False, 17), ("ReduceMean", 0, False, 18),
    ("ReduceSum", 1, True, 17), ("ReduceMean", 0, True, 13)])
def test_embedding_bag_is_one_sparse_contraction(reduce, keepdims, weighted, opset):
    model, feeds = _bag_model(reduce, keepdims, weighted, opset)
    levels = check_all_levels(model, feeds)
    assert _ops(levels[2]) == ["EmbeddingBag"]
    plan = levels[2].ir()
    assert "Y(i,j) = S(i,k) * T(k,j)" in plan and "bag matrix in CSR" in plan


def test_multi_hot_matmul_is_a_bag():
    rng = np.random.default_rng(5)
    nodes = [h.make_node("MatMul", ["x", "T"], ["e"]), h.make_node("Relu", ["e"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 40])],
                   [h.make_tensor_value_info("y", F32, ["N", 64])],
                   [_const("T", rng.standard_normal((40, 64)).astype(np.float32))])
    x = (rng.random((6, 40)) < 0.1).astype(np.float32)
    levels = check_all_levels(model, {"x": x})
    assert "multi-hot input x in CSR" in levels[2].ir()
    assert "Y(i,j) = max((sum(k, A(i,k) * B(k,j))), 0)" in levels[2].ir()
    dense = rng.standard_normal((6, 40)).astype(np.float32)   # not multi-hot: dense MatMul
    np.testing.assert_allclose(levels[2].run({"x": dense})["y"],
                               levels[0].run({"x": dense})["y"], rtol=RTOL, atol=ATOL)


def test_narrow_multi_hot_table_stays_dense():
    """Scanning a dense multi-hot input into CSR costs more than a narrow product saves."""
    rng = np.random.default_rng(6)
    nodes = [h.make_node("MatMul", ["x", "T"], ["e"]), h.make_node("Relu", ["e"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 40])],
                   [h.make_tensor_value_info("y", F32, ["N", 8])],
                   [_const("T", rng.standard_normal((40, 8)).astype(np.float32))])
    levels = check_all_levels(model, {"x": (rng.random((6, 40)) < 0.1).astype(np.float32)})
    assert "multi-hot input x in CSR" not in levels[2].ir()


def _pruned_mlp(rng, zeros=0.9, batch=3):
    w1 = rng.standard_normal((64, 32)).astype(np.float32)
    w2 = rng.standard_normal((16, 64)).astype(np.float32)
    for w in (w1, w2):
        w[rng.random(w.shape) < zeros] = 0.0
    nodes = [h.make_node("MatMul", ["x", "W1"], ["m"]), h.make_node("Add", ["m", "b1"], ["a"]),
             h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Gemm", ["r", "W2", "b2"], ["y"], transB=1)]
    inits = [_const("W1", w1.T.copy()), _const("b1", rng.standard_normal(64).astype(np.float32)),
             _const("W2", w2), _const("b2", rng.standard_normal(16).astype(np.float32))]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 32])],
                   [h.make_tensor_value_info("y", F32, ["N", 16])], inits)
    return model, {"x": rng.standard_normal((batch, 32)).astype(np.float32)}


@pytest.mark.parametrize("batch, zeros, threshold, expected", [
    (1, 0.9, 0.7, "csc"), (3, 0.9, 0.7, "csc"),
    (40, 0.6, 0.5, "BLAS (dense 40x64x16)"),  # BLAS-sized and 40% dense: the dense weight wins
    (40, 0.75, 0.7, "[B: csr (ds)]"),         # 25% dense: the register-tiled kernel still wins
    (40, 0.9, 0.7, "[B: csr (ds)]"),          # transposed CSR kernel
])
def test_sparse_weights_at_level_three(batch, zeros, threshold, expected):
    model, feeds = _pruned_mlp(np.random.default_rng(6), zeros=zeros, batch=batch)
    levels = check_all_levels(model, feeds, sparse_weights=threshold)
    plan = levels[3].ir()
    assert f"sparse weights (>= {threshold:.0%} zeros): n0, n3" in plan
    assert _ops(levels[3]) == ["Fused", "Fused"]
    assert expected in plan


def test_sparse_weights_threshold_and_off():
    model, feeds = _pruned_mlp(np.random.default_rng(7), zeros=0.5)
    assert "sparse weights (>= 70% zeros): none" in tonnx.load(model, opt_level=3).ir()
    low = check_all_levels(model, feeds, sparse_weights=0.4)
    assert "n0, n3" in low[3].ir()
    off = tonnx.load(model, opt_level=3, sparse_weights=False)
    assert "sparse weights" not in off.ir() or "none" in off.ir()
    with pytest.raises(tonnx.ModelError.__mro__[1]):
        tonnx.load(model, opt_level=3, sparse_weights="yes")


def test_sparse_tensor_proto_initializer():
    rng = np.random.default_rng(8)
    dense = np.zeros((20, 6), np.float32)
    flat = rng.choice(dense.size, 12, replace=False)
    dense.reshape(-1)[flat] = rng.standard_normal(12).astype(np.float32)
    sparse = h.make_sparse_tensor(_const("W", dense.reshape(-1)[np.sort(flat)]),
                                  _const("W_idx", np.sort(flat).astype(np.int64)), [20, 6])
    model = _model([h.make_node("MatMul", ["x", "W"], ["y"])],
                   [h.make_tensor_value_info("x", F32, ["N", 20])],
                   [h.make_tensor_value_info("y", F32, ["N", 6])], [], sparse=[sparse])
    levels = check_all_levels(model, {"x": rng.standard_normal((4, 20)).astype(np.float32)})
    assert "csc" in levels[3].ir()


def test_profile_reports_peak_below_sum_of_intermediates():
    rng = np.random.default_rng(9)
    nodes = [h.make_node("Exp", ["x"], ["a"]), h.make_node("Log", ["a"], ["b"]),
             h.make_node("Sqrt", ["a"], ["c"]), h.make_node("Add", ["b", "c"], ["d"]),
             h.make_node("Tanh", ["d"], ["e"]), h.make_node("Sigmoid", ["e"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, [64, 64])],
                   [h.make_tensor_value_info("y", F32, [64, 64])], [])
    x = rng.random((64, 64)).astype(np.float32)
    for level in (0, 1):
        profile = tonnx.load(model, opt_level=level).profile({"x": x})
        assert 0 < profile.peak_bytes < profile.total_bytes
        assert profile.planned_bytes < profile.total_bytes
        assert "peak alive" in str(profile)


def test_print_ir_stages_and_environment(monkeypatch, capsys):
    model, feeds = _pruned_mlp(np.random.default_rng(10))
    compiled = tonnx.load(model, opt_level=3)
    compiled.run(feeds)
    passes = compiled.stage_text("passes")
    assert "== after fusion" not in passes and "== after sparse weights + fusion ==" in passes
    assert "Fused" in compiled.stage_text("sparse weights + fusion")
    assert "kernel ta_" in compiled.stage_text("kernels")
    with pytest.raises(Exception, match="print_ir stage"):
        compiled.stage_text("nope")
    monkeypatch.setenv("TENSORALG_PRINT_IR", "1")
    loud = tonnx.load(model, opt_level=2)
    loud.run(feeds)
    err = capsys.readouterr().err
    assert "== after fusion ==" in err and "== kernel " in err
    # at level 3 each static plan, when built, is printed with its hand-built modules
    loud = tonnx.load(model, opt_level=3)
    for _ in range(2):
        loud.run(feeds)
    err = capsys.readouterr().err
    assert "== static plan:" in err and "== generated call sequence" in err


def test_cli_onnx_run_and_profile(tmp_path, capsys):
    from tensoralg.cli import main
    model, feeds = _pruned_mlp(np.random.default_rng(11), batch=2)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    np.savez(tmp_path / "x.npz", **feeds)
    assert main(["onnx", "run", str(path), "--inputs", str(tmp_path / "x.npz"),
                 "--opt-level", "2"]) == 0
    assert "y: float32 [2, 16]" in capsys.readouterr().out
    assert main(["onnx", "run", str(path)]) == 0                   # random inputs, batch 1
    assert "y: float32 [1, 16]" in capsys.readouterr().out
    assert main(["onnx", "profile", str(path), "--repeat", "2", "--print-ir"]) == 0
    out = capsys.readouterr().out
    assert "peak alive" in out and "== after sparse weights + fusion ==" in out
    assert main(["onnx", "run", str(tmp_path / "missing.onnx")]) == 2


@pytest.mark.parametrize("activation", [
    h.make_node("LeakyRelu", ["m"], ["y"], alpha=0.1), h.make_node("Erf", ["m"], ["y"]),
    h.make_node("Gelu", ["m"], ["y"]), h.make_node("Gelu", ["m"], ["y"], approximate="tanh"),
    h.make_node("Softplus", ["m"], ["y"]), h.make_node("Elu", ["m"], ["y"], alpha=0.5),
    h.make_node("Selu", ["m"], ["y"]), h.make_node("HardSwish", ["m"], ["y"])],
    ids=lambda n: f"{n.op_type}{n.attribute[:1]}")
def test_epilogues_that_read_the_product_twice(activation):
    """LeakyRelu, Erf and Gelu use their input more than once: fused after a MatMul, the
    statement repeats the product's sum, which the core computes once (and used to fail on,
    with a KeyError, at levels 2 and 3)."""
    rng = np.random.default_rng(5)
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), activation]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 6])],
                   [h.make_tensor_value_info("y", F32, ["N", 5])],
                   [_const("W", rng.standard_normal((6, 5)).astype(np.float32))], opset=20)
    levels = check_all_levels(model, {"x": rng.standard_normal((7, 6)).astype(np.float32)})
    assert _ops(levels[2]) == ["Fused"]


@pytest.mark.parametrize("shape", [(2, 1, 5), (1, 3, 5), (2, 1, 1)])
def test_an_epilogue_that_broadcasts_the_product_up_is_not_fused(shape):
    """(3,4) @ (4,5) + b of rank 3: the product runs on its own, then the Add broadcasts."""
    rng = np.random.default_rng(6)
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Add", ["m", "b"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, [3, 4])],
                   [h.make_tensor_value_info("y", F32, [shape[0], 3, 5])],
                   [_const("W", rng.standard_normal((4, 5)).astype(np.float32)),
                    _const("b", rng.standard_normal(shape).astype(np.float32))])
    check_all_levels(model, {"x": rng.standard_normal((3, 4)).astype(np.float32)})


@pytest.mark.parametrize("op", ["Relu", "Clip", "ReduceMax", "ReduceMin", "Softplus", "Gemm"])
def test_nan_reaches_the_output_as_onnxruntime_gives_it(op):
    """NaN through max/min (Relu, Clip, reductions, a Gemm's fused Relu) stays NaN: the
    core's float min/max propagate NaN (ir/nodes.py) where C's fmax dropped it."""
    x = np.array([[np.nan, -1.0, 2.0, 0.5], [1.0, -3.0, np.inf, -np.inf]], np.float32)
    info = [h.make_tensor_value_info("x", F32, [2, 4])]
    inits = []
    if op == "Clip":
        nodes = [h.make_node("Clip", ["x", "lo", "hi"], ["y"])]
        inits = [_const("lo", np.float32(-0.5)), _const("hi", np.float32(0.5))]
        out = [2, 4]
    elif op in ("ReduceMax", "ReduceMin"):
        nodes = [h.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)]
        out = [2]
    elif op == "Gemm":
        nodes = [h.make_node("Gemm", ["x", "W"], ["g"]), h.make_node("Relu", ["g"], ["y"])]
        inits = [_const("W", np.ones((4, 3), np.float32))]
        x = np.nan_to_num(x, posinf=5, neginf=-5)
        x[0, 0] = np.nan
        out = [2, 3]
    else:
        nodes = [h.make_node(op, ["x"], ["y"])]
        out = [2, 4]
    model = _model(nodes, info, [h.make_tensor_value_info("y", F32, out)], inits)
    for compiled in check_all_levels(model, {"x": x}).values():
        assert np.isnan(compiled.run({"x": x})["y"]).any()


def test_bag_mean_over_no_ids_agrees_across_levels():
    """ReduceMean over an empty axis is NaN (ONNX leaves it undefined; NumPy's mean gives
    NaN), fused into a bag at levels 2-3 too (it divided by zero there)."""
    table = _const("E", np.ones((10, 4), np.float32))
    nodes = [h.make_node("Gather", ["E", "i"], ["g"]),
             h.make_node("ReduceMean", ["g"], ["y"], axes=[1], keepdims=0)]
    model = _model(nodes, [h.make_tensor_value_info("i", I64, ["N", 0])],
                   [h.make_tensor_value_info("y", F32, ["N", 4])], [table], opset=13)
    feeds = {"i": np.zeros((2, 0), np.int64)}
    for level in range(4):
        got = tonnx.load(model, opt_level=level).run(feeds)["y"]
        assert got.shape == (2, 4) and np.isnan(got).all(), level


def test_softplus_loads_at_every_opset_and_does_not_overflow():
    x = np.array([-100, -1, 0, 1, 100, 1000], np.float32)
    for opset in (11, 17, 21):
        model = _model([h.make_node("Softplus", ["x"], ["y"])],
                       [h.make_tensor_value_info("x", F32, [6])],
                       [h.make_tensor_value_info("y", F32, [6])], [], opset=opset)
        got = tonnx.load(model, opt_level=0).run({"x": x})["y"]
        np.testing.assert_allclose(got, np.logaddexp(0, x.astype(np.float64)), rtol=1e-6, atol=1e-30)


def test_an_unsupported_op_on_constants_is_evaluated_at_load():
    """An op the importer has no kernel for (here NegativeLogLikelihoodLoss) whose inputs are
    all constants is run once at load by onnx's reference implementation (and named in the
    plan), at every level; a TorchScript export of nn.MultiheadAttention computes such ops on
    Constants. The same op on a graph input is still refused, naming the node."""
    scores = np.log(np.arange(1, 13, dtype=np.float32).reshape(3, 4))
    nodes = [h.make_node("Constant", [], ["scores"], value=_const("scores_v", scores)),
             h.make_node("Constant", [], ["target"],
                         value=_const("target_v", np.array([0, 3, 1], np.int64))),
             h.make_node("NegativeLogLikelihoodLoss", ["scores", "target"], ["m"], name="loss",
                         reduction="none"),
             h.make_node("Add", ["x", "m"], ["y"])]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, [3])],
                   [h.make_tensor_value_info("y", F32, [3])], [])
    levels = check_all_levels(model, {"x": np.ones(3, np.float32)})
    assert "node loss (NegativeLogLikelihoodLoss) evaluated at load by onnx's reference" in \
        levels[0].ir()
    on_input = _model([h.make_node("NegativeLogLikelihoodLoss", ["s", "t"], ["y"], name="loss",
                                   reduction="none")],
                      [h.make_tensor_value_info("s", F32, [3, 4]),
                       h.make_tensor_value_info("t", TensorProto.INT64, [3])],
                      [h.make_tensor_value_info("y", F32, [3])], [])
    with pytest.raises(ta.UnsupportedError, match="node loss \\(NegativeLogLikelihoodLoss"):
        tonnx.load(on_input)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_a_fused_projection_split_in_three(opset):
    """What a PyTorch ``qkv.split(d, dim=-1)`` exports: one MatMul, then Split (sizes as an
    attribute before opset 13, as an input from 13, or num_outputs from 18); and Not of a
    comparison, as a padding mask is inverted."""
    rng = np.random.default_rng(9)
    w = _const("W", rng.standard_normal((4, 12)).astype(np.float32))
    if opset < 13:
        split = h.make_node("Split", ["qkv"], ["q", "k", "v"], axis=-1, split=[4, 4, 4])
        inits = [w]
    elif opset < 18:
        split = h.make_node("Split", ["qkv", "sizes"], ["q", "k", "v"], axis=-1)
        inits = [w, _const("sizes", np.array([4, 4, 4], np.int64))]
    else:
        split = h.make_node("Split", ["qkv"], ["q", "k", "v"], axis=-1, num_outputs=3)
        inits = [w]
    nodes = [h.make_node("MatMul", ["x", "W"], ["qkv"]), split,
             h.make_node("Mul", ["q", "k"], ["qk"]), h.make_node("Add", ["qk", "v"], ["y"]),
             h.make_node("Greater", ["y", "zero"], ["positive"]),
             h.make_node("Not", ["positive"], ["mask"])]
    inits.append(_const("zero", np.zeros(1, np.float32)))
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 4])],
                   [h.make_tensor_value_info("y", F32, ["N", 4]),
                    h.make_tensor_value_info("mask", TensorProto.BOOL, ["N", 4])],
                   inits, opset=opset)
    check_all_levels(model, {"x": rng.standard_normal((5, 4)).astype(np.float32)})


@pytest.mark.parametrize("upper, k", [(1, 0), (0, 0), (1, 1), (0, -1)])
def test_a_causal_mask_from_trilu(upper, k):
    """torch.triu / tril on attention scores (batched: the last two axes), then Softmax."""
    rng = np.random.default_rng(10)
    nodes = [h.make_node("Trilu", ["x", "k"], ["t"], upper=upper),
             h.make_node("Softmax", ["t"], ["y"], axis=-1)]
    model = _model(nodes, [h.make_tensor_value_info("x", F32, ["N", 5, 5])],
                   [h.make_tensor_value_info("y", F32, ["N", 5, 5])],
                   [_const("k", np.array(k, np.int64))], opset=14)
    check_all_levels(model, {"x": rng.standard_normal((3, 5, 5)).astype(np.float32)})


def test_memory_trace_counts_a_buffer_whose_address_was_reused():
    """Buffers are told apart by id; a buffer released and a later one at the same address
    (NumPy reusing the memory) are two buffers, never one (the profile test above was flaky)."""
    from tensoralg.onnx.plan.memory import MemoryTrace

    trace = MemoryTrace()
    buffer = np.zeros(10)
    trace.produced(0, {"a": buffer})
    trace.released(1, ["a"])
    trace.produced(2, {"b": buffer})      # the same root again: as if its memory were reused
    trace.released(3, ["b"])
    stats = trace.stats(4)
    assert (stats.buffers, stats.total, stats.peak) == (2, 160, 80)
