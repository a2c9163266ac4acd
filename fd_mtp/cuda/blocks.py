"""fd_mtp.cuda versions of the target-side block managers (spec §5.13-§5.15)."""
from __future__ import annotations

import numpy as np

from ._common import (
    _check_status,
    _fail,
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
from .update import _host_readable, _host_value

# recover_decode_task is not in the schema yet (fd_mtp/schema/blocks.py says why): its checks
# and status table stay here, mirroring custom_ops/paddle/recover_decode_task.cc.
_RECOVER_STATUS = {
    1: ("step_seq_lens_decoder", "is {value} for a block-stepped request; it must be >= {limit}"),
    2: ("step_seq_lens_this_time", "is {value}; the draft row it restores must fit [0, {limit}] columns of "
        "draft_tokens and step_draft_tokens"),
}


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
    op, _, _, p = prepare("speculate_schedule_cache", _host_readable(locals()))
    limit = _host_value(stop_nums)
    status, counter = _scratch(), _scratch(1)
    st, stopped = load().speculate_schedule_cache(p, _ptr(status), _ptr(counter), _stream())
    raise_status(op, st)
    _set_flag(not_need_stop, stopped + (p.max_bsz - p.bsz) < limit)


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
    op, _, _, p = prepare("speculate_step_paddle", locals())
    status = _scratch()
    raise_status(op, load().speculate_step(p, _ptr(status), _stream()))
