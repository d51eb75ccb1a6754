"""Graph passes by opt level, as one visible list per level (:func:`pipeline`).

Level 1: shape inference, constant folding (and shape inference again on the folded graph,
then folding again, where a Shape node is left: :func:`refold_shapes`), dead node removal. Level 2 adds Conv +
BatchNormalization folding, skip-connection Adds joined to the pointwise Conv before them and the other BatchNormalizations as a multiply-add
(:mod:`folding`), Attention nodes as their products and softmax (:mod:`attention`), 1-D and
3-D convolutions as 2-D ones (:mod:`conv_ranks`; then the Convs ahead of a normalization by
the data's statistics are kept on Winograd's smaller tile, :mod:`normalized_convs`), Einsums that are matrix products as MatMuls and a constant's products with
batches of columns as row products (:mod:`einsum_products`), Pow by 2 or 3 as multiplications (:mod:`small_powers`), ScatterNDs that assign a slice as strided
copies (:mod:`scatters`), MatMul
re-association (:mod:`fusion`), embedding
bags (:mod:`bags`), GELU written with Erf as one Gelu node (:mod:`gelu`), QuantizeLinear ->
DequantizeLinear pairs as one float node (:mod:`quantized`) and fusion of elementwise chains and contraction epilogues (:mod:`fusion`).
Level 3 adds sparse weights (:mod:`sparse_weights`), compiled into the fused statements. Each
pass is a function ``Graph -> Graph`` whose docstring states what it establishes;
:func:`describe` prints a graph after each pass (``print_ir("passes")``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx

from tensoralg.onnx.frontend.graph import Graph, Node
from tensoralg.onnx.ops.kernels import KernelSet, NodeContext
from tensoralg.onnx.ops.sampling import RANDOM_OPS
from tensoralg.onnx.passes.attention import attention_as_products
from tensoralg.onnx.passes.bags.recognise import recognise_bags
from tensoralg.onnx.passes.conv_ranks import (
    conv1d_as_conv2d,
    conv3d_as_conv2d,
    dead_taps_cut,
    dilated_as_phases,
    padded_regions_split,
)
from tensoralg.onnx.passes.conv_transposes import conv_transposes_as_phase_convs
from tensoralg.onnx.passes.einsum_products import (
    column_products_as_row_products,
    einsums_as_matmuls,
)
from tensoralg.onnx.passes.folding import (
    batchnorm_as_affine,
    fold_conv_batchnorm,
    fold_pads_into_convs,
    fuse_conv_activations,
    fuse_conv_residuals,
)
from tensoralg.onnx.passes.fusion import fuse, reassociate_matmuls
from tensoralg.onnx.passes.gelu import erf_gelus_as_gelu
from tensoralg.onnx.passes.int8_epilogues import int8_epilogues
from tensoralg.onnx.passes.normalized_convs import normalized_convs_keep_small_tiles
from tensoralg.onnx.passes.quantized import (
    dequantized_gathers,
    dynamic_quantized_products,
    quantize_dequantize_pairs,
    static_quantized_products,
)
from tensoralg.onnx.passes.scatters import box_scatters, row_scatters
from tensoralg.onnx.passes.small_powers import small_powers_as_products
from tensoralg.onnx.passes.sparse_weights import find_sparse_weights
from tensoralg.onnx.plan.executor import call_node

# Ops never evaluated at load time even with constant inputs: random draws differ per run.
NOT_FOLDED = frozenset({"Dropout"}) | RANDOM_OPS


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the shapes ONNX infers, propagating the values of shape computations
    (``data_prop``: a Reshape to ``Shape(y)`` gets ``y``'s shape; without it, each GroupNorm
    that PyTorch exports as Reshape -> InstanceNormalization -> Reshape(Shape) waited for one
    more round of folding, and MONAI's SegResNet's later 3-D Convs had no static shape), or
    without that propagation where it fails."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - the propagation is an extra; plain inference may hold
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)


def infer_static_shapes(graph: Graph, model: onnx.ModelProto) -> Graph:
    """Record every value whose shape onnx.shape_inference proves fully static."""
    try:
        inferred = _inferred(model)
    except Exception as err:  # noqa: BLE001 - inference is an optimisation, never fatal
        graph.notes.append(f"shape inference skipped: {type(err).__name__}")
        return graph
    graph.static_shapes, graph.ranks = _inferred_shapes(inferred)
    graph.types = {value.name: value.type.tensor_type.elem_type
                   for value in [*inferred.graph.value_info, *inferred.graph.input,
                                 *inferred.graph.output]
                   if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type}
    graph.notes.append(f"shape inference: {len(graph.static_shapes)} static shapes")
    return graph


def _inferred_shapes(inferred: onnx.ModelProto
                     ) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """The static shapes and the ranks an inferred model's values carry."""
    shapes, ranks = {}, {}
    values = list(inferred.graph.value_info) + list(inferred.graph.input) + \
        list(inferred.graph.output)
    for value in values:
        tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
        if tensor is None or not tensor.HasField("shape"):
            continue
        dims = tensor.shape.dim
        ranks[value.name] = len(dims)
        if all(d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value for d in dims)
    return shapes, ranks


