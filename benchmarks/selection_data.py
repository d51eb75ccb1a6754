"""The matrices of the format-selection model: what it is fitted on, and what it is judged on.

``fit_selection.py`` fits on ``TRAINING`` real matrices and on the generated families drawn with
``FIT_SEED``; ``selection.py`` judges the model on the ``HELD_OUT`` real matrices, which the fit
never sees, and on the families drawn afresh with ``BENCHMARK_SEED``. The held-out matrices
span the kinds of the collection: FEM (bcsstk13), circuit (rajat01), social graph
(wiki-Vote), stencil (cryg2500) and bipartite counts (kos_docword).

    >>> sorted(set(TRAINING) & set(HELD_OUT))
    []
    >>> len(fit_set()), len(benchmark_set()) > 0
    (45, True)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np
import scipy.io
import scipy.sparse as sp

import tensoralg.data
from tensoralg.select.families import FAMILIES, generate

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TENSORALG_BENCH_DATA", ROOT.parent / "shared" / "data")) / "matrices"
TRAINING = ("bcsstk16", "bcsstk33", "fidapex6", "bayer10", "adder_dcop_05", "luxembourg_osm",
            "bcspwr10", "ego-Facebook", "ca-GrQc", "lp_ship04l", "hangGlider_2")
HELD_OUT = ("bcsstk13", "rajat01", "wiki-Vote", "cryg2500", "kos_docword")
FIT_SEED, BENCHMARK_SEED = 0, 1
# (family, entries): every family at small to large sizes; the largest run on several threads
FIT_SIZES = (2_000, 20_000, 100_000, 400_000, 1_000_000)
BENCHMARK_SIZES = (30_000, 300_000)
LARGEST_HYPERSPARSE = 400_000   # beyond, its millions of empty rows dominate every format
WIDTHS = (8, 16, 32)            # SpMM widths, in turn, so that the model sees width vary


def canonical(matrix) -> sp.csr_array:
    """A canonical CSR array of float64 with int32 indices (as ``run.py`` prepares them)."""
    matrix = sp.csr_array(matrix, dtype=np.float64)
    matrix.sum_duplicates()
    matrix.sort_indices()
    if max(matrix.shape) < 2**31 - 1:
        matrix.indices = matrix.indices.astype(np.int32)
        matrix.indptr = matrix.indptr.astype(np.int32)
    return matrix


def real(names: tuple[str, ...]) -> Iterator[tuple[str, str, sp.csr_array]]:
    """``(name, "real", matrix)`` for each named matrix found (shared data, else bundled)."""
    bundled = {name for name, (file, _) in tensoralg.data.FILES.items() if file.endswith(".mtx.gz")}
    for name in names:
        path = SHARED / f"{name}.mtx.gz"
        if not path.exists() and name in bundled:
            path = tensoralg.data.path(name)
        if path.exists():
            yield name, "real", canonical(scipy.io.mmread(path))


def generated(sizes: tuple[int, ...], seed: int) -> list[tuple[str, str, int]]:
    """``(name, family, nnz)`` of the generated matrices of one seed."""
    return [(f"{family}-{nnz}-s{seed}", family, nnz) for nnz in sizes for family in FAMILIES
            if family != "hypersparse" or nnz <= LARGEST_HYPERSPARSE]


def fit_set() -> list[tuple[str, str, object]]:
    """What the model is fitted on: ``(name, family, nnz or None for a real matrix)``."""
    return [(name, "real", None) for name in TRAINING] + generated(FIT_SIZES, FIT_SEED)


def benchmark_set() -> list[tuple[str, str, object]]:
    """What the model is judged on: held-out real matrices and fresh generated ones."""
    return [(name, "real", None) for name in HELD_OUT] + generated(BENCHMARK_SIZES,
                                                                   BENCHMARK_SEED)


def load(name: str, family: str, nnz: int | None, seed: int) -> sp.csr_array | None:
    """The matrix of one entry of a set (None when a real one is not available here)."""
    if nnz is None:
        found = list(real((name,)))
        return found[0][2] if found else None
    return canonical(generate(family, nnz, seed))
