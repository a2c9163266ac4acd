"""fd_mtp.cuda versions of the target-side sampling ops (spec §5.5, §5.6).

Float arrays are CuPy float32 / float16 arrays, or uint16 arrays holding bfloat16 bit patterns
(as in fd_mtp.reference).
"""

from __future__ import annotations

import numpy as np

from ._common import (
    _cupy,
    _dtype,
    _fail,
    _ptr,
    _scratch,
    _stream,
    _workspace,
    load,
    prepare,
    raise_status,
)

__all__ = [
    "speculate_get_token_penalty_multi_scores",
    "top_p_candidates",
]


_FLOAT_KINDS = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.uint16): 2}
_CANDIDATE_LENS = frozenset(list(range(1, 11)) + list(range(20, 101, 10)))


def _same_dtype(op, arg, a, like):
    """``a`` has the dtype of ``like`` (the logits / probs); the schema only checks it is a float dtype."""
    if a.dtype != like.dtype:
        _fail(op, arg, f"must be {like.dtype}, got {a.dtype}")


def speculate_get_token_penalty_multi_scores(
    pre_ids,
    logits,
    penalty_scores,
    frequency_scores,
    presence_scores,
    temperatures,
    bad_tokens,
    cur_len,
    min_len,
    eos_token_id,
    seq_lens_this_time,
    output_padding_offset,
    output_cum_offsets,
    max_seq_len,
):
    """fd_mtp.ops.speculate_get_token_penalty_multi_scores on CuPy arrays; returns ``logits``."""
    op, _, dims, p = prepare("speculate_get_token_penalty_multi_scores", locals())
    name = op.name
    for arg, a in (
        ("penalty_scores", penalty_scores),
        ("frequency_scores", frequency_scores),
        ("presence_scores", presence_scores),
    ):
        _same_dtype(name, arg, a, logits)
    if bad_tokens.ndim not in (1, 2):
        _fail(name, "bad_tokens", f"must be [Lb] or [rows, Lb], got shape {list(bad_tokens.shape)}")
    p.logits = _ptr(logits)
    p.float_kind = _FLOAT_KINDS[logits.dtype]
    p.penalty_scores = _ptr(penalty_scores)
    p.frequency_scores = _ptr(frequency_scores)
    p.presence_scores = _ptr(presence_scores)
    p.num_bad_tokens = 0 if bad_tokens.size == 0 else bad_tokens.shape[-1]
    rows, vocab = dims["T"], dims["V"]
    if rows == 0:
        return logits
    m = load()
    ws_rows = m.token_penalty_workspace_rows(rows)
    workspace = _workspace("token_penalty", (ws_rows, vocab), np.int32)  # zero, left zero
    status = _scratch()
    raise_status(op, m.token_penalty(p, _ptr(workspace), ws_rows, _ptr(status), _stream()))
    return logits


def top_p_candidates(probs, top_p, output_padding_offset, candidates_len, max_seq_len, *, out=None):
    """fd_mtp.ops.top_p_candidates on CuPy arrays; returns [scores, tokens, lens] (new arrays).

    ``out`` (keyword, fd_mtp.cuda only): persistent [scores [T, C] probs dtype, tokens [T, C]
    int64, lens [T] int32] written instead of new arrays (the kernel writes every slot), as a
    captured CUDA graph needs (fd_mtp/cuda/graph.py)."""
    op, v, dims, p = prepare("top_p_candidates", {k: x for k, x in locals().items() if k != "out"})
    name = op.name
    _same_dtype(name, "top_p", top_p, probs)
    c = v["candidates_len"]
    if c not in _CANDIDATE_LENS:
        _fail(name, "candidates_len", f"must be 1..10 or a multiple of 10 up to 100, got {c}")
    if c > dims["V"]:
        _fail(name, "candidates_len", f"is {c} but probs has only {dims['V']} columns")
    cp = _cupy()
    rows = dims["T"]
    if out is None:
        scores = cp.zeros((rows, c), dtype=probs.dtype)
        tokens = cp.zeros((rows, c), dtype=cp.int64)
        lens = cp.zeros(rows, dtype=cp.int32)
    else:
        if not isinstance(out, (list, tuple)) or len(out) != 3:
            _fail(name, "out", "must be a list [scores, tokens, lens]")
        scores, tokens, lens = out
        for i, (a, shape, dt) in enumerate(
            (
                (scores, (rows, c), probs.dtype),
                (tokens, (rows, c), np.int64),
                (lens, (rows,), np.int32),
            )
        ):
            _dtype(name, f"out[{i}]", a, dt)
            if tuple(a.shape) != shape:
                _fail(name, f"out[{i}]", f"must have shape {list(shape)}, got {list(a.shape)}")
    if rows == 0:
        return [scores, tokens, lens]
    p.probs = _ptr(probs)
    p.float_kind = _FLOAT_KINDS[probs.dtype]
    p.top_p = _ptr(top_p)
    p.verify_scores = _ptr(scores)
    p.verify_tokens = _ptr(tokens)
    p.actual_candidate_lens = _ptr(lens)
    status = _scratch()
    raise_status(op, load().top_p_candidates(p, _ptr(status), _stream()))
    return [scores, tokens, lens]
