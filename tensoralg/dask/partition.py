"""Chunked operands from in-memory sparse ones: row blocks balanced by nonzeros.

``from_scipy`` cuts a CSR matrix into row blocks whose nonzero counts are as equal as rows
allow (a block can be empty, or hold one dense row of many entries); its blocks share the
matrix's ``indices`` and ``data`` arrays (views), so partitioning copies only ``indptr``.
``from_tensor`` cuts a ``ta.Tensor`` into mode-0 slices the same way. With a distributed
client running, the blocks are sent to its workers at once, round-robin (``placement.py``).
"""
from __future__ import annotations

import uuid
from typing import Any

import numpy as np

import tensoralg as ta
from tensoralg.dask.operands import ChunkKind, record
from tensoralg.dask.placement import spread
from tensoralg.dask.requirement import dask_array
from tensoralg.errors import InputError, ShapeError


def balanced_bounds(counts_before: np.ndarray, blocks: int) -> tuple[int, ...]:
    """Chunk sizes of ``len(counts_before) - 1`` rows in ``blocks`` parts of nearly equal
    nonzeros, from the running count of nonzeros before each row (a CSR ``indptr``).

    >>> balanced_bounds(np.array([0, 10, 10, 10, 12, 14]), 2)
    (1, 4)
    """
    rows = len(counts_before) - 1
    if not isinstance(blocks, (int, np.integer)) or blocks < 1:
        raise InputError(f"chunks must be a positive number of blocks, not {blocks!r}")
    total = int(counts_before[-1])
    targets = np.arange(1, blocks) * (total / blocks)
    cuts = np.searchsorted(counts_before, targets, side="left").clip(0, rows)
    edges = np.maximum.accumulate(np.concatenate([[0], cuts, [rows]]))
    return tuple(int(n) for n in np.diff(edges))


def _sizes(chunks: Any, extent: int, counts_before: np.ndarray | None, what: str
           ) -> tuple[int, ...]:
    if isinstance(chunks, (int, np.integer)):
        if counts_before is None:
            return tuple(int(n) for n in np.diff(np.linspace(0, extent, int(chunks) + 1)
                                                 .round().astype(np.int64)))
        return balanced_bounds(counts_before, int(chunks))
    sizes = tuple(int(n) for n in chunks)
    if sum(sizes) != extent or any(n < 0 for n in sizes):
        raise ShapeError(f"{what} chunks {sizes} must be non-negative and add up to {extent}")
    return sizes


def from_scipy(matrix: Any, chunks: Any = 4, column_chunks: Any = 1) -> Any:
    """A ``dask.array`` of scipy CSR blocks: ``chunks`` is a number of row blocks (balanced by
    nonzeros) or explicit row counts; ``column_chunks`` a number of column blocks (split
    evenly) or explicit column counts.

    >>> import scipy.sparse as sp, tensoralg as ta
    >>> A = sp.random_array((100, 50), density=0.1, format="csr", random_state=0)
    >>> d = ta.dask.from_scipy(A, chunks=4)
    >>> len(d.chunks[0]), d.chunks[1]
    (4, (50,))
    """
    da = dask_array()
    from dask.highlevelgraph import HighLevelGraph

    if not type(matrix).__module__.startswith("scipy.sparse") or len(matrix.shape) != 2:
        raise InputError(f"from_scipy takes a 2-D scipy.sparse matrix, not "
                         f"{type(matrix).__name__}; use dask.array.from_array for NumPy")
    csr = matrix.tocsr()
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    rows = _sizes(chunks, csr.shape[0], csr.indptr, "row")
    cols = _sizes(column_chunks, csr.shape[1], None, "column")
    name = f"ta-from-scipy-{uuid.uuid4().hex[:16]}"
    layer = {}
    row_edges = np.concatenate([[0], np.cumsum(rows)])
    col_edges = np.concatenate([[0], np.cumsum(cols)])
    for r in range(len(rows)):
        band = _row_band(csr, int(row_edges[r]), int(row_edges[r + 1]))
        for c in range(len(cols)):
            layer[(name, r, c)] = band if len(cols) == 1 else \
                band[:, int(col_edges[c]):int(col_edges[c + 1])]
    graph = HighLevelGraph.from_collections(name, spread(layer), dependencies=[])
    record(name, ChunkKind("scipy", int(csr.nnz), scipy_class=type(csr)))
    return da.Array(graph, name, (rows, cols), meta=csr[:0, :0])


def _row_band(csr: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` sharing the matrix's index and value arrays."""
    lo, hi = csr.indptr[start], csr.indptr[stop]
    indptr = csr.indptr[start:stop + 1] - lo
    band = type(csr)((csr.data[lo:hi], csr.indices[lo:hi], indptr),
                     shape=(stop - start, csr.shape[1]))
    # scipy copies a view of a much larger array when it builds the matrix (its "prune"):
    # put the views back, so that a block on the client costs only its indptr.
    band.data, band.indices = csr.data[lo:hi], csr.indices[lo:hi]
    band.has_canonical_format = True     # a slice of a canonical matrix: skip the recheck
    return band


def from_tensor(tensor: ta.Tensor, chunks: Any = 4) -> Any:
    """A ``dask.array`` of ``ta.Tensor`` blocks, cut along mode 0 into slices balanced by
    nonzeros (``chunks``: a number of blocks or explicit slice counts); each block keeps the
    tensor's format.

    >>> import numpy as np, tensoralg as ta
    >>> T = ta.Tensor.from_numpy(np.eye(6).reshape(6, 3, 2), format="sss")
    >>> ta.dask.from_tensor(T, chunks=3).chunks[0]
    (2, 2, 2)
    """
    da = dask_array()
    from dask.highlevelgraph import HighLevelGraph

    if not isinstance(tensor, ta.Tensor):
        raise InputError(f"from_tensor takes a ta.Tensor, not {type(tensor).__name__}; use "
                         f"from_scipy for scipy.sparse matrices")
    coords, values = tensor.to_coords()
    coords = coords.T                       # (modes, nonzeros)
    order = np.argsort(coords[0], kind="stable")
    coords, values = coords[:, order], values[order]
    counts_before = np.searchsorted(coords[0], np.arange(tensor.shape[0] + 1), side="left")
    sizes = _sizes(chunks, tensor.shape[0], counts_before, "mode-0")
    name = f"ta-from-tensor-{uuid.uuid4().hex[:16]}"
    layer = {}
    edges = np.concatenate([[0], np.cumsum(sizes)])
    tail = (0,) * (tensor.ndim - 1)
    for b in range(len(sizes)):
        lo, hi = counts_before[edges[b]], counts_before[edges[b + 1]]
        part = coords[:, lo:hi].copy()
        part[0] -= edges[b]
        layer[(name, b, *tail)] = ta.Tensor.from_coords(
            part, values[lo:hi], (sizes[b], *tensor.shape[1:]), format=tensor.format)
    graph = HighLevelGraph.from_collections(name, spread(layer), dependencies=[])
    record(name, ChunkKind("tensor", int(tensor.nnz), format=tensor.format))
    chunks_out = (sizes, *((n,) for n in tensor.shape[1:]))
    return da.Array(graph, name, chunks_out, meta=np.empty((0,) * tensor.ndim,
                                                            dtype=tensor.dtype))
