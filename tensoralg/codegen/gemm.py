"""A dense GEMM with a fused bias/ReLU epilogue, emitted as LLVM IR with explicit vectors.

``C[i, j] = act(sum(k, A[i, k] * W[k, j]) + bias[j])`` for a weight ``W`` packed once (see
:func:`pack_weight`). This is the dense sub-contraction of a layer (``Gemm``/``MatMul`` followed
by a bias and an activation) that the ONNX importer used to hand to BLAS; generated here it
runs from level with NumPy's OpenBLAS plus a separate epilogue pass to 1.7x faster on the layer
shapes of the recommender benchmarks, depending on the VM's phase (``benchmarks/kernel_micro.py``
times 256 x 256 x 512), because

- the weight is packed at load time, not on every call: panels of ``NR`` columns, ``KC`` rows
  at a time, each ``KC x NR`` block contiguous and small enough to stay in L1 while every row
  block of ``A`` streams past it;
- the micro-kernel keeps an ``MR x NR`` tile of ``C`` (6 rows x 4 vectors: 24 of the 32 vector
  registers; 12 rows x 1 vector for a panel one vector wide) in registers across ``KC`` steps:
  per step it loads 4 vectors of ``W`` and broadcasts 6 values of ``A`` for 24 fused
  multiply-adds, so it is bound by the FMA units, not by loads;
- the bias and ReLU are applied to the tile while it is in registers, so the output is written
  once and never read back.

The statement compiler's register tiles (``ir/passes/tile.py``) reach 10-15 GFMA/s on the same
product (``kernel_micro.py``); this hand-scheduled kernel 50-83 (the machine's peak is about
90). It is a separate emitter, not an IR pass, because its shape (a register tile of a 2-D
output updated by an outer product per step) is the one LLVM never derives from scalar loops.
K may run in sub-blocks that lie apart in A, and the product may repeat over planes: that is
how ``runtime/gemm.py`` computes a 2-D convolution without a patch matrix.

Edges are exact and in bounds: the last panel's columns are masked (masked loads and stores
touch no memory outside the mask), the last row block runs a micro-kernel with fewer rows, and
``K = 0`` still writes ``act(bias)``. The packed weight is zero-padded to whole panels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, if_then

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
MR = 6                   # rows of the register tile
TALL_MR = 12             # rows of a one-vector tile (a narrow panel): 12 accumulators
VECTORS = 4              # vectors across the register tile's columns (AVX-512; 2 on AVX2)
L1_BLOCK_BYTES = 32768   # a KC x NR block of the packed weight: fits a 48 KiB L1 with room
FLAG_BIAS, FLAG_RELU = 1, 2
ENTRY = "tensoralg_gemm"


@dataclass(frozen=True, slots=True)
class GemmShape:
    """The blocking of one generated GEMM: element type, vector lanes and tile sizes.

    >>> GemmShape.for_host(np.float32, avx512=True).nr
    64
    """

    dtype: np.dtype
    lanes: int           # elements per vector register
    vectors: int         # vectors across a tile row
    mr: int = MR

    @property
    def nr(self) -> int:
        return self.lanes * self.vectors

    @property
    def kc(self) -> int:
        return max(16, L1_BLOCK_BYTES // (self.nr * self.dtype.itemsize))

    @staticmethod
    def for_host(dtype: np.dtype, avx512: bool) -> "GemmShape":
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"the generated GEMM is for float32 and float64, not {dtype}")
        width = 64 if avx512 else 32
        return GemmShape(dtype, width // dtype.itemsize, VECTORS if avx512 else 2)


def pack_weight(weight: np.ndarray, shape: GemmShape) -> np.ndarray:
    """``weight`` (K x N) as panels of ``shape.nr`` columns, zero-padded: ``[N/nr, K, nr]``.

    >>> w = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> pack_weight(w, GemmShape(np.dtype(np.float32), 2, 1))[1].tolist()
    [[2.0, 0.0], [5.0, 0.0]]
    """
    k, n = weight.shape
    panels = -(-n // shape.nr)
    padded = np.zeros((k, panels * shape.nr), shape.dtype)
    padded[:, :n] = weight
    return np.ascontiguousarray(padded.reshape(k, panels, shape.nr).transpose(1, 0, 2))


def gemm_module(shape: GemmShape) -> ir.Module:
    """The module exporting ``int32 tensoralg_gemm(A, lda, Wp, K, N, C, ldc, bias, flags,
    row_begin, row_end, kc, a_kblock, n_outer, a_outer, c_outer, n_inner, a_inner,
    c_inner)``: rows ``[row_begin, row_end)`` of ``C`` (leading dimension ``ldc``) from ``A``
    (leading dimension ``lda``) and the packed weight ``Wp``; ``bias`` (N values) is added when
    ``flags & 1`` and ReLU applied when ``flags & 2``. Returns 0.

    K runs in sub-blocks of ``kc`` values, sub-block ``s`` of a row of A starting
    ``s * a_kblock`` elements into it (``a_kblock = kc`` for a plain GEMM; a convolution's
    kernel rows lie an image row apart). The whole product is repeated over
    ``n_outer x n_inner`` planes, A and C advancing by the given strides (one plane for a
    plain GEMM; a convolution's images and output rows).

    >>> "tensoralg_gemm" in str(gemm_module(GemmShape.for_host(np.float64, avx512=False)))
    True
    """
    module = ir.Module(name=f"gemm_{shape.dtype.name}")
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()
    micro = {(rows, vectors): _micro_kernel(module, shape, scalar, rows, vectors)
             for vectors in range(1, shape.vectors + 1)
             for rows in range(1, (TALL_MR if vectors == 1 else shape.mr) + 1)}
    _driver(module, shape, micro)
    return module


def _splat(builder: ir.IRBuilder, value: ir.Value, vector: ir.VectorType) -> ir.Value:
    lane0 = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(lane0, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, vector.count), [0] * vector.count))


def _micro_kernel(module: ir.Module, shape: GemmShape, scalar: ir.Type, rows: int,
                  vectors: int) -> ir.Function:
    """``micro(A, lda, Wk, C, ldc, kc, nsub, a_sub, ncols, bias, mode)``: a
    ``rows x (vectors * lanes)`` tile of ``C`` over ``nsub`` runs of ``kc`` steps, run ``s``
    reading A from ``s * a_sub`` elements on (fewer vectors for a narrow last panel). ``mode``:
    1 adds the tile already in ``C`` (a later K block), 2 applies the epilogue (the last K
    block), with the flags in bits 2 and up."""
    lanes = shape.lanes
    vector = ir.VectorType(scalar, lanes)
    mask_type = ir.VectorType(I1, lanes)
    name = "v{}f{}".format(lanes, scalar.intrinsic_name[1:])
    fma = declare(module, f"llvm.fma.{name}", vector, (vector, vector, vector))
    load = declare(module, f"llvm.masked.load.{name}.p0", vector,
                   (POINTER, I32, mask_type, vector))
    store = declare(module, f"llvm.masked.store.{name}.p0", ir.VoidType(),
                    (vector, POINTER, I32, mask_type))
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), (
        POINTER, I64, POINTER, POINTER, I64, I64, I64, I64, I64, POINTER, I32)),
        name=f"micro{rows}x{vectors}")
    fn.linkage = "internal"
    a, lda, w, c, ldc, kc, nsub, a_sub, ncols, bias, mode = fn.args
    for pointer in (a, w, c, bias):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    zero = ir.Constant(vector, [0.0] * lanes)
    align = ir.Constant(I32, shape.dtype.itemsize)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    tile = [[entry_alloca(builder, vector, f"c{r}_{v}") for v in range(vectors)]
            for r in range(rows)]
    for row in tile:
        for slot in row:
            builder.store(zero, slot)
    step, sub = entry_alloca(builder, I64, "k"), entry_alloca(builder, I64, "sub")
    with counted_loop(builder, sub, const(0), lambda: nsub, "sub"):
        run = builder.load(sub, typ=I64)
        a_run = at(a, builder.mul(run, a_sub))
        w_run = at(w, builder.mul(builder.mul(run, kc), const(shape.nr)))
        _steps(builder, shape, scalar, vector, fma, tile, rows, vectors, step, kc, a_run, lda,
               w_run)
    lane_index = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

    masks = [builder.icmp_signed("<", lane_index, _splat(builder, builder.sub(
        ncols, const(lanes * v)), ir.VectorType(I64, lanes))) for v in range(vectors)]
    rows_out = [[builder.gep(c, [builder.add(builder.mul(const(r), ldc), const(lanes * v))],
                             inbounds=True, source_etype=scalar) for v in range(vectors)]
                for r in range(rows)]

    def flag(bit: int) -> ir.Value:
        return builder.icmp_unsigned("!=", builder.and_(mode, ir.Constant(I32, bit)),
                                     ir.Constant(I32, 0))

    with if_then(builder, flag(1), "accumulate"):
        for r in range(rows):
            for v in range(vectors):
                old = builder.call(load, [rows_out[r][v], align, masks[v], zero])
                builder.store(builder.fadd(builder.load(tile[r][v], typ=vector), old), tile[r][v])
    with if_then(builder, builder.and_(flag(2), flag(4 * FLAG_BIAS)), "bias"):
        added = [builder.call(load, [at(bias, const(lanes * v)), align, masks[v], zero])
                 for v in range(vectors)]
        for r in range(rows):
            for v in range(vectors):
                builder.store(builder.fadd(builder.load(tile[r][v], typ=vector), added[v]),
                              tile[r][v])
    with if_then(builder, builder.and_(flag(2), flag(4 * FLAG_RELU)), "relu"):
        for r in range(rows):
            for v in range(vectors):
                value = builder.load(tile[r][v], typ=vector)
                # max(x, 0) with NaN kept, as NumPy's maximum and the statement compiler's max do
                keep = builder.fcmp_unordered(">", value, zero)
                builder.store(builder.select(keep, value, zero), tile[r][v])
    for r in range(rows):
        for v in range(vectors):
            builder.call(store, [builder.load(tile[r][v], typ=vector), rows_out[r][v], align,
                                 masks[v]])
    builder.ret_void()
    return fn


def _steps(builder: ir.IRBuilder, shape: GemmShape, scalar: ir.Type, vector: ir.Type,
           fma: ir.Function, tile: list, rows: int, vectors: int, step: ir.Value,
           kc: ir.Value, a: ir.Value, lda: ir.Value, w: ir.Value) -> None:
    """``kc`` steps of the outer-product update of ``tile`` (the micro-kernel's inner loop)."""
    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    lanes = shape.lanes
    with counted_loop(builder, step, ir.Constant(I64, 0), lambda: kc, "k"):
        k = builder.load(step, typ=I64)
        w_row = at(w, builder.mul(k, ir.Constant(I64, shape.nr)))
        w_vectors = [builder.load(at(w_row, ir.Constant(I64, lanes * v)), typ=vector,
                                  align=shape.dtype.itemsize) for v in range(vectors)]
        for r in range(rows):
            a_value = builder.load(at(a, builder.add(builder.mul(ir.Constant(I64, r), lda), k)),
                                   typ=scalar)
            broadcast = _splat(builder, a_value, vector)
            for v in range(vectors):
                acc = builder.load(tile[r][v], typ=vector)
                builder.store(builder.call(fma, [broadcast, w_vectors[v], acc]), tile[r][v])


def _ceil_div(builder: ir.IRBuilder, size: ir.Value, block: ir.Value | int) -> ir.Value:
    block = ir.Constant(I64, block) if isinstance(block, int) else block
    return builder.sdiv(builder.add(size, builder.sub(block, ir.Constant(I64, 1))), block)


def _at_least_one(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    one = ir.Constant(I64, 1)
    return builder.select(builder.icmp_signed("<", value, one), one, value)


def _driver(module: ir.Module, shape: GemmShape, micro: dict[tuple[int, int], ir.Function]
            ) -> None:
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, I64, POINTER, I64, I64, POINTER, I64, POINTER, I32, I64, I64,
        I64, I64, I64, I64, I64, I64, I64, I64)), name=ENTRY)
    (a, lda, w, k_size, n_size, c, ldc, bias, flags, begin, end, kc_size, a_kblock,
     n_outer, a_outer, c_outer, n_inner, a_inner, c_inner) = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    panels = _ceil_div(builder, n_size, shape.nr)
    # K runs in sub-blocks of kc_size (a convolution's kernel rows); as many as fit the L1
    # block go to the micro-kernel at once, so its tile stays in registers across them.
    total_sub = _ceil_div(builder, k_size, kc_size)
    per_block = _at_least_one(builder, builder.sdiv(const(shape.kc), kc_size))
    # K = 0 still runs one (empty) K block, so that the epilogue writes act(bias).
    k_blocks = _at_least_one(builder, _ceil_div(builder, total_sub, per_block))
    epilogue = builder.shl(flags, ir.Constant(I32, 2))
    p, kb, rb, outer, inner = (entry_alloca(builder, I64, name) for name in
                               ("panel", "kblock", "rowblock", "outer", "inner"))
    # Planes: the same product on n_outer x n_inner blocks of A and C (a convolution's
    # images and output rows); a plain GEMM is one plane.
    with counted_loop(builder, outer, const(0), lambda: n_outer, "outer"), \
            counted_loop(builder, inner, const(0), lambda: n_inner, "inner"):
        o, q = builder.load(outer, typ=I64), builder.load(inner, typ=I64)
        a_plane = at(a, builder.add(builder.mul(o, a_outer), builder.mul(q, a_inner)))
        c_plane = at(c, builder.add(builder.mul(o, c_outer), builder.mul(q, c_inner)))
        _plane(builder, shape, micro, at, const, a_plane, lda, w, k_size, n_size, c_plane,
               ldc, bias, begin, end, kc_size, a_kblock, panels, k_blocks,
               epilogue, p, kb, rb, total_sub, per_block)
    builder.ret(ir.Constant(I32, 0))


