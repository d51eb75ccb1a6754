#!/usr/bin/env bash
# The cuda backend's check on a GPU machine, within 8 minutes, from the repository root:
#
#     bash benchmarks/gpu_check.sh
#
# Made for a bare machine that may have no network (the device tool's H200: CUDA 13, nvcc,
# CuPy, cuda-python and NVRTC installed, no pycuda, nothing can be fetched). It
#   1. shows the GPU and driver (nvidia-smi);
#   2. installs what it can: tensoralg itself (pip install -e ".[test,cuda]" where pip reaches
#      an index, else straight from the checkout through PYTHONPATH), pycuda from the wheels
#      in .whl/ when they were carried there (benchmarks/gpu_wheels.sh), and the CuPy wheel
#      matching the driver (cupy-cuda12x or cupy-cuda13x) when CuPy is missing;
#   3. says which route reaches the GPU (pycuda, else cuda-python);
#   4. runs the GPU tests (tests/test_cuda_gpu.py, the ONNX models on the cuda backend in
#      tests/test_onnx_cuda.py, then the compile checks) for at most 200 s;
#   5. runs the benchmark against cuSPARSE (benchmarks/gpu_bench.py) for at most 200 s.
# Everything is logged under $OUT (or ./gpu_check_out): gpu_check.log, tests.log, bench.log,
# gpu_bench.json (written after every case, so a cut-short run keeps what it measured).
set -uo pipefail

START=$(date +%s)
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
export TENSORALG_CACHE_DIR="${TENSORALG_CACHE_DIR:-$OUT/kernel-cache}"

elapsed() { echo $(( $(date +%s) - START )); }
step() { echo "== $* (at $(elapsed) s)" | tee -a "$LOG"; }

step "1. the machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv \
    2>&1 | tee -a "$LOG"
CUDA_MAJOR=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
echo "driver's CUDA: ${CUDA_MAJOR:-unknown}; python: $($PY --version 2>&1)" | tee -a "$LOG"

step "2. install"
if [ -n "${GPU_CHECK_SKIP_INSTALL:-}" ]; then      # a dry run where everything is installed
    echo "skipped (GPU_CHECK_SKIP_INSTALL)" | tee -a "$LOG"
else
PIP=("$PY" -m pip install -q --retries 0 --timeout 10)     # fail fast where offline
if timeout 150 "${PIP[@]}" -e ".[test,cuda]" >>"$LOG" 2>&1; then
    echo "installed tensoralg[test,cuda] with pip" | tee -a "$LOG"
else
    echo "pip could not install tensoralg[test,cuda] (offline, or pycuda did not build);" \
         "using the checkout through PYTHONPATH" | tee -a "$LOG"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if ls .whl/pycuda-*.whl >/dev/null 2>&1; then
        timeout 60 "$PY" -m pip install -q --no-index --find-links .whl pycuda >>"$LOG" 2>&1 \
            && echo "pycuda installed from .whl/" | tee -a "$LOG" \
            || echo "pycuda from .whl/ did not install (see the log)" | tee -a "$LOG"
    fi
fi
if ! "$PY" -c "import cupy" >/dev/null 2>&1 && [ -n "${CUDA_MAJOR:-}" ]; then
    WHEEL="cupy-cuda12x"
    [ "$CUDA_MAJOR" -ge 13 ] && WHEEL="cupy-cuda13x"
    timeout 90 "${PIP[@]}" "$WHEEL" >>"$LOG" 2>&1 \
        && echo "installed $WHEEL" | tee -a "$LOG" \
        || echo "could not install $WHEEL: the CuPy checks and the benchmark will skip" \
        | tee -a "$LOG"
fi
fi
for module in numpy scipy llvmlite pytest hypothesis cupy pycuda cuda.bindings.nvrtc; do
    "$PY" -c "import $module; print('$module', getattr($module, '__version__', ''))" \
        2>/dev/null | tee -a "$LOG" || echo "$module: missing" | tee -a "$LOG"
done

step "3. the routes to the GPU: an SpMV through each"
timeout 120 "$PY" - <<'PYEOF' 2>&1 | tee -a "$LOG"
import numpy as np, scipy.sparse as sp
import tensoralg as ta, tensoralg.gpu as gpu
from tensoralg.gpu.driver import CudaPythonDriver, PycudaDriver
reason = gpu.available()
print(reason if reason else f"GPU ready: {gpu.gpu_context()}")
a = sp.random_array((5000, 4000), density=0.01, format="csr", random_state=0)
x = np.random.default_rng(0).standard_normal(4000)
kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"})
bound = kernel._bound({"A": a, "x": x})
compiled = kernel._program_for(bound, (5000,))
for route in (PycudaDriver, CudaPythonDriver):
    try:
        context = gpu.GpuContext(route())
        for mapping in (None, "thread-per-row", "warp-per-row", "nonzero-split"):
            y, choice = gpu.launch(context, compiled, bound, np.dtype("float64"), (5000,),
                                   None, mapping)
            error = np.abs(y.to_host() - a @ x).max()
            print(f"{route.name}: {choice.mapping}: max error {error:.2e}",
                  "OK" if error < 1e-9 else "WRONG")
    except Exception as failure:
        print(f"{route.name}: not usable here: {type(failure).__name__}: {failure}")
PYEOF

step "4. tests (at most 200 s)"
timeout 200 "$PY" -m pytest -q -x -p no:cacheprovider -rs tests/test_cuda_gpu.py \
    tests/test_onnx_cuda.py tests/test_cuda_emit.py 2>&1 | tee "$OUT/tests.log" | tail -25
echo "tests: exit ${PIPESTATUS[0]}" | tee -a "$LOG"

step "5. benchmark against cuSPARSE (at most 200 s)"
BUDGET=$(( 440 - $(elapsed) ))          # leaves the benchmark's own margin inside 8 minutes
[ "$BUDGET" -gt 190 ] && BUDGET=190
if [ "$BUDGET" -gt 20 ]; then
    timeout $(( BUDGET + 10 )) "$PY" benchmarks/gpu_bench.py --budget "$BUDGET" \
        --out "$OUT/gpu_bench.json" 2>&1 | tee "$OUT/bench.log"
    echo "benchmark: exit ${PIPESTATUS[0]}" | tee -a "$LOG"
else
    echo "no time left for the benchmark" | tee -a "$LOG"
fi

step "done"
