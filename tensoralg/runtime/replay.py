"""Repeated calls replayed by a Python function written for one kernel and one kind of operands.

A small kernel's call is all dispatch: on a 100x100 SpMV the kernel runs for well under a
microsecond, and a general loop over the argument recipe (one branch per argument kind, an
attribute lookup per step) took ~20 µs against scipy's ~5. ``replay_function`` writes the
recipe out as straight-line Python once — each argument one expression, each check one line —
and ``exec``s it, as ``dataclasses`` and ``collections.namedtuple`` build their methods. The
function returns None whenever anything differs from what the recipe assumes, and the caller
then takes the general path, which raises the precise errors.

Compressed operands are scipy CSR/CSC matrices read in place; the three arrays of the last one
that passed the storage validator are remembered by weak reference, so a matrix called again is
not re-validated (its arrays written in place are not re-checked either, as in scipy and as the
validator's own memo already does). COO operands (a scipy COO or a pydata COO that the kernel
reads in any order, ``lower/unordered.py``) are vetted the same way, by the identity of their
coordinate and value arrays (``_Entries``).
"""
from __future__ import annotations

import ctypes
import weakref
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tensoralg.runtime.args import data_address
from tensoralg.runtime.memory import memory_limit
from tensoralg.runtime.rows import CHOICE_MIN_VALUES
from tensoralg.runtime.threads import GATHER_UNITS

# What each argument of a replayed call is, with ``(kind, operand, mode)`` recipe entries.
(ARG_SIZE, ARG_DENSE, ARG_DATA, ARG_INDPTR, ARG_INDICES, ARG_OUT, ARG_BEGIN,
 ARG_CAPACITY, ARG_OUT_SIZES, ARG_OUT_HANDLE, ARG_ENTRIES_POS, ARG_ENTRIES_CRD,
 ARG_ENTRIES_COUNT) = range(13)
DENSE, COMPRESSED, ENTRIES = "dense", "compressed", "entries"


class _Sound:
    """The addresses of a scipy compressed matrix's ``indptr``, ``indices`` and ``data`` when
    it may be used in place, else None: the full check once, then the identity of its arrays
    (held weakly) for as long as they are the same ones, with the addresses found then."""

    __slots__ = ("check", "seen", "addresses")

    def __init__(self, check: Callable[[Any], bool]) -> None:
        self.check = check
        self.seen: tuple = ()
        self.addresses: tuple[int, int, int] | None = None

    def __call__(self, matrix: Any) -> tuple[int, int, int] | None:
        seen = self.seen
        if seen and matrix.indptr is seen[0]() and matrix.indices is seen[1]() and \
                matrix.shape == seen[3] and matrix.has_canonical_format:
            data = matrix.data
            if data is seen[2]():
                return self.addresses
            # New values on the same checked pattern (``A.data`` replaced, or a cast copy
            # sharing the indices): only the values array itself needs a look.
            if type(data) is np.ndarray and data.dtype == seen[4] and \
                    data.shape == seen[5] and data.flags.c_contiguous:
                return self.addresses[0], self.addresses[1], data_address(data)
        if not self.check(matrix):
            return None
        addresses = (data_address(matrix.indptr), data_address(matrix.indices),
                     data_address(matrix.data))
        try:
            self.seen = (weakref.ref(matrix.indptr), weakref.ref(matrix.indices),
                         weakref.ref(matrix.data), matrix.shape, matrix.data.dtype,
                         matrix.data.shape)
            self.addresses = addresses
        except TypeError:
            self.seen = ()
        return addresses


