"""Loop-invariant expression hoisting out of For loops.

Invariant: every hoisted expression is computed once, before the loop, from variables that no
statement of the loop changes, and its value is the one every iteration computed. Because the
loop may run zero times, or the expression may sit under a branch, only expressions that are
harmless to evaluate anywhere move: no Load (it may be guarded, or its buffer may be stored to),
no integer ``/`` or ``%`` (a guarded division by zero), no float-to-integer Cast (undefined
out of range in C). Each hoisted expression gets a fresh ``inv0``-style local declared just
before the loop; identical expressions share one. A Declare at the top of the loop body whose
value is invariant by the same rules, and whose local the loop never assigns, moves out whole.
"""
from __future__ import annotations

import dataclasses
from itertools import count
from typing import Callable

from .. import nodes as n
from ..rewrite import rewrite, used_vars, walk
from .simplify import splice_blocks

_COMPOUND = (n.Unary, n.Binary, n.Select, n.Cast)


def hoist_invariants(fn: n.Function) -> n.Function:
    """Move loop-invariant, trap-free expressions out of For loops (see the module docstring).

    >>> from tensoralg.ir.build import for_, store, var, mul, add, function, param
    >>> from tensoralg.ir.printer import format_function
    >>> i, m, k = var("i", n.I64), var("m", n.I64), var("k", n.I64)
    >>> y = var("y", n.Ptr(n.I64))
    >>> f = function("k", [param(m, "m"), param(k, "k"), param(y, "y")],
    ...              for_(i, 0, m, store(y, i, add(i, mul(m, k)))))
    >>> print(format_function(hoist_invariants(f)))
    kernel k(i64 m [m], i64 k [k], i64* y [y])
      i64 inv0 = m * k;
      for (i64 i = 0; i < m; i++) {
        y[i] = i + inv0;
      }
    """
    taken = used_vars(fn)
    fresh = (name for name in (f"inv{i}" for i in count()) if name not in taken)

    def visit(node: n.Node) -> n.Node | None:
        match node:
            case n.For():
                return _hoist_loop(node, lambda: next(fresh))
            case n.Block():
                return splice_blocks(node)
        return None

    result = rewrite(fn, visit)
    assert isinstance(result, n.Function)
    return result


def _hoist_loop(loop: n.For, fresh: Callable[[], str]) -> n.Block | None:
    assigned = _assigned_in(loop)
    varying = _introduced_in(loop) | assigned
    # Declares at the top of the body whose value never changes move out whole: this is also
    # how an inner loop's hoisted locals keep moving outward instead of being copied.
    moved: list[n.Stmt] = []
    rest: list[n.Stmt] = []
    for s in loop.body.body:
        if isinstance(s, n.Declare) and s.var.name not in assigned and _trap_free(s.init, varying):
            moved.append(s)
            varying.discard(s.var.name)
        else:
            rest.append(s)
    hoisted: dict[str, n.Declare] = {}  # keyed by repr, which tells 0.0 from -0.0

    def replace(e: n.Expr) -> n.Expr:
        if isinstance(e, _COMPOUND) and _trap_free(e, varying):
            key = repr(e)
            if key not in hoisted:
                hoisted[key] = n.Declare(n.Var(fresh(), n.dtype_of(e)), e)
            return hoisted[key].var
        return _map_children(e, replace)

    body = rewrite(n.Block(tuple(rest)), lambda node: _map_stmt_exprs(node, replace))
    if not moved and not hoisted:
        return None
    assert isinstance(body, n.Block)
    new_loop = dataclasses.replace(loop, body=body)    # keeps the loop's hints
    return n.Block((*moved, *hoisted.values(), new_loop))


def _assigned_in(loop: n.For) -> set[str]:
    names: set[str] = set()
    for node in walk(loop.body):
        match node:
            case n.Assign(v):
                names.add(v.name)
            case n.Grow(v, capacity):
                names.update((v.name, capacity.name))
    return names


def _introduced_in(loop: n.For) -> set[str]:
    names = {loop.var.name}
    for node in walk(loop.body):
        match node:
            case n.Declare(v) | n.Allocate(v) | n.For(v):
                names.add(v.name)
    return names


def _trap_free(e: n.Expr, varying: set[str]) -> bool:
    """Whether ``e`` reads nothing the loop changes and is harmless to evaluate anywhere."""
    for x in walk(e):
        match x:
            case n.Load():
                return False
            case n.Var(name) if name in varying:
                return False
            case n.Binary("/" | "%", lhs) if not _is_float(n.dtype_of(lhs)):
                return False
            case n.Cast(operand, to) if to.is_int and _is_float(n.dtype_of(operand)):
                return False
    return True


def _is_float(dtype: n.DType) -> bool:
    return isinstance(dtype, n.Scalar) and dtype.is_float


def _map_children(e: n.Expr, f: Callable[[n.Expr], n.Expr]) -> n.Expr:
    match e:
        case n.Load(array, index):
            new_index = f(index)
            return e if new_index is index else n.Load(array, new_index)
        case n.Unary(op, operand):
            new = f(operand)
            return e if new is operand else n.Unary(op, new)
        case n.Cast(operand, to):
            new = f(operand)
            return e if new is operand else n.Cast(new, to)
        case n.Binary(op, lhs, rhs):
            a, b = f(lhs), f(rhs)
            return e if (a is lhs and b is rhs) else n.Binary(op, a, b)
        case n.Select(cond, if_true, if_false):
            old = (cond, if_true, if_false)
            new_parts = tuple(f(x) for x in old)
            return e if all(p is q for p, q in zip(new_parts, old)) else n.Select(*new_parts)
    return e


def _map_stmt_exprs(s: n.Node, f: Callable[[n.Expr], n.Expr]) -> n.Node | None:
    """Apply ``f`` top-down to the expression fields of one statement (None: not a statement)."""
    match s:
        case n.Declare(v, init):
            return n.Declare(v, f(init))
        case n.Assign(v, value):
            return n.Assign(v, f(value))
        case n.Store(index=index, value=value):
            return dataclasses.replace(s, index=f(index), value=f(value))
        case n.For(v, start, stop, body):
            return dataclasses.replace(s, start=f(start), stop=f(stop))
        case n.While(cond, body):
            return n.While(f(cond), body)
        case n.If(cond, then, otherwise):
            return n.If(f(cond), then, otherwise)
        case n.Allocate(count=count_):
            return dataclasses.replace(s, count=f(count_))
        case n.Grow(v, capacity, needed):
            return n.Grow(v, capacity, f(needed))
    return None


__all__ = ["hoist_invariants"]
