"""Per-level emitters: the capabilities of each level format as functions that return IR.

One module per level kind, each with the functions its kind supports (Chou et al. 2018):

- ``dense``: ``locate(parent, size, coordinate)`` - the child position, in O(1).
- ``compressed``: ``child_range(arrays, parent)`` - the segment of positions under a parent;
  ``coordinate(arrays, position)``.
- ``singleton``: ``child_range(arrays, parent_segment)`` - the parent's own positions;
  ``coordinate(arrays, position)``.

Every emitter works in i64 positions and coordinates: narrower index arrays are widened on load.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.ir.nodes import Var


@dataclass(frozen=True, slots=True)
class LevelArrays:
    """The IR variables holding one storage level's arrays (None where the kind has none)."""

    pos: Var | None
    crd: Var | None
    size: Var          # the i64 size of the dimension this level stores
