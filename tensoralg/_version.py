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
    """A hash of the compiler's Python files (computed once per process, ~ms)."""
    digest = hashlib.sha256(__version__.encode())
    root = Path(__file__).resolve().parent
    compiler = [p for room in _COMPILER_ROOMS for p in (root / room).rglob("*.py")]
    for path in sorted(compiler + [root / "api.py"]):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
