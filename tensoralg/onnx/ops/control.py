"""If whose condition is known only at run time, and Loop: subgraphs run node by node.

An If runs the branch its condition picks on the outer values it reads; a Loop runs its body
once an iteration, feeding each iteration's carried values to the next.

The loader builds such a node (:func:`tensoralg.onnx.frontend.load.runtime_if`): its inputs are the
condition and then every outer value either branch reads, and its ``then_branch`` and
``else_branch`` are :class:`tensoralg.onnx.frontend.conditionals.Branch` graphs. An If decided at load
never gets here: the loader inlines the branch it takes (:mod:`tensoralg.onnx.frontend.conditionals`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op

if TYPE_CHECKING:
    from tensoralg.onnx.frontend.conditionals import Branch


@op("If", since=1)
def if_(node: NodeContext, condition: np.ndarray, *outer: np.ndarray, then_branch: Branch,
        else_branch: Branch) -> np.ndarray | tuple[np.ndarray, ...]:
    """The outputs of ``then_branch`` when ``condition`` (one element) is true, else of
    ``else_branch``."""
    value = np.asarray(condition)
    if value.size != 1:
        raise ta.ShapeError(f"{node}: the condition must have one element, got shape "
                            f"{value.shape}")
    branch = then_branch if bool(value.reshape(-1)[0]) else else_branch
    node.note(f"runs {branch} node by node (its condition is known only at run time)")
    results = branch.run(node.kernels, dict(zip(node.inputs[1:], outer)))
    return results[0] if len(results) == 1 else results


# Iterations a Loop without a trip count runs at most before it is taken for one that never
# ends (its condition never false).
MAX_ITERATIONS = 10_000_000


@op("Loop", since=1)
def loop(node: NodeContext, trip: np.ndarray | None = None,
         condition: np.ndarray | None = None, *rest: np.ndarray, body: Branch, carried: int,
         formal: tuple[str, ...]) -> np.ndarray | tuple[np.ndarray, ...]:
    """The final carried values, then each scan output stacked over the iterations (a new
    first axis): ``body`` runs while the iteration number is below ``trip`` (when given) and
    the condition (when given, then as the body last gave it) holds."""
    initial, outer = rest[:carried], rest[carried:]
    if len(initial) < carried:      # (trailing absent inputs are dropped by the caller)
        raise ta.ShapeError(f"{node}: {carried} carried value(s) expected, got {len(initial)}")
    reads = dict(zip(node.inputs[2 + carried:], outer))
    trips = None if trip is None or np.size(trip) == 0 else int(np.asarray(trip).reshape(-1)[0])
    going = True if condition is None or np.size(condition) == 0 else \
        bool(np.asarray(condition).reshape(-1)[0])
    values = list(initial)
    scans: list[tuple[np.ndarray, ...]] = []
    node.note(f"runs {body} once an iteration")
    iteration = 0
    while going and (trips is None or iteration < trips):
        if trips is None and iteration >= MAX_ITERATIONS:
            raise ta.ShapeError(f"{node}: {MAX_ITERATIONS} iterations without its condition "
                                f"turning false and no trip count: taken for a loop that "
                                f"never ends")
        feed = {formal[0]: np.array(iteration, np.int64), formal[1]: np.array(going),
                **dict(zip(formal[2:], values)), **reads}
        results = body.run(node.kernels, feed)
        going = bool(np.asarray(results[0]).reshape(-1)[0])
        values = list(results[1:1 + carried])
        scans.append(tuple(results[1 + carried:]))
        iteration += 1
    outputs = body.graph.outputs[1 + carried:]
    stacked = []
    for k, info in enumerate(outputs):
        if scans:
            shapes = {np.shape(scan[k]) for scan in scans}
            if len(shapes) > 1:
                raise ta.ShapeError(f"{node}: scan output {info.name} changes shape between "
                                    f"iterations ({', '.join(map(str, sorted(shapes)))})")
            stacked.append(np.stack([np.asarray(scan[k]) for scan in scans]))
        else:
            stacked.append(np.zeros((0,), info.dtype or np.float32))
    results = (*[np.asarray(v) for v in values], *stacked)
    return results[0] if len(results) == 1 else results
