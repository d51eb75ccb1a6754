"""Dense layers ``act(A @ W + bias)`` on the generated GEMM (``codegen/gemm.py``).

A :class:`DenseLayer` packs its constant weight once; :meth:`DenseLayer.bind` fixes an input
and an output buffer and returns a call that costs one ctypes call (or one per thread range).
Rows are split over the kernel threads only when each range has enough multiply-adds to pay
for the hand-over (``KernelThreads.dense_parts``): ranges run on the native pool in compiled
sequences and on a first call from Python, which costs 1-2 µs a range, not 30-50. A product
with too few rows to split (a batch-1 layer) splits its whole panels of columns instead
(``_column_ranges``): SAINT at batch 1 on all cores, onnxruntime's time over tensoralg's,
went from 0.63 to 0.87 (ad hoc, 2026-12-06), its 624 x 2496 layers streaming their weights
on both cores.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module, host_has_feature
from tensoralg.codegen.cache import DiskCache

# As in codegen/gemm.py, which is imported on first use: it loads llvmlite, and importing
# tensoralg must not.
from tensoralg.codegen.epilogue import FLAG_BIAS
from tensoralg.errors import ShapeError
from tensoralg.runtime.ranges import RangeCall, check_array, image_stride, run_ranges
from tensoralg.runtime.tile_table import TileTable

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int64,
                              *[ctypes.c_int64] * 9)
_KERNELS: dict[tuple[np.dtype, bool], tuple[Any, Any, str, TileTable]] = {}


def gemm_tiles(dtype: np.dtype, cache: DiskCache | None = None) -> TileTable:
    """The table of register tiles of :func:`gemm_kernel`'s driver for ``dtype``: a call's
    tiles are built when it is bound (:func:`require_tiles`)."""
    return gemm_kernel(dtype, cache)[3]


def require_tiles(tiles: TileTable, shape: Any, calls: list[list]) -> None:
    """Build the register tiles the generated GEMM's ``calls`` (argument lists) will run:
    each call's N (``args[4]``) and rows (``args[9]`` to ``args[10]``)."""
    from tensoralg.codegen.gemm import tile_variants

    tiles.ensure(set().union(*(tile_variants(shape, call[4], call[10] - call[9])
                               for call in calls)))


def gemm_kernel(dtype: np.dtype, cache: DiskCache | None = None
                ) -> tuple[Any, Any, str, TileTable]:
    """The generated GEMM for ``dtype`` on this host: its blocking (a ``GemmShape``),
    function, LLVM IR and table of register tiles. Compiled once per process (and stored in
    ``cache`` when given).
    """
    from tensoralg.codegen.gemm import (
        ENTRY,
        TILES,
        GemmShape,
        gemm_module,
        tile_entry,
        tile_index,
        tile_module,
    )

    avx512 = host_has_feature("avx512f", cache)
    key = (np.dtype(dtype), avx512)
    found = _KERNELS.get(key)
    if found is None:
        shape = GemmShape.for_host(dtype, avx512)
        # The module is a function of its blocking and the compiler's source: a cached build
        # is found without making it (making it took ~300 ms, most of a new process's call).
        function, source, keepalive = build_llvm_module(
            lambda: gemm_module(shape), ENTRY, _PROTOTYPE, cache=cache, key=f"gemm|{shape}",
            identity=f"gemm|{shape}")
        tiles = TileTable(keepalive, TILES, lambda rows, vectors: tile_module(
            shape, rows, vectors), tile_entry, tile_index, f"gemm|{shape}", cache)
        found = _KERNELS[key] = (shape, function, source, tiles)
    return found


