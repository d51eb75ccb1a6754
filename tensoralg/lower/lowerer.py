"""Lowering: a ``Program`` of loop nests → one ``ir.Function``.

Each nest is lowered index by index, outermost first (``index_loop``). At an index, the
accesses whose next storage level is sparse are iterators; their merge lattice decides the loop:

- no iterator: a counted loop over the whole dimension;
- one iterator and no dense point: a loop over the iterator's segment;
- a dense lattice with iterators: a counted loop that checks each iterator's coordinate;
- several iterators: one while loop per lattice point, each with one case per sub-point
  (TACO's co-iteration), advancing the iterators that matched.

Inside each case the expression is specialised to the operands present (``lattice.without``),
dense levels whose index is known are located, and lowering continues with the next index.
The output side (dense stores, appends, workspaces) lives in ``assemble.py``.
"""
from __future__ import annotations

import keyword
from dataclasses import dataclass, field, replace
from itertools import combinations
from typing import Callable, Mapping

import numpy as np

from tensoralg.errors import CompileError
from tensoralg.formats.level import LevelKind
from tensoralg.ir import build as b
from tensoralg.ir.nodes import (
    BOOL,
    F32,
    F64,
    I32,
    I64,
    For,
    Function,
    Param,
    Ptr,
    RangeBound,
    Scalar,
    Stmt,
    Store,
    Var,
)
from tensoralg.ir.nodes import (
    Expr as IRExpr,
)
from tensoralg.ir.rewrite import walk
from tensoralg.lower import values
from tensoralg.lower.assemble import DenseWriter, PatternWriter, SparseWriter, Writer
from tensoralg.lower.lattice import Lattice, LatticePoint, build_lattice, is_zero
from tensoralg.lower.levels import LevelArrays, compressed, dense, singleton
from tensoralg.lower.program import LoopNest, OutputMode, Program, TensorInfo, TensorRole
from tensoralg.lower.scheduling import (
    LoopPlan,
    fibre_vector_hint,
    moved_blocks,
    row_choice,
    why_not_parallel,
)
from tensoralg.notation.ast import Access, Expr, accesses

SCALARS = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
           np.dtype(np.int32): I32, np.dtype(np.int64): I64,
           np.dtype(np.complex64): Scalar.C64, np.dtype(np.complex128): Scalar.C128}

_RESERVED = set(keyword.kwlist) | {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "int", "long", "register", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "inline", "restrict", "bool", "true", "false", "main", "free", "malloc",
    "calloc", "realloc", "exp", "log", "sqrt", "pow", "sin", "cos", "tanh", "fabs", "fmin", "fmax",
    "floor", "ceil", "floorf", "ceilf", "nearbyint", "nearbyintf", "rint", "round",
    "abs", "min", "max"}


def scalar_of(dtype: np.dtype) -> Scalar:
    """The IR scalar for a supported NumPy dtype."""
    return SCALARS[np.dtype(dtype)]


