"""Values of a cuda model that live on the GPU, and the device they live on.

The ops of ``onnx/ops`` are written against NumPy arrays: they read shapes and dtypes, reshape,
and hand views to ``node.run(statement, ...)``. A `DeviceValue` answers exactly that much
from device memory (``shape``, ``dtype``, ``reshape`` and ``squeeze``/``expand_dims`` as views;
``.T`` as a view a product reads transposed; ``np.transpose`` and ``np.matmul`` as cuda
kernels) and raises `HostNeeded` for everything else: indexing, arithmetic, reductions,
``np.asarray`` and ``np.ascontiguousarray`` (which NumPy never hands to ``__array_function__``).
The device executor (``device_executor.py``) then runs that node on the host instead, copying
its inputs there, and says so in the plan; nothing falls back silently.

`Device` owns the GPU side of one model: the ``GpuContext`` kernels launch on, the constants
copied there once, the copies of the current run (counted per step), and ``active``, which
tells ``NodeContext.run`` that the current step's kernels run on the device.

>>> # device = Device(tensoralg.gpu.gpu_context()); device.hold(constant_arrays)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

import tensoralg as ta
import tensoralg.gpu as gpu
from tensoralg.onnx.ops.kernels import INDICES


class HostNeeded(Exception):
    """A node asked a device value for something only host memory gives (the reason)."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One copy between host and device during a step: direction, what, bytes."""

    to_device: bool
    what: str
    nbytes: int

    def __str__(self) -> str:
        return f"{self.what} ({self.nbytes} B)"


class Device:
    """The GPU of one cuda model: kernel launches, constants (copied once), counted copies."""

    def __init__(self, context: Any) -> None:
        self.context = context              # a tensoralg.gpu.GpuContext
        self.kernels: Any = None            # the model's KernelSet (it holds this device)
        self.active = False                 # True while a device step runs
        self.launches = 0                   # kernels launched, all runs together
        self.copies: list[Copy] = []        # copies of the current step
        self.constant_copies: list[Copy] = []   # constants copied (once each, at first use)
        # Arrays and sparse matrices that live as long as the model: copied to the device
        # once. By id; the model holds them, so an id is never reused while it lives.
        self._constant_ids: set[int] = set()
        self._constants: dict[tuple, tuple[Any, Any]] = {}
        self._run_copies: dict[tuple, tuple[Any, Any]] = {}   # host values copied this run
        self.names: dict[int, str] = {}     # id of a host value -> its graph name (this run)

    def hold(self, constants: Iterable[Any]) -> None:
        """Take ``constants`` as living as long as the model: copied to the device once."""
        self._constant_ids.update(id(c) for c in constants)

    # -- copies ------------------------------------------------------------------------------

    def upload(self, array: np.ndarray, what: str) -> gpu.DeviceArray:
        """A counted copy of ``array`` to the device."""
        self.copies.append(Copy(True, what, np.asarray(array).nbytes))
        return gpu.upload(self.context.driver, array)

    def download(self, value: "DeviceValue", what: str) -> np.ndarray:
        """A counted copy of ``value`` to the host."""
        host = value.contiguous().array.to_host()
        self.copies.append(Copy(False, what, host.nbytes))
        return host

    def end_run(self) -> None:
        """Forget the host values copied during a run (their device copies are freed)."""
        self._run_copies.clear()
        self.names.clear()

    def is_constant(self, value: Any) -> bool:
        base = value.base if isinstance(value, np.ndarray) and value.base is not None else value
        return id(base) in self._constant_ids or id(value) in self._constant_ids

    def operand(self, value: Any, dtype: np.dtype, sparse: bool, letter: str = "?"
                ) -> gpu.DeviceTensor:
        """``value`` as a kernel operand on the device: a device value as it is (in ``dtype``
        or `HostNeeded`), a constant from its one copy, any other host value copied (once a
        run) and counted."""
        if isinstance(value, DeviceValue):
            if value.dtype != dtype:
                raise HostNeeded(f"a device value of {value.dtype} where the kernel computes "
                                 f"in {dtype} (values are not converted on the device)")
            return gpu.dense_tensor(value.contiguous().array)
        if sparse:                          # a ta.Tensor or SciPy matrix in the kernel's format
            key = (id(value), "sparse")
            what = f"host operand {letter} (sparse)"
        else:
            value = np.asarray(value)
            base = value if value.base is None else value.base
            key = (id(base), value.__array_interface__["data"][0], value.shape,
                   value.strides, np.dtype(dtype).str)
            what = self.names.get(id(base)) or self.names.get(id(value)) or \
                f"host operand {letter} ({'x'.join(map(str, value.shape)) or 'scalar'})"
        constant = self.is_constant(value)
        table = self._constants if constant else self._run_copies
        found = table.get(key)
        if found is not None:
            return found[1]
        before = len(self.copies)
        if sparse:
            tensor = gpu.to_device(value if value.dtype == dtype else value.astype(dtype),
                                   self.context.driver)
            nbytes = sum(a.nbytes for level in tensor.levels for a in (level.pos, level.crd)
                         if a is not None) + tensor.vals.nbytes
            self.copies.append(Copy(True, what, nbytes))
        else:
            tensor = gpu.dense_tensor(self.upload(np.asarray(value, dtype), what))
        if constant:                        # counted once, as the model's, not the step's
            self.constant_copies += self.copies[before:]
            del self.copies[before:]
        table[key] = (value, tensor)        # holding value keeps its id unique while cached
        return tensor

    # -- kernels -----------------------------------------------------------------------------

    def run(self, kernel: ta.Kernel, dtype: np.dtype, formats: Mapping[str, Any],
            operands: Mapping[str, Any]) -> "DeviceValue":
        """Launch cuda ``kernel`` on ``operands`` (device values, constants, host values);
        the dense result stays on the device."""
        dtype = np.dtype(dtype)
        placed = {name: self.operand(value, dtype, name in formats, name)
                  for name, value in operands.items()}
        # ta.Kernel runs cuda kernels on the process's GPU; a model runs on its own context
        # (the emulator in tests), so the call is spelled out as Kernel._run_on_gpu does it.
        bound = kernel._bound(placed)
        shape = kernel._output_shape(bound)
        compiled = kernel._program_for(bound, shape)
        if not compiled.program.output.format.is_dense:
            raise HostNeeded(f"{kernel.statement} has a sparse result "
                             f"({compiled.program.output.format})")
        result, _ = gpu.launch(self.context, compiled, bound, dtype, shape, None, None)
        self.launches += 1
        return DeviceValue(result, self)


