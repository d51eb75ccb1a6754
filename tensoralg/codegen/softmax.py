"""Softmax and LogSoftmax over contiguous rows: one generated kernel, three vector passes per
row with the row in cache.

For each row ``x`` of ``length`` values: ``m = max(x)``; ``s = sum(exp(x - m))``; then
``y = exp(x - m) / s`` (the exponentials are stored by the second pass and scaled by the third)
or ``y = x - m - log(s)``. Node by node the same is a tree of ``log2(length)`` elementwise
``max`` kernels and two statements over the whole tensor, each pass a trip through memory and
a kernel call; here a row is read while it sits in L1, and a whole attention tensor is one
call. Vector lanes run along the row; the tail of a row is a masked load and store.

It is a separate emitter, like ``codegen/window.py``, because a max reduction is not a
statement of the index notation yet.
"""
from __future__ import annotations

from llvmlite import ir

from tensoralg.codegen.cfamily import (
    EXPF_HIGH,
    EXPF_LN2_HI,
    EXPF_LN2_LO,
    EXPF_LOG2E,
    EXPF_LOW,
    EXPF_POLY,
    TANHF_POLY,
    TANHF_SMALL,
)
from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_softmax"
# float32's smallest normal, and the exponent below which the softmax flushes exp to zero:
# near and below FLT_MIN every arithmetic step on a denormal takes a microcode assist of ~100
# cycles. A masked attention row (its masked logits at -100, as Swin's shifted windows have
# them) ran 3.7x slower than an unmasked one (MONAI's SwinUNETR, rows of 343: 159 against 42
# ms in its profile; 172 against 41 ms for 128625 such rows, 43 and 45 ms with the flush: one
# thread, ad hoc, 2026-12-07). Such an exponential is 0 after the max's 1 in a float32 sum,
# and as an output it differs from the exact value by under 1.6e-38; the kernel writes 0
# there (as flush-to-zero arithmetic would).
FLOAT32_TINY = 1.1754943508222875e-38
FLUSH_BELOW = -87.0     # exp(-87) = 1.6e-38: every step above it stays normal


