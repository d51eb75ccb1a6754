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

A row that holds register tiles (``tile.py``: a dense product's row of C kept in vector
registers across the k loop) is jammed by its own count, ``tile_rows``: the fused k loop then
holds a two-dimensional tile, rows x tile width, and each vector of B it loads feeds an FMA
for every row, not for one. With four vector registers per row (a 256-byte tile on AVX-512),
six rows use 24 of the 32 registers; the compiler's default comes from the host's register
file (``codegen/target.py``'s ``register_tile_rows``: 1, no jam, where a row's tile already
fills half of it, as on AVX2). The rows' tiles lie a run-time row length apart, which LLVM
cannot tell apart; each copy's stores carry its `RowOwner`, which the LLVM backend turns into
alias scopes, so that the tiles are promoted to registers. Measured (one thread,
``gemm(loops)``, ad hoc): a 512^3 float32 product 7.1 ms -> 1.5 ms with six rows (the
hand-written GEMM: 1.5 ms).

A row that sums into a row workspace before its epilogue (``max(sum(k, A(i,k) * B(k,j)) +
b(j), 0)``: ``workspace.py`` keeps one row of the temporary, ``Allocate.row_of``) is jammed
too: each jammed row but the first gets its own copy of the workspace, allocated and freed
beside it. That fused dense layer took 6.8 ms one row at a time at 512^3 float32, 1.5 ms
jammed (one thread, ad hoc; the product alone 1.45 ms).

In a stack of products (``C(b,i,k) = A(b,i,j) * B(b,j,k)``) the thread range runs over ``b``
and each of its iterations holds a whole product: there the loop over ``i`` is jammed instead,
which lowering marks ``disjoint`` (``ir.nodes.For``: an index of a dense output, whose
iterations write distinct elements). 32 products of 128 x 64 x 128 float32 on two threads:
443 -> 210 us (ad hoc; BLAS one gemm a product: 680 us).

When this is exact: the loop is the one the runtime splits into thread ranges (its bounds are
the range parameters), whose iterations write disjoint output rows by construction, or one
lowering marked ``disjoint`` for the same reason (and no loop that holds a jam already); every
row's statements still run in their order, so each output element gets the same operations in
the same order. The pass fires only when the body has no ``While``, ``If``, ``Allocate``,
``Grow`` or ``Free``; every loop inside runs over bounds made of parameters and constants (the
same trip counts for every row, so the loops can be fused; locals of the row computed from
those alone count as such); it stores only to output parameters and loads none of them (a
tile's ``+=`` reads only the element it writes, and must be at an index computed from the
row), or to a row workspace of that very loop (``Allocate.row_of``, touched nowhere else,
at indices that ignore the row: each copy gets its own); and it holds a loop that only
updates locals (a reduction, where jamming pays: an elementwise loop gains nothing from it)
or a register tile.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from itertools import count

from .. import nodes as n
from ..rewrite import rewrite, used_vars, walk

JAM = 4            # rows run at once
MAX_BODY = 48      # statements in the row body: beyond, the jammed code grows for little
# A row holding register tiles (a dense product's row of C, ``tile_accumulators``) is longer:
# four tile widths and a rest loop, about 70 statements for C(i,j) = A(i,k) * B(k,j).
MAX_TILED_BODY = 96


