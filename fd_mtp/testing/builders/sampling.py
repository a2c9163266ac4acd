"""Sampling and verification ops: the target penalties, top_p_candidates, speculate_verify
(top-p and rejection strategies)."""

from __future__ import annotations

import functools

import numpy as np

from ._common import CANDIDATES, EOS_IDS, Case, K, L, _roles, _seed, as_dtype, positional


def _sampling_rows(batch):
    """Every request verifies K + 1 tokens: T = batch * (K + 1) logits rows, offsets for L."""
    out_rows = [K + 1] * batch
    cum = np.concatenate([[0], np.cumsum([L - o for o in out_rows])[:-1]]).astype(np.int32)
    pad = np.repeat(cum, out_rows).astype(np.int32)
    return sum(out_rows), pad, cum


def build_penalty(batch, vocab, dtype="float32", variant=0):
    """Target penalties on T = batch * (K + 1) rows of ``dtype`` logits (the penalty, frequency and
    presence scores in ``dtype`` too, temperatures float32): pre_ids [batch, L] holds each
    request's generated tokens (index 0 = -1, 16..1600 tokens), ~1/8 of the requests are below
    their min length, 8 bad words, 2 EOS ids."""
    rng = np.random.default_rng(_seed(6, variant))
    rows, pad, cum = _sampling_rows(batch)
    pre_ids = np.full((batch, L), -1, np.int64)
    gen = rng.integers(16, 1600, batch)
    for b in range(batch):
        pre_ids[b, 1 : 1 + gen[b]] = rng.integers(0, vocab, gen[b])
    min_len = np.where(rng.random(batch) < 0.125, gen + K + 1, 1).astype(np.int64)
    per = lambda lo, hi: rng.uniform(lo, hi, (batch, 1)).astype(np.float32)  # noqa: E731
    cast = (lambda v: v) if dtype == "float32" else functools.partial(as_dtype, dtype=dtype)
    names = positional("speculate_get_token_penalty_multi_scores")
    args = [
        pre_ids,
        cast(rng.standard_normal((rows, vocab), dtype=np.float32)),
        cast(per(1.0, 1.5)),
        cast(per(0.0, 0.5)),
        cast(per(0.0, 0.5)),
        per(0.5, 1.2),
        rng.integers(0, vocab, (1, 8)),
        gen.reshape(-1, 1).astype(np.int64),
        min_len.reshape(-1, 1),
        np.array(EOS_IDS, np.int64).reshape(-1, 1),
        np.full((batch, 1), K + 1, np.int32),
        pad,
        cum,
        L,
    ]
    return Case(args, names, ["logits"], f"V={vocab};T={rows};K={K};L={L};dtype={dtype}")


def build_top_p(batch, vocab, dtype="float32", candidates=CANDIDATES, variant=0):
    """top_p_candidates on T = batch * (K + 1) softmax rows (probabilities and top_p in
    ``dtype``), C = ``candidates``."""
    rng = np.random.default_rng(_seed(7, variant))
    rows, pad, _ = _sampling_rows(batch)
    probs = rng.standard_normal((rows, vocab), dtype=np.float32) * np.float32(3)
    probs -= probs.max(axis=1, keepdims=True)
    np.exp(probs, out=probs)
    probs /= probs.sum(axis=1, keepdims=True)
    top_p = rng.choice(np.array([0.7, 0.8, 0.95, 1.0], np.float32), (batch, 1))
    if dtype != "float32":
        probs, top_p = as_dtype(probs, dtype), as_dtype(top_p, dtype)
    return Case(
        [probs, top_p, pad, candidates, L],
        ["probs", "top_p", "output_padding_offset", "candidates_len", "max_seq_len"],
        [],
        f"V={vocab};T={rows};C={candidates};K={K};dtype={dtype}",
        returns=True,
    )


VERIFY_C = 5  # max_candidate_len of top_p_candidates
VERIFY_V = 100_000  # vocabulary of the candidate ids (topp strategy)


