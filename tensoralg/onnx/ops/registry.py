"""The explicit registry of ONNX op implementations.

``@op("Gemm", since=11)`` registers a function ``(node, *inputs, **attributes)`` that computes
the node's outputs from numpy arrays, running every contraction and elementwise step as a
tensoralg kernel through ``node.run(statement, dtype, **operands)``. An op whose semantics
changed in some opset is registered once per version; :func:`lookup` picks the newest
registration not newer than the version the model's opset selects.

``check=`` names an optional function ``(attributes) -> str | None`` run at load time; a string
says why this node is unsupported (for example a Cast to an element type NumPy lacks).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True, slots=True)
class OpImpl:
    """One registered implementation of an ONNX op from opset ``since`` on."""

    name: str
    since: int
    function: Callable[..., Any]
    check: Callable[[dict[str, Any]], str | None] | None
    attributes: frozenset[str] | None  # None: the function takes **attributes

    def unknown_attributes(self, attributes: dict[str, Any]) -> list[str]:
        if self.attributes is None:
            return []
        return sorted(set(attributes) - self.attributes)


_REGISTRY: dict[str, list[OpImpl]] = {}


def op(name: str, since: int, check: Callable[[dict[str, Any]], str | None] | None = None
       ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``function`` as the implementation of ONNX op ``name`` from opset ``since``."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY.setdefault(name, []).append(
            OpImpl(name, since, function, check, _keyword_names(function)))
        _REGISTRY[name].sort(key=lambda impl: impl.since)
        return function

    return register


def _keyword_names(function: Callable[..., Any]) -> frozenset[str] | None:
    params = inspect.signature(function).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)


def lookup(name: str, version: int) -> OpImpl | None:
    """The implementation of ``name`` for an op of schema version ``version``, or None."""
    found = None
    for impl in _REGISTRY.get(name, []):
        if impl.since <= version:
            found = impl
    return found


def supported_ops() -> list[str]:
    """Names of every registered op, sorted."""
    return sorted(_REGISTRY)


__all__ = ["op", "lookup", "supported_ops", "OpImpl"]
