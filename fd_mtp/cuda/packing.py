"""fd_mtp.cuda versions of the packed-layout ops (spec §5.1-§5.4) on CuPy arrays."""
from __future__ import annotations

import numpy as np

from ._common import _check_status, _cupy, _device_array, _dtype, _fail, _matrix, _ptr, _scratch, _stream, load

# Status tables: code -> (argument, description), as in the Paddle bindings' kStatus tables.
_PADDING_STATUS = {
    1: ("seq_len", "is {value}; token counts must be >= {limit}"),
    2: ("seq_len", "is {value} for a prefilling request but its input_ids row has {limit} columns"),
    3: ("seq_len", "is {value} for a decoding request but its draft_tokens row has {limit} columns"),
    4: ("cum_offsets", "is {value}; it must be the inclusive prefix sum of input_ids.shape[1] - seq_len, {limit}"),
    5: ("token_num", "is {value} but seq_len sums to {limit}"),
}
_OUTPUT_STATUS = {
    1: ("seq_lens_output", "is {value}; row counts must be >= {limit}"),
    2: ("seq_lens_output", "is {value}; it must be <= max_seq_len = {limit}"),
    3: ("output_cum_offsets_tmp",
        "is {value}; it must be the inclusive prefix sum of max_seq_len - seq_lens_output, {limit}"),
    4: ("out_token_num", "is {value} but seq_lens_output sums to {limit}"),
}
_REBUILD_STATUS = {
    1: ("output_padding_offset", "maps an output row to request {value} but the batch has {limit} requests "
        "(check max_input_length: it must be the width the offsets were built with)"),
    2: ("cu_seqlens_q", "with seq_lens_encoder selects tmp_out row {value} but tmp_out has {limit} rows"),
}
_INT32_MAX = np.iinfo(np.int32).max
_HIDDEN_DTYPES = ("float32", "float16", "bfloat16", "uint16")  # uint16: bfloat16 bits


def _host_count(op, arg, value):
    """A token count (int, numpy or CuPy one-element integer array), read on the host."""
    if isinstance(value, (int, np.integer)):
        v = int(value)
    else:
        cp = _cupy()
        a = cp.asnumpy(value) if isinstance(value, cp.ndarray) else np.asarray(value)
        if a.size != 1 or a.dtype not in (np.int64, np.int32):
            _fail(op, arg, f"must hold exactly one int64 or int32 element, got {a.dtype}{list(a.shape)}")
        v = int(a.reshape(-1)[0])
    if not 0 <= v <= _INT32_MAX:
        _fail(op, arg, f"is {v}; it must be in [0, {_INT32_MAX}]")
    return v


def _per_request_of(op, arg, a, dt, bsz, bsz_arg):
    """_per_request whose message names where bsz comes from."""
    _dtype(op, arg, a, dt)
    s = a.shape
    if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
        _fail(op, arg, f"must have shape [bsz] or [bsz, 1], got {list(s)}")
    if s[0] < bsz:
        _fail(op, arg, f"has {s[0]} entries but the batch has {bsz} requests (bsz is taken from {bsz_arg})")
    return s[0]


def speculate_get_padding_offset(input_ids, draft_tokens, cum_offsets, token_num, seq_len, seq_lens_encoder):
    """fd_mtp.ops.speculate_get_padding_offset on CuPy arrays (token_num: int or one-element array).
    Returns [x_remove_padding, batch_id_per_token, cu_seqlens_q, cu_seqlens_k] as new CuPy arrays."""
    op = "speculate_get_padding_offset"
    cp = _cupy()
    m = load()
    bsz = _per_request_of(op, "seq_len", seq_len, np.int32, 0, "seq_len")
    l_in = _matrix(op, "input_ids", input_ids, np.int64, bsz, 0)
    kd = _matrix(op, "draft_tokens", draft_tokens, np.int64, bsz, 0)
    _per_request_of(op, "cum_offsets", cum_offsets, np.int32, bsz, "seq_len")
    _per_request_of(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz, "seq_len")
    t = _host_count(op, "token_num", token_num)

    x = cp.empty(t, dtype=cp.int64)
    batch_id = cp.empty(t, dtype=cp.int32)
    cu_q = cp.empty(bsz + 1, dtype=cp.int32)
    cu_k = cp.empty(bsz + 1, dtype=cp.int32)
    p = m.PaddingOffsetParams()
    p.input_ids = _ptr(input_ids)
    p.input_ids_cols = l_in
    p.draft_tokens = _ptr(draft_tokens)
    p.draft_tokens_cols = kd
    p.cum_offsets = _ptr(cum_offsets)
    p.seq_len = _ptr(seq_len)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.bsz = bsz
    p.token_num = t
    p.x_remove_padding = _ptr(x)
    p.batch_id_per_token = _ptr(batch_id)
    p.cu_seqlens_q = _ptr(cu_q)
    p.cu_seqlens_k = _ptr(cu_k)
    status, total = _scratch(), _scratch(1)
    st = m.speculate_get_padding_offset(p, _ptr(status), _ptr(total), _stream())
    _check_status(op, st, _PADDING_STATUS)
    return [x, batch_id, cu_q, cu_k]


