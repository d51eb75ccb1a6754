"""Quick first builds: a new kernel runs at once from code LLVM emitted without optimising it,
while its optimised build is made on a background thread and then takes its place.

Why: LLVM's O3 pipeline and instruction selection cost 15-110 ms per kernel on this project's
2-core Xeon (SpMM 67 + 40 ms, a CSR add 31 + 22, the dense loop nest of a 64^3 product
60 + 52), while the same IR emitted unoptimised with FastISel costs 3 ms (an ad hoc timing of
the first-call kernels of ``benchmarks/overhead.py``, 2026-12-06, not kept). A user who types
a new ``ta.einsum`` waits for the optimiser before the first result, however small the call;
with a quick build the first call of a new kernel costs lowering plus ~3 ms, and the optimised
code is in place ~0.1 s later.

How. The quick object holds the kernel unoptimised and exports ``<name>.quick``, which calls
whatever ``<name>.target`` points at (first that unoptimised kernel), and its packed entry
(``codegen/packed.py``). When the optimised build is loaded, its ``<name>`` address is stored
into ``<name>.target``: one aligned 8-byte store, so a call running meanwhile finishes in the
old code and the next one enters the new. Whatever kept the quick addresses (thread ranges on
the native pool, einsum's replays, bound calls) runs the optimised code from then on without
being told. The optimised build goes into the disk cache as a synchronous build would; a new
process that finds it there loads it and builds nothing.

Policy (``api.py``): a call whose work bounds say it is large waits for the optimised build
rather than run slow code (:data:`QUICK_WORK`); einsum records its fast replay of a call only
once the optimised code is in place, and binding a call, printing the LLVM source, autotuning
and the ONNX importer wait for it (:func:`optimised_only`). At exit the process waits for the
builds still running, so that the disk cache gets them; a fork waits for the build in progress
(no LLVM call is then half done in the child) and the child makes the rest itself.
``TENSORALG_QUICK_BUILDS=0`` turns quick builds off: every kernel is optimised before it runs.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import ctypes
import os
import threading
import warnings
from collections import deque
from typing import Callable, Iterator, Sequence

from tensoralg.ir.nodes import Param

QUICK = ".quick"          # the quick object's entry: ``<name>.quick``
TARGET = ".target"        # the pointer it calls through: ``<name>.target``
# Iterations (``api.iteration_bound``) above which a call waits for the optimised build rather
# than run the quick code, which costs ~2-3 ns an iteration: 1.7-11x the optimised code's time
# (SpGEMM 1.7x, a CSR add 3.2x, SpMV 4x, SDDMM of rank 16 5.6x, SpMM with 16 columns 11x;
# 2e4^2 CSR with 4e5 entries, one thread, an ad hoc timing, 2026-12-06, not kept). At this
# bound the quick code runs ~6 ms at most, well under what the optimised build still takes.
QUICK_WORK = 1 << 21

_allowed: contextvars.ContextVar[bool] = contextvars.ContextVar("quick_builds", default=True)


def quick_builds_allowed() -> bool:
    """Whether a kernel built now may start from a quick build (not inside
    :func:`optimised_only`)."""
    return _allowed.get()


@contextlib.contextmanager
def optimised_only() -> Iterator[None]:
    """Build every kernel made inside the block optimised before it runs: for callers that
    time kernels or build many at once (autotuning, the ONNX importer).

    >>> with optimised_only():
    ...     quick_builds_allowed()
    False
    """
    token = _allowed.set(False)
    try:
        yield
    finally:
        _allowed.reset(token)


def quick_name(name: str) -> str:
    """The quick object's entry for kernel ``name``.

    >>> quick_name("spmv")
    'spmv.quick'
    """
    return name + QUICK


def quick_object(text: str, name: str, params: Sequence[Param], machine: object) -> bytes:
    """Object code of the kernel module ``text`` (``codegen.llvm.kernel_text``) as it is, with
    the entry ``<name>.quick`` that calls through ``<name>.target`` and its packed entry,
    emitted by ``machine`` (``codegen.llvm.target_machine(opt=0)``)."""
    import llvmlite.binding as llvm

    module = llvm.parse_assembly(text)
    module.link_in(llvm.parse_assembly(_trampoline(name, params, machine)))
    return machine.emit_object(module)  # type: ignore[attr-defined]


def _trampoline(name: str, params: Sequence[Param], machine: object) -> str:
    from llvmlite import ir

    from tensoralg.codegen.llvm import value_type
    from tensoralg.codegen.packed import add_llvm_entry

    module = ir.Module(name=quick_name(name))
    module.triple, module.data_layout = machine.triple, str(machine.target_data)  # type: ignore
    signature = ir.FunctionType(ir.IntType(32), [value_type(p.var.dtype) for p in params])
    kernel = ir.Function(module, signature, name=name)          # defined in the kernel's text
    target = ir.GlobalVariable(module, signature.as_pointer(), name=name + TARGET)
    target.initializer = kernel
    target.align = 8
    entry = ir.Function(module, signature, name=quick_name(name))
    builder = ir.IRBuilder(entry.append_basic_block("entry"))
    callee = builder.load_atomic(target, "monotonic", 8)
    builder.ret(builder.call(callee, entry.args, tail=True))
    add_llvm_entry(module, quick_name(name), params)
    return str(module)


class OptimisedBuild:
    """The optimised build of one quick kernel, made on the background thread by ``job``;
    when it is loaded, its entry's address goes into the quick object's pointer at
    ``target`` (in the quick object that ``quick`` keeps alive). ``kernel`` is the optimised
    kernel once :attr:`pending` is False (None if the build failed: the quick code then
    stays, with a warning)."""

    def __init__(self, name: str, job: Callable[[], object], target: int,
                 quick: tuple[object, ...]) -> None:
        self.name, self.target = name, target
        self.kernel: object | None = None
        self._job: Callable[[], object] | None = job
        # What keeps the quick object (and ``target``) alive until the build is done, even
        # when every holder of the quick kernel let it go meanwhile.
        self._quick: tuple[object, ...] | None = quick
        self._done = threading.Event()

    @property
    def pending(self) -> bool:
        return not self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the optimised build (``timeout`` seconds at most); whether it is done."""
        if self.pending:
            _start_worker()
        return self._done.wait(timeout)

    def _run(self) -> None:
        job, self._job = self._job, None
        try:
            kernel = job() if job is not None else None
            address = ctypes.cast(getattr(kernel, "function"), ctypes.c_void_p).value
            ctypes.c_void_p.from_address(self.target).value = address
            self.kernel = kernel
        except Exception as error:        # the quick code keeps running: right, only slower
            warnings.warn(f"the optimised build of kernel {self.name!r} failed ({error}); it "
                          f"keeps running unoptimised", RuntimeWarning, stacklevel=2)
        finally:
            self._quick = None
            self._done.set()


