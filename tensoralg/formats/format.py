"""``Format``: the level formats of a tensor plus the order in which its modes are stored.

>>> Format("ds")                       # CSR
Format('ds')
>>> Format("ds", order=(1, 0))         # CSC: mode 1 (columns) is stored first
Format('ds', order=(1, 0))
>>> resolve_format(COO, 3).spec
'uqq'
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from tensoralg.errors import FormatError
from tensoralg.formats.level import LevelKind

_CODES = {kind.value: kind for kind in LevelKind}


@dataclass(frozen=True, slots=True, init=False)
class Format:
    """Per-level formats (in storage order) and the mode stored at each level.

    ``levels[k]`` is the format of storage level ``k``, which stores mode ``order[k]``.
    ``name`` is a display name for the named formats (``"csr"``); it does not affect equality.
    """

    levels: tuple[LevelKind, ...]
    order: tuple[int, ...]
    name: str | None = field(default=None, compare=False)
    # ``is_dense``, found once: the runtime asks it of every operand of every call
    _all_dense: bool = field(default=False, compare=False, repr=False)

    def __init__(self, levels: str | Sequence[LevelKind | str], order: Sequence[int] | None = None,
                 name: str | None = None) -> None:
        if not isinstance(levels, (str, Sequence)):
            raise FormatError(f"a format is a string of level codes such as 'ds', or a list "
                              f"of LevelKind, not {type(levels).__name__}")
        kinds = tuple(_parse_level(code, levels) for code in levels)
        try:
            mode_order = tuple(range(len(kinds))) if order is None else \
                tuple(operator.index(m) for m in order)
        except TypeError:
            raise FormatError(f"a format's mode order is a sequence of integers, not "
                              f"{order!r}") from None
        object.__setattr__(self, "levels", kinds)
        object.__setattr__(self, "order", mode_order)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_all_dense", all(kind is LevelKind.DENSE for kind in kinds))
        self._validate()

    def _validate(self) -> None:
        spec = self.spec
        if sorted(self.order) != list(range(len(self.levels))):
            raise FormatError(
                f"format {spec!r}: mode order {self.order} is not a permutation of "
                f"0..{len(self.levels) - 1}")
        for k, kind in enumerate(self.levels):
            parent = self.levels[k - 1] if k else None
            child = self.levels[k + 1] if k + 1 < len(self.levels) else None
            if kind is LevelKind.SINGLETON and parent not in (
                    LevelKind.COMPRESSED_NONUNIQUE, LevelKind.SINGLETON):
                raise FormatError(
                    f"format {spec!r}: a singleton level ('q') must follow a non-unique level "
                    f"('u') or another singleton, as in COO 'uq'")
            if kind is LevelKind.COMPRESSED_NONUNIQUE and child is not LevelKind.SINGLETON:
                raise FormatError(
                    f"format {spec!r}: a non-unique compressed level ('u') must be followed by "
                    f"singleton levels ('q'), as in COO 'uq'")

    @property
    def spec(self) -> str:
        """The level string, e.g. ``'ds'``."""
        return "".join(kind.value for kind in self.levels)

    @property
    def rank(self) -> int:
        return len(self.levels)

    @property
    def is_dense(self) -> bool:
        """All levels dense (the order may still be permuted)."""
        return self._all_dense

    @property
    def is_identity_order(self) -> bool:
        return self.order == tuple(range(self.rank))

    def unique(self, level: int) -> bool:
        """Whether coordinates at ``level`` are unique under each parent position."""
        kind = self.levels[level]
        if kind is LevelKind.COMPRESSED_NONUNIQUE:
            return False
        if kind is LevelKind.SINGLETON:
            return level + 1 == self.rank or self.levels[level + 1] is not LevelKind.SINGLETON
        return True

    def level_of_mode(self, mode: int) -> int:
        """The storage level that stores ``mode``."""
        return self.order.index(mode)

    def __repr__(self) -> str:
        if self.is_identity_order:
            return f"Format({self.spec!r})"
        return f"Format({self.spec!r}, order={self.order})"

    def __str__(self) -> str:
        text = self.spec if self.is_identity_order else f"{self.spec}{list(self.order)}"
        return f"{self.name} ({text})" if self.name else text


def _parse_level(code: LevelKind | str, spec: Any) -> LevelKind:
    if isinstance(code, LevelKind):
        return code
    try:
        return _CODES[code]
    except KeyError:
        raise FormatError(
            f"format {spec!r}: unknown level code {code!r}; use d (dense), s (compressed), "
            f"u (compressed non-unique) or q (singleton)") from None


@functools.lru_cache(maxsize=None)
def dense(rank: int) -> Format:
    """The all-dense format of a given rank, in natural mode order.

    >>> dense(2)
    Format('dd')
    """
    if not isinstance(rank, (int, np.integer)) or isinstance(rank, bool) or rank < 0:
        raise FormatError(f"dense() takes a rank, an integer of at least 0, not {rank!r}")
    rank = int(rank)
    # One object per rank (formats are immutable): the runtime asks for these on every call
    # (each NumPy operand's format, the layout check of every kernel key), and building and
    # validating a Format costs a few microseconds.
    found = _DENSE.get(rank)
    if found is None:
        found = _DENSE[rank] = Format("d" * rank, name=f"dense({rank})")
    return found


_DENSE: dict[int, Format] = {}


CSR = Format("ds", name="csr")
CSC = Format("ds", order=(1, 0), name="csc")
DCSR = Format("ss", name="dcsr")
DCSC = Format("ss", order=(1, 0), name="dcsc")
COO = Format("uq", name="coo")
CSF = Format("sss", name="csf")

NAMED: dict[str, Format] = {f.name: f for f in (CSR, CSC, DCSR, DCSC, COO, CSF) if f.name}

FormatSpec = Format | str | tuple | None


def resolve_format(spec: Any, rank: int, what: str = "operand") -> Format:
    """Turn any user format description into a ``Format`` of the given rank.

    Accepts a ``Format``, a level string (``"ds"``), a named format (``"csr"``, ``"coo"``,
    ``"dense"``), or a ``(levels, order)`` tuple. The rank-generic named formats adapt:
    COO is ``u`` followed by singletons, CSF and DCSR are all compressed, dense is all dense.

    >>> resolve_format("csc", 2)
    Format('ds', order=(1, 0))
    >>> resolve_format("coo", 3).spec
    'uqq'
    """
    if isinstance(spec, Format):
        if spec.rank == rank:
            return spec
        if spec.name in ("coo", "csf", "dcsr") or (spec.name or "").startswith("dense"):
            return resolve_format(spec.name.split("(")[0], rank, what)
        raise FormatError(f"{what}: format {spec} has {spec.rank} levels but the tensor has "
                          f"{rank} modes")
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return resolve_format(Format(spec[0], order=spec[1]), rank, what)
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key == "dense":
            return dense(rank)
        if key == "coo":
            return Format("u" + "q" * (rank - 1), name="coo") if rank >= 2 else Format(
                "s" * rank, name="coo")
        if key in ("csf", "dcsr") and rank != 2 or key == "csf":
            return Format("s" * rank, name=key)
        if key in NAMED:
            return resolve_format(NAMED[key], rank, what)
        return resolve_format(Format(spec.strip()), rank, what)
    raise FormatError(f"{what}: cannot read {spec!r} as a format; give a level string such as "
                      f"'ds', a named format ('csr', 'csc', 'coo', 'dense'), or a ta.Format")
