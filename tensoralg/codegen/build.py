"""Source text and callables from an `ir.nodes.Function`: `emit_source` and `build`.

`build` compiles with llvmlite (object code loaded into an MCJIT engine) or with the system C
compiler (a shared object loaded with ctypes), optionally through a `DiskCache`. Both paths go
through the same binary form (object code, shared object) whether freshly compiled or read from
the cache, so a cache hit runs exactly what a miss would have run.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import struct
import tempfile
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from tensoralg.codegen.c import C_FLAGS, CEmitter, compile_c, compiler_command
from tensoralg.codegen.cache import DiskCache
from tensoralg.codegen.cuda import CudaEmitter
from tensoralg.codegen.link import SHARED, link_later, remembered_fingerprint
from tensoralg.codegen.packed import c_entry, entry_name, packed_caller
from tensoralg.codegen.target import target_for
from tensoralg.errors import CompileError, UnsupportedError
from tensoralg.ir.nodes import Function, Param, Ptr, Scalar

if TYPE_CHECKING:
    from tensoralg.codegen.tiered import OptimisedBuild

CTYPES = {
    Scalar.BOOL: ctypes.c_bool,
    Scalar.I32: ctypes.c_int32,
    Scalar.I64: ctypes.c_int64,
    Scalar.F32: ctypes.c_float,
    Scalar.F64: ctypes.c_double,
}


def emit_source(fn: Function, lang: str) -> str:
    """Readable source of ``fn`` in ``lang``: ``"c"``, ``"cuda"`` or ``"llvm"`` (optimised IR).

    >>> from tensoralg.ir.nodes import Function, Block
    >>> print(emit_source(Function("k", (), Block()), "c").splitlines()[-3])
    int32_t k(void) {
    """
    fn = target_for(lang).legalize(fn)
    match lang:
        case "c":
            return CEmitter().emit(fn)
        case "cuda":
            return CudaEmitter().emit(fn)
        case "llvm":
            from tensoralg.codegen.llvm import llvm_source  # llvmlite loads on first use

            return llvm_source(fn)
    raise UnsupportedError(f"no source emitter for {lang!r}")


@dataclass(frozen=True, slots=True, eq=False)
class CompiledKernel:
    """A callable kernel: ``kernel(*args) -> status`` with one argument per parameter.

    Pointers are passed as integer addresses (``array.ctypes.data``), scalars as Python numbers.
    ``function`` is the raw ctypes function (its address and ``argtypes`` are the kernel's ABI
    for thread ranges); ``call`` runs the same kernel through its packed entry
    (``codegen/packed.py``), ~1.4 µs cheaper a call: callers that call a kernel once per
    request take ``call``. ``from_cache`` says whether the machine code came from a
    `DiskCache`.

    >>> # kernel = build(fn, "llvm"); status = kernel(n, x.ctypes.data, y.ctypes.data)
    """

    backend: str
    name: str
    params: tuple[Param, ...]
    source: str
    function: ctypes._CFuncPtr = field(repr=False)
    from_cache: bool = False
    # The engine and target machine (llvm) or the loaded library (c) behind `function`.
    keepalive: tuple[object, ...] = field(default=(), repr=False)
    call: Callable[..., int] | None = field(default=None, repr=False)
    # A quick build's optimised build (codegen/tiered.py): `function` and `call` enter the
    # quick object, which calls the optimised code once it is loaded.
    optimised: OptimisedBuild | None = field(default=None, repr=False)

    @property
    def pending(self) -> bool:
        """Whether this is a quick build still running unoptimised code."""
        return self.optimised is not None and self.optimised.pending

    def settled(self) -> "CompiledKernel":
        """This kernel once it runs optimised code: a quick build waits for its optimised
        build and returns it (its ``source`` is empty: a background build prints no IR,
        ``codegen.llvm.compile_object``); any other is itself."""
        if self.optimised is None:
            return self
        self.optimised.wait()
        kernel = self.optimised.kernel
        return kernel if isinstance(kernel, CompiledKernel) else self

    def __call__(self, *args: int | float | bool) -> int:
        return (self.call or self.function)(*args)

    def __str__(self) -> str:
        params = ", ".join(f"{p.var.dtype} {p.var.name}" for p in self.params)
        origin = "cache" if self.from_cache else "compiled"
        return f"<{self.backend} kernel {self.name}({params}) from {origin}>"


def function_type(params: tuple[Param, ...]) -> type[ctypes._CFuncPtr]:
    """The ctypes prototype of a kernel with ``params``: ``int32_t (*)(...)``."""
    argtypes = [
        ctypes.c_void_p if isinstance(p.var.dtype, Ptr) else CTYPES[p.var.dtype] for p in params
    ]
    return ctypes.CFUNCTYPE(ctypes.c_int32, *argtypes)


def build(
    fn: Function, backend: str, *, cache: DiskCache | None = None, key: str | None = None,
    digest: str | None = None, quick: bool = False,
) -> CompiledKernel:
    """Compile ``fn`` with ``backend`` (``"llvm"`` or ``"c"``) and load it.

    With a ``cache`` and a ``key`` naming the kernel, a stored build for this host is loaded
    instead of compiling, and a fresh build is stored. ``digest`` is :func:`ir_digest` of
    ``fn`` when the caller kept it (it costs ~1 ms of a cached kernel's first call to redo).
    ``quick`` (llvm): on a cache miss, return a quick build that runs at once and is
    optimised in the background (``codegen/tiered.py``).

    >>> # kernel = build(fn, "c", cache=DiskCache(default_cache_dir()), key=str(kernel_key))
    """
    target = target_for(backend)
    if not target.can_build:
        raise UnsupportedError(f"backend {backend!r} can emit source but not build kernels yet")
    fn = target.legalize(fn)
    # The entry names the exact IR too: whatever wrote an entry under this key (another build of
    # the compiler, another statement), only machine code for this very function is loaded.
    entry = (f"{key}\0{_fingerprint(backend, cache)}\0{digest or ir_digest(fn)}"
             if cache is not None and key is not None else None)
    if cache is not None and entry is not None:
        building = _building.get(entry)
        if building is not None:     # this process is optimising it: wait, then read it back
            building.wait()
        kernel = _cached(fn, backend, cache, entry)
        if kernel is not None:
            return kernel
    if quick and backend == "llvm":
        return _quick(fn, cache, entry)
    source, binary = _compile(fn, backend)
    kernel = _load(fn, backend, source, binary, from_cache=False)
    if kernel is None:
        raise CompileError(f"kernel {fn.name!r} was compiled but its symbol is missing")
    if cache is not None and entry is not None:
        cache.put(entry, backend, _pack(source, binary))
    return kernel


def _quick(fn: Function, cache: DiskCache | None, entry: str | None) -> CompiledKernel:
    """A quick build of ``fn`` (``codegen/tiered.py``), its optimised build queued (under
    ``entry`` in ``_building``: this process's later builds of the entry wait for that one
    and read it from the cache rather than miss it and compile again)."""
    from tensoralg.codegen import tiered
    from tensoralg.codegen.llvm import compile_object, kernel_text, target_machine

    machine = target_machine(opt=0)
    text = kernel_text(fn, machine)
    quick = tiered.quick_name(fn.name)
    address, keepalive = _load_object_code(
        tiered.quick_object(text, fn.name, fn.params, machine), quick)
    if not address:
        raise CompileError(f"kernel {fn.name!r} was compiled but its symbol is missing")
    target = keepalive[0].get_global_value_address(fn.name + tiered.TARGET)  # type: ignore

    def optimise() -> CompiledKernel:
        try:
            # No IR text (see compile_object): its source is empty, and Kernel.source("llvm")
            # optimises the function again on the asking thread to print it.
            source, binary = "", compile_object(text, fn.name)
            kernel = _load(fn, "llvm", source, binary, from_cache=False)
            if kernel is None:
                raise CompileError(f"kernel {fn.name!r} was compiled but its symbol is missing")
            if cache is not None and entry is not None:
                try:
                    cache.put(entry, "llvm", _pack(source, binary))
                except OSError as error:    # the kernel runs; only a later process loses
                    warnings.warn(f"kernel {fn.name!r}: its optimised build could not be "
                                  f"stored in the kernel cache ({error}); a new process "
                                  f"compiles it again", RuntimeWarning, stacklevel=1)
            return kernel
        finally:
            if entry is not None:
                _building.pop(entry, None)

    optimised = tiered.OptimisedBuild(fn.name, optimise, target, keepalive)
    if entry is not None:
        _building[entry] = optimised
    function = function_type(fn.params)(address)
    call = packed_caller(function, _address_in(keepalive, entry_name(quick)), fn.params)
    # The optimised kernel is kept alive by the quick one: the pointer in the quick object
    # leads into its code.
    kernel = CompiledKernel("llvm", fn.name, fn.params, text, function, False,
                            (*keepalive, optimised), call, optimised)
    tiered.submit(optimised)
    return kernel


# Cache entries whose optimised build is queued or running in this process.
_building: dict[str, object] = {}


def _cached(fn: Function, backend: str, cache: DiskCache, entry: str) -> CompiledKernel | None:
    """The kernel stored under ``entry``: for LLVM, its linked shared object when there is
    one (no LLVM needed to load it), else its object code, which is then linked for the next
    process in the background (``codegen/link.py``)."""
    if backend == "llvm":
        shared = cache.get(entry, SHARED)
        if shared is not None:
            kernel = _unpack(fn, "c", shared)
            if kernel is not None:
                return CompiledKernel("llvm", kernel.name, kernel.params, kernel.source,
                                      kernel.function, True, kernel.keepalive, kernel.call)
    payload = cache.get(entry, backend)
    kernel = _unpack(fn, backend, payload) if payload is not None else None
    if kernel is not None and backend == "llvm":
        assert payload is not None
        (length,) = struct.unpack_from("<Q", payload)
        link_later(cache, entry, payload[: 8 + length], payload[8 + length:], fn.name)
    return kernel


def ir_digest(fn: Function) -> str:
    """A name for the exact IR of ``fn`` (part of a stored build's cache entry).

    >>> from tensoralg.ir import build as b
    >>> len(ir_digest(b.function("f", [])))
    24
    """
    return hashlib.sha256(repr(fn).encode()).hexdigest()[:24]


def _fingerprint(backend: str, cache: DiskCache | None = None) -> str:
    """What the stored binary depends on besides the key: toolchain and host CPU (the LLVM
    host fingerprint, remembered in ``cache`` so that a lookup needs no LLVM)."""

    def host() -> str:
        from tensoralg.codegen.llvm import host_fingerprint

        return host_fingerprint()

    fingerprint = remembered_fingerprint(cache, host)
    if backend == "c":
        return f"{' '.join(compiler_command(os.environ))}|{' '.join(C_FLAGS)}|{fingerprint}"
    return fingerprint


def _compile(fn: Function, backend: str) -> tuple[str, bytes]:
    if backend == "c":
        source = CEmitter().emit(fn)
        return source, compile_c(source + c_entry(fn.name, fn.params), fn.name)
    from tensoralg.codegen.llvm import compile_llvm

    return compile_llvm(fn)


def _pack(source: str, binary: bytes) -> bytes:
    text = source.encode()
    return struct.pack("<Q", len(text)) + text + binary


def _unpack(fn: Function, backend: str, payload: bytes) -> CompiledKernel | None:
    (length,) = struct.unpack_from("<Q", payload)
    source = payload[8 : 8 + length].decode()
    return _load(fn, backend, source, payload[8 + length :], from_cache=True)


def _load(
    fn: Function, backend: str, source: str, binary: bytes, from_cache: bool
) -> CompiledKernel | None:
    """The kernel in ``binary``, or None when it does not export ``fn.name``."""
    if backend == "c":
        address, keepalive = _load_shared_object(binary, fn.name)
    else:
        address, keepalive = _load_object_code(binary, fn.name)
    if not address:
        return None
    function = function_type(fn.params)(address)
    call = packed_caller(function, _address_in(keepalive, entry_name(fn.name)), fn.params)
    return CompiledKernel(backend, fn.name, fn.params, source, function, from_cache, keepalive,
                          call)


def _address_in(keepalive: tuple[object, ...], name: str) -> int:
    """The address of ``name`` in a loaded module (0 when it does not export it)."""
    loaded = keepalive[0] if keepalive else None
    if isinstance(loaded, ctypes.CDLL):
        symbol = getattr(loaded, name, None)
        return (ctypes.cast(symbol, ctypes.c_void_p).value or 0) if symbol is not None else 0
    return loaded.get_function_address(name) if loaded is not None else 0  # type: ignore


def _load_shared_object(binary: bytes, name: str) -> tuple[int, tuple[object, ...]]:
    # A private copy: the loader never reads a file that someone could change after our checks.
    handle, path = tempfile.mkstemp(prefix="tensoralg-", suffix=".so")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(binary)
        library = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    except OSError as error:
        raise CompileError(f"cannot load the shared object of kernel {name!r}: {error}") from None
    finally:
        Path(path).unlink(missing_ok=True)
    try:
        symbol = getattr(library, name)
    except AttributeError:
        return 0, ()
    return ctypes.cast(symbol, ctypes.c_void_p).value or 0, (library,)


def _load_object_code(binary: bytes, name: str) -> tuple[int, tuple[object, ...]]:
    import llvmlite.binding as llvm

    from tensoralg.codegen.llvm import target_machine

    machine = target_machine()
    empty = llvm.parse_assembly("")
    empty.triple = machine.triple
    engine = llvm.create_mcjit_compiler(empty, machine)
    # llvmlite wraps `binary` without copying it: the bytes and the object file must live as
    # long as the engine, or the JIT reads freed memory (seen as heap corruption at exit).
    # The engine takes ownership of the object file: detach it so Python does not free it too.
    object_file = llvm.ObjectFileRef.from_data(binary)
    engine.add_object_file(object_file)
    object_file.detach()
    engine.finalize_object()
    return engine.get_function_address(name), (engine, machine, binary)


def build_llvm_module(module: object, entry: str, prototype: type[ctypes._CFuncPtr], *,
                      cache: DiskCache | None = None, key: str | None = None,
                      identity: str | None = None
                      ) -> tuple[ctypes._CFuncPtr, str, tuple[object, ...]]:
    """Compile a hand-built llvmlite ``module`` and load its function ``entry``.

    For emitters that write LLVM IR directly (``codegen/gemm.py``) rather than through
    `ir.nodes`; cached like :func:`build`, keyed by ``key``, the IR text and the host. With an
    ``identity`` that determines the module (its parameters and the compiler's source
    fingerprint), ``module`` may be a function that makes it, and the key uses the identity
    instead of the text: a cache hit then builds no module and, once the entry is linked,
    loads no LLVM. Returns the function (with ``prototype``), the optimised IR and what keeps
    the code alive.

    >>> # function, source, keepalive = build_llvm_module(module, "f", prototype)
    """
    from tensoralg._version import source_fingerprint

    if identity is not None:
        digest = f"{identity}|{source_fingerprint()}"
    else:
        module = module() if callable(module) else module
        digest = hashlib.sha256(str(module).encode()).hexdigest()
    entry_key = (f"{key}\0{_fingerprint('llvm', cache)}\0{digest}"
                 if cache is not None and key is not None else None)
    if cache is not None and entry_key:
        shared = cache.get(entry_key, SHARED)
        if shared is not None:
            (length,) = struct.unpack_from("<Q", shared)
            address, keepalive = _load_shared_object(shared[8 + length:], entry)
            if address:
                return prototype(address), shared[8: 8 + length].decode(), keepalive
    payload = cache.get(entry_key, "llvm") if cache is not None and entry_key else None
    if payload is not None:
        (length,) = struct.unpack_from("<Q", payload)
        source, binary = payload[8: 8 + length].decode(), payload[8 + length:]
        assert cache is not None and entry_key is not None
        link_later(cache, entry_key, payload[: 8 + length], binary, entry)
    else:
        from tensoralg.codegen.llvm import optimize, target_machine

        module = module() if callable(module) else module
        machine = target_machine()
        optimised = optimize(module, machine)
        source, binary = str(optimised), machine.emit_object(optimised)
        if cache is not None and entry_key:
            cache.put(entry_key, "llvm", _pack(source, binary))
    address, keepalive = _load_object_code(binary, entry)
    if not address:
        raise CompileError(f"module {getattr(module, 'name', '?')!r} does not export {entry!r}")
    return prototype(address), source, keepalive


def host_has_feature(feature: str, cache: DiskCache | None) -> bool:
    """Whether the host CPU has ``feature`` as LLVM names it (``"avx512f"``), read from the
    host fingerprint remembered in ``cache`` (no LLVM needed once it is there)."""
    fields = _fingerprint("llvm", cache).split("|")
    return len(fields) > 3 and f"+{feature}" in fields[3].split(",")


@functools.cache
def host_l2_bytes() -> int | None:
    """The size of the first CPU's level-2 cache in bytes, read from Linux's sysfs; ``None``
    where the system does not say (other systems, some containers).

    >>> size = host_l2_bytes()
    >>> size is None or size >= 65536
    True
    """
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in sorted(root.glob("index*")):
            if (index / "level").read_text().strip() != "2" or \
                    (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
            return int(size.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return None


def function_address(keepalive: tuple[object, ...], name: str) -> int:
    """The address of another function ``name`` of a module loaded by
    :func:`build_llvm_module` (``keepalive`` is what it returned)."""
    address = _address_in(keepalive, name)
    if not address:
        raise CompileError(f"the loaded module does not export {name!r}")
    return address


class HelperKernels:
    """The runtime's own small kernels (storage checks, a product's counts per row), built
    from ``make(*key)`` once per key (index dtypes), through the on-disk cache under the IR
    function's name and the compiler's source fingerprint.

    >>> # helpers = HelperKernels(compressed_validator, disk); helpers.get(I32).function(...)
    """

    def __init__(self, make: Callable[..., Function], disk: DiskCache | None = None) -> None:
        self.make, self.disk = make, disk
        self._built: dict[tuple, CompiledKernel] = {}
        self._lock = threading.Lock()

    def __contains__(self, key: tuple) -> bool:
        """Whether the kernel for ``key`` is built already."""
        return key in self._built

    def get(self, *key: object) -> CompiledKernel:
        """The kernel ``make(*key)``, built on first use."""
        kernel = self._built.get(key)
        if kernel is None:
            with self._lock:
                kernel = self._built.get(key)
                if kernel is None:
                    from tensoralg._version import source_fingerprint

                    fn = self.make(*key)
                    kernel = self._built[key] = build(
                        fn, "llvm", cache=self.disk, key=f"{fn.name}-{source_fingerprint()}")
        return kernel

