"""The post-processing ops of detection models: NonMaxSuppression and RoiAlign.

torchvision's detection models (SSD, RetinaNet, Faster R-CNN) export their box selection as
``NonMaxSuppression`` and their region pooling as ``RoiAlign``. Neither is a contraction:
NonMaxSuppression is a greedy walk over boxes by score, run as one generated loop
(``program.kept_boxes``, ``runtime/suppress.py``); RoiAlign samples each region of interest at
bilinearly interpolated points, a NumPy step vectorised over the regions that share a
sampling grid.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


def _scalar(node: NodeContext, name: str, value: np.ndarray | None, default: float) -> float:
    """An optional scalar input's value (an empty tensor counts as absent)."""
    if value is None or np.size(value) == 0:
        return default
    if np.size(value) != 1:
        raise ta.ShapeError(f"{node}: {name} must hold one value, got shape {np.shape(value)}")
    return np.asarray(value).reshape(-1)[0]


def _corners(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """``(x_min, x_max, y_min, y_max)`` of every box: ``[y1, x1, y2, x2]`` with either
    corner first (``center_point_box=0``), or ``[x_center, y_center, width, height]``."""
    if center_point_box:
        half_w, half_h = boxes[..., 2] / 2, boxes[..., 3] / 2
        return (boxes[..., 0] - half_w, boxes[..., 0] + half_w,
                boxes[..., 1] - half_h, boxes[..., 1] + half_h)
    return (np.minimum(boxes[..., 1], boxes[..., 3]), np.maximum(boxes[..., 1], boxes[..., 3]),
            np.minimum(boxes[..., 0], boxes[..., 2]), np.maximum(boxes[..., 0], boxes[..., 2]))


def _center_point_box(attributes: dict) -> str | None:
    if attributes.get("center_point_box", 0) not in (0, 1):
        return f"center_point_box={attributes['center_point_box']} (0 or 1)"
    return None


@op("NonMaxSuppression", since=10, check=_center_point_box)
def non_max_suppression(node: NodeContext, boxes: np.ndarray, scores: np.ndarray,
                        max_output_boxes_per_class: np.ndarray | None = None,
                        iou_threshold: np.ndarray | None = None,
                        score_threshold: np.ndarray | None = None, *,
                        center_point_box: int = 0) -> np.ndarray:
    """``[batch, class, box]`` (int64) of the boxes kept in each class: taken by score,
    highest first (equal scores by position), each kept unless it overlaps one kept before
    it by an intersection over union above ``iou_threshold``, at most
    ``max_output_boxes_per_class`` a class (0 or absent: none); boxes scoring at most
    ``score_threshold`` (when given) are never taken."""
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or \
            scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ta.ShapeError(f"{node}: boxes must be (batches, boxes, 4) and scores (batches, "
                            f"classes, boxes); got {boxes.shape} and {scores.shape}")
    if boxes.dtype.kind != "f" or scores.dtype.kind != "f":
        raise ta.ArgumentTypeError(f"{node}: boxes and scores must be floating point, got "
                                   f"{boxes.dtype} and {scores.dtype}")
    most = max(int(_scalar(node, "max_output_boxes_per_class", max_output_boxes_per_class,
                           0)), 0)
    overlap = scores.dtype.type(_scalar(node, "iou_threshold", iou_threshold, 0.0))
    least = None if score_threshold is None or np.size(score_threshold) == 0 else \
        scores.dtype.type(_scalar(node, "score_threshold", score_threshold, 0.0))
    node.note("generated greedy non-maximum suppression (each box against the kept ones)")
    found: list[np.ndarray] = []
    for batch in range(boxes.shape[0] if most else 0):
        corners = _corners(boxes[batch], center_point_box)
        for kind in range(scores.shape[1]):
            row = scores[batch, kind]
            candidates = np.flatnonzero(row > least) if least is not None else \
                np.arange(row.shape[0])
            # highest score first, equal scores in box order (a stable sort of -score)
            order = candidates[np.argsort(-row[candidates], kind="stable")]
            kept = program.kept_boxes(*(edge[order] for edge in corners), overlap,
                                      most).tolist()
            kept = [int(order[r]) for r in kept]
            if kept:
                found.append(np.stack([np.full(len(kept), batch), np.full(len(kept), kind),
                                       np.array(kept)], axis=1))
    return np.concatenate(found).astype(np.int64) if found else np.zeros((0, 3), np.int64)


# Samples along the regions' axes (regions x (bins x samples a bin) summed over both axes) one
# RoiAlign takes at most: sampling_ratio=0 samples a bin once a pixel, so a region given in
# the wrong coordinates (pixels where the model works in a feature map's) would otherwise
# ask for billions.
SAMPLE_LIMIT = 1 << 26


def _roi_check(attributes: dict) -> str | None:
    mode = attributes.get("mode", "avg")
    if mode not in ("avg", "max"):
        return f"mode={mode!r} (avg or max)"
    how = attributes.get("coordinate_transformation_mode", "half_pixel")
    if how not in ("half_pixel", "output_half_pixel"):
        return f"coordinate_transformation_mode={how!r} (half_pixel or output_half_pixel)"
    return None


def _axis_samples(start: np.ndarray, size: np.ndarray, bins: int, grid: int, extent: int,
                  dtype: np.dtype) -> program.RoiSamples:
    """Along one axis of ``extent`` pixels, for regions starting at ``start`` of ``size``
    (one per region), cut in ``bins`` bins sampled ``grid`` times each: the pixel below and
    above every sample and their weights (shape (regions, bins, grid)), as ONNX's reference
    computes them in the values' dtype; a sample outside ``[-1, extent]`` reads nothing
    (weights 0, pixel 0)."""
    step = (size / dtype.type(bins)).astype(dtype)
    at = (start[:, None, None] + np.arange(bins, dtype=dtype)[None, :, None] * step[:, None, None]
          + (np.arange(grid, dtype=dtype)[None, None, :] + dtype.type(0.5))
          * step[:, None, None] / dtype.type(grid))
    inside = (at >= -1) & (at <= extent)
    at = np.where(inside, np.maximum(at, 0), 0).astype(dtype)
    low = at.astype(np.int64)
    last = low >= extent - 1
    low = np.where(last, extent - 1, low)
    high = np.where(last, extent - 1, low + 1)
    at = np.where(last, low.astype(dtype), at)
    fraction = (at - low).astype(dtype)
    zero = dtype.type(0)
    return program.RoiSamples(np.where(inside, low, 0), np.where(inside, high, 0),
                              np.where(inside, 1 - fraction, zero).astype(dtype),
                              np.where(inside, fraction, zero).astype(dtype))


@op("RoiAlign", since=10, check=_roi_check)
def roi_align_10(node: NodeContext, x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray,
                 *, coordinate_transformation_mode: str = "output_half_pixel",
                 mode: str = "avg", output_height: int = 1, output_width: int = 1,
                 sampling_ratio: int = 0, spatial_scale: float = 1.0) -> np.ndarray:
    """Opset 10's RoiAlign: :func:`roi_align` with pixel centres at whole coordinates
    (``output_half_pixel``, the only behaviour opset 10 knew)."""
    return roi_align(node, x, rois, batch_indices,
                     coordinate_transformation_mode=coordinate_transformation_mode, mode=mode,
                     output_height=output_height, output_width=output_width,
                     sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


@op("RoiAlign", since=16, check=_roi_check)
def roi_align(node: NodeContext, x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray,
              *, coordinate_transformation_mode: str = "half_pixel", mode: str = "avg",
              output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
              spatial_scale: float = 1.0) -> np.ndarray:
    """``Y(r, c, ph, pw)``: region ``r`` (``[x1, y1, x2, y2]`` in input coordinates times
    ``spatial_scale``) of image ``batch_indices[r]`` cut in ``output_height`` x
    ``output_width`` bins, each the average (or the largest weighted corner) of
    ``sampling_ratio``^2 bilinearly interpolated samples (0: ``ceil(bin size)`` of them a
    side). ``half_pixel`` puts pixel centres at .5 (shifting the regions by half a pixel);
    ``output_half_pixel`` does not, and makes every region at least a pixel wide."""
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4 or batch_indices.ndim != 1 or \
            batch_indices.shape[0] != rois.shape[0]:
        raise ta.ShapeError(f"{node}: X must be (N, C, H, W), rois (R, 4) and batch_indices "
                            f"(R,); got {x.shape}, {rois.shape} and {batch_indices.shape}")
    if x.dtype.kind != "f" or rois.dtype.kind != "f":
        raise ta.ArgumentTypeError(f"{node}: X and rois must be floating point, got {x.dtype} "
                                   f"and {rois.dtype}")
    batch = np.asarray(batch_indices, dtype=np.int64)
    if batch.size and (batch.min() < 0 or batch.max() >= x.shape[0]):
        raise ta.ShapeError(f"{node}: batch_indices must lie in [0, {x.shape[0]}), got "
                            f"{batch.min()}..{batch.max()}")
    if output_height < 1 or output_width < 1:
        raise ta.ShapeError(f"{node}: output_height and output_width must be positive, got "
                            f"{output_height} and {output_width}")
    how = coordinate_transformation_mode
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        # (float16 and others: pooled in float32, returned in their own dtype)
        return roi_align(node, x.astype(np.float32), rois, batch_indices,
                         coordinate_transformation_mode=coordinate_transformation_mode,
                         mode=mode, output_height=output_height, output_width=output_width,
                         sampling_ratio=sampling_ratio, spatial_scale=spatial_scale
                         ).astype(x.dtype)
    dtype = x.dtype
    n, channels, height, width = x.shape
    count = rois.shape[0]
    y = np.zeros((count, channels, output_height, output_width), dtype)
    if count == 0 or channels == 0:
        return y
    offset = dtype.type(0.5 if how == "half_pixel" else 0.0)
    scaled = rois.astype(dtype) * dtype.type(spatial_scale) - offset
    start_x, start_y = scaled[:, 0], scaled[:, 1]
    size_x, size_y = scaled[:, 2] - start_x, scaled[:, 3] - start_y
    if how != "half_pixel":          # the older convention: regions at least a pixel wide
        size_x, size_y = np.maximum(size_x, 1), np.maximum(size_y, 1)
    if not (np.isfinite(scaled).all()):
        raise ta.ShapeError(f"{node}: a region's coordinates are not finite (rois times "
                            f"spatial_scale {spatial_scale})")
    if sampling_ratio > 0:
        grid_y = np.full(count, sampling_ratio)
        grid_x = np.full(count, sampling_ratio)
    else:
        grid_y = np.maximum(np.ceil(size_y / output_height), 0).astype(np.int64)
        grid_x = np.maximum(np.ceil(size_x / output_width), 0).astype(np.int64)
    samples = int(np.max(grid_y) * output_height + np.max(grid_x) * output_width) * count
    if samples > SAMPLE_LIMIT:
        raise ta.ShapeError(f"{node}: the regions take {samples} samples along their axes "
                            f"(rois up to {float(np.abs(rois).max())} at spatial_scale "
                            f"{spatial_scale}, sampling_ratio {sampling_ratio}); more than "
                            f"{SAMPLE_LIMIT}: are the rois in the input's coordinates?")
    node.note(f"generated bilinear region pooling ({mode}, regions grouped by sampling grid)")
    # Regions with the same sampling grid are pooled by one call
    for gy, gx in sorted({(int(a), int(b)) for a, b in zip(grid_y, grid_x)}):
        members = np.flatnonzero((grid_y == gy) & (grid_x == gx))
        gy, gx = max(gy, 0), max(gx, 0)
        along_y = _axis_samples(start_y[members], size_y[members], output_height, gy, height,
                                dtype)
        along_x = _axis_samples(start_x[members], size_x[members], output_width, gx, width,
                                dtype)
        y[members] = program.pooled_regions(x, batch[members], along_y, along_x,
                                            largest=mode == "max")
    return y


__all__ = ["non_max_suppression", "roi_align", "roi_align_10"]
