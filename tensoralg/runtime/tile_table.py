"""A loaded driver's table of register tiles, filled as calls that use them are bound.

The driver module (``codegen/tile_table.py``) starts with an empty table; a bound call
computes the tiles its shape will run and asks :meth:`TileTable.ensure` for them, which builds
each missing one as a module of its own (through the on-disk kernel cache) and writes its
address into the table. Building only what a model uses took load to the end of the second
(planning) run of DeepFM at batch 256, with an empty cache, from 6.5 s to 2.1 s
(``benchmarks/ONNX_LOAD_TIMES.md``).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Iterable

from tensoralg.codegen.build import build_llvm_module, function_address
from tensoralg.codegen.cache import DiskCache

_TILE = ctypes.CFUNCTYPE(None)      # never called from Python: only its address is taken


class TileTable:
    """The tiles of one loaded driver: ``make(rows, vectors)`` builds a tile's module,
    exporting ``entry(rows, vectors)``; ``index(rows, vectors)`` is its slot in the table
    ``name`` of the driver loaded as ``keepalive``. Tiles of one row are the driver's own.

    >>> # tiles = TileTable(keepalive, TILES, tile_module, tile_entry, tile_index, "gemm|...")
    >>> # tiles.ensure({(6, 4), (5, 4)}); tiles.fallbacks
    """

    def __init__(self, keepalive: tuple[object, ...], name: str,
                 make: Callable[[int, int], Any], entry: Callable[[int, int], str],
                 index: Callable[[int, int], int], key: str,
                 cache: DiskCache | None) -> None:
        self.make, self.entry, self.index, self.key, self.cache = make, entry, index, key, cache
        self.driver = keepalive      # the table lives in the driver's loaded code
        self.table = function_address(keepalive, name)
        self.counter = function_address(keepalive, f"{name}_fallbacks")
        self._built: dict[tuple[int, int], tuple[object, ...]] = {}
        self._lock = threading.Lock()

    def ensure(self, variants: Iterable[tuple[int, int]]) -> None:
        """Build and install every tile of ``variants`` (``(rows, vectors)`` pairs) not in the
        table yet."""
        missing = sorted({v for v in variants if v[0] > 1} - self._built.keys())
        if not missing:
            return
        with self._lock:
            for rows, vectors in missing:
                if (rows, vectors) in self._built:
                    continue
                identity = f"{self.key}|tile{rows}x{vectors}"
                function, _, keepalive = build_llvm_module(
                    lambda: self.make(rows, vectors), self.entry(rows, vectors), _TILE,
                    cache=self.cache, key=identity, identity=identity)
                self._built[rows, vectors] = keepalive
                slot = ctypes.c_void_p.from_address(self.table + 8 * self.index(rows, vectors))
                slot.value = ctypes.cast(function, ctypes.c_void_p).value

    def built(self) -> set[tuple[int, int]]:
        """The tiles in the table (besides the driver's one-row tiles)."""
        return set(self._built)

    @property
    def fallbacks(self) -> int:
        """How many tiles ran row by row so far because their variant was not built: zero
        when every binding predicted its tiles."""
        return ctypes.c_int64.from_address(self.counter).value


__all__ = ["TileTable"]
