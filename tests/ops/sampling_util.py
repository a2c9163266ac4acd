"""Batch builders shared by the sampling-op tests (penalties, top-p candidates).

Float arrays are numpy float32 / float16, or uint16 holding bfloat16 bits (as fd_mtp.reference
takes them); `tensor` turns them into paddle CPU tensors of the matching dtype.
"""

from __future__ import annotations

import numpy as np
from util import skip_without_uint16, to_numpy

DTYPES = ("float32", "float16", "bfloat16")


def bf16_bits(values) -> np.ndarray:
    """float32 values -> bfloat16 bits (round to nearest even; finite values)."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def bf16_values(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def as_dtype(values, dtype: str) -> np.ndarray:
    """float32 values in `dtype`'s numpy form (bfloat16 -> uint16 bits)."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "bfloat16":
        return bf16_bits(values)
    with np.errstate(over="ignore"):  # float16: -1e10 -> -inf, as the op rounds it
        return values.astype(dtype)


def values_of(a) -> np.ndarray:
    """float32 values of a float32 / float16 / bfloat16-bits array."""
    a = np.asarray(a)
    return bf16_values(a) if a.dtype == np.uint16 else a.astype(np.float32)


def tensor(a):
    """numpy -> paddle CPU tensor; uint16 arrays become bfloat16 tensors (same bits)."""
    import paddle

    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == np.uint16:
        skip_without_uint16()
    t = paddle.to_tensor(a, place=paddle.CPUPlace())
    return t.view(paddle.bfloat16) if a.dtype == np.uint16 else t


#: paddle tensor -> numpy (bfloat16 -> uint16 bits); other values pass through
numpy_of = to_numpy


def offsets(out_rows, max_seq_len):
    """(output_padding_offset [T] int32, output_cum_offsets [n] int32, request of each row) for
    requests with out_rows[b] output rows each (spec §1.3)."""
    cum = np.concatenate([[0], np.cumsum([max_seq_len - o for o in out_rows])[:-1]]).astype(
        np.int32
    )
    pad = np.concatenate(
        [np.full(o, cum[b], np.int32) for b, o in enumerate(out_rows)] or [np.zeros(0, np.int32)]
    )
    owner = np.concatenate(
        [np.full(o, b, np.int64) for b, o in enumerate(out_rows)] or [np.zeros(0, np.int64)]
    )
    return pad.astype(np.int32), cum, owner


def random_out_rows(rng, n, k=3):
    """Output rows per request: decode (k + 1), prefill (1) or empty (0)."""
    role = rng.random(n)
    return [0 if x < 0.15 else (1 if x < 0.35 else int(rng.integers(1, k + 2))) for x in role]
