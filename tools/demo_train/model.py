"""The demo training's model side (tools/train_demo_model.py): the config, the main model + MTP
block, the batched training forward over [B, S+3] windows (MTP steps 1 and 2), the losses and
the evaluation on held-out windows."""

from __future__ import annotations

import math


def make_config(args, tok):
    from fd_mtp.model.config import ErnieConfig

    return ErnieConfig(
        vocab_size=tok.vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        rms_norm_eps=1e-5,
        rope_theta=args.rope_theta,
        max_position_embeddings=args.max_position_embeddings,
        tie_word_embeddings=True,
        use_bias=False,
        num_nextn_predict_layers=1,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="float32",
    )


def build_models(cfg, seed: int, trainable: bool = True):
    """Main model + MTP (fd_mtp.model.ernie classes), initialised N(0, 0.02) (output projections
    scaled by 1/sqrt(2 * layers)), norms 1; trainable (undoes ``_freeze``) when asked."""
    import numpy as np
    import paddle

    from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP

    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model)
    rng = np.random.default_rng(seed)
    depth_scale = 1.0 / math.sqrt(2 * (cfg.num_hidden_layers + 1))
    for layer in (model, mtp):
        for name, prm in sorted(layer.named_parameters()):
            if len(prm.shape) == 1:
                val = np.ones(prm.shape, np.float32)
            else:
                std = 0.02 * (
                    depth_scale if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                )
                val = (std * rng.standard_normal(prm.shape)).astype(np.float32)
            prm.set_value(paddle.to_tensor(val))
            prm.stop_gradient = not trainable
        layer.train() if trainable else layer.eval()
    return model, mtp


def causal_mask(s: int):
    import paddle

    m = paddle.triu(paddle.full([s, s], float("-inf"), dtype="float32"), diagonal=1)
    return m.reshape([1, 1, s, s])


def _heads(x, n, d):
    b, s = x.shape[0], x.shape[1]
    return x.reshape([b, s, n, d])


def _expand_kv(k, g):
    import paddle

    return k if g == 1 else paddle.repeat_interleave(k, g, axis=2)


def layer_forward(layer, x, cos, sin, mask, return_kv: bool = False):
    """Batched pre-norm decoder layer over ``x [B, S, H]`` with causal attention, the same maths as
    the packed path: interleaved RoPE, GQA (query head j reads kv head j // group), 1/sqrt(D)."""
    import paddle
    import paddle.nn.functional as F

    from fd_mtp.model.attention import apply_rope_interleaved

    attn = layer.self_attn
    nh, nkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    h = layer.input_layernorm(x)
    q = apply_rope_interleaved(_heads(attn.q_proj(h), nh, d), cos, sin)  # [B, S, Hq, D]
    k = apply_rope_interleaved(_heads(attn.k_proj(h), nkv, d), cos, sin)  # [B, S, Hkv, D]
    v = _heads(attn.v_proj(h), nkv, d)
    g = nh // nkv
    qh = q.transpose([0, 2, 1, 3])
    kh = _expand_kv(k, g).transpose([0, 2, 1, 3])
    vh = _expand_kv(v, g).transpose([0, 2, 1, 3])
    scores = paddle.matmul(qh, kh, transpose_y=True) * (1.0 / math.sqrt(d)) + mask
    o = paddle.matmul(F.softmax(scores, axis=-1), vh)  # [B, Hq, S, D]
    o = o.transpose([0, 2, 1, 3]).reshape([x.shape[0], x.shape[1], nh * d])
    x = x + attn.o_proj(o)
    x = x + layer.mlp(layer.post_attention_layernorm(x))
    return (x, (kh, vh)) if return_kv else x


def mtp_step2_layer(layer, x, cos_next, sin_next, kv1, mask):
    """The MTP decoder layer for recursive step 2 as inference runs it: query i is MTP position i+1
    (RoPE ``cos_next``/``sin_next`` = angles of positions 1..S), attending to the step-1 keys /
    values of positions 0..i (``kv1``, causal ``mask``) and to its own key / value."""
    import paddle
    import paddle.nn.functional as F

    from fd_mtp.model.attention import apply_rope_interleaved

    attn = layer.self_attn
    nh, nkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    g = nh // nkv
    h = layer.input_layernorm(x)
    q = apply_rope_interleaved(_heads(attn.q_proj(h), nh, d), cos_next, sin_next).transpose(
        [0, 2, 1, 3]
    )
    k = _expand_kv(apply_rope_interleaved(_heads(attn.k_proj(h), nkv, d), cos_next, sin_next), g)
    v = _expand_kv(_heads(attn.v_proj(h), nkv, d), g)
    k, v = k.transpose([0, 2, 1, 3]), v.transpose([0, 2, 1, 3])  # [B, Hq, S, D]
    k1, v1 = kv1
    scale = 1.0 / math.sqrt(d)
    cross = paddle.matmul(q, k1, transpose_y=True) * scale + mask  # keys 0..i
    own = (q * k).sum(axis=-1, keepdim=True) * scale  # [B, Hq, S, 1]
    p = F.softmax(paddle.concat([cross, own], axis=-1), axis=-1)
    o = paddle.matmul(p[..., :-1], v1) + p[..., -1:] * v
    o = o.transpose([0, 2, 1, 3]).reshape([x.shape[0], x.shape[1], nh * d])
    x = x + attn.o_proj(o)
    return x + layer.mlp(layer.post_attention_layernorm(x))


