"""The one generic traversal of the IR: bottom-up rewriting, pre-order walking, used variables.

Every pass is built on :func:`rewrite`: it handles only the nodes it cares about and lets this
module rebuild the rest. Children of a node are its fields that hold nodes, or tuples of nodes
(``Block.body``, ``Function.params``); dtypes (``Scalar``, ``Ptr``), strings, numbers and flags
are data, not children.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Callable, Iterator

from . import nodes as n

# The fields of each node class that hold child nodes (or tuples of them); written out so that
# a new node class without an entry fails loudly at its first traversal.
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {
    n.Const: (),
    n.Var: (),
    n.Load: ("array", "index"),
    n.Unary: ("operand",),
    n.Binary: ("lhs", "rhs"),
    n.Select: ("cond", "if_true", "if_false"),
    n.Cast: ("operand",),
    n.Block: ("body",),
    n.Declare: ("var", "init"),
    n.Assign: ("var", "value"),
    n.Store: ("array", "index", "value"),
    n.For: ("var", "start", "stop", "body"),
    n.While: ("cond", "body"),
    n.If: ("cond", "then", "otherwise"),
    n.Comment: (),
    n.Allocate: ("var", "count"),
    n.Grow: ("var", "capacity", "needed"),
    n.Free: ("var",),
    n.Param: ("var",),
    n.Function: ("params", "body"),
}
NODE_TYPES: tuple[type, ...] = tuple(_CHILD_FIELDS)

Rewriter = Callable[[n.Node], "n.Node | None"]


def is_node(value: object) -> bool:
    """Whether ``value`` is an IR node (an expression, statement, Param or Function)."""
    return type(value) in _CHILD_FIELDS


def _child_fields(node: object) -> tuple[str, ...]:
    try:
        return _CHILD_FIELDS[type(node)]
    except KeyError:
        raise n.IRError(f"not an IR node: {node!r}") from None


def children(node: n.Node) -> Iterator[n.Node]:
    """The direct child nodes of ``node``, in field order.

    >>> from tensoralg.ir.build import add, var, i64
    >>> [type(c).__name__ for c in children(add(var("i", n.I64), 1))]
    ['Var', 'Const']
    """
    for name in _child_fields(node):
        value = getattr(node, name)
        if isinstance(value, tuple):
            yield from (item for item in value if is_node(item))
        elif is_node(value):
            yield value


def rewrite(node: n.Node, fn: Rewriter) -> n.Node:
    """Rebuild ``node`` bottom-up, calling ``fn`` on every node after its children.

    ``fn`` returns a replacement node, or None to keep the node as it is. A node whose children
    are all unchanged and that ``fn`` keeps is returned as the same object, so ``result is
    node`` tells a caller that nothing changed. On a Function, the params and the body are
    rewritten.

    >>> from tensoralg.ir.build import add, var, i64
    >>> e = add(var("i", n.I64), 0)
    >>> rewrite(e, lambda x: None) is e
    True
    >>> rewrite(e, lambda x: x.lhs if isinstance(x, n.Binary) else None)
    Var(name='i', dtype=<Scalar.I64: 'i64'>)
    """
    changes: dict[str, object] = {}
    for name in _child_fields(node):
        value = getattr(node, name)
        if isinstance(value, tuple):
            new_items = tuple(rewrite(item, fn) if is_node(item) else item for item in value)
            if any(a is not b for a, b in zip(new_items, value)):
                changes[name] = new_items
        elif is_node(value):
            new_value = rewrite(value, fn)
            if new_value is not value:
                changes[name] = new_value
    if changes:
        node = _rebuild(node, changes)
    replacement = fn(node)
    return node if replacement is None else replacement


def _rebuild(node: n.Node, changes: dict[str, object]) -> n.Node:
    # Calling the constructor (not object.__setattr__) re-runs each node's __post_init__ checks.
    values = {f.name: changes.get(f.name, getattr(node, f.name)) for f in fields(node)}
    return type(node)(**values)


def walk(node: n.Node) -> Iterator[n.Node]:
    """Every node of the tree under ``node``, ``node`` first, in pre-order.

    >>> from tensoralg.ir.build import add, var
    >>> [type(x).__name__ for x in walk(add(var("i", n.I64), 1))]
    ['Binary', 'Var', 'Const']
    """
    # children() inlined: the passes walk every kernel's IR many times over, and a generator
    # per node was a third of lowering's time on a sparse product.
    fields = _CHILD_FIELDS
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        try:
            names = fields[type(current)]
        except KeyError:
            raise n.IRError(f"not an IR node: {current!r}") from None
        found: list[n.Node] = []
        for name in names:
            value = getattr(current, name)
            if isinstance(value, tuple):
                found.extend([item for item in value if type(item) in fields])
            elif type(value) in fields:
                found.append(value)
        found.reverse()
        stack.extend(found)


def used_vars(node: n.Node) -> set[str]:
    """Names of every variable mentioned under ``node``: read, written or introduced.

    >>> from tensoralg.ir.build import add, var
    >>> sorted(used_vars(add(var("i", n.I64), var("j", n.I64))))
    ['i', 'j']
    """
    return {x.name for x in walk(node) if isinstance(x, n.Var)}


__all__ = ["NODE_TYPES", "children", "is_node", "rewrite", "used_vars", "walk"]
