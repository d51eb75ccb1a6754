"""Register tiling and row workspaces: when each IR pass fires, when it must not, and the
kernels it shapes checked against NumPy across tile boundaries, dtypes and thread splits."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import ir
from tensoralg.api import kernel_cache
from tensoralg.ir import F32, I64, Ptr, param, var
from tensoralg.ir.passes.tile import tile_accumulators
from tensoralg.ir.passes.workspace import row_workspaces
from tensoralg.ir.rewrite import walk

p, i, j, m, k, r, r2, j2, i2 = (var(name, I64) for name in
                                ("p", "i", "j", "m", "k", "r", "r2", "j2", "i2"))
x, y, t = var("x", Ptr(F32)), var("y", Ptr(F32)), var("t", Ptr(F32))
PARAMS = [param(m, "m"), param(k, "k"), param(x, "x"), param(y, "y", output=True)]


def fn(*body) -> ir.Function:
    return ir.function("k", PARAMS, *body)


def loops(f: ir.Function) -> list[ir.For]:
    return [node for node in walk(f) if isinstance(node, ir.For)]


def product_nest(store_index=None, value=None, accumulate=True, inner_stop=None):
    """for p < k: for i < m: y[store_index] (+)= value"""
    return fn(ir.for_(p, 0, k, ir.for_(
        i, 0, inner_stop if inner_stop is not None else m,
        ir.store(y, store_index if store_index is not None else i,
                 value if value is not None else ir.load(x, ir.add(ir.mul(p, m), i)),
                 accumulate))))


# ---------------------------------------------------------------------------------------------
# tile_accumulators


def test_tiling_fires_on_an_accumulation_under_a_reduction():
    before = product_nest()
    after = tile_accumulators(before)
    ir.verify(after, after="tile")
    widths = [loop.stop.value for loop in loops(after) if isinstance(loop.stop, ir.Const)]
    assert widths == [64, 32, 16]       # the register tile (64 f32 = 256 bytes), then one tile
    #                                     each of half and a quarter of it for what is left
    assert len(loops(after)) == 3 * 3 + 2          # (tiles, reduction, tile) x 3, rest, rest


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 31, 48, 63, 64, 65, 100, 128, 200])
def test_narrower_tiles_cover_every_width_once(n):
    """Full tiles, a half tile, a quarter tile and the rest together visit each of the ``n``
    columns exactly once, in the order of the reduction (the result is the untiled one, bit for
    bit)."""
    from tensoralg.codegen import build

    rng = np.random.default_rng(n)
    k = 7
    x = rng.standard_normal(k * max(n, 1)).astype(np.float32)
    outs = []
    for fn in (product_nest(), tile_accumulators(product_nest())):
        out = np.zeros(max(n, 1), np.float32)
        kernel = build(fn, "llvm")
        assert kernel(n, k, x.ctypes.data, out.ctypes.data) == 0
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("case", [
    "plain store", "index uses the reduction", "output read in the loop", "bounds vary",
    "index scaled",
])
def test_tiling_leaves_other_nests_alone(case):
    f = {
        "plain store": lambda: product_nest(accumulate=False),
        "index uses the reduction": lambda: product_nest(store_index=ir.add(p, i)),
        "output read in the loop": lambda: product_nest(value=ir.load(y, ir.add(i, 1))),
        "bounds vary": lambda: product_nest(inner_stop=p),
        "index scaled": lambda: product_nest(store_index=ir.mul(i, 2)),
    }[case]()
    assert tile_accumulators(f) is f


def filled_nest(fill_base=None, fill_value=0.0, fill_array=None, fill_stop=None):
    """y's row zeroed, then summed into across p (what lowering makes of an SpMM row)."""
    return fn(ir.for_(j, 0, fill_stop if fill_stop is not None else m,
                      ir.store(fill_array if fill_array is not None else y,
                               ir.add(fill_base, j) if fill_base is not None else j,
                               ir.const(fill_value, F32))),
              ir.for_(p, 0, k, ir.for_(i, 0, m, ir.store(
                  y, i, ir.load(x, ir.add(ir.mul(p, m), i)), True))))


def test_row_fills_are_absorbed_into_zero_started_tiles():
    after = tile_accumulators(filled_nest())
    ir.verify(after, after="tile")
    zero_loops = [loop for loop in loops(after) if len(loop.body.body) == 1 and
                  isinstance(loop.body.body[0], ir.Store) and not loop.body.body[0].accumulate]
    # each wide tile zeroes its own lanes (constant widths); no zeroing of the whole row is left
    assert [loop.stop for loop in zero_loops] == [ir.const(w, I64) for w in (64, 32, 16)]
    # one more, narrower tile (8 f32) and the last elements, one at a time, sum in locals
    sums = [d for d in walk(after) if isinstance(d, ir.Declare) and d.init == ir.const(0, F32)]
    assert len(sums) == 8 + 1
    rest = loops(after)[-2]
    assert isinstance(rest.body.body[0], ir.Declare) and rest.body.body[0].var == sums[-1].var


