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
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module, host_has_feature
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.ranges import check_array, run_ranges

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                              ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_KERNEL: list[tuple[Any, str, Any]] = []
# The features the kernel's instructions need: vpdpbusd on 512-bit registers, and AVX-512BW
# for its byte operands.
FEATURES = ("avx512f", "avx512bw", "avx512vnni")
# Operand positions in the kernel's arguments of what a plan may rebind each run.
OPERANDS = {"x": 0, "scale": 2, "zero": 3}


def int8_gemm_supported(cache: DiskCache | None = None) -> bool:
    """Whether this host runs the int8 GEMM (AVX-512 with VNNI).

    >>> isinstance(int8_gemm_supported(), bool)
    True
    """
    return all(host_has_feature(feature, cache) for feature in FEATURES)


def qgemm_kernel(cache: DiskCache | None = None) -> tuple[Any, str]:
    """The int8 GEMM's function and LLVM IR, compiled once per process (and stored in
    ``cache`` when given)."""
    from tensoralg.codegen.qgemm import ENTRY, qgemm_module

    if not _KERNEL:
        function, source, keepalive = build_llvm_module(
            qgemm_module, ENTRY, _PROTOTYPE, cache=cache, key="qgemm|u8s8",
            identity="qgemm|u8s8")
        _KERNEL.append((function, source, keepalive))
    return _KERNEL[0][0], _KERNEL[0][1]


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
                 threads: Any = None) -> None:
        from tensoralg.codegen.qgemm import pack_int8_weight

        weight = np.asarray(weight)
        if weight.ndim != 2 or weight.dtype != np.int8:
            raise ShapeError(f"QuantizedLayer: the weight must be a 2-D int8 array, got "
                             f"{weight.dtype} {weight.shape}")
        # The result, sum((q - z) * W) over K terms, is at most K * 255 * max|W| in size. The
        # kernel's partial sums and the zero point's correction may wrap on the way (vpdpbusd
        # and the subtraction are modular), which changes nothing where the result fits.
        largest = int(np.max(np.abs(weight.astype(np.int32)), initial=0))
        if weight.shape[0] * 255 * largest >= 2 ** 31:
            raise ShapeError(f"QuantizedLayer: {weight.shape[0]} rows of int8 weights up to "
                             f"{largest} could overflow the int32 sums; split K")
        if not int8_gemm_supported(cache):
            raise ShapeError("QuantizedLayer: this host has no AVX-512 VNNI, which the int8 "
                             "GEMM needs; use the float route (passes/quantized.py)")
        self.k, self.n = weight.shape
        self.threads = threads
        self.function, self.source = qgemm_kernel(cache)
        self.packed, self.colsum = pack_int8_weight(weight)

    def __repr__(self) -> str:
        return f"QuantizedLayer(int8 {self.k}x{self.n})"

    def describe(self, rows: int) -> str:
        """One line for a printed plan."""
        return (f"generated int8 GEMM (uint8 {rows}x{self.k} quantized in the call x int8 "
                f"{self.k}x{self.n} packed at load, vpdpbusd, 6x64 register tile)")

    def __call__(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
        """The layer on ``x`` (M x K float32, C-contiguous)."""
        out = np.empty((np.shape(x)[0] if np.ndim(x) == 2 else 0, self.n), np.float32)
        call = self.bind(x, scale, zero, out)
        call()
        return out

    def bind(self, x: np.ndarray, scale: np.ndarray, zero: np.ndarray, out: np.ndarray
             ) -> "BoundQuantizedLayer":
        """A call reading ``x``, ``scale`` and ``zero`` and writing ``out``, all fixed
        (:meth:`BoundQuantizedLayer.rebind` swaps the inputs)."""
        check_array(self, x, "input", np.dtype(np.float32), (None, self.k), "M")
        check_array(self, out, "output", np.dtype(np.float32), (x.shape[0], self.n), "M",
                    writeable=True)
        for what, value in (("scale", scale), ("zero point", zero)):
            check_array(self, value, what, np.dtype(np.float32), (), "")
        return BoundQuantizedLayer(self, x, scale, zero, out)


class BoundQuantizedLayer:
    """A :class:`QuantizedLayer` call with its buffers fixed: ``__call__`` runs it,
    ``rebind(name, array)`` swaps ``x``, ``scale`` or ``zero``, ``native(slots)`` hands it
    to a compiled sequence."""

    def __init__(self, layer: QuantizedLayer, x: np.ndarray, scale: np.ndarray,
                 zero: np.ndarray, out: np.ndarray) -> None:
        from tensoralg.codegen.qgemm import MR, NR, quantized_row_bytes

        self.layer, self.out = layer, out
        self.function, self.what = layer.function, repr(layer)
        self.inputs = {"x": x, "scale": scale, "zero": zero}
        m, threads = x.shape[0], layer.threads
        work = m * layer.k * layer.n
        row_parts = 1 if threads is None else threads.dense_parts(work, m // MR)
        panels = -(-layer.n // NR)
        ranges: list[tuple[int, int, int, int]] = []
        if row_parts > 1:
            tiles = -(-m // MR)
            bounds = [min(m, tiles * part // row_parts * MR) for part in range(row_parts + 1)]
            bounds[-1] = m
            ranges = [(lo, hi, 0, layer.n) for lo, hi in zip(bounds, bounds[1:]) if hi > lo]
        elif threads is not None and threads.dense_parts(work, panels) > 1:
            parts = threads.dense_parts(work, panels)
            for part in range(parts):
                first = panels * part // parts * NR
                last = min(panels * (part + 1) // parts * NR, layer.n)
                if last > first:
                    ranges.append((0, m, first, last))
        ranges = ranges or [(0, m, 0, layer.n)]
        row_bytes = quantized_row_bytes(layer.k)
        self.scratch = [np.empty(max(1, hi - lo) * row_bytes, np.uint8)
                        for lo, hi, _, _ in ranges]
        self.calls = [[x.ctypes.data, layer.k, scale.ctypes.data, zero.ctypes.data,
                       layer.packed.ctypes.data, layer.colsum.ctypes.data, layer.k, layer.n,
                       out.ctypes.data, layer.n, lo, hi, first, last, q.ctypes.data]
                      for (lo, hi, first, last), q in zip(ranges, self.scratch)]
        self.threads = threads if len(self.calls) > 1 else None

    def rebind(self, name: str, array: np.ndarray) -> None:
        """Read ``array`` as operand ``name`` (``x``, ``scale`` or ``zero``: same shape and
        dtype, C-contiguous) from now on."""
        if name not in OPERANDS:
            raise ShapeError(f"{self.what}: only x, scale and zero can be rebound, not {name!r}")
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
            call[OPERANDS[name]] = array.ctypes.data

    def native(self, slots: dict[str, Any]) -> Any:
        """This call as a ``NativeCall`` for a compiled sequence, reading the operands named
        in ``slots`` from there; None when it has thread ranges and there is no native pool."""
        from tensoralg.runtime.ranges import split_call

        if set(slots) - set(OPERANDS):
            return None
        lists = []
        for call in self.calls:
            args = list(call)
            for name, slot in slots.items():
                args[OPERANDS[name]] = slot
            lists.append(tuple(args))
        return split_call(self.function, lists, self.threads, self.what)

    def __call__(self) -> np.ndarray:
        run_ranges(self.function, self.calls, self.threads, self.what)
        return self.out


__all__ = ["BoundQuantizedLayer", "QuantizedLayer", "int8_gemm_supported", "qgemm_kernel"]
