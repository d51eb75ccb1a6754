"""Static steps that move data: gathers (embedding lookups), concatenations and transposes.

Each runs in NumPy or a compiled transpose from Python, and is also marked with compiled
data-movement calls (``tensoralg.api.gather_call``, ``copy_call``) so that it can join a
plan's native call sequence. An embedding gather whose ids are one column of a graph input
reads that column in place (:func:`id_column`), and the slicing Gather leaves the plan.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

import tensoralg as ta
from tensoralg.onnx.executor import Step
from tensoralg.onnx.fusion import FLOATS
from tensoralg.onnx.step_base import Env, Getter, Part, Run, Spec, contiguous, made_of


def permuter(context: Any, target: np.ndarray, shape: tuple[int, ...],
             perm: tuple[int, ...] | None = None) -> Callable[[np.ndarray], None]:
    """Writes ``source.transpose(perm)`` (a ``shape`` array; reversed axes by default) into
    ``target`` (same elements) with a compiled kernel, whose transposed reads the compiler
    tiles by cache line; NumPy's strided copy takes 2-3x longer. A source of another shape,
    dtype or layout is copied by NumPy."""
    perm = tuple(range(len(shape)))[::-1] if perm is None else tuple(perm)
    out_shape = tuple(shape[p] for p in perm)

    def by_numpy(source: np.ndarray) -> None:
        np.copyto(target, source.transpose(perm).reshape(target.shape))

    if target.dtype not in FLOATS or not 2 <= len(shape) <= len(TRANSPOSE_INDICES) or \
            not target.flags.c_contiguous or target.size != int(np.prod(shape)) or not target.size:
        return by_numpy
    names = TRANSPOSE_INDICES[:len(shape)]
    statement = f"Y({','.join(names[p] for p in perm)}) = X({','.join(names)})"
    kernel = context.kernels.get(statement, target.dtype, {})
    bound = kernel.bind(out=target.reshape(out_shape), X=np.zeros(shape, target.dtype))

    def run(source: np.ndarray) -> None:
        if source.shape != shape or source.dtype != target.dtype or \
                not source.flags.c_contiguous:
            by_numpy(source)
            return
        bound.rebind("X", source)
        bound()
    run.bound = bound      # type: ignore[attr-defined]
    return run


TRANSPOSE_INDICES = "abcdef"


def id_column(name: str, recorded: Env, constants: Mapping[str, np.ndarray],
               shared: dict[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
    """When the ids ``name`` are ``Gather(x, t, axis)`` of a graph input ``x`` with a constant
    scalar ``t``, read by nothing else (DLRM's one id column per table): ``x`` and the index
    that views the column, so a bag can read its ids from ``x`` and the Gather leaves the
    plan."""
    producer = shared.get("producers", {}).get(name)
    if producer is None or producer.node.op_type != "Gather" or \
            shared.get("readers", {}).get(name) != 1:
        return None
    data, index = producer.node.inputs[0], producer.node.inputs[1]
    t = constants.get(index)
    if data not in shared.get("feeds", ()) or t is None or t.ndim != 0 or t.dtype.kind not in "iu":
        return None
    rank = recorded[data].ndim
    axis = int(producer.node.attributes.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    size = recorded[data].shape[axis]
    column = int(t) + size if int(t) < 0 else int(t)
    if not 0 <= column < size:
        return None       # the Gather step raises its error
    return data, (slice(None),) * axis + (column,)


def gather_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
            shared: dict[str, Any]) -> Spec | None:
    node, context = step.node, step.context
    data = recorded[node.inputs[0]]
    if recorded[node.inputs[1]].dtype.kind not in "iu":
        return None
    axis = int(node.attributes.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        return None
    size = data.shape[axis]

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, (data_of, index_of) = outs[0], ins
        if node.inputs[1] in constants:        # constant indices: checked once, here
            check_indices(index_of.fixed, size, context, node.inputs[1])
            fixed = index_of.fixed
            return lambda env: np.take(data_of(env), fixed, axis=axis, out=out, mode="wrap")

        if column is not None:          # the ids are a column of a graph input: read in place
            index_of = Getter(column[0], None)
            where = column[1]
        else:
            where = None

        def run(env: Env) -> None:
            index = index_of(env) if where is None else index_of(env)[where]
            if not all_below(index, size):
                check_indices(index, size, context, node.inputs[1])
            np.take(data_of(env), index, axis=axis, out=out, mode="wrap")  # checked above
        call = None
        if axis == 0 and data_of.fixed is not None:
            ids = recorded[node.inputs[1] if column is None else column[0]]
            call = ta.api.gather_call(contiguous(data_of.fixed), np.zeros(ids.shape, ids.dtype),
                                      out, str(context), None if where is None else where[1])
        return made_of(run, None if call is None else [(call, [("ids", index_of, None)])])

    column = id_column(node.inputs[1], recorded, constants, shared) if axis == 0 else None
    if column is not None and (len(column[1]) != 2 or recorded[column[0]].ndim != 2):
        column = None       # only a column of a 2-D input (ids x fields) is read in place
    spec = Spec(make, [], "copy", strided_output=True)
    if column is not None:
        spec.unread = frozenset({node.inputs[1]})
    return spec


def all_below(index: np.ndarray, size: int) -> bool:
    """Whether every entry of an integer array is in ``[0, size)``, in one pass: read as
    unsigned, a negative entry is huge."""
    if not index.size:
        return True
    unsigned = index.view(np.dtype(f"u{index.dtype.itemsize}")) if index.dtype.kind == "i" \
        else index
    return int(unsigned.max()) < size


def check_indices(index: np.ndarray, size: int, context: Any, name: str) -> None:
    """Raise a ShapeError naming the node unless every entry is in ``[-size, size)`` (ONNX
    counts negative indices from the end)."""
    if index.size and (int(index.min()) < -size or int(index.max()) >= size):
        raise ta.ShapeError(f"{context}: an index of {name} is outside [-{size}, {size})")


def concat_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
            ) -> Spec | None:
    out_rank = recorded[step.node.outputs[0]].ndim
    axis = int(step.node.attributes.get("axis", 0))
    axis = axis + out_rank if axis < 0 else axis
    names = [n for n in step.node.inputs if n]

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out = outs[0]
        # Each input not written in place by its producer is copied into its block: in
        # NumPy, and natively as a copy of rows (out viewed as (outer, width), each input a
        # column block).
        outer = int(np.prod(out.shape[:axis], dtype=np.int64))
        rows = out.reshape(outer, -1) if out.flags.c_contiguous and outer else None
        blocks: list[tuple[Getter, tuple[slice, ...]]] = []
        parts: list[Part] | None = []
        start = flat = 0
        for get, name in zip(ins, names):
            value = recorded[name]
            width, flat_width = value.shape[axis], value.size // max(outer, 1)
            if name not in spec.in_place:
                blocks.append((get, (slice(None),) * axis + (slice(start, start + width),)))
                call = None if rows is None or parts is None else ta.api.copy_call(
                    np.zeros(value.shape, value.dtype), rows[:, flat:flat + flat_width],
                    str(step.context))
                if call is None:
                    parts = None
                else:
                    parts.append((call, [("src", get, None)]))  # type: ignore[union-attr]
            start, flat = start + width, flat + flat_width

        def run(env: Env) -> None:
            for get, index in blocks:
                out[index] = get(env)
        return made_of(run, parts)

    spec = Spec(make, [], "copy")
    return spec


def transpose_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
               ) -> Spec | None:
    rank = recorded[step.node.inputs[0]].ndim
    perm = step.node.attributes.get("perm")
    perm = tuple(perm) if perm is not None else tuple(range(rank))[::-1]

    shape = recorded[step.node.inputs[0]].shape

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        copy, get = permuter(step.context, outs[0], shape, perm), ins[0]
        copier = getattr(copy, "bound", None)
        return made_of(lambda env: copy(get(env)),
                       None if copier is None else [(copier, [("X", get, None)])])

    return Spec(make, [], "transpose kernel")


__all__ = ["all_below", "check_indices", "concat_spec", "gather_spec", "id_column", "permuter",
           "transpose_spec"]
