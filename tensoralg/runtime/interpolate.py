"""A bound interpolation along the last axis: ``out = x @ M^T`` for an interpolation matrix
``M`` with a few entries a row, by the generated kernel of ``codegen/interpolate.py``.

``M`` (``out_size x in_size``, scipy CSR, as ``onnx/ops/resize.resize_passes`` builds it) is
turned into tap tables once: ``J[t, a]`` the column of row ``a``'s ``t``-th entry (-1 past
its last) and ``W[t, a]`` its value, the entries in the row's order, so that every output sums
the same products in the same order as the CSR kernel.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module, host_has_feature
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.ranges import RangeCall

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 4, *[ctypes.c_int64] * 6)
_KERNELS: dict[tuple[np.dtype, bool], tuple[Any, str, Any]] = {}
MOST_TAPS = 16      # more entries a row (a strong antialiased downscale) keep the CSR kernel
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def taps_kernel(dtype: np.dtype, cache: DiskCache | None = None) -> tuple[Any, str]:
    """The generated last-axis interpolation for ``dtype`` on this host: its function and
    LLVM IR, compiled once per process."""
    from tensoralg.codegen.interpolate import ENTRY, taps_module

    dtype = np.dtype(dtype)
    avx512 = host_has_feature("avx512f", cache)
    found = _KERNELS.get((dtype, avx512))
    if found is None:
        lanes = (64 if avx512 else 32) // dtype.itemsize
        identity = f"taps|{dtype}|{lanes}"
        found = _KERNELS[dtype, avx512] = build_llvm_module(
            lambda: taps_module(dtype, lanes), ENTRY, _PROTOTYPE, cache=cache, key=identity,
            identity=identity)
    return found[0], found[1]


def tap_tables(matrix: Any, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """``(J, W)`` of the CSR ``matrix`` (see the module docstring), or None where a row has
    more than :data:`MOST_TAPS` entries.

    >>> import scipy.sparse as sp
    >>> j, w = tap_tables(sp.csr_matrix(np.array([[0.5, 0.5, 0], [0, 0, 1.0]])), np.float64)
    >>> j.tolist(), w.tolist()
    ([[0, 2], [1, -1]], [[0.5, 1.0], [0.5, 0.0]])
    """
    indptr, indices = np.asarray(matrix.indptr), np.asarray(matrix.indices)
    counts = np.diff(indptr)
    taps = int(counts.max(initial=0))
    if taps > MOST_TAPS:
        return None
    rows = matrix.shape[0]
    j = np.full((max(taps, 1), rows), -1, np.int32)
    w = np.zeros((max(taps, 1), rows), dtype)
    row_of = np.repeat(np.arange(rows), counts)
    position = np.arange(indices.size) - indptr[row_of]
    j[position, row_of] = indices
    w[position, row_of] = np.asarray(matrix.data, dtype)
    return j, w


class BoundTaps(RangeCall):
    """``out[i, :] = M @ x[i, :]`` for every row, ``M`` given by its tap tables (:func:`
    tap_tables`: ``(count, out)``; or ``(tables, count, out)``, table ``k`` for the ``k``-th
    block of ``rows / tables`` rows); ``rebind("x", x)`` swaps the input.

    >>> import scipy.sparse as sp
    >>> m = sp.csr_matrix(np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]))
    >>> x = np.array([[2.0, 4.0]])
    >>> BoundTaps(x, np.empty((1, 3)), *tap_tables(m, np.float64))().tolist()
    [[2.0, 3.0, 4.0]]
    """

    def __init__(self, x: np.ndarray, out: np.ndarray, taps: np.ndarray, weights: np.ndarray,
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        tables = taps.shape[0] if taps.ndim == 3 else 1
        if x.ndim != 2 or out.ndim != 2 or x.shape[0] != out.shape[0] or \
                x.dtype not in FLOATS or out.dtype != x.dtype or weights.dtype != x.dtype or \
                not x.flags.c_contiguous or not out.flags.c_contiguous or \
                not out.flags.writeable or taps.dtype != np.int32 or \
                taps.ndim not in (2, 3) or tables < 1 or x.shape[0] % tables or \
                weights.shape != taps.shape or taps.shape[-1] != out.shape[1] or \
                not taps.flags.c_contiguous or not weights.flags.c_contiguous:
            raise ShapeError(f"interpolation: cannot compute {out.dtype} {out.shape} from "
                             f"{x.dtype} {x.shape} with {taps.dtype} taps {taps.shape}")
        # The kernel gathers x[i, J]: every tap must lie in the row (or be -1, none).
        if taps.size and (taps.min() < -1 or taps.max() >= x.shape[1]):
            raise ShapeError(f"interpolation: tap indices must be -1 or within [0, "
                             f"{x.shape[1]}), got [{taps.min()}, {taps.max()}]")
        self.function, self.source = taps_kernel(x.dtype, cache)
        self.input, self.out, self.taps, self.weights = x, out, taps, weights
        count = taps.shape[-2]
        self.what = f"interpolation ({x.shape[1]} -> {out.shape[1]}, {count} taps)"
        rows = x.shape[0]
        parts = 1 if threads is None else threads.parts(out.size * count, native=True)
        bounds = [rows * part // parts for part in range(parts + 1)]
        ranges = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, 0)]
        fixed = [out.ctypes.data, taps.ctypes.data, weights.ctypes.data, x.shape[1],
                 out.shape[1], count]
        group = max(rows // tables, 1)
        self.calls = [[x.ctypes.data, *fixed, lo, hi, group] for lo, hi in ranges]
        self.threads = threads if len(self.calls) > 1 else None




_GRID_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * 3,
                                   *[ctypes.c_int64] * 6)
_GRID_KERNELS: dict[tuple, tuple[Any, str, Any]] = {}


def grid_sample_kernel(dtype: np.dtype, align_corners: bool, border: bool,
                       cache: DiskCache | None = None) -> tuple[Any, str]:
    """The generated 2-D bilinear GridSample (``codegen/grid_sample.py``) for ``dtype``, the
    coordinate convention and the padding: its function and LLVM IR, compiled once per
    process."""
    from tensoralg.codegen.grid_sample import ENTRY, grid_sample_module

    dtype = np.dtype(dtype)
    avx512 = host_has_feature("avx512f", cache)
    key = (dtype, avx512, align_corners, border)
    found = _GRID_KERNELS.get(key)
    if found is None:
        lanes = (64 if avx512 else 32) // dtype.itemsize
        identity = f"grid_sample|{dtype}|{lanes}|{int(align_corners)}|{int(border)}"
        found = _GRID_KERNELS[key] = build_llvm_module(
            lambda: grid_sample_module(dtype, lanes, align_corners, border), ENTRY,
            _GRID_PROTOTYPE, cache=cache, key=identity, identity=identity)
    return found[0], found[1]


class BoundGridSample(RangeCall):
    """``out`` (N, C, *points) sampled bilinearly from ``x`` (N, C, H, W) at ``grid`` (N,
    *points, 2), zeros or border padding (see ``codegen/grid_sample.py``); ``rebind("x", x)``
    swaps the input. The grid is read in place at every call.

    >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
    >>> grid = np.array([[[[0.0, 0.0]]]])           # the centre: the mean of the four
    >>> BoundGridSample(x, grid, np.empty((1, 1, 1, 1)), False, False)().ravel().tolist()
    [1.5]
    """

    def __init__(self, x: np.ndarray, grid: np.ndarray, out: np.ndarray, align_corners: bool,
                 border: bool, cache: DiskCache | None = None, threads: Any = None) -> None:
        if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or \
                grid.shape[0] != x.shape[0] or out.shape != (*x.shape[:2], *grid.shape[1:3]) \
                or x.dtype not in FLOATS or grid.dtype != x.dtype or out.dtype != x.dtype or \
                not x.flags.c_contiguous or not grid.flags.c_contiguous or \
                not out.flags.c_contiguous or not out.flags.writeable:
            raise ShapeError(f"grid sample: cannot sample {x.dtype} {x.shape} at "
                             f"{grid.dtype} {grid.shape} into {out.dtype} {out.shape}")
        self.function, self.source = grid_sample_kernel(x.dtype, align_corners, border, cache)
        self.input, self.out, self.grid = x, out, grid
        self.what = f"grid sample ({x.shape} at {grid.shape[1:3]})"
        images = x.shape[0]
        points = grid.shape[1] * grid.shape[2]
        parts = 1 if threads is None else min(images, threads.parts(out.size * 4, native=True))
        bounds = [images * part // parts for part in range(parts + 1)]
        ranges = [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, 0)]
        fixed = [grid.ctypes.data, out.ctypes.data, x.shape[1], x.shape[2], x.shape[3], points]
        self.calls = [[x.ctypes.data, *fixed, lo, hi] for lo, hi in ranges]
        self.threads = threads if len(self.calls) > 1 else None


__all__ = ["BoundGridSample", "BoundTaps", "MOST_TAPS", "grid_sample_kernel", "tap_tables",
           "taps_kernel"]
