"""The jagged index arithmetic of exported torchrec ``KeyedJaggedTensor`` inputs, compared with
onnxruntime at every opt level and run by level 3's static plan as compiled kernels.

The graphs are built with onnx.helper, node for node as torch exports a KeyedJaggedTensor built
from per-feature tensors (benchmarks/onnx_real.py's torchrec models), so these tests run without
torch or torchrec:

- the TorchScript exporter, offsets form (``from_offsets_sync``): each feature's offsets moved
  past the features before it (``Add`` of an int constant), joined, lengths as their first
  difference (``Sub`` of two ``Slice``s), and per-feature offsets again (``CumSum`` over the
  (features, batch) lengths, a zero column in front);
- the dynamo exporter: the values split by the per-feature sums of the lengths (``ReduceSum``
  then ``Split`` with sizes known only at run time).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import onnxruntime_outputs, planned_model  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg.onnx as tonnx  # noqa: E402

I32, I64 = TensorProto.INT32, TensorProto.INT64
INT64_MAX = 2**63 - 1
LEVELS = (0, 1, 2, 3)
BATCH, FEATURES, PER_FEATURE = 4, 2, 6


def _model(nodes, inputs, outputs, constants, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "jagged", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), n)
                               for n, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _lengths(rng: np.random.Generator, total: int) -> np.ndarray:
    """Bag lengths of one feature over the batch, empty bags too, summing to ``total``."""
    return np.bincount(rng.integers(0, BATCH, total), minlength=BATCH).astype(np.int64)


def _offsets_model() -> onnx.ModelProto:
    """The TorchScript export of ``from_offsets_sync`` over two features' offsets."""
    constants = {"zero": np.array([0], np.int64), "one": np.array([1], np.int64),
                 "end": np.array([INT64_MAX], np.int64), "minus1": np.array([-1], np.int64),
                 "base": np.array(PER_FEATURE, np.int64),
                 "grid": np.array([FEATURES, BATCH], np.int64), "axis": np.array(1, np.int64),
                 "zeros": np.zeros((FEATURES, 1), np.int64)}
    nodes = [
        helper.make_node("Slice", ["offsets_0", "zero", "one", "zero"], ["first"]),
        helper.make_node("Slice", ["offsets_0", "one", "end", "zero"], ["rest_0"]),
        helper.make_node("Slice", ["offsets_1", "one", "end", "zero"], ["rest_1"]),
        helper.make_node("Add", ["rest_1", "base"], ["moved_1"]),
        helper.make_node("Concat", ["first", "rest_0", "moved_1"], ["offsets"], axis=0),
        helper.make_node("Slice", ["offsets", "one", "end", "zero"], ["upper"]),
        helper.make_node("Slice", ["offsets", "zero", "minus1", "zero"], ["lower"]),
        helper.make_node("Sub", ["upper", "lower"], ["lengths"]),
        helper.make_node("Reshape", ["lengths", "grid"], ["by_feature"]),
        helper.make_node("CumSum", ["by_feature", "axis"], ["ends"]),
        helper.make_node("Concat", ["zeros", "ends"], ["feature_offsets"], axis=1),
    ]
    inputs = [helper.make_tensor_value_info(f"offsets_{f}", I64, [BATCH + 1])
              for f in range(FEATURES)]
    outputs = [helper.make_tensor_value_info("feature_offsets", I64, [FEATURES, BATCH + 1]),
               helper.make_tensor_value_info("lengths", I64, [FEATURES * BATCH])]
    return _model(nodes, inputs, outputs, constants)


def _offsets_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"offsets_{f}": np.concatenate([[0], np.cumsum(_lengths(rng, PER_FEATURE))])
            for f in range(FEATURES)}


def _check(compiled, model, feeds) -> None:
    want = onnxruntime_outputs(model, feeds)
    got = compiled.run(feeds)
    for name, expected in zip([o.name for o in model.graph.output], want):
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


@pytest.mark.parametrize("level", LEVELS)
def test_offsets_arithmetic_matches_onnxruntime(level):
    model = _offsets_model()
    compiled = tonnx.load(model, opt_level=level)
    for seed in range(4):     # bags fall differently each time; the plan of level 3 too
        _check(compiled, model, _offsets_feeds(seed))


def _plan_kinds(compiled) -> dict[str, str]:
    return {s.step.node.op_type: s.kind for s in compiled.specialiser.latest().steps}


