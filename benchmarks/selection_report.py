"""RESULTS.md's format-selection section, from one ``selection.py`` result file.

Each case (a held-out matrix and an expression) holds every candidate's measured run time and
conversion from CSR, and the formats ``ta.select.choose`` picked. Two costs are judged: *one
call* (conversion + run: what ``formats="auto"`` pays) and *reused* (the run alone). A choice's
slowdown is its cost over the best candidate's; "within 10%" counts slowdowns up to 1.1.

>>> case = {"kernel": "spmv", "auto": "csr", "auto_reused": "csc", "candidates": [
...     {"format": "csr", "run_s": 2.0, "conversion_s": 1.0},
...     {"format": "csc", "run_s": 1.0, "conversion_s": 5.0}]}
>>> slowdowns(case, "one call"), slowdowns(case, "reused")
((1.0, 1.0), (1.0, 2.0))
>>> case["candidates"][0]["passes"] = [{"run_min_s": 2.0}, {"run_min_s": 2.0}]
>>> case["candidates"][1]["passes"] = [{"run_min_s": 1.0}, {"run_min_s": 3.0}]
>>> repeat_slowdown(case, "reused")     # pass 1 says csc; pass 2 times it 3 against csr's 2
1.5
"""
from __future__ import annotations

import statistics
from typing import Any

SCENARIOS = {"one call": ("auto", True), "reused": ("auto_reused", False)}
KERNELS = {"spmv": "SpMV `ij,j->i`", "spmv_t": "transposed SpMV `ji,j->i`",
           "spmm": "SpMM, 16 columns `ij,jk->ik`"}
WITHIN, WORST_GOAL, SHARE_GOAL, DECISION_GOAL_S = 1.10, 1.5, 0.80, 1e-3


def slowdowns(case: dict[str, Any], scenario: str) -> tuple[float | None, float | None]:
    """(automatic choice, keep CSR): each one's cost over the best candidate's, None where
    that format was not measured."""
    key, with_conversion = SCENARIOS[scenario]
    costs = {c["format"]: c["run_s"] + (c["conversion_s"] if with_conversion else 0.0)
             for c in case["candidates"]}
    best = min(costs.values())
    auto, csr = costs.get(case[key]), costs.get("csr")
    return (auto / best if auto is not None else None, csr / best if csr is not None else None)


def repeat_slowdown(case: dict[str, Any], scenario: str) -> float | None:
    """The best candidate of the first measurement pass, judged by the second: how far
    measurement noise alone moves a choice (None for a case measured once)."""
    _, with_conversion = SCENARIOS[scenario]
    passes = [{c["format"]: c["passes"][k]["run_min_s"]
               + (c["conversion_s"] if with_conversion else 0.0)
               for c in case["candidates"] if len(c.get("passes", ())) == 2} for k in (0, 1)]
    if not passes[0]:
        return None
    first_best = min(passes[0], key=passes[0].get)
    return passes[1][first_best] / min(passes[1].values())


def summary(cases: list[dict[str, Any]], scenario: str) -> dict[str, float | int]:
    """Cases; for the automatic choice and for CSR: share within 10%, median, worst; and the
    share of cases where the first pass's best is within 10% of the second's."""
    measured = [slowdowns(c, scenario) for c in cases]
    repeats = [r for r in (repeat_slowdown(c, scenario) for c in cases) if r is not None]
    out: dict[str, float | int] = {"cases": len(measured),
                                   "repeat_within": sum(r <= WITHIN for r in repeats)
                                   / len(repeats) if repeats else float("nan")}
    for k, name in ((0, "auto"), (1, "csr")):
        values = [m[k] for m in measured if m[k] is not None]
        out[f"{name}_missing"] = len(measured) - len(values)
        out[f"{name}_within"] = sum(v <= WITHIN for v in values) / len(values) if values else 0
        out[f"{name}_median"] = statistics.median(values) if values else float("nan")
        out[f"{name}_worst"] = max(values) if values else float("nan")
    return out


def decision_median(data: dict[str, Any]) -> tuple[float | None, float | None]:
    """Median decision time over the cases, and the slowest median on 10^6 entries."""
    cases = [statistics.median(c["decision_s"]) for c in data.get("cases", [])
             if "decision_s" in c]
    million = [statistics.median(d["decision_s"]) for d in data.get("million_entry_decisions", [])]
    return (statistics.median(cases) if cases else None, max(million) if million else None)


