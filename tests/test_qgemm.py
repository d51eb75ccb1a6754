"""The int8 GEMM (``codegen/qgemm.py``, ``runtime/qgemm.py``) against NumPy's int64 products.

Its results must be *equal* to ``float32(sum((q - z) * W))`` with ``q`` the uint8
quantization of the input (round half to even, saturated, NaN to 0), for sizes that cross
every edge of its blocking: the 6-row register tile, the 16-column vectors and 64-column
panels, K groups of 4 and the 64-byte padding of a quantized row; split over threads by rows
and by panels of columns; and run from a compiled sequence, its operands read from slots.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensoralg as ta
from tensoralg import program
from tensoralg.codegen.qgemm import pack_int8_weight, quantized_row_bytes
from tensoralg.runtime.qgemm import Int8Epilogue, QuantizedConv, QuantizedLayer
from tensoralg.runtime.sequence import CallSequence, Slot
from tensoralg.runtime.threads import KernelThreads

vnni = pytest.mark.skipif(not program.int8_gemm_supported(),
                          reason="this host has no AVX-512 VNNI: the int8 GEMM cannot run")


def reference(x: np.ndarray, scale: float, zero: float, weight: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        q = np.rint(x / np.float32(scale)) + np.float32(zero)
        q = np.where(q >= 0, np.minimum(q, 255), 0).astype(np.int64)
    return ((q - int(zero)) @ weight.astype(np.int64)).astype(np.float32)


def scalars(scale: float, zero: float) -> tuple[np.ndarray, np.ndarray]:
    return np.array(scale, np.float32), np.array(zero, np.float32)


def test_packing_pads_to_whole_panels_and_groups():
    w = np.arange(-10, 11, dtype=np.int8).reshape(3, 7)
    packed, colsum = pack_int8_weight(w)
    assert packed.shape == (1, 1, 64, 4) and packed.ctypes.data % 64 == 0
    assert packed[0, 0, 2].tolist() == [-8, -1, 6, 0]       # column 2: rows 0-2, padding
    assert colsum[:8].tolist() == [*w.astype(np.int32).sum(axis=0).tolist(), 0]
    assert quantized_row_bytes(0) == 64
    with pytest.raises(ValueError, match="int8"):
        pack_int8_weight(w.astype(np.int16))


@vnni
@pytest.mark.parametrize("m", [0, 1, 5, 6, 7, 13, 37])
@pytest.mark.parametrize("k, n", [(0, 5), (1, 1), (3, 16), (4, 17), (5, 63), (64, 64),
                                  (65, 65), (131, 130), (300, 200)])
def test_equal_to_the_integer_product(m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 7 + n)
    x = (rng.standard_normal((m, k)) * 4).astype(np.float32)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    scale, zero = 0.05, float(rng.integers(0, 256))
    out = np.full((m, n), np.nan, np.float32)
    layer = program.quantized_layer(w)
    layer.bind(x, *scalars(scale, zero), out)()
    np.testing.assert_array_equal(out, reference(x, scale, zero, w))


@vnni
def test_rounding_saturation_and_nan_as_dynamic_quantize_linear():
    """Ties round to even, values past the range saturate at 0 and 255, NaN and -inf
    quantize to 0 and +inf to 255, all as the float route's statement does."""
    scale, zero = 0.5, 100.0
    x = np.array([[0.25, 0.75, -0.25, 1.25, 1e9, -1e9, np.nan, np.inf, -np.inf, -50.0, 77.5,
                   0.0]], np.float32)
    w = np.eye(x.shape[1], dtype=np.int8)
    out = QuantizedLayer(w)(x, *scalars(scale, zero))
    q = [100, 102, 100, 102, 255, 0, 0, 255, 0, 0, 255, 100]
    assert out[0].tolist() == [float(v - 100) for v in q]
    np.testing.assert_array_equal(out, reference(x, scale, zero, w))


