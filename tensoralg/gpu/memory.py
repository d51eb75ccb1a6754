"""Tensors in device memory: `DeviceArray`, `DeviceTensor`, and the copies to and from them.

A `DeviceArray` is a typed, shaped view of device memory that exposes
``__cuda_array_interface__``, so CuPy (and Numba, PyTorch) use it without copying; a
`DeviceTensor` holds a tensor's level arrays and values as device arrays, with the same layout
as ``ta.Tensor`` (``tensoralg/formats/tensor.py``). CuPy arrays and ``cupyx.scipy.sparse``
CSR/CSC/COO matrices become device tensors without copying (COO is converted to CSR on the
device; a matrix that is not canonical is canonicalized on a copy, as scipy inputs are).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensoralg.errors import InputError
from tensoralg.formats import Format, LevelArrays, Tensor, bind, dense, resolve_format
from tensoralg.gpu.choose import RowStats, row_stats
from tensoralg.gpu.driver import Buffer, Driver


@dataclass(frozen=True, slots=True, eq=False)
class DeviceArray:
    """``shape`` values of ``dtype`` at device address ``ptr``, C-contiguous.

    ``owner`` keeps the memory alive (a driver buffer, or the CuPy array it came from).
    """

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    owner: object = field(default=None, repr=False)
    driver: Any = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None}

    def reshape(self, shape: tuple[int, ...]) -> "DeviceArray":
        """The same memory seen with another shape of the same size."""
        if math.prod(shape) != self.size:
            raise InputError(f"cannot view {self.size} values as shape {shape}")
        return DeviceArray(self.ptr, tuple(shape), self.dtype, self.owner, self.driver)

    def to_host(self) -> np.ndarray:
        """A NumPy copy of the values."""
        host = np.empty(self.shape, self.dtype)
        if self.size:
            _driver_of(self).copy_out(host, self.ptr)
        return host

    def __str__(self) -> str:
        return f"DeviceArray {self.shape} {self.dtype} at {self.ptr:#x}"


@dataclass(frozen=True, slots=True, eq=False)
class DeviceTensor:
    """A tensor whose storage arrays live on the device (the layout of ``ta.Tensor``)."""

    shape: tuple[int, ...]
    format: Format
    levels: tuple[LevelArrays, ...]      # pos/crd are DeviceArrays (or None)
    vals: DeviceArray
    source: object = field(default=None, repr=False)   # the CuPy object it came from, if any
    stats: tuple[RowStats | None, ...] = field(default=(), repr=False)   # by level, if known

    def row_stats(self, level: int) -> RowStats:
        """The row statistics of compressed level ``level``: known from the upload, computed
        on the device by CuPy for a CuPy matrix, else from a copy of its pos array."""
        if level < len(self.stats) and self.stats[level] is not None:
            return self.stats[level]          # type: ignore[return-value]
        pos = self.levels[level].pos
        assert pos is not None
        if self.source is not None:
            import cupy

            lengths = cupy.diff(cupy.asarray(pos))
            longest = int(lengths.max()) if lengths.size else 0
            first_last = cupy.asnumpy(cupy.asarray(pos)[[0, -1]])
            return RowStats(pos.size - 1, int(first_last[1] - first_last[0]), longest)
        return row_stats(pos.to_host())

    @property
    def dtype(self) -> np.dtype:
        return self.vals.dtype

    @property
    def index_dtype(self) -> np.dtype:
        for level in self.levels:
            for array in (level.pos, level.crd):
                if array is not None:
                    return array.dtype
        return np.dtype(np.int64)

    @property
    def nnz(self) -> int:
        return self.vals.size

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def to_host(self) -> Tensor:
        """The tensor copied to host memory, as a ``ta.Tensor``."""
        levels = tuple(LevelArrays(*(None if a is None else a.to_host()
                                     for a in (level.pos, level.crd)))
                       for level in self.levels)
        return Tensor.trusted(self.shape, self.format, levels, self.vals.to_host())

    def __str__(self) -> str:
        dims = "x".join(map(str, self.shape)) or "scalar"
        return f"DeviceTensor {dims} {self.format} {self.dtype} nnz={self.nnz}"


def _driver_of(array: DeviceArray) -> Driver:
    if array.driver is not None:
        return array.driver
    from tensoralg.gpu.context import gpu_context

    return gpu_context().driver


# ---------------------------------------------------------------------------------------------
# Copies


def upload(driver: Driver, array: np.ndarray) -> DeviceArray:
    """A device copy of ``array`` (C-contiguous; a 0-d array stays 0-d)."""
    array = np.ascontiguousarray(array).reshape(np.shape(array))
    buffer: Buffer = driver.allocate(array.nbytes)
    driver.copy_in(buffer.ptr, array)
    return DeviceArray(buffer.ptr, array.shape, array.dtype, buffer, driver)


def empty(driver: Driver, shape: tuple[int, ...], dtype: Any, zero: bool = False) -> DeviceArray:
    """New device memory for ``shape`` values of ``dtype`` (zeroed if asked)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    buffer = driver.allocate(nbytes)
    if zero:
        driver.zero(buffer.ptr, nbytes)
    return DeviceArray(buffer.ptr, tuple(shape), dtype, buffer, driver)


