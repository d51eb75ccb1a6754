"""The expression of an experiment: a TACO-style statement, or einsum subscripts made into one.

An experiment compiles every candidate with ``ta.compile``, which takes a statement. Einsum
subscripts are rewritten as a statement whose operands are named ``A``, ``B``, ... (as
``ta.einsum`` names them in its messages) and whose output is ``out``:

>>> Expression.parse("ij,j->i").statement
'out(i) = A(i,j) * B(j)'
>>> e = Expression.parse("y(i) = A(i,j) * x(j) + alpha * b(i)")
>>> e.output, e.output_rank
('y', 1)
>>> e.operands
('A', 'x', 'alpha', 'b')
>>> e.indices["A"]
('i', 'j')

``Expression.parse`` reads only the names the table and the command line need; the statement
itself is parsed, and its mistakes reported with a caret, by ``ta.compile``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence  # (typing's aliases check isinstance slowly)
from dataclasses import dataclass
from typing import Any

import tensoralg as ta

# The elementwise functions of the statement grammar (README, "TACO-style statements"), and
# ``sum``, whose first argument is an index, not a tensor.
FUNCTIONS = frozenset("abs sqrt exp log pow max min relu sigmoid tanh sin cos "
                      "floor ceil round gt lt ge le eq ne where sum".split())
EINSUM_OUTPUT = "out"

_TOKEN = re.compile(r"[A-Za-z_]\w*|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|\S")
_LHS = re.compile(r"\s*([A-Za-z_]\w*)\s*(?:\(([^()]*)\))?\s*=(?!=)")


@dataclass(frozen=True)
class Expression:
    """A statement to compile, with its output and the operands it names, in order of use.

    ``indices`` maps each operand to the indices of its first access (``()`` for a scalar).
    ``einsum`` says whether the user wrote einsum subscripts; their operands are positional.
    """

    text: str
    statement: str
    output: str
    output_rank: int
    operands: tuple[str, ...]
    indices: Mapping[str, tuple[str, ...]]
    einsum: bool

    @classmethod
    def parse(cls, text: Any, count: int | None = None) -> "Expression":
        """Read a statement (it holds ``=``) or einsum subscripts for ``count`` operands."""
        if not isinstance(text, str):
            raise ta.NotationError(f"the expression must be a string such as "
                                   f"'y(i) = A(i,j) * x(j)' or 'ij,j->i', not "
                                   f"{type(text).__name__}")
        if "=" in text.replace("->", ""):
            return _from_statement(text)
        return _from_einsum(text, count)

    def bind(self, operands: Any) -> dict[str, Any]:
        """The operands by tensor name: a mapping for a statement, a sequence for einsum."""
        if self.einsum:
            if isinstance(operands, Mapping) or not isinstance(operands, Sequence):
                raise ta.InputError(f"{self.text!r}: einsum subscripts take their operands as "
                                    f"a list or tuple, in order (named {', '.join(self.operands)})")
            return dict(zip(self.operands, operands))
        if not isinstance(operands, Mapping):
            raise ta.InputError(f"{self.text!r}: a statement takes its operands as a dict by "
                                f"name, such as {{{', '.join(repr(n) + ': ...' for n in self.operands)}}}")
        return dict(operands)


def _from_statement(text: str) -> Expression:
    lhs = _LHS.match(text)
    if lhs is None:
        raise ta.NotationError("a statement starts with its output and '=', as in "
                               "'y(i) = A(i,j) * x(j)'", text, 0)
    output_indices = [i.strip() for i in (lhs.group(2) or "").split(",") if i.strip()]
    indices = _operand_indices(_TOKEN.findall(text[lhs.end():]))
    return Expression(text, text.strip(), lhs.group(1), len(output_indices), tuple(indices),
                      indices, einsum=False)


def _operand_indices(tokens: list[str]) -> dict[str, tuple[str, ...]]:
    """Each tensor the right side uses, with the indices of its first access."""
    found: dict[str, tuple[str, ...]] = {}
    k = 0
    while k < len(tokens):
        token = tokens[k]
        is_name = token[0].isalpha() or token[0] == "_"
        followed = k + 1 < len(tokens) and tokens[k + 1] == "("
        if not is_name:
            k += 1
        elif token in FUNCTIONS and followed:
            k += 4 if token == "sum" else 2        # sum(j, ...): skip the index and the comma
        elif followed:                             # an access: name(i, j, ...)
            end = tokens.index(")", k) if ")" in tokens[k:] else len(tokens)
            found.setdefault(token, tuple(t for t in tokens[k + 2:end] if t != ","))
            k = end + 1
        else:                                      # a scalar operand
            found.setdefault(token, ())
            k += 1
    return found


def _from_einsum(text: str, count: int | None) -> Expression:
    subscripts = text.replace(" ", "")
    if "..." in subscripts:
        raise ta.UnsupportedError(f"{text!r}: experiments do not take an ellipsis; write the "
                                  f"indices out, or use ta.einsum directly")
    inputs, arrow, output = subscripts.partition("->")
    terms = inputs.split(",")
    for term in (*terms, output):
        bad = [c for c in term if not (c.isascii() and c.isalpha())]
        if bad:
            raise ta.NotationError(f"einsum subscripts are letters, ',' and '->'; found "
                                   f"{bad[0]!r}", text, text.find(bad[0]))
    if count is not None and count != len(terms):
        raise ta.InputError(f"{text!r} names {len(terms)} operand(s) but {count} were given")
    if not arrow:   # NumPy's implicit output: the indices used once, in alphabetical order
        output = "".join(sorted(c for c in set(inputs) if c.isalpha() and inputs.count(c) == 1))
    names = [chr(ord("A") + k) if k < 26 else f"T{k}" for k in range(len(terms))]
    factors = [f"{name}({','.join(map(_index, term))})" if term else name
               for name, term in zip(names, terms)]
    lhs = f"{EINSUM_OUTPUT}({','.join(map(_index, output))})" if output else EINSUM_OUTPUT
    statement = f"{lhs} = {' * '.join(factors)}"
    indices = {name: tuple(map(_index, term)) for name, term in zip(names, terms)}
    return Expression(text, statement, EINSUM_OUTPUT, len(output), tuple(names), indices,
                      einsum=True)


def _index(letter: str) -> str:
    """An einsum letter as an index name; capitals are doubled so they never name a tensor."""
    return letter if letter.islower() else letter.lower() * 2
