"""Test oracles for the ERNIE-4.5 model: a dense, no-cache forward written independently of the
packed paged path (tests, ``benchmarks/bench_model.py --refcheck``). Product code does not import
this module; ``Ernie4_5ForCausalLM.dense_forward`` / ``Ernie4_5MTP.dense_forward`` import it when a
caller asks for the oracle.

Independent code: pairwise RoPE (each pair's 2x2 rotation, angles from its own float64 frequency
list), GQA by repeating the kv heads, plain full causal softmax over the whole sequence, MoE by
per-expert dispatch (:meth:`Ernie4_5MoE.forward_per_expert`). Shared with the product: the
parameters and the projection / norm / MLP Layers.
"""

from __future__ import annotations

import math

import numpy as np
import paddle
import paddle.nn.functional as F

from .config import ErnieConfig


def rope_pairs(x, positions, theta: float):
    """Oracle RoPE: view ``x [S, H, D]`` as D/2 pairs ``(a, b)`` and rotate each by its angle
    ``pos * theta ** (-2i / D)`` (float64 angles, float32 rotation): ``(a c - b s, a s + b c)``."""
    s, hh, d = x.shape
    pos = positions.numpy() if isinstance(positions, paddle.Tensor) else np.asarray(positions)
    inv = np.array([float(theta) ** (-2.0 * i / d) for i in range(d // 2)], np.float64)
    ang = pos.astype(np.float64).reshape(s, 1, 1) * inv.reshape(1, 1, d // 2)
    c = paddle.to_tensor(np.cos(ang).astype(np.float32))
    sn = paddle.to_tensor(np.sin(ang).astype(np.float32))
    xp = x.astype("float32").reshape([s, hh, d // 2, 2])
    a, b = xp[..., 0], xp[..., 1]
    return (
        paddle.stack([a * c - b * sn, a * sn + b * c], axis=-1).reshape([s, hh, d]).astype(x.dtype)
    )


def dense_layer(layer, x, cfg: ErnieConfig, start_pos: int = 0):
    """Oracle decoder layer (an ``Ernie4_5DecoderLayer``) over one whole sequence ``x [S, H]``
    (positions ``start_pos ..``)."""
    s = x.shape[0]
    attn = layer.self_attn
    pos = np.arange(start_pos, start_pos + s, dtype=np.int64)
    q, k, v = attn.qkv(layer.input_layernorm(x))
    q = rope_pairs(q, pos, cfg.rope_theta)
    k = rope_pairs(k, pos, cfg.rope_theta)
    g = attn.num_heads // attn.num_kv_heads
    k = paddle.repeat_interleave(k, g, axis=1)  # [S, Hq, D]
    v = paddle.repeat_interleave(v, g, axis=1)
    qh = q.astype("float32").transpose([1, 0, 2])  # [Hq, S, D]
    kh = k.astype("float32").transpose([1, 0, 2])
    vh = v.astype("float32").transpose([1, 0, 2])
    scores = paddle.matmul(qh, kh, transpose_y=True) / math.sqrt(attn.head_dim)
    causal = paddle.tril(paddle.ones([s, s], dtype="bool"))
    scores = paddle.where(causal.unsqueeze(0), scores, paddle.full_like(scores, float("-inf")))
    o = (
        paddle.matmul(F.softmax(scores, axis=-1), vh)
        .transpose([1, 0, 2])
        .reshape([s, -1])
        .astype(x.dtype)
    )
    x = x + attn.o_proj(o)
    hn = layer.post_attention_layernorm(x)
    return x + (layer.mlp.forward_per_expert(hn) if layer.is_moe else layer.mlp(hn))


def dense_forward(model, input_ids):
    """Main model (``Ernie4_5ForCausalLM``) over one sequence ``input_ids [S]``, no cache ->
    ``[S, H]`` final-normed hidden states."""
    x = model.embed_tokens(input_ids.reshape([-1]))
    for layer in model.layers:
        x = dense_layer(layer, x, model.config, start_pos=0)
    return model.norm(x)


def mtp_dense_forward(mtp, input_ids, previous_hidden_states):
    """MTP block (``Ernie4_5MTP``) over one sequence: ``input_ids [S]``, ``previous_hidden_states
    [S, H]`` -> ``[S, H]`` normed by the main model's final norm."""
    e = mtp.embed_tokens(input_ids.reshape([-1]))
    x = paddle.concat([mtp.enorm(e), mtp.hnorm(previous_hidden_states.astype(e.dtype))], axis=-1)
    x = mtp.eh_proj(x)
    return mtp.norm(dense_layer(mtp.mtp_block, x, mtp.config, start_pos=0))
