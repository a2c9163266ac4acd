"""Tests of fd_mtp.ops.ngram_match (spec ops.md §5.17) against its numpy reference.

Pyramid (style.md item 8): named hand cases with exact expected arrays written from the spec,
an odd-size grid, Hypothesis batches with planted n-gram repeats (asserting that matches really
happen), invariants on every output, and bad input (ValueError naming the argument, nothing
written).
"""

from __future__ import annotations

import ngram_util
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ngram_util import (
    HYBRID_NAMES,
    NGRAM,
    NGRAM_NAMES,
    hand_batch,
    random_batch,
    run_hybrid,
    run_ngram,
)
from util import BATCH_GRID, assert_same, ragged, to_numpy, to_paddle

import fd_mtp.ops as ops

A = 77  # the last accepted token (draft_tokens[b, 0]); never touched


def batch(n=1, k=3, li=8, lp=8, column=False, **fields):
    """n decoding requests (dec 10, q up to k) with empty prompts and histories; `fields` from
    lists (matrices ragged, padded with 900 for input_ids and -1 otherwise)."""
    return hand_batch(NGRAM, n, k, li, lp, column, [A], 1, **fields)


def check(d, expected, **kw):
    """op == reference, op == `expected` on the named arrays, every other array unchanged."""
    got = run_ngram(d, **kw)
    NGRAM.assert_expected(got, d, expected)
    return got


# ------------------------------------------------------------------------------------------------
# 1. Hand cases
# ------------------------------------------------------------------------------------------------
def test_match_in_the_prompt():
    # generated: 20 11 12 (step 3). n=3 "20 11 12" nowhere; n=2 "11 12" at prompt[1:3].
    d = batch(
        input_ids=[[10, 11, 12, 13, 14, 15]],
        input_ids_len=[6],
        pre_ids=[[-1, 20, 11, 12]],
        step_idx=[3],
        draft_token_num=[2],
    )
    check(d, dict(draft_tokens=[[A, 13, 14, -1]], seq_lens_this_time=[3]))


def test_match_only_in_the_generated_tokens():
    # generated: 7 8 9 7 8 (step 5); "7 8" is not in the prompt; pre_ids window i=1 is "7 8"
    # (s = 3), the copy stops at step_idx: pre_ids[3:5] = 9 7.
    d = batch(
        input_ids=[[1, 2, 3, 4]], input_ids_len=[4], pre_ids=[[-1, 7, 8, 9, 7, 8]], step_idx=[5]
    )
    check(d, dict(draft_tokens=[[A, 9, 7, -1]], seq_lens_this_time=[3]))


def test_larger_n_wins_over_an_earlier_smaller_match():
    # n=1 "12" would match prompt[0] (-> 50 51); n=2 "11 12" matches prompt[3:5] (-> 60 61).
    d = batch(
        input_ids=[[12, 50, 51, 11, 12, 60, 61]],
        input_ids_len=[7],
        pre_ids=[[-1, 11, 12]],
        step_idx=[2],
        draft_token_num=[2],
    )
    check(d, dict(draft_tokens=[[A, 60, 61, -1]], seq_lens_this_time=[3]), max_ngram_size=2)


def test_larger_n_in_the_history_wins_over_smaller_n_in_the_prompt():
    # n=2 "11 12": not in the prompt, in pre_ids at 1 (s=3, e=min(5, 5)) -> 80 11.
    d = batch(
        input_ids=[[12, 70, 71]],
        input_ids_len=[3],
        pre_ids=[[-1, 11, 12, 80, 11, 12]],
        step_idx=[5],
        draft_token_num=[2],
    )
    check(d, dict(draft_tokens=[[A, 80, 11, -1]], seq_lens_this_time=[3]), max_ngram_size=2)


def test_prompt_beats_history_for_the_same_n():
    d = batch(
        input_ids=[[5, 6, 40, 41]], input_ids_len=[4], pre_ids=[[-1, 5, 6, 30, 5, 6]], step_idx=[5]
    )
    check(d, dict(draft_tokens=[[A, 40, 41, -1]], seq_lens_this_time=[3]), max_ngram_size=2)


