"""Index notation: the AST, the einsum and TACO-style parsers, shape inference and printing.

>>> from tensoralg.notation import parse_einsum, parse_statement
>>> parse_einsum("ij,j->i", [2, 1]) == parse_statement("out(i) = A(i,j) * B(j)")
True
"""
from tensoralg.notation.ast import (
    FUNCTIONS,
    ZERO_PRESERVING,
    Access,
    Add,
    Assignment,
    Call,
    Div,
    Expr,
    Literal,
    Mul,
    Neg,
    Reduce,
    Statement,
    Sub,
    accesses,
    free_indices,
    index_vars,
    tensors,
)
from tensoralg.notation.canonical import canonical_text, rename_indices
from tensoralg.notation.infer import infer_dims, output_shape
from tensoralg.notation.parse_einsum import OUTPUT_NAME, operand_name, parse_einsum
from tensoralg.notation.parse_statement import parse_statement
from tensoralg.notation.printer import format_expr, format_statement
from tensoralg.notation.reductions import place_reductions

__all__ = [
    "FUNCTIONS",
    "ZERO_PRESERVING",
    "Access",
    "Add",
    "Assignment",
    "Call",
    "Div",
    "Expr",
    "Literal",
    "Mul",
    "Neg",
    "Reduce",
    "Statement",
    "Sub",
    "accesses",
    "free_indices",
    "index_vars",
    "tensors",
    "canonical_text",
    "rename_indices",
    "infer_dims",
    "output_shape",
    "OUTPUT_NAME",
    "operand_name",
    "parse_einsum",
    "parse_statement",
    "format_expr",
    "format_statement",
    "place_reductions",
]