def softmax_module(length: int | None, dtype: str, lanes: int, log: bool) -> ir.Module:
    """The module exporting ``int32 tensoralg_softmax(X, Y, begin, end)``: rows
    ``[begin, end)`` of ``length`` values of ``X`` into ``Y`` (both C-contiguous), softmax or,
    with ``log``, log-softmax. ``dtype`` is ``"float32"`` or ``"float64"``. Returns 0. With
    ``length=None`` the length is a fifth argument, ``(X, Y, begin, end, length)``: one
    module for rows of any length (a model served with many sequence lengths), its vector
    count and tail mask computed per call.

    >>> "llvm.exp" in str(softmax_module(10, "float32", 16, False))
    True
    >>> len(softmax_module(None, "float32", 16, False).get_global(ENTRY).args)
    5
    """
    if length is not None and length < 1:
        raise ValueError(f"softmax rows need at least one value, not {length}")
    scalar = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    module = ir.Module(name=f"softmax_{dtype}")
    params = (POINTER, POINTER, I64, I64) + (() if length is not None else (I64,))
    fn = ir.Function(module, ir.FunctionType(I32, params), name=ENTRY)
    x, y, begin, end = fn.args[:4]
    x.add_attribute("noalias")
    y.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    vector, mask_type = ir.VectorType(scalar, lanes), ir.VectorType(I1, lanes)
    name = "v{}f{}".format(lanes, 32 if scalar == ir.FloatType() else 64)
    exp = declare(module, f"llvm.exp.{name}", vector, (vector,))
    log_ = declare(module, f"llvm.log.{'f32' if scalar == ir.FloatType() else 'f64'}", scalar,
                   (scalar,))
    maximum = declare(module, f"llvm.maximum.{name}", vector, (vector, vector))
    reduce_max = declare(module, f"llvm.vector.reduce.fmaximum.{name}", scalar, (vector,))
    reduce_add = declare(module, f"llvm.vector.reduce.fadd.{name}", scalar, (scalar, vector))
    load = declare(module, f"llvm.masked.load.{name}.p0", vector,
                   (POINTER, I32, mask_type, vector))
    store = declare(module, f"llvm.masked.store.{name}.p0", ir.VoidType(),
                    (vector, POINTER, I32, mask_type))
    align = ir.Constant(I32, 4 if scalar == ir.FloatType() else 8)
    if length is not None:
        row_length: ir.Value = ir.Constant(I64, length)
        full_count, tail_count = divmod(length, lanes)
        full: ir.Value = ir.Constant(I64, full_count)
        tail_mask = ir.Constant(mask_type, [k < tail_count for k in range(lanes)])
    else:
        row_length = fn.args[4]
        full = b.udiv(row_length, ir.Constant(I64, lanes))
        tail_count = b.urem(row_length, ir.Constant(I64, lanes))
        lane_index = ir.Constant(ir.VectorType(I64, lanes), list(range(lanes)))
        tail_vector = b.insert_element(ir.Constant(ir.VectorType(I64, lanes), ir.Undefined),
                                       tail_count, ir.Constant(I32, 0))
        tail_vector = b.shuffle_vector(tail_vector, ir.Constant(ir.VectorType(I64, lanes),
                                                                ir.Undefined),
                                       ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))
        tail_mask = b.icmp_unsigned("<", lane_index, tail_vector)

    def splat(value: float) -> ir.Constant:
        return ir.Constant(vector, [value] * lanes)

    def broadcast(value: ir.Value) -> ir.Value:
        undefined = ir.Constant(vector, ir.Undefined)
        lane0 = b.insert_element(undefined, value, ir.Constant(I32, 0))
        return b.shuffle_vector(lane0, undefined, ir.Constant(ir.VectorType(I32, lanes),
                                                              [0] * lanes))

    def at(base: ir.Value, q: ir.Value) -> ir.Value:
        return b.gep(base, [b.mul(q, ir.Constant(I64, lanes))], source_etype=scalar)

    def exponential(v: ir.Value) -> ir.Value:
        if scalar != ir.FloatType():
            return b.call(exp, [v])
        # below float32's smallest normal the exponential is flushed to zero (see FLUSH_BELOW),
        # and not computed there: its steps would make denormals before the select
        below = b.fcmp_ordered("<", v, splat(FLUSH_BELOW))
        return b.select(below, splat(0.0),
                        vector_expf(b, b.select(below, splat(FLUSH_BELOW), v), lanes))

    def each_vector(body) -> None:
        """``body(q, mask)`` for every full vector of the row, then for the masked tail."""
        counter = entry_alloca(b, I64, "q")
        if length is None or full_count:
            with counted_loop(b, counter, ir.Constant(I64, 0), lambda: full, "vector"):
                body(b.load(counter, typ=I64), None)
        if length is None:
            with b.if_then(b.icmp_unsigned("!=", tail_count, ir.Constant(I64, 0))):
                body(full, tail_mask)
        elif tail_count:
            body(full, tail_mask)

    def read(base: ir.Value, q: ir.Value, mask: ir.Value | None, fill: float) -> ir.Value:
        where = at(base, q)
        if mask is None:
            return b.load(where, typ=vector, align=align.constant)
        return b.call(load, [where, align, mask, splat(fill)])

    def write(value: ir.Value, base: ir.Value, q: ir.Value, mask: ir.Value | None) -> None:
        where = at(base, q)
        if mask is None:
            b.store(value, where, align=align.constant)
        else:
            b.call(store, [value, where, align, mask])

    row = entry_alloca(b, I64, "row")
    acc = entry_alloca(b, vector, "acc")
    with counted_loop(b, row, begin, lambda: end, "row"):
        offset = b.mul(b.load(row, typ=I64), row_length)
        x_row = b.gep(x, [offset], source_etype=scalar)
        y_row = b.gep(y, [offset], source_etype=scalar)
        b.store(splat(-float("inf")), acc)
        each_vector(lambda q, mask: b.store(
            b.call(maximum, [b.load(acc, typ=vector), read(x_row, q, mask, -float("inf"))]),
            acc))
        top = broadcast(b.call(reduce_max, [b.load(acc, typ=vector)]))
        b.store(splat(0.0), acc)

        def exponentials(q: ir.Value, mask: ir.Value | None) -> None:
            e = exponential(b.fsub(read(x_row, q, mask, 0.0), top))
            if mask is not None:
                e = b.select(mask, e, splat(0.0))
            if not log:
                write(e, y_row, q, mask)
            b.store(b.fadd(b.load(acc, typ=vector), e), acc)
        each_vector(exponentials)
        # reassoc: a tree of adds across the lanes, not sixteen in a row (the order of a
        # float sum is unspecified for Softmax; onnxruntime sums in its own blocks too)
        total = b.call(reduce_add, [ir.Constant(scalar, 0.0), b.load(acc, typ=vector)],
                       fastmath=("reassoc",))
        if log:
            shift = broadcast(b.fadd(b.call(log_, [total]),
                                     b.extract_element(top, ir.Constant(I32, 0))))
            each_vector(lambda q, mask: write(b.fsub(read(x_row, q, mask, 0.0), shift),
                                              y_row, q, mask))
        else:
            scale = broadcast(total)
            # (float32: an exponential whose quotient would be denormal is flushed first, as
            # the exponentials were: a denormal result costs the division a microcode assist)
            tiny = None if scalar != ir.FloatType() else b.fmul(scale, splat(FLOAT32_TINY))

            def scaled(q: ir.Value, mask: ir.Value | None) -> None:
                e = read(y_row, q, mask, 1.0)
                if tiny is not None:
                    e = b.select(b.fcmp_ordered("<", e, tiny), splat(0.0), e)
                write(b.fdiv(e, scale), y_row, q, mask)
            each_vector(scaled)
    b.ret(ir.Constant(I32, 0))
    return module


