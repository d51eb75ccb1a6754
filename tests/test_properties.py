"""Hypothesis: random einsum expressions, shapes, densities, formats and backends vs np.einsum.

Profiles are registered in conftest.py ("default": 60 examples, derandomized; "ci": more);
choose one with HYPOTHESIS_PROFILE=ci.
"""
from __future__ import annotations

import numpy as np
from conftest import densify, random_dense
from hypothesis import given
from hypothesis import strategies as st

import tensoralg as ta

LETTERS = "ijkl"
DENSITIES = [0.0, "one", 0.01, 0.5, 1.0]


@st.composite
def expressions(draw):
    n_ops = draw(st.integers(1, 4))
    used = draw(st.lists(st.sampled_from(LETTERS), min_size=1, max_size=4, unique=True))
    sizes = {c: draw(st.sampled_from([0, 1, 2, 3, 4, 5])) for c in used}
    terms = []
    for _ in range(n_ops):
        rank = draw(st.integers(0 if n_ops > 1 else 1, min(3, len(used))))
        term = draw(st.lists(st.sampled_from(used), min_size=rank, max_size=rank, unique=True))
        terms.append("".join(term))
    present = sorted(set("".join(terms)))
    out = draw(st.lists(st.sampled_from(present), unique=True, max_size=3)) if present else []
    return ",".join(terms) + "->" + "".join(out), sizes


def formats_for(rank):
    if rank == 0:
        return st.just(None)
    plain = st.text(alphabet="ds", min_size=rank, max_size=rank)
    orders = st.permutations(list(range(rank))).map(tuple)
    options = [plain, st.tuples(plain, orders)]
    if rank >= 2:
        options.append(st.just("u" + "q" * (rank - 1)))
    return st.one_of(*options)


@st.composite
def cases(draw):
    subscripts, sizes = draw(expressions())
    terms = subscripts.split("->")[0].split(",")
    out = subscripts.split("->")[1]
    fmts = [draw(formats_for(len(t))) for t in terms]
    densities = [draw(st.sampled_from(DENSITIES)) for _ in terms]
    out_format = draw(st.one_of(st.just(None), formats_for(len(out)))) if out else None
    backend = draw(st.sampled_from(["llvm", "c"]))
    dtype = draw(st.sampled_from([np.float64, np.float32]))
    seed = draw(st.integers(0, 2**16))
    return subscripts, sizes, fmts, densities, out_format, backend, dtype, seed


@given(cases())
def test_random_einsum_matches_numpy(case):
    subscripts, sizes, fmts, densities, out_format, backend, dtype, seed = case
    rng = np.random.default_rng(seed)
    terms = subscripts.split("->")[0].split(",")
    operands, dense = [], []
    for term, fmt, density in zip(terms, fmts, densities):
        a = random_dense(tuple(sizes[c] for c in term), density, rng, dtype)
        dense.append(a)
        if len(term) == 0:
            operands.append(dtype(a[()]))
        else:
            operands.append(ta.Tensor.from_numpy(a, format=fmt))
    got = ta.einsum(subscripts, *operands, backend=backend, out_format=out_format)
    want = np.einsum(subscripts, *dense)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    note = f"{subscripts} sizes={sizes} formats={fmts} out={out_format} {backend} {dtype}"
    assert np.shape(got) == want.shape, note
    np.testing.assert_allclose(densify(got), want, err_msg=note, **tol)
