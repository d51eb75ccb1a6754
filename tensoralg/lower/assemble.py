"""The output side of a loop nest: dense stores, sparse appends, row workspaces, and values
stored at the positions of an operand whose pattern a sparse output shares (``PatternWriter``,
``lower/pattern.py``).

A writer gets three hooks from the lowerer:

- ``around_index(index, context, rest)``: wraps the body of one coordinate of ``index``
  (a compressed output level appends its coordinate afterwards if anything was stored below);
- ``region(context, inner)``: opened once, at ``region_depth``, around the loops that follow the
  last output index (a scalar accumulator), or that follow the reductions before the last output
  level (a dense workspace with a coordinate list, Kjolstad et al., CGO 2019);
- ``leaf(value, context)``: the innermost statement.

Sparse outputs are assembled in one pass: the kernel grows its buffers with ``Grow`` and hands
them to the runtime through ``Ptr(Ptr(t))`` parameters, with each level's size in ``sizes``.
A loop that appends to the last level reserves room once, before it runs, for every entry it
can append (``reserve``, with the lowerer's bound: a dense loop's extent, or the sum of its
sparse iterators' segment lengths; a workspace row's coordinate count), and its appends store
without a capacity check of their own.
After each (dense) parent position of the first compressed level the kernel records where that
parent's children end; when a loop over a parent level may skip some (``visit_parents``),
those are filled by a running maximum at the end.
Deeper compressed levels are given their ``pos`` entry by their parent when the parent appends. Coordinates come out sorted and unique because the loops
visit each level in storage order (or the workspace sorts its coordinate list).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from tensoralg.formats.level import LevelKind
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F64, I32, I64, Ptr, Stmt, Store, Var
from tensoralg.ir.nodes import Expr as IRExpr
from tensoralg.ir.rewrite import walk
from tensoralg.lower.levels import dense
from tensoralg.lower.program import LoopNest, OutputMode, Program, TensorInfo, TensorRole
from tensoralg.notation.ast import Access, Add, Mul, Neg, Sub

WORD, WORD_SHIFT = 64, 6      # bits in a word of the workspace's bitmap, and log2 of it
RESERVE_MARGIN = 1.125        # a reservation's room beyond the size its projection expects
RESERVE_MAX_GROWTH = 16       # a reservation at most multiplies a buffer's capacity by this

if TYPE_CHECKING:
    from tensoralg.lower.lowerer import Context, Lowerer

Rest = Callable[["Context"], list[Stmt]]


class Writer(Protocol):
    region_depth: int | None

    def around_index(self, index: str, context: "Context", rest: Rest) -> list[Stmt]: ...
    def region(self, context: "Context", inner: Rest) -> list[Stmt]: ...
    def leaf(self, value: IRExpr, context: "Context") -> list[Stmt]: ...


def within_stored_entries(nest: LoopNest, program: Program) -> bool:
    """Whether ``nest``'s output can hold no more entries than its operands store together
    (:func:`stores_within_operands`, with no loop over an index the output lacks). The
    runtime's first capacity of such an output (the operands' stored entries,
    ``runtime.threads.first_guess``) is then a bound, not a guess.

    >>> import numpy as np
    >>> from tensoralg.formats import CSR, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation import parse_statement
    >>> def bounded(text, formats):
    ...     program = concretize(parse_statement(text), formats, {}, np.dtype(float), CSR)
    ...     return within_stored_entries(program.nests[0], program)
    >>> bounded("C(i,j) = A(i,j) + B(i,j)", {"A": CSR, "B": CSR})
    True
    >>> bounded("C(i,j) = A(i,j) * X(i,j)", {"A": CSR, "X": dense(2)})
    False
    """
    return all(index in nest.output.indices for index in nest.loop_order) and \
        stores_within_operands(nest.expr, nest.output.indices,
                               lambda name: not program.tensor(name).format.is_dense)


def stores_within_operands(expr: object, output_indices: tuple[str, ...],
                           sparse: Callable[[str], bool]) -> bool:
    """Whether every entry of ``expr`` is an entry of one of its operands: it only adds,
    subtracts, negates and multiplies accesses of ``sparse`` tensors that each name exactly
    the output's indices (so nothing is reduced or broadcast, and a coordinate no operand
    stores is zero). The output then holds at most the operands' stored entries together.

    >>> from tensoralg.notation import parse_statement
    >>> s = parse_statement("C(i,j) = A(i,j) - B(j,i) * A(i,j)")
    >>> stores_within_operands(s.rhs, s.lhs.indices, lambda name: True)
    True
    >>> s = parse_statement("y(i) = A(i,j) * x(j)")
    >>> stores_within_operands(s.rhs, s.lhs.indices, lambda name: True)
    False
    """
    match expr:
        case Access(tensor=name, indices=indices):
            return sparse(name) and sorted(indices) == sorted(output_indices)
        case Neg(operand):
            return stores_within_operands(operand, output_indices, sparse)
        case Add(lhs, rhs) | Sub(lhs, rhs) | Mul(lhs, rhs):
            return stores_within_operands(lhs, output_indices, sparse) and \
                stores_within_operands(rhs, output_indices, sparse)
    return False


def _trailing_region(nest: LoopNest, last_output_index: str | None) -> int | None:
    """The depth after the last output index, if reductions follow it."""
    order = nest.loop_order
    depth = order.index(last_output_index) + 1 if last_output_index is not None else 0
    return depth if depth < len(order) else None


class DenseWriter:
    """``out[position] += value``, with a scalar accumulator when reductions are innermost."""

    def __init__(self, lowerer: "Lowerer", nest: LoopNest, info: TensorInfo, vals: Var) -> None:
        self.lowerer, self.nest, self.info, self.vals = lowerer, nest, info, vals
        order = nest.loop_order
        last = max(nest.output.indices, key=order.index, default=None)
        self.region_depth = _trailing_region(nest, last)

    def position(self, context: "Context") -> IRExpr:
        position: IRExpr = b.i64(0)
        for level, mode in enumerate(self.info.format.order):
            size = self.lowerer.level_size(self.info, level)
            position = dense.locate(position, size, context.bound[self.nest.output.indices[mode]])
        return position

    def around_index(self, index: str, context: "Context", rest: Rest) -> list[Stmt]:
        return rest(context)

    def region(self, context: "Context", inner: Rest) -> list[Stmt]:
        acc = Var(self.lowerer.names("acc"), self.lowerer.value_dtype)
        # When only output indices enclose the region, it runs once per output position; if no
        # other nest writes this output either, the sum can be stored, not added.
        once = all(index in self.nest.output.indices
                   for index in self.nest.loop_order[:self.region_depth])
        only_writer = sum(n.output.tensor == self.info.name
                          for n in self.lowerer.program.nests) == 1
        return [b.declare(acc, 0), *inner(context.with_(accumulator=acc)),
                b.store(self.vals, self.position(context), acc,
                        accumulate=not (once and only_writer) or self.lowerer.rows_cut)]

    def row_fill(self, index: str, coordinate: Var, body: list[Stmt]) -> list[Stmt]:
        """``body``, the outer loop's over ``index``, with the output's row ``coordinate``
        (every element whose first stored coordinate it is) zeroed first when the body sums
        into it, this nest alone writes the program's dense output and ``index`` is that
        output's first stored index; the loop visits each row once.

        A kernel that zeroes each row before it sums into it assigns every element, so the
        runtime allocates the output without zeroing it first: one pass over the output
        fewer, the rows zeroed while they are in cache and by the thread that owns them.
        """
        lowerer, info, nest = self.lowerer, self.info, self.nest
        if info.role is TensorRole.TEMPORARY or lowerer.rows_cut or not lowerer.plan.zero_rows \
                or sum(n.output.tensor == info.name for n in lowerer.program.nests) != 1 \
                or not info.format.order \
                or nest.output.indices[info.format.order[0]] != index \
                or not any(isinstance(s, Store) and s.accumulate and s.array == self.vals
                           for s in walk(b.block(body))):
            return body
        position: IRExpr = coordinate
        loops: list[tuple[Var, IRExpr]] = []
        for level, mode in enumerate(info.format.order[1:], start=1):
            var = Var(lowerer.names(f"{nest.output.indices[mode]}_fill"), I64)
            size = lowerer.level_size(info, level)
            loops.append((var, size))
            position = dense.locate(position, size, var)
        fill: Stmt = b.store(self.vals, position, b.const(0, lowerer.value_dtype))
        for var, size in reversed(loops):
            fill = b.for_(var, b.i64(0), size, fill)
        return [fill, *body]

    def leaf(self, value: IRExpr, context: "Context") -> list[Stmt]:
        # A nest with no reduction visits each output position at most once; if it is the only
        # writer, the value can be stored instead of added (no read of the output).
        # A non-unique level (COO) may repeat a coordinate, and repeats must add up.
        program = self.lowerer.program
        once = not any(index not in self.nest.output.indices for index in self.nest.loop_order) \
            and sum(n.output.tensor == self.info.name for n in program.nests) == 1 \
            and not any(kind is LevelKind.COMPRESSED_NONUNIQUE
                        for t in program.tensors for kind in t.format.levels) \
            and not self.lowerer.rows_cut
        return [b.store(self.vals, self.position(context), value, accumulate=not once)]


class PatternWriter(DenseWriter):
    """A sparse output that shares ``pattern``'s stored entries (``lower/pattern.py``): each
    value is stored at the position ``pattern`` stands on, which every loop over the output's
    indices has resolved by then. The runtime allocates the buffer (zeroed unless every
    position is assigned: ``pattern.assigns_every_position``) and gives the result copies of
    ``pattern``'s index arrays."""

    def __init__(self, lowerer: "Lowerer", nest: LoopNest, info: TensorInfo, vals: Var,
                 pattern: Access) -> None:
        super().__init__(lowerer, nest, info, vals)
        self.pattern = pattern

    def position(self, context: "Context") -> IRExpr:
        cursor = context.cursors[self.pattern]
        assert cursor.position is not None and cursor.resolved == len(self.info.format.levels)
        return cursor.position

    def row_fill(self, index: str, coordinate: Var, body: list[Stmt]) -> list[Stmt]:
        return body


