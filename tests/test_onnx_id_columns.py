"""Embedding ids sliced out of a feature matrix (deepctr's exports): ``Slice -> Cast -> Gather``
chains, Slices joined by a Concat, a graph mixing integer ids with float activations. At level 3
they run as compiled code (the gathers read their id columns in place, converting as the Cast
does; the slices are block copies), checked against onnxruntime at every level."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.runtime.movement import block_copy_call, gather_call

F32, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
ROWS = 50          # rows of every embedding table
DIM = 4
BIG = np.iinfo(np.int64).max


def _id_column_model() -> onnx.ModelProto:
    """``x`` (N x 6 floats): columns 0-2 hold ids, 3-5 dense features; ``j`` (N x 2 int32):
    column 1 holds ids (int32, cast to int64). Each id column is sliced, cast and gathered; the float
    ids' embeddings are joined by a Concat (axis 1), flattened and joined with the dense
    columns (a Slice with a negative start and an INT64_MAX end) before a MatMul; column 0's
    ids are also read by a second, one-wide table (a linear term)."""
    rng = np.random.default_rng(31)
    inits = [numpy_helper.from_array(rng.standard_normal((ROWS, DIM)).astype(np.float32),
                                     f"T{k}") for k in range(4)]
    inits += [numpy_helper.from_array(rng.standard_normal((ROWS, 1)).astype(np.float32), "L0"),
              numpy_helper.from_array(rng.standard_normal((3 * DIM + 3, 2)).astype(np.float32),
                                      "W"),
              numpy_helper.from_array(rng.standard_normal((DIM, 2)).astype(np.float32), "W2")]
    consts = {"one": [1], "neg3": [-3], "big": [BIG], "last": [-1], "flat": [0, 3 * DIM],
              "flat2": [0, DIM], "flat1": [0, 1]}
    consts.update({f"k{k}": [k] for k in range(4)})
    inits += [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in consts.items()]
    nodes = []
    for k in range(3):
        nodes += [h.make_node("Slice", ["x", f"k{k}", f"k{k + 1}", "one"], [f"s{k}"]),
                  h.make_node("Cast", [f"s{k}"], [f"c{k}"], to=I64),
                  h.make_node("Gather", [f"T{k}", f"c{k}"], [f"e{k}"])]
    nodes += [h.make_node("Gather", ["L0", "c0"], ["l0"]),
              h.make_node("Reshape", ["l0", "flat1"], ["l0r"]),
              h.make_node("Concat", ["e0", "e1", "e2"], ["E"], axis=1),
              h.make_node("Reshape", ["E", "flat"], ["Ef"]),
              h.make_node("Slice", ["x", "neg3", "big", "last"], ["dense"]),
              h.make_node("Concat", ["Ef", "dense"], ["feat"], axis=-1),
              h.make_node("MatMul", ["feat", "W"], ["m"]),
              h.make_node("Slice", ["j", "k1", "k2", "one"], ["sj"]),
              h.make_node("Cast", ["sj"], ["cj"], to=I64),
              h.make_node("Gather", ["T3", "cj"], ["ej"]),
              h.make_node("Reshape", ["ej", "flat2"], ["ejf"]),
              h.make_node("MatMul", ["ejf", "W2"], ["m2"]),
              h.make_node("Add", ["m", "m2"], ["a"]),
              h.make_node("Add", ["a", "l0r"], ["y"])]
    graph = h.make_graph(nodes, "id_columns",
                         [h.make_tensor_value_info("x", F32, ["N", 6]),
                          h.make_tensor_value_info("j", I32, ["N", 2])],
                         [h.make_tensor_value_info("y", F32, ["N", 2])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Ids in ``[-ROWS, ROWS)`` with fractional parts (truncated toward zero by the Cast, so
    -0.7 is row 0 and -1.5 the last row), and dense features."""
    x = rng.standard_normal((n, 6)).astype(np.float32)
    x[:, :3] = rng.integers(-ROWS + 1, ROWS, (n, 3)) + rng.uniform(-0.9, 0.9, (n, 3))
    x[:, :3] = np.clip(x[:, :3], -ROWS - 0.5, ROWS - 0.5)
    j = rng.integers(-ROWS, ROWS, (n, 2)).astype(np.int32)
    return {"x": x, "j": j}


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _id_column_model()


