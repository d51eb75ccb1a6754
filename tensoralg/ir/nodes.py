"""Imperative IR of generated kernels: a closed set of frozen nodes.

The IR says *how* a kernel runs: loops, co-iteration, stores. It knows nothing of tensors or
formats; `lower/` produces it and `codegen/` prints it for a target.

Semantics, which every pass and every backend may rely on:

- Types are the scalars ``bool``, ``i32``, ``i64``, ``f32``, ``f64``, ``c64``, ``c128`` and
  pointers ``Ptr(t)`` to 1-D buffers of ``t`` (a pointer may point to pointers: output buffers
  that the kernel grows are handed back through a ``Ptr(Ptr(t))`` parameter).
- A binary arithmetic node requires both operands to have the same dtype (``lower/`` inserts
  ``Cast`` nodes); comparisons and ``and``/``or`` produce ``bool``. ``and``/``or`` short-circuit.
- Integer arithmetic is two's complement and never overflows on valid input: ``lower/`` computes
  every index in ``i64``. Integer ``/`` truncates toward zero and ``%`` takes the sign of the
  dividend (C semantics); ``lower/`` never divides by a zero index.
- ``c64``/``c128`` are complex numbers with ``f32``/``f64`` parts, laid out in memory as
  (real, imaginary) pairs (C99 ``_Complex``, NumPy's complex64/complex128). They take ``+ - *
  /``, ``neg``, ``==``/``!=`` and casts; nothing else (no ordering, no math functions). ``*``
  is the textbook ``(ac - bd) + (ad + bc)i`` and ``/`` Smith's algorithm, as NumPy computes
  them (not C's Annex G, which special-cases infinities). A cast from real to complex gives a
  zero imaginary part; from complex to real it keeps the real part, as NumPy's unsafe cast.
- ``min``/``max`` on floats give NaN when either operand is NaN, as NumPy's ``minimum`` and
  ``maximum`` (and ONNX's Relu, Clip, ReduceMax) do; C's ``fmin``/``fmax`` would drop it.
  ``pow`` is the C ``pow``. Unary math (``sqrt exp log sin cos tanh abs``) follows C's libm.
  ``floor``/``ceil``/``round`` (floats only) give integral floats; ``round`` goes half to even
  (C's ``nearbyint`` in the default rounding mode, LLVM's ``roundeven``), as NumPy's ``rint``.
- Expressions have no side effects and may be evaluated in any order, any number of times.
  Only statements change state.
- A float local updated as ``acc = acc + e`` is a reduction: a backend may reassociate its
  additions (the LLVM backend sums in vector lanes, as BLAS and NumPy's pairwise sums do), so
  its result may differ from left-to-right summation by rounding. No other float operation is
  reordered.
- Every variable is introduced exactly once per function: by a ``Param``, a ``Declare``, an
  ``Allocate`` or as the counter of a ``For``; names are unique within a function, so a backend
  may give each its own stack slot.
- Every ``Load`` and ``Store`` is in bounds for storage that ``runtime/`` has validated.
- ``Allocate`` and ``Grow`` obtain heap memory; if the system refuses, the function returns
  status 1 at once. A function otherwise returns status 0 when its body ends.
- ``For`` runs its counter from ``start`` (inclusive) to ``stop`` (exclusive) in steps of 1; the
  body must not assign the counter.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Union


class Scalar(enum.Enum):
    """Scalar dtypes of the IR."""

    BOOL = "bool"
    I32 = "i32"
    I64 = "i64"
    F32 = "f32"
    F64 = "f64"
    C64 = "c64"
    C128 = "c128"

    @property
    def is_float(self) -> bool:
        return self in (Scalar.F32, Scalar.F64)

    @property
    def is_complex(self) -> bool:
        return self in (Scalar.C64, Scalar.C128)

    @property
    def part(self) -> "Scalar":
        """The real dtype of each part of a complex dtype (the dtype itself otherwise).

        >>> Scalar.C64.part, Scalar.F64.part
        (<Scalar.F32: 'f32'>, <Scalar.F64: 'f64'>)
        """
        return {Scalar.C64: Scalar.F32, Scalar.C128: Scalar.F64}.get(self, self)

    @property
    def is_int(self) -> bool:
        return self in (Scalar.I32, Scalar.I64)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Ptr:
    """Pointer to a 1-D buffer of ``elem``."""

    elem: "DType"

    def __str__(self) -> str:
        return f"{self.elem}*"


DType = Union[Scalar, Ptr]

BOOL, I32, I64, F32, F64 = Scalar.BOOL, Scalar.I32, Scalar.I64, Scalar.F32, Scalar.F64
C64, C128 = Scalar.C64, Scalar.C128
# The operations complex values take (ir/verify.py holds every backend to this set).
COMPLEX_BINARY_OPS = frozenset({"+", "-", "*", "/", "==", "!="})
COMPLEX_UNARY_OPS = frozenset({"neg"})

# Unary ops defined on float operands only.
FLOAT_UNARY_OPS = frozenset({"sqrt", "exp", "log", "sin", "cos", "tanh", "floor", "ceil",
                             "round"})
UNARY_OPS = frozenset({"neg", "not", "abs", "ctz"}) | FLOAT_UNARY_OPS
ARITHMETIC_OPS = frozenset({"+", "-", "*", "/", "%", "min", "max", "pow"})
COMPARISON_OPS = frozenset({"<", "<=", ">", ">=", "==", "!="})
LOGICAL_OPS = frozenset({"and", "or"})
# Integer bit operations, for bitmaps (a sparse output's workspace marks its coordinates in
# 64-bit words, lower/assemble.py). ``shl``/``shr`` shift by 0 to width - 1 bits (anything else
# is undefined, as in C and LLVM); ``shr`` is arithmetic; ``shl`` wraps into the sign bit.
# ``ctz`` (unary) counts trailing zero bits, the bit width for 0.
BITWISE_OPS = frozenset({"bitand", "bitor", "shl", "shr"})
BINARY_OPS = ARITHMETIC_OPS | COMPARISON_OPS | LOGICAL_OPS | BITWISE_OPS


class IRError(Exception):
    """An IR node was built with inconsistent parts: always a bug in tensoralg, never user error."""


# ---------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True, slots=True)
class Const:
    """A literal of a scalar dtype."""

    value: int | float | bool | complex
    dtype: Scalar

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, Scalar):
            raise IRError(f"Const needs a scalar dtype, got {self.dtype}")


@dataclass(frozen=True, slots=True)
class Var:
    """A named scalar or pointer: a parameter, a local, or a loop counter."""

    name: str
    dtype: DType


@dataclass(frozen=True, slots=True)
class Load:
    """``array[index]``: one element of a 1-D buffer."""

    array: Var
    index: "Expr"

    def __post_init__(self) -> None:
        if not isinstance(self.array.dtype, Ptr):
            raise IRError(f"Load from non-pointer {self.array.name}: {self.array.dtype}")

    @property
    def dtype(self) -> DType:
        assert isinstance(self.array.dtype, Ptr)
        return self.array.dtype.elem


@dataclass(frozen=True, slots=True)
class Unary:
    """``op(operand)`` for op in UNARY_OPS; ``not`` takes and gives bool."""

    op: str
    operand: "Expr"

    def __post_init__(self) -> None:
        if self.op not in UNARY_OPS:
            raise IRError(f"unknown unary op {self.op!r}")

    @property
    def dtype(self) -> DType:
        return dtype_of(self.operand)


@dataclass(frozen=True, slots=True)
class Binary:
    """``lhs op rhs`` for op in BINARY_OPS; operands share a dtype."""

    op: str
    lhs: "Expr"
    rhs: "Expr"

    def __post_init__(self) -> None:
        if self.op not in BINARY_OPS:
            raise IRError(f"unknown binary op {self.op!r}")
        left, right = dtype_of(self.lhs), dtype_of(self.rhs)
        if left != right:
            raise IRError(f"operands of {self.op!r} differ in dtype: {left} vs {right}")

    @property
    def dtype(self) -> DType:
        if self.op in COMPARISON_OPS or self.op in LOGICAL_OPS:
            return Scalar.BOOL
        return dtype_of(self.lhs)


@dataclass(frozen=True, slots=True)
class Select:
    """``cond ? if_true : if_false``; both branches share a dtype."""

    cond: "Expr"
    if_true: "Expr"
    if_false: "Expr"

    def __post_init__(self) -> None:
        if dtype_of(self.if_true) != dtype_of(self.if_false):
            raise IRError("Select branches differ in dtype")

    @property
    def dtype(self) -> DType:
        return dtype_of(self.if_true)


@dataclass(frozen=True, slots=True)
class Cast:
    """Convert a scalar to another scalar dtype (C conversion rules)."""

    operand: "Expr"
    to: Scalar

    @property
    def dtype(self) -> DType:
        return self.to


Expr = Union[Const, Var, Load, Unary, Binary, Select, Cast]


def dtype_of(expr: Expr) -> DType:
    """The dtype of any expression."""
    return expr.dtype


# ---------------------------------------------------------------------------------------------
# Statements


@dataclass(frozen=True, slots=True)
class Block:
    """A sequence of statements."""

    body: tuple["Stmt", ...] = ()

    def __post_init__(self) -> None:
        # A list would print, but walks and rewrites see only tuples: they would skip it.
        if not isinstance(self.body, tuple):
            object.__setattr__(self, "body", tuple(self.body))


@dataclass(frozen=True, slots=True)
class Declare:
    """Introduce a mutable local ``var`` with an initial value."""

    var: Var
    init: Expr


@dataclass(frozen=True, slots=True)
class Assign:
    """``var = value`` for a declared local."""

    var: Var
    value: Expr


@dataclass(frozen=True, slots=True)
class RowOwner:
    """Which of the rows run at once by one jam (``ir/passes/jam.py``) a store writes for.

    Jamming runs several iterations of a loop whose iterations own disjoint output elements
    side by side, so stores of one array under two different rows of the same jam never touch
    the same element. The pass records that fact here because nothing in the index
    expressions proves it to a backend (the rows lie a run-time row length apart); the LLVM
    backend passes it on as alias scopes, which lets it keep each row's register tile in
    registers across a reduction.

    >>> RowOwner("jam0", 1)
    RowOwner(jam='jam0', row=1)
    """

    jam: str
    row: int


@dataclass(frozen=True, slots=True)
class Store:
    """``array[index] = value``, or ``array[index] += value`` when ``accumulate``; ``owner``:
    the jammed row it writes for, where a jam made it (see `RowOwner`)."""

    array: Var
    index: Expr
    value: Expr
    accumulate: bool = False
    owner: RowOwner | None = None


@dataclass(frozen=True, slots=True)
class For:
    """``for (var = start; var < stop; ++var) body``: a counted loop.

    ``unroll`` and ``vectorize`` (0: the backend decides) are a schedule's hints: an unroll
    factor and a vector width the backend asks its optimiser for, ``masked`` that the last
    partial vector run with masked lanes rather than a scalar loop. They never change results
    beyond the order of a reduction's additions.

    ``disjoint`` is a fact lowering records: the loop runs an index of a dense output, so for
    fixed values of the enclosing loops its iterations write distinct output elements (the jam
    pass may then run several of them side by side). A pass that rebuilds the loop may drop
    it; nothing may set it without that proof.
    """

    var: Var
    start: Expr
    stop: Expr
    body: Block
    unroll: int = 0
    vectorize: int = 0
    masked: bool = False
    disjoint: bool = False


@dataclass(frozen=True, slots=True)
class While:
    """Repeat ``body`` while ``cond`` holds: the loop of one merge-lattice point."""

    cond: Expr
    body: Block


@dataclass(frozen=True, slots=True)
class If:
    """``if (cond) then else otherwise``."""

    cond: Expr
    then: Block
    otherwise: Block = field(default_factory=Block)


@dataclass(frozen=True, slots=True)
class Comment:
    """A comment carried into the generated source."""

    text: str


@dataclass(frozen=True, slots=True)
class Allocate:
    """Introduce pointer ``var`` to a fresh heap buffer of ``count`` elements (zeroed if asked).

    ``row_of`` names a loop counter when the buffer is one row of a temporary for that loop
    (``ir/passes/workspace.py``): each iteration writes every element it reads before reading
    it, so no value crosses iterations, and a pass that runs several iterations at once may
    give each its own copy. Empty: the buffer may carry values from one iteration to the next.
    """

    var: Var
    count: Expr
    zero: bool = False
    row_of: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.var.dtype, Ptr):
            raise IRError(f"Allocate needs a pointer variable, got {self.var.dtype}")


@dataclass(frozen=True, slots=True)
class Grow:
    """Ensure buffer ``var`` (of ``capacity`` elements) holds at least ``needed`` elements.

    When ``needed > capacity`` the buffer is reallocated to ``max(2 * capacity, needed)`` elements,
    keeping its contents, and both ``var`` and the i64 local ``capacity`` are updated.
    """

    var: Var
    capacity: Var
    needed: Expr


@dataclass(frozen=True, slots=True)
class Free:
    """Release a buffer obtained by ``Allocate`` or ``Grow``."""

    var: Var


Stmt = Union[Block, Declare, Assign, Store, For, While, If, Comment, Allocate, Grow, Free]


# ---------------------------------------------------------------------------------------------
# Functions


class RangeBound(str):
    """The role of a thread range's bound parameter: ``begin`` or ``end`` of the range of the
    loop over ``index`` that a caller runs on one thread. It prints (and compares, and keys a
    dict) as its text, ``range.begin.i``; every room reads ``which`` and ``index`` instead of
    parsing that text.

    ``over`` names a tensor when the loop runs over the stored positions of that tensor's
    first level (a compressed one) rather than over the coordinates of ``index``: the range
    then spans ``[0, pos[-1])`` of that level, and each position is one coordinate of
    ``index`` (``range.begin.i@T``).

    >>> role = RangeBound("end", "i")
    >>> role, role.which, role.index, role.over, role == "range.end.i"
    ('range.end.i', 'end', 'i', None, True)
    >>> RangeBound("begin", "i", "T")
    'range.begin.i@T'
    """

    which: str
    index: str
    over: str | None

    def __new__(cls, which: str, index: str, over: str | None = None) -> "RangeBound":
        if which not in ("begin", "end"):
            raise ValueError(f"a thread range is bounded by begin and end, not {which!r}")
        role = super().__new__(cls, f"range.{which}.{index}" + (f"@{over}" if over else ""))
        role.which, role.index, role.over = which, index, over
        return role

    def __reduce__(self) -> tuple:
        return (RangeBound, (self.which, self.index, self.over))


@dataclass(frozen=True, slots=True)
class Param:
    """One argument of a kernel, as the ABI that ``runtime/`` packs.

    ``role`` says what the argument is, for the runtime and for readers: for example
    ``"A.1.pos"`` (tensor A, storage level 1, its pos array), ``"A.vals"``, ``"A.dim.0"``
    (size of mode 0), ``"out.1.crd"``, or a `RangeBound`. ``output`` marks buffers the kernel
    writes.
    """

    var: Var
    role: str
    output: bool = False


@dataclass(frozen=True, slots=True)
class Function:
    """A kernel: parameters, a body, and notes explaining decisions the compiler made.

    The function returns an i32 status: 0 on success, 1 when memory could not be obtained.
    """

    name: str
    params: tuple[Param, ...]
    body: Block
    notes: tuple[str, ...] = ()

    @property
    def thread_range(self) -> tuple[Param, Param] | None:
        """The ``begin`` and ``end`` parameters of the kernel's thread range, if it has one."""
        found = {p.role.which: p for p in self.params if isinstance(p.role, RangeBound)}
        return (found["begin"], found["end"]) if len(found) == 2 else None


Node = Union[Expr, Stmt, Function, Param]


def _print(node: object) -> str:
    from tensoralg.ir.printer import format_node

    return format_node(node)


# Every IR value prints as the printer shows it (``print(fn)`` gives the whole kernel).
for _node_class in (Const, Var, Load, Unary, Binary, Select, Cast, Block, Declare, Assign, Store,
                    For, While, If, Comment, Allocate, Grow, Free, Param, Function):
    _node_class.__str__ = _print  # type: ignore[method-assign]
