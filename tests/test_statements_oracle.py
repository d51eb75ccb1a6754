"""TACO-style statements through ``ta.compile(...)(**operands)`` against NumPy.

Every statement runs under several formats for each operand and for the output (named in
``formats`` like any operand), on both CPU backends.
"""
from __future__ import annotations

import itertools
import random
import warnings
import zlib

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import densify, random_dense

import tensoralg as ta

N, M, K = 6, 5, 4
CSC = ("ds", (1, 0))

RANK_FORMATS = {
    0: [None],
    1: ["d", "s"],
    2: ["dd", "ds", "ss", "uq", CSC, ("ss", (1, 0))],
}
OUT_FORMATS = {0: [None], 1: [None, "d", "s"], 2: [None, "dd", "ds", "ss", CSC]}


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# (statement, {operand: shape}, output rank, reference on dense arrays)
STATEMENTS = [
    ("A(i,j) = B(i,k) * C(k,j) + D(i,j)", {"B": (N, K), "C": (K, M), "D": (N, M)}, 2,
     lambda B, C, D: B @ C + D),
    ("y(i) = b(i) - A(i,j) * x(j)", {"b": (N,), "A": (N, M), "x": (M,)}, 1,
     lambda b, A, x: b - A @ x),
    ("a = B(i,j) * C(i,j)", {"B": (N, M), "C": (N, M)}, 0, lambda B, C: np.sum(B * C)),
    ("a(i) = alpha * sum(j, (B(i,j) + C(i,j)) * d(j))",
     {"alpha": (), "B": (N, M), "C": (N, M), "d": (M,)}, 1,
     lambda alpha, B, C, d: alpha * ((B + C) @ d)),
    ("C(i,j) = A(i,j) + B(i,j)", {"A": (N, M), "B": (N, M)}, 2, lambda A, B: A + B),
    ("C(i,j) = A(i,j) - B(i,j)", {"A": (N, M), "B": (N, M)}, 2, lambda A, B: A - B),
    ("C(i,j) = A(i,j) * B(i,j)", {"A": (N, M), "B": (N, M)}, 2, lambda A, B: A * B),
    ("C(i,j) = A(i,j) + B(i,j) * D(i,j)", {"A": (N, M), "B": (N, M), "D": (N, M)}, 2,
     lambda A, B, D: A + B * D),
    ("C(i,j) = A(i,j) / (abs(B(i,j)) + 1)", {"A": (N, M), "B": (N, M)}, 2,
     lambda A, B: A / (np.abs(B) + 1)),
    ("y(i) = A(i,j) / w(j)", {"A": (N, M), "w": (M,)}, 1, lambda A, w: (A / w).sum(axis=1)),
    ("y(i) = 2 * A(i,j) * x(j) + 0.5", {"A": (N, M), "x": (M,)}, 1,
     lambda A, x: 2 * (A @ x) + 0.5),
    ("C(i,j) = -A(i,j) + 3", {"A": (N, M)}, 2, lambda A: -A + 3),
    ("C(i,j) = -A(i,j)", {"A": (N, M)}, 2, lambda A: -A),
    ("C(i,j) = -(A(i,j) * B(i,j)) - -2.5 * A(i,j)", {"A": (N, M), "B": (N, M)}, 2,
     lambda A, B: -(A * B) + 2.5 * A),
    ("a = B(i,j) * B(i,j)", {"B": (N, M)}, 0, lambda B: np.sum(B * B)),
    ("C(i,j) = B(i,j) + B(i,j)", {"B": (N, M)}, 2, lambda B: 2 * B),
    ("y(i) = B(i,j) * B(i,j)", {"B": (N, M)}, 1, lambda B: (B * B).sum(axis=1)),
    ("C(i,j) = s * A(i,j)", {"s": (), "A": (N, M)}, 2, lambda s, A: s * A),
    ("a = s * t + 1", {"s": (), "t": ()}, 0, lambda s, t: s * t + 1),
    ("y(i) = relu(b(i) - 2 * A(i,j) * x(j))", {"b": (N,), "A": (N, M), "x": (M,)}, 1,
     lambda b, A, x: np.maximum(b - 2 * (A @ x), 0)),
    ("C(i,j) = A(i,j) * x(j) + y(i)", {"A": (N, M), "x": (M,), "y": (N,)}, 2,
     lambda A, x, y: A * x[None, :] + y[:, None]),
    ("C(i,k) = A(i,j) * B(j,k)", {"A": (N, M), "B": (M, K)}, 2, lambda A, B: A @ B),
    ("C(j,i) = A(i,j)", {"A": (N, M)}, 2, lambda A: A.T),
]

