"""Pointwise (1x1, stride 1, unpadded) convolutions on NCHW planes (``codegen/planar.py``).

A :class:`PlanarConv` keeps its weight (M x C) and bias; :meth:`PlanarConv.bind` fixes an input
(N, C, H, W) and an output (N, M, H, W) and returns a call that costs one native call (or one
per thread range of (image, panel) units). No layout copy: the product reads and writes NCHW.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module, host_has_feature
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.gemm import FLAG_BIAS
from tensoralg.runtime.ranges import (
    RangeCall,
    check_array,
    check_images,
    image_stride,
    split_call,
)
from tensoralg.runtime.tile_table import TileTable

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 4, ctypes.c_int32,
                              *[ctypes.c_int64] * 8, ctypes.c_void_p, ctypes.c_int64)
_KERNELS: dict[tuple[np.dtype, bool], tuple[Any, Any, str, TileTable]] = {}


def planar_kernel(dtype: np.dtype, cache: DiskCache | None = None
                  ) -> tuple[Any, Any, str, TileTable]:
    """The generated pointwise convolution for ``dtype`` on this host: its blocking (a
    ``GemmShape``), function, LLVM IR and table of register tiles, compiled once per
    process."""
    from tensoralg.codegen.gemm import GemmShape
    from tensoralg.codegen.planar import (
        ENTRY,
        MR,
        TILES,
        planar_module,
        tile_entry,
        tile_index,
        tile_module,
    )

    avx512 = host_has_feature("avx512f", cache)
    key = (np.dtype(dtype), avx512)
    found = _KERNELS.get(key)
    if found is None:
        shape = GemmShape.for_host(dtype, avx512)
        identity = f"planar|{shape}|packed|residual|prefetch"
        function, source, keepalive = build_llvm_module(
            lambda: planar_module(shape), ENTRY, _PROTOTYPE, cache=cache, key=identity,
            identity=identity)
        tiles = TileTable(keepalive, TILES, lambda rows, vectors: tile_module(
            shape, MR, rows, vectors), lambda rows, vectors: tile_entry(MR, rows, vectors),
            tile_index, identity, cache)
        found = _KERNELS[key] = (shape, function, source, tiles)
    return found


def _patches(shape: Any, cache: DiskCache | None) -> tuple[Any, str, TileTable]:
    from tensoralg.codegen.patches import ENTRY, TILES, patch_module
    from tensoralg.codegen.planar import tile_entry, tile_index, tile_module

    # One module per dtype and host serves every geometry, compiled once.
    identity = f"patches|{shape}"
    built = _PATCH_KERNELS.get(identity)
    if built is None:
        function, source, keepalive = build_llvm_module(
            lambda: patch_module(shape), ENTRY, _PATCH_PROTOTYPE, cache=cache,
            key=identity, identity=identity)
        tiles = TileTable(keepalive, TILES, lambda rows, vectors: tile_module(
            shape, 1, rows, vectors), lambda rows, vectors: tile_entry(1, rows, vectors),
            tile_index, identity, cache)
        built = _PATCH_KERNELS[identity] = (function, source, tiles)
    return built


# Below this share of useful lanes (output positions per image over the vector lanes they
# take), the channels-last GEMM convolution is used instead: its tiles run across images and
# output channels, every lane busy, and for small planes its two layout copies are cheap next
# to the multiply-adds (MobileNetV2's 7 x 7 layers: 49 positions in 64 lanes).
MIN_LANE_USE = 0.85


def planar_pays(dtype: np.dtype, positions: int, cache: DiskCache | None = None) -> bool:
    """Whether a pointwise convolution over ``positions`` output positions per image keeps
    at least :data:`MIN_LANE_USE` of its vector lanes busy on this host.

    >>> planar_pays(np.dtype(np.float32), 3136), planar_pays(np.dtype(np.float32), 49)
    (True, False)
    """
    lanes = (64 if host_has_feature("avx512f", cache) else 32) // np.dtype(dtype).itemsize
    return positions >= 1 and positions / (-(-positions // lanes) * lanes) >= MIN_LANE_USE


def _epilogue(conv: "PlanarConv") -> str:
    """`` + bias + silu in registers``-style text of a printed plan line (empty without)."""
    from tensoralg.codegen.epilogue import describe
    from tensoralg.codegen.planar import FLAG_RESIDUAL

    act = describe(conv.activation)
    parts = ["bias"] * bool(conv.flags & FLAG_BIAS) + \
        ["residual"] * bool(conv.flags & FLAG_RESIDUAL) + [act] * bool(act)
    return f" + {' + '.join(parts)} in registers" if parts else ""


class PlanarConv:
    """``out = act(conv1x1(x, weight) + bias [+ r])`` on NCHW ``x``, ``weight`` (M, C) or
    (M, C, 1, 1); ``activation`` is a fused activation as the kernels' ``relu`` parameter
    takes it (``None``: none; a clamp's bounds, ReLU being ``(0, inf)``; or an
    ``codegen.epilogue.Activation``). With ``residual``, every call also reads ``r`` (shaped
    as the output) and adds it before the activation: a bottleneck block's last convolution,
    its skip connection and its ReLU in one pass.

    >>> conv = PlanarConv(np.ones((2, 3), np.float32), np.array([0.5, -9], np.float32),
    ...                   (0.0, float("inf")))
    >>> conv(np.ones((1, 3, 1, 2), np.float32)).tolist()
    [[[[3.5, 3.5]], [[0.0, 0.0]]]]
    >>> skip = PlanarConv(np.ones((2, 3), np.float32), None, (0.0, float("inf")), residual=True)
    >>> skip(np.ones((1, 3, 1, 2), np.float32), r=np.float32([[[[-4, 1]], [[2, -3]]]])).tolist()
    [[[[0.0, 4.0]], [[5.0, 0.0]]]]
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None,
                 activation: Any = None,
                 cache: DiskCache | None = None, threads: Any = None,
                 residual: bool = False) -> None:
        from tensoralg.codegen.epilogue import PARAMETERS, as_activation, epilogue_flags
        from tensoralg.codegen.planar import FLAG_RESIDUAL

        weight = np.asarray(weight)
        if weight.ndim == 4 and weight.shape[2:] == (1, 1):
            weight = weight.reshape(weight.shape[:2])
        if weight.ndim != 2 or weight.dtype not in (np.float32, np.float64):
            raise ShapeError(f"PlanarConv: the weight must be a float32/float64 (M, C) or "
                             f"(M, C, 1, 1) array, got {weight.dtype} {weight.shape}")
        self.dtype, self.threads = weight.dtype, threads
        self.out_channels, self.channels = weight.shape
        self.weight = np.ascontiguousarray(weight)      # row-major, as patch kernels read it
        self._packed: np.ndarray | None = None
        self.shape, self.function, self.source, self.tiles = planar_kernel(self.dtype, cache)
        self.activation = as_activation(activation)
        flags, parameters = epilogue_flags(activation)
        self.flags = (FLAG_BIAS if bias is not None else 0) | flags | \
            (FLAG_RESIDUAL if residual else 0)
        self.residual = residual
        # Always a valid pointer: the bias, then the activation's parameters.
        self.bias = np.zeros(self.out_channels + PARAMETERS, self.dtype)
        self.bias[self.out_channels:] = parameters
        if bias is not None:
            bias = np.asarray(bias).reshape(-1)
            if bias.shape != (self.out_channels,) or bias.dtype != self.dtype:
                raise ShapeError(f"PlanarConv: the bias must be a {self.dtype} vector of "
                                 f"{self.out_channels} values, got {bias.dtype} {bias.shape}")
            self.bias[:self.out_channels] = bias

    @property
    def packed(self) -> np.ndarray:
        """The weight as the planar kernel reads it (``codegen.planar.pack_weight``), packed
        at the first bind."""
        if self._packed is None:
            from tensoralg.codegen.planar import pack_weight

            self._packed = pack_weight(self.weight)
        return self._packed

    def __repr__(self) -> str:
        return f"PlanarConv({self.dtype} {self.channels} -> {self.out_channels}, 1x1)"

    def describe(self, positions: int) -> str:
        """One line for a printed plan."""
        from tensoralg.codegen.planar import MR

        epilogue = _epilogue(self)
        return (f"pointwise convolution on NCHW planes (generated, {self.out_channels}x"
                f"{self.channels}x{positions} per image, {MR}x{self.shape.nr} register tile, "
                f"no layout copy{epilogue})")

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None,
                 r: np.ndarray | None = None) -> np.ndarray:
        """The convolution of ``x`` (N, C, H, W), into ``out`` when given (plus ``r``, for a
        convolution built with ``residual``)."""
        if out is None:
            out = np.empty((x.shape[0], self.out_channels, *x.shape[2:]), self.dtype)
        return self.bind(x, out, r)()

    def bind(self, x: np.ndarray, out: np.ndarray, r: np.ndarray | None = None
             ) -> "BoundPlanar":
        """A call reading ``x`` (N, C, H, W, C-contiguous) and writing ``out`` (N, M, H, W,
        each image C-contiguous, the images any distance apart: a channel block of a larger
        array), both fixed (``x`` may be swapped with ``rebind("x", x)``). A convolution built
        with ``residual`` also reads ``r`` (shaped as ``out``, C-contiguous images, apart from
        ``out``: a later block of input channels reads it after an earlier one wrote ``out``;
        swapped with ``rebind("r", r)``)."""
        check_array(self, x, "input", self.dtype, (None, self.channels, *x.shape[2:]), "N")
        shape = (x.shape[0], self.out_channels, *x.shape[2:])
        stride = check_images(self, out, "output", self.dtype, shape)
        if self.residual != (r is not None):
            raise ShapeError(f"{self!r}: " + ("a residual convolution needs the residual r"
                                              if self.residual else
                                              "this convolution was built without a residual"))
        r_stride = None if r is None else _residual_stride(self, r, out, shape)
        return BoundPlanar(self, x, out, stride, r, r_stride)


