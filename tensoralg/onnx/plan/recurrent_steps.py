"""Static steps of LSTM, GRU and RNN nodes (``onnx/ops/recurrent.py``): the whole recurrence as
prebound calls, which the plan compiles into one native sequence.

Node by node, every time step dispatches a product and one or two statements from Python, tens
of µs each. Here every call is bound once, to fixed buffers, in the order the node runs them.
The states are kept ``(batch, hidden)`` (the node-by-node run keeps them ``(hidden, batch)``) so
that each product is ``h R_g^T`` on the generated GEMM, the weight packed once and one layer per
gate, each writing its gate block as a contiguous array (a 32 x 64 x 256 product ran in 13 µs
as four such layers, 28 µs as the statement ``Y(i,j) = R(i,k) * H(k,j)``; one thread, measured
ad hoc):

1. (layout 1) X copied time-major, one statement;
2. per direction, the input projection: one dense layer per gate over every step, Wb + Rb as
   its bias, into a scratch ``(G, T * batch, hidden)``, so that a step's gate block is a fixed
   view; for a reverse direction over unequal lengths a row gather per gate (constant ids) puts
   each entry's own time in each iteration, as the node-by-node run does;
3. the initial states copied in (a zeros array when there are none);
4. per iteration, the products of the state with each gate's block of R, then the node's step
   statements (``Direction.step_statements``; masked by constant masks once an entry has
   ended) writing the new state into its own buffer: straight into Y (layout 0, every length
   full), into a history table that one gather turns into Y (zeros past each length), or into
   two buffers in turn when Y is not asked for;
5. Y_h and Y_c copied from the last states.

Left to the generic step (None): weights, biases, peepholes or sequence_lens that are not
constants, dtypes other than float32 and float64, empty batches or sequences. Past
``MAX_NATIVE_CALLS`` calls the step runs them itself, from Python, rather than join the plan's
compiled sequence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.recurrent import (
    GATE_NAMES,
    Config,
    Direction,
    Order,
    Sizes,
    StepText,
    check_shapes,
    config,
    order,
    split_biases,
)
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.step_base import Env, Getter, Part, Run, Spec, contiguous, made_of
from tensoralg.program import DenseLayer

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
CONSTANT_INPUTS = ("W", "R", "B", "sequence_lens", "P")
TIME_MAJOR = "Y(i,j,k) = X(j,i,k)"        # layout 1's X (batch, T, input) -> (T, batch, input)
# Past this many calls the step runs them from Python instead of offering them to the plan's
# compiled sequence: compiling one costs 1.5-2.5 ms a call, more the longer the sequence
# (300 calls 0.45 s, 1200 2.3 s, 2400 5.9 s; a 1000-step LSTM 25 s), against 6 µs a call
# saved per run (LSTM, hidden 64, batch 32, 50 steps: 1.5 ms compiled, 3.3 ms from Python;
# measured ad hoc, one thread).
MAX_NATIVE_CALLS = 1500


@dataclass
class Recurrence:
    """What a recurrent node's static step runs, fixed from its constants and the recorded
    shapes: everything but the buffers. Per direction ``d``: ``projections[d]`` and
    ``products[d]``, by gate name, the dense layers of ``X W_g^T + Wb_g + Rb_g`` and
    ``h R_g^T`` (only the gates the statements read)."""

    cfg: Config
    sizes: Sizes
    dtype: np.dtype
    orders: list[Order]
    cells: list[Direction]
    projections: list[dict[str, DenseLayer]]
    products: list[dict[str, DenseLayer]]
    kernels: dict[str, ta.Kernel]          # by statement text
    time_major: ta.Kernel | None           # layout 1's copy of X
    wanted: tuple[bool, bool, bool]        # Y, Y_h, Y_c asked for

    @property
    def gates(self) -> str:
        return GATE_NAMES[self.cfg.op_type]

    @property
    def steps(self) -> int:
        """Iterations per direction (the longest sequence)."""
        return self.orders[0].steps

    @property
    def direct(self) -> bool:
        """Whether each iteration writes its state straight into Y: layout 0 and no entry
        ends early, so that every ``Y[t, d]`` is one iteration's whole state."""
        return self.wanted[0] and not self.cfg.layout and \
            all(o.unmasked == self.sizes.steps for o in self.orders)

    @property
    def history(self) -> bool:
        """Whether Y is gathered from a table of every iteration's state."""
        return self.wanted[0] and not self.direct

    @property
    def late(self) -> str:
        """The gate whose product reads the first statement's result (GRU's ``R_h (r * H)``
        with ``linear_before_reset=0``), or ''."""
        return "H" if self.cfg.op_type == "GRU" and not self.cfg.linear_before_reset else ""

    @property
    def native(self) -> bool:
        """Whether the step's calls join the plan's compiled sequence: the iterations' calls
        (the bulk of them) are at most ``MAX_NATIVE_CALLS``."""
        per_step = len(self.products[0]) + len(self.cells[0].step_statements(False))
        return self.steps * self.sizes.directions * per_step <= MAX_NATIVE_CALLS

    def describe(self) -> str:
        """The plan's line for the step."""
        sizes, first = self.sizes, self.projections[0]
        per_step = len(self.products[0])
        statements = len(self.cells[0].step_statements(False))
        rows = sizes.steps * sizes.batch
        what = ("written in place" if self.direct else "gathered from the states"
                if self.history else "not asked for")
        return (f"{self.cfg.op_type} as one sequence of prebound calls, {self.steps} steps x "
                f"{sizes.directions} direction(s): input projection as {len(first)} gate "
                f"layers ({next(iter(first.values())).describe(rows)}); per step {per_step} "
                f"({next(iter(self.products[0].values())).describe(sizes.batch)}) + "
                f"{statements} statement{'s' * (statements > 1)}; Y {what}" +
                ("" if self.native else "; run from Python, too many calls to compile"))