def test_match_at_the_end_of_the_prompt_gives_fewer_tokens():
    d = batch(input_ids=[[5, 6, 7, 8, 99]], input_ids_len=[4], pre_ids=[[-1, 6, 7]], step_idx=[2])
    check(d, dict(draft_tokens=[[A, 8, -1, -1]], seq_lens_this_time=[2]))


def test_window_with_nothing_after_it_is_skipped_and_the_history_is_searched():
    # "4 5" only at the very end of the prompt (s == len): skipped; found in pre_ids at 1.
    d = batch(
        input_ids=[[9, 9, 4, 5]],
        input_ids_len=[4],
        pre_ids=[[-1, 4, 5, 6, 4, 5]],
        step_idx=[5],
        draft_token_num=[2],
    )
    check(d, dict(draft_tokens=[[A, 6, 4, -1]], seq_lens_this_time=[3]), max_ngram_size=2)


def test_history_window_ending_at_step_is_skipped_then_smaller_n():
    # n=2 "3 3" matches pre_ids[1:3] but s = 3 = step_idx: skipped. n=1 "3" at 1: s=2 -> pre_ids[2].
    d = batch(pre_ids=[[-1, 3, 3, 3]], step_idx=[3])
    check(d, dict(draft_tokens=[[A, 3, -1, -1]], seq_lens_this_time=[2]), max_ngram_size=2)


def test_pre_ids_slot_zero_is_part_of_the_history():
    # Upstream scans pre_ids window 0, which includes pre_ids[0] (unused: -1 in the target
    # convention). A caller that stores a token there sees it matched.
    d = batch(pre_ids=[[7, 8, 9, 7]], step_idx=[3])
    check(d, dict(draft_tokens=[[A, 8, 9, -1]], seq_lens_this_time=[3]), max_ngram_size=1)


def test_minus_one_in_slot_zero_never_matches_a_real_query():
    d = batch(pre_ids=[[-1, 8, 9, 8]], step_idx=[3])  # "8" at 1 -> 9 8 (e = min(2 + 3, 3))
    check(d, dict(draft_tokens=[[A, 9, -1, -1]], seq_lens_this_time=[2]), max_ngram_size=1)


def test_no_match_keeps_one_token():
    d = batch(
        input_ids=[[1, 2, 3]],
        input_ids_len=[3],
        pre_ids=[[-1, 4, 5]],
        step_idx=[2],
        seq_lens_this_time=[6],
    )
    check(d, dict(seq_lens_this_time=[1]))


def test_step_idx_below_n_skips_that_n():
    # step 1: only n=1 is possible; "5" at prompt[0].
    d = batch(input_ids=[[5, 6, 7]], input_ids_len=[3], pre_ids=[[-1, 5]], step_idx=[1])
    check(d, dict(draft_tokens=[[A, 6, 7, -1]], seq_lens_this_time=[3]), max_ngram_size=3)


def test_prefill_and_idle_requests():
    d = batch(
        3,
        input_ids=[[5, 6, 7]] * 3,
        input_ids_len=[3] * 3,
        pre_ids=[[-1, 5]] * 3,
        step_idx=[1] * 3,
        seq_lens_encoder=[4, 0, 0],
        seq_lens_decoder=[0, 0, 10],
        seq_lens_this_time=[4, 3, 1],
    )
    check(d, dict(draft_tokens=[[A], [A], [A, 6, 7]], seq_lens_this_time=[4, 0, 3]))


@pytest.mark.parametrize("max_dec_len, drafts", [(4, 1), (3, 0), (2, 0)])
def test_max_dec_len_limits_q(max_dec_len, drafts):
    # step 2: q = min(3, max_dec_len - 2 - 1).
    d = batch(
        input_ids=[[6, 7, 1, 2, 3]],
        input_ids_len=[5],
        pre_ids=[[-1, 6, 7]],
        step_idx=[2],
        max_dec_len=[max_dec_len],
    )
    check(d, dict(draft_tokens=[[A, 1, 2, 3][: 1 + drafts]], seq_lens_this_time=[1 + drafts]))


