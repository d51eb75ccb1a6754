"""Resize, modes nearest, linear and cubic, one resized axis at a time (interpolation is
separable).

For each resized axis, every output position ``o`` maps to a source coordinate ``x(o)`` by the
``coordinate_transformation_mode`` (computed in float32, as onnxruntime computes it, so that
ties between two source pixels break the same way):

    half_pixel            (o + 0.5) / scale - 0.5
    half_pixel_symmetric  the same, shifted so the centres of input and output coincide
    pytorch_half_pixel    as half_pixel, but 0 when the output has one position
    align_corners         o * (in - 1) / (out - 1)
    asymmetric            o / scale
    tf_crop_and_resize    the roi's [start, end] (fractions of in - 1) spread over the output;
                          positions outside the input take ``extrapolation_value``

- **nearest** rounds ``x`` by ``nearest_mode`` into ``[0, in)`` and gathers (NumPy ``take``:
  data movement, exact for every dtype);
- **linear** clamps ``x`` into ``[0, in - 1]`` and mixes the two pixels around it with the
  weights onnxruntime uses;
- **cubic** mixes the four pixels ``floor(x) - 1 .. floor(x) + 2`` with Keys' cubic
  convolution weights (``cubic_coeff_a``, default -0.75; pixels past an end repeat the end
  pixel, or with ``exclude_outside`` drop out and the other weights are renormalised).

The weights of either mode form a sparse matrix ``M`` (out x in, two or four entries a row),
and the axis is resized by one tensoralg contraction with ``M`` in CSR::

      Y(i,a,k) = sum(j, M(a,j) * X(i,j,k))      X viewed as (before, in, after)

Output sizes come from ``sizes`` (with ``keep_aspect_ratio_policy``) or ``scales``
(``floor(scale * in)``), on all axes or on ``axes``.

With ``antialias`` a linear or cubic pass that shrinks its axis by ``scale < 1`` widens its
filter to ``1 / scale`` times the pixel spacing (the triangle or cubic kernel evaluated at
``scale * (tap - x)``, over ``2 / scale`` or ``4 / scale`` taps, weights summing to one), as
onnxruntime and the ONNX reference do; growing passes are the plain ones.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.registry import op

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _check(attributes: dict) -> str | None:
    mode = attributes.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        return f"Resize mode {mode!r} is not supported (nearest, linear and cubic are)"
    choices = [("coordinate_transformation_mode", "half_pixel", COORDINATE_MODES),
               ("nearest_mode", "round_prefer_floor", NEAREST_MODES),
               ("keep_aspect_ratio_policy", "stretch", ASPECT_POLICIES)]
    for name, default, allowed in choices:
        if attributes.get(name, default) not in allowed:
            return f"Resize {name}={attributes[name]!r} is not one of {', '.join(allowed)}"
    return None


def _values(array: np.ndarray | None) -> list[float] | None:
    """The entries of an optional input; None when it is missing or empty."""
    if array is None or np.asarray(array).size == 0:
        return None
    return np.asarray(array).reshape(-1).tolist()


def output_geometry(node: NodeContext, shape: Sequence[int], axes: list[int],
                    scales: list[float] | None, sizes: list[float] | None, policy: str
                    ) -> tuple[list[int], list[float]]:
    """Output size and scale of every axis in ``axes``, as onnxruntime computes them (scales
    in float32; an output size from a scale is ``floor(scale * in)``)."""
    if (scales is None) == (sizes is None):
        raise ta.ShapeError(f"{node}: exactly one of scales and sizes must be given")
    given = sizes if sizes is not None else scales
    if len(given) != len(axes):
        raise ta.ShapeError(f"{node}: {len(given)} {'sizes' if sizes else 'scales'} for "
                            f"{len(axes)} resized axes")
    inputs = [shape[a] for a in axes]
    if scales is not None:
        factors = [np.float32(s) for s in scales]
        if any(not f > 0 for f in factors):
            raise ta.ShapeError(f"{node}: scales {scales} must be positive")
        return [int(f * np.float32(n)) for f, n in zip(factors, inputs)], \
            [float(f) for f in factors]
    wanted = [int(s) for s in sizes]
    if any(s < 0 for s in wanted):
        raise ta.ShapeError(f"{node}: sizes {wanted} must not be negative")
    if policy != "stretch":
        ratios = [np.float32(s) / np.float32(n) for s, n in zip(wanted, inputs) if n]
        factor = (min if policy == "not_larger" else max)(ratios, default=np.float32(1))
        wanted = [int(factor * np.float32(n) + np.float32(0.5)) for n in inputs]
        return wanted, [float(factor)] * len(axes)
    return wanted, [float(np.float32(s) / np.float32(n)) if n else 1.0
                    for s, n in zip(wanted, inputs)]


def source_coordinates(mode: str, out: int, size: int, scale: float,
                       roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
    """The source coordinate of each of ``out`` positions (float32), and for
    ``tf_crop_and_resize`` which of them fall outside the input (else None)."""
    o = np.arange(out, dtype=np.float32)
    f32 = np.float32
    s, n = f32(scale), f32(size)
    if mode == "align_corners":
        x = o * (n - 1) / f32(out - 1) if out > 1 else np.zeros(out, np.float32)
    elif mode == "asymmetric":
        x = o / s
    elif mode == "pytorch_half_pixel":
        x = (o + f32(0.5)) / s - f32(0.5) if out > 1 else np.zeros(out, np.float32)
    elif mode == "half_pixel_symmetric":
        adjustment = f32(out) / (s * n)
        offset = n / f32(2) * (f32(1) - adjustment)
        x = offset + (o + f32(0.5)) / s - f32(0.5)
    elif mode == "tf_crop_and_resize":
        start, end = f32(roi[0]), f32(roi[1])
        if out > 1:
            x = start * (n - 1) + o * (end - start) * (n - 1) / f32(out - 1)
        else:
            x = np.full(out, f32(0.5) * (start + end) * (n - 1), np.float32)
        return x.astype(np.float32), (x < 0) | (x > n - 1)
    else:
        x = (o + f32(0.5)) / s - f32(0.5)
    return x.astype(np.float32), None


def nearest_indices(x: np.ndarray, nearest_mode: str, size: int) -> np.ndarray:
    """Each coordinate rounded to a source index by ``nearest_mode``, clamped into the input."""
    half = np.float32(0.5)
    if nearest_mode == "round_prefer_floor":
        rounded = np.ceil(x - half)        # x.5 goes down, everything else to the nearest
    elif nearest_mode == "round_prefer_ceil":
        rounded = np.floor(x + half)
    elif nearest_mode == "floor":
        rounded = np.floor(x)
    else:
        rounded = np.ceil(x)
    return np.clip(rounded, 0, size - 1).astype(np.int64)


def linear_matrix(x: np.ndarray, size: int) -> sp.csr_array:
    """The (out x in) CSR matrix of linear interpolation at coordinates ``x``: onnxruntime's
    two pixels and weights (a coordinate past either end takes the end pixel)."""
    clamped = np.clip(x, np.float32(0), np.float32(size - 1))
    low = np.minimum(clamped.astype(np.int64), size - 1)
    high = np.minimum(low + 1, size - 1)
    w_high = np.abs(clamped - low.astype(np.float32))
    w_low = np.abs(clamped - high.astype(np.float32))
    same = low == high
    w_low[same] = w_high[same] = np.float32(0.5)
    rows = np.repeat(np.arange(len(x)), 2)
    columns = np.stack([low, high], axis=1).reshape(-1)
    weights = np.stack([w_low, w_high], axis=1).reshape(-1)
    return sp.csr_array((weights, (rows, columns)), shape=(len(x), size))


def cubic_matrix(x: np.ndarray, size: int, a: float, exclude_outside: bool) -> sp.csr_array:
    """The (out x in) CSR matrix of cubic interpolation at coordinates ``x``: onnxruntime's
    four pixels around each coordinate and Keys' weights for coefficient ``a`` (float32);
    a pixel index past either end reads the end pixel, or with ``exclude_outside`` takes
    weight 0, the row's other weights divided by their sum."""
    f32 = np.float32
    a = f32(a)
    low = np.floor(x).astype(np.int64)
    s = (x - low.astype(np.float32)).astype(np.float32)
    t = f32(1) - s
    weights = np.stack([
        ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a,
        ((a + 2) * s - (a + 3)) * s * s + 1,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a,
    ], axis=1).astype(np.float32)
    return _taps_matrix(low[:, None] + np.arange(-1, 3)[None, :], weights, size,
                        exclude_outside, normalise=False)


