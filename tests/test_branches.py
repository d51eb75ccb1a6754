"""Concurrent branches of a static plan (onnx/plan/branches.py): which steps may run at once, the
native groups that run them (codegen/sequence.py), the memory plan that keeps them apart, and
models run with them against onnxruntime."""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import onnxruntime as ort
import pytest
import scipy.sparse as sp
from conftest import passes_in_forked_child, split_product
from onnx import TensorProto, numpy_helper
from onnx import helper as h
from test_onnx_models import ATOL, MODELS, RTOL

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.codegen.sequence import NativeCall, NativeGroup
from tensoralg.onnx.frontend.load import build_graph
from tensoralg.onnx.passes.fusion import fuse
from tensoralg.onnx.plan import branches, static
from tensoralg.onnx.plan.branches import Footprint, conflict, segments, span_of
from tensoralg.runtime.pool import NativePool, native_pool_supported
from tensoralg.runtime.sequence import CallSequence

needs_pool = pytest.mark.skipif(not native_pool_supported(),
                                reason="the native pool needs Linux on x86-64 or AArch64")
BIG = 1 << 20


def _print(writes=(), reads=(), cost=BIG, shared=()):
    return Footprint(tuple(writes), tuple(reads), cost, frozenset(shared))


# ---- which steps may run at once ---------------------------------------------------------

def test_conflicts_are_writes_against_touches_and_shared_state():
    a = _print(writes=[(0, 64)])
    assert conflict(a, _print(reads=[(32, 40)])) and conflict(_print(reads=[(32, 40)]), a)
    assert conflict(a, _print(writes=[(63, 70)]))
    assert not conflict(a, _print(writes=[(64, 128)]))          # adjacent bytes
    assert not conflict(_print(reads=[(0, 64)]), _print(reads=[(0, 64)]))   # both read
    assert conflict(_print(shared={"csr x"}), _print(shared={"csr x"}))
    assert not conflict(a, _print(writes=[(8, 8)]))              # an empty array


def test_span_of_a_strided_view_covers_its_rows():
    block = np.zeros((4, 10), np.float32)[:, 3:5]
    low, high = span_of(block)
    assert low == block.ctypes.data and high == low + 3 * 40 + 8
    assert span_of(np.zeros((0, 3)))[0] == span_of(np.zeros((0, 3)))[1]


def test_independent_chains_form_one_segment_and_the_join_runs_after():
    # Two chains (0 -> 2, 1 -> 3) and a step reading both.
    prints = [_print(writes=[(0, 10)]), _print(writes=[(10, 20)]),
              _print(writes=[(20, 30)], reads=[(0, 10)]),
              _print(writes=[(30, 40)], reads=[(10, 20)]),
              _print(writes=[(40, 50)], reads=[(20, 40)])]
    assert segments(prints, min_cost=1) == [[[0, 2], [1, 3]], [[4]]]


def test_a_chain_stays_serial_and_small_branches_are_not_worth_a_thread():
    chain = [_print(writes=[(k, k + 1)], reads=[(k - 1, k)]) for k in range(1, 5)]
    assert segments(chain, min_cost=1) == [[[k]] for k in range(4)]
    tiny = [_print(writes=[(0, 10)]), _print(writes=[(10, 20)], cost=100)]
    assert segments(tiny, min_cost=1000) == [[[0]], [[1]]]
    assert segments(tiny, min_cost=100) == [[[0], [1]]]


def test_a_small_branch_runs_beside_no_more_chain_than_it_is_worth():
    # NeuMF's shape: a chain of four steps and a side branch of 20% of its cost runs beside
    # the last three (26%), not beside all four; at 30% beside all four.
    chain = [_print(writes=[(k, k + 1)], reads=[(k - 1, k)], cost=1000) for k in range(1, 5)]
    side = _print(writes=[(100, 101)], cost=800)
    assert segments(chain + [side], min_cost=1) == [[[0]], [[1, 2, 3], [4]]]
    side = _print(writes=[(100, 101)], cost=1200)
    assert segments(chain + [side], min_cost=1) == [[[0, 1, 2, 3], [4]]]


def test_a_barrier_step_splits_windows():
    barrier = _print(writes=[(0, 1 << 62)])
    prints = [_print(writes=[(10, 20)]), barrier, _print(writes=[(30, 40)])]
    assert segments(prints, min_cost=1) == [[[0]], [[1]], [[2]]]


# ---- the native group ----------------------------------------------------------------------

CALL = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64)


