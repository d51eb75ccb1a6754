"""Greedy non-maximum suppression of boxes, as one compiled loop.

A detection model keeps, of its candidate boxes taken best first, each box that no box kept
before it overlaps by an intersection over union above a threshold (ONNX
``NonMaxSuppression``). The walk is sequential: each candidate is tested against the boxes
kept so far, and stops at the first that suppresses it. In NumPy each kept box must instead
be tested against every later candidate (or every pair of boxes whose x ranges overlap): an
SSD's 2.7e4 candidates over 90 classes took 0.2-1 s that way. This loop is written in the
statement IR and compiled by tensoralg's own code generator (like ``runtime/canonical.py``);
the kept boxes are listed by where they start along x, so a candidate meets only those that
can reach it (``suppression_function``).

The arithmetic is ONNX's reference's, in the boxes' dtype: widths and heights of the
intersection as ``min - max`` of the edges, areas as width times height, the union as
``area + area - intersection``; boxes of no area, and boxes that only touch, never suppress.
"""
from __future__ import annotations

import math

import numpy as np

from tensoralg.codegen import DiskCache, HelperKernels
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F32, F64, I64, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

_VALUES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64}
MAX_CELLS = 1 << 16       # cells of the x axis the kept boxes are listed under, at most


def suppression_function(value: Scalar) -> Function:
    """The IR of ``suppress(count, x_min, x_max, y_min, y_max, threshold, most, kept,
    status*, low, scale, cells, head, next)``: boxes ``0..count-1`` (best first, their edges
    in four arrays) walked in order, each kept unless a kept one overlaps it above
    ``threshold``, until ``most`` are kept; their positions into ``kept`` (int64, ``count``
    long), their number into ``status[0]``.

    A kept box is listed under the cell of its left edge (``cells`` cells of the x axis from
    ``low``, ``scale`` cells a unit; ``head`` holds each cell's latest box, -1 for none, and
    ``next`` the box listed before it): a box that overlaps a candidate starts less than the
    widest kept box's width left of the candidate and before its right edge, so only the
    cells over that range are searched. torchvision's ``batched_nms`` moves each class to a
    region of its own, and an SSD's 2.7e4 candidates then meet a few dozen kept boxes each,
    not the 5.8e3 kept in all (160 ms -> a few).

    >>> "threshold" in str(suppression_function(F32))
    True
    """
    count, most, cells = Var("count", I64), Var("most", I64), Var("cells", I64)
    edges = [Var(name, Ptr(value)) for name in ("x_min", "x_max", "y_min", "y_max")]
    x_min, x_max, y_min, y_max = edges
    threshold, low, scale = Var("threshold", value), Var("low", value), Var("scale", value)
    kept, status = Var("kept", Ptr(I64)), Var("status", Ptr(I64))
    head, after = Var("head", Ptr(I64)), Var("next", Ptr(I64))
    r, q, found, alive, c, last, k = (Var(name, I64) for name in
                                      ("r", "q", "found", "alive", "c", "last", "k"))
    width, height, inter, union = (Var(name, value) for name in ("w", "h", "inter", "union"))
    area_r, area_q, widest = Var("area_r", value), Var("area_q", value), Var("widest", value)
    zero = b.const(0, value)

    def area(p: Var) -> object:
        return b.mul(b.sub(b.load(x_max, p), b.load(x_min, p)),
                     b.sub(b.load(y_max, p), b.load(y_min, p)))

    def cell(x: object) -> object:
        # clamped into [0, cells - 1]; NaN (every comparison false) lands in cell 0
        t = b.mul(b.sub(x, low), scale)
        top = b.cast(b.sub(cells, 1), value)
        return b.cast(b.select(b.ge(t, zero), b.select(b.lt(t, top), t, top), zero), I64)

    overlaps = b.land(b.land(b.land(b.gt(width, zero), b.gt(height, zero)),
                             b.land(b.gt(inter, zero), b.gt(area_r, zero))),
                      b.land(b.land(b.gt(area_q, zero), b.gt(union, zero)),
                             b.gt(b.div(inter, union), threshold)))
    test = [
        b.assign(q, b.load(kept, k)),
        b.assign(width, b.sub(b.minimum(b.load(x_max, r), b.load(x_max, q)),
                              b.maximum(b.load(x_min, r), b.load(x_min, q)))),
        b.assign(height, b.sub(b.minimum(b.load(y_max, r), b.load(y_max, q)),
                               b.maximum(b.load(y_min, r), b.load(y_min, q)))),
        b.assign(inter, b.mul(width, height)),
        b.assign(area_q, area(q)),
        b.assign(union, b.sub(b.add(area_r, area_q), inter)),
        b.if_(overlaps, b.assign(alive, 0)),
        b.assign(k, b.load(after, k))]
    search = [
        b.assign(c, cell(b.sub(b.load(x_min, r), widest))),
        b.assign(last, cell(b.load(x_max, r))),
        b.while_(b.land(b.le(c, last), b.ne(alive, 0)),
                 b.assign(k, b.load(head, c)),
                 b.while_(b.land(b.ge(k, 0), b.ne(alive, 0)), *test),
                 b.assign(c, b.add(c, 1)))]
    keep = [b.store(kept, found, r),
            b.assign(c, cell(b.load(x_min, r))),
            b.store(after, found, b.load(head, c)),
            b.store(head, c, found),
            b.assign(widest, b.maximum(widest, b.sub(b.load(x_max, r), b.load(x_min, r)))),
            b.assign(found, b.add(found, 1))]
    walk = b.while_(b.land(b.lt(r, count), b.lt(found, most)),
                    b.assign(area_r, area(r)),
                    b.assign(alive, 1),
                    *search,
                    b.if_(b.ne(alive, 0), keep),
                    b.assign(r, b.add(r, 1)))
    params = [b.param(count, "count"), *[b.param(e, e.name) for e in edges],
              b.param(threshold, "threshold"), b.param(most, "most"),
              b.param(kept, "kept", True), b.param(status, "status", True),
              b.param(low, "low"), b.param(scale, "scale"), b.param(cells, "cells"),
              b.param(head, "head", True), b.param(after, "next", True)]
    declared = [b.declare(v, 0) for v in (r, q, found, alive, c, last, k)] + \
        [b.declare(v, zero) for v in (width, height, inter, union, area_r, area_q, widest)]
    return b.function(f"ta_suppress_{value.value}", params, *declared,
                      b.for_(c, 0, cells, b.store(head, c, b.i64(-1))), walk,
                      b.store(status, 0, found))


