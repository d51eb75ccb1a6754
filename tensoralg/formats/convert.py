"""Conversions between ``Tensor`` and numpy, scipy.sparse and pydata ``sparse`` objects.

This is the one module of ``formats/`` that knows scipy and pydata objects; it imports them
lazily, so tensoralg works without them. CSR and CSC inputs are wrapped without copying when
their indices are canonical; anything else is canonicalized on a copy, never in place.

>>> import numpy as np
>>> bind(np.arange(6.0).reshape(2, 3)).format.spec
'dd'
>>> input_family(3.0)
'scalar'
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from tensoralg.errors import FormatError, ShapeError, UnsupportedError
from tensoralg.formats.format import CSC, CSR, Format, resolve_format
from tensoralg.formats.level import LevelKind
from tensoralg.formats.pack import pack, pack_dense, to_coords
from tensoralg.formats.tensor import INDEX_DTYPES, VALUE_DTYPES, LevelArrays, Tensor
from tensoralg.formats.validate import validate_storage


def input_family(obj: Any) -> str:
    """Which kind of object ``obj`` is: ``"numpy"``, ``"scipy_array"``, ``"scipy_matrix"``,
    ``"sparse"`` (pydata), ``"tensor"`` or ``"scalar"``; UnsupportedError otherwise.

    >>> import numpy as np
    >>> input_family(np.ones(2)), input_family(np.float32(1))
    ('numpy', 'scalar')
    """
    if isinstance(obj, Tensor):
        return "tensor"
    if isinstance(obj, np.ndarray):
        return "numpy"
    if isinstance(obj, (bool, int, float, complex, np.generic)):
        return "scalar"
    scipy_sparse = sys.modules.get("scipy.sparse")     # a scipy object implies scipy is loaded
    if scipy_sparse is not None and scipy_sparse.issparse(obj):
        return "scipy_array" if isinstance(obj, scipy_sparse.sparray) else "scipy_matrix"
    if type(obj).__module__.split(".")[0] == "sparse":
        return "sparse"
    raise UnsupportedError(f"cannot use an object of type {type(obj).__module__}."
                           f"{type(obj).__qualname__} as a tensor; pass a numpy array, a scalar, "
                           f"a scipy.sparse array or matrix, a pydata sparse array or a ta.Tensor")


def bind(obj: Any, format: Any = None) -> Tensor:
    """Turn any accepted operand into a ``Tensor``, in ``format`` when one is given.

    numpy arrays and scalars keep their dtype (float32, float64, int32, int64; anything else is
    an UnsupportedError naming it) and are dense unless ``format`` says otherwise.

    >>> import numpy as np
    >>> bind(np.eye(3), "csr").nnz
    3
    """
    match input_family(obj):
        case "tensor":
            return obj if format is None else obj.convert(format)
        case "numpy" | "scalar":
            return from_numpy(obj, format)
        case "scipy_array" | "scipy_matrix":
            return from_scipy(obj, format)
        case _:
            return from_sparse(obj, format)


def from_numpy(a: Any, format: Any = None, index_dtype: Any = None) -> Tensor:
    """A tensor holding the values of ``a`` (all dense unless ``format`` says otherwise).

    >>> import numpy as np
    >>> from_numpy(np.array([0, 4, 0]), "s").vals.tolist()
    [4]
    """
    try:
        array = np.asarray(a)
    except (OverflowError, ValueError) as err:
        raise UnsupportedError(f"cannot read {type(a).__name__} as an array: {err}") from None
    if not array.dtype.isnative and array.dtype.newbyteorder("=") in VALUE_DTYPES:
        array = array.astype(array.dtype.newbyteorder("="))   # big-endian data: a native copy
    check_value_dtype(array.dtype, "numpy array")
    fmt = resolve_format("dense" if format is None else format, array.ndim, "numpy array")
    return pack_dense(array, fmt, index_dtype)


def check_value_dtype(dtype: np.dtype, what: str) -> None:
    """UnsupportedError unless ``dtype`` is a supported value dtype."""
    if dtype not in VALUE_DTYPES:
        raise UnsupportedError(f"{what} has dtype {dtype}, which tensoralg does not support; "
                               f"convert it to float32, float64, complex64, complex128, int32 or "
                               f"int64 (.astype)")


# -- scipy.sparse -------------------------------------------------------------------------------

def from_scipy(m: Any, format: Any = None) -> Tensor:
    """A tensor from any scipy.sparse array or matrix.

    CSR becomes ``"ds"`` and CSC ``("ds", (1, 0))``, sharing ``indptr``/``indices``/``data``
    when these are canonical; COO becomes COO; DIA, BSR, LIL and DOK go through CSR. Index
    dtypes int32/int64 are kept. ``format`` converts the result.

    >>> import scipy.sparse as sp
    >>> from_scipy(sp.coo_array(([1.0], ([0], [1])), shape=(2, 2))).format.spec
    'uq'
    """
    import scipy.sparse as sp
    if not sp.issparse(m):
        raise UnsupportedError(f"from_scipy expects a scipy.sparse object, not "
                               f"{type(m).__name__}")
    check_value_dtype(m.dtype, f"scipy.sparse {m.format} input")
    match m.format:
        case "csr" if m.ndim == 2:
            tensor = _from_compressed(m, CSR)
        case "csc":
            tensor = _from_compressed(m, CSC)
        case "coo":
            tensor = _from_scipy_coo(m)
        case _ if m.ndim == 2:
            tensor = _from_compressed(m.tocsr(), CSR)
        case _:
            tensor = _from_scipy_coo(m.tocoo())
    return tensor if format is None else tensor.convert(format)


def _from_compressed(m: Any, fmt: Format) -> Tensor:
    indptr, indices, data = m.indptr, m.indices, m.data
    if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
        raise FormatError(f"scipy {m.format} input has {indptr.dtype} indptr and "
                          f"{indices.dtype} indices; index arrays must hold integers")
    if indptr.dtype != indices.dtype or indptr.dtype not in INDEX_DTYPES:
        common = np.promote_types(indptr.dtype, indices.dtype)
        common = common if common in INDEX_DTYPES else np.dtype(np.int64)
        indptr, indices = indptr.astype(common), indices.astype(common)
    nnz = int(indptr[-1]) if indptr.size else 0
    # scipy tolerates arrays longer than nnz; slices keep sharing memory
    indices, data = indices[:nnz], data[:nnz]
    arrays = [np.ascontiguousarray(a) for a in (indptr, indices, data)]
    shape = tuple(int(n) for n in m.shape)
    levels = (LevelArrays(), LevelArrays(arrays[0], arrays[1]))
    try:
        validate_storage(shape, fmt, levels, arrays[2], "scipy input")
        return Tensor(shape, fmt, levels, arrays[2], check=False)
    except FormatError:
        pass
    try:
        fixed = m.copy()                             # canonicalize a copy, never the input
        fixed.check_format(full_check=True)
    except ValueError as err:
        raise FormatError(f"scipy {m.format} input is malformed: {err}") from None
    fixed.sum_duplicates()
    fixed.sort_indices()
    if fixed is m or np.shares_memory(fixed.indices, m.indices):
        raise FormatError("internal: scipy copy shares memory with the input")
    return _from_compressed(fixed, fmt)


def _from_scipy_coo(m: Any) -> Tensor:
    coords = m.coords if hasattr(m, "coords") else (m.row, m.col)
    shape = tuple(int(n) for n in m.shape)
    idx = np.result_type(*coords) if coords else np.dtype(np.int64)
    idx = idx if idx in INDEX_DTYPES else None
    data = np.asarray(m.data)
    if data.ndim != 1 or any(np.shape(c) != data.shape for c in coords):
        # (scipy's own nnz raises a bare ValueError for these)
        raise FormatError(f"scipy coo input holds {data.shape[0] if data.ndim else 0} values "
                          f"but coordinate arrays of lengths "
                          f"{', '.join(str(np.shape(c)) for c in coords)}: each must be as "
                          f"long as the values")
    entries = np.stack([np.asarray(c, dtype=np.int64) for c in coords], axis=1) if coords \
        else np.zeros((data.shape[0], 0), dtype=np.int64)
    if entries.size and (entries.min() < 0 or np.any(entries.max(axis=0) >= np.array(shape))):
        raise FormatError("scipy coo input has coordinates outside its shape")
    fmt = resolve_format("coo", len(shape), "scipy coo input")
    # bool values: scipy sums duplicates as logical or, pack as counts (kept as they were)
    if len(shape) == 2 and m.nnz and np.asarray(m.data).shape == (m.nnz,) and \
            np.asarray(m.data).dtype != np.bool_:
        return _coo_through_csr(m, shape, fmt, idx)
    return pack(entries, np.asarray(m.data), shape, fmt, index_dtype=idx)


def _coo_through_csr(m: Any, shape: tuple[int, int], fmt: Any, idx: Any) -> Tensor:
    """A 2-D scipy COO (coordinates checked in range) sorted and its duplicates summed by
    scipy's own ``tocsr`` (a counting sort in C++: 1e6 entries in ~35 ms where ``pack``'s
    argsort took ~150), laid out as ``pack`` lays out COO: rows on a non-unique level,
    columns on a singleton."""
    from tensoralg.formats.pack import _choose_index_dtype, _pos_from_counts

    csr = m.tocsr()                     # a new matrix: the input is never changed
    csr.sum_duplicates()                # no-ops where tocsr made it canonical already
    csr.sort_indices()
    nnz = int(csr.indptr[-1])
    index = _choose_index_dtype(idx, fmt, list(shape), nnz)
    rows = np.repeat(np.arange(shape[0], dtype=index), np.diff(csr.indptr))
    levels = (LevelArrays(_pos_from_counts(np.array([nnz]), index), rows),
              LevelArrays(None, csr.indices.astype(index, copy=False)))
    return Tensor(shape, fmt, levels, np.ascontiguousarray(csr.data), check=False)


def to_scipy(tensor: Tensor, kind: str = "array") -> Any:
    """A scipy.sparse CSR (CSC for ``("ds", (1, 0))``, COO for ``"uq"``) array or matrix; 2-D.

    CSR and CSC storage is handed over without copying where scipy accepts the arrays as they
    are; COO storage becomes a scipy COO; every other format goes through COO to CSR. Dense padding zeros are not kept.

    >>> import numpy as np
    >>> type(from_numpy(np.eye(2), "csr").to_scipy()).__name__
    'csr_array'
    """
    import scipy.sparse as sp
    if tensor.ndim != 2:
        raise ShapeError(f"to_scipy needs a 2-D tensor, not {tensor.ndim}-D {tensor}; use "
                         f"to_sparse() for N-D tensors")
    if kind not in ("array", "matrix"):
        raise UnsupportedError(f"to_scipy: kind must be 'array' or 'matrix', not {kind!r}")
    classes = {"csr": (sp.csr_array, sp.csr_matrix), "csc": (sp.csc_array, sp.csc_matrix),
               "coo": (sp.coo_array, sp.coo_matrix)}
    pick = 0 if kind == "array" else 1
    fmt = tensor.format
    if fmt.spec == "ds":
        name = "csr" if fmt.is_identity_order else "csc"
        level = tensor.levels[1]
        made = _handed_over(classes[name][pick], tensor.vals, level.crd, level.pos,
                            tensor.shape)
        if made is not None:
            return made
        return classes[name][pick]((tensor.vals, level.crd, level.pos), shape=tensor.shape,
                                   copy=False)
    coords, vals = _stored_coords(tensor)
    coo = classes["coo"][pick]((vals, (coords[:, 0], coords[:, 1])), shape=tensor.shape)
    # COO storage stays COO (already sorted, no duplicates); every other format becomes CSR.
    return coo if fmt.levels[0] is LevelKind.COMPRESSED_NONUNIQUE else coo.tocsr()


# A scipy compressed class -> the attributes its constructor sets on a small example, or
# None where the shortcut below does not reproduce what the constructor makes.
_TEMPLATES: dict[type, dict | None] = {}


def _handed_over(cls: type, vals: np.ndarray, crd: np.ndarray, pos: np.ndarray,
                 shape: tuple[int, ...]) -> Any:
    """A scipy CSR/CSC object over these arrays made without its constructor, or None.

    The constructor checks and converts what it is given, ~12 µs a call: a tenth of a small
    sparse sum's time. Arrays a kernel just assembled need neither, when they are what the
    constructor would keep as they are: int32 indices (it narrows int64 ones that fit), 1-D
    and contiguous. The attributes come from a constructed example, checked once per class.
    """
    if crd.dtype != np.int32 or pos.dtype != np.int32 or vals.ndim != 1 or \
            not (vals.flags.c_contiguous and crd.flags.c_contiguous and pos.flags.c_contiguous):
        return None
    if cls not in _TEMPLATES:
        _TEMPLATES[cls] = _template(cls)
    template = _TEMPLATES[cls]
    if template is None:
        return None
    made = cls.__new__(cls)
    made.__dict__.update(template)
    made.data, made.indices, made.indptr, made._shape = vals, crd, pos, tuple(shape)
    return made


def _template(cls: type) -> dict | None:
    """The attributes of a constructed example of ``cls`` but its arrays, shape and cached
    flags, if putting them on a bare object gives an equal matrix; else None."""
    vals, crd, pos = np.array([1.0, 2.0]), np.array([1, 0], np.int32), \
        np.array([0, 1, 1, 2], np.int32)
    example = cls((vals, crd, pos), shape=(3, 3), copy=False)
    attributes = vars(example)
    if not {"data", "indices", "indptr", "_shape"} <= set(attributes):
        return None
    template = {k: v for k, v in attributes.items()
                if k not in ("data", "indices", "indptr", "_shape") and not k.startswith("_has")}
    made = cls.__new__(cls)
    made.__dict__.update(template)
    made.data, made.indices, made.indptr, made._shape = vals, crd, pos, (3, 3)
    try:
        same = made.shape == (3, 3) and made.nnz == 2 and made.format == example.format and \
            np.array_equal(made.toarray(), example.toarray()) and made.indices is crd
    except Exception:   # noqa: BLE001 (any failure means: use the constructor)
        return None
    return template if same else None


def _stored_coords(tensor: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates and values, without the zeros that a dense last level pads with."""
    coords, vals = to_coords(tensor)
    if tensor.format.levels and tensor.format.levels[-1] is LevelKind.DENSE:
        keep = vals != 0
        coords, vals = coords[keep], vals[keep]
    return coords, vals


