"""A plan turned into a dask task graph: one task per block and one per addition of partial
blocks, in a ``HighLevelGraph`` layer over the operands' own layers."""
from __future__ import annotations

import uuid
from typing import Any

import numpy as np

import tensoralg as ta
from tensoralg.dask.operands import BlockedOperand, ChunkKind, record
from tensoralg.dask.placement import placed
from tensoralg.dask.plan import BlockPlan, block_slices, tree_pairs
from tensoralg.dask.requirement import dask_array
from tensoralg.dask.tasks import EinsumSpec, KernelSpec, add_partials, run_block


def build(plan: BlockPlan, values: list[Any], spec: EinsumSpec | KernelSpec) -> Any:
    """The lazy result of ``spec`` over ``values`` as a ``dask.array.Array``."""
    da = dask_array()
    from dask.highlevelgraph import HighLevelGraph

    values = list(values)
    for position, chunks in plan.rechunk:
        values[position] = values[position].rechunk(chunks)
    name = f"ta-{_label(plan.statement)}-{uuid.uuid4().hex[:16]}"
    layer: dict[Any, Any] = {}
    whole = {}
    for op in plan.broadcast():
        value = placed(values[op.position])
        if type(value).__module__.startswith("distributed"):
            # A future goes into the tasks themselves: under a key of this layer it would be
            # an alias task, one copy on one worker, and every block task would run there.
            whole[op.position] = value
        else:
            key = f"{name}-operand-{op.position}"
            layer[key] = value
            whole[op.position] = key
    split = plan.split_reductions
    for block in plan.output_blocks():
        coordinate = dict(zip(plan.output, block))
        partial_keys = []
        for partial in plan.partials():
            at = {**coordinate, **dict(zip(split, partial))}
            slices = []
            args = []
            for op in plan.operands:
                if op.is_dask:
                    args.append((values[op.position].name,
                                 *[at.get(i, 0) for i in op.indices]))
                    slices.append(None)
                else:
                    args.append(whole[op.position])
                    slices.append(block_slices(plan, op, at))
            key = (f"{name}-partial", *block, *partial) if split else (name, *block)
            layer[key] = (run_block, spec, tuple(slices), *args)
            partial_keys.append(key)
        if split:
            _addition_tree(layer, name, block, partial_keys)
    dependencies = [v for v, op in zip(values, plan.operands) if op.is_dask]
    graph = HighLevelGraph.from_collections(name, layer, dependencies=dependencies)
    meta, kind = _meta(plan, spec)
    record(name, kind)
    return da.Array(graph, name, plan.output_chunks, meta=meta)


def _addition_tree(layer: dict, name: str, block: tuple[int, ...], keys: list[Any]) -> None:
    levels = tree_pairs(len(keys))
    for depth, pairs in enumerate(levels):
        last = depth == len(levels) - 1
        summed = []
        for number, (a, b) in enumerate(pairs):
            key = (name, *block) if last else (f"{name}-sum{depth}", *block, number)
            layer[key] = (add_partials, keys[a], keys[b])
            summed.append(key)
        if len(keys) % 2:
            summed.append(keys[-1])
        keys = summed


def _label(statement: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in statement)[:24].strip("-") or "kernel"


def _meta(plan: BlockPlan, spec: EinsumSpec | KernelSpec) -> tuple[Any, ChunkKind]:
    """The result's type and dtype, from the same kernel run here on 1-sized stand-ins (it
    compiles here, into the on-disk cache the workers then read)."""
    stand_ins = [_stand_in(op) for op in plan.operands]
    result = spec.run(stand_ins)
    rank = len(plan.output)
    if isinstance(result, ta.Tensor):
        return np.empty((0,) * rank, dtype=result.dtype), \
            ChunkKind("tensor", format=result.format)
    if type(result).__module__.startswith("scipy.sparse"):
        return result[:0, :0], ChunkKind("scipy", scipy_class=type(result))
    array = np.asarray(result)
    return np.empty((0,) * rank, dtype=array.dtype), ChunkKind("numpy")


def _stand_in(op: BlockedOperand) -> Any:
    shape = (1,) * len(op.indices)
    if op.kind.kind == "scipy" and len(shape) == 2:
        import scipy.sparse as sp

        cls = op.kind.scipy_class or sp.csr_array
        return cls(sp.csr_array(shape, dtype=op.dtype))
    if op.kind.kind == "tensor":
        coords = np.zeros((len(shape), 0), dtype=np.int64)   # (modes, nonzeros)
        return ta.Tensor.from_coords(coords, np.zeros(0, dtype=op.dtype), shape,
                                     format=op.kind.format)
    return np.zeros(shape, dtype=op.dtype) if shape else op.dtype.type(0)
