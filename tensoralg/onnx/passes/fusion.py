"""Opt level 2 fusion: an elementwise chain, and the contraction feeding it, as ONE statement.

A *fused program* replaces a group of nodes: elementwise nodes whose intermediate values have
exactly one consumer, all inside the group, optionally headed by the MatMul or Gemm that
produces one of the chain's inputs. It runs as a single tensoralg statement, for example

    Y(i,j) = max((sum(k, A(i,k) * B(k,j)) + C(j)), 0)        # Gemm -> Relu

The sum is written explicitly: the core sums a missing index over the *smallest* subexpression
holding its uses, which is the product, but ``sum(k, ...)`` says so and survives edits.

Run time decides what each call can do, and the plan (``print_ir``) records it:
- the chain computes in the dtype of its inputs; a chain whose inputs are not all float32 or
  all float64 runs its original nodes one by one (integer Div, mixed dtypes);
- a dense contraction large enough for BLAS (``use_blas``) runs in BLAS and only the epilogue
  is fused; a batched (N-D) MatMul also runs on its own;
- a *sparse weight* (opt level 3, :mod:`tensoralg.onnx.passes.sparse_weights`) keeps the contraction in
  the statement as a sparse kernel: CSC weight and loop order i, j, k for small batches (a
  sparse dot product per output), or, from ``TRANSPOSE_MIN_ROWS`` rows on, the transposed
  statement ``Y(j,i) = ... sum(k, W(j,k) * X(k,i)) ...`` with W in CSR, whose innermost loop
  runs over the batch in unit stride.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Graph, Node, consumers_of
from tensoralg.onnx.ops.elementwise import (
    HARD_SWISH,
    MISH,
    SELU_ALPHA,
    SELU_GAMMA,
    SOFTPLUS,
    elu_template,
    erf_template,
    selu_template,
)
from tensoralg.onnx.ops.kernels import (
    INDICES,
    OPERANDS,
    NodeContext,
    access,
    coalesced,
    literal,
    unit_free,
    without_units,
)
from tensoralg.onnx.ops.matmul import use_blas
from tensoralg.onnx.ops.registry import OpImpl
from tensoralg.onnx.ops.variadic import variadic_template
from tensoralg.onnx.passes.quantized import fake_quantized, shifted_text
from tensoralg.onnx.plan.executor import call_node
from tensoralg.program import RELU, Activation, as_activation

MAX_GROUP = 16          # nodes per fused statement (compile time grows with the statement)
# How many copies of one value's text a statement may hold: a template that reads an input
# twice (LeakyRelu's max and min, a fake quantization's clamp) copies that input's whole
# subexpression, so a chain of such nodes doubles the text at each step (GPT-2's GELU in a
# QDQ model, ten quantize-dequantize pairs deep, made a statement of 2^10 copies: 0.5 ms a
# call and seconds to compile, 2026-12-07). A producer whose text would be copied more often
# stays a program of its own, and the group reads its result. The first copying template
# on a path is not counted (its copies are the template's own, a GELU's of its bias-add).
MAX_COPIES = 4
TRANSPOSE_MIN_ROWS = 8  # sparse weights: batch from which the transposed statement is used
MULTI_HOT_MAX_DENSITY = 0.25  # a graph-input MatMul operand this sparse goes in CSR
# Building CSR from a dense input scans every entry (about as costly as ~40 BLAS multiply-adds
# per entry here), so the CSR path only pays when the table is at least this wide.
MULTI_HOT_MIN_COLUMNS = 64
# The generated sparse-weight kernel (transposed form: the batch in unit stride, held in
# register tiles) against BLAS on the dense weight, 256x256x512 float32: 3x faster at 10%
# nonzeros, 2x at 20%, 1.4x at 30% (`python benchmarks/sparse_weight_kernel.py`; before the
# register tiles it was even at 20%); a BLAS-sized contraction keeps the dense weight above
# this density, which the default threshold (70% zeros) never reaches.
SPARSE_WEIGHT_MAX_DENSITY_WITH_BLAS = 0.3
NARROW_PRODUCT_COLUMNS = 4  # a dense product this narrow reads its weight transposed
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
PRODUCT = "<product>"  # the value name of a head's BLAS product inside a fused program
# Ops a chain over one signed integer dtype may hold and still run as one statement: their
# integer results are exact and wrap as NumPy's do (no division, no float function).
# Exported position ids are such a chain: OPT's ``cumsum(mask) * mask - 1 + 2``, three Python
# steps a call otherwise.
INTEGER_OPS = frozenset({"Add", "Sub", "Mul", "Neg", "Abs"})
INTEGERS = (np.dtype(np.int32), np.dtype(np.int64))


def statement_dtype(program: "Program", dtypes: set[np.dtype]) -> np.dtype | None:
    """The one dtype ``program`` runs as a statement in, given its inputs' ``dtypes``: a
    float dtype, or a signed integer one for a chain of :data:`INTEGER_OPS` with no
    contraction; None when its nodes run one by one."""
    if len(dtypes) != 1:
        return None
    dtype = next(iter(dtypes))
    if dtype in FLOATS:
        return dtype
    if dtype in INTEGERS and program.head is None and \
            all(node.op_type in INTEGER_OPS for node in program.nodes):
        return dtype
    return None


def gelu_text(attributes: dict[str, Any], a: str) -> str:
    """Statement text of ``Gelu(a)`` with the node's ``attributes`` (the erf or tanh form)."""
    if attributes.get("approximate", "none") == "tanh":
        return (f"(0.5 * {a} * (1 + tanh(0.7978845608028654 * ({a} + 0.044715 * {a} * {a} "
                f"* {a}))))")
    return f"(0.5 * {a} * (1 + {erf_template(f'({a} * 0.7071067811865476)')}))"


