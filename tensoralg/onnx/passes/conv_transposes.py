"""Opt level 2: a strided 1-, 2- or 3-D ``ConvTranspose`` as one ``Conv`` over its sub-pixel
phases.

Output position ``u = o + pad_begin`` of a transposed convolution with stride ``s`` adds
``x[i] * w[k]`` for every ``i * s + k = u``. With the kernel padded with zero taps to ``T * s``
(``T = ceil(K / s)``) and ``u = s q + r``, that is ``sum(t, x[q - t] * w[r + s t])`` over
``t < T``: for each phase ``r`` an ordinary correlation of ``x`` (padded with ``T - 1`` zeros
before) with the flipped sub-kernel ``w[r + s (T - 1 - t)]``. All ``s_h * s_w`` phases are one
Conv whose output channels are (phase, channel) pairs, the sub-pixel convolution of ESPCN,
and their outputs are interleaved back::

    Conv (s_h*s_w*M outputs, T_h x T_w kernel, pads T - 1 before) -> Reshape(N, s_h, s_w, M,
    Q_h, Q_w) -> Transpose(N, M, Q_h, s_h, Q_w, s_w) -> Reshape(N, M, s_h Q_h, s_w Q_w) ->
    [Slice the output's rows and columns from pad_begin]

With equal strides the interleave is one ``DepthToSpace`` (DCR: the phase channels' order),
and nothing in the rewrite depends on the input's size (the phases' extra rows and what the
Slice crops at the end are functions of the kernel, stride and pads): a dynamic-batch export,
whose shapes are known only per plan, is rewritten too (DPT's reassembling upsamplers).

Node by node (``ops/conv_transpose.py``) the strided ConvTranspose is one product and a NumPy
strided add per kernel cell into the output, a pass over the output per cell: LinkNet
(segmentation_models_pytorch, whose decoder upsamples by 4 x 4 stride-2 ones) ran at 0.79-0.82x onnxruntime's
speed, one thread, and at 1.17-1.18x with this rewrite
(``benchmarks/ONNX_HELD_OUT_FOURTEENTH_RESULTS.md``, 2026-12-07). Here the Conv takes the
static plan's generated convolutions and the interleave is a compiled transpose. The work is the same up to the zero taps a kernel not a
multiple of the stride gets (3 x 3 at stride 2: 16 taps for 9).

The same holds per axis in 1-D and 3-D (the interleave then a Reshape/Transpose/Reshape of
rank 2d + 2; the phase Conv becomes 2-D in the rank passes after this one): MONAI's 3-D U-Nets
upsample by 2 x 2 x 2 ConvTransposes of stride 2, whose phase Conv is pointwise.

Rewritten: group 1, no dilation, a constant float weight, explicit pads (``auto_pad``
NOTSET, no ``output_shape``), a stride above 1 on some axis, and, except for equal strides in
2-D, static input and output shapes.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tensoralg.onnx.frontend.graph import Graph, Node, fresh_name, value_names
from tensoralg.onnx.ops.registry import lookup

_OPS = {"Conv": 11, "Reshape": 14, "Transpose": 13, "Slice": 13, "DepthToSpace": 13}


def phase_weights(w: np.ndarray, strides: tuple[int, ...]) -> np.ndarray:
    """The Conv weight ``(prod(s) * M, C, T_1, ..., T_d)`` of a ConvTranspose weight
    ``(C, M, K_1, ..., K_d)``: output channel ``r * M + m``, with ``r`` the phase ``(r_1, ...,
    r_d)`` numbered row-major, holds that phase's flipped sub-kernel (the module docstring).

    >>> w = np.arange(4.0).reshape(1, 1, 1, 4)           # one row of 4 taps, stride 2
    >>> phase_weights(w, (1, 2))[:, 0, 0].tolist()      # phase 0: taps 2, 0; phase 1: 3, 1
    [[2.0, 0.0], [3.0, 1.0]]
    >>> phase_weights(np.ones((3, 5, 2, 2, 2)), (2, 2, 2)).shape    # 3-D, kernel = stride
    (40, 3, 1, 1, 1)
    """
    channels, outputs, *kernel = w.shape
    d = len(kernel)
    taps = [-(-k // s) for k, s in zip(kernel, strides)]
    padded = np.zeros((channels, outputs, *[t * s for t, s in zip(taps, strides)]), w.dtype)
    padded[(slice(None), slice(None), *[slice(0, k) for k in kernel])] = w
    # taps (t, r) at t * s + r, t reversed: (C, M, T_1, s_1, ..., T_d, s_d)
    split = padded.reshape(channels, outputs, *[v for ts in zip(taps, strides) for v in ts])
    split = split[(slice(None), slice(None), *[slice(None, None, -1), slice(None)] * d)]
    order = [3 + 2 * i for i in range(d)] + [1, 0] + [2 + 2 * i for i in range(d)]
    return np.ascontiguousarray(split.transpose(order).reshape(
        int(np.prod(strides)) * outputs, channels, *taps))


def conv_transposes_as_phase_convs(graph: Graph) -> Graph:
    """Replace every strided ConvTranspose that the module docstring's conditions allow
    by its sub-pixel Conv and the interleave of its phases; the output keeps its name.

    >>> # graph = conv_transposes_as_phase_convs(graph)   # LinkNet's and U-Net's upsamplers
    """
    impls = {op: lookup(op, version) for op, version in _OPS.items()}
    if any(impl is None for impl in impls.values()):
        return graph
    taken = value_names(graph)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        plan = _phase_plan(graph, node)
        if plan is None:
            nodes.append(node)
            continue
        nodes += _phase_nodes(graph, node, plan, impls, taken)
        replaced += 1
    graph.nodes = nodes
    if replaced:
        graph.notes.append(f"transposed convolutions: {replaced} ConvTranspose(s) run as "
                           f"one Conv over their sub-pixel phases")
    return graph


def _phase_plan(graph: Graph, node: Node) -> dict[str, Any] | None:
    """What the rewrite of ``node`` needs, or None where it does not apply."""
    if node.op_type != "ConvTranspose" or len(node.inputs) < 2:
        return None
    weight = graph.constants.get(node.inputs[1])
    shape = graph.static_shapes.get(node.inputs[0])
    out = graph.static_shapes.get(node.outputs[0])
    bias = graph.constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] \
        else None
    attributes = node.attributes
    d = 0 if weight is None else weight.ndim - 2
    if weight is None or weight.dtype.kind != "f" or d not in (1, 2, 3) or \
            len(node.inputs) > 2 and node.inputs[2] and bias is None or \
            int(attributes.get("group", 1)) != 1 or \
            attributes.get("auto_pad", "NOTSET") not in ("NOTSET", "") or \
            attributes.get("output_shape") or \
            any(int(v) != 1 for v in attributes.get("dilations", [1] * d)):
        return None
    strides = tuple(int(v) for v in attributes.get("strides", [1] * d))
    pads = [int(v) for v in attributes.get("pads", [0] * 2 * d)]
    extra_out = [int(v) for v in attributes.get("output_padding", [0] * d)]
    if len(strides) != d or max(strides) < 2 or len(pads) != 2 * d or min(pads) < 0 or \
            len(extra_out) != d or min(extra_out) < 0 or \
            shape is not None and (len(shape) != d + 2 or shape[1] != weight.shape[0]) or \
            out is not None and (len(out) != d + 2 or out[1] != weight.shape[1]) or \
            bias is not None and bias.shape != (weight.shape[1],):
        return None
    taps = [-(-k // s) for k, s in zip(weight.shape[2:], strides)]
    # Phase rows q cover u = o + pad_begin for every output o: u ends at (n - 1) s + K + op -
    # pad_end for an input of n rows, and a phase Conv padded with E rows after gives n + E
    # rows, so E = ceil((K + op - pad_end) / s) - 1 and the phases end R = (E + 1) s - (K + op
    # - pad_end) past the output, whatever n is.
    reach = [k + op - end for k, op, end in zip(weight.shape[2:], extra_out, pads[d:])]
    extra = [max(0, -(-r // s) - 1) for r, s in zip(reach, strides)]
    beyond = [(e + 1) * s - r for e, s, r in zip(extra, strides, reach)]
    if min(reach) < 1:
        return None
    square = d == 2 and strides[0] == strides[1]
    if not square and (shape is None or out is None):
        return None           # the interleave's Reshape needs the sizes (DepthToSpace does not)
    return {"weight": weight, "bias": bias, "strides": strides, "taps": taps, "pads": pads,
            "extra": extra, "beyond": beyond, "square": square,
            "shape": None if shape is None else tuple(shape),
            "out": None if out is None else tuple(out)}


def _phase_nodes(graph: Graph, node: Node, plan: dict[str, Any], impls: dict[str, Any],
                 taken: set[str]) -> list[Node]:
    weight, strides, taps = plan["weight"], plan["strides"], plan["taps"]
    outputs, d, phase_count = weight.shape[1], len(strides), int(np.prod(strides))
    made: list[Node] = []

    def fresh(part: str) -> str:
        return fresh_name(f"{node.name}/{part}", taken)

    def constant(part: str, value: np.ndarray) -> str:
        name = fresh(part)
        graph.constants[name] = value
        return name

    def add(op: str, inputs: tuple[str, ...], part: str, shape: tuple[int, ...] | None,
            output: str | None = None, **attributes: Any) -> str:
        result = output or fresh(part)
        made.append(Node(f"{node.name}/{op}_{part}", op, inputs, (result,), attributes,
                         _OPS[op], impls[op]))
        if shape is not None:
            graph.static_shapes[result] = tuple(shape)
        return result

    in_shape, out = plan["shape"], plan["out"]
    # phase rows: the input's and E more (module docstring)
    rows = None if in_shape is None else [n + e for n, e in zip(in_shape[2:], plan["extra"])]
    batch = None if in_shape is None else in_shape[0]
    conv_inputs = [node.inputs[0], constant("phase_weight", phase_weights(weight, strides))]
    if plan["bias"] is not None:
        conv_inputs.append(constant("phase_bias", np.tile(plan["bias"], phase_count)))
    phases = add("Conv", tuple(conv_inputs), "phases",
                 None if rows is None else (batch, phase_count * outputs, *rows),
                 kernel_shape=list(taps), pads=[t - 1 for t in taps] + list(plan["extra"]))
    begin, beyond = plan["pads"][:d], plan["beyond"]
    cropped = any(begin) or any(beyond)
    full = None if rows is None else (batch, outputs, *[r * s for r, s in zip(rows, strides)])
    final = None if cropped else node.outputs[0]
    if plan["square"]:
        # the phase channels (r_h * s + r_w) * M + m are DepthToSpace's DCR order
        joined = add("DepthToSpace", (phases,), "full", full, output=final,
                     blocksize=strides[0], mode="DCR")
    else:
        assert rows is not None and full is not None
        split_shape = (batch, *strides, outputs, *rows)
        split = add("Reshape", (phases, constant("split_shape", np.array(split_shape, np.int64))),
                    "split", split_shape)
        # (N, s_1.., M, q_1..) -> (N, M, q_1, s_1, q_2, s_2, ...)
        perm = [0, 1 + d] + [v for i in range(d) for v in (2 + d + i, 1 + i)]
        woven = add("Transpose", (split,), "woven", tuple(split_shape[p] for p in perm),
                    perm=perm)
        joined = add("Reshape", (woven, constant("full_shape", np.array(full, np.int64))),
                     "full", full, output=final)
    if cropped:
        ends = [-b if b else np.iinfo(np.int64).max for b in beyond]
        add("Slice", (joined, constant("starts", np.array(begin, np.int64)),
                      constant("ends", np.array(ends, np.int64)),
                      constant("axes", np.arange(2, 2 + d, dtype=np.int64))), "cropped", out,
            output=node.outputs[0])
    return made


__all__ = ["conv_transposes_as_phase_convs", "phase_weights"]
