"""Before and after: the rows of a new ``onnx_real.py`` run beside the same rows of earlier runs.

    python benchmarks/compare_runs.py NEW.json OLD.json [OLD.json ...] [--title T] [--intro FILE]

Prints Markdown: a table of every row of NEW (model, exporter, batch) with onnxruntime time /
tensoralg time at one thread and at all cores, in NEW and in the latest OLD run that measured
the same row (its commit named), then NEW's own table as ``onnx_real.render`` draws it. Ratios
from different runs compare runs made at different hours of a shared machine: each is paired
round by round within its own run, so the machine's drift cancels within a ratio, not between
runs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import onnx_real  # noqa: E402  (the renderer and ratio of the run files)


def _key(row: dict[str, Any]) -> tuple[str, str, int]:
    return row["model"], row["exporter"], row["batch"]


def _cell(value: float) -> str:
    return "-" if value != value else f"{value:.2f}"


def compare(new: dict[str, Any], olds: list[dict[str, Any]]) -> list[str]:
    """The before/after table's lines."""
    earlier: dict[tuple[str, str, int], tuple[dict[str, Any], str]] = {}
    for old in sorted(olds, key=lambda d: d["date"]):
        for row in old["rows"]:
            if "samples" in row:
                earlier[_key(row)] = (row, old["git"].get("short", "?"))
    lines = ["| model | exporter | batch | ort1/L3 before | ort1/L3 now | ortN/LN before | "
             "ortN/LN now | before: commit |", "|---|---|---|---|---|---|---|---|"]
    for row in new["rows"]:
        before, commit = earlier.get(_key(row), ({}, "-"))
        lines.append(
            f"| {row['model']} | {row['exporter']} | {row['batch']} | "
            f"{_cell(onnx_real.ratio(before, 'ort1/L3')) if before else '-'} | "
            f"{_cell(onnx_real.ratio(row, 'ort1/L3'))} | "
            f"{_cell(onnx_real.ratio(before, 'ortN/LN')) if before else '-'} | "
            f"{_cell(onnx_real.ratio(row, 'ortN/LN'))} | {commit} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("new")
    parser.add_argument("old", nargs="+")
    parser.add_argument("--title", default="ONNX models: before and after")
    parser.add_argument("--intro", default=None, help="a file whose text goes under the title")
    args = parser.parse_args(argv)
    new = json.loads(Path(args.new).read_text(encoding="utf-8"))
    olds = [json.loads(Path(p).read_text()) for p in args.old]
    intro = Path(args.intro).read_text().strip() if args.intro else ""
    table = onnx_real.render(new).split("\n")
    body = table[2:]                       # the run's own table, without its title
    print("\n".join([f"# {args.title}", "", *([intro, ""] if intro else []),
                     *compare(new, olds), "", "## The run", "", *body]).rstrip() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