def antialias_matrix(x: np.ndarray, size: int, scale: float, mode: str, a: float,
                     exclude_outside: bool) -> sp.csr_array:
    """The (out x in) CSR matrix of antialiased ``mode`` (linear or cubic) interpolation at
    coordinates ``x`` for an axis scaled by ``scale``: below 1, the filter is stretched by
    ``1 / scale``; its taps past an end read the end pixel, or with ``exclude_outside`` drop
    out; each row's weights are divided by their sum."""
    stretch = min(float(scale), 1.0)
    support = 1 if mode == "linear" else 2
    start = int(np.floor(-support / stretch)) + 1
    offsets = np.arange(start, 2 - start)
    low = np.floor(x.astype(np.float64)).astype(np.int64)
    u = np.abs((offsets[None, :] - (x - low)[:, None]) * stretch)
    if mode == "linear":
        weights = np.clip(1 - u, 0, 1)
    else:
        weights = np.where(u <= 1, ((a + 2) * u - (a + 3)) * u * u + 1,
                           np.where(u < 2, ((a * u - 5 * a) * u + 8 * a) * u - 4 * a, 0.0))
    return _taps_matrix(low[:, None] + offsets[None, :], weights, size, exclude_outside,
                        normalise=True)


def _taps_matrix(taps: np.ndarray, weights: np.ndarray, size: int, exclude_outside: bool,
                 normalise: bool) -> sp.csr_array:
    """The (out x size) CSR matrix of ``weights[o, t]`` at input index ``taps[o, t]``: an
    index past either end reads the end pixel (its weight added to the end's: the CSR sums
    duplicates), or with ``exclude_outside`` takes weight 0; the rows are then divided by
    their sums when ``normalise`` or ``exclude_outside``."""
    if exclude_outside:
        weights[(taps < 0) | (taps >= size)] = 0
    if exclude_outside or normalise:
        weights /= weights.sum(axis=1, keepdims=True)
    rows = np.repeat(np.arange(len(taps)), taps.shape[1])
    columns = np.clip(taps, 0, size - 1).reshape(-1)
    return sp.csr_array((weights.reshape(-1), (rows, columns)), shape=(len(taps), size))


