#!/usr/bin/env python
"""Render RESULTS.md, ONNX_RESULTS.md and EINSUM_SUITES.md, with their plots, from the latest
benchmark results.

    python benchmarks/report.py [--results benchmarks/results] [--out benchmarks] [--no-plots]

``run.py``, ``overhead.py``, ``onnx_models.py`` and ``einsum_suites.py`` write their raw
results to ``results/<script>-<YYYYMMDD-HHMMSS>-<commit>.json``; this script takes the latest
file of each (by the date in its name) and writes the report of that one run: the method,
medians and spread, ratios against each baseline measured in the same run, geometric means,
and PNG plots beside the Markdown. ``RESULTS.md`` holds ``run.py``'s kernel tables, then
``run.py --generated``'s tables (its file is ``generated-*.json``), then ``overhead.py``'s
fixed costs, then a table of targets computed from those files, then
``einsum_suites.py``'s counts of the libraries' einsum tests that pass (all their failure
categories go to ``EINSUM_SUITES.md``), and last ``selection.py``'s figures of automatic format
selection (``selection_report.py``). Nothing is carried over from earlier runs (git keeps
the history).

Statistics, the same everywhere:

- a *measurement* is a list of samples (seconds per call); its time is their median and its
  spread (``±``) half their interquartile range, as a percentage of the median;
- a kernel *ratio* is ``median(baseline samples) / median(tensoralg samples)``: above 1,
  tensoralg is faster;
- an ONNX ratio is paired: the median over rounds of onnxruntime's time in that round over
  tensoralg's time in the same round;
- a geometric mean is taken over the rows where both sides ran and agreed with the reference.

>>> median([3.0, 1.0, 2.0]), spread([1.0, 2.0, 4.0, 6.0, 7.0])    # (6 - 2) / 2 / 4
(2.0, 0.5)
>>> round(geomean([0.5, 2.0, 4.0]), 6)
1.587401
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from record import parse_file_name  # benchmarks/record.py, beside this file
from selection_report import selection_lines
from suites_report import RESULTS_TOP, RESULTS_WRONG, suites_lines

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
KERNEL_SCRIPT, OVERHEAD_SCRIPT, ONNX_SCRIPT = "run", "overhead", "onnx_models"
GENERATED_SCRIPT = "generated"     # run.py --generated: fixed sizes, float64 and float32
SUITES_SCRIPT = "einsum_suites"
SELECTION_SCRIPT = "selection"     # selection.py: automatic format selection, held out
DASK_SCRIPT = "dask_scale"         # dask_scale.py: SpMM and MTTKRP blockwise on a LocalCluster
DASK_SPEEDUP_GOAL = 1.6            # issue goal: two workers vs one thread, SpMM

KERNEL_TITLES = {
    "spmv": "SpMV: `y = A @ x` (`ij,j->i`)",
    "spmm": "SpMM: `Y = A @ B`, `B` dense with 16 columns (`ij,jk->ik`)",
    "sddmm": "SDDMM: `Z = A ⊙ (X @ Y)`, rank 16, CSR result (`ij,ik,kj->ij`)",
    "spgemm": "SpGEMM: `A @ A` (square) or `A @ A.T`, CSR result (`ij,jk->ik`)",
    "add": "Sparse add: `A + A.T` (square) or `A + A[perm]`, CSR result",
    "mttkrp": "MTTKRP: `M(i,r) = T(i,j,k) C(j,r) D(k,r)`, `T` in CSF, rank 16",
    "ttv": "TTV: `Y(i,j) = T(i,j,k) v(k)`, `T` in CSF, sparse result (`ijk,k->ij`)",
}
BASELINE_TITLES = {
    "scipy": "scipy.sparse", "numpy": "NumPy (dense)", "pydata": "pydata sparse",
    "tensora": "tensora", "mkl": "MKL (sparse_dot_mkl)", "torch": "torch.sparse",
}
COLORS = {"scipy": "C0", "numpy": "C1", "pydata": "C2", "tensora": "C3", "mkl": "C4",
          "torch": "C5"}    # one colour per baseline in every plot
# baselines 5-1000x slower than the rest: in the tables and the geomean plot, not per matrix
FAR_BASELINES = ("numpy", "pydata")
ONNX_PAIRS = {"ort1/L3": ("ort1", "L3"), "ortN/LN": ("ort0", "LN"), "ort1/CSR": ("ort1", "L3csr")}

# Targets (RESULTS.md, "Targets"). The kernel targets are tensoralg time / baseline time, the
# geometric mean over the rows of run.py's kernel tables: the inverse of the ratios printed
# there, so below 1 means tensoralg is faster.
KERNEL_GOALS = {"spmv": 0.50, "spmm": 0.25, "sddmm": 0.12, "spgemm": 0.6, "add": 0.7,
                "mttkrp": 0.05, "ttv": 0.12}
# run.py --generated: the goal of each (kernel, input) against scipy, where it differs from
# KERNEL_GOALS, and the share of the machine's read bandwidth the large SpMV must reach
GENERATED_GOALS = {("spmv", "power-law-2e4"): 0.40}
BANDWIDTH_GOAL = 0.40
BANDWIDTH_INPUT = "uniform-1e6"    # run.py's input whose matrix is far larger than the caches
OTHER_SYSTEMS = ("mkl", "torch", "tensora", "pydata")   # "the fastest other system"
DISPATCH_GOALS = {"einsum": 2.0, "kernel": 1.5}          # x scipy's time per call
FIRST_CALL_GOAL_S, CACHE_HIT_GOAL_S = 0.060, 0.005      # median over processes, each kernel
ROUTES_TOLERANCE = 0.10                                  # einsum / compiled kernel within 10%
GEMM_GOAL = 1.1                                          # tensoralg / NumPy
# A one-line explanation for a target that does not hold, keyed by the target's name in the
# table. Kept by hand; state only what the data shows.
TARGET_NOTES: dict[str, str] = {
    "spmv vs scipy": "bound by memory traffic: a split SpMV runs 1.1-1.7x faster than one "
                     "thread from ~2.5e4 stored values (runtime/threads.GATHER_UNITS), and "
                     "the two vCPUs gain least on the gather-bound vector loops; the row loop "
                     "is chosen per matrix (runtime/rows.py: masked tail where consecutive "
                     "rows mostly differ in length, unrolled where they repeat at 4-7 "
                     "entries), each variant only where it is measured to pay on the host "
                     "(api.row_variant_pays): on the Intel Xeon VM the masked tail took "
                     "wiki-Vote 0.57 -> 0.44 of scipy's time, on the AMD EPYC VM it lost "
                     "1.2-2.4x on matrices of up to 2^14 rows and runs on none of these "
                     "(tensoralg / scipy between the runs at c786d35 and 41f1461: ca-GrQc "
                     "1.79 -> 1.35, rajat01 1.20 -> 0.87, adder_dcop_05 1.64 -> 1.15); on "
                     "the small ones a call's "
                     "fixed costs and the split's overhead are most of the time",
    "spmm vs scipy": "each row runs one pass per register tile, zeroed in registers and "
                     "stored once, within ~1.15x of a hand-written AVX-512 row loop on one "
                     "thread (bayer10, 16 columns: 206 vs 182 µs; an ad hoc C comparison, not "
                     "kept); two threads give 1.5-1.9x "
                     "from 1e5 stored values; on short rows (ca-GrQc, bcspwr10, cryg2500) a "
                     "row loop that knows the 16 columns at compile time ran 0.75-0.8x of the "
                     "kernel's time in generated C under gcc, but the same specialisation of "
                     "the LLVM kernel (the width a constant in its IR) ran 0.96-1.04x on 8 "
                     "matrices (one thread, same process, 2026-12-05, ad hoc): no "
                     "width-specialised variants",
    "sddmm vs scipy": "one fused kernel writing A's pattern in place (lower/pattern.py), four "
                      "entries' dot products jammed; the per-call copy of Y relaid along the "
                      "rank is the largest cost left (bayer10: 119 of ~480 µs on two threads, "
                      "timed apart on 2026-12-04, not kept)",
    "spgemm vs scipy": "at the goal's edge: tensoralg sorts every output row (scipy does "
                       "not); rows of a few multiply-adds each (road networks, circuit "
                       "matrices: luxembourg_osm, cryg2500, bcspwr10, lp_ship04l) run on one "
                       "thread at 1.0-1.1x scipy's speed, since counting them first for a "
                       "split costs as much as the second thread saves "
                       "(threads.COUNTED_MIN_PER_ROW); longer rows split at 1.4-2.2x",
    "add vs scipy": "one thread: a split add joins its ranges by copying what the second thread "
                    "saved (copy-free parallel assembly is not built), so a sum runs whole; on "
                    "small sums the call's fixed costs are most of the difference",
    "mttkrp vs scipy": "near the goal and noisy: two real tensors only, 0.045-0.059 across "
                       "runs on an Intel Xeon VM and 0.044-0.070 on an AMD EPYC (Zen 4) one; "
                       "the noise is the baseline's (2026-12-04, four runs of --only mttkrp "
                       "alternating two commits: tensora/tensoralg 4.60-4.73 in all four, "
                       "scipy/tensoralg 19.6-43.5)",
    "ttv vs scipy": "two tensors: collegemsg at 0.03-0.05 of scipy's time, wn18rr (40943 x "
                    "11 x 40943, 9.3e4 entries) at 0.35-0.6: its fibres hold 1.4 entries on "
                    "average, so the loop over fibres branches on every one of them, and the "
                    "gather of v (320 KB) waits behind the branches; the fibre's loop runs as "
                    "one masked 4-lane vector (scheduling.fibre_vector_hint: 0.85x the time "
                    "LLVM's own vectorizing takes, benchmarks/row_loops.py); scipy's formulation is a 4.5e5-row SpMV into a dense result. A "
                    "fibre-flattened loop (the products gathered in one pass, summed per fibre "
                    "after) is not built",
    "spmv power-law-2e4 vs scipy": "its rows run the masked-tail loop (runtime/rows.py: 71% "
                                   "of them hold under 10 values, of irregular lengths): "
                                   "0.38-0.29 of scipy's time on the Intel Xeon VM, "
                                   "0.51-0.52 before; on the AMD EPYC VM 0.47-0.55, where "
                                   "the masked and the plain loops tie on this matrix (one "
                                   "thread 286 and 276 µs, ad hoc)",
    "spmv power-law-2e4 vs fastest other system": "MKL's inspector-executor and torch.sparse "
                                                  "on two threads, within noise of "
                                                  "tensoralg (0.85-1.18 across runs and hosts)",
    "spmv uniform-2e4 vs scipy": "0.41-0.50 on the Intel Xeon VM, 0.59 on the AMD EPYC VM, "
                                 "where x (160 KB) is gathered from the L2 cache at 20 "
                                 "values a row and the second thread gains 1.8x",
    "spmv uniform-1e6 vs scipy": "0.42-0.44 on the Intel Xeon VM; on the AMD EPYC VM both "
                                 "tensoralg and scipy take ~23 ms, the 8 MB vector x gathered "
                                 "at random from memory (each vCPU's L2 holds 2 MB): the "
                                 "gather's latency, not the matrix's bytes, bounds both",
    "spmv uniform-1e6, share of the read bandwidth": "58-65% on the Intel Xeon VM; on the AMD "
                                                     "EPYC VM the random gather of x bounds "
                                                     "the kernel (see the row above), far "
                                                     "below what sequential reads reach",
    "spmm uniform-2e4 vs fastest other system": "within noise of MKL's inspector-executor "
                                                "(0.98-1.03 across runs), which also reads "
                                                "B's rows from memory",
    "spmv uniform-1e6 vs fastest other system": "both read the 96 MB matrix at the memory's "
                                                "pace (see the bandwidth row): within noise "
                                                "of MKL, on either side across runs",
    "spmm uniform-2e4 vs scipy": "float64 at 32 columns: B (5 MB) no longer fits the L2 "
                                 "cache, and each stored value gathers a 256-byte row of it "
                                 "from memory; MKL's inspector-executor runs 1.0-1.03x "
                                 "tensoralg's time; float32 (half the bytes) 0.15-0.26 across "
                                 "runs",
    "ttv uniform-2000^3 vs scipy": "at the goal's edge, 0.11-0.14 across runs and dtypes (one "
                                   "thread 0.19): 1.1 entries a fibre, each fibre's loop exit a "
                                   "likely misprediction; scipy's formulation writes a dense "
                                   "4e6-element result",
    "spmm power-law-2e4 vs scipy": "at the goal's edge (0.24-0.26 across runs), as for the "
                                   "uniform matrix in float64",
    "spmm power-law-2e4 vs fastest other system": "within noise of MKL (0.99-1.05 across "
                                                  "runs), which also reads B's rows from "
                                                  "memory",
    "spgemm uniform-2e4 vs scipy": "20 values a row give 400 products a row and an output of "
                                   "8e6 entries (96 MB in float64) that both libraries write "
                                   "through fresh pages; tensoralg also sorts every row "
                                   "(scipy does not); 0.60-0.77 across runs and dtypes",
    "spgemm power-law-2e4 vs scipy": "as for the uniform matrix: its rows' products are "
                                     "written through fresh pages and sorted; 0.54-0.62 "
                                     "across runs and dtypes, scipy's own time moving by "
                                     "20% between runs (57-72 ms in float64)",
    "spgemm uniform-2e4 vs fastest other system": "MKL returns unsorted rows; tensoralg "
                                                  "sorts every row",
    "spgemm power-law-2e4 vs fastest other system": "MKL returns unsorted rows; tensoralg "
                                                    "sorts every row",
    "add uniform-2e4 vs scipy": "split on two threads, rows counted first by marks "
                                "(runtime/count.py): 0.60-0.74 across runs and dtypes; the "
                                "merge of rows whose columns interleave at random mispredicts "
                                "its branches (one thread: 0.8 of scipy's time)",
    "add power-law-2e4 vs scipy": "as for add uniform-2e4 vs scipy (0.64-0.78 across runs)",
    "einsum vs compiled kernel, mttkrp": "at the band's edge and noisy: 1.01-1.12 across runs of the same code (both routes run the same kernel; a 3 ms call moves by tens of percent on this VM)",
    "spmv vs fastest other system": "torch.sparse ran on both cores; tensoralg splits an SpMV "
                                    "from ~2.5e4 stored values",
    "spmm vs fastest other system": "MKL's inspector-executor and torch.sparse ran on both "
                                    "cores; tensoralg's second thread gives 1.1-1.4x here",
    "sddmm vs fastest other system": "torch.sparse's sampled product ran on both cores",
    "kernel call vs scipy, small SpMV": "at the goal's edge: a compiled kernel's call checks "
                                        "and packs its operands in Python (~1.5 µs over "
                                        "scipy's); 1.46-1.66 across runs of the same code on "
                                        "this VM; the bound call is well under scipy's",
    "einsum call vs scipy, small SpMV": "~4 µs of Python dispatch over scipy's ~4 µs; "
                                        "1.68-2.04 across runs on this VM",
    "spgemm vs fastest other system": "MKL returns unsorted rows; tensoralg sorts every row",
    "first call, new process, empty cache": "a new kernel runs a quick, unoptimised build "
                                            "first (codegen/tiered.py); what is left is "
                                            "loading llvmlite in a new process (~18 ms, most "
                                            "of it its LLVM library), lowering and the IR "
                                            "passes (2-10 ms of Python), writing the module's "
                                            "LLVM IR (4-11 ms of Python) and the unoptimised "
                                            "build (3-9 ms, LLVM's setup on first use "
                                            "included); process-level times on this VM drift "
                                            "by up to 1.6x within one run (spgemm 57-96 ms "
                                            "over five processes, 2026-12-06)",
    "first call, new process, cache hit": "the lowered program and its IR digest come from "
                                          "the cache; what is left is unpickling them, loading "
                                          "the shared object (a private copy) and the source "
                                          "fingerprint (~1 ms); process-level times on these "
                                          "VMs drift by 2x within a day (2026-12-04: every "
                                          "kernel within 3-4 ms in the morning, 7.5-9.4 ms in "
                                          "the evening; an ad hoc side-by-side of two "
                                          "checkouts that evening, not kept: fd24593 6.0 ms, "
                                          "0ab8af7 6.2; later, 2e2d080 at 3.4-4.4 ms and "
                                          "c1358c9 at 4.0-5.3, while a side-by-side of the two "
                                          "in one window gave 6.1-6.8 and 6.0-8.9 ms)",
    "dense GEMM 1024^3 float64": "the default route is a BLAS dispatch through NumPy's own "
                                 "gemm; a gap here is the call's fixed cost or noise",
    "dense GEMM 1024^3 float32": "as for float64",
    "dense GEMM 256^3 float64": "as for 1024^3 float64",
    "dense GEMM 256^3 float32": "as for 1024^3 float64",
}
DISPATCH_CALLS = {"scipy": "scipy `A @ x`", "einsum": '`ta.einsum("ij,j->i", A, x)`',
                  "kernel": "compiled kernel `k(A=A, x=x)`",
                  "bound": "bound call `k.bind(A=A, x=x)()`"}


# ---------------------------------------------------------------------------------------------
# statistics


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def quartiles(samples: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles (inclusive method; a single sample is both)."""
    if len(samples) < 2:
        return samples[0], samples[0]
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return q1, q3


