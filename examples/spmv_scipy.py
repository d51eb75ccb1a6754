"""SpMV on scipy.sparse inputs with ta.einsum, checked and timed against scipy.

    python examples/spmv_scipy.py
"""
import time

import numpy as np

import tensoralg as ta
from tensoralg import data


def best_of(fn, repeats=20):
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    A = data.load("ca-GrQc").to_scipy("array")          # a real co-authorship graph, CSR
    x = np.random.default_rng(0).standard_normal(A.shape[1])
    print(f"A: {A.shape[0]} x {A.shape[1]} {type(A).__name__}, nnz {A.nnz}")

    start = time.perf_counter()
    y = ta.einsum("ij,j->i", A, x)                       # compiles (or loads) the kernel
    first = time.perf_counter() - start
    error = np.abs(y - A @ x).max()
    print(f"y: {type(y).__name__} of shape {y.shape}; max abs error vs scipy {error:.1e}")
    assert error < 1e-12

    cached = best_of(lambda: ta.einsum("ij,j->i", A, x))
    scipy_time = best_of(lambda: A @ x)
    print(f"first call {first * 1e3:.2f} ms, cached {cached * 1e3:.3f} ms, "
          f"scipy {scipy_time * 1e3:.3f} ms")

    # The same product as a compiled kernel called by operand name.
    spmv = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    assert np.allclose(spmv(A=A, x=x), y)
    print("\nThe kernel's loop:\n" + spmv.source("ir"))


if __name__ == "__main__":
    main()
