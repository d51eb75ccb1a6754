"""Packing kernel arguments from the ABI that ``ir.Function.params`` describes.

Each parameter's ``role`` names what it is: ``index.i`` (the size of index ``i``),
``A.1.pos`` / ``A.1.crd`` (a level's arrays), ``A.vals``, ``capacity`` (initial capacity of
grown output buffers), and for the output either ``out.vals`` (a dense buffer the runtime
allocates zeroed) or ``out.k.pos`` / ``out.k.crd`` / ``out.vals`` handles plus ``out.sizes``
(buffers the kernel allocates and hands back). The runtime never guesses: it reads roles.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from tensoralg.errors import CompileError
from tensoralg.formats.tensor import Tensor
from tensoralg.ir.nodes import Param, Ptr


@dataclass
class OutputBuffers:
    """What the runtime hands the kernel for the output, and reads back afterwards."""

    dense: np.ndarray | None = None
    handles: dict[str, ctypes.c_void_p] = field(default_factory=dict)
    sizes: np.ndarray | None = None
    capacity: int = 16


def pack_arguments(params: tuple[Param, ...], tensors: Mapping[str, Tensor],
                   sizes: Mapping[str, int], output_name: str, output: OutputBuffers) -> list:
    """One argument per parameter, in order: addresses for pointers, numbers for scalars."""
    args: list = []
    for param in params:
        parts = param.role.split(".")
        if parts[0] == "index":
            args.append(int(sizes[parts[1]]))
        elif parts[0] == "capacity":
            args.append(int(output.capacity))
        elif parts[0] == output_name and param.output:
            args.append(_output_argument(param, parts, output))
        else:
            args.append(_input_argument(param, parts, tensors))
    return args


def _input_argument(param: Param, parts: list[str], tensors: Mapping[str, Tensor]) -> int:
    tensor = tensors[parts[0]]
    match parts[1:]:
        case ["vals"]:
            array = tensor.vals
        case [level, "pos"]:
            array = tensor.levels[int(level)].pos
        case [level, "crd"]:
            array = tensor.levels[int(level)].crd
        case _:
            raise CompileError(f"internal: unknown parameter role {param.role!r}")
    if array is None:
        raise CompileError(f"internal: {param.role} is missing from {tensor}")
    return array.ctypes.data


def _output_argument(param: Param, parts: list[str], output: OutputBuffers) -> int:
    if parts[1:] == ["sizes"]:
        assert output.sizes is not None
        return output.sizes.ctypes.data
    if isinstance(param.var.dtype, Ptr) and isinstance(param.var.dtype.elem, Ptr):
        handle = ctypes.c_void_p(0)
        output.handles[".".join(parts[1:])] = handle
        return ctypes.addressof(handle)
    assert output.dense is not None
    return output.dense.ctypes.data
