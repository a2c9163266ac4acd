"""n-gram drafting (ngram_match, hybrid_mtp_ngram): every request decoding, half with a planted
repeat to find."""

from __future__ import annotations

import numpy as np

from ._common import Case

NGRAM_VOCAB = 32_000
NGRAM_K = 5
NGRAM_MAX, NGRAM_MIN = 5, 2
NGRAM_THRESHOLD = 1 << 30
NGRAM_PLANT = 0.5

NGRAM_ORDER = [
    "input_ids",
    "input_ids_len",
    "pre_ids",
    "step_idx",
    "draft_token_num",
    "draft_tokens",
    "seq_lens_this_time",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "max_dec_len",
]
HYBRID_ORDER = [
    "input_ids",
    "input_ids_len",
    "pre_ids",
    "step_idx",
    "draft_token_num",
    "draft_tokens",
    "seq_lens_this_time",
    "seq_lens_decoder",
    "max_dec_len",
]
NGRAM_WRITTEN = ("draft_tokens", "seq_lens_this_time")


def ngram_tensors(hybrid, *tensors, column=False):
    """The op's tensors by name from the ten of ngram_match (numpy arrays, in ``NGRAM_ORDER``):
    hybrid_mtp_ngram's without seq_lens_encoder; with ``column`` the per-request ones (1-D) as
    [B, 1] columns. Shared by the builders here and the n-gram tests (tests/ops, tests/gpu)."""
    d = dict(zip(NGRAM_ORDER, tensors, strict=True))
    if column:
        d = {name: a.reshape(-1, 1) if a.ndim == 1 else a for name, a in d.items()}
    if hybrid:
        del d["seq_lens_encoder"]
    return d


def ngram_state(op, batch, history, seed=0):
    """(arrays by name, positional size args, config string) of one n-gram drafting batch: every
    request decoding with ``history`` tokens, half with a planted repeat to find (benchmarks/bench_ngram.py)."""
    hybrid = op == "hybrid_mtp_ngram"
    rng = np.random.default_rng(seed + batch + history)
    prompt = history // 2
    generated = history - prompt
    input_ids = rng.integers(0, NGRAM_VOCAB, (batch, prompt), dtype=np.int64)
    pre_ids = rng.integers(0, NGRAM_VOCAB, (batch, generated + 1), dtype=np.int64)
    step = np.full(batch, generated, np.int64)  # pre_ids[.., step] is the newest token
    if not hybrid:
        pre_ids[:, 0] = -1  # target convention: slot 0 unused
    for b in np.flatnonzero(rng.random(batch) < NGRAM_PLANT):
        g = int(rng.integers(1, NGRAM_MAX + 1))
        if hybrid:
            g = max(g, NGRAM_MIN)
        piece = np.concatenate(
            [pre_ids[b, generated - g + 1 :], rng.integers(0, NGRAM_VOCAB, NGRAM_K)]
        )
        if rng.random() < 0.5:
            at = int(rng.integers(0, prompt - len(piece)))
            input_ids[b, at : at + len(piece)] = piece
        else:
            at = int(rng.integers(1, generated - g - len(piece)))
            pre_ids[b, at : at + len(piece)] = piece
    d = ngram_tensors(
        hybrid,
        input_ids,
        np.full(batch, prompt, np.int64),  # input_ids_len
        pre_ids,
        step,
        np.full(batch, NGRAM_K, np.int32),  # draft_token_num
        np.full((batch, NGRAM_K + 1), -1, np.int64),  # draft_tokens
        np.full(batch, 2 if hybrid else 1, np.int32),  # seq_lens_this_time
        np.zeros(batch, np.int32),  # seq_lens_encoder
        np.full(batch, history, np.int32),  # seq_lens_decoder
        np.full(batch, 1 << 40, np.int64),  # max_dec_len
    )
    d["draft_tokens"][:, 0] = 7
    if hybrid:
        d["draft_tokens"][:, 1] = 8
        sizes = (NGRAM_MAX, NGRAM_MIN, NGRAM_K)
    else:
        sizes = (NGRAM_MAX, NGRAM_K)
    config = (
        f"H={history};prompt={prompt};generated={generated};K={NGRAM_K};"
        f"ngram={NGRAM_MIN if hybrid else 1}..{NGRAM_MAX};planted={NGRAM_PLANT};vocab={NGRAM_VOCAB};"
        f"threshold={NGRAM_THRESHOLD}"
    )
    return d, sizes, config


def build_ngram(batch, op="ngram_match", history=64):
    d, sizes, config = ngram_state(op, batch, history)
    order = HYBRID_ORDER if op == "hybrid_mtp_ngram" else NGRAM_ORDER
    size_names = (
        ["max_ngram_size", "min_ngram_size", "max_draft_tokens"]
        if op == "hybrid_mtp_ngram"
        else [
            "max_ngram_size",
            "max_draft_tokens",
        ]
    )
    return Case(
        [d[n] for n in order] + list(sizes),
        order + size_names,
        list(NGRAM_WRITTEN),
        config,
        kwargs={"threshold": NGRAM_THRESHOLD},
    )
