"""Sum, Max, Min and Mean of one to N inputs with NumPy broadcasting, each one statement.

``Sum(a, b, c)`` is ``Y(i,j) = A(i,j) + B(j) + C(i,j)``; Max and Min nest the two-argument
``max``/``min`` of the statement language (which keep NaN, as onnxruntime does), Mean divides
the sum by the count. One input is a copy through the same statement, so every form runs (and
fuses, :data:`tensoralg.onnx.passes.fusion.TEMPLATES`) the same way. The statement text is shared with
fusion through :func:`variadic_template`.

Max and Min of uint64 run in NumPy: the core computes unsigned integers in int64
(:func:`~tensoralg.onnx.ops.kernels.compute_dtype`), which would order values above 2**63 wrongly.

>>> variadic_template("Max", ["A(i)", "B(i)", "C(i)"])
'max(A(i), max(B(i), C(i)))'
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, elementwise, literal
from tensoralg.onnx.ops.registry import op


def variadic_template(op_type: str, args: Sequence[str]) -> str:
    """The statement text of ``op_type`` (Sum, Max, Min or Mean) over the texts ``args``."""
    if op_type in ("Max", "Min"):
        function = op_type.lower()
        text = args[-1]
        for arg in reversed(args[:-1]):
            text = f"{function}({arg}, {text})"
        return text
    total = " + ".join(args)
    if op_type == "Mean" and len(args) > 1:
        return f"({total}) / {literal(len(args))}"
    return f"({total})" if len(args) > 1 else total


def _variadic(op_type: str) -> Any:
    def run(node: NodeContext, *inputs: np.ndarray) -> np.ndarray:
        arrays = [a for a in inputs if a is not None]
        if not arrays:
            raise ta.ShapeError(f"{node}: {op_type} needs at least one input")
        if len({a.dtype for a in arrays}) != 1:
            kinds = ", ".join(str(a.dtype) for a in arrays)
            raise ta.ShapeError(f"{node}: the inputs of {op_type} must share one dtype, "
                                f"got {kinds}")
        dtype = arrays[0].dtype
        if dtype == np.uint64 and op_type in ("Max", "Min"):
            node.note(f"numpy {op_type.lower()}imum (uint64 does not fit the core's int64)")
            reduce = np.maximum if op_type == "Max" else np.minimum
            return np.asarray(reduce.reduce(np.broadcast_arrays(*arrays)))
        texts = [f"{{{k}}}" for k in range(len(arrays))]
        needs_float = op_type == "Mean"
        return elementwise(node, variadic_template(op_type, texts), *arrays,
                           dtype=compute_dtype(dtype, needs_float))
    return run


for _name in ("Sum", "Max", "Min", "Mean"):
    op(_name, since=8)(_variadic(_name))
