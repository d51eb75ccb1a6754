"""Importing dask lazily, with the error that names the extra to install."""
from __future__ import annotations

from types import ModuleType

from tensoralg.errors import UnsupportedError

EXTRA_HINT = 'install it with pip install "tensoralg[dask]" (or "dask[distributed]")'


def dask_array() -> ModuleType:
    """``dask.array``, or an UnsupportedError naming the ``tensoralg[dask]`` extra.

    >>> dask_array().__name__
    'dask.array'
    """
    try:
        import dask.array
    except ImportError as err:
        raise UnsupportedError(f"tensoralg.dask needs dask, which is not importable ({err}); "
                               f"{EXTRA_HINT}") from None
    register_sizeof()
    return dask.array


_registered = False


def register_sizeof() -> None:
    """Teach dask the size of a ``ta.Tensor`` block (its arrays' bytes). Without it dask
    counts a few hundred bytes, and neither places nor rebalances Tensor blocks by their
    weight (every MTTKRP block lands on one worker). Called where dask is first needed, on
    the client and in the workers' tasks."""
    global _registered
    if _registered:
        return
    from dask.sizeof import sizeof

    import tensoralg as ta

    @sizeof.register(ta.Tensor)
    def _tensor_bytes(tensor: ta.Tensor) -> int:
        arrays = [tensor.vals] + [a for level in tensor.levels for a in (level.pos, level.crd)
                                  if a is not None]
        return int(sum(a.nbytes for a in arrays)) + 200

    _registered = True
