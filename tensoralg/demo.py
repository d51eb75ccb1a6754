"""The demo behind ``tensoralg demo``: four classic sparse kernels on a real matrix.

The matrix is a bundled one (``bcspwr10``, ``lp_ship04l``, ``ca-GrQc``) or any Matrix Market
file (``.mtx`` or ``.mtx.gz``) given by its path; an existing path wins over a bundled name.
SpMV, SpMM, SDDMM and SpGEMM run through ``ta.einsum`` on scipy inputs; each result is checked
against scipy (or NumPy, for SDDMM's sampled product) and timed side by side: the first call
(which compiles the kernel, or loads it from the on-disk cache), a cached call, and scipy. The
generated IR of the SpMV follows, so that a newcomer sees the loop the compiler wrote.

>>> import io
>>> run_demo("lp_ship04l", out=io.StringIO())
0
"""
from __future__ import annotations

import os
import pathlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TextIO

import numpy as np
import scipy.sparse as sp

import tensoralg as ta
from tensoralg import data
from tensoralg.api import kernel_cache

MATRICES = ("bcspwr10", "lp_ship04l", "ca-GrQc")
MATRIX_SUFFIXES = (".mtx", ".mtx.gz")
DENSE_COLUMNS = 16
REPEATS = 5


@dataclass(frozen=True)
class Case:
    """One kernel of the demo: einsum subscripts, operands, and the scipy answer."""

    name: str
    subscripts: str
    operands: tuple[Any, ...]
    reference: Callable[[], Any]


@dataclass(frozen=True)
class Outcome:
    case: Case
    result_type: str
    error: float
    ok: bool
    first_s: float
    compiled: bool
    cached_s: float
    scipy_s: float


def cases(A: sp.csr_array, rng: np.random.Generator) -> list[Case]:
    """SpMV, SpMM, SDDMM and SpGEMM on ``A`` with random dense factors."""
    m, n = A.shape
    x = rng.standard_normal(n)
    X = rng.standard_normal((n, DENSE_COLUMNS))
    U = rng.standard_normal((m, DENSE_COLUMNS))
    V = rng.standard_normal((n, DENSE_COLUMNS))
    B = A.T.tocsr()                            # A @ A.T works for any shape
    rows, cols = _coordinates(A)

    def sddmm() -> sp.csr_array:               # A ⊙ (U Vᵀ), sampled at A's nonzeros only
        values = A.data * np.einsum("ij,ij->i", U[rows], V[cols])
        return sp.csr_array((values, A.indices, A.indptr), shape=A.shape)

    return [
        Case("SpMV", "ij,j->i", (A, x), lambda: A @ x),
        Case("SpMM", "ij,jk->ik", (A, X), lambda: A @ X),
        Case("SDDMM", "ij,ik,jk->ij", (A, U, V), sddmm),
        Case("SpGEMM", "ij,jk->ik", (A, B), lambda: A @ B),
    ]


def _coordinates(A: sp.csr_array) -> tuple[np.ndarray, np.ndarray]:
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return rows, A.indices


def max_abs(value: Any) -> float:
    """The largest absolute entry of a dense or sparse result (0 when it has none)."""
    if sp.issparse(value):
        return float(abs(value).max()) if value.nnz else 0.0
    return float(np.max(np.abs(np.asarray(value)), initial=0.0))


def max_abs_error(got: Any, expect: Any) -> float:
    """The largest absolute difference of two results, dense or sparse."""
    if sp.issparse(got) or sp.issparse(expect):
        return max_abs(sp.csr_array(got) - sp.csr_array(expect))
    return max_abs(np.asarray(got) - np.asarray(expect))