def recurrent_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                   ) -> Spec | None:
    """The static form of an LSTM, GRU or RNN node (see the module docstring), or None to run
    it as a generic step.

    >>> from onnx import helper, numpy_helper
    >>> import tensoralg.onnx as tonnx
    >>> weights = [numpy_helper.from_array(np.ones((1, 2, 3), np.float32), "W"),
    ...            numpy_helper.from_array(np.zeros((1, 2, 2), np.float32), "R")]
    >>> graph = helper.make_graph(
    ...     [helper.make_node("RNN", ["X", "W", "R"], ["Y"], hidden_size=2)], "rnn",
    ...     [helper.make_tensor_value_info("X", 1, [4, 1, 3])],
    ...     [helper.make_tensor_value_info("Y", 1, [4, 1, 1, 2])], weights)
    >>> model = tonnx.load(helper.make_model(graph, opset_imports=[
    ...     helper.make_opsetid("", 14)]), opt_level=3)
    >>> for _ in range(3):      # the second run builds the static plan, the third runs it
    ...     y = model.run({"X": np.full((4, 1, 3), 0.1, np.float32)})["Y"]
    >>> steps = model.specialiser.latest().steps
    >>> [step.kind for step in steps], y[3, 0, 0].astype(float).round(3).tolist()
    (['recurrent kernels'], [0.291, 0.291])
    """
    checked = _checked(step, recorded, constants)
    if checked is None:
        return None
    recurrence = _recurrence(step, *checked)
    scratch = _scratch(recurrence)

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        named = iter(outs)
        outputs = [next(named) if wanted else None for wanted in recurrence.wanted]
        wiring = _Wiring(recurrence, dict(zip(scratch, buffers)), {g.name: g for g in ins},
                         step.node.inputs, str(step.context))
        parts = wiring.build(outputs)
        return made_of(_run(parts), parts if recurrence.native else None)

    spec = Spec(make, [(shape, recurrence.dtype) for shape in scratch.values()],
                "recurrent kernels")
    spec.plan = recurrence.describe()
    return spec


def _checked(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
             ) -> tuple[Config, Sizes, dict[str, np.ndarray], list[Order]] | None:
    """The node's attributes, sizes, input values by ONNX name and the order of each
    direction's steps; None where the static step does not apply."""
    node = step.node
    names = dict(zip(INPUTS, node.inputs))
    if any(names.get(key) and names[key] not in constants for key in CONSTANT_INPUTS):
        return None
    values = {key: recorded[name] for key, name in names.items() if name}
    x = values["X"]
    if x.dtype not in FLOATS or any(recorded[name].dtype != x.dtype
                                    for name in node.outputs if name):
        return None
    try:
        cfg = config(node.op_type, dict(node.attributes))
        sizes = check_shapes(step.context, cfg, x, values["W"], values["R"], values.get("B"),
                             values.get("sequence_lens"), values.get("initial_h"),
                             values.get("initial_c"), values.get("P"))
    except ta.TensorAlgebraError:
        return None               # the generic step raises the node's own error
    if not sizes.steps or not sizes.batch:
        return None
    orders = [order(direction, sizes.steps, sizes.batch, values.get("sequence_lens"))
              for direction in cfg.directions]
    if not orders[0].steps:
        return None               # every sequence empty: the states are the initial ones
    return cfg, sizes, values, orders


