"""The C dialect, and building a shared object with the system C compiler.

The C source is a self-contained C11 translation unit; `compile_c` turns it into the bytes of a
shared object, which `build.py` loads with ctypes (and `cache.py` may keep).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from tensoralg.codegen.cfamily import CFamilyEmitter
from tensoralg.errors import CompileError

# -ffp-contract=off: no fused multiply-adds the IR did not ask for, so that C and LLVM agree
# bit for bit; -fno-math-errno lets sqrt vectorise and changes no result; -fwrapv: integer
# overflow wraps, as in LLVM's plain add and mul and in NumPy (signed overflow is otherwise
# undefined in C, and a kernel summing int32 products could be compiled to anything).
C_FLAGS = (
    "-O3",
    "-march=native",
    "-fPIC",
    "-shared",
    "-std=c11",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fwrapv",
)


class CEmitter(CFamilyEmitter):
    """C11 with ``restrict`` pointers; the kernel returns its status as ``int32_t``.

    >>> from tensoralg.ir.nodes import Function, Block
    >>> "int32_t k(void) {" in CEmitter().emit(Function("k", (), Block()))
    True
    """

    complex_values = True     # C11's _Complex, with GNU __real__/__imag__ (gcc and clang)
    # The LLVM backend inlines these (no libm call, so the loop vectorises); C must compute
    # the very same to agree with it bit for bit.
    inline_f32_math = frozenset({"exp", "tanh"})
    backend_name = "c"


def compiler_command(environ: Mapping[str, str]) -> list[str]:
    """The C compiler to run: ``$CC`` (which may carry flags) or ``cc``.

    >>> compiler_command({"CC": "gcc -m64"})
    ['gcc', '-m64']
    """
    return shlex.split(environ.get("CC", "")) or ["cc"]


def compile_c(source: str, name: str, compiler: list[str] | None = None) -> bytes:
    """Compile C ``source`` into the bytes of a shared object exporting ``name``.

    Raises `CompileError` with the compiler's messages when the compiler is missing or fails;
    the source is then kept on disk and its path is in the message.

    >>> so = compile_c("int k(void) { return 0; }", "k")  # doctest: +SKIP
    """
    command = compiler if compiler is not None else compiler_command(os.environ)
    workdir = Path(tempfile.mkdtemp(prefix="tensoralg-c-"))
    source_path, library_path = workdir / f"{name}.c", workdir / f"{name}.so"
    source_path.write_text(source)
    argv = [*command, *C_FLAGS, "-o", str(library_path), str(source_path), "-lm"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as error:
        raise CompileError(
            f"cannot run the C compiler {command[0]!r} ({error}); install one or set CC; "
            f"source kept at {source_path}"
        ) from None
    if result.returncode != 0:
        raise CompileError(
            f"the C compiler failed on kernel {name!r} (exit {result.returncode}); "
            f"source kept at {source_path}\n{' '.join(argv)}\n{result.stderr.strip()}"
        )
    data = library_path.read_bytes()
    shutil.rmtree(workdir, ignore_errors=True)
    return data
