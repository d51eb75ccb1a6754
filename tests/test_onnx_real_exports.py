"""Regressions from models exported by real libraries (``benchmarks/onnx_real.py``), each
rebuilt with onnx.helper as the smallest graph that showed the fault and compared with
onnxruntime at every opt level (level 3 three times, so that the static plan runs):

- transformers 5's BERT builds its position ids with ``GatherElements``;
- GPT-2's attention guards its softmax with ``IsNaN`` (and ``IsInf`` is its sibling).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
LEVELS = (0, 1, 2, 3)


def _model(nodes, feeds, outputs, constants=None, opset=17):
    return onnx_model(nodes, feeds, outputs, constants, opset)


def _compare(model, feeds):
    check_every_level(model, feeds, rtol=RTOL, atol=ATOL, levels=LEVELS)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_matches_onnxruntime(axis):
    rng = np.random.default_rng(19)
    data = rng.standard_normal((3, 4)).astype(np.float32)
    shape = (3, 2) if axis else (2, 4)
    size = data.shape[axis]
    index = rng.integers(-size, size, shape).astype(np.int64)
    node = helper.make_node("GatherElements", ["data", "index"], ["y"], axis=axis)
    _compare(_model([node], {"data": data, "index": index}, [("y", TensorProto.FLOAT, shape)]),
             {"data": data, "index": index})


def test_gather_elements_position_ids_as_bert_exports_them():
    """BERT's ``position_ids.expand(batch, -1).gather(1, ...)`` after transformers 5."""
    ids = np.arange(8, dtype=np.int64).reshape(1, 8)
    tokens = np.zeros((2, 8), np.int64)
    nodes = [helper.make_node("Shape", ["tokens"], ["shape"]),
             helper.make_node("Expand", ["ids", "shape"], ["wide"]),
             helper.make_node("GatherElements", ["wide", "pick"], ["y"], axis=1)]
    pick = np.tile(np.arange(8, dtype=np.int64)[::-1], (2, 1))
    _compare(_model(nodes, {"tokens": tokens}, [("y", TensorProto.INT64, [2, 8])],
                    {"ids": ids, "pick": pick}), {"tokens": tokens})


def test_gather_elements_refuses_an_index_out_of_range():
    data = np.zeros((2, 3), np.float32)
    index = np.array([[0, 3]], np.int64)
    node = helper.make_node("GatherElements", ["data", "index"], ["y"], axis=1, name="ge")
    model = tonnx.load(_model([node], {"data": data, "index": index},
                              [("y", TensorProto.FLOAT, [1, 2])]))
    with pytest.raises(ta.ShapeError, match="ge.*outside"):
        model.run({"data": data, "index": index})


@pytest.mark.parametrize("op_type,attributes", [
    ("IsNaN", {}), ("IsInf", {}), ("IsInf", {"detect_negative": 0}),
    ("IsInf", {"detect_positive": 0})])
def test_isnan_and_isinf_match_onnxruntime(op_type, attributes):
    x = np.array([[0.0, np.nan, np.inf, -np.inf], [1.5, -2.0, 3e38, np.nan]], np.float32)
    node = helper.make_node(op_type, ["x"], ["y"], **attributes)
    _compare(_model([node], {"x": x}, [("y", TensorProto.BOOL, [2, 4])]), {"x": x})


def test_isnan_guarded_softmax_as_gpt2_exports_it():
    """``where(isnan(softmax(s)), 0, softmax(s))`` with a fully masked row (all -inf)."""
    scores = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    scores[1] = -np.inf
    nodes = [helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["bad"]),
             helper.make_node("Where", ["bad", "zero", "p"], ["y"])]
    _compare(_model(nodes, {"s": scores}, [("y", TensorProto.FLOAT, [2, 4])],
                    {"zero": np.zeros((), np.float32)}), {"s": scores})