class _Entries:
    """What a kernel reads a COO operand by, in any order (``lower/unordered.py``):
    ``vet(operand)`` once (the api's binding, whose validator checks every coordinate against
    the shape), then, while the operand's coordinate and value arrays are the same objects
    (held weakly) and its shape the same, the addresses found then: ``(pos, entries, values,
    coordinates of mode 0, of mode 1, ...)``. ``vet`` returns ``(addresses, keep)``, ``keep``
    holding whatever arrays the addresses point into (a contiguous copy of pydata's
    coordinates, the ``[0, entries]`` positions), or None."""

    __slots__ = ("vet", "seen", "addresses", "keep")

    def __init__(self, vet: Callable[[Any], tuple | None]) -> None:
        self.vet = vet
        self.seen: tuple = ()
        self.addresses: tuple | None = None
        self.keep: Any = None

    def __call__(self, operand: Any) -> tuple | None:
        seen = self.seen
        if seen and operand.data is seen[1]() and operand.shape == seen[2]:
            coords = operand.coords
            # a scipy COO's coordinates are a tuple of arrays, a pydata COO's one 2-D array
            if type(coords) is tuple:
                if len(coords) == len(seen[0]) and \
                        all(c is ref() for c, ref in zip(coords, seen[0])):
                    return self.addresses
            elif coords is seen[0]():
                return self.addresses
        found = self.vet(operand)
        if found is None:
            return None
        self.addresses, self.keep = found
        coords = operand.coords
        try:
            self.seen = (tuple(map(weakref.ref, coords)) if type(coords) is tuple else
                         weakref.ref(coords), weakref.ref(operand.data), operand.shape)
        except TypeError:
            self.seen = ()
        return self.addresses


