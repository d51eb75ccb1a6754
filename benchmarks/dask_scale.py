"""SpMM and MTTKRP on Dask with tensoralg kernels per block, against one process.

    python benchmarks/dask_scale.py [--nnz 1e7 ...] [--workers 1 2] [--blocks 2 4 8 16]
                                    [--repeats 3] [--capped | --capped-only] [--no-pydata]
                                    [--interleave ROUNDS [--interleave-only]]
                                    [--out FILE.json] [--render FILE.json]

For each generated input (SpMM: a square CSR matrix with ~10 nonzeros per row times a dense
matrix of 16 columns; MTTKRP: a CSF tensor with ~20 nonzeros per mode-0 slice times two
factor matrices of rank 16) it measures:

- ``ta.einsum`` in this process, single-threaded and with every core (best of ``--repeats``);
- the same call on ``ta.dask`` operands on a ``distributed.LocalCluster`` of ``--workers``
  processes (one thread each, ``TENSORALG_NUM_THREADS=1``) for each number of ``--blocks``:
  the sparse operand is persisted on the workers first (``ta.dask`` sends its blocks to them
  round-robin; ``Client.rebalance``, tried too, piled them up by process memory), the dense
  ones are persisted single-block dask arrays replicated on every worker, so ``compute`` is
  the distributed computation with the result left on the workers, best of ``--repeats``;
  ``gather`` adds fetching the whole result to the client, once; ``first`` is one run with
  the dense operands given as NumPy arrays, which ``ta.dask`` sends to every worker on each
  call (plus the kernels' first load);
- the bytes workers sent each other during the first run (``transfer_outgoing_bytes_total``;
  the broadcast from the client is not in it: each worker receives the dense operands once),
  and the peak resident memory of each worker process during the runs (Linux's VmHWM, reset
  after the operands arrive; a fresh cluster for every configuration);
- dask's own ``da.einsum`` on pydata ``sparse.COO`` chunks, where it runs (``--no-pydata``
  skips it);
- with ``--capped``: the SpMM once more (100 nonzeros per row, 4 columns, the product's row
  sums) on two workers
  each given half the sparse operand's bytes (``memory_limit``; a worker process alone takes
  ~300 MiB, so this means something from ~1e8 nonzeros), the operand built block by block on
  the workers from a seeded generator, so no process ever holds it whole; it says whether it
  completed.
- with ``--interleave ROUNDS``: SpMM (the first ``--nnz``, 4 blocks) one thread in this
  process and on two workers, alternately, and the ratio of the medians: the fairest figure
  on a machine whose load changes from second to second.

The machine is shared and has two cores: every figure is noisy, the ratios more than the
times; results go to ``benchmarks/results/dask_scale-<date>-<commit>.json`` and the tables to
``benchmarks/DASK_RESULTS.md`` (from the newest full run and the newest ``--capped`` run;
``--render`` rewrites it without measuring).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import record  # noqa: E402  (benchmarks/record.py: machine, versions, commit, file name)

import tensoralg as ta  # noqa: E402

RANK = 16
MARKDOWN = HERE / "DASK_RESULTS.md"


# -- inputs --------------------------------------------------------------------------------


def spmm_matrix(nnz: int, seed: int, rows: int | None = None) -> sp.csr_array:
    """A square CSR matrix with about ``nnz`` entries placed uniformly (canonical)."""
    rng = np.random.default_rng(seed)
    n = rows or max(1, nnz // 10)
    keys = np.unique(rng.integers(0, n * n, size=nnz, dtype=np.int64))
    row, col = np.divmod(keys, n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n), out=indptr[1:])
    index_dtype = np.int32 if n < 2**31 and len(keys) < 2**31 else np.int64
    return sp.csr_array((rng.random(len(keys)), col.astype(index_dtype),
                         indptr.astype(index_dtype)), shape=(n, n))


def row_block(start: int, stop: int, columns: int, per_row: int, seed: int) -> sp.csr_array:
    """Rows ``start:stop`` of a seeded random matrix, generated where the task runs (the
    ``--capped`` operand: no process ever holds it whole)."""
    rng = np.random.default_rng((seed, start))
    rows = stop - start
    cols = np.sort(rng.integers(0, columns, size=(rows, per_row)), axis=1)
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int64)
    matrix = sp.csr_array((rng.random(rows * per_row), cols.ravel().astype(np.int32), indptr),
                          shape=(rows, columns))
    matrix.sum_duplicates()
    return matrix


def mttkrp_tensor(nnz: int, seed: int) -> ta.Tensor:
    """A CSF tensor with about ``nnz`` uniform entries, ~20 per mode-0 slice."""
    rng = np.random.default_rng(seed)
    shape = (max(1, nnz // 20), 20000, 20000)
    keys = np.unique(rng.integers(0, shape[0] * shape[1] * shape[2], size=nnz,
                                  dtype=np.int64))
    coords = np.stack(np.unravel_index(keys, shape))
    return ta.Tensor.from_coords(coords, rng.random(len(keys)), shape, format="sss")


# -- measuring -----------------------------------------------------------------------------


def best_of(repeats: int, run: Callable[[], Any]) -> float:
    ta.wait_for_optimised()    # time the optimised kernels, not their quick first builds
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return min(times)


def single_process(case: dict[str, Any], repeats: int) -> dict[str, float]:
    """``ta.einsum`` here, on one thread and on every core."""
    out = {}
    for label, threads in (("one_thread_s", 1), ("all_cores_s", os.cpu_count() or 1)):
        ta.set_num_threads(threads)
        ta.einsum(case["subscripts"], *case["operands"])          # compile, warm
        out[label] = best_of(repeats, lambda: ta.einsum(case["subscripts"], *case["operands"]))
    ta.set_num_threads(1)
    return out


def _peak_rss_bytes() -> int:
    """This process's peak resident memory since it started or since ``_reset_peak``
    (Linux's VmHWM: unlike ``ru_maxrss`` it is not carried over from the process that
    started this one)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")          # resets VmHWM to the current resident size
    except OSError:
        pass


