"""Small constructors so that lowering code reads like the loops it builds.

Helpers that take two operands accept a Python ``int``/``float``/``bool`` for one of them and
turn it into a ``Const`` of the other operand's dtype, so ``add(p, 1)`` is ``p + 1`` in p's
index dtype. Statement helpers accept statements, Blocks, lists of statements and None (dropped)
wherever a body is expected.

>>> i, n_ = var("i", I64), var("n", I64)
>>> y = var("y", Ptr(F64))
>>> loop = for_(i, 0, n_, store(y, i, 0.0))
>>> type(loop.body.body[0]).__name__
'Store'
"""
from __future__ import annotations

from typing import Iterable, Union

from .nodes import (
    BOOL,
    F64,  # noqa: F401  (the examples in the docstrings use it)
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
    DType,
    Expr,
    For,
    Free,
    Function,
    Grow,
    If,
    IRError,
    Load,
    Param,
    Ptr,
    RangeBound,
    Scalar,
    Select,
    Stmt,
    Store,
    Unary,
    Var,
    While,
    dtype_of,
)

Number = Union[int, float, bool, complex]
Operand = Union[Expr, int, float, bool]
BodyItem = Union[Stmt, Iterable["BodyItem"], None]

_INT_BITS = {I32: 32, I64: 64}


# ---------------------------------------------------------------------------------------------
# Leaves


def const(value: Number, dtype: Scalar) -> Const:
    """A literal of ``dtype``; the Python value is converted to the dtype's kind.

    >>> const(1, F64)
    Const(value=1.0, dtype=<Scalar.F64: 'f64'>)
    """
    if not isinstance(dtype, Scalar):
        raise IRError(f"a constant needs a scalar dtype, got {dtype}")
    if dtype is BOOL:
        return Const(bool(value), BOOL)
    if dtype.is_float:
        return Const(float(value), dtype)
    if dtype.is_complex:
        return Const(complex(value), dtype)
    if isinstance(value, float) and not value.is_integer():
        raise IRError(f"{value!r} is not an integer constant of type {dtype}")
    integer = int(value)
    bits = _INT_BITS[dtype]
    if not -(1 << (bits - 1)) <= integer < (1 << (bits - 1)):
        raise IRError(f"{integer} does not fit in {dtype}")
    return Const(integer, dtype)


def i64(value: int) -> Const:
    """An ``i64`` literal: the index dtype lower/ uses.

    >>> i64(3)
    Const(value=3, dtype=<Scalar.I64: 'i64'>)
    """
    return const(value, I64)


def var(name: str, dtype: DType) -> Var:
    """A variable reference (introduced elsewhere by a Param, Declare, Allocate or For).

    >>> var("p", Ptr(F64)).dtype
    Ptr(elem=<Scalar.F64: 'f64'>)
    """
    return Var(name, dtype)


def _is_python_number(x: object) -> bool:
    return isinstance(x, (int, float, bool, complex))


def _pair(a: Operand, b: Operand) -> tuple[Expr, Expr]:
    """Turn a Python number on either side into a Const of the other side's dtype."""
    match (_is_python_number(a), _is_python_number(b)):
        case (True, True):
            raise IRError(f"cannot infer a dtype for two Python numbers {a!r} and {b!r}")
        case (True, False):
            return const(a, _scalar(dtype_of(b))), b  # type: ignore[arg-type]
        case (False, True):
            return a, const(b, _scalar(dtype_of(a)))  # type: ignore[arg-type]
    return a, b  # type: ignore[return-value]


def _scalar(dtype: DType) -> Scalar:
    if not isinstance(dtype, Scalar):
        raise IRError(f"a Python number cannot stand for a value of pointer type {dtype}")
    return dtype


def _expr(x: Operand, dtype: DType) -> Expr:
    return const(x, _scalar(dtype)) if _is_python_number(x) else x  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Operators


def binary(op: str, a: Operand, b: Operand) -> Binary:
    """``a op b`` for any op in BINARY_OPS, with Python numbers coerced.

    >>> binary("/", var("n", I64), 2).rhs
    Const(value=2, dtype=<Scalar.I64: 'i64'>)
    """
    lhs, rhs = _pair(a, b)
    return Binary(op, lhs, rhs)


def add(a: Operand, b: Operand) -> Binary:
    """``a + b``.

    >>> add(var("p", I64), 1).rhs
    Const(value=1, dtype=<Scalar.I64: 'i64'>)
    """
    return binary("+", a, b)


def sub(a: Operand, b: Operand) -> Binary:
    """``a - b``."""
    return binary("-", a, b)


