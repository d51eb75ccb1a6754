"""The op functions of the int8 products the quantization passes make
(``passes/quantized.py``): ``Int8MatMul`` and ``Int8Conv`` quantize their float32 input with
a scale and zero point (DynamicQuantizeLinear's, computed at run time, or a QDQ model's
constants) and multiply it by a constant int8 weight on the int8 GEMM
(``program.quantized_layer``, ``program.quantized_conv``), the int32 sums as float32, then
apply the epilogue :func:`tensoralg.onnx.passes.int8_epilogues.int8_epilogues` joined to
them. Their static-plan forms are ``plan/product_steps.quantized_matmul_spec`` and
``quantized_conv_spec``.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from tensoralg import program
from tensoralg.errors import ShapeError
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import OpImpl
from tensoralg.onnx.ops.windows import windows

INT8_OP = "Int8MatMul"     # x quantized with a scale and zero point, times int8 weights
# A fake quantization after the epilogue (passes/int8_epilogues.py): scale, zero, bounds.
FAKE_ATTRIBUTES = ("fake_scale", "fake_zero", "fake_low", "fake_high")


def int8_epilogue(multiplier: np.ndarray | None, bias: np.ndarray | None,
                  attributes: dict[str, Any]) -> Any:
    """The ``program.Int8Epilogue`` of an ``Int8MatMul``/``Int8Conv`` node
    (``passes/int8_epilogues.py``): its multiplier and bias inputs, its ``low``/``high``,
    ``scaled`` and fake quantization attributes."""
    fake = tuple(float(attributes[key]) for key in FAKE_ATTRIBUTES) \
        if "fake_scale" in attributes else None
    return program.Int8Epilogue(multiplier, bias, float(attributes.get("low", -math.inf)),
                                float(attributes.get("high", math.inf)),
                                bool(attributes.get("scaled", 0)), fake)


def _int8_layer(node: NodeContext, weight: np.ndarray, epilogue: Any) -> Any:
    """The node's ``program.quantized_layer``, made once (kept in its kernel set)."""
    layer = node.kernels.layers.get(node.name)
    if layer is None or (layer.k, layer.n) != weight.shape:
        layer = node.kernels.layers[node.name] = program.quantized_layer(weight, epilogue)
    return layer


def int8_matmul(node: NodeContext, x: np.ndarray, scale: np.ndarray, zero: np.ndarray,
                weight: np.ndarray, multiplier: np.ndarray | None = None,
                bias: np.ndarray | None = None, **attributes: Any) -> np.ndarray:
    """The op function of an ``Int8MatMul`` node: ``x`` (float32, ``(..., K)``)
    quantized with ``scale`` and ``zero`` and multiplied by the constant int8 ``weight``
    (K x N) on the int8 GEMM (``program.quantized_layer``), the int32 sums as float32, then
    the epilogue the node absorbed (:func:`int8_epilogues`)."""
    x = np.asarray(x)
    k, n = weight.shape
    if x.dtype != np.float32 or x.ndim < 1 or x.shape[-1] != k:
        raise ShapeError(f"{node}: the input must be float32 with a last axis of {k} (the "
                         f"weight's rows), got {x.dtype} {x.shape}")
    layer = _int8_layer(node, weight, int8_epilogue(multiplier, bias, attributes))
    rows = np.ascontiguousarray(x.reshape(-1, k))
    node.note(layer.describe(rows.shape[0]))
    out = layer(rows, np.ascontiguousarray(scale, np.float32).reshape(()),
                np.ascontiguousarray(zero, np.float32).reshape(()))
    return out.reshape(*x.shape[:-1], n)


CONV_INT8_OP = "Int8Conv"
CONV_ATTRIBUTES = frozenset({"auto_pad", "dilations", "pads", "strides"})


def conv_geometry(node: Any, x_shape: tuple[int, ...], kernel: Sequence[int],
                  attributes: dict[str, Any]) -> Any:
    """The window geometry (``ops/windows.windows``) of an ``Int8Conv`` on an
    input of ``x_shape`` (N, C, H, W)."""
    return windows(node, x_shape[2:], kernel, strides=attributes.get("strides"),
                   dilations=attributes.get("dilations"), pads=attributes.get("pads"),
                   auto_pad=attributes.get("auto_pad", "NOTSET"))


