"""A second entry to every built kernel that takes its arguments packed in one buffer.

A ctypes call converts each argument through its ``argtypes`` entry: about 1.4-1.8 µs for a
kernel of nine arguments (a CSR SpMV) on this project's 2-core Xeon, against ~3.4 µs for the
whole of scipy's ``A @ x`` on a 100x100 matrix. Packing the same nine integers with one
precompiled ``struct.Struct.pack`` (~0.1 µs) and passing the bytes to a one-argument entry costs
~0.35 µs in all (an ad hoc timing loop, 2026-12-05, not kept; ``benchmarks/overhead.py``
measures the calls this speeds up). So each kernel module also exports ``<name>__packed``,
which reads 8-byte slots (integers, booleans and addresses as int64, floats as double) and
calls the kernel; :func:`packed_caller` is its Python side. The ctypes prototype still
releases the GIL, and each call packs into its own bytes object, so concurrent calls from
several Python threads share nothing.

The plain entry stays the kernel's ABI for everything else (thread ranges on the native pool
take its address and argument types); a call whose arguments do not pack (a ctypes object, a
``None`` pointer) goes to it unchanged.
"""
from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Callable, Sequence

from tensoralg.ir.nodes import Param, Ptr, Scalar

SUFFIX = "__packed"
PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_char_p)
# The slots are 8 bytes: an address must fit one (every 64-bit host this project targets).
AVAILABLE = ctypes.sizeof(ctypes.c_void_p) == 8
_FLOATS = (Scalar.F32, Scalar.F64)

if TYPE_CHECKING:
    from llvmlite import ir


def entry_name(name: str) -> str:
    """The packed entry's symbol for kernel ``name``.

    >>> entry_name("spmv")
    'spmv__packed'
    """
    return name + SUFFIX


def slot_format(params: Sequence[Param]) -> str:
    """The ``struct`` format of the packed slots of ``params`` (standard sizes, no padding).

    >>> from tensoralg.ir.nodes import Var
    >>> slot_format([Param(Var("n", Scalar.I32), "n"), Param(Var("a", Scalar.F32), "a")])
    '=qd'
    """
    return "=" + "".join("d" if p.var.dtype in _FLOATS else "q" for p in params)


def add_llvm_entry(module: "ir.Module", name: str, params: Sequence[Param]) -> None:
    """Add ``<name>__packed(ptr slots)`` to ``module``, which holds the kernel ``name``.

    The kernel is marked ``noinline``: the entry stays a load of each slot and one tail call,
    rather than a second copy of the kernel's body for LLVM to optimise and emit.
    """
    from llvmlite import ir  # loaded with the LLVM backend only

    kernel = module.get_global(name)
    kernel.attributes.add("noinline")
    i64, double = ir.IntType(64), ir.DoubleType()
    entry = ir.Function(module, ir.FunctionType(ir.IntType(32), (ir.PointerType(),)),
                        name=entry_name(name))
    entry.attributes.add("nounwind")
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    arguments = []
    for k, param in enumerate(params):
        dtype = param.var.dtype
        slot = builder.gep(entry.args[0], [ir.Constant(i64, k)], inbounds=True,
                           source_etype=i64)
        if isinstance(dtype, Ptr):
            arguments.append(builder.load(slot, typ=ir.PointerType(), align=8))
        elif dtype in _FLOATS:
            value = builder.load(slot, typ=double, align=8)
            arguments.append(builder.fptrunc(value, ir.FloatType())
                             if dtype == Scalar.F32 else value)
        else:
            value = builder.load(slot, typ=i64, align=8)
            if dtype == Scalar.BOOL:
                value = builder.icmp_signed("!=", value, ir.Constant(i64, 0))
            elif dtype == Scalar.I32:
                value = builder.trunc(value, ir.IntType(32))
            arguments.append(value)
    builder.ret(builder.call(kernel, arguments, tail=True))


def c_entry(name: str, params: Sequence[Param]) -> str:
    """The C source of ``<name>__packed``, appended to the kernel's translation unit.

    >>> from tensoralg.ir.nodes import Var
    >>> print(c_entry("k", [Param(Var("n", Scalar.I64), "n"),
    ...                     Param(Var("x", Ptr(Scalar.F64)), "x")]))
    <BLANKLINE>
    typedef union { int64_t i; double d; void *p; } ta_packed_slot;
    int32_t k__packed(const ta_packed_slot *slots) {
      return k(slots[0].i, slots[1].p);
    }
    """
    def read(k: int, dtype: object) -> str:
        if isinstance(dtype, Ptr):
            return f"slots[{k}].p"
        if dtype == Scalar.F32:
            return f"(float)slots[{k}].d"
        if dtype == Scalar.F64:
            return f"slots[{k}].d"
        if dtype == Scalar.BOOL:
            return f"slots[{k}].i != 0"
        if dtype == Scalar.I32:
            return f"(int32_t)slots[{k}].i"
        return f"slots[{k}].i"

    arguments = ", ".join(read(k, p.var.dtype) for k, p in enumerate(params))
    return ("\ntypedef union { int64_t i; double d; void *p; } ta_packed_slot;\n"
            f"int32_t {entry_name(name)}(const ta_packed_slot *slots) {{\n"
            f"  return {name}({arguments});\n}}")


def packed_caller(function: Callable[..., int], address: int, params: Sequence[Param]
                  ) -> Callable[..., int]:
    """``call(*args) -> status``: the kernel at ``function`` (its ctypes entry) called through
    its packed entry at ``address``; arguments that do not pack go to ``function``.

    >>> caller = packed_caller(lambda *a: 7, 0, [])   # no packed entry: the plain one
    >>> caller()
    7
    """
    if not address or not AVAILABLE:
        return function
    pack = struct.Struct(slot_format(params)).pack
    entry = PROTOTYPE(address)

    def call(*args: object) -> int:
        try:
            slots = pack(*args)
        except struct.error:        # a ctypes object or None among the arguments
            return function(*args)
        return entry(slots)

    return call
