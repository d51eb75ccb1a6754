"""An 8-bit GEMM on AVX-512 VNNI: quantized activations times a packed int8 weight.

``C[i, j] = float32(sum(k, (q[i, k] - z) * W[k, j]))`` where ``q = saturate(round(x / s) + z)``
is the uint8 quantization of the float32 activations ``x`` with the scale ``s`` and zero point
``z`` read through pointers (DynamicQuantizeLinear's, computed by another step, or a QDQ
model's constants), and ``W`` a constant int8 weight. This is onnxruntime's
``quantize_dynamic`` product (DynamicQuantizeLinear -> MatMulInteger -> Cast) in one call. The
sum is an exact int32 (the caller checks it cannot wrap), so the result is the value the three
ONNX ops give, bit for bit; an epilogue (:func:`_epilogue`) may then rescale, bias and clamp
it. A convolution (:func:`_conv_driver`) reads its rows from a quantized channels-last image
(:func:`_image_driver`) instead of quantizing rows itself.

Why a kernel of its own: ``vpdpbusd`` multiplies 64 unsigned by 64 signed bytes and adds them
in fours to 16 int32 lanes, 64 multiply-adds an instruction against a float32 FMA's 16, and
reads a quarter of the weight's bytes. The float route it replaces (``passes/quantized.py``:
the shifted activations as exact float32 integers through the float GEMM) ran the quantized
model no faster than the float one, while onnxruntime's int8 path ran 1.5-2.2x its own float
path.

Blocking, as ``codegen/gemm.py``'s float kernel:

- the call first quantizes its rows of ``x`` to uint8 (16 lanes a step: ``fdiv``, round half
  to even, ``+ z``, clamp, NaN to 0, as the statement the float route compiles), each row
  zero-padded to a multiple of 64 bytes, into the caller's scratch;
- the weight is packed at load (:func:`pack_int8_weight`) as panels of ``NR = 64`` columns,
  each K group of 4 a 256-byte block (column ``c``'s 4 bytes at ``4 * c``): one ``vpdpbusd``
  operand per 16 columns;
- the micro-kernel keeps ``rows x vectors`` int32 accumulators (up to 6 x 4) in registers over
  all of K: per group of 4 values it loads 4 vectors of the weight, broadcasts 4 bytes of each
  row of ``q`` and issues 24 ``vpdpbusd``;
- the epilogue subtracts ``z * colsum(W)`` (so ``q`` need not be shifted to signed bytes,
  which ``vpdpbusd``'s unsigned operand forbids), converts to float32, applies the optional
  multiplier, bias and clamp, and stores, masked to the last panel's columns.

Rows ``[row_begin, row_end)`` and whole panels from ``col_begin`` to ``col_end`` (one thread's
share) are computed; nothing outside them is read or written (masked loads and stores at the
edges, the packed weight zero-padded to whole panels and groups).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from llvmlite import ir

from tensoralg.codegen.activation import emit_clamp
from tensoralg.codegen.gemm import aligned_empty
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, if_then
from tensoralg.codegen.llvm_helpers import splat as _splat

I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()
POINTER = ir.PointerType()
LANES = 16               # int32 (or float32) lanes of a 512-bit register
VECTORS = 4              # vectors across a panel
NR = LANES * VECTORS     # columns of a panel
MR = 6                   # rows of the register tile: 6 x 4 = 24 of the 32 vector registers
GROUP = 4                # K values one vpdpbusd lane sums
ROW_ALIGN = 64           # bytes a quantized row is padded to
ENTRY = "tensoralg_qgemm"
CONV_ENTRY = "tensoralg_qconv"
IMAGE_ENTRY = "tensoralg_qimage"
PLANES_ENTRY = "tensoralg_qplanes"
POINT_ENTRY = "tensoralg_qpoint"


def quantized_row_bytes(k: int) -> int:
    """Bytes of one quantized row of ``k`` values in the scratch: ``k`` rounded up to 64.

    >>> quantized_row_bytes(1), quantized_row_bytes(64), quantized_row_bytes(65)
    (64, 64, 128)
    """
    return max(ROW_ALIGN, -(-k // ROW_ALIGN) * ROW_ALIGN)


def pack_int8_weight(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``weight`` (K x N, int8 values) as the kernel reads it, and its column sums: panels of
    64 columns, each group of 4 rows a block of 64 x 4 bytes (``[N/64, K/4, 64, 4]``,
    zero-padded, on a 64-byte boundary), and ``colsum`` as int32 padded to whole panels.

    >>> packed, colsum = pack_int8_weight(np.arange(6, dtype=np.int8).reshape(2, 3))
    >>> packed.shape, packed[0, 0, 1].tolist(), colsum[:4].tolist()
    ((1, 1, 64, 4), [1, 4, 0, 0], [3, 5, 7, 0])
    """
    k, n = weight.shape
    if weight.dtype != np.int8:
        raise ValueError(f"the int8 GEMM packs int8 weights, not {weight.dtype}")
    panels, groups = max(1, -(-n // NR)), max(1, -(-k // GROUP))
    padded = np.zeros((groups * GROUP, panels * NR), np.int8)
    padded[:k, :n] = weight
    packed = aligned_empty((panels, groups, NR, GROUP), np.int8)
    packed[...] = padded.reshape(groups, GROUP, panels, NR).transpose(2, 0, 3, 1)
    colsum = aligned_empty((panels * NR,), np.int32)
    colsum[...] = padded.astype(np.int32).sum(axis=0)
    return packed, colsum


def qgemm_module(entry: str = ENTRY) -> ir.Module:
    """The module exporting ``entry``, one module per function, so that a model compiles
    only what it calls (each took about a second to optimise): :data:`ENTRY`, ``int32
    tensoralg_qgemm(X, ldx, scale, zero, Wp, colsum, K, N, C, ldc, row_begin, row_end,
    col_begin, col_end, Q)``: rows ``[row_begin, row_end)`` and columns ``[col_begin,
    col_end)`` (``col_begin`` a multiple of 64) of ``C`` (float32, row stride ``ldc``) from
    the float32 ``X`` (row stride ``ldx``), the float32 scalars ``scale`` and ``zero`` and the
    packed weight (:func:`pack_int8_weight`), ``Q`` this call's scratch (``row_end -
    row_begin`` rows of ``quantized_row_bytes(K)`` bytes), then ``epilogue`` and ``flags``
    (:func:`_epilogue`: per-column multipliers and biases, a clamp), returning 0;
    :data:`CONV_ENTRY`
    (:func:`_conv_driver`) and :data:`IMAGE_ENTRY` (:func:`_image_driver`); the pointwise
    convolution over NCHW positions, :data:`PLANES_ENTRY` (:func:`_planes_driver`) and
    :data:`POINT_ENTRY` (:func:`_point_driver`).

    >>> "tensoralg_qgemm" in str(qgemm_module())
    True
    """
    if entry not in (ENTRY, CONV_ENTRY, IMAGE_ENTRY, PLANES_ENTRY, POINT_ENTRY):
        raise ValueError(f"the int8 GEMM's module has no function {entry!r}")
    module = ir.Module(name=f"qgemm_u8s8_{entry}")
    if entry == IMAGE_ENTRY:
        _image_driver(module)
        return module
    if entry == PLANES_ENTRY:
        _planes_driver(module)
        return module
    if entry == POINT_ENTRY:
        _point_driver(module, {(rows, vectors): _point_micro(module, rows, vectors)
                               for vectors in range(1, VECTORS + 1)
                               for rows in range(1, MR + 1)})
        return module
    micro = {(rows, vectors): _micro_kernel(module, rows, vectors)
             for vectors in range(1, VECTORS + 1) for rows in range(1, MR + 1)}
    if entry == ENTRY:
        _driver(module, _quantize_rows(module), micro)
    else:
        _conv_driver(module, micro)
    return module


def _const(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def _quantized(builder: ir.IRBuilder, roundeven: ir.Function, values: ir.Value,
               scales: ir.Value, zeros: ir.Value, mask: ir.Value | None = None) -> ir.Value:
    """16 float32 ``values`` as uint8: the float route's statement ``round(x / s) + z``, then
    ``where(v >= 0, min(v, 255), 0)``, so that NaN gives 0 (a division, not a product by
    ``1 / s``: the same bits as onnxruntime's). Lanes off ``mask`` are 0."""
    vector = ir.VectorType(F32, LANES)
    low = ir.Constant(vector, [0.0] * LANES)
    high = ir.Constant(vector, [255.0] * LANES)
    shifted = builder.fadd(builder.call(roundeven, [builder.fdiv(values, scales)]), zeros)
    clamped = builder.select(builder.fcmp_ordered(">=", shifted, low),
                             builder.select(builder.fcmp_ordered("<", shifted, high),
                                            shifted, high), low)
    if mask is not None:
        clamped = builder.select(mask, clamped, low)
    return builder.fptoui(clamped, ir.VectorType(I8, LANES))


def _quantize_rows(module: ir.Module) -> ir.Function:
    """``quantize(X, ldx, rows, K, scale, zero, Q, ldq)``: ``rows`` rows of ``X`` as uint8,
    ``saturate(round(x / scale) + zero)`` in float32, NaN to 0; lanes past ``K`` (up to
    ``ldq``, a multiple of 16) are 0."""
    vector = ir.VectorType(F32, LANES)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    load = declare(module, "llvm.masked.load.v16f32.p0", vector,
                   (POINTER, I32, mask_type, vector))
    roundeven = declare(module, "llvm.roundeven.v16f32", vector, (vector,))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), (
        POINTER, I64, I64, I64, F32, F32, POINTER, I64)), name="quantize_rows")
    fn.linkage = "internal"
    x, ldx, rows, k_size, scale, zero, q, ldq = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    row, step = entry_alloca(builder, I64, "r"), entry_alloca(builder, I64, "k")
    scales, zeros = _splat(builder, scale, vector), _splat(builder, zero, vector)
    low = ir.Constant(vector, [0.0] * LANES)
    lane_index = ir.Constant(ir.VectorType(I64, LANES), list(range(LANES)))
    with counted_loop(builder, row, _const(0), lambda: rows, "row"):
        r = builder.load(row, typ=I64)
        x_row = builder.gep(x, [builder.mul(r, ldx)], inbounds=True, source_etype=F32)
        q_row = builder.gep(q, [builder.mul(r, ldq)], inbounds=True, source_etype=I8)
        with counted_loop(builder, step, _const(0), lambda: builder.sdiv(ldq, _const(LANES)),
                          "k"):
            k0 = builder.mul(builder.load(step, typ=I64), _const(LANES))
            mask = builder.icmp_signed("<", builder.add(_splat(builder, k0, lane_index.type),
                                                        lane_index),
                                       _splat(builder, k_size, lane_index.type))
            values = builder.call(load, [builder.gep(x_row, [k0], source_etype=F32),
                                         ir.Constant(I32, 4), mask, low])
            # Lanes past K are 0 (the weight's padding rows are 0 too).
            as_bytes = _quantized(builder, roundeven, values, scales, zeros, mask)
            builder.store(as_bytes, builder.gep(q_row, [k0], inbounds=True, source_etype=I8),
                          align=16)
    builder.ret_void()
    return fn


