"""Check that storage arrays describe a valid tensor; vectorized, so it is cheap to run on
every array that tensoralg did not build.

Every fault raises ``FormatError`` naming the part, e.g.
``level 1 (compressed): pos is not nondecreasing at position 17``.

>>> import numpy as np
>>> from tensoralg.formats.tensor import Tensor
>>> Tensor((2, 2), "ds", [None, ([0, 2, 1], [0, 1])], np.ones(2))
Traceback (most recent call last):
...
tensoralg.errors.FormatError: tensor: level 1 (compressed): pos is not nondecreasing at position 2
"""
from __future__ import annotations

import numpy as np

from tensoralg.errors import FormatError
from tensoralg.formats.format import Format
from tensoralg.formats.level import LevelKind
from tensoralg.formats.tensor import INDEX_DTYPES, VALUE_DTYPES, LevelArrays, Tensor

_KIND_NAMES = {
    LevelKind.DENSE: "dense",
    LevelKind.COMPRESSED: "compressed",
    LevelKind.COMPRESSED_NONUNIQUE: "compressed non-unique",
    LevelKind.SINGLETON: "singleton",
}


def validate(tensor: Tensor, what: str = "tensor") -> Tensor:
    """Raise ``FormatError`` unless ``tensor``'s arrays are valid storage; return it.

    ``what`` names the tensor in messages (``"operand A"``).

    >>> import numpy as np
    >>> validate(Tensor.from_numpy(np.eye(2), "csr")).nnz
    2
    """
    validate_storage(tensor.shape, tensor.format, tensor.levels, tensor.vals, what)
    return tensor


def validate_storage(shape: tuple[int, ...], fmt: Format, levels: tuple[LevelArrays, ...],
                     vals: np.ndarray, what: str = "tensor") -> None:
    """Validate raw storage parts; see :func:`validate`."""
    if fmt.rank != len(shape):
        raise FormatError(f"{what}: format {fmt} has {fmt.rank} levels but shape {shape} has "
                          f"{len(shape)} modes")
    if len(levels) != fmt.rank:
        raise FormatError(f"{what}: format {fmt} needs {fmt.rank} levels of arrays, got "
                          f"{len(levels)}")
    index_dtype = _check_index_dtypes(fmt, levels, what)
    parents = 1
    for k, (kind, arrays) in enumerate(zip(fmt.levels, levels)):
        size = shape[fmt.order[k]]
        part = f"{what}: level {k} ({_KIND_NAMES[kind]})"
        parents = _check_level(kind, arrays, parents, size, part, index_dtype)
        if kind is LevelKind.SINGLETON:
            _check_singleton_order(fmt, levels, k, part)
    _check_vals(vals, parents, what)


def _check_index_dtypes(fmt: Format, levels: tuple[LevelArrays, ...], what: str) -> np.dtype | None:
    seen: np.dtype | None = None
    for k, arrays in enumerate(levels):
        for name in ("pos", "crd"):
            array = getattr(arrays, name)
            if array is None:
                continue
            part = f"{what}: level {k} ({_KIND_NAMES[fmt.levels[k]]}): {name}"
            if not isinstance(array, np.ndarray):
                raise FormatError(f"{part} is a {type(array).__name__}, not a numpy array")
            if array.dtype not in INDEX_DTYPES:
                raise FormatError(f"{part} has dtype {array.dtype}; index arrays must be int32 "
                                  f"or int64")
            if seen is not None and array.dtype != seen:
                raise FormatError(f"{part} has dtype {array.dtype} but another index array has "
                                  f"{seen}; all index arrays of a tensor share one dtype")
            if array.ndim != 1:
                raise FormatError(f"{part} must be 1-D, not {array.ndim}-D")
            if not array.flags.c_contiguous:
                raise FormatError(f"{part} is not contiguous; pass numpy.ascontiguousarray(...)")
            seen = array.dtype
    return seen