def _best_time(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _choices() -> str:
    return (f"choose one of the bundled matrices {', '.join(MATRICES)}, "
            f"or give the path of a .mtx or .mtx.gz file")


def load_matrix(name: str) -> tuple[str, sp.csr_array]:
    """The demo's matrix as ``(label, float64 CSR array)``: a file path or a bundled name.

    An existing file is read as Matrix Market (``.mtx`` or ``.mtx.gz``); otherwise ``name``
    must be one of ``MATRICES``. Anything else is a ``FormatError`` that lists the choices.

    >>> label, A = load_matrix("lp_ship04l")
    >>> label, A.shape, A.dtype
    ('lp_ship04l', (402, 2166), dtype('float64'))
    >>> load_matrix("nosuch")
    Traceback (most recent call last):
    ...
    tensoralg.errors.FormatError: 'nosuch' is neither a file nor a bundled matrix; choose one ...
    """
    if not name.strip():
        raise ta.FormatError(f"the matrix name is empty; {_choices()}")
    path = pathlib.Path(os.path.expanduser(name))
    if os.path.isdir(path):
        raise ta.FormatError(f"{name}: is a directory, not a matrix file; {_choices()}")
    if os.path.isfile(path):
        return name, _read_matrix(path, name)
    if name in MATRICES:
        return name, _as_float_csr(data.load(name))
    raise ta.FormatError(f"{name!r} is neither a file nor a bundled matrix; {_choices()}")


def _read_matrix(path: pathlib.Path, name: str) -> sp.csr_array:
    if not path.name.endswith(MATRIX_SUFFIXES):
        raise ta.FormatError(f"{name}: the demo reads Matrix Market files (.mtx or .mtx.gz); "
                             f"{_choices()}")
    return _as_float_csr(ta.read(path))


def _as_float_csr(tensor: ta.Tensor) -> sp.csr_array:
    """A float64 scipy CSR array of a 2-D tensor (array-format files come back dense)."""
    csr = tensor.convert("csr").to_scipy("array")
    return sp.csr_array(csr, dtype=np.float64)


def run_case(case: Case, backend: str) -> Outcome:
    cache = kernel_cache()
    compiles = cache.compiles
    start = time.perf_counter()
    got = ta.einsum(case.subscripts, *case.operands, backend=backend)
    first = time.perf_counter() - start
    compiled = cache.compiles > compiles
    cached = _best_time(lambda: ta.einsum(case.subscripts, *case.operands, backend=backend))
    expect = case.reference()
    scipy_s = _best_time(case.reference)
    error = max_abs_error(got, expect)
    ok = error <= 1e-9 * max(1.0, max_abs(expect))
    return Outcome(case, type(got).__name__, error, ok, first, compiled, cached, scipy_s)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A small left-aligned text table."""
    widths = [max(len(row[k]) for row in [header, *rows]) for k in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run_demo(matrix: str = "bcspwr10", backend: str = "llvm", out: TextIO | None = None) -> int:
    """Run the demo on ``matrix`` (a bundled name or a ``.mtx``/``.mtx.gz`` path); returns 0
    when every result matches scipy, 1 otherwise."""
    out = out or sys.stdout
    label, A = load_matrix(matrix)
    out.write(f"tensoralg {ta.__version__} demo: {label}, {A.shape[0]} x {A.shape[1]}, "
              f"nnz {A.nnz}, backend {backend}\n\n")
    outcomes = [run_case(c, backend) for c in cases(A, np.random.default_rng(0))]
    header = ("kernel", "einsum", "result", "max abs err", "check", "first call",
              "cached call", "scipy")
    rows = [(o.case.name, o.case.subscripts, o.result_type, f"{o.error:.1e}",
             "OK" if o.ok else "FAIL",
             f"{_ms(o.first_s)} ({'compile' if o.compiled else 'disk cache'})",
             _ms(o.cached_s), _ms(o.scipy_s)) for o in outcomes]
    out.write(table(header, rows) + "\n")
    out.write(f"\nfirst call: parse, lower, compile ({backend}) and run, or load the kernel "
              f"from the on-disk cache;\ncached call: best of {REPEATS}; scipy: best of "
              f"{REPEATS} (SDDMM reference: NumPy on A's nonzeros).\n")
    spmv = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, backend=backend)
    out.write("\nThe SpMV kernel, as tensoralg IR "
              "(ta.compile(\"y(i) = A(i,j) * x(j)\", formats={\"A\": \"csr\"}).source(\"ir\")):\n\n")
    out.write(spmv.source("ir").rstrip("\n") + "\n")
    failed = [o.case.name for o in outcomes if not o.ok]
    if failed:
        out.write(f"\nFAILED: {', '.join(failed)} differ from scipy\n")
        return 1
    out.write("\nAll results match scipy.\n")
    return 0
