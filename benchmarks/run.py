#!/usr/bin/env python
"""Benchmark tensoralg against scipy.sparse, NumPy, pydata sparse, tensora, MKL and torch.sparse.

    python benchmarks/run.py [--quick] [--only spmv,spmm,...] [--matrices a,b] [--threads N]
                             [--seed 0] [--out FILE.json] [--no-probes]
    python benchmarks/run.py --generated [--dtypes float64,float32] [--only ...]

The raw results (every sample of every measurement, the machine, the versions, the commit) go
to ``benchmarks/results/run-<YYYYMMDD-HHMMSS>-<commit>.json`` (or ``--out``);
``python benchmarks/report.py`` renders ``RESULTS.md`` and its plots from the latest file.

Kernels (float64 on the real data, int32 indices):

- ``spmv``   y = A @ x                                   ``ta.einsum("ij,j->i", A, x)``
- ``spmm``   Y = A @ B, B dense with 16 columns          ``ta.einsum("ij,jk->ik", A, B)``
- ``sddmm``  Z = A * (X @ Y), rank 16                    ``ta.einsum("ij,ik,kj->ij", A, X, Y)``
- ``spgemm`` C = A @ A (square) or A @ A.T (others)      ``ta.einsum("ij,jk->ik", A, B)``
- ``add``    C = A + A.T (square) or A + A[perm] (others) ``ta.compile("C(i,j) = A(i,j) + B(i,j)")``
             (einsum cannot express a sum of operands, so this one is a precompiled kernel)
- ``mttkrp`` M = T_(1) (D kr C), rank 16, T in CSF ("sss") ``ta.einsum("ijk,jr,kr->ir", T, C, D)``
- ``ttv``    Y = T x_3 v, T in CSF, a sparse result       ``ta.einsum("ijk,k->ij", T, v)``
             (scipy: the unfolding ``T_(1,2)`` as a CSR matrix times ``v``)

``--generated`` runs the same kernels on generated inputs of fixed sizes instead, in float64
and float32 (``--dtypes``), and writes ``results/generated-<date>-<commit>.json``: a uniform and
a power-law 2e4 x 2e4 matrix with 4e5 stored values (every matrix kernel; SpMM and SDDMM with
32 dense columns), a uniform 1e6 x 1e6 matrix with 8e6 (SpMV only, with the bytes per second
it reads beside the machine's read bandwidth, measured as a multi-threaded NumPy sum over
512 MiB), and a uniform 2000^3 tensor with 1e6 (MTTKRP at rank 16 and TTV). tensora computes
in float64 only, so its column is empty for float32.

Every operand is prepared once, outside the timed region, in each library's own format: scipy
CSR (canonical, float64), pydata ``sparse.COO``, a dense ``numpy.ndarray`` (only when the dense
array has at most 2e8 elements), a tensora ``Tensor`` with the same formats as tensoralg, a
``torch.sparse_csr_tensor`` (int64 indices, torch's own) and, for MKL, the scipy CSR matrix
itself (``sparse_dot_mkl.dot_product_mkl`` builds MKL's inspector-executor handle inside each
call: the package exposes no persistent handle). For the matrices, tensoralg gets the scipy CSR
objects directly (zero-copy binding). MKL and torch are optional: when one is not installed its
column is absent and the script says so in one line.

Each tensoralg result is checked against scipy (``np.allclose`` semantics, elementwise on the
sparse difference for sparse results) after a warm-up call; a mismatch prints ``WRONG``. The
baselines are checked the same way and print ``bad`` on a mismatch (a baseline problem, not ours).
Then each function is timed in samples (``time.perf_counter``, garbage collector off): a sample
is the mean of ``number`` back-to-back calls, with ``number`` chosen so that 15 samples fill
about 0.2 s; a call slower than 0.2 s / 15 gets ``number = 1`` and 5 to 15 samples. The JSON
keeps every sample; the console and the report show the median, and the report the
interquartile range. Ratios are ``baseline median / tensoralg median``: above 1 means tensoralg
is faster.

``--threads N`` (default: all cores) sets the threads of every library that has them:
tensoralg (``ta.set_num_threads``), torch (``torch.set_num_threads``), MKL
(``mkl_set_num_threads``) and NumPy's BLAS (threadpoolctl, when installed); scipy, pydata and
tensora kernels are single-threaded.

Also measured: the first-call time of each tensoralg kernel in a fresh kernel cache (the script
points ``TENSORALG_CACHE_DIR`` at a new temporary directory before importing tensoralg, so every
kernel is compiled in this process), the cached dispatch overhead on a 4x4 CSR matrix (einsum and
a precompiled ``ta.compile`` kernel), and the first call in a *new* process that finds the kernel
in the on-disk cache.

Note: on some machines ``OPENBLAS_CORETYPE`` is set in the environment, which can slow NumPy's
BLAS calls. This script does not change it; it prints its value, and the BLAS thread pools when
``threadpoolctl`` is installed, so that results can be compared.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# A fresh, private kernel cache, set before tensoralg is imported (it reads the environment once).
_CACHE_DIR = tempfile.mkdtemp(prefix="tensoralg-bench-cache-")
os.environ["TENSORALG_CACHE_DIR"] = _CACHE_DIR
atexit.register(shutil.rmtree, _CACHE_DIR, True)

# sparse_dot_mkl finds MKL through MKL_RT or the loader's path; PyPI's ``mkl`` wheel puts
# libmkl_rt.so.N in <prefix>/lib, where neither looks.
if "MKL_RT" not in os.environ:
    for _candidate in sorted(Path(sys.prefix, "lib").glob("libmkl_rt.so*")):
        os.environ["MKL_RT"] = str(_candidate)
        break

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.io  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.data  # noqa: E402
from tensoralg.api import kernel_cache  # noqa: E402

try:
    import sparse as pydata_sparse  # noqa: E402
except ImportError:  # pragma: no cover - optional baseline
    pydata_sparse = None

try:
    import tensora  # noqa: E402
    from tensora import tensor_method  # noqa: E402
    from tensora.compile._cffi_ownership import (  # noqa: E402
        taco_structure_to_cffi,
        tensor_cdefs,
    )
except ImportError:  # pragma: no cover - optional baseline
    tensora = None

try:
    import sparse_dot_mkl  # noqa: E402
except ImportError as _err:  # pragma: no cover - optional baseline (also: no MKL runtime)
    sparse_dot_mkl = None
    _MKL_MISSING = str(_err).splitlines()[0][:160]

try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch  # noqa: E402
except ImportError:  # pragma: no cover - optional baseline
    torch = None

import record  # noqa: E402  (benchmarks/record.py: machine, versions, commit, file name)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("TENSORALG_BENCH_DATA", ROOT.parent / "shared" / "data"))
KERNELS = ("spmv", "spmm", "sddmm", "spgemm", "add", "mttkrp", "ttv")
TENSOR_KERNELS = ("mttkrp", "ttv")
BASELINES = ("scipy", "numpy", "pydata", "tensora", "mkl", "torch")
RANK = 16                  # dense columns of SpMM, rank of SDDMM and MTTKRP on the real data
# --generated: the sizes of the kernels' reference table (2e4^2 with 4e5 stored values, ...)
GENERATED_RANKS = {"spmm": 32, "sddmm": 32, "mttkrp": 16}
GENERATED_KERNELS = {"uniform-2e4": ("spmv", "spmm", "sddmm", "spgemm", "add"),
                     "power-law-2e4": ("spmv", "spmm", "sddmm", "spgemm", "add"),
                     "uniform-1e6": ("spmv",), "uniform-2000^3": ("mttkrp", "ttv")}
BANDWIDTH_INPUT = "uniform-1e6"   # the SpMV whose matrix is far larger than the caches
TOLERANCE = {"float64": (1e-5, 1e-8), "float32": (1e-4, 1e-5)}   # (rtol, atol) of the checks
DENSE_LIMIT = 2e8          # NumPy / pydata dense intermediates: skip above this many elements
DENSE_GEMM_FLOPS = 2e10    # NumPy dense A @ A: skip above this many flops (minutes per call)
BUDGET = 0.2               # seconds per measurement
SAMPLES = 15               # samples per measurement (each the mean of `number` calls) ...
MIN_SAMPLES = 5            # ... or at least this many single calls for slow functions
# FROSTT tensors: the shape to pass (collegemsg's largest mode-2 index is not its size)
TENSOR_SHAPES = {"collegemsg": (1899, 1899, 194), "wn18rr": (40943, 11, 40943)}


# ---------------------------------------------------------------------------------------------
# timing and checking


def measure(fn, budget=BUDGET):
    """Samples of the seconds per call of ``fn()`` (already warmed up).

    Returns ``{"number": n, "times": [...]}``: each time is the mean of ``n`` back-to-back calls.
    ``n`` is chosen so that ``SAMPLES`` samples fill about ``budget`` seconds; a call slower than
    ``budget / SAMPLES`` is timed alone, ``MIN_SAMPLES`` to ``SAMPLES`` times.
    """
    ta.wait_for_optimised()   # time the optimised kernels, not their quick first builds
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        probes = []                     # the fastest of up to 3 calls sizes the samples
        while len(probes) < 3 and sum(probes) < budget:
            t0 = time.perf_counter()
            fn()
            probes.append(time.perf_counter() - t0)
        probe = max(min(probes), 1e-7)
        number = max(1, int(budget / (SAMPLES * probe)))
        samples = SAMPLES if number > 1 else max(MIN_SAMPLES, min(SAMPLES, int(budget / probe)))
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            times.append((time.perf_counter() - t0) / number)
    finally:
        if enabled:
            gc.enable()
    return {"number": number, "times": record.rounded(times)}


def median_of(sample):
    """The median seconds per call of a ``measure`` result (None for a missing one)."""
    return None if sample is None else statistics.median(sample["times"])


def comparable(result):
    """A scipy CSR matrix or a numpy array for any result object."""
    if sp.issparse(result):
        return sp.csr_matrix(result)
    if isinstance(result, ta.Tensor):
        return sp.csr_matrix(result.to_scipy()) if result.ndim == 2 else result.to_numpy()
    if pydata_sparse is not None and isinstance(result, pydata_sparse.SparseArray):
        return sp.csr_matrix(result.to_scipy_sparse()) if result.ndim == 2 else result.todense()
    if isinstance(result, TensoraResult):
        return result.value
    if torch is not None and isinstance(result, torch.Tensor):
        if result.layout == torch.sparse_csr:
            return sp.csr_matrix((result.values().numpy(), result.col_indices().numpy(),
                                  result.crow_indices().numpy()), shape=tuple(result.shape))
        return result.numpy()
    return np.asarray(result)


def allclose(result, ref, rtol=1e-5, atol=1e-8, scale=None):
    """``np.allclose(result, ref)``, without densifying when both are sparse.

    ``scale`` (sparse, for products) replaces ``|ref|`` in the relative term: a product's
    rounding error is bounded by a multiple of ``|A| @ |B|``, not of ``|A @ B|``, so on an
    ill-conditioned matrix two correct results (one with FMA, one without) differ by more than
    ``rtol * |ref|`` wherever large terms cancel.
    """
    r, e = comparable(result), comparable(ref)
    if r.shape != e.shape:
        return False
    if sp.issparse(r) and sp.issparse(e):
        diff = abs(r - e) - rtol * (abs(e) if scale is None else scale)
        return diff.nnz == 0 or float(diff.max()) <= atol
    if sp.issparse(r):
        r = r.toarray()
    if sp.issparse(e):
        e = e.toarray()
    if scale is not None:
        bound = scale.toarray() if sp.issparse(scale) else np.asarray(scale)
        return bool(np.all(np.abs(r - e) <= atol + rtol * bound))
    return bool(np.allclose(r, e, rtol=rtol, atol=atol))


# ---------------------------------------------------------------------------------------------
# tensora adapters (operands are built once, outside the timed region)


class TensoraResult:
    """A tensora output read back into scipy/numpy, for checking only."""

    def __init__(self, value):
        self.value = value


def tensora_csr(A):
    return tensora.Tensor(taco_structure_to_cffi(
        [[], [A.indptr.tolist(), A.indices.tolist()]], A.data.tolist(),
        mode_types=(0, 1), dimensions=A.shape, mode_ordering=(0, 1)))


def tensora_dense(a):
    a = np.ascontiguousarray(a, dtype=np.float64)
    return tensora.Tensor(taco_structure_to_cffi(
        [[] for _ in a.shape], a.ravel().tolist(), mode_types=(0,) * a.ndim,
        dimensions=a.shape, mode_ordering=tuple(range(a.ndim))))


def tensora_csf(coords, vals, shape):
    """CSF (all levels compressed) from lexicographically sorted, unique coordinates."""
    nnz = len(vals)
    indices = []
    parent = np.zeros(nnz, dtype=np.int64)       # position of each entry's parent fiber
    nparents = 1
    for level in range(coords.shape[0]):
        key = coords[: level + 1].T
        new = np.ones(nnz, dtype=bool)
        new[1:] = np.any(key[1:] != key[:-1], axis=1)
        starts = np.flatnonzero(new)
        counts = np.bincount(parent[starts], minlength=nparents)
        pos = np.concatenate([[0], np.cumsum(counts)])
        indices.append([pos.tolist(), coords[level, starts].tolist()])
        parent = np.cumsum(new) - 1
        nparents = len(starts)
    return tensora.Tensor(taco_structure_to_cffi(
        indices, vals.tolist(), mode_types=(1,) * coords.shape[0], dimensions=shape,
        mode_ordering=tuple(range(coords.shape[0]))))


def tensora_read(out, shape, sparse_out):
    t = out.cffi_tensor
    if not sparse_out:
        n = math.prod(shape)
        return np.frombuffer(tensor_cdefs.buffer(t.vals, 8 * n), dtype=np.float64).reshape(shape)
    m = shape[0]
    pos = np.frombuffer(tensor_cdefs.buffer(t.indices[1][0], 4 * (m + 1)), dtype=np.int32)
    nnz = int(pos[-1])
    crd = np.frombuffer(tensor_cdefs.buffer(t.indices[1][1], 4 * nnz), dtype=np.int32)
    vals = np.frombuffer(tensor_cdefs.buffer(t.vals, 8 * nnz), dtype=np.float64)
    return sp.csr_matrix((vals.copy(), crd.copy(), pos.copy()), shape=shape)


_tensora_compile_times: dict[str, float] = {}


def tensora_kernel(kernel, assignment, formats):
    t0 = time.perf_counter()
    method = tensor_method(assignment, formats)
    _tensora_compile_times.setdefault(kernel, time.perf_counter() - t0)
    return method


def torch_csr(A):
    """A ``torch.sparse_csr_tensor`` sharing nothing with ``A`` (int64 indices, torch's own)."""
    return torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                   torch.from_numpy(A.indices.astype(np.int64)),
                                   torch.from_numpy(A.data.copy()), size=A.shape)


