"""Concurrent branches of a static plan: runs of steps that share no memory, run at once.

Recommender models are wide: Wide&Deep's 10 MB wide product does not depend on its deep MLP,
nor DLRM's eight embedding bags on its bottom MLP, nor one tower on the other. One step at a
time leaves the second core idle while a step too narrow to split runs, so the compiled
sequence can run such branches as parts of one task of the native pool (``NativeGroup`` in
``codegen/sequence.py``): each thread claims a branch (or one row range of a branch that is a
single split kernel) and runs it.

Independence is decided from memory, not from the graph alone. The memory plan reuses arenas
by lifetime, so two steps with no data flow between them may still write the same bytes; and a
multi-hot input's CSR is written by its first reader and read by the others through state the
graph does not show. A step's :class:`Footprint` therefore lists the byte ranges it writes and
reads (plan buffers and scratch: feeds and constants are never written) and the keys of hidden
state it shares (``Spec.shared``); two steps conflict when one writes what the other touches,
or they share a key. Steps of one window that conflict, directly or through others, form one
branch and keep their order.

The static plan (``onnx/plan/static.py``) uses this module three times: before its buffers exist,
:func:`concurrent_windows` finds from value names which windows may run at once, so that
:func:`widened` lifetimes keep their buffers apart; once they exist, :func:`step_footprint`
gives each step's bytes; and :func:`grouped_calls` turns the calls of a compiled sequence into
groups where :func:`segments` of those footprints allow (the plan then times the grouped
forms against the plain sequence and keeps the fastest, if it is fast enough).

>>> a = Footprint(writes=((0, 64),), reads=(), cost=1 << 20)
>>> b = Footprint(writes=((64, 128),), reads=(), cost=1 << 20)
>>> c = Footprint(writes=((128, 192),), reads=((0, 128),), cost=64)
>>> segments([a, b, c], min_cost=1024)
[[[0], [1]], [[2]]]
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from tensoralg import program
from tensoralg.onnx.plan.step_base import Env, Getter, Spec

if TYPE_CHECKING:
    from tensoralg.onnx.plan.executor import Step

Span = tuple[int, int]     # [low, high) byte addresses

# A branch worth a thread: the second-largest branch of a window must touch at least this many
# bytes of non-constant data (inputs, outputs, scratch). Handing a part to a spinning worker
# costs 1-2 µs, and its results then cross to the other core's cache; 32 KiB is a few µs of
# work for the steps of these models (a 256-row embedding gather of 32 floats).
MIN_BRANCH_BYTES = 32 * 1024
# A branch that is one split kernel is cut into this many ranges per thread range, so that
# the thread that finishes another branch first takes over the rest of it.
REFINE = 4
# The branches beside the costliest multi-step branch must touch at least this fraction of
# its bytes (see ``_worth``).
MIN_OFFLOAD = 0.25
# Steps a window may span (the search is quadratic in it).
MAX_WINDOW = 64


@dataclass(frozen=True, slots=True)
class Footprint:
    """The memory one plan step touches: byte ranges it writes, byte ranges it reads, hidden
    state it shares with other steps, and its cost (bytes of non-constant data it touches)."""

    writes: tuple[Span, ...]
    reads: tuple[Span, ...]
    cost: int
    shared: frozenset[str] = frozenset()


def span_of(array: np.ndarray) -> Span:
    """The bytes ``array`` (any view) may touch: from its lowest to past its highest byte."""
    start = array.ctypes.data
    if array.size == 0:
        return start, start
    low = sum(min(0, (n - 1) * stride) for n, stride in zip(array.shape, array.strides))
    high = sum(max(0, (n - 1) * stride) for n, stride in zip(array.shape, array.strides))
    return start + low, start + high + array.itemsize


def _overlap(first: tuple[Span, ...], second: tuple[Span, ...]) -> bool:
    return any(lo < hi2 and lo2 < hi for lo, hi in first for lo2, hi2 in second
               if lo < hi and lo2 < hi2)


def conflict(a: Footprint, b: Footprint) -> bool:
    """Whether steps ``a`` and ``b`` must not run at once: one writes bytes the other reads
    or writes, or they share hidden state.

    >>> conflict(Footprint(((0, 8),), (), 8), Footprint((), ((4, 12),), 8))
    True
    """
    return bool(a.shared & b.shared) or _overlap(a.writes, b.writes + b.reads) or \
        _overlap(a.reads, b.writes)


def _worth(cost: dict[int, int], steps: dict[int, int], min_cost: int) -> bool:
    """Whether branches of these costs (and step counts) gain from running at once: two or
    more, the second-largest worth a thread, and the rest at least ``MIN_OFFLOAD`` of the
    costliest branch of several steps (which one thread must run alone, its thread ranges
    one after another). NeuMF's GMF branch beside its MLP (16%) ran 5% slower at once: its
    output then crosses to the other core's cache, which costs about what it saved."""
    if len(cost) < 2 or sorted(cost.values())[-2] < min_cost:
        return False
    chain = max((c for k, c in cost.items() if steps[k] > 1), default=0)
    return sum(cost.values()) - chain >= MIN_OFFLOAD * chain


