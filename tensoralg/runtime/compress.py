"""Dense rows to CSR in one compiled pass, into buffers that are reused call after call.

Multi-hot features arrive as dense matrices that are almost all zeros (a 256 x 10^4 batch with
20 ones per row). Read once, they become a CSR operand and every product with them a
sparse·dense kernel. NumPy needs several passes for this (``count_nonzero``, ``nonzero``,
fancy indexing: 10-15 ms for 10 MB); the kernel here reads the matrix once and writes entries
only where a block of values has any.

The scan is emitted as LLVM IR with explicit vector masks (``codegen/scan.py``): 64 values per
mask word, only its set bits visited. :func:`compress_function`, the same scan written in the
statement IR, is kept as the tests' oracle (LLVM compiles its block test into per-lane work,
twice as slow). Neither writes past ``capacity`` entries: they keep counting, so the caller
learns that the matrix did not fit and can take another path. The CSR loader
(:func:`load_function`) fills the same buffers from a CSR feed.
"""
from __future__ import annotations

import ctypes
from typing import Any, NamedTuple

import numpy as np

from tensoralg.codegen.build import CompiledKernel, build
from tensoralg.formats.format import CSR
from tensoralg.formats.tensor import LevelArrays, Tensor
from tensoralg.ir import build as b
from tensoralg.ir.nodes import F32, F64, I32, I64, Function, Ptr, Scalar

BLOCK = 16      # values tested per vector compare (the statement-IR oracle)
_SCALARS = {np.dtype(np.float32): F32, np.dtype(np.float64): F64}
_INDEX = {np.dtype(np.int32): I32, np.dtype(np.int64): I64}
_KERNELS: dict[Any, CompiledKernel] = {}


class _Buffers(NamedTuple):
    """The compressor's buffers and limits as kernel parameters; both kernels fill them."""

    pos: b.Var
    crd: b.Var
    vals: b.Var
    cap: b.Var
    count: b.Var
    squares: b.Var
    square: b.Var
    over: b.Var

    def params(self) -> list[Any]:
        return [b.param(self.pos, "out.1.pos", output=True),
                b.param(self.crd, "out.1.crd", output=True),
                b.param(self.vals, "out.vals", output=True), b.param(self.cap, "capacity"),
                b.param(self.count, "count", output=True),
                b.param(self.squares, "squares.vals", output=True),
                b.param(self.square, "square"), b.param(self.over, "overflow", output=True)]


def _buffers(value: Scalar) -> _Buffers:
    return _Buffers(b.var("pos_vals", Ptr(I32)), b.var("crd_vals", Ptr(I32)),
                    b.var("vals_vals", Ptr(value)), b.var("capacity", I64),
                    b.var("count_vals", Ptr(I64)), b.var("squares_vals", Ptr(value)),
                    b.var("square", I64), b.var("over_vals", Ptr(I64)))


