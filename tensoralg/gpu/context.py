"""The process's GPU: one driver, the kernels loaded on it, and the cubin cache they use.

Like the CPU's ``KernelCache`` (``api.py``), there is one `GpuContext` per process, opened on
the first GPU call; tests make their own around the emulator (``emulate.py``).
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

from tensoralg.codegen.cache import DiskCache
from tensoralg.codegen.cuda import CudaProgram, cuda_program
from tensoralg.errors import UnsupportedError
from tensoralg.gpu.driver import Driver, open_driver
from tensoralg.gpu.function import gpu_function, gpu_plan
from tensoralg.ir.nodes import Function


@dataclass(frozen=True, slots=True, eq=False)
class GpuKernel:
    """A compiled program's CUDA translation unit, loaded as ``module`` on a driver."""

    statement: str
    function: Function
    program: CudaProgram
    module: Any

    def __str__(self) -> str:
        return f"<gpu kernel for {self.statement}: {self.program}>"


class GpuContext:
    """A driver, the kernels loaded on it by compiled program, and the cubin cache."""

    def __init__(self, driver: Driver, cache: DiskCache | None = None) -> None:
        self.driver = driver
        self.cache = cache
        self.kernels: dict[Any, GpuKernel] = {}
        self._lock = threading.Lock()
        # Row statistics of host pos arrays seen before, by identity (confirmed by a weak
        # reference): for the choice of mapping only, never for a grid's size.
        self._stats: dict[tuple, tuple[Any, Any]] = {}

    def row_stats(self, array: Any, compute: Any) -> Any:
        """``compute()``, remembered for the NumPy ``array`` while it lives."""
        key = (id(array), array.size)
        found = self._stats.get(key)
        if found is not None and found[0]() is array:
            return found[1]
        if len(self._stats) > 1024:
            self._stats.clear()
        value = compute()
        try:
            self._stats[key] = (weakref.ref(array), value)
        except TypeError:
            pass
        return value

    def kernel(self, compiled: Any) -> GpuKernel:
        """The loaded kernel of ``compiled`` (an ``api.CompiledProgram``): lowered with the
        GPU's pass settings, printed with every mapping its plan allows, compiled (or read
        from the cache) and loaded once per process."""
        found = self.kernels.get(compiled.key)
        if found is not None:
            return found
        with self._lock:
            found = self.kernels.get(compiled.key)
            if found is None:
                found = self.kernels[compiled.key] = self._prepare(compiled)
        return found

    def _prepare(self, compiled: Any) -> GpuKernel:
        statement = compiled.key.statement
        function = gpu_function(compiled)
        program = cuda_program(function, None, disjoint_rows=not gpu_plan(compiled).partials)
        if program.kind == "unmapped":
            raise UnsupportedError(f"cannot run {statement} on the GPU: {program.reason}; "
                                   f"use backend='llvm' or 'c' (kernel.source('cuda') prints "
                                   f"it single-threaded)")
        return GpuKernel(statement, function, program, self.driver.load(program, self.cache))

    def __str__(self) -> str:
        return f"<gpu context on {self.driver.device} via {self.driver.name}>"


_context: GpuContext | None = None
_failure: str | None = None


def gpu_context(cache: DiskCache | None = None) -> GpuContext:
    """The process's `GpuContext`, opened on first use with ``cache`` for its cubins;
    `UnsupportedError` (the same each time) when no GPU can be reached."""
    global _context, _failure
    if _context is not None:
        if _context.cache is None and cache is not None:
            _context.cache = cache          # opened earlier by a check that had no cache
        return _context
    if _failure is not None:
        raise UnsupportedError(_failure)
    try:
        _context = GpuContext(open_driver(), cache)
    except UnsupportedError as error:
        _failure = str(error)
        raise
    return _context


def available() -> str | None:
    """None when the cuda backend can run kernels here; otherwise why not (no pycuda or
    cuda-python, or no visible GPU), with how to install.

    >>> reason = available()
    >>> reason is None or "cuda" in reason
    True
    """
    try:
        gpu_context()
    except UnsupportedError as error:
        return str(error)
    return None


__all__ = ["GpuContext", "GpuKernel", "available", "gpu_context"]
