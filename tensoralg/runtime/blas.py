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

import math
from typing import Any

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


def _stacked(array: np.ndarray, indices: tuple[str, ...],
             orders: tuple[tuple[tuple[str, ...], ...], ...]) -> tuple[np.ndarray, int]:
    """``array`` (its axes named by ``indices``) as a 3-D stack: its axes grouped as the first
    of ``orders`` (each three groups of index names) that needs no copy, else copied into the
    first; and which order that was."""
    for which, groups in enumerate(orders):
        perm = [indices.index(i) for group in groups for i in group]
        if perm == sorted(perm) and array.flags.c_contiguous:
            return array.reshape([_size(array, indices, g) for g in groups]), which
    groups = orders[0]
    perm = [indices.index(i) for group in groups for i in group]
    moved = np.ascontiguousarray(array.transpose(perm))
    return moved.reshape([_size(array, indices, g) for g in groups]), 0


def _in_place(array: np.ndarray, indices: tuple[str, ...],
              orders: tuple[tuple[tuple[str, ...], ...], ...]) -> bool:
    """Whether ``array`` groups as one of ``orders`` without a copy (``_stacked``)."""
    return array.flags.c_contiguous and any(
        [indices.index(i) for group in groups for i in group] == list(range(array.ndim))
        for groups in orders)


def _size(array: np.ndarray, indices: tuple[str, ...], group: tuple[str, ...]) -> int:
    shape = array.shape
    return math.prod(shape[indices.index(i)] for i in group)


def _spread_rows(form: Any, a: np.ndarray, b: np.ndarray, dtype: np.dtype,
                 out: np.ndarray | None) -> np.ndarray | None:
    """The product without copying ``a`` where its leading axes are rows the output also
    leads with, but its others do not group as (rows, summed) in place (``ijk,jl->ikl``):
    those leading rows become a stack over which ``b`` is broadcast, one product per
    coordinate of them, as NumPy's einsum does. None where that does not apply."""
    if form.batch or not a.flags.c_contiguous or not b.flags.c_contiguous:
        return None
    lead = 0
    while lead < len(form.a_indices) and form.a_indices[lead] in form.rows:
        lead += 1
    spread, rest = form.a_indices[:lead], form.rows[lead:]
    if not spread or form.out[:lead] != spread or tuple(form.rows[:lead]) != spread or \
            form.out[lead:] != (*rest, *form.cols):
        return None
    inner = form.a_indices[lead:]
    if inner == (*rest, *form.summed):
        flipped = False
    elif inner == (*form.summed, *rest):
        flipped = True
    else:
        return None
    if (*form.summed, *form.cols) == form.b_indices:
        b_flipped = False
    elif (*form.cols, *form.summed) == form.b_indices:
        b_flipped = True
    else:
        return None
    size = lambda indices, array, names: _size(array, indices, names)  # noqa: E731
    p, m = size(form.a_indices, a, spread), size(form.a_indices, a, rest)
    k, n = size(form.a_indices, a, form.summed), size(form.b_indices, b, form.cols)
    left = a.reshape(p, k, m).swapaxes(1, 2) if flipped else a.reshape(p, m, k)
    right = b.reshape(n, k).T if b_flipped else b.reshape(k, n)
    shape = tuple(a.shape[:lead]) + tuple(
        (a.shape[form.a_indices.index(i)] if i in form.a_indices
         else b.shape[form.b_indices.index(i)]) for i in form.out[lead:])
    fits = out is not None and out.shape == shape and out.dtype == dtype and \
        out.flags.c_contiguous
    target = out if fits else np.empty(shape, dtype)
    np.matmul(left, right, out=target.reshape(p, m, n))
    return target


def blas_contraction(form: Any, a: np.ndarray, b: np.ndarray, dtype: np.dtype,
                     out: np.ndarray | None = None) -> np.ndarray:
    """``form`` (``lower/gemm_form.ContractionForm``: a stack of matrix products) computed by
    BLAS gemm through ``numpy.matmul``: each operand's axes grouped into (stack, rows, summed)
    or (stack, summed, columns), read in place where its layout already groups them (the
    transposed grouping is a BLAS flag, not a copy) and copied once otherwise; the result is
    written in the output's index order (into ``out`` when it is a C-contiguous array of the
    result's shape and dtype).

    >>> from tensoralg.lower.gemm_form import contraction_form
    >>> from tensoralg.notation import parse_statement
    >>> form = contraction_form(parse_statement("C(b,k,i) = A(b,i,j) * B(b,j,k)"))
    >>> a, b = np.ones((2, 3, 4)), np.ones((2, 4, 5))
    >>> blas_contraction(form, a, b, np.dtype(np.float64)).shape
    (2, 5, 3)
    """
    dtype = np.dtype(dtype)
    a, b = np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype)
    batch, rows, cols, summed = form.batch, form.rows, form.cols, form.summed
    if not _in_place(a, form.a_indices, ((batch, rows, summed), (batch, summed, rows))):
        spread = _spread_rows(form, a, b, dtype, out)
        if spread is not None:
            return spread
    left, flipped_a = _stacked(a, form.a_indices, ((batch, rows, summed), (batch, summed, rows)))
    right, flipped_b = _stacked(b, form.b_indices, ((batch, summed, cols), (batch, cols, summed)))
    left = left.swapaxes(1, 2) if flipped_a else left
    right = right.swapaxes(1, 2) if flipped_b else right
    sizes = {i: (a.shape[form.a_indices.index(i)] if i in form.a_indices
                 else b.shape[form.b_indices.index(i)]) for i in form.out}
    shape = tuple(sizes[i] for i in form.out)
    fits = out is not None and out.shape == shape and out.dtype == dtype and \
        out.flags.c_contiguous
    # The result as the output orders its indices: (stack, rows, columns) is A @ B and
    # (stack, columns, rows) is its transpose, B^T @ A^T; any other order is one copy after.
    for grouping, (x, y) in (((batch, rows, cols), (left, right)),
                             ((batch, cols, rows), (right.swapaxes(1, 2),
                                                    left.swapaxes(1, 2)))):
        if tuple(i for group in grouping for i in group) == form.out:
            target = out if fits else np.empty(shape, dtype)
            stack = target.reshape(x.shape[0], x.shape[1], y.shape[2])
            np.matmul(x, y, out=stack)
            return target
    product = np.matmul(left, right)
    order = (*batch, *rows, *cols)
    grouped = product.reshape([sizes[i] for i in order])
    result = grouped.transpose([order.index(i) for i in form.out])
    if fits:
        np.copyto(out, result)
        return out
    return np.ascontiguousarray(result)


__all__ = ["blas_contraction", "blas_product", "blas_supports"]
