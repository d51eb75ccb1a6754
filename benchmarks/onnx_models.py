#!/usr/bin/env python
"""Recommender models on tensoralg.onnx against onnxruntime, side by side in one run.

    python benchmarks/onnx_models.py [--quick] [--runs N] [--models mlp,fm,...] [--out FILE.json]

The raw results (every round of every configuration, the machine, the versions, the commit)
go to ``benchmarks/results/onnx_models-<YYYYMMDD-HHMMSS>-<commit>.json`` (or ``--out``);
``python benchmarks/report.py`` renders ``ONNX_RESULTS.md`` and its plot from the latest file.

Models (built with onnx.helper, float32, random weights):

- ``mlp``        256 -> 512 -> 256 -> 1 (Gemm, Relu, Sigmoid)
- ``fm``         factorization machine over a 10^4-wide multi-hot input (20 ones per row), k=16
- ``neumf``      NCF/NeuMF: user/item tables 10^5 and 5*10^4 rows x 32 (GMF and MLP towers),
                 MLP 64 -> 256 -> 128 -> 64, concat with GMF, Gemm, Sigmoid
- ``dlrm``       13 dense features -> bottom MLP 512-256-64; 8 bags of 4 ids over 2*10^4 x 64
                 tables (Gather + ReduceSum); pairwise dot interaction (MatMul with its
                 transpose); top MLP 145 -> 512 -> 256 -> 1
- ``wide_deep``  wide: multi-hot 10^4 input MatMul; deep: 4 embeddings 10^4 x 32 + 13 dense ->
                 256 -> 128 -> 1; sum, Sigmoid
- ``two_tower``  user: bag of 10 ids (ReduceMean) over 10^5 x 32 -> 256 -> 64; item: id over
                 5*10^4 x 32 -> 256 -> 64; dot product, Sigmoid
- ``cnn``        the issue's small CNN on N x 3 x 8 x 8: Conv 3->8 (3x3, pad 1) -> BatchNorm ->
                 Relu -> Conv 8->16 (3x3, stride 2) -> Relu -> Flatten -> Gemm 144 -> 10

For each model and batch (1 and 256): tensoralg at opt levels 0..3 on one thread
(``ta.set_num_threads(1)``) and at level 3 on all cores (``LN``), onnxruntime with one intra-op
thread and with all cores; ratios are onnxruntime time / tensoralg time thread for thread:
``ort1/L3`` (both one thread) and ``ortN/LN`` (both all cores); above 1: tensoralg faster. Then the same models with 90% of every MatMul/Gemm/Conv weight pruned to zero
(embedding tables untouched): tensoralg level 3 (sparse weights) against onnxruntime on the same
pruned model, which it runs dense. For the two models with a multi-hot input (FM, Wide&Deep),
level 3 is also timed with that input fed as a SciPy CSR matrix, reported in a table of its own
(onnxruntime takes the dense input). Compile time is load + the first two runs at level 3 (batch
2): statement kernels compile at the first run, and the second records the values and builds
the static plan (generated GEMMs, compiled-in convolutions, call sequences); the on-disk kernel
cache may make a repeat run of this script faster.
The branches each all-cores plan runs at once (``LN``; kept only where the plan's trial found
that 10% faster) are listed in a table of their own.
Every tensoralg output is checked against onnxruntime (rtol 1e-3, atol 1e-4) before timing.
Every configuration of a row is timed in 5 interleaved rounds (each configuration once per
round); a round's time is the median of ``max(3, 0.05 s / t)`` calls, and the JSON keeps every
round's time. In every round onnxruntime is timed right after the tensoralg configuration it is
compared with, so that the report pairs them: a ratio is the median over rounds of the
per-round ratios (it may differ from the ratio of the two median times; a shared machine drifts
by tens of percent within seconds). With ``--runs N`` the whole measurement is repeated N times
(fresh models each time) and the report pools the rounds of all runs.

OpenBLAS (NumPy's BLAS, which tensoralg's importer uses for large dense contractions) is pinned to
one thread (``OPENBLAS_NUM_THREADS=1`` unless already set): multi-threaded OpenBLAS on the 2-core
machine these figures come from was erratic (a 256x256x64 matmul took 0.07 ms or 8 ms from one
call to the next, while its threads fought the kernel thread pool). Most dense layers now run on
the generated GEMM, which splits its rows over tensoralg's own threads (``LN``): inside a
plan's compiled sequence the ranges go to a native fork-join pool (``runtime/pool.py``) whose
workers spin between the calls of a run. What still goes to BLAS (batched products, n < 16
outputs) runs on one thread in both columns.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
import scipy.sparse as sp
from onnx import TensorProto, numpy_helper
from onnx import helper as h

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import record  # noqa: E402  (benchmarks/record.py: machine, versions, commit, file name)

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.codegen import tiered  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64


class Builder:
    """Nodes, initializers and inputs of one model; weights pruned when ``prune`` is set."""

    def __init__(self, seed: int, prune: float = 0.0) -> None:
        self.rng = np.random.default_rng(seed)
        self.prune = prune
        self.nodes, self.inits, self.inputs = [], [], []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, array: np.ndarray, stem: str = "c") -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def table(self, rows: int, dim: int) -> str:
        return self.const((self.rng.standard_normal((rows, dim)) * 0.1).astype(np.float32), "E")

    def weight(self, n_in: int, n_out: int) -> str:
        w = (self.rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)
        if self.prune:
            w[self.rng.random(w.shape) < self.prune] = 0.0
        return self.const(w, "W")

    def conv_weight(self, out_channels: int, in_channels: int, size: int) -> str:
        fan_in = in_channels * size * size
        w = (self.rng.standard_normal((out_channels, in_channels, size, size)) /
             np.sqrt(fan_in)).astype(np.float32)
        if self.prune:
            w[self.rng.random(w.shape) < self.prune] = 0.0
        return self.const(w, "W")

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(h.make_node(op, inputs, [out], **attrs))
        return out

    def dense(self, x: str, n_in: int, n_out: int, act: str | None = "Relu",
              gemm: bool = True) -> str:
        b = self.const((self.rng.standard_normal(n_out) * 0.1).astype(np.float32), "b")
        if gemm:
            y = self.node("Gemm", [x, self.weight(n_in, n_out), b])
        else:
            y = self.node("Add", [self.node("MatMul", [x, self.weight(n_in, n_out)]), b])
        return self.node(act, [y]) if act else y

    def mlp(self, x: str, sizes: list[int], last_act: str | None = "Relu") -> str:
        for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
            x = self.dense(x, a, b, last_act if k == len(sizes) - 2 else "Relu", gemm=k % 2 == 0)
        return x

    def input(self, name: str, elem: int, shape: list) -> str:
        self.inputs.append(h.make_tensor_value_info(name, elem, shape))
        return name

    def model(self, output: str, out_shape: list) -> onnx.ModelProto:
        self.nodes.append(h.make_node("Identity", [output], ["y"]))
        graph = h.make_graph(self.nodes, "m", self.inputs,
                             [h.make_tensor_value_info("y", F32, out_shape)], self.inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def build_mlp(b: Builder):
    x = b.input("x", F32, ["N", 256])
    return b.model(b.mlp(x, [256, 512, 256, 1], "Sigmoid"), ["N", 1]), \
        lambda n, rng: {"x": rng.standard_normal((n, 256)).astype(np.float32)}


def multi_hot(n: int, width: int, ones: int, rng) -> np.ndarray:
    x = np.zeros((n, width), np.float32)
    for row in range(n):
        x[row, rng.choice(width, ones, replace=False)] = 1.0
    return x


def build_fm(b: Builder):
    n, k = 10_000, 16
    x = b.input("x", F32, ["N", n])
    v = b.table(n, k)
    linear = b.node("MatMul", [x, b.table(n, 1)])
    xv = b.node("MatMul", [x, v])
    x2v2 = b.node("MatMul", [b.node("Mul", [x, x]), b.node("Mul", [v, v])])
    diff = b.node("Sub", [b.node("Mul", [xv, xv]), x2v2])
    pair = b.node("ReduceSum", [diff, b.const(np.array([1], np.int64))], keepdims=1)
    logit = b.node("Add", [linear, b.node("Mul", [pair, b.const(np.float32(0.5))])])
    return b.model(b.node("Sigmoid", [logit]), ["N", 1]), \
        lambda m, rng: {"x": multi_hot(m, n, 20, rng)}


def build_neumf(b: Builder):
    users, items, d = 100_000, 50_000, 32
    u, i = b.input("user", I64, ["N"]), b.input("item", I64, ["N"])
    gmf = b.node("Mul", [b.node("Gather", [b.table(users, d), u]),
                         b.node("Gather", [b.table(items, d), i])])
    mlp_in = b.node("Concat", [b.node("Gather", [b.table(users, d), u]),
                               b.node("Gather", [b.table(items, d), i])], axis=1)
    mlp_out = b.mlp(mlp_in, [2 * d, 256, 128, 64])
    both = b.node("Concat", [gmf, mlp_out], axis=1)
    return b.model(b.dense(both, d + 64, 1, "Sigmoid"), ["N", 1]), \
        lambda m, rng: {"user": rng.integers(0, users, m).astype(np.int64),
                        "item": rng.integers(0, items, m).astype(np.int64)}


def build_dlrm(b: Builder):
    rows, d, tables, bag = 20_000, 64, 8, 4
    dense = b.input("dense", F32, ["N", 13])
    ids = b.input("ids", I64, ["N", tables, bag])
    bottom = b.mlp(dense, [13, 512, 256, d])
    parts = [b.node("Unsqueeze", [bottom, b.const(np.array([1], np.int64))])]
    for t in range(tables):
        idx = b.node("Gather", [ids, b.const(np.array(t, np.int64))], axis=1)
        pooled = b.node("ReduceSum", [b.node("Gather", [b.table(rows, d), idx]),
                                      b.const(np.array([1], np.int64))], keepdims=1)
        parts.append(pooled)
    feats = b.node("Concat", parts, axis=1)
    z = b.node("MatMul", [feats, b.node("Transpose", [feats], perm=[0, 2, 1])])
    top_in = b.node("Concat", [bottom, b.node("Flatten", [z], axis=1)], axis=1)
    width = d + (tables + 1) ** 2
    return b.model(b.mlp(top_in, [width, 512, 256, 1], "Sigmoid"), ["N", 1]), \
        lambda m, rng: {"dense": rng.standard_normal((m, 13)).astype(np.float32),
                        "ids": rng.integers(0, rows, (m, tables, bag)).astype(np.int64)}


def build_wide_deep(b: Builder):
    width, rows, d = 10_000, 10_000, 32
    wide_x = b.input("wide", F32, ["N", width])
    dense = b.input("dense", F32, ["N", 13])
    cats = b.input("cats", I64, ["N", 4])
    wide = b.node("MatMul", [wide_x, b.table(width, 1)])
    embs = [b.node("Gather", [b.table(rows, d),
                              b.node("Gather", [cats, b.const(np.array(t, np.int64))], axis=1)])
            for t in range(4)]
    deep_in = b.node("Concat", embs + [dense], axis=1)
    deep = b.mlp(deep_in, [4 * d + 13, 256, 128, 1], None)
    return b.model(b.node("Sigmoid", [b.node("Add", [wide, deep])]), ["N", 1]), \
        lambda m, rng: {"wide": multi_hot(m, width, 10, rng),
                        "dense": rng.standard_normal((m, 13)).astype(np.float32),
                        "cats": rng.integers(0, rows, (m, 4)).astype(np.int64)}


def build_two_tower(b: Builder):
    users, items, d, bag = 100_000, 50_000, 32, 10
    hist = b.input("history", I64, ["N", bag])
    item = b.input("item", I64, ["N"])
    u = b.node("ReduceMean", [b.node("Gather", [b.table(users, d), hist])], axes=[1], keepdims=0)
    u = b.mlp(u, [d, 256, 64], None)
    v = b.mlp(b.node("Gather", [b.table(items, d), item]), [d, 256, 64], None)
    score = b.node("ReduceSum", [b.node("Mul", [u, v]), b.const(np.array([1], np.int64))],
                   keepdims=1)
    return b.model(b.node("Sigmoid", [score]), ["N", 1]), \
        lambda m, rng: {"history": rng.integers(0, users, (m, bag)).astype(np.int64),
                        "item": rng.integers(0, items, m).astype(np.int64)}


def build_cnn(b: Builder):
    x = b.input("x", F32, ["N", 3, 8, 8])
    rng = b.rng

    def vector(n: int, scale: float = 0.1) -> str:
        return b.const((rng.standard_normal(n) * scale).astype(np.float32), "b")

    conv1 = b.node("Conv", [x, b.conv_weight(8, 3, 3), vector(8)], pads=[1, 1, 1, 1])
    bn = b.node("BatchNormalization", [conv1, b.const(rng.uniform(0.5, 1.5, 8).astype(
        np.float32)), vector(8), vector(8), b.const(rng.uniform(0.5, 2, 8).astype(np.float32))],
        epsilon=1e-5)
    conv2 = b.node("Conv", [b.node("Relu", [bn]), b.conv_weight(16, 8, 3), vector(16)],
                   strides=[2, 2])
    flat = b.node("Flatten", [b.node("Relu", [conv2])], axis=1)
    y = b.node("Gemm", [flat, b.weight(16 * 3 * 3, 10), vector(10)])
    return b.model(y, ["N", 10]), \
        lambda m, rng: {"x": rng.standard_normal((m, 3, 8, 8)).astype(np.float32)}


MODELS = {"mlp": build_mlp, "fm": build_fm, "neumf": build_neumf, "dlrm": build_dlrm,
          "wide_deep": build_wide_deep, "two_tower": build_two_tower, "cnn": build_cnn}
MULTI_HOT = {"fm": "x", "wide_deep": "wide"}      # each model's multi-hot input


ROUNDS = 5
SEED = 1                  # the models' random weights (inputs: one generator per batch size)


def timeit(fn, budget: float) -> float:
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    times = []
    for _ in range(max(3, min(2000, int(budget / once)))):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ort_session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def measure(name: str, prune: float, batches: list[int], levels: list[int], budget: float):
    """The rows of one model (one per batch): every configuration's per-round times."""
    model, feeds_of = MODELS[name](Builder(seed=SEED, prune=prune))
    rows = []
    compiled, compile_s = {}, None
    all_cores = os.cpu_count() or 1
    ta.set_num_threads(1)
    for level in levels:
        start = time.perf_counter()
        compiled[level] = tonnx.load(model, opt_level=level)
        if level == 3:
            for _ in range(2):            # kernels compile, then the static plan is built
                compiled[level].run(feeds_of(2, np.random.default_rng(0)))
            compile_s = time.perf_counter() - start
    many = tonnx.load(model, opt_level=3) if 3 in levels else None
    # The multi-hot input fed as CSR, as a data loader holding ids would give it (tensoralg
    # only: onnxruntime takes dense tensors); the CSR is built outside the timed calls.
    csr_model = tonnx.load(model, opt_level=3) if 3 in levels and name in MULTI_HOT else None
    runtimes = {1: ort_session(model, 1), 0: ort_session(model, 0)}
    for batch in batches:
        feeds = feeds_of(batch, np.random.default_rng(batch))
        expected = runtimes[0].run(None, feeds)[0]
        row = {"model": name, "batch": batch, "prune": prune, "wrong": [], "samples": {}}
        calls = {}
        thread_count = {}
        tried = [(f"L{level}", compiled[level], 1) for level in levels]
        if many is not None:
            tried.append(("LN", many, all_cores))
        for key, instance, count in tried:
            # A plan binds its thread ranges when it is built (second and third run): build
            # each under its own thread count.
            ta.set_num_threads(count)
            got = [instance.run(feeds)["y"] for _ in range(3)][-1]
            if not np.allclose(got, expected, rtol=1e-3, atol=1e-4):
                row["wrong"].append(key)
                print(f"  WRONG: {name} batch {batch} {key}", file=sys.stderr)
                continue
            calls[key] = lambda m=instance: m.run(feeds)
            thread_count[key] = count
        if csr_model is not None:
            sparse = dict(feeds, **{MULTI_HOT[name]: sp.csr_array(feeds[MULTI_HOT[name]])})
            got = [csr_model.run(sparse)["y"] for _ in range(3)][-1]
            if np.allclose(got, expected, rtol=1e-3, atol=1e-4):
                calls["L3csr"] = lambda: csr_model.run(sparse)
            else:
                row["wrong"].append("L3csr")
                print(f"  WRONG: {name} batch {batch} L3 with a CSR feed", file=sys.stderr)
        for threads, runtime in runtimes.items():
            calls[f"ort{threads}"] = lambda r=runtime: r.run(None, feeds)
        # Interleaved rounds: every configuration is timed in each round, so a burst of noise
        # on a shared machine hits all of them alike. Each compared pair is timed back to back
        # (onnxruntime right after tensoralg), so that report.py can pair them round by round:
        # the machine's speed drifts by tens of percent within seconds, which a ratio of two
        # separate medians would absorb.
        order = [key for key in ("L0", "L1", "L2", "L3", "ort1", "LN", "ort0", "L3csr")
                 if key in calls]
        # timed once every kernel runs its optimised build (codegen/tiered.py), not the quick
        # one a new kernel starts with
        tiered.finish(timeout=600)
        samples = {key: [] for key in order}
        for _ in range(ROUNDS):
            for key in order:
                ta.set_num_threads(thread_count.get(key, 1))
                samples[key].append(timeit(calls[key], budget / ROUNDS))
        ta.set_num_threads(1)
        row["samples"] = {key: record.rounded(values) for key, values in samples.items()}
        if 3 in levels and "L3" in calls:
            memory = compiled[3].profile(feeds).memory
            row["memory"] = {"buffers": memory.buffers, "total_bytes": memory.total,
                             "peak_bytes": memory.peak, "planned_bytes": memory.planned}
        if many is not None and many.specialiser.latest() is not None:
            # the branches the all-cores plan runs at once (its trial kept them)
            row["groups"] = many.specialiser.latest().groups()
        row["compile_s"] = compile_s
        rows.append(row)
        print(_line(row), flush=True)
        if "L3csr" in samples:
            print(f"{'':16} L3 with the multi-hot input as CSR: {_ms(row, 'L3csr')} ms, "
                  f"ort1/that {_ratio(row, 'ort1/CSR'):.2f}x", flush=True)
    return rows