# -- pydata sparse ------------------------------------------------------------------------------

def from_sparse(s: Any, format: Any = None) -> Tensor:
    """A tensor from a pydata ``sparse`` array (COO, GCXS, DOK...); COO format by default.

    >>> import sparse, numpy as np
    >>> from_sparse(sparse.COO.from_numpy(np.eye(2))).format.spec
    'uq'
    """
    if input_family(s) != "sparse":
        raise UnsupportedError(f"from_sparse expects a pydata sparse array, not "
                               f"{type(s).__name__}")
    if not getattr(s, "shape", (0,)):
        # a 0-d array (sparse.einsum's scalars, whose value may be the fill value): dense
        return from_numpy(np.asarray(s.todense()))
    fill = getattr(s, "fill_value", 0)
    if fill != 0:
        raise UnsupportedError(f"pydata sparse input has fill value {fill}; tensoralg stores "
                               f"zero-filled tensors only")
    coo = s if type(s).__name__ == "COO" else s.asformat("coo")
    check_value_dtype(coo.dtype, "pydata sparse input")
    shape = tuple(int(n) for n in coo.shape)
    coords = np.asarray(coo.coords)
    idx = coords.dtype if coords.dtype in INDEX_DTYPES else None
    entries = np.ascontiguousarray(coords.T, dtype=np.int64).reshape(-1, len(shape))
    # pydata checks coordinates when the array is made, not after a write into them
    if entries.size and (entries.min() < 0 or np.any(entries.max(axis=0) >= np.array(shape))):
        raise FormatError("pydata sparse input has coordinates outside its shape")
    fmt = resolve_format("coo" if format is None else format, len(shape), "pydata sparse input")
    return pack(entries, np.asarray(coo.data), shape, fmt, index_dtype=idx)


def to_sparse(tensor: Tensor) -> Any:
    """A pydata ``sparse.COO`` array holding the tensor (dense padding zeros dropped).

    >>> import numpy as np
    >>> to_sparse(from_numpy(np.eye(2), "csr")).nnz
    2
    """
    try:
        import sparse
    except ImportError:
        raise UnsupportedError("to_sparse needs the pydata 'sparse' package (pip install "
                               "sparse)") from None
    coords, vals = _stored_coords(tensor)
    unique = LevelKind.COMPRESSED_NONUNIQUE not in tensor.format.levels
    return sparse.COO(coords.T, vals, shape=tensor.shape, has_duplicates=not unique,
                      sorted=False)
