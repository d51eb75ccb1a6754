"""Opt level 2: an inference BatchNormalization after a Conv, folded into the Conv's weights;
and a Relu or constant-bound Clip after a Conv, applied by the Conv's own kernel.

In inference mode BatchNormalization is a per-channel affine map of its input,
``Y(n,c,...) = (X(n,c,...) - mean(c)) * s(c) + beta(c)`` with ``s = scale / sqrt(var + eps)``.
Output channel ``m`` of a Conv is linear in the weights of that channel alone (whatever the
group), so the map moves into the weights and bias, computed once at load::

    W'(m,...) = W(m,...) * s(m)        B'(m) = (B(m) - mean(m)) * s(m) + beta(m)

and the pair runs as one Conv, one pass over the activations instead of two.

A Relu whose input is a Conv's output read by nothing else joins the Conv (attribute
``activation``, a typed ``fusion.Activation``: ``RELU``), so the convolution kernel applies it
in registers before its only store; so does a Clip whose bounds are constants
(``Activation.clip(0.0, 6.0)`` for ReLU6, its float bounds carried as they are,
MobileNetV2's ~35 of them otherwise a pass each), clamped ``min(max(x, low), high)`` with NaN
kept, as onnxruntime's Clip. At level 3 a Conv whose weight has at least the sparse-weight threshold of zeros is also
marked ``skip_zeros``: its kernel leaves the zero weights out, as sparse MatMul/Gemm weights do.
Both attributes are tensoralg's own; the node keeps ``op_type == "Conv"`` and an implementation
that honours them, so node-by-node runs give the same values. (One difference remains, as for
any skipped zero: where the input holds inf or NaN, a node-by-node run, which multiplies the
zero weights, gives NaN where the static plan's kernel, which has no such multiply, does not.)
"""
from __future__ import annotations

import numpy as np
import onnx

from tensoralg.onnx.frontend.graph import (
    OWN_ATTRIBUTES,
    Graph,
    Node,
    consumers_of,
    fresh_name,
    value_names,
)
from tensoralg.onnx.ops.kernels import NodeContext, elementwise
from tensoralg.onnx.ops.registry import OpImpl, lookup
from tensoralg.program import HARD_SWISH, RELU, SIGMOID, SILU, Activation, planar_pays


def fold_conv_batchnorm(graph: Graph) -> Graph:
    """Replace each Conv whose only consumer is an inference BatchNormalization by one Conv
    with folded constants; afterwards no foldable pair remains.

    For example ``conv1: Conv(x, W1, b1) -> c1`` then ``bn1: BatchNormalization(c1, gamma,
    beta, mu, var) -> bn`` becomes ``conv1: Conv(x, W1*bn1, b1*bn1) -> bn``, with the new
    constants in ``graph.constants``. A pair is left as it is unless the Conv's weight (and
    bias, if any) and the four statistics are float constants of matching channel count, the
    Conv's output is used by the BatchNormalization alone and is no graph output, and the
    BatchNormalization has no other used output.
    """
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    nodes = list(graph.nodes)
    producer = {name: k for k, node in enumerate(nodes) for name in node.outputs if name}
    removed: set[int] = set()
    replaced: set[str] = set()
    folded = []
    # In topological order, so Conv -> BN -> BN folds twice: the first fold's Conv is found as
    # the producer of the second BN's input.
    for k, bn in enumerate(nodes):
        if bn.op_type != "BatchNormalization" or not bn.inputs:
            continue
        j = producer.get(bn.inputs[0])
        if j is None or nodes[j].op_type != "Conv":
            continue
        conv = nodes[j]
        if not _foldable(conv, bn, graph, consumers, outputs):
            continue
        nodes[j] = _folded(conv, bn, graph, taken)
        producer[bn.outputs[0]] = j
        replaced.update(name for name in conv.inputs[1:] + bn.inputs[1:] if name)
        removed.add(k)
        folded.append(f"{bn.name} into {conv.name}")
    graph.nodes = [node for k, node in enumerate(nodes) if k not in removed]
    # The original weights and statistics are dead unless something else still reads them.
    still_used = outputs | {name for node in graph.nodes for name in node.inputs}
    for name in replaced - still_used:
        graph.constants.pop(name, None)
    graph.notes.append(f"conv+batchnorm: {len(folded)} folded" +
                       (f" ({', '.join(folded)})" if folded else ""))
    return graph


