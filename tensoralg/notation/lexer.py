"""Tokens of TACO-style statements, each with the column where it starts."""
from __future__ import annotations

import re
from dataclasses import dataclass

from tensoralg.errors import NotationError


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``kind`` is "name", "number", "end" or the symbol itself ("(", "+", ...)."""

    kind: str
    text: str
    position: int


_NUMBER = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOLS = frozenset("()=,+-*/")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens ending with an "end" token at ``len(text)``.

    >>> [t.kind for t in tokenize("y(i) = 2.5 * x(i)")]
    ['name', '(', 'name', ')', '=', 'number', '*', 'name', '(', 'name', ')', 'end']
    """
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        if char in _SYMBOLS:
            tokens.append(Token(char, char, pos))
            pos += 1
            continue
        match_ = _NAME.match(text, pos) or _NUMBER.match(text, pos)
        if match_ is None:
            raise NotationError(f"unexpected character {char!r}", text, pos)
        kind = "name" if match_.re is _NAME else "number"
        tokens.append(Token(kind, match_.group(), pos))
        pos = match_.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def number_value(text: str) -> int | float:
    """The value of a number token: an int without '.' or exponent, else a float."""
    if any(c in text for c in ".eE"):
        return float(text)
    return int(text)
