"""Pad, Tile, DepthToSpace/SpaceToDepth, ScatterND/ScatterElements, OneHot, ArgMax/ArgMin,
TopK, NonZero, the new activations and reductions: against onnxruntime at every opt level
(level 3 three times, so that the third run goes through the static plan), on float32,
float64 and int64 where the op takes them, with empty tensors, and bad input refused with a
``ta.TensorAlgebraError`` naming the node. ONNX's own node test cases for these ops run in
tests/test_onnx_nodes.py.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from test_onnx_ops_coverage import _compare, _model, _node  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402


def _rng():
    return np.random.default_rng(23)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_pad_matches_onnxruntime(mode, dtype):
    x = (_rng().standard_normal((2, 3, 5, 4)) * 10).astype(dtype)
    pads = np.array([0, 1, 2, 1, 0, 0, 1, 2], np.int64)
    inputs = ["x", "pads"] + (["value"] if mode == "constant" else [])
    constants = {"pads": pads}
    if mode == "constant":
        constants["value"] = np.array(3, dtype)
    _compare(_model([_node("Pad", inputs, mode=mode)], {"x": x}, constants=constants,
                    opset=19), {"x": x})


def test_pad_with_axes_and_negative_pads_crops():
    x = _rng().standard_normal((3, 6)).astype(np.float32)
    constants = {"pads": np.array([-1, 2, 1, -2], np.int64), "axes": np.array([0, 1], np.int64)}
    _compare(_model([_node("Pad", ["x", "pads", "", "axes"])], {"x": x}, constants=constants),
             {"x": x})


def test_pad_computed_from_shapes_as_swin_exports_it():
    """The pads are an input computed from the input's shape (Shape -> Gather -> Sub ->
    Concat -> Cast), not a constant: known once shapes are, and the plan keeps up."""
    x = _rng().standard_normal((1, 5, 5, 3)).astype(np.float32)
    nodes = [_node("Shape", ["x"], ["s"]), _node("Gather", ["s", "one"], ["h"], axis=0),
             _node("Sub", ["seven", "h"], ["extra"]),
             _node("Concat", ["zeros5", "extra", "zeros2"], ["pads"], axis=0),
             _node("Pad", ["x", "pads"])]
    nodes[1].name, nodes[2].name, nodes[3].name = "gather", "sub", "concat"
    constants = {"one": np.array([1], np.int64), "seven": np.array([7], np.int64),
                 "zeros5": np.zeros(5, np.int64), "zeros2": np.zeros(2, np.int64)}
    model = _model(nodes, {"x": (x, ["n", "h", "w", "c"])}, constants=constants)
    _compare(model, {"x": x})


def test_pad_refuses_a_wrong_number_of_pads_naming_the_node():
    x = np.ones((2, 3), np.float32)
    model = _model([_node("Pad", ["x", "pads"])], {"x": x},
                   constants={"pads": np.array([1, 1, 1], np.int64)})
    with pytest.raises(ta.ShapeError, match="pad"):
        tonnx.load(model).run({"x": x})


def test_pad_of_an_empty_tensor_and_reflect_of_an_empty_axis():
    x = np.zeros((0, 3), np.float32)
    constants = {"pads": np.array([1, 0, 1, 0], np.int64)}
    _compare(_model([_node("Pad", ["x", "pads"])], {"x": x}, constants=constants), {"x": x})
    model = _model([_node("Pad", ["x", "pads"], mode="reflect")], {"x": x}, constants=constants)
    with pytest.raises(ta.ShapeError, match="reflect"):
        tonnx.load(model).run({"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_tile_matches_onnxruntime(dtype):
    x = (_rng().standard_normal((2, 3, 1)) * 5).astype(dtype)
    _compare(_model([_node("Tile", ["x", "repeats"])], {"x": x},
                    constants={"repeats": np.array([2, 1, 4], np.int64)}), {"x": x})


def test_tile_refuses_repeats_of_the_wrong_length():
    x = np.ones((2, 3), np.float32)
    model = _model([_node("Tile", ["x", "repeats"])], {"x": x},
                   constants={"repeats": np.array([2], np.int64)})
    with pytest.raises(ta.ShapeError, match="repeats"):
        tonnx.load(model).run({"x": x})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode):
    x = _rng().standard_normal((2, 8, 3, 5)).astype(np.float32)
    _compare(_model([_node("DepthToSpace", ["x"], blocksize=2, mode=mode)], {"x": x}),
             {"x": x})
    y = _rng().standard_normal((2, 3, 6, 4)).astype(np.float32)
    _compare(_model([_node("SpaceToDepth", ["x"], blocksize=2)], {"x": y}), {"x": y})


def test_depth_to_space_refuses_channels_not_a_multiple():
    x = np.ones((1, 6, 2, 2), np.float32)
    with pytest.raises(ta.ShapeError, match="blocksize"):
        tonnx.load(_model([_node("DepthToSpace", ["x"], blocksize=2)], {"x": x})).run({"x": x})


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_matches_onnxruntime(reduction):
    rng = _rng()
    data = rng.standard_normal((4, 5, 3)).astype(np.float32)
    indices = np.array([[0, 1], [3, -1], [2, 2]], np.int64)
    updates = rng.standard_normal((3, 3)).astype(np.float32)
    feeds = {"data": data, "updates": updates}
    model = _model([_node("ScatterND", ["data", "indices", "updates"], reduction=reduction)],
                   feeds, constants={"indices": indices})
    _compare(model, feeds)


def test_scatter_nd_refuses_an_index_outside_the_data():
    data = np.zeros((3, 2), np.float32)
    feeds = {"data": data, "indices": np.array([[3]], np.int64),
             "updates": np.ones((1, 2), np.float32)}
    model = _model([_node("ScatterND", ["data", "indices", "updates"])], feeds)
    with pytest.raises(ta.ShapeError, match="scatternd"):
        tonnx.load(model).run(feeds)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements_matches_onnxruntime(reduction, axis):
    rng = _rng()
    data = rng.standard_normal((4, 5)).astype(np.float64)
    size = data.shape[axis]
    shape = (3, 2)
    # distinct indices along the axis for "none" (ONNX leaves duplicates undefined)
    indices = np.stack([rng.permutation(size)[:shape[1 if axis == 0 else 0] * 0 + shape[axis]]
                        for _ in range(shape[1 - (axis % 2)])], axis=1 - (axis % 2))
    indices = indices.astype(np.int64).reshape(shape)
    updates = rng.standard_normal(shape).astype(np.float64)
    feeds = {"data": data, "updates": updates}
    model = _model([_node("ScatterElements", ["data", "indices", "updates"], axis=axis,
                          reduction=reduction)], feeds, constants={"indices": indices})
    _compare(model, feeds)


def test_one_hot_matches_onnxruntime():
    indices = np.array([[0, 3, -1], [2, 5, 1]], np.int64)
    constants = {"depth": np.array(4, np.int64), "values": np.array([0.5, 2.0], np.float32)}
    _compare(_model([_node("OneHot", ["indices", "depth", "values"], axis=1)],
                    {"indices": indices}, constants=constants), {"indices": indices})


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_arg_extremes_match_onnxruntime(op_type, last, dtype):
    x = _rng().integers(-3, 3, (4, 6, 5)).astype(dtype)     # ties on purpose
    _compare(_model([_node(op_type, ["x"], axis=1, keepdims=1, select_last_index=last)],
                    {"x": x}), {"x": x})
    _compare(_model([_node(op_type, ["x"], axis=-1, keepdims=0)], {"x": x}), {"x": x})


def test_arg_max_of_an_empty_axis_is_refused():
    x = np.zeros((3, 0), np.float32)
    with pytest.raises(ta.ShapeError, match="empty"):
        tonnx.load(_model([_node("ArgMax", ["x"], axis=1)], {"x": x})).run({"x": x})


@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_top_k_matches_onnxruntime(largest, dtype):
    x = _rng().integers(-4, 4, (3, 9)).astype(dtype)        # ties: order by position
    constants = {"k": np.array([4], np.int64)}
    _compare(_model([_node("TopK", ["x", "k"], ["values", "indices"], axis=1,
                           largest=largest)], {"x": x}, outputs=("values", "indices"),
                    constants=constants), {"x": x})


def test_top_k_of_the_most_negative_integer():
    x = np.array([[np.iinfo(np.int64).min, 0, 5, np.iinfo(np.int64).max]], np.int64)
    _compare(_model([_node("TopK", ["x", "k"], ["values", "indices"])], {"x": x},
                    outputs=("values", "indices"), constants={"k": np.array([3], np.int64)}),
             {"x": x})


def test_top_k_refuses_k_beyond_the_axis():
    x = np.ones((2, 3), np.float32)
    model = _model([_node("TopK", ["x", "k"], ["values", "indices"])], {"x": x},
                   outputs=("values", "indices"), constants={"k": np.array([4], np.int64)})
    with pytest.raises(ta.ShapeError, match="topk"):
        tonnx.load(model).run({"x": x})


def test_non_zero_and_compress_match_onnxruntime():
    x = np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)
    _compare(_model([_node("NonZero", ["x"])], {"x": x}), {"x": x})
    condition = np.array([True, False, True])
    feeds = {"x": x, "c": condition}
    _compare(_model([_node("Compress", ["x", "c"], axis=1)], feeds), feeds)


@pytest.mark.parametrize("op_type,attributes", [
    ("Celu", {"alpha": 0.7}), ("Softsign", {}), ("Sign", {}), ("Tan", {}),
    ("ThresholdedRelu", {"alpha": 0.3}), ("Shrink", {"bias": 0.2, "lambd": 0.4}),
    ("Floor", {}), ("Ceil", {}), ("Round", {}), ("Atan", {}), ("Sinh", {}), ("Asinh", {}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_activations_match_onnxruntime(op_type, attributes, dtype):
    x = (_rng().standard_normal((3, 7)) * 2).astype(dtype)
    x[0, :3] = [0.5, -2.5, 0.0]                  # Round's halves go to even
    model = _model([_node(op_type, ["x"], **attributes)], {"x": x})
    if dtype == np.float32 or op_type not in _NUMPY_REFERENCE:
        _compare(model, {"x": x})
        return
    # onnxruntime has these for float32 only: NumPy is the float64 oracle.
    want = _NUMPY_REFERENCE[op_type](x)
    for level in (0, 3):
        got = tonnx.load(model, opt_level=level).run({"x": x})["y"]
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


_NUMPY_REFERENCE = {
    # alpha is a float32 attribute: 0.7 is stored as the float32 nearest it
    "Celu": lambda x, a=float(np.float32(0.7)): np.maximum(x, 0) + np.minimum(
        0, a * (np.exp(x / a) - 1)),
    "Tan": np.tan, "Atan": np.arctan, "Sinh": np.sinh, "Asinh": np.arcsinh,
}


def test_prelu_with_a_per_channel_slope():
    rng = _rng()
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    slope = rng.random((4, 1, 1)).astype(np.float32)
    _compare(_model([_node("PRelu", ["x", "slope"])], {"x": x}, constants={"slope": slope}),
             {"x": x})


@pytest.mark.parametrize("op_type", ["ReduceL1", "ReduceSumSquare", "ReduceLogSum"])
@pytest.mark.parametrize("axes", [[1], [0, 2], None])
def test_new_reductions_match_onnxruntime(op_type, axes):
    x = (_rng().random((3, 4, 5)) + 0.1).astype(np.float32)
    inputs = ["x"] + (["axes"] if axes is not None else [])
    constants = {"axes": np.array(axes, np.int64)} if axes is not None else None
    _compare(_model([_node(op_type, inputs, keepdims=0)], {"x": x}, constants=constants),
             {"x": x})


def test_reduce_sum_square_of_integers_stays_exact():
    x = np.arange(-6, 6, dtype=np.int64).reshape(3, 4)
    constants = {"axes": np.array([1], np.int64)}
    _compare(_model([_node("ReduceSumSquare", ["x", "axes"])], {"x": x}, constants=constants),
             {"x": x})


def test_elementwise_statements_merge_axes_the_operands_share():
    """SiLU over (N, C, H, W) runs as one loop over every element, and the squeeze-excitation
    scale (N, C, 1, 1) as (C, H * W): neighbouring axes that every operand has, or broadcasts
    along, alike merge (``kernels.coalesced``); results as onnxruntime's."""
    rng = _rng()
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    scale = rng.standard_normal((2, 6, 1, 1)).astype(np.float32)
    nodes = [_node("Sigmoid", ["x"], ["s"]), _node("Mul", ["x", "s"], ["silu"]),
             _node("Mul", ["silu", "scale"])]
    nodes[1].name = "mul0"
    feeds = {"x": x, "scale": scale}
    loaded = _compare(_model(nodes, feeds), feeds)
    text = str(loaded[3].profile(feeds, repeat=1))
    assert "Y(i,j) = " in text and "B(i)" in text, text
    single = _model([_node("Softsign", ["x"])], {"x": x})
    assert "Y(i) = " in str(_compare(single, {"x": x})[0].profile({"x": x}, repeat=1))


