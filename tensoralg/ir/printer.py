"""The one printer of the IR: deterministic, C-like pseudo code with 2-space indents.

Used by error messages, golden tests, the pass logger and ``kernel.source("ir")``. It is not C:
parameters carry their ABI role (``[A.1.pos]``) and output mark, and ``alloc``/``grow``/``free``
stand for the runtime's memory operations.

>>> from tensoralg.ir.build import add, mul, var
>>> from tensoralg.ir.nodes import I64
>>> i, j, k = (var(x, I64) for x in "ijk")
>>> format_node(mul(add(i, j), k))
'(i + j) * k'
"""
from __future__ import annotations

import math

from . import nodes as n

_INDENT = "  "

# C precedence, loosest first; operands of equal precedence on the right keep their
# parentheses because float arithmetic is not associative and the tree order must show.
_PREC_SELECT, _PREC_OR, _PREC_AND, _PREC_EQ, _PREC_REL, _PREC_ADD, _PREC_MUL = range(7)
_PREC_UNARY, _PREC_ATOM = 7, 8

_INFIX: dict[str, tuple[str, int]] = {
    "or": ("||", _PREC_OR), "and": ("&&", _PREC_AND),
    "==": ("==", _PREC_EQ), "!=": ("!=", _PREC_EQ),
    "<": ("<", _PREC_REL), "<=": ("<=", _PREC_REL), ">": (">", _PREC_REL), ">=": (">=", _PREC_REL),
    "+": ("+", _PREC_ADD), "-": ("-", _PREC_ADD),
    "*": ("*", _PREC_MUL), "/": ("/", _PREC_MUL), "%": ("%", _PREC_MUL),
}


# ---------------------------------------------------------------------------------------------
# Expressions


def _const(value: int | float | bool | complex, dtype: n.Scalar) -> str:
    if dtype.is_complex:
        z = complex(value)
        return f"{dtype}({_const(z.real, dtype.part)}, {_const(z.imag, dtype.part)})"
    if dtype is n.BOOL:
        return "true" if value else "false"
    if dtype.is_float:
        x = float(value)
        text = repr(x) if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))
        return text + ("f" if dtype is n.F32 and math.isfinite(x) else "")
    return str(int(value))


def _expr(e: n.Expr) -> tuple[str, int]:
    """The text of ``e`` and the precedence of its outermost operator."""
    match e:
        case n.Const(value, dtype):
            text = _const(value, dtype)
            return text, _PREC_UNARY if text.startswith("-") else _PREC_ATOM
        case n.Var(name):
            return name, _PREC_ATOM
        case n.Load(array, index):
            return f"{array.name}[{_expr(index)[0]}]", _PREC_ATOM
        case n.Unary("neg", operand):
            return "-" + _operand_of_unary(operand), _PREC_UNARY
        case n.Unary("not", operand):
            return "!" + _operand_of_unary(operand), _PREC_UNARY
        case n.Unary(op, operand):
            return f"{op}({_expr(operand)[0]})", _PREC_ATOM
        case n.Cast(operand, to):
            return f"({to}) {_operand_of_unary(operand)}", _PREC_UNARY
        case n.Binary(op, lhs, rhs) if op in _INFIX:
            symbol, prec = _INFIX[op]
            left = _wrap(lhs, prec, right_side=False)
            right = _wrap(rhs, prec, right_side=True)
            return f"{left} {symbol} {right}", prec
        case n.Binary(op, lhs, rhs):
            return f"{op}({_expr(lhs)[0]}, {_expr(rhs)[0]})", _PREC_ATOM
        case n.Select(cond, if_true, if_false):
            parts = [_wrap(x, _PREC_SELECT, right_side=True) for x in (cond, if_true, if_false)]
            return f"{parts[0]} ? {parts[1]} : {parts[2]}", _PREC_SELECT
    raise n.IRError(f"not an IR expression: {e!r}")


def _operand_of_unary(operand: n.Expr) -> str:
    text, prec = _expr(operand)
    # `- -x` and `-(-1)` need parentheses to stay one token apart and readable.
    return text if prec >= _PREC_ATOM else f"({text})"


def _wrap(child: n.Expr, parent_prec: int, right_side: bool) -> str:
    text, prec = _expr(child)
    needs = prec < parent_prec or (right_side and prec == parent_prec)
    # C's chained comparisons and `a && b || c` are legal but misleading: always parenthesize.
    needs |= parent_prec in (_PREC_EQ, _PREC_REL) and prec in (_PREC_EQ, _PREC_REL)
    needs |= parent_prec == _PREC_OR and prec == _PREC_AND
    return f"({text})" if needs else text


def format_expr(e: n.Expr) -> str:
    """One expression as C-like text with minimal parentheses.

    >>> from tensoralg.ir.build import select, lt, var
    >>> from tensoralg.ir.nodes import I64
    >>> format_expr(select(lt(var("i", I64), 3), var("i", I64), 3))
    'i < 3 ? i : 3'
    """
    return _expr(e)[0]


