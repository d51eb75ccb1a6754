"""The imperative IR: frozen nodes, builders, the generic rewrite, printer, verifier, passes.

The nodes are re-exported here, so ``from tensoralg import ir`` then ``ir.For``, ``ir.for_``,
``ir.format_function``, ``ir.verify`` and ``ir.optimize`` is all lowering and codegen need.
"""
from .nodes import (
    ARITHMETIC_OPS, BINARY_OPS, BOOL, COMPARISON_OPS, F32, F64, I32, I64, LOGICAL_OPS, UNARY_OPS,
    Allocate, Assign, Binary, Block, Cast, Comment, Const, Declare, DType, Expr, For, Free,
    Function, Grow, If, IRError, Load, Node, Param, Ptr, Scalar, Select, Stmt, Store, Unary, Var,
    While, dtype_of,
)
from .build import (
    add, allocate, assign, binary, block, cast, comment, const, declare, div, eq, for_, free,
    function, ge, grow, gt, i64, if_, land, le, lnot, load, lor, lt, maximum, minimum, mod, mul,
    ne, neg, param, select, store, sub, unary, var, while_,
)
from .rewrite import children, rewrite, used_vars, walk
from .printer import format_expr, format_function, format_node, format_param
from .verify import IRVerifyError, verify
from .passes import (
    STEPS, IRLog, hoist_invariants, optimize, read_vars, remove_dead_code, simplify,
)

__all__ = [
    # nodes
    "ARITHMETIC_OPS", "BINARY_OPS", "BOOL", "COMPARISON_OPS", "F32", "F64", "I32", "I64",
    "LOGICAL_OPS", "UNARY_OPS", "Allocate", "Assign", "Binary", "Block", "Cast", "Comment",
    "Const", "Declare", "DType", "Expr", "For", "Free", "Function", "Grow", "If", "IRError",
    "Load", "Node", "Param", "Ptr", "Scalar", "Select", "Stmt", "Store", "Unary", "Var", "While",
    "dtype_of",
    # build
    "add", "allocate", "assign", "binary", "block", "cast", "comment", "const", "declare", "div",
    "eq", "for_", "free", "function", "ge", "grow", "gt", "i64", "if_", "land", "le", "lnot",
    "load", "lor", "lt", "maximum", "minimum", "mod", "mul", "ne", "neg", "param", "select",
    "store", "sub", "unary", "var", "while_",
    # traversal, printing, checking, passes
    "children", "rewrite", "used_vars", "walk",
    "format_expr", "format_function", "format_node", "format_param",
    "IRVerifyError", "verify",
    "STEPS", "IRLog", "hoist_invariants", "optimize", "read_vars", "remove_dead_code", "simplify",
]
