#!/usr/bin/env python
"""Measure tensoralg's fixed costs: per-call overhead, first call, einsum route, dense GEMM.

    python benchmarks/overhead.py [--quick] [--only dispatch,first_call,routes,gemm]
                                  [--threads N] [--processes 5] [--seed 0] [--out FILE.json]

The raw results (every sample, the machine, the versions, the commit) go to
``benchmarks/results/overhead-<YYYYMMDD-HHMMSS>-<commit>.json`` (or ``--out``);
``python benchmarks/report.py`` renders them into ``RESULTS.md``, after the kernel tables,
with a table of targets.

Four parts, each checked against a reference before it is timed:

- ``dispatch``: a repeated SpMV on a 100x100 CSR matrix (density 5%, float64): scipy's
  ``A @ x``; ``ta.einsum("ij,j->i", A, x)``; a compiled kernel ``k(A=A, x=x)`` with
  ``k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})``; and the bound call
  ``k.bind(A=A, x=x)()``. Each as a time per call and as a multiple of scipy's.
- ``first_call``: ``ta.compile`` + the first call of a new kernel (parse, lower, LLVM, run) for
  SpMV, SpMM (16 dense columns), SDDMM, SpGEMM, sparse add, MTTKRP (CSF 3-tensor) and a dense
  GEMM-shaped statement, on small operands. Each time is taken in a **new Python process** with
  a **new, empty** ``TENSORALG_CACHE_DIR``, with ``time.perf_counter`` around ``ta.compile`` and
  the first call only (not the imports, not building the operands); ``--processes`` processes
  per kernel. A new kernel's first call runs code LLVM emitted unoptimised while its
  optimised build is made on a background thread (``tensoralg/codegen/tiered.py``): each
  process also records when the optimised code is in place (``ta.wait_for_optimised()`` after
  the first call, from the same start). Then the disk-cache hit: one process compiles every kernel into a shared cache
  directory, a second reads them back (which links each cached LLVM kernel into a shared object
  in a background thread; the process waits for those threads), and each timed process after
  them finds the kernel and its shared object on disk. The children run with Python's bytecode
  of tensoralg and llvmlite compiled first and ``PYTHONDONTWRITEBYTECODE`` unset, as an
  installed package is imported: with that variable set (as on some CI images) every new
  process compiles the modules a first call imports lazily from source, 30 ms or more here.
- ``routes``: the same kernels called through ``ta.einsum`` and through a ``ta.compile``
  kernel, repeatedly: SpMV and SDDMM (rank-32 dense factors, CSR result) on a 2e4 x 2e4 CSR
  matrix with 4e5 nonzeros, MTTKRP (rank 32, dense result) on a CSF 3-tensor.
- ``gemm``: dense ``ta.einsum("ik,kj->ij", A, B)`` (its default route, BLAS, and the generated
  GEMM by ``schedule="gemm(generated)"``) against NumPy's ``A @ B`` at 1024^3 and
  256^3, float64 and float32.

Timing (``dispatch``, ``routes``, ``gemm``): the functions compared are sampled in turn, sample
by sample, so that a drift of the machine's speed affects each alike. A sample is the mean time
per call over ``number`` back-to-back calls (``time.perf_counter``, garbage collector off, after
a warm-up call), ``number`` chosen so that the samples fill about the budget; slow calls are
timed alone. The JSON keeps every sample.

``--threads N`` (default: all cores, tensoralg's own default) gives tensoralg (and the child
processes, through ``TENSORALG_NUM_THREADS``) and NumPy's BLAS (threadpoolctl) ``N`` threads.
The result file records the BLAS thread pools, with the kernel OpenBLAS chose
(``architecture``). This script does not change ``OPENBLAS_CORETYPE`` or ``OPENBLAS_L2_SIZE``;
the result file records both (see ``benchmarks/README.md``).
"""
from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A fresh, private kernel cache for this process, set before tensoralg is imported.
_CACHE_DIR = tempfile.mkdtemp(prefix="tensoralg-overhead-cache-")
os.environ["TENSORALG_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

import numpy as np  # noqa: E402
import record  # noqa: E402  (benchmarks/record.py: machine, versions, commit, file name)
import scipy.sparse as sp  # noqa: E402

import tensoralg as ta  # noqa: E402

PARTS = ("dispatch", "first_call", "routes", "gemm")
SAMPLES, MIN_SAMPLES = 15, 5
RANK = 32                   # routes: rank of the SDDMM and MTTKRP factors
FULL = {
    "budget_s": 0.2, "gemm_budget_s": 0.6, "processes": 5,
    "routes_matrix": (20000, 400000), "routes_tensor": ((2000, 1000, 500), 400000),
    "gemm": [(1024, "float64"), (1024, "float32"), (256, "float64"), (256, "float32")],
}
QUICK = {
    "budget_s": 0.05, "gemm_budget_s": 0.1, "processes": 2,
    "routes_matrix": (2000, 20000), "routes_tensor": ((200, 100, 50), 20000),
    "gemm": [(256, "float64"), (256, "float32"), (64, "float64")],
}
# first_call: small operands (100x100 CSR at 5%, 16 dense columns, a 30^3 tensor, 64^3 GEMM)
FIRST_CALL = {
    "spmv": ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
    "spmm": ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
    "sddmm": ("Z(i,j) = A(i,j) * X(i,k) * Y(k,j)", {"A": "csr", "Z": "csr"}),
    "spgemm": ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"}),
    "add": ("C(i,j) = A(i,j) + B(i,j)", {"A": "csr", "B": "csr", "C": "csr"}),
    "mttkrp": ("M(i,r) = T(i,j,k) * C(j,r) * D(k,r)", {"T": "sss", "M": "dense"}),
    "gemm": ("C(i,j) = A(i,k) * B(k,j)", {}),
}
FIRST_CALL_SIZES = {"n": 100, "density": 0.05, "columns": 16, "tensor": 30,
                    "tensor_nnz": 800, "gemm": 64}


# ---------------------------------------------------------------------------------------------
# timing


def measure_together(fns, budget, samples=SAMPLES, min_samples=MIN_SAMPLES):
    """Samples of the seconds per call of each of ``fns`` (a dict; each already warmed up).

    The functions are sampled in turn: sample 1 of each, then sample 2 of each, ... Each sample
    is the mean of ``number`` back-to-back calls, ``number`` chosen per function so that
    ``samples`` samples fill about ``budget`` seconds; a function slower than that is timed
    alone, and then every function gets ``min_samples`` to ``samples`` samples.
    """
    ta.wait_for_optimised()   # time the optimised kernels, not their quick first builds
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        numbers, count = {}, samples
        for name, fn in fns.items():
            probes = []                 # the fastest of up to 3 calls sizes the samples
            while len(probes) < 3 and sum(probes) < budget:
                t0 = time.perf_counter()
                fn()
                probes.append(time.perf_counter() - t0)
            probe = max(min(probes), 1e-7)
            numbers[name] = max(1, int(budget / (samples * probe)))
            if numbers[name] == 1:
                count = min(count, max(min_samples, int(budget / probe)))
        times = {name: [] for name in fns}
        for _ in range(count):
            for name, fn in fns.items():
                number = numbers[name]
                t0 = time.perf_counter()
                for _ in range(number):
                    fn()
                times[name].append((time.perf_counter() - t0) / number)
    finally:
        if enabled:
            gc.enable()
    return {name: {"number": numbers[name], "times": record.rounded(times[name])}
            for name in fns}


def med(sample):
    return statistics.median(sample["times"])


def fmt_time(t):
    return record.format_time(t, micro_digits=2)


def csr(n, nnz_or_density, seed, cols=None):
    """A canonical float64 CSR array with int32 indices (scipy.sparse.random_array)."""
    cols = n if cols is None else cols
    density = nnz_or_density if nnz_or_density < 1 else nnz_or_density / (n * cols)
    A = sp.random_array((n, cols), density=density, format="csr", dtype=np.float64,
                        random_state=seed)
    A.sum_duplicates()
    A.sort_indices()
    A.indices = A.indices.astype(np.int32)
    A.indptr = A.indptr.astype(np.int32)
    return A


def csf(shape, nnz, rng):
    """A CSF (``"sss"``) tensor with about ``nnz`` random nonzeros, and its coordinates."""
    linear = np.unique(rng.integers(0, int(np.prod(shape)), nnz))
    coords = np.array(np.unravel_index(linear, shape))
    vals = rng.random(len(linear))
    return ta.Tensor.from_coords(coords, vals, shape, format="sss"), coords, vals


# ---------------------------------------------------------------------------------------------
# a. per-call cost of a small SpMV


def dispatch(cfg, seed):
    A = csr(100, 0.05, seed)
    x = np.random.default_rng(seed).random(100)
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
    bound = k.bind(A=A, x=x)
    calls = {"scipy": lambda: A @ x, "einsum": lambda: ta.einsum("ij,j->i", A, x),
             "kernel": lambda: k(A=A, x=x), "bound": bound}
    ref = A @ x
    wrong = [name for name, fn in calls.items() if not np.allclose(fn(), ref)]
    out = {"shape": list(A.shape), "nnz": int(A.nnz), "density": 0.05,
           "status": "ok" if not wrong else "WRONG " + ", ".join(wrong)}
    out["samples"] = measure_together(calls, cfg["budget_s"])
    return out


# ---------------------------------------------------------------------------------------------
# b. first call of a new kernel, in new processes

_CHILD = r"""
import json, os, sys, threading, time
spec = json.loads(sys.argv[1])
t0 = time.perf_counter()
import numpy as np, scipy.sparse as sp
import tensoralg as ta
from tensoralg.api import kernel_cache
import_s = time.perf_counter() - t0
size = spec["sizes"]
n, d, r = size["n"], size["density"], size["columns"]


def csr(seed):
    A = sp.random_array((n, n), density=d, format="csr", dtype=np.float64, random_state=seed)
    A.sum_duplicates(); A.sort_indices()
    A.indices = A.indices.astype(np.int32); A.indptr = A.indptr.astype(np.int32)
    return A


def operands(kernel):
    rng = np.random.default_rng(spec["seed"])      # the same operands in every process
    A, B = csr(spec["seed"]), csr(spec["seed"] + 1)
    if kernel == "spmv":
        x = rng.random(n)
        return {"A": A, "x": x}, A @ x
    if kernel == "spmm":
        D = rng.random((n, r))
        return {"A": A, "B": D}, A @ D
    if kernel == "sddmm":
        X, Y = rng.random((n, r)), rng.random((r, n))
        return {"A": A, "X": X, "Y": Y}, A.toarray() * (X @ Y)
    if kernel == "spgemm":
        return {"A": A, "B": B}, (A @ B).toarray()
    if kernel == "add":
        return {"A": A, "B": B}, (A + B).toarray()
    if kernel == "mttkrp":
        m = size["tensor"]
        linear = np.unique(rng.integers(0, m ** 3, size["tensor_nnz"]))
        coords = np.array(np.unravel_index(linear, (m, m, m)))
        vals = rng.random(len(linear))
        T = ta.Tensor.from_coords(coords, vals, (m, m, m), format="sss")
        C, D = rng.random((m, r)), rng.random((m, r))
        dense = np.zeros((m, m, m)); dense[tuple(coords)] = vals
        return {"T": T, "C": C, "D": D}, np.einsum("ijk,jr,kr->ir", dense, C, D)
    g = size["gemm"]
    G, H = rng.random((g, g)), rng.random((g, g))
    return {"A": G, "B": H}, G @ H


def dense(value):
    if hasattr(value, "toarray"):
        return value.toarray()
    if isinstance(value, ta.Tensor):
        return value.to_numpy()
    return np.asarray(value)


results = {}
for kernel in spec["kernels"]:
    statement, formats = spec["statements"][kernel]
    ops, ref = operands(kernel)
    before, llvm_before = kernel_cache().compiles, "llvmlite" in sys.modules
    t0 = time.perf_counter()
    k = ta.compile(statement, formats=formats)
    out = k(**ops)
    t1 = time.perf_counter()
    ta.wait_for_optimised()
    t2 = time.perf_counter()
    results[kernel] = {"first_call_s": t1 - t0, "optimised_s": t2 - t0,
                       "compiles": kernel_cache().compiles - before,
                       "llvm_loaded": "llvmlite" in sys.modules and not llvm_before,
                       "ok": bool(np.allclose(dense(out), ref))}
if spec["wait_link"]:
    for thread in threading.enumerate():
        if thread.name == "tensoralg-link":
            thread.join(60)
print(json.dumps({"import_s": import_s, "kernels": results,
                  "linked": sum(1 for e in os.scandir(os.environ["TENSORALG_CACHE_DIR"])
                                if e.name.startswith("llvm-so-"))}))
"""


def compile_bytecode():
    """Compile tensoralg's and llvmlite's modules to bytecode, as installing them does (a first
    call imports the code generator lazily; see the module docstring)."""
    import compileall

    import llvmlite

    import tensoralg

    for package in (tensoralg, llvmlite):
        compileall.compile_dir(os.path.dirname(package.__file__), quiet=1)


def child(kernels, directory, seed, threads, wait_link=False):
    """Run ``_CHILD`` in a new process on ``directory``; its JSON line, or ``{"error": ...}``."""
    spec = {"kernels": kernels, "seed": seed, "sizes": FIRST_CALL_SIZES,
            "statements": {k: FIRST_CALL[k] for k in kernels}, "wait_link": wait_link}
    env = dict(os.environ, TENSORALG_CACHE_DIR=str(directory),
               TENSORALG_NUM_THREADS=str(threads))
    env.pop("PYTHONDONTWRITEBYTECODE", None)     # imports as an installed package's do
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], env=env,
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 600 s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit status "
                                                               f"{proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def one(result, kernel):
    """The per-process record of ``kernel`` from a child's result."""
    if "error" in result:
        return {"error": result["error"]}
    return {"import_s": result["import_s"], **result["kernels"][kernel]}


