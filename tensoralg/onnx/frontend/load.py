"""Reading an ONNX model into a :class:`Graph`: parse, check, resolve every op at load time.

Weights stored outside the model file (``model.onnx.data`` beside ``model.onnx``, as the dynamo
exporter writes large models) are read relative to the model file, as onnxruntime reads them,
whatever the working directory; for bytes or a ModelProto, relative to the working directory.

Subgraph attributes (control flow) are taken in two forms. An ``If`` whose condition is known
at load is replaced by the branch it takes (:mod:`tensoralg.onnx.frontend.conditionals`); any other
``If`` becomes a node that runs its branches' subgraphs (built here, as graphs of their own) as
its condition says. A ``Loop`` that is an exported ``nn.EmbeddingBag`` is replaced by one
``EmbeddingBag`` node (:mod:`tensoralg.onnx.passes.bags.loops`); any other Loop over tensors
becomes a node that runs its body iteration by iteration (torchvision's Mask R-CNN pastes its
masks so). Both happen here, before any pass, so every opt level runs them; a Loop that carries
sequences and is not an embedding bag is refused at load.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

import tensoralg as ta
from tensoralg.onnx.frontend.conditionals import Branch, free_names, inline_decided_ifs, subgraph
from tensoralg.onnx.frontend.errors import ModelError
from tensoralg.onnx.frontend.graph import Graph, Node, ValueInfo
from tensoralg.onnx.frontend.qoperator import CONTRIB, MICROSOFT, qoperator_as_qdq
from tensoralg.onnx.frontend.reference import DEFAULT_DOMAINS, reference_fold
from tensoralg.onnx.frontend.sequences import static_sequences
from tensoralg.onnx.ops import lookup, shape_math  # noqa: F401  (shape_math: Size, Range, ...)
from tensoralg.onnx.ops.constant import numpy_dtype, tensor_value
from tensoralg.onnx.passes.bags.loops import SEQUENCE_OPS, recognise_bag_loops
from tensoralg.onnx.passes.sparse_weights import sparse_initializer

MIN_OPSET = 11


def read_model(source: Any) -> onnx.ModelProto:
    """A ModelProto from a path, bytes, or a ModelProto, with any external data read in;
    ModelError if it cannot be read."""
    base_dir = os.getcwd()
    if isinstance(source, onnx.ModelProto):
        return with_external_data(source, base_dir, "the given ModelProto", copy=True)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        where = "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        where = str(source)
        base_dir = os.path.dirname(os.path.abspath(source))
        try:
            with open(source, "rb") as handle:
                data = handle.read()
        except OSError as err:
            raise ModelError(f"cannot read model {where}: {err.strerror}") from None
    else:
        raise ModelError(f"expected a path, bytes or onnx.ModelProto, not "
                         f"{type(source).__name__}")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as err:
        raise ModelError(f"{where} is not a valid ONNX protobuf: {err}") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{where} holds no graph (is it an ONNX model?)")
    return with_external_data(model, base_dir, where, copy=False)


def with_external_data(model: onnx.ModelProto, base_dir: str, where: str, copy: bool
                       ) -> onnx.ModelProto:
    """``model`` with the tensors it stores in external files read in from ``base_dir``
    (onnx checks that their locations stay inside it); a copy when ``copy`` and there is any,
    so that a caller's ModelProto is never changed."""
    external = [tensor for tensor in _tensors(model.graph)
                if external_data_helper.uses_external_data(tensor)]
    if not external:
        return model
    if copy:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    try:
        external_data_helper.load_external_data_for_model(model, base_dir)
    except (OSError, ValueError, onnx.checker.ValidationError) as err:
        detail = getattr(err, "strerror", None) or str(err)
        names = ", ".join(sorted({t.name for t in external})[:3])
        raise ModelError(f"{where}: cannot read the external data of tensor(s) {names} "
                         f"relative to {base_dir}: {detail}") from None
    return model


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph holds: initializers (sparse ones too) and tensor attributes, in
    its subgraphs as well."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                yield attribute.t
            yield from attribute.tensors
            if attribute.HasField("g"):
                yield from _tensors(attribute.g)
            for sub in attribute.graphs:
                yield from _tensors(sub)


