"""Register tiling: accumulate a strip of the output across a reduction loop in registers.

Sparse products lower to nests where a reduction loop (often over the stored entries of a
compressed row) encloses a dense loop that adds into a row of the output::

    for (p = pos[j]; p < pos[j + 1]; p++) {        // reduction: k = crd[p]
      k = crd[p];
      for (i = 0; i < n; i++) Y[base + i] += A[k * n + i] * B[p];
    }

Each entry of the reduction loads and stores the whole output row, so the loop is bound by
loads and stores, not arithmetic. Strip-mining ``i`` into tiles of a fixed width ``W`` and
moving the tile loop outside the reduction leaves an inner loop of constant trip count whose
output strip LLVM keeps in vector registers across the reduction (it promotes the loads and
stores out of the loop, since the strip's address does not depend on ``p``)::

    for (t = 0; t < n / W; t++)
      for (p = pos[j]; p < pos[j + 1]; p++) { k = crd[p]; for (i1 = 0; i1 < W; i1++) ... }
    for (p = pos[j]; p < pos[j + 1]; p++) { ...; for (i = n / W * W; i < n; i++) ... }  // rest

The rest is cut again into one tile of ``W/2`` and one of ``W/4`` (each runs at most once)
before the plain rest loop, so rows narrower than ``W`` (an SpMM with 16 f64 columns, ``W`` =
32) still keep their strip in registers: 1.7-3.5x on such SpMMs, measured in one process.

When lowering zeroed the row just before the reduction (``DenseWriter.row_fill``: the kernel
then assigns every element of its output, and the runtime skips zeroing it),
``absorb_row_fills`` tiles the pair instead: each wide tile zeroes its own lanes right before
its reduction, so that the accumulators start at zero in registers; tiles of 32 bytes or less
and the last elements sum in locals (one more, narrower tile than otherwise). No row-wide zeroing
(a ``memset`` per row) is left.

When this is exact: the rewritten nest runs the same (p, i) pairs, and every output element
receives its terms in the same order of ``p``, so results are bit-for-bit those of the original
nest. The pass only fires when that holds by construction: the reduction body is locals followed
by one counted loop whose bounds do not depend on the reduction; that loop's body is only
accumulating stores at ``base + i`` with ``base`` independent of both loops (distinct ``i`` never
meet), each output array stored once and never read inside the reduction.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import chain, count
from typing import Callable, Iterator

from .. import nodes as n
from ..rewrite import rewrite, used_vars, walk
from .simplify import simplify, splice_blocks

# Bytes of accumulators held per tile: eight 256-bit registers. Wider tiles spill on AVX2 and
# gained nothing on AVX-512 in the sparse-weight benchmark; narrower ones reload the row.
TILE_BYTES = 256
# What is left after the full-width tiles gets a tile of half the width, then of a quarter: an
# SpMM with 16 f64 columns (narrower than one 32-wide tile) keeps its row in two registers
# instead of loading and storing it for every stored entry. Zero-started tiles (a row the
# kernel zeroes itself, ``absorb_row_fills``) get one more, of an eighth (4 f64, summed in
# locals): 4 columns 1.0-1.4x over the rest loop. Each level costs LLVM 20-35 ms of a new
# kernel's first call here (SpMM: 104 ms with three levels, 150 with four, 180 with five).
NARROWER_TILES = 2
_BYTES = {n.I32: 4, n.I64: 8, n.F32: 4, n.F64: 8}
# A zero-started tile this narrow (4 f64) sums in locals instead: zeroing its lanes in memory
# left loads (LLVM splits such a tile into a scalar, a pair and a scalar) waiting on the wider
# zeroing store, 0.7-0.8x of the tile that loads a zeroed row.
NARROW_BYTES = 32


def tile_accumulators(fn: n.Function, tile_bytes: int = TILE_BYTES) -> n.Function:
    """Strip-mine dense accumulation loops under a reduction loop (see the module docstring),
    into tiles of ``tile_bytes`` of accumulators (0: leave ``fn`` as it is).

    >>> from tensoralg.ir.build import for_, store, var, add, mul, load, function, param
    >>> from tensoralg.ir.printer import format_function
    >>> p, i, m, k = var("p", n.I64), var("i", n.I64), var("m", n.I64), var("k", n.I64)
    >>> x, y = var("x", n.Ptr(n.F32)), var("y", n.Ptr(n.F32))
    >>> f = function("k", [param(m, "m"), param(k, "k"), param(x, "x"), param(y, "y")],
    ...     for_(p, 0, k, for_(i, 0, m, store(y, i, load(x, add(mul(p, m), i)), True))))
    >>> print(format_function(tile_accumulators(f)).splitlines()[2])
      i64 i_tiles = max(m / 64, 0);
    """
    if tile_bytes <= 0:
        return fn
    fn = absorb_row_fills(fn, tile_bytes)
    return tile_loops(fn, lambda loop, fresh: _tile(loop, fresh, tile_bytes))


def absorb_row_fills(fn: n.Function, tile_bytes: int = TILE_BYTES) -> n.Function:
    """Tile each reduction that sums into an output row which lowering zeroed just before it
    (``for (z = 0; z < n; z++) Y[base + z] = 0`` then ``for (p ...) { ...; for (i = 0; i < n;
    i++) Y[base + i] += ... }``, ``DenseWriter.row_fill``) so that the zeroing goes away: each
    tile zeroes its own lanes right before its reduction (LLVM then starts the accumulators at
    zero instead of loading them), and the rest after the tiles runs one element at a time,
    zeroed and summed in a register across the reduction. Without this the zeroing is a
    ``memset`` per row whose narrow stores the tiles' wide loads then wait for.

    Exact: every element still gets zero and then its terms in the same order of ``p``. Fires
    only on an output (a parameter) stored at the same base by the zeroing and the reduction,
    with only declarations that read no output between them.

    >>> from tensoralg.ir.build import function, comment
    >>> f = function("k", [], comment("nothing to fill"))
    >>> absorb_row_fills(f) is f
    True
    """
    if tile_bytes <= 0:
        return fn
    outputs = {p.var.name for p in fn.params if p.output}
    assigned = {x.var.name for x in walk(fn) if isinstance(x, n.Assign)}
    fresh = fresh_names(used_vars(fn))

    def visit(node: n.Node) -> n.Node | None:
        if not isinstance(node, n.Block):
            return None
        stmts = list(node.body)
        changed = False
        for at in range(len(stmts)):
            fill = zero_fill(stmts[at])
            if fill is None or fill[0].name not in outputs:
                continue
            array, base, size = fill
            after = at + 1
            while after < len(stmts) and isinstance(stmts[after], (n.Declare, n.Comment)) and \
                    not _reads_any(stmts[after], {array.name}):
                after += 1
            found = _filled_reduction(stmts[after], array, base, size, stmts[:after],
                                      assigned, tile_bytes, fresh) \
                if after < len(stmts) and isinstance(stmts[after], n.For) else None
            if found is not None:
                stmts[at], stmts[after] = n.Block(()), found
                changed = True
        return splice_blocks(n.Block(tuple(stmts))) if changed else None

    result = rewrite(fn, visit)
    assert isinstance(result, n.Function)
    return fn if result is fn else simplify(result)


def zero_fill(s: n.Stmt) -> tuple[n.Var, n.Expr, n.Expr] | None:
    """``(Y, base, n)`` for ``for (z = 0; z < n; z++) Y[base + z] = 0`` (base 0 for
    ``Y[z]``)."""
    if not (isinstance(s, n.For) and s.start == n.Const(0, n.I64) and len(s.body.body) == 1):
        return None
    store = s.body.body[0]
    if not (isinstance(store, n.Store) and not store.accumulate and
            isinstance(store.value, n.Const) and store.value.value == 0):
        return None
    base = base_of(store.index, s.var)
    return (store.array, base, s.stop) if base is not None else None


def base_of(index: n.Expr, i: n.Var) -> n.Expr | None:
    """``base`` for ``base + i`` (``0`` for ``i``) with ``base`` free of ``i``."""
    if index == i:
        return n.Const(0, n.I64)
    if isinstance(index, n.Binary) and index.op == "+" and index.rhs == i and \
            not uses(index.lhs, {i.name}):
        return index.lhs
    return None


def _filled_reduction(reduction: n.For, array: n.Var, base: n.Expr, size: n.Expr,
                      before: list[n.Stmt], assigned: set[str], tile_bytes: int,
                      fresh: Callable[[str], str]) -> n.Block | None:
    """``reduction`` tiled with zero-started tiles, when it sums into ``array[base + i]``
    for ``i`` in ``[0, size)`` only; None otherwise."""
    nest = perfect_nest(reduction)
    if nest is None:
        return None
    locals_, inner = nest
    varying = {reduction.var.name, *(d.var.name for d in locals_)}
    stores = inner.body.body
    if len(stores) != 1 or not _strip_store(stores[0], inner.var, varying) or \
            inner.start != n.Const(0, n.I64) or inner.stop != size or \
            _reads_any(reduction, {array.name}):
        return None
    store = stores[0]
    assert isinstance(store, n.Store)
    sum_base = base_of(store.index, inner.var)
    if store.array != array or sum_base is None:
        return None
    # Hoisting gives the zeroing and the sum their own copies of the row's base (inv0 = i * n,
    # inv1 = i * n): compare what they stand for.
    known = {s.var.name: s.init for s in before if isinstance(s, n.Declare)
             and s.var.name not in assigned}
    if _resolved(base, known) != _resolved(sum_base, known):
        return None
    width = tile_bytes // _BYTES[_elem(store)]
    if width < 4:
        return None
    return _strip_mine(reduction, locals_, inner, width, fresh, halvings=NARROWER_TILES + 1,
                       zeroed=True)


def _resolved(e: n.Expr, known: dict[str, n.Expr], depth: int = 4) -> n.Expr:
    """``e`` with the locals in ``known`` replaced by their initial values (a few levels)."""
    for _ in range(depth):
        if not uses(e, set(known)):
            break
        e = substitute(e, known)  # type: ignore[assignment]
    return e


def tile_loops(fn: n.Function, tile: Callable[[n.For, Callable[[str], str]], n.Block | None]
               ) -> n.Function:
    """Offer every loop of ``fn``, innermost first, to ``tile`` (which returns a replacement
    block or None, and takes a source of fresh variable names), then fold the new bounds."""
    names = fresh_names(used_vars(fn))

    def visit(node: n.Node) -> n.Node | None:
        match node:
            case n.For():
                return tile(node, names)
            case n.Block():
                return splice_blocks(node)
        return None

    result = rewrite(fn, visit)
    assert isinstance(result, n.Function)
    # The tile bounds were built plainly (``start + t * W`` with start often 0): fold them.
    return fn if result is fn else simplify(result)


def fresh_names(taken: set[str]) -> Callable[[str], str]:
    def fresh(stem: str) -> str:
        for name in chain((stem,), (f"{stem}_{k}" for k in count(1))):
            if name not in taken:
                taken.add(name)
                return name
        raise AssertionError("unreachable")

    return fresh


def perfect_nest(outer: n.For) -> tuple[list[n.Declare], n.For] | None:
    """``outer``'s body as locals then one inner loop whose bounds do not depend on ``outer``
    or those locals (comments ignored), or None when it is anything else."""
    stmts = [s for s in outer.body.body if not isinstance(s, n.Comment)]
    if not stmts or not isinstance(stmts[-1], n.For):
        return None
    decls, inner = stmts[:-1], stmts[-1]
    if not all(isinstance(s, n.Declare) for s in decls):
        return None
    varying = {outer.var.name, *(s.var.name for s in decls if isinstance(s, n.Declare))}
    if uses(inner.start, varying) or uses(inner.stop, varying):
        return None
    return [s for s in decls if isinstance(s, n.Declare)], inner


def _tile(reduction: n.For, fresh: Callable[[str], str], tile_bytes: int) -> n.Block | None:
    nest = perfect_nest(reduction)
    if nest is None:
        return None
    locals_, inner = nest
    if isinstance(inner.stop, n.Const):     # a tile's lanes already (absorb_row_fills)
        return None
    varying = {reduction.var.name, *(s.var.name for s in locals_)}
    stores = inner.body.body
    if not stores or not all(_strip_store(s, inner.var, varying) for s in stores):
        return None
    outputs = [s.array.name for s in stores]
    if len(set(outputs)) != len(outputs) or _reads_any(reduction, set(outputs)):
        return None
    width = tile_bytes // (_BYTES[_elem(stores[0])] * len(stores))
    if width < 4:
        return None
    return _strip_mine(reduction, locals_, inner, width, fresh, halvings=NARROWER_TILES)


def _strip_store(s: n.Stmt, i: n.Var, varying: set[str]) -> bool:
    """Whether ``s`` is ``y[base + i] += value`` with ``base`` free of ``i`` and ``varying``."""
    if not isinstance(s, n.Store) or not s.accumulate or _elem(s) not in _BYTES:
        return False
    if s.index == i:
        return True
    if not (isinstance(s.index, n.Binary) and s.index.op == "+"):
        return False
    lhs, rhs = s.index.lhs, s.index.rhs
    base = rhs if lhs == i else lhs if rhs == i else None
    return base is not None and not uses(base, varying | {i.name})


def _elem(s: n.Store) -> n.DType:
    assert isinstance(s.array.dtype, n.Ptr)
    return s.array.dtype.elem


def uses(e: n.Node, names: set[str]) -> bool:
    return any(isinstance(x, n.Var) and x.name in names for x in walk(e))


def _reads_any(node: n.Node, arrays: set[str]) -> bool:
    return any(isinstance(x, n.Load) and x.array.name in arrays for x in walk(node))


@dataclass(frozen=True)
class Strip:
    """A loop ``for v in [start, stop)`` cut into ``tiles`` tiles of ``width`` counters and a
    rest: inside tile ``tile`` the original counter is ``at`` (``lo + lane``, ``lane`` in
    ``[0, width)``); the rest runs from ``rest_start`` to ``stop``."""

    count: n.Declare      # tiles = max((stop - start) / width, 0)
    tile: n.Var           # 0 .. tiles
    lo: n.Declare         # lo = start + tile * width
    lane: n.Var           # 0 .. width
    width: n.Const
    at: n.Expr
    rest_start: n.Expr

    def tile_loop(self, *body: n.Stmt) -> n.For:
        """``for tile: lo = ...; body``."""
        return n.For(self.tile, n.Const(0, n.I64), self.count.var, n.Block((self.lo, *body)))

    def lane_loop(self, body: n.Block) -> n.For:
        """``for lane < width: body`` with the original counter read as ``at``."""
        return n.For(self.lane, n.Const(0, n.I64), self.width, body)


def strip(loop: n.For, width: int, fresh: Callable[[str], str]) -> Strip:
    """How to cut ``loop`` into tiles of ``width`` (fresh names stem from its counter)."""
    i64, stem = n.I64, loop.var.name
    tiles, tile = n.Var(fresh(f"{stem}_tiles"), i64), n.Var(fresh(f"{stem}_tile"), i64)
    lo, lane = n.Var(fresh(f"{stem}_lo"), i64), n.Var(fresh(f"{stem}_in"), i64)
    w = n.Const(width, i64)
    count = n.Binary("max", n.Binary("/", n.Binary("-", loop.stop, loop.start), w),
                     n.Const(0, i64))
    return Strip(n.Declare(tiles, count), tile,
                 n.Declare(lo, n.Binary("+", loop.start, n.Binary("*", tile, w))), lane, w,
                 n.Binary("+", lo, lane), n.Binary("+", loop.start, n.Binary("*", tiles, w)))


def _strip_mine(reduction: n.For, locals_: list[n.Declare], inner: n.For, width: int,
                fresh: Callable[[str], str], halvings: int = 0, zeroed: bool = False
                ) -> n.Block:
    """The nest with ``inner`` cut into tiles of ``width``; the rest is cut again into (at most
    one) tile of half the width, ``halvings`` times, before the plain rest loop. ``zeroed``:
    the elements ``inner`` sums into are zeroed here, each tile's before its reduction and
    each of the rest's before its own (``absorb_row_fills``)."""
    cut = strip(inner, width, fresh)
    body = substitute(inner.body, {inner.var.name: cut.at})
    assert isinstance(body, n.Block)
    if zeroed and width * _BYTES[_elem(inner.body.body[0])] <= NARROW_BYTES:  # type: ignore[arg-type]
        tiled = cut.tile_loop(*_summed_in_locals(reduction, locals_, inner, [
            n.Binary("+", cut.lo.var, n.Const(lane, n.I64)) for lane in range(width)], fresh))
    else:
        zeroes: tuple[n.Stmt, ...] = ()
        if zeroed:
            lane = n.Var(fresh(f"{inner.var.name}_zero"), n.I64)
            zeroes = (n.For(lane, n.Const(0, n.I64), cut.width, n.Block(tuple(
                _zero(s, inner.var, n.Binary("+", cut.lo.var, lane))
                for s in inner.body.body))),)
        tiled = cut.tile_loop(*zeroes, n.For(reduction.var, reduction.start, reduction.stop,
                                             n.Block((*locals_, cut.lane_loop(body)))))
    # The rest runs the original nest over the last stop - start - tiles * W counters, with
    # every local renamed: each variable is introduced once per function.
    renamed = {v.name: n.Var(fresh(v.name), v.dtype) for v in introduced(reduction)}
    rest = n.For(reduction.var, reduction.start, reduction.stop,
                 n.Block((*locals_, n.For(inner.var, cut.rest_start, inner.stop, inner.body))))
    rest = substitute(rest, renamed)
    assert isinstance(rest, n.For)
    if halvings and width // 2 >= 4:
        nest = perfect_nest(rest)
        assert nest is not None      # the same shape as the nest just cut
        rest_locals, rest_inner = nest
        rest = _strip_mine(rest, rest_locals, rest_inner, width // 2, fresh, halvings - 1,
                           zeroed)
    elif zeroed:
        # The last few elements one at a time, each summed in a local across the reduction.
        nest = perfect_nest(rest)
        assert nest is not None
        rest_locals, rest_inner = nest
        element = n.For(rest_inner.var, rest_inner.start, rest_inner.stop, n.Block(tuple(
            _summed_in_locals(rest, rest_locals, rest_inner, [rest_inner.var], fresh))))
        rest = element  # type: ignore[assignment]
    return n.Block((
        n.Comment(f"register tiles of {width} along {inner.var.name} across the "
                  f"{reduction.var.name} loop"),
        cut.count, tiled, rest))