def fold_pads_into_convs(graph: Graph) -> Graph:
    """Fold a Pad of zeros on the spatial axes into the Conv that alone reads it: ``p:
    Pad(x, pads) -> xp`` then ``c: Conv(xp, W, ...) -> y`` becomes ``c: Conv(x, W, ...) -> y``
    with the pads added to the Conv's own. TorchScript exports ``nn.ZeroPad2d`` before a
    convolution that way (deepctr's CCPM pads its fields so), and the padded copy costs a
    pass of its own where the convolution's kernels treat borders as zeros anyway.

    A pair is left as it is unless the Pad is in ``constant`` mode with a constant value of
    zero (or none), constant pads that are non-negative and zero on the batch and channel
    axes, its output is read by that Conv alone (as its input, not a graph output), and the
    Conv has a constant weight and no ``auto_pad``.
    """
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    nodes = list(graph.nodes)
    producer = {name: k for k, node in enumerate(nodes) for name in node.outputs if name}
    removed: set[int] = set()
    folded = []
    for k, conv in enumerate(nodes):
        if conv.op_type != "Conv" or len(conv.inputs) < 2:
            continue
        j = producer.get(conv.inputs[0])
        if j is None or nodes[j].op_type != "Pad" or j in removed:
            continue
        pad = nodes[j]
        if pad.outputs[0] in outputs or len(consumers.get(pad.outputs[0], [])) != 1:
            continue
        weight = graph.constants.get(conv.inputs[1])
        if weight is None or weight.ndim < 3 or \
                conv.attributes.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET"):
            continue
        widths = _zero_pads(pad, graph, weight.ndim)
        if widths is None:
            continue
        spatial = weight.ndim - 2
        own = [int(v) for v in conv.attributes.get("pads") or [0] * (2 * spatial)]
        if len(own) != 2 * spatial:
            continue
        merged = [own[a] + widths[a + 2][0] for a in range(spatial)] + \
                 [own[spatial + a] + widths[a + 2][1] for a in range(spatial)]
        nodes[k] = Node(conv.name, conv.op_type, (pad.inputs[0], *conv.inputs[1:]),
                        conv.outputs, {**conv.attributes, "pads": merged}, conv.version,
                        conv.impl)
        removed.add(j)
        folded.append(f"{pad.name} into {conv.name}")
    graph.nodes = [node for k, node in enumerate(nodes) if k not in removed]
    graph.notes.append(f"pad+conv: {len(folded)} folded" +
                       (f" ({', '.join(folded)})" if folded else ""))
    return graph


def _zero_pads(pad: Node, graph: Graph, rank: int) -> list[tuple[int, int]] | None:
    """``(begin, end)`` per axis of a rank-``rank`` input that ``pad`` adds, when it adds
    zeros on the spatial axes only (non-negative, constant); None otherwise."""
    if pad.attributes.get("mode", "constant") not in ("constant", b"constant"):
        return None
    names = list(pad.inputs) + [""] * (4 - len(pad.inputs))
    pads, value, axes = (graph.constants.get(name) if name else None for name in names[1:4])
    if pads is None or (names[2] and value is None) or (names[3] and axes is None):
        return None
    if value is not None and (value.size > 1 or (value.size == 1 and value.reshape(-1)[0] != 0)):
        return None
    chosen = list(range(rank)) if axes is None else \
        [int(a) % rank for a in axes.reshape(-1) if -rank <= int(a) < rank]
    values = [int(v) for v in pads.reshape(-1)]
    if len(values) != 2 * len(chosen) or len(set(chosen)) != len(chosen) or \
            (axes is not None and len(chosen) != axes.size):
        return None
    widths = [(0, 0)] * rank
    for k, axis in enumerate(chosen):
        widths[axis] = (values[k], values[k + len(chosen)])
    if any(b < 0 or e < 0 for b, e in widths) or widths[0] != (0, 0) or widths[1] != (0, 0):
        return None
    return widths


