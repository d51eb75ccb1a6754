"""``Schedule``: an ordered, immutable list of commands, its text form and its parser.

The text form is what ``str(schedule)`` prints and ``Schedule.parse`` reads: commands separated
by ``;``, each ``name(argument, ...)`` with positional arguments and ``key=value`` options::

    reorder(j, i); split(i, 64, i0, i1, guard); parallelize(i0, reduction=partials)

It is the form of the CLI's ``--schedule`` and part of the kernel cache's key.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from tensoralg.errors import NotationError
from tensoralg.notation.ast import Assignment, accesses

from .commands import (
    Command,
    Fuse,
    Gemm,
    Jam,
    Parallelize,
    Pos,
    Precompute,
    Relayout,
    Reorder,
    Serial,
    Split,
    Tile,
    TransposeTiles,
    Unroll,
    Vectorize,
    Workspaces,
    renamed,
)


@dataclass(frozen=True, slots=True)
class Schedule:
    """Scheduling commands for one statement, applied in order.

    Each method returns a new schedule with one more command:

    >>> s = Schedule().reorder("i", "j").split("i", 64).parallelize("i0")
    >>> print(s)
    reorder(i, j); split(i, 64, i0, i1, guard); parallelize(i0)
    >>> Schedule.parse(str(s)) == s
    True
    """

    commands: tuple[Command, ...] = ()

    def renamed(self, names: Mapping[str, str]) -> "Schedule":
        """This schedule for the same statement written with other index names: each index
        ``k`` of ``names`` becomes ``names[k]``.

        >>> print(Schedule().reorder("i", "j").parallelize("i").renamed({"i": "a"}))
        reorder(a, j); parallelize(a)
        """
        return Schedule(tuple(renamed(command, names) for command in self.commands))

    def then(self, command: Command) -> "Schedule":
        """This schedule followed by ``command``."""
        return Schedule((*self.commands, command))

    def reorder(self, *indices: str) -> "Schedule":
        """Run these indices in this order (outermost first)."""
        return self.then(Reorder(tuple(indices)))

    def split(self, index: str, factor: int, outer: str = "", inner: str = "",
              tail: str = "guard") -> "Schedule":
        """Strip-mine ``index`` into blocks of ``factor`` (``outer``, default ``<index>0``) and
        positions within a block (``inner``, default ``<index>1``)."""
        return self.then(Split(index, factor, outer, inner, tail))  # type: ignore[arg-type]

    def fuse(self, outer: str, inner: str, fused: str = "") -> "Schedule":
        """Run two nested indices as one loop."""
        return self.then(Fuse(outer, inner, fused))

    def pos(self, index: str, position: str, tensor: str = "") -> "Schedule":
        """Iterate the compressed level storing ``index`` by position, as ``position``."""
        return self.then(Pos(index, position, tensor))

    def parallelize(self, index: str, unit: str = "cpu-threads", reduction: str = "none",
                    threads: int | None = None) -> "Schedule":
        """Run the iterations of ``index`` concurrently (see ``Reduction`` for ``reduction``)."""
        return self.then(Parallelize(index, unit, reduction, threads))  # type: ignore[arg-type]

    def serial(self) -> "Schedule":
        """Run on one thread."""
        return self.then(Serial())

    def precompute(self, expr: str, indices: str | tuple[str, ...], workspace: str = "w",
                   format: str = "dense") -> "Schedule":
        """Compute ``expr`` (written as in the statement) into a workspace over ``indices``
        first, then read it (see ``Precompute``).

        >>> print(Schedule().precompute("A(i,k) * B(k,j)", "j"))
        precompute('A(i,k) * B(k,j)', j, workspace=w, format=dense)
        """
        return self.then(Precompute(expr, indices, workspace, format))  # type: ignore[arg-type]

    def unroll(self, index: str, factor: int) -> "Schedule":
        """Unroll the loop over ``index`` by ``factor``."""
        return self.then(Unroll(index, factor))

    def vectorize(self, index: str, width: int, tail: str = "remainder") -> "Schedule":
        """Vectorize the loop over ``index`` with ``width`` lanes; ``tail="mask"`` runs the
        last partial vector masked instead of a scalar loop (see `Vectorize`)."""
        return self.then(Vectorize(index, width, tail))  # type: ignore[arg-type]

    def tile(self, bytes: int) -> "Schedule":
        """Register tiles of ``bytes`` accumulators (0 turns them off)."""
        return self.then(Tile(bytes))

    def jam(self, rows: int, tiles: int | None = None) -> "Schedule":
        """Jam ``rows`` rows of the thread-range loop (1 turns jamming off); ``tiles`` of them
        where the rows hold register tiles (``rows`` when not given).

        >>> print(Schedule().jam(4, tiles=6))
        jam(4, tiles=6)
        """
        return self.then(Jam(rows, tiles))

    def workspaces(self, enabled: bool = True) -> "Schedule":
        """Allow (or forbid) fusing temporaries into row workspaces."""
        return self.then(Workspaces(enabled))

    def transpose_tiles(self, line_bytes: int) -> "Schedule":
        """Tile transposed copies by ``line_bytes`` (0 turns it off)."""
        return self.then(TransposeTiles(line_bytes))

    def gemm(self, route: str) -> "Schedule":
        """Run a dense matrix product on ``route``: ``"blas"``, ``"generated"`` (tensoralg's
        register-tiled GEMM) or ``"loops"`` (the statement's loop nest)."""
        return self.then(Gemm(route))  # type: ignore[arg-type]

    def relayout(self, tensor: str, *indices: str) -> "Schedule":
        """Read ``tensor`` from a copy whose levels run over ``indices`` in this order."""
        return self.then(Relayout(tensor, tuple(indices)))

    def find(self, kind: type) -> list[Any]:
        """The commands of one kind, in order."""
        return [c for c in self.commands if isinstance(c, kind)]

    def last(self, kind: type) -> Any:
        """The last command of one kind, or None: a later command overrides an earlier one."""
        found = self.find(kind)
        return found[-1] if found else None

    def __iter__(self) -> Iterator[Command]:
        return iter(self.commands)

    def __len__(self) -> int:
        return len(self.commands)

    def __bool__(self) -> bool:
        return bool(self.commands)

    def __add__(self, other: "Schedule") -> "Schedule":
        return Schedule((*self.commands, *other.commands))

    def __str__(self) -> str:
        return "; ".join(str(c) for c in self.commands)

    def __repr__(self) -> str:
        return f"Schedule.parse({str(self)!r})"

    @staticmethod
    def parse(text: str) -> "Schedule":
        """Read the text form (see the module docstring).

        >>> print(Schedule.parse("parallelize(j, reduction=partials);  jam(1)"))
        parallelize(j, reduction=partials); jam(1)
        """
        return parse_schedule(text)


def as_schedule(value: object) -> Schedule | None:
    """A ``Schedule`` from what a user passes as ``schedule=``: None, a Schedule, its text
    form, or a list of commands."""
    if value is None or isinstance(value, Schedule):
        return value
    if isinstance(value, str):
        return parse_schedule(value)
    if isinstance(value, (list, tuple)):
        commands: list[Command] = []
        for item in value:
            if isinstance(item, str):
                commands.extend(parse_schedule(item).commands)
            elif isinstance(item, Schedule):
                commands.extend(item.commands)
            elif isinstance(item, Command):
                commands.append(item)
            else:
                raise NotationError(f"a schedule's commands must be scheduling commands or "
                                    f"their text, not {type(item).__name__}")
        return Schedule(tuple(commands))
    raise NotationError(f"schedule must be a ta.Schedule or its text form such as "
                        f"'reorder(i, j); parallelize(i)', not {type(value).__name__}")


# ---------------------------------------------------------------------------------------------
# The parser: one regular expression per token, positions kept for the caret.

_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_\-]*)|(?P<number>\d+)|"
                    r"(?P<string>'[^']*'|\"[^\"]*\")|(?P<punct>[(),;=]))")


