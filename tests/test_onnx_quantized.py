"""Quantized ONNX graphs (``onnx/ops/quantize.py``, ``onnx/passes/quantized.py``) against
onnxruntime, which computes the integers these ops make exactly the same way: every quantized
value and int32 sum must be *equal*, at every opt level (level 3 three times, so that the
static plan runs).

- each op alone on random data crossing its saturation bounds and rounding ties: per tensor,
  per axis and blocked scales, zero points absent and present, 8- and 16-bit types;
- integer products whose float32 sums would not be exact (the float64 route);
- models written by onnxruntime's own quantizer (``quantize_dynamic``, ``quantize_static`` in
  the QDQ format), where the passes must fire and still give onnxruntime's outputs;
- the rewrites' limits (pairs they must leave alone) and the errors bad models get.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model, onnxruntime_outputs  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

F32, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def _same_as_onnxruntime(model, feeds, atol=0.0):
    """Every output at every level equal to onnxruntime's (floats within ``atol``)."""
    return check_every_level(model, feeds, rtol=0.0, atol=atol)


def _values(rng, shape, scale=0.05):
    """Floats that quantize across the whole range and past it, with exact ties."""
    x = rng.standard_normal(shape).astype(np.float32) * 4
    flat = x.reshape(-1)
    flat[: flat.size // 4] = np.round(flat[: flat.size // 4] / scale * 2) / 2 * scale
    return x


# --- the ops alone ---------------------------------------------------------------------------

@pytest.mark.parametrize("out_type, zero", [(np.uint8, True), (np.int8, True),
                                            (np.uint16, True), (np.int16, True),
                                            (np.uint8, False)])
def test_quantize_per_tensor(out_type, zero):
    """Without a zero point the output is uint8."""
    rng = np.random.default_rng(1)
    x = _values(rng, (5, 7, 9))
    scale = np.array(0.05, np.float32)
    info = np.iinfo(out_type)
    inputs = ["x", "scale"] + (["zero"] if zero else [])
    constants = {"scale": scale}
    if zero:
        constants["zero"] = np.array(info.min + (info.max - info.min) // 3, out_type)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(out_type))
    model = onnx_model([helper.make_node("QuantizeLinear", inputs, ["y"])], {"x": x},
                       [("y", elem, list(x.shape))], constants, opset=21)
    _same_as_onnxruntime(model, {"x": x})


def test_quantize_saturates_infinities_and_nan_like_onnxruntime():
    x = np.array([np.inf, -np.inf, np.nan, 1e30, -1e30, 0.0, -0.0, 12.7, -12.9], np.float32)
    for out_type, elem in ((np.uint8, U8), (np.int8, I8)):
        model = onnx_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
                           {"x": x}, [("y", elem, [9])],
                           {"s": np.array(0.1, np.float32), "z": np.array(3, out_type)})
        _same_as_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_and_dequantize_per_axis(axis):
    rng = np.random.default_rng(2)
    x = _values(rng, (4, 6, 5))
    length = x.shape[axis]
    scale = (rng.random(length) * 0.1 + 0.01).astype(np.float32)
    zero = rng.integers(-20, 20, length).astype(np.int8)
    model = onnx_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=axis),
                        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=axis)],
                       {"x": x}, [("q", I8, list(x.shape)), ("y", F32, list(x.shape))],
                       {"s": scale, "z": zero}, opset=13)
    _same_as_onnxruntime(model, {"x": x})


def test_blocked_quantization():
    rng = np.random.default_rng(3)
    x = _values(rng, (3, 10))
    scale = (rng.random((3, 3)) * 0.1 + 0.01).astype(np.float32)     # blocks of 4 along axis 1
    zero = rng.integers(0, 255, (3, 3)).astype(np.uint8)
    model = onnx_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1,
                                         block_size=4),
                        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1,
                                         block_size=4)],
                       {"x": x}, [("q", U8, [3, 10]), ("y", F32, [3, 10])],
                       {"s": scale, "z": zero}, opset=21)
    _same_as_onnxruntime(model, {"x": x})


def test_dequantize_of_a_graph_input_and_of_int32():
    rng = np.random.default_rng(4)
    q = rng.integers(0, 256, (6, 8)).astype(np.uint8)
    big = rng.integers(-2 ** 31, 2 ** 31 - 1, (6, 8)).astype(np.int32)
    model = onnx_model([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
                        helper.make_node("DequantizeLinear", ["b", "s"], ["w"])],
                       {"q": q, "b": big}, [("y", F32, [6, 8]), ("w", F32, [6, 8])],
                       {"s": np.array(0.37, np.float32), "z": np.array(131, np.uint8)})
    _same_as_onnxruntime(model, {"q": q, "b": big})


@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zero", "one value"])
def test_dynamic_quantize(case):
    rng = np.random.default_rng(5)
    x = {"mixed": _values(rng, (7, 33)), "positive": rng.random((7, 33)).astype(np.float32),
         "negative": -rng.random((7, 33)).astype(np.float32) * 100,
         "zero": np.zeros((7, 33), np.float32), "one value": np.full((1, 1), 3.5, np.float32)}[case]
    model = onnx_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                       {"x": x}, [("y", U8, list(x.shape)), ("s", F32, []), ("z", U8, [])])
    _same_as_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("types", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
def test_matmul_integer(types):
    rng = np.random.default_rng(6)
    a_type, b_type = types
    a = rng.integers(np.iinfo(a_type).min, np.iinfo(a_type).max, (2, 9, 70)).astype(a_type)
    b = rng.integers(np.iinfo(b_type).min, np.iinfo(b_type).max, (70, 13)).astype(b_type)
    a_zero = np.array(np.iinfo(a_type).max // 2, a_type)
    b_zero = rng.integers(0, 5, 13).astype(b_type)      # per column
    model = onnx_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])],
                       {"a": a}, [("y", I32, [2, 9, 13])], {"b": b, "az": a_zero, "bz": b_zero})
    _same_as_onnxruntime(model, {"a": a})