def mkl_dot(A, B):
    """``A @ B`` through sparse_dot_mkl (MKL inspector-executor; unsorted CSR when sparse)."""
    return sparse_dot_mkl.dot_product_mkl(A, B)


# ---------------------------------------------------------------------------------------------
# data


def canonical(A, dtype=np.float64):
    A = sp.csr_matrix(A, dtype=dtype)
    A.sum_duplicates()
    A.sort_indices()
    if A.indices.dtype != np.int32 and max(A.shape) < 2**31 - 1:
        A.indices = A.indices.astype(np.int32)
        A.indptr = A.indptr.astype(np.int32)
    return A


def matrix_sources(quick):
    """(name, path) of the matrices to run: bundled ones for --quick, else the shared set."""
    shared = SHARED / "matrices"
    if not quick and shared.is_dir():
        return [(p.name.removesuffix(".mtx.gz"), p) for p in sorted(shared.glob("*.mtx.gz"))]
    if not quick:
        print(f"note: {shared} not found; using the bundled matrices (as --quick)")
    return [(name, tensoralg.data.path(name)) for name, (f, _) in tensoralg.data.FILES.items()
            if f.endswith(".mtx.gz")]


def tensor_sources(quick):
    """(name, path) of the order-3 FROSTT tensors to run: every ``*.tns.gz`` of the shared
    set (as --quick, the bundled one)."""
    shared = SHARED / "tensors"
    if not quick and shared.is_dir():
        found = sorted(shared.glob("*.tns.gz"))
        if found:
            return [(p.name.removesuffix(".tns.gz"), p) for p in found]
    return [("collegemsg", tensoralg.data.path("collegemsg"))]


