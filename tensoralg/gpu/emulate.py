"""Running the CUDA kernels on the CPU, one OS thread per CUDA thread, for tests.

`EmulatedDriver` is a `Driver` whose device memory is host memory and whose kernels are the
very translation unit the GPU gets, compiled as C++ with g++ after a small header (`SHIM`) that
defines what CUDA provides: ``threadIdx`` and friends as thread-local variables, atomics as
``std::atomic_ref``, and the warp and block primitives the kernels use (``__shfl_xor_sync``,
``__syncthreads``) as barriers among real threads. Blocks run one after another; each block's
threads run at once, so lanes that exchange values through shuffles really wait for each other.
A shuffle or barrier that not every thread it names reaches (a divergence the GPU would hang
or misbehave on) aborts the process after 30 seconds with a message, rather than passing.

What this checks: the kernels' arithmetic and indexing, the grid mappings (grid-stride loops,
lanes, merge-path shares and carries, two-phase assembly, the scan), atomics under real
concurrency, and the lane masks of the shuffles. What it does not: the GPU's memory model
beyond what C++ atomics and barriers give, timing, occupancy, and anything of nvcc's own.
The driver launches small blocks (64 threads) and small grids (3 blocks), so every
grid-striding loop takes several turns.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tensoralg.codegen.cache import DiskCache
from tensoralg.codegen.cuda import CudaProgram
from tensoralg.errors import CompileError, UnsupportedError
from tensoralg.gpu.driver import CTYPES, Buffer

SHIM = r"""
// tensoralg's CUDA emulation: __global__ functions run on CPU threads (gpu/emulate.py).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

struct ta_uint3 { unsigned x, y, z; };

namespace ta_emu {
struct Barrier {
  std::mutex mutex;
  std::condition_variable changed;
  int waiting = 0;
  long generation = 0;
  void wait(int count) {
    std::unique_lock<std::mutex> lock(mutex);
    long mine = generation;
    if (++waiting == count) { waiting = 0; ++generation; changed.notify_all(); return; }
    if (!changed.wait_for(lock, std::chrono::seconds(30), [&] { return generation != mine; })) {
      std::fprintf(stderr, "tensoralg emulator: threads never met at a shuffle or "
                           "__syncthreads that names them all\n");
      std::abort();
    }
  }
};
struct Warp { Barrier groups[32]; unsigned long long slots[32]; };
inline thread_local ta_uint3 thread_index{0, 0, 0};
inline thread_local ta_uint3 block_index{0, 0, 0};
inline ta_uint3 block_size{1, 1, 1};
inline ta_uint3 grid_size{1, 1, 1};
inline Barrier block_barrier;
inline std::vector<Warp>* warps = nullptr;

inline void launch(unsigned grid, unsigned block, const std::function<void()>& body) {
  grid_size = {grid, 1, 1};
  block_size = {block, 1, 1};
  std::vector<Warp> lanes((block + 31) / 32);
  warps = &lanes;
  for (unsigned b = 0; b < grid; ++b) {
    std::vector<std::thread> threads;
    threads.reserve(block);
    for (unsigned t = 0; t < block; ++t) {
      threads.emplace_back([=, &body] {
        thread_index = {t, 0, 0};
        block_index = {b, 0, 0};
        body();
      });
    }
    for (auto& thread : threads) thread.join();
  }
  warps = nullptr;
}
}  // namespace ta_emu

#define threadIdx (ta_emu::thread_index)
#define blockIdx (ta_emu::block_index)
#define blockDim (ta_emu::block_size)
#define gridDim (ta_emu::grid_size)
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static

template <class T> T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}

inline void __syncthreads() { ta_emu::block_barrier.wait((int)ta_emu::block_size.x); }

template <class T> T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  (void)width;
  const unsigned lane = threadIdx.x & 31u;
  const unsigned source = lane ^ (unsigned)lane_mask;
  if (!((mask >> lane) & 1u) || !((mask >> source) & 1u)) {
    std::fprintf(stderr, "tensoralg emulator: lane %u shuffles with lane %u outside mask %x\n",
                 lane, source, mask);
    std::abort();
  }
  ta_emu::Warp& warp = (*ta_emu::warps)[threadIdx.x >> 5];
  ta_emu::Barrier& barrier = warp.groups[__builtin_ctz(mask)];
  const int count = __builtin_popcount(mask);
  std::memcpy(&warp.slots[lane], &value, sizeof(T));
  barrier.wait(count);
  T result;
  std::memcpy(&result, &warp.slots[source], sizeof(T));
  barrier.wait(count);
  return result;
}

inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
"""


FLAGS = ("-std=c++20", "-O1", "-pthread", "-fPIC", "-w")


class EmulatedDriver:
    """A `Driver` that runs kernels on CPU threads (module docstring)."""

    name = "emulator"
    device = "CPU emulation (g++, one thread per CUDA thread)"
    arch = "emulated"
    block = 64
    max_blocks = 3
    merge_items = 4
    scan_chunk = 4
    heap_bytes = 1 << 30

    def __init__(self, compiler: str = "g++") -> None:
        if shutil.which(compiler) is None:
            raise UnsupportedError(f"the CUDA emulator needs a C++ compiler ({compiler})")
        self.compiler = compiler
        self.modules: dict[str, Any] = {}
        self.workdir: Path | None = None

    def _shim(self) -> Path:
        """The shim header, precompiled once per driver (it pulls in <thread> and friends,
        which would otherwise take most of each kernel's compile time)."""
        if self.workdir is None:
            workdir = Path(tempfile.mkdtemp(prefix="tensoralg-emu-"))
            (workdir / "shim.h").write_text(SHIM)
            argv = [self.compiler, *FLAGS, "-x", "c++-header", str(workdir / "shim.h"),
                    "-o", str(workdir / "shim.h.gch")]
            subprocess.run(argv, capture_output=True, check=False)   # without it: slower
            weakref.finalize(self, shutil.rmtree, workdir, True)
            self.workdir = workdir
        return self.workdir / "shim.h"

    def allocate(self, nbytes: int) -> Buffer:
        memory = np.zeros(max(nbytes, 1) + 64, np.uint8)
        ptr = (memory.ctypes.data + 63) // 64 * 64      # as aligned as cudaMalloc's, nearly
        return Buffer(ptr, nbytes, memory)

    def copy_in(self, ptr: int, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        ctypes.memmove(ptr, array.ctypes.data, array.nbytes)

    def copy_out(self, array: np.ndarray, ptr: int) -> None:
        ctypes.memmove(array.ctypes.data, ptr, array.nbytes)

    def zero(self, ptr: int, nbytes: int) -> None:
        ctypes.memset(ptr, 0, nbytes)

    def load(self, program: CudaProgram, cache: DiskCache | None) -> Any:
        source = program.source + "\n" + _wrappers(program)
        key = hashlib.sha256(source.encode()).hexdigest()
        found = self.modules.get(key)
        if found is None:
            found = self.modules[key] = self._compile(source)
        return found

    def _compile(self, source: str) -> ctypes.CDLL:
        shim = self._shim()
        workdir = Path(tempfile.mkdtemp(prefix="tensoralg-emu-", dir=shim.parent))
        path, library = workdir / "kernel.cpp", workdir / "kernel.so"
        path.write_text(source)
        argv = [self.compiler, *FLAGS, "-shared", "-include", str(shim), "-o", str(library),
                str(path)]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise CompileError(f"the emulator's C++ compiler failed; source kept at {path}\n"
                               f"{result.stderr.strip()[:4000]}")
        loaded = ctypes.CDLL(str(library))
        shutil.rmtree(workdir, ignore_errors=True)
        return loaded

    def launch(self, module: Any, kernel: str, grid: int, block: int,
               args: Sequence[tuple[str, int | float]]) -> None:
        values = [ctypes.c_void_p(value) if ctype.endswith("*") else CTYPES[ctype](value)
                  for ctype, value in args]
        pointers = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.addressof(value) for value in values])
        function = getattr(module, f"ta_emu_{kernel}")
        function.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
        function(grid, block, ctypes.addressof(pointers))

    def synchronize(self) -> None:
        pass


def _wrappers(program: CudaProgram) -> str:
    """One ``ta_emu_NAME(grid, block, args)`` per kernel: calls it in every emulated thread
    with its arguments read from ``args`` (pointers to the values, as cuLaunchKernel takes)."""
    lines = []
    for kernel in program.kernels:
        values = ", ".join(f"*({ctype}*)args[{k}]" for k, (_, ctype) in enumerate(kernel.args))
        lines.append(f'extern "C" void ta_emu_{kernel.name}(unsigned grid, unsigned block, '
                     f'void** args) {{\n'
                     f'  ta_emu::launch(grid, block, [args] {{ {kernel.name}({values}); }});\n'
                     f'}}\n')
    return "\n".join(lines)


__all__ = ["SHIM", "EmulatedDriver"]
