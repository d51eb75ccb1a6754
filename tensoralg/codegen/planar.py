"""A pointwise (1x1) convolution on NCHW planes, emitted as LLVM IR with explicit vectors.

``Y[n, m, p] = act(sum(c, W[m, c] * X[n, c, p]) + bias[m])`` for every image ``n``, output
channel ``m`` and position ``p`` (``OH * OW`` flattened; stride 1, no padding, so the input's
positions are the output's). Per image this is the product ``W (M x C) @ X[n] (C x P)``, and
NCHW is already the layout that product wants: row ``c`` of ``X[n]`` is a channel plane, and
row ``m`` of ``Y[n]`` an output plane. The channels-last GEMM convolution
(``runtime/gemm.py``) instead copies the input into NHWC and transposes its output back, two
passes over the activations that, for the cheap 1x1 layers of MobileNet-style networks, cost
more than the product (3136 x 24 x 144: 0.15 ms of multiply-adds, two copies of 1.2 MB).

The register tile is the GEMM's (``codegen/gemm.py``), turned around: ``MR`` output channels
by ``vectors`` vectors of positions. Per step ``c`` it loads ``vectors`` vectors of the input
plane ``c`` (masked past the last position) and broadcasts ``MR`` weights ``W[m, c]`` (each
row of ``W`` read along ``c``), for ``MR x vectors`` fused multiply-adds. A block of ``kc``
input planes' columns (``kc x NR`` values) stays in L1 while every tile of output channels
passes over it; the bias (one per tile row) and the activation are applied in registers.

Edges are exact: the last panel's positions are masked (masked loads and stores touch no
memory outside the mask), the last tile of channels has fewer rows, and ``C = 0`` still writes
``act(bias)``.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from tensoralg.codegen.activation import apply_to_tile
from tensoralg.codegen.gemm import (
    FLAG_BIAS,
    FLAG_CLIP,
    FLAG_RELU,
    GemmShape,
    _splat,
    emit_clamp,
    vector_intrinsics,
)
from tensoralg.codegen.llvm_helpers import (
    counted_loop,
    entry_alloca,
    if_else,
    if_then,
    prefetch,
)
from tensoralg.codegen.tile_table import call_by_width, call_tile, declare_table

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_planar"
TILES = "tensoralg_planar_tiles"    # the driver's table of tiles (codegen/tile_table.py)
# micro(A_rows, B, ldb, C_rows, col, kc, ncols, bias, mode, bounds, stream, R_rows, A_next):
# see _micro_kernel
TILE_TYPE = ir.FunctionType(ir.VoidType(), (POINTER, POINTER, I64, POINTER, I64, I64, I64,
                                            POINTER, I32, POINTER, I1, POINTER, I64))
MR = 6      # output channels per register tile
UNIT_BLOCK_BYTES = 32768  # input values a unit keeps in L1 (of 48 KiB) across its tiles
# A unit's input block when few tiles of output channels sweep it (under MANY_TILES): then
# each value is read a few times only, and what costs is streaming the input planes in, one
# stream a plane; runs of a panel or two a plane (72 planes of 3136 positions: one panel of
# 64 values each) left the prefetchers behind. One thread, batch 8, float32, 32 against 128
# KiB: 24 <- 72 channels at 56 x 56 10-17 -> 30-34 GFMA/s, 144 <- 24 19 -> 26-27, 48 <- 16
# at 112 x 112 17 -> 20-22, 32 <- 192 at 28 x 28 32-41 -> 37-45; 240 <- 40 (40 tiles) 37-39
# -> 34-35, so a block swept by many tiles stays in L1 (``python benchmarks/conv_epilogue_ab.py
# kernels``; its absolute rates follow the VM's drift).
STREAM_BLOCK_BYTES = 131072
MANY_TILES = 32
# How many panels ahead the first tile of output channels to sweep a block of input planes
# prefetches each plane (0: no prefetch). That sweep streams the planes in from memory, one
# stream a plane, 256 bytes a plane per panel: far more streams than the hardware prefetchers
# follow (128 planes of 2916 positions left them at 4 GB/s). One thread, batch 8, float32,
# same-process A/B (``python benchmarks/conv_epilogue_ab.py kernels``): 16 <- 128 channels at
# 54 x 54 13 -> 16, 16 <- 96 18 -> 23, 48 <- 384 at 27 x 27 27 -> 30, 24 <- 72 at 56 x 56
# 23 -> 25 GFMA/s; layers whose blocks stay in cache unchanged; one panel ahead gained less,
# three or four no more, into L2 instead of L1 slightly less.
PREFETCH_PANELS = 2
# Whether a tile prefetches its output lines for writing before its K loop. Its rows lie in
# MR planes, 256 bytes each, and a block's tiles write as many planes as there are output
# channels: without it each store waited, after the K loop, for its line to be read for
# ownership from memory. One thread, float32, batch 8, same-process A/B (``python
# benchmarks/conv_epilogue_ab.py kernels``, GFMA/s, two runs): 240 <- 40 channels at 28 x 28
# 15-29 -> 29-42, 48 <- 16 at 112 x 112 16-19 -> 23-24, 24 <- 48 at 56 x 56 22-25 -> 26-32,
# 144 <- 24 25-27 -> 28-36, 256 <- 64 28 -> 28-35, every row of that table at least even;
# whole models at batch 8 (ad hoc script, not kept): MobileNetV2 1.20x, ResNet-50 1.04x,
# MnasNet 1.05x (batch 1), SqueezeNet 1.03x.
OUTPUT_PREFETCH = True
# Fewer input planes than this are few enough streams for the hardware prefetchers, and the
# prefetches only took load slots: 48 <- 16 at 112 x 112 16.0 -> 14.4 GFMA/s, 240 <- 40 at
# 28 x 28 24.7 -> 22.7 with them (the "prefetch at any C" column of ``python
# benchmarks/conv_epilogue_ab.py kernels``).
PREFETCH_MIN_PLANES = 64
# The flag bit (of ``flags``, beside ``codegen.epilogue``'s) that adds a residual tile, read
# from ``R`` at the output's offsets, after the bias and before the activation: a bottleneck's
# ``relu(conv1x1(x) + b + r)`` in one pass, where an Add after the convolution read the
# output back and wrote it again.
FLAG_RESIDUAL = 1 << 10
# Whether a tile prefetches, one line a step, the next tile's weights for the same block of
# input planes (``C * MR`` values on in the packed weight). At batch 1 every weight is read
# from memory once per panel sweep, and each tile's block starts a new stream that the
# hardware prefetchers pick up late. One thread, same process, whole models, off against on
# (an ad hoc script, 2026-12-05): ResNeXt-50 0.91, ResNet-50 0.95-0.97, MnasNet 0.97,
# RegNetX-400MF and DenseNet-121 0.98, MobileNetV2 1.01 (noise), ResNet-50 at batch 8 1.00.
WEIGHT_PREFETCH = True


def planar_module(shape: GemmShape) -> ir.Module:
    """The module exporting ``int32 tensoralg_planar(X, Y, W, bias, flags, M, C, P, x_image,
    y_image, block_panels, begin, end, R, r_image)``: units ``[begin, end)`` of the flattened
    ``(image, block)`` range, a block being ``block_panels`` panels of ``shape.nr`` positions,
    from ``X`` (images ``x_image`` elements apart, planes of ``P``) and the weight ``W`` packed
    by :func:`pack_weight` into ``Y`` (images ``y_image`` apart).
    ``bias`` holds M values, added when ``flags & 1``, then the activation's parameters
    (``codegen.epilogue.PARAMETERS``): ``flags & 2`` is ReLU, ``flags & 4`` the clamp
    between the first two, a bit of ``SMOOTH_FLAGS`` a smooth activation. With
    ``flags & FLAG_RESIDUAL`` the residual ``R`` (shaped as ``Y``, images ``r_image`` apart)
    is added before the activation; without it ``R`` must still be a valid pointer (``Y``
    itself). Returns 0.

    >>> "tensoralg_planar" in str(planar_module(GemmShape.for_host(np.float32, avx512=True)))
    True
    """
    module = ir.Module(name=f"planar_{shape.dtype.name}")
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()
    # The one-row tiles live here; the others are built on demand (codegen/tile_table.py).
    one_row = {vectors: _micro_kernel(module, shape, scalar, 1, vectors, MR)
               for vectors in range(1, shape.vectors + 1)}
    _driver(module, shape, scalar, one_row)
    return module


def tile_index(rows: int, vectors: int) -> int:
    """The slot of the ``rows x vectors`` tile in a driver's table (this module's and
    ``codegen/patches.py``'s)."""
    return (vectors - 1) * MR + rows - 1


