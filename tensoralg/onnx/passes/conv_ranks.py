"""Opt level 2: 1-D, 3-D and dilated convolutions run as undilated 2-D ones, which the
static plan compiles.

**1-D.**
``Conv`` over ``(N, C, L)`` with a constant weight ``(M, C/g, K)`` is the same sum as a Conv
over ``(N, C, 1, L)`` with the weight ``(M, C/g, 1, K)``, a kernel row of height one, whose
strides, dilations and pads are the 1-D ones along the width and trivial along the height.
The static plan runs 2-D convolutions as generated kernels (patch blocks, the generated GEMM
writing NCHW tiles, depthwise windows); a 1-D one ran node by node as a NumPy im2col and a
BLAS call (Whisper's encoder: two convolutions over 100 frames took 0.4 ms, more than its
two attention layers; one thread, an ad hoc profile, 2026-12-05). The rewrite is
``Unsqueeze(x, 2) -> Conv -> Squeeze(., 2)``, both views in the static plan, and it holds
whatever the batch (the axes are constants, the shapes are not read). ``auto_pad`` carries over: along a height of one with a kernel height of one
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
input and one BLAS call (torchvision's r3d_18 at batch 1: 0.6x onnxruntime's speed,
``benchmarks/results/onnx_real-held-out-fourth-first-20261205-951cec7.json``).

**Dilated.** A 2-D Conv with dilations ``(dh, dw)`` and stride 1 reads, for output pixel
``(oh, ow)``, only input pixels in the same phase ``(oh mod dh, ow mod dw)``. Where the
dilations divide the input's height and width and the pads, it is the undilated Conv over the
``dh * dw`` phase images (each ``H / dh x W / dw``, pads divided by the dilations), run as
``dh * dw * N`` images, and the phases of its output interleaved back::

    Reshape(N, C, H/dh, dh, W/dw, dw) -> Transpose(dh, dw, N, C, H/dh, W/dw) -> Reshape ->
    Conv (undilated) -> Reshape -> Transpose(N, M, H'/dh, dh, W'/dw, dw) -> Reshape(N, M, H', W')

(TensorFlow's space-to-batch for atrous convolutions.)

**Dead taps.** Before that, a kernel row or column that meets only padding at every output
position (an atrous rate past the feature map: DeepLabV3's rates 24 and 36 on a 14 x 14 map
leave only the centre tap) is cut from the weight, the pads shrunk by what it spanned: the sum
loses terms that were all zero, so the result is the same. A 3x3 atrous Conv left with its
centre is a 1x1 Conv, which the plan runs on NCHW planes. The undilated Conv takes the generated
GEMM's direct convolution; the dilated one built a patch matrix (``im2row``) and multiplied it
(FCN-ResNet50's dilated 3x3 layers took 2.2x onnxruntime's time for them; one thread, an
ad hoc profile, 2026-12-05).

**Padded borders.** A kernel tap whose reach is past the map for a band of output positions
still reads padding there: at DeepLabV3's rate 12 on a 14 x 14 map the two outer taps of each
axis read the input at only two of the 14 output rows, so that 82% of the patch matrix is
padding and the Conv took 40% of the model's time (batch 8, one thread, an ad hoc profile,
2026-12-05). Along each axis the output positions fall into runs over which the taps that read
the input are the same (a contiguous range: a tap reads the input where
``0 <= o * stride - pad + k * dilation < size``); each pair of a row run and a column run is a
region, whose outputs are the unpadded Conv of the taps live there over the input rows and
columns those taps reach. Where the regions' work is at most half the padded Conv's, the Conv
becomes one Conv per region (sliced input, sliced weight, no pads) and the regions are joined
by two levels of Concat. A region with one live tap along an axis reads that axis with a
strided Slice, so that a region with one tap is a 1 x 1 Conv on NCHW planes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tensoralg.onnx.frontend.graph import Graph, Node, fresh_name, value_names
from tensoralg.onnx.ops.registry import lookup


def conv1d_as_conv2d(graph: Graph) -> Graph:
    """Replace every ``Conv`` over a rank-3 input with a constant rank-3 float weight by
    ``Unsqueeze -> Conv (height 1) -> Squeeze``; the Conv keeps its name, bias and group.

    >>> # graph = conv1d_as_conv2d(graph)   # Conv(x: (1, 16, 100), W: (64, 16, 3)) -> 2-D
    """
    def fits(node: Node, weight: np.ndarray, shape: tuple | None) -> bool:
        # (an input of another rank is the Conv's own error, left to it; a pointwise one
        # already runs as a prebound kernel, product_steps.pointwise_conv_spec)
        return weight.ndim == 3 and (shape is None or len(shape) == 3) and \
            not _pointwise(node, weight)

    return _rewrite(graph, fits, _row_conv,
                    "1-D convolutions: {} Conv(s) run as 2-D over planes one row high",
                    static=False)


def _row_conv(w: "_Writer", weight: np.ndarray, shape: tuple | None, out: tuple | None
              ) -> None:
    """A 1-D Conv as a 2-D Conv over planes one row high."""
    axes = w.shape_constant("row_axis", [2])
    rows = w.add("Unsqueeze", (w.node.inputs[0], axes), "rows",
                 None if shape is None else (*shape[:2], 1, shape[2]))
    planes = w.conv(rows, np.ascontiguousarray(weight[:, :, None, :]),
                    None if out is None else (*out[:2], 1, out[2]),
                    **_attributes_2d(w.node.attributes, weight.shape[2]))
    w.last("Squeeze", (planes, axes))


def _pointwise(node: Node, weight: np.ndarray) -> bool:
    """Whether a 1-D Conv takes one input cell per output cell: kernel 1, stride 1, unpadded."""
    attributes = node.attributes
    return weight.shape[2] == 1 and list(attributes.get("strides", [1])) == [1] and \
        not any(attributes.get("pads", [0, 0])) and \
        attributes.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")


def _attributes_2d(attributes: dict, width: int) -> dict:
    """What changes in a 1-D Conv's attributes for the same Conv over planes one row high."""
    changed: dict[str, Any] = {
        "kernel_shape": [1, int(attributes.get("kernel_shape", [width])[0])]}
    for key in ("strides", "dilations"):
        if key in attributes:
            changed[key] = [1, int(attributes[key][0])]
    if "pads" in attributes:
        begin, end = attributes["pads"]
        changed["pads"] = [0, int(begin), 0, int(end)]
    return changed


