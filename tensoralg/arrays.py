"""``ta.Tensor`` as an array: operators and NumPy's protocols, each compiled through the core.

``A + B``, ``A - B``, ``A * B`` (elementwise, or by a scalar), ``-A``, ``A @ B``, ``A.T``,
``A.transpose(axes)``, ``A.sum(axis)``, ``A.reshape(shape)``, ``np.asarray(A)``, and NumPy's
``__array_ufunc__`` / ``__array_function__`` for ``np.add``, ``np.subtract``, ``np.multiply``,
``np.negative``, ``np.matmul``, the elementwise functions the notation knows (``np.sqrt``,
``np.abs``, ``np.exp``, ``np.log``, ``np.sin``, ``np.cos``, ``np.tanh``, ``np.floor``, ``np.ceil``,
``np.rint``) and ``np.einsum``,
``np.transpose``, ``np.sum``. Each builds a statement (``C(i0,i1) = A(i0,i1) + B(i0,i1)``) and
runs it on a compiled kernel for the operands' formats; results follow ``ta.Tensor``'s rule:
a ``ta.Tensor`` when the inferred result is sparse, a NumPy array when it is dense. Shapes must
match exactly (no broadcasting between a sparse tensor and another operand), and adding a
nonzero scalar to a sparse tensor is refused, as pydata ``sparse`` does: the result would be
dense.

This module sits on the public API (``api.py``) and installs the methods on ``Tensor`` when
``tensoralg`` is imported, so that ``formats/`` stays below the compiler.

>>> import numpy as np, tensoralg as ta
>>> A = ta.Tensor.from_numpy(np.array([[1.0, 0.0], [0.0, 2.0]]), "csr")
>>> (A + A).to_numpy().tolist(), (A @ np.ones(2)).tolist()
([[2.0, 0.0], [0.0, 4.0]], [1.0, 2.0])
"""
from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np

from tensoralg import api
from tensoralg.errors import ShapeError, UnsupportedError
from tensoralg.formats.tensor import Tensor

_UFUNCS = {np.sqrt: "sqrt", np.absolute: "abs", np.exp: "exp", np.log: "log", np.sin: "sin",
           np.cos: "cos", np.tanh: "tanh", np.floor: "floor", np.ceil: "ceil",
           np.rint: "round"}


def _indices(rank: int) -> str:
    return ",".join(f"i{k}" for k in range(rank))


@functools.lru_cache(maxsize=256)
def _kernel(statement: str, formats: tuple[tuple[str, Any], ...], dtype: str) -> api.Kernel:
    return api.compile(statement, formats=dict(formats), dtype=dtype)


def _spec(operand: Any) -> Any:
    return operand.format if isinstance(operand, Tensor) else "dense"


def _shape(operand: Any) -> tuple[int, ...]:
    return tuple(operand.shape) if hasattr(operand, "shape") else np.shape(operand)


def _elementwise(op: str, a: Any, b: Any) -> Any:
    """``a op b`` for two operands of one shape, one of them a ``Tensor``."""
    if _shape(a) != _shape(b):
        raise ShapeError(f"{op}: shapes {_shape(a)} and {_shape(b)} differ; a ta.Tensor "
                         f"operation does not broadcast")
    a, b = (x if isinstance(x, Tensor) else np.asarray(x) for x in (a, b))
    rank = len(_shape(a))
    ix = _indices(rank)
    statement = f"C({ix}) = A({ix}) {op} B({ix})" if rank else f"C = A {op} B"
    dtype = np.result_type(a.dtype, b.dtype)
    kernel = _kernel(statement, (("A", _spec(a)), ("B", _spec(b))), dtype.name)
    return kernel(A=a, B=b)


def _scaled(a: Tensor, factor: Any) -> Any:
    ix = _indices(a.ndim)
    dtype = np.result_type(a.dtype, np.asarray(factor).dtype)
    kernel = _kernel(f"C({ix}) = A({ix}) * s" if a.ndim else "C = A * s",
                     (("A", a.format), ("s", "dense")), dtype.name)
    return kernel(A=a, s=np.asarray(factor, dtype=dtype))


def _binary(op: str, reflected: bool = False):
    def method(self: Tensor, other: Any) -> Any:
        if isinstance(other, numbers.Number) or (isinstance(other, np.ndarray) and
                                                 other.ndim == 0):
            if op == "*":
                return _scaled(self, other)
            if other == 0:
                return self
            raise UnsupportedError(f"{'+' if op == '+' else '-'} of a nonzero scalar and a "
                                   f"sparse ta.Tensor would be dense; use A.to_numpy() "
                                   f"{op} {other}")
        if not isinstance(other, (Tensor, np.ndarray)) and not hasattr(other, "shape"):
            return NotImplemented
        return _elementwise(op, other, self) if reflected else _elementwise(op, self, other)
    method.__name__ = f"__{'r' if reflected else ''}{_NAMES[op]}__"
    return method


_NAMES = {"+": "add", "-": "sub", "*": "mul"}


def _matmul(a: Any, b: Any) -> Any:
    ranks = (len(_shape(a)), len(_shape(b)))
    subscripts = {(2, 2): "ij,jk->ik", (2, 1): "ij,j->i", (1, 2): "j,jk->k",
                  (1, 1): "i,i->"}.get(ranks)
    if subscripts is None:
        raise UnsupportedError(f"@ takes vectors and matrices, not ranks {ranks}; use "
                               f"ta.einsum")
    return api.einsum(subscripts, a, b)


