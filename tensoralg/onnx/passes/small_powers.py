"""Opt level 2: ``Pow`` by a constant 2 or 3 becomes multiplications.

GPT-2's tanh-GELU (``x + 0.044715 * pow(x, 3)``) and RMS/variance terms (``pow(x, 2)``) reach
the fused statements as ``pow(A, C)``, which the generated code evaluates by a libm call per
element (``exp(C log A)``, tens of nanoseconds); ``A * A * A`` is two multiplies in vector
registers. The product agrees with ``pow`` to an ulp or two (``x * x`` is exact to rounding, as
is a correctly rounded ``pow(x, 2)``), for negative bases, zeros, infinities and NaN alike.
Only an exponent that is a float scalar constant equal to 2 or 3 qualifies (an integer base
then gives the same integers, as onnxruntime's pow of small values does).
"""
from __future__ import annotations

from tensoralg.onnx.frontend.graph import Graph, Node
from tensoralg.onnx.ops.registry import lookup


def small_power(graph: Graph, node: Node) -> int | None:
    """2 or 3 when ``node`` is a Pow of a float base by that constant, else None."""
    if node.op_type != "Pow" or len(node.inputs) != 2:
        return None
    exponent = graph.constants.get(node.inputs[1])
    if exponent is None or exponent.size != 1 or exponent.dtype.kind != "f":
        return None
    value = float(exponent.reshape(-1)[0])
    return int(value) if value in (2.0, 3.0) else None


def small_powers_as_products(graph: Graph) -> Graph:
    """Replace each Pow by a constant 2 or 3 (see the module docstring) by one or two Muls;
    the exponent constant is left for dead node removal of later loads (it is tiny)."""
    mul = lookup("Mul", 14)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        power = small_power(graph, node) if mul is not None else None
        if power is None:
            nodes.append(node)
            continue
        x, out = node.inputs[0], node.outputs[0]
        if power == 2:
            nodes.append(Node(node.name, "Mul", (x, x), (out,), {}, 14, mul))
        else:
            square = f"{node.name}/square_{x}"
            nodes.append(Node(f"{node.name}/square", "Mul", (x, x), (square,), {}, 14, mul))
            nodes.append(Node(node.name, "Mul", (square, x), (out,), {}, 14, mul))
        replaced += 1
    graph.nodes = nodes
    graph.notes.append(f"small powers: {replaced} Pow(x, 2 or 3) as multiplications")
    return graph


__all__ = ["small_powers_as_products", "small_power"]
