"""benchmarks/random_sparse_einsum.py: its draws are valid einsums of the operands it makes,
and its report computes the ratios and geometric means from the rows it is given."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import random_sparse_einsum as bench  # noqa: E402

import tensoralg as ta  # noqa: E402


def test_draws_are_einsums_of_their_operands():
    pick, seen = random.Random(3), 0
    while seen < 12:
        case = bench.draw(pick)
        if case is None:
            continue
        seen += 1
        # the same draw at small sizes: every index 2..6 long, so the check stays cheap
        small = {**case, "sizes": {c: 2 + i for i, c in enumerate(case["sizes"])},
                 "density": 0.5}
        operands = bench.operands_of(small, np.random.default_rng(seen))
        terms = case["subscripts"].split("->")[0].split(",")
        assert len(terms) == len(case["kinds"]) and case["kinds"][0] != "dense"
        dense = [bench._dense(op) for op in operands]
        got = ta.einsum(case["subscripts"], *operands)
        got = got.toarray() if sp.issparse(got) else bench._dense(got)
        np.testing.assert_allclose(got, np.einsum(case["subscripts"], *dense), rtol=1e-4,
                                   atol=1e-4, err_msg=case["subscripts"])


def test_report_ratios_and_means():
    rows = [{"subscripts": "ab,b->a", "kinds": ["csr", "dense"], "sizes": {"a": 9, "b": 8},
             "density": 0.01, "dtype": "float64", "tensoralg_us": 10.0, "pydata_us": 40.0,
             "numpy_dense_us": 5.0},
            {"subscripts": "ab->", "kinds": ["coo"], "sizes": {"a": 9, "b": 8},
             "density": 0.001, "dtype": "float32", "tensoralg_us": 10.0, "pydata_us": 10.0}]
    text = bench.render(rows, "today", 2, 0)
    assert "| pydata / tensoralg | 2.00 | 2 of 2 | 0 | 1.00 |" in text
    assert "| numpy_dense / tensoralg | 0.50 | 0 of 1 | 0 | 0.50 |" in text
    assert "| `ab->` | coo | a=9, b=8 | 0.001 | float32 | 10 µs | 1.00 | - |" in text