def _zeroed_tile(builder: ir.IRBuilder, row_table: ir.Value, rows: int, vectors: int
                 ) -> tuple[list[list[ir.Value]], list[ir.Value]]:
    """A micro-kernel's ``rows x vectors`` int32 accumulators (stack slots LLVM keeps in
    registers), zeroed, and the ``rows`` row addresses read from ``row_table``."""
    ints = ir.VectorType(I32, LANES)
    tile = [[entry_alloca(builder, ints, f"c{r}_{v}") for v in range(vectors)]
            for r in range(rows)]
    for row in tile:
        for slot in row:
            builder.store(ir.Constant(ints, [0] * LANES), slot)
    starts = [builder.load(builder.gep(row_table, [_const(r)], inbounds=True,
                                       source_etype=POINTER), typ=POINTER)
              for r in range(rows)]
    return tile, starts


def _micro_kernel(module: ir.Module, rows: int, vectors: int) -> ir.Function:
    """``micro(A_rows, nsub, a_sub, groups, W, C_rows, ncols, colsum, zero, multipliers,
    biases, bounds, flags, scale)``: a ``rows x (vectors * 16)`` tile of ``C`` over ``nsub`` runs of
    ``groups`` groups of 4 K values. Row ``r`` of the tile reads run ``s`` from ``A_rows[r] +
    s * a_sub`` (bytes; a dense product is one run, a convolution's runs are its kernel rows,
    an image row apart) and writes its columns from ``C_rows[r]`` on, after the epilogue
    (:func:`_epilogue`); columns past ``ncols`` are neither read nor written. (A convolution
    writes channels-last rows, transposed into NCHW after: scattering each vector into 16
    planes ran 1.03-1.6x slower, ``QuantizedConv``.)"""
    ints = ir.VectorType(I32, LANES)
    floats = ir.VectorType(F32, LANES)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    dot = declare(module, "llvm.x86.avx512.vpdpbusd.512", ints, (ints, ints, ints))
    load_ints = declare(module, "llvm.masked.load.v16i32.p0", ints,
                        (POINTER, I32, mask_type, ints))
    store = declare(module, "llvm.masked.store.v16f32.p0", ir.VoidType(),
                    (floats, POINTER, I32, mask_type))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), (
        POINTER, I64, I64, I64, POINTER, POINTER, I64, POINTER, I32, POINTER, POINTER,
        POINTER, I64, F32)), name=f"qmicro{rows}x{vectors}")
    fn.linkage = "internal"
    a_rows, nsub, a_sub, groups, w, c_rows, ncols, colsum, zero, multipliers, biases, \
        bounds, flags, scale = fn.args
    for pointer in (a_rows, w, c_rows, colsum):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    zero_vector = ir.Constant(ints, [0] * LANES)
    tile, starts = _zeroed_tile(builder, a_rows, rows, vectors)
    run, step = entry_alloca(builder, I64, "s"), entry_alloca(builder, I64, "g")
    with counted_loop(builder, run, _const(0), lambda: nsub, "run"):
        s = builder.load(run, typ=I64)
        q_rows = [builder.gep(start, [builder.mul(s, a_sub)], inbounds=True, source_etype=I8)
                  for start in starts]
        w_run = builder.gep(w, [builder.mul(builder.mul(s, groups), _const(NR * GROUP))],
                            inbounds=True, source_etype=I8)
        with counted_loop(builder, step, _const(0), lambda: groups, "g"):
            g = builder.load(step, typ=I64)
            block = builder.gep(w_run, [builder.mul(g, _const(NR * GROUP))], inbounds=True,
                                source_etype=I8)
            weights = [builder.load(builder.gep(block, [_const(64 * v)], inbounds=True,
                                                source_etype=I8), typ=ints, align=64)
                       for v in range(vectors)]
            for r in range(rows):
                four = builder.load(builder.gep(q_rows[r], [builder.mul(g, _const(GROUP))],
                                                inbounds=True, source_etype=I8), typ=I32,
                                    align=1)
                broadcast = _splat(builder, four, ints)
                for v in range(vectors):
                    acc = builder.load(tile[r][v], typ=ints)
                    builder.store(builder.call(dot, [acc, broadcast, weights[v]]), tile[r][v])
    lane_index = ir.Constant(ir.VectorType(I64, LANES), list(range(LANES)))
    masks = [builder.icmp_signed("<", lane_index, _splat(builder, builder.sub(
        ncols, _const(LANES * v)), lane_index.type)) for v in range(vectors)]
    zeros = _splat(builder, zero, ints)
    results = [[None] * vectors for _ in range(rows)]
    for v in range(vectors):
        sums = builder.call(load_ints, [builder.gep(colsum, [_const(LANES * v)], inbounds=True,
                                                    source_etype=I32),
                                        ir.Constant(I32, 4), masks[v], zero_vector])
        correction = builder.mul(zeros, sums)
        for r in range(rows):
            exact = builder.sub(builder.load(tile[r][v], typ=ints), correction)
            results[r][v] = builder.sitofp(exact, floats)
    _epilogue(builder, module, results, _column_operands(builder, module, masks, rows),
              multipliers, biases, bounds, flags, scale)
    c_starts = [builder.load(builder.gep(c_rows, [_const(r)], inbounds=True,
                                         source_etype=POINTER), typ=POINTER)
                for r in range(rows)]
    for r in range(rows):
        for v in range(vectors):
            where = builder.gep(c_starts[r], [_const(LANES * v)], inbounds=True,
                                source_etype=F32)
            builder.call(store, [results[r][v], where, ir.Constant(I32, 4), masks[v]])
    builder.ret_void()
    return fn


