"""ONNX op implementations, one module per op family, registered with ``@op``.

The modules are imported by name below; importing one runs its ``@op`` registrations.
"""
from tensoralg.onnx.ops import (  # noqa: F401  (imported for their registrations)
    attention,
    constant,
    control,
    conv,
    conv_transpose,
    detection,
    einsum,
    elementwise,
    grid_sample,
    indexing,
    layernorm,
    linalg,
    matmul,
    movement,
    normalization,
    pool,
    quantize,
    rearrange,
    recurrent,
    reduce,
    resize,
    rounding,
    sampling,
    scan,
    scatter,
    selection,
    softmax,
    spectral,
    spectral_windows,
    variadic,
)
from tensoralg.onnx.ops.registry import OpImpl, lookup, op, supported_ops

__all__ = ["op", "lookup", "supported_ops", "OpImpl"]
