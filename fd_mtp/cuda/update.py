"""fd_mtp.cuda versions of the target-side update ops (spec §5.8, §5.10, §5.12, §5.16)."""
from __future__ import annotations

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
_STOP_VALUE_STATUS = {
    1: ("accept_num", "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"),
    2: ("stop_seqs_len", "is {value}; it must be in [0, {limit}] (stop_seqs.shape[2])"),
    3: ("pre_ids", "column {value} (step_idx - accept_num) is compared but the row has {limit} columns"),
}
_UPDATE_STATUS = {
    1: ("accept_num", "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"),
}
_SET_VALUE_STATUS = {
    1: ("accept_num", "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"),
    2: ("pre_ids_all", "accepted tokens go to column {value} (from step_idx and accept_num) but the row "
        "has {limit} columns"),
}


def _per_request_from(op, arg, a, dt, bsz, bsz_arg):
    """Like _per_request, for ops whose batch size comes from `bsz_arg` (check.h per_request_from)."""
    _dtype(op, arg, a, dt)
    s = a.shape
    if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
        _fail(op, arg, f"must have shape [bsz] or [bsz, 1], got {list(s)}")
    if s[0] < bsz:
        _fail(op, arg, f"has {s[0]} entries but the batch has {bsz} requests (bsz is taken from {bsz_arg})")
    return s[0]


def speculate_set_stop_value_multi_seqs(
    accept_tokens, accept_num, pre_ids, step_idx, stop_flags, seq_lens, stop_seqs, stop_seqs_len, end_ids,
):
    """fd_mtp.ops.speculate_set_stop_value_multi_seqs on CuPy arrays (seq_lens unused)."""
    op = "speculate_set_stop_value_multi_seqs"
    m = load()
    _dtype(op, "accept_tokens", accept_tokens, np.int64)
    if accept_tokens.ndim != 2:
        _fail(op, "accept_tokens", f"must be 2-D, got shape {list(accept_tokens.shape)}")
    bs, acc_cols = accept_tokens.shape
    _per_request_from(op, "accept_num", accept_num, np.int32, bs, "accept_tokens")
    pre_cols = _matrix(op, "pre_ids", pre_ids, np.int64, bs)
    _per_request_from(op, "step_idx", step_idx, np.int64, bs, "accept_tokens")
    _per_request_from(op, "stop_flags", stop_flags, np.bool_, bs, "accept_tokens")
    _dtype(op, "stop_seqs", stop_seqs, np.int64)
    if stop_seqs.ndim != 3:
        _fail(op, "stop_seqs", f"must be 3-D [bs, S, Ls], got shape {list(stop_seqs.shape)}")
    if stop_seqs.shape[0] < bs:
        _fail(op, "stop_seqs", f"has {stop_seqs.shape[0]} rows but the batch has {bs} requests")
    num_seqs, seq_cols = stop_seqs.shape[1], stop_seqs.shape[2]
    if _matrix(op, "stop_seqs_len", stop_seqs_len, np.int32, bs, 0) != num_seqs:
        _fail(op, "stop_seqs_len", f"must have S = {num_seqs} columns (stop_seqs.shape[1]), "
              f"got shape {list(stop_seqs_len.shape)}")
    _dtype(op, "end_ids", end_ids, np.int64)
    if end_ids.size < 1:
        _fail(op, "end_ids", "must hold at least one token id")

    p = m.SetStopValueParams()
    p.accept_tokens = _ptr(accept_tokens)
    p.accept_tokens_cols = acc_cols
    p.accept_num = _ptr(accept_num)
    p.pre_ids = _ptr(pre_ids)
    p.pre_ids_cols = pre_cols
    p.step_idx = _ptr(step_idx)
    p.stop_flags = _ptr(stop_flags)
    p.stop_seqs = _ptr(stop_seqs)
    p.num_stop_seqs = num_seqs
    p.stop_seq_cols = seq_cols
    p.stop_seqs_len = _ptr(stop_seqs_len)
    p.end_ids = _ptr(end_ids)
    p.bs = bs
    status = _scratch()
    _check_status(op, m.speculate_set_stop_value_multi_seqs(p, _ptr(status), _stream()), _STOP_VALUE_STATUS)


