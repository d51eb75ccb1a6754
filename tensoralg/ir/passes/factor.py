"""Factoring a reduction's loop-invariant multiplicands out of its sum.

``for k: acc = acc + a * x[k] * y[k]`` becomes ``s = 0; for k: s = s + x[k] * y[k];
acc = acc + a * s`` when ``a`` does not change inside the loop: one multiply per iteration
fewer, and a loop body the vectoriser reads as a plain dot product. SDDMM is the case that
pays: ``A(i,j) * X(i,k) * Y(k,j)`` summed over ``k`` multiplied every term by ``A(i,j)``.

Invariant: the loop's body is exactly that one accumulating Assign (no branch, no store, no
other statement), so every iteration evaluated the factored operands with the same value; they
are evaluated once after the loop instead. The factored operands are products of constants,
variables the loop does not change, value-preserving casts and Loads whose index is such an
expression: a Load there reads the element every iteration read, at a position fixed by the
loops around this one, which is valid whether or not this loop runs (lowering emits an
operand's value load only at a position its enclosing loops have established). The sum is
reassociated (``a * (x0 y0 + x1 y1)`` for ``a x0 y0 + a x1 y1``): exact for integers, within
rounding for floating point, as any reordering of a reduction is.
"""
from __future__ import annotations

from typing import Callable

from .. import nodes as n
from ..rewrite import walk
from .tile import tile_loops


def factor_reductions(fn: n.Function) -> n.Function:
    """Factor each one-statement reduction loop's invariant multiplicands out of its sum.

    >>> from tensoralg.ir.build import for_, assign, declare, add, mul, load, var, block
    >>> from tensoralg.ir.build import function, param
    >>> from tensoralg.ir.printer import format_function
    >>> k, m, p = var("k", n.I64), var("m", n.I64), var("p", n.I64)
    >>> a, x = var("a", n.Ptr(n.F64)), var("x", n.Ptr(n.F64))
    >>> acc = var("acc", n.F64)
    >>> body = block(declare(acc, 0.0),
    ...              for_(k, 0, m, assign(acc, add(acc, mul(load(a, p), load(x, k))))))
    >>> f = function("f", [param(m, "m"), param(p, "p"), param(a, "a"), param(x, "x")], body)
    >>> print(format_function(factor_reductions(f)))
    kernel f(i64 m [m], i64 p [p], f64* a [a], f64* x [x])
      f64 acc = 0.0;
      f64 sum = 0.0;
      for (i64 k = 0; k < m; k++) {
        sum = sum + x[k];
      }
      acc = acc + a[p] * sum;
    """
    return tile_loops(fn, _factor)


def _factor(loop: n.For, fresh: Callable[[str], str]) -> n.Block | None:
    if len(loop.body.body) != 1:
        return None
    match loop.body.body[0]:
        case n.Assign(acc, n.Binary("+", n.Var() as again, term)) if again == acc:
            pass
        case _:
            return None
    dtype = acc.dtype
    if not isinstance(dtype, n.Scalar) or n.dtype_of(term) != dtype:
        return None
    written = {loop.var.name, acc.name}
    factors = _factors(term)
    fixed = [f for f in factors if _fixed(f, written)]
    if not fixed or len(fixed) == len(factors) or any(acc.name in _names(f) for f in factors):
        return None
    varying = [f for f in factors if not any(f is g for g in fixed)]
    total = n.Var(fresh("sum"), dtype)
    inner = n.Assign(total, n.Binary("+", total, _product(varying)))
    outer = n.Assign(acc, n.Binary("+", acc, n.Binary("*", _product(fixed), total)))
    return n.Block((n.Declare(total, n.Const(0.0 if dtype.is_float else 0, dtype)),
                    n.For(loop.var, loop.start, loop.stop, n.Block((inner,)),
                          loop.unroll, loop.vectorize, loop.masked), outer))


def _factors(e: n.Expr) -> list[n.Expr]:
    """The multiplicands of a product tree, left to right."""
    if isinstance(e, n.Binary) and e.op == "*":
        return _factors(e.lhs) + _factors(e.rhs)
    return [e]


def _product(factors: list[n.Expr]) -> n.Expr:
    result = factors[0]
    for f in factors[1:]:
        result = n.Binary("*", result, f)
    return result


def _fixed(e: n.Expr, written: set[str]) -> bool:
    """Whether ``e`` has the same value in every iteration and is safe to read after the loop:
    see the module docstring for which nodes qualify."""
    for x in walk(e):
        match x:
            case n.Var(name) if name in written:
                return False
            case n.Binary(op) if op not in ("*", "+", "-"):
                return False
            case n.Cast(operand, to) if to.is_int and not n.dtype_of(operand).is_int:
                return False
            case n.Unary() | n.Select():
                return False
    return True


def _names(e: n.Expr) -> set[str]:
    return {x.name for x in walk(e) if isinstance(x, n.Var)}


__all__ = ["factor_reductions"]
