"""TACO-style text of statements and expressions, with the fewest parentheses that parse back.

``parse_statement(format_statement(s)) == s`` for every statement the parsers produce. Literals
print through ``repr`` (ints stay ints); a negative literal prints as ``-2`` and parses back to a
negative literal, while ``Neg(Literal(2))`` prints as ``-(2)`` so that the two stay apart.
Non-finite float literals (``inf``, ``nan``) print but do not parse back.
"""
from __future__ import annotations

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

# Binding strength: a child printed inside a parent of higher strength gets parentheses.
_SUM, _PRODUCT, _UNARY, _ATOM = 1, 2, 3, 4
_BINARY = {Add: ("+", _SUM), Sub: ("-", _SUM), Mul: ("*", _PRODUCT), Div: ("/", _PRODUCT)}


def format_statement(stmt: Assignment) -> str:
    """``lhs = rhs`` in TACO syntax.

    >>> from tensoralg.notation.ast import Access, Mul, Reduce
    >>> rhs = Reduce("j", Mul(Access("A", ("i", "j")), Access("x", ("j",))))
    >>> format_statement(Assignment(Access("y", ("i",)), rhs))
    'y(i) = sum(j, A(i,j) * x(j))'
    """
    return f"{stmt.lhs} = {format_expr(stmt.rhs)}"


def format_expr(expr: Expr) -> str:
    """An index expression in TACO syntax, parenthesised only where precedence requires.

    >>> from tensoralg.notation.ast import Access, Add, Mul
    >>> format_expr(Mul(Add(Access("a"), Access("b")), Access("c")))
    '(a + b) * c'
    """
    match expr:
        case Access():
            return str(expr)
        case Literal(value):
            return repr(value)
        case Neg(operand):
            # A literal operand keeps its parentheses: "-2" is the literal -2, "-(2)" is Neg(2).
            inner = format_expr(operand)
            if isinstance(operand, Literal) or _strength(operand) < _UNARY or isinstance(operand, Neg):
                inner = f"({inner})"
            return f"-{inner}"
        case Add(lhs, rhs) | Sub(lhs, rhs) | Mul(lhs, rhs) | Div(lhs, rhs):
            symbol, strength = _BINARY[type(expr)]
            # Left associative: the left child may bind as loosely as the parent, the right not.
            left = _wrap(lhs, strength)
            right = _wrap(rhs, strength + 1)
            return f"{left} {symbol} {right}"
        case Call(func, args):
            return f"{func}({', '.join(format_expr(arg) for arg in args)})"
        case Reduce(index, body):
            return f"sum({index}, {format_expr(body)})"
    raise TypeError(f"not an index expression: {expr!r}")


def _wrap(expr: Expr, needed: int) -> str:
    text = format_expr(expr)
    return f"({text})" if _strength(expr) < needed else text


def _strength(expr: Expr) -> int:
    match expr:
        case Add() | Sub():
            return _SUM
        case Mul() | Div():
            return _PRODUCT
        case Neg():
            return _UNARY
        case Literal(value) if _is_negative(value):
            return _UNARY
        case _:
            return _ATOM


def _is_negative(value: float | int) -> bool:
    # repr(-0.0) starts with '-' too, and must be read back through unary minus.
    return repr(value).startswith("-")
