"""parse_statement, reduction placement, inference, printing and canonical text, by table."""
from __future__ import annotations

import pytest

from tensoralg.errors import ShapeError
from tensoralg.notation import (
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Literal,
    Mul,
    Neg,
    Reduce,
    Sub,
    canonical_text,
    format_expr,
    format_statement,
    free_indices,
    infer_dims,
    output_shape,
    parse_einsum,
    parse_statement,
    place_reductions,
    tensors,
)


def acc(tensor, *indices):
    return Access(tensor, tuple(indices))


B_ij, C_ij, d_j = acc("B", "i", "j"), acc("C", "i", "j"), acc("d", "j")


@pytest.mark.parametrize("text, lhs, rhs", [
    ("y(i) = A(i,j) * x(j)", acc("y", "i"), Reduce("j", Mul(acc("A", "i", "j"), acc("x", "j")))),
    ("y(i) = b(i) - A(i,j) * x(j)", acc("y", "i"),
     Sub(acc("b", "i"), Reduce("j", Mul(acc("A", "i", "j"), acc("x", "j"))))),
    ("a = B(i,j) * C(i,j)", acc("a"), Reduce("i", Reduce("j", Mul(B_ij, C_ij)))),
    ("A(i,j) = B(i,k) * C(k,j) + D(i,j)", acc("A", "i", "j"),
     Add(Reduce("k", Mul(acc("B", "i", "k"), acc("C", "k", "j"))), acc("D", "i", "j"))),
    ("a(i) = alpha * sum(j, (B(i,j) + C(i,j)) * d(j))", acc("a", "i"),
     Mul(acc("alpha"), Reduce("j", Mul(Add(B_ij, C_ij), d_j)))),
    # an index used in one access only is summed around that access
    ("y(i) = A(i,j) + b(i)", acc("y", "i"), Add(Reduce("j", acc("A", "i", "j")), acc("b", "i"))),
    ("y(i) = A(i,i)", acc("y", "i"), acc("A", "i", "i")),
    ("a = A(i,i)", acc("a"), Reduce("i", acc("A", "i", "i"))),
    # two indices, two different ancestors: each goes to its own
    ("y(i) = A(i,j) * x(j) + B(i,k) * z(k)", acc("y", "i"),
     Add(Reduce("j", Mul(acc("A", "i", "j"), acc("x", "j"))),
         Reduce("k", Mul(acc("B", "i", "k"), acc("z", "k"))))),
    # the same ancestor: first appearance outermost
    ("a = B(k,j) * C(j,k)", acc("a"), Reduce("k", Reduce("j", Mul(acc("B", "k", "j"), acc("C", "j", "k"))))),
    # nested: l's ancestor lies inside k's
    ("y(i) = A(i,k) * (B(k,l) * x(l))", acc("y", "i"),
     Reduce("k", Mul(acc("A", "i", "k"), Reduce("l", Mul(acc("B", "k", "l"), acc("x", "l")))))),
    # uses inside a function call
    ("y(i) = relu(A(i,j) * x(j))", acc("y", "i"), Call("relu", (Reduce("j", Mul(acc("A", "i", "j"), acc("x", "j"))),))),
    ("y(i) = relu(A(i,j)) * x(j)", acc("y", "i"),
     Reduce("j", Mul(Call("relu", (acc("A", "i", "j"),)), acc("x", "j")))),
    # explicit sums stay where they are written, even where TACO would place them lower
    ("y(i) = sum(j, A(i,j)) * x(i)", acc("y", "i"), Mul(Reduce("j", acc("A", "i", "j")), acc("x", "i"))),
    ("y(i) = sum(j, b(i) + A(i,j))", acc("y", "i"), Reduce("j", Add(acc("b", "i"), acc("A", "i", "j")))),
    ("y(i) = sum(j, A(i,j) * x(j)) + sum(j, B(i,j))", acc("y", "i"),
     Add(Reduce("j", Mul(acc("A", "i", "j"), acc("x", "j"))), Reduce("j", acc("B", "i", "j")))),
    # implicit and explicit together
    ("a = sum(i, B(i,j) * c(j))", acc("a"), Reduce("i", Reduce("j", Mul(acc("B", "i", "j"), acc("c", "j"))))),
])
def test_statements_and_reduction_placement(text, lhs, rhs):
    assert parse_statement(text) == Assignment(lhs, rhs)


x_i = acc("x", "i")


