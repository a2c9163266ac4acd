"""Target-side update ops (spec §5.8, §5.10, §5.12, §5.16): the state right after speculate_verify."""

from __future__ import annotations

import numpy as np

from ._common import EOS_IDS, THINK_END_ID, Case, K, L, _roles, _seed, _tokens, positional

NUM_STOP_SEQS, STOP_SEQ_LEN = 5, 8


def target_state(batch, seed=6):
    """Target share_inputs after verify: decodes verified K + 1 tokens and accepted a of them,
    prefills got their first token, ~10% of the slots are stopped, ~3% block-stepped."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    s = dict(
        accept_tokens=_tokens(rng, batch, K + 1),
        accept_num=np.zeros(batch, np.int32),
        pre_ids=np.full((batch, L), -1, np.int64),
        step_idx=np.zeros((batch, 1), np.int64),
        stop_flags=np.zeros((batch, 1), bool),
        seq_lens_this_time=np.zeros((batch, 1), np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        draft_tokens=_tokens(rng, batch, K + 1),
        actual_draft_token_nums=np.full(batch, K, np.int32),
        is_block_step=np.zeros(batch, bool),
        mask_rollback=np.zeros((batch, 1), np.int32),
    )
    for b, role in enumerate(roles):
        prompt = int(rng.integers(64, 512))
        gen = int(rng.integers(K + 2, L - prompt - 4 * (K + 1) - 8))
        if role == "prefill":
            chunk = int(rng.integers(16, 128))
            s["seq_lens_encoder"][b] = s["seq_lens_this_time"][b] = chunk
            s["accept_num"][b], s["step_idx"][b] = 1, 1
        elif role == "stopped":
            s["stop_flags"][b] = True
        else:
            a = int(rng.integers(1, K + 2))
            s["accept_num"][b] = a
            s["seq_lens_this_time"][b] = K + 1
            s["seq_lens_decoder"][b] = prompt + gen - 1
            s["step_idx"][b] = gen + a
            s["pre_ids"][b, 1 : gen + 1] = _tokens(rng, gen)
            s["is_block_step"][b] = batch > 1 and rng.random() < 0.03
    return s, roles


def build_set_stop_value(batch):
    """Five stop sequences of length 1..8 per request; ~1/20 of the decodes hit one (planted to end
    inside this step's accepted tokens, spanning pre_ids)."""
    s, roles = target_state(batch)
    rng = np.random.default_rng(7)
    seqs = _tokens(rng, batch, NUM_STOP_SEQS, STOP_SEQ_LEN)
    lens = rng.integers(1, STOP_SEQ_LEN + 1, (batch, NUM_STOP_SEQS)).astype(np.int32)
    for b in np.flatnonzero(roles == "decode")[::20]:
        a, t = int(s["accept_num"][b]), int(s["step_idx"][b, 0])
        idx = a - 1  # the sequence ends at accept_tokens[a - 2] or, for a == 1, at pre_ids[t - 1]
        history = list(s["pre_ids"][b, 1 : t - a + 1]) + list(s["accept_tokens"][b, :idx])
        n = lens[b, 0] = min(int(lens[b, 0]), len(history))
        seqs[b, 0, :n] = history[-n:]
    names = positional("speculate_set_stop_value_multi_seqs")
    args = [
        s["accept_tokens"],
        s["accept_num"],
        s["pre_ids"],
        s["step_idx"],
        s["stop_flags"],
        s["seq_lens_this_time"],
        seqs,
        lens,
        np.array(EOS_IDS, np.int64),
    ]
    return Case(
        args,
        names,
        ["accept_tokens", "accept_num", "stop_flags"],
        f"K={K};L={L};S={NUM_STOP_SEQS};Ls={STOP_SEQ_LEN}",
    )


def build_speculate_update(batch, variant=0):
    s, _ = target_state(batch, _seed(6, variant))
    names = positional("speculate_update")
    s["not_need_stop"] = np.zeros(1, bool)
    s["stop_nums"] = np.array([batch], np.int64)
    written = [
        "seq_lens_encoder",
        "seq_lens_decoder",
        "not_need_stop",
        "draft_tokens",
        "actual_draft_token_nums",
        "mask_rollback",
    ]
    return Case([s[n] for n in names], names, written, f"K={K};real_bsz=max_bsz")


def build_set_value(batch, variant=0):
    s, _ = target_state(batch, _seed(6, variant))
    s["seq_lens_decoder"][s["seq_lens_encoder"] > 0] = (
        0  # after speculate_update: enc moved into dec
    )
    s["seq_lens_decoder"] += s["seq_lens_encoder"]
    s["seq_lens_encoder"][:] = 0
    names = positional("speculate_set_value_by_flags_and_idx")
    s["pre_ids_all"] = s["pre_ids"]
    return Case(
        [s[n] for n in names],
        names,
        ["pre_ids_all", "accept_num", "seq_lens_decoder"],
        f"K={K};L={L}",
    )


def build_clear_accept_nums(batch):
    s, _ = target_state(batch)
    dec = np.where(s["stop_flags"], 0, s["seq_lens_decoder"]).astype(np.int32)
    return Case(
        [s["accept_num"], dec], ["accept_num", "seq_lens_decoder"], ["accept_num"], f"K={K}"
    )


def build_calcu_accept_ratio(batch):
    """After speculate_update: running decodes verified K + 1 tokens and emitted accept_num;
    ~10% of the slots stopped; totals far from int32's limit."""
    s, _ = target_state(batch)
    return Case(
        [
            np.array([1_000_000], np.int32),
            np.array([700_000], np.int32),
            s["accept_num"],
            s["seq_lens_this_time"],
            s["seq_lens_decoder"],
            s["stop_flags"],
        ],
        positional("speculate_calcu_accept_ratio"),
        ["sum_draft_num", "sum_accept_num"],
        f"K={K}",
    )


def build_limit_thinking(batch):
    """After verify, a reasoning model: ~1/2 of the running requests think (budget 512, some
    reach it this step), ~1/4 reply (budget 256), the rest have no budgets; think_end_id and EOS
    tokens appear in a few rows; two injection tokens."""
    s, _ = target_state(batch)
    rng = np.random.default_rng(59)
    tokens = s["accept_tokens"].copy()
    tokens[rng.random(tokens.shape) < 0.02] = THINK_END_ID
    tokens[rng.random(tokens.shape) < 0.01] = EOS_IDS[0]
    phase = rng.random(batch)
    think = np.where(phase < 0.5, 512, -1).astype(np.int32)
    reply = np.where((phase >= 0.5) & (phase < 0.75), 256, -1).astype(np.int32)
    status = np.where(phase < 0.5, 0, 4).astype(np.int32)  # 4 = reply_base with 2 injection ids
    status += np.where(status > 0, rng.integers(0, 300, batch), 0).astype(np.int32)
    step = s["step_idx"].copy()
    near = (phase < 0.5) & (rng.random(batch) < 0.1)
    step[near, 0] = 512 + 1 + rng.integers(0, K + 1, int(near.sum()))  # reach the budget now
    return Case(
        [
            tokens,
            think,
            reply,
            step,
            status,
            s["accept_num"],
            s["stop_flags"],
            np.array(EOS_IDS, np.int64),
            np.array([THINK_END_ID + 1, THINK_END_ID + 2], np.int64),
            THINK_END_ID,
            False,
        ],
        positional("speculate_limit_thinking_content_length"),
        ["next_tokens", "max_reply_lens", "step_idx", "limit_status", "accept_num"],
        f"K={K};think=512;reply=256;inject=2",
    )


def build_update_input_ids(batch):
    """A prompt of up to 512 tokens copied into slot batch - 1 of input_ids_cpu [batch, L]."""
    rng = np.random.default_rng(7)
    prompt = _tokens(rng, int(rng.integers(64, 512))).tolist()
    return Case(
        [np.zeros((batch, L), np.int64), prompt, batch - 1, L],
        positional("speculate_update_input_ids_cpu"),
        ["input_ids_cpu"],
        f"L={L};prompt={len(prompt)}",
    )
