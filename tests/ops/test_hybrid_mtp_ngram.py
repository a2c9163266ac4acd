"""Tests of fd_mtp.ops.hybrid_mtp_ngram (spec ops.md §6.7) against its numpy reference.

Hand cases with exact expected arrays written from the spec, an odd-size grid, Hypothesis
batches with planted n-gram repeats (asserting that matches happen), invariants, bad input.
"""

from __future__ import annotations

import ngram_util
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ngram_util import HYBRID, HYBRID_NAMES, hand_batch, random_batch, run_hybrid
from util import BATCH_GRID, assert_same, ragged, to_numpy, to_paddle

import fd_mtp.ops as ops

A, D = 77, 88  # last accepted token, an MTP draft
K = 3


def batch(n=1, li=8, lp=8, column=False, **fields):
    """n requests with 1 + one MTP draft (seq_lens_this_time 2, draft row [A, D]), decoder 10,
    empty prompts and histories; `fields` from lists (matrices ragged)."""
    return hand_batch(HYBRID, n, K, li, lp, column, [A, D], 2, **fields)


def check(d, expected, **kw):
    got = run_hybrid(d, **kw)
    HYBRID.assert_expected(got, d, expected)
    return got


# ------------------------------------------------------------------------------------------------
# 1. Hand cases
# ------------------------------------------------------------------------------------------------
def test_extends_the_mtp_drafts_from_the_prompt():
    # q0 = 2, q = K - q0 + 1 = 2; query "5 6" (history 9 5 6, step 2) at prompt[0:2] -> 7 8.
    d = batch(input_ids=[[5, 6, 7, 8, 9]], input_ids_len=[5], pre_ids=[[9, 5, 6]], step_idx=[2])
    check(d, dict(draft_tokens=[[A, D, 7, 8]], seq_lens_this_time=[4]))


def test_history_window_zero_is_a_real_token():
    # Proposer convention: pre_ids[0] is the first token. "5" (step 2) matches pre_ids[0].
    d = batch(pre_ids=[[5, 40, 5]], step_idx=[2])
    check(d, dict(draft_tokens=[[A, D, 40, -1]], seq_lens_this_time=[3]), max_ngram_size=1)


def test_larger_n_first_and_min_ngram_size():
    # n=2 "11 12" at prompt[3:5] -> 60 61 beats n=1 "12" at prompt[0] -> 50 51.
    d = batch(
        input_ids=[[12, 50, 51, 11, 12, 60, 61]],
        input_ids_len=[7],
        pre_ids=[[9, 11, 12]],
        step_idx=[2],
    )
    check(d, dict(draft_tokens=[[A, D, 60, 61]], seq_lens_this_time=[4]), max_ngram_size=2)
    # only a 1-gram matches: min_ngram_size 2 finds nothing, 1 finds it.
    d = batch(input_ids=[[12, 50, 51]], input_ids_len=[3], pre_ids=[[9, 11, 12]], step_idx=[2])
    check(d, dict(), max_ngram_size=2, min_ngram_size=2)
    check(
        d,
        dict(draft_tokens=[[A, D, 50, 51]], seq_lens_this_time=[4]),
        max_ngram_size=2,
        min_ngram_size=1,
    )


def test_match_only_in_the_history_and_the_window_ending_at_step_is_skipped():
    # "3 3" only at pre_ids[1:3], where s = 3 = step_idx: skipped, so n=2 finds nothing;
    # with min_ngram_size 1, "3" at pre_ids[1] (s = 2) gives pre_ids[2].
    d = batch(pre_ids=[[1, 3, 3, 3]], step_idx=[3])
    check(d, dict(), max_ngram_size=2, min_ngram_size=2)
    check(
        d,
        dict(draft_tokens=[[A, D, 3, -1]], seq_lens_this_time=[3]),
        max_ngram_size=2,
        min_ngram_size=1,
    )


def test_match_at_the_end_of_the_prompt_gives_fewer_tokens():
    d = batch(input_ids=[[5, 6, 7]], input_ids_len=[3], pre_ids=[[5, 6]], step_idx=[1])
    check(d, dict(draft_tokens=[[A, D, 7, -1]], seq_lens_this_time=[3]), max_ngram_size=2)


def test_requests_that_cannot_draft_are_untouched():
    # q0 = 0 (stopped); q0 = K + 1 (full: q = 0); q0 = 3 with max_dec_len reached (q = 0).
    d = batch(
        3,
        input_ids=[[5, 6, 7, 8]] * 3,
        input_ids_len=[4] * 3,
        pre_ids=[[5, 6]] * 3,
        step_idx=[1] * 3,
        seq_lens_this_time=[0, K + 1, 3],
        max_dec_len=[100, 100, 2],
        draft_tokens=[[A], [A, D, D, D], [A, D, D]],
    )
    check(d, dict(), max_ngram_size=2)


