"""Elementwise ONNX ops with NumPy broadcasting, each one tensoralg statement.

Ops that the statement language has no function for are written with the functions it has:
LeakyRelu and Clip and HardSigmoid with ``max``/``min`` (which keep NaN, as onnxruntime does),
Reciprocal as ``1 / x``, Softplus as ``max(x, 0) + log(1 + exp(-|x|))`` (never overflows),
Where as the select ``where(c, a, b)``, Erf with the rational approximation 7.1.26 of
Abramowitz & Stegun (absolute error below 1.5e-7), Mish as ``x tanh(softplus(x))``, and the
logical ops on bools as int32 arithmetic (And ``a * b``, Or ``max(a, b)``, Xor ``ne(a, b)``).

Mod and the bitwise ops (BitwiseAnd/Or/Xor/Not, BitShift) run in NumPy. The statement
language has no integer division or bit operations, and ``a - b * floor(a / b)`` in floats
would not be exact (C's ``fmod`` is), so Mod is NumPy's ``fmod``/``mod``, which are
onnxruntime's semantics.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import (
    NodeContext,
    broadcast_shape,
    compute_dtype,
    elementwise,
    literal,
    minus,
    negate,
)
from tensoralg.onnx.ops.registry import op
from tensoralg.program import erf_text


def _unary(template: str, needs_float: bool = False) -> Any:
    def run(node: NodeContext, x: np.ndarray) -> np.ndarray:
        return elementwise(node, template, x, dtype=compute_dtype(x.dtype, needs_float))
    return run


def _binary(template: str, needs_float: bool = False) -> Any:
    def run(node: NodeContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = compute_dtype(np.result_type(a.dtype, b.dtype), needs_float)
        return elementwise(node, template, a, b, dtype=dtype, out_dtype=a.dtype)
    return run


def _comparison(template: str) -> Any:
    def run(node: NodeContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = compute_dtype(np.result_type(a.dtype, b.dtype))
        return elementwise(node, template, a, b, dtype=dtype, out_dtype=np.bool_)
    return run


for _name, _template, _float in [
    ("Abs", "abs({0})", False), ("Neg", negate("{0}"), False), ("Relu", "max({0}, 0)", False),
    ("Sigmoid", "sigmoid({0})", True), ("Tanh", "tanh({0})", True), ("Exp", "exp({0})", True),
    ("Log", "log({0})", True), ("Sqrt", "sqrt({0})", True), ("Reciprocal", "1 / {0}", True),
    ("Sin", "sin({0})", True), ("Cos", "cos({0})", True),
]:
    op(_name, since=6)(_unary(_template, _float))


def _rounding(name: str) -> Any:
    """Floor, Ceil, Round (half to even, as ONNX's Round): floats only, as ONNX's type
    constraints say (an integer would come back unchanged)."""
    def run(node: NodeContext, x: np.ndarray) -> np.ndarray:
        if x.dtype.kind != "f":
            raise ta.UnsupportedError(f"{node}: {name.capitalize()} takes float tensors, not "
                                      f"{x.dtype}")
        return elementwise(node, f"{name}({{0}})", x, dtype=compute_dtype(x.dtype))
    return run


op("Floor", since=6)(_rounding("floor"))
op("Ceil", since=6)(_rounding("ceil"))
op("Round", since=11)(_rounding("round"))
# log(1 + exp(x)) written so that exp never overflows: max(x, 0) + log(1 + exp(-|x|)).
SOFTPLUS = "max({0}, 0) + log(1 + exp(-abs({0})))"
op("Softplus", since=1)(_unary(SOFTPLUS, True))

op("Add", since=7)(_binary("{0} + {1}"))
op("Sub", since=7)(_binary(minus("{0}", "{1}")))
op("Mul", since=7)(_binary("{0} * {1}"))
for _name, _template in [("Greater", "gt({0}, {1})"), ("Less", "lt({0}, {1})"),
                         ("Equal", "eq({0}, {1})"), ("GreaterOrEqual", "ge({0}, {1})"),
                         ("LessOrEqual", "le({0}, {1})")]:
    op(_name, since=7)(_comparison(_template))


@op("Div", since=7)
def div(node: NodeContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float division, or integer division truncated toward zero (computed in float64)."""
    dtype = compute_dtype(np.result_type(a.dtype, b.dtype), needs_float=True)
    return elementwise(node, "{0} / {1}", a, b, dtype=dtype, out_dtype=a.dtype)


@op("Pow", since=7)
def pow_(node: NodeContext, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x ** y`` in the dtype of ``x`` (integers computed in float64 and truncated)."""
    dtype = compute_dtype(np.result_type(x.dtype, y.dtype), needs_float=True)
    if x.dtype == np.float32 and y.dtype.kind != "f":
        dtype = np.dtype(np.float32)
    return elementwise(node, "pow({0}, {1})", x, y, dtype=dtype, out_dtype=x.dtype)


@op("LeakyRelu", since=6)
def leaky_relu(node: NodeContext, x: np.ndarray, *, alpha: float = 0.01) -> np.ndarray:
    a = literal(alpha)
    return elementwise(node, f"max({{0}}, 0) + {a} * min({{0}}, 0)", x,
                       dtype=compute_dtype(x.dtype, True))


SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875  # ONNX's float32
HARD_SWISH = "{0} * max(0, min(1, {0} / 6 + 0.5))"


def elu_template(alpha: float) -> str:
    """Elu's statement text in ``{0}``: ``x`` above 0, ``alpha (exp(x) - 1)`` elsewhere (a
    select: no overflow from the branch not taken)."""
    return f"where(gt({{0}}, 0), {{0}}, {literal(alpha)} * (exp({{0}}) - 1))"


def selu_template(alpha: float, gamma: float) -> str:
    """Selu's statement text in ``{0}``: ``gamma`` times Elu with ``alpha``."""
    return f"{literal(gamma)} * {elu_template(alpha)}"


@op("Elu", since=6)
def elu(node: NodeContext, x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    return elementwise(node, elu_template(alpha), x, dtype=compute_dtype(x.dtype, True))


@op("Selu", since=6)
def selu(node: NodeContext, x: np.ndarray, *, alpha: float = SELU_ALPHA,
         gamma: float = SELU_GAMMA) -> np.ndarray:
    return elementwise(node, selu_template(alpha, gamma), x,
                       dtype=compute_dtype(x.dtype, True))


@op("HardSwish", since=14)
def hard_swish(node: NodeContext, x: np.ndarray) -> np.ndarray:
    return elementwise(node, HARD_SWISH, x, dtype=compute_dtype(x.dtype, True))


@op("HardSigmoid", since=6)
def hard_sigmoid(node: NodeContext, x: np.ndarray, *, alpha: float = 0.2,
                 beta: float = 0.5) -> np.ndarray:
    template = f"max(0, min(1, {literal(alpha)} * {{0}} + {literal(beta)}))"
    return elementwise(node, template, x, dtype=compute_dtype(x.dtype, True))


@op("Clip", since=11)
def clip(node: NodeContext, x: np.ndarray, low: np.ndarray | None = None,
         high: np.ndarray | None = None) -> np.ndarray:
    """``min(max(x, low), high)``; a missing bound is left out of the statement."""
    operands = [x]
    template = "{0}"
    if low is not None:
        operands.append(np.asarray(low, dtype=x.dtype))
        template = f"max({template}, {{{len(operands) - 1}}})"
    if high is not None:
        operands.append(np.asarray(high, dtype=x.dtype))
        template = f"min({template}, {{{len(operands) - 1}}})"
    return elementwise(node, template, *operands, dtype=compute_dtype(x.dtype))


@op("Not", since=1)
def not_(node: NodeContext, x: np.ndarray) -> np.ndarray:
    """Logical not of a bool tensor, as the comparison ``eq(x, 0)`` (computed in int32)."""
    return elementwise(node, "eq({0}, 0)", x.astype(np.int32), dtype=np.dtype(np.int32),
                       out_dtype=np.bool_)


def _logical(template: str) -> Any:
    """A binary op on bool tensors: ``template`` on their int32 copies, cast back to bool
    (the core computes in int32, not in bool)."""
    def run(node: NodeContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return elementwise(node, template, a.astype(np.int32), b.astype(np.int32),
                           dtype=np.dtype(np.int32), out_dtype=np.bool_)
    return run


op("And", since=7)(_logical("{0} * {1}"))
op("Or", since=7)(_logical("max({0}, {1})"))
op("Xor", since=7)(_logical("ne({0}, {1})"))


def _bitwise(name: str, function: Any) -> Any:
    """A bitwise op on integer tensors, in NumPy: the statement language has no bit
    operations (its kernels compute in float and wide integers), and NumPy's are onnxruntime's
    semantics for every integer width."""
    def run(node: NodeContext, *operands: np.ndarray) -> np.ndarray:
        if any(a.dtype.kind not in "iu" for a in operands):
            raise ta.UnsupportedError(f"{node}: {name} takes integer tensors, not "
                                      f"{', '.join(str(a.dtype) for a in operands)}")
        if len(operands) == 2:
            broadcast_shape(node, list(operands))
        node.note(f"numpy {function.__name__} (no bit operations in the statement language)")
        return function(*operands).astype(operands[0].dtype, copy=False)
    return run


for _name, _function in [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                         ("BitwiseXor", np.bitwise_xor), ("BitwiseNot", np.invert)]:
    op(_name, since=18)(_bitwise(_name, _function))


@op("BitShift", since=11)
def bit_shift(node: NodeContext, x: np.ndarray, y: np.ndarray, *, direction: str) -> np.ndarray:
    """``x << y`` or ``x >> y`` (arithmetic for signed ``x``, opset 28), in NumPy; a shift by
    a negative amount or by the width or more gives what the sign alone gives: -1 for a right
    shift of a negative ``x``, else 0."""
    if x.dtype.kind not in "iu" or y.dtype != x.dtype:
        raise ta.UnsupportedError(f"{node}: BitShift takes integers of one type, not {x.dtype} "
                                  f"and {y.dtype}")
    if direction not in ("LEFT", "RIGHT"):
        raise ta.UnsupportedError(f"{node}: BitShift direction must be LEFT or RIGHT, not "
                                  f"{direction!r}")
    broadcast_shape(node, [x, y])
    node.note("numpy shift (no bit operations in the statement language)")
    width = x.dtype.itemsize * 8
    outside = (y < 0) | (y >= width)
    amount = np.where(outside, 0, y).astype(x.dtype)
    if direction == "LEFT":
        return np.where(outside, np.zeros((), x.dtype), np.left_shift(x, amount)).astype(
            x.dtype, copy=False)
    sign_only = np.where(x < 0, np.array(-1).astype(x.dtype), np.zeros((), x.dtype)) \
        if x.dtype.kind == "i" else np.zeros((), x.dtype)
    return np.where(outside, sign_only, np.right_shift(x, amount)).astype(x.dtype, copy=False)


@op("Mod", since=10)
def mod(node: NodeContext, a: np.ndarray, b: np.ndarray, *, fmod: int = 0) -> np.ndarray:
    """``a mod b``: with ``fmod=1`` C's ``fmod`` (the sign of ``a``), with ``fmod=0`` the
    floored modulo of Python (the sign of ``b``); NumPy, see the module docstring. A zero
    divisor gives 0 for integers (NumPy's answer; ONNX leaves it undefined), NaN for floats."""
    if fmod not in (0, 1):
        raise ta.UnsupportedError(f"{node}: fmod must be 0 or 1, not {fmod}")
    broadcast_shape(node, (a, b))
    node.note(f"numpy {'fmod' if fmod else 'mod'} (no truncation in the statement language)")
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.fmod(a, b) if fmod else np.mod(a, b)
    return result.astype(a.dtype, copy=False)


@op("IsNaN", since=9)
def is_nan(node: NodeContext, x: np.ndarray) -> np.ndarray:
    """``ne(x, x)``: true only for NaN, the one value unequal to itself (GPT-2's attention
    guards its softmax with it)."""
    return elementwise(node, "ne({0}, {0})", x, dtype=compute_dtype(x.dtype, True),
                       out_dtype=np.bool_)


@op("IsInf", since=10)
def is_inf(node: NodeContext, x: np.ndarray, *, detect_negative: int = 1,
           detect_positive: int = 1) -> np.ndarray:
    """``x`` beyond the largest finite value of its dtype, on the sides asked for."""
    dtype = compute_dtype(x.dtype, True)
    big = literal(float(np.finfo(dtype).max))
    sides = ([f"gt({{0}}, {big})"] if detect_positive else []) + \
        ([f"lt({{0}}, {negate(big)})"] if detect_negative else [])
    if not sides:
        return np.zeros(x.shape, np.bool_)
    return elementwise(node, " + ".join(sides), x, dtype=dtype, out_dtype=np.bool_)


# x tanh(softplus(x)), with softplus written as for Softplus so that exp never overflows.
MISH = f"{{0}} * tanh({SOFTPLUS})"
op("Mish", since=18)(_unary(MISH, True))


@op("Where", since=9)
def where(node: NodeContext, condition: np.ndarray, a: np.ndarray, b: np.ndarray
          ) -> np.ndarray:
    """``where(c, a, b)``: a select, so the branch not taken never reaches the result."""
    dtype = compute_dtype(np.result_type(a.dtype, b.dtype))
    c = condition.astype(dtype)
    return elementwise(node, "where({0}, {1}, {2})", c, a, b, dtype=dtype, out_dtype=a.dtype)


def erf_template(x: str) -> str:
    """A statement expression for erf(x) in terms of ``x`` (absolute error < 1.5e-7): Abramowitz
    and Stegun 7.1.26, the formula a GELU fused into a kernel evaluates too
    (``tensoralg.program.erf_text``)."""
    return erf_text(x)


@op("Erf", since=9)
def erf(node: NodeContext, x: np.ndarray) -> np.ndarray:
    return elementwise(node, erf_template, x, dtype=compute_dtype(x.dtype, True))


@op("Gelu", since=20)
def gelu(node: NodeContext, x: np.ndarray, *, approximate: str = "none") -> np.ndarray:
    """``x/2 (1 + erf(x/sqrt 2))``, or the tanh form when ``approximate="tanh"``."""
    if approximate == "tanh":
        def template(a: str) -> str:
            return f"0.5 * {a} * (1 + tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} * {a})))"
    elif approximate == "none":
        def template(a: str) -> str:
            return f"0.5 * {a} * (1 + {erf_template(f'({a} * 0.7071067811865476)')})"
    else:
        raise ta.UnsupportedError(f"{node}: Gelu approximate={approximate!r} is not defined")
    return elementwise(node, template, x, dtype=compute_dtype(x.dtype, True))


@op("PRelu", since=9)
def prelu(node: NodeContext, x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """``x`` where ``x >= 0``, ``slope * x`` elsewhere (``slope`` broadcast to ``x``)."""
    if np.broadcast_shapes(x.shape, slope.shape) != x.shape:
        raise ta.ShapeError(f"{node}: slope {slope.shape} does not broadcast to {x.shape}")
    dtype = compute_dtype(np.result_type(x.dtype, slope.dtype))
    return elementwise(node, "where(lt({0}, 0), {1} * {0}, {0})", x, slope, dtype=dtype)


@op("Celu", since=12)
def celu(node: NodeContext, x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise ta.ShapeError(f"{node}: alpha must not be 0 (x / alpha)")
    a = literal(alpha)
    return elementwise(node, f"max({{0}}, 0) + min(0, {a} * (exp({{0}} / {a}) - 1))", x,
                       dtype=compute_dtype(x.dtype, True))


op("Softsign", since=1)(_unary("{0} / (1 + abs({0}))", True))
# NaN stays NaN (ne(x, x)); otherwise gt - lt is 1, 0 or -1.
op("Sign", since=9)(_unary(f"where(ne({{0}}, {{0}}), {{0}}, {minus('gt({0}, 0)', 'lt({0}, 0)')})"))
op("Tan", since=7)(_unary("sin({0}) / cos({0})", True))


@op("ThresholdedRelu", since=10)
def thresholded_relu(node: NodeContext, x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """``x`` where ``x > alpha``, else 0."""
    return elementwise(node, f"where(gt({{0}}, {literal(alpha)}), {{0}}, 0)", x,
                       dtype=compute_dtype(x.dtype, True))


@op("Shrink", since=9)
def shrink(node: NodeContext, x: np.ndarray, *, bias: float = 0.0, lambd: float = 0.5
           ) -> np.ndarray:
    """``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, 0 between."""
    b, lam = literal(bias), literal(lambd)
    template = (f"where(lt({{0}}, {negate(lam)}), {{0}} + {b}, "
                f"where(gt({{0}}, {lam}), {minus('{0}', b)}, 0))")
    return elementwise(node, template, x, dtype=compute_dtype(x.dtype, True))


@op("Swish", since=24)
def swish(node: NodeContext, x: np.ndarray, *, alpha: float = 1.0) -> np.ndarray:
    """``x sigmoid(alpha x)`` (SiLU for ``alpha = 1``)."""
    return elementwise(node, f"{{0}} * sigmoid({literal(alpha)} * {{0}})", x,
                       dtype=compute_dtype(x.dtype, True))