# elementwise functions: name -> (statement, reference); inputs chosen where defined
FUNCTION_CASES = [
    ("abs", "C(i,j) = abs(A(i,j))", lambda A, B: np.abs(A)),
    ("sqrt", "C(i,j) = sqrt(abs(A(i,j)) + 1)", lambda A, B: np.sqrt(np.abs(A) + 1)),
    ("sqrt0", "C(i,j) = sqrt(abs(A(i,j)))", lambda A, B: np.sqrt(np.abs(A))),
    ("log", "C(i,j) = log(abs(A(i,j)) + 1)", lambda A, B: np.log(np.abs(A) + 1)),
    ("pow", "C(i,j) = pow(A(i,j), 2)", lambda A, B: A ** 2),
    ("pow2", "C(i,j) = pow(abs(A(i,j)) + 1, B(i,j))", lambda A, B: (np.abs(A) + 1) ** B),
    ("max", "C(i,j) = max(A(i,j), B(i,j))", lambda A, B: np.maximum(A, B)),
    ("min", "C(i,j) = min(A(i,j), B(i,j))", lambda A, B: np.minimum(A, B)),
    ("relu", "C(i,j) = relu(A(i,j))", lambda A, B: np.maximum(A, 0)),
    ("tanh", "C(i,j) = tanh(A(i,j))", lambda A, B: np.tanh(A)),
    ("sin", "C(i,j) = sin(A(i,j))", lambda A, B: np.sin(A)),
    ("gt", "C(i,j) = gt(A(i,j), B(i,j))", lambda A, B: (A > B).astype(float)),
    ("lt", "C(i,j) = lt(A(i,j), B(i,j))", lambda A, B: (A < B).astype(float)),
    ("ne", "C(i,j) = ne(A(i,j), B(i,j))", lambda A, B: (A != B).astype(float)),
    # functions that do NOT map 0 to 0: the answer must be dense-correct
    ("exp", "C(i,j) = exp(A(i,j))", lambda A, B: np.exp(A)),
    ("sigmoid", "C(i,j) = sigmoid(A(i,j))", lambda A, B: sigmoid(A)),
    ("cos", "C(i,j) = cos(A(i,j))", lambda A, B: np.cos(A)),
    ("ge", "C(i,j) = ge(A(i,j), B(i,j))", lambda A, B: (A >= B).astype(float)),
    ("le", "C(i,j) = le(A(i,j), B(i,j))", lambda A, B: (A <= B).astype(float)),
    ("eq", "C(i,j) = eq(A(i,j), B(i,j))", lambda A, B: (A == B).astype(float)),
    ("cos-add", "C(i,j) = cos(A(i,j)) + B(i,j)", lambda A, B: np.cos(A) + B),
    ("sigmoid-mul", "C(i,j) = sigmoid(A(i,j)) * B(i,j)", lambda A, B: sigmoid(A) * B),
]


def _fmt_id(f) -> str:
    if f is None:
        return "-"
    if isinstance(f, tuple):
        return f"{f[0]}{''.join(map(str, f[1]))}"
    return str(f)


def _combos(names_ranks, out_rank, count, seed):
    choices = [RANK_FORMATS[r] for _, r in names_ranks] + [OUT_FORMATS[out_rank]]
    product = list(itertools.product(*choices))
    random.Random(seed).shuffle(product)
    sparse_first = tuple("s" * r if r else None for _, r in names_ranks) + (None,)
    picked = [sparse_first] + [c for c in product if c != sparse_first]
    return picked[:count]


def make_inputs(shapes: dict, fmts: dict, seed: int, density=0.4):
    rng = np.random.default_rng(seed)
    dense, given = {}, {}
    for name, shape in shapes.items():
        if shape == ():
            dense[name] = given[name] = 1.75
            continue
        a = random_dense(shape, 1.0 if name == "w" else density, rng)  # w: a divisor
        dense[name] = a
        fmt = fmts.get(name)
        given[name] = a if fmt is None else ta.Tensor.from_numpy(a, format=fmt)
    return dense, given


def run_statement(statement, shapes, fmts, out_fmt, backend, seed=0, density=0.4):
    formats = {n: f for n, f in fmts.items() if f is not None}
    out_name = statement.split("=")[0].split("(")[0].strip()
    if out_fmt is not None:
        formats[out_name] = out_fmt
    kernel = ta.compile(statement, formats=formats, backend=backend)
    dense, given = make_inputs(shapes, fmts, seed, density)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # operands come in the compiled format: no conversion
        got = kernel(**given)
    return got, dense


