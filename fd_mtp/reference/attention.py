"""Numpy references of ``fd_mtp.ops.paged_attention`` (a plain loop) and
``fd_mtp.ops.decoder_layer`` (numpy only)."""

import numpy as np

__all__ = [
    "decoder_layer",
    "paged_attention",
]


def paged_attention(
    q,
    k,
    v,
    key_cache,
    value_cache,
    block_tables,
    cu_seqlens_q,
    batch_id_per_token,
    seq_lens_decoder,
    *,
    scale=None,
):
    """Same contract as :func:`fd_mtp.ops.paged_attention`: writes ``key_cache`` / ``value_cache``
    in place, returns ``[T, Hq * D]`` float32. Bad metadata -> ValueError naming the argument,
    raised before anything is written."""
    t_count, hq, d = q.shape
    hkv = k.shape[1]
    num_blocks, _, bs, _ = key_cache.shape
    cu = np.asarray(cu_seqlens_q).reshape(-1).astype(np.int64)
    bsz = cu.shape[0] - 1
    bid = np.asarray(batch_id_per_token).reshape(-1).astype(np.int64)
    dec = np.asarray(seq_lens_decoder).reshape(-1).astype(np.int64)
    bt = np.asarray(block_tables)
    nb = bt.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    tokens = []
    for t in range(t_count):
        b = int(bid[t])
        if not 0 <= b < bsz:
            raise ValueError(
                f"paged_attention: batch_id_per_token names request {b} but the batch has {bsz}"
            )
        if not cu[b] <= t < cu[b + 1]:
            raise ValueError(
                f"paged_attention: batch_id_per_token does not match cu_seqlens_q at token {t}"
            )
        if dec[b] < 0:
            raise ValueError(f"paged_attention: seq_lens_decoder is {dec[b]} for request {b}")
        pos = int(dec[b] + t - cu[b])
        if pos // bs >= nb:
            raise ValueError(
                f"paged_attention: block_tables is too narrow for position {pos} of request {b}"
            )
        for c in range(pos // bs + 1):
            if not 0 <= bt[b, c] < num_blocks:
                raise ValueError(
                    f"paged_attention: block_tables[{b}, {c}] = {bt[b, c]} is not a block id "
                    f"in [0, {num_blocks})"
                )
        tokens.append((b, pos))
    for t, (b, pos) in enumerate(tokens):
        key_cache[bt[b, pos // bs], :, pos % bs, :] = k[t]
        value_cache[bt[b, pos // bs], :, pos % bs, :] = v[t]
    out = np.zeros((t_count, hq * d), np.result_type(np.asarray(q).dtype, np.float32))
    g = hq // hkv
    for t, (b, pos) in enumerate(tokens):
        p = np.arange(pos + 1)
        blocks = bt[b, p // bs]
        for h in range(hq):
            kc = key_cache[blocks, h // g, p % bs, :].astype(np.float64)  # [pos + 1, D]
            vc = value_cache[blocks, h // g, p % bs, :].astype(np.float64)
            s = kc @ q[t, h].astype(np.float64) * scale
            w = np.exp(s - s.max())
            out[t, h * d : (h + 1) * d] = (w / w.sum()) @ vc
    return out


def _rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope64(a, cos, sin):
    """Interleaved RoPE of ``a [T, heads, D]`` with ``cos`` / ``sin`` ``[T, 1, D / 2]``."""
    out = np.empty_like(a)
    even, odd = a[..., 0::2], a[..., 1::2]
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = odd * cos + even * sin
    return out


def decoder_layer(
    hidden,
    residual,
    input_norm_weight,
    q_weight,
    k_weight,
    v_weight,
    o_weight,
    post_norm_weight,
    gate_weight,
    up_weight,
    down_weight,
    key_cache,
    value_cache,
    block_tables,
    cu_seqlens_q,
    batch_id_per_token,
    seq_lens_decoder,
    rope_cos,
    rope_sin,
    eps,
    *,
    scale=None,
    num_threads=None,
):
    """Same contract as :func:`fd_mtp.ops.decoder_layer` (``num_threads`` changes nothing),
    computed in float64 from the float32 inputs (the caches receive k / v rounded to float32, as
    the op writes them); returns
    ``(out, residual_out)`` in float64. Bad metadata -> ValueError (via :func:`paged_attention`),
    raised before anything is written."""
    stages = decoder_layer_stages(locals())  # num_threads: the op's result does not depend on it
    return stages["out"], stages["residual_out"]


def decoder_layer_stages(a: dict):
    """:func:`decoder_layer` with every intermediate, from its arguments by name (``a``; float64
    results): ``res`` (hidden + residual), ``x`` (its norm), ``q`` / ``k`` (after RoPE) / ``v``
    ``[T, heads, D]``, ``attn``, ``residual_out``, ``x2``, ``gate``, ``up``, ``act``, ``out``
    (what error bounds are computed from). Writes the caches as :func:`decoder_layer` does."""

    def f64(name):
        return np.asarray(a[name], dtype=np.float64)

    t_count = np.asarray(a["hidden"]).shape[0]
    d = np.asarray(a["key_cache"]).shape[-1]
    hkv = np.asarray(a["key_cache"]).shape[1]
    hq = np.asarray(a["q_weight"]).shape[1] // d
    eps = a["eps"]
    st = {"res": f64("hidden") + f64("residual")}
    st["x"] = _rms_norm(st["res"], f64("input_norm_weight"), eps)
    cos = f64("rope_cos")[:, None, :]
    sin = f64("rope_sin")[:, None, :]
    st["q"] = _rope64((st["x"] @ f64("q_weight")).reshape(t_count, hq, d), cos, sin)
    st["k"] = _rope64((st["x"] @ f64("k_weight")).reshape(t_count, hkv, d), cos, sin)
    st["v"] = (st["x"] @ f64("v_weight")).reshape(t_count, hkv, d)
    meta = [
        a[n] for n in ("block_tables", "cu_seqlens_q", "batch_id_per_token", "seq_lens_decoder")
    ]
    caches = (a["key_cache"], a["value_cache"])
    st["attn"] = _paged_attention64(st["q"], st["k"], st["v"], *caches, *meta, a.get("scale"))
    st["residual_out"] = st["attn"] @ f64("o_weight") + st["res"]
    st["x2"] = _rms_norm(st["residual_out"], f64("post_norm_weight"), eps)
    st["gate"] = st["x2"] @ f64("gate_weight")
    st["up"] = st["x2"] @ f64("up_weight")
    st["act"] = st["gate"] / (1.0 + np.exp(-st["gate"])) * st["up"]
    st["out"] = st["act"] @ f64("down_weight")
    return st


def _paged_attention64(q, k, v, key_cache, value_cache, *meta_and_scale):
    """`paged_attention` on float64 q / k / v: the caches receive k / v rounded to float32 (what
    the op stores), the attention reads them back in float64."""
    *meta, scale = meta_and_scale
    kc64 = np.asarray(key_cache).astype(np.float64)
    vc64 = np.asarray(value_cache).astype(np.float64)
    rounded = (x.astype(np.float32).astype(np.float64) for x in (k, v))
    out = paged_attention(q, *rounded, kc64, vc64, *meta, scale=scale)
    key_cache[...] = kc64.astype(key_cache.dtype)
    value_cache[...] = vc64.astype(value_cache.dtype)
    return out
