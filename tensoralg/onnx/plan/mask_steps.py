"""Static steps for the mixed-dtype elementwise ops of attention masks: Cast, And, Or, Xor,
Not, Where, Expand and the comparisons (Less, LessOrEqual, Greater, GreaterOrEqual, Equal:
DIN's ``arange(L) < length`` history mask), as one compiled broadcast kernel each (``tensoralg.program.broadcast_call``),
and for a Reshape-like node that writes a graph output (a compiled copy).

The core's kernels compute in one dtype, so these ops run node by node as NumPy casts around
an int32 or float statement, and in a static plan as generic Python steps; a transformer's
mask path (int64 mask -> Cast to bool -> And with the causal matrix -> Expand -> Where to 0 or
-inf) then splits the plan's compiled sequence into pieces with Python between them. As
broadcast kernels (bool, int32, int64, float32, float64; rank 4 at most) they join the
sequence. The kernel converts with C's rules, which are NumPy's for these casts (nonzero is
true, NaN included; an integer narrows by wrapping); a float to integer Cast stays generic
(out-of-range values are undefined in C, not in NumPy).

Integer Add, Sub, Mul and ReduceSum (the jagged offsets of an exported torchrec
``KeyedJaggedTensor``: its feature offsets moved past the features before, lengths as offset
differences, the per-feature sums of lengths) replay the one int statement their recorded run
compiled, prebound (:func:`integer_spec`), for the same reason: a plan captures only float
kernels, so they were generic steps of about 70 us each between pieces of the sequence. The
kernel wraps on overflow, as NumPy does. Float ones are left to the plan's capture.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import Env, Getter, Part, Run, Spec, contiguous, made_of

# Integer ops run as one statement node by node, prebound in a plan (see integer_spec)
INTEGER_OPS = frozenset({"Add", "Sub", "Mul", "ReduceSum"})
_INTEGERS = (np.dtype(np.int32), np.dtype(np.int64))
# ONNX op -> the broadcast kernel's op ("integer": see integer_spec)
MASK_OPS = {"Cast": "cast", "And": "and", "Or": "or", "Xor": "xor", "Not": "not",
            "Where": "where", "Expand": "cast", "Less": "lt", "LessOrEqual": "le",
            "Greater": "gt", "GreaterOrEqual": "ge", "Equal": "eq",
            **{op: "integer" for op in INTEGER_OPS}}
# Reshape-like ops are views in a plan, except when their output is a graph output (which
# has a buffer of its own): then a compiled copy, so that it need not end the sequence.
COPY_OPS = {"Identity": "cast", "Reshape": "cast", "Flatten": "cast", "Squeeze": "cast",
            "Unsqueeze": "cast"}


def mask_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """The static form of a Cast, And, Or, Xor, Not, Where or Expand node as one compiled
    broadcast kernel, or None (a generic step) when its dtypes or ranks do not allow it.
    An Expand's shape must be a constant, so that the recorded output shape stays right.

    >>> from types import SimpleNamespace
    >>> node = SimpleNamespace(op_type="Cast", inputs=("m",), outputs=("c",), attributes={})
    >>> mask_spec(SimpleNamespace(node=node, context="Cast"),
    ...           {"m": np.ones((2, 3), np.int64), "c": np.ones((2, 3), np.bool_)}, {}).kind
    'broadcast kernel'
    """
    node = step.node
    op = MASK_OPS.get(node.op_type) or COPY_OPS.get(node.op_type)
    if op == "integer":
        return integer_spec(step, recorded, constants)
    outputs = [n for n in node.outputs if n]
    if op is None or len(outputs) != 1:
        return None
    names = [n for n in node.inputs if n]
    read = names
    out_value = recorded[outputs[0]]
    flat = node.op_type in COPY_OPS
    if node.op_type == "Expand" or flat:
        # the shape (or axes) input must be fixed, so that the recorded shape stays right
        if not names or any(n not in constants for n in names[1:]) or \
                (node.op_type == "Expand" and len(names) != 2):
            return None
        read = names[:1]
    values = [recorded[n] for n in read]
    if flat:
        # the same values in the same order: a copy of the flat buffer
        if values[0].size != out_value.size or values[0].dtype != out_value.dtype:
            return None
        values = [values[0].reshape(-1)]
    # a trial call on placeholders: None when the dtypes or shapes do not fit the kernel
    probe = [np.zeros(v.shape, v.dtype) for v in values]
    target_shape = (out_value.size,) if flat else out_value.shape
    if not out_value.size or program.broadcast_call(
            op, probe, np.zeros(target_shape, out_value.dtype), "probe") is None:
        return None
    what = str(step.context)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, gets = outs[0], ins[:len(read)]
        # a fixed input (a constant, or a buffer of the plan) is bound for good, viewed as
        # the kernel reads it
        first = [contiguous(g.fixed).reshape(p.shape) if g.fixed is not None else p
                 for g, p in zip(gets, probe)]
        call = program.broadcast_call(op, first, out.reshape(target_shape), what)
        if call is None:
            raise ta.UnsupportedError(f"{what}: no broadcast kernel for its buffers")
        dynamic = [(f"x{n}", g) for n, g in enumerate(gets) if g.fixed is None]

        def run(env: Env) -> None:
            for name, get in dynamic:
                call.rebind(name, contiguous(get(env)))
            call()
        parts: list[Part] = [(call, [(name, get, None) for name, get in dynamic])]
        return made_of(run, parts)

    spec = Spec(make, [], "broadcast kernel")
    types = ", ".join(str(v.dtype) for v in values)
    spec.plan = f"compiled broadcast {op} ({types} -> {out_value.dtype}, {out_value.shape})"
    return spec


def integer_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                 ) -> Spec | None:
    """The static form of an integer Add, Sub, Mul or ReduceSum (int32 or int64): the one
    kernel call its recorded run made, prebound, or None (a generic step, or for a float
    one the plan's capture). Only when that call read every input that is not a constant in
    place (a reshape of it, the same dtype) and returned the node's output itself, so that
    nothing else the node did depends on values.

    >>> from types import SimpleNamespace
    >>> from tensoralg.onnx.ops.kernels import KernelSet, NodeContext
    >>> from tensoralg.onnx.ops import lookup
    >>> context = NodeContext("n", "Add", ("o", "k"), ("y",), 14, KernelSet("llvm"))
    >>> context.capture = []
    >>> o, k = np.arange(3, dtype=np.int64), np.array(5)
    >>> y = lookup("Add", 14).function(context, o, k)
    >>> node = SimpleNamespace(op_type="Add", inputs=("o", "k"), outputs=("y",))
    >>> step = SimpleNamespace(node=node, context=context, captured=context.capture)
    >>> integer_spec(step, {"o": o, "k": k, "y": y}, {"k": k}).plan
    'compiled int64 statement Y(i) = A(i) + B'
    """
    node = step.node
    names = [n for n in node.inputs if n]
    outputs = [n for n in node.outputs if n]
    calls = getattr(step, "captured", None) or []
    if node.op_type not in INTEGER_OPS or len(outputs) != 1 or len(calls) != 1:
        return None
    kernel, operands, result = calls[0]
    out_value = recorded[outputs[0]]
    if kernel.dtype not in _INTEGERS or out_value.dtype != kernel.dtype or \
            not out_value.size or not _views(out_value, result) or \
            any(not fmt.is_dense for fmt in kernel.formats.values()):
        return None
    sources: dict[str, tuple[str, tuple[int, ...]]] = {}     # letter -> (input, shape)
    for letter, operand in operands.items():
        match = [n for n in names if _views(recorded[n], operand)]
        if not match:
            return None
        sources[letter] = (match[0], operand.shape)
    read = {name for name, _ in sources.values()}
    if any(n not in read and n not in constants for n in names):
        return None
    shape = np.shape(result)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        by_name = {g.name: g for g in ins}
        gets = {letter: (by_name[name], view) for letter, (name, view) in sources.items()}
        bound = kernel.bind(out=outs[0].reshape(shape), **{
            letter: (contiguous(g.fixed).reshape(view) if g.fixed is not None
                     else np.zeros(view, kernel.dtype)) for letter, (g, view) in gets.items()})
        dynamic = [(letter, g, view) for letter, (g, view) in gets.items() if g.fixed is None]

        def run(env: Env) -> None:
            for letter, get, view in dynamic:
                bound.rebind(letter, contiguous(get(env)).reshape(view))
            bound()
        return made_of(run, [(bound, dynamic)])

    spec = Spec(make, [], "kernel")
    spec.plan = f"compiled {kernel.dtype} statement {kernel.statement}"
    return spec


def _views(value: np.ndarray, array: np.ndarray) -> bool:
    """Whether ``array`` is ``value`` itself, reshaped: the same memory, dtype and size."""
    return isinstance(array, np.ndarray) and array.dtype == value.dtype and \
        array.size == value.size and value.size > 0 and \
        array.ctypes.data == value.ctypes.data and array.flags.c_contiguous and \
        value.flags.c_contiguous


__all__ = ["INTEGER_OPS", "COPY_OPS", "MASK_OPS", "integer_spec", "mask_spec"]
