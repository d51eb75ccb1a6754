"""Level 3's static plan: buffers by lifetime, prebound kernels, and its fallbacks."""
from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h
from test_onnx_models import ATOL, MODELS, RTOL

import tensoralg as ta
import tensoralg.onnx as tonnx

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


def _fresh(feeds: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """New values of the same shapes: floats redrawn, integer ids permuted (stay in range)."""
    out = {}
    for name, a in feeds.items():
        if a.dtype.kind == "f":
            out[name] = rng.standard_normal(a.shape).astype(a.dtype)
        else:
            out[name] = rng.permutation(a, axis=0) if a.ndim else a   # rows swap
    return out


def _planned_against_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                                 runs: int, seed: int) -> tonnx.CompiledModel:
    """Load ``model`` at level 3 and run it ``runs`` times (the first on ``feeds``, the rest on
    fresh values, so the later ones go through the static plan), each checked against
    onnxruntime; returns the compiled model."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(seed)
    for k in range(runs):
        data = feeds if k == 0 else _fresh(feeds, rng)
        np.testing.assert_allclose(compiled.run(data)["y"], session.run(None, data)[0],
                                   rtol=RTOL, atol=ATOL)
    return compiled


@pytest.mark.parametrize("name", list(MODELS))
def test_static_plan_matches_onnxruntime_on_new_values(name):
    model, feeds = MODELS[name](np.random.default_rng(11))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(5)
    for k in range(4):   # run 1 records; runs 2.. go through the plan, each on new values
        data = feeds if k == 0 else _fresh(feeds, rng)
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, data)))
        got = compiled.run(data)
        for key, value in expected.items():
            np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL, err_msg=key)
    plan = compiled.specialiser.latest()
    assert plan is not None and any(step.kind != "generic" for step in plan.steps)
    assert all(note.startswith("static plan:") for note in compiled.specialiser.notes.values())
    assert "static plan" in compiled.stage_text("plan")


def test_outputs_are_not_overwritten_by_the_next_run():
    model, feeds = MODELS["mlp"](np.random.default_rng(1))
    compiled = tonnx.load(model, opt_level=3)
    first = [compiled.run(feeds)["y"] for _ in range(4)]
    other = compiled.run(_fresh(feeds, np.random.default_rng(2)))["y"]
    # Runs 3 and 4 go through the plan (its GEMM rounds differently from BLAS in run 2).
    np.testing.assert_array_equal(first[2], first[3])
    np.testing.assert_allclose(first[1], first[2], rtol=RTOL, atol=ATOL)
    assert not np.shares_memory(first[2], first[3]) and not np.shares_memory(first[3], other)


def test_memory_plan_reuses_buffers():
    model, feeds = MODELS["dlrm"](np.random.default_rng(3))
    profile = tonnx.load(model, opt_level=3).profile(feeds)
    memory = profile.memory
    assert memory is not None and memory.buffers > 3
    assert memory.planned < memory.total     # arenas hold less than every value at once
    assert memory.peak <= memory.planned


def test_profile_times_the_compiled_sequence_steps_run_in_a_plain_run():
    # A step inside a compiled sequence is timed as its own native calls, not by its Python
    # run (torchrec's bags took ~0.1 ms each that way, in a model whose plain run took 11 µs).
    model, feeds = MODELS["dlrm"](np.random.default_rng(3))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        expected = compiled.run(feeds)
    plan = compiled.specialiser.plans[compiled.specialiser.signature(feeds)]
    assert plan.step_calls
    sequenced = [plan.steps[k] for k in plan.step_calls]

    def python_run(env):
        raise AssertionError("a sequenced step ran its Python path")
    saved = [step.run for step in sequenced]
    for step in sequenced:
        step.run = python_run
    try:
        profile = compiled.profile(feeds, repeat=2)
    finally:
        for step, run in zip(sequenced, saved):
            step.run = run
    timed = {row.node for row in profile.rows if row.seconds > 0}
    assert {step.step.node.name for step in sequenced} <= timed
    got = compiled.run(feeds)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def _reshape_to_input_shape_model() -> onnx.ModelProto:
    """y = Reshape(x, s) where s is a graph input: the output shape follows s's values."""
    nodes = [h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("Relu", ["r"], ["y"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F32, [6]),
                                      h.make_tensor_value_info("s", I64, [2])],
                         [h.make_tensor_value_info("y", F32, ["a", "b"])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_value_dependent_shape_drops_the_plan():
    compiled = tonnx.load(_reshape_to_input_shape_model(), opt_level=3)
    x = np.arange(-3, 3, dtype=np.float32)
    for shape in ([2, 3], [2, 3], [3, 2], [3, 2], [6, 1]):
        y = compiled.run({"x": x, "s": np.array(shape, np.int64)})["y"]
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(shape))
    assert any("dropped" in note for note in compiled.specialiser.notes.values())


def _gather_model() -> onnx.ModelProto:
    table = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(5, 4), "T")
    nodes = [h.make_node("Gather", ["T", "i"], ["g"]), h.make_node("Relu", ["g"], ["y"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("i", I64, [3])],
                         [h.make_tensor_value_info("y", F32, [3, 4])], [table])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_static_gather_checks_indices_and_allows_negative_ones():
    compiled = tonnx.load(_gather_model(), opt_level=3)
    for _ in range(2):
        compiled.run({"i": np.array([0, 1, 2], np.int64)})
    y = compiled.run({"i": np.array([-1, 0, 4], np.int64)})["y"]
    np.testing.assert_array_equal(y[0], [16, 17, 18, 19])
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run({"i": np.array([0, 5, 1], np.int64)})
    y = compiled.run({"i": np.array([1, 1, 1], np.int64)})["y"]    # still fine afterwards
    np.testing.assert_array_equal(y[2], [4, 5, 6, 7])


def test_static_bag_checks_ids():
    model, feeds = MODELS["dlrm"](np.random.default_rng(4))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(2):
        compiled.run(feeds)
    ids = next(name for name, a in feeds.items() if a.dtype.kind == "i")
    bad = dict(feeds)
    bad[ids] = feeds[ids].copy()
    bad[ids].reshape(-1)[0] = 10**6
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(bad)


def test_concurrent_runs_agree():
    model, feeds = MODELS["two_tower"](np.random.default_rng(6))
    compiled = tonnx.load(model, opt_level=3)
    expected = compiled.run(feeds)["y"]
    compiled.run(feeds)
    results, errors = [], []

    def work() -> None:
        try:
            for _ in range(20):
                results.append(compiled.run(feeds)["y"])
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for y in results:
        np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_feeding_an_initializer_that_is_no_input_is_refused():
    """As onnxruntime does ("Invalid input name"): only graph inputs are feeds. (Initializers
    also listed as inputs: test_onnx_errors.py.)"""
    model, feeds = MODELS["mlp"](np.random.default_rng(8))
    compiled = tonnx.load(model, opt_level=3)
    weight = model.graph.initializer[0]
    assert weight.name not in {v.name for v in model.graph.input}
    override = dict(feeds)
    override[weight.name] = np.zeros_like(numpy_helper.to_array(weight))
    for _ in range(3):
        compiled.run(feeds)
    with pytest.raises(tonnx.InputError, match="unknown input"):
        compiled.run(override)


def test_consecutive_sparse_layers_keep_the_transposed_layout():
    from test_onnx_passes import _pruned_mlp

    model, feeds = _pruned_mlp(np.random.default_rng(12), zeros=0.9, batch=40)
    compiled = _planned_against_onnxruntime(model, feeds, runs=3, seed=13)
    kinds = [step.kind for step in compiled.specialiser.latest().steps]
    assert kinds == ["sparse kernel (transposed layout)", "sparse kernel + kernel (transposed layout)"]


def test_static_plan_handles_negative_ids():
    model, feeds = MODELS["dlrm"](np.random.default_rng(9))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(2):
        compiled.run(feeds)
    negative = dict(feeds)
    negative["ids"] = feeds["ids"] - np.array([20, 15, 10], np.int64)   # same rows, from the end
    np.testing.assert_allclose(compiled.run(negative)["y"], session.run(None, negative)[0],
                               rtol=RTOL, atol=ATOL)


def test_bags_read_their_id_column_from_the_graph_input():
    """DLRM's Gather(ids, t, axis=1) per table feeds only its bag: the bag reads that column of
    ``ids`` itself and the Gather leaves the plan; bad ids are still caught, naming the bag."""
    rng = np.random.default_rng(10)
    nodes, inits = [], []
    for t, rows in enumerate((30, 17)):
        nodes += [h.make_node("Gather", ["ids", f"col{t}"], [f"id{t}"], axis=1),
                  h.make_node("Gather", [f"E{t}", f"id{t}"], [f"g{t}"]),
                  h.make_node("ReduceSum", [f"g{t}", "axis1"], [f"bag{t}"], keepdims=0)]
        inits += [numpy_helper.from_array(rng.standard_normal((rows, 4)).astype(np.float32),
                                          f"E{t}"),
                  numpy_helper.from_array(np.array(t - 2, np.int64), f"col{t}")]  # -2, -1
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    nodes.append(h.make_node("Concat", ["bag0", "bag1"], ["y"], axis=1))
    model = h.make_model(h.make_graph(
        nodes, "bags", [h.make_tensor_value_info("ids", I64, ["N", 2, 3])],
        [h.make_tensor_value_info("y", F32, ["N", 8])], inits),
        opset_imports=[h.make_opsetid("", 17)])
    feeds = {"ids": np.stack([rng.integers(0, 30, (9, 3)), rng.integers(-17, 17, (9, 3))],
                             axis=1).astype(np.int64)}
    compiled = _planned_against_onnxruntime(model, feeds, runs=4, seed=4)
    steps = compiled.specialiser.latest().steps
    assert not any(s.step.node.op_type == "Gather" and s.step.node.inputs[0] == "ids"
                   for s in steps)
    assert sum(s.step.node.op_type == "EmbeddingBag" for s in steps) == 2
    bad = dict(feeds)
    bad["ids"] = feeds["ids"].copy()
    bad["ids"][0, 1, 0] = 10**6
    with pytest.raises(ta.ShapeError, match=r"bag.*outside"):
        compiled.run(bad)


def _multi_hot(rng: np.random.Generator, rows: int, width: int, ones: int) -> np.ndarray:
    x = np.zeros((rows, width), np.float32)
    for r in range(rows):
        x[r, rng.choice(width, ones, replace=False)] = rng.random(ones) + 0.5
    if rows > 2:
        x[1] = 0          # an all-zero row
    return x


def test_multi_hot_input_is_scanned_once_into_csr():
    """FM: x @ V, (x * x) @ (V * V) and x @ w all read x's CSR, refilled once per run by the
    compiled scan; the dense x * x is never made. A dense x later drops the plan."""
    from test_onnx_models import factorization_machine

    model, _ = factorization_machine(np.random.default_rng(0))
    width = 10
    rng = np.random.default_rng(21)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for k in range(4):
        x = _multi_hot(rng, 33, width, 2)
        np.testing.assert_allclose(compiled.run({"x": x})["y"], session.run(None, {"x": x})[0],
                                   rtol=RTOL, atol=ATOL)
    steps = compiled.specialiser.latest().steps
    kinds = [step.kind for step in steps]
    assert kinds.count("multi-hot CSR kernel") == 3, kinds
    assert not any(step.step.node.op_type == "Mul" and step.step.node.inputs == ("x", "x")
                   for step in steps)
    dense = rng.random((33, width)).astype(np.float32) + 0.1
    np.testing.assert_allclose(compiled.run({"x": dense})["y"],
                               session.run(None, {"x": dense})[0], rtol=RTOL, atol=ATOL)
    assert any("more than" in note and "CSR buffers" in note
               for note in compiled.specialiser.notes.values())


def test_one_narrow_multi_hot_product_keeps_blas():
    x_info = h.make_tensor_value_info("x", F32, ["N", 40])
    w = numpy_helper.from_array(np.random.default_rng(0).random((40, 1)).astype(np.float32), "w")
    model = h.make_model(h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g", [x_info],
                                      [h.make_tensor_value_info("y", F32, ["N", 1])], [w]),
                         opset_imports=[h.make_opsetid("", 17)])
    compiled = tonnx.load(model, opt_level=3)
    x = _multi_hot(np.random.default_rng(1), 16, 40, 3)
    for _ in range(3):
        got = compiled.run({"x": x})["y"]
    np.testing.assert_allclose(got, x @ numpy_helper.to_array(w), rtol=1e-5, atol=1e-6)
    assert "multi-hot CSR kernel" not in [s.kind for s in compiled.specialiser.latest().steps]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_compressor_matches_scipy(dtype):
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    x = np.where(rng.random((37, 53)) < 0.1, rng.standard_normal((37, 53)), 0).astype(dtype)
    x[4] = 0
    x[5, 52] = np.nan                   # NaN is a nonzero: the product must see it
    x[6, 0] = -0.0                      # a negative zero is a zero
    rows = ta.api.RowCompressor(x.shape, dtype, capacity=x.size)
    assert rows.compress(x)
    ref = sp.csr_array(np.where(x == 0, 0, x))
    nnz = rows.nnz
    np.testing.assert_array_equal(rows.pos, ref.indptr)
    np.testing.assert_array_equal(rows.crd[:nnz], ref.indices)
    np.testing.assert_array_equal(rows.vals[:nnz], ref.data)
    small = ta.api.RowCompressor(x.shape, dtype, capacity=5)
    assert not small.compress(x) and small.nnz == nnz and small.pos[-1] <= 5
    empty = ta.api.RowCompressor((0, 7), dtype, capacity=0)
    assert empty.compress(np.zeros((0, 7), dtype)) and empty.nnz == 0
    with pytest.raises(ValueError, match="float32/float64"):
        ta.api.RowCompressor((2, 2), np.int32, capacity=4)
    with pytest.raises(ValueError, match="not contiguous"):
        rows.compress(np.asfortranarray(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cols", [1, 63, 64, 65, 130, 257])
def test_vector_mask_scan_matches_the_reference_kernel(dtype, cols):
    # codegen/scan.py tests 64 values per mask word: widths around whole groups, the tail,
    # dense and empty rows, NaN, infinities and negative zeros, squares, and a capacity that
    # cuts the matrix off mid-row, against the statement-IR compressor and scipy.
    import scipy.sparse as sp

    from tensoralg.runtime.compress import _SCALARS, reference_kernel

    rng = np.random.default_rng(cols)
    x = np.where(rng.random((9, cols)) < 0.08, rng.standard_normal((9, cols)), 0).astype(dtype)
    x[1] = 0
    x[2] = rng.standard_normal(cols)
    x[3, -1] = np.nan
    x[4, 0] = -0.0
    x[5, cols // 2] = np.inf
    ref = sp.csr_array(np.where(x == 0, 0, x))
    for capacity in (x.size, ref.nnz, max(0, ref.nnz - cols // 2 - 1)):
        rows = ta.api.RowCompressor(x.shape, dtype, capacity=capacity)
        squares = rows.with_squares()
        fits = rows.compress(x)
        oracle = ta.api.RowCompressor(x.shape, dtype, capacity=capacity)
        oracle_squares = oracle.with_squares()
        oracle._kernel = reference_kernel(_SCALARS[np.dtype(dtype)])
        assert oracle.compress(x) == fits == (ref.nnz <= capacity)
        assert rows.nnz == oracle.nnz == ref.nnz
        np.testing.assert_array_equal(rows.pos, oracle.pos)
        kept = min(capacity, ref.nnz)
        np.testing.assert_array_equal(rows.crd[:kept], oracle.crd[:kept])
        np.testing.assert_array_equal(rows.vals[:kept], oracle.vals[:kept])
        np.testing.assert_array_equal(squares[:kept], oracle_squares[:kept])
        if fits:
            np.testing.assert_array_equal(rows.pos, ref.indptr)
            np.testing.assert_array_equal(rows.crd[:kept], ref.indices)
            np.testing.assert_array_equal(rows.vals[:kept], ref.data)
            np.testing.assert_array_equal(squares[:kept], ref.data * ref.data)
        assert rows.overflow[0] == (0 if fits else ref.nnz)


@pytest.mark.parametrize("dtype,lanes", [(np.float32, 8), (np.float64, 4), (np.float32, 64)])
def test_scan_with_other_vector_widths(dtype, lanes):
    # The widths an AVX2 host uses (8 floats, 4 doubles), and one vector per group.
    import ctypes

    import scipy.sparse as sp

    from tensoralg.codegen.build import build_llvm_module
    from tensoralg.codegen.scan import ENTRY, scan_module

    p, i64 = ctypes.c_void_p, ctypes.c_int64
    prototype = ctypes.CFUNCTYPE(ctypes.c_int32, i64, i64, p, p, p, p, i64, p, p, i64, p)
    function, _, keep = build_llvm_module(scan_module(np.dtype(dtype), lanes), ENTRY, prototype)
    rng = np.random.default_rng(lanes)
    x = np.where(rng.random((7, 150)) < 0.1, rng.standard_normal((7, 150)), 0).astype(dtype)
    ref = sp.csr_array(x)
    pos, crd = np.zeros(8, np.int32), np.zeros(x.size, np.int32)
    vals, squares = np.zeros(x.size, dtype), np.zeros(x.size, dtype)
    count, over = np.zeros(1, np.int64), np.zeros(1, np.int64)
    assert function(7, 150, x.ctypes.data, pos.ctypes.data, crd.ctypes.data, vals.ctypes.data,
                    x.size, count.ctypes.data, squares.ctypes.data, 1, over.ctypes.data) == 0
    assert count[0] == ref.nnz and over[0] == 0
    np.testing.assert_array_equal(pos, ref.indptr)
    np.testing.assert_array_equal(crd[:ref.nnz], ref.indices)
    np.testing.assert_array_equal(vals[:ref.nnz], ref.data)
    np.testing.assert_array_equal(squares[:ref.nnz], ref.data ** 2)
    with pytest.raises(ValueError, match="do not divide"):
        scan_module(np.dtype(dtype), 12)
    del keep


def test_known_feeds_take_the_fast_path_and_others_are_still_checked():
    model, feeds = MODELS["mlp"](np.random.default_rng(1))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    assert compiled._known_plans                         # the third run remembered the plan
    name, x = next(iter(feeds.items()))
    with pytest.raises(ta.InputError, match="must be"):
        compiled.run({name: x.astype(np.float64)})
    with pytest.raises(ta.InputError, match="unknown input"):
        compiled.run({name: x, "extra": x})
    with pytest.raises(ta.InputError, match="missing input"):
        compiled.run({})
    fresh = _fresh(feeds, np.random.default_rng(9))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(compiled.run(fresh)["y"], session.run(None, fresh)[0],
                               rtol=RTOL, atol=ATOL)
    strided = {name: np.asfortranarray(fresh[name])}      # same key, copied to C order
    np.testing.assert_allclose(compiled.run(strided)["y"], session.run(None, fresh)[0],
                               rtol=RTOL, atol=ATOL)


def _concat_of_gathers_model(axis: int) -> onnx.ModelProto:
    """Three embedding gathers and a graph input joined by one Concat, then a MatMul. ``e1``
    is also read by a Relu (so it keeps its own buffer), ``e2`` is also a graph output."""
    rng = np.random.default_rng(21)
    tables = [numpy_helper.from_array(rng.standard_normal((50, 4)).astype(np.float32), f"T{k}")
              for k in range(3)]
    width = 4 * 3 + 5 if axis == 1 else 4
    w = numpy_helper.from_array(rng.standard_normal((width, 3)).astype(np.float32), "W")
    rows_of_x = ["N", 5] if axis == 1 else ["N", 4]
    nodes = [h.make_node("Gather", [f"T{k}", f"ids{k}"], [f"e{k}"]) for k in range(3)]
    nodes += [h.make_node("Concat", ["e0", "x", "e1", "e2"], ["c"], axis=axis),
              h.make_node("MatMul", ["c", "W"], ["m"]),
              h.make_node("Relu", ["e1"], ["r"]),
              h.make_node("ReduceSum", ["r", "one"], ["s"], keepdims=1)]
    # Rows joined (axis 0): s has a row per id, m one per row of the Concat; add s's total.
    nodes += [h.make_node("Add", ["m", "s"], ["y"])] if axis == 1 else \
        [h.make_node("ReduceSum", ["s"], ["t"], keepdims=1), h.make_node("Add", ["m", "t"], ["y"])]
    inputs = [h.make_tensor_value_info(f"ids{k}", I64, ["N"]) for k in range(3)]
    inputs.append(h.make_tensor_value_info("x", F32, rows_of_x))
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    graph = h.make_graph(nodes, "concat", inputs,
                         [h.make_tensor_value_info("y", F32, ["M", 3]),
                          h.make_tensor_value_info("e2", F32, ["N", 4])], tables + [w, one])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_gathers_write_into_their_concat_block_without_a_copy():
    model = _concat_of_gathers_model(axis=1)
    rng = np.random.default_rng(22)
    feeds = {f"ids{k}": rng.integers(0, 50, 7).astype(np.int64) for k in range(3)}
    feeds["x"] = rng.standard_normal((7, 5)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for k in range(5):
        data = feeds if k == 0 else _fresh(feeds, rng)
        got = compiled.run(data)
        for name, want in zip(["y", "e2"], session.run(["y", "e2"], data)):
            np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=name)
    plan = compiled.specialiser.latest()
    concat = next(s for s in plan.steps if s.step.node.op_type == "Concat")
    # e0 only: e1 has a second reader, e2 is a graph output, x is a graph input.
    assert concat.plan == "no copy: 1 of 4 inputs written into their blocks of the output " \
                          "by their producers; 3 copied"
    assert "1 compiled sequence" in plan.describe()
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(dict(feeds, ids0=np.full(7, 50, np.int64)))


def test_a_concat_of_rows_still_copies():
    model = _concat_of_gathers_model(axis=0)
    rng = np.random.default_rng(23)
    feeds = {f"ids{k}": rng.integers(0, 50, 6).astype(np.int64) for k in range(3)}
    feeds["x"] = rng.standard_normal((6, 4)).astype(np.float32)
    compiled = _planned_against_onnxruntime(model, feeds, runs=4, seed=24)
    plan = compiled.specialiser.latest()
    concat = next(s for s in plan.steps if s.step.node.op_type == "Concat")
    assert concat.plan is None or "no copy" not in concat.plan


def test_plans_of_many_batch_sizes_are_evicted_and_forgotten(monkeypatch):
    from tensoralg.onnx.plan import static
    monkeypatch.setattr(static, "MAX_PLANS", 4)
    monkeypatch.setattr(static, "PLAN_AFTER_RUNS_WHEN_FULL", 3)
    model, feeds = MODELS["mlp"](np.random.default_rng(31))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(32)
    name = next(iter(feeds))
    for batch in range(1, 3 * static.MAX_PLANS + 2):
        data = {name: rng.standard_normal((batch, *feeds[name].shape[1:])).astype(np.float32)}
        for _ in range(4):             # record, plan, then the fast path
            got = compiled.run(data)["y"]
        np.testing.assert_allclose(got, session.run(None, data)[0], rtol=RTOL, atol=ATOL)
    live = [p for p in compiled.specialiser.plans.values() if p is not None]
    assert len(live) == static.MAX_PLANS and not any(p.retired for p in live)
    known = [plan for plan, _ in compiled._known_plans.values()]
    assert sum(not plan.retired for plan in known) <= static.MAX_PLANS


def test_a_recurring_shape_keeps_its_plan_among_many_passing_ones(monkeypatch):
    """Variable-length traffic: one shape that keeps coming back and many that pass by. The
    recurring shape's plan is the least recently run one never (eviction goes by last run,
    not by age), and once the model holds MAX_PLANS plans a passing shape seen twice builds
    none (it would take PLAN_AFTER_RUNS_WHEN_FULL runs), so nothing is rebuilt."""
    from tensoralg.onnx.plan import static
    monkeypatch.setattr(static, "MAX_PLANS", 3)
    model, feeds = MODELS["mlp"](np.random.default_rng(33))
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(34)
    name = next(iter(feeds))

    def batch_of(n):
        return {name: rng.standard_normal((n, *feeds[name].shape[1:])).astype(np.float32)}

    hot = batch_of(2)
    for _ in range(3):
        compiled.run(hot)
    plans = compiled.specialiser.plans
    hot_plan = plans[compiled.specialiser.signature(hot)]
    assert hot_plan is not None
    for n in range(3, 15):
        compiled.run(hot)
        for _ in range(2):
            compiled.run(batch_of(n))
    live = [p for p in plans.values() if p is not None]
    assert len(live) == 3 and plans[compiled.specialiser.signature(hot)] is hot_plan
    assert not hot_plan.retired
    passing = batch_of(20)
    for run in range(static.PLAN_AFTER_RUNS_WHEN_FULL):
        assert compiled.specialiser.signature(passing) not in plans, run
        compiled.run(passing)
    assert plans[compiled.specialiser.signature(passing)] is not None    # earned, evicting one
    assert not hot_plan.retired


def test_light_plans_of_many_shapes_then_their_compiled_sequences(monkeypatch):
    """Past LIGHT_PLANS_FROM plans a model gets light plans (steps called from Python, no
    compiled sequence), which compile their sequences once run COMPILE_LIGHT_AFTER_RUNS times;
    every run matches onnxruntime."""
    from tensoralg.onnx.plan import static
    monkeypatch.setattr(static, "LIGHT_PLANS_FROM", 1)
    monkeypatch.setattr(static, "COMPILE_LIGHT_AFTER_RUNS", 3)
    model, feeds = MODELS["mlp"](np.random.default_rng(35))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    name = next(iter(feeds))
    rng = np.random.default_rng(36)
    for batch in (2, 5):
        data = {name: rng.standard_normal((batch, *feeds[name].shape[1:])).astype(np.float32)}
        for run in range(6):
            got = compiled.run(data)["y"]
            np.testing.assert_allclose(got, session.run(None, data)[0], rtol=RTOL, atol=ATOL)
            plan = compiled.specialiser.plans.get(compiled.specialiser.signature(data))
            if batch == 5 and run == 1:
                assert plan.light and not plan.sequences and "light" in plan.describe()
        assert not plan.light and plan.sequences     # the first plan full, the next compiled


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fire_module_convolutions_write_their_channel_blocks_without_a_copy(dtype,
                                                                           monkeypatch):
    # SqueezeNet's fire module: a 1x1 and a 3x3 convolution of one input joined on channels.
    # Both write NCHW with their images a whole Concat output apart; a third Conv output that
    # is also read elsewhere (by the Relu) is still copied. The 3x3 layer takes the direct GEMM
    # route here (Winograd off: its block writes are tested in tests/test_winograd.py).
    monkeypatch.setenv("TENSORALG_WINOGRAD", "0")
    rng = np.random.default_rng(5)
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    weights = {"w1": rng.standard_normal((48, 16, 1, 1)), "w3": rng.standard_normal((64, 16, 3, 3)),
               "w5": rng.standard_normal((8, 16, 1, 1)), "b1": rng.standard_normal(48),
               "b3": rng.standard_normal(64), "b5": rng.standard_normal(8)}
    inits = [numpy_helper.from_array((v / 4).astype(dtype), k) for k, v in weights.items()]
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             h.make_node("Conv", ["x", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]),
             h.make_node("Conv", ["x", "w5", "b5"], ["c5"]),
             h.make_node("Relu", ["c1"], ["r1"]), h.make_node("Relu", ["c3"], ["r3"]),
             h.make_node("Concat", ["r1", "r3", "c5"], ["y"], axis=1),
             h.make_node("Relu", ["c5"], ["z"])]
    graph = h.make_graph(nodes, "fire", [h.make_tensor_value_info("x", kind, [3, 16, 16, 12])],
                         [h.make_tensor_value_info("y", kind, [3, 120, 16, 12]),
                          h.make_tensor_value_info("z", kind, [3, 8, 16, 12])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    x = rng.standard_normal((3, 16, 16, 12)).astype(dtype)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        got = compiled.run({"x": x})
    w = {k: (v / 4).astype(dtype) for k, v in weights.items()}
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    c1 = np.einsum("mc,nchw->nmhw", w["w1"][:, :, 0, 0], x) + w["b1"][:, None, None]
    c3 = sum(np.einsum("mc,nchw->nmhw", w["w3"][:, :, i, j], padded[:, :, i:i + 16, j:j + 12])
             for i in range(3) for j in range(3)) + w["b3"][:, None, None]
    c5 = np.einsum("mc,nchw->nmhw", w["w5"][:, :, 0, 0], x) + w["b5"][:, None, None]
    want = np.concatenate([np.maximum(c1, 0), np.maximum(c3, 0), c5], axis=1)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got["y"], want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got["z"], np.maximum(c5, 0), rtol=tol, atol=tol)
    from tensoralg.codegen.llvm import host_has

    plan = compiled.specialiser.latest()
    concat = next(s for s in plan.steps if s.step.node.op_type == "Concat")
    # The two kinds of producer: the pointwise kernel on NCHW planes and the GEMM's scatter
    # (AVX-512 hosts; elsewhere the 3x3 layer's channels-last product is transposed back).
    scatters = host_has("avx512f")
    placed = 2 if scatters else 1
    assert concat.plan == f"no copy: {placed} of 3 inputs written into their blocks of the " \
                          f"output by their producers; {3 - placed} copied", plan.describe()
    text = " ".join(s.plan or "" for s in plan.steps)
    assert "pointwise convolution on NCHW planes" in text, text
    assert ("tiles scattered into the NCHW output" in text) == scatters, text


def test_a_no_op_cast_of_a_shape_value_read_only_by_fixed_shapes():
    """Shape -> Gather -> Div -> Cast (int64 to int64) -> Concat -> Reshape, as Swin's
    TorchScript export computes its window sizes: the Cast is a view of a shape value whose
    producer no kept step reads; the plan must not look for it at run time (it raised
    KeyError on the third run)."""
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("Gather", ["s", "one"], ["w"], axis=0),
        h.make_node("Div", ["w", "two"], ["half"]),
        h.make_node("Cast", ["half"], ["half64"], to=I64),
        h.make_node("Unsqueeze", ["half64", "zero_axis"], ["half1"]),
        h.make_node("Concat", ["minus_one", "half1"], ["shape"], axis=0),
        h.make_node("Reshape", ["x", "shape"], ["r"]),
        h.make_node("Relu", ["r"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "zero_axis"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", F32, ["n", 8])],
                         [h.make_tensor_value_info("y", F32, ["m", 4])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    _planned_against_onnxruntime(model, {"x": x}, runs=4, seed=0)


def _dynamic_batch_model():
    """A dynamic-batch export's shape arithmetic: ``Shape -> Gather -> Equal -> Where ->
    Expand`` builds a (batch, 4) mask from the batch size alone, and a Range of the row length
    is added to every row, as exporters write position ids."""
    nodes = [
        h.make_node("Shape", ["x"], ["shape"], name="shape"),
        h.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        h.make_node("Unsqueeze", ["batch", "axes"], ["batch1"], name="batch1"),
        h.make_node("Concat", ["batch1", "four"], ["target"], name="target", axis=0),
        h.make_node("Equal", ["target", "minus_one"], ["is_free"], name="is_free"),
        h.make_node("Where", ["is_free", "ones", "target"], ["expand_to"], name="expand_to"),
        h.make_node("Expand", ["row", "expand_to"], ["mask"], name="mask"),
        h.make_node("Gather", ["shape", "one"], ["length"], name="length", axis=0),
        h.make_node("Range", ["start", "length", "step"], ["positions"], name="positions"),
        h.make_node("Cast", ["positions"], ["positions_f"], name="positions_f", to=1),
        h.make_node("Add", ["x", "positions_f"], ["shifted"], name="shifted"),
        h.make_node("ReduceSum", ["shifted", "last_axis"], ["sums"], name="sums", keepdims=1),
        h.make_node("Mul", ["sums", "mask"], ["y"], name="y"),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in (
        ("zero", 0), ("one", 1), ("axes", [0]), ("last_axis", [1]), ("four", [4]),
        ("minus_one", [-1, -1]),
        ("ones", [1, 1]), ("start", 0), ("step", 1))]
    inits.append(numpy_helper.from_array(np.arange(4, dtype=np.float32)[None], "row"))
    graph = h.make_graph(nodes, "dynamic", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     ["batch", "n"])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_shape_arithmetic_of_a_dynamic_batch_export_is_taken_once_per_plan():
    model = _dynamic_batch_model()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(0)
    for batch, n in [(2, 5), (2, 5), (2, 5), (7, 3), (7, 3), (7, 3), (2, 5), (1, 9), (1, 9),
                     (1, 9)]:
        x = rng.standard_normal((batch, n)).astype(np.float32)
        np.testing.assert_allclose(compiled.run({"x": x})["y"],
                                   session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    plan = compiled.specialiser.latest()
    kinds = {s.step.node.name: s.kind for s in plan.steps}
    for name in ("shape", "batch", "is_free", "expand_to", "length", "positions"):
        assert name not in kinds, kinds        # constants of the plan, not steps
    assert "generic" not in kinds.values(), kinds


def test_a_shape_read_from_a_value_dependent_size_still_drops_the_plan():
    """``Shape(NonZero(x))`` depends on x's values: the NonZero step stays in the plan, and
    when its size changes under the same input shape the call runs node by node, right."""
    nodes = [h.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             h.make_node("Shape", ["nz"], ["nz_shape"], name="shape"),
             h.make_node("Gather", ["nz_shape", "one"], ["count"], name="count", axis=0),
             h.make_node("Cast", ["count"], ["count_f"], name="count_f", to=1),
             h.make_node("Mul", ["x", "count_f"], ["y"], name="y")]
    graph = h.make_graph(nodes, "nz", [h.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
                         [numpy_helper.from_array(np.array(1, np.int64), "one")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    compiled = tonnx.load(model, opt_level=3)
    few = np.array([1, 0, 0, 2, 0, 0], np.float32)
    many = np.array([1, 3, 5, 2, 4, 6], np.float32)
    for x in (few, few, few, many, few, many, many):
        np.testing.assert_allclose(compiled.run({"x": x})["y"], x * np.count_nonzero(x))


@pytest.mark.parametrize("shape, perm, view", [
    ((16, 21, 1), [0, 2, 1], True),        # DCN's cross layer: a size-1 axis moved
    ((1, 5, 3), [1, 0, 2], True),
    ((4, 1, 3, 1), [2, 1, 3, 0], False),   # 4 and 3 swap: a real transpose
    ((4, 3, 2), [0, 2, 1], False),
])
def test_transpose_that_keeps_the_value_order_is_a_view(shape, perm, view):
    out_shape = [shape[a] for a in perm]
    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"),
             h.make_node("Transpose", ["r"], ["t"], name="transpose", perm=perm),
             h.make_node("Sigmoid", ["t"], ["y"], name="sigmoid")]
    graph = h.make_graph(nodes, "t", [h.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal(shape).astype(np.float32)
        want = 1 / (1 + np.exp(-np.transpose(np.maximum(x, 0), perm)))
        np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-6, atol=1e-6)
    names = {s.step.node.name for s in compiled.specialiser.latest().steps}
    assert ("transpose" not in names) == view, names
