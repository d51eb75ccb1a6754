"""Nodes evaluated at load time by onnx's reference implementation (``onnx.reference``).

The loader uses it for a node of an op without a kernel whose inputs are all constants (a
TorchScript export of ``nn.MultiheadAttention`` computes a Mod of two Constants), and
:mod:`tensoralg.onnx.frontend.conditionals` for the small shape arithmetic that decides an ``If``.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnx

DEFAULT_DOMAINS = ("", "ai.onnx")


def reference_fold(proto: onnx.NodeProto, known: Mapping[str, np.ndarray],
                   opsets: Any) -> dict[str, np.ndarray] | None:
    """The outputs of ``proto`` computed by ``onnx.reference`` when all its inputs are in
    ``known``; None when one is not, or when the reference cannot run it.

    >>> node = onnx.helper.make_node("Mod", ["a", "b"], ["c"])
    >>> reference_fold(node, {"a": np.array(7), "b": np.array(3)},
    ...                [onnx.helper.make_opsetid("", 17)])
    {'c': array(1)}
    """
    if any(name and name not in known for name in proto.input) or \
            proto.domain not in DEFAULT_DOMAINS:
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


__all__ = ["DEFAULT_DOMAINS", "reference_fold"]
