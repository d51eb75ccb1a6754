"""The C and CUDA emitters: the text they print, the C build path and its errors."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tensoralg.codegen import build, emit_source
from tensoralg.codegen.c import compile_c, compiler_command
from tensoralg.codegen.lines import Lines
from tensoralg.codegen.target import target_for
from tensoralg.errors import CompileError, UnsupportedError
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
    Function,
    Grow,
    If,
    Load,
    Param,
    Ptr,
    Select,
    Store,
    Unary,
    Var,
    While,
)

n, x, y, i = Var("n", I64), Var("x", Ptr(F64)), Var("y", Ptr(F64)), Var("i", I64)


def i64(value: int) -> Const:
    return Const(value, I64)


def showcase() -> Function:
    """A kernel touching every statement and the dialect-specific expressions."""
    out, size, buf, cap, k = (
        Var("out", Ptr(Ptr(F64))),
        Var("size", Ptr(I64)),
        Var("buf", Ptr(F64)),
        Var("cap", I64),
        Var("k", I64),
    )
    f, c = Var("f", F32), Var("if", I32)  # "if" must be renamed
    a = Load(x, i)
    return Function(
        "showcase",
        (
            Param(n, "x.dim.0"),
            Param(x, "x.vals"),
            Param(y, "y.vals", True),
            Param(out, "out.vals", True),
            Param(size, "out.size", True),
            Param(f, "alpha"),
        ),
        Block(
            (
                Comment("first line\nsecond line \\"),
                Declare(cap, i64(4)),
                Allocate(buf, cap, zero=True),
                Declare(k, i64(0)),
                Declare(c, Const(-2147483648, I32)),
                For(
                    i,
                    i64(0),
                    Binary("-", n, i64(1)),
                    Block(
                        (
                            If(
                                Binary(
                                    "or",
                                    Binary(
                                        "and",
                                        Binary("<", a, Const(0.0, F64)),
                                        Binary(">", a, Const(-1.0, F64)),
                                    ),
                                    Binary("==", i, i64(0)),
                                ),
                                Block(
                                    (
                                        Grow(buf, cap, Binary("+", k, i64(1))),
                                        Store(buf, k, Unary("sqrt", Unary("abs", a))),
                                        Assign(k, Binary("+", k, i64(1))),
                                    )
                                ),
                                Block(
                                    (
                                        If(
                                            Binary(">", a, Const(2.0, F64)),
                                            Block(
                                                (Store(y, i, Binary("min", a, Const(1e300, F64))),)
                                            ),
                                            Block(
                                                (
                                                    Store(
                                                        y,
                                                        i,
                                                        Binary(
                                                            "-", a, Binary("-", a, Unary("neg", a))
                                                        ),
                                                    ),
                                                )
                                            ),
                                        ),
                                    )
                                ),
                            ),
                            Store(y, i, Cast(Binary("pow", Cast(a, F32), f), F64), accumulate=True),
                            Store(
                                y,
                                i,
                                Select(
                                    Binary("<", k, i64(3)),
                                    Cast(Binary("max", k, i64(3)), F64),
                                    Const(float("inf"), F64),
                                ),
                            ),
                        )
                    ),
                ),
                While(
                    Binary("<", k, i64(0)),
                    Block((Assign(k, Binary("%", Unary("abs", k), i64(5))),)),
                ),
                Store(out, i64(0), buf),
                Store(
                    size, i64(0), Binary("-", Binary("*", i64(100000), i64(100000)), Cast(c, I64))
                ),
            )
        ),
        notes=("a note", "another note"),
    )


def test_c_source_layout():
    text = emit_source(showcase(), "c")
    lines = text.splitlines()
    assert lines[0] == "// Kernel `showcase`, generated by tensoralg."
    assert lines[1:3] == ["// - a note", "// - another note"]
    for header in ("stdint.h", "stdlib.h", "math.h", "stdbool.h"):
        assert f"#include <{header}>" in text
    assert "int32_t showcase(" in text
    assert "const double* restrict x," in text and "double* restrict y," in text
    assert "double** restrict out," in text and "// out.vals (output)" in text
    assert "// first line" in text and "// second line\n" in text  # no trailing backslash
    assert "int32_t v_if = (-2147483647 - 1);" in text
    assert "calloc((size_t)cap, sizeof(double))" in text and "if (buf == NULL) return 1;" in text
    assert "realloc(buf, sizeof(double) * (size_t)buf_capacity)" in text
    assert "buf_grown == NULL) return 1;" in text
    assert (
        "sqrt(fabs(x[i]))" in text
        and "ta_min_f64(x[i], 1e+300)" in text      # keeps NaN, unlike C's fmin
        and "static inline double ta_min_f64(double a, double b)" in text
        and "powf((float)x[i], f)" in text
    )
    assert "(x[i] < 0.0 && x[i] > -1.0) || i == 0" in text
    assert "} else if (x[i] > 2.0) {" in text
    assert "x[i] - (x[i] - -x[i])" in text
    assert "y[i] += (double)powf" in text
    assert "(k > 3 ? k : 3)" in text and "INFINITY" in text
    assert "llabs(k) % 5" in text
    assert "size[0] = (int64_t)100000 * 100000 - (int64_t)v_if;" in text
    assert "  " * 2 + "if (" in text  # two-space indents, nested
    assert text.endswith("  return 0;\n}\n")


def test_showcase_compiles_without_warnings(tmp_path):
    source = tmp_path / "showcase.c"
    source.write_text(emit_source(showcase(), "c"))
    result = subprocess.run(
        ["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-c", "-o", "/dev/null", str(source)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_f32_and_extreme_literals():
    x32 = Var("x", Ptr(F32))
    body = Block(
        (
            Store(x32, i64(0), Const(0.1, F32)),
            Store(x32, i64(1), Const(float("nan"), F32)),
            Store(x32, i64(2), Const(-float("inf"), F32)),
            Store(x32, i64(3), Unary("exp", Const(1e-45, F32))),
            Store(x32, i64(4), Cast(Const(2**40, I64), F32)),
            Store(x32, i64(5), Cast(Const(True, BOOL), F32)),
        )
    )
    fn = Function("lits", (Param(x32, "x", True),), body)
    text = emit_source(fn, "c")
    assert "x[0] = 0.10000000149011612f;" in text and "NAN" in text and "-INFINITY" in text
    assert (
        "expf(1.401298464324817e-45f)" in text
        and "1099511627776LL" in text
        and "(float)true" in text
    )
    results = []
    for backend in ("c", "llvm"):
        out = np.zeros(6, np.float32)
        assert build(fn, backend)(out.ctypes.data) == 0
        results.append(out)
    assert results[0].tobytes() == results[1].tobytes()
    assert results[0][0] == np.float32(0.1) and np.isnan(results[0][1]) and results[0][4] == 2.0**40


def test_integer_math_on_floats_only_is_rejected():
    bad = Function("bad", (Param(n, "n"),), Block((Declare(Var("z", I64), Unary("sqrt", n)),)))
    with pytest.raises(CompileError, match="sqrt"):
        emit_source(bad, "c")
    with pytest.raises(CompileError, match="sqrt"):
        build(bad, "llvm")


def test_unknown_backend():
    with pytest.raises(UnsupportedError, match="unknown backend"):
        emit_source(showcase(), "fortran")
    with pytest.raises(UnsupportedError, match="not build kernels"):
        build(showcase(), "cuda")
    assert target_for("cuda").atomics and not target_for("c").atomics


def test_compile_error_carries_stderr_and_source_path():
    with pytest.raises(CompileError) as info:
        compile_c("int broken(void) { return undefined_name; }", "broken")
    message = str(info.value)
    assert "undefined_name" in message and "broken.c" in message
    path = message.split("source kept at ")[1].split()[0]
    assert open(path).read().startswith("int broken")
    shutil.rmtree(path.rsplit("/", 1)[0])


def test_missing_compiler_is_a_compile_error(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/tensoralg-cc")
    fn = Function("empty", (), Block())
    with pytest.raises(CompileError, match="cannot run the C compiler.*tensoralg-cc"):
        build(fn, "c")
    assert compiler_command({}) == ["cc"] and compiler_command({"CC": "gcc -O1"}) == ["gcc", "-O1"]


def test_lines_builder():
    out = Lines(indent="    ")
    out.comment("a\nb")
    with out.block("while (x) {", "}"):
        out.line("x--;")
        out.line()
        out.line("y++;")
    assert out.text() == "// a\n// b\nwhile (x) {\n    x--;\n\n    y++;\n}\n"


def test_cuda_source():
    text = emit_source(showcase(), "cuda")
    assert 'extern "C" __global__ void showcase(' in text
    assert "double* __restrict__ y," in text and "restrict " not in text.replace("__restrict__", "")
    assert "int32_t* __restrict__ status" in text and "status[0] = 0;" in text
    assert "{ status[0] = 1; return; }" in text and "calloc" not in text and "realloc" not in text
    assert "memset(buf, 0," in text and "memcpy(buf_grown, buf," in text
    assert "<<<1, 1>>>" in text


def _spgemm_cuda() -> str:
    """A sparse product's CUDA source: a workspace bitmap, bit operations and ``ctz``."""
    import tensoralg as ta

    kernel = ta.compile("C(i,k) = A(i,j) * B(j,k)", formats={"A": "ds", "B": "ds"},
                        dtype="float64")
    return kernel.source("cuda")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("make", [lambda: emit_source(showcase(), "cuda"), _spgemm_cuda],
                         ids=["showcase", "spgemm"])