def _tokens(text: str) -> list[tuple[str, str, int]]:
    tokens, at = [], 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise NotationError("unexpected character in the schedule", text,
                                len(text) - len(text[at:].lstrip()))
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind), match.start(kind)))
        at = match.end()
    return tokens


def _int(value: str, where: int, text: str) -> int:
    if not value.isdigit():
        raise NotationError("expected a number", text, where)
    return int(value)


def _flag(value: str, where: int, text: str) -> bool:
    if value not in ("on", "off", "true", "false", "1", "0"):
        raise NotationError("expected on or off", text, where)
    return value in ("on", "true", "1")


Builder = Callable[[list[tuple[str, int]], dict[str, tuple[str, int]], str], Command]


def _build_reorder(args, options, text):
    return Reorder(tuple(a for a, _ in args))


def _build_split(args, options, text):
    index, factor, *names = [a for a, _ in args]
    outer = names[0] if len(names) > 0 else ""
    inner = names[1] if len(names) > 1 else ""
    tail = names[2] if len(names) > 2 else options.get("tail", ("guard", 0))[0]
    return Split(index, _int(factor, args[1][1], text), outer, inner, tail)  # type: ignore


def _build_parallelize(args, options, text):
    threads = options.get("threads")
    return Parallelize(args[0][0], options.get("unit", ("cpu-threads", 0))[0],  # type: ignore
                       options.get("reduction", ("none", 0))[0],  # type: ignore[arg-type]
                       _int(*threads, text) if threads else None)


