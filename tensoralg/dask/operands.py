"""What the blockwise plan knows of each operand: its indices, its chunk bounds along each
mode, and whether a chunk is a NumPy array, a scipy.sparse matrix or a ``ta.Tensor``.

Operands that are not dask arrays stay whole: they are put in the graph once and sliced inside
each block's task, so each worker receives them once ("broadcast").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# A dask array cannot carry attributes of its own, and its ``_meta`` of ``ta.Tensor`` chunks
# falls back to NumPy (a Tensor cannot be sliced to an empty meta). The constructors of this
# room record what they build here, by the array's unique graph name.
_RECORDED: dict[str, "ChunkKind"] = {}


@dataclass(frozen=True, slots=True)
class ChunkKind:
    """The kind of an operand's chunks and, when known, its stored entries."""

    kind: str                 # "numpy", "scipy" or "tensor"
    nnz: int | None = None
    format: Any = None        # the ta.Format of Tensor chunks
    scipy_class: type | None = None


@dataclass(frozen=True, slots=True)
class BlockedOperand:
    """One operand of a blockwise plan."""

    position: int
    indices: str
    shape: tuple[int, ...]
    chunks: tuple[tuple[int, ...], ...]   # per mode; one chunk for an operand held whole
    dtype: np.dtype
    kind: ChunkKind
    is_dask: bool

    @property
    def nnz(self) -> int | None:
        return self.kind.nnz

    def __str__(self) -> str:
        where = "chunks " + " x ".join(str(len(c)) for c in self.chunks) if self.is_dask \
            else "held whole"
        return f"operand {self.position} {self.indices} {self.shape} {self.kind.kind}, {where}"


def record(name: str, kind: ChunkKind) -> None:
    """Remember what a dask array built by this room holds (``from_scipy`` and friends)."""
    if len(_RECORDED) > 4096:      # names of arrays long gone; the plan then reads _meta
        _RECORDED.clear()
    _RECORDED[name] = kind


def is_dask(value: Any) -> bool:
    return type(value).__module__.startswith("dask.")


def chunk_kind(value: Any) -> ChunkKind:
    """The kind of a dask array's chunks, or of an in-memory operand."""
    if is_dask(value):
        known = _RECORDED.get(value.name)
        if known is not None:
            return known
        return _kind_of(value._meta)
    return _kind_of(value)


def _kind_of(value: Any) -> ChunkKind:
    module = type(value).__module__
    if module.startswith("scipy.sparse"):
        return ChunkKind("scipy", int(value.nnz) if math.prod(value.shape) else None,
                         scipy_class=type(value))
    if module.startswith("tensoralg"):
        return ChunkKind("tensor", int(value.nnz), format=value.format)
    return ChunkKind("numpy")


def describe(position: int, indices: str, value: Any) -> BlockedOperand:
    """The operand as the plan sees it."""
    kind = chunk_kind(value)
    shape = tuple(int(n) for n in np.shape(value)) if not hasattr(value, "shape") else \
        tuple(int(n) for n in value.shape)
    if is_dask(value):
        chunks = tuple(tuple(int(c) for c in mode) for mode in value.chunks)
        if any(math.isnan(c) for mode in value.chunks for c in mode):
            from tensoralg.errors import ShapeError

            raise ShapeError(f"operand {position} has chunks of unknown size; call "
                             f"compute_chunk_sizes() on it first")
        dtype = np.dtype(value.dtype)
    else:
        chunks = tuple((n,) for n in shape)
        dtype = np.dtype(getattr(value, "dtype", np.asarray(value).dtype))
    return BlockedOperand(position, indices, shape, chunks, dtype, kind, is_dask(value))
