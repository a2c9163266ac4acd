"""Packing ops (spec §5.1-§5.4): one target step's layout. Prefill chunks share the chunked-prefill
token budget, decodes verify K + 1 tokens, stopped slots have none."""

from __future__ import annotations

import numpy as np

from ... import reference as ref
from ._common import (
    PREFILL_TOKEN_BUDGET,
    Case,
    H,
    K,
    L,
    _hidden_rows,
    _roles,
    _seed,
    _tokens,
    positional,
)


def packing_arrays(rng, this_time, enc, dec, width, k):
    """The packing ops' arrays of one step around a layout (random batches of tests/ops and
    tests/gpu): random input_ids [n, width] and draft_tokens [n, k + 1] int64 (n = len(enc):
    rows past the batch are noise) with the given seq_lens_this_time / encoder / decoder."""
    n = len(enc)
    return dict(
        input_ids=rng.integers(0, 100_000, (n, width)).astype(np.int64),
        draft_tokens=rng.integers(0, 100_000, (n, k + 1)).astype(np.int64),
        seq_lens_this_time=this_time,
        seq_lens_encoder=enc,
        seq_lens_decoder=dec,
    )


def packing_state(batch, seed=7):
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    n_pf = int(np.sum(roles == "prefill"))
    chunk = min(512, max(8, PREFILL_TOKEN_BUDGET // max(n_pf, 1)))
    this_time = np.zeros((batch, 1), np.int32)
    enc = np.zeros((batch, 1), np.int32)
    dec = np.zeros((batch, 1), np.int32)
    for b, role in enumerate(roles):
        if role == "prefill":
            c = int(rng.integers(max(1, chunk // 2), chunk + 1))
            this_time[b] = enc[b] = c
            dec[b] = int(rng.integers(0, 4)) * chunk
        elif role != "stopped":  # decode / resync: verify the last token and K drafts
            this_time[b] = K + 1
            dec[b] = int(rng.integers(64, L - 4 * (K + 1)))
    return dict(
        input_ids=_tokens(rng, batch, L),
        draft_tokens=_tokens(rng, batch, K + 1),
        seq_lens_this_time=this_time,
        seq_lens_encoder=enc,
        seq_lens_decoder=dec,
    )


#: pre_process's outputs, in order
PRE_PROCESS_OUTPUTS = (
    "ids_remove_padding",
    "batch_id_per_token",
    "cu_seqlens_q",
    "cu_seqlens_k",
    "output_cum_offsets",
    "output_padding_offset",
)


def pre_process_args(state, speculative=True) -> list:
    """pre_process's positional arguments for a step state (a dict of input_ids, draft_tokens,
    seq_lens_this_time / _encoder / _decoder, as `packing_state` returns):
    ``[input_ids, seq_lens_this_time, speculative]``, then draft_tokens, seq_lens_encoder and
    seq_lens_decoder when ``speculative``."""
    args = [state["input_ids"], state["seq_lens_this_time"], speculative]
    if speculative:
        args += [state["draft_tokens"], state["seq_lens_encoder"], state["seq_lens_decoder"]]
    return args


def reference_layout(state) -> tuple:
    """fd_mtp.reference.pre_process of a step state, speculative: its six outputs
    (`PRE_PROCESS_OUTPUTS`)."""
    return ref.pre_process(*pre_process_args(state))


def _packing_config(s):
    t = int(s["seq_lens_this_time"].sum())
    return f"K={K};L={L};T={t};mix=dec/pf/stop"


def build_padding_offset(batch):
    s = packing_state(batch)
    q = s["seq_lens_this_time"]
    cum = np.cumsum(L - q.astype(np.int64)).astype(np.int32)
    names = positional("speculate_get_padding_offset")
    args = [
        s["input_ids"],
        s["draft_tokens"],
        cum,
        np.array(int(q.sum()), np.int64),
        q,
        s["seq_lens_encoder"],
    ]
    return Case(args, names, [], _packing_config(s), returns=True)


def build_seq_lens_output(batch):
    s = packing_state(batch)
    names = ["seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"]
    return Case([s[n] for n in names], names, [], _packing_config(s), returns=True)


def build_output_padding_offset(batch):
    s = packing_state(batch)
    o = ref.speculate_get_seq_lens_output(
        s["seq_lens_this_time"], s["seq_lens_encoder"], s["seq_lens_decoder"]
    )
    tmp = np.cumsum(L - o.astype(np.int64)).astype(np.int32)
    names = ["output_cum_offsets_tmp", "out_token_num", "seq_lens_output", "max_seq_len"]
    return Case(
        [tmp, np.array(int(o.sum()), np.int64), o, L],
        names,
        [],
        f"L={L};To={int(o.sum())}",
        returns=True,
    )


def build_pre_process(batch, variant=0):
    s = packing_state(batch, _seed(7, variant))
    names = [
        "input_ids",
        "seq_lens_this_time",
        "speculative_decoding",
        "draft_tokens",
        "seq_lens_encoder",
        "seq_lens_decoder",
    ]
    return Case(pre_process_args(s), names, [], _packing_config(s) + ";speculative=1", returns=True)


def build_rebuild_padding(batch, hidden=H, dtype="bfloat16", variant=0):
    s = packing_state(batch, _seed(7, variant))
    pre = reference_layout(s)
    cu_q, opo = pre[2], pre[5]
    tmp_out = _hidden_rows(np.random.default_rng(_seed(8, variant)), int(cu_q[-1]), hidden, dtype)
    names = positional("rebuild_padding")
    args = [
        tmp_out,
        cu_q,
        s["seq_lens_this_time"],
        s["seq_lens_decoder"],
        s["seq_lens_encoder"],
        opo,
        None,
        L,
        False,
    ]
    return Case(
        args,
        names,
        [],
        f"H={hidden};dtype={dtype};T={tmp_out.shape[0]};R={opo.size};speculative=1",
        returns=True,
    )