@pytest.mark.parametrize("case", ["not zero", "not the output", "another base", "other range"])
def test_row_fills_that_do_not_match_stay(case):
    f = {
        "not zero": lambda: filled_nest(fill_value=1.0),
        "not the output": lambda: filled_nest(fill_array=x),
        "another base": lambda: filled_nest(fill_base=k),
        "other range": lambda: filled_nest(fill_stop=k),
    }[case]()
    after = tile_accumulators(f)
    assert loops(after)[0] == loops(f)[0]          # the fill is still there, whole


@pytest.mark.parametrize("n", [0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 48, 63, 64, 65, 100, 128, 200])
def test_absorbed_fills_assign_every_element(n):
    """The zero-started tiles and the rest store every element of the row: an output full of
    NaN comes out as the untiled nest's, bit for bit."""
    from tensoralg.codegen import build

    rng = np.random.default_rng(n)
    k = 7
    x = rng.standard_normal(k * max(n, 1)).astype(np.float32)
    outs = []
    for f in (filled_nest(), tile_accumulators(filled_nest())):
        out = np.full(max(n, 1), np.nan, np.float32)
        kernel = build(f, "llvm")
        assert kernel(n, k, x.ctypes.data, out.ctypes.data) == 0
        outs.append(out[:n])
    assert not np.isnan(outs[1]).any()
    np.testing.assert_array_equal(outs[0], outs[1])


# ---------------------------------------------------------------------------------------------
# row_workspaces


def temp_program(consumer_row=None, producer_reads_y=False) -> ir.Function:
    source = ir.load(y, ir.add(r, i)) if producer_reads_y else ir.load(x, ir.add(r, i))
    return fn(
        ir.allocate(t, ir.mul(m, k), zero=True),
        ir.for_(j, 0, m, ir.declare(r, ir.mul(j, k)),
                ir.for_(i, 0, k, ir.store(t, ir.add(r, i), source, True))),
        ir.for_(j2, 0, m, ir.declare(r2, consumer_row if consumer_row is not None
                                     else ir.mul(j2, k)),
                ir.for_(i2, 0, k, ir.store(y, ir.add(r2, i2),
                                           ir.maximum(ir.load(t, ir.add(r2, i2)), 0.0)))),
        ir.free(t))


def test_workspace_fuses_producer_and_consumer():
    after = row_workspaces(temp_program())
    ir.verify(after, after="workspace")
    alloc = next(s for s in after.body.body if isinstance(s, ir.Allocate))
    assert alloc.count == k and not alloc.zero
    assert sum(isinstance(s, ir.For) for s in after.body.body) == 1


@pytest.mark.parametrize("consumer_row", ["next row", "producer reads the output"])
def test_workspace_needs_row_locality(consumer_row):
    f = temp_program(ir.mul(ir.add(j2, 1), k)) if consumer_row == "next row" \
        else temp_program(producer_reads_y=True)
    assert row_workspaces(f) is f


# ---------------------------------------------------------------------------------------------
# Kernels, end to end


