"""Value dtypes the kernels do not compute in: widened on the way in, narrowed on the way out.

Kernels compute in float32, float64, complex64, complex128, int32 and int64. ``ta.einsum``
also takes the other dtypes NumPy's einsum takes, the way a C compiler takes ``char``
arithmetic: each operand whose dtype
the kernels lack is converted to a *compute dtype*, the kernel runs in it, and the result is
cast to the dtype NumPy's einsum would return (``np.result_type`` of the operands, or
``dtype=``). For the sums of products einsum computes this gives NumPy's numbers:

- bool, int8, int16, uint8, uint16, uint32 and uint64 compute in int64. Sums and products
  modulo 2**64, then cast down, equal the same sums and products wrapped at the narrow width
  (wrapping is a ring homomorphism), and the kernels' integer arithmetic wraps (LLVM's plain
  ``add``/``mul``; ``-fwrapv`` in C). A bool result is "some product is true": the count of
  true products, compared with zero.
- float16 computes in float32 and is rounded to float16 at the end, as NumPy's einsum does.

Complex values are native: the IR multiplies and adds them (ir/nodes.py), so complex64 and
complex128 operands need no widening; a narrow integer or float16 operand mixed with a complex
one is converted to the complex result dtype like any other.

An object array is converted only when ``dtype=`` names a dtype the kernels take, as NumPy
casts every operand to ``dtype`` (which ``casting="unsafe"`` allows for objects).
"""
from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from tensoralg.errors import UnsupportedError

_NATIVE = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64,
                                           np.complex64, np.complex128))
_COMPUTE = {**{np.dtype(t): np.dtype(np.int64) for t in (
    np.bool_, np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64)},
    np.dtype(np.float16): np.dtype(np.float32)}


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel computes ``dtype`` values in.

    >>> compute_dtype(np.dtype(np.uint8)), compute_dtype(np.dtype(np.float16))
    (dtype('int64'), dtype('float32'))
    """
    dtype = np.dtype(dtype)
    if dtype in _NATIVE:
        return dtype
    if dtype in _COMPUTE:
        return _COMPUTE[dtype]
    raise UnsupportedError(f"values of dtype {dtype} are not supported (the kernels compute in "
                           f"float32, float64, complex64, complex128 and integers); convert the "
                           f"operands with .astype")


def _dtype_of(operand: Any) -> np.dtype | None:
    dtype = getattr(operand, "dtype", None)
    if dtype is None and isinstance(operand, (bool, int, float, complex, list, tuple)):
        dtype = np.asarray(operand).dtype
    try:
        # A big-endian float64 is a float64: binding reads it as NumPy does.
        return np.dtype(dtype).newbyteorder("=") if dtype is not None else None
    except (TypeError, ValueError):
        return None


_OBJECT = np.dtype(object)


def widened(operands: Sequence[Any], dtype: Any) -> tuple[tuple, np.dtype, np.dtype] | None:
    """``(operands in the compute dtype, result dtype, compute dtype)`` when some operand or
    ``dtype=`` is one the kernels do not compute in; None when none is (nothing to do).

    >>> ops, result, compute = widened((np.ones(2, np.int8), np.ones(2, np.int8)), None)
    >>> [o.dtype.name for o in ops], result.name, compute.name
    (['int64', 'int64'], 'int8', 'int64')
    """
    dtypes = [_dtype_of(op) for op in operands]
    if dtype is None and all(d is None or d in _NATIVE for d in dtypes):
        return None           # the common case, asked on every einsum call
    try:
        wanted = np.dtype(dtype) if dtype is not None else None
    except TypeError:
        return None           # not a dtype: the API's own check says so
    for k, d in enumerate(dtypes):
        if d == _OBJECT and wanted is not None and \
                (wanted in _NATIVE or wanted in _COMPUTE):
            continue          # cast to dtype= on the way in, as NumPy does (casting="unsafe")
        if d is not None and d not in _NATIVE and d not in _COMPUTE:
            raise UnsupportedError(f"operand {k} has dtype {d}, which tensoralg does not "
                                   f"support: values are float32, float64, complex64, "
                                   f"complex128, int32 or int64, or bool, float16 and narrow "
                                   f"or unsigned integers computed in those; convert it with "
                                   f".astype")
    if all(d is None or d in _NATIVE for d in dtypes) and (wanted is None or wanted in _NATIVE):
        return None
    known = [d for d in dtypes if d is not None]
    result = wanted if wanted is not None else np.result_type(*known) if known else \
        np.dtype(np.float64)
    compute = compute_dtype(result)
    converted = tuple(_convert(op, compute) if d is not None and d not in _NATIVE else op
                      for op, d in zip(operands, dtypes))
    return converted, result, compute


def _convert(operand: Any, dtype: np.dtype) -> Any:
    if getattr(operand, "has_canonical_format", True) is False and \
            hasattr(operand, "sum_duplicates"):
        # A scipy matrix's duplicate entries add up in its own dtype (two True entries are
        # True, two uint8 200s wrap to 144): add them before widening, not after.
        operand = operand.copy()
        operand.sum_duplicates()
    if hasattr(operand, "astype") and not isinstance(operand, np.generic):
        return operand.astype(dtype)
    return np.asarray(operand).astype(dtype)


def narrowed(result: Any, dtype: np.dtype) -> Any:
    """``result`` (computed in the compute dtype) cast to ``dtype``, in its own family."""
    if np.dtype(dtype) == np.dtype(np.bool_):
        if isinstance(result, np.ndarray) or np.isscalar(result):
            return np.asarray(result) != 0 if np.ndim(result) else np.bool_(result != 0)
        return result.astype(np.bool_)      # a sparse result: its stored values != 0
    with np.errstate(over="ignore"):       # float16 overflows to inf, silently, as in NumPy
        if isinstance(result, np.generic) or np.isscalar(result):
            return np.asarray(result).astype(dtype)[()]
        if hasattr(result, "astype"):
            try:
                return result.astype(dtype)
            except (ValueError, TypeError, NotImplementedError):
                # scipy.sparse holds no float16, nor pydata's compressed formats (numba) or a
                # ta.Tensor narrow integers: the values as NumPy's dtype makes them (rounded
                # to float16, wrapped to uint8), stored in the dtype they were computed in
                library = type(result).__module__.split(".")[0]
                warnings.warn(f"the {type(result).__name__} result is stored as "
                              f"{result.dtype}: {library} cannot hold {np.dtype(dtype)} values "
                              f"here (the values are {np.dtype(dtype)}'s)", stacklevel=3)
                return _values_through(result, np.dtype(dtype))
    return result


def _values_through(result: Any, dtype: np.dtype) -> Any:
    """``result`` (a sparse container of tensoralg's making) with its stored values cast to
    ``dtype`` and back."""
    if hasattr(result, "vals") and hasattr(result, "levels"):      # a ta.Tensor
        return type(result).trusted(result.shape, result.format, result.levels,
                                    result.vals.astype(dtype).astype(result.dtype))
    result.data = result.data.astype(dtype).astype(result.data.dtype)
    return result


__all__ = ["compute_dtype", "narrowed", "widened"]
