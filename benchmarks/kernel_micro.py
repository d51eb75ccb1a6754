#!/usr/bin/env python
"""Single kernels behind the ONNX figures, each against the NumPy/scipy call it competes with.

    python benchmarks/kernel_micro.py

- the compiled dense-to-CSR scan (``RowCompressor``, 256 x 10^4 multi-hot; ``codegen/scan.py``)
  against the statement-IR scan it replaced, ``scipy.sparse.csr_array``, and one read of the
  same matrix (``x @ V``, ``x.max()``);
- Wide&Deep's wide product (256 x 10^4 times one column) with four rows jammed against the
  same kernel one row at a time and NumPy's GEMV;
- a row sum and a narrow product (one output column), whose reductions the LLVM backend sums
  in vector lanes, against NumPy; a one-output layer as dot products per row against the
  generated GEMM;
- a transposed copy (tiled by cache line) against NumPy's strided copy;
- a fused dense layer ``relu(X W + b)``: the statement compiler's kernel with register tiles,
  the hand-scheduled generated GEMM (``tensoralg.api.dense_layer``, what level 3 uses) and
  BLAS plus the epilogue kernel;
- the cost of calling a prebound kernel from Python against calling the same kernels from a
  compiled call sequence (what level 3's static plans do);
- an SpMM with 4, 8, 16 and 24 f64 columns (narrower than one register tile) with the tile
  pass's narrower tiles and without them (``ir/passes/tile.py``, ``NARROWER_TILES``), and with a
  row workspace (``precompute``) whose narrower tiles own their lanes or go through it
  (``ir/passes/epilogue.py``), against scipy;
- a 90%-pruned layer (CSR weight, activations features x batch) compiled for 512-bit vectors
  against LLVM's 256-bit default, on activations aligned to 64 bytes and 16 bytes past, and
  without the pass that applies its epilogue inside the register tiles;
- the benchmark CNN's two convolutions, dense and 90% pruned: weights compiled in
  (``tensoralg.api.direct_conv``, what level 3 uses) against the GEMM-based convolution and
  onnxruntime;
- DLRM's interaction ``X @ X^T`` per batch item: the kernel level 3 uses (each symmetric pair
  of rows once, ``tensoralg.api.gram_call``) against the statement and NumPy;
- the thread-pool round trip that a split kernel pays, and two dense layers on two threads in a
  compiled sequence: on the native pool (``runtime/pool.py``) against the Python pool.

Times are medians in µs over 5 interleaved rounds; the VM these ran on moves by ±30%.
"""
from __future__ import annotations

import contextlib
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
from tensoralg.ir.nodes import F32  # noqa: E402
from tensoralg.ir.passes.epilogue import tile_epilogues  # noqa: E402
from tensoralg.ir.passes.jam import jam_rows  # noqa: E402
from tensoralg.runtime.compress import reference_kernel  # noqa: E402
from tensoralg.runtime.gemm import DenseLayer  # noqa: E402
from tensoralg.runtime.ranges import run_ranges  # noqa: E402
from tensoralg.runtime.threads import KernelThreads  # noqa: E402


def median_us(calls: dict[str, object], rounds: int = 5, budget: float = 0.05) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():
        call()
    ta.wait_for_optimised()    # time the optimised kernels, not their quick first builds
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


@contextlib.contextmanager
def _fresh_kernels(module: object, name: str, value: object):
    """Inside, ``module.name`` is ``value`` and kernels are built anew (no in-process or disk
    cache, which would hand back the usual build); both are restored after."""
    cache = ta.api.kernel_cache()
    saved = getattr(module, name), cache.disk, dict(cache.kernels)
    setattr(module, name, value)
    cache.disk = None
    cache.kernels.clear()
    try:
        yield
    finally:
        setattr(module, name, saved[0])
        cache.disk = saved[1]
        cache.kernels.clear()
        cache.kernels.update(saved[2])


