"""SpGEMM against scipy with the same output contract.

scipy's ``A @ A`` leaves each row's column indices unsorted (``has_sorted_indices`` is False);
tensoralg returns canonical CSR. This prints both ratios: against scipy as it is, and against
scipy followed by ``sort_indices()``, and the page faults per call of tensoralg and of scipy
(``getrusage``; a large output's fresh pages are much of a product's system time). Run from the
project root (needs ../shared/data):

    python benchmarks/spgemm_sorted.py [matrix ...]
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np
import scipy.io

import tensoralg as ta

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "matrices"
DEFAULT = ["bayer10", "rajat01", "wiki-Vote", "ca-GrQc", "bcsstk33"]


def best(fn, repeats: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def faults_per_call(fn, calls: int = 3) -> float:
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def sorted_product(a):
    c = a @ a
    c.sort_indices()
    return c


def main(names: list[str]) -> None:
    print("| matrix | tensoralg | scipy `A @ A` | scipy + sort | ratio vs scipy | "
          "ratio vs scipy + sort | page faults per call, tensoralg / scipy |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in names:
        a = scipy.io.mmread(DATA / f"{name}.mtx.gz").tocsr().astype(np.float64)
        ours = best(lambda: ta.einsum("ij,jk->ik", a, a))
        plain, both = best(lambda: a @ a), best(lambda: sorted_product(a))
        faults = (faults_per_call(lambda: ta.einsum("ij,jk->ik", a, a)),
                  faults_per_call(lambda: a @ a))
        print(f"| {name} | {ours:.2f} | {plain:.2f} | {both:.2f} | {plain / ours:.2f} | "
              f"{both / ours:.2f} | {faults[0]:.0f} / {faults[1]:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
