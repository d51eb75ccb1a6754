"""The ops and forms of issue 19's coverage list through tensoralg.onnx, each in a model built
with onnx.helper and compared with onnxruntime at every opt level (level 3 run three times, so
that the third run goes through the static plan): And/Or/Xor/Not, variadic Sum/Max/Min/Mean,
CumSum, Mod, Mish, ReduceL2, ReduceLogSumExp, If (decided at load, and at run time), Resize,
ConvTranspose, and weights stored as external data beside the model file.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
LEVELS = (0, 1, 2, 3)
F32 = TensorProto.FLOAT


def _info(name, array=None, elem=F32, shape=None):
    if array is not None:
        elem, shape = helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, feeds, outputs=("y",), constants=None, opset=18):
    """A checked model of ``nodes`` with inputs ``feeds`` (name -> array, their shapes free
    where given as a (array, shape) pair) and initializers ``constants``."""
    inputs = []
    for name, value in feeds.items():
        array, shape = value if isinstance(value, tuple) else (value, None)
        info = _info(name, array)
        if shape is not None:
            info = _info(name, elem=info.type.tensor_type.elem_type, shape=shape)
        inputs.append(info)
    graph = helper.make_graph(
        nodes, "coverage", inputs,
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in (constants or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    rank = inputs[0].type.tensor_type.shape.dim if inputs else []
    for output in model.graph.output:   # what inference cannot tell (an If, a refused node)
        tensor_type = output.type.tensor_type
        if not tensor_type.elem_type:
            tensor_type.elem_type = F32
        if not tensor_type.HasField("shape"):
            for k in range(len(rank)):
                tensor_type.shape.dim.add().dim_param = f"d{k}"
    onnx.checker.check_model(model)
    return model


def _feeds(feeds):
    return {n: (v[0] if isinstance(v, tuple) else v) for n, v in feeds.items()}


def _compare(model, feeds, levels=LEVELS, runs=3):
    """Every output of ``model`` at every level in ``levels`` equals onnxruntime's: same dtype
    and shape, floats to RTOL/ATOL, everything else exactly. Returns the loaded models."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    loaded = {}
    for level in levels:
        compiled = loaded[level] = tonnx.load(model, opt_level=level)
        for run in range(runs if level == 3 else 1):
            got = compiled.run(feeds)
            for name, want in expected.items():
                where = f"{name} at opt level {level}, run {run + 1}"
                assert got[name].dtype == want.dtype, where
                assert got[name].shape == want.shape, where
                if want.dtype.kind == "f":
                    np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL,
                                               err_msg=where)
                else:
                    np.testing.assert_array_equal(got[name], want, err_msg=where)
    return loaded


def _rng():
    return np.random.default_rng(19)


def _normal(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _node(op_type, inputs, outputs=("y",), **attributes):
    return helper.make_node(op_type, list(inputs), list(outputs), name=op_type.lower(),
                            **attributes)


# ---- logical ops -------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)),
                                    ((0, 4), (4,))], ids=["same", "row", "outer", "empty"])
def test_logical_ops_match_onnxruntime(op_type, shapes):
    rng = _rng()
    feeds = {"a": rng.random(shapes[0]) < 0.5, "b": rng.random(shapes[1]) < 0.5}
    _compare(_model([_node(op_type, ["a", "b"])], feeds), feeds)


def test_not_of_an_and_matches_onnxruntime():
    rng = _rng()
    feeds = {"a": rng.random((4, 5)) < 0.5, "b": rng.random((5,)) < 0.5}
    nodes = [_node("And", ["a", "b"], ["t"]), _node("Not", ["t"])]
    _compare(_model(nodes, feeds), feeds)


# ---- variadic Sum / Max / Min / Mean ------------------------------------------------------


