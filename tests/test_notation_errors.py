"""One test per user mistake: each malformed text raises NotationError with a caret at the fault."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensoralg.errors import NotationError, ShapeError, TensorAlgebraError
from tensoralg.notation import parse_einsum, parse_statement

# (subscripts, ranks, caret column, fragment of the message)
EINSUM_ERRORS = [
    ("ij,j->i!", [2, 1], 7, "unexpected character '!'"),
    ("ij->i->j", [2], 5, "more than one '->'"),
    ("ij-i", [2], 2, "'-' must be followed by '>'"),
    ("i j,j - > i", [2, 1], 6, "'-' must be followed by '>'"),
    ("ij>i", [2], 2, "'>' must follow '-'"),
    ("i..j", [3], 1, "exactly three dots"),
    ("....i", [3], 0, "exactly three dots"),
    ("i...j...->ij", [4], 5, "more than one ellipsis"),
    ("ij->...", [2], 4, "'...' in the output but in no input"),
    ("ij->k", [2], 4, "output index k appears in no input"),
    ("ij->ii", [2], 5, "output index i repeated"),
    ("ij->i,", [2], 5, "',' in the output"),
    ("ij,jk,k->i", [2, 2], 5, "3 terms in the subscripts but 2 operands"),
    ("ij->i", [2, 1], 2, "1 terms in the subscripts but 2 operands"),
    ("ij", [2, 1], 2, "1 terms in the subscripts but 2 operands"),
    ("", [2], 0, "empty subscripts"),
    ("   ", [2], 0, "empty subscripts"),
    ("ij,1j", [2, 2], 3, "unexpected character '1'"),
    ("ij,j€", [2, 2], 4, "unexpected character"),   # letters beyond ASCII are indices
    ("...i->i", [3], 4, "the output must place '...'"),
]

# (statement, caret column, fragment of the message)
STATEMENT_ERRORS = [
    ("", 0, "empty statement"),
    ("y(i) = A(i,j) * x(j))", 20, "unmatched ')'"),
    ("y(i) = (A(i,j) * x(j)", 7, "unmatched '('"),
    ("y(i) = x(i", 8, "unmatched '('"),
    ("y(i) = A(i,j * x(j)", 13, "expected ')'"),
    ("y(i) = ", 7, "empty right side"),
    ("y(i) A(i)", 5, "expected '='"),
    ("y(i)", 4, "expected '='"),
    ("y(i) = relu * x(i)", 7, "function 'relu' used as a tensor"),
    ("y(i) = A(i,j) * A(j)", 16, "tensor A is used with 1 indices here but with 2"),
    ("y(i) = y(i) + x(i)", 7, "the output y also appears on the right side"),
    ("A(i,i) = B(i,i)", 4, "index i repeated on the left side"),
    ("y(i,k) = A(i,j) * x(j)", 4, "index k of the left side is not used"),
    ("y(i) = sum(i, A(i,j))", 11, "an index of the left side"),
    ("y(i) = sum(k, A(i,j))", 11, "which its body does not use"),
    ("a = sum(i, sum(i, B(i,i)))", 15, "already summed by an enclosing sum"),
    ("y(i) = sum(j, A(i,j)) * x(j)", 26, "also used outside it"),
    ("y(i) = max(x(i))", 7, "max takes 2 arguments, got 1"),
    ("y(i) = relu(x(i), 2)", 7, "relu takes 1 argument, got 2"),
    ("y(i) = foo(x(i))", 7, "unknown function 'foo'"),
    ("y(i) = A(1)", 7, "unknown function 'A'"),
    ("y(i) = x(i) x(i)", 12, "unexpected 'x' after the expression"),
    ("y(i) = 2x(i)", 8, "unexpected 'x' after the expression"),
    ("y(i) = x(i) + 1.2.3", 17, "unexpected '.3' after the expression"),
    ("y(i) = x(i) $ 2", 12, "unexpected character '$'"),
    ("y(i) = x(i) + ", 14, "expression ends early"),
    ("y(i) = pow(x(i), )", 17, "expected an argument"),
    ("relu(i) = x(i)", 0, "cannot name the output"),
    ("y(,i) = x(i)", 2, "expected an index name"),
    ("y(i) = x()", 9, "expected an index name"),
    ("y(i) = ()", 8, "empty parentheses"),
    ("y(i) = x(i) * / 2", 14, "expected an expression"),
    ("y(i) == x(i)", 6, "expected an expression"),
    ("y(i) = sum(A(i), x(i))", 11, "sum takes an index name and an expression"),
    ("3 = x", 0, "expected the output tensor's name"),
    ("y(i) = x(i) + .", 14, "unexpected character '.'"),
]


@pytest.mark.parametrize("subscripts, ranks, position, fragment", EINSUM_ERRORS)
def test_malformed_einsum(subscripts, ranks, position, fragment):
    with pytest.raises(NotationError) as info:
        parse_einsum(subscripts, ranks)
    err = info.value
    assert fragment in err.message
    assert err.text == subscripts
    assert err.position == position


@pytest.mark.parametrize("text, position, fragment", STATEMENT_ERRORS)
def test_malformed_statement(text, position, fragment):
    with pytest.raises(NotationError) as info:
        parse_statement(text)
    err = info.value
    assert fragment in err.message
    assert err.text == text
    assert err.position == position


def test_caret_is_drawn_under_the_fault():
    with pytest.raises(NotationError) as info:
        parse_statement("y(i) = A(i,j) * x(j))")
    assert str(info.value).splitlines() == [
        "unmatched ')'",
        "  y(i) = A(i,j) * x(j))",
        "                      ^",
    ]
    with pytest.raises(NotationError) as info:
        parse_einsum("ij,jk->il", [2, 2])
    assert str(info.value).splitlines()[2] == "  " + " " * 8 + "^"


def test_errors_are_library_errors_and_value_errors():
    with pytest.raises(TensorAlgebraError):
        parse_statement("y(i) = ")
    with pytest.raises(ValueError):
        parse_einsum("ij->k", [2])


@pytest.mark.parametrize("subscripts, ranks, message", [
    ("ij,ijk->i", [2, 2], "operand 1 (B) has rank 2 but term 'ijk' has 3 indices"),
    ("ij,j->i", [2, 2], "operand 1 (B) has rank 2 but term 'j' has 1 indices"),
    ("ij,j->i", [3, 1], "operand 0 (A) has rank 3 but term 'ij' has 2 indices"),
    ("...ij->ij", [1], "operand 0 (A) has rank 1 but term '...ij' has at least 2 indices"),
    (",i->i", [1, 1], "operand 0 (A) has rank 1 but term '' has 0 indices"),
])
def test_einsum_rank_mismatch_is_a_shape_error(subscripts, ranks, message):
    with pytest.raises(ShapeError) as info:
        parse_einsum(subscripts, ranks)
    assert message in str(info.value)


def test_there_are_enough_distinct_mistakes():
    texts = {s for s, *_ in EINSUM_ERRORS} | {s for s, *_ in STATEMENT_ERRORS}
    assert len(texts) >= 25


def test_deep_nesting_is_a_notation_error():
    with pytest.raises(NotationError, match="nested too deeply"):
        parse_statement("y = " + "(" * 5000 + "a" + ")" * 5000)
    assert parse_statement("y = " + "(" * 50 + "a" + ")" * 50).rhs.tensor == "a"


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(alphabet="ijAyx()=,+-*/ .1e5sumrelpow_", max_size=30))
def test_any_statement_text_parses_or_raises_notation_error(text):
    try:
        stmt = parse_statement(text)
    except NotationError as err:
        assert err.position is not None and 0 <= err.position <= len(text)
    else:
        assert parse_statement(str(stmt)) == stmt


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.text(alphabet="ijkA.,->! ", max_size=16), st.lists(st.integers(0, 4), max_size=4))
def test_any_subscripts_parse_or_raise_library_errors(subscripts, ranks):
    try:
        stmt = parse_einsum(subscripts, ranks)
    except NotationError as err:
        assert err.position is not None and 0 <= err.position <= len(subscripts)
    except ShapeError:
        pass
    else:
        assert parse_statement(str(stmt)) == stmt