def replay_function(recipe: Sequence[tuple[int, int, int]], kinds: Sequence[str],
                    equal_sizes: Sequence[tuple[int, int, int, int]],
                    out_dims: Sequence[tuple[int, int]], value_dtype: np.dtype, overwrites: bool,
                    kernel: Callable[..., int], sound: Callable[[Any], bool],
                    threads: Any, fail: Callable[[], None],
                    split: Callable[[tuple, list], int | None] | None = None,
                    guards: Sequence[tuple] | None = None,
                    sparse: Any = None, relayouts: Sequence[tuple[int, tuple[int, ...]]] = (),
                    pattern: "PatternOutput | None" = None,
                    copies_pay: Callable[[tuple], bool] | None = None,
                    rows: tuple[int, Callable[[Any], Callable[..., int]]] | None = None,
                    kept: Callable[[tuple], Any] | None = None,
                    relayout: Callable[[np.ndarray, tuple[int, ...]], np.ndarray] | None = None,
                    entries: Mapping[int, Callable[[Any], tuple | None]] | None = None,
                    finish: Callable[[np.ndarray], Any] | None = None,
                    narrow_out: bool = False, entries_per_value: int = 1
                    ) -> Callable[[tuple], Any]:
    """A function ``(operands) -> result or None`` that runs ``kernel`` with the arguments
    ``recipe`` reads from the operands, into a new dense output of ``value_dtype``.

    ``sparse`` (a :class:`SparseOutput`) makes it a kernel that assembles a sparse output: the
    function hands the kernel new buffers (its first capacity the operands' stored entries, as
    the general path's) and returns ``sparse.finish(buffers, shape)``; a call with work for
    two threads goes to the general path, which joins thread ranges.

    ``sound(matrix)`` vets a compressed operand (the function reads its arrays' addresses once
    and keeps them while the arrays are the same); with ``threads`` (the kernel cache's
    ``KernelThreads``, for a kernel whose outer loop may be split) a call with work enough for
    two threads goes to ``split(operands, args)`` (which runs the kernel over thread ranges and
    returns its status, or None to leave the call to the general path), or to the general path
    without one (``api.estimated_work``, written out); ``fail()`` raises for a non-zero status.

    ``relayouts`` (``(operand, mode order)`` pairs) are dense operands the kernel reads in
    another mode order: copied so before the call (by ``relayout(array, order)``, NumPy's
    transposing copy without it), and read by ``(ARG_DENSE, operand, 1)``;
    a call for which ``copies_pay(operands)`` is false returns ``kept(operands)`` instead (a
    replay of the kernel's variant that reads them as they are, ``api.copies_pay``; without
    ``kept``, None: the general path runs that variant).
    ``rows`` (``(operand, choose)``, a dense output's kernel only) makes the call run
    ``choose(operand)`` instead of ``kernel``: the kernel, or its variant with a CSR row
    loop's tail masked, as the matrix's rows decide (``runtime/rows.py``).
    ``pattern`` (a :class:`PatternOutput`) makes the output the values at a compressed
    operand's positions (``lower/pattern.py``): a buffer of its stored count, finished into
    the sparse result by ``pattern.finish``; a call with work for two threads goes to the
    general path.

    ``guards`` (one per operand, as ``api._signature`` describes it: ``(numpy.ndarray, dtype,
    ndim)`` or ``(scipy class, data dtype, indices dtype, indptr dtype)``; ``(class,)`` for a
    COO operand, whose dtypes its vetting checks) makes the function check the operands'
    kinds itself, so that a caller may try it without computing the call's signature first:
    it returns None for operands of other kinds.

    ``entries`` (by operand, for the ``ENTRIES`` kinds: COO operands the kernel reads in any
    order) vets such an operand as ``_Entries`` describes, read by ``ARG_ENTRIES_POS``,
    ``ARG_ENTRIES_CRD`` (mode: the level), ``ARG_ENTRIES_COUNT`` (a range over its entries'
    end) and ``ARG_DATA``; such a call counts as work for two threads only where each holds
    ``entries_per_value`` times the output's values. ``finish`` (a dense output only)
    is applied to the result in its shape, 0-d included (a pydata caller's COO of it);
    ``narrow_out`` sends a call whose output has 2**31 - 1 elements or more to the general
    path (the kernel was built for int32 output positions).

    >>> f = replay_function([(ARG_SIZE, 0, 0), (ARG_DENSE, 0, 0), (ARG_OUT, -1, 0)], [DENSE],
    ...                     [], [(0, 0)], np.dtype(np.float64), True, lambda n, a, b: 0,
    ...                     bool, None, lambda: None)
    >>> f((np.ones(3),)).shape, f((np.ones(3), np.ones(2)))
    ((3,), None)
    """
    count = len(kinds)
    names = [f"o{k}" for k in range(count)]
    lines = ["def replay(operands):",
             f"    if len(operands) != {count}:",
             "        return None",
             f"    {', '.join(names)}{',' if count == 1 else ''} = operands"]
    # Each operand's shape is read once (a scipy matrix's ``shape`` is a property).
    shaped = sorted({a for a, _, b, _ in equal_sizes} | {b for _, _, b, _ in equal_sizes} |
                    {k for k, _ in out_dims} | {k for what, k, _ in recipe if what == ARG_SIZE} |
                    {k for k, _ in (pattern.reduced if pattern is not None else ())})
    for k, guard in enumerate(guards or ()):
        if guard[0] is np.ndarray:
            lines.append(f"    if type(o{k}) is not ndarray or o{k}.dtype != dtype{k} or "
                         f"o{k}.ndim != {guard[2]} or not o{k}.flags.c_contiguous:")
        else:       # the dtypes of its arrays are checked with their soundness (_Sound)
            lines.append(f"    if type(o{k}) is not class{k}:")
        lines.append("        return None")
    # Compressed operands are vetted (and, with guards, their rank checked) before any shape
    # is read.
    for k, kind in enumerate(kinds):
        if kind in (COMPRESSED, ENTRIES):
            vet = "sound" if kind == COMPRESSED else "entries"
            lines.append(f"    a{k} = {vet}{k}(o{k})")
            lines.append(f"    if a{k} is None:")
            lines.append("        return None")
    for k in shaped:
        lines.append(f"    s{k} = o{k}.shape")
    for a, mode_a, b, mode_b in equal_sizes:
        lines.append(f"    if s{a}[{mode_a}] != s{b}[{mode_b}]:")
        lines.append("        return None")
    shape = "".join(f"s{k}[{mode}], " for k, mode in out_dims)
    relaid = [f"    t{k} = relayout(o{k}, {order!r})" for k, order in relayouts]
    if relayouts and copies_pay is not None:
        relaid = ["    if not copies_pay(operands):", "        return kept(operands)"] + relaid
    # what the relayout lines call, whichever output the replay makes
    relays = {"copies_pay": copies_pay, "kept": kept or _none,
              "relayout": relayout or numpy_relayout}
    if pattern is not None:
        return _pattern_replay(lines + relaid, recipe, kinds, shape, value_dtype, overwrites,
                               kernel, sound, threads, fail, split, pattern, guards, relays)
    lines += relaid
    if sparse is not None:
        return _sparse_replay(lines, recipe, kinds, shape, kernel, sound, threads, fail, sparse,
                              guards, relays)
    threaded = threads is not None and split is not None
    size = " * ".join(f"s{k}[{mode}]" for k, mode in out_dims) or "1"
    if threads is not None:
        # COO entries read in any order split only where they are entries_per_value times
        # the output's values (api.SCATTER_ENTRIES_PER_VALUE), into partial outputs
        scatter = "".join(f" and a{k}[1] >= {entries_per_value} * {size}"
                          for k, kind in enumerate(kinds) if kind == ENTRIES)
        lines.append(f"    parallel = threads.threads > 1 and {_work(kinds, out_dims)} >= "
                     f"threads.split_work(){scatter}")
        if not threaded:
            lines.append("    if parallel:")
            lines.append("        return None")
    if narrow_out:
        lines.append(f"    if {size} >= 2147483647:")
        lines.append("        return None")
    # Over the memory limit: the general path raises MemoryLimitError (runtime/memory.py).
    lines.append(f"    if {size} * {value_dtype.itemsize} > limit():")
    lines.append("        return None")
    # A rank-1 output is made in its shape; others flat, then viewed in theirs.
    lines.append(f"    out = {'empty' if overwrites else 'zeros'}({size}, dtype)")
    if rows is not None:     # below CHOICE_MIN_VALUES stored values the plain one, unasked
        lines.append(f"    kernel = choose(o{rows[0]}) if o{rows[0]}.indices.shape[0] >= "
                     f"{CHOICE_MIN_VALUES} else plain")
    args = [_argument(what, k, mode) for what, k, mode in recipe]
    if threaded:
        lines.append(f"    status = split(operands, [{', '.join(args)}]) if parallel else "
                     f"kernel({', '.join(args)})")
        lines.append("    if status is None:")
        lines.append("        return None")
        lines.append("    if status != 0:")
    else:
        lines.append(f"    if kernel({', '.join(args)}) != 0:")
    lines.append("        fail()")
    if finish is not None:
        lines.append(f"    return finish(out.reshape(({shape})))")
    elif len(out_dims) == 1:
        lines.append("    return out")
    elif out_dims:
        lines.append(f"    return out.reshape(({shape}))")
    else:
        lines.append("    return out.reshape(())[()]")
    return _written({"empty": np.empty, "zeros": np.zeros, "dtype": value_dtype,
                     "limit": memory_limit, "split": split, "plain": kernel,
                     "choose": rows[1] if rows is not None else None, "finish": finish,
                     **{f"entries{k}": _Entries(vet) for k, vet in (entries or {}).items()}},
                    lines, kinds, kernel, sound, threads, fail, guards, relays)