def mul(a: Operand, b: Operand) -> Binary:
    """``a * b``."""
    return binary("*", a, b)


def div(a: Operand, b: Operand) -> Binary:
    """``a / b`` (integer division truncates toward zero)."""
    return binary("/", a, b)


def mod(a: Operand, b: Operand) -> Binary:
    """``a % b`` (the result takes the sign of ``a``)."""
    return binary("%", a, b)


def minimum(a: Operand, b: Operand) -> Binary:
    """``min(a, b)`` (C ``fmin`` for floats)."""
    return binary("min", a, b)


def maximum(a: Operand, b: Operand) -> Binary:
    """``max(a, b)`` (C ``fmax`` for floats)."""
    return binary("max", a, b)


def lt(a: Operand, b: Operand) -> Binary:
    """``a < b``: a bool.

    >>> lt(var("p", I64), var("end", I64)).dtype
    <Scalar.BOOL: 'bool'>
    """
    return binary("<", a, b)


def le(a: Operand, b: Operand) -> Binary:
    """``a <= b``."""
    return binary("<=", a, b)


def gt(a: Operand, b: Operand) -> Binary:
    """``a > b``."""
    return binary(">", a, b)


def ge(a: Operand, b: Operand) -> Binary:
    """``a >= b``."""
    return binary(">=", a, b)


def eq(a: Operand, b: Operand) -> Binary:
    """``a == b``."""
    return binary("==", a, b)


def ne(a: Operand, b: Operand) -> Binary:
    """``a != b``."""
    return binary("!=", a, b)


def land(a: Operand, b: Operand) -> Binary:
    """``a && b`` (short-circuit; both bool)."""
    return binary("and", a, b)


def lor(a: Operand, b: Operand) -> Binary:
    """``a || b`` (short-circuit; both bool)."""
    return binary("or", a, b)


def lnot(a: Expr) -> Unary:
    """``!a`` for a bool.

    >>> lnot(lt(var("i", I64), 3)).op
    'not'
    """
    return Unary("not", a)


def neg(a: Expr) -> Unary:
    """``-a``."""
    return Unary("neg", a)


def bitand(a: Operand, b: Operand) -> Binary:
    """``a & b`` on integers.

    >>> bitand(var("k", I64), 63).rhs
    Const(value=63, dtype=<Scalar.I64: 'i64'>)
    """
    return binary("bitand", a, b)


def bitor(a: Operand, b: Operand) -> Binary:
    """``a | b`` on integers."""
    return binary("bitor", a, b)


def shl(a: Operand, b: Operand) -> Binary:
    """``a << b`` on integers, ``b`` in [0, bit width)."""
    return binary("shl", a, b)


def shr(a: Operand, b: Operand) -> Binary:
    """``a >> b`` (arithmetic) on integers, ``b`` in [0, bit width)."""
    return binary("shr", a, b)


def ctz(a: Expr) -> Unary:
    """The number of trailing zero bits of an integer (its bit width for 0)."""
    return Unary("ctz", a)


def unary(op: str, a: Expr) -> Unary:
    """``op(a)`` for any op in UNARY_OPS (``sqrt``, ``exp``, ...)."""
    return Unary(op, a)


def select(cond: Expr, if_true: Operand, if_false: Operand) -> Select:
    """``cond ? if_true : if_false``, with a Python number on one side coerced.

    >>> select(lt(var("i", I64), 3), var("x", F64), 0).if_false
    Const(value=0.0, dtype=<Scalar.F64: 'f64'>)
    """
    a, b = _pair(if_true, if_false)
    return Select(cond, a, b)


def cast(x: Operand, dtype: Scalar) -> Expr:
    """``(dtype) x``; returns ``x`` itself when it already has ``dtype``.

    >>> i = var("i", I64)
    >>> cast(i, I64) is i
    True
    """
    if _is_python_number(x):
        return const(x, dtype)  # type: ignore[arg-type]
    if dtype_of(x) == dtype:  # type: ignore[arg-type]
        return x  # type: ignore[return-value]
    return Cast(x, dtype)  # type: ignore[arg-type]


def load(array: Var, index: Operand) -> Load:
    """``array[index]``; a Python int index becomes an i64 constant.

    >>> load(var("A_vals", Ptr(F64)), 0).index
    Const(value=0, dtype=<Scalar.I64: 'i64'>)
    """
    return Load(array, _expr(index, I64))


# ---------------------------------------------------------------------------------------------
# Statements


