"""Assembling a kernel's CUDA translation unit from its plan (``cuda.cuda_program``).

One unit per IR function: a header (the function's notes and the mapping the unit offers),
the preamble, the float helpers, then the kernels of every mapping the plan allows (or of the
one asked for). Sparse outputs add the count and fill kernels (``cuda_assembly.py``) and the
scan between them.
"""
from __future__ import annotations

from tensoralg.codegen.cfamily import _comment_text
from tensoralg.codegen.cuda import (
    PREAMBLE,
    CudaEmitter,
    CudaKernel,
    CudaProgram,
    check_mapping,
    heap_of,
)
from tensoralg.codegen.cuda_assembly import TwoPhase, two_phase
from tensoralg.codegen.cuda_kernels import (
    LANES,
    Extra,
    carry_extras,
    elements_kernel,
    merge_extras,
    merge_kernels,
    merge_path_helper,
    reduce_kernel,
    rows_kernel,
    scatter_kernel,
    serial_kernel,
)
from tensoralg.codegen.cuda_legalize import sum_before_store
from tensoralg.codegen.cuda_plan import (
    ATOMIC,
    BLOCK_REDUCE,
    GRID_STRIDE,
    NONZERO_SPLIT,
    SERIAL,
    THREAD_PER_ROW,
    WARP_PER_ROW,
    ReducePlan,
    RowsPlan,
    ScatterPlan,
    SinglePlan,
    Unmapped,
    flat,
    plan_kernel,
)
from tensoralg.codegen.lines import Lines
from tensoralg.errors import UnsupportedError
from tensoralg.ir.nodes import Block, For, Function, Ptr, Scalar

SCAN = """\
#ifndef TA_SCAN_KERNELS
#define TA_SCAN_KERNELS
// Inclusive scan of int64 values in place, each thread a chunk of `chunk` values:
// ta_scan_sums writes each chunk's sum, the host scans the sums the same way, and
// ta_scan_apply rescans each chunk from the sum of the chunks before it.
extern "C" __global__ void ta_scan_sums(const int64_t* __restrict__ data, int64_t n,
                                        int64_t chunk, int64_t* __restrict__ sums) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t from = t * chunk;
  if (from >= n) return;
  const int64_t to = from + chunk < n ? from + chunk : n;
  int64_t total = 0;
  for (int64_t k = from; k < to; ++k) total += data[k];
  sums[t] = total;
}

extern "C" __global__ void ta_scan_apply(int64_t* __restrict__ data, int64_t n,
                                         int64_t chunk, const int64_t* __restrict__ sums,
                                         int32_t has_sums) {
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t from = t * chunk;
  if (from >= n) return;
  const int64_t to = from + chunk < n ? from + chunk : n;
  int64_t running = has_sums && t > 0 ? sums[t - 1] : 0;
  for (int64_t k = from; k < to; ++k) {
    running += data[k];
    data[k] = running;
  }
}
#endif
"""
SCAN_KERNELS = [
    CudaKernel("ta_scan_sums", "scan-sums", (("scan.data", "int64_t*"), ("scan.n", "int64_t"),
                                             ("scan.chunk", "int64_t"),
                                             ("scan.sums", "int64_t*"))),
    CudaKernel("ta_scan_apply", "scan-apply", (("scan.data", "int64_t*"), ("scan.n", "int64_t"),
                                               ("scan.chunk", "int64_t"),
                                               ("scan.sums", "int64_t*"),
                                               ("scan.has_sums", "int32_t"))),
]