class PatternOutput:
    """What a replayed call whose output shares a compressed operand's pattern needs: the
    operand's position, the ``(operand, mode)`` sizes of the indices each value sums over, and
    ``finish(values, operand, shape)``, which makes the result."""

    __slots__ = ("operand", "reduced", "finish")

    def __init__(self, operand: int, reduced: Sequence[tuple[int, int]],
                 finish: Callable[[np.ndarray, Any, tuple], Any]) -> None:
        self.operand, self.reduced, self.finish = operand, tuple(reduced), finish


def _pattern_replay(lines: list[str], recipe: Sequence[tuple[int, int, int]],
                    kinds: Sequence[str], shape: str, value_dtype: np.dtype, overwrites: bool,
                    kernel: Callable[..., int], sound: Callable[[Any], bool], threads: Any,
                    fail: Callable[[], None], split: Callable[[tuple, list], int | None] | None,
                    pattern: PatternOutput, guards: Sequence[tuple] | None,
                    relays: Mapping[str, Any]) -> Callable[[tuple], Any]:
    """``replay_function``'s end for a kernel that writes values at ``pattern``'s operand's
    positions (``lines`` holds the checks written so far): each range of rows writes its own
    entries' values, so a call with work for two threads runs ``split`` as a dense output's
    does (or, without one, goes to the general path)."""
    source = f"o{pattern.operand}"
    threaded = threads is not None and split is not None
    if threads is not None:
        # api.pattern_work, written out
        reduced = " * ".join(f"s{k}[{mode}]" for k, mode in pattern.reduced) or "1"
        stored = " + ".join(f"o{k}.indices.shape[0]" for k, kind in enumerate(kinds)
                            if kind == COMPRESSED)
        lines.append(f"    parallel = threads.threads > 1 and ({stored} + 1) * "
                     f"(1 + {reduced} // 4) >= threads.split_work()")
        if not threaded:
            lines.append("    if parallel:")
            lines.append("        return None")
    lines.append(f"    out = {'empty' if overwrites else 'zeros'}({source}.indices.shape[0], "
                 f"dtype)")
    args = ", ".join(_argument(what, k, mode) for what, k, mode in recipe)
    if threaded:
        lines.append(f"    status = split(operands, [{args}]) if parallel else kernel({args})")
        lines.append("    if status is None:")
        lines.append("        return None")
        lines.append("    if status != 0:")
    else:
        lines.append(f"    if kernel({args}) != 0:")
    lines.append("        fail()")
    lines.append(f"    return finish(out, {source}, ({shape}))")
    return _written({"empty": np.empty, "zeros": np.zeros, "dtype": value_dtype,
                     "finish": pattern.finish, "split": split}, lines, kinds, kernel, sound,
                    threads, fail, guards, relays)


