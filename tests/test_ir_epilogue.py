"""Row epilogues moved into register tiles (ir/passes/epilogue.py): which kernels it rewrites,
and that rewritten kernels compute bit for bit what the kernel without the pass computes."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.ir import F64, I64, Ptr, param, var, verify
from tensoralg.ir.build import add, declare, div, for_, function, load, maximum, mul, store
from tensoralg.ir.passes import pipeline
from tensoralg.ir.passes.epilogue import tile_epilogues


@pytest.fixture(autouse=True)
def _optimised_builds():
    """Kernels compared bit for bit are both optimised: a quick first build
    (codegen/tiered.py) may sum in another order."""
    with ta.optimised_builds():
        yield


LAYER = "Y(j,i) = max(sum(k, A(k,i) * B(j,k)) + C(j), 0)"


def _without_pass(make):
    """What ``make()`` builds with this pass left out (and no cache to hand back the other)."""
    cache = ta.api.kernel_cache()
    saved = pipeline.STEPS, cache.disk, dict(cache.kernels)
    pipeline.STEPS = tuple(step for step in pipeline.STEPS if step[1] is not tile_epilogues)
    cache.disk = None
    cache.kernels.clear()
    try:
        return make()
    finally:
        pipeline.STEPS, cache.disk = saved[0], saved[1]
        cache.kernels.clear()
        cache.kernels.update(saved[2])


def test_a_fused_sparse_layer_gets_its_epilogue_inside_the_tiles():
    text = ta.compile(LAYER, formats={"B": "csr"}, dtype="float32").source("ir")
    tile_loop = text[text.index("for (i64 i_tile"):text.index("for (i64 pB1_1")]
    assert "_lane = 0; " in tile_loop and "Y_vals[" in tile_loop    # zeroed and applied there
    assert "i_1 = i_tiles * 64" in text                             # the rest after the rest


@pytest.mark.parametrize("statement, formats", [
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),        # no workspace: the tiles store to Y
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}),            # no tiles
    ("Y(i,j) = max(A(i,j) + B(i,j), 0)", None),        # no reduction
])
def test_other_kernels_are_left_alone(statement, formats):
    assert "_lane" not in ta.compile(statement, formats=formats).source("ir")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
# Past the full tiles (64 lanes in float32, 32 in float64) come the narrower ones (32 and 16
# lanes; 16 and 8) and the rest.
@pytest.mark.parametrize("batch", [0, 1, 8, 16, 24, 63, 64, 65, 80, 112, 127, 130, 256])
def test_rewritten_layers_match_the_kernel_without_the_pass(batch, dtype):
    rng = np.random.default_rng(batch)
    w = rng.integers(-4, 5, (20, 15)).astype(dtype)
    w[rng.random(w.shape) < 0.7] = 0
    w[3] = 0                                   # an all-zero row: the epilogue alone
    w[5] = 0
    w[5, 7] = 2                                # a single nonzero
    a = (rng.standard_normal((15, batch)) * 4).astype(dtype)
    c = rng.integers(-3, 4, 20).astype(dtype)
    weight = sp.csr_array(w)

    def run():
        return ta.compile(LAYER, formats={"B": "csr"}, dtype=dtype)(A=a, B=weight, C=c)
    got, before = run(), _without_pass(run)
    np.testing.assert_array_equal(got, before)
    np.testing.assert_allclose(got, np.maximum(w @ a + c[:, None], 0), rtol=1e-5, atol=1e-4)


def test_narrower_tiles_own_their_lanes_too():
    # A precomputed SpMM row of 16 float64: the 16-lane tile (after the 32-lane ones) zeroes
    # its lanes and stores them into Y itself; only the rest of under 8 goes through W after.
    schedule = ta.Schedule().precompute("A(i,j) * B(j,k)", "k")
    kernel = ta.compile("Y(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"}, schedule=schedule)
    text = kernel.source("ir")
    narrow = text[text.index("for (i64 k_2_tile"):text.index("i64 k_2_1_tiles")]
    assert "_lane_1 = 0; " in narrow and "Y_vals[" in narrow
    rng = np.random.default_rng(5)
    a = sp.random_array((40, 30), density=0.2, format="csr", random_state=rng)
    for columns in (1, 7, 8, 16, 24, 40, 47, 56, 63):
        b = rng.standard_normal((30, columns))
        got = kernel(A=a, B=b)
        np.testing.assert_array_equal(got, _without_pass(lambda: ta.compile(
            "Y(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"}, schedule=schedule)(A=a, B=b)))
        np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


def _nest(epilogue_index=None, reads_output_in_tiles: bool = False, running: bool = False):
    """A hand-built row: zero W, tiles of 4 over [0, n), the rest, then Y[base + e] = W[..]."""
    n, j, t, lo, lane, p, q, i, z, e = (var(name, I64) for name in
                                        ("n", "j", "t", "lo", "lane", "p", "q", "i", "z", "e"))
    tiles, base = var("tiles", I64), var("base", I64)
    w, x, y = var("W", Ptr(F64)), var("X", Ptr(F64)), var("Y", Ptr(F64))
    term = load(y if reads_output_in_tiles else x, p)
    body = [
        for_(z, 0, n, store(w, z, 0.0)),
        declare(tiles, maximum(div(n, 4), 0)),
        for_(t, 0, tiles, declare(lo, mul(t, 4)),
             for_(p, 0, 3, for_(lane, 0, 4, store(w, add(lo, lane), term, True)))),
        for_(q, 0, 3, for_(i, mul(tiles, 4), n, store(w, i, load(x, q), True))),
        declare(base, mul(j, n)),
        for_(e, 0, n, store(y, add(base, e), add(
            load(w, e if epilogue_index is None else epilogue_index(e)),
            load(y, add(base, e if not running else add(e, -1))) if running else 0.0))),
    ]
    return function("k", [param(n, "n"), param(j, "j"), param(w, "W"), param(x, "X"),
                          param(y, "Y", output=True)], *body)


def test_the_hand_built_row_is_rewritten_and_verifies():
    original = _nest()
    rewritten = tile_epilogues(original)
    assert rewritten is not original and "e_lane" in str(rewritten)
    verify(rewritten)


@pytest.mark.parametrize("change", [
    {"epilogue_index": lambda e: add(e, 1)},           # reads W beyond its own element
    {"reads_output_in_tiles": True},                   # the tiles read what the epilogue writes
    {"running": True},                                 # the epilogue reads its neighbour's output
])
def test_rows_that_do_not_fit_are_left_alone(change):
    f = _nest(**change)
    assert tile_epilogues(f) is f
