#!/usr/bin/env python
"""Run NumPy's, opt_einsum's and pydata sparse's own einsum tests with their einsum replaced by
``ta.einsum``, and count what passes.

    python benchmarks/einsum_suites.py [--suite numpy,opt_einsum,sparse] [--timeout 60]
                                       [-k EXPR] [--out FILE]

The tests are the copies inside the installed packages (``numpy/_core/tests/test_einsum.py``;
opt_einsum's ``test_contract.py``, ``test_input.py``, ``test_edge_cases.py``; sparse's
``numba_backend/tests/test_einsum.py``), run from there by pytest in a child process with
``einsum_suite_plugin.py`` (which says what "replaced" means for each library, and how a
result is checked against the original function's).

Each suite runs twice: once with pass-through wrappers (the baseline: which tests call the
replaced function at all, and which pass with the original), once with tensoralg. A test
*counts* when the baseline called the replaced function and passed. Each counted test is
``passed``, ``failed`` (an assertion did not hold), ``error`` (an exception escaped) or
``timeout``, and each failure is of a kind: ``wrong number`` (the worst: a value that differs
from the original's), ``refusal`` (tensoralg raised), ``no error raised`` (tensoralg accepted
what the original refuses), ``precision`` (a value check finer than the agreement with the
original), ``assertion`` (another assertion, on a type, a dtype or an identity), ``other``.
Failures are grouped by exception type and the first line of the message, with numbers,
dtype names and quoted text other than names blanked out.

The result goes to ``results/einsum_suites-<YYYYMMDD-HHMMSS>-<commit>.json`` (see
``record.py``); ``report.py`` renders it into RESULTS.md and EINSUM_SUITES.md. Exits with status
1 when any call returned a wrong number.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import record

HERE = Path(__file__).resolve().parent
SUITE_TIME_LIMIT_S = 3600       # a whole suite; a per-test limit catches single hangs first
KINDS = ("wrong number", "refusal", "no error raised", "precision", "assertion", "timeout",
         "other")
_NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
_DTYPE = re.compile(r"\bdtype (\w+)")
_OPERAND = re.compile(r"\boperand N \(\w+\)")     # tensoralg's "operand 1 (B)"
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NAME = re.compile(r"[A-Za-z_][\w.]*")


@dataclass(frozen=True)
class Suite:
    """A library's einsum tests: the package and its test files (the first of each list of
    alternative paths that exists: numpy moved ``core`` to ``_core``)."""

    name: str
    package: str
    files: tuple[tuple[str, ...], ...]


SUITES = (
    Suite("numpy", "numpy", (("_core/tests/test_einsum.py", "core/tests/test_einsum.py"),)),
    Suite("opt_einsum", "opt_einsum", (("tests/test_contract.py",), ("tests/test_input.py",),
                                       ("tests/test_edge_cases.py",))),
    Suite("sparse", "sparse", (("numba_backend/tests/test_einsum.py", "tests/test_einsum.py"),)),
)


def test_files(suite: Suite) -> list[Path] | str:
    """The suite's test files inside the installed package, or why there are none."""
    spec = importlib.util.find_spec(suite.package)
    if spec is None or not spec.submodule_search_locations:
        return f"{suite.package} is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    found = []
    for alternatives in suite.files:
        path = next((root / a for a in alternatives if (root / a).is_file()), None)
        if path is None:
            return f"none of {', '.join(alternatives)} in {root}"
        found.append(path)
    return found


def timeout_options(seconds: float) -> list[str]:
    """pytest-timeout's options when it is installed (signal method: a timed-out test fails
    and the run goes on); otherwise the plugin's own alarm."""
    if importlib.util.find_spec("pytest_timeout") is not None:
        return [f"--timeout={seconds:g}", "--timeout-method=signal"]   # loaded by entry point
    return [f"--einsum-alarm={seconds:g}"]


