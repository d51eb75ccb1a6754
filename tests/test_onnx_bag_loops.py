"""Embedding bags exported as a ``Loop`` (tensoralg/onnx/passes/bags/loops.py): recognised at load at
every opt level, run as one sparse·dense contraction, compared with onnxruntime and PyTorch.

The models are built by hand with onnx.helper, node for node as torch 2.13 exports
``nn.EmbeddingBag`` (so these tests run without torch); when torch is installed the exported
models are checked too, and so is that the hand-built graphs still mirror them.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
INT64_MAX = 2**63 - 1
LEVELS = (0, 1, 2, 3)
ROWS, DIM = 10, 3


class _Net:
    """Nodes in order, named the way the TorchScript exporter names them (``/e/Op_k``)."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list = []
        self.count: Counter = Counter()

    def add(self, op: str, inputs: list, out: str | None = None, **attributes) -> str:
        k = self.count[op]
        self.count[op] += 1
        name = f"/e/{op}" + (f"_{k}" if k else "")
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attributes))
        return out

    def const(self, value) -> str:
        return self.add("Constant", [], value=numpy_helper.from_array(np.array(value)))

    def unsqueeze(self, x: str, axis: int) -> str:
        if self.opset >= 13:
            return self.add("Unsqueeze", [x, self.const(np.array([axis], np.int64))])
        return self.add("Unsqueeze", [x], axes=[axis])

    def reduce(self, mode: str, x: str) -> str:
        op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax"}[mode]
        if self.opset >= (13 if mode == "sum" else 18):
            axes = self.const(np.array([0], np.int64))
            extra = {"noop_with_empty_axes": 0} if mode == "sum" else {}
            return self.add(op, [x, axes], keepdims=0, **extra)
        return self.add(op, [x], axes=[0], keepdims=0)


