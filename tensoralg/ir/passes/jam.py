"""Row jamming: four iterations of a kernel's thread-range loop at once, their inner loops fused.

A dense reduction per row (each row of a matrix times a vector, a row sum) streams one row at a
time::

    for (i = range_begin; i < range_end; i++) {
      inv0 = i * n_k;
      for (j = 0; j < n_j; j++) {
        acc = 0; for (k = 0; k < n_k; k++) acc = acc + A[inv0 + k] * B[j * n_k + k];
        Y[i * n_j + j] = acc;
      }
    }

One stream of loads keeps few cache misses in flight: Wide&Deep's 256 x 10^4 narrow product
reads its 10 MB at ~20 GB/s on one core. With ``JAM`` rows at once::

    for (g = 0; g < (range_end - range_begin) / 4; g++) {
      i0 = range_begin + 4 * g; i1 = i0 + 1; i2 = ...; i3 = ...;
      inv0_0 = i0 * n_k; ... inv0_3 = i3 * n_k;
      for (j = 0; j < n_j; j++) {
        acc_0 = 0; ... acc_3 = 0;
        for (k = 0; k < n_k; k++) { acc_0 = acc_0 + A[inv0_0 + k] * B[...]; ... acc_3 = ...; }
        Y[i0 * n_j + j] = acc_0; ... Y[i3 * n_j + j] = acc_3;
      }
    }
    for (i = range_begin + (range_end - range_begin) / 4 * 4; i < range_end; i++) { ... }

the core has four streams in flight and loads each value of B once for four rows: that product
takes 420 µs against 509 µs one row at a time (``benchmarks/kernel_micro.py``; NumPy's GEMV
445 µs). Eight rows at once was no faster than four.

When this is exact: the loop is the one the runtime splits into thread ranges (its bounds are
the range parameters), whose iterations write disjoint output rows by construction; every
row's statements still run in their order, so each output element gets the same operations in
the same order. The pass fires only when the body has no ``While``, ``If``, ``Allocate``,
``Grow`` or ``Free``; every loop inside runs over bounds made of parameters and constants (the
same trip counts for every row, so the loops can be fused); it stores only to output
parameters and loads none of them; and it holds a loop that only updates locals (a reduction,
where jamming pays: an elementwise loop gains nothing from it).
"""
from __future__ import annotations

from itertools import count

from .. import nodes as n
from ..rewrite import rewrite, used_vars, walk

JAM = 4            # rows run at once
MAX_BODY = 48      # statements in the row body: beyond, the jammed code grows for little


def jam_rows(fn: n.Function, rows: int = JAM) -> n.Function:
    """``fn`` with its thread-range loop jammed by ``rows`` rows where that is exact and pays
    (see the module docstring); ``fn`` itself otherwise (and always when ``rows`` is 1).

    >>> from tensoralg.ir.build import function, comment
    >>> f = function("k", [], comment("nothing to jam"))
    >>> jam_rows(f) is f
    True
    """
    bounds = fn.thread_range
    if bounds is None or rows <= 1:
        return fn
    begin, end = bounds[0].var, bounds[1].var
    params = {p.var.name for p in fn.params}
    outputs = {p.var.name for p in fn.params if p.output}
    taken = used_vars(fn)
    prefixes = (f"jam{k}" for k in count()
                if not any(name.startswith(f"jam{k}_") for name in taken))

    def replace(node: n.Node) -> n.Node | None:
        if isinstance(node, n.For) and node.start == begin and node.stop == end and \
                _jammable(node.body, params, outputs):
            return _jammed(node, begin, end, next(prefixes), rows)
        if isinstance(node, n.For) and _entry_loop(node, outputs) and \
                _jammable(node.body, params, outputs):
            return _jammed(node, node.start, node.stop, next(prefixes), rows)
        return None

    result = rewrite(fn, replace)
    assert isinstance(result, n.Function)
    return result


