"""fd_mtp.cuda versions of the draft-model ops (spec §6)."""
from __future__ import annotations

import os

import numpy as np

from ._common import (
    _check_status,
    _cupy,
    _device_array,
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
    prepare,
    raise_status,
)

# Status tables: code -> (argument, description), as in the Paddle bindings' kStatus.
_PREPROCESS_STATUS = {
    1: ("input_ids", "the first accepted token goes to column {value} but the row has {limit} columns"),
    2: ("pre_ids", "accepted tokens go to column {value} but the row has {limit} columns"),
    3: ("accept_num", "is {value}; it must be in [0, {limit}] (columns of draft_tokens and accept_tokens)"),
}
_EAGLE_STATUS = {
    1: ("input", "the requests consume {value} rows but input has {limit} rows"),
    2: ("accept_nums", "is {value}; it must be in [0, base_model_seq_lens_this_time] = [0, {limit}]"),
    3: ("last_seq_lens_this_time", "is {value} for a request that runs this substep (it must be >= {limit})"),
    4: ("seq_lens", "a token count is {value}; counts must be >= {limit}"),
}
_MTP_STEP_STATUS = {
    1: ("free_list", "is exhausted: {value} requests need a decode block but at most {limit} can be "
        "freed, and no request holds a decode block to preempt"),
    2: ("free_list", "is too small: returned blocks would fill {value} entries but it has {limit}"),
    3: ("used_list_len", "is {value}; with encoder_block_lens it must fit the block table row ({limit} slots)"),
    4: ("free_list_len", "is {value}; it must be in [0, {limit}]"),
}



# ------------------------------------------------------------------------------------------
# Ops
# ------------------------------------------------------------------------------------------
def draft_model_preprocess(
    draft_tokens, input_ids, stop_flags, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder,
    step_idx, not_need_stop, is_block_step, batch_drop, pre_ids, mask_rollback,
    recompute_token_num, accept_tokens, accept_num, base_model_seq_lens_this_time,
    base_model_seq_lens_encoder, base_model_seq_lens_decoder, base_model_step_idx,
    base_model_stop_flags, base_model_is_block_step, base_model_draft_tokens, num_model_step,
    truncate_first_token, splitwise_prefill, kvcache_scheduler_v1,
):
    """fd_mtp.ops.draft_model_preprocess on CuPy arrays (not_need_stop: host numpy [1] bool)."""
    op = "draft_model_preprocess"
    m = load()
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    draft_cols = _matrix(op, "draft_tokens", draft_tokens, np.int64, bsz)
    input_cols = _matrix(op, "input_ids", input_ids, np.int64, bsz)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    _per_request(op, "step_idx", step_idx, np.int64, bsz)
    _host_flag(op, "not_need_stop", not_need_stop)
    _per_request(op, "is_block_step", is_block_step, np.bool_, bsz)
    _per_request(op, "batch_drop", batch_drop, np.bool_, bsz)
    pre_cols = _matrix(op, "pre_ids", pre_ids, np.int64, bsz)
    _per_request(op, "mask_rollback", mask_rollback, np.int32, bsz)
    _per_request(op, "recompute_token_num", recompute_token_num, np.int32, bsz)
    accept_cols = _matrix(op, "accept_tokens", accept_tokens, np.int64, bsz)
    _per_request(op, "accept_num", accept_num, np.int32, bsz)
    _per_request(op, "base_model_seq_lens_this_time", base_model_seq_lens_this_time, np.int32, bsz)
    _per_request(op, "base_model_seq_lens_encoder", base_model_seq_lens_encoder, np.int32, bsz)
    _per_request(op, "base_model_seq_lens_decoder", base_model_seq_lens_decoder, np.int32, bsz)
    _per_request(op, "base_model_step_idx", base_model_step_idx, np.int64, bsz)
    _per_request(op, "base_model_stop_flags", base_model_stop_flags, np.bool_, bsz)
    _per_request(op, "base_model_is_block_step", base_model_is_block_step, np.bool_, bsz)
    base_cols = _matrix(op, "base_model_draft_tokens", base_model_draft_tokens, np.int64, bsz)
    if int(num_model_step) < 1:
        _fail(op, "num_model_step", f"must be >= 1, got {num_model_step}")

    p = m.DraftModelPreprocessParams()
    p.draft_tokens = _ptr(draft_tokens)
    p.draft_tokens_cols = draft_cols
    p.input_ids = _ptr(input_ids)
    p.input_ids_cols = input_cols
    p.stop_flags = _ptr(stop_flags)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.step_idx = _ptr(step_idx)
    p.is_block_step = _ptr(is_block_step)
    p.batch_drop = _ptr(batch_drop)
    p.pre_ids = _ptr(pre_ids)
    p.pre_ids_cols = pre_cols
    p.mask_rollback = _ptr(mask_rollback)
    p.recompute_token_num = _ptr(recompute_token_num)
    p.accept_tokens = _ptr(accept_tokens)
    p.accept_tokens_cols = accept_cols
    p.accept_num = _ptr(accept_num)
    p.base_model_seq_lens_this_time = _ptr(base_model_seq_lens_this_time)
    p.base_model_seq_lens_decoder = _ptr(base_model_seq_lens_decoder)
    p.base_model_step_idx = _ptr(base_model_step_idx)
    p.base_model_stop_flags = _ptr(base_model_stop_flags)
    p.base_model_is_block_step = _ptr(base_model_is_block_step)
    p.base_model_draft_tokens = _ptr(base_model_draft_tokens)
    p.base_model_draft_tokens_cols = base_cols
    p.bsz = bsz
    p.num_model_step = int(num_model_step)
    p.truncate_first_token = bool(truncate_first_token)
    p.splitwise_prefill = bool(splitwise_prefill)
    p.kvcache_scheduler_v1 = bool(kvcache_scheduler_v1)

    status, counter = _scratch(), _scratch(1)
    st, running = m.draft_model_preprocess(p, _ptr(status), _ptr(counter), _stream())
    _check_status(op, st, _PREPROCESS_STATUS)
    _set_flag(not_need_stop, running > 0)


