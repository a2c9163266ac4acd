"""fd_mtp.cuda versions of the draft-model ops (spec §6)."""

from __future__ import annotations

import numpy as np

from ._common import (
    _cupy,
    _fail,
    _ptr,
    _scratch,
    _set_flag,
    _stream,
    load,
    prepare,
    raise_status,
)


# ------------------------------------------------------------------------------------------
# Ops
# ------------------------------------------------------------------------------------------
def draft_model_preprocess(
    draft_tokens,
    input_ids,
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
    not_need_stop,
    is_block_step,
    batch_drop,
    pre_ids,
    mask_rollback,
    recompute_token_num,
    accept_tokens,
    accept_num,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    base_model_seq_lens_decoder,
    base_model_step_idx,
    base_model_stop_flags,
    base_model_is_block_step,
    base_model_draft_tokens,
    num_model_step,
    truncate_first_token,
    splitwise_prefill,
    kvcache_scheduler_v1,
):
    """fd_mtp.ops.draft_model_preprocess on CuPy arrays (not_need_stop: host numpy [1] bool)."""
    op, _, _, p = prepare("draft_model_preprocess", locals())
    status, counter = _scratch(), _scratch(1)
    st, running = load().draft_model_preprocess(p, _ptr(status), _ptr(counter), _stream())
    raise_status(op, st)
    _set_flag(not_need_stop, running > 0)


def draft_model_update(
    inter_next_tokens,
    draft_tokens,
    pre_ids,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
    output_cum_offsets,
    stop_flags,
    not_need_stop,
    max_dec_len,
    end_ids,
    base_model_draft_tokens,
    max_seq_len,
    substep,
    *,
    prefill_one_step_stop=None,
):
    """fd_mtp.ops.draft_model_update on CuPy arrays (not_need_stop: host numpy [1] bool)."""
    op, v, dims, p = prepare("draft_model_update", locals())
    if dims["Db"] < v["substep"] + 2:
        _fail(
            op.name,
            "base_model_draft_tokens",
            f"needs at least {v['substep'] + 2} columns, got shape "
            f"{list(base_model_draft_tokens.shape)}",
        )
    status, counter = _scratch(), _scratch(1)
    st, stopped = load().draft_model_update(p, _ptr(status), _ptr(counter), _stream())
    raise_status(op, st)
    _set_flag(not_need_stop, stopped < dims["B"])


def draft_model_postprocess(
    base_model_draft_tokens,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    base_model_stop_flags,
):
    """fd_mtp.ops.draft_model_postprocess on CuPy arrays."""
    _, _, _, p = prepare("draft_model_postprocess", locals())
    load().draft_model_postprocess(p, _stream())


def _gather(op, plan_fn, p, input):
    cp = _cupy()
    in_rows, hidden = input.shape
    src = cp.empty(max(in_rows, 1), dtype=cp.int64)
    status, counter = _scratch(), _scratch(1)
    stream = _stream()
    st, out_rows = plan_fn(p, in_rows, _ptr(src), _ptr(status), _ptr(counter), stream)
    raise_status(op, st)
    out = cp.empty((out_rows, hidden), dtype=input.dtype)
    if out.size:
        load().row_gather_copy(
            _ptr(input), _ptr(out), _ptr(src), out_rows, hidden * input.itemsize, stream
        )
    return out


def eagle_get_hidden_states(
    input,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    stop_flags,
    accept_nums,
    base_model_seq_lens_this_time,
    base_model_seq_lens_encoder,
    actual_draft_token_num,
):
    """fd_mtp.ops.eagle_get_hidden_states on CuPy arrays; returns a new CuPy array."""
    op, _, _, p = prepare("eagle_get_hidden_states", locals())
    return _gather(op, load().eagle_get_hidden_states_plan, p, input)


def eagle_get_self_hidden_states(input, last_seq_lens_this_time, seq_lens_this_time, step_idx):
    """fd_mtp.ops.eagle_get_self_hidden_states on CuPy arrays; returns a new CuPy array."""
    op, _, _, p = prepare("eagle_get_self_hidden_states", locals())
    return _gather(op, load().eagle_get_self_hidden_states_plan, p, input)


def mtp_step_paddle(
    base_model_stop_flags,
    stop_flags,
    batch_drop,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    block_tables,
    encoder_block_lens,
    used_list_len,
    free_list,
    free_list_len,
    block_size,
    max_draft_tokens,
):
    """fd_mtp.ops.mtp_step_paddle on CuPy arrays."""
    op, _, dims, p = prepare("mtp_step_paddle", locals())
    if free_list.ndim != 1:  # as custom_ops/paddle/mtp_step.cc
        _fail(op.name, "free_list", f"must have shape [F] (1-D), got {list(free_list.shape)}")
    need_list = _cupy().empty(max(dims["B"], 1), dtype=np.int32)  # the kernel's workspace [bsz]
    p.need_list = _ptr(need_list)
    status = _scratch()
    raise_status(op, load().mtp_step(p, _ptr(status), _stream()))