def run_suite(suite: Suite, files: list[Path], mode: str, seconds: float,
              keyword: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run one suite in a child pytest; return its per-test records and how the run went."""
    with tempfile.TemporaryDirectory() as scratch:
        records = Path(scratch) / "records.jsonl"
        config = Path(scratch) / "pytest.ini"     # no ini file of site-packages applies
        config.write_text("[pytest]\n")
        # test ids relative to the folder holding the package: "numpy/_core/tests/..."
        root = Path(importlib.util.find_spec(suite.package).origin).parents[1]
        command = [sys.executable, "-m", "pytest", "-q", "--tb=no", "-p", "no:cacheprovider",
                   "-c", str(config), f"--rootdir={root}",
                   "-p", "einsum_suite_plugin", f"--einsum-suite={suite.name}",
                   f"--einsum-mode={mode}", f"--einsum-records={records}",
                   *timeout_options(seconds), *(["-k", keyword] if keyword else []),
                   *map(str, files)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
            PYTHONDONTWRITEBYTECODE="1")       # write nothing into site-packages
        begin = time.perf_counter()
        try:
            proc = subprocess.run(command, cwd=scratch, env=env, capture_output=True,
                                  text=True, timeout=SUITE_TIME_LIMIT_S)
            status, tail = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
        except subprocess.TimeoutExpired as err:
            status, tail = "killed", f"the whole suite ran past {SUITE_TIME_LIMIT_S} s: {err}"
        found = [json.loads(line) for line in records.read_text().splitlines()] \
            if records.exists() else []
    return found, {"mode": mode, "exit_status": status, "seconds": round(
        time.perf_counter() - begin, 1), "tests": len(found), "output_tail": tail}


def category(rec: dict[str, Any]) -> str:
    """``Type: first line``, with numbers, dtype names and quoted text other than a name
    blanked, so that like failures group.

    >>> print(category({"exception": "ShapeError", "message": "operand 1 (B) of 'ij,j': int8"}))
    ShapeError: operand N of '…': int8
    >>> print(category({"exception": "AssertionError", "message": "assert 'dense' == 'coo'"}))
    AssertionError: assert 'dense' == 'coo'
    """
    message = _QUOTED.sub(_blank_unless_name, rec.get("message", ""))
    message = _DTYPE.sub("dtype <dtype>", message)
    message = _OPERAND.sub("operand N", _NUMBER.sub("N", message))
    return f"{rec.get('exception', '?')}: {message}".rstrip(": ")


def _blank_unless_name(quoted: re.Match) -> str:
    return quoted[0] if _NAME.fullmatch(quoted[0][1:-1]) else "'…'"


def summarise(baseline: list[dict[str, Any]], measured: list[dict[str, Any]]
              ) -> dict[str, Any]:
    """Counts, kinds, categories and wrong numbers of one suite's counted tests."""
    before = {r["nodeid"]: r for r in baseline}
    after = {r["nodeid"]: r for r in measured}
    counted = [n for n, r in before.items() if r["calls"] > 0 and r["outcome"] == "passed"]
    left_out = collections.Counter(
        "no call of the replaced function" if r["calls"] == 0
        else f"{r['outcome']} with the original" for r in before.values()
        if r["nodeid"] not in counted)
    outcomes: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    groups: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    wrong, dtypes = [], []
    for nodeid in counted:
        rec = after.get(nodeid, {"outcome": "missing", "kind": "other",
                                 "exception": "missing", "message": "no record: the run "
                                 "stopped before this test"})
        outcomes[rec["outcome"]] += 1
        dtypes += [f"{nodeid}: {d}" for d in rec.get("dtypes", [])]
        if rec["outcome"] == "passed":
            continue
        kinds[rec["kind"]] += 1
        groups[(rec["kind"], category(rec))].append(nodeid)
        if rec["kind"] == "wrong number":
            wrong.append({"test": nodeid, "calls": rec.get("mismatches", []),
                          "failure": category(rec)})
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return {
        "tests": len(before), "counted": len(counted), "left_out": dict(left_out),
        "outcomes": {k: outcomes.get(k, 0) for k in ("passed", "failed", "error", "timeout",
                                                     "missing")},
        "kinds": {k: kinds.get(k, 0) for k in KINDS},
        "categories": [{"kind": kind, "category": text, "count": len(ids),
                        "examples": ids[:3]} for (kind, text), ids in ordered],
        "wrong_numbers": wrong,
        "dtype_differences": dtypes[:50],
        "extra_in_run": sorted(set(after) - set(before))[:20],
    }


def run(suites: Iterable[Suite], seconds: float, keyword: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for suite in suites:
        files = test_files(suite)
        if isinstance(files, str):
            out[suite.name] = {"skipped": files}
            print(f"{suite.name}: skipped ({files})", flush=True)
            continue
        baseline, base_run = run_suite(suite, files, "reference", seconds, keyword)
        measured, ta_run = run_suite(suite, files, "tensoralg", seconds, keyword)
        summary = summarise(baseline, measured)
        summary.update(files=[str(f) for f in files], runs=[base_run, ta_run])
        out[suite.name] = summary
        print(f"{suite.name}: {summary['outcomes']['passed']} of {summary['counted']} counted "
              f"tests pass ({base_run['seconds']} s baseline, {ta_run['seconds']} s "
              f"tensoralg); kinds {summary['kinds']}", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=",".join(s.name for s in SUITES),
                        help="comma-separated: " + ", ".join(s.name for s in SUITES))
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per test")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression (a partial run)")
    parser.add_argument("--out", help="result file (default results/einsum_suites-*.json)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.suite.split(",") if n.strip()]
    unknown = set(names) - {s.name for s in SUITES}
    if unknown:
        parser.error(f"unknown suite(s): {', '.join(sorted(unknown))}")
    begun = record.start()
    start = time.perf_counter()
    suites = run([s for s in SUITES if s.name in names], args.timeout, args.keyword)
    payload = {"method": {"timeout_s": args.timeout, "keyword": args.keyword,
                          "timeout_mechanism": timeout_options(args.timeout)[-1]},
               "suites": suites, "elapsed_s": round(time.perf_counter() - start, 1)}
    path = record.write("einsum_suites", payload, begun, args.out)
    print(f"wrote {path}")
    wrong = sum(len(s.get("wrong_numbers", [])) for s in suites.values())
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
