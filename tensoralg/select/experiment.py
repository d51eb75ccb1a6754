"""``experiment``: run one expression under every candidate format, check it, and time it.

For each candidate assignment of formats (one per sparse operand, and the output's) the
experiment converts the operands (timed), compiles the kernel with ``ta.compile`` (timed), calls
it once (timed: the first call may still specialise the kernel for the operands' index type),
checks the result against the first candidate's, makes ``warmup`` more calls, and times
``repeats`` calls one by one. When the output is dense the timed calls go through
``Kernel.bind`` (the kernel alone, as a hot loop would call it); otherwise they are plain calls.

>>> import numpy as np, scipy.sparse as sp, tensoralg as ta
>>> A = sp.random_array((20, 20), density=0.2, format="csr", random_state=0)
>>> table = ta.select.experiment("y(i) = A(i,j) * x(j)", {"A": A, "x": np.ones(20)},
...                             repeats=3, progress=False)
>>> [row.formats[0][1] for row in table.rows]
['dense', 'csr', 'csc', 'dcsr', 'dcsc', 'coo']
"""
from __future__ import annotations

import gc
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

import tensoralg as ta
from tensoralg.select import operands as ops
from tensoralg.select.candidates import (
    DEFAULT_LIMIT,
    Assignment,
    Plan,
    default_formats,
    label,
    plan,
    resolve,
)
from tensoralg.select.expression import Expression
from tensoralg.select.records import Environment, ExperimentRow, ExperimentTable

AUTO_PROGRESS_SECONDS = 3.0     # progress=None shows a bar when the run should take longer
MAX_DENSE_BYTES = 2**28         # a default dense candidate larger than this is left out


class ResultMismatchError(ta.TensorAlgebraError, RuntimeError):
    """Two candidates of an experiment computed different results: a bug in tensoralg that
    the message lets you report (both format assignments, the worst entry)."""