def _host_needed(what: str) -> Any:
    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise HostNeeded(f"{what} of a device value")
    return refuse


class DeviceValue:
    """A dense array in device memory, seen through the part of NumPy's array interface the
    ops use (module docstring). ``transposed``: a 2-D value seen as its transpose (``.T``),
    which a product reads as it is and anything else copies first."""

    __slots__ = ("array", "device", "transposed")

    def __init__(self, array: gpu.DeviceArray, device: Device, transposed: bool = False
                 ) -> None:
        self.array = array
        self.device = device
        self.transposed = transposed

    # -- what the ops read -------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape[::-1] if self.transposed else self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    @property
    def ndim(self) -> int:
        return len(self.array.shape)

    @property
    def size(self) -> int:
        return self.array.size

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d device value")
        return self.shape[0]

    def reshape(self, *shape: Any) -> "DeviceValue":
        """The same memory in another shape (one ``-1`` is inferred), as NumPy's reshape."""
        dims = list(shape[0]) if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) \
            else list(shape)
        dims = [int(d) for d in dims]
        if dims.count(-1) == 1:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape a device value of {self.shape} to {dims}")
            dims[dims.index(-1)] = self.size // known
        if math.prod(dims) != self.size or any(d < 0 for d in dims):
            raise ValueError(f"cannot reshape a device value of {self.shape} to {dims}")
        return DeviceValue(self.contiguous().array.reshape(tuple(dims)), self.device)

    def astype(self, dtype: Any, copy: bool = True) -> "DeviceValue":
        # Device values are never written in place, so "a copy" may be the value itself.
        if np.dtype(dtype) != self.dtype:
            raise HostNeeded(f"converting a device value from {self.dtype} to "
                             f"{np.dtype(dtype)}")
        return self

    def copy(self) -> "DeviceValue":
        return self

    @property
    def T(self) -> "DeviceValue":     # noqa: N802 - NumPy's name
        if self.ndim == 2:
            return DeviceValue(self.array, self.device, not self.transposed)
        return self.transpose()

    def transpose(self, axes: Any = None) -> "DeviceValue":
        """A copy with the axes permuted, by a cuda kernel ``Y(j,i) = A(i,j)``."""
        order = list(range(self.ndim))[::-1] if axes is None else [int(a) for a in axes]
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"axes {order} do not permute {self.ndim} axes")
        if order == list(range(self.ndim)):
            return self
        value = self.contiguous()
        indices = INDICES[:self.ndim]
        statement = (f"Y({','.join(indices[a] for a in order)}) = "
                     f"A({','.join(indices)})")
        return self.device.run(self._kernel(statement), self.dtype, {}, {"A": value})

    def contiguous(self) -> "DeviceValue":
        """The value with its memory in the order of its shape (a transpose kernel for a
        ``.T`` view)."""
        if not self.transposed:
            return self
        plain = DeviceValue(self.array, self.device)
        return plain.transpose((1, 0))

    def _kernel(self, statement: str) -> ta.Kernel:
        return self.device.kernels.get(statement, self.dtype, None, "cuda")

    # -- NumPy's protocols -------------------------------------------------------------------

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise HostNeeded("a device value used as a NumPy array")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if ufunc is np.matmul and method == "__call__" and not kwargs and len(inputs) == 2:
            return matmul(self.device, *inputs)
        raise HostNeeded(f"np.{ufunc.__name__} on a device value")

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        handler = _FUNCTIONS.get(func)
        if handler is None:
            raise HostNeeded(f"np.{func.__name__} on a device value")
        return handler(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        # Anything else NumPy arrays have (flags, base, min, item, ...) needs the host;
        # protocol probes (``__array_struct__``, ``__deepcopy__``) are simply absent.
        if name.startswith("__"):
            raise AttributeError(name)
        raise HostNeeded(f"{name!r} of a device value")

    __getitem__ = _host_needed("indexing")
    __setitem__ = _host_needed("writing into")
    __iter__ = _host_needed("iterating over")
    __bool__ = _host_needed("the truth value")
    __float__ = __int__ = __index__ = _host_needed("a Python number")
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _host_needed("arithmetic")
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __pow__ = _host_needed("arithmetic")
    __neg__ = __abs__ = __invert__ = __and__ = __or__ = __xor__ = _host_needed("arithmetic")
    __lt__ = __le__ = __gt__ = __ge__ = _host_needed("comparing")

    def __str__(self) -> str:
        view = " (transposed view)" if self.transposed else ""
        return f"DeviceValue {self.shape} {self.dtype}{view}"

    __repr__ = __str__


def matmul(device: Device, a: Any, b: Any) -> DeviceValue:
    """``np.matmul`` of 2-D values (or N-D ones of equal batch dimensions) as one cuda kernel;
    a ``.T`` view is read transposed, not copied."""
    if not (isinstance(a, DeviceValue) or isinstance(b, DeviceValue)):
        raise HostNeeded("np.matmul of host arrays")
    if a.ndim < 2 or b.ndim < 2 or a.shape[:-2] != b.shape[:-2]:
        raise HostNeeded(f"np.matmul of device values shaped {a.shape} and {b.shape} "
                         f"(broadcast or 1-D)")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    batch = INDICES[:a.ndim - 2]
    i, k, j = "xyz" if batch else "ikj"

    def access(name: str, value: Any, rows: str, columns: str) -> str:
        seen = isinstance(value, DeviceValue) and value.transposed
        order = (columns, rows) if seen else (rows, columns)
        return f"{name}({','.join([*batch, *order])})"

    statement = (f"Y({','.join([*batch, i, j])}) = "
                 f"{access('A', a, i, k)} * {access('B', b, k, j)}")
    dtype = np.result_type(a.dtype, b.dtype)
    operands = {"A": _stored(a), "B": _stored(b)}
    return device.run(device.kernels.get(statement, dtype, None, "cuda"), dtype, {}, operands)


def _stored(value: Any) -> Any:
    """A transposed view's memory as it is stored (its kernel access is transposed instead)."""
    if isinstance(value, DeviceValue) and value.transposed:
        return DeviceValue(value.array, value.device)
    return value


def _squeeze(a: DeviceValue, axis: Any = None) -> DeviceValue:
    if axis is None:
        drop = {k for k, d in enumerate(a.shape) if d == 1}
    else:
        axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
        drop = {int(x) % max(1, a.ndim) for x in axes}
        if any(a.shape[x] != 1 for x in drop):
            raise ValueError(f"cannot squeeze a non-unit axis of {a.shape}")
    return a.reshape([d for k, d in enumerate(a.shape) if k not in drop])


def _expand_dims(a: DeviceValue, axis: Any) -> DeviceValue:
    axes = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    rank = a.ndim + len(axes)
    chosen = {int(x) % rank for x in axes}
    dims = iter(a.shape)
    return a.reshape([1 if k in chosen else next(dims) for k in range(rank)])


_FUNCTIONS = {
    np.transpose: lambda a, axes=None: a.transpose(axes),
    np.reshape: lambda a, *shape, **named: a.reshape(
        shape[0] if shape else named.get("shape", named.get("newshape"))),
    np.squeeze: _squeeze,
    np.expand_dims: _expand_dims,
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
}


__all__ = ["Copy", "Device", "DeviceValue", "HostNeeded", "matmul"]