def _sent_bytes(dask_worker: Any) -> int:
    return int(dask_worker.transfer_outgoing_bytes_total)


def on_cluster(client: Any, case: dict[str, Any], blocks: int, repeats: int) -> dict[str, Any]:
    """One configuration on a fresh set of workers."""
    import dask.array as da
    import distributed

    sparse, *dense = case["operands"]
    chunked = client.persist(case["chunk"](sparse, blocks))
    distributed.wait(chunked, timeout=300)
    sent_before = sum(client.run(_sent_bytes).values())
    client.run(_reset_peak)        # the peak of the runs, not of receiving the operands

    def run(*operands: Any) -> None:
        result = client.persist(ta.einsum(case["subscripts"], chunked, *operands))
        distributed.wait(result, timeout=600)
        del result

    first = best_of(1, lambda: run(*dense))    # NumPy operands: ta.dask broadcasts them
    sent = sum(client.run(_sent_bytes).values()) - sent_before
    persisted = [client.persist(da.from_array(d, chunks=d.shape)) for d in dense]
    distributed.wait(persisted)
    client.replicate(persisted)                # on every worker once, as a broadcast
    compute = best_of(repeats, lambda: run(*persisted))
    gather = best_of(1, lambda: client.compute(
        ta.einsum(case["subscripts"], chunked, *persisted), sync=True))
    plan = ta.dask.explain(case["subscripts"], chunked, *dense)
    return {"blocks": blocks, "first_s": first, "compute_s": compute, "gather_s": gather,
            "bytes_moved": sent, "peak_rss_per_worker": sorted(client.run(_peak_rss_bytes)
                                                                .values()),
            "plan": plan.splitlines()[1]}


