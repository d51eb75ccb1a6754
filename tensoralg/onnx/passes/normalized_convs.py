"""Opt level 2: Convs whose rounding a later normalization amplifies keep Winograd's F(2x2, 3x3).

A normalization by statistics of the data (InstanceNormalization, GroupNormalization,
LayerNormalization, MeanVarianceNormalization, or ``x - ReduceMean(x)`` as exporters decompose
them) divides each channel or group by its own spread: where a channel's values sit far from
zero relative to their spread, the rounding of everything computed before it grows by that
ratio. F(4x4, 3x3) rounds its float32 sums 5-9 times as far from the exact ones as
F(2x2, 3x3) (``codegen/winograd.py``); ahead of such a normalization that was enough to take
MONAI's DynUNet (InstanceNorm after every 3x3x3 Conv) from 1.2e-5 to 3.6e-5 away from a float64
run where onnxruntime was 7.8e-6 away (ad hoc, 2026-12-07). So every Conv from which a normalization of
that kind can be reached is marked ``winograd_tile=2``: the plan keeps such a Conv on F(2x2) or
a direct convolution. A normalization by constants (a BatchNormalization, folded into its Conv)
scales the rounding with the values and is not one of them.
"""
from __future__ import annotations

from dataclasses import replace

from tensoralg.onnx.frontend.graph import Graph, Node
from tensoralg.onnx.passes.folding import with_own_attributes

NORMALIZATIONS = frozenset({"InstanceNormalization", "GroupNormalization",
                            "LayerNormalization", "MeanVarianceNormalization"})
# The largest Winograd output tile a marked Conv may run by.
NORMALIZED_TILE = 2


def _centres(graph: Graph) -> list[Node]:
    """The normalizations of ``graph``: the ops above, and each ``Sub(x, ReduceMean(x))``."""
    means = {node.outputs[0]: node.inputs[0] for node in graph.nodes
             if node.op_type == "ReduceMean" and node.inputs}
    return [node for node in graph.nodes if node.op_type in NORMALIZATIONS or (
        node.op_type == "Sub" and len(node.inputs) == 2 and
        means.get(node.inputs[1]) == node.inputs[0])]


def normalized_convs_keep_small_tiles(graph: Graph) -> Graph:
    """Mark every Conv with a path to a normalization by the data's statistics (see the
    module docstring) ``winograd_tile=2``."""
    centres = _centres(graph)
    if not centres:
        return graph
    producer = {name: index for index, node in enumerate(graph.nodes) for name in node.outputs}
    seen: set[int] = set()
    stack = [producer[node.outputs[0]] for node in centres]
    while stack:
        index = stack.pop()
        if index in seen:
            continue
        seen.add(index)
        stack.extend(producer[name] for name in graph.nodes[index].inputs if name in producer)
    marked = [index for index in sorted(seen) if graph.nodes[index].op_type == "Conv" and
              "winograd_tile" not in graph.nodes[index].attributes]
    for index in marked:
        node = graph.nodes[index]
        graph.nodes[index] = replace(node, attributes={**node.attributes,
                                                       "winograd_tile": NORMALIZED_TILE},
                                     impl=with_own_attributes(node.impl))
    graph.notes.append(f"normalized convolutions: {len(marked)} Conv(s) ahead of a normalization by "
                       f"the data's statistics keep F(2x2, 3x3)")
    return graph


__all__ = ["NORMALIZATIONS", "NORMALIZED_TILE", "normalized_convs_keep_small_tiles"]
