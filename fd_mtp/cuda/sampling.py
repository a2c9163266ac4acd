"""fd_mtp.cuda versions of the target-side sampling ops (spec §5.5, §5.6).

Float arrays are CuPy float32 / float16 arrays, or uint16 arrays holding bfloat16 bit patterns
(as in fd_mtp.reference).
"""
from __future__ import annotations

import numpy as np

from ._common import _check_status, _cupy, _device_array, _dtype, _fail, _matrix, _per_request, _ptr, _scratch, _stream, load

_FLOAT_KINDS = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.uint16): 2}
_CANDIDATE_LENS = frozenset(list(range(1, 11)) + list(range(20, 101, 10)))

# Status tables: code -> (argument, description), as in the Paddle bindings' kStatus.
_PENALTY_STATUS = {
    1: ("eos_token_id", "holds id {value}; ids must be in [0, vocab) = [0, {limit})"),
    2: ("pre_ids", "holds id {value} among the counted ids; ids must be < vocab = {limit}"),
    3: ("output_padding_offset", "gives logits row {value} the offset {limit}: a negative position"),
}
_TOP_P_STATUS = {
    1: ("output_padding_offset", "gives probs row {value} the offset {limit}: a negative position"),
    2: ("output_padding_offset", "maps a probs row to request {value} but top_p has {limit} entries"),
}


def _float_matrix(op, arg, a):
    _device_array(op, arg, a)
    if a.dtype not in _FLOAT_KINDS:
        _fail(op, arg, f"must be float32, float16 or bfloat16 (uint16 bits), got {a.dtype}")
    if a.ndim != 2:
        _fail(op, arg, f"must be 2-D [tokens, vocab], got shape {list(a.shape)}")
    return _FLOAT_KINDS[a.dtype]


def _per_row(op, arg, a, dt, rows, what):
    _dtype(op, arg, a, dt)
    s = a.shape
    if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
        _fail(op, arg, f"must have shape [n] or [n, 1], got {list(s)}")
    if s[0] < rows:
        _fail(op, arg, f"has {s[0]} entries but {what} has {rows} rows")


def speculate_get_token_penalty_multi_scores(
    pre_ids, logits, penalty_scores, frequency_scores, presence_scores, temperatures, bad_tokens,
    cur_len, min_len, eos_token_id, seq_lens_this_time, output_padding_offset, output_cum_offsets,
    max_seq_len,
):
    """fd_mtp.ops.speculate_get_token_penalty_multi_scores on CuPy arrays; returns ``logits``."""
    op = "speculate_get_token_penalty_multi_scores"
    cp = _cupy()
    m = load()
    kind = _float_matrix(op, "logits", logits)
    rows, vocab = logits.shape
    if vocab < 1:
        _fail(op, "logits", f"must have at least one column, got shape {list(logits.shape)}")
    bs = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    pre_cols = _matrix(op, "pre_ids", pre_ids, np.int64, bs)
    for name, a in (("penalty_scores", penalty_scores), ("frequency_scores", frequency_scores),
                    ("presence_scores", presence_scores)):
        _per_request(op, name, a, logits.dtype, bs)
    _per_request(op, "temperatures", temperatures, np.float32, bs)
    _dtype(op, "bad_tokens", bad_tokens, np.int64)
    if bad_tokens.ndim not in (1, 2):
        _fail(op, "bad_tokens", f"must be [Lb] or [rows, Lb], got shape {list(bad_tokens.shape)}")
    num_bad = 0 if bad_tokens.size == 0 else bad_tokens.shape[-1]
    _per_request(op, "cur_len", cur_len, np.int64, bs)
    _per_request(op, "min_len", min_len, np.int64, bs)
    _dtype(op, "eos_token_id", eos_token_id, np.int64)
    s = eos_token_id.shape
    if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
        _fail(op, "eos_token_id", f"must have shape [E] or [E, 1], got {list(s)}")
    _per_row(op, "output_padding_offset", output_padding_offset, np.int32, rows, "logits")
    _per_request(op, "output_cum_offsets", output_cum_offsets, np.int32, bs)
    max_seq_len = int(max_seq_len)
    if max_seq_len < 1:
        _fail(op, "max_seq_len", f"must be >= 1, got {max_seq_len}")
    if rows == 0:
        return logits
    p = m.TokenPenaltyParams()
    p.pre_ids = _ptr(pre_ids)
    p.pre_ids_cols = pre_cols
    p.logits = _ptr(logits)
    p.rows = rows
    p.vocab = vocab
    p.float_kind = kind
    p.penalty_scores = _ptr(penalty_scores)
    p.frequency_scores = _ptr(frequency_scores)
    p.presence_scores = _ptr(presence_scores)
    p.temperatures = _ptr(temperatures)
    p.bad_tokens = _ptr(bad_tokens)
    p.num_bad_tokens = num_bad
    p.cur_len = _ptr(cur_len)
    p.min_len = _ptr(min_len)
    p.eos_token_id = _ptr(eos_token_id)
    p.num_eos = eos_token_id.size
    p.output_padding_offset = _ptr(output_padding_offset)
    p.output_cum_offsets = _ptr(output_cum_offsets)
    p.bs = bs
    p.max_seq_len = max_seq_len
    ws_rows = m.token_penalty_workspace_rows(rows)
    workspace = cp.zeros((ws_rows, vocab), dtype=cp.int32)
    status = _scratch()
    _check_status(op, m.token_penalty(p, _ptr(workspace), ws_rows, _ptr(status), _stream()),
                  _PENALTY_STATUS)
    return logits


def top_p_candidates(probs, top_p, output_padding_offset, candidates_len, max_seq_len):
    """fd_mtp.ops.top_p_candidates on CuPy arrays; returns [scores, tokens, lens] (new arrays)."""
    op = "top_p_candidates"
    cp = _cupy()
    m = load()
    kind = _float_matrix(op, "probs", probs)
    rows, vocab = probs.shape
    bs = _per_request(op, "top_p", top_p, probs.dtype, 0)
    _per_row(op, "output_padding_offset", output_padding_offset, np.int32, rows, "probs")
    c = int(candidates_len)
    if c not in _CANDIDATE_LENS:
        _fail(op, "candidates_len", f"must be 1..10 or a multiple of 10 up to 100, got {c}")
    if c > vocab:
        _fail(op, "candidates_len", f"is {c} but probs has only {vocab} columns")
    max_seq_len = int(max_seq_len)
    if max_seq_len < 1:
        _fail(op, "max_seq_len", f"must be >= 1, got {max_seq_len}")
    scores = cp.zeros((rows, c), dtype=probs.dtype)
    tokens = cp.zeros((rows, c), dtype=cp.int64)
    lens = cp.zeros(rows, dtype=cp.int32)
    if rows == 0:
        return [scores, tokens, lens]
    p = m.TopPCandidatesParams()
    p.probs = _ptr(probs)
    p.rows = rows
    p.vocab = vocab
    p.float_kind = kind
    p.top_p = _ptr(top_p)
    p.bs = bs
    p.output_padding_offset = _ptr(output_padding_offset)
    p.candidates = c
    p.max_seq_len = max_seq_len
    p.verify_scores = _ptr(scores)
    p.verify_tokens = _ptr(tokens)
    p.actual_candidate_lens = _ptr(lens)
    status = _scratch()
    _check_status(op, m.top_p_candidates(p, _ptr(status), _stream()), _TOP_P_STATUS)
    return [scores, tokens, lens]
