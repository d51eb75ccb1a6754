"""From a statement with placed reductions to a ``Program`` of concrete loop nests.

Steps, each a small pure function:

1. ``rename_reductions``: give every ``Reduce`` its own index name, so that hoisting two sums
   over ``j`` cannot capture each other.
2. ``extract_diagonals``: an access that repeats an index (``A(i,i)``) becomes a dense temporary
   ``t(i) = A(i,i)`` computed by its own nest (which filters coordinates), so lattices only
   ever see accesses with distinct indices.
3. ``split_terms``: for a dense output, ``b + c - d`` becomes three nests accumulating into the
   same output; for a sparse output the statement stays whole.
4. ``hoist``: sums reachable from the top through products, negations and numerators over a
   nonzero constant are hoisted into the loop nest (``alpha * sum(j, x)`` is
   ``sum(j, alpha * x)``); any other sum (under ``+``, a function, a division by a tensor)
   becomes a dense temporary computed first.
5. ``choose_loop_order``: the best permutation of the nest's indices that iterates every sparse
   operand in its storage order and lets the output be written directly; when no permutation
   respects every operand, the fewest operands are converted to a matching mode order, and the
   program's notes say so.
6. ``strided_dense``: a dense operand that the chosen loops would read with a stride in their
   innermost loop, again and again under a loop over a compressed level (SDDMM's ``Y(k,j)``
   under ``i, j, k``), is converted to the mode order the loops follow, once per call, unless
   the user gave its format or a schedule fixed the loop order.
7. ``dense_order`` (nests whose operands and output are all dense, for a CPU backend): the
   order that reads every operand contiguously in the innermost loop and runs that loop over
   an output row inside a sum, inside another output loop (the register tile that the IR's
   tile and jam passes build); an operand it reads transposed is copied in its mode order per
   call, as in step 6, and the best order without copies is kept for calls that re-read the
   operand too little (a dot-product stack ``bqd,bkd->bqk`` runs ``b, q, d, k`` over ``B``
   transposed, or its dot products).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import numpy as np

from tensoralg.errors import CompileError, UnsupportedError
from tensoralg.formats.format import Format, dense
from tensoralg.formats.level import LevelKind
from tensoralg.lower.lattice import build_lattice
from tensoralg.lower.precompute import carry_out, workspace_indices
from tensoralg.lower.program import LoopNest, OutputMode, Program, TensorInfo, TensorRole
from tensoralg.notation.ast import (
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Expr,
    Literal,
    Mul,
    Neg,
    Reduce,
    Sub,
    accesses,
    free_indices,
)
from tensoralg.notation.canonical import canonical_text
from tensoralg.schedule import Precompute, Relayout

MAX_PERMUTED_INDICES = 8
# What a line of the output written with a stride in the innermost loop costs, against a line
# read so (``dense_score``): ``cba,cb,cab->abc`` ran 340 µs with its output written along c
# outermost, 42-48 with an input read so instead (float32, 24 x 24 x 100, two threads, ad hoc).
STRIDED_WRITE_COST = 3


@dataclass
class _Builder:
    """Mutable scratch state of one concretization: temporaries and notes collected on the way."""

    formats: dict[str, Format]
    index_dtypes: dict[str, np.dtype]
    temporaries: list[tuple[Access, Expr, tuple[str, ...]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)
    conversions: dict[Access, str] = field(default_factory=dict)   # of the nest being built
    aliases: dict[str, str] = field(default_factory=dict)          # alias -> source tensor
    # The statement's output indices: a temporary orders its modes like them, so that the loop
    # order that suits the output also walks the temporary in storage order.
    preferred: tuple[str, ...] = ()
    computed: dict[str, str] = field(default_factory=dict)   # canonical text -> temporary
    # Relative orders a schedule asks for (its reorder commands): each loop order must run
    # the named indices it holds in that order.
    orders: tuple[tuple[str, ...], ...] = ()
    cpu: bool = True          # for a CPU backend: all-dense nests take dense_order's loops
    # presum's temporaries -> the indices summed first into each: the compiler's choice, so
    # their nests follow only the reorders that name one of those indices
    summed_first: dict[str, frozenset[str]] = field(default_factory=dict)
    # A schedule's relayout commands: operand -> the indices its copy's levels run over
    relayouts: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def summed_temporary(self, indices: tuple[str, ...], expr: Expr,
                         reduced: tuple[str, ...]) -> Access:
        """:meth:`temporary` for ``presum``: ``reduced`` is summed into it first."""
        access = self.temporary(indices, expr, reduced)
        self.summed_first[access.tensor] = \
            self.summed_first.get(access.tensor, frozenset()) | frozenset(reduced)
        return access

    def temporary(self, indices: tuple[str, ...], expr: Expr, reduced: tuple[str, ...],
                  name: str | None = None) -> Access:
        """A dense temporary ``t(indices) = sum(reduced, expr)``, computed once: a statement
        that repeats a sum (ONNX's LeakyRelu of a product, ``where(s > 0, s, 0.1 * s)``) gets
        one temporary for every copy equal up to the names of its indices. ``name`` is a
        schedule's name for it (a precompute's workspace)."""
        total = expr
        for index in reversed(reduced):
            total = Reduce(index, total)
        key = canonical_text(Assignment(Access("t", indices), total))
        if key in self.computed:
            return Access(self.computed[key], indices)
        name = name or f"_t{next(self.counter)}"
        access = Access(name, indices)
        self.temporaries.append((access, expr, reduced))
        self.formats[name] = dense(len(indices))
        self.computed[key] = name
        return access


def _orders_for(out: Access, builder: _Builder) -> tuple[tuple[str, ...], ...]:
    """The reorders the nest computing ``out`` follows: all of them, except in the nest of a
    temporary that presum made, which follows those that name an index summed into it (a
    statement's printed schedule names its output nest's order, and the temporary's loops
    are then chosen as they were without it)."""
    first = builder.summed_first.get(out.tensor)
    if first is None:
        return builder.orders
    return tuple(order for order in builder.orders if first & set(order))


def concretize(stmt: Assignment, formats: dict[str, Format], index_dtypes: dict[str, np.dtype],
               value_dtype: np.dtype, out_format: Format | None,
               out_index_dtype: np.dtype = np.dtype(np.int64),
               orders: tuple[tuple[str, ...], ...] = (),
               precomputes: tuple[Precompute, ...] = (), cpu: bool = True,
               relayouts: tuple[Relayout, ...] = ()) -> Program:
    """Turn ``stmt`` (operands in ``formats``) into a ``Program`` of loop nests.

    ``out_format`` None means: infer the output format (DESIGN.md, "out_format"). ``orders``
    are a schedule's reorder commands: every nest runs the indices each names in that order;
    ``precomputes`` its precompute commands (``lower/precompute.py``). ``cpu``: the nests are
    for a CPU backend, whose all-dense nests take ``dense_order``'s loops (the CUDA mappings
    place loops on the grid their own way).
    """
    builder = _Builder(dict(formats), dict(index_dtypes), preferred=stmt.lhs.indices,
                       orders=orders, cpu=cpu,
                       relayouts={command.tensor: command.indices for command in relayouts})
    out = stmt.lhs

    def precomputed(indices: tuple[str, ...], node: Expr, name: str) -> Access:
        renamed = extract_diagonals(rename_reductions(node, set(free_indices(node))), builder)
        body, reduced = hoist(renamed, builder)
        return builder.temporary(indices, body, reduced, name)

    raw, whole = carry_out(stmt.rhs, out, precomputes, {a.tensor for a in accesses(stmt.rhs)},
                           precomputed)
    inferred = out_format is None
    if out_format is None:
        # Inference looks at the hoisted body; a scratch builder keeps its temporaries apart.
        scratch = _Builder(dict(builder.formats), dict(builder.index_dtypes),
                           preferred=stmt.lhs.indices)
        probe = extract_diagonals(rename_reductions(raw, set(out.indices)), scratch)
        body, reduced = hoist(probe, scratch)
        out_format = infer_output_format(out, body, reduced, scratch.formats)
    if whole is not None and out_format.is_dense:
        raw = precomputed(workspace_indices(raw, whole, out.indices), raw, whole.workspace)
        whole = None
    rhs = extract_diagonals(rename_reductions(raw, set(out.indices)), builder)
    result_format = None
    if not out_format.is_dense:
        direct = _direct_output_format(out_format)
        if inferred and direct != out_format:
            result_format = out_format
            builder.notes.append(f"the output is assembled as {direct.spec} and converted to "
                                 f"{out_format.spec}, the inferred format, after the kernel")
        out_format = direct
    terms = split_terms(rhs) if out_format.is_dense else [rhs]
    bodies = [hoist(term, builder) for term in terms]
    if cpu and out_format.is_dense:
        bodies = [presum(body, reduced, builder, out.indices) for body, reduced in bodies]
    nests: list[LoopNest] = []
    # Temporaries are created while hoisting; compute them first, in creation order.
    for access, expr, reduced in builder.temporaries:
        nests.append(_nest(access, expr, reduced, dense(len(access.indices)), builder))
    for body, reduced in bodies:
        nests.append(_nest(out, body, reduced, out_format, builder))
    if not out_format.is_dense and nests[-1].mode is None:
        nests[-1], out_format = _reorder_output(nests[-1], out_format, builder)
    if whole is not None:
        nests[-1] = _row_workspace(nests[-1], out_format, whole)
    inputs = set(formats) | set(builder.aliases)
    tensors = [TensorInfo(name, builder.formats[name], builder.index_dtypes.get(
        name, np.dtype(np.int64)), TensorRole.INPUT if name in inputs else TensorRole.TEMPORARY,
        _dims_of(name, nests)) for name in _tensor_names(nests) if name != out.tensor]
    tensors.append(TensorInfo(out.tensor, out_format, out_index_dtype, TensorRole.OUTPUT,
                              out.indices))
    return Program(tuple(nests), tuple(tensors), value_dtype, tuple(builder.notes),
                   tuple(builder.aliases.items()), result_format)


def _reorder_output(nest: LoopNest, wanted: Format, builder: _Builder) -> tuple[LoopNest, Format]:
    """A sparse output that no loop order can assemble in ``wanted``'s mode order.

    The output is assembled in the mode order of the loop order instead (the runtime converts it
    afterwards); if even that is impossible, it is computed densely and compressed afterwards.
    """
    out, order = nest.output, nest.loop_order
    modes = sorted(range(len(out.indices)), key=lambda m: order.index(out.indices[m]))
    produced = Format(wanted.levels, order=modes)
    mode = output_mode(order, out, produced, nest.reduced)
    if mode is not None:
        builder.notes.append(f"the output is assembled as {produced.spec} with mode order "
                             f"{tuple(modes)} (the order the loops visit it) and converted to "
                             f"{wanted} afterwards")
        return replace(nest, mode=mode), produced
    builder.notes.append(f"the output cannot be assembled as {wanted} in any loop order; it is "
                         f"computed densely and compressed afterwards")
    return replace(nest, mode=OutputMode.DENSE), dense(len(out.indices))


def _row_workspace(nest: LoopNest, fmt: Format, command: Precompute) -> LoopNest:
    """The output nest of ``precompute(<whole right side>, j)`` for a sparse output: each row
    accumulates in a dense workspace over ``j``, the output's last stored index, and is then
    compressed into the output (loops that append in order can do that too)."""
    last = nest.output.indices[fmt.order[-1]]
    if command.indices != (last,):
        raise CompileError(f"{command}: the output {nest.output} is stored as {fmt}; a "
                           f"workspace for the whole right side holds one row of it, over its "
                           f"last stored index: precompute('{command.expr}', {last})")
    if nest.mode not in (OutputMode.APPEND, OutputMode.WORKSPACE):
        raise CompileError(f"{command}: the loops run {', '.join(nest.loop_order)}, which "
                           f"cannot assemble {nest.output} as {fmt} row by row; reorder so "
                           f"that the output's other indices run before every sum")
    return replace(nest, mode=OutputMode.WORKSPACE)


def _tensor_names(nests: list[LoopNest]) -> list[str]:
    names: dict[str, None] = {}
    for nest in nests:
        for access in accesses(nest.expr):
            names.setdefault(access.tensor, None)
        names.setdefault(nest.output.tensor, None)
    return list(names)


def _dims_of(name: str, nests: list[LoopNest]) -> tuple[str, ...]:
    for nest in nests:
        for access in [nest.output, *accesses(nest.expr)]:
            if access.tensor == name:
                return access.indices
    raise KeyError(name)


# ---------------------------------------------------------------------------------------------
# 1-4: expression rewriting


def rename_reductions(expr: Expr, taken: set[str]) -> Expr:
    """Rename every reduced index that is already in use so each ``Reduce`` has its own name."""
    used = set(taken)
    for access in accesses(expr):
        used.update(access.indices)

    def fresh(name: str) -> str:
        k = 1
        while f"{name}{k}" in used:
            k += 1
        used.add(f"{name}{k}")
        return f"{name}{k}"

    seen: set[str] = set(taken)

    def visit(node: Expr, mapping: dict[str, str]) -> Expr:
        match node:
            case Access(tensor, indices):
                return Access(tensor, tuple(mapping.get(i, i) for i in indices))
            case Literal():
                return node
            case Neg(x):
                return Neg(visit(x, mapping))
            case Add(a, b) | Sub(a, b) | Mul(a, b) | Div(a, b):
                return type(node)(visit(a, mapping), visit(b, mapping))
            case Call(func, args):
                return Call(func, tuple(visit(a, mapping) for a in args))
            case Reduce(index, body):
                name = fresh(index) if index in seen else index
                seen.add(name)
                return Reduce(name, visit(body, {**mapping, index: name}))
        raise TypeError(node)

    return visit(expr, {})


def extract_diagonals(expr: Expr, builder: _Builder) -> Expr:
    """Replace each access with a repeated index by a temporary holding its diagonal."""
    match expr:
        case Access(_, indices) if len(set(indices)) < len(indices):
            unique = tuple(dict.fromkeys(indices))
            note = f"{expr} reads a diagonal: it is gathered into a dense temporary first"
            if note not in builder.notes:
                builder.notes.append(note)
            return builder.temporary(unique, expr, ())
        case Access() | Literal():
            return expr
        case Neg(x):
            return Neg(extract_diagonals(x, builder))
        case Add(a, b) | Sub(a, b) | Mul(a, b) | Div(a, b):
            return type(expr)(extract_diagonals(a, builder), extract_diagonals(b, builder))
        case Call(func, args):
            return Call(func, tuple(extract_diagonals(a, builder) for a in args))
        case Reduce(index, body):
            return Reduce(index, extract_diagonals(body, builder))
    raise TypeError(expr)


def split_terms(expr: Expr) -> list[Expr]:
    """The top-level additive terms of ``expr``, subtracted ones negated."""
    match expr:
        case Add(a, b):
            return split_terms(a) + split_terms(b)
        case Sub(a, b):
            return split_terms(a) + [_negate(t) for t in split_terms(b)]
    return [expr]


def _negate(expr: Expr) -> Expr:
    return expr.operand if isinstance(expr, Neg) else Neg(expr)


def hoist(expr: Expr, builder: _Builder) -> tuple[Expr, tuple[str, ...]]:
    """Pull sums out through products; any other sum becomes a temporary.

    Returns the reduction-free body and the hoisted reduction indices (outermost first).
    """
    match expr:
        case Reduce(index, body):
            inner, reduced = hoist(body, builder)
            return inner, (index, *reduced)
        case Mul(a, b):
            left, red_a = hoist(a, builder)
            right, red_b = hoist(b, builder)
            return Mul(left, right), red_a + red_b
        case Neg(a):
            inner, reduced = hoist(a, builder)
            return Neg(inner), reduced
        case Div(a, Literal(value)) if value != 0:
            # Only over a nonzero constant: sum(j, A(i,j)) / d(i) is not sum(j, A(i,j) / d(i)),
            # which gives NaN where d(i) = 0 (0 / 0 for the zeros summed) and makes a sparse A
            # dense (the quotient of an unstored zero is no zero). Below, the numerator's sum
            # becomes a temporary, computed first, as written.
            numerator, reduced = hoist(a, builder)
            return Div(numerator, Literal(value)), reduced
        case _:
            return _materialize(expr, builder), ()


def presum(body: Expr, reduced: tuple[str, ...], builder: _Builder,
           out_indices: tuple[str, ...] = ()) -> tuple[Expr, tuple[str, ...]]:
    """``body`` (summed over ``reduced``) with each dense factor of a product summed first over
    the indices no other factor holds: ``sum(a, sum(b, x(d) * Y(d,a,b,c)))`` becomes
    ``x(d) * t(d,c)`` with ``t(d,c) = sum(a, sum(b, Y(d,a,b,c)))``, a temporary computed by
    its own nest. The product's loops then run once per value of the other indices instead of
    once per value of all of them (NumPy's ``einsum_path`` sums such indices first, too);
    the temporary holds fewer values than the factor it sums.

    Only products of accesses (and constants) are rewritten, only when the product keeps
    another factor, and only where it pays. A sparse factor is summed first where the others
    hold an index it lacks and at most one of its indices is left (the temporary is dense). A
    dense one: the product's loops would re-read the factor (the
    others hold an index it does not), or no loop order could read the factor along its last
    axis, an output index, and write the output (``out_indices``) along its own last axis;
    anything else is returned as it is (``bca,c->cb`` reads X once either way, and two nests
    that start with different loops run on one thread).

    >>> from tensoralg.notation import parse_statement
    >>> builder = _Builder({"x": dense(1), "Y": dense(4)}, {})
    >>> stmt = parse_statement("Z(c,d) = x(d) * Y(d,a,b,c)")
    >>> body, reduced = presum(*hoist(stmt.rhs, builder), builder, ("c", "d"))
    >>> body, reduced, builder.temporaries[0][2]
    (Mul(lhs=Access(tensor='x', indices=('d',)), rhs=Access(tensor='_t0', indices=('d', 'c'))), (), ('a', 'b'))
    """
    leaves: list[Expr] = []

    def flatten(node: Expr) -> bool:
        match node:
            case Mul(a, b):
                return flatten(a) and flatten(b)
            case Access() if node.tensor in builder.formats:
                leaves.append(node)
                return True
            case Literal():
                leaves.append(node)
                return True
        return False

    if not reduced or not flatten(body) or \
            sum(isinstance(leaf, Access) for leaf in leaves) < 2:
        return body, reduced
    summed: dict[Access, Expr] = {}
    gone: set[str] = set()        # the indices summed inside a factor
    for leaf in leaves:
        if not isinstance(leaf, Access) or leaf in summed:
            continue
        others = {i for other in leaves if other is not leaf and isinstance(other, Access)
                  for i in other.indices}
        alone = tuple(r for r in reduced if r in leaf.indices and r not in others)
        # it pays where the product's loops re-read the factor (an index it does not hold),
        # or where they could not read it in its storage order and write the output so
        # (its last index is the output's, but not the output's last: d,dabc->cd)
        if not alone:
            continue
        kept = tuple(i for i in leaf.indices if i not in alone)
        fmt = builder.formats[leaf.tensor]
        if not fmt.is_dense:
            # A sparse factor summed first costs one pass over its entries and a dense
            # temporary over at most one index (as large as that dimension, whatever the
            # density: no more); the product's loops would otherwise co-iterate its levels
            # once per value of the others' indices (bc,ba->a over two CSC matrices visited
            # 200 x 2000 column pairs: 3.6 ms, against ~10 us summed first).
            if others - set(leaf.indices) and len(kept) <= 1:
                summed[leaf] = builder.summed_temporary(kept, leaf, alone)
                gone.update(alone)
            continue
        last = leaf.indices[fmt.order[-1]]
        if others - set(leaf.indices) or last in out_indices and last != out_indices[-1]:
            summed[leaf] = builder.summed_temporary(kept, leaf, alone)
            gone.update(alone)
    if not summed:
        return body, reduced

    def rebuilt(node: Expr) -> Expr:
        if isinstance(node, Mul):
            return Mul(rebuilt(node.lhs), rebuilt(node.rhs))
        return summed.get(node, node)  # type: ignore[arg-type]

    return rebuilt(body), tuple(r for r in reduced if r not in gone)


def _materialize(expr: Expr, builder: _Builder) -> Expr:
    """``expr`` with every sum inside it replaced by a temporary."""
    match expr:
        case Reduce():
            body, reduced = hoist(expr, builder)
            seen = [i for i in dict.fromkeys(
                idx for a in accesses(body) for idx in a.indices) if i not in reduced]
            lhs = builder.preferred
            free = sorted(seen, key=lambda i: (0, lhs.index(i)) if i in lhs
                          else (1, seen.index(i)))
            return builder.temporary(tuple(free), body, reduced)
        case Access() | Literal():
            return expr
        case Neg(x):
            return Neg(_materialize(x, builder))
        case Add(a, b) | Sub(a, b) | Mul(a, b) | Div(a, b):
            return type(expr)(_materialize(a, builder), _materialize(b, builder))
        case Call(func, args):
            return Call(func, tuple(_materialize(a, builder) for a in args))
    raise TypeError(expr)


# ---------------------------------------------------------------------------------------------
# Output format


def sparse_iterators(expr: Expr, index: str, formats: dict[str, Format]) -> list[Access]:
    """Accesses of ``expr`` whose level storing ``index`` is sparse."""
    result = []
    for access in dict.fromkeys(accesses(expr)):
        if index in access.indices:
            fmt = formats[access.tensor]
            level = fmt.level_of_mode(access.indices.index(index))
            if fmt.levels[level].is_sparse:
                result.append(access)
    return result


def infer_output_format(out: Access, body: Expr, reduced: tuple[str, ...],
                        formats: dict[str, Format]) -> Format:
    """DESIGN.md's rule: an output level is compressed when no point of its lattice is dense.

    Levels follow the loop order the statement would use; order-0 and order-1 results, and
    results with only dense levels, are dense.
    """
    rank = len(out.indices)
    if rank <= 1:
        return dense(rank)
    # The operands as the kernel reads them: an access no loop order can iterate in its
    # storage order is converted first (``_convert``), and its converted levels decide. So
    # ``A(i,j) + A(j,i)`` on a CSR ``A`` is a union of two compressed rows, a CSR result,
    # not a dense one (which on a large matrix would not even fit in memory).
    probe = _Builder(dict(formats), {})
    order, _ = choose_loop_order(out, body, reduced, None, probe)
    read = _rename_accesses(body, probe.conversions)
    kinds = {}
    for index in out.indices:
        lattice = build_lattice(index, read, sparse_iterators(read, index, probe.formats))
        kinds[index] = LevelKind.DENSE if lattice.dense else LevelKind.COMPRESSED
    if all(kind is LevelKind.DENSE for kind in kinds.values()):
        return dense(rank)
    stored = sorted(range(rank), key=lambda mode: order.index(out.indices[mode]))
    return Format([kinds[out.indices[m]] for m in stored], order=stored)


def _direct_output_format(fmt: Format) -> Format:
    """The closest format the lowering assembles directly: dense levels, then compressed ones.

    Non-unique and singleton levels (COO) and dense levels below a compressed one become
    compressed; the runtime converts the result to the requested format afterwards.
    """
    kinds, seen_sparse = [], False
    for kind in fmt.levels:
        seen_sparse = seen_sparse or kind.is_sparse
        kinds.append(LevelKind.COMPRESSED if seen_sparse else LevelKind.DENSE)
    return Format(kinds, order=fmt.order)


# ---------------------------------------------------------------------------------------------
# 5: loop order


def _level_indices(access: Access, fmt: Format) -> list[str]:
    return [access.indices[mode] for mode in fmt.order]


def respects(order: tuple[str, ...], access: Access, fmt: Format) -> bool:
    """Whether ``order`` visits every sparse level of ``access`` after the levels above it."""
    indices = _level_indices(access, fmt)
    for level, kind in enumerate(fmt.levels):
        if kind.is_sparse:
            here = order.index(indices[level])
            if any(order.index(above) > here for above in indices[:level]):
                return False
    return True


def output_mode(order: tuple[str, ...], out: Access, fmt: Format,
                reduced: tuple[str, ...]) -> OutputMode | None:
    """How a nest with this loop order can write an output in ``fmt`` (None: it cannot)."""
    if fmt.is_dense:
        return OutputMode.DENSE
    positions = [order.index(i) for i in _level_indices(out, fmt)]
    if positions != sorted(positions):
        return None
    first_reduction = min((order.index(r) for r in reduced), default=len(order))
    if all(p < first_reduction for p in positions):
        return OutputMode.APPEND
    if all(p < first_reduction for p in positions[:-1]):
        return OutputMode.WORKSPACE
    return None


def _inversions(order: tuple[str, ...], access: Access, fmt: Format) -> int:
    indices = _level_indices(access, fmt)
    return sum(1 for a, b in itertools.combinations(indices, 2)
               if a != b and order.index(a) > order.index(b))


def _score(order, out, out_format, body, reduced, formats):
    mode = output_mode(order, out, out_format, reduced) if out_format else (
        OutputMode.APPEND if all(order.index(r) > max(
            (order.index(i) for i in out.indices), default=-1) for r in reduced)
        else OutputMode.WORKSPACE)
    rank = {OutputMode.DENSE: 0, OutputMode.APPEND: 0, OutputMode.WORKSPACE: 1, None: 2}[mode]
    inversions = sum(_inversions(order, a, formats[a.tensor]) for a in set(accesses(body)))
    if out_format is not None:
        inversions += _inversions(order, out, out_format)
    late_outputs = sum(1 for r in reduced for o in out.indices if order.index(r) < order.index(o))
    return (rank, inversions, late_outputs), mode


def _candidate_orders(indices: tuple[str, ...], leads: tuple[tuple[str, ...], ...] = (),
                      orders: tuple[tuple[str, ...], ...] = ()):
    """Every loop order, up to ``MAX_PERMUTED_INDICES`` indices (8! = 40320 to score).

    Past that (an einsum may name 52 indices) the orders scored are a few natural ones: the
    indices as written (output first), and each of ``leads`` (an operand's storage order, a
    schedule's reorder) first with the rest as written, each also with the rest reversed.
    Every compressed operand is then iterated in storage order by at least one candidate when
    they agree, and converted otherwise, as with fewer indices."""
    if len(indices) <= MAX_PERMUTED_INDICES:
        return itertools.permutations(indices)
    candidates = [indices]
    for lead in (*leads, *orders):
        head = tuple(dict.fromkeys(i for i in lead if i in indices))
        rest = tuple(i for i in indices if i not in head)
        candidates += [head + rest, head + rest[::-1]]
    if orders:       # a schedule's reorders, all at once, in the order given
        head = tuple(dict.fromkeys(i for lead in orders for i in lead if i in indices))
        candidates.append(head + tuple(i for i in indices if i not in head))
    return list(dict.fromkeys(candidates))


def _storage_orders(body: Expr, formats: dict[str, Format]) -> tuple[tuple[str, ...], ...]:
    """The order each access's levels store its indices, sparse operands first."""
    found = dict.fromkeys(accesses(body))
    ranked = sorted(found, key=lambda a: formats[a.tensor].is_dense)
    return tuple(tuple(a.indices[m] for m in formats[a.tensor].order) for a in ranked)


def choose_loop_order(out: Access, body: Expr, reduced: tuple[str, ...],
                      out_format: Format | None, builder: _Builder
                      ) -> tuple[tuple[str, ...], OutputMode | None]:
    """The best loop order for one nest; converts operands when none respects all of them.

    Converted accesses are renamed to an alias tensor ``<name>__<order>`` whose format has the
    same level kinds in a mode order that the chosen loop order respects.
    """
    indices = tuple(dict.fromkeys([*out.indices, *[i for a in accesses(body)
                                                    for i in a.indices], *reduced]))
    sparse = [a for a in dict.fromkeys(accesses(body))
              if not builder.formats[a.tensor].is_dense]
    if builder.orders:
        return _scheduled_order(indices, out, body, reduced, out_format, sparse, builder)
    for count in range(len(sparse) + 1):
        best = None
        for relaxed in itertools.combinations(sparse, count):
            for order in _candidate_orders(indices, _storage_orders(body, builder.formats)):
                if not all(respects(order, a, builder.formats[a.tensor])
                           for a in sparse if a not in relaxed):
                    continue
                score, mode = _score(order, out, out_format, body, reduced, builder.formats)
                if best is None or score < best[0]:
                    best = (score, order, mode, relaxed)
        if best is not None:
            _, order, mode, relaxed = best
            for access in relaxed:
                _convert(access, order, builder)
            return order, mode
    raise UnsupportedError(f"no loop order found for {out} = ...")  # unreachable: count=len


def dense_order(out: Access, body: Expr, reduced: tuple[str, ...], out_format: Format,
                builder: _Builder, convert: bool = True
                ) -> tuple[tuple[str, ...], list[Access]]:
    """The best loop order for a nest whose operands and output are all dense, and the
    operands to store transposed for it (``convert``: the compiler may; see ``dense_score``).

    >>> from tensoralg.notation import parse_statement
    >>> stmt = parse_statement("C(b,q,k) = A(b,q,d) * B(b,k,d)")
    >>> builder = _Builder({"A": dense(3), "B": dense(3)}, {})
    >>> order, moved = dense_order(stmt.lhs, stmt.rhs.body, ("d",), dense(3), builder)
    >>> order, [str(a) for a in moved]
    (('b', 'q', 'd', 'k'), ['B(b,k,d)'])
    >>> dense_order(stmt.lhs, stmt.rhs.body, ("d",), dense(3), builder, convert=False)[0]
    ('b', 'q', 'k', 'd')
    """
    indices = tuple(dict.fromkeys([*out.indices, *[i for a in accesses(body)
                                                    for i in a.indices], *reduced]))
    best = None
    for order in _candidate_orders(indices, _storage_orders(body, builder.formats)):
        score, moved = dense_score(order, out, out_format, body, reduced, builder, convert)
        if best is None or score < best[0]:
            best = (score, order, moved)
    assert best is not None
    return best[1], best[2]


def dense_score(order: tuple[str, ...], out: Access, out_format: Format, body: Expr,
                reduced: tuple[str, ...], builder: _Builder, convert: bool = True
                ) -> tuple[tuple[int, ...], list[Access]]:
    """How well ``order`` runs an all-dense nest (lower is better), and the operands it reads
    transposed, in order of importance:

    1. accesses read with a stride in the innermost loop (each iteration a new cache line),
       each by the loops swept before its line is used again (those inside the loop along its
       rows; a written line ``STRIDED_WRITE_COST`` times a read one); an operand the compiler
       may lay out (``layout_free``) and that the loops read again for another index's every
       value is copied in the loops' mode order instead (``convert``);
    2. whether the innermost loop runs over an output index inside a sum, inside an output
       loop: the register tile's form (``ir/passes/tile.py``: the output strip stays in
       registers across the sum, and the jam pass runs several rows of it at once, each load
       of the other operand feeding them all), against a dot product (the sum innermost, one
       output element at a time) or an outer product (the output reloaded); without an
       output loop to jam (``bi,ij,bj->b``), or with one that the strip's operand depends on
       (``abcd,cdef->abef`` jamming ``e``), a strip loads an operand per multiply-add, as a
       dot product does, and is no gain;
    3. the operands copied;
    4. for a tile, sums run outside output loops other than the innermost (each reloads the
       tile: the matrix product's order is the output's rows, the sums, then its row);
       without one, the operands' storage order decides (a sum over axes streams through its
       operand);
    5. the storage-order inversions, first of the accesses the innermost loop streams through
       (``c,dabc->abd`` runs ``d, a, b, c`` along ``Y``, not the output's ``a, b, d, c``), and
       the sums run before output indices, as for any nest (``_score``).

    A dot-product stack ``bqd,bkd->bqk`` thus runs ``b, q, d, k`` with ``B`` transposed (its
    rows each re-read for every ``q``): 4-5x the dot products' speed from 32 rows, measured;
    the runtime copies only where the loops re-read it enough (``api.copies_pay``) and runs
    the order chosen with ``convert=False`` otherwise (``LoopNest.kept_order``).
    """
    inner = order[-1] if order else None
    temporaries = {access.tensor for access, _, _ in builder.temporaries}
    read = list(dict.fromkeys(accesses(body)))
    strided, moved = 0, []
    for access in (*read, out):
        fmt = out_format if access is out else builder.formats[access.tensor]
        if inner not in access.indices or access.indices[fmt.order[-1]] == inner:
            continue
        if convert and access is not out and access.tensor not in temporaries and \
                layout_free(fmt) and any(i not in access.indices for i in order):
            moved.append(access)
        else:
            # the loops between the innermost and the one along the access's rows: each is
            # swept before a line is used again (a written line, thrice the cost of a read)
            between = len(order) - 1 - order.index(access.indices[fmt.order[-1]])
            strided += between * (STRIDED_WRITE_COST if access is out else 1)
    # ... inside an output loop whose rows the jam pass runs together, sharing each load of
    # the operands read along the strip (they must not depend on that loop's index)
    rows = [index for index in order[:-1] if index in out.indices]
    tiled = inner in out.indices and len(order) >= 2 and order[-2] in reduced and \
        bool(rows) and not any(rows[-1] in a.indices and inner in a.indices for a in read)
    # sums run outside an output loop other than the innermost: the tile is reloaded for each
    late_outer = sum(1 for r in reduced for o in out.indices
                     if o != inner and order.index(r) < order.index(o))
    # storage-order inversions, first of the accesses the innermost loop streams through
    inner_inversions = outer_inversions = 0
    for access in (*read, out):
        if access in moved:
            continue
        count = _inversions(order, access,
                            out_format if access is out else builder.formats[access.tensor])
        if inner in access.indices:
            inner_inversions += count
        else:
            outer_inversions += count
    late_outputs = sum(1 for r in reduced for o in out.indices
                       if order.index(r) < order.index(o))
    return (strided, int(not tiled), len(moved), late_outer if tiled else 0, inner_inversions,
            outer_inversions, late_outputs), moved


def follows(order: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """Whether ``order`` runs the indices of ``wanted`` that it holds in ``wanted``'s order.

    >>> follows(("i", "k", "j"), ("i", "j")), follows(("j", "i"), ("i", "j", "x"))
    (True, False)
    """
    held = [index for index in wanted if index in order]
    return [index for index in order if index in held] == held


def _scheduled_order(indices: tuple[str, ...], out: Access, body: Expr,
                     reduced: tuple[str, ...], out_format: Format | None, sparse: list[Access],
                     builder: _Builder) -> tuple[tuple[str, ...], OutputMode | None]:
    """The best loop order among those a schedule's reorder commands allow.

    A scheduled order must still iterate every compressed operand in its storage order: the
    loops would otherwise have to search each coordinate. When no allowed order can, the
    schedule is refused, naming the operand, rather than converting the operand on every call
    as the unscheduled choice would.
    """
    allowed = [order for order in _candidate_orders(indices, _storage_orders(
        body, builder.formats), builder.orders)
               if all(follows(order, wanted) for wanted in builder.orders)]
    best = None
    for order in allowed:
        if all(respects(order, a, builder.formats[a.tensor]) for a in sparse):
            score, mode = _score(order, out, out_format, body, reduced, builder.formats)
            if best is None or score < best[0]:
                best = (score, order, mode)
    if best is not None:
        return best[1], best[2]
    asked = "; ".join(f"reorder({', '.join(w)})" for w in builder.orders)
    order = allowed[0] if allowed else indices
    blocking = [a for a in sparse if not respects(order, a, builder.formats[a.tensor])]
    named = blocking[0] if blocking else sparse[0]
    fmt = builder.formats[named.tensor]
    stored = ", ".join(_level_indices(named, fmt))
    raise CompileError(
        f"{asked}: the loops of {out} = ... would run {', '.join(order)}, but operand "
        f"{named.tensor} is stored as {fmt} (its levels run {stored}), and a compressed level "
        f"can only be iterated after the levels above it; store {named.tensor} in a mode order "
        f"that matches (formats=...) or reorder differently")


def _convert(access: Access, order: tuple[str, ...], builder: _Builder,
             why: str | None = None) -> None:
    """Read ``access`` from an alias of its tensor stored in the mode order ``order`` visits,
    converted by the runtime before the kernel runs; ``why`` is the note's reason."""
    fmt = builder.formats[access.tensor]
    modes = sorted(range(len(access.indices)), key=lambda m: order.index(access.indices[m]))
    target = Format(fmt.levels, order=modes)
    alias = f"{access.tensor}__{''.join(map(str, modes))}"
    why = why or "which no valid loop order can iterate together with the other operands"
    if alias not in builder.aliases:     # a second nest reading it the same way: one note
        builder.notes.append(
            f"operand {access.tensor} is stored as {fmt}, {why}; it is converted to "
            f"{target.spec} with mode order {tuple(modes)} before the kernel runs")
    builder.formats[alias] = target
    builder.index_dtypes[alias] = builder.index_dtypes.get(access.tensor, np.dtype(np.int64))
    builder.conversions[access] = alias
    builder.aliases[alias] = access.tensor


def layout_free(fmt: Format) -> bool:
    """Whether the compiler may pick this operand's mode order: dense in the natural order the
    API gives an operand it was told nothing about (``dense(rank)``, named so). A format the
    user wrote (``"dd"``, ``ta.Format("dd", order=...)``) carries no such name and is kept.

    >>> layout_free(dense(2)), layout_free(Format("dd")), layout_free(Format("ds"))
    (True, False, False)
    """
    return fmt.is_dense and fmt.is_identity_order and fmt.rank >= 2 and \
        fmt.name == dense(fmt.rank).name


def strided_dense(order: tuple[str, ...], body: Expr, builder: _Builder) -> list[Access]:
    """Dense operands that the loops in ``order`` read with a stride in the innermost loop,
    again and again, and that the compiler may store transposed (``layout_free``).

    The innermost index must be one of the operand's modes but not its last stored one (each
    iteration then touches a new cache line), some loop must iterate a compressed level
    (a dense-only statement keeps its layout: the dense GEMM path tiles it instead), and some
    loop index must not address the operand, so that it is re-read for every value of that
    index: the reuse that pays for one transposed copy per call. SDDMM's ``Y(k,j)`` under
    ``i, j, k`` is one (re-read for every row ``i``); SpMM's ``B(k,j)`` under ``i, k, j`` is
    not (``j`` is stored last).
    """
    found = list(dict.fromkeys(accesses(body)))
    if not order or all(builder.formats[a.tensor].is_dense for a in found):
        return []
    temporaries = {access.tensor for access, _, _ in builder.temporaries}
    innermost = order[-1]
    result = []
    for access in found:
        fmt = builder.formats[access.tensor]
        if access.tensor in temporaries or access in builder.conversions or \
                not layout_free(fmt):
            continue
        stored_last = access.indices[fmt.order[-1]]
        reused = any(index not in access.indices for index in order)
        if innermost in access.indices and stored_last != innermost and reused:
            result.append(access)
    return result


def _nest(out: Access, body: Expr, reduced: tuple[str, ...], out_format: Format,
          builder: _Builder) -> LoopNest:
    every = builder.orders
    builder.orders = _orders_for(out, builder)
    try:
        return _one_nest(out, body, reduced, out_format, builder)
    finally:
        builder.orders = every


def _one_nest(out: Access, body: Expr, reduced: tuple[str, ...], out_format: Format,
              builder: _Builder) -> LoopNest:
    builder.conversions = {}
    body = _relaid(body, builder)
    if builder.cpu and _all_dense(out_format, body, builder):
        return _dense_nest(out, body, reduced, out_format, builder)
    order, mode = choose_loop_order(out, body, reduced, out_format, builder)
    # A schedule's reorder fixes the loops and, with them, the layouts it was measured with.
    body = _transposed(body, order, [] if builder.orders else strided_dense(order, body, builder),
                       builder)
    return LoopNest(out, body, order, mode)  # type: ignore[arg-type]  # None: see _reorder_output


def _relaid(body: Expr, builder: _Builder) -> Expr:
    """``body`` reading the operands a schedule's relayout commands name from copies whose
    levels run over the indices named, in that order (``_convert``)."""
    if not builder.relayouts:
        return body
    for access in dict.fromkeys(accesses(body)):
        wanted = builder.relayouts.get(access.tensor)
        if wanted is not None and sorted(access.indices) == sorted(wanted):
            _convert(access, wanted, builder,
                     f"and the schedule asks for relayout({access.tensor}, {', '.join(wanted)})")
    return _rename_accesses(body, builder.conversions) if builder.conversions else body


def _transposed(body: Expr, order: tuple[str, ...], strided: list[Access], builder: _Builder
                ) -> Expr:
    """``body`` reading each of ``strided`` (accesses ``order`` would read with a stride in its
    innermost loop) from a copy in the mode order ``order`` visits (``_convert``)."""
    for access in strided:
        again = ", ".join(index for index in order if index not in access.indices)
        _convert(access, order, builder,
                 f"which the loops ({', '.join(order)}) would read with a stride in their "
                 f"innermost loop over {order[-1]}, and again for every {again}")
    return _rename_accesses(body, builder.conversions) if builder.conversions else body


def _all_dense(out_format: Format, body: Expr, builder: _Builder) -> bool:
    return out_format.is_dense and all(builder.formats[a.tensor].is_dense
                                       for a in accesses(body))


def _dense_nest(out: Access, body: Expr, reduced: tuple[str, ...], out_format: Format,
                builder: _Builder) -> LoopNest:
    """The nest of an all-dense statement: ``dense_order``'s loops (or the best a schedule's
    reorders allow), with the operands they read transposed copied in their mode order; the
    best order without copies, where it reads every operand contiguously, is kept for calls
    that re-read those operands too little for the copy to pay (``api.copies_pay``)."""
    kept = None
    if builder.orders:
        order, _ = choose_loop_order(out, body, reduced, out_format, builder)
        _, moved = dense_score(order, out, out_format, body, reduced, builder)
    else:
        order, moved = dense_order(out, body, reduced, out_format, builder)
        if moved:
            # without copies: the best order, if it reads every operand contiguously (else the
            # same loops read the operands with a stride, as SDDMM's kept variant does)
            other, _ = dense_order(out, body, reduced, out_format, builder, convert=False)
            strided = dense_score(other, out, out_format, body, reduced, builder, False)[0][0]
            kept = other if strided == 0 else None
    body = _transposed(body, order, moved, builder)
    return LoopNest(out, body, order, OutputMode.DENSE, kept_order=kept)


def kept_layouts(program: Program, formats: dict[str, Format]) -> Program:
    """``program`` with every dense operand that ``strided_dense`` or ``dense_score``
    converted read in the layout it came in (``formats``, by operand), and no copy made before
    the kernel: with a stride, or, in an all-dense nest, in the loop order chosen without
    copies (``LoopNest.kept_order``: a dot-product stack's dot products).

    The variant for calls that read such an operand too few times for the copy to pay (an
    SDDMM whose matrix has fewer entries than columns, a dot-product stack with few rows:
    ``api.copies_pay``). Sparse conversions stay: no loop order reads those operands as stored.
    """
    dense = {alias: source for alias, source in program.conversions
             if program.tensor(alias).format.is_dense and formats[source].is_dense}
    if not dense:
        return program
    nests = tuple(replace(nest, expr=_rename_accesses(nest.expr, {
        access: dense[access.tensor] for access in accesses(nest.expr)
        if access.tensor in dense}), loop_order=nest.kept_order or nest.loop_order,
        kept_order=None) for nest in program.nests)
    tensors = tuple(replace(info, name=dense[info.name], format=formats[dense[info.name]])
                    if info.name in dense else info for info in program.tensors)
    sources = set(dense.values())
    notes = tuple(note for note in program.notes
                  if not any(note.startswith(f"operand {s} is stored as ") for s in sources))
    kept = ", ".join(sorted(sources))
    notes += (f"operand(s) {kept} read in their own layout: this call reads them too few "
              f"times for a copy in the loops' mode order to pay",)
    return replace(program, nests=nests, tensors=tensors, notes=notes,
                   conversions=tuple(c for c in program.conversions if c[0] not in dense))


def _rename_accesses(expr: Expr, aliases: dict[Access, str]) -> Expr:
    match expr:
        case Access(_, indices) if expr in aliases:
            return Access(aliases[expr], indices)
        case Access() | Literal():
            return expr
        case Neg(x):
            return Neg(_rename_accesses(x, aliases))
        case Add(a, b) | Sub(a, b) | Mul(a, b) | Div(a, b):
            return type(expr)(_rename_accesses(a, aliases), _rename_accesses(b, aliases))
        case Call(func, args):
            return Call(func, tuple(_rename_accesses(a, aliases) for a in args))
    raise TypeError(expr)


__all__ = ["concretize", "choose_loop_order", "infer_output_format", "output_mode", "respects",
           "hoist", "split_terms", "rename_reductions", "extract_diagonals", "layout_free",
           "strided_dense"]
