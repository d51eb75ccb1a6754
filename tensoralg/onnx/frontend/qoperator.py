"""onnxruntime's QOperator format read as the QDQ format: quantized ops as DequantizeLinear ->
float op -> QuantizeLinear.

``quantize_static(..., quant_format=QuantFormat.QOperator)`` (and the int8 models of the ONNX
model zoo) write each quantized layer as one op on 8-bit tensors: the standard ``QLinearConv``
and ``QLinearMatMul`` and onnxruntime's contrib ops in the ``com.microsoft`` domain
(``QLinearAdd``, ``QLinearMul``, ``QLinearGlobalAveragePool``, ``QLinearAveragePool``,
``QLinearConcat``, ``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearSoftmax``,
``QLinearWhere``, ``QLinearReduceMean``, ``QGemm``, and the domain's own ``QuantizeLinear`` and
``DequantizeLinear``). Each such op is defined as dequantizing its inputs, computing the float
op and quantizing the result (``C = saturate(round(f(dequantized inputs) / C_scale) +
C_zero_point)``); :func:`qoperator_as_qdq` writes it so, at load, before anything else sees the
model. The model is then in the QDQ format, which every opt level runs and whose layers level 2
takes onto the int8 kernels (``passes/quantized.py``) on hosts with AVX-512 VNNI.

``QLinearConv`` and ``QLinearMatMul`` are rewritten where they are a quantized model's layer:
a constant weight, or (QLinearMatMul) two operands the graph computes, as attention's products
in a QOperator transformer; a product of the graph's own inputs stays the integer-exact op of
``ops/quantize.py``. The rewritten layer sums the dequantized values in float32 where the op
sums integers and rescales once, so a result that lands within a float rounding of a midpoint
between two steps of the output grid may round the other way: results then differ from
onnxruntime's by one quantization step in some values, as onnxruntime's own QDQ and QOperator
forms of one model do. onnxruntime's ``QLinearAdd`` itself computes with fixed-point
multipliers on AVX2 hosts, not the op's float definition.

Refused (UnsupportedError naming the node): other ``com.microsoft`` ops (``QAttention``,
``DynamicQuantizeMatMul``, ...), ``channels_last`` pooling, and QOperator nodes inside control
flow subgraphs.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

import tensoralg as ta
from tensoralg.onnx.frontend.errors import ModelError

MICROSOFT = "com.microsoft"


class _Writer:
    """Fresh names and the nodes and initializers a rewrite adds."""

    def __init__(self, graph: onnx.GraphProto, opset: int) -> None:
        self.graph = graph
        self.opset = opset
        self.taken = {init.name for init in graph.initializer} | \
            {v.name for v in graph.input} | {n.name for n in graph.node} | \
            {name for n in graph.node for name in (*n.input, *n.output)}
        self.constants = {init.name: init for init in graph.initializer}
        self.arrays: dict[str, np.ndarray] = {}       # the constants read so far
        self.produced = {name for n in graph.node for name in n.output}
        self.initializers: list[onnx.TensorProto] = []
        self.nodes: list[onnx.NodeProto] = []

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def constant(self, name: str) -> np.ndarray | None:
        init = self.constants.get(name) if name else None
        if init is not None and name not in self.arrays:
            self.arrays[name] = numpy_helper.to_array(init)
        return None if init is None else self.arrays[name]

    def initializer(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: list[str], name: str,
             **attributes: Any) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.fresh(name),
                                           **attributes))

    def dequantize(self, where: str, x: str, scale: str, zero: str, axis: int | None = None
                   ) -> str:
        """``DequantizeLinear(x, scale, zero)`` (``axis`` for a per-channel scale)."""
        out = self.fresh(f"{x}/dequantized")
        inputs = [x, scale] + ([zero] if zero else [])
        extra = {"axis": axis} if axis is not None and self._per_axis(scale) else {}
        self.node("DequantizeLinear", inputs, [out], f"{where}/dequantize", **extra)
        return out

    def quantize(self, where: str, y: str, scale: str, zero: str, output: str,
                 dtype: np.dtype) -> None:
        """``output = QuantizeLinear(y, scale, zero)``, into ``dtype`` where no zero point
        names it."""
        if not zero:
            zero = self.initializer(f"{output}/zero_point", np.zeros((), dtype))
        self.node("QuantizeLinear", [y, scale, zero], [output], f"{where}/quantize")

    def _per_axis(self, scale: str) -> bool:
        value = self.constant(scale)
        return value is None or value.size > 1

    def product(self, where: str, a: str, b: str) -> str:
        """``a * b`` of two float32 scales: a constant where both are, else a Mul node."""
        left, right = self.constant(a), self.constant(b)
        if left is not None and right is not None:
            return self.initializer(f"{where}/bias_scale",
                                    (left.astype(np.float32) * right.astype(np.float32)))
        out = self.fresh(f"{where}/bias_scale")
        self.node("Mul", [a, b], [out], f"{where}/bias_scale")
        return out

    def zero_type(self, node: onnx.NodeProto, positions: tuple[int, ...]) -> np.dtype:
        """The 8-bit type of a node's quantized tensors, read from its constant zero points
        (uint8 where none is a constant, QuantizeLinear's default)."""
        for position in positions:
            value = self.constant(node.input[position]) if position < len(node.input) else None
            if value is not None:
                return value.dtype
        return np.dtype(np.uint8)


def _input(node: onnx.NodeProto, position: int) -> str:
    return node.input[position] if position < len(node.input) else ""


def _attributes(node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}


def _refuse_channels_last(node: onnx.NodeProto, where: str) -> None:
    if _attributes(node).get("channels_last", 0):
        raise ta.UnsupportedError(f"node {where} ({node.op_type}): channels_last=1 is not "
                                  f"supported (NCHW only)")


def _unary(op_type: str, **fixed: Any) -> Callable[[_Writer, onnx.NodeProto, str], None]:
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point -> Y: a float op between the two."""
    def rewrite(w: _Writer, node: onnx.NodeProto, where: str) -> None:
        _refuse_channels_last(node, where)
        x = w.dequantize(where, node.input[0], node.input[1], _input(node, 2))
        y = w.fresh(f"{node.output[0]}/float")
        attributes = {**fixed, **_attributes(node, ("channels_last",))}
        w.node(op_type, [x], [y], f"{where}/{op_type}", **attributes)
        w.quantize(where, y, node.input[3], _input(node, 4), node.output[0],
                   w.zero_type(node, (4, 2)))
    return rewrite


def _binary(op_type: str) -> Callable[[_Writer, onnx.NodeProto, str], None]:
    """A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point -> C: ``C =
    quantize(dequantize(A) op dequantize(B))`` (QLinearAdd's definition, and onnxruntime's
    arithmetic wherever it does not take its fixed-point kernel)."""
    def rewrite(w: _Writer, node: onnx.NodeProto, where: str) -> None:
        a = w.dequantize(where, node.input[0], node.input[1], _input(node, 2))
        b = w.dequantize(where, node.input[3], node.input[4], _input(node, 5))
        y = w.fresh(f"{node.output[0]}/float")
        w.node(op_type, [a, b], [y], f"{where}/{op_type}")
        w.quantize(where, y, node.input[6], _input(node, 7), node.output[0],
                   w.zero_type(node, (7, 2, 5)))
    return rewrite


def _qlinear_mul(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """QLinearMul as onnxruntime computes it: the product of the shifted integers (exact in
    float32) times ``A_scale * B_scale / C_scale``, rounded; stated as DequantizeLinears of
    scale 1, two Muls and a QuantizeLinear of scale 1. (Dequantizing both operands first
    rounds three times and moved 0.2% of the values by one step.)"""
    one = w.initializer(f"{where}/one", np.array(1.0, np.float32))
    a = w.dequantize(where, node.input[0], one, _input(node, 2))
    b = w.dequantize(where, node.input[3], one, _input(node, 5))
    scales = [w.constant(node.input[k]) for k in (1, 4, 6)]
    if all(scale is not None for scale in scales):
        sa, sb, sc = (scale.astype(np.float32) for scale in scales)
        multiplier = w.initializer(f"{where}/multiplier", np.asarray(sa * sb / sc, np.float32))
    else:
        product, multiplier = w.fresh(f"{where}/scales"), w.fresh(f"{where}/multiplier")
        w.node("Mul", [node.input[1], node.input[4]], [product], f"{where}/scales")
        w.node("Div", [product, node.input[6]], [multiplier], f"{where}/multiplier")
    product, y = w.fresh(f"{node.output[0]}/integers"), w.fresh(f"{node.output[0]}/float")
    w.node("Mul", [a, b], [product], f"{where}/Mul")
    w.node("Mul", [product, multiplier], [y], f"{where}/rescale")
    w.quantize(where, y, one, _input(node, 7), node.output[0], w.zero_type(node, (7, 2, 5)))


def _average_pool(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """QLinearAveragePool as onnxruntime computes it: the average of the dequantized values
    quantized as ``saturate(round(y / Y_scale + Y_zero_point))`` (the zero point added
    before rounding, which breaks ties otherwise than QuantizeLinear): stated as Div and Add,
    then a QuantizeLinear of scale 1 and zero point 0."""
    _refuse_channels_last(node, where)
    x = w.dequantize(where, node.input[0], node.input[1], _input(node, 2))
    average, scaled, shifted = (w.fresh(f"{node.output[0]}/{what}")
                                for what in ("float", "scaled", "shifted"))
    w.node("AveragePool", [x], [average], f"{where}/AveragePool",
           **_attributes(node, ("channels_last",)))
    w.node("Div", [average, node.input[3]], [scaled], f"{where}/scale")
    dtype = w.zero_type(node, (4, 2))
    inputs = [scaled]
    if _input(node, 4):
        zero = w.fresh(f"{where}/zero_point")
        w.node("Cast", [node.input[4]], [zero], f"{where}/zero_point", to=onnx.TensorProto.FLOAT)
        w.node("Add", [scaled, zero], [shifted], f"{where}/shift")
        inputs = [shifted]
    one = w.initializer(f"{where}/one", np.array(1.0, np.float32))
    w.quantize(where, inputs[0], one, "", node.output[0], dtype)


def _concat(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input -> Y."""
    parts = [w.dequantize(where, node.input[k], node.input[k + 1], _input(node, k + 2))
             for k in range(2, len(node.input), 3)]
    y = w.fresh(f"{node.output[0]}/float")
    w.node("Concat", parts, [y], f"{where}/Concat", **_attributes(node))
    w.quantize(where, y, node.input[0], node.input[1], node.output[0],
               w.zero_type(node, (1, 4)))


def _softmax(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """Softmax with the semantics of the opset its ``opset`` attribute names: before 13, the
    input is flattened into 2-D at ``axis`` and each row normalised."""
    attributes = _attributes(node)
    axis, semantics = attributes.get("axis", -1), attributes.get("opset", w.opset)
    x = w.dequantize(where, node.input[0], node.input[1], _input(node, 2))
    y = w.fresh(f"{node.output[0]}/float")
    if semantics >= 13:
        w.node("Softmax", [x], [y], f"{where}/Softmax", axis=axis)
    else:
        flat, rows, shape = (w.fresh(f"{node.output[0]}/{what}")
                             for what in ("flat", "rows", "shape"))
        w.node("Flatten", [x], [flat], f"{where}/Flatten", axis=axis)
        w.node("Softmax", [flat], [rows], f"{where}/Softmax", axis=-1)
        w.node("Shape", [x], [shape], f"{where}/Shape")
        w.node("Reshape", [rows, shape], [y], f"{where}/Reshape")
    w.quantize(where, y, node.input[3], _input(node, 4), node.output[0],
               w.zero_type(node, (4, 2)))


def _where(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """condition, X, X_scale, X_zero_point, Y, Y_scale, Y_zero_point, Z_scale, Z_zero_point."""
    x = w.dequantize(where, node.input[1], node.input[2], _input(node, 3))
    y = w.dequantize(where, node.input[4], node.input[5], _input(node, 6))
    z = w.fresh(f"{node.output[0]}/float")
    w.node("Where", [node.input[0], x, y], [z], f"{where}/Where")
    w.quantize(where, z, node.input[7], _input(node, 8), node.output[0],
               w.zero_type(node, (8, 3, 6)))


def _reduce_mean(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """data, data_scale, data_zero_point, reduced_scale, reduced_zero_point; ``axes`` and
    ``keepdims`` attributes (an input from opset 18 on)."""
    attributes = _attributes(node)
    x = w.dequantize(where, node.input[0], node.input[1], _input(node, 2))
    y = w.fresh(f"{node.output[0]}/float")
    keep = attributes.get("keepdims", 1)
    axes = attributes.get("axes")
    if w.opset >= 18:
        inputs = [x] + ([w.initializer(f"{where}/axes", np.asarray(axes, np.int64))]
                        if axes is not None else [])
        w.node("ReduceMean", inputs, [y], f"{where}/ReduceMean", keepdims=keep)
    else:
        extra = {"axes": axes} if axes is not None else {}
        w.node("ReduceMean", [x], [y], f"{where}/ReduceMean", keepdims=keep, **extra)
    w.quantize(where, y, node.input[3], _input(node, 4), node.output[0],
               w.zero_type(node, (4, 2)))


def _qgemm(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """A, a_scale, a_zero_point, B, b_scale, b_zero_point, C (int32, scale a_scale *
    b_scale), y_scale, y_zero_point (without them, Y is float32); alpha, transA, transB:
    ``alpha * (A'B' + C)`` of the dequantized operands."""
    attributes = _attributes(node)
    trans_b = attributes.get("transB", 0)
    a = w.dequantize(where, node.input[0], node.input[1], _input(node, 2))
    b = w.dequantize(where, node.input[3], node.input[4], _input(node, 5),
                     axis=0 if trans_b else 1)
    inputs = [a, b]
    if _input(node, 6):
        scale = w.product(where, node.input[1], node.input[4])
        inputs.append(w.dequantize(where, node.input[6], scale, "", axis=0))
    quantized = bool(_input(node, 7))
    y = w.fresh(f"{node.output[0]}/float") if quantized else node.output[0]
    # onnxruntime scales the bias with the product: alpha * (A'B' + C), C's scale a_scale *
    # b_scale
    alpha = attributes.get("alpha", 1.0)
    w.node("Gemm", inputs, [y], f"{where}/Gemm", alpha=alpha, beta=alpha,
           transA=attributes.get("transA", 0), transB=trans_b)
    if quantized:
        w.quantize(where, y, node.input[7], _input(node, 8), node.output[0],
                   w.zero_type(node, (8, 2)))


def _qlinear_conv(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
    (int32, scale x_scale * w_scale per output channel); Conv's attributes."""
    x = w.dequantize(where, node.input[0], node.input[1], node.input[2])
    weight = w.dequantize(where, node.input[3], node.input[4], node.input[5], axis=0)
    inputs = [x, weight]
    if _input(node, 8):
        scale = w.product(where, node.input[1], node.input[4])
        inputs.append(w.dequantize(where, node.input[8], scale, "", axis=0))
    y = w.fresh(f"{node.output[0]}/float")
    w.node("Conv", inputs, [y], f"{where}/Conv", **_attributes(node))
    w.quantize(where, y, node.input[6], node.input[7], node.output[0],
               w.zero_type(node, (7, 2)))


def _qlinear_matmul(w: _Writer, node: onnx.NodeProto, where: str) -> None:
    """a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point (``b``'s
    scale per column where ``b`` is a 2-D constant)."""
    a = w.dequantize(where, node.input[0], node.input[1], node.input[2])
    b = w.dequantize(where, node.input[3], node.input[4], node.input[5],
                     axis=1 if w.constant(node.input[3]) is not None else None)
    y = w.fresh(f"{node.output[0]}/float")
    w.node("MatMul", [a, b], [y], f"{where}/MatMul")
    w.quantize(where, y, node.input[6], node.input[7], node.output[0],
               w.zero_type(node, (7, 2)))


def _renamed(op_type: str) -> Callable[[_Writer, onnx.NodeProto, str], None]:
    """The com.microsoft QuantizeLinear/DequantizeLinear as the standard op (same inputs and
    ``axis``)."""
    def rewrite(w: _Writer, node: onnx.NodeProto, where: str) -> None:
        w.node(op_type, list(node.input), list(node.output), where, **_attributes(node))
    return rewrite


CONTRIB: dict[str, Callable[[_Writer, onnx.NodeProto, str], None]] = {
    "QLinearAdd": _binary("Add"),
    "QLinearMul": _qlinear_mul,
    "QLinearSigmoid": _unary("Sigmoid"),
    "QLinearLeakyRelu": _unary("LeakyRelu"),
    "QLinearGlobalAveragePool": _unary("GlobalAveragePool"),
    "QLinearAveragePool": _average_pool,
    "QLinearConcat": _concat,
    "QLinearSoftmax": _softmax,
    "QLinearWhere": _where,
    "QLinearReduceMean": _reduce_mean,
    "QGemm": _qgemm,
    "QuantizeLinear": _renamed("QuantizeLinear"),
    "DequantizeLinear": _renamed("DequantizeLinear"),
}


def _layer(w: _Writer, node: onnx.NodeProto) -> bool:
    """Whether a QLinearConv or QLinearMatMul is a quantized model's layer the QDQ form
    states: a per-tensor input scale (QLinearMatMul also takes one per row, which a
    DequantizeLinear cannot state) and a constant weight (a 2-D one for QLinearMatMul), or,
    for a QLinearMatMul, two operands the graph computes (attention's products in a QOperator
    transformer) with per-tensor scales. A QLinearMatMul of the graph's own inputs stays the
    integer op."""
    weight, scale = w.constant(_input(node, 3)), w.constant(_input(node, 1))
    if scale is None or scale.size != 1:
        return False
    if weight is not None:
        return node.op_type == "QLinearConv" or weight.ndim == 2
    b_scale = w.constant(_input(node, 4))
    return node.op_type == "QLinearMatMul" and b_scale is not None and b_scale.size == 1 and \
        all(name in w.produced for name in (node.input[0], node.input[3]))


# The fewest inputs each op has (its optional zero points and bias left out).
FEWEST_INPUTS = {"QLinearAdd": 7, "QLinearMul": 7, "QLinearSigmoid": 4, "QLinearLeakyRelu": 4,
                 "QLinearGlobalAveragePool": 4, "QLinearAveragePool": 4, "QLinearConcat": 5,
                 "QLinearSoftmax": 4, "QLinearWhere": 8, "QLinearReduceMean": 4, "QGemm": 6,
                 "QuantizeLinear": 2, "DequantizeLinear": 2, "QLinearConv": 8,
                 "QLinearMatMul": 8}


STANDARD: dict[str, Callable[[_Writer, onnx.NodeProto, str], None]] = {
    "QLinearConv": _qlinear_conv,
    "QLinearMatMul": _qlinear_matmul,
}


def qoperator_as_qdq(model: onnx.ModelProto, opset: int) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` with its QOperator nodes (module docstring) written in the QDQ format, and a
    note of what was rewritten; ``model`` itself where it has none.

    >>> from onnx import TensorProto, helper
    >>> scale = helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])
    >>> zero = helper.make_tensor("z", TensorProto.UINT8, [], [128])
    >>> add = helper.make_node("QLinearAdd", ["a", "s", "z", "b", "s", "z", "s", "z"], ["c"],
    ...                        domain="com.microsoft")
    >>> u8 = [helper.make_tensor_value_info(n, TensorProto.UINT8, [4]) for n in "abc"]
    >>> graph = helper.make_graph([add], "g", u8[:2], u8[2:], [scale, zero])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
    ...                                                 helper.make_opsetid("com.microsoft", 1)])
    >>> rewritten, notes = qoperator_as_qdq(model, 17)
    >>> [n.op_type for n in rewritten.graph.node]
    ['DequantizeLinear', 'DequantizeLinear', 'Add', 'QuantizeLinear']
    """
    graph = model.graph
    if not any((n.domain == MICROSOFT and n.op_type in CONTRIB) or
               (n.domain in ("", "ai.onnx") and n.op_type in STANDARD) for n in graph.node):
        return model, []
    writer = _Writer(graph, opset)
    nodes: list[onnx.NodeProto] = []
    counts: dict[str, int] = {}
    for k, node in enumerate(graph.node):
        where = node.name or f"{node.op_type}_{k}"
        rewrite = CONTRIB.get(node.op_type) if node.domain == MICROSOFT else None
        if node.domain in ("", "ai.onnx") and node.op_type in STANDARD and \
                _layer(writer, node):
            rewrite = STANDARD[node.op_type]
        if rewrite is None:
            nodes.append(node)
            continue
        if len(node.input) < FEWEST_INPUTS[node.op_type] or not node.output or \
                (node.op_type == "QLinearConcat" and (len(node.input) - 2) % 3):
            raise ModelError(f"node {where} ({node.op_type}): {len(node.input)} input(s) and "
                             f"{len(node.output)} output(s); it takes at least "
                             f"{FEWEST_INPUTS[node.op_type]} inputs" +
                             (" (Y_scale, Y_zero_point, then X, X_scale, X_zero_point per "
                              "input)" if node.op_type == "QLinearConcat" else "") +
                             " and one output")
        writer.nodes = []
        rewrite(writer, node, where)
        nodes.extend(writer.nodes)
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    if not counts:
        return model, []
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    del rewritten.graph.node[:]
    rewritten.graph.node.extend(nodes)
    rewritten.graph.initializer.extend(writer.initializers)
    kept = [o for o in rewritten.opset_import if o.domain != MICROSOFT or any(
        n.domain == MICROSOFT for n in nodes)]
    del rewritten.opset_import[:]
    rewritten.opset_import.extend(kept)
    what = ", ".join(f"{count} {op}" for op, count in sorted(counts.items()))
    return rewritten, [f"QOperator format read as QDQ: {what} as DequantizeLinear -> float op "
                       f"-> QuantizeLinear"]


__all__ = ["CONTRIB", "MICROSOFT", "STANDARD", "qoperator_as_qdq"]
