"""fd_mtp.cuda versions of the n-gram drafting ops (spec §5.17 ngram_match, §6.7 hybrid_mtp_ngram).

``ngram_match`` / ``hybrid_mtp_ngram`` run the CUDA kernels on CuPy arrays (no host copies of the
token rows). ``ngram_match_host`` / ``hybrid_mtp_ngram_host`` run the same C++ CPU driver as the
Paddle op's CPU branch on numpy arrays, through the fd_mtp_cuda module: the CPU op where paddle
is absent (the GPU test machine), used to compare and time both paths.
"""
from __future__ import annotations

import numpy as np

from ._common import _check_status, _cupy, _fail, _ptr, _scratch, _stream, load
from ..ops.ngram import (
    HYBRID_THRESHOLD_DEFAULT,
    HYBRID_THRESHOLD_ENV,
    NGRAM_THRESHOLD_DEFAULT,
    NGRAM_THRESHOLD_ENV,
    resolve_threshold,
)

# code -> (argument, description), as kNgramStatusInfo in custom_ops/paddle/ngram.cc.
_STATUS = {
    1: ("input_ids_len", "is {value}; it must be in [0, {limit}] (the columns of input_ids)"),
    2: ("step_idx", "is {value}; the query ends at pre_ids[step_idx] but the row has {limit} columns"),
    3: ("draft_tokens", "row needs {value} columns for the drafts this request may receive but has {limit}"),
    4: ("seq_lens_this_time", "is {value} for a request that drafts; it must be >= 1"),
}


class _Checker:
    """Shape/dtype checks mirroring custom_ops/paddle/check.h for device (CuPy) or host (numpy)
    arrays; `addr` gives an array's address."""

    def __init__(self, op, device):
        self.op = op
        self.kind = _cupy().ndarray if device else np.ndarray
        self.addr = _ptr if device else (lambda a: a.ctypes.data)

    def dtype(self, arg, a, dt):
        if not isinstance(a, self.kind):
            _fail(self.op, arg, f"must be a {self.kind.__module__}.ndarray, got {type(a).__name__}")
        if not a.flags.c_contiguous:
            _fail(self.op, arg, "must be C-contiguous")
        if a.dtype != np.dtype(dt):
            _fail(self.op, arg, f"must be {np.dtype(dt)}, got {a.dtype}")

    def per_request(self, arg, a, dt, bsz):
        self.dtype(arg, a, dt)
        s = a.shape
        if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
            _fail(self.op, arg, f"must have shape [bsz] or [bsz, 1], got {list(s)}")
        if s[0] < bsz:
            _fail(self.op, arg, f"has {s[0]} entries but the batch has {bsz} requests "
                  "(bsz is taken from seq_lens_this_time)")
        return s[0]

    def matrix(self, arg, a, dt, bsz):
        self.dtype(arg, a, dt)
        s = a.shape
        if len(s) != 2:
            _fail(self.op, arg, f"must be 2-D, got shape {list(s)}")
        if s[0] < bsz:
            _fail(self.op, arg, f"has {s[0]} rows but the batch has {bsz} requests")
        if s[1] < 1:
            _fail(self.op, arg, f"needs at least 1 columns, got shape {list(s)}")
        return s[1]


