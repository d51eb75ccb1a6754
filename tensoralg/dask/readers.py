"""Chunked operands read straight from ``.mtx`` and ``.tns`` files, never loaded whole.

A first pass on the client streams the file once and keeps only a count of nonzeros per row
(per mode-0 slice), from which it draws balanced row bounds; then each block is one task that
streams the file on a worker and keeps the entries of its rows. Memory: a count per row on the
client, one block (plus a batch of lines) per task. The file must be readable at the same path
by the workers (a local cluster, or a shared file system).
"""
from __future__ import annotations

import gzip
import itertools
import os
import uuid
from typing import Any, Iterator, TextIO

import numpy as np

import tensoralg as ta
from tensoralg.dask.operands import ChunkKind, record
from tensoralg.dask.partition import balanced_bounds
from tensoralg.dask.requirement import dask_array
from tensoralg.errors import FormatError, InputError, UnsupportedError

BATCH = 1 << 18          # lines parsed at a time: bounds the reader's memory


def _open(path: str | os.PathLike) -> TextIO:
    text = os.fspath(path)
    if not os.path.exists(text):
        raise InputError(f"no such file: {text}")
    return gzip.open(text, "rt") if text.endswith(".gz") else open(text)


def _mtx_header(handle: TextIO, path: Any) -> tuple[str, str, tuple[int, int], int]:
    banner = handle.readline().split()
    if len(banner) != 5 or banner[0].lower() != "%%matrixmarket":
        raise FormatError(f"{path}: not a Matrix Market file (first line {' '.join(banner)!r})")
    layout, field, symmetry = (b.lower() for b in banner[2:5])
    if layout != "coordinate" or field not in ("real", "integer", "pattern") or \
            symmetry not in ("general", "symmetric"):
        raise UnsupportedError(f"{path}: chunked reading takes coordinate real/integer/pattern "
                               f"matrices, general or symmetric; this one is {layout} {field} "
                               f"{symmetry} (read it whole with ta.read)")
    line = handle.readline()
    while line.startswith("%"):
        line = handle.readline()
    rows, cols, nnz = (int(v) for v in line.split())
    return field, symmetry, (rows, cols), nnz


def _batches(handle: TextIO, columns: int, path: Any) -> Iterator[np.ndarray]:
    """The entry lines in batches, as float arrays of ``columns`` columns."""
    while True:
        lines = [ln for ln in itertools.islice(handle, BATCH) if ln.strip() and ln[0] != "%"]
        if not lines:
            return
        try:
            table = np.loadtxt(lines, ndmin=2, dtype=np.float64)
        except ValueError as err:
            raise FormatError(f"{path}: unreadable entry line ({err})") from None
        if table.shape[1] < columns:
            raise FormatError(f"{path}: entry lines need {columns} columns, found "
                              f"{table.shape[1]}")
        yield table


def _mtx_entries(path: Any) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(rows, cols, values), 0-based, with a symmetric matrix's mirrored entries."""
    with _open(path) as handle:
        field, symmetry, _, _ = _mtx_header(handle, path)
        width = 2 if field == "pattern" else 3
        for table in _batches(handle, width, path):
            rows = table[:, 0].astype(np.int64) - 1
            cols = table[:, 1].astype(np.int64) - 1
            values = np.ones(len(rows)) if field == "pattern" else table[:, 2]
            if symmetry == "symmetric":
                off = rows != cols
                rows, cols = np.concatenate([rows, cols[off]]), np.concatenate([cols, rows[off]])
                values = np.concatenate([values, values[off]])
            yield rows, cols, values


def read_mtx(path: str | os.PathLike, chunks: Any = 4) -> Any:
    """A ``dask.array`` of CSR row blocks from a Matrix Market file (``.mtx`` or ``.mtx.gz``),
    balanced by nonzeros, without loading the matrix whole.

    >>> import tensoralg as ta
    >>> from tensoralg import data
    >>> A = ta.dask.read_mtx(data.path("bcspwr10"), chunks=3)
    >>> A.shape, len(A.chunks[0])
    ((5300, 5300), 3)
    """
    da = dask_array()
    from dask.highlevelgraph import HighLevelGraph

    with _open(path) as handle:
        field, _, shape, _ = _mtx_header(handle, path)
    per_row = np.zeros(shape[0], dtype=np.int64)
    for rows, _, _ in _mtx_entries(path):
        _check_bounds(rows, shape[0], path, "row")
        per_row += np.bincount(rows, minlength=shape[0])
    counts_before = np.concatenate([[0], np.cumsum(per_row)])
    sizes = _chunk_sizes(chunks, counts_before)
    dtype = np.dtype(np.int64 if field == "integer" else np.float64)
    name = f"ta-read-mtx-{uuid.uuid4().hex[:16]}"
    edges = np.concatenate([[0], np.cumsum(sizes)])
    layer = {(name, b, 0): (read_mtx_rows, os.fspath(path), int(edges[b]), int(edges[b + 1]),
                            shape[1], dtype.str) for b in range(len(sizes))}
    import scipy.sparse as sp

    meta = sp.csr_array((0, 0), dtype=dtype)
    record(name, ChunkKind("scipy", int(counts_before[-1]), scipy_class=sp.csr_array))
    return da.Array(HighLevelGraph.from_collections(name, layer, dependencies=[]), name,
                    (sizes, (shape[1],)), meta=meta)