@vnni
@pytest.mark.parametrize("zero", [0.0, 255.0])
def test_extreme_weights_and_zero_points(zero):
    """-128 and 127 everywhere, with the zero point at either end (the correction term at
    its largest), over a K of 4000."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((9, 4000)) * 100).astype(np.float32)
    w = np.where(rng.random((4000, 70)) < 0.5, -128, 127).astype(np.int8)
    out = QuantizedLayer(w)(x, *scalars(0.25, zero))
    np.testing.assert_array_equal(out, reference(x, 0.25, zero, w))


@vnni
@pytest.mark.parametrize("m, n", [(600, 300), (2, 2000)])
def test_thread_ranges_by_rows_and_by_panels(m, n):
    """A tall product splits its rows over the threads, a batch-1-like one its panels of
    columns (each range quantizing the rows into its own scratch): the same results."""
    rng = np.random.default_rng(4)
    k = 900
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    layer = QuantizedLayer(w, threads=KernelThreads(2))
    out = np.empty((m, n), np.float32)
    bound = layer.bind(x, *scalars(0.03, 131.0), out)
    assert len(bound.calls) == 2
    assert (bound.calls[0][10:14] != bound.calls[1][10:14])
    bound()
    np.testing.assert_array_equal(out, reference(x, 0.03, 131.0, w))
    # the same ranges from a compiled sequence, on the native pool
    native = bound.native({})
    if native is not None:
        out[...] = 0
        assert CallSequence([native], slots=0).run() == 0
        np.testing.assert_array_equal(out, reference(x, 0.03, 131.0, w))


@vnni
def test_rebound_and_slot_operands():
    """``rebind`` swaps the input, scale and zero point; a compiled sequence reads all three
    from its slots."""
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (40, 24)).astype(np.int8)
    x1, x2 = (rng.standard_normal((7, 40)).astype(np.float32) for _ in range(2))
    out = np.empty((7, 24), np.float32)
    bound = QuantizedLayer(w).bind(x1, *scalars(0.1, 7.0), out)
    s2, z2 = scalars(0.02, 200.0)
    bound.rebind("x", x2)
    bound.rebind("scale", s2)
    bound.rebind("zero", z2)
    bound()
    np.testing.assert_array_equal(out, reference(x2, 0.02, 200.0, w))
    sequence = CallSequence([bound.native({"x": Slot(0), "scale": Slot(1), "zero": Slot(2)})],
                            slots=3)
    s1, z1 = scalars(0.1, 7.0)
    sequence.slots[:] = [x1.ctypes.data, s1.ctypes.data, z1.ctypes.data]
    assert sequence.run() == 0
    np.testing.assert_array_equal(out, reference(x1, 0.1, 7.0, w))
    with pytest.raises(ta.ShapeError, match="in place of"):
        bound.rebind("x", x1[:, :20].copy())
    with pytest.raises(ta.ShapeError, match="only x, scale, zero can be rebound"):
        bound.rebind("W", x1)


@vnni
def test_bad_operands_are_shape_errors():
    w = np.ones((8, 3), np.int8)
    layer = QuantizedLayer(w)
    s, z = scalars(1.0, 0.0)
    with pytest.raises(ta.ShapeError, match="input"):
        layer.bind(np.ones((2, 7), np.float32), s, z, np.empty((2, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="input"):
        layer.bind(np.ones((2, 8), np.float64), s, z, np.empty((2, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="output"):
        layer.bind(np.ones((2, 8), np.float32), s, z, np.empty((3, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="scale"):
        layer.bind(np.ones((2, 8), np.float32), np.ones(2, np.float32), z,
                   np.empty((2, 3), np.float32))
    with pytest.raises(ta.ShapeError, match="int8"):
        QuantizedLayer(np.ones((8, 3), np.uint8))
    with pytest.raises(ta.ShapeError, match="overflow"):
        QuantizedLayer(np.full((70000, 2), -128, np.int8))


def test_hosts_without_vnni_refuse_the_layer(monkeypatch):
    from tensoralg.runtime import qgemm

    monkeypatch.setattr(qgemm, "int8_gemm_supported", lambda cache=None: False)
    with pytest.raises(ta.ShapeError, match="VNNI"):
        QuantizedLayer(np.ones((2, 2), np.int8))


def conv_reference(x, scale, zero, weight, strides, pads_begin, pads_end, dilations):
    """The channels-last product of the quantized, zero-point-padded ``x`` and ``weight``."""
    with np.errstate(invalid="ignore"):
        q = np.rint(x / np.float32(scale)) + np.float32(zero)
        q = np.where(q >= 0, np.minimum(q, 255), 0).astype(np.int64) - int(zero)
    q = np.pad(q, ((0, 0), (0, 0), (pads_begin[0], pads_end[0]), (pads_begin[1], pads_end[1])))
    n, _, hp, wp = q.shape
    m, c, kh, kw = weight.shape
    oh = (hp - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wp - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, oh, ow, m), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = q[:, :, i * dilations[0]:i * dilations[0] + (oh - 1) * strides[0] + 1:
                       strides[0], j * dilations[1]:j * dilations[1] + (ow - 1) * strides[1] + 1:
                       strides[1]]
            out += np.einsum("nchw,mc->nhwm", window, weight[:, :, i, j].astype(np.int64))
    return out.reshape(-1, m).astype(np.float32)


@vnni
@pytest.mark.parametrize("shape, kernel, strides, pads, dilation", [
    ((1, 3, 9, 11), (3, 3), (1, 1), ((1, 1), (1, 1)), 1),
    ((2, 5, 8, 7), (3, 2), (2, 1), ((1, 0), (2, 1)), 1),
    ((1, 16, 6, 6), (1, 1), (1, 1), ((0, 0), (0, 0)), 1),
    ((3, 7, 12, 10), (5, 5), (2, 2), ((2, 2), (2, 2)), 2),
    ((1, 64, 7, 7), (3, 3), (1, 1), ((1, 1), (1, 1)), 1),
    ((0, 4, 5, 5), (3, 3), (1, 1), ((1, 1), (1, 1)), 1),
])
def test_convolution_equal_to_the_integer_convolution(shape, kernel, strides, pads, dilation):
    """The zero-point-bordered channels-last image and the kernel rows read in place: odd
    channel counts (padded to 4), strides, asymmetric pads, vertical dilation, 1x1 and 5x5
    kernels, more than 64 output channels and an empty batch."""
    rng = np.random.default_rng(sum(shape) + sum(kernel))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    m = 70 if shape[1] == 64 else 9
    w = rng.integers(-128, 128, (m, shape[1], *kernel)).astype(np.int8)
    scale, zero = 0.04, float(rng.integers(0, 256))
    conv = QuantizedConv(w, strides, pads[0], pads[1], (dilation, 1))
    got = conv(x, *scalars(scale, zero))
    want = conv_reference(x, scale, zero, w, strides, pads[0], pads[1], (dilation, 1))
    np.testing.assert_array_equal(got, want.reshape(shape[0], *got.shape[2:], m).transpose(
        0, 3, 1, 2))


@vnni
def test_convolution_thread_ranges_and_rebinding():
    rng = np.random.default_rng(9)
    x1, x2 = (rng.standard_normal((2, 32, 20, 20)).astype(np.float32) for _ in range(2))
    w = rng.integers(-128, 128, (64, 32, 3, 3)).astype(np.int8)
    conv = QuantizedConv(w, (1, 1), (1, 1), (1, 1), threads=KernelThreads(2))
    out = np.empty((2, 64, 20, 20), np.float32)
    image, product, transpose = conv.bind(x1, *scalars(0.05, 99.0), out)
    assert len(product.calls) == 2
    s2, z2 = scalars(0.07, 3.0)
    image.rebind("x", x2)
    image.rebind("scale", s2)
    image.rebind("zero", z2)
    product.rebind("zero", z2)
    image()
    product()
    transpose()
    want = conv_reference(x2, 0.07, 3.0, w, (1, 1), (1, 1), (1, 1), (1, 1))
    np.testing.assert_array_equal(out, want.reshape(2, 20, 20, 64).transpose(0, 3, 1, 2))
    with pytest.raises(ta.ShapeError, match="horizontal dilation"):
        QuantizedConv(w, (1, 1), (0, 0), (0, 0), (1, 2))
    with pytest.raises(ta.ShapeError, match="does not fit"):
        QuantizedConv(w, (1, 1), (0, 0), (0, 0)).bind(
            np.ones((1, 32, 1, 1), np.float32), *scalars(1.0, 0.0),
            np.empty((1, 64, 0, 0), np.float32))
    with pytest.raises(ta.ShapeError, match="input"):
        conv.bind(np.ones((1, 31, 5, 5), np.float32), *scalars(1.0, 0.0),
                  np.empty((1, 64, 5, 5), np.float32))


def epilogue_reference(sums, multipliers, biases, low, high):
    """The float32 statement the epilogue replaces: ``clamp(sums * M(j) + B(j))``."""
    values = sums.astype(np.float32)
    if multipliers is not None:
        values = values * np.asarray(multipliers, np.float32)
    if biases is not None:
        values = values + np.asarray(biases, np.float32)
    with np.errstate(invalid="ignore"):
        values = np.where((values > low) | np.isnan(values), values, np.float32(low))
        values = np.where((values < high) | np.isnan(values), values, np.float32(high))
    return values.astype(np.float32)


@vnni
@pytest.mark.parametrize("parts", ["multiplier", "bias", "relu", "clip", "all", "scalars"])
def test_epilogue_in_registers(parts):
    """Per-column multipliers, biases and a clamp applied to the sums before they are
    stored, bit for bit as the statement they replace, on the dense product and on the
    convolution (70 output channels: a panel and a part, and 20)."""
    rng = np.random.default_rng(11)
    n = 70
    multipliers = rng.random(n).astype(np.float32) * 0.01
    biases = rng.standard_normal(n).astype(np.float32)
    low, high = {"relu": (0.0, np.inf), "clip": (-0.5, 0.75), "all": (0.0, 6.0)}.get(
        parts, (-np.inf, np.inf))
    m_vec = multipliers if parts in ("multiplier", "all") else \
        (np.float32(0.5) if parts == "scalars" else None)
    b_vec = biases if parts in ("bias", "all") else (np.float32(-3.0) if parts == "scalars"
                                                     else None)
    epilogue = Int8Epilogue(m_vec, b_vec, low, high)
    x = (rng.standard_normal((13, 100)) * 2).astype(np.float32)
    w = rng.integers(-128, 128, (100, n)).astype(np.int8)
    got = QuantizedLayer(w, epilogue=epilogue)(x, *scalars(0.05, 120.0))
    want = epilogue_reference(reference(x, 0.05, 120.0, w), m_vec, b_vec, low, high)
    np.testing.assert_array_equal(got, want)
    for channels in (n, 20):
        image = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
        kernel = rng.integers(-128, 128, (channels, 8, 3, 3)).astype(np.int8)
        cut = Int8Epilogue(None if m_vec is None or np.ndim(m_vec) == 0 else m_vec[:channels],
                           None if b_vec is None or np.ndim(b_vec) == 0 else b_vec[:channels],
                           low, high) if parts != "scalars" else epilogue
        conv = QuantizedConv(kernel, (1, 1), (1, 1), (1, 1), epilogue=cut)
        got = conv(image, *scalars(0.02, 7.0))
        sums = conv_reference(image, 0.02, 7.0, kernel, (1, 1), (1, 1), (1, 1), (1, 1))
        want = epilogue_reference(sums, cut.multipliers, cut.biases, low, high)
        np.testing.assert_array_equal(got, want.reshape(2, 9, 9, channels).transpose(0, 3, 1, 2))
    with pytest.raises(ta.ShapeError, match="epilogue has 3 values"):
        QuantizedLayer(w, epilogue=Int8Epilogue(np.ones(3, np.float32)))


@vnni
def test_scaled_epilogue_multiplies_by_the_activation_scale_first():
    """``quantize_dynamic``'s rescale, ``sums * (s * w_scale)`` with ``s`` the scale the call
    quantized with (read at run time, so a rebound scale rescales too), then bias and ReLU."""
    rng = np.random.default_rng(12)
    w = rng.integers(-128, 128, (40, 30)).astype(np.int8)
    w_scale = (rng.random(30) * 0.01).astype(np.float32)
    bias = rng.standard_normal(30).astype(np.float32)
    layer = QuantizedLayer(w, epilogue=Int8Epilogue(w_scale, bias, 0.0, np.inf, scaled=True))
    x = rng.standard_normal((11, 40)).astype(np.float32)
    out = np.empty((11, 30), np.float32)
    bound = layer.bind(x, *scalars(0.03, 40.0), out)
    for scale in (0.03, 0.07):
        s, _ = scalars(scale, 40.0)
        bound.rebind("scale", s)
        bound()
        want = epilogue_reference(reference(x, scale, 40.0, w), np.float32(scale) * w_scale,
                                  bias, 0.0, np.inf)
        np.testing.assert_array_equal(out, want)


def fake_reference(values, scale, zero, low, high):
    """The ``QuantizeDequantize`` statement: ``(saturate(round(v / s) + z) - z) * s``."""
    with np.errstate(invalid="ignore"):
        level = np.rint(values / np.float32(scale)) + np.float32(zero)
        kept = np.where(level >= low, np.minimum(level, np.float32(high)), np.float32(low))
    return ((kept - np.float32(zero)) * np.float32(scale)).astype(np.float32)


@vnni
@pytest.mark.parametrize("shape, m", [((1, 16, 6, 6), 9), ((2, 5, 7, 9), 13),
                                      ((1, 8, 13, 13), 70), ((3, 20, 1, 1), 6),
                                      ((0, 4, 5, 5), 7), ((1, 4, 1, 1), 3),
                                      ((1, 96, 8, 8), 24)])
@pytest.mark.parametrize("threads", [1, 2])
def test_pointwise_convolution_over_positions(shape, m, threads):
    """A 1x1 convolution of unit strides and no padding runs over NCHW positions (planes of
    4 channels a lane, tiles of 6 output channels x 64 positions, written into the NCHW
    output): equal to the integer convolution for channels not a multiple of 4, positions
    short of, and across, 64, output channels past a tile of 6, batches of several and of
    no images, a single position; split over threads by tiles, and rebound."""
    rng = np.random.default_rng(sum(shape) + m)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    w = rng.integers(-128, 128, (m, shape[1], 1, 1)).astype(np.int8)
    conv = QuantizedConv(w, (1, 1), (0, 0), (0, 0),
                         threads=KernelThreads(threads) if threads > 1 else None)
    assert conv.pointwise and "over NCHW positions" in conv.describe(5)
    scale, zero = 0.04, float(rng.integers(0, 256))
    out = np.empty((shape[0], m, *shape[2:]), np.float32)
    calls = conv.bind(x, *scalars(scale, zero), out)
    assert len(calls) == 2 and set(calls[0].operands) == {"x", "scale", "zero"}
    for call in calls:
        call()
    want = conv_reference(x, scale, zero, w, (1, 1), (0, 0), (0, 0), (1, 1))
    np.testing.assert_array_equal(out, want.reshape(shape[0], *shape[2:], m).transpose(
        0, 3, 1, 2))
    x2 = (rng.standard_normal(shape) * 3).astype(np.float32)
    s2, z2 = scalars(0.07, 3.0)
    calls[0].rebind("x", x2)
    for call in calls:
        for name, value in (("scale", s2), ("zero", z2)):
            call.rebind(name, value)
        call()
    want = conv_reference(x2, 0.07, 3.0, w, (1, 1), (0, 0), (0, 0), (1, 1))
    np.testing.assert_array_equal(out, want.reshape(shape[0], *shape[2:], m).transpose(
        0, 3, 1, 2))


@vnni
@pytest.mark.parametrize("grid", [(0.05, 128.0, 0.0, 255.0), (0.1, -3.0, -128.0, 127.0)],
                         ids=["uint8", "int8"])
def test_fake_quantization_in_the_epilogue(grid):
    """The next layer's ``QuantizeDequantize`` applied after the multiplier, bias and clamp,
    bit for bit as the statement, on the dense product, the channels-last convolution and
    the pointwise convolution (per-row epilogue); values saturate at both bounds."""
    rng = np.random.default_rng(13)
    n = 70
    multipliers = (rng.random(n) * 0.05).astype(np.float32)
    biases = (rng.standard_normal(n) * 4).astype(np.float32)
    epilogue = Int8Epilogue(multipliers, biases, -5.0, 6.0, fake=grid)
    assert "fake quantization" in epilogue.describe()
    x = (rng.standard_normal((13, 100)) * 2).astype(np.float32)
    w = rng.integers(-128, 128, (100, n)).astype(np.int8)
    got = QuantizedLayer(w, epilogue=epilogue)(x, *scalars(0.05, 120.0))
    want = fake_reference(epilogue_reference(reference(x, 0.05, 120.0, w), multipliers,
                                             biases, -5.0, 6.0), *grid)
    np.testing.assert_array_equal(got, want)
    for kernel in ((3, 3), (1, 1)):
        image = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
        weight = rng.integers(-128, 128, (n, 8, *kernel)).astype(np.int8)
        pads = (1, 1) if kernel == (3, 3) else (0, 0)
        conv = QuantizedConv(weight, (1, 1), pads, pads, epilogue=epilogue)
        got = conv(image, *scalars(0.02, 7.0))
        sums = conv_reference(image, 0.02, 7.0, weight, (1, 1), pads, pads, (1, 1))
        want = fake_reference(epilogue_reference(sums, multipliers, biases, -5.0, 6.0), *grid)
        np.testing.assert_array_equal(got, want.reshape(2, 9, 9, n).transpose(0, 3, 1, 2))


@vnni
def test_pointwise_route_can_be_chosen():
    """``positions=False`` runs a pointwise convolution through the channels-last image (the
    same integers); ``positions=True`` on a 3x3 kernel is refused."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((1, 8, 5, 6)).astype(np.float32)
    w = rng.integers(-128, 128, (10, 8, 1, 1)).astype(np.int8)
    image = QuantizedConv(w, (1, 1), (0, 0), (0, 0), positions=False)
    assert not image.pointwise and len(image.bind(
        x, *scalars(0.03, 9.0), np.empty((1, 10, 5, 6), np.float32))) == 3
    np.testing.assert_array_equal(image(x, *scalars(0.03, 9.0)),
                                  QuantizedConv(w, (1, 1), (0, 0), (0, 0))(x, *scalars(0.03, 9.0)))
    with pytest.raises(ta.ShapeError, match="only a 1x1 convolution"):
        QuantizedConv(np.ones((2, 2, 3, 3), np.int8), (1, 1), (1, 1), (1, 1), positions=True)
