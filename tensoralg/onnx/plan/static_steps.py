"""The static form of each node of a :mod:`tensoralg.onnx.plan.static` plan: how it runs with its
buffers fixed.

A builder looks at a node and the values of a recorded run and returns a :class:`Spec` (scratch
buffers it needs, and ``make``, which binds kernels once every buffer exists), or None: the node
then runs as a generic step. Fused programs and embedding bags have builders here,
data movement in :mod:`~tensoralg.onnx.plan.movement_steps` and products in
:mod:`~tensoralg.onnx.plan.product_steps`; any other node whose recorded run was one float kernel on
views of its inputs (or, for a fused program, a chain of them) is *captured* and replayed
prebound.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np

import tensoralg as ta
from tensoralg import program
from tensoralg.onnx.ops.int8 import CONV_INT8_OP, INT8_OP
from tensoralg.onnx.ops.matmul import use_batched_blas
from tensoralg.onnx.passes.bags.recognise import BAG_STATEMENT, LoopBag
from tensoralg.onnx.passes.bags.sparse_feeds import SparseFeed
from tensoralg.onnx.passes.fusion import (
    CONDITIONS,
    FLOATS,
    MULTI_HOT_MAX_DENSITY,
    MULTI_HOT_MIN_COLUMNS,
    PRODUCT,
    TEMPLATES,
    Program,
    build_statement,
    flattened_head,
    fused_node,
    inline_head,
    statement_dtype,
)
from tensoralg.onnx.passes.quantized import PARAMETERS_OP
from tensoralg.onnx.passes.scatters import ROW_OP
from tensoralg.onnx.plan.constant_gathers import gather_nd_spec
from tensoralg.onnx.plan.executor import Step
from tensoralg.onnx.plan.loop_bag_steps import loop_bag_spec
from tensoralg.onnx.plan.mask_steps import COPY_OPS, MASK_OPS, mask_spec
from tensoralg.onnx.plan.movement_steps import (
    all_below,
    blocks_spec,
    check_indices,
    concat_spec,
    cumsum_spec,
    gather_spec,
    id_column,
    permuter,
    reduce_extreme_spec,
    slice_spec,
    split_spec,
    transpose_spec,
)
from tensoralg.onnx.plan.product_steps import (
    conv_spec,
    gemm_epilogue,
    gemm_spec,
    layer_of,
    layer_run,
    matmul_spec,
    narrow_dot,
    quantized_conv_spec,
    quantized_matmul_spec,
)
from tensoralg.onnx.plan.recurrent_steps import recurrent_spec
from tensoralg.onnx.plan.resize_steps import resize_spec
from tensoralg.onnx.plan.scatter_steps import row_scatter_spec
from tensoralg.onnx.plan.step_base import (
    CSR_ARRAYS,
    Env,
    Getter,
    Part,
    Replan,
    Run,
    Spec,
    contiguous,
    csr_array_getter,
    made_of,
    parts_of,
)
from tensoralg.onnx.plan.window_steps import pool_spec, softmax_spec
from tensoralg.program import RowCompressor


def spec_of(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
            shared: dict[str, Any] | None = None) -> Spec | None:
    """The static form of ``step``'s node, or None to run it as a generic step. ``shared``
    holds what the steps of one plan share (the CSR buffers of a multi-hot input)."""
    if not all(n in recorded for n in step.node.inputs if n) or \
            not all(n in recorded for n in step.node.outputs if n):
        return None
    builder = _BUILDERS.get(step.node.op_type)
    if builder in (_fused, _bag, gather_spec, matmul_spec, softmax_spec):
        spec = builder(step, recorded, constants, {} if shared is None else shared)
    else:
        spec = builder(step, recorded, constants) if builder is not None else None
    spec = spec if spec is not None else _captured(step, recorded, constants)
    return spec if spec is not None else _lone_elementwise(step, recorded, constants, shared)


def _lone_elementwise(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
                      shared: dict[str, Any] | None) -> Spec | None:
    """An elementwise node no fused group took and whose recorded call cannot be replayed (it
    read a strided view: Llama's ``Neg`` of the second half of a rotary slice, which ran node
    by node at 0.1-0.2 ms for 2048 values) as a fused program of its own: one prebound
    statement on the plan's buffers."""
    node = step.node
    if node.op_type not in TEMPLATES or node.op_type in CONDITIONS or \
            node.op_type == "Where" or len([n for n in node.outputs if n]) != 1:
        return None
    externals = tuple(dict.fromkeys(n for n in node.inputs if n))
    program = Program((node,), externals, node.outputs[0])
    alone = Step(fused_node(program, node.name), step.context, step.release)
    return _fused(alone, recorded, constants, {} if shared is None else shared)


