"""Shape inference again after constant folding (``passes/pipeline.refold_shapes``): a value
whose shape depends on a computed value (TopK by a ``k`` computed from a Shape) has no static
shape in the model as exported; once ``k`` is folded, inference sees through, the Shape of the
result folds, and so does everything computed from it (here a Pad's pads, as in deepctr's
CCPM). Shapes that stay dynamic (a free batch dimension) leave the graph as it was."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402


def _model(batch: int | str = 2) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "two"], ["n"], axis=0),
        helper.make_node("Min", ["n", "four"], ["k"]),
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=2),
        helper.make_node("Shape", ["v"], ["sv"]),
        helper.make_node("Gather", ["sv", "two"], ["kv"], axis=0),
        helper.make_node("Sub", ["five", "kv"], ["extra"]),
        helper.make_node("Concat", ["zeros5", "extra"], ["pads"], axis=0),
        helper.make_node("Pad", ["v", "pads"], ["y"]),
    ]
    constants = [numpy_helper.from_array(np.array([2], np.int64), "two"),
                 numpy_helper.from_array(np.array([4], np.int64), "four"),
                 numpy_helper.from_array(np.array([5], np.int64), "five"),
                 numpy_helper.from_array(np.zeros(5, np.int64), "zeros5")]
    graph = helper.make_graph(
        nodes, "refold", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3, 5])], constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray) -> np.ndarray:
    top = -np.sort(-x, axis=2, kind="stable")[:, :, :4]
    return np.pad(top, ((0, 0), (0, 0), (0, 1)))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_a_shape_computed_from_a_folded_k_folds(level):
    compiled = tonnx.load(_model(), opt_level=level)
    assert [n.op_type for n in compiled.graph.nodes] == ["TopK", "Pad"]
    assert "shape inference after folding: 1 round(s)" in compiled.graph.notes
    x = np.random.default_rng(0).standard_normal((2, 3, 10)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": x})["y"], _expected(x), rtol=1e-6)


def test_level_0_and_a_free_batch_keep_their_nodes():
    x = np.random.default_rng(1).standard_normal((2, 3, 10)).astype(np.float32)
    plain = tonnx.load(_model(), opt_level=0)
    assert len(plain.graph.nodes) == 9
    free = tonnx.load(_model("batch"), opt_level=3)
    assert any(n.op_type == "Shape" for n in free.graph.nodes)
    for compiled in (plain, free):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], _expected(x), rtol=1e-6)


def test_a_pad_by_folded_amounts_gets_a_static_shape():
    """Pads computed from the input's shape fold at load, but the first inference saw them
    computed: with no Shape node left, inference runs again for the Pad that reads only known
    values (MONAI's BasicUNet pads each upsampled map so; the 3-D Conv after it needed the
    static shape to run as 2-D convolutions)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["sx"]),
        helper.make_node("Gather", ["sx", "two"], ["h"], axis=0),
        helper.make_node("Sub", ["six", "h"], ["extra"]),
        helper.make_node("Concat", ["zeros5", "extra"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["p"], mode="edge"),
        helper.make_node("Relu", ["p"], ["y"]),
    ]
    constants = [numpy_helper.from_array(np.array([2], np.int64), "two"),
                 numpy_helper.from_array(np.array([6], np.int64), "six"),
                 numpy_helper.from_array(np.zeros(5, np.int64), "zeros5")]
    graph = helper.make_graph(
        nodes, "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = tonnx.load(model, opt_level=1)
    assert "shape inference after folding: 1 round(s)" in compiled.graph.notes
    assert compiled.graph.static_shapes["p"] == (1, 3, 6)
    x = np.random.default_rng(2).standard_normal((1, 3, 4)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": x})["y"],
                               np.maximum(np.pad(x, ((0, 0), (0, 0), (0, 2)), mode="edge"), 0))
