"""GELU written out with ``Erf``, as the PyTorch exporters emit it, as one ``Gelu`` node.

``torch.nn.GELU`` (ConvNeXt, Swin, BERT and most transformers) exports below opset 20 as
``x / sqrt(2) -> Erf -> + 1``, times ``x``, times ``0.5``: five nodes, with ``x`` read twice.
Fusion (:mod:`tensoralg.onnx.passes.fusion`) joins only values with one reader, so the chain
stayed a statement of its own after the dense layer that feeds it, one more pass over the
layer's (widest) output. As one ``Gelu`` node it joins the dense layer's program, whose GEMM
then applies it in registers (``codegen/activation.py``).

The pass matches the product ``0.5 * x * (1 + erf(x * c))`` in any order and association
(``x / sqrt 2`` or ``x * (1 / sqrt 2)``, the ``0.5`` on either side, ``x * 0.5`` computed
first), every intermediate value read only inside the pattern and none a graph output.
"""
from __future__ import annotations

import math

import numpy as np

from tensoralg.onnx.frontend.graph import Graph, Node, consumers_of
from tensoralg.onnx.ops.registry import lookup

GELU_SINCE = 20     # the opset that made Gelu an ONNX op; the node is internal below it
_TOLERANCE = 1e-6


def erf_gelus_as_gelu(graph: Graph) -> Graph:
    """Replace each ``0.5 * x * (1 + Erf(x / sqrt 2))`` by ``Gelu(x)`` (see the module
    docstring); other nodes keep their order.

    For example ``d: Div(x, 1.4142135) -> e: Erf -> a: Add(1) -> m: Mul(x, a) -> h: Mul(0.5)``
    becomes ``h: Gelu(x)``.
    """
    consumers = consumers_of(graph)
    producer = {name: node for node in graph.nodes for name in node.outputs if name}
    outputs = {v.name for v in graph.outputs}
    replaced: dict[str, Node] = {}      # name of the pattern's last node -> its Gelu
    dropped: set[str] = set()
    impl = lookup("Gelu", GELU_SINCE)
    for node in graph.nodes if impl is not None else ():
        if node.op_type != "Erf" or node.name in dropped:
            continue
        found = _match(node, graph, consumers, producer, outputs)
        if found is None:
            continue
        x, top, members = found
        if members & dropped:
            continue
        replaced[top.name] = Node(top.name, "Gelu", (x,), top.outputs[:1],
                                  {"approximate": "none"}, GELU_SINCE, impl)
        dropped |= members
    if not replaced:
        return graph
    graph.nodes = [replaced.get(node.name, node) for node in graph.nodes
                   if node.name not in dropped or node.name in replaced]
    graph.notes.append(f"gelu: {len(replaced)} erf decomposition(s) as Gelu")
    return graph


def _match(erf: Node, graph: Graph, consumers: dict[str, list[Node]],
           producer: dict[str, Node], outputs: set[str]) -> tuple[str, Node, set[str]] | None:
    """``(x, last node, names of the pattern's nodes)`` when ``erf`` is the Erf of a GELU."""
    def only_reader(value: str) -> Node | None:
        readers = consumers.get(value, [])
        return readers[0] if len(readers) == 1 and value not in outputs else None

    scaled = producer.get(erf.inputs[0])
    if scaled is None or only_reader(erf.inputs[0]) is not erf:
        return None
    x = _scaled_input(scaled, graph)
    if x is None:
        return None
    plus = only_reader(erf.outputs[0])
    if plus is None or plus.op_type != "Add" or \
            not _constant_pair(plus, erf.outputs[0], 1.0, graph):
        return None
    # Climb the Muls above 1 + erf to the last one; each value on the way read only there.
    top, value = plus, plus.outputs[0]
    while True:
        reader = only_reader(value)
        if reader is None or reader.op_type != "Mul":
            break
        top, value = reader, reader.outputs[0]
    if top is plus:
        return None
    members = {node.name: node for node in (scaled, erf, plus)}
    factors: list[str] = []

    def flatten(name: str) -> None:
        node = producer.get(name)
        if node is not None and node.op_type == "Mul" and name != x and \
                (node is top or only_reader(name) is not None):
            members[node.name] = node
            for operand in node.inputs:
                flatten(operand)
        else:
            factors.append(name)
    flatten(top.outputs[0])
    halves = [f for f in factors if _scalar(f, graph) == 0.5]
    rest = sorted(f for f in factors if f not in halves)
    if len(halves) != 1 or rest != sorted([x, plus.outputs[0]]):
        return None
    # Every node taken must be read only inside the pattern (its last node aside).
    for node in members.values():
        if node is not top and any(reader.name not in members
                                   for reader in consumers.get(node.outputs[0], [])):
            return None
    return x, top, set(members)


def _scaled_input(node: Node, graph: Graph) -> str | None:
    """``x`` when ``node`` is ``x / sqrt 2`` or ``x * (1 / sqrt 2)`` (either side)."""
    if node.op_type == "Div":
        scale = _scalar(node.inputs[1], graph)
        return node.inputs[0] if scale is not None and \
            math.isclose(scale, math.sqrt(2), rel_tol=_TOLERANCE) else None
    if node.op_type == "Mul":
        for this, other in ((0, 1), (1, 0)):
            scale = _scalar(node.inputs[other], graph)
            if scale is not None and math.isclose(scale, math.sqrt(0.5), rel_tol=_TOLERANCE):
                return node.inputs[this]
    return None


def _constant_pair(node: Node, value: str, constant: float, graph: Graph) -> bool:
    """Whether ``node`` reads ``value`` and the scalar ``constant`` (in either order)."""
    others = list(node.inputs)
    if value not in others or len(others) != 2:
        return False
    others.remove(value)
    return _scalar(others[0], graph) == constant


def _scalar(name: str, graph: Graph) -> float | None:
    """The value of a one-element float constant ``name``, else None."""
    value = graph.constants.get(name)
    if value is None or value.size != 1 or value.dtype.kind != "f":
        return None
    return float(np.asarray(value).reshape(-1)[0])


__all__ = ["erf_gelus_as_gelu"]
