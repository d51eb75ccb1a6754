"""The importer's graph: ONNX nodes with decoded attributes and resolved implementations."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensoralg.onnx.ops.registry import OpImpl

# Attributes tensoralg's own passes add to ONNX nodes (``folding.fuse_conv_activations``).
OWN_ATTRIBUTES = frozenset({"activation", "residual", "skip_zeros", "winograd_tile"})


@dataclass(frozen=True, slots=True)
class ValueInfo:
    """A graph input or output: name, shape (ints, or names/None for free dims) and dtype."""

    name: str
    shape: tuple[int | str | None, ...] | None
    dtype: np.dtype | None

    def __str__(self) -> str:
        dims = "?" if self.shape is None else \
            "x".join("?" if d is None else str(d) for d in self.shape) or "scalar"
        return f"{self.name}: {self.dtype} [{dims}]"


@dataclass(frozen=True, slots=True)
class Node:
    """One ONNX node: ``version`` is the op's schema version under the model's opset."""

    name: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, Any]
    version: int
    impl: OpImpl

    def __str__(self) -> str:
        own = [f"{key}={self.attributes[key]}" for key in sorted(OWN_ATTRIBUTES)
               if key in self.attributes]
        return (f"{self.name}: {self.op_type}({', '.join(n or '-' for n in self.inputs)}) "
                f"-> {', '.join(self.outputs)}" + (f" [{', '.join(own)}]" if own else ""))


@dataclass(slots=True)
class Graph:
    """Nodes in topological order, constants (initializers and folded values), inputs, outputs."""

    nodes: list[Node]
    inputs: list[ValueInfo]
    outputs: list[ValueInfo]
    constants: dict[str, np.ndarray]
    opset: int
    static_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)   # values whose rank inference knows
    # values whose element type inference knows (ONNX TensorProto types)
    types: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Initializers the model also lists among its inputs: ONNX lets a run feed them instead.
    overridable: dict[str, ValueInfo] = field(default_factory=dict)
    # Constants folded from a DequantizeLinear of 8-bit constants: the integers, scale, zero
    # point (None without one) and axis they were dequantized from (a QDQ model's weights),
    # so that a later pass can multiply the integers instead (passes/quantized.py).
    dequantized: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None, int]] = \
        field(default_factory=dict)


def drop_unread_constants(graph: Graph) -> None:
    """Forget the constants no node reads and no output names (weights a pass replaced by
    a repacked copy), so that the model does not hold them for its lifetime; constants a
    run may feed in their place (``graph.overridable``) stay."""
    read = {name for node in graph.nodes for name in node.inputs if name}
    read.update(v.name for v in graph.outputs)
    read.update(graph.overridable)
    graph.constants = {k: v for k, v in graph.constants.items() if k in read}


def consumers_of(graph: Graph) -> dict[str, list[Node]]:
    """The nodes that read each value, in graph order."""
    found: dict[str, list[Node]] = {}
    for node in graph.nodes:
        for name in node.inputs:
            if name:
                found.setdefault(name, []).append(node)
    return found


def value_names(graph: Graph) -> set[str]:
    """Every value name ``graph`` uses: constants, inputs, outputs and what its nodes read and
    write (a pass adding values takes fresh names outside it, :func:`fresh_name`)."""
    names: set[str] = set(graph.constants)
    names.update(v.name for v in [*graph.inputs, *graph.outputs])
    for node in graph.nodes:
        names.update(name for name in (*node.inputs, *node.outputs) if name)
    return names


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base#k`` for the first k that names no value yet; reserved in ``taken``.

    >>> taken = {"w", "w#1"}
    >>> fresh_name("w", taken), fresh_name("v", taken), sorted(taken)
    ('w#2', 'v', ['v', 'w', 'w#1', 'w#2'])
    """
    name, k = base, 1
    while name in taken:
        name, k = f"{base}#{k}", k + 1
    taken.add(name)
    return name