class BoxSuppressor:
    """Builds the suppression kernel once per value dtype and runs it.

    >>> import tempfile
    >>> s = BoxSuppressor(DiskCache(tempfile.mkdtemp()))
    >>> left, right = np.array([0.0, 0.1, 5.0]), np.array([1.0, 1.1, 6.0])
    >>> s.kept(left, right, left, right, 0.5, 10).tolist()   # the second overlaps the first
    [0, 2]
    """

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(lambda value: suppression_function(_VALUES[value]), disk)

    @staticmethod
    def takes(dtype: np.dtype) -> bool:
        """Whether boxes of ``dtype`` are walked here (float32 and float64)."""
        return np.dtype(dtype) in _VALUES

    def kept(self, x_min: np.ndarray, x_max: np.ndarray, y_min: np.ndarray,
             y_max: np.ndarray, threshold: float, most: int) -> np.ndarray:
        """The positions (int64, in order) of the boxes kept, the boxes given best first by
        their four edges (one dtype ``takes`` accepts)."""
        edges = [np.ascontiguousarray(e) for e in (x_min, x_max, y_min, y_max)]
        dtype = edges[0].dtype
        count = edges[0].shape[0]
        if any(e.dtype != dtype or e.shape != (count,) for e in edges):
            raise ValueError("the four edges must be vectors of one length and dtype")
        kept = np.empty(max(count, 1), np.int64)
        after = np.empty(max(count, 1), np.int64)
        status = np.zeros(1, np.int64)
        # cells of the x axis over the boxes' finite left and right edges, about one a box
        finite = np.concatenate([edges[0], edges[1]])
        finite = finite[np.isfinite(finite)]
        low = float(finite.min()) if finite.size else 0.0
        span = float(finite.max()) - low if finite.size else 0.0
        cells = int(min(max(count, 1), MAX_CELLS))
        scale = cells / span if span > 0 and math.isfinite(cells / span) else 0.0
        head = np.empty(cells, np.int64)
        kernel = self.kernels.get(dtype)
        (kernel.call or kernel.function)(
            count, *map(data_address, edges), dtype.type(threshold).item(),
            max(int(most), 0), data_address(kept), data_address(status),
            dtype.type(low).item(), dtype.type(scale).item(), cells, data_address(head),
            data_address(after))
        return kept[:int(status[0])].copy()


__all__ = ["BoxSuppressor", "suppression_function"]
