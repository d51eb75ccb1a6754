"""LSTM, GRU and RNN (opsets 7 and 14): one input projection, then a product and one or two
statements per time step.

Each direction runs in three parts:

1. **Input projection.** ``X_t W^T + Wb + Rb`` for every time step at once, one product laid
   out ``(T, gates*H, batch)`` (BLAS above ``use_blas``'s size, as for MatMul, with the biases
   and the transposition in one epilogue statement; otherwise one statement).
2. **Recurrence.** The states are kept transposed, ``(H, batch)``, so that each gate's block
   of rows of the projection and of the per-step product ``R h`` is a contiguous ``(H, batch)``
   operand. Per step, one product ``R h`` and one statement per new state (gates ``iofc``,
   ``zrh``; ``f, g, h`` the activations, each argument clipped when ``clip`` is set)::

       LSTM  C(i,j) = f(XF + RF + PF C) * C + f(XI + RI + PI C) * g(XC + RC)
             H(i,j) = f(XO + RO + PO C') * h(C')
       GRU   H(i,j) = (1 - z) * g(XH + r * (RH + BH)) + z * H       linear_before_reset=1
       RNN   H(i,j) = f(XI + RI)

   GRU's default ``linear_before_reset=0`` needs ``r * H`` before its product with ``Rh``: two
   products and two statements a step.
3. **Outputs.** Copying the states into ``Y`` (zeros past each sequence's length) and
   transposing to the requested layout is data movement.

``sequence_lens``: iteration ``k`` of a direction handles, for batch entry ``b`` of length
``L``, time ``k`` (forward) or ``L - 1 - k`` (reverse: each entry starts at its own last
step); an entry past its length keeps its state (``where(M(j), new, old)``), so ``Y_h`` and
``Y_c`` hold the state at its last valid step, and the initial state when ``L`` is 0
(onnxruntime 1.32 returns zeros there). Iterations where every entry is active run the
unmasked statements.

At opt level 3 (a static plan) the same statements run as one sequence of prebound calls,
states kept ``(batch, hidden)`` and products on the generated GEMM
(``onnx/plan/recurrent_steps.py``).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.elementwise import SOFTPLUS, elu_template
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, literal
from tensoralg.onnx.ops.matmul import contract, use_blas
from tensoralg.onnx.ops.registry import op

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# The gates' names in order (the rows of W, R and B): operands ``X`` and ``R`` + name.
GATE_NAMES = {"LSTM": "IOFC", "GRU": "ZRH", "RNN": "I"}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                       "RNN": ("Tanh",)}
DIRECTIONS = {"forward": ("forward",), "reverse": ("reverse",),
              "bidirectional": ("forward", "reverse")}


# ---------------------------------------------------------------------------------------------
# activations

@dataclass(frozen=True, slots=True)
class Function:
    """An activation the recurrent ops accept: its statement template in ``{0}``, built from
    ``(alpha, beta)``, how many of the two it reads, and their defaults (None: ONNX and
    onnxruntime disagree, so the model must give the value)."""

    name: str
    template: Callable[[float, float], str]
    uses: int
    defaults: tuple[float | None, float | None] = (None, None)


FUNCTIONS = {f.name.lower(): f for f in [
    Function("Relu", lambda a, b: "max({0}, 0)", 0),
    Function("Tanh", lambda a, b: "tanh({0})", 0),
    Function("Sigmoid", lambda a, b: "sigmoid({0})", 0),
    # onnxruntime's default alpha is 0 here, the old ONNX Affine op's 1.0: no default.
    Function("Affine", lambda a, b: f"{literal(a)} * {{0}} + {literal(b)}", 2, (None, 0.0)),
    Function("LeakyRelu", lambda a, b: f"max({{0}}, 0) + {literal(a)} * min({{0}}, 0)", 1,
             (0.01, None)),
    # onnxruntime's default alpha is 0, the ThresholdedRelu op's 1.0: no default.
    Function("ThresholdedRelu", lambda a, b: f"where(gt({{0}}, {literal(a)}), {{0}}, 0)", 1),
    Function("ScaledTanh", lambda a, b: f"{literal(a)} * tanh({literal(b)} * {{0}})", 2),
    Function("HardSigmoid", lambda a, b: f"max(0, min(1, {literal(a)} * {{0}} + {literal(b)}))",
             2, (0.2, 0.5)),
    Function("Elu", lambda a, b: elu_template(a), 1, (1.0, None)),
    Function("Softsign", lambda a, b: "{0} / (1 + abs({0}))", 0),
    Function("Softplus", lambda a, b: SOFTPLUS, 0),
]}


@dataclass(frozen=True, slots=True)
class Activation:
    """One activation of one direction, with its alpha and beta resolved.

    >>> Activation(FUNCTIONS["hardsigmoid"], 0.2, 0.5).apply("X(i)")
    'max(0, min(1, 0.2 * (X(i)) + 0.5))'
    """

    function: Function
    alpha: float
    beta: float

    def apply(self, argument: str) -> str:
        """The statement text of this activation of ``argument``."""
        return self.function.template(self.alpha, self.beta).format(f"({argument})")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def resolve_activations(names: Sequence[Any], alphas: Sequence[float],
                        betas: Sequence[float]) -> list[Activation]:
    """``names`` with their alphas and betas: each list is consumed in order by the functions
    that read it (as onnxruntime does), a function with none left taking its default.

    >>> [(a.function.name, a.alpha) for a in resolve_activations(
    ...     ["Sigmoid", "LeakyRelu", "Elu"], [0.5], [])]
    [('Sigmoid', 0.0), ('LeakyRelu', 0.5), ('Elu', 1.0)]
    """
    alphas, betas = list(alphas), list(betas)
    resolved = []
    for name in map(_text, names):
        function = FUNCTIONS.get(name.lower())
        if function is None:
            raise ta.UnsupportedError(f"activation {name!r} is not one of "
                                      f"{', '.join(f.name for f in FUNCTIONS.values())}")
        values = []
        for k, given in enumerate((alphas, betas)):
            if function.uses <= k:
                values.append(0.0)
            elif given:
                values.append(float(given.pop(0)))
            elif function.defaults[k] is None:
                which = ("alpha", "beta")[k]
                raise ta.UnsupportedError(
                    f"activation {function.name} needs its {which} in activation_{which}: "
                    f"ONNX and onnxruntime give it different defaults")
            else:
                values.append(float(function.defaults[k]))
        resolved.append(Activation(function, values[0], values[1]))
    return resolved


# ---------------------------------------------------------------------------------------------
# attributes

@dataclass(frozen=True, slots=True)
class Config:
    """A recurrent node's attributes, checked."""

    op_type: str
    hidden_size: int | None
    directions: tuple[str, ...]
    activations: tuple[tuple[Activation, ...], ...]    # per direction
    clip: float | None
    layout: int
    linear_before_reset: int
    input_forget: int

    def clipped(self, argument: str) -> str:
        """``argument`` bounded to [-clip, clip] (the input of every gate's activation)."""
        if self.clip is None:
            return argument
        return f"min(max({argument}, {literal(-self.clip)}), {literal(self.clip)})"