def _three_matching(**fields):
    """Three decoding requests that each match with 3 tokens to spare."""
    return batch(
        3,
        input_ids=[[6, 7, 1, 2, 3, 4]] * 3,
        input_ids_len=[6] * 3,
        pre_ids=[[-1, 6, 7]] * 3,
        step_idx=[2] * 3,
        **fields,
    )


def test_threshold_trims_q_then_skips():
    # remaining 3. b0: rem 2, sum 1: 1+3+2 <= 8 -> 3 drafts (this_time 4).
    # b1: rem 1, sum 5: 5+3+1 > 8 -> q = 8-5-1 = 2; 5+1 < 7 -> 2 drafts.
    # b2: rem 0, sum 4+3+1 = 8: q = 0 and 8 >= 7 -> skipped (1 token).
    check(
        _three_matching(),
        dict(draft_tokens=[[A, 1, 2, 3], [A, 1, 2], [A]], seq_lens_this_time=[4, 3, 1]),
        threshold=8,
    )


def test_threshold_used_up_by_earlier_requests():
    # b0: sum 1, rem 2: 1+2 >= 6-1 is false; 1+3+2 = 6 <= 6 -> 3 drafts. b1: sum 5, rem 1: 6 >= 5 -> skip.
    check(
        _three_matching(),
        dict(draft_tokens=[[A, 1, 2, 3], [A], [A]], seq_lens_this_time=[4, 1, 1]),
        threshold=6,
    )


def test_threshold_counts_prefill_tokens_and_prefill_requests_stay_remaining():
    # b0 prefill (this_time 5, counted in remaining forever). remaining = 3.
    # b1: rem 2, sum 5+1 = 6: 6+3+2 = 11 > 10 -> q = 10-6-2 = 2; 6+2 = 8 < 9 -> 2 drafts.
    # b2: rem 1, sum 5+3+1 = 9: 9+1 >= 9 -> skipped.
    d = _three_matching(
        seq_lens_encoder=[5, 0, 0], seq_lens_decoder=[0, 10, 10], seq_lens_this_time=[5, 1, 1]
    )
    check(d, dict(draft_tokens=[[A], [A, 1, 2], [A]], seq_lens_this_time=[5, 3, 1]), threshold=10)


def test_default_threshold_128_with_a_large_batch_skips_everyone():
    # 200 decoding requests: remaining 199 after b0, sum 1: 1 + 199 >= 127 -> every request skipped.
    d = batch(
        200,
        input_ids=[[6, 7, 1, 2]] * 200,
        input_ids_len=[4] * 200,
        pre_ids=[[-1, 6, 7]] * 200,
        step_idx=[2] * 200,
    )
    got = run_ngram(d, threshold=128)
    assert_same(got["seq_lens_this_time"], np.ones(200, np.int32), "seq_lens_this_time")
    assert_same(got["draft_tokens"], d["draft_tokens"], "draft_tokens")


def _op_only(d, **kw):
    """The op alone (the reference knows no environment) on paddle copies of d."""
    t = {n: to_paddle(d[n]) for n in NGRAM_NAMES}
    ops.ngram_match(*[t[n] for n in NGRAM_NAMES], 3, 3, **kw)
    return {n: to_numpy(t[n]) for n in NGRAM_NAMES}


def test_threshold_from_the_environment(monkeypatch):
    d = _three_matching()
    monkeypatch.setenv("INFER_WITH_REFERENCE_TOKENUM_THRESHOLD", "8")
    got = _op_only(d)
    assert_same(got["seq_lens_this_time"], np.array([4, 3, 1], np.int32), "seq_lens_this_time")
    assert_same(got["draft_tokens"], ragged([[A, 1, 2, 3], [A, 1, 2], [A]], 4), "draft_tokens")
    # an explicit threshold wins over the environment
    got = _op_only(d, threshold=1000)
    assert_same(got["seq_lens_this_time"], np.array([4, 4, 4], np.int32), "seq_lens_this_time")
    monkeypatch.delenv("INFER_WITH_REFERENCE_TOKENUM_THRESHOLD")
    got = _op_only(d)  # default 128
    assert_same(got["seq_lens_this_time"], np.array([4, 4, 4], np.int32), "seq_lens_this_time")
    check(d, dict(draft_tokens=[[A, 1, 2, 3]] * 3, seq_lens_this_time=[4, 4, 4]), threshold=None)


