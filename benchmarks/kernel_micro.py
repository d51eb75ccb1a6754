#!/usr/bin/env python
"""Single kernels behind the ONNX figures, each against the NumPy/scipy call it competes with.

    python benchmarks/kernel_micro.py

- the compiled dense-to-CSR scan (``RowCompressor``, 256 x 10^4 multi-hot) against
  ``scipy.sparse.csr_array`` and against one BLAS read of the same matrix (``x @ V``);
- a row sum and a narrow product (one output column), whose reductions the LLVM backend sums
  in vector lanes, against NumPy;
- a transposed copy (tiled by cache line) against NumPy's strided copy;
- a fused dense layer ``relu(X W + b)``: the statement compiler's kernel with register tiles,
  the hand-scheduled generated GEMM (``tensoralg.api.dense_layer``, what level 3 uses) and
  BLAS plus the epilogue kernel;
- the cost of calling a prebound kernel from Python against calling the same kernels from a
  compiled call sequence (what level 3's static plans do);
- the thread-pool round trip that a split kernel pays.

Times are medians in µs over 5 interleaved rounds; the VM these ran on moves by ±30%.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tensoralg as ta  # noqa: E402
from tensoralg.api import RowCompressor  # noqa: E402


def median_us(calls: dict[str, object], rounds: int = 5, budget: float = 0.05) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            call()
            times = []
            start_all = time.perf_counter()
            while time.perf_counter() - start_all < budget or len(times) < 5:
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            samples[name].append(statistics.median(times))
    return {name: statistics.median(values) * 1e6 for name, values in samples.items()}


def show(title: str, results: dict[str, float]) -> None:
    print(title)
    for name, us in results.items():
        print(f"  {name:34s} {us:10.1f} us")


def main() -> None:
    rng = np.random.default_rng(0)
    x = np.zeros((256, 10_000), np.float32)
    for row in range(256):
        x[row, rng.choice(10_000, 20, replace=False)] = 1.0
    rows = RowCompressor(x.shape, np.float32, x.size // 4)
    v = rng.standard_normal((10_000, 16)).astype(np.float32)
    show("multi-hot 256 x 10000 (20 ones per row) to CSR", median_us({
        "tensoralg RowCompressor.compress": lambda: rows.compress(x),
        "scipy.sparse.csr_array": lambda: sp.csr_array(x),
        "one BLAS read: x @ V (16 cols)": lambda: x @ v}))

    rowsum = ta.compile("y(i) = sum(j, X(i,j))", dtype="float32").bind(X=x)
    a = rng.standard_normal((256, 96)).astype(np.float32)
    w = rng.standard_normal((1, 96)).astype(np.float32)
    c = rng.standard_normal(1).astype(np.float32)
    narrow = ta.compile("Y(i,j) = sigmoid(sum(k, A(i,k) * B(j,k)) + C(j))",
                        dtype="float32").bind(A=a, B=w, C=c)
    show("reductions summed in vector lanes", median_us({
        "tensoralg row sum 256 x 10000": rowsum,
        "numpy x.sum(axis=1)": lambda: x.sum(axis=1),
        "tensoralg sigmoid(A w + c), 256 x 96": narrow,
        "numpy 1/(1+exp(-(A @ w.T + c)))": lambda: 1 / (1 + np.exp(-(a @ w.T + c)))}))

    src = rng.standard_normal((256, 512)).astype(np.float32)
    dst = np.empty((512, 256), np.float32)
    transpose = ta.compile("Y(k,i) = X(i,k)", dtype="float32").bind(out=dst, X=src)
    show("transposed copy 256 x 512 float32", median_us({
        "tensoralg (tiled by cache line)": transpose,
        "numpy copyto(dst, src.T)": lambda: np.copyto(dst, src.T)}))

    xs = rng.standard_normal((256, 256)).astype(np.float32)
    ws = rng.standard_normal((256, 512)).astype(np.float32)
    bs = rng.standard_normal(512).astype(np.float32)
    product = np.empty((256, 512), np.float32)
    layer = ta.compile("Y(i,j) = max(sum(k, X(i,k) * W(k,j)) + B(j), 0)",
                       dtype="float32").bind(X=xs, W=ws, B=bs)
    epilogue = ta.compile("Y(i,j) = max(P(i,j) + B(j), 0)", dtype="float32").bind(P=product, B=bs)

    def blas_layer() -> None:
        np.matmul(xs, ws, out=product)
        epilogue()

    gemm = ta.api.dense_layer(ws, bs, relu=True)
    gemm.threads = None              # one thread, like the others
    bound_gemm = gemm.bind(xs, np.empty((256, 512), np.float32))
    results = median_us({"tensoralg statement, register tiles": layer,
                         "tensoralg generated GEMM (dense_layer)": bound_gemm,
                         "BLAS + epilogue kernel": blas_layer})
    flops = 256 * 256 * 512
    show("dense layer relu(X W + b), 256 x 256 x 512 float32", results)
    for name, us in results.items():
        print(f"  {name:34s} {flops / us / 1e3:10.1f} GFMA/s")

    tiny = ta.compile("Y(i) = max(A(i) + B(i), 0)", dtype="float32")
    small = [tiny.bind(A=np.ones(4, np.float32), B=np.ones(4, np.float32)) for _ in range(10)]
    sequence = ta.api.CallSequence([call.native({}) for call in small], slots=0)

    def from_python() -> None:
        for call in small:
            call()
    show("10 calls of a 4-element kernel", median_us({
        "prebound calls from Python": from_python,
        "one compiled call sequence": sequence.run}))

    pool = ThreadPoolExecutor(1)
    show("thread pool round trip (what a split kernel pays)", median_us({
        "submit + result of a no-op": lambda: pool.submit(lambda: None).result()}))


if __name__ == "__main__":
    main()
