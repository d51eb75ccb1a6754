"""Opt level 2: quantized graphs as statements and kernels that give their results exactly.

Three patterns of onnxruntime's quantizer: QuantizeLinear -> DequantizeLinear pairs (static
quantization, the QDQ format; *fake quantization*, :func:`quantize_dequantize_pairs`),
DynamicQuantizeLinear -> MatMulInteger/ConvInteger -> Cast (dynamic quantization, on the int8
GEMM where the host has AVX-512 VNNI, else as exact float products:
:func:`dynamic_quantized_products`) and quantized embedding tables read by Gather ->
DequantizeLinear (:func:`dequantized_gathers`). The pairs first:

onnxruntime's ``quantize_static`` writes its models in the QDQ format: every activation that a
quantized Conv or MatMul reads passes through a QuantizeLinear and straight into a
DequantizeLinear with the same scale and zero point. Run as written, each pair makes an 8-bit
tensor only to turn it back into floats: two kernels, two casts and an integer array between
them, and the 8-bit value in the middle keeps the float chain around it from fusing. The pair
computes, in float32,

    y = (saturate(round(x / scale) + zero_point) - zero_point) * scale

exactly: the saturated value is an integer of at most 16 bits, which float32 holds, so ``y``
is the value DequantizeLinear gives, bit for bit. This pass replaces each such pair by one node
``QuantizeDequantize(x, scale, zero_point)`` computing that statement, the scale and zero
point float32 scalar constants (operands rather than literals, so that every layer's statement
is one kernel); it is an elementwise node the fusion pass joins to the contraction and
activations around it.

Only pairs it can prove equal are rewritten (``x`` of any float type is quantized in float32,
as QuantizeLinear here does): scale and zero point constants of one value each (per tensor),
float32 and 8- or 16-bit integer; every path from the quantized tensor ends, through movement
ops (``MOVES``) or, with a positive scale, ops that pick among values by order (``ORDER_PICKS``:
a QOperator model's 8-bit MaxPool), in a DequantizeLinear of the same zero point, and no value
on the way is a graph output. A DequantizeLinear with another scale ``d`` (a QOperator op
written as its definition dequantizes with 1, ``frontend/qoperator.py``) gives
``QuantizeDequantize(x, scale, zero_point, d)``: the same integers times ``d``. Per-channel and
blocked pairs (on weights, which constant folding has already turned into floats) are left as
they are.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tensoralg import program
from tensoralg.onnx.frontend.graph import (
    Graph,
    Node,
    consumers_of,
    drop_unread_constants,
    fresh_name,
    value_names,
)
from tensoralg.onnx.ops.int8 import (
    CONV_ATTRIBUTES,
    CONV_INT8_IMPL,
    CONV_INT8_OP,
    INT8_IMPL,
    INT8_OP,
)
from tensoralg.onnx.ops.kernels import NodeContext, elementwise
from tensoralg.onnx.ops.quantize import EXACT_FLOAT32, RANGES, dynamic_parameters, saturated
from tensoralg.onnx.ops.registry import OpImpl, lookup

OP_TYPE = "QuantizeDequantize"


def fake_quantized(x: str, scale: str, zero: str, low: int, high: int,
                   dequantize: str | None = None) -> str:
    """Statement text of a quantize-dequantize pair on ``x`` with the scale and zero point
    ``scale`` and ``zero`` (operands' texts: statements of every layer then share kernels),
    dequantized with the scale ``dequantize`` where it is another.

    >>> fake_quantized("A(i)", "B", "C", 0, 255)
    '(where(ge(round(A(i) / B) + C, 0), min(round(A(i) / B) + C, 255), 0) - C) * B'
    """
    return f"{shifted_text(x, scale, zero, low, high)} * {dequantize or scale}"


def quantize_dequantize(node: NodeContext, x: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                        dequantize: np.ndarray | None = None, *, low: int, high: int
                        ) -> np.ndarray:
    """The op function of a ``QuantizeDequantize`` node: one float32 statement."""
    operands = [x, scale, zero] + ([dequantize] if dequantize is not None else [])
    return elementwise(node, lambda a, s, z, d=None: fake_quantized(a, s, z, low, high, d),
                       *operands, dtype=np.dtype(np.float32), out_dtype=np.float32)


IMPL = OpImpl(OP_TYPE, 1, quantize_dequantize, None, frozenset({"low", "high"}))


def per_tensor_constant(graph: Graph, name: str | None) -> np.ndarray | None:
    """The constant ``name`` where it holds one value (a per-tensor scale or zero point),
    else None."""
    if not name:
        return None
    value = graph.constants.get(name)
    return value if value is not None and value.size == 1 else None


def _parameters(graph: Graph, node: Node) -> tuple[float, int, np.dtype | None] | None:
    """A Quantize/DequantizeLinear's constant per-tensor float32 scale, its zero point's value
    and type (0 and None without one), or None where they are anything else (blocked, per
    axis, fed at run time, a chosen ``output_dtype``)."""
    if node.attributes.get("block_size", 0) or node.attributes.get("output_dtype", 0):
        return None
    scale = per_tensor_constant(graph, node.inputs[1])
    zero_name = node.inputs[2] if len(node.inputs) > 2 else ""
    zero = per_tensor_constant(graph, zero_name)
    if scale is None or scale.dtype != np.float32 or (zero_name and zero is None):
        return None
    if zero is None:
        return float(scale.reshape(-1)[0]), 0, None
    return float(scale.reshape(-1)[0]), int(zero.reshape(-1)[0]), zero.dtype


def _quantizer(graph: Graph, node: Node) -> dict[str, Any] | None:
    """The scale, zero point, bounds and quantized type of a per-tensor float32
    QuantizeLinear whose parameters are constants, or None."""
    found = _parameters(graph, node) if node.op_type == "QuantizeLinear" else None
    if found is None:
        return None
    scale, zero, zero_type = found
    out_type = zero_type or np.dtype(np.uint8)
    # (any scale, infinite or 0 included: the statement divides and multiplies by it as the
    # two ops do; calibration over a -inf attention mask gives an infinite one)
    if out_type not in RANGES:
        return None
    low, high = RANGES[out_type]
    return {"scale": scale, "zero_point": zero, "low": low, "high": high, "type": out_type}


def _undoing_scale(graph: Graph, reader: Node, found: dict[str, Any]) -> float | None:
    """The scale with which DequantizeLinear ``reader`` dequantizes the integers of the
    quantizer ``found`` (the same zero point and type; the quantizer's own scale for a pair,
    or another, as a QOperator op written as its definition dequantizes with 1), or None."""
    undone = _parameters(graph, reader) if reader.op_type == "DequantizeLinear" else None
    if undone is None:
        return None
    scale, zero, zero_type = undone
    same = zero == found["zero_point"] and (zero_type is None or zero_type == found["type"])
    return scale if same else None


def _float_constant(graph: Graph, taken: set[str], name: str, value: float) -> str:
    """A new float32 scalar constant (a scale or zero point as a statement operand)."""
    key = fresh_name(name, taken)
    graph.constants[key] = np.array(value, np.float32)
    return key


# Ops that move values without looking at them: a quantized tensor may pass through them on
# its way to its DequantizeLinear (onnxruntime's quantizer leaves Reshape and Transpose in
# 8 bits between the two, as before an attention product), and they move floats alike.
MOVES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity",
                   "Slice", "Split", "Expand"})
# Ops that pick among their input's values by order: they commute with a quantization of
# positive scale (a nondecreasing map), so on the dequantized floats they give the dequantized
# result. The QOperator format (frontend/qoperator.py) runs MaxPool on 8-bit tensors.
ORDER_PICKS = frozenset({"MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin"})


def _dequantizers(graph: Graph, start: Node, found: dict[str, Any],
                  readers: dict[str, list[Node]], outputs: set[str]
                  ) -> tuple[list[tuple[Node, float]], list[Node]] | None:
    """The DequantizeLinears that undo QuantizeLinear ``start`` at the end of every path from
    it, each with the scale it dequantizes with, and the movement nodes on those paths; None
    where some path meets anything else, a value on the way is a graph output, or a
    DequantizeLinear has another zero point or type."""
    ends: list[tuple[Node, float]] = []
    moves: list[Node] = []
    frontier = [start.outputs[0]]
    while frontier:
        value = frontier.pop()
        uses = readers.get(value, [])
        if value in outputs or not uses:
            return None
        for use in uses:
            if use.inputs[0] != value:
                return None
            if use.op_type == "DequantizeLinear":
                scale = _undoing_scale(graph, use, found)
                if scale is None:
                    return None
                ends.append((use, scale))
            elif (len(use.outputs) == 1 or use.op_type == "Split") and (
                    use.op_type in MOVES or (use.op_type in ORDER_PICKS and found["scale"] > 0)):
                moves.append(use)
                frontier.extend(name for name in use.outputs if name)
            else:
                return None
    return ends, moves


def quantize_dequantize_pairs(graph: Graph) -> Graph:
    """Replace every provable QuantizeLinear -> DequantizeLinear pair (module docstring) by one
    ``QuantizeDequantize`` node: in place of each DequantizeLinear when it reads the
    QuantizeLinear itself (which then goes), or, when the quantized value first passes
    through movement ops (``MOVES``), in place of the QuantizeLinear, its output now float,
    and each DequantizeLinear an Identity."""
    readers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    identity, mul = lookup("Identity", graph.opset), lookup("Mul", 14)
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()               # the QuantizeLinears replaced
    for node in graph.nodes:
        found = _quantizer(graph, node)
        paths = _dequantizers(graph, node, found, readers, outputs) if found else None
        if paths is None:
            continue
        ends, moves = paths
        attributes = {"low": found["low"], "high": found["high"]}
        parameters = tuple(_float_constant(graph, taken, f"{node.name}/{what}", found[what])
                           for what in ("scale", "zero_point"))

        def undoing(scale: float) -> tuple[str, ...]:
            return () if scale == found["scale"] else \
                (_float_constant(graph, taken, f"{node.name}/dequantize scale", scale),)
        if not moves:
            for end, scale in ends:
                replaced[end.name] = Node(end.name, OP_TYPE,
                                          (node.inputs[0], *parameters, *undoing(scale)),
                                          end.outputs, attributes, 1, IMPL)
            dropped.add(node.name)
        else:
            # One node in place of the QuantizeLinear: where the ends dequantize with several
            # scales, it leaves ``q - z`` and each end multiplies by its scale (the same
            # float32 product DequantizeLinear computes).
            scales = {scale for _, scale in ends}
            shared = ends[0][1] if len(scales) == 1 else 1.0
            replaced[node.name] = Node(node.name, OP_TYPE,
                                       (node.inputs[0], *parameters, *undoing(shared)),
                                       node.outputs, attributes, 1, IMPL)
            for end, scale in ends:
                replaced[end.name] = Node(end.name, "Identity", end.inputs[:1], end.outputs,
                                          {}, identity.since, identity) if scale == shared \
                    else Node(end.name, "Mul", (end.inputs[0], _float_constant(
                        graph, taken, f"{end.name}/scale", scale)), end.outputs, {}, 14, mul)
    graph.nodes = [replaced.get(node.name, node) for node in graph.nodes
                   if node.name not in dropped]
    pairs = sum(1 for node in graph.nodes if node.op_type == OP_TYPE)
    graph.notes.append(f"fake quantization: {pairs} QuantizeLinear -> DequantizeLinear "
                       f"pair(s) as float statements")
    return graph


# --- dynamically quantized products ---------------------------------------------------------

PARAMETERS_OP, SHIFT_OP = "DynamicQuantizeParameters", "QuantizeShift"


def dynamic_quantize_parameters(node: NodeContext, x: np.ndarray
                                ) -> tuple[np.ndarray, np.ndarray]:
    """The op function of a ``DynamicQuantizeParameters`` node: DynamicQuantizeLinear's scale
    and zero point, both as float32 scalars (the zero point feeds float statements)."""
    scale, zero = dynamic_parameters(node, x)
    return np.asarray(scale, np.float32), np.asarray(zero, np.float32)


def shifted_text(x: str, scale: str, zero: str, low: int, high: int) -> str:
    """Statement text of ``saturate(round(x / scale) + zero) - zero``: a quantized value less
    its zero point, an integer in float.

    >>> shifted_text("A(i)", "B", "C", 0, 255)
    '(where(ge(round(A(i) / B) + C, 0), min(round(A(i) / B) + C, 255), 0) - C)'
    """
    return f"({saturated(f'round({x} / {scale}) + {zero}', low, high)} - {zero})"


def quantize_shift(node: NodeContext, x: np.ndarray, scale: np.ndarray, zero: np.ndarray, *,
                   low: int, high: int) -> np.ndarray:
    """The op function of a ``QuantizeShift`` node: one float32 statement."""
    return elementwise(node, lambda a, s, z: shifted_text(a, s, z, low, high), x, scale, zero,
                       dtype=np.dtype(np.float32), out_dtype=np.float32)


PARAMETERS_IMPL = OpImpl(PARAMETERS_OP, 1, dynamic_quantize_parameters, None, frozenset())
SHIFT_IMPL = OpImpl(SHIFT_OP, 1, quantize_shift, None, frozenset({"low", "high"}))
FLOAT32_TYPE = 1        # onnx.TensorProto.FLOAT, as Graph.types records element types
# The largest |quantized - zero point| of a uint8 DynamicQuantizeLinear: every partial sum of
# a product of K terms is at most K * UINT8_SPAN * max|B - b_zero_point|.
UINT8_SPAN = 255


def _integer_weight(graph: Graph, product: Node, axis: int) -> tuple[np.ndarray, int] | None:
    """``W - w_zero_point`` (int64) of a MatMulInteger or ConvInteger with a constant
    int8/uint8 weight and a constant zero point per tensor or per index of ``axis`` (a
    MatMulInteger's columns, a ConvInteger's output channels), and the number of terms each
    sum adds; None otherwise, or where an int32 sum with a uint8-quantized input could wrap."""
    weight = graph.constants.get(product.inputs[1])
    if weight is None or weight.dtype not in (np.int8, np.uint8) or weight.ndim < 2:
        return None
    zero_name = product.inputs[3] if len(product.inputs) > 3 else ""
    zero = graph.constants.get(zero_name) if zero_name else np.zeros((), weight.dtype)
    if zero is None or zero.dtype != weight.dtype or \
            not (zero.size == 1 or zero.shape == (weight.shape[axis],)):
        return None
    shape = [1] * weight.ndim
    shape[axis] = -1
    shifted = weight.astype(np.int64) - zero.astype(np.int64).reshape(shape)
    terms = weight.shape[0] if axis == 1 else math.prod(weight.shape[1:])
    if terms * UINT8_SPAN * int(np.max(np.abs(shifted), initial=0)) >= 2 ** 31:
        return None
    return shifted, terms


def _exact_float(shifted: np.ndarray, terms: int) -> np.ndarray:
    """``shifted`` in the float type in which sums of ``terms`` products with a
    uint8-quantized input are exact: float32 where no partial sum reaches 2^24, else
    float64."""
    bound = terms * UINT8_SPAN * int(np.max(np.abs(shifted), initial=0))
    return shifted.astype(np.float32 if bound < EXACT_FLOAT32 else np.float64)


def _as_int8(shifted: np.ndarray) -> np.ndarray | None:
    """``shifted`` as int8 where every value fits (a symmetric int8 weight, onnxruntime's
    default, always does), else None."""
    if shifted.size and (shifted.min() < -128 or shifted.max() > 127):
        return None
    return np.ascontiguousarray(shifted, np.int8)


def _shifted_weight(graph: Graph, product: Node) -> np.ndarray | None:
    """``B - b_zero_point`` of a MatMulInteger with a constant 2-D ``B`` in its exact float
    type (:func:`_exact_float`); None where there is none (:func:`_integer_weight`)."""
    found = _integer_weight(graph, product, 1)
    return None if found is None or found[0].ndim != 2 else _exact_float(*found)


def _int8_weight(graph: Graph, product: Node) -> np.ndarray | None:
    """``B - b_zero_point`` of a MatMulInteger with a constant 2-D ``B`` as int8, the int8
    GEMM's operand, where every value fits; None otherwise."""
    found = _integer_weight(graph, product, 1)
    return None if found is None or found[0].ndim != 2 else _as_int8(found[0])


def _conv_shifted(graph: Graph, product: Node) -> tuple[np.ndarray, int] | None:
    """``W - w_zero_point`` and the terms of a sum (:func:`_integer_weight`) of a
    ConvInteger whose ``kernel_shape``, if given, is its weight's."""
    weight = graph.constants.get(product.inputs[1])
    if weight is None or weight.ndim < 3 or \
            tuple(product.attributes.get("kernel_shape") or weight.shape[2:]) != \
            weight.shape[2:]:
        return None
    return _integer_weight(graph, product, 0)


def _int8_conv_weight(graph: Graph, product: Node) -> np.ndarray | None:
    """The shifted weight of a 2-D ConvInteger of group 1 as int8 (M, C, KH, KW), where
    every value fits; None otherwise."""
    found = _conv_shifted(graph, product)
    if found is None or found[0].ndim != 4 or product.attributes.get("group", 1) != 1:
        return None
    return _as_int8(found[0])


def _float_conv_weight(graph: Graph, product: Node) -> np.ndarray | None:
    """The shifted weight of a ConvInteger in its exact float type: a grouped or depthwise
    ConvInteger's weight for a float Conv; None where there is none."""
    found = _conv_shifted(graph, product)
    return None if found is None else _exact_float(*found)


def dynamic_quantized_products(graph: Graph) -> Graph:
    """onnxruntime's ``quantize_dynamic`` pattern as products that give its int32 sums
    exactly. Where a DynamicQuantizeLinear's quantized ``x`` and zero point are read only by
    MatMulIntegers (or, on the int8 GEMM, 2-D ConvIntegers of group 1) with a constant
    weight, each read only by a Cast to float::

        DynamicQuantizeLinear(x) -> q, s, z;  MatMulInteger(q, B, z, b_z) -> Cast(float) -> y

    becomes ``DynamicQuantizeParameters(x) -> s, z'`` (z' the zero point as a float) and,
    on a host with AVX-512 VNNI (``program.int8_gemm_supported``) and a weight whose shifted
    values fit int8 (``_int8_weight``), ``Int8MatMul(x, s, z', B - b_z) -> y``:
    the int8 GEMM, which quantizes ``x`` itself and gives the int32 sums as float32
    (``codegen/qgemm.py``). Elsewhere, ``QuantizeShift(x, s, z') -> a`` (``q - z`` as
    exact float integers) and a float ``MatMul(a, B - b_z) -> y``, the shifted weight a
    constant made here in the float type whose sums are exact (``_shifted_weight``), which
    takes MatMul's routes (the generated GEMM with its weight packed at load, BLAS). Fusion
    joins the rescaling after either; the 8-bit tensor and the int32 one are never made.
    A ConvInteger becomes ``Int8Conv(x, s, z', W')`` (``ops/int8.int8_conv``:
    ``x`` quantized into a zero-point-bordered uint8 channels-last image whose kernel rows the
    int8 GEMM reads in place, writing NCHW planes); where the int8 GEMM cannot take it (a grouped or
    depthwise convolution, a weight past int8, a host without VNNI), a float ``Conv`` of the
    shifted values by the shifted weight, exact as the MatMul above, which takes Conv's own
    routes (a depthwise convolution's window kernel); its padding, 0.0 in the shifted values,
    is the zero point ConvInteger pads with."""
    readers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    matmul, conv = lookup("MatMul", 13), lookup("Conv", 11)
    int8 = any(node.op_type == "DynamicQuantizeLinear" for node in graph.nodes) and \
        program.int8_gemm_supported()
    replaced: dict[str, list[Node]] = {}     # node name -> the nodes in its place
    dropped: set[str] = set()
    rewritten, on_int8 = 0, 0
    for node in graph.nodes:
        if node.op_type != "DynamicQuantizeLinear":
            continue
        quantized, scale, zero = node.outputs
        if quantized in outputs or zero in outputs or not quantized:
            continue
        products = readers.get(quantized, [])
        plans = []
        for product in products:
            # A MatMulInteger has the exact float route where the int8 GEMM cannot take it; a
            # ConvInteger is rewritten only onto the int8 GEMM.
            weight = narrow = None
            if product.op_type == "MatMulInteger":
                weight = _shifted_weight(graph, product)
                narrow = _int8_weight(graph, product) if int8 else None
            elif product.op_type == "ConvInteger":
                narrow = _int8_conv_weight(graph, product) if int8 else None
                weight = _float_conv_weight(graph, product) if narrow is None else None
            casts = readers.get(product.outputs[0], [])
            if (weight is None and narrow is None) or product.inputs[0] != quantized or \
                    (product.inputs[2] if len(product.inputs) > 2 else "") != zero or \
                    product.outputs[0] in outputs or len(casts) != 1 or \
                    casts[0].op_type != "Cast" or casts[0].attributes.get("to") != 1:
                break
            plans.append((product, casts[0], weight, narrow))
        if len(plans) != len(products) or not plans or \
                any(reader not in products for reader in readers.get(zero, [])):
            continue
        zero_float = fresh_name(f"{zero}/float", taken) if zero else fresh_name(
            f"{node.name}/zero", taken)
        shifted = fresh_name(f"{quantized}/shifted", taken)
        replaced[node.name] = [
            Node(node.name, PARAMETERS_OP, node.inputs[:1], (scale, zero_float), {}, 1,
                 PARAMETERS_IMPL)]
        shift_needed = False
        for product, cast, weight, narrow in plans:
            if narrow is not None:
                name = fresh_name(f"{product.inputs[1]}/int8", taken)
                graph.constants[name] = narrow
                inputs = (node.inputs[0], scale, zero_float, name)
                if product.op_type == "ConvInteger":
                    attributes = {key: value for key, value in product.attributes.items()
                                  if key in CONV_ATTRIBUTES}
                    new = Node(product.name, CONV_INT8_OP, inputs, cast.outputs, attributes,
                               1, CONV_INT8_IMPL)
                else:
                    new = Node(product.name, INT8_OP, inputs, cast.outputs, {}, 1, INT8_IMPL)
                replaced[product.name] = [new]
                on_int8 += 1
            else:
                name = fresh_name(f"{product.inputs[1]}/shifted", taken)
                graph.constants[name] = weight
                replaced[product.name] = [
                    Node(product.name, "Conv", (shifted, name), cast.outputs,
                         dict(product.attributes), 11, conv) if product.op_type == "ConvInteger"
                    else Node(product.name, "MatMul", (shifted, name), cast.outputs, {}, 13,
                              matmul)]
                shift_needed = True
            dropped.add(cast.name)
            rewritten += 1
        if shift_needed:
            replaced[node.name].append(
                Node(f"{node.name}/shift", SHIFT_OP, (node.inputs[0], scale, zero_float),
                     (shifted,), {"low": 0, "high": 255}, 1, SHIFT_IMPL))
    graph.nodes = [new for node in graph.nodes if node.name not in dropped
                   for new in replaced.get(node.name, [node])]
    graph.notes.append(f"dynamic quantization: {rewritten} integer product(s), {on_int8} on "
                       f"the int8 GEMM, {rewritten - on_int8} as exact float products")
    return graph


# --- statically quantized products (QDQ) -----------------------------------------------------

def _per_output(dequantized: dict[str, Any], weight_name: str, out_axis: int
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """The shifted integers (``q - zero``, int8) and the float32 scales (one per output
    channel, along ``out_axis`` of the weight) of a weight constant folded from a
    DequantizeLinear of 8-bit integers (``graph.dequantized``) whose scale is per tensor or
    per output channel; None otherwise, or where the shifted values do not fit int8."""
    found = dequantized.get(weight_name)
    if found is None:
        return None
    q, scale, zero, axis = found
    outputs = q.shape[out_axis]
    per_axis = scale.size > 1
    if scale.dtype != np.float32 or (per_axis and (scale.shape != (outputs,) or
                                                   axis % q.ndim != out_axis % q.ndim)) or \
            (zero is not None and zero.size != scale.size):
        return None
    shape = [1] * q.ndim
    shape[out_axis] = -1
    shifted = q.astype(np.int64) - (0 if zero is None else
                                    zero.astype(np.int64).reshape(shape if per_axis else ()))
    if shifted.size and (shifted.min() < -128 or shifted.max() > 127):
        return None
    return shifted.astype(np.int8), np.broadcast_to(scale.reshape(-1), (outputs,))


def _grid_source(producers: dict[str, Node], value: str) -> Node | None:
    """The ``QuantizeDequantize`` whose grid ``value`` is on: its output itself, or reached
    back through ops that only move or pick its values (``MOVES``, ``ORDER_PICKS``: a
    QOperator model's MaxPool between two layers); None otherwise."""
    node = producers.get(value)
    while node is not None and (node.op_type in MOVES or node.op_type in ORDER_PICKS) and \
            node.inputs and (len(node.outputs) == 1 or node.op_type == "Split"):
        node = producers.get(node.inputs[0])
    return node if node is not None and node.op_type == OP_TYPE else None


def _pointwise(node: Node, weight: np.ndarray) -> bool:
    """Whether a Conv is 1x1, of unit strides and no padding: the int8 kernel over NCHW
    positions (``program.quantized_conv``) takes it."""
    attributes = node.attributes
    return weight.shape[2:] == (1, 1) and all(v == 1 for v in attributes.get("strides") or
                                              (1, 1)) and \
        not any(attributes.get("pads") or ()) and \
        attributes.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")


# The fewest input channels a pointwise convolution needs for the int8 kernel over
# positions, which writes its NCHW planes directly: MobileNetV2 in QDQ with uint8
# activations, ... (set below from the measurements).
INT8_POINTWISE_MIN_TERMS = 8
# The fewest terms (C * KH * KW) a statically quantized convolution's sums have for it to
# take the int8 GEMM. Its product is written channels-last and transposed into NCHW, then
# rescaled: more traffic per output than the float route, which writes NCHW planes with the
# bias in registers, paid for only where each output sums enough terms. MobileNetV2 in QDQ
# at batch 1, one thread, onnxruntime's time over ours (``benchmarks/onnx_real.py --models
# mobilenet_v2 --exporters ts-qdq --batches 1``, 2026-12-07, one run each): 16 terms 0.84,
# 32 0.95, 64 0.97.
INT8_CONV_MIN_TERMS = 64


def static_quantized_products(graph: Graph) -> Graph:
    """Conv and MatMul nodes of a QDQ model on the int8 GEMM, where the host has AVX-512 VNNI.

    After :func:`quantize_dequantize_pairs`, such a model's layer reads
    ``QuantizeDequantize(x, s, z)`` (the fake-quantized activation) and a weight that constant
    folding made from ``DequantizeLinear(q_w, s_w, z_w)``: ``Conv(QDQ(x), W, B)``. That
    product is ``s * s_w * sum((q - z) * (q_w - z_w)) + B``, which this pass computes as
    onnxruntime does for such a model, in integers::

        Int8Conv(x, s, z', q_w - z_w) -> Mul(float32(s * s_w)) -> Add(B)

    (``z'`` the zero point on the uint8 grid: ``z + 128`` for int8 activations, whose grid
    the kernel shifts by 128, which changes no difference ``q - z``); MatMul likewise with
    ``Int8MatMul``. The float graph rounds every product of dequantized values, the integer
    sum rounds once, so results differ from the float route by float32 rounding, as
    onnxruntime's own int8 kernels do. The Mul, Add and whatever activation and fake
    quantization follow fuse into one statement. Only 2-D Convs of group 1 (whose sums have
    at least ``INT8_CONV_MIN_TERMS`` terms), and MatMuls and
    Gemms (no transA, alpha = beta = 1) by a 2-D weight, with weights quantized per tensor or
    per output channel to values that fit int8 once shifted, are rewritten; every other
    layer keeps its float route."""
    # The integers constant folding remembered serve this pass only.
    dequantized, graph.dequantized = graph.dequantized, {}
    if not any(node.op_type == OP_TYPE for node in graph.nodes):
        graph.notes.append("static int8 products: none (no fake-quantized activations)")
        return graph
    if not program.int8_gemm_supported():
        graph.notes.append("static int8 products: none (no AVX-512 VNNI on this host)")
        return graph
    readers = consumers_of(graph)
    producers = {name: node for node in graph.nodes for name in node.outputs}
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    mul, add = lookup("Mul", 14), lookup("Add", 14)
    replaced: dict[str, list[Node]] = {}
    used: dict[str, int] = {}          # QuantizeDequantize node -> its readers rewritten
    for node in graph.nodes:
        conv = node.op_type == "Conv"
        attributes = node.attributes
        if node.op_type not in ("Conv", "MatMul", "Gemm") or len(node.inputs) < 2 or \
                (node.op_type == "Gemm" and (attributes.get("transA", 0) or
                                              attributes.get("alpha", 1.0) != 1.0 or
                                              attributes.get("beta", 1.0) != 1.0)):
            continue
        trans_b = node.op_type == "Gemm" and attributes.get("transB", 0)
        source = _grid_source(producers, node.inputs[0])
        if source is None or \
                (source.attributes["low"], source.attributes["high"]) not in ((0, 255),
                                                                           (-128, 127)):
            continue
        if conv and (node.attributes.get("group", 1) != 1 or
                     graph.constants.get(node.inputs[1], np.empty(0)).ndim != 4):
            continue
        if not conv and graph.constants.get(node.inputs[1], np.empty(0)).ndim != 2:
            continue
        found = _per_output(dequantized, node.inputs[1], 0 if conv or trans_b else 1)
        bias = node.inputs[2] if node.op_type != "MatMul" and len(node.inputs) > 2 else ""
        if found is None or (bias and bias not in graph.constants):
            continue
        weight, weight_scale = found
        weight = weight.T if trans_b else weight         # a product's is K x N
        terms = math.prod(weight.shape[1:]) if conv else weight.shape[0]
        if conv and terms < (INT8_POINTWISE_MIN_TERMS if _pointwise(node, weight)
                             else INT8_CONV_MIN_TERMS):
            continue
        if terms * UINT8_SPAN * int(np.max(np.abs(weight.astype(np.int32)), initial=0)) >= \
                2 ** 31:
            continue
        x, scale_name, zero_name = source.inputs[:3]
        # The integers' value is their scale of dequantization (another than the one they
        # were quantized with where a QOperator op's definition quantizes with 1).
        undo_name = source.inputs[3] if len(source.inputs) > 3 else scale_name
        if graph.types.get(x) != FLOAT32_TYPE:
            continue            # the int8 kernels quantize float32 (a float64 x is not known)
        if source.outputs[0] != node.inputs[0]:
            # on the grid already: quantizing it again with the scale it was dequantized with
            # gives its integers
            x, scale_name = node.inputs[0], undo_name
        scale = float(graph.constants[undo_name])
        shift = 128 if source.attributes["low"] < 0 else 0
        grid_zero = _float_constant(graph, taken, f"{node.name}/uint8 zero",
                                    float(graph.constants[zero_name]) + shift)
        weight_name = fresh_name(f"{node.inputs[1]}/int8", taken)
        graph.constants[weight_name] = np.ascontiguousarray(weight)
        multiplier = fresh_name(f"{node.name}/multiplier", taken)
        graph.constants[multiplier] = (np.float32(scale) * weight_scale.astype(np.float32)
                                       ).reshape((-1, 1, 1) if conv else (-1,))
        acc, scaled = (fresh_name(f"{node.name}/{what}", taken) for what in ("int32", "scaled"))
        inputs = (x, scale_name, grid_zero, weight_name)
        product = Node(node.name, CONV_INT8_OP, inputs, (acc,), {
            key: value for key, value in node.attributes.items() if key in CONV_ATTRIBUTES},
            1, CONV_INT8_IMPL) if conv else Node(node.name, INT8_OP, inputs, (acc,), {}, 1,
                                                 INT8_IMPL)
        nodes = [product, Node(f"{node.name}/rescale", "Mul", (acc, multiplier),
                               (scaled,) if bias else node.outputs, {}, 14, mul)]
        if bias:
            bias_name = fresh_name(f"{bias}/per channel", taken)
            graph.constants[bias_name] = graph.constants[bias].reshape(-1, 1, 1) if conv \
                else graph.constants[bias]
            nodes.append(Node(f"{node.name}/bias", "Add", (scaled, bias_name), node.outputs,
                              {}, 14, add))
        replaced[node.name] = nodes
        if x == source.inputs[0]:
            used[source.name] = used.get(source.name, 0) + 1
    # A fake quantization that only rewritten layers read is no longer needed.
    by_name = {node.name: node for node in graph.nodes}
    dropped = {name for name, count in used.items()
               if count == len(readers.get(by_name[name].outputs[0], [])) and
               by_name[name].outputs[0] not in outputs}
    graph.nodes = [new for node in graph.nodes if node.name not in dropped
                   for new in replaced.get(node.name, [node])]
    drop_unread_constants(graph)       # the float weights the int8 copies replaced
    graph.notes.append(f"static int8 products: {len(replaced)} Conv/MatMul/Gemm(s) of "
                       f"fake-quantized inputs on the int8 GEMM")
    return graph


# --- quantized embedding tables --------------------------------------------------------------

def dequantized_gathers(graph: Graph) -> Graph:
    """``DequantizeLinear(Gather(table, ids))`` of a constant quantized table, as
    ``Gather(table', ids)`` of the table dequantized once here (``quantize_dynamic`` quantizes
    embedding tables so: a deepctr model's 52 lookups each ran a DequantizeLinear step, 3 ms of
    its 3.3 at batch 256, 2026-12-07). Dequantizing commutes with gathering rows, and the
    table is dequantized by the same arithmetic (``float32(q - z) * s``, one rounding), so the
    values are the same; the float table then takes the embedding paths (bags, column
    gathers). Where several DequantizeLinears of one scale and zero point read the Gather (a
    QOperator model's linear and FM parts both read each lookup), the float Gather takes the
    first one's place and the others copy it (Identity). Per-tensor scales and zero points
    only; the table grows to float32."""
    readers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    taken = value_names(graph)
    tables: dict[tuple[str, str, str], str] = {}
    replaced: dict[str, Node] = {}
    dropped: set[str] = set()
    identity = lookup("Identity", graph.opset)
    for gather in graph.nodes:
        uses = readers.get(gather.outputs[0], []) if gather.op_type == "Gather" else []
        table = graph.constants.get(gather.inputs[0]) if uses else None
        if table is None or table.dtype not in RANGES or gather.outputs[0] in outputs or \
                any(use.op_type != "DequantizeLinear" or use.inputs[0] != gather.outputs[0]
                    for use in uses):
            continue
        found = [_parameters(graph, use) for use in uses]
        if found[0] is None or any(other != found[0] for other in found):
            continue
        scale, zero, zero_type = found[0]
        if zero_type is not None and zero_type != table.dtype:
            continue
        first = uses[0]
        key = (gather.inputs[0], str(scale), str(zero))
        if key not in tables:
            values = (table.astype(np.int32) - np.int32(zero)).astype(np.float32) * \
                np.float32(scale)
            tables[key] = fresh_name(f"{gather.inputs[0]}/dequantized", taken)
            graph.constants[tables[key]] = values
        replaced[gather.name] = Node(gather.name, "Gather", (tables[key], gather.inputs[1]),
                                     first.outputs, gather.attributes, gather.version,
                                     gather.impl)
        dropped.add(first.name)
        for use in uses[1:]:
            replaced[use.name] = Node(use.name, "Identity", first.outputs[:1], use.outputs, {},
                                      identity.since, identity)
    graph.nodes = [replaced.get(node.name, node) for node in graph.nodes
                   if node.name not in dropped]
    lookups = sum(1 for node in replaced.values() if node.op_type == "Gather")
    graph.notes.append(f"quantized tables: {lookups} Gather -> DequantizeLinear lookup(s) "
                       f"over {len(tables)} table(s) dequantized at load")
    return graph