def test_bad_threshold_environment(monkeypatch):
    monkeypatch.setenv("INFER_WITH_REFERENCE_TOKENUM_THRESHOLD", "lots")
    d = _three_matching()
    with pytest.raises(ValueError, match="INFER_WITH_REFERENCE_TOKENUM_THRESHOLD"):
        ops.ngram_match(*[to_paddle(d[n]) for n in NGRAM_NAMES], 3, 3)


def test_draft_token_num_limits_q_and_max_draft_tokens_is_ignored():
    d = _three_matching(draft_token_num=[0, 1, 2])
    check(
        d,
        dict(draft_tokens=[[A], [A, 1], [A, 1, 2]], seq_lens_this_time=[1, 2, 3]),
        max_draft_tokens=0,
    )


def test_column_shaped_per_request_tensors():
    d = batch(
        2,
        column=True,
        input_ids=[[5, 6, 7]] * 2,
        input_ids_len=[3, 3],
        pre_ids=[[-1, 5]] * 2,
        step_idx=[1, 1],
        seq_lens_decoder=[10, 0],
    )
    check(d, dict(draft_tokens=[[A, 6, 7], [A]], seq_lens_this_time=[3, 0]))


def test_empty_batch():
    d = batch(1)
    d["seq_lens_this_time"] = np.zeros(0, np.int32)
    got = run_ngram(d)
    assert got["seq_lens_this_time"].shape == (0,)


# ------------------------------------------------------------------------------------------------
# 2. Grid and Hypothesis: op == reference, invariants, matches really happen
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("max_n", [1, 3, 5])
def test_grid_matches_reference(bsz, max_n):
    rng = np.random.default_rng(bsz * 10 + max_n)
    k = 3
    d = random_batch(rng, bsz, k=k, max_n=max_n, extra_rows=bsz % 3, column=bsz % 2 == 1)
    threshold = 10 * bsz if bsz % 2 else 4 * bsz  # some batches trim, some do not
    drafted = ngram_util.run_and_check(d, hybrid=False, k=k, max_n=max_n, threshold=threshold)
    ngram_util.assert_grid_drafts(drafted, bsz)


@given(
    **ngram_util.RANDOM_SIZES,
    max_n=st.integers(1, 5),
    threshold=st.one_of(st.just(10_000), st.sampled_from([1, 8, 30, 128])),
)
def test_hypothesis_matches_reference(seed, bsz, k, max_n, vocab, width, threshold):
    rng = np.random.default_rng(seed)
    d = random_batch(rng, bsz, k=k, width=width, vocab=vocab, max_n=max_n, plant=0.8)
    ngram_util.run_and_check(d, hybrid=False, k=k, max_n=max_n, threshold=threshold)


def test_random_batches_like_the_hypothesis_ones_really_draft():
    ngram_util.assert_random_batches_draft(hybrid=False)


# ------------------------------------------------------------------------------------------------
# 3. Bad input: ValueError naming the argument, nothing written
# ------------------------------------------------------------------------------------------------
def _expect_error(d, arg, *extra, **kw):
    ngram_util.op_and_reference_refuse("ngram_match", NGRAM_NAMES, d, arg, *(extra or (3, 3)), **kw)


def _good_then_bad(**bad):
    """Request 0 would draft (so a partial write would show), request 1 carries the problem."""
    d = batch(
        2,
        input_ids=[[6, 7, 1, 2]] * 2,
        input_ids_len=[4, 4],
        pre_ids=[[-1, 6, 7]] * 2,
        step_idx=[2, 2],
    )
    for name, v in bad.items():
        d[name] = np.asarray(v, d[name].dtype).reshape(d[name].shape)
    return d


@pytest.mark.parametrize("value", [9, -1])
def test_input_ids_len_out_of_range(value):
    _expect_error(_good_then_bad(input_ids_len=[4, value]), "input_ids_len")


