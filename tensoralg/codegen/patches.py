"""A 2-D convolution on NCHW planes through a patch block per panel, emitted as LLVM IR.

``Y[n, m, p] = act(bias[m] + sum(k, W[m, k] * patch[k, p]))``, ``k = (c, kh, kw)`` and
``patch[k, p] = X[n, c, oh * sh + kh * dh - pt, ow * sw + kw * dw - pl]`` (zero outside the
image) for output position ``p = (oh, ow)``. This is the pointwise kernel of
``codegen/planar.py`` with the input planes replaced by patch rows, built for one panel of
``NR`` positions at a time into a block that stays in L1 (``kc x NR`` values) while every
tile of output channels passes over it: no patch matrix, no layout copy, NCHW in and out.

It is meant for convolutions with few input channels (a CNN's first layer: 3 channels, a
7 x 7 kernel, K = 147), where the channels-last GEMM convolution fills only part of its
vector lanes (96 output channels in 64 + 32 lanes) and then transposes a large output back to
NCHW (ResNet's and SqueezeNet's first layers: a third of the layer's time), and where
compiling the weights in (``codegen/conv.py``) would unroll too many multiply-adds. Here
lanes run over output positions, every lane busy but those past the plane's end.

A vector of a patch row whose positions lie in one output row reads one input row: a masked
load (stride 1) or two and a shuffle of their even cells (stride 2); a vector across two
output rows, or any stride past 2, gathers. Padding is the mask; masked-off lanes are written
to the block as zeros. The geometry and the taps are run-time arguments (a table of each
patch row's offset and kernel shift): one module per dtype serves every convolution, compiled
once (a module per geometry with its taps unrolled took 12 s to compile for 3 x 7 x 7).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from tensoralg.codegen.gemm import GemmShape, _splat
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, if_else
from tensoralg.codegen.planar import MR, TILE_TYPE, _micro_kernel, call_tile_rows, tile_index
from tensoralg.codegen.tile_table import declare_table

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_patches"
TILES = "tensoralg_patches_tiles"   # the driver's table of tiles (codegen/tile_table.py)
# The geometry argument: int64 values at these indexes.
GEOMETRY = ("x_image", "height", "width", "out_channels", "out_height", "out_width",
            "stride_h", "stride_w", "pad_top", "pad_left", "depth", "y_image")


def patch_module(shape: GemmShape) -> ir.Module:
    """The module exporting ``int32 tensoralg_patches(X, Y, W, bias, flags, geometry, taps,
    begin, end)``: panels ``[begin, end)`` of the flattened ``(image, panel)`` range
    (``shape.nr`` output positions each) of a group-1 convolution from ``X`` (NCHW) and the
    row-major weight ``W`` (M x depth) into ``Y`` (NCHW). ``geometry`` holds the int64 values
    named by :data:`GEOMETRY`; ``taps`` three int64 per patch row ``k = (c, kh, kw)``: its
    offset in an image (``c * H * W + dy * W + dx``), ``dy = kh * dh`` and ``dx = kw * dw``.
    ``bias`` and ``flags`` as in ``planar_module``. Returns 0.

    >>> "tensoralg_patches" in str(patch_module(GemmShape.for_host(np.float32, True)))
    True
    """
    module = ir.Module(name=f"patches_{shape.dtype.name}")
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()
    # The one-row tiles live here; the others are built on demand (codegen/tile_table.py).
    one_row = {vectors: _micro_kernel(module, shape, scalar, 1, vectors)
               for vectors in range(1, shape.vectors + 1)}
    table, fallbacks = declare_table(module, TILES, MR * shape.vectors, TILE_TYPE, {
        tile_index(1, vectors): kernel for vectors, kernel in one_row.items()})
    fn = ir.Function(module, ir.FunctionType(I32, (POINTER,) * 4 + (I32, POINTER, POINTER,
                                                                     I64, I64)), name=ENTRY)
    x, y, w, bias, flags, geometry, taps, begin, end = fn.args
    for pointer in (x, y, w, bias):
        pointer.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    lanes, nr = shape.lanes, shape.nr
    ints = ir.VectorType(I32, lanes)

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    def smaller(a: ir.Value, c: ir.Value) -> ir.Value:
        return b.select(b.icmp_signed("<", a, c), a, c)

    def ceil_div(size: ir.Value, block: ir.Value) -> ir.Value:
        return b.sdiv(b.add(size, b.sub(block, const(1))), block)

    geo = {name: b.load(b.gep(geometry, [const(i)], inbounds=True, source_etype=I64), typ=I64)
           for i, name in enumerate(GEOMETRY)}
    positions = b.mul(geo["out_height"], geo["out_width"])
    depth = geo["depth"]
    panels = ceil_div(positions, const(nr))
    # Patch rows in near-equal blocks of at most kc, as planar_module splits input planes.
    k_count = ceil_div(depth, const(shape.kc))
    k_count = b.select(b.icmp_signed("<", k_count, const(1)), const(1), k_count)
    k_step = ceil_div(depth, k_count)
    block = b.alloca(ir.ArrayType(scalar, shape.kc * nr), name="patch")
    block.align = 64
    patch = b.bitcast(block, POINTER)
    unit, kb, tb, tap = (entry_alloca(b, I64, name) for name in ("unit", "kblock", "tile", "tap"))
    a_rows = entry_alloca(b, ir.ArrayType(POINTER, MR), "a_rows")
    c_rows = entry_alloca(b, ir.ArrayType(POINTER, MR), "c_rows")
    epilogue = b.shl(flags, ir.Constant(I32, 2))
    tiles = ceil_div(geo["out_channels"], const(MR))
    wide_width = _splat(b, b.trunc(geo["width"], I32), ints)
    wide_height = _splat(b, b.trunc(geo["height"], I32), ints)
    context = _Context(b, shape, scalar, block, tap, taps, wide_height, wide_width, geo)
    with counted_loop(b, unit, begin, lambda: end, "unit"):
        u = b.load(unit, typ=I64)
        image = b.sdiv(u, panels)
        j0 = b.mul(b.sub(u, b.mul(image, panels)), const(nr))
        ncols = smaller(b.sub(positions, j0), const(nr))
        vectors = ceil_div(ncols, const(lanes))
        x_image = at(x, b.mul(image, geo["x_image"]))
        y_image = at(y, b.mul(image, geo["y_image"]))
        panel = [context.lanes_of(j0, v, positions) for v in range(shape.vectors)]
        with counted_loop(b, kb, const(0), lambda: k_count, "kblock"):
            k0 = b.mul(b.load(kb, typ=I64), k_step)
            size = smaller(k_step, b.sub(depth, k0))
            size = b.select(b.icmp_signed("<", size, const(0)), const(0), size)
            for v in range(shape.vectors):
                context.fill(x_image, panel[v], v, k0, size)
            later = b.zext(b.icmp_signed(">", k0, const(0)), I32)
            last = b.zext(b.icmp_signed(">=", b.add(k0, size), depth), I32)
            mode = b.or_(b.or_(later, b.shl(last, ir.Constant(I32, 1))), epilogue)
            with counted_loop(b, tb, const(0), lambda: tiles, "tiles"):
                m0 = b.mul(b.load(tb, typ=I64), const(MR))
                rows = smaller(b.sub(geo["out_channels"], m0), const(MR))
                for slot in range(MR):
                    m = b.select(b.icmp_signed("<", const(slot), rows),
                                 b.add(m0, const(slot)), m0)
                    b.store(at(w, b.add(b.mul(m, depth), k0)),
                            b.gep(a_rows, [const(0), const(slot)], inbounds=True))
                    b.store(at(y_image, b.mul(m, positions)),
                            b.gep(c_rows, [const(0), const(slot)], inbounds=True))
                args = [b.bitcast(a_rows, POINTER), patch, const(nr),
                        b.bitcast(c_rows, POINTER), j0, size, ncols, at(bias, m0), mode,
                        at(bias, geo["out_channels"]), ir.Constant(I1, 0),
                        b.bitcast(c_rows, POINTER),    # no residual: never read
                        const(0)]    # A_next: a row-major weight prefetches nothing
                call_tile_rows(b, table, fallbacks, one_row, scalar, rows, vectors, args)
    b.ret(ir.Constant(I32, 0))
    return module


class _Context:
    """What the patch rows of one panel are built from: the module's intrinsics, the patch
    block, the tap table and the geometry."""

    def __init__(self, b: ir.IRBuilder, shape: GemmShape, scalar: ir.Type, block: ir.Value,
                 tap: ir.Value, taps: ir.Value, height: ir.Value, width: ir.Value,
                 geo: dict[str, ir.Value]) -> None:
        self.b, self.shape, self.scalar, self.block, self.tap = b, shape, scalar, block, tap
        self.taps, self.height, self.width, self.geo = taps, height, width, geo
        lanes = shape.lanes
        self.vector = ir.VectorType(scalar, lanes)
        self.ints = ir.VectorType(I32, lanes)
        self.mask = ir.VectorType(I1, lanes)
        name = "v{}f{}".format(lanes, scalar.intrinsic_name[1:])
        module = b.module
        self.gather = declare(module, f"llvm.masked.gather.{name}.v{lanes}p0", self.vector,
                              (ir.VectorType(POINTER, lanes), I32, self.mask, self.vector))
        self.load = declare(module, f"llvm.masked.load.{name}.p0", self.vector,
                            (POINTER, I32, self.mask, self.vector))
        self.align = ir.Constant(I32, shape.dtype.itemsize)
        self.zero = ir.Constant(self.vector, [0.0] * lanes)

    def lanes_of(self, j0: ir.Value, v: int, positions: ir.Value) -> tuple:
        """Vector ``v`` of the panel at ``j0``: per lane whether its position exists, its
        first input row and column and their offset in a plane; and its first position's
        output row and column."""
        b, g, lanes, ints = self.b, self.geo, self.shape.lanes, self.ints

        def splat(value: ir.Value) -> ir.Value:
            return _splat(b, b.trunc(value, I32), ints)

        p = b.add(splat(j0), ir.Constant(ints, [v * lanes + i for i in range(lanes)]))
        oh = b.udiv(p, splat(g["out_width"]))
        ow = b.sub(p, b.mul(oh, splat(g["out_width"])))
        row0 = b.sub(b.mul(oh, splat(g["stride_h"])), splat(g["pad_top"]))
        col0 = b.sub(b.mul(ow, splat(g["stride_w"])), splat(g["pad_left"]))
        valid = b.icmp_signed("<", p, splat(positions))
        p0 = b.add(j0, ir.Constant(I64, v * lanes))
        oh0 = b.udiv(p0, g["out_width"])
        ow0 = b.sub(p0, b.mul(oh0, g["out_width"]))
        return valid, row0, col0, b.add(b.mul(row0, self.width), col0), oh0, ow0

    def fill(self, x_image: ir.Value, lanes_of: tuple, v: int, k0: ir.Value,
             size: ir.Value) -> None:
        """Vector ``v`` of patch rows ``k0 .. k0 + size - 1``. A vector within one output row
        reads along one input row (stride 1: a masked load; 2: two and a shuffle); one
        across two rows, or any other stride, gathers."""
        b, g, lanes = self.b, self.geo, self.shape.lanes
        valid, row0, col0, offset, oh0, ow0 = lanes_of
        one_row = b.icmp_signed("<=", b.add(ow0, ir.Constant(I64, lanes)), g["out_width"])
        stride = g["stride_w"]
        row_start = b.sub(b.mul(oh0, g["stride_h"]), g["pad_top"])
        col_start = b.sub(b.mul(ow0, stride), g["pad_left"])
        unit = b.and_(one_row, b.icmp_signed("==", stride, ir.Constant(I64, 1)))
        pair = b.and_(one_row, b.icmp_signed("==", stride, ir.Constant(I64, 2)))
        with if_else(b, unit, f"unit{v}") as (then, otherwise):
            with then():
                self._rows(v, k0, size, lambda offset_k, dy, dx: self._loaded(
                    x_image, offset_k, dy, dx, row_start, col_start, 1))
            with otherwise():
                with if_else(b, pair, f"pair{v}") as (then2, otherwise2):
                    with then2():
                        self._rows(v, k0, size, lambda offset_k, dy, dx: self._loaded(
                            x_image, offset_k, dy, dx, row_start, col_start, 2))
                    with otherwise2():
                        self._rows(v, k0, size, lambda offset_k, dy, dx: self._gathered(
                            x_image, offset_k, dy, dx, valid, row0, col0, offset))

    def _rows(self, v: int, k0: ir.Value, size: ir.Value, value_of: Any) -> None:
        """For each patch row of the block, ``value_of(offset, dy, dx)`` stored at column
        ``v * lanes`` of its row."""
        b, nr = self.b, self.shape.nr
        with counted_loop(b, self.tap, ir.Constant(I64, 0), lambda: size, f"taps{v}"):
            r = b.load(self.tap, typ=I64)
            entry = b.mul(b.add(k0, r), ir.Constant(I64, 3))
            offset_k, dy, dx = (b.load(b.gep(self.taps, [b.add(entry, ir.Constant(I64, i))],
                                             inbounds=True, source_etype=I64), typ=I64)
                                for i in range(3))
            cell = b.gep(self.block, [ir.Constant(I64, 0), b.add(b.mul(r, ir.Constant(
                I64, nr)), ir.Constant(I64, v * self.shape.lanes))], inbounds=True)
            b.store(value_of(offset_k, dy, dx), b.bitcast(cell, ir.PointerType(self.vector)),
                    align=self.shape.dtype.itemsize)

    def _gathered(self, x_image: ir.Value, offset_k: ir.Value, dy: ir.Value, dx: ir.Value,
                  valid: ir.Value, row0: ir.Value, col0: ir.Value, offset: ir.Value
                  ) -> ir.Value:
        """The lanes' cells of one tap by a masked gather (padding and positions past the
        plane masked: they read nothing and hold zero)."""
        b, ints = self.b, self.ints
        inside = b.and_(
            b.icmp_unsigned("<", b.add(row0, _splat(b, b.trunc(dy, I32), ints)), self.height),
            b.icmp_unsigned("<", b.add(col0, _splat(b, b.trunc(dx, I32), ints)), self.width))
        base = b.gep(x_image, [offset_k], source_etype=self.scalar)
        where = b.gep(base, [offset], source_etype=self.scalar)
        where.type = ir.VectorType(POINTER, self.shape.lanes)
        return b.call(self.gather, [where, self.align, b.and_(valid, inside), self.zero])

    def _loaded(self, x_image: ir.Value, offset_k: ir.Value, dy: ir.Value, dx: ir.Value,
                row_start: ir.Value, col_start: ir.Value, stride: int) -> ir.Value:
        """The lanes' cells of one tap along one input row: ``stride`` masked loads, and for
        stride 2 their even cells picked by a shuffle. Cells outside the image are masked:
        never read, zero."""
        b, g, lanes = self.b, self.geo, self.shape.lanes
        wide = ir.VectorType(I64, lanes)
        row_in = b.icmp_unsigned("<", b.add(row_start, dy), g["height"])
        first = b.add(col_start, dx)
        # offset_k is c * H * W + dy * W + dx: from the row of output row 0's first column
        base = b.gep(x_image, [b.add(offset_k, b.add(b.mul(row_start, g["width"]),
                                                     col_start))], source_etype=self.scalar)
        parts = []
        for half in range(stride):
            cells = list(range(half * lanes, (half + 1) * lanes))
            column = b.add(_splat(b, first, wide), ir.Constant(wide, cells))
            mask = b.and_(b.icmp_unsigned("<", column, _splat(b, g["width"], wide)),
                          _splat(b, row_in, self.mask))
            if stride == 2:
                mask = b.and_(mask, ir.Constant(self.mask, [e % 2 == 0 for e in cells]))
            where = b.gep(base, [ir.Constant(I64, cells[0])], source_etype=self.scalar)
            parts.append(b.call(self.load, [where, self.align, mask, self.zero]))
        if stride == 1:
            return parts[0]
        return b.shuffle_vector(parts[0], parts[1], ir.Constant(
            ir.VectorType(I32, lanes), [2 * i for i in range(lanes)]))


def tap_table(channels: int, height: int, width: int, kernel: tuple[int, int],
              dilations: tuple[int, int]) -> np.ndarray:
    """The ``taps`` argument of ``tensoralg_patches``: per patch row ``(c, kh, kw)`` its
    offset in an image, ``dy`` and ``dx``.

    >>> tap_table(2, 5, 5, (1, 2), (1, 3)).tolist()
    [[0, 0, 0], [3, 0, 3], [25, 0, 0], [28, 0, 3]]
    """
    c, kh, kw = np.meshgrid(np.arange(channels), np.arange(kernel[0]), np.arange(kernel[1]),
                            indexing="ij")
    dy, dx = kh.ravel() * dilations[0], kw.ravel() * dilations[1]
    return np.ascontiguousarray(np.stack([c.ravel() * height * width + dy * width + dx, dy,
                                          dx], axis=1).astype(np.int64))


__all__ = ["ENTRY", "GEOMETRY", "patch_module", "tap_table"]