def load_tensor(path, shape=None):
    """A FROSTT ``.tns`` file's 1-based ``i j k value`` lines as sorted coordinates, values
    and shape (``shape``, or the largest index of each mode where the file's shape is not
    known here); None for a tensor that is not of order 3."""
    t = np.loadtxt(gzip.open(path, "rt"), dtype=np.float64, ndmin=2)
    if t.shape[1] != 4 or not len(t):
        return None
    coords = np.ascontiguousarray((t[:, :3] - 1).astype(np.int64).T)
    vals = t[:, 3].astype(np.float64)
    if shape is None:
        shape = tuple(int(m) + 1 for m in coords.max(axis=1))
    order = np.lexsort(coords[::-1])
    return coords[:, order], vals[order], shape


# ---------------------------------------------------------------------------------------------
# kernels: each returns (tensoralg function, reference function, {baseline: function or reason},
# tensoralg setup-and-first-call function for the compile measurement)


def skip(reason):
    return ("skip", reason)


def dense_or_skip(A, limit=DENSE_LIMIT):
    n = math.prod(A.shape)
    return A.toarray() if n <= limit else None


def case_spmv(A, rng, ctx):
    x = ctx.random(rng, A.shape[1])
    base = {"scipy": lambda: A @ x}
    Ad = ctx.dense(A)
    base["numpy"] = (lambda: Ad @ x) if Ad is not None else skip("dense>2e8")
    P = ctx.pydata(A)
    base["pydata"] = (lambda: P @ x) if P is not None else None
    if ctx.tensora_runs():
        f = tensora_kernel("spmv", "y(i) = A(i,j) * x(j)", {"y": "d", "A": "ds", "x": "d"})
        TA, tx = ctx.tensora(A), tensora_dense(x)
        base["tensora"] = (lambda: f(A=TA, x=tx), (A.shape[0],), False)
    base["mkl"] = lambda: mkl_dot(A, x)
    if torch is not None:
        qA, qx = ctx.torch(A), torch.from_numpy(x)
        base["torch"] = lambda: qA @ qx
    return (lambda: ta.einsum("ij,j->i", A, x, backend="llvm")), base


def case_spmm(A, rng, ctx):
    B = ctx.random(rng, (A.shape[1], ctx.ranks["spmm"]))
    base = {"scipy": lambda: A @ B}
    Ad = ctx.dense(A)
    base["numpy"] = (lambda: Ad @ B) if Ad is not None else skip("dense>2e8")
    P = ctx.pydata(A)
    base["pydata"] = (lambda: P @ B) if P is not None else None
    if ctx.tensora_runs():
        f = tensora_kernel("spmm", "Y(i,k) = A(i,j) * B(j,k)", {"Y": "dd", "A": "ds", "B": "dd"})
        TA, TB = ctx.tensora(A), tensora_dense(B)
        base["tensora"] = (lambda: f(A=TA, B=TB), B.shape, False)
    base["mkl"] = lambda: mkl_dot(A, B)
    if torch is not None:
        qA, qB = ctx.torch(A), torch.from_numpy(B)
        base["torch"] = lambda: qA @ qB
    return (lambda: ta.einsum("ij,jk->ik", A, B, backend="llvm")), base