def _params(op, device, hybrid, input_ids, input_ids_len, pre_ids, step_idx, draft_token_num,
            draft_tokens, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len,
            max_ngram_size, min_ngram_size, max_draft_tokens, threshold):
    m = load()
    c = _Checker(op, device)
    bsz = c.per_request("seq_lens_this_time", seq_lens_this_time, np.int32, 0)
    p = m.NgramParams()
    if not hybrid:
        c.per_request("draft_token_num", draft_token_num, np.int32, bsz)
        c.per_request("seq_lens_encoder", seq_lens_encoder, np.int32, bsz)
        p.draft_token_num = c.addr(draft_token_num)
        p.seq_lens_encoder = c.addr(seq_lens_encoder)
    p.input_ids_cols = c.matrix("input_ids", input_ids, np.int64, bsz)
    c.per_request("input_ids_len", input_ids_len, np.int64, bsz)
    p.pre_ids_cols = c.matrix("pre_ids", pre_ids, np.int64, bsz)
    c.per_request("step_idx", step_idx, np.int64, bsz)
    p.draft_tokens_cols = c.matrix("draft_tokens", draft_tokens, np.int64, bsz)
    c.per_request("seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    c.per_request("max_dec_len", max_dec_len, np.int64, bsz)
    max_ngram_size, min_ngram_size = int(max_ngram_size), int(min_ngram_size)
    if max_ngram_size < 1:
        _fail(op, "max_ngram_size", f"must be >= 1, got {max_ngram_size}")
    if min_ngram_size < 1:
        _fail(op, "min_ngram_size", f"must be >= 1, got {min_ngram_size}")
    if min_ngram_size > max_ngram_size:
        _fail(op, "min_ngram_size", f"must be <= max_ngram_size ({max_ngram_size}), got {min_ngram_size}")
    p.input_ids = c.addr(input_ids)
    p.input_ids_len = c.addr(input_ids_len)
    p.pre_ids = c.addr(pre_ids)
    p.step_idx = c.addr(step_idx)
    p.draft_tokens = c.addr(draft_tokens)
    p.seq_lens_this_time = c.addr(seq_lens_this_time)
    p.seq_lens_decoder = c.addr(seq_lens_decoder)
    p.max_dec_len = c.addr(max_dec_len)
    p.bsz = bsz
    p.max_ngram_size = max_ngram_size
    p.min_ngram_size = min_ngram_size
    p.max_draft_tokens = int(max_draft_tokens)
    p.threshold = threshold
    p.hybrid = hybrid
    return m, p


def _run_device(op, m, p):
    cp = _cupy()
    hits = cp.empty(max(p.bsz, 1), dtype=cp.int64)
    status = _scratch()
    _check_status(op, m.ngram(p, _ptr(hits), _ptr(status), _stream()), _STATUS)


def ngram_match(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
                seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len, max_ngram_size,
                max_draft_tokens, *, threshold=None):
    """fd_mtp.ops.ngram_match on CuPy arrays (CUDA kernels)."""
    op = "ngram_match"
    threshold = resolve_threshold(op, threshold, NGRAM_THRESHOLD_ENV, NGRAM_THRESHOLD_DEFAULT)
    m, p = _params(op, True, False, input_ids, input_ids_len, pre_ids, step_idx, draft_token_num,
                   draft_tokens, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len,
                   max_ngram_size, 1, max_draft_tokens, threshold)
    _run_device(op, m, p)


def hybrid_mtp_ngram(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
                     seq_lens_this_time, seq_lens_decoder, max_dec_len, max_ngram_size, min_ngram_size,
                     max_draft_tokens, *, threshold=None):
    """fd_mtp.ops.hybrid_mtp_ngram on CuPy arrays (CUDA kernels); draft_token_num is unused."""
    op = "hybrid_mtp_ngram"
    threshold = resolve_threshold(op, threshold, HYBRID_THRESHOLD_ENV, HYBRID_THRESHOLD_DEFAULT)
    m, p = _params(op, True, True, input_ids, input_ids_len, pre_ids, step_idx, None, draft_tokens,
                   seq_lens_this_time, None, seq_lens_decoder, max_dec_len, max_ngram_size,
                   min_ngram_size, max_draft_tokens, threshold)
    _run_device(op, m, p)


def ngram_match_host(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
                     seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len, max_ngram_size,
                     max_draft_tokens, *, threshold=None):
    """The Paddle op's CPU driver on numpy arrays (no paddle needed)."""
    op = "ngram_match"
    threshold = resolve_threshold(op, threshold, NGRAM_THRESHOLD_ENV, NGRAM_THRESHOLD_DEFAULT)
    m, p = _params(op, False, False, input_ids, input_ids_len, pre_ids, step_idx, draft_token_num,
                   draft_tokens, seq_lens_this_time, seq_lens_encoder, seq_lens_decoder, max_dec_len,
                   max_ngram_size, 1, max_draft_tokens, threshold)
    _check_status(op, m.ngram_host(p), _STATUS)


def hybrid_mtp_ngram_host(input_ids, input_ids_len, pre_ids, step_idx, draft_token_num, draft_tokens,
                          seq_lens_this_time, seq_lens_decoder, max_dec_len, max_ngram_size,
                          min_ngram_size, max_draft_tokens, *, threshold=None):
    """The Paddle op's CPU driver on numpy arrays (no paddle needed)."""
    op = "hybrid_mtp_ngram"
    threshold = resolve_threshold(op, threshold, HYBRID_THRESHOLD_ENV, HYBRID_THRESHOLD_DEFAULT)
    m, p = _params(op, False, True, input_ids, input_ids_len, pre_ids, step_idx, None, draft_tokens,
                   seq_lens_this_time, None, seq_lens_decoder, max_dec_len, max_ngram_size,
                   min_ngram_size, max_draft_tokens, threshold)
    _check_status(op, m.ngram_host(p), _STATUS)
