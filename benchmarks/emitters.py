#!/usr/bin/env python
"""The hand-written emitters against the same work scheduled over the IR, one thread.

    python benchmarks/emitters.py [--out benchmarks/EMITTERS.md]

Two kernels are still written by hand as LLVM IR beside the statement compiler: the register-
tiled GEMM (``codegen/gemm.py``: packed weight panels, a 6 x 64 or 12 x 16 register tile, a K
block sized to the L2 cache, prefetches) and the direct convolution with its weights compiled
into the code (``codegen/conv.py``). The issue that asks for schedules (issue 16) asks each to
go once a schedule over the IR comes within 10% of it, and otherwise to stay, with the gap and
its reason on record. This script measures that gap:

- dense products ``C = A @ B`` through ``ta.einsum`` on each route a schedule can name:
  ``gemm(loops)`` (the statement's loop nest under the compiler's own schedule: loop order,
  register tiles of the tile pass, LLVM's vectorizing), ``gemm(generated)`` (the hand
  emitter) and ``gemm(blas)`` (NumPy's BLAS, for scale), float32 and float64;
- small convolutions (the only ones ``direct_conv`` takes: up to 2048 weights, AVX-512 hosts):
  ``direct_conv`` (the hand emitter), ``conv_layer`` (the generated GEMM over patches, what
  larger convolutions use) and the IR's way, patches copied out by NumPy then the product
  ``Y(p,m) = P(p,k) * W(k,m)`` as a statement loop nest (``gemm(loops)``).

Each cell is the median of 5 interleaved rounds (``kernel_micro.median_us``); results are
checked against NumPy first. The VM these run on moves by +-20-40% between runs; ratios within
one run are what to read.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (machine, versions, commit)
from kernel_micro import median_us  # noqa: E402

import tensoralg as ta  # noqa: E402

PRODUCTS = [((256, 256, 512), "float32"), ((64, 1024, 1024), "float32"),
            ((512, 512, 512), "float32"), ((1024, 1024, 1024), "float32"),
            ((256, 256, 512), "float64"), ((1024, 1024, 1024), "float64")]
# (batch, channels in, channels out, side, kernel, stride, pad)
CONVOLUTIONS = [(64, 3, 8, 32, 3, 1, 1), (64, 8, 16, 32, 3, 2, 0), (8, 8, 8, 56, 3, 1, 1),
                (1, 3, 32, 224, 3, 2, 1)]
WITHIN = 1.10     # the bar: a schedule within 10% of the emitter retires it
# The loop nest in cache blocks of 64 columns of C: each block's panel of B (k x 64) is read by
# every row of A before the next block starts (a split's outer loop moved outward).
BLOCK = 64
BLOCKED = f"gemm(loops); split(j, {BLOCK}, j0, j1); reorder(j0, i, k, j1)"


def products(rng: np.random.Generator) -> list[dict]:
    rows = []
    for (m, k, n), dtype in PRODUCTS:
        a = rng.standard_normal((m, k)).astype(dtype)
        b = rng.standard_normal((k, n)).astype(dtype)
        expected = a.astype(np.float64) @ b.astype(np.float64)
        calls = {route: (lambda r=route: ta.einsum("ik,kj->ij", a, b, schedule=f"gemm({r})"))
                 for route in ("loops", "generated", "blas")}
        calls["blocked"] = lambda: ta.einsum("ik,kj->ij", a, b, schedule=BLOCKED)
        tolerance = 1e-3 * np.sqrt(k) if dtype == "float32" else 1e-9 * np.sqrt(k)
        for route, call in calls.items():
            np.testing.assert_allclose(call(), expected, rtol=tolerance, atol=tolerance,
                                       err_msg=f"gemm({route}) {m}x{k}x{n} {dtype}")
        times = median_us(calls)
        rows.append({"kind": "product", "shape": f"{m}x{k}x{n}", "dtype": dtype,
                     "fmas": m * k * n, **{f"{r}_us": t for r, t in times.items()}})
        print(f"{m}x{k}x{n} {dtype}: " + ", ".join(f"{r} {t:.0f} us" for r, t in times.items()),
              flush=True)
    return rows


def _patches(x: np.ndarray, size: int, stride: int, pad: int) -> np.ndarray:
    """im2col: every output pixel's window as one row (batch x out x out, C x size x size)."""
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    n, c, oh, ow = windows.shape[:4]
    return np.ascontiguousarray(windows.transpose(0, 2, 3, 1, 4, 5)).reshape(
        n * oh * ow, c * size * size)


def convolutions(rng: np.random.Generator) -> list[dict]:
    rows = []
    for batch, c, m, side, size, stride, pad in CONVOLUTIONS:
        x = rng.standard_normal((batch, c, side, side)).astype(np.float32)
        w = rng.standard_normal((m, c, size, size)).astype(np.float32)
        out = (side + 2 * pad - size) // stride + 1
        expected = (_patches(x, size, stride, pad).astype(np.float64) @
                    w.reshape(m, -1).T.astype(np.float64))            # channels last
        weight = np.ascontiguousarray(w.reshape(m, -1).T)
        statement = ta.compile("Y(p,m) = P(p,k) * W(k,m)", dtype="float32",
                               schedule="gemm(loops)")
        calls: dict[str, object] = {}
        direct = ta.api.direct_conv(w, None, (c, side, side), (stride,) * 2, (1, 1),
                                    (pad,) * 2, (pad,) * 2)
        if direct is not None:
            direct.threads = None
            nchw = np.empty((batch, m, out, out), np.float32)
            calls["direct"] = direct.bind(x, nchw)
        gemm = ta.api.conv_layer(w, None, (stride,) * 2, (pad,) * 2, (pad,) * 2)
        gemm.threads = None
        last = np.empty((batch * out * out, m), np.float32)
        calls["generated"] = gemm.bind(x, last)
        calls["loops"] = lambda: statement(P=_patches(x, size, stride, pad), W=weight)
        for name, call in calls.items():
            got = call()
            if name == "direct":
                got = nchw.transpose(0, 2, 3, 1).reshape(-1, m)
            elif name == "generated":
                got = last
            np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3,
                                       err_msg=f"{name} conv {c}->{m}")
        times = median_us(calls)
        shape = f"{batch}x{c}x{side}x{side}, {m} of {size}x{size}, stride {stride}, pad {pad}"
        rows.append({"kind": "convolution", "shape": shape, "dtype": "float32",
                     "fmas": batch * out * out * m * c * size * size,
                     **{f"{r}_us": t for r, t in times.items()}})
        print(f"conv {shape}: " + ", ".join(f"{r} {t:.0f} us" for r, t in times.items()),
              flush=True)
    return rows


