"""The compiled listing of a dense array's nonzeros (``runtime/nonzeros.py``), which makes the
pydata COO of a dense result: the same coordinates and values as ``np.nonzero``, in the same
order, for every rank, dtype and share of nonzeros."""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg.api import kernel_cache
from tensoralg.runtime.nonzeros import NonzeroLister

SHAPES = [(7,), (5, 6), (3, 4, 5), (2, 3, 2, 3), (0,), (4, 0), (2, 0, 3), (1, 1, 1)]
DTYPES = [np.float32, np.float64, np.int32, np.int64]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("share", [0.0, 0.05, 0.5, 1.0])
def test_as_numpy_lists_them(shape, dtype, share):
    rng = np.random.default_rng(len(shape))
    array = np.where(rng.random(shape) < share, rng.integers(1, 9, shape), 0).astype(dtype)
    assert NonzeroLister.takes(array)
    coords, values = kernel_cache().nonzeros.nonzeros(array)
    where = np.nonzero(array)
    assert coords.dtype == np.int64 and coords.shape == (len(shape), len(where[0]))
    np.testing.assert_array_equal(coords, np.stack(where) if where else coords)
    np.testing.assert_array_equal(values, array[where])
    assert values.dtype == array.dtype


def test_nan_counts_and_negative_zero_does_not():
    array = np.array([[np.nan, -0.0, 0.0], [1.0, -np.inf, 0.0]], np.float32)
    coords, values = kernel_cache().nonzeros.nonzeros(array)
    assert coords.tolist() == [[0, 1, 1], [0, 0, 1]]
    np.testing.assert_array_equal(values, [np.nan, 1.0, -np.inf])


def test_other_arrays_are_left_to_numpy():
    assert not NonzeroLister.takes(np.ones((3, 3))[:, ::2])           # not C-ordered
    assert not NonzeroLister.takes(np.ones(3, np.complex128))
    assert not NonzeroLister.takes(np.float64(2.0).reshape(()))       # 0-d
    assert not NonzeroLister.takes([1.0, 2.0])


def test_pydata_results_are_their_nonzeros():
    sparse = pytest.importorskip("sparse")
    rng = np.random.default_rng(3)
    tensor = sparse.random((20, 30, 10), density=0.02, random_state=rng)
    for subscripts, other in [("abc,a->bc", rng.standard_normal(20)),
                              ("abc,c->ab", rng.standard_normal(10)),
                              ("abc,ab->c", rng.standard_normal((20, 30)))]:
        got = ta.einsum(subscripts, tensor, other)
        expected = sparse.einsum(subscripts, tensor, other)
        assert type(got) is sparse.COO and got.shape == expected.shape
        np.testing.assert_allclose(got.todense(), expected.todense(), rtol=1e-12, atol=1e-12)
        dense = got.todense()
        np.testing.assert_array_equal(got.coords, np.stack(np.nonzero(dense)))