STATEMENT_CASES = []
for _n, (_stmt, _shapes, _orank, _ref) in enumerate(STATEMENTS):
    _ranks = [(k, len(v)) for k, v in _shapes.items()]
    for _backend, _count in (("llvm", 5), ("c", 2)):
        for _combo in _combos(_ranks, _orank, _count, _n * 7 + len(_backend)):
            _fmts = dict(zip(_shapes, _combo[:-1]))
            STATEMENT_CASES.append(pytest.param(
                _stmt, _shapes, _fmts, _combo[-1], _ref, _backend,
                id=f"{_stmt}-{'|'.join(map(_fmt_id, _combo))}-{_backend}"))


@pytest.mark.parametrize("statement, shapes, fmts, out_fmt, ref, backend", STATEMENT_CASES)
def test_statement_matches_numpy(statement, shapes, fmts, out_fmt, ref, backend):
    got, dense = run_statement(statement, shapes, fmts, out_fmt, backend,
                               seed=zlib.crc32(statement.encode()))
    want = ref(*[dense[n] for n in shapes])
    if np.ndim(want) == 0:
        assert np.ndim(got) == 0 and isinstance(got, (np.generic, float)), type(got)
    np.testing.assert_allclose(densify(got), want, rtol=1e-12, atol=1e-12,
                               err_msg=f"{statement} {fmts} out={out_fmt} {backend}")


FUNC_PARAMS = []
for _name, _stmt, _ref in FUNCTION_CASES:
    for _fa, _fb, _fo, _backend in [("ds", "ds", None, "llvm"), ("ss", "dd", "dd", "llvm"),
                                    ("uq", CSC, "ds", "c"), (CSC, "ds", CSC, "llvm"),
                                    ("dd", "ss", "ss", "c")]:
        FUNC_PARAMS.append(pytest.param(_stmt, _ref, _fa, _fb, _fo, _backend,
                                        id=f"{_name}-{_fmt_id(_fa)}|{_fmt_id(_fb)}|"
                                           f"{_fmt_id(_fo)}-{_backend}"))


@pytest.mark.parametrize("statement, ref, fa, fb, fout, backend", FUNC_PARAMS)
def test_elementwise_function(statement, ref, fa, fb, fout, backend):
    fmts = {"A": fa, "B": fb} if "B(" in statement else {"A": fa}
    shapes = {name: (N, M) for name in fmts}
    got, dense = run_statement(statement, shapes, fmts, fout, backend, seed=11, density=0.5)
    want = ref(dense["A"], dense.get("B"))
    np.testing.assert_allclose(densify(got), want, rtol=1e-12, atol=1e-12,
                               err_msg=f"{statement} A={fa} B={fb} out={fout}")


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("fa, fb", [("ds", "ds"), ("ss", "ds"), ("ds", "dd"), ("uq", "ss")],
                         ids=str)
def test_division_by_a_sparse_operand_is_dense_correct(fa, fb, backend):
    """A / B with zeros in B: numpy gives inf and nan there, and so must the kernel."""
    A = np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])
    B = np.array([[2.0, 4.0, 0.0], [0.0, 1.0, 0.0]])
    kernel = ta.compile("C(i,j) = A(i,j) / B(i,j)", formats={"A": fa, "B": fb},
                        backend=backend)
    got = densify(kernel(A=ta.Tensor.from_numpy(A, format=fa),
                         B=ta.Tensor.from_numpy(B, format=fb)))
    with np.errstate(divide="ignore", invalid="ignore"):
        want = A / B
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("fa", ["ds", "ss", "uq", CSC], ids=_fmt_id)
def test_function_not_preserving_zero_under_a_sum(fa, backend):
    x = np.arange(1.0, M + 1)
    k = ta.compile("y(i) = exp(A(i,j)) * x(j)", formats={"A": fa}, backend=backend)
    A = random_dense((N, M), 0.3, np.random.default_rng(8))
    got = k(A=ta.Tensor.from_numpy(A, format=fa), x=x)
    np.testing.assert_allclose(got, np.exp(A) @ x, rtol=1e-12)


def test_sparse_plus_sparse_different_patterns_into_csr():
    rng = np.random.default_rng(5)
    A = random_dense((30, 20), 0.1, rng)
    B = random_dense((30, 20), 0.1, rng)
    B[0] = 0
    A[1] = 0
    k = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": "ds", "C": "ds"})
    got = k(A=sp.csr_array(A), B=sp.csr_array(B))
    assert isinstance(got, sp.sparray) and got.format == "csr", type(got)
    np.testing.assert_allclose(got.toarray(), A + B, rtol=1e-12)
    expected_nnz = np.count_nonzero((A != 0) | (B != 0))
    assert got.nnz == expected_nnz


def test_scipy_operands_to_compiled_kernel():
    rng = np.random.default_rng(2)
    A = sp.random_array((7, 5), density=0.3, format="csr", random_state=3)
    x = rng.standard_normal(5)
    k = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "ds"})
    np.testing.assert_allclose(k(A=A, x=x), A @ x, rtol=1e-12)
    # a CSC operand for a CSR kernel is converted, with a warning the first time
    with pytest.warns(UserWarning, match="converting"):
        np.testing.assert_allclose(k(A=A.tocsc(), x=x), A @ x, rtol=1e-12)