def int8_conv_of(node: Any, weight: np.ndarray, geometry: Any, layers: dict[str, Any],
                 epilogue: Any = None) -> Any:
    """The int8 convolution (``program.quantized_conv``) of an ``Int8Conv`` node,
    made once per node and geometry (kept in ``layers``); None where its horizontal dilation
    is not 1 (such a convolution takes float patch rows and the int8 GEMM)."""
    if geometry.dilations[1] != 1:
        return None
    key = (str(node), "conv", geometry.strides, geometry.dilations, geometry.pads_begin,
           geometry.pads_end)
    if key not in layers:
        layers[key] = program.quantized_conv(weight, geometry.strides, geometry.pads_begin,
                                             geometry.pads_end, geometry.dilations, epilogue)
    return layers[key]


def int8_conv(node: NodeContext, x: np.ndarray, scale: np.ndarray, zero: np.ndarray,
              weight: np.ndarray, multiplier: np.ndarray | None = None,
              bias: np.ndarray | None = None, **attributes: Any) -> np.ndarray:
    """The op function of an ``Int8Conv`` node: the 2-D convolution (group 1) of
    ``x`` (float32 NCHW) quantized with ``scale`` and ``zero`` by the constant shifted int8
    weight (M, C, KH, KW), the int32 sums as float32 NCHW. On ``program.quantized_conv``
    (a uint8 channels-last image, kernel rows read in place, rows transposed into NCHW);
    with a horizontal dilation, the float patch matrix of ``x`` (``program.im2row_call``,
    padding 0.0, which quantizes to the zero point, as ConvInteger pads), the int8 GEMM and a
    transpose."""
    x = np.asarray(x)
    m, c, *kernel = weight.shape
    if x.dtype != np.float32 or x.ndim != 4 or x.shape[1] != c:
        raise ShapeError(f"{node}: the input must be float32 (N, {c}, H, W), got {x.dtype} "
                         f"{x.shape}")
    geometry = conv_geometry(node, x.shape, kernel, attributes)
    n, (oh, ow) = x.shape[0], geometry.out
    x = np.ascontiguousarray(x)
    scale = np.ascontiguousarray(scale, np.float32).reshape(())
    zero = np.ascontiguousarray(zero, np.float32).reshape(())
    epilogue = int8_epilogue(multiplier, bias, attributes)
    conv = int8_conv_of(node, weight, geometry, node.kernels.layers, epilogue)
    if conv is not None:
        node.note(conv.describe(n * oh * ow))
        return conv(x, scale, zero)
    product = np.zeros((n * oh * ow, m), np.float32)
    if product.size:
        patches = np.empty((n * oh * ow, c * math.prod(kernel)), np.float32)
        if patches.size:       # no channels: empty sums, which the epilogue still sees
            im2row = program.im2row_call(x, tuple(kernel), geometry.strides,
                                         geometry.dilations, geometry.pads_begin, (oh, ow),
                                         patches, str(node))
            assert im2row is not None      # float32, 4-D, C-contiguous, not empty
            im2row()
        layer = _int8_layer(node, np.ascontiguousarray(weight.reshape(m, -1).T), epilogue)
        node.note(f"float patch rows, then {layer.describe(patches.shape[0])}")
        product = layer(patches, scale, zero)
    return np.ascontiguousarray(product.reshape(n, oh * ow, m).transpose(0, 2, 1)).reshape(
        n, m, oh, ow)


EPILOGUE_ATTRIBUTES = frozenset({"low", "high", "scaled", *FAKE_ATTRIBUTES})
INT8_IMPL = OpImpl(INT8_OP, 1, int8_matmul, None, EPILOGUE_ATTRIBUTES)
CONV_INT8_IMPL = OpImpl(CONV_INT8_OP, 1, int8_conv, None, CONV_ATTRIBUTES | EPILOGUE_ATTRIBUTES)


__all__ = ["CONV_ATTRIBUTES", "CONV_INT8_IMPL", "CONV_INT8_OP", "INT8_IMPL", "INT8_OP",
           "conv_geometry", "int8_conv", "int8_conv_of", "int8_epilogue", "int8_matmul"]
