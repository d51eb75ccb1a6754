"""Level formats: how one storage level of a tensor stores its coordinates.

A tensor's storage is a tree of levels (Chou et al., OOPSLA 2018). Each level maps a parent
position to the positions of its children:

- dense (``d``): children of position ``p`` are ``p * N + i`` for every coordinate ``i < N``;
  no arrays.
- compressed (``s``): children of ``p`` are positions ``pos[p] .. pos[p+1]``, coordinates
  ``crd[...]``; ordered and unique within each segment.
- compressed non-unique (``u``): as compressed, but a coordinate may repeat within a segment
  (sorted, so repeats are adjacent); it must be followed by singleton levels only (COO).
- singleton (``q``): exactly one child per parent position, at the same position, coordinate
  ``crd[p]``; no pos array. It must follow a non-unique level or another singleton.
"""
from __future__ import annotations

import enum


class LevelKind(enum.Enum):
    """The level formats, named by their one-letter code in format strings."""

    DENSE = "d"
    COMPRESSED = "s"
    COMPRESSED_NONUNIQUE = "u"
    SINGLETON = "q"

    @property
    def has_pos(self) -> bool:
        """Whether the level stores a ``pos`` array (segment bounds per parent position)."""
        return self in (LevelKind.COMPRESSED, LevelKind.COMPRESSED_NONUNIQUE)

    @property
    def has_crd(self) -> bool:
        """Whether the level stores a ``crd`` array (one coordinate per position)."""
        return self is not LevelKind.DENSE

    @property
    def is_sparse(self) -> bool:
        """Whether coordinates must be iterated (they cannot be located in O(1))."""
        return self is not LevelKind.DENSE

    def __str__(self) -> str:
        return self.value
