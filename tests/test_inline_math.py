"""float32 ``exp`` and ``tanh`` written out inline (codegen/cfamily.py's formulas, emitted by
codegen/softmax.py for LLVM and by the C dialect): accurate against NumPy over the whole float32
line and at the special values, identical bit for bit in the two CPU backends, and free of libm
calls so that a loop over them vectorises."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tensoralg.codegen import build, emit_source
from tensoralg.ir.nodes import (
    F32,
    F64,
    I64,
    Block,
    Const,
    For,
    Function,
    Load,
    Param,
    Ptr,
    Scalar,
    Store,
    Unary,
    Var,
)

BACKENDS = ["llvm", "c"]
OPS = ["exp", "tanh"]
NUMPY = {"exp": np.exp, "tanh": np.tanh}
# Against the float64 result. Measured worst cases, also over every float32 in [-104.5, -87],
# [+-0.25, +-4] and [+-64, 88.73] for exp and [+-0.001, +-4] for tanh: exp 0.99 ulp, tanh
# 1.33 ulp (NumPy's own float32 results are at most 2 ulp from these).
MAX_ULP = {"exp": 1.0, "tanh": 1.5}

SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-38, -1e-38, 1e-30, 1e-8,
     -1e-8, 0.625, -0.625, np.nextafter(np.float32(0.625), np.float32(1)), 9.0, -9.0, 20.0,
     44.0, 45.0, -45.0, 88.72283, 88.72284, 88.8, 89.0, 1e30, -1e30, -87.33654, -87.34, -90.0,
     -100.0, -103.97, -103.98, -104.0, -104.1, -110.0, np.finfo(np.float32).max,
     -np.finfo(np.float32).max],
    np.float32,
)


def elementwise(op: str, dtype: Scalar) -> Function:
    """``out[i] = op(x[i])`` for i < n."""
    n, x, out, i = Var("n", I64), Var("x", Ptr(dtype)), Var("out", Ptr(dtype)), Var("i", I64)
    body = Block((Store(out, i, Unary(op, Load(x, i))),))
    return Function(f"{op}_{dtype}", (Param(n, "n"), Param(x, "x"), Param(out, "out", True)),
                    Block((For(i, Const(0, I64), n, body),)))


_kernels: dict[tuple[str, Scalar, str], object] = {}


def run(op: str, x: np.ndarray, backend: str) -> np.ndarray:
    dtype = F32 if x.dtype == np.float32 else F64
    if (op, dtype, backend) not in _kernels:
        _kernels[op, dtype, backend] = build(elementwise(op, dtype), backend)
    out = np.empty_like(x)
    assert _kernels[op, dtype, backend](len(x), x.ctypes.data, out.ctypes.data) == 0
    return out


def float32_line() -> np.ndarray:
    """About a million float32 values spread over every binade, both signs, subnormals and
    the special values included."""
    bits = np.arange(0, 2**32, 4093, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    return np.concatenate([x[np.isfinite(x)], SPECIAL])


def ulp_error(got: np.ndarray, x: np.ndarray, op: str) -> np.ndarray:
    """|got - exact| in units of the float32 spacing at the exact result (float64 stands in
    for exact; 2^-149 in the subnormal range)."""
    exact = NUMPY[op](x.astype(np.float64))
    rounded = np.abs(exact.astype(np.float32))
    spacing = np.spacing(np.minimum(rounded, np.finfo(np.float32).max)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        error = np.abs(got.astype(np.float64) - exact) / spacing
    same = (got.astype(np.float64) == exact.astype(np.float32)) | (np.isnan(got) & np.isnan(exact))
    return np.where(same, 0.0, error)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", OPS)
def test_float32_accuracy_over_the_whole_line(op, backend):
    x = float32_line()
    with np.errstate(over="ignore", under="ignore"):
        got = run(op, x, backend)
        worst = ulp_error(got, x, op)
    k = int(np.argmax(worst))
    assert worst[k] <= MAX_ULP[op], f"{op}({x[k]!r}) = {got[k]!r}: {worst[k]:.2f} ulp"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", OPS)
def test_float32_special_values_as_numpy(op, backend):
    """Infinities, NaN, signed zeros, overflow to inf and underflow through the subnormals
    to 0 come out as NumPy's (float32) do, to a few ulp where the value is finite."""
    with np.errstate(over="ignore", under="ignore"):
        got = run(op, SPECIAL, backend)
        expected = NUMPY[op](SPECIAL)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    np.testing.assert_array_equal(np.signbit(got[~np.isnan(got)]),
                                  np.signbit(expected[~np.isnan(expected)]))
    np.testing.assert_array_max_ulp(got, expected, maxulp=3)
    assert (got[SPECIAL == 0] == 0).all() if op == "tanh" else (got[SPECIAL == 0] == 1).all()


def test_exp_underflow_keeps_subnormals_and_overflow_gives_inf():
    x = np.array([-87.5, -95.0, -103.0, -103.9, -104.5, 88.72283, 88.7229, 1000.0], np.float32)
    with np.errstate(over="ignore", under="ignore"):
        expected = np.exp(x)
    for backend in BACKENDS:
        got = run("exp", x, backend)
        assert (got[:4] > 0).all() and got[4] == 0 and np.isfinite(got[5]) and np.isinf(got[6:]).all()
        np.testing.assert_array_max_ulp(got, expected, maxulp=1)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backends_agree_bit_for_bit(op, dtype):
    x = float32_line().astype(dtype)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        assert run(op, x, "llvm").tobytes() == run(op, x, "c").tobytes()


@pytest.mark.parametrize("op", OPS)
def test_float32_loop_has_no_libm_call_and_vectorises(op):
    fn = elementwise(op, F32)
    llvm_text = emit_source(fn, "llvm")
    assert f"@{op}f" not in llvm_text and "llvm.exp" not in llvm_text
    define = llvm_text[llvm_text.index("define"):]
    assert " call " not in define.replace("call <", "").replace("call float @llvm.", ""), \
        "a call is left in the kernel"
    assert " x float>" in llvm_text, "the loop was not vectorised"
    c_text = emit_source(fn, "c")
    assert f"ta_{op}f(" in c_text and re.search(rf"(?<![\w]){op}f\(", c_text) is None


def test_float64_keeps_libm_in_both_backends():
    fn = elementwise("tanh", F64)
    assert "@tanh(" in emit_source(fn, "llvm") and "tanh(" in emit_source(fn, "c")
