"""The ``tensoralg`` command: compile a statement and print its kernel, run the demo, list formats.

    tensoralg compile "y(i) = A(i,j) * x(j)" -f A:csr --emit ir [--schedule "split(i, 64)"]
    tensoralg demo [MATRIX] [--backend llvm|c]      (bcspwr10, or any .mtx / .mtx.gz path)
    tensoralg formats
    tensoralg onnx run model.onnx [--inputs x.npz] [--opt-level N]
    tensoralg onnx profile model.onnx [--repeat 10]
    tensoralg experiment "y(i) = A(i,j) * x(j)" --tensor A=m.mtx [--out r.csv] [--plot r.png]
    tensoralg tune "y(i) = A(i,j) * x(j)" --tensor A=m.mtx [--budget 30] [--log trials.jsonl]
    tensoralg --version

Errors that tensoralg raises on purpose (``TensorAlgebraError``) are printed as one clean message
on stderr, with the caret display of a ``NotationError``, and the command exits with status 2.
This module uses the public API only.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence, TextIO

import tensoralg as ta
from tensoralg.select import command as experiment_command

EXIT_USER_ERROR = 2
EMIT_CHOICES = ("c", "llvm", "ir", "cuda")
BACKEND_CHOICES = ("llvm", "c")
DTYPE_CHOICES = ("float64", "float32", "int64", "int32")

_LEVEL_HELP = {
    ta.LevelKind.DENSE: "dense: every coordinate 0..N-1, no index arrays",
    ta.LevelKind.COMPRESSED: "compressed: pos/crd arrays, coordinates ordered and unique",
    ta.LevelKind.COMPRESSED_NONUNIQUE: "compressed non-unique: like s, coordinates may repeat "
                                       "(first level of COO)",
    ta.LevelKind.SINGLETON: "singleton: one coordinate per parent position (follows u or q)",
}
_NAMED = (("csr", ta.CSR), ("csc", ta.CSC), ("dcsr", ta.DCSR), ("dcsc", ta.DCSC),
          ("coo", ta.COO), ("csf", ta.CSF))


def parse_format_option(text: str) -> tuple[str, object]:
    """Read one ``-f NAME:FORMAT`` option into ``(name, format)``.

    FORMAT is a level string (``ds``), a named format (``csr``, ``dense``), or a level string
    with a mode order after a second colon (``ds:1,0`` stores mode 1 first, i.e. CSC).

    >>> parse_format_option("A:csr")
    ('A', 'csr')
    >>> parse_format_option("A:ds:1,0")
    ('A', Format('ds', order=(1, 0)))
    """
    name, sep, spec = text.partition(":")
    name, spec = name.strip(), spec.strip()
    if not sep or not name or not spec:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected NAME:FORMAT, e.g. A:ds, A:csr or A:ds:1,0")
    levels, sep, order = spec.partition(":")
    if not sep:
        return name, spec
    try:
        modes = tuple(int(m) for m in order.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the mode order {order!r} must be comma-separated integers, "
            f"e.g. A:ds:1,0") from None
    try:
        return name, ta.Format(levels.strip(), order=modes)
    except ta.TensorAlgebraError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None


_count = experiment_command._count   # an integer of at least N, or a usage error saying so


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tensoralg",
        description="A compiler for sparse and dense tensor algebra.")
    parser.add_argument("--version", action="version", version=f"tensoralg {ta.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    compile_ = commands.add_parser(
        "compile", help="compile a TACO-style statement and print the kernel",
        description="Compile a statement such as \"y(i) = A(i,j) * x(j)\" and print its kernel.")
    compile_.add_argument("statement", help='e.g. "C(i,j) = A(i,k) * B(k,j)"')
    compile_.add_argument("-f", "--format", dest="formats", action="append", default=[],
                          type=parse_format_option, metavar="NAME:FORMAT",
                          help="storage of one tensor (operand or output): a level string "
                               "(ds), a named format (csr, csc, coo, dcsr, csf, dense) or "
                               "levels with a mode order (ds:1,0); repeatable; "
                               "unnamed operands are dense")
    compile_.add_argument("--dtype", default="float64", choices=DTYPE_CHOICES,
                          help="value type (default float64)")
    compile_.add_argument("--backend", choices=BACKEND_CHOICES, default="llvm",
                          help="backend that builds the kernel (default llvm)")
    compile_.add_argument("--emit", choices=EMIT_CHOICES + ("schedule",), default="c",
                          help="what to print: C source (default), LLVM IR, the tensoralg IR, "
                               "CUDA C, or the schedule the kernel runs")
    compile_.add_argument("--schedule", default=None, metavar="COMMANDS",
                          help='scheduling commands, e.g. "split(i, 64); parallelize(i0)" '
                               "(see the schedules guide)")

    demo = commands.add_parser(
        "demo", help="SpMV, SpMM, SDDMM and SpGEMM on a real matrix, checked against scipy",
        description="Run four kernels on a real matrix (a bundled one, or any Matrix Market "
                    "file), check each against scipy and time them side by side.")
    demo.add_argument("matrix_arg", nargs="?", metavar="MATRIX",
                      help="a bundled matrix (bcspwr10, the default; lp_ship04l; ca-GrQc) or "
                           "the path of a .mtx or .mtx.gz file")
    demo.add_argument("--matrix", default=None, help="the same as MATRIX")
    demo.add_argument("--backend", choices=BACKEND_CHOICES, default="llvm")

    commands.add_parser("formats", help="list level codes and named formats")

    onnx_ = commands.add_parser("onnx", help="run or profile an ONNX model on tensoralg kernels",
                                description="Run or profile an ONNX model compiled onto "
                                            "tensoralg kernels.")
    onnx_commands = onnx_.add_subparsers(dest="onnx_command", metavar="ACTION", required=True)
    for action, text in (("run", "run the model and print its outputs"),
                         ("profile", "time each node and report the memory plan")):
        sub = onnx_commands.add_parser(action, help=text, description=text)
        sub.add_argument("model", help="path of an .onnx file")
        sub.add_argument("--inputs", metavar="X.NPZ",
                         help="inputs by name in an .npz (default: random, declared shapes)")
        sub.add_argument("--opt-level", type=int, default=3, choices=(0, 1, 2, 3),
                         help="graph passes (default 3)")
        sub.add_argument("--backend", choices=BACKEND_CHOICES, default="llvm")
        sub.add_argument("--batch", type=_count(0), default=1,
                         help="size of free dimensions of random inputs (default 1)")
        sub.add_argument("--repeat", type=_count(1), default=10,
                         help="profile: runs to average (default 10)")
        sub.add_argument("--print-ir", action="store_true",
                         help="also print the graph after each pass, the plan and the kernels")
    experiment_command.add_parser(commands)
    tune = commands.add_parser(
        "tune", help="search schedules of a statement by measuring them, keep the fastest",
        description="Autotune a statement's schedule on real operands (ta.autotune): the winner "
                    "is stored with the kernel cache and used by later calls of that shape "
                    "class.")
    tune.add_argument("expression", help='e.g. "y(i) = A(i,j) * x(j)" or "ij,j->i"')
    tune.add_argument("-t", "--tensor", dest="tensors", action="append", default=[],
                      type=experiment_command._tensor_option, metavar="NAME=SOURCE",
                      help="an operand from a .mtx, .tns or .npy file, or 'random' (dense, "
                           "shaped by the other operands); repeatable")
    tune.add_argument("-f", "--format", dest="formats", action="append", default=[],
                      type=parse_format_option, metavar="NAME:FORMAT",
                      help="storage of one operand, as for compile")
    tune.add_argument("--budget", type=float, default=30.0, help="seconds to search (30)")
    tune.add_argument("--seed", type=int, default=0, help="order of the trials (0)")
    tune.add_argument("--log", default=None, help="JSON-lines log of every trial")
    return parser


def run_compile(args: argparse.Namespace, out: TextIO) -> int:
    formats = dict(args.formats)
    kernel = ta.compile(args.statement, formats=formats, dtype=args.dtype, backend=args.backend,
                        schedule=args.schedule)
    text = str(kernel.schedule) if args.emit == "schedule" else kernel.source(args.emit)
    out.write(text if text.endswith("\n") else text + "\n")
    return 0


def run_tune(args: argparse.Namespace, out: TextIO) -> int:
    """Autotune the statement that ``args`` describe and print what was found."""
    if args.budget <= 0:
        raise ta.InputError(f"--budget must be positive, not {args.budget}")
    expression = experiment_command.Expression.parse(args.expression)
    operands = experiment_command.load_operands(expression, dict(args.tensors), args.seed)
    formats = dict(args.formats) or None
    if expression.einsum:
        given: object = [operands[name] for name in expression.operands]
        if formats is not None:
            formats = {expression.operands.index(name): fmt for name, fmt in formats.items()}
    else:
        given = operands
    result = ta.autotune(args.expression, given, formats=formats, budget_s=args.budget,
                         seed=args.seed, log=args.log)
    out.write(str(result) + "\n")
    return 0


def run_formats(out: TextIO) -> int:
    out.write("Level codes (one letter per storage level, outermost first):\n")
    for kind in ta.LevelKind:
        out.write(f"  {kind.value}  {_LEVEL_HELP.get(kind, kind.name.lower())}\n")
    out.write("\nNamed formats (2-D unless noted):\n")
    for name, fmt in _NAMED:
        order = "" if fmt.is_identity_order else f"  mode order {fmt.order}"
        out.write(f"  {name:<6} {fmt.spec}{order}\n")
    out.write("  dense  all levels d (any rank)\n")
    out.write("\nCOO, CSF, DCSR and dense adapt to the tensor's rank (COO of a 3-tensor is uqq).\n"
              "On the command line a mode order follows a second colon: -f A:ds:1,0 is CSC.\n"
              "In Python: ta.Format(\"ds\", order=(1, 0)).\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tensoralg`` console script and of ``python -m tensoralg``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        if args.command == "compile":
            return run_compile(args, sys.stdout)
        if args.command == "formats":
            return run_formats(sys.stdout)
        if args.command == "experiment":
            return experiment_command.run(args, sys.stdout)
        if args.command == "tune":
            return run_tune(args, sys.stdout)
        if args.command == "onnx":
            from tensoralg.onnx.frontend import command

            return command.run(args.model, args.inputs, args.opt_level, args.backend,
                               args.batch, args.onnx_command == "profile", args.repeat,
                               args.print_ir, sys.stdout)
        from tensoralg.demo import run_demo

        given = [m for m in (args.matrix_arg, args.matrix) if m is not None]
        if len(set(given)) > 1:
            parser.error(f"demo: two matrices given ({args.matrix_arg!r} and --matrix "
                         f"{args.matrix!r}); give one")
        matrix = given[0] if given else "bcspwr10"
        return run_demo(matrix=matrix, backend=args.backend, out=sys.stdout)
    except ta.TensorAlgebraError as err:
        print(f"tensoralg: {type(err).__name__}: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # `tensoralg compile ... | head` closed our stdout
        sys.stderr.close()
        return 0