def _column_operands(builder: ir.IRBuilder, module: ir.Module, masks: list[ir.Value],
                     rows: int) -> Callable[[ir.Value], list[list[ir.Value]]]:
    """Per-column epilogue operands of a tile (the dense product's and the channels-last
    convolution's): 16 columns a vector, masked to the tile's columns, the same for every
    row."""
    floats = ir.VectorType(F32, LANES)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    load = declare(module, "llvm.masked.load.v16f32.p0", floats,
                   (POINTER, I32, mask_type, floats))
    zero = ir.Constant(floats, [0.0] * LANES)

    def operands(base: ir.Value) -> list[list[ir.Value]]:
        columns = [builder.call(load, [builder.gep(base, [_const(LANES * v)], inbounds=True,
                                                   source_etype=F32), ir.Constant(I32, 4),
                                       mask, zero]) for v, mask in enumerate(masks)]
        return [columns] * rows
    return operands


def _row_operands(builder: ir.IRBuilder, rows: int, vectors: int
                  ) -> Callable[[ir.Value], list[list[ir.Value]]]:
    """Per-row epilogue operands of a tile whose rows are output channels (the pointwise
    convolution over positions): each row's value broadcast across its vectors."""
    floats = ir.VectorType(F32, LANES)

    def operands(base: ir.Value) -> list[list[ir.Value]]:
        return [[_splat(builder, builder.load(builder.gep(base, [_const(r)], inbounds=True,
                                                          source_etype=F32), typ=F32),
                        floats)] * vectors for r in range(rows)]
    return operands


