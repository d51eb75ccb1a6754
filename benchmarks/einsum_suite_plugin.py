"""pytest plugin for ``einsum_suites.py``: run a library's own einsum tests with its einsum
replaced by ``ta.einsum``, and write one JSON line per test saying what happened.

    python -m pytest -p einsum_suite_plugin --einsum-suite numpy --einsum-records out.jsonl \\
        .../numpy/_core/tests/test_einsum.py

What "replaced" means, per suite (the replacement is installed before the test modules are
imported, so ``from opt_einsum import contract`` and ``parametrize([np.einsum, ...])`` see it):

- ``numpy``: ``numpy.einsum`` -> ``ta.einsum`` and ``numpy.einsum_path`` -> ``ta.einsum_path``,
  every keyword passed through.
- ``opt_einsum``: ``opt_einsum.contract`` -> ``ta.einsum``. opt_einsum's hints on *how* to
  compute (``use_blas``, ``memory_limit``, ``backend="auto"`` or ``"numpy"``) are dropped; every
  other keyword is passed through. ``contract_path`` and ``contract_expression`` stay
  opt_einsum's: a test that only calls those does not count.
- ``sparse``: ``sparse.einsum`` -> ``ta.einsum``. The tests' reference, ``np.einsum`` on the
  densified operands, stays NumPy's.

A call made while tensoralg runs goes to the original (tensoralg may use NumPy internally).

Many tests compare the replaced function with itself (``optimize=False`` against
``optimize="greedy"``), which cannot catch a wrong number. So every replaced call is also
*shadowed*: the original function runs first on the same arguments (``out=`` replaced by a
copy, warnings silenced) and tensoralg's result, and ``out=`` after the call, are compared
with it (integers and booleans exactly; floats to a tolerance of their precision, scaled by
the largest magnitude). A disagreement makes the test a wrong number whatever its own
assertions say. Calls with object arrays are not shadowed (their elements may count calls).

``--einsum-mode reference`` installs pass-through wrappers instead: the runner's baseline, which
says which tests call the replaced functions at all and which pass with the originals.

Each record: ``nodeid``, ``outcome`` (``passed``, ``failed``: an assertion did not hold,
``error``: an exception escaped, ``timeout``, ``skipped``, ``xfailed``, ``xpassed``), ``kind``
(``wrong number``, ``refusal``: the exception came from tensoralg, ``no error raised``,
``precision``: a value check failed although every call agreed with the original within the
shadow's tolerance, ``assertion``, ``other``), the exception's type and first line, the
number of replaced calls, and the disagreements found by the shadow.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import re
import signal
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

OPT_EINSUM_HINTS = ("use_blas", "memory_limit")      # how to compute, never what
OPT_EINSUM_ARRAY_BACKENDS = ("auto", "numpy")        # the operands' own array library
VALUE_ASSERTION = re.compile(r"Arrays are not|Not equal to tolerance|not almost equal|"
                             r"Mismatch(ed)? elements|Items are not equal|allclose|array_equal")
NOT_RAISED = re.compile(r"DID NOT RAISE|not raised")
RTOL = {2: 1e-2, 4: 1e-4}       # by float itemsize; wider floats 1e-9


@dataclass(frozen=True)
class Patch:
    """``module.attribute`` replaced by what ``replacement(ta)`` returns."""

    module: str
    attribute: str
    replacement: Callable[[Any], Callable[..., Any]]
    shadow: bool = True        # compare results with the original's


def _opt_einsum_contract(ta: Any) -> Callable[..., Any]:
    def contract(*operands: Any, **kwargs: Any) -> Any:
        for hint in OPT_EINSUM_HINTS:
            kwargs.pop(hint, None)
        if kwargs.get("backend") in OPT_EINSUM_ARRAY_BACKENDS:
            del kwargs["backend"]
        return ta.einsum(*operands, **kwargs)
    return contract


PATCHES: dict[str, tuple[Patch, ...]] = {
    "numpy": (Patch("numpy", "einsum", lambda ta: ta.einsum),
              Patch("numpy", "einsum_path", lambda ta: ta.einsum_path, shadow=False)),
    "opt_einsum": (Patch("opt_einsum", "contract", _opt_einsum_contract),),
    "sparse": (Patch("sparse", "einsum", lambda ta: ta.einsum),),
}


def active_patches(suite: str, ta: Any) -> list[Patch]:
    """The patches of ``suite`` that tensoralg can serve (``ta.einsum_path`` may be absent)."""
    found = []
    for patch in PATCHES[suite]:
        try:
            patch.replacement(ta)
        except AttributeError:
            continue
        found.append(patch)
    return found


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("einsum-suite")
    group.addoption("--einsum-suite", choices=sorted(PATCHES), help="which library's einsum")
    group.addoption("--einsum-mode", choices=("tensoralg", "reference"), default="tensoralg")
    group.addoption("--einsum-records", help="JSON-lines file, one record per test")
    group.addoption("--einsum-alarm", type=float, default=0.0,
                    help="per-test time limit in seconds when pytest-timeout is absent")


def pytest_configure(config: Any) -> None:
    suite = config.getoption("--einsum-suite")
    if suite is None:
        return
    recorder = Recorder(config.getoption("--einsum-records"), config.getoption("--einsum-alarm"))
    import tensoralg as ta

    for patch in active_patches(suite, ta):
        module = importlib.import_module(patch.module)
        original = getattr(module, patch.attribute)
        if config.getoption("--einsum-mode") == "reference":
            replacement, shadow = original, False
        else:
            replacement, shadow = patch.replacement(ta), patch.shadow
        setattr(module, patch.attribute,
                recorder.wrap(original, replacement, shadow, f"{patch.module}.{patch.attribute}"))
    config.pluginmanager.register(recorder, "einsum-suite-recorder")


# ---------------------------------------------------------------------------------------------
# comparing with the original


def dense(value: Any) -> np.ndarray:
    """Any einsum result as a NumPy array (scipy, pydata sparse and ta.Tensor densified)."""
    for method in ("to_numpy", "todense", "toarray"):
        if hasattr(value, method) and not isinstance(value, np.ndarray):
            value = getattr(value, method)()
            break
    return np.asarray(value)


def disagreement(got: Any, want: Any) -> str | None:
    """Why ``got`` is not ``want`` as a number (None when it is)."""
    got, want = dense(got), dense(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.size == 0:
        return None
    if got.dtype.kind in "biu" and want.dtype.kind in "biu":
        if np.array_equal(got, want):
            return None
        wrong = np.flatnonzero(got.ravel() != want.ravel())
        return (f"{wrong.size} of {got.size} values differ, e.g. {got.ravel()[wrong[0]]!r} "
                f"for {want.ravel()[wrong[0]]!r}")
    floats = [d for d in (got.dtype, want.dtype) if d.kind in "fc"]
    rtol = max(RTOL.get(d.itemsize // (2 if d.kind == "c" else 1), 1e-9) for d in floats)
    g, w = got.astype(np.complex128), want.astype(np.complex128)
    scale = float(np.nanmax(np.abs(w))) if np.isfinite(w).any() else 0.0
    close = np.isclose(g, w, rtol=rtol, atol=rtol * scale, equal_nan=True)
    if close.all():
        return None
    wrong = np.flatnonzero(~close.ravel())
    return (f"{wrong.size} of {got.size} values differ beyond rtol {rtol:g}, e.g. "
            f"{got.ravel()[wrong[0]]!r} for {want.ravel()[wrong[0]]!r}")


def describe(name: str, args: tuple, kwargs: dict) -> str:
    """A call in one line: the subscripts, each operand's type, shape and dtype, keywords."""
    parts = []
    for arg in args:
        if isinstance(arg, str):
            parts.append(repr(arg))
        elif hasattr(arg, "shape") and hasattr(arg, "dtype"):
            parts.append(f"{type(arg).__name__}{tuple(arg.shape)} {arg.dtype}")
        else:
            text = repr(arg)
            parts.append(text if len(text) <= 30 else text[:27] + "...")
    parts += [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _short(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__}{tuple(value.shape)} {value.dtype}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shadowable(args: tuple, kwargs: dict) -> bool:
    return not any(getattr(getattr(a, "dtype", None), "kind", "") == "O"
                   for a in (*args, *kwargs.values()))


# ---------------------------------------------------------------------------------------------
# per-test records


@dataclass
class TestState:
    """What the replaced calls of one test did."""

    calls: int = 0
    unshadowed: int = 0                 # calls with no verdict from the original
    raised: list[BaseException] = dataclasses.field(default_factory=list)
    mismatches: list[str] = dataclasses.field(default_factory=list)
    dtypes: list[str] = dataclasses.field(default_factory=list)
    reports: dict[str, Any] = dataclasses.field(default_factory=dict)
    started: float = 0.0


class SuiteTimeout(Exception):
    """The per-test alarm rang (only when pytest-timeout is not installed)."""


class Recorder:
    """Counts and shadows the replaced calls of the running test and writes its record."""

    def __init__(self, path: str | None, alarm: float) -> None:
        self.path = path
        self.alarm = alarm
        self.state = TestState()
        self.depth = 0          # > 0 while tensoralg or the original runs

    def wrap(self, original: Callable[..., Any], replacement: Callable[..., Any],
             shadow: bool, name: str) -> Callable[..., Any]:
        @functools.wraps(original)
        def replaced(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return original(*args, **kwargs)
            self.depth += 1
            try:
                return self._call(original, replacement, shadow, name, args, kwargs)
            finally:
                self.depth -= 1
        return replaced

    def _call(self, original: Callable[..., Any], replacement: Callable[..., Any], shadow: bool,
              name: str, args: tuple, kwargs: dict) -> Any:
        state = self.state
        state.calls += 1
        reference, has_reference = None, False
        if shadow and _shadowable(args, kwargs):
            own = dict(kwargs)
            if isinstance(kwargs.get("out"), np.ndarray):
                own["out"] = kwargs["out"].copy()      # the original must not write the test's
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    reference, has_reference = original(*args, **own), True
            except Exception:  # noqa: BLE001 - the original refuses: nothing to compare
                pass
        try:
            result = replacement(*args, **kwargs)
        except Exception as exc:
            state.raised.append(exc)
            raise
        if not has_reference:
            state.unshadowed += 1
            return result
        self._compare(name, args, kwargs, result, reference)
        return result

    def _compare(self, name: str, args: tuple, kwargs: dict, result: Any,
                 reference: Any) -> None:
        state = self.state
        checks = [("result", result)]
        if isinstance(kwargs.get("out"), np.ndarray):
            checks.append(("out", kwargs["out"]))
        for what, got in checks:
            try:
                why = disagreement(got, reference)
            except Exception as exc:  # noqa: BLE001 - unreadable result: the test will say
                why = f"cannot read the {what} as an array ({type(exc).__name__})"
            if why is not None:
                state.mismatches.append(f"{describe(name, args, kwargs)}: {what}: {why}")
        got_dtype = getattr(result, "dtype", None)
        want_dtype = getattr(reference, "dtype", None)
        if got_dtype is not None and want_dtype is not None and got_dtype != want_dtype:
            state.dtypes.append(f"{describe(name, args, kwargs)}: {got_dtype}, expected "
                                f"{want_dtype}")

    # -- pytest hooks ---------------------------------------------------------------------

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.state = TestState(started=time.perf_counter())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        if self.alarm <= 0:
            return (yield)

        def ring(signum: int, frame: Any) -> None:
            raise SuiteTimeout(f"Timeout >{self.alarm}s")
        previous = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, self.alarm)
        try:
            return (yield)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        report = yield
        self.state.reports[call.when] = (report, call.excinfo)
        return report

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        record = classify(nodeid, self.state)
        if self.path:
            with open(self.path, "a") as handle:
                handle.write(json.dumps(record) + "\n")


def classify(nodeid: str, state: TestState) -> dict[str, Any]:
    """The record of one finished test."""
    record: dict[str, Any] = {"nodeid": nodeid, "calls": state.calls,
                              "seconds": round(time.perf_counter() - state.started, 3),
                              "mismatches": state.mismatches[:5], "dtypes": state.dtypes[:5]}
    failing = [(when, rep, exc) for when, (rep, exc) in state.reports.items() if rep.failed]
    call = state.reports.get("call")
    if not failing:
        if call is None:
            skipped = state.reports.get("setup", (None, None))[0]
            record["outcome"] = "xfailed" if hasattr(skipped, "wasxfail") else "skipped"
        elif call[0].skipped:
            record["outcome"] = "xfailed" if hasattr(call[0], "wasxfail") else "skipped"
        else:
            record["outcome"] = "xpassed" if hasattr(call[0], "wasxfail") else "passed"
        if state.mismatches and record["outcome"] in ("passed", "xpassed"):
            # the test compared tensoralg with itself: the shadow is the only judge
            record.update(outcome="failed", kind="wrong number", exception="Shadow",
                          message="a result differs from the original's (the test's own "
                                  "checks passed)")
        return record
    when, report, excinfo = failing[0]
    exc = excinfo.value if excinfo is not None else None
    message = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else ""
    record.update(exception=type(exc).__name__ if exc is not None else "?",
                  message=message[:300], phase=when)
    from_tensoralg = _raised_by(exc, state.raised)
    assertion = isinstance(exc, AssertionError) or type(exc).__name__ == "Failed"
    if message.startswith("Timeout") or isinstance(exc, SuiteTimeout):
        kind, outcome = "timeout", "timeout"
    elif state.mismatches:
        kind, outcome = "wrong number", "failed" if assertion else "error"
    elif from_tensoralg is not None:
        kind, outcome = "refusal", "error"
        inner = str(from_tensoralg).strip().splitlines()
        record.update(exception=type(from_tensoralg).__name__,
                      message=(inner[0] if inner else "")[:300])
    elif assertion and NOT_RAISED.search(message):
        kind, outcome = "no error raised", "failed"
    elif assertion and VALUE_ASSERTION.search(str(exc)):
        # no call disagreed with the original beyond the shadow's tolerance: a number the
        # shadow could not check, or a check finer than its tolerance
        kind = "wrong number" if state.unshadowed else "precision"
        outcome = "failed"
    elif assertion:
        kind, outcome = "assertion", "failed"
    else:
        kind, outcome = "other", "error"
    record.update(outcome=outcome, kind=kind)
    return record


def _raised_by(exc: BaseException | None, raised: list[BaseException]) -> BaseException | None:
    """The exception tensoralg raised that ``exc`` is, or was raised from, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if any(exc is r for r in raised):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None