# Ops whose recorded kernel calls may be replayed as a chain (see :func:`_captured`).
CHAIN_OPS = frozenset({"Fused", "LayerNormalization", "InstanceNormalization"})


def _captured(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]) -> Spec | None:
    """Any other node whose recorded run was one float kernel call on views of its inputs,
    returning the kernel's output itself: that call, prebound. For a fused program, a chain
    of such calls may also read the results of the calls before it (a batched MatMul head run
    as a kernel of its own, then the epilogue): the earlier results go in scratch buffers.

    Sound because everything else the node read is a constant: a non-constant input that did
    not reach a kernel as an operand (its value may be baked into a statement, or checked in
    Python) disqualifies the node, and so does any copy, cast or post-processing, which shows
    as an operand or output not sharing memory with a value.
    """
    node = step.node
    calls = step.captured or []
    outputs = [n for n in node.outputs if n]
    if not calls or len(outputs) != 1:
        return None
    if len(calls) > 1 and node.op_type not in CHAIN_OPS:
        # Chains only where the code between the calls is known to look at shapes alone: a
        # fused program's head, then its epilogue; a normalisation's moments, then the
        # normalised rows (ops/layernorm.py).
        return None
    out = recorded[outputs[0]]
    if not _same_memory(out, calls[-1][2]):
        return None
    # per call: letter -> (input name or index of an earlier call's result, shape)
    sources: list[dict[str, tuple[str | int, tuple[int, ...]]]] = []
    used: set[str] = set()
    for k, (kernel, operands, result) in enumerate(calls):
        if kernel.dtype not in FLOATS or any(not fmt.is_dense for fmt in kernel.formats.values()):
            return None
        mine: dict[str, tuple[str | int, tuple[int, ...]]] = {}
        for letter, array in operands.items():
            match: list[str | int] = [n for n in node.inputs if n and
                                      _same_memory(recorded[n], array)]
            match += [j for j in range(k) if _same_memory(calls[j][2], array)]
            if not match:
                return None
            mine[letter] = (match[0], array.shape)
            if isinstance(match[0], str):
                used.add(match[0])
        sources.append(mine)
    if any(n and n not in used and n not in constants for n in node.inputs):
        return None
    scratch = [(tuple(result.shape), result.dtype) for _, _, result in calls[:-1]]

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        by_name = {g.name: g for g in ins}
        results = list(buffers) + [outs[0].reshape(calls[-1][2].shape)]
        bounds: list[Any] = []
        parts: list[Part] = []
        for (kernel, _, _), mine, target in zip(calls, sources, results):
            arrays: dict[str, np.ndarray] = {}
            dynamic = []
            for letter, (source, shape) in mine.items():
                if isinstance(source, int):
                    arrays[letter] = results[source].reshape(shape)
                    continue
                get = by_name[source]
                if get.fixed is not None:
                    arrays[letter] = contiguous(get.fixed.reshape(shape))
                else:
                    arrays[letter] = np.zeros(shape, kernel.dtype)   # replaced by rebind
                    dynamic.append((letter, get, shape))
            bound = kernel.bind(out=target, **arrays)
            bounds.append((bound, dynamic))
            parts.append((bound, [(letter, get, shape) for letter, get, shape in dynamic]))

        def run(env: Env) -> None:
            for bound, dynamic in bounds:
                for letter, get, shape in dynamic:
                    bound.rebind(letter, get(env).reshape(shape))
                bound()
        return made_of(run, parts)

    return Spec(make, scratch, "kernel" if len(calls) == 1 else "kernel chain")


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``b`` is ``a`` reshaped: same dtype, size and bytes, both C-contiguous."""
    return a.dtype == b.dtype and a.size == b.size and a.flags.c_contiguous and \
        b.flags.c_contiguous and (a.size == 0 or a.ctypes.data == b.ctypes.data)


SPARSE_PRODUCT = "Y(j,i) = sum(k, W(j,k) * X(k,i))"   # a sparse head, transposed: batch inner


class MultiHot:
    """The CSR form of a multi-hot graph input, refilled once per run by a compiled scan
    (``RowCompressor``) and read by every program that multiplies it."""

    def __init__(self, name: str, value: np.ndarray, feed: SparseFeed | None) -> None:
        self.name = name
        self.key = f"\0csr {name}"      # marks, in a run's values, that the scan has run
        self.rows = RowCompressor(value.shape, value.dtype,
                                  int(MULTI_HOT_MAX_DENSITY * value.size) + 1)
        # Fed sparse, the feed's arrays are copied, not scanned: stand-ins of them (index
        # dtype as recorded) for the compiled load, which reads the real ones from slots.
        self.placeholder_feed: SimpleNamespace | None = None
        if feed is not None:
            index = feed.csr.indices.dtype
            self.placeholder_feed = SimpleNamespace(
                indptr=np.zeros(value.shape[0] + 1, index), indices=np.zeros(1, index),
                data=np.zeros(1, value.dtype))
        self._squared: ta.Tensor | None = None
        self._scan_handed_out = False

    def squared(self) -> ta.Tensor:
        """The CSR form of ``x * x``: the same positions, values squared at each refresh."""
        if self._squared is None:
            tensor = self.rows.tensor
            self._squared = ta.Tensor.trusted(tensor.shape, tensor.format, tensor.levels,
                                              self.rows.with_squares())
        return self._squared

    def scan_parts(self, get: Getter | None, what: str) -> list[Part] | None:
        """The scan as a prebound call for a compiled sequence: for the first program of the
        plan that asks (the plan's steps are made in run order, so it runs before every other
        reader); no parts for later ones. A sparse feed's scan is a copy of its CSR arrays,
        which the sequence finds in slots. None when a first reader has no getter for the
        input."""
        if self._scan_handed_out:
            return []
        if get is None:
            return None
        self._scan_handed_out = True
        feed = self.placeholder_feed
        if feed is not None:
            call = self.rows.load_call(feed.indptr, feed.indices, feed.data, what)
            return [(call, [(array, csr_array_getter(self.name, array), None)
                            for array in CSR_ARRAYS])]
        placeholder = get.fixed if get.fixed is not None else \
            np.zeros(self.rows.shape, self.rows.dtype)
        return [(self.rows.call(contiguous(placeholder), what), [("x", get, None)])]

    def refresh(self, env: Env) -> None:
        """Scan this run's input, once however many programs read it."""
        if self.key in env:
            return
        x = env[self.name]
        if isinstance(x, SparseFeed):
            csr = x.csr
            filled = self.rows.load(csr.indptr, csr.indices, csr.data)
        else:
            filled = self.rows.compress(contiguous(x))
        if not filled:
            raise Replan(f"multi-hot input {self.name} has {self.rows.nnz} nonzeros, more "
                         f"than the {self.rows.capacity} its CSR buffers hold")
        env[self.key] = x