def first_calls(cfg, seed, threads):
    processes = cfg["processes"]
    kernels = list(FIRST_CALL)
    out = {"processes": processes, "sizes": FIRST_CALL_SIZES,
           "kernels": {k: {"statement": FIRST_CALL[k][0], "formats": FIRST_CALL[k][1],
                           "cold": [], "hit": []} for k in kernels}}
    compile_bytecode()
    temporary = Path(tempfile.mkdtemp(prefix="tensoralg-overhead-children-"))
    atexit.register(shutil.rmtree, temporary, True)
    # new process, new empty cache: one kernel per process, the kernels in turn
    for p in range(processes):
        for kernel in kernels:
            directory = temporary / f"cold-{kernel}-{p}"
            result = one(child([kernel], directory, seed, threads), kernel)
            out["kernels"][kernel]["cold"].append(result)
            print(f"  new cache   {kernel:7s} {describe(result)}", flush=True)
            shutil.rmtree(directory, ignore_errors=True)
    # a cache that holds every kernel and its shared object: compile, read back + link, time
    shared = temporary / "shared"
    warm = [child(kernels, shared, seed, threads),
            child(kernels, shared, seed, threads, wait_link=True)]
    out["warm"] = [{"error": w["error"]} if "error" in w else
                   {"compiles": sum(r["compiles"] for r in w["kernels"].values()),
                    "linked": w["linked"]} for w in warm]
    print(f"  cache warmed by two processes: {out['warm']}", flush=True)
    for p in range(processes):
        for kernel in kernels:
            result = one(child([kernel], shared, seed, threads), kernel)
            out["kernels"][kernel]["hit"].append(result)
            print(f"  cache hit   {kernel:7s} {describe(result)}", flush=True)
    return out


