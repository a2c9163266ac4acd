"""Numpy references of the n-gram drafting ops, written from the spec (spec/ops.md §5.17, §6.7).

Executable specs: requests in order, for each n from the largest down, the prompt windows then
the generated windows, the first usable window wins, exactly as the spec text reads. Only the
window comparison of one n is vectorised (``sliding_window_view``); the matching windows are
then visited one by one in index order, applying the ``s >= e`` rule literally.

They mutate ``draft_tokens`` and ``seq_lens_this_time`` in place like the ops. Shapes and dtypes
are assumed valid (the ops check them); the data-dependent checks of the ops are reproduced:
ValueError naming the argument, raised before anything is written.
"""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..schema import check_rules, get, resolve_kw

__all__ = ["ngram_match", "hybrid_mtp_ngram"]


def _flat(a):
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _threshold(op, threshold):
    """``threshold``, or when None the environment default of the op's schema (fd_mtp.envs), as
    the op's wrapper resolves it."""
    return int(resolve_kw(op, "threshold", threshold))


def _first_usable(hay, length, query, q):
    """First window i of hay[:length] equal to query with s = i + n < e = min(s + q, length).

    Returns (s, e) or None. Windows i = 0 .. length - n, in order.
    """
    n = len(query)
    if length - n + 1 <= 0:
        return None
    windows = sliding_window_view(hay[:length], n)
    for i in np.flatnonzero((windows == query).all(axis=1)):
        s = int(i) + n
        e = min(s + q, length)
        if s >= e:
            continue
        return s, e
    return None


def _search(input_ids, input_ids_len, pre_ids, step, q, n_max, n_min):
    """The spec's search of one request: (source row, s, e) of the first usable match, or None."""
    for n in range(n_max, n_min - 1, -1):
        if step < n:
            continue
        query = pre_ids[step - n + 1 : step + 1]
        hit = _first_usable(input_ids, input_ids_len, query, q)  # (a) the prompt
        if hit is not None:
            return input_ids, hit[0], hit[1]
        hit = _first_usable(pre_ids, step, query, q)  # (b) the generated tokens
        if hit is not None:
            return pre_ids, hit[0], hit[1]
    return None


def _check_rows(
    op, b, input_ids, pre_ids, input_ids_len, step_idx, base, q, draft_cols, n_max, n_min
):
    """The ops' data checks of a request that drafts with q >= 1 (see fd_mtp.ops.ngram)."""
    if base < 1:
        raise ValueError(
            f"{op}: seq_lens_this_time (request {b}) is {base} for a request that drafts; "
            "it must be >= 1"
        )
    if base + q > draft_cols:
        raise ValueError(
            f"{op}: draft_tokens (request {b}) row needs {base + q} columns for the drafts "
            f"this request may receive but has {draft_cols}"
        )
    if min(int(step_idx[b]), n_max) < n_min:
        return  # nothing is read
    ln = int(input_ids_len[b])
    if ln < 0 or ln > input_ids.shape[1]:
        raise ValueError(
            f"{op}: input_ids_len (request {b}) is {ln}; it must be in [0, {input_ids.shape[1]}]"
        )
    if int(step_idx[b]) >= pre_ids.shape[1]:
        raise ValueError(
            f"{op}: step_idx (request {b}) is {int(step_idx[b])}; the query ends at "
            f"pre_ids[step_idx] but the row has {pre_ids.shape[1]} columns"
        )


def _ngram_sizes(op, n_max, n_min):
    """(max_ngram_size, min_ngram_size) as ints, checked: 1 <= min <= max."""
    n_max, n_min = int(n_max), int(n_min)
    if n_max < 1:
        raise ValueError(f"{op}: max_ngram_size must be >= 1, got {n_max}")
    if n_min < 1:
        raise ValueError(f"{op}: min_ngram_size must be >= 1, got {n_min}")
    check_rules(get(op), {"max_ngram_size": n_max, "min_ngram_size": n_min}, {})  # the schema's
    return n_max, n_min


