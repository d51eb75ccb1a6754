#!/usr/bin/env python
"""``ta.einsum`` on random dense contractions nobody tuned for, against NumPy, opt_einsum, torch.

    python benchmarks/random_einsum.py [--count 150] [--seed 0] [--out benchmarks/RANDOM_EINSUM.md]

``dense_einsum.py`` times contractions from known workloads; this one draws them at random, so
that the figures say how the compiler does on what it has not seen: two or three operands over
three to five indices, each operand one to four of them in any order, any subset of the indices
kept in the result in any order, sizes from 3 to 128 (the odd and the round), float32 or
float64, 2^12 to 2^26 multiply-adds in all. Every result is checked against NumPy first; a
wrong number stops the run. Cells are medians of 3 interleaved rounds
(``kernel_micro.median_us``) once tensoralg's optimised builds have landed (a new kernel runs
quickly built code for its first calls, ``codegen/tiered.py``), every library on all cores,
torch timed apart (its OpenMP threads would share the cores with OpenBLAS's); the VM these run
on moves by +-20-40% between runs.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count() or 1))
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (machine, versions, commit)
from dense_einsum import all_cores, library_calls  # noqa: E402
from kernel_micro import median_us  # noqa: E402

from tensoralg.codegen import tiered  # noqa: E402

SIZES = (3, 8, 16, 24, 32, 48, 64, 100, 128)
LETTERS = "abcde"
BASELINES = ("numpy", "opt_einsum", "torch")


def draw(pick: random.Random) -> tuple[str, dict[str, int], str] | None:
    """One random contraction: ``(subscripts, sizes, dtype)``, or None when its work falls
    outside 2^12..2^26 multiply-adds (the caller draws again)."""
    indices = list(LETTERS[:pick.randint(3, 5)])
    sizes = {c: pick.choice(SIZES) for c in indices}
    terms = ["".join(pick.sample(indices, pick.randint(1, min(4, len(indices)))))
             for _ in range(pick.choice((2, 2, 2, 3)))]
    used = sorted(set("".join(terms)))
    kept = [c for c in used if pick.random() < 0.5]
    pick.shuffle(kept)
    work = math.prod(sizes[c] for c in used)
    if not 2 ** 12 <= work <= 2 ** 26:
        return None
    dtype = pick.choice(("float32", "float64"))
    return ",".join(terms) + "->" + "".join(kept), {c: sizes[c] for c in used}, dtype


def measure(count: int, seed: int) -> list[dict]:
    pick, rng = random.Random(seed), np.random.default_rng(seed)
    rows: list[dict] = []
    while len(rows) < count:
        drawn = draw(pick)
        if drawn is None:
            continue
        subscripts, sizes, dtype = drawn
        terms = subscripts.split("->")[0].split(",")
        operands = [rng.standard_normal([sizes[c] for c in term]).astype(dtype)
                    for term in terms]
        expected = np.einsum(subscripts, *[op.astype(np.float64) for op in operands],
                             optimize=True)
        calls = library_calls(subscripts, operands)
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        tolerance = 1e-3 if dtype == "float32" else 1e-9
        for name, call in calls.items():
            np.testing.assert_allclose(np.asarray(call()), expected, rtol=tolerance,
                                       atol=tolerance * scale, err_msg=f"{name} {subscripts}")
        # the kernels of the calls above run their quickly built code until the optimised
        # build lands (codegen/tiered.py): time what repeated calls run
        tiered.finish(timeout=120)
        apart = {name: calls.pop(name) for name in ("torch",) if name in calls}
        times = median_us(calls, rounds=3)
        if apart:
            time.sleep(0.2)
            times.update(median_us(apart, rounds=3))
        rows.append({"subscripts": subscripts, "sizes": sizes, "dtype": dtype,
                     "work": math.prod(sizes.values()),
                     **{f"{k}_us": v for k, v in times.items()}})
        print(f"{len(rows):4d} {subscripts:18s} {dtype:8s} " +
              ", ".join(f"{k} {v:.0f} us" for k, v in times.items()), flush=True)
    return rows


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def summary_lines(ratios: dict[str, list[float]]) -> list[str]:
    """The rows of the summary table: per baseline, the geometric mean of ``ratios`` (its
    time / tensoralg's), how many are at 0.9 or above and below 0.5, and the lowest."""
    return [f"| {b} / tensoralg | {_geomean(values):.2f} | "
            f"{sum(v >= 0.9 for v in values)} of {len(values)} | "
            f"{sum(v < 0.5 for v in values)} | {min(values):.2f} |"
            for b, values in ratios.items()]


def ratio_cells(row: dict, present: list[str]) -> list[str]:
    """``row``'s ratio to tensoralg for each baseline in ``present`` ("-" where it did not
    run)."""
    return [f"{row[f'{b}_us'] / row['tensoralg_us']:.2f}" if f"{b}_us" in row else "-"
            for b in present]


def render(rows: list[dict], machine: str, count: int, seed: int) -> str:
    present = [b for b in BASELINES if any(f"{b}_us" in r for r in rows)]
    ratios = {b: [r[f"{b}_us"] / r["tensoralg_us"] for r in rows if f"{b}_us" in r]
              for b in present}
    lines = [
        "# ta.einsum on random dense contractions",
        "",
        f"Generated by `benchmarks/random_einsum.py --count {count} --seed {seed}` ({machine}); "
        "all cores on every side, medians of 3 interleaved rounds, each result checked against "
        "NumPy. **Ratio = the other library's time / tensoralg's: above 1, tensoralg is "
        "faster.**",
        "",
        "| baseline | geometric mean | at 0.9 or above | below 0.5 | lowest |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += summary_lines(ratios)
    lines += ["", "The ten contractions where tensoralg is slowest against NumPy:", "",
              "| subscripts | sizes | dtype | tensoralg | "
              + " | ".join(f"{b} / tensoralg" for b in present) + " |",
              "|---|---|---|---:|" + "---:|" * len(present)]
    worst = sorted(rows, key=lambda r: r["numpy_us"] / r["tensoralg_us"])[:10]
    for row in worst:
        sizes = ", ".join(f"{k}={v}" for k, v in row["sizes"].items())
        cells = ratio_cells(row, present)
        lines.append(f"| `{row['subscripts']}` | {sizes} | {row['dtype']} | "
                     f"{row['tensoralg_us']:.0f} µs | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=150, help="contractions (default 150)")
    parser.add_argument("--seed", type=int, default=0, help="of the draw (default 0)")
    parser.add_argument("--out", type=Path, default=HERE / "RANDOM_EINSUM.md")
    args = parser.parse_args(argv)
    all_cores()
    rows = measure(args.count, args.seed)
    args.out.write_text(render(rows, record.provenance(), args.count, args.seed),
                        encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
