#!/usr/bin/env python
"""Judge automatic format selection on matrices its cost model was not fitted on.

    python benchmarks/selection.py [--quick] [--repeats 7] [--out FILE.json]

For every matrix of ``selection_data.benchmark_set()`` (the held-out real matrices, and the
seven generated families drawn with another seed than the fit's) and each of SpMV
(``ij,j->i``), transposed SpMV (``ji,j->i``) and SpMM with 16 columns (``ij,jk->ik``), the
matrix given as scipy CSR:

- ``ta.select.choose`` picks a format, timed (the median of 21 decisions);
- ``ta.select.experiment`` measures every default candidate (dense up to 256 MiB), twice in
  a row; a candidate's run time is its fastest call of either (on a shared machine, other
  work slows some calls of a run, rarely all), and the two passes give the noise floor: how
  often the first pass's best candidate is within 10% of the second pass's best. The
  conversion from CSR is measured again, the median of up to 3 (the experiment converts
  once, and one sample is noisy on a busy machine).

Two costs are judged. *One call*: conversion + run, what ``ta.einsum(..., formats="auto")``
pays (``choose(calls=1)``). *Reused*: the run alone, for a kernel called many times on the
converted operand (``choose(calls=math.inf)``). For each, the report (``report.py``) counts how
often the automatic choice is within 10% of the best measured candidate and its slowdown
against the best (median, worst), next to the fixed choice "keep the input's CSR". An SpMM
whose dense result would exceed ``OUTPUT_LIMIT`` entries is left out, with a note: the
experiment's result check alone would take minutes. Also measured: the decision time on
10^6-entry CSR matrices (uniform and power-law, 10^5 rows).

Results go to ``results/selection-<YYYYMMDD-HHMMSS>-<commit>.json`` (or ``--out``).
About 8-10 minutes on 2 cores; ``--quick`` takes the small generated matrices only.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import numpy as np
import record  # benchmarks/record.py, beside this file
import selection_data as data

import tensoralg as ta
from tensoralg.select.candidates import resolve
from tensoralg.select.cost_model import SHIPPED_MODEL, CostModel
from tensoralg.select.training import measure_conversions

EXPRESSIONS = (("spmv", "ij,j->i"), ("spmv_t", "ji,j->i"), ("spmm", "ij,jk->ik"))
WIDTH = 16
OUTPUT_LIMIT = 1 << 22          # dense SpMM results checked entry by entry: keep them small
DECISIONS = 21                  # decisions timed per case (median)
MODEL = CostModel.load(SHIPPED_MODEL)   # the shipped model, never a calibrated one


def operand(subscripts: str, matrix, rng: np.random.Generator) -> np.ndarray:
    m, n = matrix.shape
    if subscripts == "ij,j->i":
        return rng.standard_normal(n)
    if subscripts == "ji,j->i":
        return rng.standard_normal(m)
    return rng.standard_normal((n, WIDTH))


def decision_times(subscripts: str, operands: list, calls: float) -> tuple[str, list[float]]:
    """The format ``choose`` picks and the seconds of ``DECISIONS`` decisions (after one)."""
    picked = ta.select.choose(subscripts, operands, calls=calls, model=MODEL).formats[0]
    times = []
    for _ in range(DECISIONS):
        start = time.perf_counter()
        ta.select.choose(subscripts, operands, calls=calls, model=MODEL)
        times.append(time.perf_counter() - start)
    return picked, record.rounded(times)


def case(name: str, family: str, matrix, kernel: str, subscripts: str, repeats: int,
         rng: np.random.Generator) -> dict:
    m, n = matrix.shape
    entry = {"matrix": name, "family": family, "shape": [m, n], "nnz": int(matrix.nnz),
             "kernel": kernel, "subscripts": subscripts}
    if kernel == "spmm" and m * WIDTH > OUTPUT_LIMIT:
        entry["skipped"] = f"the {m}x{WIDTH} result would take minutes to check"
        return entry
    operands = [matrix, operand(subscripts, matrix, rng)]
    entry["auto"], entry["decision_s"] = decision_times(subscripts, operands, 1)
    entry["auto_reused"], _ = decision_times(subscripts, operands, math.inf)
    # Two experiments, one after the other: the cost of a candidate is its fastest call in
    # either (what other work on the machine rarely touches), and how often the first one's
    # best is within 10% of the second's tells how far measurement noise alone goes.
    tables = [ta.select.experiment(subscripts, operands, repeats=repeats, seed=seed,
                                   progress=False) for seed in (data.BENCHMARK_SEED, 2)]
    # An experiment converts once per candidate; a lone sample of a ~1 ms conversion can be
    # several times too slow on a busy machine, so conversions are measured again (median).
    formats = [resolve(row.formats[0][1], 2) for row in tables[0].rows]
    conversions = {target: seconds for _, target, seconds in
                   measure_conversions(matrix, formats, sources=("csr",))}
    second = {row.formats[0][1]: row for row in tables[1].rows}
    entry["candidates"] = [
        {"format": fmt, "run_s": min(row.run_min_s, second[fmt].run_min_s),
         "conversion_s": conversions[fmt],
         "passes": [{"run_min_s": r.run_min_s, "run_median_s": r.run_median_s,
                     "experiment_conversion_s": r.conversion_s} for r in (row, second[fmt])],
         "timing": row.timing}
        for row in tables[0].rows if (fmt := row.formats[0][1]) in second]
    entry["notes"] = sorted({note for table in tables for note in table.notes})
    return entry


def million_entry_decisions() -> list[dict]:
    """Decision times on 10^6-entry CSR matrices with 10^5 rows (uniform, power-law)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(data.BENCHMARK_SEED)
    size, entries = 100_000, 1_000_000
    weights = rng.pareto(1.5, size) + 1.0
    shapes = {"uniform": (rng.integers(0, size, entries), rng.integers(0, size, entries)),
              "power-law": (rng.choice(size, entries, p=weights / weights.sum()),
                            rng.integers(0, size, entries))}
    found = []
    for name, (rows, cols) in shapes.items():
        matrix = data.canonical(sp.csr_array((np.ones(entries), (rows, cols)),
                                             shape=(size, size)))
        for kernel, subscripts in EXPRESSIONS:
            _, times = decision_times(subscripts, [matrix, operand(subscripts, matrix, rng)], 1)
            found.append({"matrix": name, "shape": [size, size], "nnz": int(matrix.nnz),
                          "kernel": kernel, "decision_s": times})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small generated matrices only")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per candidate")
    parser.add_argument("--out", help="write the JSON here instead of results/")
    args = parser.parse_args(argv)
    begun = record.start()
    start = time.perf_counter()
    model = MODEL
    print(f"model: {model}", flush=True)
    entries = data.benchmark_set()
    if args.quick:
        entries = [e for e in entries if e[2] is not None and e[2] <= 30_000]
    rng = np.random.default_rng(data.BENCHMARK_SEED)
    cases = []
    for name, family, nnz in entries:
        matrix = data.load(name, family, nnz, data.BENCHMARK_SEED)
        if matrix is None:
            print(f"{name}: not available here, skipped", flush=True)
            continue
        for kernel, subscripts in EXPRESSIONS:
            entry = case(name, family, matrix, kernel, subscripts, args.repeats, rng)
            cases.append(entry)
            print(summary_line(entry), flush=True)
    decisions = million_entry_decisions()
    for entry in decisions:
        print(f"decision on {entry['matrix']} 10^6 entries, {entry['kernel']}: "
              f"{statistics.median(entry['decision_s']) * 1e6:.0f} µs", flush=True)
    payload = {"seed": data.BENCHMARK_SEED, "threads": {"tensoralg": ta.get_num_threads()},
               "method": {"repeats": args.repeats, "width": WIDTH, "decisions": DECISIONS,
                          "held_out": list(data.HELD_OUT), "sizes": list(data.BENCHMARK_SIZES),
                          "output_limit": OUTPUT_LIMIT},
               "model": dict(model.meta), "cases": cases, "million_entry_decisions": decisions,
               "elapsed_s": time.perf_counter() - start}
    path = record.write("selection", payload, begun, args.out)
    print(f"wrote {path}")
    return 0


def summary_line(entry: dict) -> str:
    head = f"{entry['matrix']:24s} {entry['kernel']:7s}"
    if "skipped" in entry:
        return f"{head} skipped: {entry['skipped']}"
    costs = {c["format"]: c["run_s"] + c["conversion_s"] for c in entry["candidates"]}
    best = min(costs, key=costs.get)
    auto = costs.get(entry["auto"], math.inf)
    return (f"{head} auto {entry['auto']:6s} {auto / costs[best]:5.2f}x best ({best}); csr "
            f"{costs.get('csr', math.inf) / costs[best]:5.2f}x; reused: auto "
            f"{entry['auto_reused']}; decision "
            f"{statistics.median(entry['decision_s']) * 1e6:.0f} µs")


if __name__ == "__main__":
    sys.exit(main())