def speculate_get_seq_lens_output(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder):
    """fd_mtp.ops.speculate_get_seq_lens_output on CuPy arrays; returns a new [bsz] int32 array."""
    op = "speculate_get_seq_lens_output"
    cp = _cupy()
    m = load()
    src = "seq_lens_this_time"
    bsz = _per_request_of(op, src, seq_lens_this_time, np.int32, 0, src)
    _per_request_of(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz, src)
    _per_request_of(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz, src)
    out = cp.empty(bsz, dtype=cp.int32)
    p = m.SeqLensOutputParams()
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.seq_lens_output = _ptr(out)
    p.bsz = bsz
    m.speculate_get_seq_lens_output(p, _stream())
    return out


def speculate_get_output_padding_offset(output_cum_offsets_tmp, out_token_num, seq_lens_output, max_seq_len):
    """fd_mtp.ops.speculate_get_output_padding_offset on CuPy arrays.
    Returns [output_padding_offset, output_cum_offsets] as new CuPy arrays."""
    op = "speculate_get_output_padding_offset"
    cp = _cupy()
    m = load()
    src = "output_cum_offsets_tmp"
    bsz = _per_request_of(op, src, output_cum_offsets_tmp, np.int32, 0, src)
    _per_request_of(op, "seq_lens_output", seq_lens_output, np.int32, bsz, src)
    max_seq_len = int(max_seq_len)
    if max_seq_len < 1:
        _fail(op, "max_seq_len", f"must be >= 1, got {max_seq_len}")
    to = _host_count(op, "out_token_num", out_token_num)
    padding = cp.empty(to, dtype=cp.int32)
    cum = cp.empty(bsz, dtype=cp.int32)
    p = m.OutputPaddingOffsetParams()
    p.output_cum_offsets_tmp = _ptr(output_cum_offsets_tmp)
    p.seq_lens_output = _ptr(seq_lens_output)
    p.bsz = bsz
    p.max_seq_len = max_seq_len
    p.out_token_num = to
    p.output_padding_offset = _ptr(padding)
    p.output_cum_offsets = _ptr(cum)
    status, total = _scratch(), _scratch(1)
    st = m.speculate_get_output_padding_offset(p, _ptr(status), _ptr(total), _stream())
    _check_status(op, st, _OUTPUT_STATUS)
    return [padding, cum]


