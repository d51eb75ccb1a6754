"""Constant folding and algebraic simplification.

Invariant: the simplified function computes exactly what the original computed, bit for bit,
under the C semantics of ``nodes.py``. Hence:

- integer arithmetic folds with two's-complement wrap-around, ``/`` truncating toward zero and
  ``%`` taking the dividend's sign; a division by a zero constant is left alone;
- float arithmetic folds only where IEEE results are exactly reproducible here: ``+ - * /``
  (f32 through f64, which rounds correctly for these operations), ``%`` (``fmod``), ``sqrt``,
  ``neg``, ``abs``, ``min``/``max``, comparisons and exact casts; never ``pow``, ``exp``,
  ``log`` or the trigonometric functions (libm-dependent), never division by zero;
- identities that drop an operand (``x + 0``, ``x * 1``, ``x * 0``, ``x - x`` ...) apply to
  integers only: for floats ``x * 0`` is NaN when ``x`` is, and ``x + 0.0`` turns -0.0 into 0.0;
- expressions have no side effects, so dropping one (``x * 0``, ``false && x``) is safe;
- statements: an If with a constant condition becomes its taken branch, ``while (false)`` and
  a For with constant bounds ``start >= stop`` disappear, ``x = x`` disappears, nested Blocks
  are spliced into their parent (names are unique per function, so widening a scope is
  harmless) and empty ones dropped.
"""
from __future__ import annotations

import math
import struct
from typing import Callable

from .. import nodes as n
from ..rewrite import rewrite, walk

_INT_BITS = {n.I32: 32, n.I64: 64}


def simplify(fn: n.Function) -> n.Function:
    """Fold constants and apply exact integer identities; see the module docstring.

    >>> from tensoralg.ir.build import add, mul, declare, function, var, i64
    >>> from tensoralg.ir.printer import format_function
    >>> t, x = var("t", n.I64), var("x", n.I64)
    >>> f = function("k", [n.Param(x, "x")], declare(t, add(mul(x, 1), mul(i64(2), 3))))
    >>> print(format_function(simplify(f)))
    kernel k(i64 x [x])
      i64 t = x + 6;
    """
    result = rewrite(fn, _simplify_node)
    assert isinstance(result, n.Function)
    return result


def _simplify_node(node: n.Node) -> n.Node | None:
    match node:
        case n.Unary():
            return _unary(node)
        case n.Binary():
            return _binary(node)
        case n.Select(n.Const(value), if_true, if_false):
            return if_true if value else if_false
        case n.Cast():
            return _cast(node)
        case n.Block():
            return splice_blocks(node)
        case n.If(n.Const(value), then, otherwise):
            return then if value else otherwise
        case n.While(n.Const(False)):
            return n.Block()
        case n.For(_, n.Const(start), n.Const(stop)) if start >= stop:
            return n.Block()
        case n.Assign(v, n.Var() as value) if value == v:
            return n.Block()
    return None


# ---------------------------------------------------------------------------------------------
# Numeric helpers with C semantics


def wrap_int(value: int, dtype: n.Scalar) -> int:
    """``value`` reduced to the two's-complement range of ``dtype``.

    >>> wrap_int(2**31, n.I32)
    -2147483648
    """
    bits = _INT_BITS[dtype]
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def c_div(a: int, b: int) -> int:
    """C integer division: truncates toward zero.

    >>> c_div(-7, 2)
    -3
    """
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def c_mod(a: int, b: int) -> int:
    """C ``%``: the result takes the sign of the dividend.

    >>> c_mod(-7, 2)
    -1
    """
    return a - b * c_div(a, b)


