"""The compiler's own thread split of an all-dense reduction whose outer loop sums
(``api._with_partials``): ``parallelize(a, reduction=partials)``, each range summing into its
own copy of the output. Results must match NumPy whether a call splits or not, through the
general path and through replays, and the split must not be taken where its copies cost more
than the work (``PARTIAL_COPY_WORK``)."""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.api import _partial_parts, kernel_cache

CASES = [
    ("abc->bc", [(48, 40, 64)]),
    ("ij->j", [(3000, 100)]),
    ("i,i->", [(300_000,), (300_000,)]),
    ("ij,ij->j", [(2000, 150), (2000, 150)]),
    ("abc,ab->c", [(64, 50, 40), (64, 50)]),
]


@pytest.fixture(params=[1, 2, 4])
def threads(request, monkeypatch):
    monkeypatch.setattr(kernel_cache().threads, "threads", request.param)
    return request.param


@pytest.mark.parametrize("subscripts, shapes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_partial_reductions_match_numpy(subscripts, shapes, dtype, threads):
    rng = np.random.default_rng(len(subscripts))
    operands = [(rng.standard_normal(s) * 4).astype(dtype) for s in shapes]
    expected = np.einsum(subscripts, *[op.astype(np.float64) for op in operands])
    tolerance = 1e-3 if dtype == np.float32 else 1e-9
    for _ in range(3):                 # the general path, then replays
        got = np.asarray(ta.einsum(subscripts, *operands), dtype=np.float64)
        np.testing.assert_allclose(got, expected, rtol=tolerance,
                                   atol=tolerance * max(1.0, np.abs(expected).max()))


def test_the_schedule_says_so_and_passes_back():
    kernel = ta.compile("Z(b,c) = X(a,b,c)", {"X": "ddd"})
    assert str(kernel.schedule) == "reorder(a, b, c); parallelize(a, reduction=partials)"
    again = ta.compile("Z(b,c) = X(a,b,c)", {"X": "ddd"}, schedule=kernel.schedule)
    assert again.source("ir").splitlines()[1:] == kernel.source("ir").splitlines()[1:]
    # an output-major nest keeps its plain thread split
    assert "partials" not in str(ta.compile("Z(a) = X(a,b,c)", {"X": "ddd"}).schedule)


def test_copies_must_pay():
    assert _partial_parts(2, 10**6, (100,)) == 2
    assert _partial_parts(2, 10**6, (1000, 1000)) == 1        # the copy is the whole work
    assert _partial_parts(8, 80, ()) == 8                      # a scalar copies nothing
    assert _partial_parts(1, 10**9, ()) == 1


def test_empty_and_zero_size_reductions(threads):
    for shape in [(0, 5, 6), (4, 0, 6), (4, 5, 0)]:
        x = np.ones(shape)
        np.testing.assert_array_equal(ta.einsum("abc->bc", x), x.sum(0))


def test_large_calls_do_split(monkeypatch):
    import tensoralg.api as api

    monkeypatch.setattr(kernel_cache().threads, "threads", 2)
    calls = []
    real = api._run_partials

    def counted(*args, **kwargs):
        calls.append(len(args[2]) - 1)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "_run_partials", counted)
    x = np.arange(400_000, dtype=np.float64) % 7
    for _ in range(3):
        assert ta.einsum("i,i->", x, x) == pytest.approx(float(x @ x))
    assert calls and all(parts == 2 for parts in calls)
