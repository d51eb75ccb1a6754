"""Row epilogues moved into register tiles: a workspace row is zeroed, reduced and consumed one
tile at a time.

A fused sparse layer (``Y(j,i) = max(sum(k, A(k,i) * B(j,k)) + C(j), 0)`` with ``B`` in CSR)
lowers to a row workspace that is zeroed, accumulated in register tiles (``tile.py``) and then
read by the epilogue, each in its own pass over the row::

    for (z = 0; z < n; z++) W[z] = 0;
    tiles = max(n / 64, 0);
    for (t = 0; t < tiles; t++) { lo = t * 64; for (p ...) { for (l = 0; l < 64; l++) W[lo + l] += ...; } }
    for (p ...) { for (i = tiles * 64; i < n; i++) W[i] += ...; }          // the rest
    base = j * n;
    for (e = 0; e < n; e++) Y[base + e] = max(W[e] + C[j], 0);

Each tile owns its ``W[lo, lo + 64)`` and no later statement of the row writes there, so the
tile can zero its part before the reduction and apply the epilogue right after it::

    base = j * n; tiles = max(n / 64, 0);
    for (t = 0; t < tiles; t++) {
      lo = t * 64;
      for (l = 0; l < 64; l++) W[lo + l] = 0;
      for (p ...) { for (l = 0; l < 64; l++) W[lo + l] += ...; }
      for (l = 0; l < 64; l++) Y[base + lo + l] = max(W[lo + l] + C[j], 0);
    }
    for (z = tiles * 64; z < n; z++) W[z] = 0;
    for (p ...) { ... }                                                     // the rest
    for (e = tiles * 64; e < n; e++) Y[base + e] = max(W[e] + C[j], 0);

LLVM then starts the tile's accumulators at zero and applies the epilogue to them while they
are still in registers (or in L1), instead of a memset and a second pass over the row. The
tile pass's narrower tiles after the full ones (32, 16 and 8 lanes of a row that is no whole
number of full tiles) own their lanes the same way; only the rest goes through ``W``. With a
workspace asked for (``precompute('A(i,j) * B(j,k)', k)``), an SpMM of 16 float64 columns is
then one 16-lane tile per row stored straight into the output, which needs no zeroing first.
Through ``W`` instead, 4000 x 4000 (80k stored) times 8, 16 and 24 columns took 431, 506 and
788 µs; owning their lanes, 292, 406 and 711 (``python benchmarks/kernel_micro.py``, one
thread). That is about the unscheduled kernel's time (328, 410, 603) while the output fits in
cache; on larger outputs, whose zeroing goes to memory, the workspace ran 1.04-1.34x the
unscheduled kernel on one thread and 1.11-1.50x on two (bayer10, bcsstk16, wiki-Vote,
kos_docword, luxembourg_osm, 16 columns; same process, interleaved; an ad hoc script). Below
8 columns the row goes through ``W`` whole and the workspace costs (4 columns: 0.48-0.88x),
so the compiler does not choose it for SpMM by itself.

When this is exact: every element of ``W`` gets the same operations in the same order (zero,
then the terms of its tile or of the rest), and the epilogue reads ``W[e]`` only after all of
them, so every output element is computed as before; only the order in which output elements
are written changes. The pass fires only on that shape: a zeroing loop over ``[0, n)``, the
tile pass's tiles (and its narrower tiles) and rest over the same ``n``, the tiles and the
rest storing to ``W`` only,
declarations that read no ``W``, and an epilogue over ``[0, n)`` made of declarations and
stores, reading ``W`` only at ``e`` and what it stores only where it stores it, storing at
``base + e`` with ``base`` free of ``e``, into arrays that the tiles, the rest and the zeroing
never touch.
"""
from __future__ import annotations

from typing import Callable

from .. import nodes as n
from ..rewrite import rewrite, used_vars, walk
from .tile import base_of, fresh_names, substitute, uses, zero_fill


def tile_epilogues(fn: n.Function) -> n.Function:
    """``fn`` with row epilogues moved into register tiles where that is exact (see the module
    docstring); ``fn`` itself otherwise.

    >>> from tensoralg.ir.build import function, comment
    >>> f = function("k", [], comment("no workspace"))
    >>> tile_epilogues(f) is f
    True
    """
    fresh = fresh_names(used_vars(fn))

    def visit(node: n.Node) -> n.Node | None:
        return _fuse(node, fresh) if isinstance(node, n.Block) else None

    result = rewrite(fn, visit)
    assert isinstance(result, n.Function)
    return result


def _fuse(block: n.Block, fresh: Callable[[str], str]) -> n.Block | None:
    stmts = list(block.body)
    for at, stmt in enumerate(stmts):
        zero = _zero_loop(stmt)
        found = _pattern(stmts, at, *zero, fresh) if zero is not None else None
        if found is not None:
            end, replacement = found
            return n.Block(tuple(stmts[:at] + replacement + stmts[end:]))
    return None


