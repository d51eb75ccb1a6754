"""Parser of TACO-style statements: ``A(i,j) = B(i,k) * C(k,j) + D(i,j)``.

Grammar (``*`` and ``/`` bind tighter than ``+`` and ``-``; all four are left associative)::

    statement := lhs "=" expr
    lhs       := name [ "(" name ("," name)* ")" ]
    expr      := term (("+" | "-") term)*
    term      := unary (("*" | "/") unary)*
    unary     := "-" number | "-" unary | primary
    primary   := number | "(" expr ")" | "sum" "(" name "," expr ")"
               | function "(" expr ("," expr)* ")" | name "(" name ("," name)* ")" | name

A minus sign directly before a number gives a negative ``Literal``; before anything else
(``-(2)`` included) it gives ``Neg``. Every index that the left side does not name and no
``sum`` binds is then summed by :func:`place_reductions`. Each error is a ``NotationError``
whose caret points at the offending character.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.errors import NotationError
from tensoralg.notation.ast import (
    FUNCTIONS,
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
    free_indices,
)
from tensoralg.notation.lexer import Token, number_value, tokenize
from tensoralg.notation.reductions import place_reductions

_RESERVED = frozenset(FUNCTIONS) | {"sum"}
_BINARY = {"+": Add, "-": Sub, "*": Mul, "/": Div}


def parse_statement(text: str) -> Assignment:
    """Parse a TACO-style statement and place its implicit reductions.

    >>> str(parse_statement("y(i) = A(i,j) * x(j)"))
    'y(i) = sum(j, A(i,j) * x(j))'
    """
    parser = _Parser(text, tokenize(text))
    try:
        stmt = parser.statement()
    except RecursionError:
        raise NotationError("expression nested too deeply", text, parser.token.position) from None
    _check(text, stmt, parser)
    return place_reductions(stmt)


@dataclass(frozen=True, slots=True)
class _Use:
    """Where an access and its indices stand in the text, and which sums enclose it."""

    access: Access
    position: int
    index_positions: tuple[int, ...]
    bound: frozenset[str]


class _Parser:
    """Recursive descent over the tokens; records positions for the checks that follow."""

    def __init__(self, text: str, tokens: list[Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.at = 0
        self.lhs_use: _Use | None = None
        self.uses: list[_Use] = []
        self.sum_positions: dict[str, int] = {}
        self.bound: list[str] = []

    # -- helpers -----------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.token
        self.at += 1
        return token

    def fail(self, message: str, position: int) -> NotationError:
        return NotationError(message, self.text, position)

    def expect(self, kind: str, what: str) -> Token:
        if self.token.kind != kind:
            raise self.fail(f"expected {what}, found {_describe(self.token)}", self.token.position)
        return self.advance()

    def close(self, opening: Token) -> None:
        """Consume the ')' matching ``opening``."""
        if self.token.kind == "end":
            raise self.fail("unmatched '('", opening.position)
        self.expect(")", "')'")

    # -- statement ---------------------------------------------------------------------------

    def statement(self) -> Assignment:
        if self.token.kind == "end":
            raise self.fail("empty statement", 0)
        lhs = self.lhs()
        if self.token.kind != "=":
            raise self.fail(f"expected '=' after the left side, found {_describe(self.token)}",
                            self.token.position)
        self.advance()
        if self.token.kind == "end":
            raise self.fail("empty right side", self.token.position)
        rhs = self.expr()
        if self.token.kind == ")":
            raise self.fail("unmatched ')'", self.token.position)
        if self.token.kind != "end":
            raise self.fail(f"unexpected {_describe(self.token)} after the expression",
                            self.token.position)
        return Assignment(lhs, rhs)

    def lhs(self) -> Access:
        name = self.expect("name", "the output tensor's name")
        if name.text in _RESERVED:
            raise self.fail(f"{name.text!r} is a function and cannot name the output", name.position)
        indices: list[Token] = []
        if self.token.kind == "(":
            indices = self.index_list(self.advance())
        seen: dict[str, int] = {}
        for index in indices:
            if index.text in seen:
                raise self.fail(f"index {index.text} repeated on the left side", index.position)
            seen[index.text] = index.position
        access = Access(name.text, tuple(t.text for t in indices))
        self.lhs_use = _Use(access, name.position, tuple(t.position for t in indices), frozenset())
        return access

    def index_list(self, opening: Token) -> list[Token]:
        """``i, j, ...)`` after ``opening``: at least one index name."""
        if self.token.kind == "end":
            raise self.fail("unmatched '('", opening.position)
        indices = [self.expect("name", "an index name")]
        while self.token.kind == ",":
            self.advance()
            indices.append(self.expect("name", "an index name"))
        self.close(opening)
        return indices

    # -- expressions -------------------------------------------------------------------------

    def expr(self) -> Expr:
        node = self.term()
        while self.token.kind in ("+", "-"):
            node = _BINARY[self.advance().kind](node, self.term())
        return node

    def term(self) -> Expr:
        node = self.unary()
        while self.token.kind in ("*", "/"):
            node = _BINARY[self.advance().kind](node, self.unary())
        return node

    def unary(self) -> Expr:
        if self.token.kind != "-":
            return self.primary()
        self.advance()
        if self.token.kind == "number":
            return Literal(-number_value(self.advance().text))
        return Neg(self.unary())

    def primary(self) -> Expr:
        token = self.token
        match token.kind:
            case "number":
                self.advance()
                return Literal(number_value(token.text))
            case "(":
                self.advance()
                if self.token.kind == ")":
                    raise self.fail("empty parentheses", self.token.position)
                inner = self.expr()
                self.close(token)
                return inner
            case "name":
                return self.named()
        if token.kind == "end":
            raise self.fail("expression ends early", token.position)
        raise self.fail(f"expected an expression, found {_describe(token)}", token.position)

    def named(self) -> Expr:
        name = self.advance()
        if self.token.kind != "(":
            if name.text in _RESERVED:
                raise self.fail(f"function {name.text!r} used as a tensor", name.position)
            return self.access(name, [])
        opening = self.advance()
        if name.text == "sum":
            return self.explicit_sum(name, opening)
        if name.text in FUNCTIONS:
            return self.call(name, opening)
        if not self.is_index_argument():
            raise self.fail(
                f"unknown function {name.text!r}: a tensor access takes index names only, "
                f"and the functions are {', '.join(sorted(FUNCTIONS))}, sum", name.position)
        return self.access(name, self.index_list(opening))

    def is_index_argument(self) -> bool:
        """Whether the next argument is a plain index name (so ``name(...)`` is an access)."""
        if self.token.kind in (")", "end"):
            return True  # index_list reports the missing index or parenthesis
        return self.token.kind == "name" and self.peek().kind not in ("(", "+", "-", "*", "/")

    def access(self, name: Token, indices: list[Token]) -> Access:
        access = Access(name.text, tuple(t.text for t in indices))
        use = _Use(access, name.position, tuple(t.position for t in indices), frozenset(self.bound))
        self.uses.append(use)
        return access

    def call(self, name: Token, opening: Token) -> Call:
        args = [self.argument()]
        while self.token.kind == ",":
            self.advance()
            args.append(self.argument())
        self.close(opening)
        arity = FUNCTIONS[name.text][0]
        if len(args) != arity:
            plural = "argument" if arity == 1 else "arguments"
            raise self.fail(f"{name.text} takes {arity} {plural}, got {len(args)}", name.position)
        return Call(name.text, tuple(args))

    def argument(self) -> Expr:
        if self.token.kind == ")":
            raise self.fail("expected an argument", self.token.position)
        return self.expr()

    def explicit_sum(self, name: Token, opening: Token) -> Reduce:
        if self.token.kind != "name" or self.peek().kind != ",":
            raise self.fail("sum takes an index name and an expression: sum(j, ...)",
                            self.token.position)
        index = self.advance()
        self.advance()  # the comma
        assert self.lhs_use is not None
        if index.text in self.lhs_use.access.indices:
            raise self.fail(f"sum over {index.text}, an index of the left side", index.position)
        if index.text in self.bound:
            raise self.fail(f"index {index.text} is already summed by an enclosing sum",
                            index.position)
        self.bound.append(index.text)
        body = self.argument()
        self.bound.pop()
        self.close(opening)
        if index.text not in free_indices(body):
            raise self.fail(f"sum over {index.text}, which its body does not use", index.position)
        self.sum_positions.setdefault(index.text, index.position)
        return Reduce(index.text, body)


def _check(text: str, stmt: Assignment, parser: _Parser) -> None:
    """The checks that need the whole statement: names, ranks and index use."""
    lhs = parser.lhs_use
    assert lhs is not None
    for use in parser.uses:
        if use.access.tensor == lhs.access.tensor:
            raise NotationError(f"the output {lhs.access.tensor} also appears on the right side",
                                text, use.position)
    ranks: dict[str, tuple[int, int]] = {}
    for use in parser.uses:
        rank = len(use.access.indices)
        first = ranks.setdefault(use.access.tensor, (rank, use.position))
        if first[0] != rank:
            raise NotationError(
                f"tensor {use.access.tensor} is used with {rank} indices here but with "
                f"{first[0]} at column {first[1]}", text, use.position)
    free: dict[str, int] = {}
    for use in parser.uses:
        for index, position in zip(use.access.indices, use.index_positions):
            if index not in use.bound:
                free.setdefault(index, position)
                if index in parser.sum_positions:
                    raise NotationError(
                        f"index {index} is summed by sum({index}, ...) and also used outside it; "
                        "rename one of them", text, position)
    for index, position in zip(lhs.access.indices, lhs.index_positions):
        if index not in free:
            raise NotationError(f"index {index} of the left side is not used on the right side",
                                text, position)


def _describe(token: Token) -> str:
    match token.kind:
        case "end":
            return "the end of the text"
        case "name" | "number":
            return f"{token.text!r}"
    return f"'{token.text}'"
