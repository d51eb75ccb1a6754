"""The CUDA backend's emitted source, checked without a GPU.

- Every kernel of the issue's list (SpMV, SpMM, SDDMM, SpGEMM, sparse add, MTTKRP, TTV, a fused
  dense layer with bias and ReLU) compiles with ``nvcc --ptx -arch=sm_90 -Werror
  all-warnings``, all their mappings in one translation unit per dtype (units concatenate:
  their shared pieces sit behind include guards), and with NVRTC where cuda-python has it.
- Each gets the plan it should (a table), and what no mapping fits is printed single-threaded
  with the reason, and refused at run time.
"""
from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.codegen.build import emit_source
from tensoralg.codegen.cuda import CudaEmitter, cuda_program
from tensoralg.errors import UnsupportedError
from tensoralg.gpu.function import gpu_function, pass_options
from tensoralg.ir.nodes import (
    I64,
    Binary,
    Block,
    Const,
    Function,
    While,
)

# name -> (statement, formats): the kernels, as tensoralg users write them.
KERNELS = {
    "spmv": ("y(i) = A(i,j) * x(j)", {"A": "csr"}),
    "spmm": ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}),
    "sddmm": ("Z(i,j) = A(i,j) * X(i,k) * Y(j,k)", {"A": "csr"}),
    "spgemm": ("Z(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr"}),
    "add": ("Z(i,j) = A(i,j) + B(i,j)", {"A": "csr", "B": "csr"}),
    "mttkrp": ("Z(i,j) = T(i,k,l) * C(k,j) * D(l,j)", {"T": "sss", "Z": "dense"}),
    "ttv": ("Z(i,j) = T(i,j,k) * c(k)", {"T": "sss", "Z": "dense"}),
    "dense_layer": ("Z(i,j) = max(sum(k, X(i,k) * W(k,j)) + b(j), 0)", {}),
}

# name -> (kind, mappings) that the plan must offer
PLANS = {
    "spmv": ("rows", ("thread-per-row", "warp-per-row", "nonzero-split")),
    "spmm": ("rows", ("thread-per-row", "warp-per-row", "grid-stride")),
    "sddmm": ("sparse-rows", ("thread-per-row", "warp-per-row")),
    "spgemm": ("sparse-rows", ("thread-per-row",)),
    "add": ("sparse-rows", ("thread-per-row",)),
    "mttkrp": ("scatter", ("atomic",)),
    "ttv": ("scatter", ("atomic",)),
    "dense_layer": ("rows", ("thread-per-row",)),
}


def program_of(name: str, dtype: str = "float64", mapping: str | None = None):
    statement, formats = KERNELS[name]
    kernel = ta.compile(statement, formats=formats, dtype=dtype)
    return cuda_program(gpu_function(kernel._default), mapping)


