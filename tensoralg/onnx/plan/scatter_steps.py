"""The static step of a graph network's sum aggregation: a ``RowScatter`` that adds whole
rows (``onnx/passes/scatters.py``) as two prebound native calls, so that it joins the plan's
compiled sequence.

Run node by node, each such scatter builds its one-entry-per-column CSC matrix and calls the
core's kernel through ``Kernel.__call__``: ~0.2 ms a call on a 340-node graph, for 0.02 ms of
arithmetic (PyTorch Geometric's GCN at batch 1, Intel Xeon VM, an ad hoc profile,
2026-12-07). Here the matrix is built once: its positions are ``0..E`` and its values ones
for good; each run the index is copied into its coordinates by ``program.ids_call`` (checked,
negative ones counted from the end), then the bound product writes the plan's output buffer.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.scatter import ROW_SUM, ROW_SUM_DTYPES, ROW_SUM_ONTO
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import Env, Getter, Run, Spec, contiguous, made_of, placeholder


def row_scatter_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                     ) -> Spec | None:
    """A ``RowScatter`` (data, index, shape, updates) adding whole rows, as its ids call and
    its bound product; None (a generic step) for other reductions and dtypes, an index of
    another type than int32 or int64 (what ``program.ids_call`` reads), one that is not one
    entry per update row, or updates that are not rows of the data."""
    node, context = step.node, step.context
    data, index, updates = (recorded[node.inputs[k]] for k in (0, 1, 3))
    out = recorded[node.outputs[0]]
    if node.attributes.get("reduction") != "add" or data.dtype not in ROW_SUM_DTYPES or \
            int(node.attributes.get("axis", 0)) % max(data.ndim, 1) != 0 or \
            index.dtype not in (np.int32, np.int64) or updates.dtype != data.dtype or \
            updates.shape[1:] != data.shape[1:] or index.size != updates.shape[0] or \
            not updates.size or not data.size or out.shape != data.shape:
        return None
    rows, count = data.shape[0], updates.shape[0]
    width = data.size // rows
    zero_start = node.inputs[0] in constants and not constants[node.inputs[0]].any()

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        data_of, index_of, _, updates_of = ins
        crd = np.zeros(count, np.int64)
        ids = program.ids_call(np.zeros((count, 1), index.dtype), 0, crd, rows, str(context),
                               f"index(es) of {node.inputs[1]} outside the data")
        assert ids is not None      # an integer index of ``count`` entries, checked above
        matrix = ta.Tensor((rows, count), ta.CSC,
                           [None, (np.arange(count + 1, dtype=np.int64), crd)],
                           np.ones(count, data.dtype), check=False)
        operands = {"A": matrix,
                    "U": placeholder(updates_of, updates.shape, data.dtype).reshape(count,
                                                                                   width)}
        reads = [("U", updates_of, (count, width))]
        if not zero_start:
            operands["D"] = placeholder(data_of, data.shape, data.dtype).reshape(rows, width)
            reads.append(("D", data_of, (rows, width)))
        kernel = context.kernels.get(ROW_SUM if zero_start else ROW_SUM_ONTO, data.dtype,
                                     {"A": ta.CSC})
        bound = kernel.bind(out=outs[0].reshape(rows, width), **operands)
        dynamic = [(letter, get, shape) for letter, get, shape in reads if get.fixed is None]

        def run(env: Env) -> None:
            ids.rebind("ids", contiguous(index_of(env)).reshape(count, 1))
            ids()
            for letter, get, shape in dynamic:
                bound.rebind(letter, contiguous(get(env)).reshape(shape))
            bound()
        return made_of(run, [(ids, [("ids", index_of, (count, 1))]), (bound, dynamic)])

    spec = Spec(make, [], "kernel")
    spec.plan = (f"ids checked into a CSC level, then {ROW_SUM if zero_start else ROW_SUM_ONTO}"
                 f"  [A: csc] (prebound)")
    return spec


__all__ = ["row_scatter_spec"]