def _epilogue(builder: ir.IRBuilder, module: ir.Module, results: list[list[ir.Value]],
              operands: Callable[[ir.Value], list[list[ir.Value]]], multipliers: ir.Value,
              biases: ir.Value, bounds: ir.Value, flags: ir.Value, scale: ir.Value) -> None:
    """The tile's float sums times the ``multipliers`` (``flags & 1``; with ``flags & 8``,
    times ``scale * multipliers``, the activations' run-time scale times the weights'
    scales), plus the ``biases`` (``flags & 2``), clamped to ``bounds[0], bounds[1]`` with NaN
    kept (``flags & 4``: a ReLU or Clip), then fake-quantized with the scale, zero point and
    saturation bounds ``bounds[2:6]`` (``flags & 16``: ``(saturate(round(v / s) + z) - z) *
    s``, NaN to the low bound), in place in ``results``. ``operands(base)`` gives a tile's
    multipliers or biases (per column or per row). This is the statement ``clamp((A * M) +
    B)`` and the ``QuantizeDequantize`` after it that would otherwise run, operation for
    operation, so the values are the same."""
    floats = ir.VectorType(F32, LANES)
    roundeven = declare(module, "llvm.roundeven.v16f32", floats, (floats,))

    def flag(bit: int) -> ir.Value:
        return builder.icmp_unsigned("!=", builder.and_(flags, _const(bit)), _const(0))

    def bound(i: int) -> ir.Value:
        return _splat(builder, builder.load(builder.gep(bounds, [_const(i)], inbounds=True,
                                                        source_etype=F32), typ=F32), floats)

    slots = [[entry_alloca(builder, floats, f"e{r}_{v}") for v in range(len(row))]
             for r, row in enumerate(results)]
    for row, row_slots in zip(results, slots):
        for value, slot in zip(row, row_slots):
            builder.store(value, slot)
    scales = _splat(builder, scale, floats)
    for bit, base, combine in ((1, multipliers, builder.fmul), (8, multipliers, builder.fmul),
                               (2, biases, builder.fadd)):
        with if_then(builder, flag(bit), f"epilogue{bit}"):
            values = operands(base)
            for r, row_slots in enumerate(slots):
                for v, slot in enumerate(row_slots):
                    value = values[r][v]
                    if bit == 8:
                        value = builder.fmul(scales, value)
                    builder.store(combine(builder.load(slot, typ=floats), value), slot)
    with if_then(builder, flag(4), "clamp"):
        low, high = bound(0), bound(1)
        for row_slots in slots:
            for slot in row_slots:
                builder.store(emit_clamp(builder, builder.load(slot, typ=floats), low, high),
                              slot)
    with if_then(builder, flag(16), "fake"):
        step, zero, low, high = (bound(i) for i in range(2, 6))
        for row_slots in slots:
            for slot in row_slots:
                level = builder.fadd(builder.call(roundeven, [builder.fdiv(
                    builder.load(slot, typ=floats), step)]), zero)
                kept = builder.select(builder.fcmp_ordered(">=", level, low),
                                      builder.select(builder.fcmp_ordered("<", level, high),
                                                     level, high), low)
                builder.store(builder.fmul(builder.fsub(kept, zero), step), slot)
    for r, row_slots in enumerate(slots):
        for v, slot in enumerate(row_slots):
            results[r][v] = builder.load(slot, typ=floats)


def _tiles(builder: ir.IRBuilder, micro: dict[tuple[int, int], ir.Function], w: ir.Value,
           colsum: ir.Value, panel_groups: ir.Value, nsub: ir.Value, a_sub: ir.Value,
           groups: ir.Value, n_size: ir.Value, rows_total: ir.Value,
           col_begin: ir.Value, col_end: ir.Value, zero_int: ir.Value,
           fill_rows: Callable[[ir.Value, ir.Value, ir.Value, ir.Value, ir.Value], None],
           epilogue: ir.Value, flags: ir.Value, scale: ir.Value) -> None:
    """The panels from ``col_begin`` to ``col_end`` and the register tiles of ``rows_total``
    rows of ``C``; ``fill_rows(first, count, a_table, c_table, j0)`` stores the addresses of
    rows ``first .. first + count - 1`` (numbered from 0 in this call) of A and of column
    ``j0`` of C in the two tables. ``epilogue`` holds the columns' multipliers and biases,
    each padded to whole panels, then the clamp's bounds (:func:`_epilogue`, by ``flags``)."""
    padded = builder.mul(builder.sdiv(builder.add(n_size, _const(NR - 1)), _const(NR)),
                         _const(NR))
    biases = builder.gep(epilogue, [padded], inbounds=True, source_etype=F32)
    bounds = builder.gep(epilogue, [builder.mul(padded, _const(2))], inbounds=True,
                         source_etype=F32)
    table = entry_alloca(builder, ir.ArrayType(POINTER, MR), "a_rows")
    table_start = builder.bitcast(table, POINTER)
    c_table = entry_alloca(builder, ir.ArrayType(POINTER, MR), "c_rows")
    c_start = builder.bitcast(c_table, POINTER)
    panel, block = entry_alloca(builder, I64, "panel"), entry_alloca(builder, I64, "rb")
    first_panel = builder.sdiv(col_begin, _const(NR))
    last_panel = builder.sdiv(builder.add(col_end, _const(NR - 1)), _const(NR))
    row_blocks = builder.sdiv(builder.add(rows_total, _const(MR - 1)), _const(MR))
    with counted_loop(builder, panel, first_panel, lambda: last_panel, "panel"):
        p = builder.load(panel, typ=I64)
        j0 = builder.mul(p, _const(NR))
        ncols = builder.sub(builder.select(builder.icmp_signed("<", col_end, n_size),
                                           col_end, n_size), j0)
        vectors = builder.select(builder.icmp_signed("<", ncols, _const(NR)),
                                 builder.sdiv(builder.add(ncols, _const(LANES - 1)),
                                              _const(LANES)), _const(VECTORS))
        w_panel = builder.gep(w, [builder.mul(p, builder.mul(panel_groups,
                                                             _const(NR * GROUP)))],
                              inbounds=True, source_etype=I8)
        sums = builder.gep(colsum, [j0], inbounds=True, source_etype=I32)
        with counted_loop(builder, block, _const(0), lambda: row_blocks, "rows"):
            # Near-equal tiles (13 rows: 5, 4 and 4, not 6, 6 and 1): a tile of few rows has
            # too few accumulators to hide vpdpbusd's latency.
            b = builder.load(block, typ=I64)
            i0 = builder.sdiv(builder.mul(b, rows_total), row_blocks)
            i1 = builder.sdiv(builder.mul(builder.add(b, _const(1)), rows_total), row_blocks)
            count = builder.sub(i1, i0)
            fill_rows(i0, count, table, c_table, j0)
            args = [table_start, nsub, a_sub, groups, w_panel, c_start, ncols, sums,
                    zero_int, builder.gep(epilogue, [j0], inbounds=True, source_etype=F32),
                    builder.gep(biases, [j0], inbounds=True, source_etype=F32), bounds, flags,
                    scale]
            _call_variant(builder, micro, count, vectors, args)


