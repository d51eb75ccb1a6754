"""``Tensor``: a tensor's shape, format and per-level storage arrays.

The layout (every kernel is generated against it):

- ``shape`` is in mode order, as the user sees the tensor. Storage level ``k`` stores mode
  ``format.order[k]``, of size ``shape[format.order[k]]``.
- ``levels[k]`` is a :class:`LevelArrays`. Dense: no arrays. Compressed (``s``/``u``): ``pos``
  of length ``P + 1`` for ``P`` parent positions, and ``crd``. Singleton (``q``): ``crd`` only,
  one coordinate per parent position.
- The root has one position (0). A dense level of size ``N`` under ``P`` positions has ``P * N``
  positions; the child of ``p`` at coordinate ``i`` is ``p * N + i``.
- ``vals`` holds one value per position of the last level (a dense last level stores zeros).
  An order-0 tensor has no levels and one value.
- All ``pos``/``crd`` arrays share one index dtype (int32 or int64); values are float32,
  float64, int32 or int64. Every array is 1-D and C-contiguous.

>>> import numpy as np
>>> t = Tensor.from_numpy(np.array([[0., 2.], [3., 0.]]), format="ds")
>>> t.levels[1].crd.tolist(), t.vals.tolist()
([1, 0], [2.0, 3.0])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tensoralg.errors import FormatError
from tensoralg.formats.format import Format, resolve_format

INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
VALUE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int32),
                np.dtype(np.int64), np.dtype(np.complex64), np.dtype(np.complex128))


@dataclass(frozen=True, slots=True)
class LevelArrays:
    """The arrays of one storage level: ``pos`` (compressed only) and ``crd`` (not dense)."""

    pos: np.ndarray | None = None
    crd: np.ndarray | None = None


class Tensor:
    """A tensor in some storage format; treat it as immutable.

    ``Tensor(shape, format, levels, vals)`` wraps arrays the caller built and validates them
    (``check=False`` skips this, for arrays tensoralg built itself). ``levels`` may hold
    ``LevelArrays``, ``(pos, crd)`` pairs or ``None`` for dense levels.

    >>> import numpy as np
    >>> t = Tensor((2, 3), "ds", [None, (np.array([0, 1, 1]), np.array([2]))], np.array([5.0]))
    >>> t.nnz, float(t.to_numpy()[0, 2])
    (1, 5.0)
    """

    __slots__ = ("_shape", "_format", "_levels", "_vals")

    def __init__(self, shape: Sequence[int], format: Any, levels: Sequence[Any], vals: Any,
                 check: bool = True) -> None:
        shape = _shape_tuple(shape)
        fmt = resolve_format(format, len(shape), "tensor")
        levels = tuple(_level_arrays(level) for level in levels)
        if not isinstance(vals, np.ndarray):
            vals = np.asarray(vals)
        self._shape, self._format, self._levels, self._vals = shape, fmt, levels, vals
        if check:
            from tensoralg.formats.validate import validate
            validate(self)

    @classmethod
    def trusted(cls, shape: tuple[int, ...], format: Format, levels: tuple[LevelArrays, ...],
                vals: np.ndarray) -> "Tensor":
        """Wrap arrays that the caller has already checked, with no conversion at all.

        For hot paths only: ``shape`` a tuple of ints, ``format`` a resolved ``Format`` of that
        rank, ``levels`` ``LevelArrays``, ``vals`` a 1-D array.
        """
        tensor = object.__new__(cls)
        tensor._shape, tensor._format, tensor._levels, tensor._vals = shape, format, levels, vals
        return tensor

    # -- properties -------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def format(self) -> Format:
        return self._format

    @property
    def levels(self) -> tuple[LevelArrays, ...]:
        return self._levels

    @property
    def vals(self) -> np.ndarray:
        return self._vals

    @property
    def dtype(self) -> np.dtype:
        return self._vals.dtype

    @property
    def index_dtype(self) -> np.dtype:
        """The dtype of every pos/crd array (int64 when the tensor has none)."""
        for level in self._levels:
            for array in (level.pos, level.crd):
                if array is not None:
                    return array.dtype
        return np.dtype(np.int64)

    @property
    def nnz(self) -> int:
        """The number of stored values, explicit zeros included (``len(vals)``)."""
        return int(self._vals.shape[0]) if self._vals.ndim else 1

    @property
    def ndim(self) -> int:
        return len(self._shape)

    def __repr__(self) -> str:
        return (f"Tensor(shape={self._shape}, format={self._format!r}, dtype={self.dtype}, "
                f"nnz={self.nnz})")

    def __str__(self) -> str:
        dims = "x".join(map(str, self._shape)) or "scalar"
        return f"Tensor {dims} {self._format} {self.dtype} nnz={self.nnz}"

    # -- constructors (the conversions live in convert.py and pack.py) ------------------------

    @classmethod
    def from_numpy(cls, a: Any, format: Any = None, index_dtype: Any = None) -> "Tensor":
        """A tensor holding the array ``a``; dense by default, zeros dropped for sparse levels.

        >>> import numpy as np
        >>> Tensor.from_numpy(np.eye(3), format="csr").nnz
        3
        """
        from tensoralg.formats.convert import from_numpy
        return from_numpy(a, format, index_dtype)

    @classmethod
    def from_scipy(cls, m: Any, format: Any = None) -> "Tensor":
        """A tensor from any scipy.sparse matrix or array (CSR and CSC without copying).

        >>> import scipy.sparse as sp
        >>> Tensor.from_scipy(sp.eye_array(3, format="csr")).format.spec
        'ds'
        """
        from tensoralg.formats.convert import from_scipy
        return from_scipy(m, format)

    @classmethod
    def from_sparse(cls, s: Any, format: Any = None) -> "Tensor":
        """A tensor from a pydata ``sparse`` array (COO, GCXS, ...); COO format by default."""
        from tensoralg.formats.convert import from_sparse
        return from_sparse(s, format)

    @classmethod
    def from_coords(cls, coords: Any, values: Any, shape: Sequence[int], format: Any = "coo",
                    sum_duplicates: bool = True, index_dtype: Any = None) -> "Tensor":
        """Pack coordinates and values (any order, duplicates summed) into ``format``.

        ``coords`` is ``(nnz, ndim)``, one row per entry, or ``(ndim, nnz)``, one row per mode
        (as scipy's ``coords``); when ``nnz == ndim`` it is read as ``(ndim, nnz)``.

        >>> Tensor.from_coords([[1, 0], [0, 1], [1, 0]], [1.0, 2.0, 3.0], (2, 2), "csr").vals
        array([2., 4.])
        """
        from tensoralg.formats.pack import from_coords
        return from_coords(coords, values, shape, format, sum_duplicates, index_dtype)

    # -- outputs ------------------------------------------------------------------------------

    def to_numpy(self) -> np.ndarray:
        """The dense numpy array (a new array, unless the tensor is dense in natural order)."""
        from tensoralg.formats.pack import to_numpy
        return to_numpy(self)

    def to_coords(self) -> tuple[np.ndarray, np.ndarray]:
        """``(coords, values)``: int64 coordinates ``(nnz, ndim)`` in mode order, one row per
        stored value (storage order; explicit zeros and dense-level zeros included)."""
        from tensoralg.formats.pack import to_coords
        return to_coords(self)

    def to_scipy(self, kind: str = "array") -> Any:
        """A scipy.sparse CSR (or CSC, for CSC storage) ``*_array`` or ``*_matrix``; 2-D only."""
        from tensoralg.formats.convert import to_scipy
        return to_scipy(self, kind)

    def to_sparse(self) -> Any:
        """A pydata ``sparse.COO`` array."""
        from tensoralg.formats.convert import to_sparse
        return to_sparse(self)

    def convert(self, format: Any, index_dtype: Any = None) -> "Tensor":
        """The same tensor stored in another format (``self`` when nothing changes).

        >>> import numpy as np
        >>> Tensor.from_numpy(np.eye(2)).convert("csc").format.order
        (1, 0)
        """
        from tensoralg.formats.pack import convert
        return convert(self, format, index_dtype)

    def astype(self, dtype: Any) -> "Tensor":
        """The same storage with values cast to ``dtype`` (index arrays shared)."""
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        if dtype not in VALUE_DTYPES:
            from tensoralg.errors import UnsupportedError
            raise UnsupportedError(f"value dtype {dtype} is not supported; use one of "
                                   f"{', '.join(map(str, VALUE_DTYPES))}")
        return Tensor(self._shape, self._format, self._levels, self._vals.astype(dtype),
                      check=False)


def _shape_tuple(shape: Any) -> tuple[int, ...]:
    try:
        dims = tuple(int(n) for n in shape)
        exact = all(int(n) == n for n in shape)
    except (TypeError, ValueError):
        raise FormatError(f"tensor shape {shape!r} is not a sequence of integers") from None
    if not exact or any(n < 0 for n in dims):
        raise FormatError(f"tensor shape {shape!r} must hold non-negative integers")
    return dims


def _level_arrays(level: Any) -> LevelArrays:
    match level:
        case LevelArrays():
            return level
        case None:
            return LevelArrays()
        case (pos, crd):
            return LevelArrays(_as_array(pos), _as_array(crd))
    raise FormatError(f"a level must be LevelArrays, a (pos, crd) pair or None, not "
                      f"{type(level).__name__}")


def _as_array(a: Any) -> np.ndarray | None:
    return a if a is None or isinstance(a, np.ndarray) else np.asarray(a)
