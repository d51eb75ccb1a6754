"""The ONNX Attention op (opset 23+: ``onnx/ops/attention.py``) and its rewrite into products
(``onnx/passes/attention.py``) against onnx's reference implementation (the spec; the ONNX
node tests hold its other cases) and onnxruntime, at every opt level: the rewrite must fire on
the form PyTorch exports and give the op function's results, the other forms must keep the
node, and a row whose every key is masked must give 0 both ways."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from conftest import check_every_level, onnx_model  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tensoralg as ta  # noqa: E402
import tensoralg.onnx as tonnx  # noqa: E402

F32, BOOL = TensorProto.FLOAT, TensorProto.BOOL


def _attention(feeds, inputs, out_shape, outputs=("y",), opset=23, **attributes):
    node = helper.make_node("Attention", inputs, list(outputs), **attributes)
    extra = [(name, F32, ["a", "b", "c", "d"]) for name in outputs[1:] if name]
    return onnx_model([node], feeds, [("y", F32, out_shape)] + extra, opset=opset)


def _reference(model, feeds):
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds)))


def _rewritten(model, feeds) -> bool:
    compiled = tonnx.load(model, opt_level=3)
    for _ in range(3):
        compiled.run(feeds)
    return "1 Attention node(s) rewritten" in compiled.stage_text("plan")


def _qkv(rng, batch=2, heads=3, q_length=5, kv_length=7, size=8):
    return (rng.standard_normal((batch, heads, q_length, size)).astype(np.float32),
            rng.standard_normal((batch, heads, kv_length, size)).astype(np.float32),
            rng.standard_normal((batch, heads, kv_length, size)).astype(np.float32))


@pytest.mark.parametrize("mask", [None, "bool", "float"])
@pytest.mark.parametrize("causal", [0, 1])
def test_exported_form_is_rewritten_and_matches(mask, causal):
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng)
    feeds = {"q": q, "k": k, "v": v}
    inputs = ["q", "k", "v"]
    if mask == "bool":
        feeds["m"] = rng.random((2, 1, 5, 7)) > 0.3
        inputs.append("m")
    elif mask == "float":
        feeds["m"] = rng.standard_normal((5, 7)).astype(np.float32)
        inputs.append("m")
    model = _attention(feeds, inputs, [2, 3, 5, 8], is_causal=causal, scale=0.3)
    check_every_level(model, feeds, _reference(model, feeds), rtol=1e-5, atol=1e-5)
    check_every_level(model, feeds, rtol=1e-5, atol=1e-5)      # onnxruntime's
    assert _rewritten(model, feeds)


def test_a_row_with_every_key_masked_gives_zero():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, batch=1, heads=2, q_length=3, kv_length=4)
    mask = np.ones((1, 1, 3, 4), bool)
    mask[0, 0, 1, :] = False
    feeds = {"q": q, "k": k, "v": v, "m": mask}
    model = _attention(feeds, ["q", "k", "v", "m"], [1, 2, 3, 8])
    expected = _reference(model, feeds)
    assert not expected["y"][0, :, 1].any()
    check_every_level(model, feeds, expected, rtol=1e-5, atol=1e-5)
    assert _rewritten(model, feeds)


def test_other_forms_keep_the_node():
    """3-D inputs with grouped-query heads, a past key and value (and the present ones read),
    and a softcap run the op function, at every level."""
    rng = np.random.default_rng(3)
    q3 = rng.standard_normal((2, 5, 4 * 6)).astype(np.float32)
    k3 = rng.standard_normal((2, 7, 2 * 6)).astype(np.float32)
    v3 = rng.standard_normal((2, 7, 2 * 6)).astype(np.float32)
    feeds = {"q": q3, "k": k3, "v": v3}
    grouped = _attention(feeds, ["q", "k", "v"], [2, 5, 24], q_num_heads=4, kv_num_heads=2,
                         is_causal=1)
    check_every_level(grouped, feeds, _reference(grouped, feeds), rtol=1e-5, atol=1e-5)
    assert not _rewritten(grouped, feeds)

    q, k, v = _qkv(rng, q_length=2, kv_length=3)
    past_k = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    past_v = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    feeds = {"q": q, "k": k, "v": v, "pk": past_k, "pv": past_v}
    cached = _attention(feeds, ["q", "k", "v", "", "pk", "pv"], [2, 3, 2, 8],
                        outputs=("y", "present_k", "present_v"), is_causal=1)
    check_every_level(cached, feeds, _reference(cached, feeds), rtol=1e-5, atol=1e-5)

    q, k, v = _qkv(rng)
    feeds = {"q": q, "k": k, "v": v}
    capped = _attention(feeds, ["q", "k", "v"], [2, 3, 5, 8], softcap=2.0)
    check_every_level(capped, feeds, _reference(capped, feeds), rtol=1e-5, atol=1e-5)
    assert not _rewritten(capped, feeds)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_the_scores_output(mode):
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, batch=1, heads=2)
    mask = rng.standard_normal((5, 7)).astype(np.float32)
    feeds = {"q": q, "k": k, "v": v, "m": mask}
    model = _attention(feeds, ["q", "k", "v", "m"], [1, 2, 5, 8],
                       outputs=("y", "", "", "qk"), qk_matmul_output_mode=mode)
    check_every_level(model, feeds, _reference(model, feeds), rtol=1e-5, atol=1e-5)


def test_bad_attention_inputs_are_refused():
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng)
    from tensoralg.onnx.ops.attention import attention
    from tensoralg.onnx.ops.kernels import KernelSet, NodeContext

    node = NodeContext("n", "Attention", ("q", "k", "v"), ("y",), 23, KernelSet("llvm"))
    with pytest.raises(ta.ShapeError, match="all be 3-D or all 4-D"):
        attention(node, q, k[0], v)
    with pytest.raises(ta.ShapeError, match="do not agree"):
        attention(node, q, k[:, :, :, :4], v)
    with pytest.raises(ta.ShapeError, match="q_num_heads"):
        attention(node, q[:, 0], k[:, 0], v[:, 0])
    with pytest.raises(ta.ShapeError, match="longer than"):
        attention(node, q, k, v, np.ones((5, 9), bool))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rank", [3, 4])
def test_rotary_embedding(interleaved, rank):
    """Partial rotation (6 of 8 values a head), position ids gathering the caches, both
    layouts, against the reference; ids outside the caches are refused."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 4, 5, 8) if rank == 4 else (2, 5, 4 * 8)).astype(np.float32)
    angles = rng.random((10, 3)).astype(np.float32) * 3
    ids = rng.integers(0, 10, (2, 5)).astype(np.int64)
    constants = {"c": np.cos(angles), "s": np.sin(angles)}
    attributes = {"interleaved": interleaved, "rotary_embedding_dim": 6}
    if rank == 3:
        attributes["num_heads"] = 4
    node = helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"], **attributes)
    model = onnx_model([node], {"x": x, "p": ids}, [("y", F32, list(x.shape))], constants,
                       opset=23)
    feeds = {"x": x, "p": ids}
    check_every_level(model, feeds, _reference(model, feeds), rtol=1e-6, atol=1e-6)
    with pytest.raises(ta.ShapeError, match="position_ids"):
        tonnx.load(model, opt_level=0).run({"x": x, "p": ids + 10})