def _transpose(self: Tensor, *axes: Any) -> Any:
    order = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], (tuple, list)) else \
        tuple(axes) if axes else tuple(reversed(range(self.ndim)))
    if sorted(order) != list(range(self.ndim)):
        raise ShapeError(f"transpose: axes {order} are not a permutation of "
                         f"{tuple(range(self.ndim))}")
    letters = "abcdefghijklmnopqrstuvwxyz"[:self.ndim]
    return api.einsum(f"{letters}->{''.join(letters[k] for k in order)}", self)


def _sum(self: Tensor, axis: Any = None) -> Any:
    axes = range(self.ndim) if axis is None else \
        (axis,) if isinstance(axis, numbers.Integral) else tuple(axis)
    kept = [k for k in range(self.ndim) if k not in {a % max(self.ndim, 1) for a in axes}]
    letters = "abcdefghijklmnopqrstuvwxyz"[:self.ndim]
    return api.einsum(f"{letters}->{''.join(letters[k] for k in kept)}", self)


def _reshape(self: Tensor, *shape: Any) -> Tensor:
    shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else \
        tuple(shape)
    size = int(np.prod(self.shape))
    if -1 in shape:
        known = int(np.prod([s for s in shape if s != -1]))
        shape = tuple(size // known if s == -1 else s for s in shape) if known else shape
    if int(np.prod(shape)) != size:
        raise ShapeError(f"cannot reshape a tensor of shape {self.shape} into {shape}")
    coords, values = self.to_coords()              # (nnz, ndim)
    flat = np.ravel_multi_index(tuple(coords.T), self.shape) if self.ndim else \
        np.zeros(len(values), np.int64)
    new = np.array(np.unravel_index(flat, shape), dtype=np.int64).reshape(len(shape), -1)
    fmt = self.format if len(shape) == self.ndim else "coo" if len(shape) > 1 else "s"
    return Tensor.from_coords(new, values, shape, format=fmt if shape else "dense")


def _array(self: Tensor, dtype: Any = None, copy: Any = None) -> np.ndarray:
    array = self.to_numpy()
    return array.astype(dtype) if dtype is not None else array


def _array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    if method != "__call__" or kwargs:
        return NotImplemented
    if ufunc is np.add and len(inputs) == 2:
        return _elementwise("+", *inputs)
    if ufunc is np.subtract and len(inputs) == 2:
        return _elementwise("-", *inputs)
    if ufunc is np.multiply and len(inputs) == 2:
        a, b = inputs
        return a * b if isinstance(a, Tensor) else b * a
    if ufunc is np.negative:
        return _scaled(inputs[0], -1)
    if ufunc is np.matmul and len(inputs) == 2:
        return _matmul(*inputs)
    name = _UFUNCS.get(ufunc)
    if name is not None and len(inputs) == 1:
        a = inputs[0]
        ix = _indices(a.ndim)
        dtype = np.result_type(a.dtype, np.float32)
        return _kernel(f"C({ix}) = {name}(A({ix}))", (("A", a.format),), dtype.name)(A=a)
    return NotImplemented


# Questions about the array, not computations: answered from the tensor's own attributes.
_ATTRIBUTES = {np.shape: lambda t: t.shape, np.ndim: lambda t: t.ndim,
               np.size: lambda t: int(np.prod(t.shape))}


def _array_function(self: Tensor, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
    if func in _ATTRIBUTES and len(args) == 1 and not kwargs:
        return _ATTRIBUTES[func](args[0])
    if func is np.einsum:
        return api.einsum(*args, **kwargs)
    if func is np.transpose:
        return _transpose(args[0], *args[1:], *kwargs.values())
    if func is np.sum and not set(kwargs) - {"axis"}:
        return _sum(args[0], *args[1:], **kwargs)
    if func is np.matmul:
        return _matmul(*args)
    return NotImplemented


def _to_device(self: Tensor, device: Any = None) -> Any:
    """This tensor's storage arrays copied to the GPU, as a ``tensoralg.gpu.DeviceTensor`` that
    ``backend="cuda"`` kernels read in place and ``.to_host()`` copies back; ``device`` is a
    ``tensoralg.gpu.GpuContext`` (default: the process's GPU). ``ta.UnsupportedError`` says
    why when no GPU can be reached (no pycuda or cuda-python, or no visible device).

    >>> import numpy as np, tensoralg as ta
    >>> A = ta.Tensor.from_numpy(np.eye(3), "csr")
    >>> # A_gpu = A.to_device(); y = ta.einsum("ij,j->i", A_gpu, x, backend="cuda")
    >>> A.to_host() is A
    True
    """
    from tensoralg import gpu

    driver = getattr(device, "driver", device)
    return gpu.to_device(self, driver)


def _to_host(self: Tensor) -> Tensor:
    """This tensor, which is on the host already (a device tensor's ``to_host()`` copies)."""
    return self


def install() -> None:
    """Give ``Tensor`` its operators (done once, when ``tensoralg`` is imported)."""
    for op in ("+", "-", "*"):
        setattr(Tensor, f"__{_NAMES[op]}__", _binary(op))
        setattr(Tensor, f"__r{_NAMES[op]}__", _binary(op, reflected=True))
    Tensor.__neg__ = lambda self: _scaled(self, -1)
    Tensor.__matmul__ = lambda self, other: _matmul(self, other)
    Tensor.__rmatmul__ = lambda self, other: _matmul(other, self)
    Tensor.T = property(lambda self: _transpose(self))
    Tensor.transpose = _transpose
    Tensor.sum = _sum
    Tensor.reshape = _reshape
    Tensor.__array__ = _array
    Tensor.__array_ufunc__ = _array_ufunc
    Tensor.__array_function__ = _array_function
    Tensor.to_device = _to_device
    Tensor.to_host = _to_host


__all__ = ["install"]
