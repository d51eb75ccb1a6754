"""Tensor storage: numpy round trips under every format, packing from coordinates, conversions."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensoralg.errors import FormatError, ShapeError, UnsupportedError
from tensoralg.formats import (
    COO,
    CSC,
    CSR,
    Format,
    LevelArrays,
    LevelKind,
    Tensor,
    dense,
    from_coords,
    validate,
)


def mode_orders(rank: int) -> list[tuple[int, ...]]:
    orders = {tuple(range(rank)), tuple(reversed(range(rank)))}
    if rank >= 3:
        orders.add(tuple(range(1, rank)) + (0,))
    return sorted(orders)


def all_formats(rank: int) -> list[Format]:
    """Every d/s level combination in a few mode orders, plus COO ('u' then singletons)."""
    found = [Format("".join(levels), order) for levels in itertools.product("ds", repeat=rank)
             for order in mode_orders(rank)]
    if rank >= 2:
        found += [Format("u" + "q" * (rank - 1), order) for order in mode_orders(rank)]
    return found


SHAPES = {
    0: [()],
    1: [(0,), (1,), (7,)],
    2: [(0, 3), (1, 1), (4, 5)],
    3: [(2, 0, 3), (1, 1, 1), (3, 4, 2)],
    4: [(2, 1, 3, 2), (2, 3, 2, 3)],
}
DENSITIES = ["zero", "one", "half", "full"]
FORMATS = [f for rank in range(5) for f in all_formats(rank)]


def random_array(shape: tuple[int, ...], density: str, rng: np.random.Generator,
                 dtype: type = np.float64) -> np.ndarray:
    a = rng.integers(1, 9, size=shape).astype(dtype)
    match density:
        case "zero":
            a[...] = 0
        case "one":
            flat = np.zeros(a.size, dtype=dtype)
            if a.size:
                flat[rng.integers(a.size)] = 3
            a = flat.reshape(shape)
        case "half":
            a = np.where(rng.random(shape) < 0.5, a, 0).astype(dtype)
    return a


def format_id(f: Format) -> str:
    return f"{f.spec}{''.join(map(str, f.order))}"


@pytest.mark.parametrize("fmt", FORMATS, ids=format_id)
def test_numpy_round_trip_every_format(fmt: Format) -> None:
    rng = np.random.default_rng(fmt.rank * 7 + len(fmt.spec))
    for shape, density in itertools.product(SHAPES[fmt.rank], DENSITIES):
        a = random_array(shape, density, rng)
        t = Tensor.from_numpy(a, format=fmt)
        validate(t)                                  # what we build is always valid storage
        assert t.format == fmt and t.shape == shape
        np.testing.assert_array_equal(t.to_numpy(), a, err_msg=f"{fmt} {shape} {density}")
        if not fmt.is_dense:
            # sparse last levels store exactly the nonzeros
            if fmt.levels[-1] is not LevelKind.DENSE:
                assert t.nnz == np.count_nonzero(a)
        coords, vals = t.to_coords()
        assert coords.dtype == np.int64 and coords.shape == (t.nnz, len(shape))
        again = Tensor.from_coords(coords.T, vals, shape, format=fmt)
        np.testing.assert_array_equal(again.to_numpy(), a)


@pytest.mark.parametrize("rank", range(5))
def test_convert_between_all_formats(rank: int) -> None:
    rng = np.random.default_rng(rank)
    shape = SHAPES[rank][-1]
    a = random_array(shape, "half", rng, np.int32)
    formats = all_formats(rank)
    source = Tensor.from_numpy(a, formats[-1])
    for fmt in formats:
        t = source.convert(fmt)
        validate(t)
        assert t.format == fmt and t.dtype == np.int32
        np.testing.assert_array_equal(t.to_numpy(), a)
        np.testing.assert_array_equal(t.convert(dense(rank)).to_numpy(), a)


def test_layout_of_csr_and_csc() -> None:
    a = np.array([[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 4, 0]], dtype=np.float64)
    csr = Tensor.from_numpy(a, CSR)
    assert csr.levels[0] == LevelArrays()
    assert csr.levels[1].pos.tolist() == [0, 2, 2, 4]
    assert csr.levels[1].crd.tolist() == [1, 3, 0, 2]
    assert csr.vals.tolist() == [1, 2, 3, 4]
    csc = Tensor.from_numpy(a, CSC)
    assert csc.levels[1].pos.tolist() == [0, 1, 2, 3, 4]
    assert csc.levels[1].crd.tolist() == [2, 0, 2, 0]
    assert csc.vals.tolist() == [3, 1, 4, 2]


def test_layout_of_dense_under_compressed_and_coo() -> None:
    a = np.array([[0, 0], [5, 0], [0, 6]], dtype=np.int64)
    sd = Tensor.from_numpy(a, "sd")
    assert sd.levels[0].pos.tolist() == [0, 2] and sd.levels[0].crd.tolist() == [1, 2]
    assert sd.vals.tolist() == [5, 0, 0, 6]          # the dense last level stores zeros
    coo = Tensor.from_numpy(a, COO)
    assert coo.levels[0].pos.tolist() == [0, 2]
    assert coo.levels[0].crd.tolist() == [1, 2] and coo.levels[1].crd.tolist() == [0, 1]
    assert coo.levels[1].pos is None


def test_order_zero_tensor() -> None:
    t = Tensor.from_numpy(np.float32(2.5))
    assert t.shape == () and t.levels == () and t.vals.tolist() == [2.5] and t.nnz == 1
    assert t.to_numpy().shape == () and t.dtype == np.float32
    s = Tensor.from_coords(np.zeros((2, 0), dtype=np.int64), [1.0, 2.0], ())
    assert s.to_numpy() == 3.0


def test_from_coords_sums_duplicates_in_any_order() -> None:
    coords = np.array([[2, 1, 0], [0, 0, 1], [2, 1, 0], [1, 3, 1], [0, 0, 1]])
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    expect = np.zeros((3, 4, 2))
    np.add.at(expect, tuple(coords.T), vals)
    for fmt in all_formats(3):
        t = Tensor.from_coords(coords.T, vals, (3, 4, 2), format=fmt)
        validate(t)
        np.testing.assert_array_equal(t.to_numpy(), expect, err_msg=str(fmt))
    assert Tensor.from_coords(coords.T, vals, (3, 4, 2), "sss").nnz == 3
    # (ndim, nnz) layout is read by the number of values
    t = Tensor.from_coords(coords.T, vals, (3, 4, 2), "sss")
    np.testing.assert_array_equal(t.to_numpy(), expect)


def test_from_coords_keeps_duplicates_only_under_nonunique_level() -> None:
    coords = [[1, 1], [0, 0], [1, 1]]
    t = Tensor.from_coords(coords, [1.0, 2.0, 3.0], (2, 2), COO, sum_duplicates=False)
    validate(t)
    assert t.nnz == 3 and t.to_numpy().tolist() == [[2.0, 0.0], [0.0, 4.0]]
    with pytest.raises(FormatError, match="duplicate"):
        Tensor.from_coords(coords, [1.0, 2.0, 3.0], (2, 2), CSR, sum_duplicates=False)


def test_from_coords_errors() -> None:
    with pytest.raises(ShapeError, match="outside"):
        from_coords([[0, 5]], [1.0], (2, 2), CSR)
    with pytest.raises(ShapeError, match="outside"):
        from_coords([[-1, 0]], [1.0], (2, 2), CSR)
    with pytest.raises(ShapeError, match="do not match"):
        from_coords([[0, 1, 1]], [1.0, 2.0], (2, 2), CSR)
    with pytest.raises(FormatError, match="integers"):
        from_coords([[0.5, 1]], [1.0], (2, 2), CSR)
    with pytest.raises(UnsupportedError, match="complex256|clongdouble"):
        from_coords([[0, 1]], np.array([1j], np.clongdouble), (2, 2), CSR)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2), st.integers(-5, 5)),
                max_size=25),
       st.sampled_from(all_formats(2)))
def test_from_coords_matches_dense_accumulation(entries, fmt) -> None:
    coords = np.array([e[:2] for e in entries], dtype=np.int64).reshape(-1, 2)
    vals = np.array([e[2] for e in entries], dtype=np.int64)
    expect = np.zeros((4, 3), dtype=np.int64)
    np.add.at(expect, tuple(coords.T), vals)
    t = Tensor.from_coords(np.asarray(coords).T, vals, (4, 3), fmt)
    validate(t)
    np.testing.assert_array_equal(t.to_numpy(), expect)


def test_index_dtype_default_and_explicit() -> None:
    a = np.eye(3)
    assert Tensor.from_numpy(a, CSR).index_dtype == np.int32
    t = Tensor.from_numpy(a, CSR, index_dtype=np.int64)
    assert t.index_dtype == np.int64 and t.levels[1].pos.dtype == np.int64
    assert t.convert("ss").index_dtype == np.int64     # conversion keeps the index dtype
    assert t.convert("ss", index_dtype=np.int32).index_dtype == np.int32
    with pytest.raises(UnsupportedError):
        Tensor.from_numpy(a, CSR, index_dtype=np.int16)


def test_convert_identity_is_same_object_and_astype() -> None:
    t = Tensor.from_numpy(np.eye(3), CSR)
    assert t.convert(CSR) is t and t.convert("csr") is t
    i = t.astype(np.int64)
    assert i.dtype == np.int64 and i.levels[1].pos is t.levels[1].pos
    assert t.astype(np.float64) is t
    with pytest.raises(UnsupportedError, match="float16"):
        t.astype(np.float16)


def test_dense_natural_order_shares_memory() -> None:
    a = np.arange(12.0).reshape(3, 4)
    t = Tensor.from_numpy(a)
    assert np.shares_memory(t.vals, a)
    b = a.T                                          # not contiguous: copied
    tb = Tensor.from_numpy(b)
    assert tb.vals.flags.c_contiguous and not np.shares_memory(tb.vals, a)
    np.testing.assert_array_equal(tb.to_numpy(), b)


def test_properties_and_printing() -> None:
    t = Tensor.from_numpy(np.eye(3, dtype=np.float32), CSR)
    assert (t.shape, t.ndim, t.nnz, t.dtype) == ((3, 3), 2, 3, np.float32)
    assert str(t) == "Tensor 3x3 csr (ds) float32 nnz=3"
    assert repr(t) == "Tensor(shape=(3, 3), format=Format('ds'), dtype=float32, nnz=3)"
    assert "scalar" in str(Tensor.from_numpy(np.float64(1)))


def test_raw_constructor_accepts_valid_arrays() -> None:
    t = Tensor((3, 4), "ds", [None, (np.array([0, 1, 1, 3]), np.array([2, 0, 3]))],
               np.array([1.0, 2.0, 3.0]))
    assert t.to_numpy().tolist() == [[0, 0, 1, 0], [0, 0, 0, 0], [2, 0, 0, 3]]
    assert t.format == CSR