def check_model(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = ""
        if "Field 'shape' of 'type' is required" in first:
            # onnx.helper.make_tensor_value_info(name, type, None) writes no shape at all
            hint = (" (a graph input or output declared without a shape; give it one, with "
                    "symbolic dimensions where unknown: make_tensor_value_info(name, type, "
                    "['batch', 'd1']))")
        raise ModelError(f"the model fails onnx.checker: {first}{hint}") from None


def opset_of(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise ModelError("the model imports no version of the default ONNX domain")
    if versions[0] < MIN_OPSET:
        raise ta.UnsupportedError(f"opset {versions[0]} is older than {MIN_OPSET}, the oldest "
                                  f"supported; convert it with onnx.version_converter")
    newest = onnx.defs.onnx_opset_version()
    if versions[0] > newest:
        raise ModelError(f"the model imports opset {versions[0]} of the default ONNX domain; "
                         f"the installed onnx {onnx.__version__} knows opsets up to {newest}, so "
                         f"its ops cannot be resolved (a newer onnx package may know it)")
    return versions[0]


def value_info(proto: onnx.ValueInfoProto) -> ValueInfo:
    kind = proto.type.WhichOneof("value")
    if kind != "tensor_type":
        raise ta.UnsupportedError(f"graph value {proto.name!r} is a {kind}, not a tensor")
    tensor = proto.type.tensor_type
    dtype = numpy_dtype(tensor.elem_type) if tensor.elem_type else None
    shape = None
    if tensor.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                      for d in tensor.shape.dim)
    return ValueInfo(proto.name, shape, dtype)


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in node.attribute:
        if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            raise ta.UnsupportedError(f"node {node.name or node.op_type}: subgraph attribute "
                                      f"{attribute.name!r} (control flow) is not supported")
        if attribute.ref_attr_name:
            raise ta.UnsupportedError(f"node {node.name}: attribute references are only "
                                      f"valid inside functions")
        value = onnx.helper.get_attribute_value(attribute)
        if isinstance(value, onnx.TensorProto):
            value = tensor_value(value)
        elif isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, onnx.SparseTensorProto):
            raise ta.UnsupportedError(f"node {node.name}: sparse tensor attributes are not "
                                      f"supported yet")
        values[attribute.name] = value
    return values


def resolve_node(proto: onnx.NodeProto, name: str, opset: int) -> Node:
    """Our implementation of ``proto``, or UnsupportedError naming op, node and inputs."""
    where = f"node {name} ({proto.op_type}, inputs {list(proto.input)})"
    if proto.domain not in DEFAULT_DOMAINS:
        hint = ""
        if proto.domain == MICROSOFT:
            # onnxruntime's quantizer writes some of these (frontend/qoperator.py reads the
            # QOperator format's); its QDQ format uses standard ops only
            hint = (f"; of that domain, tensoralg reads {', '.join(sorted(CONTRIB))} (at the "
                    f"top level of the graph); quantize with onnxruntime.quantization's "
                    f"quant_format=QuantFormat.QDQ (the default of quantize_static)")
        raise ta.UnsupportedError(f"{where}: domain {proto.domain!r} is not supported{hint}")
    try:
        version = onnx.defs.get_schema(proto.op_type, opset, proto.domain).since_version
    except onnx.defs.SchemaError:
        version = opset
    impl = lookup(proto.op_type, version)
    if impl is None:
        hint = "" if proto.op_type not in SEQUENCE_OPS else (
            " here: sequences are resolved at load into tensor ops only where a sequence is "
            "not a graph output and no Loop, If or SequenceMap reads it")
        raise ta.UnsupportedError(f"{where}: op {proto.op_type} (version {version}) is not "
                                  f"supported by the tensoralg ONNX importer{hint}")
    attributes = attribute_values(proto)
    unknown = impl.unknown_attributes(attributes)
    if unknown:
        raise ta.UnsupportedError(f"{where}: attribute(s) {', '.join(unknown)} not supported")
    if impl.check is not None:
        reason = impl.check(attributes)
        if reason:
            raise ta.UnsupportedError(f"{where}: {reason}")
    return Node(name, proto.op_type, tuple(proto.input), tuple(proto.output), attributes,
                version, impl)


