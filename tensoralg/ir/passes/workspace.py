"""Row workspaces: fuse a temporary's producer and consumer loops, and keep one row of it.

A sum under a function (``max(sum(k, W(j,k) * X(k,i)) + c(j), 0)``) lowers to a dense temporary
filled by one loop nest and read by the next::

    t = calloc(n_j * n_i);
    for (j = 0; j < n_j; j++) { r = j * n_i; ... t[r + i] += ...; }       // producer
    for (j2 = 0; j2 < n_j; j2++) { r2 = j2 * n_i; ... y[..] = f(t[r2 + i]); }  // consumer
    free(t);

When both loops touch only row ``j`` of the temporary in iteration ``j``, they can run as one
loop over ``j`` and the temporary shrinks to that row (``n_i`` elements, cleared at the start of
each iteration): it stays in cache, and the call no longer zeroes and walks ``n_j * n_i``
elements twice. This is the workspace of Kjolstad et al., "Tensor Algebra Compilation with
Workspaces" (CGO 2019), found here on the IR rather than in the notation.

When this is exact: iteration ``j`` of the consumer reads exactly what iteration ``j`` of the
producer left in row ``j``, and nothing the consumer writes is read or written by the producer,
so interleaving the iterations changes no value. The pass proves row-locality syntactically:
every access to the temporary in either loop is ``r + x`` where ``r = j * n_i`` is declared at
the top of the loop body and ``x`` is the counter of a loop from 0 to ``n_i``.
"""
from __future__ import annotations

from itertools import count

from .. import nodes as n
from ..rewrite import rewrite, used_vars, walk


def row_workspaces(fn: n.Function) -> n.Function:
    """Fuse producer and consumer loops of dense temporaries into row workspaces.

    >>> from tensoralg.ir.build import (for_, store, var, add, mul, load, function, param,
    ...                                 allocate, free, declare, maximum)
    >>> from tensoralg.ir.printer import format_function
    >>> j, j2, i, i2 = (var(x, n.I64) for x in ("j", "j2", "i", "i2"))
    >>> r, r2, m, k = (var(x, n.I64) for x in ("r", "r2", "m", "k"))
    >>> t, x, y = (var(v, n.Ptr(n.F32)) for v in ("t", "x", "y"))
    >>> f = function("k", [param(m, "m"), param(k, "k"), param(x, "x"), param(y, "y")],
    ...     allocate(t, mul(m, k), zero=True),
    ...     for_(j, 0, m, declare(r, mul(j, k)),
    ...          for_(i, 0, k, store(t, add(r, i), load(x, add(r, i)), True))),
    ...     for_(j2, 0, m, declare(r2, mul(j2, k)),
    ...          for_(i2, 0, k, store(y, add(r2, i2), maximum(load(t, add(r2, i2)), 0.0)))),
    ...     free(t))
    >>> print(format_function(row_workspaces(f)).splitlines()[1])
      f32* t = alloc(k);
    """
    body = list(fn.body.body)
    taken = used_vars(fn)
    changed = False
    for position, stmt in enumerate(body):
        if isinstance(stmt, n.Allocate) and isinstance(stmt.var.dtype, n.Ptr):
            fused = _fuse(body, position, taken)
            if fused is not None:
                body = fused
                changed = True
    if not changed:
        return fn
    return n.Function(fn.name, fn.params, n.Block(tuple(body)), fn.notes)


def _fuse(body: list[n.Stmt], position: int, taken: set[str]) -> list[n.Stmt] | None:
    alloc = body[position]
    assert isinstance(alloc, n.Allocate)
    temp = alloc.var.name
    users = [k for k, s in enumerate(body) if k != position and _mentions(s, temp)]
    if len(users) != 3 or not isinstance(body[users[2]], n.Free):
        return None
    first, second = users[0], users[1]
    producer, consumer = body[first], body[second]
    if not (isinstance(producer, n.For) and isinstance(consumer, n.For)):
        return None
    if any(not isinstance(s, n.Comment) for s in body[first + 1:second]):
        return None
    # Both loops over the same counters: all rows, or the same range of a split call.
    if not (producer.start == consumer.start and producer.stop == consumer.stop):
        return None
    match alloc.count:
        case n.Binary("*", _, row):
            pass
        case _:
            return None
    if not (_row_local(producer, temp, row) and _row_local(consumer, temp, row)):
        return None
    written_by_consumer = _stored(consumer) - {temp}
    if written_by_consumer & (_loaded(producer) | _stored(producer)):
        return None
    if _stored(producer) - {temp}:
        return None
    fused = _fused_loop(producer, consumer, alloc, row, taken)
    # each iteration of the fused loop clears (or wholly produces) its row before reading it
    new_alloc = n.Allocate(alloc.var, row, zero=False, row_of=producer.var.name)
    return [*body[:position], new_alloc, *body[position + 1:first], fused, *body[second + 1:]]


