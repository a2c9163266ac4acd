# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""The model-forward kernels on the CPU: paged KV-cache attention of one packed batch (the float32"""

import paddle

__all__ = ["decoder_layer", "paged_attention"]

def decoder_layer(
    hidden: paddle.Tensor,
    residual: paddle.Tensor,
    input_norm_weight: paddle.Tensor,
    q_weight: paddle.Tensor,
    k_weight: paddle.Tensor,
    v_weight: paddle.Tensor,
    o_weight: paddle.Tensor,
    post_norm_weight: paddle.Tensor,
    gate_weight: paddle.Tensor,
    up_weight: paddle.Tensor,
    down_weight: paddle.Tensor,
    key_cache: paddle.Tensor,
    value_cache: paddle.Tensor,
    block_tables: paddle.Tensor,
    cu_seqlens_q: paddle.Tensor,
    batch_id_per_token: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    rope_cos: paddle.Tensor,
    rope_sin: paddle.Tensor,
    eps: float,
    *,
    scale: float | None = None,
    num_threads: int | None = None,
) -> list[paddle.Tensor]:
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
        ``[out, residual_out]``, both ``[T, H]`` float32: the MLP's output and the residual
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
    ...

def paged_attention(
    q: paddle.Tensor,
    k: paddle.Tensor,
    v: paddle.Tensor,
    key_cache: paddle.Tensor,
    value_cache: paddle.Tensor,
    block_tables: paddle.Tensor,
    cu_seqlens_q: paddle.Tensor,
    batch_id_per_token: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    *,
    scale: float | None = None,
) -> paddle.Tensor:
    """Append this step's k/v to the paged cache, then causal attention of every packed token.

    Token ``t`` belongs to request ``b = batch_id_per_token[t]``, is its local token
    ``i = t - cu_seqlens_q[b]`` and has position ``pos = seq_lens_decoder[b] + i``. Position ``p``
    of request b lives in block ``block_tables[b, p // block_size]`` at offset ``p % block_size``.
    First every token's k/v rows are written to its slot; then every (token, q head h) attends
    over positions ``0 .. pos`` of its request read from the cache (so a prefill chunk sees its
    own earlier tokens), kv head ``h // (Hq // Hkv)``, scores ``q . k * scale``, softmax in float32
    (online, numerically stable).

    Args:
        q: ``[T, Hq, D]`` float32, read.
        k, v: ``[T, Hkv, D]`` float32, read (RoPE already applied to q and k); Hkv divides Hq.
        key_cache, value_cache: ``[num_blocks, Hkv, block_size, D]`` float32, **written** (the
            slot of every token).
        block_tables: ``[>=bsz, NB]`` int32, read (-1 = no block; only the columns a token needs
            are read).
        cu_seqlens_q: ``[bsz + 1]`` int32, read; defines bsz.
        batch_id_per_token: ``[>=T]`` int32, read.
        seq_lens_decoder: ``[>=bsz]`` (or ``[bsz, 1]``) int32, read: tokens already cached.
        scale (float, keyword): score scale; default ``1 / sqrt(D)``.

    Returns:
        ``[T, Hq * D]`` float32: head h of token t in columns ``h*D .. h*D + D``.

    Not a FastDeploy op (upstream uses its append_attention CUDA kernels); float32 only. Bad
    metadata raises ValueError naming the argument before anything is written: a request id outside
    ``[0, bsz)`` or a token outside its request's ``cu_seqlens_q`` range (``batch_id_per_token``),
    a negative ``seq_lens_decoder``, a needed position beyond the table width or a needed block id
    outside ``[0, num_blocks)`` (``block_tables``). Two requests sharing a slot are not detected.

    NaN / inf in ``q``, ``k``, ``v`` or the caches are not inspected: they are scattered into the
    caches as they are and propagate through IEEE arithmetic (a NaN or inf key or value makes the
    output rows of every query that attends to it NaN or inf; queries that do not attend to it
    are unaffected), as in the numpy reference.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> q = paddle.ones([2, 1, 2]); k = paddle.ones([2, 1, 2])
        >>> v = paddle.to_tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
        >>> kc, vc = paddle.zeros([2, 1, 2, 2]), paddle.zeros([2, 1, 2, 2])
        >>> i32 = lambda x: paddle.to_tensor(x, dtype="int32")
        >>> out = ops.paged_attention(q, k, v, kc, vc, i32([[1, -1]]), i32([0, 2]), i32([0, 0]), i32([0]))
        >>> out.tolist(), vc[1, 0].tolist()
        ([[1.0, 2.0], [2.0, 3.0]], [[1.0, 2.0], [3.0, 4.0]])
    """
    ...
