"""What lowering reads from a schedule: one ``LoopPlan`` per kernel, made before any loop.

``loop_plan`` checks the commands that lowering can carry out on the CPU and refuses the rest
with an error that names the command; lowering then asks the plan at each loop (split this
index? may this loop take the thread range? which backend hints?). Legality against the operands
(a reorder against a compressed operand's storage order, a parallel loop that would write shared
output elements) is decided where the facts are: ``concretize`` (loop orders) and the lowerer
(which loop holds the range), through ``why_not_parallel`` below.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable

from tensoralg.errors import CompileError, UnsupportedError
from tensoralg.formats.level import LevelKind
from tensoralg.ir.nodes import For, Function
from tensoralg.ir.passes.pipeline import DEFAULT_OPTIONS, PassOptions
from tensoralg.ir.rewrite import walk
from tensoralg.lower.program import OutputMode, Program, TensorRole
from tensoralg.notation.ast import Access, Add, Call, Div, Expr, Literal, Mul, Neg, Sub, accesses
from tensoralg.notation.printer import format_expr
from tensoralg.schedule import (
    Fuse,
    Gemm,
    Jam,
    Parallelize,
    Pos,
    Precompute,
    Reduction,
    Relayout,
    Reorder,
    Schedule,
    Serial,
    Split,
    Tile,
    TransposeTiles,
    Unit,
    Unroll,
    Vectorize,
    VectorTail,
    Workspaces,
)


@dataclass(frozen=True, slots=True)
class PositionSplit:
    """``fuse(outer, inner, fused); pos(fused, position, tensor)``: the two outer loops run as
    one loop over the stored positions of ``tensor``'s level of ``inner`` (its children of every
    ``outer`` coordinate), so that a split or thread range divides nonzeros evenly however the
    rows are skewed. A row cut by a range boundary is summed by both ranges."""

    outer: str
    inner: str
    fused: str
    position: str
    tensor: str


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """The loop-level decisions of a schedule, by index name."""

    orders: tuple[tuple[str, ...], ...] = ()         # reorder constraints (relative orders)
    splits: dict[str, Split] = field(default_factory=dict)   # by the index they split
    parallel: Parallelize | None = None               # None: the compiler decides
    serial: bool = False
    unroll: dict[str, int] = field(default_factory=dict)
    vectorize: dict[str, int] = field(default_factory=dict)
    position_split: PositionSplit | None = None
    precomputes: tuple[Precompute, ...] = ()          # carried out by concretize, in order
    gpu: Parallelize | None = None                    # a GPU unit: picks the CUDA mapping
    # The kernel zeroes the rows of its dense output itself (``DenseWriter.row_fill``): on the
    # CPU backends; the CUDA mappings take the plain accumulation into a zeroed buffer.
    zero_rows: bool = True
    # An outer loop over a compressed top level may take a thread range of its positions: on
    # the CPU backends (the CUDA mappings read a kernel's range as rows).
    position_ranges: bool = True
    masked: frozenset[str] = frozenset()              # vectorized with a masked tail
    # vectorized with a masked tail or a scalar remainder, as each call's rows decide
    adaptive: frozenset[str] = frozenset()
    # The backend takes vector hints (LLVM): the compiler adds its own (a CSR row's loop).
    vector_hints: bool = True
    # Splits whose outer loop a reorder moves outward (cache blocks): the split index, and
    # the indices whose loops its block loop encloses (``split(k, 8, k0, k1); reorder(k0, i,
    # j, k1)``: ``{"k": ("i", "j")}``). The loop over k then runs one block of k per
    # iteration of the block loop.
    lifts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    lifted_by: dict[str, str] = field(default_factory=dict)   # the commands, for errors
    # The reorder commands as given (split loops named), checked against the loops lowering
    # makes: only a split's outer loop moves; its inner loop stays where the index's loop runs.
    reorders: tuple[Reorder, ...] = ()
    relayouts: tuple[Relayout, ...] = ()              # operands read from converted copies

    @property
    def parallel_index(self) -> str | None:
        """The original index whose loop takes the thread range (the split index when the
        command names a split's outer index)."""
        if self.parallel is None:
            return None
        for split in self.splits.values():
            if self.parallel.index in (split.outer, split.index):
                return split.index
        return self.parallel.index

    @property
    def partials(self) -> bool:
        return self.parallel is not None and self.parallel.reduction is Reduction.PARTIALS

    def range_step(self, index: str | None) -> int:
        """Thread ranges over ``index`` must start at multiples of this (a split's block size:
        two ranges must never share a block)."""
        return self.splits[index].factor if index in self.splits else 1

    def may_split(self, index: str) -> bool:
        """Whether the outer loop over ``index`` may take the thread range."""
        if self.serial:
            return False
        wanted = self.parallel_index
        return wanted is None or wanted == index


def loop_plan(schedule: Schedule | None, backend: str = "llvm") -> LoopPlan:
    """The plan of ``schedule`` for a CPU backend; commands lowering cannot do are refused.

    >>> plan = loop_plan(Schedule().split("i", 8).parallelize("i0"))
    >>> plan.parallel_index, plan.range_step("i")
    ('i', 8)
    """
    if schedule is None:
        return LoopPlan(zero_rows=backend != "cuda", position_ranges=backend != "cuda",
                        vector_hints=backend == "llvm")
    splits: dict[str, Split] = {}
    unroll: dict[str, int] = {}
    vectorize: dict[str, int] = {}
    masked: set[str] = set()
    adaptive: set[str] = set()
    fuses: dict[str, Fuse] = {}
    position_split: PositionSplit | None = None
    precomputes: list[Precompute] = []
    parallel, serial, gpu = None, False, None
    for command in schedule:
        match command:
            case Parallelize() if command.unit is not Unit.CPU_THREADS:
                gpu = _check_gpu_parallel(command, backend)
            case Fuse():
                fuses[command.fused] = command
            case Pos():
                position_split = _position_split(command, fuses, position_split)
            case Split() if command.index in fuses:
                raise UnsupportedError(f"{command}: a fused loop is split by position: "
                                       f"pos({command.index}, p, <tensor>); split(p, ...)")
            case Split():
                if command.index in {s.outer for s in splits.values()} | \
                        {s.inner for s in splits.values()}:
                    raise UnsupportedError(f"{command}: splitting a loop made by another split "
                                           f"is not supported yet; split the original index once")
                splits[command.index] = command
            case Parallelize():
                parallel, serial = command, False
                _check_parallel(command, splits, backend)
            case Serial():
                parallel, serial = None, True
            case Unroll(index, factor):
                unroll[index] = factor
            case Vectorize(index, width, tail):
                vectorize[index] = width
                masked.discard(index)
                adaptive.discard(index)
                if tail is VectorTail.MASK:
                    masked.add(index)
                elif tail is VectorTail.ADAPTIVE:
                    adaptive.add(index)
            case Precompute():
                precomputes.append(_check_precompute(command, precomputes))
    unused = [f for name, f in fuses.items()
              if position_split is None or position_split.fused != name]
    if unused:
        raise UnsupportedError(f"{unused[0]}: lowering carries out fuse only as the first step "
                               f"of a position split (fuse(i, j, f); pos(f, fp, A)); a fuse of "
                               f"two counted loops is not supported yet")
    orders, lifts = _split_orders(tuple(c for c in schedule if isinstance(c, Reorder)), splits)
    if position_split is not None:
        orders += ((position_split.outer, position_split.inner),)
        _check_position_commands(position_split, splits, parallel)
        if lifts:
            raise UnsupportedError(f"{_lifting(schedule, lifts)}: a block loop moved outward "
                                   f"together with a position split is not supported yet")
    if lifts and backend == "cuda":
        raise UnsupportedError(f"{_lifting(schedule, lifts)}: block loops moved outward run "
                               f"on the CPU backends only (llvm, c)")
    if lifts and parallel is not None and parallel.index in \
            {splits[index].outer for index in lifts}:
        raise UnsupportedError(f"{parallel}: the block loop {parallel.index} was moved "
                               f"outward; threads take the outermost loop of the nest "
                               f"(parallelize one of the loops the blocks enclose)")
    return LoopPlan(orders, splits, parallel, serial, unroll, vectorize, position_split,
                    tuple(precomputes), gpu, zero_rows=backend != "cuda",
                    position_ranges=backend != "cuda", masked=frozenset(masked),
                    adaptive=frozenset(adaptive), vector_hints=backend == "llvm", lifts=lifts,
                    lifted_by={index: _lifting(schedule, [index]) for index in lifts},
                    reorders=tuple(c for c in schedule if isinstance(c, Reorder) and
                                   any(s.outer in c.indices or s.inner in c.indices
                                       for s in splits.values())),
                    relayouts=tuple({c.tensor: c for c in schedule.find(Relayout)}.values()))


def _split_orders(reorders: tuple[Reorder, ...], splits: dict[str, Split]
                  ) -> tuple[tuple[tuple[str, ...], ...], dict[str, tuple[str, ...]]]:
    """The relative orders of the statement's own loops that ``reorders`` ask for, and the
    splits whose block loop they move outward.

    A reorder may name a split's two loops (``split(k, 8, k0, k1)``): its inner loop ``k1``
    stands for the loop over ``k`` (which runs one block), and its outer loop ``k0``, listed
    before loops of other indices, asks for the blocks to enclose them: a cache block (strip-mine
    and interchange, as TACO's and Halide's split and reorder do).

    >>> orders, lifts = _split_orders((Reorder(("k0", "i", "j", "k1")),),
    ...                               {"k": Split("k", 8, "k0", "k1")})
    >>> orders, lifts
    ((('i', 'j', 'k'),), {'k': ('i', 'j')})
    """
    outer = {split.outer: split for split in splits.values()}
    inner = {split.inner: split.index for split in splits.values()}
    orders: list[tuple[str, ...]] = []
    lifts: dict[str, tuple[str, ...]] = {}
    for command in reorders:
        names = command.indices
        for name in names:
            split = outer.get(name)
            if split is None:
                continue
            after = names[names.index(name) + 1:]
            if split.inner in names[:names.index(name)] or \
                    split.index in names[:names.index(name)]:
                raise CompileError(f"{command}: {split.inner} runs inside the block loop "
                                   f"{name} ({split}); list {name} before it")
            enclosed = tuple(dict.fromkeys(inner.get(a, a) for a in after
                                           if a not in outer and inner.get(a, a) != split.index))
            if enclosed:
                lifts[split.index] = enclosed
        mapped = tuple(dict.fromkeys(inner.get(a, a) for a in names if a not in outer))
        orders.append(mapped)
    return tuple(orders), lifts


def moved_blocks(order: tuple[str, ...], plan: LoopPlan) -> dict[str, int]:
    """The splits whose block loop a reorder moves outward in a nest that runs ``order``, by
    index, with the depth at which each block loop opens: above the outermost loop it must
    enclose, when that is above the loop over the index itself (otherwise the reorder leaves
    the blocks where a plain split puts them).

    >>> plan = loop_plan(Schedule().split("k", 8).reorder("k0", "i", "j", "k1"))
    >>> moved_blocks(("i", "j", "k"), plan), moved_blocks(("k", "i", "j"), plan)
    ({'k': 0}, {})
    """
    moved = {}
    for index, enclosed in plan.lifts.items():
        inside = [order.index(x) for x in enclosed if x in order]
        if index in order and inside and min(inside) < order.index(index):
            moved[index] = min(inside)
    return moved


def _lifting(schedule: Schedule, indices: Iterable[str]) -> str:
    """The commands that moved the block loops of ``indices`` outward, as text for an
    error."""
    lifts = set(indices)
    cuts = [c for c in schedule if isinstance(c, Split) and c.index in lifts]
    outer = {c.outer for c in cuts}
    moves = [c for c in schedule if isinstance(c, Reorder) and outer & set(c.indices)]
    return "; ".join(str(c) for c in (*cuts, *moves))


WORKSPACE_FORMATS = ("dense",)     # the workspace formats lowering carries out


def _check_precompute(command: Precompute, earlier: list[Precompute]) -> Precompute:
    if command.format not in WORKSPACE_FORMATS:
        raise CompileError(f"{command}: a workspace stored as {command.format!r} is not "
                           f"supported; use format=dense (a dense row or temporary)")
    if any(other.workspace == command.workspace for other in earlier):
        raise CompileError(f"{command}: another precompute already names its workspace "
                           f"{command.workspace}; give each its own name (workspace=...)")
    return command


def _position_split(command: Pos, fuses: dict[str, Fuse], earlier: PositionSplit | None
                    ) -> PositionSplit:
    fuse = fuses.get(command.index)
    if fuse is None:
        raise UnsupportedError(f"{command}: pos takes a fused index (fuse(i, j, {command.index}) "
                               f"first); iterating one compressed level by position is what "
                               f"its loop already does")
    if not command.tensor:
        raise UnsupportedError(f"{command}: name the tensor whose stored positions the loop "
                               f"runs over: pos({command.index}, {command.position}, A)")
    if earlier is not None:
        raise UnsupportedError(f"{command}: one position split per statement")
    return PositionSplit(fuse.outer, fuse.inner, fuse.fused, command.position, command.tensor)


def _check_position_commands(split: PositionSplit, splits: dict[str, Split],
                             parallel: Parallelize | None) -> None:
    for index in (split.outer, split.inner):
        if index in splits:
            raise UnsupportedError(f"{splits[index]}: {index} runs inside the position loop "
                                   f"{split.position}; split {split.position} instead")
    if parallel is None:
        return
    cut = splits.get(split.position)
    allowed = {split.position} | ({cut.outer} if cut else set())
    if parallel.index not in allowed:
        raise UnsupportedError(f"{parallel}: with a position split, threads take ranges of "
                               f"{' or '.join(sorted(allowed))}")
    if parallel.reduction is not Reduction.PARTIALS:
        raise CompileError(f"{parallel}: ranges of positions cut rows, and both ranges add "
                           f"into a cut row's output; use reduction=partials")


def _check_gpu_parallel(command: Parallelize, backend: str) -> Parallelize:
    """A GPU unit is a request for the CUDA mapping of the kernel's outer loop (blocks: equal
    shares of nonzeros, or a block reduction; warps: lanes of a warp share a row; threads: a
    thread a row or element); the runtime checks it against the kernel (``gpu/choose.py``)."""
    if backend != "cuda":
        raise UnsupportedError(f"{command}: GPU units run with backend='cuda'; for CPU "
                               f"threads use unit=cpu-threads")
    if command.reduction is Reduction.PARTIALS:
        raise UnsupportedError(f"{command}: per-thread partial outputs are a CPU strategy; on "
                               f"the GPU use reduction=atomics (or none)")
    if command.threads is not None:
        raise UnsupportedError(f"{command}: threads= counts CPU threads; the runtime sizes "
                               f"the GPU's grid")
    return command


def _check_parallel(command: Parallelize, splits: dict[str, Split], backend: str) -> None:
    if command.reduction is Reduction.ATOMICS:
        raise UnsupportedError(f"{command}: atomic reductions are for GPU kernels; on the CPU "
                               f"use reduction=partials (each thread sums into its own output)")
    for split in splits.values():
        if command.index == split.inner:
            raise UnsupportedError(f"{command}: only the outer loop of a split ({split.outer}) "
                                   f"can take threads on the CPU")


def why_not_parallel(program: Program, index: str, partials: bool) -> str | None:
    """Why the loop over ``index`` cannot run as disjoint thread ranges (None: it can).

    Each nest must run ``index`` outermost as a counted loop. Without ``partials`` each range
    must own its output elements, so ``index`` must address the output; with them each range
    sums into its own copy of the output. A temporary may take part when ``index`` is its first
    mode and every nest reads and writes it at ``index`` (each range then fills and reads only
    its own rows). A sparse output takes ranges when it is a matrix whose first level runs over
    ``index`` and whose second is compressed (CSR, CSC, DCSR): each range assembles its own rows,
    and the runtime joins the pieces (``runtime/stitch.py``).
    """
    output = program.output
    if not output.format.is_dense:
        if not stitchable(program, index) or partials:
            return (f"the output is stored as {output.format}; only a matrix whose second "
                    f"level is compressed (CSR, CSC, DCSR), split along its first level, is "
                    f"assembled on several threads")
    for nest in program.nests:
        if nest.loop_order[:1] != (index,):
            return (f"the loop nest for {nest.output} runs {', '.join(nest.loop_order)}: "
                    f"{index} must be its outermost loop (reorder({index}, ...))")
        if index not in nest.output.indices and not partials:
            return (f"{index} is summed over in {nest.output} = ..., so ranges of {index} would "
                    f"add into the same output elements; use reduction=partials")
    temporaries = {t.name for t in program.tensors if t.role is TensorRole.TEMPORARY}
    if partials and temporaries:
        return "the statement computes temporaries first, which partial outputs cannot share"
    for nest in program.nests:
        for access in (nest.output, *accesses(nest.expr)):
            if access.tensor in temporaries and access.indices[:1] != (index,):
                return (f"the temporary {access} is not indexed by {index} first, so ranges "
                        f"would share its rows")
    return None


# The fibres of a CSF tensor's last level hold one or two entries on average (wn18rr 1.4,
# collegemsg 1.7, a uniform 2000^3 tensor with 1e6 entries 1.1); a loop over one, vectorized
# four lanes wide with its tail masked, runs a fibre as one masked vector instead of entering
# the scalar remainder whose exit mispredicts: TTV into DCSR ran in 0.65x (collegemsg), 0.85x
# (wn18rr) and 0.94x (the uniform tensor) the time LLVM's own vectorizing took (one thread,
# development VM, 2026-12-06; `python benchmarks/row_loops.py`).
FIBRE_LANES = 4


def fibre_vector_hint(program: Program, index: str, plan: LoopPlan) -> Vectorize | None:
    """The compiler's own hint for the loop over ``index``: ``vectorize(index, 4,
    tail=mask)`` where it is the innermost loop of a kernel whose output shares a prefix of a
    tensor's levels (``lower/pattern.py``: TTV into DCSR) and runs over that tensor's last level
    (a fibre), on the CPU backends and when the schedule gave the loop no hint of its own.

    >>> import numpy as np
    >>> from tensoralg.formats import Format, LevelKind, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.lower.pattern import share_pattern
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> s = LevelKind.COMPRESSED
    >>> p = share_pattern(concretize(parse_statement("Y(i,j) = T(i,j,k) * v(k)"),
    ...                              {"T": Format([s] * 3), "v": dense(1)},
    ...                              {"T": np.dtype(np.int32)}, np.dtype(np.float64),
    ...                              Format([s, s])))
    >>> str(fibre_vector_hint(p, "k", LoopPlan())), fibre_vector_hint(p, "j", LoopPlan())
    ('vectorize(k, 4, tail=mask)', None)
    """
    source = program.pattern
    if source is None or not plan.position_ranges or index in plan.vectorize or \
            index in plan.unroll or len(program.nests) != 1:
        return None
    info = program.tensor(source)
    nest = program.nests[0]
    if program.output.format.rank >= info.format.rank or not nest.loop_order or \
            nest.loop_order[-1] != index or info.dims[info.format.order[-1]] != index or \
            not info.format.levels[-1].is_sparse:
        return None
    return Vectorize(index, FIBRE_LANES, VectorTail.MASK)


# A CSR row's loop with the adaptive tail is vectorized ROW_LANES wide in its masked kernel; which
# kernel a call runs, and the measurements behind the rule, are in runtime/rows.py.
ROW_LANES = 8


def row_vector_hint(program: Program, index: str, plan: LoopPlan) -> Vectorize | None:
    """The compiler's own hint for the loop over ``index``: ``vectorize(index, 8,
    tail=adaptive)`` where it is the innermost loop of a nest that sums over the positions of
    a CSR row (the second level, compressed, of a matrix whose first level is dense over the
    enclosing loop) into a dense output that does not hold ``index``, with every other operand
    of that nest dense, float values, a backend that takes vector hints, and no hint of the
    schedule's own on the loop: SpMV and its like (``y = A x + b`` too).

    >>> import numpy as np
    >>> from tensoralg.formats import Format, LevelKind, dense
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> csr = Format([LevelKind.DENSE, LevelKind.COMPRESSED])
    >>> p = concretize(parse_statement("y(i) = A(i,j) * x(j)"), {"A": csr, "x": dense(1)},
    ...                {"A": np.dtype(np.int32)}, np.dtype(np.float64), None)
    >>> str(row_vector_hint(p, "j", LoopPlan())), row_vector_hint(p, "i", LoopPlan())
    ('vectorize(j, 8, tail=adaptive)', None)
    """
    if not plan.vector_hints or not plan.position_ranges or index in plan.vectorize or \
            index in plan.unroll or program.pattern is not None or \
            program.value_dtype.kind != "f" or not program.output.format.is_dense:
        return None
    for nest in program.nests:
        if len(nest.loop_order) < 2 or nest.loop_order[-1] != index or \
                index in nest.output.indices:
            continue
        rows = [a for a in dict.fromkeys(accesses(nest.expr))
                if not program.tensor(a.tensor).format.is_dense]
        if len(rows) == 1 and row_level(program, rows[0], nest.loop_order[-2], index):
            return Vectorize(index, ROW_LANES, VectorTail.ADAPTIVE)
    return None


def row_level(program: Program, access: Access, outer: str, index: str) -> bool:
    """Whether ``access`` is a CSR-like matrix read row ``outer`` by row: its first level dense
    over ``outer``, its second compressed over ``index``."""
    fmt = program.tensor(access.tensor).format
    if fmt.rank != 2 or fmt.levels[0] is not LevelKind.DENSE or \
            fmt.levels[1] is not LevelKind.COMPRESSED:
        return False
    return (access.indices[fmt.order[0]], access.indices[fmt.order[1]]) == (outer, index)


def row_choice(program: Program, plan: LoopPlan) -> tuple[str, str] | None:
    """``(matrix, index)`` where a kernel's loop over ``index`` runs the rows of the CSR
    ``matrix`` with the adaptive tail (the schedule's ``tail=adaptive`` or the compiler's
    ``row_vector_hint``): the runtime then runs this kernel (the loop vectorized as the
    backend chooses, with a scalar remainder) or its variant with the tail masked, as the
    matrix's rows decide (``runtime/rows.py``). None when no loop does."""
    for nest in program.nests:
        sparse = [a for a in dict.fromkeys(accesses(nest.expr))
                  if not program.tensor(a.tensor).format.is_dense]
        if len(sparse) != 1 or program.tensor(sparse[0].tensor).role is not TensorRole.INPUT:
            continue
        for depth, index in enumerate(nest.loop_order[1:], start=1):
            if (index in plan.adaptive or row_vector_hint(program, index, plan) is not None) \
                    and row_level(program, sparse[0], nest.loop_order[depth - 1], index):
                return sparse[0].tensor, index
    return None


def applied_schedule(program: Program, function: Function, plan: LoopPlan,
                     given: Schedule | None, range_index: str | None,
                     changed_steps: set[str], tile_rows: int = 1) -> Schedule:
    """The schedule a kernel runs, as commands a user could pass to get the same kernel: the
    loop order of its main nest, how its outer loop runs (threads or not), the splits and hints
    the schedule gave, and the settings of the pattern passes that changed the code
    (``changed_steps``, by their names in the pipeline; ``tile_rows`` as `pass_options_of`
    took it)."""
    given = given or Schedule()
    # A hint survives only on loops no pattern pass rebuilt (a register tile makes new loops).
    hinted = any(isinstance(s, For) and (s.unroll or s.vectorize) for s in walk(function.body))
    kept = (Fuse, Pos, Split, Unroll, Vectorize, Gemm) if hinted else (Fuse, Pos, Split, Gemm)
    # The nest with the most loops names them all (an added vector b(i) gets a nest of its own),
    # among those writing the output: a temporary presum made chooses its loops again.
    writers = [nest for nest in program.nests if nest.output.tensor == program.output.name] \
        or list(program.nests)
    main = max(reversed(writers), key=lambda nest: len(nest.loop_order))
    schedule = Schedule().reorder(*main.loop_order) if main.loop_order else Schedule()
    for alias, source in program.conversions:    # operands the kernel reads converted
        info = program.tensor(alias)
        schedule = schedule.relayout(source, *[info.dims[m] for m in info.format.order])
    for command in (*given.find(Precompute), *_chosen_workspaces(program, given)):
        schedule = schedule.then(command)
    for command in given:
        if isinstance(command, kept):
            schedule = schedule.then(command)
    for index, depth in moved_blocks(main.loop_order, plan).items():   # cache blocks
        split, order = plan.splits[index], main.loop_order
        schedule = schedule.reorder(split.outer, *[split.inner if x == index else x
                                                   for x in order[depth:]])
    if hinted:
        for index in main.loop_order:
            chosen = fibre_vector_hint(program, index, plan)
            if chosen is not None:
                schedule = schedule.then(chosen)
    rows = row_choice(program, plan)
    if rows is not None:     # its loop carries no hint: the masked variant is another kernel
        if not hinted:
            for command in given.find(Vectorize):
                if command.tail is VectorTail.ADAPTIVE:
                    schedule = schedule.then(command)
        if rows[1] not in plan.adaptive:
            schedule = schedule.then(Vectorize(rows[1], ROW_LANES, VectorTail.ADAPTIVE))
    if plan.gpu is not None:              # what the GPU's grid takes (CUDA backend)
        schedule = schedule.then(plan.gpu)
    elif plan.parallel is not None:
        schedule = schedule.then(plan.parallel)
    elif range_index is not None:
        schedule = schedule.then(Parallelize(range_index))
    elif plan.serial:
        schedule = schedule.then(Serial())
    options = pass_options_of(given, tile_rows)
    jam = Jam(options.jam_rows,
              None if options.tile_rows == options.jam_rows else options.tile_rows)
    passes = ((Workspaces(options.workspaces), "fuse temporaries into row workspaces"),
              (Tile(options.tile_bytes), "tile accumulators into registers"),
              (TransposeTiles(options.line_bytes), "tile transposed accesses by cache line"),
              (jam, "jam rows of a reduction"))
    for command, step in passes:
        if step in changed_steps or given.find(type(command)):
            schedule = schedule.then(command)
    return schedule


def _chosen_workspaces(program: Program, given: Schedule) -> list[Precompute]:
    """The row workspace the compiler chose for a sparse output (its loops sum before the
    output's last index), as the precompute command that asks for it; none when the schedule
    asked for it already (a given precompute whose workspace is no temporary of the program
    named the whole right side)."""
    output = program.output
    nest = program.nests[-1]
    if nest.mode is not OutputMode.WORKSPACE:
        return []
    temporaries = {t.name for t in program.tensors if t.role is TensorRole.TEMPORARY}
    if any(p.workspace not in temporaries for p in given.find(Precompute)):
        return []
    if any(a.tensor in temporaries for a in accesses(nest.expr)):
        return []       # the statement does not read the temporary: no text names this
    # Operands converted for this kernel print as the operands the statement names.
    sources = dict(program.conversions)
    expr = format_expr(_renamed(nest.expr, sources))
    taken = {t.name for t in program.tensors} | set(sources.values())
    name = next(f"w{k}" if k else "w" for k in range(len(taken) + 1)
                if (f"w{k}" if k else "w") not in taken)
    last = nest.output.indices[output.format.order[-1]]
    return [Precompute(expr, (last,), name)]


def _renamed(expr: Expr, sources: dict[str, str]) -> Expr:
    match expr:
        case Access(tensor, indices):
            return Access(sources.get(tensor, tensor), indices)
        case Literal():
            return expr
        case Neg(x):
            return Neg(_renamed(x, sources))
        case Add(a, b) | Sub(a, b) | Mul(a, b) | Div(a, b):
            return type(expr)(_renamed(a, sources), _renamed(b, sources))
        case Call(func, args):
            return Call(func, tuple(_renamed(a, sources) for a in args))
    raise TypeError(expr)


def stitchable(program: Program, index: str) -> bool:
    """Whether ranges of ``index`` can each assemble their own rows of the sparse output: a
    matrix whose first stored level runs over ``index`` (dense: CSR, CSC; or compressed:
    DCSR) and whose second is compressed, written by one nest and no temporaries; the runtime
    joins the ranges' pieces (``runtime/stitch.py``)."""
    output = program.output
    fmt = output.format
    return fmt.rank == 2 and fmt.levels[0] in (LevelKind.DENSE, LevelKind.COMPRESSED) and \
        fmt.levels[1].has_pos and \
        output.dims[fmt.order[0]] == index and len(program.nests) == 1 and \
        not any(t.role is TensorRole.TEMPORARY for t in program.tensors)


@dataclass(frozen=True, slots=True)
class RowWork:
    """What one iteration of a thread-split loop costs, to cut ranges of equal work
    (``runtime/threads.py``, ``row_weights``): the entries of ``rows`` (inputs stored dense,
    then compressed, along the split index) in that row, and for each ``(A, B)`` of
    ``products`` the entries of B's rows that A's entries in that row reach (a sparse
    product's multiply-adds: SpGEMM's rows differ by far more in those than in A's entries)."""

    rows: tuple[str, ...]
    products: tuple[tuple[str, str], ...] = ()


def row_work(program: Program, index: str | None) -> RowWork | None:
    """The cost of a row of the loop over ``index`` (None: count rows, all alike).

    >>> import numpy as np
    >>> from tensoralg.formats import CSR
    >>> from tensoralg.lower.concretize import concretize
    >>> from tensoralg.notation import parse_statement
    >>> program = concretize(parse_statement("C(i,j) = A(i,k) * B(k,j)"), {"A": CSR, "B": CSR},
    ...                      {}, np.dtype(np.float64), CSR)
    >>> row_work(program, "i")
    RowWork(rows=('A',), products=(('A', 'B'),))
    """
    if index is None:
        return None
    stored = {info.name: info.dims[info.format.order[0]] for info in program.tensors
              if info.role is TensorRole.INPUT and info.format.rank >= 2
              and not info.format.levels[0].is_sparse and info.format.levels[1].has_pos}
    rows = tuple(name for name, first in stored.items() if first == index)
    if not rows:
        return None
    second = {name: program.tensor(name).dims[program.tensor(name).format.order[1]]
              for name in rows}
    products = tuple((a, b) for a in rows for b, first in stored.items()
                     if b != a and first == second[a] and first != index)
    return RowWork(rows, products)


def pass_options_of(schedule: Schedule | None, tile_rows: int = 1) -> PassOptions:
    """The IR passes' options that ``schedule`` sets (the compiler's own where it is silent;
    ``tile_rows``: its rows of register tiles jammed, which depend on the host's registers).

    >>> pass_options_of(Schedule().jam(1)).jam_rows
    1
    >>> pass_options_of(None, tile_rows=6).tile_rows, pass_options_of(Schedule().jam(2), 6).tile_rows
    (6, 2)
    """
    if schedule is None:
        return dataclasses.replace(DEFAULT_OPTIONS, tile_rows=tile_rows)
    tile, jam = schedule.last(Tile), schedule.last(Jam)
    workspaces, transposes = schedule.last(Workspaces), schedule.last(TransposeTiles)
    return PassOptions(
        tile_bytes=tile.bytes if tile else DEFAULT_OPTIONS.tile_bytes,
        jam_rows=jam.rows if jam else DEFAULT_OPTIONS.jam_rows,
        tile_rows=jam.tile_rows if jam else tile_rows,
        workspaces=workspaces.enabled if workspaces else DEFAULT_OPTIONS.workspaces,
        line_bytes=transposes.line_bytes if transposes else DEFAULT_OPTIONS.line_bytes)


__all__ = ["LoopPlan", "PositionSplit", "moved_blocks", "ROW_LANES", "RowWork", "row_choice", "row_level", "row_vector_hint", "row_work", "applied_schedule", "loop_plan", "pass_options_of", "stitchable",
           "why_not_parallel"]