def _call_variant(builder: ir.IRBuilder, micro: dict[tuple[int, int], ir.Function],
                  rows: ir.Value, vectors: ir.Value, args: list[ir.Value]) -> None:
    """Call the micro-kernel of ``rows`` x ``vectors`` (both run-time values, in ``1..MR``
    and ``1..VECTORS``) with ``args``: one switch over the compiled variants."""
    done = builder.append_basic_block("tile.done")
    variant = builder.add(builder.mul(builder.sub(vectors, _const(1)), _const(MR)),
                          builder.sub(rows, _const(1)))
    switch = builder.switch(variant, done)
    for (count_rows, width), kernel in micro.items():
        case = builder.append_basic_block(f"tile.{count_rows}x{width}")
        switch.add_case(_const((width - 1) * MR + count_rows - 1), case)
        builder.position_at_end(case)
        builder.call(kernel, args)
        builder.branch(done)
    builder.position_at_end(done)


def _store_rows(builder: ir.IRBuilder, tables: tuple[ir.Value, ir.Value], count: ir.Value,
                address: Callable[[int], tuple[ir.Value, ir.Value]]) -> None:
    """``a_table[r], c_table[r] = address(r)`` (the tables the tile's ``[MR x ptr]`` slots)
    for the rows ``r < count`` of a tile; rows past ``count`` are never read, and not
    computed."""
    for r in range(MR):
        with if_then(builder, builder.icmp_signed("<", _const(r), count), f"row{r}"):
            for table, value in zip(tables, address(r)):
                builder.store(value, builder.gep(table, [_const(0), _const(r)], inbounds=True))


def _driver(module: ir.Module, quantize: ir.Function,
            micro: dict[tuple[int, int], ir.Function]) -> None:
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, I64, POINTER, POINTER, POINTER, POINTER, I64, I64, POINTER, I64, I64, I64,
        I64, I64, POINTER, POINTER, I64)), name=ENTRY)
    x, ldx, scale_at, zero_at, w, colsum, k_size, n_size, c, ldc, begin, end, col_begin, \
        col_end, q, epilogue, flags = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    rows_total = builder.sub(end, begin)
    ldq = builder.mul(builder.sdiv(builder.add(k_size, _const(ROW_ALIGN - 1)),
                                   _const(ROW_ALIGN)), _const(ROW_ALIGN))
    ldq = builder.select(builder.icmp_signed("<", ldq, _const(ROW_ALIGN)), _const(ROW_ALIGN),
                         ldq)
    groups = builder.sdiv(builder.add(k_size, _const(GROUP - 1)), _const(GROUP))
    groups_packed = builder.select(builder.icmp_signed("<", groups, _const(1)), _const(1),
                                   groups)
    scale = builder.load(scale_at, typ=F32)
    zero = builder.load(zero_at, typ=F32)
    with if_then(builder, builder.icmp_signed(">", rows_total, _const(0)), "work"):
        builder.call(quantize, [builder.gep(x, [builder.mul(begin, ldx)], inbounds=True,
                                            source_etype=F32),
                                ldx, rows_total, k_size, scale, zero, q, ldq])

        def fill_rows(first: ir.Value, count: ir.Value, a_table: ir.Value,
                      c_table: ir.Value, j0: ir.Value) -> None:
            start = builder.gep(q, [builder.mul(first, ldq)], inbounds=True, source_etype=I8)
            c_first = builder.gep(c, [builder.add(builder.mul(builder.add(begin, first), ldc),
                                                  j0)], inbounds=True, source_etype=F32)
            _store_rows(builder, (a_table, c_table), count, lambda r: (
                builder.gep(start, [builder.mul(_const(r), ldq)], inbounds=True,
                            source_etype=I8),
                builder.gep(c_first, [builder.mul(_const(r), ldc)], inbounds=True,
                            source_etype=F32)))

        # The zero point is an integer in [0, 255] (DynamicQuantizeLinear's), as a float.
        _tiles(builder, micro, w, colsum, groups_packed, _const(1), _const(0), groups, n_size,
               rows_total, col_begin, col_end, builder.fptosi(zero, I32), fill_rows,
               epilogue, flags, scale)
    builder.ret(ir.Constant(I32, 0))


