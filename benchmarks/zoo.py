#!/usr/bin/env python
"""The matrix kernels on structures the benchmark's matrices do not have, against scipy.

    python benchmarks/zoo.py [--only spmv,sddmm] [--matrices hyper-1e6,diag-1e6] [--threads 2]

``run.py`` times the kernels on sixteen SuiteSparse/SNAP matrices and on uniform and
power-law random ones; users bring others. This script generates thirteen shapes of sparsity
none of those has (a narrow band, a 2-D Laplacian, dense diagonal blocks, an arrow, one dense
row, rows mostly empty, an R-MAT graph, tall and wide matrices, a hypersparse 1e6 x 1e6 with
2e4 entries, a diagonal, a 20%-dense matrix, a 30 x 30 one) and runs SpMV, SpMM (16 columns),
SDDMM (rank 16), SpGEMM and the sparse add on each, through ``run.py``'s cases (the same
operands, checks and timing), two threads by default. A ratio is tensoralg's time over the
baseline's: **below 1, tensoralg is faster**; above 1 is a shape the compiler handles worse
than the library, the point of the script.

SpGEMM is left out where the product is dense-sized (the arrow, whose product is a dense
2e4 x 2e4, and the tall and wide matrices' ``A @ A.T``). Writes
``benchmarks/results/zoo-<date>-<commit>.json`` and ``benchmarks/ZOO_RESULTS.md``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # noqa: E402
from selection_data import canonical as _canonical  # noqa: E402

# run.py (its cases and timing) is imported by main() only: importing it points tensoralg's
# kernel cache at a fresh directory of its own, which a test importing this module must not do.

KERNELS = ("spmv", "spmm", "sddmm", "spgemm", "add")
REPORT = Path(__file__).resolve().parent / "ZOO_RESULTS.md"
NO_SPGEMM = {"arrow-2e4", "tall-1e6x64", "wide-64x1e6"}     # dense-sized products
BASELINES = ("scipy", "mkl", "torch")


def _median(sample: dict | None) -> float | None:
    return None if not sample or "times" not in sample else statistics.median(sample["times"])


def _random(m: int, n: int, nnz: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    return _canonical(sp.csr_matrix((rng.random(nnz), (rng.integers(0, m, nnz),
                                                       rng.integers(0, n, nnz))), shape=(m, n)))


def _banded(n: int, half: int) -> sp.csr_matrix:
    rng = np.random.default_rng(1)
    return _canonical(sp.diags([rng.random(n - abs(k)) for k in range(-half, half + 1)],
                               list(range(-half, half + 1)), shape=(n, n)))


def _laplacian(k: int) -> sp.csr_matrix:
    line = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(k, k))
    return _canonical(sp.kron(line, sp.eye(k)) + sp.kron(sp.eye(k), line))


def _block_diagonal(blocks: int, size: int) -> sp.csr_matrix:
    rng = np.random.default_rng(2)
    return _canonical(sp.block_diag([rng.random((size, size)) for _ in range(blocks)]))


def _arrow(n: int) -> sp.csr_matrix:
    rows = np.concatenate([np.zeros(n, np.int64), np.arange(1, n), np.arange(1, n)])
    cols = np.concatenate([np.arange(n), np.zeros(n - 1, np.int64), np.arange(1, n)])
    return _canonical(sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)))


def _dense_row(n: int, per_row: int) -> sp.csr_matrix:
    matrix = _random(n, n, n * per_row, 3).tolil()
    matrix[5, :] = 1.0
    return _canonical(matrix)


def _mostly_empty(n: int, share: float, per_row: int) -> sp.csr_matrix:
    rng = np.random.default_rng(4)
    rows = np.repeat(rng.choice(n, int(n * share), replace=False), per_row)
    return _canonical(sp.csr_matrix((rng.random(rows.size), (rows, rng.integers(0, n, rows.size))),
                                    shape=(n, n)))


def _rmat(scale: int, edges_per_vertex: int) -> sp.csr_matrix:
    """An R-MAT graph (a = 0.57, b = c = 0.19): power-law rows and columns."""
    rng = np.random.default_rng(5)
    n, m = 1 << scale, (1 << scale) * edges_per_vertex
    rows, cols = np.zeros(m, np.int64), np.zeros(m, np.int64)
    for bit in range(scale):
        u = rng.random(m)
        rows |= (u > 0.76).astype(np.int64) << bit
        cols |= (((u > 0.57) & (u <= 0.76)) | (u > 0.95)).astype(np.int64) << bit
    return _canonical(sp.csr_matrix((rng.random(m), (rows, cols)), shape=(n, n)))


def matrices() -> dict[str, Callable[[], sp.csr_matrix]]:
    """name -> a function making the matrix (canonical CSR, float64)."""
    rng = np.random.default_rng(7)
    return {
        "banded-1e5-b3": lambda: _banded(100_000, 3),
        "lap2d-400": lambda: _laplacian(400),
        "blockdiag-64": lambda: _block_diagonal(300, 64),
        "arrow-2e4": lambda: _arrow(20_000),
        "dense-row-5e4": lambda: _dense_row(50_000, 4),
        "empty-rows-1e5": lambda: _mostly_empty(100_000, 0.02, 30),
        "rmat-16": lambda: _rmat(16, 8),
        "tall-1e6x64": lambda: _random(1_000_000, 64, 3_000_000, 1),
        "wide-64x1e6": lambda: _random(64, 1_000_000, 3_000_000, 2),
        "hyper-1e6": lambda: _random(1_000_000, 1_000_000, 20_000, 6),
        "diag-1e6": lambda: _canonical(sp.diags(rng.random(1_000_000))),
        "dense20-2000": lambda: _random(2000, 2000, 800_000, 8),
        "tiny-30": lambda: _random(30, 30, 90, 9),
    }


def ratio(row: dict, baseline: str) -> float | None:
    """tensoralg's median time over ``baseline``'s (None when either did not run)."""
    mine, other = _median(row.get("tensoralg")), _median(row["baselines"].get(baseline))
    return mine / other if mine and other else None


def render(data: dict) -> str:
    """The Markdown report of a results file."""
    rows = data["rows"]
    lines = [
        "# The matrix kernels on structures the benchmark's matrices do not have",
        "",
        f"Generated by `benchmarks/zoo.py` from the run of {data['date']} (commit "
        f"{data['git']['short']}; {data['machine']['cpu_model']}, {data['threads']['requested']}"
        f" threads). Ratio = tensoralg time / baseline time: **below 1, tensoralg is faster**. "
        f"Same operands, checks and timing as `run.py`; this VM's timings move by ±20-40% "
        f"between runs. The script's docstring says what each matrix is.",
        "",
        "| matrix | shape | nnz | kernel | tensoralg | / scipy | / mkl | / torch | status |",
        "|---|---|---:|---|---:|---:|---:|---:|---|"]
    for row in rows:
        cells = []
        for baseline in BASELINES:
            value = ratio(row, baseline)
            skipped = row["baselines"].get(baseline, {}).get("skip")
            cells.append(f"{value:.2f}" if value is not None else (skipped or "-"))
        time_cell = record.format_time(_median(row.get("tensoralg")))
        lines.append(f"| {row['data']} | {'x'.join(map(str, row['shape']))} | {row['nnz']} | "
                     f"{row['kernel']} | {time_cell} | {' | '.join(cells)} | {row['status']} |")
    slower = [r for r in rows if (ratio(r, "scipy") or 0) > 1.1]
    lines += ["", f"{len(slower)} of {len(rows)} rows run more than 1.1x scipy's time"
              + (": " + ", ".join(f"{r['kernel']} on {r['data']} ({ratio(r, 'scipy'):.2f})"
                                  for r in slower) if slower else ".")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(KERNELS),
                        help=f"comma-separated kernels ({','.join(KERNELS)})")
    parser.add_argument("--matrices", default=None, help="comma-separated names (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="the JSON file (default: benchmarks/"
                                                     "results/zoo-<date>-<commit>.json)")
    parser.add_argument("--render", default=None, metavar="FILE.json",
                        help="only redraw ZOO_RESULTS.md from a results file")
    args = parser.parse_args(argv)
    import run
    if args.render:
        import json
        REPORT.write_text(render(json.loads(Path(args.render).read_text())), encoding="utf-8")
        return 0
    kernels = [k for k in args.only.split(",") if k]
    makers = matrices()
    names = list(makers) if args.matrices is None else args.matrices.split(",")
    unknown = [k for k in kernels if k not in KERNELS] + [n for n in names if n not in makers]
    if unknown:
        parser.error(f"unknown kernel(s) or matrix(es): {unknown}")
    begun = record.start()
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*")
    threads = run.set_threads(args.threads)
    columns = [b for b in BASELINES if b in run.available_baselines()[0]]
    rows, started = [], time.perf_counter()
    for name in names:
        matrix = run.canonical(makers[name]())      # a csr_matrix, as run.py's matrices
        context = run.Operands(matrix)
        for kernel in kernels:
            if kernel == "spgemm" and name in NO_SPGEMM:
                continue
            row = run.run_row(kernel, name, matrix, np.random.default_rng(0), context, {},
                              columns)
            rows.append(row)
            shown = "  ".join(f"{b} {ratio(row, b):.2f}" if ratio(row, b) else f"{b} -"
                              for b in columns)
            print(f"{name:16s} {kernel:7s} {record.format_time(_median(row['tensoralg'])):>10s}"
                  f"  {shown}  [{row['status']}]", flush=True)
    payload = {"threads": threads, "rows": rows,
               "elapsed_s": round(time.perf_counter() - started, 1)}
    path = record.write("zoo", payload, begun, args.out)
    if args.out is None:
        import json
        REPORT.write_text(render(json.loads(path.read_text())), encoding="utf-8")
    print(f"wrote {path}" + ("" if args.out else f" and {REPORT}"))
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
