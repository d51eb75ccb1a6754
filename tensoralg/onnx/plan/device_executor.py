"""Running a cuda model: kernels on the GPU, data kept there between them, host steps visible.

Each node first runs as a *device step*: its inputs are device values (``device_values``)
where they live on the device, constants and host values otherwise, and every kernel it calls
(``NodeContext.run``) launches on the GPU; its outputs stay there. A node whose code needs host
memory (indexing, ``np.concatenate``, a dtype conversion, ...) raises ``HostNeeded`` and runs
as a *host step* instead: its device inputs are copied to the host, it runs on the CPU
(NumPy and llvm kernels), and its outputs stay on the host until a device step needs them.
That choice is remembered per node and input shapes. Model inputs are copied in when a
kernel first needs them, outputs copied back; every copy is counted per step and shown by
``print_ir()`` and ``profile()``, e.g.::

    n3: Slice(h, s, e) -> t   host step (CPU, llvm kernels): indexing of a device value;
                              1 copy to the host (h, 96 B)

Level-3 static plans are LLVM machine code and are not built for a cuda model; its nodes run
one by one, as at level 2, with level 3's graph passes (sparse weights) applied.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import tensoralg as ta
from tensoralg.onnx.frontend.graph import Graph
from tensoralg.onnx.ops.kernels import KernelSet, NodeContext
from tensoralg.onnx.ops.registry import OpImpl, lookup
from tensoralg.onnx.passes.fusion import (
    FLOATS,
    PRODUCT,
    Program,
    flattened_head,
    inline_head,
    run_program_flat,
)
from tensoralg.onnx.passes.fusion import _run_nodes as run_nodes
from tensoralg.onnx.passes.fusion import _run_statement as run_statement
from tensoralg.onnx.plan.device_values import Copy, Device, DeviceValue, HostNeeded
from tensoralg.onnx.plan.executor import Executor, Step, call_node
from tensoralg.onnx.plan.memory import MemoryTrace

# Ops whose code hands its inputs to the public API itself (not through ``node.run``).
HOST_ONLY = {"Einsum": "ta.einsum is called on host arrays"}


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a step ran in the latest run, the kernels it launched and the copies it made.

    ``where``: "device" (kernels on the GPU, or views of device values), "host values" (ran
    as a device step but touched only host values: NumPy on constants or inputs, no kernel),
    or "host step" (needed host memory for device values: ``reason`` says why).
    """

    where: str
    reason: str
    launches: int
    copies: tuple[Copy, ...]
    host_inputs: tuple[str, ...] = ()    # non-constant host values a device step read

    @property
    def on_device(self) -> bool:
        return self.where == "device"

    def __str__(self) -> str:
        if self.where == "device":
            text = f"device step: {self.launches} kernel(s) on the GPU" if self.launches else \
                "device step: views of device values, no kernel"
            if self.host_inputs:
                text += f"; host inputs read in NumPy: {', '.join(self.host_inputs)}"
        elif self.where == "host values":
            text = "host values: NumPy on host inputs, no kernel"
        else:
            text = f"host step (CPU, llvm kernels): {self.reason}"
        ins = [c for c in self.copies if c.to_device]
        outs = [c for c in self.copies if not c.to_device]
        if outs:
            text += f"; {len(outs)} copy(ies) to the host ({', '.join(map(str, outs))})"
        if ins:
            text += f"; {len(ins)} copy(ies) to the device ({', '.join(map(str, ins))})"
        if not self.copies:
            text += "; no copies"
        return text


def _kept(value: Any) -> Any:
    return value if isinstance(value, DeviceValue) else np.asarray(value)


