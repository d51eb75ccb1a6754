"""The GPU as the runtime sees it: memory, modules and launches, through pycuda or cuda-python.

A `Driver` allocates device memory, copies to and from it, loads a translation unit as a module
and launches its kernels with arguments given as (C type, value) pairs. Two drivers reach a real
GPU: `PycudaDriver` (pycuda; kernels compiled by nvcc, as ``SourceModule`` does) and
`CudaPythonDriver` (NVIDIA's cuda-python; kernels compiled by NVRTC, loaded through the driver
API), for machines where pycuda cannot be built. Both use the device's primary context, which
CuPy uses too, so device pointers pass between them. ``tensoralg/gpu/emulate.py`` has a third,
which runs the kernels on the CPU for tests.

Compiled kernels (cubins) are kept in the same owner-only, checksummed `DiskCache` as the CPU
kernels, keyed by the source, the architecture, the driver's version and the compiler.
"""
from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from tensoralg.codegen.cache import DiskCache
from tensoralg.codegen.cuda import CudaProgram
from tensoralg.errors import CompileError, KernelRuntimeError, UnsupportedError

INSTALL = 'pip install "tensoralg[cuda]"'
CTYPES = {"bool": ctypes.c_bool, "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64,
          "float": ctypes.c_float, "double": ctypes.c_double}
NUMPY = {"bool": np.bool_, "int32_t": np.int32, "int64_t": np.int64, "float": np.float32,
         "double": np.float64}
HEAP_LIMIT = 8 << 30          # device heap reserved for per-thread buffers, at most


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """Device memory at ``ptr`` of ``nbytes``; ``owner`` frees it when the buffer is gone."""

    ptr: int
    nbytes: int
    owner: object = field(default=None, repr=False)


class Driver(Protocol):
    """What the runtime needs of a GPU (see the module docstring).

    ``block`` threads per block; ``max_blocks`` caps the grids of grid-striding kernels;
    ``merge_items`` merge-path steps per thread; ``scan_chunk`` values per scan thread;
    ``heap_bytes`` the device heap for per-thread buffers.
    """

    name: str
    device: str
    arch: str
    block: int
    max_blocks: int
    merge_items: int
    scan_chunk: int
    heap_bytes: int

    def allocate(self, nbytes: int) -> Buffer: ...
    def copy_in(self, ptr: int, array: np.ndarray) -> None: ...
    def copy_out(self, array: np.ndarray, ptr: int) -> None: ...
    def zero(self, ptr: int, nbytes: int) -> None: ...
    def load(self, program: CudaProgram, cache: DiskCache | None) -> Any: ...
    def launch(self, module: Any, kernel: str, grid: int, block: int,
               args: Sequence[tuple[str, int | float]]) -> None: ...
    def synchronize(self) -> None: ...


def cubin_entry(source: str, arch: str, identity: str) -> str:
    """The cache key of a cubin: the source, the architecture, the driver and compiler."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    return f"cubin|{digest}|{arch}|{identity}"


def cached_cubin(source: str, arch: str, identity: str, cache: DiskCache | None,
                 compile_: Any) -> bytes:
    """The cubin of ``source``: from ``cache`` when stored, else ``compile_(source)`` (then
    stored)."""
    entry = cubin_entry(source, arch, identity)
    if cache is not None:
        found = cache.get(entry, "cuda")
        if found is not None:
            return found
    cubin = compile_(source)
    if cache is not None:
        cache.put(entry, "cuda", cubin)
    return cubin


def nvcc_cubin(source: str, arch: str, nvcc: str = "nvcc") -> bytes:
    """Compile ``source`` to a cubin for ``arch`` with nvcc (what pycuda's ``SourceModule``
    runs); `CompileError` with nvcc's messages on failure, the source kept on disk."""
    workdir = Path(tempfile.mkdtemp(prefix="tensoralg-cu-"))
    path, cubin = workdir / "kernel.cu", workdir / "kernel.cubin"
    path.write_text(source)
    argv = [nvcc, "--cubin", f"-arch={arch}", "-O3", "-o", str(cubin), str(path)]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as error:
        raise CompileError(f"cannot run nvcc ({error}); source kept at {path}") from None
    if result.returncode != 0:
        raise CompileError(f"nvcc failed (exit {result.returncode}); source kept at {path}\n"
                           f"{' '.join(argv)}\n{result.stderr.strip()}")
    data = cubin.read_bytes()
    shutil.rmtree(workdir, ignore_errors=True)
    return data


