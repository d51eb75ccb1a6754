"""Static steps that are dense products: layers on the generated GEMM
(``tensoralg.program.dense_layer``), unfused ``Gemm`` and ``MatMul`` nodes, and ``X @ X^T``.

A fused program whose head went to BLAS and whose weight is a constant runs its product on the
generated GEMM instead: the weight is packed once when the plan is built. When the epilogue is
only a bias over the columns and/or a ReLU (``max(P(i,j) + b(j), 0)`` and its sub-forms, by
far the most common layer), the GEMM applies it to the tile in registers and the step is one
call; any other epilogue keeps its own kernel, reading the product from a scratch buffer as it
did after BLAS. The plan and the profile say which (``generated GEMM ... + bias + relu``).
"""
from __future__ import annotations

import math
import os
import re
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from tensoralg import program
from tensoralg.onnx.ops.int8 import conv_geometry, int8_conv_of, int8_epilogue
from tensoralg.onnx.ops.matmul import use_blas
from tensoralg.onnx.ops.windows import windows
from tensoralg.onnx.passes.fusion import FLOATS, clamp_text, fused, fused_activation, gelu_text
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import (
    Env,
    Getter,
    Run,
    Spec,
    contiguous,
    made_of,
    one_input_run,
    parts_of,
    placeholder,
)
from tensoralg.onnx.plan.window_steps import depthwise_spec, grouped_window_spec
from tensoralg.program import GELU, Activation, DenseLayer, dense_layer

# Below this many outputs a layer's epilogue stays a kernel of its own (it may not be one the
# GEMM applies) and, over a K this long, the product is a dot-product statement instead of
# the GEMM: a one-vector tile broadcasts every input value, which for a 10^4-wide multi-hot
# input costs more than streaming it once. Measured ad hoc, 256 x 144 x n: the GEMM 13-17 µs
# for n = 1..16, the statement with B(k,j) 110-128 µs.
MIN_COLUMNS = 16


NARROW_DOT_MIN_K = 1024
# Up to this many outputs the dot-product statement wins at any K: the GEMM's one-vector tile
# computes 16 columns for 1 or 2. Measured ad hoc in compiled sequences, 256 rows, float32:
# n = 1: K = 96 6.3 -> 2.7 µs, K = 256 17.3 -> 6.2 µs; n = 2, K = 64: 4.3 -> 2.9 µs; n = 4
# is even (K = 256: 17.7 against 17.1 µs), n = 10 is the GEMM's (10 against 32 µs).
NARROW_DOT_MAX_COLUMNS = 2


def narrow_dot(k: int, n: int) -> bool:
    """Whether a K x N product is a dot-product statement rather than the generated GEMM.

    >>> narrow_dot(256, 1), narrow_dot(256, 8), narrow_dot(10_000, 8)
    (True, False, True)
    """
    return n < MIN_COLUMNS and (k >= NARROW_DOT_MIN_K or n <= NARROW_DOT_MAX_COLUMNS)


_ATOM = re.compile(r"\(([A-Za-z_]\w*\([a-z,]*\))\)")   # (A(i,j)) -> A(i,j)


@dataclass(frozen=True)
class Epilogue:
    """What the GEMM can apply itself: a column bias (an operand name) and/or an activation
    (``relu``: True for ReLU, or :data:`tensoralg.program.GELU`)."""

    bias: str | None
    relu: bool | Activation


def _strip(text: str) -> str:
    text = text.replace(" ", "")
    while True:
        shorter = _ATOM.sub(r"\1", text)
        if shorter == text:
            break
        text = shorter
    while text.startswith("(") and _closing(text, 0) == len(text) - 1:
        text = text[1:-1]
    return text


def _closing(text: str, start: int) -> int:
    depth = 0
    for k in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[k], 0)
        if depth == 0:
            return k
    return -1


def gemm_epilogue(statement: str, operands: Mapping[str, tuple[str, tuple[int, ...], Any]],
                  product: str, n: int) -> Epilogue | None:
    """The epilogue of ``statement`` if the GEMM can apply it all, else None. ``product`` is
    the letter of the head's product; a bias must be an operand of shape ``(n,)`` indexed by
    the column.

    >>> ops = {"A": ("P", (4, 3), "view"), "B": ("b", (3,), "view")}
    >>> gemm_epilogue("Y(i,j) = max(((A(i,j)) + B(j)), 0)", ops, "A", 3)
    Epilogue(bias='b', relu=True)
    >>> gemm_epilogue("Y(i,j) = sigmoid(A(i,j))", ops, "A", 3) is None
    True
    >>> gemm_epilogue("Y(i,j) = " + gelu_text({}, "(B(j) + (A(i,j)))"), ops, "A", 3)
    Epilogue(bias='b', relu=Activation(kind='Gelu', low=-inf, high=inf, alpha=0.0, beta=0.0))
    """
    lhs, _, rhs = statement.partition("=")
    if lhs.replace(" ", "") != "Y(i,j)":
        return None
    body = _strip(rhs)
    relu: bool | Activation = False
    if body.startswith("max(") and body.endswith(",0)") and _closing(body, 3) == len(body) - 1:
        body, relu = _strip(body[4:-3]), True
    elif body.startswith("0.5*(") and _closing(body, 4) > 0:
        # GELU (erf form) of the part in the first parentheses, if the rest is its formula
        inner = body[4:_closing(body, 4) + 1]
        if _strip(gelu_text({}, inner)) == body:
            body, relu = _strip(inner), GELU
    p = f"{product}(i,j)"
    if body == p:
        return Epilogue(None, relu)
    parts = body.split("+")
    if len(parts) != 2 or p not in parts:
        return None
    other = parts[1] if parts[0] == p else parts[0]
    match = re.fullmatch(r"([A-Za-z_]\w*)\(j\)", other)
    if match and match.group(1) in operands:
        name, shape, _ = operands[match.group(1)]
        if tuple(shape) == (n,):
            return Epilogue(name, relu)
    return None