def jam_rows(fn: n.Function, rows: int = JAM, tile_rows: int = 1) -> n.Function:
    """``fn`` with the innermost loop that lowering marked ``disjoint`` and whose rows hold
    register tiles jammed by ``tile_rows`` (a product's rows, also a stack's inside its thread
    range); else its thread-range loop jammed by ``rows`` rows where that is exact and pays
    (see the module docstring); ``fn`` itself otherwise (and always when the count that applies
    is 1).

    >>> from tensoralg.ir.build import function, comment
    >>> f = function("k", [], comment("nothing to jam"))
    >>> jam_rows(f) is f
    True
    """
    bounds = fn.thread_range
    if bounds is None or max(rows, tile_rows) <= 1:
        return fn
    begin, end = bounds[0].var, bounds[1].var
    params = {p.var.name for p in fn.params}
    outputs = {p.var.name for p in fn.params if p.output}
    taken = used_vars(fn)
    prefixes = (f"jam{k}" for k in count()
                if not any(name.startswith(f"jam{k}_") for name in taken))
    # Row workspaces (``ir/passes/workspace.py``: one row of a temporary, which every
    # iteration of its loop writes before it reads, ``Allocate.row_of``) whose loads and
    # stores all lie in the jammed loop: each jammed row gets its own copy.
    row_of = {x.var.name: x.row_of for x in walk(fn.body) if isinstance(x, n.Allocate)}
    accesses = _buffer_accesses(fn)
    copies: dict[str, list[n.Var]] = {}

    def workspaces(node: n.For) -> set[str]:
        inside = _buffer_accesses(node)
        return {name for name, uses in inside.items()
                if accesses.get(name) == uses and row_of.get(name) == node.var.name}

    def replace(node: n.Node) -> n.Node | None:
        if not isinstance(node, n.For):
            return None
        if node.start == begin and node.stop == end:
            start, stop = begin, end
        elif _entry_loop(node, outputs):
            start, stop = node.start, node.stop
        else:
            return None
        own = workspaces(node)
        kind = _jammable(node.body, node.var.name, params, outputs, own)
        count_ = {"rows": rows, "tiles": tile_rows}.get(kind or "", 1)
        return _jammed(node, start, stop, next(prefixes), count_, kind == "tiles", own,
                       copies) if count_ > 1 else None

    def replace_inner(node: n.Node) -> n.Node | None:
        # First the innermost loop whose iterations own their output elements and whose rows
        # hold register tiles (``For.disjoint``: a stack's rows, ``C(b,i,k)`` below the
        # thread range over b, where jamming b would share no load), never one enclosing a
        # jam already made; then the thread range as above.
        if not isinstance(node, n.For) or not node.disjoint or tile_rows <= 1:
            return None
        own = workspaces(node)
        if _jammable(node.body, node.var.name, params, outputs, own) != "tiles":
            return None
        return _jammed(node, node.start, node.stop, next(prefixes), tile_rows, True, own,
                       copies)

    result = rewrite(rewrite(fn, replace_inner), replace)
    assert isinstance(result, n.Function)
    return _with_copies(result, copies) if copies else result


def _buffer_accesses(node: n.Node) -> Counter[str]:
    """How many loads and stores in ``node`` touch each array."""
    return Counter(x.array.name for x in walk(node) if isinstance(x, (n.Load, n.Store)))


def _with_copies(fn: n.Function, copies: dict[str, list[n.Var]]) -> n.Function:
    """``fn`` with each buffer of ``copies`` allocated (and freed) once more for every copy,
    beside the original."""

    def add(node: n.Node) -> n.Node | None:
        if not isinstance(node, n.Block):
            return None
        out: list[n.Stmt] = []
        for s in node.body:
            out.append(s)
            if isinstance(s, n.Allocate) and s.var.name in copies:
                out.extend(dataclasses.replace(s, var=v) for v in copies[s.var.name])
            elif isinstance(s, n.Free) and s.var.name in copies:
                out.extend(n.Free(v) for v in copies[s.var.name])
        return n.Block(tuple(out)) if len(out) != len(node.body) else None

    result = rewrite(fn, add)
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


