"""The blockwise plan of one kernel call over chunked operands (no dask here: plain data).

A plan says, from the index notation alone:

- which indices are *partitioned* (split into blocks by some dask operand), with their bounds;
  operands that disagree on an index's bounds are rechunked when their chunks are NumPy arrays
  and refused otherwise (rechunking a sparse operand would move all of it);
- which operands are *broadcast*: held whole and sent once to each worker, sliced inside each
  task when one of their indices is partitioned;
- which summed indices are split, so that each output block is a sum of partial blocks, added
  in a tree of tensoralg addition kernels (``reduction_tasks`` of them);
- the task count: one task per (output block, partial) and one per addition.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tensoralg.dask.operands import BlockedOperand
from tensoralg.errors import ShapeError, UnsupportedError


@dataclass(frozen=True, slots=True)
class BlockPlan:
    """The blockwise plan of ``out = f(operands)`` over the partitioned indices."""

    statement: str
    operands: tuple[BlockedOperand, ...]
    output: str                                   # the output's indices
    bounds: tuple[tuple[str, tuple[int, ...]], ...]   # index -> chunk sizes (partitioned only)
    sizes: tuple[tuple[str, int], ...]            # every index's extent
    rechunk: tuple[tuple[int, tuple[tuple[int, ...], ...]], ...]  # position -> new chunks
    chosen_by: tuple[tuple[str, int], ...]        # partitioned index -> operand that set it

    @property
    def chunks_of(self) -> dict[str, tuple[int, ...]]:
        sizes = dict(self.sizes)
        split = dict(self.bounds)
        return {index: split.get(index, (sizes[index],)) for index in sizes}

    @property
    def split_reductions(self) -> tuple[str, ...]:
        """Summed indices split into several blocks: their partials are added."""
        return tuple(i for i, _ in self.bounds if i not in self.output)

    @property
    def output_chunks(self) -> tuple[tuple[int, ...], ...]:
        chunks = self.chunks_of
        return tuple(chunks[i] for i in self.output)

    def output_blocks(self) -> list[tuple[int, ...]]:
        return list(itertools.product(*(range(len(c)) for c in self.output_chunks)))

    def partials(self) -> list[tuple[int, ...]]:
        chunks = self.chunks_of
        return list(itertools.product(*(range(len(chunks[i])) for i in self.split_reductions)))

    @property
    def block_tasks(self) -> int:
        return len(self.output_blocks()) * len(self.partials())

    @property
    def reduction_tasks(self) -> int:
        return len(self.output_blocks()) * (len(self.partials()) - 1)

    def broadcast(self) -> tuple[BlockedOperand, ...]:
        return tuple(op for op in self.operands if not op.is_dask)

    def __str__(self) -> str:
        chunks = self.chunks_of
        lines = [f"{self.statement}: {len(self.output_blocks())} output block(s), "
                 f"{self.block_tasks} block task(s), {self.reduction_tasks} addition task(s)"]
        chosen = dict(self.chosen_by)
        for index, sizes in self.bounds:
            role = "output" if index in self.output else "summed, partials added in a tree"
            lines.append(f"  partitioned {index} ({role}): {len(sizes)} blocks of "
                         f"{_sizes_text(sizes)} (bounds of operand {chosen[index]})")
        if not self.bounds:
            lines.append("  partitioned: nothing (every operand is one block)")
        rechunked = dict(self.rechunk)
        for op in self.operands:
            if op.is_dask:
                grid = " x ".join(str(len(chunks[i])) for i in op.indices) or "1"
                what = f"{grid} blocks" + (" (rechunked to the plan's bounds)"
                                           if op.position in rechunked else "")
            else:
                split = [i for i in op.indices if len(chunks[i]) > 1]
                what = "broadcast whole" + (f", sliced along {','.join(split)} in each task"
                                            if split else "")
            nnz = f", {op.nnz} nonzeros" if op.nnz is not None else ""
            lines.append(f"  operand {op.position} ({op.indices or 'scalar'}): "
                         f"{op.kind.kind}{nnz}; {what}")
        return "\n".join(lines)


def _sizes_text(sizes: tuple[int, ...]) -> str:
    if len(set(sizes)) == 1:
        return str(sizes[0])
    shown = ", ".join(str(s) for s in sizes[:6])
    return f"[{shown}{', ...' if len(sizes) > 6 else ''}]"


def make_plan(statement: str, operands: tuple[BlockedOperand, ...], output: str,
              may_split_sums: bool) -> BlockPlan:
    """The plan: bounds per index from the dask operands (a sparse operand's bounds win, then
    the finest), rechunks of dense dask operands that disagree, and the refusals.

    ``may_split_sums``: the statement is one product (einsum), so a sum over a split index is
    the sum of the blocks' partial sums; otherwise summed indices must not be split.
    """
    sizes = _index_sizes(statement, operands, output)
    bounds: dict[str, tuple[int, ...]] = {}
    chosen: dict[str, int] = {}
    for index in sizes:
        candidates = [(op, op.chunks[mode]) for op in operands if op.is_dask
                      for mode, i in enumerate(op.indices) if i == index]
        split = [(op, c) for op, c in candidates if len(c) > 1]
        if not split:
            continue
        # A sparse operand's bounds (balanced by its nonzeros) decide; then the finest split.
        op, c = min(split, key=lambda oc: (oc[0].kind.kind == "numpy", -len(oc[1])))
        if index not in output and not may_split_sums:
            raise UnsupportedError(
                f"{statement}: operand {op.position} is split along {index}, which the "
                f"statement sums inside an expression that is not a single product; give "
                f"that operand one chunk along {index} (rechunk it)")
        bounds[index] = c
        chosen[index] = op.position
    rechunk = {}
    for op in operands:
        if not op.is_dask:
            continue
        wanted = tuple(bounds.get(i, (sizes[i],)) for i in op.indices)
        if wanted == op.chunks:
            continue
        if op.kind.kind != "numpy":
            modes = [i for i, have, want in zip(op.indices, op.chunks, wanted) if have != want]
            raise UnsupportedError(
                f"{statement}: operand {op.position} ({op.kind.kind} chunks) is split along "
                f"{','.join(modes)} differently from operand {chosen.get(modes[0], '?')}; "
                f"partition both with the same bounds (ta.dask.from_scipy(B, "
                f"chunks=A.chunks[0]))")
        if len(op.indices) != len(set(op.indices)):
            raise UnsupportedError(f"{statement}: operand {op.position} repeats an index "
                                   f"and its chunks differ along the repeated modes")
        rechunk[op.position] = wanted
    return BlockPlan(statement, operands, output, tuple(bounds.items()),
                     tuple(sizes.items()), tuple(rechunk.items()), tuple(chosen.items()))


def _index_sizes(statement: str, operands: tuple[BlockedOperand, ...], output: str
                 ) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for op in operands:
        if len(op.indices) != len(op.shape):
            raise ShapeError(f"{statement}: operand {op.position} has {len(op.shape)} "
                             f"dimension(s) but the statement gives it indices "
                             f"{op.indices!r}")
        for index, n in zip(op.indices, op.shape):
            if sizes.setdefault(index, n) != n:
                raise ShapeError(f"{statement}: index {index} has size {sizes[index]} in one "
                                 f"operand and {n} in operand {op.position}")
    missing = [i for i in output if i not in sizes]
    if missing:
        raise ShapeError(f"{statement}: output index {missing[0]} appears in no operand")
    return {i: sizes[i] for i in sorted(sizes, key=lambda i: (i not in output, i))}


def block_slices(plan: BlockPlan, op: BlockedOperand, coordinate: dict[str, int]
                 ) -> tuple[slice, ...]:
    """The slice of a whole (broadcast) operand that the block at ``coordinate`` reads."""
    chunks = plan.chunks_of
    slices = []
    for index in op.indices:
        sizes = chunks[index]
        block = coordinate.get(index, 0)
        start = sum(sizes[:block])
        slices.append(slice(start, start + sizes[block]) if len(sizes) > 1 else slice(None))
    return tuple(slices)


def tree_pairs(count: int) -> list[list[tuple[int, int]]]:
    """The levels of a binary addition tree over ``count`` partials: at each level, pairs of
    positions into the previous level's list (an odd one out is carried up unchanged).

    >>> tree_pairs(3)
    [[(0, 1)], [(0, 1)]]
    """
    levels = []
    while count > 1:
        levels.append([(k, k + 1) for k in range(0, count - 1, 2)])
        count = math.ceil(count / 2)
    return levels
