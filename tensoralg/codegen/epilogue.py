"""The activations a generated kernel applies to its results before storing them, as data.

:class:`Activation` is what every kernel's ``relu`` parameter takes (with False, True and a
clamp's ``(low, high)`` as shorthands): the ONNX importer fuses a ``Relu``, ``Clip``,
``Sigmoid``, ``HardSigmoid``, ``HardSwish`` or a ``Sigmoid``/``Mul`` SiLU into the ``Conv``
before it, and a ``Gelu`` (the erf form) into the dense layer before it, and hands the kernels
this value. :func:`epilogue_flags` gives the run-time flag
bits and parameters of the modules one dtype shares across layers. The code itself is emitted
by ``codegen/activation.py``; this module is plain Python, so that describing an activation
loads no LLVM.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("Relu", "Clip", "Sigmoid", "Silu", "HardSigmoid", "HardSwish", "Gelu")
# Run-time flag bits of the shared modules (the generated GEMM, the planar and patch
# convolutions): a bias, ReLU, a clamp, then one bit per smooth kind.
FLAG_BIAS, FLAG_RELU, FLAG_CLIP = 1, 2, 4
SMOOTH_FLAGS = {"Sigmoid": 8, "Silu": 16, "HardSigmoid": 32, "HardSwish": 64, "Gelu": 128}
ANY_SMOOTH = sum(SMOOTH_FLAGS.values())
PARAMETERS = 4      # values past a kernel's bias: clamp low, clamp high, alpha, beta
# erf(x) as 1 - t * p(t) * exp(-x^2), t = 1 / (1 + ERF_P |x|), with erf's sign (Abramowitz and
# Stegun 7.1.26, absolute error < 1.5e-7): the form the importer's Erf and Gelu statements
# use, so a GELU fused into a kernel agrees with the unfused graph.
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


@dataclass(frozen=True, slots=True)
class Activation:
    """An activation applied to a kernel's results: ``kind`` one of :data:`KINDS`; ``low`` and
    ``high`` bound a clamp (``Relu`` is ``(0, inf)``, ReLU6 ``Clip(0, 6)``; an infinite bound
    clamps nothing), ``alpha`` and ``beta`` are ``HardSigmoid``'s slope and offset. Values are
    floats carried as they are, never through text.

    >>> Activation.clip(0, 6).bounds, str(Activation.clip(0, 6)), str(SILU)
    ((0.0, 6.0), 'Clip(0.0, 6.0)', 'Silu')
    >>> Activation.hard_sigmoid(0.2, 0.5).text("x")
    'max(min(((x) * 0.2 + 0.5), 1), 0)'
    """

    kind: str
    low: float = -math.inf
    high: float = math.inf
    alpha: float = 0.0
    beta: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fused activation {self.kind!r} (known: {', '.join(KINDS)})")
        if self.kind == "Relu" and (self.low, self.high) != (0.0, math.inf):
            raise ValueError(f"a fused Relu clamps to (0, inf), not {(self.low, self.high)}")
        if self.kind not in ("Relu", "Clip") and (self.low, self.high) != (-math.inf, math.inf):
            raise ValueError(f"a fused {self.kind} has no clamp bounds, got "
                             f"{(self.low, self.high)}")
        if self.kind == "HardSwish" and (self.alpha, self.beta) != (1 / 6, 0.5):
            raise ValueError("a fused HardSwish has alpha 1/6 and beta 1/2")
        if self.kind not in ("HardSigmoid", "HardSwish") and (self.alpha, self.beta) != (0, 0):
            raise ValueError(f"a fused {self.kind} takes no alpha or beta")

    @staticmethod
    def clip(low: float, high: float) -> "Activation":
        """A fused ``Clip(x, low, high)``."""
        return Activation("Clip", float(low), float(high))

    @staticmethod
    def hard_sigmoid(alpha: float, beta: float) -> "Activation":
        """A fused ``HardSigmoid(x)``: ``max(0, min(1, alpha * x + beta))``."""
        return Activation("HardSigmoid", alpha=float(alpha), beta=float(beta))

    @property
    def bounds(self) -> tuple[float, float] | None:
        """``(low, high)`` of a clamp (Relu, Clip); None for the smooth kinds."""
        return (self.low, self.high) if self.kind in ("Relu", "Clip") else None

    @property
    def smooth(self) -> bool:
        """Whether this is more than a clamp (a sigmoid or hard-sigmoid family function)."""
        return self.kind not in ("Relu", "Clip")

    @property
    def kernel_argument(self) -> "bool | tuple[float, float] | Activation":
        """What the kernels' ``relu`` parameter takes: True for ReLU (its kernels and plan
        lines stay as they were), the bounds for a Clip, the activation itself otherwise."""
        return True if self.kind == "Relu" else self.bounds if self.kind == "Clip" else self

    def text(self, body: str) -> str:
        """Statement text of the activation applied to ``body`` (itself statement text)."""
        if self.kind in ("Relu", "Clip"):
            text = body if self.low == -math.inf else \
                f"max({body}, {'0' if self.kind == 'Relu' else literal(self.low)})"
            return text if self.high == math.inf else f"min({text}, {literal(self.high)})"
        if self.kind == "Sigmoid":
            return f"sigmoid({body})"
        if self.kind == "Silu":
            return f"(({body}) * sigmoid({body}))"
        if self.kind == "Gelu":
            return f"(0.5 * ({body}) * (1 + {erf_text(f'(({body}) * {math.sqrt(0.5)!r})')}))"
        hard = f"max(min((({body}) * {literal(self.alpha)} + {literal(self.beta)}), 1), 0)"
        return hard if self.kind == "HardSigmoid" else f"(({body}) * {hard})"

    def __str__(self) -> str:
        if self.kind == "Clip":
            return f"Clip({self.low!r}, {self.high!r})"
        if self.kind == "HardSigmoid":
            return f"HardSigmoid({self.alpha!r}, {self.beta!r})"
        return self.kind


def erf_text(x: str) -> str:
    """Statement text of erf of ``x`` (statement text) by :data:`ERF_A` and :data:`ERF_P`.

    >>> erf_text("z").startswith("((gt(z, 0) + (-1) * lt(z, 0)) * ")
    True
    """
    t = f"(1 / (1 + {ERF_P!r} * abs({x})))"
    poly = literal(ERF_A[-1])
    for coefficient in reversed(ERF_A[:-1]):
        poly = f"({literal(coefficient)} + {t} * {poly})"
    return f"((gt({x}, 0) + (-1) * lt({x}, 0)) * (1 + (-1) * {t} * {poly} * exp((-1) * {x} * {x})))"


def literal(value: float) -> str:
    """A float as statement text, parenthesised when negative: ``(-0.5)``."""
    text = repr(float(value))
    return f"({text})" if text.startswith("-") else text


RELU = Activation("Relu", 0.0, math.inf)
SIGMOID = Activation("Sigmoid")
SILU = Activation("Silu")
HARD_SWISH = Activation("HardSwish", alpha=1 / 6, beta=0.5)
GELU = Activation("Gelu")


def as_activation(relu: Any) -> Activation | None:
    """The :class:`Activation` of a kernel's ``relu`` parameter: False/None (none), True
    (ReLU), a clamp's ``(low, high)``, or an :class:`Activation`.

    >>> as_activation(True) == RELU, as_activation((0, 6)), as_activation(False)
    (True, Activation(kind='Clip', low=0.0, high=6.0, alpha=0.0, beta=0.0), None)
    """
    if relu is None or relu is False:
        return None
    if relu is True:
        return RELU
    if isinstance(relu, Activation):
        return relu
    low, high = relu
    return RELU if (float(low), float(high)) == (0.0, math.inf) else Activation.clip(low, high)


def epilogue_flags(relu: Any) -> tuple[int, tuple[float, float, float, float]]:
    """The activation flag bits of a shared module (``FLAG_RELU = 2``, ``FLAG_CLIP = 4``, then
    :data:`SMOOTH_FLAGS`) and the :data:`PARAMETERS` values it reads past the bias.

    >>> epilogue_flags(True), epilogue_flags(SILU)[0]
    ((2, (0.0, inf, 0.0, 0.0)), 16)
    """
    activation = as_activation(relu)
    if activation is None:
        return 0, (0.0, 0.0, 0.0, 0.0)
    params = (activation.low, activation.high, activation.alpha, activation.beta)
    if activation.kind == "Relu":
        return FLAG_RELU, params
    if activation.kind == "Clip":
        return FLAG_CLIP, params
    return SMOOTH_FLAGS[activation.kind], params


def describe(relu: Any) -> str:
    """The activation as a printed plan names it: ``relu``, ``clip(low, high)``, ``silu``, ...
    (empty without one)."""
    activation = as_activation(relu)
    if activation is None:
        return ""
    if activation.kind == "Relu":
        return "relu"
    if activation.kind == "Clip":
        return f"clip{activation.bounds}"
    return str(activation).lower()


__all__ = ["ANY_SMOOTH", "Activation", "ERF_A", "ERF_P", "FLAG_BIAS", "FLAG_CLIP", "FLAG_RELU", "GELU",
           "HARD_SWISH", "KINDS", "PARAMETERS", "RELU", "SIGMOID", "SILU", "SMOOTH_FLAGS",
           "as_activation", "describe", "epilogue_flags", "erf_text", "literal"]
