"""Interpolation along the last axis with a few taps per output, emitted as LLVM IR.

``Y[i, a] = sum(t, W[t, a] * X[i, J[t, a]])`` over ``t < taps`` for every row ``i``: a linear
Resize's pass over the contiguous axis (two taps an output; cubic four, antialiased more).
As a statement over the interpolation matrix in CSR (``onnx/ops/resize.py``) each output
ran a compressed loop of two steps, scalar: 1.4-1.5 ms for 8192 rows of 64 -> 128 (float32,
one thread, Intel Xeon VM, 2026-12-07, ad hoc), where this kernel takes 0.61-0.64 ms. Here a
vector of ``lanes`` outputs gathers each tap's inputs from the row (in L1), multiplies by its
weights and accumulates in a register. A tap index of -1 is no tap
(rows of a matrix with fewer taps than others): its lanes are masked off, so padding never
reads memory or turns an infinite input into NaN.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tensoralg.codegen.gemm import masked_gather, vector_intrinsics
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, splat

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_taps"


def taps_module(dtype: np.dtype, lanes: int) -> ir.Module:
    """The module exporting ``int32 tensoralg_taps(X, Y, J, W, size_in, size_out, taps,
    begin, end, group)``: rows ``[begin, end)`` of ``Y`` (rows of ``size_out`` values) from
    those of ``X`` (rows of ``size_in``), ``J`` (int32) and ``W`` (``dtype``) holding a table
    of ``taps`` rows of ``size_out`` for each ``group`` rows (row ``i`` reads table ``i /
    group``: GridSample's images, each with its own points); every ``J`` is -1 or within
    ``[0, size_in)``. Returns 0.

    >>> "tensoralg_taps" in str(taps_module(np.dtype(np.float32), 16))
    True
    """
    dtype = np.dtype(dtype)
    scalar = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    module = ir.Module(name=f"taps_{dtype.name}")
    vector, mask_type, fma, load, store = vector_intrinsics(module, scalar, lanes)
    ints = ir.VectorType(I32, lanes)
    load_ints = declare(module, f"llvm.masked.load.v{lanes}i32.p0", ints,
                        (POINTER, I32, mask_type, ints))
    pointers = ir.VectorType(POINTER, lanes)
    gather = masked_gather(module, scalar, lanes)
    fn = ir.Function(module, ir.FunctionType(I32, (*[POINTER] * 4, *[I64] * 6)), name=ENTRY)
    x, y, j, w, size_in, size_out, taps, begin, end, group = fn.args
    for pointer in (x, y, j, w):
        pointer.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    align = ir.Constant(I32, dtype.itemsize)
    zero = ir.Constant(vector, [0.0] * lanes)
    iota = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    none = ir.Constant(ints, [-1] * lanes)
    row, column, tap = (entry_alloca(b, I64, part) for part in ("row", "column", "tap"))
    total = entry_alloca(b, vector, "total")
    with counted_loop(b, row, begin, lambda: end, "row"):
        i = b.load(row, typ=I64)
        x_row = b.gep(x, [b.mul(i, size_in)], inbounds=True, source_etype=scalar)
        y_row = b.gep(y, [b.mul(i, size_out)], inbounds=True, source_etype=scalar)
        table = b.mul(b.sdiv(i, group), b.mul(taps, size_out))
        with counted_loop(b, column, ir.Constant(I64, 0), lambda: size_out, "column",
                          step=lanes):
            a0 = b.load(column, typ=I64)
            lanes_in = b.icmp_signed("<", b.add(iota, splat(b, a0, iota.type)),
                                     splat(b, size_out, iota.type))
            b.store(zero, total)
            with counted_loop(b, tap, ir.Constant(I64, 0), lambda: taps, "tap"):
                at = b.add(table, b.add(b.mul(b.load(tap, typ=I64), size_out), a0))
                index = b.call(load_ints, [b.gep(j, [at], inbounds=True, source_etype=I32),
                                           ir.Constant(I32, 4), lanes_in, none])
                weight = b.call(load, [b.gep(w, [at], inbounds=True, source_etype=scalar),
                                       align, lanes_in, zero])
                real = b.and_(lanes_in,
                              b.icmp_signed(">=", index, ir.Constant(ints, [0] * lanes)))
                where = b.gep(x_row, [b.sext(index, ir.VectorType(I64, lanes))],
                              source_etype=scalar)
                where.type = pointers      # a vector GEP (llvmlite types it as one pointer)
                values = b.call(gather, [where, align, real, zero])
                b.store(b.call(fma, [weight, values, b.load(total, typ=vector)]), total)
            b.call(store, [b.load(total, typ=vector),
                           b.gep(y_row, [a0], inbounds=True, source_etype=scalar), align, lanes_in])
    b.ret(ir.Constant(I32, 0))
    return module


__all__ = ["ENTRY", "taps_module"]
