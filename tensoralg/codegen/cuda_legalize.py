"""The CUDA target's IR rewrite: sum over a loop in registers before adding to the output.

``sum_before_store`` turns

    for p in P:                           for k in K:
      d = ...  (declarations)               s = 0
      for k in K:                  into     for p in P:
        ...  (no memory written)              d = ...
        out[x + k] += v                       ...
                                              s = s + v
                                            out[x + k] += s

when ``K`` and ``x`` do not depend on ``p`` or the declarations, and nothing in the loop reads
``out``. Both add the same terms into each ``out[x + k]`` (the sum is reassociated, as the IR
allows for reductions). On a GPU the result is a loop over output columns (``k``) that lanes can
share, each reading the dense operand's row coalesced and adding to the output once, instead of
once per nonzero: SpMM's row becomes lanes over its columns, MTTKRP adds each output element
once per slice instead of once per nonzero.
"""
from __future__ import annotations

from tensoralg.ir.build import const
from tensoralg.ir.nodes import (
    Allocate,
    Assign,
    Binary,
    Block,
    Comment,
    Declare,
    For,
    Free,
    Function,
    Grow,
    Load,
    Node,
    Scalar,
    Store,
    Var,
)
from tensoralg.ir.rewrite import rewrite, used_vars, walk


def sum_before_store(fn: Function) -> Function:
    """Apply the rewrite of the module docstring wherever it fits, innermost loops first.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> sum_before_store(Function("k", (), Block())).body
    Block(body=())
    """
    taken = {v.name for v in walk(fn) if isinstance(v, Var)}
    # Range loops stay outermost: they are the rows the grid maps.
    ranges = {fn.thread_range[1].var.name} if fn.thread_range is not None else set()

    def change(node: Node) -> Node | None:
        if isinstance(node, For) and not (isinstance(node.stop, Var) and
                                          node.stop.name in ranges):
            return _interchanged(node, taken)
        return None

    result = rewrite(fn, change)
    assert isinstance(result, Function)
    return result


def _interchanged(outer: For, taken: set[str]) -> For | None:
    body = [s for s in outer.body.body if not isinstance(s, Comment)]
    if not body or not isinstance(body[-1], For):
        return None
    *declarations, inner = body
    assert isinstance(inner, For)
    if not all(isinstance(d, Declare) for d in declarations):
        return None
    varying = {outer.var.name} | {d.var.name for d in declarations}   # type: ignore[union-attr]
    if (used_vars(inner.start) | used_vars(inner.stop)) & varying:
        return None
    inner_body = [s for s in inner.body.body if not isinstance(s, Comment)]
    if not inner_body or not isinstance(inner_body[-1], Store):
        return None
    *work, store = inner_body
    assert isinstance(store, Store)
    if not store.accumulate or used_vars(store.index) & varying or \
            not isinstance(store.value.dtype, Scalar) or \
            inner.var.name not in used_vars(store.index):
        return None
    local = {s.var.name for item in work for s in walk(item)
             if isinstance(s, (Declare, For))}
    for item in work:
        for s in walk(item):
            if isinstance(s, (Store, Allocate, Grow, Free)):
                return None
            if isinstance(s, Assign) and s.var.name not in local:
                return None
    reads = [x for item in [*work, store.value] for x in walk(item)
             if isinstance(x, Load) and x.array == store.array]
    if reads:
        return None
    total = Var(_fresh("column_sum", taken), store.value.dtype)
    taken.add(total.name)
    summed = For(outer.var, outer.start, outer.stop,
                 Block((*declarations, *work, Assign(total, Binary("+", total, store.value)))),
                 outer.unroll, outer.vectorize)
    return For(inner.var, inner.start, inner.stop,
               Block((Declare(total, const(0, store.value.dtype)), summed,
                      Store(store.array, store.index, total, accumulate=True))),
               inner.unroll, inner.vectorize)


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    return name


__all__ = ["sum_before_store"]