def _jammable(body: n.Block, row: str, params: set[str], outputs: set[str],
              workspaces: set[str] = frozenset()) -> str | None:  # type: ignore[assignment]
    """How the rows of a loop with ``body`` (over ``row``) can be jammed: ``"rows"`` (a
    reduction into locals), ``"tiles"`` (register tiles of the output, or of a row workspace
    of ``workspaces``, which each copy gets its own of), or None (not exactly, or not for a
    gain)."""
    nodes = list(walk(body))
    statements = [x for x in nodes if isinstance(x, (n.Declare, n.Assign, n.Store, n.For))]
    if any(isinstance(x, (n.While, n.If, n.Allocate, n.Grow, n.Free)) for x in nodes):
        return None
    # the same trip counts for every row: bounds of parameters, constants, values set before
    # the loop (a cache block's bounds) and the row's locals computed from those alone (a
    # register tile's count, ``n_j / 64``)
    inside = {x.var.name for x in nodes if isinstance(x, (n.Declare, n.Assign, n.For))}
    same = (used_vars(body) - inside - {row}) | params
    for x in body.body:
        if isinstance(x, n.Declare) and used_vars(x.init) <= same and \
                not any(isinstance(y, n.Assign) and y.var == x.var for y in nodes):
            same.add(x.var.name)
    rowwise = _row_dependent(body, row)
    for x in nodes:
        # a row workspace holds this row's values only: read and written at indices that
        # never use the row (so a copy per jammed row replaces it)
        if isinstance(x, (n.Load, n.Store)) and x.array.name in workspaces:
            if used_vars(x.index) & rowwise or isinstance(x, n.Store) and x.owner is not None:
                return None
            continue
        if isinstance(x, n.Store) and (x.array.name not in outputs or x.owner is not None):
            return None
        # a register tile adds into its own row's elements: with each copy's stores at an
        # index made from its row, no two rows meet (a store whose index ignores the row is
        # a reduction=partials sum across rows, whose order jamming would change)
        if isinstance(x, n.Store) and x.accumulate and not used_vars(x.index) & rowwise:
            return None
        if isinstance(x, n.Load) and x.array.name in outputs:
            return None
        if isinstance(x, n.For) and not (used_vars(x.start) | used_vars(x.stop)) <= same:
            return None
    loops = [x for x in nodes if isinstance(x, n.For) and x.body.body]
    if any(_register_tile(x, outputs | workspaces) for x in loops):
        return "tiles" if len(statements) <= MAX_TILED_BODY else None
    if any(all(isinstance(s, n.Assign) for s in x.body.body) for x in loops):
        return "rows" if len(statements) <= MAX_BODY else None
    return None


def _register_tile(loop: n.For, outputs: set[str]) -> bool:
    """Whether ``loop`` is a reduction over a register tile (``tile_accumulators``' output:
    ``for (k ...) { locals; for (j_in = 0; j_in < W; j_in++) Y[...] += ...; }``): jamming rows
    there makes a two-dimensional tile, each load of the shared operand feeding every row."""
    inner = [s for s in loop.body.body if not isinstance(s, n.Declare)]
    return len(inner) == 1 and isinstance(inner[0], n.For) and \
        isinstance(inner[0].stop, n.Const) and bool(inner[0].body.body) and \
        all(isinstance(s, n.Store) and s.accumulate and s.array.name in outputs
            for s in inner[0].body.body)


def _row_dependent(body: n.Block, row: str) -> set[str]:
    """``row`` and the locals of ``body`` whose values are computed from it."""
    found = {row}
    for x in walk(body):
        value = x.init if isinstance(x, n.Declare) else x.value if isinstance(x, n.Assign) \
            else None
        if value is not None and used_vars(value) & found:
            found.add(x.var.name)
    return found