# ---------------------------------------------------------------------------------------------
# Statements


def _lines(s: n.Stmt, depth: int, out: list[str]) -> None:
    pad = _INDENT * depth
    match s:
        case n.Block(body):
            out.append(pad + "{")
            _body(body, depth + 1, out)
            out.append(pad + "}")
        case n.Declare(v, init):
            out.append(f"{pad}{v.dtype} {v.name} = {format_expr(init)};")
        case n.Assign(v, value):
            out.append(f"{pad}{v.name} = {format_expr(value)};")
        case n.Store(array, index, value, accumulate):
            op = "+=" if accumulate else "="
            out.append(f"{pad}{array.name}[{format_expr(index)}] {op} {format_expr(value)};")
        case n.For(v, start, stop, body):
            head = f"for ({v.dtype} {v.name} = {format_expr(start)}; {v.name} < {format_expr(stop)}; {v.name}++)"
            if s.unroll or s.vectorize:
                out.append(f"{pad}// hints: unroll {s.unroll or 'auto'}, "
                           f"vectorize {s.vectorize or 'auto'}"
                           + (", masked tail" if s.masked else ""))
            _braced(pad + head, body, depth, out)
        case n.While(cond, body):
            _braced(f"{pad}while ({format_expr(cond)})", body, depth, out)
        case n.If():
            _if(s, pad, depth, out, prefix="if")
        case n.Comment(text):
            out.extend(f"{pad}// {line}".rstrip() for line in (text.splitlines() or [""]))
        case n.Allocate(v, count, zero):
            call = "calloc" if zero else "alloc"
            out.append(f"{pad}{v.dtype} {v.name} = {call}({format_expr(count)});")
        case n.Grow(v, capacity, needed):
            out.append(f"{pad}grow({v.name}, {capacity.name}, {format_expr(needed)});")
        case n.Free(v):
            out.append(f"{pad}free({v.name});")
        case _:
            raise n.IRError(f"not an IR statement: {s!r}")


def _body(body: tuple[n.Stmt, ...], depth: int, out: list[str]) -> None:
    for stmt in body:
        _lines(stmt, depth, out)


def _braced(head: str, body: n.Block, depth: int, out: list[str]) -> None:
    if not body.body:
        out.append(head + " {}")
        return
    out.append(head + " {")
    _body(body.body, depth + 1, out)
    out.append(_INDENT * depth + "}")


def _if(s: n.If, pad: str, depth: int, out: list[str], prefix: str) -> None:
    out.append(f"{pad}{prefix} ({format_expr(s.cond)}) {{")
    _body(s.then.body, depth + 1, out)
    match s.otherwise.body:
        case ():
            out.append(pad + "}")
        case (n.If() as nested,):
            # An else holding a single If reads as `else if`, as a co-iteration cascade should.
            _if(nested, pad, depth, out, prefix="} else if")
        case rest:
            out.append(pad + "} else {")
            _body(rest, depth + 1, out)
            out.append(pad + "}")


# ---------------------------------------------------------------------------------------------
# Functions and entry points


def format_param(p: n.Param) -> str:
    """``dtype name [role]``, followed by ``out`` for an output.

    >>> from tensoralg.ir.build import param, var
    >>> from tensoralg.ir.nodes import Ptr, F64
    >>> format_param(param(var("y_vals", Ptr(F64)), "y.vals", output=True))
    'f64* y_vals [y.vals] out'
    """
    return f"{p.var.dtype} {p.var.name} [{p.role}]" + (" out" if p.output else "")


def format_function(fn: n.Function) -> str:
    """A kernel: a header with its ABI, one ``// note:`` line per note, then the body.

    >>> from tensoralg.ir.build import function, comment
    >>> print(format_function(function("noop", [], comment("nothing"), notes=["empty"])))
    kernel noop()
      // note: empty
      // nothing
    """
    out = [f"kernel {fn.name}({', '.join(format_param(p) for p in fn.params)})"]
    out.extend(f"{_INDENT}// note: {note}" for note in fn.notes)
    _body(fn.body.body, 1, out)
    return "\n".join(out)


def format_node(node: n.Node) -> str:
    """Any IR node as text: an expression on one line, a statement as indented lines.

    >>> from tensoralg.ir.build import store, var
    >>> from tensoralg.ir.nodes import Ptr, F64, I64
    >>> format_node(store(var("y", Ptr(F64)), var("i", I64), 2.0, accumulate=True))
    'y[i] += 2.0;'
    """
    match node:
        case n.Function():
            return format_function(node)
        case n.Param():
            return format_param(node)
        case n.Const() | n.Var() | n.Load() | n.Unary() | n.Binary() | n.Select() | n.Cast():
            return format_expr(node)
        case n.Scalar() | n.Ptr():
            return str(node)
    out: list[str] = []
    _lines(node, 0, out)
    return "\n".join(out)


__all__ = ["format_expr", "format_function", "format_node", "format_param"]
