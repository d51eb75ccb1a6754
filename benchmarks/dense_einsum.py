#!/usr/bin/env python
"""``ta.einsum`` on dense contractions against ``numpy.einsum``, opt_einsum and torch.

    python benchmarks/dense_einsum.py [--out benchmarks/DENSE_EINSUM.md]
    python benchmarks/dense_einsum.py --stacks 48     # loop nest against BLAS, prints only

The data scientist's dense einsums, from the workloads they come from: dense layers over a
batch of sequences, attention's scores and values, ``tensordot``s, batched products of small,
medium and large matrices, chains of three operands, a bilinear form, outer products and row
dots. Each is timed through ``ta.einsum`` as a user calls it (a repeated call: the dispatch of
the first call is replayed), against ``numpy.einsum(..., optimize=True)``, ``opt_einsum.contract``
and ``torch.einsum`` (on tensors made once from the arrays), and against tensoralg's own loop
nest of the same call (``gemm(loops)``, two operands), every library on all cores
(OpenBLAS's threads for NumPy and for tensoralg's BLAS route, ``ta.set_num_threads``,
``torch.set_num_threads``; torch is timed apart from the others, whose BLAS threads would share
the cores with its own). Every result is checked against NumPy first. Cells are medians of 5
interleaved rounds (``kernel_micro.median_us``); the VM these run on moves by +-20-40% between
runs, so ratios within one run are what to read.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", str(os.cpu_count() or 1))
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (machine, versions, commit)
from kernel_micro import median_us  # noqa: E402

import tensoralg as ta  # noqa: E402
from tensoralg.codegen import tiered  # noqa: E402

# (what it is, subscripts, operand shapes, dtype)
CASES = [
    ("dense layer over sequences", "bnd,dh->bnh", [(64, 50, 256), (256, 1024)], "float32"),
    ("dense layer, weight stored transposed", "bnd,hd->bnh", [(64, 50, 256), (1024, 256)],
     "float32"),
    ("attention scores", "bhqd,bhkd->bhqk", [(8, 12, 128, 64), (8, 12, 128, 64)], "float32"),
    ("attention values", "bhqk,bhkd->bhqd", [(8, 12, 128, 128), (8, 12, 128, 64)], "float32"),
    ("tensordot over two axes", "abcd,cdef->abef", [(16, 16, 32, 32), (32, 32, 16, 16)],
     "float32"),
    ("batched products, 16^3", "bij,bjk->bik", [(512, 16, 16), (512, 16, 16)], "float32"),
    ("batched products, 128 x 64 x 128", "bij,bjk->bik", [(32, 128, 64), (32, 64, 128)],
     "float32"),
    ("batched products, 256^3", "bij,bjk->bik", [(8, 256, 256), (8, 256, 256)], "float64"),
    ("batched products, second transposed", "bij,bkj->bik", [(64, 100, 32), (64, 100, 32)],
     "float64"),
    ("matrix product 512^3", "ik,kj->ij", [(512, 512), (512, 512)], "float64"),
    ("a middle axis summed", "ijk,jl->ikl", [(64, 256, 64), (256, 128)], "float32"),
    ("chain of three", "abc,cd,de->abe", [(32, 64, 128), (128, 128), (128, 64)], "float32"),
    ("chain of three matrices", "ij,jk,kl->il", [(300, 400), (400, 500), (500, 60)],
     "float64"),
    ("bilinear form per row", "bi,ij,bj->b", [(512, 256), (256, 256), (512, 256)], "float32"),
    ("outer product", "i,j->ij", [(2000,), (3000,)], "float64"),
    ("row dots", "ij,ij->i", [(4000, 512), (4000, 512)], "float32"),
    ("a summed pair of axes against a matrix", "ijkl,jl->ik", [(32, 64, 32, 64), (64, 64)],
     "float32"),
]
# "loops": tensoralg's own loop nest of the same call (schedule gemm(loops); two operands),
# the route every contraction but a plain matrix product took before the BLAS dispatch
BASELINES = ("loops", "numpy", "opt_einsum", "torch")


def _calls(subscripts: str, operands: list[np.ndarray]) -> dict[str, object]:
    calls = library_calls(subscripts, operands)
    if len(operands) == 2:
        calls["loops"] = lambda: ta.einsum(subscripts, *operands, schedule="gemm(loops)")
    return calls


def all_cores() -> None:
    """tensoralg's and torch's threads on every core (NumPy's OpenBLAS is set at import)."""
    cores = os.cpu_count() or 1
    ta.set_num_threads(cores)
    try:
        import torch
        torch.set_num_threads(cores)
    except ImportError:
        pass


def library_calls(subscripts: str, operands: list[np.ndarray]) -> dict[str, object]:
    """The call through ``ta.einsum`` and through each library installed: NumPy's
    ``einsum(optimize=True)``, ``opt_einsum.contract``, ``torch.einsum`` (on tensors made
    once from the arrays)."""
    calls: dict[str, object] = {
        "tensoralg": lambda: ta.einsum(subscripts, *operands),
        "numpy": lambda: np.einsum(subscripts, *operands, optimize=True),
    }
    try:
        import opt_einsum
        calls["opt_einsum"] = lambda: opt_einsum.contract(subscripts, *operands)
    except ImportError:
        pass
    try:
        import torch
        tensors = [torch.from_numpy(op) for op in operands]
        calls["torch"] = lambda: torch.einsum(subscripts, *tensors)
    except ImportError:
        pass
    return calls


def measure(rng: np.random.Generator) -> list[dict]:
    rows = []
    for what, subscripts, shapes, dtype in CASES:
        operands = [rng.standard_normal(shape).astype(dtype) for shape in shapes]
        calls = _calls(subscripts, operands)
        expected = np.einsum(subscripts, *[op.astype(np.float64) for op in operands],
                             optimize=True)
        scale = max(1.0, math.sqrt(max(expected.size, 1)))
        tolerance = 1e-3 if dtype == "float32" else 1e-9
        for name, call in calls.items():
            got = np.asarray(call())
            np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance * scale,
                                       err_msg=f"{name} {subscripts}")
        # torch runs on its own OpenMP threads: timed apart, once OpenBLAS's threads (which
        # spin for a while after each NumPy call) have gone idle, or the two pools would share
        # the cores (torch.einsum took 2-20x its own time interleaved with NumPy here).
        tiered.finish(timeout=120)   # time the optimised code repeated calls run
        apart = {name: calls.pop(name) for name in ("torch",) if name in calls}
        times = median_us(calls)
        if apart:
            time.sleep(0.2)
            times.update(median_us(apart))
        rows.append({"what": what, "subscripts": subscripts,
                     "shapes": " , ".join("x".join(map(str, s)) for s in shapes),
                     "dtype": dtype, **{f"{k}_us": v for k, v in times.items()}})
        print(f"{subscripts:18s} " + ", ".join(f"{k} {v:.0f} us" for k, v in times.items()),
              flush=True)
    return rows