def experiment(expr: str, operands: Mapping[str, Any] | Sequence[Any],
               candidates: Mapping[Any, Any] | Sequence[Mapping[Any, Any]] | None = None,
               repeats: int = 7, seed: int = 0, warmup: int = 1, progress: bool | None = None,
               *, limit: int = DEFAULT_LIMIT) -> ExperimentTable:
    """Time ``expr`` under every candidate format of its sparse operands and output.

    ``expr`` is a TACO-style statement (``"y(i) = A(i,j) * x(j)"``, operands by name in a
    dict) or einsum subscripts (``"ij,j->i"``, operands in a list, named ``A``, ``B``, ...,
    output ``out``). ``candidates`` maps tensor names (or einsum positions) to lists of
    formats; a sparse operand not named gets the defaults for its order (matrices: dense,
    CSR, CSC, DCSR, DCSC, COO), a dense NumPy operand stays dense, the output's format is
    inferred. A list of dicts instead gives whole assignments, tensors not named kept as
    given. At most ``limit`` combinations run (a note says which were left out). After the
    first, candidates run in an order shuffled with ``seed``, so a drifting machine favours
    none. Every result must match the first candidate's (``ResultMismatchError``).

    >>> import numpy as np, tensoralg as ta
    >>> M = ta.Tensor.from_numpy(np.diag([1.0, 2.0, 3.0]), format="csr")
    >>> t = ta.select.experiment("ij,j->i", [M, np.ones(3)], candidates={0: ["csr", "coo"]},
    ...                          repeats=2, progress=False)
    >>> [row.label for row in t.rows]
    ['A=csr B=dense out=(inferred)', 'A=coo B=dense out=(inferred)']
    """
    for name, value, least in (("repeats", repeats, 1), ("warmup", warmup, 0),
                               ("limit", limit, 1), ("seed", seed, 0)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < least:
            raise ta.InputError(f"experiment: {name} must be an integer of at least {least}, "
                                f"not {value!r}")
    count = len(operands) if isinstance(operands, Sequence) and \
        not isinstance(operands, str) else None
    expression = Expression.parse(expr, count)
    given = expression.bind(operands)
    dtype = np.result_type(*(ops.value_dtype(op) for op in given.values())) if given else \
        np.dtype(np.float64)
    named = {name: ops.prepared(op, dtype) for name, op in given.items()}
    the_plan = _plan(expression, named, candidates, limit)
    runner = _Runner(expression, named, dtype, repeats, warmup)
    shuffled = np.random.default_rng(seed).permutation(len(the_plan.assignments) - 1) + 1
    rows, notes = _run_all(runner, the_plan, [0, *shuffled.tolist()], progress)
    return ExperimentTable(expression.text, tuple((n, ops.describe(op)) for n, op in given.items()),
                           rows, Environment.current(int(seed)), int(repeats), int(warmup),
                           notes)


def _run_all(runner: "_Runner", the_plan: Plan, order: list[int], progress: bool | None
             ) -> tuple[tuple[ExperimentRow, ...], tuple[str, ...]]:
    """Measure the assignments in ``order``, check each result against the first that ran,
    and return the rows in the plan's order, with the notes."""
    expression = runner.expression
    rows: dict[int, ExperimentRow] = {}
    notes = list(the_plan.notes)
    reference: tuple[Assignment, Any] | None = None
    with _Progress(len(order), progress) as bar:
        for k in order:
            assignment = the_plan.assignments[k]
            try:
                row, results = runner.measure(assignment)
            except ta.UnsupportedError as err:
                notes.append(f"skipped {_label(expression, assignment)}: "
                             f"{str(err).splitlines()[0]}")
            else:
                reference = reference or (assignment, results[0])
                for result in results:
                    _check(expression, reference, assignment, result, runner.dtype)
                rows[k] = row
            bar.step()
    if not rows:
        raise ta.UnsupportedError(f"{expression.text}: no candidate could run; "
                                  + "; ".join(notes))
    if len({row.timing for row in rows.values()}) > 1:
        notes.append("rows timed 'bound' time the kernel alone (Kernel.bind, dense "
                     "results); rows timed 'call' time whole calls, binding the operands and "
                     "wrapping the sparse result included: compare like with like")
    return tuple(rows[k] for k in sorted(rows)), tuple(notes)


# -- candidates ---------------------------------------------------------------------------------


def _plan(expression: Expression, named: Mapping[str, Any], candidates: Any, limit: int) -> Plan:
    """The assignments to run: per-tensor choices (their product) or whole assignments."""
    tensors = {**{name: ops.rank(op) for name, op in named.items()},
               expression.output: expression.output_rank}
    if isinstance(candidates, Sequence) and not isinstance(candidates, str):
        whole = [_by_name(expression, tensors, entry) for entry in candidates]
        if not whole:
            raise ta.InputError("experiment: candidates is an empty list")
        assignments = tuple(tuple((name, _resolved(choice.get(name, _given(named, name)),
                                                   name, tensors[name]))
                                  for name in tensors) for choice in whole)
        notes = () if len(assignments) <= limit else (
            f"ran the first {limit} of {len(assignments)} assignments given (the limit)",)
        return Plan(assignments[:limit], notes)
    chosen = _by_name(expression, tensors, candidates or {})
    choices: dict[str, list[ta.Format | None]] = {}
    notes = []
    for name, order in tensors.items():
        if name in chosen:
            specs = chosen[name]
            specs = [specs] if specs is None or isinstance(specs, (str, ta.Format)) else specs
            choices[name] = [_resolved(spec, name, order) for spec in specs]
            if not choices[name]:
                raise ta.InputError(f"experiment: no candidate formats for {name}")
        elif name in named and ops.is_sparse(named[name]):
            choices[name] = list(default_formats(order))
            dense_bytes = int(np.prod(named[name].shape, dtype=np.float64)) * 8
            if dense_bytes > MAX_DENSE_BYTES:
                choices[name] = [f for f in choices[name] if not f.is_dense]
                notes.append(f"left out dense storage of {name}: it would take "
                             f"{dense_bytes / 2**30:.1f} GiB")
        else:
            choices[name] = [_given(named, name)]
    return plan(choices, limit, notes)


def _by_name(expression: Expression, tensors: Mapping[str, int], choices: Any) -> dict:
    if not isinstance(choices, Mapping):
        raise ta.InputError(f"experiment: candidates is a dict from tensor name to formats, "
                            f"or a list of such dicts, not {type(choices).__name__}")
    names = list(tensors)
    result = {}
    for key, value in choices.items():
        name = expression.operands[key] if expression.einsum and \
            isinstance(key, (int, np.integer)) and 0 <= key < len(expression.operands) else key
        if name not in tensors:
            raise ta.InputError(f"experiment: candidates name {key!r}, which is not a tensor "
                                f"of {expression.text} (it has {', '.join(map(str, names))})")
        result[name] = value
    return result


def _given(named: Mapping[str, Any], name: str) -> ta.Format | None:
    return ops.own_format(named[name]) if name in named else None


def _resolved(spec: Any, name: str, order: int) -> ta.Format | None:
    return None if spec is None else resolve(spec, order, name)


def _label(expression: Expression, assignment: Assignment) -> str:
    return " ".join(f"{name}={_format_label(expression, name, fmt)}" for name, fmt in assignment)


def _format_label(expression: Expression, name: str, fmt: ta.Format | None) -> str:
    if fmt is None and name != expression.output:
        return "dense"
    return label(fmt)


# -- measuring ----------------------------------------------------------------------------------


@dataclass
class _Runner:
    expression: Expression
    named: Mapping[str, Any]
    dtype: np.dtype
    repeats: int
    warmup: int

    def measure(self, assignment: Assignment) -> tuple[ExperimentRow, list[Any]]:
        """One row, and the results to check: the first call's and the last timed call's."""
        output = self.expression.output
        tensors = dict(self.named)
        conversion = 0.0
        for name, fmt in assignment:
            if fmt is not None and name != output:
                start = time.perf_counter()
                tensors[name] = ops.stored(self.named[name], fmt, self.dtype)
                conversion += time.perf_counter() - start
        formats = {name: fmt for name, fmt in assignment if fmt is not None}
        start = time.perf_counter()
        kernel = ta.compile(self.expression.statement, formats=formats, dtype=self.dtype)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        first = kernel(**tensors)
        first_call_s = time.perf_counter() - start
        call, timing = _timed_call(kernel, tensors)
        for _ in range(self.warmup):
            call()
        times, last = _time(call, self.repeats)
        q1, median, q3 = np.percentile(times, [25, 50, 75])
        row = ExperimentRow(
            tuple((name, _format_label(self.expression, name, fmt)) for name, fmt in assignment),
            ops.storage_label(first), timing, conversion, compile_s, first_call_s,
            float(median), float(times.min()), float(times.max()), float(q3 - q1),
            sum(ops.storage_bytes(tensors[name]) for name in self.named),
            ops.storage_bytes(first))
        return row, [first, last]


def _timed_call(kernel: ta.Kernel, tensors: Mapping[str, Any]) -> tuple[Callable[[], Any], str]:
    """The kernel bound to its operands when it can be (dense output), else a plain call."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return kernel.bind(**tensors), "bound"
    except ta.TensorAlgebraError:
        return (lambda: kernel(**tensors)), "call"


def _time(call: Callable[[], Any], repeats: int) -> tuple[np.ndarray, Any]:
    """Seconds of each of ``repeats`` calls, with the garbage collector paused, and the last
    call's result."""
    ta.wait_for_optimised()   # time the optimised kernel, not its quick first build
    times = np.empty(repeats)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for k in range(repeats):
            start = time.perf_counter()
            result = call()
            times[k] = time.perf_counter() - start
    finally:
        if collecting:
            gc.enable()
    return times, result


def _check(expression: Expression, reference: tuple[Assignment, Any], assignment: Assignment,
           result: Any, dtype: np.dtype) -> None:
    """Raise ResultMismatchError unless ``result`` matches the reference result: the same
    shape and, entry by entry, equal within √ε of the dtype relative to the reference's
    largest magnitude (exactly equal for integers)."""
    first, expected = reference
    shape_a, index_a, values_a = ops.entries(expected)
    shape_b, index_b, values_b = ops.entries(result)
    where = f"{expression.text}: {_label(expression, assignment)} differs from the first " \
            f"candidate {_label(expression, first)}"
    if shape_a != shape_b:
        raise ResultMismatchError(f"{where}: shape {shape_b} instead of {shape_a}")
    union = np.union1d(index_a, index_b)
    a = np.zeros(len(union), dtype=np.result_type(values_a, values_b))
    b = np.zeros_like(a)
    a[np.searchsorted(union, index_a)] = values_a
    b[np.searchsorted(union, index_b)] = values_b
    tolerance = float(np.sqrt(np.finfo(dtype).eps)) if dtype.kind == "f" else 0.0
    finite = np.abs(a[np.isfinite(a)])
    scale = float(finite.max()) if len(finite) else 0.0
    close = np.isclose(b, a, rtol=tolerance, atol=tolerance * scale, equal_nan=True)
    if close.all():
        return
    bad = np.flatnonzero(~close)
    worst = bad[np.argmax(np.nan_to_num(np.abs(b[bad] - a[bad]), nan=np.inf))]
    position = tuple(int(i) for i in np.unravel_index(union[worst], shape_a)) if shape_a else ()
    raise ResultMismatchError(
        f"{where}: {len(bad)} of {len(union)} entries differ, the worst at {position}: "
        f"{b[worst]!r} instead of {a[worst]!r} (tolerance {tolerance:.1e} relative, "
        f"{tolerance * scale:.1e} absolute)")


class _Progress:
    """A tqdm bar on stderr: always (``True``), never (``False``), or (``None``) once the
    first candidates show the run will take over AUTO_PROGRESS_SECONDS on a terminal."""

    def __init__(self, total: int, mode: bool | None) -> None:
        self.total, self.mode, self.done, self.bar = total, mode, 0, None
        self.start = time.perf_counter()

    def __enter__(self) -> "_Progress":
        if self.mode:
            self._open()
        return self

    def step(self) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
        elif self.mode is None and self.done < self.total and sys.stderr.isatty():
            expected = (time.perf_counter() - self.start) / self.done * self.total
            if expected > AUTO_PROGRESS_SECONDS:
                self._open()

    def _open(self) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=self.total, initial=self.done, file=sys.stderr,
                        desc="experiment", unit="candidate", leave=False)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
