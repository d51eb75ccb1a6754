"""A kernel call with every argument fixed in advance: the repeated-call fast path.

``Kernel.__call__`` binds its operands, infers the output shape, allocates the output and packs
the arguments on every call: about 30 µs, which dominates a small kernel. A :class:`BoundCall`
does all of that once, for operands and an output buffer that stay where they are; calling it
then zeroes the output and runs the machine code (one ctypes call, or one per thread range).
What may change between calls is the *contents* of the arrays. An operand may also be swapped
for another array of the same shape and dtype with :meth:`BoundCall.rebind`, which is how a
model runtime feeds a new input into an otherwise fixed plan.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tensoralg.errors import KernelRuntimeError, ShapeError
from tensoralg.formats.tensor import Tensor
from tensoralg.ir.nodes import Block, Const, For, Function, If, Stmt, Store, Var, While
from tensoralg.runtime.args import ArgumentPlan, OutputBuffers
from tensoralg.runtime.ranges import split_call


class BoundCall:
    """One compiled kernel with its operands and dense output fixed (see the module docstring).

    ``calls`` holds one argument list per thread range (one list when the kernel runs on one
    thread); ``threads`` (a ``KernelThreads``) runs several of them concurrently.
    """

    def __init__(self, function: Callable[..., int], plan: ArgumentPlan,
                 tensors: Mapping[str, Tensor], sizes: Mapping[str, int], out: np.ndarray,
                 bounds: Sequence[int] | None, threads: Any, what: str,
                 overwrites: bool = False, owner: Any = None,
                 leading_ranges: bool = False) -> None:
        self.function = function
        self.owner = owner             # what keeps the machine code alive (its CompiledKernel)
        # A one-range call goes through the kernel's packed entry when it has one.
        self._call = getattr(owner, "call", None) or function
        self.out = out
        self.what = what
        self._flat = out.reshape(-1)
        self._tensors = dict(tensors)    # keeps every bound array alive
        args = plan.pack(tensors, sizes, OutputBuffers(dense=self._flat))
        self._vals = {name: plan.value_slots(name) for name in tensors}
        self._range_slots = plan.range_slots
        self._bounds = [int(b) for b in bounds] if bounds is not None and \
            plan.range_slots is not None and len(bounds) > 2 else None
        self.calls = self._ranged(args, self._bounds) if self._bounds else [args]
        self.threads = threads
        self.overwrites = overwrites   # the kernel assigns every output element: no zeroing
        # With ranges over the output's leading index, range k owns rows [lo, hi): the bytes
        # it zeroes itself when run on the native pool.
        self._row = out.itemsize * (out.size // out.shape[0]) if leading_ranges and \
            not overwrites and out.ndim >= 1 and out.shape[0] else None
        self._spans = self._spans_of(self.calls) if len(self.calls) > 1 else []

    def _ranged(self, args: list, bounds: Sequence[int]) -> list[list]:
        begin, end = self._range_slots      # type: ignore[misc]
        calls = []
        for k in range(len(bounds) - 1):
            part = list(args)
            part[begin], part[end] = int(bounds[k]), int(bounds[k + 1])
            calls.append(part)
        return calls

    def _spans_of(self, calls: list[list]) -> list[tuple[int, int]]:
        if self._row is None:
            return []
        begin, end = self._range_slots      # type: ignore[misc]
        return [(self._flat.ctypes.data + int(c[begin]) * self._row,
                 (int(c[end]) - int(c[begin])) * self._row) for c in calls]

    def rebind(self, name: str, array: np.ndarray) -> None:
        """Use ``array`` (same shape and dtype as the bound dense operand) from now on."""
        bound = self._tensors.get(name)
        if bound is None or name not in self._vals or not bound.format.is_dense:
            raise ShapeError(f"{self.what}: {name!r} is not a dense operand of this call")
        if type(array) is not np.ndarray or array.shape != bound.shape or \
                array.dtype != bound.dtype or not array.flags.c_contiguous:
            raise ShapeError(f"{self.what}: operand {name} must stay a C-contiguous "
                             f"{bound.dtype} array of shape {bound.shape}; got "
                             f"{getattr(array, 'dtype', type(array).__name__)} "
                             f"{getattr(array, 'shape', '')}")
        self._tensors[name] = Tensor.trusted(bound.shape, bound.format, bound.levels,
                                             array.reshape(-1))
        address = array.ctypes.data
        for call in self.calls:
            for slot in self._vals[name]:
                call[slot] = address

    def native(self, slots: Mapping[str, Any], refine: int = 1) -> Any:
        """This call as a ``NativeCall`` for a compiled sequence (``codegen/sequence.py``),
        with the dense operands named in ``slots`` read from those slots at run time. Its
        thread ranges go to the native pool; None when it has ranges and there is no pool.

        ``refine`` cuts each thread range into that many ranges of about equal rows: finer
        pieces for a pool that runs them beside other work (concurrent branches), so that the
        threads finish together."""
        from tensoralg.codegen.sequence import supported

        argtypes = tuple(getattr(self.function, "argtypes", None) or ())
        if not supported(argtypes) or any(name not in self._vals for name in slots):
            return None
        calls, spans = self.calls, self._spans
        if refine > 1 and self._bounds:
            bounds = sorted({int(lo + (hi - lo) * q // refine)
                             for lo, hi in zip(self._bounds, self._bounds[1:])
                             for q in range(refine + 1)})
            calls = self._ranged(self.calls[0], bounds)
            spans = self._spans_of(calls)
        lists = []
        for call in calls:
            args = list(call)
            for name, slot in slots.items():
                for index in self._vals[name]:
                    args[index] = slot
            lists.append(tuple(args))
        zero = None if self.overwrites or spans else (self._flat.ctypes.data, self._flat.nbytes)
        return split_call(self.function, lists, self.threads, self.what, zero, tuple(spans))

    def __call__(self) -> np.ndarray:
        """Run the kernel on the current contents of the operands; returns the output."""
        if not self.overwrites:
            self._flat.fill(0)
        if len(self.calls) == 1:
            status = self._call(*self.calls[0])
        else:
            function = self.function
            status = max(self.threads.run_calls(lambda args: function(*args), self.calls))
        if status != 0:
            raise KernelRuntimeError(f"{self.what}: the kernel failed (status {status})")
        return self.out


def overwrites_output(function: Function, dims: Sequence[str]) -> bool:
    """Whether the kernel assigns every element of its dense output, so that the buffer need
    not be zeroed first. Either exactly one store writes the output, with ``=`` (never
    ``+=``), inside full-range loops (``0 .. n_x``, or the thread range) over every output
    dimension, and no ``if`` or ``while`` around it (those visit only some coordinates); or
    lowering zeroed each row (``DenseWriter.row_fill``): one ``= 0`` store so placed, first in
    the body of a full-range loop over an output dimension, with every other store to the
    output a ``+=`` after it in that body.

    >>> overwrites_output(Function("k", (), Block()), ("i",))
    False
    """
    outputs = [p.var for p in function.params if p.output]
    sizes = {p.var.name: p.role.split(".", 1)[1] for p in function.params
             if p.role.startswith("index.")}
    bounds = function.thread_range
    ranged = bounds[0].role.index if bounds is not None else None
    if len(outputs) != 1:
        return False
    # each store with the covered indices around it, whether only loops enclose it, and the
    # (loop, position in its body) steps that lead to it
    found: list[tuple[Store, frozenset[str], bool, tuple[tuple[int, int], ...]]] = []

    def covered(loop: For) -> str | None:
        if isinstance(loop.start, Const) and loop.start.value == 0 and \
                isinstance(loop.stop, Var):
            return sizes.get(loop.stop.name)
        if bounds is not None and loop.start == bounds[0].var and loop.stop == bounds[1].var:
            return ranged
        return None

    def walk(stmts: Sequence[Stmt], loops: frozenset[str], plain: bool,
             path: tuple[tuple[int, int], ...], owner: int) -> None:
        for position, stmt in enumerate(stmts):
            here = (*path, (owner, position))
            if isinstance(stmt, Store) and stmt.array == outputs[0]:
                found.append((stmt, loops, plain, here))
            elif isinstance(stmt, For):
                index = covered(stmt)
                walk(stmt.body.body, loops | {index} if index else loops, plain, here,
                     id(stmt) if index else -1)
            elif isinstance(stmt, While):
                walk(stmt.body.body, loops, False, here, -1)
            elif isinstance(stmt, If):
                walk(stmt.then.body, loops, False, here, -1)
                walk(stmt.otherwise.body, loops, False, here, -1)
            elif isinstance(stmt, Block):
                walk(stmt.body, loops, plain, here, -1)

    walk(function.body.body, frozenset(), True, (), -1)
    assigned = [f for f in found if not f[0].accumulate]
    if len(assigned) != 1:
        return False
    store, loops, plain, path = assigned[0]
    if not plain or not set(dims) <= loops:
        return False
    if len(found) == 1:
        return True
    return _fills_rows(store, path, [f[3] for f in found if f[0].accumulate])


def _fills_rows(fill: Store, path: tuple[tuple[int, int], ...],
                sums: list[tuple[tuple[int, int], ...]]) -> bool:
    """Whether the one ``=`` store ``fill`` (at ``path``) zeroes what the ``+=`` stores at
    ``sums`` then add to: it stores zero, and within the innermost full-range loop that
    holds them all, it comes first and every sum comes after it."""
    if not isinstance(fill.value, Const) or fill.value.value != 0:
        return False
    depth = 0
    while all(len(p) > depth + 1 and p[depth] == path[depth] for p in sums) and \
            len(path) > depth + 1:
        depth += 1
    owner, at = path[depth]
    if owner == -1:                  # no full-range loop holds the zeroes and the sums
        return False
    return all(p[depth][0] == owner and p[depth][1] > at for p in sums)


def dense_output(out: Any, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
    """``out`` checked as the output buffer of a bound call, or a new zeroed one."""
    if out is None:
        return np.zeros(shape, dtype=dtype)
    if type(out) is not np.ndarray or out.shape != shape or out.dtype != dtype or \
            not out.flags.c_contiguous or not out.flags.writeable:
        raise ShapeError(f"{what}: out must be a writeable C-contiguous {dtype} array of shape "
                         f"{shape}; got {getattr(out, 'dtype', type(out).__name__)} "
                         f"{getattr(out, 'shape', '')}")
    return out


__all__ = ["BoundCall", "dense_output", "overwrites_output"]
