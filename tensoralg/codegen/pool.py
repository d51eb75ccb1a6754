"""A native fork-join pool for compiled call sequences (``codegen/sequence.py``): LLVM IR.

A thread range handed to a Python thread pool costs 30-50 µs of hand-over (a futex wake, the
GIL, a future), which is as long as a whole dense layer at batch 256 on two cores. Here the
hand-over stays in machine code: workers are threads parked in :data:`WORKER`, which spin
on a generation counter for a while after each task (1 ms by default, so that the next call
of a run, or the next run of a serving loop, finds them awake) and then sleep on it with
``futex``. A sequence publishes a task (a function
``int32 task(env, part)`` and a part count) with :data:`RUN`, which also takes parts itself
and returns when every part is done.

Parts are claimed with a compare-and-swap on one 64-bit word, ``generation << 32 | next part``.
A worker claims only while that word still names the task it read, so a late worker can never
take a part of the next task; and since the caller claims parts too, a call finishes even if
no worker ever wakes (a forked child has none, a resized pool may have none). A second caller
that finds the pool busy (another Python thread running another model) runs its parts alone.

The control block is :data:`WORDS` int64 words; hot words sit on cache lines of their own.
Linux only (``futex``): x86-64 and AArch64 have their own system call numbers.
"""
from __future__ import annotations

from typing import Any

RUN, WORKER, STOP = "tensoralg_pool_run", "tensoralg_pool_worker", "tensoralg_pool_stop"
TICKS = "tensoralg_pool_ticks"

# Word offsets into the control block (int64 words; 8 words = one 64-byte cache line).
CLAIM = 0          # generation << 32 | next unclaimed part
DONE = 8           # parts finished in the current task
WAKE = 16          # 32-bit futex word: bumped once per task (and by STOP)
SLEEPERS = 24      # workers asleep (or about to be) on WAKE
STATUS, BUSY, HALT, TASK, ENV, PARTS, SPIN = 32, 33, 34, 35, 36, 37, 38
WORDS = 40

_FUTEX = {"x86_64": 202, "aarch64": 98}
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129


