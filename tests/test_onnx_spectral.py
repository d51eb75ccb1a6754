"""DFT, STFT and MelWeightMatrix (ops/spectral.py) against NumPy's FFT in float64 (and
onnxruntime where it agrees to float32 precision) at every opt level: forward, inverse,
one-sided and IRFFT forms, both opsets' axis conventions, cropped and padded lengths, the
NumPy FFT route for long transforms, a log-mel front end, empty batches; then bad input."""
from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402
from tensoralg.onnx.ops import spectral  # noqa: E402


def _complex(x: np.ndarray) -> np.ndarray:
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _parts(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def _dft_model(x, *, opset, axis, length=None, **attributes):
    """One DFT node of ``x`` (axis an attribute at opset 17, an input from 20)."""
    constants = {}
    inputs = ["x", ""]
    if length is not None:
        constants["n"] = np.array(length, np.int64)
        inputs[1] = "n"
    if opset >= 20:
        constants["axis"] = np.array(axis, np.int64)
        inputs.append("axis")
    else:
        attributes["axis"] = axis
    while not inputs[-1]:
        inputs.pop()
    node = helper.make_node("DFT", inputs, ["y"], **attributes)
    return node, constants


def _expected_dft(x, axis, length, inverse, onesided):
    z = np.moveaxis(_complex(x.astype(np.float64)), axis % x.ndim, -1)
    if inverse and onesided:
        out = np.fft.irfft(z, n=length)[..., None]
    else:
        out = (np.fft.ifft if inverse else np.fft.fft)(z, n=length)
        out = _parts(out[..., :length // 2 + 1] if onesided else out)
    return np.moveaxis(out, -2, axis % x.ndim).astype(x.dtype)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("inverse, onesided, parts", [(0, 0, 1), (0, 0, 2), (0, 1, 1),
                                                      (1, 0, 2), (1, 1, 2)])
@pytest.mark.parametrize("length", [None, 6, 13])
def test_dft_forms_against_numpy(opset, inverse, onesided, parts, length):
    """Every form, with the signal cropped (6 < 9), zero-padded (13) or as it is."""
    x = np.random.default_rng(11).standard_normal((2, 9, 3, parts)).astype(np.float32)
    node, constants = _dft_model(x, opset=opset, axis=1, length=length, inverse=inverse,
                                 onesided=onesided)
    n = length if length is not None else (2 * (9 - 1) if inverse and onesided else 9)
    want = _expected_dft(x, 1, n, inverse, onesided)
    model = onnx_model([node], {"x": x}, [("y", TensorProto.FLOAT, list(want.shape))],
                       constants, opset=opset)
    scale = np.abs(want).max()
    check_every_level(model, {"x": x}, {"y": want}, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("axis", [0, 2, -2, -3])
def test_dft_axes_float64_against_onnxruntime(axis):
    """The axis counts from either end (opset 20), in float64; onnxruntime agrees here."""
    x = np.random.default_rng(11).standard_normal((4, 8, 5, 2))
    node, constants = _dft_model(x, opset=20, axis=axis)
    want = _expected_dft(x, axis, x.shape[axis % 4], 0, 0)
    model = onnx_model([node], {"x": x}, [("y", TensorProto.DOUBLE, list(want.shape))],
                       constants, opset=20)
    check_every_level(model, {"x": x}, {"y": want}, rtol=1e-9, atol=1e-10)
    check_every_level(model, {"x": x}, rtol=1e-9, atol=1e-10, levels=(3,))


def test_long_transform_runs_numpy_fft_and_says_so():
    """A length whose basis would pass BASIS_MAX_VALUES runs NumPy's FFT, named in the plan."""
    length = 3000
    assert length * length * 2 > spectral.BASIS_MAX_VALUES
    x = np.random.default_rng(11).standard_normal((2, length, 1)).astype(np.float32)
    node, constants = _dft_model(x, opset=17, axis=1)
    want = _expected_dft(x, 1, length, 0, 0)
    model = onnx_model([node], {"x": x}, [("y", TensorProto.FLOAT, list(want.shape))],
                       constants, opset=17)
    compiled = check_every_level(model, {"x": x}, {"y": want}, rtol=1e-5,
                                 atol=1e-6 * np.abs(want).max(), levels=(0, 3))
    assert "numpy FFT of length 3000" in compiled.stage_text("plan")


def test_short_transform_is_a_product_with_a_basis():
    x = np.random.default_rng(11).standard_normal((64, 16, 1)).astype(np.float32)
    node, constants = _dft_model(x, opset=17, axis=1, onesided=1)
    model = onnx_model([node], {"x": x}, [("y", TensorProto.FLOAT, [64, 9, 2])], constants)
    plan = check_every_level(model, {"x": x}, {"y": _expected_dft(x, 1, 16, 0, 1)},
                             rtol=1e-5, atol=1e-5).stage_text("plan")
    assert "DFT of length 16 as a product with a constant 16x18 basis" in plan


def test_empty_batch():
    x = np.zeros((0, 8, 2), np.float32)
    node, constants = _dft_model(x, opset=20, axis=1, inverse=1)
    model = onnx_model([node], {"x": x}, [("y", TensorProto.FLOAT, [0, 8, 2])], constants,
                       opset=20)
    check_every_level(model, {"x": x}, {"y": np.zeros((0, 8, 2), np.float32)})


def _stft_expected(signal, step, window, size, onesided):
    frames = (signal.shape[1] - size) // step + 1
    z = _complex(signal.astype(np.float64))
    rows = np.stack([z[:, f * step:f * step + size] * window for f in range(frames)], axis=1)
    out = np.fft.fft(rows, axis=-1)
    return _parts(out[..., :size // 2 + 1] if onesided else out).astype(signal.dtype)


@pytest.mark.parametrize("windowed", [True, False])
@pytest.mark.parametrize("onesided, parts", [(1, 1), (0, 1), (0, 2)])
def test_stft_against_numpy(windowed, onesided, parts):
    signal = np.random.default_rng(11).standard_normal((2, 203, parts)).astype(np.float32)
    size, step = 40, 17
    inputs = ["s", "step", "w" if windowed else "", "" if windowed else "size"]
    nodes = [helper.make_node("STFT", inputs, ["y"], onesided=onesided)]
    constants = {"step": np.array(step, np.int64), "size": np.array(size, np.int64)}
    window = np.ones(size)
    if windowed:
        nodes.insert(0, helper.make_node("HannWindow", ["size"], ["w"]))
        window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(size) / size)
    want = _stft_expected(signal, step, window, size, onesided)
    model = onnx_model(nodes, {"s": signal}, [("y", TensorProto.FLOAT, list(want.shape))],
                       constants, opset=17)
    check_every_level(model, {"s": signal}, {"y": want}, rtol=1e-5,
                      atol=1e-6 * np.abs(want).max())


def test_log_mel_front_end_against_onnxruntime():
    """A speech model's front end: power spectrum of a Hann-windowed STFT, mel filter bank,
    log: the mel bank folds at load and onnxruntime agrees."""
    signal = np.random.default_rng(3).standard_normal((2, 1600, 1)).astype(np.float32)
    nodes = [helper.make_node("HannWindow", ["size"], ["w"]),
             helper.make_node("STFT", ["s", "step", "w", ""], ["z"]),
             helper.make_node("ReduceSumSquare", ["z"], ["p"], axes=[-1], keepdims=0),
             helper.make_node("MelWeightMatrix", ["bins", "size", "rate", "low", "high"],
                              ["mel"]),
             helper.make_node("MatMul", ["p", "mel"], ["m"]),
             helper.make_node("Add", ["m", "eps"], ["e"]),
             helper.make_node("Log", ["e"], ["y"])]
    constants = {"size": np.array(400, np.int64), "step": np.array(160, np.int64),
                 "bins": np.array(40, np.int64), "rate": np.array(16000, np.int64),
                 "low": np.array(20.0, np.float32), "high": np.array(8000.0, np.float32),
                 "eps": np.array(1.0, np.float32)}   # log(1 + m): no ill-conditioned log
    model = onnx_model(nodes, {"s": signal}, [("y", TensorProto.FLOAT, [2, 8, 40])],
                       constants, opset=17)
    compiled = check_every_level(model, {"s": signal}, rtol=1e-4, atol=1e-4)
    assert "MelWeightMatrix" not in compiled.stage_text("plan")    # folded at load


def test_mel_weight_matrix_matches_the_reference():
    from onnx.reference import ReferenceEvaluator

    args = {"bins": np.array(10, np.int64), "size": np.array(63, np.int64),
            "rate": np.array(8000, np.int64), "low": np.array(100.0, np.float32),
            "high": np.array(4000.0, np.float32)}
    node = helper.make_node("MelWeightMatrix", list(args), ["y"],
                            output_datatype=TensorProto.DOUBLE)
    model = onnx_model([node], {}, [("y", TensorProto.DOUBLE, [32, 10])], args)
    want = ReferenceEvaluator(model).run(None, {})[0]
    check_every_level(model, {}, {"y": want}, rtol=0, atol=0)


def _load(nodes, feeds, constants, rank, opset=20):
    """The model loaded (its errors come at run time, when the values are known)."""
    model = onnx_model(nodes, feeds, [("y", TensorProto.FLOAT, [f"d{i}" for i in range(rank)])],
                       constants, opset=opset)
    return tonnx.load(model)


@pytest.mark.parametrize("shape, attributes, constants, message", [
    ((2, 8, 3), {}, {}, "real (1) or real and imaginary (2) parts"),
    ((2, 8, 1), {}, {"axis": np.array(2, np.int64)}, "axis 2 is out of range"),
    ((2, 8, 1), {"inverse": 1, "onesided": 1}, {}, "reads a complex (2-part) spectrum"),
    ((2, 8, 2), {}, {"n": np.array(0, np.int64)}, "dft_length must be positive"),
    ((2, 8, 2), {}, {"n": np.array([3, 4], np.int64)}, "dft_length must be one integer"),
])
def test_bad_dft_inputs_are_shape_errors(shape, attributes, constants, message):
    inputs = ["x", "n" if "n" in constants else "", "axis" if "axis" in constants else ""]
    while inputs and not inputs[-1]:
        inputs.pop()
    x = np.ones(shape, np.float32)
    compiled = _load([helper.make_node("DFT", inputs, ["y"], **attributes)], {"x": x},
                     constants, 3)
    with pytest.raises(ta.ShapeError, match=re.escape(message)):
        compiled.run({"x": x})


def test_integer_signal_is_refused():
    x = np.ones((2, 8, 1), np.int32)
    compiled = _load([helper.make_node("DFT", ["x"], ["y"])], {"x": x}, {}, 3)
    with pytest.raises(ta.UnsupportedError, match="DFT of int32 values is not defined"):
        compiled.run({"x": x})


@pytest.mark.parametrize("signal_shape, size, step, window, onesided, message", [
    ((1, 10, 1), 20, 2, None, 1, "frame_length 20 must be within"),
    ((1, 10, 1), 4, 0, None, 1, "frame_step must be a positive integer"),
    ((1, 10, 1), 4, 2, np.ones(5, np.float32), 1, "the window has 5 values"),
    ((1, 10, 2), 4, 2, None, 1, "one-sided STFT takes a real signal"),
    ((10,), 4, 2, None, 1, "the signal is"),
])
def test_bad_stft_inputs_are_shape_errors(signal_shape, size, step, window, onesided, message):
    signal = np.ones(signal_shape, np.float32)
    constants = {"step": np.array(step, np.int64), "size": np.array(size, np.int64)}
    inputs = ["s", "step", "", "size"]
    if window is not None:
        constants["w"] = window
        inputs[2] = "w"
    compiled = _load([helper.make_node("STFT", inputs, ["y"], onesided=onesided)],
                     {"s": signal}, constants, 4, opset=17)
    with pytest.raises(ta.ShapeError, match=re.escape(message)):
        compiled.run({"s": signal})
