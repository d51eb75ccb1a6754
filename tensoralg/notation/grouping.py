"""Adjacent indices that always travel together, merged into one: ``bhqk,bhkd->bhqd`` is
``Bqk,Bkd->Bqd`` with ``B`` of size ``b * h``, over the same C-ordered memory.

Where a run of letters stands next to each other, in the same order, in every term that holds
any of them (operands and output), the arrays can be viewed with those axes merged, and the
contraction is the same one with fewer indices: a loop nest with fewer loops (the 4-D attention
product ran in twice the time of its 3-D form), a thread range over a longer outer loop, and
one stack index for the BLAS route. ``group_indices`` finds the runs; ``ta.einsum`` reshapes
its dense operands and its result accordingly (views, no copies).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Grouping:
    """The merged subscripts and the shapes to view the operands and the result with."""

    subscripts: str
    operand_shapes: tuple[tuple[int, ...], ...]
    output_shape: tuple[int, ...]


@functools.lru_cache(maxsize=1024)
def group_indices(subscripts: str, shapes: tuple[tuple[int, ...], ...]) -> Grouping | None:
    """The contraction ``subscripts`` of operands of ``shapes`` with each run of indices that
    always stand together merged into its first letter; None when nothing merges (or the
    subscripts are not an explicit, ellipsis-free equation with one size per letter and no
    letter twice in a term).

    >>> g = group_indices("bhqk,bhkd->bhqd", ((2, 3, 4, 5), (2, 3, 5, 6)))
    >>> g.subscripts, g.operand_shapes, g.output_shape
    ('bqk,bkd->bqd', ((6, 4, 5), (6, 5, 6)), (2, 3, 4, 6))
    >>> group_indices("ij,jk->ik", ((2, 3), (3, 4))) is None
    True
    """
    if subscripts.count("->") != 1 or "." in subscripts:
        return None            # malformed ones get the parser's precise error
    inputs, output = subscripts.split("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes) or any(len(t) != len(s) for t, s in zip(terms, shapes)):
        return None
    everything = [*terms, output]
    if any(len(set(t)) != len(t) or (t and not t.isalpha()) for t in everything):
        return None
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        for letter, size in zip(term, shape):
            if sizes.setdefault(letter, size) != size:
                return None        # a size that disagrees or broadcasts: the general path
    if not set(output) <= set(sizes):
        return None

    def follows(x: str, y: str) -> bool:
        """Whether y stands right after x in every term holding either."""
        for term in everything:
            if (x in term) != (y in term):
                return False
            if x in term and term.index(y) != term.index(x) + 1:
                return False
        return True

    merged: dict[str, str] = {}      # a letter folded into the run that starts before it
    for term in everything:
        for x, y in zip(term, term[1:]):
            if y not in merged and follows(x, y):
                merged[y] = merged.get(x, x)
    if not merged:
        return None

    def new_term(term: str) -> str:
        return "".join(letter for letter in term if letter not in merged)

    def new_shape(term: str) -> tuple[int, ...]:
        shape: list[int] = []
        for letter in term:
            if letter in merged:
                shape[-1] *= sizes[letter]
            else:
                shape.append(sizes[letter])
        return tuple(shape)

    text = ",".join(new_term(t) for t in terms) + "->" + new_term(output)
    return Grouping(text, tuple(new_shape(t) for t in terms),
                    tuple(sizes[letter] for letter in output))


__all__ = ["Grouping", "group_indices"]