def batchnorm_as_affine(graph: Graph) -> Graph:
    """Replace each inference BatchNormalization no Conv took (DenseNet's, after a Concat)
    whose statistics are float constants by ``Mul(x, s) -> Add(., t)``, with
    ``s = scale / sqrt(var + eps)`` and ``t = beta - mean * s`` computed once in float64 and
    shaped ``(C, 1, ..., 1)`` to broadcast over the channel axis; afterwards no such
    BatchNormalization remains. The two nodes join the fused statement of what follows (a
    Relu): one multiply-add per element instead of a subtraction, a square root and a
    division, and no pass of its own. Left as it is where the input's rank is unknown, the
    variance gives ``var + eps <= 0`` (its inf/NaN pattern stays the model's) or a running
    statistic output is used.
    """
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    nodes: list[Node] = []
    rewritten = []
    statistics: set[str] = set()
    for node in graph.nodes:
        affine = _affine(node, graph, consumers, outputs, taken)
        if affine is None:
            nodes.append(node)
            continue
        nodes.extend(affine)
        rewritten.append(node.name)
        statistics.update(name for name in node.inputs[1:] if name)
    graph.nodes = nodes
    # The statistics are dead unless something else still reads them.
    still_used = outputs | {name for node in graph.nodes for name in node.inputs}
    for name in statistics - still_used:
        graph.constants.pop(name, None)
    graph.notes.append(f"batchnorm as affine: {len(rewritten)} rewritten")
    return graph


def _affine(bn: Node, graph: Graph, consumers: dict[str, list[Node]], outputs: set[str],
            taken: set[str]) -> list[Node] | None:
    """The Mul and Add computing ``bn``'s output, their constants added to the graph; None
    where ``bn`` stays (see :func:`batchnorm_as_affine`)."""
    if bn.op_type != "BatchNormalization" or len(bn.inputs) != 5 or \
            bn.attributes.get("training_mode", 0) or not bn.outputs:
        return None
    if any(name and (name in outputs or name in consumers) for name in bn.outputs[1:]):
        return None
    stats = [graph.constants.get(name) for name in bn.inputs[1:]]
    rank = graph.ranks.get(bn.inputs[0])
    if rank is None or rank < 2 or any(s is None or s.ndim != 1 or s.dtype.kind != "f"
                                       for s in stats):
        return None
    if len({s.shape for s in stats}) != 1 or len({s.dtype for s in stats}) != 1:
        return None
    scale, beta, mean, var = (s.astype(np.float64) for s in stats)
    epsilon = float(bn.attributes.get("epsilon", 1e-5))
    if not np.all(var + epsilon > 0):
        return None
    factor = scale / np.sqrt(var + epsilon)
    shift = beta - mean * factor
    shape = (-1,) + (1,) * (rank - 2)
    dtype = stats[0].dtype
    s_name = fresh_name(f"{bn.name}.scale", taken)
    t_name = fresh_name(f"{bn.name}.shift", taken)
    hidden = fresh_name(f"{bn.outputs[0]}.scaled", taken)
    graph.constants[s_name] = factor.astype(dtype).reshape(shape)
    graph.constants[t_name] = shift.astype(dtype).reshape(shape)
    made = []
    for op_type, inputs, output in (("Mul", (bn.inputs[0], s_name), hidden),
                                    ("Add", (hidden, t_name), bn.outputs[0])):
        version = onnx.defs.get_schema(op_type, graph.opset).since_version
        made.append(Node(f"{bn.name}.{op_type.lower()}", op_type, inputs, (output,), {},
                         version, lookup(op_type, version)))
    return made


