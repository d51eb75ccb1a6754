"""The generated TopK row kernel (``runtime/select.py``, ``program.top_k``): the best ``k``
values of every row along any axis, equal values in position order, NaNs last, for float32,
float64, int32 and int64, exactly as a stable sort would choose them; other dtypes and large
``k`` are left to the caller (None)."""
from __future__ import annotations

import numpy as np
import pytest

from tensoralg import program
from tensoralg.runtime.select import MAX_K


def _sorted(x: np.ndarray, k: int, axis: int, largest: bool):
    """What ONNX asks for, by NumPy's stable sort (NaNs last either way)."""
    if x.dtype.kind == "f":
        keys = np.where(np.isnan(x), np.inf, -x if largest else x)
    else:
        keys = -x.astype(object) if largest else x.astype(object)
    order = np.argsort(keys, axis=axis, kind="stable")
    chosen = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, chosen, axis=axis), chosen


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape, axis", [((6, 26, 3), 1), ((7, 9), -1), ((4, 1), 1),
                                         ((3, 10, 2, 2), 0), ((33,), 0)])
def test_every_k_matches_a_stable_sort(dtype, shape, axis):
    rng = np.random.default_rng(len(shape) + axis)
    x = rng.integers(-3, 4, shape).astype(dtype)             # many ties
    if dtype.startswith("float"):
        x[rng.random(shape) < 0.1] = np.nan
    else:
        info = np.iinfo(dtype)
        x.flat[:2] = info.min, info.max
    for k in range(x.shape[axis] + 1):
        for largest in (True, False):
            values, where = program.top_k(x, k, axis, largest)
            want_values, want_where = _sorted(x, k, axis, largest)
            np.testing.assert_array_equal(where, want_where)
            np.testing.assert_array_equal(values, want_values)
            assert values.dtype == x.dtype and where.dtype == np.int64


def test_strided_input_and_empty_rows():
    x = np.random.default_rng(1).standard_normal((8, 40))[:, ::3]      # not contiguous
    values, where = program.top_k(x, 3, 1)
    np.testing.assert_array_equal(where, _sorted(x, 3, 1, True)[1])
    empty, none = program.top_k(np.zeros((0, 5)), 2, 1)
    assert empty.shape == none.shape == (0, 2)


def test_left_to_the_caller_other_dtypes_and_large_k():
    assert program.top_k(np.ones((2, 3), np.float16), 1) is None
    assert program.top_k(np.ones((2, 3), bool), 1) is None
    assert program.top_k(np.ones((2, MAX_K + 1)), MAX_K + 1) is None
    assert program.top_k(np.ones((2, MAX_K)), MAX_K) is not None


def test_k_beyond_the_row_and_axes_beyond_the_array_are_refused():
    import tensoralg as ta

    with pytest.raises(ta.ShapeError, match="k = 4"):
        program.top_k(np.ones((2, 3)), 4, 1)
    with pytest.raises(ta.ShapeError, match="k = -1"):
        program.top_k(np.ones((2, 3)), -1, 1)
    for axis in (2, -3):
        with pytest.raises(ta.ShapeError, match=f"axis {axis}"):
            program.top_k(np.ones((2, 3)), 1, axis)
    with pytest.raises(ta.ShapeError, match="axis 0"):
        program.top_k(np.float64(1.0), 1, 0)


def test_a_ccpm_k_max_pooling_matches_onnxruntime():
    """deepctr's CCPM pools the k largest of each convolution output column: TopK over axis
    2 of (batch, filters, fields, 1), k = 3, float32."""
    pytest.importorskip("onnxruntime")
    from test_onnx_ops_coverage import _compare, _model, _node

    x = np.random.default_rng(7).standard_normal((16, 4, 26, 1)).astype(np.float32)
    x[0, 0, :5, 0] = x[0, 0, 5, 0]                              # ties
    _compare(_model([_node("TopK", ["x", "k"], ["values", "indices"], axis=2)], {"x": x},
                    outputs=("values", "indices"), constants={"k": np.array([3], np.int64)}),
             {"x": x})


# -- a row's largest or smallest value alone (program.row_extreme: ReduceMax, ReduceMin)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("shape, first, last", [((6, 26, 3), 1, 1), ((7, 9), 1, 1),
                                                ((4, 1), 1, 1), ((3, 10, 2, 2), 0, 0),
                                                ((3, 4, 5, 2), 1, 2), ((33,), 0, 0),
                                                ((2, 3, 4), 0, 2), ((3, 1000), 1, 1),
                                                ((2, 47, 3), 1, 1), ((16,), 0, 0)])
def test_row_extremes_match_numpy(dtype, shape, first, last):
    rng = np.random.default_rng(len(shape) + first)
    x = rng.integers(-50, 50, shape).astype(dtype)
    if dtype.startswith("int"):
        info = np.iinfo(dtype)
        x.flat[:2] = info.min, info.max
    axes = tuple(range(first, last + 1))
    for largest, reduce in ((True, np.max), (False, np.min)):
        got = program.row_extreme(x, first, last, largest)
        np.testing.assert_array_equal(got, reduce(x, axis=axes, keepdims=True))
        assert got.dtype == x.dtype


