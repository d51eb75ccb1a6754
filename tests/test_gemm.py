"""The generated dense GEMM (codegen/gemm.py, runtime/gemm.py) and its use by level 3."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h

import tensoralg as ta
from tensoralg.api import dense_layer
from tensoralg.codegen.build import host_l2_bytes
from tensoralg.codegen.gemm import GemmShape, k_block_for, pack_weight
from tensoralg.onnx.plan.product_steps import Epilogue, gemm_epilogue
from tensoralg.runtime.gemm import SCATTER_MOST_CHANNELS, ConvLayer, DenseLayer
from tensoralg.runtime.threads import KernelThreads

TOL = {np.float32: 2e-5, np.float64: 1e-12}

# The longest K in one block on this host: 1.5 x its K block (which follows its L2 size).
ONE_BLOCK = k_block_for(host_l2_bytes()) * 3 // 2

# M below, at and above a 6-row tile; N below one vector, across narrow panels and several
# 64-wide panels; K within one block, just past the longest single block and across several;
# zero sizes.
SHAPES = [(1, 1, 1), (5, 7, 3), (6, 16, 16), (7, 13, 17), (13, 300, 65), (37, 129, 130),
          (64, 256, 64), (11, ONE_BLOCK + 1, 40), (13, 2 * ONE_BLOCK + 148, 65), (0, 8, 20),
          (9, 0, 20), (9, 8, 0)]


def _reference(a, w, bias, relu):
    y = a.astype(np.float64) @ w.astype(np.float64)
    if bias is not None:
        y = y + bias
    return np.maximum(y, 0) if relu else y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_dense_layer_matches_numpy(dtype, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    w = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    for with_bias in (False, True):
        for relu in (False, True):
            layer = DenseLayer(w, bias if with_bias else None, relu)
            got = layer(a)
            assert got.shape == (m, n) and got.dtype == dtype
            want = _reference(a, w, bias if with_bias else None, relu)
            scale = max(1.0, np.sqrt(k))
            np.testing.assert_allclose(got, want, rtol=TOL[dtype] * scale,
                                       atol=TOL[dtype] * scale)


def test_output_is_written_only_in_bounds():
    # The last panel is masked: columns past N, and the memory after the output, stay intact.
    rng = np.random.default_rng(0)
    a = rng.standard_normal((11, 40)).astype(np.float32)
    w = rng.standard_normal((40, 70)).astype(np.float32)
    store = np.full(11 * 70 + 64, 7.0, np.float32)
    out = store[:11 * 70].reshape(11, 70)
    DenseLayer(w, np.ones(70, np.float32), relu=True).bind(a, out)()
    np.testing.assert_allclose(out, _reference(a, w, np.ones(70), True), rtol=1e-4, atol=1e-4)
    assert (store[11 * 70:] == 7.0).all()


def test_relu_keeps_nan_and_zero_k_writes_the_bias():
    w = np.ones((2, 16), np.float32)
    a = np.array([[np.nan, 1.0], [-1.0, -1.0]], np.float32)
    y = DenseLayer(w, None, relu=True)(a)
    assert np.isnan(y[0]).all() and (y[1] == 0).all()
    bias = np.arange(-8, 8, dtype=np.float32)
    y0 = DenseLayer(np.zeros((0, 16), np.float32), bias, relu=True)(np.zeros((3, 0), np.float32))
    np.testing.assert_array_equal(y0, np.tile(np.maximum(bias, 0), (3, 1)))


def test_threads_split_rows_with_the_same_result():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    w = rng.standard_normal((256, 512)).astype(np.float32)
    one = DenseLayer(w, None, relu=True).bind(a, np.empty((256, 512), np.float32))
    two = DenseLayer(w, None, relu=True, threads=KernelThreads(2)).bind(
        a, np.empty((256, 512), np.float32))
    assert len(one.calls) == 1 and len(two.calls) == 2
    assert two.calls[0][10] % 6 == 0          # the second range starts on a whole tile
    np.testing.assert_array_equal(one(), two())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("relu", [False, True, (-0.5, 0.5)])
@pytest.mark.parametrize("rows, n", [(1, 2496), (3, 1000), (1, 70), (0, 2496)])
def test_threads_split_a_short_product_by_columns(dtype, relu, rows, n):
    """A product too short in rows splits over whole panels of columns, each range with its
    own bias and activation parameters: the same numbers as one call, bit for bit."""
    rng = np.random.default_rng(rows + n)
    k = 624
    a = rng.standard_normal((rows, k)).astype(dtype)
    w = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(dtype)
    one = DenseLayer(w, bias, relu=relu).bind(a, np.empty((rows, n), dtype))
    split = DenseLayer(w, bias, relu=relu, threads=KernelThreads(2))
    two = split.bind(a, np.empty((rows, n), dtype))
    panels = -(-n // split.shape.nr)
    assert len(one.calls) == 1
    assert len(two.calls) == KernelThreads(2).dense_parts(max(rows, 1) * k * n, panels)
    if (rows, n) == (1, 2496):
        assert len(two.calls) == 2          # SAINT's batch-1 layer: two column ranges
    want = one().copy()
    np.testing.assert_array_equal(two(), want)
    if rows:
        ref = a.astype(np.float64) @ w + bias
        if relu is True:
            ref = np.maximum(ref, 0)
        elif relu:
            ref = np.clip(ref, *relu)
        np.testing.assert_allclose(want, ref, rtol=1e-3 if dtype == np.float32 else 1e-9,
                                   atol=1e-2 if dtype == np.float32 else 1e-9)
        other = rng.standard_normal((rows, k)).astype(dtype)    # a new input, same calls
        two.rebind("A", other)
        np.testing.assert_array_equal(two(), one.__class__(split, other,
                                                           np.empty((rows, n), dtype), None)())


def test_rebind_and_bad_operands():
    w = np.ones((4, 32), np.float32)
    layer = dense_layer(w)
    bound = layer.bind(np.ones((3, 4), np.float32), np.empty((3, 32), np.float32))
    bound.rebind("A", np.full((3, 4), 2.0, np.float32))
    assert (bound() == 8.0).all()
    with pytest.raises(ta.ShapeError, match="input"):
        bound.rebind("A", np.ones((2, 4), np.float32))
    with pytest.raises(ta.ShapeError, match="input"):
        layer(np.ones((3, 4), np.float64))
    with pytest.raises(ta.ShapeError, match="input"):
        layer(np.ones((4, 3), np.float32).T)              # not C-contiguous
    with pytest.raises(ta.ShapeError, match="output"):
        layer(np.ones((3, 4), np.float32), out=np.empty((3, 31), np.float32))
    with pytest.raises(ta.ShapeError, match="weight"):
        DenseLayer(np.ones((4, 4), np.int32))
    with pytest.raises(ta.ShapeError, match="bias"):
        DenseLayer(w, np.ones(31, np.float32))


def test_packing_pads_panels_with_zeros():
    shape = GemmShape(np.dtype(np.float32), 16, 4)
    w = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    packed = pack_weight(w, shape)
    assert packed.shape == (2, 3, 64)
    np.testing.assert_array_equal(packed[1, :, :6], w[:, 64:])
    assert (packed[1, :, 6:] == 0).all()


@pytest.mark.parametrize("text,expected", [
    ("Y(i,j) = A(i,j)", Epilogue(None, False)),
    ("Y(i,j) = max(A(i,j), 0)", Epilogue(None, True)),
    ("Y(i,j) = (B(j) + (A(i,j)))", Epilogue("b", False)),
    ("Y(i,j) = max(((A(i,j)) + B(j)), 0)", Epilogue("b", True)),
    ("Y(i,j) = max((A(i,j) + B(i)), 0)", None),          # a row bias
    ("Y(i,j) = max((A(i,j) + C(j)), 0)", None),          # wrong length
    ("Y(i,j) = max((A(i,j) + B(j)), 1)", None),
    ("Y(i,j) = sigmoid((A(i,j) + B(j)))", None),
    ("Y(i,j) = (A(i,j) + B(j)) * 2", None),
    ("Y(j,i) = A(i,j)", None),
])
def test_epilogue_patterns(text, expected):
    operands = {"A": ("P", (4, 3), "view"), "B": ("b", (3,), "view"),
                "C": ("c", (4,), "view")}
    assert gemm_epilogue(text, operands, "A", 3) == expected


def _layers_model(transposed: bool, dtype: type = np.float32
                  ) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Gemm(+bias) -> Relu -> MatMul + Add -> Sigmoid: one GEMM with its epilogue fused, one
    GEMM whose epilogue (sigmoid) keeps its kernel."""
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((48, 40) if transposed else (40, 48)).astype(dtype) / 6
    b1 = rng.standard_normal(48).astype(dtype)
    w2 = rng.standard_normal((48, 32)).astype(dtype) / 7
    b2 = rng.standard_normal(32).astype(dtype)
    nodes = [h.make_node("Gemm", ["x", "w1", "b1"], ["g"], transB=int(transposed)),
             h.make_node("Relu", ["g"], ["r"]),
             h.make_node("MatMul", ["r", "w2"], ["p"]),
             h.make_node("Add", ["p", "b2"], ["s"]),
             h.make_node("Sigmoid", ["s"], ["y"])]
    inits = [numpy_helper.from_array(v, n) for n, v in
             (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))]
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", elem, ["N", 40])],
                         [h.make_tensor_value_info("y", elem, ["N", 32])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    return model, {"x": rng.standard_normal((300, 40)).astype(dtype)}


@pytest.mark.parametrize("transposed,dtype", [(False, np.float32), (True, np.float32),
                                              (False, np.float64)])
def test_level3_runs_layers_on_the_generated_gemm(transposed, dtype):
    model, feeds = _layers_model(transposed, dtype)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = ta.onnx.load(model, opt_level=3)
    rng = np.random.default_rng(3)
    for k in range(4):
        data = feeds if k < 3 else {"x": rng.standard_normal((300, 40)).astype(dtype)}
        np.testing.assert_allclose(compiled.run(data)["y"], session.run(None, data)[0],
                                   rtol=1e-4 if dtype == np.float32 else 1e-10,
                                   atol=1e-5 if dtype == np.float32 else 1e-12)
    kinds = sorted(step.kind for step in compiled.specialiser.latest().steps)
    assert kinds == ["generated GEMM", "generated GEMM + kernel"], kinds
    table = str(compiled.profile(feeds))
    assert "generated GEMM (dense 300x40x48" in table and "bias + relu in registers" in table


def test_set_num_threads():
    before = ta.get_num_threads()
    try:
        ta.set_num_threads(1)
        assert ta.get_num_threads() == 1
        for bad in (0, -1, 1.5, True, "2"):
            with pytest.raises(ta.UnsupportedError, match="positive integer"):
                ta.set_num_threads(bad)
    finally:
        ta.set_num_threads(before)


@pytest.mark.parametrize("shape", [
    # (N, C, H, W, M, K, strides, pads_begin, pads_end)
    (2, 3, 8, 8, 8, 3, (1, 1), (1, 1), (1, 1)),
    (3, 8, 8, 8, 16, 3, (2, 2), (0, 0), (0, 0)),
    (2, 5, 9, 7, 20, 2, (2, 1), (0, 1), (2, 0)),
    (1, 1, 2, 2, 1, 2, (1, 1), (0, 0), (0, 0)),
    (2, 64, 6, 6, 70, 3, (1, 1), (1, 1), (1, 1)),     # KW * C = 192: three kernel rows a block
    (2, 200, 5, 5, 20, 3, (1, 1), (1, 1), (1, 1)),    # KW * C = 600: each row cut in two pieces
    (1, 130, 4, 4, 9, 2, (1, 1), (0, 0), (1, 1)),     # KW * C = 260: two rows a block, a tail
])
def test_direct_convolution_matches_onnxruntime(shape):
    n, c, hgt, wid, m, k, strides, begin, end = shape
    rng = np.random.default_rng(m)
    x = rng.standard_normal((n, c, hgt, wid)).astype(np.float32)
    w = rng.standard_normal((m, c, k, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    node = h.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(strides),
                       pads=list(begin) + list(end))
    graph = h.make_graph([node], "g", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                list(x.shape))],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                         [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    conv = ta.api.conv_layer(w, b, strides, begin, end)
    oh, ow = conv.out_shape(hgt, wid)
    out = np.empty((n * oh * ow, m), np.float32)
    got = conv.bind(x, out)().reshape(n, oh, ow, m).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # NCHW out: the tiles scattered a plane apart, a later K block's partial sums gathered;
    # the memory past the output untouched.
    store = np.full(n * m * oh * ow + 64, 7.0, np.float32)
    planar = store[:-64].reshape(n, m, oh, ow)
    conv.bind(x, planar)()
    np.testing.assert_allclose(planar, want, rtol=1e-4, atol=1e-4)
    assert (store[-64:] == 7.0).all()
    with pytest.raises(ta.ShapeError, match="do not match"):
        conv.bind(x, np.empty((n * oh * ow + 1, m), np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("c,m", [(3, 70), (ONE_BLOCK // 9 + 20, 20)])   # K in one block; two
def test_direct_convolution_into_nchw(c, m, dtype):
    # 7 x 8 outputs per image in tiles of 6 rows (float32: scattered in pairs of rows where a
    # tile's rows are neighbours, one by one where it crosses into the next image).
    rng = np.random.default_rng(c)
    x = rng.standard_normal((3, c, 7, 9)).astype(dtype)
    w = rng.standard_normal((m, c, 3, 3)).astype(dtype)
    conv = ta.api.conv_layer(w, rng.standard_normal(m).astype(dtype), (2, 1), (1, 0), (1, 2),
                             True)
    oh, ow = conv.out_shape(7, 9)
    rows = np.empty((3 * oh * ow, m), dtype)
    want = conv.bind(x, rows)().reshape(3, oh, ow, m).transpose(0, 3, 1, 2)
    planar = np.full((3, m, oh, ow), np.nan, dtype)
    conv.bind(x, planar)()
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(planar, want, rtol=tol, atol=tol)
    assert conv.one_k_block() == (c * 9 <= ONE_BLOCK)


@pytest.mark.parametrize("m", [SCATTER_MOST_CHANNELS, SCATTER_MOST_CHANNELS + 1])
def test_wide_convolutions_transpose_their_product_instead_of_scattering(m):
    # Past SCATTER_MOST_CHANNELS output channels a convolution writes the channels-last
    # product, which level 3 transposes; the plan says which, and both agree with NumPy.
    from tensoralg.codegen.llvm import host_has

    rng = np.random.default_rng(m)
    w = (rng.standard_normal((m, 8, 3, 3)) * 0.1).astype(np.float32)
    conv = ta.api.conv_layer(w, None, (1, 1), (1, 1), (1, 1))
    assert conv.scatters_well() == (host_has("avx512f") and m <= SCATTER_MOST_CHANNELS)
    assert conv.writes_nchw_well() == host_has("avx512f")      # grouped layers still may
    node = h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = h.make_graph([node], "wide", [h.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                   [2, 8, 7, 7])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, m, 7, 7])],
                         [numpy_helper.from_array(w, "w")])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    x = rng.standard_normal((2, 8, 7, 7)).astype(np.float32)
    compiled = ta.onnx.load(model, opt_level=3)
    for _ in range(2):
        got = compiled.run({"x": x})["y"]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    want = sum(np.einsum("mc,nchw->nmhw", w[:, :, i, j], padded[:, :, i:i + 7, j:j + 7])
               for i in range(3) for j in range(3))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    text = " ".join(s.plan or "" for s in compiled.specialiser.latest().steps)
    assert ("tiles scattered into the NCHW output" in text) == conv.scatters_well(), text


def test_convolutions_write_channel_blocks_and_refuse_other_views():
    from tensoralg.runtime.planar import PlanarConv

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    whole = np.full((2, 9, 6, 6), 5.0, np.float32)
    PlanarConv(np.ones((3, 4), np.float32), None).bind(x, whole[:, 2:5])()
    conv = ta.api.conv_layer(np.ones((4, 4, 3, 3), np.float32), None, (1, 1), (1, 1), (1, 1))
    conv.bind(x, whole[:, 5:])()
    np.testing.assert_allclose(whole[:, 2:5], np.repeat(x.sum(1, keepdims=True), 3, 1),
                               rtol=1e-5, atol=1e-5)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).sum(1)
    boxes = sum(padded[:, i:i + 6, j:j + 6] for i in range(3) for j in range(3))
    np.testing.assert_allclose(whole[:, 5:], np.repeat(boxes[:, None], 4, 1), rtol=1e-4,
                               atol=1e-4)
    assert (whole[:, :2] == 5.0).all()
    with pytest.raises(ta.ShapeError, match="C-contiguous images"):
        PlanarConv(np.ones((3, 4), np.float32), None).bind(x, whole[:, 2:5, :, 1:])
    with pytest.raises(ta.ShapeError, match="do not match"):
        conv.bind(x, whole[:, 5:, 1:])


@pytest.mark.parametrize("planar", [False, True])
def test_direct_convolution_split_over_threads_matches_one_thread(planar):
    # Large enough that the copy and the GEMM are split into ranges (whole register tiles of
    # output positions; ranges of input rows for the copy): the same bits as one range.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 64, 40, 30)).astype(np.float32)
    w = rng.standard_normal((70, 64, 3, 3)).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    single = ConvLayer(w, b, (1, 1), (1, 1), (1, 1), True)
    split = ConvLayer(w, b, (1, 1), (1, 1), (1, 1), True, threads=KernelThreads(2))
    shape = (4, 70, 40, 30) if planar else (4 * 40 * 30, 70)
    want, got = np.empty(shape, np.float32), np.full(shape, np.nan, np.float32)
    single.bind(x, want)()
    bound = split.bind(x, got)
    assert len(bound.gemm.calls) == 2 and len(bound.copy.calls) == 2
    bound()
    np.testing.assert_array_equal(got, want)


def test_convolutions_take_an_empty_batch():
    from tensoralg.runtime.gemm import GroupedConv
    from tensoralg.runtime.planar import PlanarConv

    x = np.zeros((0, 4, 5, 5), np.float32)
    conv = ConvLayer(np.ones((3, 4, 3, 3), np.float32), None, (1, 1), (1, 1), (1, 1))
    assert conv.bind(x, np.zeros((0, 3, 5, 5), np.float32))().shape == (0, 3, 5, 5)
    assert conv.bind(x, np.zeros((0, 3), np.float32))().shape == (0, 3)
    assert PlanarConv(np.ones((3, 4), np.float32), None)(x).shape == (0, 3, 5, 5)
    grouped = GroupedConv(np.ones((4, 2, 3, 3), np.float32), None, 2, (1, 1), (1, 1), (1, 1))
    assert grouped.bind(x, np.zeros((0, 4, 5, 5), np.float32))().shape == (0, 4, 5, 5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, c, positions", [
    (13, 900, 37),       # a last tile of one row (13 = 2 * 6 + 1), three blocks of planes
    (600, 70, 196),      # a weight of 100 packed tiles, a one-vector tail panel
    (5, 0, 20),          # no input planes: act(bias) alone
])
def test_pointwise_conv_reads_its_packed_weight(dtype, m, c, positions):
    from tensoralg.codegen.planar import MR, pack_weight
    from tensoralg.runtime.planar import PlanarConv

    rng = np.random.default_rng(m + c)
    w = rng.standard_normal((m, c)).astype(dtype)
    b = rng.standard_normal(m).astype(dtype)
    packed = pack_weight(w)
    assert packed.shape == (-(-m // MR), c, MR)
    np.testing.assert_array_equal(packed.transpose(0, 2, 1).reshape(packed.shape[0] * MR, c)[:m], w)
    x = rng.standard_normal((2, c, 1, positions)).astype(dtype)
    want = np.maximum(np.einsum("mc,ncp->nmp", w.astype(np.float64), x[:, :, 0].astype(np.float64))
                      + b[:, None], 0).reshape(2, m, 1, positions)
    got = PlanarConv(w, b, (0.0, float("inf")))(x)
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