def multi_hot_input(program: Any, inline: dict[str, Any], recorded: Env,
                    shared: dict[str, Any]) -> MultiHot | None:
    """The shared CSR form of the program's head input (or of ``g`` when it is ``g * g``)
    when that is a multi-hot graph input, mostly zeros when the plan was recorded (the scan
    checks every later run). One narrow product alone keeps BLAS: it reads the dense input
    once, as fast as the scan does."""
    name = program.head.inputs[0] if program.multi_hot else program.square_of
    feed = shared.get("sparse feeds", {}).get(name)
    if name is None or program.sparse is not None or inline["trans_a"] or \
            (program.multi_hot_readers < 2 and inline["n"] < MULTI_HOT_MIN_COLUMNS and
             feed is None):
        return None
    value = recorded[name]
    if value.ndim != 2 or value.dtype not in FLOATS or not value.size or \
            np.count_nonzero(value) > MULTI_HOT_MAX_DENSITY * value.size:
        return None
    key = f"multi-hot {name}"
    if key not in shared:
        shared[key] = MultiHot(name, value, feed)
    return shared[key]


def _fused(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
           shared: dict[str, Any]) -> Spec | None:
    """A fused program: its head (BLAS, or a sparse-weight kernel) into a scratch product, then
    one prebound kernel for the rest.

    A sparse head with an epilogue runs as two kernels: ``W^T X^T`` (the batch innermost, in
    unit stride) into a scratch product, and the epilogue reading that product transposed, so
    the result lands in the output's layout with no calloc'ed temporary or extra transpose.
    """
    node, context = step.node, step.context
    program = node.attributes["program"]
    values = {name: recorded[name] for name in program.externals}
    dtype = statement_dtype(program, {a.dtype for a in values.values()})
    if dtype is None:
        return None       # the nodes run one by one
    head = program.head
    chain = [n for n in program.nodes if n is not head]
    flat = flattened_head(program, values)
    if flat is not None:
        values = flat[0]     # the N-D head as one 2-D product; buffers are reshaped views
    inline = None
    split = False
    multi = None
    if head is not None:
        inline = inline_head(program, head, values, dtype)
        if inline is None:
            return _batched_head(step, values, dtype, constants)
        multi = multi_hot_input(program, inline, recorded, shared)
        if multi is not None:
            inline = dict(inline, csr_a=True, blas=False, transposed=False)
        split = bool(inline["transposed"])
        if split:
            # Written transposed (a chain of sparse layers), the whole program is one kernel:
            # the compiler keeps one row of the product in a workspace (ir/passes/workspace.py).
            one_kernel = build_statement(program, values, inline, program.output
                                         if chain else head.outputs[0])
            inline = dict(inline, blas=True, transposed=False)
        if inline["blas"]:
            values[PRODUCT] = np.empty((inline["m"], inline["n"]), dtype)
    if inline is not None and inline["blas"] and not split and not inline["trans_a"] and \
            head.inputs[1] in constants and \
            narrow_dot(values[head.inputs[0]].shape[-1], inline["n"]):
        # A narrow product over a long K (Wide&Deep's 10^4-wide input times one column), or
        # a layer of one or two outputs: the contraction joins the statement as a vectorised
        # dot product per row, which streams the input as fast as BLAS's GEMV (the generated
        # GEMM would broadcast every input value for a one-vector tile).
        inline = dict(inline, blas=False, dot=True)
        values.pop(PRODUCT, None)
    output = program.output if chain or head is None else head.outputs[0]
    # A transposed head was turned into ``split`` above, so the statement is never transposed.
    statement, operands, formats, out_shape, _ = build_statement(program, values, inline, output)
    if any(kind == "csr" for _, _, kind in operands.values()) and multi is None:
        return None
    blas = inline is not None and inline["blas"] and not split
    layer, direct = None, False
    if blas and not inline["trans_a"] and head.inputs[1] in constants:
        # The generated GEMM replaces BLAS; with a bias/ReLU epilogue it is the whole step.
        letter_p = next(k for k, (name, _, _) in operands.items() if name == PRODUCT)
        epilogue = gemm_epilogue(statement, operands, letter_p, inline["n"])
        weight = constants[head.inputs[1]]
        if epilogue is not None and tuple(out_shape) == (inline["m"], inline["n"]):
            layer = layer_of(weight, inline["trans_b"], epilogue, constants, dtype)
            direct = layer is not None
        if layer is None:
            layer = layer_of(weight, inline["trans_b"], None, constants, dtype)
    options = {"input_t": False, "output_t": False}
    if split:
        m, n = inline["m"], inline["n"]
        letter_p = next(k for k, (name, _, _) in operands.items() if name == PRODUCT)
        statement = statement.replace(f"{letter_p}(i,j)", f"{letter_p}(j,i)")
        operands[letter_p] = (PRODUCT, (n, m), "view")
        product_kernel = context.kernels.get(SPARSE_PRODUCT, dtype, {"W": ta.CSR})
        x_rows = values[head.inputs[0]].shape[0 if inline["trans_a"] else 1]
    # A constant read transposed is transposed once, into an array of its own; only the
    # values of a run need a scratch buffer to be transposed into.
    extra = [(tuple(shape), dtype) for name, shape, kind in operands.values()
             if kind == "transpose" and name not in constants]

    def scratch_list() -> list[tuple[tuple[int, ...], np.dtype]]:
        head_scratch = []
        if split and options["output_t"]:
            return [(tuple(shape), dtype) for name, shape, kind in one_kernel[1].values()
                    if kind == "transpose" and not (name == head.inputs[0] and stored_t())]
        if split:
            head_scratch.append(((n, m), dtype))
            if not inline["trans_a"] and not options["input_t"]:
                head_scratch.append(((x_rows, m), dtype))
        elif direct:
            return []
        elif blas:
            head_scratch.append(((inline["m"], inline["n"]), dtype))
        return head_scratch + extra

    def stored_t() -> bool:
        return bool(inline["trans_a"] or options["input_t"])

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        by_name = {g.name: g for g in ins}
        spare = iter(buffers)
        if split and options["output_t"]:
            return _one_kernel(context, one_kernel, dtype, program.sparse[0], outs[0], spare,
                               by_name, head.inputs[0] if stored_t() else None)
        if direct:
            return layer_run(layer, by_name[head.inputs[0]], outs[0].reshape(out_shape),
                              values[head.inputs[0]].shape)
        product = next(spare) if blas or split else None
        head_run = None
        text = statement
        if split:
            x = by_name[head.inputs[0]]
            head_run = _sparse_head(context, product_kernel, program.sparse[0], product, x,
                                    None if stored_t() else next(spare))
            if options["output_t"]:
                text = statement.replace("Y(i,j) =", "Y(j,i) =", 1)
        kernel = context.kernels.get(text, dtype, formats)
        arrays: dict[str, Any] = {}
        dynamic: list[tuple[str, Getter, tuple[int, ...]]] = []
        copies: list[tuple[Getter, Callable[[np.ndarray], None]]] = []
        for letter, (name, shape, kind) in operands.items():
            if kind == "sparse weight":
                arrays[letter] = program.sparse[1]       # W in CSC (a small batch)
            elif kind == "csr":
                arrays[letter] = multi.squared() if program.square_of else multi.rows.tensor
            elif kind == "transpose" and name in constants:
                arrays[letter] = np.ascontiguousarray(np.transpose(constants[name]))
            elif kind == "transpose":
                target = next(spare)
                source = values[name]
                copies.append((by_name[name], permuter(context, target, source.shape)))
                arrays[letter] = target
            elif name == PRODUCT:
                arrays[letter] = product.reshape(shape)
            else:
                arrays[letter] = _operand_array(letter, by_name[name], shape, dtype, dynamic)
        result = outs[0] if options["output_t"] else outs[0].reshape(out_shape)
        bound = kernel.bind(out=result, **arrays)
        if layer is not None:
            head_run = layer_run(layer, by_name[head.inputs[0]], product,
                                  values[head.inputs[0]].shape)
        elif blas:
            a_get, b_get = by_name[head.inputs[0]], by_name[head.inputs[1]]
            trans_a, trans_b = inline["trans_a"], inline["trans_b"]

        def run(env: Env) -> None:
            if multi is not None:
                multi.refresh(env)
            if blas and layer is None:
                a, b = a_get(env), b_get(env)
                np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=product)
            elif head_run is not None:
                head_run(env)
            _refresh_and_call(env, copies, dynamic, bound)
        head_parts = parts_of(head_run) if head_run is not None else []
        own = _call_parts(copies, dynamic, bound)
        scan = [] if multi is None else multi.scan_parts(by_name.get(multi.name),
                                                         f"{context}: multi-hot scan")
        native = scan is not None and not (blas and layer is None) and \
            head_parts is not None and own is not None
        return made_of(run, scan + head_parts + own if native else None)

    kind = "generated GEMM" if direct else "generated GEMM + kernel" if layer is not None else \
        "BLAS + kernel" if blas else "sparse kernel + kernel" if split else \
        "multi-hot CSR kernel" if multi is not None else "kernel"
    spec = Spec(make, scratch_list(), kind)
    if layer is not None:
        spec.plan = layer.describe(inline["m"]) + ("" if direct else f"; then {statement}")
    elif inline is not None and inline.get("dot"):
        spec.plan = f"dot products per row (narrow product): {statement}"
    if multi is not None:
        spec.shared = frozenset({multi.key})
    if multi is not None and program.square_of:
        spec.unread = frozenset({head.inputs[0]})
    if multi is not None and all(name != multi.name or kind == "csr"
                                 for name, _, kind in operands.values()):
        spec.csr_inputs = frozenset({multi.name})
    if split and len(out_shape) == 2:
        chain_inputs = {name for n in chain for name in n.inputs}
        a_name = head.inputs[0]
        if not inline["trans_a"] and a_name not in chain_inputs:
            spec.transposable_input = a_name
        spec.transposable_output = True

        def relayout(input_t: bool, output_t: bool) -> None:
            options["input_t"], options["output_t"] = input_t, output_t
            spec.scratch = scratch_list()
            if output_t:
                spec.kind = "sparse kernel (transposed layout)"
            elif input_t:
                spec.kind = "sparse kernel + kernel (transposed layout)"
        spec.relayout = relayout
    return spec