def dense_tensor(array: DeviceArray) -> DeviceTensor:
    """``array`` as a dense `DeviceTensor` of its shape, sharing its memory (no copy): the
    operand a kernel takes for a device array.

    >>> # dense_tensor(upload(driver, np.ones((2, 3)))).format  -> dense 2-D
    """
    return DeviceTensor(array.shape, dense(array.ndim), tuple(LevelArrays() for _ in array.shape),
                        array.reshape((array.size,)))


def upload_tensor(driver: Driver, tensor: Tensor, stats: bool = False) -> DeviceTensor:
    """A device copy of every storage array of ``tensor`` (with the row statistics of its
    compressed levels if asked: for device tensors used in many calls)."""
    levels = tuple(LevelArrays(*(None if a is None else upload(driver, a)
                                 for a in (level.pos, level.crd)))
                   for level in tensor.levels)
    known = tuple(row_stats(level.pos) if stats and level.pos is not None else None
                  for level in tensor.levels)
    return DeviceTensor(tensor.shape, tensor.format, levels, upload(driver, tensor.vals),
                        stats=known)


def to_device(operand: Any, driver: Driver | None = None) -> DeviceTensor:
    """``operand`` (a NumPy array, scipy sparse matrix, ``ta.Tensor``, CuPy array or
    ``cupyx.scipy.sparse`` matrix) as a `DeviceTensor`; device inputs are not copied.

    >>> # A_gpu = to_device(scipy.sparse.random(1000, 1000, density=0.01, format="csr"))
    """
    if isinstance(operand, DeviceTensor):
        return operand
    found = from_cupy(operand)
    if found is not None:
        return found
    if driver is None:
        from tensoralg.gpu.context import gpu_context

        driver = gpu_context().driver
    tensor = operand if isinstance(operand, Tensor) else bind(operand)
    return upload_tensor(driver, tensor, stats=True)


def to_host(value: Any) -> Any:
    """A device result (`DeviceArray`, `DeviceTensor`) copied to the host: a NumPy array or a
    ``ta.Tensor``; anything else is returned as it is."""
    if isinstance(value, (DeviceArray, DeviceTensor)):
        return value.to_host()
    return value


# ---------------------------------------------------------------------------------------------
# CuPy


def is_cupy(value: Any) -> bool:
    """Whether ``value`` is a CuPy array or ``cupyx.scipy.sparse`` matrix (CuPy is not
    imported to find out)."""
    return type(value).__module__.split(".")[0] in ("cupy", "cupyx")


def from_cupy(value: Any) -> DeviceTensor | None:
    """A CuPy dense array or sparse matrix as a `DeviceTensor` sharing its memory, or None
    when ``value`` is not a CuPy object."""
    if not is_cupy(value):
        return None
    if hasattr(value, "__cuda_array_interface__"):
        array = _cupy_array(value, "a CuPy array")
        return DeviceTensor(array.shape, dense(array.ndim),
                            tuple(LevelArrays() for _ in array.shape),
                            array.reshape((array.size,)), value)
    kind = getattr(value, "format", None)
    if kind == "coo":
        value = value.tocsr()
        kind = "csr"
    if kind not in ("csr", "csc"):
        raise InputError(f"CuPy sparse matrices are taken as CSR, CSC or COO, not "
                         f"{type(value).__name__}")
    if not getattr(value, "has_canonical_format", True):
        value = value.copy()
        value.sum_duplicates()      # sorts indices too
    pos = _cupy_array(value.indptr, "indptr")
    crd = _cupy_array(value.indices, "indices")
    if pos.dtype != crd.dtype:
        raise InputError(f"CuPy sparse matrix has indptr {pos.dtype} but indices {crd.dtype}")
    fmt = resolve_format("csr" if kind == "csr" else "csc", 2, "operand")
    return DeviceTensor(tuple(value.shape), fmt, (LevelArrays(), LevelArrays(pos, crd)),
                        _cupy_array(value.data, "data"), value)


def _cupy_array(value: Any, what: str) -> DeviceArray:
    interface = value.__cuda_array_interface__
    strides = interface.get("strides")
    dtype = np.dtype(interface["typestr"])
    shape = tuple(interface["shape"])
    if strides is not None and strides != _c_strides(shape, dtype.itemsize):
        raise InputError(f"{what} is not C-contiguous; pass cupy.ascontiguousarray(...)")
    return DeviceArray(int(interface["data"][0]), shape, dtype, value)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def as_cupy(value: DeviceArray | DeviceTensor) -> Any:
    """A device result as a CuPy object sharing its memory: ``cupy.ndarray`` for a dense
    array, ``cupyx.scipy.sparse`` CSR/CSC for a matrix stored dense then compressed."""
    import cupy

    if isinstance(value, DeviceArray):
        return cupy.asarray(value)
    if value.format.is_dense:
        return cupy.asarray(value.vals).reshape(value.shape)
    import cupyx.scipy.sparse as cusparse

    level = value.levels[1]
    parts = (cupy.asarray(value.vals), cupy.asarray(level.crd), cupy.asarray(level.pos))
    if value.format.order == (0, 1):
        return cusparse.csr_matrix(parts, shape=value.shape)
    return cusparse.csc_matrix(parts, shape=value.shape)


__all__ = ["DeviceArray", "DeviceTensor", "as_cupy", "dense_tensor", "empty", "from_cupy",
           "is_cupy", "to_device", "to_host", "upload", "upload_tensor"]
