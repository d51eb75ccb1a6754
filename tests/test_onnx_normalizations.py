"""GroupNormalization, RMSNormalization, MeanVarianceNormalization, LpNormalization, LRN
(``onnx/ops/layernorm.py``) and the bitwise ops (``onnx/ops/elementwise.py``) against
onnxruntime at every opt level (level 3 three times, for the static plan), on shapes and
attributes the ONNX node tests do not hold: even LRN windows, zero rows, other axes."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

LEVELS = (0, 1, 2, 3)


def _check(node, inputs, constants=None, opset=18, rtol=1e-5, atol=1e-5):
    """``node`` against onnxruntime at every level."""
    first = next(iter(inputs.values()))
    elem = helper.np_dtype_to_tensor_dtype(first.dtype)
    shape = list(np.broadcast_shapes(*(a.shape for a in inputs.values())))
    model = onnx_model([node], inputs, [("y", elem, shape)], constants, opset=opset)
    check_every_level(model, inputs, rtol=rtol, atol=atol)


def test_group_normalization():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 6, 5, 4)) * 3 + 1).astype(np.float32)
    constants = {"s": rng.standard_normal(6).astype(np.float32),
                 "b": rng.standard_normal(6).astype(np.float32)}
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3,
                            epsilon=1e-3)
    _check(node, {"x": x}, constants, opset=21)


def test_group_normalization_scaled_per_group():
    """Opset 18's scale and bias per group (the checker now refuses that version's models,
    which exporters wrote, so the op function is called directly)."""
    from tensoralg.onnx.ops.kernels import KernelSet, NodeContext
    from tensoralg.onnx.ops.layernorm import group_normalization

    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 6, 7))
    scale, bias = rng.standard_normal(2), rng.standard_normal(2)
    node = NodeContext("n", "GroupNormalization", ("x", "s", "b"), ("y",), 18,
                       KernelSet("llvm"))
    got = group_normalization(node, x, scale, bias, num_groups=2, epsilon=1e-4)
    groups = x.reshape(2, 2, -1)
    normal = (groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True)
                                                                 + 1e-4)
    expected = normal.reshape(x.shape) * np.repeat(scale, 3)[:, None] + \
        np.repeat(bias, 3)[:, None]
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_normalization(axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 3, 8)).astype(np.float32)
    shape = x.shape[axis % 3:]
    node = helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=axis)
    try:
        _check(node, {"x": x}, {"s": rng.standard_normal(shape).astype(np.float32)}, opset=23)
    except Exception as error:  # noqa: BLE001 - an onnxruntime without opset 23
        if "opset" in str(error).lower() and "onnxruntime" in type(error).__module__:
            pytest.skip(f"onnxruntime lacks RMSNormalization: {error}")
        raise


@pytest.mark.parametrize("axes", [None, [1], [2, 3], [0, 1, 2, 3]])
def test_mean_variance_normalization(axes):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 3, 4, 5)) * 2 + 5).astype(np.float32)
    attributes = {} if axes is None else {"axes": axes}
    _check(helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **attributes), {"x": x},
           atol=1e-4)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_lp_normalization_with_a_zero_row(p, axis):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x[1, :, :] = 0.0
    x[:, 2, :] = 0.0
    x[:, :, 3] = 0.0
    _check(helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p), {"x": x})


def _lrn(x, size, alpha, beta, bias):
    """LRN as the ONNX spec writes it: the window of channel c runs from
    c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), clipped to the channels."""
    squares = np.zeros_like(x)
    low, high = (size - 1) // 2, size - 1 - (size - 1) // 2
    for c in range(x.shape[1]):
        squares[:, c] = (x[:, max(0, c - low):c + high + 1] ** 2).sum(axis=1)
    return x / (bias + alpha / size * squares) ** beta


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7])
def test_lrn(size):
    """Odd sizes against onnxruntime; even ones (onnxruntime refuses them, and onnx's
    reference sums the wrong axis) against the spec's formula."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 3, 4)).astype(np.float32) * 2
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.01, beta=0.6, bias=1.5)
    if size % 2:
        _check(node, {"x": x})
        return
    model = onnx_model([node], {"x": x}, [("y", 1, list(x.shape))])
    expected = _lrn(x.astype(np.float64), size, 0.01, 0.6, 1.5)
    for level in LEVELS:
        np.testing.assert_allclose(tonnx.load(model, opt_level=level).run({"x": x})["y"],
                                   expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64])
def test_bitwise_ops(dtype):
    rng = np.random.default_rng(6)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (4, 5), dtype=dtype)
    b = rng.integers(info.min, info.max, (5,), dtype=dtype)
    for name in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        _check(helper.make_node(name, ["a", "b"], ["y"]), {"a": a, "b": b})
    _check(helper.make_node("BitwiseNot", ["a"], ["y"]), {"a": a})


def test_bit_shifts_of_unsigned_values():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 2 ** 32 - 1, (6,), dtype=np.uint32)
    y = np.array([0, 1, 5, 31, 7, 3], np.uint32)
    for direction in ("LEFT", "RIGHT"):
        _check(helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction),
               {"x": x, "s": y}, opset=11)


def test_bad_normalizations_are_refused():
    x = np.ones((2, 6, 3), np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=4)
    model = onnx_model([node], {"x": x}, [("y", 1, list(x.shape))],
                       {"s": np.ones(6, np.float32), "b": np.ones(6, np.float32)}, opset=21)
    with pytest.raises(ta.ShapeError, match="num_groups=4"):
        tonnx.load(model, opt_level=0).run({"x": x})
    lp = onnx_model([helper.make_node("LpNormalization", ["x"], ["y"], p=3)], {"x": x},
                    [("y", 1, list(x.shape))])
    with pytest.raises(ta.UnsupportedError, match="p=1 or p=2"):
        tonnx.load(lp, opt_level=0).run({"x": x})
    from tensoralg.onnx.ops.elementwise import bit_shift
    from tensoralg.onnx.ops.kernels import KernelSet, NodeContext

    shift = NodeContext("n", "BitShift", ("x", "y"), ("z",), 11, KernelSet("llvm"))
    with pytest.raises(ta.UnsupportedError, match="integers of one type"):
        bit_shift(shift, x, x, direction="LEFT")
