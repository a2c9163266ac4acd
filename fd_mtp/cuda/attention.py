"""fd_mtp.cuda version of ``fd_mtp.ops.paged_attention`` (the float32 paged KV-cache attention of
fd_mtp.model) on CuPy arrays. Checks, Params fill and status messages come from the op's schema
(fd_mtp/schema/attention.py); `_apply` mirrors the hand-written part of
custom_ops/paddle/paged_attention.cc. Errors follow fd_mtp.cuda's error mode (no sync by default;
docs/gpu_errors.md)."""

from __future__ import annotations

from ._common import _cupy, _fail, _ptr, _stream, check_pending, error_mode, load, prepare

__all__ = ["paged_attention"]


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
    """fd_mtp.ops.paged_attention on CuPy arrays: writes every token's k/v rows into
    ``key_cache`` / ``value_cache`` and returns the ``[T, Hq * D]`` float32 attention output (a
    new CuPy array). ``scale`` defaults to ``1 / sqrt(D)``."""
    if scale is None:
        scale = 1.0 / int(q.shape[-1]) ** 0.5
    values = dict(
        q=q,
        k=k,
        v=v,
        key_cache=key_cache,
        value_cache=value_cache,
        block_tables=block_tables,
        cu_seqlens_q=cu_seqlens_q,
        batch_id_per_token=batch_id_per_token,
        seq_lens_decoder=seq_lens_decoder,
        scale=scale,
    )
    op, values, dims, p = prepare("paged_attention", values)
    name = op.name
    tokens, hq, hkv, dim = dims["T"], dims["Hq"], dims["Hkv"], dims["D"]
    if hq % hkv != 0:
        _fail(
            name,
            "k",
            f"must be [{tokens}, Hkv, {dim}] with Hkv dividing {hq}, got shape {list(k.shape)}",
        )
    if dims["Hv"] != hkv:
        _fail(name, "v", f"must have k's shape {list(k.shape)}, got {list(v.shape)}")
    if dims["Hc"] != hkv:
        _fail(
            name,
            "key_cache",
            f"must be [num_blocks, {hkv}, block_size, {dim}], got shape {list(key_cache.shape)}",
        )
    if cu_seqlens_q.ndim != 1 or cu_seqlens_q.shape[0] < 1:
        _fail(name, "cu_seqlens_q", f"must have shape [bsz + 1], got {list(cu_seqlens_q.shape)}")
    bsz = cu_seqlens_q.shape[0] - 1
    if block_tables.shape[0] < bsz:
        _fail(
            name,
            "block_tables",
            f"has {block_tables.shape[0]} rows but the batch has {bsz} requests",
        )
    s = seq_lens_decoder.shape
    if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)) or s[0] < bsz:
        _fail(
            name,
            "seq_lens_decoder",
            f"must have shape [>={bsz}] or [>={bsz}, 1] (bsz is "
            f"taken from cu_seqlens_q), got {list(s)}",
        )
    if batch_id_per_token.size < tokens:
        _fail(
            name,
            "batch_id_per_token",
            f"has {batch_id_per_token.size} entries but q has {tokens} tokens",
        )
    cp = _cupy()
    out = cp.empty((tokens, hq * dim), dtype=cp.float32)
    p.bsz = bsz
    p.out = _ptr(out)
    stream = _stream()
    load().paged_attention(p, 0, stream)  # the stream's status record: no sync
    if error_mode() == "checked":
        check_pending(stream)
    return out
