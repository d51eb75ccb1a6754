"""ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceL2 and ReduceLogSumExp, with axes as an
attribute or an input.

Sums are one statement: ``Y(i) = X(i,j)`` sums over ``j`` (ReduceMean multiplies by 1/n);
ReduceL2 is ``Y(i) = sqrt(sum(j, X(i,j) * X(i,j)))``. ReduceLogSumExp subtracts the maxima
``M`` first, as onnxruntime does, so that ``exp`` cannot overflow:
``Y(i) = M(i) + log(sum(j, exp(X(i,j) - M(i))))``.
ReduceMax/ReduceMin run as one generated pass per row (``program.row_extreme``) for float32/64
and int32/64 values; the core's statements have no max/min reduction, so other dtypes run as a
tree of elementwise ``max``/``min`` kernels over the two overlapping halves of the reduced axis:
ceil(log2 n) calls of one compiled kernel.
"""
from __future__ import annotations

import math
from itertools import groupby
from typing import Callable, Sequence

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.kernels import (
    INDICES,
    NodeContext,
    compute_dtype,
    elementwise,
    literal,
    minus,
    output_access,
)
from tensoralg.onnx.ops.registry import op


def normalize_axes(node: NodeContext, axes: Sequence[int] | np.ndarray | None, rank: int,
                   noop_with_empty_axes: int = 0) -> list[int]:
    """Sorted, non-negative axes; all axes when none are given (unless noop_with_empty_axes)."""
    if axes is None or len(axes) == 0:
        return [] if noop_with_empty_axes else list(range(rank))
    result = []
    for axis in np.asarray(axes).reshape(-1).tolist():
        if not -rank <= axis < max(rank, 1):
            raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {rank}")
        result.append(axis % max(rank, 1))
    return sorted(set(result))


def kept_shape(shape: Sequence[int], axes: Sequence[int], keepdims: int) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def reduce_sum(node: NodeContext, x: np.ndarray, axes: list[int], keepdims: int,
               scale: float | None = None) -> np.ndarray:
    """``Y(kept) = X(all) [* scale]``: one statement summing over ``axes``. Neighbouring axes
    that are both summed, or both kept, are one axis of a view of ``x`` first (a global
    average pool of 7 x 7 maps sums 49 values a row, not 7 rows of 7)."""
    groups = [(summed, list(run)) for summed, run in groupby(range(x.ndim), lambda d: d in axes)]
    if len(groups) < x.ndim:
        merged = x.reshape([math.prod(x.shape[d] for d in group) for _, group in groups])
        result = reduce_sum(node, merged, [k for k, (summed, _) in enumerate(groups) if summed],
                            0, scale)
        return result.reshape(kept_shape(x.shape, axes, keepdims))
    if x.ndim > len(INDICES):
        raise ta.UnsupportedError(f"{node}: rank {x.ndim} is above {len(INDICES)}")
    dtype = compute_dtype(x.dtype, needs_float=scale is not None and x.dtype.kind != "f")
    indices = INDICES[:x.ndim]
    kept = "".join(indices[d] for d in range(x.ndim) if d not in axes)
    body = f"X({','.join(indices)})" if indices else "X"
    if scale is not None:
        body = f"{body} * {literal(scale)}"
    result = node.run(f"{output_access(kept)} = {body}", dtype, X=x)
    return result.reshape(kept_shape(x.shape, axes, keepdims)).astype(x.dtype, copy=False)


def reduce_extreme(node: NodeContext, x: np.ndarray, axes: list[int], keepdims: int,
                   function: str) -> np.ndarray:
    """Max or min over ``axes`` as a tree of elementwise ``function`` kernels."""
    out_shape = kept_shape(x.shape, axes, keepdims)
    kept = [d for d in range(x.ndim) if d not in axes]
    rows = math.prod(x.shape[d] for d in kept)
    n = math.prod(x.shape[d] for d in axes)
    if n == 0:
        return np.full(out_shape, _identity(x.dtype, function), dtype=x.dtype)
    span = sorted(axes)
    if span == list(range(span[0], span[-1] + 1)):
        # consecutive axes: one generated pass per row, in place in x's layout
        found = program.row_extreme(x, span[0], span[-1], function == "max")
        if found is not None:
            node.note(f"generated row {function} (one pass per row)")
            return found.reshape(out_shape)
    flat = np.transpose(x, kept + axes).reshape(rows, n)
    found = program.row_extreme(flat, 1, 1, function == "max")
    if found is not None:
        node.note(f"generated row {function} (one pass per row, over a transposed copy)")
        return found.reshape(out_shape)
    dtype = compute_dtype(x.dtype)
    statement = f"Y(i,j) = {function}(A(i,j), B(i,j))"
    while n > 1:
        half = (n + 1) // 2
        flat = node.run(statement, dtype, A=flat[:, :half], B=flat[:, n - half:])
        n = half
    return flat.reshape(out_shape).astype(x.dtype, copy=False)


