"""Reduction placement: TACO's rule for indices that the left side does not name.

Every index used on the right side, absent from the left side and not bound by an explicit
``sum``, is summed over the smallest subexpression holding all its uses: the lowest common
ancestor of those uses is wrapped in ``Reduce(index, node)`` (a lone access when all uses sit in
one access). Indices sharing one ancestor nest in order of first appearance, the first outermost.

Nodes are addressed by *paths*: the tuple of child positions from the root (``Neg`` and
``Reduce`` have child 0, binary nodes 0 and 1, a ``Call`` one per argument).
"""
from __future__ import annotations

from typing import Mapping, Sequence

from tensoralg.notation.ast import (
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Expr,
    Literal,
    Mul,
    Neg,
    Reduce,
    Sub,
)

Path = tuple[int, ...]


def place_reductions(stmt: Assignment) -> Assignment:
    """Wrap every implicitly summed index around the lowest common ancestor of its uses.

    Statements whose reductions are all explicit (every einsum result) come back unchanged.

    >>> from tensoralg.notation.ast import Access, Mul
    >>> s = Assignment(Access("y", ("i",)), Mul(Access("A", ("i", "j")), Access("x", ("j",))))
    >>> place_reductions(s).rhs == Reduce("j", s.rhs)
    True
    """
    uses = free_uses(stmt.rhs)
    output = set(stmt.lhs.indices)
    placements: dict[Path, list[str]] = {}
    for index, paths in uses.items():  # dicts keep first-appearance order
        if index not in output:
            placements.setdefault(common_prefix(paths), []).append(index)
    if not placements:
        return stmt
    return Assignment(stmt.lhs, wrap_at(stmt.rhs, placements))


def free_uses(expr: Expr) -> dict[str, list[Path]]:
    """Index -> paths of the accesses that use it freely, in order of first appearance.

    >>> free_uses(Mul(Access("A", ("i", "j")), Access("x", ("j",))))
    {'i': [(0,)], 'j': [(0,), (1,)]}
    """
    found: dict[str, list[Path]] = {}
    _collect(expr, (), frozenset(), found)
    return found


def _collect(expr: Expr, path: Path, bound: frozenset[str], found: dict[str, list[Path]]) -> None:
    match expr:
        case Access(_, indices):
            for index in indices:
                if index not in bound:
                    paths = found.setdefault(index, [])
                    if not paths or paths[-1] != path:  # A(i,i) counts once
                        paths.append(path)
        case Reduce(index, body):
            _collect(body, path + (0,), bound | {index}, found)
        case _:
            for position, child in enumerate(children(expr)):
                _collect(child, path + (position,), bound, found)


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct subexpressions of ``expr``, in path order."""
    match expr:
        case Access() | Literal():
            return ()
        case Neg(operand) | Reduce(_, operand):
            return (operand,)
        case Add(lhs, rhs) | Sub(lhs, rhs) | Mul(lhs, rhs) | Div(lhs, rhs):
            return (lhs, rhs)
        case Call(_, args):
            return args
    raise TypeError(f"not an index expression: {expr!r}")


def with_children(expr: Expr, new: Sequence[Expr]) -> Expr:
    """``expr`` rebuilt around ``new`` children (same count and order as :func:`children`)."""
    match expr:
        case Access() | Literal():
            return expr
        case Neg():
            return Neg(new[0])
        case Reduce(index, _):
            return Reduce(index, new[0])
        case Add() | Sub() | Mul() | Div():
            return type(expr)(new[0], new[1])
        case Call(func, _):
            return Call(func, tuple(new))
    raise TypeError(f"not an index expression: {expr!r}")


def common_prefix(paths: Sequence[Path]) -> Path:
    """The longest path that starts every one of ``paths``: their lowest common ancestor.

    >>> common_prefix([(1, 0, 1), (1, 0, 0, 1), (1, 0)])
    (1, 0)
    """
    first = paths[0]
    length = len(first)
    for other in paths[1:]:
        length = min(length, len(other))
        for k in range(length):
            if other[k] != first[k]:
                length = k
                break
    return first[:length]


def wrap_at(expr: Expr, placements: Mapping[Path, Sequence[str]], path: Path = ()) -> Expr:
    """``expr`` with the node at each path wrapped in ``Reduce`` over its indices (first outermost).

    Paths refer to the tree as given, before any wrapping.

    >>> wrap_at(Mul(Access("A", ("i", "j")), Access("x", ("j",))), {(0,): ["j"]})
    Mul(lhs=Reduce(index='j', body=Access(tensor='A', indices=('i', 'j'))), rhs=Access(tensor='x', indices=('j',)))
    """
    kids = children(expr)
    if kids:
        expr = with_children(expr, [wrap_at(k, placements, path + (n,)) for n, k in enumerate(kids)])
    for index in reversed(placements.get(path, ())):
        expr = Reduce(index, expr)
    return expr
