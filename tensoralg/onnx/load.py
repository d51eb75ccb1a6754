"""Reading an ONNX model into a :class:`Graph`: parse, check, resolve every op at load time.

Subgraph attributes (control flow) are refused, except a ``Loop`` that is an exported
``nn.EmbeddingBag``: :mod:`tensoralg.onnx.bag_loops` replaces it by one ``EmbeddingBag`` node
here, before any pass, so every opt level runs it and any other Loop is refused at load.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError

import tensoralg as ta
from tensoralg.onnx.bag_loops import recognise_bag_loops
from tensoralg.onnx.errors import ModelError
from tensoralg.onnx.graph import Graph, Node, ValueInfo
from tensoralg.onnx.ops import lookup, shape_math  # noqa: F401  (shape_math: Size, Range, ...)
from tensoralg.onnx.ops.constant import numpy_dtype, tensor_value
from tensoralg.onnx.sparse_weights import sparse_initializer

MIN_OPSET = 11
_DEFAULT_DOMAINS = ("", "ai.onnx")


def read_model(source: Any) -> onnx.ModelProto:
    """A ModelProto from a path, bytes, or a ModelProto; ModelError if it cannot be read."""
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        where = "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        where = str(source)
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
    return model


def check_model(model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"the model fails onnx.checker: {first}") from None


def opset_of(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
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
    if proto.domain not in _DEFAULT_DOMAINS:
        raise ta.UnsupportedError(f"{where}: domain {proto.domain!r} is not supported")
    try:
        version = onnx.defs.get_schema(proto.op_type, opset, proto.domain).since_version
    except onnx.defs.SchemaError:
        version = opset
    impl = lookup(proto.op_type, version)
    if impl is None:
        raise ta.UnsupportedError(f"{where}: op {proto.op_type} (version {version}) is not "
                                  f"supported by the tensoralg ONNX importer")
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
    check_model(model)
    opset = opset_of(model)
    graph = model.graph
    constants = {init.name: tensor_value(init) for init in graph.initializer}
    for sparse in graph.sparse_initializer:  # dense here; level 3 compresses mostly-zero weights
        constants[sparse.values.name] = sparse_initializer(sparse)
    inputs = [value_info(v) for v in graph.input if v.name not in constants]
    overridable = {v.name: value_info(v) for v in graph.input if v.name in constants}
    outputs = [value_info(v) for v in graph.output]
    names = []
    used: set[str] = set()
    for k, proto in enumerate(graph.node):
        names.append(proto.name if proto.name and proto.name not in used else f"n{k}")
        used.add(names[-1])
    # Loops first: an unrecognised one is refused before the sequence ops around it are
    bags, notes = recognise_bag_loops(graph, names)
    nodes = []
    refused: list[str] = []
    known = dict(constants)          # values fixed at load: initializers, Constant outputs
    for k, proto in enumerate(graph.node):
        if k in bags:
            nodes.extend([bags[k]] if bags[k] is not None else [])
            continue
        try:
            nodes.append(resolve_node(proto, names[k], opset))
        except ta.UnsupportedError as err:
            folded = reference_fold(proto, known, model.opset_import)
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
            known.update(reference_fold(proto, known, model.opset_import) or {})
    if refused:
        # Every refusal at once: a model with three missing ops should not take three loads.
        more = f"\n(and {len(refused) - 1} more node(s):\n  " + "\n  ".join(refused[1:]) + ")" \
            if len(refused) > 1 else ""
        raise ta.UnsupportedError(refused[0] + more)
    return Graph(nodes, inputs, outputs, constants, opset, notes=notes, overridable=overridable)


def reference_fold(proto: onnx.NodeProto, known: dict[str, np.ndarray],
                   opsets: Any) -> dict[str, np.ndarray] | None:
    """The outputs of ``proto`` computed by ``onnx.reference`` when all its inputs are in
    ``known`` (a TorchScript export of ``nn.MultiheadAttention`` computes a Mod of two
    Constants); None when one is not, or when the reference cannot run it."""
    if any(name and name not in known for name in proto.input) or \
            proto.domain not in _DEFAULT_DOMAINS:
        return None
    try:
        from onnx.reference import ReferenceEvaluator

        inputs = [onnx.helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
                  for name in dict.fromkeys(n for n in proto.input if n)]
        outputs = [onnx.helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
                   for name in proto.output if name]
        graph = onnx.helper.make_graph([proto], "fold", inputs, outputs)
        model = onnx.helper.make_model(graph, opset_imports=list(opsets))
        feeds = {value.name: known[value.name] for value in inputs}
        results = ReferenceEvaluator(model).run(None, feeds)
    except Exception:  # noqa: BLE001 - whatever the reference refuses stays unsupported
        return None
    return {value.name: np.asarray(result) for value, result in zip(outputs, results)}


def np_dtype_name(dtype: np.dtype | None) -> str:
    return "?" if dtype is None else str(dtype)