def _recurrence(step: Step, cfg: Config, sizes: Sizes, values: dict[str, np.ndarray],
                orders: list[Order]) -> Recurrence:
    """The :class:`Recurrence` of a node :func:`_checked` accepted: its step statements
    compiled (masked ones only where an entry ends early), its dense layers packed."""
    dtype = values["X"].dtype
    text = StepText(sizes.hidden, sizes.batch, batch_major=True)
    maskings = (False, True) if any(o.unmasked < o.steps for o in orders) else (False,)
    cells, projections, products = [], [], []
    for d in range(sizes.directions):
        biases, inner = split_biases(cfg, values["B"][d] if "B" in values else None,
                                     sizes.hidden)
        peepholes = values["P"][d].reshape(3, sizes.hidden).astype(dtype) if "P" in values \
            else None
        cell = Direction(cfg, cfg.activations[d], values["R"][d].astype(dtype), inner,
                         peepholes, text, dtype)
        read = {name for masked in maskings for s in cell.step_statements(masked)
                for name in s.operands}
        cells.append(cell)
        projections.append(_layers(values["W"][d], biases, read, "X", cfg, sizes, dtype))
        products.append(_layers(values["R"][d], [], read, "R", cfg, sizes, dtype))
    kernels = {s.text: step.context.kernels.get(s.text, dtype)
               for cell in cells for masked in maskings for s in cell.step_statements(masked)}
    time_major = step.context.kernels.get(TIME_MAJOR, dtype) if cfg.layout else None
    wanted = [bool(name) for name in step.node.outputs] + [False] * 3
    return Recurrence(cfg, sizes, dtype, orders, cells, projections, products, kernels,
                      time_major, (wanted[0], wanted[1], wanted[2]))


def _layers(weight: np.ndarray, biases: list[np.ndarray], read: set[str], prefix: str,
            cfg: Config, sizes: Sizes, dtype: np.dtype) -> dict[str, DenseLayer]:
    """One dense layer per gate whose operand ``prefix + gate`` a statement reads: ``A
    weight_g^T`` plus the gate's share of ``biases``."""
    layers = {}
    hidden = sizes.hidden
    for g, gate in enumerate(GATE_NAMES[cfg.op_type]):
        if prefix + gate not in read:
            continue                # LSTM's forget gate under input_forget
        rows = slice(g * hidden, (g + 1) * hidden)
        bias = sum((b[rows].astype(dtype) for b in biases), np.zeros(hidden, dtype)) \
            if biases else None
        layers[gate] = program.dense_layer(np.ascontiguousarray(weight[rows].T, dtype=dtype),
                                           bias)
    return layers


def _scratch(r: Recurrence) -> dict[str, tuple[int, ...]]:
    """The scratch buffers of the step, by name (each one only where it is needed)."""
    sizes = r.sizes
    g, t, b, h = len(r.gates), sizes.steps, sizes.batch, sizes.hidden
    # per direction: the initial h, two h buffers used in turn, and the same for c
    scratch = {"projection": (g, t * b, h), "products": (g, b, h),
               "states": (sizes.directions, 6 if r.cfg.op_type == "LSTM" else 3, b, h)}
    if r.history:
        # every iteration's h, then one row of zeros (Y past each length)
        scratch["history"] = (sizes.directions * r.steps * b + 1, h)
    if not all(o.uniform for o in r.orders):
        scratch["gathered"] = (g, r.steps * b, h)
    if r.cfg.layout:
        scratch["time major"] = (t * b, sizes.inputs)
    if r.late:
        scratch["gated"] = (b, h)
    return scratch


