"""GridSample (opset 16: 4-D, ``bilinear``/``nearest``/``bicubic``; opset 20: any rank,
``linear``/``nearest``/``cubic``), as one generated kernel (2-D bilinear, zeros or border
padding: ``program.grid_sample_call`` computes the taps below in the kernel, to the bit), one
gather of each point's taps (:func:`sampled_by_taps`) or one sparse·dense contraction.

Every output point reads a few input points with weights that depend on the grid only: one
(nearest), 2 per spatial axis (linear) or 4 (cubic, Keys' kernel with a = -0.75), combined over
the axes. Those taps and weights are computed in NumPy from the grid, in float32 (float64
for a float64 grid) as onnxruntime and onnx's reference compute them (the coordinate
``((g + 1) * size - 1) / 2``, or ``(g + 1) / 2 * (size - 1)`` with ``align_corners``; nearest
rounds half to even), and collected into one CSR matrix ``S`` of shape (batch x output points, batch x input points),
block-diagonal over the batch. The sampling is then the generated kernel of

    Y(p,c) = S(p,q) * X(q,c)

with ``X`` the input laid out channels-last. Where a point has at most
``program.INTERPOLATION_TAPS`` taps (all but 3-D cubic) the taps are not assembled into a
matrix: each image's table of taps and weights is gathered from its NCHW planes by the
generated kernel of ``program.interpolation_call`` (RAFT's correlation lookups, thousands of
one-channel images: the model went from 0.81-0.83x to 1.17-1.21x onnxruntime's speed, one
thread; with 2-D bilinear sampling in one kernel that computes the taps too, 1.82-1.85x,
``benchmarks/ONNX_HELD_OUT_FIFTEENTH_RESULTS.md``). Padding follows onnxruntime (and torch's
``grid_sample``): a coordinate outside the image is first clamped (``border``) or reflected
(``reflection``) into it, except in cubic mode, and each tap outside the image then reads 0
(``zeros``), the nearest edge pixel (``border``) or its mirror image (``reflection``). Taps that land on one pixel (clamped edges) are summed into one
entry.
"""
from __future__ import annotations

import math
from itertools import product
from typing import Iterator

import numpy as np
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.registry import op

MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
         "nearest": "nearest"}
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = -0.75
FAR = 2.0 ** 40     # how far outside a coordinate is kept (see _axis_taps)
# An output of more than this many taps is refused (its matrix would not fit in memory).
MAX_TAPS = 2 ** 28


