"""tensoralg: a compiler for sparse and dense tensor algebra.

>>> import numpy as np, scipy.sparse as sp, tensoralg as ta
>>> A = sp.random_array((5, 4), density=0.5, format="csr", random_state=0)
>>> bool(np.allclose(ta.einsum("ij,j->i", A, np.ones(4)), A.sum(axis=1)))
True
"""
from tensoralg._version import __version__
from tensoralg.api import (
    Kernel,
    compile,
    einsum,
    get_memory_limit,
    get_num_threads,
    optimised_builds,
    set_memory_limit,
    set_num_threads,
    wait_for_optimised,
)
from tensoralg.contract_path import einsum_path
from tensoralg.errors import (
    ArgumentTypeError,
    CastingError,
    CompileError,
    FormatError,
    InputError,
    KernelRuntimeError,
    MemoryLimitError,
    ModelError,
    NotationError,
    ShapeError,
    TensorAlgebraError,
    UnsupportedError,
)
from tensoralg.formats import (
    COO,
    CSC,
    CSF,
    CSR,
    DCSC,
    DCSR,
    Format,
    LevelKind,
    Tensor,
    dense,
    read,
    write,
)
from tensoralg.schedule import Schedule
from tensoralg.tune import autotune

__all__ = [
    "__version__", "einsum", "einsum_path", "compile", "Kernel", "set_num_threads",
    "get_num_threads",
    "set_memory_limit", "get_memory_limit", "MemoryLimitError", "CastingError", "ArgumentTypeError",
    "Tensor", "Format", "LevelKind", "CSR", "CSC",
    "DCSR", "DCSC", "COO", "CSF", "dense", "read", "write", "TensorAlgebraError",
    "NotationError", "ShapeError", "FormatError", "CompileError", "UnsupportedError",
    "KernelRuntimeError", "ModelError", "InputError", "Schedule",
    "autotune", "wait_for_optimised", "optimised_builds",
]

# ta.Tensor's operators are compiled through the API above (arrays.py); installed here so that
# formats/ stays below the compiler.
from tensoralg import arrays as _arrays  # noqa: E402

_arrays.install()

# Format selection (ta.select.experiment) and blockwise plans over dask arrays (ta.dask, which
# imports dask only when a function needs it) are built on the public names above: import them
# last.
from tensoralg import dask, select  # noqa: E402, F401