def conv3d_as_conv2d(graph: Graph) -> Graph:
    """Replace every group-1 ``Conv`` over a rank-5 input of static shape with a constant
    rank-5 float weight and explicit pads by the 2-D Conv over stacked frames described in the
    module docstring; the 2-D Conv keeps the node's name and bias.

    >>> # graph = conv3d_as_conv2d(graph)   # Conv(x: (1, 3, 8, 112, 112), W: (64, 3, 3, 7, 7))
    """
    def fits(node: Node, weight: np.ndarray, shape: tuple) -> bool:
        return weight.ndim == 5 and len(shape) == 5 and \
            int(node.attributes.get("group", 1)) == 1 and weight.shape[1] == shape[1]

    return _rewrite(graph, fits, _frames_conv,
                    "3-D convolutions: {} Conv(s) run as 2-D over stacked frames")


def dilated_as_phases(graph: Graph) -> Graph:
    """Replace every 2-D ``Conv`` with a dilation above 1, stride 1, a constant float weight
    and a static input whose height and width (and pads) the dilations divide by the same
    Conv undilated over the input's phase images (see the module docstring).

    >>> # graph = dilated_as_phases(graph)   # FCN's 3x3 convolutions at dilation 2 and 4
    """
    def fits(node: Node, weight: np.ndarray, shape: tuple) -> bool:
        attributes = node.attributes
        dilations = [int(v) for v in attributes.get("dilations", [1, 1])]
        pads = [int(v) for v in attributes.get("pads", [0, 0, 0, 0])]
        return weight.ndim == 4 and len(shape) == 4 and max(dilations) > 1 and \
            [int(v) for v in attributes.get("strides", [1, 1])] == [1, 1] and \
            shape[2] % dilations[0] == 0 and shape[3] % dilations[1] == 0 and \
            all(p % d == 0 for p, d in zip(pads, dilations * 2))

    return _rewrite(_unit_taps_undilated(graph), fits, _phase_conv,
                    "dilated convolutions: {} Conv(s) run undilated over phase images")