VARIADIC_SHAPES = {
    "one": [(3, 4)],
    "two": [(3, 4), (3, 4)],
    "three_broadcast": [(2, 3, 4), (3, 1), (4,)],
    "scalar": [(2, 3), ()],
    "empty": [(0, 3), (3,)],
}


@pytest.mark.parametrize("op_type", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("case", list(VARIADIC_SHAPES))
def test_variadic_ops_match_onnxruntime(op_type, case):
    rng = _rng()
    feeds = {f"x{k}": _normal(rng, *shape) for k, shape in enumerate(VARIADIC_SHAPES[case])}
    _compare(_model([_node(op_type, list(feeds))], feeds), feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint64, np.float64])
@pytest.mark.parametrize("op_type", ["Max", "Min"])
def test_max_min_of_integers_and_doubles(op_type, dtype):
    rng = _rng()
    top = np.iinfo(dtype).max if np.dtype(dtype).kind in "iu" else 1e300
    feeds = {"a": rng.integers(0, 100, (3, 4)).astype(dtype),
             "b": np.array([1, 50, 99, 3], dtype=dtype),
             "c": np.array(top, dtype=dtype).reshape(1, 1)}
    feeds["a"][0, 0] = top - 1 if np.dtype(dtype).kind in "iu" else -top
    _compare(_model([_node(op_type, ["a", "b", "c"])], feeds), feeds)


def test_max_min_propagate_nan_as_onnxruntime():
    feeds = {"a": np.array([np.nan, 1.0, 2.0, -np.inf], np.float32),
             "b": np.array([1.0, np.nan, 3.0, np.inf], np.float32)}
    nodes = [_node("Max", ["a", "b"], ["hi"]), _node("Min", ["a", "b"], ["lo"])]
    _compare(_model(nodes, feeds, outputs=("hi", "lo")), feeds)


def test_variadic_and_mish_join_a_fused_statement():
    """Sum -> Mish -> Max(., c) -> Mean(., d) is one fused statement at level 2 and 3."""
    rng = _rng()
    feeds = {"a": _normal(rng, 4, 6), "b": _normal(rng, 6), "d": _normal(rng, 4, 1)}
    nodes = [_node("Sum", ["a", "b", "a"], ["s"]), _node("Mish", ["s"], ["m"]),
             _node("Max", ["m", "c"], ["x"]), _node("Mean", ["x", "d"])]
    model = _model(nodes, feeds, constants={"c": np.float32(0.1).reshape(1)})
    loaded = _compare(model, feeds)
    for level in (2, 3):
        ops = [node.op_type for node in loaded[level].graph.nodes]
        assert ops == ["Fused"], (level, ops)
    assert "tanh(" in loaded[2].ir() and ") / 2)" in loaded[2].ir()


