"""Einsum: the equation is the core's own notation, so it goes straight to ``ta.einsum``.

ONNX equations are NumPy subscripts, possibly with spaces (``"bij, bjk -> bik"``), an
ellipsis, or no ``->`` (the implicit output); ``ta.einsum`` reads all of these once the spaces
are removed. Operands are widened to the kernel dtype (:func:`compute_dtype`) and the result is
narrowed back to the inputs' type.

An explicit equation of one or two operands with no ellipsis and no letter repeated inside an
operand (xDeepFM's outer product ``bhd,bmd->bhmd``) runs as the statement it spells,
``Y(b,h,m,d) = A(b,h,d) * B(b,m,d)``, through the node's kernels, so that a static plan replays
it prebound instead of calling ``ta.einsum`` (parsing, a lookup, checks) at every run.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.registry import op


@op("Einsum", since=12)
def einsum(node: NodeContext, *inputs: np.ndarray, equation: str) -> np.ndarray:
    """``ta.einsum(equation, *inputs)``, compiled by the core like any other statement."""
    subscripts = "".join(equation.split())
    if subscripts.split("->")[0].count(",") + 1 != len(inputs):
        raise ta.ShapeError(f"{node}: equation {equation!r} does not name {len(inputs)} "
                            f"operand(s)")
    dtype = compute_dtype(np.result_type(*inputs))
    statement = statement_of(subscripts, [a.ndim for a in inputs])
    if statement is not None:
        result = node.run(statement, dtype, **dict(zip("AB", inputs)))
        return result.astype(inputs[0].dtype, copy=False)
    node.note(f"ta.einsum {subscripts!r}")
    operands = [np.asarray(a, dtype=dtype) for a in inputs]
    with ta.optimised_builds():       # as the model's other kernels (ops/kernels.py)
        result = ta.einsum(subscripts, *operands, dtype=dtype, backend=node.kernels.backend)
    return np.asarray(result).astype(inputs[0].dtype, copy=False)


def statement_of(subscripts: str, ranks: list[int]) -> str | None:
    """The statement an explicit equation of one or two operands spells (indices renamed, so
    that upper-case letters are indices too), or None for any other equation: an ellipsis,
    an implicit or scalar output, a letter repeated inside an operand, or a rank that differs
    from the operand's (the kernel's own check would then name the wrong thing).

    >>> statement_of("bhd,bmd->bhmd", [3, 3])
    'Y(i0,i1,i2,i3) = A(i0,i1,i3) * B(i0,i2,i3)'
    >>> statement_of("ii->i", [2]) is None
    True
    """
    if "." in subscripts or "->" not in subscripts:
        return None
    inputs, output = subscripts.split("->")
    terms = inputs.split(",")
    if not 1 <= len(terms) <= 2 or len(terms) != len(ranks) or not output or \
            any(len(set(t)) != len(t) or len(t) != r for t, r in zip(terms, ranks)) or \
            len(set(output)) != len(output) or not set(output) <= set("".join(terms)) or \
            not all(c.isalpha() for c in subscripts.replace(",", "").replace("->", "")):
        return None
    names: dict[str, str] = {}
    for c in output + "".join(terms):
        names.setdefault(c, f"i{len(names)}")

    def access(letter: str, term: str) -> str:
        return f"{letter}({','.join(names[c] for c in term)})"
    rhs = " * ".join(access(letter, term) for letter, term in zip("AB", terms))
    return f"{access('Y', output)} = {rhs}"