def nvcc_ptx(tmp_path, source: str) -> subprocess.CompletedProcess:
    path = tmp_path / "kernels.cu"
    path.write_text(source)
    return subprocess.run(["nvcc", "--ptx", "-arch=sm_90", "-Werror", "all-warnings", "-o",
                           str(tmp_path / "kernels.ptx"), str(path)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", KERNELS)
def test_plan(name):
    program = program_of(name)
    kind, mappings = PLANS[name]
    assert (program.kind, program.mappings) == (kind, mappings), program.source[:2000]
    assert "GPU mapping:" in program.source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_every_kernel_compiles_with_nvcc_without_warnings(tmp_path, dtype):
    sources = []
    for name in KERNELS:
        if dtype == "int64" and name == "dense_layer":
            continue     # max(..., 0) of integers is fine, but the layer is a float one
        sources.append(program_of(name, dtype).source)
        sources.append(program_of(name, dtype, "serial").source)
    result = nvcc_ptx(tmp_path, "\n".join(sources))
    assert result.returncode == 0, result.stderr[-4000:]
    ptx = (tmp_path / "kernels.ptx").read_text()
    for marker in ("_rows", "_merge", "_carry", "_count", "_fill", "_scatter", "ta_scan_sums",
                   "_elements"):
        assert marker in ptx, marker


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_scalar_reduction_and_scatter_compile(tmp_path):
    statements = [("a = A(i,j) * E(i,j)", {"A": "csr"}), ("y(j) = A(i,j) * x(i)", {"A": "csr"}),
                  ("Y(i,j) = E(i,j) + F(i,j)", {})]
    sources = []
    for statement, formats in statements:
        for dtype in ("float64", "float32", "int32", "int64"):
            kernel = ta.compile(statement, formats=formats, dtype=dtype)
            sources.append(cuda_program(gpu_function(kernel._default)).source)
    result = nvcc_ptx(tmp_path, "\n".join(sources))
    assert result.returncode == 0, result.stderr[-4000:]
    assert "_reduce" in (tmp_path / "kernels.ptx").read_text()


def test_every_kernel_compiles_with_nvrtc():
    nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="cuda-python is not installed")
    from tensoralg.gpu.driver import nvrtc_cubin

    try:
        nvrtc.nvrtcVersion()
    except Exception as error:    # the bindings without the NVRTC library
        pytest.skip(f"NVRTC is not available: {error}")
    source = "\n".join(program_of(name).source for name in KERNELS)
    assert len(nvrtc_cubin(source, "sm_90")) > 1000


def test_cpu_tiles_are_not_used_on_the_gpu():
    kernel = ta.compile(*KERNELS["spmm"])
    assert "register tiles" in kernel.source("ir")
    source = cuda_program(gpu_function(kernel._default)).source
    assert "register tiles" not in source
    # lanes share the loop over output columns; the row's products are summed in registers
    # (index names come from the first equal statement compiled in this process: not asserted)
    assert re.search(r"\b\w+ \+= ta_lanes", source) and "column_sum = column_sum +" in source
    assert pass_options(ta.Schedule().tile(128)).tile_bytes == 128


def test_warp_reduction_is_a_masked_butterfly():
    source = program_of("spmv").source
    assert "__shfl_xor_sync(ta_mask, acc, ta_offset)" in source
    assert "if (ta_lane == 0) y_vals[i] = acc;" in source


def test_scatter_adds_atomically_and_stores_plainly():
    source = program_of("mttkrp").source
    assert "atomicAdd(&Z_vals[" in source
    source = program_of("spmv", mapping="nonzero-split").source
    assert "atomicAdd(&y_vals[i], ta_carry_value[ta_k]);" in source


def test_sparse_output_phases():
    program = program_of("spgemm")
    count, fill = program.assembly.count, program.assembly.fill
    assert "workspace =" not in str(count)     # the count phase computes no values
    assert [p.role for p in fill.params if p.output] == ["Z.1.pos", "Z.1.crd", "Z.vals"]
    assert "Z_vals[Z1_size] = workspace[c]" in program.source
    assert "malloc" in program.source      # the row workspace is each thread's own


def test_serial_mapping_is_the_old_single_thread_form():
    text = program_of("spmv", mapping="serial").source
    assert "<<<1, 1>>>" in text and "status[0] = 0;" in text and "ta_lanes" not in text


def test_explicit_mapping_must_be_allowed():
    with pytest.raises(UnsupportedError, match=r"cannot run as nonzero-split.*thread-per-row"):
        program_of("spgemm", mapping="nonzero-split")
    with pytest.raises(UnsupportedError, match="unknown GPU mapping 'blocks'"):
        program_of("spmv", mapping="blocks")


def test_unmapped_kernel_prints_serially_with_the_reason():
    loop_free = Function("k", (), Block((While(Binary("<", Const(0, I64), Const(1, I64)),
                                               Block()),)))
    text = emit_source(loop_free, "cuda")
    assert "No GPU mapping fits this kernel" in text and "<<<1, 1>>>" in text
    with pytest.raises(UnsupportedError, match="no GPU mapping"):
        CudaEmitter(mapping="atomic").emit(loop_free)


def test_unmapped_statement_is_refused_at_run_time():
    from tensoralg.gpu.context import GpuContext
    from tensoralg.gpu.execute import launch

    kernel = ta.compile("y(i) = a(i) * b(i)", formats={"a": "s", "b": "s", "y": "dense"})
    program = cuda_program(gpu_function(kernel._default))
    assert program.kind == "unmapped" and "while loop" in program.reason

    class NoDevice:   # never reached: the refusal comes before anything is loaded
        def load(self, *args):
            raise AssertionError("loaded")

    a = ta.Tensor.from_numpy(np.array([1.0, 0.0, 2.0]), format="s")
    bound = {"a": a, "b": a}
    with pytest.raises(UnsupportedError, match=r"cannot run y\(i0\) = a\(i0\) \* b\(i0\) on "
                                               r"the GPU: its outermost loop co-iterates"):
        launch(GpuContext(NoDevice()), kernel._default, bound, np.dtype("float64"), (3,),
               None, None)


def test_lanes_share_only_loops_that_only_sum():
    from tensoralg.codegen.cuda_plan import is_column_loop, reduction_accumulator
    from tensoralg.ir.nodes import F64, I64, Assign, Binary, Block, Const, Declare, For, Var

    i, acc, t = Var("i", I64), Var("acc", F64), Var("t", F64)
    add = Assign(acc, Binary("+", acc, Const(1.0, F64)))
    assert reduction_accumulator(For(i, Const(0, I64), Const(4, I64), Block((add,)))) == acc
    reads = For(i, Const(0, I64), Const(4, I64), Block((add, Declare(t, acc))))
    assert reduction_accumulator(reads) is None      # a lane's partial sum is not the sum
    program = program_of("spmm")
    loop = program.plan.split
    assert loop.kind == "columns" and loop.var in set("ijk")   # names: see above
    assert not is_column_loop(For(i, Const(0, I64), Const(4, I64), Block((add,))), {})
