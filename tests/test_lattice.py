"""Merge lattices as tables: statement in, lattice of one index out (TACO's lattice tests)."""
import pytest

from tensoralg.lower.lattice import Literal, build_lattice, lattice_for, without
from tensoralg.notation import Access, Add, Div, Mul, parse_statement


@pytest.mark.parametrize("statement, formats, index, expected", [
    ("a(i) = b(i) * c(i)", {"b": "s", "c": "s"}, "i", "[b,c]"),               # intersection
    ("a(i) = b(i) + c(i)", {"b": "s", "c": "s"}, "i", "[b,c] [b] [c]"),       # union
    ("a(i) = b(i) - c(i)", {"b": "s", "c": "s"}, "i", "[b,c] [b] [c]"),       # union
    ("a(i) = b(i) * c(i)", {"b": "d", "c": "s"}, "i", "[c]"),                 # dense is located
    ("a(i) = b(i) + c(i)", {"b": "d", "c": "s"}, "i", "[c] dense"),           # dense covers all
    ("a(i) = b(i) * c(i) + d(i)", {"b": "s", "c": "s", "d": "s"}, "i",
     "[b,c,d] [b,c] [b,d] [c,d] [d]"),
    ("a(i) = exp(b(i))", {"b": "s"}, "i", "[b] dense"),                      # exp(0) = 1
    ("a(i) = relu(b(i))", {"b": "s"}, "i", "[b]"),                           # relu(0) = 0
    ("a(i) = b(i) / c(i)", {"b": "s", "c": "s"}, "i", "[b,c] [b] [c] dense"),  # 0/0 is NaN
    ("a(i) = b(i) / 2", {"b": "s"}, "i", "[b]"),
    ("a(i) = max(b(i), c(i))", {"b": "s", "c": "s"}, "i", "[b,c] [b] [c]"),
    ("a(i) = ge(b(i), c(i))", {"b": "s", "c": "s"}, "i", "[b,c] [b] [c] dense"),
    ("y(i) = A(i,j) * x(j)", {"A": "ds", "x": "d"}, "i", "dense"),
    ("y(i) = A(i,j) * x(j)", {"A": "ds", "x": "d"}, "j", "[A]"),
    ("y(i) = A(i,j) * x(j)", {"A": "ss", "x": "s"}, "j", "[A,x]"),
])
def test_lattice_for_index(statement, formats, index, expected):
    assert str(lattice_for(statement, formats, index)) == expected


def test_points_carry_the_specialised_expression():
    b, c = Access("b", ("i",)), Access("c", ("i",))
    lattice = build_lattice("i", Add(Mul(b, c), c), [b, c])
    by_set = {frozenset(p.iterators): p.expr for p in lattice.points}
    assert by_set[frozenset({b, c})] == Add(Mul(b, c), c)
    assert by_set[frozenset({c})] == c
    assert frozenset({b}) not in by_set


def test_without_keeps_signs_and_division_by_tensors():
    stmt = parse_statement("a(i) = b(i) - c(i)")
    b, c = Access("b", ("i",)), Access("c", ("i",))
    assert str(without(stmt.rhs, {b})) == "-c(i)"
    assert without(Div(b, c), {b}) == Div(Literal(0), c)      # 0 / c is NaN where c is 0
    assert without(Div(b, Literal(2)), {b}) == Literal(0)
