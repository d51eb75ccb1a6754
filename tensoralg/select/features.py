"""Cheap features of a sparse matrix and of the expression that reads it: what the cost model sees.

Matrix features come straight from the storage arrays, never from a conversion. Statistics
along the storage's outer level (rows of CSR, columns of CSC) are exact, from ``pos``, up to
``OUTER_SCAN_LIMIT`` outer positions (beyond, from as many positions drawn at random). Inner
statistics (columns of CSR) are estimated from ``SAMPLE`` stored entries drawn at fixed
pseudo-random positions (the same every time, so the features of a matrix never change),
through unbiased estimators of the degrees' second moment; bandedness and block density from
a quarter of them, whose rows a binary search in ``pos`` finds. With at most ``SAMPLE``
entries every statistic is exact. A 10^6-entry CSR matrix takes a few hundred microseconds.

>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[1.0, 2, 0, 0], [0, 0, 0, 0], [0, 0, 3, 0], [0, 0, 4, 5]]))
>>> f = matrix_features(A)
>>> f.shape, f.nnz, f.format, f.row_max, f.row_empty, f.col_empty
((4, 4), 5, 'csr', 2, 0.25, 0.0)
>>> f.bandedness    # mean |i/m - j/n| over the five entries: (0 + 1/4 + 0 + 0 + 1/4) / 5
0.1

The expression's side: which index each mode of the matrix binds (an output index, or one that
is summed), whether the expression's natural loop order (output indices first) reads it along
rows or columns, and how many multiply-adds each stored entry feeds (the extent of the dense
operands' other indices):

>>> e = expression_features(Expression.parse("ij,jk->ik"), "A", {"A": A, "B": np.ones((4, 16))})
>>> e.roles, e.access, e.width, e.key
(('out', 'sum'), 'rows', 16, 'out,sum w>1')
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import tensoralg as ta
from tensoralg.select import operands as ops
from tensoralg.select.candidates import label
from tensoralg.select.expression import Expression

SAMPLE = 4096                 # stored entries drawn for the estimated statistics
OUTER_SCAN_LIMIT = 1 << 15    # outer positions whose degrees are read exactly (beyond: sampled)
LOCATE_EVERY = 4              # of the sampled entries of compressed storage, these find their row
BLOCK = 8                     # the block edge of ``block_density``


@dataclass(frozen=True)
class MatrixFeatures:
    """What a sparse matrix looks like, from its storage arrays.

    Degrees count stored entries per row (``row_*``) or column (``col_*``): the mean, the
    largest, the coefficient of variation (standard deviation over mean: 0 for equal degrees,
    large for skewed ones), and the fraction of empty rows or columns. ``bandedness`` is the
    mean of ``|i/m - j/n|`` over stored entries (0 on the diagonal, about 1/3 for uniform
    scatter). ``block_density`` is the mean fill of the 8x8 block around a stored entry (1/64
    for isolated entries, 1 for full blocks). ``sampled`` is the number of entries the estimated
    statistics were drawn from (0: every statistic is exact).
    """

    shape: tuple[int, int]
    nnz: int
    format: str
    density: float
    row_mean: float
    row_max: int
    row_cv: float
    row_empty: float
    col_mean: float
    col_max: int
    col_cv: float
    col_empty: float
    bandedness: float
    block_density: float
    sampled: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The features as plain JSON-able values."""
        values = dataclasses.asdict(self)
        values["shape"] = list(self.shape)
        return values

    def __str__(self) -> str:
        estimated = f", estimated from {self.sampled} entries" if self.sampled else ""
        return (f"{self.shape[0]}x{self.shape[1]} {self.format} nnz={self.nnz} "
                f"density={self.density:.3g}; rows: mean {self.row_mean:.3g}, max "
                f"{self.row_max}, cv {self.row_cv:.2f}, {self.row_empty:.0%} empty; columns: "
                f"mean {self.col_mean:.3g}, max {self.col_max}, cv {self.col_cv:.2f}, "
                f"{self.col_empty:.0%} empty; bandedness {self.bandedness:.3f}; block density "
                f"{self.block_density:.3f}{estimated}")