def _ir(row: dict) -> float:
    """The IR's best time for ``row``: its own schedule, or the column blocks."""
    return min(row[k] for k in ("loops_us", "blocked_us") if k in row)


def _span(ratios: list[float]) -> str:
    return f"{min(ratios):.1f}-{max(ratios):.1f}x" if ratios else "-"


def render(rows: list[dict], machine: str) -> str:
    lines = [
        "# Hand-written emitters against schedules over the IR",
        "",
        f"Generated by `benchmarks/emitters.py` ({machine}); one thread, medians of 5 "
        "interleaved rounds, each result checked against NumPy. **Ratio = the IR's time / the "
        f"emitter's time**: at most {WITHIN:.2f} would retire the emitter (issue 16).",
        "",
        "The IR's time is the better of its two schedules: the compiler's own "
        f"(`gemm(loops)`) and the same nest in cache blocks of {BLOCK} columns of C (`{BLOCKED}`, "
        "products only).",
        "",
        "| work | shape | dtype | IR loop nest (`gemm(loops)`) | IR in column blocks | "
        "generated GEMM (hand) | direct conv (hand) | BLAS | IR / best hand emitter | "
        "GFMA/s IR | GFMA/s best hand |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        hand = min(row[k] for k in ("generated_us", "direct_us") if k in row)
        cells = [f"{row[k]:.0f} µs" if k in row else "-"
                 for k in ("loops_us", "blocked_us", "generated_us", "direct_us", "blas_us")]
        lines.append(f"| {row['kind']} | {row['shape']} | {row['dtype']} | " + " | ".join(cells)
                     + f" | {_ir(row) / hand:.2f} | {row['fmas'] / _ir(row) / 1e3:.1f}"
                     f" | {row['fmas'] / hand / 1e3:.1f} |")
    ratio = {id(r): _ir(r) / min(r[k] for k in ("generated_us", "direct_us") if k in r)
             for r in rows}
    worst, best = max(ratio.values()), min(ratio.values())
    large = [ratio[id(r)] for r in rows if r["kind"] == "product" and r["fmas"] >= 2**30]
    small = [ratio[id(r)] for r in rows if r["kind"] == "product" and r["fmas"] < 2**30]
    lines += [
        "",
        (f"**Verdict: both emitters stay.** The loop nest takes {best:.1f}-{worst:.1f}x the "
         f"best hand emitter's time here, short of the {WITHIN:.2f} that would retire one. Why:"
         if best > WITHIN else
         f"**Verdict: some rows are within {WITHIN:.2f}** ({best:.2f}-{worst:.2f}x): an "
         "emitter retires only where every row of its kind is. Why the others are not:"),
        "",
        "- *GEMM.* The statement's nest keeps a row of C in registers across k (the tile "
        "pass's 256-byte tiles) and reads B's rows from where they lie; the generated GEMM "
        "packs B into panels once (a weight, at load) or per call, so its inner loop reads "
        "both operands contiguously, holds a 6 x 64 (or 12 x 16) block of C in 24 vector "
        "registers (one broadcast of A feeds four FMAs), blocks K to the L2 cache and "
        "prefetches the next panel. Under its own schedule the nest blocks nothing for the "
        "caches: each row of C streams the whole of B, which from 1024 x 1024 (4-8 MB) "
        f"leaves the L2 cache, hence its {_span(large)} there against {_span(small)} on the "
        "smaller products. Cache blocks of C's columns (the column above) keep a k x "
        f"{BLOCK} panel of B for every row, yet gain little: the panel's rows lie a whole "
        "row of B apart (4 KiB at 1024 float32 columns), so they fall into the same cache "
        "sets and miss as before, and one load of B still feeds one FMA. What the schedule "
        "language still lacks is what the emitter does besides: a packed layout of an "
        "operand (a precompute into a blocked format, which removes the strided panel), a "
        "two-dimensional register tile (unroll-and-jam of i inside j's tiles, so one load "
        "feeds several FMAs), blocks of the summed k (each block adding into C) and "
        "prefetch. Until then dense products default to BLAS (`gemm(blas)`) and the ONNX "
        "importer to the generated GEMM.",
        "- *Convolution.* The IR cannot state a window (`I(n, c, y + ky, x + kx)`): its way "
        "is patches copied out, then the product, so it pays a pass over 9x the input "
        "besides the GEMM gap above. The direct emitter reads the image in place and keeps "
        "its weights as immediates; `conv_layer` (the generated GEMM over patch panels) is "
        "what convolutions beyond `direct_conv`'s 2048 weights already run on.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "EMITTERS.md")
    args = parser.parse_args(argv)
    ta.set_num_threads(1)
    rng = np.random.default_rng(0)
    rows = products(rng) + convolutions(rng)
    machine = record.provenance()
    args.out.write_text(render(rows, machine), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
