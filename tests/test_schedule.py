"""Schedules: the text form, one error per mistake, legality, and scheduled kernels against the
unscheduled ones on random statements, formats and sizes that cross every split, tile, jam and
thread-range width."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.schedule import Jam, Parallelize, Reorder, Schedule, Split, parse_schedule

# ---------------------------------------------------------------------------------------------
# text form


@pytest.mark.parametrize("text", [
    "reorder(j, i)",
    "split(i, 64, i0, i1, guard); parallelize(i0)",
    "parallelize(j, reduction=partials, threads=2)",
    "serial(); tile(0); jam(1); workspaces(off); transpose_tiles(32)",
    "unroll(j, 4); vectorize(j, 8)",
    "vectorize(j, 8, tail=mask)",
    "fuse(i, j, ij); pos(ij, p, A)",
])
def test_text_form_round_trips(text):
    schedule = parse_schedule(text)
    assert str(schedule) == text
    assert parse_schedule(str(schedule)) == schedule
    assert Schedule.parse(repr(schedule)[len("Schedule.parse('"):-2]) == schedule


def test_builder_and_text_agree():
    built = Schedule().reorder("j", "i").split("i", 8).parallelize("i0", threads=2).jam(1)
    assert built == parse_schedule("reorder(j, i); split(i, 8); parallelize(i0, threads=2); "
                                   "jam(1)")
    assert built.commands == (Reorder(("j", "i")), Split("i", 8, "i0", "i1"),
                              Parallelize("i0", threads=2), Jam(1))


@pytest.mark.parametrize("text, message, caret", [
    ("reorder(", r"expected '\)'", 8),
    ("reorder(i", r"expected '\)'", 9),
    ("spilt(i, 4)", r"unknown scheduling command 'spilt'", 0),
    ("split(i)", r"split takes 2 to 5 arguments, got 1", 0),
    ("split(i, four)", r"expected a number", 9),
    ("split(i, 0)", r"the factor must be a positive integer", 0),
    ("parallelize(i, reduction=maybe)", r"'maybe' is not one of none, atomics, partials", 0),
    ("parallelize(i, colour=red)", r"parallelize has no option 'colour'", 15),
    ("reorder(i) reorder(j)", r"expected ';' between", 11),
    ("reorder(i, i)", r"names an index twice", 0),
    ("tile(17)", r"multiple of 16 bytes", 0),
    ("jam(0)", r"rows must be a positive integer", 0),
    ("workspaces(maybe)", r"expected on or off", 11),
    ("reorder(i) $", r"unexpected character", 11),
])
def test_each_malformed_schedule_is_a_notation_error_with_a_caret(text, message, caret):
    with pytest.raises(ta.NotationError, match=message) as info:
        parse_schedule(text)
    assert info.value.text == text
    assert info.value.position == caret


def test_schedule_of_the_wrong_type():
    with pytest.raises(ta.NotationError, match=r"must be a ta.Schedule or its text"):
        ta.compile("y(i) = A(i,j) * x(j)", schedule=3.5)


# ---------------------------------------------------------------------------------------------
# legality: refused with the command and the conflict named

SPMV = "y(i) = A(i,j) * x(j)"


@pytest.mark.parametrize("formats, schedule, error, message", [
    ({"A": "ds"}, "reorder(k)", ta.NotationError, r"reorder\(k\): the statement .* has no index k"),
    ({"A": "ds"}, "reorder(j, i)", ta.CompileError,
     r"reorder\(j, i\): .*operand A is stored as .*its levels run i, j.*formats="),
    ({"A": "ds"}, "parallelize(j)", ta.CompileError,
     r"parallelize\(j\): .*j must be its outermost loop"),
    ({"A": ta.CSC}, "parallelize(j)", ta.CompileError,
     r"j is summed over .* use reduction=partials"),
    ({"A": "ds"}, "parallelize(i, reduction=atomics)", ta.UnsupportedError,
     r"atomic reductions are for GPU kernels.*partials"),
    ({"A": "ds"}, "parallelize(i, unit=gpu-blocks)", ta.UnsupportedError,
     r"GPU units run with backend=.cuda."),
    ({"A": "ds"}, "split(j, 4)", ta.CompileError, r"split\(j\): no counted loop runs that index"),
    ({"A": "ds"}, "split(i, 4); parallelize(i1)", ta.UnsupportedError,
     r"only the outer loop of a split \(i0\)"),
    ({"A": "ds"}, "pos(j, p, A)", ta.UnsupportedError, r"pos\(j, p, A\): pos takes a fused"),
    ({"A": "ds"}, "fuse(i, j)", ta.UnsupportedError,
     r"fuse\(i, j, ij\): lowering carries out fuse only as the first step of a position"),
    ({"A": "ds"}, "fuse(i, j, f); pos(f, p)", ta.UnsupportedError, r"name the tensor"),
    ({"A": "ds"}, "fuse(i, j, f); pos(f, p, A); parallelize(p)", ta.CompileError,
     r"ranges of positions cut rows.*reduction=partials"),
    ({"A": "ds"}, "fuse(i, j, f); pos(f, p, A); split(i, 4)", ta.UnsupportedError,
     r"split p instead"),
    ({"A": "ds"}, "fuse(i, j, f); split(f, 4)", ta.UnsupportedError, r"split by position"),
    ({"A": "dense"}, "fuse(i, j, f); pos(f, p, A)", ta.CompileError,
     r"stored as dense.*must be dense over i, then compressed over j"),
    ({"A": "coo"}, "fuse(i, j, f); pos(f, p, A)", ta.CompileError, r"must be dense over i"),
    ({"A": "ds", "y": "s"}, "fuse(i, j, f); pos(f, p, A)", ta.CompileError,
     r"writes dense outputs only"),
    ({"A": "ds"}, "split(i, 4, j, i1)", ta.NotationError, r"j is already an index"),
    ({"A": "ds"}, "pos(i, p, B)", ta.NotationError, r"reads no tensor B"),
])
def test_illegal_schedules_are_refused(formats, schedule, error, message):
    with pytest.raises(error, match=message):
        kernel = ta.compile(SPMV, formats=formats, schedule=schedule)
        kernel(A=sp.random_array((5, 4), density=0.5, format="csr", random_state=0),
               x=np.ones(4))


@pytest.mark.parametrize("statement, formats, schedule, error, message", [
    ("C(i,j) = A(i,j) + B(i,j)", {"A": "ds", "B": "ds", "C": "ds"},
     "split(j, 4, j0, j1); reorder(j0, i, j1)", ta.CompileError,
     r"cannot move the block loop j0 outward: the output is stored as"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "dd", "B": "ds", "Y": "dd"},
     "split(k, 4, k0, k1); reorder(k0, i, j, k1)", ta.CompileError,
     r"block loop k0 was moved outward, but the loop over k runs through the stored entries "
     r"of B"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "ds"}, "split(k, 4, k0, k1); reorder(k1, k0, i)",
     ta.CompileError, r"k1 runs inside the block loop k0"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "ds"},
     "split(k, 4, k0, k1); reorder(k0, i, j, k1); parallelize(k0)", ta.UnsupportedError,
     r"the block loop k0 was moved outward; threads take the outermost loop"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "ds"},
     "fuse(i, j, f); pos(f, p, A); split(k, 4, k0, k1); reorder(k0, i, j, k1)",
     ta.UnsupportedError, r"together with a position split"),
    # an inner loop cannot move: refused, not run in another order
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "dd"},
     "gemm(loops); split(i, 8, i0, i1); split(j, 16, j0, j1); reorder(i0, j0, i1, j1)",
     ta.CompileError, r"reorder\(i0, j0, i1, j1\): the loops would run j0, i0, i1, .*a split's "
                      r"inner loop stays where the loop over its index runs"),
])
def test_block_loops_moved_outward_are_refused_where_they_would_change_results(
        statement, formats, schedule, error, message):
    with pytest.raises(error, match=message):
        ta.compile(statement, formats=formats, schedule=schedule)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("statement, formats, schedule", [
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "ds"},
     "split(k, 16, k0, k1); reorder(k0, i, j, k1); parallelize(i, threads=2)"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "ds"},
     "split(k, 5, k0, k1); reorder(i, k0, j, k1); parallelize(i, threads=2)"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "dd"}, "split(k, 7, k0, k1); reorder(k0, i, j, k1)"),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "dd"},
     "split(j, 32, j0, j1); reorder(j0, i, k, j1); parallelize(i, threads=2); jam(4)"),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "dd"},
     "split(i, 3, i0, i1); reorder(i0, j, k, i1); parallelize(j, threads=2)"),
    ("C(i,j) = A(i,j) * B(i,j)", {"A": "dd", "B": "dd"},
     "split(j, 9, j0, j1); reorder(j0, i, j1)"),
    # blocks of a summed index: each adds its part into the output
    (SPMV, {"A": "dd"}, "split(j, 16, j0, j1); reorder(j0, i, j1); parallelize(i, threads=2)"),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "dd"},
     "split(j, 32, j0, j1); split(k, 4, k0, k1); reorder(j0, k0, i, k1, j1); "
     "parallelize(i, threads=2)"),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "dd"}, "split(j, 8, j0, j1); reorder(j0, i, j1, k)"),
])
@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_block_loops_moved_outward_match_the_unscheduled_kernel(statement, formats, schedule,
                                                                dtype, backend):
    # Sizes cross every block (37 rows, 70 columns: a last block cut short), a register tile
    # and a two-way thread split; the sparse operand has all-zero rows.
    rng = np.random.default_rng(11)
    plain = ta.compile(statement, formats=formats, dtype=dtype)
    operands = {a.tensor: _operand(a.tensor, a.indices, formats, dtype, rng)
                for a in _accesses(plain)}
    kernel = ta.compile(statement, formats=formats, dtype=dtype, backend=backend,
                        schedule=schedule)
    assert "reorder(" in str(kernel.schedule).split("split(", 1)[1], kernel.schedule
    again = ta.compile(statement, formats=formats, dtype=dtype, backend=backend,
                       schedule=str(kernel.schedule))
    assert again.source("ir").split("\n", 1)[1] == kernel.source("ir").split("\n", 1)[1]
    expected = _dense(plain(**operands))
    got = _dense(kernel(**operands))
    # The same sums in the same order; LLVM may contract a different multiply-add into an
    # FMA in the differently shaped loops, hence a tolerance of a few ulps.
    tolerance = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance,
                               err_msg=f"{statement} {schedule}")
    np.testing.assert_allclose(_dense(kernel.bind(**operands)()), expected, rtol=tolerance,
                               atol=tolerance)


def test_a_reorder_that_moves_no_block_is_a_plain_split():
    # i0 is listed before i1 only: nothing moves, so a statement of two nests may take it
    kernel = ta.compile("y(i) = A(i,j) * x(j) + b(i)", formats={"A": "ds"},
                        schedule="split(i, 16, i0, i1); reorder(i0, i1, j)")
    assert "reorder(i0" not in str(kernel.schedule) and "split(i, 16" in str(kernel.schedule)
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=4)
    x, bias = np.arange(30.0), np.ones(40)
    np.testing.assert_allclose(kernel(A=A, x=x, b=bias), A @ x + bias, rtol=1e-12)


def test_doubly_compressed_operands_are_not_parallelized_by_a_schedule():
    # A DCSR output is assembled on threads (tests/test_parallel_sparse_outputs.py), but over
    # DCSR operands the outer loop co-iterates their compressed rows: no counted loop to split.
    with pytest.raises(ta.CompileError, match=r"outer loop over i co-iterates a compressed "
                                              r"operand"):
        ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "ss", "B": "ss", "C": "ss"},
                   schedule="parallelize(i)")


# ---------------------------------------------------------------------------------------------
# what a kernel says it runs


def test_ir_text_speaks_in_the_statements_own_index_names():
    """The cache shares one program among statements equal up to index names; the IR text
    (and the C source) of each is in its own names, and both kernels compute the same."""
    first = ta.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "ds"})
    second = ta.compile("C(r,c) = A(r,m) * B(m,c)", formats={"A": "ds"})
    assert second._default is first._default          # one compiled program
    text = second.source("ir")
    assert "loop order r, m, c" in text and "for (i64 r = range_begin" in text
    assert "loop order i, j, k" in first.source("ir")
    assert "r < range_end" in second.source("c")
    A = sp.random(30, 20, density=0.2, format="csr", random_state=0)
    B = np.random.default_rng(0).random((20, 7))
    np.testing.assert_allclose(second(A=A, B=B), A @ B)


def test_kernel_schedule_states_the_compilers_choices_and_reproduces_the_kernel():
    k = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"})
    assert str(k.schedule) == "reorder(i, k, j); parallelize(i); tile(256)"
    again = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"}, schedule=k.schedule)
    body = k.source("ir").split("\n", 1)[1]
    assert again.source("ir").split("\n", 1)[1] == body
    assert str(again.schedule) == str(k.schedule)


def test_turning_a_pass_off_changes_the_code_and_the_schedule():
    plain = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"})
    untiled = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"}, schedule="tile(0)")
    assert "i_tiles" in plain.source("ir") and "i_tiles" not in untiled.source("ir") \
        or "j_tiles" in plain.source("ir") and "j_tiles" not in untiled.source("ir")
    assert "tile(0)" in str(untiled.schedule)


def test_schedules_are_part_of_the_kernel_key():
    A = sp.random_array((40, 30), density=0.2, format="csr", random_state=1)
    x = np.arange(30.0)
    plain = ta.einsum("ij,j->i", A, x)
    split = ta.einsum("ij,j->i", A, x, schedule="split(i, 8)")
    np.testing.assert_allclose(split, plain)
    k1 = ta.compile(SPMV, formats={"A": "ds"}, schedule="split(i, 8)")
    k2 = ta.compile(SPMV, formats={"A": "ds"}, schedule="split(i, 16)")
    assert "/ 8" in k1.source("ir") and "/ 16" in k2.source("ir")


def test_partials_run_a_reduction_over_threads_exactly():
    A = sp.random_array((300, 2000), density=0.05, format="csc", random_state=2)
    x = np.random.default_rng(0).random(2000)
    k = ta.compile(SPMV, formats={"A": ta.CSC},
                   schedule="parallelize(j, reduction=partials, threads=2)")
    assert "each sums into its own copy" in k.source("ir")
    np.testing.assert_allclose(k(A=A, x=x), A @ x, rtol=1e-12)
    total = ta.einsum("ij->", A.toarray(), schedule="parallelize(i, reduction=partials, "
                                                       "threads=3)")
    assert total == pytest.approx(A.sum(), rel=1e-12)


def test_threads_never_share_a_split_block(monkeypatch):
    # Accumulating into the output: a block run by two threads would be added twice. Any work
    # is split, so that the compiler's own thread split meets the schedule's blocks too.
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_WORK_PER_THREAD_NATIVE", 1)
    A = sp.random_array((64, 9000), density=0.05, format="csr", random_state=5)
    B = np.random.default_rng(2).random((9000, 3))
    ta.set_num_threads(2)
    try:
        for schedule in ("split(i, 7)", "split(i, 7); parallelize(i0, threads=2)",
                         "split(i, 7); parallelize(i, threads=2)"):
            got = ta.einsum("ik,kj->ij", A, B, schedule=schedule)
            np.testing.assert_allclose(got, A @ B, rtol=1e-12, err_msg=schedule)
    finally:
        ta.set_num_threads(ta.api.kernel_cache().options.threads or __import__("os").cpu_count())


def test_a_bound_call_of_a_partials_kernel_stays_exact():
    A = sp.random_array((50, 400), density=0.1, format="csc", random_state=3)
    x = np.random.default_rng(1).random(400)
    k = ta.compile(SPMV, formats={"A": ta.CSC}, schedule="parallelize(j, reduction=partials)")
    np.testing.assert_allclose(k.bind(A=A, x=x)(), A @ x, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# scheduled kernels give the unscheduled kernel's results

CORPUS = [
    ("y(i) = A(i,j) * x(j)", [{"A": "ds"}, {"A": ta.CSC}, {"A": "dd"}, {"A": "ss"}]),
    ("C(i,j) = A(i,k) * B(k,j)", [{"A": "ds"}, {"A": "dd"}, {"A": ta.CSC}]),
    ("C(i,j) = A(i,j) * B(i,k) * D(k,j)", [{"A": "ds"}]),
    ("y(i) = A(i,j) * x(j) + b(i)", [{"A": "ds"}, {"A": "dd"}]),
    ("C(i,j) = A(i,j) + B(i,j)", [{"A": "ds", "B": "ds"}, {"A": "dd", "B": "ds"}]),
    ("y(j) = A(i,j) * x(i)", [{"A": "ds"}, {"A": "dd"}]),
    ("C(i,j) = max(sum(k, A(i,k) * B(k,j)) + b(i), 0)", [{"A": "dd"}, {"A": "ds"}]),
    ("a = A(i,j) * B(i,j)", [{"A": "ds"}, {"A": "dd"}]),
]
# Sizes that cross a split factor, a register tile (32 f64 / 64 f32), its half and quarter
# tiles, a jam of 4 (and of 5 and 6 rows over tiles) and a two-way thread split, with all-zero
# rows in the sparse operands.
SIZES = {"i": 37, "j": 70, "k": 9}


def _operand(name, indices, formats, dtype, rng):
    shape = tuple(SIZES[i] for i in indices)
    if len(shape) < 2 or formats.get(name, "dd") in ("dd", "d"):
        return rng.standard_normal(shape).astype(dtype)
    matrix = sp.random_array(shape, density=0.15, format="csr", dtype=dtype,
                             random_state=int(rng.integers(1 << 30)))
    matrix = sp.csr_array(matrix)
    matrix.data[:] = rng.standard_normal(matrix.nnz).astype(dtype)
    rows = rng.choice(shape[0], size=3, replace=False)
    dense = matrix.toarray()
    dense[rows] = 0                      # all-zero rows
    return ta.Tensor.from_numpy(dense, format=formats[name])


def _schedules(kernel, rng):
    """Legal schedules for ``kernel``: reorders of its loops, splits of its counted loops,
    threads on its outer loop (with partials when that loop sums), pass settings and hints."""
    applied = kernel.schedule
    order = applied.last(Reorder).indices if applied.last(Reorder) else ()
    out = kernel.statement.lhs.indices
    found = []
    for permutation in itertools.permutations(order):
        found.append(Schedule().reorder(*permutation))
    for index in order:
        found.append(Schedule().split(index, int(rng.choice([1, 3, 4, 16, 64]))))
    if order:
        outer = order[0]
        reduction = "none" if outer in out else "partials"
        found.append(Schedule().split(outer, 5).parallelize(f"{outer}0", reduction=reduction,
                                                            threads=2))
        found.append(Schedule().parallelize(outer, reduction=reduction, threads=3))
        found.append(Schedule().unroll(order[-1], 4).vectorize(order[-1], 4))
        found.append(Schedule().vectorize(order[-1], 8, tail="mask"))
    for index in order[1:]:        # a cache block of a later loop, moved outermost
        rest = [f"{index}1" if other == index else other for other in order]
        found.append(Schedule().split(index, int(rng.choice([2, 5, 16]))).reorder(
            f"{index}0", *rest))
    found.append(Schedule().tile(0).jam(1).workspaces(False).transpose_tiles(0))
    found.append(Schedule().tile(64).jam(2).serial())
    found.append(Schedule().jam(3, tiles=5))     # two-dimensional register tiles of 5 rows
    return found


def _cases():
    for (statement, format_list), dtype in itertools.product(CORPUS, ["float64", "float32"]):
        for formats in format_list:
            yield statement, formats, dtype


@pytest.mark.parametrize("statement, formats, dtype", list(_cases()))
def test_scheduled_kernels_match_the_unscheduled_kernel(statement, formats, dtype):
    rng = np.random.default_rng([len(statement), len(formats), len(dtype)])
    plain = ta.compile(statement, formats=formats, dtype=dtype)
    operands = {access.tensor: _operand(access.tensor, access.indices, formats, dtype, rng)
                for access in _accesses(plain)}
    expected = _dense(plain(**operands))
    tried = 0
    for schedule in _schedules(plain, rng):
        try:
            kernel = ta.compile(statement, formats=formats, dtype=dtype, schedule=schedule)
            got = kernel(**operands)
        except ta.CompileError as err:
            # Refusals the formats explain: a reorder against a compressed operand's storage
            # order, a split of a loop over a compressed level, threads on a loop that
            # co-iterates one (or on a sparse output).
            explained = (schedule.last(Reorder) and "stored as" in str(err)) or \
                (schedule.last(Split) and "no counted loop runs" in str(err)) or \
                (schedule.last(Parallelize) and "cannot run on several threads" in str(err)) or \
                ("cannot move the block loop" in str(err)) or \
                ("moved outward, but the loop over" in str(err))
            assert explained, f"{schedule}: {err}"
            continue
        tried += 1
        tolerance = 1e-4 if dtype == "float32" else 1e-10
        np.testing.assert_allclose(_dense(got), expected, rtol=tolerance, atol=tolerance,
                                   err_msg=f"{statement} {formats} schedule {schedule}")
    assert tried >= 4


@pytest.mark.parametrize("statement, formats", [
    ("y(i) = A(i,j) * x(j)", {"A": ta.CSC}),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "ds"}),
    ("C(i,j) = max(sum(k, A(i,k) * B(k,j)) + b(i), 0)", {"A": "dd"}),
])
def test_scheduled_c_kernels_match_llvm(statement, formats):
    rng = np.random.default_rng(7)
    plain = ta.compile(statement, formats=formats)
    operands = {a.tensor: _operand(a.tensor, a.indices, formats, "float64", rng)
                for a in _accesses(plain)}
    order = plain.schedule.last(Reorder).indices
    outer = order[0]
    reduction = "none" if outer in plain.statement.lhs.indices else "partials"
    schedule = Schedule().split(outer, 8).parallelize(f"{outer}0", reduction=reduction,
                                                      threads=2).unroll(order[-1], 2)
    c = ta.compile(statement, formats=formats, backend="c", schedule=schedule)
    llvm = ta.compile(statement, formats=formats, schedule=schedule)
    assert ("#pragma GCC unroll 2" in c.source("c")) == ("hints: unroll 2" in c.source("ir"))
    np.testing.assert_allclose(_dense(c(**operands)), _dense(llvm(**operands)), rtol=1e-12)
    np.testing.assert_allclose(_dense(c(**operands)), _dense(plain(**operands)), rtol=1e-10)


def _accesses(kernel):
    from tensoralg.notation.ast import accesses

    return list(dict.fromkeys(accesses(kernel.statement.rhs)))


def _dense(x):
    if isinstance(x, ta.Tensor):
        return x.to_numpy()
    if sp.issparse(x):
        return x.toarray()
    return np.asarray(x)


def test_random_schedule_choice_is_reproducible():
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    k = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"})
    assert [str(s) for s in _schedules(k, rng_a)] == [str(s) for s in _schedules(k, rng_b)]


def test_hints_reach_the_loop_in_every_backend():
    k = "y(i) = A(i,j) * x(j)"
    schedule = Schedule().unroll("j", 4).vectorize("j", 2)
    llvm = ta.compile(k, formats={"A": "ds"}, schedule=schedule)
    assert "// hints: unroll 4, vectorize 2" in llvm.source("ir")
    assert "unroll(j, 4); vectorize(j, 2)" in str(llvm.schedule)
    assert '!"llvm.loop.unroll.count", i32 4' in _unoptimised_llvm(llvm)
    c = ta.compile(k, formats={"A": "ds"}, schedule=schedule, backend="c")
    assert "#pragma GCC unroll 4" in c.source("c")
    assert "#pragma unroll 4" in c.source("cuda")
    A = sp.random_array((20, 30), density=0.3, format="csr", random_state=4)
    np.testing.assert_allclose(c(A=A, x=np.ones(30)), A @ np.ones(30))
    np.testing.assert_allclose(llvm(A=A, x=np.ones(30)), A @ np.ones(30))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_masked_tail_reaches_llvm_and_changes_no_result(dtype):
    """``vectorize(j, 8, tail=mask)`` asks LLVM to fold the loop's tail into masked vectors;
    rows shorter than a vector, empty rows and one long row give scipy's sums."""
    schedule = "vectorize(j, 8, tail=mask)"
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=schedule, dtype=dtype)
    assert "// hints: unroll auto, vectorize 8, masked tail" in k.source("ir")
    assert str(k.schedule).endswith("vectorize(j, 8, tail=mask); parallelize(i)")
    assert '!"llvm.loop.vectorize.predicate.enable", i1 1' in _unoptimised_llvm(k)
    plain = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="vectorize(j, 8)")
    assert "predicate" not in _unoptimised_llvm(plain)
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 13, 300)
    lengths[7] = 900
    dense = np.zeros((300, 1000), dtype)
    for row, n in enumerate(lengths):
        dense[row, rng.choice(1000, n, replace=False)] = rng.standard_normal(n)
    A, x = sp.csr_array(dense), rng.standard_normal(1000).astype(dtype)
    tolerance = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(k(A=A, x=x), dense @ x, rtol=tolerance, atol=tolerance)
    c = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule=schedule, backend="c",
                   dtype=dtype)
    assert "vectorize 8 with a masked tail: left to the C compiler" in c.source("c")
    np.testing.assert_allclose(c(A=A, x=x), dense @ x, rtol=tolerance, atol=tolerance)


