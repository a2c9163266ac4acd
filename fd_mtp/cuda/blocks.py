"""fd_mtp.cuda versions of the target-side block managers (spec §5.13-§5.15)."""
from __future__ import annotations

import os

import numpy as np

from ._common import (
    _check_status,
    _cupy,
    _dtype,
    _fail,
    _host_flag,
    _matrix,
    _per_request,
    _ptr,
    _scratch,
    _set_flag,
    _stream,
    load,
)

# Status tables: code -> (argument, description), as in the Paddle bindings' kStatus.
_SCHEDULE_STATUS = {
    1: ("seq_lens_decoder", "is {value} for a decoding request; it must be >= {limit}"),
}
_RECOVER_STATUS = {
    1: ("step_seq_lens_decoder", "is {value} for a block-stepped request; it must be >= {limit}"),
    2: ("step_seq_lens_this_time", "is {value}; the draft row it restores must fit [0, {limit}] columns of "
        "draft_tokens and step_draft_tokens"),
}
_STEP_STATUS = {
    1: ("free_list", "is exhausted: {value} requests need a decode block, {limit} are free, and no running "
        "request holds a decode block to preempt"),
    2: ("free_list", "is too small: returned blocks would fill {value} entries but it has {limit}"),
    3: ("used_list_len", "is {value}; with encoder_block_lens it must fit the block table row ({limit} slots)"),
    4: ("free_list_len", "is {value}; it must be in [0, {limit}]"),
    5: ("step_lens", "is {value}; it must be in [0, {limit}] (step_block_list size)"),
    6: ("step_block_list", "is too small: preemption pushes entry {value} but it has {limit}"),
    7: ("step_block_list", "the request to recover is {value}; it must be in [0, {limit})"),
    8: ("need_block_len", "is {value} on entry; it must be {limit}"),
    9: ("recover_lens", "is {value} on entry; it must be {limit}"),
    10: ("need_block_list", "is too small: {value} requests need a block but it has {limit} entries"),
    11: ("recover_block_list", "is too small: a recovery needs {value} entry but it has {limit}"),
    12: ("seq_lens_decoder", "is {value} for a running request; it must be >= {limit}"),
    13: ("encoder_block_lens", "with the blocks granted on recovery the row needs {value} slots but it has "
         "{limit} (or max_decoder_block_num = input_ids columns / block_size is below encoder_block_lens)"),
    14: ("ori_seq_lens_encoder", "is {value} for the request to recover; it must be >= {limit}"),
    15: ("step_idx", "is {value} for the request to recover; its generated tokens pre_ids[1..step_idx] must "
         "fit pre_ids (step_idx in [0, {limit}])"),
    16: ("input_ids", "the re-prefill (prompt + generated tokens) needs {value} columns but the row has {limit}"),
}


def _scalar(op, arg, a, dt):
    _dtype(op, arg, a, dt)
    if a.size != 1:
        _fail(op, arg, f"must hold exactly one element, got shape {list(a.shape)}")


def _attrs(op, block_size, max_draft_tokens):
    block_size, max_draft_tokens = int(block_size), int(max_draft_tokens)
    if block_size < 1:
        _fail(op, "block_size", f"must be >= 1, got {block_size}")
    if max_draft_tokens < 0:
        _fail(op, "max_draft_tokens", f"must be >= 0, got {max_draft_tokens}")
    return block_size, max_draft_tokens