def test_offsets_arithmetic_is_compiled_in_the_plan():
    """The int Add and Sub are prebound statements of the plan's sequence, not generic steps
    (the plan captures float kernels only): the next feeds still give onnxruntime's values."""
    model = _offsets_model()
    compiled = planned_model(model, _offsets_feeds(0))
    kinds = _plan_kinds(compiled)
    assert kinds["Add"] == "kernel" and kinds["Sub"] == "kernel", kinds
    for seed in range(1, 5):
        _check(compiled, model, _offsets_feeds(seed))


def _split_model() -> onnx.ModelProto:
    """The dynamo export of ``KeyedJaggedTensor.to_dict``: values split by the per-feature sums
    of the lengths, each piece with its feature's offsets."""
    constants = {"grid": np.array([FEATURES, BATCH], np.int64),
                 "axes": np.array([1], np.int64), "two": np.array(2, np.int64)}
    nodes = [
        helper.make_node("Reshape", ["lengths", "grid"], ["by_feature"]),
        helper.make_node("ReduceSum", ["by_feature", "axes"], ["per_feature"], keepdims=0),
        helper.make_node("Split", ["values", "per_feature"],
                         [f"values_{f}" for f in range(FEATURES)], axis=0),
        helper.make_node("Mul", ["per_feature", "two"], ["doubled"]),
    ]
    inputs = [helper.make_tensor_value_info("values", I64, ["n"]),
              helper.make_tensor_value_info("lengths", I64, [FEATURES * BATCH])]
    outputs = [helper.make_tensor_value_info(f"values_{f}", I64, [f"m{f}"])
               for f in range(FEATURES)] + [helper.make_tensor_value_info("doubled", I64, [FEATURES])]
    return _model(nodes, inputs, outputs, constants, opset=18)


def _split_feeds(seed: int, totals: tuple[int, ...] = (PER_FEATURE, PER_FEATURE + 2)
                 ) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([_lengths(rng, t) for t in totals])
    return {"values": rng.integers(0, 1000, sum(totals)).astype(np.int64), "lengths": lengths}


@pytest.mark.parametrize("level", LEVELS)
def test_split_by_runtime_sizes_matches_onnxruntime(level):
    model = _split_model()
    compiled = tonnx.load(model, opt_level=level)
    for seed in range(3):
        _check(compiled, model, _split_feeds(seed))


def test_split_by_runtime_sizes_replans_when_they_change():
    """The plan's Split checks its sizes in the compiled sequence: the same number of values
    split otherwise (feature totals 8 and 6 instead of 6 and 8) runs node by node, right."""
    model = _split_model()
    compiled = planned_model(model, _split_feeds(0))
    kinds = _plan_kinds(compiled)
    assert kinds["Split"] == "copy" and kinds["ReduceSum"] == "kernel", kinds
    _check(compiled, model, _split_feeds(1))
    _check(compiled, model, _split_feeds(2, (PER_FEATURE + 2, PER_FEATURE)))
    _check(compiled, model, _split_feeds(3))


def test_integer_arithmetic_broadcasts_and_wraps_in_the_plan():
    """int32 Mul broadcasting a row, int64 Add overflowing (both wrap, as onnxruntime does),
    compiled in the plan. (One Add: a chain of int ops is a fused program, which the plan
    runs as a generic step.)"""
    big = np.array([2**62, 2**62], np.int64)
    nodes = [helper.make_node("Mul", ["a", "row"], ["product"]),
             helper.make_node("Add", ["b", "big"], ["total"])]
    inputs = [helper.make_tensor_value_info("a", I32, [3, 4]),
              helper.make_tensor_value_info("b", I64, [2])]
    outputs = [helper.make_tensor_value_info("product", I32, [3, 4]),
               helper.make_tensor_value_info("total", I64, [2])]
    row = np.array([1, -2, 3, 2**20], np.int32)
    model = _model(nodes, inputs, outputs, {"row": row, "big": big})

    def feeds(seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {"a": rng.integers(-2**20, 2**20, (3, 4)).astype(np.int32),
                "b": np.array([rng.integers(0, 2**62), 2**63 - 7], np.int64)}
    compiled = planned_model(model, feeds(0))
    assert set(_plan_kinds(compiled).values()) == {"kernel"}
    for seed in range(1, 4):
        _check(compiled, model, feeds(seed))
