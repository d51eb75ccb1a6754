"""Random ops (ops/sampling.py): shapes and dtypes, distributions (moments and frequencies on
large draws, loose enough never to fail by chance: each bound is many standard errors wide),
seeds reproducible across loads, new draws per run (never folded at load), a VAE's
reparameterisation at every level; then bad input."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from conftest import onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

N = 200_000


def _run(node, feeds=None, outputs=(("y", TensorProto.FLOAT, None),), level=3, runs=3):
    feeds = feeds or {}
    outs = [(name, kind, shape if shape is not None else ["d0", "d1"])
            for name, kind, shape in outputs]
    model = onnx_model([node], feeds, outs, opset=17)
    compiled = tonnx.load(model, opt_level=level)
    return [compiled.run(feeds) for _ in range(runs)]


@pytest.mark.parametrize("level", [0, 3])
def test_normal_moments_and_new_draws_per_run(level):
    node = helper.make_node("RandomNormal", [], ["y"], shape=[2, N // 2], mean=3.0, scale=0.5)
    results = _run(node, outputs=[("y", TensorProto.FLOAT, [2, N // 2])], level=level)
    y = results[0]["y"]
    assert y.shape == (2, N // 2) and y.dtype == np.float32
    assert abs(y.mean() - 3.0) < 0.01 and abs(y.std() - 0.5) < 0.01
    assert not np.array_equal(results[0]["y"], results[1]["y"])      # drawn again, not folded


def test_uniform_bounds_dtype_and_seed():
    node = helper.make_node("RandomUniform", [], ["y"], shape=[N], low=-2.0, high=6.0,
                            dtype=TensorProto.DOUBLE, seed=7.0)
    first = _run(node, outputs=[("y", TensorProto.DOUBLE, [N])])
    again = _run(node, outputs=[("y", TensorProto.DOUBLE, [N])])
    y = first[0]["y"]
    assert y.dtype == np.float64 and y.min() >= -2.0 and y.max() < 6.0
    assert abs(y.mean() - 2.0) < 0.05
    for a, b in zip(first, again):          # the same seed: the same stream on a new load
        np.testing.assert_array_equal(a["y"], b["y"])


def test_like_forms_take_the_input_shape_and_type():
    x = np.zeros((3, 4), np.float64)
    normal = _run(helper.make_node("RandomNormalLike", ["x"], ["y"]), {"x": x},
                  [("y", TensorProto.DOUBLE, [3, 4])], runs=1)[0]["y"]
    uniform = _run(helper.make_node("RandomUniformLike", ["x"], ["y"], dtype=TensorProto.FLOAT),
                   {"x": x}, [("y", TensorProto.FLOAT, [3, 4])], runs=1)[0]["y"]
    assert normal.shape == (3, 4) and normal.dtype == np.float64
    assert uniform.dtype == np.float32 and ((uniform >= 0) & (uniform < 1)).all()


def test_bernoulli_frequencies():
    p = np.tile(np.array([0.0, 0.25, 1.0], np.float32), (N // 3, 1))
    y = _run(helper.make_node("Bernoulli", ["p"], ["y"]), {"p": p},
             [("y", TensorProto.FLOAT, list(p.shape))], runs=1)[0]["y"]
    assert y.dtype == np.float32 and set(np.unique(y)) <= {0.0, 1.0}
    assert (y[:, 0] == 0).all() and (y[:, 2] == 1).all()
    assert abs(y[:, 1].mean() - 0.25) < 0.01


def test_multinomial_frequencies():
    probabilities = np.array([[0.1, 0.6, 0.3], [1.0, 0.0, 0.0]])
    logits = np.log(np.where(probabilities > 0, probabilities, 1e-300)).astype(np.float32)
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=N // 4,
                            dtype=TensorProto.INT64, seed=3.0)
    y = _run(node, {"x": logits}, [("y", TensorProto.INT64, [2, N // 4])], runs=1)[0]["y"]
    assert y.dtype == np.int64 and y.min() >= 0 and y.max() <= 2
    counts = np.bincount(y[0], minlength=3) / y.shape[1]
    np.testing.assert_allclose(counts, probabilities[0], atol=0.01)
    assert (y[1] == 0).all()


def test_vae_reparameterisation_at_every_level():
    """``z = mu + exp(logvar / 2) * randn_like(mu)`` with a zero log-variance scale: the noise
    is multiplied by zero, so every level gives ``mu`` exactly, while the draw still runs."""
    mu = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    nodes = [helper.make_node("RandomNormalLike", ["mu"], ["eps"]),
             helper.make_node("Mul", ["eps", "zero"], ["noise"]),
             helper.make_node("Add", ["mu", "noise"], ["z"])]
    model = onnx_model(nodes, {"mu": mu}, [("z", TensorProto.FLOAT, [4, 8])],
                       {"zero": np.zeros((), np.float32)})
    for level in range(4):
        compiled = tonnx.load(model, opt_level=level)
        for _ in range(3):
            np.testing.assert_array_equal(compiled.run({"mu": mu})["z"], mu)


@pytest.mark.parametrize("node, feeds, error, message", [
    (helper.make_node("RandomNormal", [], ["y"], shape=[2, -1]), {}, ta.ShapeError,
     "negative dimension"),
    (helper.make_node("RandomUniform", [], ["y"], shape=[2], low=1.0, high=0.0), {},
     ta.ShapeError, "must not exceed high"),
    (helper.make_node("RandomNormal", [], ["y"], shape=[2], dtype=TensorProto.INT32), {},
     ta.UnsupportedError, "draws floats"),
    (helper.make_node("Bernoulli", ["p"], ["y"]), {"p": np.array([0.5, 1.5], np.float32)},
     ta.ShapeError, r"lie in \[0, 1\]"),
    (helper.make_node("Multinomial", ["p"], ["y"]), {"p": np.ones(3, np.float32)},
     ta.ShapeError, "logits must be float"),
])
def test_bad_input(node, feeds, error, message):
    with pytest.raises(error, match=message):
        _run(node, feeds, [("y", TensorProto.FLOAT, ["d0"] * (2 if "Multi" in node.op_type
                                                               else 1))], level=0, runs=1)