# Dense layers by the constants they pack, shared by the plans of one model (a model served
# with many input shapes keeps a plan per shape; each used to pack its own copy of every weight).
# Weak values: a layer goes with the last plan that holds it; it holds the arrays its key names
# (``sources``), so their ids and addresses cannot be reused while the entry exists.
_LAYERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def layer_of(weight: np.ndarray, trans_b: bool, epilogue: Epilogue | None,
             constants: Mapping[str, np.ndarray], dtype: np.dtype) -> DenseLayer | None:
    """The dense layer for a constant ``weight`` (K x N, or N x K with ``trans_b``) and the
    epilogue, or None when the bias is not a constant of ``dtype``; one layer per weight,
    bias and activation, whichever plan asks."""
    w = weight.T if trans_b else weight
    if w.ndim != 2 or w.dtype != dtype:
        return None
    bias = None
    if epilogue is not None and epilogue.bias is not None:
        bias = constants.get(epilogue.bias)
        if bias is None or bias.dtype != dtype:
            return None
    relu = epilogue is not None and epilogue.relu
    key = (id(weight), weight.ctypes.data, weight.shape, trans_b,
           None if bias is None else (id(bias), bias.ctypes.data), relu, np.dtype(dtype).str)
    layer = _LAYERS.get(key)
    if layer is None:
        layer = dense_layer(np.ascontiguousarray(w), None if bias is None else bias.reshape(-1),
                            relu=relu)
        layer.sources = (weight, bias)      # type: ignore[attr-defined]
        _LAYERS[key] = layer
    return layer


def layer_run(layer: Any, a_get: Getter, out: np.ndarray, a_shape: tuple[int, ...]) -> Run:
    """The bound dense layer reading this run's ``A`` and writing ``out``."""
    bound = layer.bind(placeholder(a_get, a_shape, layer.dtype).reshape(a_shape), out)
    return one_input_run(bound, a_get, "A", a_shape)


def _layer_spec(layer: DenseLayer, a_shape: tuple[int, ...]) -> Spec:
    """A step that is only ``layer`` on its first input, written into its output."""
    spec = Spec(lambda outs, buffers, ins: layer_run(
        layer, ins[0], outs[0].reshape(a_shape[0], layer.n), a_shape), [], "generated GEMM")
    spec.plan = layer.describe(a_shape[0])
    return spec


def _uses_gemm(weight: np.ndarray) -> bool:
    """Whether a K x N constant weight's product goes to the generated GEMM (see
    :func:`narrow_dot`)."""
    return not narrow_dot(weight.shape[0], weight.shape[1])


def matmul_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
                shared: dict[str, Any]) -> Spec | None:
    """A MatMul the node-by-node run sent to BLAS: the same product, into its buffer (on the
    generated GEMM for a constant weight; one kernel for a batched ``X @ X^T``)."""
    a, b = (recorded[n] for n in step.node.inputs[:2])
    out = recorded[step.node.outputs[0]]
    if a.ndim < 2 or b.ndim < 2 or not a.dtype == b.dtype == out.dtype or \
            a.dtype not in FLOATS:
        return None
    gram = gram_spec(step, recorded, shared)
    weight = constants.get(step.node.inputs[1])
    blas = any(text.startswith("BLAS") for text in step.context.plan)
    if gram is None and not blas and a.ndim > 2 and weight is not None and \
            weight.ndim == 2 and weight.dtype == a.dtype and a.shape[-1] == weight.shape[0]:
        # A batch of rows (B, T, K) times a small constant (K, N), too small for BLAS: the
        # capture below takes 2-D operands only, and FiBiNET's 650 bilinear products of
        # (256, 1, 8) by (8, 8) ran as Python steps (20.9 ms a batch of 256 against
        # onnxruntime's 6.6).
        return _narrow_spec(step, a, weight)
    left = constants.get(step.node.inputs[0])
    if gram is None and not blas and left is not None and left.ndim == 2 and b.ndim > 2 and \
            left.dtype == b.dtype and left.shape[1] == b.shape[-2] and \
            out.shape == (*b.shape[:-2], left.shape[0], b.shape[-1]):
        # A constant matrix times a batch of matrices (FT-Transformer's linear attention,
        # ``E^T @ X[b]``), whose right operand is often a slice of a projection: the capture
        # below takes only operands that are node inputs themselves, so these ran as Python
        # steps (~25 µs each for 12e3 multiply-adds, 2026-12-06).
        return _left_weight_spec(step, left, b)
    if gram is not None or not blas:
        return gram      # None: a small product, captured as the kernel it ran

    if weight is not None and weight.ndim == 2 and _uses_gemm(weight):
        # A batch of sequences (B, T, K) times a constant (K, N) is one (B * T) x K product
        # (a transformer's projections: Llama's MLP ran 3-D through BLAS at 10x the cost).
        layer = layer_of(weight, False, None, constants, a.dtype)
        if layer is not None:
            return _layer_spec(layer, (math.prod(a.shape[:-1]), a.shape[-1]))
    if a.ndim == 2 and weight is not None and weight.ndim == 2 and weight.dtype == a.dtype:
        return _narrow_spec(step, a, weight)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        buf, (a_of, b_of) = outs[0], ins
        return lambda env: np.matmul(a_of(env), b_of(env), out=buf)

    return Spec(make, [], "BLAS")


def _epilogue_of(node: Any, constants: Mapping[str, np.ndarray]) -> Any:
    """The ``program.Int8Epilogue`` an ``Int8MatMul``/``Int8Conv`` node absorbed."""
    multiplier, bias = (constants.get(name) if name else None
                        for name in (*node.inputs[4:6], "", "")[:2])
    return int8_epilogue(multiplier, bias, node.attributes)


