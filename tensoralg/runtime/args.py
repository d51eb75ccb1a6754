"""Packing kernel arguments from the ABI that ``ir.Function.params`` describes.

Each parameter's ``role`` names what it is: ``index.i`` (the size of index ``i``),
``A.1.pos`` / ``A.1.crd`` (a level's arrays), ``A.vals``, ``capacity`` (initial capacity of
grown output buffers), and for the output either ``out.vals`` (a dense buffer the runtime
allocates zeroed) or ``out.k.pos`` / ``out.k.crd`` / ``out.vals`` handles plus ``out.sizes``
(buffers the kernel allocates and hands back), or for a product whose rows were counted first
``out.1.pos`` / ``out.1.crd`` / ``out.vals`` arrays the runtime allocated. The runtime never
guesses: it reads roles.

The roles are read once per kernel into an ``ArgumentPlan``; packing a call is then one short
loop, which matters because small kernels are dominated by dispatch.
"""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tensoralg.errors import CompileError
from tensoralg.formats.tensor import Tensor
from tensoralg.ir.nodes import Param, Ptr, RangeBound


class ArrayMemo:
    """``compute(array)``, remembered per array while it lives (``limit`` arrays at most).

    Keyed by ``id`` and confirmed by a weak reference, so a recycled id is never mistaken for
    the array it once named; for what does not change while an array lives (its data pointer;
    what its index arrays say, which the runtime takes as fixed once checked).

    >>> lengths = ArrayMemo(len)
    >>> a = np.zeros(3)
    >>> lengths(a), lengths(a)
    (3, 3)
    """

    def __init__(self, compute: Any, limit: int = 4096) -> None:
        self.compute, self.limit = compute, limit
        self.known: dict[int, tuple[weakref.ref, Any]] = {}

    def __call__(self, array: np.ndarray) -> Any:
        entry = self.known.get(id(array))
        if entry is not None and entry[0]() is array:
            return entry[1]
        value = self.compute(array)
        if len(self.known) >= self.limit:
            self.known.clear()
        try:
            self.known[id(array)] = (weakref.ref(array), value)
        except TypeError:
            pass
        return value


# Data addresses of arrays seen before: ``array.ctypes.data`` costs ~1.5 µs a call.
address_of = ArrayMemo(lambda array: array.ctypes.data)

_char_view, _address = ctypes.c_char.from_buffer, ctypes.addressof


def data_address(array: np.ndarray) -> int:
    """The address of a C-contiguous array's first byte, in ~0.6 µs through the buffer
    protocol instead of ~2 µs for ``array.ctypes.data`` (which builds a helper object): a
    model run at batch 1 does this once per input. Read-only and empty arrays take the slow
    way.

    >>> a = np.zeros(3)
    >>> data_address(a) == a.ctypes.data
    True
    """
    try:
        return _address(_char_view(array))
    except (TypeError, ValueError):
        return array.ctypes.data

# What one argument is: (kind, name, level), ``kind`` one of these. ``OUT_ARRAY`` is a sparse
# output's level array that the runtime allocated (a counted product's ``pos`` and ``crd``,
# ``lower/counted.py``), named like a handle (``1.pos``).
SIZE, CAPACITY, VALS, POS, CRD, OUT_SIZES, OUT_HANDLE, OUT_DENSE, RANGE, OUT_ARRAY = range(10)


@dataclass
class OutputBuffers:
    """What the runtime hands the kernel for the output, and reads back afterwards."""

    dense: np.ndarray | None = None
    handles: dict[str, ctypes.c_void_p] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)   # OUT_ARRAY's, by name
    sizes: np.ndarray | None = None
    capacity: int = 16