@pytest.fixture(scope="module")
def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_id_columns_match_onnxruntime_at_every_level(model, session, level):
    compiled = tonnx.load(model, opt_level=level)
    rng = np.random.default_rng(32 + level)
    for _ in range(5):       # level 3: run 2 records, runs 3.. go through the static plan
        feeds = _feeds(rng, 7)
        np.testing.assert_allclose(compiled.run(feeds)["y"], session.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-6)


def test_level_3_runs_the_chains_as_one_compiled_sequence(model):
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(33)
    for _ in range(3):
        compiled.run(_feeds(rng, 5))
    plan = compiled.specialiser.latest()
    ops = [s.step.node.op_type for s in plan.steps]
    # Every Cast left the plan (its gathers read the id columns in place), and so did the
    # Slices that fed them; the dense columns' Slice is a block copy into the Concat.
    assert "Cast" not in ops and ops.count("Slice") == 1
    assert all(s.kind != "generic" for s in plan.steps), plan.describe()
    assert "1 compiled sequence" in plan.describe()
    assert len(plan.runners) == 1
    dense = next(s for s in plan.steps if s.step.node.op_type == "Slice")
    assert dense.plan == "compiled block copy (5 x 3 values)"
    feat = next(s for s in plan.steps if s.step.node.outputs[0] == "feat")
    assert feat.plan is not None and feat.plan.startswith("no copy: 1 of 2 inputs")