def unnormalised(grid: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """Grid coordinates in [-1, 1] as pixel coordinates of an axis of ``size``, in float32.

    >>> unnormalised(np.array([-1.0, 1.0], np.float32), 4, False).tolist()
    [-0.5, 3.5]
    """
    real = grid.dtype.type
    one, two = real(1), real(2)
    if align_corners:
        return (grid + one) / two * real(size - 1)
    return ((grid + one) * real(size) - one) / two


def reflected(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """``x`` reflected off ``low`` and ``high`` until it lies between them (float64, as the
    reference's borders are).

    >>> reflected(np.array([-1.5, 5.0, 2.0]), -0.5, 3.5).tolist()
    [0.5, 2.0, 2.0]
    """
    x = np.asarray(x, np.float64)
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = x < low, x > high
    distance = np.where(below, low - x, np.where(above, x - high, 0.0))
    turns = np.trunc(distance / span)
    rest = distance - turns * span
    even = turns % 2 == 0
    from_low = np.where(even, low + rest, high - rest)
    from_high = np.where(even, high - rest, low + rest)
    return np.where(below, from_low, np.where(above, from_high, x))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys' weights of the taps at -1, 0, 1, 2 from ``floor(x)``, ``t = x - floor(x)``."""
    real = t.dtype.type
    a, one, two = real(CUBIC_A), real(1), real(2)
    five, eight, four = real(5), real(8), real(4)
    t = np.abs(t)
    u, v, w = t + one, one - t, two - t
    return [((a * u - five * a) * u + eight * a) * u - four * a,
            ((a + two) * t - (a + real(3))) * t * t + one,
            ((a + two) * v - (a + real(3))) * v * v + one,
            ((a * w - five * a) * w + eight * a) * w - four * a]


def _axis_taps(x: np.ndarray, size: int, mode: str, padding: str, low: float, high: float
               ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The taps of one axis for every output point: ``(index, weight)`` pairs, an index of -1
    reading 0 (``zeros`` padding outside the image)."""
    real = x.dtype.type
    if padding == "zeros" or (padding == "border" and mode == "cubic"):
        # A finite grid may put a point far outside (1e30), past what an int64 index holds:
        # moved to 2^40 away, still outside, its taps read the same (none, or the clamped
        # edge); the generated kernel does the same (codegen/grid_sample.py).
        x = np.clip(x, real(-FAR), real(FAR))
    if mode == "nearest":
        x = np.rint(x)
    # Cubic taps are placed from the coordinate as it is, each tap then padded on its own (as
    # torch's grid_sampler and onnxruntime do; onnx's reference moves the coordinate first).
    outside = (x < low) | (x > high) if mode != "cubic" else np.zeros(x.shape, bool)
    if padding == "border":
        x = np.where(outside, np.clip(x, 0, size - 1), x).astype(real)
    elif padding == "reflection":
        x = np.where(outside, reflected(x, low, high), x).astype(real)
    if mode == "nearest":
        taps = [(x.astype(np.int64), np.ones(x.shape, real))]
    else:
        start = np.floor(x)
        t = (x - start).astype(real)
        first = start.astype(np.int64)
        if mode == "linear":
            t = np.abs(t)
            taps = [(first, real(1) - t), (first + 1, t)]
        else:
            taps = [(first + k - 1, w) for k, w in enumerate(_cubic_weights(t))]
    placed = []
    for index, weight in taps:
        if padding == "zeros":
            index = np.where((index >= 0) & (index < size), index, -1)
        elif padding == "border":
            index = np.clip(index, 0, size - 1)
        else:
            index = np.trunc(reflected(index, low, high)).astype(np.int64)
        placed.append((index, weight))
    return placed


def point_taps(grid: np.ndarray, sizes: tuple[int, ...], mode: str, padding: str,
               align_corners: bool) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per tap (a combination of one tap per axis), for every output point of every image:
    the input point it reads (flat within its image), its weight (float64) and whether it
    reads the image at all (``zeros`` padding outside it reads 0)."""
    batch, rank = grid.shape[0], len(sizes)
    points = math.prod(grid.shape[1:-1])
    coordinates = grid.reshape(batch * points, rank)[:, ::-1]     # the grid lists x first
    per_axis = []
    for axis, size in enumerate(sizes):
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        x = unnormalised(coordinates[:, axis], size, align_corners)
        per_axis.append(_axis_taps(x, size, mode, padding, low, high))
    strides = [math.prod(sizes[axis + 1:]) for axis in range(rank)]
    for combination in product(*per_axis):
        column = np.zeros(batch * points, np.int64)
        weight, valid = np.ones(batch * points), np.ones(batch * points, bool)
        for (index, tap), stride in zip(combination, strides):
            valid &= index >= 0
            column += index * stride
            weight = weight * tap.astype(np.float64)
        yield column, weight, valid


def sampled_by_taps(x: np.ndarray, grid: np.ndarray, mode: str, padding: str,
                    align_corners: bool) -> np.ndarray | None:
    """GridSample of ``x`` (N, C, *spatial, float32/float64) as one generated gather per
    image (``tensoralg.program.interpolation_call``): each output point's taps and weights
    (:func:`point_taps`) read straight from the NCHW planes, no matrix assembled and no
    channels-last copies. The same products as the CSR contraction, but for taps that land
    on one pixel (clamped edges), which are added one by one instead of their weights first.
    None where a point has more taps than the gather takes (3-D cubic) or the planes are too
    large for its 32-bit indices."""
    rank = x.ndim - 2
    batch, channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    size, points = math.prod(sizes), math.prod(grid.shape[1:-1])
    count = {"nearest": 1, "linear": 2, "cubic": 4}[mode] ** rank
    if count > program.INTERPOLATION_TAPS or size >= 2 ** 31:
        return None
    # one table of taps per image: (batch, count, points)
    taps = np.empty((count, batch, points), np.int32)
    weights = np.empty((count, batch, points), x.dtype)
    for t, (column, weight, valid) in enumerate(point_taps(grid, sizes, mode, padding,
                                                           align_corners)):
        taps[t] = np.where(valid, column, -1).reshape(batch, points)
        weights[t] = weight.reshape(batch, points)
    out = np.empty((batch * channels, points), x.dtype)
    call = program.interpolation_call(
        np.ascontiguousarray(x).reshape(batch * channels, size), out,
        taps=np.ascontiguousarray(taps.transpose(1, 0, 2)),
        weights=np.ascontiguousarray(weights.transpose(1, 0, 2)))
    if call is None:
        return None
    call()
    return out.reshape(batch, channels, *grid.shape[1:-1])


def sampling_matrix(grid: np.ndarray, sizes: tuple[int, ...], mode: str, padding: str,
                    align_corners: bool) -> sp.csr_array:
    """The CSR matrix ``S`` (batch x output points, batch x input points) of GridSample's
    weights (module docstring).

    >>> grid = np.array([[[[-1.0, -1.0], [1.0, 1.0]]]], np.float32)     # 1 x 1 x 2 x 2
    >>> sampling_matrix(grid, (2, 2), "linear", "zeros", True).toarray().tolist()
    [[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    """
    batch = grid.shape[0]
    points = math.prod(grid.shape[1:-1])
    rows, columns, weights = [], [], []
    row = np.arange(batch * points)
    base = (row // points) * math.prod(sizes)
    for column, weight, valid in point_taps(grid, sizes, mode, padding, align_corners):
        rows.append(row[valid])
        columns.append(base[valid] + column[valid])
        weights.append(weight[valid])
    shape = (batch * points, batch * math.prod(sizes))
    matrix = sp.csr_array((np.concatenate(weights), (np.concatenate(rows),
                                                     np.concatenate(columns))), shape=shape)
    matrix.sum_duplicates()
    return matrix


@op("GridSample", since=16)
def grid_sample(node: NodeContext, x: np.ndarray, grid: np.ndarray, *, mode: str = "",
                padding_mode: str = "zeros", align_corners: int = 0) -> np.ndarray:
    """Sample ``x`` (N, C, *spatial) at ``grid`` (N, *out, rank) by the contraction of the
    module docstring."""
    mode = mode or ("bilinear" if node.version < 20 else "linear")
    if mode not in MODES or (node.version < 20 and mode in ("linear", "cubic")) or \
            (node.version >= 20 and mode in ("bilinear", "bicubic")):
        raise ta.UnsupportedError(f"{node}: GridSample mode {mode!r} is not one of opset "
                                  f"{node.version}'s")
    if padding_mode not in PADDINGS:
        raise ta.UnsupportedError(f"{node}: GridSample padding_mode {padding_mode!r} is not one "
                                  f"of {', '.join(PADDINGS)}")
    rank = x.ndim - 2
    if rank < 1 or grid.ndim != x.ndim or grid.shape[-1] != rank or \
            grid.shape[0] != x.shape[0] or (node.version < 20 and rank != 2):
        raise ta.ShapeError(f"{node}: X {x.shape} and grid {grid.shape} must be (N, C, *spatial)"
                            f" and (N, *out, {max(rank, 1)})")
    if x.dtype.kind != "f" or grid.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: GridSample takes float tensors, not {x.dtype} and "
                                  f"{grid.dtype}")
    taps = {"nearest": 1, "linear": 2, "cubic": 4}[MODES[mode]] ** rank
    if grid.size // rank * taps > MAX_TAPS:
        raise ta.MemoryLimitError(f"{node}: {grid.size // rank} output points of {taps} taps "
                                  f"each are too many to sample at once")
    if not np.isfinite(grid).all():
        raise ta.InputError(f"{node}: the grid holds NaN or infinite coordinates")
    batch, channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    out_shape = (batch, channels, *grid.shape[1:-1])
    if 0 in out_shape or 0 in sizes:
        node.note("empty GridSample")
        return np.zeros(out_shape, x.dtype)
    dtype = compute_dtype(x.dtype)
    # coordinates and weights in float32 (float64 for a float64 grid), as onnxruntime's
    grid = grid.astype(np.float64 if grid.dtype == np.float64 else np.float32, copy=False)
    if rank == 2 and MODES[mode] == "linear" and grid.dtype == dtype:
        out = np.empty(out_shape, dtype)
        call = program.grid_sample_call(np.ascontiguousarray(x, dtype=dtype),
                                        np.ascontiguousarray(grid), out, bool(align_corners),
                                        padding_mode)
        if call is not None:
            node.note(f"GridSample linear/{padding_mode}: taps and weights computed in a "
                      f"generated kernel")
            return call().astype(x.dtype, copy=False)
    if dtype in (np.float32, np.float64):
        gathered = sampled_by_taps(x.astype(dtype, copy=False), grid, MODES[mode],
                                   padding_mode, bool(align_corners))
        if gathered is not None:
            node.note(f"GridSample {MODES[mode]}/{padding_mode}: taps and weights built in "
                      f"NumPy, gathered from the NCHW planes by a generated kernel")
            return gathered.astype(x.dtype, copy=False)
    matrix = sampling_matrix(grid, sizes, MODES[mode], padding_mode, bool(align_corners))
    node.note(f"GridSample {MODES[mode]}/{padding_mode}: sampling matrix of "
              f"{matrix.nnz} weights built in NumPy")
    # channels last, so that each sampled point reads its taps' channel rows
    columns = np.moveaxis(x, 1, -1).reshape(-1, channels)
    result = node.run("Y(p,c) = S(p,q) * X(q,c)", dtype, formats={"S": ta.CSR},
                      S=matrix.astype(dtype), X=np.ascontiguousarray(columns, dtype=dtype))
    result = np.asarray(result).reshape(batch, -1, channels)
    return np.moveaxis(result, -1, 1).reshape(out_shape).astype(x.dtype, copy=False)


def base_grid(sizes: tuple[int, ...], align_corners: bool, dtype: np.dtype) -> np.ndarray:
    """The normalised coordinates of every pixel of an image of ``sizes``, x first, then a 1:
    shape (pixels, rank + 1), pixels in C order.

    >>> base_grid((1, 2), True, np.dtype(np.float32)).tolist()
    [[-1.0, 0.0, 1.0], [1.0, 0.0, 1.0]]
    """
    axes = []
    for size in sizes:
        if align_corners:
            axes.append(np.linspace(-1, 1, size) if size > 1 else np.zeros(size))
        else:
            axes.append((np.arange(size) * 2.0 + 1.0) / size - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    columns = [m.reshape(-1) for m in mesh[::-1]] + [np.ones(math.prod(sizes))]
    return np.stack(columns, axis=1).astype(dtype)


@op("AffineGrid", since=20)
def affine_grid(node: NodeContext, theta: np.ndarray, size: np.ndarray, *,
                align_corners: int = 0) -> np.ndarray:
    """The sampling grid of the affine maps ``theta`` (N, 2, 3) or (N, 3, 4) over an output of
    ``size`` (N, C, H, W) or (N, C, D, H, W): each pixel's base coordinates ``(x, y[, z], 1)``
    times ``theta``, the statement ``G(n,p,i) = B(p,k) * T(n,i,k)``."""
    dims = [int(v) for v in np.asarray(size).reshape(-1)]
    rank = len(dims) - 2
    if rank not in (2, 3) or theta.shape != (dims[0], rank, rank + 1) or min(dims) < 0:
        raise ta.ShapeError(f"{node}: theta {theta.shape} and size {dims} must be (N, 2, 3) "
                            f"with (N, C, H, W), or (N, 3, 4) with (N, C, D, H, W)")
    if theta.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: AffineGrid takes float theta, not {theta.dtype}")
    sizes = tuple(dims[2:])
    out_shape = (dims[0], *sizes, rank)
    if 0 in out_shape:
        return np.zeros(out_shape, theta.dtype)
    dtype = compute_dtype(theta.dtype)
    base = base_grid(sizes, bool(align_corners), dtype)
    grid = node.run("G(n,p,i) = B(p,k) * T(n,i,k)", dtype, B=base, T=theta)
    return np.asarray(grid).reshape(out_shape).astype(theta.dtype, copy=False)