def compress_function(value: Scalar) -> Function:
    """The IR of the row compressor for ``value`` (``f32`` or ``f64``).

    >>> "pos[i] =" in str(compress_function(F32)).replace("pos_vals", "pos")
    True
    """
    rows, cols = b.var("n_rows", I64), b.var("n_cols", I64)
    x = b.var("x_vals", Ptr(value))
    out = _buffers(value)
    pos, crd, vals, cap, count, squares, square, over = out
    i, blk, blk2, t, t2, j = (b.var(n, I64) for n in ("i", "block", "block2", "t", "t2", "j"))
    flags = b.var("flags", Ptr(I32))
    c, base, lo = b.var("c", I64), b.var("base", I64), b.var("lo", I64)
    hits, v, w = b.var("hits", I32), b.var("v", value), b.var("w", value)
    zero = b.const(0.0, value)

    def keep(column: b.Operand, val: b.Var) -> list:
        # Entries past the capacity are counted, not stored.
        return [b.if_(b.lt(c, cap), [b.store(crd, c, b.cast(column, I32)),
                                     b.store(vals, c, val),
                                     b.if_(b.ne(square, b.i64(0)),
                                           [b.store(squares, c, b.mul(val, val))])]),
                b.assign(c, b.add(c, 1))]

    blocks = b.div(cols, BLOCK)
    # Two loops per row: the first only compares (one vector compare and count per block of
    # 16), the second extracts from the blocks that had a hit. In one loop LLVM shares the
    # compares between test and extraction and ends up testing every value on its own.
    mark = b.for_(blk, 0, blocks,
                  b.declare(lo, b.add(base, b.mul(blk, BLOCK))),
                  b.declare(hits, b.const(0, I32)),
                  b.for_(t, 0, BLOCK, b.assign(hits, b.add(hits, b.select(
                      b.ne(b.load(x, b.add(lo, t)), zero), b.const(1, I32), b.const(0, I32))))),
                  b.store(flags, blk, hits))
    extract = b.for_(blk2, 0, blocks, b.if_(
        b.ne(b.load(flags, blk2), b.const(0, I32)),
        b.for_(t2, 0, BLOCK,
               b.declare(v, b.load(x, b.add(base, b.add(b.mul(blk2, BLOCK), t2)))),
               b.if_(b.ne(v, zero), keep(b.add(b.mul(blk2, BLOCK), t2), v)))))
    body = [
        b.declare(c, b.i64(0)),
        b.allocate(flags, b.add(blocks, 1)),
        b.for_(i, 0, rows,
               b.store(pos, i, b.cast(b.minimum(c, cap), I32)),
               b.declare(base, b.mul(i, cols)),
               mark, extract,
               b.for_(j, b.mul(blocks, BLOCK), cols,
                      b.declare(w, b.load(x, b.add(base, j))),
                      b.if_(b.ne(w, zero), keep(j, w)))),
        b.free(flags),
        b.store(pos, rows, b.cast(b.minimum(c, cap), I32)),
        b.store(count, 0, c),
        b.store(over, 0, b.select(b.lt(cap, c), c, b.i64(0))),
    ]
    params = [b.param(rows, "n_rows"), b.param(cols, "n_cols"), b.param(x, "x.vals"),
              *out.params()]
    return b.function(f"compress_rows_{value}", params, *body)


def load_function(value: Scalar, index: Scalar) -> Function:
    """The IR of the CSR loader: a validated CSR matrix's arrays (``index`` pointers and
    coordinates, ``value`` values) copied into the compressor's buffers, with the values'
    squares when ``square`` is set; when it has more than ``capacity`` entries nothing is
    copied and ``overflow`` holds the count.

    >>> "indptr" in str(load_function(F32, I64))
    True
    """
    rows = b.var("n_rows", I64)
    indptr, indices = b.var("indptr", Ptr(index)), b.var("indices", Ptr(index))
    data = b.var("data", Ptr(value))
    out = _buffers(value)
    pos, crd, vals, cap, count, squares, square, over = out
    n, r, p, v = b.var("n", I64), b.var("r", I64), b.var("p", I64), b.var("v", value)
    body = [
        b.declare(n, b.cast(b.load(indptr, rows), I64)),
        b.store(count, 0, n),
        b.store(over, 0, b.select(b.lt(cap, n), n, b.i64(0))),
        b.if_(b.le(n, cap), [
            b.for_(r, 0, b.add(rows, 1), b.store(pos, r, b.cast(b.load(indptr, r), I32))),
            b.for_(p, 0, n,
                   b.store(crd, p, b.cast(b.load(indices, p), I32)),
                   b.declare(v, b.load(data, p)),
                   b.store(vals, p, v),
                   b.if_(b.ne(square, b.i64(0)), [b.store(squares, p, b.mul(v, v))]))]),
    ]
    params = [b.param(rows, "n_rows"), b.param(indptr, "indptr"),
              b.param(indices, "indices"), b.param(data, "data"), *out.params()]
    return b.function(f"load_csr_{value}_{index}", params, *body)


