"""The IR verifier: checks scoping and typing rules that the node constructors cannot see.

Run after lowering and after every pass in tests and debug mode; a failure is always a bug in
tensoralg, so it raises :class:`IRVerifyError` (a CompileError) naming the step that broke the
IR and printing the offending node.

Rules checked (see the semantics paragraph of ``nodes.py``):

- scope: a variable is read or written only where it is visible: a Param everywhere, a For
  counter inside its body, a Declare/Allocate in the rest of its enclosing Block (and the blocks
  nested there); every use has the dtype of the introduction;
- uniqueness: a name is introduced once per function;
- mutation: Assign and Grow change only locals (never a parameter or a For counter); a Grow
  capacity is an i64 local;
- types: Assign/Declare/Store values match the target's dtype; If/While/Select conditions and
  ``and``/``or``/``not`` operands are bool; For bounds have the counter's integer dtype; Load
  and Store indices and Allocate counts are integers; arithmetic is on non-bool scalars; Free
  and Grow take pointers; constants hold values of their dtype.
"""
from __future__ import annotations

from dataclasses import dataclass

from tensoralg.errors import CompileError

from . import nodes as n
from .printer import format_node

_MAX_SHOWN_LINES = 12
_INT_RANGE = {n.I32: 1 << 31, n.I64: 1 << 63}


class IRVerifyError(CompileError):
    """The IR broke a rule of ``nodes.py``; always a bug in tensoralg, never the user's mistake."""


@dataclass(frozen=True, slots=True)
class _Binding:
    var: n.Var
    kind: str  # "param", "local" (Declare/Allocate) or "counter" (For)


