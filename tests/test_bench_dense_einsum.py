"""benchmarks/dense_einsum.py: its cases are valid einsums, and its report computes each ratio
and the geometric means from the rows it is given."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import dense_einsum  # noqa: E402

import tensoralg as ta  # noqa: E402


def test_every_case_is_an_einsum_of_its_shapes():
    for _, subscripts, shapes, dtype in dense_einsum.CASES:
        small = [np.ones([min(n, 3) for n in shape], dtype=dtype) for shape in shapes]
        np.testing.assert_allclose(ta.einsum(subscripts, *small),
                                   np.einsum(subscripts, *small), err_msg=subscripts)


def test_report_ratios_and_means():
    rows = [{"what": "w", "subscripts": "ij,jk->ik", "shapes": "2x2 , 2x2", "dtype": "float64",
             "tensoralg_us": 10.0, "numpy_us": 20.0, "opt_einsum_us": 5.0},
            {"what": "v", "subscripts": "i,j->ij", "shapes": "2 , 2", "dtype": "float32",
             "tensoralg_us": 4.0, "numpy_us": 2.0}]
    text = dense_einsum.render(rows, "today")
    assert "| w | `ij,jk->ik` | 2x2 , 2x2 | float64 | 10 µs | 2.00 | 0.50 |" in text
    assert "| v | `i,j->ij` | 2 , 2 | float32 | 4 µs | 0.50 | - |" in text
    assert "numpy / tensoralg 1.00 (1 of 2 rows at 0.9 or above)" in text
    assert "opt_einsum / tensoralg 0.50 (0 of 1 rows" in text and "torch" not in text
