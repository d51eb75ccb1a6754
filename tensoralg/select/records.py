"""Experiment records: one row per candidate, the environment, and the table that holds them.

A table is a frozen value. It prints as aligned text, and writes (and reads back) CSV and JSON,
exactly: times are stored in seconds as floats, sizes in bytes as ints. ``to_markdown`` is for
reports; ``plot`` draws a bar chart (matplotlib, the ``plot`` extra).

>>> env = Environment("0.1", "2.0", "1.14", "0.43", "3.11", "Linux", "a CPU", 2, 0, "2026-01-01")
>>> row = ExperimentRow((("A", "csr"), ("x", "dense"), ("y", "(inferred)")), "dense", "bound",
...                     1e-5, 0.05, 1e-4, 2e-5, 1.9e-5, 3e-5, 1e-6, 128, 64)
>>> table = ExperimentTable("y(i) = A(i,j) * x(j)", (("A", "8x8 csr_array float64 nnz=8"),),
...                         (row,), env, repeats=7, warmup=1)
>>> ExperimentTable.from_csv(table.to_csv()) == table
True
>>> print(table.to_markdown().splitlines()[4])
| csr | dense | (inferred) | dense | bound | 20 µs | 19 µs | 30 µs | 1 µs | 10 µs | 50 ms | 100 µs | 128 B | 64 B |
"""
from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensoralg as ta

_TIMES = ("conversion_s", "compile_s", "first_call_s", "run_median_s", "run_min_s", "run_max_s",
          "run_iqr_s")
_SIZES = ("operand_bytes", "result_bytes")
_DURATIONS = (("run", "run_median_s"), ("min", "run_min_s"), ("max", "run_max_s"),
              ("IQR", "run_iqr_s"), ("convert", "conversion_s"), ("compile", "compile_s"),
              ("1st call", "first_call_s"))


@dataclass(frozen=True)
class Environment:
    """What an experiment ran on, so that it can be repeated and compared."""

    tensoralg: str
    numpy: str
    scipy: str
    llvmlite: str
    python: str
    platform: str
    cpu: str
    threads: int
    seed: int
    date: str

    @classmethod
    def current(cls, seed: int) -> "Environment":
        """This machine, now (UTC), with ``ta.get_num_threads()`` threads."""
        return cls(ta.__version__, _version("numpy"), _version("scipy"), _version("llvmlite"),
                   platform.python_version(), platform.platform(terse=True), _cpu_model(),
                   ta.get_num_threads(), seed,
                   datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))

    def __str__(self) -> str:
        return (f"tensoralg {self.tensoralg}, NumPy {self.numpy}, SciPy {self.scipy}, "
                f"llvmlite {self.llvmlite}, Python {self.python}; {self.cpu}, {self.platform}, "
                f"{self.threads} thread{'s' if self.threads != 1 else ''}; seed {self.seed}; "
                f"{self.date}")


@dataclass(frozen=True)
class ExperimentRow:
    """One candidate: the format of every tensor and what it cost.

    ``formats`` pairs each tensor (operands, then the output) with its format's label
    (``(inferred)`` for an output left to the compiler). ``result_format`` is the storage of
    the result that came back. ``timing`` is ``bound`` when the runs called a kernel bound to
    its operands (``Kernel.bind``: the kernel alone), ``call`` when they called the kernel with
    its operands (sparse outputs: binding and wrapping included). Times are in seconds; the
    conversion time converts every operand that the candidate stores differently from how it
    was given. Sizes are the bytes of the storage arrays (values, ``pos`` and ``crd``).
    """

    formats: tuple[tuple[str, str], ...]
    result_format: str
    timing: str
    conversion_s: float
    compile_s: float
    first_call_s: float
    run_median_s: float
    run_min_s: float
    run_max_s: float
    run_iqr_s: float
    operand_bytes: int
    result_bytes: int

    @property
    def label(self) -> str:
        """``A=csr x=dense y=(inferred)``."""
        return " ".join(f"{name}={fmt}" for name, fmt in self.formats)


