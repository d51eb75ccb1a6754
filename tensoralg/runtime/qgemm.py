"""Dynamically quantized dense layers on the int8 GEMM (``codegen/qgemm.py``).

A :class:`QuantizedLayer` packs its constant int8 weight once; :meth:`QuantizedLayer.bind`
fixes the float32 input, the quantization scale and zero point (float32 scalars another step
writes each run) and the output, and returns a call of one kernel per thread range: each range
quantizes its own rows of the input into its own scratch, then multiplies. Rows are split over
the kernel threads when each range has enough multiply-adds; a product with too few rows to
split (a batch-1 layer) splits its panels of columns instead, each range quantizing the same
rows (a pass over ``M x K`` values against the ``M x K x N`` product's).

The kernel needs AVX-512 VNNI (:func:`int8_gemm_supported`); elsewhere the importer keeps its
exact float route.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module, host_has_feature
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.gemm import BoundChannelsLast
from tensoralg.runtime.ranges import check_array, run_ranges, split_call

_PROTOTYPES = {
    "tensoralg_qgemm": ctypes.CFUNCTYPE(
        ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64),
    "tensoralg_qconv": ctypes.CFUNCTYPE(
        ctypes.c_int32, *[ctypes.c_void_p] * 5, *[ctypes.c_int64] * 9, ctypes.c_void_p,
        *[ctypes.c_int64] * 4, ctypes.c_void_p, ctypes.c_int64),
    "tensoralg_qimage": ctypes.CFUNCTYPE(
        ctypes.c_int32, ctypes.c_void_p, *[ctypes.c_int64] * 4, ctypes.c_void_p,
        ctypes.c_void_p, *[ctypes.c_int64] * 5, ctypes.c_void_p),
    "tensoralg_qplanes": ctypes.CFUNCTYPE(
        ctypes.c_int32, ctypes.c_void_p, *[ctypes.c_int64] * 3, ctypes.c_void_p,
        ctypes.c_void_p, *[ctypes.c_int64] * 2, ctypes.c_void_p),
    "tensoralg_qpoint": ctypes.CFUNCTYPE(
        ctypes.c_int32, *[ctypes.c_void_p] * 4, ctypes.c_int64, ctypes.c_void_p,
        *[ctypes.c_int64] * 4, ctypes.c_void_p, *[ctypes.c_int64] * 2, ctypes.c_void_p,
        ctypes.c_int64),
}
_KERNELS: dict[str, tuple[Any, str, Any]] = {}
# The features the kernel's instructions need: vpdpbusd on 512-bit registers, and AVX-512BW
# for its byte operands.
FEATURES = ("avx512f", "avx512bw", "avx512vnni")


def int8_gemm_supported(cache: DiskCache | None = None) -> bool:
    """Whether this host runs the int8 GEMM (AVX-512 with VNNI); asked of LLVM once per
    process (it took ~9 ms a call without a cache, and every model load asks).

    >>> isinstance(int8_gemm_supported(), bool)
    True
    """
    if not _SUPPORTED:
        _SUPPORTED.append(all(host_has_feature(feature, cache) for feature in FEATURES))
    return _SUPPORTED[0]


_SUPPORTED: list[bool] = []


def qgemm_kernel(cache: DiskCache | None = None, entry: str = "tensoralg_qgemm"
                 ) -> tuple[Any, str]:
    """The function ``entry`` of the int8 GEMM's module (``codegen/qgemm.py``: the dense
    product, the convolution's rows, the quantized channels-last image) and its LLVM IR,
    compiled once per process (and stored in ``cache`` when given)."""
    from tensoralg.codegen.qgemm import qgemm_module

    if entry not in _KERNELS:
        function, source, keepalive = build_llvm_module(
            lambda: qgemm_module(entry), entry, _PROTOTYPES[entry], cache=cache,
            key=f"qgemm|u8s8|{entry}", identity=f"qgemm|u8s8|{entry}")
        _KERNELS[entry] = (function, source, keepalive)
    return _KERNELS[entry][0], _KERNELS[entry][1]


def _check_weight(owner: str, weight: np.ndarray, rank: int, cache: DiskCache | None) -> None:
    """Raise a ``ShapeError`` unless ``weight`` is an int8 array of ``rank`` axes whose sums
    cannot wrap, on a host with VNNI."""
    if weight.ndim != rank or weight.dtype != np.int8:
        raise ShapeError(f"{owner}: the weight must be a {rank}-D int8 array, got "
                         f"{weight.dtype} {weight.shape}")
    # The result, sum((q - z) * W) over K terms, is at most K * 255 * max|W| in size. The
    # kernel's partial sums and the zero point's correction may wrap on the way (vpdpbusd and
    # the subtraction are modular), which changes nothing where the result fits.
    terms = int(np.prod(weight.shape[1:] if rank == 4 else weight.shape[:1]))
    largest = int(np.max(np.abs(weight.astype(np.int32)), initial=0))
    if terms * 255 * largest >= 2 ** 31:
        raise ShapeError(f"{owner}: {terms} terms of int8 weights up to {largest} could "
                         f"overflow the int32 sums; split K")
    if not int8_gemm_supported(cache):
        raise ShapeError(f"{owner}: this host has no AVX-512 VNNI, which the int8 GEMM needs; "
                         f"use the float route (passes/quantized.py)")


@dataclass(frozen=True)
class Int8Epilogue:
    """What an int8 product applies to its float32 sums before storing them, in this order:
    ``multipliers`` (one per output column, or one for all; with ``scaled``, each times the
    scale the activations were quantized with, as ``x * (s * m)``), ``biases`` (likewise),
    then a clamp to ``[low, high]`` with NaN kept (a ReLU is ``(0, inf)``), then a fake
    quantization ``fake = (scale, zero point, low, high)``: ``(saturate(round(v / scale) +
    zero) - zero) * scale`` (the ``QuantizeDequantize`` of a QDQ model's next layer); None or
    infinite bounds: that step is left out.

    >>> Int8Epilogue(np.float32(0.5), None, 0.0).describe()
    'x (multiplier) + clamp(0.0, inf)'
    >>> Int8Epilogue(fake=(0.1, 128.0, 0.0, 255.0)).describe()
    '+ fake quantization (0.1, 128.0)'
    """

    multipliers: Any = None
    biases: Any = None
    low: float = -math.inf
    high: float = math.inf
    scaled: bool = False        # the multipliers times the activations' scale first
    fake: tuple[float, float, float, float] | None = None

    def describe(self) -> str:
        parts = [f"x ({'scale x ' * self.scaled}multiplier)"] * (self.multipliers is not None) + \
            ["+ bias"] * (self.biases is not None)
        if (self.low, self.high) != (-math.inf, math.inf):
            parts.append(f"+ clamp({self.low}, {self.high})")
        if self.fake is not None:
            parts.append(f"+ fake quantization ({self.fake[0]}, {self.fake[1]})")
        return " ".join(parts)

    def packed(self, n: int) -> tuple[np.ndarray, int]:
        """The kernel's epilogue array for ``n`` columns (multipliers and biases, each padded
        to whole panels, then the clamp's bounds and the fake quantization's four values)
        and its flags."""
        from tensoralg.codegen.qgemm import NR

        padded = max(1, -(-n // NR)) * NR
        values = np.zeros(2 * padded + 6, np.float32)
        flags = 0
        for bit, given, start in ((1, self.multipliers, 0), (2, self.biases, padded)):
            if given is not None:
                given = np.asarray(given, np.float32).reshape(-1)
                if given.size not in (1, n):
                    raise ShapeError(f"an int8 product's epilogue has {given.size} values for "
                                     f"{n} columns")
                values[start:start + n] = given
                flags |= 8 if bit == 1 and self.scaled else bit
        values[2 * padded:2 * padded + 2] = (self.low, self.high)
        if (self.low, self.high) != (-math.inf, math.inf):
            flags |= 4
        if self.fake is not None:
            values[2 * padded + 2:] = self.fake
            flags |= 16
        return values, flags


def _check_scalars(owner: Any, scale: np.ndarray, zero: np.ndarray) -> None:
    for what, value in (("scale", scale), ("zero point", zero)):
        check_array(owner, value, what, np.dtype(np.float32), (), "")


def _ranges(rows: int, n: int, work: int, threads: Any) -> list[tuple[int, int, int, int]]:
    """``(row_begin, row_end, col_begin, col_end)`` per thread range of a product of ``rows``
    x ``n`` outputs and ``work`` multiply-adds: rows split in whole register tiles where each
    range has enough work, else whole panels of columns, else one range."""
    from tensoralg.codegen.qgemm import MR, NR

    row_parts = 1 if threads is None else threads.dense_parts(work, rows // MR)
    panels = -(-n // NR)
    ranges: list[tuple[int, int, int, int]] = []
    if row_parts > 1:
        tiles = -(-rows // MR)
        bounds = [min(rows, tiles * part // row_parts * MR) for part in range(row_parts + 1)]
        bounds[-1] = rows
        ranges = [(lo, hi, 0, n) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
    elif threads is not None and threads.dense_parts(work, panels) > 1:
        parts = threads.dense_parts(work, panels)
        for part in range(parts):
            first = panels * part // parts * NR
            last = min(panels * (part + 1) // parts * NR, n)
            if last > first:
                ranges.append((0, rows, first, last))
    return ranges or [(0, rows, 0, n)]


class BoundInt8Call:
    """A call of one of the int8 module's functions with its buffers fixed, one argument list
    per thread range: ``__call__`` runs it, ``rebind(name, array)`` points an operand named
    in ``operands`` (its argument position) at another array of the same shape and dtype,
    ``native(slots)`` hands it to a compiled sequence. ``layer`` is the layer or convolution
    it belongs to (whose ``source`` a printed model shows); ``keep`` holds its buffers."""

    def __init__(self, function: Any, calls: list[list], operands: dict[str, int],
                 inputs: dict[str, np.ndarray], threads: Any, what: str, layer: Any,
                 keep: list) -> None:
        self.function, self.calls, self.operands = function, calls, operands
        self.inputs, self.what, self.layer, self.keep = inputs, what, layer, keep
        self.threads = threads if len(calls) > 1 else None

    def rebind(self, name: str, array: np.ndarray) -> None:
        """Read ``array`` as operand ``name`` (same shape and dtype, C-contiguous) from now
        on."""
        if name not in self.operands:
            raise ShapeError(f"{self.what}: only {', '.join(self.operands)} can be rebound, "
                             f"not {name!r}")
        old = self.inputs[name]
        if array is old:
            return
        if type(array) is not np.ndarray or array.shape != old.shape or \
                array.dtype != old.dtype or not array.flags.c_contiguous:
            raise ShapeError(f"{self.what}: cannot read {getattr(array, 'dtype', type(array))} "
                             f"{getattr(array, 'shape', '')} as {name} in place of "
                             f"{old.dtype} {old.shape}")
        self.inputs[name] = array
        for call in self.calls:
            call[self.operands[name]] = array.ctypes.data

    def native(self, slots: dict[str, Any]) -> Any:
        """This call as a ``NativeCall`` for a compiled sequence, reading the operands named
        in ``slots`` from there; None when it has thread ranges and there is no native pool."""
        if set(slots) - set(self.operands):
            return None
        lists = []
        for call in self.calls:
            args = list(call)
            for name, slot in slots.items():
                args[self.operands[name]] = slot
            lists.append(tuple(args))
        return split_call(self.function, lists, self.threads, self.what)

    def __call__(self) -> None:
        run_ranges(self.function, self.calls, self.threads, self.what)


class QuantizedLayer:
    """``out = float32(saturate(round(x / scale) + zero) - zero) @ weight)`` for a constant
    int8 ``weight`` (K x N), packed once: DynamicQuantizeLinear -> MatMulInteger -> Cast.

    >>> if int8_gemm_supported():
    ...     layer = QuantizedLayer(np.array([[1, -2], [3, 4]], np.int8))
    ...     s, z = np.array(0.5, np.float32), np.array(10.0, np.float32)
    ...     print(layer(np.array([[1.0, 2.0]], np.float32), s, z).tolist())
    ... else:
    ...     print([[14.0, 12.0]])
    [[14.0, 12.0]]
    """

    def __init__(self, weight: np.ndarray, cache: DiskCache | None = None,
                 threads: Any = None, epilogue: Int8Epilogue | None = None) -> None:
        from tensoralg.codegen.qgemm import pack_int8_weight

        weight = np.asarray(weight)
        _check_weight("QuantizedLayer", weight, 2, cache)
        self.epilogue = epilogue or Int8Epilogue()
        self.epilogue_values, self.flags = self.epilogue.packed(weight.shape[1])
        self.k, self.n = weight.shape
        self.threads = threads
        self.function, self.source = qgemm_kernel(cache)
        self.packed, self.colsum = pack_int8_weight(weight)

    def __repr__(self) -> str:
        return f"QuantizedLayer(int8 {self.k}x{self.n})"

    def describe(self, rows: int) -> str:
        """One line for a printed plan."""
        extra = self.epilogue.describe()
        return (f"generated int8 GEMM (uint8 {rows}x{self.k} quantized in the call x int8 "
                f"{self.k}x{self.n} packed at load, vpdpbusd, 6x64 register tile"
                f"{', then ' + extra + ' in registers' if extra else ''})")

    def __call__(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
        """The layer on ``x`` (M x K float32, C-contiguous)."""
        out = np.empty((np.shape(x)[0] if np.ndim(x) == 2 else 0, self.n), np.float32)
        call = self.bind(x, scale, zero, out)
        call()
        return out

    def bind(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray
             ) -> BoundInt8Call:
        """A call reading ``x``, ``scale`` and ``zero`` and writing ``out``, all fixed
        (``rebind`` swaps the three inputs). Each thread range quantizes its rows of ``x``
        into its own scratch."""
        from tensoralg.codegen.qgemm import quantized_row_bytes

        check_array(self, x, "input", np.dtype(np.float32), (None, self.k), "M")
        check_array(self, out, "output", np.dtype(np.float32), (x.shape[0], self.n), "M",
                    writeable=True)
        _check_scalars(self, scale, zero)
        ranges = _ranges(x.shape[0], self.n, x.shape[0] * self.k * self.n, self.threads)
        row_bytes = quantized_row_bytes(self.k)
        scratch = [np.empty(max(1, hi - lo) * row_bytes, np.uint8) for lo, hi, _, _ in ranges]
        calls = [[x.ctypes.data, self.k, scale.ctypes.data, zero.ctypes.data,
                  self.packed.ctypes.data, self.colsum.ctypes.data, self.k, self.n,
                  out.ctypes.data, self.n, lo, hi, first, last, q.ctypes.data,
                  self.epilogue_values.ctypes.data, self.flags]
                 for (lo, hi, first, last), q in zip(ranges, scratch)]
        return BoundInt8Call(self.function, calls, {"x": 0, "scale": 2, "zero": 3},
                             {"x": x, "scale": scale, "zero": zero}, self.threads, repr(self),
                             self, [out, scratch])


class QuantizedConv:
    """A 2-D convolution (group 1, unit horizontal dilation) of a float32 NCHW input,
    quantized with a scale and zero point read at run time, by a constant int8 weight (M, C,
    KH, KW): ``float32(sum((q - z) * W))`` as NCHW (N, M, OH, OW), exact. The input is
    quantized once into a zero-point-bordered uint8 channels-last image (channels padded to a
    multiple of 4), and the int8 GEMM reads each output position's kernel rows from it in
    place (``KW * C`` contiguous bytes a row, no patch matrix) into channels-last rows, which
    a third call transposes into the NCHW output. (Scattering each register tile's vectors
    into the planes instead ran 1.03-1.6x slower: 7 layers of MobileNetV2, ResNet-18 and
    VGG shapes, one thread, ad hoc, 2026-12-07.) A pointwise convolution (1x1, unit strides,
    no padding) instead runs over NCHW positions (``positions``, by default wherever it
    applies): the input quantized into planes of 4 channels a lane, each tile of 6 output
    channels x 64 positions stored straight into the output.

    >>> if int8_gemm_supported():
    ...     conv = QuantizedConv(np.ones((1, 1, 2, 2), np.int8), (1, 1), (0, 0), (0, 0))
    ...     x = np.arange(9, dtype=np.float32).reshape(1, 1, 3, 3)
    ...     print(conv(x, np.array(1.0, np.float32), np.array(0.0, np.float32)).ravel())
    ... else:
    ...     print(np.array([8.0, 12.0, 20.0, 24.0], np.float32))
    [ 8. 12. 20. 24.]
    """

    def __init__(self, weight: np.ndarray, strides: tuple[int, int],
                 pads_begin: tuple[int, int], pads_end: tuple[int, int],
                 dilations: tuple[int, int] = (1, 1), cache: DiskCache | None = None,
                 threads: Any = None, epilogue: Int8Epilogue | None = None,
                 positions: bool | None = None) -> None:
        from tensoralg.codegen.qgemm import pack_int8_weight

        weight = np.asarray(weight)
        _check_weight("QuantizedConv", weight, 4, cache)
        self.epilogue = epilogue or Int8Epilogue()
        self.epilogue_values, self.flags = self.epilogue.packed(weight.shape[0])
        if dilations[1] != 1 or min(strides) < 1 or dilations[0] < 1 or \
                min(*pads_begin, *pads_end) < 0:
            raise ShapeError(f"QuantizedConv: strides {strides}, dilations {dilations} and "
                             f"pads {pads_begin} {pads_end}: strides and dilations must be "
                             f"positive, the horizontal dilation 1, pads not negative")
        self.m, self.c, self.kh, self.kw = weight.shape
        self.c4 = -(-self.c // 4) * 4
        self.strides, self.dilations = tuple(strides), tuple(dilations)
        self.pads_begin, self.pads_end = tuple(pads_begin), tuple(pads_end)
        self.threads, self.cache = threads, cache
        # A pointwise convolution runs over NCHW positions (no image, no transpose) unless
        # ``positions`` is False (benchmarks/int8_kernels.py times both routes).
        pointwise = (self.kh, self.kw) == (1, 1) and self.strides == (1, 1) and \
            not any(self.pads_begin) and not any(self.pads_end)
        if positions and not pointwise:
            raise ShapeError(f"{self!r}: only a 1x1 convolution of unit strides and no "
                             f"padding runs over NCHW positions")
        self.pointwise = pointwise if positions is None else positions
        if self.pointwise:
            self.rows = np.zeros((self.m, self.c4), np.int8)
            self.rows[:, :self.c] = weight.reshape(self.m, self.c)
            self.rowsum = self.rows.astype(np.int32).sum(axis=1, dtype=np.int32)
            self.image_function, _ = qgemm_kernel(cache, "tensoralg_qplanes")
            self.function, self.source = qgemm_kernel(cache, "tensoralg_qpoint")
            return
        # K in the order the image is read: kernel row, kernel column, channel (padded).
        ordered = np.zeros((self.kh, self.kw, self.c4, self.m), np.int8)
        ordered[:, :, :self.c] = weight.transpose(2, 3, 1, 0)
        self.packed, self.colsum = pack_int8_weight(ordered.reshape(-1, self.m))
        self.image_function, _ = qgemm_kernel(cache, "tensoralg_qimage")
        self.function, self.source = qgemm_kernel(cache, "tensoralg_qconv")

    def __repr__(self) -> str:
        return f"QuantizedConv(int8 {self.m}x{self.c}x{self.kh}x{self.kw})"

    def out_shape(self, x_shape: tuple[int, ...]) -> tuple[int, int]:
        """``(OH, OW)`` for an input of ``x_shape`` (N, C, H, W)."""
        sizes = []
        for axis in range(2):
            span = (self.kh, self.kw)[axis] - 1
            span = span * self.dilations[axis] + 1
            room = x_shape[2 + axis] + self.pads_begin[axis] + self.pads_end[axis] - span
            if room < 0:
                raise ShapeError(f"{self!r}: a window of span {span} does not fit an input "
                                 f"of {x_shape[2 + axis]} with pads {self.pads_begin[axis]}, "
                                 f"{self.pads_end[axis]}")
            sizes.append(room // self.strides[axis] + 1)
        return sizes[0], sizes[1]

    def describe(self, rows: int) -> str:
        """One line for a printed plan."""
        extra = self.epilogue.describe()
        if self.pointwise:
            return (f"generated int8 pointwise convolution over NCHW positions (uint8 planes, "
                    f"4 channels a lane, quantized in the call; {rows} positions x {self.c4} "
                    f"bytes, int8 weight rows {self.m}x{self.c4}, vpdpbusd, 6 channels x 64 "
                    f"positions a tile{', then ' + extra + ' in registers' if extra else ''})")
        return (f"generated int8 convolution (uint8 channels-last image quantized in the call, "
                f"{rows} positions x {self.kh} kernel rows of {self.kw * self.c4} bytes, int8 "
                f"weight {self.kh * self.kw * self.c4}x{self.m} packed at load, vpdpbusd"
                f"{', then ' + extra + ' in registers' if extra else ''})")

    def __call__(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
        """The convolution of ``x`` (N, C, H, W float32, C-contiguous), NCHW."""
        oh, ow = self.out_shape(np.shape(x))
        out = np.empty((np.shape(x)[0], self.m, oh, ow), np.float32)
        for call in self.bind(x, scale, zero, out):
            call()
        return out

    def bind(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray
             ) -> tuple[Any, ...]:
        """The calls that write ``out`` (N, M, OH, OW) from ``x``, ``scale`` and ``zero``, in
        order; each ``BoundInt8Call`` names the operands it reads (``operands``) and holds its
        buffers. A pointwise convolution: the quantized planes (``x``, ``scale``, ``zero``)
        and the product over positions (``scale``, ``zero``). Otherwise: the quantized image
        (``x``, ``scale``, ``zero``), the product (``scale``, ``zero``) and the transpose of
        its channels-last rows into ``out``."""
        check_array(self, x, "input", np.dtype(np.float32), (None, self.c, None, None), "N")
        n, _, h, w = x.shape
        oh, ow = self.out_shape(x.shape)
        check_array(self, out, "output", np.dtype(np.float32), (n, self.m, oh, ow), "",
                    writeable=True)
        _check_scalars(self, scale, zero)
        if self.pointwise:
            return self._bind_positions(x, scale, zero, out)
        hp = h + self.pads_begin[0] + self.pads_end[0]
        wp = w + self.pads_begin[1] + self.pads_end[1]
        image = np.empty(max(1, n * hp * wp * self.c4), np.uint8)
        image_call = BoundInt8Call(
            self.image_function, [[x.ctypes.data, n, self.c, h, w, scale.ctypes.data,
                                   zero.ctypes.data, hp, wp, self.pads_begin[0],
                                   self.pads_begin[1], self.c4, image.ctypes.data]],
            {"x": 0, "scale": 5, "zero": 6}, {"x": x, "scale": scale, "zero": zero}, None,
            f"{self!r} image", self, [image])
        row = wp * self.c4
        rows = n * oh * ow
        target = np.empty((rows, self.m), np.float32)      # channels-last rows
        k = self.kh * self.kw * self.c4
        calls = [[image.ctypes.data, scale.ctypes.data, zero.ctypes.data,
                  self.packed.ctypes.data, self.colsum.ctypes.data, self.kh, self.kw * self.c4 // 4,
                  self.dilations[0] * row, oh * ow, ow, self.strides[0] * row,
                  self.strides[1] * self.c4, hp * row, self.m, target.ctypes.data,
                  lo, hi, first, last, self.epilogue_values.ctypes.data, self.flags]
                 for lo, hi, first, last in _ranges(rows, self.m, rows * k * self.m,
                                                     self.threads)]
        product = BoundInt8Call(self.function, calls, {"scale": 1, "zero": 2},
                                {"scale": scale, "zero": zero}, self.threads, repr(self), self,
                                [image, out, target])
        # The channels-last rows (N, OH * OW, M) into (N, M, OH * OW): the copy that makes an
        # NHWC image of one-row images is that transpose (as ``program.transpose_call``).
        transpose = BoundChannelsLast(target.reshape(n, oh * ow, 1, self.m),
                                      out.reshape(n, 1, self.m, oh * ow), (0, 0),
                                      cache=self.cache, threads=self.threads)
        return image_call, product, transpose

    def _bind_positions(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                        out: np.ndarray) -> tuple[BoundInt8Call, BoundInt8Call]:
        """The pointwise convolution's two calls: ``x``'s planes quantized into groups of 4
        channels a lane (``codegen/qgemm._planes_driver``), then the product over tiles of 64
        positions (``_point_driver``), split over the kernel threads by tiles."""
        from tensoralg.codegen.gemm import aligned_empty
        from tensoralg.codegen.qgemm import NR

        n, _, h, w = x.shape
        positions = h * w
        padded = max(NR, -(-positions // NR) * NR)
        groups = self.c4 // 4
        planes = aligned_empty((max(1, n * groups * padded * 4),), np.uint8)
        planes_call = BoundInt8Call(
            self.image_function, [[x.ctypes.data, n, self.c, positions, scale.ctypes.data,
                                   zero.ctypes.data, groups, padded, planes.ctypes.data]],
            {"x": 0, "scale": 4, "zero": 5}, {"x": x, "scale": scale, "zero": zero}, None,
            f"{self!r} planes", self, [planes])
        tiles = n * padded // NR
        work = n * positions * self.c4 * self.m
        parts = 1 if self.threads is None else self.threads.dense_parts(work, tiles)
        bounds = [tiles * part // parts for part in range(parts + 1)]
        calls = [[planes.ctypes.data, scale.ctypes.data, zero.ctypes.data,
                  self.rows.ctypes.data, self.c4, self.rowsum.ctypes.data, groups, padded,
                  positions, self.m, out.ctypes.data, lo, hi,
                  self.epilogue_values.ctypes.data, self.flags]
                 for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[planes.ctypes.data, scale.ctypes.data, zero.ctypes.data, self.rows.ctypes.data,
              self.c4, self.rowsum.ctypes.data, groups, padded, positions, self.m,
              out.ctypes.data, 0, 0, self.epilogue_values.ctypes.data, self.flags]]
        product = BoundInt8Call(self.function, calls, {"scale": 1, "zero": 2},
                                {"scale": scale, "zero": zero}, self.threads, repr(self), self,
                                [planes, out])
        return planes_call, product


__all__ = ["BoundInt8Call", "Int8Epilogue", "QuantizedConv", "QuantizedLayer",
           "int8_gemm_supported", "qgemm_kernel"]
