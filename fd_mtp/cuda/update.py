"""fd_mtp.cuda versions of the target-side update ops (spec §5.8, §5.10, §5.12, §5.16)."""

from __future__ import annotations

import numpy as np

from ._common import (
    _cupy,
    _ptr,
    _scratch,
    _set_flag,
    _stream,
    load,
    prepare,
    raise_status,
)


def _host_readable(values, name="stop_nums"):
    """``values`` with the one-element array ``name``, which the op reads on the host, as a CuPy
    array: it may be a host numpy array too (the old contract), and is then checked as the
    binding checks it (int64, one element)."""
    x = values[name]
    if isinstance(x, np.ndarray):
        values = dict(values)
        values[name] = _cupy().asarray(x)
    return values


def _host_value(x):
    """The value of a one-element numpy or CuPy array, read on the host."""
    return int(_cupy().asnumpy(x).reshape(-1)[0])


def speculate_set_stop_value_multi_seqs(
    accept_tokens,
    accept_num,
    pre_ids,
    step_idx,
    stop_flags,
    seq_lens,
    stop_seqs,
    stop_seqs_len,
    end_ids,
):
    """fd_mtp.ops.speculate_set_stop_value_multi_seqs on CuPy arrays (seq_lens unused)."""
    op, _, _, p = prepare("speculate_set_stop_value_multi_seqs", locals())
    status = _scratch()
    raise_status(op, load().speculate_set_stop_value_multi_seqs(p, _ptr(status), _stream()))


def speculate_update(
    seq_lens_encoder,
    seq_lens_decoder,
    not_need_stop,
    draft_tokens,
    actual_draft_token_nums,
    accept_tokens,
    accept_num,
    stop_flags,
    seq_lens_this_time,
    is_block_step,
    stop_nums,
    mask_rollback,
):
    """fd_mtp.ops.speculate_update on CuPy arrays (not_need_stop: host numpy [1] bool; stop_nums:
    one int64 element, CuPy or numpy, read on the host)."""
    op, _, _, p = prepare("speculate_update", _host_readable(locals()))
    stop_num = _host_value(stop_nums)
    status, counter = _scratch(), _scratch(1)
    st, stopped = load().speculate_update(p, _ptr(status), _ptr(counter), _stream())
    raise_status(op, st)
    _set_flag(not_need_stop, stopped < stop_num)


def speculate_set_value_by_flags_and_idx(
    pre_ids_all,
    accept_tokens,
    accept_num,
    stop_flags,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    step_idx,
):
    """fd_mtp.ops.speculate_set_value_by_flags_and_idx on CuPy arrays."""
    op, _, _, p = prepare("speculate_set_value_by_flags_and_idx", locals())
    status = _scratch()
    raise_status(op, load().speculate_set_value_by_flags_and_idx(p, _ptr(status), _stream()))


def speculate_clear_accept_nums(accept_num, seq_lens_decoder):
    """fd_mtp.ops.speculate_clear_accept_nums on CuPy arrays."""
    _, _, _, p = prepare("speculate_clear_accept_nums", locals())
    load().speculate_clear_accept_nums(p, _stream())
