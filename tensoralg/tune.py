"""``ta.autotune``: search legal schedules of one statement by measuring them on real operands.

The search space is built from the kernel the compiler makes on its own (``kernel.schedule``):
every order of its loops, how the outer loop runs (the compiler's choice, one thread, a fixed
number of threads, blocks of a split on threads, per-thread partial outputs where the outer
loop sums), and the register-tile and row-jam settings. Candidates are tried in an order fixed by
``seed`` (the compiler's own schedule first), each compiled, run once to warm up and checked
against the first result, then timed ``repeats`` times; the search stops at ``budget_s``.
Every trial goes to a JSON-lines log (schedule, times, environment). The fastest schedule is
stored with the kernel cache, keyed by statement, formats, dtype and shape class
(``schedule/store.py``), and later ``ta.einsum`` and compiled-kernel calls of that class use
it. Timings vary from run to run, so the winner may too; the order of trials does not.

This module sits at the top beside ``api.py`` and uses it (binding operands as ``einsum`` does,
so the stored key is the one ``einsum`` looks up).
"""
from __future__ import annotations

import itertools
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tensoralg import _version, api
from tensoralg.errors import CompileError, InputError, TensorAlgebraError, UnsupportedError
from tensoralg.notation import infer_dims
from tensoralg.schedule import Reorder, Schedule

TIMER = time.perf_counter


@dataclass(frozen=True, slots=True)
class Trial:
    """One measured (or refused) schedule."""

    schedule: str
    compile_s: float
    times_s: tuple[float, ...]
    refused: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s) if self.times_s else float("inf")


@dataclass(frozen=True)
class TuneResult:
    """What ``autotune`` found: the best schedule, the compiler's own, and every trial."""

    statement: str
    best: Schedule
    best_s: float
    default_s: float
    trials: tuple[Trial, ...] = ()
    key: str = ""
    log: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def speedup(self) -> float:
        """The compiler's own schedule's time over the best one's."""
        return self.default_s / self.best_s if self.best_s > 0 else 1.0

    def __str__(self) -> str:
        lines = [f"autotune {self.statement}: {len(self.trials)} trials",
                 f"  best     {self.best_s * 1e6:10.1f} us  {self.best}",
                 f"  compiler {self.default_s * 1e6:10.1f} us  ({self.speedup:.2f}x)"]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])


