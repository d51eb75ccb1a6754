"""benchmarks/einsum_suites.py and its pytest plugin: what counts, how failures group, and
how a replaced call is checked against the original (no suite is run here)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import einsum_suite_plugin as plugin  # noqa: E402
import einsum_suites  # noqa: E402


def rec(nodeid, outcome, calls=1, kind=None, exception=None, message="", **extra):
    found = {"nodeid": nodeid, "outcome": outcome, "calls": calls, **extra}
    if kind:
        found.update(kind=kind, exception=exception, message=message)
    return found


def test_only_tests_that_call_einsum_and_pass_with_the_original_count():
    baseline = [rec("a", "passed"), rec("b", "passed"), rec("c", "passed"), rec("d", "passed"),
                rec("e", "passed", calls=0), rec("f", "failed"), rec("g", "skipped")]
    measured = [rec("a", "passed"),
                rec("b", "error", kind="refusal", exception="UnsupportedError",
                    message="operand 0 (A): dtype int8 is not supported"),
                rec("c", "error", kind="refusal", exception="UnsupportedError",
                    message="operand 1 (B): dtype uint16 is not supported"),
                rec("e", "failed", kind="assertion", exception="AssertionError")]
    summary = einsum_suites.summarise(baseline, measured)
    assert summary["counted"] == 4 and summary["tests"] == 7
    assert summary["left_out"] == {"no call of the replaced function": 1,
                                   "failed with the original": 1, "skipped with the original": 1}
    # d has no record: the run stopped before it
    assert summary["outcomes"] == {"passed": 1, "failed": 0, "error": 2, "timeout": 0,
                                   "missing": 1}
    top = summary["categories"][0]
    assert (top["count"], top["kind"]) == (2, "refusal")
    assert top["category"] == "UnsupportedError: operand N: dtype <dtype> is not supported"


def test_disagreement_is_exact_for_integers_and_scaled_for_floats():
    assert plugin.disagreement(np.arange(4), np.arange(4)) is None
    assert "1 of 4 values differ" in plugin.disagreement(np.array([0, 1, 2, 4]), np.arange(4))
    assert plugin.disagreement(np.ones(3), np.ones((3, 1))).startswith("shape (3,)")
    big = np.array([1e6, 1.0])
    assert plugin.disagreement(big + 1e-5, big) is None          # far below 1e-9 x 1e6
    assert plugin.disagreement(np.float32(1.00001), np.float64(1.0)) is None
    assert plugin.disagreement(big + [0, 1e-2], big) is not None


def test_a_replaced_call_is_shadowed_by_the_original():
    recorder = plugin.Recorder(None, 0.0)

    def wrong(subscripts, *operands, out=None):
        result = np.einsum(subscripts, *operands) + 1     # np.einsum here is not wrapped
        if out is not None:
            out[...] = 0
            return out
        return result

    replaced = recorder.wrap(np.einsum, wrong, True, "numpy.einsum")
    a = np.arange(4.0).reshape(2, 2)
    replaced("ij->ji", a)
    out = np.empty((2, 2))
    replaced("ij->ji", a, out=out)
    state = recorder.state
    assert state.calls == 2 and state.unshadowed == 0
    # the first call's result; the second call's result (out itself) and out
    assert [m.split("): ")[1].split(":")[0] for m in state.mismatches] == ["result", "result",
                                                                           "out"]
    assert all("values differ" in m for m in state.mismatches)
    assert "numpy.einsum('ij->ji', ndarray(2, 2) float64" in state.mismatches[0]


def test_tensoralg_refusals_are_recorded_and_the_original_is_not_asked_twice():
    recorder = plugin.Recorder(None, 0.0)
    calls = []

    def original(*args):
        calls.append(args)
        raise ValueError("bad subscripts")

    def refuse(*args):
        raise NotImplementedError("not yet")

    replaced = recorder.wrap(original, refuse, True, "lib.einsum")
    try:
        replaced("i->&", 1)
    except NotImplementedError as exc:
        assert plugin._raised_by(exc, recorder.state.raised) is exc
    assert len(calls) == 1 and recorder.state.unshadowed == 0
