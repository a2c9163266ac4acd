"""The model-forward kernels on the CPU: paged KV-cache attention of one packed batch (the float32
kernel behind ``fd_mtp.model.attention.PagedAttentionCPU``) and a whole dense decoder layer (the
native forward, ``fd_mtp.model.native``)."""

from __future__ import annotations

from ._composite import require_tensor
from ._loader import define_ops, invoke

# paged_attention is declared and documented in fd_mtp/schema/attention.py.
__all__ = ["decoder_layer", *define_ops(globals(), "attention")]


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
    """One dense ERNIE-4.5 decoder layer of a packed batch, on the CPU, in one call.

    With the residual carried beside the hidden state (FastDeploy's layer structure)::

        res = hidden + residual;  x = rms_norm(res) * input_norm_weight
        q, k, v = x @ q_weight, x @ k_weight, x @ v_weight      # then RoPE on q and k
        attn = paged_attention(q, k, v, key_cache, value_cache, ...)   # writes the caches
        res = attn @ o_weight + res;  x = rms_norm(res) * post_norm_weight
        out = (silu(x @ gate_weight) * (x @ up_weight)) @ down_weight

    ``rms_norm(r) = r / sqrt(mean(r ** 2) + eps)``; RoPE is interleaved: the pair
    ``(a, b) = (x[2i], x[2i+1])`` of every head becomes ``(a cos - b sin, b cos + a sin)`` with
    ``cos = rope_cos[t, i]``, ``sin = rope_sin[t, i]``. The attention is
    :func:`paged_attention`'s (same cache layout, metadata and checks). Each matrix-product element
    is one fused multiply-add chain in input order, so the result is the same on every x86-64
    CPU; it differs from Paddle's matmul (another summation order) by float32 rounding.

    Args:
        hidden: ``[T, H]`` float32, read: the layer's input.
        residual: ``[T, H]`` float32, read: the residual stream (zeros for the first layer:
            ``hidden + 0 = hidden``).
        input_norm_weight, post_norm_weight: ``[H]`` float32, read.
        q_weight: ``[H, Hq * D]``; k_weight, v_weight: ``[H, Hkv * D]``; o_weight:
            ``[Hq * D, H]``; gate_weight, up_weight: ``[H, I]``; down_weight: ``[I, H]``;
            float32, read (Paddle's Linear layout, ``[in, out]``; no bias). Hkv divides Hq.
        key_cache, value_cache: ``[num_blocks, Hkv, block_size, D]`` float32, **written** (the
            slot of every token).
        block_tables, cu_seqlens_q, batch_id_per_token, seq_lens_decoder: int32, read: as in
            :func:`paged_attention`.
        rope_cos, rope_sin: ``[T, D / 2]`` float32, read
            (:func:`fd_mtp.model.attention.rope_tables` of the tokens' positions).
        eps (float): the RMSNorms' epsilon (>= 0).
        scale (float, keyword): attention score scale; default ``1 / sqrt(D)``.
        num_threads (int, keyword): threads to split the matrix products and the attention over
            (a process-wide pool per count, kept between calls); default 1. The result does not
            depend on it.

    Returns:
        ``(out, residual_out)``, both ``[T, H]`` float32: the MLP's output and the residual
        stream after the attention block; the layer's output is their sum (the next layer's
        ``hidden`` and ``residual``).

    Not a FastDeploy op; CPU and float32 only. Bad metadata raises ValueError naming the argument
    before anything is written (as :func:`paged_attention`).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> t, h, d = 1, 8, 4
        >>> z = lambda *s: paddle.zeros(list(s))
        >>> i32 = lambda x: paddle.to_tensor(x, dtype="int32")
        >>> kc, vc = z(1, 1, 2, d), z(1, 1, 2, d)
        >>> out, res = ops.decoder_layer(
        ...     paddle.ones([t, h]), z(t, h), paddle.ones([h]), z(h, 2 * d), z(h, d), z(h, d),
        ...     z(2 * d, h), paddle.ones([h]), z(h, 16), z(h, 16), z(16, h), kc, vc,
        ...     i32([[0]]), i32([0, 1]), i32([0]), i32([0]), paddle.ones([t, d // 2]),
        ...     z(t, d // 2), 1e-6)
        >>> out.tolist(), res.tolist()
        ([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    """
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        require_tensor("decoder_layer", name, cache)  # before any attribute is read
        if not cache.is_contiguous():
            raise ValueError(f"decoder_layer: {name} must be contiguous (it is written in place)")
    if scale is None:
        scale = 1.0 / int(key_cache.shape[-1]) ** 0.5
    if num_threads is None:
        num_threads = 1
    out = invoke("decoder_layer", locals())
    return out[0], out[1]
