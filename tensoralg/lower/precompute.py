"""A schedule's ``precompute`` commands, carried out on the statement before concretization.

``precompute(expr, indices, workspace=w)`` names a subexpression as written in the statement
(its sums are the statement's: ``B(j,k) * x(k)`` names ``sum(k, B(j,k) * x(k))`` in
``y(i) = A(i,j) * (B(j,k) * x(k))``). Two things can happen to it:

- it is a proper part of the right side (or the whole right side of a dense output): it becomes
  a dense temporary ``w(outer..., indices...)``, computed by a loop nest of its own before the
  statement, which then reads ``w`` in its place. ``outer`` are the subexpression's other free
  indices; when a dense consumer runs them outermost too, the IR's row-workspace step keeps
  only one row of ``w`` (``ir/passes/workspace.py``), and a sparse consumer reads it whole;
- it is the whole right side of a statement with a sparse output, over the output's last stored
  index: each output row is accumulated in a dense workspace, then compressed into the output
  (``OutputMode.WORKSPACE``, ``lower/assemble.py``): SpGEMM's row workspace.

Everything that does not fit is refused with a ``CompileError`` naming the command.
"""
from __future__ import annotations

from typing import Callable

from tensoralg.errors import CompileError
from tensoralg.notation.ast import (
    Access,
    Expr,
    accesses,
    free_indices,
)
from tensoralg.notation.printer import format_expr
from tensoralg.notation.reductions import Path, children, with_children
from tensoralg.schedule import Precompute
from tensoralg.schedule.commands import subexpression, without_sums

# Makes the dense temporary ``name(indices) = expr`` and returns the access that reads it.
MakeTemporary = Callable[[tuple[str, ...], Expr, str], Access]


def replace_at(expr: Expr, path: Path, new: Expr) -> Expr:
    """``expr`` with the node at ``path`` (positions as `children` numbers them) replaced."""
    if not path:
        return new
    parts = list(children(expr))
    parts[path[0]] = replace_at(parts[path[0]], path[1:], new)
    return with_children(expr, parts)


def find(expr: Expr, command: Precompute) -> tuple[Path, Expr] | None:
    """The first (outermost, leftmost) node of ``expr`` that ``command`` names and whose free
    indices hold the workspace's; of a chain of sums around it, the outermost that does.

    >>> from tensoralg.notation import parse_statement
    >>> rhs = parse_statement("y(i) = A(i,j) * (B(j,k) * x(k))").rhs
    >>> path, node = find(rhs, Precompute("B(j,k) * x(k)", ("j",)))
    >>> path, format_expr(node)
    ((0, 1), 'sum(k, B(j,k) * x(k))')
    """
    target = subexpression(command.expr)
    wanted = set(command.indices)

    def visit(node: Expr, path: Path) -> tuple[Path, Expr] | None:
        if without_sums(node) == target and wanted <= free_indices(node):
            return path, node
        for k, child in enumerate(children(node)):
            found = visit(child, (*path, k))
            if found is not None:
                return found
        return None

    return visit(expr, ())


def workspace_indices(node: Expr, command: Precompute, preferred: tuple[str, ...]
                      ) -> tuple[str, ...]:
    """The temporary's modes: the node's free indices that the workspace does not hold
    (outermost: the loops it is computed under, in the output's order, then as read), then the
    workspace's own."""
    seen = [i for i in dict.fromkeys(x for a in accesses(node) for x in a.indices)
            if i in free_indices(node) and i not in command.indices]
    outer = sorted(seen, key=lambda i: (0, preferred.index(i)) if i in preferred
                   else (1, seen.index(i)))
    return (*outer, *command.indices)


def carry_out(rhs: Expr, lhs: Access, commands: tuple[Precompute, ...],
              names: set[str], make: MakeTemporary) -> tuple[Expr, Precompute | None]:
    """Replace each subexpression the commands name by a temporary; a command that names the
    whole right side is returned instead (the caller decides: a row workspace for a sparse
    output, a temporary for a dense one).

    ``names`` are the statement's tensor names, which a workspace must not take.
    """
    whole: Precompute | None = None
    for command in commands:
        if command.workspace in names or command.workspace == lhs.tensor:
            raise CompileError(f"{command}: {command.workspace} is a tensor of the statement; "
                               f"name the workspace apart (workspace=...)")
        found = find(rhs, command)
        if found is None:
            raise CompileError(_missing(command, rhs, lhs))
        path, node = found
        if not path:
            if whole is not None:
                raise CompileError(f"{command}: {whole} already precomputes the whole right "
                                   f"side")
            whole = command
            continue
        indices = workspace_indices(node, command, lhs.indices)
        rhs = replace_at(rhs, path, make(indices, node, command.workspace))
    return rhs, whole


def _missing(command: Precompute, rhs: Expr, lhs: Access) -> str:
    target = subexpression(command.expr)
    matches = []

    def visit(node: Expr) -> None:
        if without_sums(node) == target:
            matches.append(node)
        for child in children(node):
            visit(child)

    visit(rhs)
    if matches:
        free = ", ".join(sorted(free_indices(matches[0]))) or "none"
        return (f"{command}: in {lhs} = {format_expr(rhs)}, {format_expr(matches[0])} has the "
                f"free indices {free}; the workspace's indices ({', '.join(command.indices)}) "
                f"must be among them")
    return (f"{command}: {lhs} = {format_expr(rhs)} has no subexpression "
            f"{format_expr(target)}; name one as the statement writes it (the same operands, "
            f"operators and grouping)")


__all__ = ["carry_out", "find", "replace_at", "workspace_indices"]