def read_mtx_rows(path: str, start: int, stop: int, columns: int, dtype: str) -> Any:
    """Rows ``start:stop`` of a Matrix Market file as CSR (one block task)."""
    import scipy.sparse as sp

    parts = []
    for rows, cols, values in _mtx_entries(path):
        keep = (rows >= start) & (rows < stop)
        parts.append((rows[keep] - start, cols[keep], values[keep]))
    rows, cols, values = (np.concatenate([p[k] for p in parts]) if parts else np.zeros(0)
                          for k in range(3))
    block = sp.coo_array((values.astype(dtype), (rows.astype(np.int64),
                                                 cols.astype(np.int64))),
                         shape=(stop - start, columns))
    return block.tocsr()


def read_tns(path: str | os.PathLike, chunks: Any = 4, shape: tuple[int, ...] | None = None,
             format: Any = "sss") -> Any:
    """A ``dask.array`` of ``ta.Tensor`` mode-0 slices from a FROSTT ``.tns`` file (1-based
    coordinates, then the value, per line), balanced by nonzeros, without loading it whole.
    ``shape`` defaults to the largest coordinate of each mode; ``format`` is a format string of
    the tensor's order (the default ``"sss"`` is CSF for order 3).

    >>> import tensoralg as ta
    >>> from tensoralg import data
    >>> T = ta.dask.read_tns(data.path("collegemsg"), chunks=2)
    >>> len(T.chunks[0]), T.ndim
    (2, 3)
    """
    da = dask_array()
    from dask.highlevelgraph import HighLevelGraph

    order, largest, per_slice = None, None, None
    for coords, _ in _tns_entries(path, None):
        if order is None:
            order = coords.shape[0]
            largest = np.zeros(order, dtype=np.int64)
            per_slice = np.zeros(0, dtype=np.int64)
        largest = np.maximum(largest, coords.max(axis=1) + 1)
        counts = np.bincount(coords[0])
        per_slice = np.pad(per_slice, (0, max(0, len(counts) - len(per_slice))))
        per_slice[:len(counts)] += counts
    if order is None:
        raise FormatError(f"{path}: no entries")
    dims = tuple(int(n) for n in largest) if shape is None else tuple(int(n) for n in shape)
    if len(dims) != order or any(m > n for m, n in zip(largest, dims)):
        raise InputError(f"{path}: its coordinates need a shape of at least "
                         f"{tuple(int(n) for n in largest)}, not {dims}")
    per_slice = np.pad(per_slice, (0, dims[0] - len(per_slice)))
    counts_before = np.concatenate([[0], np.cumsum(per_slice)])
    sizes = _chunk_sizes(chunks, counts_before)
    name = f"ta-read-tns-{uuid.uuid4().hex[:16]}"
    edges = np.concatenate([[0], np.cumsum(sizes)])
    tail = (0,) * (order - 1)
    layer = {(name, b, *tail): (read_tns_slices, os.fspath(path), int(edges[b]),
                                int(edges[b + 1]), dims, format) for b in range(len(sizes))}
    record(name, ChunkKind("tensor", int(counts_before[-1]),
                           format=ta.Format(format) if isinstance(format, str) else format))
    return da.Array(HighLevelGraph.from_collections(name, layer, dependencies=[]), name,
                    (sizes, *((n,) for n in dims[1:])),
                    meta=np.empty((0,) * order, dtype=np.float64))


def _tns_entries(path: Any, order: int | None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    with _open(path) as handle:
        for table in _batches(handle, 2, path):
            coords = table[:, :-1].T.astype(np.int64) - 1
            if (coords < 0).any():
                raise FormatError(f"{path}: .tns coordinates are 1-based; found a 0")
            yield coords, table[:, -1]


def read_tns_slices(path: str, start: int, stop: int, shape: tuple[int, ...], format: Any
                    ) -> ta.Tensor:
    """Mode-0 slices ``start:stop`` of a ``.tns`` file as a ``ta.Tensor`` (one block task)."""
    coords_parts, value_parts = [], []
    for coords, values in _tns_entries(path, len(shape)):
        keep = (coords[0] >= start) & (coords[0] < stop)
        coords_parts.append(coords[:, keep])
        value_parts.append(values[keep])
    coords = np.concatenate(coords_parts, axis=1)
    coords[0] -= start
    return ta.Tensor.from_coords(coords, np.concatenate(value_parts),
                                 (stop - start, *shape[1:]), format=format)


def _chunk_sizes(chunks: Any, counts_before: np.ndarray) -> tuple[int, ...]:
    if isinstance(chunks, (int, np.integer)):
        return balanced_bounds(counts_before, int(chunks))
    sizes = tuple(int(n) for n in chunks)
    if sum(sizes) != len(counts_before) - 1:
        raise InputError(f"chunks {sizes} must add up to {len(counts_before) - 1}")
    return sizes


def _check_bounds(index: np.ndarray, extent: int, path: Any, what: str) -> None:
    if len(index) and (index.min() < 0 or index.max() >= extent):
        raise FormatError(f"{path}: a {what} index outside 1..{extent}")
