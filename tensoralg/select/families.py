"""Seeded sparse matrices of seven families, to fit and to test the format-selection model.

Each family stresses what a format is good or bad at:

- ``uniform``: entries scattered uniformly (the textbook random matrix);
- ``power-law``: row and column degrees drawn from a Pareto law (graphs, web, social data);
- ``banded``: entries within a narrow band around the diagonal (FEM, stencils);
- ``block``: dense 8x8 blocks placed at random (multi-physics FEM, BSR-friendly data);
- ``hypersparse``: far fewer entries than rows, so most rows and columns are empty;
- ``short-wide``: few rows, many columns (LP constraint matrices, documents x words);
- ``tall-skinny``: many rows, few columns (feature matrices, embeddings).

``generate(family, nnz, seed)`` returns a canonical ``scipy.sparse.csr_array`` of float64 with
at most ``nnz`` entries (duplicates drawn at random are merged: fewer where the pattern is
dense, as in a narrow band); the shape follows from ``nnz`` and the seed. The same arguments
give the same matrix on every machine.

>>> A = generate("banded", 5000, seed=0)
>>> A.format, A.dtype, 0 < A.nnz <= 5000
('csr', dtype('float64'), True)
>>> generate("banded", 5000, seed=0).nnz == A.nnz
True
>>> FAMILIES
('uniform', 'power-law', 'banded', 'block', 'hypersparse', 'short-wide', 'tall-skinny')
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

import tensoralg as ta

Coordinates = tuple[np.ndarray, np.ndarray, tuple[int, int]]   # rows, columns, shape


def generate(family: str, nnz: int, seed: int) -> Any:
    """A matrix of ``family`` with about ``nnz`` entries, drawn from ``seed``."""
    import scipy.sparse as sp  # not at import: ``import tensoralg`` stays light

    if family not in _GENERATORS:
        raise ta.InputError(f"no matrix family {family!r}; choose one of {', '.join(FAMILIES)}")
    if not isinstance(nnz, (int, np.integer)) or nnz < 1:
        raise ta.InputError(f"nnz must be a positive integer, not {nnz!r}")
    rng = np.random.default_rng([seed, FAMILIES.index(family), int(nnz)])
    rows, cols, shape = _GENERATORS[family](int(nnz), rng)
    values = rng.uniform(0.5, 1.5, len(rows))
    matrix = sp.csr_array((values, (rows, cols)), shape=shape)
    matrix.sum_duplicates()             # also sorts the column indices of every row
    return matrix


def _uniform(nnz: int, rng: np.random.Generator) -> Coordinates:
    density = rng.uniform(0.002, 0.05)
    m = max(8, int(np.sqrt(nnz / density) * rng.uniform(0.7, 1.4)))
    n = max(8, int(nnz / (density * m)))
    return rng.integers(0, m, nnz), rng.integers(0, n, nnz), (m, n)


def _power_law(nnz: int, rng: np.random.Generator) -> Coordinates:
    m = n = max(16, int(nnz / rng.uniform(4, 20)))
    rows = _pareto_index(m, rng.uniform(1.1, 2.5), nnz, rng)
    cols = _pareto_index(n, rng.uniform(1.1, 2.5), nnz, rng)
    return rows, cols, (m, n)


def _pareto_index(size: int, exponent: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` indices below ``size`` whose frequencies follow a Pareto law of ``exponent``
    (smaller: heavier hubs), hubs spread over the range."""
    weights = rng.pareto(exponent, size) + 1.0
    return rng.choice(size, count, p=weights / weights.sum())


def _banded(nnz: int, rng: np.random.Generator) -> Coordinates:
    half_width = int(rng.integers(2, 60))
    fill = rng.uniform(0.3, 1.0)
    n = max(8, int(nnz / ((2 * half_width + 1) * fill)))
    rows = rng.integers(0, n, nnz)
    cols = np.clip(rows + rng.integers(-half_width, half_width + 1, nnz), 0, n - 1)
    return rows, cols, (n, n)


def _block(nnz: int, rng: np.random.Generator) -> Coordinates:
    fill = rng.uniform(0.5, 1.0)
    blocks = max(1, int(nnz / (64 * fill)))
    grid = max(2, int(np.sqrt(blocks / rng.uniform(0.002, 0.05))))
    block_rows = rng.integers(0, grid, blocks)
    block_cols = rng.integers(0, grid, blocks)
    per_block = rng.binomial(64, fill, blocks) + 1
    owner = np.repeat(np.arange(blocks), per_block)
    offset = rng.integers(0, 64, len(owner))
    rows = block_rows[owner] * 8 + offset // 8
    cols = block_cols[owner] * 8 + offset % 8
    return rows, cols, (grid * 8, grid * 8)


def _hypersparse(nnz: int, rng: np.random.Generator) -> Coordinates:
    m = n = min(4_000_000, int(nnz * rng.uniform(3, 12)))
    return rng.integers(0, m, nnz), rng.integers(0, n, nnz), (m, n)


def _short_wide(nnz: int, rng: np.random.Generator) -> Coordinates:
    m = int(rng.integers(16, 400))
    n = max(m * 20, int(nnz / rng.uniform(0.005, 0.1) / m))
    cols = _pareto_index(n, rng.uniform(1.5, 3.0), nnz, rng) if rng.random() < 0.5 else \
        rng.integers(0, n, nnz)      # Zipfian words, or uniform
    return rng.integers(0, m, nnz), cols, (m, n)


def _tall_skinny(nnz: int, rng: np.random.Generator) -> Coordinates:
    n = int(rng.integers(16, 400))
    m = max(n * 20, int(nnz / rng.uniform(0.005, 0.1) / n))
    return rng.integers(0, m, nnz), rng.integers(0, n, nnz), (m, n)


_GENERATORS: dict[str, Callable[[int, np.random.Generator], Coordinates]] = {
    "uniform": _uniform, "power-law": _power_law, "banded": _banded, "block": _block,
    "hypersparse": _hypersparse, "short-wide": _short_wide, "tall-skinny": _tall_skinny,
}
FAMILIES = tuple(_GENERATORS)