@pytest.mark.parametrize("text, rhs", [
    ("a + b * c", Add(acc("a"), Mul(acc("b"), acc("c")))),
    ("(a + b) * c", Mul(Add(acc("a"), acc("b")), acc("c"))),
    ("a - b - c", Sub(Sub(acc("a"), acc("b")), acc("c"))),
    ("a - (b - c)", Sub(acc("a"), Sub(acc("b"), acc("c")))),
    ("a / b / c", Div(Div(acc("a"), acc("b")), acc("c"))),
    ("a / b * c", Mul(Div(acc("a"), acc("b")), acc("c"))),
    ("-a * b", Mul(Neg(acc("a")), acc("b"))),
    ("-(a * b)", Neg(Mul(acc("a"), acc("b")))),
    ("a * -b", Mul(acc("a"), Neg(acc("b")))),
    ("--a", Neg(Neg(acc("a")))),
    ("2", Literal(2)),
    ("1.5 + 2e-3 + .5 + 3E2 + 007", Add(Add(Add(Add(Literal(1.5), Literal(0.002)), Literal(0.5)),
                                                Literal(300.0)), Literal(7))),
    ("-2", Literal(-2)),
    ("- 2.5", Literal(-2.5)),
    ("-(2)", Neg(Literal(2))),
    ("a - 2", Sub(acc("a"), Literal(2))),
    ("a - -2", Sub(acc("a"), Literal(-2))),
    ("-2 * a", Mul(Literal(-2), acc("a"))),
    ("relu(x(i))", Call("relu", (x_i,))),
    ("max(x(i), 0)", Call("max", (x_i, Literal(0)))),
    ("pow(x(i), 2)", Call("pow", (x_i, Literal(2)))),
    ("sigmoid(-x(i)) / (1 + exp(x(i)))", Div(Call("sigmoid", (Neg(x_i),)), Add(Literal(1), Call("exp", (x_i,))))),
    ("gt(x(i), alpha) * x(i)", Mul(Call("gt", (x_i, acc("alpha"))), x_i)),
])
def test_expressions(text, rhs):
    lhs = "y(i)" if "i" in free_indices(rhs) else "y"
    assert parse_statement(f"{lhs} = {text}").rhs == rhs


def test_literal_types():
    assert type(parse_statement("y = 3").rhs.value) is int
    assert type(parse_statement("y = 3.").rhs.value) is float
    assert type(parse_statement("y = 3e2").rhs.value) is float


def test_names_and_spacing():
    stmt = parse_statement("  out_1 ( i0 , J_2 )=A_b( i0,J_2 )")
    assert stmt == Assignment(acc("out_1", "i0", "J_2"), acc("A_b", "i0", "J_2"))
    # index names live apart from tensor and function names
    assert parse_statement("y(max) = x(max)").rhs == acc("x", "max")
    assert parse_statement("y(x) = x(x)").rhs == acc("x", "x")


@pytest.mark.parametrize("text, expected", [
    ("y(i) = A(i,j) * x(j)", "y(i) = sum(j, A(i,j) * x(j))"),
    ("a = B(i,j) * C(i,j)", "a = sum(i, sum(j, B(i,j) * C(i,j)))"),
    ("y = -(a + b) * -c - -2 / -(3)", "y = -(a + b) * -c - -2 / -(3)"),
    ("y = a - (b + c)", "y = a - (b + c)"),
    ("y = (a - b) + c", "y = a - b + c"),
    ("y = a + (b - c)", "y = a + (b - c)"),
    ("y = a * (b / c)", "y = a * (b / c)"),
    ("y = (a * b) / c", "y = a * b / c"),
    ("y = (a * b) + (c / d)", "y = a * b + c / d"),
    ("y = max(a, b + c)", "y = max(a, b + c)"),
    ("y = -(-a)", "y = -(-a)"),
    ("y = -(relu(a))", "y = -relu(a)"),
    ("y = ((a))", "y = a"),
    ("y = 1.0 * 2 + 1e20", "y = 1.0 * 2 + 1e+20"),
    ("y(i) = sum(j, A(i,j)) * -x(i)", "y(i) = sum(j, A(i,j)) * -x(i)"),
])
def test_printer(text, expected):
    stmt = parse_statement(text)
    printed = format_statement(stmt)
    assert printed == str(stmt) == expected
    assert parse_statement(printed) == stmt


def test_format_expr():
    assert format_expr(Neg(Literal(-2))) == "-(-2)"
    assert format_expr(Sub(Literal(1), Neg(Add(acc("a"), acc("b"))))) == "1 - -(a + b)"
    assert format_expr(Reduce("j", acc("A", "i", "j"))) == "sum(j, A(i,j))"


def test_free_indices_and_tensors():
    stmt = parse_statement("a(i) = alpha * sum(j, (B(i,j) + C(i,j)) * d(j)) + e(i,k) * f(k)")
    assert free_indices(stmt.rhs) == frozenset({"i"})
    assert free_indices(Mul(acc("A", "i", "j"), acc("x", "k"))) == frozenset("ijk")
    assert free_indices(Literal(1)) == frozenset()
    assert tensors(stmt) == {"alpha": 0, "B": 2, "C": 2, "d": 1, "e": 2, "f": 1}
    assert list(tensors(stmt)) == ["alpha", "B", "C", "d", "e", "f"]


def test_place_reductions_is_idempotent_and_pure():
    raw = Assignment(acc("y", "i"), Mul(acc("A", "i", "j"), acc("x", "j")))
    placed = place_reductions(raw)
    assert placed.rhs == Reduce("j", raw.rhs)
    assert place_reductions(placed) == placed
    assert raw.rhs == Mul(acc("A", "i", "j"), acc("x", "j"))


def test_einsum_and_statement_agree():
    assert parse_einsum("ij,j->i", [2, 1]) == parse_statement("out(i) = A(i,j) * B(j)")
    assert parse_einsum("ij,jk->ik", [2, 2]) == parse_statement("out(i,k) = A(i,j) * B(j,k)")