def pydata_einsum(client: Any, case: dict[str, Any], blocks: int, timeout: float
                  ) -> dict[str, Any]:
    """dask's own einsum on pydata ``sparse.COO`` chunks (the reason, when it fails or takes
    longer than ``timeout`` seconds)."""
    try:
        import dask.array as da
        import sparse as pydata
    except ImportError as err:
        return {"error": f"not installed: {err}"}
    sparse_operand, *dense = case["operands"]
    try:
        if isinstance(sparse_operand, ta.Tensor):
            coords, values = sparse_operand.to_coords()
            coo = pydata.COO(coords.T, values, shape=sparse_operand.shape)
        else:
            coo = pydata.COO.from_scipy_sparse(sparse_operand)
        rows = max(1, sparse_operand.shape[0] // blocks)
        chunked = client.persist(da.from_array(coo, chunks=(rows,) + tuple(
            -1 for _ in sparse_operand.shape[1:]), asarray=False))
        dense_d = [client.persist(da.from_array(d, chunks=d.shape)) for d in dense]
        client.replicate(dense_d)
        begin = time.perf_counter()
        result = client.persist(da.einsum(case["subscripts"], chunked, *dense_d))
        import distributed

        try:
            distributed.wait(result, timeout=timeout)
        except TimeoutError:
            client.cancel(result)
            return {"blocks": blocks, "error": f"not done after {timeout:.0f} s"}
        return {"blocks": blocks, "compute_s": time.perf_counter() - begin}
    except Exception as err:  # noqa: BLE001 - recorded: where dask's own einsum cannot run
        return {"blocks": blocks, "error": f"{type(err).__name__}: {str(err)[:200]}"}


def capped_spmm(nnz: int, seed: int) -> dict[str, Any]:
    """SpMM on two workers each given half the sparse operand's bytes, the operand generated
    block by block on the workers."""
    import dask.array as da
    import distributed
    from dask.highlevelgraph import HighLevelGraph

    # 100 entries per row: fewer rows, so a smaller dense operand beside the sparse one
    per_row, rows = 100, max(1, nnz // 100)
    operand_bytes = nnz * (8 + 4) + (rows + 1) * 8
    limit = operand_bytes // 2
    blocks = 64
    edges = np.linspace(0, rows, blocks + 1).astype(np.int64)
    name = "capped-operand"
    layer = {(name, b, 0): (row_block, int(edges[b]), int(edges[b + 1]), rows, per_row, seed)
             for b in range(blocks)}
    A = da.Array(HighLevelGraph.from_collections(name, layer, dependencies=[]), name,
                 (tuple(int(n) for n in np.diff(edges)), (rows,)),
                 meta=sp.csr_array((0, 0)))
    # four columns: the dense operand (every worker holds all of it) stays small beside A's half
    X = np.random.default_rng(seed).random((rows, 4))
    out: dict[str, Any] = {"nnz": nnz, "operand_bytes": operand_bytes,
                           "memory_limit_per_worker": limit, "workers": 2, "blocks": blocks}
    import dask

    # no pausing (a paused worker over its limit would wait forever): the nanny's restart at
    # 95% of the limit is the cap that counts
    with dask.config.set({"distributed.worker.memory.pause": False,
                          "distributed.scheduler.active-memory-manager.start": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     dashboard_address=None, memory_limit=limit) as cluster, \
            distributed.Client(cluster) as client:
        begin = time.perf_counter()
        try:
            # the product's row sums: a small result, so the client holds little either
            y = ta.einsum("ij,jk->i", A, X)      # X: broadcast to both workers
            total = float(client.compute(y.sum()).result(timeout=900))
            out.update(completed=True, seconds=time.perf_counter() - begin, checksum=total)
        except Exception as err:  # noqa: BLE001 - the record says why it did not complete
            out.update(completed=False, error=f"{type(err).__name__}: {str(err)[:300]}")
        out["peak_rss_per_worker"] = sorted(client.run(_peak_rss_bytes).values())
    if out.get("completed"):        # the same sum here, one generated block at a time
        row_sums = X.sum(axis=1)
        expected = sum(float((row_block(int(edges[b]), int(edges[b + 1]), rows, per_row, seed)
                              @ row_sums).sum()) for b in range(blocks))
        out["matches_one_process"] = bool(np.isclose(out["checksum"], expected, rtol=1e-9))
    return out


def interleaved(nnz: int, seed: int, rounds: int, blocks: int, memory_limit: str
                ) -> dict[str, Any]:
    """SpMM one thread in this process and on two workers, alternately (``rounds`` each), so
    that the load of a shared machine weighs on both alike; the ratio of the medians."""
    import dask.array as da
    import distributed

    A = spmm_matrix(nnz, seed)
    X = np.random.default_rng(seed + 1).random((A.shape[1], RANK))
    ta.set_num_threads(1)
    ta.einsum("ij,jk->ik", A, X)
    here, there = [], []
    with cluster_of(2, memory_limit) as client:
        chunked = client.persist(ta.dask.from_scipy(A, chunks=blocks))
        dX = client.persist(da.from_array(X, chunks=X.shape))
        distributed.wait([chunked, dX])
        client.replicate(dX)

        def run() -> None:
            distributed.wait(client.persist(ta.einsum("ij,jk->ik", chunked, dX)), timeout=600)

        for _ in range(2):
            run()                                  # kernels loaded on both workers
        for _ in range(rounds):
            here.append(best_of(1, lambda: ta.einsum("ij,jk->ik", A, X)))
            there.append(best_of(1, run))
    one, two = float(np.median(here)), float(np.median(there))
    return {"nnz": int(A.nnz), "blocks": blocks, "rounds": rounds, "one_thread_s": here,
            "two_workers_s": there, "speedup_of_medians": one / two}


# -- the cases -----------------------------------------------------------------------------


def cases(nnz: int, seed: int, names: list[str]) -> Iterator[dict[str, Any]]:
    """The inputs of each case in ``names``, built one case at a time (at 1e8 nonzeros the
    SpMM and MTTKRP operands together would not fit beside the workers on a 24 GiB machine)."""
    if "SpMM" in names:
        A = spmm_matrix(nnz, seed)
        X = np.random.default_rng(seed + 1).random((A.shape[1], RANK))
        yield {"name": "SpMM", "subscripts": "ij,jk->ik", "operands": [A, X],
               "nnz": int(A.nnz), "chunk": lambda a, b: ta.dask.from_scipy(a, chunks=b)}
        del A, X
    if "MTTKRP" in names:
        T = mttkrp_tensor(nnz, seed + 2)
        B = np.random.default_rng(seed + 3).random((T.shape[1], RANK))
        C = np.random.default_rng(seed + 4).random((T.shape[2], RANK))
        yield {"name": "MTTKRP", "subscripts": "ijk,jl,kl->il", "operands": [T, B, C],
               "nnz": int(T.nnz), "chunk": lambda t, b: ta.dask.from_tensor(t, chunks=b)}


@contextlib.contextmanager
def cluster_of(workers: int, memory_limit: str) -> Iterator[Any]:
    """A client of a fresh LocalCluster: fresh worker processes for every configuration, so
    each peak memory is its own (Client.restart, tried first, left workers behind here). The
    active memory manager is off: it drops the replicas of the broadcast operands between
    runs, after which the scheduler runs every task on the one worker left holding them."""
    import dask
    import distributed

    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}), \
            distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                     dashboard_address=None,
                                     memory_limit=memory_limit) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def measure(args: argparse.Namespace, partial: Path | None = None) -> dict[str, Any]:
    """Every measurement ``args`` asks for; the finished rows are also written to ``partial``
    as they come."""
    runs = []
    for nnz in [] if args.capped_only or args.interleave_only else args.nnz:
        for case in cases(int(nnz), args.seed, args.cases):
            print(f"{case['name']} nnz={case['nnz']:.3g}", flush=True)
            row: dict[str, Any] = {"case": case["name"], "nnz": case["nnz"],
                                   "single": single_process(case, args.repeats), "dask": [],
                                   "pydata": []}
            print("  one process:", json.dumps(row["single"]), flush=True)
            for workers in args.workers:
                for blocks in args.blocks:
                    with cluster_of(workers, args.memory_limit) as client:
                        found = on_cluster(client, case, blocks, args.repeats)
                    found["workers"] = workers
                    row["dask"].append(found)
                    print("  ", json.dumps({k: v for k, v in found.items() if k != "plan"}),
                          flush=True)
            if args.pydata and case["nnz"] > args.pydata_max_nnz:
                row["pydata"].append({"workers": max(args.workers), "blocks": max(args.blocks),
                                      "error": f"not run above {args.pydata_max_nnz:.0e} "
                                               f"nonzeros (--pydata-max-nnz)"})
            elif args.pydata:                 # slow: once, on the most workers
                with cluster_of(max(args.workers), args.memory_limit) as client:
                    found = pydata_einsum(client, case, max(args.blocks), args.pydata_timeout)
                found["workers"] = max(args.workers)
                row["pydata"].append(found)
                print("   pydata:", json.dumps(found), flush=True)
            runs.append(row)
            del case                          # its operands go before the next case is built
            if partial is not None:           # a later case killed for memory loses nothing
                partial.write_text(json.dumps({"runs": runs}, indent=1), encoding="utf-8")
    capped = [capped_spmm(int(n), args.seed) for n in args.nnz] \
        if args.capped or args.capped_only else []
    for found in capped:
        print("capped:", json.dumps(found), flush=True)
    from importlib import metadata

    alternating = [interleaved(int(args.nnz[0]), args.seed, args.interleave, 4,
                               args.memory_limit)] if args.interleave else []
    for found in alternating:
        print("interleaved:", json.dumps(found), flush=True)

    return {"runs": runs, "capped": capped, "interleaved": alternating,
            "repeats": args.repeats,
            "dask_versions": {n: metadata.version(n) for n in ("dask", "distributed")},
            "memory_limit": args.memory_limit, "rank": RANK}