@needs_pool
def test_a_group_runs_each_unit_in_order_zeroes_first_and_fails_with_a_unit():
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    zeroed = np.full(4, 7.0)
    before: list[float] = []

    def record(value: int) -> int:
        with lock:
            before.append(float(zeroed.sum()))
            seen.append((value, threading.get_ident()))
        return 3 if value == 99 else 0

    callback = CALL(record)
    address = ctypes.cast(callback, ctypes.c_void_p).value

    def call(value: int) -> NativeCall:
        return NativeCall(address, (ctypes.c_int64,), (value,), None, f"k{value}")

    pool = NativePool(1)
    try:
        units = tuple(tuple(call(10 * u + k) for k in range(3)) for u in range(4))
        group = NativeGroup(units, (pool.run_address, pool.address),
                            ((zeroed.ctypes.data, zeroed.nbytes),), "g")
        assert len(group.calls) == 12
        sequence = CallSequence([call(-1), group, call(-2)], slots=0)
        assert sequence.run() == 0
        values = [v for v, _ in seen]
        assert values[0] == -1 and values[-1] == -2 and sorted(values[1:-1]) == \
            sorted(10 * u + k for u in range(4) for k in range(3))
        for u in range(4):                       # a unit's calls in order, on one thread
            mine = [(v, t) for v, t in seen if v >= 0 and v // 10 == u]
            assert [v for v, _ in mine] == [10 * u + k for k in range(3)]
            assert len({t for _, t in mine}) == 1
        assert before[1:-1] == [0.0] * 12         # zeroed before any unit ran
        seen.clear()
        failing = NativeGroup((((call(1), call(99), call(2))), (call(3),)),
                              (pool.run_address, pool.address), (), "bad")
        assert CallSequence([call(0), failing], slots=0).run() == 2
        assert 2 not in [v for v, _ in seen]     # the unit stopped at its failing call
    finally:
        pool.close()
    with pytest.raises(ValueError, match="two or more"):
        NativeGroup((units[0],), (0, 0))


@needs_pool
def test_a_bound_call_recut_into_finer_ranges_gives_the_same_output(two_threads):
    call, want = split_product()
    finer = call.native({}, refine=3)
    assert finer is not None and len(finer.more) == 5
    assert len({tuple(args) for args in (finer.args, *finer.more)}) == 6
    call.out.fill(np.nan)
    assert CallSequence([finer, finer], slots=0).run() == 0
    np.testing.assert_allclose(call.out, want)


# ---- fusion leaves independent branches apart ---------------------------------------------

def _graph(nodes, inputs, inits):
    model = h.make_model(h.make_graph(
        nodes, "g", [h.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in inputs],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [numpy_helper.from_array(a, n) for n, a in inits.items()]),
        opset_imports=[h.make_opsetid("", 17)])
    return build_graph(model)


def test_an_epilogue_reading_an_independent_branch_does_not_take_the_product():
    w = np.eye(4, dtype=np.float32)
    side = [h.make_node("Softmax", ["x"], ["b"]), h.make_node("Relu", ["x"], ["a"]),
            h.make_node("MatMul", ["a", "W"], ["m"])]
    independent = _graph(side + [h.make_node("Add", ["m", "b"], ["s"]),
                                 h.make_node("Sigmoid", ["s"], ["y"])], ["x"], {"W": w})
    programs = [n.attributes["program"] for n in fuse(independent).nodes
                if n.op_type == "Fused"]
    assert [p.head for p in programs] == [None]          # MatMul left to run beside Softmax
    residual = _graph([h.make_node("Softmax", ["x"], ["a"]),
                       h.make_node("MatMul", ["a", "W"], ["m"]),
                       h.make_node("Add", ["m", "a"], ["s"]),
                       h.make_node("Sigmoid", ["s"], ["y"])], ["x"], {"W": w})
    programs = [n.attributes["program"] for n in fuse(residual).nodes if n.op_type == "Fused"]
    assert len(programs) == 1 and programs[0].head is not None    # a is the head's operand


# ---- models run with their branches at once ------------------------------------------------

def _forced_groups(monkeypatch) -> None:
    """Every branch worth a thread, and every group kept however fast (the test models are
    far too small for the real thresholds)."""
    monkeypatch.setattr(branches, "MIN_BRANCH_BYTES", 0)
    monkeypatch.setattr(branches, "MIN_OFFLOAD", 0.0)
    monkeypatch.setattr(static, "MIN_GAIN", float("inf"))


def _grouped(plan) -> int:
    return sum(isinstance(c, ta.api.NativeGroup) for s in plan.sequences for c in s.calls)


@needs_pool
@pytest.mark.parametrize("name", ["wide_deep", "two_tower", "dlrm", "neumf"])
def test_models_with_concurrent_branches_match_onnxruntime(name, two_threads, monkeypatch):
    _forced_groups(monkeypatch)
    model, feeds = MODELS[name](np.random.default_rng(11))
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(5)
    for k in range(40):
        data = {n: (rng.standard_normal(a.shape).astype(a.dtype) if a.dtype.kind == "f" and
                    n != "wide" else rng.permutation(a, axis=0)) for n, a in feeds.items()}
        got = compiled.run(data)
        for key, value in zip([o.name for o in session.get_outputs()],
                              session.run(None, data)):
            np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL)
    plan = compiled.specialiser.latest()
    assert _grouped(plan) >= 1 and "concurrent branches " in plan.describe()
    profile = str(compiled.profile(data))
    assert "timed one step at a time; a plain run runs these at once: concurrent branches" \
        in profile