def selection_lines(data: dict[str, Any], provenance: str, table: Any, fmt_time: Any
                    ) -> list[str]:
    """The section's Markdown lines (``table`` and ``fmt_time`` are report.py's helpers)."""
    cases = [c for c in data.get("cases", []) if "candidates" in c]
    skipped = [c for c in data.get("cases", []) if "skipped" in c]
    method = data.get("method", {})
    model = data.get("model", {})
    out = ["## Format selection", "", provenance, "",
           "`ta.select.choose` picks the storage of the sparse operand from cheap features and "
           "the cost model shipped in `tensoralg/select/model.json` "
           f"(fitted {model.get('date', '?')} by `{model.get('source', '?')}`, "
           f"{model.get('matrices', '?')} matrices). It is judged here on matrices the model "
           "was not fitted on: the held-out real matrices "
           f"({', '.join(method.get('held_out', []))}) and the seven generated families drawn "
           f"with another seed, at {', '.join(str(s) for s in method.get('sizes', []))} "
           "entries, each given as scipy CSR. Every default candidate is measured by "
           f"`ta.select.experiment` (median of {method.get('repeats', '?')} calls) plus its "
           "conversion from CSR (median of up to 3). **One call** costs conversion + run, "
           "as `formats=\"auto\"` pays (`choose(calls=1)`); **reused** costs the run alone, "
           "a kernel called many times on the converted operand (`choose(calls=math.inf)`). "
           "A slowdown is the cost of a choice over the best candidate's; the fixed choice "
           "*keep CSR* is shown beside the automatic one.", ""]
    rows = []
    for scenario in SCENARIOS:
        for kernel in [*KERNELS, "all"]:
            group = cases if kernel == "all" else [c for c in cases if c["kernel"] == kernel]
            if not group:
                continue
            s = summary(group, scenario)
            rows.append([scenario, KERNELS.get(kernel, "all"), str(s["cases"]),
                         f"{s['auto_within']:.0%}", f"{s['auto_median']:.2f}",
                         f"{s['auto_worst']:.2f}", f"{s['csr_within']:.0%}",
                         f"{s['csr_median']:.2f}", f"{s['csr_worst']:.2f}",
                         f"{s['repeat_within']:.0%}"])
    out += table(["cost", "expression", "cases", "auto within 10%", "auto median",
                  "auto worst", "CSR within 10%", "CSR median", "CSR worst",
                  "remeasured best within 10%"], rows, "ll")
    out += ["", "*Remeasured best within 10%*: how often the best candidate of the first "
            "measurement pass is within 10% of the best of the second, an immediate rerun: "
            "the ceiling that measurement noise on this machine puts on any choice."]
    overall = summary(cases, "one call") if cases else None
    typical, million = decision_median(data)
    verdict = {True: "holds", False: "does not hold", None: "not measured"}
    goals = [
        ("automatic choice within 10% of the best, one call",
         f">= {SHARE_GOAL:.0%} of cases",
         f"{overall['auto_within']:.0%}" if overall else "-",
         overall["auto_within"] >= SHARE_GOAL if overall else None),
        ("automatic choice's worst slowdown, one call", f"<= {WORST_GOAL:.1f}x",
         f"{overall['auto_worst']:.2f}x" if overall else "-",
         overall["auto_worst"] <= WORST_GOAL if overall else None),
        ("decision time, 10^6-entry CSR matrix", f"< {fmt_time(DECISION_GOAL_S)}",
         f"{fmt_time(million)} (slowest median)" if million is not None else "-",
         million < DECISION_GOAL_S if million is not None else None),
    ]
    out += ["", "Goals (issue 20):", ""]
    out += table(["goal", "target", "measured", "verdict"],
                 [[g, t, m, verdict[h]] for g, t, m, h in goals], "llrl")
    out += ["", f"Median decision time over the cases above: {fmt_time(typical)}."]
    if skipped:
        out += ["", "Left out: " + "; ".join(f"{c['matrix']} {c['kernel']} ({c['skipped']})"
                                             for c in skipped) + "."]
    out += ["", "Per case (slowdown against the best candidate):", ""]
    body = []
    for c in cases:
        one, reused = slowdowns(c, "one call"), slowdowns(c, "reused")
        costs = {x["format"]: x["run_s"] + x["conversion_s"] for x in c["candidates"]}
        runs = {x["format"]: x["run_s"] for x in c["candidates"]}
        body.append([c["matrix"], c["kernel"], f"{c['shape'][0]}x{c['shape'][1]}",
                     str(c["nnz"]), c["auto"], min(costs, key=costs.get), _x(one[0]),
                     _x(one[1]), c["auto_reused"], min(runs, key=runs.get), _x(reused[0]),
                     _x(reused[1])])
    out += table(["matrix", "expression", "shape", "nnz", "auto", "best", "auto x", "CSR x",
                  "auto (reused)", "best (reused)", "auto x (reused)", "CSR x (reused)"],
                 body, "llllllrrllrr")
    return out


def _x(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}"
