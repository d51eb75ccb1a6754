"""DFT, STFT and MelWeightMatrix: Fourier transforms as products with a constant basis.

A transform of length ``L`` along one axis is a matrix product: the signal's values along the
axis (real and imaginary parts interleaved, as ONNX stores them) times a real basis of cosines
and sines, ``[L * parts_in, bins * parts_out]``. Each row of the product is one transformed
signal, so a batch of frames (an STFT, a spectrogram front end) becomes one dense product: a
generated kernel, or BLAS from :data:`~tensoralg.onnx.ops.matmul.BLAS_MIN_WORK` multiply-adds on,
the same visible decision a MatMul makes. The basis is computed once per length and kind, in
float64 with exact integer phases (``n * k mod L``), then cast.

A basis costs ``L^2`` values, so from :data:`BASIS_MAX_VALUES` on (a transform of a few
thousand points) the node runs NumPy's FFT instead, and says so in its plan: the statement
language cannot write a butterfly's strided, data-independent shuffles, and an ``L^2`` product
would cost hundreds of times an FFT's ``L log L``.

Semantics follow the ONNX specification (and its reference implementation): ``dft_length``
crops or zero-pads the signal; ``onesided`` keeps the ``L // 2 + 1`` unique bins of a forward
transform, and an inverse one-sided transform (opset 20's IRFFT) reads those bins and returns
a real signal of length ``L``; an inverse transform divides by ``L``.

>>> import tensoralg.onnx.ops.kernels as k
>>> node = k.NodeContext("n0", "DFT", ("x",), ("y",), 20, k.KernelSet("llvm"))
>>> dft(node, np.array([[1.0], [0.0], [0.0], [0.0]]), axis=np.array(0)).tolist()
[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
"""
from __future__ import annotations

import functools
import math

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.constant import numpy_dtype
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype
from tensoralg.onnx.ops.matmul import matmul
from tensoralg.onnx.ops.registry import op

# Largest basis (values) a transform builds; beyond it NumPy's FFT runs (module docstring).
# 4M values: 16 MB in float32, a real transform of ~2900 points or a complex one of ~1450.
BASIS_MAX_VALUES = 1 << 22


