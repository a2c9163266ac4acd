"""Block-scheduling ops (spec §5.13-§5.15): speculate_schedule_cache, recover_decode_task,
speculate_step_paddle and its system-cache / reschedule variants."""

from __future__ import annotations

import numpy as np

from ...schema import written_args as _written_args
from ._common import BLOCK_SIZE, Case, K, L, _tokens, positional


def _decode_rows(batch, rng, nb):
    """Per request: prompt length, decoder length and a block-table row holding the blocks of
    its positions (prompt blocks first); block ids are unique across the batch."""
    prompt = rng.integers(64, 512, batch)
    dec = np.array([int(rng.integers(p + 1, L - 2 * BLOCK_SIZE)) for p in prompt], np.int32)
    tables = np.full((batch, nb), -1, np.int32)
    enc_blocks = (-(-prompt // BLOCK_SIZE)).astype(np.int32)
    next_id = 0
    for b in range(batch):
        held = -(-int(dec[b]) // BLOCK_SIZE)
        tables[b, :held] = np.arange(next_id, next_id + held)
        next_id += held
    return prompt.astype(np.int64), dec, tables, enc_blocks, next_id


def pool_tables(rng, ids, enc, used, parked, nb):
    """Block tables of a consistent pool for random block-manager batches (tests/ops and
    tests/gpu): request b holds ``enc[b]`` encoder blocks and, unless ``parked[b]``
    (block-stepped: its decode blocks went back), ``used[b]`` decode blocks, ids taken in order
    from the iterator ``ids``; the parked requests stand on step_block_list in a random order.
    Returns (block_tables [B, nb] int32, step_block_list [B] int32, -1 padded)."""
    bsz = len(enc)
    tables = np.full((bsz, nb), -1, np.int32)
    for b in range(bsz):
        for j in range(enc[b] + (0 if parked[b] else used[b])):
            tables[b, j] = next(ids)
    stack = [int(b) for b in np.flatnonzero(parked)]
    rng.shuffle(stack)
    step_list = np.full(bsz, -1, np.int32)
    step_list[: len(stack)] = stack
    return tables, step_list


def build_schedule_cache(batch):
    """v1, after the proposer: decoding requests hold the blocks of their positions; ~1/16 reach
    a missing slot (dec + 2K + 2) // block_size and block-step; ~1/20 are stopped; ~1/32 are
    unfinished chunked prefills (dec < prompt_lens) and are stopped."""
    rng = np.random.default_rng(6)
    nb = L // BLOCK_SIZE + 2
    prompt, dec, tables, _, _ = _decode_rows(batch, rng, nb)
    for b in range(batch):
        slot = (int(dec[b]) + 2 * K + 2) // BLOCK_SIZE
        if rng.random() < 1 / 16:
            tables[b, slot:] = -1
        elif slot < nb:
            tables[b, slot] = 10**6 + b  # granted ahead (the scheduler preallocates)
    stop = rng.random(batch) < 1 / 20
    chunk = rng.random(batch) < 1 / 32
    prompt_lens = np.where(chunk, dec.astype(np.int64) + 64, prompt)
    names = positional("speculate_schedule_cache")
    args = [
        _tokens(rng, batch, K + 1),
        tables,
        stop.reshape(-1, 1),
        prompt_lens.reshape(-1, 1),
        np.where(stop, 0, K + 1).astype(np.int32).reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        dec.reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        np.zeros((batch, K + 1), np.int64),
        np.zeros((batch, 1), np.int32),
        rng.integers(1, K + 2, batch).astype(np.int32),
        _tokens(rng, batch, K + 1),
        np.zeros(batch, bool),
        np.zeros(1, bool),
        np.array([batch], np.int64),
        BLOCK_SIZE,
        K,
    ]
    written = [
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_seq_lens_decoder",
        "step_draft_tokens",
        "step_seq_lens_this_time",
        "accept_num",
        "accept_tokens",
        "is_block_step",
        "not_need_stop",
    ]
    return Case(
        args,
        names,
        written,
        f"K={K};block_size={BLOCK_SIZE};NB={nb};v1=1",
        kwargs={"prefill_one_step_stop": False},
    )


def build_recover_decode(batch):
    """v1, start of a step: ~1/8 of the requests are block-stepped; half of those have been
    granted their block and resume with their parked lengths and draft row."""
    rng = np.random.default_rng(7)
    nb = L // BLOCK_SIZE + 2
    _, dec, tables, _, _ = _decode_rows(batch, rng, nb)
    parked = rng.random(batch) < 1 / 8
    for b in np.flatnonzero(parked):
        slot = (int(dec[b]) + 2 * K + 1) // BLOCK_SIZE
        tables[b, slot:] = -1
        if rng.random() < 0.5 and slot < nb:
            tables[b, slot] = 10**6 + b
    names = positional("recover_decode_task")
    args = [
        parked.reshape(-1, 1),
        np.where(parked, 0, K + 1).astype(np.int32).reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        np.where(parked, 0, dec).astype(np.int32).reshape(-1, 1),
        np.where(parked, dec, 0).astype(np.int32).reshape(-1, 1),
        tables,
        parked.copy(),
        np.full((batch, K + 1), -1, np.int64),
        _tokens(rng, batch, K + 1),
        np.where(parked, K + 1, 0).astype(np.int32).reshape(-1, 1),
        BLOCK_SIZE,
        K,
    ]
    written = [
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "is_block_step",
        "draft_tokens",
    ]
    return Case(args, names, written, f"K={K};block_size={BLOCK_SIZE};NB={nb};parked=1/8")


def build_speculate_step(batch):
    """v0 target block manager: requests hold the blocks of their positions (prompt blocks, then
    decode blocks); ~1/16 cross a block boundary and need one; ~5% finished and give their decode
    blocks back; ~2% are parked on step_block_list (decode blocks already returned) and the last
    one recovers with a re-prefill (prompt + step_idx generated tokens copied from pre_ids); the
    free list has more blocks than needed (no preemption)."""
    rng = np.random.default_rng(8)
    nb = L // BLOCK_SIZE + 2
    prompt, dec, tables, enc_blocks, next_id = _decode_rows(batch, rng, nb)
    used = np.array(
        [int((tables[b] != -1).sum()) - int(enc_blocks[b]) for b in range(batch)], np.int32
    )
    finished = np.zeros(batch, bool)
    parked = np.zeros(batch, bool)
    if batch > 1:
        idx = rng.permutation(batch)
        finished[idx[: max(1, batch // 20)]] = True
        parked[idx[max(1, batch // 20) : max(1, batch // 20) + max(1, batch // 50)]] = True
    for b in np.flatnonzero(parked):
        tables[b, enc_blocks[b] :] = -1  # decode blocks went back when it was preempted
    step_idx = (dec.astype(np.int64) - prompt + 1).clip(min=0)
    n_free = 2 * batch + 8 + int(used.max(initial=0)) + 1
    free_list = np.zeros(next_id + n_free + 8, np.int32)
    free_list[:n_free] = np.arange(next_id, next_id + n_free)
    stack = np.full(batch, -1, np.int32)
    stack[: int(parked.sum())] = np.flatnonzero(parked)
    stop = finished | parked
    names = positional("speculate_step_paddle")
    args = [
        stop.reshape(-1, 1),
        np.where(stop, 0, K + 1).astype(np.int32).reshape(-1, 1),
        prompt.astype(np.int32).reshape(-1, 1),
        np.zeros((batch, 1), np.int32),
        np.where(parked, 0, dec).astype(np.int32).reshape(-1, 1),
        tables,
        enc_blocks,
        parked.copy(),
        stack,
        np.array([int(parked.sum())], np.int32),
        np.full(batch, -1, np.int32),
        np.zeros(1, np.int32),
        np.full(batch, -1, np.int32),
        np.zeros(1, np.int32),
        used,
        free_list,
        np.array([n_free], np.int32),
        _tokens(rng, batch, L),
        _tokens(rng, batch, L),
        step_idx.reshape(-1, 1),
        np.full((batch, 1), -1, np.int64),
        _tokens(rng, batch),
        rng.integers(1, K + 2, batch).astype(np.int32),
        BLOCK_SIZE,
        2,
        K,
    ]
    written = [
        "stop_flags",
        "seq_lens_this_time",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "block_tables",
        "encoder_block_lens",
        "is_block_step",
        "step_block_list",
        "step_lens",
        "recover_block_list",
        "recover_lens",
        "need_block_list",
        "need_block_len",
        "used_list_len",
        "free_list",
        "free_list_len",
        "input_ids",
        "first_token_ids",
        "accept_num",
    ]
    return Case(
        args, names, written, f"K={K};block_size={BLOCK_SIZE};NB={nb};L={L};free={n_free};recover=1"
    )


# speculate_step_paddle's variants (spec §5.13): the same state as build_speculate_step.
def build_speculate_step_system_cache(batch):
    """build_speculate_step plus ori_seq_lens_decoder (the cached prefix each request would
    resume from: half its prompt); the parked request on top of the stack recovers."""
    case = build_speculate_step(batch)
    names = positional("speculate_step_system_cache")
    prompt = case.args[case.names.index("ori_seq_lens_encoder")]
    args = list(case.args)
    args.insert(names.index("ori_seq_lens_decoder"), (prompt // 2).astype(np.int32))
    written = [case.names[i] for i in case.written]
    return Case(args, names, written, case.config + ";cached=prompt/2")


def build_speculate_step_reschedule(batch):
    """build_speculate_step's state for the reschedule variant: parked requests hold no decode
    blocks (used_list_len 0) and, being stopped, are freed like finished ones; no recovery."""
    case = build_speculate_step(batch)
    names = positional("speculate_step_reschedule")
    args = list(case.args)
    parked = args[names.index("is_block_step")]
    used = args[names.index("used_list_len")].copy()
    used[parked] = 0
    args[names.index("used_list_len")] = used
    written = list(_written_args("speculate_step_reschedule"))
    return Case(args, names, written, case.config.replace(";recover=1", ";recover=0"))
