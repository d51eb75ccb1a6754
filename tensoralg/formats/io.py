"""Reading and writing Matrix Market (``.mtx``) and FROSTT (``.tns``) files, gzipped or not.

The body of a file is checked and parsed with whole-array numpy operations (token counts per
line from the bytes, then one ``numpy.fromstring``), so a file of a million entries loads in
well under a second; only a malformed file falls back to a per-line scan, to name the line.

>>> import tempfile, os, numpy as np
>>> from tensoralg.formats.tensor import Tensor
>>> path = os.path.join(tempfile.mkdtemp(), "a.mtx")
>>> write(path, Tensor.from_numpy(np.array([[0.0, 1.5], [2.0, 0.0]]), "csr"))
>>> read(path).to_numpy().tolist()
[[0.0, 1.5], [2.0, 0.0]]
"""
from __future__ import annotations

import gzip
import os
import warnings
from typing import Any, Sequence

import numpy as np

from tensoralg.errors import FormatError, UnsupportedError
from tensoralg.formats.format import CSR, resolve_format
from tensoralg.formats.level import LevelKind
from tensoralg.formats.pack import from_coords, pack, pack_dense, to_coords
from tensoralg.formats.tensor import Tensor

_SPACE = np.zeros(256, dtype=bool)
_SPACE[[9, 10, 11, 12, 13, 32]] = True


def read(path: str | os.PathLike, format: Any = None,
         shape: Sequence[int] | None = None) -> Tensor:
    """Read a ``.mtx``/``.mtx.gz`` or ``.tns``/``.tns.gz`` file into a tensor.

    Matrix Market coordinate files become CSR (symmetric and skew-symmetric files expanded),
    array files dense; FROSTT files become COO, with the shape taken from the largest index
    in each mode unless ``shape`` is given. ``format`` converts the result.

    >>> from tensoralg.data import path
    >>> read(path("lp_ship04l")).shape
    (402, 2166)
    """
    name = os.fspath(path)
    kind = _kind(name)
    try:
        with (gzip.open(name, "rb") if name.endswith(".gz") else open(name, "rb")) as f:
            data = f.read()
    except (OSError, EOFError) as err:
        raise FormatError(f"{name}: cannot read: {err}") from None
    if kind == "mtx":
        tensor = _read_mtx(data, name, shape)
    else:
        tensor = _read_tns(data, name, shape)
    return tensor if format is None else tensor.convert(format)


def write(path: str | os.PathLike, tensor: Tensor) -> None:
    """Write ``tensor`` as ``.mtx`` (2-D; array format when all levels are dense) or ``.tns``
    (any order >= 1), gzipped when the name ends in ``.gz``. Values are written exactly
    (shortest round-trip text); explicit zeros are written, dense padding is not.

    >>> import tempfile, os, numpy as np
    >>> write(os.path.join(tempfile.mkdtemp(), "v.tns"), Tensor.from_numpy(np.ones(3), "s"))
    """
    name = os.fspath(path)
    text = _mtx_text(tensor, name) if _kind(name) == "mtx" else _tns_text(tensor, name)
    data = text.encode("ascii")
    with (gzip.open(name, "wb", compresslevel=6) if name.endswith(".gz")
          else open(name, "wb")) as f:
        f.write(data)


def _kind(name: str) -> str:
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(".mtx"):
        return "mtx"
    if base.endswith(".tns"):
        return "tns"
    raise UnsupportedError(f"{name}: unknown file type; tensoralg reads and writes .mtx, "
                           f".mtx.gz, .tns and .tns.gz")


# -- Matrix Market -----------------------------------------------------------------------------