def _table(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((ROWS, DIM)).astype(np.float32)


def torchscript_bag(mode: str = "sum", weighted: bool = False, opset: int = 17,
                    last_offset: bool = False, two_d: bool = False, body=None):
    """``nn.EmbeddingBag`` as ``torch.onnx.export(..., dynamo=False)`` writes it. ``body``,
    when given, edits the loop body's node list (for the refusal tests)."""
    net = _Net(opset)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    if two_d:      # offsets = Range(0, numel, bag size) over Reshape(input, [-1])
        numel = net.add("ReduceProd", [net.add("Shape", ["input"])], keepdims=0)
        shape = net.add("Shape", ["input"])
        size = net.add("Gather", [shape, net.const(np.array(1, np.int64))], axis=0)
        zero = net.const(np.array(0, np.int64))
        numel, size = net.add("Cast", [numel], to=I64), net.add("Cast", [size], to=I64)
        starts = net.add("Range", [zero, numel, size])
        indices = net.add("Reshape", ["input", net.const(i64(-1))], allowzero=0)
        true = net.const(np.array(True))
        axes0 = net.const(i64(0))
        total = net.add("Gather", [net.add("Shape", [indices]), net.const(np.array(0, np.int64))],
                        axis=0)
        bounds = net.add("Concat", [starts, net.unsqueeze(total, 0)], axis=0)
    else:
        indices = "input"
        true = net.const(np.array(True))
        axes0 = net.const(i64(0))
        if last_offset:
            bounds = "offsets"
        else:
            total = net.add("Gather", [net.add("Shape", ["input"]),
                                       net.const(np.array(0, np.int64))], axis=0)
            bounds = net.add("Concat", ["offsets", net.unsqueeze(total, 0)], axis=0)
    axes, first, last, steps = (net.const(i64(v)) for v in (0, 1, INT64_MAX, 1))
    ends = net.add("Slice", [bounds, first, last, axes, steps])
    count = net.add("Gather", [net.add("Shape", [ends]), net.const(np.array(0, np.int64))],
                    axis=0)
    main = net.nodes
    net.nodes = []
    step, cond = "21", "22"
    start = net.add("Gather", [bounds, step], axis=0)
    end = net.add("Gather", [ends, step], axis=0)
    start, end = net.unsqueeze(start, 0), net.unsqueeze(end, 0)
    rows = net.add("Gather", ["e.weight", net.add("Slice", [indices, start, end, axes0])], axis=0)
    if weighted:
        scale = net.unsqueeze(net.add("Slice", ["weights", start, end, axes0]), 1)
        rows = net.add("Mul", [rows, scale])
    row = net.reduce(mode, rows)
    cond_out = net.add("Cast", [true], to=BOOL)
    body_nodes = body(net.nodes) if body else net.nodes
    graph_body = helper.make_graph(
        body_nodes, "sub_graph",
        [helper.make_tensor_value_info(step, I64, []), helper.make_tensor_value_info(cond, BOOL, [])],
        [helper.make_tensor_value_info(cond_out, BOOL, []),
         helper.make_tensor_value_info(row, F32, ["Loopy_dim_1"])])
    main.append(helper.make_node("Loop", [count, true], ["y"], name="/e/Loop", body=graph_body))
    inputs = [helper.make_tensor_value_info("input", I64, ["n", 4] if two_d else ["n"])]
    if not two_d:
        inputs.append(helper.make_tensor_value_info("offsets", I64, ["n"]))
    if weighted:
        inputs.append(helper.make_tensor_value_info("weights", F32, ["n"]))
    return _model(main, inputs, ["Loopy_dim_0", "Loopy_dim_1"], opset,
                  [numpy_helper.from_array(_table(), "e.weight")])


def dynamo_bag(mode: str = "sum", weighted: bool = False, sequence_first: bool = False):
    """``nn.EmbeddingBag`` as ``torch.onnx.export(..., dynamo=True, dynamic_shapes=...)`` writes
    it (onnxscript's aten_embedding_bag): gathered rows, a Loop filling a sequence. The order of
    the two loop-carried values (counter, sequence) varies from one export to the next."""
    h = helper
    counter, seq = ("index_tensor_12", "result_11") if sequence_first else \
        ("index_tensor_11", "result_12")
    axis0 = "int64_0_1d" if mode == "sum" else "int64_0_1d_31"
    inits = [numpy_helper.from_array(_table(), "e.weight")]
    if not weighted:
        inits.append(numpy_helper.from_array(np.array([1.0], np.float32), "val_0"))
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in [
        ("neg_1", [-1]), ("int64_1_1d", [1]), ("index_tensor", 0), ("int64_1_13", 1),
        ("int64_2", 2), (axis0, [0])]]
    main = []
    if not weighted:
        main += [h.make_node("Shape", ["input"], ["val_1"], start=0, name="node_Shape_1"),
                 h.make_node("Expand", ["val_0", "val_1"], ["val_2"], name="node_Expand_2")]
    main += [h.make_node("Reshape", ["input", "neg_1"], ["indices_1d"], name="n1"),
             h.make_node("Gather", ["e.weight", "indices_1d"], ["new_weight"], name="n2"),
             h.make_node("Unsqueeze", ["weights" if weighted else "val_2", "int64_1_1d"],
                         ["tmp"], name="n4"),
             h.make_node("Mul", ["new_weight", "tmp"], ["new_weight_0"], name="n5"),
             h.make_node("Shape", ["indices_1d"], ["indices_size"], name="n8"),
             h.make_node("Size", ["offsets"], ["num_bag"], name="n9"),
             h.make_node("Concat", ["offsets", "indices_size"], ["offsets_7"], axis=0,
                         name="n14_n0_3"),
             h.make_node("Identity", ["num_bag"], ["num_bag_6"], name="n14_n1_3"),
             h.make_node("Identity", ["new_weight_0"], ["new_weight_8"], name="node_Identity_6"),
             h.make_node("SequenceEmpty", [], ["result"], name="n16"),
             h.make_node("Less", ["index_tensor", "num_bag"], ["cond_9"], name="n18")]
    zeros = h.make_graph([], "thenGraph_41", [], [h.make_tensor_value_info("row_result", F32,
                                                                           [1, DIM])],
                         [numpy_helper.from_array(np.zeros((1, DIM), np.float32), "row_result")])
    if mode == "max":       # the last bag's rows sliced to the end, as the exporter writes it
        to_end = h.make_graph([h.make_node("Slice", ["new_weight_0", "start", "indices_size"],
                                           ["weight_rows_46"], name="n0_14")],
                              "thenGraph_46", [], [h.make_value_info("weight_rows_46",
                                                                     h.TypeProto())])
        to_next = h.make_graph([h.make_node("Slice", ["new_weight_0", "start", "end"],
                                            ["weight_rows_47"], name="n0_15")],
                               "elseGraph_46", [], [h.make_value_info("weight_rows_47",
                                                                      h.TypeProto())])
        row = h.make_graph([
            h.make_node("Sub", ["num_bag", "int64_1_13"], ["tmp_44"], name="n3_9_n0_8"),
            h.make_node("Equal", [counter, "tmp_44"], ["cond_45"], name="n3_9_n1_8"),
            h.make_node("If", ["cond_45"], ["weight_rows_48"], then_branch=to_end,
                        else_branch=to_next, name="n3_9_n2_8"),
            h.make_node("ReduceMax", ["weight_rows_48", axis0], ["row_result_52"],
                        name="n3_9_n3_8")],
            "elseGraph_41", [], [h.make_value_info("row_result_52", h.TypeProto())])
    elif mode == "sum":
        row = h.make_graph([h.make_node("Slice", ["new_weight_0", "start", "end"],
                                        ["weight_rows"], name="n3_9_n0_9"),
                            h.make_node("ReduceSum", ["weight_rows", axis0], ["row_result_52"],
                                        name="n3_9_n1_9")],
                           "elseGraph_41", [], [h.make_value_info("row_result_52", h.TypeProto())])
    else:
        divide = h.make_graph([h.make_node("Cast", ["denominator"], ["tmp_36"], to=F32,
                                           name="node_Cast_0"),
                               h.make_node("Div", ["row_result_32", "tmp_36"], ["row_result_37"],
                                           name="n1_11")],
                              "thenGraph_57", [], [h.make_value_info("row_result_37",
                                                                     h.TypeProto())])
        keep = h.make_graph([h.make_node("Identity", ["row_result_32"], ["row_result_38"],
                                         name="n0_12")],
                            "elseGraph_57", [], [h.make_value_info("row_result_38", h.TypeProto())])
        last = h.make_graph([
            h.make_node("ReduceSum", ["weight_rows_27", axis0], ["row_result_32"], name="n1_10"),
            h.make_node("Shape", ["input"], ["tmp_33"], start=0, end=1, name="n2_9"),
            h.make_node("Sub", ["tmp_33", "start"], ["denominator"], name="n3_6"),
            h.make_node("CastLike", ["index_tensor", "denominator"], ["int64_0_34_cast"],
                        name="n5_3"),
            h.make_node("Greater", ["denominator", "int64_0_34_cast"], ["cond_35"], name="n6_3"),
            h.make_node("If", ["cond_35"], ["row_result_39"], then_branch=divide,
                        else_branch=keep, name="n7_3")],
            "thenGraph_52", [], [h.make_value_info("row_result_39", h.TypeProto())])
        others = h.make_graph([h.make_node("ReduceMean", ["weight_rows_27", axis0],
                                           ["row_result_41"], name="n1_12")],
                              "elseGraph_52", [], [h.make_value_info("row_result_41",
                                                                     h.TypeProto())])
        row = h.make_graph([
            h.make_node("Slice", ["new_weight_0", "start", "end"], ["weight_rows_27"],
                        name="n3_9_n3_8_n0_9"),
            h.make_node("Sub", ["num_bag", "int64_1_13"], ["tmp_29"], name="n3_9_n3_8_n3_5"),
            h.make_node("Equal", [counter, "tmp_29"], ["cond_30"], name="n3_9_n3_8_n4_3"),
            h.make_node("If", ["cond_30"], ["row_result_52"], then_branch=last,
                        else_branch=others, name="n3_9_n3_8_n5_4")],
            "elseGraph_41", [], [h.make_value_info("row_result_52", h.TypeProto())])
    order = ["seq", "counter"] if sequence_first else ["counter", "seq"]
    carried = [{"seq": seq, "counter": counter}[k] for k in order]
    carried_out = [{"seq": "result_54", "counter": "index_tensor_56"}[k] for k in order]
    carried_init = [{"seq": "result", "counter": "index_tensor"}[k] for k in order]
    loop_out = ["result_58", "index_tensor_59"] if sequence_first else \
        ["index_tensor_58", "result_59"]
    body = h.make_graph([
        h.make_node("Reshape", [counter, "neg_1"], ["slice_index"], name="n0_4"),
        h.make_node("CastLike", ["int64_1_13", "slice_index"], ["int64_1_13_cast"], name="n2_3"),
        h.make_node("Add", ["slice_index", "int64_1_13_cast"], ["tmp_14"], name="n3_3"),
        h.make_node("Slice", ["offsets_7", "slice_index", "tmp_14"], ["start"], name="n4_2"),
        h.make_node("CastLike", ["int64_1_13", "slice_index"], ["int64_1_15_cast"], name="n6_2"),
        h.make_node("Add", ["slice_index", "int64_1_15_cast"], ["tmp_16"], name="n7_2"),
        h.make_node("CastLike", ["int64_2", "slice_index"], ["int64_2_cast"], name="n9_2"),
        h.make_node("Add", ["slice_index", "int64_2_cast"], ["tmp_17"], name="n10_2"),
        h.make_node("Slice", ["offsets_7", "tmp_16", "tmp_17"], ["end"], name="n11_2"),
        h.make_node("Equal", ["start", "end"], ["cond_18"], name="n12_2"),
        h.make_node("If", ["cond_18"], ["row_result_53"], then_branch=zeros, else_branch=row,
                    name="n13_2"),
        h.make_node("SequenceInsert", [seq, "row_result_53"], ["result_54"], name="n14_2"),
        h.make_node("CastLike", ["int64_1_13", counter], ["int64_1_55_cast"],
                    name="n16_2"),
        h.make_node("Add", [counter, "int64_1_55_cast"], ["index_tensor_56"],
                    name="n17_2"),
        h.make_node("Less", ["index_tensor_56", "num_bag"], ["cond_out"], name="n18_2")],
        "loop_body",
        [h.make_tensor_value_info("infinite_loop", I64, []),
         h.make_tensor_value_info("cond_10", BOOL, []),
         *[h.make_value_info(n, h.TypeProto()) for n in carried]],
        [h.make_value_info(n, h.TypeProto()) for n in ["cond_out"] + carried_out])
    main += [h.make_node("Loop", ["", "cond_9"] + carried_init, loop_out, body=body,
                         name="n19_2"),
             h.make_node("ConcatFromSequence", [loop_out[order.index("seq")]], ["result_60"],
                         axis=0, name="n20"),
             h.make_node("Cast", ["result_60"], ["y"], to=F32, name="node_Cast_7")]
    inputs = [h.make_tensor_value_info("input", I64, ["N"]),
              h.make_tensor_value_info("offsets", I64, ["B"])]
    if weighted:
        inputs.append(h.make_tensor_value_info("weights", F32, ["N"]))
    return _model(main, inputs, ["B", DIM], 18, inits)


