"""Shared pieces of the ngram_match / hybrid_mtp_ngram tests: argument order, random batches
with planted n-gram repeats (so that matches really happen), and the invariants of both ops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import strategies as st
from util import OpPair, assert_same, ragged, to_numpy, to_paddle

from fd_mtp.testing.op_inputs import ngram_tensors, positional

# Hand cases give these as ragged rows (input_ids padded with 900, the others with -1).
MATRICES = ("input_ids", "pre_ids", "draft_tokens")
ROW_FILL = {"input_ids": 900}
# the tensors, from the schema
NGRAM = OpPair("ngram_match", positional("ngram_match")[:10], MATRICES, ROW_FILL)
HYBRID = OpPair("hybrid_mtp_ngram", positional("hybrid_mtp_ngram")[:9], MATRICES, ROW_FILL)
NGRAM_NAMES = NGRAM.names
HYBRID_NAMES = HYBRID.names


def op_refuses(op, names, d, arg, *attrs, **kw):
    """fd_mtp.ops.<op> on ``d``'s arrays (``names`` order, then ``attrs`` and ``kw``) raises a
    ValueError matching ``arg`` and writes none of them."""
    import fd_mtp.ops as ops

    t = {n: to_paddle(d[n]) for n in names}
    with pytest.raises(ValueError, match=arg):
        getattr(ops, op)(*[t[n] for n in names], *attrs, **kw)
    for n in names:
        assert_same(to_numpy(t[n]), d[n], f"{n} after the failed call")


def op_and_reference_refuse(op, names, d, arg, *attrs, **kw):
    """`op_refuses`, and the numpy reference of ``op`` refuses ``d`` the same way."""
    import fd_mtp.reference as reference

    op_refuses(op, names, d, arg, *attrs, **kw)
    ref = {n: d[n].copy() for n in names}
    with pytest.raises(ValueError, match=arg):
        getattr(reference, op)(*[ref[n] for n in names], *attrs, **kw)
    for n in names:
        assert_same(ref[n], d[n], f"{n} after the failed reference call")


def hand_batch(pair, n, k, li, lp, column, first_row, q, **fields):
    """The arguments of ``pair``'s op for n decoding requests (decoder 10, max_dec_len 100, k
    draft slots, draft row ``first_row``, ``q`` tokens this step) with empty prompts (900) and
    histories (-1) of widths ``li`` / ``lp``; ``fields`` from lists (matrices ragged)."""
    per = (n, 1) if column else (n,)
    d = {
        "input_ids": np.full((n, li), 900, np.int64),
        "input_ids_len": np.zeros(per, np.int64),
        "pre_ids": np.full((n, lp), -1, np.int64),
        "step_idx": np.zeros(per, np.int64),
        "draft_token_num": np.full(per, k, np.int32),
        "draft_tokens": ragged([first_row] * n, k + 1),
        "seq_lens_this_time": np.full(per, q, np.int32),
        "seq_lens_encoder": np.zeros(per, np.int32),
        "seq_lens_decoder": np.full(per, 10, np.int32),
        "max_dec_len": np.full(per, 100, np.int64),
    }
    return pair.set_fields({name: d[name] for name in pair.names}, **fields)


def run_ngram(d, max_ngram_size=3, max_draft_tokens=3, threshold=1024):
    """ngram_match op and reference on copies of `d`; asserts they agree; returns the op's arrays."""
    return NGRAM.run(d, [max_ngram_size, max_draft_tokens], threshold=threshold)


def run_hybrid(d, max_ngram_size=3, min_ngram_size=1, max_draft_tokens=3, threshold=1024):
    """As `run_ngram`, for hybrid_mtp_ngram."""
    extra = [max_ngram_size, min_ngram_size, max_draft_tokens]
    return HYBRID.run(d, extra, threshold=threshold)


