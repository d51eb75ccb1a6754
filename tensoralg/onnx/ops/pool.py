"""MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool and GlobalLpPool (any
spatial rank).

The windows are extracted by :func:`windows.patches` (a strided view of the padded input, no
loop over pixels) and flattened to a matrix ``P(i,j,k)``: ``i`` runs over (image, channel),
``j`` over output positions and ``k`` over the cells of a window. Then, in tensoralg:

- AveragePool: ``Y(i,j) = sum(k, P(i,j,k)) / C(j)`` with ``C`` the window sizes, counted with
  or without the padding (``count_include_pad``; padding is zero, so it adds nothing to sums);
- LpPool: ``Y(i,j) = pow(sum(k, pow(abs(P(i,j,k)), p)), 1/p)``;
- MaxPool: the tree of elementwise ``max`` kernels of :func:`reduce.reduce_extreme` over ``k``
  (padding is -inf, or the smallest integer). Its optional ``Indices`` output is the smallest
  flat input index holding the maximum: ``T(i,j,k) = eq(P, M) * (I - L) + L`` over the patch of
  flat indices ``I`` (``L`` a large sentinel), then the ``min`` tree.
- The global pools reduce all spatial axes with :func:`reduce.reduce_sum` and
  :func:`reduce.reduce_extreme`.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, literal
from tensoralg.onnx.ops.reduce import reduce_extreme, reduce_sum
from tensoralg.onnx.ops.registry import op
from tensoralg.onnx.ops.windows import Windows, lowest, patches, window_counts, windows

# Larger than any flat index a test model holds, and exact in float64.
_NO_INDEX = float(2 ** 52)


def _check_input(node: NodeContext, x: np.ndarray, kernel_shape: Sequence[int]) -> None:
    if x.ndim < 3:
        raise ta.ShapeError(f"{node}: X must be (N, C, ...) with spatial axes, got {x.shape}")
    if len(kernel_shape) != x.ndim - 2:
        raise ta.ShapeError(f"{node}: kernel_shape {list(kernel_shape)} does not match X "
                            f"{x.shape}")


def _as_matrix(view: np.ndarray, geometry: Windows) -> np.ndarray:
    """Windows ``(N, C, *out, *kernel)`` as ``P(i, j, k)``; this copy is the patch matrix."""
    rows = view.shape[0] * view.shape[1]
    return view.reshape(rows, math.prod(geometry.out), math.prod(geometry.kernel))


@op("AveragePool", since=1)
def average_pool(node: NodeContext, x: np.ndarray, *, kernel_shape: Sequence[int],
                 auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                 dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
                 strides: Sequence[int] | None = None) -> np.ndarray:
    _check_input(node, x, kernel_shape)
    geometry = windows(node, x.shape[2:], kernel_shape, strides=strides, dilations=dilations,
                       pads=pads, auto_pad=auto_pad, ceil_mode=ceil_mode)
    node.note("windows: numpy sliding-window view, reshaped to P(i,j,k)")
    matrix = _as_matrix(patches(x, geometry, 0), geometry)
    counts = window_counts(geometry, bool(count_include_pad)).reshape(-1)
    dtype = compute_dtype(x.dtype, needs_float=True)
    result = node.run("Y(i,j) = sum(k, P(i,j,k)) / C(j)", dtype, P=matrix, C=counts)
    return result.reshape(*x.shape[:2], *geometry.out).astype(x.dtype, copy=False)


@op("LpPool", since=11)
def lp_pool(node: NodeContext, x: np.ndarray, *, kernel_shape: Sequence[int],
            auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: Sequence[int] | None = None,
            p: int = 2, pads: Sequence[int] | None = None,
            strides: Sequence[int] | None = None) -> np.ndarray:
    _check_input(node, x, kernel_shape)
    geometry = windows(node, x.shape[2:], kernel_shape, strides=strides, dilations=dilations,
                       pads=pads, auto_pad=auto_pad, ceil_mode=ceil_mode)
    node.note("windows: numpy sliding-window view, reshaped to P(i,j,k)")
    matrix = _as_matrix(patches(x, geometry, 0), geometry)
    dtype = compute_dtype(x.dtype, needs_float=True)
    statement = (f"Y(i,j) = pow(sum(k, pow(abs(P(i,j,k)), {literal(float(p))})), "
                 f"{literal(1.0 / p)})")
    result = node.run(statement, dtype, P=matrix)
    return result.reshape(*x.shape[:2], *geometry.out).astype(x.dtype, copy=False)


def _flat_indices(shape: Sequence[int], storage_order: int) -> np.ndarray:
    """The flat index of every cell of an (N, C, *spatial) tensor, spatial axes row-major
    (``storage_order=0``) or column-major (1), as MaxPool's Indices output counts them."""
    spatial = tuple(shape[2:])
    order = "F" if storage_order else "C"
    within = np.ravel_multi_index(np.indices(spatial).reshape(len(spatial), -1), spatial,
                                  order=order).reshape(spatial)
    planes = np.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], *[1] * len(spatial))
    return planes * math.prod(spatial) + within


