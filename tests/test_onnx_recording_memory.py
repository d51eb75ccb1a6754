"""The recording run of a static plan gives the pages of dead float buffers back
(``plan/memory.PageDropper``): it keeps every value's shape, dtype and address for the plan,
but no longer every intermediate's memory. Checked: pages really go (the values read zero),
a buffer a later value still views keeps its values, feeds, constants, integers and the values
the plan reads are never touched, and planned results still match onnxruntime.
"""
from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg.onnx as tonnx
from tensoralg.onnx.plan.memory import DROP_PAGES_BYTES, drop_pages

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise is Linux's")

ROWS = DROP_PAGES_BYTES // 4 // 256 * 2      # a float32 (ROWS, 256) value: 2 MiB


def _chain():
    """x -> Relu (a, 2 MiB) -> Reshape (b, a view of a) ... Sigmoid(x) (c) ... b + c -> y,
    and an integer Cast of x beside it (d) -> y2: a's name dies at the Reshape, its buffer
    only after the Add."""
    nodes = [h.make_node("Relu", ["x"], ["a"], name="relu"),
             h.make_node("Reshape", ["a", "shape"], ["b"], name="reshape"),
             h.make_node("Sigmoid", ["x"], ["c0"], name="sigmoid"),
             h.make_node("Reshape", ["c0", "shape"], ["c"], name="reshape_c"),
             h.make_node("Add", ["b", "c"], ["y"], name="add"),
             h.make_node("Cast", ["x"], ["d"], name="cast", to=TensorProto.INT32),
             h.make_node("ReduceSum", ["d"], ["y2"], name="sum", keepdims=0)]
    shape = numpy_helper.from_array(np.array([ROWS * 2, 128], np.int64), "shape")
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               [ROWS, 256])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [None, None]),
                          h.make_tensor_value_info("y2", TensorProto.INT32, [])], [shape])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@linux
def test_drop_pages_keeps_the_address_and_zeroes_whole_pages():
    array = np.ones(DROP_PAGES_BYTES // 8 * 2)
    address = array.ctypes.data
    dropped = drop_pages(array)
    assert dropped > DROP_PAGES_BYTES
    assert array.ctypes.data == address
    assert array.sum() < array.size          # whole interior pages read zero now
    array[:] = 2.0                             # and the buffer is still usable
    assert array.sum() == 2.0 * array.size


@linux
def test_recording_run_drops_dead_buffers_only():
    model = tonnx.load(_chain(), opt_level=0)
    executor = model.executor
    x = np.random.default_rng(0).standard_normal((ROWS, 256)).astype(np.float32)
    kept = x.copy()
    values = executor.run({"x": x}, keep_all=True, values_read={"y", "y2"})
    want = np.maximum(x, 0).reshape(-1, 128) + 1 / (1 + np.exp(-x.reshape(-1, 128)))
    np.testing.assert_allclose(values["y"], want, rtol=1e-6)       # b was intact when read
    assert values["y2"] == x.astype(np.int32).sum()
    assert np.array_equal(x, kept)                                  # a feed is never touched
    assert values["a"].shape == (ROWS, 256) and values["a"].dtype == np.float32
    # dead: its pages went back (what is left is the partial pages at either end)
    assert np.count_nonzero(values["a"]) <= 2 * mmap.PAGESIZE // 4
    assert values["d"].any()                                        # integers keep values


def test_without_values_read_the_recording_keeps_everything():
    model = tonnx.load(_chain(), opt_level=0)
    x = np.random.default_rng(1).standard_normal((ROWS, 256)).astype(np.float32)
    values = model.executor.run({"x": x}, keep_all=True)
    np.testing.assert_array_equal(values["a"], np.maximum(x, 0))


def test_a_planned_model_with_dropped_recordings_matches_onnxruntime():
    model = _chain()
    feeds = {"x": np.random.default_rng(2).standard_normal((ROWS, 256)).astype(np.float32)}
    compiled = planned_model(model, feeds)
    want = onnxruntime_outputs(model, feeds)
    for _ in range(2):
        got = compiled.run(feeds)
        np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got["y2"], want[1])
    assert "static plan" in compiled.stage_text("plan")