def test_cuda_source_compiles_with_nvcc(tmp_path, make):
    source = tmp_path / "kernel.cu"
    source.write_text(make())
    result = subprocess.run(
        ["nvcc", "-c", "-o", "/dev/null", str(source)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_showcase_runs_the_same_on_both_backends():
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.free.argtypes = [ctypes.c_void_p]
    xs = np.array([-0.5, 3.0, 0.25, -2.0, 1.0, -0.1, 5.0])
    outputs = []
    for backend in ("c", "llvm"):
        ys, out, size = np.zeros(7), (ctypes.c_void_p * 1)(), np.zeros(1, np.int64)
        assert (
            build(showcase(), backend)(
                7, xs.ctypes.data, ys.ctypes.data, ctypes.addressof(out), size.ctypes.data, 1.5
            )
            == 0
        )
        buffer = ctypes.cast(out[0], ctypes.POINTER(ctypes.c_double))
        outputs.append((ys.tobytes(), [buffer[j] for j in range(3)], size[0]))
        libc.free(out[0])
    assert outputs[0] == outputs[1]
    assert outputs[0][2] == 10**10 + 2**31
    assert outputs[0][1] == [np.sqrt(0.5), np.sqrt(0.1), 0.0]  # calloc zeroed the rest


@pytest.mark.parametrize("lang", ["c", "llvm", "cuda"])
def test_undeclared_variable_is_a_compile_error(lang):
    ghost = Var("ghost", I64)
    fn = Function("uses_ghost", (Param(n, "n"),), Block((Assign(ghost, n),)))
    with pytest.raises(CompileError, match="uses_ghost.*ghost"):
        emit_source(fn, lang)