def quantized_matmul_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                          ) -> Spec | None:
    """An ``Int8MatMul`` (``ops/int8.py``) as one prebound int8 GEMM call
    reading its input and the quantization scale and zero point from their buffers, so that
    it joins the plan's compiled sequence."""
    node = step.node
    x = recorded[node.inputs[0]]
    weight = constants.get(node.inputs[3])
    if weight is None or x.dtype != np.float32 or not x.size:
        return None
    rows = (math.prod(x.shape[:-1]), x.shape[-1])
    layer = program.quantized_layer(weight, _epilogue_of(node, constants))

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        scalars = [placeholder(get, (), np.dtype(np.float32)).reshape(()) for get in ins[1:3]]
        bound = layer.bind(placeholder(ins[0], x.shape, x.dtype).reshape(rows), *scalars,
                           outs[0].reshape(rows[0], layer.n))
        operands = [("x", ins[0], rows), ("scale", ins[1], ()), ("zero", ins[2], ())]
        dynamic = [(name, get, shape) for name, get, shape in operands if get.fixed is None]

        def run(env: Env) -> None:
            for name, get, shape in dynamic:
                bound.rebind(name, contiguous(get(env)).reshape(shape))
            bound()
        return made_of(run, [(bound, operands)])

    spec = Spec(make, [], "generated GEMM")
    spec.plan = layer.describe(rows[0])
    return spec


def quantized_conv_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                        ) -> Spec | None:
    """An ``Int8Conv`` (``ops/int8.py``) as prebound calls of the plan's compiled
    sequence: the calls of ``program.quantized_conv`` (the quantized planes and the product
    over positions of a pointwise convolution; else the quantized channels-last image, the
    int8 product and its transpose into the NCHW output) or, with a horizontal dilation, the
    float patch matrix
    (``program.im2row_call``), the int8 GEMM and the transpose of its channels-last product
    into the output (``program.transpose_call``)."""
    node = step.node
    x, out = recorded[node.inputs[0]], recorded[node.outputs[0]]
    weight = constants.get(node.inputs[3])
    if weight is None or x.dtype != np.float32 or x.ndim != 4 or not out.size or \
            not weight[0].size:
        return None
    m, c, *kernel = weight.shape
    geometry = conv_geometry(step.context, x.shape, kernel, node.attributes)
    n, (oh, ow) = x.shape[0], geometry.out
    rows = n * oh * ow
    epilogue = _epilogue_of(node, constants)
    conv = int8_conv_of(step.context, weight, geometry, {}, epilogue)
    layer = program.quantized_layer(np.ascontiguousarray(weight.reshape(m, -1).T), epilogue) \
        if conv is None else None
    scratch = [] if conv is not None else [((rows, m), np.dtype(np.float32)),
                                           ((rows, c * math.prod(kernel)), np.dtype(np.float32))]

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        source = placeholder(ins[0], x.shape, x.dtype)
        scalars = [placeholder(get, (), np.dtype(np.float32)).reshape(()) for get in ins[1:3]]
        if conv is not None:
            operands = {"x": (ins[0], None), "scale": (ins[1], ()), "zero": (ins[2], ())}
            parts: list[Any] = [
                (call, [(name, *operands[name]) for name in getattr(call, "operands", ())])
                for call in conv.bind(source, *scalars, outs[0].reshape(n, m, oh, ow))]
        else:
            product, patches = buffers
            im2row = program.im2row_call(source, tuple(kernel), geometry.strides,
                                         geometry.dilations, geometry.pads_begin, (oh, ow),
                                         patches, str(step.context))
            assert im2row is not None        # float32, 4-D, not empty: checked above
            parts = [(im2row, [("x", ins[0], None)]),
                     (layer.bind(patches, *scalars, product),
                      [("scale", ins[1], ()), ("zero", ins[2], ())]),
                     (program.transpose_call(product.reshape(n, oh * ow, m),
                                             outs[0].reshape(n, m, oh * ow)), [])]
        dynamic = [(call, name, get, shape) for call, operands in parts
                   for name, get, shape in operands if get.fixed is None]

        def run(env: Env) -> None:
            for call, name, get, shape in dynamic:
                value = contiguous(get(env))
                call.rebind(name, value if shape is None else value.reshape(shape))
            for call, _ in parts:
                call()
        return made_of(run, parts)

    # One image: a channel block of a Concat's output is C-contiguous, which every route
    # writes (SqueezeNet's fire modules and DenseNet join int8 layers so).
    spec = Spec(make, scratch, "generated GEMM", image_blocks_output=n == 1)
    spec.plan = conv.describe(rows) if conv is not None else \
        f"float patch rows, then {layer.describe(rows)}, then NCHW transpose"
    return spec


LEFT_WEIGHT = "Y(i,x,y) = sum(z, A(x,z) * B(i,z,y))"     # A constant, B a batch of matrices


def _left_weight_spec(step: Step, weight: np.ndarray, b: np.ndarray) -> Spec:
    """``W @ X`` for a constant 2-D ``W`` and a batch ``X`` of matrices (``(..., K, N)``): one
    prebound kernel over the batch, ``X`` copied first when it arrives as a strided view."""
    kernel = step.context.kernels.get(LEFT_WEIGHT, b.dtype, {})
    batched = (math.prod(b.shape[:-2]), *b.shape[-2:])
    w = np.ascontiguousarray(weight)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        bound = kernel.bind(out=outs[0].reshape(batched[0], w.shape[0], batched[2]), A=w,
                            B=placeholder(ins[1], b.shape, b.dtype).reshape(batched))
        return one_input_run(bound, ins[1], "B", batched)

    spec = Spec(make, [], "kernel")
    spec.plan = f"constant left factor over a batch: {LEFT_WEIGHT}"
    return spec


NARROW_LAYER = "Y(i,j) = sum(k, A(i,k) * B(j,k)) + C(j)"      # B = W^T: dot products
NARROW_PRODUCT = "Y(i,j) = sum(k, A(i,k) * B(j,k))"             # the same, without a bias


def _narrow_spec(step: Step, a: np.ndarray, weight: np.ndarray) -> Spec:
    """``X @ W`` for a narrow constant ``W`` (see :func:`narrow_dot`): one prebound kernel of
    dot products against ``W^T`` (transposed once, here), which joins a compiled sequence
    where NumPy's matmul would cost a Python step (DCN's cross-layer ``x @ w``, a one-column
    output layer)."""
    kernel = step.context.kernels.get(NARROW_PRODUCT, a.dtype, {})
    w = np.ascontiguousarray(weight.T)
    rows = (math.prod(a.shape[:-1]), a.shape[-1])     # leading axes as rows

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        bound = kernel.bind(out=outs[0].reshape(rows[0], -1),
                            A=placeholder(ins[0], a.shape, a.dtype).reshape(rows), B=w)
        return one_input_run(bound, ins[0], "A", rows)

    spec = Spec(make, [], "kernel")
    spec.plan = f"dot products per row (narrow product): {NARROW_PRODUCT}"
    return spec


