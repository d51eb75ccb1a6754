"""Printers of the mapped CUDA kernels, one function per kernel shape.

Each prints one ``extern "C" __global__`` function from an IR function and its plan
(``cuda_plan.py``), reusing the CUDA dialect for every statement and expression and changing
only what the mapping changes: the loop mapped onto the grid, the loop lanes share, stores that
become atomic adds or that one lane of a group does for all. Every kernel takes the IR
function's parameters in order, then its own extra parameters (named ``ta_*``, which the dialect
reserves), then ``status``; the runtime packs them by role (``tensoralg/gpu/launch.py``).

Threads are numbered ``ta_thread`` across the grid; every grid loop strides by the grid's size,
so any grid size is correct and the runtime may cap it (a kernel with per-thread heap buffers
must fit them in the device heap).
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.codegen.cfamily import SCALAR_TYPES, _Names, introduced_vars, undeclared_message
from tensoralg.codegen.cuda import CudaEmitter
from tensoralg.codegen.cuda_plan import (
    Elements,
    MergeRow,
    ReducePlan,
    Split,
    flat,
    pointer_params,
    range_vars,
)
from tensoralg.codegen.lines import Lines
from tensoralg.errors import CompileError
from tensoralg.ir.nodes import Block, For, Function, Ptr, Scalar, Stmt, Store, Var

THREAD = "const int64_t ta_thread = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;"
STRIDE = "const int64_t ta_stride = (int64_t)gridDim.x * blockDim.x;"


@dataclass(frozen=True, slots=True)
class Extra:
    """A parameter a mapped kernel adds after the IR function's: ``role`` tells the runtime
    what to pass (``ta.lanes``, ``ta.items``, ``ta.carry.row`` ...)."""

    ctype: str
    name: str
    role: str

    @property
    def decl(self) -> str:
        restrict = " __restrict__" if self.ctype.endswith("*") else ""
        return f"{self.ctype}{restrict} {self.name}"


class MappedEmitter(CudaEmitter):
    """The CUDA dialect printing one mapped kernel (module docstring).

    ``rows``: counters of loops mapped onto the grid, one iteration per thread (or per group
    of ``ta_lanes`` lanes when ``split`` names the loop they share). ``atomics``: adding stores
    into shared memory become ``atomicAdd``.
    """

    def __init__(self, fn: Function, rows: frozenset[str] = frozenset(),
                 split: Split | None = None, atomics: bool = False) -> None:
        super().__init__()
        self.fn = fn
        self.rows = rows
        self.split = split
        self.atomics = atomics
        self.shared = set(pointer_params(fn))
        self.inside_split = False
        self.extras: tuple[Extra, ...] = ()
        self.names = _Names(self.reserved)
        for var in introduced_vars(fn):
            self.names.add(var.name)

    def end_of_kernel(self, out: Lines) -> None:
        pass     # the runtime zeroes the status word; kernels write it only to fail

    # -- the kernel --------------------------------------------------------------------------

    def kernel(self, out: Lines, name: str, extras: tuple[Extra, ...], head: tuple[str, ...],
               body: list[Stmt | Lines] | None = None) -> None:
        """Print ``__global__ void name(params, extras, status) { head; body }``; ``body``
        (the function's own by default) may hold text printed already, as `Lines`."""
        self.extras = extras
        self.signature(Function(name, self.fn.params, self.fn.body), self.names, out)
        with out.indented():
            for line in head:
                out.line(line)
            try:
                for item in flat(self.fn.body) if body is None else body:
                    if isinstance(item, Lines):
                        for line in item.text().rstrip("\n").split("\n"):
                            out.line(line)
                    else:
                        self.statement(item, self.names, out)
            except KeyError as error:
                raise CompileError(undeclared_message(self.fn, error)) from None
        out.line("}")
        out.line()

    def parameters(self, fn: Function, names: _Names) -> list[tuple[str, str]]:
        decls = super().parameters(fn, names)
        status = decls.pop()
        return [*decls, *((e.decl, e.role) for e in self.extras), status]

    # -- statements the mapping changes ------------------------------------------------------

    def statement(self, stmt: Stmt, names: _Names, out: Lines) -> None:
        match stmt:
            case For(var) if var.name in self.rows:
                self.row_loop(stmt, names, out)
            case For(var) if self.split is not None and var.name == self.split.var:
                self.split_loop(stmt, names, out)
            case Store(array, index, value, accumulate) if array.name in self.shared:
                target = f"{names.of[array.name]}[{self.expr(index, names)}]"
                text = self.expr(value, names)
                if self.atomics and accumulate:
                    line = self.atomic_add(target, text, array)
                else:
                    line = f"{target} {'+=' if accumulate else '='} {text};"
                lanes = self.split is not None and not self.inside_split
                out.line(f"if (ta_lane == 0) {line}" if lanes else line)
            case _:
                super().statement(stmt, names, out)

    def row_loop(self, loop: For, names: _Names, out: Lines) -> None:
        counter, kind = names.of[loop.var.name], self.type_name(loop.var.dtype)
        start, stop = self.expr(loop.start, names), self.expr(loop.stop, names, 5)
        if self.split is not None:
            head = (f"for ({kind} {counter} = {start} + ta_thread / ta_lanes; {counter} < {stop}; "
                    f"{counter} += ta_stride / ta_lanes) {{")
        else:
            head = (f"for ({kind} {counter} = {start} + ta_thread; {counter} < {stop}; "
                    f"{counter} += ta_stride) {{")
        with out.block(head, "}"):
            self.block(loop.body, names, out)

    def split_loop(self, loop: For, names: _Names, out: Lines) -> None:
        assert self.split is not None
        counter, kind = names.of[loop.var.name], self.type_name(loop.var.dtype)
        if loop.unroll:
            out.line(self.unroll_pragma.format(loop.unroll))
        start, stop = self.expr(loop.start, names), self.expr(loop.stop, names, 5)
        head = (f"for ({kind} {counter} = {start} + ta_lane; {counter} < {stop}; "
                f"{counter} += ta_lanes) {{")
        self.inside_split = True
        with out.block(head, "}"):
            self.block(loop.body, names, out)
        self.inside_split = False
        if self.split.accumulator is not None:
            acc = names.of[self.split.accumulator.name]
            # A butterfly: every lane of the group ends with the whole sum, bit for bit the
            # same in each (a + b == b + a), so the rest of the row runs alike in all lanes.
            out.line(f"for (int32_t ta_offset = ta_lanes >> 1; ta_offset > 0; ta_offset >>= 1) "
                     f"{acc} += __shfl_xor_sync(ta_mask, {acc}, ta_offset);")

    def atomic_add(self, target: str, value: str, array: Var) -> str:
        """``target += value`` as one atomic operation (64-bit integers through the unsigned
        type, whose two's complement sum is the same)."""
        assert isinstance(array.dtype, Ptr)
        if array.dtype.elem == Scalar.I64:
            return (f"atomicAdd((unsigned long long*)&{target}, "
                    f"(unsigned long long)({value}));")
        return f"atomicAdd(&{target}, {value});"


LANES = (Extra("int32_t", "ta_lanes", "ta.lanes"),)
LANE = "const int32_t ta_lane = (int32_t)(threadIdx.x & (unsigned)(ta_lanes - 1));"
MASK = (
    "// the lanes of this thread's group, for the shuffles",
    "const unsigned ta_mask = ta_lanes == 32 ? 0xffffffffu : "
    "((1u << ta_lanes) - 1u) << ((threadIdx.x & 31u) & ~(unsigned)(ta_lanes - 1));",
)


def rows_kernel(out: Lines, fn: Function, name: str, rows: tuple[str, ...],
                split: Split | None) -> None:
    """Rows onto threads (``thread-per-row``), or onto groups of ``ta_lanes`` lanes that
    share the ``split`` loop (``warp-per-row``), striding over the grid."""
    emitter = MappedEmitter(fn, frozenset(rows), split)
    if split is not None:
        out.comment(f"Rows of {', '.join(rows)} map onto groups of ta_lanes lanes (1 to 32, a "
                    f"power of two) sharing the loop over {split.var} ({split.kind}).")
        mask = MASK if split.accumulator is not None else ()
        emitter.kernel(out, name, LANES, (THREAD, STRIDE, LANE, *mask))
    else:
        out.comment(f"Rows of {', '.join(rows)} map onto threads.")
        emitter.kernel(out, name, (), (THREAD, STRIDE))


def elements_kernel(out: Lines, fn: Function, name: str,
                    elements: tuple[Elements, ...]) -> None:
    """Rows times the columns of their one column loop, flattened onto the grid (all row loops
    have the same column bounds, so each thread takes the same elements in every loop)."""
    emitter = MappedEmitter(fn)
    names = emitter.names
    first = elements[0]
    start = emitter.expr(first.loop.start, names, 4)
    stop = emitter.expr(first.loop.stop, names, 4)
    head = (THREAD, STRIDE, f"const int64_t ta_width = {stop} - {start};")
    replaced: dict[int, Lines] = {}
    for part in elements:
        row, inner = part.row, part.loop
        i, j = names.of[row.var.name], names.of[inner.var.name]
        begin, end = emitter.expr(row.start, names), emitter.expr(row.stop, names, 4)
        lines = Lines(emitter.indent)
        lines.line(f"const int64_t ta_total = ta_width > 0 ? ({end} - {begin}) * ta_width : 0;")
        with lines.block("for (int64_t ta_e = ta_thread; ta_e < ta_total; ta_e += ta_stride) "
                         "{", "}"):
            lines.line(f"const int64_t {i} = {begin} + ta_e / ta_width;")
            emitter.block(Block(part.pre), names, lines)
            lines.line(f"const int64_t {j} = {start} + ta_e % ta_width;")
            emitter.block(inner.body, names, lines)
        replaced[id(row)] = _scoped(lines, emitter.indent)
    body = [replaced.get(id(s), s) for s in flat(fn.body)]
    out.comment(f"Elements ({first.row.var.name}, {first.loop.var.name}) map onto threads, "
                f"striding over the grid.")
    emitter.kernel(out, name, (), head, body)


def _scoped(lines: Lines, indent: str) -> Lines:
    """``lines`` inside braces, so that several loops may each declare ``ta_total``."""
    scoped = Lines(indent)
    with scoped.block("{", "}"):
        for line in lines.text().rstrip("\n").split("\n"):
            scoped.line(line)
    return scoped


def merge_kernels(out: Lines, fn: Function, name: str, row: For, merge: MergeRow) -> None:
    """``nonzero-split``: each thread takes ``ta_items`` consecutive steps of the merge path
    over row ends and nonzeros (Merrill and Garland's merge-based SpMV, one thread a share,
    without shared-memory staging). Rows a thread completes are stored; the partial sum of the
    row its share ends inside is carried out, and ``NAME_carry`` adds the carries atomically."""
    emitter = MappedEmitter(fn)
    names = emitter.names
    bounds = range_vars(fn)
    assert bounds is not None
    begin, end = names.of[bounds[0]], names.of[bounds[1]]
    pos = names.of[merge.positions.var.name]
    value = emitter.type_name(merge.accumulator.dtype)
    i, acc = names.of[merge.row.name], names.of[merge.accumulator.name]
    loop = merge.loop
    p, stop = names.of[loop.var.name], emitter.expr(loop.stop, names, 5)
    lines = Lines(emitter.indent)
    for text in (
            f"const int64_t ta_first = (int64_t){pos}[{begin}];",
            f"const int64_t ta_rows = {end} - {begin};",
            f"const int64_t ta_nonzeros = (int64_t){pos}[{end}] - ta_first;",
            "const int64_t ta_total = ta_rows + ta_nonzeros;",
            "const int64_t ta_from = ta_thread * ta_items < ta_total ? ta_thread * ta_items : "
            "ta_total;",
            "const int64_t ta_to = ta_from + ta_items < ta_total ? ta_from + ta_items : ta_total;",
            f"const int64_t ta_row_from = ta_merge_path({pos}, {begin}, ta_first, ta_rows, "
            f"ta_nonzeros, ta_from);",
            f"const int64_t ta_row_to = ta_merge_path({pos}, {begin}, ta_first, ta_rows, "
            f"ta_nonzeros, ta_to);",
            "int64_t ta_at = ta_first + (ta_from - ta_row_from);",
            "const int64_t ta_at_end = ta_first + (ta_to - ta_row_to);",
            f"{value} {acc} = 0;"):
        lines.line(text)
    with lines.block("for (int64_t ta_r = ta_row_from; ta_r < ta_row_to; ++ta_r) {", "}"):
        lines.line(f"const int64_t {i} = {begin} + ta_r;")
        emitter.block(Block(merge.pre), names, lines)
        with lines.block(f"for (int64_t {p} = ta_at; {p} < {stop}; ++{p}) {{", "}"):
            emitter.block(loop.body, names, lines)
        lines.line(f"ta_at = {stop};")
        emitter.statement(merge.store, names, lines)
        lines.line(f"{acc} = 0;")
    lines.comment("the row this thread's share ends inside: carry its partial sum out")
    with lines.block("if (ta_row_to < ta_rows) {", "}"):
        lines.line(f"const int64_t {i} = {begin} + ta_row_to;")
        emitter.block(Block(merge.pre), names, lines)
        with lines.block(f"for (int64_t {p} = ta_at; {p} < ta_at_end; ++{p}) {{", "}"):
            emitter.block(loop.body, names, lines)
        lines.line(f"ta_carry_row[ta_thread] = {i};")
        lines.line(f"ta_carry_value[ta_thread] = {acc};")
    lines.line("else ta_carry_row[ta_thread] = -1;")
    extras = merge_extras(value)
    out.comment("Nonzero-split: equal shares of the merge path over row ends and nonzeros.")
    emitter.kernel(out, f"{name}_merge", extras, (THREAD,), _replace(fn, row, lines))
    _carry_kernel(out, fn, name, row, merge, value)


def merge_extras(value: str) -> tuple[Extra, ...]:
    """The merge kernel's own parameters (``value``: the C type of the output's values)."""
    return (Extra("int64_t", "ta_items", "ta.items"),
            Extra("int64_t*", "ta_carry_row", "ta.carry.row"),
            Extra(f"{value}*", "ta_carry_value", "ta.carry.value"))


def carry_extras(value: str) -> tuple[Extra, ...]:
    """The carry kernel's own parameters."""
    return (Extra("int64_t", "ta_count", "ta.carry.count"),
            Extra("int64_t*", "ta_carry_row", "ta.carry.row"),
            Extra(f"{value}*", "ta_carry_value", "ta.carry.value"))


def _carry_kernel(out: Lines, fn: Function, name: str, row: For, merge: MergeRow,
                  value: str) -> None:
    emitter = MappedEmitter(fn, atomics=True)
    names = emitter.names
    i = names.of[merge.row.name]
    store = merge.store
    lines = Lines(emitter.indent)
    with lines.block("for (int64_t ta_k = ta_thread; ta_k < ta_count; ta_k += ta_stride) {", "}"):
        lines.line(f"const int64_t {i} = ta_carry_row[ta_k];")
        lines.line(f"if ({i} < 0) continue;")
        emitter.block(Block(merge.pre), names, lines)
        target = f"{names.of[store.array.name]}[{emitter.expr(store.index, names)}]"
        lines.line(emitter.atomic_add(target, "ta_carry_value[ta_k]", store.array))
    extras = carry_extras(value)
    out.comment("Nonzero-split fix-up: add the carried partial sums of rows split across "
                "threads.")
    emitter.kernel(out, f"{name}_carry", extras, (THREAD, STRIDE), _replace(fn, row, lines))


def scatter_kernel(out: Lines, fn: Function, name: str, loops: tuple[str, ...]) -> None:
    """The outermost loops' iterations onto threads; adding stores become atomic adds."""
    emitter = MappedEmitter(fn, frozenset(loops), atomics=True)
    out.comment(f"Iterations of {', '.join(loops)} map onto threads; additions to the output "
                f"are atomic.")
    emitter.kernel(out, f"{name}_scatter", (), (THREAD, STRIDE))


def reduce_kernel(out: Lines, fn: Function, name: str, plan: ReducePlan) -> None:
    """A sum to one element: each thread sums its iterations, the block sums its threads'
    partial sums (warp shuffles, then one warp over the warps' sums in shared memory), and one
    thread per block adds the block's sum atomically."""
    emitter = MappedEmitter(fn, frozenset({plan.loop}), atomics=True)
    names = emitter.names
    acc = names.of[plan.accumulator.name]
    kind = emitter.type_name(plan.accumulator.dtype)
    lines = Lines(emitter.indent)
    butterfly = (f"for (int32_t ta_offset = 16; ta_offset > 0; ta_offset >>= 1) "
                 f"{acc} += __shfl_xor_sync(0xffffffffu, {acc}, ta_offset);")
    lines.line(f"__shared__ {kind} ta_partial[32];")
    lines.line(butterfly)
    lines.line(f"if ((threadIdx.x & 31u) == 0) ta_partial[threadIdx.x >> 5] = {acc};")
    lines.line("__syncthreads();")
    with lines.block("if (threadIdx.x < 32) {", "}"):
        lines.line(f"{acc} = threadIdx.x < (blockDim.x >> 5) ? ta_partial[threadIdx.x] : "
                   f"({kind})0;")
        lines.line(butterfly)
        store = plan.store
        target = f"{names.of[store.array.name]}[{emitter.expr(store.index, names)}]"
        lines.line(f"if (threadIdx.x == 0) {emitter.atomic_add(target, acc, store.array)}")
    body = _replace(fn, plan.store, lines)
    out.comment(f"Iterations of {plan.loop} map onto threads; the block sums its threads' "
                f"partial sums and adds them atomically (blockDim.x a multiple of 32).")
    emitter.kernel(out, f"{name}_reduce", (), (THREAD, STRIDE), body)


def serial_kernel(out: Lines, fn: Function, name: str, why: str | None = None) -> None:
    """The whole body in one thread: launch ``<<<1, 1>>>``."""
    emitter = CudaEmitter()
    names = _Names(emitter.reserved)
    for var in introduced_vars(fn):
        names.add(var.name)
    if why:
        out.comment(why)
    out.comment("Single-threaded body: launch with <<<1, 1>>>.")
    emitter.signature(Function(name, fn.params, fn.body), names, out)
    with out.indented():
        try:
            emitter.block(fn.body, names, out)
        except KeyError as error:
            raise CompileError(undeclared_message(fn, error)) from None
        emitter.end_of_kernel(out)
    out.line("}")
    out.line()


def merge_path_helper(out: Lines, index: Scalar) -> None:
    """``ta_merge_path``: how many row ends lie before step ``diagonal`` of the merge path
    (the binary search of Merrill and Garland's merge-based SpMV)."""
    t = SCALAR_TYPES[index]
    out.line(f"#ifndef TA_MERGE_PATH_{index.value.upper()}")
    out.line(f"#define TA_MERGE_PATH_{index.value.upper()}")
    out.line(f"static __device__ __forceinline__ int64_t ta_merge_path(const {t}* __restrict__ "
             f"pos, int64_t begin, int64_t first, int64_t rows, int64_t nonzeros, "
             f"int64_t diagonal) {{")
    with out.indented():
        out.line("int64_t low = diagonal - nonzeros > 0 ? diagonal - nonzeros : 0;")
        out.line("int64_t high = diagonal < rows ? diagonal : rows;")
        with out.block("while (low < high) {", "}"):
            out.line("const int64_t middle = (low + high) >> 1;")
            out.line("if ((int64_t)pos[begin + middle + 1] - first <= diagonal - middle - 1) "
                     "low = middle + 1;")
            out.line("else high = middle;")
        out.line("return low;")
    out.line("}")
    out.line("#endif")
    out.line()


def _replace(fn: Function, row: Stmt, lines: Lines) -> list[Stmt | Lines]:
    """``fn``'s top-level statements with ``row`` replaced by the printed ``lines``."""
    return [lines if s is row else s for s in flat(fn.body)]


__all__ = ["LANES", "Extra", "MappedEmitter", "carry_extras", "merge_extras", "elements_kernel", "merge_kernels", "merge_path_helper",
           "reduce_kernel", "rows_kernel", "scatter_kernel", "serial_kernel"]
