"""A prebound kernel split into row (or position) ranges, one argument list per thread range:
run the ranges, or hand the single range to a compiled call sequence.

Shared by the generated GEMM's layers (``runtime/gemm.py``) and the compiled-in convolutions
(``runtime/conv.py``) through :class:`RangeCall`: their first argument is the address of their
one input.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable

import numpy as np

from tensoralg.errors import KernelRuntimeError, ShapeError


def check_array(owner: Any, array: Any, what: str, dtype: np.dtype,
                shape: tuple[int | None, ...], free: str, writeable: bool = False) -> None:
    """Raise a ``ShapeError`` naming ``owner`` unless ``array`` is a C-contiguous NumPy array
    of ``dtype`` and ``shape`` (``None``: any size, written ``free`` in the message), and
    writeable when asked."""
    if type(array) is not np.ndarray or array.ndim != len(shape) or array.dtype != dtype or \
            not array.flags.c_contiguous or \
            any(s is not None and s != d for s, d in zip(shape, array.shape)) or \
            (writeable and not array.flags.writeable):
        want = " x ".join(free if s is None else str(s) for s in shape)
        kind = "C-contiguous writeable" if writeable else "C-contiguous"
        raise ShapeError(f"{owner!r}: the {what} must be a {kind} {dtype} array of shape "
                         f"{want}; got {getattr(array, 'dtype', type(array).__name__)} "
                         f"{getattr(array, 'shape', '')}")


def image_stride(array: Any) -> int | None:
    """Elements between the images (first-axis items) of ``array`` when each image is a
    C-contiguous block and the images do not overlap (a channel block of a larger NCHW
    array), else None.

    >>> whole = np.zeros((2, 5, 3, 3), np.float32)
    >>> image_stride(whole[:, 1:3]), image_stride(whole[:, :, 1:]), image_stride(whole[:0])
    (45, None, 45)
    """
    if type(array) is not np.ndarray or array.ndim < 2:
        return None
    if not array.size:         # nothing is read or written: any layout serves
        return int(np.prod(array.shape[1:]))
    item = array.dtype.itemsize
    inner = array[0]
    if not inner.flags.c_contiguous or array.strides[0] % item or \
            (array.shape[0] > 1 and array.strides[0] < inner.size * item):
        return None
    return array.strides[0] // item if array.shape[0] > 1 else inner.size


def check_images(owner: Any, array: Any, what: str, dtype: np.dtype,
                 shape: tuple[int, ...]) -> int:
    """:func:`check_array` for a writeable output whose images may lie apart (a channel block
    of a Concat's output): its image stride in elements."""
    stride = image_stride(array)
    if stride is None or array.dtype != dtype or tuple(array.shape) != tuple(shape) or \
            not array.flags.writeable:
        want = " x ".join(map(str, shape))
        raise ShapeError(f"{owner!r}: the {what} must be a writeable {dtype} array of shape "
                         f"{want} with C-contiguous images; got "
                         f"{getattr(array, 'dtype', type(array).__name__)} "
                         f"{getattr(array, 'shape', '')}")
    return stride


def run_ranges(function: Callable[..., int], calls: list[list], threads: Any, what: str) -> None:
    """Call ``function`` once per argument list (over ``threads`` when given); a nonzero
    status raises ``KernelRuntimeError`` naming ``what``."""
    if threads is None:
        status = function(*calls[0])
    else:
        status = max(threads.run_calls(lambda args: function(*args), calls))
    if status != 0:
        raise KernelRuntimeError(f"{what}: the kernel failed (status {status})")


def split_call(function: Any, lists: list[tuple], threads: Any, what: str,
               zero: tuple[int, int] | None = None,
               zeros: tuple[tuple[int, int], ...] = ()) -> Any:
    """``lists`` (one argument tuple per thread range) as one ``NativeCall`` of ``function``:
    the ranges past the first go to ``threads``'s native pool. None when there are several
    and no pool."""
    from tensoralg.codegen.sequence import NativeCall

    pool = threads.native_pool() if threads is not None and len(lists) > 1 else None
    if len(lists) > 1 and pool is None:
        return None
    address = ctypes.cast(function, ctypes.c_void_p).value or 0
    return NativeCall(address, tuple(function.argtypes), lists[0], zero, what,
                      more=tuple(lists[1:]),
                      pool=(pool.run_address, pool.address) if pool is not None else None,
                      zeros=tuple(zeros))


def native_range(function: Any, calls: list[list], threads: Any, slots: dict[str, Any],
                 operand: str, what: str) -> Any:
    """The call as a ``NativeCall`` (see :func:`split_call`), reading its first argument from
    ``slots[operand]`` when given; None when it has ranges and there is no pool, or ``slots``
    names another operand."""
    if set(slots) - {operand}:
        return None
    first = [slots[operand]] if operand in slots else None
    return split_call(function, [tuple(first + call[1:] if first else call) for call in calls],
                      threads, what)


class RangeCall:
    """A kernel call with its buffers fixed, split into ``calls`` (one argument list per thread
    range, the input's address first). Subclasses set ``function``, ``calls``, ``threads``
    (None: one range), ``input``, ``out`` and ``what``, and name the input ``operand``."""

    operand = "x"
    function: Any
    calls: list[list]
    threads: Any
    input: np.ndarray
    out: np.ndarray
    what: str

    def rebind(self, name: str, array: np.ndarray) -> None:
        """Read ``array`` (same shape and dtype as the input, C-contiguous) as the input from
        now on; the input is the only operand that may change."""
        if name != self.operand:
            raise ShapeError(f"{self.what}: only the input {self.operand} can be rebound, "
                             f"not {name!r}")
        if array is self.input:
            return
        if type(array) is not np.ndarray or array.shape != self.input.shape or \
                array.dtype != self.input.dtype or not array.flags.c_contiguous:
            self.refuse(array)
        self.input = array
        address = array.ctypes.data
        for call in self.calls:
            call[0] = address

    def refuse(self, array: Any) -> None:
        """Raise the error for an input :meth:`rebind` cannot take."""
        raise ShapeError(f"{self.what}: cannot read {getattr(array, 'dtype', type(array))} "
                         f"{getattr(array, 'shape', '')} in place of {self.input.dtype} "
                         f"{self.input.shape}")

    def native(self, slots: dict[str, Any]) -> Any:
        """This call as a ``NativeCall`` for a compiled sequence, reading the input from
        ``slots[operand]`` when given (see :func:`native_range`)."""
        return native_range(self.function, self.calls, self.threads, slots, self.operand,
                            self.what)

    def __call__(self) -> np.ndarray:
        split = self._pooled() if self.threads is not None else None
        if split is None:
            run_ranges(self.function, self.calls, self.threads, self.what)
        elif split.run(self.calls[0], self.calls, owner=self):
            raise KernelRuntimeError(f"{self.what}: the kernel failed")
        return self.out

    _split: Any = None

    def _pooled(self) -> Any:
        """The ranges on the native pool: a :class:`~tensoralg.runtime.native_split.
        NativeSplit` of this kernel and number of ranges, every argument of every range read
        from its slots, shared by every call of the kernel (built once per kernel and range
        count, not once per bound call: a model seeing many shapes binds new calls all the
        time, and a build takes ~10 ms); None where there is no pool or an argument cannot
        travel through the slots. Ranges are sized for the native pool's hand-over, which
        the Python pool would pay 20-fold."""
        if self._split is None:
            self._split = _shared_split(self.function, len(self.calls), self.threads,
                                        self.what) or False
        return self._split or None


_SPLITS: dict[tuple[int, int, int], tuple[Any, Any]] = {}   # -> (split, the function it calls)
_SPLITS_LOCK = threading.Lock()


def _shared_split(function: Any, parts: int, threads: Any, what: str) -> Any:
    """The :class:`NativeSplit` running ``function`` over ``parts`` ranges on ``threads``'s
    native pool, every argument varying per range; None without a pool or where an argument
    is not an address or a 64-bit integer."""
    from tensoralg.runtime.native_split import NativeSplit

    pool = threads.native_pool()
    if pool is None or not NativeSplit.supports(function):
        return None
    address = ctypes.cast(function, ctypes.c_void_p).value or 0
    key = (address, parts, id(pool))
    with _SPLITS_LOCK:
        found = _SPLITS.get(key)
        if found is None:
            count = len(function.argtypes)
            # the function is kept with its split, so that its address is not reused
            found = _SPLITS[key] = (NativeSplit(function, (0, 1), parts, pool, what,
                                                varying=range(count)), function)
    return found[0]


__all__ = ["run_ranges", "split_call", "native_range", "RangeCall"]