def mtp_project(mtp, ids, prev_hidden):
    import paddle

    e = mtp.embed_tokens(ids)
    return mtp.eh_proj(paddle.concat([mtp.enorm(e), mtp.hnorm(prev_hidden)], axis=-1))


def batched_forward(model, mtp, window, *, steps: int = 2):
    """Training forward of ``window [B, S+1+steps]`` int64 tokens. Returns final-normed hidden
    states, each ``[B, S, H]``: ``main`` (position t, predicts x[t+1]), ``mtp1`` (MTP at position t
    on embed(x[t+1]) and main hidden t, predicts x[t+2]) and, when ``steps == 2``, ``mtp2`` (MTP
    position t+1 on embed(x[t+2]) and mtp1 hidden t, predicts x[t+3])."""
    import paddle

    from fd_mtp.model.attention import rope_cos_sin

    cfg = model.config
    s = window.shape[1] - 1 - steps
    pos = paddle.arange(0, s + 1, dtype="int64")
    cos_all, sin_all = rope_cos_sin(pos, cfg.head_dim, cfg.rope_theta)
    cos, sin = cos_all[:s], sin_all[:s]
    mask = causal_mask(s)
    x = model.embed_tokens(window[:, :s])
    for layer in model.layers:
        x = layer_forward(layer, x, cos, sin, mask)
    out = {"main": model.norm(x)}
    x = mtp_project(mtp, window[:, 1 : s + 1], out["main"])
    x, kv1 = layer_forward(mtp.mtp_block, x, cos, sin, mask, return_kv=True)
    out["mtp1"] = model.norm(x)
    if steps >= 2:
        x = mtp_project(mtp, window[:, 2 : s + 2], out["mtp1"])
        x = mtp_step2_layer(mtp.mtp_block, x, cos_all[1:], sin_all[1:], kv1, mask)
        out["mtp2"] = model.norm(x)
    return out


def unlikelihood(logits, window):
    """Token-level unlikelihood of the main head (Welleck et al. 2020): the mean over positions t
    of ``sum_{c in C_t} -log(1 - p(c))``, ``C_t`` the distinct tokens of ``window[:, :t+1]``
    other than the target ``window[:, t+1]``; ``logits [B, S, V]``."""
    import paddle
    import paddle.nn.functional as F

    b, s, v = logits.shape
    seen = F.one_hot(window[:, :s], v).cumsum(axis=1) > 0  # token in x[0..t]
    target = F.one_hot(window[:, 1 : s + 1], v) > 0
    cand = paddle.logical_and(seen, paddle.logical_not(target)).astype(logits.dtype)
    p = F.softmax(logits, axis=-1)
    return -(paddle.log(paddle.clip(1.0 - p, min=1e-5)) * cand).sum(axis=-1).mean()


def losses(model, mtp, window, steps: int, ul: bool = False):
    """``{"main", "mtp1"[, "mtp2"]}`` mean cross-entropies and top-1 correct counts, targets
    ``x[t+1]``, ``x[t+2]``, ``x[t+3]``; with ``ul`` also ``"ul"``, the main head's `unlikelihood`."""
    import paddle
    import paddle.nn.functional as F

    hidden = batched_forward(model, mtp, window, steps=steps)
    s = window.shape[1] - 1 - steps
    out = {}
    for k, (name, h) in enumerate(hidden.items()):
        logits = model.compute_logits(h)
        target = window[:, 1 + k : s + 1 + k]
        out[name] = F.cross_entropy(
            logits.reshape([-1, logits.shape[-1]]), target.reshape([-1, 1])
        ).mean()
        out[name + "_correct"] = (paddle.argmax(logits, axis=-1) == target).astype("float32").sum()
        if ul and name == "main":
            out["ul"] = unlikelihood(logits, window)
    return out


# --------------------------------------------------------------------------- evaluation
def validation_windows(val_tokens, n: int, length: int):
    """The first ``n`` non-overlapping windows of the validation stream (fixed set)."""
    import numpy as np

    n = min(n, len(val_tokens) // length)
    return np.stack([val_tokens[i * length : (i + 1) * length] for i in range(n)]).astype(np.int64)


def evaluate(model, mtp, windows, steps: int, batch: int) -> dict:
    import paddle

    model.eval()
    mtp.eval()
    tot: dict[str, float] = {}
    n_tok = 0
    with paddle.no_grad():
        for i in range(0, len(windows), batch):
            w = paddle.to_tensor(windows[i : i + batch])
            r = losses(model, mtp, w, steps)
            s = w.shape[1] - 1 - steps
            for k, v in r.items():
                tot[k] = tot.get(k, 0.0) + float(v) * (
                    w.shape[0] * s if not k.endswith("_correct") else 1
                )
            n_tok += w.shape[0] * s
    model.train()
    mtp.train()
    res = {}
    for k, v in tot.items():
        res[("val_" + k.replace("_correct", "_acc"))] = v / n_tok
    return res