def _with_narrow_vectors(make):
    """What ``make()`` builds with LLVM left at its 256-bit preference for reductions
    (``codegen/llvm.py``, WIDE_VECTORS)."""
    from tensoralg.codegen import llvm as backend

    with _fresh_kernels(backend, "WIDE_VECTORS", False):
        return make()


def aligned(array: np.ndarray, offset: int = 0) -> np.ndarray:
    """A copy of ``array`` starting ``offset`` bytes past a 64-byte boundary."""
    raw = np.empty(array.nbytes + 128, np.uint8)
    start = -raw.ctypes.data % 64 + offset
    copy = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    copy[...] = array
    return copy


def show_pruned_layers(rng: np.random.Generator) -> None:
    """A 90%-pruned layer relu(W x + b) in the transposed layout ONNX plans use (activations
    features x batch): 512-bit vectors against LLVM's 256-bit default, on activations aligned
    to 64 bytes (as plan arenas are) and 16 bytes past (as NumPy allocates); and, aligned, the
    kernel built without ``ir/passes/epilogue.py`` (bias and ReLU in a second pass over the
    row instead of inside the register tiles)."""
    threads = ta.get_num_threads()
    ta.set_num_threads(1)
    statement = "Y(j,i) = max(sum(k, A(k,i) * B(j,k)) + C(j), 0)"
    for n_in, n_out in [(141, 256), (256, 512)]:
        w = rng.standard_normal((n_out, n_in)).astype(np.float32)
        w[rng.random(w.shape) < 0.9] = 0
        weight = sp.csr_array(w)
        bias = rng.standard_normal(n_out).astype(np.float32)
        x = rng.standard_normal((n_in, 256)).astype(np.float32)
        calls, bound = {}, []          # the bound calls own the kernels the sequences call
        for offset in (0, 16):
            a = aligned(x, offset)
            bind = lambda a=a: ta.compile(statement, formats={"B": "csr"},  # noqa: E731
                                          dtype="float32").bind(A=a, B=weight, C=bias)
            variants = [("512-bit", bind), ("256-bit", lambda: _with_narrow_vectors(bind))]
            if offset == 0:
                variants.append(("512-bit, no epilogue pass",
                                 lambda: _without_step(tile_epilogues, bind)))
            for name, make in variants:
                bound.append(make())
                calls[f"{name}, offset {offset}"] = ta.api.CallSequence(
                    [bound[-1].native({})], 0).run
        results = median_us(calls)
        show(f"90%-pruned layer {n_in} -> {n_out}, batch 256, one thread", results)
        for name, us in results.items():
            print(f"  {name:34s} {weight.nnz * 256 / us / 1e3:10.1f} GFMA/s")
    ta.set_num_threads(threads)


def show_narrow_spmm(rng) -> None:
    """SpMM rows narrower than one register tile, with and without the narrower tiles; and
    with a row workspace (``precompute``), its narrower tiles owning their lanes
    (``ir/passes/epilogue.py``) or going through the workspace."""
    from tensoralg.ir.passes import epilogue, tile

    threads = ta.get_num_threads()
    ta.set_num_threads(1)
    a = sp.random_array((4000, 4000), density=0.005, format="csr", random_state=1,
                        dtype=np.float64)
    workspace = ta.Schedule().precompute("A(i,j) * X(j,k)", "k")
    for columns in (4, 8, 16, 24):
        x = rng.standard_normal((4000, columns))
        calls = {}
        for name, module, attribute, value, schedule in (
                ("narrower tiles", tile, "NARROWER_TILES", tile.NARROWER_TILES, None),
                ("full tiles only", tile, "NARROWER_TILES", 0, None),
                ("workspace", tile, "NARROWER_TILES", tile.NARROWER_TILES, workspace),
                ("workspace, narrower tiles through it", epilogue, "_narrower_tiles",
                 lambda *args: None, workspace)):
            with _fresh_kernels(module, attribute, value):
                kernel = ta.compile("Y(i,k) = A(i,j) * X(j,k)", formats={"A": "csr"},
                                    dtype="float64", schedule=schedule)
                calls[name] = kernel.bind(A=a, X=x)
        calls["scipy A @ X"] = lambda x=x: a @ x
        show(f"SpMM 4000 x 4000 (80k stored) times {columns} f64 columns, one thread",
             median_us(calls))
    ta.set_num_threads(threads)


