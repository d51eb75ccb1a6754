"""Opt level 2: 1-D and 3-D convolutions run as 2-D ones, which the static plan compiles.

**1-D.**
``Conv`` over ``(N, C, L)`` with a constant weight ``(M, C/g, K)`` is the same sum as a Conv
over ``(N, C, 1, L)`` with the weight ``(M, C/g, 1, K)``, a kernel row of height one, whose
strides, dilations and pads are the 1-D ones along the width and trivial along the height.
The static plan runs 2-D convolutions as generated kernels (patch blocks, the generated GEMM
writing NCHW tiles, depthwise windows); a 1-D one ran node by node as a NumPy im2col and a
BLAS call (Whisper's encoder: two convolutions over 100 frames took 0.4 ms, more than its
two attention layers). The rewrite is ``Unsqueeze(x, 2) -> Conv -> Squeeze(., 2)``, both
views in the static plan, and it holds whatever the batch (the axes are constants, the shapes
are not read). ``auto_pad`` carries over: along a height of one with a kernel height of one
every mode pads nothing.

**3-D.** A Conv over ``(N, C, T, H, W)`` (group 1, constant weight ``(M, C, KT, KH, KW)``,
static input shape) sums, for output frame ``t``, the 2-D convolutions of the KT input
frames ``t * st + kt * dt`` (after padding the time axis) by the weight slices
``W[:, :, kt]``: a 2-D Conv over ``N * T_out`` images of ``KT * C`` channels (frame ``kt``'s
C planes at ``kt * C``) with the weight ``(M, KT * C, KH, KW)``. As nodes::

    Transpose(x) to (N, T, C, H, W) -> [zero frames joined along T] -> KT Slices along T (stride st) ->
    Concat(axis 2) -> Reshape(-1, KT*C, H, W) -> Conv -> Reshape(-1, T_out, M, H', W') ->
    Transpose back to (N, M, T_out, H', W')

Copies: the input once, KT times its frames into the Concat, the output once; the 2-D Conv
runs as a generated kernel where the 3-D one was a NumPy im2col of KT * KH * KW times the
input and one BLAS call (torchvision's r3d_18 at batch 1: 0.6x onnxruntime's time).
"""
from __future__ import annotations

import numpy as np

from tensoralg.onnx.frontend.graph import Graph, Node, fresh_name, value_names
from tensoralg.onnx.ops.registry import lookup


def conv1d_as_conv2d(graph: Graph) -> Graph:
    """Replace every ``Conv`` over a rank-3 input with a constant rank-3 float weight by
    ``Unsqueeze -> Conv (height 1) -> Squeeze``; the Conv keeps its name, bias and group.

    >>> # graph = conv1d_as_conv2d(graph)   # Conv(x: (1, 16, 100), W: (64, 16, 3)) -> 2-D
    """
    unsqueeze, squeeze = lookup("Unsqueeze", 13), lookup("Squeeze", 13)
    if unsqueeze is None or squeeze is None:
        return graph
    taken = value_names(graph)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        weight = graph.constants.get(node.inputs[1]) \
            if node.op_type == "Conv" and len(node.inputs) >= 2 else None
        shape = graph.static_shapes.get(node.inputs[0])
        # (an input of another rank is the Conv's own error, left to it; a pointwise one
        # already runs as a prebound kernel, product_steps.pointwise_conv_spec)
        if weight is None or weight.ndim != 3 or weight.dtype.kind != "f" or \
                (shape is not None and len(shape) != 3) or _pointwise(node, weight):
            nodes.append(node)
            continue
        axes = fresh_name(f"{node.name}/row_axis", taken)
        rows = fresh_name(f"{node.name}/rows", taken)
        kernel = fresh_name(f"{node.name}/weight_2d", taken)
        planes = fresh_name(f"{node.name}/planes", taken)
        graph.constants[axes] = np.array([2], np.int64)
        graph.constants[kernel] = np.ascontiguousarray(weight[:, :, None, :])
        nodes += [Node(f"{node.name}/Unsqueeze", "Unsqueeze", (node.inputs[0], axes), (rows,),
                       {}, 13, unsqueeze),
                  Node(node.name, "Conv", (rows, kernel, *node.inputs[2:]), (planes,),
                       _attributes_2d(node.attributes, weight.shape[2]), node.version,
                       node.impl),
                  Node(f"{node.name}/Squeeze", "Squeeze", (planes, axes), node.outputs, {}, 13,
                       squeeze)]
        if shape is not None:
            graph.static_shapes[rows] = (*shape[:2], 1, shape[2])
        out = graph.static_shapes.get(node.outputs[0])
        if out is not None:
            graph.static_shapes[planes] = (*out[:2], 1, out[2])
        replaced += 1
    graph.nodes = nodes
    if replaced:
        graph.notes.append(f"1-D convolutions: {replaced} Conv(s) run as 2-D over planes one "
                           f"row high")
    return graph


def _pointwise(node: Node, weight: np.ndarray) -> bool:
    """Whether a 1-D Conv takes one input cell per output cell: kernel 1, stride 1, unpadded."""
    attributes = node.attributes
    return weight.shape[2] == 1 and list(attributes.get("strides", [1])) == [1] and \
        not any(attributes.get("pads", [0, 0])) and \
        attributes.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")


def _attributes_2d(attributes: dict, width: int) -> dict:
    """A 1-D Conv's attributes for the same Conv over planes one row high."""
    out = dict(attributes)
    out["kernel_shape"] = [1, int(attributes.get("kernel_shape", [width])[0])]
    for key in ("strides", "dilations"):
        if key in attributes:
            out[key] = [1, int(attributes[key][0])]
    if "pads" in attributes:
        begin, end = attributes["pads"]
        out["pads"] = [0, int(begin), 0, int(end)]
    return out


