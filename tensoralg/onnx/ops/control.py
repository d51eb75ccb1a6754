"""If whose condition is known only at run time: the branch the condition picks, run node by
node on the outer values it reads.

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