def _read_mtx(data: bytes, name: str, shape: Sequence[int] | None) -> Tensor:
    header, line_no, offset = _next_line(data, 0, 0)
    words = header.lower().split()
    if len(words) != 5 or words[0] != "%%matrixmarket" or words[1] != "matrix":
        raise FormatError(f"{name}: line 1: expected '%%MatrixMarket matrix <format> <field> "
                          f"<symmetry>', got {header[:80]!r}")
    layout, field, symmetry = words[2:]
    if layout not in ("coordinate", "array"):
        raise FormatError(f"{name}: line 1: unknown layout {layout!r}")
    if field in ("complex",):
        raise UnsupportedError(f"{name}: complex matrices are not supported")
    if field not in ("real", "double", "integer", "pattern"):
        raise FormatError(f"{name}: line 1: unknown field {field!r}")
    if symmetry == "hermitian":
        symmetry = "symmetric"                       # a real Hermitian matrix is symmetric
    if symmetry not in ("general", "symmetric", "skew-symmetric"):
        raise FormatError(f"{name}: line 1: unknown symmetry {symmetry!r}")
    size_line = "%"
    while size_line.strip() == "" or size_line.lstrip().startswith("%"):
        if offset >= len(data):
            raise FormatError(f"{name}: the size line is missing")
        size_line, line_no, offset = _next_line(data, offset, line_no)
    sizes = _ints(size_line, 2 if layout == "array" else 3, name, line_no)
    dims = (sizes[0], sizes[1])
    if shape is not None and tuple(shape) != dims:
        raise FormatError(f"{name}: the file says shape {dims}, not {tuple(shape)}")
    dtype = np.int64 if field == "integer" else np.float64
    if layout == "array":
        return _mtx_array(data[offset:], line_no + 1, dims, dtype, symmetry, name)
    nnz = sizes[2]
    ncols = 2 if field == "pattern" else 3
    table, lines = _parse_body(data[offset:], line_no + 1, ncols, np.float64 if ncols == 3
                               and dtype is np.float64 else np.int64, name, "%")
    if table.shape[0] != nnz:
        raise FormatError(f"{name}: the size line (line {line_no}) announces {nnz} entries but "
                          f"the file holds {table.shape[0]}")
    coords = _one_based(table[:, :2], lines, dims, name)
    vals = np.ones(nnz, dtype=np.float64) if ncols == 2 else table[:, 2].astype(dtype)
    if symmetry != "general":
        off = coords[:, 0] != coords[:, 1]
        mirror = coords[off][:, ::-1]
        coords = np.concatenate([coords, mirror])
        vals = np.concatenate([vals, -vals[off] if symmetry == "skew-symmetric" else vals[off]])
    return from_coords(coords.T, vals, dims, CSR)  # (ndim, nnz): never ambiguous


def _mtx_array(body: bytes, first_line: int, dims: tuple[int, int], dtype: Any, symmetry: str,
               name: str) -> Tensor:
    table, _ = _parse_body(body, first_line, 1, dtype, name, "%")
    m, n = dims
    values = table[:, 0]
    if symmetry == "general":
        expect = m * n
    else:
        if m != n:
            raise FormatError(f"{name}: a {symmetry} matrix must be square, not {m}x{n}")
        expect = n * (n + 1) // 2 if symmetry == "symmetric" else n * (n - 1) // 2
    if values.shape[0] != expect:
        raise FormatError(f"{name}: expected {expect} values for a {m}x{n} {symmetry} array, "
                          f"found {values.shape[0]}")
    if symmetry == "general":
        return pack_dense(np.ascontiguousarray(values.reshape(n, m).T), resolve_format(
            "dense", 2))
    out = np.zeros((n, n), dtype=dtype)
    rows, cols = np.tril_indices(n, 0 if symmetry == "symmetric" else -1)
    order = np.lexsort((rows, cols))                 # column-major lower triangle
    rows, cols = rows[order], cols[order]
    out[rows, cols] = values
    out[cols, rows] = values if symmetry == "symmetric" else -values
    return pack_dense(out, resolve_format("dense", 2))


