"""Dense matrix products dispatched to BLAS: the ``gemm(blas)`` route of a schedule.

A dense ``C(i,j) = A(i,k) * B(k,j)`` in float32 or float64 is the one contraction for which a
tuned library beats anything a general loop compiler emits on this kind of machine (OpenBLAS
blocks both operands for every cache level and runs its own threads; tensoralg's generated GEMM
reaches about 40% of it, see ``benchmarks/RESULTS.md``). The API sends such products here by
default, visibly: the kernel's notes and ``ta.einsum``'s documentation say so, and a schedule
``gemm(generated)`` or ``gemm(loops)`` chooses tensoralg's own code instead.

The call is the BLAS gemm NumPy links (OpenBLAS in NumPy's wheels), through ``numpy.matmul``,
which hands C-ordered operands and their transposes to ``cblas_?gemm`` without copying them. Not
SciPy's ``scipy.linalg.blas``: SciPy's wheels carry a second OpenBLAS with its own thread pool,
and on a small machine each switch between the two pools' spinning threads cost ~7 ms (measured
on 2 cores: a 256^3 product alternating with a NumPy product took 8 ms instead of 1). BLAS runs
on its own threads (``OPENBLAS_NUM_THREADS``, or threadpoolctl), not on
``ta.set_num_threads``'s.
"""
from __future__ import annotations

import numpy as np

_BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.complex64),
                np.dtype(np.complex128))


def blas_supports(dtype: np.dtype) -> bool:
    """Whether BLAS has a gemm for values of ``dtype`` (s/d/c/zgemm: float32, float64,
    complex64, complex128)."""
    return np.dtype(dtype) in _BLAS_DTYPES


def blas_product(a: np.ndarray, a_transposed: bool, b: np.ndarray, b_transposed: bool,
                 dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
    """``op(a) @ op(b)`` through BLAS gemm, where ``op`` transposes when its flag is set;
    ``a`` and ``b`` are the arrays as stored (``a`` is K x M when ``a_transposed``). The result
    is C-ordered, written into ``out`` when it is a C-contiguous array of the right shape and
    dtype.

    >>> a = np.arange(6.0).reshape(2, 3)
    >>> blas_product(a, False, a, True, np.dtype(np.float64)).tolist()
    [[5.0, 14.0], [14.0, 50.0]]
    """
    dtype = np.dtype(dtype)
    a = np.ascontiguousarray(a, dtype=dtype)
    b = np.ascontiguousarray(b, dtype=dtype)
    left, right = (a.T if a_transposed else a), (b.T if b_transposed else b)
    shape = (left.shape[0], right.shape[1])
    if out is None or out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous:
        out = np.empty(shape, dtype)
    return np.matmul(left, right, out=out)


__all__ = ["blas_product", "blas_supports"]
