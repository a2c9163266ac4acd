"""fd_mtp.cuda versions of the target-side block managers (spec §5.13-§5.15)."""

from __future__ import annotations

from ._common import (
    _fail,
    _ptr,
    _scratch,
    _set_flag,
    _stream,
    load,
    prepare,
    raise_status,
)
from .update import _host_readable, _host_value


def speculate_schedule_cache(
    draft_tokens,
    block_tables,
    stop_flags,
    prompt_lens,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_seq_lens_decoder,
    step_draft_tokens,
    step_seq_lens_this_time,
    accept_num,
    accept_tokens,
    is_block_step,
    not_need_stop,
    stop_nums,
    block_size,
    max_draft_tokens,
    *,
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
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_seq_lens_decoder,
    block_tables,
    is_block_step,
    draft_tokens,
    step_draft_tokens,
    step_seq_lens_this_time,
    block_size,
    max_draft_tokens,
):
    """fd_mtp.ops.recover_decode_task on CuPy arrays (the three speculative arrays or None)."""
    spec = draft_tokens is not None
    if (step_draft_tokens is not None) != spec or (step_seq_lens_this_time is not None) != spec:
        _fail(
            "recover_decode_task",
            "draft_tokens",
            "and step_draft_tokens and step_seq_lens_this_time must all "
            "be given (speculative variant) or all be None",
        )
    op, _, _, p = prepare("recover_decode_task", locals())
    status = _scratch()
    raise_status(op, load().recover_decode_task(p, _ptr(status), _stream()))


def speculate_step_paddle(
    stop_flags,
    seq_lens_this_time,
    ori_seq_lens_encoder,
    seq_lens_encoder,
    seq_lens_decoder,
    block_tables,
    encoder_block_lens,
    is_block_step,
    step_block_list,
    step_lens,
    recover_block_list,
    recover_lens,
    need_block_list,
    need_block_len,
    used_list_len,
    free_list,
    free_list_len,
    input_ids,
    pre_ids,
    step_idx,
    next_tokens,
    first_token_ids,
    accept_num,
    block_size,
    encoder_decoder_block_num,
    max_draft_tokens,
):
    """fd_mtp.ops.speculate_step_paddle on CuPy arrays (next_tokens and
    encoder_decoder_block_num are unused)."""
    op, _, _, p = prepare("speculate_step_paddle", locals())
    status = _scratch()
    raise_status(op, load().speculate_step(p, _ptr(status), _stream()))