def _interpolate(node: NodeContext, x: np.ndarray, axis: int, matrix: sp.csr_array
                 ) -> np.ndarray:
    """``x`` with ``axis`` replaced by ``matrix @`` it: one sparse·dense contraction."""
    dtype = compute_dtype(x.dtype)
    before, after = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1:])
    size = x.shape[axis]
    view = x.reshape(before, size) if after == 1 else x.reshape(before, size, after)
    statement = interpolation_statement(after)
    result = node.run(statement, dtype, formats={"M": ta.CSR}, M=matrix.astype(dtype),
                      X=view)
    shape = list(x.shape)
    shape[axis] = matrix.shape[0]
    return result.reshape(shape)


@dataclass(frozen=True)
class ResizePass:
    """One resized axis: the source index of every output position (``nearest``) or the
    interpolation matrix (``linear`` and ``cubic``, out x in, CSR), and for
    ``tf_crop_and_resize`` which output positions fall outside the input (else None)."""

    axis: int
    indices: np.ndarray | None
    matrix: sp.csr_array | None
    outside: np.ndarray | None


def resize_passes(node: NodeContext, shape: Sequence[int], dtype: np.dtype,
                  roi: np.ndarray | None, scales: np.ndarray | None,
                  sizes: np.ndarray | None, *, axes: Sequence[int] | None,
                  coordinate_transformation_mode: str, keep_aspect_ratio_policy: str,
                  mode: str, nearest_mode: str, cubic_coeff_a: float = -0.75,
                  exclude_outside: int = 0, antialias: int = 0
                  ) -> tuple[list[int], list[ResizePass]]:
    """The output shape of a Resize of an input of ``shape`` and its passes, one per axis
    that changes, in the order they run: the most shrinking axis first and, among equal
    ratios, the last axis first, so that the intermediate tensors stay small and the pass
    along the contiguous last axis (a gather per output value, where a pass along an outer
    axis runs vectors over the axes after it) meets the smallest tensor (LR-ASPP's output,
    (21, 28, 28) to (21, 224, 224): 3.4 ms height first, 2.1 width first, one thread, in
    the model's profile, ``CompiledModel.profile``)."""
    rank = len(shape)
    chosen = list(range(rank)) if not axes else [int(a) for a in axes]
    if any(not -rank <= a < rank for a in chosen):
        raise ta.ShapeError(f"{node}: axes {chosen} out of range for rank {rank}")
    chosen = [a % rank for a in chosen]
    if len(set(chosen)) != len(chosen):
        raise ta.ShapeError(f"{node}: repeated axes {chosen}")
    sizes_out, factors = output_geometry(node, shape, chosen, _values(scales), _values(sizes),
                                         keep_aspect_ratio_policy)
    crop = coordinate_transformation_mode == "tf_crop_and_resize"
    bounds = _values(roi) if crop else None
    if crop and (bounds is None or len(bounds) != 2 * len(chosen)):
        raise ta.ShapeError(f"{node}: tf_crop_and_resize needs a roi of {2 * len(chosen)} "
                            f"values (starts, then ends)")
    if mode != "nearest" and np.dtype(dtype).kind != "f":
        raise ta.UnsupportedError(f"{node}: {mode} Resize of {np.dtype(dtype)} values is not "
                                  f"supported (float inputs are)")
    out_shape = list(shape)
    for a, n in zip(chosen, sizes_out):
        out_shape[a] = n
    passes = []
    for k in sorted(range(len(chosen)),
                    key=lambda k: (sizes_out[k] / max(shape[chosen[k]], 1), -chosen[k])):
        axis, out, factor = chosen[k], sizes_out[k], factors[k]
        if out == shape[axis] and factor == 1.0 and not crop:
            continue              # every mode maps each position to itself
        roi_pair = (bounds[k], bounds[k + len(chosen)]) if crop else (0.0, 1.0)
        coords, outside = source_coordinates(coordinate_transformation_mode, out, shape[axis],
                                             factor, roi_pair)
        if mode == "nearest":
            passes.append(ResizePass(axis, nearest_indices(coords, nearest_mode, shape[axis]),
                                     None, outside))
        elif antialias:
            passes.append(ResizePass(axis, None, antialias_matrix(
                coords, shape[axis], factor, mode, cubic_coeff_a, bool(exclude_outside)),
                outside))
        elif mode == "cubic":
            passes.append(ResizePass(axis, None, cubic_matrix(
                coords, shape[axis], cubic_coeff_a, bool(exclude_outside)), outside))
        else:
            passes.append(ResizePass(axis, None, linear_matrix(coords, shape[axis]), outside))
    return out_shape, passes