def _build_precompute(args, options, text):
    (expr, where), *rest = args
    if expr[:1] not in ("'", '"'):
        raise NotationError("precompute's first argument is the subexpression, quoted: "
                            "precompute('B(j,k) * x(k)', j)", text, where)
    return Precompute(expr[1:-1], tuple(a for a, _ in rest),
                      options.get("workspace", ("w", 0))[0],
                      options.get("format", ("dense", 0))[0])


_BUILDERS: dict[str, tuple[int, int, Builder]] = {   # name: (least, most positional, build)
    "reorder": (1, 64, _build_reorder),
    "split": (2, 5, _build_split),
    "fuse": (2, 3, lambda a, o, t: Fuse(*[x for x, _ in a])),
    "pos": (2, 3, lambda a, o, t: Pos(*[x for x, _ in a])),
    "parallelize": (1, 1, _build_parallelize),
    "serial": (0, 0, lambda a, o, t: Serial()),
    "precompute": (1, 64, _build_precompute),
    "unroll": (2, 2, lambda a, o, t: Unroll(a[0][0], _int(*a[1], t))),
    "vectorize": (2, 2, lambda a, o, t: Vectorize(a[0][0], _int(*a[1], t),
                                                  o.get("tail", ("remainder", 0))[0])),
    "tile": (1, 1, lambda a, o, t: Tile(_int(*a[0], t))),
    "jam": (1, 1, lambda a, o, t: Jam(_int(*a[0], t), _int(*o["tiles"], t) if "tiles" in o
                                      else None)),
    "workspaces": (1, 1, lambda a, o, t: Workspaces(_flag(*a[0], t))),
    "transpose_tiles": (1, 1, lambda a, o, t: TransposeTiles(_int(*a[0], t))),
    "gemm": (1, 1, lambda a, o, t: Gemm(a[0][0])),
    "relayout": (2, 65, lambda a, o, t: Relayout(a[0][0], tuple(x for x, _ in a[1:]))),
}
_OPTIONS = {"split": {"tail"}, "vectorize": {"tail"}, "jam": {"tiles"},
            "parallelize": {"unit", "reduction", "threads"},
            "precompute": {"workspace", "format"}}


def parse_schedule(text: str) -> Schedule:
    """Parse the text form of a schedule; a NotationError points at the fault.

    >>> parse_schedule("jam(2)") is parse_schedule("jam(2)")    # one parse per text
    True
    """
    if not isinstance(text, str):
        raise NotationError(f"a schedule's text must be a string, not {type(text).__name__}")
    return _parsed(text)


