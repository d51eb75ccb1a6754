"""Row jamming (ir/passes/jam.py): which kernels it rewrites, and that jammed kernels compute
what the originals did over every row count and thread range."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.ir import F64, I64, Ptr, param, var, verify
from tensoralg.ir.build import add, assign, declare, for_, function, if_, load, lt, mul, store
from tensoralg.ir.passes.jam import JAM, jam_rows
from tensoralg.ir.printer import format_function


def _ir(statement: str, formats=None, dtype="float64") -> str:
    return ta.compile(statement, formats=formats, dtype=dtype).source("ir")


@pytest.mark.parametrize("statement", ["Y(i,j) = A(i,k) * B(j,k)", "y(i) = A(i,j) * x(j)",
                                       "y(i) = A(i,j)"])
def test_dense_reductions_per_row_are_jammed(statement):
    text = _ir(statement)
    assert "jam0_g" in text and "jam0_r3" in text


@pytest.mark.parametrize("statement, order", [
    ("Y(t,g,b) = W(g,k) * X(t,b,k)", "tgbk"),        # an index named as the group counter
    ("Y(t,r0,b) = W(r0,k) * X(t,b,k)", "trbk"),      # ... and as a jammed row's
    ("Y(l0,c,b) = W(c,k) * X(l0,b,k)", "lcbk"),      # ... and a counter and a local's tags
])
def test_index_names_cannot_collide_with_the_jammed_names(statement, order):
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((5, 7)), rng.standard_normal((13, 3, 7))
    kernel = ta.compile(statement, dtype="float64")
    np.testing.assert_allclose(kernel(W=w, X=x), np.einsum("gk,tbk->tgb", w, x), rtol=1e-12)


@pytest.mark.parametrize("statement, formats", [
    ("y(i) = A(i,j) * x(j)", {"A": "ds"}),          # the row's loop bounds come from pos[i]
    ("Y(i,j) = A(i,j) + B(i,j)", None),              # no reduction: nothing to gain
    ("Y(i,j) = A(i,k) * B(k,j)", {"A": "ds"}),       # sparse rows, stores in the reduction
])
def test_other_kernels_are_left_alone(statement, formats):
    assert "jam0" not in _ir(statement, formats)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("rows", [0, 1, JAM - 1, JAM, JAM + 1, 2 * JAM + 3, 257])
def test_jammed_kernels_match_numpy_for_every_row_count(rows, dtype):
    rng = np.random.default_rng(rows)
    a = (rng.standard_normal((rows, 37)) * 10).astype(dtype)
    b = (rng.standard_normal((2, 37)) * 10).astype(dtype)
    x = (rng.standard_normal(37) * 10).astype(dtype)
    got = ta.compile("Y(i,j) = A(i,k) * B(j,k)", dtype=dtype)(A=a, B=b)
    np.testing.assert_allclose(got, a @ b.T, rtol=1e-5, atol=1e-3)
    sums = ta.compile("y(i) = A(i,j)", dtype=dtype)(A=a)
    np.testing.assert_allclose(sums, a.sum(axis=1), rtol=1e-5, atol=1e-3)
    mv = ta.compile("y(i) = A(i,j) * x(j)", dtype=dtype)(A=a, x=x)
    np.testing.assert_allclose(mv, a @ x, rtol=1e-5, atol=1e-3)


def test_thread_ranges_that_are_not_whole_groups(two_threads):
    # Ranges split at row counts that are no multiple of JAM; NaN-free rows, exact check.
    a = np.random.default_rng(1).integers(-5, 5, (100_003, 7)).astype(np.float64)
    b = np.random.default_rng(2).integers(-5, 5, (1, 7)).astype(np.float64)
    bound = ta.compile("Y(i,j) = A(i,k) * B(j,k)").bind(A=a, B=b)
    assert len(bound.calls) == 2
    np.testing.assert_array_equal(bound(), a @ b.T)


def _dot_nest(*extra):
    """``Y[i] = sum(k, A[i * n + k])`` over the thread range, with ``extra`` statements in the
    row body."""
    i, k, n = var("i", I64), var("k", I64), var("n", I64)
    lo, hi = var("range_begin", I64), var("range_end", I64)
    a, y, acc = var("A", Ptr(F64)), var("Y", Ptr(F64)), var("acc", F64)
    params = [param(n, "index.k"), param(a, "A.vals"), param(y, "Y.vals", output=True),
              param(lo, "range.begin.i"), param(hi, "range.end.i")]
    return function("k", params, for_(i, lo, hi, declare(acc, 0.0),
                                      for_(k, 0, n, assign(acc, add(acc, load(a, add(mul(i, n),
                                                                                      k))))),
                                      store(y, i, acc), *extra))


def test_the_jammed_nest_verifies_and_keeps_every_row_in_order():
    fn = _dot_nest()
    jammed = jam_rows(fn)
    verify(jammed, after="jam")
    text = format_function(jammed)
    assert text.count("for (") == 4          # group, its fused k loop; the rest: i, k
    for q in range(JAM):
        assert f"jam0_l{q}_acc = jam0_l{q}_acc + A[jam0_r{q} * n + jam0_c_k]" in text


def test_a_body_that_reads_its_output_or_branches_is_not_jammed():
    i, y = var("i", I64), var("Y", Ptr(F64))
    reads = _dot_nest(store(y, i, load(y, i)))
    assert jam_rows(reads) is reads
    branches = _dot_nest(if_(lt(i, 3), store(y, i, 0.0)))
    assert jam_rows(branches) is branches


def test_einsum_and_sparse_results_are_unchanged():
    a = sp.random(200, 50, density=0.1, format="csr", random_state=0)
    x = np.random.default_rng(0).standard_normal(50)
    np.testing.assert_allclose(ta.einsum("ij,j->i", a, x), a @ x)
    dense = a.toarray()
    np.testing.assert_allclose(ta.einsum("ij,j->i", dense, x), dense @ x)


# --- two-dimensional register tiles: rows jammed over a dense product's register tiles ---

GEMM = "C(i,j) = A(i,k) * B(k,j)"
TILED = "gemm(loops); jam(4, tiles=6)"
BLOCKED = "gemm(loops); split(k, 16, k0, k1); reorder(k0, i, k1, j); jam(4, tiles=6)"


def test_rows_of_register_tiles_are_jammed_by_their_own_count():
    text = ta.compile(GEMM, dtype="float32", schedule=TILED).source("ir")
    assert "jam0_r5" in text and "jam0_r6" not in text       # six rows, not four
    assert "register tiles of 64" in text
    # one fused k loop per tile width adds into all six rows' tiles
    assert "C_vals[jam0_l5_inv1 + (jam0_l5_j_lo + jam0_c_j_in)] +=" in text
    fewer = ta.compile(GEMM, dtype="float32", schedule="gemm(loops); jam(4, tiles=1)")
    assert "jam0" not in fewer.source("ir")


def test_the_llvm_kernel_tells_which_rows_never_overlap():
    llvm = ta.compile(GEMM, dtype="float32", schedule=TILED).source("llvm")
    assert "!alias.scope" in llvm and "!noalias" in llvm
    plain = ta.compile(GEMM, dtype="float32", schedule="gemm(loops); jam(1)").source("llvm")
    assert "!alias.scope" not in plain


def test_the_compilers_tile_rows_follow_the_hosts_registers():
    from tensoralg.codegen.llvm import host_has
    from tensoralg.codegen.target import register_tile_rows

    kernel = ta.compile(GEMM, dtype="float64", schedule="gemm(loops)")
    rows = register_tile_rows(256, host_has("avx512f"))
    jam = kernel.schedule.last(ta.schedule.Jam) if rows > 1 else None
    if rows > 1:
        assert jam is not None and jam.tile_rows == rows
        assert f"jam0_r{rows - 1}" in kernel.source("ir")
    # the printed schedule builds the same kernel
    again = ta.compile(GEMM, dtype="float64", schedule=str(kernel.schedule))
    # the kernel's name (its first line) follows the key
    assert again.source("ir").split("\n", 1)[1] == kernel.source("ir").split("\n", 1)[1]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("schedule", [TILED, BLOCKED, "gemm(loops); jam(2, tiles=7)"])
def test_jammed_tiles_match_numpy_across_every_width(schedule, dtype):
    # rows around six, columns across tiles of 64, 32, 16 and 8 lanes and their rest, k
    # around the cache block of 16 (and empty)
    kernel = ta.compile(GEMM, dtype=dtype, schedule=schedule)
    rng = np.random.default_rng(0)
    for m, n, k in [(0, 5, 3), (1, 1, 1), (5, 64, 16), (6, 65, 17), (7, 127, 33),
                    (13, 200, 5), (37, 8, 0), (12, 0, 4), (25, 31, 40)]:
        a = rng.integers(-9, 9, (m, k)).astype(dtype)
        b = rng.integers(-9, 9, (k, n)).astype(dtype)
        np.testing.assert_array_equal(kernel(A=a, B=b), a @ b, err_msg=f"{m}x{n}x{k}")


def test_jammed_tiles_under_thread_ranges_that_cut_groups(two_threads):
    rng = np.random.default_rng(3)
    a, b = rng.integers(-5, 5, (100_003, 9)).astype(np.float64), \
        rng.integers(-5, 5, (9, 70)).astype(np.float64)
    bound = ta.compile(GEMM, schedule=TILED).bind(A=a, B=b)
    assert len(bound.calls) == 2
    np.testing.assert_array_equal(bound(), a @ b)


def _tile_nest(row_indexed: bool):
    """``for (k ...) for (j = 0; j < 8; j++) Y[(i * 8 if row_indexed) + j] += A[i * n + k]``
    over the thread range: a register tile of the row's output, or (not row-indexed) a sum
    across rows into one output, which reduction=partials makes."""
    i, k, j, n = var("i", I64), var("k", I64), var("j", I64), var("n", I64)
    lo, hi = var("range_begin", I64), var("range_end", I64)
    a, y = var("A", Ptr(F64)), var("Y", Ptr(F64))
    params = [param(n, "index.k"), param(a, "A.vals"), param(y, "Y.vals", output=True),
              param(lo, "range.begin.i"), param(hi, "range.end.i")]
    at = add(mul(i, 8), j) if row_indexed else j
    return function("k", params, for_(i, lo, hi, for_(k, 0, n, for_(
        j, 0, 8, store(y, at, load(a, add(mul(i, n), k)), accumulate=True)))))


def test_a_tile_is_jammed_only_where_each_row_adds_into_its_own_elements():
    own = jam_rows(_tile_nest(True), tile_rows=3)
    verify(own, after="jam")
    text = format_function(own)
    assert "jam0_r2" in text
    from tensoralg.ir.nodes import RowOwner, Store
    from tensoralg.ir.rewrite import walk

    owners = {s.owner for s in walk(own.body) if isinstance(s, Store)}
    assert owners == {RowOwner("jam0", 0), RowOwner("jam0", 1), RowOwner("jam0", 2), None}
    shared = _tile_nest(False)
    assert jam_rows(shared, tile_rows=3) is shared      # the sum's order across rows stays
    # the rows count for reductions does not jam tiles
    assert "jam0" not in format_function(jam_rows(_tile_nest(True), rows=4, tile_rows=1))


STACK = "C(b,i,k) = A(b,i,j) * B(b,j,k)"


def test_the_rows_of_a_stack_of_products_are_jammed_below_its_thread_range():
    kernel = ta.compile(STACK, dtype="float32", schedule="gemm(loops); jam(4, tiles=6)")
    text = kernel.source("ir")
    assert "range.begin.b" in text and "jam0_r5" in text
    assert "jam0_g < n_i / 6" in text            # over i, inside the thread range over b
    assert "jam1" not in text                    # never a jam within a jam


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_jammed_stacks_match_numpy(dtype, two_threads):
    kernel = ta.compile(STACK, dtype=dtype, schedule="gemm(loops); jam(4, tiles=6)")
    rng = np.random.default_rng(5)
    for b, i, j, k in [(0, 3, 4, 5), (1, 1, 1, 1), (3, 5, 7, 64), (2, 13, 9, 70), (7, 6, 0, 33),
                       (40, 37, 16, 130)]:
        a = rng.integers(-9, 9, (b, i, j)).astype(dtype)
        c = rng.integers(-9, 9, (b, j, k)).astype(dtype)
        np.testing.assert_array_equal(kernel(A=a, B=c), np.einsum("bij,bjk->bik", a, c),
                                      err_msg=f"{b}x{i}x{j}x{k}")


def _stack_nest(disjoint: bool):
    """``for (b in range) for (i ...) for (k ...) for (j = 0; j < 8; j++) Y[(b * n + i) * 8 +
    j] += A[...]``: register tiles under a loop ``i`` that is not the thread range."""
    b_, i, k, j, n = (var(name, I64) for name in ("b", "i", "k", "j", "n"))
    lo, hi = var("range_begin", I64), var("range_end", I64)
    a, y = var("A", Ptr(F64)), var("Y", Ptr(F64))
    params = [param(n, "index.i"), param(a, "A.vals"), param(y, "Y.vals", output=True),
              param(lo, "range.begin.b"), param(hi, "range.end.b")]
    row = add(mul(add(mul(b_, n), i), 8), j)
    inner = for_(i, 0, n, for_(k, 0, n, for_(j, 0, 8, store(y, row, load(a, add(mul(i, n), k)),
                                                             accumulate=True))))
    import dataclasses
    inner = dataclasses.replace(inner, disjoint=disjoint)
    return function("k", params, for_(b_, lo, hi, inner))


def test_only_a_loop_lowering_marked_disjoint_is_jammed_inside_the_thread_range():
    marked = jam_rows(_stack_nest(True), tile_rows=3)
    verify(marked, after="jam")
    text = format_function(marked)
    assert "jam0_g < n / 3" in text and "range_end - range_begin" not in text   # over i
    # unmarked, only the thread range over b is jammed (its rows own theirs by construction)
    text = format_function(jam_rows(_stack_nest(False), tile_rows=3))
    assert "jam0_g < (range_end - range_begin) / 3" in text and "jam1" not in text


def test_lowering_marks_the_loops_over_a_dense_outputs_indices():
    from tensoralg.ir.nodes import For
    from tensoralg.ir.rewrite import walk

    kernel = ta.compile(STACK, schedule="gemm(loops); tile(0); jam(1)")
    loops = {s.var.name: s.disjoint for s in walk(kernel._default.function.body)
             if isinstance(s, For)}
    assert loops["i"] and not loops["j"]              # an output index; the summed one
    sparse = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "csr", "B": "csr",
                                                             "C": "csr"})
    assert not any(s.disjoint for s in walk(sparse._default.function.body)
                   if isinstance(s, For))            # appends in order: never


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_jammed_tiles_of_complex_values(dtype):
    kernel = ta.compile(GEMM, dtype=dtype, schedule=TILED)
    rng = np.random.default_rng(9)
    for m, n, k in [(7, 65, 5), (13, 19, 9)]:
        a = (rng.integers(-4, 4, (m, k)) + 1j * rng.integers(-4, 4, (m, k))).astype(dtype)
        b = (rng.integers(-4, 4, (k, n)) + 1j * rng.integers(-4, 4, (k, n))).astype(dtype)
        np.testing.assert_array_equal(kernel(A=a, B=b), a @ b)


STACK_FORMS = ["bij,bjk->bik", "bij,jk->bik", "ibj,bjk->bik", "bji,bjk->bki", "bij,bjk->ikb",
               "abij,abjk->abik", "bij,bkj->bik", "ij,bjk->bik"]


@pytest.mark.parametrize("seed", range(12))
def test_random_stacks_on_the_loop_nest_match_numpy(seed):
    # the loop nest (rows of each product jammed over its register tiles where the output's
    # last axis is contiguous) on random stack forms and sizes across the widths of the jam
    # (6 rows) and the tiles (64, 32, 16, 8 lanes and a rest), exact in integers
    rng = np.random.default_rng(seed)
    form = STACK_FORMS[seed % len(STACK_FORMS)]
    sizes = {c: int(rng.choice([1, 2, 5, 6, 7, 13, 33, 70])) for c in "abijk"}
    terms, _ = form.split("->")
    ops = [rng.integers(-5, 5, [sizes[c] for c in t]).astype(np.int64) for t in terms.split(",")]
    expected = np.einsum(form, *ops)
    np.testing.assert_array_equal(ta.einsum(form, *ops, schedule="gemm(loops)"), expected,
                                  err_msg=f"{form} {sizes}")
    floats = [op.astype(np.float32) for op in ops]
    np.testing.assert_array_equal(ta.einsum(form, *floats), expected.astype(np.float32),
                                  err_msg=f"{form} {sizes} float32")


MLP = "C(i,j) = max(sum(k, A(i,k) * B(k,j)) + b(j), 0)"


def test_a_row_workspace_gets_a_copy_for_every_jammed_row():
    # the fused epilogue sums a row into a workspace, then writes max(row + b, 0): each of
    # the six jammed rows sums into its own copy, allocated and freed beside the original
    kernel = ta.compile(MLP, dtype="float32", schedule="jam(4, tiles=6)")
    text = kernel.source("ir")
    assert "f32* jam0_w5__t0_vals = alloc(n_j);" in text and "free(jam0_w5__t0_vals);" in text
    assert "jam0_w6" not in text
    verify(kernel._default.function, after="jam")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("schedule", ["jam(4, tiles=6)", "jam(2, tiles=5)"])
def test_jammed_rows_with_workspaces_match_numpy(schedule, dtype, two_threads):
    kernel = ta.compile(MLP, dtype=dtype, schedule=schedule)
    rng = np.random.default_rng(4)
    for m, k, n in [(0, 3, 5), (1, 1, 1), (7, 9, 70), (13, 5, 129), (37, 16, 8),
                    (20_011, 3, 17)]:
        a = rng.integers(-9, 9, (m, k)).astype(dtype)
        b = rng.integers(-9, 9, (k, n)).astype(dtype)
        bias = rng.integers(-9, 9, n).astype(dtype)
        np.testing.assert_array_equal(kernel(A=a, B=b, b=bias), np.maximum(a @ b + bias, 0),
                                      err_msg=f"{m}x{k}x{n}")


def test_a_buffer_used_outside_the_loop_is_not_a_row_workspace():
    from tensoralg.ir.build import allocate, free

    i, k, j, n = (var(name, I64) for name in ("i", "k", "j", "n"))
    lo, hi = var("range_begin", I64), var("range_end", I64)
    a, y, w = var("A", Ptr(F64)), var("Y", Ptr(F64)), var("W", Ptr(F64))
    params = [param(n, "index.k"), param(a, "A.vals"), param(y, "Y.vals", output=True),
              param(lo, "range.begin.i"), param(hi, "range.end.i")]
    row = for_(i, lo, hi, for_(k, 0, n, for_(j, 0, 8, store(w, j, load(a, add(mul(i, n), k)),
                                                             accumulate=True))),
               for_(j, 0, 8, store(y, add(mul(i, 8), j), load(w, j))))
    import dataclasses

    # one row of a temporary for the loop over i (the workspace pass's fact): a copy a row
    clear = for_(j, 0, 8, store(w, j, 0.0))
    row_local = dataclasses.replace(row, body=dataclasses.replace(
        row.body, body=(clear, *row.body.body)))
    marked = dataclasses.replace(allocate(w, 8), row_of="i")
    inside = function("k", params, marked, row_local, free(w))
    text = format_function(jam_rows(inside, tile_rows=3))
    assert "jam0_w2_W" in text and "jam0_w3" not in text and "free(jam0_w2_W);" in text
    # not marked: W sums across rows (never cleared), so it is no row workspace: no jam
    unmarked = function("k", params, allocate(w, 8, True), row, free(w))
    assert "jam0" not in format_function(jam_rows(unmarked, tile_rows=3))
    # read once more after the loop: the buffer carries a value out, so no copies, no jam
    outside = function("k", params, marked, row_local, store(y, 0, load(w, 0)), free(w))
    assert "jam0" not in format_function(jam_rows(outside, tile_rows=3))
