"""Hypothesis: random TACO-style statements (unions, differences, functions, divisions, sums)
under random operand and output formats, against NumPy on dense arrays.

The einsum property test covers products; this one covers what lattices make hard: unions of
differently-patterned operands, functions that do or do not keep zeros, sparse outputs of them.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensoralg as ta

LEAVES = {"A(i,j)": "A", "B(i,j)": "B", "c(i)": "c[:, None]", "d(j)": "d[None, :]"}
UNARY = {"relu": "np.maximum({0}, 0)", "abs": "np.abs({0})", "tanh": "np.tanh({0})",
         "exp": "np.exp({0})", "neg": "-({0})"}
BINARY = {"+": "({0} + {1})", "-": "({0} - {1})", "*": "({0} * {1})",
          "max": "np.maximum({0}, {1})", "min": "np.minimum({0}, {1})",
          "gt": "np.asarray(({0}) > ({1})).astype(float)", "div": "({0} / (np.abs({1}) + 1))"}


def _render(tree) -> tuple[str, str]:
    """(TACO text, NumPy text) of an expression tree."""
    match tree:
        case ("leaf", name):
            return name, LEAVES[name]
        case ("lit", value):
            return repr(value), repr(value)
        case ("unary", op, x):
            t, n = _render(x)
            return (f"-({t})" if op == "neg" else f"{op}({t})"), UNARY[op].format(n)
        case ("binary", op, x, y):
            (tx, nx), (ty, ny) = _render(x), _render(y)
            if op in "+-*":
                return f"({tx} {op} {ty})", BINARY[op].format(nx, ny)
            if op == "div":
                return f"({tx} / (abs({ty}) + 1))", BINARY[op].format(nx, ny)
            return f"{op}({tx}, {ty})", BINARY[op].format(nx, ny)
    raise AssertionError(tree)


trees = st.recursive(
    st.one_of(st.sampled_from(list(LEAVES)).map(lambda n: ("leaf", n)),
              st.sampled_from([0.5, 2]).map(lambda v: ("lit", v))),
    lambda sub: st.one_of(
        st.tuples(st.just("unary"), st.sampled_from(list(UNARY)), sub),
        st.tuples(st.just("binary"), st.sampled_from(list(BINARY)), sub, sub)),
    max_leaves=5)

MATRIX_FORMATS = ["dd", "ds", "sd", "ss", ("ds", (1, 0)), ("ss", (1, 0)), "uq"]
OUTPUT_FORMATS = [None, "dd", "ds", "ss", ("ds", (1, 0)), "coo"]


@pytest.mark.parametrize("reduce", [False, True], ids=["elementwise", "row-sum"])
@given(tree=trees, fa=st.sampled_from(MATRIX_FORMATS), fb=st.sampled_from(MATRIX_FORMATS),
       fc=st.sampled_from(["d", "s"]), fout=st.sampled_from(OUTPUT_FORMATS),
       backend=st.sampled_from(["llvm", "c"]), seed=st.integers(0, 2**16),
       density=st.sampled_from([0.0, 0.2, 0.6, 1.0]))
def test_random_statement_matches_numpy(reduce, tree, fa, fb, fc, fout, backend, seed,
                                        density):
    taco, numpy_text = _render(tree)
    if not any(f"{name}(" in taco for name in "ABcd"):
        return   # a statement of literals only uses no index
    rng = np.random.default_rng(seed)
    n, m = 4, 3

    def sparse(shape):
        values = rng.standard_normal(shape)
        return values * (rng.random(shape) < density)

    A, B, c, d = sparse((n, m)), sparse((n, m)), sparse(n), sparse(m)
    want = np.broadcast_to(eval(numpy_text, {"np": np, "A": A, "B": B, "c": c, "d": d}),
                           (n, m))
    if reduce:
        statement, want, formats = f"y(i) = sum(j, {taco})", want.sum(axis=1), {}
    else:
        statement, formats = f"Y(i,j) = {taco}", ({"Y": fout} if fout else {})
    used = {name: fmt for name, fmt in (("A", fa), ("B", fb), ("c", fc), ("d", fc))
            if f"{name}(" in taco}
    try:
        kernel = ta.compile(statement, formats={**used, **formats}, backend=backend)
    except ta.NotationError:
        return   # e.g. an index the statement no longer uses after simplification
    operands = {name: ta.Tensor.from_numpy({"A": A, "B": B, "c": c, "d": d}[name], format=fmt)
                for name, fmt in used.items()}
    got = kernel(**operands)
    got = got.to_numpy() if isinstance(got, ta.Tensor) else (
        got.toarray() if hasattr(got, "toarray") else np.asarray(got))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12,
                               err_msg=f"{statement} formats={used} out={fout} {backend}")
