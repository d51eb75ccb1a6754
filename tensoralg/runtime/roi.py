"""Regions of interest pooled by bilinear sampling (ONNX ``RoiAlign``), as one compiled loop.

Each region is cut in ``PH x PW`` bins; each bin averages (or takes the largest of) ``GY x GX``
samples, and each sample interpolates the four pixels around it. Where the samples lie depends
only on the region and the axis, so the caller computes, per region, the rows above and below
each sample along y with their weights, and the columns along x (``RoiSamples``), and the
kernel runs over regions, channels, bins and samples reading four pixels a sample. In NumPy the
same work gathered every corner of every sample of every channel into temporaries: 190 ms for
a Faster R-CNN's 150 regions of 256 channels at 7 x 7 bins of 2 x 2 samples, where this loop
takes a few (AMD EPYC VM, 2026-12-06). The kernel is written in the statement IR and compiled
by tensoralg's own code generator, like ``runtime/canonical.py``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F32, F64, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

_VALUES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64}


class RoiSamples(NamedTuple):
    """Where one axis samples every region: the pixel below and above each sample
    (``low``/``high``, int64, inside the axis) and their weights, each of shape (regions,
    bins, samples a bin); a sample outside the image has weight 0 on both."""

    low: np.ndarray
    high: np.ndarray
    low_weight: np.ndarray
    high_weight: np.ndarray


def pooling_function(value: Scalar, largest: bool) -> Function:
    """The IR of ``pool(regions, channels, height, width, bins_y, bins_x, grid_y, grid_x,
    batch, y_low, y_high, y_wlow, y_whigh, x_low, x_high, x_wlow, x_whigh, x, out, count)``:
    ``out(r, c, py, px)``, over the samples ``(sy, sx)`` of bin ``(py, px)`` of region ``r``
    in image ``batch[r]`` of ``x`` (N, C, H, W): the sum of ``wy * wx * x[y, x]`` over the
    four corners, divided by ``count`` (``largest``: the largest corner term of any
    sample).

    >>> "y_whigh" in str(pooling_function(F32, False))
    True
    """
    sizes = [Var(name, I64) for name in ("regions", "channels", "height", "width", "bins_y",
                                         "bins_x", "grid_y", "grid_x")]
    regions, channels, height, width, bins_y, bins_x, grid_y, grid_x = sizes
    batch = Var("batch", Ptr(I64))
    along_y = [Var(name, Ptr(kind)) for name, kind in (("y_low", I64), ("y_high", I64),
                                                        ("y_wlow", value), ("y_whigh", value))]
    along_x = [Var(name, Ptr(kind)) for name, kind in (("x_low", I64), ("x_high", I64),
                                                        ("x_wlow", value), ("x_whigh", value))]
    x, out, count = Var("x", Ptr(value)), Var("out", Ptr(value)), Var("count", value)
    r, c, py, px, sy, sx = (Var(name, I64) for name in ("r", "c", "py", "px", "sy", "sx"))
    plane, at_y, at_x = Var("plane", I64), Var("at_y", I64), Var("at_x", I64)
    acc = Var("acc", value)
    first = Var("first", I64)
    terms = []
    for row, row_weight in ((0, 2), (1, 3)):
        for col, col_weight in ((0, 2), (1, 3)):
            weight = b.mul(b.load(along_y[row_weight], at_y), b.load(along_x[col_weight], at_x))
            pixel = b.add(plane, b.add(b.mul(b.load(along_y[row], at_y), width),
                                       b.load(along_x[col], at_x)))
            terms.append(b.mul(weight, b.load(x, pixel)))
    if largest:
        best = b.maximum(b.maximum(terms[0], terms[1]), b.maximum(terms[2], terms[3]))
        # the first sample sets the value, later ones can only raise it (ONNX's reference)
        update = [b.assign(acc, b.select(b.ne(first, 0), best, b.maximum(acc, best))),
                  b.assign(first, 0)]
    else:
        update = [b.assign(acc, b.add(acc, b.add(b.add(terms[0], terms[1]),
                                                 b.add(terms[2], terms[3]))))]
    samples = b.for_(sy, 0, grid_y,
                     b.assign(at_y, b.add(b.mul(b.add(b.mul(r, bins_y), py), grid_y), sy)),
                     b.for_(sx, 0, grid_x,
                            b.assign(at_x, b.add(b.mul(b.add(b.mul(r, bins_x), px), grid_x),
                                                 sx)),
                            *update))
    position = b.add(b.mul(b.add(b.mul(b.add(b.mul(r, channels), c), bins_y), py), bins_x),
                     px)
    result = acc if largest else b.div(acc, count)
    body = b.for_(
        r, 0, regions,
        b.for_(c, 0, channels,
               b.assign(plane, b.mul(b.add(b.mul(b.load(batch, r), channels), c),
                                     b.mul(height, width))),
               b.for_(py, 0, bins_y,
                      b.for_(px, 0, bins_x,
                             b.assign(acc, b.const(0, value)), b.assign(first, 1),
                             samples,
                             b.store(out, position, result)))))
    params = [*[b.param(v, v.name) for v in sizes], b.param(batch, "batch"),
              *[b.param(v, v.name) for v in along_y + along_x], b.param(x, "x"),
              b.param(out, "out", True), b.param(count, "count")]
    declared = [b.declare(v, 0) for v in (plane, at_y, at_x, first)] + \
        [b.declare(acc, b.const(0, value))]
    return b.function(f"ta_roi_pool_{value.value}_{'max' if largest else 'avg'}", params,
                      *declared, body)


class RegionPooler:
    """Builds the pooling kernels once (per value dtype and mode) and runs them.

    >>> import tempfile
    >>> pooler = RegionPooler(DiskCache(tempfile.mkdtemp()))
    >>> one = RoiSamples(np.zeros((1, 1, 1), np.int64), np.ones((1, 1, 1), np.int64),
    ...                  np.full((1, 1, 1), 0.5), np.full((1, 1, 1), 0.5))
    >>> image = np.arange(4.0).reshape(1, 1, 2, 2)
    >>> pooler.pool(image, np.zeros(1, np.int64), one, one, largest=False).tolist()
    [[[[1.5]]]]
    """

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(
            lambda value, largest: pooling_function(_VALUES[value], largest), disk)

    @staticmethod
    def takes(dtype: np.dtype) -> bool:
        """Whether images of ``dtype`` are pooled here (float32 and float64)."""
        return np.dtype(dtype) in _VALUES

    def pool(self, x: np.ndarray, batch: np.ndarray, along_y: RoiSamples,
             along_x: RoiSamples, largest: bool) -> np.ndarray:
        """``(regions, channels, bins_y, bins_x)`` pooled from ``x`` (N, C, H, W, a dtype
        ``takes`` accepts) for regions of images ``batch`` sampled at ``along_y`` and
        ``along_x``. Every index is checked to lie inside ``x`` first (ValueError)."""
        x = np.ascontiguousarray(x)
        n, channels, height, width = x.shape
        regions, bins_y, grid_y = along_y.low.shape
        _, bins_x, grid_x = along_x.low.shape
        batch = np.ascontiguousarray(batch, dtype=np.int64)
        for name, values, bound in (("batch", batch, n), ("y", along_y.low, height),
                                    ("y", along_y.high, height), ("x", along_x.low, width),
                                    ("x", along_x.high, width)):
            if values.size and (values.min() < 0 or values.max() >= bound):
                raise ValueError(f"a {name} index lies outside [0, {bound})")
        if batch.shape != (regions,) or along_x.low.shape[0] != regions:
            raise ValueError("one batch index and one set of samples a region")
        out = np.empty((regions, channels, bins_y, bins_x), x.dtype)
        if out.size == 0:
            return out
        arrays = [np.ascontiguousarray(a, dtype=kind) for part in (along_y, along_x)
                  for a, kind in zip(part, (np.int64, np.int64, x.dtype, x.dtype))]
        kernel = self.kernels.get(x.dtype, bool(largest))
        count = x.dtype.type(max(grid_y * grid_x, 1)).item()
        (kernel.call or kernel.function)(
            regions, channels, height, width, bins_y, bins_x, grid_y, grid_x,
            data_address(batch), *map(data_address, arrays), data_address(x),
            data_address(out), count)
        return out


__all__ = ["RegionPooler", "RoiSamples", "pooling_function"]