def case_sddmm(A, rng, ctx):
    m, n = A.shape
    X = ctx.random(rng, (m, ctx.ranks["sddmm"]))
    Y = ctx.random(rng, (ctx.ranks["sddmm"], n))
    Yt = np.ascontiguousarray(Y.T)

    def scipy_sddmm():
        # gather formulation: never forms the dense m x n product
        rows = np.repeat(np.arange(m, dtype=A.indices.dtype), np.diff(A.indptr))
        vals = A.data * np.einsum("ij,ij->i", X[rows], Yt[A.indices])
        return sp.csr_matrix((vals, A.indices, A.indptr), shape=A.shape)

    base = {"scipy": scipy_sddmm}
    Ad = ctx.dense(A)
    base["numpy"] = (lambda: Ad * (X @ Y)) if Ad is not None else skip("dense>2e8")
    P = ctx.pydata(A)
    if P is not None:
        base["pydata"] = (lambda: P * (X @ Y)) if m * n <= DENSE_LIMIT else skip("dense>2e8")
    if ctx.tensora_runs():
        f = tensora_kernel("sddmm", "Z(i,j) = A(i,j) * X(i,k) * Y(k,j)",
                           {"Z": "ds", "A": "ds", "X": "dd", "Y": "dd"})
        TA, TX, TY = ctx.tensora(A), tensora_dense(X), tensora_dense(Y)
        base["tensora"] = (lambda: f(A=TA, X=TX, Y=TY), A.shape, True)
    base["mkl"] = skip("no API")
    if torch is not None:
        qA, qX, qY = ctx.torch(A), torch.from_numpy(X), torch.from_numpy(Y)
        crow, col, values = qA.crow_indices(), qA.col_indices(), qA.values()

        def torch_sddmm():
            # X @ Y sampled at A's pattern (never dense), then scaled by A's values
            sampled = torch.sparse.sampled_addmm(qA, qX, qY, beta=0.0)
            return torch.sparse_csr_tensor(crow, col, sampled.values() * values, size=A.shape)

        base["torch"] = torch_sddmm
    return (lambda: ta.einsum("ij,ik,kj->ij", A, X, Y, backend="llvm")), base


def case_spgemm(A, rng, ctx):
    B = A if A.shape[0] == A.shape[1] else canonical(A.T, A.dtype)
    base = {"scipy": lambda: A @ B, "error_scale": lambda: abs(A) @ abs(B)}
    m, k = A.shape
    n = B.shape[1]
    if m * k <= DENSE_LIMIT and k * n <= DENSE_LIMIT and m * n <= DENSE_LIMIT:
        if 2.0 * m * k * n <= DENSE_GEMM_FLOPS:
            Ad = ctx.dense(A)
            Bd = Ad if B is A else B.toarray()
            base["numpy"] = lambda: Ad @ Bd
        else:
            base["numpy"] = skip("flops>2e10")
    else:
        base["numpy"] = skip("dense>2e8")
    P = ctx.pydata(A)
    if P is not None:
        PB = P if B is A else pydata_sparse.COO.from_scipy_sparse(B)
        base["pydata"] = lambda: P @ PB
    if ctx.tensora_runs():
        try:
            tensora_kernel("spgemm", "C(i,j) = A(i,k) * B(k,j)",
                           {"C": "ds", "A": "ds", "B": "ds"})
            base["tensora"] = skip("compiled?")
        except Exception as err:  # noqa: BLE001 - tensora has no CSR x CSR -> CSR kernel
            base["tensora"] = skip("no kernel" if "NoKernelFound" in type(err).__name__
                                   else type(err).__name__)
    base["mkl"] = lambda: mkl_dot(A, B)
    if torch is not None:
        qA = ctx.torch(A)
        qB = qA if B is A else torch_csr(B)
        base["torch"] = lambda: qA @ qB
    return (lambda: ta.einsum("ij,jk->ik", A, B, backend="llvm")), base


_add_kernels = {}   # dtype name -> the precompiled add kernel


def case_add(A, rng, ctx):
    if A.shape[0] == A.shape[1]:
        B = canonical(A.T, A.dtype)
    else:
        B = canonical(A[np.random.default_rng(0).permutation(A.shape[0])], A.dtype)
    base = {"scipy": lambda: A + B}
    Ad = ctx.dense(A)
    if Ad is not None:
        Bd = B.toarray()
        base["numpy"] = lambda: Ad + Bd
    else:
        base["numpy"] = skip("dense>2e8")
    P = ctx.pydata(A)
    if P is not None:
        PB = pydata_sparse.COO.from_scipy_sparse(B)
        base["pydata"] = lambda: P + PB
    if ctx.tensora_runs():
        f = tensora_kernel("add", "C(i,j) = A(i,j) + B(i,j)", {"C": "ds", "A": "ds", "B": "ds"})
        TA, TB = ctx.tensora(A), tensora_csr(B)
        base["tensora"] = (lambda: f(A=TA, B=TB), A.shape, True)
    base["mkl"] = skip("no API")
    if torch is not None:
        qA, qB = ctx.torch(A), torch_csr(B)
        base["torch"] = lambda: qA + qB

    def run():
        kernel = _add_kernels.get(A.dtype.name)
        if kernel is None:
            kernel = _add_kernels[A.dtype.name] = ta.compile(
                "C(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": "ds"},
                dtype=A.dtype.name, backend="llvm")
        return kernel(A=A, B=B)

    return run, base


def case_mttkrp(T, rng, ctx):
    coords, vals, shape = T
    I, J, K = shape  # noqa: E741 - the modes, as in the papers
    rank = ctx.ranks["mttkrp"]
    C = ctx.random(rng, (J, rank))
    D = ctx.random(rng, (K, rank))
    tensor = ctx.csf(T)
    unfolded = canonical(sp.csr_matrix((vals, (coords[0], coords[1] * K + coords[2])),
                                       shape=(I, J * K)), vals.dtype)

    def scipy_mttkrp():
        kr = (C[:, None, :] * D[None, :, :]).reshape(J * K, rank)
        return unfolded @ kr

    base = {"scipy": scipy_mttkrp}
    base["numpy"] = skip("dense>2e8") if I * J * K > DENSE_LIMIT else \
        (lambda Td=ctx.dense_tensor(T): np.einsum("ijk,jr,kr->ir", Td, C, D, optimize=True))
    if pydata_sparse is not None:
        P = pydata_sparse.COO(coords, vals, shape=shape)
        base["pydata"] = lambda: pydata_sparse.einsum("ijk,jr,kr->ir", P, C, D)
    if ctx.tensora_runs():
        f = tensora_kernel("mttkrp", "M(i,r) = T(i,j,k) * C(j,r) * D(k,r)",
                           {"M": "dd", "T": "sss", "C": "dd", "D": "dd"})
        TT, TC, TD = ctx.tensora_csf(T), tensora_dense(C), tensora_dense(D)
        base["tensora"] = (lambda: f(T=TT, C=TC, D=TD), (I, rank), False)
    base["mkl"] = skip("no API")
    base["torch"] = skip("no API")
    return (lambda: ta.einsum("ijk,jr,kr->ir", tensor, C, D, out_format="dense",
                              backend="llvm")), base