def autotune(statement: str, operands: Mapping[str, Any] | Sequence[Any], *,
             formats: Any = None, dtype: Any = None, budget_s: float = 10.0, seed: int = 0,
             repeats: int = 5, max_trials: int | None = None, log: str | Path | None = None,
             progress: bool | None = None, store: bool = True) -> TuneResult:
    """Search schedules of ``statement`` on ``operands`` and keep the fastest.

    ``statement`` is a TACO-style statement with ``operands`` a dict by tensor name (as a
    compiled kernel takes them), or einsum subscripts with ``operands`` a sequence (as
    ``ta.einsum``); ``formats`` and ``dtype`` are those calls' arguments, except that a
    statement's operands without ``formats`` are tuned in their own formats (a scipy CSR
    matrix as CSR), not converted to the dense ones ``ta.compile`` would default to. ``log`` is a
    JSON-lines file (default: ``autotune.jsonl`` in the kernel cache directory, or none).

    >>> import numpy as np, scipy.sparse as sp, tensoralg as ta
    >>> A = sp.random_array((200, 150), density=0.05, format="csr", random_state=0)
    >>> result = ta.autotune("ij,j->i", [A, np.ones(150)], budget_s=2, max_trials=3,
    ...                      store=False, progress=False)
    >>> len(result.trials) <= 3 and result.best_s <= result.default_s
    True
    """
    if budget_s <= 0 or repeats < 1:
        raise InputError(f"autotune needs budget_s > 0 and repeats >= 1 (got budget_s="
                         f"{budget_s}, repeats={repeats})")
    # Trials time optimised code: no kernel starts from a quick build (codegen/tiered.py).
    with api.optimised_builds():
        run, kernel, key = _target(statement, operands, formats, dtype)
    default = kernel.schedule
    rng = random.Random(seed)
    candidates = search_space(default, kernel.statement.lhs.indices,
                              api.kernel_cache().threads.threads, rng)
    if max_trials is not None:
        candidates = candidates[:max(1, max_trials)]
    log_path = _log_path(log)
    machine = environment() if log_path is not None else {}   # the same for every trial
    deadline = TIMER() + budget_s
    trials: list[Trial] = []
    reference: np.ndarray | None = None
    bar = _progress(len(candidates), progress, budget_s)
    try:
        for schedule in candidates:
            if trials and TIMER() > deadline:
                break
            with api.optimised_builds():
                trial, result = _measure(run, schedule, repeats)
            if result is not None:
                if reference is None:
                    reference = result
                else:
                    _check_same(statement, schedule, result, reference)
            trials.append(trial)
            _write_log(log_path, statement, key, trial, seed, machine)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"best {min(t.median_s for t in trials) * 1e6:.0f} us")
    finally:
        if bar is not None:
            bar.close()
    measured = [t for t in trials if t.times_s]
    if not measured:
        raise CompileError(f"autotune {statement}: every schedule tried was refused; the first "
                           f"said: {trials[0].refused}")
    best, default_s = _final_round(run, measured, repeats)
    notes = []
    if len(trials) < len(candidates):
        notes.append(f"the budget of {budget_s} s ran out after {len(trials)} of "
                     f"{len(candidates)} candidates")
    if store:
        api.kernel_cache().forget_replays()   # einsum's recorded calls predate the winner
        api.kernel_cache().tuned.put(key, Schedule.parse(best.schedule), {
            "median_s": best.median_s, "default_s": default_s,
            "trials": len(trials), "date": time.strftime("%Y-%m-%d"),
            "tensoralg": _version.__version__})
    return TuneResult(statement, Schedule.parse(best.schedule), best.median_s, default_s,
                      tuple(trials), key, log_path, tuple(notes))


FINALISTS = 3        # the fastest trials timed again, interleaved with the compiler's own
KEEP_DEFAULT = 0.97  # a winner must beat the compiler's own schedule by 3% to replace it


def _final_round(run, measured: list[Trial], repeats: int) -> tuple[Trial, float]:
    """The fastest of the best few trials and the compiler's own schedule (the first trial),
    timed again in turns, so that a trial that was lucky once (another process paused, a
    frequency step) does not win; the compiler's own is kept unless clearly beaten."""
    default = measured[0]
    finalists = [default] + sorted(measured[1:], key=lambda t: t.median_s)[:FINALISTS]
    calls = [run(Schedule.parse(t.schedule))[1] for t in finalists]
    times: list[list[float]] = [[] for _ in finalists]
    for _ in range(2 * repeats):
        for k, call in enumerate(calls):
            start = TIMER()
            call()
            times[k].append(TIMER() - start)
    medians = [statistics.median(t) for t in times]
    winner = min(range(len(finalists)), key=lambda k: medians[k])
    if medians[winner] > KEEP_DEFAULT * medians[0]:
        winner = 0
    chosen = finalists[winner]
    return Trial(chosen.schedule, chosen.compile_s, tuple(times[winner])), medians[0]


# ---------------------------------------------------------------------------------------------
# the search space


