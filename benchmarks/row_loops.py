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

    python benchmarks/row_loops.py --choice [--threads 2]

instead times the SpMV row loop the runtime picks per matrix (``runtime/rows.py``: plain,
masked tail or unrolled) against the plain kernel everywhere, in one process and interleaved,
on the matrices above and the structures of ``benchmarks/zoo.py``: each row names the kind the
matrix takes and both times over scipy's; geometric means close the table. The figures in
``runtime/rows.py`` come from it.
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


def choice_table(threads: int, matrices, rng) -> None:
    """SpMV: the row loop each matrix takes (``runtime/rows.py``) against the plain kernel,
    both over scipy's time, interleaved in one process (the plain one by making every matrix
    take it, ``api.row_kernel_kind``)."""
    import tensoralg.api as api

    chosen_kind = api.row_kernel_kind
    kernel = ta.compile(SPMV, formats={"A": "csr"})
    print(f"\nSpMV, row loop chosen per matrix against the plain kernel, {threads} thread(s)\n"
          f"{'':22s}{'kind':>10s}{'plain / scipy':>16s}{'chosen / scipy':>16s}")
    logs: list[tuple[float, float]] = []
    for name, A in matrices:
        x = rng.random(A.shape[1])
        best = {}
        for _ in range(2):
            for which, kind_of in (("plain", lambda pos: ""), ("chosen", chosen_kind)):
                api.row_kernel_kind = kind_of
                try:
                    for _ in range(2):          # the second call builds the variant
                        kernel(A=A, x=x)
                    t = run.median_of(run.measure(lambda: kernel(A=A, x=x)))
                finally:
                    api.row_kernel_kind = chosen_kind
                best[which] = min(best.get(which, math.inf), t)
        scipy_s = run.median_of(run.measure(lambda: A @ x))
        plain, chosen = best["plain"] / scipy_s, best["chosen"] / scipy_s
        logs.append((math.log(plain), math.log(chosen)))
        print(f"{name[:22]:22s}{chosen_kind(A.indptr) or 'plain':>10s}{plain:16.2f}"
              f"{chosen:16.2f}", flush=True)
    means = [math.exp(sum(log[k] for log in logs) / len(logs)) for k in (0, 1)]
    print(f"{'geomean':22s}{'':10s}{means[0]:16.3f}{means[1]:16.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--choice", action="store_true",
                        help="the per-matrix row loop against the plain kernel everywhere")
    args = parser.parse_args(argv)
    ta.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message=".*spmatrix.*")
    rng = np.random.default_rng(0)
    generated = dict(run.generated_sources())

    matrices = [(name, run.canonical(scipy.io.mmread(path)))
                for name, path in run.matrix_sources(quick=False)]
    matrices += [(name, generated[name]("float64")) for name in ("uniform-2e4", "power-law-2e4")]
    if args.choice:
        import zoo  # noqa: PLC0415  (benchmarks/zoo.py: its structures)

        choice_table(args.threads, matrices + [(name, make())
                                               for name, make in zoo.matrices().items()], rng)
        return 0
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
