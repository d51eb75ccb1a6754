"""The error hierarchy of tensoralg: a leaf module every room may import.

Every error a user can provoke derives from :class:`TensorAlgebraError`, so
``except ta.TensorAlgebraError`` catches all of them. Each message names the
expression, the operand and, where there is one, the fix.
"""
from __future__ import annotations


class TensorAlgebraError(Exception):
    """Base class of every error tensoralg raises on purpose."""


class NotationError(TensorAlgebraError, ValueError):
    """Malformed index notation; the message shows the text with a caret under the fault.

    >>> err = NotationError("unexpected ')'", "y(i) = A(i,j))", 13)
    >>> print(err)
    unexpected ')'
      y(i) = A(i,j))
                   ^
    """

    def __init__(self, message: str, text: str | None = None, position: int | None = None) -> None:
        self.message = message
        self.text = text
        self.position = position
        super().__init__(self._render())

    def _render(self) -> str:
        if self.text is None:
            return self.message
        lines = [self.message, "  " + self.text]
        if self.position is not None:
            lines.append("  " + " " * max(0, min(self.position, len(self.text))) + "^")
        return "\n".join(lines)

    def __reduce__(self):  # keep pickling (multiprocessing, pytest-xdist) working
        return (type(self), (self.message, self.text, self.position))


class ShapeError(TensorAlgebraError, ValueError):
    """Operand shapes disagree with each other or with the notation."""


class FormatError(TensorAlgebraError, ValueError):
    """A format description is invalid, or storage arrays do not describe a valid tensor."""


class CompileError(TensorAlgebraError, RuntimeError):
    """Lowering or code generation failed (an internal error or a missing toolchain)."""


class UnsupportedError(TensorAlgebraError, NotImplementedError):
    """The input is valid but asks for something tensoralg does not support (yet)."""


class KernelRuntimeError(TensorAlgebraError, RuntimeError):
    """A compiled kernel reported a failure while running (for example, out of memory)."""


class MemoryLimitError(TensorAlgebraError, MemoryError):
    """A dense output or temporary would exceed the memory limit (``ta.set_memory_limit``);
    raised before anything is allocated, naming the size, the expression and the fix."""


class ModelError(TensorAlgebraError, ValueError):
    """An ONNX model cannot be read: malformed protobuf, a failed ``onnx.checker``, a bad graph."""


class InputError(TensorAlgebraError, ValueError):
    """An argument or a model's feed is missing, unknown, or of the wrong kind, dtype or
    shape (a lossy ``dtype=``, an ``out=`` that cannot hold the result); the message names it."""


class ArgumentTypeError(InputError, TypeError):
    """An argument of the wrong type (``out=`` that is not an array, ``dtype=`` that is not a
    dtype): a ``TypeError``, as NumPy raises for the same mistake, and an ``InputError``."""


class CastingError(InputError, TypeError):
    """``dtype=`` or ``out=`` asks for a cast the ``casting=`` rule forbids (a ``TypeError``, as
    in NumPy, and an ``InputError``)."""


__all__ = [
    "TensorAlgebraError",
    "NotationError",
    "ShapeError",
    "FormatError",
    "CompileError",
    "UnsupportedError",
    "KernelRuntimeError",
    "MemoryLimitError",
    "CastingError",
    "ArgumentTypeError",
    "ModelError",
    "InputError",
]
