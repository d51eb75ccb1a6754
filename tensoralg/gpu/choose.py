"""Picking a kernel's mapping per call, from the row lengths of its operands.

The CUDA translation unit offers every mapping its plan allows (``codegen/cuda_print.py``);
the runtime picks one per call:

- ``nonzero-split`` when one row is far longer than the rest (at least 1024 nonzeros and 32
  times the mean): a thread per row would leave one thread with most of the work;
- ``warp-per-row`` when the row shares a loop over output columns (lanes take columns: as many
  lanes as columns, up to 32), or a reduction averaging at least two iterations per row (lanes
  take iterations: the largest power of two not above the mean, up to 32);
- ``grid-stride`` for rows that are one loop over output columns and nothing to share;
- ``thread-per-row`` otherwise.

A mapping asked for by name is used when the kernel allows it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from tensoralg.codegen.cuda import CudaProgram, check_mapping
from tensoralg.codegen.cuda_plan import (
    ATOMIC,
    BLOCK_REDUCE,
    GRID_STRIDE,
    NONZERO_SPLIT,
    THREAD_PER_ROW,
    WARP_PER_ROW,
    RowsPlan,
    Split,
)
from tensoralg.errors import CompileError, UnsupportedError
from tensoralg.gpu.evaluate import Unevaluable, evaluate
from tensoralg.schedule import Parallelize, Reduction, Unit

SKEWED_LONGEST = 1024      # a row at least this long ...
SKEWED_RATIO = 32          # ... and this many times the mean makes the rows skewed


@dataclass(frozen=True, slots=True)
class RowStats:
    """How many nonzeros the rows of a CSR-like level hold.

    >>> print(row_stats(np.array([0, 2, 2, 7])))
    3 rows, 7 nonzeros, 2.3 a row on average, 5 the longest
    """

    rows: int
    nonzeros: int
    longest: int

    @property
    def mean(self) -> float:
        return self.nonzeros / self.rows if self.rows else 0.0

    @property
    def skewed(self) -> bool:
        return self.longest >= SKEWED_LONGEST and self.longest >= SKEWED_RATIO * max(self.mean, 1)

    def __str__(self) -> str:
        return (f"{self.rows} rows, {self.nonzeros} nonzeros, {self.mean:.1f} a row on "
                f"average, {self.longest} the longest")


# What each GPU unit of ``parallelize`` asks for, in order of preference: the first mapping
# the kernel allows is taken.
UNIT_MAPPINGS = {
    Unit.GPU_BLOCKS: (NONZERO_SPLIT, BLOCK_REDUCE),
    Unit.GPU_WARPS: (WARP_PER_ROW,),
    Unit.GPU_THREADS: (THREAD_PER_ROW, GRID_STRIDE),
}


def scheduled_mapping(command: Parallelize, program: CudaProgram, outer: str | None) -> str:
    """The mapping ``parallelize(index, unit=gpu-..., reduction=...)`` asks of ``program``,
    whose grid takes the loop over ``outer``.

    Blocks take equal shares of the nonzeros (``nonzero-split``) or, for a sum to a scalar,
    one block reduction; warps share a row among their lanes; threads take a row or an element
    each. A kernel whose iterations add into shared output elements runs only with
    ``reduction=atomics`` (``atomic``); stating atomics elsewhere is refused, as is a unit
    the kernel has no mapping for.
    """
    if outer is not None and command.index != outer:
        raise UnsupportedError(f"{command}: the GPU grid takes the outermost loop of "
                               f"{program.name}, over {outer}; parallelize({outer}, ...)")
    scattering = ATOMIC in program.mappings
    if scattering and command.reduction is not Reduction.ATOMICS:
        raise CompileError(f"{command}: iterations of {command.index} add into the same "
                           f"output elements of {program.name}; state how they combine: "
                           f"reduction=atomics")
    if command.reduction is Reduction.ATOMICS:
        if not scattering:
            raise UnsupportedError(f"{command}: {program.name} has no atomic mapping (its "
                                   f"iterations own their output elements); drop "
                                   f"reduction=atomics")
        return ATOMIC
    for mapping in UNIT_MAPPINGS[command.unit]:
        if mapping in program.mappings:
            return mapping
    raise UnsupportedError(f"{command}: {program.name} runs as "
                           f"{', '.join(program.mappings) or 'one thread'}, none of them "
                           f"{command.unit.value} ({', '.join(UNIT_MAPPINGS[command.unit])})")


def row_stats(pos: np.ndarray) -> RowStats:
    """The `RowStats` of a pos array."""
    rows = len(pos) - 1
    if rows <= 0:
        return RowStats(0, 0, 0)
    lengths = np.diff(pos)
    return RowStats(rows, int(pos[-1] - pos[0]), int(lengths.max()))


@dataclass(frozen=True, slots=True)
class Choice:
    """A call's mapping, the lanes each kernel with a shared loop gets (by kernel role), and
    why (for notes and benchmarks)."""

    mapping: str
    lanes: dict[str, int]
    why: str

    def __str__(self) -> str:
        return f"{self.mapping} ({self.why})"


StatsOf = Callable[[str], RowStats]     # the stats of the pos parameter with this role


def lanes_for(split: Split, env: Mapping[str, int | float], stats_of: StatsOf
              ) -> tuple[int, str]:
    """The lanes of a group sharing ``split`` (1 to 32, a power of two), and why."""
    if split.positions is not None:
        stats = stats_of(split.positions.role)
        return _power_below(stats.mean), f"rows: {stats}"
    try:
        width = int(evaluate(split.stop, env)) - int(evaluate(split.start, env))
    except Unevaluable:
        return 32, f"the loop over {split.var} has no width known before the launch"
    lanes = _power_above(width) if split.kind == "columns" else _power_below(width)
    return lanes, f"the loop over {split.var} is {width} wide"


def _power_below(value: float) -> int:
    lanes = 1
    while lanes * 2 <= min(value, 32):
        lanes *= 2
    return lanes


def _power_above(value: float) -> int:
    lanes = 1
    while lanes < min(value, 32):
        lanes *= 2
    return lanes


def choose_rows(program: CudaProgram, env: Mapping[str, int | float], stats_of: StatsOf,
                asked: str | None) -> Choice:
    """The mapping of a ``rows`` program for one call (module docstring)."""
    plan = program.plan
    assert isinstance(plan, RowsPlan)
    check_mapping(asked, program.mappings, f"kernel {program.name}")
    lanes, why = (lanes_for(plan.split, env, stats_of) if plan.split is not None
                  else (1, "no loop of the row can be shared"))
    merge_stats = stats_of(plan.merge.positions.role) if plan.merge is not None else None
    if asked is None:
        if merge_stats is not None and merge_stats.skewed:
            asked, why = NONZERO_SPLIT, f"skewed rows: {merge_stats}"
        elif plan.split is not None and plan.split.kind == "columns" and lanes > 1:
            asked = WARP_PER_ROW
        elif plan.elements is not None:
            asked, why = GRID_STRIDE, "rows of one loop over output columns"
        elif plan.split is not None and lanes > 1:
            asked = WARP_PER_ROW
        else:
            asked = THREAD_PER_ROW
    if asked == WARP_PER_ROW and lanes == 1:
        lanes, why = 32, "warp-per-row asked for: a whole warp a row"
    return Choice(asked, {"rows": lanes if asked == WARP_PER_ROW else 1}, why)


def choose_sparse_rows(program: CudaProgram, env: Mapping[str, int | float],
                       stats_of: StatsOf, asked: str | None) -> Choice:
    """The mapping of a two-phase program: lanes for the count and fill kernels alike."""
    check_mapping(asked, program.mappings, f"kernel {program.name}")
    lanes, reasons = {}, []
    for kernel in program.kernels:
        if isinstance(kernel.split, Split) and asked == WARP_PER_ROW:
            lanes[kernel.role] = 32
            reasons.append(f"{kernel.role}: warp-per-row asked for, 32 lanes")
        elif isinstance(kernel.split, Split) and asked is None:
            lanes[kernel.role], why = lanes_for(kernel.split, env, stats_of)
            reasons.append(f"{kernel.role}: {lanes[kernel.role]} lanes, {why}")
        else:
            lanes[kernel.role] = 1
    mapping = WARP_PER_ROW if any(n > 1 for n in lanes.values()) else THREAD_PER_ROW
    if asked is not None:
        mapping = asked
    return Choice(mapping, lanes, "; ".join(reasons) or "no loop of the row can be shared")


__all__ = ["Choice", "RowStats", "choose_rows", "choose_sparse_rows", "lanes_for", "row_stats"]
