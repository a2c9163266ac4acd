"""Numpy reference of ``fd_mtp.ops.paged_attention`` (a plain loop; numpy only)."""

import numpy as np

__all__ = [
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
    out = np.zeros((t_count, hq * d), np.float32)
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