def _unit_taps_undilated(graph: Graph) -> Graph:
    """Every Conv with a constant weight whose kernel is one tap long along an axis dilated
    above 1 with that axis's dilation set to 1, which changes nothing it computes: a dilated
    network's 1 x 1 layers (smp's ``replace_strides_with_dilation`` dilates every Conv of a
    stage, DeepLabV3+'s downsampling shortcut among them) stay pointwise convolutions."""
    nodes: list[Node] = []
    for node in graph.nodes:
        weight = graph.constants.get(node.inputs[1]) \
            if node.op_type == "Conv" and len(node.inputs) > 1 else None
        dilations = [int(v) for v in node.attributes.get("dilations", [])]
        if weight is None or len(dilations) != weight.ndim - 2 or \
                all(d == 1 or size != 1 for d, size in zip(dilations, weight.shape[2:])):
            nodes.append(node)
            continue
        undilated = [1 if size == 1 else d for d, size in zip(dilations, weight.shape[2:])]
        nodes.append(Node(node.name, node.op_type, node.inputs, node.outputs,
                          dict(node.attributes, dilations=undilated), node.version,
                          node.impl))
    graph.nodes = nodes
    return graph


def _live_taps(size: int, kernel: int, dilation: int, stride: int, pad_begin: int,
               outputs: int) -> range | None:
    """The kernel taps along one axis that read the input at some output position, as a
    range (None when none does or they are not contiguous).

    >>> _live_taps(14, 3, 24, 1, 24, 14)      # an atrous rate past the map: the centre only
    range(1, 2)
    >>> _live_taps(14, 3, 12, 1, 12, 14)
    range(0, 3)
    """
    live = [k for k in range(kernel)
            if any(0 <= o * stride - pad_begin + k * dilation < size for o in range(outputs))]
    if not live or live != list(range(live[0], live[-1] + 1)):
        return None
    return range(live[0], live[-1] + 1)


