"""Scheduling: user-visible commands (reorder, split, parallelize, ...) as frozen data.

A ``Schedule`` says how the loops of one statement should run, apart from what it computes.
``lower/`` reads it; nothing here builds loops. Imports ``errors`` and ``notation`` only.

>>> from tensoralg.schedule import Schedule
>>> print(Schedule().reorder("j", "i").parallelize("j", reduction="partials"))
reorder(j, i); parallelize(j, reduction=partials)
"""
from .commands import (
    Command,
    Fuse,
    Gemm,
    GemmRoute,
    Jam,
    Parallelize,
    Pos,
    Precompute,
    Reduction,
    Relayout,
    Reorder,
    Serial,
    Split,
    Tail,
    Tile,
    TransposeTiles,
    Unit,
    Unroll,
    Vectorize,
    VectorTail,
    Workspaces,
)
from .schedule import Schedule, as_schedule, check, parse_schedule, statement_indices

__all__ = ["Command", "Fuse", "Gemm", "GemmRoute", "Jam", "Parallelize", "Pos", "Precompute", "Reduction", "Relayout", "Reorder",
           "Schedule", "Serial", "Split", "Tail", "Tile", "TransposeTiles", "Unit", "Unroll",
           "VectorTail", "Vectorize", "Workspaces", "as_schedule", "check", "parse_schedule",
           "statement_indices"]