def test_one_lane_turns_vectorizing_off_without_llvm_remarks(capfd):
    """``vectorize(j, 1)`` asks for no vectors; LLVM, asked to vectorize at width 1, tried
    interleaving alone and printed "loop not interleaved" on stderr."""
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, schedule="vectorize(j, 1)")
    A = sp.random_array((50, 40), density=0.3, format="csr", random_state=1)
    np.testing.assert_allclose(k(A=A, x=np.ones(40)), A @ np.ones(40))
    ta.wait_for_optimised()
    assert "<8 x double>" not in k.source("llvm")
    assert "not interleaved" not in capfd.readouterr().err


def test_a_hint_on_a_loop_a_pass_rebuilt_is_not_claimed():
    k = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "ds"}, schedule="unroll(j, 4)")
    assert "hints:" not in k.source("ir")            # the register tiles made new loops
    assert "unroll" not in str(k.schedule)


def _unoptimised_llvm(kernel):
    from tensoralg.codegen.llvm import emit_module

    return str(emit_module(kernel._default.function))


def test_the_cli_takes_a_schedule_and_prints_it(capsys):
    from tensoralg.cli import main

    assert main(["compile", SPMV, "-f", "A:csr", "--schedule", "split(i, 8)",
                 "--emit", "schedule"]) == 0
    assert capsys.readouterr().out.strip() == \
        "reorder(i, j); split(i, 8, i0, i1, guard); vectorize(j, 8, tail=adaptive); " \
        "parallelize(i)"
    assert main(["compile", SPMV, "-f", "A:csr", "--schedule", "reorder(j, i)"]) == 2
    assert "operand A is stored as csr" in capsys.readouterr().err
    assert main(["compile", SPMV, "--schedule", "split(i"]) == 2
    assert "expected ')' in the schedule" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# sparse outputs assembled by several threads, joined by the runtime