class SparseWriter:
    """Appends to an output whose levels are dense then compressed (CSR, DCSR, CSF, ...)."""

    def __init__(self, lowerer: "Lowerer", nest: LoopNest, info: TensorInfo) -> None:
        self.lowerer, self.nest, self.info = lowerer, nest, info
        fmt = info.format
        self.level_indices = [nest.output.indices[mode] for mode in fmt.order]
        self.first = next(k for k, kind in enumerate(fmt.levels) if kind is LevelKind.COMPRESSED)
        self.last = fmt.rank - 1
        self.skips_parents = False   # whether some parent's pos entry is never written
        self.counted = nest.counted is not None   # rows counted first: filled in place
        self.row_end: Var | None = None   # where a counted appended row must end
        if nest.mode is OutputMode.WORKSPACE:
            self.region_depth = (nest.loop_order.index(self.level_indices[-2]) + 1
                                 if fmt.rank > 1 else 0)
        else:
            self.region_depth = _trailing_region(nest, self.level_indices[-1])
        self._declare()

    # -- buffers --------------------------------------------------------------------------

    def _declare(self) -> None:
        low, name = self.lowerer, self.info.name
        index = {4: I32, 8: I64}[self.info.index_dtype.itemsize]
        self.pos: dict[int, Var] = {}
        self.crd: dict[int, Var] = {}
        self.size: dict[int, Var] = {}
        self.cap: dict[str, Var] = {}
        self.refs: list[tuple[Var, Var]] = []
        if self.counted:
            self._declare_counted(index)
            return
        capacity = low._param("capacity", I64, "capacity")
        self.sizes_out = low._param(f"{name}_sizes", Ptr(I64), f"{name}.sizes", output=True)
        setup = low.setup
        parents = b.i64(1)
        for k in range(self.first):
            parents = b.mul(parents, low.level_size(self.info, k))
        self.parents = Var(low.names(f"{name}_parents"), I64)
        setup.append(b.declare(self.parents, parents))
        for k in range(self.first, self.last + 1):
            self.pos[k] = self._buffer(f"{name}{k}_pos", index, f"{name}.{k}.pos",
                                       count=b.add(self.parents, 1) if k == self.first else capacity,
                                       zero=k == self.first)
            if k > self.first:
                setup.append(b.store(self.pos[k], 0, 0))
            self.crd[k] = self._buffer(f"{name}{k}_crd", index, f"{name}.{k}.crd", capacity)
            self.size[k] = Var(low.names(f"{name}{k}_size"), I64)
            setup.append(b.declare(self.size[k], 0))
        self.vals = self._buffer(f"{name}_vals", low.value_dtype, f"{name}.vals", capacity)
        if self.nest.mode is OutputMode.WORKSPACE:
            self._declare_workspace()

    def _declare_counted(self, index) -> None:
        """A CSR output whose rows the runtime counted (``lower/counted.py``): its ``pos``
        (read), ``crd`` and ``vals`` (written in place) are arrays the runtime allocated, and
        ``sizes[0]`` receives the number of rows whose count disagreed with the workspace."""
        low, name = self.lowerer, self.info.name
        self.sizes_out = low._param(f"{name}_sizes", Ptr(I64), f"{name}.sizes", output=True)
        self.pos[1] = low._param(f"{name}1_pos", Ptr(index), f"{name}.1.pos", output=True)
        self.crd[1] = low._param(f"{name}1_crd", Ptr(index), f"{name}.1.crd", output=True)
        self.vals = low._param(f"{name}_vals", Ptr(low.value_dtype), f"{name}.vals",
                               output=True)
        self.size[1] = Var(low.names(f"{name}1_size"), I64)
        self.mismatched = Var(low.names("mismatched"), I64)
        low.setup.extend([b.declare(self.size[1], 0), b.declare(self.mismatched, 0)])
        if self.nest.mode is OutputMode.WORKSPACE:
            self._declare_workspace()

    def _buffer(self, name: str, dtype, role: str, count: IRExpr, zero: bool = False) -> Var:
        low = self.lowerer
        ref = low._param(f"{name}_ref", Ptr(Ptr(dtype)), role, output=True)
        buffer = Var(low.names(name), Ptr(dtype))
        cap = Var(low.names(f"{name}_cap"), I64)
        low.setup.extend([b.declare(cap, count), b.allocate(buffer, cap, zero=zero)])
        self.cap[buffer.name] = cap
        self.refs.append((ref, buffer))
        return buffer

    def _declare_workspace(self) -> None:
        low = self.lowerer
        width = low.level_size(self.info, self.last)
        self.workspace = Var(low.names("workspace"), Ptr(low.value_dtype))
        self.bits = Var(low.names("bits"), Ptr(I64))
        self.coords = Var(low.names("coords"), Ptr(I64))
        self.count = Var(low.names("count"), I64)
        self.lowest = Var(low.names("lowest"), I64)
        self.highest = Var(low.names("highest"), I64)
        words = b.add(b.div(width, WORD), 1)
        low.setup.extend([b.allocate(self.workspace, width, zero=True),
                          b.allocate(self.bits, words, zero=True),
                          b.allocate(self.coords, width),
                          b.declare(self.count, 0),
                          b.declare(self.lowest, 0),
                          b.declare(self.highest, 0)])
        low.finish[:0] = [b.free(self.workspace), b.free(self.bits), b.free(self.coords)]

    def finish(self) -> None:
        """The statements after the loops: ``pos`` of parents the loops skipped, and the
        buffers and sizes handed back. Called once the nest is lowered, when the lowerer has
        said (``visit_parents``) whether the loops visit every parent."""
        low = self.lowerer
        if self.counted:
            # Ranges share sizes[0]: only a range that found a mismatch writes it, so a range
            # without one cannot overwrite the report.
            low.finish.append(b.if_(b.ne(self.mismatched, 0),
                                    [b.store(self.sizes_out, 0, self.mismatched)]))
            return
        q = Var(low.names("q"), I64)
        first_pos = self.pos[self.first]
        last = b.store(first_pos, self.parents, self._index_cast(self.size[self.first], first_pos))
        stmts: list[Stmt] = [last if self.first == 0 else None]
        if self.skips_parents:
            stmts += [
                b.comment("parents the loops never visited end where the previous parent ended"),
                b.for_(q, 0, self.parents, b.store(first_pos, b.add(q, 1), b.maximum(
                    b.load(first_pos, b.add(q, 1)), b.load(first_pos, q))))]
        for ref, buffer in self.refs:
            stmts.append(b.store(ref, 0, buffer))
        for k, size in self.size.items():
            stmts.append(b.store(self.sizes_out, k, size))
        low.finish.extend(stmts)

    def visit_parents(self, index: str, every: bool) -> None:
        """The loop over ``index`` runs its body for ``every`` coordinate or not; once a loop
        over a dense level above the compressed ones may skip some, their ``pos`` entries are
        filled after the loops.

        A CSR output's rows are all visited by the outer loop (each range's own rows, when it
        is split), so the fill, a serial pass over every row (~10% of a CSR add over the
        114,599 short rows of luxembourg_osm), is left out.
        """
        if index in self.level_indices[:self.first] and not every:
            self.skips_parents = True

    # -- appending ------------------------------------------------------------------------

    def _grow(self, buffer: Var, needed: IRExpr) -> Stmt:
        return b.grow(buffer, self.cap[buffer.name], needed)

    def _reserve(self, position: IRExpr) -> list[Stmt]:
        """After parent ``position``: once a level's buffers are half full, grow them at once
        to the size the parents done so far project for all of them, when that is more than
        twice the capacity.

        Growing by doubling from the operands' nonzeros copied and page-faulted every entry
        of a large output several times: wiki-Vote squared (1.8M entries from a first
        capacity of 207k) doubled four times, and took 61 ms against 41 with the reservation
        (hangGlider_2 squared: 35 against 16).
        The check costs a comparison per parent; a projection that misses (rows that get
        denser further down) leaves the ordinary doubling of each append to finish the job,
        and one that overshoots costs address space that is never touched. The growth is
        capped (``RESERVE_MAX_GROWTH``) so a front-loaded output cannot ask for absurd sizes.
        """
        low = self.lowerer
        if within_stored_entries(self.nest, low.program):
            # The runtime's first capacity (the operands' stored entries) already bounds the
            # output: a projection could only over-reserve. Rows in degree order fooled it:
            # a power-law CSR plus its transpose (2e5 rows, 1.7e6 entries) reserved 16x its
            # capacity once half full and spent more time growing and faulting than merging
            # (25 ms against scipy's 12; an ad hoc sweep, 2026-12-05, not kept).
            return []
        # A thread range projects from its own rows: it holds only their entries (counting the
        # rows before the range made a later range reserve far too little, and grow again).
        begin, parents = b.i64(0), self.parents
        if low.range is not None and low.parallel_index == self.level_indices[0] and \
                self.first == 1:
            begin, parents = low.range[0], b.sub(low.range[1], low.range[0])
        done = b.cast(b.sub(b.add(position, 1), begin), F64)
        stmts: list[Stmt] = []
        for k in range(self.first, self.last + 1):
            size, crd = self.size[k], self.crd[k]
            cap = self.cap[crd.name]
            want = Var(low.names(f"want{k}"), I64)
            projected = b.mul(b.div(b.mul(b.cast(size, F64), b.cast(parents, F64)), done),
                              RESERVE_MARGIN)
            limit = b.mul(b.cast(cap, F64), float(RESERVE_MAX_GROWTH))
            buffers = [(crd, want), (self.vals, want)] if k == self.last else \
                [(crd, want), (self.pos[k + 1], b.add(want, 1))]
            stmts.append(b.if_(b.lt(cap, b.mul(size, 2)), [
                b.declare(want, b.cast(b.minimum(projected, limit), I64)),
                b.if_(b.lt(b.mul(cap, 2), want),
                      [self._grow(buffer, needed) for buffer, needed in buffers])]))
        return stmts

    def _index_cast(self, value: IRExpr, buffer: Var) -> IRExpr:
        return b.cast(value, buffer.dtype.elem)

    def appends_last(self, index: str) -> bool:
        """Whether each coordinate of the loop over ``index`` appends at most one entry to the
        last level (an appending nest's last output index)."""
        return self.nest.mode is OutputMode.APPEND and index == self.level_indices[-1] and \
            self.info.format.levels[self.last] is not LevelKind.DENSE

    def reserve(self, count: IRExpr) -> list[Stmt]:
        """Room for ``count`` more entries in the last level, so that the appends that follow
        (in a context marked ``reserved``) need no capacity check of their own. A counted
        output's arrays are the runtime's, sized by the counts: nothing to reserve."""
        if self.counted:
            return []
        size = self.size[self.last]
        room = Var(self.lowerer.names("room"), I64)
        return [b.declare(room, b.add(size, count)),
                self._grow(self.crd[self.last], room), self._grow(self.vals, room)]

    def append_value(self, coordinate: IRExpr, value: IRExpr, context: "Context") -> list[Stmt]:
        k = self.last
        size, crd = self.size[k], self.crd[k]
        if self.row_end is not None:
            # A counted appended row: stored only below the row's counted end (a count too
            # small drops entries and is reported when the row ends).
            return [b.if_(b.lt(size, self.row_end),
                          [b.store(crd, size, self._index_cast(coordinate, crd)),
                           b.store(self.vals, size, value)]),
                    b.assign(size, b.add(size, 1))]
        checks = [] if context.reserved else \
            [self._grow(crd, b.add(size, 1)), self._grow(self.vals, b.add(size, 1))]
        return [*checks,
                b.store(crd, size, self._index_cast(coordinate, crd)),
                b.store(self.vals, size, value),
                b.assign(size, b.add(size, 1))]

    def append_coordinate(self, level: int, coordinate: IRExpr, context: "Context"
                          ) -> list[Stmt]:
        size, crd = self.size[level], self.crd[level]
        child_pos, child_size = self.pos[level + 1], self.size[level + 1]
        return [self._grow(crd, b.add(size, 1)),
                b.store(crd, size, self._index_cast(coordinate, crd)),
                self._grow(child_pos, b.add(size, 2)),
                b.store(child_pos, b.add(size, 1), self._index_cast(child_size, child_pos)),
                b.assign(size, b.add(size, 1))]

    # -- hooks ----------------------------------------------------------------------------

    def around_index(self, index: str, context: "Context", rest: Rest) -> list[Stmt]:
        if index not in self.level_indices:
            return rest(context)
        level = self.level_indices.index(index)
        coordinate = context.bound[index]
        kind = self.info.format.levels[level]
        if kind is LevelKind.DENSE:
            parent = context.out_positions[level - 1] if level else b.i64(0)
            position = dense.locate(parent, self.lowerer.level_size(self.info, level), coordinate)
            row_end: list[Stmt] = []
            if self.counted and self.nest.mode is OutputMode.APPEND and \
                    level + 1 == self.first:
                self.row_end = Var(self.lowerer.names("row_end"), I64)
                row_end = [b.declare(self.row_end, b.cast(
                    b.load(self.pos[self.first], b.add(position, 1)), I64))]
            inner = [*row_end,
                     *rest(context.with_(out_positions=(*context.out_positions, position)))]
            if level + 1 != self.first:
                return inner
            if self.counted:
                # the row's entries start where the counts put them
                start = b.cast(b.load(self.pos[self.first], position), I64)
                if self.row_end is None:
                    return [b.assign(self.size[self.first], start), *inner]
                # Appended rows (a counted sum): each append is checked against the row's end
                # (append_value), and a row that ends anywhere else is reported, never
                # written past.
                size = self.size[self.first]
                return [b.assign(size, start), *inner,
                        b.if_(b.ne(size, self.row_end),
                              [b.assign(self.mismatched, b.add(self.mismatched, 1))])]
            # The last dense level above the compressed ones records where its children end.
            first_pos = self.pos[self.first]
            return [*inner, b.store(first_pos, b.add(position, 1),
                                    self._index_cast(self.size[self.first], first_pos)),
                    *self._reserve(position)]
        inner = context.with_(out_positions=(*context.out_positions, self.size[level]))
        if level == self.last:
            return rest(inner)
        before = Var(self.lowerer.names(f"before{level + 1}"), I64)
        return [b.declare(before, self.size[level + 1]), *rest(inner),
                b.if_(b.lt(before, self.size[level + 1]),
                      self.append_coordinate(level, coordinate, context))]

    def region(self, context: "Context", inner: Rest) -> list[Stmt]:
        if self.nest.mode is not OutputMode.WORKSPACE:
            acc = Var(self.lowerer.names("acc"), self.lowerer.value_dtype)
            coordinate = context.bound[self.level_indices[-1]]
            return [b.declare(acc, 0), *inner(context.with_(accumulator=acc)),
                    *self.append_value(coordinate, acc, context)]
        width = self.lowerer.level_size(self.info, self.last)
        start = [b.assign(self.count, 0), b.assign(self.lowest, width), b.assign(self.highest, -1),
                 *inner(context)]
        if self.counted:
            # Written only when the row ends exactly where the counts say it does: a count that
            # disagrees is reported (sizes[0]), never written past.
            end = b.cast(b.load(self.pos[self.first], b.add(context.out_positions[-1], 1)), I64)
            return [*start, b.if_(b.eq(b.add(self.size[self.last], self.count), end),
                                  self._flush(context.with_(reserved=True)),
                                  [*self._clear(), b.assign(self.mismatched,
                                                            b.add(self.mismatched, 1))])]
        return [*start, *self.reserve(self.count), *self._flush(context.with_(reserved=True))]

    def _clear(self) -> list[Stmt]:
        """Clear the workspace's touched coordinates without appending them."""
        t, c = Var(self.lowerer.names("t"), I64), Var(self.lowerer.names("c"), I64)
        return [b.for_(t, 0, self.count, b.declare(c, b.load(self.coords, t)),
                       b.store(self.bits, b.shr(c, WORD_SHIFT), 0),
                       b.store(self.workspace, c, 0))]

    def leaf(self, value: IRExpr, context: "Context") -> list[Stmt]:
        if self.nest.mode is not OutputMode.WORKSPACE:
            return self.append_value(context.bound[self.level_indices[-1]], value, context)
        c = context.bound[self.level_indices[-1]]
        low = self.lowerer
        word, bit = Var(low.names("word"), I64), Var(low.names("bit"), I64)
        return [b.declare(word, b.shr(c, WORD_SHIFT)),
                b.declare(bit, b.shl(b.i64(1), b.bitand(c, WORD - 1))),
                b.if_(b.eq(b.bitand(b.load(self.bits, word), bit), 0),
                      [b.store(self.bits, word, b.bitor(b.load(self.bits, word), bit)),
                       b.store(self.coords, self.count, c),
                       b.assign(self.count, b.add(self.count, 1)),
                       b.assign(self.lowest, b.minimum(self.lowest, c)),
                       b.assign(self.highest, b.maximum(self.highest, c))]),
                b.store(self.workspace, c, value, accumulate=True)]

    def _flush(self, context: "Context") -> list[Stmt]:
        """Append the workspace's coordinates in order, clearing what was touched.

        The coordinates touched are bits in 64-bit words: scanning the words between the
        lowest and highest one costs a load per 64 columns and a ``ctz`` per coordinate, and
        needs no sort. Only a handful of coordinates scattered over a wide window
        (``count**2 < 4 * words``) are put in order by an insertion sort of their list instead.
        A second level of bits (one per word, marked at the flush, only marked words visited)
        ran a uniformly random 1e5 x 1e5 product of 1e6 entries 1.5x faster (~100 coordinates
        over ~1500 words a row), but as a third path it made LLVM's code for the other rows
        5-15% slower (banded, bcsstk13, kos_docword, rajat01), and as the only scan 25% slower
        on dense rows (rajat01): not kept (an ad hoc A/B, 2026-12-05).
        Before the bitmap, 32-bit marks were scanned when the window was narrow and the list was
        heap-sorted otherwise; rows of a few hundred scattered coordinates (rajat01 squared,
        wiki-Vote squared) spent most of their time there.
        """
        low = self.lowerer

        def fresh(stem: str) -> Var:
            return Var(low.names(stem), I64)

        def take(coordinate: IRExpr) -> list[Stmt]:
            return [*self.append_value(coordinate, b.load(self.workspace, coordinate), context),
                    b.store(self.workspace, coordinate, 0)]

        def word_of(w: IRExpr) -> list[Stmt]:
            """Take the coordinates of word ``w`` of ``bits`` in order and clear it."""
            bits, c = fresh("set_bits"), fresh("c")
            return [b.declare(bits, b.load(self.bits, w)), b.store(self.bits, w, 0),
                    b.while_(b.ne(bits, 0),
                             b.declare(c, b.add(b.mul(w, WORD), b.ctz(bits))), take(c),
                             b.assign(bits, b.bitand(bits, b.sub(bits, 1))))]

        t, c = fresh("t"), fresh("c")
        first, last = b.shr(self.lowest, WORD_SHIFT), b.shr(self.highest, WORD_SHIFT)
        from_list = [b.for_(t, 0, self.count, b.declare(c, b.load(self.coords, t)),
                            b.store(self.bits, b.shr(c, WORD_SHIFT), 0), take(c))]
        w = fresh("w")
        scan = [b.for_(w, first, b.add(last, 1), *word_of(w))]
        words = b.add(b.sub(last, first), 1)
        few = b.land(b.le(self.count, 64), b.lt(b.mul(self.count, self.count), b.mul(words, 4)))
        return [b.if_(few, [*insertion_sort(low, self.coords, self.count), *from_list], scan)]


def insertion_sort(lowerer: "Lowerer", array: Var, count: IRExpr) -> list[Stmt]:
    """Sort ``array[0:count)`` (i64) ascending in place: the fastest way for a few elements."""
    names = lowerer.names
    t, s, key = Var(names("is_t"), I64), Var(names("is_s"), I64), Var(names("is_key"), I64)
    return [b.for_(t, 1, count,
                   b.declare(key, b.load(array, t)),
                   b.declare(s, t),
                   b.while_(b.land(b.lt(0, s), b.lt(key, b.load(array, b.sub(s, 1)))),
                            b.store(array, s, b.load(array, b.sub(s, 1))),
                            b.assign(s, b.sub(s, 1))),
                   b.store(array, s, key))]