def print_program(fn: Function, mapping: str | None, disjoint_rows: bool) -> CudaProgram:
    """The `CudaProgram` of ``fn`` (see ``cuda.cuda_program``)."""
    out = Lines("  ")
    _header(fn, out)
    if mapping == SERIAL:
        return _serial(fn, out, "single", (SERIAL,))
    fn = sum_before_store(fn)
    has_output_handles = any(p.output and isinstance(p.var.dtype, Ptr) and
                             isinstance(p.var.dtype.elem, Ptr) for p in fn.params)
    if has_output_handles:
        assembly = two_phase(fn)
        if isinstance(assembly, str):
            return _unmapped(fn, out, mapping, assembly)
        return _sparse_rows(fn, out, mapping, assembly)
    plan = plan_kernel(fn, disjoint_rows)
    match plan:
        case Unmapped(reason):
            return _unmapped(fn, out, mapping, reason)
        case SinglePlan():
            return _serial(fn, out, "single", (SERIAL,), plan)
        case RowsPlan():
            return _rows(fn, out, mapping, plan)
        case ScatterPlan(loops):
            check_mapping(mapping, (ATOMIC,), f"kernel {fn.name}")
            _summary(out, f"atomic: iterations of {', '.join(loops)} on threads, atomic "
                          f"additions to the output")
            _helpers(fn, out)
            scatter_kernel(out, fn, fn.name, loops)
            return _program(fn, out, "scatter", (ATOMIC,),
                            [_entry(fn, f"{fn.name}_scatter", "scatter")], plan)
        case ReducePlan():
            check_mapping(mapping, (BLOCK_REDUCE,), f"kernel {fn.name}")
            _summary(out, f"block-reduce: iterations of {plan.loop} on threads, summed per "
                          f"block, blocks' sums added atomically")
            _helpers(fn, out)
            reduce_kernel(out, fn, fn.name, plan)
            return _program(fn, out, "reduce", (BLOCK_REDUCE,),
                            [_entry(fn, f"{fn.name}_reduce", "reduce")], plan)
    raise AssertionError(plan)


def _header(fn: Function, out: Lines) -> None:
    out.comment(f"Kernel `{fn.name}`, generated by tensoralg.")
    for note in fn.notes:
        out.comment(_comment_text("- " + note))


def _summary(out: Lines, text: str) -> None:
    out.comment(_comment_text(f"GPU mapping: {text}."))
    out.line(PREAMBLE.rstrip("\n"))
    out.line()


def _helpers(fn: Function, out: Lines) -> None:
    CudaEmitter().float_helpers(fn, out)


def _entry(fn: Function, name: str, role: str, extras: tuple[Extra, ...] = (),
           split: object = None) -> CudaKernel:
    heap, scalars = heap_of(fn)
    emitter = CudaEmitter()
    args = [(p.role, emitter.type_name(p.var.dtype)) for p in fn.params]
    args += [(e.role, e.ctype) for e in extras]
    return CudaKernel(name, role, (*args, ("status", "int32_t*")), split, heap, scalars)


def _program(fn: Function, out: Lines, kind: str, mappings: tuple[str, ...],
             kernels: list[CudaKernel], plan: object = None, assembly: object = None,
             reason: str | None = None) -> CudaProgram:
    return CudaProgram(fn.name, out.text(), kind, mappings, tuple(kernels), plan, assembly,
                       reason)


def _serial(fn: Function, out: Lines, kind: str, mappings: tuple[str, ...],
            plan: object = None, reason: str | None = None) -> CudaProgram:
    _summary(out, "serial (the whole body in one thread)")
    _helpers(fn, out)
    why = f"No GPU mapping fits this kernel: {reason}; backend='cuda' refuses to run it." \
        if reason else None
    serial_kernel(out, fn, fn.name, why)
    return _program(fn, out, kind, mappings, [_entry(fn, fn.name, "serial")], plan,
                    reason=reason)


def _unmapped(fn: Function, out: Lines, mapping: str | None, reason: str) -> CudaProgram:
    if mapping is not None:
        raise UnsupportedError(f"kernel {fn.name} has no GPU mapping ({mapping} asked): "
                               f"{reason}")
    return _serial(fn, out, "unmapped", (), Unmapped(reason), reason)


