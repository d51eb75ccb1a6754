"""A kernel's thread ranges run on the native pool, for plain calls from Python.

Handing a range to a Python thread costs 30-50 µs, so a call was split only with ~400,000
stored values per thread; an SpMV over 10^5 nonzeros (~60 µs) never used the second core. The
native pool (``runtime/pool.py``) hands a range over in 1-2 µs. A :class:`NativeSplit` is a
compiled call sequence (``codegen/sequence.py``) of one call of the kernel split into ``parts``
ranges, every argument read from the sequence's slots: the kernel's arguments first, then
each range's own arguments. One is built per kernel and number of ranges, on the first split
call.

A dense output's ranges differ only in their bounds. A sparse output's ranges also assemble
into buffers of their own (``runtime/stitch.py``): their output handles, sizes and capacity
vary per range too (``varying``).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

from tensoralg.codegen.sequence import NativeCall, Slot, slot_bits, supported
from tensoralg.runtime.sequence import CallSequence

_FLOATS = (ctypes.c_float, ctypes.c_double)


class NativeSplit:
    """``function`` over ``parts`` ranges on ``pool``; ``slots`` are the kernel's range
    arguments' positions, and ``varying`` (default: those two) every argument that each
    range gets its own value of, in the order ``__call__``'s ``per_range`` lists them.

    Calls from several Python threads take turns (the slots table is shared); each call uses
    every thread of the pool anyway.
    """

    def __init__(self, function: Any, slots: tuple[int, int], parts: int, pool: Any,
                 name: str = "", varying: Sequence[int] | None = None) -> None:
        count = len(function.argtypes)
        varying = tuple(slots if varying is None else varying)
        where = {position: k for k, position in enumerate(varying)}
        width = len(varying)

        def arguments(part: int) -> tuple[Slot, ...]:
            return tuple(Slot(count + width * part + where[k]) if k in where else Slot(k)
                         for k in range(count))

        address = ctypes.cast(function, ctypes.c_void_p).value or 0
        call = NativeCall(address, tuple(function.argtypes), arguments(0), name=name,
                          more=tuple(arguments(part) for part in range(1, parts)),
                          pool=(pool.run_address, pool.address))
        self.count, self.parts, self.width = count, parts, width
        self.bounds_only = varying == tuple(slots)
        # float arguments travel as their bits (codegen/sequence.slot_bits): their positions
        # among the kernel's arguments and among the varying ones
        self.floats = [(k, t) for k, t in enumerate(function.argtypes) if t in _FLOATS]
        self.varying_floats = [(where[k], t) for k, t in self.floats if k in where]
        self.sequence = CallSequence([call], slots=count + width * parts)
        self._lock = threading.Lock()
        # whose arguments the slots hold, and its ranges' as written (run); holding the
        # owner keeps it alive, so no other call can take its identity
        self._owner: object | None = None
        self._last: list[list | None] = []

    @staticmethod
    def supports(function: Any) -> bool:
        """Whether every argument of ``function`` can travel through the slots (addresses,
        integers and floats)."""
        return supported(tuple(function.argtypes))

    def _bits(self, values: Sequence[Any], floats: list[tuple[int, type]]) -> Sequence[Any]:
        if not floats:
            return values
        values = list(values)
        for k, argtype in floats:
            values[k] = slot_bits(values[k], argtype)
        return values

    def __call__(self, args: Sequence[int], bounds: Sequence[int]) -> int:
        """Run the kernel with ``args`` over ranges ``[bounds[k], bounds[k+1])``; returns 0 or
        the failure status."""
        assert self.bounds_only, "a split with more varying arguments takes run()"
        with self._lock:
            slots = self.sequence.slots
            count = self.count
            slots[:count] = self._bits(args, self.floats)
            slots[count::2] = bounds[:-1]
            slots[count + 1::2] = bounds[1:]
            status = self.sequence.run()
        return 0 if status == 0 else 1

    def run(self, args: Sequence[int], per_range: Sequence[Sequence[int]],
            owner: object | None = None) -> int:
        """Run the kernel with ``args``, range ``k`` taking ``per_range[k]`` for the
        ``varying`` arguments; returns 0 or the failure status. With every argument varying,
        ``owner`` (the bound call these are the arguments of) lets a run after the same
        owner's rewrite only the ranges whose arguments changed (a bound call's input
        rebound), not convert them all again."""
        with self._lock:
            slots = self.sequence.slots
            count, width = self.count, self.width
            same = owner is not None and owner is self._owner and width == count
            if not same:
                slots[:count] = self._bits(args, self.floats)
                self._owner, self._last = owner, [None] * len(per_range)
            for k, values in enumerate(per_range):
                if not same or values != self._last[k]:
                    slots[count + width * k:count + width * (k + 1)] = \
                        self._bits(values, self.varying_floats)
                    self._last[k] = list(values)
            status = self.sequence.run()
        return 0 if status == 0 else 1


__all__ = ["NativeSplit"]
