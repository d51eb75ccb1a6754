"""What a static plan's steps are made of: where a step reads a value (:class:`Getter`), a
node's static form (:class:`Spec`), and the marking of a step as nothing but prebound kernel
calls (:func:`made_of`), which lets the plan compile runs of such steps into one native
sequence.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

Env = dict[str, np.ndarray]

Run = Callable[[Env], None]

# A prebound call (``BoundCall`` or a dense layer's) and the operands it reads each run:
# (operand, where from, shape to view it as, or None).
Part = tuple[Any, list[tuple[str, "Getter", tuple[int, ...] | None]]]


def made_of(run: Run, parts: list[Part] | None) -> Run:
    """Mark ``run`` as exactly ``parts`` called in order, so that a plan may compile a run of
    such steps into one native sequence (``tensoralg.program.CallSequence``). None: it is not."""
    run.parts = parts      # type: ignore[attr-defined]
    return run


def parts_of(run: Any) -> list[Part] | None:
    """The parts ``run`` was marked with (None if it has Python work of its own)."""
    return getattr(run, "parts", None)


class Replan(Exception):
    """A run no longer fits the plan (a generic step produced a shape other than the recorded
    one, a multi-hot input outgrew its CSR buffers): run node by node."""


@dataclass
class Getter:
    """Where a step reads a value: fixed at plan time, or looked up by name each run."""

    name: str
    fixed: np.ndarray | None

    def __call__(self, env: Env) -> np.ndarray:
        return self.fixed if self.fixed is not None else env[self.name]


CSR_ARRAYS = ("indptr", "indices", "data")   # the arrays of a CSR-fed input a call may read


def csr_array_getter(feed: str, array: str) -> Getter:
    """The getter of one array (``indptr``, ``indices`` or ``data``) of the CSR-fed input
    ``feed``, for a part of a compiled sequence: the sequence reads the array's address from a
    slot that each run fills (:func:`csr_array_of` splits the name)."""
    assert array in CSR_ARRAYS
    return Getter(f"{feed}\0{array}", None)


def csr_array_of(name: str) -> tuple[str, str | None]:
    """``(feed, array)`` for a :func:`csr_array_getter` name, ``(name, None)`` otherwise."""
    feed, _, array = name.partition("\0")
    return feed, array or None


@dataclass
class Spec:
    """A node's static form: scratch buffers it needs, and how to make its run function once
    every buffer exists (``make(outputs, scratch, getters)``)."""

    make: Callable[[list[np.ndarray], list[np.ndarray], list[Getter]], Run]
    scratch: list[tuple[tuple[int, ...], np.dtype]] = field(default_factory=list)
    kind: str = "prebound"
    # Layout hooks of sparse heads: the input that may arrive stored transposed (k-major, as
    # the kernel wants it), whether the output can be written transposed, and ``relayout``
    # to apply the plan's choice (it may change ``scratch``).
    transposable_input: str | None = None
    transposable_output: bool = False
    relayout: Callable[[bool, bool], None] | None = None
    # Inputs the step never reads (a product that takes x * x from x's CSR): a step whose
    # outputs nobody reads is left out of the plan.
    unread: frozenset[str] = frozenset()
    # Inputs the step reads only in their CSR form (a multi-hot graph input): fed sparse, they
    # need not be densified for it.
    csr_inputs: frozenset[str] = frozenset()
    # What the step runs, for the printed plan and the profile, when it differs from what the
    # node-by-node run noted (None: the same).
    plan: str | None = None
    # The step writes its output through whatever view it is given (a gather: a column block
    # of the Concat that reads it), so the plan may place that output inside another buffer.
    strided_output: bool = False
    # The step writes a 4-D output whose images are contiguous blocks at any distance (a
    # convolution's NCHW planes), so the plan may place it as a channel block of a Concat.
    image_blocks_output: bool = False
    # Of a Concat: the inputs its producers already wrote into its output (set by the plan
    # before ``make``); only the others are copied.
    in_place: frozenset[str] = frozenset()
    # Keys of state the step shares with other steps outside its inputs and outputs (the CSR
    # of a multi-hot input, scanned by its first reader): steps sharing a key never run at
    # once (``onnx/plan/branches.py``).
    shared: frozenset[str] = frozenset()


def placeholder(get: Getter, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """What to bind a call to before its first run: the fixed value, or zeros of the shape."""
    return contiguous(get.fixed) if get.fixed is not None else np.zeros(shape, dtype)


def one_input_run(bound: Any, get: Getter, operand: str,
                  shape: tuple[int, ...] | None = None) -> Run:
    """The run of a prebound call whose one input ``operand`` is read through ``get``
    (rebound each run unless fixed; viewed as ``shape`` when given)."""

    def run(env: Env) -> None:
        if get.fixed is None:
            value = contiguous(get(env))
            bound.rebind(operand, value if shape is None else value.reshape(shape))
        bound()
    return made_of(run, [(bound, [(operand, get, shape)])])


def contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` itself when C-contiguous, else a C-contiguous copy (0-d stays 0-d, unlike
    ``np.ascontiguousarray``)."""
    return array if array.flags.c_contiguous else np.array(array, order="C")


__all__ = ["Env", "Getter", "Part", "Replan", "Run", "Spec", "contiguous", "made_of", "parts_of",
           "placeholder", "one_input_run"]