def search_space(default: Schedule, outputs: tuple[str, ...], threads: int,
                 rng: random.Random) -> list[Schedule]:
    """Candidate schedules around the compiler's own: loop orders x outer-loop strategies x
    pass settings x the innermost loop's vector tail (the default remainder loop, or masked:
    ``Vectorize``), each order's innermost loop in cache blocks of 16 or 64 and its middle
    loops in blocks of 128, moved outermost; shuffled by ``rng`` after the compiler's own,
    which comes first.

    >>> space = search_space(Schedule().reorder("i", "j"), ("i",), 2, random.Random(0))
    >>> str(space[0]), len(space) == len(set(map(str, space)))
    ('reorder(i, j)', True)
    """
    order = default.last(Reorder).indices if default.last(Reorder) else ()
    orders = [order] + [p for p in itertools.permutations(order) if p != order]
    found: dict[str, Schedule] = {}
    for loop_order in orders:
        for outer in _outer_strategies(loop_order, outputs, threads):
            for tile, jam, masked in itertools.product((None, 0, 128, 512), (None, 1, 2, 8),
                                                       (False, True)):
                schedule = Schedule().reorder(*loop_order) if loop_order else Schedule()
                schedule = schedule + outer
                if tile is not None:
                    schedule = schedule.tile(tile)
                if jam is not None:
                    schedule = schedule.jam(jam)
                if masked and loop_order:
                    schedule = schedule.vectorize(loop_order[-1], 8, tail="mask")
                found.setdefault(str(schedule), schedule)
        if len(loop_order) >= 2:
            # cache blocks of the innermost loop, moved outermost (refused by lowering where
            # they would change results: a sparse output, a loop through a compressed level)
            last = loop_order[-1]
            for factor in (16, 64):
                schedule = Schedule().reorder(*loop_order).split(last, factor).reorder(
                    f"{last}0", *loop_order[:-1], f"{last}1")
                found.setdefault(str(schedule), schedule)
            # cache blocks of a middle loop (a product's summed k: each block's panel of the
            # operand it walks stays in the cache for every row), moved outermost
            for middle in loop_order[1:-1]:
                inner = tuple(f"{x}1" if x == middle else x for x in loop_order)
                schedule = Schedule().reorder(*loop_order).split(middle, 128).reorder(
                    f"{middle}0", *inner)
                found.setdefault(str(schedule), schedule)
    first = Schedule().reorder(*order) if order else Schedule()
    rest = [s for text, s in found.items() if text != str(first)]
    rng.shuffle(rest)
    return [first, *rest]


def _outer_strategies(order: tuple[str, ...], outputs: tuple[str, ...],
                      threads: int) -> list[Schedule]:
    if not order:
        return [Schedule()]
    outer = order[0]
    reduction = "none" if outer in outputs else "partials"
    found = [Schedule(), Schedule().serial()]
    for count in range(2, threads + 1):
        found.append(Schedule().parallelize(outer, reduction=reduction, threads=count))
        for factor in (16, 256):
            found.append(Schedule().split(outer, factor)
                         .parallelize(f"{outer}0", reduction=reduction, threads=count))
    return found


# ---------------------------------------------------------------------------------------------
# measuring


def _target(statement: str, operands: Any, formats: Any, dtype: Any):
    """A function running one schedule, the unscheduled kernel, and the tuning key."""
    if not isinstance(statement, str):
        raise InputError(f"autotune takes a statement or einsum subscripts as a string, not "
                         f"{type(statement).__name__}")
    if isinstance(operands, Mapping):
        if formats is None:
            # tune for the operands given: a scipy matrix or a sparse Tensor in its own format
            # (ta.compile's default would make every operand dense and convert it per call)
            found = {name: api._bind(op, None, f"operand {name}") for name, op in
                     operands.items()}
            formats = {name: t.format for name, t in found.items() if not t.format.is_dense}
        kernel = api.compile(statement, formats=formats, dtype=dtype or "float64")
        bound = kernel._bound(operands, warn=False)
        dims = infer_dims(kernel.statement, {n: t.shape for n, t in bound.items()})
        key = api.tuning_key_of(kernel._canonical, bound, kernel.dtype, dims)

        def run(schedule: Schedule) -> tuple[float, Any]:
            start = TIMER()
            scheduled = api.compile(statement, formats=formats, dtype=dtype or "float64",
                                    schedule=schedule)
            return TIMER() - start, lambda: scheduled(**operands)

        return run, kernel, key
    if not isinstance(operands, (list, tuple)):
        raise InputError("autotune's operands are a dict by tensor name (for a statement) or a "
                         "list (for einsum subscripts)")
    ranks = tuple(api._rank(op, k) for k, op in enumerate(operands))
    stmt, canonical = api._parse_einsum(statement, ranks)
    names = api._einsum_names(len(operands))
    overrides = api._format_overrides(formats, len(operands))
    bound = {name: api._bind(op, overrides.get(k), f"operand {k} ({name})")
             for k, (name, op) in enumerate(zip(names, operands))}
    value_dtype = api._value_dtype(stmt, [t.dtype for t in bound.values()], dtype)
    dims = infer_dims(stmt, {n: t.shape for n, t in bound.items()})
    key = api.tuning_key_of(canonical, bound, value_dtype, dims)
    kernel = api.compile(stmt, formats={n: t.format for n, t in bound.items()},
                         dtype=value_dtype)

    def run_einsum(schedule: Schedule) -> tuple[float, Any]:
        start = TIMER()
        api.einsum(statement, *operands, formats=formats, dtype=dtype, schedule=schedule,
                   casting="same_kind")
        return TIMER() - start, lambda: api.einsum(statement, *operands, formats=formats,
                                                   dtype=dtype, schedule=schedule,
                                                   casting="same_kind")

    return run_einsum, kernel, key


