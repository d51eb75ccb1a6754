"""A compiled sequence of prebound kernel calls (``codegen/sequence.py``), run by one ctypes
call. Built for a model plan's consecutive kernel steps; the addresses of its graph inputs go in
through ``slots`` at each run.
"""
from __future__ import annotations

import ctypes

import numpy as np

from tensoralg.codegen.build import build_llvm_module
from tensoralg.codegen.sequence import (
    ENTRY,
    NativeCall,
    NativeGroup,
    Slot,
    sequence_module,
    supported,
)

_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)


class CallSequence:
    """``calls`` compiled into one function; ``run()`` returns 0 or 1 + the failed call's index.

    The kernels and buffers every call names must outlive this object (the caller keeps them,
    for instance by holding the bound calls whose ``native()`` it passed).

    >>> seq = CallSequence([], slots=0)
    >>> seq.run()
    0
    """

    def __init__(self, calls: list[NativeCall | NativeGroup], slots: int) -> None:
        self.calls = list(calls)
        self.slots = np.zeros(max(1, slots), np.int64)
        self._function, self.source, self._keepalive = build_llvm_module(
            sequence_module(self.calls), ENTRY, _PROTOTYPE)
        self._address = self.slots.ctypes.data

    def use_slots(self, slots: np.ndarray) -> None:
        """Read the slots from ``slots`` (an int64 array shared by several sequences)."""
        if slots.dtype != np.int64 or not slots.flags.c_contiguous:
            raise ValueError("slots must be a contiguous int64 array")
        self.slots = slots
        self._address = slots.ctypes.data

    def run(self) -> int:
        """Run every call in order (the slots hold this run's input addresses)."""
        return self._function(self._address)


__all__ = ["CallSequence", "NativeCall", "NativeGroup", "Slot", "supported"]