def _fused_loop(producer: n.For, consumer: n.For, alloc: n.Allocate, row: n.Expr,
                taken: set[str]) -> n.For:
    temp = alloc.var

    def drop_row(loop: n.For) -> n.Block:
        bases = _row_bases(loop, row)

        def visit(node: n.Node) -> n.Node | None:
            match node:
                case n.Load(array, n.Binary("+", n.Var(base), x)) if array == temp \
                        and base in bases:
                    return n.Load(array, x)
                case n.Store(array, n.Binary("+", n.Var(base), x), value, acc) \
                        if array == temp and base in bases:
                    return n.Store(array, x, value, acc)
            return None

        result = rewrite(loop.body, visit)
        assert isinstance(result, n.Block)
        return result

    produce = drop_row(producer)
    consume = rewrite(drop_row(consumer), lambda node: producer.var
                      if isinstance(node, n.Var) and node.name == consumer.var.name else None)
    assert isinstance(consume, n.Block)
    clear: tuple[n.Stmt, ...] = ()
    if alloc.zero:
        z = n.Var(next(f"{temp.name}_z{k}" for k in count() if f"{temp.name}_z{k}" not in taken),
                  n.I64)
        zero = n.Const(0.0 if _elem(temp).is_float else 0, _elem(temp))
        clear = (n.For(z, n.Const(0, n.I64), row, n.Block((n.Store(temp, z, zero),))),)
    return n.For(producer.var, producer.start, producer.stop, n.Block((
        n.Comment(f"{temp.name} holds one row: produced and consumed in the same iteration"),
        *clear, *produce.body, *consume.body)))


def _elem(v: n.Var) -> n.Scalar:
    assert isinstance(v.dtype, n.Ptr) and isinstance(v.dtype.elem, n.Scalar)
    return v.dtype.elem


def _row_bases(loop: n.For, row: n.Expr) -> set[str]:
    """Locals declared at the top of ``loop``'s body as ``counter * row``."""
    bases = set()
    for s in loop.body.body:
        if not isinstance(s, n.Declare):
            break
        if s.init in (n.Binary("*", loop.var, row), n.Binary("*", row, loop.var)):
            bases.add(s.var.name)
    return bases


def _row_local(loop: n.For, temp: str, row: n.Expr) -> bool:
    """Whether every access to ``temp`` in ``loop`` is ``base + x``, ``x`` in ``[0, row)``."""
    bases = _row_bases(loop, row)
    if not bases:
        return False
    in_row = {s.var.name for s in walk(loop.body) if isinstance(s, n.For)
              and s.start == n.Const(0, n.I64) and s.stop == row}
    for node in walk(loop.body):
        if isinstance(node, (n.Load, n.Store)) and node.array.name == temp:
            match node.index:
                case n.Binary("+", n.Var(base), n.Var(x)) if base in bases and x in in_row:
                    continue
            return False
    return not any(isinstance(s, n.Assign) and s.var.name in bases for s in walk(loop.body))


def _mentions(stmt: n.Stmt, name: str) -> bool:
    return any(isinstance(x, n.Var) and x.name == name for x in walk(stmt))


def _stored(node: n.Node) -> set[str]:
    return {x.array.name for x in walk(node) if isinstance(x, n.Store)} | \
        {x.var.name for x in walk(node) if isinstance(x, n.Grow)}


def _loaded(node: n.Node) -> set[str]:
    return {x.array.name for x in walk(node) if isinstance(x, n.Load)}


__all__ = ["row_workspaces"]
