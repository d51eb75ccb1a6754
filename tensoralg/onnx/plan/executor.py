"""Running a graph: one step per node, values freed after their last use."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Collection

import numpy as np

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Graph, Node
from tensoralg.onnx.ops.kernels import KernelSet, NodeContext
from tensoralg.onnx.plan.memory import MemoryTrace, PageDropper, last_uses


def call_node(node: Node, context: NodeContext, values: dict[str, Any],
              keep: Callable[[Any], Any] = np.asarray) -> dict[str, Any]:
    """Run ``node`` on ``values``; its outputs by name, each passed through ``keep`` (NumPy
    arrays; a device run keeps device values as they are). Errors are re-raised naming the
    node."""
    args = [values[name] if name else None for name in node.inputs]
    while args and args[-1] is None:
        args.pop()
    try:
        result = node.impl.function(context, *args, **node.attributes)
    except ta.NotationError as err:
        raise ta.CompileError(f"{context}: the importer built an invalid statement: {err}"
                              ) from err
    except ta.TensorAlgebraError as err:
        message = str(err)
        if context.name not in message:
            message = f"{context}: {message}"
        raise type(err)(message) from err
    except (ValueError, IndexError, TypeError, OverflowError) as err:
        raise ta.ShapeError(f"{context}: {type(err).__name__}: {err}") from err
    except MemoryError as err:
        raise ta.KernelRuntimeError(f"{context}: out of memory ({err or 'no detail'}); the "
                                    f"values it makes do not fit in this machine's memory"
                                    ) from err
    outputs = result if isinstance(result, tuple) else (result,)
    found = {}
    for name, value in zip(node.outputs, outputs):
        if name:
            found[name] = keep(value)
    return found


@dataclass(slots=True)
class Step:
    """One node of the plan, its context (kernels, plan notes) and the values it frees."""

    node: Node
    context: NodeContext
    release: tuple[str, ...]
    captured: list | None = None    # kernel calls of the last recording run (static plans)


class Executor:
    """The steps of a graph in topological order, sharing one :class:`KernelSet`."""

    def __init__(self, graph: Graph, kernels: KernelSet) -> None:
        self.graph = graph
        self.kernels = kernels
        keep = {v.name for v in graph.outputs} | set(graph.constants)
        self.steps = []
        for node, release in zip(graph.nodes, last_uses(graph.nodes, keep)):
            context = NodeContext(node.name, node.op_type, node.inputs, node.outputs,
                                  node.version, kernels)
            self.steps.append(Step(node, context, release))

    def notes(self, step: Step) -> list[str]:
        """What ``step`` runs, for ``print_ir`` and profiles: its plan notes."""
        return list(step.context.plan)

    def run(self, feeds: dict[str, np.ndarray],
            timer: Callable[[Step, float], Any] | None = None,
            memory: MemoryTrace | None = None, keep_all: bool = False,
            values_read: Collection[str] | None = None) -> dict[str, np.ndarray]:
        """All values after running every step (``memory`` records buffers and lifetimes;
        ``keep_all`` keeps every value instead of releasing it after its last use). With
        ``keep_all`` and ``values_read`` (the names whose values the caller will read), the
        others keep their shapes, dtypes and addresses but their memory pages go back to the
        system after their last use (:class:`PageDropper`)."""
        values = dict(self.graph.constants)
        values.update(feeds)
        dropper = PageDropper(values, values_read) if keep_all and values_read is not None \
            else None
        if memory is not None:
            memory.foreign.update(MemoryTrace.start(values).foreign)
        for k, step in enumerate(self.steps):
            start = time.perf_counter()
            for name in step.node.inputs:
                if name and name not in values:
                    raise ta.ShapeError(f"{step.context}: input {name!r} has no value (it is "
                                        f"not produced by an earlier node)")
            if keep_all:
                step.context.capture = []
            try:
                produced = call_node(step.node, step.context, values)
            finally:
                if keep_all:
                    step.captured, step.context.capture = step.context.capture, None
            values.update(produced)
            if dropper is not None:
                dropper.produced(produced)
                dropper.released(step.release, values)
            if timer is not None:
                timer(step, time.perf_counter() - start)
            if memory is not None:
                memory.produced(k, produced)
                memory.released(k, step.release)
            if not keep_all:
                for name in step.release:
                    values.pop(name, None)
        return values
