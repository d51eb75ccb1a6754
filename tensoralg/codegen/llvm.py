"""The LLVM backend: `ir.nodes.Function` → llvmlite IR → optimised module → object code.

Every IR variable gets a stack slot in the entry block (mem2reg promotes them); pointer
parameters are ``noalias``; math uses LLVM intrinsics, except ``tanh`` (libm); memory comes from
libc ``aligned_alloc/calloc/realloc/free`` (allocations start on a cache line). llvmlite is
initialised once, on first use, never at import time of tensoralg.

A complex value is a ``{float, float}`` / ``{double, double}`` struct in registers and in
memory (NumPy's layout); its arithmetic is written out on the two parts, which SROA and the
vectorisers then see as plain float code (a complex reduction sums in vector lanes like a
real one).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

import llvmlite.binding as llvm
from llvmlite import ir

from tensoralg.codegen.cfamily import introduced_vars, undeclared_message
from tensoralg.codegen.llvm_helpers import (
    COLD_WEIGHTS,
    branch_value,
    counted_loop,
    declare,
    entry_alloca,
    if_else,
    if_then,
    loop_hints,
    while_loop,
)
from tensoralg.codegen.softmax import scalar_expf, scalar_tanhf
from tensoralg.errors import CompileError
from tensoralg.ir.nodes import (
    Allocate,
    Assign,
    Binary,
    Block,
    Cast,
    Comment,
    Const,
    Declare,
    DType,
    Expr,
    For,
    Free,
    Function,
    Grow,
    If,
    Load,
    Ptr,
    RowOwner,
    Scalar,
    Select,
    Stmt,
    Store,
    Unary,
    Var,
    While,
)
from tensoralg.ir.rewrite import walk

BIT, BYTE, INT32, INT64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
INT32_ZERO = ir.Constant(INT32, 0)
POINTER = ir.PointerType()
VALUE_TYPES: dict[Scalar, ir.Type] = {
    Scalar.BOOL: BIT,
    Scalar.I32: INT32,
    Scalar.I64: INT64,
    Scalar.F32: ir.FloatType(),
    Scalar.F64: ir.DoubleType(),
    Scalar.C64: ir.LiteralStructType([ir.FloatType(), ir.FloatType()]),
    Scalar.C128: ir.LiteralStructType([ir.DoubleType(), ir.DoubleType()]),
}
POINTER_SIZE = ctypes.sizeof(ctypes.c_void_p)
ELEMENT_SIZE = {Scalar.BOOL: 1, Scalar.I32: 4, Scalar.I64: 8, Scalar.F32: 4, Scalar.F64: 8,
                Scalar.C64: 8, Scalar.C128: 16}
INTRINSICS = {
    "sqrt": "llvm.sqrt",
    "exp": "llvm.exp",
    "log": "llvm.log",
    "sin": "llvm.sin",
    "cos": "llvm.cos",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "round": "llvm.roundeven",   # half to even (ir/nodes.py)
    "abs": "llvm.fabs",
    "pow": "llvm.pow",
    "min": "llvm.minimum",       # NaN in either operand gives NaN (ir/nodes.py)
    "max": "llvm.maximum",
}
INT_OPS = {"+": "add", "-": "sub", "*": "mul", "/": "sdiv", "%": "srem"}
BIT_OPS = {"bitand": "and_", "bitor": "or_", "shl": "shl", "shr": "ashr"}
FLOAT_OPS = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv", "%": "frem"}
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
# Dtypes whose ``acc = acc + e`` is a reduction LLVM may reassociate (ir/nodes.py).
_FLOATING = (Scalar.F32, Scalar.F64, Scalar.C64, Scalar.C128)


def value_type(dtype: DType) -> ir.Type:
    """The LLVM type of a value of ``dtype`` in registers (bool is i1)."""
    return POINTER if isinstance(dtype, Ptr) else VALUE_TYPES[dtype]


def memory_type(dtype: DType) -> ir.Type:
    """The LLVM type of an element of ``dtype`` in a buffer (bool is one byte, as C's)."""
    return BYTE if dtype == Scalar.BOOL else value_type(dtype)


def element_size(dtype: DType) -> int:
    return POINTER_SIZE if isinstance(dtype, Ptr) else ELEMENT_SIZE[dtype]


def _may_trap(expr: Expr) -> bool:
    """Whether evaluating ``expr`` where the IR would not could fault (a load, an int division)."""
    match expr:
        case Load():
            return True
        case Binary(op, lhs, rhs):
            risky = op in ("/", "%") and isinstance(lhs.dtype, Scalar) and lhs.dtype.is_int
            return risky or _may_trap(lhs) or _may_trap(rhs)
        case Unary(_, operand) | Cast(operand, _):
            return _may_trap(operand)
        case Select(cond, if_true, if_false):
            return any(_may_trap(e) for e in (cond, if_true, if_false))
    return False


# Vector width. LLVM's model of Intel CPUs with AVX-512 (Skylake-SP to Sapphire Rapids) asks
# its vectorisers for 256-bit vectors ("prefer-256-bit"). For kernels that reduce that is half
# the machine: a register tile of eight accumulators (ir/passes/tile.py) waits on FMA latency
# and half-width loads. Kernels with a reduction are therefore compiled for 512-bit vectors.
# Measured in one process against 256-bit builds of the same kernels (benchmarks/kernel_micro.py
# shows the first): a 90%-pruned layer (CSR weight times 64-byte-aligned activations, as ONNX
# plans lay them out) ran 1.3-1.4x faster, a batched Gram product and a 256x256 dot per row
# 1.2x, SpMM 1.1x; streams (the wide product, a row sum) and SpMV were unchanged, a 96-wide dot
# with a sigmoid epilogue 0.9x. Elementwise kernels and copies gained nothing, so they keep
# LLVM's choice, except those computing float32 exp or tanh (sigmoid is an exp): their inline
# polynomials (~45 vector operations per vector of values) bind them to the arithmetic, not to
# memory, and 512-bit vectors took SiLU from 1.7-1.9 to 1.1-1.4 ns a value, tanh from 2.4 to
# 1.3-2.0 (EfficientNet's activations, GPT-2's GELU). With operands not 64-byte aligned
# (NumPy's own allocations are 16-byte aligned) every 512-bit load splits a cache line and the pruned layer gains nothing. The
# hand-built modules (codegen/gemm.py, conv.py) choose their vector width themselves.
WIDE_VECTORS = True
ALLOC_ALIGN = 64           # bytes: kernel allocations start on a cache line
# Large kernel buffers (a sparse product's output, grown by realloc) are asked to be backed by
# transparent huge pages, as NumPy asks for its own arrays of 4 MiB and more. glibc maps such
# blocks fresh on every call and unmaps them when the result is dropped, so with 4 KiB pages
# a SpGEMM whose output is 56 MB (rajat01 squared) took ~24k page faults and ~65 ms of system
# time per call, more than half of what its loops took. Linux only (MADV_HUGEPAGE); the
# advice is a hint, and its result is ignored.
HUGE_PAGES = sys.platform.startswith("linux")
HUGE_MIN_BYTES = 4 << 20
PAGE_BYTES = 4096
MADV_HUGEPAGE = 14
PREFER_512 = '"prefer-vector-width"="512"'


class _Attributes(ir.FunctionAttributes):
    """llvmlite's function attributes, plus the one string attribute this backend sets."""

    _known = ir.FunctionAttributes._known | frozenset({PREFER_512})


def _alias_scopes(module: ir.Module, fn: Function
                  ) -> dict[RowOwner, tuple[ir.MDValue, ir.MDValue]]:
    """For each jammed row that owns stores in ``fn``: its alias scope list and the list of the
    other rows' scopes of the same jam (one scope domain per jam), as LLVM's ``alias.scope``
    and ``noalias`` metadata take them."""
    owners = sorted({s.owner for s in walk(fn.body) if isinstance(s, Store) and s.owner},
                    key=lambda o: (o.jam, o.row))
    scopes: dict[RowOwner, ir.MDValue] = {}
    domains: dict[str, ir.MDValue] = {}
    for owner in owners:
        if owner.jam not in domains:
            domains[owner.jam] = module.add_metadata(
                [ir.MetaDataString(module, f"{fn.name}.{owner.jam}")])
        scopes[owner] = module.add_metadata(
            [ir.MetaDataString(module, f"{fn.name}.{owner.jam}.row{owner.row}"),
             domains[owner.jam]])
    return {owner: (module.add_metadata([scope]),
                    module.add_metadata([other for o, other in scopes.items()
                                         if o.jam == owner.jam and o != owner]))
            for owner, scope in scopes.items()}


def _wide_reductions() -> bool:
    return WIDE_VECTORS and host_has("avx512f")


def reduces(fn: Function) -> bool:
    """Whether some loop of ``fn`` accumulates across its iterations: into an array at an
    index that does not move with the loop (``y[i] += a[p] * x[k]`` inside ``for p``), or into
    a floating-point local it reads back (``acc = acc + ...``). ``y[i] += x[i]`` inside
    ``for i`` is elementwise, not a reduction.

    >>> from tensoralg.ir.build import for_, store, var, load, function, param
    >>> i, p, x = var("i", Scalar.I64), var("p", Scalar.I64), var("x", Ptr(Scalar.F32))
    >>> reduces(function("k", [param(x, "x")], for_(p, 0, 4, for_(i, 0, 8,
    ...     store(x, i, load(x, p), True)))))
    True
    >>> reduces(function("k", [param(x, "x")], for_(i, 0, 4, store(x, i, load(x, i), True))))
    False
    """
    for loop in walk(fn.body):
        if isinstance(loop, For):
            moving = _moving(loop.body, {loop.var.name})
        elif isinstance(loop, While):
            moving = _moving(loop.body, {s.var.name for s in walk(loop.body)
                                         if isinstance(s, Assign)})
        else:
            continue
        for node in walk(loop.body):
            match node:
                case Store(accumulate=True, index=index) if not _reads(index, moving):
                    return True
                case Assign(var=target, value=value) if target.dtype in _FLOATING \
                        and _reads(value, {target.name}):
                    return True
    return False


def computes_polynomials(fn: Function) -> bool:
    """Whether ``fn`` takes a float32 ``exp`` or ``tanh``, which this backend writes out as
    polynomials (``softmax.scalar_expf``/``scalar_tanhf``) that bind a loop to arithmetic.

    >>> from tensoralg.ir.build import for_, store, var, load, function, param
    >>> i, x = var("i", Scalar.I64), var("x", Ptr(Scalar.F32))
    >>> computes_polynomials(function("k", [param(x, "x")], for_(i, 0, 4,
    ...     store(x, i, Unary("exp", load(x, i))))))
    True
    """
    return any(isinstance(node, Unary) and node.op in ("exp", "tanh") and
               node.operand.dtype == Scalar.F32 for node in walk(fn.body))


def _moving(body: Block, seeds: set[str]) -> set[str]:
    """``seeds`` and every variable of ``body`` computed from them (in program order)."""
    moving = set(seeds)
    for node in walk(body):
        match node:
            case Declare(var=v, init=e) | Assign(var=v, value=e) if _reads(e, moving):
                moving.add(v.name)
            case For(var=v, start=start, stop=stop) if _reads(start, moving) or \
                    _reads(stop, moving):
                moving.add(v.name)
    return moving


def _reads(expr: object, names: set[str]) -> bool:
    return any(isinstance(x, Var) and x.name in names for x in walk(expr))


class _FunctionLowering:
    """Emits one function's body; holds the builder, the stack slots and the failure block."""

    def __init__(self, module: ir.Module, fn: Function) -> None:
        self.module = module
        argument_types = tuple(value_type(p.var.dtype) for p in fn.params)
        self.function = ir.Function(module, ir.FunctionType(INT32, argument_types), name=fn.name)
        self.function.attributes = _Attributes()
        self.function.attributes.add("nounwind")
        if _wide_reductions() and (reduces(fn) or computes_polynomials(fn)):
            self.function.attributes.add(PREFER_512)
        self.builder = ir.IRBuilder(self.function.append_basic_block("entry"))
        self.slots: dict[str, ir.AllocaInstr] = {}
        self.fail_block: ir.Block | None = None
        for var in introduced_vars(fn):
            self.slots[var.name] = entry_alloca(self.builder, value_type(var.dtype), var.name)
        self.scopes = _alias_scopes(module, fn)
        for param, argument in zip(fn.params, self.function.args):
            argument.name = param.var.name + ".arg"
            if isinstance(param.var.dtype, Ptr):
                argument.add_attribute("noalias")
            elif param.var.dtype == Scalar.BOOL:
                argument.add_attribute("zeroext")
            self.builder.store(argument, self.slots[param.var.name])

    def lower(self, body: Block) -> None:
        self.block(body)
        if not self.builder.block.is_terminated:
            self.builder.ret(ir.Constant(INT32, 0))

    # -- statements --------------------------------------------------------------------------

    def block(self, block: Block) -> None:
        for stmt in block.body:
            self.statement(stmt)

    def statement(self, stmt: Stmt) -> None:
        b = self.builder
        match stmt:
            case Block():
                self.block(stmt)
            case Assign(var, Binary("+", lhs, rhs)) if var in (lhs, rhs) and \
                    var.dtype in _FLOATING:
                # ``acc = acc + e``: a reduction, whose additions LLVM may reassociate into
                # vector lanes (see ir.nodes: the order of a reduction's terms is not fixed).
                total = self.arithmetic("+", self.value(lhs), self.value(rhs), var.dtype,
                                        reassociate=True)
                b.store(total, self.slots[var.name])
            case Declare(var, value) | Assign(var, value):
                b.store(self.value(value), self.slots[var.name])
            case Store(array, index, value, accumulate, owner):
                address = self.address(array, index)
                new = self.value(value)
                if accumulate:
                    old = self.load(array, address)
                    self.scoped(old, owner)
                    new = self.arithmetic("+", old, new, value.dtype)
                if value.dtype == Scalar.BOOL:
                    new = b.zext(new, BYTE)
                if isinstance(value.dtype, Scalar) and value.dtype.is_complex:
                    self.store_complex(new, address)
                else:
                    self.scoped(b.store(new, address), owner)
            case For(var, start, stop, body):
                slot = self.slots[var.name]
                hints = loop_hints(self.module, stmt.unroll, stmt.vectorize, stmt.masked)
                with counted_loop(
                    b, slot, self.value(start), lambda: self.value(stop), f"for.{var.name}", hints
                ):
                    self.block(body)
            case While(cond, body):
                with while_loop(b, lambda: self.value(cond), "while"):
                    self.block(body)
            case If(cond, then, otherwise) if not otherwise.body:
                with if_then(b, self.value(cond)):
                    self.block(then)
            case If(cond, then, otherwise):
                with if_else(b, self.value(cond)) as (then_arm, else_arm):
                    with then_arm():
                        self.block(then)
                    with else_arm():
                        self.block(otherwise)
            case Comment():
                pass
            case Allocate(var, count, zero):
                self.allocate(var, count, zero)
            case Grow():
                self.grow(stmt)
            case Free(var):
                free = declare(self.module, "free", ir.VoidType(), (POINTER,))
                b.call(free, [self.variable(var)])
            case _:
                raise CompileError(f"cannot emit statement {stmt!r} to LLVM")

    def scoped(self, access: ir.Value, owner: RowOwner | None) -> None:
        """Tell LLVM that ``access`` (a load or store for ``owner``'s row) touches no element
        that the other rows of its jam touch (``ir.nodes.RowOwner``)."""
        if owner is None or not isinstance(access, (ir.LoadInstr, ir.StoreInstr)):
            return
        scope, others = self.scopes[owner]
        access.set_metadata("alias.scope", scope)
        access.set_metadata("noalias", others)

    def fail_if_null(self, pointer: ir.Value, name: str) -> None:
        """Return status 1 from the kernel when ``pointer`` is null."""
        if self.fail_block is None:
            self.fail_block = self.function.append_basic_block("out_of_memory")
            saved = self.builder.block
            self.builder.position_at_end(self.fail_block)
            self.builder.ret(ir.Constant(INT32, 1))
            self.builder.position_at_end(saved)
        ok = self.builder.append_basic_block(f"{name}.ok")
        is_null = self.builder.icmp_unsigned("==", pointer, ir.Constant(POINTER, None))
        self.builder.cbranch(is_null, self.fail_block, ok).set_weights(COLD_WEIGHTS)
        self.builder.position_at_end(ok)

    def allocate(self, var: Var, count: Expr, zero: bool) -> None:
        assert isinstance(var.dtype, Ptr)
        size = ir.Constant(INT64, element_size(var.dtype.elem))
        elements = self.value(count)
        nbytes = self.builder.mul(elements, size)
        if zero:
            calloc = declare(self.module, "calloc", POINTER, (INT64, INT64))
            pointer = self.builder.call(calloc, [elements, size], name=var.name)
        else:
            pointer = self.aligned_alloc(nbytes, var.name)
        self.fail_if_null(pointer, f"alloc.{var.name}")
        self.advise_huge_pages(pointer, nbytes)
        self.builder.store(pointer, self.slots[var.name])

    def aligned_alloc(self, needed: ir.Value, name: str) -> ir.Value:
        """``aligned_alloc`` of ``needed`` bytes on a cache line (null when out of memory).

        Aligned to a cache line: a workspace row that register tiles (ir/passes/tile.py) load
        and store as 512-bit vectors would otherwise split a line on every access (glibc's
        malloc aligns to 16 bytes). C11 wants a size that is a multiple of the alignment, and a
        nonzero one so that null always means out of memory.
        """
        b = self.builder
        aligned_alloc = declare(self.module, "aligned_alloc", POINTER, (INT64, INT64))
        line = ir.Constant(INT64, ALLOC_ALIGN)
        rounded_up = b.add(needed, ir.Constant(INT64, ALLOC_ALIGN - 1))
        padded = b.mul(b.udiv(rounded_up, line), line)
        at_least = b.select(b.icmp_unsigned("<", padded, line), line, padded)
        # A size within a line of 2**64 wraps when rounded up: ask for it as it is (and
        # fail), never for the few bytes it wrapped to.
        wrapped = b.icmp_unsigned("<", rounded_up, needed)
        return b.call(aligned_alloc, [line, b.select(wrapped, needed, at_least)], name=name)

    def advise_huge_pages(self, pointer: ir.Value, size: ir.Value) -> None:
        """``madvise(MADV_HUGEPAGE)`` over the whole pages of a block of ``size`` bytes at
        ``pointer`` when it is at least ``HUGE_MIN_BYTES`` (see ``HUGE_PAGES``)."""
        if not HUGE_PAGES:
            return
        b = self.builder
        with if_then(b, b.icmp_unsigned(">=", size, ir.Constant(INT64, HUGE_MIN_BYTES)),
                     "huge_pages"):
            madvise = declare(self.module, "madvise", INT32, (POINTER, INT64, INT32))
            address = b.ptrtoint(pointer, INT64)
            mask = ir.Constant(INT64, -PAGE_BYTES)
            start = b.and_(b.add(address, ir.Constant(INT64, PAGE_BYTES - 1)), mask)
            end = b.and_(b.add(address, size), mask)
            b.call(madvise, [b.inttoptr(start, POINTER), b.sub(end, start),
                             ir.Constant(INT32, MADV_HUGEPAGE)])

    def reallocate(self, old: ir.Value, size: ir.Value, name: str) -> None:
        """``name = realloc(old, size)``, returning 1 from the kernel when that fails."""
        realloc = declare(self.module, "realloc", POINTER, (POINTER, INT64))
        pointer = self.builder.call(realloc, [old, size], name=f"{name}.grown")
        self.fail_if_null(pointer, f"grow.{name}")
        self.builder.store(pointer, self.slots[name])

    def grow(self, stmt: Grow) -> None:
        b = self.builder
        assert isinstance(stmt.var.dtype, Ptr)
        capacity = self.variable(stmt.capacity)
        needed = self.value(stmt.needed)
        with if_then(b, b.icmp_signed(">", needed, capacity), f"grow.{stmt.var.name}",
                     unlikely=True):
            doubled = b.mul(capacity, ir.Constant(INT64, 2))
            new_capacity = b.select(b.icmp_signed("<", doubled, needed), needed, doubled)
            elem = ir.Constant(INT64, element_size(stmt.var.dtype.elem))
            size = b.mul(new_capacity, elem)
            old = self.variable(stmt.var)
            # On failure the old buffer stays valid (and the kernel's); it just returns 1.
            if not HUGE_PAGES:
                self.reallocate(old, size, stmt.var.name)
            else:
                # A large buffer moves by hand, into a block advised to use huge pages before
                # the copy touches it: glibc's realloc copies into fresh 4 KiB pages.
                big = b.icmp_unsigned(">=", size, ir.Constant(INT64, HUGE_MIN_BYTES))
                with if_else(b, big, f"grow.{stmt.var.name}.big") as (then, otherwise):
                    with then():
                        pointer = self.aligned_alloc(size, f"{stmt.var.name}.moved")
                        self.fail_if_null(pointer, f"grow.{stmt.var.name}.big")
                        self.advise_huge_pages(pointer, size)
                        memcpy = declare(self.module, "memcpy", POINTER,
                                         (POINTER, POINTER, INT64))
                        b.call(memcpy, [pointer, old, b.mul(capacity, elem)])
                        free = declare(self.module, "free", ir.VoidType(), (POINTER,))
                        b.call(free, [old])
                        b.store(pointer, self.slots[stmt.var.name])
                    with otherwise():
                        self.reallocate(old, size, stmt.var.name)
            b.store(new_capacity, self.slots[stmt.capacity.name])

    # -- expressions -------------------------------------------------------------------------

    def variable(self, var: Var) -> ir.Value:
        slot = self.slots[var.name]
        return self.builder.load(slot, name=var.name, typ=slot.allocated_type)

    def address(self, array: Var, index: Expr) -> ir.Value:
        assert isinstance(array.dtype, Ptr)
        return self.builder.gep(
            self.variable(array),
            [self.value(index)],
            inbounds=True,
            source_etype=memory_type(array.dtype.elem),
        )

    def store_complex(self, value: ir.Value, address: ir.Value) -> None:
        """Store a complex value part by part: plain float stores, which vectorise."""
        b = self.builder
        for k in (0, 1):
            part = b.gep(address, [INT32_ZERO, ir.Constant(INT32, k)], inbounds=True,
                         source_etype=value.type)
            b.store(b.extract_value(value, k), part)

    def load_complex(self, address: ir.Value, typ: ir.Type) -> ir.Value:
        b = self.builder
        result: ir.Value = ir.Constant(typ, ir.Undefined)
        for k in (0, 1):
            part = b.gep(address, [INT32_ZERO, ir.Constant(INT32, k)], inbounds=True,
                         source_etype=typ)
            result = b.insert_value(result, b.load(part, typ=typ.elements[k]), k)
        return result

    def load(self, array: Var, address: ir.Value) -> ir.Value:
        assert isinstance(array.dtype, Ptr)
        elem = array.dtype.elem
        if isinstance(elem, Scalar) and elem.is_complex:
            return self.load_complex(address, memory_type(elem))
        loaded = self.builder.load(address, typ=memory_type(elem))
        return (
            self.builder.icmp_unsigned("!=", loaded, ir.Constant(BYTE, 0))
            if elem == Scalar.BOOL
            else loaded
        )

    def value(self, expr: Expr) -> ir.Value:
        b = self.builder
        match expr:
            case Const(value, dtype):
                return constant(value, dtype)
            case Var():
                return self.variable(expr)
            case Load(array, index):
                return self.load(array, self.address(array, index))
            case Unary(op, operand):
                return self.unary(op, self.value(operand), operand.dtype)
            case Binary("and" | "or" as op, lhs, rhs):
                left = self.value(lhs)
                short = ir.Constant(BIT, op == "or")
                if op == "and":
                    return branch_value(b, left, lambda: self.value(rhs), lambda: short, "and")
                return branch_value(b, left, lambda: short, lambda: self.value(rhs), "or")
            case Binary(op, lhs, rhs):
                return self.binary(op, self.value(lhs), self.value(rhs), lhs.dtype)
            case Select(cond, if_true, if_false) if _may_trap(if_true) or _may_trap(if_false):
                return branch_value(
                    b,
                    self.value(cond),
                    lambda: self.value(if_true),
                    lambda: self.value(if_false),
                    "select",
                )
            case Select(cond, if_true, if_false):
                return b.select(self.value(cond), self.value(if_true), self.value(if_false))
            case Cast(operand, to):
                return self.cast(self.value(operand), operand.dtype, to)
        raise CompileError(f"cannot emit expression {expr!r} to LLVM")

    def call_intrinsic(self, op: str, args: list[ir.Value]) -> ir.Value:
        typ = args[0].type
        name = f"{INTRINSICS[op]}.{typ.intrinsic_name}"
        return self.builder.call(declare(self.module, name, typ, tuple(a.type for a in args)), args)

    def unary(self, op: str, operand: ir.Value, dtype: DType) -> ir.Value:
        b = self.builder
        if isinstance(dtype, Scalar) and dtype.is_complex:
            if op != "neg":
                raise CompileError(f"unary {op!r} is not defined on {dtype}")
            return self.pack(dtype, *(b.fneg(x) for x in self.parts(operand)))
        is_float = isinstance(dtype, Scalar) and dtype.is_float
        is_int = isinstance(dtype, Scalar) and dtype.is_int
        match op:
            case "neg" if is_float:
                return b.fneg(operand)
            case "neg" if is_int:
                return b.neg(operand)
            case "not" if dtype == Scalar.BOOL:
                return b.not_(operand)
            case "abs" if is_int:
                abs_fn = declare(
                    self.module,
                    f"llvm.abs.{operand.type.intrinsic_name}",
                    operand.type,
                    (operand.type, BIT),
                )
                return b.call(abs_fn, [operand, ir.Constant(BIT, 0)])
            case "ctz" if is_int:
                cttz = declare(self.module, f"llvm.cttz.{operand.type.intrinsic_name}",
                               operand.type, (operand.type, BIT))
                return b.call(cttz, [operand, ir.Constant(BIT, 0)])   # defined for 0: width
            # float32 exp and tanh inline, so that a loop over them vectorises (libm's are
            # a call per value: 4 and 27 ns); the C dialect prints the same formulas
            # (cfamily.py), so the backends agree bit for bit. float64 keeps libm in both.
            case "exp" if dtype == Scalar.F32:
                return scalar_expf(b, operand)
            case "tanh" if dtype == Scalar.F32:
                return scalar_tanhf(b, operand)
            case "tanh" if is_float:
                return b.call(declare(self.module, "tanh", operand.type, (operand.type,)),
                              [operand])
            case _ if op in INTRINSICS and is_float:
                return self.call_intrinsic(op, [operand])
        raise CompileError(f"unary {op!r} is not defined on {dtype}")

    def binary(self, op: str, left: ir.Value, right: ir.Value, dtype: DType) -> ir.Value:
        b = self.builder
        is_float = isinstance(dtype, Scalar) and dtype.is_float
        if isinstance(dtype, Scalar) and dtype.is_complex and op in ("==", "!="):
            (ar, ai), (br, bi) = self.parts(left), self.parts(right)
            if op == "==":
                return b.and_(b.fcmp_ordered("==", ar, br), b.fcmp_ordered("==", ai, bi))
            return b.or_(b.fcmp_unordered("!=", ar, br), b.fcmp_unordered("!=", ai, bi))
        if op in COMPARISONS:
            if is_float:
                # C's != is true for NaN (unordered); the other comparisons are false for NaN.
                return (
                    b.fcmp_unordered(op, left, right)
                    if op == "!="
                    else b.fcmp_ordered(op, left, right)
                )
            if dtype == Scalar.BOOL or isinstance(dtype, Ptr):
                return b.icmp_unsigned(op, left, right)
            return b.icmp_signed(op, left, right)
        if op in ("min", "max", "pow") and is_float:
            return self.call_intrinsic(op, [left, right])
        if op in ("min", "max") and isinstance(dtype, Scalar) and dtype.is_int:
            return b.select(b.icmp_signed("<" if op == "min" else ">", left, right), left, right)
        if op in INT_OPS:
            return self.arithmetic(op, left, right, dtype)
        if op in BIT_OPS and isinstance(dtype, Scalar) and dtype.is_int:
            return getattr(b, BIT_OPS[op])(left, right)
        raise CompileError(f"binary {op!r} is not defined on {dtype}")

    def arithmetic(self, op: str, left: ir.Value, right: ir.Value, dtype: DType,
                   reassociate: bool = False) -> ir.Value:
        if isinstance(dtype, Scalar) and dtype.is_float:
            result = getattr(self.builder, FLOAT_OPS[op])(left, right)
            # Let LLVM fuse a*b+c into one FMA (one rounding instead of two), as C compilers
            # do by default (-ffp-contract) and BLAS does; and reorder the additions of a
            # reduction. Nothing else is relaxed.
            result.flags.append("contract")
            if reassociate:
                result.flags.append("reassoc")
            return result
        if isinstance(dtype, Scalar) and dtype.is_int:
            return getattr(self.builder, INT_OPS[op])(left, right)
        if isinstance(dtype, Scalar) and dtype.is_complex and op in ("+", "-", "*", "/"):
            return self.complex_arithmetic(op, left, right, dtype, reassociate)
        raise CompileError(f"arithmetic {op!r} is not defined on {dtype}")

    # -- complex values ----------------------------------------------------------------------

    def parts(self, value: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The real and imaginary parts of a complex value."""
        return self.builder.extract_value(value, 0), self.builder.extract_value(value, 1)

    def pack(self, dtype: Scalar, real: ir.Value, imag: ir.Value) -> ir.Value:
        b = self.builder
        packed = b.insert_value(ir.Constant(VALUE_TYPES[dtype], ir.Undefined), real, 0)
        return b.insert_value(packed, imag, 1)

    def complex_arithmetic(self, op: str, left: ir.Value, right: ir.Value, dtype: Scalar,
                           reassociate: bool) -> ir.Value:
        """NumPy's complex ``+ - * /`` (ir/nodes.py), written out on the parts. No FMA
        contraction: the products round as NumPy's do."""
        b = self.builder
        (ar, ai), (br, bi) = self.parts(left), self.parts(right)

        def flagged(result: ir.Instruction) -> ir.Instruction:
            if reassociate:
                result.flags.append("reassoc")
            return result

        match op:
            case "+":
                return self.pack(dtype, flagged(b.fadd(ar, br)), flagged(b.fadd(ai, bi)))
            case "-":
                return self.pack(dtype, b.fsub(ar, br), b.fsub(ai, bi))
            case "*":
                real = b.fsub(b.fmul(ar, br), b.fmul(ai, bi))
                imag = b.fadd(b.fmul(ar, bi), b.fmul(ai, br))
                return self.pack(dtype, real, imag)
        return self.pack(dtype, *self.complex_quotient(ar, ai, br, bi))

    def complex_quotient(self, ar: ir.Value, ai: ir.Value, br: ir.Value,
                         bi: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Smith's algorithm, exactly as NumPy's complex divide (both arms computed, one
        selected: float division never traps)."""
        b = self.builder
        one, zero = ir.Constant(ar.type, 1.0), ir.Constant(ar.type, 0.0)
        br_abs, bi_abs = self.call_intrinsic("abs", [br]), self.call_intrinsic("abs", [bi])
        # |br| >= |bi|: rat = bi / br, scl = 1 / (br + bi * rat)
        rat1 = b.fdiv(bi, br)
        scl1 = b.fdiv(one, b.fadd(br, b.fmul(bi, rat1)))
        real1 = b.fmul(b.fadd(ar, b.fmul(ai, rat1)), scl1)
        imag1 = b.fmul(b.fsub(ai, b.fmul(ar, rat1)), scl1)
        # both zero: a complex inf or nan, as NumPy gives
        both_zero = b.and_(b.fcmp_ordered("==", br_abs, zero), b.fcmp_ordered("==", bi_abs, zero))
        real1 = b.select(both_zero, b.fdiv(ar, br_abs), real1)
        imag1 = b.select(both_zero, b.fdiv(ai, br_abs), imag1)
        # otherwise: rat = br / bi, scl = 1 / (bi + br * rat)
        rat2 = b.fdiv(br, bi)
        scl2 = b.fdiv(one, b.fadd(bi, b.fmul(br, rat2)))
        real2 = b.fmul(b.fadd(b.fmul(ar, rat2), ai), scl2)
        imag2 = b.fmul(b.fsub(b.fmul(ai, rat2), ar), scl2)
        first = b.fcmp_ordered(">=", br_abs, bi_abs)
        return b.select(first, real1, real2), b.select(first, imag1, imag2)

    def cast(self, value: ir.Value, source: DType, to: Scalar) -> ir.Value:
        """C conversion rules: truncation toward zero for float → int, nonzero → true."""
        b = self.builder
        target = VALUE_TYPES[to]
        if source == to:
            return value
        if not isinstance(source, Scalar):
            raise CompileError(f"cannot cast {source} to {to}")
        if source.is_complex and to == Scalar.BOOL:
            real, imag = self.parts(value)
            return b.or_(self.cast(real, source.part, to), self.cast(imag, source.part, to))
        if source.is_complex:      # to a real dtype: the real part, as NumPy's unsafe cast
            real, imag = self.parts(value)
            if to.is_complex:
                return self.pack(to, self.cast(real, source.part, to.part),
                                 self.cast(imag, source.part, to.part))
            return self.cast(real, source.part, to)
        if to.is_complex:
            return self.pack(to, self.cast(value, source, to.part),
                             ir.Constant(VALUE_TYPES[to.part], 0.0))
        if to == Scalar.BOOL:
            if source.is_float:
                return b.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
            return b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))
        if source == Scalar.BOOL:
            return b.uitofp(value, target) if to.is_float else b.zext(value, target)
        if source.is_int and to.is_int:
            return (
                b.sext(value, target)
                if ELEMENT_SIZE[to] > ELEMENT_SIZE[source]
                else b.trunc(value, target)
            )
        if source.is_int:
            return b.sitofp(value, target)
        if to.is_int:
            return b.fptosi(value, target)
        return b.fpext(value, target) if to == Scalar.F64 else b.fptrunc(value, target)


def constant(value: int | float | bool | complex, dtype: Scalar) -> ir.Constant:
    """An LLVM constant of ``dtype``; f32 values are rounded to float32 first, as C does."""
    if dtype.is_complex:
        z = complex(value)
        return ir.Constant(VALUE_TYPES[dtype], [constant(z.real, dtype.part),
                                                constant(z.imag, dtype.part)])
    if dtype == Scalar.F32:
        return ir.Constant(VALUE_TYPES[dtype], ctypes.c_float(float(value)).value)
    if dtype == Scalar.F64:
        return ir.Constant(VALUE_TYPES[dtype], float(value))
    return ir.Constant(VALUE_TYPES[dtype], int(value))


def emit_module(fn: Function, triple: str = "", data_layout: str = "") -> ir.Module:
    """The unoptimised llvmlite module holding ``fn``.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> 'define i32 @"k"()' in str(emit_module(Function("k", (), Block())))
    True
    """
    module = ir.Module(name=fn.name)
    module.triple, module.data_layout = triple, data_layout
    try:
        _FunctionLowering(module, fn).lower(fn.body)
    except KeyError as error:
        raise CompileError(undeclared_message(fn, error)) from None
    return module


# ---------------------------------------------------------------------------------------------
# Native code


@functools.cache
def _initialise() -> None:
    """Initialise llvmlite's native target once, and make libm visible to the JIT."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)


@functools.cache
def _host() -> tuple[str, str, str]:
    _initialise()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # some hosts cannot report their features
        features = ""
    return llvm.get_default_triple(), llvm.get_host_cpu_name(), features


def host_has(feature: str) -> bool:
    """Whether the host CPU has ``feature`` as LLVM names it (``"avx512f"``, ``"avx2"``)."""
    return f"+{feature}" in _host()[2].split(",")


def host_fingerprint() -> str:
    """What LLVM object code depends on: LLVM version, triple, CPU and its features."""
    triple, cpu, features = _host()
    policy = "|wide-reductions" if _wide_reductions() else ""
    return f"llvm{'.'.join(map(str, llvm.llvm_version_info))}|{triple}|{cpu}|{features}{policy}"


def target_machine(opt: int = 3) -> llvm.TargetMachine:
    """A fresh target machine for the host at opt level ``opt`` (an execution engine owns one;
    at 0, LLVM selects instructions with FastISel: what a quick build, ``codegen/tiered.py``,
    wants).

    Its object code is position independent, so that a cached kernel can also be linked into a
    shared object and loaded without LLVM (``codegen/link.py``).
    """
    triple, cpu, features = _host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=opt, jit=True,
                                        reloc="pic")


def optimize(module: ir.Module, machine: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parse, verify and optimise ``module`` at O3 with loop and SLP vectorisation."""
    module.triple = machine.triple
    module.data_layout = str(machine.target_data)
    return optimize_text(str(module), machine, getattr(module, "name", "?"))


def optimize_text(text: str, machine: llvm.TargetMachine, name: str) -> llvm.ModuleRef:
    """:func:`optimize` of a module's IR text (``name`` is for the error message); the text
    must name ``machine``'s triple and data layout."""
    try:
        parsed = llvm.parse_assembly(text)
        parsed.verify()
    except RuntimeError as error:
        raise CompileError(f"invalid LLVM IR for {name!r}: {error}\n{text}") from None
    tuning = llvm.PipelineTuningOptions(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    passes = llvm.create_pass_builder(machine, tuning)
    passes.getModulePassManager().run(parsed, passes)
    return parsed


def kernel_text(fn: Function, machine: llvm.TargetMachine) -> str:
    """The unoptimised IR text of ``fn``'s module for ``machine``, with the packed entry of
    ``codegen/packed.py``: what :func:`compile_llvm` optimises, and what a quick build
    (``codegen/tiered.py``) emits as it is."""
    from tensoralg.codegen.packed import add_llvm_entry

    module = emit_module(fn, machine.triple, str(machine.target_data))
    add_llvm_entry(module, fn.name, fn.params)
    return str(module)


def compile_object(text: str, name: str) -> bytes:
    """The host object code of the module ``text`` optimised, without its IR text: for the
    background builds of ``codegen/tiered.py``. Printing a module switches the process's C
    locale to "C" while LLVM's printer runs, which Python code on another thread then sees (a
    file opened meanwhile took "ascii" as the locale's encoding and failed to write a "±": a
    CI run, 2026-12-06; a thread printing modules in a loop showed the main thread the "C"
    locale ~1% of the time). Parsing, optimising and emitting do not."""
    machine = target_machine()
    return machine.emit_object(optimize_text(text, machine, name))


def compile_llvm(fn: Function) -> tuple[str, bytes]:
    """The optimised LLVM IR text of ``fn`` and its host object code, which also exports the
    packed entry of ``codegen/packed.py``."""
    machine = target_machine()
    optimised = optimize_text(kernel_text(fn, machine), machine, fn.name)
    return str(optimised), machine.emit_object(optimised)


def llvm_source(fn: Function) -> str:
    """The optimised LLVM IR of ``fn`` as text."""
    return str(optimize(emit_module(fn), target_machine()))
