"""Opt level 2: the elementwise steps right after an int8 product, joined to its kernel.

``Int8MatMul``/``Int8Conv`` (``ops/int8.py``) apply a per-column multiplier, a bias, a
ReLU or Clip and a fake quantization in registers before storing (``program.Int8Epilogue``);
:func:`int8_epilogues` finds them in the graph after the quantization passes made the
products.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensoralg.onnx.frontend.graph import (
    Graph,
    Node,
    consumers_of,
    drop_unread_constants,
    fresh_name,
    value_names,
)
from tensoralg.onnx.ops.int8 import CONV_INT8_OP, INT8_OP
from tensoralg.onnx.passes.folding import constant_clip_bounds
from tensoralg.onnx.passes.quantized import OP_TYPE as FAKE_OP
from tensoralg.onnx.passes.quantized import per_tensor_constant


def _per_column(value: np.ndarray | None, columns: int, conv: bool) -> np.ndarray | None:
    """A Mul/Add constant as one float32 value per output column of an int8 product (its
    channels, axis 1 of an NCHW result, or its last axis), or None where it broadcasts any
    other way."""
    if value is None or value.dtype != np.float32:
        return None
    if value.size == 1:
        return np.full(columns, value.reshape(-1)[0], np.float32)
    shape = tuple(value.shape)
    while shape and shape[0] == 1 and len(shape) > (3 if conv else 1):
        shape = shape[1:]
    wanted = (columns, 1, 1) if conv else (columns,)
    return value.reshape(-1).copy() if shape == wanted else None


def int8_epilogues(graph: Graph) -> Graph:
    """Join to each ``Int8MatMul``/``Int8Conv`` the elementwise steps right after it that its
    kernel applies in registers (``program.Int8Epilogue``): a Mul by a constant per output
    column (the rescale a QDQ layer becomes, :func:`static_quantized_products`) or by
    ``Mul(s, c)`` of its own activation scale and such a constant (``quantize_dynamic``'s
    rescale), then an Add
    of one (its bias), then a Relu or a Clip with constant bounds, each the only reader of the
    value before it, then a ``QuantizeDequantize`` of constant scale and zero point (the next
    layer's fake quantization in a QDQ model). They would otherwise be one more statement
    over the product; the kernel computes them with the same float32 operations in the same
    order. Where int8 products of the next layer read the value the fake quantization reads
    (they quantize it in the call, on the same grid), they read its result instead, which
    gives them the same integers, so that it can join."""
    readers = consumers_of(graph)
    producers = {name: node for node in graph.nodes for name in node.outputs}
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    redirected: dict[str, str] = {}        # int8 product -> the fake quantization it reads
    for node in graph.nodes:
        if node.op_type not in (INT8_OP, CONV_INT8_OP) or len(node.inputs) != 4:
            continue
        conv = node.op_type == CONV_INT8_OP
        columns = graph.constants[node.inputs[3]].shape[0 if conv else 1]
        found: dict[str, Any] = {}
        chain: list[Node] = []
        value = node.outputs[0]
        for step in ("Mul", "Add", "activation", "fake"):
            uses = readers.get(value, [])
            if value in outputs:
                break
            if step == "fake":
                fake = _joinable_fake(graph, uses, value)
                if fake is not None:
                    found["fake"] = _fake_parameters(graph, fake)
                    for use in uses:
                        if use is not fake:
                            redirected[use.name] = fake.outputs[0]
                    chain.append(fake)
                break
            if len(uses) != 1:
                break
            use = uses[0]
            other = [n for n in use.inputs if n != value]
            if step in ("Mul", "Add") and use.op_type == step and len(other) == 1 and \
                    len(use.inputs) == 2:
                vector = _per_column(graph.constants.get(other[0]), columns, conv)
                scaled = _scaled_multiplier(graph, producers.get(other[0]), node.inputs[1],
                                            columns, conv) if step == "Mul" else None
                if vector is None and scaled is None:
                    continue
                found[step] = vector if vector is not None else scaled[0]
                if scaled is not None:
                    found["scaled"] = True
                    if len(readers.get(other[0], [])) == 1 and other[0] not in outputs:
                        dropped.add(scaled[1].name)
            elif step == "activation" and use.op_type == "Relu":
                found["low"], found["high"] = 0.0, math.inf
            elif step == "activation" and use.op_type == "Clip":
                bounds = constant_clip_bounds(use, graph)
                if bounds is None:
                    break
                found["low"], found["high"] = bounds
            else:
                continue
            chain.append(use)
            value = use.outputs[0]
        if not chain:
            continue
        names = []
        for step in ("Mul", "Add"):
            if step in found:
                names.append(fresh_name(f"{node.name}/{step.lower()} per column", taken))
                graph.constants[names[-1]] = found[step]
            else:
                names.append("")
        attributes = dict(node.attributes)
        if "low" in found:
            attributes.update(low=found["low"], high=found["high"])
        if found.get("scaled"):
            attributes["scaled"] = 1
        if "fake" in found:
            attributes.update(zip(("fake_scale", "fake_zero", "fake_low", "fake_high"),
                                  found["fake"]))
        replaced[node.name] = Node(node.name, node.op_type, (*node.inputs, *names),
                                   chain[-1].outputs, attributes, node.version, node.impl)
        dropped.update(use.name for use in chain)
    nodes = []
    for node in graph.nodes:
        if node.name in dropped:
            continue
        node = replaced.get(node.name, node)
        if node.name in redirected:
            node = Node(node.name, node.op_type, (redirected[node.name], *node.inputs[1:]),
                        node.outputs, node.attributes, node.version, node.impl)
        nodes.append(node)
    graph.nodes = nodes
    drop_unread_constants(graph)
    graph.notes.append(f"int8 epilogues: {len(dropped)} node(s) into {len(replaced)} int8 "
                       f"product(s)")
    return graph


def _scalar(graph: Graph, name: str) -> float | None:
    """A float32 per-tensor constant's value, else None."""
    value = per_tensor_constant(graph, name)
    return float(value.reshape(-1)[0]) if value is not None and value.dtype == np.float32 \
        else None


def _fake_parameters(graph: Graph, fake: Node) -> tuple[float, float, float, float]:
    """A joinable ``QuantizeDequantize``'s scale, zero point and saturation bounds."""
    scale, zero = (_scalar(graph, name) for name in fake.inputs[1:3])
    assert scale is not None and zero is not None        # checked by _joinable_fake
    return scale, zero, float(fake.attributes["low"]), float(fake.attributes["high"])


def _joinable_fake(graph: Graph, uses: list[Node], value: str) -> Node | None:
    """The one ``QuantizeDequantize`` of constant scale and zero point among the readers of
    ``value``, where every other reader is an int8 product quantizing ``value`` on its grid
    (the same scale; the zero point on the uint8 grid: plus 128 for int8 activations);
    None otherwise."""
    fakes = [use for use in uses if use.op_type == FAKE_OP]
    if len(fakes) != 1 or fakes[0].inputs[0] != value or len(fakes[0].inputs) != 3:
        return None
    fake = fakes[0]
    scale, zero = (_scalar(graph, name) for name in fake.inputs[1:3])
    if scale is None or zero is None:
        return None
    grid_zero = zero + (128 if fake.attributes["low"] < 0 else 0)
    for use in uses:
        if use is fake:
            continue
        if use.op_type not in (INT8_OP, CONV_INT8_OP) or use.inputs[0] != value or \
                _scalar(graph, use.inputs[1]) != scale or \
                _scalar(graph, use.inputs[2]) != grid_zero:
            return None
    return fake


def _scaled_multiplier(graph: Graph, product: Node | None, scale: str, columns: int,
                       conv: bool) -> tuple[np.ndarray, Node] | None:
    """Where ``product`` is ``Mul(scale, c)`` (either order) of the int8 product's own
    activation scale and a constant ``c`` per output column (the weights' scales: what
    ``quantize_dynamic`` multiplies the int32 sums by), ``c`` per column and that Mul."""
    if product is None or product.op_type != "Mul" or len(product.inputs) != 2 or \
            scale not in product.inputs:
        return None
    other = product.inputs[1] if product.inputs[0] == scale else product.inputs[0]
    vector = _per_column(graph.constants.get(other), columns, conv)
    return None if vector is None else (vector, product)


__all__ = ["int8_epilogues"]
