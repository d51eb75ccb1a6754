"""Index sizes from operand shapes, with ShapeErrors that name the tensor, the mode and the index."""
from __future__ import annotations

import operator
from typing import Mapping, Sequence

from tensoralg.errors import ShapeError
from tensoralg.notation.ast import Access, Assignment, accesses


def infer_dims(stmt: Assignment, shapes: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """The size of every index variable of ``stmt``, in order of first appearance.

    ``shapes`` holds one shape per operand and, optionally, the output's; all must agree.
    Operands are checked left to right, then the output; the first size seen for an index is
    the one later ones are compared with.

    >>> from tensoralg.notation.parse_statement import parse_statement
    >>> infer_dims(parse_statement("y(i) = A(i,j) * x(j)"), {"A": (3, 4), "x": (4,)})
    {'i': 3, 'j': 4}
    """
    dims: dict[str, int] = {}
    origin: dict[str, tuple[str, int]] = {}  # index -> (tensor, mode) that set its size
    for access in accesses(stmt.rhs):
        if access.tensor not in shapes:
            known = ", ".join(sorted(shapes)) or "none"
            raise ShapeError(
                f"tensor {access.tensor} in '{stmt}' has no shape (shapes given: {known})")
        _bind(access, shapes[access.tensor], dims, origin, "operand")
    if stmt.lhs.tensor in shapes:
        _bind(stmt.lhs, shapes[stmt.lhs.tensor], dims, origin, "output")
    for index in stmt.lhs.indices:
        if index not in dims:
            raise ShapeError(f"index {index} of the output {stmt.lhs} is used by no operand; "
                             "give the output's shape")
    return dims


def _bind(access: Access, shape: Sequence[int], dims: dict[str, int],
          origin: dict[str, tuple[str, int]], role: str) -> None:
    """Record the sizes ``access`` gives its indices; raise on a clash with earlier ones."""
    shape = tuple(shape)
    if len(shape) != len(access.indices):
        raise ShapeError(f"{role} {access.tensor} has shape {shape} (rank {len(shape)}) but is "
                         f"used as {access}")
    for mode, (index, raw) in enumerate(zip(access.indices, shape)):
        size = _size(raw, f"{role} {access.tensor}", mode)
        if index not in dims:
            dims[index] = size
            origin[index] = (access.tensor, mode)
        elif dims[index] != size:
            tensor, first_mode = origin[index]
            raise ShapeError(f"index {index}: {tensor} has {dims[index]} along mode {first_mode} "
                             f"but {access.tensor} has {size} along mode {mode} (every use of "
                             f"index '{index}' must have one size)")


def _size(size: object, what: str, mode: int) -> int:
    """``size`` as a plain int (numpy integers included), or a ShapeError."""
    try:
        value = operator.index(size)  # type: ignore[arg-type]
    except TypeError:
        value = -1
    if isinstance(size, bool) or value < 0:
        raise ShapeError(f"{what} has an invalid size {size!r} along mode {mode}")
    return value


def output_shape(stmt: Assignment, dims: Mapping[str, int]) -> tuple[int, ...]:
    """The output's shape: the sizes of the left side's indices.

    >>> from tensoralg.notation.parse_einsum import parse_einsum
    >>> output_shape(parse_einsum("ij->ji", [2]), {"i": 2, "j": 5})
    (5, 2)
    """
    missing = [i for i in stmt.lhs.indices if i not in dims]
    if missing:
        raise ShapeError(f"no size for index {missing[0]} of the output {stmt.lhs}")
    return tuple(dims[i] for i in stmt.lhs.indices)