def _summed(indices: str, axes: Sequence[int], body: str) -> str:
    """``body`` inside an explicit ``sum`` over each reduced index (innermost last)."""
    for axis in reversed(sorted(axes)):
        body = f"sum({indices[axis]}, {body})"
    return body


def reduce_l2(node: NodeContext, x: np.ndarray, axes: list[int], keepdims: int) -> np.ndarray:
    """``sqrt`` of the sum of squares over ``axes``: one statement (integers in float64,
    truncated back, as onnxruntime casts its result)."""
    return reduce_of_sum(node, x, axes, keepdims, "{0} * {0}", "sqrt({0})", True)


def reduce_of_sum(node: NodeContext, x: np.ndarray, axes: list[int], keepdims: int,
                  term: str, outer: str, needs_float: bool) -> np.ndarray:
    """``outer`` applied to the sum of ``term`` over ``axes``, one statement: ReduceL1
    (``abs(x)``), ReduceSumSquare (``x * x``), ReduceLogSum (``log`` of the sum) and ReduceL2
    (``sqrt`` of the sum of ``x * x``). ``term``
    and ``outer`` are format strings of the access (``{0}``) and of the sum."""
    if x.ndim > len(INDICES):
        raise ta.UnsupportedError(f"{node}: rank {x.ndim} is above {len(INDICES)}")
    dtype = compute_dtype(x.dtype, needs_float=needs_float)
    indices = INDICES[:x.ndim]
    kept = "".join(indices[d] for d in range(x.ndim) if d not in axes)
    summed = _summed(indices, axes, term.format(f"X({','.join(indices)})"))
    result = node.run(f"{output_access(kept)} = {outer.format(summed)}", dtype, X=x)
    return result.reshape(kept_shape(x.shape, axes, keepdims)).astype(x.dtype, copy=False)


def reduce_log_sum_exp(node: NodeContext, x: np.ndarray, axes: list[int], keepdims: int
                       ) -> np.ndarray:
    """``log(sum(exp(x)))`` over ``axes``, shifted by the maxima (see the module docstring).

    An infinite or NaN maximum is replaced by 0 before the shift (a NumPy step on the small
    result): ``x - M`` would be NaN where every value is -inf, whose answer is log(0) = -inf.
    """
    if x.ndim > len(INDICES):
        raise ta.UnsupportedError(f"{node}: rank {x.ndim} is above {len(INDICES)}")
    dtype = compute_dtype(x.dtype, needs_float=True)
    maxima = reduce_extreme(node, x, axes, 0, "max").astype(dtype)
    maxima = np.where(np.isfinite(maxima), maxima, 0).astype(dtype)
    indices = INDICES[:x.ndim]
    kept = "".join(indices[d] for d in range(x.ndim) if d not in axes)
    x_access = f"X({','.join(indices)})"
    m_access = f"M({','.join(kept)})" if kept else "M"
    summed = _summed(indices, axes, f"exp({minus(x_access, m_access)})")
    result = node.run(f"{output_access(kept)} = {m_access} + log({summed})", dtype, X=x,
                      M=maxima)
    return result.reshape(kept_shape(x.shape, axes, keepdims)).astype(x.dtype, copy=False)


def _identity(dtype: np.dtype, function: str) -> float | int:
    if dtype.kind == "f":
        return -np.inf if function == "max" else np.inf
    info = np.iinfo(dtype) if dtype.kind in "iu" else np.iinfo(np.uint8)
    return info.min if function == "max" else info.max


