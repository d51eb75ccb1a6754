"""The Markdown of one ``einsum_suites.py`` result file: a section of RESULTS.md (counts, the
largest failure categories, every wrong number) and EINSUM_SUITES.md (every category).

``report.py`` calls these with the latest result file; the numbers come from it alone.

>>> pass_rate({"counted": 8, "outcomes": {"passed": 6}})
0.75
"""
from __future__ import annotations

from typing import Any, Sequence

SUITE_TITLES = {"numpy": "NumPy `test_einsum.py`",
                "opt_einsum": "opt_einsum `test_contract.py`, `test_input.py`, "
                              "`test_edge_cases.py`",
                "sparse": "pydata sparse `test_einsum.py`"}
PASS_GOAL = 0.95
KIND_ORDER = ("wrong number", "refusal", "no error raised", "precision", "assertion",
              "timeout", "other")
RESULTS_TOP = 12          # failure categories shown in RESULTS.md
RESULTS_WRONG = 30        # wrong-number tests listed in RESULTS.md


def pass_rate(suite: dict[str, Any]) -> float | None:
    return suite["outcomes"]["passed"] / suite["counted"] if suite.get("counted") else None


def _table(header: Sequence[str], rows: list[Sequence[Any]], align: str = "") -> list[str]:
    align = align.ljust(len(header), "r")
    marks = ["---" if a == "l" else "---:" for a in align]
    return (["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
            + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"
               for row in rows])


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _ran(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in data.get("suites", {}).items() if "skipped" not in s}


def count_lines(data: dict[str, Any]) -> list[str]:
    """The counts per suite and in all, the goal's verdict, and what was left out."""
    suites = _ran(data)
    rows = []
    for name, s in suites.items():
        o = s["outcomes"]
        rows.append([SUITE_TITLES.get(name, name), s["counted"], o["passed"], o["failed"],
                     o["error"], o["timeout"] + o.get("missing", 0), _percent(pass_rate(s)),
                     s["kinds"]["wrong number"]])
    total = {k: sum(s["outcomes"][k] + (s["outcomes"].get("missing", 0) if k == "timeout"
                                        else 0) for s in suites.values())
             for k in ("passed", "failed", "error", "timeout")}
    counted = sum(s["counted"] for s in suites.values())
    wrong = sum(s["kinds"]["wrong number"] for s in suites.values())
    rate = total["passed"] / counted if counted else None
    rows.append(["all", counted, total["passed"], total["failed"], total["error"],
                 total["timeout"], _percent(rate), wrong])
    out = _table(["suite", "counted tests", "passed", "failed", "error", "timeout or lost",
                  "pass rate", "wrong numbers"], rows, "l")
    verdict = "holds" if rate is not None and rate >= PASS_GOAL and wrong == 0 \
        else "does not hold"
    out += ["", f"Goal: at least {PASS_GOAL:.0%} of the counted tests pass and no call returns "
                f"a number different from the original's: **{verdict}** ({_percent(rate)} "
                f"pass, {wrong} test(s) with a wrong number)."]
    for name, s in data.get("suites", {}).items():
        if "skipped" in s:
            out += ["", f"{SUITE_TITLES.get(name, name)}: not run ({s['skipped']})."]
        elif s.get("left_out"):
            left = ", ".join(f"{n} {why}" for why, n in sorted(s["left_out"].items()))
            out += ["", f"{SUITE_TITLES.get(name, name)}: {s['tests']} tests, not counted: "
                        f"{left}."]
    return out


def kind_lines(data: dict[str, Any]) -> list[str]:
    rows = [[SUITE_TITLES.get(name, name), *(s["kinds"].get(k, 0) for k in KIND_ORDER)]
            for name, s in _ran(data).items()]
    return _table(["suite", *KIND_ORDER], rows, "l")


def _rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def category_lines(data: dict[str, Any], top: int | None) -> list[str]:
    """The failure categories of every suite, largest first (the first ``top`` of them)."""
    found = [(c["count"], name, c) for name, s in _ran(data).items() for c in s["categories"]]
    found.sort(key=lambda item: (-item[0], _rank(item[2]["kind"]), item[1],
                                 item[2]["category"]))   # ties: the worst kind first
    shown = found if top is None else found[:top]
    rows = [[count, name, c["kind"], f"`{c['category']}`", f"`{c['examples'][0]}`"]
            for count, name, c in shown]
    out = _table(["tests", "suite", "kind", "exception: first line", "for example"], rows,
                 "rllll")
    if len(shown) < len(found):
        out += ["", f"{len(found) - len(shown)} smaller categories in `EINSUM_SUITES.md`."]
    return out


def wrong_lines(data: dict[str, Any], limit: int | None) -> list[str]:
    """Every test with a wrong number, and the calls whose results differed."""
    found = [(name, w) for name, s in _ran(data).items() for w in s["wrong_numbers"]]
    if not found:
        return ["No call returned a number different from the original function's."]
    out = []
    for name, w in found if limit is None else found[:limit]:
        calls = "; ".join(f"`{c}`" for c in w["calls"]) or f"(the test's own check: " \
                                                           f"`{w['failure']}`)"
        out.append(f"- {name}, `{w['test']}`: {calls}")
    if limit is not None and len(found) > limit:
        out.append(f"- ... and {len(found) - limit} more in `EINSUM_SUITES.md`.")
    return out


def method_lines(data: dict[str, Any]) -> list[str]:
    method = data.get("method", {})
    return [
        "Each library's own einsum tests, the copies inside the installed packages, run by "
        "`python benchmarks/einsum_suites.py` with the library's einsum replaced by "
        "`ta.einsum` (`numpy.einsum` and `numpy.einsum_path`, `opt_einsum.contract`, "
        "`sparse.einsum`; `benchmarks/einsum_suite_plugin.py` says exactly how). A test counts "
        "when, run with the original function, it calls it and passes. Every replaced call is "
        "also run through the original on the same arguments and the results compared, so a "
        "test comparing tensoralg with itself still catches a wrong number. Kinds of failure: "
        "**wrong number** (a value differs from the original's: the worst), **refusal** "
        "(tensoralg raised), **no error raised** (tensoralg accepted what the original "
        "refuses), **precision** (a value check finer than the agreement with the original), "
        "**assertion** (another check: a type, a dtype, an identity), **timeout** "
        f"(over {method.get('timeout_s', '?')} s per test), **other**."]


def suites_lines(data: dict[str, Any], top: int | None, wrong_limit: int | None) -> list[str]:
    """Counts, kinds, categories and wrong numbers, as Markdown lines under ``###`` heads."""
    return [*method_lines(data), "", *count_lines(data), "", "### Kinds of failure", "",
            *kind_lines(data), "", "### Failure categories", "",
            "Grouped by exception type and the first line of its message, with numbers, dtype "
            "names and quoted text other than names blanked.", "", *category_lines(data, top), "", "### Wrong numbers", "",
            *wrong_lines(data, wrong_limit)]
