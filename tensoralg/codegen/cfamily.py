"""The shared C-like emitter: prints an `ir.nodes.Function` as C-family source.

`CFamilyEmitter` prints every node; dialects (`c.CEmitter`, `cuda.CudaEmitter`) override only
class attributes and the few hook methods where the languages differ: the kernel signature, how
a status is returned, and how heap memory is obtained. The base never names a dialect.

Expressions are printed with C precedence, so the source has no more parentheses than it needs;
the parse tree of the printed source is exactly the IR's, which keeps floating-point results
identical to the LLVM backend's.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from tensoralg.codegen.lines import Lines
from tensoralg.errors import CompileError, UnsupportedError
from tensoralg.ir.nodes import (
    BITWISE_OPS,
    Allocate,
    Assign,
    Binary,
    Block,
    Cast,
    Comment,
    Const,
    Declare,
    DType,
    Expr,
    For,
    Free,
    Function,
    Grow,
    If,
    Load,
    Ptr,
    Scalar,
    Select,
    Stmt,
    Store,
    Unary,
    Var,
    While,
)
from tensoralg.ir.rewrite import walk

SCALAR_TYPES = {
    Scalar.BOOL: "bool",
    Scalar.I32: "int32_t",
    Scalar.I64: "int64_t",
    Scalar.F32: "float",
    Scalar.F64: "double",
}
# C99 complex types: NumPy's complex64/complex128 layout. A dialect without them (CUDA C++)
# leaves ``complex_values`` off and refuses complex kernels.
COMPLEX_TYPES = {Scalar.C64: "float _Complex", Scalar.C128: "double _Complex"}

# Binding strength of C operators: lower binds tighter (C11 6.5).
ATOM, UNARY, TERNARY = 0, 2, 13
BINARY_PRECEDENCE = {
    "*": 3,
    "/": 3,
    "%": 3,
    "+": 4,
    "-": 4,
    "<": 6,
    "<=": 6,
    ">": 6,
    ">=": 6,
    "==": 7,
    "!=": 7,
    "and": 11,
    "or": 12,
}
C_OPERATOR = {"and": "&&", "or": "||"}
_BIT_OPERATOR = {"bitand": "&", "bitor": "|", "shr": ">>"}
# Operands bind if their precedence is below (left, right); arithmetic is left-associative.
# Chained comparisons and && inside || get parentheses C does not need: they read badly.
_OPERAND_CONTEXT = {6: (6, 6), 7: (6, 6), 11: (12, 11), 12: (11, 11)}
FLOAT_MATH = frozenset({"sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "ceil", "round"})
# IR ops whose C function has another name: the IR's ``round`` is half to even, which is C's
# ``nearbyint`` under the default rounding mode (C's ``round`` goes half away from zero).
C_MATH_NAME = {"round": "nearbyint"}

# Float32 ``exp`` and ``tanh`` written out. libm's ``expf`` and ``tanhf`` are a call per value
# (4 and 27 ns) and keep a statement's loop from vectorising; inline, a value costs well under
# a nanosecond. The LLVM backend (``softmax.scalar_expf``/``scalar_tanhf``) and the C dialect
# (`CFamilyEmitter.inline_math_helpers`) compute these same steps in the same order, with no
# fused multiply-add (plain LLVM fmul/fadd; ``-ffp-contract=off`` for C), so that they agree
# bit for bit. Both stay within 2 ulp of libm (tests/test_inline_math.py).
#
# exp (Cephes' expf): exp(x) = 2^n exp(r), n = rint(x log2 e), r = x - n ln 2 with ln 2 in two
# parts so that r is exact; exp(r) by a degree-7 polynomial on |r| <= ln 2 / 2. 2^n is built
# from exponent bits in two halves, so that n in [-150, 128] (subnormal results included)
# never overflows the exponent field. Below EXPF_LOW the result rounds to 0 and above
# EXPF_HIGH to +inf; those lanes compute exp(0) instead, so that no lane works on subnormals
# it does not need (a subnormal multiply costs a microcode assist on x86).
EXPF_LN2_HI, EXPF_LN2_LO, EXPF_LOG2E = 0.693359375, -2.12194440e-4, 1.44269504088896341
EXPF_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
EXPF_LOW, EXPF_HIGH = -104.0, 88.72283
# tanh (Cephes' tanhf) on |x|, with the sign of x put back by copysign (so tanh(-0) = -0):
# below |x| = TANHF_SMALL an odd polynomial, above it 1 - 2 / (exp(2|x|) + 1) (no harmful
# cancellation there). Both are computed and one selected; NaN stays NaN, +-inf give +-1.
TANHF_SMALL = 0.625
TANHF_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)

C_KEYWORDS = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while bool true false main malloc calloc realloc free fmin fmax
    pow sqrt exp log sin cos tanh fabs abs llabs fmod floor ceil nearbyint round NULL INFINITY NAN
    int32_t int64_t size_t
""".split()
)