# ---- CumSum -----------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumsum_matches_onnxruntime(axis, exclusive, reverse):
    rng = _rng()
    feeds = {"x": _normal(rng, 3, 5)}
    model = _model([_node("CumSum", ["x", "axis"], exclusive=exclusive, reverse=reverse)],
                   feeds, constants={"axis": np.array(axis, np.int64)})
    _compare(model, feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_cumsum_of_lengths_with_an_axis_input(dtype):
    """torchrec's KeyedJaggedTensor offsets: a CumSum of int lengths, the axis a graph input."""
    feeds = {"x": np.array([[2, 0, 3, 1], [1, 1, 0, 4]], dtype=dtype),
             "axis": np.array([1], dtype=np.int32)}
    _compare(_model([_node("CumSum", ["x", "axis"], exclusive=1)], feeds), feeds)


def test_cumsum_of_an_empty_tensor():
    feeds = {"x": np.zeros((0, 3), np.float32)}
    model = _model([_node("CumSum", ["x", "axis"])], feeds,
                   constants={"axis": np.array(0, np.int64)})
    _compare(model, feeds)


def test_cumsum_axis_out_of_range_names_the_node():
    feeds = {"x": np.ones((2, 3), np.float32)}
    model = _model([_node("CumSum", ["x", "axis"])], feeds,
                   constants={"axis": np.array(2, np.int64)})
    with pytest.raises(ta.ShapeError, match=r"cumsum.*axis 2 is out of range"):
        tonnx.load(model, opt_level=0).run(feeds)


# ---- Mod ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint16])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_matches_onnxruntime(dtype, fmod):
    rng = _rng()
    signed = np.dtype(dtype).kind == "i"
    low = -50 if signed else 0
    a = rng.integers(low, 50, (3, 5)).astype(dtype)
    b = np.array([7, -3, 4, 1, -9] if signed else [7, 3, 4, 1, 9], dtype=dtype)
    feeds = {"a": a, "b": b}
    _compare(_model([_node("Mod", ["a", "b"], fmod=fmod)], feeds), feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_fmod_matches_onnxruntime(dtype):
    rng = _rng()
    feeds = {"a": (rng.standard_normal((4, 3)) * 10).astype(dtype),
             "b": np.array([[2.5], [-1.5], [0.75], [-3.0]], dtype=dtype)}
    _compare(_model([_node("Mod", ["a", "b"], fmod=1)], feeds), feeds)


def test_mod_of_empty_tensors():
    feeds = {"a": np.zeros((0, 3), np.int64), "b": np.array([2, 3, 4], np.int64)}
    _compare(_model([_node("Mod", ["a", "b"])], feeds), feeds)


# ---- Mish, ReduceL2, ReduceLogSumExp --------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 7), (2, 3, 4), (0, 5)])
def test_mish_matches_onnxruntime(shape):
    feeds = {"x": (_normal(_rng(), *shape) * 8).astype(np.float32)}
    _compare(_model([_node("Mish", ["x"])], feeds), feeds)


REDUCE_CASES = [
    ("last", [-1], 1), ("first_no_keep", [0], 0), ("two", [0, 2], 1), ("all", None, 0),
    ("negative_two", [-3, -1], 0),
]


@pytest.mark.parametrize("op_type", ["ReduceL2", "ReduceLogSumExp"])
@pytest.mark.parametrize("name, axes, keepdims", REDUCE_CASES, ids=[c[0] for c in REDUCE_CASES])
@pytest.mark.parametrize("opset", [17, 18])
def test_reductions_match_onnxruntime(op_type, name, axes, keepdims, opset):
    feeds = {"x": (_normal(_rng(), 2, 3, 4) * 3).astype(np.float32)}
    constants = {}
    attributes = {"keepdims": keepdims}
    inputs = ["x"]
    if axes is not None and opset >= 18:
        constants["axes"] = np.array(axes, np.int64)
        inputs.append("axes")
    elif axes is not None:
        attributes["axes"] = axes
    model = _model([_node(op_type, inputs, **attributes)], feeds, constants=constants,
                   opset=opset)
    _compare(model, feeds)


@pytest.mark.parametrize("op_type", ["ReduceL2", "ReduceLogSumExp"])
def test_reductions_with_empty_axes_and_noop(op_type):
    """Axes given as an empty input with noop_with_empty_axes=1: the input unchanged."""
    feeds = {"x": _normal(_rng(), 2, 3)}
    model = _model([_node(op_type, ["x", "axes"], noop_with_empty_axes=1)], feeds,
                   constants={"axes": np.zeros(0, np.int64)})
    _compare(model, feeds)


@pytest.mark.parametrize("op_type", ["ReduceL2", "ReduceLogSumExp"])
def test_reductions_over_an_empty_axis(op_type):
    feeds = {"x": np.zeros((3, 0), np.float32)}
    model = _model([_node(op_type, ["x"], axes=[1], keepdims=0)], feeds, opset=17)
    _compare(model, feeds)


def test_log_sum_exp_of_large_and_infinite_values():
    """The maxima shift keeps exp from overflowing; a row of -inf gives -inf."""
    feeds = {"x": np.array([[100.0, 99.0, 98.0], [-np.inf, -np.inf, -np.inf],
                            [1.0, -np.inf, 2.0]], np.float32)}
    model = _model([_node("ReduceLogSumExp", ["x"], axes=[1], keepdims=0)], feeds, opset=17)
    _compare(model, feeds)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_l2_of_integers(dtype):
    feeds = {"x": np.arange(-6, 6, dtype=dtype).reshape(3, 4)}
    model = _model([_node("ReduceL2", ["x"], axes=[1], keepdims=1)], feeds, opset=17)
    _compare(model, feeds)


# ---- If ----------------------------------------------------------------------------------


def _branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [],
                             [helper.make_tensor_value_info(o, F32, None) for o in outputs],
                             list(inits))


def _if(condition, then_branch, else_branch, outputs=("y",)):
    return helper.make_node("If", [condition], list(outputs), name="choose",
                            then_branch=then_branch, else_branch=else_branch)


def _plus_one_or_loss():
    """Then: x + 1; else: x plus its NegativeLogLikelihoodLoss against its ArgMax, a loss op
    tensoralg has no kernel for (never resolved when the condition is decided at load, so the
    model still loads)."""
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    axis = numpy_helper.from_array(np.array([1], np.int64), "axis")
    then_branch = _branch("then", [helper.make_node("Add", ["x", "one"], ["t"])], ["t"], [one])
    else_branch = _branch("else", [
        helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=0),
        helper.make_node("NegativeLogLikelihoodLoss", ["x", "best"], ["loss"], reduction="none"),
        helper.make_node("Unsqueeze", ["loss", "axis"], ["column"]),
        helper.make_node("Add", ["x", "column"], ["e"])], ["e"], [axis])
    return then_branch, else_branch


