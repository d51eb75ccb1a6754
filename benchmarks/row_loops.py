#!/usr/bin/env python
"""SpMV's row loop and TTV's fibre loop under their vectorize hints, against the default.

    python benchmarks/row_loops.py [--threads 1]

The figures behind ``vectorize(i, w, tail=mask)`` (docs/guide/schedules.md) and the compiler's
own ``vectorize(k, 4, tail=mask)`` on TTV's fibre loop (``lower/scheduling.fibre_vector_hint``):

- SpMV ``y(i) = A(i,j) * x(j)`` on every matrix of ``../shared/data`` and ``run.py
  --generated``'s two 2e4 x 2e4 matrices: the default row loop, and the schedules
  ``vectorize(j, 8, tail=mask)`` and ``vectorize(j, 4, tail=mask)``;
- TTV ``Y(i,j) = T(i,j,k) * v(k)`` (CSF into DCSR) on the FROSTT tensors and the generated
  2000^3 one: the default (which takes the fibre hint), ``unroll(k, 1)`` (a hint of the
  schedule's own, which keeps the compiler's off: LLVM's own vectorizing) and
  ``vectorize(k, 1)`` (no vectors).

Each cell is a median time in µs over 5 rounds, then the ratio to the first column (below 1:
faster than it); a geometric mean closes each table. One thread by default, since the hints
change the loop a thread runs. The VM these ran on moves by ±20-40% between runs.
"""
from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import scipy.io

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (benchmarks/run.py: the data, and timing that waits for optimised code)

import tensoralg as ta  # noqa: E402

SPMV = "y(i) = A(i,j) * x(j)"
TTV = "Y(i,j) = T(i,j,k) * v(k)"
SPMV_SCHEDULES = (None, "vectorize(j, 8, tail=mask)", "vectorize(j, 4, tail=mask)")
# unroll(k, 1) gives the fibre loop a hint of its own, which keeps the compiler's off: LLVM
# vectorizes it as it sees fit, as before the hint
TTV_SCHEDULES = (None, "unroll(k, 1)", "vectorize(k, 1)")


def table(title: str, schedules, cases) -> None:
    """Time each case (name, kernel-maker, operands) under each schedule; print the table."""
    print(f"\n{title}\n{'':16s}" + "".join(f"{str(s or 'default'):>30s}" for s in schedules))
    logs = [[] for _ in schedules]
    for name, make, operands in cases:
        times = [run.median_of(run.measure(lambda k=make(s): k(**operands))) for s in schedules]
        cells = [f"{t * 1e6:10.1f} µs ({t / times[0]:.2f})" for t in times]
        for log, t in zip(logs, times):
            log.append(math.log(t / times[0]))
        print(f"{name[:16]:16s}" + "".join(f"{c:>30s}" for c in cells), flush=True)
    print(f"{'geomean':16s}" + "".join(f"{math.exp(sum(g) / len(g)):>30.3f}" for g in logs))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    ta.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*spmatrix.*")
    rng = np.random.default_rng(0)
    generated = dict(run.generated_sources())

    matrices = [(name, run.canonical(scipy.io.mmread(path)))
                for name, path in run.matrix_sources(quick=False)]
    matrices += [(name, generated[name]("float64")) for name in ("uniform-2e4", "power-law-2e4")]
    spmv = [(name, lambda s: ta.compile(SPMV, formats={"A": "csr"}, schedule=s),
             {"A": A, "x": rng.random(A.shape[1])}) for name, A in matrices]
    table(f"SpMV, {args.threads} thread(s)", SPMV_SCHEDULES, spmv)

    tensors = [(name, run.load_tensor(path, run.TENSOR_SHAPES.get(name)))
               for name, path in run.tensor_sources(quick=False)]
    tensors.append(("uniform-2000^3", generated["uniform-2000^3"]("float64")))
    ttv = []
    for name, (coords, vals, shape) in tensors:
        T = ta.Tensor.from_coords(coords, vals, shape, format="sss")
        ttv.append((name, lambda s: ta.compile(TTV, formats={"T": "sss", "Y": "ss"}, schedule=s),
                    {"T": T, "v": rng.random(shape[2])}))
    table(f"TTV into DCSR, {args.threads} thread(s)", TTV_SCHEDULES, ttv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