def test_row_extremes_propagate_nan_and_read_strided_input():
    x = np.arange(24.0).reshape(4, 6)
    x[1, 3] = np.nan
    x[2, 0] = np.nan
    strided = x[:, ::2]
    for largest, reduce in ((True, np.max), (False, np.min)):
        np.testing.assert_array_equal(program.row_extreme(x, 1, 1, largest),
                                      reduce(x, axis=1, keepdims=True))
        np.testing.assert_array_equal(program.row_extreme(strided, 1, 1, largest),
                                      reduce(strided, axis=1, keepdims=True))
    assert program.row_extreme(np.ones((2, 0, 3)), 0, 0).shape == (1, 0, 3)
    # rows longer than the kernel's lanes (runtime/select.EXTREME_LANES): a NaN in any lane,
    # in the tail, or first, wins; extremes in the tail and in the last lane are found
    for position in (0, 5, 15, 16, 31, 32, 99):
        row = np.arange(100.0)
        row[position] = np.nan
        for largest in (True, False):
            assert np.isnan(program.row_extreme(row, 0, 0, largest)[0])
    for position in (0, 15, 16, 95, 99):
        row = np.zeros(100, np.float32)
        row[position] = 7
        assert program.row_extreme(row, 0, 0, True)[0] == 7
        row[position] = -7
        assert program.row_extreme(row, 0, 0, False)[0] == -7


def test_row_extremes_left_to_the_caller_and_refused():
    from tensoralg.errors import ShapeError

    assert program.row_extreme(np.ones(3, np.float16), 0, 0) is None
    assert program.row_extreme(np.ones(3, bool), 0, 0) is None
    with pytest.raises(ShapeError, match="no values"):
        program.row_extreme(np.ones((2, 0)), 1, 1)
    with pytest.raises(ShapeError, match="axes"):
        program.row_extreme(np.ones((2, 3)), 1, 2)
    with pytest.raises(ShapeError, match="axes"):
        program.row_extreme(np.array(3.0), 0, 0)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes, keepdims", [([-1], 1), ([1], 0), ([0, 2], 1), ([1, 2], 0)])
def test_onnx_reduce_extremes_match_onnxruntime(op, axes, keepdims):
    from conftest import onnxruntime_outputs
    from onnx import TensorProto
    from onnx import helper as h

    import tensoralg.onnx as tonnx

    node = h.make_node(op, ["x"], ["y"], axes=axes, keepdims=keepdims)
    kept = [1 if a in [d % 3 for d in axes] else n for a, n in enumerate((3, 4, 5))]
    shape = kept if keepdims else [n for a, n in enumerate(kept)
                                   if a not in [d % 3 for d in axes]]
    graph = h.make_graph([node], "reduce", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [3, 4, 5])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    want = onnxruntime_outputs(model, {"x": x})[0]
    for level in (0, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3):
            got = compiled.run({"x": x})["y"]
        np.testing.assert_array_equal(got, want)
    assert "generated row" in str(compiled.profile({"x": x}))
    # level 3's plan runs consecutive axes prebound: new values go through the same call
    consecutive = axes != [0, 2]
    assert consecutive == any("prebound" in (s.plan or "")
                              for s in compiled.specialiser.latest().steps)
    for seed in (2, 3):
        other = np.random.default_rng(seed).standard_normal((3, 4, 5)).astype(np.float32)
        other[0, 0, 0] = np.nan
        np.testing.assert_array_equal(compiled.run({"x": other})["y"],
                                      onnxruntime_outputs(model, {"x": other})[0])


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("largest", [1, 0])
@pytest.mark.parametrize("shape, axis", [((40, 221), -1), ((70, 120), 0), ((40, 100, 3), 1),
                                         ((2, 100), 1), ((3, 4000), 1)])
@pytest.mark.parametrize("few", [False, True])
def test_onnx_top_k_of_long_rows_matches_a_stable_sort(dtype, largest, shape, axis, few):
    """k past MAX_K: the packed-key sort (on 8192 values or more; the last case, fewer, the
    stable argsort; ``few``: k a quarter of the axis or less, its keys partitioned before the
    sort), ties by position, NaNs last, -0.0 tied with 0.0."""
    from conftest import onnxruntime_outputs
    from onnx import TensorProto, numpy_helper
    from onnx import helper as h

    import tensoralg.onnx as tonnx

    rng = np.random.default_rng(len(shape) + largest)
    x = rng.integers(-6, 7, shape).astype(dtype)              # many ties
    if dtype == "float32":
        x[rng.random(shape) < 0.05] = np.nan
        x[rng.random(shape) < 0.05] = -0.0
    else:
        x.flat[:2] = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    k = MAX_K + 1 if few else x.shape[axis] - 1
    assert k > MAX_K
    elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.INT32
    out = list(shape)
    out[axis] = k
    node = h.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    graph = h.make_graph([node], "topk", [h.make_tensor_value_info("x", elem, list(shape))],
                         [h.make_tensor_value_info("v", elem, out),
                          h.make_tensor_value_info("i", TensorProto.INT64, out)],
                         [numpy_helper.from_array(np.array([k], np.int64), "k")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    want_values, want_where = _sorted(np.where(x == 0, 0, x) if dtype == "float32" else x,
                                      k, axis, bool(largest))
    compiled = tonnx.load(model, opt_level=0)
    got = compiled.run({"x": x})
    packed = "packed" in str(compiled.profile({"x": x}))
    assert packed == (x.size >= 8192)
    np.testing.assert_array_equal(got["i"], want_where)
    np.testing.assert_array_equal(got["v"], np.take_along_axis(x, want_where, axis=axis))
    if dtype == "float32" and not np.isnan(x).any(axis=axis).any():
        np.testing.assert_array_equal(got["i"], onnxruntime_outputs(model, {"x": x})[1])