@pytest.mark.parametrize("backend", ["llvm", "c"])
def test_sources_are_non_empty_strings(backend):
    k = ta.compile("A(i,j) = B(i,k) * C(k,j) + D(i,j)", formats={"B": "ds", "C": "ds"},
                   backend=backend)
    for lang in ("ir", "c", "llvm", "cuda"):
        text = k.source(lang)
        assert isinstance(text, str) and text.strip(), lang
    assert "for" in k.source("c")
    assert "define" in k.source("llvm")


def test_ir_notes_mention_the_conversion_of_csc_meeting_csr():
    k = ta.compile("C(i,j) = A(i,j) + B(i,j)", formats={"A": "ds", "B": CSC, "C": "ds"})
    ir = k.source("ir")
    assert "note" in ir and "convert" in ir.lower(), ir[:600]
    A = random_dense((5, 4), 0.4, np.random.default_rng(0))
    B = random_dense((5, 4), 0.4, np.random.default_rng(1))
    got = k(A=ta.Tensor.from_numpy(A, format="ds"), B=ta.Tensor.from_numpy(B, format=CSC))
    np.testing.assert_allclose(densify(got), A + B, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32"])
def test_compile_with_other_dtypes(dtype):
    rng = np.random.default_rng(4)
    A = random_dense((N, M), 0.5, rng, dtype=np.dtype(dtype))
    x = random_dense((M,), 1.0, rng, dtype=np.dtype(dtype))
    k = ta.compile("y(i) = A(i,j) * x(j) + A(i,j)", formats={"A": "ds"}, dtype=dtype)
    got = k(A=ta.Tensor.from_numpy(A, format="ds"), x=x)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, A @ x + A.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("fa", ["dd", "ds"])
def test_a_sum_used_several_times_is_computed_once_and_right(fa, backend):
    """ONNX's LeakyRelu of a product repeats the product's sum. Equal sums (up to the name
    of their index) become one temporary (concretize._Builder.temporary); different sums
    over one index name are renamed apart (``k``, ``k1``) and each runs over the extent of
    the modes it reads. Both used to fail with a KeyError on ``k1``."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 6)) * (rng.random((5, 6)) < 0.6)
    c = rng.standard_normal((5, 6))
    w = rng.standard_normal((6, 7))
    operand = sp.csr_array(a) if fa == "ds" else a
    p = a @ w
    leaky = ta.compile("Y(i,j) = where(gt(sum(k, A(i,k) * W(k,j)), 0), sum(k, A(i,k) * W(k,j)),"
                       " 0.1 * sum(q, A(i,q) * W(q,j)))", formats={"A": fa}, dtype="float64",
                       backend=backend)
    np.testing.assert_allclose(leaky(A=operand, W=w), np.where(p > 0, p, 0.1 * p))
    assert "_t0(" in leaky.source("ir") and "_t1" not in leaky.source("ir")   # one product
    mixed = ta.compile("Y(i,j) = where(gt(sum(k, A(i,k) * W(k,j)), 0), sum(k, C(i,k) * W(k,j)), 0)",
                       formats={"A": fa}, dtype="float64", backend=backend)
    np.testing.assert_allclose(mixed(A=operand, C=c, W=w), np.where(p > 0, c @ w, 0))


@pytest.mark.parametrize("backend", ["llvm", "c"])
@pytest.mark.parametrize("statement", ["y(i) = sum(j, A(i,j)) / d(i)", "y(i) = A(i,j) / d(i)",
                                       "y(i) = A(i,j) * x(j) / d(i)"])
def test_a_sum_divided_by_a_tensor_is_summed_first(statement, backend):
    """sum(j, A(i,j)) / d(i) used to become sum(j, A(i,j) / d(i)): NaN instead of -inf where
    d is 0, and a loop over every column of a CSR operand (an unstored zero over d is no
    zero). The sum is computed first, as written, over the stored entries only."""
    a = sp.csr_array(np.array([[1.0, -3.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    d, x = np.array([0.0, 2.0, 0.0]), np.array([1.0, 1.0, 5.0])
    k = ta.compile(statement, formats={"A": "csr"}, backend=backend)
    operands = {"A": a, "d": d} | ({"x": x} if "x(j)" in statement else {})
    with np.errstate(divide="ignore", invalid="ignore"):
        want = (a @ x if "x(j)" in statement else a.sum(axis=1)) / d
    np.testing.assert_array_equal(k(**operands), want)        # -inf, 1, nan
    assert "j < n_j" not in k.source("ir")