def speculate_schedule_cache(
    draft_tokens, block_tables, stop_flags, prompt_lens, seq_lens_this_time, seq_lens_encoder,
    seq_lens_decoder, step_seq_lens_decoder, step_draft_tokens, step_seq_lens_this_time, accept_num,
    accept_tokens, is_block_step, not_need_stop, stop_nums, block_size, max_draft_tokens, *,
    prefill_one_step_stop=None,
):
    """fd_mtp.ops.speculate_schedule_cache on CuPy arrays (not_need_stop: host numpy [1] bool;
    stop_nums: a CuPy or numpy int64 array of one element, read on the host)."""
    op = "speculate_schedule_cache"
    m = load()
    if prefill_one_step_stop is None:
        prefill_one_step_stop = os.environ.get("PREFILL_NODE_ONE_STEP_STOP_V1", "0") == "1"
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    max_bsz = _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    draft_cols = _matrix(op, "draft_tokens", draft_tokens, np.int64, bsz)
    nb = _matrix(op, "block_tables", block_tables, np.int32, bsz)
    _per_request(op, "prompt_lens", prompt_lens, np.int64, bsz)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    _per_request(op, "step_seq_lens_decoder", step_seq_lens_decoder, np.int32, bsz)
    step_cols = _matrix(op, "step_draft_tokens", step_draft_tokens, np.int64, bsz, draft_cols)
    _per_request(op, "step_seq_lens_this_time", step_seq_lens_this_time, np.int32, bsz)
    _per_request(op, "accept_num", accept_num, np.int32, bsz)
    accept_cols = _matrix(op, "accept_tokens", accept_tokens, np.int64, bsz)
    _per_request(op, "is_block_step", is_block_step, np.bool_, bsz)
    _host_flag(op, "not_need_stop", not_need_stop)
    if isinstance(stop_nums, np.ndarray):
        if stop_nums.dtype != np.int64 or stop_nums.size != 1:
            _fail(op, "stop_nums", "must be an int64 array holding exactly one element")
        limit = int(stop_nums.reshape(-1)[0])
    else:
        _scalar(op, "stop_nums", stop_nums, np.int64)
        limit = int(_cupy().asnumpy(stop_nums).reshape(-1)[0])
    block_size, max_draft_tokens = _attrs(op, block_size, max_draft_tokens)

    p = m.ScheduleCacheParams()
    p.draft_tokens = _ptr(draft_tokens)
    p.draft_cols = draft_cols
    p.block_tables = _ptr(block_tables)
    p.num_blocks_per_seq = nb
    p.stop_flags = _ptr(stop_flags)
    p.prompt_lens = _ptr(prompt_lens)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.step_seq_lens_decoder = _ptr(step_seq_lens_decoder)
    p.step_draft_tokens = _ptr(step_draft_tokens)
    p.step_draft_cols = step_cols
    p.step_seq_lens_this_time = _ptr(step_seq_lens_this_time)
    p.accept_num = _ptr(accept_num)
    p.accept_tokens = _ptr(accept_tokens)
    p.accept_cols = accept_cols
    p.is_block_step = _ptr(is_block_step)
    p.bsz = bsz
    p.max_bsz = max_bsz
    p.block_size = block_size
    p.max_draft_tokens = max_draft_tokens
    p.prefill_one_step_stop = bool(prefill_one_step_stop)
    status, counter = _scratch(), _scratch(1)
    st, stopped = m.speculate_schedule_cache(p, _ptr(status), _ptr(counter), _stream())
    _check_status(op, st, _SCHEDULE_STATUS)
    _set_flag(not_need_stop, stopped + (max_bsz - bsz) < limit)


def recover_decode_task(
    stop_flags, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, step_seq_lens_decoder,
    block_tables, is_block_step, draft_tokens, step_draft_tokens, step_seq_lens_this_time,
    block_size, max_draft_tokens,
):
    """fd_mtp.ops.recover_decode_task on CuPy arrays (the three speculative arrays or None)."""
    op = "recover_decode_task"
    m = load()
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    _per_request(op, "step_seq_lens_decoder", step_seq_lens_decoder, np.int32, bsz)
    nb = _matrix(op, "block_tables", block_tables, np.int32, bsz)
    _per_request(op, "is_block_step", is_block_step, np.bool_, bsz)
    spec = draft_tokens is not None
    if (step_draft_tokens is not None) != spec or (step_seq_lens_this_time is not None) != spec:
        _fail(op, "draft_tokens", "and step_draft_tokens and step_seq_lens_this_time must all be given "
              "(speculative variant) or all be None")
    block_size, max_draft_tokens = _attrs(op, block_size, max_draft_tokens)
    p = m.RecoverDecodeParams()
    p.stop_flags = _ptr(stop_flags)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.step_seq_lens_decoder = _ptr(step_seq_lens_decoder)
    p.block_tables = _ptr(block_tables)
    p.num_blocks_per_seq = nb
    p.is_block_step = _ptr(is_block_step)
    if spec:
        p.draft_cols = _matrix(op, "draft_tokens", draft_tokens, np.int64, bsz)
        p.step_draft_cols = _matrix(op, "step_draft_tokens", step_draft_tokens, np.int64, bsz)
        _per_request(op, "step_seq_lens_this_time", step_seq_lens_this_time, np.int32, bsz)
        p.draft_tokens = _ptr(draft_tokens)
        p.step_draft_tokens = _ptr(step_draft_tokens)
        p.step_seq_lens_this_time = _ptr(step_seq_lens_this_time)
    p.bsz = bsz
    p.block_size = block_size
    p.max_draft_tokens = max_draft_tokens
    status = _scratch()
    _check_status(op, m.recover_decode_task(p, _ptr(status), _stream()), _RECOVER_STATUS)


