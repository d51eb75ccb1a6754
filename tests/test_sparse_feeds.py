"""Graph inputs fed as SciPy sparse matrices (tensoralg/onnx/passes/bags/sparse_feeds.py): the same values
as the dense feed at every level, CSR handed to the plan's multi-hot products without a dense
copy, and clear errors for bad sparse feeds."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from onnx import TensorProto, helper, numpy_helper
from test_onnx_models import ATOL, RTOL, _model, _reference, wide_deep

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.onnx.passes.bags.sparse_feeds import SparseFeed

F32 = TensorProto.FLOAT


def _fm(rng, width=120, factors=8):
    """A factorization machine over a multi-hot input: three products read it (x w, x V and
    (x*x)(V*V)), so level 3 takes it in CSR."""
    h = helper
    nodes = [h.make_node("MatMul", ["x", "w"], ["linear"]),
             h.make_node("MatMul", ["x", "V"], ["xv"]),
             h.make_node("Mul", ["xv", "xv"], ["xv2"]),
             h.make_node("Mul", ["x", "x"], ["x2"]),
             h.make_node("MatMul", ["x2", "V2"], ["x2v2"]),
             h.make_node("Sub", ["xv2", "x2v2"], ["diff"]),
             h.make_node("ReduceSum", ["diff", "axes"], ["pair"], keepdims=1),
             h.make_node("Add", ["linear", "pair"], ["y"])]
    v = rng.standard_normal((width, factors)).astype(np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((width, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(v, "V"), numpy_helper.from_array(v * v, "V2"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    return _model(nodes, [h.make_tensor_value_info("x", F32, ["N", width])],
                  [h.make_tensor_value_info("y", F32, ["N", 1])], inits)


def _multi_hot(rng, rows, width, ones):
    x = np.zeros((rows, width), np.float32)
    for row in x:
        row[rng.choice(width, ones, replace=False)] = rng.uniform(0.5, 2.0, ones)
    return x


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_sparse_feed_gives_the_dense_feeds_values(opt_level):
    rng = np.random.default_rng(0)
    model = _fm(rng)
    compiled = tonnx.load(model, opt_level=opt_level)
    for rows in (16, 16, 16, 16, 3):       # a plan from the third call, then a new shape
        x = _multi_hot(rng, rows, 120, 6)
        want = _reference(model, {"x": x})["y"]
        for feed in (sp.csr_array(x), sp.csr_matrix(x), sp.coo_array(x), sp.csc_array(x)):
            got = compiled.run({"x": feed})["y"]
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    if opt_level == 3:
        plans = [p for p in compiled.specialiser.plans.values() if p is not None]
        assert any(p.csr_feeds == frozenset({"x"}) for p in plans)


def test_level3_hands_the_csr_over_without_densifying(monkeypatch):
    rng = np.random.default_rng(1)
    model, feeds = wide_deep(rng)
    compiled = tonnx.load(model, opt_level=3)
    want = _reference(model, feeds)["y"]
    sparse = dict(feeds, wide=sp.csr_array(feeds["wide"]))
    for _ in range(2):                     # the second call records and builds the plan
        compiled.run(sparse)
    plan = compiled.specialiser.latest()
    assert plan.csr_feeds == frozenset({"wide"})
    assert "multi-hot CSR kernel" in plan.describe()

    def refuse(self):
        raise AssertionError("the plan densified a feed it takes in CSR")
    monkeypatch.setattr(SparseFeed, "dense", refuse)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run(sparse)["y"], want, rtol=RTOL, atol=ATOL)
    # New rows, a new pattern, the same plan.
    fresh = _multi_hot(rng, 9, 80, 5)
    np.testing.assert_allclose(
        compiled.run(dict(feeds, wide=sp.csr_array(fresh)))["y"],
        _reference(model, dict(feeds, wide=fresh))["y"], rtol=RTOL, atol=ATOL)


def test_a_dense_reader_gets_the_densified_feed():
    # x feeds a MatMul (CSR) and a Relu (dense): the plan densifies it, with the same values.
    h = helper
    rng = np.random.default_rng(2)
    w = rng.standard_normal((64, 3)).astype(np.float32)
    model = _model([h.make_node("MatMul", ["x", "w"], ["p"]),
                    h.make_node("MatMul", ["x", "w"], ["q"]),
                    h.make_node("Relu", ["x"], ["r"]),
                    h.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=1),
                    h.make_node("Add", ["p", "q"], ["pq"]),
                    h.make_node("Add", ["pq", "s"], ["y"])],
                   [h.make_tensor_value_info("x", F32, ["N", 64])],
                   [h.make_tensor_value_info("y", F32, ["N", 3])],
                   [numpy_helper.from_array(w, "w"),
                    numpy_helper.from_array(np.array([1], np.int64), "axes")])
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(4):
        x = _multi_hot(rng, 32, 64, 3) - 0.5 * _multi_hot(rng, 32, 64, 2)
        got = compiled.run({"x": sp.csr_array(x)})["y"]
        np.testing.assert_allclose(got, _reference(model, {"x": x})["y"], rtol=RTOL,
                                   atol=ATOL)
    assert compiled.specialiser.latest().csr_feeds == frozenset()


def test_unsorted_duplicates_and_explicit_zeros_mean_what_the_dense_matrix_holds():
    rng = np.random.default_rng(3)
    model = _fm(rng, width=10, factors=2)
    compiled = tonnx.load(model, opt_level=3)
    # Row 0 holds column 7 twice (1 + 2 = 3) and an explicit zero; row 1 is unsorted.
    indptr = np.array([0, 3, 5, 5])
    indices = np.array([7, 2, 7, 9, 1])
    data = np.array([1.0, 0.0, 2.0, 4.0, 5.0], np.float32)
    feed = sp.csr_array((data, indices, indptr), shape=(3, 10))
    dense = np.zeros((3, 10), np.float32)
    dense[0, 7], dense[1, 9], dense[1, 1] = 3.0, 4.0, 5.0
    want = _reference(model, {"x": dense})["y"]
    for _ in range(4):
        np.testing.assert_allclose(compiled.run({"x": feed})["y"], want, rtol=RTOL, atol=ATOL)
    # The caller's matrix is left as it was.
    assert feed.indices.tolist() == [7, 2, 7, 9, 1] and feed.nnz == 5


def test_more_nonzeros_than_the_plan_holds_runs_node_by_node():
    rng = np.random.default_rng(4)
    model = _fm(rng)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run({"x": sp.csr_array(_multi_hot(rng, 16, 120, 2))})
    full = rng.random((16, 120)).astype(np.float32)          # every entry nonzero
    got = compiled.run({"x": sp.csr_array(full)})["y"]
    np.testing.assert_allclose(got, _reference(model, {"x": full})["y"], rtol=RTOL, atol=ATOL)
    assert any("static plan dropped" in note for note in compiled.specialiser.notes.values())


def test_bad_sparse_feeds_are_input_errors():
    rng = np.random.default_rng(5)
    model = _fm(rng, width=10, factors=2)
    compiled = tonnx.load(model, opt_level=3)
    good = sp.csr_array(_multi_hot(rng, 4, 10, 2))
    with pytest.raises(ta.InputError, match="must be float32"):
        compiled.run({"x": good.astype(np.float64)})
    with pytest.raises(ta.InputError, match="must hold floats"):
        compiled.run({"x": sp.csr_array(np.eye(4, 10, dtype=np.int32))})
    with pytest.raises(ta.InputError, match="shape"):
        compiled.run({"x": sp.csr_array(np.eye(4, 11, dtype=np.float32))})
    corrupt = sp.csr_array((np.ones(2, np.float32), np.array([3, 40]), np.array([0, 1, 2])),
                           shape=(2, 10))
    with pytest.raises(ta.InputError, match="invalid sparse matrix"):
        compiled.run({"x": corrupt})
    backwards = sp.csr_array((np.ones(2, np.float32), np.array([3, 4]), np.array([0, 2, 1])),
                             shape=(2, 10))
    with pytest.raises(ta.InputError, match="invalid sparse matrix"):
        compiled.run({"x": backwards})
    session = tonnx.InferenceSession(model.SerializeToString())
    out = session.run(None, {"x": good})[0]
    np.testing.assert_allclose(out, _reference(model, {"x": good.toarray()})["y"], rtol=RTOL,
                               atol=ATOL)


def test_a_sparse_feed_overriding_an_initializer_is_densified():
    """An initializer the model also lists as an input may be fed at level 0, sparse too
    (densified); level 3 compiled it in and refuses the feed (test_onnx_errors.py)."""
    from onnx import helper
    from test_onnx_models import MODELS
    model, feeds = MODELS["mlp"](np.random.default_rng(8))
    init = model.graph.initializer[0]
    model.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                           list(init.dims)))
    weight = numpy_helper.to_array(init)
    pruned = np.where(np.abs(weight) > 0.5, weight, 0).astype(weight.dtype)
    dense = dict(feeds, **{init.name: pruned})
    sparse = dict(feeds, **{init.name: sp.csr_array(pruned)})
    level0 = tonnx.load(model, opt_level=0)
    want = level0.run(dense)["y"]
    assert not np.allclose(want, level0.run(feeds)["y"])      # the feed is used
    for _ in range(3):
        np.testing.assert_allclose(level0.run(sparse)["y"], want, rtol=RTOL, atol=ATOL)
    with pytest.raises(tonnx.InputError, match="opt_level=0"):
        tonnx.load(model, opt_level=3).run(sparse)


def test_empty_batches_and_empty_rows_fed_sparse():
    rng = np.random.default_rng(6)
    model = _fm(rng, width=30, factors=3)
    compiled = tonnx.load(model, opt_level=3)
    x = _multi_hot(rng, 8, 30, 2)
    x[[1, 5]] = 0.0                                   # rows without a single nonzero
    for _ in range(4):
        got = compiled.run({"x": sp.csr_array(x)})["y"]
    np.testing.assert_allclose(got, _reference(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
    empty = np.zeros((0, 30), np.float32)
    for _ in range(3):
        assert compiled.run({"x": sp.csr_array(empty)})["y"].shape == (0, 1)
    zero = np.zeros((4, 30), np.float32)
    for _ in range(3):
        np.testing.assert_allclose(compiled.run({"x": sp.csr_array(zero)})["y"],
                                   _reference(model, {"x": zero})["y"], atol=ATOL)


def test_a_csr_fed_plan_is_one_compiled_sequence_reading_the_feed_in_place():
    # The feed's arrays reach the compiled sequence through slots: one native call per run,
    # and a matrix refilled in place (a data loader's buffers) is read and checked afresh.
    rng = np.random.default_rng(9)
    model = _fm(rng, width=50, factors=4)
    compiled = tonnx.load(model, opt_level=3)
    x = _multi_hot(rng, 6, 50, 3)
    feed = sp.csr_array(x)
    for _ in range(3):
        compiled.run({"x": feed})
    plan = compiled.specialiser.latest()
    assert plan.csr_feeds == frozenset({"x"})
    assert "1 compiled sequence" in plan.describe() and len(plan.runners) == 1
    np.testing.assert_allclose(compiled.run({"x": feed})["y"],
                               _reference(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
    # Same arrays, new contents (same count of entries per row, other columns and values).
    refill = _multi_hot(rng, 6, 50, 3)
    fresh = sp.csr_array(refill)
    feed.indices[:] = fresh.indices
    feed.data[:] = fresh.data
    np.testing.assert_allclose(compiled.run({"x": feed})["y"],
                               _reference(model, {"x": refill})["y"], rtol=RTOL, atol=ATOL)
    # Corrupted in place: caught before any kernel reads it.
    feed.indices[0] = 50
    with pytest.raises(ta.InputError, match="invalid sparse matrix"):
        compiled.run({"x": feed})


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_csr_feeds_of_either_index_dtype(index):
    rng = np.random.default_rng(10)
    model = _fm(rng, width=40, factors=3)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(4):
        x = _multi_hot(rng, 5, 40, 4)
        csr = sp.csr_array(x)
        feed = sp.csr_array((csr.data, csr.indices.astype(index), csr.indptr.astype(index)),
                            shape=x.shape)
        feed.indices = feed.indices.astype(index)       # scipy may pick its own index dtype
        feed.indptr = feed.indptr.astype(index)
        np.testing.assert_allclose(compiled.run({"x": feed})["y"],
                                   _reference(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
    signature = next(iter(compiled.specialiser.plans))
    assert signature[0][3] == np.dtype(index).str
    assert compiled.specialiser.latest().csr_feeds == frozenset({"x"})


def test_compiled_csr_load_matches_the_python_load():
    rows = ta.api.RowCompressor((3, 40), np.float32, capacity=4)
    m = sp.csr_array(np.array([[0, 1, 0, 2] + [0] * 36, [0] * 40, [3] + [0] * 39], np.float32))
    call = rows.load_call(m.indptr, m.indices, m.data, "test")
    squares = rows.with_squares()                        # added after the call was made
    call()
    assert rows.pos.tolist() == [0, 2, 2, 3] and rows.crd[:3].tolist() == [1, 3, 0]
    assert rows.vals[:3].tolist() == [1, 2, 3] and squares[:3].tolist() == [1, 4, 9]
    full = sp.csr_array(np.ones((3, 40), np.float32))
    with pytest.raises(ta.ShapeError, match="120 nonzeros"):
        rows.load_call(full.indptr, full.indices, full.data, "test")()
    assert rows.pos.tolist() == [0, 2, 2, 3]             # left as it was
    with pytest.raises(ValueError, match="cannot load"):
        rows.load_call(m.indptr, m.indices.astype(np.int64), m.data, "test")


def test_csr_feeds_take_the_fast_path_and_are_still_validated(monkeypatch):
    rng = np.random.default_rng(11)
    model = _fm(rng, width=30, factors=2)
    compiled = tonnx.load(model, opt_level=3)
    x = _multi_hot(rng, 4, 30, 2)
    for _ in range(3):
        compiled.run({"x": sp.csr_array(x)})

    def refuse(feeds):
        raise AssertionError("a known CSR feed took the checked path")
    monkeypatch.setattr(compiled, "_checked", refuse)
    np.testing.assert_allclose(compiled.run({"x": sp.csr_array(x)})["y"],
                               _reference(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
    bad = sp.csr_array(x)
    bad.indices[-1] = 30
    with pytest.raises(ta.InputError, match="invalid sparse matrix"):
        compiled.run({"x": bad})
    unsorted = sp.csr_array(x)
    unsorted.indices[:2] = unsorted.indices[:2][::-1].copy()
    unsorted.data[:2] = unsorted.data[:2][::-1].copy()
    with pytest.raises(AssertionError, match="checked path"):   # repaired there, on a copy
        compiled.run({"x": unsorted})
