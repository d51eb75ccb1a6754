#!/usr/bin/env python
"""``ta.einsum`` on random sparse x dense contractions nobody tuned for, against pydata sparse
and NumPy on the densified operands.

    python benchmarks/random_sparse_einsum.py [--count 100] [--seed 0] [--out benchmarks/RANDOM_SPARSE_EINSUM.md]
    python benchmarks/random_sparse_einsum.py --no-time --count 500 --seed 7   # results only

``random_einsum.py`` draws dense contractions; this one draws what a data scientist hands
``ta.einsum`` with sparse data: one sparse operand (a SciPy CSR, CSC or COO array when it has two
indices, a pydata ``sparse.COO`` when it has three), sometimes a second SciPy one, and one or two
dense NumPy operands, over two to four indices in any order, any subset of them kept in the
result in any order. Sparse extents are 200 to 5000 at 1e-3 to 3e-2 density, dense-only
extents 3 to 64, float32 or float64. Every result is checked against NumPy on the densified
operands first; a wrong number stops the run. Baselines: ``sparse.einsum`` (pydata, on COO
copies made before timing) and ``numpy.einsum(optimize=True)`` on the densified operands (what a
user without a sparse library runs; skipped above 2^24 dense multiply-adds). Cells are medians
of 3 interleaved rounds once tensoralg's optimised builds have landed; the VM these run on moves
by +-20-40% between runs.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count() or 1))
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (machine, versions, commit)
from dense_einsum import all_cores  # noqa: E402
from kernel_micro import median_us  # noqa: E402
from random_einsum import ratio_cells, summary_lines  # noqa: E402

import tensoralg as ta  # noqa: E402
from tensoralg.codegen import tiered  # noqa: E402

SPARSE_SIZES = (200, 500, 1000, 2000, 5000)
DENSE_SIZES = (3, 8, 16, 32, 64)
DENSITIES = (1e-3, 3e-3, 1e-2, 3e-2)
LETTERS = "abcd"
DENSE_LIMIT = 2 ** 24     # multiply-adds NumPy is given on the densified operands
BASELINES = ("pydata", "numpy_dense")


def draw(pick: random.Random) -> dict | None:
    """One random contraction, or None when it falls outside the limits (the caller draws
    again). The first term is the sparse operand's; a second SciPy operand is drawn one time
    in four."""
    indices = list(LETTERS[:pick.randint(2, 4)])
    order = pick.choice((2, 2, 3)) if len(indices) >= 3 else 2
    sparse_term = "".join(pick.sample(indices, order))
    terms = [sparse_term]
    kinds = ["coo3" if order == 3 else pick.choice(("csr", "csc", "coo"))]
    if order == 2 and pick.random() < 0.25:
        # a second sparse matrix sharing an index with the first (SpGEMM-like or elementwise)
        shared = pick.choice(sparse_term)
        other = pick.choice([c for c in indices if c != shared] + [shared])
        terms.append(shared + other if pick.random() < 0.5 else other + shared)
        kinds.append(pick.choice(("csr", "csc")))
    for _ in range(pick.choice((1, 1, 2)) if len(terms) == 1 else pick.choice((0, 1))):
        terms.append("".join(pick.sample(indices, pick.randint(1, min(3, len(indices))))))
        kinds.append("dense")
    used = sorted(set("".join(terms)))
    sparse_indices = {c for term, kind in zip(terms, kinds) if kind != "dense" for c in term}
    sizes = {c: pick.choice((SPARSE_SIZES if order == 2 else SPARSE_SIZES[:3])
                            if c in sparse_indices else DENSE_SIZES) for c in used}
    if math.prod(sizes[c] for c in sparse_term) > 2 ** 25:
        return None       # the reference densifies the operands
    dense_values = sum(math.prod(sizes[c] for c in t) for t, k in zip(terms, kinds)
                       if k == "dense")
    if dense_values > 2 ** 22:
        return None
    kept = [c for c in used if pick.random() < 0.5]
    pick.shuffle(kept)
    if math.prod(sizes[c] for c in kept) > 2 ** 22:
        return None       # a dense result this large measures allocation, not the kernel
    return {"subscripts": ",".join(terms) + "->" + "".join(kept), "kinds": kinds,
            "sizes": sizes, "density": pick.choice(DENSITIES),
            "dtype": pick.choice(("float32", "float64"))}


def operands_of(case: dict, rng: np.random.Generator) -> list:
    terms = case["subscripts"].split("->")[0].split(",")
    made = []
    for term, kind in zip(terms, case["kinds"]):
        shape = tuple(case["sizes"][c] for c in term)
        if kind == "dense":
            made.append(rng.standard_normal(shape).astype(case["dtype"]))
        elif kind == "coo3":
            import sparse
            made.append(sparse.random(shape, density=case["density"] / 10,
                                      random_state=rng, format="coo").astype(case["dtype"]))
        else:
            made.append(sp.random_array(shape, density=case["density"], format=kind,
                                        dtype=case["dtype"], random_state=rng))
    return made


def _dense(operand) -> np.ndarray:
    if hasattr(operand, "toarray"):
        return operand.toarray()
    return operand.todense() if hasattr(operand, "todense") else np.asarray(operand)


def calls_of(subscripts: str, operands: list, dense_work: int) -> dict[str, object]:
    calls: dict[str, object] = {"tensoralg": lambda: ta.einsum(subscripts, *operands)}
    try:
        import sparse
        pydata = [op if isinstance(op, np.ndarray) else sparse.COO.from_scipy_sparse(op)
                  if sp.issparse(op) else op for op in operands]
        calls["pydata"] = lambda: sparse.einsum(subscripts, *pydata)
    except ImportError:
        pass
    if dense_work <= DENSE_LIMIT:
        dense = [_dense(op) for op in operands]
        calls["numpy_dense"] = lambda: np.einsum(subscripts, *dense, optimize=True)
    return calls


def measure(count: int, seed: int, timed: bool = True) -> list[dict]:
    pick, rng = random.Random(seed), np.random.default_rng(seed)
    rows: list[dict] = []
    while len(rows) < count:
        case = draw(pick)
        if case is None:
            continue
        subscripts = case["subscripts"]
        operands = operands_of(case, rng)
        dense = [_dense(op).astype(np.float64) for op in operands]
        expected = np.einsum(subscripts, *dense, optimize=True)
        work = math.prod(case["sizes"].values())
        calls = calls_of(subscripts, operands, work)
        scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
        tolerance = 1e-3 if case["dtype"] == "float32" else 1e-9
        for name, call in calls.items():
            np.testing.assert_allclose(_dense(call()), expected, rtol=tolerance,
                                       atol=tolerance * scale, err_msg=f"{name} {subscripts}")
        if not timed:
            rows.append(case)
            print(f"{len(rows):4d} {subscripts:14s} {'/'.join(case['kinds']):16s} exact",
                  flush=True)
            continue
        tiered.finish(timeout=120)
        times = median_us(calls, rounds=3)
        nnz = [op.nnz for op in operands if not isinstance(op, np.ndarray)]
        rows.append({**case, "nnz": nnz, **{f"{k}_us": v for k, v in times.items()}})
        print(f"{len(rows):4d} {subscripts:14s} {'/'.join(case['kinds']):16s} "
              f"{case['dtype']:8s} " + ", ".join(f"{k} {v:.0f} us" for k, v in times.items()),
              flush=True)
    return rows


def render(rows: list[dict], machine: str, count: int, seed: int) -> str:
    present = [b for b in BASELINES if any(f"{b}_us" in r for r in rows)]
    ratios = {b: [r[f"{b}_us"] / r["tensoralg_us"] for r in rows if f"{b}_us" in r]
              for b in present}
    lines = [
        "# ta.einsum on random sparse x dense contractions",
        "",
        f"Generated by `benchmarks/random_sparse_einsum.py --count {count} --seed {seed}` "
        f"({machine}); all cores on every side, medians of 3 interleaved rounds, each result "
        "checked against NumPy on the densified operands. pydata = `sparse.einsum` on COO "
        "copies; numpy_dense = `numpy.einsum(optimize=True)` on the densified operands (only "
        f"up to 2^{int(math.log2(DENSE_LIMIT))} multiply-adds). "
        "**Ratio = the other library's time / tensoralg's: above 1, tensoralg is faster.**",
        "",
        "| baseline | geometric mean | at 0.9 or above | below 0.5 | lowest |",
        "|---|---:|---:|---:|---:|",
        *summary_lines(ratios),
    ]
    lines += ["", "The ten contractions where tensoralg is slowest against pydata sparse:", "",
              "| subscripts | operands | sizes | density | dtype | tensoralg | "
              + " | ".join(f"{b} / tensoralg" for b in present) + " |",
              "|---|---|---|---:|---|---:|" + "---:|" * len(present)]
    worst = sorted((r for r in rows if "pydata_us" in r),
                   key=lambda r: r["pydata_us"] / r["tensoralg_us"])[:10]
    for row in worst:
        sizes = ", ".join(f"{k}={v}" for k, v in row["sizes"].items())
        cells = ratio_cells(row, present)
        lines.append(f"| `{row['subscripts']}` | {' '.join(row['kinds'])} | {sizes} | "
                     f"{row['density']:g} | {row['dtype']} | {row['tensoralg_us']:.0f} µs | "
                     + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100, help="contractions (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="of the draw (default 0)")
    parser.add_argument("--out", type=Path, default=HERE / "RANDOM_SPARSE_EINSUM.md")
    parser.add_argument("--no-time", action="store_true",
                        help="only check every result against NumPy (no report)")
    args = parser.parse_args(argv)
    all_cores()
    if args.no_time:
        measure(args.count, args.seed, timed=False)
        print(f"{args.count} contractions checked against NumPy")
        return 0
    rows = measure(args.count, args.seed)
    args.out.write_text(render(rows, record.provenance(), args.count, args.seed),
                        encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
