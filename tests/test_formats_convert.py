"""Conversions with scipy.sparse and pydata sparse; bind and input_family."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import sparse

from tensoralg.errors import FormatError, ShapeError, UnsupportedError
from tensoralg.formats import COO, CSC, CSR, Format, Tensor, bind, input_family, validate

RNG = np.random.default_rng(42)
DENSE = np.where(RNG.random((6, 9)) < 0.3, RNG.integers(1, 9, (6, 9)), 0).astype(np.float64)

SCIPY_KINDS = ["csr", "csc", "coo", "dia", "bsr", "lil", "dok"]


def scipy_of(kind: str, family: str, a: np.ndarray = DENSE):
    cls = getattr(sp, f"{kind}_{family}")
    return cls(a)


@pytest.mark.parametrize("family", ["array", "matrix"])
@pytest.mark.parametrize("kind", SCIPY_KINDS)
def test_every_scipy_class(kind: str, family: str) -> None:
    m = scipy_of(kind, family)
    t = Tensor.from_scipy(m)
    validate(t)
    np.testing.assert_array_equal(t.to_numpy(), DENSE)
    expected = {"csr": CSR, "csc": CSC, "coo": COO}.get(kind, CSR)
    assert t.format == expected
    assert input_family(m) == f"scipy_{family}"
    for fmt in ("ss", "csc", "coo", "dd", Format("sd", (1, 0))):
        np.testing.assert_array_equal(Tensor.from_scipy(m, format=fmt).to_numpy(), DENSE)


@pytest.mark.parametrize("cls", [sp.csr_array, sp.csr_matrix, sp.csc_array])
def test_canonical_compressed_input_is_zero_copy(cls) -> None:
    m = cls(DENSE)
    t = Tensor.from_scipy(m)
    level = t.levels[1]
    assert np.shares_memory(level.pos, m.indptr)
    assert np.shares_memory(level.crd, m.indices)
    assert np.shares_memory(t.vals, m.data)


def test_int64_indices_are_kept() -> None:
    m = sp.csr_array(DENSE)
    m.indptr, m.indices = m.indptr.astype(np.int64), m.indices.astype(np.int64)
    t = Tensor.from_scipy(m)
    assert t.index_dtype == np.int64 and np.shares_memory(t.levels[1].crd, m.indices)
    rows, cols = (c.astype(np.int64) for c in np.nonzero(DENSE))
    coo = sp.coo_array((DENSE[rows, cols], (rows, cols)), shape=DENSE.shape)
    assert coo.coords[0].dtype == np.int64
    assert Tensor.from_scipy(coo).index_dtype == np.int64
    np.testing.assert_array_equal(Tensor.from_scipy(coo).to_numpy(), DENSE)


def unsorted_duplicate_csr() -> sp.csr_array:
    # row 0: columns 3, 1, 3 (unsorted, duplicate); row 1 empty; row 2: columns 2, 0
    indptr = np.array([0, 3, 3, 5], dtype=np.int32)
    indices = np.array([3, 1, 3, 2, 0], dtype=np.int32)
    data = np.array([1.0, 2.0, 4.0, 5.0, 6.0])
    return sp.csr_array((data, indices, indptr), shape=(3, 4))


@pytest.mark.parametrize("transpose", [False, True])
def test_noncanonical_input_is_canonicalized_on_a_copy(transpose: bool) -> None:
    m = unsorted_duplicate_csr()
    if transpose:                                    # the same arrays read as CSC
        m = sp.csc_array((m.data, m.indices, m.indptr), shape=(4, 3))
    before = [a.copy() for a in (m.indptr, m.indices, m.data)]
    t = Tensor.from_scipy(m)
    validate(t)
    expect = np.array([[0, 2, 0, 5], [0, 0, 0, 0], [6, 0, 5, 0]], dtype=np.float64)
    np.testing.assert_array_equal(t.to_numpy(), expect.T if transpose else expect)
    for old, new in zip(before, (m.indptr, m.indices, m.data)):
        np.testing.assert_array_equal(old, new)      # the user's matrix is untouched
    assert not np.shares_memory(t.levels[1].crd, m.indices)


def test_duplicate_coo_input_untouched() -> None:
    row, col = np.array([2, 0, 2, 1]), np.array([1, 0, 1, 3])
    data = np.array([1.0, 2.0, 3.0, 4.0])
    m = sp.coo_array((data, (row, col)), shape=(3, 4))
    t = Tensor.from_scipy(m)
    assert t.nnz == 3 and t.to_numpy()[2, 1] == 4.0
    assert m.nnz == 4 and m.row.tolist() == [2, 0, 2, 1]



@pytest.mark.parametrize("seed", range(12))
def test_scipy_coo_binds_as_pack_lays_out_coordinates(seed: int) -> None:
    """A 2-D scipy COO goes through scipy's own sort and duplicate sum; the tensor is the one
    ``pack`` makes from the same coordinates (unsorted, duplicated, explicit zeros, empty
    rows, int32 or int64 coordinates), and the input is left as it was."""
    from tensoralg.formats.format import resolve_format
    from tensoralg.formats.pack import pack

    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 30)), int(rng.integers(1, 30))
    count = int(rng.integers(1, 120))
    coordinate = (np.int32, np.int64)[seed % 2]
    row = rng.integers(0, rows, count).astype(coordinate)
    col = rng.integers(0, cols, count).astype(coordinate)
    dtype = (np.float64, np.float32, np.int64, np.complex128)[seed % 4]
    data = (rng.integers(-3, 4, count)).astype(dtype)      # zeros and exact duplicate sums
    m = (sp.coo_array, sp.coo_matrix)[seed % 3 == 0]((data, (row, col)), shape=(rows, cols))
    before = (m.row.copy(), m.col.copy(), m.data.copy())
    got = Tensor.from_scipy(m)
    validate(got)
    want = pack(np.stack([row, col], axis=1).astype(np.int64), data, (rows, cols),
                resolve_format("coo", 2, "test"), index_dtype=np.result_type(m.row, m.col))
    assert got.format == want.format and got.vals.dtype == want.vals.dtype
    np.testing.assert_array_equal(got.vals, want.vals)
    for mine, theirs in zip(got.levels, want.levels):
        np.testing.assert_array_equal(mine.crd, theirs.crd)
        assert mine.crd.dtype == theirs.crd.dtype
    np.testing.assert_array_equal(got.levels[0].pos, want.levels[0].pos)
    np.testing.assert_array_equal(got.to_numpy(), m.toarray())
    for old, now in zip(before, (m.row, m.col, m.data)):
        np.testing.assert_array_equal(old, now)

def test_malformed_scipy_input_is_a_format_error() -> None:
    m = sp.csr_array((np.ones(2), np.array([0, 7]), np.array([0, 1, 2])), shape=(2, 3),
                     copy=False)
    with pytest.raises(FormatError):
        Tensor.from_scipy(m)


def test_unsupported_scipy_dtypes() -> None:
    with pytest.raises(UnsupportedError, match="bool"):
        Tensor.from_scipy(sp.csr_array(DENSE > 0))
    with pytest.raises(UnsupportedError, match="complex256|clongdouble"):
        Tensor.from_scipy(sp.csr_array(DENSE.astype(np.clongdouble)))


@pytest.mark.parametrize("kind", ["array", "matrix"])
def test_to_scipy(kind: str) -> None:
    csr = Tensor.from_numpy(DENSE, CSR).to_scipy(kind)
    assert csr.format == "csr" and isinstance(csr, sp.sparray) == (kind == "array")
    np.testing.assert_array_equal(csr.toarray(), DENSE)
    csc = Tensor.from_numpy(DENSE, CSC)
    out = csc.to_scipy(kind)
    assert out.format == "csc" and np.shares_memory(out.indices, csc.levels[1].crd)
    for fmt in ("dd", "ss", "coo", Format("sd", (1, 0))):
        out = Tensor.from_numpy(DENSE, fmt).to_scipy(kind)
        expected = "coo" if fmt == "coo" else "csr"   # COO storage stays COO
        assert out.format == expected and out.nnz == np.count_nonzero(DENSE)
        np.testing.assert_array_equal(out.toarray(), DENSE)
    with pytest.raises(ShapeError):
        Tensor.from_numpy(np.ones(3), "s").to_scipy()


def test_scipy_round_trip_shares_csr_arrays() -> None:
    m = sp.csr_array(DENSE)
    back = Tensor.from_scipy(m).to_scipy()
    assert np.shares_memory(back.indices, m.indices) and np.shares_memory(back.data, m.data)


def test_pydata_sparse_round_trips() -> None:
    a = np.where(RNG.random((3, 4, 5)) < 0.3, 1.5, 0.0)
    s = sparse.COO.from_numpy(a)
    t = Tensor.from_sparse(s)
    validate(t)
    assert t.format.spec == "uqq" and input_family(s) == "sparse"
    np.testing.assert_array_equal(t.to_numpy(), a)
    g = sparse.GCXS.from_numpy(a)
    np.testing.assert_array_equal(Tensor.from_sparse(g, format="sss").to_numpy(), a)
    for fmt in ("sss", "dsd", "coo", "ddd"):
        back = Tensor.from_numpy(a, fmt).to_sparse()
        assert isinstance(back, sparse.COO) and back.nnz == np.count_nonzero(a)
        np.testing.assert_array_equal(back.todense(), a)
    with pytest.raises(UnsupportedError, match="fill value"):
        Tensor.from_sparse(sparse.COO.from_numpy(a, fill_value=1.0))


def test_bind_numpy_and_scalars() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = bind(a)
    assert t.format.spec == "dd" and t.dtype == np.int32
    assert bind(a, "csr").nnz == 5
    assert bind(3).dtype == np.int64 and bind(2.5).to_numpy() == 2.5
    assert bind(np.float32(1)).dtype == np.float32 and bind(np.float32(1)).shape == ()
    strided = np.arange(20.0).reshape(4, 5)[:, ::2]
    bound = bind(strided)
    assert bound.vals.flags.c_contiguous
    np.testing.assert_array_equal(bound.to_numpy(), strided)


@pytest.mark.parametrize("value", [np.ones(2, np.float16), np.ones(2, np.clongdouble),
                                   np.array(["a"]), np.array([object()]), np.ones(2, bool),
                                   np.ones(2, np.uint8), np.clongdouble(1j), True])
def test_bind_unsupported_dtypes_name_the_dtype(value) -> None:
    with pytest.raises(UnsupportedError, match="dtype"):
        bind(value)


def test_bind_other_inputs() -> None:
    t = Tensor.from_numpy(np.eye(2))
    assert bind(t) is t and bind(t, "csr").format == CSR
    assert bind(sp.csr_matrix(DENSE)).format == CSR
    assert bind(sparse.COO.from_numpy(DENSE)).format == COO
    with pytest.raises(UnsupportedError, match="list"):
        bind([1.0, 2.0])


def test_input_family() -> None:
    assert input_family(np.ones(2)) == "numpy"
    assert input_family(1) == "scalar" and input_family(np.int64(1)) == "scalar"
    assert input_family(sp.csr_array(DENSE)) == "scipy_array"
    assert input_family(sp.coo_matrix(DENSE)) == "scipy_matrix"
    assert input_family(Tensor.from_numpy(np.ones(1))) == "tensor"
    with pytest.raises(UnsupportedError):
        input_family("abc")


@pytest.mark.parametrize("kind", ["array", "matrix"])
@pytest.mark.parametrize("csc", [False, True])
def test_to_scipy_hands_kernel_arrays_over_as_the_constructor_would(kind, csc):
    from tensoralg.formats import convert

    rng = np.random.default_rng(4)
    dense = rng.random((6, 9)) * (rng.random((6, 9)) < 0.3)
    fmt = CSC if csc else CSR
    for index in (np.int32, np.int64):
        tensor = Tensor.from_numpy(dense, format=fmt, index_dtype=index)
        got = tensor.to_scipy(kind)
        name = "csc" if csc else "csr"
        cls = getattr(sp, f"{name}_{kind}")
        level = tensor.levels[1]
        want = cls((tensor.vals, level.crd, level.pos), shape=tensor.shape, copy=False)
        assert type(got) is cls and got.shape == want.shape and got.nnz == want.nnz
        np.testing.assert_array_equal(got.toarray(), dense)
        assert got.indices.dtype == want.indices.dtype and got.indptr.dtype == want.indptr.dtype
        # int32 arrays are handed over as they are; the constructor narrows int64 ones.
        assert (got.indices is level.crd) == (index is np.int32)
        assert got.has_canonical_format and (got @ np.ones(9)).shape == (6,)
    assert convert._TEMPLATES and all(t is not None for t in convert._TEMPLATES.values())
