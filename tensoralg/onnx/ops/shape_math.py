"""Size, Range and ReduceProd: the shape arithmetic around exported embedding-bag loops.

PyTorch computes a ``Loop``'s bag bounds with them (``Size(offsets)`` in the dynamo export,
``Range(0, ReduceProd(Shape(input)), bag_size)`` for a 2-D input in the TorchScript export).
Size and Range are NumPy data movement; ReduceProd runs as a tree of elementwise ``*`` kernels
(the core has no product reduction), like ReduceMax in :mod:`reduce`.

>>> import tensoralg.onnx.ops.kernels as k
>>> node = k.NodeContext("n0", "Range", ("a", "b", "c"), ("y",), 11, k.KernelSet("llvm"))
>>> range_(node, np.array(0), np.array(8), np.array(3))
array([0, 3, 6])
"""
from __future__ import annotations

import math

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.reduce import kept_shape, reduction_op
from tensoralg.onnx.ops.registry import op


@op("Size", since=1)
def size(node: NodeContext, x: np.ndarray) -> np.ndarray:
    node.note("element count of the input")
    return np.array(x.size, dtype=np.int64)


@op("Range", since=11)
def range_(node: NodeContext, start: np.ndarray, limit: np.ndarray, delta: np.ndarray
           ) -> np.ndarray:
    """``start, start + delta, ...`` below ``limit`` (above it for a negative delta)."""
    if any(np.asarray(v).size != 1 for v in (start, limit, delta)):
        raise ta.ShapeError(f"{node}: start, limit and delta must be scalars")
    first, last, step = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if step == 0:
        raise ta.ShapeError(f"{node}: delta is 0")
    # ONNX: max(ceil((limit - start) / delta), 0) elements, each start + k * delta
    count = max(int(math.ceil((float(last) - float(first)) / float(step))), 0)
    node.note("numpy arange")
    return (first + np.arange(count, dtype=np.int64) * step).astype(np.asarray(start).dtype)


def _product(node: NodeContext, x: np.ndarray, axes: list[int], keepdims: int) -> np.ndarray:
    """The product over ``axes`` as ceil(log2 n) calls of one ``A * B`` kernel: halves are
    disjoint (a product, unlike a max, must not count an element twice), an odd one padded by 1."""
    out_shape = kept_shape(x.shape, axes, keepdims)
    kept = [d for d in range(x.ndim) if d not in axes]
    rows = math.prod(x.shape[d] for d in kept)
    n = math.prod(x.shape[d] for d in axes)
    if n == 0:
        return np.ones(out_shape, dtype=x.dtype)
    dtype = compute_dtype(x.dtype)
    flat = np.transpose(x, kept + axes).reshape(rows, n).astype(dtype, copy=False)
    while n > 1:
        if n % 2:
            flat = np.concatenate([flat, np.ones((rows, 1), dtype)], axis=1)
            n += 1
        flat = node.run("Y(i,j) = A(i,j) * B(i,j)", dtype, A=flat[:, :n // 2], B=flat[:, n // 2:])
        n //= 2
    return flat.reshape(out_shape).astype(x.dtype, copy=False)


op("ReduceProd", since=1)(reduction_op(_product, axes_input=False))
op("ReduceProd", since=18)(reduction_op(_product, axes_input=True))
