"""Pad, Tile, DepthToSpace and SpaceToDepth: elements rearranged, none computed (NumPy).

Like the other data movement of ``movement.py`` these are NumPy steps: each output element is a
copy of one input element (or Pad's constant), so there is no arithmetic for a kernel to do.
Pad's and Tile's sizes are input values; a model whose pads are computed from shapes (Swin's
window padding) has them known once shapes are, which the static plan records at its first run.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op

# ONNX's Pad modes, which NumPy's np.pad calls by the same names.
_PAD_MODES = frozenset({"constant", "reflect", "edge", "wrap"})


def _pads(node: NodeContext, x: np.ndarray, pads: np.ndarray, axes: np.ndarray | None
          ) -> list[tuple[int, int]]:
    """``pads`` (all begins, then all ends, over ``axes`` or every axis) as NumPy's
    ``(before, after)`` per axis."""
    values = [int(p) for p in np.asarray(pads).reshape(-1)]
    if axes is None:
        chosen = list(range(x.ndim))
    else:
        chosen = [int(a) for a in np.asarray(axes).reshape(-1)]
        if any(not -x.ndim <= a < x.ndim for a in chosen):
            raise ta.ShapeError(f"{node}: axes {chosen} are out of range for rank {x.ndim}")
        chosen = [a % x.ndim for a in chosen]
        if len(set(chosen)) != len(chosen):
            raise ta.ShapeError(f"{node}: repeated axes {chosen}")
    if len(values) != 2 * len(chosen):
        raise ta.ShapeError(f"{node}: {len(values)} pads for {len(chosen)} axes (two per axis: "
                            "all the begins, then all the ends)")
    widths = [(0, 0)] * x.ndim
    for k, axis in enumerate(chosen):
        widths[axis] = (values[k], values[k + len(chosen)])
    return widths


def _pad(node: NodeContext, x: np.ndarray, pads: np.ndarray, value: np.ndarray | None,
         axes: np.ndarray | None, mode: str) -> np.ndarray:
    """``x`` padded (negative pads crop) in ``mode``: constant, reflect, edge or wrap."""
    if mode not in _PAD_MODES:
        raise ta.UnsupportedError(f"{node}: Pad mode {mode!r} is not one of "
                                  f"{sorted(_PAD_MODES)}")
    widths = _pads(node, x, pads, axes)
    # Negative pads remove elements first; what is left is padded by the positive parts.
    crop = tuple(slice(-min(b, 0), x.shape[a] + min(e, 0) if e < 0 else None)
                 for a, (b, e) in enumerate(widths))
    x = x[crop]
    grow = [(max(b, 0), max(e, 0)) for b, e in widths]
    if any(d < 0 for d in x.shape):
        raise ta.ShapeError(f"{node}: pads {np.asarray(pads).tolist()} crop more than the input")
    for axis, (b, e) in enumerate(grow):
        if (b or e) and mode != "constant" and x.shape[axis] == 0:
            raise ta.ShapeError(f"{node}: cannot {mode}-pad axis {axis} of size 0")
        if (b or e) and mode == "reflect" and max(b, e) >= x.shape[axis] and x.shape[axis] == 1:
            raise ta.ShapeError(f"{node}: cannot reflect-pad axis {axis} of size 1")
    if mode == "constant":
        # The input copied into a filled buffer: np.pad's own setup cost 20-50 us a call,
        # most of a small padded tensor's time (deepctr's CCPM at batch 1).
        node.note("numpy fill and copy (constant pad)")
        fill = 0 if value is None or np.size(value) == 0 else np.asarray(value).reshape(-1)[0]
        shape = tuple(d + b + e for d, (b, e) in zip(x.shape, grow))
        out = np.zeros(shape, x.dtype) if fill == 0 else np.full(shape, fill, x.dtype)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, grow))] = x
        return out
    node.note(f"numpy pad ({mode})")
    return np.pad(x, grow, mode=mode)


@op("Pad", since=11)
def pad(node: NodeContext, x: np.ndarray, pads: np.ndarray, value: np.ndarray | None = None,
        axes: np.ndarray | None = None, *, mode: str = "constant") -> np.ndarray:
    """``x`` with ``pads`` added before and after each axis (or each of ``axes``, opset 18):
    a constant (``value``, default 0), the mirror image without the edge (``reflect``), the
    edge repeated (``edge``) or the other end (``wrap``, opset 19). Negative pads crop."""
    return _pad(node, x, pads, value, axes, mode)


@op("Tile", since=6)
def tile(node: NodeContext, x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """``x`` repeated ``repeats[d]`` times along each axis ``d`` (NumPy's ``tile``)."""
    counts = [int(r) for r in np.asarray(repeats).reshape(-1)]
    if len(counts) != x.ndim or any(r < 0 for r in counts):
        raise ta.ShapeError(f"{node}: repeats {counts} must be {x.ndim} non-negative counts, "
                            f"one per axis of {x.shape}")
    node.note("numpy tile (copy)")
    return np.tile(x, counts) if x.ndim else x.copy()


def _check_blocks(node: NodeContext, x: np.ndarray, blocksize: int) -> None:
    if x.ndim != 4 or blocksize < 1:
        raise ta.ShapeError(f"{node}: needs a 4-D (N, C, H, W) input and a positive blocksize, "
                            f"got {x.shape} and {blocksize}")


@op("DepthToSpace", since=11)
def depth_to_space(node: NodeContext, x: np.ndarray, *, blocksize: int, mode: str = "DCR"
                   ) -> np.ndarray:
    """Channels moved into ``blocksize x blocksize`` spatial blocks: (N, C, H, W) ->
    (N, C / b^2, H b, W b); ``DCR`` takes the block index from the channel's high part,
    ``CRD`` from its low part (PixelShuffle)."""
    _check_blocks(node, x, blocksize)
    n, c, h, w = x.shape
    b = blocksize
    if c % (b * b):
        raise ta.ShapeError(f"{node}: {c} channels are not a multiple of blocksize^2 = {b * b}")
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ta.UnsupportedError(f"{node}: mode {mode!r} is not DCR or CRD")
    node.note(f"numpy reshape and transpose ({mode}, copy)")
    return np.ascontiguousarray(y.reshape(n, c // (b * b), h * b, w * b))


@op("SpaceToDepth", since=1)
def space_to_depth(node: NodeContext, x: np.ndarray, *, blocksize: int, mode: str = "DCR"
                   ) -> np.ndarray:
    """``blocksize x blocksize`` spatial blocks moved into channels: (N, C, H, W) ->
    (N, C b^2, H / b, W / b), the inverse of DepthToSpace in the same ``mode``."""
    _check_blocks(node, x, blocksize)
    n, c, h, w = x.shape
    b = blocksize
    if h % b or w % b:
        raise ta.ShapeError(f"{node}: height {h} and width {w} must be multiples of {b}")
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    if mode == "DCR":
        y = blocks.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        y = blocks.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise ta.UnsupportedError(f"{node}: mode {mode!r} is not DCR or CRD")
    node.note(f"numpy reshape and transpose ({mode}, copy)")
    return np.ascontiguousarray(y.reshape(n, c * b * b, h // b, w // b))
