"""Opt level 2: an ``Einsum`` that is a (batched) matrix product becomes a ``MatMul``.

deepctr's DCN and AutoInt write their cross layer and attention scores as Einsums
(``ij,jk->ik``, ``bnik,bnjk->bnij``). An Einsum runs ``ta.einsum`` at every call (parsing, a
kernel lookup and argument checks each time: half a millisecond on a 256 x 221 x 1 product) and
nothing fuses with it; a MatMul gets the plan's prebound products (the generated GEMM or BLAS)
and the fusion of its epilogue. The equation must name every axis with its own letter (no
ellipsis, no repeated letter in one operand) and read

- ``B..ij,B..jk->B..ik``: ``MatMul(A, B)``;
- ``B..ij,B..kj->B..ik``: ``MatMul(A, Transpose(B))``, the last two axes of ``B`` swapped,

with the same batch letters ``B..`` in the same order everywhere (their sizes must then agree,
as MatMul's broadcasting allows no less). Anything else stays an Einsum.

>>> product_form("ij,jk->ik"), product_form("bnik,bnjk->bnij"), product_form("bhd,bmd->bhmd")
((0, False), (2, True), None)
"""
from __future__ import annotations

import numpy as np

from tensoralg.onnx.frontend.graph import Graph, Node, fresh_name, value_names
from tensoralg.onnx.ops.registry import lookup


def product_form(equation: str) -> tuple[int, bool] | None:
    """``(batch axes, B transposed)`` when ``equation`` is a matrix product as the module
    docstring says, else None."""
    text = "".join(equation.split())
    if "->" not in text or "." in text:
        return None
    inputs, output = text.split("->")
    operands = inputs.split(",")
    if len(operands) != 2:
        return None
    a, b = operands
    if len(a) < 2 or len(set(a)) != len(a) or len(set(b)) != len(b) or \
            len(set(output)) != len(output) or len(a) != len(b) or len(output) != len(a):
        return None
    batch = a[:-2]
    i, j = a[-2:]
    if b[:-2] != batch or output[:-2] != batch or len({*batch, i, j}) != len(a):
        return None
    k = b[-1] if b[-2] == j else b[-2] if b[-1] == j else None
    if k is None or k in a or output[-2:] != i + k:
        return None
    return len(batch), b[-1] == j


def einsums_as_matmuls(graph: Graph) -> Graph:
    """Replace every Einsum that is a matrix product by a MatMul (after a Transpose of its
    second operand for the ``..kj`` form); other nodes are untouched."""
    matmul = lookup("MatMul", 13)
    transpose = lookup("Transpose", 13)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        form = product_form(str(node.attributes.get("equation", ""))) \
            if node.op_type == "Einsum" and len(node.inputs) == 2 else None
        if form is None or matmul is None or transpose is None:
            nodes.append(node)
            continue
        batch, transposed = form
        a, b = node.inputs
        if transposed:
            swapped = f"{node.name}/transposed_{b}"
            perm = [*range(batch), batch + 1, batch]
            nodes.append(Node(f"{node.name}/Transpose", "Transpose", (b,), (swapped,),
                              {"perm": perm}, 13, transpose))
            b = swapped
        nodes.append(Node(node.name, "MatMul", (a, b), node.outputs, {}, 13, matmul))
        replaced += 1
    graph.nodes = nodes
    graph.notes.append(f"einsum products: {replaced} Einsum(s) as MatMul")
    return graph


def column_products_as_row_products(graph: Graph) -> Graph:
    """Replace ``MatMul(W, X)`` with ``W`` a float constant (M, K) and ``X`` of static shape
    (..., K, 1), a batch of columns, by the row product ``X' @ W^T`` between two reshapes:
    ``Reshape(X, (..., K)) -> MatMul(., W^T) -> Reshape(., (..., M, 1))``, ``W^T`` a new
    constant. DCN-Mix's experts write ``einsum('ij,bjk->bik', V.t(), x)`` on (B, 221, 1)
    columns: as exported, each ran as B products of one column (BLAS, batched); as one
    (B x K) by (K x M) product with a constant right operand it takes the generated GEMM with
    its weight packed at load. The reshapes are views."""
    matmul = lookup("MatMul", 13)
    reshape = lookup("Reshape", 14)
    if matmul is None or reshape is None:
        return graph
    taken = value_names(graph)

    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        weight = graph.constants.get(node.inputs[0]) if node.op_type == "MatMul" and \
            len(node.inputs) == 2 else None
        x = graph.static_shapes.get(node.inputs[1]) if weight is not None else None
        if weight is None or x is None or weight.ndim != 2 or weight.dtype.kind != "f" or \
                len(x) < 3 or x[-1] != 1 or x[-2] != weight.shape[1] or \
                node.inputs[1] in graph.constants:
            nodes.append(node)
            continue
        rows = fresh_name(f"{node.name}/rows", taken)
        rows_shape = fresh_name(f"{node.name}/rows_shape", taken)
        transposed = fresh_name(f"{node.name}/weight_t", taken)
        product = fresh_name(f"{node.name}/row_product", taken)
        out_shape = fresh_name(f"{node.name}/columns_shape", taken)
        graph.constants[rows_shape] = np.array(x[:-1], np.int64)
        graph.constants[transposed] = np.ascontiguousarray(weight.T)
        graph.constants[out_shape] = np.array([*x[:-2], weight.shape[0], 1], np.int64)
        nodes += [Node(f"{node.name}/Reshape", "Reshape", (node.inputs[1], rows_shape), (rows,),
                       {}, 14, reshape),
                  Node(node.name, "MatMul", (rows, transposed), (product,), {}, 13, matmul),
                  Node(f"{node.name}/Reshape_back", "Reshape", (product, out_shape),
                       node.outputs, {}, 14, reshape)]
        for name, shape in ((rows, x[:-1]), (product, (*x[:-2], weight.shape[0])),
                            (node.outputs[0], (*x[:-2], weight.shape[0], 1))):
            graph.static_shapes[name] = tuple(shape)
        replaced += 1
    graph.nodes = nodes
    graph.notes.append(f"column products: {replaced} MatMul(s) of a constant by columns as "
                       f"row products")
    return graph


__all__ = ["column_products_as_row_products", "einsums_as_matmuls", "product_form"]
