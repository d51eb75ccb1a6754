"""Opt level 3: constant contraction weights that are mostly zeros, stored compressed.

A MatMul or Gemm whose weight (second input) is a constant 2-D float matrix with at least
``threshold`` zeros gets its weight ``W`` (k x n, after Gemm's transB) in two compressed forms,
``W^T`` in CSR and ``W`` in CSC (the same arrays, read by the two statements of
:mod:`tensoralg.onnx.passes.fusion`), and its contraction, with any epilogue, runs as one sparse kernel.
``SparseTensorProto`` initializers are densified by :func:`sparse_initializer` at load and take
the same path (their zeros count like any other).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import scipy.sparse as sp
from onnx import numpy_helper

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Graph

DEFAULT_THRESHOLD = 0.7


def threshold_of(sparse_weights: Any) -> float | None:
    """The zero fraction from ``load(sparse_weights=...)``: "auto"/True -> 0.7, False/None ->
    off, a float in [0, 1] as given."""
    if sparse_weights is False or sparse_weights is None:
        return None
    if sparse_weights is True or sparse_weights == "auto":
        return DEFAULT_THRESHOLD
    if isinstance(sparse_weights, (int, float)) and 0.0 <= float(sparse_weights) <= 1.0:
        return float(sparse_weights)
    raise ta.UnsupportedError(f"sparse_weights must be 'auto', True, False or a zero fraction "
                              f"in [0, 1], not {sparse_weights!r}")


def find_sparse_weights(graph: Graph, threshold: float | None) -> dict[str, Any]:
    """Contraction node name -> (CSR of W^T, CSC of W) for each weight at least ``threshold``
    zeros."""
    if threshold is None:
        return {}
    found = {}
    for node in graph.nodes:
        if node.op_type not in ("MatMul", "Gemm") or len(node.inputs) < 2:
            continue
        weight = graph.constants.get(node.inputs[1])
        if weight is None or weight.ndim != 2 or weight.dtype.kind != "f" or weight.size == 0:
            continue
        if node.op_type == "Gemm" and node.attributes.get("transB", 0):
            weight = weight.T
        zeros = 1.0 - np.count_nonzero(weight) / weight.size
        if zeros < threshold:
            continue
        dtype = weight.dtype if weight.dtype in (np.float32, np.float64) else np.float32
        w = np.ascontiguousarray(weight, dtype=dtype)
        found[node.name] = (ta.Tensor.from_scipy(sp.csr_array(w.T)),
                            ta.Tensor.from_scipy(sp.csc_array(w)))
    graph.notes.append(f"sparse weights (>= {threshold:.0%} zeros): "
                       f"{', '.join(sorted(found)) or 'none'}")
    return found


def sparse_initializer(proto: onnx.SparseTensorProto) -> np.ndarray:
    """A ``SparseTensorProto`` as a dense array (indices linearised [NNZ] or [NNZ, rank])."""
    values = numpy_helper.to_array(proto.values)
    indices = numpy_helper.to_array(proto.indices).astype(np.int64)
    dims = tuple(proto.dims)
    dense = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), dims) if indices.size else \
            indices.reshape(-1)
    if indices.size and (indices.min() < 0 or indices.max() >= dense.size):
        raise ta.ShapeError(f"sparse initializer {proto.values.name!r}: an index is outside "
                            f"its shape {dims}")
    dense.reshape(-1)[indices] = values.reshape(-1)
    return dense


__all__ = ["find_sparse_weights", "sparse_initializer", "threshold_of", "DEFAULT_THRESHOLD"]