def gemm_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """An unfused ``Gemm`` with a constant weight and bias (alpha = beta = 1, no transA): a
    dense layer on the generated GEMM, or for a narrow output over a long K (``_uses_gemm``)
    one kernel of dot products with the bias."""
    node = step.node
    attrs = node.attributes
    if len(node.inputs) < 2 or attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or \
            attrs.get("beta", 1.0) != 1.0 or node.inputs[1] not in constants:
        return None
    a = recorded[node.inputs[0]]
    weight = constants[node.inputs[1]]
    weight = weight.T if attrs.get("transB", 0) else weight
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = constants.get(bias_name) if bias_name else np.zeros(weight.shape[1:], a.dtype)
    if a.ndim != 2 or weight.ndim != 2 or a.dtype not in FLOATS or weight.dtype != a.dtype or \
            bias is None or bias.dtype != a.dtype or bias.size not in (1, weight.shape[1]):
        return None
    bias = np.ascontiguousarray(np.broadcast_to(bias.reshape(-1), (weight.shape[1],)))
    if _uses_gemm(weight):
        return _layer_spec(dense_layer(np.ascontiguousarray(weight), bias), a.shape)
    kernel = step.context.kernels.get(NARROW_LAYER, a.dtype, {})
    w = np.ascontiguousarray(weight.T)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        bound = kernel.bind(out=outs[0], A=placeholder(ins[0], a.shape, a.dtype), B=w, C=bias)
        return one_input_run(bound, ins[0], "A")

    spec = Spec(make, [], "kernel")
    spec.plan = NARROW_LAYER
    return spec


def pointwise_conv_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                        ) -> Spec | None:
    """A ``Conv`` whose kernel is one cell (any rank; stride 1, no padding: xDeepFM's CIN
    layers, 1-D; group 1, or any group over a 1-D input: SqueezeBERT's grouped projections)
    with constant weights: the input viewed as (N, C, positions), or (N, G, C / G, positions),
    is the patch matrix, so nothing is copied. Too small for BLAS, one prebound kernel
    ``Y(n,o,p) = sum(c, W(o,c) * X(n,c,p))`` (grouped: ``Y(n,g,o,p) = sum(c, W(g,o,c) *
    X(n,g,c,p))``) with the bias and the fused ReLU in the same statement; else, for a 2-D
    convolution, None (``conv_spec`` runs it as a direct convolution on the generated GEMM),
    and otherwise BLAS (one batched product over the groups) into a scratch product and one
    kernel for the bias and ReLU."""
    node = step.node
    attrs = node.attributes
    x, out = recorded[node.inputs[0]], recorded[node.outputs[0]]
    weight = constants.get(node.inputs[1])
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = constants.get(bias_name) if bias_name else None
    if weight is None or x.ndim < 3 or weight.ndim != x.ndim or x.dtype not in FLOATS or \
            weight.dtype != x.dtype or out.dtype != x.dtype or \
            (bias_name and (bias is None or bias.dtype != x.dtype)) or \
            any(k != 1 for k in weight.shape[2:]) or \
            out.shape != (x.shape[0], weight.shape[0], *x.shape[2:]) or not out.size:
        return None
    n, channels, positions = x.shape[0], x.shape[1], int(np.prod(x.shape[2:]))
    groups = int(attrs.get("group", 1))
    if groups < 1 or (groups > 1 and x.ndim != 3) or channels % groups or \
            weight.shape[0] % groups or weight.shape[1] * groups != channels:
        return None
    relu = fused_activation(attrs)
    per_in, per_out = channels // groups, weight.shape[0] // groups
    if groups == 1:
        w = np.ascontiguousarray(weight.reshape(weight.shape[0], channels))
        shape, out_shape = (n, channels, positions), (n, weight.shape[0], positions)
        y, wi, xi, bi = "n,o,p", "o,c", "n,c,p", "o"
    else:
        w = np.ascontiguousarray(weight.reshape(groups, per_out, per_in))
        shape, out_shape = (n, groups, per_in, positions), (n, groups, per_out, positions)
        y, wi, xi, bi = "n,g,o,p", "g,o,c", "n,g,c,p", "g,o"
        if bias is not None:
            bias = bias.reshape(groups, per_out)
    large = use_blas(x.dtype, n * per_out * channels * positions)
    if large and x.ndim == 4:
        # A 2-D 1x1 convolution is a direct convolution on the generated GEMM (conv_spec):
        # one thread, as ta.set_num_threads says, where NumPy's OpenBLAS runs its own threads;
        # on a loaded 2-core machine those made MobileNetV2's 96x16x12544 product 16 ms
        # against 0.7 ms for the GEMM, and the layout copies in and out cost less than that.
        return None
    if large:
        # The generated statement's loops cannot match BLAS here (8x slower on xDeepFM's
        # 32 x 676 x 8): BLAS into a scratch product, then bias and ReLU as one kernel.
        epilogue = f"Y({y}) = A({y})" + (f" + B({bi})" if bias is not None else "")
        if relu:
            epilogue = f"Y({y}) = {clamp_text(epilogue.split(' = ', 1)[1], relu)}"
        post = step.context.kernels.get(epilogue, x.dtype, {})

        def make_blas(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]
                      ) -> Run:
            product, get = buffers[0], ins[0]
            extra = {} if bias is None else {"B": np.ascontiguousarray(bias)}
            bound = post.bind(out=outs[0].reshape(out_shape), A=product, **extra)

            def run(env: Env) -> None:
                np.matmul(w, get(env).reshape(shape), out=product)
                bound()
            return run

        spec = Spec(make_blas, [(out_shape, x.dtype)], "BLAS + kernel")
        spec.plan = (f"BLAS (dense {n}x{weight.shape[0]}x{channels}x{positions}"
                     + (f", {groups} groups" if groups > 1 else "") + f") then {epilogue}")
        return spec
    statement = f"Y({y}) = sum(c, W({wi}) * X({xi}))" + (f" + B({bi})" if bias is not None
                                                         else "")
    activation = fused(attrs)
    # A smooth activation written around the sum would compute the sum twice (SiLU reads
    # its argument twice): it runs as a second kernel on the result, in place.
    after = activation is not None and activation.smooth
    if relu and not after:
        statement = f"Y({y}) = {clamp_text(statement.split(' = ', 1)[1], relu)}"
    kernel = step.context.kernels.get(statement, x.dtype, {})
    operands = {"W": w} if bias is None else {"W": w, "B": np.ascontiguousarray(bias)}
    text = f"Y(i) = {activation.text('A(i)')}" if after else None
    post = step.context.kernels.get(text, x.dtype, {}) if after else None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        bound = kernel.bind(out=outs[0].reshape(out_shape),
                            X=placeholder(ins[0], x.shape, x.dtype).reshape(shape), **operands)
        run = one_input_run(bound, ins[0], "X", shape)
        if post is None:
            return run
        flat = outs[0].reshape(-1)
        activate = post.bind(out=flat, A=flat)

        def both(env: Env) -> None:
            run(env)
            activate()
        return made_of(both, parts_of(run) + [(activate, [])])

    spec = Spec(make, [], "kernel")
    spec.plan = statement + (f"; then {text} in place" if after else "")
    return spec