def test_a_sequence_batch_times_a_constant_weight_runs_the_generated_gemm():
    """A 3-D MatMul (B, T, K) x (K, N) with a constant weight (a transformer's projection)
    is one (B * T) x K product on the generated GEMM, not a batched BLAS call."""
    rng = _rng()
    x = rng.standard_normal((2, 5, 48)).astype(np.float32)
    w = rng.standard_normal((48, 96)).astype(np.float32)
    nodes = [_node("Relu", ["x"], ["r"]), _node("MatMul", ["r", "w"])]
    loaded = _compare(_model(nodes, {"x": x}, constants={"w": w}), {"x": x})
    plans = [row.plan for row in loaded[3].profile({"x": x}, repeat=1).rows
             if row.op_type == "MatMul"]
    assert plans[0].startswith("generated GEMM (dense 10x48x96"), plans


def test_an_elementwise_node_on_a_strided_slice_is_a_planned_kernel():
    """Llama's rotate_half: Neg of the second half of a slice, then Concat. The Neg read a
    strided view in the recorded run; the plan still runs it as a prebound kernel on its
    buffer, not node by node."""
    x = _rng().standard_normal((1, 4, 6, 16)).astype(np.float32)
    constants = {"s0": np.array([0], np.int64), "s8": np.array([8], np.int64),
                 "s16": np.array([16], np.int64), "axis": np.array([3], np.int64)}
    nodes = [_node("Slice", ["x", "s0", "s8", "axis"], ["x1"]),
             _node("Slice", ["x", "s8", "s16", "axis"], ["x2"]),
             _node("Neg", ["x2"], ["n2"]), _node("Concat", ["n2", "x1"], axis=3)]
    nodes[1].name = "slice2"
    loaded = _compare(_model(nodes, {"x": x}, constants=constants), {"x": x})
    kinds = {s.step.node.op_type: s.kind for s in loaded[3].specialiser.latest().steps}
    assert kinds["Neg"] != "generic", kinds