@dataclass(frozen=True, slots=True)
class ArgumentPlan:
    """How to produce each argument of a kernel, read once from the parameters' roles.

    A kernel whose outer loop may be split has ``range.begin``/``range.end`` parameters;
    ``range_slots`` says where they are so the runtime can set them per thread, and
    ``range_over`` names the tensor whose first level's positions the range counts, when it
    counts positions rather than coordinates of ``range_index`` (``RangeBound.over``).
    """

    steps: tuple[tuple[int, str, int], ...]
    range_slots: tuple[int, int] | None = None
    range_index: str | None = None
    range_over: str | None = None

    @staticmethod
    def from_params(params: tuple[Param, ...], output_name: str) -> "ArgumentPlan":
        steps = []
        range_index = range_over = None
        for param in params:
            if isinstance(param.role, RangeBound):
                steps.append((RANGE, param.role.which, 0))
                range_index, range_over = param.role.index, param.role.over
                continue
            parts = param.role.split(".")
            if parts[0] == "index":
                steps.append((SIZE, parts[1], 0))
            elif parts[0] == "capacity":
                steps.append((CAPACITY, "", 0))
            elif parts[0] == output_name and param.output:
                if parts[1:] == ["sizes"]:
                    steps.append((OUT_SIZES, "", 0))
                elif isinstance(param.var.dtype, Ptr) and isinstance(param.var.dtype.elem, Ptr):
                    steps.append((OUT_HANDLE, ".".join(parts[1:]), 0))
                elif len(parts) == 3 and parts[2] in ("pos", "crd"):
                    steps.append((OUT_ARRAY, ".".join(parts[1:]), 0))
                else:
                    steps.append((OUT_DENSE, "", 0))
            else:
                match parts[1:]:
                    case ["vals"]:
                        steps.append((VALS, parts[0], 0))
                    case [level, "pos"]:
                        steps.append((POS, parts[0], int(level)))
                    case [level, "crd"]:
                        steps.append((CRD, parts[0], int(level)))
                    case _:
                        raise CompileError(f"internal: unknown parameter role {param.role!r}")
        slots = [k for k, step in enumerate(steps) if step[0] == RANGE]
        return ArgumentPlan(tuple(steps), (slots[0], slots[1]) if slots else None, range_index,
                            range_over)

    def range_size(self, sizes: Mapping[str, int], tensors: Mapping[str, Any]) -> int:
        """The extent of the kernel's thread range: the size of its index, or the stored
        positions of ``range_over``'s first level."""
        if self.range_over is None:
            return sizes[self.range_index]   # type: ignore[index]
        pos = tensors[self.range_over].levels[0].pos
        return int(pos[-1]) if pos is not None and len(pos) else 0

    def range_weights(self, tensors: Mapping[str, Any]) -> np.ndarray | None:
        """For a range over positions (``range_over``), the cumulative entries below each
        position (the second level's ``pos``), which balance its ranges by stored entries;
        None otherwise, or where the second level has no ``pos``."""
        if self.range_over is None:
            return None
        levels = tensors[self.range_over].levels
        pos = levels[1].pos if len(levels) > 1 else None
        return None if pos is None else np.asarray(pos, dtype=np.int64)

    def value_slots(self, name: str) -> list[int]:
        """Positions of the arguments that carry ``name``'s values array."""
        return [k for k, (kind, n, _) in enumerate(self.steps) if kind == VALS and n == name]

    def pack(self, tensors: Mapping[str, Tensor], sizes: Mapping[str, int],
             output: OutputBuffers) -> list:
        """One argument per parameter, in order: addresses for pointers, numbers for scalars."""
        args: list = []
        append = args.append
        for kind, name, level in self.steps:
            if kind == SIZE:
                append(sizes[name])
            elif kind == VALS:
                append(address_of(tensors[name].vals))
            elif kind == POS:
                append(address_of(tensors[name].levels[level].pos))  # type: ignore[arg-type]
            elif kind == CRD:
                append(address_of(tensors[name].levels[level].crd))  # type: ignore[arg-type]
            elif kind == CAPACITY:
                append(output.capacity)
            elif kind == OUT_DENSE:
                append(output.dense.ctypes.data)  # type: ignore[union-attr]  # always new
            elif kind == OUT_SIZES:
                append(output.sizes.ctypes.data)  # type: ignore[union-attr]
            elif kind == RANGE:
                append(0 if name == "begin" else self.range_size(sizes, tensors))  # whole
            elif kind == OUT_ARRAY:
                append(output.arrays[name].ctypes.data)
            else:
                handle = ctypes.c_void_p(0)
                output.handles[name] = handle
                append(ctypes.addressof(handle))
        return args