def tile_entry(a_step: int, rows: int, vectors: int) -> str:
    """The exported name of the ``rows x vectors`` tile reading its weights ``a_step`` apart
    (``MR``: this module's packed weight; 1: ``codegen/patches.py``'s row-major one)."""
    return f"tensoralg_planar{a_step}_tile{rows}x{vectors}"


def tile_module(shape: GemmShape, a_step: int, rows: int, vectors: int) -> ir.Module:
    """The module exporting the ``rows x vectors`` micro-kernel alone (:func:`tile_entry`).

    >>> shape = GemmShape.for_host(np.float32, avx512=False)
    >>> tile_entry(MR, 6, 2) in str(tile_module(shape, MR, 6, 2))
    True
    """
    module = ir.Module(name=f"planar_tile_{shape.dtype.name}_{a_step}_{rows}x{vectors}")
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()
    _micro_kernel(module, shape, scalar, rows, vectors, a_step,
                  tile_entry(a_step, rows, vectors))
    return module


def tile_variants(shape: GemmShape, channels: int, positions: int) -> set[tuple[int, int]]:
    """The tiles ``(rows, vectors)`` a driver runs for ``channels`` output channels (tiles of
    ``MR`` rows, the last one shorter) over planes of ``positions`` (panels of ``shape.nr``,
    the last one narrower).

    >>> sorted(tile_variants(GemmShape.for_host(np.float32, avx512=True), 16, 80))
    [(4, 1), (4, 4), (6, 1), (6, 4)]
    """
    rows = {MR} if channels >= MR else set()
    rows |= {channels % MR} - {0}
    widths = {shape.vectors} if positions >= shape.nr else set()
    widths |= {-(-(positions % shape.nr) // shape.lanes)} - {0}
    return {(r, v) for r in rows for v in widths}


def call_tile_rows(builder: ir.IRBuilder, table: ir.GlobalVariable, counter: ir.GlobalVariable,
                   one_row: dict[int, ir.Function], scalar: ir.Type, rows: ir.Value,
                   vectors: ir.Value, args: list) -> None:
    """Call the ``rows x vectors`` tile of ``table`` on ``args`` (a :func:`_micro_kernel`'s),
    or, where it is not built, the one-row tile once per row: its row tables (weights, output,
    residual) and its bias moved on by the row."""
    def row_by_row(r: ir.Value) -> None:
        shifted = list(args)
        for i in (0, 3, 11):
            shifted[i] = builder.gep(args[i], [r], source_etype=POINTER)
        shifted[7] = builder.gep(args[7], [r], source_etype=scalar)
        call_by_width(builder, vectors, one_row, shifted)

    variant = builder.add(builder.mul(builder.sub(vectors, ir.Constant(I64, 1)),
                                      ir.Constant(I64, MR)),
                          builder.sub(rows, ir.Constant(I64, 1)))
    call_tile(builder, table, counter, variant, args, rows, row_by_row)


def _micro_kernel(module: ir.Module, shape: GemmShape, scalar: ir.Type, rows: int,
                  vectors: int, a_step: int = 1, exported: str | None = None) -> ir.Function:
    """``micro(A_rows, B, ldb, C_rows, col, kc, ncols, bias, mode, bounds, stream, R_rows,
    A_next)``: a ``rows x
    (vectors * lanes)`` tile of output over ``kc`` input planes. Row ``r`` reads its weights
    along ``A_rows[r]``, ``a_step`` values apart (1: a row-major weight; ``MR``: a packed
    one), and writes at ``C_rows[r] + col``; step ``k`` reads ``ncols`` columns
    at ``B + k * ldb``. ``mode``: 1 adds the tile already in C (a later block of planes), 2 applies
    the epilogue (the last block), the flags in bits 2 and up; ``bias`` is the tile's first
    row's bias. With ``stream`` (an ``i1``) a tile of whole vectors prefetches each step's
    row :data:`PREFETCH_PANELS` panels on. ``R_rows`` are the rows of the residual added in the
    epilogue under :data:`FLAG_RESIDUAL` (read at the same columns as ``C_rows``). A packed
    weight's tile (``a_step`` > 1) prefetches its step's line ``A_next`` values past its own
    (:data:`WEIGHT_PREFETCH`). Internal unless ``exported`` names it."""
    lanes = shape.lanes
    vector, mask_type, fma, load, store = vector_intrinsics(module, scalar, lanes)
    fn = ir.Function(module, TILE_TYPE, name=exported or f"micro{rows}x{vectors}")
    if exported is None:
        fn.linkage = "internal"
    a_rows, b, ldb, c_rows, col, kc, ncols, bias, mode, bounds, stream, r_rows, a_next = \
        fn.args
    for pointer in (a_rows, b, c_rows, bias):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    zero = ir.Constant(vector, [0.0] * lanes)
    align = ir.Constant(I32, shape.dtype.itemsize)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def row_pointer(table: ir.Value, r: int) -> ir.Value:
        return builder.load(builder.gep(table, [const(r)], inbounds=True,
                                        source_etype=POINTER), typ=POINTER)

    a_starts = [row_pointer(a_rows, r) for r in range(rows)]
    c_starts = [at(row_pointer(c_rows, r), col) for r in range(rows)]
    lane_index = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
    masks = [builder.icmp_signed("<", lane_index, _splat(builder, builder.sub(
        ncols, const(lanes * v)), ir.VectorType(I64, lanes))) for v in range(vectors)]
    tile = [[entry_alloca(builder, vector, f"c{r}_{v}") for v in range(vectors)]
            for r in range(rows)]
    for row in tile:
        for slot in row:
            builder.store(zero, slot)
    step = entry_alloca(builder, I64, "k")

    def steps(masked: bool, ahead: bool = False) -> None:
        with counted_loop(builder, step, const(0), lambda: kc, "k"):
            k = builder.load(step, typ=I64)
            b_row = at(b, builder.mul(k, ldb))
            if WEIGHT_PREFETCH and a_step != 1:
                prefetch(builder, a_starts[0], builder.add(builder.mul(k, const(a_step)),
                                                           a_next), scalar)
            if ahead:
                line = 64 // shape.dtype.itemsize
                for offset in range(shape.nr * PREFETCH_PANELS,
                                    shape.nr * (PREFETCH_PANELS + 1), line):
                    prefetch(builder, b_row, const(offset), scalar)   # may pass the plane
            b_vectors = [builder.call(load, [at(b_row, const(lanes * v)), align, masks[v],
                                             zero]) if masked else
                         builder.load(at(b_row, const(lanes * v)), typ=vector,
                                      align=shape.dtype.itemsize) for v in range(vectors)]
            for r in range(rows):
                weight = at(a_starts[r], k if a_step == 1 else builder.mul(k, const(a_step)))
                broadcast = _splat(builder, builder.load(weight, typ=scalar), vector)
                for v in range(vectors):
                    acc = builder.load(tile[r][v], typ=vector)
                    builder.store(builder.call(fma, [broadcast, b_vectors[v], acc]),
                                  tile[r][v])

    if OUTPUT_PREFETCH:
        for r in range(rows):
            for offset in range(0, lanes * vectors, 64 // shape.dtype.itemsize):
                # A masked tile's last line may pass the plane.
                prefetch(builder, c_starts[r], const(offset), scalar, write=True)

    def flag(bit: int) -> ir.Value:
        return builder.icmp_unsigned("!=", builder.and_(mode, ir.Constant(I32, bit)),
                                     ir.Constant(I32, 0))

    adds_residual = builder.and_(flag(2), flag(4 * FLAG_RESIDUAL))
    residual = [at(row_pointer(r_rows, r), col) for r in range(rows)]
    with if_then(builder, adds_residual, "residual.prefetch"):
        # Its lines arrive while the K loop runs, not when the epilogue reads them.
        for r in range(rows):
            for offset in range(0, lanes * vectors, 64 // shape.dtype.itemsize):
                prefetch(builder, residual[r], const(offset), scalar)
    # Whole vectors take plain loads; only a tile over the plane's last columns masks them
    # (masks kept live across the loop were rebuilt in it, 8 compares a step: half speed).
    full = builder.icmp_signed(">=", ncols, const(lanes * vectors))
    with if_else(builder, full, "full") as (then, otherwise):
        with then():
            with if_else(builder, stream, "prefetch") as (first, later):
                with first():
                    steps(False, ahead=True)
                with later():
                    steps(False)
        with otherwise():
            # Masked loads: the columns past the plane are never touched.
            steps(True)
    rows_out = [[at(c_starts[r], const(lanes * v)) for v in range(vectors)]
                for r in range(rows)]

    def update(value_of: object) -> None:
        for r in range(rows):
            for v in range(vectors):
                builder.store(value_of(r, v, builder.load(tile[r][v], typ=vector)),
                              tile[r][v])

    with if_then(builder, flag(1), "accumulate"):
        update(lambda r, v, value: builder.fadd(value, builder.call(
            load, [rows_out[r][v], align, masks[v], zero])))
    with if_then(builder, builder.and_(flag(2), flag(4 * FLAG_BIAS)), "bias"):
        # One bias per output channel: per tile row, not per column as in the GEMM.
        added = [_splat(builder, builder.load(at(bias, const(r)), typ=scalar), vector)
                 for r in range(rows)]
        update(lambda r, v, value: builder.fadd(value, added[r]))
    with if_then(builder, adds_residual, "residual"):
        update(lambda r, v, value: builder.fadd(value, builder.call(
            load, [at(residual[r], const(lanes * v)), align, masks[v], zero])))
    with if_then(builder, builder.and_(flag(2), flag(4 * FLAG_RELU)), "relu"):
        # max(x, 0) with NaN kept, as the GEMM's epilogue does
        update(lambda r, v, value: builder.select(builder.fcmp_unordered(">", value, zero),
                                                  value, zero))
    with if_then(builder, builder.and_(flag(2), flag(4 * FLAG_CLIP)), "clip"):
        low, high = (_splat(builder, builder.load(at(bounds, const(i)), typ=scalar), vector)
                     for i in (0, 1))
        update(lambda r, v, value: emit_clamp(builder, value, low, high))
    with if_then(builder, flag(2), "smooth"):
        # A sigmoid-family activation (codegen/activation.py), its parameters past the bounds.
        apply_to_tile(builder, [slot for row in tile for slot in row], vector,
                      builder.lshr(mode, ir.Constant(I32, 2)), bounds)
    for r in range(rows):
        for v in range(vectors):
            builder.call(store, [builder.load(tile[r][v], typ=vector), rows_out[r][v], align,
                                 masks[v]])
    builder.ret_void()
    return fn


def _driver(module: ir.Module, shape: GemmShape, scalar: ir.Type,
            one_row: dict[int, ir.Function]) -> None:
    table, fallbacks = declare_table(module, TILES, MR * shape.vectors, TILE_TYPE, {
        tile_index(1, vectors): kernel for vectors, kernel in one_row.items()})
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, POINTER, POINTER, POINTER, I32, *[I64] * 8, POINTER, I64)), name=ENTRY)
    (x, y, w, bias, flags, m_size, c_size, p_size, x_image, y_image, block_panels, begin,
     end, residual, r_image) = fn.args
    for pointer in (x, y, w, bias):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    def ceil_div(size: ir.Value, block: ir.Value) -> ir.Value:
        return builder.sdiv(builder.add(size, builder.sub(block, const(1))), block)

    def smaller(a: ir.Value, b: ir.Value) -> ir.Value:
        return builder.select(builder.icmp_signed("<", a, b), a, b)

    panels = ceil_div(p_size, const(shape.nr))
    blocks = ceil_div(panels, block_panels)
    # Input planes in near-equal blocks of about kc (at least one block, so that C = 0 still
    # writes act(bias)).
    k_blocks = ceil_div(c_size, const(shape.kc))
    k_blocks = builder.select(builder.icmp_signed("<", k_blocks, const(1)), const(1), k_blocks)
    k_step = ceil_div(c_size, k_blocks)
    tiles = ceil_div(m_size, const(MR))
    epilogue = builder.shl(flags, ir.Constant(I32, 2))
    unit, kb, tb, pb = (entry_alloca(builder, I64, name)
                        for name in ("unit", "kblock", "tile", "panel"))
    a_rows = entry_alloca(builder, ir.ArrayType(POINTER, MR), "a_rows")
    c_rows = entry_alloca(builder, ir.ArrayType(POINTER, MR), "c_rows")
    r_rows = entry_alloca(builder, ir.ArrayType(POINTER, MR), "r_rows")
    # A unit is a block of `block_panels` panels of one image. Per block of input planes,
    # each tile of output channels sweeps the unit's panels: its rows are written along
    # their planes, a few write streams (a tile per panel, the other way round, wrote 96
    # planes 256 bytes at a time: MobileNetV2's 16 -> 96 layer at batch 8 took 24 ms
    # against 9 in one profile of a loaded machine),
    # while the unit's kc x block_panels * NR input values stay in L1 (the caller sizes it).
    with counted_loop(builder, unit, begin, lambda: end, "unit"):
        u = builder.load(unit, typ=I64)
        image = builder.sdiv(u, blocks)
        first = builder.mul(builder.sub(u, builder.mul(image, blocks)), block_panels)
        stop = smaller(builder.add(first, block_panels), panels)
        x_image_at = at(x, builder.mul(image, x_image))
        y_image_at = at(y, builder.mul(image, y_image))
        r_image_at = at(residual, builder.mul(image, r_image))
        with counted_loop(builder, kb, const(0), lambda: k_blocks, "kblock"):
            k0 = builder.mul(builder.load(kb, typ=I64), k_step)
            kc = smaller(k_step, builder.sub(c_size, k0))
            kc = builder.select(builder.icmp_signed("<", kc, const(0)), const(0), kc)
            later = builder.icmp_signed(">", k0, const(0))
            last = builder.icmp_signed(">=", builder.add(k0, kc), c_size)
            mode = builder.or_(builder.or_(builder.zext(later, I32), builder.shl(
                builder.zext(last, I32), ir.Constant(I32, 1))), epilogue)
            b_block = at(x_image_at, builder.mul(k0, p_size))
            with counted_loop(builder, tb, const(0), lambda: tiles, "tiles"):
                m0 = builder.mul(builder.load(tb, typ=I64), const(MR))
                # Only the first tile streams the block in; the others find it in cache.
                first_tile = builder.and_(
                    builder.icmp_signed("==", m0, const(0)),
                    builder.icmp_signed(">=", c_size, const(PREFETCH_MIN_PLANES))) \
                    if PREFETCH_PANELS else ir.Constant(I1, 0)
                rows = smaller(builder.sub(m_size, m0), const(MR))
                # The next tile's weights for this block of planes, C * MR values on.
                a_next = builder.select(builder.icmp_signed("<", builder.add(m0, const(MR)),
                                                            m_size),
                                        builder.mul(c_size, const(MR)), const(0))
                # The packed weight: tile t's W[t * MR + r, c] at (t * C + c) * MR + r, so
                # this tile's block of planes starts at m0 * C + k0 * MR (its padded rows zero).
                w_tile = at(w, builder.add(builder.mul(m0, c_size), builder.mul(k0, const(MR))))
                for slot in range(MR):
                    m = builder.add(m0, const(slot))
                    # Output rows past the tile's own point at its first row: never written.
                    m = builder.select(builder.icmp_signed("<", const(slot), rows), m, m0)
                    zero = const(0)
                    builder.store(at(w_tile, const(slot)),
                                  builder.gep(a_rows, [zero, const(slot)], inbounds=True))
                    builder.store(at(y_image_at, builder.mul(m, p_size)),
                                  builder.gep(c_rows, [zero, const(slot)], inbounds=True))
                    builder.store(at(r_image_at, builder.mul(m, p_size)),
                                  builder.gep(r_rows, [zero, const(slot)], inbounds=True))
                with counted_loop(builder, pb, first, lambda: stop, "panels"):
                    j0 = builder.mul(builder.load(pb, typ=I64), const(shape.nr))
                    ncols = smaller(builder.sub(p_size, j0), const(shape.nr))
                    vectors = ceil_div(ncols, const(shape.lanes))
                    args = [builder.bitcast(a_rows, POINTER), at(b_block, j0), p_size,
                            builder.bitcast(c_rows, POINTER), j0, kc, ncols, at(bias, m0),
                            mode, at(bias, m_size), first_tile,
                            builder.bitcast(r_rows, POINTER), a_next]
                    call_tile_rows(builder, table, fallbacks, one_row, scalar, rows, vectors,
                                   args)
    builder.ret(ir.Constant(I32, 0))


def pack_weight(weight: np.ndarray) -> np.ndarray:
    """``weight`` (M x C) as the planar kernel reads it: per tile of ``MR`` output channels,
    its ``MR`` weights of each input plane together (``(ceil(M / MR), C, MR)``, the last
    tile's missing rows zero). A tile's step then reads ``MR`` neighbouring values, one
    stream a tile; read in place, a row-major weight is ``MR`` streams ``C`` values apart,
    and once it outgrows L2 (ResNeXt's 1024 x 512 layers, 2 MiB) the kernel ran at 29 GFMA/s
    against 42-55 from L2.

    >>> pack_weight(np.arange(14.0).reshape(7, 2))[:, 0].tolist()
    [[0.0, 2.0, 4.0, 6.0, 8.0, 10.0], [12.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
    """
    rows, columns = weight.shape
    tiles = -(-rows // MR)
    packed = np.zeros((tiles * MR, columns), weight.dtype)
    packed[:rows] = weight
    return np.ascontiguousarray(packed.reshape(tiles, MR, columns).transpose(0, 2, 1))


def block_panels(shape: GemmShape, channels: int, positions: int, out_channels: int) -> int:
    """Panels per unit for ``channels`` input planes of ``positions`` and ``out_channels``
    outputs: as many as keep a block of input planes' columns (``kc x panels * NR`` values)
    within :data:`UNIT_BLOCK_BYTES` where :data:`MANY_TILES` tiles of output channels or more
    sweep it, else within :data:`STREAM_BLOCK_BYTES`.

    >>> shape = GemmShape(np.dtype(np.float32), 16, 4)
    >>> block_panels(shape, 16, 12544, 256), block_panels(shape, 16, 12544, 24)
    (8, 32)
    """
    k_blocks = max(1, -(-channels // shape.kc))
    k_step = max(1, -(-channels // k_blocks))
    panels = max(1, -(-positions // shape.nr))
    budget = UNIT_BLOCK_BYTES if -(-out_channels // MR) >= MANY_TILES else STREAM_BLOCK_BYTES
    fit = budget // (k_step * shape.nr * shape.dtype.itemsize)
    return max(1, min(panels, fit))


__all__ = ["ENTRY", "FLAG_RESIDUAL", "MR", "block_panels", "call_tile_rows", "pack_weight",
           "planar_module", "tile_entry", "tile_index", "tile_module", "tile_variants"]
