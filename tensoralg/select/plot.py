"""A bar chart of an experiment table: median run time per candidate, whiskers min to max.

matplotlib is an optional dependency (``pip install 'tensoralg[plot]'``), imported only here,
and only the object-oriented ``Figure`` is used: no pyplot, no global backend switch.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import tensoralg as ta

if TYPE_CHECKING:
    from tensoralg.select.records import ExperimentTable

LOG_SCALE_SPREAD = 10       # medians this many times apart get a logarithmic axis


def bar_chart(table: "ExperimentTable", path: str | os.PathLike) -> Path:
    """Draw ``table`` as a bar chart and save it to ``path``; return the path."""
    figure_class = _figure_class()
    if not table.rows:
        raise ta.InputError("the table has no rows to plot")
    labels = _labels(table)
    unit, scale = _unit(max(row.run_max_s for row in table.rows))
    medians = [row.run_median_s / scale for row in table.rows]
    below = [(row.run_median_s - row.run_min_s) / scale for row in table.rows]
    above = [(row.run_max_s - row.run_median_s) / scale for row in table.rows]
    fastest = min(range(len(medians)), key=medians.__getitem__)
    colors = ["tab:green" if k == fastest else "tab:blue" for k in range(len(medians))]

    figure = figure_class(figsize=(max(6.0, 0.55 * len(labels) + 2.0), 4.8), layout="constrained")
    axes = figure.subplots()
    positions = range(len(labels))
    hatches = ["//" if row.timing == "call" else "" for row in table.rows]
    bars = axes.bar(positions, medians, yerr=[below, above], capsize=3, color=colors,
                    edgecolor="white")
    for bar, hatch in zip(bars, hatches):
        bar.set_hatch(hatch)
    if len(set(hatches)) > 1:
        axes.legend(handles=[_patch("", "kernel alone (bound)"),
                             _patch("//", "whole call (sparse result)")], fontsize=8)
    axes.set_xticks(list(positions), labels, rotation=45 if len(labels) > 4 else 0,
                    ha="right" if len(labels) > 4 else "center", fontsize=8)
    if max(medians) > LOG_SCALE_SPREAD * max(min(medians), 1e-9):
        axes.set_yscale("log")
    axes.set_ylabel(f"run time ({unit}): median of {table.repeats}, min to max")
    axes.set_title(table.expression, fontsize=10)
    try:
        figure.savefig(path, dpi=150)
    except OSError as err:
        raise ta.InputError(f"cannot write {os.fspath(path)}: {err.strerror}") from None
    except ValueError as err:           # an unknown suffix
        raise ta.InputError(f"cannot plot to {os.fspath(path)}: {err}") from None
    return Path(path)


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ta.UnsupportedError("plotting an experiment needs matplotlib: "
                                  "pip install 'tensoralg[plot]'") from None
    return Figure


def _patch(hatch: str, text: str):
    from matplotlib.patches import Patch

    return Patch(facecolor="tab:blue", edgecolor="white", hatch=hatch, label=text)


def _unit(seconds: float) -> tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if seconds >= scale:
            return unit, scale
    return "µs", 1e-6


def _labels(table: "ExperimentTable") -> list[str]:
    """Each row's formats, naming only the tensors whose format changes between rows."""
    names = [name for name, _ in table.rows[0].formats]
    varying = [k for k in range(len(names))
               if len({row.formats[k][1] for row in table.rows}) > 1] or range(len(names))
    return [" ".join(f"{names[k]}={row.formats[k][1]}" for k in varying) for row in table.rows]
