"""NumPy's interleaved einsum form, ``(op0, sublist0, op1, sublist1, ..., [sublistout])``, as
subscripts.

A sublist names indices by integers, numbered as NumPy numbers them (0-25 are ``A``-``Z``,
26-51 are ``a``-``z``, so the implicit output, sorted by letter, is sorted by number), and
``Ellipsis`` stands for ``...``. The operands pass through untouched.
"""
from __future__ import annotations

import operator
import reprlib
from typing import Any, Sequence

from tensoralg.errors import NotationError, TensorAlgebraError

SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class SubscriptTypeError(TensorAlgebraError, TypeError):
    """Einsum subscripts of the wrong type: neither a string nor sublists of integers and
    ``Ellipsis`` (a ``TypeError``, as NumPy raises)."""


def from_interleaved(arguments: Sequence[Any]) -> tuple[str, list[Any]]:
    """The subscripts and the operands of an interleaved einsum call.

    >>> from_interleaved(("a", [0, 1], "b", [1, 2], [0, 2]))
    ('AB,BC->AC', ['a', 'b'])
    >>> from_interleaved(("a", [Ellipsis, 27]))
    ('...b', ['a'])
    """
    if not arguments:
        raise NotationError("einsum needs at least one operand")
    operands = list(arguments[0::2][: len(arguments) // 2])
    sublists = list(arguments[1::2][: len(arguments) // 2])
    terms = [_term(sublist, k) for k, sublist in enumerate(sublists)]
    subscripts = ",".join(terms)
    if len(arguments) % 2:
        subscripts += "->" + _term(arguments[-1], None)
    return subscripts, operands


def _term(sublist: Any, k: int | None) -> str:
    what = "the output sublist" if k is None else f"the sublist of operand {k}"
    try:
        items = list(sublist)
    except TypeError:
        raise SubscriptTypeError(f"{what} must be a list of integers and Ellipsis, not a "
                                 f"{type(sublist).__name__}") from None
    letters = []
    for item in items:
        if item is Ellipsis:
            letters.append("...")
            continue
        try:
            number = operator.index(item)
        except TypeError:
            raise SubscriptTypeError(f"{what} holds {reprlib.repr(item)}: a sublist holds "
                                     f"integers and Ellipsis only") from None
        if not 0 <= number < len(SYMBOLS):
            raise NotationError(f"{what} holds {number}: subscript numbers are within "
                                f"[0, {len(SYMBOLS)})")
        letters.append(SYMBOLS[number])
    return "".join(letters)