def _verify_state(batch, vocab, seed=6):
    """speculate_verify's inputs after a target forward: decodes verify K + 1 tokens (K drafts, 60%
    equal to the top candidate of their row, 10% to the second), prefills one row, stopped
    requests none; a few requests reach max_dec_len or meet an end token this step."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    n = np.where(roles == "prefill", rng.integers(16, 128, batch), K + 1).astype(np.int32)
    outs = np.select([roles == "stopped", roles == "prefill"], [0, 1], K + 1)
    T = int(outs.sum())
    first = np.concatenate([[0], np.cumsum(outs)[:-1]])
    cands = rng.integers(3, vocab, (T, VERIFY_C), dtype=np.int64)
    scores = np.sort(rng.random((T, VERIFY_C), dtype=np.float32), axis=1)[:, ::-1]
    scores = (scores / scores.sum(1, keepdims=True)).astype(np.float32)
    draft = rng.integers(3, vocab, (batch, K + 1), dtype=np.int64)
    for b in np.flatnonzero(roles != "stopped"):
        for k in range(1, K + 1):
            u = rng.random()
            if roles[b] != "prefill" and u < 0.6:
                draft[b, k] = cands[first[b] + k - 1, 0]
            elif roles[b] != "prefill" and u < 0.7:
                draft[b, k] = cands[first[b] + k - 1, 1]
    step = rng.integers(10, 1000, batch).astype(np.int64)
    max_dec = np.full(batch, L, np.int64)
    some = rng.permutation(batch)[: max(1, batch // 50)]
    max_dec[some] = step[some] + 2
    eos_rows = rng.permutation(T)[: max(1, T // 100)] if T else []
    cands[eos_rows, 0] = EOS_IDS[0]
    s = dict(
        sampled_token_ids=cands[:, :1].copy(),
        accept_tokens=np.zeros((batch, K + 1), np.int64),
        accept_num=np.zeros(batch, np.int32),
        step_idx=step.reshape(-1, 1),
        stop_flags=(roles == "stopped").reshape(-1, 1),
        seq_lens_encoder=np.where(roles == "prefill", n, 0).astype(np.int32).reshape(-1, 1),
        seq_lens_decoder=rng.integers(64, 1024, (batch, 1)).astype(np.int32),
        draft_tokens=draft,
        seq_lens_this_time=np.where(roles == "stopped", 0, n).astype(np.int32).reshape(-1, 1),
        verify_tokens=cands,
        verify_scores=np.ascontiguousarray(scores),
        max_dec_len=max_dec.reshape(-1, 1),
        end_tokens=np.array(EOS_IDS, np.int64).reshape(-1, 1),
        is_block_step=np.zeros(batch, bool),
        output_cum_offsets=np.concatenate([[0], np.cumsum(L - outs)[:-1]])
        .astype(np.int32)
        .reshape(-1, 1),
        actual_candidate_len=rng.integers(1, VERIFY_C + 1, T).astype(np.int32),
        actual_draft_token_nums=np.full(batch, K, np.int32),
        topp=rng.uniform(0.5, 1.0, (batch, 1)).astype(np.float32),
    )
    return s, T


VERIFY_WRITTEN = ["accept_tokens", "accept_num", "step_idx", "stop_flags"]


def build_verify(batch, variant=0):
    s, T = _verify_state(batch, VERIFY_V, _seed(6, variant))
    names = list(s) + [
        "max_seq_len",
        "verify_window",
        "enable_topp",
        "benchmark_mode",
        "accept_all_drafts",
    ]
    args = list(s.values()) + [L, 2, True, False, False]
    kwargs = dict(verify_strategy="topp", seed=1, offset=2, prefill_one_step_stop=False)
    return Case(
        args, names, VERIFY_WRITTEN, f"strategy=topp;K={K};C={VERIFY_C};T={T}", kwargs=kwargs
    )


def build_verify_rejection(batch, vocab, draft_probs=False):
    """Greedy drafter (draft_probs None; ``draft_probs=True``: a sampling drafter whose rows put 0.5
    of the mass on the drafted token, the rest uniform); target rows: 0.6 of the mass on the row's
    top candidate, 0.3 spread over the other candidates, 0.1 uniform over the vocabulary."""
    s, T = _verify_state(batch, vocab, seed=7)
    rng = np.random.default_rng(8)
    probs = np.full((T, vocab), 0.1 / vocab, np.float32)
    rows = np.arange(T)
    probs[rows, s["verify_tokens"][:, 0]] += 0.6
    for c in range(1, VERIFY_C):
        probs[rows, s["verify_tokens"][:, c]] += np.float32(0.3 / (VERIFY_C - 1))
    probs *= rng.uniform(0.98, 1.02, (T, 1)).astype(np.float32)
    names = list(s) + [
        "max_seq_len",
        "verify_window",
        "enable_topp",
        "benchmark_mode",
        "accept_all_drafts",
    ]
    args = list(s.values()) + [L, 2, True, False, False]
    kwargs = dict(
        verify_strategy="rejection",
        seed=1,
        offset=2,
        prefill_one_step_stop=False,
        target_probs=probs,
    )
    if draft_probs:
        q = np.full((T, vocab), 0.5 / vocab, np.float32)
        # output rows: K + 1 per decode, 1 per prefill, none when stopped; draft_tokens[b, k] was
        # drafted from row first[b] + k - 1
        enc, stop = s["seq_lens_encoder"].ravel(), s["stop_flags"].ravel()
        outs = np.where(stop, 0, np.where(enc > 0, 1, K + 1))
        first = np.concatenate([[0], np.cumsum(outs)[:-1]])
        for b in np.flatnonzero(outs == K + 1):
            q[first[b] + np.arange(K), s["draft_tokens"][b, 1:]] += np.float32(0.5)
        kwargs["draft_probs"] = q * rng.uniform(0.98, 1.02, (T, 1)).astype(np.float32)
    return Case(
        args,
        names,
        VERIFY_WRITTEN,
        f"strategy=rejection;K={K};V={vocab};T={T};drafter={'sampling' if draft_probs else 'greedy'}",
        kwargs=kwargs,
    )
