"""SpGEMM with and without the sparse output's reservation (``lower/assemble.py``, ``_reserve``).

Each variant runs in processes of its own, alternating, because the allocator's state after
one variant's large buffers changes the other's page faults when both share a process. Prints
the median of ``--calls`` calls per process, for ``--pairs`` pairs of processes. Run from the
project root (needs ../shared/data):

    python benchmarks/spgemm_reserve.py [--pairs 2] [--calls 15] [matrix ...]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "matrices"
DEFAULT = ["wiki-Vote", "hangGlider_2", "rajat01", "bayer10"]


def child(name: str, variant: str, calls: int) -> None:
    """One process: the median ms of ``calls`` SpGEMMs of ``name`` squared, one thread."""
    import scipy.io

    import tensoralg as ta
    from tensoralg.lower import assemble

    ta.set_num_threads(1)
    if variant == "doubling":
        assemble.SparseWriter._reserve = lambda self, position: []
        ta.api.kernel_cache().disk = None          # a kernel built without the reservation
    a = scipy.io.mmread(DATA / f"{name}.mtx.gz").tocsr()
    a.sum_duplicates()
    k = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr", "C": "csr"})
    k(A=a, B=a)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        k(A=a, B=a)
        times.append(time.perf_counter() - start)
    print(f"{statistics.median(times) * 1e3:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrices", nargs="*", default=DEFAULT)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.calls)
        return
    print("| matrix | with reservation, ms | doubling only, ms |\n|---|---|---|")
    for name in args.matrices:
        runs: dict[str, list[str]] = {"reserve": [], "doubling": []}
        for _ in range(args.pairs):
            for variant in runs:
                done = subprocess.run([sys.executable, __file__, "--calls", str(args.calls),
                                       "--child", name, variant],
                                      capture_output=True, text=True, check=True)
                runs[variant].append(done.stdout.strip().splitlines()[-1])
        print(f"| {name} | {', '.join(runs['reserve'])} | {', '.join(runs['doubling'])} |")


if __name__ == "__main__":
    main()