def _has_if(compiled):
    return any(node.op_type == "If" for node in compiled.graph.nodes)


def test_if_on_a_constant_is_inlined_at_load():
    then_branch, else_branch = _plus_one_or_loss()
    feeds = {"x": (_normal(_rng(), 3, 4), ["N", 4])}
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        np.array(True))), _if("c", then_branch, else_branch)]
    model = _model(nodes, feeds)
    loaded = _compare(model, _feeds(feeds))
    assert not any(_has_if(m) for m in loaded.values())
    assert any("decided at load" in note for note in loaded[0].graph.notes)


@pytest.mark.parametrize("pick", ["gather", "slice"])
def test_if_on_a_static_dimension_is_inlined_at_load(pick):
    """cond = Shape(x)[1] == 4 (or Shape(x)[-1:] == [4]) with a free batch dimension:
    decided by shape inference."""
    then_branch, else_branch = _plus_one_or_loss()
    feeds = {"x": (_normal(_rng(), 3, 4), ["N", 4])}
    if pick == "gather":
        dimension = helper.make_node("Gather", ["s", "one_index"], ["d"], axis=0)
    else:
        dimension = helper.make_node("Slice", ["s", "minus_one", "end"], ["d"])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), dimension,
             helper.make_node("Equal", ["d", "four"], ["c"]),
             _if("c", then_branch, else_branch)]
    model = _model(nodes, feeds, constants={
        "one_index": np.array(1, np.int64), "four": np.array(4, np.int64),
        "minus_one": np.array([-1], np.int64), "end": np.array([2**63 - 1], np.int64)})
    loaded = _compare(model, _feeds(feeds))
    assert not any(_has_if(m) for m in loaded.values())


