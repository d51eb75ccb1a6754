"""Validation of user-supplied storage: every corruption is a FormatError naming the part."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tensoralg.errors import FormatError
from tensoralg.formats import COO, CSR, LevelArrays, Tensor, validate


def csr_parts():
    """A valid 3x4 CSR: [[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 4, 0]]."""
    return dict(shape=(3, 4), format="ds",
                levels=[None, (np.array([0, 2, 2, 4]), np.array([1, 3, 0, 2]))],
                vals=np.array([1.0, 2.0, 3.0, 4.0]))


def coo_parts():
    """A valid 3x4 COO with the same entries."""
    return dict(shape=(3, 4), format="uq",
                levels=[(np.array([0, 4]), np.array([0, 0, 2, 2])),
                        (None, np.array([1, 3, 0, 2]))],
                vals=np.array([1.0, 2.0, 3.0, 4.0]))


def build(parts):
    return Tensor(parts["shape"], parts["format"], parts["levels"], parts["vals"])


def test_valid_parts_are_accepted() -> None:
    assert build(csr_parts()).to_numpy()[2, 2] == 4.0
    assert build(coo_parts()).to_numpy()[0, 3] == 2.0


def with_level(parts, k, pos="keep", crd="keep"):
    old = parts["levels"][k]
    old_pos, old_crd = (None, None) if old is None else old
    parts["levels"][k] = (old_pos if isinstance(pos, str) else pos,
                          old_crd if isinstance(crd, str) else crd)
    return parts


def corrupt(name):
    p = csr_parts()
    match name:
        case "pos not nondecreasing":
            return with_level(p, 1, pos=np.array([0, 2, 1, 4]))
        case "pos[0] not zero":
            return with_level(p, 1, pos=np.array([1, 2, 2, 4]))
        case "pos[-1] not len(crd)":
            return with_level(p, 1, pos=np.array([0, 2, 2, 3]))
        case "pos too short":
            return with_level(p, 1, pos=np.array([0, 2, 4]))
        case "crd out of range":
            return with_level(p, 1, crd=np.array([1, 4, 0, 2]))
        case "crd negative":
            return with_level(p, 1, crd=np.array([1, 3, -1, 2]))
        case "crd unsorted":
            return with_level(p, 1, crd=np.array([3, 1, 0, 2]))
        case "crd duplicate":
            return with_level(p, 1, crd=np.array([1, 1, 0, 2]))
        case "vals too long":
            p["vals"] = np.arange(5.0)
            return p
        case "vals dtype":
            p["vals"] = p["vals"].astype(np.float16)
            return p
        case "vals 2-D":
            p["vals"] = p["vals"].reshape(2, 2)
            return p
        case "index dtype":
            return with_level(p, 1, crd=np.array([1, 3, 0, 2], dtype=np.int16))
        case "mixed index dtypes":
            return with_level(p, 1, crd=np.array([1, 3, 0, 2], dtype=np.int32))
        case "crd 2-D":
            return with_level(p, 1, crd=np.array([[1, 3], [0, 2]]))
        case "noncontiguous crd":
            return with_level(p, 1, crd=np.array([1, 9, 3, 9, 0, 9, 2, 9])[::2])
        case "dense level with arrays":
            return with_level(p, 0, pos=np.array([0, 1]), crd=np.array([0]))
        case "missing crd":
            return with_level(p, 1, crd=None)
        case "too few levels":
            p["levels"] = p["levels"][:1]
            return p
    q = coo_parts()
    match name:
        case "singleton length":
            return with_level(q, 1, crd=np.array([1, 3, 0]))
        case "singleton with pos":
            return with_level(q, 1, pos=np.array([0, 4]))
        case "nonunique decreasing":
            return with_level(q, 0, crd=np.array([0, 2, 0, 2]))
        case "singleton unsorted in run":
            return with_level(q, 1, crd=np.array([3, 1, 0, 2]))
        case "singleton out of range":
            return with_level(q, 1, crd=np.array([1, 3, 0, 7]))
    raise AssertionError(name)


CORRUPTIONS = {
    "pos not nondecreasing": r"level 1 \(compressed\): pos is not nondecreasing at position 2",
    "pos[0] not zero": r"level 1 \(compressed\): pos\[0\] is 1",
    "pos[-1] not len(crd)": r"pos\[-1\] is 3 but crd has length 4",
    "pos too short": r"pos has length 3 but must have 4",
    "crd out of range": r"crd\[1\] = 4 is outside \[0, 4\)",
    "crd negative": r"crd\[2\] = -1 is outside",
    "crd unsorted": r"crd is not strictly increasing within its segment at position 1",
    "crd duplicate": r"crd is not strictly increasing within its segment at position 1",
    "vals too long": r"vals has length 5 but the last level has 4 positions",
    "vals dtype": r"vals has dtype float16",
    "vals 2-D": r"vals must be 1-D",
    "index dtype": r"crd has dtype int16",
    "mixed index dtypes": r"share one dtype",
    "crd 2-D": r"crd must be 1-D",
    "noncontiguous crd": r"not contiguous",
    "dense level with arrays": r"level 0 \(dense\) stores no arrays",
    "missing crd": r"level 1 \(compressed\): crd is missing",
    "too few levels": r"needs 2 levels",
    "singleton length": r"level 1 \(singleton\): crd has length 3 but the parent level has 4",
    "singleton with pos": r"level 1 \(singleton\) stores no pos",
    "nonunique decreasing": r"level 0 \(compressed non-unique\): crd is not nondecreasing",
    "singleton unsorted in run": r"level 1 \(singleton\): crd is not sorted .* position 1",
    "singleton out of range": r"level 1 \(singleton\): crd\[3\] = 7 is outside",
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corruption_is_a_format_error(name: str) -> None:
    with pytest.raises(FormatError, match=CORRUPTIONS[name]):
        build(corrupt(name))


def test_segments_boundaries_allow_decrease() -> None:
    # a decrease across a segment boundary (and across empty segments) is fine
    t = Tensor((4, 3), CSR, [None, (np.array([0, 2, 2, 2, 3]), np.array([1, 2, 0]))],
               np.ones(3))
    assert t.to_numpy()[3, 0] == 1.0


def test_validate_on_built_tensor_and_naming() -> None:
    t = Tensor.from_numpy(np.eye(4), COO)
    assert validate(t) is t
    bad = Tensor((2, 2), CSR, [None, (np.array([0, 1, 1]), np.array([5]))], np.ones(1),
                 check=False)
    with pytest.raises(FormatError, match=r"^operand A: level 1"):
        validate(bad, "operand A")


def test_wrong_shapes_and_formats() -> None:
    with pytest.raises(FormatError, match="shape"):
        Tensor((2, -1), "dd", [None, None], np.zeros(0))
    with pytest.raises(FormatError):
        Tensor((2, 2), "ds", [None, LevelArrays()], np.zeros(0))
    with pytest.raises(FormatError):
        Tensor((2, 2), "dx", [None, None], np.zeros(4))
    with pytest.raises(FormatError, match="LevelArrays"):
        Tensor((2, 2), "dd", [None, 3], np.zeros(4))


def test_validation_is_fast() -> None:
    n, per_row = 200_000, 10                         # 2M stored values
    rng = np.random.default_rng(0)
    crd = np.sort(rng.choice(1000, size=(n, per_row), replace=True), axis=1)
    crd = (crd + np.arange(per_row)).astype(np.int64).reshape(-1)   # strictly increasing
    pos = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    vals = np.ones(n * per_row)
    start = time.perf_counter()
    t = Tensor((n, 1100), CSR, [None, (pos, crd)], vals)
    elapsed = time.perf_counter() - start
    assert t.nnz == n * per_row and elapsed < 1.0    # generous; typically ~30 ms
