"""The public entry points: ``einsum`` and ``compile``.

``parse → bind → key → cache → concretize → lower → optimize → emit → build → run → wrap``;
each arrow is a function of another room. Only this module (and ``formats/convert.py``) knows
scipy and pydata objects; below it everything is a ``Tensor`` of flat arrays.

It is longer than a module should be (~1450 lines): the kernel cache, ``einsum``'s replayed
calls, the ``Kernel`` class, the launch on threads and the ONNX importer's layer constructors all
live here around the one process-wide ``KernelCache``. Splitting it along those lines (a
``dispatch`` module for replays and launches, a ``kernel`` module for ``Kernel``) is due.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import gc
import logging
import math
import operator
import os
import threading
import warnings
from copy import copy as shallow_copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from tensoralg import _version
from tensoralg.codegen import (
    CompiledKernel,
    DiskCache,
    build,
    default_cache_dir,
    emit_source,
    ir_digest,
)
from tensoralg.codegen.build import host_has_feature
from tensoralg.codegen.epilogue import (  # noqa: F401  (the program API's fused activations)
    GELU,
    HARD_SWISH,
    RELU,
    SIGMOID,
    SILU,
    Activation,
    as_activation,
    erf_text,
)
from tensoralg.codegen.target import register_tile_rows
from tensoralg.codegen.tiered import QUICK_WORK, optimised_only, quick_builds_allowed
from tensoralg.contract_path import plan_contraction, presum_steps, run_steps, step_list
from tensoralg.errors import (
    ArgumentTypeError,
    CastingError,
    CompileError,
    InputError,
    KernelRuntimeError,
    NotationError,
    ShapeError,
    TensorAlgebraError,
    UnsupportedError,
)
from tensoralg.formats import (
    CSC,
    CSR,
    Format,
    LevelArrays,
    LevelKind,
    Tensor,
    bind,
    dense,
    input_family,
    resolve_format,
)
from tensoralg.formats.pack import summed_duplicates
from tensoralg.formats.tensor import VALUE_DTYPES
from tensoralg.ir.nodes import Function
from tensoralg.ir.passes.pipeline import IRLog, optimize
from tensoralg.ir.passes.tile import TILE_BYTES
from tensoralg.ir.printer import format_function
from tensoralg.lower.assemble import stores_within_operands
from tensoralg.lower.concretize import concretize, kept_layouts, layout_free
from tensoralg.lower.counted import count_rows, counted_factors, counted_summands
from tensoralg.lower.gemm_form import (
    GEMM_MIN_FMAS,
    ContractionForm,
    GemmForm,
    contraction_form,
    gemm_form,
    gemm_refusal,
    gemm_route,
    large_product,
    route_note,
    stack_note,
    stack_pays,
)
from tensoralg.lower.lowerer import lower
from tensoralg.lower.pattern import assigns_every_position, pattern_levels, share_pattern
from tensoralg.lower.program import OutputMode, Program, TensorRole
from tensoralg.lower.scheduling import (
    ROW_LANES,
    LoopPlan,
    RowWork,
    loop_plan,
    pass_options_of,
    row_choice,
    row_work,
)
from tensoralg.lower.scheduling import applied_schedule as schedule_applied
from tensoralg.lower.unordered import any_order
from tensoralg.notation import (
    Assignment,
    Call,
    Div,
    Literal,
    canonical_text,
    infer_dims,
    output_shape,
    parse_einsum,
    parse_statement,
)
from tensoralg.notation.ast import Access, Expr, Mul, Reduce, accesses
from tensoralg.notation.ast import tensors as tensor_ranks
from tensoralg.notation.broadcast import broadcast
from tensoralg.notation.canonical import index_order
from tensoralg.notation.grouping import group_indices
from tensoralg.notation.interleaved import from_interleaved
from tensoralg.notation.reductions import children
from tensoralg.runtime.args import (
    CAPACITY,
    CRD,
    OUT_DENSE,
    OUT_HANDLE,
    OUT_SIZES,
    POS,
    RANGE,
    SIZE,
    VALS,
    ArgumentPlan,
    OutputBuffers,
    data_address,
)
from tensoralg.runtime.blas import blas_contraction, blas_product, blas_supports
from tensoralg.runtime.bound import BoundCall, dense_output, overwrites_output
from tensoralg.runtime.canonical import CoordinateSorter
from tensoralg.runtime.canonical import converted as sorted_conversion
from tensoralg.runtime.compress import RowCompressor
from tensoralg.runtime.conv import DirectConv
from tensoralg.runtime.count import RANGE_SLOTS as COUNTER_RANGE_SLOTS
from tensoralg.runtime.count import RowCounter
from tensoralg.runtime.gemm import (
    BoundChannelsLast,
    ConvLayer,
    DenseLayer,
    GroupedConv,
    dense_product,
)
from tensoralg.runtime.gram import gram_call
from tensoralg.runtime.interpolate import MOST_TAPS as INTERPOLATION_TAPS
from tensoralg.runtime.memory import check_dense, memory_limit, set_limit
from tensoralg.runtime.movement import (
    bag_keep_call,  # noqa: F401  (the program API's, through tensoralg.program)
    bag_max_call,  # noqa: F401
    block_copy_call,
    broadcast_call,
    copy_call,
    cumsum_call,
    extreme_call,
    gather_call,
    ids_call,
    im2row_call,
    quantize_parameters_call,  # noqa: F401  (the program API's, through tensoralg.program)
    value_range,  # noqa: F401
)
from tensoralg.runtime.native_split import NativeSplit
from tensoralg.runtime.nonzeros import NonzeroLister
from tensoralg.runtime.planar import (
    compiled_conv_gathers,
    patch_conv_of,
    planar_pays,
    pointwise_conv,
)
from tensoralg.runtime.pool import native_pool_supported
from tensoralg.runtime.qgemm import (
    Int8Epilogue,
    QuantizedConv,
    QuantizedLayer,
    int8_gemm_supported,
)
from tensoralg.runtime.reach import ReachCounter
from tensoralg.runtime.replay import (
    ARG_BEGIN,
    ARG_CAPACITY,
    ARG_DATA,
    ARG_DENSE,
    ARG_ENTRIES_COUNT,
    ARG_ENTRIES_CRD,
    ARG_ENTRIES_POS,
    ARG_INDICES,
    ARG_INDPTR,
    ARG_OUT,
    ARG_OUT_HANDLE,
    ARG_OUT_SIZES,
    ARG_SIZE,
    COMPRESSED,
    DENSE,
    ENTRIES,
    PatternOutput,
    SparseOutput,
    numpy_relayout,
    replay_function,
    replayable,
)
from tensoralg.runtime.roi import RegionPooler, RoiSamples
from tensoralg.runtime.rows import MASKED, UNROLL, row_kernel_kind
from tensoralg.runtime.scatter import RowScatterer
from tensoralg.runtime.select import VALUE_TYPES, RowSelector
from tensoralg.runtime.sequence import CallSequence, NativeGroup, Slot
from tensoralg.runtime.stitch import join_rows, run_ranges, varying_slots
from tensoralg.runtime.suppress import BoxSuppressor
from tensoralg.runtime.threads import (
    GATHER_UNITS,
    NATIVE_RANGES_PER_THREAD,
    KernelThreads,
    entry_bounds,
    first_capacity,
    first_guess,
    min_rows_per_thread,
    product_work,
    row_weights,
    split,
)
from tensoralg.runtime.validate import VALID, StorageValidator
from tensoralg.runtime.widen import narrowed, widened
from tensoralg.runtime.winograd import WinogradConv, winograd_pays, winograd_tile
from tensoralg.runtime.wrap import (
    narrowed_indices,
    pattern_positions,
    pattern_result,
    release,
    sparse_result,
)
from tensoralg.schedule import (
    Gemm,
    GemmRoute,
    Parallelize,
    Precompute,
    Relayout,
    Reorder,
    Schedule,
    as_schedule,
)
from tensoralg.schedule import check as check_schedule
from tensoralg.schedule.store import TunedSchedules, shape_class, tuning_key

BACKENDS = ("llvm", "c", "cuda")
_FLOAT_FUNCTIONS = {"sqrt", "exp", "log", "sin", "cos", "tanh", "sigmoid", "pow"}


# ---------------------------------------------------------------------------------------------
# Options and the kernel cache


@dataclass(frozen=True, slots=True)
class CompileOptions:
    """Options read once, at the API edge, from the environment."""

    cache_dir: Path | None
    debug: bool = False
    check_ir: bool = False
    threads: int | None = None
    # A new kernel first runs unoptimised while LLVM optimises it (codegen/tiered.py).
    quick_builds: bool = True

    @staticmethod
    def from_environment(environ: Mapping[str, str] = os.environ) -> "CompileOptions":
        disk = environ.get("TENSORALG_DISK_CACHE", "1") not in ("0", "false", "no")
        debug = environ.get("TA_DEBUG", "") not in ("", "0")
        threads = environ.get("TENSORALG_NUM_THREADS", "")
        quick = environ.get("TENSORALG_QUICK_BUILDS", "1") not in ("0", "false", "no")
        return CompileOptions(default_cache_dir(environ) if disk else None, debug,
                              check_ir=debug or environ.get("TA_CHECK_IR", "") not in ("", "0"),
                              threads=int(threads) if threads.strip().isdigit() else None,
                              quick_builds=quick)


@dataclass(frozen=True, slots=True)
class KernelKey:
    """Everything that changes the generated code."""

    statement: str
    formats: tuple[tuple[str, Format], ...]
    index_dtypes: tuple[np.dtype, ...]
    value_dtype: np.dtype
    out_format: Format | None
    out_index_dtype: np.dtype
    schedule: str | None
    backend: str
    version: str = _version.__version__
    # Operands whose storage order the compiler may choose (``lower.concretize.layout_free``):
    # Format equality ignores names, so a written "dd" and the default dense differ only here.
    free_layouts: tuple[str, ...] = ()
    # The variant of a sparse product that fills rows the runtime counted first
    # (lower/counted.py), built for calls split over threads.
    counted: bool = False
    # The variant that reads the dense operands lowering would copy in another mode order in
    # their own layout instead (lower/concretize.kept_layouts), for calls where the copy
    # costs more than it saves (copies_pay).
    kept_layouts: bool = False
    # The variant of a CSR row loop (scheduling.row_choice) with its tail masked ("masked") or
    # unrolled ("unrolled"), for matrices whose rows take it (runtime/rows.py); "": neither.
    row_loop: str = ""

    def __post_init__(self) -> None:
        if not self.free_layouts:
            object.__setattr__(self, "free_layouts", tuple(
                name for name, fmt in self.formats if layout_free(fmt)))

    def digest(self) -> str:
        """A name for the on-disk cache: this key plus the compiler's source fingerprint."""
        import hashlib

        text = repr(self) + _version.source_fingerprint()
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True, eq=False)
class CompiledProgram:
    """One compiled kernel with the program and IR it came from."""

    key: KernelKey
    program: Program
    function: Function
    kernel: CompiledKernel
    log: IRLog | None
    arguments: ArgumentPlan
    sizes: tuple[tuple[str, int, str], ...]   # (input tensor, mode, index): where sizes come from
    balance_by: RowWork | None                # what a row of a split outer loop costs
    overwrites: bool                          # every output element assigned: skip zeroing
    plan: LoopPlan = LoopPlan()               # what the schedule asked of the loops
    schedule: Schedule | None = None          # the schedule given (None: the compiler's own)
    entries_by: RowWork | None = None         # bounds a sparse output's rows (entry_bounds)
    # A sparse product whose rows can be counted first (lower/counted.py): its CSR factors,
    # for the variant that split calls run (KernelCache.counted)
    counted_by: tuple[str, str] | None = None
    # The index names ``program`` was written with, in canonical order (index_order): a
    # kernel of a statement that names them otherwise shares this program and renames them.
    names: tuple[str, ...] = ()
    # (matrix, index): the loop over ``index`` runs the rows of the CSR ``matrix`` with the
    # adaptive tail; calls whose matrix's rows take one run ``KernelCache.row_variant``'s
    rows: tuple[str, str] | None = None
    # Variants built for it, by kind (``KernelCache.row_variant``'s): found without a key
    variants: dict[str, "CompiledProgram"] = field(default_factory=dict, repr=False)
    # Variant kinds a call asked for once: the next call that asks builds it (_row_kernel)
    asked: set[str] = field(default_factory=set, repr=False)


def _concretized(stmt: Assignment, formats: dict[str, Format],
                 index_dtypes: dict[str, np.dtype], out_format: Format | None,
                 key: KernelKey, plan: LoopPlan) -> Program:
    """The concrete program of ``stmt`` for the kernel ``key`` under ``plan``."""
    program = concretize(stmt, formats, index_dtypes, key.value_dtype, out_format,
                         key.out_index_dtype, plan.orders, plan.precomputes,
                         cpu=key.backend != "cuda", relayouts=plan.relayouts)
    if key.backend != "cuda" and plan.position_split is None and not plan.partials:
        # the GPU runtime assembles sparse outputs only by appending
        program = share_pattern(program)
    if key.backend != "cuda" and (plan.parallel is None or plan.partials) and \
            plan.position_split is None:
        program = any_order(program)
    return program


def _lowered_ir(program: Program, name: str, plan: LoopPlan, schedule: Schedule | None,
                log: IRLog, backend: str, check: bool = False) -> tuple[Function, Function]:
    """``program`` lowered to the function ``name``, and that function after the IR passes."""
    lowered = lower(program, name, plan)
    options = pass_options_of(schedule, _tile_rows(backend))
    return lowered, optimize(lowered, log, check=check, options=options)


def _tile_rows(backend: str) -> int:
    """The rows of register tiles the compiler jams by default for ``backend``: what the host's
    vector registers hold on LLVM (which learns from the jam that the rows' tiles never
    overlap); 1 on C, whose compiler is not told so and would reload the tiles from memory."""
    return _host_tile_rows() if backend == "llvm" else 1


@functools.cache
def _host_tile_rows() -> int:
    # the host's features as the kernel cache remembers them: no LLVM on a cache hit
    avx512 = host_has_feature("avx512f", kernel_cache().disk)
    return register_tile_rows(TILE_BYTES, avx512)


def _disk_cache(directory: Path | None) -> DiskCache | None:
    """The on-disk kernel cache, or None (with a warning) when the directory is unusable:
    kernels then compile in every new process, which is slower but right."""
    if directory is None:
        return None
    try:
        return DiskCache(directory)
    except CompileError as err:
        warnings.warn(f"{err}; running without the on-disk kernel cache", stacklevel=4)
        return None


class KernelCache:
    """The in-process cache of compiled kernels, backed by an on-disk cache."""

    def __init__(self, options: CompileOptions) -> None:
        self.options = options
        self.kernels: dict[KernelKey, CompiledProgram] = {}
        self.disk = _disk_cache(options.cache_dir)
        self.compiles = 0
        self.validator = StorageValidator(self.disk)
        self.reach = ReachCounter(self.disk)     # a sparse product's work per row
        self.rows = RowCounter(self.disk)        # a counted product's entries per row
        self.selections = RowSelector(self.disk)  # the best k values of rows (top_k)
        self.coordinates = CoordinateSorter(self.disk)   # COO operands, canonical
        self.nonzeros = NonzeroLister(self.disk)         # dense results as pydata COO
        self.suppressor = BoxSuppressor(self.disk)       # boxes kept by score (detection)
        self.regions = RegionPooler(self.disk)           # RoiAlign's bilinear pooling
        self.scatterer = RowScatterer(self.disk)         # rows combined by max/min at indices
        self.threads = KernelThreads(options.threads)
        self.tuned = TunedSchedules(options.cache_dir)   # autotune's winners (tune.py)
        self.splits: dict[tuple, NativeSplit] = {}       # kernels' ranges on the native pool
        self.dispatch: dict[tuple, Any] = {}          # einsum's fast path, see _Dispatch
        # subscripts, or (subscripts, backend) -> the replay einsum tries first
        self.recent: dict[str | tuple[str, str], Any] = {}
        # einsum calls with ta.Tensor operands, by _tensor_signature -> _TensorReplay
        self.tensor_calls: dict[tuple, Any] = {}
        # einsum calls with scipy COO operands, by _coo_signature -> whether their kernel
        # reads the COO operands in any order (lower/unordered.py): True; "dense" where it
        # does into a dense result, asked for since the CSR route returns one; False where
        # they are sorted into CSR. Until known, such a call takes the general path, which
        # binds them unsorted, rather than sort them into CSR.
        self.any_order: dict[tuple, bool | str] = {}
        self._lock = threading.Lock()

    def get(self, key: KernelKey, stmt: Assignment, formats: dict[str, Format],
            index_dtypes: dict[str, np.dtype], out_format: Format | None,
            schedule: Schedule | None = None) -> CompiledProgram:
        def compile_it() -> CompiledProgram:
            try:
                return self._compile(key, stmt, formats, index_dtypes, out_format, schedule)
            except RecursionError:
                text = str(stmt)
                text = text if len(text) < 120 else text[:117] + "..."
                raise NotationError(
                    f"{text} is nested too deeply for the compiler's passes (a long chain "
                    f"of + or *, or of parentheses); split it into several statements "
                    f"whose results the next one reads") from None

        return self._cached(key, compile_it)

    def _cached(self, key: KernelKey, make: Callable[[], CompiledProgram]) -> CompiledProgram:
        """The kernel under ``key``, made by ``make`` once (other threads wait for it)."""
        found = self.kernels.get(key)
        if found is not None:
            return found
        with self._lock:
            found = self.kernels.get(key)
            if found is None:
                with _collector_paused():
                    found = self.kernels[key] = make()
        return found

    def _compile(self, key: KernelKey, stmt: Assignment, formats: dict[str, Format],
                 index_dtypes: dict[str, np.dtype], out_format: Format | None,
                 schedule: Schedule | None = None) -> CompiledProgram:
        plan = loop_plan(schedule, key.backend)
        stored = self._lowered(key)
        if stored is not None:
            return self._built(key, *stored, _with_partials(stored[0], plan, schedule, key.backend),
                               schedule)
        program = _concretized(stmt, formats, index_dtypes, out_format, key, plan)
        return self._lower_and_build(key, program,
                                     _with_partials(program, plan, schedule, key.backend),
                                     schedule, index_order(stmt))

    def forget_replays(self) -> None:
        """Drop einsum's recorded calls (its dispatch tables), so that the next call of each
        looks for a tuned schedule again: ``ta.autotune`` calls this before storing a
        winner. (A ``ta.compile`` kernel compares the tuned store's generation itself.)"""
        self.dispatch.clear()
        self.recent.clear()
        self.tensor_calls.clear()
        self.any_order.clear()

    def counted(self, compiled: CompiledProgram) -> CompiledProgram:
        """The variant of ``compiled`` (a sparse product with ``counted_by``) that fills rows
        the runtime counted first, in place (``lower/counted.py``); built on first use."""
        key = dataclasses.replace(compiled.key, counted=True)

        def build_it() -> CompiledProgram:
            stored = self._lowered(key)
            if stored is not None:
                return self._built(key, *stored, compiled.plan, compiled.schedule)
            return self._lower_and_build(key, count_rows(compiled.program), compiled.plan,
                                         compiled.schedule, compiled.names)

        return self._cached(key, build_it)

    def kept(self, compiled: CompiledProgram) -> CompiledProgram:
        """The variant of ``compiled`` that reads its dense operands in their own layout
        instead of copying them in the loops' mode order (``lower/concretize.kept_layouts``);
        built on first use, for calls where ``copies_pay`` says no."""
        key = dataclasses.replace(compiled.key, kept_layouts=True)

        def build_it() -> CompiledProgram:
            stored = self._lowered(key)
            if stored is not None:
                return self._built(key, *stored, compiled.plan, compiled.schedule)
            program = kept_layouts(compiled.program, dict(compiled.key.formats))
            return self._lower_and_build(key, program, compiled.plan, compiled.schedule,
                                         compiled.names)

        return self._cached(key, build_it)

    def row_variant(self, compiled: CompiledProgram, kind: str) -> CompiledProgram:
        """The variant of ``compiled`` (with ``rows``) whose row loop runs with its tail masked
        (``kind`` "masked") or unrolled four times ("unrolled"; ``runtime/rows.py``); built on
        first use, for calls whose matrix's rows take it."""
        found = compiled.variants.get(kind)
        if found is not None:
            return found
        assert compiled.rows is not None
        index = compiled.rows[1]
        plan = dataclasses.replace(compiled.plan, adaptive=compiled.plan.adaptive - {index})
        if kind == MASKED:
            plan = dataclasses.replace(
                plan, vectorize={**plan.vectorize, index: plan.vectorize.get(index, ROW_LANES)},
                masked=plan.masked | {index})
        else:
            plan = dataclasses.replace(
                plan, unroll={**plan.unroll, index: plan.unroll.get(index) or UNROLL},
                vectorize={k: v for k, v in plan.vectorize.items() if k != index})
        key = dataclasses.replace(compiled.key, row_loop=kind)

        def build_it() -> CompiledProgram:
            stored = self._lowered(key)
            if stored is not None:
                return self._built(key, *stored, plan, compiled.schedule)
            return self._lower_and_build(key, compiled.program, plan, compiled.schedule,
                                         compiled.names)

        found = compiled.variants[kind] = self._cached(key, build_it)
        return found

    def _lower_and_build(self, key: KernelKey, program: Program, plan: LoopPlan,
                         schedule: Schedule | None, names: tuple[str, ...]) -> CompiledProgram:
        """Lower ``program``, run the IR passes, remember the result on disk and build it."""
        log = IRLog(echo=self.options.debug)
        lowered, function = _lowered_ir(program, f"ta_{key.digest()[:16]}", plan, schedule, log,
                                        key.backend, self.options.check_ir)
        # Judged before the passes that tile loops: the tiled nests store the same
        # elements the same way, but through loops the analysis does not follow.
        overwrites = assigns_every_position(lowered) if program.pattern is not None \
            else overwrites_output(lowered, program.output.dims)
        digest = ir_digest(function)
        self._store_lowered(key, (program, function, overwrites, log, digest, names))
        return self._built(key, program, function, overwrites, log, digest, names, plan,
                           schedule)

    def _built(self, key: KernelKey, program: Program, function: Function, overwrites: bool,
               log: IRLog | None, digest: str, names: tuple[str, ...], plan: LoopPlan,
               schedule: Schedule | None) -> CompiledProgram:
        """``function``, lowered from ``program``, built (or loaded from the disk cache)."""
        # A cuda kernel is built for the CPU too, for now: it can print CUDA but not run on a GPU.
        backend = "llvm" if key.backend == "cuda" else key.backend
        kernel = build(function, backend, cache=self.disk, key=key.digest(), digest=digest,
                       quick=key.backend == "llvm" and self.options.quick_builds and
                       quick_builds_allowed())
        if not kernel.from_cache:
            self.compiles += 1
        sizes = _size_sources(program)
        arguments = ArgumentPlan.from_params(function.params, program.output.name)
        return CompiledProgram(key, program, function, kernel, log, arguments, sizes,
                               _balancing_operand(program, arguments.range_index),
                               overwrites and not plan.partials, plan, schedule,
                               _entry_work(program), _counted_by(key, program, plan), names,
                               row_choice(program, plan))


    def _lowered(self, key: KernelKey
                 ) -> tuple[Program, Function, bool, IRLog, str, tuple[str, ...]] | None:
        """What lowering and the IR passes made of ``key`` in an earlier process, from the disk
        cache, with the IR's digest: a new process then builds nothing before it loads the
        machine code (about 40-100 ms of Python per kernel otherwise). Skipped in debug mode
        and under ``TA_CHECK_IR``, which ask to see or verify the passes run."""
        if self.disk is None or self.options.debug or self.options.check_ir:
            return None
        stored = self.disk.get_object(key.digest(), _lowered_kind(key))
        # Anything else under the name (another layout of the entry) is lowered again.
        return stored if isinstance(stored, tuple) and len(stored) == 6 else None

    def _store_lowered(self, key: KernelKey, lowered: tuple) -> None:
        if self.disk is not None and not self.options.debug and not self.options.check_ir:
            self.disk.put_object(key.digest(), _lowered_kind(key), lowered)


LOWERED = "lowered"   # the disk cache's kind for a kernel's lowered program and IR