def _mtx_text(tensor: Tensor, name: str) -> str:
    if tensor.ndim != 2:
        raise UnsupportedError(f"{name}: Matrix Market holds 2-D tensors; this one is "
                               f"{tensor.ndim}-D, write it as .tns")
    field = "integer" if tensor.dtype.kind == "i" else "real"
    m, n = tensor.shape
    if tensor.format.is_dense:
        values = tensor.to_numpy().T.reshape(-1).tolist()
        return (f"%%MatrixMarket matrix array {field} general\n% written by tensoralg\n"
                f"{m} {n}\n" + "".join(f"{v}\n" for v in values))
    coords, vals = _stored(tensor)
    rows, cols = (coords[:, 0] + 1).tolist(), (coords[:, 1] + 1).tolist()
    body = "".join(f"{i} {j} {v}\n" for i, j, v in zip(rows, cols, vals.tolist()))
    return (f"%%MatrixMarket matrix coordinate {field} general\n% written by tensoralg\n"
            f"{m} {n} {len(rows)}\n" + body)


# -- FROSTT ------------------------------------------------------------------------------------

def _read_tns(data: bytes, name: str, shape: Sequence[int] | None) -> Tensor:
    ncols = _tns_columns(data, name)
    if ncols is None:
        if shape is None:
            raise FormatError(f"{name}: the file holds no entries; pass shape= to read it")
        dims = tuple(int(s) for s in shape)
        return pack(np.zeros((0, len(dims)), dtype=np.int64), np.zeros(0), dims,
                    resolve_format("coo", len(dims)))
    if ncols < 2:
        raise FormatError(f"{name}: line 1: a .tns line needs indices and a value")
    table, lines = _parse_body(data, 1, ncols, None, name, "#")
    order = ncols - 1
    if shape is None:
        dims = tuple(int(d) for d in table[:, :order].max(axis=0)) if table.shape[0] else None
        if dims is None:
            raise FormatError(f"{name}: the file holds no entries; pass shape= to read it")
    else:
        dims = tuple(int(s) for s in shape)
        if len(dims) != order:
            raise FormatError(f"{name}: lines hold {order} indices but shape {dims} has "
                              f"{len(dims)} modes")
    coords = _one_based(table[:, :order], lines, dims, name)
    return pack(coords, table[:, order].copy(), dims, resolve_format("coo", order))


def _tns_columns(data: bytes, name: str) -> int | None:
    """The number of tokens on the first data line (None for a file without data)."""
    offset, line_no = 0, 0
    while offset < len(data):
        line, line_no, offset = _next_line(data, offset, line_no)
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return len(stripped.split())
    return None


def _tns_text(tensor: Tensor, name: str) -> str:
    if tensor.ndim == 0:
        raise UnsupportedError(f"{name}: .tns files hold tensors of order 1 or more")
    coords, vals = _stored(tensor)
    columns = [(coords[:, k] + 1).tolist() for k in range(tensor.ndim)]
    return "".join(" ".join(map(str, row)) + "\n" for row in zip(*columns, vals.tolist()))


# -- shared helpers ----------------------------------------------------------------------------

def _stored(tensor: Tensor) -> tuple[np.ndarray, np.ndarray]:
    coords, vals = to_coords(tensor)
    if tensor.format.levels and tensor.format.levels[-1] is LevelKind.DENSE:
        keep = vals != 0
        coords, vals = coords[keep], vals[keep]
    return coords, vals


def _next_line(data: bytes, offset: int, line_no: int) -> tuple[str, int, int]:
    end = data.find(b"\n", offset)
    end = len(data) if end < 0 else end
    try:
        text = data[offset:end].decode("ascii")
    except UnicodeDecodeError:
        text = data[offset:end].decode("latin-1")
    return text, line_no + 1, end + 1


def _ints(line: str, count: int, name: str, line_no: int) -> list[int]:
    words = line.split()
    try:
        values = [int(w) for w in words]
    except ValueError:
        values = []
    if len(values) != count or any(v < 0 for v in values):
        raise FormatError(f"{name}: line {line_no}: expected {count} non-negative integers, "
                          f"got {line.strip()[:80]!r}")
    return values


