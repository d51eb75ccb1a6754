"""Loop orders of all-dense nests (``lower/concretize.py``: ``dense_order``, ``dense_score``).

An all-dense nest runs the order whose innermost loop reads every operand contiguously and, if
it can, runs over an output index inside a sum (the register tile's form). A dot-product stack
``bqd,bkd->bqk`` gets it by reading ``B`` transposed: a copy the runtime makes per call where
the loops re-read it enough (``api.copies_pay``, ``DENSE_COPY_REUSE``), the dot products
(``LoopNest.kept_order``) otherwise. These tests check the orders chosen, both variants'
results against NumPy across sizes that cross tile, jam and thread widths, dtypes, empty and
zero-size inputs, bound calls and the schedule's round trip.
"""
import numpy as np
import pytest

import tensoralg as ta
from tensoralg.api import DENSE_COPY_REUSE, RELAYOUT_MIN_VALUES, relaid
from tensoralg.formats.format import Format, dense
from tensoralg.lower.concretize import concretize, kept_layouts
from tensoralg.notation import parse_statement
from tensoralg.notation.ast import accesses

DOTS = "C(b,q,k) = A(b,q,d) * B(b,k,d)"


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    from tensoralg import api

    monkeypatch.setattr(api, "_cache", api.KernelCache(api.CompileOptions(cache_dir=None)))


def _program(text: str, formats: dict | None = None):
    stmt = parse_statement(text)
    names = {a.tensor: len(a.indices) for a in accesses(stmt.rhs)}
    given = {name: dense(rank) for name, rank in names.items()}
    given.update(formats or {})
    return concretize(stmt, given, {}, np.dtype(np.float64), dense(len(stmt.lhs.indices)))


def test_dot_products_read_the_second_operand_transposed():
    program = _program(DOTS)
    nest = program.nests[-1]
    assert nest.loop_order == ("b", "q", "d", "k")
    assert nest.kept_order == ("b", "q", "k", "d")
    assert dict(program.conversions) == {"B__021": "B"}
    assert any("operand B is stored as" in note and "again for every q" in note
               for note in program.notes)
    kept = kept_layouts(program, {"A": dense(3), "B": dense(3)})
    assert kept.conversions == () and kept.nests[-1].loop_order == ("b", "q", "k", "d")
    assert kept.nests[-1].kept_order is None


def test_a_sum_moves_inside_an_output_loop_for_the_register_tile():
    # (i, j, k, l) reads A contiguously but runs no sum inside an output loop
    program = _program("C(i,k,l) = A(i,j,k) * B(j,l)")
    assert program.nests[-1].loop_order == ("i", "k", "j", "l")
    assert program.conversions == ()


def test_no_copy_without_reuse():
    """A matrix-vector product reads each value of A once: nothing to win by a copy."""
    assert _program("y(i) = A(i,j) * x(j)").conversions == ()
    assert _program("y(j) = A(i,j) * x(i)").nests[-1].loop_order == ("i", "j")


def test_a_format_the_user_wrote_is_kept():
    program = _program(DOTS, {"B": Format("ddd")})
    assert program.conversions == ()
    assert program.nests[-1].loop_order == ("b", "q", "k", "d")


def test_plain_products_keep_their_order():
    assert _program("C(i,j) = A(i,k) * B(k,j)").nests[-1].loop_order == ("i", "k", "j")
    assert _program("C(b,i,k) = A(b,i,j) * B(b,j,k)").nests[-1].loop_order == \
        ("b", "i", "j", "k")
    assert _program("C(i,j) = A(i,j) + B(i,j)").nests[-1].loop_order == ("i", "j")


def _dots(shape, dtype, seed=0):
    b, q, k, d = shape
    rng = np.random.default_rng(seed)
    A = rng.integers(-3, 4, size=(b, q, d))
    B = rng.integers(-3, 4, size=(b, k, d))
    if dtype != "int64":
        A, B = A + rng.random(A.shape), B + rng.random(B.shape)
    return A.astype(dtype), B.astype(dtype)


def _check(got, want, dtype):
    if dtype == "int64":
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# (b, q, k, d): rows under and over DENSE_COPY_REUSE, widths past the 16-lane tiles and
# 6-row jams, one row, empty sums and empty stacks
SHAPES = ((1, 1, 1, 1), (3, 1, 37, 5), (2, 33, 17, 3), (4, 40, 70, 9), (5, 64, 33, 16),
          (2, 7, 6, 0), (0, 40, 8, 4), (3, 40, 0, 4))


@pytest.mark.parametrize("backend", ("llvm", "c"))
@pytest.mark.parametrize("dtype", ("float32", "float64", "int64"))
@pytest.mark.parametrize("shape", SHAPES)
def test_dot_stacks_match_numpy(shape, dtype, backend):
    A, B = _dots(shape, dtype)
    want = np.einsum("bqd,bkd->bqk", A, B)
    kernel = ta.compile(DOTS, dtype=dtype, backend=backend)
    for _ in range(3):               # the general path, then the replay
        _check(kernel(A=A, B=B), want, dtype)
        _check(ta.einsum("bqd,bkd->bqk", A, B, schedule="gemm(loops)", backend=backend),
               want, dtype)