# Each reported ratio: onnxruntime's configuration over tensoralg's, paired round by round.
PAIRS = {"ort1/L3": ("ort1", "L3"), "ortN/LN": ("ort0", "LN"), "ort1/CSR": ("ort1", "L3csr")}


def _ratio(row: dict, name: str) -> float:
    """The paired ratio ``name`` of ``row``: the median of its per-round ratios (NaN if absent)."""
    theirs, ours = PAIRS[name]
    a, b = row["samples"].get(theirs), row["samples"].get(ours)
    if not a or not b:
        return float("nan")
    return statistics.median(x / y for x, y in zip(a, b))


def _ms(row: dict, key: str) -> str:
    if key in row["wrong"]:
        return "   WRONG"
    if key not in row["samples"]:
        return f"{'-':>8}"
    return f"{statistics.median(row['samples'][key]) * 1e3:8.3f}"


def _line(row) -> str:
    cells = "  ".join(_ms(row, f"L{v}") for v in range(4))
    compile_s = row["compile_s"] if row["compile_s"] is not None else float("nan")
    return (f"{row['model']:<10} {row['batch']:>5}  {cells}  {_ms(row, 'LN')}  "
            f"{_ms(row, 'ort1')}  {_ms(row, 'ort0')}  {_ratio(row, 'ort1/L3'):6.2f}x  "
            f"{_ratio(row, 'ortN/LN'):6.2f}x  {compile_s:6.2f}")