def dead_taps_cut(graph: Graph) -> Graph:
    """Cut from every 2-D ``Conv`` with a constant float weight, static shapes and explicit
    pads the kernel rows and columns that read only padding (see the module docstring); the
    Conv keeps its name, inputs other than the weight, and output.

    >>> # graph = dead_taps_cut(graph)   # DeepLabV3's ASPP at rates 24 and 36 on 14 x 14
    """
    nodes: list[Node] = []
    taken = value_names(graph)
    cut = 0
    for node in graph.nodes:
        attributes = node.attributes
        weight, shape, out = _conv_operands(graph, node)
        if weight is None or weight.ndim != 4 or shape is None or \
                out is None or len(shape) != 4 or len(out) != 4 or \
                attributes.get("auto_pad", "NOTSET") != "NOTSET":
            nodes.append(node)
            continue
        dilations = [int(v) for v in attributes.get("dilations", [1, 1])]
        strides = [int(v) for v in attributes.get("strides", [1, 1])]
        pads = [int(v) for v in attributes.get("pads", [0, 0, 0, 0])]
        taps = [_live_taps(shape[2 + a], weight.shape[2 + a], dilations[a], strides[a],
                           pads[a], out[2 + a]) for a in range(2)]
        if any(t is None for t in taps) or \
                all(len(t) == weight.shape[2 + a] for a, t in enumerate(taps)):
            nodes.append(node)
            continue
        begins = [pads[a] - taps[a].start * dilations[a] for a in range(2)]
        ends = [pads[2 + a] - (weight.shape[2 + a] - taps[a].stop) * dilations[a]
                for a in range(2)]
        kept = [(shape[2 + a] + begins[a] + ends[a] - dilations[a] * (len(taps[a]) - 1) - 1)
                // strides[a] + 1 for a in range(2)]
        if min(begins + ends) < 0 or kept != list(out[2:]):
            nodes.append(node)       # a cut that would need a crop: left as it is
            continue
        name = fresh_name(f"{node.name}/live_taps", taken)
        graph.constants[name] = np.ascontiguousarray(weight[:, :, taps[0].start:taps[0].stop,
                                                            taps[1].start:taps[1].stop])
        changed = dict(attributes, kernel_shape=[len(t) for t in taps], pads=begins + ends,
                       dilations=[d if len(t) > 1 else 1 for d, t in zip(dilations, taps)])
        nodes.append(Node(node.name, node.op_type, (node.inputs[0], name, *node.inputs[2:]),
                          node.outputs, changed, node.version, node.impl))
        cut += 1
    graph.nodes = nodes
    if cut:
        graph.notes.append(f"dead kernel taps: {cut} Conv(s) cut to the taps that read input")
    return graph


def _conv_operands(graph: Graph, node: Node) -> tuple[np.ndarray | None, tuple | None,
                                                      tuple | None]:
    """A Conv's constant float weight (None for another node or weight) and its input's and
    output's static shapes (None where not static)."""
    if node.op_type != "Conv" or len(node.inputs) < 2:
        return None, None, None
    weight = graph.constants.get(node.inputs[1])
    if weight is not None and weight.dtype.kind != "f":
        weight = None
    return weight, graph.static_shapes.get(node.inputs[0]), \
        graph.static_shapes.get(node.outputs[0])


def _rewrite(graph: Graph, fits: Callable[[Node, np.ndarray, Any], bool],
             write: Callable[["_Writer", np.ndarray, Any, Any], None], note: str,
             static: bool = True) -> Graph:
    """``graph`` with every Conv that ``fits`` (a constant float weight; with ``static``,
    static input and output shapes and explicit pads) replaced by the nodes ``write``
    makes."""
    ops = {op: (version, lookup(op, version)) for op, version in (
        ("Transpose", 13), ("Slice", 13), ("Concat", 13), ("Reshape", 14), ("Unsqueeze", 13),
        ("Squeeze", 13))}
    if any(impl is None for _, impl in ops.values()):
        return graph
    taken = value_names(graph)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        weight, shape, out = _conv_operands(graph, node)
        # A Conv that adds a residual (passes/fusion: the skip connection after it) keeps its
        # form: the rewritten Conv writes another layout (phase images, stacked frames) than
        # the residual's.
        if weight is None or len(node.inputs) > 3 and node.inputs[3] or \
                static and (shape is None or out is None or node.attributes.get(
                    "auto_pad", "NOTSET") not in ("NOTSET", "VALID")) or \
                not fits(node, weight, shape):
            nodes.append(node)
            continue
        writer = _Writer(node, graph, ops, taken)
        write(writer, weight, shape, out)
        nodes += writer.nodes
        replaced += 1
    graph.nodes = nodes
    if replaced:
        graph.notes.append(note.format(replaced))
    return graph


class _Writer:
    """Writes the nodes that replace one Conv: fresh value names under the Conv's, constants,
    and shapes recorded as they are made."""

    def __init__(self, node: Node, graph: Graph, ops: dict, taken: set[str]) -> None:
        self.node, self.graph, self.ops, self.taken = node, graph, ops, taken
        self.nodes: list[Node] = []

    def name(self, part: str) -> str:
        return fresh_name(f"{self.node.name}/{part}", self.taken)

    def constant(self, part: str, value: np.ndarray) -> str:
        key = self.name(part)
        self.graph.constants[key] = value
        return key

    def shape_constant(self, part: str, shape: Sequence[int]) -> str:
        return self.constant(part, np.array(shape, np.int64))

    def add(self, op: str, inputs: tuple, part: str, shape: tuple | None,
            **attrs: Any) -> str:
        output = self.name(part)
        self.nodes.append(Node(f"{self.node.name}/{op}_{part}", op, inputs, (output,), attrs,
                               *self.ops[op]))
        if shape is not None:
            self.graph.static_shapes[output] = tuple(shape)
        return output

    def reshape(self, x: str, part: str, shape: Sequence[int]) -> str:
        """``x`` reshaped (a view in the static plan) to the static ``shape``."""
        return self.add("Reshape", (x, self.shape_constant(f"{part}_shape", shape)), part,
                        tuple(shape))

    def conv(self, x: str, weight: np.ndarray | None, shape: tuple | None,
             name: str | None = None, **changed: Any) -> str:
        """The Conv itself (its name unless ``name`` is given, bias and other attributes kept)
        on ``x``, with a new ``weight`` or (None) its own."""
        attributes = {key: value for key, value in self.node.attributes.items()
                      if key not in changed}
        attributes.update(changed)
        planes = self.name("planes")
        self.nodes.append(Node(name or self.node.name, "Conv",
                               (x, self.node.inputs[1] if weight is None else
                                self.constant("weight", weight), *self.node.inputs[2:]),
                               (planes,), attributes, self.node.version, self.node.impl))
        if shape is not None:
            self.graph.static_shapes[planes] = tuple(shape)
        return planes

    def last(self, op: str, inputs: tuple, **attrs: Any) -> None:
        """The final node, writing the replaced Conv's output."""
        self.nodes.append(Node(f"{self.node.name}/{op}_back", op, inputs, self.node.outputs,
                               attrs, *self.ops[op]))


def _frames_conv(w: _Writer, weight: np.ndarray, shape: tuple, out: tuple) -> None:
    """A 3-D Conv as a 2-D Conv over stacked frames."""
    attributes = w.node.attributes
    batch, channels, frames, height, width = shape
    out_channels, frames_out, out_h, out_w = out[1], out[2], out[3], out[4]
    kt = weight.shape[2]
    st, sh, sw = (int(v) for v in attributes.get("strides", [1, 1, 1]))
    dt, dh, dw = (int(v) for v in attributes.get("dilations", [1, 1, 1]))
    pads = [int(v) for v in attributes.get("pads", [0] * 6)]
    padded = frames + pads[0] + pads[3]
    x = w.add("Transpose", (w.node.inputs[0],), "frames_first",
              (batch, frames, channels, height, width), perm=[0, 2, 1, 3, 4])
    if pads[0] or pads[3]:
        # zero frames joined on (a Concat of block copies; a Pad ran as np.pad, 5x slower)
        def zeros(side: str, count: int) -> list[str]:
            return [w.constant(f"zero_frames_{side}", np.zeros(
                (batch, count, channels, height, width), weight.dtype))] if count else []

        x = w.add("Concat", (*zeros("before", pads[0]), x, *zeros("after", pads[3])),
                  "padded", (batch, padded, channels, height, width), axis=1)
    axis = w.shape_constant("time_axis", [1])
    step = w.shape_constant("time_step", [st])
    slices = []
    for k in range(kt):
        begin = k * dt
        end = begin + st * (frames_out - 1) + 1
        slices.append(w.add("Slice", (x, w.shape_constant(f"begin_{k}", [begin]),
                                      w.shape_constant(f"end_{k}", [end]), axis, step),
                            f"frame_{k}", (batch, frames_out, channels, height, width)))
    stacked = slices[0] if kt == 1 else w.add(
        "Concat", tuple(slices), "stacked", (batch, frames_out, kt * channels, height, width),
        axis=2)
    images = w.reshape(stacked, "images", (batch * frames_out, kt * channels, height, width))
    planes = w.conv(images, np.ascontiguousarray(weight.transpose(0, 2, 1, 3, 4).reshape(
        out_channels, kt * channels, *weight.shape[3:])),
        (batch * frames_out, out_channels, out_h, out_w),
        kernel_shape=list(weight.shape[3:]), strides=[sh, sw], dilations=[dh, dw],
        pads=[pads[1], pads[2], pads[4], pads[5]])
    frames_major = w.reshape(planes, "per_frame", (batch, frames_out, out_channels, out_h, out_w))
    w.last("Transpose", (frames_major,), perm=[0, 2, 1, 3, 4])


def _phase_conv(w: _Writer, weight: np.ndarray, shape: tuple, out: tuple) -> None:
    """A dilated 2-D Conv as the undilated Conv over the input's ``dh * dw`` phase images."""
    attributes = w.node.attributes
    batch, channels, height, width = shape
    out_channels, out_h, out_w = out[1], out[2], out[3]
    dh, dw = (int(v) for v in attributes.get("dilations", [1, 1]))
    pads = [int(v) for v in attributes.get("pads", [0, 0, 0, 0])]
    split = w.reshape(w.node.inputs[0], "phase_rows",
                      (batch, channels, height // dh, dh, width // dw, dw))
    phases = w.add("Transpose", (split,), "phases",
                   (dh, dw, batch, channels, height // dh, width // dw), perm=[3, 5, 0, 1, 2, 4])
    images = w.reshape(phases, "images", (dh * dw * batch, channels, height // dh, width // dw))
    planes = w.conv(images, None, (dh * dw * batch, out_channels, out_h // dh, out_w // dw),
                    dilations=[1, 1], pads=[pads[0] // dh, pads[1] // dw, pads[2] // dh,
                                            pads[3] // dw])
    grouped = w.reshape(planes, "phase_planes",
                        (dh, dw, batch, out_channels, out_h // dh, out_w // dw))
    joined = w.add("Transpose", (grouped,), "joined",
                   (batch, out_channels, out_h // dh, dh, out_w // dw, dw),
                   perm=[2, 3, 4, 0, 5, 1])
    w.last("Reshape", (joined, w.shape_constant("out_shape", list(out))))


# A Conv is split into regions when their work is at most this share of the padded Conv's,
# and into at most this many regions: each region is a kernel of its own (compiled once per
# shape) and a Slice of the input, which pay off only when most of the patch matrix is padding.
REGION_WORK_SHARE = 0.5
MOST_REGIONS = 16


def _tap_runs(size: int, kernel: int, dilation: int, stride: int, pad_begin: int,
              outputs: int) -> list[tuple[int, int, range]] | None:
    """Along one axis, the runs ``(first, stop, taps)`` of output positions over which the
    kernel taps that read the input are the same range (None where some position reads only
    padding: its output is the bias alone, which no region Conv writes).

    >>> _tap_runs(14, 3, 12, 1, 12, 14)       # DeepLabV3's rate 12 on a 14 x 14 map
    [(0, 2, range(1, 3)), (2, 12, range(1, 2)), (12, 14, range(0, 2))]
    >>> _tap_runs(8, 3, 1, 1, 1, 8)
    [(0, 1, range(1, 3)), (1, 7, range(0, 3)), (7, 8, range(0, 2))]
    """
    runs: list[tuple[int, int, range]] = []
    for o in range(outputs):
        base = o * stride - pad_begin
        # 0 <= base + k * dilation < size holds for a contiguous range of k
        first = max(0, -(base // dilation))
        stop = min(kernel, (size - 1 - base) // dilation + 1) if size - 1 - base >= 0 else 0
        if first >= stop:
            return None
        taps = range(first, stop)
        if runs and runs[-1][2] == taps:
            runs[-1] = (runs[-1][0], o + 1, taps)
        else:
            runs.append((o, o + 1, taps))
    return runs


def _region_runs(node: Node, weight: np.ndarray, shape: tuple, out: tuple
                 ) -> list[list[tuple[int, int, range]]] | None:
    """The row and column runs of a 2-D Conv worth splitting into regions, or None."""
    attributes = node.attributes
    if weight.ndim != 4 or len(shape) != 4 or len(out) != 4 or attributes.get("residual") or \
            attributes.get("auto_pad", "NOTSET") != "NOTSET" or min(out[2:]) < 1:
        return None
    dilations = [int(v) for v in attributes.get("dilations", [1, 1])]
    strides = [int(v) for v in attributes.get("strides", [1, 1])]
    pads = [int(v) for v in attributes.get("pads", [0, 0, 0, 0])]
    runs = [_tap_runs(shape[2 + a], weight.shape[2 + a], dilations[a], strides[a], pads[a],
                      out[2 + a]) for a in range(2)]
    if runs[0] is None or runs[1] is None or len(runs[0]) * len(runs[1]) < 2 or \
            len(runs[0]) * len(runs[1]) > MOST_REGIONS:
        return None
    work = 1.0
    for a, axis in enumerate(runs):
        work *= sum((stop - first) * len(taps) for first, stop, taps in axis) / \
            (out[2 + a] * weight.shape[2 + a])
    return runs if work <= REGION_WORK_SHARE else None


def padded_regions_split(graph: Graph) -> Graph:
    """Replace every 2-D ``Conv`` (constant float weight, static shapes, explicit pads, no
    fused residual) whose patch matrix is mostly padding by one unpadded Conv per region of
    output positions with the same live taps, joined by Concats (see the module docstring);
    the region Convs keep the bias, the activation and the group.

    >>> # graph = padded_regions_split(graph)   # DeepLabV3's ASPP at rate 12 on 14 x 14
    """
    def fits(node: Node, weight: np.ndarray, shape: tuple) -> bool:
        out = graph.static_shapes.get(node.outputs[0])
        return out is not None and _region_runs(node, weight, shape, out) is not None

    return _rewrite(graph, fits, _region_convs,
                    "padded borders: {} Conv(s) split into regions of the taps that read input")


def _region_convs(w: _Writer, weight: np.ndarray, shape: tuple, out: tuple) -> None:
    """A 2-D Conv as one unpadded Conv per region, the regions joined by Concats."""
    attributes = w.node.attributes
    runs = _region_runs(w.node, weight, shape, out)
    assert runs is not None   # fits() checked it
    dilations = [int(v) for v in attributes.get("dilations", [1, 1])]
    strides = [int(v) for v in attributes.get("strides", [1, 1])]
    pads = [int(v) for v in attributes.get("pads", [0, 0, 0, 0])]
    batch, out_channels = shape[0], out[1]
    axes = w.shape_constant("axes", [2, 3])
    bands: list[list[str]] = []
    for i, row in enumerate(runs[0]):
        pieces = []
        for j, column in enumerate(runs[1]):
            begins, ends, steps, kernel, stride, dilation, size = [], [], [], [], [], [], []
            for a, (first, stop, taps) in enumerate((row, column)):
                begin = first * strides[a] - pads[a] + taps.start * dilations[a]
                one = len(taps) == 1
                # one tap: a strided Slice takes the stride, and the Conv is 1 x 1 along a
                end = (stop - 1) * strides[a] - pads[a] + (taps.stop - 1) * dilations[a] + 1
                begins.append(begin)
                ends.append(end)
                steps.append(strides[a] if one else 1)
                kernel.append(len(taps))
                stride.append(1 if one else strides[a])
                dilation.append(1 if one else dilations[a])
                size.append(stop - first if one else end - begin)
            x = w.node.inputs[0]
            if begins != [0, 0] or ends != list(shape[2:]) or steps != [1, 1]:
                x = w.add("Slice", (x, w.shape_constant(f"begin_{i}_{j}", begins),
                                    w.shape_constant(f"end_{i}_{j}", ends), axes,
                                    w.shape_constant(f"step_{i}_{j}", steps)),
                          f"input_{i}_{j}", (batch, shape[1], *size))
            pieces.append(w.conv(
                x, np.ascontiguousarray(weight[:, :, row[2].start:row[2].stop,
                                               column[2].start:column[2].stop]),
                (batch, out_channels, row[1] - row[0], column[1] - column[0]),
                name=f"{w.node.name}/region_{i}_{j}", kernel_shape=kernel, strides=stride,
                dilations=dilation, pads=[0, 0, 0, 0]))
        bands.append(pieces)
    if len(bands) == 1:       # one row run: its regions side by side are the output
        w.last("Concat", tuple(bands[0]), axis=3)
        return
    rows = [pieces[0] if len(pieces) == 1 else w.add(
        "Concat", tuple(pieces), f"band_{i}", (batch, out_channels, row[1] - row[0], out[3]),
        axis=3) for i, (pieces, row) in enumerate(zip(bands, runs[0]))]
    w.last("Concat", tuple(rows), axis=2)


__all__ = ["conv1d_as_conv2d", "conv3d_as_conv2d", "dead_taps_cut", "dilated_as_phases",
           "padded_regions_split"]