def test_each_call_takes_the_variant_its_rows_pay_for():
    from tensoralg import api

    kernel = ta.compile(DOTS, dtype="float64")
    few, many = _dots((4, 3, 300, 64), "float64"), _dots((4, 64, 300, 64), "float64", seed=1)
    compiled = kernel._default_program
    assert compiled.program.conversions
    sizes = {"A": few[0], "B": few[1]}
    assert not api.copies_pay(compiled, sizes)
    assert api.copies_pay(compiled, {"A": many[0], "B": many[1]})
    for A, B in (few, many, few, many, few):
        _check(kernel(A=A, B=B), np.einsum("bqd,bkd->bqk", A, B), "float64")
    assert [key.kept_layouts for key in api.kernel_cache().kernels].count(True) == 1
    assert many[0].shape[1] >= DENSE_COPY_REUSE > few[0].shape[1]


def test_a_bound_call_reads_its_operands_in_place():
    kernel = ta.compile(DOTS, dtype="float64")
    A, B = _dots((3, 40, 24, 8), "float64")
    call = kernel.bind(A=A, B=B)
    _check(call(), np.einsum("bqd,bkd->bqk", A, B), "float64")
    B[...] = _dots((3, 40, 24, 8), "float64", seed=3)[1]
    _check(call(), np.einsum("bqd,bkd->bqk", A, B), "float64")


def test_the_printed_schedule_gives_the_same_kernel():
    kernel = ta.compile(DOTS, dtype="float32")
    again = ta.compile(DOTS, dtype="float32", schedule=kernel.schedule)
    assert str(again.schedule) == str(kernel.schedule)
    assert dict(again.program.conversions) == dict(kernel.program.conversions) == \
        {"B__021": "B"}
    A, B = _dots((2, 40, 20, 8), "float32")
    _check(again(A=A, B=B), kernel(A=A, B=B), "float32")


@pytest.mark.parametrize("dtype", ("float32", "float64", "int32", "int64", "complex128",
                                   "bool"))
@pytest.mark.parametrize("shape,order", [((300, 70), (1, 0)), ((9, 40, 70), (0, 2, 1)),
                                         ((9, 40, 70), (2, 0, 1)), ((3, 4, 5), (2, 1, 0))])
def test_relaid_copies_as_numpy_does(shape, order, dtype):
    rng = np.random.default_rng(0)
    array = (rng.random(shape) * 10).astype(dtype)
    got = relaid(array, order)
    assert got.flags.c_contiguous and got.dtype == array.dtype
    np.testing.assert_array_equal(got, array.transpose(order))
    assert relaid(np.empty((0, 5), dtype), (1, 0)).shape == (5, 0)


def test_relaid_runs_the_compilers_transposition_from_its_size():
    from tensoralg import api

    array = np.arange(RELAYOUT_MIN_VALUES, dtype=np.float64).reshape(64, -1)
    np.testing.assert_array_equal(relaid(array, (1, 0)), array.T)
    assert len(api.kernel_cache().kernels) == 1      # the transposition's kernel
    small = np.arange(12.0).reshape(3, 4)
    relaid(small, (1, 0))
    assert len(api.kernel_cache().kernels) == 1


def test_an_index_one_factor_holds_is_summed_over_that_factor_first():
    program = _program("Z(c,d) = x(d) * Y(d,a,b,c)")
    first, last = program.nests
    assert first.loop_order == ("d", "a", "b", "c") and first.reduced == ("a", "b")
    assert last.reduced == () and {a.tensor for a in accesses(last.expr)} == {"x", first.output.tensor}
    both = _program("Z(b,c) = X(d,b,c) * W(a,b)")
    assert len(both.nests) == 3 and both.nests[-1].reduced == ()


def test_no_sum_first_where_it_saves_nothing():
    # X holds every index and is read along its summed last axis: one nest
    assert len(_program("Z(c,b) = X(b,c,a) * y(c)").nests) == 1
    assert len(_program("y(i) = A(i,j)").nests) == 1          # a single factor
    assert len(_program("C(i,j) = A(i,k) * B(k,j)").nests) == 1


# contractions where a factor alone holds summed indices (found by random search), as a
# user writes them: (subscripts, sizes by index)
SUMMED_FIRST = [("d,dabc->cd", dict(a=5, b=3, c=17, d=9)), ("dbc,ab->bc", dict(a=3, b=8, c=33, d=7)),
                ("aebc,dbea->eac", dict(a=4, b=5, c=6, d=7, e=3)), ("ac,ead->dc", dict(a=9, c=20, d=6, e=5)),
                ("db,ce->cbe", dict(b=7, c=5, d=4, e=18)), ("bca,ba->ab", dict(a=19, b=6, c=11)),
                ("ec,bda->ba", dict(a=3, b=5, c=4, d=6, e=2)), ("b,badc,dca->d", dict(a=4, b=3, c=5, d=17))]


@pytest.mark.parametrize("backend", ("llvm", "c"))
@pytest.mark.parametrize("dtype", ("float32", "float64", "int64"))
@pytest.mark.parametrize("subscripts,sizes", SUMMED_FIRST)
def test_sums_taken_first_match_numpy(subscripts, sizes, dtype, backend):
    rng = np.random.default_rng(4)
    terms = subscripts.split("->")[0].split(",")
    for scale in (sizes, {**sizes, "a": 0}, {k: 1 for k in sizes}):
        operands = [rng.integers(-3, 4, size=[scale[c] for c in term]).astype(dtype)
                    for term in terms]
        want = np.einsum(subscripts, *operands)
        for _ in range(2):
            _check(ta.einsum(subscripts, *operands, backend=backend), want, dtype)
