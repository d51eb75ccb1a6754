"""Compiled call sequences (codegen/sequence.py) and the data-movement kernels that join them
(runtime/movement.py), alone and inside level 3's static plans."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from test_onnx_models import ATOL, MODELS, RTOL

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.codegen.sequence import NativeCall, Slot
from tensoralg.onnx.plan.static_steps import parts_of
from tensoralg.runtime.movement import copy_call, gather_call, ids_call
from tensoralg.runtime.sequence import CallSequence


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_gather_rows_into_a_column_block(dtype, index):
    table = np.arange(5 * 3, dtype=dtype).reshape(5, 3)
    ids = np.array([4, -1, 0, 2], index)
    out = np.full((4, 7), -9, dtype)
    gather_call(table, ids, out[:, 2:5], "g")()
    np.testing.assert_array_equal(out[:, 2:5], table[[4, 4, 0, 2]])
    assert (out[:, :2] == -9).all() and (out[:, 5:] == -9).all()


def test_gather_reads_an_id_column_in_place_and_counts_bad_ids():
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    ids = np.array([[0, 5], [1, -6], [2, 3]], np.int64)
    out = np.zeros((3, 2), np.float32)
    call = gather_call(table, ids, out, "g", column=1)
    call()
    np.testing.assert_array_equal(out, table[[5, 0, 3]])
    bad = ids.copy()
    bad[1, 1] = 6
    call.rebind("ids", bad)
    with pytest.raises(ta.ShapeError, match="1 id"):
        call()
    # out-of-range ids read row 0 instead: nothing outside the table is touched
    np.testing.assert_array_equal(out[1], table[0])


def test_copy_rows_and_bag_ids():
    dst = np.zeros((3, 6), np.float64)
    copy_call(np.arange(6.0).reshape(3, 2), dst[:, 1:3], "c")()
    np.testing.assert_array_equal(dst[:, 1:3], np.arange(6.0).reshape(3, 2))
    assert dst[:, [0, 3, 4, 5]].sum() == 0
    ids = np.array([[0, 1, 2, 3], [4, -1, 1, 0]], np.int32)
    crd = np.zeros(4, np.int64)
    ids_call(ids, 2, crd, 5, "ids")()
    np.testing.assert_array_equal(crd, [2, 3, 1, 0])
    assert copy_call(np.zeros(3, np.float32), np.zeros((3, 2), np.float32)[:, :1].T, "c") \
        is None                                       # rows not unit-stride: refused


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(256, 9, 64), (5, 7, 33), (3, 1, 5), (2, 4, 0), (0, 3, 3)])
def test_gram_computes_each_symmetric_pair_once(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    out = np.full((shape[0], shape[1], shape[1]), np.nan, dtype)
    call = ta.api.gram_call(x, out, "gram")
    call()
    want = np.matmul(x.astype(np.float64), x.astype(np.float64).transpose(0, 2, 1))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(out, out.transpose(0, 2, 1))          # mirrored, bit for bit
    call.rebind("X", 2 * x)
    call()
    np.testing.assert_allclose(out, 4 * want, rtol=1e-5, atol=1e-5)
    assert ta.api.gram_call(x.astype(np.int32), out, "gram") is None
    assert ta.api.gram_call(x, np.empty((shape[0], shape[1] + 1, shape[1]), dtype), "g") is None


def test_sequence_zeroes_reads_slots_and_reports_the_failed_call():
    kernel = ta.compile("Y(i) = A(i) + B(i)", dtype="float64")
    a, b, out = np.ones(3), np.arange(3.0), np.full(3, 7.0)
    bound = kernel.bind(out=out, A=a, B=b)
    call = bound.native({"A": Slot(0)})
    assert call is not None and (call.zero is None) == bound.overwrites
    fresh = np.full(3, 10.0)
    sequence = CallSequence([call], slots=1)
    sequence.slots[0] = fresh.ctypes.data
    assert sequence.run() == 0
    np.testing.assert_array_equal(out, fresh + b)
    # a call whose flag is set after it counts as failed: the sequence stops there
    flag = np.ones(1, np.int64)
    flagged = NativeCall(call.address, call.argtypes, call.args, call.zero, "k",
                         flag.ctypes.data)
    second = CallSequence([flagged, call], slots=1)
    second.use_slots(sequence.slots)
    assert second.run() == 1
    with pytest.raises(ValueError, match="arguments"):
        NativeCall(0, (ctypes.c_int64,), (), None, "k")


def _steps(compiled):
    plan = compiled.specialiser.latest()
    return plan, {s.step.node.op_type for s in plan.steps}


@pytest.mark.parametrize("name", ["dlrm", "wide_deep", "neumf", "mlp"])
def test_whole_models_compile_into_one_sequence(name):
    model, feeds = MODELS[name](np.random.default_rng(2))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    plan, ops = _steps(compiled)
    assert len(plan.sequences) == 1, plan.describe()
    assert all(parts_of(s.run) is not None for s in plan.steps), \
        [(s.step.node.name, s.kind) for s in plan.steps if parts_of(s.run) is None]
    assert "compiled sequence" in plan.describe()
    if name == "dlrm":
        assert "Transpose" not in ops         # X @ X^T reads X twice instead
    if name == "wide_deep":   # the id columns are read in place by the embedding gathers
        assert sum(s.step.node.op_type == "Gather" for s in plan.steps) == 2
    # the profile still times every step on its own
    table = str(compiled.profile(feeds))
    assert "total" in table
    assert ("not run: the static plan folds it" in table) == (name in ("dlrm", "wide_deep"))


def test_bad_ids_in_a_sequence_raise_the_nodes_error():
    model, feeds = MODELS["wide_deep"](np.random.default_rng(2))
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    bad = dict(feeds)
    bad["cats"] = feeds["cats"].copy()
    bad["cats"][3, 1] = 10**6
    with pytest.raises(ta.ShapeError, match="outside"):
        compiled.run(bad)
    again = compiled.run(feeds)["y"]           # the plan still works afterwards
    import onnxruntime as ort
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(again, session.run(None, feeds)[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["two_tower", "dlrm", "neumf", "wide_deep", "mlp"])
@pytest.mark.parametrize("batch", [0, 1, 300])
def test_plans_at_other_batch_sizes(name, batch):
    import onnxruntime as ort

    model, feeds = MODELS[name](np.random.default_rng(2))

    def resized(value: np.ndarray) -> np.ndarray:
        if value.ndim == 0:
            return value
        return np.resize(value, (batch,) + value.shape[1:])

    data = {key: resized(value) for key, value in feeds.items()}
    compiled = tonnx.load(model, opt_level=3)
    got = [compiled.run(data) for _ in range(3)][-1]     # the third run uses the plan
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for output, want in zip(session.get_outputs(), session.run(None, data)):
        assert got[output.name].shape == want.shape
        np.testing.assert_allclose(got[output.name], want, rtol=RTOL, atol=ATOL)
    assert compiled.specialiser.latest() is not None


@pytest.mark.parametrize("out_channels", [5, 700])
@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 1], "pads": [0, 1, 2, 0]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {},
])
def test_conv_with_constant_weights_runs_as_native_kernels(attrs, out_channels):
    """5 output channels: the weights compiled into the kernel (on AVX-512 hosts); 700: too
    many to unroll, so the GEMM-based convolution (and im2row for the dilated one)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    w = rng.standard_normal((out_channels, 3, 3, 2)).astype(np.float32)
    b = rng.standard_normal(out_channels).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["N", 3, 9, 7])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["N", out_channels, "H", "W"])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for k in range(4):
        x = rng.standard_normal((4, 3, 9, 7)).astype(np.float32)
        np.testing.assert_allclose(compiled.run({"x": x})["y"], session.run(None, {"x": x})[0],
                                   rtol=RTOL, atol=ATOL)
    compiled_in = out_channels == 5 and ta.api.direct_conv(w, b, (3, 9, 7)) is not None
    kinds = [s.kind for s in compiled.specialiser.latest().steps]
    assert kinds == ["conv kernel" if compiled_in else "conv kernels"]


def test_multi_hot_scan_joins_the_sequence_and_overflow_replans():
    # FM over a multi-hot input: the scan (with the squared values of x * x) is the first call
    # of the one compiled sequence; a matrix with more nonzeros than the plan's CSR buffers
    # fails the sequence, and the run falls back to node by node with the right values.
    from test_onnx_models import _reference
    from test_sparse_feeds import _fm, _multi_hot
    rng = np.random.default_rng(13)
    model = _fm(rng)
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(4):
        x = _multi_hot(rng, 16, 120, 6)
        np.testing.assert_allclose(compiled.run({"x": x})["y"], _reference(model, {"x": x})["y"],
                                   rtol=RTOL, atol=ATOL)
    plan = compiled.specialiser.latest()
    assert len(plan.sequences) == 1 and plan.runners != [s.run for s in plan.steps]
    assert "multi-hot scan" in plan.sequences[0].calls[0].name
    full = rng.random((16, 120)).astype(np.float32)
    np.testing.assert_allclose(compiled.run({"x": full})["y"],
                               _reference(model, {"x": full})["y"], rtol=RTOL, atol=ATOL)
    assert any("static plan dropped" in n for n in compiled.specialiser.notes.values())