class DeviceExecutor(Executor):
    """The steps of a graph run on the GPU of ``kernels.device`` (module docstring)."""

    def __init__(self, graph: Graph, kernels: KernelSet) -> None:
        super().__init__(graph, kernels)
        device = kernels.device
        assert isinstance(device, Device), "a cuda model's kernel set holds its Device"
        self.device = device
        self.places: dict[int, Placement] = {}
        self.output_copies: tuple[Copy, ...] = ()
        self._host_steps: dict[tuple, str] = {}
        self._host_contexts: dict[int, NodeContext] = {}
        self._lock = threading.Lock()    # one run at a time: the device's step state is shared
        self._index = {id(step): k for k, step in enumerate(self.steps)}
        self._device_nodes = [dataclasses.replace(s.node, impl=DEVICE_OPS[s.node.op_type])
                              if s.node.op_type in DEVICE_OPS else s.node for s in self.steps]

    def notes(self, step: Step) -> list[str]:
        k = self._index[id(step)]
        place = self.places.get(k)
        if place is None:
            return ["(placed at the first run)"] + list(step.context.plan)
        context = self._host_contexts[k] if place.where == "host step" else step.context
        return [str(place)] + list(context.plan)

    def summary(self) -> list[str]:
        """Model-level lines: constants copied once, outputs copied back, steps by place."""
        constants = self.device.constant_copies
        lines = [f"device: {len(constants)} constant(s) copied to the GPU once "
                 f"({sum(c.nbytes for c in constants)} B)"]
        if self.places:
            count = {where: sum(p.where == where for p in self.places.values())
                     for where in ("device", "host values", "host step")}
            copies = sum(len(p.copies) for p in self.places.values()) + len(self.output_copies)
            lines.append(f"device: latest run: {count['device']} device step(s), "
                         f"{count['host step']} host step(s), {count['host values']} step(s) "
                         f"on host values; {copies} copy(ies) between host and device "
                         f"(outputs: {', '.join(map(str, self.output_copies)) or 'none'})")
        return lines

    def run(self, feeds: dict[str, np.ndarray],
            timer: Callable[[Step, float], Any] | None = None,
            memory: MemoryTrace | None = None, keep_all: bool = False
            ) -> dict[str, Any]:
        """The graph outputs (NumPy arrays) of one run; ``memory`` is not traced on the GPU."""
        with self._lock:
            try:
                return self._run(feeds, timer, keep_all)
            finally:
                self.device.active = False
                self.device.end_run()

    def _run(self, feeds: dict[str, np.ndarray], timer: Callable[[Step, float], Any] | None,
             keep_all: bool) -> dict[str, Any]:
        host: dict[str, Any] = dict(self.graph.constants)
        host.update(feeds)
        on_device: dict[str, DeviceValue] = {}
        for k, step in enumerate(self.steps):
            start = time.perf_counter()
            for name in step.node.inputs:
                if name and name not in host and name not in on_device:
                    raise ta.ShapeError(f"{step.context}: input {name!r} has no value (it is "
                                        f"not produced by an earlier node)")
            self.device.copies = []
            launches = self.device.launches
            produced, reason, host_inputs = self._step(k, step, host, on_device)
            launched = self.device.launches - launches
            where = "host step" if reason is not None else "device" if launched or any(
                isinstance(v, DeviceValue) for v in produced.values()) else "host values"
            self.places[k] = Placement(where, reason or "", launched, tuple(self.device.copies),
                                       host_inputs if where == "device" else ())
            for name, value in produced.items():
                (on_device if isinstance(value, DeviceValue) else host)[name] = value
                (host if isinstance(value, DeviceValue) else on_device).pop(name, None)
            if timer is not None:
                timer(step, time.perf_counter() - start)
            if not keep_all:
                for name in step.release:
                    host.pop(name, None)
                    on_device.pop(name, None)
        self.device.copies = []
        outputs = {}
        for info in self.graph.outputs:
            name = info.name
            outputs[name] = host[name] if name in host else \
                self.device.download(on_device[name], name)
        self.output_copies = tuple(self.device.copies)
        return outputs

    def _step(self, k: int, step: Step, host: dict[str, Any],
              on_device: dict[str, DeviceValue]
              ) -> tuple[dict[str, Any], str | None, tuple[str, ...]]:
        """Run step ``k`` on the device, else on the host: its outputs, why on the host, and
        the non-constant host values a device step read."""
        shapes = tuple(np.shape(on_device[n]) if n in on_device else np.shape(host[n])
                       for n in step.node.inputs if n)
        reason = HOST_ONLY.get(step.node.op_type) or self._host_steps.get((k, shapes))
        if reason is None:
            host_inputs = self._place_inputs(step, host, on_device)
            values = {**host, **on_device}
            self.device.active = True
            try:
                return (call_node(self._device_nodes[k], step.context, values, _kept), None,
                        host_inputs)
            except HostNeeded as why:
                reason = str(why)
                self._host_steps[(k, shapes)] = reason
            finally:
                self.device.active = False
        for name in step.node.inputs:
            if name and name not in host:
                host[name] = self.device.download(on_device[name], name)
        context = self._host_contexts.get(k)
        if context is None:
            node = step.node
            context = NodeContext(node.name, node.op_type, node.inputs, node.outputs,
                                  node.version, self.kernels)
            self._host_contexts[k] = context
        return call_node(step.node, context, host), reason, ()

    def _place_inputs(self, step: Step, host: dict[str, Any],
                      on_device: dict[str, DeviceValue]) -> tuple[str, ...]:
        """Copy the step's float host inputs to the device (counted), so that whatever the
        node computes on them (``np.matmul`` too) runs there; constants are copied once when
        a kernel reads them, and integer and bool values (indices, shapes) stay on the host
        for the node's NumPy code. The names of those left on the host."""
        left = []
        self.device.names.clear()
        for name in step.node.inputs:
            if not name or name in on_device or name in self.graph.constants:
                continue
            value = host[name]
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                on_device[name] = DeviceValue(self.device.upload(value, name), self.device)
            else:
                self.device.names[id(value)] = name
                left.append(name)
        return tuple(dict.fromkeys(left))


