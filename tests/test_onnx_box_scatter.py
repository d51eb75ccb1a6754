"""ScatterND whose constant indices address a box of the data (a slice assignment, as
PyTorch exports ``x[:, :, a:, b:] = y``): a strided copy, or the updates themselves where the
box is all of the data (``onnx/passes/scatters.py``). Against onnxruntime at every opt level;
other indices stay ScatterND."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.passes.scatters import BOX_OP, box_of  # noqa: E402


def _grid(*ranges: range) -> np.ndarray:
    """The coordinates of every element of the box ``ranges`` (ScatterND's indices)."""
    return np.stack(np.meshgrid(*(np.arange(r.start, r.stop, r.step) for r in ranges),
                                indexing="ij"), -1).astype(np.int64)


def _model(data_shape, indices, dtype=np.float32, declared=None):
    """``y = ScatterND(x + 1, indices, u * 2)``: data and updates computed, so that the
    scatter runs inside the plan rather than being folded."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(data_shape).astype(dtype)
    u = rng.standard_normal(indices.shape[:-1] + tuple(data_shape[indices.shape[-1]:])
                            ).astype(dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("Add", ["x", "one"], ["data"]),
             helper.make_node("Mul", ["u", "two"], ["updates"]),
             helper.make_node("ScatterND", ["data", "idx", "updates"], ["y"])]
    constants = {"idx": indices, "one": np.ones((), dtype), "two": np.full((), 2, dtype)}
    model = onnx_model(nodes, {"x": x, "u": u}, [("y", elem, declared or list(data_shape))],
                       constants, shapes={"x": declared} if declared else None)
    return model, {"x": x, "u": u}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("shape, ranges", [
    ((1, 2, 6, 5), (range(1), range(2), range(6), range(5))),          # all of it
    ((1, 2, 6, 5), (range(1), range(2), range(1, 6), range(1, 5))),    # a cls-token offset
    ((3, 7, 4), (range(0, 3, 2), range(1, 7, 3))),                     # strided, rows left
    ((5, 4), (range(2, 3),)),                                          # one row
])
def test_box_scatter_matches_onnxruntime(shape, ranges, dtype):
    model, feeds = _model(shape, _grid(*ranges), dtype)
    compiled = check_every_level(model, feeds)
    assert [n.op_type for n in compiled.graph.nodes].count(BOX_OP) == 1
    assert "idx" not in compiled.graph.constants     # the indices are dropped with the node


def test_other_indices_stay_scatter_nd():
    grid = _grid(range(4), range(3))
    for indices in (grid[::-1], grid.transpose(1, 0, 2), np.zeros((2, 2), np.int64)):
        model, feeds = _model((4, 3), np.ascontiguousarray(indices))
        compiled = check_every_level(model, feeds, levels=(3,))
        assert "ScatterND" in [n.op_type for n in compiled.graph.nodes], indices


def test_box_of():
    assert box_of(_grid(range(2), range(3, 9, 3))) == ([0, 3], [1, 3])
    assert box_of(_grid(range(2), range(3))[..., :1]) is None      # depth 1 of rank-2 q
    assert box_of(-_grid(range(2), range(3))) is None               # negative coordinates
    assert box_of(np.zeros((0, 1), np.int64)) is None


def test_box_outside_the_data_is_a_shape_error():
    """The data's first axis is symbolic: fed one row, the box's second row lies outside it,
    and the scatter refuses, naming the node, as ScatterND does for an index outside."""
    model, feeds = _model((3, 6), _grid(range(2), range(4, 6)), declared=["n", 6])
    compiled = tonnx.load(model, opt_level=2)
    assert BOX_OP in [n.op_type for n in compiled.graph.nodes]
    feeds["x"] = feeds["x"][:1]
    with pytest.raises(ta.ShapeError, match="ScatterND.*outside the data"):
        compiled.run(feeds)