def test_if_on_the_rank_is_inlined_at_load():
    """DCN's form: the branch depends on the rank of the input, Size(Shape(x)) == 2."""
    feeds = {"x": (_normal(_rng(), 3, 4), ["N", "M"])}
    then_branch = _branch("then", [helper.make_node("Relu", ["x"], ["t"])], ["t"])
    else_branch = _branch("else", [helper.make_node("Neg", ["x"], ["e"])], ["e"])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Size", ["s"], ["r"]),
             helper.make_node("Equal", ["r", "two"], ["c"]),
             _if("c", then_branch, else_branch)]
    model = _model(nodes, feeds, constants={"two": np.array(2, np.int64)})
    loaded = _compare(model, _feeds(feeds))
    assert not any(_has_if(m) for m in loaded.values())


def test_inlined_branch_values_are_renamed_where_names_clash():
    """Two decided Ifs whose taken branches both define ``u`` and ``t`` (legal: each in its
    own scope): each ``u`` is renamed under its If, each ``t`` takes its If output's name."""
    feeds = {"x": _normal(_rng(), 2, 3)}
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        np.array([True])))]
    for k, op_type in enumerate(["Relu", "Neg"]):
        then_branch = _branch(f"then{k}", [helper.make_node(op_type, ["x"], ["u"]),
                                           helper.make_node("Mul", ["u", "x"], ["t"])], ["t"])
        else_branch = _branch(f"else{k}", [helper.make_node("Abs", ["x"], [f"e{k}"])],
                              [f"e{k}"])
        nodes.append(helper.make_node("If", ["c"], [f"p{k}"], name=f"choose{k}",
                                      then_branch=then_branch, else_branch=else_branch))
    nodes.append(helper.make_node("Sub", ["p0", "p1"], ["y"]))
    loaded = _compare(_model(nodes, feeds), feeds)
    values = {name for node in loaded[0].graph.nodes for name in node.outputs}
    assert {"choose0.then/u", "choose1.then/u", "p0", "p1"} <= values


def _runtime_if_model():
    """cond = ReduceSum(x) > 0, decided only at run time. Then: (x * W, x[:1]); else:
    (x + W, x): the second output's shape depends on the branch taken."""
    then_branch = _branch("then", [
        helper.make_node("Mul", ["x", "w"], ["t1"]),
        helper.make_node("Slice", ["x", "zero", "one"], ["t2"])], ["t1", "t2"])
    else_branch = _branch("else", [helper.make_node("Add", ["x", "w"], ["e1"]),
                                   helper.make_node("Identity", ["x"], ["e2"])], ["e1", "e2"])
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero_f"], ["c"]),
             _if("c", then_branch, else_branch, outputs=("y", "z"))]
    feeds = {"x": (np.ones((3, 4), np.float32), ["N", 4])}
    constants = {"zero": np.array([0], np.int64), "one": np.array([1], np.int64),
                 "zero_f": np.array(0.0, np.float32), "w": np.full((1, 4), 2.0, np.float32)}
    return _model(nodes, feeds, outputs=("y", "z"), constants=constants)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_runtime_if_runs_the_branch_its_condition_picks(sign):
    model = _runtime_if_model()
    feeds = {"x": np.abs(_normal(_rng(), 3, 4)) * np.float32(sign)}
    loaded = _compare(model, feeds)
    assert all(_has_if(m) for m in loaded.values())


def test_runtime_if_switching_branches_under_the_static_plan():
    """Level 3 records a plan with one branch; the other branch's output shape differs, so
    the plan is dropped and rebuilt, never answering with the recorded shape."""
    model = _runtime_if_model()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = _rng()
    for k in range(8):
        x = np.abs(_normal(rng, 3, 4)) * np.float32(1 if k % 3 else -1)
        got = compiled.run({"x": x})
        for name, want in zip(("y", "z"), session.run(None, {"x": x})):
            np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL)


def test_runtime_if_with_an_unsupported_op_names_the_branch_node():
    then_branch, else_branch = _plus_one_or_loss()
    feeds = {"x": _normal(_rng(), 3, 3)}
    nodes = [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["c"]),
             _if("c", then_branch, else_branch)]
    model = _model(nodes, feeds, constants={"zero": np.array(0.0, np.float32)})
    with pytest.raises(ta.UnsupportedError,
                       match=r"node choose\.else/n1 \(NegativeLogLikelihoodLoss"):
        tonnx.load(model)


