"""Linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the integer
products MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, as onnxruntime computes them.

These are what onnxruntime's quantizer writes: ``quantize_static`` puts QuantizeLinear ->
DequantizeLinear pairs around every Conv/MatMul (QDQ), ``quantize_dynamic`` replaces a MatMul by
DynamicQuantizeLinear + MatMulInteger + a float rescale, and older tools write QLinearConv and
QLinearMatMul.

- **Quantize**: ``y = saturate(round(x / scale) + zero_point)``, round half to even, computed in
  float32 as one statement ``where(ge(v, lo), min(v, hi), lo)`` with ``v = round(X / S) + Z``:
  NaN and -inf give the lowest value and +inf the highest, as onnxruntime's clamp-then-convert
  does. **Dequantize**: ``(x - zero_point) * scale``. Scales and zero points are scalars (per
  tensor), 1-D along ``axis`` (per channel), or blocked along ``axis`` (``block_size``, opset
  21), each broadcast as an operand of the statement.
- **Integer products** run as float products that are *exact*: the operands shifted by their
  zero points are integers of magnitude 255 at most, so every partial sum of a K-term dot product is
  an integer no larger than ``K * max|a| * max|b|``. Below 2^24 float32 holds all of them
  exactly (whatever order BLAS or a kernel sums in); otherwise the product runs in float64
  (exact to 2^53). The product then goes through MatMul's and Conv's own routes (a generated
  kernel, or BLAS when it pays: a visible dispatch in the node's plan), and the result is the
  int32 sum itself. QLinear* requantize it as onnxruntime does: ``float32(acc) * (a_scale *
  b_scale / y_scale)``, rounded half to even, plus the zero point, saturated.

Only 8- and 16-bit integer types are quantized here (and int32 dequantized); float8, 4- and
2-bit types are refused with ``UnsupportedError`` naming the node and the type.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import onnx

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.conv import conv
from tensoralg.onnx.ops.kernels import NodeContext, elementwise, literal
from tensoralg.onnx.ops.matmul import matmul
from tensoralg.onnx.ops.registry import op

RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
          np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767)}
# Every partial sum of an exact float32 product stays below this (float32's 24-bit mantissa).
EXACT_FLOAT32 = 2 ** 24


def quantized_range(node: NodeContext, dtype: Any) -> tuple[int, int]:
    """The saturation bounds of a quantized type.

    >>> quantized_range(None, np.int8)
    (-128, 127)
    """
    dtype = np.dtype(dtype)
    if dtype not in RANGES:
        raise ta.UnsupportedError(f"{node}: quantized type {dtype} is not supported (int8, "
                                  f"uint8, int16 and uint16 are)")
    return RANGES[dtype]


def _output_type(node: NodeContext, zero_point: np.ndarray | None, output_dtype: int) -> np.dtype:
    if zero_point is not None:
        return zero_point.dtype
    if output_dtype:
        try:
            return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(output_dtype))
        except (KeyError, TypeError):
            raise ta.UnsupportedError(f"{node}: output_dtype {output_dtype} is not a type "
                                      f"tensoralg quantizes to") from None
    return np.dtype(np.uint8)


def along(node: NodeContext, name: str, param: np.ndarray, shape: Sequence[int], axis: int,
          block_size: int = 0) -> np.ndarray:
    """A scale or zero point as an operand that broadcasts against ``shape``: a scalar (per
    tensor), a 1-D tensor along ``axis`` (per channel) or, with ``block_size``, a tensor of the
    input's rank whose ``axis`` holds one value per block (repeated over its block).

    >>> along(None, "scale", np.array([1.0, 2.0]), (3, 2, 4), axis=1).shape
    (1, 2, 1)
    """
    rank = len(shape)
    if param.size == 1 and param.ndim <= 1 and not block_size:
        return param.reshape(())
    if not -rank <= axis < rank:
        raise ta.ShapeError(f"{node}: axis {axis} is outside rank {rank}")
    axis %= rank
    if block_size:
        blocks = math.ceil(shape[axis] / block_size)
        expected = tuple(blocks if d == axis else s for d, s in enumerate(shape))
        if param.shape != expected:
            raise ta.ShapeError(f"{node}: blocked {name} has shape {param.shape}; with "
                                f"block_size {block_size} along axis {axis} of {tuple(shape)} it "
                                f"must be {expected}")
        return np.take(param, np.arange(shape[axis]) // block_size, axis=axis)
    if param.ndim != 1 or param.shape[0] != shape[axis]:
        raise ta.ShapeError(f"{node}: {name} has shape {param.shape}; it must be a scalar or 1-D "
                            f"of length {shape[axis]} (axis {axis} of {tuple(shape)})")
    return param.reshape([shape[axis] if d == axis else 1 for d in range(rank)])


def saturated(value: str, low: int, high: int) -> str:
    """Statement text clamping ``value`` (already integral) to [low, high]; NaN gives ``low``.

    >>> saturated("v", 0, 255)
    'where(ge(v, 0), min(v, 255), 0)'
    """
    return f"where(ge({value}, {literal(low)}), min({value}, {literal(high)}), {literal(low)})"


def quantize(node: NodeContext, x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
             out_type: np.dtype, *, multiply: bool = False) -> np.ndarray:
    """``saturate(round(x / scale) + zero_point)`` in float32 (``x * scale`` with
    ``multiply``), as ``out_type``; ``scale`` and ``zero_point`` already broadcast."""
    low, high = quantized_range(node, out_type)
    step = "{0} * {1}" if multiply else "{0} / {1}"
    operands = [x, scale.astype(np.float32, copy=False)]
    shifted = f"round({step})"
    if zero_point is not None and np.any(zero_point):
        operands.append(zero_point)
        shifted += " + {2}"
    return elementwise(node, saturated(shifted, low, high), *operands,
                       dtype=np.dtype(np.float32), out_dtype=out_type)


def _float_type(scale: np.ndarray) -> np.dtype:
    return scale.dtype if scale.dtype == np.float64 else np.dtype(np.float32)


@op("QuantizeLinear", since=10)
def quantize_linear(node: NodeContext, x: np.ndarray, y_scale: np.ndarray,
                    y_zero_point: np.ndarray | None = None, *, axis: int = 1,
                    block_size: int = 0, output_dtype: int = 0, saturate: int = 1,
                    precision: int = 0) -> np.ndarray:
    """``y = saturate(round(x / y_scale) + y_zero_point)``, per tensor, axis or block."""
    out_type = _output_type(node, y_zero_point, output_dtype)
    quantized_range(node, out_type)
    if x.dtype.kind not in "fi":
        raise ta.UnsupportedError(f"{node}: QuantizeLinear takes float or int32 x, not {x.dtype}")
    scale = along(node, "y_scale", y_scale, x.shape, axis, block_size)
    zero = (None if y_zero_point is None else
            along(node, "y_zero_point", y_zero_point, x.shape, axis, block_size))
    return quantize(node, x, scale, zero, out_type)


@op("DequantizeLinear", since=10)
def dequantize_linear(node: NodeContext, x: np.ndarray, x_scale: np.ndarray,
                      x_zero_point: np.ndarray | None = None, *, axis: int = 1,
                      block_size: int = 0, output_dtype: int = 0) -> np.ndarray:
    """``y = (x - x_zero_point) * x_scale``, in the scale's type (or ``output_dtype``)."""
    if x.dtype not in RANGES and x.dtype != np.int32:
        raise ta.UnsupportedError(f"{node}: DequantizeLinear of {x.dtype} is not supported "
                                  f"(int8, uint8, int16, uint16 and int32 are)")
    out_type = (np.dtype(onnx.helper.tensor_dtype_to_np_dtype(output_dtype)) if output_dtype
                else x_scale.dtype)
    scale = along(node, "x_scale", x_scale, x.shape, axis, block_size)
    operands, text = [x, scale], "{0} * {1}"
    if x_zero_point is not None and np.any(x_zero_point):
        if x_zero_point.dtype != x.dtype:
            raise ta.ShapeError(f"{node}: x_zero_point is {x_zero_point.dtype}, x is {x.dtype}; "
                                f"they must have one type")
        operands.append(along(node, "x_zero_point", x_zero_point, x.shape, axis, block_size))
        text = "({0} - {2}) * {1}"
    return elementwise(node, text, *operands, dtype=_float_type(x_scale), out_dtype=out_type)