@dataclass(frozen=True)
class ExpressionFeatures:
    """How an expression reads one sparse matrix operand.

    ``roles`` says, per mode, whether its index is an output index (``out``) or summed
    (``sum``). ``access`` is ``rows`` when the expression's natural loop order (output indices
    first, then the others as they appear) reaches the matrix's first mode first, else
    ``columns``. ``width`` is the number of multiply-adds each stored entry feeds: the product
    of the extents of the dense operands' indices that the matrix does not bind (16 for a
    product with a 16-column dense matrix, 1 for a vector). ``key`` names the expression class
    that the cost model keeps coefficients for.
    """

    operand: str
    indices: tuple[str, ...]
    roles: tuple[str, ...]
    access: str
    width: int
    output_rank: int
    dense_operands: int

    @property
    def key(self) -> str:
        """``out,sum w=1`` (SpMV), ``sum,out w=1`` (transposed SpMV), ``out,sum w>1`` (SpMM),
        ...; ``alone`` when no dense operand multiplies the matrix."""
        kind = "alone" if self.dense_operands == 0 else "w=1" if self.width == 1 else "w>1"
        return f"{','.join(self.roles)} {kind}"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "key": self.key}

    def __str__(self) -> str:
        return (f"{self.operand}({','.join(self.indices)}): modes {'/'.join(self.roles)}, read "
                f"along {self.access}, {self.width} multiply-add(s) per stored entry, output "
                f"rank {self.output_rank}")


# -- the expression -----------------------------------------------------------------------------


def expression_features(expression: Expression, name: str, operands: Mapping[str, Any]
                        ) -> ExpressionFeatures:
    """How ``expression`` reads its operand ``name`` (given ``operands`` by name, for sizes)."""
    indices = expression.indices[name]
    output = _output_indices(expression)
    loop_order = [*output, *(i for n in expression.operands for i in expression.indices[n]
                             if i not in output)]
    roles = tuple("out" if index in output else "sum" for index in indices)
    first = [loop_order.index(index) for index in indices]
    access = "rows" if len(first) < 2 or first[0] <= first[1] else "columns"
    width, dense = 1, 0
    seen = set(indices)
    for other in expression.operands:
        if other == name or other not in operands or not expression.indices[other]:
            continue
        dense += 1
        operand = operands[other]
        shape = operand.shape if hasattr(operand, "shape") else np.shape(operand)
        for index, extent in zip(expression.indices[other], shape):
            if index not in seen:
                seen.add(index)
                width *= int(extent)
    return ExpressionFeatures(name, indices, roles, access, width, expression.output_rank, dense)


def _output_indices(expression: Expression) -> tuple[str, ...]:
    """The output's indices, read from the statement's left side."""
    left = expression.statement.partition("=")[0]
    inside = left.partition("(")[2].rstrip().rstrip(")")
    return tuple(index.strip() for index in inside.split(",") if index.strip())


# -- the matrix ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Compressed:
    """Storage compressed along one mode: ``pos``/``crd`` of the inner level, and the outer
    coordinates of the positions when the outer level is compressed too (DCSR)."""

    pos: np.ndarray
    crd: np.ndarray
    outer_crd: np.ndarray | None
    row_major: bool


@dataclass(frozen=True)
class _Coordinates:
    rows: np.ndarray
    cols: np.ndarray


def matrix_features(operand: Any) -> MatrixFeatures:
    """The features of a 2-D sparse operand (scipy, pydata ``sparse`` or ``ta.Tensor``).

    >>> import scipy.sparse as sp
    >>> matrix_features(sp.eye_array(3, format="coo")).row_cv
    0.0
    """
    shape = tuple(int(s) for s in getattr(operand, "shape", ()))
    if len(shape) != 2:
        raise ta.InputError(f"matrix features need a 2-D operand, not shape {shape}")
    view, fmt = _storage(operand)
    m, n = shape
    if isinstance(view, _Compressed):
        nnz = int(len(view.crd))
        outer_size, inner_size = (m, n) if view.row_major else (n, m)
        outer = _outer_degrees(view, outer_size, nnz)
        positions, exact = _positions(nnz)
        inner_coordinate = view.crd[positions]
        # Finding an entry's row is a binary search in pos, a cache miss per step: only a
        # quarter of the sample is located (in pos's own dtype, or searchsorted copies pos).
        if exact:       # every entry: its row repeated once per entry, in storage order
            outer_index = np.repeat(np.arange(len(view.pos) - 1), np.diff(view.pos))
        else:
            located = positions[_located()]
            outer_index = np.searchsorted(view.pos, located.astype(view.pos.dtype), "right") - 1
        outer_coordinate = outer_index if view.outer_crd is None else view.outer_crd[outer_index]
        if exact:
            inner = _counted_degrees(inner_coordinate, inner_size)
        else:
            inner = _sampled_degrees(inner_coordinate, inner_size, nnz)
            inner_coordinate = inner_coordinate[_located()]
            # The degrees of the located entries' rows: a sample weighted by degree, so it
            # finds the hubs that a sample of rows misses.
            hubs = np.subtract(view.pos[outer_index + 1], view.pos[outer_index], dtype=np.int64)
            outer = dataclasses.replace(outer, max=max(outer.max, int(hubs.max(initial=0))))
            if len(view.pos) - 1 > OUTER_SCAN_LIMIT:   # sampled rows: E[deg | entry] = Σd²/nnz
                outer = _degrees(outer_size, nnz, nnz * float(hubs.mean()), outer.max,
                                 outer.empty)
        rows, cols = (outer_coordinate, inner_coordinate) if view.row_major else \
            (inner_coordinate, outer_coordinate)
        row, col = (outer, inner) if view.row_major else (inner, outer)
    else:
        nnz = int(len(view.rows))
        positions, exact = _positions(nnz)
        rows, cols = view.rows[positions], view.cols[positions]
        degrees = _counted_degrees if exact else \
            functools.partial(_sampled_degrees, total=nnz)
        row, col = degrees(rows, m), degrees(cols, n)
    band = float(np.abs(rows / max(m, 1) - cols / max(n, 1)).mean()) if nnz else 0.0
    blocks = _block_density(rows, cols, n, nnz, exact)
    return MatrixFeatures(
        (m, n), nnz, fmt, nnz / (m * n) if m and n else 0.0,
        nnz / m if m else 0.0, row.max, row.cv, row.empty,
        nnz / n if n else 0.0, col.max, col.cv, col.empty,
        band, blocks, 0 if exact else SAMPLE)


