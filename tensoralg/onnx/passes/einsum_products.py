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
as MatMul's broadcasting allows no less); or

- ``F..C..,W->F..G..`` with ``W`` a constant float weight over the contracted letters ``C..``
  and the kept ``G..`` in any order (XLNet's ``ibh,hnd->ibnd``): ``Reshape -> MatMul ->
  Reshape`` with the weight laid out as a (C.., G..) matrix at load; or
- ``..,..->..`` a batched product over one contracted letter in any axis order
  (:func:`batched_form`; XLNet's ``ibnd,jbnd->bnij``, Funnel's ``bind,snd->bnis``): each
  operand transposed into ``P..ic`` and ``P..cj``, ``MatMul``, and a Transpose into the
  output's order where it differs; or
- ``..->..`` with one operand, a reordering of its axes: ``Transpose``.

Anything else stays an Einsum.

>>> product_form("ij,jk->ik"), product_form("bnik,bnjk->bnij"), product_form("bhd,bmd->bhmd")
((0, False), (2, True), None)
"""
from __future__ import annotations

import numpy as np

from tensoralg.onnx.frontend.graph import Graph, Node, fresh_name, value_names
from tensoralg.onnx.ops.registry import lookup


def _parsed(equation: str, count: int) -> tuple[list[str], str] | None:
    """The operands' letters and the output's of an explicit ``equation`` of ``count``
    operands (spaces dropped); None with an ellipsis, an implicit output or another count."""
    text = "".join(equation.split())
    if "->" not in text or "." in text:
        return None
    inputs, output = text.split("->")
    operands = inputs.split(",")
    return (operands, output) if len(operands) == count else None


def product_form(equation: str) -> tuple[int, bool] | None:
    """``(batch axes, B transposed)`` when ``equation`` is a matrix product as the module
    docstring says, else None."""
    parsed = _parsed(equation, 2)
    if parsed is None:
        return None
    operands, output = parsed
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


def weight_form(equation: str, weight_rank: int) -> tuple[int, tuple[int, ...]] | None:
    """``(contracted axes, weight permutation)`` when ``equation`` multiplies an operand by a
    constant weight over the operand's trailing axes: ``F..C..,W->F..G..`` where the weight's
    letters (``weight_rank`` of them) are the contracted ``C..`` and the kept ``G..`` in any
    order (XLNet's projections ``ibh,hnd->ibnd`` and ``ibnd,hnd->ibh``). The permutation puts
    the weight's axes in the order ``C.., G..``; None for any other equation.

    >>> weight_form("ibh,hnd->ibnd", 3), weight_form("ibnd,hnd->ibh", 3)
    ((1, (0, 1, 2)), (2, (1, 2, 0)))
    >>> weight_form("ibh,hnd->bind", 3) is None, weight_form("ij,jk->ik", 2)
    (True, (1, (0, 1)))
    """
    parsed = _parsed(equation, 2)
    if parsed is None:
        return None
    operands, output = parsed
    a, w = operands
    if len(w) != weight_rank or any(len(set(t)) != len(t) for t in (a, w, output)):
        return None
    contracted = [c for c in a if c in w and c not in output]
    kept = sorted((c for c in w if c not in a), key=lambda c: output.find(c))
    count = len(contracted)
    if not contracted or not kept or a[len(a) - count:] != "".join(contracted) or \
            output != a[:len(a) - count] + "".join(kept) or \
            set(w) != set(contracted) | set(kept) or len(a) == count:
        return None
    return count, tuple(w.index(c) for c in contracted + kept)


def permutation(equation: str) -> tuple[int, ...] | None:
    """The Transpose ``perm`` of a one-operand Einsum that only reorders its axes (XLNet's
    ``ijbn->bnij``); None for any other.

    >>> permutation("ijbn->bnij"), permutation("ij->ji"), permutation("ii->i")
    ((2, 3, 0, 1), (1, 0), None)
    """
    parsed = _parsed(equation, 1)
    if parsed is None:
        return None
    (source,), output = parsed
    if len(set(source)) != len(source) or sorted(source) != sorted(output):
        return None
    return tuple(source.index(x) for x in output)


def batched_form(equation: str
                 ) -> tuple[tuple[int, ...], tuple[int, ...], bool, tuple[int, ...] | None] | None:
    """How ``equation``'s two operands become a batched matrix product ``P..ic, P..cj ->
    P..ij`` over one contracted letter ``c``, ``i`` in one operand only and ``j`` in the other
    only: the permutation of each operand, whether the second operand is the left factor, and
    the permutation of the product into the output (None: it is the output). Either the
    output ends with ``ij`` (or ``ji``), and each operand holds a trailing run of the batch
    letters (MatMul broadcasts the others: Funnel's ``bind,snd->bnis``); or the output is any
    order of ``P..``, ``i`` and ``j``, with every batch letter in both operands (XLNet's
    ``bnij,jbnd->ibnd``). None for any other equation.

    >>> batched_form("ibnd,jbnd->bnij")
    ((1, 2, 0, 3), (1, 2, 3, 0), False, None)
    >>> batched_form("ibnd,jbnd->bnji")
    ((1, 2, 3, 0), (1, 2, 0, 3), True, None)
    >>> batched_form("bind,snd->bnis"), batched_form("bnij,jbnd->ibnd")
    (((0, 2, 1, 3), (1, 2, 0), False, None), ((0, 1, 2, 3), (1, 2, 0, 3), False, (2, 0, 1, 3)))
    >>> batched_form("ibne,jbnd->bnij"), batched_form("bind,bnd->bnib")
    (None, None)
    """
    parsed = _parsed(equation, 2)
    if parsed is None or len(parsed[1]) < 2:
        return None
    operands, output = parsed
    a, b = operands
    if any(len(set(t)) != len(t) for t in (a, b, output)):
        return None
    contracted = [x for x in a if x in b and x not in output]
    only_a = [x for x in output if x in a and x not in b]
    only_b = [x for x in output if x in b and x not in a]
    shared = [x for x in output if x in a and x in b]
    if len(contracted) != 1 or not only_a or not only_b or \
            set(a) | set(b) != set(output) | set(contracted):
        return None
    c = contracted[0]
    i, j = output[-2], output[-1]
    if (i in only_a and j in only_b) or (i in only_b and j in only_a):
        swapped = i in only_b
        left, right = (b, a) if swapped else (a, b)
        batch = output[:-2]
        perms = []
        for operand, ends in ((left, (i, c)), (right, (c, j))):
            own = [x for x in batch if x in operand]
            if own != list(batch[len(batch) - len(own):]):
                return None            # not a trailing run: MatMul cannot broadcast it
            perms.append(tuple(operand.index(x) for x in (*own, *ends)))
        first, second = perms
        return (second, first, True, None) if swapped else (first, second, False, None)
    if len(only_a) != 1 or len(only_b) != 1:
        return None
    i, j = only_a[0], only_b[0]
    canonical = (*shared, i, j)
    return (tuple(a.index(x) for x in (*shared, i, c)), tuple(b.index(x) for x in (*shared, c, j)),
            False, tuple(canonical.index(x) for x in output))


def einsums_as_matmuls(graph: Graph) -> Graph:
    """Replace every Einsum that is a matrix product by a MatMul (after a Transpose of its
    second operand for the ``..kj`` form), and every product of an operand's trailing axes by
    a constant weight (:func:`weight_form`) by ``Reshape -> MatMul -> Reshape`` with the
    weight laid out (contracted, kept) at load; a constant operand that another form
    transposes is transposed here, once, instead of by a node; other nodes are untouched."""
    matmul = lookup("MatMul", 13)
    transpose = lookup("Transpose", 13)
    reshape = lookup("Reshape", 14)
    taken = value_names(graph)
    nodes: list[Node] = []
    replaced = 0
    for node in graph.nodes:
        equation = str(node.attributes.get("equation", ""))
        form = product_form(equation) \
            if node.op_type == "Einsum" and len(node.inputs) == 2 else None
        weight = graph.constants.get(node.inputs[1]) \
            if node.op_type == "Einsum" and len(node.inputs) == 2 and form is None else None
        weighted = weight_form(equation, weight.ndim) \
            if weight is not None and weight.dtype.kind == "f" and \
            node.inputs[0] not in graph.constants else None
        if weighted is not None and matmul is not None and reshape is not None:
            nodes += _weight_product(node, weight, *weighted, graph, taken, matmul, reshape)
            replaced += 1
            continue
        moved = permutation(equation) if node.op_type == "Einsum" and \
            len(node.inputs) == 1 else None
        if moved is not None and transpose is not None:
            nodes.append(Node(node.name, "Transpose", node.inputs, node.outputs,
                              {"perm": list(moved)}, 13, transpose))
            replaced += 1
            continue
        batched = batched_form(equation) if node.op_type == "Einsum" and \
            len(node.inputs) == 2 and form is None and weighted is None else None
        if batched is not None and matmul is not None and transpose is not None:
            operands = []
            for name, perm, which in zip(node.inputs, batched[:2], "ab"):
                if perm != tuple(range(len(perm))):
                    moved = fresh_name(f"{node.name}/{which}_laid_out", taken)
                    if name in graph.constants:     # laid out once, here (a constant weight)
                        graph.constants[moved] = np.ascontiguousarray(
                            graph.constants[name].transpose(perm))
                    else:
                        nodes.append(Node(f"{node.name}/Transpose_{which}", "Transpose",
                                          (name,), (moved,), {"perm": list(perm)}, 13,
                                          transpose))
                    name = moved
                operands.append(name)
            if batched[2]:
                operands.reverse()
            if batched[3] is None:
                nodes.append(Node(node.name, "MatMul", tuple(operands), node.outputs, {}, 13,
                                  matmul))
            else:
                product = fresh_name(f"{node.name}/product", taken)
                nodes += [Node(node.name, "MatMul", tuple(operands), (product,), {}, 13, matmul),
                          Node(f"{node.name}/Transpose_out", "Transpose", (product,),
                               node.outputs, {"perm": list(batched[3])}, 13, transpose)]
            replaced += 1
            continue
        if form is None or matmul is None or transpose is None:
            nodes.append(node)
            continue
        batch, transposed = form
        a, b = node.inputs
        if transposed:
            swapped = f"{node.name}/transposed_{b}"
            perm = [*range(batch), batch + 1, batch]
            if b in graph.constants:
                graph.constants[swapped] = np.ascontiguousarray(graph.constants[b].transpose(perm))
            else:
                nodes.append(Node(f"{node.name}/Transpose", "Transpose", (b,), (swapped,),
                                  {"perm": perm}, 13, transpose))
            b = swapped
        nodes.append(Node(node.name, "MatMul", (a, b), node.outputs, {}, 13, matmul))
        replaced += 1
    graph.nodes = nodes
    graph.notes.append(f"einsum products: {replaced} Einsum(s) as MatMul")
    return graph


def _weight_product(node: Node, weight: np.ndarray, contracted: int, order: tuple[int, ...],
                    graph: Graph, taken: set[str], matmul, reshape) -> list[Node]:
    """The nodes of :func:`weight_form`'s product: ``x`` with its ``contracted`` trailing axes
    joined (a Reshape whose zeros keep the leading sizes), times the weight as a (K, N)
    constant, then the N columns split into the kept axes' sizes (a Reshape, when there are
    several)."""
    laid = np.ascontiguousarray(weight.transpose(order))
    k = int(np.prod(laid.shape[:contracted]))
    kept = laid.shape[contracted:]
    parsed = _parsed(str(node.attributes["equation"]), 2)
    assert parsed is not None           # weight_form parsed the same equation
    leading = len(parsed[1]) - len(kept)
    a = node.inputs[0]
    steps: list[Node] = []
    matrix = fresh_name(f"{node.name}/weight_matrix", taken)
    graph.constants[matrix] = laid.reshape(k, int(np.prod(kept)))
    if contracted > 1:
        shape = fresh_name(f"{node.name}/rows_shape", taken)
        rows = fresh_name(f"{node.name}/rows", taken)
        graph.constants[shape] = np.array([0] * leading + [-1], np.int64)
        steps.append(Node(f"{node.name}/Reshape", "Reshape", (a, shape), (rows,), {}, 14,
                          reshape))
        a = rows
    if len(kept) == 1:
        steps.append(Node(node.name, "MatMul", (a, matrix), node.outputs, {}, 13, matmul))
        return steps
    product = fresh_name(f"{node.name}/product", taken)
    shape = fresh_name(f"{node.name}/out_shape", taken)
    graph.constants[shape] = np.array([0] * leading + list(kept), np.int64)
    steps += [Node(node.name, "MatMul", (a, matrix), (product,), {}, 13, matmul),
              Node(f"{node.name}/Reshape_back", "Reshape", (product, shape), node.outputs, {},
                   14, reshape)]
    return steps


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


__all__ = ["batched_form", "column_products_as_row_products", "einsums_as_matmuls",
           "permutation", "product_form", "weight_form"]