def _run(
    op,
    hybrid,
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    max_dec_len,
    n_max,
    n_min,
    k,
    threshold,
):
    n_max, n_min = _ngram_sizes(op, n_max, n_min)
    this_time = _flat(seq_lens_this_time)
    bsz = this_time.shape[0]
    in_len, step = _flat(input_ids_len), _flat(step_idx)
    dec, mdl = _flat(seq_lens_decoder), _flat(max_dec_len)
    enc = None if hybrid else _flat(seq_lens_encoder)
    num = None if hybrid else _flat(draft_token_num)

    def plan(b):
        """(drafts?, base count, untrimmed q) of request b, from the spec's first lines."""
        left = int(mdl[b]) - int(step[b]) - 1
        if hybrid:
            q0 = int(this_time[b])
            q = min(int(k) - q0 + 1, left)
            return (q0 != 0 and q > 0), q0, q
        q = min(int(num[b]), left)
        return (enc[b] <= 0 and dec[b] != 0), 1, q

    cols = draft_tokens.shape[1]
    for b in range(bsz):  # every check before any write
        drafts, base, q = plan(b)
        if drafts and q >= 1:
            _check_rows(op, b, input_ids, pre_ids, in_len, step, base, q, cols, n_max, n_min)

    if hybrid:
        remaining = int(np.count_nonzero(dec[:bsz] > 0))
    else:
        remaining = int(np.count_nonzero((enc[:bsz] > 0) | (dec[:bsz] > 0)))
    before = 0  # Σ seq_lens_this_time[0 .. b-1], current (final) values
    for b in range(bsz):
        before += int(this_time[b - 1]) if b > 0 else 0
        if not hybrid:
            if enc[b] > 0:
                continue
            if dec[b] == 0:
                this_time[b] = 0
                continue
            this_time[b] = 1
        drafts, base, q = plan(b)
        if not drafts:
            continue
        remaining -= 1
        total = before + int(this_time[b])  # Σ seq_lens_this_time[0 .. b], current values
        if total + q + remaining > threshold:
            q = min(q, threshold - total - remaining)
        if total + remaining >= threshold - 1:
            continue
        if q < 1:  # every window has s >= e = min(s + q, len): nothing is usable
            continue
        found = _search(input_ids[b], int(in_len[b]), pre_ids[b], int(step[b]), q, n_max, n_min)
        if found is None:
            continue
        src, s, e = found
        draft_tokens[b, base : base + (e - s)] = src[s:e]
        this_time[b] = base + (e - s)


def ngram_match(
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_encoder,
    seq_lens_decoder,
    max_dec_len,
    max_ngram_size,
    max_draft_tokens,
    *,
    threshold=None,
):
    """Reference of fd_mtp.ops.ngram_match (spec §5.17). Returns None.

    ``threshold=None``: INFER_WITH_REFERENCE_TOKENUM_THRESHOLD, else 128 (read by fd_mtp.envs).
    """
    threshold = _threshold("ngram_match", threshold)
    _run(
        "ngram_match",
        False,
        input_ids,
        input_ids_len,
        pre_ids,
        step_idx,
        draft_token_num,
        draft_tokens,
        seq_lens_this_time,
        seq_lens_encoder,
        seq_lens_decoder,
        max_dec_len,
        max_ngram_size,
        1,
        max_draft_tokens,
        threshold,
    )


def hybrid_mtp_ngram(
    input_ids,
    input_ids_len,
    pre_ids,
    step_idx,
    draft_token_num,
    draft_tokens,
    seq_lens_this_time,
    seq_lens_decoder,
    max_dec_len,
    max_ngram_size,
    min_ngram_size,
    max_draft_tokens,
    *,
    threshold=None,
):
    """Reference of fd_mtp.ops.hybrid_mtp_ngram (spec §6.7). Returns None.

    ``threshold=None``: SPEC_TOKENUM_THRESHOLD, else 1024 (read by fd_mtp.envs).
    """
    threshold = _threshold("hybrid_mtp_ngram", threshold)
    _run(
        "hybrid_mtp_ngram",
        True,
        input_ids,
        input_ids_len,
        pre_ids,
        step_idx,
        draft_token_num,
        draft_tokens,
        seq_lens_this_time,
        None,
        seq_lens_decoder,
        max_dec_len,
        max_ngram_size,
        min_ngram_size,
        max_draft_tokens,
        threshold,
    )