def config(op_type: str, attributes: dict[str, Any]) -> Config:
    """The checked attributes of a node of ``op_type``; UnsupportedError says what is wrong.

    >>> c = config("GRU", {"hidden_size": 4, "direction": b"bidirectional"})
    >>> c.directions, [a.function.name for a in c.activations[1]]
    (('forward', 'reverse'), ['Sigmoid', 'Tanh'])
    """
    direction = _text(attributes.get("direction", "forward"))
    if direction not in DIRECTIONS:
        raise ta.UnsupportedError(f"direction {direction!r} is not forward, reverse or "
                                  f"bidirectional")
    directions = DIRECTIONS[direction]
    per = len(DEFAULT_ACTIVATIONS[op_type])
    names = list(attributes.get("activations") or DEFAULT_ACTIVATIONS[op_type] * len(directions))
    if len(names) != per * len(directions):
        raise ta.UnsupportedError(f"{op_type} {direction} takes {per * len(directions)} "
                                  f"activations ({per} per direction), not {len(names)}")
    activations = resolve_activations(names, attributes.get("activation_alpha") or [],
                                      attributes.get("activation_beta") or [])
    hidden_size = attributes.get("hidden_size")
    if hidden_size is not None and int(hidden_size) < 1:
        raise ta.UnsupportedError(f"hidden_size must be at least 1, not {hidden_size}")
    clip = attributes.get("clip")
    if clip is not None:
        clip = float(clip)
        if not clip > 0:
            raise ta.UnsupportedError(f"clip must be positive, not {clip}")
        clip = clip if math.isfinite(clip) else None
    flags = {name: int(attributes.get(name, 0))
             for name in ("layout", "linear_before_reset", "input_forget")}
    for name, value in flags.items():
        if value not in (0, 1):
            raise ta.UnsupportedError(f"{name} must be 0 or 1, not {value}")
    return Config(op_type, None if hidden_size is None else int(hidden_size), directions,
                  tuple(tuple(activations[d * per:(d + 1) * per])
                        for d in range(len(directions))),
                  clip, flags["layout"], flags["linear_before_reset"], flags["input_forget"])


def _check(op_type: str) -> Callable[[dict[str, Any]], str | None]:
    """The load-time check of ``op_type``'s attributes (see :func:`config`)."""
    def check(attributes: dict[str, Any]) -> str | None:
        try:
            config(op_type, attributes)
        except ta.UnsupportedError as err:
            return str(err)
        return None
    return check


# ---------------------------------------------------------------------------------------------
# shapes

@dataclass(frozen=True, slots=True)
class Sizes:
    steps: int
    batch: int
    inputs: int
    hidden: int
    directions: int


def _expect(node: NodeContext, name: str, value: np.ndarray | None, shape: tuple[int, ...],
            meaning: str) -> None:
    if value is not None and value.shape != shape:
        raise ta.ShapeError(f"{node}: {name} has shape {value.shape}, expected {shape} "
                            f"({meaning})")


