#!/usr/bin/env python
"""The sparse-weight product of the ONNX importer against BLAS on the dense weight.

    python benchmarks/sparse_weight_kernel.py [--batch 256] [--k 256] [--n 512]

A pruned layer ``Y = X @ W`` (X: batch x k, W: k x n) runs at opt level 3 as
``Y^T(j,i) = sum(k, W^T(j,k) * X^T(k,i))`` with W^T in CSR and the batch innermost, prebound
with ``Kernel.bind`` (threads as the runtime decides). This script times that kernel, with X^T
already transposed (as between chained sparse layers), against NumPy's matmul on the dense
weight (OpenBLAS on one thread, as in ``onnx_models.py``), at several densities. The crossover
is what ``SPARSE_WEIGHT_MAX_DENSITY_WITH_BLAS`` in ``tensoralg/onnx/passes/fusion.py`` encodes.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tensoralg as ta  # noqa: E402


def median_ms(fns: dict, calls: int = 200, rounds: int = 5) -> dict:
    """Median time of each function, in ms: rounds interleave them, so that noise on a shared
    machine hits all alike; the median over rounds of each round's median is kept."""
    for fn in fns.values():
        fn()
    per_round = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times = []
            for _ in range(calls // rounds):
                start = time.perf_counter()
                fn()
                times.append(time.perf_counter() - start)
            per_round[name].append(statistics.median(times))
    return {name: statistics.median(v) * 1e3 for name, v in per_round.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--n", type=int, default=512)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, args.k)).astype(np.float32)
    x_t = np.ascontiguousarray(x.T)
    kernel = ta.compile("Y(j,i) = sum(k, W(j,k) * X(k,i))", formats={"W": ta.CSR},
                        dtype=np.float32)
    print(f"X {args.batch}x{args.k} times W {args.k}x{args.n}, float32")
    print(f"{'density':>8}  {'sparse kernel ms':>16}  {'BLAS dense ms':>13}  {'BLAS/sparse':>11}")
    for density in (0.02, 0.05, 0.10, 0.15, 0.20, 0.30):
        w = rng.standard_normal((args.k, args.n)).astype(np.float32)
        w[rng.random(w.shape) >= density] = 0.0
        call = kernel.bind(W=sp.csr_array(w.T), X=x_t)
        assert np.allclose(call().T, x @ w, rtol=1e-4, atol=1e-4)
        times = median_ms({"sparse": call, "blas": lambda w=w: x @ w})
        sparse_ms, blas_ms = times["sparse"], times["blas"]
        print(f"{density:>8.2f}  {sparse_ms:>16.3f}  {blas_ms:>13.3f}  {blas_ms / sparse_ms:>11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
