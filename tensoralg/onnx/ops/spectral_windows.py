"""HannWindow, HammingWindow and BlackmanWindow: the window of a given length, as onnxruntime
writes it (computed in float64, then cast to ``output_datatype``).

``periodic`` windows divide by the length (the first ``N`` values of a window of ``N + 1``),
symmetric ones by the length less one. They are constants of the length alone, so constant
folding computes them at load when the length is known.
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.constant import numpy_dtype
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op

# window -> cosine coefficients a0, a1, a2: a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N)
COEFFICIENTS = {"HannWindow": (0.5, 0.5, 0.0), "HammingWindow": (25 / 46, 21 / 46, 0.0),
                "BlackmanWindow": (0.42, 0.5, 0.08)}


def window(name: str, size: int, periodic: bool) -> np.ndarray:
    """The window's values in float64.

    >>> window("HannWindow", 4, True).round(12).tolist()
    [0.0, 0.5, 1.0, 0.5]
    """
    a0, a1, a2 = COEFFICIENTS[name]
    span = size if periodic else size - 1
    k = np.arange(size, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        # a symmetric window of one value divides 0 by 0: NaN, as onnxruntime gives
        angle = 2 * np.pi * k / np.float64(span)
    return a0 - a1 * np.cos(angle) + a2 * np.cos(2 * angle)


def _window_op(name: str):  # type: ignore[no-untyped-def]
    def run(node: NodeContext, size: np.ndarray, *, periodic: int = 1,
            output_datatype: int = 1) -> np.ndarray:
        if np.asarray(size).size != 1 or np.asarray(size).dtype.kind not in "iu" or \
                int(np.asarray(size).reshape(-1)[0]) < 0:
            raise ta.ShapeError(f"{node}: size must be one non-negative integer, got "
                                f"{np.asarray(size)!r}")
        node.note(f"numpy {name}")
        values = window(name, int(np.asarray(size).reshape(-1)[0]), bool(periodic))
        return values.astype(numpy_dtype(output_datatype))
    return run


for _name in COEFFICIENTS:
    op(_name, since=17)(_window_op(_name))