class RowCompressor:
    """CSR buffers for ``shape`` matrices of ``dtype`` with at most ``capacity`` nonzeros,
    refilled by ``compress(x)``. ``tensor`` is a CSR view of the buffers (its crd and vals
    arrays have room for ``capacity`` entries; ``pos`` says how many are in use), so a kernel
    bound to it once sees each new matrix.

    >>> rc = RowCompressor((2, 40), np.float32, capacity=8)
    >>> x = np.zeros((2, 40), np.float32); x[0, 3] = 1; x[1, 39] = 2
    >>> rc.compress(x), rc.pos.tolist(), rc.crd[:2].tolist()
    (True, [0, 1, 2], [3, 39])
    >>> rc.compress(np.ones((2, 40), np.float32))  # 80 nonzeros do not fit in 8
    False
    """

    def __init__(self, shape: tuple[int, int], dtype: np.dtype, capacity: int) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype not in _SCALARS or len(shape) != 2:
            raise ValueError(f"RowCompressor takes 2-D float32/float64 matrices, got "
                             f"{self.dtype} {shape}")
        self.shape = (int(shape[0]), int(shape[1]))
        self.capacity = max(0, min(int(capacity), 2**31 - 1))
        self.pos = np.zeros(self.shape[0] + 1, np.int32)
        self.crd = np.zeros(max(1, self.capacity), np.int32)
        self.vals = np.zeros(max(1, self.capacity), self.dtype)
        self._count = np.zeros(1, np.int64)
        self.overflow = np.zeros(1, np.int64)   # the count when it passed the capacity, else 0
        self.squares: np.ndarray | None = None
        self.tensor = Tensor.trusted(self.shape, CSR,
                                     (LevelArrays(), LevelArrays(self.pos, self.crd)), self.vals)
        kernel = _kernel(_SCALARS[self.dtype])
        self._kernel = kernel
        self._args = [self.shape[0], self.shape[1], 0, self.pos.ctypes.data,
                      self.crd.ctypes.data, self.vals.ctypes.data, self.capacity,
                      self._count.ctypes.data, self.vals.ctypes.data, 0,
                      self.overflow.ctypes.data]
        self._calls: list[Any] = []

    def with_squares(self) -> np.ndarray:
        """Also fill ``squares`` with each stored value squared (the CSR values of ``x * x``,
        at the same positions), from the next refill on; returns that array."""
        if self.squares is None:
            self.squares = np.zeros_like(self.vals)
            self._args[8:10] = [self.squares.ctypes.data, 1]
            for call, at in self._calls:
                call.args[at:at + 2] = [self.squares.ctypes.data, 1]
                call.keep.append(self.squares)
        return self.squares

    def call(self, x: np.ndarray, what: str) -> Any:
        """The compress kernel bound to ``x`` as a prebound call (a ``MovementCall``: input
        ``"x"``, flagged when the matrix did not fit), for a compiled call sequence."""
        from tensoralg.runtime.movement import MovementCall

        args = list(self._args)
        args[2] = x.ctypes.data
        call = MovementCall(self._kernel, args, {"x": 2},
                            [x, self.pos, self.crd, self.vals, self._count, self.overflow] +
                            ([self.squares] if self.squares is not None else []), what,
                            self.overflow, problem="nonzeros, more than the CSR buffers hold")
        self._calls.append((call, 8))
        return call

    def load_call(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, what: str
                  ) -> Any:
        """:meth:`load` as a prebound call (a ``MovementCall``: inputs ``"indptr"``,
        ``"indices"``, ``"data"``, flagged when the matrix did not fit), for a compiled call
        sequence. The arrays it is pointed at must have been validated as :meth:`load`
        requires, and share ``indptr``'s integer dtype (int32 or int64)."""
        from tensoralg.runtime.movement import MovementCall

        index = _INDEX.get(indptr.dtype)
        if index is None or indices.dtype != indptr.dtype or data.dtype != self.dtype or \
                len(indptr) != self.shape[0] + 1:
            raise ValueError(f"RowCompressor for {self.dtype} {self.shape}: cannot load "
                             f"{len(indptr)} {indptr.dtype} pointers, {indices.dtype} indices "
                             f"and {data.dtype} values")
        key = (_SCALARS[self.dtype], index)
        kernel = _KERNELS.get(key)
        if kernel is None:
            kernel = _KERNELS[key] = build(load_function(*key), "llvm")
        squares = self.squares
        args = [self.shape[0], indptr.ctypes.data, indices.ctypes.data, data.ctypes.data,
                self.pos.ctypes.data, self.crd.ctypes.data, self.vals.ctypes.data,
                self.capacity, self._count.ctypes.data,
                self.vals.ctypes.data if squares is None else squares.ctypes.data,
                int(squares is not None), self.overflow.ctypes.data]
        call = MovementCall(kernel, args, {"indptr": 1, "indices": 2, "data": 3},
                            [indptr, indices, data, self.pos, self.crd, self.vals, self._count,
                             self.overflow] + ([] if squares is None else [squares]), what,
                            self.overflow, problem="nonzeros, more than the CSR buffers hold")
        self._calls.append((call, 9))
        return call

    @property
    def nnz(self) -> int:
        """Nonzeros of the last matrix compressed (more than ``capacity`` if it did not fit)."""
        return int(self._count[0])

    def compress(self, x: np.ndarray) -> bool:
        """Refill the buffers from ``x`` (C-contiguous, ``shape``, ``dtype``); False when it
        has more than ``capacity`` nonzeros (the buffers then hold the first ``capacity``)."""
        if x.shape != self.shape or x.dtype != self.dtype or not x.flags.c_contiguous:
            raise ValueError(f"RowCompressor for {self.dtype} {self.shape} got {x.dtype} "
                             f"{x.shape}{'' if x.flags.c_contiguous else ' (not contiguous)'}")
        args = list(self._args)
        args[2] = x.ctypes.data
        self._kernel.function(*args)
        return self.nnz <= self.capacity


    def load(self, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> bool:
        """Refill the buffers from a CSR matrix of ``shape`` whose arrays the caller has
        validated (pointers nondecreasing from 0, indices in range and sorted per row); False
        when it has more than ``capacity`` entries (the buffers are then left as they were).

        >>> rc = RowCompressor((2, 40), np.float32, capacity=8)
        >>> rc.load(np.array([0, 1, 2]), np.array([3, 39]), np.array([1, 2], np.float32))
        True
        >>> rc.nnz, rc.crd[:2].tolist()
        (2, [3, 39])
        """
        count = int(indptr[-1])
        if len(indptr) != self.shape[0] + 1 or len(indices) < count or len(data) < count:
            raise ValueError(f"RowCompressor for {self.shape}: CSR arrays of {len(indptr)} "
                             f"pointers, {len(indices)} indices and {len(data)} values")
        self._count[0] = count
        if count > self.capacity:
            return False
        self.pos[:] = indptr
        self.crd[:count] = indices[:count]
        self.vals[:count] = data[:count]
        if self.squares is not None:
            np.multiply(self.vals[:count], self.vals[:count], out=self.squares[:count])
        return True


def _kernel(value: Scalar) -> CompiledKernel:
    """The scan for ``value``: ``codegen/scan.py``'s vector-mask kernel, compiled once per
    process, with the same arguments as :func:`compress_function`'s (which stays as the
    portable reference the tests compare it with)."""
    kernel = _KERNELS.get(value)
    if kernel is None:
        from tensoralg.codegen.build import build_llvm_module
        from tensoralg.codegen.llvm import host_has
        from tensoralg.codegen.scan import ENTRY, scan_module

        dtype = np.dtype(np.float32 if value == F32 else np.float64)
        lanes = (64 if host_has("avx512f") else 32) // dtype.itemsize
        pointer, i64 = ctypes.c_void_p, ctypes.c_int64
        prototype = ctypes.CFUNCTYPE(ctypes.c_int32, i64, i64, pointer, pointer, pointer,
                                     pointer, i64, pointer, pointer, i64, pointer)
        function, source, keepalive = build_llvm_module(scan_module(dtype, lanes), ENTRY,
                                                        prototype)
        kernel = _KERNELS[value] = CompiledKernel("llvm", ENTRY, (), source, function,
                                                  keepalive=keepalive)
    return kernel


def reference_kernel(value: Scalar) -> CompiledKernel:
    """:func:`compress_function` compiled as a statement kernel (a test oracle)."""
    return build(compress_function(value), "llvm")


__all__ = ["BLOCK", "RowCompressor", "compress_function", "load_function", "reference_kernel"]