def _conv_driver(module: ir.Module, micro: dict[tuple[int, int], ir.Function]) -> None:
    """``int32 tensoralg_qconv(B, scale, zero, Wp, colsum, runs, run_groups, run_stride, ohw, ow,
    oh_stride, ow_stride, image_stride, N, C, row_begin, row_end, col_begin, col_end,
    epilogue, flags)``: output positions ``[row_begin, row_end)`` of a convolution with ``N``
    output channels from the quantized image ``B`` (:func:`_image_driver`) into the
    channels-last rows of ``C`` (position ``p``, channel ``j`` at ``p * N + j``). Position ``p`` of image ``n = p / ohw`` at ``(oh, ow)`` reads ``runs`` kernel rows of
    ``run_groups`` groups of 4 bytes, the first at ``n * image_stride + oh * oh_stride + ow
    * ow_stride`` and each ``run_stride`` bytes after the one before."""
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, POINTER, POINTER, POINTER, POINTER, I64, I64, I64, I64, I64, I64, I64, I64,
        I64, POINTER, I64, I64, I64, I64, POINTER, I64)), name=CONV_ENTRY)
    image, scale_at, zero_at, w, colsum, runs, run_groups, run_stride, ohw, ow, oh_stride, ow_stride, \
        image_stride, n_size, c, begin, end, col_begin, col_end, epilogue, flags = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    rows_total = builder.sub(end, begin)
    zero = builder.fptosi(builder.load(zero_at, typ=F32), I32)

    def fill_rows(first: ir.Value, count: ir.Value, a_table: ir.Value, c_table: ir.Value,
                  j0: ir.Value) -> None:
        def address(r: int) -> tuple[ir.Value, ir.Value]:
            p = builder.add(builder.add(begin, first), _const(r))
            n = builder.sdiv(p, ohw)
            rest = builder.sub(p, builder.mul(n, ohw))
            oh = builder.sdiv(rest, ow)
            column = builder.sub(rest, builder.mul(oh, ow))
            offset = builder.add(builder.add(builder.mul(n, image_stride),
                                             builder.mul(oh, oh_stride)),
                                 builder.mul(column, ow_stride))
            out = builder.add(builder.mul(p, n_size), j0)
            return (builder.gep(image, [offset], inbounds=True, source_etype=I8),
                    builder.gep(c, [out], inbounds=True, source_etype=F32))
        _store_rows(builder, (a_table, c_table), count, address)

    with if_then(builder, builder.icmp_signed(">", rows_total, _const(0)), "work"):
        _tiles(builder, micro, w, colsum, builder.mul(runs, run_groups), runs, run_stride,
               run_groups, n_size, rows_total, col_begin, col_end, zero, fill_rows,
               epilogue, flags, builder.load(scale_at, typ=F32))
    builder.ret(ir.Constant(I32, 0))


def _interleaved(builder: ir.IRBuilder, quads: list[ir.Value]) -> ir.Value:
    """Four channels' 16 bytes (one per position) as 16 int32 lanes, lane ``p`` holding the
    four channels' bytes at position ``p``: ``vpdpbusd``'s group of 4."""
    interleave = ir.Constant(ir.VectorType(I32, 4 * LANES),
                             [ci * LANES + p for p in range(LANES) for ci in range(GROUP)])
    halves = ir.Constant(ir.VectorType(I32, 2 * LANES), list(range(2 * LANES)))
    whole = ir.Constant(ir.VectorType(I32, 4 * LANES), list(range(4 * LANES)))
    pairs = [builder.shuffle_vector(quads[i], quads[i + 1], halves) for i in (0, 2)]
    joined = builder.shuffle_vector(pairs[0], pairs[1], whole)
    return builder.bitcast(builder.shuffle_vector(
        joined, ir.Constant(joined.type, ir.Undefined), interleave), ir.VectorType(I32, LANES))


def _planes_driver(module: ir.Module) -> None:
    """``int32 tensoralg_qplanes(X, n, c, p, scale, zero, groups, pp, B)``: the float32
    ``X`` (n, c, p) (NCHW planes of ``p`` positions) quantized to uint8 into ``B`` (n,
    groups, pp, 4): channel ``4 g + i`` at position ``q`` is byte ``i`` of lane ``q`` of
    group ``g``, so that one 64-byte load is 16 positions' groups of 4 channels. Channels
    past ``c`` and positions past ``p`` (up to ``pp``, a multiple of 64) hold 0 (their
    weights are 0, or their sums are not stored)."""
    vector = ir.VectorType(F32, LANES)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    load = declare(module, "llvm.masked.load.v16f32.p0", vector,
                   (POINTER, I32, mask_type, vector))
    roundeven = declare(module, "llvm.roundeven.v16f32", vector, (vector,))
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, I64, I64, I64, POINTER, POINTER, I64, I64, POINTER)), name=PLANES_ENTRY)
    x, n, c, positions, scale_at, zero_at, groups, pp, out = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scales = _splat(builder, builder.load(scale_at, typ=F32), vector)
    zeros = _splat(builder, builder.load(zero_at, typ=F32), vector)
    lane_index = ir.Constant(ir.VectorType(I64, LANES), list(range(LANES)))
    plane, column = entry_alloca(builder, I64, "plane"), entry_alloca(builder, I64, "col")
    with counted_loop(builder, plane, _const(0), lambda: builder.mul(n, groups), "plane"):
        q = builder.load(plane, typ=I64)
        img = builder.sdiv(q, groups)
        first_channel = builder.mul(builder.sub(q, builder.mul(img, groups)), _const(GROUP))
        row = builder.gep(out, [builder.mul(q, builder.mul(pp, _const(GROUP)))],
                          inbounds=True, source_etype=I8)
        with counted_loop(builder, column, _const(0),
                          lambda: builder.sdiv(pp, _const(LANES)), "col"):
            p0 = builder.mul(builder.load(column, typ=I64), _const(LANES))
            mask = builder.icmp_signed("<", builder.add(_splat(builder, p0, lane_index.type),
                                                        lane_index),
                                       _splat(builder, positions, lane_index.type))
            quads = []
            for ci in range(GROUP):
                channel = builder.add(first_channel, _const(ci))
                present = builder.and_(mask, _splat(builder, builder.icmp_signed(
                    "<", channel, c), mask_type))
                source = builder.gep(x, [builder.add(builder.mul(builder.add(
                    builder.mul(img, c), channel), positions), p0)], source_etype=F32)
                values = builder.call(load, [source, ir.Constant(I32, 4), present,
                                             ir.Constant(vector, [0.0] * LANES)])
                quads.append(_quantized(builder, roundeven, values, scales, zeros, present))
            builder.store(_interleaved(builder, quads),
                          builder.gep(row, [builder.mul(p0, _const(GROUP))], inbounds=True,
                                      source_etype=I8), align=64)
    builder.ret(ir.Constant(I32, 0))