def case_ttv(T, rng, ctx):
    coords, vals, shape = T
    I, J, K = shape  # noqa: E741 - the modes, as in the papers
    v = ctx.random(rng, K)
    tensor = ctx.csf(T)
    # scipy's formulation: the (i, j) fibres as the rows of one CSR matrix, times v
    fibres = canonical(sp.csr_matrix((vals, (coords[0] * J + coords[1], coords[2])),
                                     shape=(I * J, K)), vals.dtype)
    base = {"scipy": lambda: (fibres @ v).reshape(I, J)}
    base["numpy"] = skip("dense>2e8") if I * J * K > DENSE_LIMIT else \
        (lambda Td=ctx.dense_tensor(T): Td @ v)
    if pydata_sparse is not None:
        P = pydata_sparse.COO(coords, vals, shape=shape)
        base["pydata"] = lambda: pydata_sparse.einsum("ijk,k->ij", P, v)
    if ctx.tensora_runs():
        f = tensora_kernel("ttv", "Y(i,j) = T(i,j,k) * v(k)", {"Y": "ds", "T": "sss", "v": "d"})
        TT, tv = ctx.tensora_csf(T), tensora_dense(v)
        base["tensora"] = (lambda: f(T=TT, v=tv), (I, J), True)
    base["mkl"] = lambda: mkl_dot(fibres, v).reshape(I, J)   # MKL on scipy's formulation
    base["torch"] = skip("no API")
    return (lambda: ta.einsum("ijk,k->ij", tensor, v, backend="llvm")), base


CASES = {"spmv": case_spmv, "spmm": case_spmm, "sddmm": case_sddmm, "spgemm": case_spgemm,
         "add": case_add, "mttkrp": case_mttkrp, "ttv": case_ttv}


def generated_matrix(m, nnz, rows, seed, dtype):
    """An ``m x m`` canonical CSR matrix with about ``nnz`` stored values, columns uniform and
    row ``r`` holding about ``rows[r] * nnz`` of them (duplicates summed)."""
    rng = np.random.default_rng(seed)
    counts = np.minimum(np.round(rows / rows.sum() * nnz).astype(np.int64), m)
    row_of = np.repeat(np.arange(m), counts)
    cols = rng.integers(0, m, row_of.size)
    vals = rng.random(row_of.size)
    return canonical(sp.csr_matrix((vals, (row_of, cols)), shape=(m, m)), dtype)


def generated_sources():
    """(name, make(dtype)) of ``--generated``'s inputs, in GENERATED_KERNELS' order: the
    matrices as canonical CSR, the tensor as sorted unique ``(coords, vals, shape)``."""
    def uniform(m, nnz, seed):
        return lambda dtype: generated_matrix(m, nnz, np.ones(m), seed, dtype)

    def power_law(dtype, m=20_000, nnz=400_000):
        # the r-th longest row holds ~ r^-0.9 of the values, rows in random order: a few rows
        # of thousands of values, half of them under ten
        lengths = np.random.default_rng(3).permutation(1.0 / np.arange(1, m + 1) ** 0.9)
        return generated_matrix(m, nnz, lengths, 2, dtype)

    def tensor(dtype, n=2000, nnz=1_000_000):
        rng = np.random.default_rng(4)
        flat = np.unique(rng.integers(0, n ** 3, nnz))
        coords = np.array(np.unravel_index(flat, (n, n, n)), dtype=np.int64)
        return coords, rng.random(flat.size).astype(dtype), (n, n, n)

    return [("uniform-2e4", uniform(20_000, 400_000, 1)), ("power-law-2e4", power_law),
            ("uniform-1e6", uniform(1_000_000, 8_000_000, 5)), ("uniform-2000^3", tensor)]