@dataclass(frozen=True)
class ExperimentTable:
    """The rows of one experiment, with its expression, operands, environment and notes.

    ``operands`` describes each operand as given (shape, kind, dtype, nnz). ``notes`` say what
    was skipped or left out and why.
    """

    expression: str
    operands: tuple[tuple[str, str], ...]
    rows: tuple[ExperimentRow, ...]
    environment: Environment
    repeats: int
    warmup: int
    notes: tuple[str, ...] = ()

    @property
    def fastest(self) -> ExperimentRow:
        """The row with the smallest median run time."""
        if not self.rows:
            raise ta.InputError("the table has no rows")
        return min(self.rows, key=lambda row: row.run_median_s)

    # -- text -------------------------------------------------------------------------------

    def __str__(self) -> str:
        header, cells, textual, fixed = self._layout()
        widths = [max(len(line[k]) for line in (header, *cells)) for k in range(len(header))]
        lines = [self.expression, self._operands()]
        lines += [f"in every row: {fixed}"] if fixed else []
        lines += [self._runs(), ""]
        for line in (header, *cells):
            lines.append("  ".join(cell.ljust(width) if k < textual else cell.rjust(width)
                                   for k, (cell, width) in enumerate(zip(line, widths))).rstrip())
        lines += ["", f"environment: {self.environment}"]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_markdown(self, path: str | os.PathLike | None = None) -> str:
        """A Markdown table, after the expression and operands, before the environment and
        the notes; written to ``path`` too when given."""
        header, cells, textual, fixed = self._layout()
        align = ["---" if k < textual else "---:" for k in range(len(header))]
        lines = [f"`{self.expression}` ({self._operands()}); {self._runs()}"
                 + (f"; in every row: {fixed}" if fixed else "") + ".", ""]
        lines += ["| " + " | ".join(line) + " |" for line in (header, align, *cells)]
        lines += ["", f"Environment: {self.environment}."]
        lines += ["", *(f"- {note}" for note in self.notes)] if self.notes else []
        return _written("\n".join(lines) + "\n", path)

    def _operands(self) -> str:
        return "; ".join(f"{name}: {text}" for name, text in self.operands)

    def _runs(self) -> str:
        return f"run: median of {self.repeats} call{'s' if self.repeats != 1 else ''} after " \
               f"{self.warmup} warm-up call{'s' if self.warmup != 1 else ''}"

    def _layout(self) -> tuple[list[str], list[list[str]], int, str]:
        """Header, cells, how many leading columns are text, and the text columns that hold
        one value in every row (as ``name=value``), left out of a table of several rows."""
        rows = self.rows
        names = [name for name, _ in rows[0].formats] if rows else []
        text = [(name, [row.formats[k][1] for row in rows]) for k, name in enumerate(names)]
        text += [("result", [row.result_format for row in rows]),
                 ("timing", [row.timing for row in rows])]
        shown = [column for column in text if len(rows) == 1 or len(set(column[1])) > 1]
        fixed = " ".join(f"{name}={values[0]}" for name, values in text
                         if len(rows) > 1 and len(set(values)) == 1)
        numbers = [(title, [_duration(getattr(row, field)) for row in rows])
                   for title, field in _DURATIONS]
        numbers += [(title, [_size(getattr(row, field)) for row in rows])
                    for title, field in (("operands", "operand_bytes"),
                                         ("result size", "result_bytes"))]
        columns = shown + numbers
        header = [title for title, _ in columns]
        cells = [[values[k] for _, values in columns] for k in range(len(rows))]
        return header, cells, len(shown), fixed

    # -- files --------------------------------------------------------------------------------

    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """The table as CSV; ``#`` comment lines first hold the expression, operands,
        environment and notes (``pandas.read_csv(path, comment="#")`` skips them)."""
        out = io.StringIO()
        for key, value in self._metadata():
            out.write(f"# {key}: {value}\n")
        names = [name for name, _ in self.rows[0].formats] if self.rows else []
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*(f"format:{name}" for name in names), "result_format", "timing",
                         *_TIMES, *_SIZES])
        for row in self.rows:
            writer.writerow([*(fmt for _, fmt in row.formats), row.result_format, row.timing,
                             *(repr(getattr(row, f)) for f in _TIMES),
                             *(getattr(row, f) for f in _SIZES)])
        return _written(out.getvalue(), path)

    @classmethod
    def from_csv(cls, text: str) -> "ExperimentTable":
        """Read back what ``to_csv`` wrote (the text; ``read`` takes a path)."""
        meta = [line[2:].partition(": ") for line in text.splitlines() if line.startswith("# ")]
        body = [line for line in text.splitlines() if line and not line.startswith("#")]
        records = list(csv.reader(body))
        header, data = records[0], records[1:]
        names = [column.removeprefix("format:") for column in header
                 if column.startswith("format:")]
        rows = []
        for values in data:
            fields = dict(zip(header[len(names):], values[len(names):]))
            rows.append(ExperimentRow(
                tuple(zip(names, values[:len(names)])), fields["result_format"],
                fields["timing"], *(float(fields[f]) for f in _TIMES),
                *(int(fields[f]) for f in _SIZES)))
        return cls._from_metadata([(key, value) for key, _, value in meta], tuple(rows))

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """The table as JSON: ``expression``, ``operands``, ``repeats``, ``warmup``,
        ``environment``, ``notes`` and ``rows`` (each with ``formats`` by tensor name)."""
        rows = [{"formats": dict(row.formats),
                 **{f.name: getattr(row, f.name) for f in dataclasses.fields(row)
                    if f.name != "formats"}} for row in self.rows]
        document = {"expression": self.expression, "operands": dict(self.operands),
                    "repeats": self.repeats, "warmup": self.warmup,
                    "environment": dataclasses.asdict(self.environment),
                    "notes": list(self.notes), "rows": rows}
        return _written(json.dumps(document, indent=2) + "\n", path)

    @classmethod
    def from_json(cls, text: str) -> "ExperimentTable":
        """Read back what ``to_json`` wrote."""
        document = json.loads(text)
        rows = tuple(ExperimentRow(**{**row, "formats": tuple(row["formats"].items())})
                     for row in document["rows"])
        return cls(document["expression"], tuple(document["operands"].items()), rows,
                   Environment(**document["environment"]), document["repeats"],
                   document["warmup"], tuple(document["notes"]))

    @classmethod
    def read(cls, path: str | os.PathLike) -> "ExperimentTable":
        """Read a table written with ``to_csv`` or ``to_json`` (by the file's suffix)."""
        text = Path(path).read_text(encoding="utf-8")
        return cls.from_json(text) if str(path).endswith(".json") else cls.from_csv(text)

    def plot(self, path: str | os.PathLike) -> Path:
        """Save a bar chart of the median run time of each candidate, whiskers from the fastest
        to the slowest run, to ``path`` (any suffix matplotlib knows: .png, .svg, .pdf)."""
        from tensoralg.select.plot import bar_chart

        return bar_chart(self, path)

    def _metadata(self) -> list[tuple[str, Any]]:
        items: list[tuple[str, Any]] = [("expression", self.expression)]
        items += [(f"operand {name}", text) for name, text in self.operands]
        items += [("repeats", self.repeats), ("warmup", self.warmup)]
        items += [(f"environment {f.name}", getattr(self.environment, f.name))
                  for f in dataclasses.fields(self.environment)]
        items += [("note", note) for note in self.notes]
        return [(key, str(value).replace("\n", " ")) for key, value in items]

    @classmethod
    def _from_metadata(cls, items: list[tuple[str, str]], rows: tuple[ExperimentRow, ...]
                       ) -> "ExperimentTable":
        values = dict(items)
        env = {f.name: values[f"environment {f.name}"] for f in dataclasses.fields(Environment)}
        env["threads"], env["seed"] = int(env["threads"]), int(env["seed"])
        operands = tuple((key.removeprefix("operand "), value) for key, value in items
                         if key.startswith("operand "))
        notes = tuple(value for key, value in items if key == "note")
        return cls(values["expression"], operands, rows, Environment(**env),
                   int(values["repeats"]), int(values["warmup"]), notes)


def _duration(seconds: float) -> str:
    """``8.68 µs``, ``1.25 ms``, ``2.51 s``: three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _size(count: int) -> str:
    """``52 B``, ``129 KiB``, ``7.64 MiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} B"


def _written(text: str, path: str | os.PathLike | None) -> str:
    if path is not None:
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as err:
            raise ta.InputError(f"cannot write {os.fspath(path)}: {err.strerror}") from None
    return text


def _version(package: str) -> str:
    import importlib.metadata  # slow to import: only when an experiment ends

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware"):
                    return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or sys.platform
