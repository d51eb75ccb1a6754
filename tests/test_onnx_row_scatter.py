"""ScatterElements along axis 0 whose index is the same along the other axes: graph networks'
message aggregation (PyTorch Geometric exports ``index_add_``/``scatter_reduce`` this way, the
edge index expanded over the features). ``add`` runs as the core's product with a one-entry-
per-column CSC matrix, ``max``/``min`` as a generated loop (``runtime/scatter.py``), and an
index made by ``Expand`` is read before it is expanded (``RowScatter``,
``onnx/passes/scatters.py``). Against onnxruntime at every opt level, on the core's dtypes,
with duplicates, negative indices, data that is not zero, empty updates and bad indices.
"""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg import program  # noqa: E402
from tensoralg.codegen import DiskCache  # noqa: E402
from tensoralg.onnx.passes.scatters import ROW_OP  # noqa: E402
from tensoralg.runtime.scatter import RowScatterer  # noqa: E402


def _edges(nodes: int, count: int, seed: int = 0) -> np.ndarray:
    """Target rows, unsorted, with repeats, some written as negative indices."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, nodes, count)
    return np.where(rng.random(count) < 0.2, rows - nodes, rows).astype(np.int64)


def _expanded_model(data, rows, updates, reduction, expand=True, opset=18):
    """``y = ScatterElements(data + 0, Expand(Unsqueeze(rows), shape(updates)), updates * 1)``
    (``expand=False``: the expanded index is an input): data and updates computed, so the
    scatter runs inside the plan."""
    elem = helper.np_dtype_to_tensor_dtype(data.dtype)
    tail = list(range(1, updates.ndim))
    nodes = [helper.make_node("Add", ["data", "zero"], ["d"]),
             helper.make_node("Mul", ["updates", "one"], ["u"])]
    constants = {"zero": np.zeros((), data.dtype), "one": np.ones((), data.dtype)}
    feeds = {"data": data, "updates": updates}
    if expand:
        nodes += [helper.make_node("Unsqueeze", ["rows", "tail"], ["column"]),
                  helper.make_node("Shape", ["u"], ["shape"]),
                  helper.make_node("Expand", ["column", "shape"], ["index"])]
        constants["tail"] = np.array(tail, np.int64)
        feeds["rows"] = rows
    else:
        feeds["index"] = np.ascontiguousarray(
            np.broadcast_to(rows.reshape((-1,) + (1,) * len(tail)), updates.shape))
    nodes.append(helper.make_node("ScatterElements", ["d", "index", "u"], ["y"], axis=0,
                                  reduction=reduction))
    model = onnx_model(nodes, feeds, [("y", elem, list(data.shape))], constants, opset=opset)
    return model, feeds


@pytest.mark.parametrize("reduction", ["add", "max", "min", "mul"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("expand", [True, False])
def test_row_scatter_matches_onnxruntime(reduction, dtype, expand):
    rng = np.random.default_rng(1)
    rows = _edges(30, 200)
    data = (rng.standard_normal((30, 4, 3)) * 4).astype(dtype)
    updates = (rng.standard_normal((200, 4, 3)) * 4).astype(dtype)
    if reduction == "mul":   # products of a few factors near one stay in range
        updates = np.where(rng.random(updates.shape) < 0.5, 1, 2).astype(dtype)
    model, feeds = _expanded_model(data, rows, updates, reduction, expand)
    compiled = check_every_level(model, feeds, rtol=1e-5, atol=1e-5)
    assert (ROW_OP in [n.op_type for n in compiled.graph.nodes]) == expand


@pytest.mark.parametrize("reduction", ["add", "max"])
def test_a_zero_start_and_one_dimensional_scatters(reduction):
    """The degree count of a graph: ones scattered into a zero vector (rank 1, no Expand)."""
    rows = _edges(50, 400, seed=3)
    feeds = {"data": np.zeros(50, np.float32),
             "updates": np.random.default_rng(2).random(400).astype(np.float32)}
    model = onnx_model([helper.make_node("ScatterElements", ["data", "rows", "updates"], ["y"],
                                         reduction=reduction)],
                       feeds, [("y", onnx.TensorProto.FLOAT, [50])], {"rows": rows}, opset=18)
    compiled = check_every_level(model, feeds)
    profile = str(compiled.profile(feeds))
    assert ("A(i,e) * U(e,j)" if reduction == "add" else "generated scatter") in profile, \
        profile


def test_the_sum_runs_as_the_core_kernel_and_max_as_the_generated_loop():
    rows = _edges(20, 64)
    data = np.zeros((20, 8), np.float32)
    updates = np.random.default_rng(4).standard_normal((64, 8)).astype(np.float32)
    for reduction, expected in (("add", "A(i,e) * U(e,j)"), ("max", "generated scatter")):
        model, feeds = _expanded_model(data, rows, updates, reduction)
        compiled = tonnx.load(model, opt_level=3)
        profile = str(compiled.profile(feeds))
        assert expected in profile, profile


def test_an_index_that_varies_along_the_features_scatters_element_by_element():
    """Expand of a (1, F) index: every row of updates goes to other rows per feature."""
    rng = np.random.default_rng(5)
    data = rng.standard_normal((6, 4)).astype(np.float32)
    updates = rng.standard_normal((3, 4)).astype(np.float32)
    feeds = {"data": data, "updates": updates, "rows": np.array([[5, 0, 2, 5]], np.int64)}
    nodes = [helper.make_node("Shape", ["updates"], ["shape"]),
             helper.make_node("Expand", ["rows", "shape"], ["index"]),
             helper.make_node("ScatterElements", ["data", "index", "updates"], ["y"],
                              reduction="add")]
    model = onnx_model(nodes, feeds, [("y", onnx.TensorProto.FLOAT, [6, 4])], opset=18)
    check_every_level(model, feeds)


@pytest.mark.parametrize("count", [0, 1])
def test_empty_and_single_updates(count):
    data = np.arange(12, dtype=np.float64).reshape(4, 3)
    updates = np.full((count, 3), 7.0)
    for reduction in ("add", "max"):
        model, feeds = _expanded_model(data, np.array([2] * count, np.int64), updates,
                                       reduction)
        check_every_level(model, feeds)


def test_features_of_width_zero():
    data = np.zeros((4, 0), np.float32)
    model, feeds = _expanded_model(data, np.array([1, 3], np.int64),
                                   np.zeros((2, 0), np.float32), "add")
    for level in (0, 3):
        assert tonnx.load(model, opt_level=level).run(feeds)["y"].shape == (4, 0)


@pytest.mark.parametrize("reduction", ["add", "max"])
@pytest.mark.parametrize("bad", [4, -5])
def test_an_index_outside_the_data_is_a_shape_error_naming_the_node(reduction, bad):
    data = np.zeros((4, 3), np.float32)
    updates = np.ones((2, 3), np.float32)
    for expand in (True, False):
        model, feeds = _expanded_model(data, np.array([1, bad], np.int64), updates, reduction,
                                       expand)
        for level in (0, 3):
            with pytest.raises(ta.ShapeError, match="outside the data"):
                tonnx.load(model, opt_level=level).run(feeds)


def test_the_generated_scatter_keeps_nan_and_checks_its_rows():
    scatterer = RowScatterer(DiskCache(tempfile.mkdtemp()))
    data = np.array([[0.0, np.nan], [1.0, 1.0]])
    updates = np.array([[np.nan, 5.0], [2.0, 3.0], [-1.0, 9.0]])
    for largest, combine in ((True, np.maximum), (False, np.minimum)):
        want = data.copy()
        combine.at(want, [0, 0, 1], updates)
        got = scatterer.combined(data, np.array([0, 0, 1]), updates, largest)
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="outside"):
        scatterer.combined(data, np.array([0, 2, 1]), updates, True)
    with pytest.raises(ValueError, match="outside"):
        scatterer.combined(np.zeros((0, 2)), np.array([0]), np.ones((1, 2)), True)
    with pytest.raises(ValueError, match="rows"):
        scatterer.combined(data, np.array([0, 1]), updates, True)
    assert program.scattered_extremes(np.zeros(3, np.float16), np.array([0]),
                                      np.ones(1, np.float16)) is None
    with pytest.raises(ta.ShapeError, match="outside"):
        program.scattered_extremes(np.zeros(3), np.array([3]), np.ones(1))


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_the_generated_scatter_matches_numpy_on_many_rows(dtype):
    rng = np.random.default_rng(6)
    data = (rng.standard_normal((300, 33)) * 100).astype(dtype)
    rows = rng.integers(0, 300, 5000)
    updates = (rng.standard_normal((5000, 33)) * 100).astype(dtype)
    for largest, combine in ((True, np.maximum), (False, np.minimum)):
        want = data.copy()
        combine.at(want, rows, updates)
        np.testing.assert_array_equal(
            program.scattered_extremes(data, rows, updates, largest), want)


@pytest.mark.parametrize("start", ["zeros", "data"])
def test_the_planned_scatter_checks_every_run_and_matches(start):
    """Level 3's static plan runs the sum as two prebound calls (ids, then the product):
    indices change from run to run, and a bad one is still refused after the plan is built."""
    rng = np.random.default_rng(7)
    data = np.zeros((12, 5), np.float32) if start == "zeros" else \
        rng.standard_normal((12, 5)).astype(np.float32)
    updates = rng.standard_normal((40, 5)).astype(np.float32)
    model, feeds = _expanded_model(data, _edges(12, 40), updates, "add")
    compiled = tonnx.load(model, opt_level=3)
    for seed in range(4):
        feeds["rows"] = _edges(12, 40, seed)
        want = data.copy()
        np.add.at(want, feeds["rows"], updates)
        np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    assert "prebound" in str(compiled.profile(feeds))
    feeds["rows"] = feeds["rows"].copy()
    feeds["rows"][7] = 12
    with pytest.raises(ta.ShapeError, match="outside the data"):
        compiled.run(feeds)


def test_a_constant_zero_start_is_not_read_by_the_planned_sum():
    """PyTorch Geometric's aggregation starts from ``ConstantOfShape`` zeros, folded at load:
    the plan's product then writes its output without adding the data."""
    rng = np.random.default_rng(8)
    updates = rng.standard_normal((30, 6)).astype(np.float64)
    feeds = {"updates": updates, "rows": _edges(9, 30)}
    nodes = [helper.make_node("ConstantOfShape", ["size"], ["zeros"],
                              value=helper.make_tensor("v", onnx.TensorProto.DOUBLE, [1], [0.0])),
             helper.make_node("Unsqueeze", ["rows", "tail"], ["column"]),
             helper.make_node("Shape", ["updates"], ["shape"]),
             helper.make_node("Expand", ["column", "shape"], ["index"]),
             helper.make_node("ScatterElements", ["zeros", "index", "updates"], ["y"],
                              reduction="add")]
    model = onnx_model(nodes, feeds, [("y", onnx.TensorProto.DOUBLE, [9, 6])],
                       {"size": np.array([9, 6], np.int64), "tail": np.array([1], np.int64)},
                       opset=18)
    compiled = check_every_level(model, feeds)
    assert "prebound" in str(compiled.profile(feeds))
    assert "D(i,j)" not in str(compiled.profile(feeds))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_both_index_types(index_dtype):
    """ONNX's two index types, both read by the plan's ids call."""
    rng = np.random.default_rng(9)
    data = np.zeros((10, 4), np.float32)
    updates = rng.standard_normal((25, 4)).astype(np.float32)
    rows = rng.integers(0, 10, 25).astype(index_dtype)
    model, feeds = _expanded_model(data, rows, updates, "add")
    check_every_level(model, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["add", "max", "min", "mul"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_nd_of_whole_rows(reduction, dtype):
    """``x.index_put_((idx,), y, accumulate=True)`` exports as ScatterND with indices (E, 1):
    the same row scatter as ScatterElements, with duplicates and negative rows."""
    rng = np.random.default_rng(10)
    data = (rng.standard_normal((12, 3, 2)) * 4).astype(dtype)
    updates = (rng.standard_normal((40, 3, 2)) * 4).astype(dtype)
    if reduction == "mul":
        updates = np.where(rng.random(updates.shape) < 0.5, 1, 2).astype(dtype)
    feeds = {"data": data, "updates": updates}
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Add", ["data", "zero"], ["d"]),
             helper.make_node("ScatterND", ["d", "rows", "updates"], ["y"],
                              reduction=reduction)]
    model = onnx_model(nodes, feeds, [("y", elem, [12, 3, 2])],
                       {"rows": _edges(12, 40, seed=11).reshape(40, 1),
                        "zero": np.zeros((), dtype)}, opset=18)
    compiled = check_every_level(model, feeds, rtol=1e-5, atol=1e-5)
    expected = {"add": "A(i,e) * U(e,j)", "max": "generated scatter",
                "min": "generated scatter", "mul": "numpy scatter of 40 rows"}[reduction]
    assert expected in str(compiled.profile(feeds))
