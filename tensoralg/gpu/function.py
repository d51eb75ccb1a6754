"""The IR a GPU kernel is printed from: the same lowering, with the GPU's pass settings.

The CPU pipeline tiles accumulators into registers, jams rows and tiles transposes by cache
line, choices made for one CPU core's registers and caches. On the GPU those loops are what
lanes and threads share, so the GPU's function is lowered again from the compiled program and
optimized without them (unless the kernel's schedule asks for them by name).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from tensoralg.ir.nodes import Function
from tensoralg.ir.passes.pipeline import PassOptions, optimize
from tensoralg.lower.lowerer import lower
from tensoralg.lower.pattern import without_pattern
from tensoralg.lower.scheduling import LoopPlan, pass_options_of
from tensoralg.lower.unordered import ordered
from tensoralg.schedule import Jam, Schedule, Tile, TransposeTiles


def pass_options(schedule: Schedule | None) -> PassOptions:
    """The IR pass settings of a GPU kernel: the schedule's, where it names them; else no
    register tiles, no row jamming and no cache-line tiles (row workspaces stay).

    >>> pass_options(None).tile_bytes, pass_options(Schedule().tile(256)).tile_bytes
    (0, 256)
    """
    options = pass_options_of(schedule)
    given = schedule or Schedule()
    return PassOptions(
        tile_bytes=options.tile_bytes if given.last(Tile) else 0,
        jam_rows=options.jam_rows if given.last(Jam) else 1,
        workspaces=options.workspaces,
        line_bytes=options.line_bytes if given.last(TransposeTiles) else 0)


def gpu_plan(compiled: Any) -> LoopPlan:
    """The loop plan a GPU kernel of ``compiled`` (an ``api.CompiledProgram``) is lowered
    with: its CPU plan less the choices made for CPU threads. Zeroing rows inside the kernel
    suits a CPU thread that owns them; the GPU's mappings share a row between lanes, and its
    runtime zeroes the output buffer first. Its mappings read a thread range as rows, not as
    a first level's positions. And a thread split into partial outputs that the compiler
    chose for two CPU cores (``api._with_partials``: no schedule asked for it) is not the
    GPU's: its mappings choose their own reduction (atomics where rows are shared).

    >>> import tensoralg as ta
    >>> k = ta.compile("y(i) = A(i,j) * x(j)", {"A": "CSC", "x": "d"})
    >>> k._default.plan.partials, gpu_plan(k._default).partials
    (True, False)
    """
    plan = replace(compiled.plan, zero_rows=False, position_ranges=False)
    if compiled.schedule is None and plan.partials:
        plan = replace(plan, parallel=None)
    return plan


def gpu_function(compiled: Any) -> Function:
    """The IR of ``compiled`` (an ``api.CompiledProgram``) with the GPU's pass settings:
    lowered from its program and the GPU's loop plan (`gpu_plan`), under its function's
    name."""
    # Its runtime assembles sparse outputs by appending only (lower/pattern.py).
    # It binds a COO operand sorted (lower/unordered.py's stores that add are the CPU's).
    lowered = lower(ordered(without_pattern(compiled.program)), compiled.function.name,
                    gpu_plan(compiled))
    return optimize(lowered, options=pass_options(compiled.schedule))


__all__ = ["gpu_function", "gpu_plan", "pass_options"]