def test_matmul_integer_beyond_float32_exactness():
    """Sums up to 4000 * 255 * 255 (2.6e8): past float32's 2^24, so the product runs in
    float64 (noted in the plan) and is still exact."""
    rng = np.random.default_rng(7)
    a = rng.integers(200, 256, (5, 4000)).astype(np.uint8)
    b = rng.integers(200, 256, (4000, 3)).astype(np.uint8)
    model = onnx_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], {"a": a, "b": b},
                       [("y", I32, [5, 3])])
    compiled = _same_as_onnxruntime(model, {"a": a, "b": b})
    assert "integer product in float64" in compiled.stage_text("plan")


def test_qlinear_matmul():
    rng = np.random.default_rng(8)
    a = rng.integers(0, 256, (3, 17, 40)).astype(np.uint8)
    b = rng.integers(-128, 128, (40, 11)).astype(np.int8)
    constants = {"as": np.array(0.02, np.float32), "az": np.array(120, np.uint8),
                 "bs": np.array(0.01, np.float32), "bz": np.array(0, np.int8),
                 "ys": np.array(0.15, np.float32), "yz": np.array(128, np.uint8)}
    # b fed at run time: a constant b makes a quantized model's layer, read in the QDQ form
    # (tests/test_onnx_qoperator.py)
    model = onnx_model([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz",
                                                           "ys", "yz"], ["y"])],
                       {"a": a, "b": b}, [("y", U8, [3, 17, 11])], constants)
    _same_as_onnxruntime(model, {"a": a, "b": b})


@pytest.mark.parametrize("attributes", [{}, {"pads": [1, 1, 1, 1]},
                                        {"strides": [2, 2], "pads": [0, 1, 1, 0]},
                                        {"group": 2, "pads": [1, 1, 1, 1]}])
def test_conv_integer_and_qlinear_conv(attributes):
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (2, 4, 9, 8)).astype(np.uint8)
    w = rng.integers(-128, 128, (6, 4 // attributes.get("group", 1), 3, 3)).astype(np.int8)
    shape = list(x.shape)
    out = [2, 6, *(None, None)]
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz"], ["acc"], **attributes),
             helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz",
                                              "bias"], ["y"], **attributes)]
    constants = {"xz": np.array(100, np.uint8), "xs": np.array(0.02, np.float32),
                 "ws": (rng.random(6) * 0.02 + 0.001).astype(np.float32),
                 "wz": np.zeros(6, np.int8), "ys": np.array(0.5, np.float32),
                 "yz": np.array(7, np.uint8),
                 "bias": rng.integers(-5000, 5000, 6).astype(np.int32)}
    model = onnx_model(nodes, {"x": x, "w": w}, [("acc", I32, out), ("y", U8, out)],
                       constants, shapes={"x": shape})
    _same_as_onnxruntime(model, {"x": x, "w": w})


# --- models from onnxruntime's quantizer -----------------------------------------------------

def _mlp(rng, inner=64):
    constants = {"w1": (rng.standard_normal((32, inner)) * 0.2).astype(np.float32),
                 "b1": rng.standard_normal(inner).astype(np.float32),
                 "w2": (rng.standard_normal((inner, 8)) * 0.2).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["h2"]),
             helper.make_node("Relu", ["h2"], ["h3"]),
             helper.make_node("MatMul", ["h3", "w2"], ["y"])]
    return onnx_model(nodes, {"x": np.zeros((1, 32), np.float32)}, [("y", F32, ["N", 8])],
                      constants, shapes={"x": ["N", 32]}, opset=17)