@pytest.mark.parametrize("threads", [2, 3, 7])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_sparse_outputs_assembled_in_ranges_match_scipy(threads, dtype):
    rng = np.random.default_rng(threads)
    A = sp.random_array((61, 45), density=0.2, format="csr", dtype=dtype, random_state=1)
    B = sp.random_array((45, 61), density=0.2, format="csr", dtype=dtype, random_state=2)
    C = sp.random_array((61, 45), density=0.2, format="csr", dtype=dtype, random_state=3)
    A = sp.csr_array(A.toarray() * (rng.random((61, 1)) > 0.3))   # all-zero rows
    U, V = rng.random((61, 8)).astype(dtype), rng.random((8, 45)).astype(dtype)
    schedule = f"parallelize(i, threads={threads})"
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    cases = [
        ("ik,kj->ij", (A, B), A @ B),
        ("ij,ij->ij", (A, C), A.multiply(C)),
        ("ij,ik,kj->ij", (A, U, V), A.multiply(U @ V)),
    ]
    for subscripts, operands, expected in cases:
        got = ta.einsum(subscripts, *operands, schedule=schedule)
        assert sp.issparse(got) and got.has_sorted_indices, subscripts
        np.testing.assert_allclose(got.toarray(), expected.toarray(), rtol=tolerance,
                                   atol=tolerance, err_msg=subscripts)
    added = ta.compile("D(i,j) = A(i,j) + C(i,j)", formats={"A": "ds", "C": "ds"},
                       dtype=dtype, schedule=schedule)(A=A, C=C)
    np.testing.assert_allclose(_dense(added), (A + C).toarray(), rtol=tolerance)


