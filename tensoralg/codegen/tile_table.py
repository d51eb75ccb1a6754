"""Register-tile micro-kernels built on demand: a driver calls its tiles through a table.

The hand-scheduled drivers (``codegen/gemm.py``) keep one fully unrolled micro-kernel per
tile shape (rows x vectors): 38 of them for float32 on AVX-512, where a model's layers use a
handful (a batch-1 dense layer only one-row tiles; 256 rows, tiles of 5 and 6). Built as one
module they took ~5 s of LLVM (the optimiser inlined all of them into the driver): most of a
model's first planned run with an empty kernel cache. So the driver module holds only the
one-row tiles and a table of pointers, zero at load, and each other variant is a module of
its own (~0.05-0.15 s), built, cached and written into the table when a call that will
use it is bound (``runtime/tile_table.py``). A variant missing from the table is never
skipped: the driver runs its rows one at a time through the one-row tile (correct, slower)
and counts the event, so that tests can check the binding predicted every variant.
"""
from __future__ import annotations

from typing import Callable, Sequence

from llvmlite import ir

from tensoralg.codegen.llvm_helpers import counted_loop, entry_alloca, if_else

I64 = ir.IntType(64)


def declare_table(module: ir.Module, name: str, size: int, tile: ir.FunctionType,
                  initial: dict[int, ir.Function]) -> tuple[ir.GlobalVariable,
                                                             ir.GlobalVariable]:
    """The exported table of ``size`` tile pointers named ``name``, holding the driver's own
    tiles ``initial`` (slot to function; the other slots zero: not built yet), and its
    fallback counter ``name + "_fallbacks"`` (an int64)."""
    pointer = tile.as_pointer()
    table = ir.GlobalVariable(module, ir.ArrayType(pointer, size), name=name)
    table.initializer = ir.Constant(table.value_type, [
        initial[slot] if slot in initial else ir.Constant(pointer, None)
        for slot in range(size)])
    table.align = 64
    counter = ir.GlobalVariable(module, I64, name=f"{name}_fallbacks")
    counter.initializer = ir.Constant(I64, 0)
    return table, counter


def call_tile(builder: ir.IRBuilder, table: ir.GlobalVariable, counter: ir.GlobalVariable,
              index: ir.Value, args: Sequence[ir.Value], rows: ir.Value,
              one_row: Callable[[ir.Value], None]) -> None:
    """Call the table's tile ``index`` on ``args``; where it is not built, count the event and
    call ``one_row(r)`` for each of the tile's ``rows`` rows instead (it emits the one-row
    tile's call for row ``r``)."""
    zero = ir.Constant(ir.IntType(32), 0)
    slot = builder.gep(table, [zero, index], inbounds=True)
    tile = builder.load(slot, typ=table.value_type.element)
    missing = builder.icmp_unsigned("==", tile, ir.Constant(tile.type, None))
    with if_else(builder, missing, "tile.missing") as (then, otherwise):
        with then():
            builder.atomic_rmw("add", counter, ir.Constant(I64, 1), "monotonic")
            r = entry_alloca(builder, I64, "tile.row")
            with counted_loop(builder, r, ir.Constant(I64, 0), lambda: rows, "tile.rows"):
                one_row(builder.load(r, typ=I64))
        with otherwise():
            builder.call(tile, list(args))


def call_by_width(builder: ir.IRBuilder, vectors: ir.Value, kernels: dict[int, ir.Function],
                  args: Sequence[ir.Value]) -> None:
    """Call ``kernels[vectors]`` on ``args`` (``vectors`` an int64 known only at run time:
    the one-row tile of a panel's width)."""
    done = builder.append_basic_block("width.done")
    switch = builder.switch(vectors, done)
    for width, kernel in kernels.items():
        case = builder.append_basic_block(f"width.{width}")
        switch.add_case(ir.Constant(I64, width), case)
        builder.position_at_end(case)
        builder.call(kernel, list(args))
        builder.branch(done)
    builder.position_at_end(done)


__all__ = ["call_by_width", "call_tile", "declare_table"]