@dataclass(slots=True)
class _Names:
    """C identifiers of one function's variables: unique, valid, and not keywords."""

    reserved: frozenset[str]
    of: dict[str, str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def add(self, name: str) -> str:
        if name not in self.of:
            self.of[name] = self.fresh(name)
        return self.of[name]

    def fresh(self, base: str) -> str:
        text = re.sub(r"\W", "_", base) or "v"
        if text[0].isdigit() or text in C_KEYWORDS or text in self.reserved:
            text = "v_" + text
        candidate, n = text, 1
        while candidate in self.used:
            candidate, n = f"{text}_{n}", n + 1
        self.used.add(candidate)
        return candidate


def _statements(block: Block) -> Iterator[Stmt]:
    """Every statement in ``block``, nested ones included, in program order."""
    for stmt in block.body:
        yield stmt
        match stmt:
            case Block():
                yield from _statements(stmt)
            case For(body=body) | While(body=body):
                yield from _statements(body)
            case If(then=then, otherwise=otherwise):
                yield from _statements(then)
                yield from _statements(otherwise)


def introduced_vars(fn: Function) -> Iterator[Var]:
    """Parameters, then every Declare/Allocate/For variable of ``fn`` in program order."""
    for param in fn.params:
        yield param.var
    for stmt in _statements(fn.body):
        match stmt:
            case Declare(var=var) | Allocate(var=var) | For(var=var):
                yield var


def written_pointers(fn: Function) -> set[str]:
    """Names of the buffers that some Store writes."""
    return {s.array.name for s in _statements(fn.body) if isinstance(s, Store)}


class CFamilyEmitter:
    """Prints an `ir.nodes.Function` as C-like source; dialects change only what differs.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> print(CFamilyEmitter().emit(Function("nothing", (), Block())).splitlines()[-3])
    int32_t nothing(void) {
    """

    restrict = "restrict"
    kernel_qualifiers = ""
    indent = "  "
    includes: tuple[str, ...] = ("stdbool.h", "stdint.h", "stdlib.h", "math.h")
    helper_qualifiers = "static inline"
    return_type = "int32_t"
    reserved: frozenset[str] = frozenset()  # names the dialect itself declares
    # A schedule's unroll hint; C compilers have no portable vector-width hint that leaves the
    # legality check to them, so a vectorize hint is only recorded in a comment.
    unroll_pragma = "#pragma GCC unroll {}"
    complex_values = False
    # Unary float32 math printed as the inline formulas above rather than libm calls (the C
    # dialect: it must match the LLVM backend bit for bit; CUDA keeps its device functions).
    inline_f32_math: frozenset[str] = frozenset()
    backend_name = "this"    # for messages: the ``backend=`` value that chose the dialect

    # -- the function ------------------------------------------------------------------------

    def emit(self, fn: Function) -> str:
        """The source of one translation unit holding ``fn``."""
        names = _Names(self.reserved)
        for var in introduced_vars(fn):
            names.add(var.name)
        complex_used = sorted({t for x in (*walk(fn.body), *(p.var for p in fn.params))
                               if (t := _complex_of(x)) is not None}, key=lambda t: t.value)
        if complex_used and not self.complex_values:
            raise UnsupportedError(f"kernel {fn.name!r}: " +
                                   _no_complex(self, ", ".join(map(str, complex_used))))
        out = Lines(self.indent)
        out.comment(f"Kernel `{fn.name}`, generated by tensoralg.")
        for note in fn.notes:
            out.comment(_comment_text("- " + note))
        for header in self.includes:
            out.line(f"#include <{header}>")
        out.line()
        self.float_helpers(fn, out)
        self.inline_math_helpers(fn, out)
        self.complex_helpers(complex_used, out)
        self.signature(fn, names, out)
        with out.indented():
            try:
                self.block(fn.body, names, out)
            except KeyError as error:
                raise CompileError(undeclared_message(fn, error)) from None
            self.end_of_kernel(out)
        out.line("}")
        return out.text()

    def float_helpers(self, fn: Function, out: Lines) -> None:
        """``ta_max_f64`` and friends, for the kernels whose IR takes a float ``min``/``max``:
        NaN in either operand gives NaN (ir/nodes.py), which C's ``fmin``/``fmax`` do not."""
        used = sorted({(x.op, x.dtype) for x in walk(fn.body) if isinstance(x, Binary) and
                       x.op in ("min", "max") and x.dtype in (Scalar.F32, Scalar.F64)},
                      key=lambda pair: (pair[0], pair[1].value))
        for op, dtype in used:
            # Of two equal zeros, max takes +0 and min -0, as LLVM's maximum/minimum do.
            t, compare, sign = SCALAR_TYPES[dtype], *((">", "!") if op == "max" else ("<", ""))
            test = f"a != a || a {compare} b || (a == b && {sign}signbit(a))"
            out.line(f"{self.helper_qualifiers} {t} {_float_helper(op, dtype)}({t} a, {t} b) "
                     f"{{ return {test} ? a : b; }}")
        if used:
            out.line()

    def inline_math_helpers(self, fn: Function, out: Lines) -> None:
        """``ta_expf`` and ``ta_tanhf`` (the formulas at the top of this module), for
        the kernels whose IR takes a float32 ``exp`` or ``tanh`` the dialect inlines. Each C
        statement is one step of ``softmax.scalar_expf``/``scalar_tanhf``, in their order."""
        used = {x.op for x in walk(fn.body) if isinstance(x, Unary) and
                x.op in self.inline_f32_math and x.operand.dtype == Scalar.F32}
        if not used:
            return
        q = self.helper_qualifiers

        def f(value: float) -> str:
            return self.literal(value, Scalar.F32)

        def horner(variable: str, coefficients: tuple[float, ...]) -> None:
            out.line(f"float p = {f(coefficients[0])};")
            for c in coefficients[1:]:
                out.line(f"p = p * {variable} + {f(c)};")

        # ta_tanhf calls ta_expf, so ta_expf is printed whenever either is used.
        out.line(f"{q} float ta_expf(float v) {{")
        with out.indented():
            out.line("union { uint32_t bits; float value; } by_half, by_rest;")
            out.line(f"bool nan = v != v, low = v < {f(EXPF_LOW)}, high = v > {f(EXPF_HIGH)};")
            out.line(f"float x = nan || low ? 0.0f : high ? {f(EXPF_HIGH)} : v;")
            out.line(f"float n = rintf(x * {f(EXPF_LOG2E)});")
            out.line(f"float r = x - n * {f(EXPF_LN2_HI)} - n * {f(EXPF_LN2_LO)};")
            horner("r", EXPF_POLY)
            out.line("float e = p * r * r + r + 1.0f;")
            out.line("int32_t k = (int32_t)n, half = k >> 1, rest = k - half;")
            out.line("by_half.bits = (uint32_t)(half + 127) << 23;")
            out.line("by_rest.bits = (uint32_t)(rest + 127) << 23;")
            out.line("e = e * by_half.value * by_rest.value;")
            out.line("return nan ? v : low ? 0.0f : high ? INFINITY : e;")
        out.line("}")
        if "tanh" in used:
            out.line(f"{q} float ta_tanhf(float x) {{")
            with out.indented():
                out.line("float size = fabsf(x);")
                out.line("float e = ta_expf(size + size);")
                out.line("float large = 1.0f - 2.0f / (e + 1.0f);")
                out.line("float z = size * size;")
                horner("z", TANHF_POLY)
                out.line("float small = p * z * size + size;")
                out.line(f"return copysignf(size > {f(TANHF_SMALL)} ? large : small, x);")
            out.line("}")
        out.line()

    def complex_helpers(self, dtypes: list[Scalar], out: Lines) -> None:
        """Constructor, product and quotient of each complex dtype used, as NumPy computes
        them (ir/nodes.py): C's own ``*`` and ``/`` follow Annex G, which treats infinities
        differently and calls a library routine."""
        q = self.helper_qualifiers
        for dtype in dtypes:
            t, r, c = COMPLEX_TYPES[dtype], SCALAR_TYPES[dtype.part], dtype.value
            fabs = self.math_name("fabs", dtype.part)
            one = self.literal(1.0, dtype.part)
            out.line(f"{q} {t} ta_{c}({r} re, {r} im) {{ {t} z; __real__ z = re; "
                     f"__imag__ z = im; return z; }}")
            out.line(f"{q} {t} ta_mul_{c}({t} a, {t} b) {{")
            with out.indented():
                out.line(f"{r} ar = __real__ a, ai = __imag__ a, br = __real__ b, "
                         f"bi = __imag__ b;")
                out.line(f"return ta_{c}(ar * br - ai * bi, ar * bi + ai * br);")
            out.line("}")
            out.line(f"{q} {t} ta_div_{c}({t} a, {t} b) {{")
            with out.indented():
                out.line(f"{r} ar = __real__ a, ai = __imag__ a, br = __real__ b, "
                         f"bi = __imag__ b;")
                out.line(f"{r} br_abs = {fabs}(br), bi_abs = {fabs}(bi);")
                out.line("if (br_abs >= bi_abs) {")
                with out.indented():
                    out.line("if (br_abs == 0 && bi_abs == 0) "
                             f"return ta_{c}(ar / br_abs, ai / br_abs);")
                    out.line(f"{r} rat = bi / br, scl = {one} / (br + bi * rat);")
                    out.line(f"return ta_{c}((ar + ai * rat) * scl, (ai - ar * rat) * scl);")
                out.line("}")
                out.line(f"{r} rat = br / bi, scl = {one} / (bi + br * rat);")
                out.line(f"return ta_{c}((ar * rat + ai) * scl, (ai * rat - ar) * scl);")
            out.line("}")
        if dtypes:
            out.line()

    def signature(self, fn: Function, names: _Names, out: Lines) -> None:
        """Print the kernel's head up to and including the opening brace."""
        head = f"{self.kernel_qualifiers} {self.return_type} {fn.name}(".lstrip()
        decls = self.parameters(fn, names)
        if not decls:
            out.line(head + "void) {")
            return
        out.line(head)
        with out.indented(), out.indented():
            width = max(len(decl) for decl, _ in decls) + 1
            for k, (decl, role) in enumerate(decls):
                text = decl + ("," if k + 1 < len(decls) else "")
                out.line(f"{text:<{width}} // {role}" if role else text)
        out.line(") {")

    def parameters(self, fn: Function, names: _Names) -> list[tuple[str, str]]:
        """(declaration, comment) per parameter, in ABI order."""
        written = written_pointers(fn)
        decls = []
        for param in fn.params:
            var = param.var
            if isinstance(var.dtype, Ptr):
                const = "" if var.name in written or isinstance(var.dtype.elem, Ptr) else "const "
                decl = f"{const}{self.type_name(var.dtype)} {self.restrict} {names.of[var.name]}"
            else:
                decl = f"{self.type_name(var.dtype)} {names.of[var.name]}"
            role = param.role + (" (output)" if param.output else "")
            decls.append((decl, _comment_text(role)))
        return decls

    def end_of_kernel(self, out: Lines) -> None:
        """Print what ends the body when it runs to completion (status 0)."""
        out.line(self.return_status(0))

    def return_status(self, code: int) -> str:
        """The statement that ends the kernel with status ``code``."""
        return f"return {code};"

    # -- statements --------------------------------------------------------------------------

    def block(self, block: Block, names: _Names, out: Lines) -> None:
        for stmt in block.body:
            self.statement(stmt, names, out)

    def statement(self, stmt: Stmt, names: _Names, out: Lines) -> None:
        match stmt:
            case Block():
                # A nested Block opens no C scope: IR variables live until the function ends.
                self.block(stmt, names, out)
            case Declare(var, init):
                out.line(
                    f"{self.type_name(var.dtype)} {names.of[var.name]} = {self.expr(init, names)};"
                )
            case Assign(var, value):
                out.line(f"{names.of[var.name]} = {self.expr(value, names)};")
            case Store(array, index, value, accumulate):
                target = f"{names.of[array.name]}[{self.expr(index, names)}]"
                out.line(f"{target} {'+=' if accumulate else '='} {self.expr(value, names)};")
            case For(var, start, stop, body):
                if stmt.unroll:
                    out.line(self.unroll_pragma.format(stmt.unroll))
                if stmt.vectorize:
                    out.comment(f"vectorize {stmt.vectorize}"
                                + (" with a masked tail" if stmt.masked else "")
                                + ": left to the C compiler")
                name = names.of[var.name]
                head = (
                    f"for ({self.type_name(var.dtype)} {name} = {self.expr(start, names)}; "
                    f"{name} < {self.expr(stop, names, 5)}; ++{name}) {{"
                )
                with out.block(head, "}"):
                    self.block(body, names, out)
            case While(cond, body):
                with out.block(f"while ({self.expr(cond, names)}) {{", "}"):
                    self.block(body, names, out)
            case If():
                self.if_chain(stmt, names, out, "if")
            case Comment(text):
                out.comment(_comment_text(text))
            case Allocate(var, count, zero):
                name = names.of[var.name]
                self.allocate(
                    out,
                    self.type_name(var.dtype),
                    name,
                    self.elem_name(var),
                    self.expr(count, names, UNARY),
                    zero,
                )
            case Grow():
                self.grow(stmt, names, out)
            case Free(var):
                out.line(f"free({names.of[var.name]});")
            case _:
                raise CompileError(f"cannot emit statement {stmt!r}")

    def if_chain(self, stmt: If, names: _Names, out: Lines, keyword: str) -> None:
        out.line(f"{keyword} ({self.expr(stmt.cond, names)}) {{")
        with out.indented():
            self.block(stmt.then, names, out)
        rest = stmt.otherwise.body
        if not rest:
            out.line("}")
        elif len(rest) == 1 and isinstance(rest[0], If):
            self.if_chain(rest[0], names, out, "} else if")
        else:
            out.line("} else {")
            with out.indented():
                self.block(stmt.otherwise, names, out)
            out.line("}")

    def grow(self, stmt: Grow, names: _Names, out: Lines) -> None:
        buffer, capacity = names.of[stmt.var.name], names.of[stmt.capacity.name]
        needed = self.expr(stmt.needed, names, 5)
        with out.block(f"if ({needed} > {capacity}) {{", "}"):
            new_capacity = names.fresh(f"{buffer}_capacity")
            new_buffer = names.fresh(f"{buffer}_grown")
            out.line(f"int64_t {new_capacity} = 2 * {capacity};")
            out.line(f"if ({new_capacity} < {needed}) {new_capacity} = {needed};")
            self.reallocate(
                out,
                self.type_name(stmt.var.dtype),
                new_buffer,
                self.elem_name(stmt.var),
                buffer,
                capacity,
                new_capacity,
            )
            out.line(f"{buffer} = {new_buffer};")
            out.line(f"{capacity} = {new_capacity};")

    def allocate(
        self, out: Lines, ptr_type: str, name: str, elem: str, count: str, zero: bool
    ) -> None:
        """Declare ``name`` as a fresh buffer of ``count`` ``elem``s; return 1 on failure."""
        size = f"(size_t){count}"
        call = f"calloc({size}, sizeof({elem}))" if zero else f"malloc(sizeof({elem}) * {size})"
        out.line(f"{ptr_type} {name} = ({ptr_type}){call};")
        out.line(f"if ({name} == NULL) {self.return_status(1)}")

    def reallocate(
        self,
        out: Lines,
        ptr_type: str,
        name: str,
        elem: str,
        old: str,
        old_count: str,
        new_count: str,
    ) -> None:
        """Declare ``name`` as ``old`` moved to ``new_count`` elements; on failure ``old``
        stays valid and the kernel returns 1."""
        out.line(
            f"{ptr_type} {name} = ({ptr_type})realloc({old}, sizeof({elem}) * (size_t){new_count});"
        )
        out.line(f"if ({name} == NULL) {self.return_status(1)}")

    # -- expressions -------------------------------------------------------------------------

    def expr(self, expr: Expr, names: _Names, context: int = TERNARY + 1) -> str:
        """``expr`` as C, parenthesised if it binds more loosely than ``context`` allows."""
        text, precedence = self.term(expr, names)
        return f"({text})" if precedence >= context else text

    def term(self, expr: Expr, names: _Names) -> tuple[str, int]:
        """``expr`` as C text and the binding strength of its outermost operator."""
        match expr:
            case Const(value, dtype):
                text = self.literal(value, dtype)
                return text, UNARY if text.startswith("-") else ATOM
            case Var(name):
                return names.of[name], ATOM
            case Load(array, index):
                return f"{names.of[array.name]}[{self.expr(index, names)}]", ATOM
            case Unary(op, operand):
                return self.unary(op, operand, names)
            case Binary(op, lhs, rhs):
                return self.binary(op, lhs, rhs, names)
            case Select(cond, if_true, if_false):
                parts = [self.expr(e, names, TERNARY) for e in (cond, if_true, if_false)]
                return f"{parts[0]} ? {parts[1]} : {parts[2]}", TERNARY
            case Cast(operand, to):
                if operand.dtype == to:
                    return self.term(operand, names)
                return f"({self.type_name(to)}){self.operand_of_unary(operand, names)}", UNARY
        raise CompileError(f"cannot emit expression {expr!r}")

    def operand_of_unary(self, operand: Expr, names: _Names) -> str:
        text = self.expr(operand, names, UNARY + 1)
        return f"({text})" if text.startswith("-") else text

    def unary(self, op: str, operand: Expr, names: _Names) -> tuple[str, int]:
        dtype = operand.dtype
        match op:
            case "neg":
                return "-" + self.operand_of_unary(operand, names), UNARY
            case "not":
                return "!" + self.operand_of_unary(operand, names), UNARY
            case "ctz" if isinstance(dtype, Scalar) and dtype.is_int:
                return self.ctz(self.expr(operand, names), dtype), ATOM
            case "abs" if dtype == Scalar.I32:
                return f"abs({self.expr(operand, names)})", ATOM
            case "abs" if dtype == Scalar.I64:
                return f"llabs({self.expr(operand, names)})", ATOM
            case "abs" if isinstance(dtype, Scalar) and dtype.is_float:
                return f"{self.math_name('fabs', dtype)}({self.expr(operand, names)})", ATOM
            case _ if op in self.inline_f32_math and dtype == Scalar.F32:
                return f"ta_{op}f({self.expr(operand, names)})", ATOM
            case _ if op in FLOAT_MATH and isinstance(dtype, Scalar) and dtype.is_float:
                name = self.math_name(C_MATH_NAME.get(op, op), dtype)
                return f"{name}({self.expr(operand, names)})", ATOM
        raise CompileError(f"unary {op!r} is not defined on {dtype}")

    def binary(self, op: str, lhs: Expr, rhs: Expr, names: _Names) -> tuple[str, int]:
        dtype = lhs.dtype
        is_float = isinstance(dtype, Scalar) and dtype.is_float
        if isinstance(dtype, Scalar) and dtype.is_complex and op in ("*", "/"):
            helper = f"ta_{'mul' if op == '*' else 'div'}_{dtype.value}"
            return f"{helper}({self.expr(lhs, names)}, {self.expr(rhs, names)})", ATOM
        if isinstance(dtype, Scalar) and dtype.is_complex and op not in ("+", "-", "==", "!="):
            raise CompileError(f"binary {op!r} is not defined on {dtype}")
        if op in ("min", "max", "pow") or (op == "%" and is_float):
            return self.binary_call(op, lhs, rhs, names), ATOM
        if op in BITWISE_OPS:
            return self.bitwise(op, lhs, rhs, names), ATOM
        precedence = BINARY_PRECEDENCE[op]
        left_context, right_context = _OPERAND_CONTEXT.get(precedence, (precedence + 1, precedence))
        left = self.expr(lhs, names, left_context)
        right = self.expr(rhs, names, right_context)
        if dtype == Scalar.I64 and isinstance(lhs, Const) and isinstance(rhs, Const):
            left = f"(int64_t){left}"  # two int literals would multiply in 32 bits
        return f"{left} {C_OPERATOR.get(op, op)} {right}", precedence

    def bitwise(self, op: str, lhs: Expr, rhs: Expr, names: _Names) -> str:
        """A bit operation, fully parenthesised (C's precedences for them surprise)."""
        dtype = lhs.dtype
        if not isinstance(dtype, Scalar) or not dtype.is_int:
            raise CompileError(f"binary {op!r} is not defined on {dtype}")
        a, b = self.expr(lhs, names, UNARY + 1), self.expr(rhs, names, UNARY + 1)
        if op == "shl":   # through the unsigned type: shifting into the sign bit is UB in C
            signed = self.type_name(dtype)
            return f"(({signed})((u{signed}){a} << {b}))"
        return f"({a} {_BIT_OPERATOR[op]} {b})"

    def ctz(self, text: str, dtype: Scalar) -> str:
        """Trailing zero bits of ``text`` (an integer expression without side effects)."""
        width, builtin = (64, "__builtin_ctzll") if dtype == Scalar.I64 else (32, "__builtin_ctz")
        cast = "unsigned long long" if width == 64 else "unsigned int"
        return f"({text} ? {builtin}(({cast}){text}) : {width})"

    def binary_call(self, op: str, lhs: Expr, rhs: Expr, names: _Names) -> str:
        dtype = lhs.dtype
        if isinstance(dtype, Scalar) and dtype.is_float and op in ("min", "max"):
            return f"{_float_helper(op, dtype)}({self.expr(lhs, names)}, {self.expr(rhs, names)})"
        if isinstance(dtype, Scalar) and dtype.is_float:
            name = {"pow": "pow", "%": "fmod"}[op]
            return (
                f"{self.math_name(name, dtype)}({self.expr(lhs, names)}, {self.expr(rhs, names)})"
            )
        if op == "pow" or not isinstance(dtype, Scalar) or not dtype.is_int:
            raise CompileError(f"binary {op!r} is not defined on {dtype}")
        a, b = self.expr(lhs, names, 6), self.expr(rhs, names, 6)
        compare = "<" if op == "min" else ">"
        # Operands may be evaluated twice: IR expressions have no side effects.
        return f"({a} {compare} {b} ? {a} : {b})"

    def literal(self, value: int | float | bool | complex, dtype: Scalar) -> str:
        """A C literal of ``dtype`` for ``value``."""
        if dtype.is_complex:
            z = complex(value)
            return (f"ta_{dtype.value}({self.literal(z.real, dtype.part)}, "
                    f"{self.literal(z.imag, dtype.part)})")
        match dtype:
            case Scalar.BOOL:
                return "true" if value else "false"
            case Scalar.I32 | Scalar.I64:
                number = int(value)
                smallest = -(2**31) if dtype == Scalar.I32 else -(2**63)
                if number == smallest:
                    return f"({number + 1}{'LL' if dtype == Scalar.I64 else ''} - 1)"
                return f"{number}LL" if not -(2**31) <= number < 2**31 else str(number)
            case Scalar.F32 | Scalar.F64:
                number = float(value)
                if dtype == Scalar.F32:
                    # The float32 value itself, so that C and LLVM round the literal alike.
                    number = ctypes.c_float(number).value
                if number != number:
                    return "NAN"
                if number in (float("inf"), float("-inf")):
                    return "INFINITY" if number > 0 else "-INFINITY"
                return repr(number) + ("f" if dtype == Scalar.F32 else "")
        raise CompileError(f"no literal of dtype {dtype}")

    # -- types -------------------------------------------------------------------------------

    def type_name(self, dtype: DType) -> str:
        if isinstance(dtype, Ptr):
            return self.type_name(dtype.elem) + "*"
        if dtype in COMPLEX_TYPES:
            if not self.complex_values:
                raise UnsupportedError(_no_complex(self, str(dtype)))
            return COMPLEX_TYPES[dtype]
        return SCALAR_TYPES[dtype]

    def elem_name(self, var: Var) -> str:
        assert isinstance(var.dtype, Ptr)
        return self.type_name(var.dtype.elem)

    def math_name(self, name: str, dtype: DType) -> str:
        """libm's name of ``name`` for ``dtype``: the f-suffixed function for f32."""
        return name + "f" if dtype == Scalar.F32 else name


def _no_complex(emitter: CFamilyEmitter, dtypes: str) -> str:
    return (f"complex values ({dtypes}) are not supported by the {emitter.backend_name} "
            f"backend; run the kernel on the CPU (backend='llvm' or 'c')")


def _complex_of(node: object) -> Scalar | None:
    """The complex dtype of ``node``'s value (or of its buffer's elements), if it has one."""
    dtype = getattr(node, "dtype", None)
    while isinstance(dtype, Ptr):
        dtype = dtype.elem
    return dtype if isinstance(dtype, Scalar) and dtype.is_complex else None


def _float_helper(op: str, dtype: Scalar) -> str:
    return f"ta_{op}_{dtype.value}"


def undeclared_message(fn: Function, error: KeyError) -> str:
    return (
        f"kernel {fn.name!r} uses variable {error.args[0]!r}, which no Param, Declare, "
        "Allocate or For introduces"
    )


def _comment_text(text: str) -> str:
    # A backslash at the end of a // comment would swallow the next line of source.
    return "\n".join(line.rstrip().rstrip("\\") for line in text.splitlines())