def _entry_loop(loop: n.For, outputs: set[str]) -> bool:
    """Whether ``loop`` runs over positions of a sparse output that shares an operand's
    pattern (``lower/pattern.py``): it stores to outputs only at its own index, so its
    iterations write disjoint elements, and every local it assigns is its own."""
    # a loop over a compressed level's positions starts at a loaded ``pos`` entry: asked
    # first, so that the walks below visit only such loops' bodies
    if not any(isinstance(x, n.Load) for x in walk(loop.start)):
        return False
    stores = [x for x in walk(loop.body) if isinstance(x, n.Store)]
    declared = {x.var.name for x in walk(loop.body) if isinstance(x, (n.Declare, n.For))}
    return bool(stores) and all(s.array.name in outputs and s.index == loop.var and
                                not s.accumulate for s in stores) and \
        all(x.var.name in declared for x in walk(loop.body) if isinstance(x, n.Assign))


def _jammable(body: n.Block, params: set[str], outputs: set[str]) -> bool:
    nodes = list(walk(body))
    statements = [x for x in nodes if isinstance(x, (n.Declare, n.Assign, n.Store, n.For))]
    if len(statements) > MAX_BODY or any(
            isinstance(x, (n.While, n.If, n.Allocate, n.Grow, n.Free)) for x in nodes):
        return False
    for x in nodes:
        if isinstance(x, n.Store) and x.array.name not in outputs:
            return False
        if isinstance(x, n.Load) and x.array.name in outputs:
            return False
        if isinstance(x, n.For) and not (used_vars(x.start) | used_vars(x.stop)) <= params:
            return False
    return any(isinstance(x, n.For) and x.body.body and
               all(isinstance(s, n.Assign) for s in x.body.body) for x in nodes)


def _jammed(loop: n.For, begin: n.Expr, end: n.Expr, prefix: str, jam: int) -> n.Block:
    """The group loop over ``jam`` renamed copies of ``loop``'s body, then ``loop`` itself
    over the rows left."""
    index = n.I64
    locals_ = {x.var.name for x in walk(loop.body) if isinstance(x, n.Declare)}
    counters = {x.var.name for x in walk(loop.body) if isinstance(x, n.For)}
    # Four kinds of new names, each with its own tag after the prefix, so that none can
    # equal another: a loop index named g once became the group counter's own name
    # (``Y(t,g,b) = W(g,k) * X(t,b,k)`` was wrong from the second group on).
    group = n.Var(f"{prefix}_g", index)
    rows = [n.Var(f"{prefix}_r{q}", index) for q in range(jam)]

    def copy(q: int) -> n.Block:
        names = {name: f"{prefix}_l{q}_{name}" for name in locals_}
        names.update({name: f"{prefix}_c_{name}" for name in counters})   # shared once fused

        def rename(node: n.Node) -> n.Node | None:
            if isinstance(node, n.Var):
                if node.name == loop.var.name:
                    return rows[q]
                if node.name in names:
                    return n.Var(names[node.name], node.dtype)
            return None

        block = rewrite(loop.body, rename)
        assert isinstance(block, n.Block)
        return block

    span = n.Binary("-", end, begin)
    groups = n.Binary("/", span, n.Const(jam, index))
    first = n.Binary("+", begin, n.Binary("*", group, n.Const(jam, index)))
    heads = tuple(n.Declare(row, first if q == 0 else n.Binary("+", rows[0], n.Const(q, index)))
                  for q, row in enumerate(rows))
    body = _fuse([copy(q) for q in range(jam)])
    rest = n.Binary("+", begin, n.Binary("*", groups, n.Const(jam, index)))
    return n.Block((n.For(group, n.Const(0, index), groups, n.Block(heads + body.body)),
                    n.For(loop.var, rest, end, loop.body)))


def _fuse(copies: list[n.Block]) -> n.Block:
    """One block running ``copies`` (the same statements on other variables) side by side:
    their loops fused into one, every other statement once per copy, in order."""
    out: list[n.Stmt] = []
    for statements in zip(*(c.body for c in copies)):
        first = statements[0]
        if isinstance(first, n.For):
            out.append(n.For(first.var, first.start, first.stop,
                             _fuse([s.body for s in statements])))   # type: ignore[union-attr]
        elif isinstance(first, n.Block):
            out.append(_fuse(list(statements)))                      # type: ignore[arg-type]
        elif isinstance(first, n.Comment):
            out.append(first)
        else:
            out.extend(statements)
    return n.Block(tuple(out))


__all__ = ["JAM", "jam_rows"]