def _check_level(kind: LevelKind, arrays: LevelArrays, parents: int, size: int, part: str,
                 index_dtype: np.dtype | None) -> int:
    """Check one level's arrays; return its number of positions."""
    if kind is LevelKind.DENSE:
        if arrays.pos is not None or arrays.crd is not None:
            raise FormatError(f"{part} stores no arrays, but pos or crd was given")
        return parents * size
    if arrays.crd is None:
        raise FormatError(f"{part}: crd is missing")
    crd = arrays.crd
    if kind is LevelKind.SINGLETON:
        if arrays.pos is not None:
            raise FormatError(f"{part} stores no pos array, but one was given")
        if crd.shape[0] != parents:
            raise FormatError(f"{part}: crd has length {crd.shape[0]} but the parent level has "
                              f"{parents} positions")
        _check_range(crd, size, part)
        return parents
    if arrays.pos is None:
        raise FormatError(f"{part}: pos is missing")
    pos = arrays.pos
    if pos.shape[0] != parents + 1:
        raise FormatError(f"{part}: pos has length {pos.shape[0]} but must have "
                          f"{parents + 1} (parent positions + 1)")
    if pos[0] != 0:
        raise FormatError(f"{part}: pos[0] is {pos[0]}, not 0")
    bad = np.flatnonzero(pos[1:] < pos[:-1])
    if bad.size:
        raise FormatError(f"{part}: pos is not nondecreasing at position {bad[0] + 1}")
    if pos[-1] != crd.shape[0]:
        raise FormatError(f"{part}: pos[-1] is {pos[-1]} but crd has length {crd.shape[0]}")
    _check_range(crd, size, part)
    _check_segments_sorted(pos, crd, kind is LevelKind.COMPRESSED, part)
    return int(crd.shape[0])


def _check_range(crd: np.ndarray, size: int, part: str) -> None:
    if crd.size == 0:
        return
    low, high = crd.min(), crd.max()
    if low < 0 or high >= size:
        bad = int(np.flatnonzero((crd < 0) | (crd >= size))[0])
        raise FormatError(f"{part}: crd[{bad}] = {crd[bad]} is outside [0, {size})")


def _segment_interior(pos: np.ndarray, n: int) -> np.ndarray:
    """Mask of length n-1: True where positions i and i+1 lie in the same segment."""
    starts = np.zeros(n, dtype=bool)
    inner = pos[1:-1]
    starts[inner[inner < n]] = True
    return ~starts[1:]


def _check_segments_sorted(pos: np.ndarray, crd: np.ndarray, strict: bool, part: str) -> None:
    n = crd.shape[0]
    if n < 2:
        return
    step = np.diff(crd)
    wrong = (step <= 0) if strict else (step < 0)
    if not wrong.any():
        return
    bad = np.flatnonzero(wrong & _segment_interior(pos, n))
    if bad.size:
        order = "strictly increasing" if strict else "nondecreasing"
        raise FormatError(f"{part}: crd is not {order} within its segment at position "
                          f"{bad[0] + 1}")


def _check_singleton_order(fmt: Format, levels: tuple[LevelArrays, ...], k: int,
                           part: str) -> None:
    """Under a non-unique level, the coordinate tuples (u, q, ..., q up to level k) must be
    sorted within each segment, so that kernels may treat singleton levels as ordered."""
    top = k
    while fmt.levels[top] is LevelKind.SINGLETON:
        top -= 1
    n = levels[k].crd.shape[0]
    if n < 2:
        return
    undecided = _segment_interior(levels[top].pos, n)
    for level in range(top, k):
        crd = levels[level].crd
        undecided &= crd[1:] == crd[:-1]
    crd = levels[k].crd
    bad = np.flatnonzero(undecided & (crd[1:] < crd[:-1]))
    if bad.size:
        raise FormatError(f"{part}: crd is not sorted among equal coordinates of the levels "
                          f"above at position {bad[0] + 1}")


def _check_vals(vals: np.ndarray, positions: int, what: str) -> None:
    if not isinstance(vals, np.ndarray):
        raise FormatError(f"{what}: vals is a {type(vals).__name__}, not a numpy array")
    if vals.dtype not in VALUE_DTYPES:
        raise FormatError(f"{what}: vals has dtype {vals.dtype}; values must be float32, "
                          f"float64, int32 or int64")
    if vals.ndim != 1:
        raise FormatError(f"{what}: vals must be 1-D, not {vals.ndim}-D")
    if not vals.flags.c_contiguous:
        raise FormatError(f"{what}: vals is not contiguous; pass numpy.ascontiguousarray(...)")
    if vals.shape[0] != positions:
        raise FormatError(f"{what}: vals has length {vals.shape[0]} but the last level has "
                          f"{positions} positions")