def check_shapes(node: NodeContext, cfg: Config, x: np.ndarray, w: np.ndarray, r: np.ndarray,
                 b: np.ndarray | None, sequence_lens: np.ndarray | None,
                 initial_h: np.ndarray | None, initial_c: np.ndarray | None = None,
                 p: np.ndarray | None = None) -> Sizes:
    """The sizes of a node's inputs; ShapeError naming the node and the expected shape."""
    if x.ndim != 3:
        axes = "[batch, seq, input]" if cfg.layout else "[seq, batch, input]"
        raise ta.ShapeError(f"{node}: X must be 3-D {axes}, got shape {x.shape}")
    steps, batch = (x.shape[1], x.shape[0]) if cfg.layout else x.shape[:2]
    inputs = x.shape[2]
    gates, d = GATES[cfg.op_type], len(cfg.directions)
    if r.ndim != 3:
        raise ta.ShapeError(f"{node}: R must be 3-D [directions, {gates}*hidden, hidden], "
                            f"got shape {r.shape}")
    hidden = cfg.hidden_size if cfg.hidden_size is not None else r.shape[2]
    what = f"{d} direction(s), {gates} gate(s), hidden_size {hidden}, input size {inputs}"
    _expect(node, "W", w, (d, gates * hidden, inputs), what)
    _expect(node, "R", r, (d, gates * hidden, hidden), what)
    _expect(node, "B", b, (d, 2 * gates * hidden), what)
    _expect(node, "P", p, (d, 3 * hidden), what)
    state = (batch, d, hidden) if cfg.layout else (d, batch, hidden)
    _expect(node, "initial_h", initial_h, state, f"{what}, batch {batch}, layout {cfg.layout}")
    _expect(node, "initial_c", initial_c, state, f"{what}, batch {batch}, layout {cfg.layout}")
    if sequence_lens is not None:
        _expect(node, "sequence_lens", sequence_lens, (batch,), f"batch {batch}")
        if sequence_lens.dtype.kind not in "iu":
            raise ta.ShapeError(f"{node}: sequence_lens must be integers, not "
                                f"{sequence_lens.dtype}")
        if sequence_lens.size and not (0 <= sequence_lens.min() and
                                       sequence_lens.max() <= steps):
            raise ta.ShapeError(f"{node}: sequence_lens {sequence_lens.tolist()} must lie in "
                                f"[0, {steps}] (the sequence length)")
    return Sizes(steps, batch, inputs, hidden, d)


# ---------------------------------------------------------------------------------------------
# products