@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("bad", [float(ROWS), -ROWS - 1.0, np.nan, np.inf, 1e30])
def test_out_of_range_float_ids_are_refused_as_onnxruntime_refuses_them(model, session, level,
                                                                         bad):
    compiled = tonnx.load(model, opt_level=level)
    rng = np.random.default_rng(34)
    good = _feeds(rng, 6)
    for _ in range(3):        # level 3: the plan exists before the bad run
        compiled.run(good)
    feeds = {"x": good["x"].copy(), "j": good["j"]}
    feeds["x"][4, 1] = bad
    with pytest.raises(Exception):
        session.run(None, feeds)
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(feeds)
    # the model still runs, and still right
    np.testing.assert_allclose(compiled.run(good)["y"], session.run(None, good)[0],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("level", [0, 3])
def test_out_of_range_int_ids_are_refused(model, level):
    compiled = tonnx.load(model, opt_level=level)
    good = _feeds(np.random.default_rng(35), 4)
    for _ in range(3):
        compiled.run(good)
    feeds = {"x": good["x"], "j": good["j"].copy()}
    feeds["j"][2, 1] = ROWS
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(feeds)
    feeds["j"][2, 1] = 7          # column 0 of j is never read: any value is fine there
    feeds["j"][0, 0] = 2 ** 31 - 1
    compiled.run(feeds)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_a_batch_of_zero_rows(model, session, level):
    compiled = tonnx.load(model, opt_level=level)
    feeds = _feeds(np.random.default_rng(36), 0)
    for _ in range(3):
        got = compiled.run(feeds)["y"]
        want = session.run(None, feeds)[0]
        assert got.shape == want.shape == (0, 2)


def _history_model(width: int) -> onnx.ModelProto:
    """DIN's form: ``x`` (N x (2 + width) floats) holds a target id, then ``width`` history
    ids, then a score; the history is sliced as one block, cast to int64 and gathered
    (N x width x DIM), flattened into a MatMul and joined with the target's embedding (not
    summed: a Gather and ReduceSum would become an embedding bag, read another way)."""
    rng = np.random.default_rng(41)
    inits = [numpy_helper.from_array(rng.standard_normal((ROWS, DIM)).astype(np.float32), "T"),
             numpy_helper.from_array(rng.standard_normal((width * DIM, DIM)).astype(np.float32),
                                     "W"),
             *[numpy_helper.from_array(np.array(v, np.int64), name) for name, v in
               {"k0": [0], "k1": [1], "kw": [1 + width], "one": [1],
                }.items()]]
    nodes = [h.make_node("Slice", ["x", "k1", "kw", "one"], ["hs"]),
             h.make_node("Cast", ["hs"], ["hc"], to=I64),
             h.make_node("Gather", ["T", "hc"], ["he"]),
             h.make_node("Flatten", ["he"], ["hf"], axis=1),
             h.make_node("MatMul", ["hf", "W"], ["hm"]),
             h.make_node("Slice", ["x", "k0", "k1", "one"], ["ts"]),
             h.make_node("Cast", ["ts"], ["tc"], to=I64),
             h.make_node("Gather", ["T", "tc"], ["te"]),
             h.make_node("Flatten", ["te"], ["tf"], axis=1),
             h.make_node("Mul", ["hm", "tf"], ["y"])]
    graph = h.make_graph(nodes, "history", [h.make_tensor_value_info("x", F32,
                                                                     ["N", 2 + width])],
                         [h.make_tensor_value_info("y", F32, ["N", DIM])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("width", [1, 3, 20])
@pytest.mark.parametrize("n", [1, 5])
def test_a_block_of_id_columns_is_read_in_place(width, n):
    """A behaviour history of ``width`` id columns: its gather reads the block from ``x`` in
    place, converting as the Cast does; the Slice and Cast leave the plan. Out-of-range ids
    are refused, and the model runs right afterwards."""
    model = _history_model(width)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(42 + width + n)

    def feeds() -> dict[str, np.ndarray]:
        x = rng.integers(-ROWS + 1, ROWS, (n, 2 + width)).astype(np.float32)
        x[:, :-1] += rng.uniform(-0.9, 0.9, (n, 1 + width)).astype(np.float32)
        x[:, -1] = rng.standard_normal(n)
        return {"x": x}
    for _ in range(4):
        given = feeds()
        np.testing.assert_allclose(compiled.run(given)["y"], session.run(None, given)[0],
                                   rtol=1e-5, atol=1e-6)
    plan = compiled.specialiser.latest()
    ops = [s.step.node.op_type for s in plan.steps]
    assert "Cast" not in ops and "Slice" not in ops, plan.describe()
    bad = feeds()
    bad["x"][n - 1, width] = ROWS + 0.5
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(bad)
    given = feeds()
    np.testing.assert_allclose(compiled.run(given)["y"], session.run(None, given)[0],
                               rtol=1e-5, atol=1e-6)


def test_gather_call_refuses_a_block_past_the_ids():
    table = np.zeros((4, 2), np.float32)
    ids = np.zeros((3, 5), np.float32)
    assert gather_call(table, ids, np.zeros((3, 2, 2), np.float32), "t", 3, 2) is not None
    assert gather_call(table, ids, np.zeros((3, 3, 2), np.float32), "t", 3, 3) is None
    assert gather_call(table, ids.reshape(-1), np.zeros((15, 2), np.float32), "t",
                       None, 2) is None


def test_float_id_gather_kernel_checks_before_converting():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = np.array([[0.5, 9], [-1.2, 9], [np.nan, 9], [-4.9, 9], [-5.0, 9], [3.99, 9],
                    [np.inf, 9], [-1e30, 9]], np.float32)
    out = np.full((8, 3), -1, np.float32)
    call = gather_call(table, ids, out, "g", column=0)
    assert call is not None
    call.kernel.function(*call.args)             # unchecked: count the bad ids only
    assert int(call.flag[0]) == 4                # NaN, -5 (truncates to -5), inf, -1e30
    rows = [0, 3, 0, 0, 0, 3, 0, 0]              # bad ids read row 0, never out of bounds
    np.testing.assert_array_equal(out, table[rows])
    with pytest.raises(ta.ShapeError, match="4 id"):
        call()
    float64 = gather_call(table, ids.astype(np.float64)[:2], out[:2], "g", column=0)
    float64()
    np.testing.assert_array_equal(out[:2], table[[0, 3]])


def test_block_copy_stays_inside_its_source():
    src = np.arange(20, dtype=np.int64).reshape(4, 5)
    wide = np.zeros((4, 6), np.int64)
    call = block_copy_call(src, 3, 4, 2, 5, wide[:, 2:4], "s")
    call()
    np.testing.assert_array_equal(wide[:, 2:4], src[:, 3:5])
    assert not wide[:, :2].any() and not wide[:, 4:].any()
    assert block_copy_call(src, 4, 4, 2, 5, wide[:, 2:4], "s") is None   # would read past it
    assert block_copy_call(src, 0, 4, 6, 5, wide, "s") is None           # rows overlap


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_split_runs_as_block_copies(axis):
    """A Split (autoint's heads): at level 3 each piece is a compiled block copy, run in a
    compiled sequence; the pieces are checked against onnxruntime."""
    sizes = {0: [1, 3], 1: [2, 1, 2], -1: [3, 3]}[axis]
    shape = {0: [4, 5, 6], 1: [3, 5, 6], -1: [3, 5, 6]}[axis]
    split = numpy_helper.from_array(np.array(sizes, np.int64), "sizes")
    outs = [f"p{k}" for k in range(len(sizes))]
    nodes = [h.make_node("Split", ["x", "sizes"], outs, axis=axis)]
    nodes += [h.make_node("Relu", [o], [f"r{k}"]) for k, o in enumerate(outs)]
    graph = h.make_graph(nodes, "split", [h.make_tensor_value_info("x", F32, shape)],
                         [h.make_tensor_value_info(f"r{k}", F32, [None] * 3) for k in
                          range(len(sizes))], [split])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(37)
    for _ in range(4):
        feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
        got = compiled.run(feeds)
        for k, want in enumerate(session.run(None, feeds)):
            np.testing.assert_array_equal(got[f"r{k}"], want)
    plan = compiled.specialiser.latest()
    step = next(s for s in plan.steps if s.step.node.op_type == "Split")
    assert step.plan == f"compiled block copies ({len(sizes)} pieces)"
    assert any(step in getattr(run, "steps", ()) for run in plan.runners)


def test_a_reshape_to_a_shape_computed_from_shapes_is_a_view():
    """TorchScript's ``Shape -> Slice -> Concat`` target of a Reshape: fixed for a plan's input
    shapes, so at level 3 the Reshape is a view and the shape arithmetic leaves the plan; a
    new batch size gets a plan of its own, still right."""
    rng = np.random.default_rng(38)
    w = numpy_helper.from_array(rng.standard_normal((DIM, 3)).astype(np.float32), "W")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              {"zero": [0], "one": [1], "tail": [-1, DIM]}.items()]
    nodes = [h.make_node("Shape", ["x"], ["shape"]),
             h.make_node("Slice", ["shape", "zero", "one"], ["batch"]),
             h.make_node("Concat", ["batch", "tail"], ["target"], axis=0),
             h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Reshape", ["r", "target"], ["flat"]),
             h.make_node("MatMul", ["flat", "W"], ["y"])]
    graph = h.make_graph(nodes, "shape_arithmetic",
                         [h.make_tensor_value_info("x", F32, ["N", 2, DIM])],
                         [h.make_tensor_value_info("y", F32, ["M", 3])], [w] + consts)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for n in (3, 3, 3, 5, 5, 5, 3):
        feeds = {"x": rng.standard_normal((n, 2, DIM)).astype(np.float32)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], session.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-6)
    plan = compiled.specialiser.latest()
    ops = [s.step.node.op_type for s in plan.steps]
    assert "Shape" not in ops and "Reshape" not in ops and "Concat" not in ops, ops
    assert all(s.kind != "generic" for s in plan.steps)


def test_a_fused_program_with_a_batched_matmul_head_is_replayed_as_a_kernel_chain():
    """DCN's cross layer: a batched MatMul (run as a kernel of its own) and its epilogue, one
    fused program; at level 3 both calls are replayed prebound, in the compiled sequence."""
    rng = np.random.default_rng(39)
    bias = numpy_helper.from_array(rng.standard_normal((5, 1)).astype(np.float32), "bias")
    nodes = [h.make_node("MatMul", ["x", "s"], ["p"]),
             h.make_node("Add", ["p", "bias"], ["q"]),
             h.make_node("Add", ["q", "x"], ["y"])]
    graph = h.make_graph(nodes, "cross",
                         [h.make_tensor_value_info("x", F32, ["N", 5, 1]),
                          h.make_tensor_value_info("s", F32, ["N", 1, 1])],
                         [h.make_tensor_value_info("y", F32, ["N", 5, 1])], [bias])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(4):
        feeds = {"x": rng.standard_normal((3, 5, 1)).astype(np.float32),
                 "s": rng.standard_normal((3, 1, 1)).astype(np.float32)}
        np.testing.assert_allclose(compiled.run(feeds)["y"], session.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-6)
    plan = compiled.specialiser.latest()
    assert [s.kind for s in plan.steps] == ["kernel chain"], plan.describe()
    assert "2 kernel calls in 1 compiled sequence" in plan.describe()


def _compare_planned(model: onnx.ModelProto, make_feeds, runs: int = 4) -> tonnx.CompiledModel:
    """``model`` at level 3, ``runs`` times on fresh feeds (the later ones through the static
    plan), each checked against onnxruntime; returns the compiled model."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(runs):
        feeds = make_feeds()
        np.testing.assert_allclose(compiled.run(feeds)["y"], session.run(None, feeds)[0],
                                   rtol=1e-4, atol=1e-5)
    return compiled


@pytest.mark.parametrize("channels", [6, 700])    # a kernel; BLAS then the epilogue kernel
def test_xdeepfm_cin_layer_outer_product_and_pointwise_conv(channels):
    """xDeepFM's CIN layer: the outer product ``bhd,bmd->bhmd`` (a statement, not ta.einsum at
    every run), reshaped, then a 1-D Conv with one-cell kernels, bias and ReLU (a prebound
    kernel, or BLAS into a scratch product when large)."""
    rng = np.random.default_rng(40)
    h_rows, m_rows, d = (2, 3, 4) if channels == 6 else (28, 25, 8)
    w = numpy_helper.from_array(rng.standard_normal((5, channels, 1)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([0, channels, d], np.int64), "shape")
    nodes = [h.make_node("Einsum", ["u", "v"], ["o"], equation="bhd,bmd->bhmd"),
             h.make_node("Reshape", ["o", "shape"], ["r"]),
             h.make_node("Conv", ["r", "w", "b"], ["c"], kernel_shape=[1]),
             h.make_node("Relu", ["c"], ["y"])]
    graph = h.make_graph(nodes, "cin",
                         [h.make_tensor_value_info("u", F32, ["N", h_rows, d]),
                          h.make_tensor_value_info("v", F32, ["N", m_rows, d])],
                         [h.make_tensor_value_info("y", F32, ["N", 5, d])], [w, b, shape])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = _compare_planned(model, lambda: {
        "u": rng.standard_normal((2, h_rows, d)).astype(np.float32),
        "v": rng.standard_normal((2, m_rows, d)).astype(np.float32)})
    plan = compiled.specialiser.latest()
    kinds = {s.step.node.op_type: s.kind for s in plan.steps}
    assert kinds == {"Einsum": "kernel",
                     "Conv": "kernel" if channels == 6 else "BLAS + kernel"}, kinds
