"""Opt level 2: embedding bags recognised and run as ONE sparse·dense contraction.

``Gather(T, I)`` with a constant 2-D table ``T`` and a 2-D index input ``I`` (batch x bag size),
optionally followed by ``Mul`` with per-sample weights of shape (batch, bag, 1), then
``ReduceSum``/``ReduceMean`` over axis 1, becomes one ``EmbeddingBag`` node. (The other bag
form, a ``MatMul(X, T)`` of a multi-hot graph input, is a program of
:func:`tensoralg.onnx.passes.fusion.fuse`, which passes ``X`` in CSR when it is mostly zeros.)

At run time the bag matrix ``S`` (batch x rows of T) is built in CSR from the offsets
(``b * L``), the indices (sorted within each bag; repeated indices summed) and the per-sample
weights (1, 1/L for a mean, or the weights given), and the node runs

    Y(i,j) = S(i,k) * T(k,j)        with S in CSR

so the (batch, bag, dim) tensor that Gather would materialise never exists. An index input that
is not 2-D runs the original nodes.

The ``Loop`` forms of ``nn.EmbeddingBag`` (the TorchScript exporter's Gather/Slice/ReduceSum
body and the dynamo exporter's sequence-op loop) are recognised when the model is loaded, at every
opt level, by :mod:`tensoralg.onnx.passes.bags.loops`, which replaces each by an ``EmbeddingBag`` node run
by :func:`run_loop_bag`: bag ``b`` covers ``indices[offsets[b]:offsets[b+1]]`` (the last bag to
the end), and its CSR row is built from those ranges directly, then the same statement runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Graph, Node, consumers_of
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.registry import OpImpl
from tensoralg.onnx.passes.fusion import run_original

BAG_STATEMENT = "Y(i,j) = S(i,k) * T(k,j)"


@dataclass
class Bag:
    """One recognised bag: the nodes it replaces, and how its bag matrix is weighted."""

    nodes: tuple[Node, ...]
    mode: str                       # "sum" or "mean"
    keepdims: int = 0
    cache: dict[Any, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"embedding bag ({self.mode}) from {' -> '.join(n.op_type for n in self.nodes)}"


def run_bag(context: NodeContext, table: np.ndarray, index: np.ndarray,
            weights: np.ndarray | None = None, *, bag: Bag) -> np.ndarray:
    """Build the CSR bag matrix of this call and run the one sparse·dense statement."""
    names = bag.nodes[0].inputs[:1] + bag.nodes[0].inputs[1:2]
    batch_ok = index.ndim == 2 and table.ndim == 2 and table.dtype in (np.float32, np.float64)
    if weights is not None:
        batch_ok = batch_ok and weights.dtype == table.dtype and \
            weights.shape in (index.shape + (1,),)
    if not batch_ok:
        context.note("bag not recognised at run time (shapes or dtypes): original nodes")
        values = dict(zip(names, (table, index)))
        if weights is not None:
            values[_weight_name(bag)] = weights
        local = run_original(context, bag.nodes, values, bag.cache)
        return local[bag.nodes[-1].outputs[0]]
    rows, size = index.shape
    n = table.shape[0]
    flat = index.astype(np.int64, copy=False).reshape(-1)
    if flat.size and (flat.min() < -n or flat.max() >= n):
        raise ta.ShapeError(f"{context}: an index of {names[1]} is outside [-{n}, {n})")
    flat = np.where(flat < 0, flat + n, flat)
    if size == 0 and bag.mode == "mean":
        # ONNX leaves the mean of nothing undefined; NaN, as the unfused ReduceMean gives.
        shape = (rows, 1, table.shape[1]) if bag.keepdims else (rows, table.shape[1])
        context.note("bags of no ids: their mean is NaN")
        return np.full(shape, np.nan, table.dtype)
    if weights is None:
        data = np.full(flat.shape, 1.0 / size if bag.mode == "mean" else 1.0, table.dtype)
    else:
        data = np.ascontiguousarray(weights, dtype=table.dtype).reshape(-1)
        if bag.mode == "mean":
            data = data / table.dtype.type(size)
    indptr = np.arange(0, rows * size + 1, size, dtype=np.int64)
    # Ids in bag order, repeats kept: the kernel adds S's entries of a row one by one into a
    # dense output, so neither sorting nor merging repeats changes a sum, and the arrays are
    # passed as they are (every id was range-checked above).
    matrix = ta.Tensor((rows, n), ta.CSR, [None, (indptr, flat)], data, check=False)
    context.note(f"bag matrix in CSR: {rows} bags x {size} ids over {n} rows")
    result = context.run(BAG_STATEMENT, table.dtype, {"S": ta.CSR}, S=matrix, T=table)
    return result.reshape((rows, 1, table.shape[1]) if bag.keepdims else (rows, table.shape[1]))


def _weight_name(bag: Bag) -> str:
    mul = bag.nodes[1]
    return mul.inputs[1] if mul.inputs[0] == bag.nodes[0].outputs[0] else mul.inputs[0]


EMBEDDING_BAG = OpImpl("EmbeddingBag", 1, run_bag, None, None)


@dataclass
class LoopBag:
    """A bag ``Loop`` recognised at load: bag ``b`` sums (or averages) the members
    ``starts[b] <= p < ends[b]``, with ``starts = first[:count]`` and
    ``ends = last[end_shift:end_shift + count]`` (the TorchScript body reads a separate ends
    array; the sequence-op body reads the next entry of the same one)."""

    loop: str                      # the Loop node's name
    form: str                      # which exporter's loop, for the plan
    mode: str                      # "sum", "mean" or "max"
    end_shift: int = 0
    empty: float = 0.0             # a max bag of no members (-inf: the TorchScript form's)
    # padding_idx: (id, rows) members of this id are left out, a negative id moved by rows
    # first (the rows the exported graph adds; None: not moved)
    padding: tuple[int, int | None] | None = None

    def __str__(self) -> str:
        return f"embedding bag ({self.mode}) from the {self.form} {self.loop}"


def run_loop_bag(context: NodeContext, table: np.ndarray, indices: np.ndarray | None,
                 first: np.ndarray, last: np.ndarray, count: np.ndarray,
                 weights: np.ndarray | None = None, padded: np.ndarray | None = None, *,
                 bag: LoopBag) -> np.ndarray:
    """Rows ``Y[b] = sum/mean over members p of bag b of weights[p] * table[indices[p]]`` as
    one ``Y(i,j) = S(i,k) * T(k,j)`` with S in CSR (no indices: ``table`` already holds the
    gathered member rows, ``T[p]``). A mean of an empty bag is 0, as in PyTorch. With
    ``bag.padding``, members whose id in ``padded`` (plus the table's rows when negative) is
    that id are left out, and a mean divides by the members kept.

    >>> from tensoralg.onnx.ops.kernels import KernelSet
    >>> ctx = NodeContext("bag", "EmbeddingBag", (), ("y",), 1, KernelSet("llvm"))
    >>> run_loop_bag(ctx, np.eye(3), np.array([0, 2, 2]), np.array([0, 1]), np.array([1, 3]),
    ...              np.array(2), bag=LoopBag("loop", "TorchScript Loop", "sum"))
    array([[1., 0., 0.],
           [0., 0., 2.]])
    """
    if table.ndim < 1 or table.dtype.kind != "f":
        raise ta.UnsupportedError(f"{context}: the embedding table must be a floating-point "
                                  f"tensor, got {table.dtype} of shape {table.shape}")
    if indices is not None and indices.ndim != 1:
        raise ta.UnsupportedError(f"{context}: bag indices must be 1-D, got shape "
                                  f"{indices.shape}")
    members = len(indices) if indices is not None else table.shape[0]
    starts, ends = _bag_ranges(context, first, last, count, bag.end_shift, members)
    rows, n = len(starts), table.shape[0]
    dtype = compute_dtype(table.dtype)
    lengths = ends - starts
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    # member positions of every bag, in bag order: starts[b], starts[b] + 1, ..., ends[b] - 1
    positions = np.arange(indptr[-1], dtype=np.int64) - np.repeat(indptr[:-1] - starts, lengths)
    if bag.padding is not None:
        positions, lengths = _unpadded(context, positions, lengths, padded, *bag.padding)
        indptr[1:] = np.cumsum(lengths)
    columns = positions
    if indices is not None:
        columns = indices[positions].astype(np.int64, copy=False)
        if columns.size and (columns.min() < -n or columns.max() >= n):
            bad = columns[(columns < -n) | (columns >= n)][0]
            raise ta.ShapeError(f"{context}: index {bad} of {context.inputs[1]} is outside the "
                                f"table's rows [-{n}, {n})")
        columns = np.where(columns < 0, columns + n, columns)
    if bag.mode == "max":
        return _max_bags(context, table, columns, indptr, dtype, bag.empty)
    if weights is None:
        data = np.ones(len(positions), dtype=dtype)
    else:
        try:
            data = np.broadcast_to(weights.reshape(-1), (members,))[positions].astype(dtype)
        except ValueError:
            raise ta.ShapeError(f"{context}: per-sample weights of shape {weights.shape} do not "
                                f"match the {members} bag members") from None
    if bag.mode == "mean":
        data = data / np.repeat(lengths, lengths).astype(dtype)
    matrix = sp.csr_array((data, columns, indptr), shape=(rows, n))
    matrix.sum_duplicates()       # a repeated id in one bag is one entry of S, sorted
    context.note(f"bag matrix in CSR from offsets: {rows} bags, {len(positions)} members over "
                 f"{n} rows")
    flat = table.reshape(n, -1)
    if rows == 0 or flat.shape[1] == 0:
        result = np.zeros((rows, flat.shape[1]), dtype=dtype)
    else:
        result = context.run(BAG_STATEMENT, dtype, {"S": ta.CSR}, S=matrix, T=flat)
    return result.reshape((rows,) + table.shape[1:]).astype(table.dtype, copy=False)


def _unpadded(context: NodeContext, positions: np.ndarray, lengths: np.ndarray,
              padded: np.ndarray | None, padding: int, table_rows: int | None
              ) -> tuple[np.ndarray, np.ndarray]:
    """The member positions (and bag lengths) whose id in ``padded`` is not ``padding``, a
    negative id moved by ``table_rows`` first (as the exported graph does; None: not moved)."""
    if padded is None or padded.ndim != 1 or padded.dtype.kind not in "iu":
        raise ta.ShapeError(f"{context}: a bag with a padding id needs its 1-D integer ids")
    if positions.size and positions.max() >= len(padded):
        raise ta.ShapeError(f"{context}: the bags cover {int(positions.max()) + 1} members but "
                            f"there are {len(padded)} ids")
    ids = padded[positions].astype(np.int64, copy=False)
    if table_rows is not None:
        ids = np.where(ids < 0, ids + table_rows, ids)
    keep = ids != padding
    bag_of = np.repeat(np.arange(len(lengths)), lengths)
    return positions[keep], np.bincount(bag_of[keep], minlength=len(lengths))


def _max_bags(context: NodeContext, table: np.ndarray, rows_of: np.ndarray,
              indptr: np.ndarray, dtype: np.dtype, empty: float) -> np.ndarray:
    """``Y[b] = max over members of table[rows_of[p]]`` (elementwise; NaN wins, as in
    onnxruntime's ReduceMax) and ``empty`` for a bag of no members: the members' rows
    gathered, then one ``maximum.reduceat`` over the bags that have members."""
    bags, n = len(indptr) - 1, table.shape[0]
    flat = table.reshape(n, -1)
    result = np.full((bags, flat.shape[1]), empty, dtype=dtype)
    lengths = np.diff(indptr)
    held = np.flatnonzero(lengths)
    if held.size and flat.shape[1]:
        gathered = flat[rows_of].astype(dtype, copy=False)
        result[held] = np.maximum.reduceat(gathered, indptr[held], axis=0)
    context.note(f"max bags by NumPy (gathered rows, maximum.reduceat): {bags} bags, "
                 f"{int(indptr[-1])} members over {n} rows; an empty bag is {empty}")
    return result.reshape((bags,) + table.shape[1:]).astype(table.dtype, copy=False)


def _bag_ranges(context: NodeContext, first: np.ndarray, last: np.ndarray, count: np.ndarray,
                end_shift: int, members: int) -> tuple[np.ndarray, np.ndarray]:
    """``starts`` and ``ends`` of every bag, checked as PyTorch checks offsets: they start at 0,
    never decrease and stay within the ``members`` indices (ORT would silently clamp)."""
    if np.asarray(count).size != 1 or first.ndim != 1 or last.ndim != 1:
        raise ta.ShapeError(f"{context}: bag offsets must be 1-D and the bag count a scalar")
    rows = max(int(np.asarray(count).reshape(-1)[0]), 0)
    if len(first) < rows or len(last) < rows + end_shift:
        raise ta.ShapeError(f"{context}: the loop runs {rows} bags but the offsets hold only "
                            f"{min(len(first), len(last) - end_shift)}")
    starts = first[:rows].astype(np.int64, copy=False)
    ends = last[end_shift:end_shift + rows].astype(np.int64, copy=False)
    if rows and starts[0] != 0:
        raise ta.ShapeError(f"{context}: offsets must start at 0, got {starts[0]}")
    outside = (starts < 0) | (starts > members) | (ends > members)
    if outside.any():
        b = int(np.argmax(outside))
        raise ta.ShapeError(f"{context}: bag {b} covers [{starts[b]}, {ends[b]}), outside the "
                            f"{members} indices")
    if np.any(starts[1:] < starts[:-1]) or np.any(ends < starts):
        raise ta.ShapeError(f"{context}: offsets must be non-decreasing, got "
                            f"{np.asarray(first).tolist()[:rows + 1]}")
    return starts, ends


EMBEDDING_BAG_LOOP = OpImpl("EmbeddingBag", 1, run_loop_bag, None, None)


def _reduced_axes(node: Node, graph: Graph) -> list[int] | None:
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = graph.constants.get(node.inputs[1])
        return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    axes = node.attributes.get("axes")
    return None if axes is None else [int(a) for a in axes]


def recognise_bags(graph: Graph) -> Graph:
    """Replace each Gather[->Mul]->ReduceSum/ReduceMean over the bag axis by one
    ``EmbeddingBag`` node (multi-hot MatMuls are programs of :func:`fusion.fuse`)."""
    consumers = consumers_of(graph)
    outputs = {v.name for v in graph.outputs}
    replaced: dict[str, Node] = {}     # last node name -> bag node
    removed: set[str] = set()

    def only_consumer(node: Node) -> Node | None:
        users = consumers.get(node.outputs[0], [])
        return users[0] if len(users) == 1 and node.outputs[0] not in outputs else None

    for node in graph.nodes:
        table = graph.constants.get(node.inputs[0]) if node.inputs else None
        if node.op_type == "Gather" and table is not None and table.ndim == 2 and \
                node.attributes.get("axis", 0) == 0:
            chain = [node]
            weight = None
            nxt = only_consumer(node)
            if nxt is not None and nxt.op_type == "Mul":
                weight = nxt.inputs[1] if nxt.inputs[0] == node.outputs[0] else nxt.inputs[0]
                chain.append(nxt)
                nxt = only_consumer(nxt)
            if nxt is None or nxt.op_type not in ("ReduceSum", "ReduceMean") or \
                    _reduced_axes(nxt, graph) not in ([1], [-2]) or weight == node.outputs[0]:
                continue
            chain.append(nxt)
            bag = Bag(tuple(chain), "sum" if nxt.op_type == "ReduceSum" else "mean",
                      int(nxt.attributes.get("keepdims", 1)))
            ins = (node.inputs[0], node.inputs[1]) + ((weight,) if weight else ())
            replaced[nxt.name] = Node(f"bag_{node.name}", "EmbeddingBag", ins, nxt.outputs,
                                      {"bag": bag}, 1, EMBEDDING_BAG)
            removed.update(n.name for n in chain)
    kept = [replaced[n.name] if n.name in replaced else n for n in graph.nodes
            if n.name not in removed or n.name in replaced]
    graph.nodes = kept
    graph.notes.append(f"embedding bags: {len(replaced)} recognised")
    return graph


__all__ = ["recognise_bags", "run_bag", "Bag", "EMBEDDING_BAG", "run_loop_bag", "LoopBag",
           "EMBEDDING_BAG_LOOP"]
