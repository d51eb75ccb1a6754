"""A 2-D convolution with its weights compiled into the code, vectorised over output positions.

``Y[n, m, oh, ow] = act(bias[m] + sum(c, kh, kw, W[m, c, kh, kw] *
X[n, g(m) * Cg + c, oh * sh + kh * dh - pt, ow * sw + kw * dw - pl]))``, NCHW in and out, with
``X`` taken as zero outside the image (the padding) and ``g(m)`` the group of channel ``m``.

Small convolutions (the few-channel layers of recommender and edge CNNs) are a poor fit for a
GEMM: with 3 to 16 channels a register tile over output channels is mostly empty lanes, and
padding and layout changes cost more passes over the activations than the arithmetic. This
emitter turns the problem around:

- **vector lanes run over output positions** (``n, oh, ow`` flattened), so every lane does
  useful work whatever the channel counts, and each loaded input vector is reused by every
  output channel of the block (one register accumulator per channel);
- **the weights are constants of the generated code**: each multiply-add takes its weight as
  a broadcast from the module's own table of constants (an embedded ``{1to16}`` operand), and
  a tap (input channel, kernel row, kernel column) whose weights are zero for every channel of
  the block is not emitted at all. A pruned convolution thus
  runs only its nonzero multiply-adds (``skip_zeros``; without it a zero weight is multiplied
  like any other, so ``0 * inf`` stays NaN as in a dense convolution);
- **padding is a mask**, not a copy: an input lane outside the image is not read (masked loads
  and gathers touch no memory outside their mask) and counts as zero;
- bias and ReLU are applied in registers, and NCHW output is written directly.

Two addressing modes, chosen at build time from the geometry:

- *rows*: when an image's ``OH * OW`` positions are a whole number of vectors, a vector never
  straddles two images, so outputs are plain (masked) vector stores; inputs are contiguous
  masked loads when the convolution has unit strides and keeps the width (``OW == W``, the
  usual "same" 3x3), and gathers otherwise;
- *general*: gathers and scatters with per-lane offsets, for any geometry.

It is a separate emitter, like ``codegen/gemm.py``, because code specialised to constant weight
values is not a loop nest ``ir.nodes`` describes. The geometry, weights and flags are baked in:
one module per convolution, cached on disk under a key that includes the weight bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from tensoralg.codegen.activation import emit_activation
from tensoralg.codegen.gemm import masked_gather, vector_intrinsics
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, if_else, prefetch

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_conv"
BLOCK_CHANNELS = 24     # accumulators per pass over the taps: 24 of the 32 vector registers
# Multiply-adds a module may unroll: the weights live in the code, so its size and compile time
# grow with them (about 7 bytes and 0.4 ms per multiply-add); beyond this the GEMM path is used
# instead. A dense weight gets a lower limit: with 16-64 channels the GEMM is as fast (measured
# ad hoc, 16 -> 32 channels on 16 x 16 images: 1.78 ms here against 1.56 ms for the GEMM before
# its NCHW transpose, after 2.2 s of compiling), so compiling weights in pays for few channels.
MAX_UNROLLED = 8192
MAX_UNROLLED_DENSE = 2048


@dataclass(frozen=True, slots=True)
class ConvGeometry:
    """The shape of one 2-D convolution, NCHW, everything but the batch.

    >>> ConvGeometry(3, 8, 8, 8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1), 1).positions
    64
    """

    channels: int
    height: int
    width: int
    out_channels: int
    out_height: int
    out_width: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads_begin: tuple[int, int]
    groups: int

    @property
    def positions(self) -> int:
        """Output positions per image and channel (``OH * OW``)."""
        return self.out_height * self.out_width

    def image_elements(self) -> int:
        """Elements of one input image (``C * H * W``)."""
        return self.channels * self.height * self.width


CONTIGUOUS, GATHER, GATHER_SCATTER = "contiguous loads", "gathers", "gathers and scatters"


def addressing(geometry: ConvGeometry, lanes: int) -> str:
    """How a module for ``geometry`` reads and writes (see the module docstring).

    >>> addressing(ConvGeometry(3, 8, 8, 8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1), 1), 16)
    'contiguous loads'
    """
    g = geometry
    if g.positions % lanes:
        return GATHER_SCATTER
    return CONTIGUOUS if g.strides == (1, 1) and g.out_width == g.width else GATHER


def unrolled_fmas(weight: np.ndarray, skip_zeros: bool) -> int:
    """The multiply-adds per output vector a module for ``weight`` (M, C/g, KH, KW) unrolls."""
    return int(np.count_nonzero(weight)) if skip_zeros else int(weight.size)


def blocks_of(out_channels: int) -> list[range]:
    """Output channels split into near-equal blocks of at most ``BLOCK_CHANNELS``.

    >>> [len(b) for b in blocks_of(40)]
    [20, 20]
    """
    count = -(-out_channels // BLOCK_CHANNELS)
    if not count:
        return []
    bounds = [out_channels * k // count for k in range(count + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def conv_module(geometry: ConvGeometry, weight: np.ndarray, bias: np.ndarray | None,
                relu: bool | tuple[float, float], skip_zeros: bool, lanes: int) -> ir.Module:
    """The module exporting ``int32 tensoralg_conv(X, Y, begin, end)``: output positions
    ``[begin, end)`` of the flattened ``(n, oh, ow)`` range, every channel, from input ``X``
    (NCHW) into ``Y`` (NCHW); ``begin`` is a multiple of ``lanes``. Returns 0.

    >>> g = ConvGeometry(1, 2, 2, 1, 1, 1, (2, 2), (1, 1), (1, 1), (0, 0), 1)
    >>> w = np.ones((1, 1, 2, 2), np.float32)
    >>> "tensoralg_conv" in str(conv_module(g, w, None, False, False, 16))
    True
    """
    dtype = weight.dtype
    scalar = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    module = ir.Module(name=f"conv_{dtype.name}")
    fn = ir.Function(module, ir.FunctionType(I32, (POINTER, POINTER, I64, I64)), name=ENTRY)
    x, y, begin, end = fn.args
    x.add_attribute("noalias")
    y.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    emitter = _Emitter(module, builder, geometry, scalar, lanes)
    q = entry_alloca(builder, I64, "block")
    # Signed: an empty or reversed range gives no blocks.
    blocks = builder.sdiv(builder.add(builder.sub(end, begin), ir.Constant(I64, lanes - 1)),
                          ir.Constant(I64, lanes))
    with counted_loop(builder, q, ir.Constant(I64, 0), lambda: blocks, "block"):
        start = builder.add(begin, builder.mul(builder.load(q, typ=I64),
                                               ir.Constant(I64, lanes)))
        emitter.block(x, y, start, end, weight, bias, relu, skip_zeros)
    builder.ret(ir.Constant(I32, 0))
    return module


class _Emitter:
    """The body of one block of ``lanes`` output positions: lane coordinates, then per block
    of output channels the taps, the epilogue and the stores."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder, geometry: ConvGeometry,
                 scalar: ir.Type, lanes: int) -> None:
        self.b, self.g, self.scalar, self.lanes = builder, geometry, scalar, lanes
        self.vector = ir.VectorType(scalar, lanes)
        self.ivector = ir.VectorType(I32, lanes)
        self.mask = ir.VectorType(I1, lanes)
        self.pointers = ir.VectorType(POINTER, lanes)
        name = "v{}f{}".format(lanes, scalar.intrinsic_name[1:])
        vec, mask, pointers = self.vector, self.mask, self.pointers
        self.fma = declare(module, f"llvm.fma.{name}", vec, (vec, vec, vec))
        self.load = declare(module, f"llvm.masked.load.{name}.p0", vec, (POINTER, I32, mask, vec))
        self.store = declare(module, f"llvm.masked.store.{name}.p0", ir.VoidType(),
                             (vec, POINTER, I32, mask))
        self.gather = declare(module, f"llvm.masked.gather.{name}.v{lanes}p0", vec,
                              (pointers, I32, mask, vec))
        self.scatter = declare(module, f"llvm.masked.scatter.{name}.v{lanes}p0", ir.VoidType(),
                               (vec, pointers, I32, mask))
        self.align = ir.Constant(I32, np.dtype(np.float32 if scalar == ir.FloatType()
                                               else np.float64).itemsize)
        self.zero = _Short(vec, 0.0, "zeroinitializer")
        self.module = module
        g = geometry
        mode = addressing(g, lanes)
        self.rows_mode = mode != GATHER_SCATTER
        self.contiguous = mode == CONTIGUOUS
        # Which kernel rows/columns can fall outside the image for some output position.
        self.row_checked = [_may_leave(g.out_height, g.strides[0], kh * g.dilations[0],
                                       g.pads_begin[0], g.height) for kh in range(g.kernel[0])]
        self.col_checked = [_may_leave(g.out_width, g.strides[1], kw * g.dilations[1],
                                       g.pads_begin[1], g.width) for kw in range(g.kernel[1])]

    def ints(self, value: int) -> ir.Constant:
        return ir.Constant(self.ivector, [value] * self.lanes)

    def block(self, x: ir.Value, y: ir.Value, start: ir.Value, end: ir.Value,
              weight: np.ndarray, bias: np.ndarray | None, relu: bool | tuple[float, float], skip_zeros: bool) -> None:
        b, g, lanes = self.b, self.g, self.lanes
        positions = g.positions
        iota = ir.Constant(self.ivector, list(range(lanes)))
        left = b.sub(end, start)
        left = b.trunc(b.select(b.icmp_signed("<", left, ir.Constant(I64, lanes)), left,
                                ir.Constant(I64, lanes)), I32)
        valid = b.icmp_signed("<", iota, self._splat(left, self.ivector))
        image = b.udiv(start, ir.Constant(I64, positions))
        first = b.trunc(b.sub(start, b.mul(image, ir.Constant(I64, positions))), I32)
        local = b.add(self._splat(first, self.ivector), iota)   # position in the first image
        if self.rows_mode:
            rel_image, pos = None, local
        else:
            rel_image = b.udiv(local, self.ints(positions))
            pos = b.sub(local, b.mul(rel_image, self.ints(positions)))
        oh = b.udiv(pos, self.ints(g.out_width))
        ow = b.sub(pos, b.mul(oh, self.ints(g.out_width)))
        row0 = b.sub(b.mul(oh, self.ints(g.strides[0])), self.ints(g.pads_begin[0]))
        col0 = b.sub(b.mul(ow, self.ints(g.strides[1])), self.ints(g.pads_begin[1]))
        row_ok = [b.icmp_unsigned("<", b.add(row0, self.ints(kh * g.dilations[0])),
                                  self.ints(g.height)) if checked else None
                  for kh, checked in enumerate(self.row_checked)]
        col_ok = [b.icmp_unsigned("<", b.add(col0, self.ints(kw * g.dilations[1])),
                                  self.ints(g.width)) if checked else None
                  for kw, checked in enumerate(self.col_checked)]
        x_image = b.gep(x, [b.mul(image, ir.Constant(I64, g.image_elements()))],
                        source_etype=self.scalar)
        y_image = b.gep(y, [b.mul(image, ir.Constant(I64, g.out_channels * positions))],
                        source_etype=self.scalar)
        offset = b.add(b.mul(row0, self.ints(g.width)), col0)
        if rel_image is not None:
            offset = b.add(offset, b.mul(rel_image, self.ints(g.image_elements())))
        x_first = b.gep(x_image, [b.zext(first, I64)], source_etype=self.scalar)
        y_offset = pos if rel_image is None else \
            b.add(pos, b.mul(rel_image, self.ints(g.out_channels * positions)))
        per_group = g.out_channels // g.groups
        plane = g.height * g.width
        # The table holds the bias, then the weights in their own order (see _table).
        values = np.concatenate([np.zeros(g.out_channels, weight.dtype) if bias is None
                                 else np.asarray(bias, weight.dtype), weight.reshape(-1)])
        table = self._table(values)
        for block in blocks_of(g.out_channels):
            acc = [self._broadcast(table, m) for m in block]
            taps: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
            for j, m in enumerate(block):
                group = m // per_group
                for (c, kh, kw), w in np.ndenumerate(weight[m]):
                    if w != 0 or not skip_zeros:
                        channel = group * weight.shape[1] + c
                        index = g.out_channels + int(np.ravel_multi_index((m, c, kh, kw),
                                                                          weight.shape))
                        taps.setdefault((channel, kh, kw), []).append((j, index))
            fence = ir.InlineAsm(ir.FunctionType(ir.VoidType(), ()), "", "~{memory}",
                                 side_effect=True)
            for (channel, kh, kw), uses in sorted(taps.items()):
                # Keeps each tap's loads next to its multiply-adds: left free, the scheduler
                # issues every gather first and spills what they return.
                b.call(fence, [])
                mask = valid
                for ok in (row_ok[kh], col_ok[kw]):
                    if ok is not None:
                        mask = b.and_(mask, ok)
                shift = channel * plane + kh * g.dilations[0] * g.width + kw * g.dilations[1]
                if self.contiguous:
                    # Lanes are consecutive positions of one image, and so are their inputs.
                    base = b.gep(x_first, [ir.Constant(I64, shift + (offset_of_first(g)))],
                                 source_etype=self.scalar)
                    value = b.call(self.load, [base, self.align, mask, self.zero])
                else:
                    # One index vector for every tap, the tap's shift in the scalar base:
                    # 72 shifted index vectors would be hoisted and spilled.
                    where = self._lanes_at(b.gep(x_image, [ir.Constant(I64, shift)],
                                                 source_etype=self.scalar), offset)
                    value = b.call(self.gather, [where, self.align, mask, self.zero])
                for j, index in uses:
                    acc[j] = b.call(self.fma, [self._broadcast(table, index), value, acc[j]])
            for j, m in enumerate(block):
                # The fused activation in registers (a clamp keeps NaN, as the GEMM's does).
                result = emit_activation(b, acc[j], relu)
                if rel_image is None:
                    where = b.gep(y_image, [b.add(b.zext(first, I64),
                                                  ir.Constant(I64, m * positions))],
                                  source_etype=self.scalar)
                    b.call(self.store, [result, where, self.align, valid])
                else:
                    where = self._lanes_at(b.gep(y_image, [ir.Constant(I64, m * positions)],
                                                 source_etype=self.scalar), y_offset)
                    b.call(self.scatter, [result, where, self.align, valid])

    def _table(self, values: np.ndarray) -> ir.Value:
        """The address of a constant table of ``values``, redefined once per block by an empty
        asm statement. Were the weights splat constants (or loads from a fixed address), LLVM
        would hoist every one of them out of the block loop as a full vector and spill most
        to the stack, turning each multiply-add's broadcast operand into a 64-byte reload;
        an address that is new each block keeps them as broadcast loads inside the loop."""
        array = ir.ArrayType(self.scalar, len(values))
        table = ir.GlobalVariable(self.module, array, "weights")
        table.initializer = ir.Constant(array, [float(v) for v in values])
        table.global_constant = True
        table.linkage = "internal"
        barrier = ir.InlineAsm(ir.FunctionType(POINTER, (POINTER,)), "", "=r,0",
                               side_effect=False)
        return self.b.call(barrier, [table])

    def _broadcast(self, table: ir.Value, index: int) -> ir.Value:
        """Entry ``index`` of the table in every lane."""
        scalar = self.b.load(self.b.gep(table, [ir.Constant(I64, index)], inbounds=True,
                                        source_etype=self.scalar), typ=self.scalar)
        return self._splat(scalar, self.vector)

    def _lanes_at(self, base: ir.Value, offsets: ir.Value) -> ir.Value:
        """``base + offsets``: a vector of element pointers (a vector GEP, which llvmlite
        types as a scalar pointer unless told)."""
        where = self.b.gep(base, [offsets], source_etype=self.scalar)
        where.type = self.pointers
        return where

    def _splat(self, value: ir.Value, vector: ir.VectorType) -> ir.Value:
        b = self.b
        undefined = _Short(vector, ir.Undefined, "undef")
        lane0 = b.insert_element(undefined, value, ir.Constant(I32, 0))
        return b.shuffle_vector(lane0, undefined,
                                _Short(ir.VectorType(I32, vector.count), 0, "zeroinitializer"))