def _csr(rows: int, cols: int, density: float, dtype, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    a = sp.random_array((rows, cols), density=density, format="csr", rng=rng)
    if np.dtype(dtype).kind == "i":
        a.data = rng.integers(-5, 6, a.nnz)
    a = a.astype(dtype)
    if rows > 2:
        a = sp.csr_array(a.multiply(np.arange(rows)[:, None] % 3 != 1))   # all-zero rows
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("width", [0, 1, 31, 32, 33, 64, 65, 130])
def test_spmm_across_tile_boundaries(dtype, width):
    a = _csr(23, 17, 0.3, dtype, seed=width)
    b = (np.random.default_rng(1).standard_normal((17, width)) * 4).astype(dtype)
    got = ta.einsum("ij,jk->ik", a, b)
    np.testing.assert_allclose(np.asarray(got), a.toarray() @ b, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("width", [0, 1, 2, 3, 4, 5, 8, 12, 16, 17, 24, 40])
def test_spmm_zeroes_its_own_rows(dtype, width, monkeypatch):
    """CSR times dense zeroes each output row inside the kernel (tile by tile), so the runtime
    hands it an uninitialised buffer: here one full of NaN (or 7 for integers), which a missed
    element would show, through the call, its replay and a bound call."""
    kernel = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr"}, dtype=dtype)
    assert kernel._default.overwrites
    a = _csr(37, 19, 0.25, dtype, seed=width)
    b = (np.random.default_rng(width).standard_normal((19, width)) * 4).astype(dtype)
    real_empty = np.empty

    def poisoned(shape, dtype=float, **kwargs):
        array = real_empty(shape, dtype, **kwargs)
        array.fill(np.nan if np.dtype(dtype).kind == "f" else 7)
        return array

    monkeypatch.setattr(np, "empty", poisoned)
    want = a.toarray() @ b
    for _ in range(2):                          # the general path, then the replay
        np.testing.assert_allclose(kernel(A=a, B=b), want, rtol=1e-5, atol=1e-4)
    call = kernel.bind(A=a, B=b)
    call.out[...] = 7
    np.testing.assert_allclose(call(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [0, 1, 63, 64, 65, 300])
def test_fused_sparse_layer_across_tile_boundaries(dtype, batch):
    kernel = ta.compile("Y(j,i) = max(sum(k, W(j,k) * X(k,i)) + C(j), 0)",
                        formats={"W": ta.CSR}, dtype=np.dtype(dtype).name)
    assert "holds one row" in kernel.source("ir") and "register tiles" in kernel.source("ir")
    w = _csr(40, 24, 0.2, dtype, seed=batch)
    rng = np.random.default_rng(batch)
    xv = rng.standard_normal((24, batch)).astype(dtype)
    c = rng.standard_normal(40).astype(dtype)
    expected = np.maximum(w.toarray() @ xv + c[:, None], 0)
    np.testing.assert_allclose(kernel(W=w, X=xv, C=c), expected, rtol=1e-5, atol=1e-5)
    bound = kernel.bind(W=w, X=xv, C=c)
    for _ in range(2):   # the bound call skips zeroing: every element must be assigned
        np.testing.assert_allclose(bound(), expected, rtol=1e-5, atol=1e-5)


def test_fused_layer_split_over_threads_matches():
    """Large enough to be split by rows: each thread's call holds its own workspace row."""
    kernel = ta.compile("Y(j,i) = max(sum(k, W(j,k) * X(k,i)) + C(j), 0)",
                        formats={"W": ta.CSR}, dtype="float64")
    assert "range_begin" in kernel.source("ir")
    w = _csr(4000, 600, 0.05, np.float64, seed=3)
    rng = np.random.default_rng(4)
    xv, c = rng.standard_normal((600, 256)), rng.standard_normal(4000)
    bound = kernel.bind(W=w, X=xv, C=c)
    if kernel_cache().threads.threads > 1:
        assert len(bound.calls) > 1
    np.testing.assert_allclose(bound(), np.maximum(w @ xv + c[:, None], 0),
                               rtol=1e-10, atol=1e-10)


def test_split_needs_every_nest_on_the_range():
    """A DCSR operand's outer loop is sparse: it cannot take the thread range, so neither may
    the nest after it (it would run whole in every thread)."""
    kernel = ta.compile("y(i) = max(sum(j, A(i,j) * x(j)), 0)", formats={"A": "ss"},
                        dtype="float64")
    assert "range_begin" not in kernel.source("ir")
    a = _csr(500, 400, 0.05, np.float64, seed=5)
    xv = np.random.default_rng(6).standard_normal(400)
    dcsr = ta.Tensor.from_scipy(a, ta.DCSR)
    np.testing.assert_allclose(kernel(A=dcsr, x=xv), np.maximum(a @ xv, 0), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("shape", [(0, 5), (1, 40), (17, 3), (33, 65), (64, 256)])
def test_transposed_copy_tiles(dtype, shape):
    kernel = ta.compile("Y(k,i) = X(i,k)", dtype=np.dtype(dtype).name)
    assert "transposed access" in kernel.source("ir")
    source = (np.arange(np.prod(shape)).reshape(shape) % 97).astype(dtype)
    out = np.full(shape[::-1], 7, dtype)           # garbage: the call must assign every element
    bound = kernel.bind(out=out, X=source)
    for _ in range(2):
        np.testing.assert_array_equal(bound(), source.T)


def test_transposed_read_in_an_epilogue_and_in_three_dimensions():
    rng = np.random.default_rng(7)
    a, c = rng.standard_normal((70, 37)), rng.standard_normal(70)
    got = ta.compile("Y(i,j) = max(A(j,i) + C(j), 0)").bind(A=a, C=c)()
    np.testing.assert_allclose(got, np.maximum(a.T + c, 0))
    x = rng.standard_normal((5, 19, 40))
    kernel = ta.compile("Y(b,j,i) = X(b,i,j)")
    assert "transposed access" in kernel.source("ir")
    np.testing.assert_array_equal(kernel(X=x), x.transpose(0, 2, 1))
