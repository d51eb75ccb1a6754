"""Contraction paths: in which order to contract the operands of an einsum, by a cost that
counts the nonzeros of sparse operands and of sparse intermediates.

``plan_contraction(subscripts, operands, optimize)`` returns a ``ContractionPlan`` (its steps,
their estimated costs, and a printable report); ``einsum_path`` answers as ``np.einsum_path``
does; ``contract_by_path`` runs a path, one callback per step.

The search is NumPy's. ``greedy`` contracts, step by step, the pair that removes the most
stored entries (ties go to the cheaper pair; outer products only when nothing else is left;
no intermediate larger than a memory limit, by default the largest operand or output).
``optimal`` tries every order of pairwise contractions and keeps the cheapest. On dense
operands the cost is NumPy's (dense sizes, its FLOP count), so the paths are NumPy's.

With a sparse operand the same searches run on estimates:

- a term stores ``size x density`` entries (a dense term: its size);
- a step over the indices ``U`` of its operands does ``size(U) x product of their densities``
  multiply-adds (the points where every factor is stored: the points a kernel that iterates
  the sparse levels visits), times NumPy's per-point factor;
- its result has density ``m x (1 - (1 - p) ** K)``: ``K`` is the number of summed points per
  output entry, ``p`` the product of the densities of the factors that have a summed index
  (nonzeros placed independently), ``m`` that of the others, which mask the result (SDDMM's
  sparse operand); it is stored sparse when it has two or more indices and each is an index
  of a sparse operand of the step (the rule of ``ta.einsum``'s output-format inference),
  otherwise dense, with density 1;
- one kernel over all operands competes with the best pairwise path and wins when it is
  cheaper: it never builds an intermediate (SDDMM, ``ij,ik,kj->ij`` with a sparse ``ij``,
  stays one step). ``optimal`` also tries fusing three or four operands into one step when
  one is sparse and the step's result is stored sparse.

Errors are ``ta.TensorAlgebraError`` subclasses that are also the exception NumPy raises for
the same mistake: ``ValueError`` for bad subscripts or shapes, ``TypeError`` for an ``optimize``
it cannot read, ``KeyError`` for an unknown algorithm, ``RuntimeError`` for a path that does
not contract every operand.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tensoralg.errors import InputError, NotationError, ShapeError
from tensoralg.notation import accesses, parse_einsum
from tensoralg.notation.interleaved import SYMBOLS, SubscriptTypeError, from_interleaved

# opt_einsum's algorithm names, all read as "auto": exhaustive for a few operands, else greedy
AUTO_NAMES = frozenset({"auto", "auto-hq", "branch-all", "branch-2", "branch-1", "eager",
                        "opportunistic", "dp", "dynamic-programming", "random-greedy",
                        "random-greedy-128"})
AUTO_OPTIMAL_MAX = 4        # opt_einsum's "auto" searches exhaustively up to four operands
FUSED_STEP_MAX = 4          # "optimal" tries fused steps of up to four operands (and all)


class PathTypeError(InputError, TypeError):
    """``optimize=`` is neither a bool, an algorithm's name, ``(name, memory_limit)`` nor a
    path."""


class UnknownPathError(InputError, KeyError):
    """``optimize=`` names no known algorithm."""

    __str__ = BaseException.__str__   # KeyError would print the message in quotes


class PathError(InputError, RuntimeError):
    """An explicit path with a bad step, or one that does not contract every operand."""


@dataclass(frozen=True, slots=True)
class OperandInfo:
    """What the cost needs of one operand: its shape and, when it is stored sparse, its
    stored entries.

    >>> OperandInfo((10, 10), nnz=5).density
    0.05
    """

    shape: tuple[int, ...]
    nnz: int | None = None

    @property
    def density(self) -> float:
        size = math.prod(self.shape)
        return 1.0 if self.nnz is None or size == 0 else min(1.0, self.nnz / size)


def operand_info(operand: Any) -> OperandInfo:
    """The shape of any operand einsum takes, and the stored entries of a sparse one (scipy,
    pydata ``sparse``, ``ta.Tensor``: whatever has ``nnz`` and is not a NumPy array).

    >>> operand_info(np.ones((2, 3)))
    OperandInfo(shape=(2, 3), nnz=None)
    """
    shape = getattr(operand, "shape", None)
    if shape is None:
        return OperandInfo(tuple(np.shape(operand)))
    nnz = getattr(operand, "nnz", None)
    if isinstance(operand, (np.ndarray, np.generic)) or not isinstance(nnz, (int, np.integer)):
        return OperandInfo(tuple(int(n) for n in shape))
    shape = tuple(int(n) for n in shape)
    return OperandInfo(shape, int(nnz) if int(nnz) < math.prod(shape) else None)


# ---------------------------------------------------------------------------------------------
# the cost model


@dataclass(frozen=True, slots=True)
class Term:
    """An operand or an intermediate during the search: its indices and estimated density."""

    indices: frozenset[str]
    density: float = 1.0
    sparse: bool = False


@dataclass(frozen=True, slots=True)
class Contraction:
    """Contracting some terms into one: the new term, its stored entries, the cost."""

    result: Term
    scope: frozenset[str]       # every index the step loops over
    removed: frozenset[str]     # the indices it sums away
    flops: int | float
    stored: int | float


def size_of(indices: Any, sizes: Mapping[str, int]) -> int:
    return math.prod(sizes[i] for i in indices)


def stored(term: Term, sizes: Mapping[str, int]) -> int | float:
    size = size_of(term.indices, sizes)
    return size * term.density if term.sparse else size


def contract(terms: Sequence[Term], positions: Sequence[int], output: frozenset[str],
             sizes: Mapping[str, int]) -> tuple[Contraction, list[Term]]:
    """Contract ``terms[positions]``: the contraction, and the terms left with the new one
    appended (NumPy's ``_find_contraction``, with densities)."""
    chosen = [terms[p] for p in positions]
    rest = [t for k, t in enumerate(terms) if k not in positions]
    scope = frozenset().union(*(t.indices for t in chosen))
    kept = scope & output.union(*(t.indices for t in rest))
    removed = scope - kept
    product = math.prod(t.density for t in chosen)
    factor = max(1, len(chosen) - 1) + (1 if removed else 0)     # NumPy's _flop_count
    flops = size_of(scope, sizes) * factor
    if product != 1.0:            # dense costs stay exact integers, as NumPy's
        flops *= product
    sparse_indices = frozenset().union(*(t.indices for t in chosen if t.sparse))
    sparse = len(kept) >= 2 and any(t.sparse for t in chosen) and kept <= sparse_indices
    result = Term(kept, _density(chosen, removed, sizes) if sparse else 1.0, sparse)
    return Contraction(result, scope, removed, flops, stored(result, sizes)), rest + [result]


def _density(chosen: Sequence[Term], removed: frozenset[str], sizes: Mapping[str, int]) -> float:
    """The estimated density of a step's result. A factor without a summed index is the same
    for every term of an output entry's sum: it masks the entry (SDDMM's sparse operand). The
    factors with one are nonzero together with probability ``p`` per term, independently
    over the ``K`` terms of the sum."""
    mask = math.prod(t.density for t in chosen if not t.indices & removed)
    p = math.prod(t.density for t in chosen if t.indices & removed)
    if not removed or p >= 1.0:
        return mask * p
    summed = size_of(removed, sizes)
    return mask * -math.expm1(summed * math.log1p(-p))


# ---------------------------------------------------------------------------------------------
# the searches (NumPy's _greedy_path and _optimal_path, over Terms)


@dataclass(slots=True)
class _Candidate:
    order: tuple[int | float, int | float]     # (-stored entries removed, flops)
    positions: tuple[int, int]
    terms: list[Term]
    flops: int | float


def greedy_path(terms: list[Term], output: frozenset[str], sizes: Mapping[str, int],
                memory_limit: int | float) -> list[tuple[int, ...]]:
    """NumPy's greedy search: the pair removing the most stored entries first.

    >>> greedy_path([Term(frozenset("ab")), Term(frozenset("bc")), Term(frozenset("c"))],
    ...             frozenset("a"), {"a": 4, "b": 4, "c": 4}, 16)
    [(1, 2), (0, 1)]
    """
    if len(terms) <= 2:
        return [tuple(range(len(terms)))]
    naive = contract(terms, range(len(terms)), output, sizes)[0].flops
    pairs: Any = itertools.combinations(range(len(terms)), 2)
    known: list[_Candidate] = []
    path: list[tuple[int, ...]] = []
    path_cost: int | float = 0
    for _ in range(len(terms) - 1):
        for positions in pairs:           # outer products are left for later
            if terms[positions[0]].indices.isdisjoint(terms[positions[1]].indices):
                continue
            _consider(known, positions, terms, output, sizes, memory_limit, path_cost, naive)
        if not known:
            for positions in itertools.combinations(range(len(terms)), 2):
                _consider(known, positions, terms, output, sizes, memory_limit, path_cost,
                          naive)
            if not known:        # nothing fits: one kernel for what is left
                path.append(tuple(range(len(terms))))
                break
        best = min(known, key=lambda c: c.order)
        known = _update_others(known, best)
        terms = best.terms
        newest = len(terms) - 1
        pairs = ((i, newest) for i in range(newest))
        path.append(best.positions)
        path_cost += best.flops
    return path


def _consider(known: list[_Candidate], positions: tuple[int, int], terms: list[Term],
              output: frozenset[str], sizes: Mapping[str, int], memory_limit: int | float,
              path_cost: int | float, naive: int | float) -> None:
    step, after = contract(terms, positions, output, sizes)
    if step.stored > memory_limit or path_cost + step.flops > naive:
        return
    removed = sum(stored(terms[p], sizes) for p in positions) - step.stored
    known.append(_Candidate((-removed, step.flops), positions, after, step.flops))


def _update_others(known: list[_Candidate], best: _Candidate) -> list[_Candidate]:
    """Carry the candidates that do not touch the pair just contracted to the next round,
    renumbered (their costs are not recomputed, as in NumPy)."""
    bx, by = best.positions
    kept = []
    for candidate in known:
        x, y = candidate.positions
        if x in best.positions or y in best.positions:
            continue
        terms = list(candidate.terms)
        del terms[by - int(by > x) - int(by > y)]
        del terms[bx - int(bx > x) - int(bx > y)]
        terms.insert(-1, best.terms[-1])
        moved = (x - int(x > bx) - int(x > by), y - int(y > bx) - int(y > by))
        kept.append(_Candidate(candidate.order, moved, terms, candidate.flops))
    return kept


def optimal_path(terms: list[Term], output: frozenset[str], sizes: Mapping[str, int],
                 memory_limit: int | float, fuse: bool = False) -> list[tuple[int, ...]]:
    """Every order of pairwise contractions, the cheapest kept (the first of equal ones, in
    NumPy's order); with ``fuse``, steps of three or four operands that include a sparse one
    and give a sparse result are tried too.

    >>> optimal_path([Term(frozenset("ab")), Term(frozenset("bc")), Term(frozenset("c"))],
    ...              frozenset("a"), {"a": 4, "b": 4, "c": 4}, 16)
    [(1, 2), (0, 1)]
    """
    frontier: list[tuple[int | float, list[tuple[int, ...]], list[Term]]] = [(0, [], terms)]
    finished: list[tuple[int | float, list[tuple[int, ...]], list[Term]]] = []
    while frontier:
        grown = []
        for cost, path, state in frontier:
            for positions in _choices(state, fuse):
                step, after = contract(state, positions, output, sizes)
                if step.stored > memory_limit or (len(positions) > 2 and not step.result.sparse):
                    continue
                entry = (cost + step.flops, path + [positions], after)
                (finished if len(after) == 1 else grown).append(entry)
        if not grown and not finished:        # nothing fits: one kernel for what is left
            cost, path, state = min(frontier, key=lambda e: e[0])
            return path + [tuple(range(len(state)))]
        frontier = grown
    return min(finished, key=lambda e: e[0])[1]


def _choices(state: list[Term], fuse: bool) -> list[tuple[int, ...]]:
    choices: list[tuple[int, ...]] = list(itertools.combinations(range(len(state)), 2))
    if fuse:
        for count in range(3, min(len(state), FUSED_STEP_MAX) + 1):
            choices += [c for c in itertools.combinations(range(len(state)), count)
                        if any(state[p].sparse for p in c)]
    return choices


# ---------------------------------------------------------------------------------------------
# plans


@dataclass(frozen=True, slots=True)
class PathStep:
    """One step of a path: the operands it takes (positions in the list of operands left),
    its own einsum subscripts, and its estimated cost and result."""

    positions: tuple[int, ...]
    subscripts: str
    remaining: str              # the whole expression after this step
    flops: int | float
    scaling: int                # how many indices the step loops over
    stored: int | float         # entries its result stores (estimated when sparse)
    sparse: bool


@dataclass(frozen=True, slots=True)
class ContractionPlan:
    """A contraction path with its costs; ``str()`` is the report ``np.einsum_path`` prints."""

    subscripts: str             # letters only, explicit output
    operands: tuple[OperandInfo, ...]
    steps: tuple[PathStep, ...]
    naive_flops: int | float    # one kernel over every operand
    naive_scaling: int
    algorithm: str

    @property
    def path(self) -> list[Any]:
        """``['einsum_path', (0, 1), ...]``, as ``np.einsum_path`` returns it."""
        return ["einsum_path", *(step.positions for step in self.steps)]

    @property
    def flops(self) -> int | float:
        return sum(step.flops for step in self.steps)

    @property
    def sparse(self) -> bool:
        return any(info.nnz is not None for info in self.operands)

    def __str__(self) -> str:
        return render_report(self)


def plan_contraction(subscripts: str, operands: Sequence[Any], optimize: Any = "greedy"
                     ) -> ContractionPlan:
    """Choose a contraction path for ``einsum(subscripts, *operands)``.

    ``optimize``: ``False``/``None`` (one kernel), ``True`` or ``"greedy"``, ``"optimal"``,
    one of opt_einsum's names (read as ``"auto"``: optimal up to four operands, else greedy),
    ``(name, memory_limit)``, or an explicit path (``['einsum_path', (1, 2), (0, 1)]`` or
    opt_einsum's ``[(1, 2), (0, 1)]``).

    >>> A, B, x = np.ones((4, 4)), np.ones((4, 4)), np.ones(4)
    >>> plan = plan_contraction("ij,jk,k->i", [A, B, x])
    >>> plan.path, [step.subscripts for step in plan.steps]
    (['einsum_path', (1, 2), (0, 1)], ['jk,k->j', 'ij,j->i'])
    """
    if not isinstance(subscripts, str):
        raise SubscriptTypeError(f"subscripts must be a string, not {type(subscripts).__name__}")
    infos = tuple(operand_info(op) for op in operands)
    inputs, output = _terms(subscripts, [len(info.shape) for info in infos])
    sizes = _sizes(inputs, infos)
    algorithm, memory_limit, explicit = _read_optimize(optimize, len(inputs))
    terms = [Term(frozenset(term), info.density, info.nnz is not None)
             for term, info in zip(inputs, infos)]
    out = frozenset(output)
    naive = contract(terms, range(len(terms)), out, sizes)[0]
    if explicit is not None:
        path = explicit
    elif algorithm is None or len(terms) <= 2 or frozenset().union(*map(set, inputs)) == out:
        path = [tuple(range(len(terms)))]
    else:
        if memory_limit is None:      # NumPy's default: the largest operand or the output
            memory_limit = max([stored(t, sizes) for t in terms] + [naive.stored])
        fuse = any(t.sparse for t in terms)
        if algorithm == "greedy":
            path = greedy_path(terms, out, sizes, memory_limit)
        else:
            path = optimal_path(terms, out, sizes, memory_limit, fuse)
        if fuse and len(path) > 1 and naive.flops < _path_flops(terms, path, out, sizes):
            path = [tuple(range(len(terms)))]
    steps = _steps(list(inputs), output, terms, path, sizes)
    letters = ",".join("".join(t) for t in inputs) + "->" + "".join(output)
    return ContractionPlan(letters, infos, steps, naive.flops, len(naive.scope),
                           "explicit" if explicit is not None else str(algorithm or "none"))


def _path_flops(terms: list[Term], path: list[tuple[int, ...]], output: frozenset[str],
                sizes: Mapping[str, int]) -> int | float:
    total: int | float = 0
    for positions in path:
        step, terms = contract(terms, positions, output, sizes)
        total += step.flops
    return total


def _steps(inputs: list[tuple[str, ...]], output: tuple[str, ...], terms: list[Term],
           path: Sequence[tuple[int, ...]], sizes: Mapping[str, int]) -> tuple[PathStep, ...]:
    out = frozenset(output)
    if not path:                      # only an operand already in place: still one step
        path = [tuple(range(len(terms)))]
    steps = []
    for number, positions in enumerate(path):
        positions = _checked_step(positions, len(terms), number)
        step, terms = contract(terms, positions, out, sizes)
        taken = [inputs[p] for p in positions]
        inputs = [t for k, t in enumerate(inputs) if k not in positions]
        if number == len(path) - 1:
            result = output
        else:   # first appearance: a sparse operand's mode order carries over to its result
            result = tuple(dict.fromkeys(i for t in taken for i in t if i in step.result.indices))
        inputs.append(result)
        text = ",".join("".join(t) for t in taken) + "->" + "".join(result)
        remaining = ",".join("".join(t) for t in inputs) + "->" + "".join(output)
        steps.append(PathStep(positions, text, remaining, step.flops, len(step.scope),
                              step.stored, step.result.sparse))
    if len(inputs) != 1:
        raise PathError(f"the path leaves {len(inputs)} operands: it must contract them all "
                        f"into one ({len(inputs) - 1} more to contract)")
    return tuple(steps)


def _checked_step(positions: Any, count: int, number: int) -> tuple[int, ...]:
    try:
        picked = tuple(int(p) for p in positions)
    except (TypeError, ValueError):
        raise PathError(f"step {number} of the path, {positions!r}, is not a tuple of operand "
                        "positions") from None
    if not picked or len(set(picked)) != len(picked) or not all(0 <= p < count for p in picked):
        raise PathError(f"step {number} of the path, {positions!r}, must name distinct "
                        f"operands among the {count} left (0 to {count - 1})")
    return tuple(sorted(picked))


# ---------------------------------------------------------------------------------------------
# reading the arguments


def _terms(subscripts: str, ranks: list[int]) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """The letters of each operand and of the output, an ellipsis spelled with unused
    letters."""
    if subscripts.replace(" ", "") in ("", "->") and ranks == [0]:
        return [()], ()     # NumPy takes empty subscripts for one scalar
    if not ranks:
        raise NotationError("einsum needs at least one operand")
    stmt = parse_einsum(subscripts, ranks)
    names = [access.indices for access in accesses(stmt.rhs)]
    used = {i for term in names for i in term if len(i) == 1}
    spare = iter(s for s in SYMBOLS if s not in used)
    letters: dict[str, str] = {}
    for name in dict.fromkeys(i for term in names + [stmt.lhs.indices] for i in term):
        if len(name) == 1:
            letters[name] = name
        else:
            letters[name] = next(spare, "")
            if not letters[name]:
                raise NotationError(f"more than {len(SYMBOLS)} indices in {subscripts!r}")
    return ([tuple(letters[i] for i in term) for term in names],
            tuple(letters[i] for i in stmt.lhs.indices))


def _sizes(inputs: list[tuple[str, ...]], infos: Sequence[OperandInfo]) -> dict[str, int]:
    """The size of every index; a dimension of 1 broadcasts against any other."""
    sizes: dict[str, int] = {}
    for k, (term, info) in enumerate(zip(inputs, infos)):
        for letter, dim in zip(term, info.shape):
            known = sizes.get(letter)
            if known is None or known == 1:
                sizes[letter] = dim
            elif dim not in (1, known):
                raise ShapeError(f"index '{letter}' has size {dim} in operand {k} but "
                                 f"{known} before")
    return sizes


def _read_optimize(optimize: Any, count: int
                   ) -> tuple[str | None, int | float | None, list[tuple[int, ...]] | None]:
    """``(algorithm or None, memory limit or None, explicit path or None)``."""
    if optimize is None or optimize is False:
        return None, None, None
    if optimize is True:
        return "greedy", None, None
    if isinstance(optimize, str):
        return _algorithm(optimize, count), None, None
    if isinstance(optimize, (list, tuple)):
        if len(optimize) == 2 and isinstance(optimize[0], str) and \
                isinstance(optimize[1], (int, float)) and not isinstance(optimize[1], bool):
            return _algorithm(optimize[0], count), optimize[1], None
        steps = list(optimize[1:] if optimize and optimize[0] == "einsum_path" else optimize)
        if all(isinstance(s, (list, tuple)) for s in steps) and \
                (steps or optimize and optimize[0] == "einsum_path"):
            return None, None, [tuple(s) for s in steps]
    raise PathTypeError(f"did not understand optimize={optimize!r}: give False, True, "
                        "'greedy', 'optimal', ('greedy', memory_limit) or a path "
                        "['einsum_path', (0, 1), ...]")


def _algorithm(name: str, count: int) -> str:
    if name in ("greedy", "optimal"):
        return name
    if name in AUTO_NAMES:
        return "optimal" if count <= AUTO_OPTIMAL_MAX else "greedy"
    raise UnknownPathError(f"no path algorithm named {name!r}: use 'greedy' or 'optimal'")


# ---------------------------------------------------------------------------------------------
# the public functions


def einsum_path(*operands: Any, optimize: Any = "greedy") -> tuple[list[Any], str]:
    """The contraction path ``einsum`` would take, and a printable report, as
    ``np.einsum_path``: ``einsum_path(subscripts, *operands)`` or the interleaved
    ``einsum_path(op0, sublist0, op1, sublist1, ..., [sublistout])``.

    >>> path, report = einsum_path("ij,jk,kl->il", np.ones((2, 8)), np.ones((8, 8)),
    ...                            np.ones((8, 2)))
    >>> path
    ['einsum_path', (0, 1), (0, 1)]
    """
    if not operands:
        raise NotationError("einsum_path needs subscripts and operands")
    if isinstance(operands[0], str):
        subscripts, arrays = operands[0], list(operands[1:])
    else:
        subscripts, arrays = from_interleaved(operands)
    plan = plan_contraction(subscripts, arrays, optimize)
    return plan.path, str(plan)


def contract_by_path(subscripts: str, operands: Sequence[Any], path: Sequence[Any],
                     step: Callable[[str, tuple[Any, ...]], Any],
                     final: Callable[[str, tuple[Any, ...]], Any] | None = None) -> Any:
    """Evaluate ``einsum(subscripts, *operands)`` along ``path``: ``step(subscripts, operands)``
    computes each step (the operands in their order in the list left), ``final`` the last one
    (default ``step``), so ``out=`` or ``dtype=`` can go to the last step only.

    >>> A, B, x = np.arange(4.0).reshape(2, 2), np.ones((2, 2)), np.ones(2)
    >>> calls = []
    >>> def step(text, ops):
    ...     calls.append(text)
    ...     return np.einsum(text, *ops)
    >>> contract_by_path("ij,jk,k->i", [A, B, x], ["einsum_path", (1, 2), (0, 1)], step)
    array([ 2., 10.])
    >>> calls
    ['jk,k->j', 'ij,j->i']
    """
    explicit = list(path[1:]) if path and path[0] == "einsum_path" else list(path)
    plan = plan_contraction(subscripts, operands, ["einsum_path", *explicit])
    return run_steps(operands, step_list(plan), step, final)


def presum_steps(subscripts: str, shapes: Sequence[tuple[int, ...]], least: int
                 ) -> list[tuple[tuple[int, ...], str]] | None:
    """Steps (``run_steps``'s) that first sum each operand of at least ``least`` values over
    the indices it alone holds (in no other operand and not in the output), one step per such
    operand, then contract what is left (greedily, NumPy's path, for three or more operands;
    one step for two); None where no operand has such an index. NumPy's ``einsum`` sums them
    first too; as steps of their own, each sum is one kernel that takes threads as its own
    loops allow, instead of a temporary inside the product's kernel that runs on one.

    >>> presum_steps("abc,ad->d", [(50, 40, 30), (50, 7)], 1000)
    [((0,), 'abc->a'), ((0, 1), 'ad,a->d')]
    >>> presum_steps("ab,bc->ac", [(50, 40), (40, 30)], 1000) is None
    True
    """
    inputs, output = _terms(subscripts, [len(shape) for shape in shapes])
    if len(inputs) < 2:
        return None
    held = [set(term) for term in inputs]
    terms, kept_shapes = list(inputs), [tuple(shape) for shape in shapes]
    steps: list[tuple[tuple[int, ...], str]] = []
    for k, term in enumerate(inputs):
        alone = [i for i in term if i not in output and
                 not any(i in other for j, other in enumerate(held) if j != k)]
        if not alone or len(set(term)) != len(term) or math.prod(shapes[k]) < least:
            continue
        position = terms.index(term)
        result = tuple(i for i in term if i not in alone)
        steps.append(((position,), "".join(term) + "->" + "".join(result)))
        shape = kept_shapes.pop(position)
        terms.pop(position)
        terms.append(result)
        kept_shapes.append(tuple(n for i, n in zip(term, shape) if i not in alone))
    if not steps:
        return None
    rest = ",".join("".join(t) for t in terms) + "->" + "".join(output)
    if len(terms) < 3:
        return steps + [(tuple(range(len(terms))), rest)]
    stand_ins = [np.lib.stride_tricks.as_strided(np.zeros(1), shape, [0] * len(shape))
                 for shape in kept_shapes]
    return steps + step_list(plan_contraction(rest, stand_ins, "greedy"))


def step_list(plan: ContractionPlan) -> list[tuple[tuple[int, ...], str]]:
    """``plan``'s steps as ``(positions, subscripts)`` pairs, what :func:`run_steps` takes."""
    return [(planned.positions, planned.subscripts) for planned in plan.steps]


def run_steps(operands: Sequence[Any], steps: Sequence[tuple[tuple[int, ...], str]],
              step: Callable[[str, tuple[Any, ...]], Any],
              final: Callable[[str, tuple[Any, ...]], Any] | None = None) -> Any:
    """Evaluate planned ``steps`` (``(positions, subscripts)``: the operands taken from the
    list left, and the step's own subscripts) as :func:`contract_by_path` does; a repeated
    call keeps its steps instead of planning them again.

    >>> A, B, x = np.arange(4.0).reshape(2, 2), np.ones((2, 2)), np.ones(2)
    >>> run_steps([A, B, x], [((1, 2), "jk,k->j"), ((0, 1), "ij,j->i")],
    ...           lambda text, ops: np.einsum(text, *ops))
    array([ 2., 10.])
    """
    values = list(operands)
    for number, (positions, subscripts) in enumerate(steps):
        taken = tuple(values[p] for p in positions)
        values = [v for k, v in enumerate(values) if k not in positions]
        call = final if final is not None and number == len(steps) - 1 else step
        values.append(call(subscripts, taken))
    return values[0]


# ---------------------------------------------------------------------------------------------
# the report


def render_report(plan: ContractionPlan) -> str:
    """NumPy's path report; with sparse operands, the estimates it was chosen by."""
    flops = plan.flops
    largest = max(step.stored for step in plan.steps)
    lines = [f"  Complete contraction:  {plan.subscripts}",
             f"         Naive scaling:  {plan.naive_scaling}",
             f"     Optimized scaling:  {max(step.scaling for step in plan.steps)}",
             f"      Naive FLOP count:  {plan.naive_flops:.3e}",
             f"  Optimized FLOP count:  {flops:.3e}",
             f"   Theoretical speedup:  {plan.naive_flops / max(flops, 1):3.3f}",
             f"  Largest intermediate:  {largest:.3e} elements"]
    inputs = plan.subscripts.split("->")[0].split(",")
    for k, (term, info) in enumerate(zip(inputs, plan.operands)):
        if info.nnz is not None:
            lines.append(f"        Sparse operand:  {k} ({term}), {info.nnz:.3e} stored, "
                         f"density {info.density:.2e}")
    if plan.sparse:
        lines.append("            Cost model:  estimated nonzeros (independent placement)")
    rule = "-" * 74
    lines += [rule, "%6s %24s %40s" % ("scaling", "current", "remaining"), rule]
    for step in plan.steps:
        row = "%4d    %24s %40s" % (step.scaling, step.subscripts, step.remaining)
        if plan.sparse:
            row += f"   ~{step.stored:.1e} stored" + (" (sparse)" if step.sparse else "")
        lines.append(row)
    return "\n".join(lines)