# Folded constants up to this many elements go to the re-inferred model with their values (a
# Reshape's target, a TopK's k); larger ones (weights) go as typed inputs, shape and dtype only.
REFOLD_VALUE_ELEMENTS = 1 << 12
REFOLD_ROUNDS = 3


def _provable(graph: Graph) -> bool:
    """Whether inference on the folded graph may prove new shapes: a Shape (or Size) node is
    left, or a node whose output has no static shape reads only values that have one or are
    constants (a Pad whose pads were computed from shapes and folded: MONAI's BasicUNet pads
    each upsampled map so, and the 3-D Conv after the Concat waited for a static shape)."""
    known = graph.static_shapes
    for node in graph.nodes:
        if node.op_type in ("Shape", "Size"):
            return True
        if node.outputs and any(name and name not in known for name in node.outputs) and \
                all(not name or name in known or name in graph.constants
                    for name in node.inputs) and node.op_type not in ("If", "Loop", "Scan"):
            return True
    return False


def refold_shapes(graph: Graph, model: onnx.ModelProto, kernels: KernelSet) -> Graph:
    """Shape inference again on the folded graph, and folding again, while inference may
    prove new shapes (:func:`_provable`) and each round proves some (at most
    ``REFOLD_ROUNDS``).

    The first inference sees the model as exported: a value whose shape depends on another
    value (TopK by a ``k`` computed from a Shape, a Reshape to a computed target) has no
    static shape then, so a Shape of it stays a node, and so does all it computes (deepctr's
    CCPM pads a TopK's result by an amount computed so, which left a Pad with pads known only
    at run time). After folding, those values are constants, and inference sees through."""
    rounds = 0
    while rounds < REFOLD_ROUNDS and _provable(graph):
        shapes = _shapes_after_folding(graph, model)
        new = {name: shape for name, shape in shapes.items()
               if name not in graph.static_shapes}
        if not new:
            break
        rounds += 1
        graph.static_shapes.update(new)
        before = len(graph.nodes)
        graph = fold_constants(graph, kernels)
        if len(graph.nodes) == before:
            break
    if rounds:
        graph.notes.append(f"shape inference after folding: {rounds} round(s)")
    return graph


