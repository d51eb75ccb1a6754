"""The ``k`` largest (or smallest) values of every row along one axis, and their positions,
compiled: ONNX's TopK, k-max pooling (deepctr's CCPM); and a row's largest or smallest value
alone (ReduceMax, ReduceMin: ``extreme_kernel``).

Each row keeps its best ``k`` in the output itself, in order, and each value of the row is
inserted where it belongs, moving the worse ones down: ``O(n k)`` for a row of ``n`` values,
one pass over the row, which for the short rows and small ``k`` of a model beats sorting every
row (NumPy's stable ``argsort`` of a CCPM layer's 256 x 32 rows of 26 took most of the model's
time). Larger ``k`` go to NumPy (``MAX_K``).

Order: the best first; equal values by position (the earlier first), as ONNX specifies; a NaN
counts as worse than every number, whichever end is asked for, so NaNs come last in position
order (as NumPy's stable sort of ``-x`` or ``x`` puts them).

All reads and writes are in bounds for the sizes given: row ``(o, i)`` reads
``x[(o * n + j) * inner + i]`` for ``j < n`` and writes ``out[(o * k + t) * inner + i]`` for
``t < k``; the insertion reads the slot above ``t`` only while ``t > 0``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensoralg.codegen import CompiledKernel, DiskCache, HelperKernels
from tensoralg.errors import ShapeError
from tensoralg.ir import build as b
from tensoralg.ir.nodes import BOOL, F32, F64, I32, I64, Expr, Function, Ptr, Scalar, Var
from tensoralg.runtime.args import data_address

MAX_K = 64
# the value dtypes these kernels compile for, and their IR types
VALUE_TYPES = {np.dtype(np.float32): F32, np.dtype(np.float64): F64,
               np.dtype(np.int32): I32, np.dtype(np.int64): I64}


def _better(a: Expr, b_: Expr, largest: bool, floating: bool) -> Expr:
    """Whether value ``a`` ranks before value ``b_`` (strictly: an equal value does not)."""
    beats = b.gt(a, b_) if largest else b.lt(a, b_)
    if not floating:
        return beats
    # a number beats a NaN; a NaN beats nothing (every comparison with it is false)
    return b.lor(beats, b.land(b.ne(b_, b_), b.eq(a, a)))


def top_k_kernel(value: Scalar, largest: bool) -> Function:
    """The IR of ``top_k(x, values*, indices*, outer, n, inner, k)`` for rows of ``value``s:
    for every ``o < outer`` and ``i < inner``, the best ``k`` (``k >= 1``) of the ``n`` values
    ``x[(o * n + j) * inner + i]``, into ``values[(o * k + t) * inner + i]`` and their ``j``
    into ``indices`` (int64)."""
    x, values = Var("x", Ptr(value)), Var("values", Ptr(value))
    indices = Var("indices", Ptr(I64))
    outer, n, inner, k = (Var(name, I64) for name in ("outer", "n", "inner", "k"))
    o, i, j, t, count = (Var(name, I64) for name in ("o", "i", "j", "t", "count"))
    source, target, above = (Var(name, I64) for name in ("source", "target", "above"))
    v, prior = Var("v", value), Var("prior", value)
    moving = Var("moving", BOOL)
    floating = value in (F32, F64)

    def slot(position: Expr) -> Expr:
        return b.add(target, b.mul(position, inner))

    insert = [
        # the slot the value may take: the next free one, or the last (whose value it beats)
        b.declare(t, b.select(b.lt(count, k), count, b.sub(k, 1))),
        b.assign(count, b.minimum(b.add(count, 1), k)),
        b.declare(moving, b.gt(t, 0)),
        b.while_(moving,
                 b.declare(above, slot(b.sub(t, 1))),
                 b.declare(prior, b.load(values, above)),
                 b.if_(_better(v, prior, largest, floating),
                       [b.store(values, slot(t), prior),
                        b.store(indices, slot(t), b.load(indices, above)),
                        b.assign(t, b.sub(t, 1)),
                        b.assign(moving, b.gt(t, 0))],
                       [b.assign(moving, b.const(False, BOOL))])),
        b.store(values, slot(t), v),
        b.store(indices, slot(t), j),
    ]
    body = [
        b.for_(o, 0, outer,
               b.for_(i, 0, inner,
                      b.declare(source, b.add(b.mul(b.mul(o, n), inner), i)),
                      b.declare(target, b.add(b.mul(b.mul(o, k), inner), i)),
                      b.declare(count, 0),
                      b.for_(j, 0, n,
                             b.declare(v, b.load(x, b.add(source, b.mul(j, inner)))),
                             b.if_(b.lor(b.lt(count, k),
                                         _better(v, b.load(values, slot(b.sub(k, 1))),
                                                 largest, floating)),
                                   insert)))),
    ]
    params = [b.param(x, "x"), b.param(values, "values", True),
              b.param(indices, "indices", True), b.param(outer, "outer"), b.param(n, "n"),
              b.param(inner, "inner"), b.param(k, "k")]
    kind = "largest" if largest else "smallest"
    return b.function(f"ta_top_k_{kind}_{value.value}", params, *body)


def extreme_kernel(value: Scalar, largest: bool) -> Function:
    """The IR of ``extreme(x, out*, outer, n, inner)`` for rows of ``value``s: for every
    ``o < outer`` and ``i < inner``, the largest (``largest``) or smallest of the ``n >= 1``
    values ``x[(o * n + j) * inner + i]`` into ``out[o * inner + i]``; a NaN wins over every
    number (as NumPy's ``max`` and ``min`` answer).

    One pass over each row, for ReduceMax and ReduceMin (run by ``movement.extreme_call``; a
    tree of elementwise ``max`` kernels over halves of the row cost ``log2 n`` calls: 60 µs
    for a 1 x 221 row, 2026-12-06). Every comparison is the IR's ``max``/``min``, which give
    NaN when either operand is NaN, and which LLVM vectorises as a reduction (the select of a
    compare it replaced was a chain of dependent branches: 1.7 ns a value, now 0.09 on 2^20
    float32 values, 2026-12-07). Rows with an inner stride update ``inner`` bests at once, one
    row of them at a time, the innermost loop in unit stride."""
    x, out = Var("x", Ptr(value)), Var("out", Ptr(value))
    outer, n, inner = (Var(name, I64) for name in ("outer", "n", "inner"))
    o, i, j, source = (Var(name, I64) for name in ("o", "i", "j", "source"))
    best = Var("best", value)

    def kept(best: Expr, v: Expr) -> Expr:
        # the IR's max/min give NaN when either operand is NaN (ir/nodes.py): a NaN wins
        return b.maximum(best, v) if largest else b.minimum(best, v)

    def at(position: Expr) -> Expr:
        return b.load(x, b.add(source, position))

    # Rows in unit stride (inner == 1): one running best a row, a max/min reduction LLVM
    # vectorises.
    rows = b.for_(o, 0, outer,
                  b.declare(source, b.mul(o, n)),
                  b.declare(best, at(b.const(0, I64))),
                  b.for_(j, 1, n, b.assign(best, kept(best, at(j)))),
                  b.store(out, o, best))
    # Otherwise the ``inner`` bests of a block are kept in ``out`` and updated one row of the
    # block at a time, the innermost loop in unit stride over ``i``.
    first = b.mul(o, inner)
    blocks = b.for_(o, 0, outer,
                    b.for_(i, 0, inner,
                           b.store(out, b.add(first, i),
                                   b.load(x, b.add(b.mul(b.mul(o, n), inner), i)))),
                    b.for_(j, 1, n,
                           b.declare(source, b.mul(b.add(b.mul(o, n), j), inner)),
                           b.for_(i, 0, inner,
                                  b.store(out, b.add(first, i),
                                          kept(b.load(out, b.add(first, i)),
                                               b.load(x, b.add(source, i)))))))
    body = [b.if_(b.eq(inner, 1), rows, blocks)]
    params = [b.param(x, "x"), b.param(out, "out", True), b.param(outer, "outer"),
              b.param(n, "n"), b.param(inner, "inner")]
    kind = "max" if largest else "min"
    return b.function(f"ta_row_{kind}_{value.value}", params, *body)


def _extremes(x: Var, n: Var, low: Var, high: Var) -> list:
    """Statements declaring ``low`` and ``high`` as the smallest and the largest of the
    ``n >= 1`` values ``x[0..n)``, in one pass (the IR's ``min``/``max``: NaN in both where
    one is among the values)."""
    j, v = Var("j", I64), Var("v", low.dtype)
    return [b.declare(low, b.load(x, 0)),
            b.declare(high, b.load(x, 0)),
            b.for_(j, 1, n,
                   b.declare(v, b.load(x, j)),
                   b.assign(low, b.minimum(low, v)),
                   b.assign(high, b.maximum(high, v)))]


def range_kernel(value: Scalar) -> Function:
    """The IR of ``value_range(x, out*, n)``: the smallest and the largest of the ``n >= 1``
    values ``x[0..n)`` into ``out[0]`` and ``out[1]``, in one pass (the IR's ``min``/``max``:
    NaN in both where one is among the values). Both extremes of a tensor, as onnxruntime's
    DynamicQuantizeLinear takes them, for the cost of one read (two ``extreme_kernel`` passes
    read it twice)."""
    x, out, n = Var("x", Ptr(value)), Var("out", Ptr(value)), Var("n", I64)
    low, high = Var("low", value), Var("high", value)
    body = [
        *_extremes(x, n, low, high),
        b.store(out, 0, low),
        b.store(out, 1, high),
    ]
    params = [b.param(x, "x"), b.param(out, "out", True), b.param(n, "n")]
    return b.function(f"ta_value_range_{value.value}", params, *body)


def quantize_parameters_kernel() -> Function:
    """The IR of ``quantize_parameters(x, scale*, zero*, n, nan*)``: DynamicQuantizeLinear's
    uint8 scale and zero point of the ``n >= 1`` float32 values ``x[0..n)``, as
    ``onnx/ops/quantize.dynamic_parameters`` computes them (the range widened to hold 0,
    ``scale = (max - min) / 255`` or 1 when the range is empty, ``zero = round(clamp(0 -
    min / scale, 0, 255))`` half to even, all in float32), the zero point as a float32;
    ``nan[0]`` is 1 (and nothing written) when a value is NaN, else 0. One pass over ``x``
    and a few scalar operations: a plan's compiled sequence runs it as one call."""
    x, scale, zero = Var("x", Ptr(F32)), Var("scale", Ptr(F32)), Var("zero", Ptr(F32))
    nan, n = Var("nan", Ptr(I64)), Var("n", I64)
    low, high = Var("low", F32), Var("high", F32)
    step, initial = Var("step", F32), Var("initial", F32)
    nothing = b.const(0.0, F32)
    body = [
        *_extremes(x, n, low, high),
        b.assign(low, b.minimum(low, nothing)),
        b.assign(high, b.maximum(high, nothing)),
        b.if_(b.lor(b.ne(low, low), b.ne(high, high)),
              b.store(nan, 0, b.i64(1)),
              [b.declare(step, b.select(b.eq(high, low), b.const(1.0, F32),
                                        b.div(b.sub(high, low), b.const(255.0, F32)))),
               b.declare(initial, b.sub(nothing, b.div(low, step))),
               # a NaN start (a range below float32's smallest step) counts as zero, as in
               # dynamic_parameters
               b.assign(initial, b.select(b.ne(initial, initial), nothing, initial)),
               b.store(scale, 0, step),
               b.store(zero, 0, b.unary("round", b.minimum(b.maximum(initial, nothing),
                                                           b.const(255.0, F32)))),
               b.store(nan, 0, b.i64(0))]),
    ]
    params = [b.param(x, "x"), b.param(scale, "scale", True), b.param(zero, "zero", True),
              b.param(n, "n"), b.param(nan, "nan", True)]
    return b.function("ta_quantize_parameters", params, *body)


def bag_max_kernel(value: Scalar) -> Function:
    """The IR of ``bag_max(table, crd, pos, vals, empty, out*, bags, dim)``: for every bag
    ``b < bags``, ``out[b, :]`` = the elementwise largest of the table rows ``crd[p]`` for
    ``pos[b] <= p < pos[b + 1]`` and ``vals[p] != 0`` (rows of ``dim`` values; a NaN wins, as
    in ``extreme_kernel``), or ``empty[0]`` everywhere for a bag of none. ``crd`` and ``pos``
    are int64 and checked already (``movement.ids_call``, the bag step's check kernel): the max
    of ``nn.EmbeddingBag`` bags (``onnx/plan/loop_bag_steps.py``; ``vals`` leaves out padding
    ids), one pass over each member row."""
    table, out, empty = Var("table", Ptr(value)), Var("out", Ptr(value)), Var("empty", Ptr(value))
    vals = Var("vals", Ptr(value))
    crd, pos = Var("crd", Ptr(I64)), Var("pos", Ptr(I64))
    bags, dim = Var("bags", I64), Var("dim", I64)
    bag, i, p, base, row, found = (Var(name, I64) for name in
                                   ("bag", "i", "p", "base", "row", "found"))
    best, v = Var("best", value), Var("v", value)
    wins = b.gt(v, best)
    if value in (F32, F64):       # a NaN, once met, stays
        wins = b.lor(wins, b.ne(v, v))
        keep = b.select(b.ne(best, best), best, b.select(wins, v, best))
    else:
        keep = b.select(wins, v, best)
    zero = b.const(0, value)
    body = [
        b.for_(bag, 0, bags,
               b.declare(base, b.mul(bag, dim)),
               b.declare(found, 0),
               b.for_(p, b.load(pos, bag), b.load(pos, b.add(bag, 1)),
                      b.if_(b.ne(b.load(vals, p), zero), [
                          b.declare(row, b.mul(b.load(crd, p), dim)),
                          b.if_(b.eq(found, 0),
                                b.for_(i, 0, dim, b.store(out, b.add(base, i),
                                                          b.load(table, b.add(row, i)))),
                                b.for_(i, 0, dim,
                                       b.declare(v, b.load(table, b.add(row, i))),
                                       b.declare(best, b.load(out, b.add(base, i))),
                                       b.store(out, b.add(base, i), keep))),
                          b.assign(found, 1)])),
               b.if_(b.eq(found, 0),
                     b.for_(i, 0, dim, b.store(out, b.add(base, i), b.load(empty, 0))))),
    ]
    params = [b.param(table, "table"), b.param(crd, "crd"), b.param(pos, "pos"),
              b.param(vals, "vals"), b.param(empty, "empty"), b.param(out, "out", True),
              b.param(bags, "bags"), b.param(dim, "dim")]
    return b.function(f"ta_bag_max_{value.value}", params, *body)


def bag_keep_kernel(value: Scalar, weighted: bool) -> Function:
    """The IR of ``bag_keep(ids, weights, vals*, members, padding, shift)``: ``vals[p]`` = 0
    where the member's id (moved by ``shift`` when negative) is the padding id, else
    ``weights[p]`` (``weighted``) or 1: the values of a bag matrix with ``padding_idx``."""
    ids, weights, vals = Var("ids", Ptr(I64)), Var("weights", Ptr(value)), Var("vals", Ptr(value))
    members, padding, shift = Var("members", I64), Var("padding", I64), Var("shift", I64)
    p, raw = Var("p", I64), Var("raw", I64)
    kept = b.load(weights, p) if weighted else b.const(1, value)
    moved = b.select(b.lt(raw, 0), b.add(raw, shift), raw)
    body = [b.for_(p, 0, members,
                   b.declare(raw, b.load(ids, p)),
                   b.store(vals, p, b.select(b.ne(moved, padding), kept, b.const(0, value))))]
    params = [b.param(ids, "ids"), b.param(weights, "weights"), b.param(vals, "vals", True),
              b.param(members, "members"), b.param(padding, "padding"), b.param(shift, "shift")]
    return b.function(f"ta_bag_keep_{value.value}_{'w' if weighted else 'ones'}", params, *body)


class RowSelector:
    """Builds the TopK kernels once per value dtype and end (through the on-disk kernel cache)
    and runs them."""

    def __init__(self, disk: DiskCache | None = None) -> None:
        self.kernels = HelperKernels(
            lambda dtype, largest: top_k_kernel(VALUE_TYPES[dtype], largest), disk)

    def kernel(self, dtype: np.dtype, largest: bool) -> CompiledKernel:
        return self.kernels.get(np.dtype(dtype), bool(largest))

    @staticmethod
    def compiles(dtype: Any, count: int) -> bool:
        """Whether ``top_k`` runs compiled for these values and ``k`` (else NumPy should)."""
        return np.dtype(dtype) in VALUE_TYPES and count <= MAX_K

    def top_k(self, x: np.ndarray, count: int, axis: int, largest: bool
              ) -> tuple[np.ndarray, np.ndarray]:
        """The best ``count`` values of ``x`` along ``axis`` and their positions (int64).

        >>> values, where = RowSelector().top_k(np.array([[3.0, 1.0, 3.0, 7.0]]), 3, 1, True)
        >>> values.tolist(), where.tolist()
        ([[7.0, 3.0, 3.0]], [[3, 0, 2]])
        """
        x = np.asarray(x)
        if x.ndim:                   # (NumPy makes a 0-d array 1-d here)
            x = np.ascontiguousarray(x)
        if not self.compiles(x.dtype, count):
            raise ShapeError(f"top_k: {x.dtype} values and k = {count} run in NumPy "
                             f"(compiled: {', '.join(map(str, VALUE_TYPES))}, k <= {MAX_K})")
        if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
            raise ShapeError(f"top_k: axis {axis} is not an axis of an array of shape "
                             f"{x.shape}")
        axis %= x.ndim
        length = x.shape[axis]
        if not 0 <= count <= length:
            raise ShapeError(f"top_k: k = {count} must be within [0, {length}]")
        shape = x.shape[:axis] + (count,) + x.shape[axis + 1:]
        values = np.empty(shape, x.dtype)
        indices = np.empty(shape, np.int64)
        if values.size:
            outer, inner = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1:])
            self.kernel(x.dtype, largest).function(
                data_address(x), data_address(values), data_address(indices), outer, length,
                inner, count)
        return values, indices


__all__ = ["MAX_K", "VALUE_TYPES", "RowSelector", "extreme_kernel", "top_k_kernel"]