def _plane(builder: ir.IRBuilder, shape: GemmShape, micro: dict[tuple[int, int], ir.Function],
           at: Any, const: Any, a: ir.Value, lda: ir.Value, w: ir.Value, k_size: ir.Value,
           n_size: ir.Value, c: ir.Value, ldc: ir.Value, bias: ir.Value, begin: ir.Value,
           end: ir.Value, kc_size: ir.Value, a_kblock: ir.Value, panels: ir.Value,
           k_blocks: ir.Value, epilogue: ir.Value, p: ir.Value,
           kb: ir.Value, rb: ir.Value, total_sub: ir.Value, per_block: ir.Value) -> None:
    """One plane: panels of the weight, K blocks of ``per_block`` sub-blocks of ``kc_size``
    (sub-block ``s`` of A starting ``s * a_kblock`` elements into each row), row blocks of
    ``mr``."""
    with counted_loop(builder, p, const(0), lambda: panels, "panel"):
        j0 = builder.mul(builder.load(p, typ=I64), const(shape.nr))
        ncols = builder.sub(n_size, j0)
        # Tile variants: (vectors - 1) * mr + (rows - 1); a narrow last panel has fewer vectors.
        vectors = builder.select(builder.icmp_signed("<", ncols, const(shape.nr)),
                                 _ceil_div(builder, ncols, shape.lanes), const(shape.vectors))
        # A one-vector panel takes taller tiles (12 rows), so that enough accumulators hide
        # the latency of the multiply-adds.
        mr = builder.select(builder.icmp_signed("==", vectors, const(1)), const(TALL_MR),
                            const(shape.mr))
        row_blocks = _ceil_div(builder, builder.sub(end, begin), mr)
        wide = builder.mul(builder.sub(vectors, const(1)), const(TALL_MR))
        panel = at(w, builder.mul(j0, k_size))
        with counted_loop(builder, kb, const(0), lambda: k_blocks, "kblock"):
            first_sub = builder.mul(builder.load(kb, typ=I64), per_block)
            left = builder.sub(total_sub, first_sub)
            nsub = builder.select(builder.icmp_signed("<", left, per_block), left, per_block)
            k0 = builder.mul(first_sub, kc_size)
            a_k0 = builder.mul(first_sub, a_kblock)
            rest = builder.sub(k_size, k0)
            # One sub-block per K block (a plain GEMM): the last one may be short. Several
            # (a convolution): they are whole, kc_size dividing K.
            kc = builder.select(builder.icmp_signed("<", rest, kc_size), rest, kc_size)
            later = builder.icmp_signed(">", k0, const(0))
            last = builder.icmp_signed(">=", builder.add(k0, builder.mul(nsub, kc)), k_size)
            mode = builder.or_(builder.or_(builder.zext(later, I32), builder.shl(
                builder.zext(last, I32), ir.Constant(I32, 1))), epilogue)
            w_block = at(panel, builder.mul(k0, const(shape.nr)))
            with counted_loop(builder, rb, const(0), lambda: row_blocks, "rows"):
                i0 = builder.add(begin, builder.mul(builder.load(rb, typ=I64), mr))
                rows = builder.sub(end, i0)
                rows = builder.select(builder.icmp_signed("<", rows, mr), rows, mr)
                args = [at(a, builder.add(builder.mul(i0, lda), a_k0)), lda, w_block,
                        at(c, builder.add(builder.mul(i0, ldc), j0)), ldc, kc, nsub, a_kblock,
                        ncols, at(bias, j0), mode]
                done = builder.append_basic_block("tile.done")
                variant = builder.add(wide, builder.sub(rows, const(1)))
                switch = builder.switch(variant, done)
                for (count, width), kernel in micro.items():
                    case = builder.append_basic_block(f"tile.{count}x{width}")
                    switch.add_case(const((width - 1) * TALL_MR + count - 1), case)
                    builder.position_at_end(case)
                    builder.call(kernel, args)
                    builder.branch(done)
                builder.position_at_end(done)


__all__ = ["FLAG_BIAS", "FLAG_RELU", "GemmShape", "gemm_module", "pack_weight"]
