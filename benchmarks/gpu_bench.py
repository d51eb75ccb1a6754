#!/usr/bin/env python
"""tensoralg's cuda backend against cuSPARSE (through CuPy) on one GPU.

    python benchmarks/gpu_bench.py [--budget SECONDS] [--out FILE.json] [--data DIR]
                                   [--only spmv,spmm32,spmm128,sddmm,spgemm] [--quick]

Kernels, float64 values and int32 indices, every operand on the device (CuPy arrays and
``cupyx.scipy.sparse`` CSR matrices, which tensoralg uses without copying):

- ``spmv``     y = A @ x                     vs ``A @ x`` (cuSPARSE SpMV)
- ``spmm32``   Y = A @ B, B with 32 columns  vs ``A @ B`` (cuSPARSE SpMM)
- ``spmm128``  the same with 128 columns
- ``sddmm``    Z = A * (X @ Y.T), rank 32    vs CuPy's sampled product: the rows of X and Y
               gathered at the nonzeros and summed (and ``cupyx.cusparse.sddmm`` where CuPy has
               it)
- ``spgemm``   C = A @ A (square A)          vs ``A @ A`` (cuSPARSE SpGEMM)

on the bundled matrices (``tensoralg/data``), the matrices of ``--data`` (default: the first of
``$TA_GPU_DATA``, ``shared/data/matrices``, ``../shared/data/matrices``, ``.gpu_data``
that exists), and generated ones of 10^7 and 10^8 nonzeros (uniform rows, and a power-law one
whose longest rows hold thousands of nonzeros), built on the device.

Each call is timed from the host with the device synchronized after it (so tensoralg's times
include its Python launch path, and CuPy's its own): a warm-up call, then calls until 0.5 s or
50 calls, the median reported. Results are checked against cuSPARSE's. For every case the
script prints the ratio ``cuSPARSE time / tensoralg time`` (above 1: tensoralg is faster), the
mapping tensoralg chose, and the memory bandwidth each achieved, counting each array once
(values, indices and pos of A; x or B read once; y or Y written once), against the device's peak
(from its memory clock and bus width). Results go to ``--out`` (default ``$OUT/gpu_bench.json``
when ``OUT`` is set) after every case, so a run cut short still leaves what it measured. Cases
are skipped once ``--budget`` seconds have passed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tensoralg as ta  # noqa: E402
import tensoralg.gpu as gpu  # noqa: E402
from tensoralg.formats import LevelArrays  # noqa: E402

KERNELS = ("spmv", "spmm32", "spmm128", "sddmm", "spgemm")
STATEMENTS = {
    "spmv": ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
    "spmm32": ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
    "spmm128": ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
    "sddmm": ("Z(i,j) = A(i,j) * X(i,k) * Y(j,k)", {"A": "csr"}),
    "spgemm": ("Z(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr"}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=200.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--data", default=None)
    parser.add_argument("--only", default=",".join(KERNELS))
    parser.add_argument("--quick", action="store_true", help="skip the 10^8-nonzero matrices")
    args = parser.parse_args()
    start = time.perf_counter()
    reason = gpu.available()
    if reason is not None:
        sys.exit(f"gpu_bench: {reason}")
    import cupy

    out = args.out or (os.path.join(os.environ["OUT"], "gpu_bench.json")
                       if os.environ.get("OUT") else None)
    context = gpu.gpu_context()
    peak = peak_bandwidth(cupy)
    record = {"device": context.driver.device, "route": context.driver.name, "peak_gbs": peak,
              "cupy": cupy.__version__, "results": []}
    print(f"{context.driver.device} via {context.driver.name}; peak memory bandwidth "
          f"{peak:.0f} GB/s; budget {args.budget:.0f} s")
    kernels = [k for k in args.only.split(",") if k]
    for name, matrix in matrices(cupy, args.data, args.quick):
        for kernel in kernels:
            if time.perf_counter() - start > args.budget:
                print(f"-- budget spent: {kernel} on {name} and later cases skipped")
                break
            # SpGEMM keeps a dense row workspace per thread (docs/guide/gpu.md): real matrices
            # only, where a workspace is small.
            if kernel == "spgemm" and (matrix.shape[0] != matrix.shape[1] or matrix.nnz > 2e6):
                continue
            try:
                result = measure(cupy, context, kernel, name, matrix, peak)
            except Exception as error:   # one case failing must not lose the others
                result = {"kernel": kernel, "matrix": name, "error": f"{type(error).__name__}: "
                          f"{error}"[:500]}
                print(f"{kernel:8} {name:24} ERROR {result['error']}")
            record["results"].append(result)
            if out:
                Path(out).write_text(json.dumps(record, indent=1))
        else:
            continue
        break
    print(f"done in {time.perf_counter() - start:.0f} s" + (f"; results in {out}" if out else ""))


# ---------------------------------------------------------------------------------------------
# Matrices


def matrices(cupy, data: str | None, quick: bool):
    """(name, cupyx CSR float64 matrix with sorted int32 indices), small ones first."""
    import cupyx.scipy.sparse as cusparse
    import scipy.sparse as sp

    from tensoralg.data import FILES, load

    for name in FILES:
        tensor = load(name)
        if tensor.ndim == 2:
            yield name, cusparse.csr_matrix(_canonical(sp.csr_matrix(tensor.to_scipy())))
    folder = data_folder(data)
    if folder is not None:
        for path in sorted(folder.glob("*.mtx*")):
            name = path.name.split(".")[0]
            if name in FILES:
                continue
            try:
                tensor = ta.read(str(path))
            except Exception as error:
                print(f"-- {path.name}: cannot read ({error})")
                continue
            if tensor.ndim == 2:
                yield name, cusparse.csr_matrix(_canonical(sp.csr_matrix(tensor.to_scipy())))
    yield "uniform-1e7", generated(cupy, 1_000_000, 10, skew=False)
    yield "powerlaw-1e7", generated(cupy, 1_000_000, 10, skew=True)
    if not quick:
        yield "uniform-1e8", generated(cupy, 4_000_000, 25, skew=False)


def data_folder(given: str | None) -> Path | None:
    candidates = [given, os.environ.get("TA_GPU_DATA"), ROOT / "shared/data/matrices",
                  ROOT.parent / "shared/data/matrices", ROOT / ".gpu_data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def _canonical(matrix):
    matrix = matrix.astype(np.float64)
    matrix.sum_duplicates()
    matrix.sort_indices()
    matrix.indices = matrix.indices.astype(np.int32)
    matrix.indptr = matrix.indptr.astype(np.int32)
    return matrix


def generated(cupy, rows: int, mean: int, skew: bool):
    """A square CSR matrix built on the device: ``mean`` nonzeros a row on average, uniform
    or with power-law row lengths; sorted column indices (duplicates summed)."""
    import cupyx.scipy.sparse as cusparse

    rng = cupy.random.default_rng(0)
    if skew:
        host = np.minimum(np.random.default_rng(0).zipf(1.6, rows), rows // 4).astype(float)
        lengths = cupy.asarray((host * mean / host.mean()).astype(np.int64))
    else:
        lengths = cupy.full(rows, mean, dtype=cupy.int64)
    indptr = cupy.concatenate([cupy.zeros(1, cupy.int64), cupy.cumsum(lengths)])
    nnz = int(indptr[-1])
    row_of = rows_of(cupy, indptr, nnz)
    columns = rng.integers(0, rows, nnz, dtype=cupy.int64)
    order = cupy.lexsort(cupy.stack([columns, row_of]))
    matrix = cusparse.csr_matrix((rng.random(nnz)[order] + 0.5, columns[order].astype(cupy.int32),
                                  indptr.astype(cupy.int32)), shape=(rows, rows))
    matrix.sum_duplicates()
    return matrix


def rows_of(cupy, indptr, nnz: int):
    """The row of each of ``nnz`` entries of a CSR matrix, on the device."""
    return cupy.searchsorted(indptr, cupy.arange(nnz, dtype=indptr.dtype), side="right") - 1


# ---------------------------------------------------------------------------------------------
# Measuring


def timed(cupy, call, seconds: float = 0.5, most: int = 50) -> tuple[float, object]:
    result = call()                    # warm-up (and compile)
    cupy.cuda.Device().synchronize()
    samples = []
    begin = time.perf_counter()
    while len(samples) < most and (time.perf_counter() - begin < seconds or len(samples) < 3):
        tick = time.perf_counter()
        call()
        cupy.cuda.Device().synchronize()
        samples.append(time.perf_counter() - tick)
    return statistics.median(samples), result


def measure(cupy, context, kernel: str, name: str, a, peak: float) -> dict:
    import cupyx.scipy.sparse as cusparse

    rows, cols = a.shape
    rng = cupy.random.default_rng(1)
    statement, formats = STATEMENTS[kernel]
    compiled_kernel = ta.compile(statement, formats=formats)
    operands: dict = {"A": a}
    if kernel == "spmv":
        operands["x"] = rng.random(cols)
        baseline = lambda: a @ operands["x"]   # noqa: E731
        shape = (rows,)
        moved = a.nnz * 12 + (rows + 1) * 4 + (rows + cols) * 8
    elif kernel.startswith("spmm"):
        width = int(kernel[4:])
        operands["B"] = rng.random((cols, width))
        baseline = lambda: a @ operands["B"]   # noqa: E731
        shape = (rows, width)
        moved = a.nnz * 12 + (rows + 1) * 4 + (rows + cols) * width * 8
    elif kernel == "sddmm":
        operands["X"], operands["Y"] = rng.random((rows, 32)), rng.random((cols, 32))
        row_of = rows_of(cupy, a.indptr, a.nnz)
        baseline = lambda: a.data * cupy.sum(   # noqa: E731
            operands["X"][row_of] * operands["Y"][a.indices], axis=1)
        shape = (rows, cols)
        moved = a.nnz * (12 + 12) + (rows + 1) * 4 + (rows + cols) * 32 * 8
    else:
        operands["B"] = a
        baseline = lambda: a @ a   # noqa: E731
        shape = (rows, cols)
        moved = 2 * (a.nnz * 12 + (rows + 1) * 4)
    host_like = _host_stand_ins(compiled_kernel, operands)
    compiled = compiled_kernel._program_for(host_like, shape)
    choice_holder = {}

    def ours():
        result, choice = gpu.launch(context, compiled, operands, np.dtype("float64"), shape,
                                    None, None)
        choice_holder["choice"] = choice
        return result

    ours_time, ours_result = timed(cupy, ours)
    base_time, base_result = timed(cupy, baseline)
    correct = check(cupy, cusparse, kernel, ours_result, base_result, a)
    result = {"kernel": kernel, "matrix": name, "rows": rows, "cols": cols, "nnz": int(a.nnz),
              "tensoralg_s": ours_time, "cusparse_s": base_time,
              "ratio": base_time / ours_time, "mapping": str(choice_holder["choice"]),
              "tensoralg_gbs": moved / ours_time / 1e9, "cusparse_gbs": moved / base_time / 1e9,
              "correct": correct}
    print(f"{kernel:8} {name:24} nnz {a.nnz:>10}  tensoralg {ours_time * 1e3:9.3f} ms  "
          f"cuSPARSE {base_time * 1e3:9.3f} ms  ratio {result['ratio']:5.2f}  "
          f"{result['tensoralg_gbs']:7.0f} GB/s ({result['tensoralg_gbs'] / peak:4.0%} of peak)"
          f"  {'ok' if correct else 'WRONG'}  [{choice_holder['choice'].mapping}]")
    return result


def _host_stand_ins(kernel, operands: dict) -> dict:
    """Tensors with the operands' formats, dtypes and shapes, for choosing the compiled
    program (its key depends on them, not on the values): empty sparse ones, tiny dense."""
    bound = {}
    for name, value in operands.items():
        device = gpu.from_cupy(value)
        assert device is not None
        if device.format.is_dense:
            bound[name] = ta.Tensor.trusted(device.shape, device.format,
                                            tuple(LevelArrays() for _ in device.shape),
                                            np.zeros(1))
        else:
            levels = (LevelArrays(), LevelArrays(np.zeros(device.shape[0] + 1, np.int32),
                                                 np.zeros(0, np.int32)))
            bound[name] = ta.Tensor.trusted(device.shape, device.format, levels, np.zeros(0))
    return bound


def check(cupy, cusparse, kernel: str, ours, theirs, a) -> bool:
    """Whether tensoralg's result (a device array or tensor) matches cuSPARSE's."""
    ours = gpu.as_cupy(ours)
    if kernel == "spgemm":
        difference = (ours - theirs).tocsr()
        if difference.nnz == 0:
            return True
        scale = float(cupy.abs(theirs.data).max()) if theirs.nnz else 1.0
        return float(cupy.abs(difference.data).max()) <= 1e-9 * max(scale, 1.0)
    if kernel == "sddmm":
        return bool(cupy.allclose(ours.data, theirs, rtol=1e-9, atol=1e-9))
    return bool(cupy.allclose(ours.reshape(theirs.shape), theirs, rtol=1e-9, atol=1e-9))


def peak_bandwidth(cupy) -> float:
    """The device's peak memory bandwidth in GB/s: 2 transfers a clock over the bus."""
    properties = cupy.cuda.runtime.getDeviceProperties(0)
    clock = properties.get("memoryClockRate", 0)       # kHz
    width = properties.get("memoryBusWidth", 0)        # bits
    if clock and width:
        return 2 * clock * 1e3 * width / 8 / 1e9
    return 4800.0        # the H200's nominal figure, when the device does not say


if __name__ == "__main__":
    main()