def dynamic_parameters(node: NodeContext, x: np.ndarray) -> tuple[np.float32, np.uint8]:
    """DynamicQuantizeLinear's uint8 scale and zero point for ``x``: its range widened to hold
    0, ``scale = (max - min) / 255`` (1 for an all-zero ``x``, as onnxruntime),
    ``zero_point = saturate(round(-min / scale))``; the extremes by one generated pass."""
    if x.dtype != np.float32:
        raise ta.UnsupportedError(f"{node}: DynamicQuantizeLinear takes float32, not {x.dtype}")
    low = high = 0.0
    if x.size:
        extremes = program.value_range(np.ascontiguousarray(x))
        low, high = min(float(extremes[0]), 0.0), max(float(extremes[1]), 0.0)
    if math.isnan(low) or math.isnan(high):
        raise ta.InputError(f"{node}: x holds NaN; its range, and so the scale, is undefined")
    scale = np.float32(1.0) if high == low else np.float32(np.float32(high) - np.float32(low)) \
        / np.float32(255)
    with np.errstate(divide="ignore", invalid="ignore"):
        initial = float(np.float32(0) - np.float32(low) / scale)
    if math.isnan(initial):     # a range below float32's smallest step: 0 / 0
        initial = 0.0
    return scale, np.uint8(round(min(max(initial, 0.0), 255.0)))   # half to even, as rint


