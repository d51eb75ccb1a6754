"""Errors of the ONNX importer, all :class:`tensoralg.TensorAlgebraError` subclasses.

They live here because ``tensoralg/onnx`` may import only the public API; they belong in
``tensoralg/errors.py`` once the core owners agree (see the importer's README).
"""
from __future__ import annotations

import tensoralg as ta


class ModelError(ta.TensorAlgebraError, ValueError):
    """The model cannot be read: malformed protobuf, a failed ``onnx.checker`` run, a bad graph."""


class InputError(ta.TensorAlgebraError, ValueError):
    """A feed is missing, unknown, or has the wrong dtype or shape; the message names it."""


__all__ = ["ModelError", "InputError"]
