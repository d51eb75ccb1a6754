"""The package version and a fingerprint of the compiler's own source.

Both are part of every on-disk kernel cache key: a kernel compiled by another version of the
compiler, even an unreleased edit of it, is never loaded.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__version__ = "0.1.0"

# The rooms whose code decides what a kernel is; edits elsewhere (onnx, cli) keep the cache.
_COMPILER_ROOMS = ("notation", "formats", "ir", "lower", "codegen", "runtime")


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash of the compiler's Python files: their names, sizes and modification times
    (computed once per process from ``stat`` alone, well under a millisecond: reading and
    hashing every file took ~7 ms of a new process's first cached kernel)."""
    digest = hashlib.sha256(__version__.encode())
    root = Path(__file__).resolve().parent
    compiler = [p for room in _COMPILER_ROOMS for p in (root / room).rglob("*.py")]
    for path in sorted(compiler + [root / "api.py"]):
        info = path.stat()
        digest.update(f"{path.relative_to(root)}|{info.st_size}|{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]