def _shapes_after_folding(graph: Graph, model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The static shapes ONNX infers for the model's nodes that ``graph`` still runs, with the
    constants it folded given as initializers (small) or typed inputs (large)."""
    produced = {name for node in graph.nodes for name in node.outputs}
    nodes = [n for n in model.graph.node if any(name in produced for name in n.output)]
    read = {name for n in nodes for name in n.input if name}
    small, typed = [], []
    for name in sorted(read & graph.constants.keys()):
        value = np.asarray(graph.constants[name])
        if value.size <= REFOLD_VALUE_ELEMENTS:
            small.append(onnx.numpy_helper.from_array(value, name))
        elif value.dtype != object:
            typed.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype), value.shape))
    inputs = [v for v in model.graph.input if v.name not in graph.constants] + typed
    folded = onnx.helper.make_model(
        onnx.helper.make_graph(nodes, model.graph.name or "folded", inputs,
                               list(model.graph.output), small),
        opset_imports=list(model.opset_import), ir_version=model.ir_version)
    folded.functions.extend(model.functions)
    try:
        inferred = _inferred(folded)
    except Exception:  # noqa: BLE001 - inference is an optimisation, never fatal
        return {}
    return _inferred_shapes(inferred)[0]


def fold_constants(graph: Graph, kernels: KernelSet) -> Graph:
    """Evaluate at load every node whose inputs are all constants, and every Shape of a value
    with a static shape; afterwards no remaining node has only constant inputs."""
    constants = dict(graph.constants)
    kept = []
    folded = 0
    for node in graph.nodes:
        static = graph.static_shapes.get(node.inputs[0]) if node.inputs else None
        if node.op_type == "Shape" and static is not None:
            start = node.attributes.get("start", 0)
            end = node.attributes.get("end")
            constants[node.outputs[0]] = np.array(static[start:end], dtype=np.int64)
            folded += 1
        elif node.op_type not in NOT_FOLDED and \
                all(not name or name in constants for name in node.inputs) and \
                _small_enough(node, constants):
            context = NodeContext(node.name, node.op_type, node.inputs, node.outputs,
                                  node.version, kernels)
            constants.update(call_node(node, context, constants))
            folded += 1
            _remember_dequantized(graph, node, constants)
        else:
            kept.append(node)
    graph.notes.append(f"constant folding: {folded} node(s) evaluated at load")
    graph.nodes = kept
    graph.constants = constants
    return graph


def _remember_dequantized(graph: Graph, node: Node, constants: dict[str, np.ndarray]) -> None:
    """Record in ``graph.dequantized`` where a folded DequantizeLinear of 8-bit integers came
    from (not blocked, no chosen output type)."""
    if node.op_type != "DequantizeLinear" or node.attributes.get("block_size", 0) or \
            node.attributes.get("output_dtype", 0):
        return
    x = constants[node.inputs[0]]
    if x.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)):
        return
    zero = constants[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    graph.dequantized[node.outputs[0]] = (x, constants[node.inputs[1]], zero,
                                          int(node.attributes.get("axis", 1)))


# Constants made at load are held for the model's lifetime: a node whose output would be larger
# (ConstantOfShape or Range of a huge size, Expand of a small constant) runs at every call
# instead, where the memory it takes is freed after the run.
MAX_FOLDED_ELEMENTS = 1 << 24


def _small_enough(node: Node, constants: dict[str, np.ndarray]) -> bool:
    """Whether folding ``node`` makes a constant of at most ``MAX_FOLDED_ELEMENTS``, judged
    before running it where its output size is its input's values."""
    values = [constants[name] for name in node.inputs if name]
    if node.op_type == "ConstantOfShape" and values:
        return int(np.prod(values[0], dtype=np.float64)) <= MAX_FOLDED_ELEMENTS
    if node.op_type == "Range" and len(values) == 3:
        start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in values)
        return delta != 0 and max(0.0, np.ceil((limit - start) / delta)) <= MAX_FOLDED_ELEMENTS
    if node.op_type == "Expand" and len(values) == 2:
        try:
            shape = np.broadcast_shapes(values[0].shape, tuple(int(d) for d in values[1]))
        except ValueError:
            return True         # folding raises the node's own error, at load
        return np.prod(shape, dtype=np.float64) <= MAX_FOLDED_ELEMENTS
    if node.op_type == "Tile" and len(values) == 2:
        return values[0].size * np.prod(values[1], dtype=np.float64) <= MAX_FOLDED_ELEMENTS
    return all(v.size <= MAX_FOLDED_ELEMENTS for v in values)


