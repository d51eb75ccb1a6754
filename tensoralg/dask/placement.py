"""Where data goes on a distributed cluster, when one is running (a ``distributed`` client
is the default): broadcast operands to every worker, partitioned blocks spread over them.

Data left inside a graph lands on whichever worker the scheduler runs its (instant) task on,
often the same one for all of it; Dask then runs every task that reads it there, to spare the
transfers. Without a client, the graph carries the data and nothing here changes it.
"""
from __future__ import annotations

import sys
from typing import Any


def _client() -> Any:
    if "distributed" not in sys.modules:
        return None         # no cluster can be running
    try:
        return sys.modules["distributed"].default_client()
    except ValueError:
        return None


SCATTER_BYTES = 1 << 20       # smaller broadcast operands travel inside the graph


def placed(value: Any) -> Any:
    """A large broadcast operand, sent to every worker of the current distributed client (a
    future in the graph): embedded in the graph instead, the scheduler would run every task on
    the one worker that holds it, to spare the transfer. It is sent on every call (hashing it
    to reuse an earlier copy costs about as much, and an array changed in place must not be
    reused); an operand used again and again is best a persisted, replicated dask array."""
    client = _client()
    if client is None:
        return value
    from dask.sizeof import sizeof

    if sizeof(value) < SCATTER_BYTES:
        return value
    return client.scatter(value, broadcast=True, hash=False)


def spread(blocks: dict[Any, Any]) -> dict[Any, Any]:
    """The blocks of a partitioned operand, sent round-robin to the workers of the current
    client (futures, keyed as before); unchanged when no client is running."""
    client = _client()
    if client is None or not blocks:
        return blocks
    futures = client.scatter(list(blocks.values()), hash=False)
    return dict(zip(blocks, futures))