def _clip(attributes: dict[str, Any], x: str, low: str | None = None,
          high: str | None = None) -> str:
    text = x
    if low is not None:
        text = f"max({text}, {low})"
    if high is not None:
        text = f"min({text}, {high})"
    return text


def fused(attributes: dict[str, Any]) -> Activation | None:
    """A Conv's fused :class:`Activation`, or None without one."""
    activation = attributes.get("activation")
    if activation is not None and not isinstance(activation, Activation):
        raise TypeError(f"a fused activation is an Activation, not {activation!r}")
    return activation


def activation_bounds(attributes: dict[str, Any]) -> tuple[float, float] | None:
    """The ``(low, high)`` clamp of a Conv's fused activation, or None without one."""
    activation = fused(attributes)
    return None if activation is None else activation.bounds


def fused_activation(attributes: dict[str, Any]) -> bool | tuple[float, float]:
    """A Conv's fused activation as the kernels' ``relu`` parameter takes it: False (none),
    True (ReLU) or a Clip's bounds."""
    activation = fused(attributes)
    return False if activation is None else activation.kernel_argument


def clamp_text(body: str, activation: Any) -> str:
    """Statement text of ``body`` under a :func:`fused_activation`: ``max(body, 0)`` for ReLU,
    ``min(max(body, low), high)`` for a Clip (an infinite bound left out), and the smooth
    kinds' formulas (``Activation.text``)."""
    fused = as_activation(activation)
    return body if fused is None else fused.text(body)


# ONNX elementwise op -> statement text of its output from its inputs' texts (floats only).
TEMPLATES: dict[str, Callable[..., str]] = {
    "Add": lambda _, a, b: f"({a} + {b})",
    "Sub": lambda _, a, b: f"({a} - {b})",
    "Mul": lambda _, a, b: f"({a} * {b})",
    "Div": lambda _, a, b: f"({a} / {b})",
    "Pow": lambda _, a, b: f"pow({a}, {b})",
    "Neg": lambda _, a: f"(-{a})",
    "Abs": lambda _, a: f"abs({a})",
    "Relu": lambda _, a: f"max({a}, 0)",
    "Sigmoid": lambda _, a: f"sigmoid({a})",
    "Tanh": lambda _, a: f"tanh({a})",
    "Exp": lambda _, a: f"exp({a})",
    "Log": lambda _, a: f"log({a})",
    "Sqrt": lambda _, a: f"sqrt({a})",
    "Sin": lambda _, a: f"sin({a})",
    "Cos": lambda _, a: f"cos({a})",
    "Floor": lambda _, a: f"floor({a})",
    "Ceil": lambda _, a: f"ceil({a})",
    "Round": lambda _, a: f"round({a})",
    "QuantizeDequantize": lambda at, a, s, z, d=None: "(" + fake_quantized(
        a, s, z, at["low"], at["high"], d) + ")",
    "QuantizeShift": lambda at, a, s, z: shifted_text(a, s, z, at["low"], at["high"]),
    "Reciprocal": lambda _, a: f"(1 / {a})",
    "Softplus": lambda _, a: f"({SOFTPLUS.format(a)})",
    "Identity": lambda _, a: a,
    "Erf": lambda _, a: f"({erf_template(a)})",
    "Gelu": gelu_text,
    "Clip": _clip,
    "LeakyRelu": lambda at, a: (f"(max({a}, 0) + {literal(at.get('alpha', 0.01))} * "
                                f"min({a}, 0))"),
    "HardSigmoid": lambda at, a: (f"max(0, min(1, {literal(at.get('alpha', 0.2))} * {a} + "
                                  f"{literal(at.get('beta', 0.5))}))"),
    "HardSwish": lambda _, a: f"({HARD_SWISH.format(a)})",
    "Elu": lambda at, a: f"({elu_template(at.get('alpha', 1.0)).format(a)})",
    "Selu": lambda at, a: "(" + selu_template(at.get("alpha", SELU_ALPHA),
                                              at.get("gamma", SELU_GAMMA)).format(a) + ")",
    "Mish": lambda _, a: f"({MISH.format(a)})",
    "Sum": lambda _, *args: f"({variadic_template('Sum', args)})",
    "Mean": lambda _, *args: f"({variadic_template('Mean', args)})",
    "Max": lambda _, *args: variadic_template("Max", args),
    "Min": lambda _, *args: variadic_template("Min", args),
}
CONTRACTIONS = ("MatMul", "Gemm")
# Ops whose output is a bool in ONNX but whose template is a 0/1 float inside a statement: they
# join a group only as the condition of a ``Where`` in it (see :func:`_joins`), so a program
# never outputs one. ``where(isnan(x), 0, x)`` guards the softmax of exported attention.
CONDITIONS: dict[str, Callable[..., str]] = {
    "IsNaN": lambda _, a: f"ne({a}, {a})",
}
TEMPLATES.update(CONDITIONS)
TEMPLATES["Where"] = lambda _, c, a, b: f"where({c}, {a}, {b})"


