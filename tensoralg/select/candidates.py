"""Candidate formats: the defaults for each order, their labels, and the capped product.

Matrices get the six formats of the issue; 3-tensors every level string of ``d``/``s`` under
every mode order, all-dense once, and COO. Formats that keep dense levels above compressed ones
(the TACO classics: CSF ``sss``, ``dss``, ``dds``) come before those that store dense fibres
under compressed levels (``sds``, ``dsd``, ...), so a cap drops the unusual ones first.

>>> [label(f) for f in default_formats(2)]
['dense', 'csr', 'csc', 'dcsr', 'dcsc', 'coo']
>>> len(default_formats(3)), [label(f) for f in default_formats(3)[:4]]
(44, ['dense', 'csf', 'sss[0,2,1]', 'sss[1,0,2]'])
>>> label(ta.Format("ds", order=(1, 0))), label(resolve("sds[2,0,1]", 3))
('csc', 'sds[2,0,1]')
"""
from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

import tensoralg as ta

DEFAULT_LIMIT = 36          # every pair of the six matrix formats, and no more
MATRIX_FORMATS = (ta.dense(2), ta.CSR, ta.CSC, ta.DCSR, ta.DCSC, ta.COO)
_NAMED = (ta.CSR, ta.CSC, ta.DCSR, ta.DCSC, ta.CSF)
_ORDERED = re.compile(r"([a-z]+)\[([\d,\s]*)\]")

Assignment = tuple[tuple[str, "ta.Format | None"], ...]   # (tensor, format) in table order


def default_formats(rank: int) -> tuple[ta.Format, ...]:
    """The formats an experiment tries for a sparse operand of this order."""
    if rank == 0:
        return (ta.dense(0),)
    if rank == 1:
        return (ta.dense(1), ta.Format("s"))
    if rank == 2:
        return MATRIX_FORMATS
    orders = list(itertools.permutations(range(rank)))
    classic = ["d" * k + "s" * (rank - k) for k in range(rank)]         # sss, dss, dds
    first = [ta.Format(levels, order=order) for levels in classic for order in orders]
    others = [ta.Format("".join(levels), order=order) for order in orders
              for levels in itertools.product("ds", repeat=rank)
              if "".join(levels) not in classic and "s" in levels]
    coo = ta.Format("u" + "q" * (rank - 1))
    return (ta.dense(rank), *first, coo, *others)


def label(fmt: ta.Format | None) -> str:
    """A short name: ``dense``, a named format (``csr``, ``coo``), or ``levels[order]``."""
    if fmt is None:
        return "(inferred)"
    if fmt.is_dense and fmt.is_identity_order:
        return "dense"
    if fmt.is_identity_order and fmt.rank > 1 and fmt.spec == "u" + "q" * (fmt.rank - 1):
        return "coo"
    for named in _NAMED:
        if fmt == named and named.name:
            return named.name
    if fmt.is_identity_order:
        return fmt.spec
    return f"{fmt.spec}[{','.join(map(str, fmt.order))}]"


def resolve(spec: Any, rank: int, what: str = "tensor") -> ta.Format:
    """Read any format description (as ``ta.compile`` does, plus ``levels[order]``)."""
    if isinstance(spec, str) and _ORDERED.fullmatch(spec.strip()):
        levels, order = _ORDERED.fullmatch(spec.strip()).groups()   # type: ignore[union-attr]
        spec = ta.Format(levels, order=tuple(int(m) for m in order.split(",") if m.strip()))
    try:   # the library's own reading of names such as "coo", adapted to the order
        return ta.Tensor.from_numpy(np.zeros((1,) * rank), format=spec).format
    except ta.FormatError as err:
        raise ta.FormatError(f"candidates for {what}: {err}") from None


@dataclass(frozen=True)
class Plan:
    """The assignments to run, in order (the first is the reference), and what was left out."""

    assignments: tuple[Assignment, ...]
    notes: tuple[str, ...]


def plan(choices: Mapping[str, Sequence[ta.Format | None]], limit: int,
         notes: Sequence[str] = ()) -> Plan:
    """Every combination of the per-tensor choices, at most ``limit`` of them.

    Combinations are ranked by the sum of their choices' positions (so the first choices of
    every tensor go first, and none is starved), ties in product order.

    >>> p = plan({"A": [ta.CSR, ta.CSC, ta.COO], "B": [ta.CSR, ta.CSC]}, limit=4)
    >>> [", ".join(label(f) for _, f in a) for a in p.assignments]
    ['csr, csr', 'csr, csc', 'csc, csr', 'csc, csc']
    >>> p.notes
    ('ran the first 4 of 6 format combinations (the limit); left out: A=coo B=csr, A=coo B=csc',)
    """
    names = list(choices)
    total = math.prod(len(choices[n]) for n in names)
    # The first `limit` combinations by rank use no position at or past `limit` anywhere
    # (and the next few, named in the note, none past `limit + 6`).
    ranges = [range(min(len(choices[n]), limit + 6)) for n in names]
    ranked = sorted(itertools.product(*ranges), key=sum)
    kept, left = ranked[:limit], ranked[limit:]
    assignments = tuple(tuple((n, choices[n][k]) for n, k in zip(names, combo)) for combo in kept)
    notes = list(notes)
    if left:
        shown = [" ".join(f"{n}={label(choices[n][k])}" for n, k in zip(names, combo)
                          if len(choices[n]) > 1) for combo in left[:6]]
        more = f" and {total - limit - len(shown)} more" if total - limit > len(shown) else ""
        notes.append(f"ran the first {limit} of {total} format combinations (the limit); "
                     f"left out: {', '.join(shown)}{more}")
    return Plan(assignments, tuple(notes))
