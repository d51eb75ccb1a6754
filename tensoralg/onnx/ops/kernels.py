"""From ONNX nodes to tensoralg statements: dtypes, broadcasting and the per-model kernel set.

Every contraction and elementwise step of a node is a TACO-style statement compiled once per
(statement, dtype) by ``ta.compile`` and owned by the model's :class:`KernelSet`. Broadcasting
follows NumPy: inputs are aligned on the right, and a size-1 or missing dimension simply has no
index in that input's access, so ``A + B`` with shapes (3, 4) and (4,) becomes
``Y(i,j) = A(i,j) + B(j)``.

The core computes in float32, float64, int32 and int64. Other ONNX dtypes are widened for the
kernel and narrowed back afterwards (:func:`compute_dtype`): float16 in float32, small and
unsigned integers and bool in int64.
"""
from __future__ import annotations

import math
from itertools import groupby
from typing import Any, Callable, Sequence

import numpy as np

import tensoralg as ta

INDICES = "ijklmnpqrstuvwxyzabcdefgh"
OPERANDS = "ABCDEFGHIJKLMNOPQRSTUVWX"
_CORE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32),
                np.dtype(np.int64))


def compute_dtype(dtype: Any, needs_float: bool = False) -> np.dtype:
    """The dtype a kernel computes in for values of ``dtype``.

    >>> compute_dtype(np.float16), compute_dtype(np.uint8), compute_dtype(np.int32, True)
    (dtype('float32'), dtype('int64'), dtype('float64'))
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype if dtype in _CORE_DTYPES else np.dtype(np.float32)
    if dtype.kind in "iub":
        if needs_float:
            return np.dtype(np.float64)
        return dtype if dtype in _CORE_DTYPES else np.dtype(np.int64)
    raise ta.UnsupportedError(f"tensoralg kernels cannot compute on {dtype} values")


def literal(value: float | int) -> str:
    """A statement literal, parenthesised when negative: ``(-0.5)``."""
    if isinstance(value, (bool, np.bool_)):
        value = int(value)
    if isinstance(value, (int, np.integer)):
        text = str(int(value))
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ta.UnsupportedError(f"the literal {value} cannot appear in a statement")
        text = repr(value)
    return f"({text})" if text.startswith("-") else text


def minus(a: str, b: str) -> str:
    """``a - b`` as statement text.

    Written ``a + (-1) * (b)`` because the core drops the sign of a top-level subtracted
    term and of every unary minus (``A(i) - B(i)`` and ``-(A(i))`` compute ``A + B`` and ``A``);
    multiplying by the literal -1 is computed correctly.
    """
    return f"{a} + (-1) * ({b})"


def negate(x: str) -> str:
    """``-x`` as statement text (see :func:`minus` for why not ``-(x)``)."""
    return f"(-1) * ({x})"


class KernelSet:
    """The kernels of one model: ``ta.compile`` once per (statement, dtype, formats, backend).

    ``on_compile``, when given, is called with each new kernel (``TENSORALG_PRINT_IR`` prints
    its source that way). A cuda model's set has a ``device`` (``device_values.Device``):
    while a step runs there (``device.active``), kernel calls go to the GPU; otherwise (constant
    folding at load, host steps) they run on the CPU in ``host_backend`` ("llvm").

    >>> KernelSet("llvm").backend, KernelSet("c").host_backend
    ('llvm', 'c')
    """

    def __init__(self, backend: str,
                 on_compile: Callable[[ta.Kernel], Any] | None = None,
                 device: Any = None) -> None:
        if (backend == "cuda") != (device is not None):
            raise ta.UnsupportedError("a cuda kernel set needs a device, and only it takes one")
        self.host_backend = "llvm" if backend == "cuda" else backend
        self.device = device
        self.on_compile = on_compile
        self.kernels: dict[tuple[str, str, str, str], ta.Kernel] = {}
        # Prebuilt objects of the model's nodes that outlive a run (an int8 layer's packed
        # weight), by node name.
        self.layers: dict[str, Any] = {}

    @property
    def backend(self) -> str:
        """Where a kernel compiled now runs: "cuda" while a device step runs, else the host's
        backend (ops that call ``ta.einsum`` themselves read it)."""
        device = self.device
        return "cuda" if device is not None and device.active else self.host_backend

    def get(self, statement: str, dtype: np.dtype,
            formats: dict[str, Any] | None = None, backend: str | None = None) -> ta.Kernel:
        backend = backend or self.backend
        key = (statement, np.dtype(dtype).str, repr(sorted((formats or {}).items())), backend)
        kernel = self.kernels.get(key)
        if kernel is None:
            # A model's kernels run optimised from the first call: a plan times and fuses
            # them, and a model is compiled once and run many times (codegen/tiered.py).
            with ta.optimised_builds():
                kernel = ta.compile(statement, formats=formats or None, dtype=dtype,
                                    backend=backend)
            self.kernels[key] = kernel
            if self.on_compile is not None:
                self.on_compile(kernel)
        return kernel


class NodeContext:
    """What an op function sees of its node: names, opset version, and the way to run kernels.

    ``plan`` records, in order, the statements and data-movement decisions the node made, so
    that ``CompiledModel.print_ir`` can show what every node became.
    """

    def __init__(self, name: str, op_type: str, inputs: Sequence[str], outputs: Sequence[str],
                 version: int, kernels: KernelSet) -> None:
        self.name = name
        self.op_type = op_type
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.version = version
        self.kernels = kernels
        self.plan: dict[str, None] = {}
        # While a static plan is being recorded: each kernel call as (kernel, operands, result).
        self.capture: list[tuple[ta.Kernel, dict[str, Any], np.ndarray]] | None = None

    def __str__(self) -> str:
        return f"node {self.name} ({self.op_type}({', '.join(self.inputs)}))"

    def note(self, text: str) -> None:
        """Record a decision that is not a kernel (data movement, BLAS)."""
        self.plan.setdefault(text, None)

    def run(self, statement: str, dtype: np.dtype, formats: dict[str, Any] | None = None,
            **operands: Any) -> np.ndarray:
        """Compile (once) and run ``statement`` in ``dtype``; operands named in ``formats``
        are passed as they are (a ``ta.Tensor`` in that format), the others as dense arrays."""
        self.plan.setdefault(statement if not formats else
                             f"{statement}  [{', '.join(f'{k}: {v}' for k, v in formats.items())}]",
                             None)
        device = self.kernels.device
        if device is not None and device.active:      # a device step of a cuda model
            return device.run(self.kernels.get(statement, dtype, formats, "cuda"), dtype,
                              formats or {}, operands)
        kernel = self.kernels.get(statement, dtype, formats)
        cast = {name: a if formats and name in formats else np.asarray(a, dtype=dtype)
                for name, a in operands.items()}
        result = np.asarray(kernel(**cast))
        if self.capture is not None:
            self.capture.append((kernel, cast, result))
        return result


def access(name: str, array: np.ndarray, out_shape: Sequence[int], indices: str
           ) -> tuple[str, np.ndarray]:
    """The access of ``array`` broadcast to ``out_shape`` (whose dims are named by ``indices``).

    Dimensions of size 1 that broadcast get no index and are dropped from the returned view.

    >>> access("B", np.ones((1, 4)), (3, 4), "ij")[0]
    'B(j)'
    """
    kept, names = kept_dims(array.shape, out_shape, indices)
    view = array.reshape([array.shape[d] for d in kept])
    return (f"{name}({','.join(names)})" if names else name), view


def kept_dims(shape: Sequence[int], out_shape: Sequence[int], indices: str
              ) -> tuple[list[int], list[str]]:
    """Dimensions of ``shape`` that do not broadcast against ``out_shape``, and their indices."""
    offset = len(out_shape) - len(shape)
    kept = [d for d in range(len(shape)) if not (shape[d] == 1 and out_shape[offset + d] != 1)]
    return kept, [indices[offset + d] for d in kept]


def unit_free(shape: Sequence[int]) -> tuple[int, ...]:
    """The axes of an output ``shape`` that a statement indexes: those not of size 1 (at least
    one, so that the statement keeps an output index). An index whose loop runs once costs a
    loop per element and stops the innermost loop vectorising: ``(256, 221, 1)`` ran 10x
    slower than ``(256, 221)``.

    >>> unit_free((256, 221, 1)), unit_free((1, 16)), unit_free((1, 1))
    ((0, 1), (1,), (1,))
    """
    kept = tuple(d for d, size in enumerate(shape) if size != 1)
    return kept or ((len(shape) - 1,) if shape else ())


def coalesced(shape: Sequence[int], shapes: Sequence[Sequence[int]]
              ) -> tuple[tuple[int, ...], list[tuple[int, ...]]] | None:
    """``shape`` (the broadcast of ``shapes``) with neighbouring axes merged wherever every
    operand either has both or broadcasts along both, and each operand's shape to match; None
    when no two axes merge. Axes of size 1 go. An elementwise statement then runs one loop
    over what were several (NumPy's iterator coalesces the same way): SiLU over EfficientNet's
    ``(672, 14, 14)`` activations vectorised 14 values a row (8 + 6 scalar) and ran 5x slower
    than over ``(131712,)``.

    >>> coalesced((2, 3, 4, 5), [(2, 3, 4, 5), (3, 1, 1)])
    ((2, 3, 20), [(2, 3, 20), (1, 3, 1)])
    >>> coalesced((2, 3), [(2, 3), (2, 1)]) is None
    True
    """
    rank = len(shape)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    axes = [d for d in range(rank) if shape[d] != 1]
    # Runs of axes over which every operand is present (or broadcast) alike.
    groups = [list(run) for _, run in groupby(axes, lambda d: tuple(p[d] != 1 for p in padded))]
    if len(groups) == len(axes):
        return None
    merged = tuple(math.prod(shape[d] for d in group) for group in groups)
    return merged, [tuple(math.prod(p[d] for d in group) for group in groups) for p in padded]


def without_units(array: np.ndarray, shape: Sequence[int], kept: Sequence[int]) -> np.ndarray:
    """``array`` (broadcastable to ``shape``, aligned on the right) viewed without the axes of
    ``shape`` that ``kept`` leaves out (each of size 1 in ``array`` too, where it has them).

    >>> without_units(np.ones((1, 3, 1)), (2, 3, 1), (0, 1)).shape
    (1, 3)
    """
    offset = len(shape) - array.ndim
    axes = [d for d in range(array.ndim) if offset + d in kept]
    return array.reshape([array.shape[d] for d in axes])


def output_access(indices: str) -> str:
    return f"Y({','.join(indices)})" if indices else "Y"


def broadcast_shape(node: NodeContext, arrays: Sequence[np.ndarray]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(a.shape for a in arrays)))
    except ValueError:
        shapes = ", ".join(str(a.shape) for a in arrays)
        raise ta.ShapeError(f"{node}: inputs of shapes {shapes} do not broadcast") from None


def elementwise(node: NodeContext, template: str | Callable[..., str],
                *arrays: np.ndarray, dtype: np.dtype, out_dtype: Any = None) -> np.ndarray:
    """Run ``Y(...) = template`` over broadcast ``arrays`` in ``dtype``.

    ``template`` is a format string whose ``{0}``, ``{1}``, ... stand for the inputs' accesses
    (or a function of the access strings); the result is cast to ``out_dtype`` (default:
    the first input's dtype).

    >>> node = NodeContext("n0", "Add", ("a", "b"), ("y",), 14, KernelSet("llvm"))
    >>> elementwise(node, "{0} + {1}", np.ones((2, 3)), np.arange(3.0), dtype=np.dtype("f8"))[1]
    array([1., 2., 3.])
    >>> list(node.plan)
    ['Y(i,j) = A(i,j) + B(j)']
    """
    result_shape = shape = broadcast_shape(node, arrays)
    merged = coalesced(shape, [a.shape for a in arrays])
    if merged is not None:
        shape = merged[0]
        arrays = tuple(a.reshape(m) for a, m in zip(arrays, merged[1]))
    if len(shape) > len(INDICES):
        raise ta.UnsupportedError(f"{node}: rank {len(shape)} is above {len(INDICES)}")
    kept = unit_free(shape)
    inner = tuple(shape[d] for d in kept)
    indices = INDICES[:len(inner)]
    accesses = []
    operands = {}
    for k, array in enumerate(arrays):
        text, view = access(OPERANDS[k], without_units(array, shape, kept), inner, indices)
        accesses.append(text)
        operands[OPERANDS[k]] = view
    rhs = template(*accesses) if callable(template) else template.format(*accesses)
    result = node.run(f"{output_access(indices)} = {rhs}", dtype, **operands)
    target = arrays[0].dtype if out_dtype is None else np.dtype(out_dtype)
    return result.reshape(result_shape).astype(target, copy=False)


__all__ = ["KernelSet", "NodeContext", "compute_dtype", "literal", "minus", "negate", "access", "kept_dims", "output_access",
           "broadcast_shape", "coalesced", "unit_free", "without_units", "elementwise", "INDICES", "OPERANDS"]
