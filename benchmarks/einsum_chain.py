"""A three-operand chain with a sparse operand: ``ta.einsum`` against ``opt_einsum.contract``.

Issue 18 asks that ``ta.einsum("ij,jk,k->i", A, B, x)`` with a sparse ``A`` be faster than
``opt_einsum.contract`` on the same operands densified (the call a user of opt_einsum makes
today). Both pick a contraction order: opt_einsum by sizes (``B @ x`` first, then ``A_dense @
t``), tensoralg by a sparsity-aware cost (``contract_path.py``). Times are medians of repeated
calls after one warm-up call each (so kernels are compiled and plans cached), interleaved
round by round; the ratio is opt_einsum's time / tensoralg's (above 1: tensoralg faster).

    python benchmarks/einsum_chain.py            # results/einsum_chain-*.json, EINSUM_CHAIN.md
    python benchmarks/einsum_chain.py --quick    # smaller sizes, fewer rounds
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import record  # noqa: E402

import tensoralg as ta  # noqa: E402

SUBSCRIPTS = "ij,jk,k->i"
# (rows of A, columns of A = rows of B, columns of B, density of A)
CASES = [(2000, 2000, 64, 0.01), (5000, 5000, 64, 0.002), (10000, 10000, 32, 0.001),
         (2000, 2000, 256, 0.05)]
QUICK = [(1000, 1000, 32, 0.01), (2000, 2000, 64, 0.002)]


def median_time(call: Callable[[], Any], budget: float) -> float:
    ta.wait_for_optimised()    # time the optimised kernels, not their quick first builds
    times, spent = [], 0.0
    while len(times) < 3 or (spent < budget and len(times) < 200):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
        spent += times[-1]
    return statistics.median(times)


def measure(case: tuple[int, int, int, float], rounds: int, budget: float) -> dict[str, Any]:
    import opt_einsum

    m, n, k, density = case
    rng = np.random.default_rng(0)
    A = sp.random_array((m, n), density=density, format="csr", random_state=1)
    B, x = rng.standard_normal((n, k)), rng.standard_normal(k)
    dense_A = A.toarray()
    ours = ta.einsum(SUBSCRIPTS, A, B, x)
    theirs = opt_einsum.contract(SUBSCRIPTS, dense_A, B, x)
    if not np.allclose(ours, theirs, rtol=1e-9, atol=1e-9):
        raise AssertionError(f"{case}: tensoralg and opt_einsum disagree")
    path = ta.einsum_path(SUBSCRIPTS, A, B, x)[0]
    ta_times, oe_times, ratios = [], [], []
    for _ in range(rounds):
        t_ta = median_time(lambda: ta.einsum(SUBSCRIPTS, A, B, x), budget)
        t_oe = median_time(lambda: opt_einsum.contract(SUBSCRIPTS, dense_A, B, x), budget)
        ta_times.append(t_ta)
        oe_times.append(t_oe)
        ratios.append(t_oe / t_ta)
    return {"case": {"m": m, "n": n, "k": k, "density": density, "nnz": int(A.nnz)},
            "path": [list(step) if isinstance(step, tuple) else step for step in path],
            "tensoralg_s": record.rounded(ta_times), "opt_einsum_s": record.rounded(oe_times),
            "ratio": statistics.median(ratios)}


def render(payload: dict[str, Any]) -> str:
    """The Markdown table of one result payload."""
    lines = [f"`ta.einsum(\"{SUBSCRIPTS}\", A, B, x)` with A a CSR matrix, against "
             f"`opt_einsum.contract` on the same operands with A densified (ratio = opt_einsum "
             f"time / tensoralg time; above 1, tensoralg is faster; medians over "
             f"{payload['rounds']} interleaved rounds).", "",
             "| A | density | B columns | tensoralg | opt_einsum | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in payload["rows"]:
        c = row["case"]
        lines.append(f"| {c['m']}x{c['n']} | {c['density']:g} | {c['k']} | "
                     f"{record.format_time(statistics.median(row['tensoralg_s']))} | "
                     f"{record.format_time(statistics.median(row['opt_einsum_s']))} | "
                     f"{row['ratio']:.2f} |")
    held = all(row["ratio"] > 1 for row in payload["rows"])
    lines += ["", f"Goal (issue 18): faster than opt_einsum on the densified operands in every "
              f"row: **{'holds' if held else 'does not hold'}**."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, 2 rounds")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per median")
    args = parser.parse_args(argv)
    begun = record.start()
    cases, rounds = (QUICK, 2) if args.quick else (CASES, args.rounds)
    rows = []
    for case in cases:
        rows.append(measure(case, rounds, args.budget))
        print(f"{case}: ratio {rows[-1]['ratio']:.2f}", flush=True)
    payload = {"subscripts": SUBSCRIPTS, "rounds": rounds, "rows": rows}
    path = record.write("einsum_chain", payload, begun)
    text = render(payload)
    print(text)
    if not args.quick:
        date, commit = begun["date"].strftime("%Y-%m-%d %H:%M UTC"), begun["git"]["short"]
        header = (f"# A three-operand einsum chain with a sparse operand\n\nMeasured {date} at "
                  f"commit `{commit}` with `python benchmarks/einsum_chain.py`, result file "
                  f"`results/{path.name}`; generated: rerun the script rather than editing "
                  f"this file. The machine may be shared and noisy.\n\n")
        (Path(__file__).resolve().parent / "EINSUM_CHAIN.md").write_text(header + text + "\n", encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
