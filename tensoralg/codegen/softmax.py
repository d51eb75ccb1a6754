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

from tensoralg.codegen.llvm_helpers import counted_loop, declare, entry_alloca

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
POINTER = ir.PointerType()
ENTRY = "tensoralg_softmax"


def softmax_module(length: int, dtype: str, lanes: int, log: bool) -> ir.Module:
    """The module exporting ``int32 tensoralg_softmax(X, Y, begin, end)``: rows
    ``[begin, end)`` of ``length`` values of ``X`` into ``Y`` (both C-contiguous), softmax or,
    with ``log``, log-softmax. ``dtype`` is ``"float32"`` or ``"float64"``. Returns 0.

    >>> "llvm.exp" in str(softmax_module(10, "float32", 16, False))
    True
    """
    if length < 1:
        raise ValueError(f"softmax rows need at least one value, not {length}")
    scalar = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    module = ir.Module(name=f"softmax_{dtype}")
    fn = ir.Function(module, ir.FunctionType(I32, (POINTER, POINTER, I64, I64)), name=ENTRY)
    x, y, begin, end = fn.args
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
    full, tail = divmod(length, lanes)
    tail_mask = ir.Constant(mask_type, [k < tail for k in range(lanes)])

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
        return vector_expf(b, v, lanes)

    def each_vector(body) -> None:
        """``body(q, mask)`` for every full vector of the row, then for the masked tail."""
        counter = entry_alloca(b, I64, "q")
        if full:
            with counted_loop(b, counter, ir.Constant(I64, 0), lambda: ir.Constant(I64, full),
                              "vector"):
                body(b.load(counter, typ=I64), None)
        if tail:
            body(ir.Constant(I64, full), tail_mask)

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
        offset = b.mul(b.load(row, typ=I64), ir.Constant(I64, length))
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
            each_vector(lambda q, mask: write(b.fdiv(read(y_row, q, mask, 1.0), scale),
                                              y_row, q, mask))
    b.ret(ir.Constant(I32, 0))
    return module


# Cephes' expf: exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts,
# so r is exact), exp(r) by a degree-7 polynomial on |r| <= ln 2 / 2 (about 1 ulp).
_LN2_HI, _LN2_LO, _LOG2E = 0.693359375, -2.12194440e-4, 1.44269504088896341
_EXPF_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
              1.6666665459e-1, 5.0000001201e-1)
_EXPF_LOW, _EXPF_HIGH = -87.33654, 88.72283     # below: 0 (2^n leaves the normal range)


def vector_expf(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """``exp`` of a vector of float32 in registers. ``llvm.exp`` on a vector becomes one
    libm call per lane (25 ns each in a JIT-compiled module, 20 times NumPy's vectorised exp);
    this is the polynomial NumPy and onnxruntime use in spirit. NaN stays NaN, -inf gives 0,
    +inf and overflow give +inf."""
    f32 = ir.FloatType()
    vector = ir.VectorType(f32, lanes)
    ints = ir.VectorType(I32, lanes)

    def splat(value: float) -> ir.Constant:
        return ir.Constant(vector, [value] * lanes)

    is_nan = b.fcmp_unordered("uno", v, v)
    low = b.fcmp_ordered("<", v, splat(_EXPF_LOW))
    high = b.fcmp_ordered(">", v, splat(_EXPF_HIGH))
    x = b.select(is_nan, splat(0.0), b.select(low, splat(_EXPF_LOW),
                                              b.select(high, splat(_EXPF_HIGH), v)))
    rint = declare(b.module, f"llvm.rint.v{lanes}f32", vector, (vector,))
    n = b.call(rint, [b.fmul(x, splat(_LOG2E))])
    r = b.fsub(b.fsub(x, b.fmul(n, splat(_LN2_HI))), b.fmul(n, splat(_LN2_LO)))
    poly = splat(_EXPF_POLY[0])
    for coefficient in _EXPF_POLY[1:]:
        poly = b.fadd(b.fmul(poly, r), splat(coefficient))
    value = b.fadd(b.fadd(b.fmul(b.fmul(poly, r), r), r), splat(1.0))
    # 2^n from its exponent bits; n in [-126, 128]: n = 128 (x near the top) scales in two
    # halves so the exponent field never overflows.
    whole = b.fptosi(n, ints)
    half = b.ashr(whole, ir.Constant(ints, [1] * lanes))
    rest = b.sub(whole, half)
    scale = [b.bitcast(b.shl(b.add(k, ir.Constant(ints, [127] * lanes)),
                             ir.Constant(ints, [23] * lanes)), vector) for k in (half, rest)]
    value = b.fmul(b.fmul(value, scale[0]), scale[1])
    value = b.select(low, splat(0.0), b.select(high, splat(float("inf")), value))
    return b.select(is_nan, v, value)


__all__ = ["softmax_module", "vector_expf", "ENTRY"]
