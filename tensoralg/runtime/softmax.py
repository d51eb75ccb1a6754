"""Softmax and LogSoftmax over contiguous rows (``codegen/softmax.py``), prebound for a plan.

A :class:`SoftmaxKernel` builds (or reads from the disk cache) one module per row length, dtype
and kind (or, ``any_length``, one per dtype and kind, the length an argument); :meth:`SoftmaxKernel.bind` fixes an input and an output buffer and returns a
:class:`~tensoralg.runtime.ranges.RangeCall` over row ranges.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.ranges import RangeCall, check_array

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int64)
# the module for rows of any length takes the length last
_ANY_LENGTH = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                               ctypes.c_int64, ctypes.c_int64)
_BUILT: dict[str, tuple[Any, str, Any]] = {}     # key -> (function, LLVM IR, keepalive)
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class SoftmaxKernel:
    """``out[r] = softmax(x[r])`` (``log``: log-softmax) for every row ``r`` of ``length``
    values. ``any_length``: the one module whose row length is an argument (no build per
    length, for a model that sees many), instead of one with ``length`` compiled in.

    >>> k = SoftmaxKernel(2, np.dtype(np.float64), False)
    >>> k(np.log(np.array([[1.0, 3.0]]))).round(3).tolist()
    [[0.25, 0.75]]
    >>> k = SoftmaxKernel(3, np.dtype(np.float64), False, any_length=True)
    >>> k(np.log(np.array([[1.0, 1.0, 2.0]]))).round(3).tolist()
    [[0.25, 0.25, 0.5]]
    """

    def __init__(self, length: int, dtype: np.dtype, log: bool, cache: DiskCache | None = None,
                 threads: Any = None, any_length: bool = False) -> None:
        from tensoralg.codegen.softmax import ENTRY, softmax_module

        dtype = np.dtype(dtype)
        if dtype not in FLOATS or length < 1:
            raise ShapeError(f"softmax kernel: rows of {length} {dtype} values (float32 or "
                             f"float64, at least one)")
        self.length, self.dtype, self.log, self.threads = length, dtype, log, threads
        self.any_length = any_length
        self.lanes = 64 // dtype.itemsize
        compiled_in = None if any_length else length
        key = f"softmax|{'any' if any_length else length}|{dtype}|{self.lanes}|{log}"
        built = _BUILT.get(key)
        if built is None:
            built = _BUILT[key] = build_llvm_module(
                lambda: softmax_module(compiled_in, dtype.name, self.lanes, log), ENTRY,
                _ANY_LENGTH if any_length else _PROTOTYPE, cache=cache, key=key, identity=key)
        self.function, self.source, self._keepalive = built

    def __repr__(self) -> str:
        kind = "LogSoftmax" if self.log else "Softmax"
        return f"SoftmaxKernel({kind} over rows of {self.length} {self.dtype})"

    def describe(self) -> str:
        """One line for a printed plan."""
        kind = "log-softmax" if self.log else "softmax"
        rows = f"rows of {self.length}" + (", any row length" if self.any_length else "")
        return (f"generated {kind} row kernel ({rows}, {self.lanes} lanes; max, exp-sum and "
                f"scale passes per row in cache)")

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The result for ``x`` (..., length), into ``out`` when given."""
        if out is None:
            out = np.empty(np.shape(x), self.dtype)
        return self.bind(x, out)()

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundSoftmax":
        """A call reading ``x`` and writing ``out`` (same shape, C-contiguous, a whole number
        of rows of ``length``), both fixed (``x`` may be swapped with ``rebind("x", ...)``)."""
        check_array(self, x, "input", self.dtype, (None,) * np.ndim(x), "any")
        check_array(self, out, "output", self.dtype, tuple(np.shape(x)), "any", True)
        if x.ndim < 1 or x.size % self.length:
            raise ShapeError(f"{self!r}: {x.shape} is not a whole number of rows of "
                             f"{self.length}")
        return BoundSoftmax(self, x, out)


class BoundSoftmax(RangeCall):
    """A :class:`SoftmaxKernel` call with its buffers fixed, split into row ranges."""

    def __init__(self, kernel: SoftmaxKernel, x: np.ndarray, out: np.ndarray) -> None:
        self.kernel, self.input, self.out = kernel, x, out
        self.function, self.what = kernel.function, repr(kernel)
        rows = x.size // kernel.length
        parts = 1
        if kernel.threads is not None:
            parts = kernel.threads.dense_parts(rows * kernel.length * 8, rows)
        bounds = [rows * part // parts for part in range(parts + 1)]
        length = [kernel.length] if kernel.any_length else []
        self.calls = [[x.ctypes.data, out.ctypes.data, lo, hi, *length]
                      for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[x.ctypes.data, out.ctypes.data, 0, 0, *length]]
        self.threads = kernel.threads if len(self.calls) > 1 else None


__all__ = ["SoftmaxKernel", "BoundSoftmax"]