# The builds not yet done, in order; a build leaves the queue once it is done, so a fork (which
# waits for the one running) leaves the child every build it still has to make.
_queue: deque[OptimisedBuild] = deque()
_lock = threading.Lock()      # guards _queue and _worker
_busy = threading.Lock()      # held while a build runs
_worker: threading.Thread | None = None


def submit(build: OptimisedBuild) -> None:
    """Queue ``build`` for the background thread."""
    with _lock:
        _queue.append(build)
    _start_worker()


def _start_worker() -> None:
    global _worker
    with _lock:
        if _worker is not None or not _queue:
            return
        _worker = threading.Thread(target=_drain, name="tensoralg-optimise", daemon=True)
        _worker.start()


def _drain() -> None:
    """Run the queued builds in order; the thread ends when the queue is empty."""
    global _worker
    while True:
        with _busy:
            with _lock:
                if not _queue:
                    _worker = None
                    return
                build = _queue[0]
            build._run()
            with _lock:
                _queue.popleft()


def finish(timeout: float | None = None) -> bool:
    """Wait until every quick kernel of this process runs its optimised code (``timeout``
    seconds at most); whether they all do.

    >>> finish(timeout=60)
    True
    """
    with _lock:
        builds = list(_queue)
    if builds:
        _start_worker()
    for build in builds:
        if not build._done.wait(timeout):
            return False
    return True


def _before_fork() -> None:
    _busy.acquire()
    _lock.acquire()


def _after_fork_in_parent() -> None:
    _lock.release()
    _busy.release()


def _after_fork_in_child() -> None:
    # The parent's worker does not exist here; the builds still queued are made by a worker
    # of this process, started by the next submit or wait.
    global _lock, _busy, _worker
    _lock, _busy, _worker = threading.Lock(), threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
atexit.register(finish)


__all__ = ["QUICK_WORK", "OptimisedBuild", "finish", "optimised_only",
           "quick_builds_allowed", "quick_name", "quick_object", "submit"]