def _batched_head(step: Step, values: dict[str, np.ndarray], dtype: np.dtype,
                  constants: Mapping[str, np.ndarray]) -> Spec | None:
    """A fused program headed by a batched MatMul that runs in BLAS (attention's ``Q K^T``
    before its mask is added): the product into a scratch buffer with ``out=``, then the
    epilogue as one prebound kernel, the statement the node-by-node run compiles. None when
    the head is not such a MatMul (a small one runs as a kernel and is captured).

    A batch of rows times a constant matrix (``(B, T, K) @ (K, N)``, whose epilogue varies
    along ``T`` and so does not flatten into a dense layer's) runs its product as one
    ``(B * T) x K`` generated GEMM with the weight packed at load, and the step joins a
    compiled sequence: AFN's logarithmic transformation layer, 256 x 8 x 26 x 256, ran as
    256 BLAS products of 8 rows."""
    program = step.node.attributes["program"]
    head = program.head
    if head.op_type != "MatMul" or not [n for n in program.nodes if n is not head]:
        return None
    a, b = values[head.inputs[0]], values[head.inputs[1]]
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        return None
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        return None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if not use_batched_blas(dtype, math.prod(batch), m * k * n):
        return None
    product_shape = (*batch, m, n)
    values = dict(values)
    values[head.outputs[0]] = np.empty(product_shape, dtype)
    try:
        statement, operands, formats, out_shape, _ = build_statement(
            program, values, None, program.output)
    except ta.TensorAlgebraError:
        return None
    if formats or any(kind != "view" for _, _, kind in operands.values()):
        return None
    kernel = step.context.kernels.get(statement, dtype, formats)
    a_name, b_name = head.inputs[0], head.inputs[1]
    weight = constants.get(b_name)
    rows = (math.prod(a.shape[:-1]), k)
    layer = layer_of(weight, False, None, constants, dtype) \
        if weight is not None and weight.ndim == 2 and a.ndim > 2 and \
        tuple(batch) == tuple(a.shape[:-2]) and not narrow_dot(k, n) else None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        by_name = {g.name: g for g in ins}
        product = buffers[0]
        arrays: dict[str, np.ndarray] = {}
        dynamic: list[tuple[str, Getter, tuple[int, ...]]] = []
        for letter, (name, shape, _) in operands.items():
            if name == head.outputs[0]:
                arrays[letter] = product.reshape(shape)
            else:
                arrays[letter] = _operand_array(letter, by_name[name], shape, dtype, dynamic)
        bound = kernel.bind(out=outs[0].reshape(out_shape), **arrays)
        a_get, b_get = by_name[a_name], by_name[b_name]
        if layer is not None:
            gemm = layer_run(layer, a_get, product.reshape(rows[0], n), rows)

            def run_layer(env: Env) -> None:
                gemm(env)
                _refresh_and_call(env, [], dynamic, bound)
            own = _call_parts([], dynamic, bound)
            head_parts = parts_of(gemm)
            native = own is not None and head_parts is not None
            return made_of(run_layer, head_parts + own if native else None)

        def run(env: Env) -> None:
            np.matmul(a_get(env), b_get(env), out=product)
            _refresh_and_call(env, [], dynamic, bound)
        return made_of(run, None)

    if layer is not None:
        spec = Spec(make, [(product_shape, dtype)], "generated GEMM + kernel")
        spec.plan = f"{layer.describe(rows[0])} into a scratch product; then {statement}"
        return spec
    spec = Spec(make, [(product_shape, dtype)], "BLAS + kernel")
    spec.plan = (f"BLAS (dense {'x'.join(str(d) for d in product_shape[:-1])}x{k}x{n}) "
                 f"into a scratch product, then {statement}")
    return spec


