"""Draft-side (MTP proposer) ops: draft_model_preprocess, the eagle hidden-state gathers,
draft_model_update, draft_model_set_value_by_flags, draft_model_postprocess, mtp_step_paddle."""

from __future__ import annotations

import numpy as np

from ... import reference as ref
from ._common import (
    BLOCK_SIZE,
    EOS_IDS,
    NUM_MODEL_STEP,
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


def preprocess_state(batch, seed=0):
    """Draft + target state right after a target verify step (input of draft_model_preprocess)."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    n_pf = int(np.sum(roles == "prefill"))
    chunk = min(128, max(8, PREFILL_TOKEN_BUDGET // max(n_pf, 1)))

    s = dict(
        draft_tokens=np.full((batch, K + 1), -1, np.int64),
        input_ids=_tokens(rng, batch, L),
        stop_flags=np.zeros((batch, 1), bool),
        seq_lens_this_time=np.zeros((batch, 1), np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        step_idx=np.zeros((batch, 1), np.int64),
        not_need_stop=np.zeros(1, bool),
        is_block_step=np.zeros((batch, 1), bool),
        batch_drop=np.zeros((batch, 1), bool),
        pre_ids=np.full((batch, L), -1, np.int64),
        mask_rollback=np.zeros((batch, 1), np.int32),
        recompute_token_num=np.full((batch, 1), NUM_MODEL_STEP - 1, np.int32),
        accept_tokens=_tokens(rng, batch, K + 1),
        accept_num=np.zeros(batch, np.int32),
        base_model_seq_lens_this_time=np.zeros((batch, 1), np.int32),
        base_model_seq_lens_encoder=np.zeros((batch, 1), np.int32),
        base_model_seq_lens_decoder=np.zeros((batch, 1), np.int32),
        base_model_step_idx=np.zeros((batch, 1), np.int64),
        base_model_stop_flags=np.zeros((batch, 1), bool),
        base_model_is_block_step=np.zeros(batch, bool),
        base_model_draft_tokens=_tokens(rng, batch, K + 1),
    )
    for b, role in enumerate(roles):
        prompt = int(rng.integers(64, 512))
        gen = int(rng.integers(K + 2, L - prompt - 4 * (K + 1) - 8))  # tokens generated so far
        if role == "prefill":
            enc = int(rng.integers(max(1, chunk // 2), chunk + 1))
            s["seq_lens_encoder"][b] = enc
            s["seq_lens_this_time"][b] = enc
            s["base_model_seq_lens_this_time"][b] = enc
            s["base_model_seq_lens_decoder"][b] = enc
            s["base_model_step_idx"][b] = 1
            s["accept_num"][b] = 1
        elif role == "stopped":
            s["stop_flags"][b] = True
            s["base_model_stop_flags"][b] = True
        else:  # decode / resync: the target verified K + 1 tokens and accepted a of them
            a = int(rng.integers(1, K + 2))
            s["accept_num"][b] = a
            s["base_model_seq_lens_this_time"][b] = K + 1
            s["base_model_seq_lens_decoder"][b] = prompt + gen + a
            s["base_model_step_idx"][b] = gen + a
            s["seq_lens_decoder"][b] = prompt + gen - 1
            s["step_idx"][b] = gen - 1
            s["seq_lens_this_time"][b] = 1
            s["pre_ids"][b, :gen] = _tokens(rng, gen)
            if role == "resync":
                s["stop_flags"][b] = True
                s["seq_lens_this_time"][b] = 0
    return s, roles


def build_preprocess(batch, variant=0):
    s, _ = preprocess_state(batch, _seed(0, variant))
    names = list(s) + [
        "num_model_step",
        "truncate_first_token",
        "splitwise_prefill",
        "kvcache_scheduler_v1",
    ]
    args = list(s.values()) + [NUM_MODEL_STEP, True, False, True]
    written = [
        "draft_tokens",
        "input_ids",
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_idx",
        "not_need_stop",
        "is_block_step",
        "batch_drop",
        "pre_ids",
        "mask_rollback",
        "recompute_token_num",
        "base_model_draft_tokens",
    ]
    return Case(
        args,
        names,
        written,
        f"K={K};L={L};num_model_step={NUM_MODEL_STEP};v1=1;mix=dec/pf/stop/resync",
    )


def _after_preprocess(batch, variant=0):
    s, roles = preprocess_state(batch, _seed(0, variant))
    c = {k: v.copy() for k, v in s.items()}
    ref.draft_model_preprocess(*c.values(), NUM_MODEL_STEP, True, False, True)
    return c, roles


def build_eagle_hidden(batch, hidden=H, dtype="bfloat16", variant=0):
    c, _ = _after_preprocess(batch, variant)
    enc = c["seq_lens_encoder"].ravel()
    base_this_time = c["base_model_seq_lens_this_time"].ravel()
    t_in = int(sum(int(enc[b]) if enc[b] > 0 else int(base_this_time[b]) for b in range(batch)))
    x = _hidden_rows(np.random.default_rng(_seed(1, variant)), t_in, hidden, dtype)
    names = positional("eagle_get_hidden_states")
    args = [
        x,
        c["seq_lens_this_time"],
        c["seq_lens_encoder"],
        c["seq_lens_decoder"],
        c["stop_flags"],
        c["accept_num"],
        c["base_model_seq_lens_this_time"],
        c["base_model_seq_lens_encoder"],
        1,
    ]
    return Case(args, names, [], f"K={K};H={hidden};dtype={dtype};Tin={t_in}", returns=True)


def _update_args(batch, variant=0):
    """draft_model_update's args for substep 0 after preprocess (numpy), and the names."""
    c, roles = _after_preprocess(batch, variant)
    rng = np.random.default_rng(_seed(2, variant))
    this_time, enc = c["seq_lens_this_time"].ravel(), c["seq_lens_encoder"].ravel()
    stop = c["stop_flags"].ravel()
    # Output rows per request after rebuild_padding: 1 per prefill, q per decode, 0 when stopped.
    out_lens = [0 if stop[b] else (1 if enc[b] > 0 else int(this_time[b])) for b in range(batch)]
    offsets = np.concatenate([[0], np.cumsum([L - o for o in out_lens])[:-1]]).astype(np.int32)
    next_tokens = _tokens(rng, sum(out_lens))
    max_dec_len = np.full((batch, 1), L - 2 * (K + 1), np.int64)
    if batch > 1:  # a few requests propose EOS, a few reach max_dec_len this substep
        # (max_dec_len only on decodes: a prefill chunk would write end_ids[0] at column q - 1.)
        first_row = np.concatenate([[0], np.cumsum(out_lens)[:-1]])
        running = np.flatnonzero(~stop)
        decoding = np.flatnonzero(~stop & (enc == 0))
        for b in running[: max(1, len(running) // 50)]:
            next_tokens[first_row[b] + out_lens[b] - 1] = EOS_IDS[1]
        for b in decoding[-max(1, len(decoding) // 50) :]:
            max_dec_len[b] = int(c["step_idx"][b, 0]) + 1
    names = positional("draft_model_update")
    args = [
        next_tokens,
        c["draft_tokens"],
        c["pre_ids"],
        c["seq_lens_this_time"],
        c["seq_lens_encoder"],
        c["seq_lens_decoder"],
        c["step_idx"],
        offsets.reshape(-1, 1),
        c["stop_flags"],
        c["not_need_stop"],
        max_dec_len,
        np.array(EOS_IDS, np.int64).reshape(-1, 1),
        c["base_model_draft_tokens"],
        L,
        0,
    ]
    return args, names


def build_update(batch, variant=0):
    args, names = _update_args(batch, variant)
    written = [
        "draft_tokens",
        "pre_ids",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_idx",
        "stop_flags",
        "not_need_stop",
        "base_model_draft_tokens",
    ]
    return Case(
        args, names, written, f"K={K};L={L};substep=0", kwargs={"prefill_one_step_stop": False}
    )


def build_self_hidden(batch, hidden=H, dtype="bfloat16", variant=0):
    args, names = _update_args(batch, variant)
    a = {n: (v.copy() if isinstance(v, np.ndarray) else v) for n, v in zip(names, args)}
    last = a["seq_lens_this_time"].copy()
    ref.draft_model_update(*a.values(), prefill_one_step_stop=False)
    this_time, step = a["seq_lens_this_time"].ravel(), a["step_idx"].ravel()
    q_last = last.ravel()
    t_in = 0  # rows of the substep's output consumed by the walk of spec §6.4
    for b in range(batch):
        if step[b] == 1:
            t_in += 1 if (this_time[b] > 0 or q_last[b] > 0) else 0
        else:
            t_in += int(q_last[b])
    x = _hidden_rows(np.random.default_rng(_seed(3, variant)), t_in, hidden, dtype)
    return Case(
        [x, last, a["seq_lens_this_time"], a["step_idx"]],
        ["input", "last_seq_lens_this_time", "seq_lens_this_time", "step_idx"],
        [],
        f"K={K};H={hidden};dtype={dtype};Tin={t_in}",
        returns=True,
    )


def build_draft_set_value(batch):
    """draft_model_set_value_by_flags: decodes carry 1..K+1 tokens at step_idx in [K+1, L-1);
    ~1/16 are on their first step (step_idx 1), ~1/10 stopped, ~1/20 idle."""
    rng = np.random.default_rng(69)
    this_time = rng.integers(1, K + 2, batch).astype(np.int32)
    step = rng.integers(K + 1, L - 1, batch).astype(np.int64)
    step[rng.random(batch) < 1 / 16] = 1
    this_time[rng.random(batch) < 1 / 20] = 0
    stop = rng.random(batch) < 0.1
    return Case(
        [
            _tokens(rng, batch, K + 1),
            np.full((batch, L), -1, np.int64),
            stop.reshape(-1, 1),
            this_time.reshape(-1, 1),
            np.zeros((batch, 1), np.int32),
            np.zeros((batch, 1), np.int32),
            step.reshape(-1, 1),
        ],
        positional("draft_model_set_value_by_flags"),
        ["pre_ids_all", "seq_lens_this_time"],
        f"K={K};L={L}",
    )


def build_postprocess(batch, variant=0):
    s, roles = preprocess_state(batch, _seed(0, variant))
    rng = np.random.default_rng(_seed(4, variant))
    drafts = _tokens(rng, batch, K + 1)
    # After K substeps: some rows stopped early (trailing -1), a few have an inner -1.
    for b in range(batch):
        cut = int(rng.integers(1, K + 2))
        drafts[b, cut:] = -1
    enc = (
        np.where(roles == "prefill", s["seq_lens_encoder"].ravel(), 0)
        .astype(np.int32)
        .reshape(-1, 1)
    )
    stop = (roles == "stopped").reshape(-1, 1)
    this_time = s["base_model_seq_lens_this_time"].copy()
    return Case(
        [drafts, this_time, enc, stop],
        [
            "base_model_draft_tokens",
            "base_model_seq_lens_this_time",
            "base_model_seq_lens_encoder",
            "base_model_stop_flags",
        ],
        ["base_model_seq_lens_this_time"],
        f"K={K}",
    )


def build_mtp_step(batch, variant=0):
    """v0 block manager: NB = L / BLOCK_SIZE slots per request; each request holds the blocks of
    its positions (encoder blocks, then decode blocks); ~1/16 cross a block boundary this step;
    ~5% were just stopped by the target and give their decode blocks back; the free list has
    room for every block and more free blocks than needed (no preemption)."""
    rng = np.random.default_rng(_seed(5, variant))
    nb = L // BLOCK_SIZE
    base_stop = np.zeros((batch, 1), bool)
    if batch > 1:
        base_stop[rng.permutation(batch)[: max(1, batch // 20)]] = True
    dec = np.zeros((batch, 1), np.int32)
    tables = np.full((batch, nb), -1, np.int32)
    enc_blocks = np.zeros(batch, np.int32)
    used = np.zeros(batch, np.int32)
    next_id = 0
    for b in range(batch):
        prompt = int(rng.integers(64, 512))
        d = int(rng.integers(prompt + 1, L - 2 * BLOCK_SIZE))
        dec[b] = d
        e = -(-prompt // BLOCK_SIZE)
        held = -(-d // BLOCK_SIZE)
        tables[b, :held] = np.arange(next_id, next_id + held)
        next_id += held
        enc_blocks[b] = e
        used[b] = held - e
    n_free = 2 * batch + 8
    free_list = np.zeros(next_id + n_free, np.int32)
    free_list[:n_free] = np.arange(next_id, next_id + n_free)
    names = positional("mtp_step_paddle")
    args = [
        base_stop,
        base_stop.copy(),
        np.zeros((batch, 1), bool),
        np.where(base_stop, 0, K + 1).astype(np.int32),
        np.zeros((batch, 1), np.int32),
        dec,
        tables,
        enc_blocks,
        used,
        free_list,
        np.array([n_free], np.int32),
        BLOCK_SIZE,
        K,
    ]
    written = [
        "stop_flags",
        "batch_drop",
        "seq_lens_this_time",
        "seq_lens_decoder",
        "block_tables",
        "encoder_block_lens",
        "used_list_len",
        "free_list",
        "free_list_len",
    ]
    return Case(args, names, written, f"K={K};block_size={BLOCK_SIZE};NB={nb};free={n_free}")