def random_batch(
    rng,
    bsz,
    *,
    hybrid=False,
    k=3,
    width=48,
    vocab=50,
    max_n=3,
    min_n=1,
    plant=0.6,
    column=False,
    extra_rows=0,
):
    """A valid random batch for either op: roles mixed (decode / prefill / idle), histories of
    random tokens, and for a fraction `plant` of the requests a copy of the request's last n
    tokens (plus what follows, n in [min_n, max_n]) planted earlier in the prompt or in the
    history."""
    n = bsz + extra_rows
    li, lp = width, width
    input_ids = rng.integers(0, vocab, (n, li)).astype(np.int64)
    pre_ids = np.full((n, lp), -1, np.int64)
    input_ids_len = rng.integers(0, li + 1, n).astype(np.int64)
    step_idx = rng.integers(0, lp, n).astype(np.int64)
    enc = np.zeros(n, np.int32)
    dec = rng.integers(1, 200, n).astype(np.int32)
    role = rng.choice(3, n, p=[0.8, 0.1, 0.1])  # 0 decode, 1 prefill, 2 idle
    enc[role == 1] = rng.integers(1, 30, int(np.sum(role == 1)))
    dec[role == 2] = 0
    if hybrid:
        dec[role == 1] = 0
    this_time = np.where(role == 1, enc, rng.integers(0, k + 2, n)).astype(np.int32)
    if hybrid:  # 1 + MTP drafts for decoding requests, 0 for the others
        this_time = np.where(role == 0, rng.integers(1, k + 2, n), 0).astype(np.int32)
        this_time[rng.random(n) < 0.05] = 0
    for b in range(n):
        s = int(step_idx[b])
        start = 0 if hybrid else 1  # target convention: pre_ids[b, 0] stays -1
        pre_ids[b, start : s + 1] = rng.integers(0, vocab, max(0, s + 1 - start))
        if rng.random() < plant and s >= 1:
            g = int(rng.integers(min_n, max_n + 1))  # planted n-grams the search may use
            g = min(g, s)
            query = pre_ids[b, s - g + 1 : s + 1]
            follow = rng.integers(0, vocab, k + 1)
            piece = np.concatenate([query, follow])
            if rng.random() < 0.5 and input_ids_len[b] > g:  # plant in the prompt
                at = int(rng.integers(0, max(1, int(input_ids_len[b]) - g)))
                seg = piece[: li - at]
                input_ids[b, at : at + len(seg)] = seg
            elif s - g >= 1:  # plant in the history, before the query
                at = int(rng.integers(start, max(start + 1, s - g)))
                seg = piece[: max(0, s - g + 1 - at)]
                pre_ids[b, at : at + len(seg)] = seg
    q_room = rng.integers(-1, k + 3, n)
    max_dec_len = np.where(rng.random(n) < 0.2, step_idx + q_room, 10_000).astype(np.int64)
    num = rng.integers(0, k + 1, n).astype(np.int32)
    drafts = rng.integers(1000, 2000, (n, k + 1)).astype(np.int64)
    this_time = this_time[:bsz].copy()
    tensors = (input_ids, input_ids_len, pre_ids, step_idx, num, drafts, this_time, enc, dec)
    return ngram_tensors(hybrid, *tensors, max_dec_len, column=column)


def follows_suffix(hay, length, pre_row, step, drafts, n_min):
    """True when `drafts` are the tokens right after an occurrence (in hay[:length]) of the
    request's last n >= n_min tokens."""
    m = len(drafts)
    for n in range(n_min, step + 1):
        query = pre_row[step - n + 1 : step + 1]
        for i in range(0, length - n - m + 1):
            if np.array_equal(hay[i : i + n], query) and np.array_equal(
                hay[i + n : i + n + m], drafts
            ):
                return True
    return False


