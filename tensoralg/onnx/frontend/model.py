"""``load`` and ``InferenceSession``: an ONNX model compiled onto tensoralg kernels."""
from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Mapping, Sequence, TextIO

import numpy as np
import scipy.sparse as sp

import tensoralg as ta
import tensoralg.gpu as gpu
from tensoralg.onnx.frontend.errors import InputError
from tensoralg.onnx.frontend.graph import Graph, ValueInfo
from tensoralg.onnx.frontend.load import load_graph, read_model
from tensoralg.onnx.ops.kernels import KernelSet
from tensoralg.onnx.passes.bags.sparse_feeds import densified, is_sparse, sparse_feed
from tensoralg.onnx.passes.pipeline import describe, pipeline
from tensoralg.onnx.passes.sparse_weights import threshold_of
from tensoralg.onnx.plan.device_executor import DeviceExecutor, device_constants
from tensoralg.onnx.plan.device_values import Device
from tensoralg.onnx.plan.executor import Executor, Step
from tensoralg.onnx.plan.memory import MemoryTrace
from tensoralg.onnx.plan.profile import Profile
from tensoralg.onnx.plan.static import MAX_PLANS, Replan, Specialiser
from tensoralg.onnx.plan.step_base import parts_of

OPT_LEVELS = (0, 1, 2, 3)
BACKENDS = ("llvm", "c", "cuda")


