"""Golden text for the IR printer, precedence rules, and the doctests of every ir/ module."""
from __future__ import annotations

import doctest
import importlib
import math

import pytest

from tensoralg import ir
from tensoralg.ir import BOOL, F32, F64, I32, I64, Ptr, param, var


def spmv() -> ir.Function:
    """CSR SpMV: y(i) = A(i,j) * x(j)."""
    n = var("A_dim_0", I64)
    pos, crd = var("A_1_pos", Ptr(I32)), var("A_1_crd", Ptr(I32))
    vals, x, y = var("A_vals", Ptr(F64)), var("x_vals", Ptr(F64)), var("y_vals", Ptr(F64))
    i, p, j, t = var("i", I64), var("p", I64), var("j", I64), var("t", F64)
    return ir.function(
        "spmv",
        [param(n, "A.dim.0"), param(pos, "A.1.pos"), param(crd, "A.1.crd"),
         param(vals, "A.vals"), param(x, "x.vals"), param(y, "y.vals", output=True)],
        ir.for_(i, 0, n,
                ir.declare(t, 0.0),
                ir.for_(p, ir.cast(ir.load(pos, i), I64), ir.cast(ir.load(pos, ir.add(i, 1)), I64),
                        ir.declare(j, ir.cast(ir.load(crd, p), I64)),
                        ir.assign(t, ir.add(t, ir.mul(ir.load(vals, p), ir.load(x, j))))),
                ir.store(y, i, t)),
        notes=["A is CSR: rows dense, columns compressed"])


SPMV = """\
kernel spmv(i64 A_dim_0 [A.dim.0], i32* A_1_pos [A.1.pos], i32* A_1_crd [A.1.crd], \
f64* A_vals [A.vals], f64* x_vals [x.vals], f64* y_vals [y.vals] out)
  // note: A is CSR: rows dense, columns compressed
  for (i64 i = 0; i < A_dim_0; i++) {
    f64 t = 0.0;
    for (i64 p = (i64) A_1_pos[i]; p < (i64) A_1_pos[i + 1]; p++) {
      i64 j = (i64) A_1_crd[p];
      t = t + A_vals[p] * x_vals[j];
    }
    y_vals[i] = t;
  }"""


def coiterate() -> ir.Function:
    """Sparse vector add a(i) = b(i) + c(i), both compressed: the intersection loop only."""
    b_pos, b_crd, b_vals = var("b_pos", Ptr(I64)), var("b_crd", Ptr(I64)), var("b_vals", Ptr(F64))
    c_pos, c_crd, c_vals = var("c_pos", Ptr(I64)), var("c_crd", Ptr(I64)), var("c_vals", Ptr(F64))
    a = var("a_vals", Ptr(F64))
    pb, pc, end_b, end_c = (var(name, I64) for name in ("pb", "pc", "end_b", "end_c"))
    ib, ic, i = var("ib", I64), var("ic", I64), var("i", I64)
    return ir.function(
        "add",
        [param(b_pos, "b.0.pos"), param(b_crd, "b.0.crd"), param(b_vals, "b.vals"),
         param(c_pos, "c.0.pos"), param(c_crd, "c.0.crd"), param(c_vals, "c.vals"),
         param(a, "a.vals", output=True)],
        ir.declare(pb, ir.load(b_pos, 0)), ir.declare(end_b, ir.load(b_pos, 1)),
        ir.declare(pc, ir.load(c_pos, 0)), ir.declare(end_c, ir.load(c_pos, 1)),
        ir.while_(ir.land(ir.lt(pb, end_b), ir.lt(pc, end_c)),
                  ir.declare(ib, ir.load(b_crd, pb)),
                  ir.declare(ic, ir.load(c_crd, pc)),
                  ir.declare(i, ir.minimum(ib, ic)),
                  ir.if_(ir.land(ir.eq(ib, i), ir.eq(ic, i)),
                         ir.store(a, i, ir.add(ir.load(b_vals, pb), ir.load(c_vals, pc))),
                         ir.if_(ir.eq(ib, i), ir.store(a, i, ir.load(b_vals, pb)),
                                ir.store(a, i, ir.load(c_vals, pc)))),
                  ir.assign(pb, ir.add(pb, ir.cast(ir.eq(ib, i), I64))),
                  ir.assign(pc, ir.add(pc, ir.cast(ir.eq(ic, i), I64)))),
    )


COITERATE = """\
kernel add(i64* b_pos [b.0.pos], i64* b_crd [b.0.crd], f64* b_vals [b.vals], \
i64* c_pos [c.0.pos], i64* c_crd [c.0.crd], f64* c_vals [c.vals], f64* a_vals [a.vals] out)
  i64 pb = b_pos[0];
  i64 end_b = b_pos[1];
  i64 pc = c_pos[0];
  i64 end_c = c_pos[1];
  while (pb < end_b && pc < end_c) {
    i64 ib = b_crd[pb];
    i64 ic = c_crd[pc];
    i64 i = min(ib, ic);
    if (ib == i && ic == i) {
      a_vals[i] = b_vals[pb] + c_vals[pc];
    } else if (ib == i) {
      a_vals[i] = b_vals[pb];
    } else {
      a_vals[i] = c_vals[pc];
    }
    pb = pb + (i64) (ib == i);
    pc = pc + (i64) (ic == i);
  }"""


