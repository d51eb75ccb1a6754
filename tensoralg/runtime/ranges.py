"""A prebound kernel split into row (or position) ranges, one argument list per thread range:
run the ranges, or hand the single range to a compiled call sequence.

Shared by the generated GEMM's layers (``runtime/gemm.py``) and the compiled-in convolutions
(``runtime/conv.py``), whose first argument is the address of their one input.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

from tensoralg.errors import KernelRuntimeError


def run_ranges(function: Callable[..., int], calls: list[list], threads: Any, what: str) -> None:
    """Call ``function`` once per argument list (over ``threads`` when given); a nonzero
    status raises ``KernelRuntimeError`` naming ``what``."""
    if threads is None:
        status = function(*calls[0])
    else:
        status = max(threads.run_calls(lambda args: function(*args), calls))
    if status != 0:
        raise KernelRuntimeError(f"{what}: the kernel failed (status {status})")


def native_range(function: Any, calls: list[list], threads: Any, slots: dict[str, Any],
                 operand: str, what: str) -> Any:
    """The single range as a ``NativeCall``, reading its first argument from
    ``slots[operand]`` when given; None when the call is split over threads or ``slots`` names
    another operand."""
    from tensoralg.codegen.sequence import NativeCall

    if threads is not None or set(slots) - {operand}:
        return None
    args = list(calls[0])
    if operand in slots:
        args[0] = slots[operand]
    address = ctypes.cast(function, ctypes.c_void_p).value or 0
    return NativeCall(address, tuple(function.argtypes), tuple(args), None, what)


__all__ = ["run_ranges", "native_range"]
