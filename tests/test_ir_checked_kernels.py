"""Kernels lowered and optimised with every step's IR verified, as ``TA_CHECK_IR`` and
``TA_DEBUG`` do: a variable introduced twice (the workspace flush of a sparse product once
declared its coordinate in two of its paths) fails the verifier, not only the C compiler."""
import pytest

import tensoralg as ta
from tensoralg.ir.passes.pipeline import optimize
from tensoralg.ir.verify import verify
from tensoralg.lower.lowerer import lower

CSR3 = {"A": "csr", "B": "csr", "C": "csr"}
STATEMENTS = [
    ("C(i,j) = A(i,k) * B(k,j)", CSR3, None),
    ("C(i,j) = A(i,k) * B(k,j)", CSR3, "parallelize(i)"),
    ("C(i,j) = A(i,j) + B(i,j)", CSR3, None),
    ("C(i,j) = A(i,j) + B(i,j)", CSR3, "parallelize(i)"),
    ("C(i,j) = A(i,j) * B(i,j)", CSR3, None),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csc", "B": "csc", "C": "csc"}, None),
    ("Z(i,j) = A(i,j) * X(i,k) * Y(k,j)", {"A": "csr", "Z": "csr"}, None),
    ("Y(i,k) = A(i,j) * B(j,k)", {"A": "csr"}, "parallelize(i)"),
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}, None),
    ("M(i,r) = T(i,j,k) * C(j,r) * D(k,r)", {"T": "sss"}, None),
]


@pytest.mark.parametrize("statement, formats, schedule", STATEMENTS)
def test_lowered_and_optimised_ir_verifies(statement, formats, schedule):
    kernel = ta.compile(statement, formats=formats, schedule=schedule)
    compiled = kernel._default
    lowered = lower(compiled.program, compiled.function.name, compiled.plan)
    verify(lowered, after="lowering")
    optimize(lowered, check=True)