# ---- Resize -------------------------------------------------------------------------------


RESIZE_CASES = [
    # (id, mode, coordinate_transformation_mode, nearest_mode, scales, sizes)
    ("nearest_asymmetric_floor_2x", "nearest", "asymmetric", "floor", [1, 1, 2, 2], None),
    ("nearest_asymmetric_floor_3x2", "nearest", "asymmetric", "floor", [1, 1, 3, 2], None),
    ("nearest_half_pixel_up", "nearest", "half_pixel", "round_prefer_floor", [1, 1, 1.7, 2.5],
     None),
    ("nearest_half_pixel_down", "nearest", "half_pixel", "round_prefer_floor", None,
     [2, 3, 3, 4]),
    ("nearest_pytorch_half_pixel", "nearest", "pytorch_half_pixel", "round_prefer_floor", None,
     [2, 3, 13, 1]),
    ("linear_half_pixel_up", "linear", "half_pixel", None, [1, 1, 2, 2], None),
    ("linear_half_pixel_odd", "linear", "half_pixel", None, None, [2, 3, 9, 5]),
    ("linear_align_corners", "linear", "align_corners", None, None, [2, 3, 11, 8]),
    ("linear_align_corners_down", "linear", "align_corners", None, [1, 1, 0.5, 0.75], None),
    ("linear_pytorch_half_pixel", "linear", "pytorch_half_pixel", None, None, [2, 3, 3, 1]),
    ("linear_asymmetric", "linear", "asymmetric", None, [1, 1, 1.5, 2], None),
    ("cubic_half_pixel_up", "cubic", "half_pixel", None, [1, 1, 2, 2], None),
    ("cubic_pytorch_half_pixel", "cubic", "pytorch_half_pixel", None, None, [2, 3, 11, 3]),
    ("cubic_align_corners_down", "cubic", "align_corners", None, None, [2, 3, 4, 2]),
    ("cubic_asymmetric", "cubic", "asymmetric", None, [1, 1, 1.5, 0.6], None),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=[c[0] for c in RESIZE_CASES])
@pytest.mark.parametrize("opset", [13, 18])
def test_resize_matches_onnxruntime(case, opset):
    _, mode, transform, nearest, scales, sizes = case
    feeds = {"x": _normal(_rng(), 2, 3, 6, 5)}
    attributes = {"mode": mode, "coordinate_transformation_mode": transform}
    if nearest is not None:
        attributes["nearest_mode"] = nearest
    constants = {"roi": np.zeros(0, np.float32)}
    if scales is not None:
        constants["scales"] = np.array(scales, np.float32)
        inputs = ["x", "roi", "scales"]
    else:
        constants["sizes"] = np.array(sizes, np.int64)
        inputs = ["x", "roi", "", "sizes"]
    model = _model([_node("Resize", inputs, **attributes)], feeds, constants=constants,
                   opset=opset)
    _compare(model, feeds)


def test_resize_at_opset_11_with_an_empty_scales_input():
    feeds = {"x": _normal(_rng(), 1, 2, 4, 4)}
    constants = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                 "sizes": np.array([1, 2, 7, 6], np.int64)}
    model = _model([_node("Resize", ["x", "roi", "scales", "sizes"], mode="linear",
                          coordinate_transformation_mode="half_pixel")],
                   feeds, constants=constants, opset=11)
    _compare(model, feeds)


