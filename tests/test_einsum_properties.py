"""Property tests of ``ta.einsum`` as a drop-in for ``numpy.einsum`` (issue 18): random
subscripts over random dtypes, with size-1 dimensions that broadcast, and ``out=`` arrays that
overlap an operand, each checked against NumPy's own answer on the same call.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import tensoralg as ta

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint32", "float16", "float32",
          "float64", "complex64", "complex128"]
LETTERS = "abcd"


def tolerance(dtype: np.dtype) -> dict[str, float]:
    if dtype.kind in "biu":
        return {"rtol": 0, "atol": 0}          # integer wrap-around must match exactly
    if dtype in (np.float16,):
        return {"rtol": 2e-2, "atol": 2e-2}
    if dtype in (np.float32, np.complex64):
        return {"rtol": 1e-4, "atol": 1e-4}
    return {"rtol": 1e-10, "atol": 1e-10}


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape).astype(dtype)
    data = rng.standard_normal(shape)
    if kind == "c":
        data = data + 1j * rng.standard_normal(shape)
    return data.astype(dtype)


@st.composite
def calls(draw):
    """Two operands' subscripts, the output's, sizes with some dimensions 1, and dtypes."""
    count = draw(st.integers(1, 3))
    letters = LETTERS[:count + 1]
    first = "".join(draw(st.permutations(letters))[:draw(st.integers(1, len(letters)))])
    second = "".join(draw(st.permutations(letters))[:draw(st.integers(1, len(letters)))])
    used = sorted(set(first + second))
    output = "".join(c for c in used if draw(st.booleans()))
    sizes = {c: draw(st.integers(1, 4)) for c in used}
    # a size-1 dimension in one operand broadcasts against the other's size (NumPy's rule)
    ones = {(k, c) for k, text in enumerate((first, second)) for c in text
            if draw(st.integers(0, 4)) == 0}
    dtypes = (draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES)))
    return first, second, output, sizes, ones, dtypes, draw(st.integers(0, 2**16))


@settings(max_examples=40)
@given(call=calls())
def test_random_two_operand_calls_match_numpy(call):
    first, second, output, sizes, ones, dtypes, seed = call
    rng = np.random.default_rng(seed)
    shapes = [tuple(1 if (k, c) in ones else sizes[c] for c in text)
              for k, text in enumerate((first, second))]
    a, b = (values(rng, shape, dtype) for shape, dtype in zip(shapes, dtypes))
    subscripts = f"{first},{second}->{output}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # NumPy's own overflow warnings
        try:
            expected = np.einsum(subscripts, a, b)
        except (ValueError, TypeError) as numpy_error:
            event("NumPy refuses the call")
            with pytest.raises(type(numpy_error)):
                ta.einsum(subscripts, a, b)
            return
    event(f"computed, {np.asarray(expected).dtype.kind} result")
    got = ta.einsum(subscripts, a, b)
    got = np.asarray(got)
    assert got.dtype == expected.dtype, (subscripts, dtypes)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, **tolerance(expected.dtype))


@settings(max_examples=30)
@given(n=st.integers(1, 5), dtype=st.sampled_from(["int32", "int64", "float32", "float64",
                                                    "complex128"]),
       form=st.sampled_from(["ij,jk->ik", "ij,jk->ki", "ij->ji", "ij,ij->ij", "ij,j->ij"]),
       into=st.integers(0, 1), seed=st.integers(0, 2**16))
def test_out_that_overlaps_an_operand_matches_numpy(n, dtype, form, into, seed):
    """``out=`` is one of the operands (or a transposed view of one): the answer is NumPy's,
    as if the operands were read before anything was written."""
    rng = np.random.default_rng(seed)
    inputs = form.split("->")[0].split(",")
    ours = [values(rng, (n,) * len(text), dtype) for text in inputs]
    theirs = [x.copy() for x in ours]
    target = min(into, len(ours) - 1)
    if ours[target].ndim != 2:
        target = 0
    transposed = bool(seed % 2)
    out_ours = ours[target].T if transposed else ours[target]
    out_theirs = theirs[target].T if transposed else theirs[target]
    np.einsum(form, *theirs, out=out_theirs)
    ta.einsum(form, *ours, out=out_ours)
    for mine, numpys in zip(ours, theirs):
        np.testing.assert_allclose(mine, numpys, **tolerance(np.dtype(dtype)))
