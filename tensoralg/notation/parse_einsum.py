"""Parser of NumPy ``einsum`` subscripts: ``"ij,jk->ik"``, ``"ii"``, ``"...ij,...jk"``.

Index letters are NumPy's 52 ASCII letters, plus any other Unicode letter (opt_einsum's
``get_symbol`` hands out Greek and other letters past 52). Operand ``k`` is the tensor
``operand_name(k)`` ("A" ... "Z", then "T26", ...), the output is
``out``; index names are the subscript letters, and an ellipsis expands to ``_e0``, ``_e1``, ...
aligned from the right, as NumPy broadcasts. Every index missing from the output is summed around
the whole product, in order of first appearance (the first outermost).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tensoralg.errors import NotationError, ShapeError
from tensoralg.notation.ast import Access, Assignment, Expr, Mul, Reduce

OUTPUT_NAME = "out"
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def operand_name(k: int) -> str:
    """The tensor name of einsum operand ``k``.

    >>> operand_name(0), operand_name(25), operand_name(26)
    ('A', 'Z', 'T26')
    """
    return chr(ord("A") + k) if k < 26 else f"T{k}"


def parse_einsum(subscripts: str, ranks: Sequence[int]) -> Assignment:
    """Parse einsum subscripts for operands of the given ranks.

    >>> str(parse_einsum("ij,j->i", [2, 1]))
    'out(i) = sum(j, A(i,j) * B(j))'
    >>> str(parse_einsum("ij,jk", [2, 2]))
    'out(i,k) = sum(j, A(i,j) * B(j,k))'
    """
    arrow = _check_characters(subscripts)
    inputs_end = len(subscripts) if arrow is None else arrow
    terms = _terms(subscripts, 0, inputs_end)
    if not subscripts.strip() and any(ranks):     # "" takes scalars, as in NumPy
        raise NotationError("empty subscripts for einsum with operands", subscripts, 0)
    _check_term_count(subscripts, terms, ranks, inputs_end)
    width = max((rank - len(t.letters) for t, rank in zip(terms, ranks) if t.ellipsis is not None),
                default=0)
    inputs = [_expand(subscripts, k, term, rank, width) for k, (term, rank) in
              enumerate(zip(terms, ranks))]
    if arrow is None:
        output = _implicit_output(terms, width)
    else:
        output = _explicit_output(subscripts, arrow, terms, ranks, width)
    accesses = [Access(operand_name(k), indices) for k, indices in enumerate(inputs)]
    product: Expr = accesses[0]
    for access in accesses[1:]:
        product = Mul(product, access)
    summed = dict.fromkeys(i for indices in inputs for i in indices if i not in output)
    for index in reversed(summed):
        product = Reduce(index, product)
    return Assignment(Access(OUTPUT_NAME, output), product)


@dataclass(frozen=True, slots=True)
class _Term:
    """One comma-separated term: its letters with their columns, and where its '...' stands."""

    text: str
    start: int
    letters: tuple[tuple[str, int], ...]
    ellipsis: int | None  # column of the ellipsis, None without one
    ellipsis_slot: int  # how many letters come before the ellipsis


def _check_characters(text: str) -> int | None:
    """Reject characters einsum does not know; return the column of '->' (None without one)."""
    arrow: int | None = None
    for pos, char in enumerate(text):
        if char in _LETTERS or char in " ,." or (char.isalpha() and not char.isascii()):
            continue
        if char == "-":
            if not text.startswith("->", pos):
                raise NotationError("'-' must be followed by '>'", text, pos)
            if arrow is not None:
                raise NotationError("more than one '->'", text, pos)
            arrow = pos
        elif char == ">":
            if pos == 0 or text[pos - 1] != "-":
                raise NotationError("'>' must follow '-'", text, pos)
        else:
            raise NotationError(f"unexpected character {char!r} in einsum subscripts", text, pos)
    return arrow


def _terms(text: str, start: int, stop: int) -> list[_Term]:
    terms = []
    begin = start
    for pos in range(start, stop + 1):
        if pos == stop or text[pos] == ",":
            terms.append(_term(text, begin, pos))
            begin = pos + 1
    return terms


def _term(text: str, start: int, stop: int) -> _Term:
    letters: list[tuple[str, int]] = []
    ellipsis: int | None = None
    slot = 0
    pos = start
    while pos < stop:
        char = text[pos]
        if char == ".":
            run = pos
            while run < stop and text[run] == ".":
                run += 1
            if run - pos != 3:
                raise NotationError("an ellipsis is exactly three dots", text, pos)
            if ellipsis is not None:
                raise NotationError("more than one ellipsis in a term", text, pos)
            ellipsis, slot = pos, len(letters)
            pos = run
            continue
        if char == ",":
            raise NotationError("',' in the output of einsum", text, pos)
        if char != " ":
            letters.append((char, pos))
        pos += 1
    return _Term(text[start:stop], start, tuple(letters), ellipsis, slot)


def _check_term_count(text: str, terms: list[_Term], ranks: Sequence[int], inputs_end: int) -> None:
    if len(terms) == len(ranks):
        return
    message = f"{len(terms)} terms in the subscripts but {len(ranks)} operands"
    if len(terms) > len(ranks):
        position = max(terms[len(ranks)].start - 1, 0)  # the comma that starts the extra term
    else:
        position = inputs_end
    raise NotationError(message, text, position)


def _expand(text: str, k: int, term: _Term, rank: int, width: int) -> tuple[str, ...]:
    """The index names of operand ``k``: its letters with the ellipsis expanded."""
    count = len(term.letters)
    name = f"operand {k} ({operand_name(k)})"
    if term.ellipsis is None and count != rank:
        raise ShapeError(f"{name} has rank {rank} but term {term.text.strip()!r} has {count} "
                         f"indices (in {text!r})")
    if term.ellipsis is not None and count > rank:
        raise ShapeError(f"{name} has rank {rank} but term {term.text.strip()!r} has at least "
                         f"{count} indices (in {text!r})")
    letters = [letter for letter, _ in term.letters]
    if term.ellipsis is None:
        return tuple(letters)
    own = rank - count
    broadcast = [f"_e{n}" for n in range(width - own, width)]
    return tuple(letters[: term.ellipsis_slot] + broadcast + letters[term.ellipsis_slot:])


def _implicit_output(terms: list[_Term], width: int) -> tuple[str, ...]:
    counts: dict[str, int] = {}
    for term in terms:
        for letter, _ in term.letters:
            counts[letter] = counts.get(letter, 0) + 1
    once = sorted(letter for letter, count in counts.items() if count == 1)  # ASCII: A-Z < a-z
    return tuple(f"_e{n}" for n in range(width)) + tuple(once)


def _explicit_output(text: str, arrow: int, terms: list[_Term], ranks: Sequence[int],
                     width: int) -> tuple[str, ...]:
    output = _term(text, arrow + 2, len(text))
    known = {letter for term in terms for letter, _ in term.letters}
    has_ellipsis = any(term.ellipsis is not None for term in terms)
    if output.ellipsis is not None and not has_ellipsis:
        raise NotationError("'...' in the output but in no input", text, output.ellipsis)
    if output.ellipsis is None and width > 0:
        k = next(k for k, (t, r) in enumerate(zip(terms, ranks))
                 if t.ellipsis is not None and r > len(t.letters))
        raise NotationError(f"the '...' of operand {k} covers {ranks[k] - len(terms[k].letters)} "
                            "dimensions, so the output must place '...' too", text, arrow)
    seen: set[str] = set()
    for letter, pos in output.letters:
        if letter not in known:
            raise NotationError(f"output index {letter} appears in no input", text, pos)
        if letter in seen:
            raise NotationError(f"output index {letter} repeated", text, pos)
        seen.add(letter)
    letters = [letter for letter, _ in output.letters]
    broadcast = [f"_e{n}" for n in range(width)] if output.ellipsis is not None else []
    return tuple(letters[: output.ellipsis_slot] + broadcast + letters[output.ellipsis_slot:])