def vector_expf(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """``exp`` of a vector of float32 in registers. ``llvm.exp`` on a vector becomes one
    libm call per lane (25 ns each in a JIT-compiled module, 20 times NumPy's vectorised exp);
    this is the polynomial NumPy and onnxruntime use in spirit. NaN stays NaN, -inf gives 0,
    +inf and overflow give +inf."""
    return _expf(b, v, lanes)


def scalar_expf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``exp`` of one float32 as straight-line code (no call): in a statement's loop, LLVM's
    vectoriser turns it into :func:`vector_expf`'s vector code, where ``llvm.exp.f32`` stays
    one libm call per value (4 ns; this is ~0.3 ns a value in a vectorised loop).

    >>> m = ir.Module(); f = ir.Function(m, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "e")
    >>> b = ir.IRBuilder(f.append_basic_block()); _ = b.ret(scalar_expf(b, f.args[0]))
    >>> "llvm.exp" in str(m)
    False
    """
    return _expf(b, x, None)


def scalar_tanhf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """``tanh`` of one float32 as straight-line code that LLVM vectorises (libm's ``tanhf``
    is a call per value, 27 ns: GPT-2's GELU spent most of its time there); the formula is
    ``cfamily``'s (TANHF_*), which the C backend prints step for step. NaN stays NaN, +-inf
    give +-1, -0 gives -0.

    >>> m = ir.Module(); f = ir.Function(m, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "t")
    >>> b = ir.IRBuilder(f.append_basic_block()); _ = b.ret(scalar_tanhf(b, f.args[0]))
    >>> "tanhf" in str(m)
    False
    """
    f32 = ir.FloatType()
    fabs = declare(b.module, "llvm.fabs.f32", f32, (f32,))
    copysign = declare(b.module, "llvm.copysign.f32", f32, (f32, f32))
    size = b.call(fabs, [x])
    e = scalar_expf(b, b.fadd(size, size))
    large = b.fsub(ir.Constant(f32, 1.0),
                   b.fdiv(ir.Constant(f32, 2.0), b.fadd(e, ir.Constant(f32, 1.0))))
    z = b.fmul(size, size)
    poly = ir.Constant(f32, TANHF_POLY[0])
    for coefficient in TANHF_POLY[1:]:
        poly = b.fadd(b.fmul(poly, z), ir.Constant(f32, coefficient))
    small = b.fadd(b.fmul(b.fmul(poly, z), size), size)
    # On |x| and the sign put back last: x + x z p(z) would give +0 for -0.
    magnitude = b.select(b.fcmp_ordered(">", size, ir.Constant(f32, TANHF_SMALL)), large, small)
    return b.call(copysign, [magnitude, x])


def _expf(b: ir.IRBuilder, v: ir.Value, lanes: int | None) -> ir.Value:
    """The body of :func:`vector_expf` (``lanes``) or :func:`scalar_expf` (None)."""
    f32 = ir.FloatType()
    vector = f32 if lanes is None else ir.VectorType(f32, lanes)
    ints = I32 if lanes is None else ir.VectorType(I32, lanes)

    def splat(value: float) -> ir.Constant:
        return ir.Constant(vector, value if lanes is None else [value] * lanes)

    def int_splat(value: int) -> ir.Constant:
        return ir.Constant(ints, value if lanes is None else [value] * lanes)

    # Plain fmul/fadd, no "contract": the C backend computes the same without FMA.
    is_nan = b.fcmp_unordered("uno", v, v)
    low = b.fcmp_ordered("<", v, splat(EXPF_LOW))
    high = b.fcmp_ordered(">", v, splat(EXPF_HIGH))
    x = b.select(b.or_(is_nan, low), splat(0.0), b.select(high, splat(EXPF_HIGH), v))
    rint_name = "llvm.rint.f32" if lanes is None else f"llvm.rint.v{lanes}f32"
    rint = declare(b.module, rint_name, vector, (vector,))
    n = b.call(rint, [b.fmul(x, splat(EXPF_LOG2E))])
    r = b.fsub(b.fsub(x, b.fmul(n, splat(EXPF_LN2_HI))), b.fmul(n, splat(EXPF_LN2_LO)))
    poly = splat(EXPF_POLY[0])
    for coefficient in EXPF_POLY[1:]:
        poly = b.fadd(b.fmul(poly, r), splat(coefficient))
    value = b.fadd(b.fadd(b.fmul(b.fmul(poly, r), r), r), splat(1.0))
    # 2^n from its exponent bits, in two halves: n in [-150, 128] never leaves the field.
    whole = b.fptosi(n, ints)
    half = b.ashr(whole, int_splat(1))
    rest = b.sub(whole, half)
    scale = [b.bitcast(b.shl(b.add(k, int_splat(127)), int_splat(23)), vector)
             for k in (half, rest)]
    value = b.fmul(b.fmul(value, scale[0]), scale[1])
    value = b.select(low, splat(0.0), b.select(high, splat(float("inf")), value))
    return b.select(is_nan, v, value)


__all__ = ["softmax_module", "vector_expf", "scalar_expf", "scalar_tanhf", "ENTRY"]
