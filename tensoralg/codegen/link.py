"""Cached LLVM kernels as shared objects, so a new process loads them without LLVM.

Loading LLVM object code needs llvmlite (about 30 ms to import) and an MCJIT engine (10-20 ms
to finalise), so a kernel found in the disk cache still cost a new process ~50 ms. A shared
object loads with ``dlopen`` in well under a millisecond. The LLVM backend emits
position-independent object code, which either loader takes; the first process that *reads* a
kernel from the cache (a second process, not the one that compiled it: the test suite's
thousands of kernels are never linked) links it with the system C compiler in a background
thread and stores the result beside the object. Without a C compiler nothing is linked and
MCJIT loads the object as before.

The host fingerprint that names cache entries comes from LLVM (CPU name and features); it is
remembered in the cache under a cheap identity of the host (``/proc/cpuinfo``'s model and flags,
the llvmlite and Python versions, the compiler's source), so finding an entry needs no LLVM
either.
"""
from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from tensoralg._version import source_fingerprint
from tensoralg.codegen.c import compiler_command
from tensoralg.codegen.cache import DiskCache

SHARED = "llvm-so"        # the cache's backend name for linked kernels


@functools.cache
def cheap_host_identity() -> str:
    """What the LLVM host fingerprint depends on, read without LLVM.

    >>> len(cheap_host_identity())
    32
    """
    parts = [platform.machine(), platform.system(), sys.version, source_fingerprint()]
    # llvmlite's own library, by size and time: reading its version through importlib.metadata
    # took ~4 ms, most of a cached kernel's first call in a new process.
    spec = importlib.util.find_spec("llvmlite")
    library = os.path.join(os.path.dirname(spec.origin or ""), "binding") if spec else ""
    try:
        for name in sorted(os.listdir(library)):
            if name.startswith("libllvmlite"):
                info = os.stat(os.path.join(library, name))
                parts.append(f"{name}|{info.st_size}|{info.st_mtime_ns}")
    except OSError:
        parts.append("no-llvmlite")
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    parts.append(line.strip())
                if line.strip() == "":
                    break          # the first processor describes the host
    except OSError:
        parts.append(platform.processor())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def remembered_fingerprint(cache: DiskCache | None, compute: Callable[[], str]) -> str:
    """``compute()`` (the LLVM host fingerprint), remembered in ``cache`` for this host."""
    if cache is None:
        return compute()
    if cache.fingerprint is not None:
        return cache.fingerprint
    identity = cheap_host_identity()
    stored = cache.get(identity, "host")
    if stored is not None:
        fingerprint = stored.decode()
    else:
        fingerprint = compute()
        cache.put(identity, "host", fingerprint.encode())
    cache.fingerprint = fingerprint      # the host does not change under a running process
    return fingerprint


def link_later(cache: DiskCache, entry: str, head: bytes, object_code: bytes,
               name: str) -> None:
    """Link ``object_code`` into a shared object in a background thread and store it under
    ``entry``, after ``head`` (the entry's source text, as the object's entry keeps it);
    nothing happens when no C compiler is found or linking fails."""
    with cache.lock:
        if entry in cache.linking:
            return
        cache.linking.add(entry)
    thread = threading.Thread(target=_link_and_store,
                              args=(cache, entry, head, object_code, name),
                              name="tensoralg-link", daemon=True)
    thread.start()
    with _PENDING_LOCK:
        _PENDING[:] = [t for t in _PENDING if t.is_alive()] + [thread]


# Links still running when the interpreter exits. A short script exits before the C compiler
# finishes, and a daemon thread is simply dropped, so without this wait no process would ever
# leave a linked kernel behind and every new one would load LLVM again.
_PENDING: list[threading.Thread] = []
_PENDING_LOCK = threading.Lock()
EXIT_WAIT_S = 10.0    # at most this long in all, at exit, for links already started


@atexit.register
def _finish_links() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    with _PENDING_LOCK:
        threads = list(_PENDING)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _link_and_store(cache: DiskCache, entry: str, head: bytes, object_code: bytes,
                    name: str) -> None:
    try:
        shared = link_shared(object_code, name)
        if shared is not None:
            cache.put(entry, SHARED, head + shared)
    except OSError:
        pass          # the cache directory went away: the next process links again
    finally:
        with cache.lock:
            cache.linking.discard(entry)


def link_shared(object_code: bytes, name: str) -> bytes | None:
    """The bytes of a shared object made from ``object_code``, or None when it cannot be
    linked here (no C compiler, or one that fails)."""
    command = compiler_command(os.environ)
    if shutil.which(command[0]) is None:
        return None
    workdir = Path(tempfile.mkdtemp(prefix="tensoralg-link-"))
    try:
        obj, shared = workdir / f"{name}.o", workdir / f"{name}.so"
        obj.write_bytes(object_code)
        result = subprocess.run([*command, "-shared", "-o", str(shared), str(obj), "-lm"],
                                capture_output=True, check=False)
        return shared.read_bytes() if result.returncode == 0 and shared.exists() else None
    except OSError:
        return None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["SHARED", "cheap_host_identity", "link_later", "link_shared",
           "remembered_fingerprint"]