def _argmax(node: NodeContext, matrix: np.ndarray, maxima: np.ndarray, x: np.ndarray,
            geometry: Windows, storage_order: int) -> np.ndarray:
    index_view = patches(_flat_indices(x.shape, storage_order), geometry, -1)
    indices = _as_matrix(index_view, geometry)
    statement = (f"Y(i,j,k) = eq(P(i,j,k), M(i,j)) * (I(i,j,k) - {literal(_NO_INDEX)}) + "
                 f"{literal(_NO_INDEX)}")
    candidates = node.run(statement, np.dtype(np.float64), P=matrix, M=maxima, I=indices)
    first = reduce_extreme(node, candidates, [2], 0, "min")
    return first.astype(np.int64)


@op("MaxPool", since=1)
def max_pool(node: NodeContext, x: np.ndarray, *, kernel_shape: Sequence[int],
             auto_pad: str = "NOTSET", ceil_mode: int = 0,
             dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
             storage_order: int = 0, strides: Sequence[int] | None = None
             ) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
    _check_input(node, x, kernel_shape)
    geometry = windows(node, x.shape[2:], kernel_shape, strides=strides, dilations=dilations,
                       pads=pads, auto_pad=auto_pad, ceil_mode=ceil_mode)
    node.note("windows: numpy sliding-window view, reshaped to P(i,j,k)")
    matrix = _as_matrix(patches(x, geometry, lowest(x.dtype)), geometry)
    maxima = reduce_extreme(node, matrix, [2], 0, "max")
    shape = (*x.shape[:2], *geometry.out)
    if len(node.outputs) < 2 or not node.outputs[1]:
        return maxima.reshape(shape)
    indices = _argmax(node, matrix, maxima, x, geometry, storage_order)
    return maxima.reshape(shape), indices.reshape(shape)


@op("GlobalAveragePool", since=1)
def global_average_pool(node: NodeContext, x: np.ndarray) -> np.ndarray:
    if x.ndim < 3:
        raise ta.ShapeError(f"{node}: X must be (N, C, ...) with spatial axes, got {x.shape}")
    axes = list(range(2, x.ndim))
    return reduce_sum(node, x, axes, 1, 1.0 / math.prod(x.shape[2:]))


@op("GlobalMaxPool", since=1)
def global_max_pool(node: NodeContext, x: np.ndarray) -> np.ndarray:
    if x.ndim < 3:
        raise ta.ShapeError(f"{node}: X must be (N, C, ...) with spatial axes, got {x.shape}")
    return reduce_extreme(node, x, list(range(2, x.ndim)), 1, "max")


@op("GlobalLpPool", since=2)
def global_lp_pool(node: NodeContext, x: np.ndarray, *, p: int = 2) -> np.ndarray:
    """``Y(n,c) = (sum over the spatial axes of |X|^p)^(1/p)``, one statement."""
    if x.ndim < 3:
        raise ta.ShapeError(f"{node}: X must be (N, C, ...) with spatial axes, got {x.shape}")
    dtype = compute_dtype(x.dtype, needs_float=True)
    statement = (f"Y(i) = pow(sum(k, pow(abs(P(i,k)), {literal(float(p))})), "
                 f"{literal(1.0 / p)})")
    result = node.run(statement, dtype, P=x.reshape(math.prod(x.shape[:2]), -1))
    return result.reshape(*x.shape[:2], *(1,) * (x.ndim - 2)).astype(x.dtype, copy=False)
