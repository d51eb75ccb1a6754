"""The package version and a fingerprint of the compiler's own source.

Both are part of every on-disk kernel cache key: a kernel compiled by another version of the
compiler, even an unreleased edit of it, is never loaded.
"""
from __future__ import annotations

import functools
import hashlib
import os

__version__ = "0.1.0"

# The rooms whose code decides what a kernel is; edits elsewhere (onnx, cli) keep the cache.
_COMPILER_ROOMS = ("notation", "formats", "schedule", "ir", "lower", "codegen", "runtime")


@functools.lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """A hash of the compiler's Python files: their names, sizes and modification times
    (computed once per process from ``stat`` alone, well under a millisecond: reading and
    hashing every file took ~7 ms of a new process's first cached kernel)."""
    digest = hashlib.sha256(__version__.encode())
    root = os.path.dirname(os.path.abspath(__file__))
    skip = len(root) + 1               # names relative to root (os.path.relpath cost ~1 ms)
    found = [os.path.join(root, "api.py")]
    for room in _COMPILER_ROOMS:      # os.walk: pathlib's rglob took most of the ~7 ms
        for folder, folders, names in os.walk(os.path.join(root, room)):
            # Not into __pycache__: listing its compiled files was half of the walk.
            folders[:] = [name for name in folders if name != "__pycache__"]
            found.extend(os.path.join(folder, name) for name in names if name.endswith(".py"))
    for path in sorted(found):
        info = os.stat(path)
        digest.update(f"{path[skip:]}|{info.st_size}|{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]
