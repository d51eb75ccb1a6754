"""complex64 and complex128 through the compiled core (ir/nodes.py: complex ``+ - * /``), on
both CPU backends, against NumPy on random data whose imaginary parts are nonzero: dense and
sparse operands of every format, NumPy's type promotion with real and integer operands,
``dtype=``, ``out=`` and ``casting=``, empty dimensions, sums to scalars, and the result
types each input family gets for real values."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import tensoralg as ta
from tensoralg.ir import build as b
from tensoralg.ir.nodes import C64, C128, F32, F64, Ptr
from tensoralg.ir.verify import IRVerifyError, verify

BACKENDS = ["llvm", "c"]
COMPLEX = [np.complex64, np.complex128]
# 2-D formats of the first operand, by name: as `ta.Tensor.from_numpy` takes them.
FORMATS = {"dense": "dd", "csr": "ds", "csc": ("ds", (1, 0)), "coo": "uq", "dcsr": "ss"}
STATEMENTS = ["ij,j->i", "ij,jk->ik", "ij,ij->ij", "ij->", "ij->j", "ij,ij->", "ij->ji",
              "ij,ik,jk->ij"]
SHAPES = {"i": 6, "j": 5, "k": 4}


def _rtol(dtype) -> float:
    return 2e-5 if np.dtype(dtype) == np.complex64 else 1e-12


def _complex(shape, dtype, rng, density=1.0) -> np.ndarray:
    values = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    if density < 1.0:
        values = values * (rng.random(shape) < density)
    return values.astype(dtype)


def _dense(result) -> np.ndarray:
    if isinstance(result, ta.Tensor):
        return result.to_numpy()
    if sp.issparse(result):
        return result.toarray()
    if hasattr(result, "todense"):               # pydata sparse
        return np.asarray(result.todense())
    return np.asarray(result)


def _check(got, expected, dtype) -> None:
    dense = _dense(got)
    assert dense.dtype == expected.dtype, (dense.dtype, expected.dtype)
    np.testing.assert_allclose(dense, expected, rtol=_rtol(dtype), atol=_rtol(dtype) * 10)


def _operands(statement: str, dtype, rng, density: float = 0.5) -> list[np.ndarray]:
    terms = statement.split("->")[0].split(",")
    return [_complex(tuple(SHAPES[c] for c in term), dtype, rng, density if k == 0 else 1.0)
            for k, term in enumerate(terms)]


# -- every format, both backends ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("statement", STATEMENTS)
def test_formats_on_llvm_match_numpy(statement, fmt, dtype, rng):
    operands = _operands(statement, dtype, rng)
    first = ta.Tensor.from_numpy(operands[0], format=FORMATS[fmt])
    got = ta.einsum(statement, first, *operands[1:], backend="llvm")
    _check(got, np.einsum(statement, *operands), dtype)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("fmt", ["dense", "csr", "dcsr"])
@pytest.mark.parametrize("statement", ["ij,j->i", "ij,jk->ik", "ij,ij->ij", "ij->"])
def test_formats_on_c_match_numpy(statement, fmt, dtype, rng):
    operands = _operands(statement, dtype, rng)
    first = ta.Tensor.from_numpy(operands[0], format=FORMATS[fmt])
    got = ta.einsum(statement, first, *operands[1:], backend="c")
    _check(got, np.einsum(statement, *operands), dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("statement", ["ijk,k->ij", "ijk,jk->i", "ijk->", "ijk,ijk->ijk"])
def test_csf_tensors(statement, backend, rng):
    t = _complex((4, 5, 3), np.complex128, rng, density=0.3)
    others = [_complex((5, 3) if term == "jk" else (3,) if term == "k" else (4, 5, 3),
                       np.complex128, rng) for term in statement.split("->")[0].split(",")[1:]]
    got = ta.einsum(statement, ta.Tensor.from_numpy(t, format="sss"), *others, backend=backend)
    _check(got, np.einsum(statement, t, *others), np.complex128)


# -- sparse kernels on scipy operands: results in scipy's family ---------------------------------

def _scipy(shape, density, dtype, rng, seed) -> sp.csr_array:
    a = sp.random_array(shape, density=density, format="csr", random_state=seed, dtype=np.float64)
    a.data = a.data + 1j * rng.standard_normal(a.nnz)
    return a.astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", COMPLEX)
def test_scipy_sparse_kernels(backend, dtype, rng):
    a = _scipy((40, 30), 0.1, dtype, rng, 1)
    c = _scipy((30, 20), 0.1, dtype, rng, 2)
    x, y = _complex((30,), dtype, rng), _complex((30, 3), dtype, rng)
    u, v = _complex((40, 5), dtype, rng), _complex((30, 5), dtype, rng)
    spmv = ta.einsum("ij,j->i", a, x, backend=backend)
    assert type(spmv) is np.ndarray
    _check(spmv, a @ x, dtype)
    _check(ta.einsum("ij,jk->ik", a, y, backend=backend), a @ y, dtype)          # SpMM
    spgemm = ta.einsum("ij,jk->ik", a, c, backend=backend)
    assert isinstance(spgemm, sp.csr_array)
    _check(spgemm, (a @ c).toarray(), dtype)
    sddmm = ta.einsum("ij,ik,jk->ij", a, u, v, backend=backend)
    assert isinstance(sddmm, sp.sparray) and sp.issparse(sddmm)
    _check(sddmm, a.toarray() * (u @ v.T), dtype)
    product = ta.einsum("ij,ij->ij", a, a, backend=backend)
    assert sp.issparse(product)
    _check(product, a.toarray() ** 2, dtype)
    transposed = ta.einsum("ij->ji", a, backend=backend)
    assert sp.issparse(transposed)
    _check(transposed, a.toarray().T, dtype)


def test_scipy_matrix_in_gives_matrix_out(rng):
    a = sp.csr_matrix(_scipy((8, 8), 0.3, np.complex128, rng, 3))
    got = ta.einsum("ij,jk->ik", a, a)
    assert isinstance(got, sp.csr_matrix) and got.dtype == np.complex128
    _check(got, (a @ a).toarray(), np.complex128)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_add_subtract_divide_negate(backend, rng):
    a = _scipy((20, 15), 0.2, np.complex128, rng, 4)
    c = _scipy((20, 15), 0.2, np.complex128, rng, 5)
    add = ta.compile("C(i,j) = A(i,j) - B(i,j) + A(i,j)", formats={"A": "csr", "B": "csr"},
                     dtype="complex128", backend=backend)
    _check(add(A=a, B=c), (2 * a - c).toarray(), np.complex128)
    d, e = _complex((20, 15), np.complex128, rng), _complex((15,), np.complex128, rng)
    quotient = ta.compile("y(i) = -(A(i,j) * x(j)) / D(i,j)", formats={"A": "csr"},
                          dtype="complex128", backend=backend)
    _check(quotient(A=a, x=e, D=d), (-(a.toarray() * e) / d).sum(axis=1), np.complex128)


@pytest.mark.parametrize("backend", BACKENDS)
def test_division_edge_cases_follow_numpy(backend):
    z = np.array([1 + 1j, 0, np.inf, 1e300 + 1e300j, 3 - 2j, 1e-300j, np.nan], np.complex128)
    w = np.array([0, 0, 1 + 1j, 1e-300 + 1e300j, 1e-200 - 4e-200j, 1e300 + 1e-300j, 1j],
                 np.complex128)
    kernel = ta.compile("y(i) = A(i) / B(i)", dtype="complex128", backend=backend)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(kernel(A=z, B=w), z / w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pydata_and_tensor_operands(backend, rng):
    sparse = pytest.importorskip("sparse")
    dense = _complex((6, 5), np.complex128, rng, density=0.4)
    p = sparse.COO.from_numpy(dense)
    x = _complex((5,), np.complex128, rng)
    _check(ta.einsum("ij,j->i", p, x, backend=backend), dense @ x, np.complex128)
    product = ta.einsum("ij,ij->ij", p, p, backend=backend)
    assert isinstance(product, sparse.COO)
    _check(product, dense * dense, np.complex128)
    t = ta.Tensor.from_numpy(dense, format="ds")
    assert t.dtype == np.complex128
    square = ta.einsum("ij,ij->ij", t, t, backend=backend)
    assert isinstance(square, ta.Tensor)
    _check(square, dense * dense, np.complex128)


# -- promotion, dtype=, out=, casting= ------------------------------------------------------------

PROMOTIONS = [(np.complex64, np.float64), (np.complex64, np.float32), (np.int32, np.complex64),
              (np.int64, np.complex128), (np.int8, np.complex64), (np.bool_, np.complex128),
              (np.float16, np.complex64), (np.uint64, np.complex64), (np.complex64, np.complex128)]


def _typed(shape, dtype, rng) -> np.ndarray:
    if np.dtype(dtype).kind == "c":
        return _complex(shape, dtype, rng)
    if np.dtype(dtype).kind in "biu":
        return rng.integers(0, 2 if dtype is np.bool_ else 5, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("left, right", PROMOTIONS)
def test_mixed_operands_promote_as_numpy(left, right, backend, rng):
    a, c = _typed((4, 3), left, rng), _typed((3, 5), right, rng)
    for statement, operands in [("ij,jk->ik", (a, c)), ("ij,ji->", (a, c[:, :4]))]:
        expected = np.einsum(statement, *operands)
        got = ta.einsum(statement, *operands, backend=backend)
        assert np.asarray(got).dtype == expected.dtype
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-3 if np.float16 in
                                   (left, right) else 2e-5)


def test_real_operands_with_complex_dtype(rng):
    a, x = rng.standard_normal((4, 3)), rng.integers(0, 5, 3)
    got = ta.einsum("ij,j->i", a, x, dtype=np.complex128)
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, np.einsum("ij,j->i", a, x, dtype=np.complex128))
    got = ta.einsum("ij,j->i", a.astype(np.float32), x.astype(np.int8), dtype="complex64")
    assert got.dtype == np.complex64


def test_complex_operand_into_real_dtype_follows_casting(rng):
    a, x = _complex((4, 3), np.complex128, rng), rng.standard_normal(3)
    with pytest.raises(ta.CastingError, match="complex128"):
        ta.einsum("ij,j->i", a, x, dtype=np.float64)
    with pytest.raises(TypeError):                       # as NumPy's
        np.einsum("ij,j->i", a, x, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # NumPy's ComplexWarning
        got = ta.einsum("ij,j->i", a, x, dtype=np.float64, casting="unsafe")
        expected = np.einsum("ij,j->i", a, x, dtype=np.float64, casting="unsafe")
    assert got.dtype == expected.dtype == np.float64
    np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_complex_dtype(backend, rng):
    a, c = _complex((4, 3), np.complex128, rng), _complex((3, 5), np.complex64, rng)
    out = np.zeros((4, 5), np.complex128)
    assert ta.einsum("ij,jk->ik", a, c, out=out, backend=backend) is out
    np.testing.assert_allclose(out, a @ c)
    narrow = np.zeros((4, 5), np.complex64)
    with pytest.raises(ta.CastingError):                 # complex128 -> complex64 is not safe
        ta.einsum("ij,jk->ik", a, c, out=narrow, backend=backend)
    ta.einsum("ij,jk->ik", a, c, out=narrow, casting="same_kind", backend=backend)
    np.testing.assert_allclose(narrow, (a @ c).astype(np.complex64), rtol=2e-5)
    # real operands into a complex out=: safe, as in NumPy
    real = rng.standard_normal((4, 3))
    into = np.zeros(4, np.complex64)
    ta.einsum("ij->i", real.astype(np.float32), out=into, backend=backend)
    np.testing.assert_allclose(into, real.astype(np.float32).sum(axis=1), rtol=2e-5)


def test_complex_result_into_real_out_is_refused(rng):
    a = _complex((4, 3), np.complex128, rng)
    out = np.zeros(4)
    with pytest.raises(ta.CastingError, match="float64"):
        ta.einsum("ij->i", a, out=out)
    with pytest.raises(TypeError):
        np.einsum("ij->i", a, out=out)
    with pytest.raises(TypeError):                       # CastingError is NumPy's TypeError
        ta.einsum("ij->i", a, out=out, casting="safe")
    assert not out.any()


# -- scalars and empty dimensions -----------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", COMPLEX)
def test_sums_to_scalars(backend, dtype, rng):
    a = _complex((7, 9), dtype, rng)
    for statement, operands in [("ij->", (a,)), ("ij,ij->", (a, a)), ("ii", (a[:7, :7],)),
                                ("i,i", (a[0], a[1]))]:
        got, expected = ta.einsum(statement, *operands, backend=backend), \
            np.einsum(statement, *operands)
        assert isinstance(got, np.generic) and got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=_rtol(dtype) * 10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_dimensions(backend, rng):
    for statement, shapes in [("ij,jk->ik", [(0, 3), (3, 2)]), ("ij,jk->ik", [(2, 0), (0, 3)]),
                              ("ij->", [(0, 4)]), ("ij,j->i", [(3, 0), (0,)])]:
        operands = [_complex(s, np.complex128, rng) for s in shapes]
        got = ta.einsum(statement, *operands, backend=backend)
        expected = np.einsum(statement, *operands)
        assert np.asarray(got).dtype == expected.dtype
        np.testing.assert_array_equal(np.asarray(got), expected)
    empty = sp.csr_array((4, 0), dtype=np.complex64)
    got = ta.einsum("ij,j->i", empty, np.zeros(0, np.complex64), backend=backend)
    assert got.dtype == np.complex64 and not got.any() and got.shape == (4,)


def test_split_over_threads_with_partial_sums(two_threads, rng):
    a = _complex((3000, 40), np.complex128, rng)
    for statement in ("ij->j", "ij->", "ij,ij->i"):
        operands = (a,) if statement.count(",") == 0 else (a, a)
        np.testing.assert_allclose(ta.einsum(statement, *operands), np.einsum(statement, *operands),
                                   rtol=1e-12)


# -- what complex values cannot do ---------------------------------------------------------------

def test_functions_on_complex_values_are_refused():
    with pytest.raises(ta.UnsupportedError, match="max is not defined on complex"):
        ta.compile("y(i) = max(A(i,j), 0)", dtype="complex128")
    with pytest.raises(ta.UnsupportedError, match="exp is not defined on complex"):
        ta.compile("y(i) = exp(A(i))", dtype="complex64")


def test_cuda_source_refuses_complex():
    kernel = ta.compile("y(i) = A(i,j) * x(j)", formats={"A": "csr"}, dtype="complex64")
    with pytest.raises(ta.UnsupportedError, match="cuda backend"):
        kernel.source("cuda")
    assert "float _Complex" in kernel.source("c") and "ta_mul_c64" in kernel.source("c")


def test_ir_types_complex_values():
    x = b.var("x", Ptr(C128))
    with pytest.raises(IRVerifyError, match="not defined on complex"):
        verify(b.function("k", [b.param(x, "x")], b.store(x, 0, b.maximum(b.load(x, 0), 1j))))
    fn = b.function("k", [b.param(x, "x")], b.store(x, 0, b.mul(b.load(x, 0), 2j)))
    verify(fn)
    assert "c128(0.0, 2.0)" in str(fn)
    assert C64.part is F32 and C128.part is F64 and C128.is_complex and not C128.is_float


# -- property ------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(statement=st.sampled_from(["ij,j->i", "ij,jk->ik", "ij,ij->ij", "ij->", "ij->j",
                                  "ij,ik,jk->ij", "ij,ij->"]),
       fmt=st.sampled_from(list(FORMATS)),
       dtype=st.sampled_from(COMPLEX + [np.float64]),
       other=st.sampled_from(COMPLEX + [np.float32, np.int32]),
       density=st.sampled_from([0.0, 0.3, 1.0]),
       seed=st.integers(0, 2**16))
def test_property_complex_statements(statement, fmt, dtype, other, density, seed):
    rng = np.random.default_rng(seed)
    terms = statement.split("->")[0].split(",")
    operands = [_typed(tuple(SHAPES[c] for c in term), dtype if k == 0 else other, rng)
                for k, term in enumerate(terms)]
    operands[0] = operands[0] * (rng.random(operands[0].shape) < density)
    first = ta.Tensor.from_numpy(operands[0], format=FORMATS[fmt])
    got = ta.einsum(statement, first, *operands[1:])
    expected = np.einsum(statement, *operands)
    dense = _dense(got)
    assert dense.dtype == expected.dtype
    np.testing.assert_allclose(dense, expected, rtol=1e-4, atol=1e-4)


# -- dense products: BLAS (zgemm) by default, never the generated GEMM ----------------------------

@pytest.mark.parametrize("dtype", COMPLEX)
def test_dense_complex_products_take_blas(dtype, rng):
    a, c = _complex((70, 80), dtype, rng), _complex((80, 90), dtype, rng)   # above GEMM_MIN_FMAS
    for statement, operands in [("ij,jk->ik", (a, c)), ("ij,kj->ik", (a, c.T.copy()))]:
        _check(ta.einsum(statement, *operands), np.einsum(statement, *operands), dtype)
    blas = ta.compile("C(i,j) = A(i,k) * B(k,j)", dtype=np.dtype(dtype).name,
                      schedule="gemm(blas)")
    _check(blas(A=a, B=c), a @ c, dtype)
    loops = ta.compile("C(i,j) = A(i,k) * B(k,j)", dtype=np.dtype(dtype).name,
                       schedule="gemm(loops)")
    _check(loops(A=a, B=c), a @ c, dtype)
    with pytest.raises(ta.UnsupportedError, match="generated GEMM takes float32 and float64"):
        ta.compile("C(i,j) = A(i,k) * B(k,j)", dtype=np.dtype(dtype).name,
                   schedule="gemm(generated)")


# -- ta.Tensor operators and dtype= casts ---------------------------------------------------------

def test_tensor_operators_on_complex_values(rng):
    dense = _complex((6, 5), np.complex128, rng, density=0.5)
    t, u = ta.Tensor.from_numpy(dense, format="ds"), ta.Tensor.from_numpy(2 * dense, format="ds")
    x = _complex((5,), np.complex128, rng)
    np.testing.assert_allclose((t + u).to_numpy(), 3 * dense)
    np.testing.assert_allclose((t - u).to_numpy(), -dense)
    np.testing.assert_allclose((t * 2j).to_numpy(), 2j * dense)
    np.testing.assert_allclose(np.asarray(t @ x), dense @ x)
    np.testing.assert_allclose(np.asarray(t.sum(axis=0)), dense.sum(axis=0))
    assert t.astype(np.complex64).dtype == np.complex64
    with pytest.raises(ta.UnsupportedError, match="abs is not defined on complex"):
        np.abs(t)


@pytest.mark.parametrize("dtype", ["f8", "c16", "c8", "u1", "i4"])
def test_object_operand_is_cast_to_dtype_under_unsafe_casting(dtype):
    a = np.arange(9, dtype=object)
    got = ta.einsum("i->", a, dtype=dtype, casting="unsafe")
    expected = np.einsum("i->", a, dtype=dtype, casting="unsafe")
    assert got == expected and got.dtype == expected.dtype
    with pytest.raises(ta.CastingError, match="object"):
        ta.einsum("i->", a, dtype=dtype)                 # casting="safe": NumPy's TypeError
    with pytest.raises(ta.UnsupportedError, match="dtype object"):
        ta.einsum("i->", a)


# -- pydata inputs keep pydata's format, as sparse.einsum does --------------------------------------

@pytest.mark.parametrize("formats, expected", [
    (("dok",), "dok"), (("gcxs",), "gcxs"), (("dok", "dense"), "dok"),
    (("dense", "gcxs"), "gcxs"), (("dense", "dok", "gcxs"), "coo")])
def test_pydata_result_format_follows_sparse_einsum(formats, expected, rng):
    sparse = pytest.importorskip("sparse")
    inputs = [_complex((2, 2, 2), np.complex128, rng) if f == "dense" else
              sparse.random((2, 2, 2), density=0.5, format=f, random_state=3).astype(complex) * 1j
              for f in formats]
    statement = {1: "abc->bc", 2: "abc,cda->abd", 3: "abc,cad,dea->abe"}[len(inputs)]
    got = ta.einsum(statement, *inputs)
    assert got.format == expected              # sparse.einsum's own (its suite checks it)
    dense = [x if isinstance(x, np.ndarray) else x.todense() for x in inputs]
    _check(got, np.einsum(statement, *dense), np.complex128)
    first = next(x for x in inputs if not isinstance(x, np.ndarray))
    assert type(ta.einsum("abc->", first)).__name__ == "COO"           # 0-d: COO, as pydata's