def dynamo_padded_bag(mode: str = "sum", weighted: bool = False, padding: int = 4,
                      kept_first: bool = True):
    """``nn.EmbeddingBag(padding_idx=padding)`` as the dynamo exporter writes it (the
    TorchScript exporter refuses padding_idx): the sequence-op Loop, whose body runs an inner
    Loop that keeps the member positions whose id (moved by the table's rows when negative) is
    not the padding id, then reduces the gathered rows at those positions. The order of the
    inner loop's carried values (kept positions, j) varies between exports."""
    h = helper
    reduce_op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax"}[mode]
    inits = [numpy_helper.from_array(_table(), "e.weight")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in [
        ("int64_0", 0), ("int64_1", 1), ("neg_1", [-1]), ("axes_0", [0]), ("one_1d", [1]),
        ("rows_of_table", ROWS), ("padding", padding), ("no_positions", np.zeros(0, np.int64))]]
    main = []
    if weighted:
        main.append(h.make_node("Unsqueeze", ["weights", "one_1d"], ["tmp"], name="m0"))
    else:
        main += [h.make_node("Shape", ["input"], ["n_ids"], name="m0"),
                 h.make_node("Concat", ["n_ids", "one_1d"], ["ones_shape"], axis=0, name="m0b"),
                 h.make_node("ConstantOfShape", ["ones_shape"], ["tmp"],
                             value=numpy_helper.from_array(np.ones(1, np.float32)), name="m0c")]
    main += [h.make_node("Gather", ["e.weight", "input"], ["indices_weight"], name="m1"),
             h.make_node("Mul", ["indices_weight", "tmp"], ["indices_weight_5"], name="m2"),
             h.make_node("SequenceEmpty", [], ["result"], name="m3"),
             h.make_node("Shape", ["input"], ["idx_size"], name="m4"),
             h.make_node("Concat", ["offsets", "idx_size"], ["offsets_14"], axis=0, name="m5"),
             h.make_node("Size", ["offsets"], ["num_bag"], name="m6"),
             h.make_node("Less", ["int64_0", "num_bag"], ["cond_1"], name="m7")]
    then_keep = h.make_graph([h.make_node("Reshape", ["j", "neg_1"], ["tmp_29"], name="k0"),
                              h.make_node("Concat", ["curr_offsets_22", "tmp_29"],
                                          ["curr_offsets_30"], axis=0, name="k1")],
                             "keep", [], [h.make_value_info("curr_offsets_30", h.TypeProto())])
    else_keep = h.make_graph([h.make_node("Identity", ["curr_offsets_22"], ["curr_offsets_31"],
                                          name="k2")],
                             "skip", [], [h.make_value_info("curr_offsets_31", h.TypeProto())])
    moved = h.make_graph([h.make_node("Add", ["index", "rows_of_table"], ["normalized_index"],
                                      name="n0")],
                         "moved", [], [h.make_value_info("normalized_index", h.TypeProto())])
    as_is = h.make_graph([h.make_node("Identity", ["index"], ["normalized_index_25"],
                                      name="n1")],
                         "as_is", [], [h.make_value_info("normalized_index_25", h.TypeProto())])
    carried = ["curr_offsets_22", "j"] if kept_first else ["j", "curr_offsets_22"]
    carried_out = ["curr_offsets_32", "j_34"] if kept_first else ["j_34", "curr_offsets_32"]
    members = h.make_graph([
        h.make_node("Gather", ["input", "j"], ["index"], axis=0, name="b0"),
        h.make_node("CastLike", ["int64_0", "index"], ["int64_0_23_cast"], name="b1"),
        h.make_node("Less", ["index", "int64_0_23_cast"], ["cond_24"], name="b2"),
        h.make_node("If", ["cond_24"], ["normalized_index_26"], then_branch=moved,
                    else_branch=as_is, name="b3"),
        h.make_node("Equal", ["normalized_index_26", "padding"], ["tmp_27"], name="b4"),
        h.make_node("Not", ["tmp_27"], ["cond_28"], name="b5"),
        h.make_node("If", ["cond_28"], ["curr_offsets_32"], then_branch=then_keep,
                    else_branch=else_keep, name="b6"),
        h.make_node("CastLike", ["int64_1", "j"], ["int64_1_33_cast"], name="b7"),
        h.make_node("Add", ["j", "int64_1_33_cast"], ["j_34"], name="b8"),
        h.make_node("Less", ["j_34", "end_pos"], ["cond_out"], name="b9")],
        "members",
        [h.make_tensor_value_info("infinite_loop_21", I64, []),
         h.make_tensor_value_info("cond_2_20", BOOL, []),
         *[h.make_value_info(n, h.TypeProto()) for n in carried]],
        [h.make_value_info(n, h.TypeProto()) for n in ["cond_out"] + carried_out])
    zeros = h.make_graph([], "zeros", [], [h.make_tensor_value_info("row_result", F32,
                                                                     [1, DIM])],
                         [numpy_helper.from_array(np.zeros((1, DIM), np.float32), "row_result")])
    reduced = h.make_graph([
        h.make_node("Gather", ["indices_weight_5", "kept"], ["row_weight"], axis=0, name="r0"),
        h.make_node(reduce_op, ["row_weight", "axes_0"], ["row_result_53"], name="r1")],
        "reduced", [], [h.make_value_info("row_result_53", h.TypeProto())])
    inner_init = ["no_positions", "start_pos"] if kept_first else ["start_pos", "no_positions"]
    inner_out = ["kept", "j_37"] if kept_first else ["j_37", "kept"]
    body = h.make_graph([
        h.make_node("Gather", ["offsets_14", "i_16"], ["start_pos"], axis=0, name="o0"),
        h.make_node("CastLike", ["int64_1", "i_16"], ["int64_1_18_cast"], name="o1"),
        h.make_node("Add", ["i_16", "int64_1_18_cast"], ["tmp_19"], name="o2"),
        h.make_node("Gather", ["offsets_14", "tmp_19"], ["end_pos"], axis=0, name="o3"),
        h.make_node("Less", ["start_pos", "end_pos"], ["cond_2"], name="o4"),
        h.make_node("Loop", ["", "cond_2"] + inner_init, inner_out, body=members, name="o5"),
        h.make_node("Size", ["kept"], ["tmp_38"], name="o6"),
        h.make_node("CastLike", ["int64_0", "tmp_38"], ["int64_0_39_cast"], name="o7"),
        h.make_node("Equal", ["tmp_38", "int64_0_39_cast"], ["cond_40"], name="o8"),
        h.make_node("If", ["cond_40"], ["row_result_54"], then_branch=zeros,
                    else_branch=reduced, name="o9"),
        h.make_node("SequenceInsert", ["result_17", "row_result_54"], ["result_55"], name="o10"),
        h.make_node("CastLike", ["int64_1", "i_16"], ["int64_1_56_cast"], name="o11"),
        h.make_node("Add", ["i_16", "int64_1_56_cast"], ["i_57"], name="o12"),
        h.make_node("Less", ["i_57", "num_bag"], ["cond_out_59"], name="o13")],
        "loop_body",
        [h.make_tensor_value_info("infinite_loop", I64, []),
         h.make_tensor_value_info("cond_1_15", BOOL, []),
         h.make_value_info("i_16", h.TypeProto()), h.make_value_info("result_17", h.TypeProto())],
        [h.make_value_info(n, h.TypeProto()) for n in ["cond_out_59", "i_57", "result_55"]])
    main += [h.make_node("Loop", ["", "cond_1", "int64_0", "result"], ["i_60", "result_61"],
                         body=body, name="n23"),
             h.make_node("ConcatFromSequence", ["result_61"], ["result_62"], axis=0, name="m8"),
             h.make_node("Cast", ["result_62"], ["y"], to=F32, name="m9")]
    inputs = [h.make_tensor_value_info("input", I64, ["N"]),
              h.make_tensor_value_info("offsets", I64, ["B"])]
    if weighted:
        inputs.append(h.make_tensor_value_info("weights", F32, ["N"]))
    return _model(main, inputs, ["B", DIM], 18, inits)