def pool_module(machine: str) -> Any:
    """The llvmlite module exporting :data:`RUN`, :data:`WORKER`, :data:`STOP` and
    :data:`TICKS` (the cycle counter the spin is timed by) for a Linux host whose
    ``platform.machine()`` is ``machine``. A worker spins ``ctrl[SPIN]`` ticks after its last
    task before it sleeps.

    >>> "cmpxchg" in str(pool_module("x86_64"))
    True
    """
    from llvmlite import ir

    from tensoralg.codegen.llvm_helpers import declare

    I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
    POINTER = ir.PointerType()
    WORDS_POINTER = I64.as_pointer()
    TASK_TYPE = ir.FunctionType(I32, (POINTER, I64))
    module = ir.Module(name="pool")
    # libc's variadic syscall(2): futex has no libc wrapper.
    syscall = ir.Function(module, ir.FunctionType(I64, (I64,), var_arg=True), name="syscall")
    ticks = declare(module, "llvm.readcyclecounter", I64, ())
    pause = (declare(module, "llvm.x86.sse2.pause", ir.VoidType(), ())
             if machine == "x86_64" else None)
    futex = ir.Constant(I64, _FUTEX[machine])

    def i64(value: int) -> Any:
        return ir.Constant(I64, value)

    class Block:
        """The words of one control block, read and written with sequentially consistent
        atomics (a handful per task: their cost is nothing next to a kernel's)."""

        def __init__(self, builder: ir.IRBuilder, ctrl: Any) -> None:
            self.b, self.ctrl = builder, ctrl

        def at(self, word: int) -> Any:
            return self.b.gep(self.ctrl, [i64(word)], inbounds=True)

        def at32(self, word: int) -> Any:
            return self.b.bitcast(self.at(word), I32.as_pointer())

        def load(self, word: int, typ: Any = I64) -> Any:
            where = self.at(word) if typ is I64 else self.at32(word)
            return self.b.load_atomic(where, "seq_cst", typ.width // 8)

        def store(self, word: int, value: Any) -> None:
            self.b.store_atomic(value, self.at(word), "seq_cst", 8)

        def add(self, word: int, value: Any) -> Any:
            return self.b.atomic_rmw("add", self.at(word), value, "seq_cst")

        def relax(self) -> None:
            if pause is not None:
                self.b.call(pause, [])

        def run_part(self, task: Any, env: Any, part: Any) -> None:
            """Run one part, fold its status into STATUS, count it done."""
            status = self.b.call(task, [env, part])
            self.b.atomic_rmw("umax", self.at(STATUS), self.b.zext(status, I64), "seq_cst")
            self.add(DONE, i64(1))

    # int32 run(ctrl, task, env, parts): 0, or the largest status a part returned
    TASK_POINTER = TASK_TYPE.as_pointer()
    run = ir.Function(module, ir.FunctionType(I32, (WORDS_POINTER, TASK_POINTER, POINTER, I64)),
                      name=RUN)
    ctrl, task, env, parts = run.args
    b = ir.IRBuilder(run.append_basic_block("entry"))
    cb = Block(b, ctrl)
    part = b.alloca(I64, name="part")
    worst = b.alloca(I32, name="worst")
    alone, publish = run.append_basic_block("alone"), run.append_basic_block("publish")
    took = b.extract_value(b.cmpxchg(cb.at(BUSY), i64(0), i64(1), "seq_cst", "seq_cst"), 1)
    b.cbranch(took, publish, alone)

    b.position_at_end(alone)            # the pool is another caller's: every part here
    b.store(i64(0), part)
    b.store(ir.Constant(I32, 0), worst)
    head, body, end = (run.append_basic_block(n) for n in ("alone.cond", "alone.body", "alone.end"))
    b.branch(head)
    b.position_at_end(head)
    current = b.load(part, typ=I64)
    b.cbranch(b.icmp_signed("<", current, parts), body, end)
    b.position_at_end(body)
    status = b.call(task, [env, current])
    seen = b.load(worst, typ=I32)
    b.store(b.select(b.icmp_unsigned(">", status, seen), status, seen), worst)
    b.store(b.add(current, i64(1)), part)
    b.branch(head)
    b.position_at_end(end)
    b.ret(b.load(worst, typ=I32))

    b.position_at_end(publish)
    cb.store(TASK, b.ptrtoint(task, I64))
    cb.store(ENV, b.ptrtoint(env, I64))
    cb.store(PARTS, parts)
    cb.store(STATUS, i64(0))
    cb.store(DONE, i64(0))
    generation = b.add(b.lshr(cb.load(CLAIM), i64(32)), i64(1))
    cb.store(CLAIM, b.shl(generation, i64(32)))
    b.atomic_rmw("add", cb.at32(WAKE), ir.Constant(I32, 1), "seq_cst")
    wake, claim = run.append_basic_block("wake"), run.append_basic_block("claim")
    b.cbranch(b.icmp_signed("!=", cb.load(SLEEPERS), i64(0)), wake, claim)
    b.position_at_end(wake)
    b.call(syscall, [futex, b.ptrtoint(cb.at(WAKE), I64), i64(_FUTEX_WAKE_PRIVATE),
                     i64(0x7FFFFFFF)])
    b.branch(claim)
    b.position_at_end(claim)            # the caller takes parts like any worker
    mine = b.and_(cb.add(CLAIM, i64(1)), i64(0xFFFFFFFF))
    work, wait = run.append_basic_block("work"), run.append_basic_block("wait")
    b.cbranch(b.icmp_signed("<", mine, parts), work, wait)
    b.position_at_end(work)
    cb.run_part(task, env, mine)
    b.branch(claim)
    b.position_at_end(wait)             # parts taken by workers may still be running
    spin, finished = run.append_basic_block("wait.spin"), run.append_basic_block("finished")
    b.cbranch(b.icmp_signed("<", cb.load(DONE), parts), spin, finished)
    b.position_at_end(spin)
    cb.relax()
    b.branch(wait)
    b.position_at_end(finished)
    result = b.trunc(cb.load(STATUS), I32)
    cb.store(BUSY, i64(0))
    b.ret(result)

    # int32 worker(ctrl): claims parts of every task published until STOP; returns 0
    worker = ir.Function(module, ir.FunctionType(I32, (WORDS_POINTER,)), name=WORKER)
    (ctrl,) = worker.args
    b = ir.IRBuilder(worker.append_basic_block("entry"))
    cb = Block(b, ctrl)
    last = b.alloca(I32, name="last")           # the WAKE value of the last task looked at
    since = b.alloca(I64, name="since")
    b.store(cb.load(WAKE, I32), last)
    names = ("idle", "spin", "relax", "sleep", "doze", "awake", "look", "take", "exit")
    idle, spin, relax, sleep, doze, awake, look, take, leave = (
        worker.append_basic_block(n) for n in names)
    # A stop that came before this thread read WAKE is seen here; one after it bumps WAKE.
    b.cbranch(b.icmp_signed("!=", cb.load(HALT), i64(0)), leave, idle)

    b.position_at_end(idle)
    b.store(b.call(ticks, []), since)
    b.branch(spin)
    b.position_at_end(spin)
    b.cbranch(b.icmp_unsigned("!=", cb.load(WAKE, I32), b.load(last, typ=I32)), awake, relax)
    b.position_at_end(relax)
    cb.relax()
    waited = b.sub(b.call(ticks, []), b.load(since, typ=I64))
    b.cbranch(b.icmp_unsigned(">", waited, cb.load(SPIN)), sleep, spin)
    b.position_at_end(sleep)
    # Counted as a sleeper before looking at WAKE once more: a caller bumps WAKE before it
    # reads SLEEPERS, so either it sees this sleeper and wakes it, or the look below sees
    # the new task (and futex itself refuses to sleep if WAKE moved in between).
    cb.add(SLEEPERS, i64(1))
    expected = b.load(last, typ=I32)
    b.cbranch(b.icmp_unsigned("==", cb.load(WAKE, I32), expected), doze, awake)
    b.position_at_end(doze)
    b.call(syscall, [futex, b.ptrtoint(cb.at(WAKE), I64), i64(_FUTEX_WAIT_PRIVATE),
                     b.zext(expected, I64), i64(0)])
    cb.add(SLEEPERS, i64(-1))
    b.branch(idle)

    b.position_at_end(awake)
    # From ``sleep`` the sleeper count is still raised: it is lowered here instead.
    from_sleep = b.phi(I1, name="from_sleep")
    from_sleep.add_incoming(ir.Constant(I1, 0), spin)
    from_sleep.add_incoming(ir.Constant(I1, 1), sleep)
    with_sleepers = worker.append_basic_block("awake.unsleep")
    check_halt = worker.append_basic_block("awake.halt")
    b.cbranch(from_sleep, with_sleepers, check_halt)
    b.position_at_end(with_sleepers)
    cb.add(SLEEPERS, i64(-1))
    b.branch(check_halt)
    b.position_at_end(check_halt)
    b.store(cb.load(WAKE, I32), last)
    b.cbranch(b.icmp_signed("!=", cb.load(HALT), i64(0)), leave, look)

    b.position_at_end(look)
    word = cb.load(CLAIM)
    part = b.and_(word, i64(0xFFFFFFFF))
    b.cbranch(b.icmp_signed("<", part, cb.load(PARTS)), take, idle)
    b.position_at_end(take)
    task = b.inttoptr(cb.load(TASK), TASK_POINTER)
    env = b.inttoptr(cb.load(ENV), POINTER)
    # The fields read above belong to the task ``word`` names if the swap succeeds: a caller
    # rewrites them only after every part of that task is claimed, and then ``word`` is gone.
    claimed = b.extract_value(
        b.cmpxchg(cb.at(CLAIM), word, b.add(word, i64(1)), "seq_cst", "seq_cst"), 1)
    run_it = worker.append_basic_block("take.run")
    b.cbranch(claimed, run_it, look)
    b.position_at_end(run_it)
    cb.run_part(task, env, part)
    b.branch(look)

    b.position_at_end(leave)
    b.ret(ir.Constant(I32, 0))

    # void stop(ctrl): every worker returns from WORKER once it sees HALT
    stop = ir.Function(module, ir.FunctionType(ir.VoidType(), (WORDS_POINTER,)), name=STOP)
    (ctrl,) = stop.args
    b = ir.IRBuilder(stop.append_basic_block("entry"))
    cb = Block(b, ctrl)
    cb.store(HALT, i64(1))
    b.atomic_rmw("add", cb.at32(WAKE), ir.Constant(I32, 1), "seq_cst")
    b.call(syscall, [futex, b.ptrtoint(cb.at(WAKE), I64), i64(_FUTEX_WAKE_PRIVATE),
                     i64(0x7FFFFFFF)])
    b.ret_void()

    counter = ir.Function(module, ir.FunctionType(I64, ()), name=TICKS)
    b = ir.IRBuilder(counter.append_basic_block("entry"))
    b.ret(b.call(ticks, []))
    return module


__all__ = ["RUN", "WORKER", "STOP", "TICKS", "WORDS", "pool_module"]
