#!/usr/bin/env python
"""A transformer served with a different sequence length at every call, or a graph network
with a different graph at every call, against onnxruntime.

    python benchmarks/variable_shapes.py [--model bert|gcn] [--calls 200] [--passes 3]
                                         [--threads 1] [--out FILE.json]

Exports a small BERT (``transformers``, 2 layers, hidden 128, random weights; the ``bench``
extra) with its batch and sequence axes dynamic, as users export models they serve, and runs a
stream of ``--calls`` calls of batch 2 whose lengths are drawn from 8 to 63 tokens (seed 0), the
same stream ``--passes`` times. tensoralg (opt level 3, one thread) builds a static plan per
input shape on its second run and keeps up to ``MAX_PLANS`` of them (``onnx/plan/static.py``),
so the first pass pays for node-by-node runs and plan builds and later passes mostly run plans;
onnxruntime (one intra-op thread) runs every shape the same way. ``--model gcn`` exports
PyTorch Geometric's two-layer GCN (64 features, dynamic node and edge counts; the
``torch_geometric`` of the ``bench`` extra) and streams random graphs of 200 to 3000 nodes with
4 edges a node, node counts drawn from 60 values, so that most graphs' shapes come back
rarely. ``--threads`` sets tensoralg's threads (onnxruntime keeps one). Every output is checked
against onnxruntime's. Prints per pass both totals, their ratio (onnxruntime / tensoralg, above 1:
tensoralg faster), tensoralg's slowest call, and the median call of each kind: node by node (a
shape's first run), building a plan, and through a plan, beside onnxruntime's median call.
"""
from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time

import numpy as np

import tensoralg as ta
import tensoralg.onnx as tonnx


def export_bert() -> bytes:
    """The ONNX bytes of a small random BERT with dynamic batch and sequence axes."""
    import torch
    import transformers

    config = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=256)
    inner = transformers.BertModel(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids, mask):
            return self.inner(ids, attention_mask=mask, return_dict=False)[0]

    ids = torch.randint(0, 1000, (2, 16))
    buffer = io.BytesIO()
    axes = {0: "batch", 1: "tokens"}
    with torch.no_grad():
        torch.onnx.export(Encoder(), (ids, torch.ones_like(ids)), buffer, dynamo=False,
                          opset_version=17, input_names=["ids", "mask"],
                          dynamic_axes={"ids": axes, "mask": axes})
    return buffer.getvalue()


def export_gcn() -> bytes:
    """The ONNX bytes of a two-layer random GCN (PyTorch Geometric) with dynamic node and
    edge counts."""
    import torch
    import torch_geometric.nn as pyg

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = pyg.GCNConv(64, 32), pyg.GCNConv(32, 7)

        def forward(self, x, edge_index):
            return self.second(torch.relu(self.first(x, edge_index)), edge_index)

    torch.manual_seed(0)
    x, edges = torch.randn(100, 64), torch.randint(0, 100, (2, 400))
    buffer = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(Net().eval(), (x, edges), buffer, dynamo=False, opset_version=17,
                          input_names=["x", "edge_index"],
                          dynamic_axes={"x": {0: "nodes"}, "edge_index": {1: "edges"}})
    return buffer.getvalue()


def stream_of(model: str, calls: int) -> list[dict[str, np.ndarray]]:
    """The calls' feeds (seed 0): BERT's token lengths 8-63, or GCN's graphs."""
    rng = np.random.default_rng(0)
    stream = []
    if model == "bert":
        for length in rng.integers(8, 64, calls):
            ids = rng.integers(0, 1000, (2, int(length))).astype(np.int64)
            stream.append({"ids": ids, "mask": np.ones_like(ids)})
        return stream
    sizes = rng.integers(200, 3000, 60)
    for nodes in rng.choice(sizes, calls):
        nodes = int(nodes)
        stream.append({"x": rng.standard_normal((nodes, 64)).astype(np.float32),
                       "edge_index": rng.integers(0, nodes, (2, 4 * nodes)).astype(np.int64)})
    return stream


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("bert", "gcn"), default="bert")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()
    import onnxruntime as ort

    model = export_bert() if args.model == "bert" else export_gcn()
    ta.set_num_threads(args.threads)
    compiled = tonnx.load(model, opt_level=3)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    stream = stream_of(args.model, args.calls)
    passes = []
    specialiser = compiled.specialiser
    for k in range(args.passes):
        ours = theirs = slowest = 0.0
        # tensoralg's calls by what they did: ran node by node, built a plan, ran a plan
        kinds: dict[str, list[float]] = {"node by node": [], "plan built": [], "planned": []}
        onnxruntime_calls = []
        for feeds in stream:
            planned = specialiser.plans.get(specialiser.signature(feeds)) is not None
            start = time.perf_counter()
            got = compiled.run(feeds)
            middle = time.perf_counter()
            want = session.run(None, feeds)[0]
            end = time.perf_counter()
            np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-3, atol=1e-4)
            built = specialiser.plans.get(specialiser.signature(feeds)) is not None
            kind = "planned" if planned else "plan built" if built else "node by node"
            kinds[kind].append(middle - start)
            onnxruntime_calls.append(end - middle)
            ours += middle - start
            theirs += end - middle
            slowest = max(slowest, middle - start)
        plans = [p for p in specialiser.plans.values() if p is not None]
        medians = {kind: float(np.median(t)) if t else None for kind, t in kinds.items()}
        passes.append({"pass": k + 1, "tensoralg_s": ours, "onnxruntime_s": theirs,
                       "ratio": theirs / ours, "slowest_call_s": slowest,
                       "plans": len(plans), "light_plans": sum(p.light for p in plans),
                       "calls": {kind: len(t) for kind, t in kinds.items()},
                       "median_call_s": medians,
                       "onnxruntime_median_call_s": float(np.median(onnxruntime_calls))})
        print(f"pass {k + 1}: tensoralg {ours * 1e3:8.1f} ms, onnxruntime {theirs * 1e3:7.1f} ms,"
              f" ratio {theirs / ours:5.2f}, slowest call {slowest * 1e3:6.1f} ms, "
              f"{len(plans)} plans ({passes[-1]['light_plans']} light)")
        print("  median call, ms: " + ", ".join(
            f"{kind} {t * 1e3:.2f} ({len(kinds[kind])})" for kind, t in medians.items()
            if t is not None) + f"; onnxruntime {np.median(onnxruntime_calls) * 1e3:.2f}")
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"script": "benchmarks/variable_shapes.py", "commit": commit,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": args.model,
                       "threads": args.threads, "calls": args.calls, "passes": passes},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