def _one_kernel(context: Any, built: tuple, dtype: np.dtype, weight_t: Any, out: np.ndarray,
                spare: Any, by_name: dict[str, Getter], stored_input: str | None) -> Run:
    """The transposed statement ``Y(j,i) = f(sum(k, X(k,i) * W(j,k)), ...)`` as one prebound
    kernel writing ``out`` (stored transposed). ``stored_input`` names the head's input when
    it already arrives stored k-major; otherwise it is copied transposed into a scratch buffer,
    like every other operand the statement reads transposed."""
    statement, operands, formats, _, _ = built
    kernel = context.kernels.get(statement, dtype, formats)
    arrays: dict[str, Any] = {}
    copies: list[tuple[Getter, Callable[[np.ndarray], None]]] = []
    dynamic: list[tuple[str, Getter, tuple[int, ...]]] = []
    for letter, (name, shape, kind) in operands.items():
        get = by_name.get(name)
        if kind == "sparse weight":
            arrays[letter] = weight_t            # W^T in CSR: rows are the output features
        elif kind == "transpose" and name != stored_input:
            target = next(spare)
            copies.append((get, permuter(context, target, tuple(shape[::-1]))))
            arrays[letter] = target
        elif get.fixed is not None:
            arrays[letter] = contiguous(get.fixed.reshape(shape))
        else:
            arrays[letter] = np.zeros(shape, dtype)     # replaced by rebind each run
            dynamic.append((letter, get, tuple(shape)))
    bound = kernel.bind(out=out, **arrays)
    return made_of(lambda env: _refresh_and_call(env, copies, dynamic, bound),
                   _call_parts(copies, dynamic, bound))


