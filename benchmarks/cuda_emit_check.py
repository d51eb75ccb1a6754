#!/usr/bin/env python
"""Check the emitted CUDA kernels on a GPU: one self-contained .cu file per kernel.

    python benchmarks/cuda_emit_check.py OUTDIR      # here: writes OUTDIR/*.cu and OUTDIR/run.sh
    bash OUTDIR/run.sh                               # on a machine with a GPU and nvcc

Each file holds a kernel in the CUDA backend's ``serial`` mapping (the whole body in one thread,
``CudaEmitter(mapping="serial")``), its operands as literals, and a ``main()`` that launches it
``<<<1, 1>>>`` (the mapped kernels are run by ``tensoralg.gpu``: ``gpu_check.sh``), copies
the output back and compares it with tensoralg's CPU (LLVM) result for the same operands,
printing ``OK`` or ``WRONG`` and exiting non-zero on a mismatch. The cases cover a CSR SpMV, an
SpMM whose rows run in register tiles, a fused sparse layer with a row workspace on the device
heap, and a cache-tiled transpose. Kernels with sparse outputs (which grow their buffers through
pointer-to-pointer parameters) are not covered. First run: an H200, all four OK.
"""
import os
import sys

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tensoralg as ta  # noqa: E402
from tensoralg.codegen.cuda import CudaEmitter  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "cuda_check"
rng = np.random.default_rng(0)
CTYPE = {np.dtype(np.float64): "double", np.dtype(np.float32): "float",
         np.dtype(np.int32): "int32_t", np.dtype(np.int64): "int64_t"}

def literal(a):
    a = np.asarray(a).reshape(-1)
    if a.size == 0:
        a = np.zeros(1, a.dtype)
    fmt = (lambda v: repr(float(v))) if a.dtype.kind == "f" else (lambda v: str(int(v)))
    return "{" + ",".join(fmt(v) for v in a) + "}"

def case(name, statement, formats, dtype, operands, sizes):
    os.makedirs(OUT, exist_ok=True)
    k = ta.compile(statement, formats=formats, dtype=dtype, backend="cuda")
    cpu = ta.compile(statement, formats=formats, dtype=dtype)
    expected = np.asarray(cpu(**operands)).reshape(-1)
    fn = k._default.function   # the IR function: its params give every argument's role
    src = CudaEmitter(mapping="serial").emit(fn)   # the whole body in one thread
    kname = fn.name
    decls, args, outputs = [], [], []
    for p in fn.params:
        role, v = p.role, p.var
        if role.startswith("index."):
            args.append(str(sizes[role.split(".")[1]]))
            continue
        if role.startswith("range.begin"):
            args.append("0")
            continue
        if role.startswith("range.end"):
            args.append(str(sizes[role.split(".")[2]]))
            continue
        tensor, rest = role.split(".", 1)
        if p.output:
            arr = np.zeros(expected.size, np.dtype(dtype))
            outputs.append(v.name)
        else:
            op = operands[tensor]
            t = op if isinstance(op, ta.Tensor) else None
            if rest == "vals":
                arr = (t.vals if t is not None else np.asarray(op)).astype(np.dtype(dtype))
            else:
                level, kind = rest.split(".")
                arr = getattr(t.levels[int(level)], kind)
        ct = CTYPE[np.dtype(arr.dtype)]
        decls.append(f"static {ct} h_{v.name}[] = {literal(arr)};\n"
                     f"{ct}* d_{v.name}; cudaMalloc(&d_{v.name}, sizeof(h_{v.name})); "
                     f"cudaMemcpy(d_{v.name}, h_{v.name}, sizeof(h_{v.name}), cudaMemcpyHostToDevice);")
        args.append(f"d_{v.name}")
    out = outputs[0]
    ct = CTYPE[np.dtype(dtype)]
    main = f"""
#include <cstdio>
#include <cmath>
static {ct} expected[] = {literal(expected)};
int main() {{
{chr(10).join(decls)}
int32_t* d_status; cudaMalloc(&d_status, 4);
{kname}<<<1, 1>>>({", ".join(args)}, d_status);
cudaError_t e = cudaDeviceSynchronize();
if (e != cudaSuccess) {{ printf("{name}: CUDA error %s\\n", cudaGetErrorString(e)); return 2; }}
int32_t status; cudaMemcpy(&status, d_status, 4, cudaMemcpyDeviceToHost);
cudaMemcpy(h_{out}, d_{out}, sizeof(h_{out}), cudaMemcpyDeviceToHost);
double worst = 0, scale = 0;
for (size_t q = 0; q < {expected.size}; ++q) {{
  double d = fabs((double)h_{out}[q] - (double)expected[q]); if (d > worst) worst = d;
  if (fabs((double)expected[q]) > scale) scale = fabs((double)expected[q]);
}}
int ok = status == 0 && worst <= 1e-5 * (scale > 1 ? scale : 1);
printf("{name}: status %d, max abs error %.3g (scale %.3g) -> %s\\n", status, worst, scale, ok ? "OK" : "WRONG");
return ok ? 0 : 1;
}}
"""
    with open(os.path.join(OUT, f"{name}.cu"), "w") as f:
        f.write(src + "\n" + main)


def sparse(rows: int, cols: int, dtype) -> ta.Tensor:
    a = sp.random_array((rows, cols), density=0.2, format="csr", rng=rng)
    a.data = rng.standard_normal(a.nnz)
    return ta.Tensor.from_scipy(a.astype(dtype), ta.CSR)


A = sparse(40, 30, np.float64)
x, B = rng.standard_normal(30), rng.standard_normal((30, 70))
W, C = sparse(40, 30, np.float32), rng.standard_normal(40).astype(np.float32)
X = rng.standard_normal((30, 70)).astype(np.float32)
case("spmv_csr", "y(i) = A(i,j) * x(j)", {"A": "csr"}, "float64", {"A": A, "x": x},
     {"i": 40, "j": 30})
case("spmm_tiled", "Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, "float64", {"A": A, "B": B},
     {"i": 40, "j": 30, "k": 70})
case("fused_workspace_f32", "Y(j,i) = max(sum(k, W(j,k) * X(k,i)) + C(j), 0)", {"W": "csr"},
     "float32", {"W": W, "X": X, "C": C}, {"i": 70, "j": 40, "k": 30})
case("transpose_f32", "Y(k,i) = X(i,k)", {}, "float32", {"X": X}, {"i": 30, "k": 70})
NAMES = ["spmv_csr", "spmm_tiled", "fused_workspace_f32", "transpose_f32"]
with open(os.path.join(OUT, "run.sh"), "w") as f:
    f.write('cd "$(dirname "$0")"\nstatus=0\n')
    for name in NAMES:
        f.write(f'nvcc -O2 -o {name} {name}.cu && ./{name} || status=1\n')
    f.write('exit $status\n')
print(f"wrote {len(NAMES)} cases and run.sh to {OUT}/")
