"""A dense GEMM with a fused bias/ReLU epilogue, emitted as LLVM IR with explicit vectors.

``C[i, j] = act(sum(k, A[i, k] * W[k, j]) + bias[j])`` for a weight ``W`` packed once (see
:func:`pack_weight`). This is the dense sub-contraction of a layer (``Gemm``/``MatMul`` followed
by a bias and an activation) that the ONNX importer used to hand to BLAS; generated here it
runs from level with NumPy's OpenBLAS plus a separate epilogue pass to 1.7x faster on the layer
shapes of the recommender benchmarks, depending on the VM's phase (``benchmarks/kernel_micro.py``
times 256 x 256 x 512), because

- the weight is packed at load time, not on every call: panels of ``NR`` columns, each
  ``K_BLOCK x NR`` block contiguous (in L2, streamed once per tile) while the tile's rows of
  ``A`` stay in L1, as BLIS blocks its micro-kernel;
- the micro-kernel keeps an ``MR x NR`` tile of ``C`` (6 rows x 4 vectors: 24 of the 32 vector
  registers; 8 x 3, 12 x 2 and 12 x 1 for a narrower last panel) in registers across a K block:
  per step it loads 4 vectors of ``W`` and broadcasts 6 values of ``A`` for 24 fused
  multiply-adds, so it is bound by the FMA units, not by loads;
- the bias and ReLU are applied to the tile while it is in registers, so the output is written
  once and never read back.

The statement compiler's register tiles (``ir/passes/tile.py``) reach 10-15 GFMA/s on the same
product (``kernel_micro.py``); this hand-scheduled kernel 50-83 (the machine's peak is about
90). It is a separate emitter, not an IR pass, because its shape (a register tile of a 2-D
output updated by an outer product per step) is the one LLVM never derives from scalar loops.
K may run in sub-blocks that lie apart in A, and the rows of A and C may lie on planes with
their own strides, a register tile taking its rows from a table of row addresses: that is how
``runtime/gemm.py`` computes a 2-D convolution without a patch matrix, a tile running across
output rows and images (with 7 x 7 outputs, 6-row tiles that stopped at each output row left a
1-row tile in every row, and the whole weight was streamed once per output row: 25 against 50
GFMA/s for ResNet-18's last 3x3 layers).

C's columns may lie a fixed stride apart instead of next to each other: the tile is then
scattered (and a later K block's partial sums gathered), so that a convolution writes its NCHW
planes directly, positions being the rows.

Edges are exact and in bounds: the last panel's columns are masked (masked loads, stores,
gathers and scatters touch no memory outside the mask), the last row block runs a micro-kernel
with fewer rows, and ``K = 0`` still writes ``act(bias)``. The packed weight is zero-padded to
whole panels.

The module holds the driver and the one-row micro-kernels; every other tile shape is a module
of its own (:func:`tile_module`), built when a call that runs it is bound and called through
the driver's table (``codegen/tile_table.py``): all 38 shapes in one module took ~5 s of LLVM.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from tensoralg.codegen.activation import apply_to_tile, emit_clamp
from tensoralg.codegen.epilogue import FLAG_BIAS, FLAG_CLIP, FLAG_RELU
from tensoralg.codegen.llvm_helpers import (
    counted_loop,
    declare,
    entry_alloca,
    if_else,
    if_then,
    prefetch,
)
from tensoralg.codegen.llvm_helpers import splat as _splat
from tensoralg.codegen.tile_table import call_by_width, call_tile, declare_table

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
MR = 6                   # rows of the register tile
TALL_MR = 12             # rows of a one-vector tile (a narrow panel): 12 accumulators
VECTORS = 4              # vectors across the register tile's columns (AVX-512; 2 on AVX2)
L1_BLOCK_BYTES = 32768   # a KC x NR block of input kept in L1 (planar and patch kernels)
# The GEMM's K block (BLIS's kc): the rows of A a tile broadcasts stay in L1 and the
# K_BLOCK x NR block of the packed weight, streamed once per tile, in L2. Each further K block
# is one more pass over C (gathered and scattered again when C is NCHW planes), so the block is
# as long as a share of L2 allows: an eighth of it for the weight block (the rest holds the
# rows of A that later tiles read and the lines of C), from 384 rows (a block sized to L1, 128
# rows of 64 float32, made three times the passes over C: on a Zen 4 core, 1 MiB of L2,
# ResNet-18's 3x3 layers ran at 85-100 GFLOP/s with it and 100-110 with 384) up to 1536. On
# this Xeon (2 MiB of L2: 1024 rows) against 384, same process, one thread, float32 (``python
# benchmarks/conv_epilogue_ab.py kernels``, two runs): 6272x1152x32 1.4-1.5x, 3000x576x64
# 1.4x, 1024x768x3072 1.2x, 512x2304x512 1.04-1.07x; channels-last 3x3 convolutions at batch 8
# with 128 input channels (K = 1152 in one block instead of three) 1.15-1.37x, 256 -> 256 at
# 14 x 14 1.1x, 512 -> 512 at 7 x 7 1.03x, 64 -> 64 (K = 576, one block either way) even; 768
# to 2560 rows ran within noise of each other (an ad hoc sweep). Whole models at batch 8, one
# thread, 384 rows' time over this host's (``python benchmarks/conv_epilogue_ab.py model``,
# the "K block 384" row; a quiet hour): ResNet-50 1.19, ResNet-18 1.10, DenseNet-121 1.04,
# GoogLeNet 0.99.
K_BLOCK = 384
K_BLOCK_MAX = 1536
L2_SHARE = 8
ROW_BYTES = 256          # a packed weight row on AVX-512: 4 vectors of 64 bytes


def k_block_for(l2_bytes: int | None) -> int:
    """The K block for a host with ``l2_bytes`` of L2 (``None``: unknown): the rows of 256
    bytes (AVX-512's panel row) that fill an ``L2_SHARE``-th of it, in multiples of 128, within
    ``[K_BLOCK, K_BLOCK_MAX]``. An AVX2 host's panel rows are 64 bytes, but its K block is
    not made four times longer: the rows of A a tile broadcasts (6 x K block) would leave L1.

    >>> k_block_for(2 << 20), k_block_for(1 << 20), k_block_for(None)
    (1024, 512, 384)
    """
    if not l2_bytes:
        return K_BLOCK
    rows = l2_bytes // (L2_SHARE * ROW_BYTES) // 128 * 128
    return max(K_BLOCK, min(K_BLOCK_MAX, rows))

# How far ahead along K a plain GEMM's micro-kernel prefetches each row of A into L1. Its six
# rows lie K values apart, six streams the hardware prefetchers follow late; a software
# prefetch 256 bytes ahead made the generated GEMM 3-15% faster on this Xeon (one thread,
# float32, K-contiguous A, same-process A/B: 600x576x64 53 -> 57, 3000x576x64 48 -> 52,
# 1024x768x3072 45 -> 47-52 GFMA/s; ``python benchmarks/conv_epilogue_ab.py kernels``, whose
# absolute rates follow the VM's drift). A convolution's rows are neighbouring positions of one
# image row, whose lines the hardware already streams: there it gained nothing, and is off.
PREFETCH_BYTES = 256
# Whether a tile scattering into NCHW planes prefetches its output lines for writing before
# its K loop. Its stores go to one line in each of up to 64 planes, read for ownership from
# memory one by one when the epilogue runs: the store buffer filled and the core stalled.
# 3x3 convolutions, batch 8, one thread, same-process A/B (``python
# benchmarks/conv_epilogue_ab.py kernels``): 64 -> 64 channels at 56 x 56 39-45 -> 46-54
# GFMA/s, 16 -> 64 at 54 x 54 22-23 -> 35-38, 32 -> 128 at 54 x 54 30 -> 38 (one run 53 ->
# 50), smaller planes within noise; ResNet-18 and SqueezeNet at batch 8 1.02x.
SCATTER_PREFETCH = True
# Whether the first tiles over a block of the packed weight prefetch the next block (the
# next K block, or the next panel's first), a line a step, each tile a share of it. Where
# few tiles share a block (batch 1: a convolution's 49 positions are 9 tiles, a dense layer's
# one row a single tile), every block is read from memory once, in a stream the hardware
# prefetchers start late. One thread, same process, whole models, off against on (an ad hoc
# script, 2026-12-05): ResNet-18 0.93, RegNetX-400MF 0.92, MobileNetV2 0.95, ResNet-50
# 0.96-0.98, ResNet-18 at batch 8 0.96, DenseNet-121 and SqueezeNet 0.99, GoogLeNet 1.01;
# Llama at batch 1 0.90, DCN at 256 0.93, BERT 0.94, GPT-2 at 8 0.98, DeepFM at 256 0.99.
WEIGHT_PREFETCH = True

ENTRY = "tensoralg_gemm"
TILES = "tensoralg_gemm_tiles"      # the driver's table of tiles (codegen/tile_table.py)
# micro(A_rows, Wk, C_rows, kc, nsub, a_sub, ncols, bias, mode, bounds, c_col, prefetch_a,
# W_ahead): see _micro_kernel
TILE_TYPE = ir.FunctionType(ir.VoidType(), (POINTER, POINTER, POINTER, I64, I64, I64, I64,
                                            POINTER, I32, POINTER, I64, I1, POINTER))


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
    k_block: int = K_BLOCK   # the GEMM's K block: rows of the packed weight a tile runs over

    @property
    def nr(self) -> int:
        return self.lanes * self.vectors

    @property
    def kc(self) -> int:
        """Input rows of an L1 block (the planar and patch kernels)."""
        return max(16, L1_BLOCK_BYTES // (self.nr * self.dtype.itemsize))

    def rows_for(self, vectors: int) -> int:
        """Rows of the register tile of a panel ``vectors`` wide: as many accumulators as the
        full tile (``mr * vectors``), up to ``TALL_MR`` rows. A narrow last panel (96 columns
        are a panel of 64 and one of 32) keeps its multiply-adds' latency hidden: with 6 rows
        of 2 vectors, SqueezeNet's first layer ran the panel of 32 at half speed.

        >>> shape = GemmShape.for_host(np.float32, avx512=True)
        >>> [shape.rows_for(v) for v in (1, 2, 3, 4)]
        [12, 12, 8, 6]
        """
        return min(TALL_MR, self.mr * self.vectors // vectors)

    @staticmethod
    def for_host(dtype: np.dtype, avx512: bool) -> "GemmShape":
        """The blocking for this host: its vector width and its L2's K block."""
        from tensoralg.codegen.build import host_l2_bytes

        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise ValueError(f"the generated GEMM is for float32 and float64, not {dtype}")
        width = 64 if avx512 else 32
        vectors = VECTORS if avx512 else 2
        return GemmShape(dtype, width // dtype.itemsize, vectors,
                         k_block=k_block_for(host_l2_bytes()))


def pack_weight(weight: np.ndarray, shape: GemmShape) -> np.ndarray:
    """``weight`` (K x N) as panels of ``shape.nr`` columns, zero-padded: ``[N/nr, K, nr]``,
    starting on a 64-byte boundary.

    The micro-kernel loads whole vectors of a panel row at every step: on a boundary each is
    one cache line; NumPy's 16-byte aligned arrays made most of them two (a split load), and
    the GEMM 5-10% slower on AVX-512 (``python benchmarks/conv_epilogue_ab.py kernels``).

    >>> w = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> packed = pack_weight(w, GemmShape(np.dtype(np.float32), 2, 1))
    >>> packed[1].tolist(), packed.ctypes.data % 64
    ([[2.0, 0.0], [5.0, 0.0]], 0)
    """
    k, n = weight.shape
    panels = -(-n // shape.nr)
    padded = np.zeros((k, panels * shape.nr), shape.dtype)
    padded[:, :n] = weight
    packed = aligned_empty((panels, k, shape.nr), shape.dtype)
    packed[...] = padded.reshape(k, panels, shape.nr).transpose(1, 0, 2)
    return packed


def aligned_empty(shape: tuple[int, ...], dtype: np.dtype, alignment: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``alignment``-byte boundary
    (a view into a slightly larger byte buffer, which it keeps alive).

    >>> aligned_empty((3, 5), np.float64).ctypes.data % 64
    0
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(size + alignment, np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + size].view(dtype).reshape(shape)


def gemm_module(shape: GemmShape) -> ir.Module:
    """The module exporting ``int32 tensoralg_gemm(A, lda, Wp, K, N, C, ldc, bias, flags,
    row_begin, row_end, run, a_run, plane_rows, n_inner, a_inner, c_inner, a_outer,
    c_outer, c_col)``: rows ``[row_begin, row_end)`` of ``C`` from ``A`` and the packed weight ``Wp``;
    ``bias`` (N values) is added when ``flags & 1``, ReLU applied when ``flags & 2`` and
    the clamp ``min(max(x, bias[N]), bias[N + 1])`` when ``flags & 4``, and a smooth
    activation when a bit of ``codegen.epilogue.SMOOTH_FLAGS`` is set (its alpha and beta
    at ``bias[N + 2]``, ``bias[N + 3]``). Returns 0.

    K is made of runs of ``run`` values, run ``s`` of a row of A starting ``s * a_run``
    elements into it (``a_run = run = kc`` for a plain GEMM; a convolution's kernel rows lie
    an image row apart). Rows are numbered across planes of ``plane_rows`` rows: row ``i``
    lies at ``(i % plane_rows) * lda + q * a_inner + o * a_outer`` in A, and likewise with
    ``ldc, c_inner, c_outer`` in C, where ``i / plane_rows = o * n_inner + q`` (one plane
    for a plain GEMM; a convolution's output rows within its images). Column ``j`` of a row
    of C lies ``j * c_col`` elements into it: 1 for a row-major C; a convolution writing NCHW
    planes passes the plane size, its rows being positions (``ldc = 1``).

    >>> "tensoralg_gemm" in str(gemm_module(GemmShape.for_host(np.float64, avx512=False)))
    True
    """
    module = ir.Module(name=f"gemm_{shape.dtype.name}")
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()
    # The one-row tiles live here; the others are built on demand (codegen/tile_table.py).
    one_row = {vectors: _micro_kernel(module, shape, scalar, 1, vectors)
               for vectors in range(1, shape.vectors + 1)}
    _driver(module, shape, one_row)
    return module


def tile_index(rows: int, vectors: int) -> int:
    """The slot of the ``rows x vectors`` tile in the driver's table :data:`TILES`."""
    return (vectors - 1) * TALL_MR + rows - 1


def tile_entry(rows: int, vectors: int) -> str:
    """The exported name of the ``rows x vectors`` tile in its :func:`tile_module`."""
    return f"tensoralg_gemm_tile{rows}x{vectors}"


def tile_module(shape: GemmShape, rows: int, vectors: int) -> ir.Module:
    """The module exporting the ``rows x vectors`` micro-kernel alone (:func:`tile_entry`),
    for the table of :func:`gemm_module`'s driver.

    >>> shape = GemmShape.for_host(np.float32, avx512=False)
    >>> tile_entry(6, 2) in str(tile_module(shape, 6, 2))
    True
    """
    module = ir.Module(name=f"gemm_tile_{shape.dtype.name}_{rows}x{vectors}")
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()
    _micro_kernel(module, shape, scalar, rows, vectors, tile_entry(rows, vectors))
    return module


def tile_variants(shape: GemmShape, columns: int, rows: int) -> set[tuple[int, int]]:
    """The tiles ``(rows, vectors)`` the driver runs for a call of ``rows`` rows (``row_end -
    row_begin``) and ``columns`` columns (N): each panel's width, the last one narrower, and
    the near-equal row blocks of each (two sizes at most).

    >>> sorted(tile_variants(GemmShape.for_host(np.float32, avx512=True), 80, 49))
    [(5, 4), (6, 4), (9, 1), (10, 1)]
    """
    if columns <= 0 or rows <= 0:
        return set()
    widths = {shape.vectors} if columns >= shape.nr else set()
    if columns % shape.nr:
        widths.add(-(-(columns % shape.nr) // shape.lanes))
    found = set()
    for vectors in widths:
        blocks = -(-rows // shape.rows_for(vectors))
        found |= {(rows // blocks, vectors), (-(-rows // blocks), vectors)}
    return found


def vector_intrinsics(module: ir.Module, scalar: ir.Type, lanes: int
                      ) -> tuple[ir.VectorType, ir.VectorType, ir.Function, ir.Function,
                                 ir.Function]:
    """The vector type of ``lanes`` values of ``scalar``, its mask type, and the ``llvm.fma``,
    ``llvm.masked.load`` and ``llvm.masked.store`` intrinsics on it (declared in ``module``
    once): what every register-tiled micro-kernel starts from."""
    vector = ir.VectorType(scalar, lanes)
    mask_type = ir.VectorType(I1, lanes)
    name = "v{}f{}".format(lanes, scalar.intrinsic_name[1:])
    fma = declare(module, f"llvm.fma.{name}", vector, (vector, vector, vector))
    load = declare(module, f"llvm.masked.load.{name}.p0", vector,
                   (POINTER, I32, mask_type, vector))
    store = declare(module, f"llvm.masked.store.{name}.p0", ir.VoidType(),
                    (vector, POINTER, I32, mask_type))
    return vector, mask_type, fma, load, store


def masked_gather(module: ir.Module, scalar: ir.Type, lanes: int) -> ir.Function:
    """The ``llvm.masked.gather`` intrinsic of ``lanes`` values of ``scalar`` from a vector of
    pointers (declared in ``module`` once): masked-off lanes read no memory."""
    vector = ir.VectorType(scalar, lanes)
    name = "v{}f{}".format(lanes, scalar.intrinsic_name[1:])
    return declare(module, f"llvm.masked.gather.{name}.v{lanes}p0", vector,
                   (ir.VectorType(POINTER, lanes), I32, ir.VectorType(I1, lanes), vector))


def _micro_kernel(module: ir.Module, shape: GemmShape, scalar: ir.Type, rows: int,
                  vectors: int, exported: str | None = None) -> ir.Function:
    """``micro(A_rows, Wk, C_rows, kc, nsub, a_sub, ncols, bias, mode, bounds, c_col,
    prefetch_a, W_ahead)``: a
    ``rows x (vectors * lanes)`` tile of ``C`` over ``nsub`` runs of ``kc`` steps. Row ``r``
    of the tile reads A from the pointer ``A_rows[r]`` (run ``s`` from ``s * a_sub`` elements
    on) and writes C at ``C_rows[r]``: the rows of a tile need not be evenly spaced (a
    convolution's tile may span two output rows or two images). Fewer vectors for a narrow
    last panel. ``mode``: 1 adds the tile already in ``C`` (a later K block), 2 applies the
    epilogue (the last K block), with the flags in bits 2 and up. Columns of C lie ``c_col``
    elements apart: 1 stores whole vectors; more scatters them (and gathers a later K block's
    partial sums), so that a convolution writes NCHW planes without a transpose. With
    ``prefetch_a`` each row of A is prefetched ``PREFETCH_BYTES`` ahead (a plain GEMM); each
    step prefetches a line of ``W_ahead`` (:data:`WEIGHT_PREFETCH`).
    Internal unless ``exported`` names it."""
    lanes = shape.lanes
    vector, mask_type, fma, load, store = vector_intrinsics(module, scalar, lanes)
    fn = ir.Function(module, TILE_TYPE, name=exported or f"micro{rows}x{vectors}")
    if exported is None:
        fn.linkage = "internal"
    a_rows, w, c_rows, kc, nsub, a_sub, ncols, bias, mode, bounds, c_col, prefetch_a, \
        w_ahead = fn.args
    for pointer in (a_rows, w, c_rows, bias):
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
    c_starts = [row_pointer(c_rows, r) for r in range(rows)]
    tile = [[entry_alloca(builder, vector, f"c{r}_{v}") for v in range(vectors)]
            for r in range(rows)]
    for row in tile:
        for slot in row:
            builder.store(zero, slot)
    step, sub = entry_alloca(builder, I64, "k"), entry_alloca(builder, I64, "sub")

    def runs(ahead: int) -> None:
        with counted_loop(builder, sub, const(0), lambda: nsub, "sub"):
            run = builder.load(sub, typ=I64)
            a_run = [at(start, builder.mul(run, a_sub)) for start in a_starts]
            w_run = at(w, builder.mul(builder.mul(run, kc), const(shape.nr)))
            ahead_run = builder.mul(builder.mul(run, kc), const(64 // shape.dtype.itemsize))
            _steps(builder, shape, scalar, vector, fma, tile, rows, vectors, step, kc, a_run,
                   w_run, ahead, (w_ahead, ahead_run) if WEIGHT_PREFETCH else None)

    if SCATTER_PREFETCH:
        _prefetch_scattered(builder, shape, scalar, c_starts, rows, ncols, c_col)
    # Two copies of the loop, so that neither tests the choice at every step.
    with if_else(builder, prefetch_a, "prefetch") as (then, otherwise):
        with then():
            runs(PREFETCH_BYTES // shape.dtype.itemsize)
        with otherwise():
            runs(0)
    lane_index = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))

    masks = [builder.icmp_signed("<", lane_index, _splat(builder, builder.sub(
        ncols, const(lanes * v)), ir.VectorType(I64, lanes))) for v in range(vectors)]
    contiguous = builder.icmp_signed("==", c_col, const(1))
    pointers = ir.VectorType(POINTER, lanes)
    name = "v{}f{}".format(lanes, scalar.intrinsic_name[1:])
    gather = masked_gather(module, scalar, lanes)
    scatter = declare(module, f"llvm.masked.scatter.{name}.v{lanes}p0", ir.VoidType(),
                      (vector, pointers, I32, mask_type))
    columns = builder.mul(lane_index, _splat(builder, c_col, ir.VectorType(I64, lanes)))

    def out_at(r: int, v: int) -> ir.Value:
        return at(c_starts[r], const(lanes * v))

    def lanes_at(r: int, v: int) -> ir.Value:
        first = at(c_starts[r], builder.mul(const(lanes * v), c_col))
        where = builder.gep(first, [columns], inbounds=True, source_etype=scalar)
        where.type = pointers      # a vector GEP (llvmlite types it as one pointer)
        return where

    def flag(bit: int) -> ir.Value:
        return builder.icmp_unsigned("!=", builder.and_(mode, ir.Constant(I32, bit)),
                                     ir.Constant(I32, 0))

    with if_then(builder, flag(1), "accumulate"):
        with if_else(builder, contiguous, "rows") as (then, otherwise):
            for branch, read in ((then, lambda r, v: builder.call(
                    load, [out_at(r, v), align, masks[v], zero])), (otherwise, lambda r, v:
                    builder.call(gather, [lanes_at(r, v), align, masks[v], zero]))):
                with branch():
                    for r in range(rows):
                        for v in range(vectors):
                            builder.store(builder.fadd(builder.load(tile[r][v], typ=vector),
                                                       read(r, v)), tile[r][v])
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
    with if_then(builder, builder.and_(flag(2), flag(4 * FLAG_CLIP)), "clip"):
        # The clamp's bounds are runtime values (the module is shared by every layer of a
        # dtype), stored by the caller just past the N bias values.
        low, high = (_splat(builder, builder.load(at(bounds, const(i)), typ=scalar), vector)
                     for i in (0, 1))
        for r in range(rows):
            for v in range(vectors):
                value = emit_clamp(builder, builder.load(tile[r][v], typ=vector), low, high)
                builder.store(value, tile[r][v])
    with if_then(builder, flag(2), "smooth"):
        # A sigmoid-family activation (codegen/activation.py), its parameters past the bounds.
        apply_to_tile(builder, [slot for row in tile for slot in row], vector,
                      builder.lshr(mode, ir.Constant(I32, 2)), bounds)
    with if_else(builder, contiguous, "rows") as (then, otherwise):
        with then():
            for r in range(rows):
                for v in range(vectors):
                    builder.call(store, [builder.load(tile[r][v], typ=vector), out_at(r, v),
                                         align, masks[v]])
        with otherwise():
            def scatter_rows(chosen: range) -> None:
                for r in chosen:
                    for v in range(vectors):
                        builder.call(scatter, [builder.load(tile[r][v], typ=vector),
                                               lanes_at(r, v), align, masks[v]])

            if shape.dtype == np.float32 and rows >= 2:
                _scatter_pairs(builder, module, shape, tile, rows, vectors, c_starts, columns,
                               c_col, masks, align, scatter_rows)
            else:
                scatter_rows(range(rows))
    builder.ret_void()
    return fn


def _prefetch_scattered(builder: ir.IRBuilder, shape: GemmShape, scalar: ir.Type,
                        c_starts: list, rows: int, ncols: ir.Value, c_col: ir.Value) -> None:
    """Before a scattering tile's K loop (``c_col`` > 1: NCHW planes), prefetch for writing
    the lines its first and last rows will store to, one per column: by the time the
    epilogue scatters, their reads for ownership are done."""
    scattered = builder.icmp_signed(">", c_col, ir.Constant(I64, 1))
    column = entry_alloca(builder, I64, "pf")
    with if_then(builder, scattered, "prefetch.out"):
        with counted_loop(builder, column, ir.Constant(I64, 0), lambda: ncols, "pf"):
            offset = builder.mul(builder.load(column, typ=I64), c_col)
            for r in sorted({0, rows - 1}):
                prefetch(builder, c_starts[r], offset, scalar, write=True)


def _scatter_pairs(builder: ir.IRBuilder, module: ir.Module, shape: GemmShape, tile: list,
                   rows: int, vectors: int, c_starts: list, columns: ir.Value, c_col: ir.Value,
                   masks: list, align: ir.Value, scatter_rows: Any) -> None:
    """Scatter a float32 tile whose rows lie one element apart (positions of one NCHW image)
    as pairs of rows: each 64-bit lane holds one column's two values, so a vector of 16
    columns goes out as two scatters of 8 elements, not two of 16 (a scatter costs about a
    cycle per element). Rows of other spacing (a tile crossing images), and an odd last row,
    go through ``scatter_rows`` one by one."""
    lanes = shape.lanes
    half = lanes // 2
    pair = ir.VectorType(I64, half)
    pair_mask = ir.VectorType(I1, half)
    pointers = ir.VectorType(POINTER, half)
    scatter64 = declare(module, f"llvm.masked.scatter.v{half}i64.v{half}p0", ir.VoidType(),
                        (pair, pointers, I32, pair_mask))
    vector = ir.VectorType(ir.FloatType(), lanes)
    adjacent = ir.Constant(I1, 1)
    for r in range(0, rows - 1, 2):
        gap = builder.sub(builder.ptrtoint(c_starts[r + 1], I64),
                          builder.ptrtoint(c_starts[r], I64))
        adjacent = builder.and_(adjacent, builder.icmp_signed(
            "==", gap, ir.Constant(I64, shape.dtype.itemsize)))
    with if_else(builder, adjacent, "pairs") as (then, otherwise):
        with then():
            for r in range(0, rows - 1, 2):
                for v in range(vectors):
                    a = builder.load(tile[r][v], typ=vector)
                    b = builder.load(tile[r + 1][v], typ=vector)
                    for part in range(2):
                        picks = [index for lane in range(part * half, (part + 1) * half)
                                 for index in (lane, lane + lanes)]
                        both = builder.shuffle_vector(a, b, ir.Constant(
                            ir.VectorType(I32, lanes), picks))
                        values = builder.bitcast(both, pair)
                        mask = builder.shuffle_vector(masks[v], masks[v], ir.Constant(
                            ir.VectorType(I32, half), list(range(part * half,
                                                                 (part + 1) * half))))
                        offsets = builder.shuffle_vector(columns, columns, ir.Constant(
                            ir.VectorType(I32, half), list(range(part * half,
                                                                 (part + 1) * half))))
                        first = builder.gep(c_starts[r], [builder.mul(
                            ir.Constant(I64, lanes * v), c_col)], inbounds=True,
                            source_etype=ir.FloatType())
                        where = builder.gep(first, [offsets], inbounds=True,
                                            source_etype=ir.FloatType())
                        where.type = pointers      # a vector GEP
                        builder.call(scatter64, [values, where, align, mask])
            scatter_rows(range(rows - rows % 2, rows))
        with otherwise():
            scatter_rows(range(rows))


def _steps(builder: ir.IRBuilder, shape: GemmShape, scalar: ir.Type, vector: ir.Type,
           fma: ir.Function, tile: list, rows: int, vectors: int, step: ir.Value,
           kc: ir.Value, a: list[ir.Value], w: ir.Value, ahead: int,
           w_ahead: tuple[ir.Value, ir.Value] | None = None) -> None:
    """``kc`` steps of the outer-product update of ``tile`` (the micro-kernel's inner loop),
    row ``r`` of A read from ``a[r]`` and, when ``ahead``, prefetched ``ahead`` values on.
    ``w_ahead`` (a pointer and an offset from it) is prefetched a line a step."""
    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    lanes = shape.lanes
    with counted_loop(builder, step, ir.Constant(I64, 0), lambda: kc, "k"):
        k = builder.load(step, typ=I64)
        w_row = at(w, builder.mul(k, ir.Constant(I64, shape.nr)))
        w_vectors = [builder.load(at(w_row, ir.Constant(I64, lanes * v)), typ=vector,
                                  align=shape.dtype.itemsize) for v in range(vectors)]
        if w_ahead is not None:
            line = ir.Constant(I64, 64 // shape.dtype.itemsize)
            prefetch(builder, w_ahead[0], builder.add(w_ahead[1], builder.mul(k, line)), scalar)
        if ahead:
            later = builder.add(k, ir.Constant(I64, ahead))
            for r in range(rows):
                prefetch(builder, a[r], later, scalar)      # may lie past A's end
        for r in range(rows):
            a_value = builder.load(at(a[r], k), typ=scalar)
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


def _driver(module: ir.Module, shape: GemmShape, one_row: dict[int, ir.Function]) -> None:
    table, fallbacks = declare_table(module, TILES, TALL_MR * shape.vectors, TILE_TYPE, {
        tile_index(1, vectors): kernel for vectors, kernel in one_row.items()})
    fn = ir.Function(module, ir.FunctionType(I32, (
        POINTER, I64, POINTER, I64, I64, POINTER, I64, POINTER, I32, I64, I64,
        I64, I64, I64, I64, I64, I64, I64, I64, I64)), name=ENTRY)
    (a, lda, w, k_size, n_size, c, ldc, bias, flags, begin, end, run_size, a_run,
     plane_rows, n_inner, a_inner, c_inner, a_outer, c_outer, c_col) = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scalar = ir.FloatType() if shape.dtype == np.float32 else ir.DoubleType()

    def const(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return builder.gep(pointer, [offset], inbounds=True, source_etype=scalar)

    def smaller(x: ir.Value, y: ir.Value) -> ir.Value:
        return builder.select(builder.icmp_signed("<", x, y), x, y)

    panels = _ceil_div(builder, n_size, shape.nr)
    # K is made of runs of run_size values, a_run elements apart in A (a convolution's kernel
    # rows; a plain GEMM's K in blocks of kc). A K block is either as many whole runs as fit
    # the L1 block, so that the tile stays in registers across them, or, for runs longer than
    # that, a piece of one run: a KC x NR block of the weight stays in L1 while every row
    # block streams past it. Runs may fill a K block half again past kc: a second K block
    # makes one more pass over C, which costs more than a weight block a little over its L1
    # share (a 7x7 convolution of 3 channels, K = 147: 59 against 70 GFMA/s at batch 8). The
    # runs are shared out evenly over the blocks they need, so that none is a short remainder.
    limit = shape.k_block + shape.k_block // 2
    total_runs = _ceil_div(builder, k_size, run_size)
    most = _at_least_one(builder, builder.sdiv(const(limit), run_size))
    per_block = _at_least_one(builder, _ceil_div(builder, total_runs, _at_least_one(
        builder, _ceil_div(builder, total_runs, most))))
    # A run longer than that is cut into near-equal pieces of about kc (counted again from
    # their size, so that none is empty).
    pieces = builder.select(builder.icmp_signed(">", run_size, const(limit)),
                            _ceil_div(builder, run_size, shape.k_block), const(1))
    piece_size = _ceil_div(builder, run_size, pieces)
    pieces = _ceil_div(builder, run_size, piece_size)
    # K = 0 still runs one (empty) K block, so that the epilogue writes act(bias).
    k_blocks = _at_least_one(builder, builder.mul(_ceil_div(builder, total_runs, per_block),
                                                  pieces))
    epilogue = builder.shl(flags, ir.Constant(I32, 2))
    # A plain GEMM (K contiguous in each row of A: runs as long as their stride) prefetches
    # A; a convolution's rows share their lines (see PREFETCH_BYTES).
    prefetch_a = builder.icmp_signed("==", run_size, a_run)
    p, kb, rb = (entry_alloca(builder, I64, name) for name in ("panel", "kblock", "rowblock"))
    a_rows = entry_alloca(builder, ir.ArrayType(POINTER, TALL_MR), "a_rows")
    c_rows = entry_alloca(builder, ir.ArrayType(POINTER, TALL_MR), "c_rows")
    # The rows [begin, end) are numbered across planes of plane_rows rows (a convolution's
    # output rows, lda apart in A and ldc in C), n_inner planes to an outer block (an image):
    # row i is at (i / plane_rows % n_inner) * a_inner + i / plane_rows / n_inner * a_outer +
    # i % plane_rows * lda. A plain GEMM is one plane. Register tiles run across plane
    # boundaries, so a 7-wide output row does not leave a one-row tile behind.
    with counted_loop(builder, p, const(0), lambda: panels, "panel"):
        j0 = builder.mul(builder.load(p, typ=I64), const(shape.nr))
        ncols = builder.sub(n_size, j0)
        # Tile variants: (vectors - 1) * mr + (rows - 1); a narrow last panel has fewer vectors.
        vectors = builder.select(builder.icmp_signed("<", ncols, const(shape.nr)),
                                 _ceil_div(builder, ncols, shape.lanes), const(shape.vectors))
        # A narrower panel takes taller tiles (GemmShape.rows_for), so that enough
        # accumulators hide the latency of the multiply-adds.
        mr = const(shape.mr)
        for width in range(1, shape.vectors):
            mr = builder.select(builder.icmp_signed("==", vectors, const(width)),
                                const(shape.rows_for(width)), mr)
        total = builder.sub(end, begin)
        row_blocks = _ceil_div(builder, total, mr)
        wide = builder.mul(builder.sub(vectors, const(1)), const(TALL_MR))
        panel = at(w, builder.mul(j0, k_size))
        with counted_loop(builder, kb, const(0), lambda: k_blocks, "kblock"):
            block = builder.load(kb, typ=I64)
            group = builder.sdiv(block, pieces)
            piece_start = builder.mul(builder.sub(block, builder.mul(group, pieces)),
                                      piece_size)
            first_run = builder.mul(group, per_block)
            nsub = smaller(builder.sub(total_runs, first_run), per_block)
            k0 = builder.add(builder.mul(first_run, run_size), piece_start)
            a_k0 = builder.add(builder.mul(first_run, a_run), piece_start)
            # Several runs per K block: they are whole, run_size dividing K. One: the last
            # piece of a run, or the last block of a plain GEMM, may be short.
            kc = smaller(smaller(piece_size, builder.sub(run_size, piece_start)),
                         builder.sub(k_size, k0))
            later = builder.icmp_signed(">", k0, const(0))
            last = builder.icmp_signed(">=", builder.add(k0, builder.mul(nsub, kc)), k_size)
            mode = builder.or_(builder.or_(builder.zext(later, I32), builder.shl(
                builder.zext(last, I32), ir.Constant(I32, 1))), epilogue)
            w_block = at(panel, builder.mul(k0, const(shape.nr)))
            a_block = at(a, a_k0)
            c_block = at(c, builder.mul(j0, c_col))
            with counted_loop(builder, rb, const(0), lambda: row_blocks, "rows"):
                # Near-equal tiles (49 rows: four of 6 and five of 5, not eight of 6 and
                # one of 1): a tile of few rows has too few accumulators to hide the
                # latency of its multiply-adds.
                q = builder.load(rb, typ=I64)
                i0 = builder.add(begin, builder.sdiv(builder.mul(q, total), row_blocks))
                rows = builder.sub(builder.add(begin, builder.sdiv(builder.mul(
                    builder.add(q, const(1)), total), row_blocks)), i0)
                _row_pointers(builder, at, const, i0, rows, plane_rows, n_inner, (
                    (a_block, lda, a_inner, a_outer, a_rows),
                    (c_block, ldc, c_inner, c_outer, c_rows)))
                # The next weight block follows this one; the first tiles over this block
                # each prefetch a share of it, a line a step; later tiles touch their own.
                line = 64 // shape.dtype.itemsize
                steps_here = builder.mul(nsub, kc)
                share = builder.mul(builder.mul(q, steps_here), const(line))
                block_size = builder.mul(steps_here, const(shape.nr))
                # (past the weight's end after its last block: a prefetch never faults, and
                # the address is made without inbounds)
                w_ahead = builder.select(builder.icmp_signed("<", share, block_size),
                                         builder.gep(w_block, [builder.add(block_size, share)],
                                                     source_etype=scalar), w_block)
                args = [builder.bitcast(a_rows, POINTER), w_block,
                        builder.bitcast(c_rows, POINTER), kc, nsub, a_run, ncols,
                        at(bias, j0), mode, at(bias, n_size), c_col, prefetch_a, w_ahead]
                variant = builder.add(wide, builder.sub(rows, const(1)))

                def row_by_row(r: ir.Value, args: list = args) -> None:
                    # (the row tables' entry r onwards: a one-row tile reads only the first)
                    call_by_width(builder, vectors, one_row, [
                        builder.gep(args[0], [r], source_etype=POINTER), args[1],
                        builder.gep(args[2], [r], source_etype=POINTER), *args[3:]])

                call_tile(builder, table, fallbacks, variant, args, rows, row_by_row)
    builder.ret(ir.Constant(I32, 0))


def _row_pointers(builder: ir.IRBuilder, at: Any, const: Any, i0: ir.Value, rows: ir.Value,
                  plane_rows: ir.Value, n_inner: ir.Value, tables: tuple) -> None:
    """Fill each table ``(base, row_stride, inner_stride, outer_stride, slots)`` with the
    addresses of rows ``i0 .. i0 + rows - 1`` (at most ``TALL_MR``): two divisions for the
    first row, then a step with carries, so that a tile costs a few instructions a row."""
    zero = const(0)
    plane = builder.sdiv(i0, plane_rows)
    r = builder.sub(i0, builder.mul(plane, plane_rows))
    outer = builder.sdiv(plane, n_inner)
    inner = builder.sub(plane, builder.mul(outer, n_inner))
    for slot in range(TALL_MR):
        # Rows past the tile's own are never read; they are skipped, not computed out of range.
        with if_then(builder, builder.icmp_signed("<", const(slot), rows), f"row{slot}"):
            for base, row_stride, inner_stride, outer_stride, slots in tables:
                offset = builder.add(builder.add(builder.mul(r, row_stride),
                                                 builder.mul(inner, inner_stride)),
                                     builder.mul(outer, outer_stride))
                builder.store(at(base, offset), builder.gep(slots, [zero, const(slot)],
                                                            inbounds=True))
        if slot + 1 < TALL_MR:
            r = builder.add(r, const(1))
            wrap = builder.icmp_signed("==", r, plane_rows)
            r = builder.select(wrap, zero, r)
            inner = builder.add(inner, builder.zext(wrap, I64))
            wrap = builder.icmp_signed("==", inner, n_inner)
            inner = builder.select(wrap, zero, inner)
            outer = builder.add(outer, builder.zext(wrap, I64))


__all__ = ["FLAG_BIAS", "FLAG_CLIP", "FLAG_RELU", "GemmShape", "aligned_empty", "emit_clamp",
           "gemm_module", "masked_gather", "pack_weight", "tile_entry", "tile_index", "tile_module",
           "tile_variants"]