def _zero_loop(s: n.Stmt) -> tuple[n.Var, n.Expr] | None:
    """``(W, n)`` for ``for (z = 0; z < n; z++) W[z] = 0``."""
    found = zero_fill(s)
    if found is None or found[1] != n.Const(0, n.I64):
        return None
    return found[0], found[2]


def _pattern(stmts: list[n.Stmt], at: int, work: n.Var, size: n.Expr,
             fresh: Callable[[str], str]) -> tuple[int, list[n.Stmt]] | None:
    """The end of the pattern that starts with the zeroing loop ``stmts[at]``, and what
    replaces ``stmts[at:end]``; None when the statements that follow do not fit."""
    rest = [(k, s) for k, s in enumerate(stmts) if k > at and not isinstance(s, n.Comment)]
    leading = _declarations(rest, 0, work)
    if leading and _tile_width(leading[-1], size) is not None:
        leading.pop()                            # that one counts the tiles
    rest = rest[len(leading):]
    if len(rest) < 4:
        return None
    (_, count), (_, tiled) = rest[0], rest[1]
    # The tile pass may follow the full tiles with one narrower tile or two (a count and its
    # loop each) before the plain rest: all of them only finish the row after the full tiles.
    after = 2
    narrower: list[n.Stmt] = []
    while after + 1 < len(rest) and isinstance(rest[after][1], n.Declare) and \
            isinstance(rest[after + 1][1], n.For) and \
            rest[after + 1][1].stop == rest[after][1].var and \
            not _reads(rest[after][1].init, {work.name}):
        narrower += [rest[after][1], rest[after + 1][1]]
        after += 2
    if after >= len(rest):
        return None
    remainder = rest[after][1]
    width = _tile_width(count, size)
    if width is None or not isinstance(tiled, n.For) or tiled.stop != count.var or \
            not isinstance(remainder, n.For):
        return None
    lo = tiled.body.body[0] if tiled.body.body else None
    if _rest_start(remainder, size) is None or not isinstance(lo, n.Declare) or \
            lo.init != n.Binary("*", tiled.var, n.Const(width, n.I64)):
        return None
    rest_start = n.Binary("*", count.var, n.Const(width, n.I64))   # where the full tiles end
    finishing = [tiled, *(s for s in narrower if isinstance(s, n.For)), remainder]
    written = {s.array.name for loop in finishing for s in walk(loop) if isinstance(s, n.Store)}
    if written != {work.name}:
        return None
    moved = _declarations(rest, after + 1, work)
    if after + 1 + len(moved) == len(rest):
        return None
    end, epilogue = rest[after + 1 + len(moved)]
    touched = {x.array.name for loop in (stmts[at], *finishing) for x in walk(loop)
               if isinstance(x, (n.Load, n.Store))}
    if not _epilogue(epilogue, work, size, touched):
        return None
    assert isinstance(epilogue, n.For)
    zero = stmts[at]
    assert isinstance(zero, n.For)

    def owning(tiled: n.For, lo: n.Declare, width: int) -> n.For:
        # The tile zeroes its lanes of W first and runs its copy of the epilogue on them
        # last: the epilogue's counter becomes lo + lane, its locals new names (every
        # variable is introduced once per function).
        lane = n.Var(fresh(f"{zero.var.name}_lane"), n.I64)
        zero_lanes = n.For(lane, n.Const(0, n.I64), n.Const(width, n.I64), n.Block((
            n.Store(work, n.Binary("+", lo.var, lane),
                    zero.body.body[0].value),)))  # type: ignore[union-attr]
        epi_lane = n.Var(fresh(f"{epilogue.var.name}_lane"), n.I64)
        renamed: dict[str, n.Expr] = {epilogue.var.name: n.Binary("+", lo.var, epi_lane)}
        renamed.update((d.var.name, n.Var(fresh(d.var.name), d.var.dtype))
                       for d in epilogue.body.body if isinstance(d, n.Declare))
        body = substitute(epilogue.body, renamed)
        assert isinstance(body, n.Block)
        epilogue_lanes = n.For(epi_lane, n.Const(0, n.I64), n.Const(width, n.I64), body)
        return n.For(tiled.var, tiled.start, tiled.stop,
                     n.Block((lo, zero_lanes, *tiled.body.body[1:], epilogue_lanes)))

    # The narrower tiles own their lanes as the full ones do (each its own block of W after
    # the tiles before it, which nothing after it writes): a row of 16 float64 (SpMM's usual
    # width) is then one 16-lane tile zeroed in registers and stored straight into the output.
    # Where one does not have the tile pass's shape, they all stay with the rest.
    owned = _narrower_tiles(narrower, size, rest_start)
    after_tiles = _rest_start(remainder, size)
    if owned:       # the rest must start where the last narrower tile ends
        owned = owned if after_tiles == _end_of(owned[-1]) else None
    comments = [s for s in stmts[at + 1:end] if isinstance(s, n.Comment)]
    head = [*comments, *leading, *moved, count, owning(tiled, lo, width)]
    if not owned or after_tiles is None:
        return end + 1, [*head, n.For(zero.var, rest_start, zero.stop, zero.body), *narrower,
                         remainder, n.For(epilogue.var, rest_start, epilogue.stop,
                                          epilogue.body)]
    return end + 1, [*head, *(piece for count_n, loop_n, lo_n, width_n in owned
                              for piece in (count_n, owning(loop_n, lo_n, width_n))),
                     n.For(zero.var, after_tiles, zero.stop, zero.body), remainder,
                     n.For(epilogue.var, after_tiles, epilogue.stop, epilogue.body)]


