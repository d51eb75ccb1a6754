"""CumSum and CumProd: running sums and products along one axis, in NumPy.

A prefix sum is a scan, which the statement language cannot write: as a contraction with a
triangular matrix it would cost n^2 multiply-adds per row, and with exact 0/1 entries it would
still add each element once per later position. NumPy's ``cumsum`` adds in order, as
onnxruntime does, so float results agree to the last bit. TorchScript exports of torchrec's
``KeyedJaggedTensor`` compute offsets from lengths this way, on small int64 vectors. CumProd
(opset 26) is the same with products (``exclusive`` starts from 1).

>>> import tensoralg.onnx.ops.kernels as k
>>> node = k.NodeContext("n0", "CumSum", ("x", "axis"), ("y",), 14, k.KernelSet("llvm"))
>>> cumsum(node, np.array([1, 2, 3]), np.array(0), exclusive=1, reverse=1)
array([5, 3, 0])
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


def _running(name: str, function, empty: int):  # type: ignore[no-untyped-def]
    def run(node: NodeContext, x: np.ndarray, axis: np.ndarray, *, exclusive: int = 0,
            reverse: int = 0) -> np.ndarray:
        """Running results of the elements before (``exclusive``: strictly before) each
        position along ``axis``, counted from the end when ``reverse``."""
        if np.asarray(axis).size != 1 or np.asarray(axis).dtype.kind not in "iu":
            raise ta.ShapeError(f"{node}: axis must be one integer, got {np.asarray(axis)!r}")
        rank = max(x.ndim, 1)
        chosen = int(np.asarray(axis).reshape(-1)[0])
        if not -rank <= chosen < rank:
            raise ta.ShapeError(f"{node}: axis {chosen} is out of range for rank {x.ndim}")
        if x.dtype.kind not in "iuf":
            raise ta.UnsupportedError(f"{node}: {name} of {x.dtype} values is not defined")
        values = x.reshape(1) if x.ndim == 0 else x
        chosen %= rank
        node.note(f"numpy {function.__name__} along axis {chosen}" +
                  (" (exclusive)" if exclusive else "") + (" (reversed)" if reverse else ""))
        if reverse:
            values = np.flip(values, chosen)
        result = function(values, axis=chosen, dtype=x.dtype)
        if exclusive:
            # The result strictly before position k is the inclusive one at k - 1.
            shifted = np.full_like(result, empty)
            source = [slice(None)] * result.ndim
            target = [slice(None)] * result.ndim
            source[chosen], target[chosen] = slice(None, -1), slice(1, None)
            shifted[tuple(target)] = result[tuple(source)]
            result = shifted
        if reverse:
            result = np.flip(result, chosen)
        return np.ascontiguousarray(result).reshape(x.shape)
    return run


cumsum = op("CumSum", since=11)(_running("CumSum", np.cumsum, 0))
cumprod = op("CumProd", since=26)(_running("CumProd", np.cumprod, 1))