class CompiledModel:
    """An ONNX graph whose nodes run as tensoralg kernels (or BLAS / NumPy data movement).

    >>> import onnx, onnx.helper as h
    >>> g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
    ...     [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
    ...     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    >>> m = load(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    >>> m(np.array([-1.0, 2.0], np.float32))
    array([0., 2.], dtype=float32)
    """

    def __init__(self, graph: Graph, executor: Executor, opt_level: int, backend: str,
                 stages: list[tuple[str, str]] | None = None) -> None:
        self.graph = graph
        self.executor = executor
        self.opt_level = opt_level
        self.backend = backend
        self.stages = stages or []   # (pass name, graph text after it)
        # Level 3 runs a static plan per input-shape signature (buffers by lifetime, prebound
        # kernels); lower levels run node by node, so what each level buys stays measurable.
        # Static plans are LLVM machine code: a cuda model runs node by node on the device.
        self.specialiser = Specialiser(executor) if opt_level >= 3 and backend != "cuda" \
            else None
        # Fixed once loaded; run() consults them on every call.
        self._known = frozenset(v.name for v in graph.inputs) | frozenset(graph.overridable)
        self._constant_memory = frozenset(
            id(a) for c in graph.constants.values() for a in (c, c.base) if a is not None)
        # feeds' (name, shape, dtype) in the caller's order -> (plan, its signature)
        self._known_plans: dict[tuple, tuple[Any, tuple]] = {}

    @property
    def inputs(self) -> list[ValueInfo]:
        return list(self.graph.inputs)

    @property
    def outputs(self) -> list[ValueInfo]:
        return list(self.graph.outputs)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Outputs by name for ``feeds`` (input name -> array). A 2-D float input may be fed
        as a SciPy sparse matrix (see :mod:`tensoralg.onnx.passes.bags.sparse_feeds`)."""
        fast = self._run_known(feeds)
        if fast is not None:
            return fast
        checked = self._checked(feeds)
        values = (self.specialiser.run(checked) if self.specialiser is not None
                  else self.executor.run(densified(checked)))
        if self.specialiser is not None and type(feeds) is dict and \
                len(feeds) == len(self.graph.inputs):
            key = _feed_key(feeds)
            if key is not None:
                signature = self.specialiser.signature(checked)
                plan = self.specialiser.plans.get(signature)
                if plan is not None:
                    if len(self._known_plans) >= 2 * MAX_PLANS:   # forget evicted plans
                        self._known_plans = {k: v for k, v in self._known_plans.items()
                                             if not v[0].retired}
                    self._known_plans[key] = (plan, signature)
        return self._outputs(values, feeds)

    def _outputs(self, values: Mapping[str, np.ndarray], feeds: Mapping[str, Any]
                 ) -> dict[str, np.ndarray]:
        """The graph outputs of a run, each the caller's own (see :func:`_owned`)."""
        return {v.name: _owned(values[v.name], self._constant_memory, feeds)
                for v in self.graph.outputs}

    def _run_known(self, feeds: Any) -> dict[str, np.ndarray] | None:
        """The fast path of :meth:`run`: feeds of exactly the names, shapes and dtypes of an
        earlier call that built a static plan skip the checks they passed then (about as long
        as a small model's whole plan at batch 1). None: take the checked path."""
        if not self._known_plans or type(feeds) is not dict:
            return None
        key = _feed_key(feeds)
        known = None if key is None else self._known_plans.get(key)
        if known is None:
            return None
        plan, signature = known
        if any(len(entry) == 4 for entry in key):
            # CSR feeds: their arrays are checked every run (one compiled pass); one that is
            # not canonical takes the checked path, which repairs it on a copy.
            feeds = dict(feeds)
            for name, *_rest in (entry for entry in key if len(entry) == 4):
                value = feeds[name]
                feed = sparse_feed(name, value, value.dtype)
                if feed.csr is not value:
                    return None
                feeds[name] = feed
        specialiser = self.specialiser
        if plan.retired:
            self._known_plans.pop(key, None)   # its buffers may go
            return None
        if specialiser is None or not plan.lock.acquire(blocking=False):
            return None
        try:
            values = plan.run(feeds)
        except Replan as why:
            specialiser.drop(signature, why)
            return None
        finally:
            plan.lock.release()
        fresh = plan.fresh_outputs       # copies the plan made: the caller's already
        return {v.name: values[v.name] if v.name in fresh else
                _owned(values[v.name], self._constant_memory, feeds)
                for v in self.graph.outputs}

    def __call__(self, *arrays: Any) -> Any:
        """Positional inputs in declaration order; one output, or a tuple of them."""
        if len(arrays) != len(self.graph.inputs):
            raise InputError(f"the model takes {len(self.graph.inputs)} input(s) "
                             f"({', '.join(v.name for v in self.graph.inputs)}), got {len(arrays)}")
        outputs = self.run({v.name: a for v, a in zip(self.graph.inputs, arrays)})
        values = tuple(outputs.values())
        return values[0] if len(values) == 1 else values

    def profile(self, feeds: Mapping[str, Any], repeat: int = 1) -> Profile:
        """Time per node over ``repeat`` runs (after warm-up runs that compile kernels and, at
        level 3, build the static plan), and the memory of intermediate values.

        At level 3 a step that a plain run runs inside a compiled call sequence is timed as
        its own native calls, so each such row also holds one Python-to-native call (about a
        microsecond); branches a plain run runs at once are timed one after another (the
        profile's notes name them).

        >>> profile = model.profile(feeds, repeat=20)   # doctest: +SKIP
        >>> print(profile)                               # slowest node first  # doctest: +SKIP
        """
        checked = self._checked(feeds)
        totals: dict[str, float] = {}

        def record(step: Step, seconds: float) -> None:
            totals[step.node.name] = totals.get(step.node.name, 0.0) + seconds

        memory = None
        static_plans: dict[str, str] = {}
        notes: tuple[str, ...] = ()
        if self.specialiser is not None:
            self.specialiser.run(checked)
            self.specialiser.run(checked)
            for _ in range(max(1, repeat)):
                self.specialiser.run(checked, timer=record)
            plan = self.specialiser.plans.get(self.specialiser.signature(checked))
            if plan is not None:
                memory = plan.memory
                static_plans = {s.step.node.name: s.plan for s in plan.steps if s.plan}
                running = {s.step.node.name for s in plan.steps}
                static_plans.update((s.node.name, "not run: the static plan folds it into "
                                     "another step or a view") for s in self.executor.steps
                                    if s.node.name not in running)
                notes = tuple(f"timed one step at a time; a plain run runs these at once: "
                              f"{group}" for group in plan.groups())
        else:
            self.executor.run(densified(checked))
        if memory is None:
            totals.clear()
            trace = MemoryTrace()
            for _ in range(max(1, repeat)):
                trace = MemoryTrace()
                self.executor.run(densified(checked), timer=record, memory=trace)
            # Device memory is not traced: a cuda model's profile has no memory line.
            on_device = isinstance(self.executor, DeviceExecutor)
            memory = None if on_device else trace.stats(len(self.executor.steps))
        rows = [(s.node.name, s.node.op_type, totals.get(s.node.name, 0.0) / max(1, repeat),
                 static_plans.get(s.node.name) or "; ".join(self.executor.notes(s)))
                for s in self.executor.steps]
        if isinstance(self.executor, DeviceExecutor):
            notes = tuple(self.executor.summary())
        return Profile.from_times(rows, memory, notes)

    def ir(self) -> str:
        """The plan as text: one line per node with the statements or data movement it runs."""
        lines = [f"model: opset {self.graph.opset}, opt level {self.opt_level}, "
                 f"backend {self.backend}"]
        lines += [f"  pass: {note}" for note in self.graph.notes]
        lines += [f"  input {v}" for v in self.graph.inputs]
        lines.append(f"  {len(self.graph.constants)} constant(s)")
        for step in self.executor.steps:
            plan = self.executor.notes(step)
            head = f"  {step.node}"
            if not plan:
                lines.append(f"{head}  [compiled at first run]")
            for k, text in enumerate(plan):
                lines.append(f"{head}  :  {text}" if k == 0 else f"{' ' * len(head)}  :  {text}")
        lines += [f"  output {v}" for v in self.graph.outputs]
        if self.specialiser is not None:
            notes = list(self.specialiser.notes.values())
            lines.append(f"  {notes[-1]}" if notes else "  static plan: built at the second "
                         "run with given input shapes, used from the third")
        if isinstance(self.executor, DeviceExecutor):
            if self.opt_level >= 3:
                lines.append("  static plan: not built on the cuda backend (level-3 static "
                             "plans are LLVM machine code); nodes run one by one")
            lines += [f"  {line}" for line in self.executor.summary()]
        return "\n".join(lines)

    def stage_text(self, stage: str = "plan") -> str:
        """One stage as text: ``"passes"`` (the graph after each pass), a pass name (the graph
        after it), ``"plan"`` (:meth:`ir`: what each node runs), ``"kernels"`` (the IR of
        every kernel compiled so far, and at level 3 the LLVM IR of the latest static plan's
        hand-built modules; kernels compile at the first run), or ``"all"``."""
        names = [name for name, _ in self.stages]
        if stage == "passes":
            return "\n".join(f"== after {name} ==\n{text}" for name, text in self.stages) or \
                "(opt level 0: no passes)"
        if stage in names:
            return f"== after {stage} ==\n" + dict(self.stages)[stage]
        if stage == "plan":
            return self.ir()
        if stage == "kernels":
            kernels = self.executor.kernels.kernels.values()
            texts = [f"== kernel {k.statement} ==\n{k.source('ir')}" for k in kernels]
            texts += [f"== generated {name} (LLVM IR) ==\n{source}"
                      for name, source in self._generated_sources()]
            return "\n\n".join(texts) or "(no kernel compiled yet: run the model)"
        if stage == "all":
            return "\n\n".join(self.stage_text(s) for s in ("passes", "plan", "kernels"))
        raise ta.UnsupportedError(f"print_ir stage must be one of passes, plan, kernels, all or "
                                  f"a pass name ({', '.join(names) or 'none at this level'}), "
                                  f"not {stage!r}")

    def _generated_sources(self) -> list[tuple[str, str]]:
        """:func:`generated_sources` of the latest static plan (none before one is built)."""
        plan = self.specialiser.latest() if self.specialiser is not None else None
        return generated_sources(plan) if plan is not None else []

    def print_ir(self, stage: str = "plan", file: TextIO | None = None) -> None:

        """Print :meth:`stage_text` of ``stage``."""
        print(self.stage_text(stage), file=file or sys.stdout)

    def __str__(self) -> str:
        ins = ", ".join(str(v) for v in self.graph.inputs)
        return f"CompiledModel({len(self.executor.steps)} nodes; inputs {ins})"

    def _checked(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(feeds, Mapping):
            raise InputError("feeds must be a dict from input name to array")
        unknown = [name for name in feeds if name not in self._known]
        if unknown:
            raise InputError(f"unknown input(s) {', '.join(map(repr, unknown))}; the model's "
                             f"inputs are {', '.join(v.name for v in self.graph.inputs)}")
        checked = {}
        for info in self.graph.inputs:
            if info.name not in feeds:
                raise InputError(f"missing input {info.name!r} ({info})")
            checked[info.name] = _check_feed(info, feeds[info.name])
        for name in feeds:
            if name in self.graph.overridable:
                checked[name] = self._override(name, feeds[name])
        return checked

    def _override(self, name: str, value: Any) -> np.ndarray:
        """A feed for an initializer the model also lists as an input (ONNX lets a run
        replace it). Level 0 runs the nodes as loaded and takes it; higher levels compiled the
        initializer in (folded, fused, compressed), so they refuse it rather than ignore it."""
        if self.opt_level > 0:
            raise InputError(
                f"input {name!r} is an initializer that the model also lists as an input, so "
                f"ONNX lets a run replace it; at opt level {self.opt_level} tensoralg compiled "
                f"its value in (constant folding, fusion, sparse weights), so a fed value would "
                f"be ignored. Load the model with opt_level=0 to feed {name!r}, or leave it "
                f"out of the feeds to use the model's value")
        array = value.toarray() if is_sparse(value) else np.asarray(value)
        default = self.graph.constants[name]
        info = self.graph.overridable[name]
        if array.dtype != default.dtype or array.shape != default.shape:
            raise InputError(f"input {name!r} replaces an initializer of shape "
                             f"{default.shape} and dtype {default.dtype} ({info}); got shape "
                             f"{array.shape} and dtype {array.dtype}")
        return array


_CSR_TYPES = (sp.csr_array, sp.csr_matrix)


def _feed_key(feeds: dict[str, Any]) -> tuple | None:
    """What the fast path of a run knows feeds by: each name, shape and dtype (and a CSR
    feed's index dtype); None when a feed is neither an ndarray nor a SciPy CSR matrix
    (NumPy scalars have shapes and dtypes too)."""
    if all(type(a) is np.ndarray for a in feeds.values()):
        return tuple((name, a.shape, a.dtype) for name, a in feeds.items())
    key = []
    for name, a in feeds.items():
        if type(a) is np.ndarray:
            key.append((name, a.shape, a.dtype))
        elif type(a) in _CSR_TYPES:
            key.append((name, a.shape, a.dtype, a.indices.dtype))
        else:
            return None
    return tuple(key)


def _check_feed(info: ValueInfo, value: Any) -> Any:
    array = sparse_feed(info.name, value, info.dtype) if is_sparse(value) else \
        np.asarray(value)
    if info.dtype is not None and array.dtype != info.dtype:
        raise InputError(f"input {info.name!r} must be {info.dtype}, got {array.dtype}")
    if info.shape is not None:
        bad = len(info.shape) != array.ndim or any(
            isinstance(d, int) and d != n for d, n in zip(info.shape, array.shape))
        if bad:
            raise InputError(f"input {info.name!r} has shape {array.shape}, expected {info}")
    return array


def _owned(value: np.ndarray, constant_memory: frozenset[int], feeds: Mapping[str, Any]
           ) -> np.ndarray:
    """``value``, copied if it is (a view of) a constant or a feed the caller still holds
    (``constant_memory``: the ids of every constant and of its base array)."""
    base = value if value.base is None else value.base
    shared = id(base) in constant_memory or \
        any(isinstance(f, np.ndarray) and (f is base or f.base is base) for f in feeds.values())
    return value.copy() if shared or not value.flags.writeable else value


def load(source: Any, opt_level: int = 3, backend: str = "llvm",
         sparse_weights: Any = "auto", device: Any = None) -> CompiledModel:
    """Load an ONNX model (path, bytes or ModelProto) and compile it onto tensoralg kernels.

    ``opt_level`` 0 runs one kernel per node; 1 adds shape inference, constant folding and dead
    node removal; 2 adds MatMul re-association, embedding bags and fusion; 3 adds sparse
    weights: a MatMul/Gemm weight with at least ``sparse_weights`` zeros ("auto": 0.7; a float;
    False to disable) runs as a sparse kernel. ``TENSORALG_PRINT_IR=1``, read here once, prints
    the graph after each pass and the source of each kernel as it compiles, and at level 3 each
    static plan as it is built with the LLVM IR of its hand-built modules (on stderr).
    ``TENSORALG_WINOGRAD=0`` runs 3x3 convolutions as direct ones instead of by Winograd's
    F(2x2, 3x3) or F(4x4, 3x3), whose sums round differently (see the ONNX guide);
    ``TENSORALG_WINOGRAD=2`` keeps F(2x2, 3x3), the closer of the two. Every op is resolved here:
    an op the importer does not support raises ``ta.UnsupportedError`` naming the op, node and
    inputs.

    ``backend="cuda"`` runs the nodes' kernels on the GPU and keeps their results there
    (:mod:`tensoralg.onnx.plan.device_executor`): nodes that need host memory run on the CPU as
    visible host steps, and no level-3 static plan is built. ``device``: the
    ``tensoralg.gpu.GpuContext`` to run on (default: the process's GPU; tests pass one around
    the emulator). Without pycuda or cuda-python, or without a visible GPU, it raises
    ``ta.UnsupportedError`` saying which.
    """
    if opt_level not in OPT_LEVELS:
        raise ta.UnsupportedError(f"opt_level must be one of {OPT_LEVELS}, not {opt_level!r}")
    if backend not in BACKENDS:
        raise ta.UnsupportedError(f"backend {backend!r} cannot run ONNX models; use one of "
                                  f"{', '.join(BACKENDS)}")
    if device is not None and backend != "cuda":
        raise ta.UnsupportedError(f"device= is for backend='cuda', not {backend!r}")
    gpu_device = Device(device if device is not None else gpu.gpu_context()) \
        if backend == "cuda" else None
    threshold = threshold_of(sparse_weights)
    show = os.environ.get("TENSORALG_PRINT_IR", "") not in ("", "0")
    # The graph as read (Ifs decided at load inlined) is what shape inference must see.
    graph, model = load_graph(read_model(source))
    kernels = KernelSet(backend, on_compile=_print_kernel if show else None, device=gpu_device)
    if gpu_device is not None:
        gpu_device.kernels = kernels
    stages = []
    for name, step in pipeline(opt_level, model, kernels, threshold):
        graph = step(graph)
        stages.append((name, describe(graph)))
        if show:
            print(f"== after {name} ==\n{stages[-1][1]}", file=sys.stderr)
    if gpu_device is not None:
        gpu_device.hold(device_constants(graph))
        executor: Executor = DeviceExecutor(graph, kernels)
    else:
        executor = Executor(graph, kernels)
    compiled = CompiledModel(graph, executor, opt_level, backend, stages)
    if show and compiled.specialiser is not None:
        compiled.specialiser.on_plan = _print_plan
    return compiled


def _print_kernel(kernel: ta.Kernel) -> None:
    print(f"== kernel {kernel.statement} ==\n{kernel.source('ir')}", file=sys.stderr)


def _print_plan(plan: Any) -> None:
    print(f"== {plan.describe()} ==", file=sys.stderr)
    for name, source in generated_sources(plan):
        print(f"== generated {name} (LLVM IR) ==\n{source}", file=sys.stderr)


def generated_sources(plan: Any) -> list[tuple[str, str]]:
    """The hand-built modules of a static plan (generated GEMMs, convolutions with their
    weights compiled in, call sequences): a name and the optimised LLVM IR of each, once."""
    found: dict[int, tuple[str, str]] = {}
    for step in plan.steps:
        for bound, _ in parts_of(step.run) or []:
            for owner in (getattr(bound, "layer", None), getattr(bound, "conv", None),
                          getattr(getattr(bound, "gemm", None), "layer", None)):
                if getattr(owner, "source", None):
                    found.setdefault(id(owner), (repr(owner), owner.source))
    for k, sequence in enumerate(plan.sequences):
        found.setdefault(id(sequence), (f"call sequence {k} ({len(sequence.calls)} calls)",
                                        sequence.source))
    return list(found.values())


class InferenceSession:
    """An onnxruntime-style session: ``run(output_names_or_None, feeds) -> list``."""

    def __init__(self, source: Any, opt_level: int = 3, backend: str = "llvm",
                 sparse_weights: Any = "auto", device: Any = None) -> None:
        self.model = load(source, opt_level=opt_level, backend=backend,
                          sparse_weights=sparse_weights, device=device)

    def get_inputs(self) -> list[ValueInfo]:
        return self.model.inputs

    def get_outputs(self) -> list[ValueInfo]:
        return self.model.outputs

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any]
            ) -> list[np.ndarray]:
        outputs = self.model.run(feeds)
        names: Iterable[str] = output_names or [v.name for v in self.model.outputs]
        missing = [n for n in names if n not in outputs]
        if missing:
            raise InputError(f"unknown output(s) {', '.join(missing)}")
        return [outputs[n] for n in names]