@pytest.mark.parametrize("max_dec_len, drafts", [(3, 1), (2, 0), (1, 0)])
def test_max_dec_len_limits_q(max_dec_len, drafts):
    # step 1: q = min(2, max_dec_len - 1 - 1).
    d = batch(
        input_ids=[[5, 6, 7, 8]],
        input_ids_len=[4],
        pre_ids=[[5, 6]],
        step_idx=[1],
        max_dec_len=[max_dec_len],
    )
    check(
        d,
        dict(draft_tokens=[[A, D, 7, 8][: 2 + drafts]], seq_lens_this_time=[2 + drafts]),
        max_ngram_size=2,
    )


def _three_single(**fields):
    """Three requests with q0 = 1 (no MTP draft), each matching with >= 3 tokens to spare."""
    return batch(
        3,
        input_ids=[[5, 6, 1, 2, 3, 4]] * 3,
        input_ids_len=[6] * 3,
        pre_ids=[[9, 5, 6]] * 3,
        step_idx=[2] * 3,
        seq_lens_this_time=[1] * 3,
        draft_tokens=[[A]] * 3,
        **fields,
    )


def test_threshold_trims_q_then_skips():
    # remaining 3, q 3. b0: rem 2, sum 1 -> 3 drafts. b1: rem 1, sum 5: 5+3+1 <= 11 -> 3 drafts.
    # b2: rem 0, sum 9: 9+3 > 11 -> q = 2; 9 < 10 -> 2 drafts.
    check(
        _three_single(),
        dict(draft_tokens=[[A, 1, 2, 3], [A, 1, 2, 3], [A, 1, 2]], seq_lens_this_time=[4, 4, 3]),
        threshold=11,
    )
    # threshold 10: b2: q = 1 but 9 + 0 >= 9 -> skipped.
    check(
        _three_single(),
        dict(draft_tokens=[[A, 1, 2, 3], [A, 1, 2, 3], [A]], seq_lens_this_time=[4, 4, 1]),
        threshold=10,
    )


def test_remaining_counts_decoders_but_every_drafting_request_decrements_it():
    # seq_lens_decoder = [0, 0, 10]: remaining starts at 1; b0 drafts anyway (rem 0), b1 too
    # (rem -1), b2 (rem -2): b2's sum 4+4+1 = 9, 9 + 3 - 2 = 10 <= 10 -> 3 drafts.
    d = _three_single(seq_lens_decoder=[0, 0, 10])
    check(d, dict(draft_tokens=[[A, 1, 2, 3]] * 3, seq_lens_this_time=[4, 4, 4]), threshold=10)


def test_threshold_from_the_environment(monkeypatch):
    d = _three_single()

    def op_only(**kw):  # the reference knows no environment
        t = {n: to_paddle(d[n]) for n in HYBRID_NAMES}
        ops.hybrid_mtp_ngram(*[t[n] for n in HYBRID_NAMES], 3, 1, K, **kw)
        return to_numpy(t["seq_lens_this_time"]), to_numpy(t["draft_tokens"])

    monkeypatch.setenv("SPEC_TOKENUM_THRESHOLD", "10")
    this_time, drafts = op_only()
    assert_same(this_time, np.array([4, 4, 1], np.int32), "seq_lens_this_time")
    assert_same(drafts, ragged([[A, 1, 2, 3], [A, 1, 2, 3], [A]], K + 1), "draft_tokens")
    assert_same(op_only(threshold=1024)[0], np.array([4, 4, 4], np.int32), "explicit threshold")
    monkeypatch.setenv("SPEC_TOKENUM_THRESHOLD", "ten")
    with pytest.raises(ValueError, match="SPEC_TOKENUM_THRESHOLD"):
        op_only()
    monkeypatch.delenv("SPEC_TOKENUM_THRESHOLD")  # default 1024
    assert_same(op_only()[0], np.array([4, 4, 4], np.int32), "default threshold")
    check(d, dict(draft_tokens=[[A, 1, 2, 3]] * 3, seq_lens_this_time=[4] * 3), threshold=None)


def test_draft_token_num_is_unused():
    d = _three_single(draft_token_num=[0, 0, 0])
    check(d, dict(draft_tokens=[[A, 1, 2, 3]] * 3, seq_lens_this_time=[4] * 3))