def test_a_global_average_pool_sums_its_positions_as_one_axis():
    """GlobalAveragePool of (N, C, 7, 7): one statement summing 49 values a row (the spatial
    axes merged into one, and so are N and C), not 7 rows of 7; results as onnxruntime's."""
    x = _rng().standard_normal((2, 5, 7, 7)).astype(np.float32)
    loaded = _compare(_model([_node("GlobalAveragePool", ["x"])], {"x": x}), {"x": x})
    plan = loaded[3].profile({"x": x}, repeat=1).rows[0].plan
    assert plan.startswith("Y(i) = X(i,j) * "), plan


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op, mode, shape, blocksize", [
    ("DepthToSpace", "DCR", (2, 12, 3, 5), 2), ("DepthToSpace", "CRD", (1, 18, 4, 2), 3),
    ("SpaceToDepth", "DCR", (2, 3, 6, 9), 3), ("SpaceToDepth", "DCR", (1, 2, 4, 6), 2),
])
def test_block_moves_run_as_a_compiled_transpose_in_the_plan(op, mode, shape, blocksize, dtype):
    x = _rng().standard_normal(shape).astype(dtype)
    modes = {"mode": mode} if op == "DepthToSpace" else {}    # SpaceToDepth is DCR alone
    nodes = [_node("Relu", ["x"], ["r"]), _node(op, ["r"], blocksize=blocksize, **modes)]
    model = _model(nodes, {"x": x})
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        got = compiled.run({"x": x})["y"]
    assert f"compiled transpose ({op} {mode}, blocks of {blocksize} x {blocksize})" in \
        str(compiled.profile({"x": x}))
    want = tonnx.load(model, opt_level=0).run({"x": x})["y"]   # the op's NumPy reshape
    np.testing.assert_array_equal(got, want)
    if dtype == np.float32:
        _compare(model, {"x": x})