def _argument(what: int, k: int, mode: int, handles: Sequence[str] = ()) -> str:
    """The expression a written-out call passes for one recipe entry ``(what, k, mode)``:
    operand ``o{k}``, its shape ``s{k}``, a vetted matrix's addresses ``a{k}``, the dense
    output ``out`` or a sparse output's ``buffers`` and their ``handles`` (named by
    ``handles[mode]``)."""
    if what == ARG_OUT_HANDLE:
        return f"addressof(handles[{handles[mode]!r}])"
    return {
        ARG_SIZE: f"s{k}[{mode}]",
        ARG_DENSE: f"address(t{k})" if mode else f"address(o{k})",
        ARG_DATA: f"a{k}[2]",
        ARG_INDPTR: f"a{k}[0]",
        ARG_INDICES: f"a{k}[1]",
        ARG_ENTRIES_POS: f"a{k}[0]",
        ARG_ENTRIES_CRD: f"a{k}[{3 + mode}]",
        ARG_ENTRIES_COUNT: f"a{k}[1]",
        ARG_OUT: "address(out)",
        ARG_BEGIN: "0",
        ARG_CAPACITY: "buffers.capacity",
        ARG_OUT_SIZES: "address(buffers.sizes)",
    }[what]


def _written(namespace: dict[str, Any], lines: list[str], kinds: Sequence[str],
             kernel: Callable[..., int], sound: Callable[[Any], bool], threads: Any,
             fail: Callable[[], None], guards: Sequence[tuple] | None,
             relays: Mapping[str, Any]) -> Callable[[tuple], Any]:
    """``lines`` compiled into the ``replay`` function, with the names every written-out call
    reads (the kernel, the vetting of compressed operands, the guards' classes and dtypes,
    the relayouts' ``relays``: ``copies_pay``, ``kept`` and ``relayout``) added to
    ``namespace``."""
    namespace.update(relays)
    namespace.update({
        "address": data_address, "kernel": kernel, "threads": threads, "fail": fail,
        "ndarray": np.ndarray,
        **{f"sound{k}": _Sound(sound if guards is None else _typed(sound, guards[k]))
           for k, kind in enumerate(kinds) if kind == COMPRESSED}})
    for k, guard in enumerate(guards or ()):
        namespace[f"dtype{k}" if guard[0] is np.ndarray else f"class{k}"] = \
            guard[1] if guard[0] is np.ndarray else guard[0]
    source = "\n".join(lines)
    exec(compile(source, "<tensoralg replay>", "exec"), namespace)  # noqa: S102
    replay = namespace["replay"]
    replay.source = source          # what was written, for a reader debugging a replay
    return replay


