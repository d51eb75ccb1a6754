"""Packing coordinates into level storage and unpacking it again; numpy only.

Packing sorts the entries by the format's mode order, sums duplicates, then builds the levels
top-down. Each entry carries its position in the level being built: a dense level maps parent
``p`` and coordinate ``i`` to ``p * N + i``; a compressed level gives each distinct
(parent, coordinate) pair a new position; a non-unique level gives every entry a position; a
singleton level keeps its parent's positions.

>>> t = from_coords([[0, 1], [0, 0], [2, 1]], [1.0, 2.0, 3.0], (3, 2), "ds")
>>> t.levels[1].pos.tolist(), t.levels[1].crd.tolist(), t.vals.tolist()
([0, 2, 2, 3], [0, 1, 1], [2.0, 1.0, 3.0])
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tensoralg.errors import FormatError, ShapeError, UnsupportedError
from tensoralg.formats.format import Format, resolve_format
from tensoralg.formats.level import LevelKind
from tensoralg.formats.tensor import INDEX_DTYPES, VALUE_DTYPES, LevelArrays, Tensor, _shape_tuple

_INT32_MAX = np.iinfo(np.int32).max
_INT64_MAX = np.iinfo(np.int64).max


def from_coords(coords: Any, values: Any, shape: Sequence[int], format: Any = "coo",
                sum_duplicates: bool = True, index_dtype: Any = None) -> Tensor:
    """Pack entries given by coordinates into ``format``.

    ``coords`` is an integer array of shape ``(nnz, ndim)``, one row per entry, or
    ``(ndim, nnz)``, one row per mode (as scipy and pydata store them); the number of values
    decides which. When ``nnz == ndim`` the array is read as ``(ndim, nnz)``, as scipy's ``coords``. A 1-D array is
    accepted for a 1-mode tensor. Entries may come in any order; duplicates are summed
    unless ``sum_duplicates=False``, which keeps them under a non-unique (``u``) level and is an
    error otherwise. ``index_dtype`` defaults to int32 when every index fits, else int64.

    >>> from_coords([[1, 1], [0, 2]], [5, 6], (2, 3), "coo").to_numpy().tolist()
    [[0, 0, 0], [5, 0, 6]]
    """
    shape = _shape_tuple(shape)
    fmt = resolve_format(format, len(shape), "from_coords")
    vals = _value_array(values, "from_coords: values")
    entries = _coords_matrix(coords, len(shape), vals.shape[0])
    _check_in_shape(entries, shape)
    return pack(entries, vals, shape, fmt, sum_duplicates=sum_duplicates,
                index_dtype=index_dtype)


def pack(coords: np.ndarray, vals: np.ndarray, shape: tuple[int, ...], fmt: Format,
         sorted_unique: bool = False, sum_duplicates: bool = True,
         index_dtype: Any = None) -> Tensor:
    """Pack in-range int64 coordinates ``(nnz, ndim)`` in mode order into ``fmt``.

    ``sorted_unique=True`` promises the entries are already sorted by ``fmt.order`` without
    duplicates (numpy's ``nonzero`` on a transposed array gives that), which skips the sort.
    """
    storage = coords[:, list(fmt.order)] if coords.shape[1] else coords
    sizes = [shape[m] for m in fmt.order]
    if not sorted_unique:
        storage, vals = _sort_entries(storage, vals, sizes)
        storage, vals = _merge_duplicates(storage, vals, fmt, sum_duplicates)
    idx = _choose_index_dtype(index_dtype, fmt, sizes, storage.shape[0])
    parent = np.zeros(storage.shape[0], dtype=np.int64)
    parents = 1
    levels: list[LevelArrays] = []
    for k, kind in enumerate(fmt.levels):
        crd = storage[:, k]
        match kind:
            case LevelKind.DENSE:
                parent = parent * sizes[k] + crd
                parents *= sizes[k]
                levels.append(LevelArrays())
            case LevelKind.COMPRESSED:
                new = np.ones(crd.shape[0], dtype=bool)
                new[1:] = (parent[1:] != parent[:-1]) | (crd[1:] != crd[:-1])
                counts = np.bincount(parent[new], minlength=parents)
                levels.append(LevelArrays(_pos_from_counts(counts, idx), crd[new].astype(idx)))
                parent = np.cumsum(new) - 1
                parents = int(new.sum())
            case LevelKind.COMPRESSED_NONUNIQUE:
                counts = np.bincount(parent, minlength=parents)
                levels.append(LevelArrays(_pos_from_counts(counts, idx), crd.astype(idx)))
                parent = np.arange(crd.shape[0], dtype=np.int64)
                parents = crd.shape[0]
            case LevelKind.SINGLETON:
                levels.append(LevelArrays(None, crd.astype(idx)))
    if fmt.rank and fmt.levels[-1] is LevelKind.DENSE:
        out = np.zeros(parents, dtype=vals.dtype)
        out[parent] = vals
        vals = out
    return Tensor(shape, fmt, tuple(levels), np.ascontiguousarray(vals), check=False)


def pack_dense(a: np.ndarray, fmt: Format, index_dtype: Any = None) -> Tensor:
    """Pack a numpy array (supported dtype, ``a.ndim == fmt.rank``); zeros are dropped unless
    every level is dense. An all-dense format in natural order shares ``a``'s memory."""
    if fmt.is_dense:
        vals = np.ascontiguousarray(np.transpose(a, fmt.order)).reshape(-1)
        return Tensor(a.shape, fmt, tuple(LevelArrays() for _ in fmt.levels), vals, check=False)
    stored = np.transpose(a, fmt.order)
    where = np.nonzero(stored)                       # row-major: sorted in storage order
    coords = np.empty((where[0].shape[0], a.ndim), dtype=np.int64)
    for k, mode in enumerate(fmt.order):
        coords[:, mode] = where[k]
    return pack(coords, stored[where], a.shape, fmt, sorted_unique=True,
                index_dtype=index_dtype)


def to_coords(tensor: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(coords (nnz, ndim) int64 in mode order, values)``, one row per stored value.

    >>> c, v = to_coords(Tensor.from_numpy(np.array([[0, 7], [8, 0]]), "csc"))
    >>> c.tolist(), v.tolist()
    ([[1, 0], [0, 1]], [8, 7])
    """
    fmt = tensor.format
    columns: list[np.ndarray] = []
    parents = 1
    for k, (kind, arrays) in enumerate(zip(fmt.levels, tensor.levels)):
        size = tensor.shape[fmt.order[k]]
        match kind:
            case LevelKind.DENSE:
                columns = [np.repeat(c, size) for c in columns]
                columns.append(np.tile(np.arange(size, dtype=np.int64), parents))
                parents *= size
            case LevelKind.COMPRESSED | LevelKind.COMPRESSED_NONUNIQUE:
                owner = np.repeat(np.arange(parents, dtype=np.int64), np.diff(arrays.pos))
                columns = [c[owner] for c in columns]
                columns.append(arrays.crd.astype(np.int64))
                parents = arrays.crd.shape[0]
            case LevelKind.SINGLETON:
                columns.append(arrays.crd.astype(np.int64))
    coords = np.empty((parents, fmt.rank), dtype=np.int64)
    for k, mode in enumerate(fmt.order):
        coords[:, mode] = columns[k]
    return coords, tensor.vals


def to_numpy(tensor: Tensor) -> np.ndarray:
    """The dense array; duplicates under a non-unique level are summed."""
    fmt = tensor.format
    if fmt.is_dense:
        stored = tensor.vals.reshape([tensor.shape[m] for m in fmt.order])
        return stored if fmt.is_identity_order else np.ascontiguousarray(
            np.transpose(stored, np.argsort(fmt.order)))
    coords, vals = to_coords(tensor)
    out = np.zeros(tensor.shape, dtype=tensor.dtype)
    index = tuple(coords.T)
    if LevelKind.COMPRESSED_NONUNIQUE in fmt.levels:
        np.add.at(out, index, vals)
    else:
        out[index] = vals
    return out


def summed_duplicates(tensor: Tensor) -> Tensor:
    """``tensor`` with repeated coordinates under a non-unique (``u``) level summed into one
    entry, in the same format and index dtype; ``tensor`` itself when none repeats.

    Kernels take each stored entry as the value at its coordinates: copies, products and
    intersections of a tensor holding two entries at one coordinate would keep one of them
    or pair them up, so the runtime sums them first (as ``to_numpy`` does).

    >>> t = from_coords([[0, 1], [0, 1], [1, 0]], [1.0, 2.0, 4.0], (2, 2), "coo",
    ...                 sum_duplicates=False)
    >>> (t.nnz, summed_duplicates(t).nnz, summed_duplicates(t).vals.tolist())
    (3, 2, [3.0, 4.0])
    """
    fmt = tensor.format
    if LevelKind.COMPRESSED_NONUNIQUE not in fmt.levels or tensor.nnz < 2:
        return tensor
    coords, vals = to_coords(tensor)
    storage = coords[:, list(fmt.order)]
    # Valid storage keeps the coordinate tuples sorted (formats/validate.py): repeats are
    # neighbours.
    if np.all(np.any(storage[1:] != storage[:-1], axis=1)):
        return tensor
    return pack(coords, vals, tensor.shape, fmt, index_dtype=tensor.index_dtype)


def convert(tensor: Tensor, format: Any, index_dtype: Any = None) -> Tensor:
    """``tensor`` stored in ``format``; the same object when format and index dtype match."""
    fmt = resolve_format(format, tensor.ndim, "convert")
    idx = None if index_dtype is None else np.dtype(index_dtype)
    has_index = any(kind is not LevelKind.DENSE for kind in fmt.levels)
    if fmt == tensor.format and (idx is None or idx == tensor.index_dtype or not has_index):
        return tensor
    if fmt.is_dense:
        return pack_dense(to_numpy(tensor), fmt)
    coords, vals = to_coords(tensor)
    if tensor.format.levels and tensor.format.levels[-1] is LevelKind.DENSE:
        keep = vals != 0                             # dense padding is not stored sparsely
        coords, vals = coords[keep], vals[keep]
    old_idx = tensor.index_dtype if any(k is not LevelKind.DENSE for k in tensor.format.levels) \
        else None
    return pack(coords, vals, tensor.shape, fmt, index_dtype=idx if idx is not None else old_idx)


# -- helpers ------------------------------------------------------------------------------------

def _value_array(values: Any, what: str) -> np.ndarray:
    vals = np.asarray(values)
    if vals.dtype not in VALUE_DTYPES:
        raise UnsupportedError(f"{what}: dtype {vals.dtype} is not supported; use float32, "
                               f"float64, int32 or int64")
    if vals.ndim != 1:
        raise ShapeError(f"{what} must be 1-D, not of shape {vals.shape}")
    return vals


def _coords_matrix(coords: Any, ndim: int, nnz: int) -> np.ndarray:
    c = np.asarray(coords)
    if c.size == 0:
        if nnz == 0 or ndim == 0:
            return np.zeros((nnz, ndim), dtype=np.int64)
        _coords_error(c, ndim, nnz)
    if c.dtype.kind not in "iu":
        if c.dtype.kind == "f" and np.all(np.mod(c, 1) == 0):
            c = c.astype(np.int64)
        else:
            raise FormatError(f"from_coords: coordinates must be integers, not {c.dtype}")
    if ndim == 1 and c.ndim == 1:
        c = c.reshape(-1, 1)
    if c.ndim != 2:
        _coords_error(c, ndim, nnz)
    if c.shape == (ndim, nnz):  # checked first: a square array is read as scipy's coords
        return np.ascontiguousarray(c.T, dtype=np.int64)
    if c.shape == (nnz, ndim):
        return c.astype(np.int64, copy=False)
    return _coords_error(c, ndim, nnz)


def _coords_error(c: np.ndarray, ndim: int, nnz: int) -> np.ndarray:
    raise ShapeError(f"from_coords: coordinates of shape {c.shape} do not match {nnz} values "
                     f"of a {ndim}-mode tensor; give ({nnz}, {ndim}) or ({ndim}, {nnz})")


def _check_in_shape(coords: np.ndarray, shape: tuple[int, ...]) -> None:
    if coords.shape[0] == 0:
        return
    low, high = coords.min(axis=0), coords.max(axis=0)
    for mode, size in enumerate(shape):
        if low[mode] < 0 or high[mode] >= size:
            bad = low[mode] if low[mode] < 0 else high[mode]
            raise ShapeError(f"from_coords: coordinate {bad} of mode {mode} is outside "
                             f"[0, {size})")


def _sort_entries(storage: np.ndarray, vals: np.ndarray,
                  sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Sort entries lexicographically by storage coordinates. Not stable: duplicates are summed
    in an unspecified (but deterministic) order, for a sort three times faster."""
    if storage.shape[0] < 2 or storage.shape[1] == 0:
        return storage, vals
    if int(np.prod([max(n, 1) for n in sizes], dtype=object)) <= _INT64_MAX:
        key = storage[:, 0].copy()                   # one linear key sorts much faster
        for k in range(1, len(sizes)):
            key *= sizes[k]
            key += storage[:, k]
        if np.all(key[1:] >= key[:-1]):
            return storage, vals
        order = np.argsort(key)
    else:
        order = np.lexsort(storage.T[::-1])          # lexsort sorts by the last key first
    return storage[order], vals[order]


def _merge_duplicates(storage: np.ndarray, vals: np.ndarray, fmt: Format,
                      sum_duplicates: bool) -> tuple[np.ndarray, np.ndarray]:
    n = storage.shape[0]
    if fmt.rank == 0:
        if n != 1 and not (n == 0 or sum_duplicates):
            raise FormatError("from_coords: an order-0 tensor holds exactly one value")
        total = vals.sum(dtype=vals.dtype) if n else vals.dtype.type(0)
        return storage[:1].reshape(1, 0), np.array([total], dtype=vals.dtype)
    if n < 2:
        return storage, vals
    first = np.ones(n, dtype=bool)
    first[1:] = np.any(storage[1:] != storage[:-1], axis=1)
    if first.all():
        return storage, vals
    if not sum_duplicates:
        if LevelKind.COMPRESSED_NONUNIQUE in fmt.levels:
            return storage, vals
        raise FormatError(f"from_coords: duplicate coordinates {storage[~first][0].tolist()} "
                          f"(storage order) cannot be kept in format {fmt}, whose levels are "
                          f"unique; pass sum_duplicates=True or use a 'u' level")
    starts = np.flatnonzero(first)
    return storage[first], np.add.reduceat(vals, starts)


def _choose_index_dtype(index_dtype: Any, fmt: Format, sizes: list[int], nnz: int) -> np.dtype:
    positions = max([nnz, *sizes, 0])
    if index_dtype is not None:
        idx = np.dtype(index_dtype)
        if idx not in INDEX_DTYPES:
            raise UnsupportedError(f"index dtype {idx} is not supported; use int32 or int64")
        if positions > np.iinfo(idx).max:
            raise UnsupportedError(f"index dtype {idx} cannot hold {positions}")
        return idx
    return np.dtype(np.int32) if positions <= _INT32_MAX else np.dtype(np.int64)


def _pos_from_counts(counts: np.ndarray, idx: np.dtype) -> np.ndarray:
    pos = np.empty(counts.shape[0] + 1, dtype=idx)
    pos[0] = 0
    np.cumsum(counts, out=pos[1:])
    return pos