def _lowered_kind(key: KernelKey) -> str:
    """The disk cache's kind for ``key``'s lowered IR, which depends on the host through the
    rows of register tiles jammed (a cache directory shared by an AVX2 and an AVX-512 host
    keeps one of each)."""
    rows = _tile_rows(key.backend)
    return LOWERED if rows == 1 else f"{LOWERED}-tiles{rows}"


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a kernel compiles: lowering and the IR
    passes make tens of thousands of small objects, which set off full collections that walk
    every object of the process (10-20 ms of a 100 ms first call on the development VM with
    NumPy and scipy loaded: an ad hoc A/B, not kept; `benchmarks/overhead.py` times first
    calls); the collector runs again, as before, once the kernel is built. A caller that had paused it keeps it paused."""
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _size_sources(program: Program) -> tuple[tuple[str, int, str], ...]:
    """Where each index's size comes from: ``(input, mode, index)``, by the inputs' own
    indices, then by the accesses that name an index no input is declared with (``A(j,k)``
    beside ``A(i,j)`` sizes ``k`` by A's second mode)."""
    sources = [(info.name, mode, index) for info in program.tensors
               if info.role is TensorRole.INPUT for mode, index in enumerate(info.dims)]
    known = {index for _, _, index in sources}
    for nest in program.nests:
        for access in accesses(nest.expr):
            if program.tensor(access.tensor).role is not TensorRole.INPUT:
                continue
            for mode, index in enumerate(access.indices):
                if index not in known:
                    known.add(index)
                    sources.append((access.tensor, mode, index))
    return tuple(sources)


def _with_partials(program: Program, plan: LoopPlan, schedule: Schedule | None,
                   backend: str) -> LoopPlan:
    """``plan`` with the compiler's own thread split of a reduction whose outer loop sums
    (``abc->bc``, ``cd,adbc->c``: the loops read the operands in storage order, the outermost
    over an index the output lacks; CSC SpMV, whose matrix's dense first level is that
    outer loop): ``parallelize(a, reduction=partials)``,
    each thread range summing into its own copy of the output, the copies added after
    (``_run_partials``). The runtime splits only where the work dwarfs those copies
    (``PARTIAL_COPY_WORK``). Not under a schedule (which says so itself), on the GPU, or for
    a program of several nests or with converted operands.

    ``abc->bc`` on 64 x 256 x 256 float32 ran on one thread in 0.76 ms against NumPy's 0.57;
    CSC SpMV of 2e5 x 2e5 with 8e5 entries went from 2.11 to 1.34 ms on two threads (scipy
    1.94; AMD EPYC VM, 2026-12-06). The CUDA mappings choose their own reduction
    (``gpu.function.gpu_plan`` drops this split).
    """
    if schedule is not None or backend == "cuda" or plan.parallel is not None or \
            plan.serial or len(program.nests) != 1 or program.conversions or \
            program.pattern is not None or not program.output.format.is_dense:
        return plan
    nest = program.nests[0]
    if not nest.loop_order:
        return plan
    outer = nest.loop_order[0]
    # A COO operand read in any order (lower/unordered.py): ranges of its entries may meet
    # the same output row whatever the loop, so each range sums into its own copy.
    if not any(t.unordered for t in program.tensors) and (
            outer in nest.output.indices or
            not all(_dense_outer(program.tensor(a.tensor).format, a.indices, outer)
                    for a in accesses(nest.expr))):
        return plan
    return dataclasses.replace(plan, parallel=Parallelize(outer, reduction="partials"))


def _dense_outer(fmt: Format, indices: tuple[str, ...], outer: str) -> bool:
    """Whether an operand stored as ``fmt`` and read at ``indices`` leaves the loop over
    ``outer`` a counted loop whose ranges split its entries: dense, or sparse with a dense
    first level over ``outer`` (CSC read by ``y(i) = A(i,j) * x(j)`` under ``j, i``)."""
    if fmt.is_dense:
        return True
    return fmt.levels[0] is LevelKind.DENSE and indices[fmt.order[0]] == outer


# A split into partial outputs pays where the call's work is at least this many times the
# values of the copies it zeroes and adds (one per extra thread).
PARTIAL_COPY_WORK = 8

# Ranges of a COO operand's entries read in any order (lower/unordered.py) scatter at random
# into their copies of the output, which are zeroed and added up after: the split pays where
# the entries are at least this many times the output's values (COO SpMV, two threads against
# one: 10 entries a row over 1e5-2e5 rows 1.55-1.7x faster, 2.5 a row over 4e5 rows 0.8x;
# AMD EPYC VM, 2026-12-06, ad hoc, the copies reused, ``_partial_copies``).
SCATTER_ENTRIES_PER_VALUE = 4


def _partial_parts(parts: int, work: int, shape: tuple[int, ...]) -> int:
    """How many ranges a reduction into partial outputs (``reduction=partials``) of ``shape``
    takes of the ``parts`` its work asks for: one per thread at most, and no more than its
    work pays copies for (``PARTIAL_COPY_WORK``)."""
    return max(1, min(parts, 1 + work // (max(1, math.prod(shape)) * PARTIAL_COPY_WORK)))


def _counted_by(key: KernelKey, program: Program, plan: LoopPlan) -> tuple[str, str] | None:
    """The CSR factors of a sparse product, or the CSR terms of a sparse sum, whose split
    calls may count rows first (``lower/counted.py``): not on the GPU, nor under a position
    split or partial sums."""
    if key.counted or key.backend == "cuda" or plan.position_split is not None or \
            plan.partials:
        return None
    return counted_factors(program) or counted_summands(program)


def _balancing_operand(program: Program, index: str | None) -> RowWork | None:
    """What a row of the split loop over ``index`` costs (``lower/scheduling.py``)."""
    return row_work(program, index)


def _entry_work(program: Program) -> RowWork | None:
    """What bounds the entries of each row of a sparse matrix output, whatever its loops'
    order and split (``threads.entry_bounds``); None for other outputs."""
    output = program.output
    fmt = output.format
    if fmt.rank != 2 or fmt.is_dense or not fmt.levels[1].has_pos:
        return None
    return row_work(program, output.dims[fmt.order[0]])


_cache: KernelCache | None = None


def kernel_cache() -> KernelCache:
    """The process-wide kernel cache (created on first use, from the environment)."""
    global _cache
    if _cache is None:
        _cache = KernelCache(CompileOptions.from_environment())
    return _cache


# ---------------------------------------------------------------------------------------------
# einsum


def einsum(*operands: Any, out_format: Any = None, formats: Any = None,
           backend: str | None = None, schedule: Any = None, dtype: Any = None,
           out: np.ndarray | None = None, casting: str = "safe", order: str = "K",
           optimize: Any = "auto") -> Any:
    """Evaluate NumPy einsum notation with compiled kernels, on sparse and dense operands.

    Called as ``einsum(subscripts, *operands)`` or in NumPy's interleaved form
    ``einsum(op0, sublist0, op1, sublist1, ..., [sublistout])``. ``dtype=``, ``out=``,
    ``casting=`` and ``order=`` mean what they mean in ``numpy.einsum`` (a cast the ``casting``
    rule forbids is a ``CastingError``, a ``TypeError``). ``optimize=`` chooses the order of
    contraction of three or more operands (``contract_path.py``: a sparsity-aware cost; each
    step is one kernel, and a product one kernel computes best, such as SDDMM, stays fused):
    ``"auto"`` (the default: ``"greedy"`` from three operands), ``True``/``"greedy"``,
    ``"optimal"``, an explicit path as ``ta.einsum_path`` returns it, or ``False`` (one
    kernel for the whole product, however many operands).

    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.random_array((4, 3), density=0.5, format="csr", random_state=0)
    >>> x = np.arange(3.0)
    >>> bool(np.allclose(einsum("ij,j->i", A, x), A @ x))
    True
    """
    if not operands:
        raise NotationError("einsum needs subscripts and at least one operand")
    tried = False     # whether the remembered dispatch of this call was looked up already
    if type(operands[0]) is str and formats is None and out_format is None and \
            dtype is None and out is None and order == "K" and \
            casting == "safe" and backend != "cuda" and _cache is not None:
        # A repeated plain call: its kernel and argument recipe were remembered (a repeated
        # SDDMM skips planning, ~0.4 ms; a small SpMV's whole cost is this dispatch). The
        # latest replay of these subscripts checks the operands' kinds itself: tried first.
        recent = None if schedule is not None else operands[0] if backend is None else \
            (operands[0], backend) if type(backend) is str else None
        fast = _cache.recent.get(recent) if recent is not None else None
        if fast is not None:
            result = fast(operands[1:])
            if result is not None:
                return result
        coo = _coo_signature(operands[0], operands[1:], backend)
        how = _cache.any_order.get(coo) if coo is not None else False
        if how == "dense":
            # the COO read in any order into a dense result: what the CSR route gives
            return einsum(operands[0], *operands[1:], backend=backend, out_format="dense",
                          optimize=optimize)
        uniform = _uniform(operands[1:]) or _csr_operands(operands[1:],
                                                          keep_coo=how is not False)
        if uniform is not None:
            return einsum(operands[0], *uniform, backend=backend, schedule=schedule,
                          optimize=optimize)
        signature = _scheduled(_signature(operands[0], operands[1:], backend), schedule)
        entry = _cache.dispatch.get(signature) if signature is not None else None
        if entry is not None:
            result = (entry.fast or entry.run)(operands[1:])
            if result is not None:
                if entry.fast is not None and recent is not None:
                    _cache.recent[recent] = entry.fast
                return result
        tried = signature is not None   # none remembered, or it declined this call
    # ta.Tensor operands (_TensorReplay), looked up after the scipy/NumPy replays above
    if not tried and _cache is not None and _cache.tensor_calls and \
            type(operands[0]) is str and formats is None and schedule is None and dtype is None and out is None and \
            order == "K" and casting == "safe" and backend != "cuda":
        key = _tensor_signature(operands[0], operands[1:], backend, out_format)
        known = _cache.tensor_calls.get(key) if key is not None else None
        if known is not None:
            result = known(operands[1:])
            if result is not None:
                return result
    # -- dask hook (tensoralg/dask/): a dask.array operand makes the call a blockwise plan
    if _dask_handlers is not None and any(map(_is_dask, operands)):
        return _dask_handlers[0](operands, dict(
            out_format=out_format, formats=formats, backend=backend, schedule=schedule,
            dtype=dtype, out=out, casting=casting, order=order, optimize=optimize))
    # -- end of the dask hook
    subscripts, *rest = operands
    if isinstance(subscripts, str):
        operands = tuple(rest)
    else:
        subscripts, listed = from_interleaved(operands)   # NumPy's (op, sublist, ...) form
        operands = tuple(listed)
    if isinstance(order, str) and order not in _ORDERS:
        order = order.upper()                      # NumPy takes 'k', 'a', 'c', 'f' too
    if casting not in _CASTINGS or order not in _ORDERS:
        raise InputError(f"casting must be one of {', '.join(_CASTINGS)} and order one of "
                         f"{', '.join(_ORDERS)}; got casting={casting!r}, order={order!r}")
    plain = formats is None and out_format is None and dtype is None \
        and out is None and order != "F"
    signature = _scheduled(_signature(subscripts, operands, backend), schedule) \
        if plain and backend != "cuda" else None
    if signature is not None and not tried:
        # Remembered calls ran as one kernel (the plain calls looked this up above).
        entry = kernel_cache().dispatch.get(signature)
        if entry is not None:
            result = (entry.fast or entry.run)(operands)
            if result is not None:
                return result
    # a plain call of C-contiguous arrays: the grouping, a presum step and replays apply
    arrays = plain and schedule is None and backend != "cuda" and \
        isinstance(subscripts, str) and _c_arrays(operands)
    if arrays:
        # Indices that always stand together merge into one (notation/grouping.py): the same
        # contraction over views with fewer axes.
        grouping = group_indices(subscripts.replace(" ", ""), tuple(op.shape for op in operands))
        if grouping is not None:
            if backend is None and casting == "safe" and order == "K" and optimize == "auto":
                _recent_replay(subscripts, functools.partial(_grouped_call, subscripts))
            return _in_groups(grouping, operands, backend=backend, casting=casting,
                              order=order, optimize=optimize)
    steps = _presummed(subscripts, operands) \
        if arrays and optimize == "auto" and len(operands) >= 2 else None
    if steps is None and len(operands) > 2 and optimize is not False and optimize is not None:
        planned = _planned(subscripts, operands, optimize, formats, schedule)
        if planned is not None:
            path, steps = planned
            _log.info("%s: contracted in %d steps along %s (ta.einsum_path reports why)",
                      subscripts, len(steps), path)
    if steps is not None:
        step_dtype = _step_dtype(operands, dtype)
        if arrays and backend is None and casting == "safe" and order == "K" and \
                optimize == "auto":
            _recent_replay(subscripts, _PlannedReplay(
                tuple((op.dtype, op.shape) for op in operands), steps, step_dtype))
        result = run_steps(
            operands, steps,
            lambda text, ops: _intermediate(einsum(text, *ops, backend=backend,
                                                   dtype=step_dtype, casting=casting,
                                                   optimize=False)),
            lambda text, ops: einsum(text, *ops, backend=backend, dtype=step_dtype,
                                     casting=casting, optimize=False, out=out,
                                     out_format=out_format, order=order))
        return result if out_format is not None else _in_pydata_format(result, operands)
    if not isinstance(subscripts, str):
        raise NotationError(f"subscripts must be a string, not {type(subscripts).__name__}")
    if order == "F" or (order in ("A", "K") and _all_fortran(operands)):
        # NumPy's "A" (and, where every array operand is Fortran-ordered, "K") gives a
        # Fortran-ordered result. "K"'s other layouts (the result's axes in the operands'
        # stride order) are not followed: the result is C-ordered, with the same values.
        result = einsum(subscripts, *operands, out_format=out_format, formats=formats,
                        backend=backend, schedule=schedule, dtype=dtype, out=out,
                        casting=casting, order="C")
        return np.asfortranarray(result) if out is None and isinstance(result, np.ndarray) \
            else result
    if any(isinstance(op, (list, tuple)) for op in operands):
        operands = tuple(np.asarray(op) if isinstance(op, (list, tuple)) else op
                         for op in operands)
    widening = widened(operands, dtype)
    if widening is not None:      # bool, small ints, uint64, float16: runtime/widen.py
        wide, result_dtype, compute = widening
        if dtype is not None:
            for k, operand in enumerate(operands):
                _check_casting(np.asarray(operand).dtype if not hasattr(operand, "dtype")
                               else np.dtype(operand.dtype), result_dtype, casting,
                               f"operand {k}")
        if out is not None:
            _check_casting(result_dtype, np.asarray(out).dtype, casting, "the result")
        result = einsum(subscripts, *wide, out_format=out_format, formats=formats,
                        backend=backend, schedule=schedule,
                        dtype=None if dtype is None else compute, casting="unsafe")
        result = narrowed(result, result_dtype)
        return result if out is None else _dense_result(np.asarray(result), out)
    ranks = tuple(_rank(op, k) for k, op in enumerate(operands))
    stmt, canonical = _parse_einsum(subscripts, ranks)
    named = _einsum_names(len(operands))
    stretched = broadcast(stmt, {name: getattr(op, "shape", ()) for name, op in
                                 zip(named, operands)},
                          {name for name, op in zip(named, operands)
                           if isinstance(op, np.ndarray) or np.isscalar(op)})
    if stretched is not None:     # size-1 dimensions broadcast: notation/broadcast.py
        stmt, drop = stretched
        canonical = canonical_text(stmt)
        operands = tuple(np.asarray(op).reshape([n for m, n in enumerate(np.shape(op))
                                                 if m not in drop[name]])
                         if name in drop else op for name, op in zip(named, operands))
        signature = None          # a later call of other shapes must not replay this one
    overrides = _format_overrides(formats, len(operands), subscripts, operands)
    bound = {}
    families = []
    # COO operands bound as they come, for a kernel that reads them in any order; _run sorts
    # them where the kernel it compiles does not
    unsorted: dict[str, Any] = {}
    loose = formats is None and dtype is None and out is None and order != "F" and \
        schedule is None and backend != "cuda" and out_format in (None, "dense")
    for k, (name, operand) in enumerate(zip(named, operands)):
        device = _device_operand(operand, backend)
        families.append("device" if device is not None else input_family(operand))
        any_order = _bind_any_order(operand) if loose and device is None else None
        if any_order is not None:
            unsorted[name] = operand
        bound[name] = device if device is not None else any_order if any_order is not None \
            else _bind(operand, overrides.get(k), f"operand {k} ({name})")
    coo = _coo_signature(subscripts, operands, backend) if unsorted else None
    try:
        result, compiled = _run(stmt, canonical, bound, families, out_format, backend,
                                schedule, dtype, out, casting, unsorted)
    except _CsrFirst:
        known = kernel_cache().any_order.get(coo) if coo is not None else None
        if coo is not None:
            kernel_cache().any_order[coo] = False
        if stretched is not None:     # the operands were reshaped: bind the COO sorted
            bound.update({name: _bind(op, None, f"operand {name}")
                          for name, op in unsorted.items()})
            result, compiled = _run(stmt, canonical, bound, families, out_format, backend,
                                    schedule, dtype, out, casting)
        else:
            converted = list(_csr_operands(operands) or operands)
            for k, name in enumerate(named):
                if name in unsorted and _coo_kind(converted[k]) and \
                        type(converted[k]).__module__.startswith("scipy.sparse"):
                    # values the compiled sorter does not take; the arrays were checked
                    converted[k] = converted[k].tocsr()
            result = einsum(subscripts, *converted, backend=backend, casting=casting,
                            order=order, optimize=optimize)
            if coo is not None and known is None and out_format is None and \
                    type(result) is np.ndarray and result.ndim:
                # The CSR route gives a dense result (COO's own format inference would
                # assemble a sparse one): try the COO in any order into a dense result
                # next time (back to False if its kernel cannot read it so either).
                kernel_cache().any_order[coo] = "dense"
            return result
    if coo is not None:
        any_order = kernel_cache().any_order
        if len(any_order) > 256:
            any_order.clear()
        reads = compiled is not None and \
            all(_reads_any_order(compiled, name) for name in unsorted)
        any_order[coo] = ("dense" if out_format is not None else True) if reads else False
    if compiled is not None and signature is None and stretched is None and formats is None \
            and schedule is None and dtype is None and out is None and order == "K" and \
            casting == "safe" and backend != "cuda" and not len(kernel_cache().tuned):
        key = _tensor_signature(subscripts, operands, backend, out_format)
        if key is not None and any(not t.format.is_dense for t in bound.values()):
            tensor_calls = kernel_cache().tensor_calls
            if len(tensor_calls) > 256:
                tensor_calls.clear()
            # its written-out replay is what a plain call of these kinds gives where no
            # out_format is asked, and, for scipy COO, where a plain call asks for a dense
            # result itself (KernelCache.any_order's "dense")
            recent = (subscripts if backend is None else (subscripts, backend)) \
                if out_format is None or (out_format == "dense" and coo is not None and
                                          "sparse" not in families) else None
            tensor_calls[key] = _TensorReplay.of(compiled, stmt, named, bound, families,
                                                 out_format, recent)
    # An entry already there declined this call (a call large enough for threads, an operand
    # to canonicalize): writing it out again cost ~0.5 ms of compile() per call.
    if signature is not None:
        dispatch = kernel_cache().dispatch
        recorded = dispatch.get(signature)
        # A dense product or stack of products is replayed by the route that decides by each
        # call's sizes (BLAS, or the loop nest's replay for small calls), whichever call came
        # first: a loop-nest replay alone ran every later large call in the loop nest (a
        # 512^3 product 7x slower than BLAS after one small call of the same subscripts).
        blas = recorded if isinstance(recorded, (_GemmReplay, _StackReplay)) else \
            _blas_replay(stmt, named, bound, schedule) if recorded is None else None
        if blas is not None and compiled is not None and blas.nest is None:
            nest = _remember(signature, compiled, stmt, named, operands, bound, store={})
            if nest is not None or recorded is None:
                dispatch[signature] = dataclasses.replace(blas, nest=nest)
                _recent_blas(signature, dispatch[signature])
        elif blas is not None and recorded is None:
            dispatch[signature] = blas
            _recent_blas(signature, blas)
        elif recorded is None and compiled is not None:
            _remember(signature, compiled, stmt, named, operands, bound)
    return result if out_format is not None else _in_pydata_format(result, operands)


@dataclass(frozen=True, slots=True)
class _PlannedReplay:
    """A plain call of C-contiguous arrays contracted in several steps (three or more
    operands along a path, or a factor summed first, ``_presummed``), made again for arrays
    of the same dtypes and shapes (the steps are the shapes'): each step through its own
    replay, without the general path's checks and planning before them (``ij,jk,kl->il`` at
    16 x 16: ~40 -> ~20 µs, ad hoc). None (the general path) for anything else."""

    kinds: tuple[tuple[np.dtype, tuple[int, ...]], ...]
    steps: list
    dtype: np.dtype | None = None       # what every step computes in (_step_dtype)

    def __call__(self, operands: tuple) -> Any:
        if len(operands) != len(self.kinds):
            return None
        for op, (dtype, shape) in zip(operands, self.kinds):
            if type(op) is not np.ndarray or op.dtype != dtype or op.shape != shape or \
                    not op.flags.c_contiguous:
                return None
        return run_steps(operands, self.steps,
                         lambda text, ops: _intermediate(einsum(text, *ops, dtype=self.dtype,
                                                                optimize=False)),
                         lambda text, ops: einsum(text, *ops, dtype=self.dtype,
                                                  optimize=False))


def _step_dtype(operands: Sequence[Any], dtype: Any) -> Any:
    """What every step of a contraction in several steps computes in: ``dtype`` when given,
    else, when the operands' dtypes differ, their common type, in which NumPy's einsum
    computes the whole expression (a uint8 and a bool operand contracted first would
    otherwise wrap in uint8, and two float32 ones round in float32 before a float64 one
    joins). None when they agree: every step then has their dtype anyway.

    >>> _step_dtype((np.ones(2, np.uint8), np.ones(2, bool), np.ones(2)), None)
    dtype('float64')
    >>> _step_dtype((np.ones(2), np.ones(2)), None) is None
    True
    """
    if dtype is not None:
        return dtype
    kinds = {np.dtype(op.dtype) for op in operands if hasattr(op, "dtype")}
    return np.result_type(*kinds) if len(kinds) > 1 else None


def _c_arrays(operands: Sequence[Any]) -> bool:
    """Whether every operand is a C-contiguous NumPy array."""
    return all(type(op) is np.ndarray and op.flags.c_contiguous for op in operands)


def _grouped_call(subscripts: str, operands: tuple) -> Any:
    """A plain call of ``subscripts`` whose indices merge (``notation/grouping.py``), made
    again without the general path's checks up to the grouping; None (the general path) for
    operands that are not C-contiguous arrays or that merge differently."""
    if not _c_arrays(operands):
        return None
    grouping = group_indices(subscripts.replace(" ", ""), tuple(op.shape for op in operands))
    return None if grouping is None else _in_groups(grouping, operands)


def _in_groups(grouping: Any, operands: Sequence[np.ndarray], **options: Any) -> Any:
    """``einsum`` of ``grouping``'s merged subscripts on views of ``operands``, the result
    viewed back in the call's own output shape."""
    result = einsum(grouping.subscripts, *[op.reshape(shape) for op, shape in
                                           zip(operands, grouping.operand_shapes)], **options)
    return np.reshape(result, grouping.output_shape) if isinstance(result, np.ndarray) \
        else result


def _recent_blas(signature: tuple, entry: "_GemmReplay | _StackReplay") -> None:
    """Make ``entry`` the replay a plain call of its subscripts tries first (as
    ``_recent_replay`` does for a loop nest's), behind a check that the operands are the
    C-contiguous arrays of the dtype and ranks it was recorded for."""
    if len(signature) != 4:            # (subscripts, backend, operand, operand): no schedule
        return
    kinds = signature[2:]
    if any(kind[0] is not np.ndarray for kind in kinds):
        return

    def guarded(operands: tuple) -> Any:
        if len(operands) != 2:
            return None
        for operand, (_, dtype, ndim) in zip(operands, kinds):
            if type(operand) is not np.ndarray or operand.dtype != dtype or \
                    operand.ndim != ndim or not operand.flags.c_contiguous:
                return None
        return entry.run(operands)

    _recent_replay(signature[0] if signature[1] is None else signature[:2], guarded)


def _blas_replay(stmt: Assignment, named: Sequence[str], bound: Mapping[str, Tensor],
                 schedule: Any) -> "_GemmReplay | _StackReplay | None":
    """The replay of the compiler's route choice for a dense product or stack of products
    (None for other calls, scheduled or tuned ones, and values BLAS does not take)."""
    if schedule is not None or len(kernel_cache().tuned) or \
            not all(t.format.is_dense for t in bound.values()):
        return None
    dtype = np.result_type(*[t.dtype for t in bound.values()])
    if not blas_supports(dtype):
        return None
    form = gemm_form(stmt)
    if form is not None:
        return _GemmReplay(form, named.index(form.a), named.index(form.b), dtype)
    stack = contraction_form(stmt)
    if stack is not None:
        return _StackReplay(stack, named.index(stack.a), named.index(stack.b), dtype)
    return None


def _intermediate(value: Any) -> Any:
    """A step's result as the next step takes it: a NumPy scalar (a step that sums every
    index) as a 0-d array, which the next step's call can replay (``_signature`` takes arrays
    only; a scalar sent each call through the general path, ~90 µs of Python)."""
    return np.asarray(value) if isinstance(value, np.generic) else value


def _operand_getter(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple]:
    """``operands -> (operands[name] for name in names)`` as one C-level lookup where there are
    several names (a repeated small call's Python is most of its cost); KeyError for a missing
    name.

    >>> _operand_getter(("A", "x"))({"x": 2, "A": 1}), _operand_getter(("A",))({"A": 1})
    ((1, 2), (1,))
    """
    if len(names) > 1:
        return operator.itemgetter(*names)
    return lambda given: tuple(given[name] for name in names)


def _index_uses(stmt: Assignment, locate: Callable[[str], Any]) -> tuple[dict, tuple, tuple]:
    """Where ``stmt``'s operands use each index, as ``(locate(tensor), mode)`` pairs; the pairs
    of modes whose sizes must agree; and the (tensor, mode) giving each output size.

    >>> _index_uses(parse_statement("y(i) = A(i,j) * x(j)"), lambda name: name)[1:]
    ((('A', 1, 'x', 0),), (('A', 0),))
    """
    where: dict[str, list[tuple[Any, int]]] = {}
    for access in accesses(stmt.rhs):
        for mode, index in enumerate(access.indices):
            where.setdefault(index, []).append((locate(access.tensor), mode))
    equal = tuple((*first, *other) for uses in where.values()
                  for first, other in zip(uses, uses[1:]))
    return where, equal, tuple(where[index][0] for index in stmt.lhs.indices)


def _tensor_signature(subscripts: str, operands: tuple, backend: Any, out_format: Any
                      ) -> tuple | None:
    """What a repeated einsum call with ``ta.Tensor`` operands (and C-ordered NumPy arrays
    beside them) must share to reuse an earlier one's kernel: the subscripts, backend and
    ``out_format``, and each operand's kind, format and dtypes; None for other calls."""
    if backend is not None and type(backend) is not str:
        return None
    try:
        hash(out_format)
    except TypeError:
        return None
    parts: list = [subscripts, backend, ("out", out_format)]
    tensors = False
    for operand in operands:
        kind = type(operand)
        if kind is np.ndarray:
            if not operand.flags.c_contiguous or operand.dtype not in _UNIFORM_DTYPES:
                return None
            parts.append((kind, operand.dtype, operand.ndim))
        elif kind is Tensor:
            if operand.dtype not in _UNIFORM_DTYPES:
                return None
            parts.append((kind, operand.format, operand.dtype, operand.index_dtype))
            tensors = True
        elif _coo_kind(operand):
            # a COO bound in any order (_bind_any_order), whose index dtype is its coordinates'
            coords = operand.coords
            if operand.dtype not in _UNIFORM_DTYPES or not len(coords):
                return None
            parts.append((kind, operand.dtype, coords[0].dtype, len(operand.shape)))
            tensors = True
        else:
            return None
    return tuple(parts) if tensors else None


def _coo_kind(operand: Any) -> bool:
    """Whether ``operand`` is a scipy COO (2-D) or pydata COO array."""
    module = type(operand).__module__
    return (getattr(type(operand), "_format", None) == "coo" and
            module.startswith("scipy.sparse") and hasattr(operand, "coords")) or \
        (type(operand).__name__ == "COO" and module.startswith("sparse"))


@dataclass(frozen=True, slots=True)
class _TensorReplay:
    """An einsum call with ``ta.Tensor`` operands replayed: bound as the general path binds
    them, checked for sizes that agree and an output index dtype that still holds, then the
    recorded kernel runs (the parsing, the broadcasting and format checks and the kernel's
    key are skipped: ~100 -> ~40 µs for a small CSF MTTKRP). None sends the call to the
    general path, which raises the precise errors."""

    compiled: CompiledProgram
    stmt: Assignment
    names: tuple[str, ...]
    equal: tuple[tuple[str, int, str, int], ...]    # (operand, mode) pairs that must agree
    out_dims: tuple[tuple[str, int], ...]            # output size k = operand's mode
    requested: Format | None
    families: tuple[str, ...]
    pydata: bool                                     # no out_format: as sparse.einsum returns
    any_order: frozenset[str] = frozenset()          # COO operands bound unsorted
    # where a plain call's replays are kept (``KernelCache.recent``'s key), for calls whose
    # written-out replay gives what a plain call gives; None: not kept there
    recent: Any = None
    # [the written-out replay (``_written_entries``), or None where it cannot be written];
    # empty until the optimised kernel is in place
    written: list = field(default_factory=list, compare=False)

    @staticmethod
    def of(compiled: CompiledProgram, stmt: Assignment, names: Sequence[str],
           bound: Mapping[str, Tensor], families: Sequence[str], out_format: Any,
           recent: Any = None) -> "_TensorReplay":
        _, equal, out_dims = _index_uses(stmt, lambda name: name)
        requested = _out_request(out_format, len(stmt.lhs.indices))
        unordered = frozenset(t.name for t in compiled.program.tensors if t.unordered)
        return _TensorReplay(compiled, stmt, tuple(names), equal, out_dims, requested,
                             tuple(families), out_format is None, unordered,
                             recent if unordered else None)

    def __call__(self, operands: tuple) -> Any:
        if len(operands) != len(self.names):
            return None
        written = self.written
        if written:
            if written[0] is not None:
                result = written[0](operands)
                if result is not None:
                    if self.recent is not None and \
                            kernel_cache().recent.get(self.recent) is not written[0]:
                        # another call of these subscripts took the slot: take it back
                        _recent_replay(self.recent, written[0])
                    return result
        elif self.any_order and not self.compiled.kernel.pending:
            written.append(_written_entries(self, operands))
            if written[0] is not None and self.recent is not None:
                _recent_replay(self.recent, written[0])
        bound = {}
        for k, (name, op) in enumerate(zip(self.names, operands)):
            tensor = _bind_any_order(op) if name in self.any_order else \
                _bind(op, None, f"operand {k} ({name})")
            if tensor is None:
                return None
            bound[name] = tensor
        key = self.compiled.key
        for (name, fmt), index in zip(key.formats, key.index_dtypes):
            # a COO sorted on binding takes the index dtype its entries need
            tensor = bound.get(name)
            if tensor is None or tensor.format != fmt or \
                    (not fmt.is_dense and tensor.index_dtype != index):
                return None
        for a, mode_a, b, mode_b in self.equal:
            if bound[a].shape[mode_a] != bound[b].shape[mode_b]:
                return None
        shape = tuple(bound[name].shape[mode] for name, mode in self.out_dims)
        if _out_index_dtype(shape, self.stmt, bound) != self.compiled.key.out_index_dtype:
            return None
        result = _wrap(execute(self.compiled, bound, self.compiled.key.value_dtype, shape),
                       self.requested, list(self.families), None)
        return _in_pydata_format(result, operands) if self.pydata else result


def _written_entries(replay: _TensorReplay, operands: tuple) -> Any:
    """``replay``'s call written out as one function (``runtime/replay.py``), for a call of
    C-ordered NumPy arrays and COO operands its kernel reads in any order, into a dense
    result: a repeated COO product then costs what a CSR one does (~10 µs for a small one,
    against ~45 through the bound tensors), or None for other calls. A call with work for two
    threads leaves it for the general path, which splits it into partial outputs."""
    compiled = replay.compiled
    program, key = compiled.program, compiled.key
    asked = compiled.plan.parallel
    if not program.output.format.is_dense or program.conversions or \
            (replay.requested is not None and not replay.requested.is_dense) or \
            (asked is not None and asked.threads is not None):
        return None
    value = key.value_dtype
    index_of = dict(zip((name for name, _ in key.formats), key.index_dtypes))
    kinds: list[str] = []
    guards: list[tuple] = []
    vets: dict[int, Any] = {}
    for k, (name, operand) in enumerate(zip(replay.names, operands)):
        if type(operand) is np.ndarray and operand.dtype == value:
            kinds.append(_DENSE)
            guards.append((np.ndarray, value, operand.ndim))
        elif name in replay.any_order and name in index_of:
            kinds.append(ENTRIES)
            guards.append((type(operand),))
            vets[k] = functools.partial(_entries_of, value=value, index=index_of[name])
        else:
            return None
    recipe = _recipe(compiled, replay.names, tuple(kinds))
    if recipe is None or not replayable(recipe):
        return None
    position = {name: k for k, name in enumerate(replay.names)}
    _, equal, out_dims = _index_uses(replay.stmt, position.__getitem__)
    finish = _pydata_coo if replay.pydata and replay.requested is None and \
        _pydata_only(list(replay.families)) else None

    def fail() -> None:
        raise KernelRuntimeError(f"the kernel for {key.statement} could not allocate memory "
                                 f"for its output")

    return replay_function(recipe, kinds, equal, out_dims, value, compiled.overwrites,
                           compiled.kernel.call or compiled.kernel.function, bool,
                           kernel_cache().threads
                           if compiled.arguments.range_slots is not None else None,
                           fail, None, tuple(guards), entries=vets, finish=finish,
                           narrow_out=key.out_index_dtype == _INT32,
                           entries_per_value=SCATTER_ENTRIES_PER_VALUE)


def _entries_of(operand: Any, value: np.dtype, index: np.dtype) -> tuple | None:
    """What ``_written_entries``'s replay reads a COO operand by (``replay._Entries``): the
    addresses of its ``[0, entries]`` positions, its entry count, values and coordinates, and
    the tensor holding them; None where it is not bound in any order with these dtypes."""
    tensor = _bind_any_order(operand)
    if tensor is None or tensor.dtype != value or tensor.index_dtype != index:
        return None
    levels = tensor.levels
    return (data_address(levels[0].pos), int(tensor.vals.shape[0]), data_address(tensor.vals),
            *[data_address(level.crd) for level in levels]), tensor


def _in_pydata_format(result: Any, operands: Sequence[Any]) -> Any:
    """A pydata result in the format ``sparse.einsum`` returns for the same call: the pydata
    operands' format (DOK, GCXS) when they share one, else COO; COO for a 0-d result.

    >>> import sparse
    >>> x = sparse.random((3, 3), density=0.5, format="dok", random_state=0)
    >>> type(einsum("ij->i", x)).__name__
    'DOK'
    """
    if type(result).__module__.split(".")[0] != "sparse" or not result.ndim:
        return result
    kinds = {getattr(op, "format", None) for op in operands
             if type(op).__module__.split(".")[0] == "sparse"}
    kind = kinds.pop() if len(kinds) == 1 else "coo"
    return result if kind == "coo" or kind is None else result.asformat(kind)


def _planned(subscripts: str, operands: tuple, optimize: Any, formats: Any, schedule: Any
             ) -> tuple[list, list] | None:
    """The contraction path of three or more operands and its steps (``run_steps``'s), when
    it has several (None: one kernel computes the whole product). ``formats`` and ``schedule``
    name the operands and loops of one statement, so a call that gives them runs as one
    kernel; an explicit path with several steps is then refused."""
    wanted = "greedy" if optimize == "auto" else optimize
    try:     # the same operands' shapes and stored counts give the same plan (~0.4 ms each)
        key = (subscripts, wanted, tuple((np.shape(op), getattr(op, "nnz", None))
                                         for op in operands))
        hash(key)
    except TypeError:                       # an explicit path given as a list
        key = None
    planned = _plans.get(key) if key is not None else None
    if planned is None:
        plan = plan_contraction(subscripts, operands, wanted)
        planned = (plan.path, step_list(plan)) if len(plan.steps) > 1 else ([], [])
        if key is not None:
            if len(_plans) > 512:
                _plans.clear()
            _plans[key] = planned
    if not planned[0]:
        return None
    if formats is not None or schedule is not None:
        if optimize == "auto":
            return None
        raise UnsupportedError("formats= and schedule= apply to one kernel; with them, "
                               "pass optimize=False (or an explicit one-step path)")
    return planned


# _planned's paths and steps, by operand shapes and stored counts
_plans: dict[tuple, tuple[list, list]] = {}

# A dense operand of at least this many values is summed over the indices it alone holds in a
# call step of its own (``_presummed``): a kernel whose loops take threads, where the
# product's own kernel would sum it into a temporary on one thread. Smaller ones stay inside
# the product's kernel (lower/concretize.presum), one call: the second call, its temporary
# and the thread hand-over cost 15-25 µs, which lost from 1.5e5 to 4.4e5 values (ac,ead->dc
# 29 -> 54 µs, badc,ac->cad 64 -> 78) and paid from 1e6 (dceb,bac->eca 271 -> 179 µs; AMD VM,
# two threads, ad hoc, 2026-12-06).
PRESUM_STEP_VALUES = 1 << 20


def _presummed(subscripts: str, operands: tuple) -> list | None:
    """``contract_path.presum_steps`` for a plain call of C-contiguous arrays, by their
    shapes (remembered); None where no operand of ``PRESUM_STEP_VALUES`` values or more has an
    index of its own to sum first.

    ``dceb,bac->eca`` (32 x 128 x 32 x 8 float32): 271 µs in one kernel, 179 in two steps,
    NumPy 154; ``cd,adbc->c`` (100 x 128 x 32 x 48 float64): 8.3 -> 6.5 ms, NumPy 6.1.
    """
    key = ("presum", subscripts, tuple(op.shape for op in operands))
    if key in _plans:
        return _plans[key]     # type: ignore[return-value]
    try:
        steps = presum_steps(subscripts, [op.shape for op in operands], PRESUM_STEP_VALUES)
    except TensorAlgebraError:
        steps = None           # the general path says what is wrong with the subscripts
    if len(_plans) > 512:
        _plans.clear()
    _plans[key] = steps        # type: ignore[assignment]
    return steps


# -- the fast path of repeated einsum calls ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class _GemmReplay:
    """A dense product the compiler sent to BLAS, replayed for operands of the same kinds
    (None, for the general path, when the sizes no longer call for BLAS or do not agree)."""

    form: GemmForm
    a: int                 # the operands' positions in the call
    b: int
    dtype: np.dtype
    fast: Any = None
    # The loop nest's replay of the same call, for the calls too small for BLAS (recorded
    # when the first of them runs; without it each took the general path, ~50-90 µs).
    nest: Any = None

    def run(self, operands: tuple) -> Any:
        if len(operands) != 2:
            return None
        a, b = operands[self.a], operands[self.b]
        m, k, n, k_b = self.form.dims(a.shape, b.shape)
        if k != k_b or m * n * self.dtype.itemsize > memory_limit():
            return None
        if m * k * n < GEMM_MIN_FMAS:
            return _small_call(self.nest, operands)
        return blas_product(a, self.form.a_transposed, b, self.form.b_transposed, self.dtype)


def _small_call(nest: Any, operands: tuple) -> Any:
    """A call a BLAS replay leaves to the loop nest: its replay, when one was recorded."""
    return None if nest is None else (nest.fast or nest.run)(operands)


@dataclass(frozen=True, slots=True)
class _StackReplay:
    """A stack of dense products (``ContractionForm``) the compiler sent to BLAS, replayed for
    operands of the same kinds (None, for the general path, when the sizes disagree or no
    longer call for BLAS)."""

    form: ContractionForm
    a: int                 # the operands' positions in the call
    b: int
    dtype: np.dtype
    fast: Any = None
    nest: Any = None       # the loop nest's replay, for calls too small for BLAS

    def run(self, operands: tuple) -> Any:
        if len(operands) != 2:
            return None
        a, b = operands[self.a], operands[self.b]
        form = self.form
        dims = form.sizes(a.shape, b.shape)
        if dims is None:
            return None          # a size that disagrees (or broadcasts): the general path
        stack, m, _, n = form.extents(dims)
        if stack * m * n * self.dtype.itemsize > memory_limit():
            return None
        if not stack_pays(form, dims, self.dtype.itemsize):
            return _small_call(self.nest, operands)
        return blas_contraction(form, a, b, self.dtype)


_DENSE, _COMPRESSED = DENSE, COMPRESSED


def _signature(subscripts: Any, operands: tuple, backend: str | None) -> tuple | None:
    """What a repeated call must share with an earlier one to reuse its decisions, or None.

    Only C-contiguous NumPy arrays and scipy CSR/CSC matrices take the fast path, and only a
    backend named by a string (anything else is refused by the general path).
    """
    if backend is not None and type(backend) is not str:
        return None
    parts: list = [subscripts, backend]
    for operand in operands:
        kind = type(operand)
        if kind is np.ndarray:
            if not operand.flags.c_contiguous:
                return None
            parts.append((kind, operand.dtype, operand.ndim))
            continue
        if not _is_scipy_compressed(kind) or operand.ndim != 2:
            return None
        parts.append((kind, operand.data.dtype, operand.indices.dtype, operand.indptr.dtype))
    return tuple(parts)


def _scheduled(signature: tuple | None, schedule: Any) -> tuple | None:
    """``signature`` of a call given ``schedule=``: the schedule as given (its text, or the
    ``Schedule``) is part of what a repeated call must share; None where it cannot be a key.

    >>> _scheduled(("ij,j->i", None), "parallelize(i)")
    ('ij,j->i', None, ('schedule', 'parallelize(i)'))
    """
    if signature is None or schedule is None:
        return signature
    try:
        hash(schedule)
    except TypeError:
        return None
    return (*signature, ("schedule", schedule))


# class -> whether it is a scipy CSR/CSC class (its ``format`` is a class constant there)
_compressed_classes: dict[type, bool] = {}


def _is_scipy_compressed(kind: type) -> bool:
    found = _compressed_classes.get(kind)
    if found is None:
        found = _compressed_classes[kind] = kind.__module__.startswith("scipy.sparse") and \
            getattr(kind, "_format", None) in _SCIPY_COMPRESSED
    return found


def _uniform(operands: tuple, dtype: np.dtype | None = None) -> tuple | None:
    """A plain call's NumPy arrays and scipy CSR/CSC matrices in C order and one dtype (NumPy's
    result type of theirs, or ``dtype``, a compiled kernel's, where each casts to it safely),
    or None where they are so already, or where any operand is another kind or dtype. The
    general path computes mixed dtypes in that type and reads other layouts through a
    C-ordered copy (bit for bit the same result); made uniform first, a repeated call
    replays (an SpMV of a float32 matrix and a float64 vector: ~100 -> ~10 µs a call).

    >>> a = np.ones((2, 2), np.float32)
    >>> [(x.dtype.name, x.flags.c_contiguous) for x in _uniform((a, np.ones((2, 2)).T))]
    [('float64', True), ('float64', True)]
    >>> _uniform((a, a)) is None
    True
    >>> [x.shape for x in _uniform((np.ones((2, 4))[:, ::2], np.full((), 2.0)))]  # 0-d stays
    [(2, 2), ()]
    """
    dtypes = set()
    ordered = True
    for operand in operands:
        kind = type(operand)
        if kind is np.ndarray:
            ordered = ordered and operand.flags.c_contiguous
        elif not _is_scipy_compressed(kind) or operand.ndim != 2:
            return None
        dtypes.add(operand.dtype)
    if dtype is not None:
        if dtypes == {dtype} and ordered or not dtypes <= _UNIFORM_DTYPES or \
                not all(np.can_cast(d, dtype, "safe") for d in dtypes):
            return None
        common = dtype
    else:
        if len(dtypes) == 1 and ordered or not dtypes <= _UNIFORM_DTYPES or \
                (not ordered and _all_fortran(operands)):   # NumPy's order="K": Fortran out
            return None
        common = np.result_type(*dtypes)
    if common not in _UNIFORM_DTYPES:
        return None
    # (np.asarray with order="C", not np.ascontiguousarray, which makes a 0-d array 1-d)
    return tuple(np.asarray(op, dtype=common, order="C") if type(op) is np.ndarray else
                 op if op.dtype == common else _with_values(op, op.data.astype(common))
                 for op in operands)


def _coo_signature(subscripts: Any, operands: tuple, backend: Any) -> tuple | None:
    """What einsum calls with scipy COO operands share whose kernels read those alike in
    any order or not (``KernelCache.any_order``): the subscripts, the backend, and each
    operand's kind (COO, or the class of anything else); None for a call without a COO
    operand.

    >>> import scipy.sparse as sp
    >>> _coo_signature("ij,j->i", (sp.coo_array(np.eye(2)), np.ones(2)), None)[2:]
    ('coo', <class 'numpy.ndarray'>)
    """
    kinds = tuple("coo" if getattr(type(op), "_format", None) == "coo" and
                  type(op).__module__.startswith("scipy.sparse") else type(op)
                  for op in operands)
    if "coo" not in kinds or not isinstance(subscripts, str) or \
            (backend is not None and type(backend) is not str):
        return None
    return (subscripts, backend, *kinds)


def _csr_operands(operands: tuple, keep_coo: bool = False) -> tuple | None:
    """``operands`` with each 2-D scipy COO array or matrix (unless ``keep_coo``: the call's
    kernel may read it unsorted, ``_bind_any_order``) as a canonical CSR one of the same
    family (``runtime/canonical.py``: compiled counting sorts, duplicates summed), and each
    DIA, BSR, LIL or DOK one as scipy's ``tocsr`` makes it (what the general path binds them
    as), or None where there is none. Such an operand otherwise takes the general path on
    every call (a COO: sorted, then bound as a COO tensor, 6 ms for 1e5 entries before the
    compiled sort, measured); as CSR the call replays the CSR kernel (~0.8 ms for the same
    COO, most of it the sort; ~0.2 ms when its entries are in order already). A result that
    is sparse comes back as CSR, as it did before. A malformed COO is left as it is, for the
    general path to name.

    >>> import scipy.sparse as sp
    >>> m = sp.coo_array(([1.0, 2.0, 4.0], ([1, 0, 1], [0, 1, 0])), shape=(2, 2))
    >>> s = _csr_operands((m, np.ones(2)))[0]
    >>> s.format, s.toarray().tolist(), s.has_canonical_format
    ('csr', [[0.0, 2.0], [5.0, 0.0]], True)
    """
    found = None
    for k, operand in enumerate(operands):
        kind = getattr(type(operand), "_format", None)
        if kind not in _TO_CSR or not type(operand).__module__.startswith("scipy.sparse") or \
                operand.ndim != 2 or (keep_coo and kind == "coo"):
            continue
        import scipy.sparse as sp  # loaded already: the operand is one of its classes

        if kind != "coo":
            if operand.dtype not in VALUE_DTYPES:
                continue
            csr = operand.tocsr()
        else:
            done = _sorted_scipy_coo(operand, rows=False)
            if done is None:
                continue
            family = sp.csr_matrix if isinstance(operand, sp.spmatrix) else sp.csr_array
            csr = family((done.vals, done.crd[1], done.pos), shape=operand.shape, copy=False)
            csr.has_canonical_format = True
            kernel_cache().validator.trust(csr.indptr, csr.indices, operand.shape[1])
        found = list(operands) if found is None else found
        found[k] = csr
    return None if found is None else tuple(found)


_TO_CSR = frozenset({"coo", "dia", "bsr", "lil", "dok"})


def _with_values(matrix: Any, data: np.ndarray) -> Any:
    """A scipy CSR/CSC matrix sharing ``matrix``'s index arrays and format flags, holding
    ``data`` (of the same length) as its values: ``astype`` builds and checks a new matrix
    (~30 µs), a shallow copy does not (~3 µs), and the replay's check of the shared indices
    still holds.

    >>> import scipy.sparse as sp
    >>> m = sp.eye_array(2, format="csr")
    >>> twice = _with_values(m, m.data * 2)
    >>> twice.toarray().tolist(), twice.indices is m.indices, m.data.tolist()
    ([[2.0, 0.0], [0.0, 2.0]], True, [1.0, 1.0])
    """
    clone = shallow_copy(matrix)
    clone.data = data
    return clone


# dtypes whose mixtures the general path computes in NumPy's result type (bool, small ints and
# float16 are widened by runtime/widen.py instead)
_UNIFORM_DTYPES = {np.dtype(t) for t in (np.float32, np.float64, np.int32, np.int64,
                                         np.complex64, np.complex128)}


# What each argument of a replayed call is (see _Dispatch.recipe and runtime/replay.py).
(_ARG_SIZE, _ARG_DENSE, _ARG_DATA, _ARG_INDPTR, _ARG_INDICES, _ARG_OUT, _ARG_BEGIN,
 _ARG_CAPACITY, _ARG_OUT_SIZES, _ARG_OUT_HANDLE) = (
    ARG_SIZE, ARG_DENSE, ARG_DATA, ARG_INDPTR, ARG_INDICES, ARG_OUT, ARG_BEGIN, ARG_CAPACITY,
    ARG_OUT_SIZES, ARG_OUT_HANDLE)


@dataclass(frozen=True, slots=True, eq=False)
class _Dispatch:
    """Everything an earlier einsum call decided, replayed for operands of the same kinds.

    ``run`` returns None whenever anything differs from the general path's assumptions (a
    non-canonical scipy matrix, mismatched sizes, work large enough to split over threads):
    the general path then handles the call and raises its precise errors. Otherwise it packs
    the kernel's arguments straight from the operands by ``recipe`` (one ``(what, operand,
    mode)`` per kernel parameter), skipping the Tensor wrappers: a small call's cost is
    dispatch, and on a 500x500 SpMV this path took ~15-20 µs where the general one took
    ~35-45 (ad hoc, same process).
    """

    compiled: CompiledProgram
    names: tuple[str, ...]
    kinds: tuple[str, ...]
    equal_sizes: tuple[tuple[int, int, int, int], ...]   # (operand, mode) pairs that must agree
    out_dims: tuple[tuple[int, int], ...]                 # output size k = operand's mode
    value_dtype: np.dtype
    recipe: tuple[tuple[int, int, int], ...]
    splittable: bool                                      # may run over several threads
    handles: tuple[str, ...] = ()       # a sparse output's buffers (_ARG_OUT_HANDLE's mode)
    families: tuple[str, ...] = ()      # the operands' families: what a sparse result becomes
    requested: Format | None = None     # the output format asked for (a compiled kernel's)
    fast: Any = None                    # the recipe written out (runtime/replay.py), if it can be
    # Dense operands the kernel reads in another mode order (lowering's conversions, such as
    # SDDMM's Y(k,j) read along k): (operand, order), copied so before each call.
    relayouts: tuple[tuple[int, tuple[int, ...]], ...] = ()
    # A sparse output that shares a compressed operand's pattern (lower/pattern.py): that
    # operand's position, and the (operand, mode) sizes of the indices summed per entry.
    pattern: int = -1
    reduced: tuple[tuple[int, int], ...] = ()
    # A two-factor sparse product's (P, Q) positions (_bounding_pair): its output holds at
    # most nnz(Q) * (P's longest row) entries, which decides whether int32 positions hold it.
    bounded_by: tuple[int, int] | None = None
    # The output holds at most the compressed operands' stored entries together (a sum, an
    # elementwise product: _stored_bound).
    within_stored: bool = False

    def _narrow_fits(self, operands: tuple, shape: tuple[int, ...]) -> bool:
        """Whether a kernel assembling int32 indices (``_out_index_dtype``) holds this call's
        output: its shape has fewer than 2**31 - 1 elements, or its dimensions fit and the
        product's bound on its entries does."""
        if self.compiled.key.out_index_dtype != _INT32 or math.prod(shape) < 2**31 - 1:
            return True
        if max(shape, default=0) >= 2**31 - 1:
            return False
        if self.within_stored:
            return sum(op.indices.shape[0] for kind, op in zip(self.kinds, operands)
                       if kind == _COMPRESSED) < 2**31 - 1
        if self.bounded_by is None:
            return False
        rows, other = (operands[k] for k in self.bounded_by)
        return other.indices.shape[0] * _longest(rows.indptr) < 2**31 - 1

    def run(self, operands: tuple) -> Any:
        if self.fast is not None:
            return self.fast(operands)
        if len(operands) != len(self.names):
            return None
        for a, mode_a, b, mode_b in self.equal_sizes:
            if operands[a].shape[mode_a] != operands[b].shape[mode_b]:
                return None
        cache = kernel_cache()
        for kind, operand in zip(self.kinds, operands):
            if kind == _COMPRESSED and not _sound_compressed(operand, cache.validator):
                return None
        shape = tuple(operands[k].shape[mode] for k, mode in self.out_dims)
        if self.handles and not self._narrow_fits(operands, shape):
            return None
        entries = self._entry_bounds(operands, shape)
        # A sparse product's work is its multiply-adds (bounded here by the entries it may
        # make), which the operands' stored entries undercount many times over. One whose
        # rows are counted first splits like a dense output, where its rows are long enough
        # (_thread_ranges).
        counted = self.compiled.counted_by is not None and entries is not None
        product = 0 if entries is None else \
            product_work(int(entries[-1]), len(entries) - 1, counted)
        if self.splittable and cache.threads.threads > 1:
            work = product if counted else max(self._work(operands, shape), product)
            if cache.threads.parts(work, native=counted and native_pool_supported()) > 1 or \
                    _counted_sum(self.compiled) and cache.threads.splits_sum(work):
                return None
        buffers = OutputBuffers()
        if self.pattern >= 0:
            alloc = np.empty if self.compiled.overwrites else np.zeros
            out = alloc(operands[self.pattern].indices.shape[0], dtype=self.value_dtype)
        elif self.handles:
            buffers.sizes = np.zeros(self.compiled.program.output.rank, dtype=np.int64)
            buffers.capacity = first_capacity(entries, first_guess(
                [op.indices.shape[0] for kind, op in zip(self.kinds, operands) if kind != _DENSE],
                [op.size for kind, op in zip(self.kinds, operands) if kind == _DENSE]))
            out = buffers.sizes
        else:
            size = math.prod(shape)
            # A kernel that assigns every output element needs no zeroed buffer (an SpMV
            # into 10^5 rows spent 25-90 µs of its ~700 in np.zeros).
            alloc = np.empty if self.compiled.overwrites else np.zeros
            out = alloc(max(1, size) if not shape else size, dtype=self.value_dtype)
        stored = operands
        if self.relayouts:
            if not copies_pay(self.compiled, dict(zip(self.names, operands))):
                return None     # the general path runs the variant that copies nothing
            stored = list(operands)
            for k, order in self.relayouts:
                stored[k] = np.ascontiguousarray(operands[k].transpose(order))
        args: list = []
        for what, k, mode in self.recipe:
            operand = operands[k] if k >= 0 else None
            if what == _ARG_SIZE:
                args.append(operand.shape[mode])
            elif what == _ARG_OUT_HANDLE:
                handle = buffers.handles[self.handles[mode]] = ctypes.c_void_p(0)
                args.append(ctypes.addressof(handle))
            elif what == _ARG_CAPACITY:
                args.append(buffers.capacity)
            elif what == _ARG_DENSE:
                args.append(data_address(stored[k] if mode else operand))
            elif what == _ARG_DATA:
                args.append(data_address(operand.data))
            elif what == _ARG_INDPTR:
                args.append(data_address(operand.indptr))
            elif what == _ARG_INDICES:
                args.append(data_address(operand.indices))
            elif what in (_ARG_OUT, _ARG_OUT_SIZES):
                args.append(data_address(out))
            else:
                args.append(0)
        compiled = self.compiled if self.compiled.rows is None else \
            _row_kernel(self.compiled, operands[self.names.index(self.compiled.rows[0])].indptr)
        if compiled.kernel(*args) != 0:
            release(buffers)
            raise KernelRuntimeError(f"the kernel for {self.compiled.key.statement} could not "
                                     f"allocate memory for its output")
        if self.pattern >= 0:
            return _finish_pattern(self, out, operands[self.pattern], shape)
        if self.handles:
            output = self.compiled.program.output
            tensor = delivered(self.compiled.program, sparse_result(
                shape, output.format, output.index_dtype, self.value_dtype, buffers))
            return _wrap(tensor, self.requested, list(self.families), None)
        result = out.reshape(shape)
        return result[()] if result.ndim == 0 else result

    def _entry_bounds(self, operands: tuple, shape: tuple[int, ...]) -> np.ndarray | None:
        """``threads.entry_bounds`` of a sparse product's output rows, or None."""
        work = self.compiled.entries_by
        if not self.handles or work is None or not work.products or len(shape) != 2:
            return None
        views = {name: _LevelView(op) for name, kind, op
                 in zip(self.names, self.kinds, operands) if kind == _COMPRESSED}
        if any(name not in views for pair in work.products for name in pair):
            return None
        return entry_bounds(work, views, shape[self.compiled.program.output.format.order[-1]],
                            counter=kernel_cache().reach)

    def _work(self, operands: tuple, shape: tuple[int, ...]) -> int:
        sparse = [op.indices.shape[0] for kind, op in zip(self.kinds, operands)
                  if kind == _COMPRESSED]
        dense_sizes = [op.size for kind, op in zip(self.kinds, operands) if kind == _DENSE]
        if self.pattern >= 0:
            return pattern_work(work_of(sparse, dense_sizes, None), math.prod(
                operands[k].shape[mode] for k, mode in self.reduced))
        # A sparse output's entries come from the stored ones: there is no dense row to fill
        # per stored entry (as ``execute`` estimates it); counting one made every CSR add of a
        # few thousand entries look worth two threads and leave this path for the general one.
        return work_of(sparse, dense_sizes, None if self.handles else shape)


def _sound_compressed(operand: Any, validator: StorageValidator) -> bool:
    """Whether a scipy CSR/CSC matrix's arrays can be used in place: consistent lengths,
    contiguous values, scipy's canonical flag, and column (row) indices in bounds, checked by
    the compiled validator (which remembers arrays it has passed while they live)."""
    indptr, indices, data = operand.indptr, operand.indices, operand.data
    major, minor = operand.shape if operand.format == "csr" else operand.shape[::-1]
    # Arrays of other dtypes (floats written into indices) take formats.bind's checks.
    return indptr.dtype in _INDEX_DTYPES and indices.dtype == indptr.dtype and \
        indptr.shape[0] == major + 1 and indices.shape[0] == data.shape[0] and \
        data.flags.c_contiguous and operand.has_canonical_format and \
        validator.compressed(indptr, indices, minor, check_order=False) == VALID


def _remember(signature: tuple, compiled: CompiledProgram, stmt: Assignment,
              names: Sequence[str], operands: tuple, bound: dict[str, Tensor],
              store: dict[tuple, Any] | None = None, requested: Format | None = None
              ) -> _Dispatch | None:
    """Record a plain call, so that the next one skips the decisions (in ``store``: the kernel
    cache's einsum table unless given). ``operands[k]`` is the tensor ``names[k]`` of
    ``stmt``; each must have been bound in its own format (a dense array dense, a scipy CSR
    matrix as CSR), not converted. A sparse result is assembled from the kernel's buffers as
    the general path does, in the format ``requested`` (None: the one the kernel made).
    Returns the entry recorded, if any."""
    if compiled.kernel.pending:
        # A replay skips execute's check of the call's size: recorded once the optimised
        # code is in place (codegen/tiered.py), the next call records it.
        return None
    asked = compiled.plan.parallel
    # A replay splits as the work decides (``_replayed_split``), which is what a schedule's
    # ``parallelize(i)`` asks of a dense output or a pattern's values; a stated thread count,
    # or a sparse output that such a schedule counts and splits, keeps the general path.
    if asked is not None and (asked.threads is not None or
                              not (compiled.program.output.format.is_dense or
                                   compiled.program.pattern is not None)):
        return None
    if any(t.dtype != compiled.key.value_dtype for t in bound.values()):
        return None
    kinds = tuple(_DENSE if type(op) is np.ndarray else _COMPRESSED for op in operands)
    relayouts, aliases = [], {}
    for alias, source in compiled.program.conversions:
        target = compiled.program.tensor(alias).format
        k = names.index(source) if source in names else -1
        if k < 0 or kinds[k] != _DENSE or not target.is_dense:
            return None          # a sparse operand converted: the general path does it
        relayouts.append((k, tuple(target.order)))
        aliases[alias] = k
    for name, kind, operand in zip(names, kinds, operands):
        natural = dense(operand.ndim) if kind == _DENSE else \
            _SCIPY_COMPRESSED.get(getattr(operand, "format", None))
        if bound[name].format != natural:
            return None
    position = {name: k for k, name in enumerate(names)}
    where, equal, out_dims = _index_uses(stmt, position.__getitem__)
    pattern, reduced = -1, ()
    if compiled.program.pattern is not None:
        if compiled.program.pattern not in position:
            return None              # the pattern's operand converted: the general path
        pattern = position[compiled.program.pattern]
        # the program may have been compiled for a statement that names its indices otherwise
        # (the cache shares one among statements equal up to index names): speak in this one's
        mine = dict(zip(compiled.names, index_order(stmt))) if compiled.names else {}
        reduced = tuple(where[mine.get(index, index)][0]
                        for index in compiled.program.nests[-1].reduced)
    handles = tuple(name for role, name, _ in compiled.arguments.steps if role == OUT_HANDLE)
    recipe = _recipe(compiled, names, kinds, handles, aliases)
    if recipe is None:
        return None
    table = kernel_cache().dispatch if store is None else store
    pair = _bounding_pair(stmt, {name: t.format for name, t in bound.items()}) \
        if handles else None
    entry = _Dispatch(
        compiled, tuple(names), kinds, equal, out_dims, compiled.key.value_dtype, recipe,
        compiled.arguments.range_slots is not None, handles,
        tuple(input_family(op) for op in operands), requested, relayouts=tuple(relayouts),
        pattern=pattern, reduced=reduced,
        bounded_by=None if pair is None else (position[pair[0]], position[pair[1]]),
        within_stored=bool(handles) and _stored_bound(stmt, bound) is not None)
    if _writable(entry):
        # signature: subscripts, backend, one part per operand, then any schedule's part
        # (_scheduled); a scheduled call's replay is never the one a plain call tries first.
        entry = dataclasses.replace(entry, fast=_replay_of(entry, signature[2:2 + len(names)]))
        if store is None and len(signature) == 2 + len(names):
            _recent_replay(signature[0] if signature[1] is None else signature[:2], entry.fast)
    table[signature] = entry
    return entry


def _writable(entry: _Dispatch) -> bool:
    """Whether ``entry``'s call can be written out as one function (``_replay_of``)."""
    # A sparse product's first capacity and thread split come from its rows' bounds
    # (_Dispatch._entry_bounds), which the written-out call does not compute.
    compiled = entry.compiled
    products = entry.handles and compiled.entries_by is not None and \
        compiled.entries_by.products
    return not products and replayable(entry.recipe, sparse=bool(entry.handles))


def _recent_replay(subscripts: str | tuple[str, str], fast: Any) -> None:
    """Make ``fast`` (a replay that checks its operands' kinds itself) the first one a plain
    ``einsum(subscripts, ...)`` tries, before computing the call's signature; ``subscripts``
    is ``(subscripts, backend)`` for a call that names its backend."""
    recent = kernel_cache().recent
    if len(recent) >= _RECENT_LIMIT:
        recent.clear()
    recent[subscripts] = fast


_RECENT_LIMIT = 1024


def _replay_of(entry: _Dispatch, guards: tuple) -> Any:
    """``entry``'s recipe written out as one straight-line function (runtime/replay.py) that
    checks its operands are of the kinds ``guards`` names (the call signature's parts)."""
    cache = kernel_cache()
    compiled = entry.compiled

    def fail() -> None:
        raise KernelRuntimeError(f"the kernel for {compiled.key.statement} could not allocate "
                                 f"memory for its output")

    return replay_function(entry.recipe, entry.kinds, entry.equal_sizes, entry.out_dims,
                           entry.value_dtype, compiled.overwrites,
                           compiled.kernel.call or compiled.kernel.function,
                           lambda matrix: _sound_compressed(matrix, cache.validator),
                           cache.threads if entry.splittable else None, fail,
                           _replayed_split(entry) if entry.splittable and not entry.handles
                           else None, guards,
                           _sparse_output(entry) if entry.handles else None,
                           entry.relayouts, _pattern_output(entry) if entry.pattern >= 0 else None,
                           _copies_guard(entry) if entry.relayouts else None,
                           _row_chooser(entry) if compiled.rows is not None else None,
                           _kept_replay(entry, guards) if entry.relayouts else None,
                           relaid)


# From this many values an operand the kernel reads in another mode order is copied by the
# compiler's own transposition (``relaid``); below, NumPy's copy costs less than a call.
RELAYOUT_MIN_VALUES = 1 << 14


def relaid(array: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """``array`` copied C-contiguous in the mode order ``order`` (``array.transpose(order)``),
    as a kernel reads an operand it stores transposed (``concretize.dense_score``).

    From ``RELAYOUT_MIN_VALUES`` values the copy is the compiler's own kernel for the
    transposition, tiled by cache lines and run on the kernel threads: 0.15-0.24 ns a value
    against NumPy's 0.3-0.9 on this kind of machine (float32, 2^16-2^20 values, two threads,
    ad hoc, 2026-12-06).

    >>> relaid(np.arange(6.0).reshape(2, 3), (1, 0)).tolist()
    [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    """
    if array.size < RELAYOUT_MIN_VALUES or array.dtype not in VALUE_DTYPES or \
            not array.flags.c_contiguous or array.ndim > 26:
        return numpy_relayout(array, order)
    letters = "abcdefghijklmnopqrstuvwxyz"[:array.ndim]
    return einsum(f"{letters}->{''.join(letters[m] for m in order)}", array)


def _kept_replay(entry: _Dispatch, guards: tuple) -> Callable[[tuple], Any]:
    """The replay of ``entry``'s kernel variant that reads its relaid operands as they come
    (``KernelCache.kept``), for the calls whose copies do not pay: written out at the first
    such call (None until then, and while that variant is not optimised yet: the general path
    runs it)."""
    made: list[Callable[[tuple], Any]] = []

    def run(operands: tuple) -> Any:
        if not made:
            kept = kernel_cache().kept(entry.compiled)
            if kept.kernel.pending or kept.program.conversions:
                return None
            recipe = _recipe(kept, entry.names, entry.kinds, entry.handles, {})
            if recipe is None:
                return None
            variant = dataclasses.replace(
                entry, compiled=kept, recipe=recipe, relayouts=(), fast=None,
                splittable=kept.arguments.range_slots is not None)
            made.append(_replay_of(variant, guards) if _writable(variant) else variant.run)
        return made[0](operands)

    return run


def _row_chooser(entry: _Dispatch) -> tuple[int, Callable[[Any], Any]]:
    """``(operand, choose)`` for a replay of a kernel with ``rows``: ``choose(matrix)`` gives
    the kernel callable (the kernel's, or its masked variant's) for that scipy matrix."""
    compiled = entry.compiled
    plain = compiled.kernel.call or compiled.kernel.function

    def choose(matrix: Any) -> Any:
        chosen = _row_kernel(compiled, matrix.indptr)
        return plain if chosen is compiled else chosen.kernel.call or chosen.kernel.function

    return entry.names.index(compiled.rows[0]), choose


def _copies_guard(entry: _Dispatch) -> Callable[[tuple], bool]:
    """``copies_pay`` for a replay's operands (in ``entry.names`` order)."""
    compiled, names = entry.compiled, entry.names
    return lambda operands: copies_pay(compiled, dict(zip(names, operands)))


def _pattern_output(entry: _Dispatch) -> PatternOutput:
    """How a replayed call makes ``entry``'s output of values at a compressed operand's
    positions (``_finish_pattern``, as ``_Dispatch.run`` finishes it)."""
    return PatternOutput(entry.pattern, entry.reduced, functools.partial(_finish_pattern, entry))


def _replayed_partials(entry: _Dispatch) -> Any:
    """A replayed call of a reduction into partial outputs (``reduction=partials``) with work
    enough for threads: split as ``_thread_ranges`` would split it (evenly, no more ranges
    than threads, none its copies do not pay for), or run whole."""
    compiled = entry.compiled
    plan = compiled.arguments
    begin, end = plan.range_slots   # type: ignore[misc]
    slot = next(k for k, step in enumerate(plan.steps) if step[0] == OUT_DENSE)
    itemsize = compiled.key.value_dtype.itemsize

    def split(operands: tuple, args: list) -> int:
        shape = tuple(operands[k].shape[mode] for k, mode in entry.out_dims)
        size = args[end] - args[begin]
        threads = kernel_cache().threads
        work = entry._work(operands, shape)
        parts = _partial_parts(min(threads.parts(work, native_pool_supported()), size),
                               work, shape)
        if parts <= 1:
            return compiled.kernel(*args)
        count = max(1, math.prod(shape))
        output = np.frombuffer((ctypes.c_char * (count * itemsize)).from_address(args[slot]),
                               dtype=compiled.key.value_dtype)
        return _run_partials(compiled, args, range_bounds(size, parts, None, 1) + args[begin],
                             output)

    return split


def _finish_pattern(entry: _Dispatch, values: np.ndarray, source: Any,
                    shape: tuple[int, ...]) -> Any:
    """The result of a replayed call that wrote ``values`` at the positions of ``source``, the
    scipy matrix whose pattern the output shares, in the family of ``entry``'s operands."""
    program = entry.compiled.program
    output = program.output
    tensor = delivered(program, pattern_result(
        shape, output.format, output.index_dtype,
        (_DENSE_LEVELS[0], LevelArrays(source.indptr, source.indices)), values))
    return _wrap(tensor, entry.requested, list(entry.families), None)


def _sparse_output(entry: _Dispatch) -> SparseOutput:
    """How a replayed call makes and finishes ``entry``'s sparse output, as ``_Dispatch.run``
    does."""
    program = entry.compiled.program
    output = program.output
    rank, handles = output.rank, entry.handles

    def buffers(capacity: int) -> OutputBuffers:
        return OutputBuffers(handles={name: ctypes.c_void_p(0) for name in handles},
                             sizes=np.zeros(rank, dtype=np.int64), capacity=capacity)

    def finish(made: OutputBuffers, shape: tuple[int, ...]) -> Any:
        tensor = delivered(program, sparse_result(shape, output.format, output.index_dtype,
                                                  entry.value_dtype, made))
        return _wrap(tensor, entry.requested, list(entry.families), None)

    # int32 positions: a later call on a shape past 2**31 elements replays only while the
    # operands' stored entries bound its output and fit; else the general path decides again
    return SparseOutput(buffers, finish, release, handles,
                        narrow=entry.compiled.key.out_index_dtype == _INT32,
                        within_stored=entry.within_stored,
                        counted_sum=_counted_sum(entry.compiled))


def _replayed_split(entry: _Dispatch) -> Any:
    """A replayed call's run over thread ranges, as ``_thread_ranges`` and ``_launch`` split a
    call of the general path: ``split(operands, args)`` returns the kernel's status, or None
    where the general path must decide (a reduction into per-thread partial outputs). It spared
    a split SpMM the general path's ~30-50 µs of binding and planning per call."""
    compiled = entry.compiled
    plan = compiled.arguments
    if plan.range_slots is None:
        return None
    if compiled.plan.partials:
        return _replayed_partials(entry)
    names = entry.names
    rows = -1 if compiled.rows is None else names.index(compiled.rows[0])
    end_slot = plan.range_slots[1]
    step = compiled.plan.range_step(plan.range_index)

    # The last call's ranges, by what they were made from: a repeated call on the same matrix
    # reuses them. Made after a kernel has swept the caches, they cost ~100 µs of cold Python
    # a call (a 2-thread SpMM on a 1e5-entry matrix ran slower than on one thread). Ranges
    # made from arrays since changed in place still cover [0, size) in order: still exact.
    last: list = [(None, None)]       # one (key, bounds) pair, read and replaced whole

    def split(operands: tuple, args: list) -> int | None:
        threads = kernel_cache().threads
        size = args[end_slot]
        shape = tuple(operands[k].shape[mode] for k, mode in entry.out_dims)
        native = native_pool_supported()
        key = (size, shape, native, threads.threads, *(
            id(op.indptr) for kind, op in zip(entry.kinds, operands) if kind == _COMPRESSED))
        made = last[0]               # one read: another thread may replace it meanwhile
        if made[0] == key:
            bounds = made[1]
        else:
            bounds = _split_bounds(operands, size, shape, native, threads)
            last[0] = (key, bounds)
        chosen = compiled if rows < 0 else _row_kernel(compiled, operands[rows].indptr)
        if bounds is None:
            return chosen.kernel(*args)
        runner = _native_split(chosen, len(bounds) - 1)
        if runner is not None:
            return runner(args, bounds)
        function = chosen.kernel.function
        return max(threads.run(lambda part: function(*part), args, plan.range_slots, bounds))

    def _split_bounds(operands: tuple, size: int, shape: tuple, native: bool,
                      threads: KernelThreads) -> np.ndarray | None:
        """The ranges a call runs over; None: one call, unsplit."""
        work = entry._work(operands, shape)
        least = min_rows_per_thread(all(kind == _DENSE for kind in entry.kinds), work, size)
        parts = min(threads.parts(work, native), size // least)
        if native and parts > 1 and NativeSplit.supports(compiled.kernel.function):
            parts = max(parts, min(parts * NATIVE_RANGES_PER_THREAD, size // least))
        if parts <= 1:
            return None
        views = {name: _LevelView(op) for name, kind, op in zip(names, entry.kinds, operands)
                 if kind == _COMPRESSED}
        weights = row_weights(compiled.balance_by, views) \
            if compiled.balance_by is not None and not compiled.balance_by.products else None
        bounds = range_bounds(size, parts, weights, step)
        return bounds if len(bounds) > 2 else None

    return split


class _LevelView:
    """A scipy compressed matrix as ``row_weights`` reads a Tensor: ``levels[1]``'s ``pos``
    and ``crd``."""

    __slots__ = ("levels", "pos", "crd")

    def __init__(self, matrix: Any) -> None:
        self.pos, self.crd = matrix.indptr, matrix.indices
        self.levels = (None, self)


def _recipe(compiled: CompiledProgram, names: Sequence[str], kinds: tuple[str, ...],
            handles: tuple[str, ...] = (), aliases: Mapping[str, int] | None = None
            ) -> tuple[tuple[int, int, int], ...] | None:
    """The kernel's arguments as ``(what, operand, mode)`` read from the operands themselves,
    or None when some argument is not one of those (the call then keeps the general path).
    ``aliases`` names dense operands' relaid copies (by operand): their values are read as
    ``(_ARG_DENSE, operand, 1)``, from the copy."""
    position = {name: k for k, name in enumerate(names)}
    position.update(aliases or {})
    size_from = {index: (position[name], mode) for name, mode, index in compiled.sizes}
    recipe = []
    for role, name, level in compiled.arguments.steps:
        k = position.get(name, -1)
        if role == SIZE:
            recipe.append((_ARG_SIZE, *size_from[name]))
        elif role == VALS and k >= 0 and aliases and name in aliases:
            recipe.append((_ARG_DENSE, k, 1))
        elif role == VALS and k >= 0:
            recipe.append((_ARG_DENSE if kinds[k] == _DENSE else _ARG_DATA, k, 0))
        elif role == POS and k >= 0 and kinds[k] == _COMPRESSED and level == 1:
            recipe.append((_ARG_INDPTR, k, 0))
        elif role == CRD and k >= 0 and kinds[k] == _COMPRESSED and level == 1:
            recipe.append((_ARG_INDICES, k, 0))
        elif role == POS and k >= 0 and kinds[k] == ENTRIES and level == 0:
            recipe.append((ARG_ENTRIES_POS, k, 0))
        elif role == CRD and k >= 0 and kinds[k] == ENTRIES:
            recipe.append((ARG_ENTRIES_CRD, k, level))
        elif role == OUT_DENSE:
            recipe.append((_ARG_OUT, -1, 0))
        elif role == OUT_HANDLE:
            recipe.append((_ARG_OUT_HANDLE, -1, handles.index(name)))
        elif role == OUT_SIZES:
            recipe.append((_ARG_OUT_SIZES, -1, 0))
        elif role == CAPACITY:
            recipe.append((_ARG_CAPACITY, -1, 0))
        elif role == RANGE and name == "begin":
            recipe.append((_ARG_BEGIN, -1, 0))
        elif role == RANGE and compiled.arguments.range_over is None and \
                compiled.arguments.range_index in size_from:
            recipe.append((_ARG_SIZE, *size_from[compiled.arguments.range_index]))
        elif role == RANGE and name == "end" and \
                (over := position.get(compiled.arguments.range_over, -1)) >= 0 and \
                kinds[over] == ENTRIES:
            # a range over a COO operand's entries (read in any order) ends at its count
            recipe.append((ARG_ENTRIES_COUNT, over, 0))
        else:
            return None
    return tuple(recipe)


@functools.lru_cache(maxsize=512)
def _parse_einsum(subscripts: str, ranks: tuple[int, ...]) -> tuple[Assignment, str]:
    stmt = parse_einsum(subscripts, ranks)
    return stmt, canonical_text(stmt)


@functools.lru_cache(maxsize=64)
def _einsum_names(count: int) -> tuple[str, ...]:
    from tensoralg.notation import operand_name

    return tuple(operand_name(k) for k in range(count))


def _rank(operand: Any, k: int) -> int:
    # (scipy's dok matrices are dicts too, and tensors)
    if operand is None or isinstance(operand, (str, bytes)) or type(operand) is dict:
        raise UnsupportedError(f"operand {k}: a {type(operand).__name__} is not a tensor; pass "
                               f"a NumPy array, a scipy.sparse matrix or a ta.Tensor")
    shape = getattr(operand, "shape", None)
    if shape is None:
        if isinstance(operand, (int, float, np.number)):
            return 0
        try:
            return np.ndim(operand)
        except Exception:  # noqa: BLE001 - any failure means "not an array"
            raise UnsupportedError(f"operand {k}: cannot use {type(operand).__name__} as a "
                                   f"tensor") from None
    return len(shape)


def _format_overrides(formats: Any, count: int, subscripts: str = "",
                      operands: tuple = ()) -> dict[int, Any]:
    if formats is None:
        return {}
    if isinstance(formats, str) and formats == "auto":
        formats = ["auto"] * count
    if isinstance(formats, Mapping):
        if not all(isinstance(k, (int, np.integer)) for k in formats):
            raise InputError(f"einsum's formats are keyed by operand position (0, 1, ...): "
                             f"{list(formats)!r} (ta.compile names its operands)")
        overrides = {int(k): v for k, v in formats.items()}
    elif isinstance(formats, (list, tuple)):
        if len(formats) != count:
            raise ShapeError(f"formats has {len(formats)} entries but einsum has {count} "
                             f"operands; give one entry per operand (None keeps its format)")
        overrides = dict(enumerate(formats))
    else:
        raise UnsupportedError("formats must be \"auto\", a list with one entry per operand, "
                               "or a dict from operand position to format")
    for k in overrides:
        if not 0 <= k < count:
            raise ShapeError(f"formats names operand {k}, but einsum has {count} operands")
    if any(isinstance(v, str) and v == "auto" for v in overrides.values()):
        if _auto_formats is None:
            raise UnsupportedError("formats='auto' needs tensoralg.select (import tensoralg)")
        chosen, explanation = _auto_formats(subscripts, operands, overrides)
        overrides.update(chosen)
        _log.info("%s: %s", subscripts, explanation)
    return {k: v for k, v in overrides.items() if v is not None and v != "auto"}


# formats="auto": a function (subscripts, operands, formats) -> (position -> format or None,
# explanation). The format-selection room sits on this API, so it registers itself here when
# tensoralg is imported (select/auto.py) instead of being imported from below.
_auto_formats: Callable[[str, tuple, Any], tuple[dict[int, Any], str]] | None = None
_log = logging.getLogger("tensoralg")


# -- dask hook: (einsum handler, kernel handler), installed by tensoralg/dask/ at import. api.py
# never imports dask: an operand is recognised by its class's module, so calls without dask
# operands pay one attribute read per operand.
_dask_handlers: tuple[Callable[[tuple, dict[str, Any]], Any],
                      Callable[["Kernel", dict[str, Any]], Any]] | None = None


_dask_classes: dict[type, bool] = {}   # class -> whether it is dask's: a lookup per call


def _is_dask(operand: Any) -> bool:
    cls = type(operand)
    found = _dask_classes.get(cls)
    if found is None:
        found = _dask_classes[cls] = cls.__module__.startswith("dask.")
    return found


def set_dask_handlers(einsum_handler: Callable[[tuple, dict[str, Any]], Any] | None,
                      kernel_handler: Callable[["Kernel", dict[str, Any]], Any] | None = None
                      ) -> None:
    """Install what ``einsum`` and ``Kernel.__call__`` do with ``dask.array`` operands
    (``tensoralg.dask`` does, at import): ``einsum_handler(operands, options)`` gets the
    subscripts and operands as given and einsum's keyword arguments; ``kernel_handler(kernel,
    operands)`` the kernel and its operands by name. ``None`` removes them."""
    global _dask_handlers
    _dask_handlers = None if einsum_handler is None or kernel_handler is None else \
        (einsum_handler, kernel_handler)
# -- end of the dask hook


def set_auto_formats(resolver: Callable[[str, tuple, Any], tuple[dict[int, Any], str]] | None
                     ) -> None:
    """Install what ``formats="auto"`` asks (``tensoralg.select`` does, at import)."""
    global _auto_formats
    _auto_formats = resolver


def _bind(operand: Any, fmt: Any, what: str) -> Tensor:
    try:
        if type(operand) is np.ndarray and operand.dtype in VALUE_DTYPES and \
                operand.flags.c_contiguous:
            tensor = Tensor.trusted(operand.shape, dense(operand.ndim), _DENSE_LEVELS[
                :operand.ndim], operand.reshape(-1))   # zero-copy, nothing to validate
        else:
            tensor = _bind_compressed_scipy(operand) or _bind_coo(operand) or \
                summed_duplicates(bind(operand))
    except TensorAlgebraError as err:
        raise type(err)(f"{what}: {err}") from None
    if fmt is not None:
        wanted = resolve_format(fmt, tensor.ndim, what)
        if wanted != tensor.format:
            tensor = _converted(tensor, wanted)
    return tensor


_SCIPY_COMPRESSED = {"csr": CSR, "csc": CSC}
_DENSE_LEVELS = (LevelArrays(),) * 32


def _bind_compressed_scipy(operand: Any) -> Tensor | None:
    """Zero-copy binding of a canonical scipy CSR/CSC matrix, checked by a compiled validator.

    Returns None when the fast path does not apply (other classes, non-canonical or malformed
    arrays); ``formats.bind`` then canonicalizes a copy or raises a FormatError with details.
    """
    fmt = _SCIPY_COMPRESSED.get(getattr(operand, "format", None))
    if fmt is None or getattr(operand, "ndim", 2) != 2 or operand.dtype not in VALUE_DTYPES:
        return None
    if not _sound_compressed(operand, kernel_cache().validator):
        return None
    levels = (_DENSE_LEVELS[0], LevelArrays(operand.indptr, operand.indices))
    return Tensor.trusted(operand.shape, fmt, levels, operand.data)


def _bind_coo(operand: Any) -> Tensor | None:
    """A 2-D scipy COO array or matrix, or a pydata COO array of any rank, as a canonical COO
    tensor (sorted, each coordinate once) through the compiled counting sorts of
    ``runtime/canonical.py`` (scipy's ``tocsr`` sorts each row with a comparison sort: 2.2 ms
    against 0.2-0.6 ms for 1e5 entries; ``formats.pack``'s NumPy passes took 7 ms for a sorted
    1e5-entry pydata tensor, the sorter 0.25, measured); None for anything else, or where the
    arrays are malformed (``formats.bind`` then says what is wrong)."""
    done = _sorted_scipy_coo(operand, rows=True) if type(operand).__module__.startswith(
        "scipy.sparse") else _sorted_pydata_coo(operand)
    if done is None:
        return None
    shape = tuple(int(n) for n in operand.shape)
    pos = np.array([0, done.nnz], dtype=done.pos.dtype)
    levels = (LevelArrays(pos, done.crd[0]), *[LevelArrays(None, c) for c in done.crd[1:]])
    return Tensor.trusted(shape, _coo_format(len(shape)), levels, done.vals)


def _sorted_scipy_coo(operand: Any, rows: bool) -> Any:
    """``CoordinateSorter.sort`` of a 2-D scipy COO's entries, or None where ``operand`` is
    something else, holds values the sorter does not take, or has malformed arrays or
    coordinates outside its shape (the general path's checks then say which)."""
    if getattr(type(operand), "_format", None) != "coo" or \
            not type(operand).__module__.startswith("scipy.sparse") or operand.ndim != 2 or \
            not CoordinateSorter.takes(operand.dtype):
        return None
    coords = operand.coords if hasattr(operand, "coords") else (operand.row, operand.col)
    data = np.asarray(operand.data)
    if data.ndim != 1 or any(np.shape(c) != data.shape or np.asarray(c).dtype.kind not in "iu"
                             for c in coords):
        return None
    try:
        return kernel_cache().coordinates.sort(coords, data, operand.shape, rows=rows)
    except ValueError:
        return None


def _sorted_pydata_coo(operand: Any) -> Any:
    """``CoordinateSorter.sort`` of a zero-filled pydata COO array's entries (rank 1 or more),
    or None for anything else."""
    if type(operand).__name__ != "COO" or not type(operand).__module__.startswith("sparse") \
            or not getattr(operand, "shape", ()) or getattr(operand, "fill_value", 1) != 0 \
            or not CoordinateSorter.takes(operand.dtype):
        return None
    coords, data = np.asarray(operand.coords), np.asarray(operand.data)
    if coords.ndim != 2 or coords.shape != (len(operand.shape), data.shape[0]) or \
            coords.dtype.kind not in "iu" or data.ndim != 1:
        return None
    try:
        return kernel_cache().coordinates.sort(tuple(coords), data, operand.shape)
    except ValueError:
        return None


def _bind_any_order(operand: Any) -> Tensor | None:
    """A scipy COO (2-D) or pydata COO (any rank) as a COO tensor over its own arrays, in the
    order they come and with any duplicates (no copy, no sort), for a kernel that reads them
    in any order (``lower/unordered.py``); None where ``operand`` is something else or its
    arrays are not what the kernel reads (mixed or non-integer index dtypes, float16 values);
    strided coordinates (pydata keeps its ``coords`` in Fortran order) are copied contiguous.
    Every coordinate is checked to lie inside the shape by the compiled validator, which the
    kernel's loads rely on; a malformed operand gets None, and the sorting binder's checks
    then name what is wrong.

    >>> import scipy.sparse as sp
    >>> m = sp.coo_array(([1.0, 2.0, 4.0], ([1, 0, 1], [0, 1, 0])), shape=(2, 2))
    >>> _bind_any_order(m).levels[0].crd.tolist()
    [1, 0, 1]
    """
    module = type(operand).__module__
    if module.startswith("scipy.sparse"):
        if getattr(type(operand), "_format", None) != "coo" or operand.ndim != 2:
            return None
        coords = tuple(operand.coords) if hasattr(operand, "coords") else \
            (operand.row, operand.col)
    elif type(operand).__name__ == "COO" and module.startswith("sparse") and \
            getattr(operand, "shape", ()) and getattr(operand, "fill_value", 1) == 0:
        coords = tuple(np.asarray(operand.coords))
    else:
        return None
    data = operand.data
    if type(data) is not np.ndarray or data.dtype not in VALUE_DTYPES or data.ndim != 1 or \
            not data.flags.c_contiguous or len(coords) != len(operand.shape):
        return None
    if any(type(c) is not np.ndarray for c in coords):
        return None
    coords = tuple(np.ascontiguousarray(c) for c in coords)
    index = coords[0].dtype
    if index not in _ANY_ORDER_INDEX or any(c.dtype != index or c.shape != data.shape
                                            for c in coords) or \
            data.shape[0] > np.iinfo(index).max:
        return None
    pos = _entries_pos(data.shape[0], index)
    validator = kernel_cache().validator      # remembers (pos, crd) pairs it found sound
    if any(validator.compressed(pos, crd, int(dim), check_order=False) != VALID
           for crd, dim in zip(coords, operand.shape)):
        return None
    levels = (LevelArrays(pos, coords[0]), *[LevelArrays(None, c) for c in coords[1:]])
    return Tensor.trusted(tuple(int(n) for n in operand.shape), _coo_format(len(coords)),
                          levels, data)


_ANY_ORDER_INDEX = frozenset({np.dtype(np.int32), np.dtype(np.int64)})


@functools.lru_cache(maxsize=64)
def _entries_pos(count: int, index: np.dtype) -> np.ndarray:
    """The first level's ``pos`` of a COO tensor of ``count`` entries, ``[0, count]``: one
    read-only array per count, so that the validator's memo of an operand's coordinates
    (keyed by both arrays) holds from one call to the next."""
    pos = np.array([0, count], dtype=index)
    pos.flags.writeable = False
    return pos


@functools.lru_cache(maxsize=None)
def _coo_format(rank: int) -> Format:
    return resolve_format("coo", rank, "coo input")


def canonical_csr(matrix: Any) -> bool:
    """Whether a SciPy CSR matrix's arrays are sound and canonical (row pointers from 0 to
    ``nnz``, nondecreasing; column indices in range and strictly increasing within each row),
    checked afresh by one compiled pass: no memo, so buffers refilled in place are checked
    again. False also for anything else; the caller then runs its detailed checks.

    >>> import scipy.sparse as sp
    >>> canonical_csr(sp.csr_array(np.eye(3))), canonical_csr(np.eye(3))
    (True, False)
    """
    if getattr(matrix, "format", None) != "csr" or getattr(matrix, "ndim", 0) != 2:
        return False
    indptr, indices, data = matrix.indptr, matrix.indices, matrix.data
    if indptr.shape[0] != matrix.shape[0] + 1 or indices.shape[0] != data.shape[0] or \
            data.ndim != 1 or not data.flags.c_contiguous:
        return False
    return kernel_cache().validator.compressed(indptr, indices, matrix.shape[1],
                                               check_order=True, remember=False) == VALID


# ---------------------------------------------------------------------------------------------
# The shared path of einsum and compiled kernels


def _dtype_argument(dtype: Any) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        raise ArgumentTypeError(f"dtype={dtype!r} is not a dtype; use float32, float64, "
                                f"complex64, complex128, int32 or int64") from None


_KIND_WORDS = {"f": "float", "c": "complex"}


def _check_cast(dtype: np.dtype, value_dtype: np.dtype, what: str) -> None:
    """Refuse computing ``what`` (of ``dtype``) in ``value_dtype`` where values would be lost
    in kind (floats truncated to integers), as NumPy's ``same_kind`` rule does."""
    if not np.can_cast(dtype, value_dtype, "same_kind"):
        raise CastingError(f"{what} holds {dtype} values, which the kernel would truncate to "
                         f"{value_dtype}; cast it yourself (astype) if that is meant, or use a "
                         f"{_KIND_WORDS.get(dtype.kind, 'wider')} dtype")


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_ORDERS = ("K", "A", "C", "F")


def _check_casting(dtype: np.dtype, to: np.dtype, casting: str, what: str) -> None:
    """``CastingError`` when NumPy's ``casting`` rule forbids ``dtype`` -> ``to``."""
    if not np.can_cast(dtype, to, casting):
        raise CastingError(f"{what} would be cast from {dtype} to {to}, which casting="
                           f"{casting!r} does not allow (as in numpy.einsum); pass "
                           f"casting='same_kind' or 'unsafe' to allow it")


def _value_dtype(stmt: Assignment, dtypes: Sequence[np.dtype], dtype: Any,
                 casting: str = "same_kind") -> np.dtype:
    if dtype is not None:
        result = _dtype_argument(dtype)
        if result in VALUE_DTYPES:
            for k, operand_dtype in enumerate(dtypes):
                if casting != "unsafe":
                    _check_cast(operand_dtype, result, f"operand {k}")
                _check_casting(operand_dtype, result, casting, f"operand {k}")
    else:
        result = np.result_type(*dtypes) if dtypes else np.dtype(np.float64)
        if result.kind in "iu" and _needs_float(stmt.rhs):
            result = np.dtype(np.float64)
    if result not in VALUE_DTYPES:
        raise UnsupportedError(
            f"the kernel would compute in {result}, which tensoralg does not support; use "
            f"float32, float64, complex64, complex128, int32 or int64 operands (or pass dtype=)")
    return result


def _needs_float(expr: Expr) -> bool:
    match expr:
        case Div():
            return True
        case Call(func, args):
            return func in _FLOAT_FUNCTIONS or any(_needs_float(a) for a in args)
        case Literal(value):
            return isinstance(value, float) and not float(value).is_integer()
    children = [getattr(expr, f) for f in ("lhs", "rhs", "operand", "body") if hasattr(expr, f)]
    return any(_needs_float(c) for c in children)


def _out_request(out_format: Any, rank: int) -> Format | None:
    """The format asked for, or None to infer it."""
    if out_format is None:
        return None
    fmt = resolve_format(out_format, rank, "out_format")
    # A dense result comes back as a NumPy array in mode order, whatever order was asked for.
    return dense(rank) if fmt.is_dense else fmt


def _reads_any_order(compiled: CompiledProgram, name: str) -> bool:
    """Whether ``compiled``'s kernel reads operand ``name`` in any order (a COO operand the
    program holds under that name, ``lower/unordered.py``)."""
    return any(t.name == name and t.unordered for t in compiled.program.tensors)


class _CsrFirst(Exception):
    """A scipy COO operand bound unsorted that the kernel cannot read so: the call runs with
    it converted to CSR (``_csr_operands``), as every later call of its subscripts does."""


def _run(stmt: Assignment, canonical: str, bound: dict[str, Tensor], families: list[str],
         out_format: Any, backend: str | None, schedule: Any, dtype: Any,
         out: np.ndarray | None, casting: str = "same_kind",
         unsorted: Mapping[str, Any] | None = None) -> tuple[Any, CompiledProgram | None]:
    """The wrapped result and the compiled program that produced it (None when a GEMM route
    did: ``lower/gemm_form.py``). ``unsorted``: the operands bound in the order their entries
    came (``_bind_any_order``), by name; each is bound again sorted unless the kernel reads
    it in any order."""
    backend = _check_backend(backend)
    schedule = as_schedule(schedule)
    if schedule is not None:
        check_schedule(schedule, stmt)
    value_dtype = _value_dtype(stmt, [t.dtype for t in bound.values()], dtype, casting)
    shapes = {name: t.shape for name, t in bound.items()}
    dims = infer_dims(stmt, shapes)
    if schedule is None:
        schedule = tuned_schedule(canonical, bound, value_dtype, dims)
    shape = output_shape(stmt, dims)
    requested = _out_request(out_format, len(shape))
    if out is not None:
        requested = _dense_into(out, requested, shape, value_dtype, casting)
    # An ``out`` that overlaps an operand (``einsum("ij,jk->ik", a, b, out=b)``) would be
    # overwritten while the kernel still reads it: compute apart, then copy, as NumPy does.
    direct = None if out is None or _overlaps(out, bound.values()) else out
    if (requested is None or requested.is_dense) and backend != "cuda":
        route = gemm_route(schedule)
        form = gemm_form(stmt)
        product = dense_contraction(contraction_form(stmt), bound, value_dtype, route, dims,
                                    stmt, direct) if form is None else None
        if product is None:
            product = dense_gemm(form, bound, value_dtype, route, stmt, direct)
        if product is not None:
            return _wrap(product, requested, families, out), None
    compiled = _compiled(stmt, canonical, bound, value_dtype, requested, shape, backend,
                         schedule)
    resort = [name for name in unsorted or () if not _reads_any_order(compiled, name)]
    if resort:
        if any(type(unsorted[name]).__module__.startswith("scipy.sparse")  # type: ignore
               for name in resort):
            raise _CsrFirst       # as the later calls of these subscripts run: through CSR
        for name in resort:
            bound[name] = _bind(unsorted[name], None, f"operand {name}")   # type: ignore[index]
        # the sorted binding may hold another index dtype: the kernel's key says
        compiled = _compiled(stmt, canonical, bound, value_dtype, requested, shape, backend,
                             schedule)
    if backend == "cuda":
        from tensoralg import gpu

        result = gpu.run(compiled, bound, value_dtype, shape, out, cache=kernel_cache().disk)
        if not isinstance(result, (np.ndarray, Tensor)):
            return result, compiled          # on the device: a DeviceArray/Tensor, or CuPy's
        return _wrap(result, requested, families, out), compiled
    result = execute(compiled, bound, value_dtype, shape, direct)
    return _wrap(result, requested, families, out), compiled


def _device_operand(operand: Any, backend: str | None) -> Any:
    """A CuPy array or sparse matrix, or a gpu.DeviceTensor, as a DeviceTensor for the cuda
    backend (None for anything else: it is bound on the host)."""
    if backend != "cuda" or type(operand).__module__.split(".")[0] not in (
            "cupy", "cupyx", "tensoralg"):
        return None
    from tensoralg import gpu

    if isinstance(operand, gpu.DeviceTensor):
        return operand
    return gpu.from_cupy(operand)


def _overlaps(out: np.ndarray, tensors: Iterable[Tensor]) -> bool:
    """Whether ``out``'s memory may overlap any array of ``tensors`` (a bounds check:
    it may answer yes for interleaved views that never touch, which only costs a copy)."""
    return any(np.may_share_memory(out, array) for t in tensors
               for array in (t.vals, *[a for level in t.levels for a in (level.pos, level.crd)
                                        if a is not None]))


def tuning_key_of(canonical: str, bound: Mapping[str, Tensor], value_dtype: np.dtype,
                  dims: Mapping[str, int]) -> str:
    """The key under which ``ta.autotune`` stores the schedule it found for such a call."""
    stored = [t.nnz for t in bound.values() if not t.format.is_dense]
    return tuning_key(canonical, [(name, t.format) for name, t in bound.items()], value_dtype,
                      shape_class(dims, stored))


def tuned_schedule(canonical: str, bound: Mapping[str, Tensor], value_dtype: np.dtype,
                   dims: Mapping[str, int]) -> Schedule | None:
    """The schedule ``ta.autotune`` stored for a call like this one, if any."""
    tuned = kernel_cache().tuned
    if not len(tuned):
        return None
    return tuned.get(tuning_key_of(canonical, bound, value_dtype, dims))


def dense_gemm(form: GemmForm | None, bound: Mapping[str, Tensor], value_dtype: np.dtype,
               route: GemmRoute | None, statement: Any, out: np.ndarray | None = None
               ) -> np.ndarray | None:
    """A dense matrix product on ``route`` (``lower/gemm_form.py`` says which and why), or
    None when the loop nest runs it. An explicit route that cannot run this call is refused
    with ``UnsupportedError``; the compiler's own choice (``route`` None) leaves it to the loop
    nest instead."""
    if route is GemmRoute.LOOPS:
        return None
    reason = gemm_refusal(form, {name: t.format for name, t in bound.items()}, value_dtype,
                          route)
    if reason is not None:
        if route is None:
            return None
        raise UnsupportedError(f"gemm({route.value}) for {statement}: {reason}; use "
                               f"gemm(loops), or no gemm command, for the loop nest")
    assert form is not None
    m, k, n, _ = form.dims(bound[form.a].shape, bound[form.b].shape)
    if route is None and m * k * n < GEMM_MIN_FMAS:
        return None
    if out is None:
        check_dense(m * n, value_dtype.itemsize, "the dense output", statement)
    a, b = bound[form.a].to_numpy(), bound[form.b].to_numpy()
    if route is GemmRoute.GENERATED:
        a, b = (a.T if form.a_transposed else a), (b.T if form.b_transposed else b)
        cache = kernel_cache()
        return dense_product(a, b, value_dtype, cache.disk, cache.threads)
    return blas_product(a, form.a_transposed, b, form.b_transposed, value_dtype, out)


def dense_contraction(form: ContractionForm | None, bound: Mapping[str, Tensor],
                      value_dtype: np.dtype, route: GemmRoute | None, dims: Mapping[str, int],
                      statement: Any, out: np.ndarray | None = None) -> np.ndarray | None:
    """A dense contraction that is a stack of matrix products (``ContractionForm``: a
    dense layer over a batch of sequences, attention's ``bhqd,bhkd->bhqk``, a ``tensordot``)
    on BLAS, or None when the loop nest runs it. The compiler sends it there when every
    product has sides of at least ``CONTRACTION_MIN_SIDE`` and enough multiply-adds for a gemm
    call to pay (``gemm_form.stack_pays``: more where the loop nest runs well, as measured in
    ``lower/gemm_form.py``); ``gemm(blas)`` sends any such contraction, and any other
    schedule keeps the loop nest. The grouping is NumPy's ``einsum(optimize=True)``'s, as a
    visible dispatch (logged at INFO)."""
    if form is None or route not in (None, GemmRoute.BLAS):
        return None
    sparse = [name for name in (form.a, form.b) if not bound[name].format.is_dense]
    reason = f"operand {sparse[0]} is stored {bound[sparse[0]].format}, not dense" if sparse \
        else None if blas_supports(value_dtype) else \
        f"the values are {value_dtype}; BLAS takes float32, float64, complex64 and complex128"
    if reason is not None:
        if route is GemmRoute.BLAS:
            raise UnsupportedError(f"gemm(blas) for {statement}: {reason}; use gemm(loops), "
                                   f"or no gemm command, for the loop nest")
        return None
    stack, m, k, n = form.extents(dims)
    if route is None and not stack_pays(form, dims, value_dtype.itemsize):
        return None
    if out is None:
        check_dense(stack * m * n, value_dtype.itemsize, "the dense output", statement)
    _log.info("%s: runs as %d matrix product(s) of %d x %d x %d on BLAS (numpy.matmul); "
              "schedule gemm(loops) for the loop nest", statement, stack, m, k, n)
    return blas_contraction(form, bound[form.a].to_numpy(), bound[form.b].to_numpy(),
                            value_dtype, out)


def _dense_into(out: Any, requested: Format | None, shape: tuple[int, ...],
                value_dtype: np.dtype, casting: str = "same_kind") -> Format:
    """The dense output format an ``out=`` array asks for, once ``out`` is checked: NumPy
    writes every einsum result into ``out``, so a sparse one is computed densely."""
    if not isinstance(out, np.ndarray):
        raise ArgumentTypeError(f"out must be a NumPy array, not {type(out).__name__}")
    if requested is not None and not requested.is_dense:
        raise InputError(f"out= takes a dense result but out_format asks for {requested}; "
                         f"pass one or the other")
    if out.shape != shape:
        raise ShapeError(f"out has shape {out.shape} but the result has shape {shape}")
    if not out.flags.writeable:
        raise InputError("out is read-only")
    if casting != "unsafe" and not np.can_cast(value_dtype, out.dtype, "same_kind"):
        raise CastingError(f"out has dtype {out.dtype}, which cannot hold the {value_dtype} "
                         f"result (NumPy's same_kind rule)")
    _check_casting(value_dtype, out.dtype, casting, "the result")
    return dense(len(shape))


def _check_backend(backend: str | None) -> str:
    backend = backend or "llvm"
    if backend not in BACKENDS:
        raise UnsupportedError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "cuda":
        from tensoralg import gpu

        reason = gpu.available()          # None, or why not (no pycuda/cuda-python, no GPU)
        if reason is not None:
            raise UnsupportedError(reason)
    return backend


_INT32, _INT64 = np.dtype(np.int32), np.dtype(np.int64)
_INDEX_DTYPES = (_INT32, _INT64)


def _out_index_dtype(shape: tuple[int, ...], stmt: Assignment | None = None,
                     bound: Mapping[str, Tensor] | None = None) -> np.dtype:
    """int32 coordinates and positions when every stored count fits, as scipy chooses: when
    the output's shape holds fewer than 2**31 - 1 elements, or when ``stmt``'s output cannot
    hold more entries than its operands in ``bound`` store together (``_stored_bound``) and
    those, and every dimension, fit too."""
    if math.prod(shape) < 2**31 - 1:
        return _INT32
    if stmt is None or bound is None or max(shape, default=0) >= 2**31 - 1:
        return _INT64
    stored = _stored_bound(stmt, bound)
    if stored is None:
        stored = _product_bound(stmt, bound)
    return _INT32 if stored is not None and stored < 2**31 - 1 else _INT64


def _bounding_pair(stmt: Assignment, formats: Mapping[str, Format]) -> tuple[str, str] | None:
    """``(P, Q)`` where ``stmt`` is a product of two sparse operands summed over an index
    ``k`` (``C(i,j) = A(i,k) * B(k,j)``) and ``P``, stored row by row (``ds``), has ``k`` as its
    outer index: every output entry comes from one of Q's entries times an entry of the row
    of P it names, so the output holds at most ``nnz(Q) * (P's longest row)`` entries. None
    for any other statement.

    >>> _bounding_pair(parse_statement("C(i,j) = A(i,k) * B(k,j)"), {"A": CSR, "B": CSR})
    ('B', 'A')
    """
    body = stmt.rhs
    while isinstance(body, Reduce):
        body = body.body
    if not (isinstance(body, Mul) and isinstance(body.lhs, Access) and
            isinstance(body.rhs, Access) and body.lhs.tensor != body.rhs.tensor):
        return None
    for p, q in ((body.rhs, body.lhs), (body.lhs, body.rhs)):
        fmt = formats.get(p.tensor)
        other = formats.get(q.tensor)
        if fmt is None or other is None or other.is_dense or fmt.rank != 2 or \
                fmt.spec != "ds":
            continue
        outer = p.indices[fmt.order[0]]
        if outer not in stmt.lhs.indices and outer in q.indices:
            return p.tensor, q.tensor
    return None


def _product_bound(stmt: Assignment, bound: Mapping[str, Tensor]) -> int | None:
    """The most entries the output of a two-factor sparse product can hold
    (``_bounding_pair``), else None."""
    pair = _bounding_pair(stmt, {name: t.format for name, t in bound.items()})
    if pair is None:
        return None
    rows, other = bound[pair[0]], bound[pair[1]]
    return other.nnz * _longest(rows.levels[1].pos)


def _longest(pos: np.ndarray) -> int:
    """The most entries one row of a compressed level holds (``pos`` its row starts)."""
    return int(np.diff(pos).max()) if len(pos) > 1 else 0


def _stored_bound(stmt: Assignment, bound: Mapping[str, Tensor]) -> int | None:
    """The operands' stored entries together when they bound the output's entries
    (``lower.assemble.stores_within_operands``), else None."""
    sparse = {name for name, t in bound.items() if not t.format.is_dense}
    if not stores_within_operands(stmt.rhs, stmt.lhs.indices, sparse.__contains__):
        return None
    return sum(bound[name].nnz for name in sparse)


def _compiled(stmt: Assignment, canonical: str, bound: Mapping[str, Tensor],
              value_dtype: np.dtype, requested: Format | None, shape: tuple[int, ...],
              backend: str, schedule: Schedule | None = None) -> CompiledProgram:
    formats = {name: t.format for name, t in bound.items()}
    index_dtypes = {name: _INT64 if t.format.is_dense else t.index_dtype
                    for name, t in bound.items()}
    key = KernelKey(canonical, tuple(formats.items()), tuple(index_dtypes.values()),
                    value_dtype, requested, _out_index_dtype(shape, stmt, bound),
                    str(schedule) if schedule else None, backend)
    return kernel_cache().get(key, stmt, formats, index_dtypes, requested, schedule)


def _converted(tensor: Tensor, fmt: Format) -> Tensor:
    """``tensor`` in ``fmt``: a dense one transposed by ``relaid``, a sparse one into a sparse
    format through the compiled coordinate sorter, any other by ``Tensor.convert``."""
    if not (tensor.format.is_dense and tensor.format.is_identity_order and fmt.is_dense):
        if fmt != tensor.format:
            done = sorted_conversion(tensor, fmt, kernel_cache().coordinates)
            if done is not None:
                return done
        return tensor.convert(fmt)
    values = relaid(tensor.to_numpy(), tuple(fmt.order)).reshape(-1)
    return Tensor(tensor.shape, fmt, _DENSE_LEVELS[:fmt.rank], values, check=False)


def execute(compiled: CompiledProgram, bound: Mapping[str, Tensor], value_dtype: np.dtype,
            shape: tuple[int, ...], out: np.ndarray | None = None) -> Tensor | np.ndarray:
    """Run a compiled kernel on bound operands; returns a dense array or a sparse Tensor."""
    if compiled.program.conversions and not copies_pay(compiled, bound):
        compiled = kernel_cache().kept(compiled)
    if compiled.rows is not None:
        compiled = _row_kernel(compiled, bound[compiled.rows[0]].levels[1].pos)
    program = compiled.program
    tensors = {name: (t if t.dtype == value_dtype else t.astype(value_dtype))
               for name, t in bound.items()}
    for alias, source in program.conversions:
        tensors[alias] = _converted(tensors[source], program.tensor(alias).format)
    sizes = index_sizes(compiled, tensors)
    if compiled.kernel.pending and iteration_bound(compiled, tensors, sizes) > QUICK_WORK:
        compiled.kernel.settled()     # too large for unoptimised code (codegen/tiered.py)
    output = program.output
    _check_memory(compiled, sizes, shape, value_dtype, out)
    buffers = OutputBuffers()
    entries = None
    bounds: np.ndarray | None = None
    ranged = False   # bounds already decided (a product whose rows could be counted first)
    if output.format.is_dense:
        buffers.dense = _dense_output(out, shape, value_dtype, compiled.overwrites)
    elif program.pattern is not None:
        alloc = np.empty if compiled.overwrites else np.zeros
        buffers.dense = alloc(pattern_positions(tensors[program.pattern],
                                                pattern_levels(program)), dtype=value_dtype)
    else:
        if compiled.counted_by is not None:
            bounds = _thread_ranges(compiled, tensors, sizes, shape, False)
            if bounds is not None:
                return _counted_product(compiled, tensors, sizes, shape, value_dtype, bounds)
            ranged = True
        buffers.sizes = np.zeros(output.rank, dtype=np.int64)
        buffers.capacity = first_guess([t.nnz for t in tensors.values() if not t.format.is_dense],
                                       [t.nnz for t in tensors.values() if t.format.is_dense])
        entries = entry_bounds(compiled.entries_by, tensors, shape[output.format.order[-1]],
                               counter=kernel_cache().reach) \
            if len(shape) == 2 else None
        buffers.capacity = first_capacity(entries, buffers.capacity)
    args = compiled.arguments.pack(tensors, sizes, buffers)
    if not ranged:
        bounds = _thread_ranges(compiled, tensors, sizes, shape, buffers.dense is not None)
    if bounds is not None and buffers.dense is None:
        # Each range assembles into buffers of its own (with room for the entries its rows
        # can hold, when that is known); on the native pool a range is handed over in 1-2 µs
        # instead of 30-50.
        status, parts = run_ranges(compiled.kernel.function, args, compiled.arguments, bounds,
                                   buffers.capacity, kernel_cache().threads.run_calls,
                                   native=_native_split(compiled, len(bounds) - 1, sparse=True),
                                   weights=entries)
        _check_status(compiled, status)
        return delivered(program, join_rows(shape, output.format, output.index_dtype,
                                            value_dtype, parts, bounds,
                                            kernel_cache().threads.run_calls))
    status = _launch(compiled, args, buffers, bounds)
    if status != 0:
        release(buffers)
    _check_status(compiled, status)
    if output.format.is_dense:
        assert buffers.dense is not None
        return buffers.dense.reshape(shape)
    if program.pattern is not None:
        assert buffers.dense is not None
        levels = tensors[program.pattern].levels[:pattern_levels(program)]
        return delivered(program, pattern_result(shape, output.format, output.index_dtype,
                                                 levels, buffers.dense))
    return delivered(program, sparse_result(shape, output.format, output.index_dtype,
                                            value_dtype, buffers))


def _counted_product(compiled: CompiledProgram, tensors: Mapping[str, Tensor],
                     sizes: Mapping[str, int], shape: tuple[int, ...], value_dtype: np.dtype,
                     bounds: np.ndarray) -> Tensor:
    """A sparse product (or sum) split over the thread ranges ``bounds``, its rows counted
    first (``lower/counted.py``): the counts give the output's ``pos``, and each range of the
    counted variant writes its rows into ``crd`` and ``vals`` in place."""
    cache = kernel_cache()
    variant = cache.counted(compiled)
    output = variant.program.output
    first, second = compiled.counted_by   # type: ignore[misc]
    union = _counted_sum(compiled)
    pos = cache.rows.pos(tensors[first], tensors[second], shape[1], bounds, output.index_dtype,
                         _run_counter, union=union)
    total = int(pos[-1])
    buffers = OutputBuffers(dense=np.empty(total, dtype=value_dtype),
                            arrays={"1.pos": pos, "1.crd": np.empty(total, output.index_dtype)},
                            sizes=np.zeros(2, dtype=np.int64))
    status = _launch(variant, variant.arguments.pack(tensors, sizes, buffers), buffers, bounds)
    _check_status(variant, status)
    if buffers.sizes[0]:   # type: ignore[index]
        raise KernelRuntimeError(
            f"internal: the kernel for {compiled.key.statement} found rows whose entries "
            f"differ from their count (runtime/count.py) and left them unwritten; please "
            f"report it with the operands' shapes and formats")
    levels = (LevelArrays(), LevelArrays(pos, buffers.arrays["1.crd"]))
    result = narrowed_indices(Tensor.trusted(tuple(shape), output.format, levels,
                                             buffers.dense))
    return delivered(variant.program, result)


def _counted_sum(compiled: CompiledProgram) -> bool:
    """Whether ``compiled`` is a sum of two CSR operands whose rows a split call counts first
    (``lower/counted.py``; a product's counted rows fill a workspace, a sum's append)."""
    return compiled.counted_by is not None and \
        compiled.program.nests[0].mode is not OutputMode.WORKSPACE


def _run_counter(function: Any, args: list, bounds: Sequence[int]) -> int:
    """Run a row counter (``runtime/count.py``) over the thread ranges ``bounds``: on the
    native pool where there is one, else on the pool's Python threads."""
    parts = len(bounds) - 1
    native = _native_ranges(("row counter", id(function), parts), function,
                            COUNTER_RANGE_SLOTS, parts, "row counter")
    if native is not None:
        return native(args, bounds)
    return max(kernel_cache().threads.run(lambda part: function(*part), args,
                                          COUNTER_RANGE_SLOTS, bounds))


def delivered(program: Program, tensor: Tensor) -> Tensor:
    """``tensor``, the kernel's output, in the format its caller gets (`Program.result_format`:
    an inferred ``sd`` output is assembled as ``ss`` and converted here)."""
    if program.result_format is None or tensor.format == program.result_format:
        return tensor
    return tensor.convert(program.result_format)


def iteration_bound(compiled: CompiledProgram, tensors: Mapping[str, Tensor],
                    sizes: Mapping[str, int]) -> int:
    """At most how many times a call's innermost loop body runs, within a small factor: the
    index space, or less where a sparse input drives the loops (its stored entries times the
    sizes of the indices it does not have), plus each index's size. A sum of sparse inputs
    runs over all of theirs, hence the largest such bound rather than the smallest: too large
    errs on the safe side (``execute`` waits for the optimised build, ``codegen/tiered.py``)."""
    indices = {index for _, _, index in compiled.sizes}
    space = math.prod(sizes[index] for index in indices)
    bounds = [tensors[info.name].nnz * math.prod(sizes[index]
                                                 for index in indices.difference(info.dims))
              for info in compiled.program.tensors
              if info.role is TensorRole.INPUT and not info.format.is_dense
              and info.name in tensors]
    # the loops over the indices themselves (a CSR's rows, however few their entries)
    return (min(space, max(bounds)) if bounds else space) + sum(sizes[i] for i in indices)


# Below this many values a dense operand is copied in the loops' mode order whatever the call
# reads of it: the copy costs a few µs, the other variant's first build far more.
COPY_MIN_VALUES = 1 << 16
# Where the kernel's other variant runs loops that read every operand contiguously
# (``LoopNest.kept_order``: a dot-product stack's dot products), its loops must read a copied
# operand at least so many times per value for the copy to pay: the stack run as register
# tiles over the transposed operand reads it once per row of the other one, and from 32 rows
# it ran 0.3-0.9x the dot products' time (``bij,bkj->bik``, two threads, 2026-12-06, ad hoc;
# 16 rows: 0.9-1.2x, 1-4 rows: 2-10x).
DENSE_COPY_REUSE = 32


def _row_kernel(compiled: CompiledProgram, pos: np.ndarray, eager: bool = False
                ) -> CompiledProgram:
    """``compiled`` (with ``rows``), or its variant with the row loop's tail masked or the loop
    unrolled where the rows of the matrix whose ``pos`` this is take one (``runtime/rows.py``).
    A variant not built yet is built at the second call that asks for it (at the first with
    ``eager``): a one-off call keeps the first call's cost, which is mostly compiling (an SpMV's
    first call in a new process took ~58 ms with its variant built at once, ~30 without)."""
    kind = row_kernel_kind(pos)
    if not kind or not row_variant_pays(kind, pos.shape[0] - 1):
        return compiled
    found = compiled.variants.get(kind)
    if found is not None:
        return found
    if not eager and kind not in compiled.asked:
        compiled.asked.add(kind)
        return compiled
    return kernel_cache().row_variant(compiled, kind)


# Whether a CSR row loop's variant (``runtime/rows.py``: tail masked, or unrolled) beats the
# plain loop on this host, by variant and size class of the rows (``row_variant_pays``), as
# measured.
_row_variants_pay: dict[tuple[str, int], bool] = {}
_row_variants_lock = threading.Lock()
# A variant must take at most this share of the plain kernel's time to be chosen: a close
# call keeps the plain kernel, so the choice does not flip with the noise of one run.
ROW_VARIANT_SHARE = 0.9
# The size classes measured: matrices of 2^12 rows or fewer take the smallest, of 2^17 or
# more the largest.
ROW_VARIANT_CLASSES = (12, 17)


def row_variant_pays(kind: str, rows: int) -> bool:
    """Whether this host runs the rows a variant is chosen for (``runtime/rows.py``: ``MASKED``
    for rows whose lengths keep changing, ``UNROLLED`` for rows of 4-7 entries that repeat
    their lengths) faster with that variant than with the plain loop, for a matrix of ``rows``
    rows: measured once per process, variant and size class (the power of two at or above
    ``rows``, within ``ROW_VARIANT_CLASSES``) on a generated square matrix of such rows
    (``_row_variant_measured``), unless ``TENSORALG_ROW_VARIANTS`` says (``1``: always, ``0``:
    never).

    Which loop wins depends on the host and on where the gathered vector lives. On the Intel
    Xeon where the row loops were tuned the masked tail ran 0.39-0.84x the plain loop's time
    on power-law rows and the unrolled loop 0.64-0.88x at 4-5 entries a row; on an AMD EPYC
    the masked tail ran 1.2-2.4x on the real matrices of 2e3-8e3 rows (ca-GrQc 37.5 against
    17.2 µs, rajat01 49 against 20.5, wiki-Vote 78 against 55) and on generated ones up to
    2^14 rows, winning from 2^15 (a gathered vector past the L2 cache), and the unrolled loop
    0.98-1.2x (bayer10 56 against 46 µs; one thread, 2026-12-06, ad hoc).

    >>> isinstance(row_variant_pays(MASKED, 5000), bool)
    True
    """
    low, high = ROW_VARIANT_CLASSES
    size_class = min(max(low, max(rows - 1, 1).bit_length()), high)
    found = _row_variants_pay.get((kind, size_class))
    if found is None:
        with _row_variants_lock:
            found = _row_variants_pay.get((kind, size_class))
            if found is None:
                given = os.environ.get("TENSORALG_ROW_VARIANTS", "").strip()
                found = _row_variants_pay[kind, size_class] = given == "1" \
                    if given in ("0", "1") else _row_variant_measured(kind, 1 << size_class)
    return found


def _row_variant_measured(kind: str, rows: int, repeats: int = 7) -> bool:
    """Time SpMV's plain kernel and its ``kind`` variant, one thread each, on a square matrix
    of ``rows`` rows of the kind of rows that variant is chosen for (``MASKED``: 1-12 entries
    at random; ``UNROLLED``: 5 each), columns at random; whether the variant takes at most
    ``ROW_VARIANT_SHARE`` of the plain kernel's time (the best of ``repeats`` interleaved
    rounds each)."""
    import time

    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 13, rows) if kind == MASKED else np.full(rows, 5)
    pos = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    cols = (rng.random(int(pos[-1])) * rows).astype(np.int32)
    matrix = sp.csr_array((np.ones(int(pos[-1])), cols, pos), shape=(rows, rows))
    matrix.sum_duplicates()
    x = np.ones(rows)
    with optimised_only():
        plain = compile("y(i) = A(i,j) * x(j)", {"A": "CSR", "x": "d"})._default
        if plain is None or plain.rows is None:
            return False
        variants = (plain, kernel_cache().row_variant(plain, kind))
        tensors = {"A": _bind(matrix, None, "calibration matrix"),
                   "x": _bind(x, None, "calibration vector")}
        calls = []
        for variant in variants:
            variant.kernel.settled()
            buffers = OutputBuffers()
            buffers.dense = np.zeros(rows)
            calls.append((variant.kernel.function,
                          variant.arguments.pack(tensors, index_sizes(variant, tensors),
                                                 buffers)))
    best = [math.inf, math.inf]
    for _ in range(repeats):
        for k, (function, args) in enumerate(calls):
            start = time.perf_counter()
            for _ in range(4):
                function(*args)
            best[k] = min(best[k], time.perf_counter() - start)
    return best[1] <= ROW_VARIANT_SHARE * best[0]


def copies_pay(compiled: CompiledProgram, operands: Mapping[str, Any]) -> bool:
    """Whether copying the dense operands that ``compiled`` reads in another mode order
    (lowering's conversions: SDDMM's ``Y(k,j)`` read along ``k``) pays for this call: they hold
    under ``COPY_MIN_VALUES`` values together, or the loops read them at least as many times
    as they hold values (``iteration_bound``). Otherwise ``execute`` runs the variant that
    reads them in their own layout, with a stride (``KernelCache.kept``): an SDDMM on a
    10^6-column matrix with 2e4 entries copied its 16 x 10^6 factor in 18 ms per call for
    2 ms of work (the strided variant took 0.1-0.8x the copying one's time where the matrix
    held fewer entries than columns, 1.3-2.7x where it held more: SDDMM at rank 16, two
    threads, ad hoc, 2026-12-06). Where the other variant runs other loops that read every
    operand contiguously (an all-dense nest's ``kept_order``: a dot-product stack's dot
    products), the loops must read the copies ``DENSE_COPY_REUSE`` times as often as they hold
    values, however small. ``operands`` are the statement's operands by name (Tensors, or
    NumPy arrays and scipy matrices: anything with ``shape``, and ``nnz`` if sparse).
    ``tests/test_dense_layout_sddmm.py`` and ``tests/test_dense_order.py`` run both variants.
    """
    sources = dict(compiled.program.conversions)
    copied = [sources[alias] for alias in sources
              if compiled.program.tensor(alias).format.is_dense]
    values = sum(math.prod(operands[name].shape) for name in copied)
    # the other variant runs loops that read every operand contiguously (a dot-product
    # stack's dot products): the copy must be re-read many times to beat them
    contiguous = any(nest.kept_order for nest in compiled.program.nests)
    if values < COPY_MIN_VALUES and not contiguous:
        return True
    sizes = {index: operands[sources.get(name, name)].shape[mode]
             for name, mode, index in compiled.sizes}
    reuse = DENSE_COPY_REUSE if contiguous else 1
    return iteration_bound(compiled, operands, sizes) >= reuse * values


def index_sizes(compiled: CompiledProgram, tensors: Mapping[str, Tensor]) -> dict[str, int]:
    """The kernel's ``n_<index>`` arguments, from the operands' shapes, and the size of a
    position split's range: the stored positions of its tensor's level."""
    sizes = {index: tensors[name].shape[mode] for name, mode, index in compiled.sizes}
    split = compiled.plan.position_split
    if split is not None:
        pos = tensors[split.tensor].levels[1].pos
        sizes[split.position] = int(pos[-1]) if pos is not None and len(pos) else 0
    return sizes


def _check_memory(compiled: CompiledProgram, sizes: Mapping[str, int],
                  shape: tuple[int, ...], value_dtype: np.dtype, out: np.ndarray | None
                  ) -> None:
    """``MemoryLimitError`` before a dense output or temporary over the limit is allocated
    (``runtime/memory.py``)."""
    program, statement = compiled.program, compiled.key.statement
    if program.output.format.is_dense and out is None:
        check_dense(math.prod(shape), value_dtype.itemsize, "the dense output", statement)
    for info in program.tensors:
        if info.role is TensorRole.TEMPORARY:
            check_dense(math.prod(sizes[i] for i in info.dims), value_dtype.itemsize,
                        f"the dense temporary {info.name}", statement)


def _check_status(compiled: CompiledProgram, status: int) -> None:
    if status != 0:
        raise KernelRuntimeError(f"the kernel for {compiled.key.statement} could not allocate "
                                 f"memory for its output (status {status})")


def _thread_ranges(compiled: CompiledProgram, tensors: Mapping[str, Tensor],
                   sizes: Mapping[str, int], shape: tuple[int, ...], dense: bool
                   ) -> np.ndarray | None:
    """The bounds of the ranges to run on threads, or None to run the kernel once: a
    schedule's ``parallelize(..., threads=N)`` gives N ranges, otherwise the work decides.
    ``dense``: the kernel writes a buffer in place (a dense output, or the values at a
    pattern's positions), so its ranges need no joining."""
    plan = compiled.arguments
    if plan.range_slots is None or plan.range_index is None:
        return None
    size = plan.range_size(sizes, tensors)
    asked = compiled.plan.parallel
    program = compiled.program
    # A range over a first level's positions balances by the entries below each position.
    work_by_row = compiled.balance_by if plan.range_over is None else None
    weights = None
    if asked is not None and asked.threads is not None:
        parts = min(asked.threads, max(1, size))
    else:
        pattern = program.pattern is not None
        work = estimated_work(tensors, shape if dense and not pattern else None)
        if not dense and asked is None and _elementwise(program) and not (
                _counted_sum(compiled) and kernel_cache().threads.splits_sum(work)):
            # A sparse output made entry by entry from its operands' entries, with no
            # reduction (CSR * CSR), costs about what joining its ranges' pieces costs
            # (runtime/stitch.py copies all but the first): the second thread saved nothing
            # and the copy cost more (CSR bcsstk33 + its transpose, 2 threads: 2.7 ms split,
            # 1.4 ms whole; scipy 2.1). A schedule's parallelize(i) still splits it. A sum of
            # two CSR operands counts its rows first instead (lower/counted.py, by marks:
            # runtime/count.py) and writes in place, from COUNTED_SUM_MIN_WORK entries.
            return None
        if pattern:
            # the sums over the pattern operand's own levels are counted in its entries
            own = program.tensor(program.pattern).dims
            work = pattern_work(work, math.prod(sizes[index]
                                                for index in program.nests[-1].reduced
                                                if index not in own))
            levels = pattern_levels(program)
            if levels < len(own):
                # a prefix (TTV): each fibre is a loop of its own, whose exit mispredicts on
                # fibres of one or two entries; count the fibres beside the entries
                work += pattern_positions(tensors[program.pattern], levels)
        # A product whose rows are counted first fills them in place, like a dense output.
        counted = not dense and compiled.counted_by is not None
        native = (dense or counted) and native_pool_supported()
        threads = kernel_cache().threads
        if threads.threads > 1 and work_by_row is not None and work_by_row.products:
            # A sparse product's work is its multiply-adds, which the operands' stored
            # entries undercount many times over (bcsstk16 squared: 60x).
            weights = row_weights(work_by_row, tensors, kernel_cache().reach)
            product = product_work(int(weights[-1]), size, counted)
            if counted and product == 0:
                return None        # rows too short to count twice: one appending call
            work = max(work, product)
        least = min_rows_per_thread(all(t.format.is_dense for t in tensors.values()), work,
                                    size)
        parts = min(threads.parts(work, native), size // least)
        if compiled.plan.partials:      # one zeroed copy of the output per extra range
            parts = _partial_parts(parts, work, shape)
            if any(t.unordered and tensors[t.name].nnz < SCATTER_ENTRIES_PER_VALUE *
                   math.prod(shape) for t in program.tensors):
                parts = 1
        elif native and parts > 1 and NativeSplit.supports(compiled.kernel.function):
            parts = max(parts, min(parts * NATIVE_RANGES_PER_THREAD, size // least))
    if parts <= 1:
        return None
    if weights is None:
        weights = _range_weights(compiled, tensors, kernel_cache().reach)
    return range_bounds(size, parts, weights, compiled.plan.range_step(plan.range_index))


def _range_weights(compiled: CompiledProgram, tensors: Mapping[str, Tensor],
                   counter: Any = None) -> np.ndarray | None:
    """The cumulative work along a kernel's thread range: the entries below each position of
    a range over a first level's positions, else ``row_weights`` of its balancing operand."""
    plan = compiled.arguments
    if plan.range_over is not None:
        return plan.range_weights(tensors)
    return row_weights(compiled.balance_by, tensors, counter)


def _launch(compiled: CompiledProgram, args: list, buffers: OutputBuffers,
            bounds: np.ndarray | None) -> int:
    """Run the kernel once, or once per range on the pool's threads."""
    if bounds is None:
        return compiled.kernel(*args)
    plan, threads = compiled.arguments, kernel_cache().threads
    function = compiled.kernel.function
    if not compiled.plan.partials:
        native = _native_split(compiled, len(bounds) - 1)
        if native is not None:
            return native(args, bounds)
        return max(threads.run(lambda part: function(*part), args, plan.range_slots, bounds))
    return _run_partials(compiled, args, bounds, buffers.dense)


def _elementwise(program: Program) -> bool:
    """Whether every loop of every nest runs over an output index: no reduction, so each output
    entry costs a few loads and a store."""
    return all(index in nest.output.indices for nest in program.nests
               for index in nest.loop_order)


def _native_split(compiled: CompiledProgram, parts: int, sparse: bool = False
                  ) -> NativeSplit | None:
    """The kernel's ranges as one call on the native pool (``runtime/native_split.py``),
    built on first use per kernel and number of ranges; None where there is no pool. A
    ``sparse`` output's ranges also get buffers of their own (``stitch.run_ranges``)."""
    return _native_ranges((compiled.key, parts, sparse), compiled.kernel.function,
                          compiled.arguments.range_slots, parts, compiled.function.name,
                          varying_slots(compiled.arguments) if sparse else None)


def _native_ranges(key: tuple, function: Any, slots: Any, parts: int, name: str,
                   varying: Sequence[int] | None = None) -> NativeSplit | None:
    """``function``'s ``parts`` ranges (its range arguments at ``slots``) as one call on the
    native pool, kept in the kernel cache under ``key``; None where there is no pool."""
    cache = kernel_cache()
    found = cache.splits.get(key)
    if found is None:
        pool = cache.threads.native_pool() if native_pool_supported() else None
        if pool is None or not NativeSplit.supports(function):
            return None
        found = cache.splits[key] = NativeSplit(function, slots, parts, pool, name, varying)
    return found


def range_bounds(size: int, parts: int, weights: np.ndarray | None, step: int) -> np.ndarray:
    """Thread range bounds over ``[0, size)``, each but the last a multiple of ``step`` (the
    block size of a split loop, whose blocks must not be shared between ranges).

    >>> range_bounds(10, 2, None, 4).tolist()
    [0, 4, 10]
    """
    bounds = split(size, parts, weights)
    if step > 1:
        bounds[1:-1] = bounds[1:-1] // step * step
        bounds = np.unique(bounds)
    return bounds


# Scratch for the partial outputs of ``_run_partials``, kept per thread between calls up to
# this many bytes each.
PARTIAL_KEPT_BYTES = 1 << 26
_partial_scratch = threading.local()


def _partial_copies(output: np.ndarray, count: int) -> list[np.ndarray]:
    """``count`` zeroed arrays shaped as ``output`` for the extra ranges of a split into
    partial outputs, reused from this thread's last call and zeroed by one sequential pass.
    Fresh zeroed arrays (calloc's untouched pages) take their page faults inside the kernel,
    at the rows its ranges first touch: a COO SpMV scattering 1e6 entries into 4e5 rows ran
    in 22 ms on two threads with fresh copies and 3.4 ms with reused ones (4.1 on one thread;
    AMD EPYC VM, 2026-12-06, ad hoc), the faults of two threads at once costing far more than
    their count.

    >>> [c.tolist() for c in _partial_copies(np.ones(2), 2)]
    [[0.0, 0.0], [0.0, 0.0]]
    """
    kept = _partial_scratch.__dict__.setdefault("arrays", {})
    copies = []
    for k in range(count):
        found = kept.get((k, output.dtype))
        if found is None or found.shape[0] < output.size:
            found = np.empty(output.size, output.dtype)
            if found.nbytes <= PARTIAL_KEPT_BYTES:
                kept[(k, output.dtype)] = found
        copy = found[:output.size].reshape(output.shape)
        copy.fill(0)
        copies.append(copy)
    return copies


def _run_partials(compiled: CompiledProgram, args: list, bounds: np.ndarray,
                  output: np.ndarray | None) -> int:
    """Each range sums into its own zeroed copy of the dense output; the copies are added to
    the first range's, which is the output itself (``reduction=partials``). The ranges run as
    one call on the native pool where there is one (1-2 µs a range handed over), else on
    Python threads (30-50 µs)."""
    plan = compiled.arguments
    slot = next(k for k, step in enumerate(plan.steps) if step[0] == OUT_DENSE)
    begin, end = plan.range_slots   # type: ignore[misc]
    assert output is not None
    parts = len(bounds) - 1
    copies = [output] + _partial_copies(output, parts - 1)
    native = _native_ranges((compiled.key, parts, "partials"), compiled.kernel.function,
                            plan.range_slots, parts, compiled.function.name,
                            (begin, end, slot))
    if native is not None:
        status = native.run(args, [(int(bounds[k]), int(bounds[k + 1]), copy.ctypes.data)
                                   for k, copy in enumerate(copies)])
    else:
        calls = []
        for k, copy in enumerate(copies):
            part = list(args)
            part[begin], part[end], part[slot] = int(bounds[k]), int(bounds[k + 1]), \
                copy.ctypes.data
            calls.append(part)
        function = compiled.kernel.function
        status = max(kernel_cache().threads.run_calls(lambda part: function(*part), calls))
    for copy in copies[1:]:
        output += copy
    return status


def estimated_work(tensors: Mapping[str, Tensor], dense_shape: tuple[int, ...] | None) -> int:
    """Stored values a call touches, to decide whether splitting it over threads pays.

    Dense operands count whole, unless a sparse operand drives the loops: then a dense operand
    is read only where the sparse one has entries (an embedding table behind a bag matrix of a
    few ids), so the work is the sparse entries times the output row width. That row runs
    vectorised, so ``ROW_VALUES_PER_UNIT`` of its values count as one: a 256-wide row costs a
    stored entry 65 units, not 257. Calibrated on two cases: counted whole, a pruned 128x256
    layer at batch 256 went to two threads and lost 30 µs handing half its 40 µs over; at a
    quarter, SpMM with 16 columns still splits on the larger matrices, where the second core
    pays (at a sixteenth it did not, and bcsstk16 ran 2x slower).
    """
    return work_of([t.nnz for t in tensors.values() if not t.format.is_dense],
                   [t.nnz for t in tensors.values() if t.format.is_dense], dense_shape)


def work_of(sparse: Sequence[int], dense_sizes: Sequence[int],
            dense_shape: tuple[int, ...] | None) -> int:
    """:func:`estimated_work` from the stored counts of the sparse operands and the sizes of
    the dense ones (``runtime/replay.py`` writes the same formula out for replayed calls)."""
    out_rows = dense_shape[0] if dense_shape else 1
    if not sparse:
        return sum(dense_sizes) + out_rows
    if dense_shape is None:       # a sparse output: its entries come from the stored ones
        return sum(sparse) + out_rows
    width = math.prod(dense_shape[1:])
    return sum(sparse) * max(GATHER_UNITS, 1 + width // ROW_VALUES_PER_UNIT) + out_rows


ROW_VALUES_PER_UNIT = 4   # values of a vectorised dense row that cost one stored value


def pattern_work(work: int, reduced: int) -> int:
    """:func:`estimated_work` of a kernel that writes values at a sparse operand's positions
    (``lower/pattern.py``), each the sum of ``reduced`` products (SDDMM's rank): vectorised,
    as a dense output row is."""
    return work * (1 + reduced // ROW_VALUES_PER_UNIT)


def _dense_output(out: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype,
                  overwrites: bool = False) -> np.ndarray:
    """The flat buffer a kernel writes its dense output into: ``out`` when it fits, else a new
    one; zeroed unless the kernel assigns every element (``overwrites_output``)."""
    if out is not None and out.shape == shape and out.dtype == dtype and \
            out.flags.c_contiguous:
        flat = out.reshape(-1)
        if not overwrites:
            flat[...] = 0
        return flat
    alloc = np.empty if overwrites else np.zeros
    return alloc(max(1, math.prod(shape)) if not shape else math.prod(shape), dtype=dtype)


def _all_fortran(operands: tuple) -> bool:
    """Whether the array operands are Fortran-ordered and not C-ordered too (NumPy's test for
    ``order="A"``); operands of order 0 or 1 are both, and do not decide."""
    arrays = [op for op in operands if isinstance(op, np.ndarray) and op.ndim >= 2]
    return bool(arrays) and all(a.flags.f_contiguous and not a.flags.c_contiguous
                                for a in arrays)


def _wrap(result: Tensor | np.ndarray, requested: Format | None, families: list[str],
          out: np.ndarray | None) -> Any:
    """The result in the family of the inputs, converted to the requested format if any."""
    if isinstance(result, np.ndarray):
        if requested is not None and not requested.is_dense:
            result = Tensor.from_numpy(result, format=requested)
        elif requested is None and out is None and _pydata_only(families):
            # pydata's sparse.einsum returns a COO for every result, dense or 0-d: so does this
            return _pydata_coo(result)
        else:
            return _dense_result(result, out)
    elif requested is not None and result.format != requested:
        result = result.convert(requested)
    if requested is not None and requested.is_dense:
        return _dense_result(result.to_numpy(), out)
    return _sparse_result(result, families)


def _pydata_only(families: list[str]) -> bool:
    return "sparse" in families and "scipy_array" not in families and \
        "scipy_matrix" not in families


def _pydata_coo(array: np.ndarray) -> Any:
    """A pydata COO of a dense result, built from its nonzeros in row-major order (sorted,
    unique), listed by a compiled pass (``runtime/nonzeros.py``; NumPy's ``nonzero`` for
    dtypes it is not built for): ``COO.from_numpy`` checks its fill value with whole-array
    reductions first (1.2 ms for a 200 x 200 result), ``np.nonzero`` and the gather after it
    took 0.17 ms, the compiled pass ~0.03 (AMD EPYC VM, 2026-12-06).

    >>> _pydata_coo(np.array([[0.0, 2.0], [3.0, 0.0]])).coords.tolist()
    [[0, 1], [1, 0]]
    """
    import sparse

    array = np.asarray(array)
    if array.ndim == 0:
        return sparse.COO.from_numpy(array)
    if NonzeroLister.takes(array):
        coords, values = kernel_cache().nonzeros.nonzeros(array)
    else:
        where = np.nonzero(array)
        coords, values = np.stack(where), array[where]
    return sparse.COO(coords, values, shape=array.shape, has_duplicates=False,
                      sorted=True, fill_value=array.dtype.type(0))


def _dense_result(array: np.ndarray, out: np.ndarray | None) -> Any:
    if out is not None:
        if out.shape != array.shape:
            raise ShapeError(f"out has shape {out.shape} but the result has shape {array.shape}")
        if not np.shares_memory(out, array):
            np.copyto(out, array, casting="unsafe")     # the casting rule was checked before
        return out
    return array[()] if array.ndim == 0 else array


def _sparse_result(result: Tensor, families: list[str]) -> Any:
    if result.ndim == 2:
        if "scipy_matrix" in families:
            return result.to_scipy("matrix")
        if "scipy_array" in families:
            return result.to_scipy("array")
    if "sparse" in families and "scipy_array" not in families and \
            "scipy_matrix" not in families:
        return result.to_sparse()
    return result


# ---------------------------------------------------------------------------------------------
# compile


@dataclass
class Kernel:
    """A statement compiled for given operand formats; call it with operands by name.

    >>> k = compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    >>> print(k.source("ir").splitlines()[0][:10])
    kernel ta_
    """

    statement: Assignment
    formats: dict[str, Format]
    dtype: np.dtype
    backend: str
    out_format: Format | None
    schedule_given: Schedule | None = None
    _warned: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._canonical = canonical_text(self.statement)
        self._programs: dict[tuple, CompiledProgram] = {}
        self._replays: dict[tuple, _Dispatch] = {}     # repeated plain calls, see _Dispatch
        self._recent: Any = None      # the latest replay, which checks its operands' kinds
        # The tuned schedules' generation the replays were recorded under: a schedule tuned
        # since (ta.autotune) makes a plain kernel look again, instead of replaying the old.
        self._tuned_store = kernel_cache().tuned
        self._tuned_seen = self._tuned_store.generation
        self._own: Function | None = None     # the IR in this statement's names (source)
        self._values = _operand_getter(tuple(self.formats))
        self._uses = [(a.tensor, mode, index) for a in accesses(self.statement.rhs)
                      for mode, index in enumerate(a.indices)]
        self._ranks = {a.tensor: a.indices for a in accesses(self.statement.rhs)}
        # Dense operands have no index arrays: their index dtype is the one binding gives them,
        # so the first call finds this very kernel instead of compiling another.
        self._default_index = {name: _INT64 if fmt.is_dense else _INT32
                               for name, fmt in self.formats.items()}
        self._default_program: CompiledProgram | None = None
        # Whenever its programs are compiled (now, on first use, for other index dtypes), they
        # are built as a compile() here would build them: optimised inside optimised_builds().
        self._quick = quick_builds_allowed()
        dense_only = all(f.is_dense for f in self.formats.values()) and \
            (self.out_format is None or self.out_format.is_dense)
        self._gemm_route = gemm_route(self.schedule_given)
        form = gemm_form(self.statement)
        self._gemm = form if dense_only and self.backend != "cuda" and \
            self._gemm_route is not GemmRoute.LOOPS else None
        # a stack of products (ContractionForm) that BLAS may take, as ta.einsum sends it
        stack = contraction_form(self.statement) if form is None else None
        self._stack = stack if dense_only and self.backend != "cuda" and \
            self._gemm_route in (None, GemmRoute.BLAS) else None
        if self._gemm is None:   # compiled now, so that compile errors come from compile()
            self._default_program = self._specialise(self._default_index, _INT32)
        if self._gemm_route in (GemmRoute.BLAS, GemmRoute.GENERATED):
            out_format = self.out_format or dense(len(self.statement.lhs.indices))
            reason = "the output is sparse" if not out_format.is_dense else \
                "the cuda backend runs its own loops" if self.backend == "cuda" else \
                None if self._stack is not None and self._gemm_route is GemmRoute.BLAS and \
                blas_supports(self.dtype) else \
                gemm_refusal(form, self.formats, self.dtype, self._gemm_route)
            if reason is not None:
                raise UnsupportedError(f"gemm({self._gemm_route.value}) for {self.statement}: "
                                       f"{reason}; use gemm(loops), or no gemm command, for "
                                       f"the loop nest")

    @property
    def _default(self) -> CompiledProgram:
        """The loop-nest kernel for the formats as given (int32 indices). A dense product
        that BLAS or the generated GEMM may take (``_gemm``) compiles it on first use: a
        large product never runs it, and LLVM's share of a first call is most of it."""
        if self._default_program is None:
            self._default_program = self._specialise(self._default_index, _INT32)
        return self._default_program

    def _specialise(self, index_dtypes: dict[str, np.dtype], out_index: np.dtype,
                    tuned: Schedule | None = None) -> CompiledProgram:
        schedule = self.schedule_given or tuned
        key = KernelKey(
            self._canonical, tuple(self.formats.items()),
            tuple(index_dtypes[name] for name in self.formats), self.dtype, self.out_format,
            out_index,
            str(schedule) if schedule else None, self.backend)
        with contextlib.nullcontext() if self._quick else optimised_only():
            return kernel_cache().get(key, self.statement, self.formats, index_dtypes,
                                      self.out_format, schedule)

    @property
    def program(self) -> Program:
        assert self._default is not None
        return self._default.program

    @property
    def schedule(self) -> Schedule:
        """The schedule this kernel runs: the one given, completed with the compiler's own
        choices (loop order, thread split, and which pattern passes changed the code).

        >>> k = compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
        >>> print(k.schedule)
        reorder(i, j); vectorize(j, 8, tail=adaptive); parallelize(i)
        """
        assert self._default is not None
        applied = applied_schedule(self._default)
        # The cache shares one program among statements equal up to index names: speak in
        # this statement's own.
        names, mine = self._default.names, index_order(self.statement)
        if names and len(names) == len(mine) and names != mine:
            applied = applied.renamed(dict(zip(names, mine)))
        if self._gemm_route is None and (self._gemm is not None or self._stack is not None) \
                and not applied.find(Gemm):
            # large calls go to BLAS or the generated GEMM: said where a given gemm command
            # would print (after the loop order and layouts), so that the text is a fixpoint
            commands = list(applied)
            at = next((k for k, c in enumerate(commands)
                       if not isinstance(c, (Reorder, Relayout, Precompute))), len(commands))
            applied = Schedule((*commands[:at], Gemm(GemmRoute.AUTO), *commands[at:]))
        return applied

    def source(self, lang: str = "ir") -> str:
        """The kernel as ``"ir"`` (with the compiler's notes), ``"c"``, ``"llvm"`` or ``"cuda"``,
        in this statement's index names (``"llvm"`` and ``"cuda"``: as compiled).

        >>> print(compile("y(r) = A(r,c) * x(c)", formats={"A": "ds"}).source().splitlines()[1])
          // note: loop order r, c for y(r) (dense)
        """
        assert self._default is not None
        function = self._default.function
        if lang in ("ir", "c"):
            function = self._own_function()
        if lang == "ir":
            text = format_function(function)
            if self._gemm is None and self._stack is None:
                return text
            head, _, rest = text.partition("\n")
            note = route_note(self._gemm_route) if self._gemm is not None else \
                stack_note(self._gemm_route)
            return f"{head}\n  // note: {note}\n{rest}"
        if lang == "llvm" and self._default.kernel.backend == "llvm":
            # (a background build keeps no IR text, codegen/llvm.compile_object: made here)
            return self._default.kernel.settled().source or emit_source(function, "llvm")
        if lang == "cuda" and self.backend == "cuda":
            from tensoralg import gpu

            return gpu.cuda_source(self._default)      # what runs: the GPU's IR settings
        return emit_source(function, lang)

    def _own_function(self) -> Function:
        """The kernel's IR in this statement's index names. The cache shares one program
        among statements equal up to index names (their keys are equal), built with the names
        of whichever compiled first; for another, the program is lowered again from this
        statement (no LLVM: tens of milliseconds, for printing only) and kept."""
        compiled = self._default
        assert compiled is not None
        if not compiled.names or compiled.names == index_order(self.statement):
            return compiled.function
        if self._own is None:
            key = compiled.key
            program = _concretized(self.statement, self.formats,
                                   dict(zip(self.formats, key.index_dtypes)), key.out_format,
                                   key, compiled.plan)
            plan = _with_partials(program, loop_plan(compiled.schedule, key.backend),
                                  compiled.schedule, key.backend) \
                if compiled.plan.partials and compiled.schedule is None else compiled.plan
            self._own = _lowered_ir(program, compiled.function.name, plan,
                                    compiled.schedule, IRLog(echo=False), key.backend)[1]
        return self._own

    def _bound(self, operands: Mapping[str, Any], warn: bool = True,
               any_order: dict[str, Any] | None = None) -> dict[str, Tensor]:
        """The operands bound to tensors of the compiled formats (converted, with a warning,
        when stored otherwise). With ``any_order``, a COO operand that the kernel reads in
        any order (``lower/unordered.py``) is bound as it comes (``_bind_any_order``) and
        recorded there by name; the caller binds it sorted where the program it runs does
        not read it so (``__call__``)."""
        missing = [name for name in self.formats if name not in operands]
        if missing:
            raise ShapeError(f"kernel for {self.statement} needs operand(s) "
                             f"{', '.join(missing)}")
        extra = [name for name in operands if name not in self.formats]
        if extra:
            raise ShapeError(f"kernel for {self.statement} has no operand(s) {', '.join(extra)}")
        bound: dict[str, Tensor] = {}
        for name, fmt in self.formats.items():
            device = _device_operand(operands[name], self.backend)
            if device is not None:
                bound[name] = device       # checked against the kernel by tensoralg.gpu
                continue
            tensor = None
            if any_order is not None and self._default is not None and \
                    _reads_any_order(self._default, name):
                tensor = _bind_any_order(operands[name])
                if tensor is not None:
                    any_order[name] = operands[name]
            if tensor is None:
                tensor = _bind(operands[name], None, f"operand {name}")
            _check_cast(tensor.dtype, self.dtype, f"operand {name}")
            if tensor.ndim != fmt.rank:
                raise ShapeError(f"operand {name} has shape {tensor.shape} (rank {tensor.ndim}) "
                                 f"but {self.statement} uses it with {fmt.rank} indices")
            if tensor.format != fmt:
                if warn and name not in self._warned:
                    self._warned.add(name)
                    warnings.warn(f"operand {name} is stored as {tensor.format} but the kernel "
                                  f"was compiled for {fmt}; converting it on every call",
                                  stacklevel=3)
                tensor = tensor.convert(fmt)
            bound[name] = tensor
        return bound

    def _by_name(self, positional: tuple, named: dict[str, Any]) -> dict[str, Any]:
        names = list(self.formats)
        if len(positional) > len(names):
            raise ShapeError(f"kernel for {self.statement} takes {len(names)} operand(s) "
                             f"({', '.join(names)}), got {len(positional)} by position")
        operands = dict(zip(names, positional))
        twice = [name for name in named if name in operands]
        if twice:
            raise ShapeError(f"kernel for {self.statement}: operand {twice[0]} is given both "
                             f"by position and by name")
        return {**operands, **named}

    def _program_for(self, bound: Mapping[str, Tensor], shape: tuple[int, ...]
                     ) -> CompiledProgram:
        index = tuple(_INT64 if t.format.is_dense else t.index_dtype for t in bound.values())
        tuned = None
        if self.schedule_given is None and len(kernel_cache().tuned):
            dims = {i: bound[name].shape[mode] for name, mode, i in self._uses}
            tuned = tuned_schedule(self._canonical, bound, self.dtype, dims)
        out_index = _out_index_dtype(shape, self.statement, bound)
        signature = (index, out_index, str(tuned))
        compiled = self._programs.get(signature)
        if compiled is None:
            compiled = self._specialise(dict(zip(bound, index)), out_index, tuned)
            self._programs[signature] = compiled
        return compiled

    def __call__(self, *positional: Any, **operands: Any) -> Any:
        """Run the kernel on operands given by name, or by position in the order the statement
        reads them (``k(A, x)`` for ``y(i) = A(i,j) * x(j)``)."""
        if positional:
            operands = self._by_name(positional, operands)
        try:
            values = self._values(operands)
        except KeyError:            # a missing operand: the general path names it
            values = tuple([operands.get(name) for name in self.formats])
        if self._tuned_seen != self._tuned_store.generation and self.schedule_given is None:
            self._recent, self._tuned_seen = None, self._tuned_store.generation
            self._replays.clear()
        if self._recent is not None and len(operands) == len(values):
            result = self._recent(values)
            if result is not None:
                return result
        if len(operands) == len(values) and self.backend != "cuda":
            cast = _uniform(values, self.dtype)
            if cast is not None:
                values, operands = cast, dict(zip(self.formats, cast))
        signature = _signature(self._canonical, values, self.backend) \
            if len(operands) == len(values) else None
        # -- dask hook (tensoralg/dask/): dask.array operands run the kernel block by block
        # (operands with a signature are NumPy arrays and scipy matrices: not dask's)
        if signature is None and _dask_handlers is not None and \
                any(map(_is_dask, operands.values())):
            return _dask_handlers[1](self, operands)
        # -- end of the dask hook
        if self.backend == "cuda":
            return self._run_on_gpu(operands)
        if self._gemm is not None and (self._gemm_route is not None or
                                       large_product(self._gemm, operands)):
            bound = self._bound(operands)
            self._output_shape(bound)    # the shape errors of the general path
            product = dense_gemm(self._gemm, bound, self.dtype, self._gemm_route,
                                 self.statement)
            if product is not None:
                return product
        if self._stack is not None:
            product = self._stacked(operands)
            if product is not None:
                return product
        if signature is not None:
            entry = self._replays.get(signature)
            if entry is not None:
                result = (entry.fast or entry.run)(values)
                if result is not None:
                    if entry.fast is not None and self._gemm is None:
                        self._recent = entry.fast
                    return result
                signature = None   # remembered already; it declined this call (see einsum)
        unsorted: dict[str, Any] = {}
        bound = self._bound(operands, any_order=unsorted if self.backend != "cuda" else None)
        shape = self._output_shape(bound)
        compiled = self._program_for(bound, shape)
        resort = [name for name in unsorted if not _reads_any_order(compiled, name)]
        if resort:      # a tuned schedule's program, say, that reads them in order
            bound.update({name: _bind(unsorted[name], None, f"operand {name}")
                          for name in resort})
            compiled = self._program_for(bound, shape)
        result = execute(compiled, bound, self.dtype, shape)
        # A dense output format asked for explicitly ("d", "dd") returns the same array as
        # none asked for (``_wrap``), so its calls replay too (they ran the general path, 30 us
        # instead of 3-4 for a 1024-value product, 2026-12-07).
        if isinstance(result, np.ndarray) and (self.out_format is None or
                                               self.out_format.is_dense):
            if signature is not None:
                _remember(signature, compiled, self.statement, tuple(self.formats), values,
                          bound, self._replays)
            return result[()] if result.ndim == 0 else result
        if signature is not None and not isinstance(result, np.ndarray):
            _remember(signature, compiled, self.statement, tuple(self.formats), values, bound,
                      self._replays, self.out_format)
        families = [input_family(operands[name]) for name in self.formats]
        return _wrap(result, self.out_format, families, None)

    def _stacked(self, operands: Mapping[str, Any]) -> np.ndarray | None:
        """The call on BLAS when it is a stack of products large enough for it (or
        ``gemm(blas)`` asked), from a look at the operands' shapes before binding; None for
        the loop nest."""
        form = self._stack
        assert form is not None
        if self._gemm_route is None:
            dims = form.sizes(*[getattr(operands.get(name), "shape", None)
                                for name in (form.a, form.b)])
            if dims is None or not stack_pays(form, dims, self.dtype.itemsize):
                return None
        bound = self._bound(operands)
        self._output_shape(bound)    # the shape errors of the general path
        dims = infer_dims(self.statement, {name: t.shape for name, t in bound.items()})
        return dense_contraction(form, bound, self.dtype, self._gemm_route, dims,
                                 self.statement)

    def _run_on_gpu(self, operands: Mapping[str, Any]) -> Any:
        from tensoralg import gpu

        _check_backend("cuda")
        bound = self._bound(operands)
        shape = self._output_shape(bound)
        compiled = self._program_for(bound, shape)
        result = gpu.run(compiled, bound, self.dtype, shape, cache=kernel_cache().disk)
        if not isinstance(result, (np.ndarray, Tensor)):
            return result
        if isinstance(result, np.ndarray) and self.out_format is None:
            return result[()] if result.ndim == 0 else result
        families = [input_family(operands[name]) for name in self.formats]
        return _wrap(result, self.out_format, families, None)

    def bind(self, out: np.ndarray | None = None, **operands: Any) -> BoundCall:
        """Fix the operands (and a dense output buffer) for repeated calls.

        The returned call runs the kernel on whatever the arrays hold at that moment, without
        re-checking or re-packing anything, so dense operands must already be C-contiguous
        arrays of the kernel's dtype: they are used in place, never copied. Sparse operands
        are validated here, once; do not change their index arrays afterwards. ``out``, if
        given, must be a C-contiguous array of the output's shape and dtype. A dense operand
        can be swapped for another of the same shape with ``call.rebind(name, array)``.

        >>> import numpy as np, scipy.sparse as sp
        >>> k = compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
        >>> x = np.zeros(2)
        >>> call = k.bind(A=sp.csr_array(np.eye(2)), x=x)
        >>> x[:] = [1.0, 2.0]
        >>> call().tolist()
        [1.0, 2.0]
        """
        if self.backend == "cuda":
            raise UnsupportedError("bind() fixes operands for the CPU kernel; call a cuda "
                                   "kernel directly, with operands kept on the device "
                                   "(tensoralg.gpu.to_device) to avoid copies")
        what = f"bound kernel for {self.statement}"
        if self.out_format is not None and not self.out_format.is_dense:
            raise UnsupportedError(f"{what}: only dense outputs can be bound (the output is "
                                   f"{self.out_format}); call the kernel instead")
        for name, operand in operands.items():
            fmt = self.formats.get(name)
            if fmt is not None and fmt.is_dense and (
                    type(operand) is not np.ndarray or operand.dtype != self.dtype or
                    not operand.flags.c_contiguous):
                got = f"a {'C-contiguous' if operand.flags.c_contiguous else 'non-contiguous'}" \
                    f" {operand.dtype} array" if isinstance(operand, np.ndarray) else \
                    f"a {type(operand).__name__}"
                raise ShapeError(f"{what}: dense operand {name} must be a C-contiguous "
                                 f"{self.dtype} NumPy array (it is used in place); got {got}")
        bound = self._bound(operands, warn=False)
        for name, tensor in bound.items():
            if tensor.dtype != self.dtype:
                bound[name] = tensor.astype(self.dtype)
            source = operands[name]
            if not self.formats[name].is_dense and \
                    not _shares_values(bound[name].vals, source):
                given = f"{getattr(source, 'format', type(source).__name__)}, " \
                    f"{getattr(source, 'dtype', '?')}"
                warnings.warn(
                    f"{what}: sparse operand {name} ({given}) was copied into "
                    f"{self.formats[name]} of {self.dtype} with sorted indices when bound, so "
                    f"the bound call will not see later changes to {name}'s values; bind it "
                    f"stored that way to have it used in place", stacklevel=2)
        shape = self._output_shape(bound)
        compiled = self._program_for(bound, shape)
        if any(bound[source].format.is_dense for _, source in compiled.program.conversions):
            # a bound operand is read in place, whatever its contents: no copy of it is kept
            compiled = kernel_cache().kept(compiled)
        if compiled.rows is not None:     # the bound matrix's rows pick the kernel once
            with optimised_only():
                compiled = _row_kernel(compiled, bound[compiled.rows[0]].levels[1].pos,
                                       eager=True)
        tensors = dict(bound)
        for alias, source in compiled.program.conversions:
            tensors[alias] = tensors[source].convert(compiled.program.tensor(alias).format)
        if not compiled.program.output.format.is_dense:
            raise UnsupportedError(f"{what}: only dense outputs can be bound")
        buffer = dense_output(out, shape, self.dtype, what)
        sizes = index_sizes(compiled, tensors)
        plan = compiled.arguments
        bounds = None
        threads = kernel_cache().threads
        # Bound calls split and refine ranges freely, which a split loop's blocks and a
        # partial-output reduction do not allow: those run on one thread when bound.
        if plan.range_slots is not None and plan.range_index is not None and \
                not compiled.plan.partials and compiled.plan.range_step(plan.range_index) == 1:
            work = estimated_work(tensors, shape)
            extent = plan.range_size(sizes, tensors)
            least = min_rows_per_thread(all(t.format.is_dense for t in tensors.values()),
                                        work, extent)
            parts = min(threads.parts(work), extent // least)
            if parts > 1:
                bounds = split(extent, parts, _range_weights(compiled, tensors))
        kernel = compiled.kernel.settled()    # bound calls are for repeated, timed work
        function = kernel.function
        # Ranges over the output's leading index own whole blocks of its rows: each range can
        # zero its own block in parallel instead of the caller zeroing all of it first.
        leading = plan.range_index is not None and plan.range_over is None and \
            compiled.program.output.dims[:1] == (plan.range_index,)
        return BoundCall(function, plan, tensors, sizes, buffer, bounds, threads, what,
                         compiled.overwrites, owner=kernel, leading_ranges=leading)

    def _output_shape(self, bound: Mapping[str, Tensor]) -> tuple[int, ...]:
        """The output shape, after checking that every index has one size (fast when it has)."""
        sizes: dict[str, int] = {}
        for name, mode, index in self._uses:
            size = bound[name].shape[mode] if mode < bound[name].ndim else -1
            if sizes.setdefault(index, size) != size:
                break
        else:
            if all(len(self._ranks[n]) == bound[n].ndim for n in bound):
                return tuple(sizes[i] for i in self.statement.lhs.indices)
        dims = infer_dims(self.statement, {n: t.shape for n, t in bound.items()})  # the error
        return output_shape(self.statement, dims)

    def __str__(self) -> str:
        formats = ", ".join(f"{n}: {f}" for n, f in self.formats.items())
        return f"Kernel({self.statement}; {formats}; {self.dtype}; {self.backend})"


def applied_schedule(compiled: CompiledProgram) -> Schedule:
    """The schedule ``compiled`` runs (``lower/scheduling.py``, ``applied_schedule``)."""
    changed = {name for name, _, text in (compiled.log.entries if compiled.log else ())
               if text is not None}
    return schedule_applied(compiled.program, compiled.function, compiled.plan,
                            compiled.schedule, compiled.arguments.range_index, changed,
                            _tile_rows(compiled.key.backend))


def _shares_values(vals: np.ndarray, source: Any) -> bool:
    """Whether a bound tensor's values are ``source``'s own (a scipy matrix's ``data``, a
    Tensor's ``vals``), not a copy. With no stored values there is nothing a later change
    could miss (an all-zero weight: empty arrays share no memory)."""
    theirs = getattr(source, "data", None) if not isinstance(source, Tensor) else source.vals
    return isinstance(theirs, np.ndarray) and (
        theirs.size == 0 and vals.size == 0 or np.shares_memory(vals, theirs))


def compile(statement: str, formats: Mapping[str, Any] | None = None, dtype: Any = "float64",
            backend: str | None = None, schedule: Any = None) -> Kernel:
    """Compile a TACO-style statement for the given operand formats.

    ``formats`` maps tensor names (operands and, optionally, the output) to formats; operands
    not named are dense. The kernel is called with operands by name and returns the output.

    >>> import numpy as np
    >>> k = compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    >>> k(A=np.eye(2), x=np.array([1.0, 2.0])).tolist()
    [1.0, 2.0]
    """
    backend = backend or "llvm"
    if backend not in BACKENDS:
        raise UnsupportedError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if not isinstance(statement, (str, Assignment)):
        raise NotationError(f"the statement must be a string such as 'y(i) = A(i,j) * x(j)', "
                            f"not {type(statement).__name__}")
    if formats is not None and not isinstance(formats, Mapping):
        raise InputError(f"formats must be a dict from tensor name to format, such as "
                         f"{{'A': 'csr'}}, not {type(formats).__name__}")
    stmt = parse_statement(statement) if isinstance(statement, str) else statement
    ranks = tensor_ranks(stmt)
    given = dict(formats or {})
    unknown = [n for n in given if n not in ranks and n != stmt.lhs.tensor]
    if unknown:
        raise NotationError(f"formats names {', '.join(unknown)}, which the statement does "
                            f"not use", statement if isinstance(statement, str) else None)
    resolved = {name: resolve_format(given.get(name, "dense"), rank, f"operand {name}")
                for name, rank in ranks.items()}
    out_format = given.get(stmt.lhs.tensor)
    out = resolve_format(out_format, len(stmt.lhs.indices), "output") if out_format else None
    if out is not None and out.is_dense:
        out = dense(out.rank)   # returned as a NumPy array in mode order
    value_dtype = _dtype_argument(dtype)
    if value_dtype not in VALUE_DTYPES:
        raise UnsupportedError(f"dtype {value_dtype} is not supported; use float32, float64, "
                               f"complex64, complex128, int32 or int64")
    if value_dtype.kind in "iu" and _needs_float(stmt.rhs):
        raise UnsupportedError(f"{statement} needs floating-point arithmetic; use a float dtype")
    _check_literals(stmt.rhs, value_dtype, statement)
    scheduled = as_schedule(schedule)
    if scheduled is not None:
        check_schedule(scheduled, stmt)
    return Kernel(stmt, resolved, value_dtype, backend, out, scheduled)


def _check_literals(expr: Expr, dtype: np.dtype, statement: Any) -> None:
    """InputError for a literal the kernel's dtype cannot hold (3000000000 in int32)."""
    if isinstance(expr, Literal) and math.isfinite(expr.value):   # inf is a float's own
        info = np.iinfo(dtype) if dtype.kind in "iu" else np.finfo(dtype)
        if not float(info.min) <= expr.value <= float(info.max) or \
                (dtype.kind in "iu" and not info.min <= expr.value <= info.max):
            raise InputError(f"the literal {expr.value} in {statement} does not fit in "
                             f"{dtype} (whose values run from {info.min} to {info.max})")
    for child in children(expr):
        _check_literals(child, dtype, statement)


def dense_layer(weight: np.ndarray, bias: np.ndarray | None = None, relu: bool = False
                ) -> DenseLayer:
    """``act(A @ weight + bias)`` on the generated GEMM, the weight packed once (see
    ``runtime/gemm.py``); large products split over the kernel threads.

    >>> layer = dense_layer(np.ones((2, 3), np.float32), np.zeros(3, np.float32), relu=True)
    >>> layer(np.array([[1.0, -3.0]], np.float32)).tolist()
    [[0.0, 0.0, 0.0]]
    """
    cache = kernel_cache()
    return DenseLayer(weight, bias, relu, cache=cache.disk, threads=cache.threads)


def quantized_layer(weight: np.ndarray, epilogue: Int8Epilogue | None = None
                    ) -> QuantizedLayer:
    """``float32((saturate(round(x / s) + z) - z) @ weight)`` for a constant int8 ``weight``
    on the generated int8 GEMM (``runtime/qgemm.py``; AVX-512 VNNI hosts only, see
    :func:`int8_gemm_supported`): onnxruntime's dynamically quantized product, exact. Large
    products split over the kernel threads. ``epilogue`` (an :class:`Int8Epilogue`) rescales,
    biases and clamps the sums in registers.

    >>> if int8_gemm_supported():
    ...     layer = quantized_layer(np.eye(2, dtype=np.int8))
    ...     s, z = np.array(0.5, np.float32), np.array(3.0, np.float32)
    ...     print(layer(np.array([[1.0, -1.0]], np.float32), s, z).tolist())
    ... else:
    ...     print([[2.0, -2.0]])
    [[2.0, -2.0]]
    """
    cache = kernel_cache()
    return QuantizedLayer(weight, cache=cache.disk, threads=cache.threads, epilogue=epilogue)


def quantized_conv(weight: np.ndarray, strides: tuple[int, int], pads_begin: tuple[int, int],
                   pads_end: tuple[int, int], dilations: tuple[int, int] = (1, 1),
                   epilogue: Int8Epilogue | None = None) -> QuantizedConv:
    """A dynamically quantized 2-D convolution (group 1, horizontal dilation 1) by the
    constant int8 ``weight`` (M, C, KH, KW) on the int8 GEMM (``runtime/qgemm.py``, AVX-512
    VNNI hosts only): the input quantized into a uint8 channels-last image, the result NCHW,
    exact. Large products split over the kernel threads.

    >>> if int8_gemm_supported():
    ...     conv = quantized_conv(np.ones((1, 1, 1, 1), np.int8), (1, 1), (0, 0), (0, 0))
    ...     one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    ...     print(conv(np.full((1, 1, 1, 2), 3.0, np.float32), one, zero).ravel().tolist())
    ... else:
    ...     print([3.0, 3.0])
    [3.0, 3.0]
    """
    cache = kernel_cache()
    return QuantizedConv(weight, strides, pads_begin, pads_end, dilations, cache=cache.disk,
                         threads=cache.threads, epilogue=epilogue)


def conv_layer(weight: np.ndarray, bias: np.ndarray | None, strides: tuple[int, int],
               pads_begin: tuple[int, int], pads_end: tuple[int, int], relu: bool = False
               ) -> ConvLayer:
    """A direct 2-D convolution (group 1, no dilation) on the generated GEMM, channels-last
    output (see ``runtime/gemm.py``).

    >>> conv = conv_layer(np.ones((1, 1, 1, 1), np.float32), None, (1, 1), (0, 0), (0, 0))
    >>> conv.out_shape(3, 4)
    (3, 4)
    """
    cache = kernel_cache()
    return ConvLayer(weight, bias, strides, pads_begin, pads_end, relu, cache=cache.disk,
                     threads=cache.threads)


def winograd_conv(weight: np.ndarray, bias: np.ndarray | None, pads_begin: tuple[int, int],
                  pads_end: tuple[int, int], relu: Any = False, tile: int = 2) -> WinogradConv:
    """A 3x3 convolution (stride 1, dilation 1, group 1) by Winograd's F(tile x tile, 3x3)
    (tile 2 or 4) on the generated GEMM, NCHW in and out (see ``runtime/winograd.py``);
    :func:`winograd_pays` says where it beats :func:`conv_layer`, :func:`winograd_tile` which
    tile is estimated fastest.

    >>> conv = winograd_conv(np.ones((16, 16, 3, 3), np.float32), None, (1, 1), (1, 1), tile=4)
    >>> conv.out_shape(7, 7)
    (7, 7)
    """
    cache = kernel_cache()
    return WinogradConv(weight, bias, pads_begin, pads_end, relu, cache=cache.disk,
                        threads=cache.threads, tile=tile)


def winograd_host() -> bool:
    """Whether this host runs :func:`winograd_conv` well (AVX-512; the ONNX plan uses it only
    there).

    >>> isinstance(winograd_host(), bool)
    True
    """
    from tensoralg.runtime.winograd import winograd_host as host

    return host(kernel_cache().disk)


def transpose_call(source: np.ndarray, target: np.ndarray) -> BoundChannelsLast:
    """A bound call writing ``source`` (N, R, S) into ``target`` (N, S, R), each matrix
    transposed: a convolution's channels-last product into its NCHW output. Blocks of a
    vector's width both ways are loaded, transposed in registers and stored whole (the
    channels-last copy's kernel, ``runtime/gemm.py``, over one-row images); the compiled
    transpose statement ran 2-3x slower on ResNet-18's layers. ``source`` must have each
    matrix C-contiguous, ``target`` be C-contiguous; float32 or float64.

    >>> x = np.arange(6.0).reshape(1, 2, 3)
    >>> y = np.empty((1, 3, 2))
    >>> _ = transpose_call(x, y)()
    >>> y[0].tolist()
    [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    """
    if source.ndim != 3 or target.shape != (source.shape[0], source.shape[2], source.shape[1]) \
            or source.dtype != target.dtype or source.dtype.kind != "f" or \
            source.dtype.itemsize not in (4, 8) or not target.flags.c_contiguous:
        raise ShapeError(f"transpose_call: cannot write {source.dtype} {source.shape} "
                         f"transposed into {target.dtype} {target.shape} (a C-contiguous "
                         f"float32 or float64 array of the transposed shape)")
    n, rows, columns = source.shape
    cache = kernel_cache()
    return BoundChannelsLast(source.reshape(n, rows, 1, columns),
                             target.reshape(n, 1, columns, rows), (0, 0), cache=cache.disk,
                             threads=cache.threads)


def interpolation_call(x: np.ndarray, out: np.ndarray, matrix: Any = None, *,
                       taps: np.ndarray | None = None, weights: np.ndarray | None = None
                       ) -> Any:
    """A bound call writing ``out[i, :] = matrix @ x[i, :]`` for every row of ``x`` (rows,
    in) into ``out`` (rows, out), ``matrix`` (out x in, scipy CSR) an interpolation with a
    few entries a row: a Resize's pass over the last axis. Each vector of outputs gathers its
    taps from the row (``runtime/interpolate.py``); the CSR kernel ran the two taps of a
    linear pass as a scalar loop, 2.2-2.4x slower (8192 rows of 64 -> 128, float32, one thread,
    2026-12-07, Intel Xeon VM, ad hoc). Instead of ``matrix``, its tap tables may be given:
    ``taps`` (int32, (count, out): the input column of output ``a``'s ``t``-th tap, -1 for
    none; or (tables, count, out), table ``k`` serving the ``k``-th block of ``rows /
    tables`` rows: GridSample's images, each sampled at its own points) and ``weights`` (x's
    dtype, same shape), checked when the call is made and read in place. None for a dtype
    other than float32/float64 or more than
    :data:`INTERPOLATION_TAPS` entries a row.

    >>> import scipy.sparse as sp
    >>> m = sp.csr_matrix(np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]))
    >>> out = np.empty((1, 3))
    >>> _ = interpolation_call(np.array([[2.0, 4.0]]), out, m)()
    >>> out.tolist()
    [[2.0, 3.0, 4.0]]
    """
    from tensoralg.runtime.interpolate import FLOATS, BoundTaps, tap_tables

    x, out = np.asarray(x), np.asarray(out)
    if x.dtype not in FLOATS:
        return None
    tables = tap_tables(matrix, x.dtype) if matrix is not None else (taps, weights)
    if tables is None or tables[0] is None or tables[1] is None or \
            tables[0].shape[-2] > INTERPOLATION_TAPS:
        return None
    cache = kernel_cache()
    return BoundTaps(x, out, *tables, cache=cache.disk, threads=cache.threads)


def grid_sample_call(x: np.ndarray, grid: np.ndarray, out: np.ndarray, align_corners: bool,
                     padding: str) -> Any:
    """A bound call writing into ``out`` (N, C, Ho, Wo) the bilinear samples of ``x`` (N, C,
    H, W) at ``grid`` (N, Ho, Wo, 2; x then y in [-1, 1]): ONNX GridSample in linear mode,
    ``padding`` ``"zeros"`` or ``"border"``, each point's taps and weights computed in the
    kernel (``codegen/grid_sample.py``) exactly as ``onnx/ops/grid_sample.py`` computes them.
    The grid is read in place each call. None for other paddings, dtypes other than
    float32/float64 or a grid of another dtype than ``x``.

    >>> x = np.arange(4.0).reshape(1, 1, 2, 2)
    >>> out = np.empty((1, 1, 1, 1))
    >>> _ = grid_sample_call(x, np.zeros((1, 1, 1, 2)), out, False, "zeros")()
    >>> out.item()
    1.5
    """
    from tensoralg.runtime.interpolate import FLOATS, BoundGridSample

    x, grid = np.asarray(x), np.asarray(grid)
    if x.dtype not in FLOATS or grid.dtype != x.dtype or padding not in ("zeros", "border"):
        return None
    cache = kernel_cache()
    return BoundGridSample(x, grid, out, bool(align_corners), padding == "border",
                           cache=cache.disk, threads=cache.threads)


def grouped_conv(weight: np.ndarray, bias: np.ndarray | None, groups: int,
                 strides: tuple[int, int], pads_begin: tuple[int, int],
                 pads_end: tuple[int, int], relu: bool | tuple[float, float] = False
                 ) -> GroupedConv:
    """A grouped 2-D convolution (dilation 1) on the generated GEMM, one per group, NCHW in
    and out (see ``runtime/gemm.py``).

    >>> conv = grouped_conv(np.ones((4, 1, 1, 1), np.float32), None, 2, (1, 1), (0, 0), (0, 0))
    >>> conv.out_shape(3, 4)
    (3, 4)
    """
    cache = kernel_cache()
    return GroupedConv(weight, bias, groups, strides, pads_begin, pads_end, relu,
                       cache=cache.disk, threads=cache.threads)


def direct_conv(weight: np.ndarray, bias: np.ndarray | None, image: tuple[int, int, int],
                strides: tuple[int, int] = (1, 1), dilations: tuple[int, int] = (1, 1),
                pads_begin: tuple[int, int] = (0, 0), pads_end: tuple[int, int] = (0, 0),
                groups: int = 1, relu: bool = False, skip_zeros: bool = False
                ) -> DirectConv | None:
    """A 2-D convolution of NCHW images of shape ``image`` (C, H, W) with ``weight``
    (M, C/groups, KH, KW) compiled into the kernel, NCHW out (see ``runtime/conv.py``); with
    ``skip_zeros`` the zero weights are left out of the code. None where it does not apply
    (no AVX-512, too many weights to unroll, a non-float dtype): use :func:`conv_layer`.

    >>> conv = direct_conv(np.ones((1, 1, 2, 2), np.float32), None, (1, 2, 2))
    >>> conv is None or conv(np.ones((1, 1, 2, 2), np.float32)).item() == 4.0
    True
    """
    from tensoralg.codegen.conv import ConvGeometry
    from tensoralg.runtime.conv import direct_conv as build_conv

    weight = np.asarray(weight)
    channels, height, width = image
    if min(*strides, *dilations) < 1 or min(*pads_begin, *pads_end) < 0:
        raise ShapeError(f"direct_conv: strides {tuple(strides)} and dilations "
                         f"{tuple(dilations)} must be at least 1 and pads {tuple(pads_begin)}, "
                         f"{tuple(pads_end)} at least 0")
    if weight.ndim != 4 or groups < 1 or channels % groups or weight.shape[0] % groups or \
            weight.shape[1] * groups != channels:
        raise ShapeError(f"direct_conv: weight {weight.shape} and {channels} input channels "
                         f"in {groups} group(s) do not agree")
    out = [(size + pads_begin[a] + pads_end[a] - dilations[a] * (weight.shape[2 + a] - 1) - 1)
           // strides[a] + 1 for a, size in enumerate((height, width))]
    if min(out) < 1:
        raise ShapeError(f"direct_conv: a {weight.shape[2]}x{weight.shape[3]} kernel does not "
                         f"fit a {height}x{width} image with these pads and dilations")
    geometry = ConvGeometry(channels, height, width, weight.shape[0], out[0], out[1],
                            (weight.shape[2], weight.shape[3]), tuple(strides),
                            tuple(dilations), tuple(pads_begin), groups)
    cache = kernel_cache()
    return build_conv(geometry, weight, bias, relu, skip_zeros, cache=cache.disk,
                      threads=cache.threads)


def window_kernel(mode: str, image: tuple[int, int, int], kernel: tuple[int, int],
                  dtype: Any, strides: tuple[int, int] = (1, 1),
                  dilations: tuple[int, int] = (1, 1), pads_begin: tuple[int, int] = (0, 0),
                  pads_end: tuple[int, int] = (0, 0), out: tuple[int, int] | None = None,
                  count_include_pad: bool = False, weight: np.ndarray | None = None,
                  bias: np.ndarray | None = None, relu: bool = False) -> Any:
    """A generated channel-wise window kernel over NCHW images of shape ``image`` (C, H, W):
    ``mode`` ``"max"`` (MaxPool), ``"average"`` (AveragePool) or ``"depthwise"`` (a
    convolution with one filter ``weight[c]`` (C, 1, KH, KW) per channel, plus ``bias``, then
    ReLU when ``relu``; a grouped ``weight`` (M, Cg, KH, KW) of ``C / Cg`` groups runs as
    well, meant for groups of few channels); see ``runtime/window.py``. ``out`` is the
    output's (OH, OW) (default: as the pads give, rounding down). None for a dtype other than
    float32/float64.

    >>> k = window_kernel("max", (1, 2, 2), (2, 2), np.float32)
    >>> k(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)).item()
    3.0
    """
    from tensoralg.codegen.window import WindowGeometry
    from tensoralg.runtime.window import FLOATS, WindowKernel

    if np.dtype(dtype) not in FLOATS:
        return None
    channels, height, width = image
    if out is None:
        out = tuple((size + pads_begin[a] + pads_end[a] - dilations[a] * (kernel[a] - 1) - 1)
                    // strides[a] + 1 for a, size in enumerate((height, width)))
    geometry = WindowGeometry(height, width, out[0], out[1], tuple(kernel), tuple(strides),
                              tuple(dilations), tuple(pads_begin), tuple(pads_end))
    cache = kernel_cache()
    return WindowKernel(geometry, mode, np.dtype(dtype), channels, count_include_pad, weight,
                        bias, relu, cache=cache.disk, threads=cache.threads)


def top_k(x: np.ndarray, k: int, axis: int = -1, largest: bool = True
          ) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``k`` largest (``largest=False``: smallest) values of ``x`` along ``axis``, best
    first, equal values in position order and NaNs last, and their positions (int64), by a
    generated row kernel (``runtime/select.py``); None where it does not run (values other
    than float32/64 or int32/64, or ``k`` over ``runtime.select.MAX_K``), for the caller to
    sort instead.

    >>> values, where = top_k(np.array([[2.0, 9.0, 4.0], [5.0, 1.0, 5.0]]), 2)
    >>> values.tolist(), where.tolist()
    ([[9.0, 4.0], [5.0, 5.0]], [[1, 2], [0, 2]])
    """
    selector = kernel_cache().selections
    if not selector.compiles(np.asarray(x).dtype, int(k)):
        return None
    return selector.top_k(np.asarray(x), int(k), int(axis), bool(largest))


def kept_boxes(x_min: np.ndarray, x_max: np.ndarray, y_min: np.ndarray, y_max: np.ndarray,
               threshold: float, most: int) -> np.ndarray:
    """Greedy non-maximum suppression by a generated loop (``runtime/suppress.py``): of the
    boxes given best first by their edges, the positions (int64) of those kept, each unless
    a box kept before it overlaps it by an intersection over union above ``threshold``, at
    most ``most``. Edges of other float dtypes are walked as float32.

    >>> left, right = np.array([0.0, 0.1, 5.0]), np.array([1.0, 1.1, 6.0])
    >>> kept_boxes(left, right, left, right, 0.5, 10).tolist()
    [0, 2]
    """
    edges = [np.asarray(e) for e in (x_min, x_max, y_min, y_max)]
    if not BoxSuppressor.takes(edges[0].dtype):
        edges = [e.astype(np.float32) for e in edges]
    return kernel_cache().suppressor.kept(*edges, threshold, most)


def pooled_regions(x: np.ndarray, batch: np.ndarray, along_y: RoiSamples,
                   along_x: RoiSamples, largest: bool = False) -> np.ndarray | None:
    """Regions of ``x`` (N, C, H, W) pooled by bilinear samples by a generated loop
    (``runtime/roi.py``, ONNX ``RoiAlign``): ``(regions, C, bins_y, bins_x)``, each bin the
    average of its samples' interpolated values (``largest``: the largest weighted corner),
    the samples' pixels and weights along each axis given per region (``RoiSamples``, of
    shape (regions, bins, samples a bin)). None for values other than float32/64.

    >>> half = RoiSamples(np.zeros((1, 1, 1), np.int64), np.ones((1, 1, 1), np.int64),
    ...                   np.full((1, 1, 1), 0.5), np.full((1, 1, 1), 0.5))
    >>> pooled_regions(np.arange(4.0).reshape(1, 1, 2, 2), np.zeros(1), half, half).tolist()
    [[[[1.5]]]]
    """
    if not RegionPooler.takes(np.asarray(x).dtype):
        return None
    try:
        return kernel_cache().regions.pool(np.asarray(x), batch, along_y, along_x, largest)
    except ValueError as error:
        raise ShapeError(f"pooled_regions: {error}") from None


def row_extreme(x: np.ndarray, first: int, last: int, largest: bool = True
                ) -> np.ndarray | None:
    """The largest (``largest=False``: smallest) value of ``x`` over its consecutive axes
    ``first..last``, kept with size 1, by a generated one-pass kernel (``extreme_call``);
    NaN wherever one is among the values. None for values other than float32/64 and
    int32/64, for the caller to reduce otherwise; a ShapeError for axes ``x`` lacks or no
    values to reduce.

    >>> row_extreme(np.array([[2.0, 9.0, 4.0], [5.0, 1.0, 5.0]]), 1, 1).tolist()
    [[9.0], [5.0]]
    """
    x = np.asarray(x)
    if x.dtype not in VALUE_TYPES:
        return None
    if not 0 <= first <= last < x.ndim:
        raise ShapeError(f"row_extreme: axes {first}..{last} of an array of shape {x.shape}")
    if not math.prod(x.shape[first:last + 1]):
        raise ShapeError(f"row_extreme: no values along axes {first}..{last} of {x.shape}")
    out = np.empty(x.shape[:first] + (1,) * (last + 1 - first) + x.shape[last + 1:], x.dtype)
    if out.size:
        extreme_call(np.ascontiguousarray(x), first, last, largest, out, "row_extreme")()
    return out


def scattered_extremes(data: np.ndarray, rows: np.ndarray, updates: np.ndarray,
                       largest: bool = True) -> np.ndarray | None:
    """A copy of ``data`` with each ``updates[e]`` combined into row ``rows[e]`` by max
    (``largest=False``: min), by a generated loop (``runtime/scatter.py``; ONNX
    ``ScatterElements`` with reduction max or min over whole rows); NaN wherever one is among
    the values combined. None for values other than float32/64 and int32/64, for the caller
    to combine otherwise; a ShapeError for a row index outside the data or updates that are
    not rows of it.

    >>> scattered_extremes(np.zeros((3, 2)), np.array([2, 0, 2]),
    ...                    np.array([[1.0, -1.0], [4.0, 4.0], [3.0, 2.0]])).tolist()
    [[4.0, 4.0], [0.0, 0.0], [3.0, 2.0]]
    """
    data = np.asarray(data)
    if not RowScatterer.takes(data.dtype) or data.ndim < 1:
        return None
    try:
        return kernel_cache().scatterer.combined(data, np.asarray(rows), np.asarray(updates),
                                                 largest)
    except ValueError as error:
        raise ShapeError(f"scattered_extremes: {error}") from None


def softmax_kernel(length: int, dtype: Any, log: bool = False, any_length: bool = False
                   ) -> Any:
    """A generated Softmax (``log``: LogSoftmax) over contiguous rows of ``length`` values,
    one pass set per row in cache (see ``runtime/softmax.py``); None for a dtype other than
    float32/float64. ``any_length``: the kernel takes the length as an argument (one module
    for every length, a little slower than one with the length compiled in).

    >>> k = softmax_kernel(2, np.float64)
    >>> k(np.log(np.array([[1.0, 3.0]]))).round(3).tolist()
    [[0.25, 0.75]]
    """
    from tensoralg.runtime.softmax import FLOATS, SoftmaxKernel

    if np.dtype(dtype) not in FLOATS:
        return None
    cache = kernel_cache()
    return SoftmaxKernel(int(length), np.dtype(dtype), log, cache=cache.disk,
                         threads=cache.threads, any_length=any_length)


@contextlib.contextmanager
def optimised_builds() -> Iterator[None]:
    """Within the block, every kernel compiled runs optimised code from its first call (no
    quick first build, ``codegen/tiered.py``): for code that times kernels as soon as it
    compiles them, or compiles many to run them at once (the ONNX importer, autotuning).

    >>> import numpy as np, tensoralg as ta
    >>> with ta.optimised_builds():
    ...     k = ta.compile("y(i) = A(i,j) * x(j) + x(i)")
    >>> k(A=np.eye(2), x=np.ones(2))
    array([2., 2.])
    """
    with optimised_only():
        yield


def wait_for_optimised(timeout: float | None = None) -> bool:
    """Wait until every kernel this process compiled runs its optimised code; whether they all
    do within ``timeout`` seconds (None: no limit).

    A new kernel first runs code LLVM emitted without optimising it, while its optimised build
    is made on a background thread and then takes its place (``codegen/tiered.py``; calls too
    large for the quick code wait for it on their own). Call this before timing kernels you
    just compiled, or set ``TENSORALG_QUICK_BUILDS=0`` to optimise every kernel before it runs.

    >>> import numpy as np, tensoralg as ta
    >>> _ = ta.einsum("ij,j->i", np.ones((3, 3)), np.ones(3))
    >>> ta.wait_for_optimised(timeout=60)
    True
    """
    from tensoralg.codegen.tiered import finish

    if timeout is not None and (isinstance(timeout, bool) or
                                not isinstance(timeout, (int, float)) or not timeout >= 0):
        raise InputError(f"wait_for_optimised: timeout must be None or a number of seconds "
                         f">= 0, not {timeout!r}")
    return finish(timeout)


def set_num_threads(threads: int) -> None:
    """Run kernels on at most ``threads`` threads (default: one per core, or
    ``TENSORALG_NUM_THREADS``). Applies to every call from now on, and to calls bound from now
    on (a model's plan is bound when it is built).

    >>> set_num_threads(1); get_num_threads()
    1
    """
    if not isinstance(threads, (int, np.integer)) or isinstance(threads, bool) or threads < 1:
        raise UnsupportedError(f"set_num_threads takes a positive integer, got {threads!r}")
    kernel_cache().threads.resize(int(threads))


def set_memory_limit(limit: int | str | None) -> None:
    """Refuse dense outputs and temporaries over ``limit`` bytes (or text such as ``"8G"``)
    with ``MemoryLimitError`` before allocating them; None restores the default, half the
    memory available (or ``TENSORALG_MEMORY_LIMIT``).

    >>> set_memory_limit("1K")
    >>> einsum("i,j->ij", np.ones(100), np.ones(100))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tensoralg.errors.MemoryLimitError: out(...) = ...: the dense output would take 78.1 KiB (10000 values), over the memory limit of 1.0 KiB; ask for a sparse result (out_format='csr' in ta.einsum, or the output's entry in ta.compile's formats), or raise the limit with ta.set_memory_limit / TENSORALG_MEMORY_LIMIT
    >>> set_memory_limit(None)
    """
    set_limit(limit)


def get_memory_limit() -> int:
    """The limit in bytes on one dense output or temporary (see :func:`set_memory_limit`)."""
    return memory_limit()


def get_num_threads() -> int:
    """The number of threads kernels may run on (see :func:`set_num_threads`)."""
    return kernel_cache().threads.threads


__all__ = ["einsum", "compile", "Kernel", "KernelKey", "CompileOptions", "kernel_cache",
           "RowCompressor", "DenseLayer", "dense_layer", "QuantizedLayer", "quantized_layer", "int8_gemm_supported", "QuantizedConv", "quantized_conv", "Int8Epilogue", "ConvLayer", "conv_layer", "WinogradConv", "winograd_conv", "winograd_host", "winograd_pays", "winograd_tile", "GroupedConv", "grouped_conv",
           "DirectConv", "direct_conv",
           "CallSequence", "NativeGroup", "Slot", "canonical_csr", "data_address", "block_copy_call", "broadcast_call", "copy_call", "gather_call",
           "gram_call", "ids_call", "im2row_call", "cumsum_call", "extreme_call", "pointwise_conv", "planar_pays", "patch_conv_of",
           "compiled_conv_gathers",
           "set_num_threads", "get_num_threads", "set_memory_limit", "get_memory_limit",
           "execute"]
