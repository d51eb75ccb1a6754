"""Channel-wise window kernels: MaxPool, AveragePool and depthwise convolution, NCHW.

``Y[p, oh, ow] = reduce over (kh, kw) of X[p, oh * sh + kh * dh - pt, ow * sw + kw * dw - pl]``
for every plane ``p`` (image and channel flattened), where the reduction is

- ``max``: the largest cell, padding excluded (NaN wins, as in NumPy's ``max``);
- ``average``: the sum over the cells inside the image divided by the number of cells inside
  the image (``count_include_pad=0``) or inside the padded image (``=1``);
- ``depthwise``: ``B[c] + sum(W[c, kh, kw] * X[...])`` with ``c = p mod C``, padding zero, then
  ReLU when asked: a convolution with ``group == C`` and one output channel per group, whose
  im2col would copy every input cell ``KH * KW`` times to feed one small product per channel.
  The same mode runs grouped convolutions with few channels per group (:class:`ChannelGroups`:
  ``Cg`` input and ``Mg`` output channels a group): output plane ``m`` sums the windows of its
  group's ``Cg`` input planes, ``B[m] + sum over ci, kh, kw of W[m, ci, kh, kw] * X[...]``,
  and a block of up to ``MAX_BLOCK`` output planes of one group shares every tap's load.

Each of these touches every input cell a few times and does one operation per touch, so what
costs is memory traffic and per-window overhead: the patch matrix of the NumPy path (a copy of
``KH * KW`` times the image) and its per-group products. Here vector lanes run over consecutive
output columns of one output row, the taps are unrolled, and a tap's lanes are read with one
masked load (unit stride: consecutive columns read consecutive cells), two masked loads whose
even cells a shuffle picks (stride 2: a 16-lane gather is 16 loads) or one masked gather
(other strides). Padding is the load's mask, never a copy; rows outside the image mask every
lane. The depthwise weights and bias are read from memory (one module serves every layer of a
geometry), each tap's weight broadcast once per vector.

It is a separate emitter, like ``codegen/conv.py``, because a max over a window, and window
addressing with strides and dilations, are not statements of the index notation yet; when the
notation has affine accesses and a max reduction, this becomes a schedule and goes.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from llvmlite import ir

from tensoralg.codegen.activation import emit_activation
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, if_else, if_then
from tensoralg.errors import ShapeError

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_window"
MODES = ("max", "average", "depthwise")
# Output planes computed together by a grouped kernel: each tap's input vector is loaded once
# for all of them; 8 accumulators, the loaded vector and the borders' masks fit the 32 vector
# registers of AVX-512. Without AVX-512 a 16-lane float32 vector is two registers of 16, so
# the block is halved (:func:`block_limit`).
MAX_BLOCK = 8


@dataclass(frozen=True, slots=True)
class ChannelGroups:
    """How a convolution's channels group: ``inputs`` and ``outputs`` channels a group, and
    ``block``, the output planes of one group a kernel iteration computes together (a divisor
    of ``outputs``). A depthwise convolution is ``ChannelGroups(1, 1, 1)``.

    >>> ChannelGroups.of(input_channels=128, weight_shape=(128, 4, 3, 3))
    ChannelGroups(inputs=4, outputs=4, block=4)
    """

    inputs: int = 1
    outputs: int = 1
    block: int = 1

    def __post_init__(self) -> None:
        if min(self.inputs, self.outputs, self.block) < 1 or self.outputs % self.block:
            raise ShapeError(f"{self}: channels per group must be at least 1 and the block "
                             f"must divide the output channels of a group")

    @classmethod
    def of(cls, input_channels: int, weight_shape: tuple[int, ...],
           limit: int = MAX_BLOCK) -> "ChannelGroups":
        """The grouping of a convolution of ``input_channels`` channels by a weight of shape
        ``(M, Cg, KH, KW)``, with the largest block up to ``limit``."""
        out_channels, inputs = weight_shape[0], weight_shape[1]
        if inputs < 1 or input_channels % inputs or out_channels % (input_channels // inputs):
            raise ShapeError(f"a depthwise or grouped weight of shape {tuple(weight_shape)} "
                             f"does not group {input_channels} input channels (Cg must divide "
                             f"them, and M be a multiple of the groups)")
        outputs = out_channels // (input_channels // inputs)
        block = max(b for b in range(1, min(outputs, limit) + 1) if outputs % b == 0)
        return cls(inputs, outputs, block)


@dataclass(frozen=True, slots=True)
class WindowGeometry:
    """The shape of one channel-wise window operation on NCHW planes, everything but the
    plane count.

    >>> WindowGeometry(8, 8, 4, 4, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0)).positions
    16
    """

    height: int
    width: int
    out_height: int
    out_width: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads_begin: tuple[int, int]
    pads_end: tuple[int, int]

    def __post_init__(self) -> None:
        sizes = (self.height, self.width, self.out_height, self.out_width, *self.kernel,
                 *self.strides, *self.dilations)
        if min(sizes) < 1 or min(*self.pads_begin, *self.pads_end) < 0:
            raise ShapeError(f"{self}: sizes, kernel, strides and dilations must be at least "
                             f"1 and pads at least 0")

    @property
    def positions(self) -> int:
        """Output cells per plane (``OH * OW``)."""
        return self.out_height * self.out_width

    @property
    def taps(self) -> int:
        """Cells per window (``KH * KW``)."""
        return self.kernel[0] * self.kernel[1]


def block_limit() -> int:
    """The most output planes a grouped kernel computes together on this host."""
    from tensoralg.codegen.llvm import host_has

    return MAX_BLOCK if host_has("avx512f") else MAX_BLOCK // 2


def window_module(geometry: WindowGeometry, mode: str, dtype: str, lanes: int,
                  channels: int = 1, count_include_pad: bool = False,
                  relu: bool | tuple[float, float] = False,
                  groups: ChannelGroups = ChannelGroups()) -> ir.Module:
    """The module exporting ``int32 tensoralg_window(X, Y, W, B, begin, end)``: planes
    ``[begin, end)`` of ``X`` (planes of ``H x W``) into ``Y`` (planes of ``OH x OW``).
    ``W`` (``M x Cg x KH x KW``) and ``B`` (``M``) are read only by ``depthwise``, where
    ``channels`` is ``M``, the output channels, and ``begin``/``end`` count blocks of
    ``groups.block`` output planes: block ``q`` writes output channels ``m0 .. m0 + block``
    (``m0 = q * block mod M``) of image ``q * block div M`` from its group's ``Cg`` input
    planes. ``dtype`` is ``"float32"`` or ``"float64"``. Returns 0.

    >>> g = WindowGeometry(4, 4, 2, 2, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0))
    >>> "fcmp uno" in str(window_module(g, "max", "float32", 16))
    True
    """
    if mode not in MODES:
        raise ValueError(f"window mode {mode!r} is not one of {MODES}")
    if mode != "depthwise" and groups != ChannelGroups() or channels % groups.outputs:
        raise ValueError(f"{mode} window over {channels} channels cannot take {groups}")
    scalar = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    module = ir.Module(name=f"window_{mode}_{dtype}")
    fn = ir.Function(module, ir.FunctionType(I32, (POINTER,) * 4 + (I64, I64)), name=ENTRY)
    x, y, w, bias, begin, end = fn.args
    for pointer in (x, y):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    body = _Body(module, builder, geometry, scalar, lanes, mode, count_include_pad, relu, groups)
    g = geometry
    const = lambda value: ir.Constant(I64, value)     # noqa: E731
    if deinterleaves(geometry, mode, groups, lanes):
        _deinterleaved_rows(body, x, y, w, bias, begin, end, channels)
        builder.ret(ir.Constant(I32, 0))
        return module
    if pads_rows(geometry, mode, groups, lanes):
        _padded_rows(body, x, y, w, bias, begin, end, channels)
        builder.ret(ir.Constant(I32, 0))
        return module
    if separates_rows(geometry, mode, groups, lanes):
        _separable(body, x, y, begin, end)
        builder.ret(ir.Constant(I32, 0))
        return module
    plane = entry_alloca(builder, I64, "plane")
    row = entry_alloca(builder, I64, "row")
    block = entry_alloca(builder, I64, "block")
    blocks = ir.Constant(I64, -(-g.out_width // lanes))
    with counted_loop(builder, plane, begin, lambda: end, "plane"):
        q = builder.load(plane, typ=I64)
        # Block q: output planes p .. p + block of image n, channel m0, group m0 div Mg.
        p = builder.mul(q, const(groups.block))
        channel = builder.urem(p, const(channels))
        image = builder.udiv(p, const(channels))
        first_input = builder.add(
            builder.mul(image, const(channels // groups.outputs * groups.inputs)),
            builder.mul(builder.udiv(channel, const(groups.outputs)), const(groups.inputs)))
        x_plane = builder.gep(x, [builder.mul(first_input, const(g.height * g.width))],
                              source_etype=scalar)
        y_plane = builder.gep(y, [builder.mul(p, const(g.positions))], source_etype=scalar)
        with counted_loop(builder, row, ir.Constant(I64, 0),
                          lambda: ir.Constant(I64, g.out_height), "row"):
            oh = builder.load(row, typ=I64)
            with counted_loop(builder, block, ir.Constant(I64, 0), lambda: blocks, "block"):
                first = builder.mul(builder.load(block, typ=I64), ir.Constant(I64, lanes))
                body.emit(x_plane, y_plane, w, bias, channel, oh, first)
    builder.ret(ir.Constant(I32, 0))
    return module


# Longest row of even (or odd) cells a deinterleaved depthwise kernel keeps per input row, in
# vectors: its rows are unrolled copies, and KH rows of them live on the stack.
MAX_DEINTERLEAVED_VECTORS = 16
# The most bytes a kernel's ring of rows may take on the stack (a worker thread's stack is
# small; a window of many rows keeps the masked loads), counting 8-byte cells.
MAX_RING_BYTES = 1 << 16


def _half_row(geometry: WindowGeometry, lanes: int) -> int:
    """Cells of one half (even or odd columns) of a deinterleaved input row: the last output
    vector's taps reach ``KW // 2`` cells past it."""
    vectors = -(-geometry.out_width // lanes)
    return -(-(vectors * lanes + geometry.kernel[1] // 2 + 1) // lanes) * lanes


def deinterleaves(geometry: WindowGeometry, mode: str, groups: ChannelGroups,
                  lanes: int) -> bool:
    """Whether a depthwise or max window kernel reads its input rows deinterleaved (see
    :func:`_deinterleaved_rows`): one filter a channel, columns two apart, no dilation,
    output rows of more than two vectors, or more than one for a depthwise window at least 5
    wide (a short row reads back the cells it has just stored before the stores retire, and a
    narrow window saves few shuffles: 28-wide outputs of 3x3 depthwise layers ran 0.65-0.93x
    and of max pools 0.90x of the paired loads' speed, 14-wide 5x5 outputs 0.4-0.65x; ResNet's
    112 -> 56 max pool runs 1.35-1.6x faster, 3x3 depthwise layers of 56-wide outputs
    1.25-1.5x, a 56 -> 28 5x5 depthwise layer 1.8-2.5x; ``python benchmarks/conv_epilogue_ab.py
    windows``) and of at most :data:`MAX_DEINTERLEAVED_VECTORS` vectors a half.

    >>> g = WindowGeometry(112, 112, 56, 56, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1))
    >>> deinterleaves(g, "depthwise", ChannelGroups(), 16), deinterleaves(g, "max", ChannelGroups(), 16)
    (True, True)
    """
    wide_window = mode == "depthwise" and geometry.kernel[1] >= 5
    return (mode in ("depthwise", "max") and groups == ChannelGroups() and geometry.strides[1] == 2
            and geometry.dilations == (1, 1)
            and geometry.out_width > lanes * (1 if wide_window else 2)
            and _half_row(geometry, lanes) <= MAX_DEINTERLEAVED_VECTORS * lanes
            and geometry.kernel[0] * 2 * _half_row(geometry, lanes) * 8 <= MAX_RING_BYTES)


def _deinterleaved_rows(body: "_Body", x: ir.Value, y: ir.Value, w: ir.Value,
                        bias: ir.Value, begin: ir.Value, end: ir.Value, channels: int) -> None:
    """A depthwise convolution or a max pool with column stride 2 over planes ``[begin, end)``,
    each input row split once into its even and its odd cells (past the image's borders 0 for
    a convolution, -inf for a max) in a ring of ``KH`` rows on the stack; every tap is then a
    plain load from one half (tap ``kw`` of output column ``j`` is cell ``2 j + kw`` of the
    padded row: even half, cell ``j + kw / 2``, for even ``kw``, else odd half). An output row splits only the rows it does not share with
    the one before (``sh`` of ``KH``), so a row costs two shuffles per vector once, where
    reading each tap's pair of loads and picking its even cells cost ``KH x KW`` shuffles per
    output vector (a 5x5 layer ran at a third of onnxruntime's channel-blocked speed)."""
    b, g, lanes, scalar, vector = body.b, body.g, body.lanes, body.scalar, body.vector
    kh, kw = g.kernel
    sh, (pt, pl) = g.strides[0], g.pads_begin
    half = _half_row(g, lanes)
    blocks = -(-g.out_width // lanes)
    const = lambda value: ir.Constant(I64, value)     # noqa: E731
    ring = entry_alloca(b, ir.ArrayType(scalar, kh * 2 * half), "rows")
    ring_base = b.gep(ring, [const(0), const(0)], inbounds=True)
    depthwise = body.mode == "depthwise"
    zero = body.constant(0.0 if depthwise else -float("inf"))    # the padding's value
    plane, row, block = (entry_alloca(b, I64, name) for name in ("plane", "row", "block"))
    evens = ir.Constant(ir.VectorType(I32, lanes), [2 * i for i in range(lanes)])
    odds = ir.Constant(ir.VectorType(I32, lanes), [2 * i + 1 for i in range(lanes)])

    def at(base: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(base, [offset], source_etype=scalar)

    everywhere = ir.Constant(body.mask, [True] * lanes)

    def put(value: ir.Value, where: ir.Value) -> None:
        # An all-lanes masked store is a plain store (the ring is an array of scalars).
        b.call(body.store, [value, where, body.align, everywhere])

    def split(x_plane: ir.Value, r: ir.Value, slot: ir.Value) -> None:
        """Input row ``r`` (zeros outside the image) into ring slot ``slot``."""
        evens_at = at(ring_base, b.mul(slot, const(2 * half)))
        odds_at = at(evens_at, const(half))
        with if_else(b, b.icmp_unsigned("<", r, const(g.height)), "row_in") as (then, otherwise):
            with then():
                row_at = at(x_plane, b.mul(r, const(g.width)))
                for part in range(half // lanes):
                    pair = []
                    for piece in range(2):
                        first = 2 * part * lanes + piece * lanes - pl   # column of lane 0
                        columns = range(first, first + lanes)
                        # Constant masks: only the cells inside the row are read.
                        mask = ir.Constant(body.mask, [0 <= c < g.width for c in columns])
                        pair.append(b.call(body.load, [at(row_at, const(first)), body.align,
                                                       mask, zero]))
                    for halfrow, picks in ((evens_at, evens), (odds_at, odds)):
                        put(b.shuffle_vector(pair[0], pair[1], picks),
                            at(halfrow, const(part * lanes)))
            with otherwise():
                for halfrow in (evens_at, odds_at):
                    for part in range(half // lanes):
                        put(zero, at(halfrow, const(part * lanes)))

    with counted_loop(b, plane, begin, lambda: end, "plane"):
        q = b.load(plane, typ=I64)
        channel = b.urem(q, const(channels))
        x_plane = at(x, b.mul(q, const(g.height * g.width)))
        y_plane = at(y, b.mul(q, const(g.positions)))
        if depthwise:
            w_row = at(w, b.mul(channel, const(g.taps)))
            weights = [body.splat(b.load(at(w_row, const(t)), typ=scalar), vector)
                       for t in range(g.taps)]
            start = body.splat(b.load(at(bias, channel), typ=scalar), vector)
        else:
            start = zero
        with counted_loop(b, row, const(0), lambda: const(g.out_height), "row"):
            oh = b.load(row, typ=I64)
            first_row = b.icmp_signed("==", oh, const(0))
            slots = [b.urem(b.add(b.mul(oh, const(sh)), const(ky)), const(kh))
                     for ky in range(kh)]
            for ky in range(kh):
                r = b.add(b.sub(b.mul(oh, const(sh)), const(pt)), const(ky))
                if ky >= kh - sh:       # a row the previous output row did not read
                    split(x_plane, r, slots[ky])
                else:
                    with if_then(b, first_row, f"first{ky}"):
                        split(x_plane, r, slots[ky])
            halves = [at(ring_base, b.mul(slot, const(2 * half))) for slot in slots]
            with counted_loop(b, block, const(0), lambda: const(blocks), "block"):
                first = b.mul(b.load(block, typ=I64), const(lanes))
                taps = [[b.load(at(halves[ky], b.add(first, const((kx % 2) * half + kx // 2))),
                                typ=vector, align=body.align.constant) for kx in range(kw)]
                        for ky in range(kh)]
                body.store_row(body.reduce_rows(taps, weights if depthwise else None, start),
                               y_plane, oh, first)


def _padded_width(geometry: WindowGeometry, lanes: int) -> int:
    """Cells of one padded row of a unit-stride window kernel: the last output vector's taps
    reach ``KW - 1`` cells past it."""
    vectors = -(-geometry.out_width // lanes)
    return -(-(vectors * lanes + geometry.kernel[1] - 1) // lanes) * lanes


def pads_rows(geometry: WindowGeometry, mode: str, groups: ChannelGroups, lanes: int) -> bool:
    """Whether a depthwise window kernel with unit column stride reads its input through
    padded rows (see :func:`_padded_rows`): one filter a channel, no dilation, and where the
    copy pays for itself: windows at least 5 wide over output rows of more than one vector
    (one thread, batch 8, float32, against the masked loads: 5x5 on 28-wide planes 1.2-1.6x
    faster; 5x5 on 14 and 7 wide 0.89-1.01x; 3x3 0.64-0.89x, where a row's copy costs more
    than its nine taps; 3x3 max pools on 7-56 wide planes 0.81-1.05x; ``python
    benchmarks/conv_epilogue_ab.py windows``). Rows of at most
    :data:`MAX_DEINTERLEAVED_VECTORS` vectors, row strides up to the kernel's height (the
    ring holds ``KH + sh`` rows), a ring within :data:`MAX_RING_BYTES`.

    >>> g = WindowGeometry(28, 28, 28, 28, (5, 5), (1, 1), (1, 1), (2, 2), (2, 2))
    >>> pads_rows(g, "depthwise", ChannelGroups(), 16), pads_rows(g, "max", ChannelGroups(), 16)
    (True, False)
    """
    vectors = -(-geometry.out_width // lanes)
    return (mode == "depthwise" and groups == ChannelGroups()
            and vectors > 1 and geometry.kernel[1] >= 5
            and geometry.strides[1] == 1 and geometry.dilations == (1, 1)
            and geometry.strides[0] <= geometry.kernel[0]
            and _padded_width(geometry, lanes) <= MAX_DEINTERLEAVED_VECTORS * lanes
            and (geometry.kernel[0] + geometry.strides[0]) * _padded_width(geometry, lanes)
            * 8 <= MAX_RING_BYTES)


def _padded_rows(body: "_Body", x: ir.Value, y: ir.Value, w: ir.Value, bias: ir.Value,
                 begin: ir.Value, end: ir.Value, channels: int) -> None:
    """A depthwise convolution with column stride 1 over planes ``[begin, end)``, each input
    row copied once into a padded row (cell ``c`` holds column ``c - pl``, zero past the
    image's borders) in a ring of ``KH + sh`` rows on the stack; every tap is then a plain load, where the masked path builds a mask
    per tap and vector (on a 28-wide plane with padding no vector is interior, and a 5x5
    depthwise layer ran at a third of onnxruntime's speed). The rows an output row adds are
    copied while the row before it is computed: a tap's load that straddles two vectors stored
    just before cannot take them from the store buffer, and would wait for them to retire."""
    b, g, lanes, scalar, vector = body.b, body.g, body.lanes, body.scalar, body.vector
    kh, kw = g.kernel
    sh, (pt, pl) = g.strides[0], g.pads_begin
    width = _padded_width(g, lanes)
    ring_rows = kh + sh
    blocks = -(-g.out_width // lanes)
    const = lambda value: ir.Constant(I64, value)     # noqa: E731
    ring = entry_alloca(b, ir.ArrayType(scalar, ring_rows * width), "rows")
    ring_base = b.gep(ring, [const(0), const(0)], inbounds=True)
    fill = body.constant(0.0)               # the padding's value
    everywhere = ir.Constant(body.mask, [True] * lanes)
    plane, row, block = (entry_alloca(b, I64, name) for name in ("plane", "row", "block"))

    def at(base: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(base, [offset], source_etype=scalar)

    def slot_of(r: ir.Value) -> ir.Value:
        return at(ring_base, b.mul(b.urem(b.add(r, const(pt)), const(ring_rows)),
                                   const(width)))

    def copy(x_plane: ir.Value, r: ir.Value) -> None:
        """Input row ``r`` (``-pt <= r``; fill outside the image) into its ring row."""
        padded = slot_of(r)
        with if_else(b, b.icmp_unsigned("<", r, const(g.height)), "row_in") as (then, otherwise):
            with then():
                row_at = at(x_plane, b.mul(r, const(g.width)))
                for part in range(width // lanes):
                    first = part * lanes - pl               # column of lane 0
                    inside = [0 <= c < g.width for c in range(first, first + lanes)]
                    value = fill if not any(inside) else b.call(body.load, [
                        at(row_at, const(first)), body.align, ir.Constant(body.mask, inside),
                        fill])
                    b.call(body.store, [value, at(padded, const(part * lanes)), body.align,
                                        everywhere])
            with otherwise():
                for part in range(width // lanes):
                    b.call(body.store, [fill, at(padded, const(part * lanes)), body.align,
                                        everywhere])

    with counted_loop(b, plane, begin, lambda: end, "plane"):
        q = b.load(plane, typ=I64)
        channel = b.urem(q, const(channels))
        x_plane = at(x, b.mul(q, const(g.height * g.width)))
        y_plane = at(y, b.mul(q, const(g.positions)))
        w_row = at(w, b.mul(channel, const(g.taps)))
        weights = [body.splat(b.load(at(w_row, const(t)), typ=scalar), vector)
                   for t in range(g.taps)]
        start = body.splat(b.load(at(bias, channel), typ=scalar), vector)
        for ky in range(kh):                    # the rows of output row 0
            copy(x_plane, const(ky - pt))
        with counted_loop(b, row, const(0), lambda: const(g.out_height), "row"):
            oh = b.load(row, typ=I64)
            top = b.sub(b.mul(oh, const(sh)), const(pt))
            with if_then(b, b.icmp_signed("<", b.add(oh, const(1)), const(g.out_height)),
                         "ahead"):
                # The rows output row oh + 1 reads and this one does not: other ring rows.
                for ky in range(max(kh - sh, 0), kh):
                    copy(x_plane, b.add(top, const(sh + ky)))
            rows = [slot_of(b.add(top, const(ky))) for ky in range(kh)]
            with counted_loop(b, block, const(0), lambda: const(blocks), "block"):
                first = b.mul(b.load(block, typ=I64), const(lanes))
                taps = [[b.load(at(rows[ky], b.add(first, const(kx))), typ=vector,
                                align=body.align.constant) for kx in range(kw)]
                        for ky in range(kh)]
                body.store_row(body.reduce_rows(taps, weights, start), y_plane, oh, first)


def separates_rows(geometry: WindowGeometry, mode: str, groups: ChannelGroups,
                   lanes: int) -> bool:
    """Whether a max or average window kernel reduces row by row (see :func:`_separable`):
    unit strides, no dilation, output rows of at most :data:`MAX_DEINTERLEAVED_VECTORS`
    vectors and a ring within :data:`MAX_RING_BYTES`.

    >>> g = WindowGeometry(28, 28, 28, 28, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    >>> separates_rows(g, "max", ChannelGroups(), 16), separates_rows(g, "depthwise", ChannelGroups(), 16)
    (True, False)
    """
    blocks = -(-geometry.out_width // lanes)
    return (mode in ("max", "average") and groups == ChannelGroups()
            and geometry.strides == (1, 1) and geometry.dilations == (1, 1)
            and blocks <= MAX_DEINTERLEAVED_VECTORS
            and geometry.kernel[0] * blocks * lanes * 8 <= MAX_RING_BYTES)


def _cells(begin: int, kernel: int, low: int, high: int) -> int:
    """How many of the cells ``begin .. begin + kernel - 1`` lie in ``[low, high)``."""
    return max(0, min(begin + kernel, high) - max(begin, low))


def _separable(body: "_Body", x: ir.Value, y: ir.Value, begin: ir.Value, end: ir.Value) -> None:
    """A max or average pool with unit strides over planes ``[begin, end)``, in two passes:
    each input row's maxima (or sums) over ``KW`` neighbouring columns (one per output
    column; -inf or 0 outside the image, so padding never counts) go once into a ring of
    ``KH`` rows on the stack, and each output row reduces the ``KH`` ring rows it covers. An
    output vector then costs ``KW`` masked loads with constant masks, ``KH`` plain loads and
    ``KW + KH - 2`` maxima or additions, where reading its whole window cost ``KH x KW`` masked
    loads and ``KH x KW - 1`` of them (GoogLeNet's 3x3 max pools over 28-, 14- and 7-wide
    planes, whose vectors all straddle the padding, ran at 0.65x onnxruntime's speed). The
    maximum lets NaN win at every step, so the two passes give the window's single-pass max;
    an average divides by the cells counted, the window's rows inside the image (or the padded
    image, ``count_include_pad``) times its columns, a product of the two passes' counts."""
    b, g, lanes, scalar, vector = body.b, body.g, body.lanes, body.scalar, body.vector
    kh, kw = g.kernel
    (pt, pl), (pb, pr) = g.pads_begin, g.pads_end
    blocks = -(-g.out_width // lanes)
    width = blocks * lanes
    const = lambda value: ir.Constant(I64, value)     # noqa: E731
    average = body.mode == "average"
    fill = body.constant(0.0 if average else -float("inf"))
    combine = (lambda u, v: b.fadd(u, v)) if average else body.maximum
    ring = entry_alloca(b, ir.ArrayType(scalar, kh * width), "rows")
    ring_base = b.gep(ring, [const(0), const(0)], inbounds=True)
    everywhere = ir.Constant(body.mask, [True] * lanes)
    plane, row = (entry_alloca(b, I64, name) for name in ("plane", "row"))
    # The cells an average counts: inside the image, or inside the padded image.
    low_row, high_row, low_col, high_col = (-pt, g.height + pb, -pl, g.width + pr) \
        if body.count_include_pad else (0, g.height, 0, g.width)

    def at(base: ir.Value, offset: ir.Value) -> ir.Value:
        return b.gep(base, [offset], source_etype=scalar)

    def tree(values: list[ir.Value]) -> ir.Value:
        while len(values) > 1:
            pairs = len(values) // 2
            values = [combine(values[2 * i], values[2 * i + 1]) for i in range(pairs)] + \
                values[2 * pairs:]
        return values[0]

    def slot_of(r: ir.Value) -> ir.Value:
        """The ring row of input row ``r`` (``-pt <= r``)."""
        return at(ring_base, b.mul(b.urem(b.add(r, const(pt)), const(kh)), const(width)))

    def row_pass(x_plane: ir.Value, r: ir.Value) -> None:
        """Input row ``r``'s reductions over each output column's ``KW`` cells into its ring
        row."""
        slot = slot_of(r)
        with if_else(b, b.icmp_unsigned("<", r, const(g.height)), "row_in") as (then, otherwise):
            with then():
                row_at = at(x_plane, b.mul(r, const(g.width)))
                for part in range(blocks):
                    taps = []
                    for kx in range(kw):
                        first = part * lanes + kx - pl          # input column of lane 0
                        inside = [0 <= c < g.width for c in range(first, first + lanes)]
                        # Constant masks: only the cells inside the row are read.
                        taps.append(fill if not any(inside) else b.call(body.load, [
                            at(row_at, const(first)), body.align,
                            ir.Constant(body.mask, inside), fill]))
                    b.call(body.store, [tree(taps), at(slot, const(part * lanes)), body.align,
                                        everywhere])
            with otherwise():
                for part in range(blocks):
                    b.call(body.store, [fill, at(slot, const(part * lanes)), body.align,
                                        everywhere])

    with counted_loop(b, plane, begin, lambda: end, "plane"):
        q = b.load(plane, typ=I64)
        x_plane = at(x, b.mul(q, const(g.height * g.width)))
        y_plane = at(y, b.mul(q, const(g.positions)))
        for ky in range(kh - 1):                # the rows output row 0 shares with row 1
            row_pass(x_plane, const(ky - pt))
        with counted_loop(b, row, const(0), lambda: const(g.out_height), "row"):
            oh = b.load(row, typ=I64)
            top = b.sub(oh, const(pt))
            row_pass(x_plane, b.add(top, const(kh - 1)))
            slots = [slot_of(b.add(top, const(ky))) for ky in range(kh)]
            if average:
                lowest = b.select(b.icmp_signed(">", top, const(low_row)), top, const(low_row))
                bottom = b.add(top, const(kh))
                highest = b.select(b.icmp_signed("<", bottom, const(high_row)), bottom,
                                   const(high_row))
                rows_in = b.sitofp(b.sub(highest, lowest), scalar)
            for part in range(blocks):
                value = tree([b.load(at(slot, const(part * lanes)), typ=vector,
                                     align=body.align.constant) for slot in slots])
                if average:
                    columns = [float(_cells(part * lanes + lane - pl, kw, low_col, high_col))
                               for lane in range(lanes)]
                    count = b.fmul(body.splat(rows_in, vector), ir.Constant(vector, columns))
                    # A window with no cell counted (only where ceil_mode lets it start in
                    # the end padding) divides 0 by 1, as onnxruntime gives 0 there.
                    empty = b.fcmp_ordered("<=", count, body.constant(0.0))
                    value = b.fdiv(value, b.select(empty, body.constant(1.0), count))
                body.store_row(value, y_plane, oh, const(part * lanes))


class _Body:
    """One vector of output columns ``first .. first + lanes`` of output row ``oh``."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder, geometry: WindowGeometry,
                 scalar: ir.Type, lanes: int, mode: str, count_include_pad: bool,
                 relu: bool | tuple[float, float], groups: ChannelGroups) -> None:
        self.b, self.g, self.scalar, self.lanes = builder, geometry, scalar, lanes
        self.groups = groups
        self.mode, self.count_include_pad, self.relu = mode, count_include_pad, relu
        self.vector = ir.VectorType(scalar, lanes)
        self.ivector = ir.VectorType(I64, lanes)
        self.mask = ir.VectorType(I1, lanes)
        name = "v{}f{}".format(lanes, 32 if scalar == ir.FloatType() else 64)
        vec, mask = self.vector, self.mask
        self.load = declare(module, f"llvm.masked.load.{name}.p0", vec, (POINTER, I32, mask, vec))
        self.store = declare(module, f"llvm.masked.store.{name}.p0", ir.VoidType(),
                             (vec, POINTER, I32, mask))
        self.gather = declare(module, f"llvm.masked.gather.{name}.v{lanes}p0", vec,
                              (ir.VectorType(POINTER, lanes), I32, mask, vec))
        self.fma = declare(module, f"llvm.fma.{name}", vec, (vec, vec, vec))
        self.align = ir.Constant(I32, 4 if scalar == ir.FloatType() else 8)

    def splat(self, value: ir.Value, vector: ir.VectorType) -> ir.Value:
        b = self.b
        undefined = ir.Constant(vector, ir.Undefined)
        lane0 = b.insert_element(undefined, value, ir.Constant(I32, 0))
        return b.shuffle_vector(lane0, undefined,
                                ir.Constant(ir.VectorType(I32, vector.count), [0] * vector.count))

    def constant(self, value: float) -> ir.Constant:
        return ir.Constant(self.vector, [value] * self.lanes)

    def store_row(self, acc: ir.Value, y_plane: ir.Value, oh: ir.Value, first: ir.Value) -> None:
        """``acc`` under the fused activation (in registers; a clamp keeps NaN, as the GEMM's
        does) stored at output row ``oh``, columns ``first ..`` (those past the row masked)."""
        b, g, lanes = self.b, self.g, self.lanes
        acc = emit_activation(b, acc, self.relu)
        lane = b.add(self.splat(first, self.ivector), ir.Constant(self.ivector, list(range(lanes))))
        valid = b.icmp_signed("<", lane, self.ints(g.out_width))
        out = b.gep(y_plane, [b.add(b.mul(oh, ir.Constant(I64, g.out_width)), first)],
                    source_etype=self.scalar)
        b.call(self.store, [acc, out, self.align, valid])

    def maximum(self, acc: ir.Value, value: ir.Value) -> ir.Value:
        """The larger of ``acc`` and ``value``, lane by lane, NaN in either winning (as NumPy's
        max): ``value`` where it is larger or NaN, else ``acc``. Two compares and a masked move
        on AVX-512, where ``llvm.maximum`` takes six instructions, also ordering -0 below +0,
        which a max over a window need not (3x3 max pools ran 1.3-1.5x faster)."""
        b = self.b
        pick = b.or_(b.fcmp_ordered(">", value, acc), b.fcmp_unordered("uno", value, value))
        return b.select(pick, value, acc)

    def reduce_rows(self, taps: list[list[ir.Value]], weights: list[ir.Value] | None,
                    start: ir.Value) -> ir.Value:
        """``start`` combined with every tap of a window (``taps[kh][kw]``, loaded): the sum of
        the taps times ``weights`` (flattened ``KH x KW``) or, without weights, their max
        (NaN wins, see :meth:`maximum`). One chain per kernel row, joined by a tree: a single
        chain of ``KH x KW`` dependent multiply-adds waited on each one's latency (a 5x5
        layer of 28-wide planes ran at 12 GFMA/s)."""
        b = self.b
        chains = []
        for ky, row in enumerate(taps):
            chain = start if ky == 0 else None
            for kx, value in enumerate(row):
                if weights is None:
                    chain = value if chain is None else self.maximum(chain, value)
                    continue
                weight = weights[ky * len(row) + kx]
                chain = b.fmul(value, weight) if chain is None else \
                    b.call(self.fma, [value, weight, chain])
            chains.append(chain)
        while len(chains) > 1:
            pairs = [(chains[i], chains[i + 1]) for i in range(0, len(chains) - 1, 2)]
            joined = [b.fadd(u, v) if weights is not None else self.maximum(u, v)
                      for u, v in pairs]
            chains = joined + chains[len(pairs) * 2:]
        return chains[0]

    def ints(self, value: int) -> ir.Constant:
        return ir.Constant(self.ivector, [value] * self.lanes)

    def _pair(self, row_base: ir.Value, row_in: ir.Value, first: ir.Value, kw: int,
              passthru: ir.Value) -> ir.Value:
        """Tap ``kw`` of a stride-2 row: the ``2 * lanes`` cells from the first lane's column
        as two masked loads, their even cells picked by one shuffle. A gather of 16 lanes
        issues 16 loads; this 2 (MobileNetV2's stride-2 depthwise layers and the CNNs'
        max pools). Only the even cells inside the image, of lanes inside the row, are read:
        the rest are neither touched nor kept."""
        b, g, lanes = self.b, self.g, self.lanes
        start = b.add(b.sub(b.mul(first, ir.Constant(I64, 2)),
                            ir.Constant(I64, g.pads_begin[1])),
                      ir.Constant(I64, kw * g.dilations[1]))
        halves = []
        for half in range(2):
            cells = list(range(half * lanes, (half + 1) * lanes))
            column = b.add(self.splat(start, self.ivector), ir.Constant(self.ivector, cells))
            lane = b.add(self.splat(first, self.ivector),
                         ir.Constant(self.ivector, [e // 2 for e in cells]))
            mask = b.and_(b.and_(row_in, b.icmp_unsigned("<", column, self.ints(g.width))),
                          b.icmp_signed("<", lane, self.ints(g.out_width)))
            mask = b.and_(mask, ir.Constant(self.mask, [e % 2 == 0 for e in cells]))
            where = b.gep(row_base, [b.add(start, ir.Constant(I64, half * lanes))],
                          source_etype=self.scalar)
            halves.append(b.call(self.load, [where, self.align, mask, passthru]))
        return b.shuffle_vector(halves[0], halves[1], ir.Constant(
            ir.VectorType(I32, lanes), [2 * lane for lane in range(lanes)]))

    def _interior(self, row0: ir.Value, first: ir.Value) -> ir.Value:
        """Whether every lane of the vector is an output column and every cell its taps read
        (with a stride-2 pair's odd cells) lies inside the image, so that plain loads serve:
        the masks of the general path cost more than its loads (a 3x3 stride-2 max pool
        builds two compares and three ands per tap and half)."""
        b, g, lanes = self.b, self.g, self.lanes
        const = lambda value: ir.Constant(I64, value)     # noqa: E731
        left = b.sub(b.mul(first, const(g.strides[1])), const(g.pads_begin[1]))
        reach = (lanes - 1) * g.strides[1] + (g.kernel[1] - 1) * g.dilations[1] + \
            (1 if g.strides[1] == 2 else 0)
        conditions = [b.icmp_signed("<=", b.add(first, const(lanes)), const(g.out_width)),
                      b.icmp_signed(">=", left, const(0)),
                      b.icmp_signed("<", b.add(left, const(reach)), const(g.width)),
                      b.icmp_signed(">=", row0, const(0)),
                      b.icmp_signed("<", b.add(row0, const((g.kernel[0] - 1) * g.dilations[0])),
                                    const(g.height))]
        inside = conditions[0]
        for condition in conditions[1:]:
            inside = b.and_(inside, condition)
        return inside

    def _plain_tap(self, row_base: ir.Value, first: ir.Value, kw: int) -> ir.Value:
        """Tap ``kw`` of an interior vector (see :meth:`_interior`): one load (stride 1) or
        two and a shuffle of their even cells (stride 2), no masks."""
        b, g, lanes = self.b, self.g, self.lanes
        start = b.add(b.sub(b.mul(first, ir.Constant(I64, g.strides[1])),
                            ir.Constant(I64, g.pads_begin[1])),
                      ir.Constant(I64, kw * g.dilations[1]))
        loads = [b.load(b.gep(row_base, [b.add(start, ir.Constant(I64, half * lanes))],
                              source_etype=self.scalar), typ=self.vector,
                        align=self.align.constant)
                 for half in range(g.strides[1])]
        if g.strides[1] == 1:
            return loads[0]
        return b.shuffle_vector(loads[0], loads[1], ir.Constant(
            ir.VectorType(I32, lanes), [2 * lane for lane in range(lanes)]))

    def emit(self, x_plane: ir.Value, y_plane: ir.Value, w: ir.Value, bias: ir.Value,
             channel: ir.Value, oh: ir.Value, first: ir.Value) -> None:
        b, g, lanes = self.b, self.g, self.lanes
        ow = b.add(self.splat(first, self.ivector), ir.Constant(self.ivector, list(range(lanes))))
        valid = b.icmp_signed("<", ow, self.ints(g.out_width))
        row0 = b.sub(b.mul(oh, ir.Constant(I64, g.strides[0])), ir.Constant(I64, g.pads_begin[0]))
        if self.mode == "average" or g.strides[1] > 2:
            accs = self._accumulate(x_plane, w, bias, channel, row0, first, ow, valid, False)
        else:
            # Interior vectors (most of a large plane) read with plain loads; the rows' ends
            # and the padded border take the masked path.
            slots = self._slots("acc")
            with if_else(b, self._interior(row0, first), "interior") as (then, otherwise):
                for branch, plain in ((then, True), (otherwise, False)):
                    with branch():
                        for slot, acc in zip(slots, self._accumulate(
                                x_plane, w, bias, channel, row0, first, ow, valid, plain)):
                            b.store(acc, slot)
            accs = [b.load(slot, typ=self.vector) for slot in slots]
        at = b.add(b.mul(oh, ir.Constant(I64, g.out_width)), first)
        for j, acc in enumerate(accs):
            # The fused activation in registers (a clamp keeps NaN, as the GEMM's does).
            acc = emit_activation(b, acc, self.relu)
            out = b.gep(y_plane, [b.add(at, ir.Constant(I64, j * g.positions))],
                        source_etype=self.scalar)
            b.call(self.store, [acc, out, self.align, valid])

    def _slots(self, name: str) -> list[ir.AllocaInstr]:
        """One stack slot per output plane of a block (promoted to registers by mem2reg)."""
        return [entry_alloca(self.b, self.vector, f"{name}{j}") for j in range(self.groups.block)]

    def _accumulate(self, x_plane: ir.Value, w: ir.Value, bias: ir.Value, channel: ir.Value,
                    row0: ir.Value, first: ir.Value, ow: ir.Value, valid: ir.Value,
                    plain: bool) -> list[ir.Value]:
        """The reductions over the window of one vector of output columns, one per output
        plane of the block: with plain loads (``plain``: an interior vector) or masked ones."""
        b, g = self.b, self.g
        if self.mode == "max":
            taps = [value for _, value, _ in self._taps(x_plane, row0, first, ow, valid, plain,
                                                        -float("inf"))]
            kw = g.kernel[1]
            return [self.reduce_rows([taps[i:i + kw] for i in range(0, len(taps), kw)], None,
                                     self.constant(-float("inf")))]
        if self.mode != "depthwise":
            fill = -float("inf") if self.mode == "max" else 0.0
            acc, count = self.constant(fill), self.constant(0.0)
            for _, value, inside in self._taps(x_plane, row0, first, ow, valid, plain, fill):
                if self.mode == "max":
                    acc = self.maximum(acc, value)
                else:
                    acc = b.fadd(acc, value)
                    count = b.fadd(count, b.select(inside, self.constant(1.0),
                                                   self.constant(0.0)))
            if self.mode == "average":
                # A window with no cell counted (only where ceil_mode lets it start in the end
                # padding) divides 0 by 1, as onnxruntime gives 0 there.
                empty = b.fcmp_ordered("==", count, self.constant(0.0))
                acc = b.fdiv(acc, b.select(empty, self.constant(1.0), count))
            return [acc]
        accs = [self.splat(b.load(b.gep(bias, [b.add(channel, ir.Constant(I64, j))],
                                        source_etype=self.scalar), typ=self.scalar),
                           self.vector) for j in range(self.groups.block)]
        inputs = self.groups.inputs
        if inputs == 1:
            return self._convolve(accs, x_plane, w, channel, ir.Constant(I64, 0), row0, first,
                                  ow, valid, plain)
        # A loop over the group's input planes, the accumulators carried in stack slots.
        slots, counter = self._slots("sum"), entry_alloca(b, I64, "input")
        for slot, acc in zip(slots, accs):
            b.store(acc, slot)
        with counted_loop(b, counter, ir.Constant(I64, 0), lambda: ir.Constant(I64, inputs),
                          "input"):
            ci = b.load(counter, typ=I64)
            plane = b.gep(x_plane, [b.mul(ci, ir.Constant(I64, g.height * g.width))],
                          source_etype=self.scalar)
            accs = [b.load(slot, typ=self.vector) for slot in slots]
            for slot, acc in zip(slots, self._convolve(accs, plane, w, channel, ci, row0,
                                                       first, ow, valid, plain)):
                b.store(acc, slot)
        return [b.load(slot, typ=self.vector) for slot in slots]

    def _convolve(self, accs: list[ir.Value], x_plane: ir.Value, w: ir.Value,
                  channel: ir.Value, ci: ir.Value, row0: ir.Value, first: ir.Value,
                  ow: ir.Value, valid: ir.Value, plain: bool) -> list[ir.Value]:
        """``accs[j] += W[channel + j, ci] (*) window of x_plane``: each tap loaded once for
        the block's output planes."""
        b, g = self.b, self.g
        inputs = ir.Constant(I64, self.groups.inputs)
        w_rows = [b.gep(w, [b.mul(b.add(b.mul(b.add(channel, ir.Constant(I64, j)), inputs), ci),
                                  ir.Constant(I64, g.taps))], source_etype=self.scalar)
                  for j in range(self.groups.block)]
        def weight(j: int, tap: int) -> ir.Value:
            return self.splat(b.load(b.gep(w_rows[j], [ir.Constant(I64, tap)],
                                           source_etype=self.scalar), typ=self.scalar),
                              self.vector)

        taps = list(self._taps(x_plane, row0, first, ow, valid, plain, 0.0))
        if len(w_rows) == 1:
            # One output plane: one chain per kernel row (see reduce_rows); a block of
            # several has a chain per plane already.
            kw = g.kernel[1]
            values = [value for _, value, _ in taps]
            return [self.reduce_rows([values[i:i + kw] for i in range(0, len(values), kw)],
                                     [weight(0, tap) for tap, _, _ in taps], accs[0])]
        for tap, value, _ in taps:
            for j in range(len(w_rows)):
                accs[j] = b.call(self.fma, [value, weight(j, tap), accs[j]])
        return accs

    def _taps(self, x_plane: ir.Value, row0: ir.Value, first: ir.Value, ow: ir.Value,
              valid: ir.Value, plain: bool, fill: float
              ) -> Iterator[tuple[int, ir.Value, ir.Value | None]]:
        """Every tap's vector of input cells (``fill`` where a lane's cell is padding), as
        ``(kh * KW + kw, cells, lanes inside the counted window)``; the last is None
        unless the mode is ``average``."""
        b, g = self.b, self.g
        if not plain:
            col0 = b.sub(b.mul(ow, self.ints(g.strides[1])), self.ints(g.pads_begin[1]))
        passthru = self.constant(fill)
        for kh in range(g.kernel[0]):
            ih = b.add(row0, ir.Constant(I64, kh * g.dilations[0]))
            row_base = b.gep(x_plane, [b.mul(ih, ir.Constant(I64, g.width))],
                             source_etype=self.scalar)
            if not plain:
                row_in = b.icmp_unsigned("<", ih, ir.Constant(I64, g.height))
                row_mask = b.and_(valid, self.splat(row_in, self.mask))
            if self.count_include_pad:
                # inside the padded image: -pt <= ih < H + pb
                shifted = b.add(ih, ir.Constant(I64, g.pads_begin[0]))
                row_pad = b.icmp_unsigned("<", shifted, ir.Constant(
                    I64, g.height + g.pads_begin[0] + g.pads_end[0]))
                row_pad_mask = b.and_(valid, self.splat(row_pad, self.mask))
            for kw in range(g.kernel[1]):
                inside = None
                if plain:
                    value = self._plain_tap(row_base, first, kw)
                else:
                    iw = b.add(col0, self.ints(kw * g.dilations[1]))
                    mask = b.and_(row_mask, b.icmp_unsigned("<", iw, self.ints(g.width)))
                    if g.strides[1] == 1:
                        # Consecutive lanes read consecutive cells: one masked load from the
                        # first lane's address (masked-off lanes, also those left of the image,
                        # are not read).
                        offset = b.add(b.sub(first, ir.Constant(I64, g.pads_begin[1])),
                                       ir.Constant(I64, kw * g.dilations[1]))
                        where = b.gep(row_base, [offset], source_etype=self.scalar)
                        value = b.call(self.load, [where, self.align, mask, passthru])
                    elif g.strides[1] == 2:
                        value = self._pair(row_base, self.splat(row_in, self.mask), first, kw,
                                           passthru)
                    else:
                        where = b.gep(row_base, [iw], source_etype=self.scalar)
                        where.type = ir.VectorType(POINTER, self.lanes)
                        value = b.call(self.gather, [where, self.align, mask, passthru])
                    inside = mask
                if self.mode == "average" and self.count_include_pad:
                    inside = b.and_(row_pad_mask, b.icmp_unsigned(
                        "<", b.add(iw, self.ints(g.pads_begin[1])),
                        self.ints(g.width + g.pads_begin[1] + g.pads_end[1])))
                yield kh * g.kernel[1] + kw, value, inside


__all__ = ["WindowGeometry", "ChannelGroups", "window_module", "block_limit", "deinterleaves",
           "pads_rows", "separates_rows", "ENTRY", "MODES", "MAX_BLOCK"]
