"""Golden IR and C for canonical kernels: a refactor must leave generated code unchanged.

Update on purpose only: ``python -m pytest tests/test_golden.py --update-golden``, then review
the diff of tests/golden/ like any other change.
"""
import re

import pytest

import tensoralg as ta

CANONICAL = {
    "spmv_csr": ("y(i) = A(i,j) * x(j)", {"A": "ds"}),
    "spmv_csc": ("y(i) = A(i,j) * x(j)", {"A": ("ds", (1, 0))}),
    "spmm_csr": ("C(i,k) = A(i,j) * B(j,k)", {"A": "ds"}),
    "sddmm": ("C(i,j) = A(i,j) * sum(k, X(i,k) * Y(k,j))", {"A": "ds", "C": "ds"}),
    "spgemm": ("C(i,j) = A(i,k) * B(k,j)", {"A": "ds", "B": "ds", "C": "ds"}),
    "add_csr": ("C(i,j) = A(i,j) + B(i,j)", {"A": "ds", "B": "ds", "C": "ds"}),
    "mul_dcsr": ("C(i,j) = A(i,j) * B(i,j)", {"A": "ss", "B": "ss", "C": "ss"}),
    "residual": ("y(i) = b(i) - A(i,j) * x(j)", {"A": "ds"}),
    "mttkrp": ("A(i,j) = B(i,k,l) * C(k,j) * D(l,j)", {"B": "sss", "A": "dd"}),
    "ttv_coo": ("A(i,j) = B(i,j,k) * c(k)", {"B": "uqq", "A": "dd"}),
    "trace": ("a = A(i,i)", {"A": "ds"}),
    "exp_dense_union": ("y(i) = exp(b(i)) + c(i)", {"b": "s", "c": "s"}),
}


def _stable(text: str) -> str:
    return re.sub(r"ta_[0-9a-f]{16}", "ta_KERNEL", text)


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    """Kernels compiled here, not found in the process's cache: statements equal up to index
    names share one kernel, whose notes name the indices of whichever was compiled first."""
    from tensoralg import api

    monkeypatch.setattr(api, "_cache", api.KernelCache(api.CompileOptions(cache_dir=None)))


@pytest.mark.parametrize("name", sorted(CANONICAL))
def test_ir_is_unchanged(name, golden):
    statement, formats = CANONICAL[name]
    golden.check(f"{name}.ir", _stable(ta.compile(statement, formats=formats).source("ir")))


@pytest.mark.parametrize("name", ["spmv_csr", "spgemm", "add_csr"])
def test_c_is_unchanged(name, golden):
    statement, formats = CANONICAL[name]
    golden.check(f"{name}.c", _stable(ta.compile(statement, formats=formats).source("c")))