def numpy_relayout(array: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """``array`` copied C-contiguous in the mode order ``order``.

    >>> numpy_relayout(np.arange(6).reshape(2, 3), (1, 0)).tolist()
    [[0, 3], [1, 4], [2, 5]]
    """
    return np.ascontiguousarray(array.transpose(order))


def _none(operands: tuple) -> None:
    """No replay: the call goes to the general path."""
    return None


class SparseOutput:
    """What a replayed call that assembles a sparse output needs: ``buffers(capacity)`` makes
    the kernel's output buffers (``runtime/args.OutputBuffers`` with its handles and sizes),
    ``finish(buffers, shape)`` turns them into the result, ``release(buffers)`` frees them
    after a failed call, and ``handles`` names the handle of each ``ARG_OUT_HANDLE`` mode.
    ``narrow``: the kernel writes int32 positions, so a call whose output shape has 2**31 - 1
    elements or more goes to the general path (which checks that its entries fit), unless
    ``within_stored`` (the output holds at most the compressed operands' entries together)
    and those entries fit. ``counted_sum``: the kernel is a sum whose rows a split call
    counts first, which splits from ``threads.COUNTED_SUM_MIN_WORK`` stored entries."""

    __slots__ = ("buffers", "finish", "release", "handles", "narrow", "within_stored",
                 "counted_sum")

    def __init__(self, buffers: Callable[[int], Any], finish: Callable[[Any, tuple], Any],
                 release: Callable[[Any], None], handles: Sequence[str],
                 narrow: bool = False, within_stored: bool = False, counted_sum: bool = False
                 ) -> None:
        self.buffers, self.finish, self.release = buffers, finish, release
        self.handles, self.narrow = tuple(handles), narrow
        self.within_stored, self.counted_sum = within_stored, counted_sum


def _sparse_replay(lines: list[str], recipe: Sequence[tuple[int, int, int]],
                   kinds: Sequence[str], shape: str, kernel: Callable[..., int],
                   sound: Callable[[Any], bool], threads: Any, fail: Callable[[], None],
                   sparse: SparseOutput, guards: Sequence[tuple] | None,
                   relays: Mapping[str, Any]) -> Callable[[tuple], Any]:
    """``replay_function``'s end for a kernel with a sparse output (``lines`` holds the checks
    written so far)."""
    stored = [f"o{k}.indices.shape[0]" for k, kind in enumerate(kinds) if kind == COMPRESSED]
    sized = [f"o{k}.size" for k, kind in enumerate(kinds) if kind == DENSE]
    if sparse.narrow:
        limit = 2**31 - 1
        dims = [part.strip() for part in shape.split(",") if part.strip()]
        wide = f"{' * '.join(dims) or '1'} >= {limit}"
        if sparse.within_stored:
            # the output's entries fit while the operands' do, and every dimension does
            wide += f" and ({' + '.join(stored) or '0'} >= {limit} or " \
                    f"max({', '.join(dims) or '0'}, 0) >= {limit})"
        lines.append(f"    if {wide}:")
        lines.append("        return None")
    if threads is not None:
        # As api._Dispatch.run decides: work enough for two threads goes to the general path.
        work = f"{' + '.join(stored) or '0'} + 1"
        lines.append(f"    if threads.splits_sum({work}):" if sparse.counted_sum else
                     f"    if threads.threads > 1 and threads.parts({work}) > 1:")
        lines.append("        return None")
    # as runtime.threads.first_guess: the sparse operands' entries, or the dense sizes
    lines.append(f"    buffers = new_buffers(max(16, {' + '.join(stored or sized) or '0'}))")
    lines.append("    handles = buffers.handles")
    args = [_argument(what, k, mode, sparse.handles) for what, k, mode in recipe]
    lines.append(f"    if kernel({', '.join(args)}) != 0:")
    lines.append("        release(buffers)")
    lines.append("        fail()")
    lines.append(f"    return finish(buffers, ({shape}))")
    return _written({"addressof": ctypes.addressof, "new_buffers": sparse.buffers,
                     "finish": sparse.finish, "release": sparse.release}, lines, kinds, kernel,
                    sound, threads, fail, guards, relays)


def _typed(sound: Callable[[Any], bool], guard: tuple) -> Callable[[Any], bool]:
    """``sound`` for a matrix whose arrays also have the dtypes ``guard`` names."""
    _, values, indices, indptr = guard

    def check(matrix: Any) -> bool:
        return matrix.ndim == 2 and matrix.data.dtype == values and \
            matrix.indices.dtype == indices and matrix.indptr.dtype == indptr and sound(matrix)

    return check


def _work(kinds: Sequence[str], out_dims: Sequence[tuple[int, int]]) -> str:
    """``api.work_of`` of a call as one expression over the operands ``o0, o1, ...`` and
    their shapes ``s0, s1, ...``."""
    rows = f"s{out_dims[0][0]}[{out_dims[0][1]}]" if out_dims else "1"
    stored = [f"o{k}.indices.shape[0]" if kind == COMPRESSED else f"a{k}[1]"
              for k, kind in enumerate(kinds) if kind in (COMPRESSED, ENTRIES)]
    if not stored:
        sizes = [f"o{k}.size" for k, kind in enumerate(kinds) if kind == DENSE]
        return f"({' + '.join(sizes) or '0'} + {rows})"
    if len(out_dims) <= 1:      # no output columns: each stored value gathers one value
        return f"(({' + '.join(stored)}) * {GATHER_UNITS} + {rows})"
    width = " * ".join(f"s{k}[{mode}]" for k, mode in out_dims[1:])
    return f"(({' + '.join(stored)}) * max({GATHER_UNITS}, 1 + {width} // 4) + {rows})"


def replayable(recipe: Sequence[tuple[int, int, int]], sparse: bool = False) -> bool:
    """Whether ``replay_function`` can write a recipe out: a dense output's, or with
    ``sparse`` a sparse output's (its buffers' handles, sizes and capacity)."""
    supported = {ARG_SIZE, ARG_DENSE, ARG_DATA, ARG_INDPTR, ARG_INDICES, ARG_BEGIN,
                 ARG_ENTRIES_POS, ARG_ENTRIES_CRD, ARG_ENTRIES_COUNT} | \
        ({ARG_CAPACITY, ARG_OUT_SIZES, ARG_OUT_HANDLE} if sparse else {ARG_OUT})
    return all(what in supported for what, _, _ in recipe)


__all__ = ["ARG_BEGIN", "ARG_CAPACITY", "ARG_DATA", "ARG_DENSE", "ARG_ENTRIES_COUNT",
           "ARG_ENTRIES_CRD", "ARG_ENTRIES_POS", "ARG_INDICES", "ARG_INDPTR", "ARG_OUT", "ARG_OUT_HANDLE",
           "ARG_OUT_SIZES", "ARG_SIZE", "COMPRESSED", "DENSE", "ENTRIES",
           "PatternOutput", "SparseOutput", "replay_function", "replayable"]
