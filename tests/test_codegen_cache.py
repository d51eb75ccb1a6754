"""The on-disk kernel cache: entries, damage detection, permissions, and `build` through it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tensoralg.codegen import DiskCache, build, default_cache_dir
from tensoralg.codegen.cache import HEADER
from tensoralg.errors import CompileError
from tensoralg.ir.nodes import (
    F64,
    I64,
    Binary,
    Block,
    Const,
    For,
    Function,
    Load,
    Param,
    Ptr,
    Store,
    Var,
)

ROOT = Path(__file__).resolve().parents[1]


def scale(name: str = "scale") -> Function:
    n, x, y, i = Var("n", I64), Var("x", Ptr(F64)), Var("y", Ptr(F64)), Var("i", I64)
    body = Store(y, i, Binary("*", Load(x, i), Const(3.0, F64)))
    return Function(
        name,
        (Param(n, "n"), Param(x, "x"), Param(y, "y", True)),
        Block((For(i, Const(0, I64), n, Block((body,))),)),
    )


def run(kernel) -> np.ndarray:
    x, y = np.arange(10.0), np.zeros(10)
    assert kernel(10, x.ctypes.data, y.ctypes.data) == 0
    return y


@pytest.fixture
def cache(tmp_path) -> DiskCache:
    return DiskCache(tmp_path / "kernels")


def test_put_get_and_misses(cache):
    assert cache.get("k", "c") is None
    cache.put("k", "c", b"payload")
    assert cache.get("k", "c") == b"payload"
    assert cache.get("k", "llvm") is None and cache.get("other", "c") is None
    cache.put("k", "c", b"")
    assert cache.get("k", "c") == b""
    assert [p.name for p in cache.directory.iterdir() if p.name.startswith(".tmp")] == []


def test_directory_is_private(tmp_path):
    fresh = DiskCache(tmp_path / "a" / "b")
    assert stat.S_IMODE(fresh.directory.stat().st_mode) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o777)
    with pytest.raises(CompileError, match="writable by other users"):
        DiskCache(loose)
    assert stat.S_IMODE(loose.stat().st_mode) == 0o777
    kept = tmp_path / "kept"
    kept.mkdir(mode=0o755)
    DiskCache(kept)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o755


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "header only", "moved"])
def test_damaged_entry_is_a_miss_and_deleted(cache, damage):
    cache.put("k", "c", bytes(range(256)) * 4)
    path = cache.path("k", "c")
    data = bytearray(path.read_bytes())
    match damage:
        case "truncate":
            path.write_bytes(data[:-10])
        case "flip":
            data[HEADER.size + 100] ^= 0x01
            path.write_bytes(data)
        case "empty":
            path.write_bytes(b"")
        case "header only":
            path.write_bytes(data[: HEADER.size - 1])
        case "moved":  # a valid entry for another key, found under this key's name
            cache.put("other", "c", b"x")
            os.replace(cache.path("other", "c"), path)
    assert cache.get("k", "c") is None
    assert not path.exists()


def test_default_cache_dir_from_environment():
    assert default_cache_dir({"TENSORALG_CACHE_DIR": "/a", "XDG_CACHE_HOME": "/b"}) == Path("/a")
    assert default_cache_dir({"XDG_CACHE_HOME": "/b", "HOME": "/h"}) == Path("/b/tensoralg")
    assert default_cache_dir({"HOME": "/h"}) == Path("/h/.cache/tensoralg")
    assert default_cache_dir({"TENSORALG_CACHE_DIR": "", "HOME": "/h"}) == Path(
        "/h/.cache/tensoralg"
    )


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_build_hits_in_a_new_cache_object(cache, backend):
    first = build(scale(), backend, cache=cache, key="scale-f64")
    assert not first.from_cache
    again = build(scale(), backend, cache=DiskCache(cache.directory), key="scale-f64")
    assert again.from_cache and again.source == first.source and again.name == "scale"
    np.testing.assert_array_equal(run(again), 3 * np.arange(10.0))
    assert not build(scale(), backend).from_cache  # no cache, no key: always compiled


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_kernel_entry_is_rebuilt(cache, backend, damage):
    build(scale(), backend, cache=cache, key="scale")
    [path] = [p for p in cache.directory.iterdir() if p.name.startswith(f"{backend}-")]
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    else:
        data[-200] ^= 0xFF
        path.write_bytes(data)
    rebuilt = build(scale(), backend, cache=cache, key="scale")
    assert not rebuilt.from_cache
    np.testing.assert_array_equal(run(rebuilt), 3 * np.arange(10.0))
    assert build(scale(), backend, cache=cache, key="scale").from_cache  # the entry was rewritten


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_entry_without_the_kernel_symbol_is_rebuilt(cache, backend):
    build(scale("other_name"), backend, cache=cache, key="same-key")
    kernel = build(scale(), backend, cache=cache, key="same-key")
    assert not kernel.from_cache and kernel.name == "scale"
    np.testing.assert_array_equal(run(kernel), 3 * np.arange(10.0))


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_new_process_loads_without_compiling(cache, backend):
    build(scale(), backend, cache=cache, key="scale")
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_codegen_cache import scale, run
        from tensoralg.codegen import DiskCache, build
        import tensoralg.codegen.build, tensoralg.codegen.llvm
        def forbidden(*args):
            raise AssertionError("compiled although the kernel is cached")
        tensoralg.codegen.build.compile_c = tensoralg.codegen.llvm.compile_llvm = forbidden
        start = time.perf_counter()
        kernel = build(scale(), {backend!r}, cache=DiskCache({str(cache.directory)!r}), key="scale")
        print(kernel.from_cache, time.perf_counter() - start, run(kernel).sum())
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    from_cache, seconds, total = result.stdout.split()
    assert from_cache == "True" and float(total) == 135.0


def test_a_kernel_read_back_is_linked_for_the_next_process(cache):
    """The first read of a cached LLVM kernel links it into a shared object (in the
    background); later reads load that, with no LLVM (codegen/link.py)."""
    import tensoralg.codegen.link as link

    if not _has_cc():
        pytest.skip("no C compiler to link with")
    build(scale(), "llvm", cache=cache, key="scale")
    again = build(scale(), "llvm", cache=cache, key="scale")          # the object: MCJIT
    assert again.from_cache and type(again.keepalive[0]).__name__ != "CDLL"
    for thread in __import__("threading").enumerate():
        if thread.name == "tensoralg-link":
            thread.join(timeout=60)
    shared = [p for p in cache.directory.iterdir() if p.name.startswith(f"{link.SHARED}-")]
    assert len(shared) == 1
    third = build(scale(), "llvm", cache=cache, key="scale")
    assert third.from_cache and third.backend == "llvm" and third.source == again.source
    assert type(third.keepalive[0]).__name__ == "CDLL"
    np.testing.assert_array_equal(run(third), 3 * np.arange(10.0))


def test_linking_without_a_compiler_links_nothing(monkeypatch):
    import tensoralg.codegen.link as link

    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert link.link_shared(b"not an object", "k") is None


def test_the_host_fingerprint_is_remembered(cache):
    import tensoralg.codegen.link as link

    calls = []
    first = link.remembered_fingerprint(cache, lambda: calls.append(1) or "llvm|host")
    second = link.remembered_fingerprint(DiskCache(cache.directory), lambda: "other")
    assert first == second == "llvm|host" and calls == [1]


def _has_cc() -> bool:
    import shutil

    return shutil.which("cc") is not None