def _jammed(loop: n.For, begin: n.Expr, end: n.Expr, prefix: str, jam: int,
            tiles: bool = False, workspaces: set[str] = frozenset(),  # type: ignore[assignment]
            copies: dict[str, list[n.Var]] | None = None) -> n.Block:
    """The group loop over ``jam`` renamed copies of ``loop``'s body, then ``loop`` itself
    over the rows left. Each copy but the first reads and writes its own copy of every row
    workspace of ``workspaces`` (the new buffers, to allocate beside the original, are added
    to ``copies``)."""
    index = n.I64
    locals_ = {x.var.name for x in walk(loop.body) if isinstance(x, n.Declare)}
    counters = {x.var.name for x in walk(loop.body) if isinstance(x, n.For)}
    # Four kinds of new names, each with its own tag after the prefix, so that none can
    # equal another: a loop index named g once became the group counter's own name
    # (``Y(t,g,b) = W(g,k) * X(t,b,k)`` was wrong from the second group on).
    group = n.Var(f"{prefix}_g", index)
    rows = [n.Var(f"{prefix}_r{q}", index) for q in range(jam)]

    buffers = {x.array.name: x.array for x in walk(loop.body)
               if isinstance(x, (n.Load, n.Store)) and x.array.name in workspaces}
    for name, buffer in buffers.items():
        if copies is not None:
            copies.setdefault(name, []).extend(
                n.Var(f"{prefix}_w{q}_{name}", buffer.dtype) for q in range(1, jam))

    def copy(q: int) -> n.Block:
        names = {name: f"{prefix}_l{q}_{name}" for name in locals_}
        names.update({name: f"{prefix}_c_{name}" for name in counters})   # shared once fused
        if q:
            names.update({name: f"{prefix}_w{q}_{name}" for name in buffers})

        def rename(node: n.Node) -> n.Node | None:
            if isinstance(node, n.Var):
                if node.name == loop.var.name:
                    return rows[q]
                if node.name in names:
                    return n.Var(names[node.name], node.dtype)
            if isinstance(node, n.Store):
                return dataclasses.replace(node, owner=n.RowOwner(prefix, q))
            return None

        block = rewrite(loop.body, rename)
        assert isinstance(block, n.Block)
        return block

    # a loop from 0 (one inside the thread range) needs no offset
    zero = begin == n.Const(0, index)

    def after(offset: n.Expr) -> n.Expr:
        return offset if zero else n.Binary("+", begin, offset)

    span = end if zero else n.Binary("-", end, begin)
    groups = n.Binary("/", span, n.Const(jam, index))
    first = after(n.Binary("*", group, n.Const(jam, index)))
    heads = tuple(n.Declare(row, first if q == 0 else n.Binary("+", rows[0], n.Const(q, index)))
                  for q, row in enumerate(rows))
    body = _fuse([copy(q) for q in range(jam)], tiles)
    rest = after(n.Binary("*", groups, n.Const(jam, index)))
    return n.Block((n.For(group, n.Const(0, index), groups, n.Block(heads + body.body)),
                    n.For(loop.var, rest, end, loop.body)))


def _fuse(copies: list[n.Block], tiles: bool = False) -> n.Block:
    """One block running ``copies`` (the same statements on other variables) side by side:
    their loops fused into one, every other statement once per copy, in order."""
    out: list[n.Stmt] = []
    for statements in zip(*(c.body for c in copies)):
        first = statements[0]
        if isinstance(first, n.For):
            bodies = [s.body for s in statements]                     # type: ignore[union-attr]
            # a tile's lanes summed in locals (two or more sums a row, over consecutive
            # columns): SLP packs each row's sums into one vector; LLVM's loop vectorizer
            # would rather vectorize the loop itself, across k, loading B a row apart (2.5-3x
            # slower, 6 rows x 8 float32 lanes)
            lanes = tiles and all(isinstance(x, (n.Declare, n.Assign)) for x in bodies[0].body) \
                and sum(isinstance(x, n.Assign) for x in bodies[0].body) > 1
            out.append(n.For(first.var, first.start, first.stop, _fuse(bodies, tiles),
                             vectorize=1 if lanes else 0))
        elif isinstance(first, n.Block):
            out.append(_fuse(list(statements), tiles))               # type: ignore[arg-type]
        elif isinstance(first, n.Comment):
            out.append(first)
        else:
            out.extend(statements)
    return n.Block(tuple(out))


__all__ = ["JAM", "jam_rows"]
