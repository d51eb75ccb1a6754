"""The memory limit on dense outputs and temporaries, checked before they are allocated.

A statement whose output is inferred dense, or a dense ``out_format`` on a large sparse
problem, can ask for far more memory than the machine has (``A(i,j) + A(j,i)`` on a 10^5 x
10^5 CSR matrix stored dense is 80 GB). NumPy then raises a bare ``MemoryError``, or, where
the kernel allocates, the operating system kills the process. Each dense buffer is checked
against a limit first and refused with ``MemoryLimitError``, which names the size, the
expression and the fix. The default limit is half the memory available when the first check
runs; ``TENSORALG_MEMORY_LIMIT`` (bytes, with an optional K/M/G/T suffix) or
``ta.set_memory_limit`` set another.
"""
from __future__ import annotations

import os
import re

from tensoralg.errors import InputError, MemoryLimitError

_limit: int | None = None


def available_memory() -> int:
    """Bytes of memory available now (Linux: ``MemAvailable``; elsewhere the physical memory).

    >>> available_memory() > 0
    True
    """
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 34          # no way to ask: assume 16 GiB


def parse_bytes(text: str) -> int:
    """``"512M"`` -> 536870912; plain digits are bytes.

    >>> parse_bytes("2G"), parse_bytes("1000")
    (2147483648, 1000)
    """
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)i?B?\s*", str(text), re.IGNORECASE)
    if match is None:
        raise InputError(f"a memory limit is a number of bytes with an optional K, M, G or T "
                         f"suffix (such as 8G), not {text!r}")
    return int(match[1]) * 1024 ** " KMGT".index(match[2].upper() or " ")


def memory_limit() -> int:
    """The limit in bytes on one dense output or temporary."""
    global _limit
    if _limit is None:
        given = os.environ.get("TENSORALG_MEMORY_LIMIT")
        _limit = parse_bytes(given) if given else available_memory() // 2
    return _limit


def set_limit(limit: int | str | None) -> None:
    """Set the limit (bytes, or text such as ``"8G"``); None goes back to the default."""
    global _limit
    if limit is None:
        _limit = None
        return
    if isinstance(limit, str):
        limit = parse_bytes(limit)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"the memory limit must be a positive number of bytes, not {limit!r}")
    _limit = limit


def check_dense(elements: int, itemsize: int, what: str, expression: object) -> None:
    """Raise ``MemoryLimitError`` when ``elements`` values of ``itemsize`` bytes exceed the
    limit; ``what`` names the buffer (``"the dense output"``)."""
    size = elements * itemsize
    if size > memory_limit():
        raise MemoryLimitError(
            f"{expression}: {what} would take {_text(size)} ({elements} values), over the "
            f"memory limit of {_text(memory_limit())}; ask for a sparse result "
            f"(out_format='csr' in ta.einsum, or the output's entry in ta.compile's formats), "
            f"or raise the limit with ta.set_memory_limit / TENSORALG_MEMORY_LIMIT")


def _text(size: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


__all__ = ["available_memory", "check_dense", "memory_limit", "parse_bytes", "set_limit"]