def _foldable(conv: Node, bn: Node, graph: Graph, consumers: dict[str, list[Node]],
              outputs: set[str]) -> bool:
    """Whether the pair may be folded without changing any value the graph exposes."""
    if len(conv.inputs) < 2 or not conv.outputs or len(bn.inputs) != 5 or \
            bn.attributes.get("training_mode", 0):
        return False
    hidden = conv.outputs[0]
    if hidden in outputs or [c.name for c in consumers.get(hidden, [])] != [bn.name]:
        return False
    # Running mean/var outputs (training exports) vanish with the node: only fold if unused.
    if any(name and (name in outputs or name in consumers) for name in bn.outputs[1:]):
        return False
    weight = graph.constants.get(conv.inputs[1])
    bias_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    stats = [graph.constants.get(name) for name in bn.inputs[1:]]
    if weight is None or weight.ndim < 3 or any(s is None for s in stats) or \
            (bias_name and bias_name not in graph.constants):
        return False
    channels = (weight.shape[0],)
    vectors = stats + ([graph.constants[bias_name]] if bias_name else [])
    if weight.dtype.kind != "f" or any(v.dtype.kind != "f" or v.shape != channels
                                       for v in vectors):
        return False
    # A variance with var + eps <= 0 gives inf/NaN either way; the original nodes keep the
    # model's own inf/NaN pattern, which folding into the weights would not.
    epsilon = float(bn.attributes.get("epsilon", 1e-5))
    return bool(np.all(stats[3].astype(np.float64) + epsilon > 0))


def _folded(conv: Node, bn: Node, graph: Graph, taken: set[str]) -> Node:
    """The Conv computing ``bn``'s output, its new weight and bias added to the constants."""
    weight = graph.constants[conv.inputs[1]]
    bias_name = conv.inputs[2] if len(conv.inputs) > 2 else ""
    scale, beta, mean, var = (graph.constants[name].astype(np.float64) for name in bn.inputs[1:])
    # float64 here whatever the model's float type, so folding adds no rounding of its own
    # beyond the one cast back to the weight's dtype.
    factor = scale / np.sqrt(var + float(bn.attributes.get("epsilon", 1e-5)))
    bias = graph.constants[bias_name].astype(np.float64) if bias_name else 0.0
    new_weight = weight.astype(np.float64) * factor.reshape((-1,) + (1,) * (weight.ndim - 1))
    new_bias = (bias - mean) * factor + beta
    w_name = fresh_name(f"{conv.inputs[1]}*{bn.name}", taken)
    b_name = fresh_name(f"{bias_name or conv.name + '.bias'}*{bn.name}", taken)
    graph.constants[w_name] = new_weight.astype(weight.dtype)
    graph.constants[b_name] = new_bias.astype(weight.dtype)
    return Node(conv.name, conv.op_type, (conv.inputs[0], w_name, b_name), bn.outputs[:1],
                conv.attributes, conv.version, conv.impl)


def fuse_conv_residuals(graph: Graph, threshold: float | None = None) -> Graph:
    """Join to a pointwise Conv the Add that sums its output with another value of the same
    shape (a bottleneck block's skip connection), when the Conv's output is read by that Add
    alone: ``c: Conv(x, W, B) -> h`` then ``a: Add(h, r) -> y`` becomes ``c: Conv(x, W, B, r)
    -> y`` with ``residual=1``, placed where the Add was (``r`` may be computed after the
    Conv). A Relu or Clip after the Add then joins the Conv as its activation
    (:func:`fuse_conv_activations`), so ``relu(conv1x1(x) + b + r)`` is one pass of the
    generated pointwise convolution, which adds ``r`` in registers before its only store.

    Only Convs that kernel runs are joined: a constant float 1x1 weight, group 1, stride 1,
    no padding, fully static shapes with enough output positions per image
    (``runtime.planar.planar_pays``), and (with ``threshold``, level 3) a weight not pruned
    enough to be marked ``skip_zeros``. The Add must not broadcast. Node by node, the Conv
    adds ``r`` after the convolution, as the Add did.
    """
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    producer = {node.outputs[0]: node for node in graph.nodes
                if node.op_type == "Conv" and node.outputs and node.outputs[0]}
    shapes = graph.static_shapes

    def pointwise(conv: Node) -> bool:
        weight = graph.constants.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
        x = shapes.get(conv.inputs[0])
        attrs = conv.attributes
        if weight is None or weight.ndim != 4 or weight.shape[2:] != (1, 1) or \
                weight.dtype not in (np.float32, np.float64) or x is None or len(x) != 4 or \
                int(attrs.get("group", 1)) != 1 or len(conv.inputs) > 3 or \
                any(int(v) != 1 for v in attrs.get("strides") or ()) or \
                any(int(v) != 0 for v in attrs.get("pads") or ()) or \
                attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or \
                set(attrs) - {"group", "kernel_shape", "strides", "dilations", "pads",
                              "auto_pad"}:
            return False
        bias = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
        if bias is not None and getattr(graph.constants.get(bias), "dtype", None) != \
                weight.dtype:
            return False
        if threshold is not None and weight.size and \
                1.0 - np.count_nonzero(weight) / weight.size >= threshold:
            return False
        return planar_pays(weight.dtype, x[2] * x[3])

    joined: dict[str, tuple[Node, str]] = {}     # Add name -> (its Conv, the residual)
    taken: set[str] = set()                      # the Convs joined so far
    for node in graph.nodes:
        if node.op_type != "Add" or len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
            continue
        for side in (0, 1):
            h, r = node.inputs[side], node.inputs[1 - side]
            conv = producer.get(h)
            if conv is None or h in outputs or r in graph.constants or not r or \
                    [c.name for c in consumers.get(h, [])] != [node.name] or \
                    conv.name in taken or \
                    shapes.get(h) is None or shapes.get(h) != shapes.get(r) or \
                    shapes.get(node.outputs[0]) != shapes.get(h) or not pointwise(conv):
                continue
            joined[node.name] = (conv, r)
            taken.add(conv.name)
            break
    if not joined:
        graph.notes.append("conv+residual: 0 fused")
        return graph
    nodes = []
    for node in graph.nodes:
        if node.name in taken:
            continue
        if node.name not in joined:
            nodes.append(node)
            continue
        conv, r = joined[node.name]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        nodes.append(Node(conv.name, "Conv", (conv.inputs[0], conv.inputs[1], bias, r),
                          node.outputs, {**conv.attributes, "residual": 1}, conv.version,
                          with_own_attributes(conv.impl)))
    graph.nodes = nodes
    graph.notes.append(f"conv+residual: {len(joined)} fused (" +
                       ", ".join(f"{add} into {conv.name}" for add, (conv, _) in joined.items())
                       + ")")
    return graph


