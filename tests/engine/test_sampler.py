"""Sampler: greedy, seeded reproducibility, top-k / top-p masks, penalties, min-length masks."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp.engine.sampler import Sampler, SamplingRows, uniforms  # noqa: E402

L = 16  # max_seq_len of the fake packed layout: one logits row per slot


def run(
    logits,
    *,
    greedy=None,
    top_k=None,
    top_p=None,
    seeds=None,
    counters=None,
    pre_ids=None,
    penalty=1.0,
    frequency=0.0,
    presence=0.0,
    temperature=1.0,
    step_idx=None,
    min_len=None,
    eos=(0,),
    banned=((), ()),
):
    """Sample every row r of ``logits`` as slot r; returns (tokens, logits after the in-place passes)."""
    logits = np.asarray(logits, np.float32)
    R, V = logits.shape
    f32 = lambda v: paddle.to_tensor(
        np.broadcast_to(np.asarray(v, np.float32), [R]).reshape([R, 1]).copy()
    )  # noqa: E731
    i64 = lambda v: paddle.to_tensor(
        np.broadcast_to(np.asarray(v, np.int64), [R]).reshape([R, 1]).copy()
    )  # noqa: E731
    rows = SamplingRows(
        greedy=np.asarray(greedy if greedy is not None else [False] * R, bool),
        top_k=np.asarray(top_k if top_k is not None else [0] * R, np.int64),
        top_p=np.asarray(top_p if top_p is not None else [1.0] * R, np.float64),
        uniform=uniforms(
            seeds if seeds is not None else [0] * R, counters if counters is not None else [0] * R
        ),
        banned_rows=np.asarray(banned[0], np.int64),
        banned_ids=np.asarray(banned[1], np.int64),
    )
    pre = np.full([R, L], -1, np.int64) if pre_ids is None else np.asarray(pre_ids, np.int64)
    t = paddle.to_tensor(logits)
    offsets = np.arange(R, dtype=np.int32) * (L - 1)
    tokens = Sampler()(
        t,
        rows,
        pre_ids=paddle.to_tensor(pre),
        penalty_score=f32(penalty),
        frequency_score=f32(frequency),
        presence_score=f32(presence),
        temperature=f32(temperature),
        bad_tokens=paddle.full([R, 1], -1, "int64"),
        step_idx=i64(0 if step_idx is None else step_idx),
        min_dec_len=i64(0 if min_len is None else min_len),
        eos_token_id=paddle.to_tensor(np.asarray(eos, np.int64).reshape([-1, 1])),
        seq_lens_this_time=paddle.ones([R], "int32"),
        output_padding_offset=paddle.to_tensor(offsets),
        output_cum_offsets=paddle.to_tensor(offsets),
        max_seq_len=L,
    )
    return tokens, t.numpy()


def test_greedy_is_argmax():
    logits = np.random.default_rng(0).normal(size=[9, 37]).astype(np.float32)
    tokens, _ = run(logits, greedy=[True] * 9)
    assert tokens.tolist() == logits.argmax(-1).tolist()


def test_uniforms_are_a_function_of_seed_and_counter():
    u = uniforms(np.arange(1000), np.zeros(1000))
    assert np.all((u >= 0) & (u < 1)) and abs(u.mean() - 0.5) < 0.05
    assert np.array_equal(uniforms([5, 5], [3, 3]), uniforms([5, 5], [3, 3]))
    assert uniforms([5], [3])[0] != uniforms([5], [4])[0] != uniforms([6], [3])[0]


def test_seeded_draws_are_reproducible_and_batch_independent():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=[6, 50]).astype(np.float32)
    seeds, counters = [11, 11, 12, 13, 14, 15], [0, 1, 0, 7, 2, 3]
    a, _ = run(logits, seeds=seeds, counters=counters, top_p=[0.9] * 6, top_k=[0, 5, 0, 20, 0, 3])
    b, _ = run(logits, seeds=seeds, counters=counters, top_p=[0.9] * 6, top_k=[0, 5, 0, 20, 0, 3])
    assert a.tolist() == b.tolist()
    # row 3 alone (another batch) draws the same token
    c, _ = run(logits[3:4], seeds=[13], counters=[7], top_p=[0.9], top_k=[20])
    assert c[0] == a[3]
    # different counters give different draws across many rows
    many = np.repeat(logits[:1] * 0, 200, axis=0)
    d, _ = run(many, seeds=[3] * 200, counters=np.arange(200))
    assert len(set(d.tolist())) > 25


def test_top_k_mask():
    logits = np.log(np.array([[0.05, 0.3, 0.1, 0.25, 0.2, 0.1]], np.float32))
    n = 600
    tokens, _ = run(np.repeat(logits, n, 0), top_k=[2] * n, seeds=np.arange(n))
    assert set(tokens.tolist()) == {1, 3}
    tokens, _ = run(np.repeat(logits, n, 0), top_k=[1] * n, seeds=np.arange(n))
    assert set(tokens.tolist()) == {1}


def test_top_p_mask():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], np.float32))
    n = 600
    # preceding mass 0, 0.5, 0.8, 0.95: top_p 0.7 keeps {0, 1}, 0.85 keeps {0, 1, 2}
    tokens, _ = run(np.repeat(logits, n, 0), top_p=[0.7] * n, seeds=np.arange(n))
    assert set(tokens.tolist()) == {0, 1}
    tokens, _ = run(np.repeat(logits, n, 0), top_p=[0.85] * n, seeds=np.arange(n))
    assert set(tokens.tolist()) == {0, 1, 2}
    tokens, _ = run(np.repeat(logits, n, 0), top_p=[0.01] * n, seeds=np.arange(n))
    assert set(tokens.tolist()) == {0}


def test_sampling_frequencies_follow_the_distribution():
    probs = np.array([0.5, 0.3, 0.15, 0.05], np.float32)
    n = 4000
    tokens, _ = run(np.repeat(np.log(probs)[None], n, 0), seeds=np.arange(n) + 100)
    freq = np.bincount(tokens, minlength=4) / n
    # 5 standard deviations of a binomial proportion at n = 4000 is < 0.04
    assert np.all(np.abs(freq - probs) < 0.04), freq


def test_temperature_sharpens():
    probs = np.array([0.4, 0.3, 0.2, 0.1], np.float32)
    n = 2000
    hot, _ = run(np.repeat(np.log(probs)[None], n, 0), seeds=np.arange(n), temperature=0.1)
    assert np.mean(hot == 0) > 0.9
    _, scaled = run(np.log(probs)[None], temperature=0.5, greedy=[True])
    # the penalty op divides each float32 logit by the temperature, correctly rounded (div_rn), as
    # numpy does; x / 0.5 is even exact: bit-equal on any CPU
    np.testing.assert_array_equal(scaled[0], np.log(probs) / np.float32(0.5))


def test_penalties_hand_case():
    # generated tokens (pre_ids, token k at index k): 0 once, 1 twice
    pre = np.full([1, L], -1, np.int64)
    pre[0, 1:4] = [0, 1, 1]
    tokens, out = run(
        [[1.0, -1.0, 2.0, 4.0]],
        greedy=[True],
        pre_ids=pre,
        penalty=2.0,
        frequency=0.5,
        presence=0.25,
        step_idx=3,
        eos=(3,),
    )
    # x0 = 1/2 - 1*0.5 - 0.25; x1 = -1*2 - 2*0.5 - 0.25; unseen ids unchanged: every operand and
    # intermediate is a short binary fraction, so each correctly rounded float32 op is exact
    np.testing.assert_array_equal(out[0], np.array([-0.25, -3.25, 2.0, 4.0], np.float32))
    assert tokens.tolist() == [3]


def test_repetition_penalty_changes_the_greedy_token():
    pre = np.full([1, L], -1, np.int64)
    pre[0, 1] = 0
    assert run([[3.0, 2.9]], greedy=[True], eos=(1,))[0].tolist() == [0]
    assert run([[3.0, 2.9]], greedy=[True], pre_ids=pre, penalty=1.5, step_idx=1, eos=(1,))[
        0
    ].tolist() == [1]


def test_min_tokens_masks_eos_and_stop_token_ids():
    logits = [[0.0, 0.0, 9.0, 8.0, 7.0]]  # EOS = 2, a stop token id = 3
    assert run(logits, greedy=[True], eos=(2,), step_idx=1, min_len=2, banned=([0], [3]))[
        0
    ].tolist() == [4]
    assert run(logits, greedy=[True], eos=(2,), step_idx=2, min_len=2)[0].tolist() == [2]
