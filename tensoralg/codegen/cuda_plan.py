"""Which GPU mappings a kernel's IR allows: the analysis behind the CUDA emitter.

A CUDA kernel runs its whole body in every thread, so the statements around the loop that is
mapped onto the grid (the *prologue* before it, the *epilogue* after it) run once per thread:
their locals and heap buffers are private to the thread, and they must not write memory that
threads share (the kernel's pointer parameters). Inside the mapped loop, each iteration runs in
one thread, or in a group of lanes that share one inner loop. This module decides, from the IR
alone, which of these shapes a kernel has:

- ``rows``: the kernel has the thread-range loop ``for (i = range_begin; i < range_end; ...)``
  that lowering emits only where ranges of ``i`` write disjoint outputs (``lower/scheduling.py``,
  ``why_not_parallel``). Its rows map onto threads (``thread-per-row``), onto groups of 2 to 32
  lanes sharing one inner loop of the row (``warp-per-row``: a reduction loop whose partial sums
  meet in a shuffle reduction, or a loop over output columns), onto a merge path over rows and
  nonzeros (``nonzero-split``, for a row that is one reduction over a CSR row), or, with the
  next loop, onto flat elements (``grid-stride``, for dense element-wise rows).
- ``sparse-rows``: the same loop writing a CSR-like output; assembled in two phases
  (``cuda_assembly.py``).
- ``scatter``: no range loop, but an outermost counted loop whose iterations carry no state:
  each runs in one thread, and additions to the output become atomic adds (``atomic``).
- ``reduce``: a sum to a scalar over an outermost loop (``block-reduce``).
- ``single``: a kernel without loops runs in one thread (``serial``).

Lowering emits its row loops on one assumption this module keeps: iterations of the range loop
carry nothing from one row to the next except buffers they restore (row workspaces are cleared
after use), so any set of rows may run in any thread, in any order. Plain (non-adding) stores to
an output are emitted only where each element is written once (``lower/assemble.py``), so they
need no atomics when iterations run concurrently.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tensoralg.ir.nodes import (
    Allocate,
    Assign,
    Binary,
    Block,
    Cast,
    Comment,
    Const,
    Declare,
    Expr,
    For,
    Free,
    Function,
    Grow,
    If,
    Load,
    Param,
    Ptr,
    Scalar,
    Stmt,
    Store,
    Var,
    While,
)
from tensoralg.ir.rewrite import used_vars, walk

# Mapping names, as the notes, the runtime and ``mapping=`` arguments spell them.
SERIAL = "serial"
THREAD_PER_ROW = "thread-per-row"
WARP_PER_ROW = "warp-per-row"
NONZERO_SPLIT = "nonzero-split"
GRID_STRIDE = "grid-stride"
ATOMIC = "atomic"
BLOCK_REDUCE = "block-reduce"
MAPPINGS = (SERIAL, THREAD_PER_ROW, WARP_PER_ROW, NONZERO_SPLIT, GRID_STRIDE, ATOMIC,
            BLOCK_REDUCE)


@dataclass(frozen=True, slots=True)
class Split:
    """The loop of a row that the lanes of a group share (``warp-per-row``).

    ``reduction``: its body only adds into ``accumulator``; each lane sums every ``lanes``-th
    iteration and the partial sums meet in a shuffle reduction after the loop. ``columns``: its
    iterations write different output elements and nothing else; each lane takes every
    ``lanes``-th one. ``start``/``stop`` are the loop's bounds, from which the runtime picks the
    number of lanes (``positions`` names the pos parameter when they are one CSR row's range).
    """

    var: str
    kind: str
    accumulator: Var | None
    start: Expr
    stop: Expr
    positions: Param | None


@dataclass(frozen=True, slots=True)
class MergeRow:
    """A row that is one reduction over a CSR row: ``pre; acc = 0; for p in pos[i]..pos[i+1]:
    acc += ...; out[index] (+)= acc`` (the shape ``nonzero-split`` needs)."""

    row: Var
    pre: tuple[Stmt, ...]
    accumulator: Var
    loop: For
    store: Store
    positions: Param


@dataclass(frozen=True, slots=True)
class Elements:
    """A row loop whose row is declarations and one loop over output columns, with the same
    bounds in every row (``grid-stride`` flattens rows x columns)."""

    row: For
    pre: tuple[Stmt, ...]
    loop: For


@dataclass(frozen=True, slots=True)
class RowsPlan:
    """A kernel whose range loops (their counters ``rows``) map rows onto threads."""

    rows: tuple[str, ...]
    split: Split | None
    merge: MergeRow | None
    elements: tuple[Elements, ...] | None

    @property
    def mappings(self) -> tuple[str, ...]:
        found = [THREAD_PER_ROW]
        if self.split is not None:
            found.append(WARP_PER_ROW)
        if self.merge is not None:
            found.append(NONZERO_SPLIT)
        if self.elements is not None:
            found.append(GRID_STRIDE)
        return tuple(found)


@dataclass(frozen=True, slots=True)
class ScatterPlan:
    """A kernel whose outermost loops (their counters ``loops``) run one iteration per thread;
    adding stores to the output parameters become atomic adds."""

    loops: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReducePlan:
    """A sum into ``accumulator`` over the outermost loop ``loop``, stored by ``store``."""

    loop: str
    accumulator: Var
    store: Store


@dataclass(frozen=True, slots=True)
class SinglePlan:
    """A kernel without loops: one thread runs it (``serial``)."""


@dataclass(frozen=True, slots=True)
class Unmapped:
    """Why no GPU mapping fits the kernel (the statement is named by the caller)."""

    reason: str


Plan = RowsPlan | ScatterPlan | ReducePlan | SinglePlan | Unmapped


# ---------------------------------------------------------------------------------------------
# Reading the IR


def flat(block: Block) -> list[Stmt]:
    """The statements of ``block`` with nested Blocks spliced in (they open no scope)."""
    out: list[Stmt] = []
    for stmt in block.body:
        if isinstance(stmt, Block):
            out.extend(flat(stmt))
        else:
            out.append(stmt)
    return out


def statements(node: Stmt | Block) -> Iterator[Stmt]:
    """Every statement under ``node``, ``node`` included, in program order."""
    for item in walk(node):
        if isinstance(item, _STATEMENTS):
            yield item


_STATEMENTS = (Declare, Assign, Store, For, While, If, Comment, Allocate, Grow, Free)


def declared(node: Stmt | Block) -> set[str]:
    """Names of the variables introduced under ``node`` (Declare, Allocate, For)."""
    return {s.var.name for s in statements(node) if isinstance(s, (Declare, Allocate, For))}


def pointer_params(fn: Function) -> dict[str, Param]:
    """The pointer parameters of ``fn`` by variable name: memory every thread shares."""
    return {p.var.name: p for p in fn.params if isinstance(p.var.dtype, Ptr)}


def range_vars(fn: Function) -> tuple[str, str] | None:
    """Names of the thread range's ``begin``/``end`` parameters, when ``fn`` has them."""
    bounds = fn.thread_range
    return (bounds[0].var.name, bounds[1].var.name) if bounds is not None else None


def is_range_loop(stmt: Stmt, bounds: tuple[str, str] | None) -> bool:
    return bounds is not None and isinstance(stmt, For) and \
        stmt.start == Var(bounds[0], stmt.start.dtype) and \
        isinstance(stmt.stop, Var) and stmt.stop.name == bounds[1]


def _shared_writes(stmts: list[Stmt], shared: dict[str, Param]) -> Store | None:
    """The first store under ``stmts`` into memory that threads share, if any."""
    for stmt in stmts:
        for s in statements(stmt):
            if isinstance(s, Store) and s.array.name in shared:
                return s
    return None


def _has(stmts: list[Stmt] | Stmt, kinds: tuple[type, ...]) -> bool:
    items = stmts if isinstance(stmts, list) else [stmts]
    return any(isinstance(s, kinds) for stmt in items for s in statements(stmt))


def _sum_of(value: Expr, accumulator: str) -> bool:
    """Whether ``value`` is ``accumulator + e`` (or ``e + accumulator``), e free of it."""
    if not isinstance(value, Binary) or value.op != "+":
        return False
    for mine, other in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        if isinstance(mine, Var) and mine.name == accumulator and \
                accumulator not in used_vars(other):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Loops lanes can share


def reduction_accumulator(loop: For) -> Var | None:
    """The one local that ``loop`` sums into, when summing is all the loop does.

    Its body may declare and assign its own locals and run inner loops, but writes no memory,
    allocates nothing, and assigns no outer variable except ``acc = acc + e``.
    """
    inner = declared(loop.body) | {loop.var.name}
    found: Var | None = None
    for s in statements(loop.body):
        if isinstance(s, (Store, Allocate, Grow, Free)):
            return None
        if isinstance(s, Assign) and s.var.name not in inner:
            if not _sum_of(s.value, s.var.name) or (found is not None and found != s.var):
                return None
            found = s.var
    if found is None or not isinstance(found.dtype, Scalar) or found.dtype is Scalar.BOOL:
        return None
    # Nothing else may read the partial sum: lanes hold different parts of it until the end.
    sums = sum(1 for s in statements(loop.body) if isinstance(s, Assign) and s.var == found)
    uses = sum(1 for node in walk(loop.body) if node == found)
    return found if uses == 2 * sums else None


def _column_index(index: Expr, counter: str, varying: set[str]) -> bool:
    """Whether ``index`` is ``counter`` or ``x + counter`` with x the same in every
    iteration, so that distinct iterations address distinct elements."""
    if isinstance(index, Var) and index.name == counter:
        return True
    if isinstance(index, Binary) and index.op == "+":
        for mine, other in ((index.lhs, index.rhs), (index.rhs, index.lhs)):
            if isinstance(mine, Var) and mine.name == counter and \
                    not (used_vars(other) & (varying | {counter})):
                return True
    return False


def is_column_loop(loop: For, shared: dict[str, Param]) -> bool:
    """Whether the iterations of ``loop`` are independent: each writes only shared output
    elements of its own (at ``x + counter``), reads a written array only where it writes it,
    and assigns no variable declared outside its body."""
    counter = loop.var.name
    inner = declared(loop.body)
    stores = []
    for s in statements(loop.body):
        if isinstance(s, (Allocate, Grow, Free, While)):
            return False
        if isinstance(s, Assign) and s.var.name not in inner:
            return False
        if isinstance(s, Store):
            if s.array.name not in shared or not _column_index(s.index, counter, inner):
                return False
            stores.append(s)
    if not stores:
        return False
    written = {s.array.name: s.index for s in stores}
    for node in walk(loop.body):
        if isinstance(node, Load) and node.array.name in written and \
                node.index != written[node.array.name]:
            return False
    return len({s.index for s in stores if s.array.name in written}) == len(written)


def _positions_of(loop: For, row: str, shared: dict[str, Param]) -> Param | None:
    """The pos parameter when ``loop`` runs over ``pos[row] .. pos[row + 1]``."""
    start, stop = _uncast(loop.start), _uncast(loop.stop)
    if not (isinstance(start, Load) and isinstance(stop, Load)) or start.array != stop.array:
        return None
    if start.index != Var(row, start.index.dtype):
        return None
    index = stop.index
    if not (isinstance(index, Binary) and index.op == "+" and index.lhs == start.index and
            index.rhs == Const(1, index.rhs.dtype)):
        return None
    return shared.get(start.array.name)


def _uncast(expr: Expr) -> Expr:
    return expr.operand if isinstance(expr, Cast) else expr


def find_split(row_body: list[Stmt], row: str, shared: dict[str, Param]) -> Split | None:
    """The outermost loop of a row that lanes can share, if any (a reduction or columns)."""
    for stmt in row_body:
        for s in statements(stmt):
            if not isinstance(s, For):
                continue
            accumulator = reduction_accumulator(s)
            if accumulator is not None:
                return Split(s.var.name, "reduction", accumulator, s.start, s.stop,
                             _positions_of(s, row, shared))
            if is_column_loop(s, shared):
                return Split(s.var.name, "columns", None, s.start, s.stop, None)
    return None


# ---------------------------------------------------------------------------------------------
# Whole rows


def _pure(stmts: list[Stmt]) -> bool:
    return all(isinstance(s, (Declare, Comment)) for s in stmts)


def merge_row(loop: For, shared: dict[str, Param]) -> MergeRow | None:
    """The row of ``loop`` as a CSR-row reduction, when it is one (see `MergeRow`)."""
    body = [s for s in flat(loop.body) if not isinstance(s, Comment)]
    if len(body) < 3:
        return None
    *pre, init, inner, store = body
    if not (_pure(pre) and isinstance(init, Declare) and isinstance(inner, For) and
            isinstance(store, Store)):
        return None
    accumulator = reduction_accumulator(inner)
    positions = _positions_of(inner, loop.var.name, shared)
    zero = isinstance(init.init, Const) and init.init.value == 0
    if accumulator is None or accumulator != init.var or positions is None or not zero:
        return None
    if store.value != accumulator or store.array.name not in shared or \
            accumulator.name in used_vars(store.index):
        return None
    return MergeRow(loop.var, tuple(pre), accumulator, inner, store, positions)


def elements_of(loop: For, shared: dict[str, Param], params: set[str]) -> Elements | None:
    """The row of ``loop`` as declarations and one column loop whose bounds are the same in
    every row (see `Elements`), when it is one."""
    body = [s for s in flat(loop.body) if not isinstance(s, Comment)]
    if not body or not _pure(body[:-1]) or not isinstance(body[-1], For):
        return None
    inner = body[-1]
    if not (used_vars(inner.start) | used_vars(inner.stop)) <= params:
        return None
    if not is_column_loop(inner, shared):
        return None
    return Elements(loop, tuple(body[:-1]), inner)


# ---------------------------------------------------------------------------------------------
# The plan of a kernel


def plan_kernel(fn: Function, disjoint_rows: bool = True) -> Plan:
    """The shape of ``fn`` for the GPU (module docstring), or why it has none.

    ``disjoint_rows=False`` says the range loop's ranges add into the same output elements
    (a ``reduction=partials`` schedule): its rows then run as a scatter with atomic adds.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> plan_kernel(Function("k", (), Block()))
    SinglePlan()
    """
    body = flat(fn.body)
    shared = pointer_params(fn)
    bounds = range_vars(fn)
    loops = [k for k, s in enumerate(body) if isinstance(s, (For, While))]
    if not loops:
        return SinglePlan()
    ranges = [k for k, s in enumerate(body) if is_range_loop(s, bounds)]
    if ranges and disjoint_rows:
        return _rows(fn, body, ranges, shared)
    if len(loops) > 1:
        return _outer_loops(body, loops, shared)
    return _outer_loop(body, loops[0], shared)


def _rows(fn: Function, body: list[Stmt], ranges: list[int], shared: dict[str, Param]) -> Plan:
    between = [s for k, s in enumerate(body) if k not in ranges]
    store = _shared_writes(between, shared)
    if store is not None:
        return Unmapped(f"it writes {store.array.name} outside its row loop, which every "
                        f"thread would do")
    loops = [s for s in (body[k] for k in ranges) if isinstance(s, For)]
    rows = tuple(loop.var.name for loop in loops)
    # Lanes never share a kernel that allocates: a thread that fails to allocate returns at
    # once, and a shuffle waiting for it would never complete.
    if _has(body, (Allocate, Grow)):
        return RowsPlan(rows, None, None, None)
    params = {p.var.name for p in fn.params}
    # Several row loops (one per nest) run in every thread with the same rows (or elements)
    # each, so a thread reads only rows it wrote itself.
    found = [elements_of(loop, shared, params) for loop in loops]
    widths = {(e.loop.start, e.loop.stop) for e in found if e is not None}
    elements = tuple(e for e in found if e is not None) \
        if None not in found and len(widths) == 1 else None
    if len(loops) > 1:
        return RowsPlan(rows, None, None, elements)
    loop = loops[0]
    split = find_split(flat(loop.body), loop.var.name, shared)
    # Lanes write shared memory through one lane (outside the shared loop); a row that reads
    # back what it wrote would need the lanes to wait for that write, so it gets none.
    written = {s.array.name for s in statements(loop.body) if isinstance(s, Store)}
    if any(isinstance(node, Load) and node.array.name in written for node in walk(loop.body)):
        split = None
    return RowsPlan(rows, split, merge_row(loop, shared), elements)


def _outer_loop(body: list[Stmt], at: int, shared: dict[str, Param]) -> Plan:
    loop = body[at]
    if isinstance(loop, While):
        return Unmapped("its outermost loop co-iterates several operands (a while loop); "
                        "only counted loops are mapped onto the grid")
    assert isinstance(loop, For)
    before, after = body[:at], body[at + 1:]
    store = _shared_writes(before, shared)
    if store is not None:
        return Unmapped(f"it writes {store.array.name} before its outer loop, which every "
                        f"thread would do")
    reduce = _scalar_sum(loop, before, after, shared)
    if reduce is not None:
        return reduce
    store = _shared_writes(after, shared)
    if store is not None:
        return Unmapped(f"it writes {store.array.name} after its outer loop, which every "
                        f"thread would do")
    outer = declared(Block(tuple(before)))
    for s in statements(loop.body):
        if isinstance(s, Assign) and s.var.name in outer:
            return Unmapped(f"its outer loop carries {s.var.name} from one iteration to the "
                            f"next")
        if isinstance(s, Grow):
            return Unmapped(f"its outer loop grows the buffer {s.var.name}")
        if isinstance(s, Store) and s.array.name in outer:
            return Unmapped(f"its outer loop keeps the workspace {s.array.name} from one "
                            f"iteration to the next")
    return ScatterPlan((loop.var.name,))


def _outer_loops(body: list[Stmt], at: list[int], shared: dict[str, Param]) -> Plan:
    """Several outer loops (one per nest) as one scatter: each loop's iterations spread over
    all threads, so no loop may read what any loop writes (no thread would wait for another's
    writes)."""
    plans = []
    for k in at:
        rest = [s for j, s in enumerate(body) if j not in at or j == k]
        plan = _outer_loop(rest, rest.index(body[k]), shared)
        if not isinstance(plan, ScatterPlan):
            return plan if isinstance(plan, Unmapped) else \
                Unmapped("it sums into a scalar over one loop of several")
        plans.append(plan)
    written = {s.array.name for k in at for s in statements(body[k]) if isinstance(s, Store)}
    for k in at:
        for node in walk(body[k]):
            if isinstance(node, Load) and node.array.name in written:
                return Unmapped(f"its loops run one after another and one reads "
                                f"{node.array.name}, which a loop writes")
    return ScatterPlan(tuple(name for plan in plans for name in plan.loops))


def _scalar_sum(loop: For, before: list[Stmt], after: list[Stmt],
                shared: dict[str, Param]) -> ReducePlan | None:
    """The plan of ``acc = 0; for ...: acc += ...; out[0] (+)= acc``, when that is the kernel."""
    rest = [s for s in after if not isinstance(s, (Comment, Free))]
    if len(rest) != 1 or not isinstance(rest[0], Store):
        return None
    store = rest[0]
    accumulator = reduction_accumulator(loop)
    if accumulator is None or store.value != accumulator or store.array.name not in shared or \
            not isinstance(store.index, Const):
        return None
    init = [s for s in before if isinstance(s, Declare) and s.var == accumulator]
    if not init or init[0].init != Const(0, accumulator.dtype) or \
            _has(before, (Allocate, Grow)) or _has(loop, (Allocate, Grow)):
        return None
    return ReducePlan(loop.var.name, accumulator, store)


__all__ = ["ATOMIC", "BLOCK_REDUCE", "GRID_STRIDE", "MAPPINGS", "NONZERO_SPLIT", "SERIAL",
           "THREAD_PER_ROW", "WARP_PER_ROW", "Elements", "MergeRow", "Plan", "ReducePlan",
           "RowsPlan", "ScatterPlan", "SinglePlan", "Split", "Unmapped", "find_split", "flat", "plan_kernel"]
