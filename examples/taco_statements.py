"""TACO-style statements with ta.compile: sums, literals, scalars, functions, sparse outputs.

    python examples/taco_statements.py
"""
import numpy as np
import scipy.sparse as sp

import tensoralg as ta

rng = np.random.default_rng(0)
A = sp.random_array((400, 300), density=0.02, format="csr", random_state=1)
B = sp.random_array((300, 200), density=0.02, format="csr", random_state=2)
x = rng.standard_normal(300)
b = rng.standard_normal(400)
M = A.toarray()

# (statement, formats, operands, NumPy reference)
EXAMPLES = [
    ("y(i) = A(i,j) * x(j)", {"A": "csr"}, dict(A=A, x=x), lambda: M @ x),
    ("y(i) = 0.5 * A(i,j) * x(j) + b(i)", {"A": "csr"}, dict(A=A, x=x, b=b),
     lambda: 0.5 * M @ x + b),
    ("y(i) = relu(A(i,j) * x(j) + b(i))", {"A": "csr"}, dict(A=A, x=x, b=b),
     lambda: np.maximum(M @ x + b, 0)),
    ("y(i) = sum(j, A(i,j)) * b(i)", {"A": "csr"}, dict(A=A, b=b), lambda: M.sum(1) * b),
    # j's only use is inside A(i,j): the sum goes there, then exp is applied
    ("y(i) = exp(A(i,j))", {"A": "csr"}, dict(A=A), lambda: np.exp(M.sum(1))),
    # exp(0) = 1, so this sum runs over every j, stored or not
    ("y(i) = sum(j, exp(A(i,j)))", {"A": "csr"}, dict(A=A), lambda: np.exp(M).sum(1)),
    ("a = A(i,j) * A(i,j)", {"A": "csr"}, dict(A=A), lambda: (M * M).sum()),
    ("C(i,j) = A(i,k) * B(k,j)", {"A": "csr", "B": "csr", "C": "csr"}, dict(A=A, B=B),
     lambda: M @ B.toarray()),
    ("C(i,j) = A(i,j) + 2 * A(i,j)", {"A": "csr"}, dict(A=A), lambda: 3 * M),
]


def dense(value):
    return value.toarray() if sp.issparse(value) else np.asarray(value)


def main():
    for statement, formats, operands, reference in EXAMPLES:
        kernel = ta.compile(statement, formats=formats)
        got = kernel(**operands)
        error = np.abs(dense(got) - reference()).max()
        status = "OK" if error < 1e-9 else "FAIL"
        print(f"{status:4}  {statement:38}  -> {type(got).__name__:10}  err {error:.1e}")
        assert status == "OK", statement
    print("\nThe SpGEMM's IR, with its dense workspace:\n")
    spgemm = ta.compile("C(i,j) = A(i,k) * B(k,j)", formats={"A": "csr", "B": "csr"})
    print("\n".join(spgemm.source("ir").splitlines()[:30]) + "\n  ...")


if __name__ == "__main__":
    main()
