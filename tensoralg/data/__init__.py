"""A few small real matrices and one tensor for tests and demos (see README.md here).

>>> load("lp_ship04l").shape
(402, 2166)
>>> path("collegemsg").name
'collegemsg.tns.gz'
"""
from __future__ import annotations

import pathlib

from tensoralg.errors import FormatError
from tensoralg.formats.io import read
from tensoralg.formats.tensor import Tensor

_HERE = pathlib.Path(__file__).resolve().parent

# the files and, where the largest index does not give it, the shape to pass to read()
FILES: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "bcspwr10": ("bcspwr10.mtx.gz", None),
    "lp_ship04l": ("lp_ship04l.mtx.gz", None),
    "ca-GrQc": ("ca-GrQc.mtx.gz", None),
    "collegemsg": ("collegemsg.tns.gz", (1899, 1899, 194)),
}


def path(name: str) -> pathlib.Path:
    """The path of a bundled file, by name with or without its extension.

    >>> path("bcspwr10.mtx.gz").name
    'bcspwr10.mtx.gz'
    """
    key = _key(name)
    return _HERE / FILES[key][0]


def load(name: str, format: object = None) -> Tensor:
    """Read a bundled file into a ``Tensor`` (matrices as CSR, the tensor as COO).

    >>> load("collegemsg").shape
    (1899, 1899, 194)
    """
    key = _key(name)
    return read(_HERE / FILES[key][0], format=format, shape=FILES[key][1])


def _key(name: str) -> str:
    for key, (filename, _) in FILES.items():
        if name in (key, filename):
            return key
    raise FormatError(f"no bundled data named {name!r}; choose one of {', '.join(FILES)}")