def fuse_conv_activations(graph: Graph, threshold: float | None = None) -> Graph:
    """Join each activation to the Conv it reads, when nothing else reads that Conv's output:
    a Relu, a Clip with constant bounds, a Sigmoid, a HardSigmoid, a HardSwish, or a SiLU
    (``Mul(h, Sigmoid(h))``, the sigmoid read by nothing else); with ``threshold`` (level 3),
    mark the Convs whose weight has at least that fraction of zeros ``skip_zeros``.

    For example ``c: Conv(x, W, B) -> h`` then ``r: Relu(h) -> y`` becomes
    ``c: Conv(x, W, B) -> y`` with ``activation=RELU``; ``Clip(h, 0, 6)`` (ReLU6) gives
    ``activation=Activation.clip(0.0, 6.0)`` (a typed value, printed ``Clip(0.0, 6.0)``),
    ``Sigmoid(h) -> s, Mul(h, s) -> y`` gives ``activation=SILU``. Every Conv path applies it
    in registers or right after (``codegen/activation.py``).
    """
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    producer = {name: node for node in graph.nodes if node.op_type == "Conv"
                for name in node.outputs[:1] if name}
    absorbed: dict[str, list[Node]] = {}    # Conv name -> the nodes it absorbs, last one last
    activation: dict[str, Activation] = {}     # Conv name -> its "activation" attribute
    for node in graph.nodes:
        conv = producer.get(node.inputs[0]) if node.inputs else None
        if conv is None or node.inputs[0] in outputs or "activation" in conv.attributes:
            continue
        readers = [c.name for c in consumers.get(node.inputs[0], [])]
        if readers == [node.name]:
            found = _lone_activation(node, graph)
            if found is not None:
                activation[conv.name], absorbed[conv.name] = found, [node]
        elif node.op_type == "Sigmoid" and len(readers) == 2 and node.outputs[0] not in outputs:
            mul = consumers.get(node.outputs[0], [])
            if len(mul) == 1 and mul[0].op_type == "Mul" and mul[0].name in readers and \
                    sorted(mul[0].inputs) == sorted([node.inputs[0], node.outputs[0]]):
                activation[conv.name], absorbed[conv.name] = SILU, [node, mul[0]]
    joined = {node.name for nodes in absorbed.values() for node in nodes}
    nodes, fused, marked = [], [], []
    for node in graph.nodes:
        if node.name in joined:
            continue
        if node.op_type != "Conv":
            nodes.append(node)
            continue
        attributes = dict(node.attributes)
        outs = node.outputs
        joins = absorbed.get(node.name)
        if joins is not None:
            attributes["activation"] = activation[node.name]
            outs = joins[-1].outputs
            fused.append(f"{' + '.join(j.name for j in joins)} into {node.name}")
        weight = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
        if threshold is not None and weight is not None and weight.size and \
                weight.dtype.kind == "f" and \
                1.0 - np.count_nonzero(weight) / weight.size >= threshold:
            attributes["skip_zeros"] = 1
            marked.append(node.name)
        if attributes == node.attributes:
            nodes.append(node)
            continue
        nodes.append(Node(node.name, node.op_type, node.inputs, outs, attributes, node.version,
                          with_own_attributes(node.impl)))
    graph.nodes = nodes
    graph.notes.append(f"conv+relu: {len(fused)} fused" +
                       (f" ({', '.join(fused)})" if fused else "") +
                       (f"; sparse conv weights: {', '.join(marked)}" if marked else ""))
    return graph