def interpolation_statement(after: int) -> str:
    """The statement of an interpolating pass over ``X`` viewed as (before, in, after)."""
    return "Y(i,a) = sum(j, M(a,j) * X(i,j))" if after == 1 else \
        "Y(i,a,k) = sum(j, M(a,j) * X(i,j,k))"


@op("Resize", since=11, check=_check)
def resize(node: NodeContext, x: np.ndarray, roi: np.ndarray | None = None,
           scales: np.ndarray | None = None, sizes: np.ndarray | None = None, *,
           antialias: int = 0, axes: Sequence[int] | None = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0,
           keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> np.ndarray:
    """``x`` resized on ``axes`` (default: all); see the module docstring."""
    out_shape, passes = resize_passes(
        node, x.shape, x.dtype, roi, scales, sizes, axes=axes,
        coordinate_transformation_mode=coordinate_transformation_mode,
        keep_aspect_ratio_policy=keep_aspect_ratio_policy, mode=mode,
        nearest_mode=nearest_mode, cubic_coeff_a=cubic_coeff_a, exclude_outside=exclude_outside,
        antialias=antialias)
    if x.size == 0 or math.prod(out_shape) == 0:
        node.note("empty tensor: nothing to interpolate")
        return np.zeros(out_shape, dtype=x.dtype)
    result = x
    for step in passes:
        if step.indices is not None:
            node.note(f"axis {step.axis}: numpy take of the nearest source positions")
            result = np.take(result, step.indices, axis=step.axis)
        else:
            result = _interpolate(node, result, step.axis, step.matrix)
        if step.outside is not None and step.outside.any():
            mask = step.outside.reshape([-1 if d == step.axis else 1 for d in range(x.ndim)])
            result = np.where(mask, np.asarray(extrapolation_value, result.dtype), result)
    return np.ascontiguousarray(result).astype(x.dtype, copy=False)