def pre_process(input_ids, seq_lens_this_time, speculative_decoding, draft_tokens=None, seq_lens_encoder=None,
                seq_lens_decoder=None):
    """fd_mtp.ops.pre_process on CuPy arrays (the same glue: cumsums on the device, counts read on the host)."""
    cp = _cupy()
    _dtype("pre_process", "seq_lens_this_time", seq_lens_this_time, np.int32)
    max_len = input_ids.shape[1]
    token_num = int(seq_lens_this_time.sum(dtype=cp.int64))
    cum_offsets_now = cp.cumsum(max_len - seq_lens_this_time.reshape(-1), dtype=cp.int32)
    if not speculative_decoding:
        ids, batch_id, cu_q, cu_k = speculate_get_padding_offset(
            input_ids, input_ids, cum_offsets_now, token_num, seq_lens_this_time, seq_lens_this_time)
        return ids, batch_id, cu_q, cu_k, None, None
    for name, value in (("draft_tokens", draft_tokens), ("seq_lens_encoder", seq_lens_encoder),
                        ("seq_lens_decoder", seq_lens_decoder)):
        if value is None:
            _fail("pre_process", name, "is required when speculative_decoding is True")
    ids, batch_id, cu_q, cu_k = speculate_get_padding_offset(
        input_ids, draft_tokens, cum_offsets_now, token_num, seq_lens_this_time, seq_lens_encoder)
    seq_lens_output = speculate_get_seq_lens_output(seq_lens_this_time, seq_lens_encoder, seq_lens_decoder)
    out_token_num = int(seq_lens_output.sum(dtype=cp.int64))
    out_cum_tmp = cp.cumsum(max_len - seq_lens_output, dtype=cp.int32)
    padding, out_cum = speculate_get_output_padding_offset(out_cum_tmp, out_token_num, seq_lens_output, max_len)
    return ids, batch_id, cu_q, cu_k, out_cum, padding


def rebuild_padding(tmp_out, cu_seqlens_q, seq_len_this_time, seq_lens_decoder, seq_lens_encoder,
                    output_padding_offset, first_token_out, max_input_length, enable_logprob):
    """fd_mtp.ops.rebuild_padding on CuPy arrays (bfloat16 as uint16 bits); returns a new CuPy array."""
    op = "rebuild_padding"
    cp = _cupy()
    m = load()
    _device_array(op, "tmp_out", tmp_out)
    if tmp_out.dtype.name not in _HIDDEN_DTYPES:
        _fail(op, "tmp_out", f"must be float32, float16 or bfloat16 (uint16 bits), got {tmp_out.dtype}")
    if tmp_out.ndim != 2:
        _fail(op, "tmp_out", f"must be 2-D [tokens, hidden], got shape {list(tmp_out.shape)}")
    _dtype(op, "cu_seqlens_q", cu_seqlens_q, np.int32)
    if cu_seqlens_q.ndim != 1 or cu_seqlens_q.shape[0] < 1:
        _fail(op, "cu_seqlens_q", f"must have shape [bsz + 1], got {list(cu_seqlens_q.shape)}")
    bsz = cu_seqlens_q.shape[0] - 1
    src = "cu_seqlens_q"
    _per_request_of(op, "seq_len_this_time", seq_len_this_time, np.int32, bsz, src)
    _per_request_of(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz, src)
    _per_request_of(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz, src)
    rows, hidden = tmp_out.shape
    out_rows = bsz
    max_input_length = int(max_input_length)
    if output_padding_offset is not None:
        _dtype(op, "output_padding_offset", output_padding_offset, np.int32)
        if max_input_length < 1:
            _fail(op, "max_input_length", f"must be >= 1, got {max_input_length}")
        enc = cp.asnumpy(seq_lens_encoder).reshape(-1)[:bsz].astype(np.int64)
        out_rows = rows - int(np.sum(np.where(enc > 0, enc - 1, 0)))
        if out_rows < 0:
            _fail(op, "seq_lens_encoder", f"sums to more prefill tokens than tmp_out has rows ({rows}): "
                  f"the output would have {out_rows} rows")
        if output_padding_offset.size < out_rows:
            _fail(op, "output_padding_offset", f"has {output_padding_offset.size} entries but the output has "
                  f"R = {out_rows} rows")
    out = cp.empty((out_rows, hidden), dtype=tmp_out.dtype)
    p = m.RebuildPaddingParams()
    p.tmp_out = _ptr(tmp_out)
    p.tmp_rows = rows
    p.row_bytes = hidden * tmp_out.itemsize
    p.cu_seqlens_q = _ptr(cu_seqlens_q)
    p.seq_len_this_time = _ptr(seq_len_this_time)
    p.seq_lens_decoder = _ptr(seq_lens_decoder)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.output_padding_offset = 0 if output_padding_offset is None else _ptr(output_padding_offset)
    p.bsz = bsz
    p.max_input_length = max_input_length
    p.out_rows = out_rows
    p.out = _ptr(out)
    st = m.rebuild_padding(p, _ptr(_scratch()), _stream())
    _check_status(op, st, _REBUILD_STATUS)
    return out