def speculate_step_paddle(
    stop_flags, seq_lens_this_time, ori_seq_lens_encoder, seq_lens_encoder, seq_lens_decoder,
    block_tables, encoder_block_lens, is_block_step, step_block_list, step_lens, recover_block_list,
    recover_lens, need_block_list, need_block_len, used_list_len, free_list, free_list_len, input_ids,
    pre_ids, step_idx, next_tokens, first_token_ids, accept_num, block_size, encoder_decoder_block_num,
    max_draft_tokens,
):
    """fd_mtp.ops.speculate_step_paddle on CuPy arrays (next_tokens and
    encoder_decoder_block_num are unused)."""
    op = "speculate_step_paddle"
    m = load()
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    _per_request(op, "ori_seq_lens_encoder", ori_seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    nb = _matrix(op, "block_tables", block_tables, np.int32, bsz)
    _per_request(op, "encoder_block_lens", encoder_block_lens, np.int32, bsz)
    _per_request(op, "is_block_step", is_block_step, np.bool_, bsz)
    _dtype(op, "step_block_list", step_block_list, np.int32)
    _scalar(op, "step_lens", step_lens, np.int32)
    _dtype(op, "recover_block_list", recover_block_list, np.int32)
    _scalar(op, "recover_lens", recover_lens, np.int32)
    _dtype(op, "need_block_list", need_block_list, np.int32)
    _scalar(op, "need_block_len", need_block_len, np.int32)
    _per_request(op, "used_list_len", used_list_len, np.int32, bsz)
    _dtype(op, "free_list", free_list, np.int32)
    _scalar(op, "free_list_len", free_list_len, np.int32)
    input_cols = _matrix(op, "input_ids", input_ids, np.int64, bsz)
    pre_cols = _matrix(op, "pre_ids", pre_ids, np.int64, bsz)
    _per_request(op, "step_idx", step_idx, np.int64, bsz)
    _per_request(op, "first_token_ids", first_token_ids, np.int64, bsz)
    _per_request(op, "accept_num", accept_num, np.int32, bsz)
    block_size, max_draft_tokens = _attrs(op, block_size, max_draft_tokens)

    p = m.SpeculateStepParams()
    p.stop_flags = _ptr(stop_flags)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.ori_seq_lens_encoder = _ptr(ori_seq_lens_encoder)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.block_tables = _ptr(block_tables)
    p.num_blocks_per_seq = nb
    p.encoder_block_lens = _ptr(encoder_block_lens)
    p.is_block_step = _ptr(is_block_step)
    p.step_block_list = _ptr(step_block_list)
    p.step_list_capacity = step_block_list.size
    p.step_lens = _ptr(step_lens)
    p.recover_block_list = _ptr(recover_block_list)
    p.recover_list_capacity = recover_block_list.size
    p.recover_lens = _ptr(recover_lens)
    p.need_block_list = _ptr(need_block_list)
    p.need_list_capacity = need_block_list.size
    p.need_block_len = _ptr(need_block_len)
    p.used_list_len = _ptr(used_list_len)
    p.free_list = _ptr(free_list)
    p.free_list_capacity = free_list.size
    p.free_list_len = _ptr(free_list_len)
    p.input_ids = _ptr(input_ids)
    p.input_ids_cols = input_cols
    p.pre_ids = _ptr(pre_ids)
    p.pre_ids_cols = pre_cols
    p.step_idx = _ptr(step_idx)
    p.first_token_ids = _ptr(first_token_ids)
    p.accept_num = _ptr(accept_num)
    p.bsz = bsz
    p.block_size = block_size
    p.max_draft_tokens = max_draft_tokens
    status = _scratch()
    _check_status(op, m.speculate_step(p, _ptr(status), _stream()), _STEP_STATUS)