def dense_product(a: np.ndarray, b: np.ndarray, dtype: np.dtype, cache: DiskCache | None,
                  threads: Any) -> np.ndarray:
    """``a @ b`` on the generated GEMM, packing ``b`` for this one call (``ta.einsum``'s dense
    products). Ranges go to ``threads``'s Python pool, and only for products large enough to
    pay for it.

    >>> dense_product(np.eye(2), np.arange(4.0).reshape(2, 2), np.dtype(np.float64), None,
    ...               None).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    """
    from tensoralg.runtime.threads import MIN_FMAS_PER_RANGE_PYTHON

    fmas = a.shape[0] * a.shape[1] * b.shape[1]
    pool = threads if fmas >= 2 * MIN_FMAS_PER_RANGE_PYTHON else None
    layer = DenseLayer(np.ascontiguousarray(b, dtype=dtype), cache=cache, threads=pool)
    a = np.ascontiguousarray(a, dtype=dtype)
    out = np.empty((a.shape[0], layer.n), dtype)
    call = layer.bind(a, out)
    # Straight to the threads: a bound layer's own call compiles a native call sequence for
    # its ranges (~16 ms), which pays off only for a layer that is called many times.
    run_ranges(call.function, call.calls, pool if len(call.calls) > 1 else None, call.what)
    return out


class DenseLayer:
    """``out = act(a @ weight + bias)`` with ``weight`` (K x N) packed once; ``act`` is ReLU
    when ``relu`` is set, else the identity.

    >>> layer = DenseLayer(np.eye(3, dtype=np.float32), bias=np.ones(3, np.float32), relu=True)
    >>> layer(np.array([[1.0, -2.0, 0.0]], np.float32)).tolist()
    [[2.0, 0.0, 1.0]]
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None = None,
                 relu: bool | tuple[float, float] = False,
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        weight = np.asarray(weight)
        if weight.ndim != 2 or weight.dtype not in (np.float32, np.float64):
            raise ShapeError(f"DenseLayer: the weight must be a 2-D float32/float64 array, got "
                             f"{weight.dtype} {weight.shape}")
        self.dtype = weight.dtype
        self.threads = threads      # a KernelThreads pool to split large products over
        self.k, self.n = weight.shape
        from tensoralg.codegen.epilogue import PARAMETERS, as_activation, epilogue_flags
        from tensoralg.codegen.gemm import pack_weight

        self.shape, self.function, self.source, self.tiles = gemm_kernel(self.dtype, cache)
        self.packed = pack_weight(weight, self.shape)
        # ``relu`` may be a clamp's (low, high) (a fused Clip; ReLU6 is (0, 6)) or an
        # Activation (codegen/activation.py): ReLU's own epilogue when it is (0, inf), else
        # the clamp or the smooth function, whose parameters the kernel reads from just past
        # the N bias values.
        self.activation = as_activation(relu)
        activation, parameters = epilogue_flags(relu)
        self.flags = (FLAG_BIAS if bias is not None else 0) | activation
        # Always a valid pointer: the kernel reads it (masked) only when FLAG_BIAS is set.
        self.bias = np.zeros(self.n + PARAMETERS, self.dtype)
        self.bias[self.n:] = parameters
        if bias is not None:
            bias = np.asarray(bias)
            if bias.shape != (self.n,) or bias.dtype != self.dtype:
                raise ShapeError(f"DenseLayer: the bias must be a {self.dtype} vector of "
                                 f"{self.n} values, got {bias.dtype} {bias.shape}")
            self.bias[:self.n] = bias

    def _epilogue(self) -> list[str]:
        from tensoralg.codegen.epilogue import describe

        act = describe(self.activation)
        return ["bias"] * bool(self.flags & FLAG_BIAS) + [act] * bool(act)

    def __repr__(self) -> str:
        parts = "".join(f" + {part}" for part in self._epilogue())
        return f"DenseLayer({self.dtype} {self.k}x{self.n}{parts})"

    def describe(self, rows: int) -> str:
        """One line for a printed plan: the product, the blocking and the epilogue."""
        from tensoralg.codegen.gemm import TALL_MR

        parts = self._epilogue()
        epilogue = f" + {' + '.join(parts)} in registers" if parts else ""
        tile = (f"{TALL_MR}x{self.shape.lanes}" if self.n <= self.shape.lanes else
                f"{self.shape.mr}x{self.shape.nr}")
        return (f"generated GEMM (dense {rows}x{self.k}x{self.n}, {tile} register tile, "
                f"weight packed at load{epilogue})")

    def __call__(self, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The layer on ``a`` (M x K, C-contiguous), into ``out`` when given."""
        if out is None:
            out = np.empty((np.shape(a)[0] if np.ndim(a) == 2 else 0, self.n), self.dtype)
        return self.bind(a, out)()

    def bind(self, a: np.ndarray, out: np.ndarray) -> "BoundLayer":
        """A call of this layer reading ``a`` and writing ``out``, both fixed (``a`` may be
        swapped with :meth:`BoundLayer.rebind`). Large products are split over the layer's
        thread pool, as many ranges as it has threads now."""
        self._check(a, "input", (None, self.k))
        self._check(out, "output", (a.shape[0], self.n), writeable=True)
        return BoundLayer(self, a, out, self.threads)

    def _check(self, array: Any, what: str, shape: tuple, writeable: bool = False) -> None:
        check_array(self, array, what, self.dtype, shape, "M", writeable)