def test_column_shaped_per_request_tensors():
    d = batch(
        2,
        column=True,
        input_ids=[[5, 6, 7, 8, 9]] * 2,
        input_ids_len=[5, 5],
        pre_ids=[[9, 5, 6]] * 2,
        step_idx=[2, 2],
        seq_lens_this_time=[2, 0],
    )
    check(d, dict(draft_tokens=[[A, D, 7, 8], [A, D]], seq_lens_this_time=[4, 0]))


# ------------------------------------------------------------------------------------------------
# 2. Grid and Hypothesis
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("n_range", [(1, 1), (2, 3), (1, 5)])
def test_grid_matches_reference(bsz, n_range):
    n_min, n_max = n_range
    rng = np.random.default_rng(bsz * 7 + n_max)
    k = 4
    d = random_batch(
        rng,
        bsz,
        hybrid=True,
        k=k,
        max_n=n_max,
        min_n=n_min,
        extra_rows=bsz % 3,
        column=bsz % 2 == 0,
    )
    threshold = 10 * bsz if bsz % 2 else 3 * bsz
    drafted = ngram_util.run_and_check(
        d, hybrid=True, k=k, max_n=n_max, threshold=threshold, n_min=n_min
    )
    ngram_util.assert_grid_drafts(drafted, bsz)


@given(
    **ngram_util.RANDOM_SIZES,
    n_max=st.integers(1, 5),
    n_min_offset=st.integers(0, 4),
    threshold=st.one_of(st.just(10_000), st.sampled_from([1, 8, 30, 1024])),
)
def test_hypothesis_matches_reference(seed, bsz, k, n_max, n_min_offset, vocab, width, threshold):
    n_min = max(1, n_max - n_min_offset)
    rng = np.random.default_rng(seed)
    d = random_batch(
        rng, bsz, hybrid=True, k=k, width=width, vocab=vocab, max_n=n_max, min_n=n_min, plant=0.8
    )
    ngram_util.run_and_check(d, hybrid=True, k=k, max_n=n_max, threshold=threshold, n_min=n_min)


def test_random_batches_like_the_hypothesis_ones_really_draft():
    ngram_util.assert_random_batches_draft(hybrid=True)


# ------------------------------------------------------------------------------------------------
# 3. Bad input
# ------------------------------------------------------------------------------------------------
def _expect_error(d, arg, sizes=(3, 1, K), **kw):
    ngram_util.op_and_reference_refuse("hybrid_mtp_ngram", HYBRID_NAMES, d, arg, *sizes, **kw)


def _good_then_bad(**bad):
    d = _three_single()
    for name, v in bad.items():
        d[name] = np.asarray(v, d[name].dtype).reshape(d[name].shape)
    return d


@pytest.mark.parametrize("value", [9, -1])
def test_input_ids_len_out_of_range(value):
    _expect_error(_good_then_bad(input_ids_len=[6, 6, value]), "input_ids_len")


def test_step_idx_past_pre_ids():
    _expect_error(_good_then_bad(step_idx=[2, 8, 2]), "step_idx")


def test_negative_seq_lens_this_time():
    _expect_error(_good_then_bad(seq_lens_this_time=[1, 1, -2]), "seq_lens_this_time")


def test_draft_tokens_narrower_than_k_plus_one():
    d = _good_then_bad()
    _expect_error(d, "draft_tokens", sizes=(3, 1, K + 1))  # q0 + q = 1 + 4 > 4 columns


@pytest.mark.parametrize(
    "sizes, arg",
    [((0, 1, K), "max_ngram_size"), ((3, 0, K), "min_ngram_size"), ((2, 3, K), "min_ngram_size")],
)
def test_bad_ngram_sizes(sizes, arg):
    _expect_error(_good_then_bad(), arg, sizes=sizes)


@pytest.mark.parametrize(
    "name, value",
    [
        ("input_ids", np.zeros(3, np.int64)),
        ("pre_ids", np.zeros((2, 4), np.int64)),
        ("step_idx", np.zeros(3, np.float32)),
        ("draft_tokens", np.zeros((3, 4), np.int32)),
        ("seq_lens_decoder", np.zeros((3, 2), np.int32)),
        ("max_dec_len", np.zeros(2, np.int64)),
        ("input_ids_len", np.zeros(3, np.int32)),
    ],
)
def test_bad_shapes_and_dtypes(name, value):
    d = _good_then_bad()
    d[name] = value
    ngram_util.op_refuses("hybrid_mtp_ngram", HYBRID_NAMES, d, name, 3, 1, K)