def build_graph(model: onnx.ModelProto) -> Graph:
    """Check ``model`` and resolve each node; every unsupported op is refused here."""
    return load_graph(model)[0]


def load_graph(model: onnx.ModelProto) -> tuple[Graph, onnx.ModelProto]:
    """:func:`build_graph`, and the model as the graph was read from it: with the Ifs decided
    at load inlined (what later shape inference must see)."""
    check_model(model)
    opset = opset_of(model)
    model, notes = inline_decided_ifs(model)
    model, quantized_notes = qoperator_as_qdq(model, opset)
    notes.extend(quantized_notes)
    model, sequence_notes = static_sequences(model, opset)
    notes.extend(sequence_notes)
    graph = model.graph
    constants = {init.name: tensor_value(init) for init in graph.initializer}
    for sparse in graph.sparse_initializer:  # dense here; level 3 compresses mostly-zero weights
        constants[sparse.values.name] = sparse_initializer(sparse)
    inputs = [value_info(v) for v in graph.input if v.name not in constants]
    overridable = {v.name: value_info(v) for v in graph.input if v.name in constants}
    outputs = [value_info(v) for v in graph.output]
    nodes, refused = resolve_nodes(graph, "", opset, model.opset_import, constants, notes)
    if refused:
        # Every refusal at once: a model with three missing ops should not take three loads.
        more = f"\n(and {len(refused) - 1} more node(s):\n  " + "\n  ".join(refused[1:]) + ")" \
            if len(refused) > 1 else ""
        raise ta.UnsupportedError(refused[0] + more)
    return Graph(nodes, inputs, outputs, constants, opset, notes=notes,
                 overridable=overridable), model


def resolve_nodes(graph: onnx.GraphProto, prefix: str, opset: int, opsets: Any,
                  constants: dict[str, np.ndarray], notes: list[str]
                  ) -> tuple[list[Node], list[str]]:
    """Our node for each node of ``graph`` (a model's graph, or an If branch whose unnamed
    nodes are named under ``prefix``), and why each refused node is refused. ``constants``
    gains the values evaluated at load by onnx's reference implementation."""
    names = []
    used: set[str] = set()
    for k, proto in enumerate(graph.node):
        names.append(proto.name if proto.name and proto.name not in used else f"{prefix}n{k}")
        used.add(names[-1])
    # Loops first: an unrecognised one is refused before the sequence ops around it are
    bags, bag_notes = recognise_bag_loops(graph, names)
    notes.extend(bag_notes)
    nodes = []
    refused: list[str] = []
    known = dict(constants)          # values fixed at load: initializers, Constant outputs
    for k, proto in enumerate(graph.node):
        if k in bags:
            nodes.extend([bags[k]] if bags[k] is not None else [])
            continue
        try:
            if proto.op_type == "If" and proto.domain in DEFAULT_DOMAINS:
                nodes.append(runtime_if(proto, names[k], opset, opsets))
            elif proto.op_type == "Loop" and proto.domain in DEFAULT_DOMAINS:
                nodes.append(runtime_loop(proto, names[k], opset, opsets))
            else:
                nodes.append(resolve_node(proto, names[k], opset))
        except ta.UnsupportedError as err:
            folded = reference_fold(proto, known, opsets)
            if folded is None:
                refused.append(str(err))
                continue
            constants.update(folded)
            known.update(folded)
            notes.append(f"node {names[k]} ({proto.op_type}) evaluated at load by onnx's "
                         f"reference implementation: tensoralg has no kernel for it, and all "
                         f"its inputs are constants")
            continue
        if proto.op_type == "Constant":
            known.update(reference_fold(proto, known, opsets) or {})
    return nodes, refused


