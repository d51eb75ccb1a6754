"""Attention (opset 23, 24's ``nonpad_kv_seqlen``, 25's sliding windows), the op PyTorch's
dynamo exporter writes for ``scaled_dot_product_attention`` from opset 23 on, and
RotaryEmbedding (opset 23).

As onnx's reference computes it: 3-D inputs are split into heads; ``Q`` and ``K`` are each
multiplied by ``sqrt(scale)`` (``scale`` defaults to ``1 / sqrt(head size)``); a past key and
value are prepended to ``K`` and ``V`` (and returned as the present ones); grouped-query
heads repeat ``K`` and ``V``; the bias is the mask (bool: 0 where true, -inf where false;
float: added; padded with -inf to the key length), the causal frontier (aligned bottom-right
with a past), the sliding window and the per-batch key lengths; scores are softcapped
(``c tanh(s / c)``) when asked; a row every key of which is masked gives 0. The two products
take MatMul's route (a generated kernel, or BLAS where it pays); the bias, the softmax and
the softcap are statements, the masks' bias NumPy (it depends on the shapes only, and the
mask's values).
"""
from __future__ import annotations

import math

import numpy as np

import tensoralg as ta
from tensoralg.onnx.ops.constant import numpy_dtype
from tensoralg.onnx.ops.kernels import NodeContext, compute_dtype, elementwise, literal
from tensoralg.onnx.ops.matmul import matmul
from tensoralg.onnx.ops.reduce import reduce_extreme
from tensoralg.onnx.ops.registry import op