class _Wiring:
    """The calls of one recurrent step bound to its buffers, in the order they run, each with
    the operands it reads from a run's values (graph inputs: X, the initial states)."""

    def __init__(self, recurrence: Recurrence, scratch: dict[str, np.ndarray],
                 getters: dict[str, Getter], inputs: tuple[str, ...], what: str) -> None:
        self.r = recurrence
        self.scratch = scratch
        self.names = dict(zip(INPUTS, inputs))
        self.getters = getters
        self.what = what
        self.parts: list[Part] = []

    def getter(self, key: str) -> Getter | None:
        name = self.names.get(key)
        return self.getters[name] if name else None

    def add(self, call: Any, what: str, operand: str = "", get: Getter | None = None,
            shape: tuple[int, ...] | None = None) -> None:
        """Append ``call`` (None: a call that could not be made, which fails the plan); it
        reads ``operand`` through ``get`` each run unless that is fixed."""
        if call is None:
            raise ta.UnsupportedError(f"{self.what}: no prebound call for {what}")
        dynamic = [(operand, get, shape)] if get is not None and get.fixed is None else []
        self.parts.append((call, dynamic))

    def source(self, get: Getter, shape: tuple[int, ...]) -> np.ndarray:
        """What a call reading ``get`` is bound to: the fixed value, or zeros to rebind."""
        if get.fixed is not None:
            return contiguous(np.asarray(get.fixed, self.r.dtype).reshape(shape))
        return np.zeros(shape, self.r.dtype)

    def build(self, outputs: list[np.ndarray | None]) -> list[Part]:
        """Every call of the step, in order, writing ``outputs`` (Y, Y_h, Y_c; None where
        the node leaves one out)."""
        r = self.r
        rows, get = self.x_rows()
        finals = [self.iterate(d, self.project(d, rows, get), outputs[0])
                  for d in range(r.sizes.directions)]
        if r.history:
            self.gather_y(outputs[0])
        for which, out in ((0, outputs[1]), (1, outputs[2])):
            for d, states in enumerate(finals):
                if out is not None:
                    view = out[:, d] if r.cfg.layout else out[d]
                    self.add(program.copy_call(states[which], view, f"{self.what}: final state"),
                             "a final state")
        return self.parts

    def x_rows(self) -> tuple[np.ndarray, Getter | None]:
        """X as ``(T * batch, input)`` rows, time-major, and its getter when the projection
        reads it each run: X itself, or for layout 1 a scratch copy (nothing to rebind)."""
        r, sizes = self.r, self.r.sizes
        get = self.getter("X")
        assert get is not None
        t, b, inputs = sizes.steps, sizes.batch, sizes.inputs
        if not r.cfg.layout:
            return self.source(get, (t * b, inputs)), get
        out = self.scratch["time major"]
        assert r.time_major is not None
        call = r.time_major.bind(out=out.reshape(t, b, inputs),
                                 X=self.source(get, (b, t, inputs)))
        self.add(call, "X time-major", "X", get, (b, t, inputs))
        return out, None

    def project(self, d: int, rows: np.ndarray, get: Getter | None) -> dict[str, np.ndarray]:
        """Direction ``d``'s input projection; its gate blocks ``(iterations * batch,
        hidden)``, iteration-major (gathered when entries start at different times)."""
        r, projection = self.r, self.scratch["projection"]
        blocks = {}
        for g, gate in enumerate(r.gates):
            layer = r.projections[d].get(gate)
            if layer is None:
                continue
            self.add(layer.bind(rows, projection[g]), "the input projection", "A", get,
                     rows.shape)
            blocks[gate] = projection[g]
        steps = r.orders[d]
        if steps.uniform:
            return blocks
        batch = r.sizes.batch
        ids = np.ascontiguousarray((steps.times * batch + np.arange(batch)).reshape(-1))
        gathered = self.scratch["gathered"]
        for g, gate in enumerate(r.gates):
            if gate in blocks:
                self.add(program.gather_call(blocks[gate], ids, gathered[g],
                                             f"{self.what}: reverse times"), "a time gather")
                blocks[gate] = gathered[g]
        return blocks

    def initial(self, d: int, key: str, slot: np.ndarray) -> np.ndarray:
        """Direction ``d``'s initial state ``key`` copied into ``slot`` each run, or zeros
        (an array nothing writes) when the node has none."""
        get = self.getter(key)
        sizes = self.r.sizes
        if get is None:
            return np.zeros_like(slot)
        shape = (sizes.batch, sizes.directions, sizes.hidden) if self.r.cfg.layout else \
            (sizes.directions, sizes.batch, sizes.hidden)
        offset, ld = (d * sizes.hidden, sizes.directions * sizes.hidden) if self.r.cfg.layout \
            else (d * sizes.batch * sizes.hidden, sizes.hidden)
        call = program.block_copy_call(self.source(get, shape), offset, sizes.batch,
                                       sizes.hidden, ld, slot, f"{self.what}: {key}")
        self.add(call, key, "src", get, shape)
        return slot

    def target(self, d: int, k: int, y: np.ndarray | None) -> np.ndarray:
        """Where iteration ``k`` of direction ``d`` writes its hidden state."""
        r = self.r
        if r.direct:
            assert y is not None
            return y[r.orders[d].times[k, 0], d]
        if r.history:
            batch = r.sizes.batch
            start = (d * r.steps + k) * batch
            return self.scratch["history"][start:start + batch]
        return self.scratch["states"][d, 1 + k % 2]

    def iterate(self, d: int, blocks: dict[str, np.ndarray], y: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """Every iteration of direction ``d``; its last ``h`` and ``c`` buffers (``c``: LSTM
        only)."""
        r, states = self.r, self.scratch["states"][d]
        lstm = r.cfg.op_type == "LSTM"
        h = self.initial(d, "initial_h", states[0])
        c = self.initial(d, "initial_c", states[3]) if lstm else None
        steps, batch = r.orders[d], r.sizes.batch
        for k in range(r.steps):
            first = k if not steps.uniform else int(steps.times[k, 0])
            xs = {gate: block[first * batch:(first + 1) * batch]
                  for gate, block in blocks.items()}
            new_h, new_c = self.target(d, k, y), states[4 + k % 2] if lstm else None
            self.step(d, k, xs, h, c, new_h, new_c)
            h, c = new_h, new_c
        return h, c

    def step(self, d: int, k: int, xs: dict[str, np.ndarray], h: np.ndarray,
             c: np.ndarray | None, new_h: np.ndarray, new_c: np.ndarray | None) -> None:
        """One iteration: the products with R, then the statements (see ``recurrent.py``)."""
        r, cell = self.r, self.r.cells[d]
        t, steps, products = cell.text, r.orders[d], self.scratch["products"]
        masked = k >= steps.unmasked
        operands = {"H": t.view(h)}
        for g, gate in enumerate(r.gates):
            operands["R" + gate] = t.view(products[g])
            if gate in xs:
                operands["X" + gate] = t.view(xs[gate])
            layer = r.products[d].get(gate)
            if layer is not None and gate != r.late:
                self.add(layer.bind(h, products[g]), "a product with R")
        if c is not None and new_c is not None:
            operands.update(C=t.view(c), N=t.view(new_c))
        if masked:
            operands["M"] = t.mask(steps.active[k], r.dtype)
        if cell.peepholes is not None:
            operands.update({f"P{g}": t.vector(np.ascontiguousarray(cell.peepholes[n]))
                             for n, g in enumerate("IOF")})
        if cell.recurrence_bias is not None:
            operands["BH"] = t.vector(np.ascontiguousarray(cell.recurrence_bias, r.dtype))
        results = [new_c, new_h] if new_c is not None else \
            [self.scratch["gated"], new_h] if r.late else [new_h]
        for statement, out in zip(cell.step_statements(masked), results):
            kernel = r.kernels[statement.text]
            self.add(kernel.bind(out=t.view(out), **{name: operands[name]
                                                    for name in statement.operands}),
                     "a step statement")
            if r.late and out is not new_h:      # R_h reads r * H, the first result
                late = r.gates.index(r.late)
                self.add(r.products[d][r.late].bind(out, products[late]), "R_h (r * H)")

    def gather_y(self, y: np.ndarray | None) -> None:
        """Y from the history table: each output row the state of the iteration that wrote
        that time for that entry, or the zero row."""
        r, sizes = self.r, self.r.sizes
        assert y is not None
        history = self.scratch["history"]
        zeros = np.zeros((1, sizes.hidden), r.dtype)
        self.add(program.copy_call(zeros, history[-1:], f"{self.what}: zero row"), "zeros")
        ids = np.full(y.size // sizes.hidden, history.shape[0] - 1, np.int64)
        t, b, dirs = sizes.steps, sizes.batch, sizes.directions
        for d, steps in enumerate(r.orders):
            k, entry = np.nonzero(steps.active)
            time = steps.times[k, entry]
            rows = (entry * t + time) * dirs + d if r.cfg.layout else (time * dirs + d) * b + entry
            ids[rows] = (d * r.steps + k) * b + entry
        self.add(program.gather_call(history, ids, y.reshape(-1, sizes.hidden),
                                     f"{self.what}: Y"), "Y")


def _run(parts: list[Part]) -> Run:
    """Every part in order, rebinding its run-time operands first: the Python form of the
    compiled sequence the plan makes of ``parts``."""

    def run(env: Env) -> None:
        for call, dynamic in parts:
            for name, get, shape in dynamic:
                value = contiguous(get(env))
                call.rebind(name, value if shape is None else value.reshape(shape))
            call()
    return run


__all__ = ["recurrent_spec"]