def planar_conv_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                     ) -> Spec | None:
    """A 2-D ``Conv`` with a constant 1x1 kernel (stride 1, no padding, group 1) as one call of
    the generated pointwise convolution (``runtime/planar.py``): NCHW in and out, the product
    ``W @ X[n]`` per image with no layout copy, plus the residual (a fourth input, attribute
    ``residual``: ``passes.folding.fuse_conv_residuals``) when there is one. None for anything
    else, and for a pruned weight (``skip_zeros``), whose zeros the compiled-in convolution
    leaves out."""
    node = step.node
    attrs = node.attributes
    x, out = recorded[node.inputs[0]], recorded[node.outputs[0]]
    residual = node.inputs[3] if attrs.get("residual") else None
    if residual is not None and (recorded[residual].shape != out.shape or
                                 recorded[residual].dtype != out.dtype):
        return None
    weight = constants.get(node.inputs[1])
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = constants.get(bias_name) if bias_name else None
    if weight is None or x.ndim != 4 or weight.ndim != 4 or x.dtype not in FLOATS or \
            weight.dtype != x.dtype or out.dtype != x.dtype or \
            (bias_name and (bias is None or bias.dtype != x.dtype or
                            bias.size != weight.shape[0])) or \
            int(attrs.get("group", 1)) != 1 or weight.shape[2:] != (1, 1) or \
            weight.shape[1] != x.shape[1] or attrs.get("skip_zeros", 0) or \
            out.shape != (x.shape[0], weight.shape[0], *x.shape[2:]) or not out.size:
        return None
    geometry = windows(step.context, x.shape[2:], weight.shape[2:],
                       strides=attrs.get("strides"), dilations=attrs.get("dilations"),
                       pads=attrs.get("pads"), auto_pad=attrs.get("auto_pad", "NOTSET"))
    if geometry.strides != (1, 1) or any(geometry.pads_begin) or any(geometry.pads_end):
        return None
    conv = program.pointwise_conv(weight, None if bias is None else bias.reshape(-1),
                                         fused_activation(attrs), x.shape[2] * x.shape[3],
                                         program.kernel_cache().disk,
                                         program.kernel_cache().threads,
                                         residual=residual is not None)
    if conv is None:
        return None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        if residual is None:
            return one_input_run(conv.bind(placeholder(ins[0], x.shape, x.dtype), outs[0]),
                                 ins[0], "x")
        get_r = ins[-1]        # the residual is the last input (empty names have none)
        bound = conv.bind(placeholder(ins[0], x.shape, x.dtype), outs[0],
                          placeholder(get_r, out.shape, out.dtype))

        def run(env: Env) -> None:
            if ins[0].fixed is None:
                bound.rebind("x", contiguous(ins[0](env)))
            if get_r.fixed is None:
                bound.rebind("r", contiguous(get_r(env)))
            bound()
        return made_of(run, [(bound, [("x", ins[0], None), ("r", get_r, None)])])

    spec = Spec(make, [], "conv kernel", image_blocks_output=True)
    spec.plan = conv.describe(x.shape[2] * x.shape[3])
    return spec