def reduction_op(compute: Callable[[NodeContext, np.ndarray, list[int], int], np.ndarray],
                 axes_input: bool,
                 noop: Callable[[NodeContext, np.ndarray], np.ndarray] | None = None
                 ):  # type: ignore[no-untyped-def]
    """The op function of a Reduce* node: axes from the attribute (``axes_input`` False) or the
    second input; ``compute(node, x, axes, keepdims)`` does the reduction. With no axis to
    reduce (``noop_with_empty_axes``, or a scalar) the result is ``noop(node, x)``: each element
    reduced alone, as onnxruntime answers (|x| for ReduceL2), by default ``x`` itself."""
    def run(node: NodeContext, x: np.ndarray, axes_in: np.ndarray | None = None, *,
            axes: Sequence[int] | None = None, keepdims: int = 1,
            noop_with_empty_axes: int = 0) -> np.ndarray:
        chosen = normalize_axes(node, axes_in if axes_input else axes, x.ndim,
                                noop_with_empty_axes)
        if not chosen:
            if noop is not None:
                return noop(node, x)
            node.note("no axes: identity")
            return x
        return compute(node, x, chosen, keepdims)
    return run


def _magnitude(node: NodeContext, x: np.ndarray) -> np.ndarray:
    """ReduceL2 over no axis: the L2 norm of each element alone, ``|x|``."""
    return elementwise(node, "abs({0})", x, dtype=compute_dtype(x.dtype))


def _reduce(kind: str) -> Callable[[NodeContext, np.ndarray, list[int], int], np.ndarray]:
    def compute(node: NodeContext, x: np.ndarray, chosen: list[int], keepdims: int
                ) -> np.ndarray:
        if kind == "sum":
            return reduce_sum(node, x, chosen, keepdims)
        if kind == "mean":
            count = math.prod(x.shape[d] for d in chosen)
            if count == 0:
                return np.full(kept_shape(x.shape, chosen, keepdims), np.nan, x.dtype)
            return reduce_sum(node, x, chosen, keepdims, 1.0 / count)
        if kind == "l2":
            return reduce_l2(node, x, chosen, keepdims)
        if kind == "logsumexp":
            return reduce_log_sum_exp(node, x, chosen, keepdims)
        if kind in _OF_SUM:
            term, outer, needs_float = _OF_SUM[kind][:3]
            return reduce_of_sum(node, x, chosen, keepdims, term, outer, needs_float)
        return reduce_extreme(node, x, chosen, keepdims, kind)
    return compute


# kind -> (term, outer, needs_float, the answer with no axis to reduce: each element alone)
_OF_SUM = {"l1": ("abs({0})", "{0}", False, "abs({0})"),
           "sumsquare": ("{0} * {0}", "{0}", False, "{0} * {0}"),
           "logsum": ("{0}", "log({0})", True, "log({0})")}


def _alone(kind: str) -> Callable[[NodeContext, np.ndarray], np.ndarray] | None:
    """What a reduction over no axis answers, each element reduced alone (onnxruntime's
    |x| for ReduceL1 and ReduceL2, x * x for ReduceSumSquare, log x for ReduceLogSum)."""
    if kind == "l2":
        return _magnitude
    if kind not in _OF_SUM:
        return None
    template, needs_float = _OF_SUM[kind][3], _OF_SUM[kind][2]

    def noop(node: NodeContext, x: np.ndarray) -> np.ndarray:
        return elementwise(node, template, x, dtype=compute_dtype(x.dtype, needs_float))
    return noop


for _name, _kind, _input_since in [("ReduceSum", "sum", 13), ("ReduceMean", "mean", 18),
                                   ("ReduceMax", "max", 18), ("ReduceMin", "min", 18),
                                   ("ReduceL2", "l2", 18),
                                   ("ReduceLogSumExp", "logsumexp", 18),
                                   ("ReduceL1", "l1", 18), ("ReduceSumSquare", "sumsquare", 18),
                                   ("ReduceLogSum", "logsum", 18)]:
    _noop = _alone(_kind)
    op(_name, since=1)(reduction_op(_reduce(_kind), axes_input=False, noop=_noop))
    op(_name, since=_input_since)(reduction_op(_reduce(_kind), axes_input=True, noop=_noop))