def _summed_in_locals(reduction: n.For, locals_: list[n.Declare], inner: n.For,
                      lanes: list[n.Expr], fresh: Callable[[str], str]) -> list[n.Stmt]:
    """The sums of ``inner``'s one store at the counters ``lanes``, each in a local that
    starts at zero, runs across ``reduction`` and is stored once after it: no zeroing store
    for the loads of the sum to wait for."""
    store = inner.body.body[0]
    assert isinstance(store, n.Store) and len(inner.body.body) == 1
    elem = _elem(store)
    sums = [n.Var(fresh(f"{store.array.name}_sum"), elem) for _ in lanes]  # type: ignore[arg-type]
    steps = [n.Assign(total, n.Binary("+", total, substitute(  # type: ignore[arg-type]
        store.value, {inner.var.name: at}))) for total, at in zip(sums, lanes)]
    # The reduction's locals get new names: every variable is introduced once per function.
    renamed = {d.var.name: n.Var(fresh(d.var.name), d.var.dtype) for d in locals_}
    loop = substitute(n.For(reduction.var, reduction.start, reduction.stop,
                            n.Block((*locals_, *steps))), renamed)
    assert isinstance(loop, n.For)
    return [*(n.Declare(total, n.Const(0, elem)) for total in sums), loop,  # type: ignore[arg-type]
            *(n.Store(store.array, substitute(store.index, {inner.var.name: at}),  # type: ignore[arg-type]
                      total) for total, at in zip(sums, lanes))]


def _zero(s: n.Stmt, i: n.Var, at: n.Expr) -> n.Store:
    """``y[base + at] = 0`` for the strip store ``s`` (``y[base + i] += ...``)."""
    assert isinstance(s, n.Store)
    return n.Store(s.array, substitute(s.index, {i.name: at}),  # type: ignore[arg-type]
                   n.Const(0, _elem(s)))  # type: ignore[arg-type]


def introduced(loop: n.For) -> Iterator[n.Var]:
    for x in walk(loop):
        match x:
            case n.For(v) | n.Declare(v) | n.Allocate(v):
                yield v


def substitute(node: n.Node, by: dict[str, n.Expr]) -> n.Node:
    def visit(x: n.Node) -> n.Node | None:
        if isinstance(x, n.Var) and x.name in by:
            return by[x.name]
        return None

    return rewrite(node, visit)


__all__ = ["NARROWER_TILES", "TILE_BYTES", "Strip", "absorb_row_fills", "base_of", "fresh_names", "introduced", "perfect_nest", "strip",
           "substitute", "tile_accumulators", "tile_loops", "uses", "zero_fill"]
