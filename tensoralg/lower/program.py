"""The values that flow from concretization into lowering.

A user statement becomes a ``Program``: an ordered list of ``LoopNest``s (temporaries first,
then the statement itself, possibly split into several accumulating nests), each with a concrete
loop order and a reduction-free expression, plus a description of every tensor the kernel touches.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from tensoralg.formats.format import Format
from tensoralg.notation.ast import Access, Expr


class TensorRole(enum.Enum):
    """Where a tensor's storage comes from."""

    INPUT = "input"            # handed in by the caller, validated by runtime/
    TEMPORARY = "temporary"    # dense, allocated zeroed inside the kernel and freed there
    OUTPUT = "output"          # the result


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A tensor as the kernel sees it: its storage format, index dtype and modes' index names."""

    name: str
    format: Format
    index_dtype: np.dtype
    role: TensorRole
    dims: tuple[str, ...]       # index variable giving the size of each mode, in mode order
    # A COO input whose entries the kernel reads in any order, duplicates included
    # (``lower/unordered.py``): every store to the output adds.
    unordered: bool = False

    @property
    def rank(self) -> int:
        return self.format.rank


class OutputMode(enum.Enum):
    """How a loop nest writes its output (see lower/assemble.py)."""

    DENSE = "dense"            # random access: out[position] += value
    APPEND = "append"          # sparse output, loops in output storage order: append coordinates
    WORKSPACE = "workspace"    # sparse output whose last level follows a reduction: dense row
                               # workspace, sorted coordinate list, then append
    PATTERN = "pattern"        # sparse output whose pattern is an operand's (LoopNest.pattern):
                               # values stored at that operand's positions (lower/pattern.py)


@dataclass(frozen=True, slots=True)
class LoopNest:
    """``output (+)= expr`` over ``loop_order``; ``expr`` holds no Reduce nodes.

    Every index in ``loop_order`` that is not an output index is summed over.
    """

    output: Access
    expr: Expr
    loop_order: tuple[str, ...]
    mode: OutputMode
    pattern: str | None = None      # OutputMode.PATTERN: the operand whose positions it shares
    # OutputMode.WORKSPACE whose rows the runtime counts first (lower/counted.py): the product's
    # two CSR factors, and the kernel fills each row in place at its offset
    counted: tuple[str, str] | None = None
    # An all-dense nest whose loops read operands copied in their mode order (the program's
    # conversions): the order to run when the call reads them in their own layout instead
    # (``concretize.kept_layouts``); None: the same order.
    kept_order: tuple[str, ...] | None = None

    @property
    def reduced(self) -> tuple[str, ...]:
        return tuple(v for v in self.loop_order if v not in self.output.indices)


@dataclass(frozen=True, slots=True)
class Program:
    """Everything lowering needs to emit one kernel."""

    nests: tuple[LoopNest, ...]
    tensors: tuple[TensorInfo, ...]
    value_dtype: np.dtype
    notes: tuple[str, ...] = ()
    conversions: tuple[tuple[str, str], ...] = ()   # (alias, source): alias = source converted
    # The format the caller gets when it differs from the one the output is assembled in: an
    # inferred output with a dense level below a compressed one (MTTKRP's ``sd``) is assembled
    # all compressed, which the lowering can append, and converted after the kernel runs.
    result_format: Format | None = None

    def tensor(self, name: str) -> TensorInfo:
        for info in self.tensors:
            if info.name == name:
                return info
        raise KeyError(name)

    @property
    def output(self) -> TensorInfo:
        return next(t for t in self.tensors if t.role is TensorRole.OUTPUT)

    @property
    def pattern(self) -> str | None:
        """The operand whose stored pattern the sparse output shares (``OutputMode.PATTERN``):
        the kernel writes only the values, at that operand's positions."""
        return self.nests[-1].pattern if self.nests else None

    @property
    def counted(self) -> tuple[str, str] | None:
        """The two CSR factors of a sparse product whose output rows the runtime counts before
        the kernel fills them in place (``lower/counted.py``); None for other programs."""
        return self.nests[-1].counted if self.nests else None

    def __str__(self) -> str:
        from tensoralg.notation.printer import format_expr

        lines = []
        for nest in self.nests:
            lines.append(f"forall {', '.join(nest.loop_order) or '()'} [{nest.mode.value}]: "
                         f"{nest.output} += {format_expr(nest.expr)}")
        for info in self.tensors:
            lines.append(f"  {info.role.value} {info.name}: {info.format} index {info.index_dtype}")
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])
