"""Turning what a kernel wrote back into tensors.

A sparse output's buffers were allocated by the kernel with the C allocator; they are adopted
without copying: each becomes a NumPy array whose memory is released with ``free`` when the
array (and every view of it) is gone.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from tensoralg.formats.format import Format
from tensoralg.formats.level import LevelKind
from tensoralg.formats.tensor import LevelArrays, Tensor
from tensoralg.runtime.args import OutputBuffers

_libc = ctypes.CDLL(None)
_free = _libc.free
_free.argtypes = [ctypes.c_void_p]
_free.restype = None
_libc.malloc.argtypes, _libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
_realloc = _libc.realloc
_realloc.argtypes, _realloc.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_void_p

# Room left unused past a result's entries is given back when it is at least this many bytes
# and more than the entries take: a first capacity from a loose bound (threads.entry_bounds)
# would otherwise be held for as long as the result lives.
SHRINK_MIN_BYTES = 1 << 20


class _Owner:
    """Frees a kernel's buffer when the ctypes view that holds it (the base of every NumPy
    array over it) is collected. A plain ``__del__`` costs a fraction of ``weakref.finalize``,
    which registers each buffer in a global table: three of those were a tenth of the Python
    time of a small sparse call."""

    __slots__ = ("address",)

    def __init__(self, address: int) -> None:
        self.address = address

    def __del__(self, free=_free) -> None:   # bound early: module globals go at shutdown
        free(self.address)


def adopt(address: int | None, count: int, dtype: np.dtype) -> np.ndarray:
    """A NumPy array over ``count`` elements at ``address`` that frees the memory when dropped.

    >>> import gc
    >>> data = np.arange(4.0)
    >>> address = _libc.malloc(data.nbytes)
    >>> _ = ctypes.memmove(address, data.ctypes.data, data.nbytes)
    >>> adopted = adopt(address, 4, np.float64)
    >>> (adopted + 1).tolist(), adopted[2:].base is not None
    ([1.0, 2.0, 3.0, 4.0], True)
    """
    dtype = np.dtype(dtype)
    if not address:
        return np.zeros(count, dtype)
    if count == 0:
        _free(address)
        return np.empty(0, dtype)
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    buffer._owner = _Owner(address)    # dies with the view, after every array over it
    return np.frombuffer(buffer, dtype=dtype, count=count)


def shrunk(address: int | None, count: int, room: int, dtype: np.dtype) -> int | None:
    """``address``, a block with room for at least ``room`` elements of which ``count`` are
    used, cut down to ``count`` when the rest is large (``SHRINK_MIN_BYTES``). Shrinking moves
    nothing (glibc splits the block, or remaps a mapped one); where ``realloc`` fails the block
    stays as it was."""
    itemsize = np.dtype(dtype).itemsize
    if not address or count <= 0 or room - count <= count or \
            (room - count) * itemsize < SHRINK_MIN_BYTES:
        return address
    return _realloc(address, count * itemsize) or address


def release(output: OutputBuffers) -> None:
    """Free whatever the kernel handed back (after a failed run)."""
    for handle in output.handles.values():
        if handle.value:
            _free(handle.value)
            handle.value = None


def sparse_result(shape: tuple[int, ...], fmt: Format, index_dtype: np.dtype,
                  value_dtype: np.dtype, output: OutputBuffers) -> Tensor:
    """The output tensor assembled by a kernel with dense levels followed by compressed ones."""
    assert output.sizes is not None
    levels: list[LevelArrays] = []
    positions = 1
    for k, kind in enumerate(fmt.levels):
        size = shape[fmt.order[k]]
        if kind is LevelKind.DENSE:
            levels.append(LevelArrays())
            positions *= size
            continue
        count = int(output.sizes[k])
        pos = adopt(output.handles[f"{k}.pos"].value, positions + 1, index_dtype)
        crd = adopt(shrunk(output.handles[f"{k}.crd"].value, count, output.capacity,
                           index_dtype), count, index_dtype)
        levels.append(LevelArrays(pos, crd))
        positions = count
    vals = adopt(shrunk(output.handles["vals"].value, positions, output.capacity, value_dtype),
                 positions, value_dtype)
    for handle in output.handles.values():
        handle.value = None
    # Every array was just made here from the kernel's buffers: no conversion or check needed.
    return narrowed_indices(Tensor.trusted(tuple(shape), fmt, tuple(levels), vals))


def pattern_result(shape: tuple[int, ...], fmt: Format, index_dtype: np.dtype,
                   pattern: Sequence[LevelArrays], vals: np.ndarray) -> Tensor:
    """The output of a kernel that wrote ``vals`` at the positions of the operand whose stored
    entries the output shares (``lower/pattern.py``), given its levels: their index arrays,
    copied (the result must not change when the operand does) in the output's index dtype, or
    in int32 where those values fit it, as ``narrowed_indices`` chooses.

    >>> fmt = Format([LevelKind.DENSE, LevelKind.COMPRESSED])
    >>> a = Tensor.trusted((2, 3), fmt, (LevelArrays(), LevelArrays(
    ...     np.array([0, 1, 2], np.int32), np.array([2, 0], np.int32))), np.array([1.0, 2.0]))
    >>> z = pattern_result((2, 3), fmt, np.dtype(np.int64), a.levels, np.array([5.0, 6.0]))
    >>> z.levels[1].crd.tolist(), z.vals.tolist(), z.levels[1].crd is a.levels[1].crd
    ([2, 0], [5.0, 6.0], False)
    >>> z.index_dtype
    dtype('int32')
    """
    if index_dtype == np.int64 and max(shape, default=0) <= _INT32_MOST and \
            vals.shape[0] <= _INT32_MOST:
        index_dtype = np.dtype(np.int32)
    levels = tuple(LevelArrays(None if level.pos is None else level.pos.astype(index_dtype),
                               None if level.crd is None else level.crd.astype(index_dtype))
                   for level in pattern)
    return Tensor.trusted(tuple(shape), fmt, levels, vals)


_INT32_MOST = np.iinfo(np.int32).max


def pattern_positions(tensor: Tensor, levels: int) -> int:
    """The positions of ``tensor``'s first ``levels`` levels: where a kernel whose output
    shares that prefix of its pattern (``lower/pattern.py``) stores its values.

    >>> from tensoralg.formats import CSR
    >>> t = Tensor.from_numpy(np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 0.0]]), CSR)
    >>> pattern_positions(t, 2), pattern_positions(t, 1)
    (2, 2)
    """
    count = 1
    for k, (kind, level) in enumerate(zip(tensor.format.levels[:levels], tensor.levels)):
        if kind is LevelKind.DENSE:
            count *= tensor.shape[tensor.format.order[k]]
        elif level.pos is not None:
            count = int(level.pos[-1]) if len(level.pos) else 0
    return count


def narrowed_indices(tensor: Tensor) -> Tensor:
    """``tensor`` (a kernel's output) with int32 ``pos`` and ``crd`` arrays where the kernel
    assembled int64 ones whose values int32 holds, as scipy chooses for its own results.

    A kernel's output indices are int64 whenever the output's shape has 2**31 elements or more
    (``api._out_index_dtype``: the entries are not known before the kernel runs), which every
    matrix past 46341 rows and columns has. Every coordinate is below its dimension and every
    position at most its level's entries, so when those fit, one copy per array narrows them:
    scipy's constructor would otherwise check each array's bounds and then copy it (2 of the 13
    ms of luxembourg_osm squared, whose indices it then kept as int32 all the same).

    >>> from tensoralg.formats.level import LevelKind
    >>> fmt = Format([LevelKind.DENSE, LevelKind.COMPRESSED])
    >>> wide = Tensor.trusted((2, 3), fmt, (LevelArrays(), LevelArrays(
    ...     np.array([0, 1, 2]), np.array([2, 0]))), np.array([1.0, 2.0]))
    >>> narrowed_indices(wide).levels[1].crd.dtype
    dtype('int32')
    """
    if tensor.index_dtype != np.int64 or max(tensor.shape, default=0) > _INT32_MOST:
        return tensor
    levels = tensor.levels
    if any(level.crd is not None and level.crd.shape[0] > _INT32_MOST for level in levels):
        return tensor
    narrow = tuple(LevelArrays(None if level.pos is None else level.pos.astype(np.int32),
                               None if level.crd is None else level.crd.astype(np.int32))
                   for level in levels)
    return Tensor.trusted(tensor.shape, tensor.format, narrow, tensor.vals)