def conv_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """A 2-D ``Conv`` (group 1) with constant weights as native calls ending in NCHW.

    Without dilation it is direct (``tensoralg.program.conv_layer``): the input copied once into a
    zero-bordered channels-last buffer, then the generated GEMM over every output row, whose K
    runs over the kernel rows in place; no patch matrix. With dilation, the patch matrix is
    built (``im2row_call``) and multiplied by ``W^T``. Either way the channels-last product is
    transposed back to NCHW by a compiled transpose."""
    node = step.node
    attrs = node.attributes
    x = recorded[node.inputs[0]]
    weight = constants.get(node.inputs[1])
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = constants.get(bias_name) if bias_name else None
    out = recorded[node.outputs[0]]
    groups = int(attrs.get("group", 1))
    planar = planar_conv_spec(step, recorded, constants)
    if planar is not None or attrs.get("residual"):
        return planar      # a residual Conv no other kernel takes runs node by node
    pointwise = pointwise_conv_spec(step, recorded, constants)
    if pointwise is not None:
        return pointwise
    if x.ndim != 4 or weight is None or weight.ndim != 4 or groups < 1 or \
            x.dtype not in FLOATS or weight.dtype != x.dtype or out.dtype != x.dtype or \
            (bias_name and (bias is None or bias.dtype != x.dtype)) or not out.size:
        return None
    geometry = windows(step.context, x.shape[2:], weight.shape[2:],
                       strides=attrs.get("strides"), dilations=attrs.get("dilations"),
                       pads=attrs.get("pads"), auto_pad=attrs.get("auto_pad", "NOTSET"))
    channels = weight.shape[0]
    if out.shape != (x.shape[0], channels, *geometry.out):
        return None
    depthwise = depthwise_spec(step, recorded, constants)
    if depthwise is not None:
        return depthwise
    vector = None if bias is None else bias.reshape(-1)
    relu = fused_activation(attrs)
    skip_zeros = bool(attrs.get("skip_zeros", 0))
    direct = geometry.dilations == (1, 1)
    gemm_conv = None        # built once: packing a large weight twice cost load time
    wide = groups == 1 and not skip_zeros and direct and channels >= GEMM_MIN_CHANNELS and \
        weight.shape[2] * weight.shape[3] > 1
    tile = None
    if groups == 1 and not skip_zeros and direct and weight.shape[2:] == (3, 3) and \
            geometry.strides == (1, 1):
        # (a Conv ahead of a normalization by the data's statistics keeps the smaller tile:
        # passes/normalized_convs.py)
        tiles = tuple(t for t in winograd_tiles() if t <= attrs.get("winograd_tile", t))
        tile = program.winograd_tile(weight.shape[1], channels, *geometry.out,
                                     images=x.shape[0], itemsize=x.dtype.itemsize, tiles=tiles)
    if tile is not None:
        # F(2x2, 3x3): 16 multiply-adds per channel pair for 4 outputs where the direct
        # convolution takes 36. One thread, batch 8, float32, against the direct convolution
        # on the generated GEMM (same process, an ad hoc sweep, 2026-12-05): ResNet-18's 3x3
        # layers 0.52-0.68 of its time (64 channels at 56 x 56 to 512 at 7 x 7). F(4x4, 3x3)
        # takes 36 for 16 outputs (benchmarks/winograd.py compares the two).
        conv = program.winograd_conv(weight, vector, geometry.pads_begin, geometry.pads_end,
                                     relu, tile)
        return _planar_gemm_conv_spec(conv, x, conv.describe(x.shape[0], *x.shape[2:]),
                                      "row segments transposed into the NCHW output")
    if wide and (weight[0].size <= PATCH_FIRST_DEPTH or weight.shape[1] <= PATCH_FIRST_CHANNELS):
        # Few patch rows are too short a K for the GEMM's tiles (see PATCH_FIRST_DEPTH).
        patches = _patch_conv_spec(weight, vector, relu, geometry, x)
        if patches is not None:
            return patches
    if wide:
        # The generated GEMM writing NCHW tiles beats patch blocks on a first layer once the
        # output channels fill its panels: ResNet-18's 3 -> 64 7x7 layer 29.0 -> 24.7 ms at
        # batch 8, SqueezeNet's 3 -> 96 37.4 -> 33.4 ms; at 32 channels the two are even. Not
        # a strided 1x1 layer (ResNet's downsampling): its channels-last copy would move the
        # whole input to use a quarter of it (64 -> 128 channels at 56 x 56: 2.7 -> 10 ms).
        gemm_conv = program.conv_layer(weight, vector, geometry.strides, geometry.pads_begin,
                                       geometry.pads_end, relu)
        if gemm_conv.scatters_well():
            rows = x.shape[0] * geometry.out[0] * geometry.out[1]
            return _planar_gemm_conv_spec(gemm_conv, x, "direct convolution on the generated "
                                          f"GEMM ({gemm_conv.layer.describe(rows)})")
    if groups == 1 and not skip_zeros and _direct_conv_gathers(geometry, x):
        # Where the compiled-weights kernel would gather its inputs (strided or narrowing
        # windows), patch blocks read rows with contiguous or paired loads: MobileNetV2's
        # first layer (3 -> 32, 3x3, stride 2) 0.38 -> 0.33 ms at batch 1, 4.5 -> 3.1 ms at 8.
        patches = _patch_conv_spec(weight, vector, relu, geometry, x)
        if patches is not None:
            return patches
    compiled = program.direct_conv(weight, vector, x.shape[1:], geometry.strides,
                                  geometry.dilations, geometry.pads_begin, geometry.pads_end,
                                  groups, relu, skip_zeros)
    if compiled is not None:
        return _compiled_conv_spec(compiled, x)
    if groups != 1:
        rows = x.shape[0] * geometry.out[0] * geometry.out[1]
        if direct and not skip_zeros and not _window_fits_groups(channels // groups, geometry,
                                                                 x.dtype, rows):
            return _grouped_conv_spec(weight, vector, relu, groups, geometry, x)
        return None if skip_zeros else grouped_window_spec(step, recorded, constants)
    patches = _patch_conv_spec(weight, vector, relu, geometry, x)
    if patches is not None:
        return patches
    rows = x.shape[0] * geometry.out[0] * geometry.out[1]
    depth = weight[0].size
    if direct:
        conv = gemm_conv or program.conv_layer(weight, vector, geometry.strides,
                                               geometry.pads_begin, geometry.pads_end, relu)
        what = f"direct convolution on the generated GEMM ({conv.layer.describe(rows)})"
        if conv.scatters_well():
            return _planar_gemm_conv_spec(conv, x, what)
        scratch = [((rows, channels), x.dtype)]
    else:
        layer = dense_layer(np.ascontiguousarray(weight.reshape(channels, depth).T), vector,
                            relu)
        scratch = [((rows, depth), x.dtype), ((rows, channels), x.dtype)]
        what = f"im2row kernel ({rows}x{depth} patch matrix); {layer.describe(rows)}"

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        get = ins[0]
        product = buffers[-1]
        placeholder = contiguous(get.fixed) if get.fixed is not None else \
            np.zeros(x.shape, x.dtype)
        if direct:
            bound = conv.bind(placeholder, product)
            first, calls = bound, bound.parts()
        else:
            first = program.im2row_call(placeholder, geometry.kernel, geometry.strides,
                                       geometry.dilations, geometry.pads_begin, geometry.out,
                                       buffers[0], str(step.context))
            gemm = layer_run(layer, Getter("\0patches", buffers[0]), product, buffers[0].shape)
            calls = [(first, [])] + (parts_of(gemm) or [])
        channels_last = product.reshape(x.shape[0], -1, channels)
        transpose = program.transpose_call(channels_last,
                                           outs[0].reshape(x.shape[0], channels, -1))

        def run(env: Env) -> None:
            if get.fixed is None:
                first.rebind("x", contiguous(get(env)))
            if direct:
                bound()
            else:
                first()
                gemm(env)
            transpose()
        parts = [(calls[0][0], [("x", get, None)]), *calls[1:], (transpose, [])]
        return made_of(run, parts)

    spec = Spec(make, scratch, "conv kernels")
    spec.plan = f"{what}; channels-last to NCHW transpose kernel"
    return spec