def speculate_update(
    seq_lens_encoder, seq_lens_decoder, not_need_stop, draft_tokens, actual_draft_token_nums,
    accept_tokens, accept_num, stop_flags, seq_lens_this_time, is_block_step, stop_nums, mask_rollback,
):
    """fd_mtp.ops.speculate_update on CuPy arrays (not_need_stop: host numpy [1] bool; stop_nums:
    one int64 element, CuPy or numpy, read on the host)."""
    op = "speculate_update"
    m = load()
    cp = _cupy()
    real_bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, real_bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, real_bsz)
    _host_flag(op, "not_need_stop", not_need_stop)
    draft_cols = _matrix(op, "draft_tokens", draft_tokens, np.int64, real_bsz)
    _per_request(op, "actual_draft_token_nums", actual_draft_token_nums, np.int32, real_bsz)
    acc_cols = _matrix(op, "accept_tokens", accept_tokens, np.int64, real_bsz)
    _per_request(op, "accept_num", accept_num, np.int32, real_bsz)
    max_bsz = _per_request(op, "stop_flags", stop_flags, np.bool_, real_bsz)
    _per_request(op, "is_block_step", is_block_step, np.bool_, real_bsz)
    if not isinstance(stop_nums, (np.ndarray, cp.ndarray)) or stop_nums.dtype != np.int64 or stop_nums.size != 1:
        _fail(op, "stop_nums", "must be an int64 array holding exactly one element")
    _per_request(op, "mask_rollback", mask_rollback, np.int32, real_bsz)
    stop_num = int(stop_nums.reshape(-1)[0])

    p = m.SpeculateUpdateParams()
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.draft_tokens = _ptr(draft_tokens)
    p.draft_tokens_cols = draft_cols
    p.actual_draft_token_nums = _ptr(actual_draft_token_nums)
    p.accept_tokens = _ptr(accept_tokens)
    p.accept_tokens_cols = acc_cols
    p.accept_num = _ptr(accept_num)
    p.stop_flags = _ptr(stop_flags)
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.is_block_step = _ptr(is_block_step)
    p.mask_rollback = _ptr(mask_rollback)
    p.real_bsz = real_bsz
    p.max_bsz = max_bsz
    status, counter = _scratch(), _scratch(1)
    st, stopped = m.speculate_update(p, _ptr(status), _ptr(counter), _stream())
    _check_status(op, st, _UPDATE_STATUS)
    _set_flag(not_need_stop, stopped < stop_num)


def speculate_set_value_by_flags_and_idx(
    pre_ids_all, accept_tokens, accept_num, stop_flags, seq_lens_this_time, seq_lens_encoder,
    seq_lens_decoder, step_idx,
):
    """fd_mtp.ops.speculate_set_value_by_flags_and_idx on CuPy arrays."""
    op = "speculate_set_value_by_flags_and_idx"
    m = load()
    bs = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    pre_cols = _matrix(op, "pre_ids_all", pre_ids_all, np.int64, bs)
    acc_cols = _matrix(op, "accept_tokens", accept_tokens, np.int64, bs)
    _per_request(op, "accept_num", accept_num, np.int32, bs)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bs)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bs)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bs)
    _per_request(op, "step_idx", step_idx, np.int64, bs)

    p = m.SetValueByFlagsParams()
    p.pre_ids_all = _ptr(pre_ids_all)
    p.pre_ids_cols = pre_cols
    p.accept_tokens = _ptr(accept_tokens)
    p.accept_tokens_cols = acc_cols
    p.accept_num = _ptr(accept_num)
    p.stop_flags = _ptr(stop_flags)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.step_idx = _ptr(step_idx)
    p.bs = bs
    status = _scratch()
    _check_status(op, m.speculate_set_value_by_flags_and_idx(p, _ptr(status), _stream()), _SET_VALUE_STATUS)


def speculate_clear_accept_nums(accept_num, seq_lens_decoder):
    """fd_mtp.ops.speculate_clear_accept_nums on CuPy arrays."""
    op = "speculate_clear_accept_nums"
    m = load()
    bsz = _per_request_from(op, "seq_lens_decoder", seq_lens_decoder, np.int32, 0, "seq_lens_decoder")
    _per_request_from(op, "accept_num", accept_num, np.int32, bsz, "seq_lens_decoder")
    p = m.ClearAcceptNumsParams()
    p.accept_num = _ptr(accept_num)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.bsz = bsz
    m.speculate_clear_accept_nums(p, _stream())