def _operand_array(letter: str, getter: Getter, shape: Any, dtype: Any,
                   dynamic: list[tuple[str, Getter, tuple[int, ...]]]) -> np.ndarray:
    """What a kernel operand is bound to when its plan is made: a constant's array (buffers are
    contiguous; only a constant can need this one copy), or a placeholder recorded in
    ``dynamic`` that the plan rebinds on each run."""
    if getter.fixed is not None:
        return contiguous(getter.fixed.reshape(shape))
    dynamic.append((letter, getter, tuple(shape)))
    return np.zeros(shape, dtype)


def _refresh_and_call(env: Env, copies: list[tuple[Getter, Callable[[np.ndarray], None]]],
                      dynamic: list[tuple[str, Getter, tuple[int, ...]]], bound: Any) -> None:
    """Refill the transposed copies, point the bound call at this run's inputs, and call it."""
    for get, copy in copies:
        copy(get(env))
    for letter, get, shape in dynamic:
        bound.rebind(letter, get(env).reshape(shape))
    bound()


def _call_parts(copies: list[tuple[Getter, Callable[[np.ndarray], None]]],
                dynamic: list[tuple[str, Getter, tuple[int, ...]]], bound: Any
                ) -> list[Part] | None:
    """The parts of :func:`_refresh_and_call` (None when a copy runs in NumPy)."""
    parts = [copy.part(get) for get, copy in copies]      # type: ignore[attr-defined]
    if any(part is None for part in parts):
        return None
    return parts + [(bound, [(letter, get, shape) for letter, get, shape in dynamic])]