HEADER_LEVELS = "model       batch  " + "  ".join(f"{'L' + str(v) + ' ms':>8}" for v in range(4))
TABLE_HEAD = (f"{HEADER_LEVELS}  {'LN ms':>8}  {'ort1 ms':>8}  {'ortN ms':>8}  {'ort1/L3':>7}  "
              f"{'ortN/LN':>7}  compile s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing budget")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=1,
                        help="repeat everything N times (the report pools their rounds)")
    parser.add_argument("--out", default=None,
                        help="write the JSON results here (default: benchmarks/results/"
                             "onnx_models-<date>-<commit>.json)")
    args = parser.parse_args(argv)
    budget = 0.08 if args.quick else 0.25
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    begun = record.start()
    started = time.perf_counter()
    runs = []
    for run in range(max(1, args.runs)):
        if args.runs > 1:
            print(f"\n== run {run + 1} of {args.runs} ==")
        print(TABLE_HEAD)
        dense = [r for n in names for r in measure(n, 0.0, [1, 256], [0, 1, 2, 3], budget)]
        print("\n90%-pruned weights (L3 sparse vs onnxruntime on the pruned model)")
        print(TABLE_HEAD)
        pruned = [r for n in names for r in measure(n, 0.9, [1, 256], [2, 3], budget)]
        runs.append({"dense": dense, "pruned": pruned})
    elapsed = time.perf_counter() - started
    path = record.write("onnx_models", {
        "options": {"quick": args.quick, "models": names, "runs": max(1, args.runs)},
        "seed": SEED,
        "threads": {"tensoralg L0-L3": 1, "tensoralg LN": os.cpu_count(), "onnxruntime ort1": 1,
                    "onnxruntime ortN": "all cores (intra_op_num_threads=0)",
                    "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")},
        "blas_threadpools": record.blas_threadpools(),
        "method": {"rounds": ROUNDS, "budget_s": budget,
                   "sample": "per round: median seconds per call of max(3, budget/rounds/t) "
                             "calls"},
        "elapsed_s": elapsed, "runs": runs,
    }, begun, out=args.out)
    print(f"\ntotal time {elapsed:.0f} s\nwrote {path}; render the report with: "
          "python benchmarks/report.py")
    return 1 if any(r["wrong"] for run in runs for rows in run.values() for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