@dataclass(frozen=True)
class _Degrees:
    """The largest degree, the coefficient of variation and the empty share of rows or
    columns."""

    max: int
    cv: float
    empty: float


def _degrees(size: int, total: int, sum_of_squares: float, largest: int, empty: float
             ) -> _Degrees:
    """Max, coefficient of variation and empty fraction from the degrees' sums."""
    if size == 0 or total == 0:
        return _Degrees(0, 0.0, 1.0 if size else 0.0)
    mean = total / size
    variance = max(sum_of_squares / size - mean * mean, 0.0)
    return _Degrees(int(largest), math.sqrt(variance) / mean, min(max(float(empty), 0.0), 1.0))


def _outer_degrees(view: _Compressed, size: int, total: int) -> _Degrees:
    """Degrees along the outer level, exact from ``pos`` unless it is very long."""
    stored = len(view.pos) - 1            # outer positions: every row, or the nonempty ones
    if stored <= OUTER_SCAN_LIMIT:
        counts = np.subtract(view.pos[1:], view.pos[:-1], dtype=np.int64)
        empty = size - stored + (stored - np.count_nonzero(counts))
        largest = int(counts.max(initial=0))
        return _degrees(size, total, _sum_of_squares(counts), largest, empty / size)
    picks = (_unit_sample() * stored).astype(np.int64)
    counts = np.subtract(view.pos[picks + 1], view.pos[picks], dtype=np.int64)
    # The outer positions a DCSR does not store are empty rows: count them exactly.
    empty_share = (size - stored + stored * float(np.mean(counts == 0))) / size
    return _degrees(size, total, stored * _sum_of_squares(counts) / len(counts),
                    int(counts.max(initial=0)), empty_share)


def _sum_of_squares(counts: np.ndarray) -> float:
    """The sum of squared int64 counts (einsum: no BLAS call, whose threads may be asleep)."""
    return float(np.einsum("i,i->", counts, counts))


def _counts(keys: np.ndarray, size: int) -> np.ndarray:
    """How often each distinct key occurs (keys below ``size``): by bincount when ``size`` is
    small, else by sorting."""
    if size <= 8 * len(keys):
        counts = np.bincount(keys, minlength=0)
        return counts[counts > 0]
    return np.unique(keys, return_counts=True)[1]


def _counted_degrees(coordinates: np.ndarray, size: int) -> _Degrees:
    """Exact degrees from every entry's coordinate."""
    counts = _counts(coordinates, size)
    return _degrees(size, len(coordinates), _sum_of_squares(counts),
                    int(counts.max(initial=0)), (size - len(counts)) / size if size else 0.0)


def _sampled_degrees(coordinates: np.ndarray, size: int, total: int) -> _Degrees:
    """Degrees estimated from the coordinates of a uniform sample (with replacement) of
    ``total`` entries: the sum of squared degrees from the sample's coincidences (unbiased),
    the largest degree scaled from the sample, the empty share by Chao's estimate of how many
    distinct coordinates there are."""
    s = len(coordinates)
    counts = _counts(coordinates, size)
    pairs = _sum_of_squares(counts) - s                          # the sum of c (c - 1)
    sum_of_squares = max(total * total * pairs / (s * (s - 1)), float(total))
    singletons = int(np.count_nonzero(counts == 1))
    doubletons = int(np.count_nonzero(counts == 2))
    extra = singletons * singletons / (2 * doubletons) if doubletons else \
        singletons * (singletons - 1) / 2
    distinct = min(len(counts) + extra, size, total)
    # The sample's largest count overstates the largest rate (it is the luckiest of many):
    # take two standard deviations off before scaling, and never go below the mean.
    top = int(counts.max(initial=0))
    largest = max(round((top - 2 * math.sqrt(top)) * total / s), math.ceil(total / size), 1)
    return _degrees(size, total, sum_of_squares, largest, 1 - distinct / size)


