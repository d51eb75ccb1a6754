"""Sparse outputs assembled on several threads: each range of rows is a kernel call of its own,
with buffers of its own, and the pieces are joined into one matrix afterwards.

A kernel whose sparse output is a matrix stored dense, then compressed (CSR, or CSC with its
columns as the dense level) may run over ranges of its outer loop (``lower/scheduling.py``,
``stitchable``). Each range's call allocates and grows its own ``pos``/``crd``/``vals``; its
``pos`` covers every row, with zeros before the range and its own total after it. Joining
offsets each range's ``pos`` entries by the entries of the ranges before it and concatenates
the coordinates and values — one pass over the output, against the whole assembly run in
parallel.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Sequence

import numpy as np

from tensoralg.formats.format import Format
from tensoralg.formats.tensor import LevelArrays, Tensor
from tensoralg.runtime.args import CAPACITY, OUT_HANDLE, OUT_SIZES, ArgumentPlan, OutputBuffers
from tensoralg.runtime.wrap import release, sparse_result


def run_ranges(function: Callable[..., int], args: list, plan: ArgumentPlan,
               bounds: Sequence[int], capacity: int,
               run_calls: Callable[[Callable[[list], int], list[list]], list[int]]
               ) -> tuple[int, list[OutputBuffers]]:
    """Run one call per range, each with output buffers of its own; returns the worst status
    and each range's buffers."""
    begin, end = plan.range_slots   # type: ignore[misc]
    parts: list[OutputBuffers] = []
    calls: list[list] = []
    share = max(16, capacity // max(1, len(bounds) - 1))
    for k in range(len(bounds) - 1):
        buffers = OutputBuffers(sizes=np.zeros(2, dtype=np.int64), capacity=share)
        call = list(args)
        for slot, (kind, name, _) in enumerate(plan.steps):
            if kind == OUT_HANDLE:
                handle = buffers.handles[name] = ctypes.c_void_p(0)
                call[slot] = ctypes.addressof(handle)
            elif kind == OUT_SIZES:
                call[slot] = buffers.sizes.ctypes.data   # type: ignore[union-attr]
            elif kind == CAPACITY:
                call[slot] = share
        call[begin], call[end] = int(bounds[k]), int(bounds[k + 1])
        calls.append(call)
        parts.append(buffers)
    statuses = run_calls(lambda part: function(*part), calls)
    status = max(statuses)
    if status != 0:
        for buffers in parts:
            release(buffers)
    return status, parts


def join_rows(shape: tuple[int, ...], fmt: Format, index_dtype: np.dtype,
              value_dtype: np.dtype, parts: list[OutputBuffers],
              bounds: Sequence[int]) -> Tensor:
    """One matrix from the pieces that ranges ``[bounds[k], bounds[k+1])`` of its dense level
    assembled.

    >>> import numpy as np
    >>> from tensoralg.formats.format import Format
    >>> from tensoralg.formats.level import LevelKind
    >>> fmt = Format([LevelKind.DENSE, LevelKind.COMPRESSED])
    >>> pieces = [_piece([0, 1, 2, 2], [5, 6], [1.0, 2.0]), _piece([0, 0, 0, 1], [7], [3.0])]
    >>> t = join_rows((3, 8), fmt, np.dtype(np.int64), np.dtype(np.float64), pieces, [0, 2, 3])
    >>> t.levels[1].pos.tolist(), t.levels[1].crd.tolist(), t.vals.tolist()
    ([0, 1, 2, 3], [5, 6, 7], [1.0, 2.0, 3.0])
    """
    rows = shape[fmt.order[0]]
    pieces = [sparse_result(shape, fmt, index_dtype, value_dtype, buffers)
              if not isinstance(buffers, Tensor) else buffers for buffers in parts]
    pos = np.empty(rows + 1, dtype=index_dtype)
    pos[0] = 0
    offset = 0
    for piece, lo, hi in zip(pieces, bounds[:-1], bounds[1:]):
        pos[lo + 1:hi + 1] = piece.levels[1].pos[lo + 1:hi + 1] + offset
        offset += piece.nnz
    crd = np.concatenate([piece.levels[1].crd for piece in pieces]) if pieces else \
        np.empty(0, index_dtype)
    vals = np.concatenate([piece.vals for piece in pieces]) if pieces else \
        np.empty(0, value_dtype)
    return Tensor.trusted(tuple(shape), fmt, (LevelArrays(), LevelArrays(pos, crd.astype(
        index_dtype, copy=False))), vals)


def _piece(pos: list[int], crd: list[int], vals: list[float]) -> Any:
    """A hand-made range result, for the example above."""
    from tensoralg.formats.format import Format
    from tensoralg.formats.level import LevelKind

    fmt = Format([LevelKind.DENSE, LevelKind.COMPRESSED])
    levels = (LevelArrays(), LevelArrays(np.array(pos), np.array(crd)))
    return Tensor.trusted((len(pos) - 1, 8), fmt, levels, np.array(vals))


__all__ = ["join_rows", "run_ranges"]
