"""Activations a generated kernel applies to its results in registers, before it stores them.

A convolution or dense layer followed by an activation would otherwise write its output, and
a second kernel would read it back, apply the function and write it again: for
EfficientNet-B0 at batch 8 the separate ``x * sigmoid(x)`` passes were a third of the model's
time (82 of 244 ms), all of it memory traffic on activations that had just been in registers.

:class:`~tensoralg.codegen.epilogue.Activation` (``codegen/epilogue.py``) is the one
description every kernel takes. Kernels compiled per layer emit the
function inline (:func:`emit_activation`); the modules one dtype shares across layers (the
generated GEMM, the planar convolution) select it at run time from flag bits
(:func:`epilogue_flags`) and apply the smooth ones through one internal loop per module
(:func:`activation_function`), so that the code is not copied into every register-tile
variant.

Numerics follow the unfused graph: the float32 sigmoid is the rational function onnxruntime
evaluates (:func:`_sigmoid`), float64 ``1 / (1 + exp(-x))``, SiLU is ``x * sigmoid(x)``,
``HardSigmoid`` is ``max(0, min(1, alpha * x + beta))`` and ``HardSwish`` ``x * HardSigmoid``
with ONNX's ``alpha = 1/6, beta = 1/2``, GELU ``x/2 (1 + erf(x / sqrt 2))`` with the
importer's erf (:data:`~tensoralg.codegen.epilogue.ERF_A`); NaN propagates through every one.
"""
from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from tensoralg.codegen.epilogue import (
    ANY_SMOOTH,
    ERF_A,
    ERF_P,
    HARD_SWISH,
    SMOOTH_FLAGS,
    Activation,
    as_activation,
)
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca, if_then, splat

I32, I64 = ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_activate"


def emit_clamp(builder: ir.IRBuilder, value: ir.Value, low: ir.Value | None,
               high: ir.Value | None) -> ir.Value:
    """``min(max(value, low), high)`` with NaN kept (onnxruntime's Clip and NumPy's
    maximum keep it); a None bound is no clamp on that side."""
    if low is not None:
        value = builder.select(builder.fcmp_unordered(">", value, low), value, low)
    if high is not None:
        value = builder.select(builder.fcmp_unordered("<", value, high), value, high)
    return value


def _splat(value: ir.Value | float, like: ir.Type, builder: ir.IRBuilder) -> ir.Value:
    """``value`` (a Python float or a scalar IR value) as ``like`` (a scalar or vector type)."""
    if not isinstance(like, ir.VectorType):
        return ir.Constant(like, value) if isinstance(value, float) else value
    if isinstance(value, float):
        return ir.Constant(like, [value] * like.count)
    return splat(builder, value, like)


def _exp(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """``exp`` in registers: the inline float32 polynomial (``llvm.exp`` on a vector is a libm
    call per lane), ``llvm.exp`` for float64."""
    from tensoralg.codegen.softmax import scalar_expf, vector_expf

    kind = value.type
    element = kind.element if isinstance(kind, ir.VectorType) else kind
    if isinstance(element, ir.FloatType):
        return vector_expf(builder, value, kind.count) if isinstance(kind, ir.VectorType) \
            else scalar_expf(builder, value)
    suffix = f"v{kind.count}f64" if isinstance(kind, ir.VectorType) else "f64"
    return builder.call(declare(builder.module, f"llvm.exp.{suffix}", kind, (kind,)), [value])


# The rational approximation of the logistic function on [-18, 18] that Eigen publishes (and
# onnxruntime's MLAS evaluates): odd numerator, even denominator, in powers of x^2.
LOGISTIC_RANGE = 18.0
LOGISTIC_NUMERATOR = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                      8.51377133304701e-03, 2.48287947061529e-01)
LOGISTIC_DENOMINATOR = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                        1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)


