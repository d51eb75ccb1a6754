"""Channel-wise window kernels (``codegen/window.py``): MaxPool, AveragePool and depthwise
convolution on NCHW planes, prebound for a model's plan.

A :class:`WindowKernel` builds (or reads from the disk cache) one module per geometry, mode,
dtype and epilogue; :meth:`WindowKernel.bind` fixes an input and an output buffer and returns a
:class:`~tensoralg.runtime.ranges.RangeCall` over plane ranges (one native call per thread
range) that a compiled call sequence can take.
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module
from tensoralg.codegen.cache import DiskCache
from tensoralg.errors import ShapeError
from tensoralg.runtime.ranges import RangeCall, check_array

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_BUILT: dict[str, tuple[Any, str, Any]] = {}     # key -> (function, LLVM IR, keepalive)
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class WindowKernel:
    """``out = reduce(windows of x)`` per NCHW plane, ``mode`` one of ``max``, ``average``
    and ``depthwise`` (see ``codegen/window.py``); a depthwise kernel holds its ``weight``
    (M, Cg, KH, KW: ``C / Cg`` groups of ``Cg`` input and ``M * Cg / C`` output channels, so
    (C, 1, KH, KW) for one filter a channel) and ``bias`` (M) and applies ReLU when ``relu``
    (the clamp ``min(max(x, low), high)`` when it is a fused Clip's ``(low, high)``).
    ``channels`` is C, the input's channels.

    >>> from tensoralg.codegen.window import WindowGeometry
    >>> g = WindowGeometry(2, 2, 1, 1, (2, 2), (1, 1), (1, 1), (0, 0), (0, 0))
    >>> WindowKernel(g, "max", np.dtype(np.float32), 1)(
    ...     np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)).item()
    3.0
    """

    def __init__(self, geometry: Any, mode: str, dtype: np.dtype, channels: int,
                 count_include_pad: bool = False, weight: np.ndarray | None = None,
                 bias: np.ndarray | None = None, relu: Any = False,
                 cache: DiskCache | None = None, threads: Any = None) -> None:
        from tensoralg.codegen.window import ENTRY, MODES, ChannelGroups, block_limit, window_module

        dtype = np.dtype(dtype)
        if mode not in MODES or dtype not in FLOATS:
            raise ShapeError(f"window kernel: mode {mode!r} with {dtype} (modes {MODES}, "
                             f"float32 or float64)")
        self.geometry, self.mode, self.dtype, self.channels = geometry, mode, dtype, channels
        self.count_include_pad, self.relu, self.threads = count_include_pad, relu, threads
        self.lanes = 64 // dtype.itemsize
        g = geometry
        self.groups, self.out_channels = ChannelGroups(), channels
        if mode == "depthwise":
            shape = None if weight is None else np.shape(weight)
            if shape is None or len(shape) != 4 or shape[2:] != g.kernel:
                raise ShapeError(f"window kernel: a depthwise or grouped weight must be (M, Cg, "
                                 f"{g.kernel[0]}, {g.kernel[1]}), got {shape}")
            # Raises for a Cg that does not divide the channels or an M that is no multiple
            # of the groups.
            self.groups = ChannelGroups.of(channels, shape, block_limit())
            self.out_channels = shape[0]
            self.weight = np.ascontiguousarray(weight, dtype).reshape(shape[0], -1)
            self.bias = np.zeros(shape[0], dtype) if bias is None else \
                np.ascontiguousarray(np.reshape(bias, -1), dtype)
            if self.bias.shape != (shape[0],):
                raise ShapeError(f"window kernel: bias {np.shape(bias)} for {shape[0]} "
                                 f"output channels")
        else:
            self.weight = self.bias = np.zeros(1, dtype)    # not read
        groups, out_channels = self.groups, self.out_channels
        key = (f"window|{g}|{mode}|{dtype}|{self.lanes}|{out_channels}|{count_include_pad}|"
               f"{relu}|{groups}")
        built = _BUILT.get(key)
        if built is None:
            built = _BUILT[key] = build_llvm_module(
                lambda: window_module(g, mode, dtype.name, self.lanes, out_channels,
                                      count_include_pad, relu, groups),
                ENTRY, _PROTOTYPE, cache=cache, key=key, identity=key)
        self.function, self.source, self._keepalive = built

    def __repr__(self) -> str:
        g = self.geometry
        return (f"WindowKernel({self.mode} {self.dtype} {g.kernel[0]}x{g.kernel[1]} over "
                f"{g.height}x{g.width} -> {g.out_height}x{g.out_width})")

    def describe(self) -> str:
        """One line for a printed plan."""
        from tensoralg.codegen.epilogue import describe
        from tensoralg.codegen.window import deinterleaves, pads_rows, separates_rows

        g = self.geometry
        reads = "input rows copied once into padded rows" if pads_rows(
            g, self.mode, self.groups, self.lanes) else \
            "row by row, each input row's reduction once" if separates_rows(
                g, self.mode, self.groups, self.lanes) else \
            "masked loads" if g.strides[1] == 1 else \
            "input rows split once into even and odd cells" if deinterleaves(
                g, self.mode, self.groups, self.lanes) else \
            "paired masked loads, even cells shuffled out" if g.strides[1] == 2 else \
            "masked gathers"
        extra = f", {describe(self.relu)}" if self.relu else ""
        mode, groups = self.mode, self.groups
        if groups.inputs > 1 or groups.outputs > 1:
            mode = (f"grouped ({groups.inputs} -> {groups.outputs} channels a group, "
                    f"{groups.block} output planes a block)")
        return (f"generated {mode} window kernel ({g.kernel[0]}x{g.kernel[1]}, "
                f"{self.lanes} output columns per vector, {reads}, padding masked{extra})")

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The result for ``x`` (N, C, H, W), into ``out`` when given."""
        g = self.geometry
        if out is None:
            out = np.empty((np.shape(x)[0], self.out_channels, g.out_height, g.out_width),
                           self.dtype)
        return self.bind(x, out)()

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundWindow":
        """A call reading ``x`` (N, C, H, W) and writing ``out`` (N, M, OH, OW), both
        C-contiguous and fixed (``x`` may be swapped with ``rebind("x", ...)``)."""
        g = self.geometry
        check_array(self, x, "input", self.dtype, (None, self.channels, g.height, g.width), "N")
        check_array(self, out, "output", self.dtype,
                    (x.shape[0], self.out_channels, g.out_height, g.out_width), "N", True)
        return BoundWindow(self, x, out)


class BoundWindow(RangeCall):
    """A :class:`WindowKernel` call with its buffers fixed, split into ranges of output plane
    blocks (one plane each but for grouped kernels)."""

    def __init__(self, kernel: WindowKernel, x: np.ndarray, out: np.ndarray) -> None:
        self.kernel, self.input, self.out = kernel, x, out
        self.function, self.what = kernel.function, repr(kernel)
        planes = x.shape[0] * kernel.out_channels // kernel.groups.block
        parts = 1
        if kernel.threads is not None:
            work = planes * kernel.geometry.positions * kernel.geometry.taps * \
                kernel.groups.block * kernel.groups.inputs
            parts = kernel.threads.dense_parts(work, planes)
        bounds = [planes * part // parts for part in range(parts + 1)]
        w, b = kernel.weight.ctypes.data, kernel.bias.ctypes.data
        self.calls = [[x.ctypes.data, out.ctypes.data, w, b, lo, hi]
                      for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[x.ctypes.data, out.ctypes.data, w, b, 0, 0]]
        self.threads = kernel.threads if len(self.calls) > 1 else None


__all__ = ["WindowKernel", "BoundWindow"]
