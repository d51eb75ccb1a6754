"""onnxruntime's QOperator format (``onnx/frontend/qoperator.py``): the ``com.microsoft``
quantized ops and constant-weight QLinearConv/QLinearMatMul read as DequantizeLinear -> float
op -> QuantizeLinear.

- each contrib op alone against onnxruntime, at every opt level: the same integers (every op
  whose onnxruntime kernel computes its float definition), on random 8-bit inputs of both
  types, with and without zero points;
- ``QLinearReduceMean``, which onnxruntime's CPU provider lacks, against the op's formula;
- layers with constant weights, and whole models written by onnxruntime's quantizer in the
  QOperator format: within one quantization step of onnxruntime (the layer sums dequantized
  values and rounds once, where onnxruntime rescales int32 sums), and on the int8 kernels
  where the host has them;
- the errors: other contrib ops, ``channels_last``, contrib ops inside a subgraph.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnxruntime_outputs  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

F32, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
MS = "com.microsoft"


def _model(nodes, inputs, outputs, constants, opset=17):
    """A model of ``nodes`` importing the com.microsoft domain; outputs as (name, type,
    rank)."""
    graph = helper.make_graph(
        nodes, "qoperator",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                       list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, elem, [f"d{k}" for k in range(rank)])
         for n, elem, rank in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _scalars(dtype, **values):
    """Scales (floats) as float32 and zero points (ints) as ``dtype`` scalars."""
    return {k: np.array(v, np.float32 if isinstance(v, float) else dtype)
            for k, v in values.items()}


def _quantized(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


TYPES = [(np.uint8, U8, 120), (np.int8, I8, -7)]


@pytest.mark.parametrize("dtype, elem, zero", TYPES, ids=["uint8", "int8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_ops(op, dtype, elem, zero):
    """Broadcasting A (2, 3, 5, 7) against B (3, 5, 7)."""
    rng = np.random.default_rng(1)
    a, b = _quantized(rng, dtype, (2, 3, 5, 7)), _quantized(rng, dtype, (3, 5, 7))
    constants = _scalars(dtype, as_=0.05, az=zero, bs=0.03, bz=10, cs=0.07, cz=zero // 2)
    constants = {k.rstrip("_"): v for k, v in constants.items()}
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"],
                            domain=MS)
    check_every_level(_model([node], {"a": a, "b": b}, [("c", elem, 4)], constants),
                      {"a": a, "b": b}, rtol=0, atol=0)


UNARY = [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1}),
         ("QLinearGlobalAveragePool", {"channels_last": 0}),
         ("QLinearAveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                 "strides": [2, 2]}),
         ("QLinearAveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                 "count_include_pad": 1}),
         ("QLinearSoftmax", {"axis": -1, "opset": 13}),
         ("QLinearSoftmax", {"axis": 1, "opset": 11})]


@pytest.mark.parametrize("dtype, elem, zero", TYPES, ids=["uint8", "int8"])
@pytest.mark.parametrize("op, attributes", UNARY,
                         ids=[f"{op} {sorted(a.items())}" for op, a in UNARY])
def test_unary_ops(op, attributes, dtype, elem, zero):
    """Softmax with ``opset`` 11 normalises the input flattened at ``axis`` (rows of 105)."""
    rng = np.random.default_rng(2)
    x = _quantized(rng, dtype, (2, 3, 5, 7))
    softmax = op == "QLinearSoftmax"
    out_zero = (0 if dtype == np.uint8 else -128) if softmax else 3
    constants = _scalars(dtype, xs=0.05, xz=zero, ys=1 / 256 if softmax else 0.01,
                         yz=out_zero)
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attributes)
    model = _model([node], {"x": x}, [("y", elem, 4)], constants)
    if op == "QLinearAveragePool":
        # onnxruntime sums each window row by row; the generated sum may associate otherwise,
        # which decides a tie between two steps differently now and then
        _within_a_step(model, {"x": x}, share=0.1)
    else:
        check_every_level(model, {"x": x}, rtol=0, atol=0)


def test_concat_of_inputs_on_different_grids():
    rng = np.random.default_rng(3)
    a, b = _quantized(rng, np.uint8, (2, 3, 4)), _quantized(rng, np.uint8, (2, 5, 4))
    constants = _scalars(np.uint8, ys=0.05, yz=128, s1=0.02, z1=3, s2=0.09, z2=200)
    node = helper.make_node("QLinearConcat", ["ys", "yz", "a", "s1", "z1", "b", "s2", "z2"],
                            ["y"], domain=MS, axis=1)
    check_every_level(_model([node], {"a": a, "b": b}, [("y", U8, 3)], constants),
                      {"a": a, "b": b}, rtol=0, atol=0)


def test_where():
    rng = np.random.default_rng(4)
    a, b = _quantized(rng, np.uint8, (3, 5, 7)), _quantized(rng, np.uint8, (5, 7))
    condition = rng.random((3, 5, 7)) > 0.5
    constants = _scalars(np.uint8, xs=0.05, xz=120, bs=0.03, bz=10, zs=0.04, zz=9)
    node = helper.make_node("QLinearWhere", ["c", "a", "xs", "xz", "b", "bs", "bz", "zs", "zz"],
                            ["y"], domain=MS)
    feeds = {"c": condition, "a": a, "b": b}
    check_every_level(_model([node], feeds, [("y", U8, 3)], constants), feeds, rtol=0, atol=0)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("quantized_output", [True, False], ids=["uint8 Y", "float Y"])
def test_qgemm(alpha, trans_b, quantized_output):
    """``alpha * (A'B' + C)``, C an int32 bias on the grid ``a_scale * b_scale`` (per output
    column); without ``y_scale`` the result is float32 (within float rounding)."""
    rng = np.random.default_rng(5)
    a = _quantized(rng, np.uint8, (6, 40))
    b = rng.integers(-127, 128, (9, 40) if trans_b else (40, 9)).astype(np.int8)
    constants = {"as": np.array(0.02, np.float32), "az": np.array(100, np.uint8), "b": b,
                 "bs": (rng.random(9) * 0.01 + 0.001).astype(np.float32),
                 "bz": np.zeros(9, np.int8),
                 "c": rng.integers(-3000, 3000, 9).astype(np.int32)}
    inputs = ["a", "as", "az", "b", "bs", "bz", "c"]
    if quantized_output:
        constants.update(ys=np.array(0.3, np.float32), yz=np.array(128, np.uint8))
        inputs += ["ys", "yz"]
    node = helper.make_node("QGemm", inputs, ["y"], domain=MS, alpha=alpha, transB=trans_b)
    model = _model([node], {"a": a}, [("y", U8 if quantized_output else F32, 2)], constants)
    check_every_level(model, {"a": a}, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("opset", [17, 18])
def test_reduce_mean_against_its_formula(opset):
    """onnxruntime's CPU provider has no QLinearReduceMean: the op's definition is the oracle
    (``axes`` an attribute of the contrib op, an input of ReduceMean from opset 18)."""
    rng = np.random.default_rng(6)
    x = _quantized(rng, np.uint8, (2, 3, 5, 7))
    constants = _scalars(np.uint8, xs=0.05, xz=120, ys=0.01, yz=3)
    node = helper.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, axes=[2, 3], keepdims=1)
    model = _model([node], {"x": x}, [("y", U8, 4)], constants, opset=opset)
    mean = ((x.astype(np.float32) - np.float32(120)) * np.float32(0.05)).mean(
        axis=(2, 3), keepdims=True, dtype=np.float32)
    want = np.clip(np.rint(mean / np.float32(0.01)) + 3, 0, 255).astype(np.uint8)
    check_every_level(model, {"x": x}, expected={"y": want}, rtol=0, atol=0)


# --- layers and models -----------------------------------------------------------------------

def _within_a_step(model, feeds, share=0.05):
    """Every opt level's integer outputs within one step of onnxruntime's, in at most
    ``share`` of the values; returns the level-3 model."""
    expected = onnxruntime_outputs(model, feeds)
    compiled = None
    for level in (0, 1, 2, 3):
        compiled = tonnx.load(model, opt_level=level)
        for run in range(2 if level == 3 else 1):
            got = list(compiled.run(feeds).values())
            for have, want in zip(got, expected):
                assert have.dtype == want.dtype and have.shape == want.shape
                gap = np.abs(have.astype(np.float64) - want.astype(np.float64))
                if want.dtype.kind == "f":
                    scale = float(np.abs(want).max(initial=0.0)) or 1.0
                    gap = gap / scale
                    assert gap.max(initial=0.0) <= 0.02, (level, gap.max())
                else:
                    assert gap.max(initial=0.0) <= 1, (level, gap.max())
                    assert np.mean(gap > 0) <= share, (level, np.mean(gap > 0))
    return compiled


def test_constant_weight_layers_are_read_as_qdq():
    """A QLinearConv and a QLinearMatMul with constant weights (per-channel weight scales,
    an int32 bias) become DequantizeLinear -> Conv/MatMul -> QuantizeLinear."""
    rng = np.random.default_rng(7)
    x = _quantized(rng, np.uint8, (2, 16, 9, 8))
    constants = {"xs": np.array(0.02, np.float32), "xz": np.array(100, np.uint8),
                 "w": rng.integers(-127, 128, (24, 16, 3, 3)).astype(np.int8),
                 "ws": (rng.random(24) * 0.002 + 0.0005).astype(np.float32),
                 "wz": np.zeros(24, np.int8), "ys": np.array(0.05, np.float32),
                 "yz": np.array(128, np.uint8),
                 "bias": rng.integers(-5000, 5000, 24).astype(np.int32),
                 "shape": np.array([2, 24 * 9 * 8], np.int64),
                 "m": rng.integers(-127, 128, (24 * 9 * 8, 10)).astype(np.int8),
                 "ms": np.array(0.0004, np.float32), "mz": np.array(0, np.int8),
                 "os": np.array(0.2, np.float32), "oz": np.array(128, np.uint8)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz",
                                              "bias"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["flat"]),
             helper.make_node("QLinearMatMul", ["flat", "ys", "yz", "m", "ms", "mz", "os",
                                                "oz"], ["y"])]
    model = _model(nodes, {"x": x}, [("y", U8, 2)], constants)
    compiled = _within_a_step(model, {"x": x})
    assert "QOperator format read as QDQ: 1 QLinearConv, 1 QLinearMatMul" in \
        compiled.stage_text("plan")


def test_products_of_two_computed_values_are_read_as_qdq():
    """Attention's QLinearMatMul in a QOperator transformer: both operands quantized by the
    graph; it becomes DequantizeLinear -> MatMul -> QuantizeLinear, and the pairs around it
    fake quantizations (all float), within a step of onnxruntime."""
    rng = np.random.default_rng(12)
    a = rng.standard_normal((2, 5, 8)).astype(np.float32)
    b = rng.standard_normal((2, 8, 6)).astype(np.float32)
    constants = _scalars(np.uint8, sa=0.03, za=128, sb=0.02, zb=120, sy=0.05, zy=100)
    nodes = [helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["qa"]),
             helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["qb"]),
             helper.make_node("QLinearMatMul", ["qa", "sa", "za", "qb", "sb", "zb", "sy", "zy"],
                              ["qy"]),
             helper.make_node("DequantizeLinear", ["qy", "sy", "zy"], ["y"])]
    model = _model(nodes, {"a": a, "b": b}, [("y", F32, 3)], constants)
    compiled = _within_a_step(model, {"a": a, "b": b})
    assert "1 QLinearMatMul" in compiled.stage_text("plan")
    assert "fake quantization: 3 QuantizeLinear" in compiled.stage_text("plan")


def test_a_layer_reading_qlinearmul_takes_the_int8_kernel():
    """QLinearMul's result is quantized with scale 1 (its onnxruntime form), and the next
    QLinearMatMul dequantizes it with its own scale: the layer still runs on the int8 GEMM,
    quantizing with 1 and rescaling by the dequantization scale. Powers of two: every route
    is exact, and equal to onnxruntime."""
    from tensoralg import program

    rng = np.random.default_rng(13)
    x = (rng.integers(-40, 40, (6, 16)) / 8).astype(np.float32)
    constants = {**_scalars(np.uint8, s=1 / 8, z=128, cs=1 / 4, cz=120, ms=1 / 2, mz=128,
                            sy=4.0, zy=128),
                 "c": rng.integers(110, 131, (6, 16)).astype(np.uint8),
                 "w": rng.integers(-8, 8, (16, 5)).astype(np.int8),
                 "ws": np.array(1 / 16, np.float32), "wz": np.array(0, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("QLinearMul", ["q", "s", "z", "c", "cs", "cz", "ms", "mz"],
                              ["m"], domain=MS),
             helper.make_node("QLinearMatMul", ["m", "ms", "mz", "w", "ws", "wz", "sy", "zy"],
                              ["qy"]),
             helper.make_node("DequantizeLinear", ["qy", "sy", "zy"], ["y"])]
    model = _model(nodes, {"x": x}, [("y", F32, 2)], constants)
    compiled = check_every_level(model, {"x": x}, rtol=0, atol=0)
    if program.int8_gemm_supported():
        assert "static int8 products: 1 Conv/MatMul/Gemm" in compiled.stage_text("plan")


def _float_cnn(rng):
    """Conv -> Relu -> MaxPool -> Conv + skip -> LeakyRelu -> Concat -> AveragePool ->
    GlobalAveragePool -> Gemm -> Sigmoid: every op onnxruntime's quantizer writes as a
    QOperator node."""
    def weight(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    constants = {"w1": weight(16, 3, 3, 3), "b1": weight(16), "w2": weight(16, 16, 3, 3, scale=0.1),
                 "b2": weight(16), "w3": weight(8, 16, 1, 1), "g": weight(24, 10),
                 "gb": weight(10)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p"], ["s"]),
             helper.make_node("LeakyRelu", ["s"], ["l"], alpha=0.1),
             helper.make_node("Conv", ["l", "w3"], ["c3"]),
             helper.make_node("Concat", ["l", "c3"], ["cat"], axis=1),
             helper.make_node("AveragePool", ["cat"], ["a"], kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["a"], ["gap"]),
             helper.make_node("Flatten", ["gap"], ["f"]),
             helper.make_node("Gemm", ["f", "g", "gb"], ["logits"]),
             helper.make_node("Sigmoid", ["logits"], ["y"])]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", F32, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", F32, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


class _Reader:
    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.batches = iter([{"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
                             for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_models_from_onnxruntimes_quantizer(tmp_path, activation, per_channel):
    """``quantize_static(quant_format=QOperator)``: the model loads, every contrib op is
    rewritten, and the output (float, dequantized at the end) is within a quantization step
    of onnxruntime's; on a host with VNNI the 16-channel convolutions run on the int8 GEMM."""
    from tensoralg import program

    quantization = pytest.importorskip("onnxruntime.quantization")
    source, target = tmp_path / "model.onnx", tmp_path / "model.qop.onnx"
    onnx.save(_float_cnn(np.random.default_rng(8)), source)
    quantization.quantize_static(
        str(source), str(target), _Reader(9), quant_format=quantization.QuantFormat.QOperator,
        per_channel=per_channel, activation_type=getattr(quantization.QuantType, activation),
        weight_type=quantization.QuantType.QInt8)
    model = onnx.load(target)
    contrib = {n.op_type for n in model.graph.node if n.domain == MS}
    assert {"QLinearAdd", "QLinearConcat", "QLinearGlobalAveragePool", "QGemm"} <= contrib
    x = np.random.default_rng(10).standard_normal((3, 3, 16, 16)).astype(np.float32)
    compiled = _within_a_step(model, {"x": x})
    plan = compiled.stage_text("plan")
    assert "QOperator format read as QDQ" in plan
    if program.int8_gemm_supported():
        assert "static int8 products: 0 " not in plan and "static int8 products: none" \
            not in plan


