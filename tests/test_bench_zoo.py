"""benchmarks/zoo.py: its generated structures are what their names say, and its report shows
the ratios of a small hand-made result file (tensoralg over each baseline: below 1 faster).
Importing the script must leave the session's kernel cache alone (``run.py``, which points it
elsewhere, is imported only when the script runs)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import zoo  # noqa: E402


def test_structures():
    arrow = zoo._arrow(50)
    assert arrow.nnz == 50 + 2 * 49 and arrow.has_canonical_format
    assert np.diff(arrow.indptr)[0] == 50 and set(np.diff(arrow.indptr)[1:]) == {2}
    lap = zoo._laplacian(5)
    assert lap.shape == (25, 25) and lap.nnz == 25 + 4 * 20
    assert np.allclose(lap.toarray(), lap.toarray().T)
    band = zoo._banded(40, 3)
    rows, cols = band.nonzero()
    assert np.abs(rows - cols).max() == 3 and band.nnz == 40 * 7 - 12
    empty = zoo._mostly_empty(1000, 0.02, 30)
    assert (np.diff(empty.indptr) > 0).sum() == 20
    rmat = zoo._rmat(8, 4)
    lengths = np.diff(rmat.indptr)
    assert rmat.shape == (256, 256) and lengths.max() > 8 * lengths.mean()   # skewed rows
    assert set(zoo.NO_SPGEMM) <= set(zoo.matrices())


def _row(data: str, kernel: str, mine: float, scipy: float | None, status: str = "ok") -> dict:
    base = {"scipy": {"number": 1, "times": [scipy]} if scipy else {"skip": "n/a"},
            "mkl": {"skip": "no API"}, "torch": {"number": 1, "times": [mine * 2]}}
    return {"kernel": kernel, "data": data, "dtype": "float64", "shape": [4, 5], "nnz": 7,
            "status": status, "tensoralg": {"number": 1, "times": [mine]}, "baselines": base}


def test_report():
    data = {"date": "2026-12-06T06:00:00+00:00", "git": {"short": "abc1234"},
            "machine": {"cpu_model": "a CPU"}, "threads": {"requested": 2},
            "rows": [_row("tiny-30", "spgemm", 3e-5, 2e-5), _row("lap2d-400", "spmv", 1e-4, 2e-4)]}
    text = zoo.render(data)
    assert "| tiny-30 | 4x5 | 7 | spgemm | 30.0us | 1.50 | no API | 0.50 | ok |" in text
    assert "| lap2d-400 | 4x5 | 7 | spmv | 100.0us | 0.50 | no API | 0.50 | ok |" in text
    assert "1 of 2 rows run more than 1.1x scipy's time: spgemm on tiny-30 (1.50)" in text
    assert "commit abc1234" in text


def test_importing_the_script_keeps_the_session_cache(session_cache_dir):
    import os

    assert "run" not in sys.modules
    assert os.environ["TENSORALG_CACHE_DIR"] == str(session_cache_dir)