def _parse_body(body: bytes, first_line: int, ncols: int, dtype: Any, name: str,
                comment: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse lines of ``ncols`` numbers; return the table and each row's line number.

    Blank lines and lines starting with ``comment`` are skipped. ``dtype=None`` reads int64
    when no number has a decimal point, exponent, nan or inf, else float64. The token count of every line
    is found from the bytes at once, so a short or long line is named without a Python loop.
    """
    buf = np.frombuffer(body, dtype=np.uint8)
    if buf.size == 0:
        return np.zeros((0, ncols), dtype=dtype), np.zeros(0, dtype=np.int64)
    space = _SPACE[buf]
    starts = np.flatnonzero(~space & np.concatenate(([True], space[:-1])))
    newlines = np.flatnonzero(buf == 10)
    token_line = np.searchsorted(newlines, starts)   # 0-based line of every token
    first_of_line = np.concatenate(([True], token_line[1:] != token_line[:-1]))
    commented = token_line[first_of_line & (buf[starts] == ord(comment))]
    if commented.size:
        buf = _blank_lines(buf, newlines, commented)
        token_line = token_line[~np.isin(token_line, commented)]
    counts = np.bincount(token_line, minlength=newlines.size + 1)
    bad = np.flatnonzero((counts != 0) & (counts != ncols))
    if bad.size:
        raise FormatError(f"{name}: line {first_line + bad[0]}: expected {ncols} numbers, found "
                          f"{counts[bad[0]]}")
    lines = np.flatnonzero(counts) + first_line
    if dtype is None:
        floaty = np.isin(buf, np.frombuffer(b".eEnNiI", dtype=np.uint8)).any()
        dtype = np.float64 if floaty else np.int64
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            flat = np.fromstring(buf.tobytes().decode("latin-1"), dtype=dtype, sep=" ")
        except (ValueError, DeprecationWarning):
            flat = None
    if flat is None or flat.shape[0] != lines.shape[0] * ncols:
        _name_bad_token(body, first_line, dtype, name, comment)
    return flat.reshape(-1, ncols), lines


def _blank_lines(buf: np.ndarray, newlines: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """A copy of ``buf`` with the given (0-based) lines overwritten by spaces."""
    line_start = np.concatenate(([0], newlines + 1))[lines]
    line_end = np.concatenate((newlines, [buf.size]))[lines]
    edges = np.zeros(buf.size + 1, dtype=np.int32)
    np.add.at(edges, line_start, 1)
    np.add.at(edges, line_end, -1)
    out = buf.copy()
    out[np.cumsum(edges[:-1]) > 0] = 32
    return out


def _name_bad_token(body: bytes, first_line: int, dtype: Any, name: str, comment: str) -> None:
    """The slow path of a malformed body: find the first unreadable number and its line."""
    convert = int if np.dtype(dtype).kind == "i" else float
    for k, raw in enumerate(body.split(b"\n")):
        text = raw.decode("latin-1").strip()
        if not text or text.startswith(comment):
            continue
        for word in text.split():
            try:
                convert(word)
            except ValueError:
                kind = "an integer" if convert is int else "a number"
                raise FormatError(f"{name}: line {first_line + k}: {word[:40]!r} is not "
                                  f"{kind}") from None
    raise FormatError(f"{name}: the numbers could not be read")


def _one_based(table: np.ndarray, lines: np.ndarray, dims: tuple[int, ...],
               name: str) -> np.ndarray:
    """1-based indices (integral, within ``dims``) as 0-based int64 coordinates."""
    coords = table.astype(np.int64)
    if table.dtype.kind == "f":
        wrong = np.flatnonzero(np.any(coords != table, axis=1))
        if wrong.size:
            raise FormatError(f"{name}: line {lines[wrong[0]]}: indices must be integers")
    coords -= 1
    if coords.shape[0]:
        outside = np.any((coords < 0) | (coords >= np.asarray(dims, dtype=np.int64)), axis=1)
        wrong = np.flatnonzero(outside)
        if wrong.size:
            raise FormatError(f"{name}: line {lines[wrong[0]]}: index {table[wrong[0]].tolist()} "
                              f"is outside the shape {dims} (indices are 1-based)")
    return coords