def remove_dead_nodes(graph: Graph) -> Graph:
    """Drop nodes and constants that no graph output depends on."""
    needed = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(name in needed for name in node.outputs):
            kept.append(node)
            needed.update(name for name in node.inputs if name)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    graph.constants = {k: v for k, v in graph.constants.items() if k in needed}
    graph.notes.append(f"dead node removal: {removed} node(s) removed")
    return graph


def pipeline(opt_level: int, model: onnx.ModelProto, kernels: KernelSet,
             sparse_threshold: float | None = None
             ) -> list[tuple[str, Callable[[Graph], Graph]]]:
    """The named passes of ``opt_level``, in order."""
    steps: list[tuple[str, Callable[[Graph], Graph]]] = []
    if opt_level >= 1:
        steps += [
            ("shape inference", lambda g: infer_static_shapes(g, model)),
            ("constant folding", lambda g: fold_constants(g, kernels)),
            ("shape inference after folding", lambda g: refold_shapes(g, model, kernels)),
            ("dead node removal", remove_dead_nodes),
        ]
    if opt_level >= 2:
        # Conv+BN folding first: it needs the constants level 1 computed, and must see the
        # original nodes, before any later pass replaces them.
        steps += [
            ("pad+conv folding", fold_pads_into_convs),
            ("conv+batchnorm folding", fold_conv_batchnorm),
            ("batchnorm as affine", batchnorm_as_affine),
            ("transposed convolutions as phase convolutions", conv_transposes_as_phase_convs),
            ("attention as products", attention_as_products),
            ("einsum products", einsums_as_matmuls),
            ("column products", column_products_as_row_products),
            ("small powers", small_powers_as_products),
            ("box scatters", box_scatters),
            ("row scatters", row_scatters),
            ("matmul re-association", reassociate_matmuls),
            ("quantized tables", dequantized_gathers),
            ("embedding bags", recognise_bags),
            ("erf gelu", erf_gelus_as_gelu),
            ("fake quantization", quantize_dequantize_pairs),
            ("static int8 products", static_quantized_products),
            ("dynamic quantization", dynamic_quantized_products),
            ("int8 epilogues", int8_epilogues),
        ]
    # The convolutions of other ranks are rewritten after the activations joined them: their
    # 2-D Convs carry the activation into the kernel, where a Squeeze or Transpose after the
    # Conv would have kept it apart.
    ranks = [("1-D convolutions as 2-D", conv1d_as_conv2d),
             ("3-D convolutions as 2-D", conv3d_as_conv2d),
             ("dead kernel taps", dead_taps_cut),
             ("padded borders as regions", padded_regions_split),
             ("dilated convolutions over phase images", dilated_as_phases),
             ("convolutions ahead of normalizations", normalized_convs_keep_small_tiles)]
    if opt_level == 2:
        steps += [("conv+residual", fuse_conv_residuals), ("conv+relu", fuse_conv_activations),
                  *ranks, ("fusion", fuse)]
    if opt_level >= 3:
        steps += [("conv+residual", lambda g: fuse_conv_residuals(g, sparse_threshold)),
                  ("conv+relu, sparse conv weights",
                   lambda g: fuse_conv_activations(g, sparse_threshold)),
                  *ranks,
                  ("sparse weights + fusion",
                   lambda g: fuse(g, find_sparse_weights(g, sparse_threshold)))]
    return steps


def describe(graph: Graph) -> str:
    """The graph as text: one line per node (a fused node names what it replaced)."""
    lines = [f"  input {v}" for v in graph.inputs]
    lines.append(f"  {len(graph.constants)} constant(s)")
    for node in graph.nodes:
        extra = node.attributes.get("program") or node.attributes.get("bag")
        lines.append(f"  {node}" + (f"   # {extra}" if extra is not None else ""))
    lines += [f"  output {v}" for v in graph.outputs]
    return "\n".join(lines)
