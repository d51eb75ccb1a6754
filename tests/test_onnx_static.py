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
    first = [compiled.run(feeds)["y"] for _ in range(3)]
    other = compiled.run(_fresh(feeds, np.random.default_rng(2)))["y"]
    np.testing.assert_array_equal(first[1], first[2])
    assert not np.shares_memory(first[1], first[2]) and not np.shares_memory(first[2], other)


def test_memory_plan_reuses_buffers():
    model, feeds = MODELS["dlrm"](np.random.default_rng(3))
    profile = tonnx.load(model, opt_level=3).profile(feeds)
    memory = profile.memory
    assert memory is not None and memory.buffers > 3
    assert memory.planned < memory.total     # arenas hold less than every value at once
    assert memory.peak <= memory.planned


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


def test_feed_overriding_an_initializer_is_honoured():
    model, feeds = MODELS["mlp"](np.random.default_rng(8))
    compiled = tonnx.load(model, opt_level=3)
    reference = tonnx.load(model, opt_level=0)
    weight = model.graph.initializer[0]
    override = dict(feeds)
    override[weight.name] = np.zeros_like(numpy_helper.to_array(weight))
    for _ in range(3):
        compiled.run(feeds)
    np.testing.assert_allclose(compiled.run(override)["y"], reference.run(override)["y"],
                               rtol=RTOL, atol=ATOL)


def test_consecutive_sparse_layers_keep_the_transposed_layout():
    from test_onnx_passes import _pruned_mlp

    model, feeds = _pruned_mlp(np.random.default_rng(12), zeros=0.9, batch=40)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    rng = np.random.default_rng(13)
    for k in range(3):
        data = feeds if k == 0 else _fresh(feeds, rng)
        np.testing.assert_allclose(compiled.run(data)["y"], session.run(None, data)[0],
                                   rtol=RTOL, atol=ATOL)
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