def _model(nodes, inputs, out_shape, opset, inits):
    graph = helper.make_graph(nodes, "main_graph", inputs,
                              [helper.make_tensor_value_info("y", F32, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def reference(ids, offsets, weights=None, mode="sum", table=None, empty=0.0):
    """PyTorch's EmbeddingBag in NumPy: bag b is ids[offsets[b]:offsets[b+1]]; empty ->
    ``empty`` (0; a max bag of the TorchScript form gives ReduceMax's -inf)."""
    table = _table() if table is None else table
    ends = list(offsets[1:]) + [len(ids)]
    out = np.full((len(offsets), table.shape[1]), empty, np.float64)
    for b, (s, e) in enumerate(zip(offsets, ends)):
        w = np.ones(e - s) if weights is None else weights[s:e]
        if e > s and mode == "max":
            out[b] = table[ids[s:e]].max(0)
        elif e > s:
            out[b] = (w[:, None] * table[ids[s:e]]).sum(0) / (e - s if mode == "mean" else 1)
    return out.astype(np.float32)


def _feeds(ids, offsets=None, weights=None):
    feeds = {"input": np.asarray(ids, np.int64)}
    if offsets is not None:
        feeds["offsets"] = np.asarray(offsets, np.int64)
    if weights is not None:
        feeds["weights"] = np.asarray(weights, np.float32)
    return feeds


def _ort(model, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def check_levels(model, feeds, expected=None):
    """Every opt level: one EmbeddingBag node (no Loop), and the outputs of onnxruntime (or
    ``expected``); returns the loaded models by level."""
    expected = _ort(model, feeds) if expected is None else expected
    loaded = {}
    for level in LEVELS:
        compiled = tonnx.load(model, opt_level=level)
        ops = [s.node.op_type for s in compiled.executor.steps]
        assert "Loop" not in ops and ops.count("EmbeddingBag") == 1, (level, ops)
        got = compiled.run(feeds)["y"]
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg=f"level {level}")
        loaded[level] = compiled
    return loaded


IDS = [1, 2, 4, 5, 4, 3, 2, 9, 9, 0, 7]


@pytest.mark.parametrize("mode, weighted, opset", [
    ("sum", False, 17), ("mean", False, 17), ("sum", True, 17), ("sum", False, 11),
    ("mean", False, 13), ("mean", False, 18), ("mean", True, 18)])
def test_torchscript_loop_matches_onnxruntime(mode, weighted, opset):
    model = torchscript_bag(mode, weighted, opset)
    weights = np.random.default_rng(1).random(len(IDS)) if weighted else None
    feeds = _feeds(IDS, [0, 4, 5, 9], weights)
    loaded = check_levels(model, feeds)
    np.testing.assert_allclose(loaded[0].run(feeds)["y"],
                               reference(np.array(IDS), [0, 4, 5, 9], weights, mode),
                               rtol=RTOL, atol=ATOL)
    plan = loaded[2].ir()
    assert "embedding bag loops: 1 recognised at load (1 TorchScript Loop)" in plan
    assert "Y(i,j) = S(i,k) * T(k,j)  [S: " in plan and "bag matrix in CSR from offsets" in plan
    assert f"embedding bag ({mode}) from the TorchScript Loop /e/Loop" in \
        loaded[2].stage_text("passes")


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_torchscript_two_d_input_and_last_offset(mode):
    ids = np.array(IDS[:8]).reshape(2, 4)
    model = torchscript_bag(mode, two_d=True)
    check_levels(model, _feeds(ids), reference(ids.reshape(-1), [0, 4], mode=mode))
    model = torchscript_bag(mode, last_offset=True)           # include_last_offset=True
    check_levels(model, _feeds(IDS, [0, 3, 3, 8]), reference(np.array(IDS[:8]), [0, 3, 3], mode=mode))


@pytest.mark.parametrize("sequence_first", [False, True])
@pytest.mark.parametrize("mode, weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_sequence_loop_matches_onnxruntime(mode, weighted, sequence_first):
    model = dynamo_bag(mode, weighted, sequence_first)
    weights = np.random.default_rng(2).random(len(IDS)) if weighted else None
    feeds = _feeds(IDS, [0, 4, 5, 9], weights)
    loaded = check_levels(model, feeds, reference(np.array(IDS), [0, 4, 5, 9], weights, mode))
    np.testing.assert_allclose(loaded[0].run(feeds)["y"], _ort(model, feeds), rtol=RTOL, atol=ATOL)
    assert "embedding bag loops: 1 recognised at load (1 sequence-op Loop)" in loaded[1].ir()
    # the gathered rows are traced back to the table: the (ids x dim) Gather is dead from level 1
    steps = loaded[1].executor.steps
    bag = next(s.node for s in steps if s.node.op_type == "EmbeddingBag")
    assert bag.inputs[:2] == ("e.weight", "indices_1d")
    assert "Gather" not in [s.node.op_type for s in steps] and "Mul" not in \
        [s.node.op_type for s in steps]


@pytest.mark.parametrize("build", [lambda m: torchscript_bag(m), lambda m: dynamo_bag(m)],
                         ids=["torchscript", "sequence"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_empty_bags_and_repeated_ids(build, mode):
    ids = [3, 3, 3, 1, 3, -2]                  # repeated ids; a negative id wraps, as in Gather
    offsets = [0, 0, 4, 4, 4]                  # empty bags first, in the middle and last
    feeds = _feeds(ids, offsets)
    expected = reference(np.array(ids) % ROWS, offsets, mode=mode)
    assert not expected[[0, 2, 3]].any()       # a mean of an empty bag is 0, as in PyTorch
    check_levels(build(mode), feeds, expected)
    np.testing.assert_allclose(_ort(build(mode), feeds), expected, rtol=RTOL, atol=ATOL)


def test_no_bags_and_no_ids():
    model = torchscript_bag("sum")
    for level in LEVELS:
        compiled = tonnx.load(model, opt_level=level)
        assert compiled.run(_feeds([], [0, 0]))["y"].tolist() == [[0.0] * DIM] * 2
        assert compiled.run(_feeds([], []))["y"].shape == (0, DIM)


@pytest.mark.parametrize("build", [lambda: torchscript_bag("sum"), lambda: dynamo_bag("mean")],
                         ids=["torchscript", "sequence"])
@pytest.mark.parametrize("offsets, message", [
    ([1, 3], "offsets must start at 0, got 1"),
    ([0, 5, 3], "offsets must be non-decreasing"),
    ([0, 12], r"bag 0 covers \[0, 12\), outside the 9 indices"),
    ([0, -1], r"bag 1 covers \[-1, 9\), outside the 9 indices")])
def test_bad_offsets_are_an_error_naming_the_node(build, offsets, message):
    model = build()
    name = model.graph.node[[n.op_type for n in model.graph.node].index("Loop")].name
    for level in LEVELS:
        compiled = tonnx.load(model, opt_level=level)
        with pytest.raises(ta.ShapeError, match=message) as err:
            compiled.run(_feeds(IDS[:9], offsets))
        assert f"node {name} (EmbeddingBag(" in str(err.value)


def test_index_outside_the_table_is_an_error_naming_the_node():
    for model in (torchscript_bag("sum"), dynamo_bag("sum")):
        for level in LEVELS:
            # level 0 of the dynamo form still runs its (then dead) Gather, which fails first
            with pytest.raises(ta.ShapeError, match=r"node \S+ \((EmbeddingBag|Gather)\(e.weight"
                               r".*index.*outside"):
                tonnx.load(model, opt_level=level).run(_feeds([1, 10, 2], [0, 1]))


def _counter_loop():
    """A Loop that is not a bag: a running sum with a loop-carried value."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("acc_in", F32, [3])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("acc_out", F32, [3])])
    nodes = [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body, name="running_sum")]
    return _model(nodes, [helper.make_tensor_value_info("x", F32, [3]),
                          helper.make_tensor_value_info("n", I64, [])], [3], 17, [])


def _relu_in_body(nodes):
    gather = next(k for k, n in enumerate(nodes) if n.op_type == "Gather" and
                  n.input[0] == "e.weight")
    nodes[gather].output[0] = "gathered"
    nodes.insert(gather + 1, helper.make_node("Relu", ["gathered"], ["/e/Gather_4_output_0"]))
    return nodes


def _min_body(nodes):
    reduce = nodes[-2]
    nodes[-2] = helper.make_node("ReduceMin", [reduce.input[0]], list(reduce.output),
                                 axes=[0], keepdims=0)
    return nodes


def _max_not_last():
    """A dynamo max bag whose If slices to the end for the bag before the last one."""
    model = dynamo_bag("max")

    def retarget(graph):
        for node in graph.node:
            if node.name == "n3_9_n0_8":
                node.input[1] = "int64_2"
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    retarget(attribute.g)
    retarget(model.graph)
    return model


def test_a_loop_carrying_sequences_that_is_no_bag_is_refused_at_load():
    model = _max_not_last()
    for level in LEVELS:
        with pytest.raises(ta.UnsupportedError, match=r"\(Loop, inputs .*only the EmbeddingBag "
                           r"loop form is supported") as err:
            tonnx.load(model, opt_level=level)
        assert err.match("or a loop over tensors alone")
        assert err.match("its max bag's If does not single out the last bag")
        assert err.match("carries sequences")


@pytest.mark.parametrize("model, feeds", [
    (_counter_loop, lambda: {"x": np.array([1.0, -2.0, 0.5], np.float32),
                             "n": np.array(4, np.int64)}),
    (lambda: torchscript_bag("sum", body=_relu_in_body), lambda: _feeds(IDS, [0, 3, 3, 7])),
    (lambda: torchscript_bag("mean", opset=17, body=_min_body),
     lambda: _feeds(IDS, [0, 3, 3, 7])),
    (lambda: torchscript_bag("max", weighted=True),
     lambda: _feeds(IDS, [0, 3, 3, 7], np.linspace(-1, 2, len(IDS))))],
    ids=["running-sum", "relu-in-body", "min-mode", "weighted-max"])
def test_other_loops_over_tensors_run_iteration_by_iteration(model, feeds):
    """A Loop that is not an embedding bag but carries tensors alone runs its body once an
    iteration (``load.runtime_loop``), at every level, as onnxruntime runs it."""
    model, feeds = model(), feeds()
    expected = _ort(model, feeds)
    for level in LEVELS:
        compiled = tonnx.load(model, opt_level=level)
        assert "Loop" in [s.node.op_type for s in compiled.executor.steps]
        for _ in range(3):
            got = compiled.run(feeds)["y"]
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL,
                                       err_msg=f"level {level}")


@pytest.mark.parametrize("build, empty", [(torchscript_bag, -np.inf), (dynamo_bag, 0.0)],
                         ids=["torchscript", "dynamo"])
def test_max_bags_match_onnxruntime(build, empty):
    """``mode="max"``: the elementwise max of a bag's rows; an empty bag is what each form's
    graph gives (ReduceMax of nothing, -inf, in the TorchScript form; the dynamo form's zeros),
    with repeated ids, negative rows, a bag at the end and new offsets at every run."""
    model = build("max")
    offsets = [0, 3, 3, 7, 10]
    expected = reference(np.array(IDS), np.array(offsets), mode="max", empty=empty)
    loaded = check_levels(model, _feeds(IDS, offsets), expected)
    assert "max bags" in " ".join(loaded[0].executor.notes(
        next(s for s in loaded[0].executor.steps if s.node.op_type == "EmbeddingBag")))
    for offsets in ([0, 0, 11], [0, 1, 2, 5], [0, 11, 11]):
        feeds = _feeds(IDS, offsets)
        for compiled in loaded.values():
            for _ in range(3):
                got = compiled.run(feeds)["y"]
            np.testing.assert_allclose(got, _ort(model, feeds), rtol=RTOL, atol=ATOL)
    _runs_natively(loaded[3], feeds, "the generated max of each bag's rows")


def _runs_natively(compiled, feeds, what):
    """Level 3's static plan runs the bag as native calls (not the node's Python run)."""
    plans = [row.plan for row in compiled.profile(feeds).rows if row.op_type == "EmbeddingBag"]
    assert plans and all("by native calls" in plan and what in plan for plan in plans), plans


@pytest.mark.parametrize("mode, weighted, kept_first", [
    ("sum", False, True), ("mean", False, False), ("max", False, True), ("sum", True, False),
    ("mean", True, True)])
def test_padded_bags_leave_out_the_padding_id(mode, weighted, kept_first):
    """``padding_idx``: members with the padding id (also as a negative id) are left out of
    their bag, a mean divides by the members kept, a bag of only padding is zeros; new ids and
    offsets at every run, every level."""
    padding = ROWS - 1
    model = dynamo_padded_bag(mode, weighted, padding, kept_first)
    ids = [1, 9, 4, -1, 4, 3, 9, 9, 2, 0, 7]
    offsets = [0, 3, 3, 6, 8]
    weights = np.linspace(0.5, 2.0, len(ids)) if weighted else None
    feeds = _feeds(ids, offsets, weights)
    kept = [i % ROWS != padding for i in ids]
    expected = np.zeros((len(offsets), DIM), np.float32)
    table = _table()
    for b, (lo, hi) in enumerate(zip(offsets, offsets[1:] + [len(ids)])):
        members = [p for p in range(lo, hi) if kept[p]]
        if members:
            rows = table[[ids[p] for p in members]] * \
                (weights[members, None] if weighted else 1.0)
            expected[b] = {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
    np.testing.assert_allclose(_ort(model, feeds), expected, rtol=RTOL, atol=ATOL)
    loaded = check_levels(model, feeds, expected)
    rng = np.random.default_rng(3)
    for _ in range(3):
        feeds = _feeds(rng.integers(-1, ROWS, 12), [0, 4, 4, 9], rng.random(12) if weighted
                       else None)
        for compiled in loaded.values():
            np.testing.assert_allclose(compiled.run(feeds)["y"], _ort(model, feeds), rtol=RTOL,
                                       atol=ATOL)
    _runs_natively(loaded[3], feeds, "" if mode != "max" else "the generated max")
    with pytest.raises(ta.ShapeError, match="outside"):      # a bad id after the plan is made
        loaded[3].run(_feeds([1, 2, ROWS + 5], [0, 1], [1.0, 1.0, 1.0] if weighted else None))


def test_an_if_outside_a_loop_runs_the_branch_its_condition_picks():
    """Only Loops are limited to the bag forms: an If on a graph input runs at run time
    (tests/test_onnx_ops_coverage.py has the If forms)."""
    then_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "t", [],
                                    [helper.make_tensor_value_info("z", F32, [3])])
    else_branch = helper.make_graph([helper.make_node("Neg", ["x"], ["w"])], "e", [],
                                    [helper.make_tensor_value_info("w", F32, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_branch,
                            else_branch=else_branch, name="choose")
    model = _model([node], [helper.make_tensor_value_info("c", BOOL, []),
                            helper.make_tensor_value_info("x", F32, [3])], [3], 17, [])
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for level in LEVELS:
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3):
            np.testing.assert_array_equal(compiled.run({"c": np.array(True), "x": x})["y"], x)
            np.testing.assert_array_equal(compiled.run({"c": np.array(False), "x": x})["y"], -x)


def test_size_range_and_reduce_prod():
    """The shape arithmetic around the exported loops, against onnxruntime."""
    h = helper
    nodes = [h.make_node("Size", ["x"], ["n"]),
             h.make_node("ReduceProd", ["x"], ["p"], axes=[1], keepdims=0),
             h.make_node("Cast", ["n"], ["nf"], to=F32),
             h.make_node("Range", ["zero", "nf", "step"], ["r"])]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "zero"),
             numpy_helper.from_array(np.array(1.5, np.float32), "step")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F32, [2, 5])],
                         [h.make_tensor_value_info("n", I64, []),
                          h.make_tensor_value_info("p", F32, [2]),
                          h.make_tensor_value_info("r", F32, [None])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    model.ir_version = 8
    x = np.random.default_rng(3).uniform(0.5, 1.5, (2, 5)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})
    for level in (0, 1):
        got = tonnx.load(model, opt_level=level).run({"x": x})
        for value, name in zip(expected, ("n", "p", "r")):
            np.testing.assert_allclose(got[name], value, rtol=1e-6, err_msg=name)


# --- the real exporters (torch is not a test dependency: skipped without it) -----------------

def _canonical(graph) -> list:
    """The graph's ops, attributes and wiring, with every value renamed by first use (the
    exporters number values differently from one model to the next)."""
    names: dict[str, str] = {}

    def rename(name: str) -> str:
        return names.setdefault(name, f"v{len(names)}") if name else ""

    def walk(g) -> list:
        out = [("in", [rename(v.name) for v in g.input]),
               ("init", sorted((rename(i.name), tuple(i.dims)) for i in g.initializer))]
        for node in g.node:
            attributes = []
            for a in sorted(node.attribute, key=lambda a: a.name):
                value = helper.get_attribute_value(a)
                if isinstance(value, onnx.GraphProto):
                    value = walk(value)
                elif isinstance(value, onnx.TensorProto):
                    value = numpy_helper.to_array(value).tolist()
                attributes.append((a.name, value))
            out.append((node.op_type, [rename(n) for n in node.input], attributes,
                        [rename(n) for n in node.output]))
        out.append(("out", [rename(v.name) for v in g.output]))
        return out

    return walk(graph)


def _export(mode, weighted, tmp_path, dynamo=False, opset=17, two_d=False, **options):
    torch = pytest.importorskip("torch")
    bag = torch.nn.EmbeddingBag(ROWS, DIM, mode=mode, **options)
    with torch.no_grad():
        bag.weight.copy_(torch.from_numpy(_table()))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.e = bag

        def forward(self, input, offsets=None, weights=None):
            return self.e(input, offsets, per_sample_weights=weights)

    ids = torch.tensor(IDS[:8])
    args = (ids.reshape(2, 4),) if two_d else (ids, torch.tensor([0, 4, 6] if dynamo else [0, 4]))
    if weighted:
        args += (torch.rand(8),)
    names = ["input", "offsets", "weights"][:len(args)]
    path = tmp_path / "bag.onnx"
    if dynamo:
        pytest.importorskip("onnxscript")
        n, b = torch.export.Dim("N"), torch.export.Dim("B")
        shapes = dict(zip(names, [{0: n}, {0: b}, {0: n}]))
        torch.onnx.export(Net().eval(), args, str(path), input_names=names, output_names=["y"],
                          opset_version=18, dynamo=True, dynamic_shapes=shapes, verbose=False)
    else:
        torch.onnx.export(Net().eval(), args, str(path), input_names=names, output_names=["y"],
                          opset_version=opset, dynamo=False,
                          dynamic_axes={n: {0: "n"} for n in names})
    return onnx.load(str(path)), Net()


@pytest.mark.parametrize("mode, weighted, opset, two_d, options", [
    ("sum", False, 17, False, {}), ("mean", False, 17, False, {}), ("sum", True, 17, False, {}),
    ("sum", False, 11, False, {}), ("mean", False, 13, False, {}), ("mean", False, 18, False, {}),
    ("sum", False, 17, True, {}), ("mean", False, 17, True, {}),
    ("sum", False, 17, False, {"include_last_offset": True})])
def test_torchscript_export(tmp_path, mode, weighted, opset, two_d, options):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, net = _export(mode, weighted, tmp_path, opset=opset, two_d=two_d, **options)
    torch = pytest.importorskip("torch")
    hand = torchscript_bag(mode, weighted, opset, last_offset=bool(options), two_d=two_d)
    assert _canonical(hand.graph) == _canonical(model.graph)   # the hand-built graph mirrors it
    ids = np.array(IDS)
    weights = np.random.default_rng(4).random(len(ids)).astype(np.float32)
    if two_d:
        feeds = {"input": ids[:8].reshape(2, 4)}
    else:
        feeds = _feeds(ids, [0, 4, 4, 9, 11] if options else [0, 4, 4, 9],
                       weights if weighted else None)
    with torch.no_grad():
        expected = net(*(torch.from_numpy(feeds[k]) for k in feeds)).numpy()
    check_levels(model, feeds, expected)


@pytest.mark.parametrize("mode, weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_dynamo_export(tmp_path, mode, weighted):
    import contextlib
    import io
    import warnings
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        model, net = _export(mode, weighted, tmp_path, dynamo=True)
    torch = pytest.importorskip("torch")
    assert _canonical(model.graph) in [_canonical(dynamo_bag(mode, weighted, first).graph)
                                       for first in (False, True)]
    weights = np.random.default_rng(5).random(len(IDS)).astype(np.float32)
    feeds = _feeds(IDS, [0, 4, 4, 9], weights if weighted else None)
    with torch.no_grad():
        expected = net(*(torch.from_numpy(feeds[k]) for k in feeds)).numpy()
    check_levels(model, feeds, expected)
