"""Constant, ConstantOfShape and Cast (NumPy conversions; no kernel needed)."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

import tensoralg as ta
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op


def _value_of(attributes: dict[str, Any]) -> np.ndarray:
    """The single value attribute of a Constant node, as an array."""
    for name, value in attributes.items():
        if name == "value":
            return np.asarray(value)
        if name == "value_float":
            return np.array(value, dtype=np.float32)
        if name == "value_floats":
            return np.array(value, dtype=np.float32)
        if name == "value_int":
            return np.array(value, dtype=np.int64)
        if name == "value_ints":
            return np.array(value, dtype=np.int64)
    raise ta.UnsupportedError(f"Constant with attributes {sorted(attributes)} is not supported")


def _check_constant(attributes: dict[str, Any]) -> str | None:
    if len(attributes) != 1:
        return f"a Constant needs exactly one value attribute, got {sorted(attributes)}"
    name = next(iter(attributes))
    if name not in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        return f"Constant {name} attributes (strings, sparse values) are not supported"
    return None


@op("Constant", since=1, check=_check_constant)
def constant(node: NodeContext, **attributes: Any) -> np.ndarray:
    node.note("constant")
    return _value_of(attributes)


@op("ConstantOfShape", since=9)
def constant_of_shape(node: NodeContext, shape: np.ndarray, *, value: Any = None
                      ) -> np.ndarray:
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value).reshape(-1)
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    if any(d < 0 for d in dims):
        raise ta.ShapeError(f"{node}: negative dimension in shape {dims}")
    node.note("numpy full")
    return np.full(dims, fill[0], dtype=fill.dtype)


# Element types NumPy holds natively; float8, int4, bfloat16 (ml_dtypes) and strings are refused.
NUMPY_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64))


@functools.lru_cache(maxsize=None)
def numpy_dtype(onnx_type: int) -> np.dtype:
    """The NumPy dtype of an ONNX element type, or UnsupportedError.

    Cached: a Cast asks at every run, and onnx's lookup took ~100 µs, as long as the whole
    cast of a 256-row id column (deepctr's TorchScript exports run 26 of them per call)."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(onnx_type))
    except (KeyError, ValueError, TypeError):
        dtype = None
    if dtype is None or dtype not in NUMPY_DTYPES:
        name = onnx.TensorProto.DataType.Name(onnx_type) if onnx_type in \
            onnx.TensorProto.DataType.values() else str(onnx_type)
        raise ta.UnsupportedError(f"element type {name} is not supported")
    return dtype


def _check_cast(attributes: dict[str, Any]) -> str | None:
    try:
        numpy_dtype(attributes.get("to", 0))
    except ta.UnsupportedError as err:
        return f"Cast to {err}"
    return None


@op("Cast", since=6, check=_check_cast)
def cast(node: NodeContext, x: np.ndarray, *, to: int, saturate: int = 1,
         round_mode: str = "up") -> np.ndarray:
    if x.dtype.kind not in "biuf":
        raise ta.UnsupportedError(f"{node}: cannot cast from {x.dtype}")
    node.note(_cast_note(to))
    # NaN or an out-of-range float becomes some integer, as in onnxruntime, which does not
    # warn; a Gather reading it refuses it by its own check.
    with np.errstate(invalid="ignore"):
        return x.astype(numpy_dtype(to))


@functools.lru_cache(maxsize=None)
def _cast_note(to: int) -> str:
    # formatting a dtype costs ~90 µs (numpy's dtype __str__), at every run of a Cast
    return f"numpy astype({numpy_dtype(to)})"


def tensor_value(proto: onnx.TensorProto) -> np.ndarray:
    """An ONNX tensor as a NumPy array (UnsupportedError for types NumPy lacks)."""
    numpy_dtype(proto.data_type)
    return numpy_helper.to_array(proto)


@op("CastLike", since=15)
def cast_like(node: NodeContext, x: np.ndarray, target: np.ndarray, *, saturate: int = 1,
              round_mode: str = "up") -> np.ndarray:
    """``x`` converted to the element type of ``target`` (whose values are not read)."""
    if x.dtype.kind not in "biuf" or target.dtype.kind not in "biuf":
        raise ta.UnsupportedError(f"{node}: cannot cast {x.dtype} to {target.dtype}")
    node.note(f"numpy astype({target.dtype})")
    with np.errstate(invalid="ignore"):
        return x.astype(target.dtype)


@op("EyeLike", since=9)
def eye_like(node: NodeContext, x: np.ndarray, *, dtype: int | None = None, k: int = 0
             ) -> np.ndarray:
    """A 2-D tensor of the shape of ``x`` with ones on diagonal ``k`` (in ``dtype``, by
    default that of ``x``)."""
    if x.ndim != 2:
        raise ta.ShapeError(f"{node}: EyeLike takes a 2-D input, not {x.shape}")
    node.note("numpy eye")
    return np.eye(*x.shape, k=k, dtype=x.dtype if dtype is None else numpy_dtype(dtype))