def read_bandwidth(threads, mib=512):
    """The machine's read bandwidth in bytes/s: the best of five sums of a ``mib`` MiB float64
    array, split across ``threads`` threads (NumPy releases the GIL in a sum)."""
    a = np.ones(mib * 2**20 // 8)
    chunks = np.array_split(a, threads)
    best = math.inf
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            t0 = time.perf_counter()
            list(pool.map(np.sum, chunks))
            best = min(best, time.perf_counter() - t0)
    return a.nbytes / best


def matrix_bytes(A):
    return A.data.nbytes + A.indices.nbytes + A.indptr.nbytes


class Operands:
    """Per-matrix (or per-tensor) conversions, made once and shared by the kernels, and the
    dtype and ranks of the dense operands the kernels make."""

    def __init__(self, A, dtype=np.float64, ranks=None):
        self.A = A
        self.dtype = np.dtype(dtype)
        self.ranks = ranks or {"spmm": RANK, "sddmm": RANK, "mttkrp": RANK}
        self._dense = None
        self._pydata = None
        self._tensora = None
        self._torch = None
        self._csf = {}

    def random(self, rng, shape):
        """Uniform [0, 1) values of this run's dtype (drawn in float64, so that both dtypes
        see the same numbers)."""
        return rng.random(shape).astype(self.dtype, copy=False)

    def tensora_runs(self):
        """Whether the tensora column runs here: it is installed, and computes in float64."""
        return tensora is not None and self.dtype == np.float64

    def csf(self, T):
        if "tensoralg" not in self._csf:
            coords, vals, shape = T
            self._csf["tensoralg"] = ta.Tensor.from_coords(coords, vals, shape, format="sss")
        return self._csf["tensoralg"]

    def tensora_csf(self, T):
        if "tensora" not in self._csf:
            self._csf["tensora"] = tensora_csf(*T)
        return self._csf["tensora"]

    def dense(self, A):
        if A is not self.A:
            return dense_or_skip(A)
        if self._dense is None:
            self._dense = dense_or_skip(A)
            if self._dense is None:
                self._dense = False
        return self._dense if self._dense is not False else None

    def dense_tensor(self, T):
        coords, vals, shape = T
        d = np.zeros(shape, dtype=vals.dtype)
        d[tuple(coords)] = vals
        return d

    def pydata(self, A):
        if self._pydata is None and pydata_sparse is not None:
            self._pydata = pydata_sparse.COO.from_scipy_sparse(A)
        return self._pydata

    def torch(self, A):
        if self._torch is None:
            self._torch = torch_csr(A)
        return self._torch

    def tensora(self, A):
        if self._tensora is None:
            self._tensora = tensora_csr(A)
        return self._tensora


# ---------------------------------------------------------------------------------------------
# one (kernel, data) row


def available_baselines():
    """``(columns, notes)``: the baselines installed here, and one line for each that is not."""
    missing = {
        "pydata": None if pydata_sparse is not None else "pydata sparse not installed "
                                                          "(pip install sparse)",
        "tensora": None if tensora is not None else "tensora not installed (pip install tensora)",
        "mkl": None if sparse_dot_mkl is not None else f"MKL column absent: sparse_dot_mkl "
                                                        f"unavailable ({_MKL_MISSING}); pip "
                                                        f"install sparse-dot-mkl mkl",
        "torch": None if torch is not None else "torch.sparse column absent: torch not "
                                                 "installed (pip install torch==2.13.0)",
    }
    columns = [b for b in BASELINES if missing.get(b) is None]
    notes = {b: line for b, line in missing.items() if line is not None}
    return columns, notes


def run_row(kernel, dataname, data, rng, ctx, compile_times, columns):
    row = {"kernel": kernel, "data": dataname, "dtype": ctx.dtype.name, "shape": None,
           "nnz": None, "status": "ok", "tensoralg": None, "baselines": {}}
    if kernel in TENSOR_KERNELS:
        row["shape"], row["nnz"] = list(data[2]), int(len(data[1]))
    else:
        row["shape"], row["nnz"] = list(data.shape), int(data.nnz)
    try:
        ta_fn, base = CASES[kernel](data, rng, ctx)
    except Exception as err:  # noqa: BLE001 - report and go on
        row["status"] = f"setup error: {type(err).__name__}: {err}"
        return row
    if tensora is not None and not ctx.tensora_runs():
        base.setdefault("tensora", skip("float64 only"))
    ref = base["scipy"]()
    rtol, atol = TOLERANCE[ctx.dtype.name]
    scale_fn = base.pop("error_scale", None)
    scale = scale_fn() if scale_fn is not None else None

    # tensoralg: the first call compiles (fresh cache) when this kernel is new in this run
    compiles_before = kernel_cache().compiles
    try:
        t0 = time.perf_counter()
        result = ta_fn()
        first = time.perf_counter() - t0
    except Exception as err:  # noqa: BLE001
        row["status"] = f"ERROR {type(err).__name__}: {str(err)[:200]}"
        result = None
    if result is not None:
        compiled = kernel_cache().compiles - compiles_before
        if not allclose(result, ref, rtol, atol, scale):
            row["status"] = "WRONG"
        row["tensoralg"] = measure(ta_fn)
        row["first_call_s"] = first
        if compiled and kernel not in compile_times:
            warm = median_of(row["tensoralg"])
            compile_times[kernel] = {"first_call_s": first, "warm_s": warm,
                                     "compile_s": first - warm, "kernels_compiled": compiled,
                                     "on": dataname}

    for name in columns:
        row["baselines"][name] = run_baseline(name, base.get(name), ref, scale, rtol, atol)
    return row


def run_baseline(name, spec, ref, scale, rtol=1e-5, atol=1e-8):
    """One baseline's samples (``bad`` when it disagrees with scipy), or why it did not run."""
    if spec is None:
        return {"skip": "n/a"}
    if isinstance(spec, tuple) and spec[0] == "skip":
        return {"skip": spec[1]}
    if isinstance(spec, tuple):          # tensora: (fn, out shape, sparse out)
        fn, shape, sparse_out = spec
        check = lambda r: TensoraResult(tensora_read(r, shape, sparse_out))  # noqa: E731
    else:
        fn, check = spec, (lambda r: r)
    try:
        out = fn()
        bad = name != "scipy" and not allclose(check(out), ref, rtol, atol, scale)
        del out
        entry = measure(fn)
    except Exception as err:  # noqa: BLE001
        return {"skip": f"error {type(err).__name__}: {str(err)[:120]}"}
    if bad:
        entry["bad"] = True
    return entry


# ---------------------------------------------------------------------------------------------
# dispatch overhead and disk cache


def dispatch_overhead():
    """Samples of one call on a 4x4 CSR matrix, where the arithmetic is nothing."""
    rng = np.random.default_rng(1)
    A = canonical(sp.random(4, 4, density=0.5, format="csr", random_state=1))
    x = rng.random(4)
    calls = {}
    ta.einsum("ij,j->i", A, x, backend="llvm")
    calls["ta.einsum 4x4 spmv"] = lambda: ta.einsum("ij,j->i", A, x, backend="llvm")
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"}, dtype="float64", backend="llvm")
    k(A=A, x=x)
    calls["ta.compile kernel call 4x4 spmv"] = lambda: k(A=A, x=x)
    calls["scipy A @ x 4x4"] = lambda: A @ x
    Ad = A.toarray()
    calls["numpy A @ x 4x4 dense"] = lambda: Ad @ x
    if tensora is not None:
        f = tensor_method("y(i) = A(i,j) * x(j)", {"y": "d", "A": "ds", "x": "d"})
        TA, tx = tensora_csr(A), tensora_dense(x)
        f(A=TA, x=tx)
        calls["tensora kernel call 4x4 spmv"] = lambda: f(A=TA, x=tx)
    if sparse_dot_mkl is not None:
        calls["mkl dot_product_mkl 4x4 spmv"] = lambda: mkl_dot(A, x)
    if torch is not None:
        qA, qx = torch_csr(A), torch.from_numpy(x)
        calls["torch A @ x 4x4 spmv"] = lambda: qA @ qx
    assert np.allclose(ta.einsum("ij,j->i", A, x), A @ x)
    return {label: measure(fn) for label, fn in calls.items()}


_CHILD = r"""
import json, time, sys
t0 = time.perf_counter()
import numpy as np, scipy.io, scipy.sparse as sp
import tensoralg as ta, tensoralg.data
from tensoralg.api import kernel_cache
t1 = time.perf_counter()
A = sp.csr_matrix(scipy.io.mmread(tensoralg.data.path("bcspwr10")), dtype=np.float64)
A.sum_duplicates(); A.sort_indices()
A.indices = A.indices.astype(np.int32); A.indptr = A.indptr.astype(np.int32)
x = np.ones(A.shape[1])
t2 = time.perf_counter(); y = ta.einsum("ij,j->i", A, x, backend="llvm"); t3 = time.perf_counter()
t4 = time.perf_counter(); ta.einsum("ij,j->i", A, x, backend="llvm"); t5 = time.perf_counter()
assert np.allclose(y, A @ x)
print(json.dumps({"import_s": t1 - t0, "first_call_s": t3 - t2, "second_call_s": t5 - t4,
                  "compiles": kernel_cache().compiles}))
"""


def disk_cache_probe():
    """First spmv call in a new process: with an empty cache, then with the kernel on disk.

    Two children share one new cache directory: the first compiles and stores the kernel, the
    second should load it. (The parent's cache is not reused: the cache key includes a hash of
    tensoralg's source, so an edit made while this script runs would turn the hit into a miss.)
    """
    out = {}
    directory = tempfile.mkdtemp(prefix="tensoralg-bench-disk-")
    atexit.register(shutil.rmtree, directory, True)
    for label in ("cold (empty cache)", "disk hit"):
        env = dict(os.environ, TENSORALG_CACHE_DIR=directory)
        proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0:
            out[label] = {"error": proc.stderr.strip().splitlines()[-1:]}
        else:
            out[label] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------------------------------------
# console output (report.py renders the Markdown report from the JSON file)


def fmt_time(t):
    return record.format_time(t)


def ratio(row, name):
    b = row["baselines"].get(name, {})
    if row["tensoralg"] is None or "times" not in b:
        return None
    return median_of(b) / median_of(row["tensoralg"])


def cell(row, name):
    b = row["baselines"].get(name, {})
    if "skip" in b:
        return b["skip"] if len(b["skip"]) <= 12 else b["skip"][:11] + "~"
    r = ratio(row, name)
    if r is None:
        return "-"
    return f"{r:.2f}" + (" bad" if b.get("bad") else "")


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def print_table(rows, columns):
    head = ["kernel", "data", "tensoralg", *columns, "status"]
    mixed = len({r.get("dtype") for r in rows}) > 1
    body = [[r["kernel"], f"{r['data']} {r['dtype']}" if mixed else r["data"],
             fmt_time(median_of(r["tensoralg"])),
             *(cell(r, b) for b in columns), r["status"]] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if k < 2 or k == len(cells) - 1 else str(c).rjust(w)
        for k, (c, w) in enumerate(zip(cells, widths)))
    print(line(head))
    print("  ".join("-" * w for w in widths))
    for b in body:
        print(line(b))


def print_summary(rows, columns):
    """Geometric means of the ratios per kernel and baseline (rows with status ok)."""
    good = [r for r in rows if r["status"] == "ok"]
    groups = [(k, [r for r in good if r["kernel"] == k]) for k in KERNELS] + [("all", good)]
    head = ["geomean", *columns]
    body = []
    for name, group in groups:
        if group:
            means = [geomean([ratio(r, b) for r in group]) for b in columns]
            body.append([name, *("-" if v is None else f"{v:.2f}" for v in means)])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    for cells in [head, *body]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths))))