def run_fused_on_device(context: NodeContext, *arrays: Any, program: Program) -> Any:
    """``fusion.run_program`` on device values: the same run-time choices, without its first
    step (``np.asarray`` of every input, which a device value refuses). A BLAS-sized product
    is ``np.matmul`` of device values: a cuda kernel (``device_values.matmul``). A multi-hot
    input wide enough for CSR is counted on the host (``np.count_nonzero`` raises
    `HostNeeded`), so that program runs as a host step."""
    values = dict(zip(program.externals, arrays))
    dtypes = {a.dtype for a in values.values()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in FLOATS:
        raise HostNeeded("a fused group over non-float or mixed dtypes runs node by node")
    dtype = next(iter(dtypes))
    chain = [n for n in program.nodes if n is not program.head]
    head = program.head
    inline = None
    flat = flattened_head(program, values)
    if flat is not None:
        values, shape = flat
        return run_program_flat(context, program, values, dtype).reshape(shape)
    if head is not None:
        inline = inline_head(program, head, values, dtype)
        if inline is not None and inline["transposed"]:
            # The CPU's transposed form (batch innermost, W^T in CSR) transposes its input
            # and result with np.ascontiguousarray, on the host; the CSC form needs neither.
            inline = {**inline, "transposed": False}
        if inline is None:
            values.update(run_nodes(context, program, values, [head], keep=True))
            if not chain:
                return values[head.outputs[0]]
        elif inline["blas"]:
            a, b = values[head.inputs[0]], values[head.inputs[1]]
            a = a.T if inline["trans_a"] else a
            b = b.T if inline["trans_b"] else b
            context.note(f"product ({a.shape[0]}x{a.shape[1]}x{b.shape[1]}) then:")
            values[PRODUCT] = np.matmul(a, b)
    output = head.outputs[0] if not chain else program.output
    return run_statement(context, program, values, dtype, inline, output)


def transpose_on_device(context: NodeContext, x: Any, *, perm: Any = None) -> Any:
    """ONNX Transpose of a device value as one cuda kernel (the op's own code ends in
    ``np.ascontiguousarray``, which always makes a host array); a host value as the op does."""
    if not isinstance(x, DeviceValue):
        return HOST_TRANSPOSE.function(context, x, perm=perm)
    if perm is not None and sorted(perm) != list(range(x.ndim)):
        raise ta.ShapeError(f"{context}: perm {list(perm)} is not a permutation of {x.ndim} "
                            f"axes")
    context.note("transpose on the device (a copy, C order)")
    return x.transpose(perm)


HOST_TRANSPOSE = lookup("Transpose", 21)
# Ops whose own code cannot take device values, and the device's version of each.
DEVICE_OPS = {"Fused": OpImpl("Fused", 1, run_fused_on_device, None, None),
              "Transpose": OpImpl("Transpose", 1, transpose_on_device, None, None)}


def device_constants(graph: Graph) -> list[Any]:
    """What lives as long as a model and is copied to its GPU once: the constants (and the
    arrays they view) and the sparse weights of fused programs."""
    found: list[Any] = []
    for value in graph.constants.values():
        found.append(value)
        if getattr(value, "base", None) is not None:
            found.append(value.base)
    for node in graph.nodes:
        program = node.attributes.get("program")
        if isinstance(program, Program) and program.sparse is not None:
            found.extend(program.sparse)
    return found


__all__ = ["DeviceExecutor", "Placement", "device_constants", "run_fused_on_device"]