def spread(samples: Sequence[float]) -> float:
    """Half the interquartile range over the median (0.05 reads "±5%")."""
    q1, q3 = quartiles(samples)
    mid = median(samples)
    return (q3 - q1) / 2 / mid if mid else 0.0


def geomean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None and v > 0]
    if not kept:
        return None
    return math.exp(sum(math.log(v) for v in kept) / len(kept))


def kernel_ratio(row: dict[str, Any], baseline: str) -> float | None:
    """Baseline median over tensoralg median, or None where either did not run."""
    ours, theirs = row.get("tensoralg"), row["baselines"].get(baseline, {})
    if not ours or "times" not in theirs:
        return None
    return median(theirs["times"]) / median(ours["times"])


def counted(row: dict[str, Any], baseline: str) -> float | None:
    """The ratio when it belongs in a geometric mean (status ok, baseline agreed), else None."""
    if row["status"] != "ok" or row["baselines"].get(baseline, {}).get("bad"):
        return None
    return kernel_ratio(row, baseline)


# ---------------------------------------------------------------------------------------------
# formatting


def fmt_time(seconds: float | None) -> str:
    """Three significant digits in a unit that suits."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale or unit == "µs":
            value = seconds / scale
            digits = 0 if value >= 100 else 1 if value >= 10 else 2
            return f"{value:.{digits}f} {unit}"
    raise AssertionError("unreachable")


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}"


def fmt_spread(samples: Sequence[float]) -> str:
    return f"±{spread(samples) * 100:.0f}%"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` has one letter per column (``l`` or ``r``, default ``r``)."""
    align = align.ljust(len(header), "r")
    marks = ["---" if a == "l" else "---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def provenance(data: dict[str, Any], source: str) -> str:
    git = data.get("git", {})
    commit = git.get("short") or "unknown"
    changed = git.get("changed") or []
    state = (f" with uncommitted changes in {len(changed)} file(s)" if git.get("dirty")
             else "" if git.get("dirty") is False else " (no git)")
    date = data.get("date", "?").replace("T", " ").replace("+00:00", " UTC")
    return (f"Measured {date} at commit `{commit}`{state}, with `{data.get('command', '?')}`; "
            f"rendered by `python benchmarks/report.py` from `{source}`. Generated file: rerun "
            f"the benchmark and then the report rather than editing it.")


def setup_lines(data: dict[str, Any], threads: str) -> list[str]:
    machine = data.get("machine", {})
    flags = ", ".join(machine.get("cpu_vector_flags") or []) or "unknown"
    versions = ", ".join(f"{name} {version}" for name, version in data.get("versions", {}).items()
                         if version)
    absent = ", ".join(name for name, version in data.get("versions", {}).items()
                       if not version) or "none"
    env = ", ".join(f"{k}={v}" for k, v in data.get("environment", {}).items() if v) or "none set"
    rows = [("machine", f"{machine.get('cpu_model')}, {machine.get('cores')} cores "
                        f"(vector extensions: {flags}); {machine.get('platform')}"),
            ("threads", threads), ("seed", str(data.get("seed", "-"))),
            ("versions", versions), ("not installed", absent),
            ("environment", env),
            ("run time", f"{data.get('elapsed_s', 0):.0f} s")]
    return table(["", ""], rows, "ll")


# ---------------------------------------------------------------------------------------------
# RESULTS.md (run.py)


def kernel_columns(data: dict[str, Any]) -> list[str]:
    return [c for c in data.get("columns", []) if c != "tensoralg"]


def kernel_summary(data: dict[str, Any]) -> dict[str, dict[str, tuple[float | None, int]]]:
    """``{kernel or "all": {baseline: (geomean, rows counted)}}`` over the ok rows."""
    rows = data["measurements"]
    kernels = [k for k in KERNEL_TITLES if any(r["kernel"] == k for r in rows)]
    groups = [(k, [r for r in rows if r["kernel"] == k]) for k in kernels] + [("all", rows)]
    summary = {}
    for name, group in groups:
        summary[name] = {}
        for baseline in kernel_columns(data):
            ratios = [counted(r, baseline) for r in group]
            kept = [v for v in ratios if v is not None]
            summary[name][baseline] = (geomean(kept), len(kept))
    return summary


def ratio_cell(row: dict[str, Any], baseline: str) -> str:
    entry = row["baselines"].get(baseline)
    if entry is None:
        return "-"
    if "skip" in entry:
        return entry["skip"]
    text = fmt_ratio(kernel_ratio(row, baseline))
    return f"{text} (bad)" if entry.get("bad") else text


def time_cell(entry: dict[str, Any] | None) -> str:
    if not entry or "times" not in entry:
        return "-"
    return f"{fmt_time(median(entry['times']))} {fmt_spread(entry['times'])}"


def render_results(data: dict[str, Any] | None, source: str, plots: dict[str, str],
                   overhead: dict[str, Any] | None = None, overhead_source: str = "",
                   suites: dict[str, Any] | None = None, suites_source: str = "",
                   generated: dict[str, Any] | None = None, generated_source: str = "") -> str:
    """The text of RESULTS.md: the kernel tables of one ``run.py`` result file, the fixed
    costs of one ``overhead.py`` result file, the targets computed from both, and the einsum
    test suites of one ``einsum_suites.py`` result file (any file may be missing)."""
    if data is not None:
        head, tail = kernel_lines(data, source, plots), problem_lines(data)
    else:
        head = ["# Kernel benchmarks", "", "No `run.py` result file: the kernel tables and "
                "their targets are missing (`python benchmarks/run.py`, then this report)."]
        tail = []
    if generated is not None:
        head += ["", *generated_section(generated, generated_source)]
    if overhead is not None:
        head += ["", *overhead_section(overhead, overhead_source)]
    head += ["", *targets_section(data, overhead, generated)]
    if suites is not None:
        head += ["", *suites_section(suites, suites_source)]
    if tail:
        head += ["", *tail]
    return "\n".join(head) + "\n"


def render_kernels(data: dict[str, Any], source: str, plots: dict[str, str]) -> str:
    """RESULTS.md for one ``run.py`` result file alone (no fixed costs, no targets)."""
    problems = problem_lines(data)
    return "\n".join(kernel_lines(data, source, plots) + ([""] if problems else [])
                     + problems) + "\n"


def problem_lines(data: dict[str, Any]) -> list[str]:
    """The rows whose status is not ``ok``, as a section (empty when there are none)."""
    problems = [r for r in data["measurements"] if r["status"] != "ok"]
    if not problems:
        return []
    return ["## Problems", "", *(f"- {r['kernel']} on {r['data']}: {r['status']}"
                                 for r in problems)]


def kernel_lines(data: dict[str, Any], source: str, plots: dict[str, str]) -> list[str]:
    """The kernel tables of RESULTS.md for one ``run.py`` result file."""
    columns = kernel_columns(data)
    titles = [BASELINE_TITLES.get(c, c) for c in columns]
    threads = data.get("threads", {})
    thread_text = (", ".join(f"{k} {v}" for k, v in threads.items() if k != "requested")
                   + " (scipy, pydata and tensora kernels are single-threaded)")
    out = ["# Kernel benchmarks", "",
           "tensoralg against " + ", ".join(titles) + ", measured side by side in one run. "
           "**Ratio = baseline median time / tensoralg median time: above 1, tensoralg is "
           "faster.**", "", provenance(data, source), "",
           "See also `ONNX_RESULTS.md` (models against onnxruntime), `ONNX_NODE_TESTS.md` "
           "(the ONNX operator test cases) and `README.md` here (how to run the benchmarks, "
           "and what each baseline column times). The fixed costs (per-call overhead, first "
           "call, dense GEMM) and the table of targets follow the kernel tables.", "",
           "## Setup", ""]
    out += setup_lines(data, thread_text)
    if data.get("missing"):
        out += ["", "Absent columns: " + "; ".join(data["missing"].values()) + "."]
    out += ["", "## Method", ""]
    out += kernel_method(data)
    out += ["", "## Summary: geometric means of the ratios", "",
            "Over the rows with status `ok` where the baseline ran and agreed with scipy "
            "(rows counted in brackets).", ""]
    summary = kernel_summary(data)
    body = [[name if name == "all" else f"`{name}`",
             *(f"{fmt_ratio(g)} ({n})" if g is not None else "-"
               for g, n in (summary[name][c] for c in columns))]
            for name in summary]
    out += table(["kernel", *titles], body, "l")
    if "geomean" in plots:
        out += ["", f"![Geometric mean of the ratios per kernel]({plots['geomean']})"]
    if "per_data" in plots:
        far = " and ".join(BASELINE_TITLES[b] for b in FAR_BASELINES if b in columns)
        out += ["", "Ratio per matrix or tensor, per kernel (log scale" + (
            f"; {far}, far slower, only in the tables" if far else "") + "):", "",
            f"![Ratio per matrix or tensor, per kernel]({plots['per_data']})"]
    for kernel in KERNEL_TITLES:
        rows = [r for r in data["measurements"] if r["kernel"] == kernel]
        if rows:
            out += ["", *kernel_section(kernel, rows, columns, titles, summary[kernel])]
    out += ["", *compile_section(data)]
    return out


def kernel_method(data: dict[str, Any]) -> list[str]:
    method = data.get("method", {})
    return [
        "- All values float64, indices int32; matrices are canonical scipy CSR (sorted, no "
        "duplicates). Every operand is converted once, outside the timed region, into each "
        "library's own format; tensoralg gets the scipy objects directly (llvm backend).",
        f"- A measurement is {method.get('samples', '?')} samples (at least "
        f"{method.get('min_samples', '?')} for slow calls) of the mean time per call over "
        "`number` back-to-back calls, with `number` chosen so that the samples fill about "
        f"{method.get('budget_s', '?')} s; `time.perf_counter`, garbage collector off, after "
        "a warm-up call. Tables show the median; `±` is half the interquartile range of the "
        "samples, as a percentage of the median. The JSON file keeps every sample.",
        "- Every tensoralg result is checked against scipy before it is timed (`WRONG` "
        "otherwise; sparse products against the rounding scale `|A| @ |B|`). A baseline that "
        "disagrees with scipy is marked `(bad)` and left out of the geometric means.",
        "- A word instead of a ratio says why that baseline did not run: `dense>2e8` (a dense "
        "operand or result over 2e8 elements), `flops>2e10` (dense `A @ A` too long), `no "
        "kernel` (tensora has no CSR x CSR -> CSR kernel), `no API` (the library has no such "
        "operation), `error ...` (it raised).",
        "- scipy returns SpGEMM products with unsorted column indices, and so does MKL; "
        "tensoralg, tensora and torch return canonical CSR. The SDDMM and MTTKRP scipy "
        "baselines are formulations scipy can express (a gather on the CSR structure; the "
        "unfolding times a Khatri-Rao product), not fused kernels. torch's SDDMM is "
        "`sampled_addmm` followed by a product with `A`'s values.",
        "- The machine these ran on may be shared and noisy: the same call moves by tens of "
        "percent between runs. Compare ratios within one run, not times across runs.",
    ]


def kernel_section(kernel: str, rows: list[dict[str, Any]], columns: list[str],
                   titles: list[str], summary: dict[str, tuple[float | None, int]]) -> list[str]:
    out = [f"## {KERNEL_TITLES[kernel]}", "",
           "Geometric means: " + ", ".join(
               f"{t} {fmt_ratio(summary[c][0])}" for c, t in zip(columns, titles)
               if summary[c][0] is not None) + ".", "", "Ratios (baseline / tensoralg):", ""]
    out += table(["data", "shape", "nnz", "tensoralg", *titles, "status"],
                 [[r["data"], "x".join(map(str, r.get("shape") or [])), str(r.get("nnz", "")),
                   fmt_time(median(r["tensoralg"]["times"])) if r.get("tensoralg") else "-",
                   *(ratio_cell(r, c) for c in columns), r["status"]] for r in rows],
                 "lrrr" + "r" * len(columns) + "l")
    out += ["", "Median times and spread:", ""]
    out += table(["data", "tensoralg", *titles],
                 [[r["data"], time_cell(r.get("tensoralg")),
                   *(time_cell(r["baselines"].get(c)) for c in columns)] for r in rows], "l")
    return out


def compile_section(data: dict[str, Any]) -> list[str]:
    out = ["## Compile time, dispatch overhead, new process", ""]
    compile_times = data.get("compile", {})
    if compile_times:
        out += [f"First call of each kernel in a fresh kernel cache (compile + one run), after "
                f"a one-time LLVM initialisation of {fmt_time(data.get('llvm_init_s'))}; "
                "tensora's `tensor_method` build time beside it.", ""]
        tensora_times = data.get("tensora_compile", {})
        out += table(["kernel", "first call", "compile (first - warm)", "on",
                      "tensora build"],
                     [[f"`{k}`", fmt_time(c["first_call_s"]), fmt_time(c["compile_s"]),
                       c["on"], fmt_time(tensora_times.get(k))]
                      for k, c in compile_times.items()], "lrrlr")
    probes = data.get("probes", {})
    if probes.get("dispatch"):
        out += ["", "Cached call on a 4x4 CSR matrix, where the arithmetic is nothing:", ""]
        out += table(["call", "median", "spread"],
                     [[label, fmt_time(median(s["times"])), fmt_spread(s["times"])]
                      for label, s in probes["dispatch"].items()], "l")
    if probes.get("disk_cache"):
        out += ["", "A new process, first `ta.einsum` SpMV on bcspwr10 (two children sharing "
                "one new cache directory: the first compiles and stores the kernel, the second "
                "loads it):", ""]
        body = []
        for label, c in probes["disk_cache"].items():
            if "error" in c:
                body.append([label, "error", "", "", ""])
            else:
                body.append([label, fmt_time(c["first_call_s"]), fmt_time(c["second_call_s"]),
                             fmt_time(c["import_s"]), str(c["compiles"])])
        out += table(["process", "first call", "second call", "import tensoralg",
                      "kernels compiled"], body, "l")
    return out


# ---------------------------------------------------------------------------------------------
# RESULTS.md, continued: fixed costs (overhead.py) and targets


def fmt_value(value: float | None, *bounds: float) -> str:
    """A measured ratio: three significant digits (0.0487, 1.23), more where that would print
    a value just past a goal in ``bounds`` as the goal itself.

    >>> fmt_value(1.1012), fmt_value(1.1012, 0.9, 1.1), fmt_value(1.1, 1.1)
    ('1.10', '1.101', '1.10')
    """
    if value is None:
        return "-"
    if value >= 100:
        return fmt_ratio(value)
    digits = 3
    while digits < 8 and any(value != b and f"{value:#.{digits}g}" == f"{b:#.{digits}g}"
                             for b in bounds):
        digits += 1
    return f"{value:#.{digits}g}"


def time_ratio(data: dict[str, Any], numerator: str, denominator: str) -> float | None:
    """``median(data[numerator]) / median(data[denominator])`` (two samples), or None."""
    top, bottom = data.get(numerator), data.get(denominator)
    if not top or not bottom or "times" not in top or "times" not in bottom:
        return None
    return median(top["times"]) / median(bottom["times"])


def process_times(entry: dict[str, Any], label: str) -> tuple[list[float], int, int]:
    """The first-call times of one kernel's ``cold`` or ``hit`` processes that count, how many
    processes ran, and how many of the counted ones never loaded LLVM. A ``hit`` counts only
    when the process compiled nothing (found the kernel in the cache)."""
    runs = entry.get(label, [])
    kept = [r for r in runs if "first_call_s" in r and r.get("ok", True)
            and (label == "cold" or r.get("compiles") == 0)]
    return ([r["first_call_s"] for r in kept], len(runs),
            sum(1 for r in kept if not r.get("llvm_loaded")))


def first_call_medians(overhead: dict[str, Any] | None, label: str) -> dict[str, float]:
    """Per kernel, the median first-call time of its counted ``cold`` or ``hit`` processes."""
    kernels = (overhead or {}).get("first_call", {}).get("kernels", {})
    return {k: median(times) for k, e in kernels.items()
            if (times := process_times(e, label)[0])}


def overhead_section(data: dict[str, Any], source: str) -> list[str]:
    """The fixed costs measured by one ``overhead.py`` result file."""
    threads = data.get("threads", {})
    out = ["## Fixed costs: per-call overhead, first call, einsum route, dense GEMM", "",
           "From `overhead.py`, a run of its own: " + provenance(data, source), ""]
    out += setup_lines(data, ", ".join(f"{k} {v}" for k, v in threads.items()
                                       if k != "requested"))
    method = data.get("method", {})
    out += ["", "Repeated calls (per-call cost, routes, dense GEMM) are timed as in the kernel "
            f"tables, except that the functions compared are sampled in turn (sample 1 of "
            f"each, then sample 2 of each, ...), {method.get('samples', '?')} samples (at least "
            f"{method.get('min_samples', '?')}) of about {method.get('budget_s', '?')} s per "
            f"function ({method.get('gemm_budget_s', '?')} s for dense GEMM). Unlike the "
            "kernel tables, the ratios here are **tensoralg time / other time: below 1, "
            "tensoralg is faster.**"]
    if data.get("dispatch"):
        out += ["", *dispatch_lines(data["dispatch"])]
    if data.get("first_call"):
        out += ["", *first_call_lines(data["first_call"])]
    if data.get("routes"):
        out += ["", *routes_lines(data["routes"])]
    if data.get("gemm"):
        out += ["", *gemm_lines(data)]
    if data.get("problems"):
        out += ["", "Problems in this run:", "", *(f"- {p}" for p in data["problems"])]
    return out


def dispatch_lines(dispatch: dict[str, Any]) -> list[str]:
    samples = dispatch["samples"]
    shape = "x".join(map(str, dispatch.get("shape", [])))
    out = ["### Per-call cost of a small SpMV", "",
           f"A repeated SpMV on a {shape} CSR matrix ({dispatch.get('nnz')} nonzeros, float64), "
           "where the arithmetic is small and the call's fixed cost shows; `k = "
           "ta.compile(\"y(i) = A(i,j) * x(j)\", formats={\"A\": \"csr\"})`. Status: "
           f"{dispatch.get('status', '?')}.", ""]
    out += table(["call", "median", "spread", "x scipy's time"],
                 [[DISPATCH_CALLS.get(name, name), fmt_time(median(s["times"])),
                   fmt_spread(s["times"]), fmt_ratio(time_ratio(samples, name, "scipy"))]
                  for name, s in samples.items()], "l")
    return out


def first_call_lines(first: dict[str, Any]) -> list[str]:
    sizes = first.get("sizes", {})
    out = ["### First call of a new kernel", "",
           f"`ta.compile` + the first call (parse, lower, LLVM, run), timed with "
           f"`time.perf_counter` inside a new Python process (not its imports, not building the "
           f"operands); {first.get('processes', '?')} processes per kernel, median and spread "
           "over the processes. *Empty cache*: each process has a new, empty "
           "`TENSORALG_CACHE_DIR`. *Cache hit*: every process shares one cache that two earlier "
           "processes filled: the first compiled each kernel, the second read it back and "
           "linked it into a shared object (it waited for the background link); a hit counts "
           "when the process compiled nothing. Operands: "
           f"{sizes.get('n', '?')}x{sizes.get('n', '?')} CSR at density "
           f"{sizes.get('density', '?')}, {sizes.get('columns', '?')} dense columns or rank, a "
           f"{sizes.get('tensor', '?')}^3 CSF tensor with about {sizes.get('tensor_nnz', '?')} "
           f"nonzeros, a {sizes.get('gemm', '?')}^3 dense GEMM. A new kernel first runs "
           "code LLVM emitted without optimising it while its optimised build is made on a "
           "background thread (`tensoralg/codegen/tiered.py`); *optimised in place*: the "
           "median time, from the same start, until that build has replaced it "
           "(`ta.wait_for_optimised()` after the first call).", ""]
    body, imports = [], []
    for kernel, entry in first.get("kernels", {}).items():
        cold, cold_runs, _ = process_times(entry, "cold")
        hit, hit_runs, no_llvm = process_times(entry, "hit")
        imports += [r["import_s"] for r in entry.get("cold", []) + entry.get("hit", [])
                    if "import_s" in r]
        formats = ", ".join(f"{n}: {f}" for n, f in entry.get("formats", {}).items()) or \
            "all dense"
        optimised = [r["optimised_s"] for r in entry.get("cold", [])
                     if "optimised_s" in r and r.get("ok", True)]
        body.append([f"`{kernel}`", f"`{entry.get('statement', '')}`", formats,
                     f"{fmt_time(median(cold))} {fmt_spread(cold)}" if cold else "-",
                     fmt_time(median(optimised)) if optimised else "-",
                     f"{len(cold)} of {cold_runs}",
                     f"{fmt_time(median(hit))} {fmt_spread(hit)}" if hit else "-",
                     f"{len(hit)} of {hit_runs}", f"{no_llvm} of {len(hit)}"])
    out += table(["kernel", "statement", "formats", "empty cache", "optimised in place", "ran",
                  "cache hit", "hits", "hits without LLVM"], body, "lll")
    warm = first.get("warm", [])
    if len(warm) == 2 and not any("error" in w for w in warm):
        out += ["", f"The shared cache was filled by two processes: the first compiled "
                f"{warm[0]['compiles']} kernel(s), the second compiled {warm[1]['compiles']} and "
                f"left {warm[1]['linked']} linked shared object(s) in the cache."]
    if imports:
        out += ["", f"`import tensoralg` (with NumPy and SciPy) in these processes, not counted "
                f"above: median {fmt_time(median(imports))}."]
    return out


def routes_lines(rows: list[dict[str, Any]]) -> list[str]:
    out = ["### The einsum route against the compiled kernel", "",
           "The same kernel called repeatedly through `ta.einsum` and through a `ta.compile` "
           "kernel (compiled and warmed up before timing).", ""]
    body = []
    for r in rows:
        fmt = "CSF" if len(r.get("shape", [])) == 3 else "CSR"
        operands = (f"{'x'.join(map(str, r.get('shape', [])))} {fmt}, nnz {r.get('nnz')}"
                    + (f", rank {r['rank']}" if r.get("rank") else ""))
        body.append([f"`{r['kernel']}`", f"`{r.get('subscripts', '')}`", operands,
                     time_cell(r.get("einsum")), time_cell(r.get("compiled")),
                     fmt_value(time_ratio(r, "einsum", "compiled")), r["status"]])
    out += table(["kernel", "subscripts", "operands", "einsum", "compiled kernel",
                  "einsum / kernel", "status"], body, "lll" + "r" * 3 + "l")
    return out


def blas_text(data: dict[str, Any]) -> str:
    pools = data.get("blas_threadpools")
    if not isinstance(pools, list):
        return str(pools or "not recorded")
    blas = [p for p in pools if p.get("user_api") == "blas"]
    return "; ".join(f"{p.get('internal_api')} {p.get('version')}, kernel "
                     f"{p.get('architecture')}, {p.get('num_threads')} thread(s)"
                     for p in blas) or "none found"


def gemm_lines(data: dict[str, Any]) -> list[str]:
    env = data.get("environment", {})
    coretype = ", ".join(f"`{k}={env[k]}`" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
                         if env.get(k)) or "`OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` not set"
    out = ["### Dense GEMM against NumPy", "",
           f"`ta.einsum(\"ik,kj->ij\", A, B)` against NumPy's `A @ B` on square C-ordered "
           f"arrays. NumPy's BLAS: {blas_text(data)}; {coretype}. The default route of such a "
           f"product is a visible dispatch to that same BLAS (`gemm(blas)`, see "
           f"`lower/gemm_form.py`); the *generated* column is tensoralg's own register-tiled "
           f"GEMM (`schedule=\"gemm(generated)\"`), measured beside it so that its gap stays "
           f"in view.", ""]
    body = []
    for r in data["gemm"]:
        flops = 2.0 * r["n"] ** 3
        rate = [f"{flops / median(r[k]['times']) / 1e9:.1f}" if r.get(k) else "-"
                for k in ("tensoralg", "generated", "numpy")]
        body.append([f"{r['n']}^3", r["dtype"], time_cell(r.get("tensoralg")),
                     time_cell(r.get("generated")), time_cell(r.get("numpy")),
                     fmt_value(time_ratio(r, "tensoralg", "numpy")),
                     fmt_value(time_ratio(r, "generated", "numpy")) if r.get("generated")
                     else "-", *rate, r["status"]])
    out += table(["size", "dtype", "tensoralg (default)", "generated", "NumPy",
                  "default / NumPy", "generated / NumPy", "GFLOP/s default",
                  "GFLOP/s generated", "GFLOP/s NumPy", "status"], body, "ll" + "r" * 8 + "l")
    return out


GENERATED_TITLE = "Generated inputs at fixed sizes, float64 and float32"


def generated_cases(data: dict[str, Any]) -> list[tuple[str, str]]:
    """The (kernel, input) pairs of a ``run.py --generated`` file, in the order they ran."""
    return list(dict.fromkeys((r["kernel"], r["data"]) for r in data["measurements"]))


def generated_section(data: dict[str, Any], source: str) -> list[str]:
    """RESULTS.md's tables of ``run.py --generated``: one per value type, ratios as in the
    kernel tables (baseline / tensoralg), and the large SpMV's share of the read bandwidth."""
    columns = kernel_columns(data)
    titles = [BASELINE_TITLES.get(c, c) for c in columns]
    ranks = data.get("method", {}).get("rank", {})
    out = [f"## {GENERATED_TITLE}", "", provenance(data, source), "",
           "The kernels above on generated inputs of fixed sizes (`python benchmarks/run.py "
           "--generated`): a uniform and a power-law 20000 x 20000 matrix with 4e5 stored "
           "values (the power-law one's r-th longest row holds ~r^-0.9 of them), a uniform "
           "1e6 x 1e6 matrix with 8e6 (SpMV only) and a uniform 2000^3 tensor with 1e6 (CSF); "
           f"SpMM with {ranks.get('spmm', '?')} dense columns, SDDMM at rank "
           f"{ranks.get('sddmm', '?')}, MTTKRP at rank {ranks.get('mttkrp', '?')}. Same "
           "method and threads as the kernel tables; results checked against scipy with "
           "rtol 1e-4, atol 1e-5 in float32. **Ratio = baseline / tensoralg: above 1, "
           "tensoralg is faster.**"]
    for dtype in data.get("options", {}).get("dtypes", ["float64"]):
        rows = [r for r in data["measurements"] if r.get("dtype") == dtype]
        if not rows:
            continue
        out += ["", f"### {dtype}", ""]
        out += table(["kernel", "input", "shape", "nnz", "tensoralg", *titles, "status"],
                     [[r["kernel"], r["data"], "x".join(map(str, r.get("shape") or [])),
                       str(r.get("nnz", "")), time_cell(r.get("tensoralg")),
                       *(ratio_cell(r, c) for c in columns), r["status"]] for r in rows],
                     "llrrr" + "r" * len(columns) + "l")
    shares = bandwidth_shares(data)
    if shares:
        bandwidth = data["probes"]["read_bandwidth_bytes_s"]
        out += ["", f"Read bandwidth of this machine: {bandwidth / 1e9:.1f} GB/s (the best of "
                "five NumPy sums over 512 MiB split across the benchmark's threads). The large "
                "SpMV reads its matrix (values, coordinates, row starts) at "
                + ", ".join(f"{rate / 1e9:.1f} GB/s in {dtype} ({share:.0%})"
                            for dtype, (rate, share) in shares.items()) + "."]
    return out


def bandwidth_shares(data: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """``{dtype: (bytes/s, share of the read bandwidth)}`` of the large SpMV's rows (those of
    ``BANDWIDTH_INPUT`` that record their matrix's size)."""
    bandwidth = data.get("probes", {}).get("read_bandwidth_bytes_s")
    shares = {}
    for r in data["measurements"]:
        if bandwidth and r.get("matrix_bytes") and r.get("tensoralg") and \
                r["status"] == "ok" and r["data"] == BANDWIDTH_INPUT:
            rate = r["matrix_bytes"] / median(r["tensoralg"]["times"])
            shares[r["dtype"]] = (rate, rate / bandwidth)
    return shares


def generated_targets(data: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """The targets of ``run.py --generated``: per (kernel, input) tensoralg / scipy and
    tensoralg / the fastest other system, every value type in one cell; the large SpMV's
    share of the read bandwidth."""
    rows: list[tuple[str, str, str, bool | None]] = []
    for kernel, name in generated_cases(data):
        group = [r for r in data["measurements"] if r["kernel"] == kernel and r["data"] == name]
        goal = GENERATED_GOALS.get((kernel, name), KERNEL_GOALS.get(kernel))
        if goal is None:
            continue
        against = "scipy's unsorted product" if kernel == "spgemm" else "scipy.sparse"
        cells, verdicts = [], []
        for r in group:
            theirs = counted(r, "scipy")
            value = 1 / theirs if theirs else None
            cells.append(f"{r['dtype']} " + (fmt_value(value, goal) if value else r["status"]))
            verdicts.append(None if value is None and r["status"] == "ok" else
                            value is not None and value <= goal)
        rows.append((f"{kernel} {name} vs scipy", f"tensoralg / {against} <= {goal:.2f}",
                     ", ".join(cells), _all_hold(verdicts)))
        cells, verdicts = [], []
        for r in group:
            found = [(1 / v, system) for system in OTHER_SYSTEMS
                     if (v := counted(r, system))]
            if found:
                value, system = max(found)
                cells.append(f"{r['dtype']} {fmt_value(value, 1.0)} ({system})")
                verdicts.append(value <= 1)
        if cells:
            rows.append((f"{kernel} {name} vs fastest other system",
                         "tensoralg / the fastest of " + ", ".join(OTHER_SYSTEMS) + " <= 1",
                         ", ".join(cells), _all_hold(verdicts)))
    shares = bandwidth_shares(data)
    if shares:
        rows.append(("spmv uniform-1e6, share of the read bandwidth",
                     f"matrix bytes / time >= {BANDWIDTH_GOAL:.0%} of the machine's",
                     ", ".join(f"{dtype} {share:.0%}" for dtype, (_, share) in shares.items()),
                     all(share >= BANDWIDTH_GOAL for _, share in shares.values())))
    return rows


def _all_hold(verdicts: list[bool | None]) -> bool | None:
    """False when any value type misses its goal, None when none was measured."""
    measured = [v for v in verdicts if v is not None]
    return None if not measured else all(measured)


def targets(run: dict[str, Any] | None, overhead: dict[str, Any] | None
            ) -> list[tuple[str, str, str, bool | None]]:
    """``(name, goal, measured, holds)`` per target; ``holds`` None when not measured."""
    rows: list[tuple[str, str, str, bool | None]] = []
    summary = kernel_summary(run) if run is not None else {}
    for kernel, goal in KERNEL_GOALS.items():
        mean, count = summary.get(kernel, {}).get("scipy", (None, 0))
        value = 1 / mean if mean else None
        against = "scipy's unsorted product" if kernel == "spgemm" else "scipy.sparse"
        rows.append((f"{kernel} vs scipy", f"tensoralg / {against} <= {goal:.2f}",
                     f"{fmt_value(value, goal)} ({count} rows)" if value else "-",
                     None if value is None else value <= goal))
    for kernel in KERNEL_GOALS:
        found = [(1 / mean, system) for system in OTHER_SYSTEMS
                 if (mean := summary.get(kernel, {}).get(system, (None, 0))[0])]
        value, system = max(found) if found else (None, "")
        rows.append((f"{kernel} vs fastest other system",
                     "tensoralg / the fastest of " + ", ".join(OTHER_SYSTEMS) + " <= 1",
                     f"{fmt_value(value, 1.0)} ({system})" if found else "-",
                     None if value is None else value <= 1))
    dispatch = (overhead or {}).get("dispatch")
    for name, goal in DISPATCH_GOALS.items():
        value = time_ratio(dispatch["samples"], name, "scipy") if dispatch else None
        wrong = dispatch is not None and dispatch.get("status", "ok") != "ok"
        rows.append((f"{name} call vs scipy, small SpMV",
                     f"{DISPATCH_CALLS[name]} <= {goal:.1f} x scipy's time",
                     "WRONG" if wrong else fmt_value(value, goal),
                     False if wrong else None if value is None else value <= goal))
    for label, goal, what in (("cold", FIRST_CALL_GOAL_S, "empty cache"),
                              ("hit", CACHE_HIT_GOAL_S, "cache hit")):
        medians = first_call_medians(overhead, label)
        if medians:
            worst = max(medians, key=medians.get)
            within = sum(1 for t in medians.values() if t <= goal)
            measured = (f"slowest {fmt_time(medians[worst])} (`{worst}`); {within} of "
                        f"{len(medians)} kernels within")
        rows.append((f"first call, new process, {what}",
                     f"median <= {fmt_time(goal)} for every kernel",
                     measured if medians else "-",
                     None if not medians else within == len(medians)))
    for r in (overhead or {}).get("routes", []):
        value = time_ratio(r, "einsum", "compiled")
        ok = r["status"] == "ok"
        rows.append((f"einsum vs compiled kernel, {r['kernel']}",
                     f"einsum / kernel within {1 - ROUTES_TOLERANCE:.2f}-"
                     f"{1 + ROUTES_TOLERANCE:.2f}",
                     fmt_value(value, 1 - ROUTES_TOLERANCE, 1 + ROUTES_TOLERANCE) if ok
                     else r["status"], False if not ok else None if value is None else
                     abs(value - 1) <= ROUTES_TOLERANCE))
    for r in (overhead or {}).get("gemm", []):
        value = time_ratio(r, "tensoralg", "numpy")
        ok = r["status"] == "ok"
        rows.append((f"dense GEMM {r['n']}^3 {r['dtype']}",
                     f"tensoralg / NumPy <= {GEMM_GOAL:.2f}",
                     fmt_value(value, GEMM_GOAL) if ok else r["status"],
                     False if not ok else None if value is None else value <= GEMM_GOAL))
    return rows


def targets_section(run: dict[str, Any] | None, overhead: dict[str, Any] | None,
                    generated: dict[str, Any] | None = None) -> list[str]:
    rows = targets(run, overhead) + (generated_targets(generated) if generated else [])
    verdict = {True: "holds", False: "does not hold", None: "not measured"}
    held = sum(1 for *_, h in rows if h)
    measured = sum(1 for *_, h in rows if h is not None)
    out = ["## Targets", "",
           "Computed from the result files above (the kernel rows from `run.py`'s, the rows "
           "naming an input from `run.py --generated`'s, the others from `overhead.py`'s). "
           "**Every ratio here is tensoralg time / other time: "
           "below 1, tensoralg is faster.** For the kernels that is the inverse of the ratios "
           "in the kernel tables, as a geometric mean over the rows counted there; the fastest "
           "other system of a kernel is the one (of MKL, torch.sparse, tensora and pydata "
           "sparse, where it ran) with the largest tensoralg / system. Times are medians. "
           f"{held} of {measured} measured targets hold"
           + (f"; {len(rows) - measured} not measured." if measured < len(rows) else "."), ""]
    out += table(["target", "goal", "measured", "verdict", "why not"],
                 [[name, goal, measured, verdict[holds],
                   TARGET_NOTES.get(name, "") if holds is False else ""]
                  for name, goal, measured, holds in rows], "llrll")
    return out


# ---------------------------------------------------------------------------------------------
# einsum_suites.py: RESULTS.md's section and EINSUM_SUITES.md (the lines: suites_report.py)

SUITES_TITLE = "Einsum drop-in: the libraries' own einsum tests"


def suites_section(data: dict[str, Any], source: str) -> list[str]:
    return [f"## {SUITES_TITLE}", "", provenance(data, source), "",
            *suites_lines(data, RESULTS_TOP, RESULTS_WRONG)]


def render_suites(data: dict[str, Any], source: str, plots: dict[str, str]) -> str:
    """EINSUM_SUITES.md: every failure category and every wrong number."""
    return "\n".join([f"# {SUITES_TITLE}", "", provenance(data, source), "",
                      *suites_lines(data, None, None)]) + "\n"


# ---------------------------------------------------------------------------------------------
# ONNX_RESULTS.md (onnx_models.py)


def onnx_rows(data: dict[str, Any], weights: str) -> list[dict[str, Any]]:
    """The rows of one table (``dense`` or ``pruned``), merged over the runs: samples pooled,
    compile time and memory from the first run, branch groups listed per run."""
    runs = [run[weights] for run in data["runs"]]
    merged = []
    for rows in zip(*runs):
        row = dict(rows[0])
        row["samples"] = {key: [t for r in rows for t in r["samples"].get(key, [])]
                          for key in rows[0]["samples"]}
        row["groups"] = [r.get("groups", []) for r in rows]
        row["wrong"] = sorted({key for r in rows for key in r.get("wrong", [])})
        merged.append(row)
    return merged


def paired_ratios(row: dict[str, Any], name: str) -> list[float]:
    """Per-round ratios onnxruntime / tensoralg (round by round, as measured)."""
    theirs, ours = ONNX_PAIRS[name]
    a, b = row["samples"].get(theirs), row["samples"].get(ours)
    if not a or not b or ours in row.get("wrong", []):
        return []
    return [x / y for x, y in zip(a, b)]


def paired_ratio(row: dict[str, Any], name: str) -> float | None:
    ratios = paired_ratios(row, name)
    return median(ratios) if ratios else None


def onnx_time(row: dict[str, Any], key: str) -> str:
    if key in row.get("wrong", []):
        return "WRONG"
    samples = row["samples"].get(key)
    if not samples:
        return "-"
    return f"{median(samples) * 1e3:.3f} {fmt_spread(samples)}"


def onnx_ratio(row: dict[str, Any], name: str) -> str:
    ratios = paired_ratios(row, name)
    return f"{fmt_ratio(median(ratios))} {fmt_spread(ratios)}" if ratios else "-"


def render_onnx(data: dict[str, Any], source: str, plots: dict[str, str]) -> str:
    """The text of ONNX_RESULTS.md for one ``onnx_models.py`` result file."""
    dense, pruned = onnx_rows(data, "dense"), onnx_rows(data, "pruned")
    threads = data.get("threads", {})
    out = ["# tensoralg.onnx against onnxruntime on recommender models", "",
           "Ratios are onnxruntime time / tensoralg time, thread for thread: **above 1, "
           "tensoralg is faster.**", "", provenance(data, source), "", "## Setup", ""]
    out += setup_lines(data, ", ".join(f"{k} {v}" for k, v in threads.items()))
    out += ["", "## Method", "", *onnx_method(data), "",
            "## Summary: geometric means over the models", ""]
    body = []
    for label, rows in (("dense", dense), ("90% pruned", pruned)):
        for batch in sorted({r["batch"] for r in rows}):
            group = [r for r in rows if r["batch"] == batch]
            body.append([label, str(batch),
                         *(fmt_ratio(geomean(paired_ratio(r, name) for r in group))
                           for name in ("ort1/L3", "ortN/LN"))])
    out += table(["weights", "batch", "ort1/L3", "ortN/LN"], body, "l")
    if "onnx" in plots:
        out += ["", f"![Paired ratios per model]({plots['onnx']})"]
    head = ["model", "batch", "L0", "L1", "L2", "L3", "LN", "ort1", "ortN", "ort1/L3",
            "ortN/LN", "compile s"]
    out += ["", "## Dense models: opt levels 0-3 against onnxruntime", "",
            "Times in ms (median over rounds, `±` half the interquartile range).", ""]
    out += table(head, [onnx_line(r, ("L0", "L1", "L2", "L3")) for r in dense], "l")
    out += ["", "## 90%-pruned weights: level 3 (sparse weights) against onnxruntime on the "
            "same pruned model (dense)", ""]
    out += table(["model", "batch", "L2 (dense)", "L3 (sparse)", "LN (sparse)", "ort1", "ortN",
                  "ort1/L3", "ortN/LN", "compile s"],
                 [onnx_line(r, ("L2", "L3")) for r in pruned], "l")
    out += onnx_extra_sections(dense, pruned)
    return "\n".join(out) + "\n"


def onnx_line(row: dict[str, Any], levels: Sequence[str]) -> list[str]:
    compile_s = row.get("compile_s")
    return [row["model"], str(row["batch"]), *(onnx_time(row, k) for k in levels),
            onnx_time(row, "LN"), onnx_time(row, "ort1"), onnx_time(row, "ort0"),
            onnx_ratio(row, "ort1/L3"), onnx_ratio(row, "ortN/LN"),
            "-" if compile_s is None else f"{compile_s:.2f}"]


def onnx_method(data: dict[str, Any]) -> list[str]:
    method = data.get("method", {})
    runs = len(data["runs"])
    return [
        "- Seven models built with `onnx.helper` (float32, random weights; definitions in "
        "`onnx_models.py`), at batch 1 and 256. `L0`..`L3`: tensoralg at that opt level on "
        "one thread; `LN`: level 3 on all cores; `ort1`: onnxruntime with one intra-op "
        "thread; `ortN`: all cores. `ort1/L3` compares one thread with one, `ortN/LN` all "
        "cores with all.",
        "- Then the same models with 90% of every MatMul/Gemm/Conv weight pruned to zero "
        "(embedding tables untouched): tensoralg level 3 runs them as sparse weights, "
        "onnxruntime runs the same pruned model dense.",
        f"- Every configuration of a row is timed in {method.get('rounds', '?')} interleaved "
        "rounds; a round's time is the median of `max(3, budget / t)` calls (budget "
        f"{method.get('budget_s', '?')} s per row and configuration, split over the rounds). "
        f"{runs} run(s) of the whole script; the rounds of all runs are pooled. A time is the "
        "median over rounds; a ratio is the median of the per-round ratios (onnxruntime "
        "timed right after the tensoralg configuration it is compared with); `±` is half the "
        "interquartile range of the rounds, as a percentage of the median.",
        "- Every tensoralg output is checked against onnxruntime (rtol 1e-3, atol 1e-4) "
        "before timing; `WRONG` otherwise.",
        "- NumPy's BLAS (levels 0-2, and level-3 products no generated kernel covers) is "
        "pinned to one thread (`OPENBLAS_NUM_THREADS=1`).",
        "- Compile = load + the two runs that build the level-3 static plan (batch 2), from "
        "the first run; the on-disk kernel cache may make it shorter on a repeated run.",
        "- The machine these ran on may be shared and noisy: compare ratios within one run.",
    ]


def onnx_extra_sections(dense: list[dict[str, Any]], pruned: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    rows = [(r, "dense") for r in dense] + [(r, "90% pruned") for r in pruned]
    csr = [(r, w) for r, w in rows if r["samples"].get("L3csr")]
    if csr:
        out += ["", "## Multi-hot input fed as CSR (tensoralg only)", "",
                "The multi-hot input passed to tensoralg as a `scipy.sparse.csr_array` (built "
                "outside the timed calls), against onnxruntime on the dense input it needs. "
                "Level 3, one thread each. Not the same input, so reported apart.", ""]
        out += table(["model", "weights", "batch", "L3, dense feed", "L3, CSR feed", "ort1",
                      "ort1/L3", "ort1/CSR"],
                     [[r["model"], w, str(r["batch"]), onnx_time(r, "L3"),
                       onnx_time(r, "L3csr"), onnx_time(r, "ort1"), onnx_ratio(r, "ort1/L3"),
                       onnx_ratio(r, "ort1/CSR")] for r, w in csr], "ll")
    grouped = [(r, w) for r, w in rows if any(r.get("groups", []))]
    if grouped:
        out += ["", "## Branches run at once on all cores (`LN`)", "",
                "Independent branches that the all-cores plan ran at once as one task of the "
                "native pool (kept when the plan's trial found that at least 10% faster), and "
                "in how many runs.", ""]
        body = []
        for r, w in grouped:
            runs = r["groups"]
            names = "; ".join(g.removeprefix("concurrent branches ")
                              for g in next(g for g in runs if g))
            body.append([r["model"], w, str(r["batch"]),
                         f"{sum(1 for g in runs if g)} of {len(runs)}", names])
        out += table(["model", "weights", "batch", "runs", "branches"], body, "llrrl")
    memory = [r for r in dense if r.get("memory")]
    if memory:
        out += ["", "## Memory plan at level 3", "",
                "From `model.profile(feeds)` at level 3: the buffers of every value a node "
                "produces, their sum, the most alive at once, and the arenas the static plan "
                "holds. KiB.", ""]
        out += table(["model", "batch", "buffers", "sum", "peak alive", "arenas held"],
                     [[r["model"], str(r["batch"]), str(r["memory"]["buffers"]),
                       f"{r['memory']['total_bytes'] / 1024:.0f}",
                       f"{r['memory']['peak_bytes'] / 1024:.0f}",
                       f"{r['memory']['planned_bytes'] / 1024:.0f}"] for r in memory], "l")
    return out


# ---------------------------------------------------------------------------------------------
# plots


def plot_kernels(data: dict[str, Any], out_dir: Path, stem: str = "results") -> dict[str, str]:
    """Two PNGs beside RESULTS.md: geomean ratio per kernel, and ratio per matrix per kernel."""
    plt = _pyplot()
    if plt is None:
        return {}
    columns = kernel_columns(data)
    summary = kernel_summary(data)
    names = list(summary)
    fig, ax = plt.subplots(figsize=(9, 3.6), dpi=80)
    width = 0.8 / max(1, len(columns))
    for k, baseline in enumerate(columns):
        values = [summary[n][baseline][0] or float("nan") for n in names]
        ax.bar([i + k * width for i in range(len(names))], values, width,
               label=BASELINE_TITLES.get(baseline, baseline), color=COLORS.get(baseline))
    _ratio_axes(ax, [i + width * (len(columns) - 1) / 2 for i in range(len(names))], names,
                "geometric mean of baseline / tensoralg")
    fig.tight_layout()
    plots = {"geomean": _save(fig, out_dir / f"{stem}-geomean.png")}
    kernels = [k for k in KERNEL_TITLES if any(r["kernel"] == k for r in data["measurements"])]
    columns = [c for c in columns if c not in FAR_BASELINES] or columns
    width = 0.8 / max(1, len(columns))
    fig, axes = plt.subplots(len(kernels), 1, figsize=(10, 2.4 * len(kernels) + 0.6), dpi=72,
                             squeeze=False)
    for ax, kernel in zip(axes[:, 0], kernels):
        rows = [r for r in data["measurements"] if r["kernel"] == kernel]
        for k, baseline in enumerate(columns):
            values = [counted(r, baseline) or float("nan") for r in rows]
            ax.bar([i + k * width for i in range(len(rows))], values, width,
                   label=BASELINE_TITLES.get(baseline, baseline), color=COLORS.get(baseline))
        _ratio_axes(ax, [i + width * (len(columns) - 1) / 2 for i in range(len(rows))],
                    [r["data"] for r in rows], kernel, legend=ax is axes[0, 0])
    fig.tight_layout()
    plots["per_data"] = _save(fig, out_dir / f"{stem}-per-matrix.png")
    return plots


def plot_onnx(data: dict[str, Any], out_dir: Path, stem: str = "onnx-results") -> dict[str, str]:
    """One PNG beside ONNX_RESULTS.md: paired ratios per model, dense and pruned."""
    plt = _pyplot()
    if plt is None:
        return {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), dpi=80, sharey=True)
    for ax, (weights, label) in zip(axes, (("dense", "dense"), ("pruned", "90% pruned"))):
        rows = onnx_rows(data, weights)
        models = list(dict.fromkeys(r["model"] for r in rows))
        series = [(name, batch) for name in ("ort1/L3", "ortN/LN")
                  for batch in sorted({r["batch"] for r in rows})]
        width = 0.8 / max(1, len(series))
        for k, (name, batch) in enumerate(series):
            by_model = {r["model"]: paired_ratio(r, name) for r in rows if r["batch"] == batch}
            ax.bar([i + k * width for i in range(len(models))],
                   [by_model.get(m) or float("nan") for m in models], width,
                   label=f"{name}, batch {batch}")
        _ratio_axes(ax, [i + width * (len(series) - 1) / 2 for i in range(len(models))],
                    models, f"{label}: onnxruntime / tensoralg", legend=ax is axes[0])
    fig.tight_layout()
    return {"onnx": _save(fig, out_dir / f"{stem}.png")}


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        print("note: matplotlib is not installed; the report has no plots "
              "(pip install matplotlib)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _ratio_axes(ax, ticks, labels, title, legend=True):
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    if legend:                          # headroom above the bars for the legend
        bottom, top = ax.get_ylim()
        ax.set_ylim(bottom, top * 4)
        ax.legend(fontsize=7, ncol=3, loc="upper left")


def _save(fig, path: Path) -> str:
    fig.savefig(path, metadata={"Software": None})   # no version stamp: reruns diff cleanly
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path.name


# ---------------------------------------------------------------------------------------------
# files


def latest(results: Path, script: str) -> Path | None:
    """The newest result file of ``script`` (by the date in its name), or None."""
    found = [(parsed[1], path) for path in results.glob(f"{script}-*.json")
             if (parsed := parse_file_name(path.name)) is not None and parsed[0] == script]
    return max(found)[1] if found else None


def selection_section(data: dict[str, Any], source: str) -> list[str]:
    """RESULTS.md's last section: ``selection.py``'s figures (``selection_report.py``)."""
    return selection_lines(data, provenance(data, source), table, fmt_time)


def newest_with(results: Path, script: str, key: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest result file of ``script`` whose ``key`` entry is not empty, and its data."""
    found = sorted(((parsed[1], path) for path in results.glob(f"{script}-*.json")
                    if (parsed := parse_file_name(path.name)) is not None
                    and parsed[0] == script), reverse=True)
    for _, path in found:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get(key):
            return path, data
    return None


def dask_section(results: Path, out_dir: Path) -> list[str]:
    """RESULTS.md's summary of ``dask_scale.py`` (the full tables: DASK_RESULTS.md): per case
    the one-thread time here against the best two-worker compute time, the alternating SpMM
    measurement the goal is judged on, and the memory-capped run. Empty without results."""
    runs = newest_with(results, DASK_SCRIPT, "runs")
    alternating = newest_with(results, DASK_SCRIPT, "interleaved")
    capped = newest_with(results, DASK_SCRIPT, "capped")
    if runs is None and alternating is None and capped is None:
        return []
    out = ["## Dask: the same einsum blockwise on a LocalCluster", "",
           "Summary of `DASK_RESULTS.md` (`python benchmarks/dask_scale.py`; its docstring says "
           "what is timed). Speed-up: one thread in one process / the distributed compute with "
           "the result left on the workers, one thread per worker."]
    if runs is not None:
        path, data = runs
        rows = []
        for row in data["runs"]:
            one = row["single"]["one_thread_s"]
            for workers in sorted({d["workers"] for d in row["dask"]}):
                best = min((d for d in row["dask"] if d["workers"] == workers),
                           key=lambda d: d["compute_s"])
                rows.append([row["case"], f"{row['nnz']:.3g}", fmt_time(one), str(workers),
                             str(best["blocks"]), fmt_time(best["compute_s"]),
                             f"{one / best['compute_s']:.2f}x",
                             f"{max(best['peak_rss_per_worker']) / 2**20:.0f}"])
        out += ["", provenance(data, _relative(path, out_dir)), "",
                *table(["case", "nonzeros", "one thread", "workers", "best blocks",
                        "compute", "speed-up", "peak MiB per worker"], rows, "lrrrrrrr")]
    if alternating is not None:
        path, data = alternating
        for block in data["interleaved"]:
            ratio = block["speedup_of_medians"]
            verdict = "holds" if ratio >= DASK_SPEEDUP_GOAL else "does not hold"
            if runs is None or path != runs[0]:
                out += ["", provenance(data, _relative(path, out_dir))]
            out += ["", f"SpMM at {block['nnz']:.3g} nonzeros, {block['blocks']} blocks, one thread "
                    f"here and two workers alternately for {block['rounds']} rounds: the "
                    f"medians' ratio is **{ratio:.2f}x** (goal {DASK_SPEEDUP_GOAL}x: "
                    f"{verdict})."]
    if capped is not None:
        path, data = capped
        for c in data["capped"]:
            state = (f"completed in {c['seconds']:.1f} s" if c.get("completed")
                     else f"did not complete ({c.get('error')})")
            out += ["", f"An operand twice one worker's memory ({c['nnz']:.3g} nonzeros, "
                    f"{c['operand_bytes'] / 2**20:.0f} MiB, {c['workers']} workers of "
                    f"{c['memory_limit_per_worker'] / 2**20:.0f} MiB): {state}."]
    return out


def render_all(results: Path, out_dir: Path, plots: bool = True) -> list[Path]:
    """Write RESULTS.md and ONNX_RESULTS.md (and plots) for the latest files; return them."""
    written = []
    run_source, overhead_source = latest(results, KERNEL_SCRIPT), latest(results, OVERHEAD_SCRIPT)
    suites_source = latest(results, SUITES_SCRIPT)
    selection_source = latest(results, SELECTION_SCRIPT)
    generated_source = latest(results, GENERATED_SCRIPT)
    if run_source is None and overhead_source is None and suites_source is None and \
            selection_source is None:
        print(f"note: no {KERNEL_SCRIPT}-*.json, {OVERHEAD_SCRIPT}-*.json or "
              f"{SUITES_SCRIPT}-*.json in {results}; RESULTS.md left as it is")
    else:
        run = json.loads(run_source.read_text()) if run_source else None
        overhead = json.loads(overhead_source.read_text()) if overhead_source else None
        suites = json.loads(suites_source.read_text()) if suites_source else None
        generated = json.loads(generated_source.read_text()) if generated_source else None
        images = plot_kernels(run, out_dir) if plots and run is not None else {}
        text = render_results(run, _relative(run_source, out_dir) if run_source else "",
                              images, overhead,
                              _relative(overhead_source, out_dir) if overhead_source else "",
                              suites, _relative(suites_source, out_dir) if suites_source else "",
                              generated,
                              _relative(generated_source, out_dir) if generated_source else "")
        if selection_source is not None:
            text += "\n" + "\n".join(selection_section(json.loads(selection_source.read_text()),
                                                       _relative(selection_source, out_dir))) + "\n"
        dask = dask_section(results, out_dir)
        if dask:
            text += "\n" + "\n".join(dask) + "\n"
        (out_dir / "RESULTS.md").write_text(text, encoding="utf-8")
        written.append(out_dir / "RESULTS.md")
        sources = " and ".join(p.name for p in (run_source, overhead_source, suites_source,
                                                selection_source) if p)
        print(f"wrote {out_dir / 'RESULTS.md'} from {sources}"
              + (f" (+ {', '.join(images.values())})" if images else ""))
    jobs = ((ONNX_SCRIPT, "ONNX_RESULTS.md", render_onnx, plot_onnx),
            (SUITES_SCRIPT, "EINSUM_SUITES.md", render_suites, None))
    for script, name, render, plot in jobs:
        source = latest(results, script)
        if source is None:
            print(f"note: no {script}-*.json in {results}; {name} left as it is")
            continue
        data = json.loads(source.read_text(encoding="utf-8"))
        images = plot(data, out_dir) if plots and plot is not None else {}
        relative = _relative(source, out_dir)
        (out_dir / name).write_text(render(data, relative, images), encoding="utf-8")
        written.append(out_dir / name)
        print(f"wrote {out_dir / name} from {source.name}"
              + (f" (+ {', '.join(images.values())})" if images else ""))
    return written


def _relative(path: Path, start: Path) -> str:
    try:
        return path.resolve().relative_to(start.resolve()).as_posix()
    except ValueError:
        return path.name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="folder of the JSON result files (default benchmarks/results)")
    parser.add_argument("--out", type=Path, default=HERE,
                        help="folder for the Markdown and PNG files (default benchmarks)")
    parser.add_argument("--no-plots", action="store_true", help="write the Markdown only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return 0 if render_all(args.results, args.out, plots=not args.no_plots) else 1


if __name__ == "__main__":
    sys.exit(main())
