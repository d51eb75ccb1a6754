"""The static step of a ``Loop``-form embedding bag (``nn.EmbeddingBag`` with offsets).

Node by node, :func:`tensoralg.onnx.passes.bags.recognise.run_loop_bag` builds the bag matrix ``S`` in CSR with
NumPy and SciPy on every call: about 0.25 ms whatever the batch, which at batch 1 is five times
onnxruntime's whole model. When every bag ends where the next starts (bag ``b`` covers
``bounds[b] <= p < bounds[b + 1]``: both exporters' forms, see
:mod:`~tensoralg.onnx.passes.bags.loops`), the CSR row pointers *are* the first ``R + 1`` bounds, so
a static plan fills fixed CSR arrays with native calls and runs the product, all inside the
plan's compiled sequence:

1. ``pos = bounds[:R + 1]`` (a compiled block copy);
2. a check kernel ``F = sum(i, gt(A(i), B(i))) + ne(C, 0) + gt(D, E) + ne(G, H)`` over views
   of ``pos`` (``A = pos[:R]``, ``B = pos[1:]``, ``C = pos[0]``, ``D = pos[R]``), the member
   count ``E`` and the bag count ``G`` against the plan's ``H = R``: nonzero when the offsets
   do not start at 0, decrease or run past the indices, or the loop's count changed; the
   sequence stops on it before anything reads ``pos`` (``NativeCall.flag``);
3. ``crd = indices``, each checked against the table's rows (``tensoralg.program.ids_call``);
   ``vals`` = the per-sample weights (a block copy) or ones;
4. ``Y(i,j) = S(i,k) * T(k,j)`` with ``S`` in CSR, and for a mean
   ``L(i) = S1(i,k)`` (the bag lengths: ``S1`` shares ``pos``, ``crd``, with ones) and
   ``Y(i,j) = Z(i,j) / max(L(i), 1)`` (an empty bag's mean is 0, as in PyTorch); for a max
   bag, the generated max of the member rows (``program.bag_max_call``; an empty bag is the
   form's value: ReduceMax's -inf in the TorchScript form, 0 in the dynamo form).

A flagged run falls back to the step's Python run (``run_loop_bag``), which raises the error
naming the node, or :class:`Replan` when the bag count changed. Unlike the node-by-node run,
every index is checked, also one that no bag reads.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.passes.bags.recognise import BAG_STATEMENT, LoopBag, run_loop_bag
from tensoralg.onnx.passes.fusion import FLOATS
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.movement_steps import Flagged, check_indices
from tensoralg.onnx.plan.step_base import Env, Getter, Part, Replan, Run, Spec, contiguous, made_of

CHECK = "F = sum(i, gt(A(i), B(i))) + ne(C, 0) + gt(D, E) + ne(G, H)"
LENGTHS = "L(i) = S(i,k)"
MEAN = "Y(i,j) = Z(i,j) / max(L(i), 1)"
_INDEX = (np.dtype(np.int32), np.dtype(np.int64))


def loop_bag_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                  ) -> Spec | None:
    """The static form of a contiguous ``Loop`` bag (see the module docstring), or None: the
    bag then runs as a generic step."""
    node, context = step.node, step.context
    bag = node.attributes["bag"]
    inputs = list(node.inputs) + [""] * (7 - len(node.inputs))
    table_name, ids_name, first_name, last_name, count_name, weights_name, padded_name = \
        inputs[:7]
    if not isinstance(bag, LoopBag) or first_name != last_name or bag.end_shift != 1 or \
            (bag.mode != "sum" and weights_name) or (bag.padding is None) != (not padded_name):
        return None     # weighted means and maxima (which PyTorch refuses) run as their node
    table, first, count = (recorded.get(n) for n in (table_name, first_name, count_name))
    ids = recorded.get(ids_name) if ids_name else None
    weights = recorded.get(weights_name) if weights_name else None
    padded = recorded.get(padded_name) if padded_name else None
    out = recorded.get(node.outputs[0])
    if table is None or first is None or count is None or out is None or table.ndim < 1 or \
            table.dtype not in FLOATS or out.dtype != table.dtype or \
            first.dtype != np.int64 or first.ndim != 1 or count.dtype != np.int64 or \
            count.size != 1 or (ids_name and (ids is None or ids.ndim != 1 or
                                              ids.dtype not in _INDEX)) or \
            (weights_name and (weights is None or weights.dtype != table.dtype)):
        return None
    rows = int(count.reshape(-1)[0])
    members = len(ids) if ids is not None else table.shape[0]
    n = table.shape[0]
    dim = int(np.prod(table.shape[1:], dtype=np.int64))
    if rows < 1 or len(first) < rows + 1 or not members or not n or not dim or \
            out.shape != (rows,) + table.shape[1:] or \
            (weights is not None and weights.size != members) or \
            (padded_name and (padded is None or padded.dtype != np.int64 or
                              padded.shape != (members,))):
        return None
    mean, largest = bag.mode == "mean", bag.mode == "max"
    dtype = table.dtype
    check = context.kernels.get(CHECK, np.dtype(np.int64))
    product = None if largest else context.kernels.get(BAG_STATEMENT, dtype, {"S": ta.CSR})
    lengths = context.kernels.get(LENGTHS, dtype, {"S": ta.CSR}) if mean else None
    scale = context.kernels.get(MEAN, dtype) if mean else None
    by_position = [table_name, ids_name, first_name, count_name, weights_name, padded_name]

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        by_name = {g.name: g for g in ins}
        get = [by_name.get(name) if name else None for name in by_position]
        table_of, ids_of, first_of, count_of, weights_of, padded_of = get
        result = outs[0].reshape(rows, dim)
        pos = np.zeros(rows + 1, np.int64)
        pos[-1] = members                  # a valid placeholder until the first run fills it
        crd = np.zeros(members, np.int64) if ids is not None else \
            np.arange(members, dtype=np.int64)
        vals = np.ones(members, dtype)
        parts: list[Part] = []
        what = str(context)
        copy = program.block_copy_call(contiguous(first_of.fixed) if first_of.fixed is not None
                                      else np.zeros_like(first), 0, 1, rows + 1, rows + 1,
                                      pos, what)
        parts.append((copy, _reads("src", first_of)))
        flag = np.zeros((), np.int64)
        checker = check.bind(out=flag, A=pos[:rows], B=pos[1:], C=pos[:1].reshape(()),
                             D=pos[rows:].reshape(()), E=np.array(members, np.int64),
                             G=np.zeros((), np.int64), H=np.array(rows, np.int64))
        parts.append((Flagged(checker, flag), _reads("G", count_of, ())))
        if ids is not None:
            ids_copy = program.ids_call(np.zeros((1, members), ids.dtype), 0, crd, n, what)
            parts.append((ids_copy, _reads("ids", ids_of, (1, members))))
        if bag.padding is not None:     # a padding id's members count for nothing
            padding, shift = bag.padding[0], bag.padding[1] or 0
            keep = program.bag_keep_call(
                contiguous(padded_of.fixed) if padded_of.fixed is not None else
                np.zeros(members, np.int64),
                None if weights is None else (contiguous(weights_of.fixed)
                                              if weights_of.fixed is not None
                                              else np.zeros(members, dtype)),
                vals, padding, shift, what)
            parts.append((keep, _reads("ids", padded_of) +
                          (_reads("weights", weights_of) if weights is not None else [])))
        elif weights is not None:
            weights_copy = program.block_copy_call(np.zeros(members, dtype), 0, 1, members,
                                                  members, vals, what)
            parts.append((weights_copy, _reads("src", weights_of, None)))
        t = contiguous(table_of.fixed).reshape(n, dim) if table_of.fixed is not None else \
            np.zeros((n, dim), dtype)
        if largest:
            maxima = program.bag_max_call(t, crd, pos, vals, np.full(1, bag.empty, dtype),
                                          result, what)
            parts.append((maxima, _reads("table", table_of, (n, dim))))
        else:
            matrix = ta.Tensor((rows, n), ta.CSR, [None, (pos, crd)], vals, check=False)
            target = buffers[0] if mean else result
            bound = product.bind(out=target, S=matrix, T=t)
            parts.append((bound, _reads("T", table_of, (n, dim))))
        if mean:       # the members counted: all, or those a padding id leaves in
            ones = ta.Tensor((rows, n), ta.CSR, [None, (pos, crd)],
                             vals if bag.padding is not None else np.ones(members, dtype),
                             check=False)
            counted = lengths.bind(out=buffers[1], S=ones)
            parts.append((counted, []))
            parts.append((scale.bind(out=result, Z=buffers[0], L=buffers[1]), []))
        if any(call is None for call, _ in parts):
            return _python_run(step, get, outs[0], bag, n)
        return made_of(_python_run(step, get, outs[0], bag, n), parts)

    scratch = [((rows, dim), dtype), ((rows,), dtype)] if mean else []
    spec = Spec(make, scratch, "kernel")
    spec.plan = (f"bag CSR from offsets by native calls ({rows} bags, {members} members over "
                 f"{n} rows): " + ("the generated max of each bag's rows (empty bag: "
                                   f"{bag.empty})" if largest else BAG_STATEMENT) +
                 (f"; {LENGTHS}; {MEAN}" if mean else ""))
    return spec


def _reads(operand: str, get: Getter | None, shape: tuple[int, ...] | None = None
           ) -> list[tuple[str, Getter, tuple[int, ...] | None]]:
    """The operand a part reads each run through ``get`` (nothing for a constant it was bound
    to: a fixed value is bound when the sequence is compiled)."""
    return [] if get is None else [(operand, get, shape)]


def _python_run(step: Step, get: list[Getter | None], out: np.ndarray, bag: LoopBag,
                table_rows: int) -> Run:
    """The step run from Python: the node's own function (which raises the error naming the
    node), every index checked, the result copied into ``out``; :class:`Replan` when its shape
    is not the plan's (the bag count changed)."""
    node, context = step.node, step.context

    def run(env: Env) -> None:
        table, ids, first, count, weights, padded = (g(env) if g is not None else None
                                                     for g in get)
        if ids is not None:
            check_indices(ids, table_rows, context, node.inputs[1])
        result = run_loop_bag(context, table, ids, first, first, count, weights, padded,
                              bag=bag)
        if result.shape != out.shape:
            raise Replan(f"{context}: {result.shape[0]} bags now, {out.shape[0]} when the plan "
                         f"was made")
        np.copyto(out, result)
    return run


__all__ = ["CHECK", "Flagged", "loop_bag_spec"]
