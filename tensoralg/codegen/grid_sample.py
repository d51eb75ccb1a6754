"""2-D bilinear GridSample, its taps computed in the kernel, emitted as LLVM IR.

``Y[n, c, p] = sum over the 4 corners of w * X[n, c, iy, ix]`` for the grid point ``p`` of
image ``n``: the coordinates unnormalised, floored and weighted in the grid's dtype exactly as
``onnx/ops/grid_sample.py`` computes them in NumPy (``((g + 1) * size - 1) / 2``, or ``(g +
1) / 2 * (size - 1)`` with ``align_corners``; each weight the float64 product of its two axis
weights, rounded to the dtype), and the corners summed in the same order (y0x0, y0x1, y1x0,
y1x1) by fused multiply-adds, so the result is the gather route's to the bit. ``zeros``
padding masks off corners outside the image (they read nothing); ``border`` clamps the
coordinate first and every corner after. Computed in NumPy for each run, the taps and weights
of RT-DETR's deformable attention took ~0.45 ms a GridSample (ad hoc, 2026-12-07), half of
onnxruntime's time for the whole model.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tensoralg.codegen.gemm import masked_gather, vector_intrinsics
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, splat

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_grid_sample"
FAR = 2.0 ** 40     # as onnx/ops/grid_sample.FAR: how far outside a coordinate is kept


def grid_sample_module(dtype: np.dtype, lanes: int, align_corners: bool, border: bool
                       ) -> ir.Module:
    """The module exporting ``int32 tensoralg_grid_sample(X, G, Y, channels, height, width,
    points, begin, end)``: images ``[begin, end)`` of ``Y`` (N, C, points) sampled from ``X``
    (N, C, height, width) at ``G`` (N, points, 2: x then y, in [-1, 1] for the image). Returns
    0.

    >>> "tensoralg_grid_sample" in str(grid_sample_module(np.dtype(np.float32), 16, False,
    ...                                                   False))
    True
    """
    dtype = np.dtype(dtype)
    scalar = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    double = ir.DoubleType()
    module = ir.Module(name=f"grid_sample_{dtype.name}_{int(align_corners)}{int(border)}")
    vector, mask_type, fma, load, store = vector_intrinsics(module, scalar, lanes)
    wide = ir.VectorType(double, lanes)
    longs = ir.VectorType(I64, lanes)
    pointers = ir.VectorType(POINTER, lanes)
    gather = masked_gather(module, scalar, lanes)
    floor = declare(module, "llvm.floor.v{}f{}".format(lanes, scalar.intrinsic_name[1:]), vector,
                    (vector,))
    fn = ir.Function(module, ir.FunctionType(I32, (*[POINTER] * 3, *[I64] * 6)), name=ENTRY)
    x, g, y, channels, height, width, points, begin, end = fn.args
    for pointer in (x, g, y):
        pointer.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    align = ir.Constant(I32, dtype.itemsize)
    zero = ir.Constant(vector, [0.0] * lanes)
    one = ir.Constant(vector, [1.0] * lanes)
    two = ir.Constant(vector, [2.0] * lanes)
    iota = ir.Constant(longs, list(range(lanes)))
    image, column, channel = (entry_alloca(b, I64, part) for part in ("n", "p", "c"))

    def as_vector(value: ir.Value) -> ir.Value:
        return splat(b, b.sitofp(value, scalar), vector)

    def unnormalised(coordinate: ir.Value, size: ir.Value) -> ir.Value:
        if align_corners:
            return b.fmul(b.fdiv(b.fadd(coordinate, one), two), b.fsub(as_vector(size), one))
        return b.fdiv(b.fsub(b.fmul(b.fadd(coordinate, one), as_vector(size)), one), two)

    def clamped(value: ir.Value, low: ir.Value, high: ir.Value) -> ir.Value:
        value = b.select(b.fcmp_ordered("<", value, low), low, value)
        return b.select(b.fcmp_ordered(">", value, high), high, value)

    def axis(coordinate: ir.Value, size: ir.Value) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
        """The two taps of one axis: their indices (int64 vectors, clamped under border) and
        validity masks, and weights (float64 vectors)."""
        where = unnormalised(coordinate, size)
        last = b.fsub(as_vector(size), one)
        if border:
            low, high = (zero, last) if align_corners else \
                (ir.Constant(vector, [-0.5] * lanes),
                 b.fsub(as_vector(size), ir.Constant(vector, [0.5] * lanes)))
            outside = b.or_(b.fcmp_ordered("<", where, low), b.fcmp_ordered(">", where, high))
            where = b.select(outside, clamped(where, zero, last), where)
        if not border:
            # A finite grid may still put a point far outside (1e30): keep it where a 64-bit
            # index holds it (a float beyond int64 converts to poison), still outside the
            # image, so its taps stay masked off as in NumPy.
            far = ir.Constant(vector, [FAR] * lanes)
            where = clamped(where, b.fsub(zero, far), far)
        start = b.call(floor, [where])
        t = b.fsub(where, start)
        first = b.fptosi(start, longs)
        indices = [first, b.add(first, ir.Constant(longs, [1] * lanes))]
        limit = splat(b, size, longs)
        if border:
            nought = ir.Constant(longs, [0] * lanes)
            top = b.sub(limit, ir.Constant(longs, [1] * lanes))
            indices = [b.select(b.icmp_signed("<", i, nought), nought,
                                b.select(b.icmp_signed(">", i, top), top, i)) for i in indices]
            valid = [ir.Constant(mask_type, [1] * lanes)] * 2
        else:
            valid = [b.and_(b.icmp_signed(">=", i, ir.Constant(longs, [0] * lanes)),
                            b.icmp_signed("<", i, limit)) for i in indices]
        weights = [b.fpext(b.fsub(one, t), wide) if scalar != double else b.fsub(one, t),
                   b.fpext(t, wide) if scalar != double else t]
        return list(zip(indices, valid, weights))

    plane = b.mul(height, width)
    with counted_loop(b, image, begin, lambda: end, "image"):
        n = b.load(image, typ=I64)
        grid_image = b.gep(g, [b.mul(b.mul(n, points), ir.Constant(I64, 2))], inbounds=True,
                           source_etype=scalar)
        with counted_loop(b, column, ir.Constant(I64, 0), lambda: points, "points",
                          step=lanes):
            p0 = b.load(column, typ=I64)
            at = b.add(iota, splat(b, p0, longs))
            lanes_in = b.icmp_signed("<", at, splat(b, points, longs))
            pairs = b.mul(at, ir.Constant(longs, [2] * lanes))
            coordinates = []
            for offset in (0, 1):       # x, then y
                where = b.gep(grid_image, [b.add(pairs, ir.Constant(longs, [offset] * lanes))],
                              source_etype=scalar)
                where.type = pointers      # a vector GEP (llvmlite types it as one pointer)
                coordinates.append(b.call(gather, [where, align, lanes_in, zero]))
            xs, ys = axis(coordinates[0], width), axis(coordinates[1], height)
            corners = []
            for iy, vy, wy in ys:
                for ix, vx, wx in xs:
                    weight = b.fmul(wy, wx)
                    if scalar != double:
                        weight = b.fptrunc(weight, vector)
                    corners.append((b.add(b.mul(iy, splat(b, width, longs)), ix),
                                    b.and_(lanes_in, b.and_(vy, vx)), weight))
            with counted_loop(b, channel, ir.Constant(I64, 0), lambda: channels, "channel"):
                c = b.load(channel, typ=I64)
                row = b.add(b.mul(n, channels), c)
                source = b.gep(x, [b.mul(row, plane)], inbounds=True, source_etype=scalar)
                total = zero
                for index, valid, weight in corners:
                    where = b.gep(source, [index], source_etype=scalar)
                    where.type = pointers
                    value = b.call(gather, [where, align, valid, zero])
                    total = b.call(fma, [weight, value, total])
                target = b.gep(y, [b.add(b.mul(row, points), p0)], inbounds=True,
                               source_etype=scalar)
                b.call(store, [total, target, align, lanes_in])
    b.ret(ir.Constant(I32, 0))
    return module


__all__ = ["ENTRY", "grid_sample_module"]