def draft_model_update(
    inter_next_tokens, draft_tokens, pre_ids, seq_lens_this_time, seq_lens_encoder,
    seq_lens_decoder, step_idx, output_cum_offsets, stop_flags, not_need_stop, max_dec_len,
    end_ids, base_model_draft_tokens, max_seq_len, substep, *, prefill_one_step_stop=None,
):
    """fd_mtp.ops.draft_model_update on CuPy arrays (not_need_stop: host numpy [1] bool)."""
    op, v, dims, p = prepare("draft_model_update", locals())
    if dims["Db"] < v["substep"] + 2:
        _fail(op.name, "base_model_draft_tokens", f"needs at least {v['substep'] + 2} columns, got shape "
              f"{list(base_model_draft_tokens.shape)}")
    status, counter = _scratch(), _scratch(1)
    st, stopped = load().draft_model_update(p, _ptr(status), _ptr(counter), _stream())
    raise_status(op, st)
    _set_flag(not_need_stop, stopped < dims["B"])


def draft_model_postprocess(
    base_model_draft_tokens, base_model_seq_lens_this_time, base_model_seq_lens_encoder,
    base_model_stop_flags,
):
    """fd_mtp.ops.draft_model_postprocess on CuPy arrays."""
    _, _, _, p = prepare("draft_model_postprocess", locals())
    load().draft_model_postprocess(p, _stream())


_HIDDEN_DTYPES = ("float32", "float16", "bfloat16", "uint16")  # uint16: bfloat16 bits


def _check_hidden(op, input):
    _device_array(op, "input", input)
    if input.dtype.name not in _HIDDEN_DTYPES:
        _fail(op, "input", f"must be float32, float16 or bfloat16 (uint16 bits), got {input.dtype}")
    if input.ndim != 2:
        _fail(op, "input", f"must be 2-D [tokens, hidden], got shape {list(input.shape)}")


def _gather(op, plan_fn, p, input):
    cp = _cupy()
    m = load()
    in_rows, hidden = input.shape
    src = cp.empty(max(in_rows, 1), dtype=cp.int64)
    status, counter = _scratch(), _scratch(1)
    stream = _stream()
    st, out_rows = plan_fn(p, in_rows, _ptr(src), _ptr(status), _ptr(counter), stream)
    _check_status(op, st, _EAGLE_STATUS)
    out = cp.empty((out_rows, hidden), dtype=input.dtype)
    if out.size:
        m.row_gather_copy(_ptr(input), _ptr(out), _ptr(src), out_rows, hidden * input.itemsize, stream)
    return out