def segments(prints: list[Footprint], min_cost: int | None = None,
             window: int = MAX_WINDOW) -> list[list[list[int]]]:
    """The steps ``0 .. len(prints) - 1`` (in run order) cut into consecutive segments, each a
    list of branches (lists of step indices, in order): one branch runs as before, several run
    at once. From each step, the longest window (of at most ``window`` steps) whose conflict
    graph has two or more branches, the second-largest touching at least ``min_cost`` bytes,
    becomes a segment; a step with no such window runs alone. Branches are listed in order of
    their first step. ``min_cost`` defaults to ``MIN_BRANCH_BYTES``.
    """
    min_cost = MIN_BRANCH_BYTES if min_cost is None else min_cost
    count = len(prints)
    result: list[list[list[int]]] = []
    start = 0
    while start < count:
        parent: dict[int, int] = {}
        cost: dict[int, int] = {}
        steps: dict[int, int] = {}

        def root(k: int) -> int:
            while parent[k] != k:
                parent[k] = parent[parent[k]]
                k = parent[k]
            return k

        best: list[list[int]] | None = None
        for end in range(start, min(count, start + window)):
            parent[end], cost[end], steps[end] = end, prints[end].cost, 1
            for j in range(start, end):
                a, b = root(j), root(end)
                if a != b and conflict(prints[j], prints[end]):
                    parent[a] = b
                    cost[b] += cost.pop(a)
                    steps[b] += steps.pop(a)
            if _worth(cost, steps, min_cost):      # the branches of this window, as they stand
                groups: dict[int, list[int]] = {}
                for k in range(start, end + 1):
                    groups.setdefault(root(k), []).append(k)
                best = sorted(groups.values(), key=lambda g: g[0])
        if best is None:
            result.append([[start]])
            start += 1
            continue
        result.append(best)
        start = max(k for g in best for k in g) + 1
    return result


# ---- the static plan's side: footprints of its steps, groups of its calls ----------------


def concurrent_windows(specs: list[tuple[Step, Spec | None]], base: dict[str, str],
                        in_place: dict[str, tuple[str, tuple[slice, ...]]], recorded: Env,
                        constants: Mapping[str, np.ndarray]) -> list[tuple[int, int]]:
    """The step windows ``(first, last)`` whose branches could run at once, judged from the
    values each step reads and writes (before buffers exist); a generic step conflicts with
    everything. The compiled sequences check again on the buffers' bytes."""
    ids: dict[Any, int] = {}

    def span(key: Any) -> tuple[int, int]:
        index = ids.setdefault(key, len(ids) + 1)
        return index, index + 1

    def root(name: str) -> str:
        name = base.get(name, name)
        return in_place[name][0] if name in in_place else name

    prints = []
    for step, spec in specs:
        node = step.node
        if spec is None:
            prints.append(Footprint(((0, 1 << 62),), (), 0))
            continue
        outs = [n for n in node.outputs if n]
        ins = [n for n in node.inputs if n and n not in constants]
        scratch = [int(np.prod(shape)) * np.dtype(dtype).itemsize
                   for shape, dtype in spec.scratch]
        cost = sum(getattr(recorded.get(n), "nbytes", 0) for n in outs + ins) + sum(scratch)
        writes = [span(root(n)) for n in outs] + \
            [span((node.name, s)) for s in range(len(scratch))]
        prints.append(Footprint(tuple(writes), tuple(span(root(n)) for n in ins), int(cost),
                                spec.shared))
    return [(min(k for b in seg for k in b), max(k for b in seg for k in b))
            for seg in segments(prints) if len(seg) > 1]