def _flatten(items: Iterable[BodyItem]) -> Iterable[Stmt]:
    for item in items:
        match item:
            case None:
                continue
            case Block(body):
                yield from _flatten(body)
            case list() | tuple():
                yield from _flatten(item)
            case _:
                yield item  # type: ignore[misc]


def block(*stmts: BodyItem) -> Block:
    """A Block of the statements given, with nested Blocks spliced in and None dropped.

    Splicing a nested Block widens the scope of its locals, which is harmless because every
    name is introduced once per function.

    >>> len(block(comment("a"), None, block(comment("b"), [comment("c")])).body)
    3
    """
    return Block(tuple(_flatten(stmts)))


def _body(item: BodyItem) -> Block:
    return item if isinstance(item, Block) else block(item)


def declare(v: Var, init: Operand) -> Declare:
    """``dtype v = init;`` a Python number becomes a Const of v's dtype.

    >>> declare(var("t", F64), 0).init
    Const(value=0.0, dtype=<Scalar.F64: 'f64'>)
    """
    return Declare(v, _expr(init, v.dtype))


def assign(v: Var, value: Operand) -> Assign:
    """``v = value;`` for a declared local."""
    return Assign(v, _expr(value, v.dtype))


def store(array: Var, index: Operand, value: Operand, accumulate: bool = False) -> Store:
    """``array[index] = value`` (``+=`` when ``accumulate``).

    >>> store(var("y", Ptr(F64)), var("i", I64), 1, accumulate=True).value
    Const(value=1.0, dtype=<Scalar.F64: 'f64'>)
    """
    elem = array.dtype.elem if isinstance(array.dtype, Ptr) else array.dtype
    return Store(array, _expr(index, I64), _expr(value, elem), accumulate)


def for_(v: Var, start: Operand, stop: Operand, *body: BodyItem) -> For:
    """``for (v = start; v < stop; v++) { body }``; Python bounds take v's dtype.

    >>> for_(var("i", I64), 0, var("n", I64)).start
    Const(value=0, dtype=<Scalar.I64: 'i64'>)
    """
    return For(v, _expr(start, v.dtype), _expr(stop, v.dtype), block(*body))


def while_(cond: Expr, *body: BodyItem) -> While:
    """``while (cond) { body }``."""
    return While(cond, block(*body))


def if_(cond: Expr, then: BodyItem, otherwise: BodyItem = ()) -> If:
    """``if (cond) { then } else { otherwise }``; each branch a statement, Block or list.

    >>> if_(lt(var("i", I64), 3), comment("small")).otherwise
    Block(body=())
    """
    return If(cond, _body(then), _body(otherwise))


def comment(text: str) -> Comment:
    """``// text`` in the generated source."""
    return Comment(text)


def allocate(v: Var, count: Operand, zero: bool = False) -> Allocate:
    """``dtype* v = alloc(count)`` (``calloc`` when ``zero``)."""
    return Allocate(v, _expr(count, I64), zero)


def grow(v: Var, capacity: Var, needed: Operand) -> Grow:
    """Ensure buffer ``v`` of ``capacity`` elements holds ``needed``."""
    return Grow(v, capacity, _expr(needed, I64))


def free(v: Var) -> Free:
    """Release buffer ``v``."""
    return Free(v)


def param(v: Var, role: str, output: bool = False) -> Param:
    """One kernel argument, e.g. ``param(var("A_vals", Ptr(F64)), "A.vals")``; a role written
    ``range.begin.i`` or ``range.end.i`` becomes the typed `RangeBound` lowering makes.

    >>> type(param(var("lo", I64), "range.begin.i").role).__name__
    'RangeBound'
    """
    parts = role.split(".") if isinstance(role, str) and not isinstance(role, RangeBound) \
        else ()
    if len(parts) == 3 and parts[0] == "range" and parts[1] in ("begin", "end"):
        role = RangeBound(parts[1], parts[2])
    return Param(v, role, output)


def function(name: str, params: Iterable[Param], *body: BodyItem,
             notes: Iterable[str] = ()) -> Function:
    """A kernel with its ABI parameters, body and notes.

    >>> function("noop", [], comment("nothing")).body.body[0].text
    'nothing'
    """
    return Function(name, tuple(params), block(*body), tuple(notes))


__all__ = [
    "add", "allocate", "assign", "binary", "bitand", "bitor", "block", "cast", "comment", "const",
    "ctz", "declare", "div", "eq", "for_", "free", "function", "ge", "grow", "gt", "i64", "if_", "land", "le", "lnot",
    "load", "lor", "lt", "maximum", "minimum", "mod", "mul", "ne", "neg", "param", "select",
    "shl", "shr", "store", "sub", "unary", "var", "while_",
]