class _Short(ir.Constant):
    """A uniform vector constant printed in LLVM's short form (``zeroinitializer``,
    ``undef``): llvmlite checks its lanes, then would spell each one out, and with a splat per
    multiply-add that was most of a module's text and of its compile time."""

    def __init__(self, typ: ir.VectorType, lane: object, text: str) -> None:
        super().__init__(typ, [lane] * typ.count)
        self.text = text

    def get_reference(self) -> str:
        return self.text


CHANNELS_LAST_ENTRY = "tensoralg_channels_last"
# Whether the channels-last copy prefetches, for writing, the lines the next input row's block
# will store to. Each store fills a line of its own (C values apart), read for ownership from
# memory when the store comes: 8 x 64 x 56 x 56 float32 2.2 -> 3.3 GB/s, 8 x 16 x 54 x 54
# 3.2 -> 5.3, 8 x 256 x 14 x 14 2.4 -> 3.6 (one thread, same process, the VM's memory slow
# that hour: memcpy 3.9 GB/s; ``python benchmarks/conv_epilogue_ab.py kernels``). Prefetching the next rows' input
# lines too gained nothing more, and non-temporal stores (lines written whole) ran 2-6x slower.
# As a transpose (``api.transpose_call``, images of one row: a convolution's channels-last
# product into NCHW) it prefetches the same planes' next lines instead, the next block of
# channels: 8 x 784 x 128 0.5 -> 2.5 GB/s, 8 x 3136 x 64 0.9 -> 2.2, 8 x 784 x 512 1.0 -> 1.9,
# 8 x 49 x 512 5.7 -> 4.7 (prefetching the next image's lines instead: 0.8-1.2x).
COPY_STORE_PREFETCH = True