def _without_step(step, make):
    """What ``make()`` builds with the IR pass ``step`` left out of the pipeline."""
    from tensoralg.ir.passes import pipeline

    steps = tuple(entry for entry in pipeline.STEPS if entry[1] is not step)
    with _fresh_kernels(pipeline, "STEPS", steps):
        return make()


def main() -> None:
    rng = np.random.default_rng(0)
    x = np.zeros((256, 10_000), np.float32)
    for row in range(256):
        x[row, rng.choice(10_000, 20, replace=False)] = 1.0
    rows = RowCompressor(x.shape, np.float32, x.size // 4)
    v = rng.standard_normal((10_000, 16)).astype(np.float32)
    oracle = RowCompressor(x.shape, np.float32, x.size // 4)
    oracle._kernel = reference_kernel(F32)
    show("multi-hot 256 x 10000 (20 ones per row) to CSR", median_us({
        "tensoralg RowCompressor.compress": lambda: rows.compress(x),
        "same, statement-IR scan (oracle)": lambda: oracle.compress(x),
        "scipy.sparse.csr_array": lambda: sp.csr_array(x),
        "one BLAS read: x @ V (16 cols)": lambda: x @ v,
        "one NumPy read: x.max()": x.max}))

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

    # Wide&Deep's wide product: four rows jammed (ir/passes/jam.py) against the same kernel
    # compiled without that pass (one row at a time) and NumPy's GEMV; one thread.
    threads = ta.get_num_threads()
    ta.set_num_threads(1)
    w_wide = rng.standard_normal((1, 10_000)).astype(np.float32)
    statement = "Y(i,j) = sum(k, A(i,k) * B(j,k))"
    jammed = ta.compile(statement, dtype="float32").bind(A=x, B=w_wide)
    one_row = _without_step(
        jam_rows, lambda: ta.compile(statement, dtype="float32").bind(A=x, B=w_wide))
    w_flat = w_wide.reshape(-1)
    show("the wide product 256 x 10000 times one column, one thread", median_us({
        "tensoralg, four rows jammed": jammed,
        "same kernel, one row at a time": one_row,
        "numpy x @ w (GEMV)": lambda: x @ w_flat}))
    ta.set_num_threads(threads)

    # A layer of one output (the models' last layers) in a compiled sequence: the dot-product
    # statement level 3 now uses (product_steps.narrow_dot) against the generated GEMM, whose
    # one-vector tile computes 16 columns.
    a256 = rng.standard_normal((256, 256)).astype(np.float32)
    w256 = rng.standard_normal((256, 1)).astype(np.float32)
    c256 = rng.standard_normal(1).astype(np.float32)
    dot = ta.compile("Y(i,j) = sum(k, A(i,k) * B(j,k)) + C(j)", dtype="float32").bind(
        A=a256, B=np.ascontiguousarray(w256.T), C=c256)
    gemm = DenseLayer(w256, bias=c256).bind(a256, np.empty((256, 1), np.float32))
    show("a one-output layer A w + c, 256 x 256 x 1, four calls in a compiled sequence", median_us({
        "dot products per row (level 3)": ta.api.CallSequence([dot.native({})] * 4, 0).run,
        "generated GEMM, one-vector tile": ta.api.CallSequence([gemm.native({})] * 4, 0).run,
        "numpy A @ w + c, four times": lambda: [a256 @ w256 + c256 for _ in range(4)]}))

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

    show_narrow_spmm(rng)
    show_pruned_layers(rng)
    show_convolutions(rng)

    features = rng.standard_normal((256, 9, 64)).astype(np.float32)
    pairs = np.empty((256, 9, 9), np.float32)
    gram = ta.api.gram_call(features, pairs, "gram")
    statement = ta.compile("Y(b,i,j) = A(b,i,k) * B(b,j,k)", dtype="float32").bind(
        A=features, B=features)
    show("DLRM interaction X @ X^T per item, 256 x 9 x 64 float32", median_us({
        "tensoralg gram_call (each pair once)": gram,
        "tensoralg statement (every pair)": statement,
        "numpy matmul(X, X^T)": lambda: np.matmul(features, features.transpose(0, 2, 1))}))

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

    # The same two dense layers (256x256x512, 256x512x256) in one compiled sequence: one range
    # each, two ranges each on the native pool, and two ranges each through the Python pool.
    threads = KernelThreads(2)
    w1 = rng.standard_normal((256, 512)).astype(np.float32)
    w2 = rng.standard_normal((512, 256)).astype(np.float32)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    h, o = np.empty((256, 512), np.float32), np.empty((256, 256), np.float32)
    one = [DenseLayer(w1, relu=True).bind(a, h), DenseLayer(w2, relu=True).bind(h, o)]
    two = [DenseLayer(w1, relu=True, threads=threads).bind(a, h),
           DenseLayer(w2, relu=True, threads=threads).bind(h, o)]
    on_one = ta.api.CallSequence([layer.native({}) for layer in one], slots=0)
    on_pool = ta.api.CallSequence([layer.native({}) for layer in two], slots=0)

    def python_pool() -> None:
        for layer in two:
            run_ranges(layer.function, layer.calls, threads, layer.what)
    show("two dense layers on two threads (256x256x512, 256x512x256)", median_us({
        "one thread, compiled sequence": on_one.run,
        "native pool, compiled sequence": on_pool.run,
        "Python thread pool per layer": python_pool}))
    threads.native_pool().close()


def show_convolutions(rng: np.random.Generator) -> None:
    """The benchmark CNN's two convolutions at batch 256 (ReLU fused), dense and 90% pruned:
    weights compiled in (``direct_conv``) against the GEMM-based convolution (``conv_layer``,
    channels-last output, so its NCHW transpose is left out) and onnxruntime on the same node."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    for (c, m, stride, pad) in [(3, 8, 1, 1), (8, 16, 2, 0)]:
        x = rng.standard_normal((256, c, 8, 8)).astype(np.float32)
        for prune in (0.0, 0.9):
            w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
            w[rng.random(w.shape) < prune] = 0.0
            b = rng.standard_normal(m).astype(np.float32)
            direct = ta.api.direct_conv(w, b, (c, 8, 8), (stride,) * 2, (1, 1), (pad,) * 2,
                                        (pad,) * 2, relu=True, skip_zeros=prune > 0)
            side = (8 + 2 * pad - 3) // stride + 1
            calls = {}
            if direct is not None:
                direct.threads = None
                calls["tensoralg direct_conv (weights in code)"] = direct.bind(
                    x, np.empty((256, m, side, side), np.float32))
            gemm = ta.api.conv_layer(w, b, (stride,) * 2, (pad,) * 2, (pad,) * 2, relu=True)
            calls["tensoralg conv_layer (generated GEMM)"] = gemm.bind(
                x, np.empty((256 * side * side, m), np.float32))
            node = helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2,
                                    pads=[pad] * 4)
            graph = helper.make_graph(
                [node, helper.make_node("Relu", ["c"], ["y"])], "conv",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            session = ort.InferenceSession(
                helper.make_model(graph).SerializeToString(), options,
                providers=["CPUExecutionProvider"])
            calls["onnxruntime Conv + Relu, one thread"] = lambda s=session: s.run(None, {"x": x})
            show(f"Conv {c} -> {m} channels, 3x3, stride {stride}, pad {pad}, batch 256 x 8 x 8"
                 f"{', 90% of weights zero' if prune else ''}", median_us(calls))


if __name__ == "__main__":
    main()