# Output channels from which a group-1 convolution goes to the generated GEMM with NCHW
# tiles before patch blocks or compiled weights (see conv_spec).
GEMM_MIN_CHANNELS = 48
# Patch rows (C * KH * KW) up to which such a convolution tries patch blocks before the GEMM
# all the same: with a K that short, the GEMM's per-tile costs (row tables, the NCHW scatter,
# the channels-last copy) outweigh its multiply-adds. One thread, float32, the two kernels
# interleaved (``python benchmarks/conv_epilogue_ab.py stems``, two runs, GEMM time / patch
# time): K = 27 (3 -> 64, 3x3, stride 2, 224 wide) 1.4-2.3 at batch 1, 1.1-2.0 at batch 8;
# K = 48 (3 -> 96, 4x4, stride 4: ConvNeXt's and Swin's stem) 1.3-1.6, batch 8 1.7-2.0;
# K = 75 (3 -> 64, 5x5) 1.7-2.0; K = 108 (12 -> 256, 3x3 at 56) 1.9; from K = 144 the two are
# even (16 -> 64 3x3 at 56: 1.05-1.09 at batch 1, 0.82-0.90 at 8; 28 -> 96 3x3, K = 252,
# 0.96-0.99), so those keep the GEMM.
PATCH_FIRST_DEPTH = 128
# Input channels up to which patch blocks go first at any depth they take (a first layer's
# RGB or RGBA image): the 3 -> 64 7x7 layer, K = 147, 1.05-1.06 at batch 1 and 8, the 3 -> 96
# one 0.98-1.05 (same command); ResNet-18 as a whole 1.016x at batch 1 and 1.024x at 8
# (``conv_epilogue_ab.py model``'s "GEMM before patches" variant).
PATCH_FIRST_CHANNELS = 4


def winograd_tiles() -> tuple[int, ...]:
    """The Winograd output tiles 3x3 convolutions may run by, read from
    ``TENSORALG_WINOGRAD`` when a plan is built: unset or ``1``, F(2x2, 3x3) and F(4x4, 3x3)
    (``program.winograd_tile`` picks per layer); ``2``, F(2x2, 3x3) only (its sums are
    rounded a few units in the last place from a direct convolution's, F(4x4)'s 5-9 times
    that: ``benchmarks/winograd.py``); ``0``, none: direct convolutions, which match other
    runtimes' results most closely. Only on an AVX-512 host (``program.winograd_host``).

    >>> import os; os.environ["TENSORALG_WINOGRAD"] = "0"; winograd_tiles()
    ()
    >>> del os.environ["TENSORALG_WINOGRAD"]
    """
    setting = os.environ.get("TENSORALG_WINOGRAD", "1").strip()
    if setting not in ("0", "1", "2"):
        warnings.warn(f"TENSORALG_WINOGRAD={setting!r} is not 0 (no Winograd), 2 (F(2x2, 3x3) "
                      "only) or 1 (F(2x2) and F(4x4)); using 1", stacklevel=2)
        setting = "1"
    if setting == "0" or not program.winograd_host():
        return ()
    return (2,) if setting == "2" else (2, 4)


def _planar_gemm_conv_spec(conv: Any, x: np.ndarray, what: str,
                           stores: str = "tiles scattered into the NCHW output") -> Spec:
    """The channels-last copy of ``x`` and the generated GEMM scattering its tiles into the
    NCHW output (K in one block, so each output is written once): no product buffer and no
    transpose after it. SqueezeNet's 3x3 expand layer (32 -> 128 channels, 54 x 54, batch 8)
    24.4 -> 18.9 ms against the channels-last product and its transpose."""

    spec = Spec(_conv_maker(conv, x, True), [], "conv kernels", image_blocks_output=True)
    spec.plan = f"{what}, {stores}"
    return spec


def _conv_maker(conv: Any, x: np.ndarray, native_parts: bool) -> Callable[..., Run]:
    """The ``make`` of a step running ``conv.bind(x, out)``, its input rebound each run unless
    fixed; with ``native_parts`` its channels-last copy (reading the input slot) and its GEMM
    may join a compiled sequence."""

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        get = ins[0]
        bound = conv.bind(placeholder(get, x.shape, x.dtype), outs[0])

        def run(env: Env) -> None:
            if get.fixed is None:
                bound.rebind("x", contiguous(get(env)))
            bound()
        if not native_parts:
            return made_of(run, None)
        # The first part (the channels-last copy) reads the input, as the shape it was bound
        # with (a grouped convolution's copy sees N * G images of C / G channels).
        (copy, _), *rest = bound.parts()
        return made_of(run, [(copy, [("x", get, copy.input.shape)]), *rest])
    return make