# -- the report ----------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f}"


def _measured(result: dict[str, Any]) -> str:
    machine = result.get("machine", {})
    return (f"Measured {result.get('date', '?')} at commit "
            f"{result.get('git', {}).get('short', '?')} on {machine.get('cpu_model', '?')} "
            f"({machine.get('cores', '?')} cores, shared with other work: times are noisy), "
            f"`{result.get('command', '')}`.")


def render(result: dict[str, Any], capped: dict[str, Any] | None = None) -> str:
    """The Markdown of ``DASK_RESULTS.md``: the runs of ``result`` and the memory-capped runs
    of ``capped`` (default: those of ``result``)."""
    mib = _mib
    lines = ["# tensoralg on Dask: SpMM and MTTKRP, blockwise", "",
             "`benchmarks/dask_scale.py` wrote this from its JSON results; its docstring says "
             "what each column measures. Speed-up: single-threaded one-process `ta.einsum` "
             "time / dask compute time (result left on the workers).", ""]
    if result.get("runs"):
        lines += [_measured(result), ""]
    for row in result.get("runs", []):
        single = row["single"]
        lines += [f"## {row['case']}, {row['nnz']:.3g} nonzeros", "",
                  f"One process: {single['one_thread_s']:.3f} s on one thread, "
                  f"{single['all_cores_s']:.3f} s on every core.", "",
                  "| workers | blocks | compute s | speed-up | first run s | with gather s "
                  "| MiB moved | peak MiB per worker |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for d in row["dask"]:
            lines.append(
                f"| {d['workers']} | {d['blocks']} | {d['compute_s']:.3f} | "
                f"{single['one_thread_s'] / d['compute_s']:.2f}x | {d['first_s']:.3f} | "
                f"{d['gather_s']:.3f} | {mib(d['bytes_moved'])} | "
                f"{', '.join(mib(p) for p in d['peak_rss_per_worker'])} |")
        for p in row["pydata"]:
            what = f"{p['compute_s']:.3f} s" if "compute_s" in p else f"did not run: " \
                f"{p['error']}"
            lines.append(f"\ndask's own `da.einsum` on pydata `sparse.COO` chunks, "
                         f"{p['workers']} worker(s), {p.get('blocks')} blocks: {what}")
        lines.append("")
    for block in result.get("interleaved", []):
        lines += [f"## SpMM alternating one thread here and two workers "
                  f"({block['nnz']:.3g} nonzeros, {block['blocks']} blocks)", "",
                  _measured(result), "",
                  f"{block['rounds']} rounds: one thread "
                  f"{', '.join(f'{t:.3f}' for t in block['one_thread_s'])} s; two workers "
                  f"{', '.join(f'{t:.3f}' for t in block['two_workers_s'])} s; speed-up of "
                  f"the medians **{block['speedup_of_medians']:.2f}x** (goal: 1.6x).", ""]
    capped = capped if capped is not None else result
    if capped.get("capped"):
        lines += [_measured(capped), ""]
    for c in capped.get("capped", []):
        state = f"completed in {c['seconds']:.1f} s (its sum " + \
            ("matches" if c.get("matches_one_process") else "does NOT match") + \
            " the same sum computed here block by block)" if c.get("completed") else \
            f"did not complete ({c.get('error')})"
        lines += [f"## An operand twice one worker's memory ({c['nnz']:.3g} nonzeros)", "",
                  f"SpMM (4 columns, the result's row sums) on {c['workers']} workers, each with memory_limit "
                  f"{mib(c['memory_limit_per_worker'])} MiB, the operand "
                  f"{mib(c['operand_bytes'])} MiB generated in {c['blocks']} blocks on the "
                  f"workers: {state}; peak per worker "
                  f"{', '.join(mib(p) for p in c['peak_rss_per_worker'])} MiB.", ""]
    return "\n".join(lines)


def latest(key: str) -> dict[str, Any] | None:
    """The newest result file in ``benchmarks/results`` whose ``key`` list is not empty."""
    found = None
    for file in sorted(record.RESULTS.glob("dask_scale-*.json")):
        result = json.loads(file.read_text(encoding="utf-8"))
        if result.get(key):
            found = result
    return found


def write_markdown(path: Path = MARKDOWN) -> Path:
    """``DASK_RESULTS.md`` from the newest full run and the newest memory-capped run."""
    runs, capped, alternating = latest("runs"), latest("capped"), latest("interleaved")
    if runs is None and capped is None and alternating is None:
        raise SystemExit("no dask_scale result in benchmarks/results yet")
    text = render(runs or {}, capped or {})
    if alternating is not None and (runs is None or alternating["date"] != runs["date"]):
        text += "\n" + render({"interleaved": alternating["interleaved"], **{
            k: alternating[k] for k in ("date", "git", "machine", "command")}}, {}).split(
                "\n", 4)[4]
    path.write_text(text + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nnz", type=float, nargs="+", default=[1e7])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--blocks", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--memory-limit", default="4GiB", help="per worker")
    parser.add_argument("--capped", action="store_true",
                        help="also run SpMM with workers given half the operand's bytes")
    parser.add_argument("--interleave", type=int, default=0, metavar="ROUNDS",
                        help="also time SpMM one thread here and on two workers alternately")
    parser.add_argument("--interleave-only", action="store_true")
    parser.add_argument("--capped-only", action="store_true",
                        help="run only that (it needs ~1e8 nonzeros to mean something)")
    parser.add_argument("--no-pydata", dest="pydata", action="store_false")
    parser.add_argument("--pydata-timeout", type=float, default=120.0)
    parser.add_argument("--pydata-max-nnz", type=float, default=2e7,
                        help="skip dask's own sparse einsum above this many nonzeros")
    parser.add_argument("--cases", nargs="+", default=["SpMM", "MTTKRP"],
                        choices=["SpMM", "MTTKRP"])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--render", action="store_true",
                        help="only write DASK_RESULTS.md from the newest result files")
    args = parser.parse_args(argv)
    os.environ.setdefault("TENSORALG_NUM_THREADS", "1")   # workers inherit it: one thread each
    if args.render:
        print(write_markdown())
        return
    begun = record.start()
    partial = Path(tempfile.gettempdir()) / f"tensoralg-dask_scale-partial-{os.getpid()}.json"
    print(f"finished rows also go to {partial} until the run ends", flush=True)
    payload = measure(args, partial)
    partial.unlink(missing_ok=True)
    path = record.write("dask_scale", payload, begun, out=args.out) if args.out else \
        record.write("dask_scale", payload, begun)
    print(path)
    if args.out is None:
        print(write_markdown())


if __name__ == "__main__":
    main()