class _Checker:
    """Walks a Function once, keeping a stack of scopes."""

    def __init__(self, after: str) -> None:
        self.after = after
        self.introduced: set[str] = set()
        self.scopes: list[dict[str, _Binding]] = [{}]
        self.statement: n.Node | None = None  # the innermost statement being checked

    # -- reporting and scopes -----------------------------------------------------------------

    def fail(self, problem: str, node: n.Node) -> None:
        step = f" after {self.after}" if self.after else ""
        message = f"invalid IR{step}: {problem}\n  in:\n{_shown(node)}"
        if self.statement is not None and self.statement is not node:
            message += f"\n  of the statement:\n{_shown(self.statement)}"
        raise IRVerifyError(message)

    def lookup(self, name: str) -> _Binding | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def introduce(self, v: n.Var, kind: str, node: n.Node) -> None:
        if v.name in self.introduced:
            self.fail(f"variable {v.name!r} is introduced twice", node)
        self.introduced.add(v.name)
        self.scopes[-1][v.name] = _Binding(v, kind)

    def use(self, v: n.Var, node: n.Node) -> _Binding:
        binding = self.lookup(v.name)
        if binding is None:
            where = "outside its scope" if v.name in self.introduced else "before it is introduced"
            self.fail(f"variable {v.name!r} is used {where}", node)
        assert binding is not None
        if binding.var.dtype != v.dtype:
            self.fail(f"variable {v.name!r} is used as {v.dtype} but introduced as "
                      f"{binding.var.dtype}", node)
        return binding

    def scoped_block(self, block: n.Block, *bindings: tuple[n.Var, str, n.Node]) -> None:
        self.scopes.append({})
        try:
            for v, kind, node in bindings:
                self.introduce(v, kind, node)
            for stmt in block.body:
                self.stmt(stmt)
        finally:
            self.scopes.pop()

    # -- expressions --------------------------------------------------------------------------

    def expr(self, e: n.Expr) -> n.DType:
        match e:
            case n.Const(value, dtype):
                self.const(e, value, dtype)
            case n.Var():
                self.use(e, e)
            case n.Load(array, index):
                self.use(array, e)
                self.integer(index, "a Load index", e)
            case n.Unary(op, operand):
                t = self.expr(operand)
                if op == "not" and t != n.BOOL:
                    self.fail(f"'not' needs a bool operand, got {t}", e)
                if op != "not" and not _is_number(t):
                    self.fail(f"{op!r} needs a numeric operand, got {t}", e)
                if op in n.FLOAT_UNARY_OPS and not _is_float(t):
                    self.fail(f"{op!r} needs a float operand, got {t}", e)
                if op == "ctz" and not _is_int(t):
                    self.fail(f"'ctz' needs an integer operand, got {t}", e)
                if _is_complex(t) and op not in n.COMPLEX_UNARY_OPS:
                    self.fail(f"{op!r} is not defined on complex {t}", e)
            case n.Binary(op, lhs, rhs):
                t = self.expr(lhs)
                self.expr(rhs)
                if op in n.LOGICAL_OPS and t != n.BOOL:
                    self.fail(f"{op!r} needs bool operands, got {t}", e)
                if op in n.ARITHMETIC_OPS and not _is_number(t):
                    self.fail(f"{op!r} needs numeric operands, got {t}", e)
                if op in n.BITWISE_OPS and not _is_int(t):
                    self.fail(f"{op!r} needs integer operands, got {t}", e)
                if op in n.COMPARISON_OPS and not isinstance(t, n.Scalar):
                    self.fail(f"{op!r} needs scalar operands, got {t}", e)
                if _is_complex(t) and op not in n.COMPLEX_BINARY_OPS:
                    self.fail(f"{op!r} is not defined on complex {t}", e)
            case n.Select(cond, if_true, if_false):
                self.condition(cond, "a Select", e)
                self.expr(if_true)
                self.expr(if_false)
            case n.Cast(operand, to):
                t = self.expr(operand)
                if not isinstance(t, n.Scalar) or not isinstance(to, n.Scalar):
                    self.fail(f"a Cast converts scalars only, got {t} to {to}", e)
            case _:
                self.fail(f"{type(e).__name__} is not an expression", e)
        return n.dtype_of(e)

    def const(self, e: n.Const, value: object, dtype: n.Scalar) -> None:
        if dtype is n.BOOL:
            ok = isinstance(value, bool)
        elif dtype.is_float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif dtype.is_complex:
            ok = isinstance(value, (int, float, complex)) and not isinstance(value, bool)
        else:
            bound = _INT_RANGE[dtype]
            ok = type(value) is int and -bound <= value < bound
        if not ok:
            self.fail(f"constant {value!r} is not a value of {dtype}", e)

    def integer(self, e: n.Expr, what: str, node: n.Node) -> None:
        t = self.expr(e)
        if not (isinstance(t, n.Scalar) and t.is_int):
            self.fail(f"{what} must be an integer, got {t}", node)

    def condition(self, e: n.Expr, what: str, node: n.Node) -> None:
        t = self.expr(e)
        if t != n.BOOL:
            self.fail(f"the condition of {what} must be bool, got {t}", node)

    def same(self, value: n.Expr, target: n.DType, what: str, node: n.Node) -> None:
        t = self.expr(value)
        if t != target:
            self.fail(f"{what}: value has dtype {t}, target has dtype {target}", node)

    # -- statements ---------------------------------------------------------------------------

    def stmt(self, s: n.Stmt) -> None:
        outer, self.statement = self.statement, s
        try:
            self._stmt(s)
        finally:
            self.statement = outer

    def _stmt(self, s: n.Stmt) -> None:
        match s:
            case n.Block():
                self.scoped_block(s)
            case n.Declare(v, init):
                self.same(init, v.dtype, "Declare", s)
                self.introduce(v, "local", s)
            case n.Assign(v, value):
                self.mutable(v, "Assign", s)
                self.same(value, v.dtype, "Assign", s)
            case n.Store(array, index, value):
                self.use(array, s)
                if not isinstance(array.dtype, n.Ptr):
                    self.fail(f"Store to non-pointer {array.name!r}: {array.dtype}", s)
                self.integer(index, "a Store index", s)
                self.same(value, array.dtype.elem, "Store", s)
            case n.For(v, start, stop, body):
                if not (isinstance(v.dtype, n.Scalar) and v.dtype.is_int):
                    self.fail(f"For counter {v.name!r} must be an integer, got {v.dtype}", s)
                self.same(start, v.dtype, "For start", s)
                self.same(stop, v.dtype, "For stop", s)
                self.scoped_block(body, (v, "counter", s))
            case n.While(cond, body):
                self.condition(cond, "a While", s)
                self.scoped_block(body)
            case n.If(cond, then, otherwise):
                self.condition(cond, "an If", s)
                self.scoped_block(then)
                self.scoped_block(otherwise)
            case n.Comment():
                pass
            case n.Allocate(v, count):
                self.integer(count, "an Allocate count", s)
                self.introduce(v, "local", s)
            case n.Grow(v, capacity, needed):
                self.mutable(v, "Grow", s)
                if not isinstance(v.dtype, n.Ptr):
                    self.fail(f"Grow of non-pointer {v.name!r}: {v.dtype}", s)
                self.mutable(capacity, "Grow capacity", s)
                if capacity.dtype != n.I64:
                    self.fail(f"Grow capacity {capacity.name!r} must be an i64 local, got "
                              f"{capacity.dtype}", s)
                self.same(needed, n.I64, "Grow needed", s)
            case n.Free(v):
                self.use(v, s)
                if not isinstance(v.dtype, n.Ptr):
                    self.fail(f"Free of non-pointer {v.name!r}: {v.dtype}", s)
            case _:
                self.fail(f"{type(s).__name__} is not a statement", s)

    def mutable(self, v: n.Var, what: str, node: n.Node) -> None:
        binding = self.use(v, node)
        if binding.kind == "param":
            self.fail(f"{what} changes parameter {v.name!r}", node)
        if binding.kind == "counter":
            self.fail(f"{what} changes the For counter {v.name!r}", node)

    def function(self, fn: n.Function) -> None:
        for p in fn.params:
            self.introduce(p.var, "param", p)
        self.scoped_block(fn.body)


