"""The same SpMV under CSR, CSC, DCSR, COO and dense storage: time each and check it.

    python examples/formats_experiment.py

The format changes the loops the compiler writes (print one with --ir): CSR walks rows and
gathers from x, CSC walks columns and scatters into y, DCSR skips empty rows, COO walks the
entries, dense visits every (i, j).
"""
import sys
import time

import numpy as np

import tensoralg as ta
from tensoralg import data

FORMATS = {
    "CSR": ta.CSR,
    "CSC": ta.CSC,
    "DCSR": ta.DCSR,
    "COO": ta.COO,
    "dense": ta.dense(2),
}


def best_of(fn, repeats=10):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(show_ir=False):
    A = data.load("lp_ship04l").to_scipy("array")      # 402 x 2166, 42 empty rows
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    expect = A @ x
    print(f"SpMV y = A x on lp_ship04l: {A.shape[0]} x {A.shape[1]}, nnz {A.nnz}\n")
    print(f"{'format':7} {'levels':14} {'max abs err':>11}  {'time':>10}")
    for name, fmt in FORMATS.items():
        T = ta.Tensor.from_scipy(A).convert(fmt)        # convert once, outside the timing
        kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": fmt})
        y = kernel(A=T, x=x)
        error = np.abs(y - expect).max()
        assert error < 1e-9, name
        seconds = best_of(lambda: kernel(A=T, x=x))
        print(f"{name:7} {str(fmt):14} {error:11.1e}  {seconds * 1e3:7.3f} ms")
        if show_ir:
            print(kernel.source("ir"))
    print(f"{'scipy':7} {'csr_array':14} {0.0:11.1e}  {best_of(lambda: A @ x) * 1e3:7.3f} ms")


if __name__ == "__main__":
    main(show_ir="--ir" in sys.argv)