def channels_last_module(dtype: np.dtype, lanes: int) -> ir.Module:
    """The module exporting ``int32 tensoralg_channels_last(X, OUT, begin, end, C, H, W,
    out_image, out_row, out_first, x_image)``: input rows ``[begin, end)`` of the flattened
    ``(n, h)`` range of ``X`` (N, C, H, W, its images ``x_image`` elements apart: a channel
    block of a larger batch, as a grouped convolution reads it) into the channels-last ``OUT``,
    element ``(n, c, h, w)`` going to ``n * out_image + h * out_row + w * C + c + out_first``
    (a zero-bordered NHWC buffer: ``out_first`` skips the top and left border). The border is
    not written. Returns 0.

    The GEMM convolution (``runtime/gemm.py``) reads its input channels-last. Copied one
    element at a time, with a store every ``C`` elements, the copy took a fifth of a
    3x3 convolution's time at 56 x 56 x 64. With ``lanes`` channels or more, blocks of
    ``lanes`` channels by ``lanes`` columns are loaded along the planes' rows, transposed in
    registers and stored ``lanes`` channels at a time: a masked gather down the planes per
    output vector (before) ran 12x slower than a ``memcpy`` of the input at 8 x 64 x 56 x 56
    on an AMD EPYC (Zen 4), twice NumPy's transposing copy. Fewer channels than lanes (an
    RGB image) gather whole columns.

    >>> "tensoralg_channels_last" in str(channels_last_module(np.dtype(np.float32), 16))
    True
    """
    dtype = np.dtype(dtype)
    scalar = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    module = ir.Module(name=f"channels_last_{dtype.name}")
    vector, mask_type, _, load, store = vector_intrinsics(module, scalar, lanes)
    index_vector, pointers = ir.VectorType(I64, lanes), ir.VectorType(POINTER, lanes)
    gather = masked_gather(module, scalar, lanes)
    fn = ir.Function(module, ir.FunctionType(I32, (POINTER, POINTER, *[I64] * 9)),
                     name=CHANNELS_LAST_ENTRY)
    x, out, begin, end, channels, height, width, out_image, out_row, out_first, x_image = \
        fn.args
    x.add_attribute("noalias")
    out.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    align = ir.Constant(I32, dtype.itemsize)
    zero = _Short(vector, 0.0, "zeroinitializer")

    def at(pointer: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(pointer, [offset], source_etype=scalar)

    def splat(value: ir.Value, typ: ir.VectorType) -> ir.Value:
        undefined = _Short(typ, ir.Undefined, "undef")
        lane0 = b.insert_element(undefined, value, ir.Constant(I32, 0))
        return b.shuffle_vector(lane0, undefined,
                                _Short(ir.VectorType(I32, lanes), 0, "zeroinitializer"))

    plane = b.mul(height, width)
    iota = ir.Constant(index_vector, list(range(lanes)))
    row, block, col = (entry_alloca(b, I64, name) for name in ("row", "block", "col"))
    wide = b.icmp_signed(">=", channels, ir.Constant(I64, lanes))

    def rows(body: Any) -> None:
        with counted_loop(b, row, begin, lambda: end, "row"):
            q = b.load(row, typ=I64)
            image = b.sdiv(q, height)
            h = b.sub(q, b.mul(image, height))
            body(at(x, b.add(b.mul(image, x_image), b.mul(h, width))),
                 at(out, b.add(b.add(b.mul(image, out_image), b.mul(h, out_row)), out_first)))

    half = lanes // 2
    interleave_low = ir.Constant(ir.VectorType(I32, lanes),
                                 [x for k in range(half) for x in (k, lanes + k)])
    interleave_high = ir.Constant(ir.VectorType(I32, lanes),
                                  [x for k in range(half, lanes) for x in (k, lanes + k)])

    def transposed(rows: list[ir.Value]) -> list[ir.Value]:
        # log2(lanes) perfect shuffles of the rows (row i with row i + lanes/2, low halves
        # interleaved, then high halves) transpose the lanes x lanes block in registers.
        for _ in range(lanes.bit_length() - 1):
            rows = [b.shuffle_vector(rows[i], rows[i + half], mask)
                    for i in range(half) for mask in (interleave_low, interleave_high)]
        return rows

    def wide_row(source: ir.Value, target: ir.Value) -> None:
        # A lanes x lanes block at a time: `lanes` contiguous loads along w, one per channel
        # plane, transposed in registers, then `lanes` contiguous stores of `lanes` channels.
        # Masks cover the last channels and the last columns, and only those blocks.
        blocks = b.sdiv(b.add(channels, ir.Constant(I64, lanes - 1)), ir.Constant(I64, lanes))
        steps = b.sdiv(b.add(width, ir.Constant(I64, lanes - 1)), ir.Constant(I64, lanes))
        # Where the stores go next time round: the next row's block; in a transpose (images
        # of one row) the next block of channels, the same planes' next lines.
        ahead = b.select(b.icmp_signed("==", height, ir.Constant(I64, 1)),
                         ir.Constant(I64, lanes), out_row)
        with counted_loop(b, block, ir.Constant(I64, 0), lambda: blocks, "block"):
            c0 = b.mul(b.load(block, typ=I64), ir.Constant(I64, lanes))
            left = b.sub(channels, c0)
            stored = b.icmp_signed("<", iota, splat(left, index_vector))
            first = at(source, b.mul(c0, plane))
            with counted_loop(b, col, ir.Constant(I64, 0), lambda: steps, "col"):
                w0 = b.mul(b.load(col, typ=I64), ir.Constant(I64, lanes))
                columns = b.sub(width, w0)
                loaded = b.icmp_signed("<", iota, splat(columns, index_vector))
                at_column = at(target, b.add(b.mul(w0, channels), c0))
                if COPY_STORE_PREFETCH:
                    below = at(at_column, ahead)
                    for w in range(lanes):
                        # The next row's lines of this block (may pass the buffer's end).
                        prefetch(b, below, b.mul(ir.Constant(I64, w), channels), scalar,
                                 write=True)

                def block_copy(masked: bool) -> None:
                    rows = []
                    for c in range(lanes):
                        where = at(first, b.add(b.mul(ir.Constant(I64, c), plane), w0))
                        if masked:
                            mask = b.and_(loaded, splat(b.icmp_signed(
                                "<", ir.Constant(I64, c), left), mask_type))
                            rows.append(b.call(load, [where, align, mask, zero]))
                        else:
                            rows.append(b.load(where, typ=vector, align=dtype.itemsize))
                    for w, value in enumerate(transposed(rows)):
                        where = at(at_column, b.mul(ir.Constant(I64, w), channels))
                        if masked:
                            mask = b.and_(stored, splat(b.icmp_signed(
                                "<", ir.Constant(I64, w), columns), mask_type))
                            b.call(store, [value, where, align, mask])
                        else:
                            b.store(value, where, align=dtype.itemsize)

                # Whole blocks (all but the last channels and columns) without masks: the
                # masks of every row and column, rebuilt each block, spilled registers.
                whole = b.and_(b.icmp_signed(">=", left, ir.Constant(I64, lanes)),
                               b.icmp_signed(">=", columns, ir.Constant(I64, lanes)))
                with if_else(b, whole, "whole") as (then, otherwise):
                    with then():
                        block_copy(False)
                    with otherwise():
                        block_copy(True)

    def narrow_row(source: ir.Value, target: ir.Value) -> None:
        # Fewer channels than lanes (an RGB image): a vector is `lanes // C` whole columns,
        # lane l reading channel l % C of column l / C, so stores stay full-width.
        per = b.sdiv(ir.Constant(I64, lanes), channels)
        column = b.sdiv(iota, splat(channels, index_vector))
        channel = b.sub(iota, b.mul(column, splat(channels, index_vector)))
        offsets = b.add(b.mul(channel, splat(plane, index_vector)), column)
        used = b.icmp_signed("<", iota, splat(b.mul(per, channels), index_vector))
        steps = b.sdiv(b.add(width, b.sub(per, ir.Constant(I64, 1))), per)
        with counted_loop(b, col, ir.Constant(I64, 0), lambda: steps, "col"):
            w0 = b.mul(b.load(col, typ=I64), per)
            mask = b.and_(used, b.icmp_signed("<", column,
                                              splat(b.sub(width, w0), index_vector)))
            value = b.call(gather, [lanes_at(at(source, w0), offsets), align, mask, zero])
            b.call(store, [value, at(target, b.mul(w0, channels)), align, mask])

    def lanes_at(base: ir.Value, offsets: ir.Value) -> ir.Value:
        where = b.gep(base, [offsets], source_etype=scalar)
        where.type = pointers      # a vector GEP (llvmlite types it as one pointer)
        return where

    with if_else(b, wide, "wide") as (then, otherwise):
        with then():
            rows(wide_row)
        with otherwise():
            rows(narrow_row)
    b.ret(ir.Constant(I32, 0))
    return module


def offset_of_first(g: ConvGeometry) -> int:
    """In the contiguous mode, the input offset of output position 0 relative to the output
    position: ``-pt * W - pl`` (the kernel's first cell, before the tap's own shift)."""
    return -g.pads_begin[0] * g.width - g.pads_begin[1]


def _may_leave(out: int, stride: int, shift: int, pad: int, size: int) -> bool:
    """Whether input index ``o * stride + shift - pad`` leaves ``[0, size)`` for some
    ``o < out``."""
    return shift - pad < 0 or (out - 1) * stride + shift - pad >= size


__all__ = ["ConvGeometry", "conv_module", "channels_last_module", "addressing", "blocks_of",
           "unrolled_fmas", "MAX_UNROLLED", "MAX_UNROLLED_DENSE", "ENTRY", "CHANNELS_LAST_ENTRY"]
