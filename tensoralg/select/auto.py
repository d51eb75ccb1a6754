"""``formats="auto"`` for ``ta.einsum``: which operands to convert, and why, in one call.

``ta.einsum`` asks ``resolve_auto`` when ``formats`` is ``"auto"`` or holds ``"auto"`` entries
(a list with one entry per operand, or a dict by position). The answer maps each such position
to a format to convert the operand to, or to None to keep it as given, with a line of
explanation for the kernel's notes. It never changes what kind of result comes back (a dense
result stays dense), and it never fails where ``einsum`` itself would not: when it cannot
decide, it keeps every format and says why.

>>> import numpy as np, scipy.sparse as sp
>>> A = sp.random_array((500, 400), density=0.01, format="csr", random_state=0)
>>> resolution = resolve_auto("ij,j->i", (A, np.ones(400)), "auto")
>>> resolution.formats
{0: None, 1: None}
>>> resolution.explanation.startswith("formats='auto' kept A (csr)")
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import tensoralg as ta
from tensoralg.select.choose import _own_label, choose
from tensoralg.select.expression import Expression

AUTO = "auto"


@dataclass(frozen=True)
class Resolution:
    """Position -> format to convert to (None: keep the operand's own), and why."""

    formats: dict[int, str | None]
    explanation: str

    def __iter__(self):            # ``formats, explanation = resolve_auto(...)``
        return iter((self.formats, self.explanation))


def auto_positions(formats: Any, count: int) -> list[int]:
    """The operand positions that ``formats`` leaves to the compiler.

    >>> auto_positions("auto", 3), auto_positions(["csr", "auto"], 2), auto_positions({1: "auto"}, 2)
    ([0, 1, 2], [1], [1])
    """
    if isinstance(formats, str):
        return list(range(count)) if formats == AUTO else []
    if isinstance(formats, Mapping):
        return sorted(int(k) for k, v in formats.items() if _is_auto(v) and
                      isinstance(k, (int, np.integer)) and 0 <= k < count)
    if isinstance(formats, (list, tuple)):
        return [k for k, v in enumerate(formats) if _is_auto(v) and k < count]
    return []


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


def resolve_auto(subscripts: str, operands: tuple, formats: Any) -> Resolution:
    """The formats to give the ``"auto"`` operands of ``ta.einsum(subscripts, *operands)``.

    Returns ``Resolution(formats, explanation)``: ``formats`` maps each position that
    ``formats`` leaves to the compiler to a format label to convert that operand to
    (``"csc"``, ``"dcsr"``, ``"dense"``, ...), or to None to keep the operand as given;
    ``explanation`` is one line for the kernel's notes.
    """
    positions = auto_positions(formats, len(operands))
    if not positions:
        return Resolution({}, "")
    try:
        choice = choose(subscripts, list(operands), explain=True, same_result=True)
    except ta.TensorAlgebraError as err:
        # einsum reports the operands' own mistakes with its own messages; auto keeps out of it
        first = str(err).splitlines()[0]
        return Resolution({k: None for k in positions},
                          f"formats='auto' kept every operand's format: {first}")
    names = Expression.parse(subscripts, len(operands)).operands
    chosen: dict[int, str | None] = {}
    words = []
    for k in positions:
        own, picked = _own_label(operands[k]), choice.formats[k]
        chosen[k] = None if picked == own else picked
        words.append(f"kept {names[k]} ({own})" if chosen[k] is None else
                     f"stored {names[k]} as {picked} (given {own})")
    model = choice.explanation.model if choice.explanation is not None else ""
    return Resolution(chosen, f"formats='auto' {', '.join(words)}: {choice.reason} [{model}]")
