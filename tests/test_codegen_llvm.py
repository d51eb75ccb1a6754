"""Hand-built IR kernels run on both CPU backends against NumPy, and against each other.

The LLVM-specific checks (optimised IR text, lazy initialisation) are at the end; the file is
named for the LLVM backend, but every kernel runs on "llvm" and "c" alike.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys

import numpy as np
import pytest

from tensoralg.codegen import build, emit_source
from tensoralg.ir.nodes import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    Allocate,
    Assign,
    Binary,
    Block,
    Cast,
    Comment,
    Const,
    Declare,
    For,
    Free,
    Function,
    Grow,
    If,
    Load,
    Param,
    Ptr,
    Scalar,
    Select,
    Store,
    Unary,
    Var,
    While,
)

BACKENDS = ["llvm", "c"]
NUMPY = {F32: np.float32, F64: np.float64, I32: np.int32, I64: np.int64, BOOL: np.bool_}
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.free.argtypes = [ctypes.c_void_p]


def i64(value: int) -> Const:
    return Const(value, I64)


def add(a, b):
    return Binary("+", a, b)


def address(array: np.ndarray) -> int:
    return array.ctypes.data


# ---------------------------------------------------------------------------------------------
# Kernels


def dot(dtype: Scalar) -> Function:
    n, x, y, out = Var("n", I64), Var("x", Ptr(dtype)), Var("y", Ptr(dtype)), Var("out", Ptr(dtype))
    i, acc = Var("i", I64), Var("acc", dtype)
    return Function(
        f"dot_{dtype}",
        (
            Param(n, "x.dim.0"),
            Param(x, "x.vals"),
            Param(y, "y.vals"),
            Param(out, "out.vals", True),
        ),
        Block(
            (
                Declare(acc, Const(0, dtype)),
                For(
                    i,
                    i64(0),
                    n,
                    Block((Assign(acc, add(acc, Binary("*", Load(x, i), Load(y, i)))),)),
                ),
                Store(out, i64(0), acc),
            )
        ),
        notes=("dense dot product",),
    )


def spmv(index: Scalar) -> Function:
    n = Var("n", I64)
    pos, crd = Var("A_pos", Ptr(index)), Var("A_crd", Ptr(index))
    vals, x, y = Var("A_vals", Ptr(F64)), Var("x", Ptr(F64)), Var("y", Ptr(F64))
    i, p, acc = Var("i", I64), Var("p", I64), Var("acc", F64)
    start, stop = Cast(Load(pos, i), I64), Cast(Load(pos, add(i, i64(1))), I64)
    inner = Block(
        (Assign(acc, add(acc, Binary("*", Load(vals, p), Load(x, Cast(Load(crd, p), I64))))),)
    )
    return Function(
        f"spmv_{index}",
        (
            Param(n, "A.dim.0"),
            Param(pos, "A.1.pos"),
            Param(crd, "A.1.crd"),
            Param(vals, "A.vals"),
            Param(x, "x.vals"),
            Param(y, "y.vals", True),
        ),
        Block(
            (
                For(
                    i,
                    i64(0),
                    n,
                    Block(
                        (
                            Declare(acc, Const(0.0, F64)),
                            For(p, start, stop, inner),
                            Store(y, i, acc),
                        )
                    ),
                ),
            )
        ),
    )


def intersect() -> Function:
    """Dot product of two sparse vectors by a sorted merge; also lists the common coordinates."""
    na, nb = Var("na", I64), Var("nb", I64)
    a_crd, b_crd = Var("a_crd", Ptr(I64)), Var("b_crd", Ptr(I64))
    a_vals, b_vals = Var("a_vals", Ptr(F64)), Var("b_vals", Ptr(F64))
    out_crd, out_size, result = (
        Var("out_crd", Ptr(I64)),
        Var("out_size", Ptr(I64)),
        Var("result", Ptr(F64)),
    )
    pa, pb, k, acc = Var("pa", I64), Var("pb", I64), Var("k", I64), Var("acc", F64)
    ca, cb = Var("ca", I64), Var("cb", I64)
    step = lambda v: Assign(v, add(v, i64(1)))  # noqa: E731
    both = If(
        Binary("==", ca, cb),
        Block(
            (
                Assign(acc, add(acc, Binary("*", Load(a_vals, pa), Load(b_vals, pb)))),
                Store(out_crd, k, ca),
                step(k),
                step(pa),
                step(pb),
            )
        ),
        Block((If(Binary("<", ca, cb), Block((step(pa),)), Block((step(pb),))),)),
    )
    return Function(
        "intersect",
        tuple(
            Param(v, v.name, v.name.startswith(("out", "result")))
            for v in (na, nb, a_crd, b_crd, a_vals, b_vals, out_crd, out_size, result)
        ),
        Block(
            (
                Declare(pa, i64(0)),
                Declare(pb, i64(0)),
                Declare(k, i64(0)),
                Declare(acc, Const(0.0, F64)),
                Comment("co-iterate a and b: one lattice point, a ∩ b"),
                While(
                    Binary("and", Binary("<", pa, na), Binary("<", pb, nb)),
                    Block((Declare(ca, Load(a_crd, pa)), Declare(cb, Load(b_crd, pb)), both)),
                ),
                Store(out_size, i64(0), k),
                Store(result, i64(0), acc),
            )
        ),
    )


def grow_filter() -> Function:
    """Copy the elements of x above 0.5 into a buffer grown on demand; hand it back."""
    n, x = Var("n", I64), Var("x", Ptr(F64))
    out, size = Var("out", Ptr(Ptr(F64))), Var("size", Ptr(I64))
    buf, cap, k, i = Var("buf", Ptr(F64)), Var("cap", I64), Var("k", I64), Var("i", I64)
    scratch, j = Var("scratch", Ptr(I64)), Var("j", I64)
    return Function(
        "grow_filter",
        (
            Param(n, "x.dim.0"),
            Param(x, "x.vals"),
            Param(out, "out.vals", True),
            Param(size, "out.size", True),
        ),
        Block(
            (
                Declare(cap, i64(1)),
                Allocate(buf, cap),
                Declare(k, i64(0)),
                Allocate(scratch, add(n, i64(1)), zero=True),
                For(
                    i,
                    i64(0),
                    n,
                    Block(
                        (
                            If(
                                Binary(">", Load(x, i), Const(0.5, F64)),
                                Block(
                                    (
                                        Grow(buf, cap, add(k, i64(1))),
                                        Store(buf, k, Load(x, i)),
                                        Assign(k, add(k, i64(1))),
                                    )
                                ),
                            ),
                            Store(scratch, i, k, accumulate=True),
                        )
                    ),
                ),
                Comment("scratch is zeroed: its last element is still 0"),
                Declare(j, Load(scratch, n)),
                Store(buf, i64(0), Binary("+", Load(buf, i64(0)), Cast(j, F64))),
                Free(scratch),
                Store(out, i64(0), buf),
                Store(size, i64(0), k),
            )
        ),
    )


def huge_allocation(how: str) -> Function:
    """Ask for 2**60 doubles by malloc, calloc or realloc (after a small allocation); with
    "wrap", for 2**61 - 1 doubles: 8 bytes short of 2**64, which rounded up to a cache line
    would wrap to a tiny size."""
    out, buf, cap = Var("out", Ptr(Ptr(F64))), Var("buf", Ptr(F64)), Var("cap", I64)
    if how == "grow":
        body = (
            Declare(cap, i64(4)),
            Allocate(buf, cap),
            Store(buf, i64(0), Const(42.0, F64)),
            Store(out, i64(0), buf),
            Grow(buf, cap, i64(2**60)),
            Store(out, i64(0), buf),
        )
    else:
        count = i64(2**61 - 1 if how == "wrap" else 2**60)
        body = (Allocate(buf, count, zero=how == "calloc"), Store(out, i64(0), buf))
    return Function(f"huge_{how}", (Param(out, "out", True),), Block(body))


def float_ops(dtype: Scalar) -> tuple[Function, list]:
    """One kernel writing row k of out with the k-th expression of x and y, and the NumPy oracle."""
    n, x, y, out = Var("n", I64), Var("x", Ptr(dtype)), Var("y", Ptr(dtype)), Var("out", Ptr(dtype))
    i = Var("i", I64)
    a, b = Load(x, i), Load(y, i)
    absa = Unary("abs", a)
    one = Const(1.0, dtype)
    cases = [
        (Unary("neg", a), lambda a, b: -a),
        (absa, lambda a, b: np.abs(a)),
        (Unary("sqrt", absa), lambda a, b: np.sqrt(np.abs(a))),
        (Unary("exp", a), lambda a, b: np.exp(a)),
        (Unary("log", add(absa, one)), lambda a, b: np.log(np.abs(a) + 1)),
        (Unary("sin", a), lambda a, b: np.sin(a)),
        (Unary("cos", a), lambda a, b: np.cos(a)),
        (Unary("tanh", a), lambda a, b: np.tanh(a)),
        (Binary("min", a, b), np.fmin),
        (Binary("max", a, b), np.fmax),
        (Binary("pow", absa, b), lambda a, b: np.power(np.abs(a), b)),
        (Select(Binary("<", a, b), a, b), lambda a, b: np.where(a < b, a, b)),
        (Cast(Cast(Binary("*", a, Const(10.0, dtype)), I64), dtype), lambda a, b: np.trunc(a * 10)),
        (
            Cast(Cast(a, F32 if dtype == F64 else F64), dtype),
            lambda a, b: a.astype(np.float32 if dtype == F64 else np.float64),
        ),
        (Binary("%", a, b), np.fmod),
        (Binary("/", Binary("-", a, b), add(absa, one)), lambda a, b: (a - b) / (np.abs(a) + 1)),
        (
            Cast(
                Unary("not", Binary("or", Binary(">=", a, b), Binary("==", a, Const(0.0, dtype)))),
                dtype,
            ),
            lambda a, b: ~((a >= b) | (a == 0)),
        ),
        (
            Cast(Binary("and", Binary("!=", a, b), Cast(a, BOOL)), dtype),
            lambda a, b: (a != b) & (a != 0),
        ),
    ]
    stores = tuple(
        Store(out, add(Binary("*", i64(k), n), i), expr) for k, (expr, _) in enumerate(cases)
    )
    fn = Function(
        f"float_ops_{dtype}",
        (Param(n, "n"), Param(x, "x"), Param(y, "y"), Param(out, "out", True)),
        Block((For(i, i64(0), n, Block(stores)),)),
    )
    return fn, [oracle for _, oracle in cases]


def int_ops(dtype: Scalar) -> tuple[Function, list]:
    n, x, y, out = Var("n", I64), Var("x", Ptr(dtype)), Var("y", Ptr(dtype)), Var("out", Ptr(dtype))
    i = Var("i", I64)
    a, b = Load(x, i), Load(y, i)

    def trunc_div(a, b):
        return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))

    cases = [
        (Binary("/", a, b), trunc_div),
        (Binary("%", a, b), np.fmod),
        (Binary("min", a, b), np.minimum),
        (Binary("max", a, b), np.maximum),
        (Unary("abs", a), lambda a, b: np.abs(a)),
        (Unary("neg", a), lambda a, b: -a),
        (Binary("-", Binary("*", a, b), Const(-3, dtype)), lambda a, b: a * b + 3),
        (Select(Binary("<=", a, b), a, Const(7, dtype)), lambda a, b: np.where(a <= b, a, 7)),
        (Cast(Binary("/", Cast(a, F64), Cast(b, F64)), dtype), lambda a, b: np.trunc(a / b)),
        (Cast(Cast(a, I32 if dtype == I64 else I64), dtype), lambda a, b: a),
        (Cast(Binary("!=", a, b), dtype), lambda a, b: a != b),
    ]
    stores = tuple(
        Store(out, add(Binary("*", i64(k), n), i), expr) for k, (expr, _) in enumerate(cases)
    )
    fn = Function(
        f"int_ops_{dtype}",
        (Param(n, "n"), Param(x, "x"), Param(y, "y"), Param(out, "out", True)),
        Block((For(i, i64(0), n, Block(stores)),)),
    )
    return fn, [oracle for _, oracle in cases]


def bool_kernel() -> Function:
    """out[i] = mask[i] != flip for i below the first x[i] >= limit (a short-circuit guard)."""
    n, mask, x = Var("n", I64), Var("mask", Ptr(BOOL)), Var("x", Ptr(F64))
    flip, limit, out, i = Var("flip", BOOL), Var("limit", F64), Var("out", Ptr(BOOL)), Var("i", I64)
    return Function(
        "bools",
        tuple(Param(v, v.name, v is out) for v in (n, mask, x, flip, limit, out)),
        Block(
            (
                Declare(i, i64(0)),
                While(
                    Binary("and", Binary("<", i, n), Binary("<", Load(x, i), limit)),
                    Block(
                        (
                            Store(out, i, Binary("!=", Load(mask, i), flip)),
                            Assign(i, add(i, i64(1))),
                        )
                    ),
                ),
            )
        ),
    )


# ---------------------------------------------------------------------------------------------
# Built once per module: building is the slow part.

_kernels: dict = {}


def kernel(fn: Function, backend: str):
    if (fn.name, backend) not in _kernels:
        _kernels[fn.name, backend] = build(fn, backend)
    return _kernels[fn.name, backend]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.mark.parametrize("dtype", [F32, F64])
def test_dot(backend, dtype):
    rng = np.random.default_rng(0)
    x, y = rng.random(1001).astype(NUMPY[dtype]), rng.random(1001).astype(NUMPY[dtype])
    out = np.zeros(1, NUMPY[dtype])
    k = kernel(dot(dtype), backend)
    assert k(len(x), address(x), address(y), address(out)) == 0
    np.testing.assert_allclose(
        out[0], np.dot(x.astype(np.float64), y), rtol=1e-4 if dtype == F32 else 1e-12
    )


@pytest.mark.parametrize("index", [I32, I64])
def test_csr_spmv(backend, index):
    import scipy.sparse as sp

    A = sp.random(40, 30, density=0.2, format="csr", random_state=1)
    x = np.random.default_rng(1).random(30)
    y = np.full(40, np.nan)
    pos, crd = A.indptr.astype(NUMPY[index]), A.indices.astype(NUMPY[index])
    k = kernel(spmv(index), backend)
    assert k(40, address(pos), address(crd), address(A.data), address(x), address(y)) == 0
    np.testing.assert_allclose(y, A @ x, rtol=1e-12)


def test_sorted_merge_intersection(backend):
    a_crd, b_crd = (
        np.array([0, 2, 3, 7, 9, 12], np.int64),
        np.array([1, 2, 7, 8, 12, 20, 30], np.int64),
    )
    a_vals, b_vals = np.arange(1.0, 7.0), np.arange(10.0, 17.0)
    out_crd, size, result = np.full(6, -1, np.int64), np.zeros(1, np.int64), np.zeros(1)
    k = kernel(intersect(), backend)
    assert k(6, 7, *map(address, (a_crd, b_crd, a_vals, b_vals, out_crd, size, result))) == 0
    common = np.intersect1d(a_crd, b_crd)
    assert size[0] == len(common) and list(out_crd[: size[0]]) == list(common)
    expected = sum(a_vals[a_crd == c][0] * b_vals[b_crd == c][0] for c in common)
    assert result[0] == expected


@pytest.mark.parametrize("n", [1000, 3_000_000])
def test_grow_hands_back_a_buffer(backend, n):
    """About ten doublings from a capacity of 1; with 3M values the buffer passes 4 MiB, where
    the LLVM backend moves it by hand into a block advised to use huge pages."""
    x = np.random.default_rng(2).random(n)
    out, size = (ctypes.c_void_p * 1)(), np.zeros(1, np.int64)
    k = kernel(grow_filter(), backend)
    assert k(len(x), address(x), ctypes.addressof(out), address(size)) == 0
    expected = x[x > 0.5].copy()
    assert size[0] == len(expected) > 0.3 * n
    got = np.ctypeslib.as_array(
        ctypes.cast(out[0], ctypes.POINTER(ctypes.c_double)), (size[0],)
    ).copy()
    libc.free(out[0])
    expected[0] += 0.0  # scratch[n] stayed 0: calloc zeroed it and only scratch[:n] was added to
    np.testing.assert_array_equal(got, expected)


def test_grow_and_allocation_failure_branches_are_marked_cold():
    """LLVM is told that a buffer rarely grows and an allocation rarely fails: without branch
    weights it prices the realloc call in an append loop as if every iteration made it, and
    keeps the loop's pointers on the stack around it (a CSR add ran 1.5x slower than gcc's
    build of the same kernel)."""
    import re

    from tensoralg.codegen.llvm_helpers import COLD_WEIGHTS

    text = emit_source(grow_filter(), "llvm")
    cold = re.search(r'^(!\d+) = !\{!"branch_weights", i32 (\d+), i32 (\d+)\}$', text, re.M)
    assert cold and tuple(map(int, cold.groups()[1:])) == COLD_WEIGHTS
    marked = [line for line in text.splitlines() if line.rstrip().endswith(f"!prof {cold[1]}")]
    assert any("grow.buf.then" in line for line in marked)      # the buffer grows
    assert any("common.ret" in line for line in marked)         # an allocation failed
    plain = emit_source(axpy(), "llvm")      # no allocation: none of our weights (the
    assert "i32 %d, i32 %d}" % COLD_WEIGHTS not in plain        # vectoriser adds its own)


def test_large_buffers_are_advised_to_use_huge_pages():
    """On Linux, buffers of 4 MiB and more get ``madvise(MADV_HUGEPAGE)``; a large buffer grows
    by a copy into such a block, not by realloc (which copies into fresh 4 KiB pages: a
    SpGEMM with a 56 MB output took ~24k page faults per call)."""
    from tensoralg.codegen import llvm as backend

    text = emit_source(grow_filter(), "llvm")
    assert ("@madvise" in text) == backend.HUGE_PAGES
    assert "@realloc" in text                       # small buffers still grow in place
    saved = backend.HUGE_PAGES
    try:
        backend.HUGE_PAGES = False
        plain = emit_source(grow_filter(), "llvm")
        assert "@madvise" not in plain and "@memcpy" not in plain
    finally:
        backend.HUGE_PAGES = saved


@pytest.mark.parametrize("how", ["malloc", "calloc", "grow", "wrap"])
def test_allocation_failure_returns_status_1(backend, how):
    out = (ctypes.c_void_p * 1)()
    assert kernel(huge_allocation(how), backend)(ctypes.addressof(out)) == 1
    if how == "grow":  # realloc failed: the old buffer is still valid and still ours
        assert ctypes.cast(out[0], ctypes.POINTER(ctypes.c_double))[0] == 42.0
        libc.free(out[0])
    else:
        assert out[0] is None


def run_ops(make, dtype, backend, x, y):
    fn, oracles = make(dtype)
    out = np.zeros(len(oracles) * len(x), NUMPY[dtype])
    assert kernel(fn, backend)(len(x), address(x), address(y), address(out)) == 0
    return out.reshape(len(oracles), len(x)), oracles


def float_inputs(dtype):
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 3, 64).astype(NUMPY[dtype])
    y = rng.uniform(-3, 3, 64).astype(NUMPY[dtype])
    x[:4], y[:4] = [1.5, -2.0, 0.0, 2.5], [1.5, 0.75, 1.0, -1.0]
    return x, y


@pytest.mark.parametrize("dtype", [F32, F64])
def test_every_float_op_against_numpy(backend, dtype):
    x, y = float_inputs(dtype)
    got, oracles = run_ops(float_ops, dtype, backend, x, y)
    rtol = 2e-6 if dtype == F32 else 1e-14
    for k, oracle in enumerate(oracles):
        expected = np.asarray(oracle(x, y)).astype(NUMPY[dtype])
        np.testing.assert_allclose(got[k], expected, rtol=rtol, atol=rtol, err_msg=f"case {k}")


@pytest.mark.parametrize("dtype", [I32, I64])
def test_every_int_op_and_truncating_division(backend, dtype):
    x = np.array([7, -7, 7, -7, 0, 13, -13, 5, 100, -1], NUMPY[dtype])
    y = np.array([2, 2, -2, -2, 3, 4, 4, -5, 7, 9], NUMPY[dtype])
    got, oracles = run_ops(int_ops, dtype, backend, x, y)
    assert list(got[0][:4]) == [3, -3, -3, 3] and list(got[1][:4]) == [1, -1, 1, -1]
    for k, oracle in enumerate(oracles):
        np.testing.assert_array_equal(
            got[k], np.asarray(oracle(x, y)).astype(NUMPY[dtype]), err_msg=f"case {k}"
        )


@pytest.mark.parametrize("dtype", [I32, I64])
def test_bit_operations_against_numpy(backend, dtype):
    """``bitand``, ``bitor``, ``shl`` (into the sign bit too), arithmetic ``shr`` and ``ctz``
    (the bit width for 0), as the workspace bitmaps of sparse outputs use them."""
    from tensoralg.ir.build import bitand, bitor, cast, ctz, load, mul, shl, shr, store

    n, x, y = Var("n", I64), Var("x", Ptr(dtype)), Var("y", Ptr(dtype))
    out, i = Var("out", Ptr(dtype)), Var("i", I64)
    a, s = load(x, i), bitand(load(y, i), 31)
    exprs = [bitand(a, load(y, i)), bitor(a, load(y, i)), shl(a, s), shr(a, s),
             cast(ctz(a), dtype)]
    body = [store(out, add(mul(i, i64(len(exprs))), i64(k)), e) for k, e in enumerate(exprs)]
    params = (Param(n, "n"), Param(x, "x"), Param(y, "y"), Param(out, "out", True))
    fn = Function(f"bits_{dtype}", params, Block((For(i, i64(0), n, Block(tuple(body))),)))
    np_dtype, width = NUMPY[dtype], 32 if dtype == I32 else 64
    unsigned = np.uint32 if dtype == I32 else np.uint64
    rng = np.random.default_rng(5)
    xs = rng.integers(np.iinfo(np_dtype).min, np.iinfo(np_dtype).max, 64, dtype=np_dtype)
    ys = rng.integers(0, 2**20, 64, dtype=np_dtype)
    xs[:4] = [0, 1, np.iinfo(np_dtype).min, -1]
    got = np.zeros(5 * len(xs), np_dtype)
    assert kernel(fn, backend)(len(xs), address(xs), address(ys), address(got)) == 0
    shift = ys & 31
    trailing = [width if v == 0 else (int(v) & -int(v)).bit_length() - 1 for v in xs]
    expected = np.stack([xs & ys, xs | ys,
                         (xs.astype(unsigned) << shift.astype(unsigned)).astype(np_dtype),
                         xs >> shift, np.array(trailing, np_dtype)], axis=1)
    np.testing.assert_array_equal(got.reshape(-1, 5), expected)


def test_bool_buffers_params_and_short_circuit(backend):
    mask = np.array([True, False, True, True, False])
    x = np.array([0.0, 1.0, 2.0, 9.0, 0.0])
    out = np.zeros(5, np.bool_)
    k = kernel(bool_kernel(), backend)
    assert k(5, address(mask), address(x), True, 5.0, address(out)) == 0
    assert out.tolist() == [False, True, False, False, False]
    out[:] = False
    assert k(5, address(mask), address(x), False, 100.0, address(out)) == 0
    assert out.tolist() == mask.tolist()


@pytest.mark.parametrize("make, dtype", [(float_ops, F32), (float_ops, F64), (int_ops, I64)])
def test_backends_agree_bit_for_bit(make, dtype):
    x, y = (
        float_inputs(dtype)
        if dtype.is_float
        else (np.arange(-20, 20, dtype=np.int64), np.arange(1, 41, dtype=np.int64) * -1)
    )
    llvm_out, _ = run_ops(make, dtype, "llvm", x, y)
    c_out, _ = run_ops(make, dtype, "c", x, y)
    assert llvm_out.tobytes() == c_out.tobytes()


# ---------------------------------------------------------------------------------------------
# LLVM specifics


def axpy() -> Function:
    n, a, x, y, i = (
        Var("n", I64),
        Var("a", F64),
        Var("x", Ptr(F64)),
        Var("y", Ptr(F64)),
        Var("i", I64),
    )
    update = Store(y, i, Binary("*", a, Load(x, i)), accumulate=True)
    return Function(
        "axpy",
        (Param(n, "n"), Param(a, "a"), Param(x, "x"), Param(y, "y", True)),
        Block((For(i, i64(0), n, Block((update,))),)),
    )


def test_llvm_source_is_optimised_ir_with_noalias_and_vectors():
    text = emit_source(axpy(), "llvm")
    assert "define noundef i32 @axpy(" in text and "noalias" in text
    assert " x double>" in text  # the loop was vectorised: noalias made that legal
    assert "alloca" not in text  # mem2reg promoted every stack slot
    x, y = np.arange(100.0), np.ones(100)
    for backend in BACKENDS:
        assert kernel(axpy(), backend)(100, 2.0, address(x), address(y)) == 0
    np.testing.assert_array_equal(y, 1 + 4 * np.arange(100.0))


def test_llvm_math_uses_intrinsics_and_inline_float32_tanh():
    """float32 exp and tanh are written out (tests/test_inline_math.py); float64 calls libm."""
    fn, _ = float_ops(F32)
    text = emit_source(fn, "llvm")
    for name in ("llvm.sqrt", "llvm.fabs", "llvm.minimum", "llvm.maximum"):
        assert name in text
    assert "@tanhf" not in text and "@expf" not in text and "llvm.exp.f32" not in text
    assert "@tanh(" in emit_source(float_ops(F64)[0], "llvm")


def test_importing_codegen_does_not_load_llvm():
    code = "import sys, tensoralg.codegen; print('llvmlite' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_kernel_keeps_engine_alive_after_builder_objects_go():
    import gc

    k = build(dot(F64), "llvm")
    gc.collect()
    x = np.ones(5)
    out = np.zeros(1)
    assert k(5, address(x), address(x), address(out)) == 0 and out[0] == 5.0
    assert "dot_f64" in str(k) and k.params == dot(F64).params


@pytest.mark.parametrize("dtype", [F32, F64])
def test_float_reduction_is_vectorised_and_only_it_is_reassociated(dtype):
    """``acc = acc + e`` may be summed in vector lanes (the IR allows it for reductions); the
    product inside stays a contraction only."""
    text = emit_source(dot(dtype), "llvm")
    assert "reassoc" in text
    assert any(f"x {'float' if dtype == F32 else 'double'}>" in line and "fadd" in line
               for line in text.splitlines()), "the reduction was not vectorised"
    assert all("reassoc" not in line for line in text.splitlines() if "fmul" in line)
    k = build(dot(dtype), "llvm")
    n = 1001
    x = np.linspace(0, 1, n).astype(np.float32 if dtype == F32 else np.float64)
    out = np.zeros(1, x.dtype)
    assert k(n, address(x), address(x), address(out)) == 0
    np.testing.assert_allclose(out[0], np.dot(x.astype(np.float64), x), rtol=1e-5)


def test_reductions_ask_for_512_bit_vectors_on_avx512_and_nothing_else_does():
    """Kernels that accumulate get LLVM's ``prefer-vector-width=512`` where the host has
    AVX-512 (see ``codegen/llvm.py``); elementwise kernels keep LLVM's own choice. The policy
    is part of the host fingerprint, so cached kernels built under the other one are not
    reused."""
    from tensoralg.codegen import llvm as backend

    wide = backend.host_has("avx512f")
    assert ("prefer-vector-width" in emit_source(dot(F32), "llvm")) == wide
    assert "prefer-vector-width" not in emit_source(axpy(), "llvm")
    assert backend.reduces(dot(F32)) and not backend.reduces(axpy())
    saved = backend.WIDE_VECTORS
    try:
        fingerprint = backend.host_fingerprint()
        backend.WIDE_VECTORS = False
        assert "prefer-vector-width" not in emit_source(dot(F32), "llvm")
        assert (backend.host_fingerprint() != fingerprint) == wide
    finally:
        backend.WIDE_VECTORS = saved