def describe(result):
    if "error" in result:
        return f"error: {result['error']}"
    return (f"first call {fmt_time(result['first_call_s']):>9s}  compiled "
            f"{result['compiles']}  LLVM loaded {result['llvm_loaded']}"
            + ("" if result["ok"] else "  WRONG"))


# ---------------------------------------------------------------------------------------------
# c. einsum route against the compiled-kernel route


def routes(cfg, seed):
    rng = np.random.default_rng(seed)
    n, nnz = cfg["routes_matrix"]
    A = csr(n, nnz, seed)
    x = rng.random(n)
    X, Y = rng.random((n, RANK)), rng.random((RANK, n))
    shape, tensor_nnz = cfg["routes_tensor"]
    T, coords, vals = csf(shape, tensor_nnz, rng)
    C, D = rng.random((shape[1], RANK)), rng.random((shape[2], RANK))
    unfolded = sp.csr_array((vals, (coords[0], coords[1] * shape[2] + coords[2])),
                            shape=(shape[0], shape[1] * shape[2]))
    rows = np.repeat(np.arange(n), np.diff(A.indptr))
    sddmm_ref = A.data * np.einsum("ij,ij->i", X[rows], Y.T[A.indices])
    cases = [
        ("spmv", A, "ij,j->i", (A, x), {}, "y(i) = A(i,j) * x(j)", {"A": "csr"},
         {"A": A, "x": x}, A @ x),
        ("sddmm", A, "ij,ik,kj->ij", (A, X, Y), {}, "Z(i,j) = A(i,j) * X(i,k) * Y(k,j)",
         {"A": "csr", "Z": "csr"}, {"A": A, "X": X, "Y": Y}, sddmm_ref),
        ("mttkrp", T, "ijk,jr,kr->ir", (T, C, D), {"out_format": "dense"},
         "M(i,r) = T(i,j,k) * C(j,r) * D(k,r)", {"T": "sss", "M": "dense"},
         {"T": T, "C": C, "D": D},
         unfolded @ (C[:, None, :] * D[None, :, :]).reshape(-1, RANK)),
    ]
    out = []
    for name, data, subscripts, args, kwargs, statement, formats, ops, ref in cases:
        k = ta.compile(statement, formats=formats)
        fns = {"einsum": lambda s=subscripts, a=args, kw=kwargs: ta.einsum(s, *a, **kw),
               "compiled": lambda k=k, o=ops: k(**o)}
        wrong = [route for route, fn in fns.items() if not agrees(fn(), ref)]
        row = {"kernel": name, "subscripts": subscripts, "statement": statement,
               "formats": formats, "shape": list(data.shape), "nnz": int(data.nnz),
               "rank": None if name == "spmv" else RANK,
               "status": "ok" if not wrong else "WRONG " + ", ".join(wrong)}
        row.update(measure_together(fns, cfg["budget_s"]))
        out.append(row)
        print(f"  {name:7s} einsum {fmt_time(med(row['einsum'])):>9s}  compiled "
              f"{fmt_time(med(row['compiled'])):>9s}  einsum/compiled "
              f"{med(row['einsum']) / med(row['compiled']):.3f}  [{row['status']}]", flush=True)
    return out


