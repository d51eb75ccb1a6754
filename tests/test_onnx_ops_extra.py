"""Conv, pooling, LayerNormalization/InstanceNormalization, Einsum, Expand and GatherND
through tensoralg.onnx, compared with onnxruntime on models built with onnx.helper; the small
CNN of the importer issue at every opt level; and one error test per user mistake.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
F32 = TensorProto.FLOAT


def _info(name, array):
    elem = helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, elem, list(array.shape))


def _single_node_model(op_type, feeds, constants=None, outputs=("y",), opset=18, **attributes):
    """A model of one node whose inputs are ``feeds`` then ``constants`` (initializers)."""
    constants = constants or {}
    inputs = list(feeds) + list(constants)
    node = helper.make_node(op_type, inputs, list(outputs), name=op_type.lower(), **attributes)
    graph = helper.make_graph(
        [node], op_type, [_info(n, a) for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(a, n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    rank = next(iter(feeds.values())).ndim
    for output in model.graph.output:  # inference fails on the bad models of the error tests
        tensor_type = output.type.tensor_type
        if not tensor_type.elem_type:
            tensor_type.elem_type = F32
        if not tensor_type.HasField("shape"):
            for k in range(rank):
                tensor_type.shape.dim.add().dim_param = f"d{k}"
    return model


def _compare(model, feeds, opt_levels=(0,)):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    for level in opt_levels:
        got = tonnx.load(model, opt_level=level).run(feeds)
        for info, want in zip(session.get_outputs(), expected):
            actual = got[info.name]
            assert actual.dtype == want.dtype, f"{info.name} at level {level}"
            assert actual.shape == want.shape, f"{info.name} at level {level}"
            np.testing.assert_allclose(actual, want, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{info.name} at opt level {level}")


def _rng():
    return np.random.default_rng(7)


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


CONV_CASES = [
    ("plain", (1, 3, 7, 7), (4, 3, 3, 3), {}),
    ("pads_strides", (2, 3, 8, 7), (5, 3, 3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 3])),
    ("dilations", (1, 2, 9, 9), (3, 2, 3, 3), dict(dilations=[2, 3], pads=[1, 1, 1, 1])),
    ("groups", (2, 4, 6, 6), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    ("depthwise", (1, 4, 5, 5), (4, 1, 3, 3), dict(group=4, strides=[2, 2])),
    ("same_upper", (1, 2, 7, 6), (3, 2, 4, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    ("same_lower", (1, 2, 7, 6), (3, 2, 4, 3), dict(auto_pad="SAME_LOWER", strides=[2, 1])),
    ("valid", (1, 2, 7, 6), (3, 2, 2, 3), dict(auto_pad="VALID", strides=[3, 2])),
    ("conv1d", (2, 3, 11), (4, 3, 3), dict(pads=[2, 1], strides=[2], dilations=[2])),
    ("conv3d", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(pads=[0, 1, 0, 1, 0, 1])),
    ("blas", (2, 16, 12, 12), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("name, x_shape, w_shape, attributes", CONV_CASES,
                         ids=[c[0] for c in CONV_CASES])
def test_conv_matches_onnxruntime(name, x_shape, w_shape, attributes, bias):
    rng = _rng()
    constants = {"w": _normal(rng, *w_shape)}
    if bias:
        constants["b"] = _normal(rng, w_shape[0])
    model = _single_node_model("Conv", {"x": _normal(rng, *x_shape)}, constants, **attributes)
    _compare(model, {"x": _normal(rng, *x_shape)})


def test_conv_plan_shows_im2col_and_the_contraction():
    rng = _rng()
    model = _single_node_model("Conv", {"x": _normal(rng, 1, 2, 5, 5)},
                               {"w": _normal(rng, 3, 2, 3, 3), "b": _normal(rng, 3)})
    compiled = tonnx.load(model, opt_level=0)
    compiled.run({"x": _normal(rng, 1, 2, 5, 5)})
    plan = compiled.ir()
    assert "im2col" in plan
    assert "Y(n,g,m,p) = sum(k, W(g,m,k) * P(n,g,k,p)) + B(g,m)" in plan


POOL_CASES = [
    ("plain", (1, 3, 6, 6), dict(kernel_shape=[2, 2])),
    ("strides_pads", (2, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("asymmetric_pads", (1, 2, 7, 5), dict(kernel_shape=[3, 2], pads=[0, 1, 2, 1])),
    ("ceil_mode", (1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("ceil_mode_pads", (1, 1, 6, 6),
     dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),
    ("same_upper", (1, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("same_lower", (1, 2, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_LOWER")),
    ("pool1d", (2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ("pool3d", (1, 2, 4, 5, 4), dict(kernel_shape=[2, 2, 2])),
]


@pytest.mark.parametrize("name, x_shape, attributes", POOL_CASES, ids=[c[0] for c in POOL_CASES])
@pytest.mark.parametrize("op_type, extra", [
    ("MaxPool", {}), ("AveragePool", {}), ("AveragePool", {"count_include_pad": 1})],
    ids=["max", "average", "average_include_pad"])
def test_pool_matches_onnxruntime(op_type, extra, name, x_shape, attributes):
    rng = _rng()
    model = _single_node_model(op_type, {"x": _normal(rng, *x_shape)}, **attributes, **extra)
    _compare(model, {"x": _normal(rng, *x_shape)})


def test_max_pool_with_dilations_and_indices():
    rng = _rng()
    x = _normal(rng, 2, 3, 8, 7)
    model = _single_node_model("MaxPool", {"x": x}, outputs=("y", "indices"),
                               kernel_shape=[2, 3], dilations=[2, 1], pads=[1, 1, 0, 1])
    _compare(model, {"x": x})


def test_max_pool_of_integers_pads_with_the_smallest_value():
    x = -np.arange(1, 26, dtype=np.int32).reshape(1, 1, 5, 5)
    model = _single_node_model("MaxPool", {"x": x}, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    y = tonnx.load(model, opt_level=0).run({"x": x})["y"]
    assert y.dtype == np.int32 and y[0, 0, 0, 0] == -1


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 4, 7), (1, 2, 3, 2, 2)])
def test_global_pool_matches_onnxruntime(op_type, shape):
    rng = _rng()
    model = _single_node_model(op_type, {"x": _normal(rng, *shape)})
    _compare(model, {"x": _normal(rng, *shape)})


@pytest.mark.parametrize("axis", [-1, -2, 0, 1])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization_matches_onnxruntime(axis, bias):
    rng = _rng()
    x = _normal(rng, 2, 3, 5) * 3 + 1
    normalised = x.shape[axis % x.ndim:]
    constants = {"scale": _normal(rng, *normalised)}
    if bias:
        constants["bias"] = _normal(rng, *normalised)
    model = _single_node_model("LayerNormalization", {"x": x}, constants,
                               outputs=("y", "mean", "inv_std"), axis=axis, epsilon=1e-3)
    _compare(model, {"x": x})


def test_layer_normalization_broadcasts_a_smaller_scale():
    rng = _rng()
    x = _normal(rng, 4, 3, 6)
    model = _single_node_model("LayerNormalization", {"x": x},
                               {"scale": _normal(rng, 6), "bias": _normal(rng, 1, 6)}, axis=1)
    _compare(model, {"x": x})


def test_instance_normalization_matches_onnxruntime():
    rng = _rng()
    x = _normal(rng, 2, 3, 4, 5)
    model = _single_node_model("InstanceNormalization", {"x": x},
                               {"scale": _normal(rng, 3), "bias": _normal(rng, 3)}, epsilon=1e-4)
    _compare(model, {"x": x})


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ij,j", [(3, 4), (4,)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_onnxruntime(equation, shapes):
    rng = _rng()
    feeds = {f"x{k}": _normal(rng, *shape) for k, shape in enumerate(shapes)}
    model = _single_node_model("Einsum", feeds, equation=equation)
    _compare(model, feeds)


def test_einsum_of_integers():
    feeds = {"a": np.arange(12, dtype=np.int64).reshape(3, 4),
             "b": np.arange(4, dtype=np.int64)}
    model = _single_node_model("Einsum", feeds, equation="ij,j->i")
    _compare(model, feeds)


@pytest.mark.parametrize("x_shape, shape", [((3, 1), [2, 1, 4]), ((1, 4), [3, 1]),
                                            ((2, 3), [3]), ((), [2, 2])])
def test_expand_matches_onnxruntime(x_shape, shape):
    rng = _rng()
    x = _normal(rng, *x_shape)
    model = _single_node_model("Expand", {"x": x}, {"shape": np.array(shape, np.int64)})
    _compare(model, {"x": x})


def test_expand_feeds_a_kernel():
    """An Expand view (zero strides) is a valid operand of the next tensoralg kernel."""
    rng = _rng()
    x, z = _normal(rng, 3, 1), _normal(rng, 3, 4)
    nodes = [helper.make_node("Expand", ["x", "shape"], ["e"]),
             helper.make_node("Add", ["e", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [_info("x", x), _info("z", z)],
                              [helper.make_tensor_value_info("y", F32, [3, 4])],
                              [numpy_helper.from_array(np.array([3, 4], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    _compare(model, {"x": x, "z": z}, opt_levels=(0, 1))


@pytest.mark.parametrize("data_shape, index_shape, batch_dims", [
    ((5, 4, 3), (6, 2), 0), ((5, 4), (2, 3, 2), 0), ((5, 4, 3), (7, 1), 0),
    ((2, 4, 3), (2, 5, 1), 1), ((2, 3, 4, 5), (2, 3, 2, 1), 2)])
def test_gather_nd_matches_onnxruntime(data_shape, index_shape, batch_dims):
    rng = _rng()
    data = _normal(rng, *data_shape)
    depth = index_shape[-1]
    bounds = np.array(data_shape[batch_dims:batch_dims + depth])
    indices = (rng.integers(0, 1 << 30, index_shape) % bounds).astype(np.int64)
    indices[..., 0] -= bounds[0] * (rng.random(index_shape[:-1]) < 0.3)   # some negative
    model = _single_node_model("GatherND", {"data": data}, {"indices": indices},
                               batch_dims=batch_dims)
    _compare(model, {"data": data})


def small_cnn(rng):
    """Conv -> BatchNormalization -> Relu -> Conv -> Relu -> Flatten -> Gemm on 1x3x8x8."""
    h = helper
    nodes = [h.make_node("Conv", ["x", "W1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("BatchNormalization", ["c1", "gamma", "beta", "mu", "var"], ["bn"],
                         epsilon=1e-5, name="bn1"),
             h.make_node("Relu", ["bn"], ["r1"], name="relu1"),
             h.make_node("Conv", ["r1", "W2", "b2"], ["c2"], strides=[2, 2], name="conv2"),
             h.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             h.make_node("Flatten", ["r2"], ["flat"], axis=1, name="flatten"),
             h.make_node("Gemm", ["flat", "W3", "b3"], ["y"], transB=1, name="fc")]
    inits = {"W1": _normal(rng, 8, 3, 3, 3) * 0.3, "b1": _normal(rng, 8) * 0.1,
             "gamma": rng.uniform(0.5, 1.5, 8).astype(np.float32),
             "beta": _normal(rng, 8) * 0.1, "mu": _normal(rng, 8) * 0.1,
             "var": rng.uniform(0.5, 2.0, 8).astype(np.float32),
             "W2": _normal(rng, 16, 8, 3, 3) * 0.2, "b2": _normal(rng, 16) * 0.1,
             "W3": _normal(rng, 10, 16 * 3 * 3) * 0.1, "b3": _normal(rng, 10) * 0.1}
    graph = h.make_graph(nodes, "small_cnn", [h.make_tensor_value_info("x", F32, [1, 3, 8, 8])],
                         [h.make_tensor_value_info("y", F32, [1, 10])],
                         [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, {"x": _normal(rng, 1, 3, 8, 8)}


def test_small_cnn_matches_onnxruntime_at_every_opt_level():
    model, feeds = small_cnn(_rng())
    _compare(model, feeds, opt_levels=(0, 1, 2, 3))


# One test per user mistake: a clear tensoralg error naming the node, never a crash.

def test_conv_with_groups_that_do_not_divide_the_channels():
    rng = _rng()
    x = _normal(rng, 1, 4, 5, 5)
    model = _single_node_model("Conv", {"x": x}, {"w": _normal(rng, 3, 2, 3, 3)}, group=2)
    with pytest.raises(ta.ShapeError, match=r"conv.*group=2"):
        tonnx.load(model, opt_level=0).run({"x": x})


def test_pool_window_larger_than_the_input():
    x = np.zeros((1, 1, 2, 2), np.float32)
    model = _single_node_model("MaxPool", {"x": x}, kernel_shape=[3, 3])
    with pytest.raises(ta.ShapeError, match=r"maxpool.*does not fit"):
        tonnx.load(model, opt_level=0).run({"x": x})


def test_einsum_with_the_wrong_number_of_operands():
    x = np.ones((2, 2), np.float32)
    model = _single_node_model("Einsum", {"x": x}, equation="ij,jk->ik")
    with pytest.raises(ta.TensorAlgebraError, match=r"einsum"):
        tonnx.load(model, opt_level=0).run({"x": x})


def test_gather_nd_index_out_of_range():
    data = np.ones((3, 4), np.float32)
    model = _single_node_model("GatherND", {"data": data},
                               {"indices": np.array([[0, 4]], np.int64)})
    with pytest.raises(ta.ShapeError, match=r"gathernd.*outside"):
        tonnx.load(model, opt_level=0).run({"data": data})


def test_expand_to_a_shape_that_does_not_broadcast():
    x = np.ones((3, 2), np.float32)
    model = _single_node_model("Expand", {"x": x}, {"shape": np.array([4, 3], np.int64)})
    with pytest.raises(ta.ShapeError, match=r"expand.*does not broadcast"):
        tonnx.load(model, opt_level=0).run({"x": x})
