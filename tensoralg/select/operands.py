"""Operands and results of an experiment: what they are, how to store them, what they weigh.

An operand may be anything ``ta.compile``'s kernels accept: a NumPy array or scalar, a
``scipy.sparse`` matrix or array, a pydata ``sparse`` array, or a ``ta.Tensor``.

>>> import scipy.sparse as sp
>>> A = sp.csr_array(np.eye(3))
>>> is_sparse(A), describe(A)
(True, '3x3 csr_array float64 nnz=3')
>>> storage_bytes(stored(A, ta.CSR, np.dtype("float64")))   # 3 values, 3 crd, 4 pos
52
"""
from __future__ import annotations

from typing import Any

import numpy as np

import tensoralg as ta


def is_sparse(operand: Any) -> bool:
    """Whether the operand is stored sparse (it then gets candidate formats by default)."""
    if isinstance(operand, ta.Tensor):
        return not operand.format.is_dense
    return _is_scipy(operand) or _is_pydata(operand)


def rank(operand: Any) -> int:
    shape = getattr(operand, "shape", None)
    return len(shape) if shape is not None else np.ndim(operand)


def value_dtype(operand: Any) -> np.dtype:
    dtype = getattr(operand, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(operand).dtype


def own_format(operand: Any) -> ta.Format | None:
    """The format an operand is given in (``None`` for NumPy data, which is dense)."""
    if isinstance(operand, ta.Tensor):
        return operand.format
    if _is_scipy(operand):
        return ta.Tensor.from_scipy(operand).format
    if _is_pydata(operand):
        return ta.Tensor.from_sparse(operand).format
    return None


def prepared(operand: Any, dtype: np.dtype) -> Any:
    """A dense NumPy operand as a C-contiguous array of the kernel's dtype (done once, untimed:
    every candidate uses it as it is); other operands unchanged."""
    if isinstance(operand, ta.Tensor) or _is_scipy(operand) or _is_pydata(operand):
        return operand
    array = np.asarray(operand, dtype=dtype)
    return array if array.flags.c_contiguous else array.copy(order="C")


def stored(operand: Any, fmt: ta.Format, dtype: np.dtype) -> Any:
    """The operand converted to ``fmt`` with values of ``dtype``: a NumPy array when ``fmt``
    is dense in natural order, else a ``ta.Tensor``."""
    if fmt.is_dense and fmt.is_identity_order:
        if isinstance(operand, ta.Tensor):
            array = operand.to_numpy()
        elif _is_scipy(operand):
            array = operand.toarray()
        elif _is_pydata(operand):
            array = operand.todense()
        else:
            array = np.asarray(operand)
        return np.ascontiguousarray(array, dtype=dtype) if array.ndim else \
            np.asarray(array, dtype=dtype)
    if isinstance(operand, ta.Tensor):
        tensor = operand.convert(fmt)
    elif _is_scipy(operand):
        tensor = ta.Tensor.from_scipy(operand, format=fmt)
    elif _is_pydata(operand):
        tensor = ta.Tensor.from_sparse(operand, format=fmt)
    else:
        tensor = ta.Tensor.from_numpy(np.asarray(operand), format=fmt)
    return tensor.astype(dtype)


def storage_bytes(value: Any) -> int:
    """Bytes of the storage arrays: values plus ``pos``/``crd`` (scipy: ``indptr``,
    ``indices``, coordinates); a dense array's ``nbytes``."""
    if isinstance(value, ta.Tensor):
        index = sum(array.nbytes for level in value.levels for array in (level.pos, level.crd)
                    if array is not None)
        return int(value.vals.nbytes + index)
    if _is_scipy(value):
        arrays = [value.data]
        if hasattr(value, "indptr"):
            arrays += [value.indptr, value.indices]
        elif hasattr(value, "coords"):
            arrays += list(value.coords)
        return int(sum(array.nbytes for array in arrays))
    if _is_pydata(value):
        return int(value.data.nbytes + value.coords.nbytes) if hasattr(value, "coords") else \
            int(value.nbytes)
    return int(np.asarray(value).nbytes)


def storage_label(value: Any) -> str:
    """How a value is stored: ``dense``, a scipy format (``csr``), or a Tensor's format."""
    from tensoralg.select.candidates import label

    if isinstance(value, ta.Tensor):
        return label(value.format)
    if _is_scipy(value):
        return str(value.format)
    return "dense"


def describe(operand: Any) -> str:
    """``1000x1000 csr_array float64 nnz=9983``: shape, kind, dtype, stored values."""
    # (not getattr's default: np.shape(a ta.Tensor) would ask the Tensor's __array_function__)
    shape = "x".join(map(str, operand.shape if hasattr(operand, "shape") else
                         np.shape(operand))) or "scalar"
    if isinstance(operand, ta.Tensor):
        kind, nnz = f"Tensor {storage_label(operand)}", operand.nnz
    elif _is_scipy(operand) or _is_pydata(operand):
        kind, nnz = type(operand).__name__, operand.nnz
    else:
        kind, nnz = type(operand).__name__, int(np.count_nonzero(operand))
    return f"{shape} {kind} {value_dtype(operand)} nnz={nnz}"


def entries(value: Any) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
    """``(shape, linear indices, values)`` of a result, indices sorted and unique (duplicates
    summed), zeros of dense data left out; the same numbers whatever the result's type."""
    if isinstance(value, ta.Tensor) or _is_scipy(value):
        if isinstance(value, ta.Tensor):
            coords, values = value.to_coords()
            coords = coords.T
        else:
            coo = value.tocoo()
            coords, values = np.vstack(coo.coords), coo.data
        shape = tuple(value.shape)
        linear = np.ravel_multi_index(tuple(coords), shape) if len(shape) else \
            np.zeros(len(values), dtype=np.int64)
        unique, inverse = np.unique(linear, return_inverse=True)
        summed = np.zeros(len(unique), dtype=values.dtype)
        np.add.at(summed, inverse.ravel(), values)
        return shape, unique, summed
    array = np.asarray(value)
    flat = array.ravel()
    linear = np.flatnonzero(flat)
    return array.shape, linear, flat[linear]


def _is_scipy(operand: Any) -> bool:
    """A scipy.sparse matrix or array (scipy is imported only once one is seen)."""
    if not type(operand).__module__.startswith("scipy.sparse"):
        return False
    import scipy.sparse

    return bool(scipy.sparse.issparse(operand))


def _is_pydata(operand: Any) -> bool:
    return type(operand).__module__.split(".")[0] == "sparse" and hasattr(operand, "nnz")
