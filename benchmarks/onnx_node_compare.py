"""Where a model's time goes, node by node, in tensoralg and in onnxruntime side by side.

``python benchmarks/onnx_node_compare.py MODEL.onnx --batch 8`` runs the model at level 3 on
one thread (``CompiledModel.profile``) and in onnxruntime with its profiler on, joins the two
per node, and prints the time of each kind of step (tensoralg's plan line with numbers blanked)
beside onnxruntime's time for the same nodes, costliest first. onnxruntime renames the nodes it
rewrites into channel-blocked (NCHWc) form after their outputs (``<output>_nchwc``), and the
join follows that; what neither name matches is counted apart.

The ratio column is onnxruntime time / tensoralg time (above 1: tensoralg faster); the inputs
are random normal values of the model's declared shapes with ``--batch`` for a symbolic first
dimension. Timings on a shared machine drift: compare kinds within one run.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np


def feeds_of(path: str, batch: int) -> dict[str, np.ndarray]:
    """Random inputs of ``path``'s declared shapes (``batch`` for a dimension without a value)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng(0)
    types = {1: np.float32, 11: np.float64, 7: np.int64, 6: np.int32}
    feeds = {}
    initialisers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initialisers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else batch for d in tensor.shape.dim]
        dtype = types.get(tensor.elem_type)
        if dtype is None:
            raise SystemExit(f"input {value.name}: element type {tensor.elem_type} is not handled")
        feeds[value.name] = rng.standard_normal(shape).astype(dtype) if dtype in (
            np.float32, np.float64) else rng.integers(0, 2, shape).astype(dtype)
    return feeds


def onnxruntime_times(path: str, feeds: dict[str, np.ndarray], runs: int) -> dict[str, float]:
    """Milliseconds per run of each node onnxruntime ran (one thread, profiler on)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)        # warm-up, not counted below
    profile_path = session.end_profiling()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    Path(profile_path).unlink(missing_ok=True)
    times: dict[str, float] = collections.defaultdict(float)
    for event in events:
        name = event.get("name", "")
        if event.get("cat") == "Node" and name.endswith("_kernel_time"):
            times[name[:-len("_kernel_time")]] += event["dur"] / 1e3 / runs
    return times


def compare(path: str, batch: int, runs: int, top: int, by_node: bool = False) -> str:
    """The table :func:`main` prints."""
    import tensoralg
    import tensoralg.onnx

    feeds = feeds_of(path, batch)
    theirs = onnxruntime_times(path, feeds, runs)
    tensoralg.set_num_threads(1)
    model = tensoralg.onnx.load(path, opt_level=3)
    for _ in range(3):              # the third run goes through the static plan
        model.run(feeds)
    profile = model.profile(feeds, repeat=runs)
    outputs = {node.name: list(node.outputs) for node in model.graph.nodes}
    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    unmatched = 0.0
    for row in profile.rows:
        names = [f"{o}_nchwc" for o in outputs.get(row.node, [])] + \
            outputs.get(row.node, []) + [row.node]
        found = [theirs[n] for n in names if n in theirs]
        if not found:
            unmatched += row.seconds * 1e3
        plan = row.plan if by_node else re.sub(r'[0-9.]+', '#', row.plan)
        kind = kinds[f"{row.node + ' ' if by_node else ''}{row.op_type} | {plan[:100]}"]
        kind[0] += row.seconds * 1e3
        kind[1] += found[0] if found else 0.0
        kind[2] += 1
    lines = [f"{Path(path).name}, batch {batch}: tensoralg {profile.total * 1e3:.1f} ms, "
             f"onnxruntime {sum(theirs.values()):.1f} ms (one thread, {runs} runs)",
             f"{'tensoralg ms':>12} {'ort ms':>8} {'ort/ta':>7} {'nodes':>5}  step"]
    for kind, (ours, other, count) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:top]:
        ratio = f"{other / ours:7.2f}" if ours and other else "      -"
        lines.append(f"{ours:12.2f} {other:8.2f} {ratio} {count:5d}  {kind}")
    lines.append(f"tensoralg time on nodes onnxruntime's profile does not name: {unmatched:.2f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an .onnx file")
    parser.add_argument("--batch", type=int, default=1,
                        help="size of dimensions the model leaves symbolic (default 1)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs on each side")
    parser.add_argument("--top", type=int, default=15, help="kinds of steps to print")
    parser.add_argument("--nodes", action="store_true",
                        help="one row per node instead of one per kind of step")
    args = parser.parse_args(argv)
    print(compare(args.model, args.batch, args.runs, args.top, args.nodes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
