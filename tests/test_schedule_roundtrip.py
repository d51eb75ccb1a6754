"""``kernel.schedule`` prints what the compiler applied: passed back, it builds the same kernel.

Random statements over dense and sparse formats, compiled without a schedule, then again with
the printed one: the IR must match (up to the kernel's name and the wording of the note on a
converted operand). Covers the compiler's choices that print as commands of their own:
``relayout`` (operands read converted), ``gemm(auto)`` (dense products routed per call), and
the loop nests of temporaries it sums first.
"""
from __future__ import annotations

import random

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

FORMATS = {1: ["d", "s"], 2: ["dd", "csr", "csc", "ds", "ss"], 3: ["ddd", "csf", "dds", "sss"]}


def _statement(pick: random.Random):
    indices = list("abcde"[:pick.randint(2, 4)])
    terms = ["".join(pick.sample(indices, pick.randint(1, min(3, len(indices)))))
             for _ in range(pick.choice((1, 2, 2, 3)))]
    used = sorted(set("".join(terms)))
    kept = [c for c in used if pick.random() < 0.5]
    pick.shuffle(kept)
    rhs = " * ".join(f"{'ABC'[k]}({','.join(t)})" for k, t in enumerate(terms))
    formats = {"ABC"[k]: pick.choice(FORMATS[len(t)]) for k, t in enumerate(terms)}
    if kept:
        formats["Z"] = "d" * len(kept)
    return (f"Z({','.join(kept)}) = {rhs}" if kept else f"Z = {rhs}"), formats


def _body(kernel) -> list[str]:
    return [line for line in kernel.source("ir").splitlines()[1:]
            if "// note: operand" not in line]


# 4 seeds in the quick run; with ``-m slow`` 24 more, 700 statements in all (the figure the
# schedules guide quotes)
@pytest.mark.parametrize("seed", [*range(4), *[pytest.param(seed, marks=pytest.mark.slow)
                                               for seed in range(4, 28)]])
def test_printed_schedules_build_the_same_kernel(seed):
    pick = random.Random(seed)
    for _ in range(25):
        statement, formats = _statement(pick)
        try:
            kernel = ta.compile(statement, formats)
        except ta.TensorAlgebraError:
            continue
        printed = str(kernel.schedule)
        again = ta.compile(statement, formats, schedule=printed)
        assert _body(again) == _body(kernel), (statement, formats, printed)
        assert str(again.schedule) == printed, (statement, formats)


def test_relayout_reads_an_operand_converted_and_gives_the_same_numbers():
    a = sp.random_array((30, 20), density=0.2, format="csr", random_state=1)
    b = sp.random_array((20, 30), density=0.2, format="csr", random_state=2)
    kernel = ta.compile("Z(a) = A(a,b) * B(b,a)", formats={"A": "csr", "B": "csr"})
    assert "relayout(B, a, b)" in str(kernel.schedule)
    expected = np.einsum("ab,ba->a", a.toarray(), b.toarray())
    np.testing.assert_allclose(kernel(A=a, B=b), expected)
    # asked for by hand: B read column by column under loops b, a
    given = ta.compile("Z(a) = A(a,b) * B(b,a)", formats={"A": "csc", "B": "csr"},
                       schedule="reorder(b, a); relayout(A, b, a)")
    np.testing.assert_allclose(given(A=a.tocsc(), B=b), expected)


def test_relayout_parses_prints_and_is_checked():
    s = ta.Schedule().relayout("B", "a", "b")
    assert str(s) == "relayout(B, a, b)" and ta.Schedule.parse(str(s)) == s
    with pytest.raises(ta.NotationError, match="reads no tensor C"):
        ta.compile("Z(a) = A(a,b) * B(b,a)", formats={"A": "csr", "B": "csr"},
                   schedule="relayout(C, a, b)")
    with pytest.raises(ta.NotationError, match="name each of its indices once"):
        ta.compile("Z(a) = A(a,b) * B(b,a)", formats={"A": "csr", "B": "csr"},
                   schedule="relayout(B, a)")
    with pytest.raises(ta.NotationError, match="twice"):
        ta.Schedule().relayout("B", "a", "a")


def test_gemm_auto_is_the_compilers_routing():
    kernel = ta.compile("C(i,j) = A(i,k) * B(k,j)")
    assert "gemm(auto)" in str(kernel.schedule)
    routed = ta.compile("C(i,j) = A(i,k) * B(k,j)", schedule="gemm(auto); jam(4)")
    looped = ta.compile("C(i,j) = A(i,k) * B(k,j)", schedule="jam(4)")
    assert "BLAS" in routed.source("ir").splitlines()[1]
    assert "BLAS" not in looped.source("ir")