def _residual_stride(conv: PlanarConv, r: Any, out: np.ndarray,
                     shape: tuple[int, ...]) -> int:
    """The image stride of the residual ``r``, which must have the output's shape and dtype
    and C-contiguous images (it is only read)."""
    stride = image_stride(r)
    if stride is None or r.dtype != conv.dtype or tuple(r.shape) != tuple(shape):
        raise ShapeError(f"{conv!r}: the residual must be a {conv.dtype} array of shape "
                         f"{' x '.join(map(str, shape))} with C-contiguous images; got "
                         f"{getattr(r, 'dtype', type(r).__name__)} {getattr(r, 'shape', '')}")
    if np.may_share_memory(r, out):
        raise ShapeError(f"{conv!r}: the residual must not overlap the output (the kernel "
                         f"writes partial sums before it reads the residual)")
    return stride


class BoundPlanar(RangeCall):
    """A :class:`PlanarConv` call with its buffers fixed; ``__call__`` runs it."""

    def __init__(self, conv: PlanarConv, x: np.ndarray, out: np.ndarray,
                 out_image: int | None = None, r: np.ndarray | None = None,
                 r_image: int | None = None) -> None:
        from tensoralg.codegen.planar import block_panels, tile_variants

        self.conv, self.input, self.out, self.residual = conv, x, out, r
        self.function, self.what = conv.function, repr(conv)
        images = x.shape[0]
        positions = int(np.prod(x.shape[2:], dtype=np.int64))
        panels = -(-positions // conv.shape.nr)
        per_unit = block_panels(conv.shape, conv.channels, positions, conv.out_channels)
        units = images * -(-panels // per_unit)
        parts = 1
        if conv.threads is not None:
            parts = conv.threads.dense_parts(
                images * positions * conv.channels * conv.out_channels, units)
        bounds = [units * part // parts for part in range(parts + 1)]
        fixed = [out.ctypes.data, conv.packed.ctypes.data, conv.bias.ctypes.data, conv.flags,
                 conv.out_channels, conv.channels, positions, conv.channels * positions,
                 conv.out_channels * positions if out_image is None else out_image, per_unit]
        # The residual's address and image stride close every call; without a residual the
        # kernel still gets a valid pointer (the output), never read.
        tail = [out.ctypes.data, fixed[-2]] if r is None else [r.ctypes.data, r_image]
        self.calls = [[x.ctypes.data, *fixed, lo, hi, *tail]
                      for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[x.ctypes.data, *fixed, 0, 0, *tail]]
        self.threads = conv.threads if len(self.calls) > 1 else None
        if images:
            conv.tiles.ensure(tile_variants(conv.shape, conv.out_channels, positions))

    def rebind(self, name: str, array: np.ndarray) -> None:
        """Read ``array`` as the input ``x`` or, for a residual convolution, as the residual
        ``r`` (same shape, dtype and image stride as the one bound) from now on."""
        if name != "r" or self.residual is None:
            return super().rebind(name, array)
        if array is self.residual:
            return
        if type(array) is not np.ndarray or array.shape != self.residual.shape or \
                array.dtype != self.residual.dtype or \
                image_stride(array) != self.calls[0][-1] or \
                np.may_share_memory(array, self.out):
            raise ShapeError(f"{self.what}: cannot read {getattr(array, 'dtype', type(array))} "
                             f"{getattr(array, 'shape', '')} in place of the residual "
                             f"{self.residual.dtype} {self.residual.shape}")
        self.residual = array
        for call in self.calls:
            call[-2] = array.ctypes.data

    def native(self, slots: dict[str, Any]) -> Any:
        """As :meth:`RangeCall.native`, the residual also read from ``slots["r"]`` when
        given."""
        if "r" not in slots or self.residual is None:
            return super().native(slots)
        if set(slots) - {"x", "r"}:
            return None
        calls = [list(call) for call in self.calls]
        for call in calls:
            call[-2] = slots["r"]
            if "x" in slots:
                call[0] = slots["x"]
        return split_call(self.function, [tuple(call) for call in calls], self.threads,
                          self.what)


_PATCH_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 4, ctypes.c_int32,
                                    ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                    ctypes.c_int64)
_PATCH_KERNELS: dict[str, tuple[Any, str, TileTable]] = {}
# Patch rows (C * KH * KW) up to which a convolution runs on NCHW planes through patch blocks
# (``codegen/patches.py``): a first layer's 3 x 7 x 7 = 147 and other few-channel layers.
# Past it the channels-last GEMM reads its K runs in place, and its copy and transpose cost
# little next to the product (measured ad hoc, 3x3 layers of 32-128 channels: even).
MAX_PATCH_DEPTH = 256
# Output planes smaller than this many panels keep the channels-last GEMM: its tiles run
# across images, and the layout copies of a small plane cost little.
MIN_PATCH_PANELS = 2
_LIMIT32 = 2**31 - 1


class PatchConv:
    """``out = act(conv(x, weight) + bias)`` for NCHW ``x`` of a fixed image geometry (group
    1), through a patch block per panel of output positions (``codegen/patches.py``);
    ``activation`` as in :class:`PlanarConv`. Build it with :func:`patch_conv`.

    >>> from tensoralg.codegen.conv import ConvGeometry
    >>> g = ConvGeometry(1, 17, 17, 1, 16, 16, (2, 2), (1, 1), (1, 1), (0, 0), 1)
    >>> conv = patch_conv(g, np.ones((1, 1, 2, 2), np.float32), None)
    >>> conv(np.arange(289, dtype=np.float32).reshape(1, 1, 17, 17))[0, 0, 0, :4].tolist()
    [36.0, 40.0, 44.0, 48.0]
    """

    def __init__(self, geometry: Any, weight: np.ndarray, bias: np.ndarray | None,
                 activation: Any = None,
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        from tensoralg.codegen.gemm import GemmShape
        from tensoralg.codegen.patches import GEOMETRY, tap_table

        g = geometry
        self.geometry, self.threads = g, threads
        self.planar = PlanarConv(np.asarray(weight).reshape(g.out_channels, -1), bias,
                                 activation, cache=cache)
        self.dtype = self.planar.dtype
        avx512 = host_has_feature("avx512f", cache)
        self.shape = GemmShape.for_host(self.dtype, avx512)
        self.function, self.source, self.tiles = _patches(self.shape, cache)
        depth = g.channels * g.kernel[0] * g.kernel[1]
        values = {"x_image": g.channels * g.height * g.width, "height": g.height,
                  "width": g.width, "out_channels": g.out_channels,
                  "out_height": g.out_height, "out_width": g.out_width,
                  "stride_h": g.strides[0], "stride_w": g.strides[1],
                  "pad_top": g.pads_begin[0], "pad_left": g.pads_begin[1], "depth": depth,
                  "y_image": g.out_channels * g.out_height * g.out_width}
        self.layout = np.array([values[name] for name in GEOMETRY], np.int64)
        self.taps = tap_table(g.channels, g.height, g.width, g.kernel, g.dilations)

    def __repr__(self) -> str:
        g = self.geometry
        return (f"PatchConv({self.dtype} {g.channels}x{g.height}x{g.width} -> "
                f"{g.out_channels}x{g.out_height}x{g.out_width}, {g.kernel[0]}x{g.kernel[1]})")

    def describe(self) -> str:
        """One line for a printed plan."""
        g = self.geometry
        epilogue = _epilogue(self.planar)
        depth = g.channels * g.kernel[0] * g.kernel[1]
        return (f"convolution on NCHW planes through patch blocks (generated, {g.out_channels}"
                f"x{depth}x{g.out_height * g.out_width} per image, {self.shape.nr}-position "
                f"panels gathered in L1, no layout copy{epilogue})")

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The convolution of ``x`` (N, C, H, W), into ``out`` when given."""
        g = self.geometry
        if out is None:
            out = np.empty((x.shape[0], g.out_channels, g.out_height, g.out_width), self.dtype)
        return self.bind(x, out)()

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundPatchConv":
        """A call reading ``x`` (N, C, H, W) and writing ``out`` (N, M, OH, OW), both
        C-contiguous and fixed (``x`` may be swapped with ``rebind("x", x)``)."""
        g = self.geometry
        check_array(self, x, "input", self.dtype, (None, g.channels, g.height, g.width), "N")
        check_array(self, out, "output", self.dtype,
                    (x.shape[0], g.out_channels, g.out_height, g.out_width), "N",
                    writeable=True)
        return BoundPatchConv(self, x, out)


class BoundPatchConv(RangeCall):
    """A :class:`PatchConv` call with its buffers fixed; ``__call__`` runs it."""

    def __init__(self, conv: PatchConv, x: np.ndarray, out: np.ndarray) -> None:
        from tensoralg.codegen.planar import tile_variants

        g = conv.geometry
        self.conv, self.input, self.out = conv, x, out
        self.function, self.what = conv.function, repr(conv)
        positions = g.out_height * g.out_width
        units = x.shape[0] * -(-positions // conv.shape.nr)
        parts = 1
        if conv.threads is not None:
            parts = conv.threads.dense_parts(x.shape[0] * positions * g.out_channels *
                                             g.channels * g.kernel[0] * g.kernel[1], units)
        bounds = [units * part // parts for part in range(parts + 1)]
        planar = conv.planar
        fixed = [out.ctypes.data, planar.weight.ctypes.data, planar.bias.ctypes.data,
                 planar.flags, conv.layout.ctypes.data, conv.taps.ctypes.data]
        self.calls = [[x.ctypes.data, *fixed, lo, hi]
                      for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[x.ctypes.data, *fixed, 0, 0]]
        self.threads = conv.threads if len(self.calls) > 1 else None
        if x.shape[0]:
            conv.tiles.ensure(tile_variants(conv.shape, g.out_channels, positions))


def patch_conv(geometry: Any, weight: np.ndarray, bias: np.ndarray | None,
               activation: Any = None,
               cache: DiskCache | None = None, threads: Any = None) -> PatchConv | None:
    """A :class:`PatchConv` where it applies, else None: one group, float32/float64, at most
    :data:`MAX_PATCH_DEPTH` patch rows, lane offsets within 32 bits, and output planes of at
    least :data:`MIN_PATCH_PANELS` panels that fill the vector lanes (as :func:`planar_pays`).
    """
    from tensoralg.codegen.gemm import GemmShape

    g = geometry
    weight = np.asarray(weight)
    depth = g.channels * g.kernel[0] * g.kernel[1]
    if weight.dtype not in (np.float32, np.float64):
        return None
    shape = GemmShape.for_host(weight.dtype, host_has_feature("avx512f", cache))
    if g.out_height * g.out_width < MIN_PATCH_PANELS * shape.nr:
        return None
    if g.groups != 1 or \
            weight.shape != (g.out_channels, g.channels, *g.kernel) or \
            not 1 <= depth <= MAX_PATCH_DEPTH or g.out_channels < 1 or \
            g.channels * g.height * g.width + g.height * g.width > _LIMIT32 or \
            not planar_pays(weight.dtype, g.out_height * g.out_width, cache):
        return None
    return PatchConv(geometry, weight, bias, activation, cache, threads)




def pointwise_conv(weight: np.ndarray, bias: np.ndarray | None,
                   activation: Any, positions: int,
                   cache: DiskCache | None = None, threads: Any = None,
                   residual: bool = False) -> PlanarConv | None:
    """A :class:`PlanarConv` for ``positions`` output positions per image (adding a
    residual with ``residual``), or None where the positions leave too many vector lanes idle
    (:func:`planar_pays`)."""
    weight = np.asarray(weight)
    if weight.dtype not in (np.float32, np.float64) or \
            not planar_pays(weight.dtype, positions, cache):
        return None
    return PlanarConv(weight, bias, activation, cache=cache, threads=threads, residual=residual)


def patch_conv_of(image: tuple[int, int, int], weight: np.ndarray, bias: np.ndarray | None,
                  activation: Any, kernel: tuple[int, int],
                  strides: tuple[int, int], dilations: tuple[int, int],
                  pads_begin: tuple[int, int], out: tuple[int, int],
                  cache: DiskCache | None = None, threads: Any = None) -> PatchConv | None:
    """:func:`patch_conv` for images of shape ``image`` (C, H, W) and ``out`` (OH, OW)
    output positions, group 1."""
    from tensoralg.codegen.conv import ConvGeometry

    weight = np.asarray(weight)
    g = ConvGeometry(*image, weight.shape[0], *out, tuple(kernel), tuple(strides),
                     tuple(dilations), tuple(pads_begin), 1)
    return patch_conv(g, weight, bias, activation, cache, threads)


def compiled_conv_gathers(image: tuple[int, int, int], kernel: tuple[int, int],
                          strides: tuple[int, int], dilations: tuple[int, int],
                          pads_begin: tuple[int, int], out: tuple[int, int],
                          dtype: np.dtype) -> bool:
    """Whether a convolution with its weights compiled in (``runtime/conv.py``) would read
    these images by gathers (``codegen.conv.addressing``), with AVX-512's lanes."""
    from tensoralg.codegen.conv import CONTIGUOUS, ConvGeometry, addressing

    g = ConvGeometry(*image, 1, *out, tuple(kernel), tuple(strides), tuple(dilations),
                     tuple(pads_begin), 1)
    return addressing(g, 64 // np.dtype(dtype).itemsize) != CONTIGUOUS


__all__ = ["MAX_PATCH_DEPTH", "MIN_LANE_USE", "MIN_PATCH_PANELS", "PlanarConv", "BoundPlanar",
           "PatchConv", "BoundPatchConv", "compiled_conv_gathers", "patch_conv", "patch_conv_of",
           "planar_kernel", "planar_pays", "pointwise_conv"]
