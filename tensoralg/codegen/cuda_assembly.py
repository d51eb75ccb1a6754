"""Sparse outputs on the GPU in two phases: count per row, exclusive scan, fill.

On the CPU a kernel with a CSR-like output (a dense level of rows, then a compressed level)
appends each row's entries to buffers it grows as it goes, keeping the running size in a local.
Threads cannot share one running size, so the GPU runs the same row loop twice, from two
functions made here from the CPU kernel's IR:

- ``count``: the row loop with every append reduced to counting. The row starts its size at 0,
  and where the CPU kernel stores the row's end in ``pos[i + 1]`` it stores the count in
  ``counts[i + 1]``; stores of coordinates and values, buffer growth and whatever only fed the
  values (a row workspace of products, say) are removed.
- the runtime scans ``counts`` in place (``counts[0] = 0``), so that ``counts[i]`` is where row
  ``i`` starts and ``counts[n]`` is the number of entries, and allocates ``pos``, ``crd`` and
  ``vals`` of exactly that size;
- ``fill``: the row loop with the row's size starting at ``offsets[i]`` (the scanned counts),
  appending into those buffers, which are now parameters; nothing grows.

Both keep everything else the row does (merging operands, workspace bitmaps), so the count of a
row is exactly what the fill writes.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.codegen.cuda_plan import flat, range_vars
from tensoralg.ir.nodes import (
    Allocate,
    Block,
    Cast,
    Const,
    Expr,
    For,
    Free,
    Function,
    Grow,
    Load,
    Node,
    Param,
    Ptr,
    RangeBound,
    Scalar,
    Stmt,
    Store,
    Var,
)
from tensoralg.ir.nodes import Assign as AssignStmt
from tensoralg.ir.passes.dead_code import remove_dead_code
from tensoralg.ir.rewrite import rewrite, used_vars, walk


@dataclass(frozen=True, slots=True)
class TwoPhase:
    """The count and fill functions of a kernel with a CSR-like output (module docstring).

    ``index`` and ``value`` are the scalar types of the output's pos/crd and vals arrays.
    """

    output: str
    count: Function
    fill: Function
    index: Scalar
    value: Scalar


@dataclass(frozen=True, slots=True)
class _Output:
    """Where the CPU kernel keeps its output: buffers by role suffix, and the size local."""

    tensor: str
    handles: dict[str, Param]       # "1.pos", "1.crd", "vals" -> the Ptr(Ptr) parameter
    buffers: dict[str, Var]         # the same keys -> the local buffer handed back
    size: Var
    sizes: Param


def sparse_output(fn: Function) -> _Output | str:
    """The output buffers of ``fn``, or why two phases cannot assemble them."""
    handles = {p.role.split(".", 1)[1]: p for p in fn.params if p.output and
               isinstance(p.var.dtype, Ptr) and isinstance(p.var.dtype.elem, Ptr)}
    sizes = next((p for p in fn.params if p.output and p.role.endswith(".sizes")), None)
    if not handles or sizes is None:
        return "its output is not a sparse tensor it assembles"
    tensor = sizes.role.rsplit(".", 1)[0]
    if set(handles) != {"1.pos", "1.crd", "vals"}:
        levels = sorted({key.split(".")[0] for key in handles if key != "vals"})
        return (f"its output {tensor} has compressed levels {', '.join(levels)}; the GPU "
                f"assembles only a matrix stored dense then compressed (CSR or CSC)")
    if range_vars(fn) is None:
        return f"its output {tensor} is not assembled row by row (no row loop)"
    handed = {}
    size = None
    for stmt in flat(fn.body):
        if isinstance(stmt, Store) and isinstance(stmt.value, Var):
            for key, param in handles.items():
                if stmt.array == param.var:
                    handed[key] = stmt.value
            if stmt.array == sizes.var and stmt.index == Const(1, stmt.index.dtype):
                size = stmt.value
    if set(handed) != set(handles) or size is None:
        return f"the kernel does not hand its output {tensor} back in the expected way"
    return _Output(tensor, handles, handed, size, sizes)


def two_phase(fn: Function) -> TwoPhase | str:
    """The count and fill functions of ``fn`` (module docstring), or why there are none.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> two_phase(Function("k", (), Block()))
    'its output is not a sparse tensor it assembles'
    """
    output = sparse_output(fn)
    if isinstance(output, str):
        return output
    used = {v.name for v in walk(fn) if isinstance(v, Var)}
    counts = Var(_fresh("counts", used), Ptr(Scalar.I64))
    offsets = Var(_fresh("offsets", used), Ptr(Scalar.I64))
    kept = [p for p in fn.params
            if p.var.name not in {h.var.name for h in output.handles.values()} and
            p != output.sizes]
    pos, crd, vals = (output.buffers[key] for key in ("1.pos", "1.crd", "vals"))
    assert isinstance(pos.dtype, Ptr) and isinstance(vals.dtype, Ptr)
    count = _rebuild(fn, output, [*kept, Param(counts, f"{output.tensor}.counts", True)],
                     row_start=Const(0, Scalar.I64), counts=counts)
    fill = _rebuild(fn, output, [*kept, Param(offsets, f"{output.tensor}.offsets"),
                                 Param(pos, f"{output.tensor}.1.pos", True),
                                 Param(crd, f"{output.tensor}.1.crd", True),
                                 Param(vals, f"{output.tensor}.vals", True)],
                    row_start=None, counts=None, offsets=offsets)
    index, value = pos.dtype.elem, vals.dtype.elem
    assert isinstance(index, Scalar) and isinstance(value, Scalar)
    return TwoPhase(output.tensor, count, fill, index, value)


def _rebuild(fn: Function, output: _Output, params: list[Param], row_start: Expr | None,
             counts: Var | None, offsets: Var | None = None) -> Function:
    """``fn`` as one of the phases: the row loop keeps its place, output buffers are not
    allocated, grown or handed back, and the epilogue keeps only its frees."""
    bounds = range_vars(fn)
    buffers = {v.name for v in output.buffers.values()}
    body: list[Stmt] = []
    seen_loop = False
    for stmt in flat(fn.body):
        if isinstance(stmt, For) and isinstance(stmt.stop, Var) and bounds is not None and \
                stmt.stop.name == bounds[1]:
            seen_loop = True
            start = row_start if offsets is None else Load(offsets, stmt.var)
            row = Block((AssignStmt(output.size, start), *stmt.body.body))
            body.append(For(stmt.var, stmt.start, stmt.stop, _phase(row, buffers, output, counts),
                            stmt.unroll, stmt.vectorize))
        elif not seen_loop:
            body.append(_phase(stmt, buffers, output, counts, prologue=True))
        elif isinstance(stmt, Free) and stmt.var.name not in buffers:
            body.append(stmt)
    phase = Function(f"{fn.name}_{'count' if counts is not None else 'fill'}", tuple(params),
                     Block(tuple(body)), fn.notes)
    phase = _clean(phase)
    needed = used_vars(phase.body)
    return Function(phase.name, tuple(p for p in phase.params
                                      if p.var.name in needed or isinstance(p.role, RangeBound)),
                    phase.body, phase.notes)


def _phase(node: Stmt, buffers: set[str], output: _Output, counts: Var | None,
           prologue: bool = False) -> Stmt:
    """Rewrite one statement tree for a phase (``counts`` set: the count phase)."""
    pos = output.buffers["1.pos"]

    def change(item: Node) -> Node | None:
        match item:
            case Allocate(var) | Grow(var) | Free(var) if var.name in buffers:
                return Block()
            case Store(array, index, value) if array.name in buffers and prologue:
                return Block()
            case Store(array, index, value) if counts is not None and array == pos:
                return Store(counts, index, _as_i64(value))
            case Store(array) if counts is not None and array.name in buffers:
                return Block()
        return None

    return rewrite(node, change)  # type: ignore[return-value]  # a statement stays one


def _as_i64(value: Expr) -> Expr:
    if isinstance(value, Cast) and value.operand.dtype == Scalar.I64:
        return value.operand
    return value if value.dtype == Scalar.I64 else Cast(value, Scalar.I64)


def _clean(fn: Function) -> Function:
    """Remove dead code, and local buffers that are written but never read (with all their
    writes), until nothing more goes."""
    while True:
        fn = remove_dead_code(fn)
        read = {x.array.name for x in walk(fn.body) if isinstance(x, Load)}
        dead = {s.var.name for s in walk(fn.body) if isinstance(s, Allocate)} - read

        def drop(item: Node) -> Node | None:
            match item:
                case Allocate(var) | Grow(var) | Free(var) if var.name in dead:
                    return Block()
                case Store(array) if array.name in dead:
                    return Block()
            return None

        if not dead:
            return fn
        new = rewrite(fn, drop)
        assert isinstance(new, Function)
        fn = new


def _fresh(base: str, used: set[str]) -> str:
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    return name


__all__ = ["TwoPhase", "sparse_output", "two_phase"]
