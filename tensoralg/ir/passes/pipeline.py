"""The optimization pipeline: one visible, ordered list of named steps, and its logger.

``optimize`` runs :data:`STEPS` in order. An :class:`IRLog` records, for each step, its time
and the IR printed after it when the step changed something; the API decides whether to make
one (from ``TA_DEBUG``), this module never reads the environment.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, TextIO

from tensoralg.errors import CompileError, TensorAlgebraError

from .. import nodes as n
from ..printer import format_function
from ..verify import verify
from .dead_code import remove_dead_code
from .epilogue import tile_epilogues
from .factor import factor_reductions
from .hoist import hoist_invariants
from .jam import JAM, jam_rows
from .simplify import simplify
from .tile import TILE_BYTES, tile_accumulators
from .transpose import LINE_BYTES, tile_transposes
from .workspace import row_workspaces

Step = Callable[[n.Function], n.Function]

STEPS: tuple[tuple[str, Step], ...] = (
    ("simplify", simplify),
    ("hoist loop invariants", hoist_invariants),
    ("factor invariant multiplicands out of sums", factor_reductions),
    ("fuse temporaries into row workspaces", row_workspaces),
    ("tile accumulators into registers", tile_accumulators),
    ("move row epilogues into the register tiles", tile_epilogues),
    ("tile transposed accesses by cache line", tile_transposes),
    ("jam rows of a reduction", jam_rows),
    ("remove dead code", remove_dead_code),
)


@dataclass(frozen=True, slots=True)
class PassOptions:
    """The choices the pattern-driven steps make, as a schedule states them (``schedule/``'s
    ``tile``, ``jam``, ``workspaces`` and ``transpose_tiles`` commands): 0 (1 for ``jam_rows``,
    False for ``workspaces``) turns a step off. The defaults are the compiler's own choices."""

    tile_bytes: int = TILE_BYTES
    jam_rows: int = JAM
    # rows jammed where they hold register tiles: 1 (none) unless the caller knows the host's
    # register file (``codegen/target.py``'s ``register_tile_rows``; a schedule's ``jam(r,
    # tiles=t)``)
    tile_rows: int = 1
    workspaces: bool = True
    line_bytes: int = LINE_BYTES


DEFAULT_OPTIONS = PassOptions()


def steps_for(options: PassOptions) -> tuple[tuple[str, Step], ...]:
    """:data:`STEPS` with each configurable step set as ``options`` say; a step turned off
    keeps its place and name in the list, and changes nothing.

    >>> [name for name, _ in steps_for(PassOptions(jam_rows=1))] == [n for n, _ in STEPS]
    True
    """
    if options == DEFAULT_OPTIONS:
        return STEPS
    configured: dict[Step, Step] = {
        row_workspaces: row_workspaces if options.workspaces else _unchanged,
        tile_accumulators: partial(tile_accumulators, tile_bytes=options.tile_bytes),
        tile_transposes: partial(tile_transposes, line_bytes=options.line_bytes),
        jam_rows: partial(jam_rows, rows=options.jam_rows, tile_rows=options.tile_rows),
    }
    return tuple((name, configured.get(step, step)) for name, step in STEPS)


def _unchanged(fn: n.Function) -> n.Function:
    return fn


class IRLog:
    """Collects the IR after each step that changed it, with the time every step took.

    ``entries`` holds ``(step name, seconds, printed IR or None when unchanged)``. With
    ``echo`` each entry is also written to ``stream`` (stderr by default) as it arrives.

    >>> from tensoralg.ir.build import function, comment
    >>> log = IRLog()
    >>> f = function("k", [], comment("hi"))
    >>> log.step("nothing", f, f, seconds=0.0)
    >>> log.entries
    [('nothing', 0.0, None)]
    """

    def __init__(self, echo: bool = False, stream: TextIO | None = None) -> None:
        self.echo = echo
        self.stream = stream
        self.entries: list[tuple[str, float, str | None]] = []

    def step(self, name: str, before: n.Function, after: n.Function, seconds: float = 0.0) -> None:
        """Record one step; the IR is printed only if ``after`` differs from ``before``."""
        changed = after is not before and after != before
        entry = (name, seconds, format_function(after) if changed else None)
        self.entries.append(entry)
        if self.echo:
            print(_format_entry(entry), file=self.stream or sys.stderr)

    def __str__(self) -> str:
        return "\n".join(_format_entry(entry) for entry in self.entries)


def _format_entry(entry: tuple[str, float, str | None]) -> str:
    name, seconds, text = entry
    head = f"-- after {name} ({seconds * 1e3:.3f} ms)"
    return f"{head}: unchanged" if text is None else f"{head}:\n{text}"


def optimize(fn: n.Function, log: IRLog | None = None, check: bool = False,
             options: PassOptions = DEFAULT_OPTIONS) -> n.Function:
    """Run every step of STEPS (as ``options`` configure them) on ``fn``; log each, and verify
    each result when ``check``.

    A verifier failure names the step that produced the bad IR; any other failure inside a
    step is re-raised as a CompileError naming the step.

    >>> from tensoralg.ir.build import function, comment, if_, const
    >>> f = function("k", [], if_(const(False, n.BOOL), comment("never")))
    >>> optimize(f, check=True).body
    Block(body=())
    """
    if check:
        verify(fn, after="lowering (input of optimize)")
    for name, step in steps_for(options):
        start = time.perf_counter()
        try:
            new = step(fn)
        except TensorAlgebraError:
            raise
        except Exception as exc:  # a bug in the step: say which one
            raise CompileError(f"IR step {name!r} failed on kernel {fn.name!r}: {exc!r}") from exc
        seconds = time.perf_counter() - start
        if log is not None:
            log.step(name, fn, new, seconds=seconds)
        if check:
            verify(new, after=name)
        fn = new
    return fn


__all__ = ["DEFAULT_OPTIONS", "IRLog", "PassOptions", "STEPS", "optimize", "steps_for"]