# Clip's bounds before opset 11, when absent: the float32 range, as onnxruntime's defaults.
_FLOAT_MAX = float(np.finfo(np.float32).max)


def _lone_activation(node: Node, graph: Graph) -> Activation | None:
    """The activation ``node`` is when it alone reads a Conv's output (None for other nodes,
    and for a Clip whose bounds are computed at run time)."""
    if node.op_type == "Relu":
        return RELU
    if node.op_type == "Clip":
        bounds = constant_clip_bounds(node, graph)
        return None if bounds is None else Activation.clip(*bounds)
    if node.op_type == "Sigmoid":
        return SIGMOID
    if node.op_type == "HardSwish":
        return HARD_SWISH
    if node.op_type == "HardSigmoid":
        return Activation.hard_sigmoid(node.attributes.get("alpha", 0.2),
                                       node.attributes.get("beta", 0.5))
    return None


def constant_clip_bounds(clip: Node, graph: Graph) -> tuple[float, float] | None:
    """``(low, high)`` of a float ``Clip`` whose bounds are attributes (before opset 11) or
    absent or one-value constants (opset 11 on); None when a bound is computed at run time."""
    if clip.version < 11:
        return (float(clip.attributes.get("min", -_FLOAT_MAX)),
                float(clip.attributes.get("max", _FLOAT_MAX)))
    bounds = [-np.inf, np.inf]
    for i, name in enumerate(clip.inputs[1:3]):
        if not name:
            continue
        value = graph.constants.get(name)
        if value is None or value.size != 1 or value.dtype.kind != "f":
            return None
        bounds[i] = float(value.reshape(-1)[0])
    return bounds[0], bounds[1]


def with_own_attributes(impl: OpImpl) -> OpImpl:
    """``impl`` accepting :data:`OWN_ATTRIBUTES` as well (``impl`` itself where it already
    does): it adds the residual (a fourth input) and then applies the activation after the
    convolution; ``skip_zeros`` and ``winograd_tile`` only matter to the compiled kernels of a
    static plan."""
    if getattr(impl.function, "own_attributes", False):
        return impl
    function = impl.function

    def conv(node: NodeContext, *args: np.ndarray, activation: Activation | None = None,
             skip_zeros: int = 0, residual: int = 0, winograd_tile: int = 0,
             **attributes: object) -> np.ndarray:
        if residual:
            result = function(node, *args[:3], **attributes)
            result = elementwise(node, "{0} + {1}", result, args[3], dtype=result.dtype)
        else:
            result = function(node, *args, **attributes)
        if activation is not None:
            result = elementwise(node, activation.text("{0}"), result, dtype=result.dtype)
        return result

    conv.own_attributes = True  # type: ignore[attr-defined]
    known = None if impl.attributes is None else impl.attributes | OWN_ATTRIBUTES
    return OpImpl(impl.name, impl.since, conv, impl.check, known)


__all__ = ["fold_conv_batchnorm", "fuse_conv_activations", "fuse_conv_residuals",
           "OWN_ATTRIBUTES", "with_own_attributes"]
