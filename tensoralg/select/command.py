"""``tensoralg experiment``: time an expression under every candidate format, from the shell.

    tensoralg experiment "y(i) = A(i,j) * x(j)" --tensor A=m.mtx --out results.csv --plot r.png

Operands come from ``--tensor NAME=SOURCE`` (a ``.mtx``/``.tns`` file, gzipped or not, a
``.npy`` array, or ``random``); an operand not given is a random dense array (standard normal,
seeded with ``--seed``) whose shape the other operands fix. The table is printed; ``--out``
also writes it (CSV, JSON or Markdown, by suffix) and ``--plot`` draws it. ``cli.main`` prints
any ``TensorAlgebraError`` as one line and exits with status 2.
"""
from __future__ import annotations

import argparse
import os
import re
from typing import Any, Mapping, TextIO

import numpy as np

import tensoralg as ta
from tensoralg.select.candidates import DEFAULT_LIMIT
from tensoralg.select.expression import Expression

WRITERS = {".csv": "to_csv", ".json": "to_json", ".md": "to_markdown"}
_ITEM = re.compile(r"[^,\[\]]+(?:\[[^\]]*\])?")      # "csr", "sds[1,0,2]"


def add_parser(commands: Any) -> None:
    """Register the ``experiment`` subcommand on ``tensoralg``'s subparsers."""
    parser = commands.add_parser(
        "experiment", help="time an expression under every candidate format of its operands",
        description="Run a statement such as \"y(i) = A(i,j) * x(j)\" (or einsum subscripts "
                    "such as \"ij,j->i\", operands A, B, ...) under every candidate format of "
                    "its sparse operands, check that all agree, and print a table of times "
                    "and sizes.")
    parser.add_argument("expression", help='e.g. "y(i) = A(i,j) * x(j)" or "ij,j->i"')
    parser.add_argument("-t", "--tensor", dest="tensors", action="append", default=[],
                        type=_tensor_option, metavar="NAME=SOURCE",
                        help="an operand: a .mtx or .tns file (.gz too), a .npy array, or "
                             "'random' (dense); dense operands not given are random")
    parser.add_argument("-c", "--candidates", action="append", default=[],
                        type=_candidates_option, metavar="NAME=F1,F2,...",
                        help="formats to try for one tensor (named formats, level strings, "
                             "levels[order] such as sds[1,0,2]); repeatable")
    parser.add_argument("--repeats", type=_count(1), default=7,
                        help="timed calls per candidate (default 7)")
    parser.add_argument("--warmup", type=_count(0), default=1,
                        help="untimed calls before them (default 1)")
    parser.add_argument("--seed", type=_count(0), default=0,
                        help="seed of random operands and of the candidates' order (default 0)")
    parser.add_argument("--limit", type=_count(1), default=DEFAULT_LIMIT,
                        help=f"most format combinations to run (default {DEFAULT_LIMIT})")
    parser.add_argument("--out", metavar="PATH",
                        help="also write the table: .csv, .json or .md")
    parser.add_argument("--plot", metavar="PATH", help="save a bar chart (.png, .svg, .pdf)")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the experiment that ``args`` describe and print its table to ``out``."""
    writer = _writer(args.out)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ta.UnsupportedError("--plot needs matplotlib: pip install "
                                      "'tensoralg[plot]'") from None
    expression = Expression.parse(args.expression)
    operands = load_operands(expression, dict(args.tensors), args.seed)
    given = [operands[name] for name in expression.operands] if expression.einsum \
        else operands
    candidates = dict(args.candidates) or None
    table = ta.select.experiment(args.expression, given, candidates, repeats=args.repeats,
                                 seed=args.seed, warmup=args.warmup, limit=args.limit)
    out.write(str(table) + "\n")
    if writer is not None:
        getattr(table, writer)(args.out)
    if args.plot:
        table.plot(args.plot)
    return 0


def load_operands(expression: Expression, sources: Mapping[str, str], seed: int
                  ) -> dict[str, Any]:
    """Every operand of ``expression``: read from its source, or random with the shape that
    the other operands give its indices.

    >>> e = Expression.parse("y(i) = A(i,j) * x(j)")
    >>> ops = load_operands(e, {"A": "random"}, 0)
    Traceback (most recent call last):
      ...
    tensoralg.errors.InputError: cannot tell the size of index i of A: give it with --tensor A=PATH
    """
    for name in sources:
        if name == expression.output:
            raise ta.InputError(f"--tensor {name}: {name} is the output of "
                                f"{expression.text}, not an operand")
        if name not in expression.indices:
            raise ta.InputError(f"--tensor {name}: {expression.text} has no tensor {name}; "
                                f"its operands are {', '.join(expression.operands)}")
    operands = {name: _read(name, source) for name, source in sources.items()
                if source != "random"}
    sizes: dict[str, tuple[int, str]] = {}
    for name, operand in operands.items():
        indices = expression.indices[name]
        shape = tuple(getattr(operand, "shape", ()))
        if len(shape) != len(indices):
            raise ta.ShapeError(f"--tensor {name}: {expression.text} uses {name} with "
                                f"{len(indices)} indices but it has shape {shape}")
        for mode, (index, size) in enumerate(zip(indices, shape)):
            known = sizes.setdefault(index, (size, f"{name} has {size} along mode {mode}"))
            if known[0] != size:
                raise ta.ShapeError(f"index {index}: {known[1]} but {name} has {size} along "
                                    f"mode {mode}")
    rng = np.random.default_rng(seed)
    for name in expression.operands:
        if name in operands:
            continue
        missing = [index for index in expression.indices[name] if index not in sizes]
        if missing:
            raise ta.InputError(f"cannot tell the size of index {missing[0]} of {name}: give "
                                f"it with --tensor {name}=PATH")
        shape = tuple(sizes[index][0] for index in expression.indices[name])
        operands[name] = rng.standard_normal(shape) if shape else float(rng.standard_normal())
    return operands


def _read(name: str, source: str) -> Any:
    if not os.path.exists(source):
        raise ta.InputError(f"--tensor {name}={source}: no such file (give a .mtx, .tns or "
                            f".npy file, or 'random')")
    if source.endswith(".npy"):
        try:
            return np.load(source, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ta.InputError(f"--tensor {name}={source}: cannot read: {err}") from None
    return ta.read(source)


def _writer(path: str | None) -> str | None:
    if path is None:
        return None
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in WRITERS:
        raise ta.InputError(f"--out {path}: unknown suffix {suffix or '(none)'!r}; use "
                            f"{', '.join(WRITERS)}")
    return WRITERS[suffix]


def _tensor_option(text: str) -> tuple[str, str]:
    name, sep, source = text.partition("=")
    if not sep or not name.strip() or not source.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=SOURCE, e.g. A=matrix.mtx "
                                         f"or x=random")
    return name.strip(), source.strip()


def _candidates_option(text: str) -> tuple[str, list[str]]:
    """``A=csr,csc,sds[1,0,2]`` into ``("A", ["csr", "csc", "sds[1,0,2]"])``.

    >>> _candidates_option("B=csf, sds[1,0,2]")
    ('B', ['csf', 'sds[1,0,2]'])
    """
    name, sep, formats = text.partition("=")
    items = [item.strip() for item in _ITEM.findall(formats) if item.strip()]
    if not sep or not name.strip() or not items:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=FORMAT,FORMAT,..., e.g. "
                                         f"A=csr,csc,coo")
    key: Any = int(name) if name.strip().isdigit() else name.strip()
    return key, items


def _count(least: int):
    """An argparse type: an integer of at least ``least``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value
    return parse