def print_row(row, columns):
    print(f"  {row['kernel']:7s} tensoralg {fmt_time(median_of(row['tensoralg'])):>9s}  "
          + "  ".join(f"{b} {cell(row, b)}" for b in columns)
          + f"  [{row['status']}]", flush=True)


# ---------------------------------------------------------------------------------------------
# threads


def set_threads(count):
    """Give every library that has threads ``count`` of them; return what each one reports."""
    ta.set_num_threads(count)
    threads = {"requested": count, "tensoralg": ta.get_num_threads(), "scipy": 1, "pydata": 1,
               "tensora": 1}
    if torch is not None:
        torch.set_num_threads(count)
        threads["torch"] = torch.get_num_threads()
    if sparse_dot_mkl is not None:
        sparse_dot_mkl.mkl_set_num_threads(count)
        threads["mkl"] = sparse_dot_mkl.mkl_get_max_threads()
    threads["blas"] = record.limit_blas_threads(count)
    return threads


# ---------------------------------------------------------------------------------------------
# main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="only the matrices and tensor bundled in tensoralg/data")
    parser.add_argument("--only", default=",".join(KERNELS),
                        help=f"comma-separated kernels ({','.join(KERNELS)})")
    parser.add_argument("--matrices", default=None,
                        help="comma-separated matrix/tensor names (default: all)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads for tensoralg, torch, MKL and NumPy's BLAS "
                             "(default: all cores)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random dense operands (default 0)")
    parser.add_argument("--out", default=None,
                        help="write the JSON results here (default: benchmarks/results/"
                             "run-<date>-<commit>.json)")
    parser.add_argument("--no-probes", action="store_true",
                        help="skip the dispatch-overhead and disk-cache measurements")
    parser.add_argument("--generated", action="store_true",
                        help="generated inputs of fixed sizes instead of the real matrices "
                             "(writes results/generated-<date>-<commit>.json)")
    parser.add_argument("--dtypes", default="float64,float32",
                        help="with --generated: the value types to run (default "
                             "float64,float32)")
    args = parser.parse_args(argv)
    kernels = [k.strip() for k in args.only.split(",") if k.strip()]
    unknown = [k for k in kernels if k not in KERNELS]
    if unknown:
        parser.error(f"unknown kernel(s) {unknown}; choose from {', '.join(KERNELS)}")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    wanted = None if args.matrices is None else {m.strip() for m in args.matrices.split(",")}
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    if any(d not in TOLERANCE for d in dtypes):
        parser.error(f"--dtypes takes {' and '.join(TOLERANCE)}, not {args.dtypes!r}")

    begun = record.start()
    started = time.perf_counter()
    warnings.filterwarnings("ignore", message=".*[Ss]parse.*", category=UserWarning)
    columns, notes = available_baselines()
    for line in notes.values():
        print(f"note: {line}")
    threads = set_threads(args.threads)
    print("machine:", json.dumps(record.machine()))
    print("threads:", json.dumps(threads))
    print(f"kernel cache: {_CACHE_DIR} (fresh)")
    rng = np.random.default_rng(args.seed)
    rows, compile_times = [], {}
    # one-time initialisation (LLVM target, JIT engine) on a dense kernel that no row uses, so
    # that it is not charged to the first kernel's compile time below
    t0 = time.perf_counter()
    ta.einsum("ij,j->i", np.ones((2, 2)), np.ones(2), backend="llvm")
    init_s = time.perf_counter() - t0

    bandwidth = None
    if args.generated:
        bandwidth = read_bandwidth(threads["tensoralg"])
        print(f"read bandwidth (NumPy sum over 512 MiB, {threads['tensoralg']} threads): "
              f"{bandwidth / 1e9:.1f} GB/s")
        for name, make in generated_sources():
            if wanted is not None and name not in wanted:
                continue
            chosen = [k for k in GENERATED_KERNELS[name] if k in kernels]
            for dtype in dtypes if chosen else ():
                data = make(dtype)
                if isinstance(data, tuple):
                    size, nnz = "x".join(map(str, data[2])), len(data[1])
                else:
                    size, nnz = f"{data.shape[0]}x{data.shape[1]}", data.nnz
                print(f"\n{name} {dtype}: {size}, nnz {nnz}", flush=True)
                ctx = Operands(None if isinstance(data, tuple) else data, dtype,
                               GENERATED_RANKS)
                for kernel in chosen:
                    row = run_row(kernel, name, data, rng, ctx, compile_times, columns)
                    if kernel == "spmv" and name == BANDWIDTH_INPUT and row.get("tensoralg"):
                        row["matrix_bytes"] = matrix_bytes(data)
                    rows.append(row)
                    print_row(row, columns)
                del ctx, data
    matrix_kernels = [k for k in kernels if k not in TENSOR_KERNELS]
    if matrix_kernels and not args.generated:
        for name, path in matrix_sources(args.quick):
            if wanted is not None and name not in wanted:
                continue
            A = canonical(scipy.io.mmread(path))
            print(f"\n{name}: {A.shape[0]}x{A.shape[1]}, nnz {A.nnz}", flush=True)
            ctx = Operands(A)
            for kernel in matrix_kernels:
                row = run_row(kernel, name, A, rng, ctx, compile_times, columns)
                rows.append(row)
                print_row(row, columns)
            del ctx
    tensor_kernels = [k for k in kernels if k in TENSOR_KERNELS]
    if tensor_kernels and not args.generated:
        for name, path in tensor_sources(args.quick):
            if wanted is not None and name not in wanted:
                continue
            T = load_tensor(path, TENSOR_SHAPES.get(name))
            if T is None:
                print(f"\n{name}: not an order-3 tensor (i j k value lines); skipped")
                continue
            print(f"\n{name}: {'x'.join(map(str, T[2]))}, nnz {len(T[1])}", flush=True)
            ctx = Operands(None)
            for kernel in tensor_kernels:
                row = run_row(kernel, name, T, rng, ctx, compile_times, columns)
                rows.append(row)
                print_row(row, columns)

    if not args.generated:
        rows.sort(key=lambda r: (KERNELS.index(r["kernel"]), r["data"].lower()))
    print("\nratios = baseline median / tensoralg median (> 1: tensoralg is faster); "
          "tensoralg column = its median time")
    print_table(rows, columns)
    print("\ngeometric means of the ratios (rows marked WRONG/ERROR left out):")
    print_summary(rows, columns)

    print("\nfirst call of each tensoralg kernel in a fresh kernel cache (compile + one run;"
          f" one-time LLVM init on a dense kernel before: {fmt_time(init_s)}):")
    for kernel, c in compile_times.items():
        print(f"  {kernel:7s} first call {fmt_time(c['first_call_s']):>9s}   "
              f"minus warm run = compile {fmt_time(c['compile_s']):>9s}   "
              f"({c['kernels_compiled']} kernel(s), on {c['on']})")
    if _tensora_compile_times:
        print("tensora kernel build time (tensor_method), for comparison:")
        for kernel, t in _tensora_compile_times.items():
            print(f"  {kernel:7s} {fmt_time(t):>9s}")

    probes = {}
    if bandwidth is not None:
        probes["read_bandwidth_bytes_s"] = bandwidth
        for r in rows:
            if "matrix_bytes" in r:
                rate = r["matrix_bytes"] / median_of(r["tensoralg"])
                print(f"{r['data']} {r['dtype']} spmv reads the matrix at {rate / 1e9:.1f} GB/s, "
                      f"{rate / bandwidth:.0%} of the read bandwidth")
    if not args.no_probes and not args.generated:
        probes["dispatch"] = dispatch_overhead()
        print("\ncached dispatch overhead (median per call):")
        for label, sample in probes["dispatch"].items():
            print(f"  {label:34s} {fmt_time(median_of(sample)):>9s}")
        probes["disk_cache"] = disk_cache_probe()
        print("\nnew process, first ta.einsum spmv call on bcspwr10:")
        for label, c in probes["disk_cache"].items():
            if "error" in c:
                print(f"  {label:20s} error: {c['error']}")
            else:
                print(f"  {label:20s} first call {fmt_time(c['first_call_s']):>9s}   "
                      f"second call {fmt_time(c['second_call_s']):>9s}   "
                      f"import tensoralg {fmt_time(c['import_s'])}   "
                      f"kernels compiled {c['compiles']}")

    problems = [r for r in rows if r["status"] != "ok"]
    if problems:
        print("\nproblems:")
        for r in problems:
            print(f"  {r['kernel']} on {r['data']}: {r['status']}")
    elapsed = time.perf_counter() - started
    print(f"\ntotal time {elapsed:.0f} s")
    path = record.write("generated" if args.generated else "run", {
        "options": {"quick": args.quick, "only": kernels,
                    "matrices": None if wanted is None else sorted(wanted),
                    "probes": not args.no_probes, "generated": args.generated,
                    "dtypes": dtypes if args.generated else ["float64"]},
        "seed": args.seed, "threads": threads, "columns": ["tensoralg", *columns],
        "missing": notes, "blas_threadpools": record.blas_threadpools(),
        "method": {"budget_s": BUDGET, "samples": SAMPLES, "min_samples": MIN_SAMPLES,
                   "sample": "mean seconds per call over `number` back-to-back calls",
                   "rank": GENERATED_RANKS if args.generated else RANK,
                   "tolerance": TOLERANCE, "dense_limit": DENSE_LIMIT,
                   "dense_gemm_flops": DENSE_GEMM_FLOPS},
        "elapsed_s": elapsed, "llvm_init_s": init_s, "measurements": rows,
        "compile": compile_times, "tensora_compile": _tensora_compile_times, "probes": probes,
    }, begun, out=args.out)
    print(f"wrote {path}; render the report with: python benchmarks/report.py")
    return 1 if any(r["status"] == "WRONG" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