class Namer:
    """Hands out names that are unique within one function and valid in C and LLVM."""

    def __init__(self) -> None:
        self.used: set[str] = set(_RESERVED)

    def __call__(self, base: str) -> str:
        # ASCII only: einsum takes any letter as an index (opt_einsum's Greek ones), C and
        # LLVM names stay plain.
        base = "".join(ch if (ch.isascii() and ch.isalnum()) or ch == "_" else "_"
                       for ch in base) or "v"
        if base[0].isdigit():
            base = "v" + base
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far an access has descended its storage levels.

    ``position`` is the position in the last resolved level; after a non-unique level the
    access stands on a whole ``segment`` of positions sharing one coordinate.
    """

    resolved: int
    position: IRExpr | None
    segment: tuple[IRExpr, IRExpr] | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """What is known at one point of the loop nest."""

    bound: Mapping[str, Var]
    cursors: Mapping[Access, Cursor]
    out_positions: tuple[IRExpr, ...] = ()
    accumulator: Var | None = None
    region_open: bool = False
    # The sparse output's last level has room reserved for every append this loop can make,
    # so its appends skip the capacity check (see ``SparseWriter.reserve``).
    reserved: bool = False
    # The block each enclosing block loop runs (``LoopPlan.lifts``), by the split index.
    blocks: Mapping[str, Var] = field(default_factory=dict)

    def with_(self, **changes) -> "Context":
        return replace(self, **changes)


@dataclass
class SparseIterator:
    """A sparse iterator inside one loop: its position variable and segment end."""

    access: Access
    level: int
    arrays: LevelArrays
    unique: bool
    begin: IRExpr
    end: IRExpr
    position: Var | None = None
    coordinate: IRExpr | None = None
    segment_end: Var | None = None
    matched: Var | None = None


@dataclass
class Lowerer:
    """Builds one ``ir.Function`` from a ``Program``."""

    program: Program
    name: str = "kernel"
    plan: LoopPlan = field(default_factory=LoopPlan)
    names: Namer = field(default_factory=Namer)
    params: list[Param] = field(default_factory=list)
    arrays: dict[str, tuple[LevelArrays, ...]] = field(default_factory=dict)
    vals: dict[str, Var] = field(default_factory=dict)
    sizes: dict[str, Var] = field(default_factory=dict)
    setup: list[Stmt] = field(default_factory=list)
    finish: list[Stmt] = field(default_factory=list)
    parallel_index: str | None = None   # the outer index whose range the runtime may split
    allow_split: bool = True
    range: tuple[Var, Var] | None = None  # range_begin / range_end parameters, once made
    split_loops: int = 0                  # outer loops that run over that range
    done_splits: set[str] = field(default_factory=set)   # indices a schedule's split cut
    done_hints: set[str] = field(default_factory=set)    # indices whose loops took hints
    # A position split's current range of positions, by the access and level it clamps.
    clamps: dict[tuple[Access, int], tuple[Var, Var]] = field(default_factory=dict)
    rows_cut: bool = False        # a position split may cut output rows: every store adds

    def _why_serial(self, index: str) -> str:
        reason = why_not_parallel(self.program, index, self.plan.partials)
        return reason or (f"a loop nest's outer loop over {index} co-iterates a compressed "
                          f"operand, so each thread would run it whole")

    @property
    def value_dtype(self) -> Scalar:
        return scalar_of(self.program.value_dtype)

    # -- the ABI --------------------------------------------------------------------------

    def declare_tensors(self) -> None:
        indices = sorted({i for t in self.program.tensors for i in t.dims})
        for index in indices:
            self.sizes[index] = self._param(f"n_{index}", I64, f"index.{index}")
        # A sum renamed apart from another over the same index (concretize.rename_reductions:
        # ``where(s > 0, s, 0.1 * s)`` with ``s = sum(k, ...)`` reads ``A(i,k)`` and
        # ``A(i,k1)``) runs over the extent of the modes it reads.
        infos = {info.name: info for info in self.program.tensors}
        for nest in self.program.nests:
            for access in (nest.output, *accesses(nest.expr)):
                for mode, index in enumerate(access.indices):
                    if index not in self.sizes:
                        self.sizes[index] = self.sizes[infos[access.tensor].dims[mode]]
        for info in self.program.tensors:
            if info.role is TensorRole.INPUT:
                self._declare_input(info)
            elif info.role is TensorRole.TEMPORARY:
                self._declare_temporary(info)

    def _param(self, name: str, dtype, role: str, output: bool = False) -> Var:
        v = Var(self.names(name), dtype)
        self.params.append(Param(v, role, output))
        return v

    def level_size(self, info: TensorInfo, level: int) -> Var:
        return self.sizes[info.dims[info.format.order[level]]]

    def _declare_input(self, info: TensorInfo) -> None:
        index = scalar_of(info.index_dtype)
        levels = []
        for k, kind in enumerate(info.format.levels):
            pos = self._param(f"{info.name}{k}_pos", Ptr(index), f"{info.name}.{k}.pos") \
                if kind.has_pos else None
            crd = self._param(f"{info.name}{k}_crd", Ptr(index), f"{info.name}.{k}.crd") \
                if kind.has_crd else None
            levels.append(LevelArrays(pos, crd, self.level_size(info, k)))
        self.arrays[info.name] = tuple(levels)
        self.vals[info.name] = self._param(f"{info.name}_vals", Ptr(self.value_dtype),
                                           f"{info.name}.vals")

    def _declare_temporary(self, info: TensorInfo) -> None:
        self.arrays[info.name] = tuple(LevelArrays(None, None, self.level_size(info, k))
                                       for k in range(info.rank))
        buffer = Var(self.names(f"{info.name}_vals"), Ptr(self.value_dtype))
        self.vals[info.name] = buffer
        self.setup.append(b.allocate(buffer, self.dense_count(info), zero=True))
        self.finish.append(b.free(buffer))

    def dense_count(self, info: TensorInfo) -> IRExpr:
        count: IRExpr = b.i64(1)
        for k in range(info.rank):
            count = b.mul(count, self.level_size(info, k))
        return count

    # -- the function ---------------------------------------------------------------------

    def lower(self) -> Function:
        self.declare_tensors()
        # A COO operand read in any order (lower/unordered.py) may meet a row in several runs
        # of its entries: every store adds, into the output the runtime zeroes.
        self.rows_cut = self.rows_cut or any(t.unordered for t in self.program.tensors)
        output = self.program.output
        self._check_lifts()
        writers = [self._writer(nest, output) for nest in self.program.nests]
        body = [self.lower_nest(nest, writer) for nest, writer in zip(self.program.nests, writers)]
        for writer in writers:
            if isinstance(writer, SparseWriter):
                writer.finish()
        wanted = self.plan.parallel_index
        if wanted is not None and (self.parallel_index != wanted or
                                   self.split_loops != len(self.program.nests)):
            raise CompileError(f"{self.plan.parallel}: the loop over {wanted} cannot run on "
                               f"several threads here: {self._why_serial(wanted)}")
        if self.parallel_index is not None and self.split_loops != len(self.program.nests):
            # A nest whose outer loop co-iterates a sparse operand cannot take the range: it
            # would run whole in every thread. Lower again without splitting.
            return Lowerer(self.program, self.name, self.plan, allow_split=False).lower()
        if self.plan.adaptive and row_choice(self.program, self.plan) is None:
            index = sorted(self.plan.adaptive)[0]
            raise CompileError(f"vectorize({index}, {self.plan.vectorize[index]}, "
                               f"tail=adaptive): no loop over {index} runs the rows of the one "
                               f"sparse operand, a CSR matrix (its second level compressed "
                               f"over {index} below a dense first level); use tail=mask or "
                               f"tail=remainder")
        unused = [f"split({index})" for index in self.plan.splits if index not in self.done_splits]
        if unused:
            raise CompileError(f"{', '.join(unused)}: no counted loop runs that index in "
                               f"{self.program.output.name}'s kernel (a loop over a compressed "
                               f"level is split by position, pos(...), not supported yet)")
        params = tuple(self.params)
        hinted = {*self.plan.unroll, *self.plan.vectorize} - self.done_hints
        notes = (*self.program.notes, *[
            f"unroll/vectorize({index}): no counted loop runs {index} (it is co-iterated by a "
            f"while loop), so the hint was not applied" for index in sorted(hinted)], *[f"loop order {', '.join(n.loop_order)} for "
                                        f"{n.output} ({n.mode.value})" for n in self.program.nests])
        notes += tuple(f"{t.name}'s entries are read in any order, duplicates included: "
                       f"every store to the output adds"
                       for t in self.program.tensors if t.unordered)
        if self.parallel_index is not None:
            how = "each sums into its own copy of the output, added up after" \
                if self.plan.partials else "each writes its own output rows"
            notes += (f"parallel: the runtime may split the loop over {self.parallel_index} into "
                      f"ranges run by several threads ({how})",)
        return Function(self.name, params, b.block(self.setup, body, self.finish), notes)

    def _check_lifts(self) -> None:
        """Refuse the block loops moved outward (``LoopPlan.lifts``) this kernel cannot run
        exactly: the output must be dense and written by one nest. Blocks of an output index
        own their output elements; blocks of a summed index each add their part into the
        output (every store then adds, ``rows_cut``), so no sum changes its order."""
        program = self.program
        moved: dict[str, int] = {}
        for nest in program.nests:
            moved.update(moved_blocks(nest.loop_order, self.plan))
        for index in moved:
            split = self.plan.splits[index]
            asked = self.plan.lifted_by.get(index, str(split))
            nests = [n for n in program.nests if index in n.loop_order]
            why = None
            if len(program.nests) != 1:
                why = (f"the statement lowers to {len(program.nests)} loop nests (temporaries "
                       f"or sums of products of different indices); blocks run over one nest")
            elif not program.output.format.is_dense or \
                    program.nests[0].mode is OutputMode.PATTERN:
                why = (f"the output is stored as {program.output.format}; its entries are "
                       f"appended in order, which blocks of {index} would break")
            elif any(index not in n.output.indices for n in nests):
                # Blocks of a sum: each block adds its part into the output, which the runtime
                # zeroes; every element still gets its terms in the order of the index.
                self.rows_cut = True
            if why is not None:
                raise CompileError(f"{asked}: cannot move the block loop {split.outer} "
                                   f"outward: {why}")
        self._check_split_reorders()

    def _check_split_reorders(self) -> None:
        """Refuse a reorder naming split loops that the loops lowering makes would not follow
        (``reorder(i0, j0, i1, j1)``: a split's inner loop stays where the loop over its index
        runs, and only its outer loop moves outward), rather than run another order silently."""
        plan = self.plan
        if not plan.reorders:
            return
        nest = max(self.program.nests, key=lambda n: len(n.loop_order))
        moved = moved_blocks(nest.loop_order, plan)
        loops: list[str] = []
        for depth, index in enumerate(nest.loop_order):
            loops += [plan.splits[i].outer for i, opens in moved.items() if opens == depth]
            split = plan.splits.get(index)
            if split is None:
                loops.append(index)
            elif split.outer in loops:
                loops.append(split.inner)
            else:
                loops += [split.outer, split.inner]
        inner = {split.index: split.inner for split in plan.splits.values()}
        for command in plan.reorders:
            wanted = [inner.get(name, name) for name in command.indices]
            held = [name for name in wanted if name in loops]
            if [name for name in loops if name in held] != held:
                raise CompileError(
                    f"{command}: the loops would run {', '.join(loops)}; a split's inner loop "
                    f"stays where the loop over its index runs, and only its outer loop moves "
                    f"outward (a cache block: split(k, f, k0, k1); reorder(k0, i, j, k1))")

    def _lift_at(self, nest: LoopNest, depth: int, context: Context) -> str | None:
        """The split index whose block loop opens at ``depth`` of ``nest``: the depth of the
        outermost loop it encloses, when that is above the loop over the index itself."""
        for index, opens in moved_blocks(nest.loop_order, self.plan).items():
            if opens == depth and index not in context.blocks:
                return index
        return None

    def block_loop(self, nest: LoopNest, writer: Writer, depth: int, expr: Expr,
                   context: Context, index: str) -> list[Stmt]:
        """``for (k0 = 0; k0 < ceil(n_k / f); k0++)`` around the loops from ``depth`` on; the
        loop over ``index`` inside runs the block ``[k0 * f, min(n_k, k0 * f + f))``."""
        split = self.plan.splits[index]
        block = Var(self.names(split.outer), I64)
        blocks = b.div(b.add(self.sizes[index], b.i64(split.factor - 1)), b.i64(split.factor))
        self.done_splits.add(index)
        inner = context.with_(blocks={**context.blocks, index: block})
        body = self.index_loop(nest, writer, depth, expr, inner)
        return [self.hinted(split.outer, b.for_(block, b.i64(0), blocks, body))]

    def _writer(self, nest: LoopNest, output: TensorInfo) -> Writer:
        target = self.program.tensor(nest.output.tensor)
        if target.role is TensorRole.TEMPORARY:
            return DenseWriter(self, nest, target, self.vals[target.name])
        if target.format.is_dense or nest.mode is OutputMode.PATTERN:
            if target.name not in self.vals:
                self.vals[target.name] = self._param(f"{target.name}_vals", Ptr(self.value_dtype),
                                                     f"{target.name}.vals", output=True)
            if nest.mode is OutputMode.PATTERN:
                pattern = next(a for a in accesses(nest.expr) if a.tensor == nest.pattern)
                return PatternWriter(self, nest, target, self.vals[target.name], pattern)
            return DenseWriter(self, nest, target, self.vals[target.name])
        return SparseWriter(self, nest, target)

    def lower_nest(self, nest: LoopNest, writer: Writer) -> list[Stmt]:
        root = Cursor(0, b.i64(0))
        cursors = {a: root for a in accesses(nest.expr)}
        context = Context({}, cursors)
        context, wrap = self.resolve_known(context, nest.expr)
        body = wrap(self.index_loop(nest, writer, 0, nest.expr, context))
        # The comment shows how the nest writes: "=" when every store to the output assigns.
        target = self.vals.get(nest.output.tensor)
        stores = [s for s in walk(b.block(body)) if isinstance(s, Store) and s.array == target]
        op = "=" if stores and not any(s.accumulate for s in stores) else "+="
        return [b.comment(f"{nest.output} {op} ... over {', '.join(nest.loop_order) or '()'}"),
                *body]

    # -- loops ----------------------------------------------------------------------------

    def index_loop(self, nest: LoopNest, writer: Writer, depth: int, expr: Expr,
                   context: Context) -> list[Stmt]:
        if is_zero(expr):
            return []
        lifted = self._lift_at(nest, depth, context) if self.plan.lifts else None
        if lifted is not None:
            return self.block_loop(nest, writer, depth, expr, context, lifted)
        if depth == writer.region_depth and not context.region_open:
            region = writer.region(context.with_(region_open=True),
                                   lambda c: self.index_loop(nest, writer, depth, expr, c))
            nonempty = self.row_may_hold(nest, writer, depth, expr, context)
            return region if nonempty is None else [b.if_(nonempty, region)]
        if depth == len(nest.loop_order):
            result = self.compute(expr, context)
            if context.accumulator is not None:
                return [b.assign(context.accumulator, b.add(context.accumulator, result))]
            return writer.leaf(result, context)
        index = nest.loop_order[depth]
        split = self.plan.position_split
        if split is not None and depth == 0 and index == split.outer:
            if isinstance(writer, SparseWriter):
                writer.visit_parents(index, every=False)
            return self.position_loop(nest, writer, expr, context)
        iterators = [self.make_iterator(a, context) for a in dict.fromkeys(accesses(expr))
                     if self.is_iterator(a, index, context)]
        lattice = build_lattice(index, expr, [it.access for it in iterators])
        if not lattice.points:
            return []
        if isinstance(writer, SparseWriter):
            # The body runs for every coordinate of a dense loop in which some case needs no
            # sparse operand to match (the case chain ends in an unconditional branch).
            writer.visit_parents(index, every=(lattice.dense or not iterators) and
                                 any(not point.iterators for point in lattice.points))
        reserve = self.reservation(writer, index, lattice, iterators)
        if reserve:
            context = context.with_(reserved=True)

        def body(point: LatticePoint, coordinate: Var, its: list[SparseIterator]) -> list[Stmt]:
            return self.case_body(nest, writer, depth, index, coordinate, point, its, context)

        block = context.blocks.get(index)
        if block is not None and iterators:
            split = self.plan.splits[index]
            raise CompileError(
                f"{split}: the block loop {split.outer} was moved outward, but the loop over "
                f"{index} runs through the stored entries of "
                f"{', '.join(sorted({it.access.tensor for it in iterators}))}; blocks of a "
                f"compressed level are not supported (block a dense index)")
        if not iterators:
            # A row zeroed inside a block loop would lose the blocks before it: the runtime
            # zeroes the output instead (the kernel then no longer assigns every element).
            fill = writer.row_fill if depth == 0 and isinstance(writer, DenseWriter) \
                and not context.blocks else None
            # each coordinate of an index of a dense output writes its own elements
            disjoint = type(writer) is DenseWriter and index in nest.output.indices and \
                self.program.tensor(nest.output.tensor).role is not TensorRole.TEMPORARY
            return [*reserve, *self.dense_loop(index, lattice, body, [], outer=depth == 0,
                                               fill=fill, block=block, disjoint=disjoint)]
        if lattice.dense:
            return [*reserve, *self.dense_loop(index, lattice, body, iterators)]
        if len(iterators) == 1:
            return [*reserve, *self.single_loop(index, lattice.points[0], body, iterators[0],
                                                outer=depth == 0)]
        return [*reserve, *self.merge_loops(index, lattice, body, iterators)]

    def reservation(self, writer: Writer, index: str, lattice: Lattice,
                    iterators: list[SparseIterator]) -> list[Stmt]:
        """Room for every entry the loop over ``index`` can append to a sparse output's last
        level, reserved once before the loop (empty when the loop does not append there).

        The loop runs at most once per coordinate of a dense level, and otherwise at most once
        per position of its sparse iterators, since every iteration advances one of them: a
        CSR add's row appends at most ``nnz(A row) + nnz(B row)`` entries. Knowing that here
        drops the capacity check from each append (scipy sizes its whole output the same way).
        """
        if not isinstance(writer, SparseWriter) or not writer.appends_last(index):
            return []
        bound: IRExpr
        if lattice.dense or not iterators:
            bound = self.sizes[index]
        else:
            bound = b.sub(iterators[0].end, iterators[0].begin)
            for it in iterators[1:]:
                bound = b.add(bound, b.sub(it.end, it.begin))
        return writer.reserve(bound)

    def case_body(self, nest: LoopNest, writer: Writer, depth: int, index: str,
                  coordinate: Var, point: LatticePoint, iterators: list[SparseIterator],
                  context: Context) -> list[Stmt]:
        cursors = dict(context.cursors)
        for it in iterators:
            if it.access in point.iterators:
                if it.unique:
                    cursors[it.access] = Cursor(it.level + 1, it.position)
                else:
                    cursors[it.access] = Cursor(it.level + 1, None, (it.position, it.segment_end))
        inner = context.with_(bound={**context.bound, index: coordinate}, cursors=cursors)
        inner, wrap = self.resolve_known(inner, point.expr)

        def rest(c: Context) -> list[Stmt]:
            return self.index_loop(nest, writer, depth + 1, point.expr, c)

        return wrap(writer.around_index(index, inner, rest))

    def dense_loop(self, index: str, lattice: Lattice, body, iterators: list[SparseIterator],
                   outer: bool = False,
                   fill: Callable[[str, Var, list[Stmt]], list[Stmt]] | None = None,
                   block: Var | None = None, disjoint: bool = False) -> list[Stmt]:
        """A counted loop over ``index``; ``fill(index, coordinate, body)`` is the body with
        the output's row zeroed first where it sums into it (``DenseWriter.row_fill``);
        ``block`` the enclosing block loop's counter when a block loop was moved outward
        (the loop then runs that block of ``index``); ``disjoint``: its iterations write
        distinct output elements (``ir.nodes.For``)."""
        coordinate = Var(self.names(index), I64)
        setup = self.iterator_positions(iterators)
        checks: list[Stmt] = []
        for it in iterators:
            it.coordinate = self.coordinate_of(it)
            it.matched = Var(self.names(f"match_{it.access.tensor}"), BOOL)
            checks.append(b.declare(it.matched, b.land(b.lt(it.position, it.end),
                                                       b.eq(it.coordinate, coordinate))))
            checks.extend(self.segment_end(it, guard=it.matched))
        start, stop = b.i64(0), self.sizes[index]
        # The range is made before the body, which may read it (a sparse output's reservation
        # projects from the rows of its own range).
        if outer and not iterators and self.allow_split and self.plan.may_split(index) and \
                why_not_parallel(self.program, index, self.plan.partials) is None:
            if self.parallel_index is None:
                self.parallel_index = index
                self.range = (self._param("range_begin", I64, RangeBound("begin", index)),
                              self._param("range_end", I64, RangeBound("end", index)))
            start, stop = self.range
            self.split_loops += 1
        cases = self.case_chain(lattice.points, body, coordinate, iterators)
        advance = [b.if_(it.matched, b.assign(it.position, self.next_position(it)))
                   for it in iterators]
        body = [*checks, *cases, *advance]
        if fill is not None:
            body = fill(index, coordinate, body)
        split = self.plan.splits.get(index)
        if block is not None and split is not None:
            first = b.mul(block, b.i64(split.factor))
            last = b.minimum(stop, b.add(first, b.i64(split.factor)))
            loop = replace(b.for_(coordinate, first, last, body), disjoint=disjoint)
            return [*setup, self.hinted(split.inner, loop)]
        if split is None:
            loop = replace(b.for_(coordinate, start, stop, body), disjoint=disjoint)
            return [*setup, self.hinted(index, loop)]
        self.done_splits.add(index)
        return [*setup, *self.split_loop(coordinate, start, stop, body, split.factor,
                                         (split.outer, split.inner))]

    def _position_range(self, index: str, it: SparseIterator) -> bool:
        """Whether the outer loop over ``index``, which runs over the stored positions of the
        first level of ``it``'s tensor alone, may take a thread range of those positions (an
        order-3 CSF tensor's fibres for TTV or MTTKRP): each position is one coordinate of
        ``index``, so ranges of positions own disjoint coordinates, as ranges of a dense loop
        do. Only where the output is dense or assembled from its first level down (DCSR,
        whose pieces join without row bounds, ``runtime/stitch.py``), from one loop nest."""
        output = self.program.output.format
        # Entries read in any order may meet a row in several ranges: partial outputs only.
        unordered = self.program.tensor(it.access.tensor).unordered
        return (it.level == 0 and self.plan.position_ranges and self.allow_split
                and self.plan.may_split(index) and self.plan.partials == unordered
                and len(self.program.nests) == 1
                and self.program.pattern in (None, it.access.tensor)
                and (output.is_dense or output.levels[0].is_sparse)
                and self.parallel_index is None
                and why_not_parallel(self.program, index, self.plan.partials) is None)

    def position_loop(self, nest: LoopNest, writer: Writer, expr: Expr, context: Context
                      ) -> list[Stmt]:
        """The loops ``fuse(i, j, f); pos(f, p, A)`` ask for: ``p`` runs over the stored
        positions of A's level of ``j``, in chunks (a split of ``p``, or a thread range); each
        chunk finds the rows its positions fall in by binary search and runs the nest's row
        loop over those rows, with A's row segments clamped to the chunk. A row that two
        chunks share is summed by both: every store adds (``rows_cut``)."""
        split = self.plan.position_split
        assert split is not None
        access = self._position_access(nest, expr, context)
        self.rows_cut = True
        rows = self.sizes[split.outer]
        pos = self.arrays[access.tensor][1].pos
        assert pos is not None
        stmts: list[Stmt] = []
        if self.plan.parallel_index == split.position:
            self.parallel_index = split.position
            self.range = (self._param("range_begin", I64, RangeBound("begin", split.position)),
                          self._param("range_end", I64, RangeBound("end", split.position)))
            begin, end = self.range
            self.split_loops += 1
        else:                   # one range: every stored position
            total = Var(self.names(f"{split.position}_count"), I64)
            stmts.append(b.declare(total, b.cast(b.load(pos, rows), I64)))
            begin, end = b.i64(0), total
        first, last = Var(self.names(f"{split.position}_begin"), I64), \
            Var(self.names(f"{split.position}_end"), I64)

        def chunk() -> list[Stmt]:
            lo, hi = Var(self.names(f"{split.outer}_first"), I64), \
                Var(self.names(f"{split.outer}_stop"), I64)
            coordinate = Var(self.names(split.outer), I64)
            lattice = build_lattice(split.outer, expr, [])

            def body(point: LatticePoint, c: Var, its: list[SparseIterator]) -> list[Stmt]:
                return self.case_body(nest, writer, 0, split.outer, c, point, its, context)

            self.clamps[(access, 1)] = (first, last)
            rows_loop = b.for_(coordinate, lo, hi,
                               *self.case_chain(lattice.points, body, coordinate, []))
            del self.clamps[(access, 1)]
            return [b.if_(b.lt(first, last), [
                *_first_row_after(self.names, lo, pos, rows, first),
                *_first_row_after(self.names, hi, pos, rows, b.sub(last, 1)),
                b.assign(hi, b.add(hi, 1)),
                rows_loop])]

        cut = self.plan.splits.get(split.position)
        if cut is None:
            stmts += [b.declare(first, begin), b.declare(last, end), *chunk()]
            return stmts
        self.done_splits.add(split.position)
        block = Var(self.names(cut.outer), I64)
        start = b.mul(block, b.i64(cut.factor))
        loop = b.for_(block, b.div(begin, b.i64(cut.factor)),
                      b.div(b.add(end, b.i64(cut.factor - 1)), b.i64(cut.factor)),
                      b.declare(first, b.maximum(start, begin)),
                      b.declare(last, b.minimum(b.add(start, b.i64(cut.factor)), end)),
                      *chunk())
        return [*stmts, loop]

    def _position_access(self, nest: LoopNest, expr: Expr, context: Context) -> Access:
        """The access whose positions a position split runs over, checked: read as stored
        dense over the outer index, then compressed over the inner one."""
        split = self.plan.position_split
        assert split is not None
        command = f"pos({split.fused}, {split.position}, {split.tensor})"
        if len(self.program.nests) != 1:
            raise CompileError(f"{command}: the statement runs {len(self.program.nests)} loop "
                               f"nests (temporaries or a sum of terms); a position split needs "
                               f"one")
        if nest.loop_order[:2] != (split.outer, split.inner):
            raise CompileError(f"{command}: the loops run {', '.join(nest.loop_order)}, not "
                               f"{split.outer}, {split.inner} outermost")
        if not self.program.output.format.is_dense:
            raise CompileError(f"{command}: the output is stored {self.program.output.format}; "
                               f"a position split writes dense outputs only")
        found = [a for a in dict.fromkeys(accesses(expr)) if a.tensor == split.tensor]
        if len(found) != 1:
            raise CompileError(f"{command}: {nest.output} = ... reads {split.tensor} "
                               f"{len(found)} times; a position split needs it once")
        access = found[0]
        fmt = self.program.tensor(access.tensor).format
        stored = [access.indices[mode] for mode in fmt.order]
        if fmt.rank < 2 or stored[:2] != [split.outer, split.inner] or \
                fmt.levels[0] is not LevelKind.DENSE or fmt.levels[1] is not LevelKind.COMPRESSED:
            raise CompileError(f"{command}: {access} is stored as {fmt}; its first two levels "
                               f"must be dense over {split.outer}, then compressed over "
                               f"{split.inner} (CSR, or CSC for a fuse of columns and rows)")
        others = [a for a in dict.fromkeys(accesses(expr))
                  if a != access and self.is_iterator(a, split.outer, context)]
        if others:
            raise CompileError(f"{command}: {others[0]} is also sparse over {split.outer}")
        return access

    def hinted(self, index: str, loop: For) -> For:
        """``loop`` with the unroll and vectorize hints a schedule gives ``index``, or the
        compiler's own for a fibre's loop (``scheduling.fibre_vector_hint``)."""
        if index in self.plan.adaptive:
            chosen = row_choice(self.program, self.plan)
            if chosen is not None and chosen[1] == index:
                return loop     # another nest's loop over ``index`` runs the CSR row
            raise CompileError(f"vectorize({index}, {self.plan.vectorize[index]}, "
                               f"tail=adaptive): the loop over {index} does not run over a "
                               f"CSR row (the compressed second level of a matrix whose first "
                               f"level is dense over the enclosing loop); use tail=mask or "
                               f"tail=remainder")
        unroll, vectorize = self.plan.unroll.get(index, 0), self.plan.vectorize.get(index, 0)
        if not unroll and not vectorize:
            chosen = fibre_vector_hint(self.program, index, self.plan)
            if chosen is None:
                return loop
            return replace(loop, vectorize=chosen.width, masked=True)
        self.done_hints.add(index)
        return replace(loop, unroll=unroll, vectorize=vectorize,
                       masked=bool(vectorize) and index in self.plan.masked)

    def adaptive_row(self, index: str, it: SparseIterator) -> bool:
        """Whether the loop over ``index`` through ``it`` runs a CSR row with the adaptive tail
        (the schedule's ``tail=adaptive``, or the compiler's own ``row_vector_hint``)."""
        return it.level == 1 and row_choice(self.program, self.plan) == (it.access.tensor, index)

    def split_loop(self, coordinate: Var, start: IRExpr, stop: IRExpr, body: list[Stmt],
                   factor: int, names: tuple[str, str]) -> list[Stmt]:
        """``for (c = start; c < stop; c++) body`` strip-mined into blocks of ``factor``, the
        last block guarded (a schedule's ``split`` with the guard tail). ``start`` is 0 or a
        thread range's begin, which the runtime puts on a multiple of ``factor``."""
        outer, inner = Var(self.names(names[0]), I64), Var(self.names(names[1]), I64)
        blocks_from = b.div(start, b.i64(factor))
        blocks_to = b.div(b.add(stop, b.i64(factor - 1)), b.i64(factor))
        position = b.add(b.mul(outer, b.i64(factor)), inner)
        inner_loop = self.hinted(names[1], b.for_(inner, 0, factor,
                                                  b.declare(coordinate, position),
                                                  b.if_(b.lt(coordinate, stop), body)))
        return [self.hinted(names[0], b.for_(outer, blocks_from, blocks_to, inner_loop))]

    def single_loop(self, index: str, point: LatticePoint, body, it: SparseIterator,
                    outer: bool = False) -> list[Stmt]:
        if it.unique:
            position = Var(self.names(f"p{it.access.tensor}{it.level}"), I64)
            it.position = position
            coordinate = Var(self.names(index), I64)
            start, stop = it.begin, it.end
            if outer and self._position_range(index, it):
                self.parallel_index = index
                over = it.access.tensor
                begin = self._param("range_begin", I64, RangeBound("begin", index, over))
                end = self._param("range_end", I64, RangeBound("end", index, over))
                self.range = (begin, end)
                start, stop = b.maximum(start, begin), b.minimum(stop, end)
                self.split_loops += 1
            loop = b.for_(position, start, stop, b.declare(coordinate, self.coordinate_of(it)),
                          body(point, coordinate, [it]))
            if not outer and self.adaptive_row(index, it):
                # This kernel runs the loop as the backend vectorizes it, with a scalar
                # remainder; its variants with the tail masked or the loop unrolled are other
                # kernels, which the runtime picks per call by the matrix's rows
                # (KernelCache.row_variant, runtime/rows.py).
                self.done_hints.add(index)
                return [replace(loop, unroll=self.plan.unroll.get(index, 0))]
            return [self.hinted(index, loop)]
        setup = self.iterator_positions([it])
        coordinate = Var(self.names(index), I64)
        it.coordinate = coordinate
        loop = b.while_(b.lt(it.position, it.end),
                        b.declare(coordinate, self.coordinate_of(it)),
                        self.segment_end(it),
                        body(point, coordinate, [it]),
                        b.assign(it.position, it.segment_end))
        return [*setup, loop]

    def merge_loops(self, index: str, lattice: Lattice, body, iterators: list[SparseIterator]
                    ) -> list[Stmt]:
        stmts = self.iterator_positions(iterators)
        by_access = {it.access: it for it in iterators}
        for point in lattice.points:
            its = [by_access[a] for a in point.iterators]
            if len(its) == 1:
                stmts.append(self.tail_loop(index, point, body, its[0]))
                continue
            coordinate = Var(self.names(index), I64)
            loop_body: list[Stmt] = []
            for it in its:
                it.coordinate = Var(self.names(f"{index}_{it.access.tensor}"), I64)
                loop_body.append(b.declare(it.coordinate, self.coordinate_of(it)))
            smallest: IRExpr = its[0].coordinate
            for it in its[1:]:
                smallest = b.minimum(smallest, it.coordinate)
            loop_body.append(b.declare(coordinate, smallest))
            for it in its:
                it.matched = Var(self.names(f"match_{it.access.tensor}"), BOOL)
                loop_body.append(b.declare(it.matched, b.eq(it.coordinate, coordinate)))
                loop_body.extend(self.segment_end(it, guard=it.matched))
            subpoints = [p for p in lattice.points if set(p.iterators) <= set(point.iterators)]
            # When some point of the chain stands for every set of iterators that can match (a
            # union: A + B has {A, B}, {A} and {B}), the branch taken knows which matched, and
            # each advances its own. Separate ``if (match) p++`` statements would be turned into
            # branch-free adds, and then the next coordinate's load waits on the comparison: a
            # CSR add whose rows mostly match ran 1.7x slower than with the branches.
            covered = {frozenset(p.iterators) for p in subpoints}
            every_set = all(frozenset(c) in covered for r in range(1, len(its) + 1)
                            for c in combinations([it.access for it in its], r))
            loop_body.extend(self.case_chain(subpoints, body, coordinate, its,
                                             advance=every_set))
            if not every_set:
                loop_body.extend(b.if_(it.matched, b.assign(it.position, self.next_position(it)))
                                 for it in its)
            valid: IRExpr = b.lt(its[0].position, its[0].end)
            for it in its[1:]:
                valid = b.land(valid, b.lt(it.position, it.end))
            stmts.append(b.while_(valid, loop_body))
        return stmts

    def tail_loop(self, index: str, point: LatticePoint, body, it: SparseIterator) -> Stmt:
        """The rest of one iterator after a merge: every remaining position matches."""
        coordinate = Var(self.names(index), I64)
        return b.while_(b.lt(it.position, it.end),
                        b.declare(coordinate, self.coordinate_of(it)),
                        self.segment_end(it),
                        body(point, coordinate, [it]),
                        b.assign(it.position, self.next_position(it)))

    def case_chain(self, points, body, coordinate: Var, iterators: list[SparseIterator],
                   advance: bool = False) -> list[Stmt]:
        """An if/else-if chain over lattice points, most operands first.

        The first point all of whose iterators matched is exactly the set that matched, since
        adding operands never turns a non-zero expression into zero. With ``advance`` (the
        points stand for every set that can match) each branch also moves its point's
        iterators to their next position.
        """
        chain: list[Stmt] = []
        for point in reversed(points):
            stmts = body(point, coordinate, iterators)
            if advance:
                stmts = [*stmts, *(b.assign(it.position, self.next_position(it))
                                   for it in iterators if it.access in point.iterators)]
            present = [it.matched for it in iterators if it.access in point.iterators]
            if not present:
                chain = stmts
                continue
            condition: IRExpr = present[0]
            for flag in present[1:]:
                condition = b.land(condition, flag)
            chain = [b.if_(condition, stmts, chain)]
        return chain

    # -- iterators ------------------------------------------------------------------------

    def row_may_hold(self, nest: LoopNest, writer: Writer, depth: int, expr: Expr,
                     context: Context) -> IRExpr | None:
        """For a workspace row (a sparse product's, SpGEMM's row ``i``): the condition that
        some sparse iterator of the loop at ``depth`` has entries, when every case of that
        loop needs one (no dense case); None otherwise. A row that fails it has no entries,
        so its whole region (the workspace's resets, the loops, the flush) is skipped: the
        row loop of a 10^6-row SpGEMM over empty rows ran 1.85 -> 1.18 ms (a hand-edited C
        kernel, 2026-12-06), where the region's many live values kept the row index spilled."""
        if not isinstance(writer, SparseWriter) or nest.mode is not OutputMode.WORKSPACE or \
                depth >= len(nest.loop_order) or is_zero(expr):
            return None
        index = nest.loop_order[depth]
        iterators = [self.make_iterator(a, context) for a in dict.fromkeys(accesses(expr))
                     if self.is_iterator(a, index, context)]
        if not iterators:
            return None
        lattice = build_lattice(index, expr, [it.access for it in iterators])
        if lattice.dense or not lattice.points or \
                not all(point.iterators for point in lattice.points):
            return None
        tests = [b.lt(it.begin, it.end) for it in iterators]
        condition = tests[0]
        for test in tests[1:]:
            condition = b.lor(condition, test)
        return condition

    def is_iterator(self, access: Access, index: str, context: Context) -> bool:
        info = self.program.tensor(access.tensor)
        cursor = context.cursors[access]
        if cursor.resolved >= info.rank:
            return False
        level_index = access.indices[info.format.order[cursor.resolved]]
        return level_index == index and info.format.levels[cursor.resolved].is_sparse

    def make_iterator(self, access: Access, context: Context) -> SparseIterator:
        info = self.program.tensor(access.tensor)
        cursor = context.cursors[access]
        level = cursor.resolved
        kind = info.format.levels[level]
        arrays = self.arrays[access.tensor][level]
        if kind is LevelKind.SINGLETON:
            parent = cursor.segment or (cursor.position, b.add(cursor.position, 1))
            begin, end = singleton.child_range(arrays, parent)
        else:
            begin, end = compressed.child_range(arrays, cursor.position)
        clamp = self.clamps.get((access, level))
        if clamp is not None:
            begin, end = b.maximum(begin, clamp[0]), b.minimum(end, clamp[1])
        # Entries read in any order (lower/unordered.py) need no runs of equal coordinates:
        # each entry is its own, and its stores add.
        return SparseIterator(access, level, arrays, info.format.unique(level) or info.unordered,
                              begin, end)

    def iterator_positions(self, iterators: list[SparseIterator]) -> list[Stmt]:
        stmts: list[Stmt] = []
        for it in iterators:
            it.position = Var(self.names(f"p{it.access.tensor}{it.level}"), I64)
            end = Var(self.names(f"p{it.access.tensor}{it.level}_end"), I64)
            stmts += [b.declare(it.position, it.begin), b.declare(end, it.end)]
            it.end = end
        return stmts

    def coordinate_of(self, it: SparseIterator) -> IRExpr:
        return compressed.coordinate(it.arrays, it.position)

    def segment_end(self, it: SparseIterator, guard: Var | None = None) -> list[Stmt]:
        """For a non-unique level: the end of the run of positions sharing a coordinate."""
        if it.unique:
            return []
        it.segment_end = Var(self.names(f"p{it.access.tensor}{it.level}_seg"), I64)
        scan = b.while_(b.land(b.lt(it.segment_end, it.end),
                               b.eq(compressed.coordinate(it.arrays, it.segment_end),
                                    compressed.coordinate(it.arrays, it.position))),
                        b.assign(it.segment_end, b.add(it.segment_end, 1)))
        start = [b.declare(it.segment_end, b.add(it.position, 1))]
        return start + ([b.if_(guard, scan)] if guard is not None else [scan])

    def next_position(self, it: SparseIterator) -> IRExpr:
        return b.add(it.position, 1) if it.unique else it.segment_end

    # -- locating known coordinates -------------------------------------------------------

    def resolve_known(self, context: Context, expr: Expr
                      ) -> tuple[Context, Callable[[list[Stmt]], list[Stmt]]]:
        """Descend every access through levels whose index is already bound.

        Dense levels are located; a sparse level whose index is already bound (only in a
        diagonal's own nest, ``t(i) = A(i,i)``) is scanned for the coordinate.
        """
        cursors = dict(context.cursors)
        wrappers: list[Callable[[list[Stmt]], list[Stmt]]] = []
        for access in dict.fromkeys(accesses(expr)):
            info = self.program.tensor(access.tensor)
            cursor = cursors[access]
            while cursor.resolved < info.rank:
                level = cursor.resolved
                index = access.indices[info.format.order[level]]
                if index not in context.bound:
                    break
                coordinate = context.bound[index]
                kind = info.format.levels[level]
                arrays = self.arrays[access.tensor][level]
                if kind is LevelKind.DENSE:
                    if cursor.position is None:
                        raise CompileError(f"internal: dense level under a segment in {access}")
                    cursor = Cursor(level + 1, dense.locate(cursor.position, arrays.size,
                                                            coordinate))
                    continue
                cursor, wrap = self._scan_for(access, level, cursor, coordinate)
                wrappers.append(wrap)
            cursors[access] = cursor

        def wrap_all(stmts: list[Stmt]) -> list[Stmt]:
            for wrap in reversed(wrappers):
                stmts = wrap(stmts)
            return stmts

        return context.with_(cursors=cursors), wrap_all

    def _scan_for(self, access: Access, level: int, cursor: Cursor, coordinate: Var):
        info = self.program.tensor(access.tensor)
        if len(set(accesses_of_program(self.program, access))) > 1:
            raise CompileError(f"internal: {access} needs a coordinate search outside a diagonal")
        arrays = self.arrays[access.tensor][level]
        if info.format.levels[level] is LevelKind.SINGLETON:
            begin, end = cursor.segment or (cursor.position, b.add(cursor.position, 1))
        else:
            begin, end = compressed.child_range(arrays, cursor.position)
        position = Var(self.names(f"p{access.tensor}{level}"), I64)
        found = Cursor(level + 1, position)

        def wrap(stmts: list[Stmt]) -> list[Stmt]:
            return [b.for_(position, begin, end,
                           b.if_(b.eq(compressed.coordinate(arrays, position), coordinate),
                                 stmts))]

        return found, wrap

    # -- values ---------------------------------------------------------------------------

    def compute(self, expr: Expr, context: Context) -> IRExpr:
        def load(access: Access) -> IRExpr:
            cursor = context.cursors[access]
            info = self.program.tensor(access.tensor)
            if cursor.resolved != info.rank or cursor.position is None:
                raise CompileError(f"internal: {access} is not fully located at the innermost "
                                   f"loop (resolved {cursor.resolved} of {info.rank} levels)")
            return b.load(self.vals[access.tensor], cursor.position)

        return values.value(expr, self.value_dtype, load)


def _first_row_after(names: Namer, row: Var, pos: Var, rows: IRExpr, position: IRExpr
                     ) -> list[Stmt]:
    """``row`` = the first r in [0, rows) with pos[r + 1] > position (the row that holds
    ``position``, past any empty rows before it), by binary search."""
    high, middle = Var(names(f"{row.name}_hi"), I64), Var(names(f"{row.name}_mid"), I64)
    return [b.declare(row, 0), b.declare(high, rows),
            b.while_(b.lt(row, high),
                     b.declare(middle, b.shr(b.add(row, high), 1)),
                     b.if_(b.le(b.cast(b.load(pos, b.add(middle, 1)), I64), position),
                           b.assign(row, b.add(middle, 1)),
                           b.assign(high, middle)))]


def splittable(program: Program, index: str) -> bool:
    """Whether disjoint ranges of the outer loop over ``index`` may run at the same time.

    Each nest must run ``index`` outermost and address its output by it, and the final output
    must be dense: each range then writes its own output positions. A temporary may take part
    when ``index`` is its first mode and every nest reads and writes it at ``index``: a range
    then fills and reads only its own rows (each call allocates its own temporary).

    >>> import numpy as np
    >>> from tensoralg.formats import CSR, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation import parse_statement
    >>> stmt = parse_statement("y(i) = max(sum(j, A(i,j) * x(j)), 0)")
    >>> program = concretize(stmt, {"A": CSR, "x": dense(1)}, {"A": np.dtype(np.int32)},
    ...                      np.dtype(np.float64), None)
    >>> splittable(program, "i"), splittable(program, "j")
    (True, False)
    """
    return why_not_parallel(program, index, partials=False) is None


def accesses_of_program(program: Program, access: Access) -> list[Access]:
    """Accesses of the nest holding ``access``: a diagonal nest holds exactly one."""
    for nest in program.nests:
        found = accesses(nest.expr)
        if access in found:
            return found
    return [access]


def lower(program: Program, name: str = "kernel", plan: LoopPlan | None = None) -> Function:
    """Lower a program to an ``ir.Function`` whose params describe the kernel's ABI.

    >>> import numpy as np
    >>> from tensoralg.formats import CSR, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation import parse_statement
    >>> program = concretize(parse_statement("y(i) = A(i,j) * x(j)"), {"A": CSR, "x": dense(1)},
    ...                      {"A": np.dtype(np.int32)}, np.dtype(np.float64), None)
    >>> [p.role for p in lower(program).params][:4]
    ['index.i', 'index.j', 'A.1.pos', 'A.1.crd']
    """
    return Lowerer(program, name, plan or LoopPlan()).lower()