@op("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(node: NodeContext, x: np.ndarray
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """uint8 quantization with the scale and zero point of ``x``'s range
    (:func:`dynamic_parameters`)."""
    scale, zero = dynamic_parameters(node, x)
    y = quantize(node, x, np.asarray(scale), np.asarray(zero), np.dtype(np.uint8))
    return y, np.asarray(scale, np.float32), np.asarray(zero, np.uint8)


# --- integer products ---------------------------------------------------------------------


def _shifted(node: NodeContext, x: np.ndarray, zero: np.ndarray | None, name: str
             ) -> tuple[np.ndarray, int]:
    """``x - zero`` as float32 (exact: 17-bit integers at most) and its largest magnitude."""
    if x.dtype not in (np.dtype(np.uint8), np.dtype(np.int8)):
        raise ta.UnsupportedError(f"{node}: {name} is {x.dtype}; integer products take int8 or "
                                  f"uint8")
    if zero is None or not np.any(zero):
        shifted = x.astype(np.float32)
    else:
        if zero.dtype != x.dtype:
            raise ta.ShapeError(f"{node}: the zero point of {name} is {zero.dtype}, {name} is "
                                f"{x.dtype}; they must have one type")
        shifted = elementwise(node, "{0} - {1}", x, zero, dtype=np.dtype(np.float32),
                              out_dtype=np.float32)
    peak = int(np.max(np.abs(shifted))) if shifted.size else 0
    return shifted, peak


def exact_type(node: NodeContext, terms: int, *peaks: int) -> np.dtype:
    """float32 where every partial sum of ``terms`` products of values up to ``peaks`` is an
    integer float32 holds exactly, else float64 (the choice is noted in the node's plan).

    >>> exact_type(None, 768, 127, 127), exact_type(None, 4096, 255, 127)
    (dtype('float32'), dtype('float64'))
    """
    bound = terms * math.prod(peaks)
    dtype = np.dtype(np.float32 if bound < EXACT_FLOAT32 else np.float64)
    if node is not None:
        node.note(f"integer product in {dtype} (exact: partial sums up to {bound})")
    return dtype


def _int32(result: np.ndarray) -> np.ndarray:
    """An exact integral float product as int32, wrapping as 32-bit accumulation does."""
    return result.astype(np.int64).astype(np.int32)


def _matrix_zero(node: NodeContext, zero: np.ndarray | None, operand: np.ndarray, rows: bool,
                 name: str) -> np.ndarray | None:
    """A MatMulInteger/QLinearMatMul zero point (or scale) as a broadcastable operand: a scalar,
    a 1-D per-row (A) or per-column (B) vector, or an N-D tensor as given."""
    if zero is None or zero.size == 1:
        return None if zero is None else zero.reshape(())
    if zero.ndim == 1:
        length = operand.shape[-2] if rows and operand.ndim >= 2 else operand.shape[-1]
        if zero.shape[0] != length:
            raise ta.ShapeError(f"{node}: {name} has {zero.shape[0]} values; per "
                                f"{'row' if rows else 'column'} it needs {length}")
        return zero.reshape(-1, 1) if rows and operand.ndim >= 2 else zero
    return zero


def _integer_matmul(node: NodeContext, a: np.ndarray, b: np.ndarray, a_zero: np.ndarray | None,
                    b_zero: np.ndarray | None) -> np.ndarray:
    """``(a - a_zero) @ (b - b_zero)`` as exact floats (MatMul's own route)."""
    a_shift, a_peak = _shifted(node, a, _matrix_zero(node, a_zero, a, True, "a_zero_point"), "A")
    b_shift, b_peak = _shifted(node, b, _matrix_zero(node, b_zero, b, False, "b_zero_point"), "B")
    dtype = exact_type(node, a.shape[-1], a_peak, b_peak)
    return matmul(node, a_shift.astype(dtype, copy=False), b_shift.astype(dtype, copy=False))


@op("MatMulInteger", since=10)
def matmul_integer(node: NodeContext, a: np.ndarray, b: np.ndarray,
                   a_zero_point: np.ndarray | None = None,
                   b_zero_point: np.ndarray | None = None) -> np.ndarray:
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32, NumPy matmul semantics."""
    return _int32(_integer_matmul(node, a, b, a_zero_point, b_zero_point))


def requantize(node: NodeContext, acc: np.ndarray, multiplier: np.ndarray,
               zero: np.ndarray | None, out_type: np.dtype) -> np.ndarray:
    """``saturate(round(float32(acc) * multiplier) + zero)``: onnxruntime's requantization."""
    return quantize(node, acc, multiplier, zero, out_type, multiply=True)


def _multiplier(*scales: np.ndarray, divide: np.ndarray) -> np.ndarray:
    """``prod(scales) / divide`` in float32, as onnxruntime computes an output scale."""
    product = np.float32(1)
    for scale in scales:
        product = product * scale.astype(np.float32)
    return np.asarray(product / divide.astype(np.float32), np.float32)


@op("QLinearMatMul", since=10)
def qlinear_matmul(node: NodeContext, a: np.ndarray, a_scale: np.ndarray, a_zero_point: np.ndarray,
                   b: np.ndarray, b_scale: np.ndarray, b_zero_point: np.ndarray,
                   y_scale: np.ndarray, y_zero_point: np.ndarray) -> np.ndarray:
    """The quantized product: the exact int32 product of the shifted operands, requantized."""
    out_type = y_zero_point.dtype
    quantized_range(node, out_type)
    acc = _integer_matmul(node, a, b, a_zero_point, b_zero_point)
    multiplier = _multiplier(_matrix_zero(node, a_scale, a, True, "a_scale"),
                             _matrix_zero(node, b_scale, b, False, "b_scale"), divide=y_scale)
    return requantize(node, acc, multiplier, y_zero_point.reshape(()), out_type)


def _integer_conv(node: NodeContext, x: np.ndarray, w: np.ndarray, x_zero: np.ndarray | None,
                  w_zero: np.ndarray | None, bias: np.ndarray | None,
                  attributes: dict[str, Any]) -> np.ndarray:
    """``conv(x - x_zero, w - w_zero) + bias`` as exact floats (Conv's own route); padding
    holds ``x_zero``, which is 0 once shifted."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ta.ShapeError(f"{node}: X {x.shape} and W {w.shape} must both be (N, C, ...)")
    if x_zero is not None and x_zero.size != 1:
        raise ta.ShapeError(f"{node}: x_zero_point must be a scalar, not {x_zero.shape}")
    w_zero = None if w_zero is None else along(node, "w_zero_point", w_zero, w.shape, 0)
    x_shift, x_peak = _shifted(node, x, x_zero, "x")
    w_shift, w_peak = _shifted(node, w, w_zero, "w")
    terms = math.prod(w.shape[1:])
    bias_peak = int(np.max(np.abs(bias.astype(np.int64)))) if bias is not None and bias.size else 0
    dtype = exact_type(node, terms, x_peak, w_peak)
    if bias_peak and dtype == np.float32 and terms * x_peak * w_peak + bias_peak >= EXACT_FLOAT32:
        dtype = np.dtype(np.float64)
    return conv(node, x_shift.astype(dtype, copy=False), w_shift.astype(dtype, copy=False),
                None if bias is None else bias.astype(dtype), **attributes)


def _conv_attributes(auto_pad: str, dilations: Sequence[int] | None, group: int,
                     kernel_shape: Sequence[int] | None, pads: Sequence[int] | None,
                     strides: Sequence[int] | None) -> dict[str, Any]:
    return {"auto_pad": auto_pad, "dilations": dilations, "group": group,
            "kernel_shape": kernel_shape, "pads": pads, "strides": strides}


@op("ConvInteger", since=10)
def conv_integer(node: NodeContext, x: np.ndarray, w: np.ndarray,
                 x_zero_point: np.ndarray | None = None, w_zero_point: np.ndarray | None = None,
                 *, auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None,
                 group: int = 1, kernel_shape: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None, strides: Sequence[int] | None = None
                 ) -> np.ndarray:
    """The int32 convolution of the shifted operands (Conv's attributes)."""
    attributes = _conv_attributes(auto_pad, dilations, group, kernel_shape, pads, strides)
    return _int32(_integer_conv(node, x, w, x_zero_point, w_zero_point, None, attributes))


@op("QLinearConv", since=10)
def qlinear_conv(node: NodeContext, x: np.ndarray, x_scale: np.ndarray, x_zero_point: np.ndarray,
                 w: np.ndarray, w_scale: np.ndarray, w_zero_point: np.ndarray,
                 y_scale: np.ndarray, y_zero_point: np.ndarray, b: np.ndarray | None = None,
                 *, auto_pad: str = "NOTSET", dilations: Sequence[int] | None = None,
                 group: int = 1, kernel_shape: Sequence[int] | None = None,
                 pads: Sequence[int] | None = None, strides: Sequence[int] | None = None
                 ) -> np.ndarray:
    """The quantized convolution: exact int32 accumulation plus the int32 bias, requantized
    with ``x_scale * w_scale / y_scale`` (per output channel when ``w_scale`` is)."""
    out_type = y_zero_point.dtype
    quantized_range(node, out_type)
    if b is not None and b.dtype != np.int32:
        raise ta.ShapeError(f"{node}: the bias B is {b.dtype}; QLinearConv takes an int32 bias")
    attributes = _conv_attributes(auto_pad, dilations, group, kernel_shape, pads, strides)
    acc = _integer_conv(node, x, w, x_zero_point, w_zero_point, b, attributes)
    channel_scale = along(node, "w_scale", w_scale, acc.shape, 1)
    multiplier = _multiplier(x_scale.reshape(()), channel_scale, divide=y_scale.reshape(()))
    return requantize(node, acc, multiplier, y_zero_point.reshape(()), out_type)
