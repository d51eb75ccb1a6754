"""Transposed copies in cache-line tiles.

A dense nest that writes rows while reading columns (``Y(k,i) = X(i,k)``, an epilogue reading
a product stored transposed) lowers to::

    for (k = 0; k < n_k; k++) { r = k * n_i; for (i = 0; i < n_i; i++) Y[r + i] = f(X[i * n_k + k]); }

Every iteration of the inner loop reads a new cache line of ``X`` and uses 4 bytes of it. Tiling
the outer loop by one cache line of the strided operand (16 f32) and moving the tile inside the
inner loop makes each line read once and used whole, while the stores still go to only 16
rows, each filled in order::

    for (t = 0; t < n_k / 16; t++)
      for (i = 0; i < n_i; i++)
        for (k_in = 0; k_in < 16; k_in++) { k = 16 * t + k_in; Y[k * n_i + i] = f(X[i * n_k + k]); }
    ... the last n_k % 16 rows as before

When this is exact: every (k, i) iteration runs once with the same values, only in another
order; the stores of different iterations go to different elements (``r = x * n_i`` with ``x``
one-to-one in ``k`` and the inner counter in ``[0, n_i)``), and nothing the nest stores is read in
it, so the order cannot be observed.
"""
from __future__ import annotations

from typing import Callable

from .. import nodes as n
from ..rewrite import walk
from .tile import introduced, perfect_nest, strip, substitute, tile_loops, uses

LINE_BYTES = 64      # one cache line of the strided operand per tile
_BYTES = {n.I32: 4, n.I64: 8, n.F32: 4, n.F64: 8, n.BOOL: 1}


def tile_transposes(fn: n.Function, line_bytes: int = LINE_BYTES) -> n.Function:
    """Tile row-writing, column-reading nests by ``line_bytes`` of the strided operand, a cache
    line by default (see the module docstring); 0 leaves ``fn`` as it is.

    >>> from tensoralg.ir.build import for_, store, var, add, mul, load, function, param, declare
    >>> from tensoralg.ir.printer import format_function
    >>> k, i, m, r = (var(x, n.I64) for x in ("k", "i", "m", "r"))
    >>> x, y = var("x", n.Ptr(n.F32)), var("y", n.Ptr(n.F32))
    >>> f = function("t", [param(m, "m"), param(x, "x"), param(y, "y")],
    ...     for_(k, 0, m, declare(r, mul(k, m)),
    ...          for_(i, 0, m, store(y, add(r, i), load(x, add(mul(i, m), k))))))
    >>> print(format_function(tile_transposes(f)).splitlines()[3])
      for (i64 k_tile = 0; k_tile < k_tiles; k_tile++) {
    """
    if line_bytes <= 0:
        return fn
    return tile_loops(fn, lambda loop, fresh: _tile(loop, fresh, line_bytes))


def _tile(outer: n.For, fresh: Callable[[str], str], line_bytes: int) -> n.Block | None:
    nest = perfect_nest(outer)
    if nest is None:
        return None
    decls, inner = nest
    a, b = outer.var.name, inner.var.name
    local = {s.var.name: s.init for s in decls}
    stores = inner.body.body
    if not stores or not all(isinstance(s, n.Store) for s in stores):
        return None
    if not all(_row_store(s, a, b, local, inner.stop) for s in stores):
        return None
    written = {s.array.name for s in stores}
    if any(isinstance(x, n.Load) and x.array.name in written for x in walk(outer)):
        return None
    strided = [x for s in stores for x in walk(s.value)
               if isinstance(x, n.Load) and _column_read(x.index, a, b, set(local))]
    if not strided:
        return None
    width = line_bytes // max(_BYTES.get(x.dtype, 8) for x in strided)
    if width < 4:
        return None
    return _tiled(outer, decls, inner, width, fresh)


def _row_store(s: n.Store, a: str, b: str, local: dict[str, n.Expr], row: n.Expr) -> bool:
    """``y[base + b]`` with ``base = x * row`` (maybe through a local), ``x`` one-to-one in
    ``a``: ``a`` itself or ``c + a`` with ``c`` fixed in the nest."""
    base = _other_operand(s.index, b)
    if isinstance(base, n.Var) and base.name in local:
        base = local[base.name]
    match base:
        case n.Binary("*", lhs, rhs) if rhs == row or lhs == row:
            x = lhs if rhs == row else rhs
            return _shifted(x, a, {b, *local})
    return False


def _column_read(index: n.Expr, a: str, b: str, local: set[str]) -> bool:
    """``e * s + a`` with ``e`` one-to-one in ``b`` and ``s`` fixed: a stride across ``b``."""
    rest = _other_operand(index, a)
    match rest:
        case n.Binary("*", lhs, rhs):
            for e, s in ((lhs, rhs), (rhs, lhs)):
                if _shifted(e, b, {a, *local}) and not uses(s, {a, b, *local}):
                    return True
    return False


def _other_operand(index: n.Expr, name: str) -> n.Expr | None:
    """For ``index = e + name`` (either order), ``e`` when ``e`` does not use ``name``."""
    if isinstance(index, n.Binary) and index.op == "+":
        for this, other in ((index.rhs, index.lhs), (index.lhs, index.rhs)):
            if isinstance(this, n.Var) and this.name == name and not uses(other, {name}):
                return other
    return None


def _shifted(x: n.Expr, name: str, varying: set[str]) -> bool:
    """``x`` is ``name`` or ``c + name`` with ``c`` free of ``name`` and ``varying``."""
    if isinstance(x, n.Var) and x.name == name:
        return True
    c = _other_operand(x, name)
    return c is not None and not uses(c, varying)


def _tiled(outer: n.For, decls: list[n.Declare], inner: n.For, width: int,
           fresh: Callable[[str], str]) -> n.Block:
    cut = strip(outer, width, fresh)
    body = substitute(n.Block((*decls, *inner.body.body)), {outer.var.name: cut.at})
    assert isinstance(body, n.Block)
    tiled = cut.tile_loop(n.For(inner.var, inner.start, inner.stop,
                                n.Block((cut.lane_loop(body),))))
    renamed = {v.name: n.Var(fresh(v.name), v.dtype) for v in introduced(outer)}
    rest = substitute(n.For(outer.var, cut.rest_start, outer.stop, outer.body), renamed)
    return n.Block((
        n.Comment(f"transposed access: tiles of {width} along {outer.var.name} inside the "
                  f"{inner.var.name} loop"),
        cut.count, tiled, rest))


__all__ = ["LINE_BYTES", "tile_transposes"]
