"""The CUDA C dialect, and the translation unit holding a kernel's GPU mappings.

`CudaEmitter` is the C family's CUDA dialect: ``extern "C" __global__`` kernels, ``__restrict__``,
the device heap, and a last ``status`` parameter (a ``__global__`` function returns ``void``, so
the status travels through an ``int32_t*`` to device memory: 1 when the device heap ran out).

`cuda_program` prints the kernels that run a function on the GPU, as the plan of
``cuda_plan.py`` allows: the row kernel and its variants (lanes per row, merge path, flat
elements), the count and fill kernels of a sparse output with the scan between them, a scatter
with atomic adds, or a block reduction. The runtime (``tensoralg/gpu``) picks among the variants
per call. The source compiles with nvcc and with NVRTC (which has no C library headers, hence
the preamble). ``CudaEmitter(mapping="serial")`` prints the whole body as one single-threaded
kernel, launched ``<<<1, 1>>>``; a function no mapping fits prints that way too, headed by the
reason, and ``backend="cuda"`` refuses to run it.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.codegen.cfamily import CFamilyEmitter, _Names
from tensoralg.codegen.lines import Lines
from tensoralg.errors import UnsupportedError
from tensoralg.ir.nodes import Allocate, Declare, Expr, Function, Ptr, Scalar
from tensoralg.ir.rewrite import walk

# Names the mapped kernels declare; a variable of the IR with one of them is renamed.
RESERVED = frozenset("""
    status ta_thread ta_stride ta_lane ta_lanes ta_mask ta_offset ta_partial ta_items
    ta_carry_row ta_carry_value ta_count ta_k ta_first ta_rows ta_nonzeros ta_total ta_from
    ta_to ta_row_from ta_row_to ta_at ta_at_end ta_r ta_width ta_e ta_merge_path
""".split())

# Shared pieces of a unit sit behind include guards, so that units can be concatenated into
# one (the tests compile all kernels in one nvcc run).
PREAMBLE = """\
#ifndef TA_CUDA_PREAMBLE
#define TA_CUDA_PREAMBLE
#ifdef __CUDACC_RTC__
// NVRTC has no C library headers: the fixed-width types and float constants kernels use.
typedef int int32_t;
typedef long long int64_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#else
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#endif
#ifndef NULL
#define NULL 0
#endif
#endif
"""


class CudaEmitter(CFamilyEmitter):
    """CUDA C: ``extern "C" __global__`` kernels, ``__restrict__``, device-side heap.

    ``emit`` prints the translation unit of `cuda_program` with the given ``mapping`` (None:
    every variant the plan allows, for the runtime to pick from).

    >>> from tensoralg.ir.nodes import Function, Block
    >>> 'extern "C" __global__ void k(' in CudaEmitter().emit(Function("k", (), Block()))
    True
    """

    restrict = "__restrict__"
    kernel_qualifiers = 'extern "C" __global__'
    helper_qualifiers = "static __device__ __forceinline__"
    return_type = "void"
    reserved = RESERVED
    unroll_pragma = "#pragma unroll {}"
    backend_name = "cuda"    # complex kernels are refused (cfamily.COMPLEX_TYPES)

    def __init__(self, mapping: str | None = None, disjoint_rows: bool = True) -> None:
        self.mapping = mapping
        self.disjoint_rows = disjoint_rows

    def emit(self, fn: Function) -> str:
        return cuda_program(fn, self.mapping, self.disjoint_rows).source

    def float_helpers(self, fn: Function, out: Lines) -> None:
        """The C family's float helpers, each behind an include guard."""
        printed = Lines(self.indent)
        super().float_helpers(fn, printed)
        for line in printed.text().splitlines():
            if line.startswith(self.helper_qualifiers):
                guard = "TA_HELPER_" + line.split("(")[0].split()[-1].upper()
                out.line(f"#ifndef {guard}")
                out.line(f"#define {guard}")
                out.line(line)
                out.line("#endif")
            else:
                out.line(line)

    def parameters(self, fn: Function, names: _Names) -> list[tuple[str, str]]:
        status = ("int32_t* __restrict__ status", "out: 0 done, 1 out of device heap")
        return [*super().parameters(fn, names), status]

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


# ---------------------------------------------------------------------------------------------
# The translation unit