# ---- infer_dims / output_shape -------------------------------------------------------------

def test_infer_dims():
    stmt = parse_statement("A(i,j) = B(i,k) * C(k,j) + D(i,j)")
    dims = infer_dims(stmt, {"B": (2, 3), "C": (3, 4), "D": (2, 4)})
    assert dims == {"i": 2, "k": 3, "j": 4}
    assert output_shape(stmt, dims) == (2, 4)
    assert infer_dims(stmt, {"B": [2, 3], "C": [3, 4], "D": [2, 4], "A": [2, 4]}) == dims
    scalar = parse_statement("a = alpha * B(i,j) * C(i,j)")
    dims = infer_dims(scalar, {"alpha": (), "B": (2, 3), "C": (2, 3)})
    assert output_shape(scalar, dims) == ()
    diag = parse_statement("y(i) = A(i,i)")
    assert infer_dims(diag, {"A": (3, 3)}) == {"i": 3}


def test_infer_dims_accepts_numpy_integers():
    import numpy as np
    stmt = parse_statement("y(i) = A(i,j) * x(j)")
    dims = infer_dims(stmt, {"A": np.zeros((3, 4)).shape, "x": (np.int64(4),)})
    assert dims == {"i": 3, "j": 4} and all(type(v) is int for v in dims.values())


@pytest.mark.parametrize("text, shapes, message", [
    ("y(i) = A(i,j) * x(j)", {"A": (3, 4), "x": (5,)},
     "index j: A has 4 along mode 1 but x has 5 along mode 0"),
    ("y(i) = B(i,j,k) * x(k)", {"B": (3, 4), "x": (5,)},
     "operand B has shape (3, 4) (rank 2) but is used as B(i,j,k)"),
    ("y(i) = A(i,j) * x(j)", {"A": (3, 4)}, "tensor x in 'y(i) = sum(j, A(i,j) * x(j))' has no shape"),
    ("y(i) = A(i,i)", {"A": (3, 4)}, "index i: A has 3 along mode 0 but A has 4 along mode 1"),
    ("y(i) = A(i,j) * x(j)", {"A": (3, 4), "x": (4,), "y": (2,)},
     "index i: A has 3 along mode 0 but y has 2 along mode 0"),
    ("y(i) = A(i,j) * x(j)", {"A": (3, 4), "x": (4,), "y": (3, 1)},
     "output y has shape (3, 1) (rank 2) but is used as y(i)"),
    ("y(i) = A(i,j) * x(j)", {"A": (3, -4), "x": (4,)}, "invalid size -4"),
])
def test_infer_dims_errors(text, shapes, message):
    with pytest.raises(ShapeError) as info:
        infer_dims(parse_statement(text), shapes)
    assert message in str(info.value)


def test_output_shape_without_size():
    with pytest.raises(ShapeError, match="no size for index i"):
        output_shape(parse_statement("y(i) = x(i)"), {})
    handmade = Assignment(acc("y", "i", "k"), acc("x", "i"))
    with pytest.raises(ShapeError, match="index k of the output"):
        infer_dims(handmade, {"x": (3,)})
    assert infer_dims(handmade, {"x": (3,), "y": (3, 2)}) == {"i": 3, "k": 2}


# ---- canonical_text ------------------------------------------------------------------------

def test_canonical_text_ignores_index_names():
    assert canonical_text(parse_einsum("ij,j->i", [2, 1])) == canonical_text(parse_einsum("ab,b->a", [2, 1]))
    assert canonical_text(parse_einsum("ij,j->i", [2, 1])) == "out(i0) = sum(i1, A(i0,i1) * B(i1))"
    assert (canonical_text(parse_statement("y(k) = sum(q, A(k,q) * x(q))"))
            == canonical_text(parse_statement("y(i) = A(i,j) * x(j)")))


def test_canonical_text_keeps_differences():
    texts = {canonical_text(parse_einsum(s, r)) for s, r in [
        ("ij,j->i", [2, 1]), ("ji,j->i", [2, 1]), ("ij,i->j", [2, 1]), ("ij,jk->ik", [2, 2]),
        ("ij,jk->ki", [2, 2]), ("ii->i", [2]), ("ij->i", [2])]}
    assert len(texts) == 6  # "ji,j->i" is "ij,i->j" with i and j swapped
    assert canonical_text(parse_einsum("ji,j->i", [2, 1])) == canonical_text(parse_einsum("ij,i->j", [2, 1]))
    # tensor names are kept
    assert canonical_text(parse_statement("y(i) = x(i)")) != canonical_text(parse_statement("y(i) = z(i)"))
    # swapping index roles is not a renaming
    assert canonical_text(parse_einsum("ij,jk->ik", [2, 2])) != canonical_text(parse_einsum("jk,ij->ik", [2, 2]))


def test_canonical_text_names_sums_before_their_bodies():
    stmt = parse_statement("a = sum(q, sum(p, B(p,q)))")
    assert canonical_text(stmt) == "a = sum(i0, sum(i1, B(i1,i0)))"
