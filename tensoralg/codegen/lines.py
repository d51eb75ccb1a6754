"""An indentation-aware line builder for emitting C-like source.

Emitters never nest f-strings to build blocks: they call ``line`` and open ``block``s, and the
builder keeps the indentation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class Lines:
    """Collects lines of source text at the current indentation.

    >>> out = Lines(indent="  ")
    >>> with out.block("if (x) {", "}"):
    ...     out.line("y = 1;")
    >>> print(out.text(), end="")
    if (x) {
      y = 1;
    }
    """

    __slots__ = ("_indent", "_depth", "_lines")

    def __init__(self, indent: str = "  ") -> None:
        self._indent = indent
        self._depth = 0
        self._lines: list[str] = []

    def line(self, text: str = "") -> None:
        """Append one line (an empty line carries no indentation)."""
        self._lines.append(self._indent * self._depth + text if text else "")

    def comment(self, text: str, prefix: str = "// ") -> None:
        """Append a comment, one ``prefix`` per line of ``text``."""
        for part in text.splitlines() or [""]:
            self.line((prefix + part).rstrip())

    @contextmanager
    def indented(self) -> Iterator[None]:
        """Indent the lines appended inside the ``with`` one level deeper."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    @contextmanager
    def block(self, opener: str, closer: str) -> Iterator[None]:
        """Append ``opener``, the indented body, then ``closer``."""
        self.line(opener)
        with self.indented():
            yield
        self.line(closer)

    def replace_last(self, text: str) -> None:
        """Replace the last line, keeping its indentation (for ``} else {`` chains)."""
        last = self._lines[-1]
        self._lines[-1] = last[: len(last) - len(last.lstrip())] + text

    def text(self) -> str:
        """The collected source, ending with a newline."""
        return "\n".join(self._lines) + "\n"