@dataclass(frozen=True, slots=True)
class CudaKernel:
    """One ``__global__`` function of a `CudaProgram`.

    ``args`` gives each parameter in order as (role, C type): the IR function's parameters
    (their ABI roles: ``index.i``, ``A.1.pos`` ...), then the mapping's own (``ta.lanes``,
    ``ta.items`` ...), then ``status`` where the kernel has one. ``split`` is the loop its
    lanes share (the runtime then passes ``ta.lanes``). ``heap`` lists each buffer a thread
    allocates, as (element count, element size), with ``scalars`` the declarations of locals
    that the counts may read.
    """

    name: str
    role: str
    args: tuple[tuple[str, str], ...]
    split: object = None
    heap: tuple[tuple[Expr, int], ...] = ()
    scalars: tuple[Declare, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}({', '.join(f'{t} {r}' for r, t in self.args)})"


@dataclass(frozen=True, slots=True)
class CudaProgram:
    """The CUDA translation unit of one IR function, and how to run it.

    ``kind``: ``rows``, ``sparse-rows``, ``scatter``, ``reduce``, ``single`` or ``unmapped``
    (``reason`` says why). ``mappings``: the mapping names its kernels allow, the first being
    the one to use when the runtime has no row statistics. ``plan`` is `cuda_plan.plan_kernel`'s
    value; ``assembly`` the two-phase functions of a sparse output.
    """

    name: str
    source: str
    kind: str
    mappings: tuple[str, ...]
    kernels: tuple[CudaKernel, ...]
    plan: object = None
    assembly: object = None
    reason: str | None = None

    def kernel(self, role: str) -> CudaKernel:
        """The kernel playing ``role`` (``rows``, ``merge``, ``count`` ...)."""
        for kernel in self.kernels:
            if kernel.role == role:
                return kernel
        raise KeyError(role)

    def __str__(self) -> str:
        names = ", ".join(k.name for k in self.kernels)
        return f"<cuda program {self.name} ({self.kind}: {', '.join(self.mappings)}): {names}>"


def cuda_program(fn: Function, mapping: str | None = None,
                 disjoint_rows: bool = True) -> CudaProgram:
    """The CUDA kernels that run ``fn`` (module docstring), for ``mapping`` or, with None,
    for every mapping its plan allows.

    An explicit ``mapping`` the plan does not allow raises `UnsupportedError`; ``"serial"`` is
    always allowed.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> print(cuda_program(Function("k", (), Block())))
    <cuda program k (single: serial): k>
    """
    from tensoralg.codegen.cuda_print import print_program

    return print_program(fn, mapping, disjoint_rows)


def heap_of(fn: Function) -> tuple[tuple[tuple[Expr, int], ...], tuple[Declare, ...]]:
    """Every buffer ``fn`` allocates per thread, as (element count, element size), and the
    scalar declarations the counts may read."""
    sizes = {Scalar.BOOL: 1, Scalar.I32: 4, Scalar.F32: 4, Scalar.I64: 8, Scalar.F64: 8}
    heap = []
    for node in walk(fn.body):
        if isinstance(node, Allocate):
            assert isinstance(node.var.dtype, Ptr)
            elem = node.var.dtype.elem
            heap.append((node.count, sizes[elem] if isinstance(elem, Scalar) else 8))
    scalars = tuple(s for s in walk(fn.body)
                    if isinstance(s, Declare) and isinstance(s.var.dtype, Scalar))
    return tuple(heap), scalars


def check_mapping(mapping: str | None, allowed: tuple[str, ...], what: str) -> None:
    """`UnsupportedError` when ``mapping`` is neither None, ``serial``, nor in ``allowed``."""
    from tensoralg.codegen.cuda_plan import MAPPINGS, SERIAL

    if mapping is None or mapping == SERIAL or mapping in allowed:
        return
    if mapping not in MAPPINGS:
        raise UnsupportedError(f"unknown GPU mapping {mapping!r}; choose one of "
                               f"{', '.join(MAPPINGS)}")
    raise UnsupportedError(f"{what} cannot run as {mapping}; its mappings are "
                           f"{', '.join(allowed) or 'none'}")


__all__ = ["PREAMBLE", "CudaEmitter", "CudaKernel", "CudaProgram", "check_mapping",
           "cuda_program", "heap_of"]