def _cnn(rng):
    constants = {"w": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
                 "b": rng.standard_normal(8).astype(np.float32),
                 "w2": (rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2"], ["y"], pads=[1, 1, 1, 1])]
    return onnx_model(nodes, {"x": np.zeros((1, 3, 16, 16), np.float32)},
                      [("y", F32, ["N", 4, 8, 8])], constants,
                      shapes={"x": ["N", 3, 16, 16]}, opset=17)


class _Reader:
    def __init__(self, name, shape, seed):
        rng = np.random.default_rng(seed)
        self.batches = iter([{name: rng.standard_normal(shape).astype(np.float32)}
                             for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


@pytest.mark.parametrize("int8", [True, False], ids=["int8 GEMM", "float route"])
@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("inner", [64, 1100])
def test_dynamically_quantized_mlp(tmp_path, weight_type, inner, int8, monkeypatch):
    """``quantize_dynamic``: DynamicQuantizeLinear + MatMulInteger + Cast, rewritten into the
    int8 GEMM where the host has VNNI and the weight fits int8 (symmetric int8 weights), else
    into exact float products (float64 weights where a product's sums pass 2^24: 1100
    terms); both give onnxruntime's results."""
    from tensoralg import program

    if not int8:
        monkeypatch.setattr(program, "int8_gemm_supported", lambda cache=None: False)
    elif not program.int8_gemm_supported():
        pytest.skip("this host has no AVX-512 VNNI: the int8 GEMM cannot run")
    quantization = pytest.importorskip("onnxruntime.quantization")
    source, target = tmp_path / "mlp.onnx", tmp_path / "mlp.quant.onnx"
    onnx.save(_mlp(np.random.default_rng(10), inner), source)
    quantization.quantize_dynamic(str(source), str(target),
                                  weight_type=getattr(quantization.QuantType, weight_type))
    model = onnx.load(target)
    assert "MatMulInteger" in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(11).standard_normal((37, 32)).astype(np.float32)
    compiled = _same_as_onnxruntime(model, {"x": x}, atol=1e-5)
    text = compiled.stage_text("plan")
    on_int8 = 2 if int8 and weight_type == "QInt8" else 0
    assert f"dynamic quantization: 2 integer product(s), {on_int8} on the int8 GEMM" in text
    assert ("generated int8 GEMM" in text) == bool(on_int8)
    assert "MatMulInteger" not in text.split("output y")[0].split("constant(s)")[1]


def _int8_gemm_or_skip():
    from tensoralg import program

    if not program.int8_gemm_supported():
        pytest.skip("this host has no AVX-512 VNNI: the int8 GEMM cannot run")


def test_dynamically_quantized_cnn(tmp_path):
    """``quantize_dynamic`` on a CNN: DynamicQuantizeLinear + ConvInteger + Cast, each
    convolution the float patch matrix, the int8 GEMM and a transpose to NCHW, in one
    compiled sequence; onnxruntime's results."""
    _int8_gemm_or_skip()
    quantization = pytest.importorskip("onnxruntime.quantization")
    source, target = tmp_path / "cnn.onnx", tmp_path / "cnn.quant.onnx"
    onnx.save(_cnn(np.random.default_rng(20)), source)
    quantization.quantize_dynamic(str(source), str(target),
                                  weight_type=quantization.QuantType.QInt8)
    model = onnx.load(target)
    assert "ConvInteger" in {n.op_type for n in model.graph.node}
    x = np.random.default_rng(21).standard_normal((3, 3, 16, 16)).astype(np.float32)
    compiled = _same_as_onnxruntime(model, {"x": x}, atol=1e-5)
    text = compiled.stage_text("plan")
    assert "dynamic quantization: 2 integer product(s), 2 on the int8 GEMM" in text
    assert "Int8Conv" in text and "generated int8 convolution" in text
    assert "2 generated GEMM" in text and "in 1 compiled sequence" in text


@pytest.mark.parametrize("case", ["strided", "dilated", "dilated rows", "same", "per channel",
                                  "empty batch", "uint8 weight"])
def test_conv_integer_on_the_int8_gemm(case):
    """A ConvInteger read by a Cast, with strides and asymmetric pads, dilation (along both
    axes: float patch rows; along rows only: the channels-last image), auto_pad,
    a per-output-channel weight zero point, a batch of 0 and a uint8 weight whose shifted
    values fit int8: equal to onnxruntime (to level 0 for the per-channel zero point, which
    onnxruntime's ConvInteger refuses)."""
    _int8_gemm_or_skip()
    rng = np.random.default_rng(22)
    weight_type, low, high = {"uint8 weight": (np.uint8, 100, 156),
                              "per channel": (np.int8, -120, 121)}.get(case, (np.int8, -128, 128))
    w = rng.integers(low, high, (5, 4, 3, 3)).astype(weight_type)
    wz = np.array(128 if case == "uint8 weight" else 0, weight_type)
    attributes = {"strided": {"strides": [2, 1], "pads": [1, 0, 2, 1]},
                  "dilated": {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
                  "dilated rows": {"dilations": [3, 1], "pads": [0, 1, 3, 1]},
                  "same": {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
                  "per channel": {"pads": [1, 1, 1, 1]}, "empty batch": {},
                  "uint8 weight": {"pads": [0, 1, 0, 1]}}[case]
    if case == "per channel":
        wz = rng.integers(-3, 4, 5).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("ConvInteger", ["q", "w", "z", "wz"], ["acc"], **attributes),
             helper.make_node("Cast", ["acc"], ["f"], to=F32),
             helper.make_node("Mul", ["f", "s"], ["y"])]
    x = _values(rng, (0 if case == "empty batch" else 2, 4, 11, 9))
    model = onnx_model(nodes, {"x": x}, [("y", F32, ["N", 5, "H", "W"])], {"w": w, "wz": wz})
    if case != "per channel":
        compiled = _same_as_onnxruntime(model, {"x": x})
    else:
        # onnxruntime's ConvInteger takes per-tensor zero points only: the oracle is level 0,
        # where ConvInteger is an exact float convolution of the shifted operands
        want = tonnx.load(model, opt_level=0).run({"x": x})["y"]
        compiled = tonnx.load(model, opt_level=3)
        for _ in range(3):
            np.testing.assert_array_equal(compiled.run({"x": x})["y"], want)
    assert "1 on the int8 GEMM" in compiled.stage_text("plan")


@pytest.mark.parametrize("case", ["grouped", "depthwise", "wide uint8", "float64 sums",
                                  "no VNNI"])
def test_conv_integer_off_the_int8_gemm_is_an_exact_float_conv(case, monkeypatch):
    """A grouped or depthwise ConvInteger, a uint8 weight shifted past int8's range, sums
    past float32's exact integers (float64 weights) and a host without VNNI: a float Conv of
    the shifted values (Conv's own routes), with onnxruntime's results."""
    from tensoralg import program

    if case == "no VNNI":
        monkeypatch.setattr(program, "int8_gemm_supported", lambda cache=None: False)
    rng = np.random.default_rng(23)
    channels, out, group = {"grouped": (4, 4, 2), "depthwise": (6, 6, 6),
                            "float64 sums": (64, 4, 2)}.get(case, (4, 4, 1))
    w = rng.integers(0, 256, (out, channels // group, 3, 3)).astype(np.uint8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("ConvInteger", ["q", "w", "z", "wz"], ["acc"], group=group,
                              pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["y"], to=F32)]
    x = _values(rng, (2, channels, 6, 6))
    model = onnx_model(nodes, {"x": x}, [("y", F32, [2, out, 6, 6])],
                       {"w": w, "wz": np.array(3, np.uint8)})
    compiled = _same_as_onnxruntime(model, {"x": x})
    assert "1 integer product(s), 0 on the int8 GEMM, 1 as exact float" in \
        compiled.stage_text("plan")


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("build", [_cnn, _mlp])
@pytest.mark.parametrize("int8", [True, False], ids=["int8 GEMM", "float route"])
def test_statically_quantized_qdq_models(tmp_path, per_channel, build, int8, monkeypatch):
    """``quantize_static`` in the QDQ format: every activation's QuantizeLinear ->
    DequantizeLinear pair becomes one fused float statement, and, on a host with VNNI, the
    layers reading them (a convolution with enough terms per sum, every product) run on the
    int8 GEMM; onnxruntime's results either way."""
    from tensoralg import program

    if not int8:
        monkeypatch.setattr(program, "int8_gemm_supported", lambda cache=None: False)
    elif not program.int8_gemm_supported():
        pytest.skip("this host has no AVX-512 VNNI: the int8 GEMM cannot run")
    quantization = pytest.importorskip("onnxruntime.quantization")
    float_model = build(np.random.default_rng(12))
    source, target = tmp_path / "model.onnx", tmp_path / "model.qdq.onnx"
    onnx.save(float_model, source)
    shape = [d.dim_value or 2 for d in float_model.graph.input[0].type.tensor_type.shape.dim]
    quantization.quantize_static(str(source), str(target), _Reader("x", shape, 13),
                                 quant_format=quantization.QuantFormat.QDQ,
                                 per_channel=per_channel)
    model = onnx.load(target)
    assert "QuantizeLinear" in {n.op_type for n in model.graph.node}
    shape[0] = 5
    x = np.random.default_rng(14).standard_normal(shape).astype(np.float32)
    compiled = _same_as_onnxruntime(model, {"x": x}, atol=1e-5)
    assert "pair(s) as float statements" in compiled.stage_text("plan")
    assert " 0 QuantizeLinear" not in compiled.stage_text("plan")
    # the CNN's first convolution sums 27 terms: too few for the int8 GEMM to pay
    on_int8 = (1 if build is _cnn else 2) if int8 else 0
    assert f"static int8 products: {on_int8} Conv/MatMul/Gemm" in compiled.stage_text("plan") \
        or (not int8 and "static int8 products: none" in compiled.stage_text("plan"))


def _gemm_model(rng, trans_b):
    w = (rng.standard_normal((24, 96) if trans_b else (96, 24)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=trans_b),
             helper.make_node("Relu", ["h"], ["y"])]
    return onnx_model(nodes, {"x": np.zeros((1, 96), np.float32)}, [("y", F32, ["N", 24])],
                      {"w": w, "b": rng.standard_normal(24).astype(np.float32)},
                      shapes={"x": ["N", 96]}, opset=17)


@pytest.mark.parametrize("trans_b", [0, 1])
def test_statically_quantized_gemm_on_the_int8_gemm(tmp_path, trans_b):
    """A QDQ Gemm (GPT-2's Conv1D exports as Gemm) with its bias, either weight layout:
    Int8MatMul, then the rescale and the bias; equal to onnxruntime."""
    _int8_gemm_or_skip()
    quantization = pytest.importorskip("onnxruntime.quantization")
    source, target = tmp_path / "gemm.onnx", tmp_path / "gemm.qdq.onnx"
    onnx.save(_gemm_model(np.random.default_rng(30), trans_b), source)
    quantization.quantize_static(str(source), str(target), _Reader("x", [4, 96], 31),
                                 quant_format=quantization.QuantFormat.QDQ)
    x = np.random.default_rng(32).standard_normal((7, 96)).astype(np.float32)
    compiled = _same_as_onnxruntime(onnx.load(target), {"x": x}, atol=1e-5)
    assert "static int8 products: 1 Conv/MatMul/Gemm" in compiled.stage_text("plan")


@pytest.mark.parametrize("activation", ["Relu", "Clip", "Clip fed at run time", "none"])
def test_int8_epilogues_join_the_product(activation):
    """A hand-written QDQ layer ``Q -> DQ -> MatMul(DQ(int8 W)) -> Add(b) -> act``: the
    rescale, the bias and a Relu or a Clip with constant bounds run in the int8 GEMM's
    registers; a Clip whose bound is fed at run time stays a node. onnxruntime's results."""
    _int8_gemm_or_skip()
    rng = np.random.default_rng(40)
    constants = {"s": np.array(0.04, np.float32), "z": np.array(3, np.int8),
                 "wq": rng.integers(-127, 128, (48, 20)).astype(np.int8),
                 "ws": (rng.random(20) * 0.02 + 0.005).astype(np.float32),
                 "b": rng.standard_normal(20).astype(np.float32),
                 "lo": np.array(-0.25, np.float32), "hi": np.array(1.5, np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"], axis=1),
             helper.make_node("MatMul", ["xd", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["y" if activation == "none" else "a"])]
    feeds = {"x": _values(rng, (9, 48))}
    if activation == "Relu":
        nodes.append(helper.make_node("Relu", ["a"], ["y"]))
    elif activation == "Clip":
        nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["y"]))
    elif activation == "Clip fed at run time":
        nodes.append(helper.make_node("Clip", ["a", "lo", "top"], ["y"]))
        feeds["top"] = np.array(0.5, np.float32)
    model = onnx_model(nodes, feeds, [("y", F32, [9, 20])], constants)
    # float32 rounding apart: onnxruntime multiplies the dequantized floats
    compiled = check_every_level(model, feeds, rtol=1e-5, atol=1e-5)
    joined = {"Relu": 3, "Clip": 3, "Clip fed at run time": 2, "none": 2}[activation]
    assert f"int8 epilogues: {joined} node(s) into 1 int8 product(s)" in \
        compiled.stage_text("plan")


def test_a_product_scaled_per_row_keeps_its_mul():
    """A Mul by a constant that varies along the rows (shape (9, 1)) is no per-column
    epilogue: it stays a node of its own, and the results stay onnxruntime's."""
    _int8_gemm_or_skip()
    rng = np.random.default_rng(41)
    constants = {"s": np.array(0.04, np.float32), "z": np.array(0, np.int8),
                 "wq": rng.integers(-127, 128, (48, 20)).astype(np.int8),
                 "ws": np.array(0.01, np.float32),
                 "rows": rng.random((9, 1)).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["w"]),
             helper.make_node("MatMul", ["xd", "w"], ["h"]),
             helper.make_node("Mul", ["h", "rows"], ["y"])]
    feeds = {"x": _values(rng, (9, 48))}
    model = onnx_model(nodes, feeds, [("y", F32, [9, 20])], constants)
    compiled = check_every_level(model, feeds, rtol=1e-5, atol=1e-5)
    assert "int8 epilogues: 1 node(s) into 1 int8 product(s)" in compiled.stage_text("plan")


def test_int8_kernels_are_printed_and_replaced_weights_dropped(tmp_path):
    """The printed kernels of a plan include the int8 GEMM's module, and the model keeps
    the repacked int8 weights, not the float ones (nor the original int8 ones) they replace."""
    _int8_gemm_or_skip()
    quantization = pytest.importorskip("onnxruntime.quantization")
    for kind in ("dynamic", "static"):
        source, target = tmp_path / "mlp.onnx", tmp_path / f"mlp.{kind}.onnx"
        onnx.save(_mlp(np.random.default_rng(16)), source)
        if kind == "dynamic":
            quantization.quantize_dynamic(str(source), str(target),
                                          weight_type=quantization.QuantType.QInt8)
        else:
            quantization.quantize_static(str(source), str(target), _Reader("x", [2, 32], 17),
                                         quant_format=quantization.QuantFormat.QDQ)
        compiled = tonnx.load(onnx.load(target), opt_level=3)
        x = np.random.default_rng(18).standard_normal((5, 32)).astype(np.float32)
        for _ in range(3):
            compiled.run({"x": x})
        assert "== generated QuantizedLayer(int8 32x64)" in compiled.stage_text("kernels")
        kept = compiled.graph.constants
        assert sum(value.dtype == np.int8 and value.ndim == 2 for value in kept.values()) == 2
        assert not any(value.dtype == np.float32 and value.shape in ((32, 64), (64, 8))
                       for value in kept.values())
        assert not compiled.graph.dequantized


def test_constant_folding_remembers_dequantized_integers():
    """A DequantizeLinear of int8 constants folds to floats and leaves its integers, scale,
    zero point and axis in ``graph.dequantized``; one of int32 does not."""
    from tensoralg.onnx.frontend.model import load

    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "s2"], ["bias"]),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "bias"], ["y"])]
    constants = {"q": np.arange(-6, 6, dtype=np.int8).reshape(3, 4),
                 "s": np.array([0.5, 0.25, 2.0], np.float32), "z": np.zeros(3, np.int8),
                 "b": np.arange(4, dtype=np.int32), "s2": np.array(0.1, np.float32)}
    model = onnx_model(nodes, {"x": np.ones((2, 3), np.float32)}, [("y", F32, [2, 4])],
                       constants)
    graph = load(model, opt_level=1).graph
    assert set(graph.dequantized) == {"w"}
    q, scale, zero, axis = graph.dequantized["w"]
    assert q.tolist() == constants["q"].tolist() and scale.tolist() == [0.5, 0.25, 2.0]
    assert zero.tolist() == [0, 0, 0] and axis == 0