def _sigmoid(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """``1 / (1 + exp(-value))``. For float32 a rational function of ``value`` clamped to
    [-18, 18], ``p(x) / q(x) + 1/2`` with the result clamped to [0, 1] (Eigen's coefficients,
    so a fused sigmoid agrees with onnxruntime's to float32 rounding): ten multiply-adds and
    one division, against about twenty operations for an exponential. With the statement
    compiler's exponential a fused SiLU cost EfficientNet-B0 as much as the separate pass it
    replaced. NaN stays NaN; float64 divides by ``1 + exp(-value)``."""
    kind = value.type
    element = kind.element if isinstance(kind, ir.VectorType) else kind
    one = _splat(1.0, kind, builder)
    if not isinstance(element, ir.FloatType):
        return builder.fdiv(one, builder.fadd(one, _exp(builder, builder.fneg(value))))
    suffix = f"v{kind.count}f32" if isinstance(kind, ir.VectorType) else "f32"
    fma = declare(builder.module, f"llvm.fma.{suffix}", kind, (kind, kind, kind))

    def c(number: float) -> ir.Value:
        return _splat(number, kind, builder)

    x = emit_clamp(builder, value, c(-LOGISTIC_RANGE), c(LOGISTIC_RANGE))
    square = builder.fmul(x, x)

    def horner(coefficients: tuple[float, ...]) -> ir.Value:
        result = builder.call(fma, [square, c(coefficients[0]), c(coefficients[1])])
        for coefficient in coefficients[2:]:
            result = builder.call(fma, [result, square, c(coefficient)])
        return result

    p = builder.fmul(horner(LOGISTIC_NUMERATOR), x)
    ratio = builder.fadd(builder.fdiv(p, horner(LOGISTIC_DENOMINATOR)), c(0.5))
    # At the clamp the ratio is a few 1e-8 outside [0, 1]: exactly 0 (SiLU(-inf) stays
    # -inf * 0 = NaN, as the unfused graph computes it) and 1 there.
    return emit_clamp(builder, ratio, c(0.0), one)


def _erf(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """erf(x) as the importer's statements compute it (``codegen.epilogue.erf_text``): the
    sign of x (0 for 0 and NaN, so NaN stays NaN) times ``1 - t p(t) exp(-x^2)``."""
    kind = x.type
    one, zero = _splat(1.0, kind, builder), _splat(0.0, kind, builder)
    magnitude = builder.select(builder.fcmp_ordered("<", x, zero), builder.fneg(x), x)
    t = builder.fdiv(one, builder.fadd(one, builder.fmul(_splat(ERF_P, kind, builder),
                                                         magnitude)))
    poly = _splat(ERF_A[-1], kind, builder)
    for coefficient in reversed(ERF_A[:-1]):
        poly = builder.fadd(_splat(coefficient, kind, builder), builder.fmul(t, poly))
    tail = builder.fmul(builder.fmul(t, poly), _exp(builder, builder.fneg(builder.fmul(x, x))))
    sign = builder.fsub(builder.select(builder.fcmp_ordered(">", x, zero), one, zero),
                        builder.select(builder.fcmp_ordered("<", x, zero), one, zero))
    return builder.fmul(sign, builder.fsub(one, tail))


def emit_activation(builder: ir.IRBuilder, value: ir.Value, relu: Any,
                    alpha: ir.Value | None = None, beta: ir.Value | None = None) -> ir.Value:
    """``value`` (a float or vector of floats) under the activation ``relu`` (as
    :func:`as_activation` takes it), in registers. ``alpha`` and ``beta`` replace the
    activation's own (a shared module reads them at run time)."""
    activation = as_activation(relu)
    if activation is None:
        return value
    kind = value.type
    if activation.kind in ("Relu", "Clip"):
        low, high = (None if bound == unbounded else _splat(bound, kind, builder)
                     for bound, unbounded in zip(activation.bounds, (-math.inf, math.inf)))
        return emit_clamp(builder, value, low, high)
    if activation.kind in ("Sigmoid", "Silu"):
        sigmoid = _sigmoid(builder, value)
        return sigmoid if activation.kind == "Sigmoid" else builder.fmul(value, sigmoid)
    if activation.kind == "Gelu":
        half = _splat(0.5, kind, builder)
        erf = _erf(builder, builder.fmul(value, _splat(math.sqrt(0.5), kind, builder)))
        return builder.fmul(builder.fmul(half, value),
                            builder.fadd(_splat(1.0, kind, builder), erf))
    one = _splat(1.0, kind, builder)
    slope = _splat(activation.alpha if alpha is None else alpha, kind, builder)
    offset = _splat(activation.beta if beta is None else beta, kind, builder)
    hard = emit_clamp(builder, builder.fadd(builder.fmul(value, slope), offset),
                      None, one)
    hard = emit_clamp(builder, hard, _splat(0.0, kind, builder), None)
    return hard if activation.kind == "HardSigmoid" else builder.fmul(value, hard)


def activation_function(module: ir.Module, vector: ir.VectorType) -> ir.Function:
    """The module's internal ``void tensoralg_activate(ptr values, i64 count, i32 flags,
    ptr params)``: the smooth activation ``flags`` selects (:data:`SMOOTH_FLAGS`; none
    leaves the values as they are) applied in place to ``count`` vectors; ``params`` are the
    :data:`PARAMETERS` values (alpha and beta at 2 and 3). Built once per module, so the
    register-tile variants share one copy of the code."""
    found = module.globals.get(ENTRY)
    if found is not None:
        return found
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), (POINTER, I64, I32, POINTER)),
                     name=ENTRY)
    fn.linkage = "internal"
    # Called once per register tile's epilogue: inlined into every tile variant it doubled
    # the GEMM module's code and added half to its compile time, for no speed.
    fn.attributes.add("noinline")
    values, count, flags, params = fn.args
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scalar = vector.element
    alpha, beta = (builder.load(builder.gep(params, [ir.Constant(I64, i)], inbounds=True,
                                            source_etype=scalar), typ=scalar) for i in (2, 3))
    index = entry_alloca(builder, I64, "i")
    for kind, bit in SMOOTH_FLAGS.items():
        chosen = builder.icmp_unsigned("!=", builder.and_(flags, ir.Constant(I32, bit)),
                                       ir.Constant(I32, 0))
        with if_then(builder, chosen, kind):
            with counted_loop(builder, index, ir.Constant(I64, 0), lambda: count, kind):
                where = builder.gep(values, [builder.load(index, typ=I64)], inbounds=True,
                                    source_etype=vector)
                value = builder.load(where, typ=vector)
                activation = HARD_SWISH if kind == "HardSwish" else \
                    Activation.hard_sigmoid(0.2, 0.5) if kind == "HardSigmoid" else \
                    Activation(kind)
                builder.store(emit_activation(builder, value, activation, alpha, beta), where)
    builder.ret_void()
    return fn