def _sparse_head(context: Any, kernel: ta.Kernel, weight_t: Any, product: np.ndarray,
                 x: Getter, x_t: np.ndarray | None) -> Run:
    """``product = W^T X^T`` with the batch innermost; ``x_t`` receives ``X^T`` each run
    (None: the input is already stored k-major, as Gemm's transA gives it)."""
    if x_t is not None:
        bound = kernel.bind(out=product, W=weight_t, X=x_t)
        copy = permuter(context, x_t, x_t.shape[::-1])

        def run(env: Env) -> None:
            copy(x(env))
            bound()
        part = copy.part(x)      # type: ignore[attr-defined]
        return made_of(run, None if part is None else [part, (bound, [])])
    if x.fixed is not None:
        call = kernel.bind(out=product, W=weight_t, X=contiguous(x.fixed))
        return made_of(lambda env: call(), [(call, [])])
    placeholder = np.zeros((weight_t.shape[1], product.shape[1]), product.dtype)
    bound = kernel.bind(out=product, W=weight_t, X=placeholder)     # rebound each run

    def run_dynamic(env: Env) -> None:
        bound.rebind("X", x(env))
        bound()
    return made_of(run_dynamic, [(bound, [("X", x, None)])])


def _bag(step: Step, recorded: Env, constants: Mapping[str, np.ndarray],
         shared: dict[str, Any]) -> Spec | None:
    """An embedding bag: the CSR bag matrix's arrays are fixed, refilled from the ids (read
    straight from the graph input when they are one column of it)."""
    node, context = step.node, step.context
    bag = node.attributes["bag"]
    if isinstance(bag, LoopBag):
        return loop_bag_spec(step, recorded, constants)
    table, index = recorded[node.inputs[0]], recorded[node.inputs[1]]
    weights = recorded[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    if index.ndim != 2 or table.ndim != 2 or table.dtype not in FLOATS or \
            index.dtype.kind not in "iu":
        return None
    if weights is not None and (weights.dtype != table.dtype or
                                weights.shape != index.shape + (1,)):
        return None
    rows, size = index.shape
    n, dim = table.shape
    scale = table.dtype.type(1.0 / size if bag.mode == "mean" and size else 1.0)
    if size > n or not rows * size:
        return None
    kernel = context.kernels.get(BAG_STATEMENT, table.dtype, {"S": ta.CSR})

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        if ins[0].fixed is None:
            raise ta.UnsupportedError("the table is not a constant")
        pos = np.arange(0, rows * size + 1, size, dtype=np.int64)
        crd = np.tile(np.arange(size, dtype=np.int64), rows)     # valid until the first run
        vals = np.full(rows * size, scale, table.dtype)
        matrix = ta.Tensor((rows, n), ta.CSR, [None, (pos, crd)], vals)
        if matrix.levels[1].crd is not crd or matrix.vals is not vals:
            raise ta.UnsupportedError("the bag matrix's arrays were copied")
        bound = kernel.bind(out=outs[0].reshape(rows, dim), S=matrix,
                            T=contiguous(ins[0].fixed))
        ids = ins[1]
        weight = ins[2] if weights is not None else None
        grid = crd.reshape(rows, size)

        def run(env: Env) -> None:
            if column is not None:
                idx = env[column[0]][column[1]]
                np.copyto(grid, idx, casting="unsafe")
            else:
                idx = ids(env)
                if idx.size:
                    np.copyto(crd, idx.reshape(-1), casting="unsafe")
            if idx.size:
                if not all_below(crd, n):
                    check_indices(crd, n, context, node.inputs[1])
                    np.add(crd, n, out=crd, where=crd < 0)
            if weight is not None:
                np.multiply(weight(env).reshape(-1), scale, out=vals)
            bound()
        return made_of(run, None if weight is not None else
                       _bag_parts(ids, column, recorded, crd, n, bound, str(context)))

    column = id_column(node.inputs[1], recorded, constants, shared)
    spec = Spec(make, [], "kernel")
    if column is not None:
        spec.unread = frozenset({node.inputs[1]})
    return spec


def _bag_parts(ids: Getter, column: tuple[str, tuple[Any, ...]] | None, recorded: Env,
               crd: np.ndarray, rows: int, bound: Any, what: str) -> list[Part] | None:
    """A bag as two native calls: its CSR coordinates from the ids (checked), then the
    product. The ids are a ``count x size`` input, or DLRM's column ``t`` of a graph input
    ``x[:, t, :]`` (read in place)."""
    if column is None:
        source = recorded[ids.name]
        if source.ndim != 2:
            return None
        call = program.ids_call(np.zeros(source.shape, source.dtype), 0, crd, rows, what)
        return None if call is None else [(call, [("ids", ids, source.shape)]), (bound, [])]
    source = recorded[column[0]]
    if len(column[1]) != 2 or source.ndim != 3:
        return None
    count, tables, size = source.shape
    flat = (count, tables * size)
    call = program.ids_call(np.zeros(flat, source.dtype), column[1][1] * size, crd, rows, what)
    return None if call is None else [(call, [("ids", Getter(column[0], None), flat)]),
                                      (bound, [])]


def quantize_parameters_spec(step: Step, recorded: Env, constants: Mapping[str, np.ndarray]
                             ) -> Spec | None:
    """A ``DynamicQuantizeParameters`` node (``passes/quantized.py``) as one prebound compiled
    call writing its scale and zero point into their buffers
    (``program.quantize_parameters_call``), so that it joins the plan's compiled sequence:
    as a Python step (the range kernel, then the scalar arithmetic in Python) it took ~9 us of
    a BERT layer's 32 x 128 values and split the sequence around it."""
    node, context = step.node, step.context
    x = recorded[node.inputs[0]]
    if len([n for n in node.outputs if n]) != 2 or x.dtype != np.float32 or not x.size:
        return None
    probe = [np.empty((), np.float32) for _ in range(2)]
    if program.quantize_parameters_call(contiguous(x), *probe, str(context)) is None:
        return None

    def make(outs: list[np.ndarray], buffers: list[np.ndarray], ins: list[Getter]) -> Run:
        get = ins[0]
        source = contiguous(get.fixed) if get.fixed is not None else np.zeros(x.shape, x.dtype)
        call = program.quantize_parameters_call(source, outs[0], outs[1], str(context))
        assert call is not None          # the probe above took the same shapes
        if get.fixed is not None:
            return made_of(lambda env: call(), [(call, [])])

        def run(env: Env) -> None:
            call.rebind("x", contiguous(get(env)))
            call()
        return made_of(run, [(call, [("x", get, None)])])

    spec = Spec(make, [], "copy")
    spec.plan = "generated dynamic quantization parameters (one pass, prebound)"
    return spec


_BUILDERS: dict[str, Callable[[Step, Env, Mapping[str, np.ndarray]], Spec | None]] = {
    "Fused": _fused, "EmbeddingBag": _bag, "Gather": gather_spec, "Concat": concat_spec,
    "MatMul": matmul_spec, "Transpose": transpose_spec, "Gemm": gemm_spec, "Conv": conv_spec,
    "MaxPool": pool_spec, "AveragePool": pool_spec, "Softmax": softmax_spec,
    "LogSoftmax": softmax_spec, "Slice": slice_spec, "Split": split_spec, "CumSum": cumsum_spec,
    "GatherND": gather_nd_spec, "LSTM": recurrent_spec, "GRU": recurrent_spec,
    "RNN": recurrent_spec, "Resize": resize_spec, ROW_OP: row_scatter_spec,
    "DepthToSpace": blocks_spec, "SpaceToDepth": blocks_spec,
    "ReduceMax": reduce_extreme_spec, "ReduceMin": reduce_extreme_spec,
    PARAMETERS_OP: quantize_parameters_spec, INT8_OP: quantized_matmul_spec,
    CONV_INT8_OP: quantized_conv_spec,
    # mixed-dtype mask ops, and Reshape-like copies to graph outputs (onnx/plan/mask_steps.py)
    **{op: mask_spec for op in {**MASK_OPS, **COPY_OPS}},
}


# Re-exported for the plan (static.py): the step types live in step_base.
__all__ = ["Env", "Getter", "MultiHot", "Part", "Replan", "Run", "Spec", "all_below",
           "check_indices", "contiguous", "made_of", "parts_of", "spec_of"]