def test_the_compilers_own_split_of_a_sparse_output_matches_one_thread(monkeypatch):
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_WORK_PER_THREAD", 1)
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_WORK_PER_THREAD_NATIVE", 1)
    A = sp.random_array((300, 300), density=0.05, format="csc", random_state=4)
    B = sp.random_array((300, 300), density=0.05, format="csc", random_state=5)
    ta.set_num_threads(2)
    try:
        got = ta.einsum("ik,kj->ij", A, B)     # CSC: the ranges run over columns
        assert got.format == "csc"
        np.testing.assert_allclose(got.toarray(), (A @ B).toarray(), rtol=1e-12)
        empty = sp.csr_array((0, 5))
        assert ta.einsum("ij,ij->ij", empty, empty, schedule="parallelize(i, threads=2)"
                         ).shape == (0, 5)
    finally:
        ta.set_num_threads(__import__("os").cpu_count())


def test_dense_outputs_split_on_the_native_pool_match_one_thread(monkeypatch):
    """Plain calls hand their ranges to the native pool (runtime/native_split.py), from far
    less work than through Python threads; every range count gives the one-thread result."""
    from tensoralg.runtime.pool import native_pool_supported

    if not native_pool_supported():
        pytest.skip("no native pool on this platform")
    monkeypatch.setattr("tensoralg.runtime.threads.MIN_WORK_PER_THREAD_NATIVE", 1)
    A = sp.random_array((203, 150), density=0.1, format="csr", random_state=8)
    X = np.random.default_rng(8).standard_normal((150, 19))
    ta.set_num_threads(3)
    try:
        for k in (2, 3, 5):
            got = ta.einsum("ij,jk->ik", A, X, schedule=f"parallelize(i, threads={k})")
            np.testing.assert_allclose(got, A @ X, rtol=1e-12)
        np.testing.assert_allclose(ta.einsum("ij,j->i", A, X[:, 0]), A @ X[:, 0], rtol=1e-12)
        assert any(key[1] in (2, 3, 5) for key in ta.api.kernel_cache().splits)
    finally:
        ta.set_num_threads(__import__("os").cpu_count())


