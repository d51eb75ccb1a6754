"""Compiled data movement for model plans: row gathers, strided row copies, bag ids.

NumPy does these (``take``, ``concatenate``, ``copyto`` plus a range check) in 3-8 µs per call
at the sizes of a recommender model, mostly in call overhead; as kernels they join a plan's
compiled sequence of calls (``runtime/sequence.py``). They are built as IR and compiled by the
LLVM backend like every other kernel. Values are moved as same-sized integers (bit-exact).

Index checks never stop a kernel: an id outside ``[-n, n)`` reads row 0 instead (so nothing is
read out of bounds) and is counted into ``bad[0]``; the caller treats a nonzero count as an
error and reports it from its own (NumPy) path, which names the node and the value. A gather
may read float ids (a model's id column inside a float feature matrix, which the graph casts
to int64): each is truncated toward zero, as ONNX ``Cast`` does, after a check in floating
point, so that NaN, infinities and huge values count as bad instead of converting to garbage.
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from tensoralg.codegen.build import CompiledKernel, build
from tensoralg.codegen.sequence import NativeCall, Slot
from tensoralg.errors import InputError, ShapeError, TensorAlgebraError
from tensoralg.ir import build as b
from tensoralg.ir.nodes import BOOL, F32, F64, I32, I64, Function, Ptr, Scalar
from tensoralg.runtime.args import data_address

_BY_SIZE = {4: I32, 8: I64}
_INDEX = {np.dtype(np.int32): I32, np.dtype(np.int64): I64}
# Ids a gather may read: integers, or floats truncated as ONNX Cast truncates them.
_IDS = {**_INDEX, np.dtype(np.float32): F32, np.dtype(np.float64): F64}
_KERNELS: dict[tuple, CompiledKernel] = {}


def _safe_row(k: b.Var, rows: b.Var, bad: b.Var) -> list:
    """``k`` wrapped if negative, counted in ``bad`` and replaced by 0 if still outside."""
    ok = b.var(f"{k.name}_ok", I32)
    return [b.assign(k, b.select(b.lt(k, 0), b.add(k, rows), k)),
            b.declare(ok, b.select(b.land(b.ge(k, 0), b.lt(k, rows)), b.const(1, I32),
                                   b.const(0, I32))),
            b.assign(bad, b.add(bad, b.sub(b.const(1, I32), ok))),
            b.assign(k, b.select(b.eq(ok, b.const(1, I32)), k, b.i64(0)))]


def _float_row(v: b.Var, k: b.Var, rows: b.Var, bad: b.Var) -> list:
    """``k`` = the float id ``v`` truncated toward zero (ONNX Cast), wrapped if negative; an id
    whose truncation falls outside ``[-rows, rows)`` (NaN included: every comparison with it
    is false) is counted in ``bad`` and becomes row 0. The check is made in double before the
    conversion, which is undefined for values out of the integer range."""
    wide, ok = b.var(f"{v.name}_wide", F64), b.var(f"{v.name}_ok", I32)
    limit = b.cast(rows, F64)
    return [b.declare(wide, b.cast(v, F64)),
            b.declare(ok, b.select(b.land(b.gt(wide, b.sub(b.neg(limit), b.const(1, F64))),
                                          b.lt(wide, limit)),
                                   b.const(1, I32), b.const(0, I32))),
            b.assign(bad, b.add(bad, b.sub(b.const(1, I32), ok))),
            b.assign(k, b.cast(b.select(b.eq(ok, b.const(1, I32)), wide, b.const(0, F64)), I64)),
            b.assign(k, b.select(b.lt(k, 0), b.add(k, rows), k))]


def gather_function(value: Scalar, index: Scalar) -> Function:
    """``out[r*ld + j] = table[id(r)*dim + j]`` for ``r < count * width``, ``j < dim``, where
    the ids come in ``count`` runs of ``width`` consecutive ones, ``ld_ids`` apart
    (``id(g*width + w) = ids[g*ld_ids + w]``: one id a row of a matrix, or a block of columns
    of it); float ids are truncated toward zero first (ONNX Cast).

    >>> "gather_blocks" in gather_function(I32, I64).name
    True
    >>> gather_function(I32, F32).name
    'gather_blocks_i32_f32'
    """
    table, ids, out = (b.var("table", Ptr(value)), b.var("ids", Ptr(index)),
                       b.var("out", Ptr(value)))
    rows, dim, count, width, ld, ld_ids = (b.var(n, I64) for n in (
        "rows", "dim", "count", "width", "ld", "ld_ids"))
    flag = b.var("bad_out", Ptr(I64))
    g, w, j, k = b.var("g", I64), b.var("w", I64), b.var("j", I64), b.var("k", I64)
    bad = b.var("bad", I32)
    at = b.add(b.mul(g, ld_ids), w)
    if index.is_float:
        v = b.var("v", index)
        row = [b.declare(v, b.load(ids, at)), b.declare(k, b.i64(0)),
               *_float_row(v, k, rows, bad)]
    else:
        row = [b.declare(k, b.cast(b.load(ids, at), I64)), *_safe_row(k, rows, bad)]
    r = b.add(b.mul(g, width), w)
    body = [b.declare(bad, b.const(0, I32)),
            b.for_(g, 0, count, b.for_(
                w, 0, width, *row,
                b.for_(j, 0, dim, b.store(out, b.add(b.mul(r, ld), j),
                                          b.load(table, b.add(b.mul(k, dim), j)))))),
            b.store(flag, 0, b.cast(bad, I64))]
    params = [b.param(table, "table"), b.param(rows, "rows"), b.param(dim, "dim"),
              b.param(ids, "ids"), b.param(ld_ids, "ld_ids"), b.param(count, "count"),
              b.param(width, "width"), b.param(out, "out", output=True), b.param(ld, "ld"),
              b.param(flag, "bad", output=True)]
    return b.function(f"gather_blocks_{value}_{index}", params, *body)


def copy_function(value: Scalar) -> Function:
    """``dst[r*ld_dst + j] = src[r*cols + j]``: a block copied into a wider row layout."""
    src, dst = b.var("src", Ptr(value)), b.var("dst", Ptr(value))
    rows, cols, ld = (b.var(n, I64) for n in ("rows", "cols", "ld_dst"))
    r, j = b.var("r", I64), b.var("j", I64)
    body = [b.for_(r, 0, rows, b.for_(j, 0, cols, b.store(
        dst, b.add(b.mul(r, ld), j), b.load(src, b.add(b.mul(r, cols), j)))))]
    params = [b.param(src, "src"), b.param(rows, "rows"), b.param(cols, "cols"),
              b.param(dst, "dst", output=True), b.param(ld, "ld_dst")]
    return b.function(f"copy_rows_{value}", params, *body)


def block_copy_function(value: Scalar) -> Function:
    """``dst[r*ld_dst + j] = src[r*ld_src + j]``: a block of rows (a Slice of a wider array)
    into another (possibly a column block of a Concat's output).

    >>> block_copy_function(I32).name
    'block_copy_i32'
    """
    src, dst = b.var("src", Ptr(value)), b.var("dst", Ptr(value))
    rows, cols, ld_src, ld_dst = (b.var(n, I64) for n in ("rows", "cols", "ld_src", "ld_dst"))
    r, j = b.var("r", I64), b.var("j", I64)
    body = [b.for_(r, 0, rows, b.for_(j, 0, cols, b.store(
        dst, b.add(b.mul(r, ld_dst), j), b.load(src, b.add(b.mul(r, ld_src), j)))))]
    params = [b.param(src, "src"), b.param(ld_src, "ld_src"), b.param(rows, "rows"),
              b.param(cols, "cols"), b.param(dst, "dst", output=True), b.param(ld_dst, "ld_dst")]
    return b.function(f"block_copy_{value}", params, *body)


def ids_function(index: Scalar) -> Function:
    """``crd[r*size + c] = ids[r*ld + c]`` checked against ``rows`` (a bag's CSR coordinates
    from a block of the id input)."""
    ids, crd = b.var("ids", Ptr(index)), b.var("crd", Ptr(I64))
    count, size, ld, rows = (b.var(n, I64) for n in ("count", "size", "ld", "rows"))
    flag = b.var("bad_out", Ptr(I64))
    r, c, k = b.var("r", I64), b.var("c", I64), b.var("k", I64)
    bad = b.var("bad", I32)
    body = [b.declare(bad, b.const(0, I32)),
            b.for_(r, 0, count, b.for_(
                c, 0, size,
                b.declare(k, b.cast(b.load(ids, b.add(b.mul(r, ld), c)), I64)),
                *_safe_row(k, rows, bad),
                b.store(crd, b.add(b.mul(r, size), c), k))),
            b.store(flag, 0, b.cast(bad, I64))]
    params = [b.param(ids, "ids"), b.param(count, "count"), b.param(size, "size"),
              b.param(ld, "ld"), b.param(rows, "rows"), b.param(crd, "crd", output=True),
              b.param(flag, "bad", output=True)]
    return b.function(f"bag_ids_{index}", params, *body)


def cumsum_function(value: Scalar, exclusive: bool, reverse: bool) -> Function:
    """ONNX ``CumSum`` of ``x`` viewed as ``(outer, length, inner)`` along the middle axis:
    ``out[o, t, i]`` = the sum of ``x[o, s, i]`` over ``s <= t`` (``s < t`` when
    ``exclusive``; ``s >= t`` / ``s > t`` when ``reverse``), added in order, one by one.

    >>> cumsum_function(I64, False, True).name
    'cumsum_i64_reverse'
    """
    x, out = b.var("x", Ptr(value)), b.var("out", Ptr(value))
    outer, length, inner = (b.var(n, I64) for n in ("outer", "length", "inner"))
    o, i, t, at = b.var("o", I64), b.var("i", I64), b.var("t", I64), b.var("at", I64)
    acc, v = b.var("acc", value), b.var("v", value)
    position = b.sub(b.sub(length, 1), t) if reverse else t
    step = [b.declare(at, b.add(b.mul(b.add(b.mul(o, length), position), inner), i)),
            b.declare(v, b.load(x, at))]
    # Integers wrap on overflow as onnxruntime's do; floats are added in NumPy's order.
    if exclusive:
        step += [b.store(out, at, acc), b.assign(acc, b.add(acc, v))]
    else:
        step += [b.assign(acc, b.add(acc, v)), b.store(out, at, acc)]
    body = [b.for_(o, 0, outer, b.for_(i, 0, inner, b.declare(acc, b.const(0, value)),
                                          b.for_(t, 0, length, *step)))]
    params = [b.param(x, "x"), b.param(outer, "outer"), b.param(length, "length"),
              b.param(inner, "inner"), b.param(out, "out", output=True)]
    name = f"cumsum_{value}{'_exclusive' if exclusive else ''}{'_reverse' if reverse else ''}"
    return b.function(name, params, *body)


def im2row_function(value: Scalar) -> Function:
    """The patch matrix of a 2-D convolution, one row per output position:
    ``out[((n*OH + oh)*OW + ow)*K + (c*KH + kh)*KW + kw] = x[n, c, ih, iw]`` with
    ``ih = oh*sh - ph + kh*dh`` (likewise ``iw``), and 0 where that falls in the padding.
    Padding cells read element 0 instead of their address (then replaced by 0), so nothing
    outside ``x`` is read."""
    x, out = b.var("x", Ptr(value)), b.var("out", Ptr(value))
    names = ("n_img", "chan", "height", "width", "out_h", "out_w", "ker_h", "ker_w",
             "stride_h", "stride_w", "dil_h", "dil_w", "pad_h", "pad_w")
    (n_img, chan, height, width, out_h, out_w, ker_h, ker_w, sh, sw, dh, dw, ph,
     pw) = (b.var(name, I64) for name in names)
    n, oh, ow, c, kh, kw = (b.var(name, I64) for name in ("n", "oh", "ow", "c", "kh", "kw"))
    ih, iw, row, col, inside, src = (b.var(name, I64) for name in
                                     ("ih", "iw", "row", "col", "inside", "src"))
    k = b.mul(chan, b.mul(ker_h, ker_w))
    # The innermost loop runs along an output row (ow): reads step through one input row.
    body = [b.for_(n, 0, n_img, b.for_(c, 0, chan, b.for_(kh, 0, ker_h, b.for_(kw, 0, ker_w,
        b.for_(oh, 0, out_h, b.for_(ow, 0, out_w,
            b.declare(row, b.add(b.mul(b.add(b.mul(n, out_h), oh), out_w), ow)),
            b.declare(ih, b.add(b.sub(b.mul(oh, sh), ph), b.mul(kh, dh))),
            b.declare(iw, b.add(b.sub(b.mul(ow, sw), pw), b.mul(kw, dw))),
            b.declare(inside, b.select(b.land(b.land(b.ge(ih, 0), b.lt(ih, height)),
                                              b.land(b.ge(iw, 0), b.lt(iw, width))),
                                       b.i64(1), b.i64(0))),
            b.declare(src, b.select(b.eq(inside, b.i64(1)), b.add(b.mul(b.add(b.mul(
                b.add(b.mul(n, chan), c), height), ih), width), iw), b.i64(0))),
            b.declare(col, b.add(b.mul(b.add(b.mul(c, ker_h), kh), ker_w), kw)),
            b.store(out, b.add(b.mul(row, k), col),
                    b.select(b.eq(inside, b.i64(1)), b.load(x, src),
                             b.const(0, value)))))))))]
    params = [b.param(x, "x")] + [b.param(v, name) for v, name in zip(
        (n_img, chan, height, width, out_h, out_w, ker_h, ker_w, sh, sw, dh, dw, ph, pw),
        names)] + [b.param(out, "out", output=True)]
    return b.function(f"im2row_{value}", params, *body)


def pad_nhwc_function(value: Scalar) -> Function:
    """``out[n, h + ph, w + pw, c] = x[n, c, h, w]``: an NCHW batch made channels-last inside a
    zero border (the border is never written: the caller zeroes the buffer once)."""
    x, out = b.var("x", Ptr(value)), b.var("out", Ptr(value))
    names = ("n_img", "chan", "height", "width", "pad_h", "pad_w", "out_h", "out_w")
    n_img, chan, height, width, ph, pw, hp, wp = (b.var(name, I64) for name in names)
    n, c, h, w = (b.var(name, I64) for name in ("n", "c", "h", "w"))
    body = [b.for_(n, 0, n_img, b.for_(c, 0, chan, b.for_(h, 0, height, b.for_(w, 0, width,
        b.store(out, b.add(b.mul(b.add(b.mul(b.add(b.mul(n, hp), b.add(h, ph)), wp),
                                       b.add(w, pw)), chan), c),
                b.load(x, b.add(b.mul(b.add(b.mul(b.add(b.mul(n, chan), c), height), h),
                                      width), w)))))))]
    params = [b.param(x, "x")] + [b.param(v, name) for v, name in zip(
        (n_img, chan, height, width, ph, pw, hp, wp), names)] + \
        [b.param(out, "out", output=True)]
    return b.function(f"pad_nhwc_{value}", params, *body)


def pad_nhwc_call(x: np.ndarray, pads: tuple[int, int], out: np.ndarray, what: str
                  ) -> MovementCall | None:
    """``x`` (N, C, H, W) into the zero-bordered channels-last ``out`` (N, Hp, Wp, C) with
    ``pads`` cells before each spatial axis; ``out`` must be zeroed once by the caller."""
    value = _value_type(x.dtype)
    if value is None or x.ndim != 4 or out.ndim != 4 or out.dtype != x.dtype or \
            not x.flags.c_contiguous or not out.flags.c_contiguous or not x.size or \
            out.shape[0] != x.shape[0] or out.shape[3] != x.shape[1] or \
            out.shape[1] < x.shape[2] + pads[0] or out.shape[2] < x.shape[3] + pads[1]:
        return None
    kernel = _kernel(("pad_nhwc", value), lambda: pad_nhwc_function(value))
    args = [x.ctypes.data, *x.shape, *pads, out.shape[1], out.shape[2], out.ctypes.data]
    return MovementCall(kernel, args, {"x": 0}, [x, out], what)


def _kernel(key: tuple, make: Any) -> CompiledKernel:
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = build(make(), "llvm")
    return kernel


class MovementCall:
    """One data-movement kernel call with fixed arguments; ``rebind(name, array)`` points an
    input at another array, ``native(slots)`` gives it to a compiled sequence, and calling it
    runs it (``ShapeError`` when an id was out of range)."""

    def __init__(self, kernel: CompiledKernel, args: list, inputs: dict[str, int],
                 keep: list[np.ndarray], what: str, flag: np.ndarray | None = None,
                 offsets: dict[str, int] | None = None,
                 problem: str = "id(s) outside the table",
                 error: type[TensorAlgebraError] = ShapeError) -> None:
        self.kernel, self.args, self.inputs, self.what = kernel, args, inputs, what
        self.keep, self.flag = keep, flag      # keeps the arrays behind the addresses alive
        self.problem = problem                 # what a nonzero flag counts
        self.error = error                     # raised for it
        self.offsets = offsets or {}           # bytes past an input's start that it reads
        self.rebound: dict[str, np.ndarray] = {}

    def rebind(self, name: str, array: np.ndarray) -> None:
        self.rebound[name] = array
        self.args[self.inputs[name]] = array.ctypes.data + self.offsets.get(name, 0)

    def native(self, slots: dict[str, Slot]) -> NativeCall | None:
        args = list(self.args)
        for name, slot in slots.items():
            args[self.inputs[name]] = Slot(slot.index, slot.offset + self.offsets.get(name, 0))
        function = self.kernel.function
        return NativeCall(ctypes.cast(function, ctypes.c_void_p).value or 0,
                          tuple(function.argtypes), tuple(args), None, self.what,
                          None if self.flag is None else self.flag.ctypes.data)

    def __call__(self) -> None:
        self.kernel.function(*self.args)
        if self.flag is not None and self.flag[0]:
            raise self.error(f"{self.what}: {int(self.flag[0])} {self.problem}")


def _value_type(dtype: np.dtype) -> Scalar | None:
    # bools move as the IR's one-byte bool (NumPy's are 0 or 1, so the move is bit-exact);
    # other one- and two-byte types have no same-sized IR integer
    if np.dtype(dtype) == np.bool_:
        return BOOL
    return _BY_SIZE.get(np.dtype(dtype).itemsize) if np.dtype(dtype).kind in "fiub" else None


def gather_call(table: np.ndarray, ids: np.ndarray, out: np.ndarray, what: str,
                column: int | None = None, width: int = 1) -> MovementCall | None:
    """``out[r] = table[ids[r]]`` (rows of a C-contiguous table; ``out`` rows may be a column
    block of a wider C-contiguous array; ``rebind("table", t)`` reads another table of the
    same shape, ``rebind("ids", i)`` other ids); with ``column``, the ids are the ``width`` columns
    from ``column`` of the 2-D ``ids``, read in place (row by row). Float ids are truncated
    toward zero (ONNX Cast to int64) and checked before. None when the dtypes or layouts do
    not allow it."""
    value, index = _value_type(table.dtype), _IDS.get(ids.dtype)
    if value is None or index is None or table.ndim < 1 or not table.shape[0] or \
            out.dtype != table.dtype or not table.flags.c_contiguous or \
            not ids.flags.c_contiguous or (column is not None and ids.ndim != 2) or \
            width < 1 or (column is None and width != 1) or \
            (column is not None and not 0 <= column <= ids.shape[1] - width):
        return None
    count, step = (ids.size, 1) if column is None else ids.shape
    dim = int(np.prod(table.shape[1:], dtype=np.int64))
    if not count or not dim:
        return None          # nothing to move: the caller's own path handles empty arrays
    flat = out.reshape(count * width, -1) if out.flags.c_contiguous else out
    if flat.ndim != 2 or flat.shape != (count * width, dim) or \
            flat.strides[1] != out.itemsize:
        return None
    flag = np.zeros(1, np.int64)
    kernel = _kernel(("gather", value, index), lambda: gather_function(value, index))
    offset = 0 if column is None else column * ids.itemsize
    args = [table.ctypes.data, table.shape[0], dim, ids.ctypes.data + offset, step, count,
            width, flat.ctypes.data, flat.strides[0] // out.itemsize, flag.ctypes.data]
    return MovementCall(kernel, args, {"ids": 3, "table": 0}, [table, ids, out, flag], what,
                        flag, {"ids": offset})


def copy_call(src: np.ndarray, dst: np.ndarray, what: str) -> MovementCall | None:
    """``dst[...] = src`` for ``dst`` a block of rows (unit stride within a row, any row
    stride) of a C-contiguous array, and ``src`` C-contiguous of the same number of values."""
    value = _value_type(src.dtype)
    if value is None or src.dtype != dst.dtype or dst.ndim != 2 or not dst.size or \
            dst.strides[1] != dst.itemsize or src.size != dst.size or \
            not src.flags.c_contiguous:
        return None
    kernel = _kernel(("copy", value), lambda: copy_function(value))
    rows, cols = dst.shape
    args = [src.ctypes.data, rows, cols, dst.ctypes.data, dst.strides[0] // dst.itemsize]
    return MovementCall(kernel, args, {"src": 0}, [src, dst], what)


def block_copy_call(src: np.ndarray, offset: int, rows: int, cols: int, ld_src: int,
                    dst: np.ndarray, what: str) -> MovementCall | None:
    """``dst`` (``rows x cols``, unit stride within a row, any row stride; a C-contiguous
    array of that many values is viewed so) = the block of ``src`` (C-contiguous) that starts
    ``offset`` values in, rows ``ld_src`` values apart. None when the dtypes or layouts do not
    allow it, or the block would reach outside ``src``."""
    value = _value_type(src.dtype)
    if value is None or dst.dtype != src.dtype or not src.flags.c_contiguous or \
            rows <= 0 or cols <= 0 or offset < 0 or ld_src < cols or \
            offset + (rows - 1) * ld_src + cols > src.size:
        return None
    flat = dst.reshape(rows, cols) if dst.flags.c_contiguous and dst.size == rows * cols \
        else dst
    if flat.ndim != 2 or flat.shape != (rows, cols) or flat.strides[1] != dst.itemsize:
        return None
    kernel = _kernel(("block copy", value), lambda: block_copy_function(value))
    start = offset * src.itemsize
    args = [src.ctypes.data + start, ld_src, rows, cols, flat.ctypes.data,
            flat.strides[0] // dst.itemsize]
    return MovementCall(kernel, args, {"src": 0}, [src, dst], what, None, {"src": start})


# Element types the broadcast kernel reads and writes (bool is one byte, nonzero = true).
_ELEMENTS = {np.dtype(np.bool_): BOOL, np.dtype(np.int32): I32, np.dtype(np.int64): I64,
             np.dtype(np.float32): F32, np.dtype(np.float64): F64}
# op -> number of inputs; each reads its inputs as the IR's C conversions do (nonzero is true)
BROADCAST_OPS = {"cast": 1, "not": 1, "and": 2, "or": 2, "xor": 2, "where": 3,
                 "lt": 2, "le": 2, "gt": 2, "ge": 2, "eq": 2}
# comparisons of two inputs of one dtype, to bool (NaN compares false, as in NumPy)
_COMPARISONS = {"lt": b.lt, "le": b.le, "gt": b.gt, "ge": b.ge, "eq": b.eq}
BROADCAST_RANK = 4


def broadcast_function(op: str, out: Scalar, ins: tuple[Scalar, ...]) -> Function:
    """``out[i] = op(x0[i], ...)`` over a rank-4 index space, each input read through its own
    element strides (0 along a broadcast axis), converting with the C rules of ``ir.build.cast``
    (nonzero is true; a float is never converted to an integer here). ``cast`` is also a
    broadcast copy (Expand); ``where`` selects ``x1`` or ``x2`` by ``x0``; a comparison
    (``lt``, ``le``, ``gt``, ``ge``, ``eq``) compares ``x0`` with ``x1``.

    >>> broadcast_function("where", F32, (BOOL, F32, F32)).name
    'broadcast_where_f32_bool_f32_f32'
    """
    target = b.var("out", Ptr(out))
    dims = [b.var(f"d{k}", I64) for k in range(BROADCAST_RANK)]
    idx = [b.var(f"i{k}", I64) for k in range(BROADCAST_RANK)]
    srcs = [b.var(f"x{n}", Ptr(t)) for n, t in enumerate(ins)]
    strides = [[b.var(f"s{n}_{k}", I64) for k in range(BROADCAST_RANK)] for n in range(len(ins))]
    params = [b.param(target, "out", output=True), *(b.param(d, d.name) for d in dims)]
    for src, row in zip(srcs, strides):
        params += [b.param(src, src.name), *(b.param(s, s.name) for s in row)]

    def offset(terms: list[b.Var], steps: list[b.Var]) -> Any:
        total: Any = b.mul(terms[0], steps[0])
        for term, step in zip(terms[1:], steps[1:]):
            total = b.add(total, b.mul(term, step))
        return total

    values = [b.load(src, offset(idx, row)) for src, row in zip(srcs, strides)]
    truth = [b.cast(v, BOOL) for v in values]
    if op == "cast":
        value = b.cast(values[0], out)
    elif op == "not":
        value = b.lnot(truth[0])
    elif op == "and":
        value = b.land(truth[0], truth[1])
    elif op == "or":
        value = b.lor(truth[0], truth[1])
    elif op == "xor":
        value = b.ne(truth[0], truth[1])
    elif op in _COMPARISONS:
        value = _COMPARISONS[op](values[0], values[1])
    else:
        value = b.select(truth[0], b.cast(values[1], out), b.cast(values[2], out))
    body: Any = b.store(target, offset(idx, _row_major(dims)), value)
    for k in reversed(range(BROADCAST_RANK)):
        body = b.for_(idx[k], 0, dims[k], body)
    return b.function(f"broadcast_{op}_{out}_{'_'.join(map(str, ins))}", params, body)


def _row_major(dims: list[b.Var]) -> list[Any]:
    """The C-order element strides of ``dims`` as expressions."""
    steps: list[Any] = [b.i64(1)]
    for d in reversed(dims[1:]):
        steps.insert(0, b.mul(steps[0], d))
    return steps


def broadcast_call(op: str, inputs: list[np.ndarray], out: np.ndarray, what: str
                   ) -> MovementCall | None:
    """``out = op(*inputs)`` (an op of ``BROADCAST_OPS``) with NumPy broadcasting, for inputs
    and a C-contiguous ``out`` of bool, int32, int64, float32 or float64, of rank 4 at most;
    the inputs are read as C-contiguous arrays of their shapes (``rebind`` them to arrays of the
    same shape). One compiled kernel for mixed dtypes: an attention mask's Cast to bool, And,
    Expand and Where. None when the op, dtypes or shapes do not allow it, or ``cast`` would
    convert a float to an integer (undefined for values out of range, unlike NumPy).

    >>> mask = np.array([[1, 0, 1]], np.int64)
    >>> out = np.zeros((2, 3), np.bool_)
    >>> broadcast_call("cast", [mask], out, "demo")()
    >>> out.tolist()
    [[True, False, True], [True, False, True]]
    """
    count = BROADCAST_OPS.get(op)
    types = [_ELEMENTS.get(np.dtype(x.dtype)) for x in inputs]
    result = _ELEMENTS.get(np.dtype(out.dtype))
    if count != len(inputs) or result is None or any(t is None for t in types) or \
            out.ndim > BROADCAST_RANK or not out.flags.c_contiguous or not out.size or \
            any(x.ndim > out.ndim or not x.flags.c_contiguous for x in inputs):
        return None
    if op == "cast" and inputs[0].dtype.kind == "f" and out.dtype.kind in "iub" and \
            out.dtype != np.bool_:
        return None
    if op in ("not", "and", "or", "xor") and out.dtype != np.bool_:
        return None
    if op in _COMPARISONS and (out.dtype != np.bool_ or inputs[0].dtype != inputs[1].dtype):
        return None
    pad = BROADCAST_RANK - out.ndim
    shape = (1,) * pad + out.shape
    args: list[Any] = [out.ctypes.data, *shape]
    slots: dict[str, int] = {}
    for n, x in enumerate(inputs):
        full = (1,) * (BROADCAST_RANK - x.ndim) + x.shape
        if any(d not in (1, o) for d, o in zip(full, shape)):
            return None
        steps = [int(np.prod(full[k + 1:], dtype=np.int64)) for k in range(BROADCAST_RANK)]
        slots[f"x{n}"] = len(args)
        args += [x.ctypes.data, *(0 if d == 1 else s for d, s in zip(full, steps))]
    key = ("broadcast", op, result, tuple(types))
    kernel = _kernel(key, lambda: broadcast_function(op, result, tuple(types)))
    return MovementCall(kernel, args, slots, [*inputs, out], what)


def ids_call(ids: np.ndarray, column: int, crd: np.ndarray, rows: int, what: str,
             problem: str = "id(s) outside the table") -> MovementCall | None:
    """A bag's CSR coordinates ``crd`` (int64, ``count x size``) from the ids ``ids``
    (``count x width`` C-contiguous, the block starting at ``column``), checked against
    ``rows`` table rows (negative ones counted from the end; the call raises a ShapeError
    saying how many ``problem``, after ``what``, for any outside)."""
    index = _INDEX.get(ids.dtype)
    if index is None or crd.dtype != np.int64 or ids.ndim != 2 or not ids.flags.c_contiguous \
            or not rows or not crd.size:
        return None
    count, width = ids.shape
    size = crd.size // max(count, 1)
    if size * count != crd.size or column + size > width:
        return None
    flag = np.zeros(1, np.int64)
    kernel = _kernel(("ids", index), lambda: ids_function(index))
    args = [ids.ctypes.data + column * ids.itemsize, count, size, width, rows, crd.ctypes.data,
            flag.ctypes.data]
    return MovementCall(kernel, args, {"ids": 0}, [ids, crd, flag], what, flag,
                        {"ids": column * ids.itemsize}, problem)


def im2row_call(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int],
                dilations: tuple[int, int], pads: tuple[int, int], out_hw: tuple[int, int],
                out: np.ndarray, what: str) -> MovementCall | None:
    """The patch matrix of ``x`` (N, C, H, W) for a 2-D convolution into ``out``
    (N * OH * OW, C * KH * KW), C-contiguous; None when the dtypes do not allow it."""
    value = _value_type(x.dtype)
    rows = x.shape[0] * out_hw[0] * out_hw[1]
    cols = x.shape[1] * kernel[0] * kernel[1]
    if value is None or x.ndim != 4 or not x.flags.c_contiguous or out.dtype != x.dtype or \
            out.shape != (rows, cols) or not out.flags.c_contiguous or not out.size or \
            x.dtype.kind != "f":
        return None
    kernel_fn = _kernel(("im2row", value), lambda: im2row_function(value))
    args = [x.ctypes.data, *x.shape, *out_hw, *kernel, *strides, *dilations, *pads,
            out.ctypes.data]
    return MovementCall(kernel_fn, args, {"x": 0}, [x, out], what)


def cumsum_call(x: np.ndarray, axis: int, exclusive: bool, reverse: bool, out: np.ndarray,
                what: str) -> MovementCall | None:
    """ONNX ``CumSum`` of the C-contiguous array ``x`` (int32/64 or float32/64) along
    ``axis`` into ``out`` (same shape and dtype), as one compiled call; None for other dtypes
    or layouts. Floats are added in order, one by one, as NumPy's ``cumsum`` adds them (a
    scan has nothing to vectorise or reassociate), so the sums are NumPy's to the bit.

    >>> x = np.array([[1, 2, 3], [4, 5, 6]], np.int64); out = np.empty_like(x)
    >>> cumsum_call(x, 1, False, False, out, "CumSum")(); out.tolist()
    [[1, 3, 6], [4, 9, 15]]
    """
    value = _IDS.get(x.dtype)
    if value is None or out.dtype != x.dtype or out.shape != x.shape or x.ndim == 0 or \
            not x.flags.c_contiguous or not out.flags.c_contiguous or not x.size:
        return None
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        return None
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    kernel = _kernel(("cumsum", value, exclusive, reverse),
                     lambda: cumsum_function(value, exclusive, reverse))
    args = [x.ctypes.data, outer, x.shape[axis], inner, out.ctypes.data]
    return MovementCall(kernel, args, {"x": 0}, [x, out], what)


def extreme_call(x: np.ndarray, first: int, last: int, largest: bool, out: np.ndarray,
                 what: str) -> MovementCall | None:
    """ReduceMax (``largest``) or ReduceMin of the C-contiguous array ``x`` over its
    consecutive axes ``first..last`` into ``out`` (``x``'s dtype, the reduced axes' values
    together), as one compiled call (``runtime/select.extreme_kernel``: NaN wins); None for
    dtypes other than float32/64 and int32/64, an empty reduction or other layouts.

    >>> x = np.array([[1.0, 7.0, 3.0], [4.0, 2.0, 6.0]]); out = np.empty((2, 1))
    >>> extreme_call(x, 1, 1, True, out, "ReduceMax")(); out.tolist()
    [[7.0], [6.0]]
    """
    from tensoralg.runtime.select import VALUE_TYPES, extreme_kernel

    value = VALUE_TYPES.get(x.dtype)
    if value is None or out.dtype != x.dtype or not 0 <= first <= last < x.ndim or \
            not x.flags.c_contiguous or not out.flags.c_contiguous:
        return None
    n = math.prod(x.shape[first:last + 1])
    outer, inner = math.prod(x.shape[:first]), math.prod(x.shape[last + 1:])
    if n == 0 or out.size != outer * inner or not out.size:
        return None
    kernel = _kernel(("extreme", value, largest), lambda: extreme_kernel(value, largest))
    return MovementCall(kernel, [x.ctypes.data, out.ctypes.data, outer, n, inner], {"x": 0},
                        [x, out], what)


def quantize_parameters_call(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, what: str
                             ) -> MovementCall | None:
    """DynamicQuantizeLinear's scale and zero point of the C-contiguous float32 ``x`` into the
    float32 scalars ``scale`` and ``zero``, as one compiled call
    (``runtime/select.quantize_parameters_kernel``); ``InputError`` when ``x`` holds NaN;
    None for other dtypes, layouts or an empty ``x``. Input: ``x``.

    >>> s, z = np.empty((), np.float32), np.empty((), np.float32)
    >>> quantize_parameters_call(np.array([-1.0, 3.0], np.float32), s, z, "q")()
    >>> round(float(s), 6), float(z)
    (0.015686, 64.0)
    """
    from tensoralg.runtime.select import quantize_parameters_kernel

    if x.dtype != np.float32 or not x.size or not x.flags.c_contiguous or \
            scale.dtype != np.float32 or zero.dtype != np.float32 or scale.size != 1 or \
            zero.size != 1:
        return None
    kernel = _kernel(("quantize parameters",), quantize_parameters_kernel)
    flag = np.zeros(1, np.int64)
    return MovementCall(kernel, [x.ctypes.data, scale.ctypes.data, zero.ctypes.data, x.size,
                                 flag.ctypes.data], {"x": 0}, [x, scale, zero, flag], what,
                        flag, problem="input holding NaN: its range, and so the scale, is "
                                      "undefined", error=InputError)


# dtype -> the compiled ``value_range`` function (the call is most of a small tensor's cost:
# 8 -> ~2 us for 4096 float32 values without the lookups and ``ctypes.data``, 2026-12-07)
_RANGE_FUNCTIONS: dict[np.dtype, Any] = {}


def value_range(x: np.ndarray) -> np.ndarray | None:
    """``[min(x), max(x)]`` of a C-contiguous float32/64 or int32/64 array of at least one
    value, by one generated pass (``runtime/select.range_kernel``: NaN in both where one is in
    ``x``); None for other dtypes, layouts, or no values.

    >>> value_range(np.array([[3.0, -1.0], [7.0, 2.0]])).tolist()
    [-1.0, 7.0]
    """
    function = _RANGE_FUNCTIONS.get(x.dtype)
    if function is None:
        from tensoralg.runtime.select import VALUE_TYPES, range_kernel

        value = VALUE_TYPES.get(x.dtype)
        if value is None:
            return None
        function = _RANGE_FUNCTIONS[x.dtype] = _kernel(
            ("range", value), lambda: range_kernel(value)).function
    if not x.size or not x.flags.c_contiguous:
        return None
    out = np.empty(2, x.dtype)
    function(data_address(x), data_address(out), x.size)
    return out


def bag_max_call(table: np.ndarray, crd: np.ndarray, pos: np.ndarray, vals: np.ndarray,
                 empty: np.ndarray, out: np.ndarray, what: str) -> MovementCall | None:
    """``out[b] =`` the elementwise max of the rows ``table[crd[p]]``, ``pos[b] <= p <
    pos[b + 1]`` with ``vals[p] != 0``, or ``empty[0]`` for a bag of none, as one compiled call
    (``runtime/select.bag_max_kernel``; ``crd`` and ``pos`` int64, checked by the caller);
    None for other dtypes or layouts. Inputs: ``table``, ``crd``, ``pos``, ``vals``.

    >>> out, ones = np.empty((2, 2)), np.ones(2)
    >>> bag_max_call(np.array([[1.0, 5.0], [3.0, 2.0]]), np.array([0, 1]), np.array([0, 2, 2]),
    ...              ones, np.array([-1.0]), out, "bags")(); out.tolist()
    [[3.0, 5.0], [-1.0, -1.0]]
    """
    from tensoralg.runtime.select import VALUE_TYPES, bag_max_kernel

    value = VALUE_TYPES.get(table.dtype)
    if value is None or out.dtype != table.dtype or empty.dtype != table.dtype or \
            vals.dtype != table.dtype or vals.shape != crd.shape or \
            crd.dtype != np.int64 or pos.dtype != np.int64 or table.ndim != 2 or \
            out.ndim != 2 or out.shape[1] != table.shape[1] or pos.shape != (out.shape[0] + 1,) \
            or not all(a.flags.c_contiguous for a in (table, crd, pos, vals, empty, out)):
        return None
    kernel = _kernel(("bag max", value), lambda: bag_max_kernel(value))
    return MovementCall(kernel, [table.ctypes.data, crd.ctypes.data, pos.ctypes.data,
                                 vals.ctypes.data, empty.ctypes.data, out.ctypes.data,
                                 out.shape[0], out.shape[1]],
                        {"table": 0, "crd": 1, "pos": 2, "vals": 3},
                        [table, crd, pos, vals, empty, out], what)


def bag_keep_call(ids: np.ndarray, weights: np.ndarray | None, vals: np.ndarray, padding: int,
                  shift: int, what: str) -> MovementCall | None:
    """``vals[p] = 0`` where ``ids[p]`` (plus ``shift`` when negative) is ``padding``, else
    ``weights[p]`` or 1, as one compiled call (``runtime/select.bag_keep_kernel``); None for
    other dtypes or layouts. Inputs: ``ids``, ``weights``.

    >>> vals = np.empty(3)
    >>> bag_keep_call(np.array([4, -1, 2]), None, vals, 4, 5, "bags")(); vals.tolist()
    [0.0, 0.0, 1.0]
    """
    from tensoralg.runtime.select import VALUE_TYPES, bag_keep_kernel

    value = VALUE_TYPES.get(vals.dtype)
    if value is None or vals.dtype.kind != "f" or ids.dtype != np.int64 or \
            ids.shape != vals.shape or ids.ndim != 1 or \
            (weights is not None and (weights.dtype != vals.dtype or
                                      weights.size != vals.size)) or \
            not all(a.flags.c_contiguous for a in (ids, vals) + (() if weights is None
                                                                  else (weights,))):
        return None
    weighted = weights is not None
    kernel = _kernel(("bag keep", value, weighted), lambda: bag_keep_kernel(value, weighted))
    source = weights if weighted else vals          # unread without weights
    return MovementCall(kernel, [ids.ctypes.data, source.ctypes.data, vals.ctypes.data,
                                 vals.size, int(padding), int(shift)],
                        {"ids": 0, "weights": 1}, [ids, source, vals], what)


__all__ = ["BROADCAST_OPS", "MovementCall", "bag_keep_call", "bag_max_call", "block_copy_call", "block_copy_function",
           "broadcast_call", "broadcast_function", "copy_call", "copy_function", "gather_call", "gather_function",
           "ids_call", "ids_function", "im2row_call", "im2row_function", "pad_nhwc_call",
           "pad_nhwc_function", "extreme_call"]
