"""One native function that runs a fixed sequence of kernel calls: a model plan's driver.

A static plan calls the same kernels with the same buffers on every run; from Python each call
costs 2-5 µs (a closure, argument conversion by ctypes, a status check), which is most of a
small model's run time at batch 1. The emitted function makes the calls itself: every argument
is a constant (an address or a size) except the addresses of the graph inputs, which it reads
from a table of slots; outputs that are accumulated into are zeroed with ``memset`` first.

    int32 tensoralg_sequence(int64 *slots)    // 0, or 1 + the index of the call that failed

A call split into thread ranges (a :class:`NativeCall` with ``more`` argument lists) becomes a
task of the native fork-join pool (``codegen/pool.py``): a function ``task(slots, part)`` that
makes the call with the arguments of range ``part``, handed to the pool's ``run``, which the
sequence's own thread helps with. So a threaded layer does not leave the sequence.

The addresses are baked in, so the code is valid only in the process that built it, and is
never stored in the disk cache.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable

ENTRY = "tensoralg_sequence"
# ctypes argument types a sequence can pass, by their LLVM names (llvmlite loads on first use)
_TYPES: dict[type, str] = {ctypes.c_void_p: "ptr", ctypes.c_int64: "i64",
                           ctypes.c_int32: "i32", ctypes.c_float: "float",
                           ctypes.c_double: "double"}


@dataclass(frozen=True, slots=True)
class Slot:
    """An argument read at run time from ``slots[index]`` (a graph input's address), plus
    ``offset`` bytes."""

    index: int
    offset: int = 0


@dataclass(frozen=True, slots=True)
class NativeCall:
    """One kernel call: the function's address and ctypes argument types, its arguments
    (numbers, or :class:`Slot`), the bytes ``(address, count)`` to zero before it, and the
    address of an int64 that must be 0 after it (a count of bad ids), if any.

    A call split into thread ranges lists the arguments of its other ranges in ``more`` and
    names the native pool that runs them: ``pool = (address of its run function, address of
    its control block)``. ``zeros`` may give each range its own ``(address, count)`` bytes to
    zero before it runs (on its thread), in place of ``zero``.
    """

    address: int
    argtypes: tuple[type, ...]
    args: tuple[int | float | Slot, ...]
    zero: tuple[int, int] | None = None
    name: str = ""
    flag: int | None = None
    more: tuple[tuple[int | float | Slot, ...], ...] = ()
    pool: tuple[int, int] | None = None
    zeros: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        for args in (self.args, *self.more):
            if len(args) != len(self.argtypes):
                raise ValueError(f"{self.name or 'call'}: {len(args)} arguments for "
                                 f"{len(self.argtypes)} parameters")
        if self.more and self.pool is None:
            raise ValueError(f"{self.name or 'call'}: thread ranges need a native pool")
        if self.zeros and len(self.zeros) != 1 + len(self.more):
            raise ValueError(f"{self.name or 'call'}: {len(self.zeros)} spans to zero for "
                             f"{1 + len(self.more)} ranges")


@dataclass(frozen=True, slots=True)
class NativeGroup:
    """Chains of calls that share no memory, run at once on the native pool (``pool``, as in
    :class:`NativeCall`): part ``k`` of the pool's task runs ``units[k]`` in order, every
    thread range of a split call in turn, on whichever thread claims it. The bytes in
    ``zero`` are zeroed before the parts start. The group fails if any unit does.

    Which steps of a plan may form a group is decided by their footprints
    (``onnx/plan/branches.py``); this only emits what it is given.
    """

    units: tuple[tuple[NativeCall, ...], ...]
    pool: tuple[int, int]
    zero: tuple[tuple[int, int], ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.units) < 2 or not all(self.units):
            raise ValueError(f"{self.name or 'group'}: a group needs two or more non-empty "
                             "units")

    @property
    def calls(self) -> tuple[NativeCall, ...]:
        """Every call of every unit."""
        return tuple(call for unit in self.units for call in unit)


def _from_slot(builder: Any, loaded: Any, typ: Any) -> Any:
    """A slot's 64 bits as an argument of LLVM type ``typ``: an address, an integer (an
    ``i32`` is the slot's low half) or a float (the slot holds its bits: a double's all 64, a
    float's low 32; :func:`slot_bits` writes them)."""
    from llvmlite import ir

    if isinstance(typ, ir.PointerType):
        return builder.inttoptr(loaded, typ)
    if isinstance(typ, ir.DoubleType):
        return builder.bitcast(loaded, typ)
    if isinstance(typ, ir.FloatType):
        return builder.bitcast(builder.trunc(loaded, ir.IntType(32)), typ)
    if typ.width < 64:
        return builder.trunc(loaded, typ)
    return loaded


def slot_bits(value: Any, argtype: type) -> int:
    """What a slot holds for ``value`` passed as ``argtype``: the number itself, or a
    float's bits (see :func:`_from_slot`).

    >>> slot_bits(1.0, ctypes.c_double) == 0x3FF0000000000000
    True
    """
    if argtype is ctypes.c_double:
        return int(ctypes.c_int64.from_buffer_copy(ctypes.c_double(value)).value)
    if argtype is ctypes.c_float:
        return int(ctypes.c_uint32.from_buffer_copy(ctypes.c_float(value)).value)
    return int(value)


def supported(argtypes: tuple[type, ...]) -> bool:
    """Whether a function with these ctypes argument types can be called from a sequence."""
    return all(t in _TYPES for t in argtypes)


def sequence_module(calls: list[NativeCall | NativeGroup]) -> Any:
    """The llvmlite module exporting ``tensoralg_sequence`` for ``calls`` (each one call, or
    a :class:`NativeGroup` of concurrent units).

    >>> call = NativeCall(4096, (ctypes.c_int64,), (7,), None, "k")
    >>> "inttoptr" in str(sequence_module([call]))
    True
    """
    from llvmlite import ir

    from tensoralg.codegen.llvm_helpers import declare

    I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
    POINTER = ir.PointerType()
    llvm_types = {"ptr": POINTER, "i64": I64, "i32": I32, "float": ir.FloatType(),
                  "double": ir.DoubleType()}
    TASK = ir.FunctionType(I32, (POINTER, I64))
    RUN = ir.FunctionType(I32, (POINTER, TASK.as_pointer(), POINTER, I64))
    module = ir.Module(name="sequence")

    def make(builder: ir.IRBuilder, slots: Any, call: NativeCall, args: tuple) -> Any:
        """Emit the call of ``call``'s function with ``args``; returns its status."""
        types = [llvm_types[_TYPES[t]] for t in call.argtypes]
        values = []
        for typ, arg in zip(types, args):
            if isinstance(arg, Slot):
                loaded = builder.load(builder.gep(slots, [ir.Constant(I64, arg.index)],
                                                  inbounds=True, source_etype=I64), typ=I64)
                if arg.offset:
                    loaded = builder.add(loaded, ir.Constant(I64, arg.offset))
                values.append(_from_slot(builder, loaded, typ))
            elif typ is POINTER:
                values.append(builder.inttoptr(ir.Constant(I64, int(arg or 0)), POINTER))
            else:
                values.append(ir.Constant(typ, arg))
        callee = builder.inttoptr(ir.Constant(I64, call.address),
                                  ir.FunctionType(I32, types).as_pointer())
        return builder.call(callee, values)

    def switch_task(name: str, count: int,
                    emit: Callable[[ir.IRBuilder, ir.Function, Any, int], None]
                    ) -> ir.Function:
        """``task(slots, part)`` running ``emit(builder, fn, slots, part)`` (which returns from
        the function) for parts ``0 .. count - 1``, and returning 1 for any other part."""
        fn = ir.Function(module, TASK, name=name)
        fn.linkage = "internal"
        slots, part = fn.args
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        unknown = fn.append_basic_block("unknown")
        switch = builder.switch(part, unknown)
        for index in range(count):
            block = fn.append_basic_block(f"part{index}")
            switch.add_case(ir.Constant(I64, index), block)
            builder.position_at_end(block)
            emit(builder, fn, slots, index)
        builder.position_at_end(unknown)
        builder.ret(ir.Constant(I32, 1))
        return fn

    def task(number: int, call: NativeCall) -> ir.Function:
        """``task(slots, part)``: the call with the arguments of range ``part``."""
        ranges = (call.args, *call.more)

        def emit(builder: ir.IRBuilder, fn: ir.Function, slots: Any, index: int) -> None:
            if call.zeros:
                zero(builder, call.zeros[index])
            builder.ret(make(builder, slots, call, ranges[index]))
        return switch_task(f"task{number}", len(ranges), emit)

    def checked(builder: ir.IRBuilder, call: NativeCall, status: Any) -> Any:
        """``status``, or 1 when the call's count of bad ids is not 0."""
        if call.flag is None:
            return status
        bad = builder.load(builder.inttoptr(ir.Constant(I64, call.flag), POINTER), typ=I64)
        return builder.or_(status, builder.trunc(
            builder.zext(builder.icmp_signed("!=", bad, ir.Constant(I64, 0)), I64), I32))

    def group_task(number: int, group: NativeGroup) -> ir.Function:
        """``task(slots, part)``: unit ``part`` of ``group``, its calls in order, stopping at
        the first that fails."""

        def emit(builder: ir.IRBuilder, fn: ir.Function, slots: Any, index: int) -> None:
            for c, call in enumerate(group.units[index]):
                if call.zero is not None:
                    zero(builder, call.zero)
                for r, args in enumerate((call.args, *call.more)):
                    if call.zeros:
                        zero(builder, call.zeros[r])
                    status = checked(builder, call, make(builder, slots, call, args))
                    failed = fn.append_basic_block(f"unit{index}.failed{c}.{r}")
                    ok = fn.append_basic_block(f"unit{index}.ok{c}.{r}")
                    builder.cbranch(builder.icmp_signed("!=", status, ir.Constant(I32, 0)),
                                    failed, ok)
                    builder.position_at_end(failed)
                    builder.ret(status)
                    builder.position_at_end(ok)
            builder.ret(ir.Constant(I32, 0))
        return switch_task(f"group{number}", len(group.units), emit)

    memset = declare(module, "llvm.memset.p0.i64", ir.VoidType(), (POINTER, I8, I64, I1))

    def zero(builder: ir.IRBuilder, span: tuple[int, int]) -> None:
        if span[1] > 0:
            builder.call(memset, [builder.inttoptr(ir.Constant(I64, span[0]), POINTER),
                                  ir.Constant(I8, 0), ir.Constant(I64, span[1]),
                                  ir.Constant(I1, 0)])

    fn = ir.Function(module, ir.FunctionType(I32, (POINTER,)), name=ENTRY)
    slots = fn.args[0]
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    for number, call in enumerate(calls):
        if isinstance(call, NativeCall) and call.zero is not None:
            zero(builder, call.zero)
        if isinstance(call, NativeGroup):
            for span in call.zero:
                zero(builder, span)
            run = builder.inttoptr(ir.Constant(I64, call.pool[0]), RUN.as_pointer())
            status = builder.call(run, [
                builder.inttoptr(ir.Constant(I64, call.pool[1]), POINTER),
                group_task(number, call), slots, ir.Constant(I64, len(call.units))])
        elif call.more:
            assert call.pool is not None
            run = builder.inttoptr(ir.Constant(I64, call.pool[0]), RUN.as_pointer())
            status = builder.call(run, [
                builder.inttoptr(ir.Constant(I64, call.pool[1]), POINTER), task(number, call),
                slots, ir.Constant(I64, 1 + len(call.more))])
        else:
            status = make(builder, slots, call, call.args)
        if isinstance(call, NativeCall):
            status = checked(builder, call, status)
        failed = builder.append_basic_block(f"failed{number}")
        ok = builder.append_basic_block(f"ok{number}")
        builder.cbranch(builder.icmp_signed("!=", status, ir.Constant(I32, 0)), failed, ok)
        builder.position_at_end(failed)
        builder.ret(ir.Constant(I32, number + 1))
        builder.position_at_end(ok)
    builder.ret(ir.Constant(I32, 0))
    return module


__all__ = ["ENTRY", "NativeCall", "NativeGroup", "Slot", "sequence_module", "slot_bits",
           "supported"]