# position splits: fuse(i, j, f); pos(f, p, A) balances chunks and threads by nonzeros


def _skewed(rows, cols, rng, dtype):
    """A power-law matrix with empty rows, one long row and unsorted-free canonical CSR."""
    lengths = np.minimum(cols, (rng.pareto(1.2, rows) * 2).astype(int))
    lengths[rng.random(rows) < 0.3] = 0
    if rows:
        lengths[rng.integers(rows)] = cols              # a full row
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    indices = np.concatenate([np.sort(rng.choice(cols, n, replace=False)) for n in lengths]
                             ).astype(np.int32) if rows else np.zeros(0, np.int32)
    data = rng.integers(-4, 5, len(indices)).astype(dtype)
    matrix = sp.csr_array((data, indices, indptr), shape=(rows, cols))
    matrix.has_sorted_indices = True        # built sorted: bound in place, not copied
    return matrix


POSITION_SCHEDULES = [
    "fuse(i, j, f); pos(f, p, A)",
    "fuse(i, j, f); pos(f, p, A); split(p, 1)",
    "fuse(i, j, f); pos(f, p, A); split(p, 7)",
    "fuse(i, j, f); pos(f, p, A); parallelize(p, reduction=partials, threads=2)",
    "fuse(i, j, f); pos(f, p, A); parallelize(p, reduction=partials, threads=5)",
    "fuse(i, j, f); pos(f, p, A); split(p, 16); parallelize(p0, reduction=partials, threads=3)",
    "fuse(i, j, f); pos(f, p, A); parallelize(p, reduction=partials)",
]