# --- what the rewrites leave alone -----------------------------------------------------------

def test_pairs_the_rewrite_cannot_prove_are_left_as_they_are():
    """A quantized value that is also a graph output and a per-axis pair keep their nodes,
    and their results; a DequantizeLinear of the same zero point and another scale becomes a
    fake quantization that dequantizes with its scale."""
    rng = np.random.default_rng(15)
    x = _values(rng, (4, 6))
    constants = {"s": np.array(0.05, np.float32), "s2": np.array(0.07, np.float32),
                 "z": np.array(10, np.uint8), "sa": np.full(6, 0.05, np.float32),
                 "za": np.full(6, 10, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y2"]),
             helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["q3"], axis=1),
             helper.make_node("DequantizeLinear", ["q3", "sa", "za"], ["y3"], axis=1)]
    model = onnx_model(nodes, {"x": x}, [("q", U8, [4, 6]), ("y", F32, [4, 6]),
                                         ("y2", F32, [4, 6]), ("y3", F32, [4, 6])], constants)
    compiled = _same_as_onnxruntime(model, {"x": x})
    assert "fake quantization: 1 QuantizeLinear" in compiled.stage_text("plan")


def test_pairs_whose_ends_dequantize_with_several_scales_through_a_move():
    """A QuantizeLinear whose value passes a Reshape to two DequantizeLinears of different
    scales (a QOperator model's value read by a layer and by QLinearMul's scale-1 form):
    one node leaves ``q - z`` and each end multiplies by its scale; exact, all float."""
    rng = np.random.default_rng(16)
    x = _values(rng, (4, 6))
    constants = {"s": np.array(0.05, np.float32), "one": np.array(1.0, np.float32),
                 "z": np.array(10, np.uint8), "shape": np.array([6, 4], np.int64)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("Reshape", ["q", "shape"], ["r"]),
             helper.make_node("DequantizeLinear", ["r", "s", "z"], ["y"]),
             helper.make_node("DequantizeLinear", ["r", "one", "z"], ["y1"])]
    model = onnx_model(nodes, {"x": x}, [("y", F32, [6, 4]), ("y1", F32, [6, 4])], constants)
    compiled = _same_as_onnxruntime(model, {"x": x})
    assert "fake quantization: 1 QuantizeLinear" in compiled.stage_text("plan")
    assert "QuantizeLinear(" not in compiled.stage_text("passes").split(
        "== after fake quantization ==")[1].split("== after")[0]


