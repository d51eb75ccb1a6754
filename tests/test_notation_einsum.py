"""parse_einsum: table tests of every form, and NumPy as the oracle for meaning and output order."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tensoralg.notation import (
    Access,
    Assignment,
    Mul,
    Reduce,
    accesses,
    infer_dims,
    operand_name,
    output_shape,
    parse_einsum,
    parse_statement,
    place_reductions,
    tensors,
)
from tensoralg.notation.ast import FUNCTIONS, Add, Call, Div, Literal, Neg, Sub


def acc(tensor, indices=""):
    """Shorthand: acc("A", "ij") == Access("A", ("i", "j"))."""
    return Access(tensor, tuple(indices))


@pytest.mark.parametrize("subscripts, ranks, expected", [
    ("ij,jk->ik", [2, 2], Assignment(acc("out", "ik"), Reduce("j", Mul(acc("A", "ij"), acc("B", "jk"))))),
    ("ij,jk", [2, 2], Assignment(acc("out", "ik"), Reduce("j", Mul(acc("A", "ij"), acc("B", "jk"))))),
    ("ij,j->i", [2, 1], Assignment(acc("out", "i"), Reduce("j", Mul(acc("A", "ij"), acc("B", "j"))))),
    (" i j , j -> i ", [2, 1], Assignment(acc("out", "i"), Reduce("j", Mul(acc("A", "ij"), acc("B", "j"))))),
    ("ij->ji", [2], Assignment(acc("out", "ji"), acc("A", "ij"))),
    ("ij", [2], Assignment(acc("out", "ij"), acc("A", "ij"))),
    ("ji", [2], Assignment(acc("out", "ij"), acc("A", "ji"))),
    ("ii->i", [2], Assignment(acc("out", "i"), acc("A", "ii"))),
    ("ii", [2], Assignment(acc("out"), Reduce("i", acc("A", "ii")))),
    ("iij->j", [3], Assignment(acc("out", "j"), Reduce("i", acc("A", "iij")))),
    ("i,i->", [1, 1], Assignment(acc("out"), Reduce("i", Mul(acc("A", "i"), acc("B", "i"))))),
    ("i,i", [1, 1], Assignment(acc("out"), Reduce("i", Mul(acc("A", "i"), acc("B", "i"))))),
    (",i->i", [0, 1], Assignment(acc("out", "i"), Mul(acc("A"), acc("B", "i")))),
    ("->", [0], Assignment(acc("out"), acc("A"))),
    ("i,j->ij", [1, 1], Assignment(acc("out", "ij"), Mul(acc("A", "i"), acc("B", "j")))),
    ("ij,jk,kl->il", [2, 2, 2], Assignment(acc("out", "il"), Reduce("j", Reduce("k", Mul(
        Mul(acc("A", "ij"), acc("B", "jk")), acc("C", "kl")))))),
    ("kj,ji->", [2, 2], Assignment(acc("out"), Reduce("k", Reduce("j", Reduce("i", Mul(
        acc("A", "kj"), acc("B", "ji"))))))),
    ("Ba,aA", [2, 2], Assignment(acc("out", "AB"), Reduce("a", Mul(acc("A", "Ba"), acc("B", "aA"))))),
])
def test_einsum_forms(subscripts, ranks, expected):
    assert parse_einsum(subscripts, ranks) == expected


def e(*names):
    return tuple(names)


@pytest.mark.parametrize("subscripts, ranks, lhs, operands", [
    ("...ij,...jk->...ik", [3, 4], e("_e0", "_e1", "i", "k"),
     [e("_e1", "i", "j"), e("_e0", "_e1", "j", "k")]),
    ("...ij,...jk", [3, 4], e("_e0", "_e1", "i", "k"),
     [e("_e1", "i", "j"), e("_e0", "_e1", "j", "k")]),
    ("i...->...i", [3], e("_e0", "_e1", "i"), [e("i", "_e0", "_e1")]),
    ("i...,i", [3, 1], e("_e0", "_e1"), [e("i", "_e0", "_e1"), e("i")]),
    ("...->...", [0], e(), [e()]),
    ("ij...->i", [2], e("i"), [e("i", "j")]),  # an ellipsis of width 0 is allowed anywhere
    ("a...b->b...a", [4], e("b", "_e0", "_e1", "a"), [e("a", "_e0", "_e1", "b")]),
])
def test_einsum_ellipsis(subscripts, ranks, lhs, operands):
    stmt = parse_einsum(subscripts, ranks)
    assert stmt.lhs == Access("out", lhs)
    assert [a.indices for a in accesses(stmt.rhs)] == operands


def test_operand_names():
    assert [operand_name(k) for k in (0, 1, 2, 25, 26, 27, 40)] == ["A", "B", "C", "Z", "T26", "T27", "T40"]
    stmt = parse_einsum(",".join("i" * 28) + "->i", [1] * 28)
    assert list(tensors(stmt))[-3:] == ["Z", "T26", "T27"]


def test_reductions_in_order_of_first_appearance():
    stmt = parse_einsum("kij,jl,lm->im", [3, 2, 2])
    indices = []
    node = stmt.rhs
    while isinstance(node, Reduce):
        indices.append(node.index)
        node = node.body
    assert indices == ["k", "j", "l"]


@pytest.mark.parametrize("subscripts, ranks", [
    ("ij,jk->ik", [2, 2]), ("ii", [2]), ("i,i->", [1, 1]), ("ij,jk,kl", [2, 2, 2]),
    ("...ij,...jk", [3, 4]), ("ij->ji", [2]), (",i->i", [0, 1]),
])
def test_place_reductions_keeps_einsum_results(subscripts, ranks):
    stmt = parse_einsum(subscripts, ranks)
    assert place_reductions(stmt) == stmt
    assert parse_statement(str(stmt)) == stmt


# Subscripts whose implicit output (or shapes) are easy to get wrong; sizes are distinct primes
# per letter, so that an output in the wrong order shows up as a different shape.
TRICKY = [
    "ba", "ij,jk", "ba,ac", "Ba,aA", "aB,Ab", "zyx", "ii", "iij", "iji", "i,i", "i,j", "ij,ij",
    "abc,cd,de", "dcba", "ZzAa", "...ij,...jk", "i...,i", "...a,b...", "a...,...a", "ij,,jk",
    "ij,jk->ki", "ii->i", "i,i->", "...ij->...ji", "ij...,jk...->...ik",
]
_PRIMES = [2, 3, 5, 7, 11, 13]


def _operands_for(subscripts, rng):
    inputs = subscripts.split("->")[0].split(",")
    letters = sorted({c for term in inputs for c in term if c.isalpha()})
    size = {c: _PRIMES[n % len(_PRIMES)] for n, c in enumerate(letters)}
    broadcast = (4, 3)  # ellipsis dims: left-padded, so shorter ellipses align from the right
    arrays = []
    for n, term in enumerate(inputs):
        shape = []
        for part in term.split("..."):
            shape.append([size[c] for c in part])
        width = 2 if n % 2 == 0 else 1
        dims = shape[0] + (list(broadcast[-width:]) if len(shape) > 1 else []) + (shape[1] if len(shape) > 1 else [])
        arrays.append(rng.standard_normal(dims) if dims else np.float64(rng.standard_normal()))
    return arrays


@pytest.mark.parametrize("subscripts", TRICKY)
def test_output_shape_matches_numpy(subscripts):
    rng = np.random.default_rng(0)
    arrays = _operands_for(subscripts, rng)
    stmt = parse_einsum(subscripts, [np.ndim(a) for a in arrays])
    shapes = {operand_name(k): np.shape(a) for k, a in enumerate(arrays)}
    dims = infer_dims(stmt, shapes)
    assert output_shape(stmt, dims) == np.einsum(subscripts, *arrays).shape


@pytest.mark.parametrize("subscripts", TRICKY)
def test_meaning_matches_numpy(subscripts):
    rng = np.random.default_rng(1)
    arrays = _operands_for(subscripts, rng)
    stmt = parse_einsum(subscripts, [np.ndim(a) for a in arrays])
    named = {operand_name(k): np.asarray(a) for k, a in enumerate(arrays)}
    got = evaluate(stmt, named)
    np.testing.assert_allclose(got, np.einsum(subscripts, *arrays), rtol=1e-10, atol=1e-10)


def evaluate(stmt, arrays):
    """A slow, obviously correct reference: loop over the output, recurse into the expression."""
    dims = infer_dims(stmt, {name: a.shape for name, a in arrays.items()})
    shape = output_shape(stmt, dims)
    out = np.zeros(shape)
    for point in itertools.product(*(range(n) for n in shape)):
        out[point] = _value(stmt.rhs, dict(zip(stmt.lhs.indices, point)), arrays, dims)
    return out


def _value(expr, env, arrays, dims):
    def go(x):
        return _value(x, env, arrays, dims)
    match expr:
        case Access(tensor, indices):
            return arrays[tensor][tuple(env[i] for i in indices)]
        case Literal(value):
            return value
        case Neg(x):
            return -go(x)
        case Add(a, b):
            return go(a) + go(b)
        case Sub(a, b):
            return go(a) - go(b)
        case Mul(a, b):
            return go(a) * go(b)
        case Div(a, b):
            return go(a) / go(b)
        case Call(func, args):
            return FUNCTIONS[func][1](*(go(a) for a in args))
        case Reduce(index, body):
            return math.fsum(_value(body, {**env, index: n}, arrays, dims) for n in range(dims[index]))
    raise TypeError(expr)


def test_reference_evaluator_handles_statements():
    stmt = parse_statement("y(i) = b(i) - A(i,j) * x(j)")
    rng = np.random.default_rng(2)
    A, x, b = rng.standard_normal((3, 4)), rng.standard_normal(4), rng.standard_normal(3)
    np.testing.assert_allclose(evaluate(stmt, {"A": A, "x": x, "b": b}), b - A @ x)
