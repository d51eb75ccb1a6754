"""Errors of the ONNX importer, re-exported from the public API (they live in tensoralg/errors.py,
the one leaf module of every error).
"""
from __future__ import annotations

import tensoralg as ta

ModelError = ta.ModelError
InputError = ta.InputError

__all__ = ["ModelError", "InputError"]
