"""What runs on the workers: one block of a kernel call, and the additions of partial blocks.

Only specs (statement text, formats, dtype: all picklable) and arrays cross the wire. Each
worker process compiles a kernel the first time it needs it, through ``ta.compile`` /
``ta.einsum``, whose on-disk cache (``TENSORALG_CACHE_DIR``, inherited by worker processes)
answers after the first process has built it; ``worker_stats`` reports what a worker built.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

import tensoralg as ta
from tensoralg import _version, api
from tensoralg.dask.requirement import register_sizeof

LETTERS = "ijklmnopqrstuvwxyz"

# ta.compile'd kernels of this process, by spec: a worker compiles each kernel once (one
# memo per process is what "once per worker" means; it holds no state that changes results).
_kernels: dict[tuple, ta.Kernel] = {}


@dataclass(frozen=True, slots=True)
class EinsumSpec:
    """``ta.einsum(subscripts, *blocks, ...)`` on each block."""

    subscripts: str
    dtype: Any = None
    backend: str | None = None
    out_format: Any = None
    formats: Any = None
    casting: str = "safe"

    def run(self, blocks: list[Any]) -> Any:
        return ta.einsum(self.subscripts, *blocks, dtype=self.dtype, backend=self.backend,
                         out_format=self.out_format, formats=self.formats,
                         casting=self.casting, optimize=False)


@dataclass(frozen=True, slots=True)
class KernelSpec:
    """A ``ta.compile``'d kernel, rebuilt on the worker from its statement and formats."""

    statement: str
    formats: tuple[tuple[str, Any], ...]       # operand (and output) name -> ta.Format
    dtype: str
    backend: str
    schedule: str | None
    names: tuple[str, ...]                     # the operands, in the order blocks come

    def run(self, blocks: list[Any]) -> Any:
        return compiled(self)(**dict(zip(self.names, blocks)))


def compiled(spec: KernelSpec) -> ta.Kernel:
    """The kernel of ``spec``, compiled once in this process."""
    key = (spec.statement, spec.formats, spec.dtype, spec.backend, spec.schedule)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = ta.compile(spec.statement, dict(spec.formats), dtype=spec.dtype,
                            backend=spec.backend, schedule=spec.schedule)
        _kernels[key] = kernel
    return kernel


def run_block(spec: EinsumSpec | KernelSpec, slices: tuple, *blocks: Any) -> Any:
    """One block task: slice the broadcast operands, run the kernel on the blocks."""
    register_sizeof()         # the worker then weighs the Tensor blocks it holds
    taken = [value if cut is None else slice_operand(value, cut)
             for value, cut in zip(blocks, slices)]
    return spec.run(taken)


def slice_operand(value: Any, cut: tuple[slice, ...]) -> Any:
    """The part of a whole operand that one block reads (NumPy, scipy.sparse or ta.Tensor)."""
    if all(s == slice(None) for s in cut):
        return value
    if isinstance(value, ta.Tensor):
        coords, values = value.to_coords()
        coords = coords.T                     # (modes, nonzeros)
        keep = np.ones(values.shape[0], dtype=bool)
        starts = []
        shape = []
        for mode, s in enumerate(cut):
            start, stop, _ = s.indices(value.shape[mode])
            keep &= (coords[mode] >= start) & (coords[mode] < stop)
            starts.append(start)
            shape.append(stop - start)
        shifted = coords[:, keep] - np.asarray(starts, dtype=coords.dtype)[:, None]
        return ta.Tensor.from_coords(shifted, values[keep], tuple(shape), format=value.format)
    if type(value).__module__.startswith("scipy.sparse"):
        return value.tocsr()[cut]
    return np.asarray(value)[cut]


def add_partials(left: Any, right: Any) -> Any:
    """``left + right`` for two partial blocks, by a tensoralg addition kernel in their format
    (dense, CSR, or the ta.Tensor's own). Scalars (full reductions) add as NumPy scalars: a
    kernel call costs more than the addition."""
    if np.ndim(left) == 0 and not hasattr(left, "format"):
        return left + right
    if type(left).__module__.startswith("scipy.sparse"):
        fmt: Any = ta.CSR
        left, right = left.tocsr(), right.tocsr()
    elif isinstance(left, ta.Tensor):
        fmt = left.format
    else:
        fmt = ta.dense(np.ndim(left))
    rank = len(left.shape)
    indices = ",".join(LETTERS[:rank])
    statement = f"C({indices}) = A({indices}) + B({indices})"
    dtype = np.result_type(left.dtype, right.dtype)
    spec = KernelSpec(statement, (("A", fmt), ("B", fmt), ("C", fmt)), str(dtype), "llvm",
                      None, ("A", "B"))
    return spec.run([left, right])


def worker_stats() -> dict[str, Any]:
    """This process's pid, the kernels it compiled itself (not loaded from the on-disk cache)
    and the kernels this room built here (for ``client.run``)."""
    return {"pid": os.getpid(), "compiles": api.kernel_cache().compiles,
            "kernels": len(_kernels), "in_memory": len(api.kernel_cache().kernels),
            "fingerprint": _version.source_fingerprint()}   # part of every on-disk cache key