def nvrtc_cubin(source: str, arch: str) -> bytes:
    """Compile ``source`` to a cubin for ``arch`` with NVRTC (through cuda-python)."""
    from cuda.bindings import nvrtc

    def check(result: tuple, what: str, program: Any = None) -> Any:
        if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            log = _nvrtc_log(nvrtc, program) if program is not None else ""
            raise CompileError(f"NVRTC {what} failed ({result[0]}):\n{log}")
        return result[1] if len(result) == 2 else result[1:]

    program = check(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []),
                    "create")
    options = [f"--gpu-architecture={arch}".encode(), b"--std=c++17"]
    check(nvrtc.nvrtcCompileProgram(program, len(options), options), "compile", program)
    size = check(nvrtc.nvrtcGetCUBINSize(program), "cubin size")
    cubin = b" " * size
    check(nvrtc.nvrtcGetCUBIN(program, cubin), "cubin")
    nvrtc.nvrtcDestroyProgram(program)
    return cubin


def _nvrtc_log(nvrtc: Any, program: Any) -> str:
    _, size = nvrtc.nvrtcGetProgramLogSize(program)
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.decode(errors="replace").strip()


def heap_size(total_memory: int) -> int:
    """The device heap to reserve: an eighth of the device's memory, at most `HEAP_LIMIT`.

    >>> heap_size(16 << 30) == 2 << 30
    True
    """
    return min(HEAP_LIMIT, total_memory // 8)


# ---------------------------------------------------------------------------------------------
# pycuda


class PycudaDriver:
    """The GPU through pycuda; kernels compiled by nvcc (``pycuda.compiler.compile``)."""

    name = "pycuda"
    block = 256
    merge_items = 16
    scan_chunk = 256

    def __init__(self) -> None:
        import pycuda.driver as cuda

        self.cuda = cuda
        cuda.init()
        if cuda.Device.count() == 0:
            raise UnsupportedError("pycuda sees no CUDA device")
        device = cuda.Device(0)
        self.context = device.retain_primary_context()
        self.context.push()
        major, minor = device.compute_capability()
        self.arch = f"sm_{major}{minor}"
        self.device = f"{device.name()} ({self.arch})"
        self.max_blocks = 32 * device.get_attribute(
            cuda.device_attribute.MULTIPROCESSOR_COUNT)
        self.heap_bytes = heap_size(device.total_memory())
        try:
            cuda.Context.set_limit(cuda.limit.MALLOC_HEAP_SIZE, self.heap_bytes)
        except cuda.Error:
            self.heap_bytes = cuda.Context.get_limit(cuda.limit.MALLOC_HEAP_SIZE)
        self.identity = f"pycuda|driver {cuda.get_driver_version()}|{_nvcc_version()}"

    def allocate(self, nbytes: int) -> Buffer:
        allocation = self.cuda.mem_alloc(max(nbytes, 1))
        return Buffer(int(allocation), nbytes, allocation)

    def copy_in(self, ptr: int, array: np.ndarray) -> None:
        if array.nbytes:
            self.cuda.memcpy_htod(ptr, np.ascontiguousarray(array))

    def copy_out(self, array: np.ndarray, ptr: int) -> None:
        if array.nbytes:
            self.cuda.memcpy_dtoh(array, ptr)

    def zero(self, ptr: int, nbytes: int) -> None:
        if nbytes:
            self.cuda.memset_d8(ptr, 0, nbytes)

    def load(self, program: CudaProgram, cache: DiskCache | None) -> Any:
        from pycuda.compiler import compile as compile_cuda

        def build(text: str) -> bytes:
            return compile_cuda(text, arch=self.arch, no_extern_c=True, cache_dir=False)

        return self.cuda.module_from_buffer(
            cached_cubin(program.source, self.arch, self.identity, cache, build))

    def launch(self, module: Any, kernel: str, grid: int, block: int,
               args: Sequence[tuple[str, int | float]]) -> None:
        packed = [np.uintp(value) if ctype.endswith("*") else NUMPY[ctype](value)
                  for ctype, value in args]
        module.get_function(kernel)(*packed, block=(block, 1, 1), grid=(grid, 1))

    def synchronize(self) -> None:
        try:
            self.context.synchronize()
        except self.cuda.Error as error:
            raise KernelRuntimeError(f"a GPU kernel failed: {error}") from None


def _nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "no nvcc"
    result = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "nvcc"


# ---------------------------------------------------------------------------------------------
# cuda-python


class CudaPythonDriver:
    """The GPU through NVIDIA's cuda-python: NVRTC compiles, the driver API loads and runs."""

    name = "cuda-python"
    block = 256
    merge_items = 16
    scan_chunk = 256

    def __init__(self) -> None:
        from cuda.bindings import driver as cu
        from cuda.bindings import nvrtc

        self.cu = cu
        self._check(cu.cuInit(0), "cuInit")
        if self._check(cu.cuDeviceGetCount(), "cuDeviceGetCount") == 0:
            raise UnsupportedError("cuda-python sees no CUDA device")
        device = self._check(cu.cuDeviceGet(0), "cuDeviceGet")
        self.context = self._check(cu.cuDevicePrimaryCtxRetain(device), "retain context")
        self._check(cu.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        attribute = cu.CUdevice_attribute
        major = self._attribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        minor = self._attribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        self.arch = f"sm_{major}{minor}"
        name = self._check(cu.cuDeviceGetName(256, device), "cuDeviceGetName")
        name = name.split(b"\0")[0].decode()
        self.device = f"{name} ({self.arch})"
        self.max_blocks = 32 * self._attribute(
            attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device)
        total = self._check(cu.cuDeviceTotalMem(device), "cuDeviceTotalMem")
        self.heap_bytes = heap_size(int(total))
        limit = cu.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE
        if cu.cuCtxSetLimit(limit, self.heap_bytes)[0] != cu.CUresult.CUDA_SUCCESS:
            self.heap_bytes = int(self._check(cu.cuCtxGetLimit(limit), "cuCtxGetLimit"))
        version = self._check(cu.cuDriverGetVersion(), "cuDriverGetVersion")
        try:
            compiler = "nvrtc " + ".".join(map(str, nvrtc.nvrtcVersion()[1:]))
        except Exception:   # no NVRTC library: nvcc compiles, where there is one
            compiler = _nvcc_version()
            if compiler == "no nvcc":
                raise UnsupportedError("cuda-python found neither NVRTC (pip install "
                                       "nvidia-cuda-nvrtc) nor nvcc to compile kernels") from None
        self.compiler = compiler
        self.identity = f"cuda-python|driver {version}|{compiler}"

    def _check(self, result: tuple, what: str) -> Any:
        cu = self.cu
        if result[0] != cu.CUresult.CUDA_SUCCESS:
            _, text = cu.cuGetErrorString(result[0])
            message = text.decode() if isinstance(text, bytes) else str(result[0])
            raise KernelRuntimeError(f"CUDA driver call {what} failed: {message}")
        return result[1] if len(result) == 2 else result[1:]

    def _attribute(self, attribute: Any, device: Any) -> int:
        return int(self._check(self.cu.cuDeviceGetAttribute(attribute, device), str(attribute)))

    def allocate(self, nbytes: int) -> Buffer:
        ptr = self._check(self.cu.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc")
        owner = _Freed(self.cu, ptr)
        return Buffer(int(ptr), nbytes, owner)

    def copy_in(self, ptr: int, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.nbytes:
            self._check(self.cu.cuMemcpyHtoD(ptr, array.ctypes.data, array.nbytes),
                        "cuMemcpyHtoD")

    def copy_out(self, array: np.ndarray, ptr: int) -> None:
        if array.nbytes:
            self._check(self.cu.cuMemcpyDtoH(array.ctypes.data, ptr, array.nbytes),
                        "cuMemcpyDtoH")

    def zero(self, ptr: int, nbytes: int) -> None:
        if nbytes:
            self._check(self.cu.cuMemsetD8(ptr, 0, nbytes), "cuMemsetD8")

    def load(self, program: CudaProgram, cache: DiskCache | None) -> Any:
        def build(text: str) -> bytes:
            if self.compiler.startswith("nvrtc"):
                return nvrtc_cubin(text, self.arch)
            return nvcc_cubin(text, self.arch)

        cubin = np.frombuffer(cached_cubin(program.source, self.arch, self.identity, cache,
                                           build), np.uint8).copy()
        module = self._check(self.cu.cuModuleLoadData(cubin.ctypes.data), "cuModuleLoadData")
        return _Module(self, module)

    def launch(self, module: Any, kernel: str, grid: int, block: int,
               args: Sequence[tuple[str, int | float]]) -> None:
        values = [ctypes.c_void_p(value) if ctype.endswith("*") else CTYPES[ctype](value)
                  for ctype, value in args]
        pointers = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.addressof(value) for value in values])
        function = module.function(kernel)
        self._check(self.cu.cuLaunchKernel(function, grid, 1, 1, block, 1, 1, 0, 0,
                                           ctypes.addressof(pointers), 0), f"launch {kernel}")

    def synchronize(self) -> None:
        self._check(self.cu.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")


class _Freed:
    """Frees a cuda-python allocation when dropped."""

    def __init__(self, cu: Any, ptr: Any) -> None:
        weakref.finalize(self, cu.cuMemFree, ptr)


class _Module:
    """A loaded cuda-python module and its functions, looked up once each."""

    def __init__(self, driver: CudaPythonDriver, module: Any) -> None:
        self.driver, self.module, self.functions = driver, module, {}

    def function(self, name: str) -> Any:
        found = self.functions.get(name)
        if found is None:
            found = self.functions[name] = self.driver._check(
                self.driver.cu.cuModuleGetFunction(self.module, name.encode()),
                f"cuModuleGetFunction {name}")
        return found


# ---------------------------------------------------------------------------------------------
# Opening one


def open_driver() -> Driver:
    """The first route to a GPU that works: pycuda, then cuda-python.

    `UnsupportedError` says why neither does: which package is missing (and how to install
    it), or that no GPU is visible.
    """
    reasons = []
    for route, make in (("pycuda", PycudaDriver), ("cuda-python", CudaPythonDriver)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # pycuda warns before it fails to import
                return make()
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] in ("pycuda", "cuda"):
                reasons.append(f"{route} is not installed")
            else:
                reasons.append(f"{route} cannot be imported ({error})")
        except UnsupportedError as error:
            reasons.append(str(error))
        except Exception as error:   # the driver library itself is missing or failed
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            reasons.append(f"{route} cannot reach a GPU: {first}")
    reasons = [reason.rstrip(". ") for reason in reasons]
    raise UnsupportedError("the cuda backend cannot run kernels here: " + "; ".join(reasons)
                           + f". On a machine with an NVIDIA GPU and its driver: {INSTALL}; "
                           f"or run on the CPU with backend='llvm' or 'c'")


__all__ = ["INSTALL", "Buffer", "CudaPythonDriver", "Driver", "PycudaDriver", "cached_cubin",
           "cubin_entry", "heap_size", "nvcc_cubin", "nvrtc_cubin", "open_driver"]
