"""Running a compiled program on the GPU: operands in, the mapping's launches, the result out.

``run`` is the cuda backend's one entry point (``api.py`` calls it where the CPU path calls
``execute``). Host operands (``ta.Tensor``) are copied to the device and the result copied back
(a NumPy array or a ``ta.Tensor``, which ``api`` wraps as for the CPU); device operands
(`DeviceTensor`, CuPy arrays and sparse matrices) are used in place and the result stays on the
device (a CuPy object when an operand was one, else a `DeviceArray` or `DeviceTensor`).

Launches, by the program's kind (``codegen/cuda.py``):

- ``rows``: one kernel (rows, elements), or the merge kernel then its carry fix-up;
- ``sparse-rows``: count, an inclusive scan of ``counts`` in place (recursively, in chunks),
  one 8-byte copy of the total to size the output, fill;
- ``scatter`` and ``reduce``: one grid-striding kernel into the zeroed output;
- ``single``: one thread.

Every kernel writes 1 into the status word when the device heap cannot hold a thread's
buffers; the grid of a kernel with such buffers is capped so that they fit.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from tensoralg.codegen.cuda import CudaKernel
from tensoralg.codegen.cuda_assembly import TwoPhase
from tensoralg.codegen.cuda_plan import GRID_STRIDE, NONZERO_SPLIT, SERIAL, Elements
from tensoralg.errors import InputError, KernelRuntimeError, UnsupportedError
from tensoralg.formats import LevelArrays, Tensor
from tensoralg.gpu.choose import (
    Choice,
    RowStats,
    choose_rows,
    choose_sparse_rows,
    row_stats,
    scheduled_mapping,
)
from tensoralg.gpu.context import GpuContext, GpuKernel, gpu_context
from tensoralg.gpu.evaluate import Unevaluable, environment, evaluate
from tensoralg.gpu.memory import (
    DeviceArray,
    DeviceTensor,
    as_cupy,
    empty,
    from_cupy,
    is_cupy,
    upload_tensor,
)

ALLOCATION_OVERHEAD = 64      # bytes the device heap spends per malloc, at most (assumed)


def run(compiled: Any, operands: Mapping[str, Any], value_dtype: Any,
        shape: tuple[int, ...], out: Any = None, *, mapping: str | None = None,
        context: GpuContext | None = None, cache: Any = None) -> Any:
    """Run ``compiled`` (an ``api.CompiledProgram``) on the GPU (module docstring).

    ``operands`` by name: ``ta.Tensor`` (host), `DeviceTensor`, CuPy arrays or sparse
    matrices. ``out``: a NumPy array (the result is copied into it), a `DeviceArray` or CuPy
    array (written in place), or None. ``mapping`` names one (``thread-per-row``,
    ``warp-per-row``, ``nonzero-split``, ``grid-stride``, ``atomic``, ``block-reduce``) instead
    of the runtime's choice. ``cache``: the `DiskCache` for cubins, used when the process's GPU
    context is opened.

    >>> # y = run(compiled, {"A": A_tensor, "x": x_tensor}, np.float64, (n,))
    """
    context = context if context is not None else gpu_context(cache)
    result, _ = launch(context, compiled, operands, np.dtype(value_dtype), shape, out, mapping)
    device = any(isinstance(v, DeviceTensor) or is_cupy(v) for v in operands.values())
    cupy = any(is_cupy(v) or (isinstance(v, DeviceTensor) and v.source is not None)
               for v in operands.values())
    if isinstance(out, np.ndarray):
        assert isinstance(result, DeviceArray)
        host = result.to_host()
        np.copyto(out, host.reshape(out.shape), casting="same_kind")
        return out
    if out is not None:
        return out
    if not device:
        return result.to_host()
    return as_cupy(result) if cupy else result


def launch(context: GpuContext, compiled: Any, operands: Mapping[str, Any],
           value_dtype: np.dtype, shape: tuple[int, ...], out: Any, mapping: str | None
           ) -> tuple[DeviceArray | DeviceTensor, Choice]:
    """The launches of one call; the device result and the mapping chosen."""
    kernel = context.kernel(compiled)
    asked = getattr(compiled.plan, "gpu", None)
    if mapping is None and asked is not None:      # parallelize(..., unit=gpu-...)
        mapping = scheduled_mapping(asked, kernel.program, _grid_index(compiled))
    if mapping == SERIAL and kernel.program.kind != "single":
        raise UnsupportedError(f"{kernel.statement}: the serial mapping is printed for reading "
                               f"(source('cuda')); the runtime runs a mapped kernel")
    tensors, host = _device_operands(context, compiled, operands, value_dtype)
    sizes = {index: tensors[name].shape[mode] for name, mode, index in compiled.sizes}
    call = _Call(context, kernel, tensors, host, sizes, value_dtype)
    output = compiled.program.output
    if kernel.program.kind == "sparse-rows":
        if out is not None:
            raise InputError(f"{kernel.statement}: out= takes a dense result, but this one is "
                             f"stored as {output.format}")
        return call.sparse_rows(shape, output, mapping)
    buffer = _dense_output(context, out, shape, value_dtype, kernel.statement)
    call.values[f"{output.name}.vals"] = buffer.ptr
    choice = call.dense(mapping, buffer.size)
    call.finish()
    return buffer.reshape(shape), choice


def _grid_index(compiled: Any) -> str | None:
    """The index of the loop a kernel's grid takes: the thread-range loop, or else the
    outermost loop of its last nest (None: no loop)."""
    if compiled.arguments.range_index is not None:
        return compiled.arguments.range_index
    nests = compiled.program.nests
    order = nests[-1].loop_order if nests else ()
    return order[0] if order else None


def _device_operands(context: GpuContext, compiled: Any, operands: Mapping[str, Any],
                     value_dtype: np.dtype
                     ) -> tuple[dict[str, DeviceTensor], dict[str, Tensor]]:
    """Every operand on the device, in the dtype and format the kernel was compiled for; and
    the host tensors that were copied there."""
    program = compiled.program
    host: dict[str, Tensor] = {}
    device: dict[str, DeviceTensor] = {}
    for name, operand in operands.items():
        found = operand if isinstance(operand, DeviceTensor) else from_cupy(operand)
        if found is not None:
            _check_device_operand(name, found, program.tensor(name), value_dtype)
            device[name] = found
        elif isinstance(operand, Tensor):
            host[name] = operand if operand.dtype == value_dtype else operand.astype(value_dtype)
        else:
            raise InputError(f"operand {name}: the GPU runtime takes ta.Tensor, DeviceTensor "
                             f"or CuPy operands, not {type(operand).__name__}")
    for alias, source in program.conversions:
        if source in device:
            raise UnsupportedError(f"operand {source} must be converted to "
                                   f"{program.tensor(alias).format} for this kernel, which "
                                   f"happens on the host; store it that way on the device")
        host[alias] = host[source].convert(program.tensor(alias).format)
    for name, tensor in host.items():
        device[name] = upload_tensor(context.driver, tensor)
    return device, host


def _check_device_operand(name: str, tensor: DeviceTensor, info: Any,
                          value_dtype: np.dtype) -> None:
    if tensor.dtype != value_dtype:
        raise InputError(f"device operand {name} holds {tensor.dtype} but the kernel computes "
                         f"in {value_dtype}; convert it on the device first (values are not "
                         f"converted there)")
    if tensor.format != info.format:
        raise InputError(f"device operand {name} is stored as {tensor.format} but the kernel "
                         f"was compiled for {info.format}; formats are converted on the host "
                         f"only")
    if not info.format.is_dense and tensor.index_dtype != info.index_dtype:
        raise InputError(f"device operand {name} has {tensor.index_dtype} indices but the "
                         f"kernel was compiled for {info.index_dtype}")


def _dense_output(context: GpuContext, out: Any, shape: tuple[int, ...],
                  value_dtype: np.dtype, statement: str) -> DeviceArray:
    """The zeroed device buffer the kernel writes: ``out`` when it is device memory."""
    if out is None or isinstance(out, np.ndarray):
        return empty(context.driver, (max(1, math.prod(shape)),) if not shape
                     else (math.prod(shape),), value_dtype, zero=True)
    found = from_cupy(out) if not isinstance(out, DeviceArray) else None
    array = out if isinstance(out, DeviceArray) else found.vals if found is not None else None
    if array is None:
        raise InputError(f"{statement}: out must be a NumPy, CuPy or device array, not "
                         f"{type(out).__name__}")
    if math.prod(array.shape) != math.prod(shape) or array.dtype != value_dtype:
        raise InputError(f"{statement}: out holds {array.shape} {array.dtype} but the result "
                         f"is {shape} {value_dtype}")
    context.driver.zero(array.ptr, array.nbytes)
    return array.reshape((array.size,))


class _Call:
    """One call's argument values by role, and its launches."""

    def __init__(self, context: GpuContext, kernel: GpuKernel,
                 tensors: Mapping[str, DeviceTensor], host: Mapping[str, Tensor],
                 sizes: Mapping[str, int], value_dtype: np.dtype) -> None:
        self.context, self.driver, self.kernel = context, context.driver, kernel
        self.tensors, self.host, self.sizes = tensors, host, sizes
        self.value_dtype = value_dtype
        self.status = empty(self.driver, (1,), np.int32, zero=True)
        self.values: dict[str, int | float] = {"status": self.status.ptr, "capacity": 0}
        for name, tensor in tensors.items():
            self.values[f"{name}.vals"] = tensor.vals.ptr
            for k, level in enumerate(tensor.levels):
                for kind, array in (("pos", level.pos), ("crd", level.crd)):
                    if array is not None:
                        self.values[f"{name}.{k}.{kind}"] = array.ptr
        for index, size in sizes.items():
            self.values[f"index.{index}"] = size
            self.values[f"range.begin.{index}"] = 0
            self.values[f"range.end.{index}"] = size
        self.env = environment(
            {p.var.name: self.values[p.role] for p in kernel.function.params
             if p.role in self.values and not p.role.endswith((".pos", ".crd", ".vals"))}, ())
        self._stats: dict[str, RowStats] = {}

    # -- launching ---------------------------------------------------------------------------

    def run(self, kernel: CudaKernel, grid: int, block: int) -> None:
        args = [(ctype, self.values[role]) for role, ctype in kernel.args]
        self.driver.launch(self.kernel.module, kernel.name, grid, block, args)

    def grid(self, kernel: CudaKernel, threads: int, capped: bool = True) -> tuple[int, int]:
        """Blocks and block size for ``threads`` threads of ``kernel``: at most the driver's
        grid (grid-striding kernels take the rest in turns), and no more threads than the
        device heap can give their buffers."""
        block = self.driver.block
        blocks = max(1, -(-threads // block))
        if capped:
            blocks = min(blocks, self.driver.max_blocks)
        per_thread = self.heap_per_thread(kernel)
        if per_thread:
            fit = self.driver.heap_bytes * 3 // 4 // per_thread
            if fit < 1:
                raise UnsupportedError(
                    f"{self.kernel.statement}: each GPU thread needs {per_thread} bytes of "
                    f"workspace, more than the device heap's {self.driver.heap_bytes}")
            while block > 32 and block > fit:
                block //= 2
            blocks = max(1, min(blocks, fit // block))
        return blocks, block

    def heap_per_thread(self, kernel: CudaKernel) -> int:
        if not kernel.heap:
            return 0
        env = environment(self.env, kernel.scalars)
        total = 0
        for count, size in kernel.heap:
            try:
                total += max(0, int(evaluate(count, env))) * size + ALLOCATION_OVERHEAD
            except Unevaluable:
                raise UnsupportedError(f"{self.kernel.statement}: a GPU thread allocates a "
                                       f"buffer whose size is known only inside the kernel; "
                                       f"the grid cannot be sized for the device heap"
                                       ) from None
        return total

    def stats(self, role: str) -> RowStats:
        """Row statistics of the pos array with ``role``: from the host's copy where the
        operand came from the host (remembered while that array lives), else as the device
        tensor knows them (``DeviceTensor.row_stats``)."""
        found = self._stats.get(role)
        if found is None:
            name, level, _ = role.split(".")
            if name in self.host:
                pos = self.host[name].levels[int(level)].pos
                assert pos is not None
                found = self.context.row_stats(pos, lambda: row_stats(pos))
            else:
                found = self.tensors[name].row_stats(int(level))
            self._stats[role] = found
        return found

    def rows(self) -> int:
        bounds = self.kernel.function.thread_range
        assert bounds is not None, "a rows kernel has a thread range"
        return int(self.values[bounds[1].role])

    def finish(self) -> None:
        self.driver.synchronize()
        status = self.status.to_host()
        if status[0] != 0:
            raise KernelRuntimeError(f"the GPU kernel for {self.kernel.statement} could not "
                                     f"allocate its per-thread buffers on the device heap "
                                     f"(status {status[0]})")

    # -- kinds -------------------------------------------------------------------------------

    def dense(self, mapping: str | None, elements: int) -> Choice:
        program = self.kernel.program
        if program.kind == "single":
            self.run(program.kernel("serial"), 1, 1)
            return Choice(SERIAL, {}, "a kernel without loops")
        if program.kind in ("scatter", "reduce"):
            kernel = program.kernels[0]
            choice = Choice(program.mappings[0], {}, f"the {program.kind} kernel")
            if mapping is not None and mapping != choice.mapping:
                raise UnsupportedError(f"{self.kernel.statement} runs only as {choice.mapping}"
                                       f", not {mapping}")
            self.run(kernel, *self.grid(kernel, self.driver.max_blocks * self.driver.block))
            return choice
        choice = choose_rows(program, self.env, self.stats, mapping)
        rows = self.rows()
        if rows == 0:
            return choice
        if choice.mapping == NONZERO_SPLIT:
            self.merge()
        elif choice.mapping == GRID_STRIDE:
            kernel = program.kernel("elements")
            plan_elements = program.plan.elements  # type: ignore[attr-defined]
            self.run(kernel, *self.grid(kernel, rows * self.width(plan_elements)))
        else:
            kernel = program.kernel("rows")
            lanes = choice.lanes.get("rows", 1)
            self.values["ta.lanes"] = lanes
            self.run(kernel, *self.grid(kernel, rows * lanes))
        return choice

    def width(self, elements: tuple[Elements, ...]) -> int:
        loop = elements[0].loop
        try:
            return max(1, int(evaluate(loop.stop, self.env)) - int(evaluate(loop.start, self.env)))
        except Unevaluable:
            return 32

    def merge(self) -> None:
        program = self.kernel.program
        merge_kernel, carry = program.kernel("merge"), program.kernel("carry")
        plan = program.plan.merge   # type: ignore[attr-defined]
        # The grid covers every step of the merge path: rows, and the entries of the level
        # (its crd's length), read from the operand itself and never from remembered stats.
        name, level, _ = plan.positions.role.split(".")
        crd = self.tensors[name].levels[int(level)].crd
        assert crd is not None
        items = self.driver.merge_items
        threads = max(1, -(-(self.rows() + crd.size) // items))
        blocks, block = self.grid(merge_kernel, threads, capped=False)
        launched = blocks * block
        carry_rows = empty(self.driver, (launched,), np.int64)
        carry_values = empty(self.driver, (launched,), self.value_dtype)
        self.values.update({"ta.items": items, "ta.carry.row": carry_rows.ptr,
                            "ta.carry.value": carry_values.ptr, "ta.carry.count": launched})
        self.run(merge_kernel, blocks, block)
        self.run(carry, *self.grid(carry, launched))

    def sparse_rows(self, shape: tuple[int, ...], output: Any,
                    mapping: str | None) -> tuple[DeviceTensor, Choice]:
        program = self.kernel.program
        assembly = program.assembly
        assert isinstance(assembly, TwoPhase)
        choice = choose_sparse_rows(program, self.env, self.stats, mapping)
        rows = self.rows()
        counts = empty(self.driver, (rows + 1,), np.int64, zero=True)
        self.values[f"{assembly.output}.counts"] = counts.ptr
        self.values[f"{assembly.output}.offsets"] = counts.ptr
        count, fill = program.kernel("count"), program.kernel("fill")
        if rows:
            self.values["ta.lanes"] = choice.lanes.get("count", 1)
            self.run(count, *self.grid(count, rows * int(self.values["ta.lanes"])))
            self.scan(counts.ptr, rows + 1)
        total = int(counts.reshape((rows + 1,)).to_host()[rows]) if rows else 0
        index = output.index_dtype
        pos = empty(self.driver, (rows + 1,), index, zero=True)
        crd = empty(self.driver, (total,), index)
        vals = empty(self.driver, (total,), self.value_dtype)
        self.values.update({f"{assembly.output}.1.pos": pos.ptr,
                            f"{assembly.output}.1.crd": crd.ptr,
                            f"{assembly.output}.vals": vals.ptr})
        if rows:
            self.values["ta.lanes"] = choice.lanes.get("fill", 1)
            self.run(fill, *self.grid(fill, rows * int(self.values["ta.lanes"])))
        self.finish()
        levels = (LevelArrays(), LevelArrays(pos, crd))
        return DeviceTensor(tuple(shape), output.format, levels, vals), choice

    def scan(self, ptr: int, n: int) -> None:
        """Inclusive scan of ``n`` int64 values at ``ptr``, in place."""
        program = self.kernel.program
        sums_kernel, apply = program.kernel("scan-sums"), program.kernel("scan-apply")
        chunk = self.driver.scan_chunk
        chunks = -(-n // chunk)
        self.values.update({"scan.data": ptr, "scan.n": n, "scan.chunk": chunk})
        if chunks <= 1:
            self.values.update({"scan.sums": ptr, "scan.has_sums": 0})
            self.run(apply, 1, 1)
            return
        sums = empty(self.driver, (chunks,), np.int64)
        self.values["scan.sums"] = sums.ptr
        self.run(sums_kernel, *self.grid(sums_kernel, chunks, capped=False))
        self.scan(sums.ptr, chunks)
        self.values.update({"scan.data": ptr, "scan.n": n, "scan.chunk": chunk,
                            "scan.sums": sums.ptr, "scan.has_sums": 1})
        self.run(apply, *self.grid(apply, chunks, capped=False))


__all__ = ["launch", "run"]