def check_invariants(before, after, *, hybrid, k, threshold, n_min=1):
    """Invariants of both ops on one call (before/after: dicts of numpy arrays)."""
    matrices = ("input_ids", "pre_ids", "draft_tokens")
    flat = {name: v if name in matrices else v.reshape(-1) for name, v in before.items()}
    t0 = flat["seq_lens_this_time"]
    t1 = np.asarray(after["seq_lens_this_time"]).reshape(-1)
    bsz = t0.shape[0]
    d0, d1 = before["draft_tokens"], after["draft_tokens"]
    step = flat["step_idx"]
    dec = flat["seq_lens_decoder"]
    left = flat["max_dec_len"] - step - 1
    for name in NGRAM_NAMES:  # only draft_tokens and seq_lens_this_time may change
        if name in before and name not in ("draft_tokens", "seq_lens_this_time"):
            assert_same(after[name], before[name], name)
    assert_same(d1[bsz:], d0[bsz:], "draft_tokens rows beyond bsz")
    if hybrid:
        remaining = int(np.sum(dec[:bsz] > 0))
    else:
        enc = flat["seq_lens_encoder"]
        remaining = int(np.sum((enc[:bsz] > 0) | (dec[:bsz] > 0)))
    prefix = 0
    drafted = 0
    for b in range(bsz):
        if hybrid:
            base = int(t0[b])
            q = min(k - base + 1, int(left[b]))
            drafts = base != 0 and q > 0
            if not drafts:
                assert t1[b] == t0[b]
        else:
            q = min(int(flat["draft_token_num"][b]), int(left[b]))
            base = 1
            drafts = enc[b] <= 0 and dec[b] != 0
            if enc[b] > 0:
                assert t1[b] == t0[b], f"prefill request {b}: seq_lens_this_time changed"
            elif dec[b] == 0:
                assert t1[b] == 0, f"idle request {b}: seq_lens_this_time {t1[b]} != 0"
        count = int(t1[b]) - base if drafts else 0
        if drafts:
            remaining -= 1
            assert 0 <= count <= max(0, q), f"request {b}: {count} drafts, q = {q}"
        # untouched columns: everything but [base, base + count)
        keep = np.ones(d0.shape[1], bool)
        keep[base : base + count] = False
        assert_same(d1[b, keep], d0[b, keep], f"draft_tokens[{b}] outside the drafts")
        prefix += int(t1[b])
        if count > 0:
            drafted += 1
            assert prefix + remaining <= threshold, f"request {b}: budget exceeded"
            got = d1[b, base : base + count]
            pre_row = before["pre_ids"][b]
            s = int(step[b])
            ok = follows_suffix(
                before["input_ids"][b], int(flat["input_ids_len"][b]), pre_row, s, got, n_min
            )
            ok = ok or follows_suffix(pre_row, s, pre_row, s, got, n_min)
            assert ok, f"request {b}: drafts {got} do not follow a suffix occurrence"
    return drafted


#: The sizes the property tests draw their random batches with (with the op's n-gram sizes and
#: threshold): any seed, batch 1-40, K 1-5, vocabulary 2 / 5 / 50, width 1-48.
RANDOM_SIZES = dict(
    seed=st.integers(0, 2**32 - 1),
    bsz=st.integers(1, 40),
    k=st.integers(1, 5),
    vocab=st.sampled_from([2, 5, 50]),
    width=st.integers(1, 48),
)


def run_and_check(d, *, hybrid, k, max_n, threshold, n_min=1):
    """hybrid_mtp_ngram (``hybrid``) or ngram_match and its reference on copies of ``d`` with these
    sizes (they must agree), then `check_invariants`; -> the number of requests that drafted."""
    got = run_hybrid(d, max_n, n_min, k, threshold) if hybrid else run_ngram(d, max_n, k, threshold)
    return check_invariants(d, got, hybrid=hybrid, k=k, threshold=threshold, n_min=n_min)


def assert_grid_drafts(drafted, bsz):
    """A grid batch of 33 or more requests drafts for at least a fifth of them."""
    if bsz >= 33:
        assert drafted >= bsz // 5, (
            f"only {drafted} of {bsz} requests drafted: the batch tests too little"
        )


def assert_random_batches_draft(hybrid, seeds=range(40)):
    """The batch generator of the property tests plants matches: over a fixed set of ``seeds``
    (self-contained, so the rate does not depend on which examples Hypothesis ran), with the
    property tests' ranges (batch 1-40, K 1-5, n 1-5, vocab 2 / 5 / 50, width 1-48), at least 40%
    of the batches draft, op and reference agreeing and the invariants holding."""
    cases = drafted = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        bsz, k, max_n = int(rng.integers(1, 41)), int(rng.integers(1, 6)), int(rng.integers(1, 6))
        n_min = max(1, max_n - int(rng.integers(0, 5))) if hybrid else 1
        vocab, width = int(rng.choice([2, 5, 50])), int(rng.integers(1, 49))
        sizes = dict(k=k, width=width, vocab=vocab, max_n=max_n, min_n=n_min)
        d = random_batch(rng, bsz, hybrid=hybrid, plant=0.8, **sizes)
        cases += 1
        drafted += (
            run_and_check(d, hybrid=hybrid, k=k, max_n=max_n, threshold=10_000, n_min=n_min) > 0
        )
    assert drafted >= 0.4 * cases, (drafted, cases)