@needs_pool
def test_a_bad_id_inside_a_group_names_its_node(two_threads, monkeypatch):
    _forced_groups(monkeypatch)
    model, feeds = MODELS["wide_deep"](np.random.default_rng(11))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    assert _grouped(compiled.specialiser.latest()) == 1
    bad = dict(feeds, cats=feeds["cats"].copy())
    bad["cats"][3, 1] = 1000
    with pytest.raises(ta.TensorAlgebraError, match="1000|out of range|index"):
        compiled.run(bad)
    np.testing.assert_allclose(compiled.run(feeds)["y"], tonnx.load(model, opt_level=0)
                               .run(feeds)["y"], rtol=RTOL, atol=ATOL)


@needs_pool
def test_a_group_that_is_not_faster_is_not_kept(two_threads, monkeypatch):
    monkeypatch.setattr(branches, "MIN_BRANCH_BYTES", 0)
    monkeypatch.setattr(branches, "MIN_OFFLOAD", 0.0)
    monkeypatch.setattr(static, "MIN_GAIN", 0.0)              # nothing is fast enough
    model, feeds = MODELS["wide_deep"](np.random.default_rng(11))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        got = compiled.run(feeds)["y"]
    plan = compiled.specialiser.latest()
    assert _grouped(plan) == 0 and "concurrent" not in plan.describe()
    np.testing.assert_allclose(got, tonnx.load(model, opt_level=0).run(feeds)["y"],
                               rtol=RTOL, atol=ATOL)
    # Built again without branches: its buffers share arenas as a one-thread plan's do.
    ta.set_num_threads(1)
    alone = tonnx.load(model, opt_level=3)
    for _ in range(3):
        alone.run(feeds)
    assert str(alone.specialiser.latest().memory) == str(plan.memory)


def test_one_thread_makes_no_groups(monkeypatch):
    monkeypatch.setattr(branches, "MIN_BRANCH_BYTES", 0)
    before = ta.get_num_threads()
    ta.set_num_threads(1)
    try:
        model, feeds = MODELS["two_tower"](np.random.default_rng(11))
        compiled = tonnx.load(model, opt_level=3)
        for _ in range(3):
            compiled.run(feeds)
        assert _grouped(compiled.specialiser.latest()) == 0
    finally:
        ta.set_num_threads(before)



@needs_pool
def test_a_csr_fed_input_reaches_its_branch(two_threads, monkeypatch):
    _forced_groups(monkeypatch)
    model, feeds = MODELS["wide_deep"](np.random.default_rng(11))
    want = tonnx.load(model, opt_level=0).run(feeds)["y"]
    compiled = tonnx.load(model, opt_level=3)
    sparse = dict(feeds, wide=sp.csr_array(feeds["wide"]))
    for _ in range(4):
        np.testing.assert_allclose(compiled.run(sparse)["y"], want, rtol=RTOL, atol=ATOL)
    assert _grouped(compiled.specialiser.latest()) == 1


@needs_pool
def test_a_forked_child_runs_a_grouped_plan(two_threads, monkeypatch):
    _forced_groups(monkeypatch)
    model, feeds = MODELS["dlrm"](np.random.default_rng(11))
    want = tonnx.load(model, opt_level=0).run(feeds)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    assert _grouped(compiled.specialiser.latest()) >= 1

    def same() -> bool:
        got = compiled.run(feeds)
        return all(np.allclose(got[k], v, rtol=RTOL, atol=ATOL) for k, v in want.items())

    def in_child() -> bool:
        ok = same()                              # no workers: the caller runs every branch
        ta.set_num_threads(2)                    # the child's own worker starts
        return ok and same() and same()

    assert same()
    passes_in_forked_child(in_child)


class _Call:
    def __init__(self, split: bool) -> None:
        self.more = ((1,),) if split else ()


def test_cut_stops_a_branch_of_several_steps_before_its_first_split_kernel():
    forms = [[_Call(False)], [_Call(True)], [_Call(False)], [_Call(False)]]
    assert branches._cut([[0, 1, 2], [3]], forms) == ([[0], [3]], [1, 2])
    # one split step alone stays: its ranges become units of the group
    assert branches._cut([[1], [3]], forms) == ([[1], [3]], [])
    assert branches._cut([[1, 2], [3]], forms) == ([[3]], [1, 2])


@needs_pool
def test_cut_branches_run_their_split_rest_after_the_group(two_threads, monkeypatch):
    _forced_groups(monkeypatch)
    # Split every layer of the small test model over the two threads.
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_FMAS_PER_RANGE_NATIVE", 100)
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_ROWS_PER_THREAD", 1)
    real = static.grouped_calls
    monkeypatch.setattr(static, "grouped_calls", lambda *args: real(*args[:5], True))
    model, feeds = MODELS["dlrm"](np.random.default_rng(11))
    want = tonnx.load(model, opt_level=0).run(feeds)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(4):
        got = compiled.run(feeds)
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL)
    plan = compiled.specialiser.latest()
    groups = [c for s in plan.sequences for c in s.calls if isinstance(c, ta.api.NativeGroup)]
    # the bottom MLP's split layers left the group; its bags run at once, then the layers
    assert [g.name for g in groups] == ["concurrent branches n6 | n9 | n12"]
    assert sum(1 for s in plan.sequences for c in s.calls
               if not isinstance(c, ta.api.NativeGroup) and c.more) >= 2
