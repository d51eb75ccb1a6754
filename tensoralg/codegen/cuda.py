"""The CUDA C dialect (emission only; launching lives in a later build step).

For now the kernel body is single-threaded: every thread launched would run the whole body, so
the kernel must be launched as ``<<<1, 1>>>``. Mapping loops onto threads comes with GPU
schedules. ``__global__`` functions return ``void``, so the status travels through an extra last
parameter ``status`` (an ``int32_t*`` to device memory).
"""

from __future__ import annotations

from tensoralg.codegen.cfamily import CFamilyEmitter, _Names
from tensoralg.codegen.lines import Lines
from tensoralg.ir.nodes import Function, Scalar


class CudaEmitter(CFamilyEmitter):
    """CUDA C: ``extern "C" __global__`` kernels, ``__restrict__``, device-side heap.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> 'extern "C" __global__ void k(' in CudaEmitter().emit(Function("k", (), Block()))
    True
    """

    restrict = "__restrict__"
    kernel_qualifiers = 'extern "C" __global__'
    helper_qualifiers = "static __device__ __forceinline__"
    return_type = "void"
    reserved = frozenset({"status"})
    unroll_pragma = "#pragma unroll {}"

    def parameters(self, fn: Function, names: _Names) -> list[tuple[str, str]]:
        status = ("int32_t* __restrict__ status", "out: 0 done, 1 out of device heap")
        return [*super().parameters(fn, names), status]

    def signature(self, fn: Function, names: _Names, out: Lines) -> None:
        out.comment("Single-threaded body for now: launch with <<<1, 1>>>.")
        super().signature(fn, names, out)

    def ctz(self, text: str, dtype: Scalar) -> str:
        # __ffs/__ffsll: 1 + the index of the lowest set bit, 0 for 0.
        width, ffs = (64, "__ffsll") if dtype == Scalar.I64 else (32, "__ffs")
        return f"({text} ? {ffs}({text}) - 1 : {width})"

    def return_status(self, code: int) -> str:
        return f"{{ status[0] = {code}; return; }}"

    def end_of_kernel(self, out: Lines) -> None:
        out.line("status[0] = 0;")

    def allocate(
        self, out: Lines, ptr_type: str, name: str, elem: str, count: str, zero: bool
    ) -> None:
        # The device heap has malloc and free only.
        out.line(f"{ptr_type} {name} = ({ptr_type})malloc(sizeof({elem}) * (size_t){count});")
        out.line(f"if ({name} == NULL) {self.return_status(1)}")
        if zero:
            out.line(f"memset({name}, 0, sizeof({elem}) * (size_t){count});")

    def reallocate(
        self,
        out: Lines,
        ptr_type: str,
        name: str,
        elem: str,
        old: str,
        old_count: str,
        new_count: str,
    ) -> None:
        out.line(f"{ptr_type} {name} = ({ptr_type})malloc(sizeof({elem}) * (size_t){new_count});")
        out.line(f"if ({name} == NULL) {self.return_status(1)}")
        out.line(f"memcpy({name}, {old}, sizeof({elem}) * (size_t){old_count});")
        out.line(f"free({old});")
