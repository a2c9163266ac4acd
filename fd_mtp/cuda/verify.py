"""fd_mtp.cuda version of the target-side verify op (spec §5.7) and the device Philox generator."""
from __future__ import annotations

import numpy as np

from .._verify_options import STRATEGIES, resolve_verify_options
from ._common import _check_status, _cupy, _dtype, _fail, _matrix, _per_request, _ptr, _scratch, _stream, load

__all__ = ["speculate_verify", "philox4x32_10"]

# Status table: code -> (argument, description), as in custom_ops/paddle/speculate_verify.cc.
_VERIFY_STATUS = {
    1: ("draft_tokens", "the request verifies {value} tokens (seq_lens_this_time) but the row has {limit} columns"),
    2: ("accept_tokens", "the request may accept {value} tokens (seq_lens_this_time) but the row has {limit} columns"),
    3: ("output_cum_offsets", "gives first output row {value}; it must be >= {limit}"),
    4: ("verify_tokens", "row {value} is read but there are {limit} rows (check output_cum_offsets, "
        "seq_lens_this_time and max_seq_len)"),
    5: ("verify_scores", "row {value} is read but there are {limit} rows"),
    6: ("actual_candidate_len", "row {value} is read but there are {limit} rows"),
    7: ("sampled_token_ids", "row {value} is read but there are {limit} rows"),
    8: ("target_probs", "row {value} is read but there are {limit} rows"),
    9: ("draft_probs", "row {value} is read but there are {limit} rows"),
    10: ("draft_tokens", "holds token id {value}, outside the vocabulary [0, {limit}) of target_probs"),
}

_counter = 0


def _rows_of(op, arg, a, dt, cols):
    _dtype(op, arg, a, dt)
    if a.ndim != 2:
        _fail(op, arg, f"must be 2-D, got shape {list(a.shape)}")
    if cols is None and a.shape[1] < 1:
        _fail(op, arg, f"needs at least 1 column, got shape {list(a.shape)}")
    if cols is not None and a.shape[1] != cols:
        _fail(op, arg, f"must have {cols} columns, got shape {list(a.shape)}")
    return a.shape[0]


