"""Numpy references of the target-side sampling ops, written from the spec (spec/ops.md §5.5, §5.6).

Floating-point conventions (shared with the C++ / CUDA kernels, so that the comparison is exact):

* float32 and float16 arrays are numpy's own dtypes; bfloat16 arrays are passed as ``uint16``
  arrays holding the bfloat16 bit patterns (numpy has no bfloat16).
* Arithmetic is float32, one IEEE operation at a time (no fused multiply-add), and every stored
  result is rounded once to the array's dtype with round-to-nearest-even (numpy's float16 cast;
  ``_bf16_from_f32`` for bfloat16). NaN inputs are outside the contract.
"""

import numpy as np

from ..schema import check_rules, get

__all__ = ["speculate_get_token_penalty_multi_scores", "top_p_candidates"]

_F32 = np.float32


def _flat(a):
    flat = a.reshape(-1)
    assert a.size == 0 or np.may_share_memory(flat, a), (
        "reshape(-1) made a copy; pass a contiguous array"
    )
    return flat


def _bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _bf16_from_f32(values):
    """float32 -> bfloat16 bits, round to nearest even (finite values and inf)."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def _to_f32(a):
    """Values of a float32 / float16 / bfloat16-bits array as float32."""
    if a.dtype == np.uint16:
        return _bf16_to_f32(a)
    return np.asarray(a).astype(np.float32)


def _from_f32(values, dtype):
    """float32 values rounded once to `dtype` (uint16 = bfloat16 bits)."""
    if dtype == np.uint16:
        return _bf16_from_f32(values)
    with np.errstate(over="ignore"):
        return np.asarray(values, dtype=np.float32).astype(dtype)


def _check_float(name, a):
    if a.dtype not in (np.float32, np.float16, np.uint16):
        raise ValueError(
            f"{name} must be float32, float16 or bfloat16 (uint16 bits), got {a.dtype}"
        )


def _request(r, offset, max_seq_len):
    """Request of packed row r, or -1 when its position is negative."""
    pos = r + int(offset[r])
    return -1 if pos < 0 else pos // max_seq_len


def _counted(row):
    """Mask of the positions of a pre_ids row that upstream's repeat-count kernel counts (§5.5 step 2).

    Lane t of bd = min(ceil32(Lp), 512) lanes visits t, t + bd, ... and stops at its first negative
    id: position j is counted iff it and every earlier position of its lane hold ids >= 0.
    """
    lp = row.size
    bd = min((lp + 31) // 32 * 32, 512)
    rows = -(-lp // bd) if lp else 0
    grid = np.zeros(rows * bd, dtype=np.int64)
    grid[:lp] = row
    negative = (grid < 0).reshape(rows, bd)
    blocked = np.logical_or.accumulate(negative, axis=0) if rows else negative
    return ~blocked.reshape(-1)[:lp]


# --------------------------------------------------------------------------------------------
# §5.5 speculate_get_token_penalty_multi_scores
# --------------------------------------------------------------------------------------------
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
    """Penalties and temperature on ``logits`` [T, V] in place (spec §5.5); returns ``logits``.

    bs = ``seq_lens_this_time.shape[0]``. Raises ValueError naming the argument (nothing written)
    for an eos id outside [0, V), a counted pre_ids id >= V, or a negative packed position.
    """
    _check_float("logits", logits)
    rows, vocab = logits.shape
    if vocab < 1:
        raise ValueError(f"logits must have at least one column, got shape {list(logits.shape)}")
    if rows == 0:
        return logits
    bs = seq_lens_this_time.shape[0]
    max_seq_len = int(max_seq_len)
    offset = _flat(output_padding_offset)
    cum = _flat(output_cum_offsets)
    cur, mn = _flat(cur_len), _flat(min_len)
    eos = _flat(eos_token_id)
    bad = _flat(bad_tokens)[: (bad_tokens.shape[-1] if bad_tokens.size else 0)]
    alpha_all, beta_all, gamma_all = (
        _to_f32(_flat(a)) for a in (penalty_scores, frequency_scores, presence_scores)
    )
    temps = _flat(temperatures).astype(np.float32)

    # Checks first: nothing is written on bad input.
    for e in eos:
        if not 0 <= e < vocab:
            raise ValueError(f"eos_token_id holds id {e}; ids must be in [0, vocab) = [0, {vocab})")
    per_request = (
        ("penalty_scores", alpha_all),
        ("frequency_scores", beta_all),
        ("presence_scores", gamma_all),
        ("temperatures", temps),
    )
    plan = _penalty_plan(pre_ids, rows, vocab, bs, offset, max_seq_len, cur, per_request)

    dtype = logits.dtype
    min_value = _from_f32(_F32(-1e4) if dtype == np.float16 else _F32(-1e10), dtype)
    bad_value = _from_f32(_F32(-1e10), dtype)
    bad = bad[(bad >= 0) & (bad < vocab)]
    for r, b, ids in plan:
        row = logits[r]
        # 1. min length (written in the logits dtype, read back by the next steps)
        first_row = b * max_seq_len - int(cum[b])
        if cur[b] >= 0 and cur[b] + (r - first_row) < mn[b]:
            row[eos] = min_value
        # 2. repeat counts of the counted ids; 3. penalties, then temperature on every entry
        alpha, beta, gamma = _F32(alpha_all[b]), _F32(beta_all[b]), _F32(gamma_all[b])
        row[:] = _from_f32(_penalized(_to_f32(row), ids, alpha, beta, gamma, _F32(temps[b])), dtype)
        # 4. bad words: row 0 of bad_tokens for every request
        row[bad] = bad_value
    return logits


def _penalty_plan(pre_ids, rows, vocab, bs, offset, max_seq_len, cur, per_request):
    """The checks of speculate_get_token_penalty_multi_scores' rows (before anything is written)
    -> ``[(row, request, counted pre_ids ids)]`` of the rows of the first bs requests;
    ``per_request``: (argument name, float32 values) that must be finite."""
    plan = []
    for r in range(rows):
        b = _request(r, offset, max_seq_len)
        if b < 0:
            raise ValueError(
                f"output_padding_offset gives logits row {r} the offset {offset[r]}: a negative position"
            )
        if b >= bs:
            continue
        for name, values in per_request:
            if not np.isfinite(values[b]):
                raise ValueError(
                    f"speculate_get_token_penalty_multi_scores: {name} (request {b}) is NaN or "
                    "infinite; it must be finite"
                )
        ids = np.empty(0, dtype=np.int64)
        if cur[b] >= 0:
            row = pre_ids[b]
            ids = row[_counted(row)]
            if ids.size and ids.max() >= vocab:
                raise ValueError(
                    f"pre_ids (request {b}) holds id {ids.max()} among the counted ids; "
                    f"ids must be < vocab = {vocab}"
                )
        plan.append((r, b, ids))
    return plan


def _penalized(values, ids, alpha, beta, gamma, temp):
    """A float32 logits row after the repetition / frequency / presence penalties on the counted
    ``ids`` (counts from their repeats), then the temperature on every entry (§5.5 steps 2-3)."""
    out = values / temp
    uniq, counts = np.unique(ids, return_counts=True)
    if uniq.size:
        x = values[uniq]
        x = np.where(x < 0, x * alpha, x / alpha).astype(np.float32)
        x = (x - counts.astype(np.float32) * beta) - gamma
        out[uniq] = x / temp
    return out


# --------------------------------------------------------------------------------------------
# §5.6 top_p_candidates
# --------------------------------------------------------------------------------------------
def top_p_candidates(probs, top_p, output_padding_offset, candidates_len, max_seq_len):
    """The C most probable tokens per row and the top-p length (spec §5.6).

    Order: probability descending, ties by the lower token id. Returns
    ``[verify_scores [T, C] probs' dtype, verify_tokens [T, C] int64, actual_candidate_lens [T] int32]``.
    """
    _check_float("probs", probs)
    rows, vocab = probs.shape
    c = int(candidates_len)
    max_seq_len = int(max_seq_len)
    # the schema's Check rules on candidates_len (the binding's and fd_mtp.cuda's too)
    check_rules(get("top_p_candidates"), {"candidates_len": c}, {"V": vocab})
    offset = _flat(output_padding_offset)
    p_all = _to_f32(_flat(top_p))
    bs = top_p.shape[0]
    requests = []
    for r in range(rows):
        b = _request(r, offset, max_seq_len)
        if b < 0:
            raise ValueError(
                f"output_padding_offset gives probs row {r} the offset {offset[r]}: a negative position"
            )
        if b >= bs:
            raise ValueError(
                f"output_padding_offset maps a probs row to request {b} but top_p has {bs} entries"
            )
        if not np.isfinite(p_all[b]):
            raise ValueError(
                f"top_p_candidates: top_p (request {b}) is NaN or infinite; it must be finite"
            )
        requests.append(b)
    for r in range(rows):
        bad = np.flatnonzero(~np.isfinite(_to_f32(probs[r])))
        if bad.size:
            raise ValueError(
                f"top_p_candidates: probs row {r} holds NaN or inf at column {bad[0]}; "
                "probabilities must be finite"
            )

    scores = np.zeros((rows, c), dtype=probs.dtype)
    tokens = np.zeros((rows, c), dtype=np.int64)
    actual = np.zeros(rows, dtype=np.int32)
    for r, b in enumerate(requests):
        values = _to_f32(probs[r]) + np.float32(0.0)  # -0.0 -> +0.0: they tie
        # The C-th largest value, then every larger value and the lowest ids among the equal ones.
        kth = np.partition(values, vocab - c)[vocab - c]
        above = np.flatnonzero(values > kth)
        equal = np.flatnonzero(values == kth)[: c - above.size]
        cand = np.concatenate([above, equal])
        order = cand[np.lexsort((cand, -values[cand]))]
        p = np.float32(p_all[b])
        total = np.float32(0.0)
        n = 0
        for i, tok in enumerate(order):
            scores[r, i] = probs[r, tok]
            tokens[r, i] = tok
            total = np.float32(total + values[tok])
            if total >= p:
                n = i + 1
                break
        if n == 0 and p == np.float32(1.0):
            n = c
        actual[r] = n
    return [scores, tokens, actual]
