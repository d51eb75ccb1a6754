"""Tuned schedules kept on disk: the winner of each autotuning run, found again by later calls.

An entry is keyed by the statement (canonical text), the operands' formats, the value dtype and
a *shape class* — each index's extent and the operands' stored counts rounded to a power of
four — so a schedule tuned on one 10^5-row matrix also serves the next matrix of about that
size. The store is one JSON file, ``tuned-schedules.json``, in the kernel cache's directory,
written to a temporary file and renamed into place; an unreadable file counts as empty.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

from tensoralg.errors import NotationError

from .schedule import Schedule, parse_schedule

FILE_NAME = "tuned-schedules.json"


def size_class(value: int) -> int:
    """``value`` rounded to a power of four, as an exponent (0 for 0 and 1).

    >>> [size_class(v) for v in (0, 1, 3, 4, 100, 1000, 10**6)]
    [0, 0, 1, 1, 3, 5, 10]
    """
    return 0 if value <= 1 else round(math.log(value, 4))


def shape_class(sizes: Mapping[str, int], stored: Sequence[int]) -> str:
    """The shape class of a call: index extents and stored counts as powers of four.

    >>> shape_class({"i": 1000, "j": 64}, [5000])
    'i5,j3|nnz6'
    """
    extents = ",".join(f"{index}{size_class(size)}" for index, size in sorted(sizes.items()))
    counts = ",".join(str(size_class(count)) for count in stored)
    return f"{extents}|nnz{counts}"


def tuning_key(statement: str, formats: Sequence[tuple[str, object]], dtype: object,
               shape: str) -> str:
    """The text that names one tuned schedule."""
    described = ";".join(f"{name}={fmt}" for name, fmt in formats)
    return f"{statement} | {described} | {dtype} | {shape}"


class TunedSchedules:
    """The tuned schedules of one cache directory (None: kept in memory only).

    >>> store = TunedSchedules(None)
    >>> store.put("k", Schedule().jam(1), {"median_s": 1e-3})
    >>> print(store.get("k"))
    jam(1)
    """

    def __init__(self, directory: Path | None) -> None:
        self.path = directory / FILE_NAME if directory is not None else None
        self._entries: dict[str, dict] | None = None
        self._lock = threading.Lock()
        # Counts the changes (put, clear): a call replayed from before one must look again.
        self.generation = 0

    def _load(self) -> dict[str, dict]:
        if self._entries is None:
            entries: dict[str, dict] = {}
            if self.path is not None and self.path.exists():
                try:
                    loaded = json.loads(self.path.read_text())
                    if isinstance(loaded, dict):
                        entries = {k: v for k, v in loaded.items() if isinstance(v, dict)}
                except (OSError, ValueError):
                    entries = {}
            self._entries = entries
        return self._entries

    def get(self, key: str) -> Schedule | None:
        """The schedule tuned for ``key``, or None (also when the stored text no longer
        parses, as after an upgrade that renamed a command)."""
        entry = self._load().get(key)
        if entry is None:
            return None
        try:
            return parse_schedule(str(entry.get("schedule", "")))
        except NotationError:
            return None

    def put(self, key: str, schedule: Schedule, facts: Mapping[str, object]) -> None:
        """Keep ``schedule`` for ``key`` (with what was measured), replacing any earlier one."""
        with self._lock:
            entries = self._load()
            entries[key] = {"schedule": str(schedule), **facts}
            self.generation += 1
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
            with os.fdopen(handle, "w") as out:
                json.dump(entries, out, indent=1, sort_keys=True)
            os.replace(temporary, self.path)

    def clear(self) -> None:
        """Forget every tuned schedule (and delete the file)."""
        with self._lock:
            self._entries = {}
            self.generation += 1
            if self.path is not None and self.path.exists():
                self.path.unlink()

    def __len__(self) -> int:
        return len(self._load())


__all__ = ["TunedSchedules", "shape_class", "size_class", "tuning_key"]