def test_step_idx_past_pre_ids():
    _expect_error(_good_then_bad(step_idx=[2, 8]), "step_idx")


def test_draft_tokens_too_narrow_for_q():
    _expect_error(_good_then_bad(draft_token_num=[3, 4]), "draft_tokens")


def test_rows_of_requests_that_do_not_draft_are_not_checked():
    # prefill / idle / q <= 0 requests may hold any step_idx or input_ids_len: nothing is read.
    d = _good_then_bad(input_ids_len=[4, 99], step_idx=[2, 99])
    for fields in (
        dict(seq_lens_encoder=[0, 3]),
        dict(seq_lens_decoder=[10, 0]),
        dict(max_dec_len=[100, 99]),
        dict(draft_token_num=[3, 0]),
    ):
        e = {n: v.copy() for n, v in d.items()}
        for name, v in fields.items():
            e[name] = np.asarray(v, d[name].dtype)
        got = run_ngram(e)
        assert got["seq_lens_this_time"][0] == 3


def test_max_ngram_size_must_be_positive():
    _expect_error(_good_then_bad(), "max_ngram_size", 0, 3)


@pytest.mark.parametrize(
    "name, value",
    [
        ("input_ids", np.zeros((2, 4), np.int32)),
        ("pre_ids", np.zeros((2, 4, 1), np.int64)),
        ("pre_ids", np.zeros((1, 4), np.int64)),
        ("step_idx", np.zeros(2, np.int32)),
        ("draft_token_num", np.zeros(2, np.int64)),
        ("draft_token_num", np.zeros(1, np.int32)),
        ("seq_lens_encoder", np.zeros((2, 2), np.int32)),
        ("seq_lens_decoder", np.zeros(1, np.int32)),
        ("max_dec_len", np.zeros(2, np.int32)),
        ("input_ids_len", np.zeros(2, np.int32)),
        ("seq_lens_this_time", np.zeros(2, np.int64)),
    ],
)
def test_bad_shapes_and_dtypes(name, value):
    d = _good_then_bad()
    d[name] = value
    ngram_util.op_refuses("ngram_match", NGRAM_NAMES, d, name, 3, 3)


# ------------------------------------------------------------------------------------------------
# Extreme max_dec_len / step_idx: max_dec_len - step_idx - 1 is computed without int64 overflow
# ------------------------------------------------------------------------------------------------
I64 = np.iinfo(np.int64)


@pytest.mark.parametrize(
    "max_dec_len, step_idx, drafts",
    [
        (I64.min, 2, 0),  # used to wrap to a huge positive budget and draft
        (I64.min + 1, 2, 0),
        (I64.min, I64.max, 0),
        (-1, 2, 0),
        (I64.max, 2, 3),
        (I64.max, -1, 0),  # no query: nothing searched
        (I64.max, I64.min, 0),
        (I64.min, I64.min, 0),
    ],
)
def test_extreme_max_dec_len_and_step_idx_match_the_reference(max_dec_len, step_idx, drafts):
    d = batch(
        n=2,
        input_ids=[[6, 7, 1, 2, 3]] * 2,
        input_ids_len=[5, 5],
        pre_ids=[[-1, 6, 7]] * 2,
        step_idx=[step_idx, 2],
        max_dec_len=[max_dec_len, 100],
    )
    expected = [[A, 1, 2, 3][: 1 + drafts], [A, 1, 2, 3]]
    check(d, dict(draft_tokens=expected, seq_lens_this_time=[1 + drafts, 4]))


@pytest.mark.parametrize("max_dec_len", [I64.min, I64.min + 1, I64.max])
@pytest.mark.parametrize("step_idx", [2, I64.min, I64.max])
def test_hybrid_extreme_max_dec_len_and_step_idx_match_the_reference(max_dec_len, step_idx):
    d = batch(
        n=2,
        input_ids=[[6, 7, 1, 2, 3]] * 2,
        input_ids_len=[5, 5],
        pre_ids=[[-1, 6, 7]] * 2,
        step_idx=[step_idx, 2],
        max_dec_len=[max_dec_len, 100],
    )
    run_hybrid({k: v for k, v in d.items() if k in HYBRID_NAMES})