def _point_micro(module: ir.Module, rows: int, vectors: int) -> ir.Function:
    """``micro(W_rows, groups, B, group_stride, C_rows, ncols, rowsum, zero, multipliers,
    biases, bounds, flags, scale)``: a tile of ``rows`` output channels x ``vectors * 16``
    positions. Per group of 4 channels it loads ``vectors`` 64-byte vectors of the planes
    (``B + g * group_stride``: 16 positions' 4 uint8 activations each), broadcasts each
    row's 4 int8 weights (``W_rows[r] + 4 g``) and issues ``rows * vectors`` ``vpdpbusd``
    (the activations unsigned, the weights signed, as the instruction wants); then the
    zero point's correction ``z * rowsum`` per row, the epilogue per row, and stores to
    ``C_rows[r]`` masked to ``ncols`` positions."""
    ints = ir.VectorType(I32, LANES)
    floats = ir.VectorType(F32, LANES)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    dot = declare(module, "llvm.x86.avx512.vpdpbusd.512", ints, (ints, ints, ints))
    store = declare(module, "llvm.masked.store.v16f32.p0", ir.VoidType(),
                    (floats, POINTER, I32, mask_type))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), (
        POINTER, I64, POINTER, I64, POINTER, I64, POINTER, I32, POINTER, POINTER, POINTER,
        I64, F32)), name=f"qpoint{rows}x{vectors}")
    fn.linkage = "internal"
    w_rows, groups, planes, group_stride, c_rows, ncols, rowsum, zero, multipliers, biases, \
        bounds, flags, scale = fn.args
    for pointer in (w_rows, planes, c_rows, rowsum):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    tile, starts = _zeroed_tile(builder, w_rows, rows, vectors)
    step = entry_alloca(builder, I64, "g")
    with counted_loop(builder, step, _const(0), lambda: groups, "g"):
        g = builder.load(step, typ=I64)
        block = builder.gep(planes, [builder.mul(g, group_stride)], inbounds=True,
                            source_etype=I8)
        activations = [builder.load(builder.gep(block, [_const(64 * v)], inbounds=True,
                                                source_etype=I8), typ=ints, align=64)
                       for v in range(vectors)]
        for r in range(rows):
            four = builder.load(builder.gep(starts[r], [builder.mul(g, _const(GROUP))],
                                            inbounds=True, source_etype=I8), typ=I32, align=1)
            weights = _splat(builder, four, ints)
            for v in range(vectors):
                acc = builder.load(tile[r][v], typ=ints)
                builder.store(builder.call(dot, [acc, activations[v], weights]), tile[r][v])
    lane_index = ir.Constant(ir.VectorType(I64, LANES), list(range(LANES)))
    masks = [builder.icmp_signed("<", lane_index, _splat(builder, builder.sub(
        ncols, _const(LANES * v)), lane_index.type)) for v in range(vectors)]
    results = [[None] * vectors for _ in range(rows)]
    for r in range(rows):
        sums = builder.load(builder.gep(rowsum, [_const(r)], inbounds=True, source_etype=I32),
                            typ=I32)
        correction = _splat(builder, builder.mul(zero, sums), ints)
        for v in range(vectors):
            exact = builder.sub(builder.load(tile[r][v], typ=ints), correction)
            results[r][v] = builder.sitofp(exact, floats)
    _epilogue(builder, module, results, _row_operands(builder, rows, vectors), multipliers,
              biases, bounds, flags, scale)
    for r in range(rows):
        start = builder.load(builder.gep(c_rows, [_const(r)], inbounds=True,
                                         source_etype=POINTER), typ=POINTER)
        for v in range(vectors):
            where = builder.gep(start, [_const(LANES * v)], inbounds=True, source_etype=F32)
            builder.call(store, [results[r][v], where, ir.Constant(I32, 4), masks[v]])
    builder.ret_void()
    return fn


def _point_driver(module: ir.Module, micro: dict[tuple[int, int], ir.Function]) -> None:
    """``int32 tensoralg_qpoint(B, scale, zero, W, ldw, rowsum, groups, pp, p, M, C,
    tile_begin, tile_end, epilogue, flags)``: the pointwise convolution ``C[n, m, q] =
    float32(sum_c (q8[n, c, q] - z) * W[m, c])`` (then the epilogue, per output channel) of
    the planes ``B`` (:func:`_planes_driver`) by the int8 weight rows ``W`` (``ldw`` bytes
    apart, ``4 * groups`` used, zero-padded) into the NCHW ``C`` (n, M, p), for the tiles
    ``[tile_begin, tile_end)`` of 64 positions (image ``t / (pp / 64)``); every output
    channel of a tile, in near-equal blocks of up to 6."""
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, POINTER, POINTER, POINTER, I64, POINTER, I64, I64, I64, I64, POINTER, I64,
        I64, POINTER, I64)), name=POINT_ENTRY)
    planes, scale_at, zero_at, w, ldw, rowsum, groups, pp, positions, m_size, c, begin, end, \
        epilogue, flags = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scale = builder.load(scale_at, typ=F32)
    zero = builder.fptosi(builder.load(zero_at, typ=F32), I32)
    padded = builder.mul(builder.sdiv(builder.add(m_size, _const(NR - 1)), _const(NR)),
                         _const(NR))
    biases = builder.gep(epilogue, [padded], inbounds=True, source_etype=F32)
    bounds = builder.gep(epilogue, [builder.mul(padded, _const(2))], inbounds=True,
                         source_etype=F32)
    tiles_per_image = builder.sdiv(pp, _const(NR))
    w_table = entry_alloca(builder, ir.ArrayType(POINTER, MR), "w_rows")
    c_table = entry_alloca(builder, ir.ArrayType(POINTER, MR), "c_rows")
    tile, block = entry_alloca(builder, I64, "tile"), entry_alloca(builder, I64, "block")
    row_blocks = builder.sdiv(builder.add(m_size, _const(MR - 1)), _const(MR))
    group_stride = builder.mul(pp, _const(GROUP))
    with counted_loop(builder, tile, begin, lambda: end, "tile"):
        t = builder.load(tile, typ=I64)
        img = builder.sdiv(t, tiles_per_image)
        p0 = builder.mul(builder.sub(t, builder.mul(img, tiles_per_image)), _const(NR))
        left = builder.sub(positions, p0)
        ncols = builder.select(builder.icmp_signed("<", left, _const(NR)), left, _const(NR))
        vectors = builder.sdiv(builder.add(ncols, _const(LANES - 1)), _const(LANES))
        source = builder.gep(planes, [builder.add(builder.mul(builder.mul(img, groups),
                                                              group_stride),
                                                  builder.mul(p0, _const(GROUP)))],
                             inbounds=True, source_etype=I8)
        with counted_loop(builder, block, _const(0), lambda: row_blocks, "rows"):
            b = builder.load(block, typ=I64)
            m0 = builder.sdiv(builder.mul(b, m_size), row_blocks)
            m1 = builder.sdiv(builder.mul(builder.add(b, _const(1)), m_size), row_blocks)
            count = builder.sub(m1, m0)
            out_row = builder.add(builder.mul(builder.add(builder.mul(img, m_size), m0),
                                              positions), p0)
            _store_rows(builder, (w_table, c_table), count, lambda r: (
                builder.gep(w, [builder.mul(builder.add(m0, _const(r)), ldw)], inbounds=True,
                            source_etype=I8),
                builder.gep(c, [builder.add(out_row, builder.mul(_const(r), positions))],
                            inbounds=True, source_etype=F32)))
            args = [builder.bitcast(w_table, POINTER), groups, source, group_stride,
                    builder.bitcast(c_table, POINTER), ncols,
                    builder.gep(rowsum, [m0], inbounds=True, source_etype=I32), zero,
                    builder.gep(epilogue, [m0], inbounds=True, source_etype=F32),
                    builder.gep(biases, [m0], inbounds=True, source_etype=F32), bounds, flags,
                    scale]
            _call_variant(builder, micro, count, vectors, args)
    builder.ret(ir.Constant(I32, 0))