def eagle_get_hidden_states(
    input, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, stop_flags, accept_nums,
    base_model_seq_lens_this_time, base_model_seq_lens_encoder, actual_draft_token_num,
):
    """fd_mtp.ops.eagle_get_hidden_states on CuPy arrays; returns a new CuPy array."""
    op = "eagle_get_hidden_states"
    m = load()
    _check_hidden(op, input)
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    _per_request(op, "accept_nums", accept_nums, np.int32, bsz)
    _per_request(op, "base_model_seq_lens_this_time", base_model_seq_lens_this_time, np.int32, bsz)
    _per_request(op, "base_model_seq_lens_encoder", base_model_seq_lens_encoder, np.int32, bsz)
    p = m.EagleHiddenStatesParams()
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.accept_nums = _ptr(accept_nums)
    p.base_model_seq_lens_this_time = _ptr(base_model_seq_lens_this_time)
    p.bsz = bsz
    return _gather(op, m.eagle_get_hidden_states_plan, p, input)


def eagle_get_self_hidden_states(input, last_seq_lens_this_time, seq_lens_this_time, step_idx):
    """fd_mtp.ops.eagle_get_self_hidden_states on CuPy arrays; returns a new CuPy array."""
    op = "eagle_get_self_hidden_states"
    m = load()
    _check_hidden(op, input)
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    _per_request(op, "last_seq_lens_this_time", last_seq_lens_this_time, np.int32, bsz)
    _per_request(op, "step_idx", step_idx, np.int64, bsz)
    p = m.EagleSelfHiddenStatesParams()
    p.last_seq_lens_this_time = _ptr(last_seq_lens_this_time)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.step_idx = _ptr(step_idx)
    p.bsz = bsz
    return _gather(op, m.eagle_get_self_hidden_states_plan, p, input)


def mtp_step_paddle(
    base_model_stop_flags, stop_flags, batch_drop, seq_lens_this_time, seq_lens_encoder,
    seq_lens_decoder, block_tables, encoder_block_lens, used_list_len, free_list, free_list_len,
    block_size, max_draft_tokens,
):
    """fd_mtp.ops.mtp_step_paddle on CuPy arrays."""
    op = "mtp_step_paddle"
    cp = _cupy()
    m = load()
    block_size, max_draft_tokens = int(block_size), int(max_draft_tokens)
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    _per_request(op, "base_model_stop_flags", base_model_stop_flags, np.bool_, bsz)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    _per_request(op, "batch_drop", batch_drop, np.bool_, bsz)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    nb = _matrix(op, "block_tables", block_tables, np.int32, bsz)
    _per_request(op, "encoder_block_lens", encoder_block_lens, np.int32, bsz)
    _per_request(op, "used_list_len", used_list_len, np.int32, bsz)
    _dtype(op, "free_list", free_list, np.int32)
    _dtype(op, "free_list_len", free_list_len, np.int32)
    if free_list_len.size != 1:
        _fail(op, "free_list_len", f"must hold exactly one element, got shape {list(free_list_len.shape)}")
    if block_size < 1:
        _fail(op, "block_size", f"must be >= 1, got {block_size}")
    if max_draft_tokens < 0:
        _fail(op, "max_draft_tokens", f"must be >= 0, got {max_draft_tokens}")
    need_list = cp.empty(max(bsz, 1), dtype=cp.int32)
    p = m.MtpStepParams()
    p.base_model_stop_flags = _ptr(base_model_stop_flags)
    p.stop_flags = _ptr(stop_flags)
    p.batch_drop = _ptr(batch_drop)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.block_tables = _ptr(block_tables)
    p.num_blocks_per_seq = nb
    p.encoder_block_lens = _ptr(encoder_block_lens)
    p.used_list_len = _ptr(used_list_len)
    p.free_list = _ptr(free_list)
    p.free_list_capacity = free_list.size
    p.free_list_len = _ptr(free_list_len)
    p.need_list = _ptr(need_list)
    p.bsz = bsz
    p.block_size = block_size
    p.max_draft_tokens = max_draft_tokens
    status = _scratch()
    st = m.mtp_step(p, _ptr(status), _stream())
    _check_status(op, st, _MTP_STEP_STATUS)