def conv3d_as_conv2d(graph: Graph) -> Graph:
    """Replace every group-1 ``Conv`` over a rank-5 input of static shape with a constant
    rank-5 float weight and explicit pads by the 2-D Conv over stacked frames described in the
    module docstring; the 2-D Conv keeps the node's name and bias.

    >>> # graph = conv3d_as_conv2d(graph)   # Conv(x: (1, 3, 8, 112, 112), W: (64, 3, 3, 7, 7))
    """
    ops = {op: (version, lookup(op, version)) for op, version in (
        ("Transpose", 13), ("Pad", 13), ("Slice", 13), ("Concat", 13), ("Reshape", 14))}
    if any(impl is None for _, impl in ops.values()):
        return graph
    taken = value_names(graph)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        weight = graph.constants.get(node.inputs[1]) \
            if node.op_type == "Conv" and len(node.inputs) >= 2 else None
        shape = graph.static_shapes.get(node.inputs[0])
        out = graph.static_shapes.get(node.outputs[0])
        attributes = node.attributes
        if weight is None or weight.ndim != 5 or weight.dtype.kind != "f" or shape is None or \
                len(shape) != 5 or out is None or int(attributes.get("group", 1)) != 1 or \
                attributes.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or \
                weight.shape[1] != shape[1]:
            nodes.append(node)
            continue
        nodes += _frames_conv(node, graph, weight, shape, out, ops, taken)
        replaced += 1
    graph.nodes = nodes
    if replaced:
        graph.notes.append(f"3-D convolutions: {replaced} Conv(s) run as 2-D over stacked "
                           f"frames")
    return graph


def _frames_conv(node: Node, graph: Graph, weight: np.ndarray, shape: tuple, out: tuple,
                 ops: dict, taken: set[str]) -> list[Node]:
    """The nodes computing 3-D ``node`` as a 2-D Conv over stacked frames."""
    attributes = node.attributes
    batch, channels, frames, height, width = shape
    out_channels, frames_out, out_h, out_w = out[1], out[2], out[3], out[4]
    kt = weight.shape[2]
    st, sh, sw = (int(v) for v in attributes.get("strides", [1, 1, 1]))
    dt, dh, dw = (int(v) for v in attributes.get("dilations", [1, 1, 1]))
    pads = [int(v) for v in attributes.get("pads", [0] * 6)]

    def name(part: str) -> str:
        return fresh_name(f"{node.name}/{part}", taken)

    def constant(part: str, value: np.ndarray) -> str:
        key = name(part)
        graph.constants[key] = value
        return key

    def add(op: str, inputs: tuple, part: str, shape_of: tuple | None, **attrs) -> str:
        output = name(part)
        nodes.append(Node(f"{node.name}/{op}_{part}", op, inputs, (output,), attrs, *ops[op]))
        if shape_of is not None:
            graph.static_shapes[output] = tuple(shape_of)
        return output

    nodes: list[Node] = []
    padded = frames + pads[0] + pads[3]
    x = add("Transpose", (node.inputs[0],), "frames_first",
            (batch, frames, channels, height, width), perm=[0, 2, 1, 3, 4])
    if pads[0] or pads[3]:
        # zero frames joined on (a Concat of block copies; a Pad ran as np.pad, 5x slower)
        def zeros(side: str, count: int) -> list[str]:
            return [constant(f"zero_frames_{side}", np.zeros(
                (batch, count, channels, height, width), weight.dtype))] if count else []

        x = add("Concat", (*zeros("before", pads[0]), x, *zeros("after", pads[3])), "padded",
                (batch, padded, channels, height, width), axis=1)
    axis = constant("time_axis", np.array([1], np.int64))
    step = constant("time_step", np.array([st], np.int64))
    slices = []
    for k in range(kt):
        begin = k * dt
        end = begin + st * (frames_out - 1) + 1
        slices.append(add("Slice", (x, constant(f"begin_{k}", np.array([begin], np.int64)),
                                    constant(f"end_{k}", np.array([end], np.int64)), axis,
                                    step), f"frame_{k}",
                          (batch, frames_out, channels, height, width)))
    stacked = slices[0] if kt == 1 else add(
        "Concat", tuple(slices), "stacked", (batch, frames_out, kt * channels, height, width),
        axis=2)
    images = add("Reshape", (stacked, constant("images_shape", np.array(
        [-1, kt * channels, height, width], np.int64))), "images",
        (batch * frames_out, kt * channels, height, width))
    kernel = constant("weight_2d", np.ascontiguousarray(weight.transpose(0, 2, 1, 3, 4).reshape(
        out_channels, kt * channels, *weight.shape[3:])))
    conv_attributes = {key: value for key, value in attributes.items()
                       if key not in ("kernel_shape", "strides", "dilations", "pads")}
    conv_attributes.update(kernel_shape=list(weight.shape[3:]), strides=[sh, sw],
                           dilations=[dh, dw], pads=[pads[1], pads[2], pads[4], pads[5]])
    planes = name("planes")
    nodes.append(Node(node.name, "Conv", (images, kernel, *node.inputs[2:]), (planes,),
                      conv_attributes, node.version, node.impl))
    graph.static_shapes[planes] = (batch * frames_out, out_channels, out_h, out_w)
    frames_major = add("Reshape", (planes, constant("frames_shape", np.array(
        [-1, frames_out, out_channels, out_h, out_w], np.int64))), "per_frame",
        (batch, frames_out, out_channels, out_h, out_w))
    nodes.append(Node(f"{node.name}/Transpose_back", "Transpose", (frames_major,),
                      node.outputs, {"perm": [0, 2, 1, 3, 4]}, *ops["Transpose"]))
    return nodes


__all__ = ["conv1d_as_conv2d", "conv3d_as_conv2d"]
