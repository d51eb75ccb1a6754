"""Sequences known at load (frontend/sequences.py) against onnxruntime at every opt level:
``torch.unbind``/``torch.stack`` forms, list building with positions from either end, uneven
splits, the opset-11 forms; then the refusals: run-time positions, sequences a graph returns,
positions outside the list."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

X = np.random.default_rng(4).standard_normal((3, 4, 5)).astype(np.float32)


def _ints(*values):
    return np.array(values if len(values) != 1 else values[0], np.int64)


@pytest.mark.parametrize("opset", [11, 17])
def test_unbind_then_stack_reversed(opset):
    """``torch.stack(list(reversed(x.unbind(1))), dim=-1)`` as a scripted export writes it."""
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=1, keepdims=0),
             helper.make_node("SequenceLength", ["s"], ["n"]),
             helper.make_node("SequenceAt", ["s", "last"], ["a"]),
             helper.make_node("SequenceAt", ["s", "first"], ["b"]),
             helper.make_node("SequenceConstruct", ["a", "b"], ["pair"]),
             helper.make_node("ConcatFromSequence", ["pair"], ["y"], axis=-1, new_axis=1),
             helper.make_node("Relu", ["y"], ["z"])]
    model = onnx_model(nodes, {"x": X}, [("z", TensorProto.FLOAT, [3, 5, 2]),
                                         ("n", TensorProto.INT64, [])],
                       {"last": _ints(-1), "first": _ints(0)}, opset=opset)
    compiled = check_every_level(model, {"x": X})
    assert "sequences at load: 6 sequence op(s) as tensor ops" in compiled.stage_text("plan")


def test_list_building_with_positions():
    """Empty, insert at the end, at the front and at -1, erase, then concatenate on axis 0."""
    a, b, c = (X[k] for k in range(3))
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=TensorProto.FLOAT),
             helper.make_node("SequenceInsert", ["s0", "a"], ["s1"]),
             helper.make_node("SequenceInsert", ["s1", "b", "zero"], ["s2"]),     # b, a
             helper.make_node("SequenceInsert", ["s2", "c", "minus_one"], ["s3"]),  # b, c, a
             helper.make_node("SequenceInsert", ["s3", "a"], ["s4"]),             # b, c, a, a
             helper.make_node("SequenceErase", ["s4", "one"], ["s5"]),            # b, a, a
             helper.make_node("SequenceErase", ["s5"], ["s6"]),                   # b, a
             helper.make_node("ConcatFromSequence", ["s6"], ["y"], axis=0),
             helper.make_node("SequenceLength", ["s4"], ["n"])]
    model = onnx_model(nodes, {"a": a, "b": b, "c": c},
                       [("y", TensorProto.FLOAT, [8, 5]), ("n", TensorProto.INT64, [])],
                       {"zero": _ints(0), "minus_one": _ints(-1), "one": _ints(1)})
    check_every_level(model, {"a": a, "b": b, "c": c},
                      {"y": np.concatenate([b, a]), "n": np.array(4, np.int64)})


@pytest.mark.parametrize("opset", [11, 18])
@pytest.mark.parametrize("split", [_ints(3), _ints([1, 3]), _ints(4)])
def test_splits(opset, split):
    """A scalar split leaves a shorter last piece (5 = 3 + 2); a list gives the pieces."""
    nodes = [helper.make_node("SplitToSequence", ["x", "split"], ["s"], axis=2),
             helper.make_node("SequenceAt", ["s", "last"], ["y"]),
             helper.make_node("SequenceAt", ["s", "first"], ["f"]),
             helper.make_node("Mul", ["f", "f"], ["g"])]
    sizes = [3, 2] if split.ndim == 0 and split == 3 else \
        ([1, 3] if split.ndim else [4, 1])
    model = onnx_model(nodes, {"x": X[..., :4] if split.ndim else X},
                       [("y", TensorProto.FLOAT, [3, 4, sizes[-1]]),
                        ("g", TensorProto.FLOAT, [3, 4, sizes[0]])],
                       {"split": split, "last": _ints(-1), "first": _ints(0)}, opset=opset)
    check_every_level(model, {"x": X[..., :4] if split.ndim else X})


def test_run_time_position_is_refused_naming_the_node():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0, keepdims=0),
             helper.make_node("SequenceAt", ["s", "k"], ["y"], name="pick")]
    model = onnx_model(nodes, {"x": X, "k": _ints(1)}, [("y", TensorProto.FLOAT, [4, 5])])
    with pytest.raises(ta.UnsupportedError, match=r"node pick \(SequenceAt\): its position "
                                                  r"\('k'\) is computed at run time"):
        tonnx.load(model)


def test_position_outside_the_list_is_refused():
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"]),
             helper.make_node("SequenceAt", ["s", "k"], ["y"], name="pick")]
    model = onnx_model(nodes, {"x": X}, [("y", TensorProto.FLOAT, [3, 4, 5])],
                       {"k": _ints(2)})
    with pytest.raises(ta.UnsupportedError, match="position 2 is outside a sequence of 2"):
        tonnx.load(model)


def test_returned_sequence_is_refused_with_the_reason():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["s"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                              [seq])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ta.TensorAlgebraError, match="'s' is a sequence_type, not a tensor"):
        tonnx.load(model)
