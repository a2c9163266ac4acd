"""fd_mtp.cuda versions of the target-side sampling ops (spec §5.5, §5.6).

Float arrays are CuPy float32 / float16 arrays, or uint16 arrays holding bfloat16 bit patterns
(as in fd_mtp.reference).
"""

from __future__ import annotations

import numpy as np

from ._common import (
    _fail,
    _ptr,
    _scratch,
    _stream,
    _workspace,
    define_launchers,
    load,
    prepare,
    raise_status,
)

_FLOAT_KINDS = {np.dtype(np.float32): 0, np.dtype(np.float16): 1, np.dtype(np.uint16): 2}


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


# top_p_candidates is generated from fd_mtp/schema/sampling.py.
__all__ = sorted(
    {"speculate_get_token_penalty_multi_scores", *define_launchers(globals(), "sampling")}
)