def speculate_verify(
    sampled_token_ids, accept_tokens, accept_num, step_idx, stop_flags, seq_lens_encoder,
    seq_lens_decoder, draft_tokens, seq_lens_this_time, verify_tokens, verify_scores, max_dec_len,
    end_tokens, is_block_step, output_cum_offsets, actual_candidate_len, actual_draft_token_nums,
    topp, max_seq_len, verify_window, enable_topp, benchmark_mode, accept_all_drafts, *,
    seed=None, offset=None, verify_strategy=None, prefill_one_step_stop=None, target_probs=None,
    draft_probs=None,
):
    """fd_mtp.ops.speculate_verify on CuPy arrays (own default seed/offset counter)."""
    global _counter
    op = "speculate_verify"
    m = load()
    strategy, one_step_stop, seed, offset = resolve_verify_options(
        verify_strategy, prefill_one_step_stop, seed, offset, _counter
    )
    _counter += 1
    max_seq_len, verify_window = int(max_seq_len), int(verify_window)
    bsz = _per_request(op, "seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    sampled_rows = _per_request(op, "sampled_token_ids", sampled_token_ids, np.int64, 0)
    accept_cols = _matrix(op, "accept_tokens", accept_tokens, np.int64, bsz)
    _per_request(op, "accept_num", accept_num, np.int32, bsz)
    _per_request(op, "step_idx", step_idx, np.int64, bsz)
    _per_request(op, "stop_flags", stop_flags, np.bool_, bsz)
    _per_request(op, "seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
    _per_request(op, "seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    draft_cols = _matrix(op, "draft_tokens", draft_tokens, np.int64, bsz)
    verify_rows = _rows_of(op, "verify_tokens", verify_tokens, np.int64, None)
    C = verify_tokens.shape[1]
    score_rows = _rows_of(op, "verify_scores", verify_scores, np.float32, C)
    _per_request(op, "max_dec_len", max_dec_len, np.int64, bsz)
    _dtype(op, "end_tokens", end_tokens, np.int64)
    if end_tokens.size < 1:
        _fail(op, "end_tokens", "must hold at least one token id")
    _per_request(op, "is_block_step", is_block_step, np.bool_, bsz)
    _per_request(op, "output_cum_offsets", output_cum_offsets, np.int32, bsz)
    cand_rows = _per_request(op, "actual_candidate_len", actual_candidate_len, np.int32, 0)
    _per_request(op, "actual_draft_token_nums", actual_draft_token_nums, np.int32, bsz)
    _per_request(op, "topp", topp, np.float32, bsz)
    if max_seq_len < 1:
        _fail(op, "max_seq_len", f"must be >= 1, got {max_seq_len}")
    if verify_window < 0:
        _fail(op, "verify_window", f"must be >= 0, got {verify_window}")
    rejection = strategy == STRATEGIES["rejection"]
    if rejection and target_probs is None:
        _fail(op, "target_probs", 'is required by the "rejection" strategy')

    p = m.SpeculateVerifyParams()
    p.sampled_token_ids = _ptr(sampled_token_ids)
    p.sampled_rows = sampled_rows
    p.accept_tokens = _ptr(accept_tokens)
    p.accept_cols = accept_cols
    p.accept_num = _ptr(accept_num)
    p.step_idx = _ptr(step_idx)
    p.stop_flags = _ptr(stop_flags)
    p.seq_lens_encoder = _ptr(seq_lens_encoder)
    p.draft_tokens = _ptr(draft_tokens)
    p.draft_cols = draft_cols
    p.seq_lens_this_time = _ptr(seq_lens_this_time)
    p.verify_tokens = _ptr(verify_tokens)
    p.verify_rows = verify_rows
    p.verify_scores = _ptr(verify_scores)
    p.score_rows = score_rows
    p.num_candidates = C
    p.max_dec_len = _ptr(max_dec_len)
    p.end_tokens = _ptr(end_tokens)
    p.num_end_tokens = end_tokens.size
    p.is_block_step = _ptr(is_block_step)
    p.output_cum_offsets = _ptr(output_cum_offsets)
    p.actual_candidate_len = _ptr(actual_candidate_len)
    p.candidate_len_rows = cand_rows
    p.topp = _ptr(topp)
    if rejection:
        p.target_rows = _rows_of(op, "target_probs", target_probs, np.float32, None)
        p.vocab = target_probs.shape[1]
        p.target_probs = _ptr(target_probs)
        if draft_probs is not None:
            p.draft_prob_rows = _rows_of(op, "draft_probs", draft_probs, np.float32, target_probs.shape[1])
            p.draft_probs = _ptr(draft_probs)
    p.bsz = bsz
    p.max_seq_len = max_seq_len
    p.verify_window = verify_window
    p.seed = seed
    p.offset = offset
    p.strategy = strategy
    p.enable_topp = bool(enable_topp)
    p.benchmark_mode = bool(benchmark_mode)
    p.accept_all_drafts = bool(accept_all_drafts)
    p.prefill_one_step_stop = one_step_stop
    status = _scratch()
    st = m.speculate_verify(p, _ptr(status), _stream())
    _check_status(op, st, _VERIFY_STATUS)


def philox4x32_10(counter, key):
    """Philox4x32-10 on the GPU: counter [n, 4] and key [n, 2] uint32 (host or device) -> [n, 4]
    uint32 host array (the device side of the Random123 known-answer test)."""
    cp = _cupy()
    m = load()
    inp = cp.ascontiguousarray(cp.concatenate([cp.asarray(counter, cp.uint32).reshape(-1, 4),
                                               cp.asarray(key, cp.uint32).reshape(-1, 2)], axis=1))
    out = cp.zeros((inp.shape[0], 4), dtype=cp.uint32)
    m.philox4x32_10(_ptr(inp), _ptr(out), inp.shape[0], _stream())
    return cp.asnumpy(out)
