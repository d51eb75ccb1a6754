"""2-D convolutions with their weights compiled in (``codegen/conv.py``), NCHW in and out.

A :class:`DirectConv` builds (or reads from the disk cache) one module per weight, geometry and
epilogue; :meth:`DirectConv.bind` fixes an input and an output buffer and returns a call that
costs one native call (or one per thread range), and that a compiled call sequence can take.

It needs AVX-512 (masked gathers and scatters, and sixteen float lanes): :func:`direct_conv`
returns None on other hosts, for batch and geometry combinations that do not fit 32-bit lane
offsets, and for weights too large to unroll, and callers keep the GEMM-based convolution.
"""
from __future__ import annotations

import ctypes
import hashlib
from typing import Any

import numpy as np

from tensoralg.codegen.build import build_llvm_module
from tensoralg.codegen.cache import DiskCache
from tensoralg.codegen.epilogue import describe as describe_activation
from tensoralg.errors import ShapeError
from tensoralg.runtime.ranges import RangeCall, check_array

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                              ctypes.c_int64)
_LIMIT32 = 2**31 - 1
_BUILT: dict[str, tuple[Any, str, Any]] = {}     # key -> (function, LLVM IR, keepalive)


class DirectConv:
    """``out = act(conv(x, weight) + bias)`` for NCHW ``x`` of a fixed image geometry, with
    ``weight`` (M, C/groups, KH, KW) compiled into the kernel; ``act`` is ReLU when ``relu``.
    With ``skip_zeros`` the zero weights are left out of the code (a pruned weight runs only its
    nonzeros); without it they are multiplied like any other.

    Build it with :func:`direct_conv`, which checks that the host and the shapes allow it.

    >>> from tensoralg.codegen.conv import ConvGeometry
    >>> g = ConvGeometry(1, 2, 2, 1, 1, 1, (2, 2), (1, 1), (1, 1), (0, 0), 1)
    >>> conv = direct_conv(g, np.ones((1, 1, 2, 2), np.float32), None)
    >>> conv is None or conv(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)).item() == 6.0
    True
    """

    def __init__(self, geometry: Any, weight: np.ndarray, bias: np.ndarray | None,
                 relu: Any,
                 skip_zeros: bool, lanes: int, cache: DiskCache | None = None,
                 threads: Any = None) -> None:
        from tensoralg.codegen.conv import ENTRY, conv_module, unrolled_fmas

        self.geometry, self.dtype, self.lanes = geometry, weight.dtype, lanes
        self.relu, self.skip_zeros, self.threads = relu, skip_zeros, threads
        self.weights = unrolled_fmas(weight, skip_zeros)
        self.bias = None if bias is None else np.asarray(bias, weight.dtype)
        digest = hashlib.sha256(weight.tobytes() + (b"" if bias is None else
                                                    self.bias.tobytes())).hexdigest()
        key = f"conv|{geometry}|{weight.dtype}|{relu}|{skip_zeros}|{lanes}|{digest}"
        # Built once per process: a plan per batch size asks again for the same convolution,
        # and emitting the module text alone takes ~0.2 s for a thousand weights.
        built = _BUILT.get(key)
        if built is None:
            module = conv_module(geometry, weight, self.bias, relu, skip_zeros, lanes)
            built = _BUILT[key] = build_llvm_module(module, ENTRY, _PROTOTYPE, cache=cache,
                                                    key=key)
        self.function, self.source, self._keepalive = built

    def __repr__(self) -> str:
        g = self.geometry
        act = f" + {describe_activation(self.relu)}" if self.relu else ""
        return (f"DirectConv({self.dtype} {g.channels}x{g.height}x{g.width} -> "
                f"{g.out_channels}x{g.out_height}x{g.out_width}, {g.kernel[0]}x{g.kernel[1]}"
                f"{act})")

    def describe(self) -> str:
        """One line for a printed plan."""
        from tensoralg.codegen.conv import addressing

        mode = addressing(self.geometry, self.lanes)
        parts = (["bias"] if self.bias is not None else []) + ([describe_activation(self.relu)] if self.relu else [])
        epilogue = f", {' + '.join(parts)} in registers" if parts else ""
        kept = f"{self.weights} nonzero weights" if self.skip_zeros else \
            f"{self.weights} weights"
        return (f"direct convolution, weights compiled in ({kept}; {self.lanes} output "
                f"positions per vector, {mode}{epilogue})")

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The convolution of ``x`` (N, C, H, W), into ``out`` when given."""
        g = self.geometry
        if out is None:
            out = np.empty((np.shape(x)[0] if np.ndim(x) == 4 else 0, g.out_channels,
                            g.out_height, g.out_width), self.dtype)
        return self.bind(x, out)()

    def bind(self, x: np.ndarray, out: np.ndarray) -> "BoundDirectConv":
        """A call reading ``x`` (N, C, H, W) and writing ``out`` (N, M, OH, OW), both
        C-contiguous and fixed (``x`` may be swapped with :meth:`BoundDirectConv.rebind`)."""
        g = self.geometry
        self._check(x, "input", (g.channels, g.height, g.width))
        self._check(out, "output", (g.out_channels, g.out_height, g.out_width), writeable=True)
        if out.shape[0] != x.shape[0]:
            raise ShapeError(f"{self!r}: {x.shape[0]} input images but {out.shape[0]} output")
        return BoundDirectConv(self, x, out)

    def _check(self, array: Any, what: str, shape: tuple, writeable: bool = False) -> None:
        check_array(self, array, what, self.dtype, (None, *shape), "N", writeable)


class BoundDirectConv(RangeCall):
    """A :class:`DirectConv` call with its buffers fixed; ``__call__`` runs it, ``rebind("x",
    x)`` swaps the input."""

    def __init__(self, conv: DirectConv, x: np.ndarray, out: np.ndarray) -> None:
        self.conv, self.input, self.out = conv, x, out
        self.function, self.what = conv.function, repr(conv)
        total = x.shape[0] * conv.geometry.positions
        lanes = conv.lanes
        parts = 1
        if conv.threads is not None:
            parts = conv.threads.dense_parts(total * conv.weights, total // lanes)
        vectors = -(-total // lanes)
        bounds = [min(total, vectors * part // parts * lanes) for part in range(parts + 1)]
        bounds[-1] = total
        self.calls = [[x.ctypes.data, out.ctypes.data, lo, hi]
                      for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or \
            [[x.ctypes.data, out.ctypes.data, 0, 0]]
        self.threads = conv.threads if len(self.calls) > 1 else None


def direct_conv(geometry: Any, weight: np.ndarray, bias: np.ndarray | None,
                relu: Any = False,
                skip_zeros: bool = False, cache: DiskCache | None = None,
                threads: Any = None) -> DirectConv | None:
    """A :class:`DirectConv` for ``weight`` on this host, or None where it does not apply:
    no AVX-512, a dtype other than float32/float64, more multiply-adds than a module unrolls
    (``codegen.conv.MAX_UNROLLED`` nonzeros with ``skip_zeros``, ``MAX_UNROLLED_DENSE``
    weights without), or images too large for 32-bit lane offsets."""
    from tensoralg.codegen.conv import MAX_UNROLLED, MAX_UNROLLED_DENSE, unrolled_fmas
    from tensoralg.codegen.llvm import host_has

    weight = np.asarray(weight)
    g = geometry
    limit = MAX_UNROLLED if skip_zeros else MAX_UNROLLED_DENSE
    if weight.dtype not in (np.float32, np.float64) or not host_has("avx512f") or \
            weight.shape != (g.out_channels, g.channels // g.groups, *g.kernel) or \
            unrolled_fmas(weight, skip_zeros) > limit or g.positions < 1:
        return None
    lanes = 64 // weight.dtype.itemsize
    # Lane offsets are 32-bit: a vector spans at most lanes + 1 images.
    if (lanes + 2) * max(g.image_elements(), g.out_channels * g.positions) > _LIMIT32:
        return None
    return DirectConv(geometry, weight, bias, relu, skip_zeros, lanes, cache, threads)


__all__ = ["DirectConv", "BoundDirectConv", "direct_conv"]
