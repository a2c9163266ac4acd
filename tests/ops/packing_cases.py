"""Batches for the packing-op tests (spec §1.3, §5.1-§5.4): a step's per-request state with a mix of
prefill chunks, speculative decodes and empty slots, as numpy arrays, plus paddle helpers."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from util import to_numpy, to_paddle

from fd_mtp import ops, reference
from fd_mtp.testing.builders.packing import packing_arrays

ROLES = ("prefill", "decode", "empty")


def mixed_batch(rng, bsz, *, width=64, k=3, extra_rows=0, roles=None):
    """A valid step: dict of input_ids [n, width], draft_tokens [n, k+1], seq_lens_this_time [bsz],
    seq_lens_encoder / seq_lens_decoder [n] (n = bsz + extra_rows; rows past bsz are noise), and
    the roles. prefill: this_time = enc = chunk in [1, width], dec = chunk start; decode: enc 0,
    dec > 0, this_time in [1, min(k+1, width)]; empty: this_time 0 (dec 0, or > 0 for a stopped request)."""
    n = bsz + extra_rows
    if roles is None:
        roles = rng.choice(ROLES, size=bsz, p=[0.25, 0.6, 0.15])
    this_time = np.zeros(bsz, np.int32)
    enc = rng.integers(0, 5, n).astype(np.int32)  # noise past bsz
    dec = rng.integers(0, 500, n).astype(np.int32)
    for b, role in enumerate(roles):
        if role == "prefill":
            c = int(rng.integers(1, width + 1))
            this_time[b] = enc[b] = c
            dec[b] = int(rng.integers(0, 3)) * 64
        elif role == "decode":
            this_time[b] = int(rng.integers(1, min(k + 1, width) + 1))
            enc[b] = 0
            dec[b] = int(rng.integers(1, 500))
        else:
            enc[b] = 0
            dec[b] = 0 if rng.random() < 0.5 else int(rng.integers(1, 500))
    return dict(packing_arrays(rng, this_time, enc, dec, width, k), roles=list(roles))


@st.composite
def batches(draw, max_bsz=40):
    """Hypothesis: (seed-built mixed batch, bsz). Sizes, widths and role mixes are drawn."""
    bsz = draw(st.integers(0, max_bsz))
    width = draw(st.integers(1, 24))
    k = draw(st.integers(0, 5))
    roles = draw(st.lists(st.sampled_from(ROLES), min_size=bsz, max_size=bsz))
    seed = draw(st.integers(0, 2**32 - 1))
    extra = draw(st.integers(0, 3))
    return mixed_batch(
        np.random.default_rng(seed), bsz, width=width, k=k, extra_rows=extra, roles=roles
    )


def cum_offsets(this_time, width):
    """Inclusive prefix sum of width - this_time (int32), as pre_process computes it."""
    return np.cumsum(width - np.asarray(this_time, np.int64).reshape(-1)).astype(np.int32)


def padding_offset_args(batch):
    """speculate_get_padding_offset's positional args (numpy) for a batch."""
    q = batch["seq_lens_this_time"]
    return [
        batch["input_ids"],
        batch["draft_tokens"],
        cum_offsets(q, batch["input_ids"].shape[1]),
        np.array(int(q.sum()), np.int64),
        q,
        batch["seq_lens_encoder"],
    ]


def run_op(op_name, args, *extra):
    """Run fd_mtp.ops.<op_name> on paddle copies of args; returns (outputs as numpy list, args after)."""
    tensors = [to_paddle(a) for a in args]
    out = getattr(ops, op_name)(*tensors, *extra)
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [None if o is None else to_numpy(o) for o in outs], [to_numpy(t) for t in tensors]


def run_ref(op_name, args, *extra):
    out = getattr(reference, op_name)(
        *[a.copy() if isinstance(a, np.ndarray) else a for a in args], *extra
    )
    return list(out) if isinstance(out, (list, tuple)) else [out]
