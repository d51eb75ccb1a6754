"""Matrix Market and FROSTT I/O: round trips, the bundled real files, malformed files."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import scipy.io

from tensoralg import data
from tensoralg.errors import FormatError, UnsupportedError
from tensoralg.formats import CSR, Tensor, read, validate, write

RNG = np.random.default_rng(7)


def sparse_array(shape, dtype=np.float64):
    values = RNG.standard_normal(shape) if dtype == np.float64 else RNG.integers(-9, 9, shape)
    return np.where(RNG.random(shape) < 0.3, values, 0).astype(dtype)


@pytest.mark.parametrize("suffix", [".mtx", ".mtx.gz"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dd", "sd"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float32])
def test_mtx_round_trip(tmp_path, suffix, fmt, dtype) -> None:
    a = sparse_array((5, 7), dtype)
    path = tmp_path / f"m{suffix}"
    write(path, Tensor.from_numpy(a, fmt))
    t = read(path)
    validate(t)
    assert t.format == (CSR if fmt != "dd" else t.format)
    np.testing.assert_array_equal(t.to_numpy(), a)   # exact: values round-trip as text
    ref = scipy.io.mmread(str(path))
    np.testing.assert_array_equal(np.asarray(ref.todense() if hasattr(ref, "todense") else ref), a)


@pytest.mark.parametrize("suffix", [".tns", ".tns.gz"])
@pytest.mark.parametrize("shape", [(4,), (3, 4), (3, 4, 5), (2, 3, 2, 3)])
def test_tns_round_trip(tmp_path, suffix, shape) -> None:
    a = sparse_array(shape)
    a.flat[-1] = 1.25                                # so the largest index gives the shape
    path = tmp_path / f"t{suffix}"
    write(path, Tensor.from_numpy(a, "s" * len(shape)))
    t = read(path, format="s" * len(shape))
    np.testing.assert_array_equal(t.to_numpy(), a)
    assert read(path, shape=shape).shape == shape


def test_tns_integers_comments_and_shape(tmp_path) -> None:
    path = tmp_path / "c.tns"
    path.write_text("# a comment\n1 1 2 5\n\n  # another\n2 3 1 7\n2 3 1 1\n")
    t = read(path)
    assert t.shape == (2, 3, 2) and t.dtype == np.int64
    assert t.to_numpy()[1, 2, 0] == 8 and t.to_numpy()[0, 0, 1] == 5
    assert read(path, shape=(4, 4, 4)).shape == (4, 4, 4)
    with pytest.raises(FormatError, match="outside"):
        read(path, shape=(1, 3, 2))


def test_mtx_symmetric_skew_and_pattern(tmp_path) -> None:
    path = tmp_path / "s.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real symmetric\n% c\n3 3 3\n"
                    "1 1 2.0\n3 1 -1.5\n3 2 4\n")
    np.testing.assert_array_equal(read(path).to_numpy(), scipy.io.mmread(str(path)).toarray())
    path.write_text("%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 2\n"
                    "2 1 3\n3 2 -1\n")
    t = read(path)
    assert t.dtype == np.int64
    np.testing.assert_array_equal(t.to_numpy(), scipy.io.mmread(str(path)).toarray())
    path.write_text("%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1\n")
    assert read(path).to_numpy().tolist() == [[0, 0, 1], [1, 0, 0]]


def test_mtx_array_layouts(tmp_path) -> None:
    path = tmp_path / "a.mtx"
    path.write_text("%%MatrixMarket matrix array real general\n2 3\n1\n2\n3\n4\n5\n6\n")
    assert read(path).to_numpy().tolist() == [[1, 3, 5], [2, 4, 6]]
    path.write_text("%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n")
    np.testing.assert_array_equal(read(path).to_numpy(), scipy.io.mmread(str(path)))
    assert read(path, format="csr").format == CSR


@pytest.mark.parametrize("name", ["bcspwr10", "lp_ship04l", "ca-GrQc"])
def test_bundled_matrices_match_scipy(name) -> None:
    t = data.load(name)
    validate(t)
    ref = scipy.io.mmread(str(data.path(name))).tocsr()
    ref.sum_duplicates()
    assert t.shape == ref.shape and t.nnz == ref.nnz
    np.testing.assert_array_equal(t.levels[1].pos, ref.indptr)
    np.testing.assert_array_equal(t.levels[1].crd, ref.indices)
    np.testing.assert_array_equal(t.vals, ref.data)


def test_bundled_tensor() -> None:
    t = data.load("collegemsg")
    validate(t)
    assert t.shape == (1899, 1899, 194) and t.nnz == 33837 and t.dtype == np.int64
    assert int(t.vals.sum()) == 59835 and t.vals.min() == 1 and t.vals.max() == 54
    with gzip.open(data.path("collegemsg"), "rt") as f:
        table = np.loadtxt(f, dtype=np.int64)
    coords, vals = t.to_coords()
    order = np.lexsort(coords.T[::-1])
    expect = table[np.lexsort(table[:, 2::-1].T)]
    np.testing.assert_array_equal(coords[order], expect[:, :3] - 1)
    np.testing.assert_array_equal(vals[order], expect[:, 3])
    with pytest.raises(FormatError):
        data.load("nonexistent")


def test_large_file_reads_fast(tmp_path) -> None:
    import time
    n = 600_000
    rows, cols = RNG.integers(1, 5001, n), RNG.integers(1, 5001, n)
    body = "\n".join(f"{r} {c} {v!r}" for r, c, v in zip(rows.tolist(), cols.tolist(),
                                                          RNG.standard_normal(n).tolist()))
    path = tmp_path / "big.mtx"
    path.write_text(f"%%MatrixMarket matrix coordinate real general\n5000 5000 {n}\n{body}\n")
    start = time.perf_counter()
    t = read(path)
    assert time.perf_counter() - start < 5.0         # typically ~0.3 s
    assert t.shape == (5000, 5000)


MALFORMED = {
    "bad header": ("%%MatrixMarket tensor coordinate real general\n1 1 1\n1 1 1\n", "line 1"),
    "bad field": ("%%MatrixMarket matrix coordinate quaternion general\n1 1 1\n", "line 1"),
    "bad size": ("%%MatrixMarket matrix coordinate real general\n2 x 1\n1 1 1\n", "line 2"),
    "short line": ("%%MatrixMarket matrix coordinate real general\n% c\n2 2 2\n1 1 1.0\n2 2\n",
                   "line 5: expected 3 numbers, found 2"),
    "bad number": ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n2 2 abc\n",
                   "line 4: 'abc' is not a number"),
    "count": ("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1.0\n2 2 2\n",
              "announces 3 entries"),
    "range": ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.0\n3 1 2\n",
              "line 4: index .* outside"),
    "zero index": ("%%MatrixMarket matrix coordinate real general\n2 2 1\n0 1 1.0\n",
                   "line 3: index"),
    "fractional index": ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1.5 1 1\n",
                         "line 3: indices must be integers"),
    "integer field float": ("%%MatrixMarket matrix coordinate integer general\n2 2 1\n1 1 1.5\n",
                            "line 3: '1.5' is not an integer"),
    "no size": ("%%MatrixMarket matrix coordinate real general\n% only comments\n",
                "size line is missing"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_mtx_names_file_and_line(tmp_path, case) -> None:
    text, message = MALFORMED[case]
    path = tmp_path / "bad.mtx"
    path.write_text(text)
    with pytest.raises(FormatError, match=f"bad.mtx.*{message}"):
        read(path)


def test_malformed_tns_and_unsupported(tmp_path) -> None:
    path = tmp_path / "bad.tns"
    path.write_text("1 2 3.0\n1 2\n")
    with pytest.raises(FormatError, match="bad.tns: line 2"):
        read(path)
    path.write_text("# nothing\n")
    with pytest.raises(FormatError, match="shape="):
        read(path)
    assert read(path, shape=(2, 2)).nnz == 0
    gz = tmp_path / "bad.mtx.gz"
    gz.write_bytes(b"not gzip")
    with pytest.raises(FormatError, match="cannot read"):
        read(gz)
    with pytest.raises(UnsupportedError):
        read(tmp_path / "x.csv")
    with pytest.raises(UnsupportedError, match=".tns"):
        write(tmp_path / "v.mtx", Tensor.from_numpy(np.ones(3)))
    complex_mtx = tmp_path / "c.mtx"
    complex_mtx.write_text("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 2\n")
    with pytest.raises(UnsupportedError, match="complex"):
        read(complex_mtx)
