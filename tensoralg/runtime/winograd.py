"""3x3 convolutions (stride 1, dilation 1, group 1) by Winograd's F(2x2, 3x3) or F(4x4, 3x3) on
the generated GEMM (``codegen/winograd.py``): the transformed weight is made and packed once, a
call copies the input once into a zero-bordered channels-last buffer and then runs the native
driver over blocks of output tiles, one range of tiles per thread, each with its own scratch.

A 3x3 layer then does 16 multiply-adds per input and output channel for each 2 x 2 block of
outputs, or 36 for each 4 x 4 block, where the direct convolution does 9 an output.
:func:`winograd_pays` says where a tile pays: the tiles of an output edge that is not a
multiple of the tile are partly wasted, and with few channels the products are too short for
the GEMM's register tiles; :func:`winograd_tile` picks between the two.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module, host_has_feature, host_l2_bytes
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.gemm import BoundChannelsLast, gemm_kernel
from tensoralg.runtime.ranges import RangeCall, image_stride

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 7, *[ctypes.c_int64] * 16)
_KERNELS: dict[str, tuple[Any, str, Any]] = {}

# Channels below which the products are too short a K (input) or too narrow an N (output) for
# the GEMM's 6 x 64 register tiles to beat the direct convolution's one long product.
MIN_CHANNELS = 16
# The share of the direct convolution's multiply-adds the tiles must stay under: 16 per tile
# against 9 per output, so a map of 7 x 7 outputs (16 tiles for 49 outputs) does 0.58 of them.
MOST_WORK_SHARE = 0.75
# Scratch a range may hold for its transformed input and products of one block of tiles
# (beyond the L2-sized block that a large weight makes worth it).
MOST_SCRATCH_BYTES = 64 << 20
# Multiply-adds a GEMM row's worth of time streaming 4 bytes of transformed weight from memory
# costs, against multiplying it with a tile in cache: fitted to F(2x2) and F(4x4) on 512
# channels at 7 x 7 (batch 1 and 8: 4 to 128 tiles; float32, one thread, AVX-512,
# 2026-12-07), where the products run at ~70 GFMA/s and the weight streams at ~25 GB/s
# (python benchmarks/winograd.py 1x512x512x7x7 2x512x512x7x7 4x512x512x7x7 8x512x512x7x7).
STREAM_COST = 11.0


def winograd_pays(channels: int, out_channels: int, out_h: int, out_w: int,
                  tile: int = 2) -> bool:
    """Whether F(tile x tile, 3x3) beats the direct convolution for a layer of ``channels``
    to ``out_channels`` with ``out_h x out_w`` outputs per image.

    >>> winograd_pays(64, 64, 56, 56), winograd_pays(512, 512, 7, 7), winograd_pays(3, 64, 224, 224)
    (True, True, False)
    >>> winograd_pays(256, 256, 1, 1)      # one output per tile: 16 products for 9
    False
    >>> winograd_pays(256, 256, 3, 3), winograd_pays(256, 256, 3, 3, tile=4)
    (False, True)
    """
    positions = (tile + 2) ** 2
    tiles = -(-out_h // tile) * -(-out_w // tile)
    return channels >= MIN_CHANNELS and out_channels >= MIN_CHANNELS and \
        positions * tiles <= MOST_WORK_SHARE * 9 * out_h * out_w


def winograd_tile(channels: int, out_channels: int, out_h: int, out_w: int, images: int = 1,
                  itemsize: int = 4, tiles: tuple[int, ...] = (2, 4)) -> int | None:
    """The output tile (of ``tiles``) whose Winograd convolution is estimated fastest for a
    layer of ``channels`` to ``out_channels`` with ``images`` outputs of ``out_h x out_w``,
    or None where none of them beats the direct convolution (:func:`winograd_pays`).

    A tile's estimate is, per element of its transformed weight (``(tile + 2)^2 C M`` of
    them), the larger of the tiles it is multiplied with and :data:`STREAM_COST` times its
    bytes over 4: a layer of few tiles streams more weight than it multiplies. F(4x4) does
    0.56 of F(2x2)'s products on large maps (36 for 16 outputs against 64) and took 0.57-0.75
    of its time on ResNet-18's 3x3 layers at batch 8, 0.64-0.86 at batch 1 and 0.69-0.72 on
    16- and 32-channel layers at 64 x 64 and 128 x 128 (DPT's head), but 1.46x on a
    512-channel 7 x 7 layer at batch 1, 4 tiles streaming 38 MB of weight (``python
    benchmarks/winograd.py``: float32, one thread, Intel Xeon with AVX-512, 2026-12-07).

    >>> winograd_tile(64, 64, 56, 56, images=8), winograd_tile(512, 512, 7, 7, images=1)
    (4, 2)
    >>> winograd_tile(3, 64, 224, 224) is None
    True
    """
    best, best_cost = None, 0.0
    for tile in tiles:
        if not winograd_pays(channels, out_channels, out_h, out_w, tile):
            continue
        count = images * -(-out_h // tile) * -(-out_w // tile)
        cost = (tile + 2) ** 2 * max(count, STREAM_COST * itemsize / 4)
        if best is None or cost < best_cost:
            best, best_cost = tile, cost
    return best


def winograd_host(cache: DiskCache | None = None) -> bool:
    """Whether the plan should take the driver on this host: AVX-512, where it was written and
    timed (elsewhere its masked loads and stores and the GEMM's narrower tiles are untimed
    against the direct convolution, which the plan keeps there)."""
    return host_has_feature("avx512f", cache)


def winograd_kernel(dtype: np.dtype, activation: Any, cache: DiskCache | None = None,
                    tile: int = 2) -> tuple[Any, int]:
    """The native driver of F(tile x tile, 3x3) for ``dtype`` and ``activation`` on this host
    and its vector lanes, compiled once per process (and stored in ``cache`` when given)."""
    from tensoralg.codegen.winograd import ENTRY, winograd_module

    dtype = np.dtype(dtype)
    lanes = (64 if host_has_feature("avx512f", cache) else 32) // dtype.itemsize
    identity = f"winograd|{tile}|{dtype}|{lanes}|{activation!r}"
    found = _KERNELS.get(identity)
    if found is None:
        found = _KERNELS[identity] = build_llvm_module(
            lambda: winograd_module(dtype, lanes, activation, tile), ENTRY, _PROTOTYPE, cache=cache,
            key=identity, identity=identity)
    return found[0], lanes


class WinogradConv:
    """A 3x3 convolution (stride 1, group 1) with its bias and activation by F(tile x tile,
    3x3) (``tile`` 2 or 4), NCHW in and out; ``pads`` as ONNX's, any size.

    >>> w = np.ones((16, 16, 3, 3), np.float32)
    >>> conv = WinogradConv(w, None, (1, 1), (1, 1))
    >>> x = np.ones((1, 16, 4, 4), np.float32)
    >>> out = np.zeros((1, 16, 4, 4), np.float32)
    >>> conv.bind(x, out)()[0, 0].tolist()[:2]
    [[64.0, 96.0, 96.0, 64.0], [96.0, 144.0, 144.0, 96.0]]
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None,
                 pads_begin: tuple[int, int], pads_end: tuple[int, int],
                 relu: Any = False, cache: DiskCache | None = None, threads: Any = None,
                 tile: int = 2) -> None:
        from tensoralg.codegen.epilogue import as_activation
        from tensoralg.codegen.gemm import aligned_empty, pack_weight
        from tensoralg.codegen.winograd import TRANSFORMS, transformed_weight

        weight = np.asarray(weight)
        if weight.ndim != 4 or weight.shape[2:] != (3, 3) or \
                weight.dtype not in (np.float32, np.float64):
            raise ShapeError(f"WinogradConv: the weight must be a float32/float64 (M, C, 3, 3) "
                             f"array, got {weight.dtype} {weight.shape}")
        if tile not in TRANSFORMS:
            raise ShapeError(f"WinogradConv: tiles of {tile} x {tile} outputs are not built; "
                             f"choose one of {sorted(TRANSFORMS)}")
        self.tile, self.positions = tile, TRANSFORMS[tile].positions
        self.dtype = weight.dtype
        self.out_channels, self.channels = weight.shape[:2]
        self.pads_begin, self.pads_end = tuple(pads_begin), tuple(pads_end)
        self.threads, self.activation = threads, as_activation(relu)
        self.shape, gemm, _, self.tiles = gemm_kernel(self.dtype, cache)
        self.gemm_address = ctypes.cast(gemm, ctypes.c_void_p).value
        self.function, self.lanes = winograd_kernel(self.dtype, self.activation, cache,
                                                     tile)
        packed = [pack_weight(u.astype(self.dtype), self.shape)
                  for u in transformed_weight(weight, tile)]
        self.packed = aligned_empty((len(packed), *packed[0].shape), self.dtype)
        self.packed[...] = packed
        self.u_stride = packed[0].size
        self.bias = np.zeros(self.out_channels, self.dtype)
        if bias is not None:
            bias = np.asarray(bias)
            if bias.shape != (self.out_channels,) or bias.dtype != self.dtype:
                raise ShapeError(f"WinogradConv: the bias must be a {self.dtype} vector of "
                                 f"{self.out_channels} values, got {bias.dtype} {bias.shape}")
            self.bias[:] = bias

    def out_shape(self, height: int, width: int) -> tuple[int, int]:
        """Output rows and columns for an input of ``height x width``."""
        return (height + self.pads_begin[0] + self.pads_end[0] - 2,
                width + self.pads_begin[1] + self.pads_end[1] - 2)

    def describe(self, images: int, height: int, width: int) -> str:
        """One line for a printed plan."""
        from tensoralg.codegen.epilogue import describe

        oh, ow = self.out_shape(height, width)
        tiles = images * -(-oh // self.tile) * -(-ow // self.tile)
        act = describe(self.activation)
        return (f"Winograd F({self.tile}x{self.tile}, 3x3): {tiles} tiles, {self.positions} "
                f"generated GEMMs of "
                f"{tiles}x{self.channels}x{self.out_channels} on transformed tiles in L2-sized "
                f"blocks + bias{' + ' + act if act else ''} in registers")

    def block_tiles(self, tiles: int) -> int:
        """Tiles per block for a range of ``tiles``: their transformed input and products
        in a quarter of L2 (a block filling half of it ran 1.1-1.2x slower with 64 and 128
        channels; 24 to 96 tiles ran within noise of each other, one thread, batch 8, an ad
        hoc sweep, 2026-12-05), unless the transformed weight is larger than L2 and streaming
        it once per block would move more than the whole range's transformed values once (a
        wide layer on a small map: then the whole range is one block, within
        :data:`MOST_SCRATCH_BYTES`). A weight that fits in L2 is no reason for one block:
        F(4x4) of 128 -> 32 channels at 56 x 56, batch 8 (a 1.2 MB weight, 88 blocks of 18
        tiles), took 11.2 ms as one block of 1568 tiles and 7.0 ms in blocks (``python
        benchmarks/winograd.py 8x128x32x56x56`` before and after, one thread, Intel Xeon,
        2026-12-07)."""
        item = self.dtype.itemsize
        per_tile = self.positions * (self.channels + self.out_channels) * item
        mr = self.shape.mr
        l2 = host_l2_bytes() or (1 << 20)
        block = max(mr, l2 // 4 // per_tile // mr * mr)
        weight = self.packed.nbytes
        if weight > l2 and -(-tiles // block) * weight > 2 * tiles * per_tile:
            block = max(block, min(tiles, MOST_SCRATCH_BYTES // per_tile // mr * mr))
        return max(1, min(block, tiles))

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundWinograd":
        """A call reading ``x`` (N, C, H, W) and writing ``out`` (N, M, OH, OW; each image
        C-contiguous, the images any distance apart)."""
        return BoundWinograd(self, x, out)


class BoundWinograd:
    """A :class:`WinogradConv` call with its buffers fixed: the channels-last copy, then the
    driver over tile ranges (two native calls, see :meth:`parts`)."""

    def __init__(self, conv: WinogradConv, x: np.ndarray, out: np.ndarray) -> None:
        n, c, h, w = x.shape
        oh, ow = conv.out_shape(h, w)
        m = conv.out_channels
        out_image = image_stride(out) if out.ndim == 4 else None
        if c != conv.channels or out.shape != (n, m, oh, ow) or out_image is None or \
                oh < 1 or ow < 1 or out.dtype != conv.dtype or x.dtype != conv.dtype or \
                image_stride(x) is None or not out.flags.writeable:
            raise ShapeError(f"WinogradConv: input {x.dtype} {x.shape} and output {out.dtype} "
                             f"{out.shape} do not match the weight ({m}, {conv.channels}, 3, 3)")
        tile = conv.tile
        th, tw = -(-oh // tile), -(-ow // tile)
        # Tiles past the output's edge read rows (columns) beyond the padded input: zeros.
        hp = max(h + conv.pads_begin[0] + conv.pads_end[0], tile * th + 2)
        wp = max(w + conv.pads_begin[1] + conv.pads_end[1], tile * tw + 2)
        self.padded = np.zeros((n, hp, wp, c), conv.dtype)
        self.copy = BoundChannelsLast(x, self.padded, conv.pads_begin, threads=conv.threads)
        # (an empty batch has no tiles: the copy alone, of nothing)
        self.kernel = _BoundTiles(conv, self.padded, out, n * th * tw, th, tw, oh, ow,
                                  out_image) if n else None
        self.out = out

    def rebind(self, name: str, x: np.ndarray) -> None:
        """Read ``x`` (same shape and dtype, C-contiguous) as the input ``"x"``."""
        self.copy.rebind(name, x)

    def parts(self) -> list[tuple[Any, list]]:
        """The two calls, in order, for a compiled sequence."""
        return [(self.copy, [])] + ([(self.kernel, [])] if self.kernel is not None else [])

    def __call__(self) -> np.ndarray:
        self.copy()
        if self.kernel is not None:
            self.kernel()
        return self.out


def _slab(size: int, dtype: np.dtype) -> int:
    """Elements between the slabs (one per position of the transformed patch) of a scratch of
    ``size`` elements each: a cache line past a whole number of 4 KiB pages, so that the
    slabs' streams (16 or 36 loads or stores a tile) fall in different L1 sets; whole pages
    apart, they all shared one.

    >>> _slab(126 * 64, np.dtype(np.float32))
    8208
    """
    item = np.dtype(dtype).itemsize
    pages = -(-size * item // 4096)
    return (pages * 4096 + 64) // item


class _BoundTiles(RangeCall):
    """The driver's ranges of tiles, one per thread where the work pays for it, each with its
    own scratch."""

    operand = "padded"

    def __init__(self, conv: WinogradConv, padded: np.ndarray, out: np.ndarray, tiles: int,
                 th: int, tw: int, oh: int, ow: int, out_image: int) -> None:
        from tensoralg.codegen.gemm import aligned_empty, tile_variants

        # The ranges hold addresses only: the convolution (its packed weight and bias) and
        # the scratch live as long as this call.
        self.conv = conv
        self.function, self.input, self.out = conv.function, padded, out
        self.what = (f"Winograd F({conv.tile}x{conv.tile}, 3x3) convolution "
                     f"({conv.channels} -> {conv.out_channels})")
        mr, nr = conv.shape.mr, conv.shape.nr
        c, m = conv.channels, conv.out_channels
        item = conv.dtype.itemsize
        work = conv.positions * tiles * c * m
        panels = -(-m // nr)
        # A wide layer on few tiles (512 channels on a 7 x 7 map) streams a transformed weight
        # far larger than its tiles: split by tiles, every thread streams all of it, and the
        # second thread gained 1.3x where the direct convolution gained 1.9x (ad hoc, one
        # layer, 2026-12-06). There the threads take ranges of weight panels instead, each
        # transforming the (small) input itself.
        by_channels = conv.threads is not None and panels > 1 and \
            conv.packed.nbytes > conv.positions * tiles * (c + m) * item
        most = panels if by_channels else max(1, tiles // mr)
        parts = 1 if conv.threads is None else conv.threads.dense_parts(work, most)
        if by_channels and parts > 1:
            edges = [min(m, nr * (panels * part // parts)) for part in range(parts + 1)]
            ranges = [(0, tiles, lo, hi) for lo, hi in zip(edges, edges[1:])]
        else:
            edges = [tiles * part // parts for part in range(parts + 1)]
            ranges = [(lo, hi, 0, m) for lo, hi in zip(edges, edges[1:])]
        plane = oh * ow
        self.scratch = []
        self.calls = []
        for lo, hi, first, last in ranges:
            if hi <= lo or last <= first:
                continue
            block = conv.block_tiles(hi - lo)
            # The driver's GEMMs: blocks of `block` tiles, the last one shorter.
            conv.tiles.ensure(tile_variants(conv.shape, last - first, block) |
                              tile_variants(conv.shape, last - first, (hi - lo) % block))
            v_stride, m_stride = (_slab(block * k, conv.dtype) for k in (c, last - first))
            v = aligned_empty((conv.positions * v_stride,), conv.dtype)
            products = aligned_empty((conv.positions * m_stride,), conv.dtype)
            self.scratch += [v, products]
            # Output channels [first, last): their panels of the packed weight (whole panels:
            # `first` is a multiple of nr), their bias, their planes of the output.
            self.calls.append([
                padded.ctypes.data, out.ctypes.data + first * plane * item, v.ctypes.data,
                products.ctypes.data, conv.packed.ctypes.data + first * c * item,
                conv.gemm_address, conv.bias.ctypes.data + first * item, lo, hi,
                block, th, tw, c, last - first, padded.shape[2] * c,
                padded.shape[1] * padded.shape[2] * c, oh, ow, out_image, conv.u_stride,
                conv.shape.k_block, v_stride, m_stride])
        self.threads = conv.threads if len(self.calls) > 1 else None


__all__ = ["BoundWinograd", "WinogradConv", "winograd_host", "winograd_pays", "winograd_tile"]