def _subgraph_nodes(body: onnx.GraphProto, label: str, opset: int, opsets: Any
                    ) -> tuple[list[Node], list[str], dict[str, np.ndarray], list[str]]:
    """A subgraph's nodes (named under ``label``), why any is refused, its constants and its
    notes, as :func:`resolve_nodes` makes them."""
    constants = {init.name: tensor_value(init) for init in body.initializer}
    for sparse in body.sparse_initializer:
        constants[sparse.values.name] = sparse_initializer(sparse)
    notes: list[str] = []
    nodes, refused = resolve_nodes(body, f"{label}/", opset, opsets, constants, notes)
    return nodes, refused, constants, notes


def runtime_if(proto: onnx.NodeProto, name: str, opset: int, opsets: Any) -> Node:
    """An If whose condition is known only at run time: a node reading its condition and
    every outer value its branches read, with each branch built as a graph of its own."""
    version = onnx.defs.get_schema("If", opset, "").since_version
    impl = lookup("If", version)
    branches = {}
    refused = []
    for which in ("then_branch", "else_branch"):
        body = subgraph(proto, which)
        label = f"{name}.{which.split('_')[0]}"
        nodes, why, constants, notes = _subgraph_nodes(body, label, opset, opsets)
        refused += why
        inputs = [ValueInfo(n, None, None) for n in free_names(body)]
        outputs = [_branch_output(v, name) for v in body.output]
        branches[which] = Branch(Graph(nodes, inputs, outputs, constants, opset, notes=notes),
                                 label)
    if refused:
        raise ta.UnsupportedError("\n  ".join(refused))
    if any(len(b.graph.outputs) != len(proto.output) for b in branches.values()):
        raise ta.UnsupportedError(f"node {name} (If): each branch must have one output per "
                                  f"output of the node ({len(proto.output)})")
    reads = dict.fromkeys(v.name for b in branches.values() for v in b.graph.inputs)
    return Node(name, "If", (proto.input[0], *reads), tuple(proto.output), branches, version,
                impl)


def runtime_loop(proto: onnx.NodeProto, name: str, opset: int, opsets: Any) -> Node:
    """A Loop that is not an embedding bag (those are replaced before this): a node reading
    its trip count, condition, initial loop-carried values and every outer value its body
    reads, with the body built as a graph of its own whose inputs are the iteration number,
    the condition, the carried values and those outer values."""
    version = onnx.defs.get_schema("Loop", opset, "").since_version
    impl = lookup("Loop", version)
    body = subgraph(proto, "body")
    carried = len(proto.input) - 2
    if carried < 0 or len(body.input) != carried + 2 or len(body.output) < carried + 1:
        raise ta.UnsupportedError(
            f"node {name} (Loop): its body must take the iteration number, the condition and "
            f"the {max(carried, 0)} carried value(s), and give the condition and the carried "
            f"values first; it takes {len(body.input)} input(s) and gives "
            f"{len(body.output)} output(s)")
    label = f"{name}.body"
    nodes, refused, constants, notes = _subgraph_nodes(body, label, opset, opsets)
    if refused:
        raise ta.UnsupportedError("\n  ".join(refused))
    reads = free_names(body)
    formal = tuple(v.name for v in body.input)
    inputs = [ValueInfo(n, None, None) for n in (*formal, *reads)]
    outputs = [_branch_output(v, name) for v in body.output]
    graph = Graph(nodes, inputs, outputs, constants, opset, notes=notes)
    return Node(name, "Loop", (*proto.input, *reads), tuple(proto.output),
                {"body": Branch(graph, label), "carried": carried, "formal": formal},
                version, impl)


def _branch_output(proto: onnx.ValueInfoProto, name: str) -> ValueInfo:
    """A branch output: a tensor, possibly without a declared type (ONNX allows that in
    subgraphs); a sequence or optional is refused."""
    if not proto.type.WhichOneof("value"):
        return ValueInfo(proto.name, None, None)
    try:
        return value_info(proto)
    except ta.UnsupportedError as err:
        raise ta.UnsupportedError(f"node {name} (If): {err}") from None


def np_dtype_name(dtype: np.dtype | None) -> str:
    return "?" if dtype is None else str(dtype)