# A call with ``schedule="..."`` parses its text every time; schedules are immutable, so each
# text is parsed once (~25 us of a repeated small ``ta.einsum`` call otherwise).
@functools.lru_cache(maxsize=512)
def _parsed(text: str) -> Schedule:
    tokens = _tokens(text)
    commands: list[Command] = []
    k = 0

    def expect(value: str) -> int:
        nonlocal k
        if k >= len(tokens) or tokens[k][1] != value:
            where = tokens[k][2] if k < len(tokens) else len(text)
            raise NotationError(f"expected {value!r} in the schedule", text, where)
        k += 1
        return tokens[k - 1][2]

    while k < len(tokens):
        if tokens[k][1] == ";":
            k += 1
            continue
        kind, name, start = tokens[k]
        if kind != "name" or name not in _BUILDERS:
            known = ", ".join(sorted(_BUILDERS))
            raise NotationError(f"unknown scheduling command {name!r} (known: {known})",
                                text, start)
        k += 1
        expect("(")
        args: list[tuple[str, int]] = []
        options: dict[str, tuple[str, int]] = {}
        while k < len(tokens) and tokens[k][1] != ")":
            kind, value, where = tokens[k]
            if kind == "punct":
                raise NotationError(f"unexpected {value!r} in {name}(...)", text, where)
            k += 1
            if k < len(tokens) and tokens[k][1] == "=":
                k += 1
                if k >= len(tokens) or tokens[k][0] == "punct":
                    raise NotationError(f"{value}= needs a value", text, where)
                if value not in _OPTIONS.get(name, ()):
                    raise NotationError(f"{name} has no option {value!r}", text, where)
                options[value] = (tokens[k][1], tokens[k][2])
                k += 1
            else:
                args.append((value, where))
            if k < len(tokens) and tokens[k][1] == ",":
                k += 1
        expect(")")
        least, most, build = _BUILDERS[name]
        if not least <= len(args) <= most:
            count = str(least) if least == most else f"{least} to {most}"
            raise NotationError(f"{name} takes {count} arguments, got {len(args)}", text, start)
        try:
            commands.append(build(args, options, text))
        except NotationError as err:
            if err.text is not None:
                raise
            raise NotationError(err.message, text, start) from None
        if k < len(tokens) and tokens[k][1] != ";":
            raise NotationError("expected ';' between scheduling commands", text, tokens[k][2])
    return Schedule(tuple(commands))


# ---------------------------------------------------------------------------------------------
# Checking a schedule against a statement


def statement_indices(stmt: Assignment) -> tuple[str, ...]:
    """The statement's index variables: output indices first, then the rest in reading order."""
    seen = dict.fromkeys(stmt.lhs.indices)
    for access in accesses(stmt.rhs):
        seen.update(dict.fromkeys(access.indices))
    return tuple(seen)


def check(schedule: Schedule, stmt: Assignment) -> None:
    """Refuse a schedule that names indices the statement (or an earlier command) lacks.

    >>> from tensoralg.notation import parse_statement
    >>> check(Schedule().reorder("k"), parse_statement("y(i) = A(i,j) * x(j)"))
    Traceback (most recent call last):
    ...
    tensoralg.errors.NotationError: reorder(k): the statement y(i) = sum(j, A(i,j) * x(j)) has no index k (its indices: i, j)
    """
    known = list(statement_indices(stmt))
    tensors = {a.tensor for a in accesses(stmt.rhs)}

    def need(command: Command, *names: str) -> None:
        for name in names:
            if name not in known:
                raise NotationError(f"{command}: the statement {stmt} has no index {name} "
                                    f"(its indices: {', '.join(known)})")

    for command in schedule:
        match command:
            case Reorder(indices):
                need(command, *indices)
            case Split(index, _, outer, inner):
                need(command, index)
                _introduce(command, (outer, inner), known, stmt)
            case Fuse(outer, inner, fused):
                need(command, outer, inner)
                _introduce(command, (fused,), known, stmt)
            case Pos(index, position, tensor):
                need(command, index)
                if tensor and tensor not in tensors:
                    raise NotationError(f"{command}: the statement {stmt} reads no tensor "
                                        f"{tensor}")
                known.append(position)
            case Parallelize(index) | Unroll(index) | Vectorize(index):
                need(command, index)
            case Relayout(tensor, indices):
                _check_relayout(command, stmt)


def _check_relayout(command: Relayout, stmt: Assignment) -> None:
    """A relayout names a tensor the statement reads, through accesses with distinct indices,
    and exactly those indices."""
    read = [a for a in accesses(stmt.rhs) if a.tensor == command.tensor]
    if not read:
        raise NotationError(f"{command}: the statement {stmt} reads no tensor {command.tensor}")
    for access in read:
        if len(set(access.indices)) != len(access.indices) or \
                sorted(access.indices) != sorted(command.indices):
            raise NotationError(f"{command}: the statement reads {access}; name each of its "
                                f"indices once, in the order its levels should run")


def _introduce(command: Command, names: tuple[str, ...], known: list[str],
               stmt: Assignment) -> None:
    for name in names:
        if name in known:
            raise NotationError(f"{command}: {name} is already an index of {stmt}")
    known.extend(names)


__all__ = ["Schedule", "as_schedule", "check", "parse_schedule", "statement_indices"]