def apply_to_tile(builder: ir.IRBuilder, slots: list[ir.Value], vector: ir.VectorType,
                  flags: ir.Value, params: ir.Value) -> None:
    """Apply the smooth activation ``flags`` selects (if any) to the register tile held in
    ``slots`` (stack slots of ``vector``): the tile goes through a stack buffer to the
    module's :func:`activation_function` and back."""
    smooth = builder.icmp_unsigned("!=", builder.and_(flags, ir.Constant(I32, ANY_SMOOTH)),
                                   ir.Constant(I32, 0))
    function = activation_function(builder.module, vector)
    buffer = entry_alloca(builder, ir.ArrayType(vector, len(slots)), "activated")
    with if_then(builder, smooth, "smooth"):
        cells = [builder.gep(buffer, [ir.Constant(I64, 0), ir.Constant(I64, i)], inbounds=True)
                 for i in range(len(slots))]
        for slot, cell in zip(slots, cells):
            builder.store(builder.load(slot, typ=vector), cell)
        builder.call(function, [builder.bitcast(buffer, POINTER),
                                ir.Constant(I64, len(slots)), flags, params])
        for slot, cell in zip(slots, cells):
            builder.store(builder.load(cell, typ=vector), slot)


__all__ = ["activation_function", "apply_to_tile", "emit_activation", "emit_clamp"]