def _shown(node: n.Node) -> str:
    lines = format_node(node).splitlines()
    if len(lines) > _MAX_SHOWN_LINES:
        lines = lines[:_MAX_SHOWN_LINES] + ["..."]
    return "\n".join("    " + line for line in lines)


def _is_number(t: n.DType) -> bool:
    return isinstance(t, n.Scalar) and t is not n.BOOL


def _is_float(t: n.DType) -> bool:
    return isinstance(t, n.Scalar) and t.is_float


def _is_complex(t: n.DType) -> bool:
    return isinstance(t, n.Scalar) and t.is_complex


def verify(fn: n.Function, after: str = "") -> None:
    """Raise IRVerifyError if ``fn`` breaks a scoping or typing rule of the IR.

    ``after`` names the step that produced ``fn`` and appears in the message.

    >>> from tensoralg.ir.build import function, declare, var, assign
    >>> from tensoralg.ir.nodes import I64
    >>> t = var("t", I64)
    >>> verify(function("ok", [], declare(t, 0), assign(t, 1)))
    >>> verify(function("bad", [], assign(t, 1)), after="simplify")
    Traceback (most recent call last):
    ...
    tensoralg.ir.verify.IRVerifyError: invalid IR after simplify: variable 't' is used before it is introduced
      in:
        t = 1;
    """
    if not isinstance(fn, n.Function):
        raise IRVerifyError(f"verify expects a Function, got {type(fn).__name__}")
    _Checker(after).function(fn)


__all__ = ["IRVerifyError", "verify"]


def _is_int(t: n.DType) -> bool:
    return isinstance(t, n.Scalar) and t.is_int