def test_maxpool_between_layers_runs_on_floats_of_the_grid():
    """A QOperator model's MaxPool reads the 8-bit output of one layer and feeds the next:
    the pair around it becomes one fake quantization before a float MaxPool (which commutes
    with a quantization of positive scale), not an 8-bit MaxPool."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    constants = {"s": np.array(0.05, np.float32), "z": np.array(7, np.uint8),
                 "s2": np.array(0.07, np.float32), "z2": np.array(100, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("MaxPool", ["q"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("QLinearSigmoid", ["p", "s", "z", "s2", "z2"], ["y8"],
                              domain=MS),
             helper.make_node("DequantizeLinear", ["y8", "s2", "z2"], ["y"])]
    model = _model(nodes, {"x": x}, [("y", F32, 4)], constants)
    compiled = check_every_level(model, {"x": x}, rtol=0, atol=0)
    text = compiled.stage_text("passes")
    after = text[text.index("== after fake quantization =="):]
    assert "MaxPool" in after and " QuantizeLinear" not in after.split("== after", 2)[1]


# --- errors ----------------------------------------------------------------------------------

def test_other_contrib_ops_are_refused_naming_the_node_and_what_is_read():
    node = helper.make_node("QAttention", ["x"], ["y"], domain=MS, name="attention")
    model = _model([node], {"x": np.zeros((1, 4), np.uint8)}, [("y", U8, 2)], {})
    with pytest.raises(ta.UnsupportedError,
                       match=r"node attention \(QAttention.*'com.microsoft' is not supported.*"
                             r"QLinearAdd.*QuantFormat.QDQ"):
        tonnx.load(model)


def test_channels_last_pooling_is_refused():
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "s", "z", "s", "z"], ["y"],
                            domain=MS, channels_last=1, name="pool")
    model = _model([node], {"x": np.zeros((1, 3, 3, 2), np.uint8)}, [("y", U8, 4)],
                   _scalars(np.uint8, s=0.1, z=0))
    with pytest.raises(ta.UnsupportedError, match=r"node pool \(QLinearGlobalAveragePool\): "
                                                  r"channels_last=1 is not supported"):
        tonnx.load(model)


def test_contrib_ops_inside_a_subgraph_are_refused():
    inner = helper.make_node("QLinearSigmoid", ["x", "s", "z", "s", "z"], ["t"], domain=MS,
                             name="inner")
    branch = helper.make_graph([inner], "branch", [],
                               [helper.make_tensor_value_info("t", U8, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "other", [],
                              [helper.make_tensor_value_info("e", U8, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)
    feeds = {"c": np.array(True), "x": np.zeros(2, np.uint8)}
    model = _model([node], feeds, [("y", U8, 1)], _scalars(np.uint8, s=0.1, z=0))
    with pytest.raises(ta.UnsupportedError, match=r"node inner.*QLinearSigmoid.*com.microsoft"):
        tonnx.load(model)


@pytest.mark.parametrize("op, inputs", [("QLinearAdd", ["x", "s", "z", "x"]),
                                        ("QLinearConcat", ["s", "z", "x", "s"]),
                                        ("QGemm", ["x", "s"])])
def test_malformed_contrib_nodes_are_model_errors(op, inputs):
    """onnx.checker does not know the com.microsoft schemas: a node with too few inputs is
    a ModelError naming it and what it takes, not an IndexError."""
    node = helper.make_node(op, inputs, ["y"], domain=MS, name="bad")
    model = _model([node], {"x": np.zeros((2, 3), np.uint8)}, [("y", U8, 2)],
                   _scalars(np.uint8, s=0.1, z=0))
    with pytest.raises(ta.ModelError, match=rf"node bad \({op}\): {len(inputs)} input\(s\)"):
        tonnx.load(model)
