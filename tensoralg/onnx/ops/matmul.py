"""MatMul (batched, broadcast) and Gemm as tensoralg contractions, or BLAS when it pays.

A dense float contraction doing at least ``BLAS_MIN_WORK`` multiply-adds goes to NumPy's matmul
(BLAS); the decision is recorded in the node's plan, so ``print_ir`` shows it. Smaller ones,
integer ones, and the Gemm epilogue (``alpha``, ``beta * C``) run as tensoralg kernels.
"""
from __future__ import annotations

import math

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import (
    INDICES,
    NodeContext,
    access,
    broadcast_shape,
    compute_dtype,
    elementwise,
    kept_dims,
    literal,
    output_access,
)
from tensoralg.onnx.ops.registry import op

BLAS_MIN_WORK = 32 * 32 * 32
# A batched product goes to BLAS only when each product of the batch is at least this big:
# NumPy's matmul calls BLAS once per product, so a batch of tiny ones (DCN's cross layer,
# 256 products of 221 x 1 x 1) costs about a microsecond each in calls, where one kernel over
# the batch streams the operands once (measured ad hoc: 256 x 221 x 1 x 1, 0.5 ms in BLAS
# with its epilogue, 0.02 ms as kernels).
BLAS_MIN_BATCHED_WORK = 1024


def use_blas(dtype: np.dtype, work: int) -> bool:
    """Whether a dense contraction of ``work`` multiply-adds should run in BLAS.

    >>> use_blas(np.dtype(np.float32), 64 ** 3), use_blas(np.dtype(np.float32), 8 ** 3)
    (True, False)
    """
    return dtype.kind == "f" and work >= BLAS_MIN_WORK


def use_batched_blas(dtype: np.dtype, batch: int, each: int) -> bool:
    """Whether ``batch`` dense products of ``each`` multiply-adds should run in BLAS (see
    ``BLAS_MIN_BATCHED_WORK``).

    >>> f32 = np.dtype(np.float32)
    >>> use_batched_blas(f32, 256, 221), use_batched_blas(f32, 8, 32 ** 3)
    (False, True)
    """
    return use_blas(dtype, batch * each) and (batch == 1 or each >= BLAS_MIN_BATCHED_WORK)


@op("MatMul", since=1)
def matmul(node: NodeContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy ``matmul`` semantics: 1-D operands are promoted, batch dimensions broadcast."""
    if a.ndim == 0 or b.ndim == 0:
        raise ta.ShapeError(f"{node}: MatMul operands must have at least one dimension")
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise ta.ShapeError(f"{node}: inner dimensions differ: {a.shape} @ {b.shape}")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise ta.ShapeError(f"{node}: batch dimensions of {a.shape} and {b.shape} do not "
                            f"broadcast") from None
    dtype = compute_dtype(np.result_type(a.dtype, b.dtype))
    if use_batched_blas(dtype, math.prod(batch), m * k * n):
        shape = "x".join(str(d) for d in (*batch, m, k, n))
        node.note(f"BLAS (dense {shape})")
        result = np.matmul(a2.astype(dtype, copy=False), b2.astype(dtype, copy=False))
    else:
        result = contract(node, a2, b2, batch, dtype)
    if a.ndim == 1:
        result = result[..., 0, :]
    if b.ndim == 1:
        result = result[..., 0]
    return result.astype(a.dtype, copy=False)


def contract(node: NodeContext, a: np.ndarray, b: np.ndarray, batch: tuple[int, ...],
             dtype: np.dtype) -> np.ndarray:
    """``Y(batch,i,j) = A(batch,i,k) * B(batch,k,j)`` with broadcast batch dimensions.

    Matrix dimensions of size 1 get no index (a ``k`` of 1 is no sum at all): a kernel whose
    innermost loop runs once per element cannot vectorise (DCN's 221 x 1 x 1 products ran
    10x slower with them).

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> node = NodeContext("n", "MatMul", ("a", "b"), ("y",), 13, KernelSet("llvm"))
    >>> contract(node, np.ones((2, 3, 1)), np.full((2, 1, 1), 2.0), (2,), np.dtype("f8"))[1, :, 0]
    array([2., 2., 2.])
    >>> list(node.plan)
    ['Y(i,x) = A(i,x) * B(i)']
    """
    names = INDICES[:len(batch)]
    i, j, k = "ijk" if not batch else ("x", "y", "z")
    m, inner, n = a.shape[-2], a.shape[-1], b.shape[-1]
    a_text, a_view = _batched("A", a, batch, names, [(i, m), (k, inner)])
    b_text, b_view = _batched("B", b, batch, names, [(k, inner), (j, n)])
    out = names + (i if m != 1 else "") + (j if n != 1 else "")
    statement = f"{output_access(out)} = {a_text} * {b_text}"
    result = node.run(statement, dtype, A=a_view, B=b_view)
    return result.reshape(batch + (m, n))


def _batched(name: str, array: np.ndarray, batch: tuple[int, ...], names: str,
             matrix: list[tuple[str, int]]) -> tuple[str, np.ndarray]:
    """The access of a batched matrix operand and its view, with broadcast batch dimensions
    and matrix dimensions of size 1 left out."""
    kept, kept_names = kept_dims(array.shape[:-2], batch, names)
    inner = [(index, size) for index, size in matrix if size != 1]
    view = array.reshape([array.shape[d] for d in kept] + [size for _, size in inner])
    indices = [*kept_names, *(index for index, _ in inner)]
    return (f"{name}({','.join(indices)})" if indices else name), view


@op("Gemm", since=11)
def gemm(node: NodeContext, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *,
         alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0
         ) -> np.ndarray:
    """``Y = alpha * op(A) @ op(B) + beta * C`` as one statement (or BLAS plus an epilogue)."""
    if a.ndim != 2 or b.ndim != 2:
        raise ta.ShapeError(f"{node}: Gemm needs 2-D A and B, got {a.shape} and {b.shape}")
    a_access = "A(k,i)" if transA else "A(i,k)"
    b_access = "B(j,k)" if transB else "B(k,j)"
    m, k = a.shape[::-1] if transA else a.shape
    k2, n = b.shape[::-1] if transB else b.shape
    if k != k2:
        raise ta.ShapeError(f"{node}: inner dimensions differ: op(A) is {m}x{k}, op(B) {k2}x{n}")
    dtype = compute_dtype(np.result_type(a.dtype, b.dtype))
    scale = "" if alpha == 1.0 else f"{literal(alpha)} * "
    if use_blas(dtype, m * k * n):
        node.note(f"BLAS (dense {m}x{k}x{n})")
        product = np.matmul(a.T if transA else a, b.T if transB else b).astype(dtype)
        if c is None and alpha == 1.0:
            return product.astype(a.dtype, copy=False)
        template = f"{scale}{{0}}"
        operands = [product]
        if c is not None and beta != 0.0:
            template += f" + {literal(beta)} * {{1}}" if beta != 1.0 else " + {1}"
            operands.append(c)
        return elementwise(node, template, *operands, dtype=dtype, out_dtype=a.dtype)
    statement = f"Y(i,j) = {scale}{a_access} * {b_access}"
    operands = {"A": a, "B": b}
    if c is not None and beta != 0.0:
        broadcast_shape(node, [np.empty((m, n), bool), c])
        c_text, c_view = access("C", c, (m, n), "ij")
        weight = "" if beta == 1.0 else f"{literal(beta)} * "
        statement += f" + {weight}{c_text}"
        operands["C"] = c_view
    return node.run(statement, dtype, **operands).reshape(m, n).astype(a.dtype, copy=False)