def product(node: NodeContext, a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a @ b`` for 2-D ``a`` and ``b`` already in ``dtype``: BLAS (noted in the plan) above
    MatMul's size, else a statement.

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> node = NodeContext("n", "RNN", ("x",), ("y",), 14, KernelSet("llvm"))
    >>> product(node, np.ones((2, 3)), np.ones((3, 4)), np.dtype("f8"))[0]
    array([3., 3., 3., 3.])
    """
    m, k = a.shape
    n = b.shape[1]
    if use_blas(dtype, m * k * n):
        node.note(f"BLAS (dense {m}x{k}x{n})")
        return np.matmul(a, b)
    return contract(node, a, b, (), dtype)


def _indexed(name: str, indices: str, kept: set[str]) -> str:
    names = [i for i in indices if i in kept]
    return f"{name}({','.join(names)})" if names else name


def _dropped(array: np.ndarray, indices: str, kept: set[str]) -> np.ndarray:
    """``array`` (one axis per index) without the axes whose indices are not kept (size 1):
    a loop that runs once per element stops the innermost loop vectorising."""
    return array.reshape([n for n, i in zip(array.shape, indices) if i in kept])


def project(node: NodeContext, x: np.ndarray, w: np.ndarray, biases: Sequence[np.ndarray],
            layout: int, dtype: np.dtype) -> np.ndarray:
    """``X_t W^T`` plus ``biases`` for every step ``t`` at once, laid out ``(T, G, batch)``
    (``w`` is ``(G, input)``): one product.

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> node = NodeContext("n", "RNN", ("x",), ("y",), 14, KernelSet("llvm"))
    >>> project(node, np.ones((2, 3, 4)), np.ones((5, 4)), [np.arange(5.0)], 0,
    ...         np.dtype("f8"))[1, :, 0]
    array([4., 5., 6., 7., 8.])
    """
    x_indices = "btk" if layout else "tbk"
    sizes = {"t": x.shape[x_indices.index("t")], "b": x.shape[x_indices.index("b")],
             "k": x.shape[2], "r": w.shape[0]}
    kept = {i for i, n in sizes.items() if n != 1}
    if not kept & set("trb"):
        kept.add("r")
    bias_terms = [_indexed(f"B{n}", "r", kept) for n in range(len(biases))]
    operands = {f"B{n}": _dropped(bias, "r", kept) for n, bias in enumerate(biases)}
    if use_blas(dtype, sizes["r"] * sizes["k"] * sizes["t"] * sizes["b"]):
        node.note(f"BLAS (dense {sizes['r']}x{sizes['k']}x{sizes['t'] * sizes['b']})")
        flat = np.matmul(w.astype(dtype, copy=False),
                         x.reshape(-1, sizes["k"]).astype(dtype, copy=False).T)
        flat = flat.reshape(sizes["r"], *x.shape[:2])            # (G, T, B) or (G, B, T)
        if not biases:
            return np.ascontiguousarray(flat.transpose((1, 0, 2) if not layout else (2, 0, 1)))
        terms = [_indexed("A", "r" + x_indices[:2], kept)]
        operands["A"] = _dropped(flat, "r" + x_indices[:2], kept)
    else:
        terms = [f"{_indexed('W', 'rk', kept)} * {_indexed('X', x_indices, kept)}"]
        operands.update(W=_dropped(w, "rk", kept), X=_dropped(x, x_indices, kept))
    statement = f"{_indexed('Y', 'trb', kept)} = {' + '.join(terms + bias_terms)}"
    result = node.run(statement, dtype, **operands)
    return result.reshape(sizes["t"], sizes["r"], sizes["b"])


# ---------------------------------------------------------------------------------------------
# the order of the steps

@dataclass(frozen=True, slots=True)
class Order:
    """Which time each iteration of one direction handles per batch entry.

    ``times[k, b]``: the time iteration ``k`` reads and writes for entry ``b``; ``active[k, b]``
    whether that entry is still within its length; ``unmasked``: the iterations before the
    first inactive entry (they need no mask); ``uniform``: every entry at the same time in
    every iteration (the projection of iteration ``k`` is one time slice).
    """

    times: np.ndarray
    active: np.ndarray
    unmasked: int
    uniform: bool

    @property
    def steps(self) -> int:
        return self.times.shape[0]


def order(direction: str, steps: int, batch: int, lengths: np.ndarray | None) -> Order:
    """The :class:`Order` of a direction over sequences of ``lengths`` (None: all full).

    >>> o = order("reverse", 3, 2, np.array([3, 1]))
    >>> o.times.tolist(), o.active.tolist(), o.unmasked
    ([[2, 0], [1, 0], [0, 0]], [[True, True], [True, False], [True, False]], 1)
    """
    lengths = np.full(batch, steps, np.int64) if lengths is None else lengths.astype(np.int64)
    count = int(lengths.max()) if batch else 0
    k = np.arange(count)[:, None]
    active = k < lengths[None, :]
    times = k + np.zeros(batch, np.int64) if direction == "forward" else \
        np.maximum(lengths[None, :] - 1 - k, 0)
    uniform = direction == "forward" or bool(np.all(lengths == lengths[:1]))
    return Order(times, active, int(lengths.min()) if batch else 0, uniform)


# ---------------------------------------------------------------------------------------------
# one direction

class StepText:
    """How a step's statements index ``(hidden, batch)`` states, ``(hidden,)`` vectors and
    ``(batch,)`` masks: an axis of size 1 gets no index. ``batch_major`` states are
    ``(batch, hidden)`` instead (the static plan's, whose products run on the generated GEMM
    with the weight on the right); ``shape`` is a state's shape either way.

    >>> StepText(8, 1).state("H"), StepText(1, 4).hidden("P"), StepText(8, 4).batch("M")
    ('H(i)', 'P', 'M(j)')
    >>> StepText(8, 4, batch_major=True).state("H"), StepText(8, 4, batch_major=True).shape
    ('H(j,i)', (4, 8))
    """

    def __init__(self, hidden: int, batch: int, batch_major: bool = False) -> None:
        if batch == 1:
            self.state_indices, self.hidden_index, self.batch_index = "i", "i", ""
        elif hidden == 1:
            self.state_indices, self.hidden_index, self.batch_index = "j", "", "j"
        else:
            self.state_indices, self.hidden_index, self.batch_index = \
                "j,i" if batch_major else "i,j", "i", "j"
        self.shape = (batch, hidden) if batch_major else (hidden, batch)
        sizes = {"i": hidden, "j": batch}
        self.view_shape = tuple(sizes[index] for index in self.state_indices.split(","))

    def state(self, name: str) -> str:
        return f"{name}({self.state_indices})"

    def hidden(self, name: str) -> str:
        return f"{name}({self.hidden_index})" if self.hidden_index else name

    def batch(self, name: str) -> str:
        return f"{name}({self.batch_index})" if self.batch_index else name

    def view(self, array: np.ndarray) -> np.ndarray:
        """A ``(hidden, batch)`` array as the statements read it."""
        return array.reshape(self.view_shape)

    def vector(self, array: np.ndarray) -> np.ndarray:
        """A ``(hidden,)`` vector as the statements read it."""
        return array.reshape(-1) if self.hidden_index else array.reshape(())

    def mask(self, active: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """A ``(batch,)`` bool vector as the mask operand ``M`` (1 active, 0 not)."""
        return active.astype(dtype).reshape(-1 if self.batch_index else ())

    def masked(self, expression: str, old: str) -> str:
        """``expression`` where the entry is active, its ``old`` state elsewhere."""
        return f"where({self.batch('M')}, {expression}, {self.state(old)})"


@dataclass
class Direction:
    """What one direction's steps read: its weights, biases and activations, in ``dtype``;
    and the text of its step statements, built once (unmasked and masked)."""

    cfg: Config
    activations: tuple[Activation, ...]
    recurrence: np.ndarray                 # R, (G*H, H)
    recurrence_bias: np.ndarray | None     # GRU's Rb_h with linear_before_reset=1
    peepholes: np.ndarray | None           # (3, H): i, o, f
    text: StepText
    dtype: np.dtype
    statements: dict[bool, tuple[Statement, ...]] = field(default_factory=dict)

    def gate(self, *terms: str, activation: int = 0) -> str:
        """Activation ``activation`` (f, g, h) of the clipped sum of ``terms``."""
        return self.activations[activation].apply(self.cfg.clipped(" + ".join(terms)))

    def step_statements(self, masked: bool) -> tuple[Statement, ...]:
        """The statements of one step, in the order they run (see the module docstring)."""
        if masked not in self.statements:
            build = {"LSTM": lstm_statements, "GRU": gru_statements, "RNN": rnn_statements}
            self.statements[masked] = tuple(
                Statement.of(self.text, rhs) for rhs in build[self.cfg.op_type](self, masked))
        return self.statements[masked]


@dataclass(frozen=True, slots=True)
class Statement:
    """A step statement's text and the operands it reads (a kernel takes exactly those)."""

    text: str
    operands: tuple[str, ...]

    @staticmethod
    def of(text: StepText, rhs: str) -> Statement:
        statement = f"{text.state('Y')} = {rhs}"
        return Statement(statement, tuple(sorted(set(re.findall(r"\b([A-Z][A-Z0-9]*)\b",
                                                                  rhs)))))

    def run(self, node: NodeContext, dtype: np.dtype, operands: dict[str, np.ndarray]
            ) -> np.ndarray:
        return node.run(self.text, dtype, **{name: operands[name] for name in self.operands})


def lstm_statements(cell: Direction, masked: bool) -> tuple[str, str]:
    """The new cell state C' and hidden state of an LSTM step.

    Operands: ``XI, XO, XF, XC`` and ``RI, RO, RF, RC`` the gate blocks of the input projection
    and of ``R h``; ``C`` the cell state, ``N`` the new one; ``PI, PO, PF`` the peepholes;
    ``H`` the hidden state and ``M`` the mask (masked only)."""
    t, act = cell.text, cell.gate
    peep = {"I": "", "O": "", "F": ""}
    if cell.peepholes is not None:
        peep = {g: f" + {t.hidden('P' + g)} * {t.state('N' if g == 'O' else 'C')}"
                for g in "IOF"}
    i_gate = act(t.state("XI"), t.state("RI") + peep["I"])
    # input_forget couples the forget gate to the input gate: f = 1 - i (onnxruntime's rule).
    f_gate = f"1 + (-1) * ({i_gate})" if cell.cfg.input_forget else \
        act(t.state("XF"), t.state("RF") + peep["F"])
    cell_text = f"({f_gate}) * {t.state('C')} + ({i_gate}) * " \
                f"({act(t.state('XC'), t.state('RC'), activation=1)})"
    # h reads the cell state unclipped: clip bounds the gates' pre-activations only.
    hidden_text = f"({act(t.state('XO'), t.state('RO') + peep['O'])}) * " \
                  f"({cell.activations[2].apply(t.state('N'))})"
    if masked:
        return t.masked(cell_text, "C"), t.masked(hidden_text, "H")
    return cell_text, hidden_text


def gru_statements(cell: Direction, masked: bool) -> tuple[str, ...]:
    """The new hidden state of a GRU step; with ``linear_before_reset=0`` first ``r * H``
    (``RH`` then holds ``R_h (r * H)``). Operands: ``XZ, XR, XH`` and ``RZ, RR, RH`` the gate
    blocks, ``BH`` GRU's Rb_h, ``H`` the hidden state, ``M`` the mask."""
    t, act = cell.text, cell.gate
    update = act(t.state("XZ"), t.state("RZ"))
    reset = act(t.state("XR"), t.state("RR"))
    first: tuple[str, ...] = ()
    if cell.cfg.linear_before_reset:
        recurrent = t.state("RH")
        if cell.recurrence_bias is not None:
            recurrent = f"{recurrent} + {t.hidden('BH')}"
        candidate = act(t.state("XH"), f"({reset}) * ({recurrent})", activation=1)
    else:
        first = (f"({reset}) * {t.state('H')}",)
        candidate = act(t.state("XH"), t.state("RH"), activation=1)
    new = f"(1 + (-1) * ({update})) * ({candidate}) + ({update}) * {t.state('H')}"
    return first + (t.masked(new, "H") if masked else new,)


def rnn_statements(cell: Direction, masked: bool) -> tuple[str]:
    """The new hidden state of an RNN step (operands ``XI``, ``RI``, ``H``, ``M``)."""
    new = cell.gate(cell.text.state("XI"), cell.text.state("RI"))
    return (cell.text.masked(new, "H") if masked else new,)


def _blocks(prefix: str, array: np.ndarray, names: str, text: StepText) -> dict[str, np.ndarray]:
    """The gate blocks of a ``(G*H, batch)`` array as operands ``prefix + name``: contiguous
    row blocks, no copy."""
    hidden = text.shape[0]
    return {prefix + name: text.view(array[g * hidden:(g + 1) * hidden])
            for g, name in enumerate(names)}


def lstm_step(node: NodeContext, cell: Direction, xs: np.ndarray, h: np.ndarray,
              c: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """One LSTM step from projected inputs ``xs`` (4H, batch): the new ``(h, c)``."""
    t = cell.text
    new_cell, new_hidden = cell.step_statements(mask is not None)
    operands = {**_blocks("X", xs, GATE_NAMES["LSTM"], t),
                **_blocks("R", product(node, cell.recurrence, h, cell.dtype),
                          GATE_NAMES["LSTM"], t),
                "C": t.view(c), "H": t.view(h), "M": mask}
    if cell.peepholes is not None:
        operands.update({f"P{g}": t.vector(cell.peepholes[k]) for k, g in enumerate("IOF")})
    operands["N"] = new_cell.run(node, cell.dtype, operands)
    return new_hidden.run(node, cell.dtype, operands).reshape(t.shape), \
        operands["N"].reshape(t.shape)


def gru_step(node: NodeContext, cell: Direction, xs: np.ndarray, h: np.ndarray,
             mask: np.ndarray | None) -> np.ndarray:
    """One GRU step from projected inputs ``xs`` (3H, batch): the new ``h``."""
    t, hidden = cell.text, cell.text.shape[0]
    statements = cell.step_statements(mask is not None)
    operands = {**_blocks("X", xs, GATE_NAMES["GRU"], t), "H": t.view(h), "M": mask}
    if cell.cfg.linear_before_reset:
        operands.update(_blocks("R", product(node, cell.recurrence, h, cell.dtype),
                                GATE_NAMES["GRU"], t))
        if cell.recurrence_bias is not None:
            operands["BH"] = t.vector(cell.recurrence_bias)
    else:
        # R_h multiplies r * H, which needs r first: a statement, a product, then the rest.
        operands.update(_blocks("R", product(node, cell.recurrence[:2 * hidden], h, cell.dtype),
                                "ZR", t))
        gated = statements[0].run(node, cell.dtype, operands).reshape(t.shape)
        operands["RH"] = t.view(product(node, cell.recurrence[2 * hidden:], gated, cell.dtype))
    return statements[-1].run(node, cell.dtype, operands).reshape(t.shape)


def rnn_step(node: NodeContext, cell: Direction, xs: np.ndarray, h: np.ndarray,
             mask: np.ndarray | None) -> np.ndarray:
    """One RNN step from projected inputs ``xs`` (H, batch): the new ``h``."""
    t = cell.text
    (statement,) = cell.step_statements(mask is not None)
    operands = {"XI": t.view(xs), "RI": t.view(product(node, cell.recurrence, h, cell.dtype)),
                "H": t.view(h), "M": mask}
    return statement.run(node, cell.dtype, operands).reshape(t.shape)


def run_direction(node: NodeContext, cell: Direction, projected: np.ndarray, steps: Order,
                  h: np.ndarray, c: np.ndarray | None
                  ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray | None]:
    """Every step of one direction: the state after each iteration, and the last ``h``, ``c``.

    ``projected`` is ``(T, G*H, batch)``; iteration ``k`` reads it at ``steps.times[k]``."""
    if not steps.uniform:     # each entry at its own time: gather once (data movement)
        batch = np.arange(projected.shape[2])
        projected = np.ascontiguousarray(
            projected[steps.times, :, batch[None, :]].transpose(0, 2, 1))
        times = range(steps.steps)
    else:
        times = steps.times[:, 0] if steps.times.shape[1] else range(steps.steps)
    states = []
    for k, time in enumerate(times):
        xs = projected[time]
        mask = None if k < steps.unmasked else cell.text.mask(steps.active[k], cell.dtype)
        if cell.cfg.op_type == "LSTM":
            h, c = lstm_step(node, cell, xs, h, c, mask)
        elif cell.cfg.op_type == "GRU":
            h = gru_step(node, cell, xs, h, mask)
        else:
            h = rnn_step(node, cell, xs, h, mask)
        states.append(h)
    return states, h, c


# ---------------------------------------------------------------------------------------------
# the node

def _initial(state: np.ndarray | None, d: int, layout: int, shape: tuple[int, int],
             dtype: np.dtype) -> np.ndarray:
    """Direction ``d``'s initial state, transposed to ``(hidden, batch)`` (zeros if absent)."""
    if state is None:
        return np.zeros(shape, dtype)
    return np.ascontiguousarray((state[:, d] if layout else state[d]).T, dtype=dtype)


def split_biases(cfg: Config, b: np.ndarray | None, hidden: int
                 ) -> tuple[list[np.ndarray], np.ndarray | None]:
    """The bias vectors folded into the input projection (Wb and Rb), and GRU's Rb_h when
    ``linear_before_reset=1``: it belongs inside ``r * (R_h h + Rb_h)``, so it is taken out
    of the projection's Rb (zeroed there: data movement) and added in the step.

    >>> cfg = config("GRU", {"hidden_size": 1, "linear_before_reset": 1})
    >>> (wb, rb), inner = split_biases(cfg, np.arange(6.0), 1)
    >>> rb.tolist(), inner.tolist()
    ([3.0, 4.0, 0.0], [5.0])
    """
    if b is None:
        return [], None
    size = GATES[cfg.op_type] * hidden
    wb, rb = b[:size], b[size:]
    if cfg.op_type != "GRU" or not cfg.linear_before_reset:
        return [wb, rb], None
    inner = rb[2 * hidden:].copy()
    rb = rb.copy()
    rb[2 * hidden:] = 0
    return [wb, rb], inner


def _scatter(y: np.ndarray, states: list[np.ndarray], steps: Order) -> None:
    """Copy each iteration's ``(hidden, batch)`` state into ``y`` ``(T, batch, hidden)`` at
    its time, for the active entries only (the rest of ``y`` stays 0)."""
    if not states:
        return
    stacked = np.stack(states).transpose(0, 2, 1)                 # (K, batch, hidden)
    if steps.uniform and steps.unmasked == steps.steps:
        y[steps.times[:, 0]] = stacked
        return
    entries = np.broadcast_to(np.arange(y.shape[1]), steps.active.shape)
    y[steps.times[steps.active], entries[steps.active]] = stacked[steps.active]


def _plan_note(node: NodeContext, cfg: Config, steps: int) -> None:
    products, statements = (2, 2) if cfg.op_type == "GRU" and not cfg.linear_before_reset \
        else (1, 2 if cfg.op_type == "LSTM" else 1)
    each = " per direction" if len(cfg.directions) > 1 else ""
    node.note(f"{cfg.op_type}: input projection as one product over {steps} steps{each}, "
              f"per step {products} product{'s' * (products > 1)} + {statements} "
              f"statement{'s' * (statements > 1)}")


def recurrent(node: NodeContext, cfg: Config, x: np.ndarray, w: np.ndarray, r: np.ndarray,
              b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
              initial_h: np.ndarray | None = None, initial_c: np.ndarray | None = None,
              p: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """The outputs ``(Y, Y_h[, Y_c])`` of an LSTM, GRU or RNN node (see the module docstring).

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> node = NodeContext("n", "RNN", ("x", "w", "r"), ("y", "y_h"), 14, KernelSet("llvm"))
    >>> cfg = config("RNN", {"hidden_size": 2, "activations": ["Relu"]})
    >>> y, y_h = recurrent(node, cfg, np.ones((3, 1, 1)), np.ones((1, 2, 1)),
    ...                    np.zeros((1, 2, 2)))
    >>> y.shape, y_h.tolist()
    ((3, 1, 1, 2), [[[1.0, 1.0]]])
    """
    sizes = check_shapes(node, cfg, x, w, r, b, sequence_lens, initial_h, initial_c, p)
    if sizes.hidden < 1:
        raise ta.ShapeError(f"{node}: the hidden size (R's last dimension) is 0")
    dtype = compute_dtype(x.dtype, needs_float=True)
    hidden, batch, lstm = sizes.hidden, sizes.batch, cfg.op_type == "LSTM"
    text = StepText(hidden, batch)
    y = np.zeros((sizes.steps, sizes.directions, batch, hidden), dtype) \
        if node.outputs and node.outputs[0] else None
    last_h, last_c = [], []
    for d, direction in enumerate(cfg.directions):
        h = _initial(initial_h, d, cfg.layout, text.shape, dtype)
        c = _initial(initial_c, d, cfg.layout, text.shape, dtype) if lstm else None
        steps = order(direction, sizes.steps, batch, sequence_lens)
        if steps.steps:
            biases, inner = split_biases(cfg, None if b is None else b[d], hidden)
            cell = Direction(cfg, cfg.activations[d], r[d].astype(dtype, copy=False), inner,
                             None if p is None else p[d].reshape(3, hidden), text, dtype)
            projected = project(node, x, w[d], biases, cfg.layout, dtype)
            states, h, c = run_direction(node, cell, projected, steps, h, c)
            _plan_note(node, cfg, sizes.steps)
            if y is not None:
                _scatter(y[:, d], states, steps)
        last_h.append(h.T)
        last_c.append(c.T if lstm else None)
    states_axes = (1, 0, 2) if cfg.layout else (0, 1, 2)
    outputs = [None if y is None else y.transpose((2, 0, 1, 3) if cfg.layout else (0, 1, 2, 3)),
               np.stack(last_h).transpose(states_axes)]
    if lstm:
        outputs.append(np.stack(last_c).transpose(states_axes))
    return tuple(None if out is None else np.ascontiguousarray(out).astype(x.dtype, copy=False)
                 for out in outputs)


# ---------------------------------------------------------------------------------------------
# registrations: opset 14 added ``layout``

@op("LSTM", since=14, check=_check("LSTM"))
def lstm(node: NodeContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
         b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
         initial_h: np.ndarray | None = None, initial_c: np.ndarray | None = None,
         p: np.ndarray | None = None, *, hidden_size: int | None = None,
         direction: str = "forward", activations: list[str] | None = None,
         activation_alpha: list[float] | None = None,
         activation_beta: list[float] | None = None, clip: float | None = None,
         input_forget: int = 0, layout: int = 0) -> tuple[np.ndarray, ...]:
    """``(Y, Y_h, Y_c)`` of a one-layer LSTM (gates iofc, optional peepholes P)."""
    cfg = config("LSTM", dict(hidden_size=hidden_size, direction=direction,
                              activations=activations, activation_alpha=activation_alpha,
                              activation_beta=activation_beta, clip=clip,
                              input_forget=input_forget, layout=layout))
    return recurrent(node, cfg, x, w, r, b, sequence_lens, initial_h, initial_c, p)


@op("LSTM", since=7, check=_check("LSTM"))
def lstm_7(node: NodeContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
           b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
           initial_h: np.ndarray | None = None, initial_c: np.ndarray | None = None,
           p: np.ndarray | None = None, *, hidden_size: int | None = None,
           direction: str = "forward", activations: list[str] | None = None,
           activation_alpha: list[float] | None = None,
           activation_beta: list[float] | None = None, clip: float | None = None,
           input_forget: int = 0) -> tuple[np.ndarray, ...]:
    """LSTM before opset 14: no ``layout`` (X is [seq, batch, input])."""
    return lstm(node, x, w, r, b, sequence_lens, initial_h, initial_c, p,
                hidden_size=hidden_size, direction=direction, activations=activations,
                activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                input_forget=input_forget)


@op("GRU", since=14, check=_check("GRU"))
def gru(node: NodeContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
        b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
        initial_h: np.ndarray | None = None, *, hidden_size: int | None = None,
        direction: str = "forward", activations: list[str] | None = None,
        activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None, clip: float | None = None,
        linear_before_reset: int = 0, layout: int = 0) -> tuple[np.ndarray, ...]:
    """``(Y, Y_h)`` of a one-layer GRU (gates zrh)."""
    cfg = config("GRU", dict(hidden_size=hidden_size, direction=direction,
                             activations=activations, activation_alpha=activation_alpha,
                             activation_beta=activation_beta, clip=clip,
                             linear_before_reset=linear_before_reset, layout=layout))
    return recurrent(node, cfg, x, w, r, b, sequence_lens, initial_h)


@op("GRU", since=7, check=_check("GRU"))
def gru_7(node: NodeContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
          b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
          initial_h: np.ndarray | None = None, *, hidden_size: int | None = None,
          direction: str = "forward", activations: list[str] | None = None,
          activation_alpha: list[float] | None = None,
          activation_beta: list[float] | None = None, clip: float | None = None,
          linear_before_reset: int = 0) -> tuple[np.ndarray, ...]:
    """GRU before opset 14: no ``layout``."""
    return gru(node, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size,
               direction=direction, activations=activations,
               activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
               linear_before_reset=linear_before_reset)


@op("RNN", since=14, check=_check("RNN"))
def rnn(node: NodeContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
        b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
        initial_h: np.ndarray | None = None, *, hidden_size: int | None = None,
        direction: str = "forward", activations: list[str] | None = None,
        activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None, clip: float | None = None,
        layout: int = 0) -> tuple[np.ndarray, ...]:
    """``(Y, Y_h)`` of a one-layer simple RNN."""
    cfg = config("RNN", dict(hidden_size=hidden_size, direction=direction,
                             activations=activations, activation_alpha=activation_alpha,
                             activation_beta=activation_beta, clip=clip, layout=layout))
    return recurrent(node, cfg, x, w, r, b, sequence_lens, initial_h)


@op("RNN", since=7, check=_check("RNN"))
def rnn_7(node: NodeContext, x: np.ndarray, w: np.ndarray, r: np.ndarray,
          b: np.ndarray | None = None, sequence_lens: np.ndarray | None = None,
          initial_h: np.ndarray | None = None, *, hidden_size: int | None = None,
          direction: str = "forward", activations: list[str] | None = None,
          activation_alpha: list[float] | None = None,
          activation_beta: list[float] | None = None, clip: float | None = None
          ) -> tuple[np.ndarray, ...]:
    """RNN before opset 14: no ``layout``."""
    return rnn(node, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size,
               direction=direction, activations=activations,
               activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip)