def _heads(node: NodeContext, x: np.ndarray, heads: int | None, name: str) -> np.ndarray:
    """A 3-D (batch, sequence, hidden) input as (batch, heads, sequence, head size)."""
    if x.ndim == 4:
        return x
    if x.ndim != 3 or not heads or x.shape[2] % heads:
        raise ta.ShapeError(f"{node}: {name} {x.shape} must be 4-D, or 3-D with a hidden size "
                            f"that q_num_heads/kv_num_heads ({heads}) divides")
    batch, length, hidden = x.shape
    return x.reshape(batch, length, heads, hidden // heads).transpose(0, 2, 1, 3)


def allowed_keys(q_length: int, kv_length: int, offset: np.ndarray | int, left: int, right: int,
             causal: bool) -> np.ndarray | None:
    """Where a query may attend a key (query ``i`` sits at ``offset + i``): causal keys up to
    it, the window ``[p - left, p + right]``; None when nothing restricts. Shape (q, kv), or
    (batch, 1, q, kv) for per-batch offsets."""
    if not causal and left < 0 and right < 0:
        return None
    per_batch = np.ndim(offset) > 0
    shift = np.reshape(offset, (-1, 1, 1)) if per_batch else int(offset)
    diff = (np.arange(q_length)[:, None] + shift) - np.arange(kv_length)[None, :]
    allowed = np.ones(diff.shape, bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed[:, None] if per_batch else allowed


def _bias(node: NodeContext, mask: np.ndarray | None, q_length: int, kv_length: int,
          batch: int, offset: np.ndarray | int, causal: bool, left: int, right: int,
          lengths: np.ndarray | None, dtype: np.dtype) -> np.ndarray | None:
    """The additive bias of the scores (0 or -inf, plus a float mask), broadcastable to
    (batch, heads, q, kv); None when there is none."""
    bias = None
    if mask is not None:
        pad = kv_length - mask.shape[-1]
        if pad < 0:
            raise ta.ShapeError(f"{node}: attn_mask {mask.shape} is longer than the "
                                f"{kv_length} keys")
        if mask.dtype == np.bool_:
            bias = np.where(mask, dtype.type(0), dtype.type(-np.inf))
        else:
            bias = mask.astype(dtype)
        if pad:
            bias = np.pad(bias, [(0, 0)] * (bias.ndim - 1) + [(0, pad)],
                          constant_values=-np.inf)
    allowed = allowed_keys(q_length, kv_length, offset, left, right, causal)
    if allowed is not None:
        limits = np.where(allowed, dtype.type(0), dtype.type(-np.inf))
        bias = limits if bias is None else bias + limits
    if lengths is not None:
        lengths = np.asarray(lengths).reshape(-1)
        if lengths.shape != (batch,):
            raise ta.ShapeError(f"{node}: nonpad_kv_seqlen has {lengths.size} values for a "
                                f"batch of {batch}")
        kept = np.arange(kv_length)[None, :] < lengths[:, None]
        padding = np.where(kept, dtype.type(0), dtype.type(-np.inf)).reshape(batch, 1, 1, -1)
        bias = padding if bias is None else bias + padding
    return bias


def masked_softmax(node: NodeContext, scores: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Softmax over the last axis where a row of -inf gives 0 (not NaN): its maximum is
    taken as 0, its sum of exponentials is then 0 and is divided as 1."""
    rows = scores.reshape(-1, scores.shape[-1])
    maxima = reduce_extreme(node, rows, [1], 0, "max")
    lowest = literal(float(np.finfo(dtype).min))
    safe = f"where(gt(M(i), {lowest}), M(i), 0)"
    sums = node.run(f"Y(i) = sum(j, exp(X(i,j) - {safe}))", dtype, X=rows, M=maxima)
    result = node.run(f"Y(i,j) = exp(X(i,j) - {safe}) / where(eq(S(i), 0), 1, S(i))", dtype,
                      X=rows, M=maxima, S=sums)
    return result.reshape(scores.shape)


@op("Attention", since=23)
def attention(node: NodeContext, q: np.ndarray, k: np.ndarray, v: np.ndarray,
              attn_mask: np.ndarray | None = None, past_key: np.ndarray | None = None,
              past_value: np.ndarray | None = None,
              nonpad_kv_seqlen: np.ndarray | None = None, *, is_causal: int = 0,
              kv_num_heads: int | None = None, q_num_heads: int | None = None,
              qk_matmul_output_mode: int = 0, scale: float | None = None,
              softcap: float = 0.0, softmax_precision: int | None = None,
              left_window_size: int = -1, right_window_size: int = -1
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``softmax((Q K^T) * scale + bias) V`` with heads, a cache and masks (module docstring);
    outputs Y, the present key and value, and the scores ``qk_matmul_output_mode`` picks."""
    if not (q.ndim == k.ndim == v.ndim) or q.ndim not in (3, 4):
        raise ta.ShapeError(f"{node}: Q {q.shape}, K {k.shape} and V {v.shape} must all be 3-D "
                            f"or all 4-D")
    if q.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: Attention takes float tensors, not {q.dtype}")
    if (past_key is None) != (past_value is None) or \
            (nonpad_kv_seqlen is not None and past_key is not None):
        raise ta.ShapeError(f"{node}: past_key and past_value come together, and not with "
                            f"nonpad_kv_seqlen")
    if qk_matmul_output_mode not in (0, 1, 2, 3):
        raise ta.UnsupportedError(f"{node}: qk_matmul_output_mode {qk_matmul_output_mode} is "
                                  f"not one of 0-3")
    three_d = q.ndim == 3
    q4 = _heads(node, q, q_num_heads, "Q")
    k4, v4 = _heads(node, k, kv_num_heads, "K"), _heads(node, v, kv_num_heads, "V")
    if past_key is not None:
        k4 = np.concatenate([past_key, k4], axis=2)
        v4 = np.concatenate([past_value, v4], axis=2)
    present_key, present_value = k4, v4
    batch, heads, q_length, head_size = q4.shape
    kv_heads, kv_length = k4.shape[1], k4.shape[2]
    if k4.shape[0] != batch or v4.shape[:3] != k4.shape[:3] or k4.shape[3] != head_size or \
            heads % kv_heads:
        raise ta.ShapeError(f"{node}: Q {q4.shape}, K {k4.shape} and V {v4.shape} (as heads) "
                            f"do not agree")
    if heads != kv_heads:        # grouped-query attention: each key head serves several
        k4 = np.repeat(k4, heads // kv_heads, axis=1)
        v4 = np.repeat(v4, heads // kv_heads, axis=1)
    dtype = compute_dtype(q.dtype, needs_float=True)
    root = q.dtype.type(math.sqrt(1 / math.sqrt(head_size) if scale is None else scale))
    scaled_q = elementwise(node, f"{{0}} * {literal(float(root))}", q4, dtype=dtype)
    scaled_k = elementwise(node, f"{{0}} * {literal(float(root))}",
                           np.ascontiguousarray(k4.transpose(0, 1, 3, 2)), dtype=dtype)
    scores = matmul(node, scaled_q, scaled_k)
    if softcap and softcap > 0:
        cap = literal(float(softcap))
        scores = elementwise(node, f"{cap} * tanh({{0}} / {cap})", scores, dtype=dtype)
    # where the first query sits among the keys: after a past, or at the end of each batch
    # entry's keys (a static cache's lengths)
    offset = past_key.shape[2] if past_key is not None else (
        np.asarray(nonpad_kv_seqlen).reshape(-1) - q_length if nonpad_kv_seqlen is not None
        else 0)
    bias = _bias(node, attn_mask, q_length, kv_length, batch, offset, bool(is_causal),
                 left_window_size, right_window_size, nonpad_kv_seqlen, np.dtype(dtype))
    biased = scores if bias is None else elementwise(node, "{0} + {1}", scores, bias,
                                                     dtype=dtype)
    softmax_type = numpy_dtype(softmax_precision) if softmax_precision else dtype
    weights = masked_softmax(node, np.ascontiguousarray(biased, dtype=softmax_type),
                             compute_dtype(softmax_type))
    weights = weights.astype(q.dtype, copy=False)
    y = matmul(node, weights, np.ascontiguousarray(v4))
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, q_length, -1)
    chosen = {0: scores, 1: scores, 2: biased, 3: weights}[qk_matmul_output_mode]
    return (np.ascontiguousarray(y).astype(q.dtype, copy=False), present_key, present_value,
            np.asarray(chosen).astype(q.dtype, copy=False))


@op("RotaryEmbedding", since=23)
def rotary_embedding(node: NodeContext, x: np.ndarray, cos_cache: np.ndarray,
                     sin_cache: np.ndarray, position_ids: np.ndarray | None = None, *,
                     interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0
                     ) -> np.ndarray:
    """Rotary position embedding: the first ``rotary_embedding_dim`` values of each head
    (all of them by default) taken as pairs (halves, or neighbours when ``interleaved``) and
    rotated by their position's angle, ``(c x1 - s x2, s x1 + c x2)``, as two statements;
    ``x`` is (batch, heads, sequence, head size), or 3-D with ``num_heads``."""
    if x.ndim == 4:
        rows = x.transpose(0, 2, 1, 3)            # (batch, sequence, heads, head size)
    elif x.ndim == 3 and num_heads and x.shape[2] % num_heads == 0:
        rows = x.reshape(x.shape[0], x.shape[1], num_heads, -1)
    else:
        raise ta.ShapeError(f"{node}: input {x.shape} must be 4-D, or 3-D with num_heads "
                            f"dividing its hidden size")
    if x.dtype.kind != "f":
        raise ta.UnsupportedError(f"{node}: RotaryEmbedding takes float tensors, not {x.dtype}")
    batch, length, heads, size = rows.shape
    rotated = rotary_embedding_dim or size
    half = rotated // 2
    if rotated % 2 or rotated > size:
        raise ta.ShapeError(f"{node}: rotary_embedding_dim {rotated} must be even and at most "
                            f"the head size {size}")
    if position_ids is not None:
        ids = np.asarray(position_ids)
        if ids.size and (ids.min() < 0 or ids.max() >= cos_cache.shape[0]):
            raise ta.ShapeError(f"{node}: position_ids outside [0, {cos_cache.shape[0]})")
        cos_cache, sin_cache = cos_cache[ids], sin_cache[ids]
        node.note("numpy gather of the caches' rows by position id")
    if cos_cache.shape[-1] != half or sin_cache.shape != cos_cache.shape:
        raise ta.ShapeError(f"{node}: cos_cache {cos_cache.shape} and sin_cache "
                            f"{sin_cache.shape} must end in rotary_embedding_dim / 2 = {half}")
    try:
        cos = np.broadcast_to(cos_cache, (batch, length, half))
        sin = np.broadcast_to(sin_cache, (batch, length, half))
    except ValueError:
        raise ta.ShapeError(f"{node}: the caches {cos_cache.shape} do not cover batch "
                            f"{batch} and sequence {length}") from None
    part = rows[..., :rotated]
    first, second = (part[..., 0::2], part[..., 1::2]) if interleaved else \
        (part[..., :half], part[..., half:])
    dtype = compute_dtype(x.dtype, needs_float=True)
    operands = {"C": np.ascontiguousarray(cos), "S": np.ascontiguousarray(sin),
                "A": np.ascontiguousarray(first), "B": np.ascontiguousarray(second)}
    real = node.run("Y(b,s,h,k) = C(b,s,k) * A(b,s,h,k) - S(b,s,k) * B(b,s,h,k)", dtype,
                    **operands).reshape(first.shape)
    imag = node.run("Y(b,s,h,k) = S(b,s,k) * A(b,s,h,k) + C(b,s,k) * B(b,s,h,k)", dtype,
                    **operands).reshape(first.shape)
    out = rows.astype(dtype, copy=True)
    if interleaved:
        out[..., 0:rotated:2], out[..., 1:rotated:2] = real, imag
    else:
        out[..., :half], out[..., half:rotated] = real, imag
    result = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
    return np.ascontiguousarray(result).astype(x.dtype, copy=False)