def buffers() -> ir.Function:
    """A workspace and a growing output buffer."""
    n = var("n", I64)
    out = var("out_crd", Ptr(Ptr(I64)))
    w, buf, cap, k = var("w", Ptr(F64)), var("buf", Ptr(I64)), var("cap", I64), var("k", I64)
    return ir.function(
        "assemble", [param(n, "A.dim.0"), param(out, "out.1.crd", output=True)],
        ir.allocate(w, n, zero=True),
        ir.declare(cap, 16),
        ir.allocate(buf, cap),
        ir.for_(k, 0, n,
                ir.grow(buf, cap, ir.add(k, 1)),
                ir.store(buf, k, k)),
        ir.store(out, 0, buf),
        ir.free(w),
    )


BUFFERS = """\
kernel assemble(i64 n [A.dim.0], i64** out_crd [out.1.crd] out)
  f64* w = calloc(n);
  i64 cap = 16;
  i64* buf = alloc(cap);
  for (i64 k = 0; k < n; k++) {
    grow(buf, cap, k + 1);
    buf[k] = k;
  }
  out_crd[0] = buf;
  free(w);"""


@pytest.mark.parametrize("build, expected", [
    (spmv, SPMV), (coiterate, COITERATE), (buffers, BUFFERS),
], ids=["spmv", "coiterate", "buffers"])
def test_golden_functions(build, expected):
    fn = build()
    assert ir.format_function(fn) == expected
    assert ir.format_node(fn) == expected
    ir.verify(fn)  # the samples are valid IR, so the verifier tests can mutate them


i, j, k = var("i", I64), var("j", I64), var("k", I64)
x, y = var("x", F64), var("y", F64)
a, b = var("a", BOOL), var("b", BOOL)


@pytest.mark.parametrize("expr, text", [
    (ir.add(ir.add(i, j), k), "i + j + k"),
    (ir.add(i, ir.add(j, k)), "i + (j + k)"),  # tree order shows: floats are not associative
    (ir.sub(i, ir.sub(j, k)), "i - (j - k)"),
    (ir.mul(ir.add(i, j), k), "(i + j) * k"),
    (ir.add(i, ir.mul(j, k)), "i + j * k"),
    (ir.div(ir.mul(i, j), k), "i * j / k"),
    (ir.mod(i, ir.mul(j, k)), "i % (j * k)"),
    (ir.lt(ir.add(i, 1), j), "i + 1 < j"),
    (ir.eq(ir.lt(i, j), b), "(i < j) == b"),
    (ir.lor(ir.land(a, b), a), "(a && b) || a"),
    (ir.land(ir.lor(a, b), a), "(a || b) && a"),
    (ir.lnot(ir.lt(i, j)), "!(i < j)"),
    (ir.lnot(a), "!a"),
    (ir.neg(ir.neg(x)), "-(-x)"),
    (ir.neg(ir.const(-1.5, F64)), "-(-1.5)"),
    (ir.sub(x, ir.const(-1.0, F64)), "x - -1.0"),
    (ir.neg(ir.add(x, y)), "-(x + y)"),
    (ir.unary("sqrt", ir.add(x, y)), "sqrt(x + y)"),
    (ir.maximum(x, ir.minimum(y, 0.0)), "max(x, min(y, 0.0))"),
    (ir.binary("pow", x, 2.0), "pow(x, 2.0)"),
    (ir.cast(ir.add(i, j), F64), "(f64) (i + j)"),
    (ir.mul(ir.cast(i, F64), x), "(f64) i * x"),
    (ir.select(a, x, y), "a ? x : y"),
    (ir.add(ir.select(a, x, y), 1.0), "(a ? x : y) + 1.0"),
    (ir.select(a, ir.select(b, x, y), y), "a ? (b ? x : y) : y"),
    (ir.load(var("v", Ptr(F64)), ir.add(i, 1)), "v[i + 1]"),
    (ir.const(True, BOOL), "true"),
    (ir.const(2.5, F32), "2.5f"),
    (ir.const(math.inf, F64), "inf"),
    (ir.const(-math.inf, F64), "-inf"),
    (ir.const(math.nan, F64), "nan"),
    (ir.const(-0.0, F64), "-0.0"),
    (ir.const(1e-30, F64), "1e-30"),
])
def test_expression_text(expr, text):
    assert ir.format_node(expr) == text
    assert ir.format_expr(expr) == text


@pytest.mark.parametrize("node, text", [
    (ir.Block(), "{\n}"),
    (ir.comment("two\nlines"), "// two\n// lines"),
    (ir.store(var("v", Ptr(F64)), i, 1.0, accumulate=True), "v[i] += 1.0;"),
    (ir.for_(i, 0, 3), "for (i64 i = 0; i < 3; i++) {}"),
    (ir.while_(a), "while (a) {}"),
    (ir.if_(a, ir.comment("t"), ir.comment("f")), "if (a) {\n  // t\n} else {\n  // f\n}"),
    (ir.free(var("w", Ptr(F64))), "free(w);"),
    (param(var("n", I64), "A.dim.0"), "i64 n [A.dim.0]"),
    (Ptr(Ptr(F32)), "f32**"),
])
def test_statement_text(node, text):
    assert ir.format_node(node) == text


def test_printing_is_deterministic():
    assert ir.format_function(spmv()) == ir.format_function(spmv())


def test_non_node_is_rejected():
    with pytest.raises(ir.IRError):
        ir.format_node("not a node")  # type: ignore[arg-type]


@pytest.mark.parametrize("module", [
    "build", "rewrite", "printer", "verify",
    "passes.simplify", "passes.dead_code", "passes.hoist", "passes.pipeline",
])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"tensoralg.ir.{module}"))
    assert result.failed == 0