def widened(birth: int, death: int, windows: list[tuple[int, int]]) -> tuple[int, int]:
    """A buffer's lifetime stretched over every concurrent window it meets."""
    for first, last in windows:
        if birth <= last and first <= death:
            birth, death = min(birth, first), max(death, last)
    return birth, death


def step_footprint(spec: Spec, written: list[np.ndarray], ins: list[Getter],
               constants: Mapping[str, np.ndarray], recorded: Env) -> Footprint:
    """The memory a step touches (``onnx/plan/branches.py``): it writes its outputs and scratch
    and reads its inputs' buffers. Constants and feeds are never written, so they cannot
    conflict; they count only towards the cost (the bytes of non-constant data touched)."""
    reads = tuple(span_of(g.fixed) for g in ins if g.fixed is not None and
                  g.name not in constants)
    cost = sum(a.nbytes for a in written) + sum(
        getattr(recorded.get(g.name), "nbytes", 0) for g in ins if g.name not in constants)
    return Footprint(tuple(span_of(a) for a in written), reads, int(cost), spec.shared)


def grouped_calls(steps: list[Any], forms: list[Any], parts: list[Any],
                  native: Callable[..., list[Any] | None], pool: tuple[int, int],
                  cut: bool = False) -> list[Any]:
    """The calls of consecutive native ``steps`` with their independent branches grouped to
    run at once on the native pool. Within a group, branches of several steps come first,
    longest first, since they cannot be split; a branch that is one split kernel follows,
    re-cut into ``REFINE`` ranges per thread range.

    A branch of several steps runs the thread ranges of its split kernels one after another.
    With ``cut``, such a branch stops before its first split kernel, and the rest of it runs
    after the group, split as before (legal: no other branch of the group touches what it
    does): dense DLRM's eight bags then run at once before its bottom MLP's split GEMMs."""
    prints = [step.footprint for step in steps]
    if any(p is None for p in prints):
        return [call for form in forms for call in form]
    items: list[Any] = []
    for segment in segments(prints):     # type: ignore[arg-type]
        after: list[int] = []
        if cut:
            segment, after = _cut(segment, forms)
        if len(segment) < 2:
            items.extend(call for j in sorted(k for b in segment for k in b) + after
                         for call in forms[j])
            continue
        chains: list[tuple[int, tuple[Any, ...]]] = []
        ranges: list[tuple[int, tuple[Any, ...]]] = []
        zero: list[tuple[int, int]] = []
        for branch in segment:
            cost = sum(prints[j].cost for j in branch)     # type: ignore[union-attr]
            calls = [call for j in branch for call in forms[j]]
            if len(calls) == 1 and calls[0].more:
                finer = native(parts[branch[0]], REFINE)
                call = finer[0] if finer and len(finer) == 1 else calls[0]
                if call.zero is not None:
                    zero.append(call.zero)
                for r, args in enumerate((call.args, *call.more)):
                    ranges.append((cost, (replace(call, args=args, more=(), pool=None, zeros=(),
                                                  zero=call.zeros[r] if call.zeros else None),)))
            else:
                chains.append((cost, tuple(calls)))
        chains.sort(key=lambda unit: -unit[0])
        names = " | ".join(", ".join(steps[j].step.node.name for j in branch)
                           for branch in segment)
        items.append(program.NativeGroup(tuple(u for _, u in chains + ranges), pool, tuple(zero),
                                        f"concurrent branches {names}"))
        items.extend(call for j in after for call in forms[j])
    return items


def _cut(segment: list[list[int]], forms: list[Any]) -> tuple[list[list[int]], list[int]]:
    """The branches of ``segment`` cut before the first split kernel of each branch of
    several steps, and the steps cut off, in run order."""
    kept, after = [], []
    for branch in segment:
        first = next((p for p, j in enumerate(branch) if any(c.more for c in forms[j])), None)
        if len(branch) > 1 and first is not None:
            after.extend(branch[first:])
            branch = branch[:first]
        if branch:
            kept.append(branch)
    return kept, sorted(after)


__all__ = ["Footprint", "MIN_BRANCH_BYTES", "REFINE", "concurrent_windows", "conflict", "grouped_calls",
           "segments", "span_of", "step_footprint", "widened"]
