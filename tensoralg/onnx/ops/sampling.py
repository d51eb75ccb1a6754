"""RandomNormal, RandomUniform (and their ``Like`` forms), Bernoulli and Multinomial.

Samples come from NumPy's PCG64 generator, one per node, kept for the model's lifetime: each
run draws new values, as onnxruntime's kernels do. A node with a ``seed`` gives the same
stream for every load of the model; without one the generator is seeded from the operating
system. The values are not onnxruntime's (another generator), their distributions are the
same. Constant folding never evaluates these ops (``passes/pipeline.NOT_FOLDED``), so a random
node without inputs still draws at every run. Drawing is NumPy's (noted in the node's plan):
a generator's state update is sequential, not a tensor-algebra statement.

>>> import tensoralg.onnx.ops.kernels as k
>>> node = k.NodeContext("r", "RandomUniform", (), ("y",), 22, k.KernelSet("llvm"))
>>> sample = random_uniform(node, shape=[2, 3], seed=1.0)
>>> sample.shape, sample.dtype, bool(((0 <= sample) & (sample < 1)).all())
((2, 3), dtype('float32'), True)
"""
from __future__ import annotations

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.constant import numpy_dtype
from tensoralg.onnx.ops.kernels import NodeContext
from tensoralg.onnx.ops.registry import op

RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                        "RandomUniformLike", "Bernoulli", "Multinomial"})


def generator(node: NodeContext, seed: float | None) -> np.random.Generator:
    """The node's generator, made on its first run (seeded by ``seed`` when given)."""
    key = f"{node.name}/random generator"
    found = node.kernels.layers.get(key)
    if found is None:
        found = np.random.default_rng(None if seed is None else int(seed))
        node.kernels.layers[key] = found
    return found


def _float_type(node: NodeContext, dtype: int) -> np.dtype:
    chosen = numpy_dtype(dtype)
    if chosen.kind != "f":
        raise ta.UnsupportedError(f"{node}: {node.op_type} draws floats; dtype {chosen} is not "
                                  f"one")
    return chosen


def _shape(node: NodeContext, shape: list[int]) -> tuple[int, ...]:
    if any(d < 0 for d in shape):
        raise ta.ShapeError(f"{node}: shape {list(shape)} has a negative dimension")
    return tuple(int(d) for d in shape)


def _normal(node: NodeContext, shape: tuple[int, ...], dtype: np.dtype, mean: float,
            scale: float, seed: float | None) -> np.ndarray:
    node.note(f"numpy normal draws (mean {mean}, scale {scale})")
    return generator(node, seed).normal(mean, scale, shape).astype(dtype)


def _uniform(node: NodeContext, shape: tuple[int, ...], dtype: np.dtype, low: float,
             high: float, seed: float | None) -> np.ndarray:
    if not low <= high:
        raise ta.ShapeError(f"{node}: low {low} must not exceed high {high}")
    node.note(f"numpy uniform draws in [{low}, {high})")
    values = generator(node, seed).uniform(low, high, shape).astype(dtype)
    # rounding to float32 may reach ``high``, which the interval excludes
    return np.where(values >= high, np.nextafter(dtype.type(high), dtype.type(low)), values) \
        if values.size and low < high else values


@op("RandomNormal", since=1)
def random_normal(node: NodeContext, *, shape: list[int], dtype: int = 1, mean: float = 0.0,
                  scale: float = 1.0, seed: float | None = None) -> np.ndarray:
    """Normal draws of ``shape``."""
    return _normal(node, _shape(node, shape), _float_type(node, dtype), mean, scale, seed)


@op("RandomUniform", since=1)
def random_uniform(node: NodeContext, *, shape: list[int], dtype: int = 1, low: float = 0.0,
                   high: float = 1.0, seed: float | None = None) -> np.ndarray:
    """Uniform draws in ``[low, high)`` of ``shape``."""
    return _uniform(node, _shape(node, shape), _float_type(node, dtype), low, high, seed)


def _like_type(node: NodeContext, x: np.ndarray, dtype: int | None) -> np.dtype:
    if dtype is not None:
        return _float_type(node, dtype)
    if x.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: the input is {x.dtype}, so dtype must name the "
                                  f"float type to draw")
    return x.dtype


@op("RandomNormalLike", since=1)
def random_normal_like(node: NodeContext, x: np.ndarray, *, dtype: int | None = None,
                       mean: float = 0.0, scale: float = 1.0, seed: float | None = None
                       ) -> np.ndarray:
    """Normal draws of ``x``'s shape (``torch.randn_like``: a VAE's reparameterisation)."""
    return _normal(node, x.shape, _like_type(node, x, dtype), mean, scale, seed)


@op("RandomUniformLike", since=1)
def random_uniform_like(node: NodeContext, x: np.ndarray, *, dtype: int | None = None,
                        low: float = 0.0, high: float = 1.0, seed: float | None = None
                        ) -> np.ndarray:
    """Uniform draws of ``x``'s shape."""
    return _uniform(node, x.shape, _like_type(node, x, dtype), low, high, seed)


@op("Bernoulli", since=15)
def bernoulli(node: NodeContext, p: np.ndarray, *, dtype: int | None = None,
              seed: float | None = None) -> np.ndarray:
    """1 with probability ``p`` (each element its own), else 0, in ``dtype`` (``p``'s type
    when absent)."""
    if p.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: probabilities must be floats, got {p.dtype}")
    if p.size and not ((p >= 0) & (p <= 1)).all():
        raise ta.ShapeError(f"{node}: probabilities must lie in [0, 1]")
    node.note("numpy Bernoulli draws")
    out_type = p.dtype if dtype is None else numpy_dtype(dtype)
    return (generator(node, seed).random(p.shape) < p).astype(out_type)


@op("Multinomial", since=7)
def multinomial(node: NodeContext, logits: np.ndarray, *, dtype: int = 6, sample_size: int = 1,
                seed: float | None = None) -> np.ndarray:
    """``sample_size`` class indices per row of ``logits`` ``[batch, classes]`` (unnormalised
    log-probabilities), drawn with replacement."""
    out_type = numpy_dtype(dtype)
    if out_type not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise ta.UnsupportedError(f"{node}: dtype must be int32 or int64, got {out_type}")
    if logits.ndim != 2 or logits.shape[1] < 1 or logits.dtype.kind != "f":
        raise ta.ShapeError(f"{node}: logits must be float [batch, classes >= 1], got "
                            f"{logits.dtype} {logits.shape}")
    if sample_size < 0:
        raise ta.ShapeError(f"{node}: sample_size {sample_size} must not be negative")
    node.note(f"numpy categorical draws ({sample_size} per row)")
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    cumulative = np.cumsum(np.exp(shifted), axis=1)
    draws = generator(node, seed).random((logits.shape[0], sample_size)) * cumulative[:, -1:]
    picks = np.stack([np.searchsorted(row, d, side="right")
                      for row, d in zip(cumulative, draws)]) if logits.shape[0] else \
        np.zeros((0, sample_size), np.int64)
    return np.minimum(picks, logits.shape[1] - 1).astype(out_type)