def test_pairs_through_split_expand_and_slice():
    """A QOperator transformer splits its fused QKV product in 8 bits, and Llama repeats its
    key heads with Expand: the paths through Split (every output), Expand and Slice end in
    DequantizeLinears, so the pair is one fake quantization; exact."""
    rng = np.random.default_rng(17)
    x = _values(rng, (2, 6, 4))
    constants = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8),
                 "sizes": np.array([2, 4], np.int64), "shape": np.array([3, 2, 2, 4], np.int64),
                 "starts": np.array([1], np.int64), "ends": np.array([3], np.int64)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("Split", ["q", "sizes"], ["a", "b"], axis=1),
             helper.make_node("DequantizeLinear", ["a", "s", "z"], ["ya"]),
             helper.make_node("Expand", ["a", "shape"], ["e"]),
             helper.make_node("DequantizeLinear", ["e", "s", "z"], ["ye"]),
             helper.make_node("Slice", ["b", "starts", "ends"], ["c"]),
             helper.make_node("DequantizeLinear", ["c", "s", "z"], ["yc"])]
    model = onnx_model(nodes, {"x": x}, [("ya", F32, [2, 2, 4]), ("ye", F32, [3, 2, 2, 4]),
                                         ("yc", F32, [1, 4, 4])], constants)
    compiled = _same_as_onnxruntime(model, {"x": x})
    assert "fake quantization: 1 QuantizeLinear" in compiled.stage_text("plan")