def _image_driver(module: ir.Module) -> None:
    """``int32 tensoralg_qimage(X, n, c, h, w, scale, zero, hp, wp, pt, pl, c4, B)``: the
    float32 NCHW ``X`` quantized into the uint8 channels-last ``B`` (n, hp, wp, c4): the
    image at ``(pt, pl)``, the border the zero point (what ConvInteger pads with), channels
    past ``c`` the zero point too (their weights are 0)."""
    vector = ir.VectorType(F32, LANES)
    mask_type = ir.VectorType(ir.IntType(1), LANES)
    pointers = ir.VectorType(POINTER, LANES)
    load = declare(module, "llvm.masked.load.v16f32.p0", vector,
                   (POINTER, I32, mask_type, vector))
    ints = ir.VectorType(I32, LANES)
    scatter = declare(module, "llvm.masked.scatter.v16i32.v16p0", ir.VoidType(),
                      (ints, pointers, I32, mask_type))
    roundeven = declare(module, "llvm.roundeven.v16f32", vector, (vector,))
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, I64, I64, I64, I64, POINTER, POINTER, I64, I64, I64, I64, I64, POINTER)),
        name=IMAGE_ENTRY)
    x, n, c, h, w, scale_at, zero_at, hp, wp, pt, pl, c4, out = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scale = builder.load(scale_at, typ=F32)
    zero = builder.load(zero_at, typ=F32)
    fill = builder.fptoui(zero, I8)
    index = entry_alloca(builder, I64, "i")
    total = builder.mul(builder.mul(builder.mul(n, hp), wp), c4)
    with counted_loop(builder, index, _const(0), lambda: total, "fill"):
        builder.store(fill, builder.gep(out, [builder.load(index, typ=I64)], inbounds=True,
                                        source_etype=I8))
    scales, zeros = _splat(builder, scale, vector), _splat(builder, zero, vector)
    lane_index = ir.Constant(ir.VectorType(I64, LANES), list(range(LANES)))
    # Four channels at a time: their 16-position rows quantized, interleaved so that each
    # position's four bytes are one 32-bit lane, and scattered as 16 lanes (a byte scatter of
    # each channel took four times the stores).
    plane, row, column = (entry_alloca(builder, I64, name) for name in ("plane", "row", "col"))
    groups = builder.sdiv(c4, _const(GROUP))
    with counted_loop(builder, plane, _const(0), lambda: builder.mul(n, groups), "plane"):
        q = builder.load(plane, typ=I64)
        img = builder.sdiv(q, groups)
        first_channel = builder.mul(builder.sub(q, builder.mul(img, groups)), _const(GROUP))
        with counted_loop(builder, row, _const(0), lambda: h, "row"):
            y = builder.load(row, typ=I64)
            start = builder.add(builder.mul(builder.add(builder.mul(
                builder.add(builder.mul(img, hp), builder.add(y, pt)), wp), pl), c4),
                first_channel)
            b_row = builder.gep(out, [start], inbounds=True, source_etype=I8)
            strides = builder.mul(lane_index, _splat(builder, c4, lane_index.type))
            with counted_loop(builder, column, _const(0), lambda: builder.sdiv(
                    builder.add(w, _const(LANES - 1)), _const(LANES)), "col"):
                x0 = builder.mul(builder.load(column, typ=I64), _const(LANES))
                mask = builder.icmp_signed("<", builder.add(_splat(
                    builder, x0, lane_index.type), lane_index), _splat(builder, w,
                                                                      lane_index.type))
                quads = []
                for ci in range(GROUP):
                    channel = builder.add(first_channel, _const(ci))
                    # channels past c (padding to 4) read nothing: 0.0, the zero point's byte
                    present = builder.and_(mask, _splat(builder, builder.icmp_signed(
                        "<", channel, c), mask_type))
                    plane_row = builder.add(builder.mul(builder.add(builder.mul(img, c),
                                                                    channel), h), y)
                    source = builder.gep(x, [builder.add(builder.mul(plane_row, w), x0)],
                                         source_etype=F32)
                    values = builder.call(load, [source, ir.Constant(I32, 4), present,
                                                 ir.Constant(vector, [0.0] * LANES)])
                    quads.append(_quantized(builder, roundeven, values, scales, zeros))
                lanes = _interleaved(builder, quads)
                first = builder.gep(b_row, [builder.mul(x0, c4)], source_etype=I8)
                where = builder.gep(first, [strides], source_etype=I8)
                where.type = pointers          # a vector GEP (llvmlite types it as one pointer)
                builder.call(scatter, [lanes, where, ir.Constant(I32, 1), mask])
    builder.ret(ir.Constant(I32, 0))


__all__ = ["CONV_ENTRY", "ENTRY", "IMAGE_ENTRY", "NR", "PLANES_ENTRY", "POINT_ENTRY",
           "pack_int8_weight", "qgemm_module", "quantized_row_bytes"]