def render(rows: list[dict], machine: str) -> str:
    present = [b for b in BASELINES if any(f"{b}_us" in r for r in rows)]
    lines = [
        "# ta.einsum on dense contractions",
        "",
        f"Generated by `benchmarks/dense_einsum.py` ({machine}); all cores on every side, "
        "medians of 5 interleaved rounds, each result checked against NumPy. **Ratio = the "
        "other library's time / tensoralg's: above 1, tensoralg is faster.**",
        "",
        "| contraction | subscripts | shapes | dtype | tensoralg | "
        + " | ".join(f"{b} / tensoralg" for b in present) + " |",
        "|---|---|---|---|---:|" + "---:|" * len(present),
    ]
    ratios: dict[str, list[float]] = {b: [] for b in present}
    for row in rows:
        cells = []
        for b in present:
            if f"{b}_us" in row:
                ratio = row[f"{b}_us"] / row["tensoralg_us"]
                ratios[b].append(ratio)
                cells.append(f"{ratio:.2f}")
            else:
                cells.append("-")
        lines.append(f"| {row['what']} | `{row['subscripts']}` | {row['shapes']} | "
                     f"{row['dtype']} | {row['tensoralg_us']:.0f} µs | " + " | ".join(cells)
                     + " |")
    lines += ["", "Geometric means over the rows: " + ", ".join(
        f"{b} / tensoralg {math.exp(sum(map(math.log, v)) / len(v)):.2f} "
        f"({sum(r >= 0.9 for r in v)} of {len(v)} rows at 0.9 or above)"
        for b, v in ratios.items() if v) + ".", ""]
    return "\n".join(lines)


STACK_FORMS = ("bij,bjk->bik", "bij,bkj->bik", "bij,bjk->bki", "bji,bjk->bik")


def stacks(count: int, seed: int) -> None:
    """Random stacks of products (2^22 multiply-adds each call) on the loop nest and on BLAS,
    both through ``ta.einsum``: the measurements behind ``lower/gemm_form.stack_pays``. Prints
    only."""
    import random

    from tensoralg.lower.gemm_form import contraction_form
    from tensoralg.notation import parse_statement

    pick, rng = random.Random(seed), np.random.default_rng(seed)
    print(f"{'subscripts':14s} {'layout':8s} {'per product':>11s} {'stack':>6s} "
          f"{'i':>4s} {'j':>4s} {'k':>4s} {'dtype':8s} loops / blas")
    for _ in range(count):
        subscripts = pick.choice(STACK_FORMS + ("bij,bjk->bik",) * 2)
        sizes = {"i": pick.choice([4, 8, 16, 32, 64, 128]), "j": pick.choice([8, 16, 32, 64, 128]),
                 "k": pick.choice([8, 12, 16, 24, 32, 64, 128, 256])}
        each = sizes["i"] * sizes["j"] * sizes["k"]
        sizes["b"] = max(2, min(4096, 2**22 // each))
        dtype = pick.choice([np.float32, np.float64])
        terms, out = subscripts.split("->")
        a_sub, b_sub = terms.split(",")
        a = rng.standard_normal([sizes[c] for c in a_sub]).astype(dtype)
        b = rng.standard_normal([sizes[c] for c in b_sub]).astype(dtype)
        times = median_us({route: (lambda r=route: ta.einsum(subscripts, a, b,
                                                               schedule=f"gemm({r})"))
                           for route in ("loops", "blas")}, rounds=3)
        form = contraction_form(parse_statement(
            f"C({','.join(out)}) = A({','.join(a_sub)}) * B({','.join(b_sub)})"))
        layout = "rows" if form.along_rows else "dots" if form.dots else "strided"
        print(f"{subscripts:14s} {layout:8s} {each:11d} {sizes['b']:6d} {sizes['i']:4d} "
              f"{sizes['j']:4d} {sizes['k']:4d} {np.dtype(dtype).name:8s} "
              f"{times['loops'] / times['blas']:8.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "DENSE_EINSUM.md")
    parser.add_argument("--stacks", type=int, metavar="N",
                        help="instead, time N random stacks of products on the loop nest and on "
                             "BLAS (the figures behind gemm_form.stack_pays); prints only")
    parser.add_argument("--seed", type=int, default=3, help="of --stacks (default 3)")
    args = parser.parse_args(argv)
    all_cores()
    if args.stacks:
        stacks(args.stacks, args.seed)
        return 0
    rows = measure(np.random.default_rng(0))
    machine = record.provenance()
    args.out.write_text(render(rows, machine), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