def test_nearest_resize_of_uint8_images():
    feeds = {"x": _rng().integers(0, 255, (1, 3, 4, 5)).astype(np.uint8)}
    model = _model([_node("Resize", ["x", "", "scales"], mode="nearest",
                          coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                   feeds, constants={"scales": np.array([1, 1, 2, 2], np.float32)})
    _compare(model, feeds)


def test_resize_of_an_empty_batch():
    feeds = {"x": np.zeros((0, 3, 4, 4), np.float32)}
    model = _model([_node("Resize", ["x", "", "scales"], mode="linear")], feeds,
                   constants={"scales": np.array([1, 1, 2, 2], np.float32)})
    _compare(model, feeds)


def test_resize_scales_input_computed_in_the_graph():
    """The PyTorch exporters' form: scales built by a Concat of constants."""
    feeds = {"x": _normal(_rng(), 1, 2, 3, 3)}
    nodes = [helper.make_node("Concat", ["ones", "factors"], ["scales"], axis=0),
             _node("Resize", ["x", "", "scales"], mode="nearest")]
    constants = {"ones": np.ones(2, np.float32), "factors": np.array([2, 2], np.float32)}
    _compare(_model(nodes, feeds, constants=constants), feeds)


def test_an_unknown_resize_mode_is_refused_at_load_naming_the_node():
    feeds = {"x": _normal(_rng(), 1, 1, 2, 2)}
    model = _model([_node("Resize", ["x", "", "scales"], mode="bicubic")], feeds,
                   constants={"scales": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(ta.UnsupportedError, match=r"node resize \(Resize.*'bicubic'"):
        tonnx.load(model)


def test_cubic_resize_of_integers_names_the_node():
    feeds = {"x": _rng().integers(0, 9, (1, 1, 3, 3)).astype(np.int32)}
    model = _model([_node("Resize", ["x", "", "scales"], mode="cubic")], feeds,
                   constants={"scales": np.array([1, 1, 2, 2], np.float32)})
    with pytest.raises(ta.UnsupportedError, match=r"resize.*cubic Resize of int32"):
        tonnx.load(model, opt_level=0).run(feeds)


def test_resize_with_both_scales_and_sizes_names_the_node():
    feeds = {"x": _normal(_rng(), 1, 1, 2, 2)}
    constants = {"scales": np.array([1, 1, 2, 2], np.float32),
                 "sizes": np.array([1, 1, 4, 4], np.int64)}
    model = _model([_node("Resize", ["x", "", "scales", "sizes"])], feeds, constants=constants)
    with pytest.raises(ta.ShapeError, match=r"resize.*exactly one of scales and sizes"):
        tonnx.load(model, opt_level=0).run(feeds)


# ---- ConvTranspose ------------------------------------------------------------------------


CONV_TRANSPOSE_CASES = [
    ("plain", (1, 3, 5, 5), (3, 2, 3, 3), {}),
    ("stride2", (2, 4, 4, 5), (4, 3, 3, 3), dict(strides=[2, 2])),
    ("stride2_pads", (1, 4, 5, 4), (4, 2, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ("output_padding", (1, 2, 3, 4), (2, 3, 3, 3),
     dict(strides=[2, 3], pads=[1, 0, 1, 1], output_padding=[1, 2])),
    ("asymmetric_pads", (1, 2, 4, 4), (2, 2, 3, 2), dict(pads=[2, 0, 1, 1])),
    ("groups", (2, 4, 3, 3), (4, 3, 3, 3), dict(group=2, strides=[2, 2])),
    ("depthwise", (1, 3, 4, 4), (3, 1, 2, 2), dict(group=3, strides=[2, 2])),
    ("dilations", (1, 2, 4, 4), (2, 2, 3, 3), dict(dilations=[2, 2], strides=[2, 1])),
    ("output_shape", (1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),
    ("same_upper", (1, 2, 3, 4), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ("conv1d", (2, 3, 7), (3, 4, 3), dict(strides=[2], pads=[1, 0])),
    # Keypoint R-CNN's upsampling, smaller: enough multiply-adds for the product to go to BLAS
    ("keypoint_upsampling", (2, 64, 14, 14), (64, 17, 4, 4), dict(strides=[2, 2],
                                                                  pads=[1, 1, 1, 1])),
    ("conv3d", (1, 3, 3, 4, 2), (3, 2, 2, 3, 2), dict(strides=[2, 1, 3], pads=[0, 1, 0, 1, 0, 0])),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name, x_shape, w_shape, attributes", CONV_TRANSPOSE_CASES,
                         ids=[c[0] for c in CONV_TRANSPOSE_CASES])
def test_conv_transpose_matches_onnxruntime(name, x_shape, w_shape, attributes, bias):
    rng = _rng()
    feeds = {"x": _normal(rng, *x_shape)}
    constants = {"w": _normal(rng, *w_shape)}
    inputs = ["x", "w"]
    if bias:
        constants["b"] = _normal(rng, w_shape[1] * attributes.get("group", 1))
        inputs.append("b")
    model = _model([_node("ConvTranspose", inputs, **attributes)], feeds, constants=constants)
    _compare(model, feeds)


def test_conv_transpose_with_mismatched_channels_names_the_node():
    feeds = {"x": _normal(_rng(), 1, 3, 4, 4)}
    model = _model([_node("ConvTranspose", ["x", "w"])], feeds,
                   constants={"w": np.ones((2, 2, 3, 3), np.float32)})
    with pytest.raises(ta.ShapeError, match=r"convtranspose.*3 input channels"):
        tonnx.load(model, opt_level=0).run(feeds)


@pytest.mark.slow
def test_conv_transpose_decoder_of_a_segmentation_net():
    """A decoder block as exported from PyTorch: ConvTranspose(stride 2) -> Relu -> Conv."""
    rng = _rng()
    feeds = {"x": _normal(rng, 2, 16, 12, 12)}
    constants = {"wt": _normal(rng, 16, 8, 4, 4) * np.float32(0.2),
                 "bt": _normal(rng, 8), "wc": _normal(rng, 4, 8, 3, 3) * np.float32(0.2)}
    nodes = [_node("ConvTranspose", ["x", "wt", "bt"], ["u"], strides=[2, 2],
                   pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["u"], ["r"]),
             helper.make_node("Conv", ["r", "wc"], ["y"], pads=[1, 1, 1, 1])]
    _compare(_model(nodes, feeds, constants=constants), feeds)


# ---- external data ------------------------------------------------------------------------


def _external_data_model(directory):
    """model.onnx with its weight in model.onnx.data beside it."""
    rng = _rng()
    feeds = {"x": _normal(rng, 4, 64)}
    w = _normal(rng, 64, 32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], feeds, constants={"w": w})
    directory.mkdir(exist_ok=True)
    path = directory / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    return path, feeds


def test_external_data_is_read_relative_to_the_model_file(tmp_path, monkeypatch):
    path, feeds = _external_data_model(tmp_path / "models")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)[0]
    for level in (0, 3):
        got = tonnx.load(str(path), opt_level=level).run(feeds)["y"]
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_missing_external_data_is_a_model_error(tmp_path):
    path, _ = _external_data_model(tmp_path)
    (tmp_path / "model.onnx.data").unlink()
    with pytest.raises(tonnx.ModelError, match=r"external data of tensor\(s\) w"):
        tonnx.load(str(path))


def test_a_model_proto_with_external_data_is_not_changed(tmp_path, monkeypatch):
    path, feeds = _external_data_model(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    monkeypatch.chdir(tmp_path)        # a ModelProto's external data is relative to the cwd
    tonnx.load(proto, opt_level=0).run(feeds)
    assert proto.graph.initializer[0].data_location == TensorProto.EXTERNAL


def test_supported_ops_lists_the_new_ops():
    assert {"And", "Or", "Xor", "Not", "Sum", "Max", "Min", "Mean", "CumSum", "Mod", "Mish",
            "ReduceL2", "ReduceLogSumExp", "If", "Resize", "ConvTranspose"} <= \
        set(tonnx.supported_ops())