# --- errors ----------------------------------------------------------------------------------

def test_bad_quantized_models_get_clear_errors():
    x = np.ones((2, 3), np.float32)
    wrong_axis = onnx_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
                            {"x": x}, [("y", U8, [2, 3])],
                            {"s": np.ones(2, np.float32), "z": np.zeros(2, np.uint8)})
    with pytest.raises(ta.ShapeError, match="length 3"):
        tonnx.load(wrong_axis, opt_level=0).run({"x": x})
    nan = onnx_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
                     {"x": x}, [("y", U8, [2, 3]), ("s", F32, []), ("z", U8, [])])
    bad = x.copy()
    bad[0, 1] = np.nan
    with pytest.raises(ta.InputError, match="NaN"):
        tonnx.load(nan, opt_level=0).run({"x": bad})
    wide = np.ones((2, 3), np.int16)
    product = onnx_model([helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
                         {"a": np.ones((2, 3), np.uint8)}, [("y", I32, [2, 2])],
                         {"b": np.ones((3, 2), np.uint8)})
    with pytest.raises(ta.UnsupportedError, match="int8 or uint8"):
        from tensoralg.onnx.ops.kernels import KernelSet, NodeContext
        from tensoralg.onnx.ops.quantize import matmul_integer

        node = NodeContext("n", "MatMulInteger", ("a", "b"), ("y",), 10, KernelSet("llvm"))
        matmul_integer(node, wide, np.ones((3, 2), np.uint8))
    assert tonnx.load(product, opt_level=0).run({"a": np.ones((2, 3), np.uint8)})["y"].tolist() \
        == [[3, 3], [3, 3]]
    float8 = onnx_model([helper.make_node("QuantizeLinear", ["x", "s"], ["y"],
                                          output_dtype=TensorProto.FLOAT8E4M3FN)],
                        {"x": x}, [("y", TensorProto.FLOAT8E4M3FN, [2, 3])],
                        {"s": np.array(1.0, np.float32)}, opset=21)
    with pytest.raises(ta.UnsupportedError):
        tonnx.load(float8, opt_level=0).run({"x": x})


def test_pairs_through_movement_ops_and_with_an_infinite_scale_are_rewritten():
    """onnxruntime's quantizer leaves a Transpose in 8 bits between a QuantizeLinear and its
    DequantizeLinear (before an attention product), and calibrating over a -inf mask gives
    an infinite scale: both pairs become float statements and keep onnxruntime's values
    (NaN where it gives NaN)."""
    rng = np.random.default_rng(16)
    x = _values(rng, (2, 3, 4))
    x[0, 0, 0] = -np.inf
    constants = {"s": np.array(0.05, np.float32), "z": np.array(3, np.int8),
                 "inf": np.array(np.inf, np.float32), "z0": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("Transpose", ["q"], ["t"], perm=[0, 2, 1]),
             helper.make_node("DequantizeLinear", ["t", "s", "z"], ["y"]),
             helper.make_node("QuantizeLinear", ["x", "inf", "z0"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "inf", "z0"], ["y2"])]
    model = onnx_model(nodes, {"x": x}, [("y", F32, [2, 4, 3]), ("y2", F32, [2, 3, 4])],
                       constants)
    expected = dict(zip(["y", "y2"], onnxruntime_outputs(model, {"x": x})))
    assert np.isnan(expected["y2"]).any()
    compiled = check_every_level(model, {"x": x}, expected, rtol=0.0, atol=0.0)
    assert "fake quantization: 2 QuantizeLinear" in compiled.stage_text("plan")


@pytest.mark.parametrize("case", ["normal", "positive", "negative", "zeros", "one", "tiny",
                                  "infinite", "huge range", "halves"])
def test_compiled_quantization_parameters_match_the_python_ones(case):
    """``program.quantize_parameters_call`` (the plan's compiled step) gives the scale and zero
    point of ``dynamic_parameters`` bit for bit, at the edges too: a range that holds only 0,
    a range below float32's smallest step (0 / 0), infinities, a range past float32's
    largest value, zero points exactly half-way."""
    from tensoralg import program
    from tensoralg.onnx.ops.kernels import NodeContext
    from tensoralg.onnx.ops.quantize import dynamic_parameters

    rng = np.random.default_rng(5)
    x = {"normal": rng.standard_normal(1000), "positive": rng.random(77) + 1,
         "negative": -rng.random(33) - 2, "zeros": np.zeros(10), "one": np.array([-3.5]),
         "tiny": np.array([0.0, 1e-45]), "infinite": np.array([-np.inf, 1.0]),
         "huge range": np.array([-3e38, 3e38]),
         "halves": np.array([-0.5, 255 * 0.5 - 0.5])}[case].astype(np.float32)
    scale, zero = np.empty((), np.float32), np.empty((), np.float32)
    with np.errstate(all="ignore"):
        want = dynamic_parameters(NodeContext("q", "DynamicQuantizeLinear", ["x"], [], 11, None),
                                  x)
    program.quantize_parameters_call(x, scale, zero, "q")()
    assert scale.tobytes() == np.float32(want[0]).tobytes(), (case, scale, want)
    assert float(zero) == float(want[1]), (case, zero, want)


def test_dynamically_quantized_product_in_the_plan_refuses_nan(tmp_path):
    """The level-3 plan runs DynamicQuantizeParameters as one compiled call of its sequence;
    a NaN fed after the plan is built is still an InputError naming the node."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    source, target = tmp_path / "mlp.onnx", tmp_path / "mlp.quant.onnx"
    onnx.save(_mlp(np.random.default_rng(12)), source)
    quantization.quantize_dynamic(str(source), str(target),
                                  weight_type=quantization.QuantType.QInt8)
    compiled = tonnx.load(onnx.load(target), opt_level=3)
    x = np.random.default_rng(13).standard_normal((5, 32)).astype(np.float32)
    for _ in range(3):
        compiled.run({"x": x})
    # both DynamicQuantizeParameters steps are calls of the one compiled sequence (4 calls
    # with the int8 GEMM, its rescale, bias and ReLU in registers; 6 on the float route)
    assert re.search(r"[46] kernel calls in 1 compiled sequence", compiled.stage_text("plan"))
    bad = x.copy()
    bad[2, 7] = np.nan
    with pytest.raises(ta.InputError, match="QuantizeLinear.*NaN"):
        compiled.run({"x": bad})
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], compiled.run({"x": x})["y"])


def test_quantized_tables_are_dequantized_once_at_load():
    """``DequantizeLinear(Gather(table, ids))`` of a constant 8-bit table becomes a Gather
    of the float table: with one reader, and with two readers of one scale (a QOperator
    deepctr model reads each lookup twice: the second becomes a copy); readers of two
    different scales keep the lookup as it is. onnxruntime's values exactly."""
    rng = np.random.default_rng(30)
    ids = rng.integers(0, 50, (7, 3)).astype(np.int64)
    constants = {"t1": rng.integers(0, 256, (50, 4)).astype(np.uint8),
                 "t2": rng.integers(-128, 128, (50, 4)).astype(np.int8),
                 "t3": rng.integers(0, 256, (50, 4)).astype(np.uint8),
                 "s": np.array(0.03, np.float32), "z": np.array(100, np.uint8),
                 "s2": np.array(0.05, np.float32), "z2": np.array(-3, np.int8),
                 "s3": np.array(0.07, np.float32)}
    nodes = [helper.make_node("Gather", ["t1", "ids"], ["g1"]),
             helper.make_node("DequantizeLinear", ["g1", "s", "z"], ["y1"]),
             helper.make_node("Gather", ["t2", "ids"], ["g2"]),
             helper.make_node("DequantizeLinear", ["g2", "s2", "z2"], ["a"]),
             helper.make_node("DequantizeLinear", ["g2", "s2", "z2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y2"]),
             helper.make_node("Gather", ["t3", "ids"], ["g3"]),
             helper.make_node("DequantizeLinear", ["g3", "s", "z"], ["c"]),
             helper.make_node("DequantizeLinear", ["g3", "s3", "z"], ["d"]),
             helper.make_node("Sub", ["c", "d"], ["y3"])]
    model = onnx_model(nodes, {"ids": ids}, [(name, F32, [7, 3, 4]) for name in
                                             ("y1", "y2", "y3")], constants)
    compiled = _same_as_onnxruntime(model, {"ids": ids})
    assert "quantized tables: 2 Gather -> DequantizeLinear lookup(s) over 2 table(s)" in \
        compiled.stage_text("plan")


def test_pointwise_layers_take_the_int8_kernel_and_the_next_fake_quantization():
    """A QDQ block of two pointwise convolutions (16 input channels: the kernel over NCHW
    positions takes it from 8) whose first output's fake quantization is read by the second
    layer and by a residual Add: the first layer applies bias, ReLU and that fake
    quantization in registers, and the second reads its result. Scales are powers of two, so
    every route computes exactly and all agree with onnxruntime bit for bit."""
    from tensoralg import program

    if not program.int8_gemm_supported():
        pytest.skip("this host has no AVX-512 VNNI: the int8 GEMM cannot run")
    rng = np.random.default_rng(31)
    x = (rng.integers(-60, 60, (2, 16, 5, 7)) / 8).astype(np.float32)
    constants = {"s": np.array(1 / 8, np.float32), "z": np.array(3, np.uint8),
                 "s2": np.array(1 / 4, np.float32), "z2": np.array(0, np.uint8),
                 "w1": rng.integers(-8, 8, (16, 16, 1, 1)).astype(np.int8),
                 "w2": rng.integers(-8, 8, (16, 16, 1, 1)).astype(np.int8),
                 "ws": np.array(1 / 16, np.float32),
                 "b1": (rng.integers(-64, 64, 16) / 32).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w1", "ws"], ["w1f"]),
             helper.make_node("DequantizeLinear", ["w2", "ws"], ["w2f"]),
             helper.make_node("Conv", ["xf", "w1f", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("QuantizeLinear", ["r1", "s2", "z2"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s2", "z2"], ["rf"]),
             helper.make_node("Conv", ["rf", "w2f"], ["c2"]),
             helper.make_node("Add", ["c2", "rf"], ["y"])]
    model = onnx_model(nodes, {"x": x}, [("y", F32, [2, 16, 5, 7])], constants)
    compiled = _same_as_onnxruntime(model, {"x": x})
    plan = compiled.stage_text("plan")
    assert "static int8 products: 2 Conv/MatMul/Gemm" in plan
    assert "over NCHW positions" in plan and "fake quantization (0.25, 0.0)" in plan


@pytest.mark.parametrize("batch", [1, 2])
def test_int8_convolutions_write_into_their_concat(batch):
    """SqueezeNet's fire module in QDQ form: a pointwise and a 3x3 int8 convolution joined by
    a Concat. At batch 1 each writes its channel block of the Concat's output (a contiguous
    block), which then copies nothing; at batch 2 the Concat copies. Powers of two: exact."""
    from tensoralg import program

    if not program.int8_gemm_supported():
        pytest.skip("this host has no AVX-512 VNNI: the int8 GEMM cannot run")
    rng = np.random.default_rng(32)
    x = (rng.integers(-60, 60, (batch, 16, 6, 6)) / 8).astype(np.float32)
    constants = {"s": np.array(1 / 8, np.float32), "z": np.array(3, np.uint8),
                 "w1": rng.integers(-8, 8, (8, 16, 1, 1)).astype(np.int8),
                 "w3": rng.integers(-8, 8, (8, 16, 3, 3)).astype(np.int8),
                 "ws": np.array(1 / 16, np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w1", "ws"], ["w1f"]),
             helper.make_node("DequantizeLinear", ["w3", "ws"], ["w3f"]),
             helper.make_node("Conv", ["xf", "w1f"], ["a"]),
             helper.make_node("Conv", ["xf", "w3f"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("Concat", ["ar", "br"], ["c"], axis=1),
             helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = onnx_model(nodes, {"x": x}, [("y", F32, [batch, 16, 3, 3])], constants)
    compiled = _same_as_onnxruntime(model, {"x": x})
    plan = compiled.stage_text("plan")
    assert "static int8 products: 2 Conv/MatMul/Gemm" in plan
    assert ("1 in place" in plan) == (batch == 1)
