"""Emitters for a singleton level: one child per parent position, at the same position."""
from __future__ import annotations

from tensoralg.ir.nodes import Expr
from tensoralg.lower.levels import LevelArrays
from tensoralg.lower.levels.compressed import coordinate

__all__ = ["child_range", "coordinate"]


def child_range(arrays: LevelArrays, parent_segment: tuple[Expr, Expr]) -> tuple[Expr, Expr]:
    """The positions of the parent's segment: a singleton level shares its parent's positions."""
    return parent_segment
