#!/usr/bin/env bash
# Prepare .whl/ (or $WHEELS) for benchmarks/gpu_check.sh on a GPU machine without network: a pycuda wheel
# for that machine's Python (default 3.12, the device tool's H200 image) built here against
# this machine's CUDA toolkit, and the pure-Python wheels pycuda needs. Run it here, before the
# device call, then pass carry [".whl"] to it (.gitignore keeps .whl/ out of git, as carry
# requires). Takes about 6 minutes on 2 cores.
#
#     bash benchmarks/gpu_wheels.sh [PYTHON]     # PYTHON: an interpreter of the GPU's version
#
# This machine has the toolkit's headers but no driver library, so pycuda links against an
# empty stand-in libcuda.so (soname libcuda.so.1); the real driver resolves the symbols when
# pycuda is imported on the GPU machine. cuRAND is left out (this toolkit has no libcurand).
set -euo pipefail
PYTHON="${1:-python3.12}"
CUDA_ROOT="${CUDA_ROOT:-/usr/local/cuda}"
WHEELS="$(mkdir -p "${WHEELS:-.whl}" && cd "${WHEELS:-.whl}" && pwd)"
WORK="$(mktemp -d)"
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/pip" install -q numpy setuptools wheel
"$WORK/venv/bin/pip" download -q --no-deps --no-build-isolation -d "$WORK" pycuda
"$WORK/venv/bin/pip" download -q -d "$WHEELS" --only-binary=:all: pytools platformdirs mako \
    typing-extensions markupsafe siphash24 --python-version "$("$PYTHON" -c \
    'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 || true
mkdir -p "$WORK/stub"
echo "" > "$WORK/stub/empty.c"
gcc -shared -o "$WORK/stub/libcuda.so" -Wl,-soname,libcuda.so.1 "$WORK/stub/empty.c"
tar -xzf "$WORK"/pycuda-*.tar.gz -C "$WORK"
cd "$WORK"/pycuda-*/
"$WORK/venv/bin/python" configure.py --cuda-root="$CUDA_ROOT" --cudadrv-lib-dir="$WORK/stub" \
    --no-cuda-enable-curand >/dev/null
"$WORK/venv/bin/pip" wheel -q --no-build-isolation --no-deps -w "$WHEELS" .
cd "$OLDPWD"
ls -l "$WHEELS"
rm -rf "$WORK"
