"""Opt level 2: an ONNX ``Attention`` node (opset 23 on) as the products and softmax it stands
for, the graph PyTorch's exporter writes for ``scaled_dot_product_attention`` below opset 23::

    S = MatMul(Q, Transpose(K)) * scale  (+ the mask's bias, + the causal bias)
    Y = MatMul(Where(IsNaN(P), 0, P), V)   with P = Softmax(S)

so that each step takes the routes the static plan has for them (batched products on BLAS or
the generated GEMM, the generated softmax row kernel, fused elementwise statements) instead of
the op function's dispatch from Python, ~0.4 ms a node for a small BERT layer (2026-12-07).
A bool mask becomes ``Where(mask, 0, -inf)``; the causal bias (aligned top-left: no past
here) is a constant of the static query and key lengths; a row whose every key is masked
gives 0, as the op's reference does (its softmax is NaN, which the Where replaces).

Only the common form is rewritten: float32 4-D Q, K and V of static shapes with as many key
as query heads, no past key or value, no per-batch key lengths, softcap or sliding window, a
mask (if any) as long as the keys, and no output but Y read. Anything else keeps the node,
which the op function (``ops/attention.py``) runs.
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from tensoralg.onnx.frontend.graph import Graph, Node, fresh_name, value_names
from tensoralg.onnx.ops.attention import allowed_keys
from tensoralg.onnx.ops.registry import lookup


def _rewritable(graph: Graph, node: Node, read: set[str], outputs: set[str]
                ) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """The static shapes of Q and K when ``node`` has the form the module docstring names."""
    inputs = list(node.inputs) + [""] * (7 - len(node.inputs))
    q, k, v, mask = inputs[:4]
    at = node.attributes
    if any(inputs[4:]) or at.get("softcap", 0.0) or at.get("left_window_size", -1) >= 0 or \
            at.get("right_window_size", -1) >= 0 or \
            at.get("softmax_precision", TensorProto.FLOAT) != TensorProto.FLOAT:
        return None
    if any(name and (name in read or name in outputs) for name in node.outputs[1:]):
        return None
    shapes = [graph.static_shapes.get(name) for name in (q, k, v)]
    if any(shape is None or len(shape) != 4 for shape in shapes) or \
            any(graph.types.get(name) != TensorProto.FLOAT for name in (q, k, v)):
        return None
    (batch, heads, q_length, size), k_shape, v_shape = shapes
    if k_shape[:2] != (batch, heads) or k_shape[3] != size or v_shape[:3] != k_shape[:3]:
        return None
    if mask:
        mask_shape = graph.static_shapes.get(mask)
        if mask_shape is None or mask_shape[-1] != k_shape[2] or \
                graph.types.get(mask) not in (TensorProto.BOOL, TensorProto.FLOAT):
            return None
    return shapes[0], k_shape


def attention_as_products(graph: Graph) -> Graph:
    """Replace each Attention node of the common form (module docstring) by its products."""
    read = {name for node in graph.nodes for name in node.inputs if name}
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    ops = {name: lookup(name, graph.opset) for name in
           ("Transpose", "MatMul", "Mul", "Add", "Where", "Softmax", "IsNaN")}
    nodes: list[Node] = []
    rewritten = 0

    def emit(op_type: str, inputs: tuple[str, ...], base: str, name: str,
             **attributes: object) -> str:
        value = fresh_name(f"{base}/{name}", taken)
        impl = ops[op_type]
        nodes.append(Node(f"{base}/{name}", op_type, inputs, (value,), dict(attributes),
                          impl.since, impl))
        return value

    def constant(base: str, name: str, value: np.ndarray) -> str:
        key = fresh_name(f"{base}/{name}", taken)
        graph.constants[key] = value
        return key

    for node in graph.nodes:
        shapes = _rewritable(graph, node, read, outputs) if node.op_type == "Attention" else None
        if shapes is None:
            nodes.append(node)
            continue
        (_, _, q_length, size), (_, _, kv_length, _) = shapes
        q, k, v = node.inputs[:3]
        mask = node.inputs[3] if len(node.inputs) > 3 else ""
        base, at = node.name, node.attributes
        scale = at.get("scale")
        scale = 1 / math.sqrt(size) if scale is None else float(scale)
        key_t = emit("Transpose", (k,), base, "keys", perm=[0, 1, 3, 2])
        scores = emit("MatMul", (q, key_t), base, "scores")
        scores = emit("Mul", (scores, constant(base, "scale", np.array(scale, np.float32))),
                      base, "scaled")
        biased = False
        if mask:
            if graph.types.get(mask) == TensorProto.BOOL:
                zero = constant(base, "zero", np.array(0, np.float32))
                low = constant(base, "masked", np.array(-np.inf, np.float32))
                mask = emit("Where", (mask, zero, low), base, "mask_bias")
            scores = emit("Add", (scores, mask), base, "masked_scores")
            biased = True
        if at.get("is_causal", 0):
            allowed = allowed_keys(q_length, kv_length, 0, -1, -1, causal=True)
            causal = np.where(allowed, np.float32(0), np.float32(-np.inf))
            scores = emit("Add", (scores, constant(base, "causal", causal)), base, "causal")
            biased = True
        weights = emit("Softmax", (scores,), base, "weights", axis=-1)
        if biased:      # a row of -inf only: NaN from the softmax, 0 in the op
            nan = emit("IsNaN", (weights,), base, "unattended")
            weights = emit("Where", (nan, constant(base, "none", np.array(0, np.float32)),
                                     weights), base, "attended")
        impl = ops["MatMul"]
        nodes.append(Node(f"{base}/values", "MatMul", (weights, v), node.outputs[:1], {},
                          impl.since, impl))
        rewritten += 1
    graph.nodes = nodes
    graph.notes.append(f"attention as products: {rewritten} Attention node(s) rewritten")
    return graph