def _rows(fn: Function, out: Lines, mapping: str | None, plan: RowsPlan) -> CudaProgram:
    check_mapping(mapping, plan.mappings, f"kernel {fn.name}")
    wanted = plan.mappings if mapping is None else (mapping,)
    rows = ", ".join(plan.rows)
    parts = [f"rows of {rows} on threads ({THREAD_PER_ROW})"]
    if plan.split is not None:
        parts.append(f"or on groups of lanes sharing the loop over {plan.split.var} "
                     f"({WARP_PER_ROW}; lanes picked from the row lengths at run time)")
    if plan.merge is not None:
        parts.append(f"or equal shares of rows and nonzeros ({NONZERO_SPLIT}, for skewed "
                     f"rows)")
    if plan.elements is not None:
        parts.append(f"or ({rows}, {plan.elements[0].loop.var.name}) elements on threads "
                     f"({GRID_STRIDE})")
    _summary(out, ", ".join(parts) + "; the runtime picks per call")
    _helpers(fn, out)
    kernels = []
    if THREAD_PER_ROW in wanted or WARP_PER_ROW in wanted:
        split = plan.split if WARP_PER_ROW in wanted else None
        rows_kernel(out, fn, f"{fn.name}_rows", plan.rows, split)
        kernels.append(_entry(fn, f"{fn.name}_rows", "rows", LANES if split else (), split))
    row = next((s for s in flat(fn.body) if isinstance(s, For) and s.var.name in plan.rows),
               None)
    if plan.merge is not None and NONZERO_SPLIT in wanted and row is not None:
        assert plan.merge.positions.var.dtype == Ptr(plan.merge.positions.var.dtype.elem)
        index = plan.merge.positions.var.dtype.elem
        assert isinstance(index, Scalar)
        merge_path_helper(out, index)
        merge_kernels(out, fn, fn.name, row, plan.merge)
        value = CudaEmitter().type_name(plan.merge.accumulator.dtype)
        kernels.append(_entry(fn, f"{fn.name}_merge", "merge", merge_extras(value)))
        kernels.append(_entry(fn, f"{fn.name}_carry", "carry", carry_extras(value)))
    if plan.elements is not None and GRID_STRIDE in wanted:
        elements_kernel(out, fn, f"{fn.name}_elements", plan.elements)
        kernels.append(_entry(fn, f"{fn.name}_elements", "elements"))
    return _program(fn, out, "rows", plan.mappings, kernels, plan)


def _sparse_rows(fn: Function, out: Lines, mapping: str | None,
                 assembly: TwoPhase) -> CudaProgram:
    plans = [plan_kernel(assembly.count), plan_kernel(assembly.fill)]
    for phase, plan in zip((assembly.count, assembly.fill), plans):
        if not isinstance(plan, RowsPlan):
            reason = plan.reason if isinstance(plan, Unmapped) else "it is not a row loop"
            return _unmapped(fn, out, mapping, f"its {phase.name.rsplit('_', 1)[1]} phase "
                                               f"cannot map: {reason}")
    count_plan, fill_plan = plans
    assert isinstance(count_plan, RowsPlan) and isinstance(fill_plan, RowsPlan)
    allowed = (THREAD_PER_ROW, WARP_PER_ROW) \
        if count_plan.split is not None or fill_plan.split is not None else (THREAD_PER_ROW,)
    check_mapping(mapping, allowed, f"kernel {fn.name}")
    lanes = mapping != THREAD_PER_ROW
    _summary(out, f"the sparse output {assembly.output} is assembled in two phases, each "
                  f"with rows on threads ({THREAD_PER_ROW})"
                  + (f" or on groups of lanes ({WARP_PER_ROW})" if len(allowed) > 1 else "")
                  + ": count per row, an exclusive scan of the counts, fill")
    _helpers(Function(fn.name, (), Block((assembly.count.body, assembly.fill.body))), out)
    kernels = []
    for phase, plan in ((assembly.count, count_plan), (assembly.fill, fill_plan)):
        split = plan.split if lanes else None
        rows_kernel(out, phase, phase.name, plan.rows, split)
        kernels.append(_entry(phase, phase.name, phase.name.rsplit("_", 1)[1],
                              LANES if split else (), split))
    out.line(SCAN.rstrip("\n"))
    out.line()
    kernels += SCAN_KERNELS
    return _program(fn, out, "sparse-rows", allowed, kernels, (count_plan, fill_plan),
                    assembly)


__all__ = ["SCAN_KERNELS", "print_program"]
