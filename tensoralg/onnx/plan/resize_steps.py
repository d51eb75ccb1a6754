"""The static step of a ``Resize``: a linear or cubic one's passes as prebound kernels.

Node by node, a linear (or cubic) Resize builds its interpolation matrices (scipy CSR) at
every run and calls ``ta`` once per resized axis through the kernel dispatch, then copies its
result into place: for LR-ASPP's final upsampling, (21, 28, 28) to (21, 224, 224), 1.7 ms of
which the two contractions were 0.45 (one thread, ad hoc, 2026-12-05; the planned step's time
is in the slowest-node lines of ``ONNX_HELD_OUT_FOURTH_RESULTS.md``). In a plan the shapes
are fixed, so the matrices are built once, each pass is a kernel bound to them and to the plan's buffers (the last pass writes the step's
output), and the step joins the compiled sequence. A pass over the last axis gathers each
vector of outputs' few taps (``program.interpolation_call``) instead of the CSR statement. A nearest Resize that upsamples its last axes
by whole factors is one compiled broadcast copy (:func:`_repeat_spec`); other nearest ones,
``tf_crop_and_resize`` (whose positions outside the input take another value) and non-float
inputs keep the node's own run.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.resize import interpolation_statement, resize_passes
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import (
    Env,
    Getter,
    Part,
    Run,
    Spec,
    contiguous,
    made_of,
    placeholder,
)


def resize_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """A linear or cubic Resize of a float32 or float64 input whose roi, scales and sizes are
    constants: one prebound CSR kernel per resized axis."""
    node = step.node
    attributes = node.attributes
    x = recorded.get(node.inputs[0])
    out = recorded.get(node.outputs[0])
    extra = [name for name in node.inputs[1:4] if name]
    if x is not None and out is not None and \
            attributes.get("mode", "nearest") == "nearest" and \
            not any(name not in constants for name in extra):
        planned = _planned_passes(step, x, constants)
        return None if planned is None else _repeat_spec(step, x, out, planned)
    if x is None or out is None or x.dtype not in (np.float32, np.float64) or \
            out.dtype != x.dtype or \
            attributes.get("mode", "nearest") not in ("linear", "cubic") or \
            not x.size or not out.size or \
            attributes.get("coordinate_transformation_mode", "half_pixel") == \
            "tf_crop_and_resize" or any(name not in constants for name in extra):
        return None

    planned = _planned_passes(step, x, constants)
    if planned is None:
        return None
    shape, passes = planned
    if not passes and tuple(shape) == x.shape == out.shape:
        return _repeat_spec(step, x, out, planned)       # a resize to its own size: a copy
    if tuple(shape) != out.shape or not passes:
        return None
    # Per pass: its kernel, the matrix in the input's dtype, and the pass's input and output
    # viewed as (before, in, after) and (before, out, after) (after == 1: two axes); the
    # outputs of all passes but the last are scratch buffers.
    shapes: list[tuple[int, ...]] = []
    bindings = []
    current = list(x.shape)
    for one in passes:
        before, size = math.prod(current[:one.axis]), current[one.axis]
        after, out_size = math.prod(current[one.axis + 1:]), one.matrix.shape[0]
        inner = () if after == 1 else (after,)
        matrix = one.matrix.astype(x.dtype)
        # The last axis gathers its few taps per vector of outputs (program.
        # interpolation_call); the others run the CSR statement, whose inner loop runs
        # along the contiguous axis after them.
        taps = after == 1 and \
            int(np.diff(matrix.indptr).max(initial=0)) <= program.INTERPOLATION_TAPS
        kernel = None if taps else step.context.kernels.get(
            interpolation_statement(after), x.dtype, {"M": ta.CSR})
        bindings.append((kernel, matrix, (before, size, *inner), (before, out_size, *inner)))
        current[one.axis] = out_size
        shapes.append(tuple(current))

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        sources = [placeholder(ins[0], x.shape, x.dtype), *buffers]
        targets = [*buffers, outs[0]]
        calls: list[Part] = [
            (program.interpolation_call(source.reshape(view), target.reshape(out_view), matrix)
             if kernel is None else
             kernel.bind(out=target.reshape(out_view), M=matrix, X=source.reshape(view)), [])
            for (kernel, matrix, view, out_view), source, target
            in zip(bindings, sources, targets)]
        name = "x" if bindings[0][0] is None else "X"    # the first pass's input
        if ins[0].fixed is None:       # the first pass reads the step's input each run
            calls[0] = (calls[0][0], [(name, ins[0], bindings[0][2])])

        def run(env: Env) -> None:
            first, reads = calls[0]
            if reads:
                first.rebind(name, contiguous(ins[0](env)).reshape(reads[0][2]))
            for bound, _ in calls:
                bound()
        return made_of(run, calls)

    spec = Spec(make, [(shape_, x.dtype) for shape_ in shapes[:-1]], "kernel")
    kind = ("antialiased " if attributes.get("antialias") else "") + attributes["mode"]
    spec.plan = f"{kind} interpolation, one prebound kernel per axis: " + "; ".join(
        f"axis {one.axis} {view[1]} -> {out_view[1]}" +
        (" (CSR)" if kernel is not None else " (taps gathered)")
        for one, (kernel, _, view, out_view) in zip(passes, bindings))
    return spec


def _planned_passes(step: Step, x: np.ndarray, constants: Mapping[str, np.ndarray]
                    ) -> tuple[list[int], list] | None:
    """The node's output shape and passes (``ops/resize.resize_passes``) for the recorded
    input, its roi, scales and sizes read from ``constants``; None where they are refused
    (the node's own run raises the error, naming the node)."""
    node = step.node
    attributes = node.attributes

    def given(position: int) -> np.ndarray | None:
        name = node.inputs[position] if len(node.inputs) > position else ""
        return constants[name] if name else None

    try:
        return resize_passes(
            step.context, x.shape, x.dtype, given(1), given(2), given(3),
            axes=attributes.get("axes"),
            coordinate_transformation_mode=attributes.get("coordinate_transformation_mode",
                                                          "half_pixel"),
            keep_aspect_ratio_policy=attributes.get("keep_aspect_ratio_policy", "stretch"),
            mode=attributes.get("mode", "nearest"),
            nearest_mode=attributes.get("nearest_mode", "round_prefer_floor"),
            cubic_coeff_a=attributes.get("cubic_coeff_a", -0.75),
            exclude_outside=attributes.get("exclude_outside", 0),
            antialias=attributes.get("antialias", 0))
    except ta.TensorAlgebraError:
        return None


def _repeat_spec(step: Step, x: np.ndarray, out: np.ndarray,
                 planned: tuple[list[int], list]) -> Spec | None:
    """A nearest Resize whose every output position along its resized axes reads source
    position ``o // f`` for a whole factor ``f`` (2x upsampling in U-Net, FPN and diffusion
    decoders, whatever the coordinate mode that gives it), at most two such axes and the last
    ones (``planned``: :func:`_planned_passes`'s shape and passes): each value repeated
    ``f_h x f_w`` times by one compiled broadcast copy
    (``program.broadcast_call``: the output viewed as ``(rows, f_h, W, f_w)``, the input as
    ``(rows, 1, W, 1)``), which joins the compiled sequence. Node by node the same is a NumPy
    take per axis. A Resize of any mode to its input's own size (UperNet's pyramid level
    already at the target size) is the same copy with factors 1. None for any other nearest
    Resize (the node's own run)."""
    node = step.node
    attributes = node.attributes
    if out.dtype != x.dtype or x.ndim < 2 or not x.size or \
            attributes.get("coordinate_transformation_mode", "half_pixel") == \
            "tf_crop_and_resize":
        return None
    shape, passes = planned
    factors = {}
    for one in passes:
        size = x.shape[one.axis]
        factor = len(one.indices) // size if size else 0
        if one.outside is not None or factor < 1 or len(one.indices) != factor * size or \
                not np.array_equal(one.indices, np.arange(factor * size) // factor):
            return None
        factors[one.axis] = factor
    rank = x.ndim
    if tuple(shape) != out.shape or not set(factors) <= {rank - 2, rank - 1} or \
            (not factors and x.shape != out.shape):
        return None
    fh, fw = factors.get(rank - 2, 1), factors.get(rank - 1, 1)
    rows, width = math.prod(x.shape[:-1]), x.shape[-1]
    if fh > 1:
        rows = math.prod(x.shape[:-2])
        source_view = (rows * x.shape[-2], 1, width, 1)
    else:
        source_view = (rows, 1, width, 1)
    target_view = (source_view[0], fh, width, fw)
    probe = program.broadcast_call("cast", [np.zeros(source_view, x.dtype)],
                                   np.zeros(target_view, out.dtype), str(step.context))
    if probe is None:
        return None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        source = placeholder(ins[0], x.shape, x.dtype).reshape(source_view)
        call = program.broadcast_call("cast", [source], outs[0].reshape(target_view),
                                      str(step.context))
        assert call is not None        # the probe above took the same shapes and dtypes
        if ins[0].fixed is not None:
            return made_of(lambda env: call(), [(call, [])])
        read = ins[0]

        def run(env: Env) -> None:
            call.rebind("x0", contiguous(read(env)).reshape(source_view))
            call()
        return made_of(run, [(call, [("x0", read, source_view)])])

    spec = Spec(make, [], "copy")
    spec.plan = (f"nearest upsampling by whole factors {fh} x {fw}: each value repeated by "
                 f"one compiled broadcast copy" if factors else
                 "a resize to the input's own size: one compiled copy")
    return spec


__all__ = ["resize_spec"]
