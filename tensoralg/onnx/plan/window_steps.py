"""Static forms of the window and row ops: 2-D MaxPool, AveragePool, depthwise Conv and grouped
Conv with few channels a group as one call of a generated window kernel
(``tensoralg.program.window_kernel``), NCHW in and out; Softmax and LogSoftmax over contiguous
rows as one call of a generated row kernel (``tensoralg.program.softmax_kernel``).

Node by node these ops build a patch matrix in NumPy (a strided view copied into
``KH * KW`` times the image), then reduce it (MaxPool: a tree of elementwise ``max`` kernels;
a depthwise Conv: one product per channel). In a plan, a float 2-D window op instead reads its
input in place: vector lanes over output columns, taps unrolled, padding as load masks.
Softmax node by node is a tree of elementwise ``max`` kernels and two statements, each a pass
over the whole tensor; the row kernel makes the three passes row by row, in cache.
Whatever a kernel does not cover (MaxPool's ``Indices`` output, other ranks, integer dtypes, a
softmax axis other than the last) keeps the node-by-node path.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tensoralg import program
from tensoralg.onnx.ops.windows import windows
from tensoralg.onnx.passes.fusion import FLOATS, fused_activation
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import (
    Env,
    Getter,
    Run,
    Spec,
    made_of,
    one_input_run,
    placeholder,
)


def _kernel_spec(kernel: Any, x: np.ndarray, kind: str = "window kernel") -> Spec:
    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        return one_input_run(kernel.bind(placeholder(ins[0], x.shape, x.dtype), outs[0]),
                             ins[0], "x")

    spec = Spec(make, [], kind)
    spec.plan = kernel.describe()
    return spec


def pool_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """A 2-D float ``MaxPool`` (without ``Indices``) or ``AveragePool`` as one window kernel
    call, a 3-D MaxPool as two (:func:`_volume_max_spec`); None for anything else."""
    node = step.node
    attrs = node.attributes
    x = recorded[node.inputs[0]]
    outputs = [n for n in node.outputs if n]
    if x.ndim not in (4, 5) or x.dtype not in FLOATS or len(outputs) != 1 or \
            outputs[0] != node.outputs[0]:
        return None
    out = recorded[outputs[0]]
    kernel_shape = attrs.get("kernel_shape")
    if kernel_shape is None or len(kernel_shape) != x.ndim - 2 or out.dtype != x.dtype:
        return None
    if node.op_type == "MaxPool" and int(attrs.get("storage_order", 0)):
        return None
    geometry = windows(step.context, x.shape[2:], kernel_shape, strides=attrs.get("strides"),
                       dilations=attrs.get("dilations"), pads=attrs.get("pads"),
                       auto_pad=attrs.get("auto_pad", "NOTSET"),
                       ceil_mode=int(attrs.get("ceil_mode", 0)))
    if out.shape != (*x.shape[:2], *geometry.out) or not out.size:
        return None
    if x.ndim == 5:
        return _volume_max_spec(x, geometry) if node.op_type == "MaxPool" else None
    mode = "max" if node.op_type == "MaxPool" else "average"
    kernel = program.window_kernel(
        mode, x.shape[1:], geometry.kernel, x.dtype, geometry.strides, geometry.dilations,
        geometry.pads_begin, geometry.pads_end, geometry.out,
        count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return None if kernel is None else _kernel_spec(kernel, x)


def _volume_max_spec(x: np.ndarray, geometry: Any) -> Spec | None:
    """A 3-D MaxPool as two 2-D window kernels: the max over each (H, W) window of every
    (channel, depth) plane, then over the depth windows of those, the planes' positions
    flattened to one row. A box's max is the max along one axis of the maxima along the
    others, so the result is exact (NaN kept by both kernels), and each kernel sees a 2-D
    window, which the generated kernels cover: node by node a sliding-window view gathered
    all 27 values of a 3 x 3 x 3 window, most of S3D's time (its 13 MaxPools); the model went
    from 0.39-0.40x to 0.88-0.89x onnxruntime's speed, one thread
    (``benchmarks/ONNX_HELD_OUT_FIFTEENTH_RESULTS.md``). None where a window kernel is not
    made."""
    n, c, d, h, w = x.shape
    od, oh, ow = geometry.out
    kernel, strides, dilations = geometry.kernel, geometry.strides, geometry.dilations
    begin, end = geometry.pads_begin, geometry.pads_end
    planes = program.window_kernel(
        "max", (c * d, h, w), kernel[1:], x.dtype, strides[1:], dilations[1:], begin[1:],
        end[1:], (oh, ow))
    # the depth windows: images of (D, OH * OW), windows of (kd, 1)
    depth = None if (kernel[0], strides[0], begin[0], end[0]) == (1, 1, 0, 0) else \
        program.window_kernel("max", (c, d, oh * ow), (kernel[0], 1), x.dtype,
                              (strides[0], 1), (dilations[0], 1), (begin[0], 0), (end[0], 0),
                              (od, oh * ow))
    if planes is None or (depth is None and od != d):
        return None
    a_in, a_out = (n, c * d, h, w), (n, c * d, oh, ow)
    b_in, b_out = (n, c, d, oh * ow), (n, c, od, oh * ow)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        middle = buffers[0] if depth is not None else outs[0]
        first = planes.bind(placeholder(ins[0], x.shape, x.dtype).reshape(a_in),
                            middle.reshape(a_out))
        read = one_input_run(first, ins[0], "x", a_in)
        if depth is None:
            return read
        second = depth.bind(middle.reshape(b_in), outs[0].reshape(b_out))

        def run(env: Env) -> None:
            read(env)
            second()
        return made_of(run, [*read.parts, (second, [])])      # type: ignore[attr-defined]

    scratch = [(a_out, x.dtype)] if depth is not None else []
    spec = Spec(make, scratch, "window kernel")
    spec.plan = (f"3-D max pool as two generated window kernels: {planes.describe()}; then "
                 f"the depth windows, " + (depth.describe() if depth is not None else "none"))
    return spec


def depthwise_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                   ) -> Spec | None:
    """A 2-D float ``Conv`` with one input channel a group (``group == C``: one filter a
    channel, or several with a channel multiplier), constant weight and bias, optionally a
    fused ReLU or Clip, as one window kernel call; None otherwise."""
    x = recorded[step.node.inputs[0]]
    channels = x.shape[1] if x.ndim == 4 else 0
    if int(step.node.attributes.get("group", 1)) != channels or channels < 2:
        return None
    return grouped_window_spec(step, recorded, constants)


def grouped_window_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                        ) -> Spec | None:
    """A 2-D float grouped ``Conv`` (constant weight and bias, optionally a fused ReLU or Clip)
    as one window kernel call: each output plane sums the windows of its group's input planes,
    a block of a group's output planes sharing every load. Meant for groups of few channels,
    where a GEMM per group has too little to multiply; None for what it does not cover."""
    node = step.node
    attrs = node.attributes
    x = recorded[node.inputs[0]]
    weight = constants.get(node.inputs[1])
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = constants.get(bias_name) if bias_name else None
    out = recorded[node.outputs[0]]
    groups = int(attrs.get("group", 1))
    if x.ndim != 4 or weight is None or weight.ndim != 4 or groups < 2 or \
            x.shape[1] % groups or weight.shape[0] % groups or \
            weight.shape[1] * groups != x.shape[1] or \
            x.dtype not in FLOATS or weight.dtype != x.dtype or out.dtype != x.dtype or \
            (bias_name and (bias is None or bias.dtype != x.dtype)) or \
            set(attrs) - {"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad",
                          "activation", "skip_zeros"}:
        return None
    geometry = windows(step.context, x.shape[2:], weight.shape[2:], strides=attrs.get("strides"),
                       dilations=attrs.get("dilations"), pads=attrs.get("pads"),
                       auto_pad=attrs.get("auto_pad", "NOTSET"))
    if out.shape != (x.shape[0], weight.shape[0], *geometry.out) or not out.size:
        return None
    kernel = program.window_kernel(
        "depthwise", x.shape[1:], geometry.kernel, x.dtype, geometry.strides,
        geometry.dilations, geometry.pads_begin, geometry.pads_end, geometry.out,
        weight=weight, bias=bias, relu=fused_activation(attrs))
    return None if kernel is None else _kernel_spec(kernel, x)


def softmax_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
                 shared: Mapping[str, Any] | None = None) -> Spec | None:
    """A float ``Softmax``/``LogSoftmax`` whose rows are contiguous (from opset 13 the last
    axis, or an axis followed only by axes of size 1; before it, every axis from ``axis`` on,
    as the op flattens them) as one row kernel call; None otherwise. In a plan whose
    ``shared["any length"]`` is set (a light plan: the model sees many shapes) the kernel
    takes its row length as an argument, so that a new sequence length builds no module
    (~40 ms each; 5-25% slower per call than a length compiled in)."""
    node = step.node
    x = recorded[node.inputs[0]]
    out = recorded[node.outputs[0]]
    if x.dtype not in FLOATS or out.dtype != x.dtype or out.shape != x.shape or x.ndim < 1 or \
            not x.size:
        return None
    axis = int(node.attributes.get("axis", -1 if node.version >= 13 else 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        return None
    # From opset 13 the op normalises along ``axis`` alone: its rows are contiguous when every
    # later axis has size 1 (an attention over (batch, pairs, 1), AFM's and DCN-Mix's gates),
    # and a row is then that axis.
    if node.version >= 13 and int(np.prod(x.shape[axis + 1:], dtype=np.int64)) != 1:
        return None
    length = int(np.prod(x.shape[axis:], dtype=np.int64))
    kernel = program.softmax_kernel(length, x.dtype, node.op_type == "LogSoftmax",
                                    any_length=bool(shared and shared.get("any length")))
    return None if kernel is None else _kernel_spec(kernel, x, "row kernel")


__all__ = ["pool_spec", "depthwise_spec", "grouped_window_spec", "softmax_spec"]
