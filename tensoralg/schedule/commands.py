"""Scheduling commands as frozen data: what to do to the loops, never how.

Each command says one thing about the loop nest of a statement (Senanayake et al., "A Sparse
Iteration Space Transformation Framework", OOPSLA 2020). A command is validated against the
statement when it is applied (``schedule.check``) and turned into loops by ``lower/``, the only
place where decisions become loops. Every command prints as the text that parses back to it
(``str(Split("i", 64))`` is ``split(i, 64, i0, i1, guard)``), so a schedule can travel through
the command line and the kernel cache's key.

Commands fall into three groups:

- loop structure: ``Reorder``, ``Split``, ``Fuse``, ``Pos``, and ``Relayout`` (the storage
  order an operand is read in);
- parallelism: ``Parallelize`` (CPU threads, or GPU blocks/warps/threads), ``Serial``;
- code shape: ``Unroll``, ``Vectorize``, ``Precompute``, and the compiler's register tiles,
  row jamming, row workspaces and transpose tiles (``Tile``, ``Jam``, ``Workspaces``,
  ``TransposeTiles``), which the IR passes apply where their patterns hold;
- routes: ``Gemm``, which of three implementations runs a dense matrix product.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Mapping

from tensoralg.errors import NotationError
from tensoralg.notation.ast import (
    Expr,
    Reduce,
)
from tensoralg.notation.canonical import rename_expr
from tensoralg.notation.parse_statement import parse_statement
from tensoralg.notation.printer import format_expr
from tensoralg.notation.reductions import children, with_children


class Tail(enum.Enum):
    """What a split does with the iterations past the last whole block."""

    GUARD = "guard"        # the last block runs whole and skips indices past the end


class VectorTail(enum.Enum):
    """How a vectorized loop runs the iterations past its last whole vector."""

    REMAINDER = "remainder"   # a scalar loop finishes them (the vectoriser's default)
    MASK = "mask"             # the last vector runs with its lanes past the end masked off
    # mask or remainder, chosen once per call from the rows' lengths (a loop over a CSR row)
    ADAPTIVE = "adaptive"


class Unit(enum.Enum):
    """What runs the iterations of a parallelized loop."""

    CPU_THREADS = "cpu-threads"
    GPU_BLOCKS = "gpu-blocks"
    GPU_WARPS = "gpu-warps"
    GPU_THREADS = "gpu-threads"


class Reduction(enum.Enum):
    """How parallel iterations that write the same output element are combined."""

    NONE = "none"            # they never do: each iteration owns its output elements
    ATOMICS = "atomics"      # each update is an atomic add
    PARTIALS = "partials"    # each thread sums into its own copy; the copies are added after


class GemmRoute(enum.Enum):
    """What runs a dense matrix product ``C(i,j) = A(i,k) * B(k,j)`` (either operand read
    transposed)."""

    BLAS = "blas"              # the BLAS gemm SciPy links (OpenBLAS), on its own threads
    GENERATED = "generated"    # tensoralg's register-tiled GEMM (codegen/gemm.py)
    LOOPS = "loops"            # the statement's own loop nest, as lowering builds it
    # BLAS or the generated GEMM for calls large enough to pay, the loop nest for the others:
    # the compiler's own choice, which a schedule without a gemm command does not make
    AUTO = "auto"


def _index(name: str, what: str) -> str:
    if not isinstance(name, str) or not name.isidentifier():
        raise NotationError(f"{what}: {name!r} is not an index name (a letter followed by "
                            f"letters, digits or underscores)")
    return name


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise NotationError(f"{what} must be a positive integer, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Reorder:
    """Run the named indices in this order, outermost first; others are placed by the compiler."""

    indices: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.indices) < 1:
            raise NotationError("reorder needs at least one index")
        for name in self.indices:
            _index(name, "reorder")
        if len(set(self.indices)) != len(self.indices):
            raise NotationError(f"reorder names an index twice: {', '.join(self.indices)}")

    def __str__(self) -> str:
        return f"reorder({', '.join(self.indices)})"


@dataclass(frozen=True, slots=True)
class Split:
    """Strip-mine ``index`` into ``outer`` (blocks of ``factor``) and ``inner`` (within one)."""

    index: str
    factor: int
    outer: str = ""
    inner: str = ""
    tail: Tail = Tail.GUARD

    def __post_init__(self) -> None:
        _index(self.index, "split")
        _positive(self.factor, f"split({self.index}): the factor")
        object.__setattr__(self, "outer", _index(self.outer or f"{self.index}0", "split"))
        object.__setattr__(self, "inner", _index(self.inner or f"{self.index}1", "split"))
        object.__setattr__(self, "tail", Tail(self.tail))
        if len({self.index, self.outer, self.inner}) != 3:
            raise NotationError(f"split({self.index}): the new indices must be two new names")

    def __str__(self) -> str:
        return (f"split({self.index}, {self.factor}, {self.outer}, {self.inner}, "
                f"{self.tail.value})")


@dataclass(frozen=True, slots=True)
class Fuse:
    """Run two nested indices as one loop over their product."""

    outer: str
    inner: str
    fused: str = ""

    def __post_init__(self) -> None:
        _index(self.outer, "fuse")
        _index(self.inner, "fuse")
        object.__setattr__(self, "fused", _index(self.fused or f"{self.outer}{self.inner}",
                                                 "fuse"))

    def __str__(self) -> str:
        return f"fuse({self.outer}, {self.inner}, {self.fused})"


@dataclass(frozen=True, slots=True)
class Pos:
    """Iterate the compressed level of ``tensor`` that stores ``index`` by position."""

    index: str
    position: str
    tensor: str = ""

    def __post_init__(self) -> None:
        _index(self.index, "pos")
        _index(self.position, "pos")
        if self.tensor:
            _index(self.tensor, "pos (tensor)")

    def __str__(self) -> str:
        tail = f", {self.tensor}" if self.tensor else ""
        return f"pos({self.index}, {self.position}{tail})"


@dataclass(frozen=True, slots=True)
class Parallelize:
    """Run the iterations of ``index`` concurrently on ``unit``, combining as ``reduction``."""

    index: str
    unit: Unit = Unit.CPU_THREADS
    reduction: Reduction = Reduction.NONE
    threads: int | None = None

    def __post_init__(self) -> None:
        _index(self.index, "parallelize")
        object.__setattr__(self, "unit", _enum(Unit, self.unit, "parallelize: unit"))
        object.__setattr__(self, "reduction",
                           _enum(Reduction, self.reduction, "parallelize: reduction"))
        if self.threads is not None:
            _positive(self.threads, f"parallelize({self.index}): threads")

    def __str__(self) -> str:
        parts = [self.index]
        if self.unit is not Unit.CPU_THREADS:
            parts.append(f"unit={self.unit.value}")
        if self.reduction is not Reduction.NONE:
            parts.append(f"reduction={self.reduction.value}")
        if self.threads is not None:
            parts.append(f"threads={self.threads}")
        return f"parallelize({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Serial:
    """Run on one thread, even where the compiler would split the outer loop."""

    def __str__(self) -> str:
        return "serial()"


@dataclass(frozen=True, slots=True)
class Precompute:
    """Compute the subexpression ``expr`` into a workspace over ``indices`` first, then read it.

    ``expr`` is written as in the statement (its sums are placed by the statement); the
    workspace holds one value per coordinate of ``indices``, for each coordinate of the
    subexpression's other free indices (TACO's ``precompute(expr, i, iw, w)``, Kjolstad et al.,
    CGO 2019). Two uses: the whole right side of a statement with a sparse output, over the
    output's last stored index, accumulates each output row in a dense workspace that is then
    compressed into the output (SpGEMM); any subexpression goes into a dense temporary that is
    computed first (``y(i) = A(i,j) * (B(j,k) * x(k))`` computes ``w(j)`` once instead of per
    entry of A). ``format`` is the workspace's storage: ``dense`` is the one lowering carries out.

    >>> print(Precompute("B(j,k) * x(k)", ("j",)))
    precompute('B(j,k) * x(k)', j, workspace=w, format=dense)
    """

    expr: str
    indices: tuple[str, ...]
    workspace: str = "w"
    format: str = "dense"

    def __post_init__(self) -> None:
        if not isinstance(self.expr, str) or not self.expr.strip():
            raise NotationError(f"precompute: the subexpression must be the text of an index "
                                f"expression such as 'B(j,k) * x(k)', not {self.expr!r}")
        object.__setattr__(self, "expr", self.expr.strip())
        if "'" in self.expr:
            raise NotationError(f"precompute: the subexpression {self.expr!r} holds a quote")
        subexpression(self.expr)      # a malformed expression fails here, where it is written
        indices = (self.indices,) if isinstance(self.indices, str) else tuple(self.indices)
        for name in indices:
            _index(name, "precompute")
        if len(set(indices)) != len(indices):
            raise NotationError(f"precompute: an index is named twice: {', '.join(indices)}")
        object.__setattr__(self, "indices", indices)
        _index(self.workspace, "precompute (workspace)")
        _index(self.format, "precompute (format)")

    def __str__(self) -> str:
        names = "".join(f", {name}" for name in self.indices)
        return (f"precompute('{self.expr}'{names}, workspace={self.workspace}, "
                f"format={self.format})")


def subexpression(text: str) -> Expr:
    """The expression a ``precompute`` names, with its sums removed: it is matched against
    the statement's subexpressions with theirs removed, since the statement places them.

    >>> subexpression("B(j,k) * x(k)")
    Mul(lhs=Access(tensor='B', indices=('j', 'k')), rhs=Access(tensor='x', indices=('k',)))
    """
    try:
        parsed = parse_statement(f"precomputed_ = {text}")
    except NotationError as err:
        raise NotationError(f"precompute: {text!r} is not an index expression: "
                            f"{err.message}") from None
    return without_sums(parsed.rhs)


def without_sums(expr: Expr) -> Expr:
    """``expr`` with every ``Reduce`` node replaced by its body."""
    if isinstance(expr, Reduce):
        return without_sums(expr.body)
    return with_children(expr, [without_sums(child) for child in children(expr)])


@dataclass(frozen=True, slots=True)
class Unroll:
    """Unroll the loop over ``index`` by ``factor`` (a hint to the backend's unroller)."""

    index: str
    factor: int

    def __post_init__(self) -> None:
        _index(self.index, "unroll")
        _positive(self.factor, f"unroll({self.index}): the factor")

    def __str__(self) -> str:
        return f"unroll({self.index}, {self.factor})"


@dataclass(frozen=True, slots=True)
class Vectorize:
    """Vectorize the loop over ``index`` with ``width`` lanes (a hint to the vectorizer).

    ``tail=mask`` runs the last partial vector with masked lanes instead of a scalar loop, so a
    loop of fewer than ``width`` iterations runs one masked vector: it pays off on the short,
    irregular rows of a graph's adjacency matrix (SpMV on ca-GrQc, wiki-Vote, a power-law 2e4
    x 2e4 matrix: 0.63-0.72x the default's time on one thread at 8 lanes) and costs where a
    row's few entries sit close together and a scalar loop finishes them faster (a road network
    of two entries a row, banded matrices: 1.1-1.3x; development VM, 2026-12-06, ``python
    benchmarks/row_loops.py``). LLVM backend only; the C backend leaves vectorizing to the C
    compiler.

    ``tail=adaptive``, for a loop over the rows of a kernel's one sparse operand, a CSR
    matrix, makes three kernels: the loop vectorized as the backend chooses with a scalar
    remainder, with the tail masked, and unrolled; a call runs the masked one when at least
    60% of the matrix's consecutive rows differ in length (how often the scalar loop's exit
    would mispredict), the unrolled one where they repeat at 4-7 entries a row
    (``runtime/rows.py``). The compiler gives SpMV-like kernels this hint itself.

    >>> str(Vectorize("j", 8)), str(Vectorize("j", 8, "mask"))
    ('vectorize(j, 8)', 'vectorize(j, 8, tail=mask)')
    """

    index: str
    width: int
    tail: VectorTail = VectorTail.REMAINDER

    def __post_init__(self) -> None:
        _index(self.index, "vectorize")
        _positive(self.width, f"vectorize({self.index}): the width")
        try:
            object.__setattr__(self, "tail", VectorTail(self.tail))
        except ValueError:
            raise NotationError(f"vectorize({self.index}): tail is remainder, mask or "
                                f"adaptive, not {self.tail!r}") from None

    def __str__(self) -> str:
        tail = "" if self.tail is VectorTail.REMAINDER else f", tail={self.tail.value}"
        return f"vectorize({self.index}, {self.width}{tail})"


@dataclass(frozen=True, slots=True)
class Tile:
    """Register tiles of ``bytes`` accumulators for dense rows under a reduction (0: none)."""

    bytes: int

    def __post_init__(self) -> None:
        if isinstance(self.bytes, bool) or not isinstance(self.bytes, int) or self.bytes < 0 \
                or self.bytes % 16:
            raise NotationError(f"tile: the tile width must be 0 or a multiple of 16 bytes, "
                                f"not {self.bytes!r}")

    def __str__(self) -> str:
        return f"tile({self.bytes})"


@dataclass(frozen=True, slots=True)
class Jam:
    """Run ``rows`` iterations of the thread-range loop at once, their inner loops fused;
    ``tiles`` of them where each row holds register tiles (a two-dimensional tile: rows x
    tile width; the same as ``rows`` when not given)."""

    rows: int
    tiles: int | None = None

    def __post_init__(self) -> None:
        _positive(self.rows, "jam: rows")
        if self.tiles is not None:
            _positive(self.tiles, "jam: tiles")

    @property
    def tile_rows(self) -> int:
        """The rows jammed where they hold register tiles."""
        return self.rows if self.tiles is None else self.tiles

    def __str__(self) -> str:
        return f"jam({self.rows})" if self.tiles is None else \
            f"jam({self.rows}, tiles={self.tiles})"


@dataclass(frozen=True, slots=True)
class Workspaces:
    """Fuse a dense temporary's producer and consumer loops into a one-row workspace."""

    enabled: bool = True

    def __str__(self) -> str:
        return f"workspaces({'on' if self.enabled else 'off'})"


@dataclass(frozen=True, slots=True)
class TransposeTiles:
    """Tile row-writing, column-reading nests by ``line_bytes`` of the strided operand (0: off)."""

    line_bytes: int

    def __post_init__(self) -> None:
        if isinstance(self.line_bytes, bool) or not isinstance(self.line_bytes, int) or \
                self.line_bytes < 0:
            raise NotationError(f"transpose_tiles: bytes must be 0 or positive, "
                                f"not {self.line_bytes!r}")

    def __str__(self) -> str:
        return f"transpose_tiles({self.line_bytes})"


@dataclass(frozen=True, slots=True)
class Gemm:
    """Run a dense matrix product on ``route``: BLAS, the generated GEMM, the loop nest, or as
    the compiler chooses per call (``auto``, what ``kernel.schedule`` prints for a kernel
    compiled without a gemm command)."""

    route: GemmRoute

    def __post_init__(self) -> None:
        object.__setattr__(self, "route", _enum(GemmRoute, self.route, "gemm: the route"))

    def __str__(self) -> str:
        return f"gemm({self.route.value})"


@dataclass(frozen=True, slots=True)
class Relayout:
    """Read operand ``tensor`` from a copy whose levels run over ``indices`` in this order
    (the same level kinds; the runtime converts it before each call). The compiler does this
    on its own where no loop order iterates every operand in its storage order, or where its
    loops would re-read a dense operand with a stride; ``kernel.schedule`` prints it, so a
    printed schedule builds the same kernel.

    >>> print(Relayout("C", ("a", "d", "c")))
    relayout(C, a, d, c)
    """

    tensor: str
    indices: tuple[str, ...]

    def __post_init__(self) -> None:
        _index(self.tensor, "relayout (tensor)")
        indices = (self.indices,) if isinstance(self.indices, str) else tuple(self.indices)
        if not indices:
            raise NotationError(f"relayout({self.tensor}): name the indices of {self.tensor} "
                                f"in the order its levels should run")
        for name in indices:
            _index(name, "relayout")
        if len(set(indices)) != len(indices):
            raise NotationError(f"relayout names an index twice: {', '.join(indices)}")
        object.__setattr__(self, "indices", indices)

    def __str__(self) -> str:
        return f"relayout({self.tensor}, {', '.join(self.indices)})"


def _enum(kind: type[enum.Enum], value: object, what: str):
    if isinstance(value, kind):
        return value
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise NotationError(f"{what} {value!r} is not one of {choices}") from None


Command = (Reorder | Split | Fuse | Pos | Parallelize | Serial | Precompute | Unroll | Vectorize
           | Tile | Jam | Workspaces | TransposeTiles | Gemm | Relayout)

__all__ = ["Command", "Fuse", "Gemm", "GemmRoute", "Jam", "Parallelize", "Pos", "Precompute", "Reduction", "Relayout", "Reorder",
           "Serial", "Split", "Tail", "Tile", "TransposeTiles", "Unit", "Unroll", "VectorTail",
           "Vectorize",
           "Workspaces", "renamed", "subexpression", "without_sums"]


_INDEX_FIELDS = ("index", "outer", "inner", "fused", "position")


def renamed(command: Command, names: Mapping[str, str]) -> Command:
    """``command`` with each index name ``k`` of ``names`` written ``names[k]`` (in its index
    fields and in a precompute's subexpression); tensor names and other fields are kept.

    >>> print(renamed(Precompute("A(i,k) * B(k,j)", ("j",)), {"i": "a", "j": "b", "k": "c"}))
    precompute('A(a,c) * B(c,b)', b, workspace=w, format=dense)
    """
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(command):   # type: ignore[arg-type]
        value = getattr(command, field.name)
        if field.name in _INDEX_FIELDS and isinstance(value, str):
            changes[field.name] = names.get(value, value)
        elif field.name == "indices":
            changes[field.name] = tuple(names.get(v, v) for v in value)
        elif field.name == "expr" and isinstance(command, Precompute):
            # written without its sums, which the statement places (``subexpression``)
            changes[field.name] = format_expr(rename_expr(subexpression(value), names))
    return dataclasses.replace(command, **changes)   # type: ignore[type-var]

