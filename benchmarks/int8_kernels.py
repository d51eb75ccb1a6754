#!/usr/bin/env python
"""The int8 GEMM (``codegen/qgemm.py``) against the generated float32 GEMM, one thread.

    python benchmarks/int8_kernels.py

- dense products M x K x N: ``program.quantized_layer`` (the activations quantized in the
  call included) against ``program.dense_layer`` on the same values, float32;
- a 3x3 convolution of 64 channels over 56 x 56 (ResNet-18's first stage) split into its
  three calls: the quantized channels-last image, the int8 product and the transpose into
  NCHW (``program.quantized_conv``);
- MobileNetV2's pointwise convolutions both ways: over NCHW positions (the quantized planes
  and the product, what ``program.quantized_conv`` picks for them) and through the
  channels-last image (image, product, transpose); then the product over positions with no
  epilogue, with a rescale, bias and clamp, and with the next layer's fake quantization too.

The figures the ONNX guide and the int8 GEMM's docstrings quote. Times are the best of 5
rounds of 20 calls, in µs; the VM these ran on moves by ±10-30%. Prints only; needs AVX-512
VNNI.
"""
from __future__ import annotations

import sys
import timeit

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.runtime.qgemm import Int8Epilogue, QuantizedConv

SHAPES = [(256, 512, 512), (256, 768, 3072), (32, 128, 128), (8, 64, 256)]
# (input channels, output channels, side) of MobileNetV2's pointwise layers at batch 1
POINTWISE = [(16, 96, 112), (144, 24, 56), (32, 192, 28), (96, 576, 14), (960, 320, 7)]


def best(call) -> float:
    """The best time of one call of ``call`` in µs."""
    return min(timeit.repeat(call, number=20, repeat=5)) / 20 * 1e6


def _pointwise_operands(rng: np.random.Generator, c: int, m: int, side: int
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 1x1 layer's input (1, c, side, side), int8 weight (m, c, 1, 1) and output buffer."""
    x = rng.standard_normal((1, c, side, side)).astype(np.float32)
    w = rng.integers(-128, 128, (m, c, 1, 1)).astype(np.int8)
    return x, w, np.empty((1, m, side, side), np.float32)


def main() -> int:
    if not program.int8_gemm_supported():
        print("this host has no AVX-512 VNNI: the int8 GEMM cannot run")
        return 1
    ta.set_num_threads(1)
    rng = np.random.default_rng(0)
    scale, zero = np.array(0.05, np.float32), np.array(128.0, np.float32)
    print("dense products (M x K x N): int8 GEMM against the float32 GEMM, µs")
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.integers(-128, 128, (k, n)).astype(np.int8)
        out = np.empty((m, n), np.float32)
        int8 = best(program.quantized_layer(w).bind(x, scale, zero, out))
        dense = best(program.dense_layer(w.astype(np.float32)).bind(x, out))
        print(f"  {m:4d} x {k:4d} x {n:4d}: int8 {int8:8.1f}  float32 {dense:8.1f}  "
              f"ratio {dense / int8:4.2f}  ({m * k * n / int8 / 1e3:.0f} GOPS)")
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = rng.integers(-128, 128, (64, 64, 3, 3)).astype(np.int8)
    out = np.empty((1, 64, 56, 56), np.float32)
    image, product, transpose = program.quantized_conv(w, (1, 1), (1, 1), (1, 1)).bind(
        x, scale, zero, out)
    print("3x3 convolution, 64 -> 64 channels over 56 x 56, µs: "
          f"image {best(image):.1f}, product {best(product):.1f}, "
          f"transpose {best(transpose):.1f}")
    print("pointwise convolutions (MobileNetV2's), µs: over NCHW positions (planes + "
          "product) against the channels-last image (image + product + transpose)")
    for c, m, side in POINTWISE:
        x, w, out = _pointwise_operands(rng, c, m, side)
        times = []
        for positions in (True, False):
            calls = QuantizedConv(w, (1, 1), (0, 0), (0, 0), positions=positions).bind(
                x, scale, zero, out)
            times.append([best(call) for call in calls])
        print(f"  {c:4d} -> {m:4d} over {side:3d}^2: positions "
              f"{' + '.join(f'{t:.1f}' for t in times[0])} = {sum(times[0]):7.1f}  image "
              f"{' + '.join(f'{t:.1f}' for t in times[1])} = {sum(times[1]):7.1f}  ratio "
              f"{sum(times[1]) / sum(times[0]):4.2f}")
    print("pointwise convolutions over NCHW positions by epilogue (the product call), µs: "
          "none, rescale + bias + clamp, and the next layer's fake quantization too")
    for c, m, side in POINTWISE:
        x, w, out = _pointwise_operands(rng, c, m, side)
        multipliers = (rng.random(m) * 0.01).astype(np.float32)
        biases = rng.standard_normal(m).astype(np.float32)
        times = []
        for epilogue in (None, Int8Epilogue(multipliers, biases, 0.0, 6.0, scaled=True),
                         Int8Epilogue(multipliers, biases, 0.0, 6.0, scaled=True,
                                      fake=(0.03, 0.0, 0.0, 255.0))):
            calls = QuantizedConv(w, (1, 1), (0, 0), (0, 0), positions=True,
                                  epilogue=epilogue).bind(x, scale, zero, out)
            times.append(best(calls[-1]))
        print(f"  {c:4d} -> {m:4d} over {side:3d}^2: " +
              "  ".join(f"{t:7.1f}" for t in times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
