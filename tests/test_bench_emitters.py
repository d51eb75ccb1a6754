"""benchmarks/emitters.py: its patches are the windows a convolution reads, and its report
computes each ratio and the verdict from the rows it is given."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import emitters  # noqa: E402


def test_patches_times_the_weights_is_the_convolution():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 7))
    w = rng.standard_normal((4, 3, 3, 3))
    for stride, pad in ((1, 1), (2, 0)):
        out = (7 + 2 * pad - 3) // stride + 1
        got = (emitters._patches(x, 3, stride, pad) @ w.reshape(4, -1).T).reshape(
            2, out, out, 4)
        padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        expected = np.zeros((2, out, out, 4))
        for y in range(out):
            for z in range(out):
                window = padded[:, :, y * stride:y * stride + 3, z * stride:z * stride + 3]
                expected[:, y, z] = np.einsum("nchw,mchw->nm", window, w)
        np.testing.assert_allclose(got, expected)


def test_report_ratios_and_verdict():
    rows = [{"kind": "product", "shape": "8x8x8", "dtype": "float32", "fmas": 2**30,
             "one_row_us": 120.0, "loops_us": 60.0, "blocked_us": 40.0, "generated_us": 4.0,
             "blas_us": 3.0},
            {"kind": "convolution", "shape": "c", "dtype": "float32", "fmas": 2**20,
             "loops_us": 30.0, "generated_us": 20.0, "direct_us": 10.0}]
    text = emitters.render(rows, "today")
    # the IR's time is the better of its own schedule and the k blocks
    assert ("| product | 8x8x8 | float32 | 120 µs | 60 µs | 40 µs | 4 µs | - | 3 µs | 10.00 |"
            in text)
    assert "| convolution | c | float32 | - | 30 µs | - | 20 µs | 10 µs | - | 3.00 |" in text
    assert "Products: 0 of 1 within 1.10" in text and "Convolutions: 3.0-3.0x" in text
    assert "Both emitters stay" in text and "3.0-3.0x faster than one row" in text
    rows[0]["blocked_us"] = 4.2
    text = emitters.render(rows, "today")
    assert "Products: 1 of 1 within 1.10" in text and "within reach on every product" in text