@dataclass
class Program:
    """A fused group: the nodes it replaces (topological order), its external inputs, its
    output, and the contraction heading it (if any), with the sparse weight level 3 chose."""

    nodes: tuple[Node, ...]
    externals: tuple[str, ...]
    output: str
    head: Node | None = None
    sparse: Any = None                      # (CSR of W^T, CSC of W) for a sparse head weight
    sparse_name: str | None = None          # the weight's constant name
    multi_hot: bool = False                 # head input is a graph input: CSR when mostly 0
    square_of: str | None = None            # head input is Mul(g, g) of this graph input g
    multi_hot_readers: int = 0              # programs whose head reads that graph input's CSR
    cache: dict[Any, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        head = f"{self.head.op_type} + " if self.head is not None else ""
        chain = " -> ".join(n.op_type for n in self.nodes if n is not self.head)
        return f"fused {head}{chain or '(no epilogue)'}"


def fused_node(program: Program, name: str) -> Node:
    """The graph node that runs ``program``."""
    return Node(name, "Fused", program.externals, (program.output,), {"program": program}, 1,
                FUSED)


def run_program(context: NodeContext, *arrays: np.ndarray, program: Program) -> np.ndarray:
    """Run ``program`` on its external inputs (see the module docstring for the run-time
    choices)."""
    values = {name: np.asarray(a) for name, a in zip(program.externals, arrays)}
    dtype = statement_dtype(program, {a.dtype for a in values.values()})
    if dtype is None:
        context.note("not fused at run time (mixed dtypes, or integers through ops other than "
                     "Add, Sub, Mul, Neg, Abs): nodes run one by one")
        return _run_nodes(context, program, values, program.nodes)
    chain = [n for n in program.nodes if n is not program.head]
    head = program.head
    inline = None
    flat = flattened_head(program, values)
    if flat is not None:
        # An N-D MatMul by a 2-D weight is one 2-D product over the leading dimensions.
        values, shape = flat
        return run_program_flat(context, program, values, dtype).reshape(shape)
    if head is not None:
        inline = inline_head(program, head, values, dtype)
        if inline is None:
            values.update(_run_nodes(context, program, values, [head], keep=True))
            if not chain:
                return values[head.outputs[0]]
        elif inline["blas"]:  # BLAS product; the rest of the Gemm joins the epilogue
            a, b = values[head.inputs[0]], values[head.inputs[1]]
            a = a.T if inline["trans_a"] else a
            b = b.T if inline["trans_b"] else b
            context.note(f"BLAS (dense {a.shape[0]}x{a.shape[1]}x{b.shape[1]}) then:")
            values[PRODUCT] = np.matmul(a, b)
    if not chain:  # a lone sparse contraction
        return _run_statement(context, program, values, dtype, inline, head.outputs[0])
    return _run_statement(context, program, values, dtype, inline, program.output)


def inline_head(program: Program, head: Node, values: dict[str, np.ndarray],
                 dtype: np.dtype) -> dict[str, Any] | None:
    """How the head contraction enters the statement, or None to run it on its own."""
    a, b = values[head.inputs[0]], program_weight(program, values)
    if a.ndim != 2 or (b is not None and b.ndim != 2):
        return None
    attrs = head.attributes
    trans_a = head.op_type == "Gemm" and attrs.get("transA", 0)
    trans_b = head.op_type == "Gemm" and attrs.get("transB", 0)
    m, k = a.shape[::-1] if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    epilogue = [values[name].shape for node in program.nodes if node is not head
                for name in node.inputs if name and name in values]
    try:
        widened = np.broadcast_shapes((m, n), *epilogue) != (m, n)
    except ValueError:
        widened = True      # the nodes, run one by one, say what does not broadcast
    if widened:
        return None         # an epilogue that broadcasts the product to more dimensions
    csr_a = program.multi_hot and program.sparse is None and not trans_a and \
        n >= MULTI_HOT_MIN_COLUMNS and np.count_nonzero(a) <= MULTI_HOT_MAX_DENSITY * a.size
    dense_weight_wins = program.sparse is not None and use_blas(dtype, m * k * n) and \
        program.sparse[0].nnz > SPARSE_WEIGHT_MAX_DENSITY_WITH_BLAS * k * n
    blas = (program.sparse is None or dense_weight_wins) and not csr_a and \
        use_blas(dtype, m * k * n)
    return {"m": m, "n": n, "trans_a": trans_a, "trans_b": trans_b, "blas": blas,
            "csr_a": csr_a,
            "transposed": program.sparse is not None and not blas and m >= TRANSPOSE_MIN_ROWS}


def run_program_flat(context: NodeContext, program: Program, values: dict[str, np.ndarray],
                     dtype: np.dtype) -> np.ndarray:
    """:func:`run_program` on the 2-D values of :func:`flattened_head` (the head inlines)."""
    head = program.head
    inline = inline_head(program, head, values, dtype)
    assert inline is not None      # flattened_head checked that the epilogue is 2-D
    if inline["blas"]:
        a, b = values[head.inputs[0]], values[head.inputs[1]]
        context.note(f"BLAS (dense {a.shape[0]}x{a.shape[1]}x{b.shape[1]}, leading "
                     f"dimensions flattened) then:")
        values = dict(values)
        values[PRODUCT] = np.matmul(a, b)
    chain = [n for n in program.nodes if n is not head]
    return _run_statement(context, program, values, dtype, inline,
                          program.output if chain else head.outputs[0])


def flattened_head(program: Program, values: dict[str, np.ndarray]
                   ) -> tuple[dict[str, np.ndarray], tuple[int, ...]] | None:
    """The values of a program headed by ``MatMul(A, W)`` with an N-D ``A`` (N > 2) and a 2-D
    ``W`` (a transformer's projections, ``(batch, tokens, hidden) @ (hidden, out)``) viewed as
    one 2-D product: ``A`` as ``(rows, K)`` and every epilogue operand as ``(rows or 1,
    n or 1)``; and the program's output shape. None when the program is not of that form or an
    epilogue operand broadcasts over only some of the leading dimensions (it has no 2-D view).

    >>> mm = Node("m", "MatMul", ("a", "w"), ("p",), {}, 13, None)
    >>> add = Node("s", "Add", ("p", "r"), ("y",), {}, 14, None)
    >>> program = Program((mm, add), ("a", "w", "r"), "y", mm)
    >>> flat, shape = flattened_head(program, {"a": np.ones((2, 3, 4)), "w": np.ones((4, 5)),
    ...                                        "r": np.ones((2, 3, 5))})
    >>> flat["a"].shape, flat["r"].shape, shape
    ((6, 4), (6, 5), (2, 3, 5))
    """
    head = program.head
    if head is None or head.op_type != "MatMul" or program.sparse is not None or \
            program.multi_hot or program.square_of:
        return None
    a, w = values.get(head.inputs[0]), values.get(head.inputs[1])
    if a is None or w is None or a.ndim <= 2 or w.ndim != 2 or a.shape[-1] != w.shape[0]:
        return None
    lead, n = a.shape[:-1], w.shape[1]
    full = (*lead, n)
    rows = math.prod(lead)
    flat = {name: value for name, value in values.items()}
    flat[head.inputs[0]] = a.reshape(rows, a.shape[-1])
    for name in program.externals:
        if name in head.inputs[:2]:
            continue
        value = values[name]
        if value.ndim > len(full):
            return None
        shape = (1,) * (len(full) - value.ndim) + value.shape
        if any(d not in (1, f) for d, f in zip(shape, full)):
            return None
        if all(d == 1 for d in shape[:-1]):
            height = 1
        elif shape[:-1] == lead:
            height = rows
        else:
            return None       # broadcast over some leading dimensions only
        flat[name] = value.reshape(height, shape[-1])
    return flat, full


def program_weight(program: Program, values: dict[str, np.ndarray]) -> np.ndarray | None:
    head = program.head
    return values.get(head.inputs[1]) if head is not None else None


def _run_nodes(context: NodeContext, program: Program, values: dict[str, np.ndarray],
               nodes: Any, keep: bool = False) -> Any:
    local = run_original(context, nodes, values, program.cache)
    if keep:
        return {name: local[name] for node in nodes for name in node.outputs if name}
    return local[program.output]


def run_original(context: NodeContext, nodes: Any, values: dict[str, np.ndarray],
                 cache: dict[Any, Any]) -> dict[str, np.ndarray]:
    """Run the original ``nodes`` one by one (the fallback of a rewritten group); their
    decisions are noted in ``context``'s plan."""
    local = dict(values)
    for node in nodes:
        sub = cache.get(("context", node.name))
        if sub is None:
            sub = NodeContext(node.name, node.op_type, node.inputs, node.outputs, node.version,
                              context.kernels)
            cache[("context", node.name)] = sub
        # A recording run captures the nodes' kernel calls as the group's own (a static plan
        # may replay them: ``static_steps._captured``).
        sub.capture = context.capture
        try:
            local.update(call_node(node, sub, local))
        finally:
            sub.capture = None
        for text in sub.plan:
            context.note(f"{node.name}: {text}")
    return local


def _run_statement(context: NodeContext, program: Program, values: dict[str, np.ndarray],
                   dtype: np.dtype, inline: dict[str, Any] | None, output: str) -> np.ndarray:
    key = (dtype.str, None if inline is None else tuple(sorted(inline.items())),
           tuple((name, a.shape) for name, a in values.items()))
    built = program.cache.get(key)
    if built is None:
        built = build_statement(program, values, inline, output)
        program.cache[key] = built
    statement, operands, formats, out_shape, transposed = built
    arrays = {}
    for letter, (name, shape, kind) in operands.items():
        value = values.get(name)
        if kind == "sparse weight":
            value = program.sparse[0 if transposed else 1]
        elif kind == "csr":
            context.note(f"multi-hot input {name} in CSR (<= {MULTI_HOT_MAX_DENSITY:.0%} "
                         f"nonzeros)")
            value = sp.csr_array(value)
        elif kind == "transpose":
            value = np.ascontiguousarray(value.T).reshape(shape)
        else:
            value = value.reshape(shape)
        arrays[letter] = value
    result = context.run(statement, dtype, formats, **arrays)
    if transposed:
        return np.ascontiguousarray(result.reshape(out_shape[::-1]).T)
    return result.reshape(_full_shape(program, values, inline))


def _full_shape(program: Program, values: dict[str, np.ndarray], inline: dict[str, Any] | None
                ) -> tuple[int, ...]:
    """The shape of a program's output (its statement's output may leave out axes of size
    1: see :func:`build_statement`): every operand broadcast together."""
    chain = [n for n in program.nodes if n is not program.head]
    shapes = [values[name].shape for node in chain for name in node.inputs
              if name and name in values]
    if inline is not None:
        shapes.append((inline["m"], inline["n"]))
    elif program.head is not None and program.head.outputs[0] in values:
        shapes.append(values[program.head.outputs[0]].shape)
    return tuple(np.broadcast_shapes(*shapes))


def build_statement(program: Program, values: dict[str, np.ndarray], inline: dict[str, Any] | None,
           output: str) -> tuple[str, dict[str, Any], dict[str, Any], tuple[int, ...], bool]:
    """The statement text of ``program`` for these input shapes, and how to pass operands."""
    chain = [n for n in program.nodes if n is not program.head]
    full = _full_shape(program, values, inline)
    if inline is not None and full != (inline["m"], inline["n"]):
        raise ta.ShapeError(f"{program}: the epilogue broadcasts the {inline['m']}x"
                            f"{inline['n']} product to {full}")
    # Without an inlined head every operand is an external input: neighbouring axes that every
    # operand has or broadcasts alike merge into one (``coalesced``), axes of size 1 leave the
    # statement (``unit_free``), and ``out_shape`` is the kernel's output shape.
    if inline is None:
        # The operands the epilogue reads (the head's own inputs, when the head ran apart,
        # need not broadcast with its output).
        read = [name for node in chain for name in node.inputs if name and name in values]
        if program.head is not None and program.head.outputs[0] in values:
            read.append(program.head.outputs[0])
        names = list(dict.fromkeys(read))
        merged = coalesced(full, [values[name].shape for name in names])
        if merged is not None:
            full = merged[0]
            values = dict(values)
            values.update((name, values[name].reshape(shape))
                          for name, shape in zip(names, merged[1]))
    kept = tuple(range(len(full))) if inline is not None else unit_free(full)
    out_shape = tuple(full[d] for d in kept)
    indices = INDICES[:len(out_shape)]
    operands: dict[str, tuple[str, tuple[int, ...], bool]] = {}
    letters: dict[str, str] = {}
    texts: dict[str, str] = {}

    def letter(name: Any) -> str:
        if name not in letters:
            if len(letters) >= len(OPERANDS):
                raise ta.UnsupportedError(f"{program}: more than {len(OPERANDS)} operands")
            letters[name] = OPERANDS[len(letters)]
        return letters[name]

    formats: dict[str, Any] = {}
    transposed = bool(inline and inline["transposed"])
    if inline is not None:
        texts[program.head.outputs[0]] = _head_text(program, values, inline, letter, operands,
                                                    formats)
    producers = {node.outputs[0]: node for node in chain}

    def text_of(name: str) -> str:
        if name in texts:
            return texts[name]
        node = producers.get(name)
        if node is None:  # an external input, broadcast to the output shape
            text, view = access(letter(name), without_units(values[name], full, kept),
                                out_shape, indices)
            operands[letter(name)] = (name, view.shape, "view")
            texts[name] = text
            return text
        args = [text_of(i) if i else None for i in node.inputs]
        while args and args[-1] is None:
            args.pop()
        texts[name] = TEMPLATES[node.op_type](node.attributes, *args)
        return texts[name]

    rhs = text_of(output)
    lhs_indices = indices[::-1] if transposed else indices
    lhs = f"Y({','.join(lhs_indices)})" if lhs_indices else "Y"
    return f"{lhs} = {rhs}", operands, formats, out_shape, transposed


def _head_text(program: Program, values: dict[str, np.ndarray], inline: dict[str, Any],
               letter: Callable[[Any], str], operands: dict[str, Any],
               formats: dict[str, Any]) -> str:
    """The head contraction as statement text: ``sum(k, ...)`` (dense or sparse weight), or
    the BLAS product ``P(i,j)``; then Gemm's alpha and ``beta * C``."""
    head = program.head
    if inline["blas"]:
        lp = letter(("head", PRODUCT))
        operands[lp] = (PRODUCT, (inline["m"], inline["n"]), "view")
        text = f"{lp}(i,j)"
    else:
        text = _product_text(program, values, inline, letter, operands, formats)
    if head.op_type == "Gemm":
        alpha = head.attributes.get("alpha", 1.0)
        beta = head.attributes.get("beta", 1.0)
        if alpha != 1.0:
            text = f"{literal(alpha)} * {text}"
        if len(head.inputs) > 2 and head.inputs[2] and beta != 0.0:
            c_name = head.inputs[2]
            lc = letter(("head", c_name))
            c_text, view = access(lc, values[c_name], (inline["m"], inline["n"]), "ij")
            operands[lc] = (c_name, view.shape, "view")
            text = f"{text} + {c_text}" if beta == 1.0 else f"{text} + {literal(beta)} * {c_text}"
    return f"({text})"


def _product_text(program: Program, values: dict[str, np.ndarray], inline: dict[str, Any],
                  letter: Callable[[Any], str], operands: dict[str, Any],
                  formats: dict[str, Any]) -> str:
    head = program.head
    a_name, b_name = head.inputs[0], head.inputs[1]
    la, lb = letter(("head", a_name)), letter(("head", b_name))
    a, b = values[a_name], values[b_name]
    transposed = inline["transposed"]
    if program.sparse is not None:
        # The sparse weight is W (k x n) whatever transB says: stored W^T in CSR / W in CSC.
        b_text = f"{lb}(j,k)" if transposed else f"{lb}(k,j)"
        formats[lb] = ta.CSR if transposed else ta.CSC
        operands[lb] = (b_name, None, "sparse weight")
    elif not inline["trans_b"] and inline["n"] <= NARROW_PRODUCT_COLUMNS:
        # A few output columns: read the weight transposed so that the innermost loop is a
        # unit-stride dot product over k, not a loop over a handful of columns.
        b_text = f"{lb}(j,k)"
        operands[lb] = (b_name, b.shape[::-1], "transpose")
    else:
        b_text = f"{lb}(j,k)" if inline["trans_b"] else f"{lb}(k,j)"
        operands[lb] = (b_name, b.shape, "view")
    if transposed:  # X^T stored k-major so the innermost loop runs over the batch i
        a_text = f"{la}(k,i)"
        operands[la] = (a_name, a.shape, "view") if inline["trans_a"] else \
            (a_name, a.shape[::-1], "transpose")
    else:
        a_text = f"{la}(k,i)" if inline["trans_a"] else f"{la}(i,k)"
        operands[la] = (a_name, a.shape, "csr" if inline["csr_a"] else "view")
        if inline["csr_a"]:
            formats[la] = ta.CSR
    return f"sum(k, {a_text} * {b_text})"


FUSED = OpImpl("Fused", 1, run_program, None, None)


def fuse(graph: Graph, sparse_heads: dict[str, Any] | None = None) -> Graph:
    """Replace every elementwise chain (two or more nodes, or one node after a contraction)
    by one ``Fused`` node; afterwards no fusable node feeds a single fusable consumer.

    A MatMul of a graph input by a constant matrix becomes a program even alone: when the
    input is multi-hot (at most ``MULTI_HOT_MAX_DENSITY`` nonzeros, checked per call) it is
    passed in CSR and the contraction is a sparse·dense kernel, the bag form of one-hot and
    multi-hot features.

    ``sparse_heads`` (opt level 3) maps contraction node names to their sparse weights; such a
    contraction becomes a program even with no epilogue.
    """
    sparse_heads = sparse_heads or {}
    inputs = {v.name for v in graph.inputs}
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    # x * x of a graph input, read only by a MatMul: at level 3 that product takes the
    # input's CSR with squared values (the FM's second-order term), not a dense x * x.
    squares = {node.outputs[0]: node.inputs[0] for node in graph.nodes
               if node.op_type == "Mul" and len(node.inputs) == 2 and
               node.inputs[0] == node.inputs[1] and node.inputs[0] in inputs and
               node.outputs[0] not in outputs and
               [c.op_type for c in consumers.get(node.outputs[0], [])] == ["MatMul"]}
    multi_hot = {node.name for node in graph.nodes
                 if node.op_type == "MatMul" and node.inputs[0] in inputs and
                 getattr(graph.constants.get(node.inputs[1]), "ndim", 0) == 2}
    squared = {node.name: squares[node.inputs[0]] for node in graph.nodes
               if node.op_type == "MatMul" and node.inputs[0] in squares and
               getattr(graph.constants.get(node.inputs[1]), "ndim", 0) == 2}
    producer = {name: node for node in graph.nodes for name in node.outputs if name}
    assigned: dict[str, Program] = {}
    programs: list[Program] = []

    def single_use(node: Node) -> bool:
        out = node.outputs[0]
        return out not in outputs and len(consumers.get(out, [])) == 1

    uses_cache: dict[str, list[int]] = {}

    def uses(node: Node) -> list[int]:
        """How many times ``node``'s template writes each of its inputs."""
        if node.name not in uses_cache:
            marks = [f"\x00{k}\x00" for k in range(len(node.inputs))]
            try:
                text = TEMPLATES[node.op_type](node.attributes, *marks)
                uses_cache[node.name] = [text.count(mark) for mark in marks]
            except Exception:  # noqa: BLE001 - an unusual arity: count each input once
                uses_cache[node.name] = [1] * len(node.inputs)
        return uses_cache[node.name]

    def joins(node: Node) -> bool:
        """Whether ``node`` may be in a group: a ``Where`` only with a condition computed in
        the group (a bool input would make the program's inputs mixed)."""
        if node.op_type != "Where":
            return node.op_type in TEMPLATES and node.op_type not in CONDITIONS
        source = producer.get(node.inputs[0])
        return source is not None and source.op_type in CONDITIONS and \
            source.name not in assigned and single_use(source)

    for root in reversed(graph.nodes):
        if root.name in assigned or len(root.outputs) != 1 or not joins(root):
            continue
        members = [root]
        head = None
        frontier = [root]
        # how many times each member's text is written, and whether a template that copies
        # its input lies between it and the root (the first such copy is free: a GELU's
        # several reads of its bias-add are what its epilogue is)
        copies = {root.name: (1, False)}
        while frontier and len(members) < MAX_GROUP:
            node = frontier.pop()
            for position, name in enumerate(node.inputs):
                source = producer.get(name)
                if source is None or source.name in assigned or source in members or \
                        not single_use(source):
                    continue
                written, copied = copies[node.name]
                reads = uses(node)[position] if node.op_type in TEMPLATES else 1
                if reads > 1:
                    written, copied = (written * reads if copied else written), True
                if written > MAX_COPIES:
                    continue
                copies[source.name] = (written, copied)
                condition = node.op_type == "Where" and position == 0
                if source.op_type in CONDITIONS and not condition or \
                        condition and source.op_type not in CONDITIONS:
                    continue
                if (source.op_type in CONDITIONS or joins(source)) and \
                        len(source.outputs) == 1:
                    members.append(source)
                    frontier.append(source)
                elif head is None and source.op_type in CONTRACTIONS and \
                        len(source.outputs) == 1:
                    head = source
        if head is not None and not _waits_on_ancestors(members, head, producer,
                                                        graph.constants, inputs):
            head = None
        if head is not None:
            members.append(head)
        if len(members) < 2:
            continue
        order = {id(n): k for k, n in enumerate(graph.nodes)}
        nodes = tuple(sorted(members, key=lambda n: order[id(n)]))
        programs.append(_program(nodes, root.outputs[0], head, sparse_heads))
        for node in nodes:
            assigned[node.name] = programs[-1]
    for node in graph.nodes:  # lone sparse contractions, lone multi-hot candidates
        if node.name not in assigned and (node.name in sparse_heads or node.name in multi_hot
                                          or node.name in squared):
            programs.append(_program((node,), node.outputs[0], node, sparse_heads))
            assigned[node.name] = programs[-1]
    readers: dict[str, int] = {}
    for program in programs:
        if program.head is None:
            continue
        program.multi_hot = program.head.name in multi_hot
        program.square_of = squared.get(program.head.name)
        source = program.head.inputs[0] if program.multi_hot else program.square_of
        if source is not None:
            readers[source] = readers.get(source, 0) + 1
    for program in programs:
        if program.head is not None and (program.multi_hot or program.square_of):
            source = program.head.inputs[0] if program.multi_hot else program.square_of
            program.multi_hot_readers = readers[source]
    kept = []
    for node in graph.nodes:
        program = assigned.get(node.name)
        if program is None:
            kept.append(node)
        elif node.outputs[0] == program.output:
            kept.append(fused_node(program, f"fused_{node.name}"))
    fused = sum(len(p.nodes) for p in programs)
    graph.nodes = kept
    graph.notes.append(f"fusion: {fused} node(s) into {len(programs)} statement(s)")
    return graph


def _waits_on_ancestors(members: list[Node], head: Node, producer: dict[str, Node],
                        constants: Any, inputs: set[str]) -> bool:
    """Whether every computed value the chain ``members`` reads (besides the head's output)
    is computed before the head can start anyway: an ancestor of the head's operands.

    A chain that adds the result of an independent branch to the head's product (Wide&Deep's
    ``sigmoid(wide @ w + deep)``, a two-tower score) would make the head wait for that whole
    branch; left unfused, the head and the branch may run at once on two threads (the static
    plan's concurrent branches, ``onnx/plan/branches.py``) at the cost of one small elementwise
    kernel. A residual ``x + conv(x)`` still fuses: x is an ancestor of the head's operand.
    """
    produced = {name for node in members for name in node.outputs}
    wanted = {name for node in members for name in node.inputs
              if name and name not in produced and name != head.outputs[0] and
              name in producer and name not in constants and name not in inputs}
    if not wanted:
        return True
    seen: set[str] = set()
    stack = [name for name in head.inputs if name]
    while stack and wanted:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        wanted.discard(name)
        source = producer.get(name)
        if source is not None:
            stack.extend(n for n in source.inputs if n)
    return not wanted


def _program(nodes: tuple[Node, ...], output: str, head: Node | None,
             sparse_heads: dict[str, Any]) -> Program:
    produced = {name for node in nodes for name in node.outputs}
    externals = tuple(dict.fromkeys(name for node in nodes for name in node.inputs
                                    if name and name not in produced))
    sparse = sparse_heads.get(head.name) if head is not None else None
    return Program(nodes, externals, output, head, sparse,
                   head.inputs[1] if sparse is not None else None)


def reassociate_matmuls(graph: Graph) -> Graph:
    """Rewrite ``(X @ B) @ C`` as ``X @ (B C)`` when B and C are constant 2-D matrices and the
    product B C, computed once here, makes each row cheaper: per row of X the cost goes from
    ``a b + b c`` to ``a c`` multiply-adds. Afterwards no such chain remains."""
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    producer = {node.outputs[0]: node for node in graph.nodes if node.outputs}
    removed: set[str] = set()
    rewritten = 0
    nodes = []
    for node in graph.nodes:
        inner = producer.get(node.inputs[0]) if node.op_type == "MatMul" else None
        c = graph.constants.get(node.inputs[1]) if inner is not None else None
        b = graph.constants.get(inner.inputs[1]) if inner is not None and \
            inner.op_type == "MatMul" else None
        if b is not None and c is not None and b.ndim == 2 and c.ndim == 2 and \
                inner.outputs[0] not in outputs and len(consumers[inner.outputs[0]]) == 1 and \
                b.dtype == c.dtype and b.dtype.kind == "f" and \
                b.shape[0] * c.shape[1] < b.shape[0] * b.shape[1] + b.shape[1] * c.shape[1]:
            name = f"{inner.inputs[1]}@{node.inputs[1]}"
            graph.constants[name] = np.matmul(b.astype(np.float64), c).astype(b.dtype)
            nodes.append(Node(node.name, "MatMul", (inner.inputs[0], name), node.outputs,
                              node.attributes, node.version, node.impl))
            removed.add(inner.name)
            rewritten += 1
        else:
            nodes.append(node)
    graph.nodes = [n for n in nodes if n.name not in removed]
    graph.notes.append(f"matmul re-association: {rewritten} chain(s) folded")
    return graph


__all__ = ["Activation", "Program", "RELU", "fuse", "fused", "reassociate_matmuls", "run_program",
           "TEMPLATES", "FUSED"]
