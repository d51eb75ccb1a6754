"""Targets as data: what each backend can do, and the IR legalisation it asks for.

Emitters read capabilities from a `Target` instead of switching on backend names; a target that
cannot express some IR asks for a legalisation pass (a pure ``Function -> Function``) that runs
before its emitter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tensoralg.errors import UnsupportedError
from tensoralg.ir.nodes import Function


def _unchanged(fn: Function) -> Function:
    return fn


@dataclass(frozen=True, slots=True)
class Target:
    """One code generation target and its capabilities.

    >>> target_for("cuda").atomics
    True
    """

    name: str
    atomics: bool
    shared_memory: bool
    max_threads: int
    can_build: bool
    legalize: Callable[[Function], Function] = _unchanged

    def __str__(self) -> str:
        return self.name


TARGETS: dict[str, Target] = {
    "c": Target("c", atomics=False, shared_memory=False, max_threads=1, can_build=True),
    "llvm": Target("llvm", atomics=False, shared_memory=False, max_threads=1, can_build=True),
    # The CUDA kernel body is single-threaded for now: no launch logic, no thread mapping yet.
    "cuda": Target("cuda", atomics=True, shared_memory=True, max_threads=1024, can_build=False),
}


def register_tile_rows(tile_bytes: int, avx512: bool) -> int:
    """How many rows of register tiles of ``tile_bytes`` the host's vector registers hold at
    once (the jam pass's ``tile_rows``), with a quarter of the register file left for the
    operand vectors a tile's loop loads: 6 rows of 256 bytes in AVX-512's 32 x 64 bytes; 1 (no
    jamming) in AVX2's 16 x 32, which one 256-byte tile already half fills.

    >>> register_tile_rows(256, avx512=True), register_tile_rows(256, avx512=False)
    (6, 1)
    """
    if tile_bytes <= 0:
        return 1
    registers = 32 * 64 if avx512 else 16 * 32
    return max(1, (registers * 3 // 4) // tile_bytes)


def target_for(name: str) -> Target:
    """The `Target` called ``name``; `UnsupportedError` for an unknown one.

    >>> target_for("c").name
    'c'
    """
    try:
        return TARGETS[name]
    except KeyError:
        known = ", ".join(sorted(TARGETS))
        raise UnsupportedError(f"unknown backend {name!r}; choose one of {known}") from None