class BoundLayer(RangeCall):
    """A :class:`DenseLayer` call with its buffers fixed; ``__call__`` runs it, ``rebind("A",
    a)`` swaps the input."""

    operand = "A"

    def __init__(self, layer: DenseLayer, a: np.ndarray, out: np.ndarray, threads: Any) -> None:
        self.layer, self.input, self.out = layer, a, out
        self.function, self.what = layer.function, repr(layer)
        m = a.shape[0]
        bounds = _tile_ranges(layer, 0, m, threads)
        kc = layer.shape.k_block
        planes = [kc, kc, max(m, 1), 1, 0, 0, 0, 0, 1]  # K in blocks of k_block; one plane
        self.calls = [[a.ctypes.data, layer.k, layer.packed.ctypes.data, layer.k, layer.n,
                       out.ctypes.data, layer.n, layer.bias.ctypes.data, layer.flags, lo, hi,
                       *planes]
                      for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[a.ctypes.data, layer.k, layer.packed.ctypes.data, layer.k, layer.n,
              out.ctypes.data, layer.n, layer.bias.ctypes.data, layer.flags, 0, 0, *planes]]
        self._biases: list[np.ndarray] = []     # the column ranges' biases, while the calls live
        if len(self.calls) == 1 and threads is not None:
            self.calls, self._biases = _column_ranges(layer, self.calls[0], max(m, 1), threads)
        self.threads = threads if len(self.calls) > 1 else None
        require_tiles(layer.tiles, layer.shape, self.calls)

    @classmethod
    def with_arguments(cls, layer: DenseLayer, a: np.ndarray, out: np.ndarray,
                       args: list, threads: Any = None) -> "BoundLayer":
        """A call with the kernel's arguments given whole (a convolution's planes, see
        :class:`BoundConv`); ``a`` and ``out`` are what they point into. With ``threads``, its
        rows (``args[9:11]``) are split into ranges of whole register tiles, one per thread
        where the product is large enough: each range writes only its own rows of C."""
        bound = cls.__new__(cls)
        bound.layer, bound.input, bound.out = layer, a, out
        bound.function, bound.what = layer.function, repr(layer)
        bounds = _tile_ranges(layer, args[9], args[10], threads)
        bound.calls = [[*args[:9], lo, hi, *args[11:]]
                       for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [list(args)]
        bound.threads = threads if len(bound.calls) > 1 else None
        require_tiles(layer.tiles, layer.shape, bound.calls)
        return bound

    def refuse(self, array: Any) -> None:
        self.layer._check(array, "input", self.input.shape)


def _column_ranges(layer: DenseLayer, call: list, rows: int, threads: Any
                   ) -> tuple[list[list], list[np.ndarray]]:
    """``call`` (a product too short in rows to split them) split over whole panels of
    columns instead, one range per thread where the product is large enough: each range reads
    its own panels of the packed weight and writes its own columns of C, with its own copy of
    the bias and the activation's parameters (which the kernel reads just past its N values).
    A batch-1 layer streams its whole weight from memory (SAINT's 624 x 2496 in float32: 6 MB a
    call), which one core does at half the machine's bandwidth. Returns the calls and the
    biases they point into (the caller keeps them alive)."""
    nr = layer.shape.nr
    panels = -(-layer.n // nr)
    parts = threads.dense_parts(rows * layer.k * layer.n, panels)
    if parts <= 1:
        return [call], []
    item = layer.dtype.itemsize
    calls, keep = [], []
    for part in range(parts):
        first, last = panels * part // parts * nr, min(panels * (part + 1) // parts * nr, layer.n)
        if last <= first:
            continue
        bias = np.concatenate([layer.bias[first:last], layer.bias[layer.n:]])
        keep.append(bias)
        calls.append([call[0], call[1], call[2] + first * layer.k * item, call[3], last - first,
                      call[5] + first * item, call[6], bias.ctypes.data, *call[8:]])
    return calls, keep


def _tile_ranges(layer: DenseLayer, begin: int, end: int, threads: Any) -> list[int]:
    """Bounds splitting rows ``[begin, end)`` of a product into one range per thread where it
    is large enough (``threads.dense_parts``); ranges start on whole register tiles, so only
    the last one has a short tile."""
    rows, mr = end - begin, layer.shape.mr
    parts = 1 if threads is None else threads.dense_parts(rows * layer.k * layer.n, rows // mr)
    tiles = -(-rows // mr)
    bounds = [begin + min(rows, tiles * part // parts * mr) for part in range(parts + 1)]
    bounds[-1] = end
    return bounds


_COPY_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                   *[ctypes.c_int64] * 9)
_COPIES: dict[tuple[np.dtype, bool], tuple[Any, str, Any]] = {}


def channels_last_kernel(dtype: np.dtype, cache: DiskCache | None = None) -> tuple[Any, str]:
    """The generated NCHW to zero-bordered NHWC copy for ``dtype`` on this host (see
    ``codegen.conv.channels_last_module``): its function and LLVM IR, compiled once per
    process."""
    from tensoralg.codegen.conv import CHANNELS_LAST_ENTRY, channels_last_module

    dtype = np.dtype(dtype)
    avx512 = host_has_feature("avx512f", cache)
    key = (dtype, avx512)
    found = _COPIES.get(key)
    if found is None:
        lanes = (64 if avx512 else 32) // dtype.itemsize
        identity = f"channels_last|{dtype}|{lanes}"
        found = _COPIES[key] = build_llvm_module(
            lambda: channels_last_module(dtype, lanes), CHANNELS_LAST_ENTRY, _COPY_PROTOTYPE,
            cache=cache, key=identity, identity=identity)
    return found[0], found[1]


class BoundChannelsLast(RangeCall):
    """``x`` (N, C, H, W) copied into the zero-bordered channels-last ``out`` (N, Hp, Wp, C),
    ``pads`` cells of border before each spatial axis; the border is left as it is (zero it
    once). ``rebind("x", x)`` swaps the input; ``native`` hands it to a compiled sequence.

    >>> x = np.arange(8, dtype=np.float32).reshape(1, 2, 2, 2)
    >>> out = np.zeros((1, 3, 3, 2), np.float32)
    >>> BoundChannelsLast(x, out, (1, 1))()[0, 1:, 1:].tolist()
    [[[0.0, 4.0], [1.0, 5.0]], [[2.0, 6.0], [3.0, 7.0]]]
    """

    def __init__(self, x: np.ndarray, out: np.ndarray, pads: tuple[int, int],
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        n, c, h, w = x.shape
        x_image = image_stride(x)
        if out.ndim != 4 or out.shape[0] != n or out.shape[3] != c or \
                out.shape[1] < h + pads[0] or out.shape[2] < w + pads[1] or \
                out.dtype != x.dtype or not out.flags.c_contiguous or \
                x_image is None or min(pads) < 0:
            raise ShapeError(f"channels-last copy: cannot copy {x.dtype} {x.shape} into "
                             f"{out.dtype} {out.shape} with pads {pads}")
        self.function, self.source = channels_last_kernel(x.dtype, cache)
        self.input, self.out = x, out
        self.what = f"channels-last copy ({x.dtype} {x.shape} -> {out.shape})"
        row = out.shape[2] * c
        # Ranges of input rows (image, row), one per thread where the copy is large enough.
        parts = 1 if threads is None else threads.parts(x.size, native=True)
        bounds = [n * h * part // parts for part in range(parts + 1)]
        ranges = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, 0)]
        geometry = [c, h, w, out.shape[1] * row, row, pads[0] * row + pads[1] * c, x_image]
        self.calls = [[x.ctypes.data, out.ctypes.data, lo, hi, *geometry] for lo, hi in ranges]
        self.threads = threads if len(self.calls) > 1 else None


# Output channels up to which a convolution scatters its tiles into NCHW planes; wider ones
# write the channels-last product and transpose it. A tile's scatter stores go to 64 planes at
# once, and the wider the output the more planes pass through the store buffer and caches
# before any is written again. Scatter time over product and transpose time, one thread,
# float32, 1x1 and 3x3 layers at 7 x 7 to 28 x 28, batch 1 and 8 (``python
# benchmarks/conv_epilogue_ab.py scatter``; ad hoc grids that hour agreed): 1024 channels
# 1.04-2.07, 512 0.96-1.53, 384 0.92-1.31, 64-256 0.82-1.36. Up to 384 the scatter stays: it
# also lets a convolution write its block of a Concat's output in place. Whole models, one
# thread, time scattering at any width over the default's (``... model``'s "NCHW scatter at
# any width" row, two runs): MnasNet 1.03-1.05 at batch 1 and 1.10 at 8, MobileNetV3-Large
# 1.03, EfficientNet-B0 1.00, ResNet-50 1.00-1.01 at batch 1 and 0.97-1.03 at 8 (its 7 x 7
# 1x1 layers, 2048 channels).
SCATTER_MOST_CHANNELS = 384


class ConvLayer:
    """A 2-D convolution (group 1, dilation 1) with its bias and optional ReLU, computed
    channels-last without a patch matrix: the input is copied once into a zero-bordered NHWC
    buffer (by gathers, :class:`BoundChannelsLast`), and the output positions of every image
    are the rows of the generated GEMM, one plane per output row, whose K runs are the
    kernel's rows (``KW * C`` contiguous values each, an image row apart); register tiles run
    across output rows and images. The output is NHWC: ``(N * OH * OW, M)``.

    >>> w = np.ones((1, 1, 2, 2), np.float32)
    >>> conv = ConvLayer(w, None, (1, 1), (0, 0), (0, 0))
    >>> out = np.zeros((1, 1), np.float32)
    >>> conv.bind(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2), out)()[0, 0].item()
    6.0
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, strides: tuple[int, int],
                 pads_begin: tuple[int, int], pads_end: tuple[int, int],
                 relu: bool | tuple[float, float] = False,
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        weight = np.asarray(weight)
        if weight.ndim != 4:
            raise ShapeError(f"ConvLayer: the weight must be (M, C, KH, KW), got {weight.shape}")
        self.out_channels, self.channels, self.kh, self.kw = weight.shape
        # K ordered (kernel row, kernel column, channel): one kernel row is KW * C contiguous
        # values of the channels-last input.
        flat = weight.transpose(2, 3, 1, 0).reshape(-1, self.out_channels)
        self.layer = DenseLayer(np.ascontiguousarray(flat), bias, relu, cache=cache,
                                threads=threads)
        self.strides, self.pads_begin, self.pads_end = strides, pads_begin, pads_end

    def one_k_block(self) -> bool:
        """Whether the GEMM runs K in one block, so that an NCHW output is scattered once (more
        blocks gather and scatter the partial sums once per block, where a transpose after a
        channels-last product costs less)."""
        return self.layer.k <= self.layer.shape.k_block + self.layer.shape.k_block // 2

    def writes_nchw_well(self) -> bool:
        """Whether an NCHW output pays here: K in one block (:meth:`one_k_block`) on a host
        with AVX-512, whose scatters are instructions (elsewhere LLVM splits each one into
        single stores, and the channels-last product and a transpose cost less)."""
        shape = self.layer.shape
        return self.one_k_block() and shape.lanes * shape.dtype.itemsize == 64

    def scatters_well(self) -> bool:
        """Whether scattering NCHW tiles beats the channels-last product and a transpose after
        it: :meth:`writes_nchw_well`, for at most :data:`SCATTER_MOST_CHANNELS` output
        channels."""
        return self.writes_nchw_well() and self.out_channels <= SCATTER_MOST_CHANNELS

    def out_shape(self, height: int, width: int) -> tuple[int, int]:
        """Output rows and columns for an input of ``height x width``."""
        oh = (height + self.pads_begin[0] + self.pads_end[0] - self.kh) // self.strides[0] + 1
        ow = (width + self.pads_begin[1] + self.pads_end[1] - self.kw) // self.strides[1] + 1
        return oh, ow

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundConv":
        """A call reading ``x`` (N, C, H, W) and writing ``out``: channels-last
        (N * OH * OW, M), or NCHW (N, M, OH, OW; each image C-contiguous, the images any
        distance apart: a channel block of a larger array), where the GEMM scatters its tiles (no
        transpose after it; worth it while K fits one K block, see :meth:`one_k_block`)."""
        return BoundConv(self, x, out)


def conv_arguments(conv: ConvLayer, a: int, channels: int, row: int, a_image: int,
                   positions: tuple[int, int, int], c: tuple[int, int, int, int, int]
                   ) -> list[int]:
    """The generated GEMM's arguments (``codegen.gemm.gemm_module``) computing ``conv`` from a
    zero-bordered channels-last input at address ``a`` (``channels`` a position, ``row``
    elements an image row, ``a_image`` elements an image) for ``positions`` = (images,
    output rows, output columns), into ``c`` = (address, ldc, c_inner, c_outer, c_col).

    The GEMM's rows are the output positions (image, output row, column), one plane per output
    row: its OW outputs ``sw * channels`` apart in A, output rows ``sh`` image rows apart,
    images ``a_image`` apart. K runs over the kernel's rows, ``KW * channels`` contiguous
    values each, an image row apart. Register tiles run across output rows and images."""
    layer, (sh, sw) = conv.layer, conv.strides
    images, oh, ow = positions
    address, ldc, c_inner, c_outer, c_col = c
    return [a, sw * channels, layer.packed.ctypes.data, layer.k, layer.n, address, ldc,
            layer.bias.ctypes.data, layer.flags, 0, images * oh * ow, conv.kw * channels, row,
            ow, oh, sh * row, c_inner, a_image, c_outer, c_col]


class BoundConv:
    """A :class:`ConvLayer` call with its buffers fixed: the channels-last copy, then the GEMM
    planes (two native calls, see :meth:`parts`)."""

    def __init__(self, conv: ConvLayer, x: np.ndarray, out: np.ndarray) -> None:
        n, c, h, w = x.shape
        oh, ow = conv.out_shape(h, w)
        m = conv.out_channels
        # NCHW: each image C-contiguous, the images any distance apart (a channel block).
        planar = out.shape == (n, m, oh, ow) and image_stride(out) is not None
        if c != conv.channels or (out.shape != (n * oh * ow, m) and not planar) or oh < 1 or \
                ow < 1 or out.dtype != conv.layer.dtype or \
                not (planar or out.flags.c_contiguous) or not out.flags.writeable:
            raise ShapeError(f"ConvLayer: input {x.shape} and output {out.shape} do not match "
                             f"the weight ({m}, {conv.channels}, {conv.kh}, {conv.kw})")
        hp = h + conv.pads_begin[0] + conv.pads_end[0]
        wp = w + conv.pads_begin[1] + conv.pads_end[1]
        self.padded = np.zeros((n, hp, wp, c), conv.layer.dtype)
        if x.dtype != conv.layer.dtype or image_stride(x) is None:
            raise ShapeError(f"ConvLayer: cannot copy an input of {x.dtype} {x.shape}")
        self.copy = BoundChannelsLast(x, self.padded, conv.pads_begin,
                                      threads=conv.layer.threads)
        row = wp * c
        # An NCHW output has its positions next to each other and its channels a plane apart
        # (the tile is scattered); a channels-last one, its channels next to each other.
        ldc, c_inner, c_col = (1, ow, oh * ow) if planar else (m, ow * m, 1)
        c_outer = image_stride(out) if planar else oh * ow * m
        self.gemm = BoundLayer.with_arguments(conv.layer, self.padded, out, conv_arguments(
            conv, self.padded.ctypes.data, c, row, hp * row, (n, oh, ow),
            (out.ctypes.data, ldc, c_inner, c_outer, c_col)), conv.layer.threads)
        self.out = out

    def rebind(self, name: str, x: np.ndarray) -> None:
        """Read ``x`` (same shape and dtype, C-contiguous) as the input ``"x"``."""
        self.copy.rebind(name, x)

    def parts(self) -> list[tuple[Any, list]]:
        """The two calls, in order, for a compiled sequence."""
        return [(self.copy, []), (self.gemm, [])]

    def __call__(self) -> np.ndarray:
        self.copy()
        self.gemm()
        return self.out


class GroupedConv:
    """A grouped 2-D convolution (``group > 1``, dilation 1): one :class:`ConvLayer` per group,
    each reading its block of input channels in place (the channels-last copy takes the
    images' distance) and scattering its tiles into its block of the NCHW output. Meant for
    groups whose K fits one GEMM block on AVX-512 hosts (:meth:`writes_nchw_well`).

    >>> conv = GroupedConv(np.ones((4, 1, 1, 1), np.float32), None, 2, (1, 1), (0, 0), (0, 0))
    >>> x = np.arange(2, dtype=np.float32).reshape(1, 2, 1, 1)
    >>> conv.bind(x, np.zeros((1, 4, 1, 1), np.float32))().ravel().tolist()
    [0.0, 0.0, 1.0, 1.0]
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, groups: int,
                 strides: tuple[int, int], pads_begin: tuple[int, int],
                 pads_end: tuple[int, int], relu: bool | tuple[float, float] = False,
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        weight = np.asarray(weight)
        if weight.ndim != 4 or groups < 1 or weight.shape[0] % groups:
            raise ShapeError(f"GroupedConv: {groups} groups do not divide the weight "
                             f"{weight.shape}'s output channels")
        per = weight.shape[0] // groups
        self.groups, self.out_channels = groups, weight.shape[0]
        self.channels = weight.shape[1] * groups
        self.layers = [ConvLayer(weight[g * per:(g + 1) * per],
                                 None if bias is None else np.asarray(bias)[g * per:(g + 1) * per],
                                 strides, pads_begin, pads_end, relu, cache=cache,
                                 threads=threads) for g in range(groups)]

    def writes_nchw_well(self) -> bool:
        """Whether each group's NCHW output pays (see :meth:`ConvLayer.writes_nchw_well`)."""
        return self.layers[0].writes_nchw_well()

    def out_shape(self, height: int, width: int) -> tuple[int, int]:
        """Output rows and columns for an input of ``height x width``."""
        return self.layers[0].out_shape(height, width)

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundGroupedConv":
        """A call reading ``x`` (N, C, H, W, C-contiguous) and writing ``out`` (N, M, OH, OW,
        C-contiguous images)."""
        return BoundGroupedConv(self, x, out)


class BoundGroupedConv:
    """A :class:`GroupedConv` call with its buffers fixed: one channels-last copy of every
    group's input (``x`` viewed as ``N * G`` images of ``C / G`` channels, a reshape), then a
    GEMM per group reading its images of that copy and scattering into its channel block of
    the output. ``rebind("x", x)`` swaps the input; :meth:`parts` hands the calls to a compiled
    sequence. RegNetX-400MF's 25 groups of 16 channels at 7 x 7 took 0.81 ms at batch 1 with a
    copy per group from Python, against onnxruntime's 0.17."""

    def __init__(self, conv: GroupedConv, x: np.ndarray, out: np.ndarray) -> None:
        n, c, h, w = x.shape if x.ndim == 4 else (0, -1, 0, 0)
        oh, ow = conv.out_shape(h, w)
        if c != conv.channels or not x.flags.c_contiguous or \
                out.shape != (n, conv.out_channels, oh, ow) or image_stride(out) is None or \
                x.dtype != conv.layers[0].layer.dtype or out.dtype != x.dtype or \
                not out.flags.writeable:
            raise ShapeError(f"GroupedConv: input {x.dtype} {x.shape} and output "
                             f"{getattr(out, 'dtype', '')} {getattr(out, 'shape', '')} do not "
                             f"match {conv.groups} groups of {conv.channels} -> "
                             f"{conv.out_channels} channels")
        groups = conv.groups
        cg, mg = c // groups, conv.out_channels // groups
        first = conv.layers[0]
        hp = h + first.pads_begin[0] + first.pads_end[0]
        wp = w + first.pads_begin[1] + first.pads_end[1]
        # Image g + G * i of the copy is group g of image i: each group's images lie G apart.
        self.padded = np.zeros((n * groups, hp, wp, cg), x.dtype)
        self.copy = BoundChannelsLast(x.reshape(n * groups, cg, h, w), self.padded,
                                      first.pads_begin, threads=first.layer.threads)
        row, item = wp * cg, x.dtype.itemsize
        c_outer = image_stride(out)
        self.gemms = [BoundLayer.with_arguments(layer.layer, self.padded, out, conv_arguments(
            layer, self.padded.ctypes.data + g * hp * row * item, cg, row, groups * hp * row,
            (n, oh, ow), (out.ctypes.data + g * mg * oh * ow * item, 1, ow, c_outer, oh * ow)),
            layer.layer.threads) for g, layer in enumerate(conv.layers)]
        self.input, self.out = x, out

    def rebind(self, name: str, x: np.ndarray) -> None:
        """Read ``x`` (same shape and dtype, C-contiguous) as the input ``"x"``."""
        if name != "x":
            raise ShapeError(f"GroupedConv: only the input x can be rebound, not {name!r}")
        if type(x) is not np.ndarray or x.shape != self.input.shape or \
                x.dtype != self.input.dtype or not x.flags.c_contiguous:
            raise ShapeError(f"GroupedConv: cannot read {getattr(x, 'dtype', type(x))} "
                             f"{getattr(x, 'shape', '')} in place of {self.input.dtype} "
                             f"{self.input.shape}")
        self.input = x
        self.copy.rebind("x", x.reshape(self.copy.input.shape))

    def parts(self) -> list[tuple[Any, list]]:
        """The copy, then one GEMM per group, in order, for a compiled sequence."""
        return [(self.copy, []), *[(gemm, []) for gemm in self.gemms]]

    def __call__(self) -> np.ndarray:
        self.copy()
        for gemm in self.gemms:
            gemm()
        return self.out


__all__ = ["ConvLayer", "BoundConv", "BoundChannelsLast", "channels_last_kernel", "DenseLayer",
           "BoundLayer", "GroupedConv", "BoundGroupedConv", "gemm_kernel",
           "gemm_tiles", "require_tiles"]
