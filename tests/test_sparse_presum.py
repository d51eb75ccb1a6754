"""A sparse factor summed first over the indices it alone holds (``concretize.presum``): one
pass over its entries into a dense temporary, instead of co-iterating its levels once per value
of the other factors' indices."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta

CASES = [
    # (subscripts, sparse operand positions)
    ("bc,ba->a", (0, 1)),
    ("cb,ba->a", (0, 1)),
    ("bc,ab->a", (0, 1)),
    ("ca,bc->bc", (0,)),
    ("ab,c->c", (0,)),
    ("ij,ik->k", (0, 1)),
    ("ij,ik->i", (0,)),
    ("ab,cb->ca", (0,)),
]
SIZES = {"a": 37, "b": 53, "c": 29, "i": 41, "j": 23, "k": 17}


def _operand(term, sparse, fmt, dtype, rng):
    shape = tuple(SIZES[c] for c in term)
    if not sparse:
        return (rng.standard_normal(shape) * 3).astype(dtype)
    m = sp.random_array(shape, density=0.08, format=fmt, random_state=rng, dtype=np.float64)
    m.data = (m.data * 8 - 4).astype(dtype)
    if m.nnz:
        m.data[0] = 0                              # an explicit zero is kept as an entry
    return m


@pytest.mark.parametrize("subscripts, sparse", CASES)
@pytest.mark.parametrize("formats", [("csr", "csr"), ("csc", "csc"), ("csr", "csc"),
                                     ("coo", "csc")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_summed_first_matches_numpy(subscripts, sparse, formats, dtype):
    rng = np.random.default_rng(sum(map(ord, subscripts + "".join(formats))))
    terms = subscripts.split("->")[0].split(",")
    fmts = iter(formats)
    operands = [_operand(t, k in sparse, next(fmts) if k in sparse else None, dtype, rng)
                for k, t in enumerate(terms)]
    dense = [op.toarray() if sp.issparse(op) else op for op in operands]
    expected = np.einsum(subscripts, *[d.astype(np.float64) for d in dense])
    got = ta.einsum(subscripts, *operands)
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    tolerance = 1e-3 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("rows", [0, 1])
def test_summed_first_with_empty_and_zero_size_operands(rows):
    a = sp.csc_array((rows * 5, 6))                          # no entries (or no rows)
    b = sp.random_array((rows * 5, 4), density=0.5, format="csc", random_state=0)
    np.testing.assert_allclose(ta.einsum("bc,ba->a", a, b),
                               np.einsum("bc,ba->a", a.toarray(), b.toarray()))


def test_the_program_sums_the_sparse_factor_in_its_own_nest():
    kernel = ta.compile("y(a) = A(b,c) * B(b,a)", {"A": "csc", "B": "csc", "y": "d"})
    ir = kernel.source("ir")
    assert "_t0(b) += ... over c, b" in ir and "y(a) = ... over a, b" in ir
    # the temporary holds one index: a sparse factor left with two keeps the fused nest
    fused = ta.compile("y(a,d) = A(b,c,d) * B(b,a)", {"A": "csf", "B": "csc", "y": "dd"})
    assert "_t0" not in fused.source("ir")
