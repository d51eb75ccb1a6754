"""An on-disk cache of compiled kernels, owned by a `DiskCache` object.

One file per (key, backend). Each entry starts with a fixed header: a magic string, the format
version, a digest of the (backend, key) pair it belongs to, the payload's length and the payload's
sha256. Entries are written to a temporary file and renamed into place, so a reader sees a whole
entry or none; an entry that fails any check on read (truncated, flipped bits, written by another
format version, a name collision) is deleted and reported as a miss, never loaded.

The cache directory is chosen by the caller; `default_cache_dir` computes the usual one from an
environment mapping that the API edge reads once.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import struct
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensoralg.errors import CompileError

MAGIC = b"tensoralg-kernel"
FORMAT_VERSION = 1
# magic, version, sha256 of (backend, key), payload length, sha256 of the payload
HEADER = struct.Struct("<16sI32sQ32s")


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$TENSORALG_CACHE_DIR``, else ``$XDG_CACHE_HOME/tensoralg``, else ``~/.cache/tensoralg``.

    >>> default_cache_dir({"TENSORALG_CACHE_DIR": "/tmp/k"})
    PosixPath('/tmp/k')
    >>> default_cache_dir({"XDG_CACHE_HOME": "/c"})
    PosixPath('/c/tensoralg')
    """
    if environ.get("TENSORALG_CACHE_DIR"):
        return Path(environ["TENSORALG_CACHE_DIR"])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "tensoralg"
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".cache" / "tensoralg"


def _entry_digest(key: str, backend: str) -> bytes:
    return hashlib.sha256(backend.encode() + b"\0" + key.encode()).digest()


class DiskCache:
    """Compiled kernels on disk, in a private directory (mode 0o700).

    >>> cache = DiskCache(Path(tempfile.mkdtemp()) / "kernels")
    >>> cache.put("spmv-csr-f64", "c", b"...")
    >>> cache.get("spmv-csr-f64", "c")
    b'...'
    >>> cache.get("spmv-csr-f64", "llvm") is None
    True
    """

    __slots__ = ("directory", "fingerprint", "linking", "lock")

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.fingerprint: str | None = None   # the host's, once read (codegen/link.py)
        self.linking: set[str] = set()        # entries being linked in the background
        self.lock = threading.Lock()
        try:
            existed = self.directory.is_dir()
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = self.directory.stat()
        except OSError as err:
            raise CompileError(f"kernel cache directory {self.directory} cannot be used: "
                               f"{err.strerror or err}; choose another one with "
                               f"TENSORALG_CACHE_DIR") from None
        if info.st_uid != os.getuid():
            raise CompileError(
                f"kernel cache directory {self.directory} belongs to another user; "
                "choose another one with TENSORALG_CACHE_DIR"
            )
        # Kernels are code that will be run: nobody else may write them. A directory made
        # here is owner-only; one that existed keeps its mode (it may be the user's project
        # folder) unless others can write to it, which rules it out.
        if stat.S_IMODE(info.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
            if existed:
                raise CompileError(
                    f"kernel cache directory {self.directory} is writable by other users, so "
                    f"kernels loaded from it could be anyone's code; choose a directory only "
                    f"you can write to with TENSORALG_CACHE_DIR")
            self.directory.chmod(0o700)

    def __repr__(self) -> str:
        return f"DiskCache({str(self.directory)!r})"

    def path(self, key: str, backend: str) -> Path:
        """Where the entry for (key, backend) lives."""
        return self.directory / f"{backend}-{_entry_digest(key, backend).hex()[:40]}.kernel"

    def get(self, key: str, backend: str) -> bytes | None:
        """The payload stored for (key, backend), or None on a miss or a damaged entry."""
        path = self.path(key, backend)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        payload = self._verified_payload(data, key, backend)
        if payload is None:
            path.unlink(missing_ok=True)
        return payload

    def put(self, key: str, backend: str, data: bytes) -> None:
        """Store ``data`` for (key, backend), replacing any entry atomically."""
        header = HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            _entry_digest(key, backend),
            len(data),
            hashlib.sha256(data).digest(),
        )
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(header)
                file.write(data)
            os.replace(temporary, self.path(key, backend))
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def get_object(self, key: str, kind: str) -> Any:
        """The Python object stored with `put_object` for (key, kind), or None on a miss, a
        damaged entry or one that no longer unpickles (it is then deleted).

        Unpickling runs code named by the entry, so it gets the trust the cache's machine code
        already has: the directory is the user's own and nobody else may write to it.
        """
        payload = self.get(key, kind)
        if payload is None:
            return None
        try:
            return pickle.loads(payload)
        except Exception:   # a class renamed or moved since: the entry is stale, not an error
            self.path(key, kind).unlink(missing_ok=True)
            return None

    def put_object(self, key: str, kind: str, value: Any) -> None:
        """Store ``value`` (pickled) for (key, kind); a value that cannot be pickled, or a
        directory that cannot be written, stores nothing: the cache only ever saves work."""
        try:
            self.put(key, kind, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError, OSError):
            pass

    @staticmethod
    def _verified_payload(data: bytes, key: str, backend: str) -> bytes | None:
        if len(data) < HEADER.size:
            return None
        magic, version, entry, length, digest = HEADER.unpack_from(data)
        payload = data[HEADER.size :]
        if (
            magic != MAGIC
            or version != FORMAT_VERSION
            or entry != _entry_digest(key, backend)
            or length != len(payload)
            or hashlib.sha256(payload).digest() != digest
        ):
            return None
        return payload
