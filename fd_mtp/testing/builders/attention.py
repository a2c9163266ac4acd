"""paged_attention: a packed batch over a paged KV cache (tests/ops/test_paged_attention.py and
tests/gpu/test_gpu_attention.py)."""

from __future__ import annotations

import numpy as np


def paged_attention_batch(
    rng,
    lens,
    dec,
    *,
    hq=4,
    hkv=2,
    dim=24,
    block_size=8,
    spare_blocks=3,
    spare_columns=0,
    extra_rows=0,
):
    """paged_attention's arguments by name: request b has ``lens[b]`` new tokens after ``dec[b]``
    cached ones. Random float32 q [T, hq, dim], k / v [T, hkv, dim] and caches
    [num_blocks, hkv, block_size, dim] (old rows random too); every request's blocks are
    distinct and shuffled (non-contiguous), ``spare_blocks`` more than needed. block_tables
    [B + extra_rows, widest need + spare_columns] int32, -1 padded (rows past B unused)."""
    lens, dec = np.asarray(lens), np.asarray(dec)
    bsz = len(lens)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    tokens = int(cu[-1])
    need = [int(n) for n in -(-(dec + lens) // block_size)]
    width = max([n + spare_columns for n in need] + [1])
    num_blocks = sum(need) + spare_blocks
    perm = rng.permutation(num_blocks).astype(np.int32)
    tables = np.full((bsz + extra_rows, width), -1, np.int32)
    at = 0
    for b, n in enumerate(need):
        tables[b, :n] = perm[at : at + n]
        at += n
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return dict(
        q=f(tokens, hq, dim),
        k=f(tokens, hkv, dim),
        v=f(tokens, hkv, dim),
        key_cache=f(num_blocks, hkv, block_size, dim),
        value_cache=f(num_blocks, hkv, block_size, dim),
        block_tables=tables,
        cu_seqlens_q=cu,
        batch_id_per_token=np.repeat(np.arange(bsz, dtype=np.int32), lens),
        seq_lens_decoder=dec.astype(np.int32),
    )
