"""Dead-code removal: locals nobody reads, and control flow left with nothing to do.

Invariant: every statement that can change memory or the function's status survives: Store,
Grow, Allocate and Free always stay, and so does any loop or branch that still holds one. What
goes is (repeated until nothing more goes):

- the Declare of a local that is never read, with every Assign to it; reads in the local's
  own Assigns (``t = t + x``) do not count, since they only feed the local itself;
- empty Blocks; an If whose two branches are empty (conditions have no side effects);
- a For with an empty body (it always terminates);
- a While with an empty body only when its condition is the constant false: any other empty
  While might never end, and removing it would change what the kernel does.
"""
from __future__ import annotations

from .. import nodes as n
from ..rewrite import children, rewrite


def remove_dead_code(fn: n.Function) -> n.Function:
    """Drop unread locals and empty control flow; keep every side effect (module docstring).

    >>> from tensoralg.ir.build import declare, assign, function, var, store, i64
    >>> from tensoralg.ir.printer import format_function
    >>> t, u, y = var("t", n.I64), var("u", n.I64), var("y", n.Ptr(n.I64))
    >>> f = function("k", [n.Param(y, "y.vals", output=True)],
    ...              declare(t, 1), declare(u, 2), assign(u, t), store(y, 0, i64(5)))
    >>> print(format_function(remove_dead_code(f)))
    kernel k(i64* y [y.vals] out)
      y[0] = 5;
    """
    while True:
        read = read_vars(fn)
        new = rewrite(fn, lambda node: _prune(node, read))
        assert isinstance(new, n.Function)
        if new is fn:
            return new
        fn = new


def read_vars(node: n.Node) -> set[str]:
    """Names of the variables whose values ``node`` reads (targets of writes excluded).

    A Store reads its pointer, and Grow and Free read theirs; Declare, Assign, Allocate and
    For only write the variable they name. An Assign's reads of its own target (``t = t + 1``)
    are not counted: they keep nothing but the local itself alive.

    >>> from tensoralg.ir.build import assign, add, var
    >>> t, u = var("t", n.I64), var("u", n.I64)
    >>> sorted(read_vars(assign(t, add(u, t))))
    ['u']
    """
    out: set[str] = set()
    stack: list[n.Node] = [node]
    while stack:
        current = stack.pop()
        match current:
            case n.Var(name):
                out.add(name)
            case n.Declare(_, init):
                stack.append(init)
            case n.Assign(v, value):
                out.update(read_vars(value) - {v.name})
            case n.Allocate(_, count):
                stack.append(count)
            case n.For(_, start, stop, body):
                stack.extend((start, stop, body))
            case n.Param():
                pass
            case _:
                stack.extend(children(current))
    return out


def _prune(node: n.Node, read: set[str]) -> n.Node | None:
    match node:
        case n.Declare(v) | n.Assign(v) if v.name not in read:
            return n.Block()
        case n.Block(body) if any(_is_empty(s) for s in body):
            return n.Block(tuple(s for s in body if not _is_empty(s)))
        case n.If(_, n.Block(()), n.Block(())):
            return n.Block()
        case n.For(_, _, _, n.Block(())):
            return n.Block()
        case n.While(n.Const(False), _):
            return n.Block()
    return None


def _is_empty(s: n.Stmt) -> bool:
    return isinstance(s, n.Block) and not s.body


__all__ = ["read_vars", "remove_dead_code"]