def agrees(result, ref):
    """``np.allclose`` of a result (dense, or CSR against the reference's values) and ``ref``."""
    if sp.issparse(result):
        return result.nnz == len(ref) and bool(np.allclose(result.data, ref))
    return bool(np.allclose(np.asarray(result), ref))


# ---------------------------------------------------------------------------------------------
# d. dense GEMM against NumPy


def gemm(cfg, seed):
    rng = np.random.default_rng(seed)
    out = []
    for n, dtype in cfg["gemm"]:
        A = rng.random((n, n)).astype(dtype)
        B = rng.random((n, n)).astype(dtype)
        # tensoralg: the default route (BLAS for products this size, lower/gemm_form.py);
        # generated: tensoralg's own register-tiled GEMM, the gap the BLAS dispatch hides.
        fns = {"tensoralg": lambda A=A, B=B: ta.einsum("ik,kj->ij", A, B),
               "generated": lambda A=A, B=B: ta.einsum("ik,kj->ij", A, B,
                                                        schedule="gemm(generated)"),
               "numpy": lambda A=A, B=B: A @ B}
        tol = 1e-4 if dtype == "float32" else 1e-10
        ok = all(ours.dtype == np.dtype(dtype) and np.allclose(ours, A @ B, rtol=tol, atol=0)
                 for ours in (fns["tensoralg"](), fns["generated"]()))
        row = {"n": n, "dtype": dtype, "status": "ok" if ok else "WRONG"}
        row.update(measure_together(fns, cfg["gemm_budget_s"]))
        out.append(row)
        flops = 2.0 * n ** 3
        print(f"  {n}^3 {dtype:7s} tensoralg {fmt_time(med(row['tensoralg'])):>9s} "
              f"({flops / med(row['tensoralg']) / 1e9:.1f} GFLOP/s)  generated "
              f"{fmt_time(med(row['generated'])):>9s}  numpy "
              f"{fmt_time(med(row['numpy'])):>9s} ({flops / med(row['numpy']) / 1e9:.1f} "
              f"GFLOP/s)  tensoralg/numpy {med(row['tensoralg']) / med(row['numpy']):.3f}"
              f"  [{row['status']}]", flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# main


def set_threads(count):
    """tensoralg and NumPy's BLAS get ``count`` threads; return what each reports."""
    ta.set_num_threads(count)
    threads = {"requested": count, "tensoralg": ta.get_num_threads(), "scipy": 1}
    threads["blas"] = record.limit_blas_threads(count)
    return threads


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, short budgets and 2 processes per kernel (checks "
                             "that the script works; the numbers mean little)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts ({','.join(PARTS)})")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads for tensoralg and NumPy's BLAS (default: all cores)")
    parser.add_argument("--processes", type=int, default=None,
                        help="new processes per kernel for the first-call times "
                             "(default 5; 2 with --quick)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the operands (default 0)")
    parser.add_argument("--out", default=None,
                        help="write the JSON results here (default: benchmarks/results/"
                             "overhead-<date>-<commit>.json)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    cfg = dict(QUICK if args.quick else FULL)
    if args.processes is not None:
        if args.processes < 1:
            parser.error("--processes must be at least 1")
        cfg["processes"] = args.processes

    begun = record.start()
    started = time.perf_counter()
    threads = set_threads(args.threads)
    print("machine:", json.dumps(record.machine()))
    print("threads:", json.dumps(threads))
    environment = {k: v for k, v in record.environment_variables().items() if v}
    print("environment:", json.dumps(environment))
    payload = {"options": {"quick": args.quick, "only": parts}, "seed": args.seed,
               "threads": threads}
    problems = []
    if "dispatch" in parts:
        print("\na. repeated SpMV on a 100x100 CSR matrix (median per call, x scipy):")
        payload["dispatch"] = d = dispatch(cfg, args.seed)
        base = med(d["samples"]["scipy"])
        for name, sample in d["samples"].items():
            print(f"  {name:7s} {fmt_time(med(sample)):>9s}  {med(sample) / base:.2f}x")
        if d["status"] != "ok":
            problems.append(f"dispatch: {d['status']}")
    if "first_call" in parts:
        print(f"\nb. ta.compile + first call in new processes ({cfg['processes']} per kernel):")
        payload["first_call"] = f = first_calls(cfg, args.seed, args.threads)
        for kernel, entry in f["kernels"].items():
            for label in ("cold", "hit"):
                times = [r["first_call_s"] for r in entry[label] if "first_call_s" in r]
                print(f"  {kernel:7s} {label:4s} median "
                      f"{fmt_time(statistics.median(times) if times else None)}")
            bad = [r for r in entry["cold"] + entry["hit"] if "error" in r or not r["ok"]]
            if bad:
                problems.append(f"first call {kernel}: "
                                f"{bad[0].get('error') or 'WRONG'}")
    if "routes" in parts:
        print("\nc. einsum route against the compiled kernel (median per call):")
        payload["routes"] = r = routes(cfg, args.seed)
        problems += [f"routes {row['kernel']}: {row['status']}" for row in r
                     if row["status"] != "ok"]
    if "gemm" in parts:
        print("\nd. dense GEMM against NumPy (median per call):")
        payload["gemm"] = g = gemm(cfg, args.seed)
        problems += [f"gemm {row['n']} {row['dtype']}: {row['status']}" for row in g
                     if row["status"] != "ok"]
    payload["blas_threadpools"] = record.blas_threadpools()
    print("BLAS:", json.dumps(payload["blas_threadpools"]))
    elapsed = time.perf_counter() - started
    payload["method"] = {
        "budget_s": cfg["budget_s"], "gemm_budget_s": cfg["gemm_budget_s"],
        "samples": SAMPLES, "min_samples": MIN_SAMPLES,
        "sample": "mean seconds per call over `number` back-to-back calls; the functions "
                  "compared are sampled in turn",
        "processes": cfg["processes"], "routes_rank": RANK,
    }
    payload["elapsed_s"] = elapsed
    payload["problems"] = problems
    if problems:
        print("\nproblems:\n  " + "\n  ".join(problems))
    print(f"\ntotal time {elapsed:.0f} s")
    path = record.write("overhead", payload, begun, out=args.out)
    print(f"wrote {path}; render the report with: python benchmarks/report.py")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