@pytest.mark.parametrize("schedule", POSITION_SCHEDULES)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_position_splits_match_the_reference(schedule, dtype, backend):
    rng = np.random.default_rng(len(schedule))
    spmv = ta.compile(SPMV, formats={"A": "csr"}, dtype=dtype, schedule=schedule,
                      backend=backend)
    spmm = ta.compile("Y(i,k) = A(i,j) * B(j,k)", formats={"A": "csr"}, dtype=dtype,
                      schedule=schedule, backend=backend)
    for rows, cols in [(40, 30), (1, 5), (7, 1), (0, 4), (5, 0), (300, 200)]:
        A = _skewed(rows, cols, rng, dtype)
        x = rng.integers(-3, 4, cols).astype(dtype)
        B = rng.integers(-3, 4, (cols, 5)).astype(dtype)
        for _ in range(2):                          # the first call and the remembered one
            np.testing.assert_array_equal(spmv(A=A, x=x), A @ x)
            np.testing.assert_array_equal(spmm(A=A, B=B), A @ B)
        np.testing.assert_array_equal(spmv.bind(A=A, x=x)(), A @ x)
        np.testing.assert_array_equal(
            ta.einsum("ij,j->i", A, x, schedule=schedule), A @ x)


def test_a_position_split_over_columns_of_a_csc_matrix():
    rng = np.random.default_rng(3)
    A = _skewed(60, 50, rng, "float64").tocsc()
    x = rng.standard_normal(50)
    k = ta.compile(SPMV, formats={"A": "csc"},
                   schedule="fuse(j, i, f); pos(f, p, A); split(p, 8); "
                            "parallelize(p0, reduction=partials, threads=3)")
    np.testing.assert_allclose(k(A=A, x=x), A @ x, rtol=1e-12)
    assert "pos(f, p, A)" in str(k.schedule)


def test_a_position_split_runs_the_single_nonzero_and_all_zero_cases():
    for A in (sp.csr_array((np.array([2.0]), np.array([3]), np.array([0, 0, 1, 1])),
                           shape=(3, 5)),
              sp.csr_array((3, 5))):
        k = ta.compile(SPMV, formats={"A": "csr"},
                       schedule="fuse(i, j, f); pos(f, p, A); "
                                "parallelize(p, reduction=partials, threads=4)")
        np.testing.assert_array_equal(k(A=A, x=np.arange(5.0)), A @ np.arange(5.0))