def _to_f32(x: float) -> float | None:
    """``x`` rounded to single precision, or None when it would overflow to infinity."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:
        return None


def _value(c: n.Const) -> int | float | bool:
    """The value C sees: an f32 literal is first rounded to single precision."""
    if c.dtype is n.F32 and math.isfinite(c.value):
        rounded = _to_f32(float(c.value))
        return math.copysign(math.inf, c.value) if rounded is None else rounded
    return float(c.value) if c.dtype.is_float else c.value


def _float_result(x: float, dtype: n.Scalar) -> n.Const | None:
    if dtype is n.F32:
        if math.isfinite(x):
            rounded = _to_f32(x)
            return None if rounded is None else n.Const(rounded, dtype)
        return n.Const(x, dtype)
    return n.Const(x, dtype)


def _fmin_fmax(op: str, a: float, b: float) -> float | None:
    if math.isnan(a):
        return b
    if math.isnan(b):
        return a
    if a == b == 0.0 and math.copysign(1, a) != math.copysign(1, b):
        return None  # C leaves fmin(-0.0, 0.0) to the implementation
    return min(a, b) if op == "min" else max(a, b)


_COMPARE: dict[str, Callable[[object, object], bool]] = {
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,  # type: ignore[operator]
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
}


# ---------------------------------------------------------------------------------------------
# Expressions


def _unary(e: n.Unary) -> n.Expr | None:
    match e:
        case n.Unary("not", n.Unary("not", inner)):
            return inner
        case n.Unary("not", n.Const(value)):
            return n.Const(not value, n.BOOL)
        case n.Unary("neg", n.Unary("neg", inner)):
            return inner  # exact for floats too: negation only flips the sign bit
        case n.Unary("neg", n.Const(value, dtype)) if _is_int(dtype):
            return n.Const(wrap_int(-value, dtype), dtype)
        case n.Unary("neg", n.Const(value, dtype)) if dtype.is_float:
            return n.Const(-float(value), dtype)
        case n.Unary("abs", n.Const(value, dtype)) if _is_int(dtype):
            return n.Const(wrap_int(abs(value), dtype), dtype)
        case n.Unary("abs", n.Const(value, dtype)) if dtype.is_float:
            return n.Const(abs(float(value)), dtype)
        case n.Unary("sqrt", n.Const(_, dtype) as c) if dtype.is_float and _value(c) >= 0:
            return _float_result(math.sqrt(_value(c)), dtype)
    return None


def _binary(e: n.Binary) -> n.Expr | None:
    folded = _fold_constants(e)
    if folded is not None:
        return folded
    if e.op in n.LOGICAL_OPS:
        return _logical(e)
    if _is_int(n.dtype_of(e.lhs)):
        return _integer_identity(e)
    return None


def _fold_constants(e: n.Binary) -> n.Const | None:
    if not (isinstance(e.lhs, n.Const) and isinstance(e.rhs, n.Const)):
        return None
    a, b, dtype = _value(e.lhs), _value(e.rhs), e.lhs.dtype
    if e.op in n.COMPARISON_OPS:
        return n.Const(_COMPARE[e.op](a, b), n.BOOL)
    if e.op in n.LOGICAL_OPS:
        return n.Const(bool(a and b) if e.op == "and" else bool(a or b), n.BOOL)
    if _is_int(dtype):
        value = _int_arith(e.op, int(a), int(b))
        return None if value is None else n.Const(wrap_int(value, dtype), dtype)
    if dtype.is_float:
        value = _float_arith(e.op, float(a), float(b))
        return None if value is None else _float_result(value, dtype)
    return None


def _int_arith(op: str, a: int, b: int) -> int | None:
    match op:
        case "+":
            return a + b
        case "-":
            return a - b
        case "*":
            return a * b
        case "/" if b != 0:
            return c_div(a, b)
        case "%" if b != 0:
            return c_mod(a, b)
        case "min":
            return min(a, b)
        case "max":
            return max(a, b)
    return None  # pow (C pow works on doubles) and division by zero stay as written


def _float_arith(op: str, a: float, b: float) -> float | None:
    match op:
        case "+":
            return a + b
        case "-":
            return a - b
        case "*":
            return a * b
        case "/" if b != 0.0:
            return a / b
        case "%" if b != 0.0 and math.isfinite(a):
            return math.fmod(a, b)
        case "min" | "max":
            return _fmin_fmax(op, a, b)
    return None


def _logical(e: n.Binary) -> n.Expr | None:
    # Operands have no side effects, so a constant on either side decides or vanishes.
    absorbing = e.op == "or"  # true || x == true; false && x == false
    for const, other in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
        if isinstance(const, n.Const):
            return n.Const(absorbing, n.BOOL) if bool(const.value) == absorbing else other
    return None


def _integer_identity(e: n.Binary) -> n.Expr | None:
    dtype = e.lhs.dtype
    zero = n.Const(0, dtype)
    match e.op, e.lhs, e.rhs:
        case ("+", x, n.Const(0)) | ("+", n.Const(0), x) | ("-", x, n.Const(0)):
            return x
        case ("*", x, n.Const(1)) | ("*", n.Const(1), x) | ("/", x, n.Const(1)):
            return x
        case ("*", _, n.Const(0)) | ("*", n.Const(0), _) | ("%", _, n.Const(1 | -1)):
            return zero
        case ("-", x, y) if _same_int_expr(x, y):
            return zero
        case ("min" | "max", x, y) if _same_int_expr(x, y):
            return x
        case ("==" | "<=" | ">=", x, y) if _same_int_expr(x, y):
            return n.Const(True, n.BOOL)
        case ("!=" | "<" | ">", x, y) if _same_int_expr(x, y):
            return n.Const(False, n.BOOL)
    return None


def _same_int_expr(a: n.Expr, b: n.Expr) -> bool:
    # Dataclass equality treats 0.0 and -0.0 as equal, so only trust it on float-free trees.
    return a == b and not any(isinstance(x, n.Const) and x.dtype.is_float for x in walk(a))


def _is_int(dtype: n.DType) -> bool:
    return isinstance(dtype, n.Scalar) and dtype.is_int


# ---------------------------------------------------------------------------------------------
# Casts


def _cast(e: n.Cast) -> n.Expr | None:
    operand = e.operand
    if n.dtype_of(operand) == e.to:
        return operand
    if isinstance(operand, n.Const) and not (operand.dtype.is_complex or e.to.is_complex):
        # Complex constants are left for the backend to convert, part by part.
        value = cast_constant(_value(operand), operand.dtype, e.to)
        return None if value is None else n.Const(value, e.to)
    return None


def cast_constant(value: int | float | bool, source: n.Scalar, to: n.Scalar) -> int | float | bool | None:
    """C conversion of a constant, or None where C leaves it undefined or it may round twice.

    >>> cast_constant(-2.7, n.F64, n.I32)
    -2
    >>> cast_constant(2**40, n.I64, n.I32) == 0
    True
    """
    if to is n.BOOL:
        return bool(value)  # NaN != 0, so NaN converts to true, as in C
    if to.is_int:
        if source.is_float:
            x = float(value)
            if not math.isfinite(x) or not -(2 ** (_INT_BITS[to] - 1)) <= math.trunc(x) < 2 ** (_INT_BITS[to] - 1):
                return None
            return math.trunc(x)
        return wrap_int(int(value), to)
    # to is a float type
    if source.is_float:
        x = float(value)
        if to is n.F64 or not math.isfinite(x):
            return x
        return _to_f32(x)
    integer = int(value)
    if abs(integer) > 2 ** 53:
        return None  # int -> double -> float would round twice
    x = float(integer)
    return x if to is n.F64 else _to_f32(x)


# ---------------------------------------------------------------------------------------------
# Blocks


def splice_blocks(b: n.Block) -> n.Block | None:
    """``b`` with the statements of its nested Blocks spliced in, or None if it has none.

    Safe because every name is introduced once per function: widening a scope hides nothing.

    >>> splice_blocks(n.Block((n.Comment("a"), n.Block((n.Comment("b"),))))).body
    (Comment(text='a'), Comment(text='b'))
    """
    if not any(isinstance(s, n.Block) for s in b.body):
        return None
    body: list[n.Stmt] = []
    for s in b.body:
        if isinstance(s, n.Block):
            body.extend(s.body)  # already flattened: children are rewritten first
        else:
            body.append(s)
    return n.Block(tuple(body))


__all__ = ["c_div", "c_mod", "cast_constant", "simplify", "splice_blocks", "wrap_int"]