Narrower = tuple[n.Declare, n.For, n.Declare, int]


def _narrower_tiles(narrower: list[n.Stmt], size: n.Expr, full_end: n.Expr
                    ) -> list[Narrower] | None:
    """``(count, loop, lo, width)`` of each narrower tile the tile pass made after the full
    ones (``count = max((size - start) / width, 0)``, a loop over it whose body starts with
    ``lo = start + tile * width``), each starting where the one before ends (the first where
    the full tiles end, ``full_end``); None when one has another shape."""
    found: list[Narrower] = []
    for count, loop in zip(narrower[::2], narrower[1::2]):
        init = count.init if isinstance(count, n.Declare) else None
        if not (isinstance(init, n.Binary) and init.op == "max" and
                init.rhs == n.Const(0, n.I64) and isinstance(init.lhs, n.Binary) and
                init.lhs.op == "/" and isinstance(init.lhs.rhs, n.Const) and
                isinstance(init.lhs.lhs, n.Binary) and init.lhs.lhs.op == "-" and
                init.lhs.lhs.lhs == size):
            return None
        width = int(init.lhs.rhs.value)
        start = init.lhs.lhs.rhs
        lo = loop.body.body[0] if isinstance(loop, n.For) and loop.body.body else None
        if not isinstance(lo, n.Declare) or lo.init != n.Binary(
                "+", start, n.Binary("*", loop.var, n.Const(width, n.I64))):
            return None
        assert isinstance(count, n.Declare) and isinstance(loop, n.For)
        if start != (_end_of(found[-1]) if found else full_end):
            return None
        found.append((count, loop, lo, width))
    return found


def _end_of(tile: Narrower) -> n.Expr:
    """Where a narrower tile's lanes end: ``start + count * width``."""
    count, _, lo, width = tile
    start = lo.init.lhs     # type: ignore[union-attr]
    return n.Binary("+", start, n.Binary("*", count.var, n.Const(width, n.I64)))


def _declarations(rest: list[tuple[int, n.Stmt]], start: int, work: n.Var) -> list[n.Declare]:
    """The declarations from ``rest[start]`` on that read nothing of ``work``: they may run
    earlier, before the tiles."""
    found: list[n.Declare] = []
    for _, s in rest[start:]:
        if not isinstance(s, n.Declare) or _reads(s.init, {work.name}):
            break
        found.append(s)
    return found


def _tile_width(count: n.Stmt, size: n.Expr) -> int | None:
    """``W`` for ``tiles = max(size / W, 0)``."""
    if not isinstance(count, n.Declare):
        return None
    init = count.init
    if isinstance(init, n.Binary) and init.op == "max" and init.rhs == n.Const(0, n.I64) and \
            isinstance(init.lhs, n.Binary) and init.lhs.op == "/" and init.lhs.lhs == size and \
            isinstance(init.lhs.rhs, n.Const):
        return int(init.lhs.rhs.value)
    return None


def _rest_start(remainder: n.For, size: n.Expr) -> n.Expr | None:
    """Where the tile pass's rest starts: its reduction's last statement, a loop to ``size``."""
    last = remainder.body.body[-1] if remainder.body.body else None
    return last.start if isinstance(last, n.For) and last.stop == size else None


def _epilogue(loop: n.Stmt, work: n.Var, size: n.Expr, touched: set[str]) -> bool:
    """Whether ``loop`` is an epilogue over ``[0, size)`` that can run a tile at a time."""
    if not (isinstance(loop, n.For) and loop.start == n.Const(0, n.I64) and loop.stop == size):
        return False
    e = loop.var
    local = {s.var.name for s in loop.body.body if isinstance(s, n.Declare)}
    for s in loop.body.body:
        if isinstance(s, n.Store):
            base = base_of(s.index, e)
            if s.array.name in touched or s.array == work or base is None or \
                    uses(base, local | {e.name}):
                return False
        elif not isinstance(s, n.Declare):
            return False
    # Iterations run in another order: each may read only its own element of W and of what
    # it stores (a running sum along the row would read its neighbour).
    own = {s.array.name: s.index for s in loop.body.body if isinstance(s, n.Store)}
    if len(own) != sum(isinstance(s, n.Store) for s in loop.body.body):
        return False
    own[work.name] = e
    return all(x.index == own[x.array.name] for x in walk(loop.body)
               if isinstance(x, n.Load) and x.array.name in own)


def _reads(expr: n.Expr, arrays: set[str]) -> bool:
    return any(isinstance(x, n.Load) and x.array.name in arrays for x in walk(expr))


__all__ = ["tile_epilogues"]
