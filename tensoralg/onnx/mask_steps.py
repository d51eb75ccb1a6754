"""Static steps for the mixed-dtype elementwise ops of attention masks: Cast, And, Or, Xor,
Not, Where and Expand, as one compiled broadcast kernel each (``tensoralg.api.broadcast_call``),
and for a Reshape-like node that writes a graph output (a compiled copy).

The core's kernels compute in one dtype, so these ops run node by node as NumPy casts around
an int32 or float statement, and in a static plan as generic Python steps; a transformer's
mask path (int64 mask -> Cast to bool -> And with the causal matrix -> Expand -> Where to 0 or
-inf) then splits the plan's compiled sequence into pieces with Python between them. As
broadcast kernels (bool, int32, int64, float32, float64; rank 4 at most) they join the
sequence. The kernel converts with C's rules, which are NumPy's for these casts (nonzero is
true, NaN included; an integer narrows by wrapping); a float to integer Cast stays generic
(out-of-range values are undefined in C, not in NumPy).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

import tensoralg as ta
from tensoralg.onnx.executor import Step
from tensoralg.onnx.step_base import Env, Getter, Part, Run, Spec, contiguous, made_of

# ONNX op -> the broadcast kernel's op
MASK_OPS = {"Cast": "cast", "And": "and", "Or": "or", "Xor": "xor", "Not": "not",
            "Where": "where", "Expand": "cast"}
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
    if not out_value.size or ta.api.broadcast_call(
            op, probe, np.zeros(target_shape, out_value.dtype), "probe") is None:
        return None
    what = str(step.context)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, gets = outs[0], ins[:len(read)]
        # a fixed input (a constant, or a buffer of the plan) is bound for good, viewed as
        # the kernel reads it
        first = [contiguous(g.fixed).reshape(p.shape) if g.fixed is not None else p
                 for g, p in zip(gets, probe)]
        call = ta.api.broadcast_call(op, first, out.reshape(target_shape), what)
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


__all__ = ["COPY_OPS", "MASK_OPS", "mask_spec"]
