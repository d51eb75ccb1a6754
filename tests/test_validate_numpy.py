"""The NumPy check of small compressed levels gives the validation kernel's status exactly."""
from __future__ import annotations

import numpy as np
import pytest

from tensoralg.runtime import validate
from tensoralg.runtime.validate import StorageValidator, numpy_status


def corrupted_levels(seed: int, dtype: type):
    """Sound CSR levels and every kind of damage to them, small and random."""
    rng = np.random.default_rng(seed)
    rows, dim = int(rng.integers(0, 6)), int(rng.integers(1, 8))
    lengths = rng.integers(0, dim + 1, size=rows)
    crd = np.concatenate([np.sort(rng.choice(dim, size=n, replace=False)) for n in lengths]
                         or [np.zeros(0, np.int64)]).astype(dtype)
    pos = np.zeros(rows + 1, dtype=dtype)
    np.cumsum(lengths, out=pos[1:])
    yield pos, crd, dim
    if len(crd):
        for damage in ("out", "negative", "unsorted", "duplicate"):
            c = crd.copy()
            k = int(rng.integers(0, len(c)))
            if damage == "out":
                c[k] = dim + int(rng.integers(0, 3))
            elif damage == "negative":
                c[k] = -1
            elif damage == "unsorted":
                c = c[::-1].copy()
            else:
                c[k] = c[k - 1] if k else c[k]
            yield pos, c, dim
    for damage in ("start", "end", "reversed", "past"):
        p = pos.copy()
        if damage == "start":
            p[0] = 1
        elif damage == "end":
            p[-1] = p[-1] + 1
        elif damage == "reversed" and rows >= 2:
            p[1], p[2] = p[2] + 1, p[1]
        elif damage == "past":
            p[-1] = len(crd) + 3
        yield p, crd, dim


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("check_order", [True, False])
def test_numpy_status_matches_the_kernel(dtype, check_order, tmp_path):
    from tensoralg.codegen import DiskCache

    checker = StorageValidator(DiskCache(tmp_path))
    kernel = checker.kernels.get(np.dtype(dtype)).function
    status = np.zeros(1, dtype=np.int64)
    seen = set()
    for seed in range(200):
        for pos, crd, dim in corrupted_levels(seed, dtype):
            kernel(pos.ctypes.data, crd.ctypes.data, pos.shape[0] - 1, dim, crd.shape[0],
                   int(check_order), status.ctypes.data)
            expected = int(status[0])
            assert numpy_status(pos, crd, dim, check_order) == expected, (pos, crd, dim)
            seen.add(expected)
    assert len(seen) >= 5            # the damage reached most status codes


def test_a_new_validator_checks_a_small_level_without_loading_its_kernel(tmp_path):
    from tensoralg.codegen import DiskCache

    checker = StorageValidator(DiskCache(tmp_path))
    pos, crd = np.array([0, 2, 3], dtype=np.int32), np.array([0, 4, 1], dtype=np.int32)
    assert checker.compressed(pos, crd, 5) == validate.VALID
    assert checker.compressed(pos, np.array([4, 0, 1], dtype=np.int32), 5) == validate.UNSORTED
    assert (np.dtype(np.int32),) not in checker.kernels
    big = np.arange(validate.NUMPY_CHECK_MOST + 1, dtype=np.int32)
    assert checker.compressed(np.array([0, len(big)], dtype=np.int32), big, len(big)) == 0
    assert (np.dtype(np.int32),) in checker.kernels