def _measure(run, schedule: Schedule, repeats: int) -> tuple[Trial, Any]:
    try:
        compile_s, call = run(schedule)
        result = call()                       # warm-up, and the result checked
    except (CompileError, UnsupportedError) as refused:
        return Trial(str(schedule), 0.0, (), str(refused).splitlines()[0]), None
    times = []
    for _ in range(repeats):
        start = TIMER()
        call()
        times.append(TIMER() - start)
    return Trial(str(schedule), compile_s, tuple(times)), result


def _dense(result: Any) -> np.ndarray:
    if hasattr(result, "toarray"):
        return np.asarray(result.toarray())
    if hasattr(result, "to_numpy"):
        return np.asarray(result.to_numpy())
    return np.asarray(result)


def _check_same(statement: str, schedule: Schedule, got: Any, expected: Any) -> None:
    a, b = _dense(got), _dense(expected)
    tolerance = 1e-4 if a.dtype == np.float32 else 1e-9
    if a.shape != b.shape or not np.allclose(a, b, rtol=tolerance, atol=tolerance):
        raise TensorAlgebraError(
            f"autotune {statement}: the schedule {schedule} gave a different result from the "
            f"compiler's own; this is a compiler bug, please report it with the statement")


def _progress(total: int, progress: bool | None, budget_s: float):
    if progress is False or (progress is None and budget_s < 3):
        return None
    try:
        from tqdm import tqdm
    except ImportError:   # tqdm is a dependency; a broken install only loses the bar
        return None
    return tqdm(total=total, desc="autotune", unit="schedule", file=sys.stderr, leave=False)


# ---------------------------------------------------------------------------------------------
# the log


def _log_path(log: str | Path | None) -> Path | None:
    if log is not None:
        return Path(log)
    directory = api.kernel_cache().options.cache_dir
    return directory / "autotune.jsonl" if directory is not None else None


def environment() -> dict[str, Any]:
    """What a trial ran on: versions, machine and threads."""
    from importlib.metadata import version

    return {"tensoralg": _version.__version__, "numpy": np.__version__,
            "scipy": version("scipy"), "llvmlite": version("llvmlite"),
            "python": platform.python_version(), "machine": platform.machine(),
            "cpu": _cpu_model(), "cores": os.cpu_count(),
            "threads": api.kernel_cache().threads.threads}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _write_log(path: Path | None, statement: str, key: str, trial: Trial, seed: int,
               machine: dict[str, Any]) -> None:
    if path is None:
        return
    record = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "statement": statement, "key": key,
              "seed": seed, "schedule": trial.schedule, "compile_s": trial.compile_s,
              "times_s": list(trial.times_s), "median_s": trial.median_s
              if trial.times_s else None, "refused": trial.refused,
              "environment": machine}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps(record) + "\n")
    except OSError as err:
        raise InputError(f"autotune cannot write its log to {path}: {err}") from None


__all__ = ["Trial", "TuneResult", "autotune", "environment", "search_space"]