def _integer(node: NodeContext, name: str, value: np.ndarray | None) -> int | None:
    """The one integer in ``value`` (a scalar or one-element input), None when absent."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise ta.ShapeError(f"{node}: {name} must be one integer, got {array!r}")
    return int(array.reshape(-1)[0])


@functools.lru_cache(maxsize=8)     # at most 8 x 32 MB (BASIS_MAX_VALUES in float64)
def basis(length: int, used: int, parts_in: int, bins: int, inverse: bool, real_out: bool,
          dtype: str) -> np.ndarray:
    """The real matrix that maps ``used`` interleaved input values (``parts_in`` 1: real,
    2: complex) to ``bins`` transformed values of a length-``length`` transform.

    ``real_out`` is the inverse one-sided case: its rows are the bins ``k`` of a Hermitian
    spectrum, weighted 2 except the 0th and (for even ``length``) the middle one, and its output
    is the real signal alone. Read-only, cached.

    >>> (basis(2, 2, 1, 2, False, False, "<f8").round(12) + 0.0).tolist()  # [x0 + x1, x0 - x1]
    [[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, -1.0, 0.0]]
    """
    n = np.arange(used, dtype=np.int64)[:, None]
    k = np.arange(bins, dtype=np.int64)[None, :]
    angle = 2 * np.pi * ((n * k) % length) / length
    cos, sin = np.cos(angle), np.sin(angle)
    scale = 1.0 / length if inverse else 1.0
    if real_out:
        # rows: bins k (real, imaginary); columns: samples.  cos/sin were built [k, n] here.
        weight = np.full((used, 1), 2.0)
        weight[0] = 1.0
        if length % 2 == 0 and used > length // 2:
            weight[length // 2] = 1.0
        matrix = np.empty((used, 2, bins))
        matrix[:, 0] = weight * cos * scale
        matrix[:, 1] = -weight * sin * scale
        out = matrix.reshape(used * 2, bins)
    else:
        sign = 1.0 if inverse else -1.0
        matrix = np.empty((used, parts_in, bins, 2))
        # x_r e^{i s a}: real part x_r cos a, imaginary part s x_r sin a
        matrix[:, 0, :, 0] = cos * scale
        matrix[:, 0, :, 1] = sign * sin * scale
        if parts_in == 2:
            # i x_i e^{i s a}: real part -s x_i sin a, imaginary part x_i cos a
            matrix[:, 1, :, 0] = -sign * sin * scale
            matrix[:, 1, :, 1] = cos * scale
        out = matrix.reshape(used * parts_in, bins * 2)
    out = out.astype(np.dtype(dtype))
    out.flags.writeable = False
    return out


def transform(node: NodeContext, x: np.ndarray, length: int | None, axis: int, inverse: bool,
              onesided: bool) -> np.ndarray:
    """The DFT of ``x`` (last axis: 1 real or 2 complex parts) along ``axis``, in ONNX's
    layout: the transformed axis in place, the last axis the output's parts."""
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise ta.ShapeError(f"{node}: the input's last axis holds the real (1) or real and "
                            f"imaginary (2) parts, got shape {x.shape}")
    if x.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: a DFT of {x.dtype} values is not defined; the "
                                  f"input is float")
    rank = x.ndim
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ta.ShapeError(f"{node}: axis {axis} is out of range for rank {rank} (the last "
                            f"axis holds the parts)")
    axis %= rank
    parts = x.shape[-1]
    size = x.shape[axis]
    real_out = inverse and onesided
    if real_out and parts != 2:
        raise ta.ShapeError(f"{node}: an inverse one-sided DFT reads a complex (2-part) "
                            f"spectrum, got {parts} part(s)")
    if length is None:
        length = 2 * (size - 1) if real_out else size
    if length < 1:
        raise ta.ShapeError(f"{node}: dft_length must be positive, got {length}")
    if real_out:
        used, bins = min(size, length // 2 + 1), length
    else:
        used, bins = min(size, length), (length // 2 + 1 if onesided else length)
    dtype = compute_dtype(x.dtype)
    moved = np.moveaxis(x, axis, -2)
    outer = moved.shape[:-2]
    parts_out = 1 if real_out else 2
    if used * parts * bins * parts_out > BASIS_MAX_VALUES:
        node.note(f"numpy FFT of length {length} (a basis would take "
                  f"{used * parts * bins * parts_out} values)")
        result = _numpy_fft(moved, length, inverse, onesided, real_out).astype(dtype)
    else:
        rows = np.ascontiguousarray(moved[..., :used, :], dtype=dtype).reshape(-1, used * parts)
        weights = basis(length, used, parts, bins, inverse, real_out, dtype.str)
        node.note(f"DFT of length {length} as a product with a constant {weights.shape[0]}x"
                  f"{weights.shape[1]} basis")
        result = matmul(node, rows, weights)
        result = result.reshape(*outer, bins, parts_out)
    return np.moveaxis(result, -2, axis).astype(x.dtype, copy=False)


def _numpy_fft(moved: np.ndarray, length: int, inverse: bool, onesided: bool,
               real_out: bool) -> np.ndarray:
    """The transform of ``moved`` (transformed axis at -2, parts last) by NumPy's FFT."""
    values = moved[..., 0] if moved.shape[-1] == 1 else moved[..., 0] + 1j * moved[..., 1]
    if real_out:
        return np.fft.irfft(values, n=length, axis=-1)[..., None]
    spectrum = (np.fft.ifft if inverse else np.fft.fft)(values, n=length, axis=-1)
    if onesided:
        spectrum = spectrum[..., :length // 2 + 1]
    return np.stack([spectrum.real, spectrum.imag], axis=-1)


@op("DFT", since=17)
def dft_17(node: NodeContext, x: np.ndarray, dft_length: np.ndarray | None = None, *,
           axis: int = 1, inverse: int = 0, onesided: int = 0) -> np.ndarray:
    """DFT-17: the axis is an attribute (default 1)."""
    return transform(node, x, _integer(node, "dft_length", dft_length), axis, bool(inverse),
                     bool(onesided))


@op("DFT", since=20)
def dft(node: NodeContext, x: np.ndarray, dft_length: np.ndarray | None = None,
        axis: np.ndarray | None = None, *, inverse: int = 0, onesided: int = 0) -> np.ndarray:
    """DFT-20: the axis is an optional input (default -2, the last signal axis)."""
    chosen = _integer(node, "axis", axis)
    return transform(node, x, _integer(node, "dft_length", dft_length),
                     -2 if chosen is None else chosen, bool(inverse), bool(onesided))


@op("STFT", since=17)
def stft(node: NodeContext, signal: np.ndarray, frame_step: np.ndarray,
         window: np.ndarray | None = None, frame_length: np.ndarray | None = None, *,
         onesided: int = 1) -> np.ndarray:
    """Frames of ``signal`` ``[batch, length, parts]`` (or ``[batch, length]``, real),
    ``frame_step`` apart, each multiplied
    by ``window`` and transformed: ``[batch, frames, bins, 2]``."""
    step = _integer(node, "frame_step", frame_step)
    given = _integer(node, "frame_length", frame_length)
    if signal.ndim == 2:
        # PyTorch's TorchScript exporter writes torch.stft's real [batch, length] signal as
        # it is; onnxruntime reads it as real
        signal = signal[..., None]
    if signal.ndim != 3 or signal.shape[-1] not in (1, 2):
        raise ta.ShapeError(f"{node}: the signal is [batch, length, 1 or 2] (or a real "
                            f"[batch, length]), got {signal.shape}")
    if window is not None and np.asarray(window).ndim != 1:
        raise ta.ShapeError(f"{node}: the window must be 1-D, got shape "
                            f"{np.asarray(window).shape}")
    size = given if given is not None else (
        np.asarray(window).shape[0] if window is not None else signal.shape[1])
    if window is not None and np.asarray(window).shape[0] != size:
        raise ta.ShapeError(f"{node}: the window has {np.asarray(window).shape[0]} values but "
                            f"frame_length is {size}")
    if step is None or step < 1:
        raise ta.ShapeError(f"{node}: frame_step must be a positive integer, got {step}")
    if not 1 <= size <= signal.shape[1]:
        raise ta.ShapeError(f"{node}: frame_length {size} must be within [1, {signal.shape[1]}]"
                            f" (the signal's length)")
    if onesided and signal.shape[-1] == 2:
        raise ta.ShapeError(f"{node}: a one-sided STFT takes a real signal (1 part), got a "
                            f"complex one; set onesided=0")
    frames = (signal.shape[1] - size) // step + 1
    dtype = compute_dtype(signal.dtype)
    # [batch, frames, parts, size] -> [batch, frames, size, parts], windowed in the copy
    view = np.lib.stride_tricks.sliding_window_view(signal, size, axis=1)[:, ::step]
    view = np.moveaxis(view, -1, -2)
    if window is not None:
        framed = (view * np.asarray(window, dtype=dtype)[:, None]).astype(dtype, copy=False)
        node.note(f"numpy framing: {frames} frames of {size}, {step} apart, times the window")
    else:
        framed = np.ascontiguousarray(view, dtype=dtype)
        node.note(f"numpy framing: {frames} frames of {size}, {step} apart")
    return transform(node, framed, size, 2, False, bool(onesided)).astype(signal.dtype,
                                                                             copy=False)


def mel_weights(bins: int, length: int, rate: float, low: float, high: float) -> np.ndarray:
    """ONNX's mel filter bank ``[length // 2 + 1, bins]`` in float64: triangles with peak 1
    between frequencies equally spaced on the mel scale ``2595 log10(1 + f / 700)``, each
    edge rounded down to a DFT bin (as the reference implementation and onnxruntime do).

    >>> mel_weights(2, 8, 8000, 0, 4000).shape
    (5, 2)
    """
    mel_low = 2595 * math.log10(1 + low / 700)
    mel_high = 2595 * math.log10(1 + high / 700)
    step = (mel_high - mel_low) / (bins + 2)
    hertz = 700 * (10 ** ((np.arange(bins + 2) * step + mel_low) / 2595) - 1)
    edges = np.floor((length + 1) * hertz / rate).astype(np.int64)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, centre, right = edges[i], edges[i + 1], edges[i + 2]
        if centre == left:
            out[centre, i] = 1.0
        else:
            j = np.arange(left, centre + 1)
            out[j, i] = (j - left) / (centre - left)
        if right > centre:
            j = np.arange(centre, right)
            out[j, i] = (right - j) / (right - centre)
    return out


@op("MelWeightMatrix", since=17)
def mel_weight_matrix(node: NodeContext, num_mel_bins: np.ndarray, dft_length: np.ndarray,
                      sample_rate: np.ndarray, lower_edge_hertz: np.ndarray,
                      upper_edge_hertz: np.ndarray, *, output_datatype: int = 1) -> np.ndarray:
    """The mel filter bank (a constant of its inputs, folded at load when they are)."""
    bins, length, rate = (_integer(node, name, value) or 0 for name, value in (
        ("num_mel_bins", num_mel_bins), ("dft_length", dft_length),
        ("sample_rate", sample_rate)))
    low, high = (float(np.asarray(v).reshape(-1)[0]) for v in (lower_edge_hertz,
                                                                upper_edge_hertz))
    if bins < 1 or length < 1 or rate < 1:
        raise ta.ShapeError(f"{node}: num_mel_bins, dft_length and sample_rate must be "
                            f"positive, got {bins}, {length}, {rate}")
    if not 0 <= low < high <= rate / 2:
        raise ta.ShapeError(f"{node}: the edges must satisfy 0 <= lower ({low}) < upper "
                            f"({high}) <= sample_rate / 2 ({rate / 2})")
    node.note(f"numpy mel filter bank: {length // 2 + 1} bins x {bins} mel bins")
    # upper <= rate / 2 keeps every edge below (length + 1) / 2: inside the spectrum
    return mel_weights(bins, length, rate, low, high).astype(numpy_dtype(output_datatype))
