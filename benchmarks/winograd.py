#!/usr/bin/env python
"""3x3 convolutions three ways, one thread: the direct convolution on the generated GEMM
(``program.conv_layer``), Winograd's F(2x2, 3x3) and F(4x4, 3x3) (``program.winograd_conv``),
with the tile ``program.winograd_tile`` picks and how far each result is from a float64
convolution.

    python benchmarks/winograd.py                    # the layer shapes below
    python benchmarks/winograd.py 8x64x64x56x56      # N x C x M x H x W, as many as wanted

The direct convolution writes NCHW tiles (what the plan does with it where its tiles scatter
well). The layers: ResNet-18's four stages at batch 8 and batch 1, DPT's and U-Net's small-channel
layers on large maps, and a wide layer on a small map (where F(4x4)'s few tiles stream more
transformed weight than they multiply). Float32, pads 1, bias and ReLU fused. Times are the
median of rounds filling ~0.6 s after two warm-up calls, in ms; ``error`` is the largest
difference from the float64 convolution over the largest output magnitude. Each call runs on
the same input again, so a layer's weight may stay in cache between calls as it would not in a
network: the winner on small weights is flattered. Prints only.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import tensoralg as ta
from tensoralg import program

LAYERS = [
    (8, 64, 64, 56, 56), (8, 128, 128, 28, 28), (8, 256, 256, 14, 14), (8, 512, 512, 7, 7),
    (1, 64, 64, 56, 56), (1, 128, 128, 28, 28), (1, 256, 256, 14, 14), (1, 512, 512, 7, 7),
    (8, 16, 16, 128, 128), (8, 32, 32, 128, 128), (8, 32, 32, 64, 64), (1, 256, 256, 32, 32),
]


def median_ms(call) -> float:
    """The median time of one call of ``call`` in ms, over rounds filling about 0.6 s."""
    call()
    start = time.perf_counter()
    call()
    once = time.perf_counter() - start
    times = []
    for _ in range(max(3, int(0.6 / max(once, 1e-6)))):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The padded 3x3 convolution in float64, tap by tap, with its bias and ReLU."""
    n, _, h, width = x.shape
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    out = np.zeros((n, w.shape[0], h, width)) + b.astype(np.float64)[:, None, None]
    for i in range(3):
        for j in range(3):
            out += np.einsum("mc,nchw->nmhw", w[:, :, i, j].astype(np.float64),
                             padded[:, :, i:i + h, j:j + width])
    return np.maximum(out, 0)


def main(argv: list[str]) -> int:
    layers = [tuple(int(v) for v in a.split("x")) for a in argv] or LAYERS
    if not program.winograd_host():
        print("this host has no AVX-512: the plan runs no Winograd here (timed anyway)")
    ta.set_num_threads(1)
    rng = np.random.default_rng(0)
    print("| N x C x M x H x W | direct ms | F(2x2) ms | F(4x4) ms | F(4x4) / F(2x2) | "
          "picked | F(2x2) error | F(4x4) error |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for n, c, m, h, w in layers:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        weight = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        want = reference(x, weight, bias)
        scale = float(np.abs(want).max()) or 1.0
        times, errors = {}, {}
        direct = program.conv_layer(weight, bias, (1, 1), (1, 1), (1, 1), True)
        times["direct"] = median_ms(direct.bind(x, np.empty((n, m, h, w), np.float32)))
        for tile in (2, 4):
            conv = program.winograd_conv(weight, bias, (1, 1), (1, 1), True, tile)
            out = np.empty((n, m, h, w), np.float32)
            call = conv.bind(x, out)
            times[tile] = median_ms(call)
            errors[tile] = float(np.abs(out - want).max()) / scale
        picked = program.winograd_tile(c, m, h, w, images=n)
        print(f"| {n}x{c}x{m}x{h}x{w} | {times['direct']:.3f} | {times[2]:.3f} | "
              f"{times[4]:.3f} | {times[4] / times[2]:.2f} | "
              f"{'direct' if picked is None else f'F({picked}x{picked})'} | "
              f"{errors[2]:.1e} | {errors[4]:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