def _renamed(node, rename):
    """A copy of ``node`` (and of its subgraphs) with every value name passed through
    ``rename``."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = node.name + "_2"
    copy.input[:] = [rename(n) for n in node.input]
    copy.output[:] = [rename(n) for n in node.output]
    for attribute in copy.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graph = attribute.g
            for values in (graph.input, graph.output, graph.value_info):
                for value in values:
                    value.name = rename(value.name)
            for init in graph.initializer:
                init.name = rename(init.name)
            nodes = [_renamed(n, rename) for n in graph.node]
            del graph.node[:]
            graph.node.extend(nodes)
    return copy


def test_two_dynamo_bags_share_one_sequence_empty():
    """The dynamo exporter writes one ``SequenceEmpty`` for every ``nn.EmbeddingBag`` of a
    model (its optimizer merges the identical nodes): both Loops start from it."""
    from test_onnx_bag_loops import IDS, _ort, dynamo_bag

    one = dynamo_bag("sum")
    graph = one.graph
    keep = {v.name for v in graph.input} | {i.name for i in graph.initializer} | {"result"}

    def rename(name):
        return name if not name or name in keep else name + "_2"

    second = [_renamed(n, rename) for n in graph.node if n.op_type != "SequenceEmpty"]
    nodes = list(graph.node) + second + [helper.make_node("Add", ["y", "y_2"], ["z"],
                                                          name="both")]
    output = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    output.CopyFrom(graph.output[0])
    output.name = "z"
    two = helper.make_graph(nodes, "two_bags", list(graph.input), [output],
                            list(graph.initializer))
    model = helper.make_model(two, opset_imports=list(one.opset_import))
    model.ir_version = one.ir_version
    onnx.checker.check_model(model)
    assert [n.op_type for n in nodes].count("SequenceEmpty") == 1
    feeds = {"input": np.array(IDS, np.int64), "offsets": np.array([0, 3, 3, 7], np.int64)}
    expected = _ort(model, feeds)
    for level in LEVELS:
        compiled = tonnx.load(model, opt_level=level)
        ops = [s.node.op_type for s in compiled.executor.steps]
        assert "Loop" not in ops and ops.count("EmbeddingBag") == 2, (level, ops)
        for _ in range(3 if level == 3 else 1):
            np.testing.assert_allclose(compiled.run(feeds)["z"], expected, rtol=RTOL, atol=ATOL)


def test_a_sequence_empty_read_by_more_than_loops_is_still_refused():
    from test_onnx_bag_loops import dynamo_bag

    model = dynamo_bag("sum")
    graph = model.graph
    graph.node.append(helper.make_node("SequenceLength", ["result"], ["length"], name="len"))
    with pytest.raises(ta.UnsupportedError, match="n19_2.*does not start empty"):
        tonnx.load(model)


@pytest.mark.parametrize("equation, a_shape, b_shape, form", [
    ("ij,jk->ik", (5, 7), (7, 1), (0, False)),                 # DCN's cross layer
    ("bnik,bnjk->bnij", (2, 3, 4, 6), (2, 3, 5, 6), (2, True)),  # AutoInt's attention scores
    ("b i j , b j k -> b i k", (2, 3, 4), (2, 4, 5), (1, False)),
    ("bhd,bmd->bhmd", (2, 3, 4), (2, 5, 4), None),             # xDeepFM's outer product
    ("ij,jk", (2, 3), (3, 4), None),                           # implicit output
    ("ii,ik->ik", (3, 3), (3, 4), None),
])
def test_einsum_matrix_products_become_matmuls(equation, a_shape, b_shape, form):
    from tensoralg.onnx.passes.einsum_products import product_form

    assert product_form(equation) == form
    rng = np.random.default_rng(7)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)
    out_shape = np.einsum(equation.replace(" ", ""), a, b).shape
    model = _model([node], {"a": a, "b": b}, [("y", TensorProto.FLOAT, list(out_shape))],
                   opset=17)
    _compare(model, {"a": a, "b": b})
    ops = [s.node.op_type for s in tonnx.load(model, opt_level=2).executor.steps]
    assert ("Einsum" in ops) == (form is None), ops


@pytest.mark.parametrize("equation, a_shape, w_shape, replaced", [
    ("ibh,hnd->ibnd", (5, 2, 8), (8, 2, 4), True),             # XLNet's projections
    ("ibnd,hnd->ibh", (5, 2, 2, 4), (8, 2, 4), True),           # ... and its output
    ("ibnd,ndh->ibh", (5, 2, 2, 4), (2, 4, 8), True),
    ("bh,hk->bk", (3, 8), (8, 6), True),                        # plain: product_form's
    ("ibh,hnd->bind", (5, 2, 8), (8, 2, 4), False),             # kept axes not last
    ("ibh,bnd->ihnd", (5, 2, 8), (2, 3, 4), False),             # nothing contracted
    ("bih,hd->bid", (0, 3, 8), (8, 4), True),                   # an empty batch
    ("ibh,hnd->ibn", (5, 2, 8), (8, 2, 4), False),              # d summed in the weight alone
])
def test_products_by_a_constant_weight_become_matmuls(equation, a_shape, w_shape, replaced):
    rng = np.random.default_rng(9)
    a = rng.standard_normal(a_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    node = helper.make_node("Einsum", ["a", "w"], ["y"], equation=equation)
    out_shape = np.einsum(equation, a, w).shape
    model = _model([node], {"a": a}, [("y", TensorProto.FLOAT, list(out_shape))], {"w": w})
    _compare(model, {"a": a})
    ops = [s.node.op_type for s in tonnx.load(model, opt_level=2).executor.steps]
    assert ("Einsum" not in ops) == replaced, ops


@pytest.mark.parametrize("equation, a_shape, b_shape, replaced", [
    ("ibnd,jbnd->bnij", (5, 2, 3, 4), (6, 2, 3, 4), True),     # XLNet's attention scores
    ("bqhd,bkhd->bhqk", (2, 5, 3, 4), (2, 6, 3, 4), True),
    ("ibnd,jbnd->bnji", (5, 2, 3, 4), (6, 2, 3, 4), True),     # j before i: B's role taken
    ("ibnd,jbnd->bnij", (5, 2, 3, 0), (6, 2, 3, 0), True),     # nothing to contract
    ("ibne,jbnd->bnij", (5, 2, 3, 4), (6, 2, 3, 4), False),    # two contracted letters
    ("bind,snd->bnis", (2, 5, 3, 4), (6, 3, 4), True),          # Funnel: b broadcast
    ("binh,tnh->bnit", (2, 5, 3, 4), (6, 3, 4), True),
    ("bnij,jbnd->ibnd", (2, 3, 5, 6), (6, 2, 3, 4), True),      # XLNet: output transposed
    ("bnij,bjnd->bind", (2, 3, 5, 6), (2, 6, 3, 4), True),      # Funnel
    ("bind,snd->bnsd", (2, 5, 3, 4), (6, 3, 4), False),         # d kept: not contracted
    ("bind,bd->bnid", (2, 5, 3, 4), (2, 4), False),             # nothing only in the second
])
def test_batched_products_of_two_operands_become_matmuls(equation, a_shape, b_shape,
                                                         replaced):
    rng = np.random.default_rng(10)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)
    out_shape = np.einsum(equation, a, b).shape
    model = _model([node], {"a": a, "b": b}, [("y", TensorProto.FLOAT, list(out_shape))])
    _compare(model, {"a": a, "b": b})
    ops = [s.node.op_type for s in tonnx.load(model, opt_level=2).executor.steps]
    assert ("Einsum" not in ops) == replaced, ops


@pytest.mark.parametrize("equation, shape, replaced", [
    ("ijbn->bnij", (2, 3, 4, 5), True), ("ij->ji", (3, 0), True), ("ii->i", (3, 3), False),
    ("ij->i", (3, 4), False)])
def test_one_operand_reorderings_become_transposes(equation, shape, replaced):
    a = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    node = helper.make_node("Einsum", ["a"], ["y"], equation=equation)
    out_shape = np.einsum(equation, a).shape
    model = _model([node], {"a": a}, [("y", TensorProto.FLOAT, list(out_shape))])
    _compare(model, {"a": a})
    ops = [s.node.op_type for s in tonnx.load(model, opt_level=2).executor.steps]
    assert ("Einsum" not in ops) == replaced, ops


@pytest.mark.parametrize("exponent, replaced", [(2.0, True), (3.0, True), (0.5, False),
                                                (4.0, False)])
def test_pow_by_two_or_three_becomes_multiplications(exponent, replaced):
    """GPT-2's tanh-GELU: ``x + 0.044715 * pow(x, 3)`` inside tanh, fused."""
    x = np.random.default_rng(8).standard_normal((4, 16)).astype(np.float32) * 3
    x[0, :3] = [0.0, -0.0, np.inf]
    nodes = [helper.make_node("Pow", ["x", "e"], ["p"]),
             helper.make_node("Mul", ["p", "c"], ["q"]),
             helper.make_node("Add", ["x", "q"], ["s"]),
             helper.make_node("Tanh", ["s"], ["y"])]
    constants = {"e": np.array(exponent, np.float32), "c": np.array(0.044715, np.float32)}
    feeds = {"x": np.abs(x) if exponent == 0.5 else x}
    model = _model(nodes, feeds, [("y", TensorProto.FLOAT, [4, 16])], constants)
    _compare(model, feeds)
    steps = tonnx.load(model, opt_level=2).executor.steps
    ops = [n.op_type for s in steps for n in (s.node.attributes["program"].nodes
                                              if s.node.op_type == "Fused" else [s.node])]
    assert ("Pow" not in ops) == replaced, ops
