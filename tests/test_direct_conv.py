"""Convolutions with their weights compiled in (codegen/conv.py, runtime/conv.py) and their use
by the ONNX importer: Conv+Relu joined at level 2, zero weights left out at level 3."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import real_scipy
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
import tensoralg.onnx as tonnx
from tensoralg.codegen.conv import MAX_UNROLLED, MAX_UNROLLED_DENSE, blocks_of
from tensoralg.runtime.conv import DirectConv
from tensoralg.runtime.pool import native_pool_supported
from tensoralg.runtime.sequence import CallSequence
from tensoralg.runtime.threads import KernelThreads

TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _built(weight, bias, image, **kwargs):
    conv = ta.api.direct_conv(weight, bias, image, **kwargs)
    if conv is None:
        pytest.skip("this host has no AVX-512: convolutions use the GEMM path")
    return conv


def _reference(x, w, b, strides, dilations, pads_begin, pads_end, groups, relu):
    """The convolution in float64, one kernel cell at a time over a zero-padded copy."""
    n, c, height, width = x.shape
    m, per_group, kh, kw = w.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads_begin[0], pads_end[0]),
                                           (pads_begin[1], pads_end[1])))
    oh = (height + pads_begin[0] + pads_end[0] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (width + pads_begin[1] + pads_end[1] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    for out in range(m):
        group = out // (m // groups)
        for ch in range(per_group):
            for i in range(kh):
                for j in range(kw):
                    rows = slice(i * dilations[0], i * dilations[0] + strides[0] * (oh - 1) + 1,
                                 strides[0])
                    cols = slice(j * dilations[1], j * dilations[1] + strides[1] * (ow - 1) + 1,
                                 strides[1])
                    y[:, out] += w[out, ch, i, j] * padded[:, group * per_group + ch, rows, cols]
    if b is not None:
        y += b[None, :, None, None]
    return np.maximum(y, 0) if relu else y


# (batch, channels, height, width, out channels, kernel, strides, dilations, pads begin, pads
# end, groups): "same" 3x3 (contiguous loads), stride 2 (gathers and scatters), asymmetric pads
# with dilation and groups, 1x1, depthwise, a kernel wider than the image, more than one block
# of output channels, and batches that end inside a vector.
GEOMETRIES = [
    (2, 3, 8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (5, 8, 8, 8, 16, (3, 3), (2, 2), (1, 1), (0, 0), (0, 0), 1),
    (3, 4, 7, 5, 6, (2, 3), (1, 2), (2, 1), (1, 0), (0, 2), 2),
    (1, 1, 1, 1, 1, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    (17, 2, 4, 4, 3, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (2, 6, 9, 9, 6, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 6),
    (3, 2, 3, 2, 4, (5, 5), (1, 1), (1, 1), (2, 2), (2, 2), 1),
    (2, 3, 5, 6, 40, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    (7, 5, 4, 4, 2, (1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_direct_conv_matches_the_reference(dtype, geometry):
    n, c, height, width, m, kernel, strides, dilations, pads_begin, pads_end, groups = geometry
    rng = np.random.default_rng(sum(geometry[:5]))
    x = rng.standard_normal((n, c, height, width)).astype(dtype)
    for relu in (False, True):
        for skip_zeros in (False, True):
            w = rng.standard_normal((m, c // groups, *kernel)).astype(dtype)
            if skip_zeros:
                w[rng.random(w.shape) < 0.7] = 0
            b = rng.standard_normal(m).astype(dtype) if relu else None
            conv = _built(w, b, (c, height, width), strides=strides, dilations=dilations,
                          pads_begin=pads_begin, pads_end=pads_end, groups=groups, relu=relu,
                          skip_zeros=skip_zeros)
            want = _reference(x, w, b, strides, dilations, pads_begin, pads_end, groups, relu)
            got = conv(x)
            assert got.dtype == dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


def test_real_data_as_images():
    # 16 x 16 tiles of a real matrix (values and its zero pattern) as one-channel images.
    matrix = real_scipy("bcspwr10").toarray()[:256, :256].astype(np.float32)
    x = np.ascontiguousarray(matrix.reshape(16, 16, 16, 16).transpose(0, 2, 1, 3)).reshape(
        128, 2, 16, 16)
    assert np.count_nonzero(x) > 100
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 2, 3, 3)).astype(np.float32)
    conv = _built(w, None, (2, 16, 16), pads_begin=(1, 1), pads_end=(1, 1), relu=True)
    np.testing.assert_allclose(conv(x), _reference(x, w, None, (1, 1), (1, 1), (1, 1), (1, 1),
                                                   1, True), rtol=1e-5, atol=1e-5)


def test_edges_empty_batch_zero_weights_and_one_nonzero():
    w = np.zeros((3, 2, 3, 3), np.float32)
    bias = np.array([-1.0, 0.5, 2.0], np.float32)
    conv = _built(w, bias, (2, 5, 5), skip_zeros=True, relu=True)
    assert conv.weights == 0                                    # no multiply-add emitted
    y = conv(np.ones((4, 2, 5, 5), np.float32))
    np.testing.assert_array_equal(y, np.broadcast_to(np.maximum(bias, 0)[None, :, None, None],
                                                     (4, 3, 3, 3)))
    assert conv(np.ones((0, 2, 5, 5), np.float32)).shape == (0, 3, 3, 3)
    # no output channels; no input channels (the output is the bias)
    none_out = _built(np.ones((0, 2, 3, 3), np.float32), None, (2, 5, 5))
    assert none_out(np.ones((2, 2, 5, 5), np.float32)).shape == (2, 0, 3, 3)
    none_in = _built(np.ones((3, 0, 3, 3), np.float32), bias, (0, 5, 5))
    np.testing.assert_array_equal(none_in(np.ones((2, 0, 5, 5), np.float32)),
                                  np.broadcast_to(bias[None, :, None, None], (2, 3, 3, 3)))
    w[1, 1, 2, 0] = 3.0
    single = _built(w, None, (2, 5, 5), skip_zeros=True)
    x = np.random.default_rng(0).standard_normal((3, 2, 5, 5)).astype(np.float32)
    want = np.zeros((3, 3, 3, 3), np.float32)
    want[:, 1] = 3.0 * x[:, 1, 2:5, 0:3]
    np.testing.assert_array_equal(single(x), want)


def test_zero_weights_multiply_unless_skipped():
    # Without skip_zeros a zero weight meets inf as a dense convolution does (NaN); with it,
    # the weight is not in the code, as for sparse MatMul weights at level 3.
    w = np.zeros((1, 1, 1, 2), np.float32)
    w[0, 0, 0, 0] = 1.0
    x = np.array([[[[1.0, np.inf, 2.0]]]], np.float32)
    dense = _built(w, None, (1, 1, 3))(x)
    sparse = _built(w, None, (1, 1, 3), skip_zeros=True)(x)
    assert np.isnan(dense[0, 0, 0, 0]) and dense[0, 0, 0, 1] == np.inf
    assert sparse[0, 0, 0, 0] == 1.0 and sparse[0, 0, 0, 1] == np.inf


def test_output_is_written_only_in_bounds():
    # Padding lanes are never read (masked) and the last, partial vector writes only its lanes.
    rng = np.random.default_rng(5)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    for stride in (1, 2):
        conv = _built(w, None, (1, 5, 5), strides=(stride, stride), pads_begin=(1, 1),
                      pads_end=(1, 1))
        side = 5 if stride == 1 else 3
        store = np.full(3 * 2 * side * side + 64, 7.0, np.float32)
        out = store[:3 * 2 * side * side].reshape(3, 2, side, side)
        x = rng.standard_normal((3, 1, 5, 5)).astype(np.float32)
        conv.bind(x, out)()
        np.testing.assert_allclose(out, _reference(x, w, None, (stride,) * 2, (1, 1), (1, 1),
                                                   (1, 1), 1, False), rtol=1e-5, atol=1e-5)
        assert (store[out.size:] == 7.0).all()


def test_threads_split_positions_with_the_same_result():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    x = rng.standard_normal((600, 8, 8, 8)).astype(np.float32)
    built = _built(w, None, (8, 8, 8), pads_begin=(1, 1), pads_end=(1, 1))
    one = DirectConv(built.geometry, w, None, False, False, built.lanes)
    two = DirectConv(built.geometry, w, None, False, False, built.lanes,
                     threads=KernelThreads(2))
    a = one.bind(x, np.empty((600, 16, 8, 8), np.float32))
    b = two.bind(x, np.empty((600, 16, 8, 8), np.float32))
    assert len(a.calls) == 1 and len(b.calls) == 2
    assert b.calls[1][2] % one.lanes == 0          # the second range starts on a whole vector
    np.testing.assert_array_equal(a(), b())
    # In a compiled sequence the ranges go to the native pool, with the same result.
    call = b.native({})
    if not native_pool_supported():
        assert call is None                        # the plan runs it from Python instead
        return
    assert call is not None and len(call.more) == 1 and call.pool is not None
    expected = b.out.copy()
    b.out.fill(np.nan)
    assert CallSequence([call, call], slots=0).run() == 0
    np.testing.assert_array_equal(b.out, expected)


def test_rebind_native_sequence_and_bad_operands():
    w = np.ones((2, 1, 2, 2), np.float32)
    conv = _built(w, None, (1, 3, 3))
    out = np.empty((2, 2, 2, 2), np.float32)
    bound = conv.bind(np.ones((2, 1, 3, 3), np.float32), out)
    bound.rebind("x", np.full((2, 1, 3, 3), 2.0, np.float32))
    assert (bound() == 8.0).all()
    sequence = CallSequence([bound.native({})], slots=0)
    out[...] = 0
    assert sequence.run() == 0 and (out == 8.0).all()
    with pytest.raises(ta.ShapeError, match="in place of"):
        bound.rebind("x", np.ones((3, 1, 3, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="only the input x"):
        bound.rebind("w", np.ones((2, 1, 3, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="input"):
        conv(np.ones((2, 1, 3, 3), np.float64))
    with pytest.raises(ta.ShapeError, match="input"):
        conv(np.ones((2, 1, 4, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="output"):
        conv(np.ones((2, 1, 3, 3), np.float32), out=np.empty((2, 2, 3, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="do not agree"):
        ta.api.direct_conv(w, None, (2, 3, 3))
    with pytest.raises(ta.ShapeError, match="does not fit"):
        ta.api.direct_conv(w, None, (1, 1, 1))
    with pytest.raises(ta.ShapeError, match="at least 1"):
        ta.api.direct_conv(w, None, (1, 3, 3), strides=(0, 1))
    with pytest.raises(ta.ShapeError, match="at least 0"):
        ta.api.direct_conv(w, None, (1, 3, 3), pads_begin=(-1, 0))


def test_limits_leave_the_gemm_path():
    assert ta.api.direct_conv(np.ones((1, 1, 1, 1), np.int32), None, (1, 2, 2)) is None
    big = np.ones((MAX_UNROLLED + 1, 1, 1, 1), np.float32)
    assert ta.api.direct_conv(big, None, (1, 2, 2), skip_zeros=True) is None
    dense = np.ones((MAX_UNROLLED_DENSE + 1, 1, 1, 1), np.float32)
    assert ta.api.direct_conv(dense, None, (1, 2, 2)) is None
    # the same weight, 90% zeros, is within the limit when its zeros are left out
    dense[::10] = 2.0
    dense[dense == 1.0] = 0.0
    if ta.api.direct_conv(dense[:2], None, (1, 2, 2)) is not None:
        assert ta.api.direct_conv(dense, None, (1, 2, 2), skip_zeros=True) is not None
    assert [len(b) for b in blocks_of(50)] == [16, 17, 17]


def _conv_relu_model(weight, bias, pads, strides=(1, 1), dtype=TensorProto.FLOAT):
    c = weight.shape[1]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=list(pads), strides=list(strides),
                         name="conv"),
             h.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", dtype, ["N", c, 6, 6])],
                         [h.make_tensor_value_info("y", dtype, ["N", weight.shape[0], 6, 6])],
                         [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_relu_joins_and_sparse_weights_skip_zeros(dtype):
    rng = np.random.default_rng(11)
    w = rng.standard_normal((6, 4, 3, 3)).astype(dtype)
    w[rng.random(w.shape) < 0.9] = 0
    b = rng.standard_normal(6).astype(dtype)
    onnx_type = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    model = _conv_relu_model(w, b, (1, 1, 1, 1), dtype=onnx_type)
    x = rng.standard_normal((20, 4, 6, 6)).astype(dtype)
    want = _reference(x, w, b, (1, 1), (1, 1), (1, 1), (1, 1), 1, True)
    if dtype == np.float32:              # onnxruntime has no float64 Conv
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    for level in (0, 1, 2, 3):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3):                  # the static plan is built at the second call
            np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=1e-4, atol=1e-5)
        text = compiled.ir()
        if level >= 2:
            assert "conv+relu: 1 fused (relu into conv)" in text
            assert [n.op_type for n in compiled.graph.nodes] == ["Conv"]
        assert ("skip_zeros=1" in text) == (level == 3)
    assert tonnx.load(model, opt_level=3, sparse_weights=False).graph.nodes[0] \
        .attributes.get("skip_zeros") is None
    if ta.api.direct_conv(w, b, (4, 6, 6)) is not None:
        plan = compiled.specialiser.latest()
        assert [s.kind for s in plan.steps] == ["conv kernel"]
        assert "nonzero weights" in plan.steps[0].plan and "relu in registers" in \
            plan.steps[0].plan
        # print_ir("kernels") shows the module's LLVM IR, weight table included
        kernels = compiled.stage_text("kernels")
        assert "== generated DirectConv(" in kernels and "@weights" in kernels


def test_conv_output_read_twice_keeps_its_relu_separate():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    b = np.zeros(2, np.float32)
    model = _conv_relu_model(w, b, (1, 1, 1, 1))
    model.graph.node.append(h.make_node("Neg", ["c"], ["z"], name="neg"))
    model.graph.output.append(h.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 2, 6, 6]))
    compiled = tonnx.load(model, opt_level=2)
    assert [n.op_type for n in compiled.graph.nodes] == ["Conv", "Relu", "Neg"]
    x = rng.standard_normal((2, 1, 6, 6)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for got, want in zip([compiled.run({"x": x})[k] for k in ("y", "z")],
                         session.run(None, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_depthwise_then_pointwise_at_level3_matches_onnxruntime():
    # A depthwise-separable block: grouped convolutions take the compiled-in path too.
    rng = np.random.default_rng(12)
    dw = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    pw = rng.standard_normal((10, 6, 1, 1)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "dw"], ["d"], group=6, pads=[1, 1, 1, 1],
                         strides=[2, 2], name="depthwise"),
             h.make_node("Relu", ["d"], ["r"], name="relu"),
             h.make_node("Conv", ["r", "pw"], ["y"], name="pointwise")]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                               ["N", 6, 7, 9])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10, 4, 5])],
                         [numpy_helper.from_array(dw, "dw"), numpy_helper.from_array(pw, "pw")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = tonnx.load(model, opt_level=3)
    for batch in (3, 3, 3, 1, 1, 1):
        x = rng.standard_normal((batch, 6, 7, 9)).astype(np.float32)
        np.testing.assert_allclose(compiled.run({"x": x})["y"], session.run(None, {"x": x})[0],
                                   rtol=1e-4, atol=1e-5)
    kinds = [s.kind for s in compiled.specialiser.latest().steps]
    # depthwise: the generated window kernel (with the Relu); pointwise: one compiled step
    assert kinds[0] == "window kernel" and len(kinds) == 2 and kinds[1].endswith("kernel")


# (batch, channels, height, width, out channels, kernel, strides, pads begin, pads end, groups):
# grouped layers with more weights than compile in, so the plan takes one generated GEMM per
# group; one and two vectors of output channels a group, stride 2, uneven pads, a last tile
# that crosses images. At 16 channels a group the rows are narrow (9 of a vector's 16 columns):
# wider rows take the window kernel (tests/test_onnx_grouped_window.py).
GROUPED = [
    (2, 64, 12, 9, 64, (3, 3), (1, 1), (1, 1), (1, 1), 4),
    (3, 48, 11, 9, 96, (3, 3), (2, 2), (1, 0), (0, 1), 3),
    (1, 128, 7, 7, 64, (3, 1), (1, 1), (1, 0), (1, 0), 2),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GROUPED)
def test_grouped_convolution_runs_one_gemm_per_group(geometry, dtype):
    n, c, height, width, m, kernel, strides, pads_begin, pads_end, groups = geometry
    rng = np.random.default_rng(c + m)
    w = rng.standard_normal((m, c // groups, *kernel)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    assert w.size > MAX_UNROLLED_DENSE
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], group=groups, kernel_shape=list(kernel),
                         strides=list(strides), pads=list(pads_begin) + list(pads_end)),
             h.make_node("Relu", ["c"], ["y"])]
    want_shape = _reference(np.zeros((n, c, height, width)), w, b, strides, (1, 1), pads_begin,
                            pads_end, groups, True).shape
    graph = h.make_graph(nodes, "grouped", [h.make_tensor_value_info("x", kind, [n, c, height,
                                                                                 width])],
                         [h.make_tensor_value_info("y", kind, list(want_shape))],
                         [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = tonnx.load(model, opt_level=3)
    for run in range(4):      # fresh inputs: the third and fourth run rebind the static plan's
        x = rng.standard_normal((n, c, height, width)).astype(dtype)
        want = _reference(x, w, b, strides, (1, 1), pads_begin, pads_end, groups, True)
        np.testing.assert_allclose(compiled.run({"x": x})["y"], want, rtol=TOL[dtype] * 100,
                                   atol=TOL[dtype] * 100, err_msg=f"run {run + 1}")
    from tensoralg.codegen.llvm import host_has

    plan = compiled.profile({"x": x}).rows[0].plan
    # Without AVX-512 scatters the groups keep the NumPy patch matrix (checked above too).
    assert plan.startswith(f"grouped convolution: one channels-last copy, {groups} generated "
                           "GEMMs") == \
        host_has("avx512f"), plan


def test_grouped_convolution_refuses_a_wrong_input():
    conv = ta.api.grouped_conv(np.ones((8, 2, 3, 3), np.float32), None, 2, (1, 1), (1, 1),
                               (1, 1))
    x = np.ones((1, 4, 5, 5), np.float32)
    bound = conv.bind(x, np.zeros((1, 8, 5, 5), np.float32))
    np.testing.assert_allclose(bound()[0, :, 2, 2], 18.0)
    with pytest.raises(ta.ShapeError, match="do not match"):
        conv.bind(np.ones((1, 3, 5, 5), np.float32), np.zeros((1, 8, 5, 5), np.float32))
    with pytest.raises(ta.ShapeError, match="cannot read"):
        bound.rebind("x", np.ones((1, 4, 5, 5), np.float64))
    with pytest.raises(ta.ShapeError, match="groups do not divide"):
        ta.api.grouped_conv(np.ones((7, 2, 3, 3), np.float32), None, 2, (1, 1), (1, 1), (1, 1))
