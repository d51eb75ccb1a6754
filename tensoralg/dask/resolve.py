"""``ta.einsum`` and ``Kernel.__call__`` with ``dask.array`` operands: the calls api.py hands
over (``api.set_dask_handlers``), and ``explain``, which prints their plans.

Three or more einsum operands are contracted along ``ta.einsum_path``'s path (on the operands'
shapes and nonzero counts), one blockwise step per contraction; a product one kernel computes
best (MTTKRP, SDDMM) stays one step, as in ``ta.einsum``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import tensoralg as ta
from tensoralg.dask.graph import build
from tensoralg.dask.operands import describe, is_dask
from tensoralg.dask.plan import BlockPlan, make_plan
from tensoralg.dask.tasks import LETTERS, EinsumSpec, KernelSpec
from tensoralg.errors import NotationError, UnsupportedError

_PLAIN = {"out": None, "order": "K"}


@dataclass(frozen=True, slots=True)
class _Proxy:
    """An operand as ``ta.einsum_path`` weighs it: its shape and stored entries."""

    shape: tuple[int, ...]
    nnz: int | None


def einsum_handler(operands: tuple, options: dict[str, Any]) -> Any:
    """``ta.einsum`` with a dask operand (installed in api.py)."""
    return blockwise_einsum(operands, options)[0]


def kernel_handler(kernel: ta.Kernel, operands: dict[str, Any]) -> Any:
    """``kernel(**operands)`` with a dask operand (installed in api.py)."""
    return blockwise_kernel(kernel, operands)[0]


def blockwise_einsum(operands: tuple, options: dict[str, Any]
                     ) -> tuple[Any, list[BlockPlan]]:
    """The lazy result and the plan of each contraction step."""
    subscripts, values = operands[0], list(operands[1:])
    if not isinstance(subscripts, str):
        raise UnsupportedError("with dask operands, einsum takes subscripts as a string "
                               "(not NumPy's interleaved operand, sublist form)")
    for option, plain in _PLAIN.items():
        given = options.get(option)
        if given is not None and not (isinstance(given, str) and given.upper() == plain):
            raise UnsupportedError(f"einsum's {option}= does not apply to dask operands: the "
                                   f"result is a lazy dask array; leave {option}= out")
    inputs, output = _split(subscripts, len(values))
    optimize = options.get("optimize", "auto")
    if len(values) > 2 and optimize not in (False, None) and options.get("formats") is None:
        wanted = "greedy" if optimize == "auto" else optimize
        proxies = [_Proxy(describe(k, i, v).shape, describe(k, i, v).nnz)
                   for k, (i, v) in enumerate(zip(inputs, values))]
        path = ta.einsum_path(subscripts, *proxies, optimize=wanted)[0][1:]
    else:
        path = [tuple(range(len(values)))]
    plans = []
    terms = list(zip(inputs, values))
    for number, positions in enumerate(path):
        taken = [terms[p] for p in positions]
        rest = [t for k, t in enumerate(terms) if k not in positions]
        last = number == len(path) - 1
        kept = output if last else _kept(taken, rest, output)
        text = ",".join(i for i, _ in taken) + "->" + kept
        step_options = options if last else {**options, "out_format": None}
        result, plan = _einsum_step(text, [v for _, v in taken], step_options)
        plans.append(plan)
        terms = rest + [(kept, result)]
    return terms[0][1], plans


def _einsum_step(subscripts: str, values: list[Any], options: dict[str, Any]
                 ) -> tuple[Any, BlockPlan]:
    inputs, output = _split(subscripts, len(values))
    described = tuple(describe(k, i, v) for k, (i, v) in enumerate(zip(inputs, values)))
    plan = make_plan(subscripts, described, output, may_split_sums=True)
    spec = EinsumSpec(subscripts, options.get("dtype"), options.get("backend"),
                      options.get("out_format"), options.get("formats"),
                      options.get("casting", "safe"))
    return build(plan, values, spec), plan


def _split(subscripts: str, count: int) -> tuple[list[str], str]:
    text = subscripts.replace(" ", "")
    if "." in text:
        raise UnsupportedError("with dask operands, einsum does not take an ellipsis; name "
                               "every index")
    left, arrow, output = text.partition("->")
    inputs = left.split(",")
    if len(inputs) != count:
        raise NotationError(f"{subscripts!r} names {len(inputs)} operand(s) but einsum got "
                            f"{count}")
    if not arrow:     # NumPy's implicit output: the indices used once, in alphabetical order
        joined = "".join(inputs)
        output = "".join(sorted(i for i in set(joined) if joined.count(i) == 1))
    return inputs, output


def _kept(taken: list[tuple[str, Any]], rest: list[tuple[str, Any]], output: str) -> str:
    needed = set(output) | {i for indices, _ in rest for i in indices}
    kept: list[str] = []
    for indices, _ in taken:
        kept += [i for i in indices if i in needed and i not in kept]
    return "".join(kept)


def blockwise_kernel(kernel: ta.Kernel, operands: dict[str, Any]
                     ) -> tuple[Any, list[BlockPlan]]:
    """A compiled kernel run block by block over its dask operands."""
    text = str(kernel.statement)
    lhs, _, rhs = text.partition("=")
    uses = {}
    for name, indices in re.findall(r"(\w+)\(([^()]*)\)", rhs):
        if name in kernel.formats:
            listed = tuple(i.strip() for i in indices.split(","))
            if uses.setdefault(name, listed) != listed:
                raise UnsupportedError(f"{text}: {name} is read with two index lists; with "
                                       f"dask operands each tensor is read one way")
    found = re.match(r"\s*\w+\s*(?:\(([^()]*)\))?\s*$", lhs)
    out_names = tuple(i.strip() for i in found.group(1).split(",")) \
        if found and found.group(1) else ()
    letters = _letters(list(out_names) + [i for v in uses.values() for i in v])
    names = tuple(kernel.formats)
    missing = [n for n in names if n not in operands]
    if missing:
        raise ta.ShapeError(f"kernel for {text} needs operand(s) {', '.join(missing)}")
    inputs = ["".join(letters[i] for i in uses.get(n, ())) for n in names]
    output = "".join(letters[i] for i in out_names)
    values = [operands[n] for n in names]
    described = tuple(describe(k, i, v) for k, (i, v) in enumerate(zip(inputs, values)))
    # A product of operands, sums placed anywhere, is linear in each operand: the partials of
    # blocks split along summed indices add up to the result (a product of sums too, since
    # the plan runs every combination of blocks).
    one_product = not re.search(r"[-+/]", rhs) and \
        all(n in kernel.formats or n == "sum" for n in re.findall(r"(\w+)\(", rhs))
    plan = make_plan(text, described, output, may_split_sums=one_product)
    formats = tuple(kernel.formats.items())
    if kernel.out_format is not None:
        formats += ((kernel.statement.lhs.tensor, kernel.out_format),)
    schedule = str(kernel.schedule_given) if kernel.schedule_given is not None else None
    spec = KernelSpec(text, formats, str(kernel.dtype), kernel.backend, schedule, names)
    return build(plan, values, spec), [plan]


def _letters(names: list[str]) -> dict[str, str]:
    letters: dict[str, str] = {}
    for name in names:
        if name not in letters:
            if len(letters) == len(LETTERS):
                raise UnsupportedError("more index variables than the plan can name")
            letters[name] = LETTERS[len(letters)]
    return letters


def explain(call: Any, *operands: Any, **named: Any) -> str:
    """The blockwise plan of ``ta.einsum(subscripts, *operands)`` or of ``kernel(**named)``:
    partitioned indices, broadcast operands, cross-block additions, tasks, and the steps of a
    product of three or more operands.

    >>> import numpy as np, scipy.sparse as sp, tensoralg as ta
    >>> A = ta.dask.from_scipy(sp.random_array((8, 8), density=0.5, format="csr",
    ...                                        random_state=0), chunks=2)
    >>> print(explain("ij,j->i", A, np.ones(8)).splitlines()[1])
    step 1: ij,j->i: 2 output block(s), 2 block task(s), 0 addition task(s)
    """
    if isinstance(call, str):
        if named:
            raise UnsupportedError("explain(subscripts, *operands) takes operands by position")
        _, plans = blockwise_einsum((call, *operands), {})
        head = f"ta.einsum({call!r}) on dask operands, {len(plans)} step(s)"
    elif isinstance(call, ta.Kernel):
        by_name = dict(zip(call.formats, operands)) | named
        _, plans = blockwise_kernel(call, by_name)
        head = f"kernel {call.statement} on dask operands"
    else:
        raise UnsupportedError(f"explain takes einsum subscripts or a ta.Kernel, not "
                               f"{type(call).__name__}")
    if not any(is_dask(v) for v in (*operands, *named.values())):
        head += " (no operand is a dask array: every operand is one block)"
    body = [f"step {n}: {plan}" for n, plan in enumerate(plans, 1)]
    return "\n".join([head, *body])
