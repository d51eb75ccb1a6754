"""Storage of tensors: level formats, ``Format``, ``Tensor`` and every conversion.

>>> import numpy as np
>>> t = Tensor.from_numpy(np.eye(3), format=CSR)
>>> str(t)
'Tensor 3x3 csr (ds) float64 nnz=3'
"""
from tensoralg.formats.convert import bind, from_numpy, from_scipy, from_sparse, input_family
from tensoralg.formats.format import (
                                      COO,
                                      CSC,
                                      CSF,
                                      CSR,
                                      DCSC,
                                      DCSR,
                                      NAMED,
                                      Format,
                                      dense,
                                      resolve_format,
)
from tensoralg.formats.io import read, write
from tensoralg.formats.level import LevelKind
from tensoralg.formats.pack import from_coords
from tensoralg.formats.tensor import LevelArrays, Tensor
from tensoralg.formats.validate import validate

__all__ = [
    "COO", "CSC", "CSF", "CSR", "DCSC", "DCSR", "NAMED", "Format", "LevelArrays", "LevelKind",
    "Tensor", "bind", "dense", "from_coords", "from_numpy", "from_scipy", "from_sparse",
    "input_family", "read", "resolve_format", "validate", "write",
]
