"""Small llvmlite builder helpers: entry-block allocas, loops and branches as context managers,
functions and intrinsics declared once per module.

Blocks are named after the construct (``for.i.cond``, ``while.body``, ``if.then``), so that the
dumped LLVM IR reads like the tensoralg IR it came from.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from llvmlite import ir


def entry_alloca(builder: ir.IRBuilder, typ: ir.Type, name: str) -> ir.AllocaInstr:
    """A stack slot in the function's entry block, where mem2reg can promote it.

    >>> # slot = entry_alloca(builder, ir.IntType(64), "i")
    """
    saved = builder.block
    entry = builder.function.entry_basic_block
    if entry.instructions:
        builder.position_before(entry.instructions[0])
    else:
        builder.position_at_end(entry)
    slot = builder.alloca(typ, name=name)
    builder.position_at_end(saved)
    return slot


def splat(builder: ir.IRBuilder, value: ir.Value, vector: ir.VectorType) -> ir.Value:
    """The scalar ``value`` in every lane of ``vector`` (an insert and a zero shuffle, which
    LLVM turns into one broadcast)."""
    lane0 = builder.insert_element(ir.Constant(vector, ir.Undefined), value,
                                   ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(lane0, ir.Constant(vector, ir.Undefined), ir.Constant(
        ir.VectorType(ir.IntType(32), vector.count), [0] * vector.count))


def declare(
    module: ir.Module, name: str, return_type: ir.Type, argument_types: tuple[ir.Type, ...]
) -> ir.Function:
    """The function ``name`` of ``module``, declared on first use (intrinsics and libc alike).

    >>> m = ir.Module()
    >>> f64 = ir.DoubleType()
    >>> declare(m, "llvm.sqrt.f64", f64, (f64,)) is declare(m, "llvm.sqrt.f64", f64, (f64,))
    True
    """
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(return_type, argument_types), name=name)


def prefetch(builder: ir.IRBuilder, base: ir.Value, offset: ir.Value, element: ir.Type,
             write: bool = False) -> None:
    """Prefetch into L1 the line of ``base[offset]`` (``element``s), for reading or, with
    ``write``, for writing (read for ownership). The address is computed without
    ``inbounds``: it may lie past the buffer, which a prefetch never faults on.

    >>> m = ir.Module(); f = ir.Function(m, ir.FunctionType(ir.VoidType(), ()), name="f")
    >>> b = ir.IRBuilder(f.append_basic_block())
    >>> null = ir.Constant(ir.PointerType(), None)
    >>> prefetch(b, null, ir.Constant(ir.IntType(64), 16), ir.FloatType(), write=True)
    >>> "llvm.prefetch.p0" in str(m)
    True
    """
    i32 = ir.IntType(32)
    touch = declare(builder.module, "llvm.prefetch.p0", ir.VoidType(),
                    (ir.PointerType(), i32, i32, i32))
    where = builder.gep(base, [offset], source_etype=element)
    builder.call(touch, [where, ir.Constant(i32, int(write)), ir.Constant(i32, 3),
                         ir.Constant(i32, 1)])


def _continue_to(builder: ir.IRBuilder, target: ir.Block) -> None:
    if not builder.block.is_terminated:
        builder.branch(target)


@contextmanager
def counted_loop(
    builder: ir.IRBuilder,
    counter: ir.AllocaInstr,
    start: ir.Value,
    stop: Callable[[], ir.Value],
    name: str,
    hints: ir.MDValue | None = None,
    step: int = 1,
) -> Iterator[None]:
    """Emit ``for (counter = start; counter < stop(); counter += step) <body of the with>``
    (``step`` above 1: a loop over vectors, its last one masked by the body).

    ``stop`` is called to emit the bound inside the condition block: it is evaluated before every
    iteration, as C does, and LLVM hoists it when it is invariant. ``hints`` (from
    :func:`loop_hints`) go on the back edge, where LLVM's loop passes look for them.
    """
    builder.store(start, counter)
    cond = builder.append_basic_block(f"{name}.cond")
    body = builder.append_basic_block(f"{name}.body")
    end = builder.append_basic_block(f"{name}.end")
    builder.branch(cond)
    builder.position_at_end(cond)
    current = builder.load(counter, typ=counter.allocated_type)
    builder.cbranch(builder.icmp_signed("<", current, stop()), body, end)
    builder.position_at_end(body)
    yield
    if not builder.block.is_terminated:
        current = builder.load(counter, typ=counter.allocated_type)
        builder.store(builder.add(current, ir.Constant(current.type, step), flags=("nsw",)),
                      counter)
        back = builder.branch(cond)
        if hints is not None:
            back.set_metadata("llvm.loop", hints)
    builder.position_at_end(end)


def loop_hints(module: ir.Module, unroll: int, vectorize: int, masked: bool = False
               ) -> ir.MDValue | None:
    """The ``llvm.loop`` metadata asking for an unroll count and a vector width (0: none),
    with ``masked`` for a last partial vector run under a mask (tail folding) rather than a
    scalar loop.

    A loop's metadata node must be distinct from every other loop's, which LLVM arranges by
    making it refer to itself; the vectoriser still checks that vectorising is legal.
    """
    if not unroll and not vectorize:
        return None
    i32 = ir.IntType(32)
    options = []
    if unroll:
        options.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.count"),
                                            ir.Constant(i32, unroll)]))
    if vectorize:
        options.append(module.add_metadata([
            ir.MetaDataString(module, "llvm.loop.vectorize.width"), ir.Constant(i32, vectorize)]))
        # One lane is a request not to vectorize: "enable" with it made LLVM try interleaving
        # alone and print "loop not interleaved" on the user's stderr where it could not.
        options.append(module.add_metadata([
            ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
            ir.Constant(ir.IntType(1), int(vectorize > 1))]))
        if masked:
            options.append(module.add_metadata([
                ir.MetaDataString(module, "llvm.loop.vectorize.predicate.enable"),
                ir.Constant(ir.IntType(1), 1)]))
    node = module.add_metadata(options)
    node.operands = (node, *options)
    return node


@contextmanager
def while_loop(builder: ir.IRBuilder, cond: Callable[[], ir.Value], name: str) -> Iterator[None]:
    """Emit ``while (cond()) <body of the with>``; ``cond`` may open blocks of its own."""
    head = builder.append_basic_block(f"{name}.cond")
    body = builder.append_basic_block(f"{name}.body")
    end = builder.append_basic_block(f"{name}.end")
    builder.branch(head)
    builder.position_at_end(head)
    builder.cbranch(cond(), body, end)
    builder.position_at_end(body)
    yield
    _continue_to(builder, head)
    builder.position_at_end(end)


# Branch weights (taken, not taken) for a path that almost never runs: a buffer that must grow,
# an allocation that failed. Without them LLVM prices a realloc call inside an append loop as
# if it ran every iteration and keeps the loop's pointers on the stack around it (a sparse add
# ran 1.5x slower than the same kernel compiled by gcc).
COLD_WEIGHTS = (1, 1 << 20)


@contextmanager
def if_then(builder: ir.IRBuilder, cond: ir.Value, name: str = "if",
            unlikely: bool = False) -> Iterator[None]:
    """Emit ``if (cond) <body of the with>``; ``unlikely`` marks the body as cold."""
    then = builder.append_basic_block(f"{name}.then")
    end = builder.append_basic_block(f"{name}.end")
    branch = builder.cbranch(cond, then, end)
    if unlikely:
        branch.set_weights(COLD_WEIGHTS)
    builder.position_at_end(then)
    yield
    _continue_to(builder, end)
    builder.position_at_end(end)


@contextmanager
def if_else(
    builder: ir.IRBuilder, cond: ir.Value, name: str = "if"
) -> Iterator[tuple[Callable[[], object], Callable[[], object]]]:
    """Emit ``if (cond) A else B``: the ``with`` yields two context-manager factories.

    >>> # with if_else(b, c) as (then, otherwise):
    >>> #     with then(): ...
    >>> #     with otherwise(): ...
    """
    then_block = builder.append_basic_block(f"{name}.then")
    else_block = builder.append_basic_block(f"{name}.else")
    end = builder.append_basic_block(f"{name}.end")
    builder.cbranch(cond, then_block, else_block)

    @contextmanager
    def arm(block: ir.Block) -> Iterator[None]:
        builder.position_at_end(block)
        yield
        _continue_to(builder, end)

    yield (lambda: arm(then_block)), (lambda: arm(else_block))
    builder.position_at_end(end)


def branch_value(
    builder: ir.IRBuilder,
    cond: ir.Value,
    if_true: Callable[[], ir.Value],
    if_false: Callable[[], ir.Value],
    name: str,
) -> ir.Value:
    """``cond ? if_true() : if_false()`` evaluating only the chosen side (a phi of two arms)."""
    true_block = builder.append_basic_block(f"{name}.true")
    false_block = builder.append_basic_block(f"{name}.false")
    end = builder.append_basic_block(f"{name}.end")
    builder.cbranch(cond, true_block, false_block)
    builder.position_at_end(true_block)
    true_value = if_true()
    true_exit = builder.block
    builder.branch(end)
    builder.position_at_end(false_block)
    false_value = if_false()
    false_exit = builder.block
    builder.branch(end)
    builder.position_at_end(end)
    phi = builder.phi(true_value.type, name=name)
    phi.add_incoming(true_value, true_exit)
    phi.add_incoming(false_value, false_exit)
    return phi