def _block_density(rows: np.ndarray, cols: np.ndarray, n: int, total: int, exact: bool
                   ) -> float:
    """The mean fill of the 8x8 block around a stored entry: the sum of squared block counts
    over ``64 * nnz``, exact or estimated from the sample's coincidences as for degrees."""
    if total == 0:
        return 0.0
    columns = n // BLOCK + 1
    keys = (rows.astype(np.int64) // BLOCK) * columns + cols // BLOCK    # (no int32 overflow)
    counts = _counts(keys, (int(rows.max(initial=0)) // BLOCK + 1) * columns)
    squares = _sum_of_squares(counts)
    if not exact:
        s = len(keys)
        squares = max(total * total * (squares - s) / (s * (s - 1)), float(total))
    return min(max(squares / (BLOCK * BLOCK * total), 1 / (BLOCK * BLOCK)), 1.0)


def _positions(nnz: int) -> tuple[np.ndarray, bool]:
    """The positions of the entries to read, and whether they are all of them: every entry up
    to SAMPLE entries, else SAMPLE fixed pseudo-random positions (with repeats)."""
    if nnz <= SAMPLE:
        return np.arange(nnz), True
    return (_unit_sample() * nnz).astype(np.int64), False


@functools.lru_cache(maxsize=1)
def _unit_sample() -> np.ndarray:
    """SAMPLE numbers in [0, 1), sorted (so gathers walk the arrays forward), always the same."""
    sample = np.sort(np.random.default_rng(20240607).random(SAMPLE))
    sample.flags.writeable = False
    return sample


@functools.lru_cache(maxsize=1)
def _located() -> np.ndarray:
    """Which of the sample's entries find their row: a random subset, in order (every k-th
    of a sorted sample would be spread evenly, and meet too few entries of the same block)."""
    chosen = np.sort(np.random.default_rng(20240608).choice(SAMPLE, SAMPLE // LOCATE_EVERY,
                                                            replace=False))
    chosen.flags.writeable = False
    return chosen


# -- reading the storage ------------------------------------------------------------------------


def _storage(operand: Any) -> tuple[_Compressed | _Coordinates, str]:
    """The arrays that hold the operand's pattern, and its format's label, without copies where
    the storage is CSR/CSC/DCSR/DCSC/COO-like (other layouts are read through coordinates)."""
    if isinstance(operand, ta.Tensor):
        return _tensor_storage(operand)
    kind = getattr(operand, "format", None)
    if ops._is_scipy(operand):
        if kind in ("csr", "csc"):
            return _Compressed(operand.indptr, operand.indices, None, kind == "csr"), kind
        if kind == "coo":
            rows, cols = operand.coords if hasattr(operand, "coords") else \
                (operand.row, operand.col)
            return _Coordinates(rows, cols), kind
        coo = operand.tocoo()       # bsr, dia, lil, dok: rare, and einsum converts them too
        return _Coordinates(coo.row, coo.col), str(kind)
    if ops._is_pydata(operand):
        if hasattr(operand, "coords"):
            return _Coordinates(operand.coords[0], operand.coords[1]), "coo"
        axes = tuple(getattr(operand, "compressed_axes", (0,)))
        return _Compressed(operand.indptr, operand.indices, None, axes == (0,)), \
            "csr" if axes == (0,) else "csc"
    raise ta.InputError(f"matrix features need a sparse operand (scipy.sparse, pydata sparse or "
                        f"ta.Tensor), not {type(operand).__name__}")


def _tensor_storage(tensor: ta.Tensor) -> tuple[_Compressed | _Coordinates, str]:
    fmt = tensor.format
    row_major = fmt.order == (0, 1)
    outer, inner = tensor.levels
    kinds = fmt.spec
    if kinds == "ds":
        return _Compressed(inner.pos, inner.crd, None, row_major), label(fmt)
    if kinds == "ss":
        return _Compressed(inner.pos, inner.crd, outer.crd, row_major), label(fmt)
    if kinds == "uq":
        first, second = outer.crd, inner.crd
        rows, cols = (first, second) if row_major else (second, first)
        return _Coordinates(rows, cols), label(fmt)
    coords, _ = tensor.to_coords()      # dense or mixed levels: read through coordinates
    return _Coordinates(coords[:, 0], coords[:, 1]), label(fmt)
