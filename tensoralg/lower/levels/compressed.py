"""Emitters for a compressed level: children of position p are pos[p] .. pos[p+1]."""
from __future__ import annotations

from tensoralg.ir.build import add, cast, load
from tensoralg.ir.nodes import I64, Expr
from tensoralg.lower.levels import LevelArrays


def child_range(arrays: LevelArrays, parent: Expr) -> tuple[Expr, Expr]:
    """``[pos[parent], pos[parent + 1])``, widened to i64."""
    assert arrays.pos is not None
    return cast(load(arrays.pos, parent), I64), cast(load(arrays.pos, add(parent, 1)), I64)


def coordinate(arrays: LevelArrays, position: Expr) -> Expr:
    """The coordinate stored at ``position``, widened to i64."""
    assert arrays.crd is not None
    return cast(load(arrays.crd, position), I64)
