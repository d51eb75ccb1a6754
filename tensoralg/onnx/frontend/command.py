"""``tensoralg onnx run|profile model.onnx``: the command-line side of the importer.

Inputs come from an ``.npz`` (one array per input name) or are drawn at random from the declared
shapes: free dimensions take ``batch``, floats are standard normal, integers are 0 or 1 (valid
indices of any table), booleans fair coins.
"""
from __future__ import annotations

from typing import TextIO

import numpy as np

from tensoralg.onnx.frontend.errors import InputError
from tensoralg.onnx.frontend.model import CompiledModel, load


def random_feeds(model: CompiledModel, batch: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the declared shapes and dtypes (free dimensions take ``batch``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in model.inputs:
        shape = tuple(d if isinstance(d, int) and d > 0 else batch for d in (info.shape or ()))
        dtype = info.dtype or np.dtype(np.float32)
        if dtype.kind == "f":
            feeds[info.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[info.name] = rng.random(shape) < 0.5
        else:
            feeds[info.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def read_feeds(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (OSError, ValueError) as err:
        raise InputError(f"cannot read inputs from {path}: {err}") from None


def run(path: str, inputs: str | None, opt_level: int, backend: str, batch: int,
        profile: bool, repeat: int, show_ir: bool, out: TextIO) -> int:
    model = load(path, opt_level=opt_level, backend=backend)
    feeds = read_feeds(inputs) if inputs else random_feeds(model, batch)
    if profile:
        out.write(f"{model}\n{model.profile(feeds, repeat=repeat)}\n")
    else:
        for name, value in model.run(feeds).items():
            out.write(f"{name}: {value.dtype} {list(value.shape)}\n{value}\n")
    if show_ir:
        out.write(model.stage_text("all") + "\n")
    return 0


__all__ = ["run", "random_feeds", "read_feeds"]