def _window_fits_groups(outputs: int, geometry: Any, dtype: np.dtype, rows: int) -> bool:
    """Whether a grouped convolution with ``outputs`` channels a group runs faster as the
    window kernel (vector lanes over output columns, a block of a group's output planes
    sharing each load) than as one generated GEMM per group (lanes over the group's output
    channels). Below a vector of channels a group, the GEMM's panels run mostly empty
    (32 groups of 4 ran no faster than the NumPy patch matrix); at 16 the window kernel still
    wins where output rows fill its vectors (one thread, batch 8, float32: 4 groups of 16 at
    56 x 56 10.8 against 15.1 ms; 32 of 16 at 14 x 14 5.3 against 9.7) and loses at 32 a
    group (8 groups of 32 at 28 x 28: 18.9 against 17.3 ms; 32 of 32 at 7 x 7: 10.4 against
    5.9). With 16 a group and few output positions (``rows``, images times output pixels),
    the GEMMs' calls outweigh their work and the window kernel wins even on short rows:
    RegNetX-400MF's 25 groups of 16 at 7 x 7, batch 1 (49 rows): 1.5 against 3.4 ms over its
    twelve layers, 9.4-9.8 against 9.8-10.0 ms for the model; at batch 8 (392 rows) the GEMMs
    stay (66.4-66.7 against 68.1-68.4 ms; one thread, the rule swapped in one process on
    2026-12-04: an ad hoc A/B, not kept; ``benchmarks/onnx_real.py --held-out`` times the
    models as they are)."""
    if outputs < 16:
        return True
    lanes = 64 // np.dtype(dtype).itemsize
    width = geometry.out[1]
    return outputs == 16 and (rows <= FEW_GROUP_ROWS or
                              4 * width >= 3 * lanes * -(-width // lanes))


# Output positions (images x output pixels) up to which a grouped convolution of 16 channels a
# group takes the window kernel whatever its row width (see _window_fits_groups).
FEW_GROUP_ROWS = 64


def _grouped_conv_spec(weight: np.ndarray, bias: np.ndarray | None,
                       relu: bool | tuple[float, float], groups: int, geometry: Any,
                       x: np.ndarray) -> Spec | None:
    """A grouped convolution (ResNeXt's, ShuffleNet's) with more weights than compile in: one
    channels-last copy of every group's channels, then a generated GEMM per group
    (``tensoralg.program.grouped_conv``) scattering its tiles into its channel block of the
    NCHW output; the calls join a compiled sequence. None where a group's K needs more than
    one GEMM block (the NumPy patch matrix then runs it)."""
    conv = program.grouped_conv(weight, bias, groups, geometry.strides, geometry.pads_begin,
                                geometry.pads_end, relu)
    if not conv.writes_nchw_well():
        return None
    rows = x.shape[0] * geometry.out[0] * geometry.out[1]

    spec = Spec(_conv_maker(conv, x, True), [], "conv kernels")
    spec.plan = (f"grouped convolution: one channels-last copy, {groups} generated GEMMs "
                 f"({conv.layers[0].layer.describe(rows)}) writing their channel blocks in "
                 f"place")
    return spec


def _direct_conv_gathers(geometry: Any, x: np.ndarray) -> bool:
    """Whether a compiled-weights convolution of ``x`` would read its input by gathers."""
    return program.compiled_conv_gathers(
        x.shape[1:], geometry.kernel, geometry.strides, geometry.dilations,
        geometry.pads_begin, geometry.out, x.dtype)


def _patch_conv_spec(weight: np.ndarray, bias: np.ndarray | None,
                     relu: bool | tuple[float, float], geometry: Any, x: np.ndarray
                     ) -> Spec | None:
    """A group-1 convolution with few patch rows (``C * KH * KW``, a first layer's 3 x 7 x 7)
    on NCHW planes through patch blocks (``runtime/planar.py``): one call, no layout copy, no
    transpose back. None where it does not apply."""
    bounds = None if relu is False else (0.0, float("inf")) if relu is True else relu
    conv = program.patch_conv_of(x.shape[1:], weight, bias, bounds, geometry.kernel,
                                        geometry.strides, geometry.dilations,
                                        geometry.pads_begin, geometry.out,
                                        program.kernel_cache().disk,
                                        program.kernel_cache().threads)
    return None if conv is None else _compiled_conv_spec(conv, x)


def _compiled_conv_spec(conv: Any, x: np.ndarray) -> Spec:
    """One call of a convolution kernel reading NCHW (weights compiled in, ``tensoralg.program.direct_conv``, or patch blocks, ``runtime.planar.patch_conv``):
    NCHW in, NCHW out, no scratch."""

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        return one_input_run(conv.bind(placeholder(ins[0], x.shape, x.dtype), outs[0]), ins[0],
                             "x")

    spec = Spec(make, [], "conv kernel")
    spec.plan = conv.describe()
    return spec


def gram_spec(step: Step, recorded: Env, shared: dict[str, Any]) -> Spec | None:
    """``MatMul(X, Transpose(X, perm=[0, 2, 1]))`` (DLRM's pairwise dot products, float32 or
    float64) as one kernel reading X twice and multiplying each symmetric pair of rows once,
    so the transposed copy leaves the plan."""
    x, t = step.node.inputs[:2]
    producer = shared.get("producers", {}).get(t)
    if producer is None or producer.node.op_type != "Transpose" or \
            producer.node.inputs[0] != x or shared.get("readers", {}).get(t) != 1 or \
            recorded[x].ndim != 3 or recorded[x].dtype not in FLOATS or \
            tuple(producer.node.attributes.get("perm") or ()) != (0, 2, 1):
        return None
    return _symmetric_gram_spec(step, recorded[x], t)


def _symmetric_gram_spec(step: Step, x: np.ndarray, transposed: str) -> Spec:
    """``X @ X^T`` per batch item by ``tensoralg.program.gram_call``: each symmetric pair of rows
    multiplied once, written to both places."""

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        call = program.gram_call(placeholder(ins[0], x.shape, x.dtype), outs[0],
                                str(step.context))
        return one_input_run(call, ins[0], "X")

    spec = Spec(make, [], "kernel")
    spec.unread = frozenset({transposed})
    spec.plan = ("pairwise dot products, each symmetric pair once (X @ X^T per batch item, "
                 "no transposed copy)")
    return spec


__all__ = ["MIN_COLUMNS", "NARROW_DOT_MIN_K", "narrow_dot", "Epilogue", "conv_spec", "gemm_epilogue",
           "gemm_spec", "gram_spec", "layer_of", "layer_run", "matmul_spec"]
