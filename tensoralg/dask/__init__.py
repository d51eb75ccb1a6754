"""The same einsum, blockwise, on Dask: ``dask.array`` operands whose chunks are NumPy arrays,
scipy.sparse matrices or ``ta.Tensor`` s, each block computed by a compiled tensoralg kernel.

The room of DESIGN.md that holds blockwise plans; it uses the public API only (``tensoralg``,
``tensoralg.api``), with NumPy and scipy, and imports dask lazily: importing this package is
cheap and works without dask, and its functions raise ``ta.UnsupportedError`` naming the
``tensoralg[dask]`` extra when dask is missing.

- ``requirement.py``: importing dask, or the error that names the extra
- ``operands.py``: what a plan knows of an operand (indices, chunk bounds, chunk kind)
- ``plan.py``: the plan: partitioned indices, broadcast operands, split sums, task counts
- ``tasks.py``: what runs on the workers (a block, an addition of partials); kernels compiled
  once per worker process, from the on-disk cache after the first
- ``graph.py``: a plan as a dask ``HighLevelGraph`` layer, one task per block and per addition
- ``resolve.py``: ``ta.einsum`` / ``Kernel`` calls with dask operands, ``explain``
- ``partition.py``: ``from_scipy`` / ``from_tensor``, row blocks balanced by nonzeros
- ``readers.py``: ``read_mtx`` / ``read_tns``, chunked operands straight from files

>>> import numpy as np, scipy.sparse as sp, tensoralg as ta
>>> A = sp.random_array((60, 40), density=0.1, format="csr", random_state=0)
>>> y = ta.einsum("ij,j->i", ta.dask.from_scipy(A, chunks=3), np.ones(40))
>>> bool(np.allclose(y.compute(scheduler="synchronous"), A.sum(axis=1)))
True
"""
import sys as _sys

from tensoralg import api as _api
from tensoralg.dask.partition import balanced_bounds, from_scipy, from_tensor
from tensoralg.dask.readers import read_mtx, read_tns
from tensoralg.dask.requirement import register_sizeof as _register_sizeof
from tensoralg.dask.resolve import einsum_handler as _einsum_handler
from tensoralg.dask.resolve import explain
from tensoralg.dask.resolve import kernel_handler as _kernel_handler
from tensoralg.dask.tasks import worker_stats

__all__ = ["from_scipy", "from_tensor", "read_mtx", "read_tns", "explain", "balanced_bounds",
           "worker_stats"]

_api.set_dask_handlers(_einsum_handler, _kernel_handler)

if "dask" in _sys.modules:      # a dask worker unpickling a Tensor block: weigh it right
    _register_sizeof()
