"""Tests of fd_mtp.ops.speculate_step_system_cache (spec ops.md §5.13, prefix caching) against its
numpy reference: hand cases (the recovered request's seq_lens_decoder comes from
ori_seq_lens_decoder; preemption order, the step_max_block_flag retry and free-list exhaustion
as in speculate_step_paddle), the odd-size grid, Hypothesis properties (block conservation, and
"equal to speculate_step_paddle except the recovered request's seq_lens_decoder"), bad input
(ValueError naming the argument, nothing written)."""

from __future__ import annotations

import numpy as np
from test_speculate_step import BAD as STEP_BAD
from test_speculate_step import (
    BS,
    ENC_DEC,
    NAMES,
    K,
    bad_input_tests,
    batch,
    both_refuse,
    check_invariants,
    expect_of,
    on_grid,
    on_random_states,
    op_raises_and_unchanged,
    random_batch,
    run_op,
)
from test_speculate_step import good as step_good
from util import assert_same

import fd_mtp.reference as reference

OP = "speculate_step_system_cache"
# FastDeploy's order: ori_seq_lens_decoder right after ori_seq_lens_encoder.
SC_NAMES = NAMES[:3] + ("ori_seq_lens_decoder",) + NAMES[3:]


def with_cached(d, cached=None):
    d = dict(d)
    n = d["seq_lens_this_time"].size
    d["ori_seq_lens_decoder"] = (
        np.arange(n, dtype=np.int32) + 100 if cached is None else np.asarray(cached, np.int32)
    )
    return d


def both(d, bs=BS, k=K):
    return run_op(OP, SC_NAMES, d, bs, k)


def expect(out, before, **fields):
    expect_of(SC_NAMES, out, before, **fields)


def paddle_variant(d, bs=BS, k=K):
    """The reference speculate_step_paddle on the same state (no ori_seq_lens_decoder)."""
    e = {n: d[n].copy() for n in NAMES}
    reference.speculate_step_paddle(*[e[n] for n in NAMES], bs, ENC_DEC, k)
    return e


# ------------------------------------------------------------------------------------------------
# Hand cases
# ------------------------------------------------------------------------------------------------
def test_recovery_restores_the_cached_decoder_length():
    # Request 0 is parked (1 decode block). 3 free blocks: it recovers with min(1 + 1, 16 // 4 - 1)
    # = 2 blocks (31 then 30 from the top), re-prefills prompt 3 + 2 generated tokens, and its
    # seq_lens_decoder becomes the cached 2 (speculate_step_paddle leaves it 0).
    d = with_cached(
        batch(
            2,
            stop_flags=[True, False],
            is_block_step=[True, False],
            seq_lens_this_time=[0, 2],
            seq_lens_decoder=[0, 1],
            block_tables=[[3, -1, -1, -1], [4, -1, -1, -1]],
            used_list_len=[1, 0],
            step_block_list=[0, -1],
            step_lens=[1],
            step_idx=[2, 0],
            free_list=[29, 30, 31],
            free_list_len=[3],
        ),
        cached=[2, 7],
    )
    out = both(d)
    ids = d["input_ids"].copy()
    ids[0, 0] = 70
    ids[0, 3:5] = d["pre_ids"][0, 1:3]
    expect(
        out,
        d,
        stop_flags=[False, False],
        is_block_step=[False, False],
        seq_lens_this_time=[5, 2],
        seq_lens_encoder=[5, 0],
        seq_lens_decoder=[2, 1],
        used_list_len=[2, 0],
        block_tables=[[3, 31, 30, -1], [4, -1, -1, -1]],
        free_list_len=[1],
        step_block_list=[-1, -1],
        step_lens=[0],
        recover_block_list=[0, -1],
        input_ids=ids,
    )
    plain = paddle_variant(d)
    for n in NAMES:
        want = plain[n].copy()
        if n == "seq_lens_decoder":
            want[0] = 2  # the one difference
        assert_same(out[n], want, n + " (vs speculate_step_paddle)")


def test_preempted_then_recovered_in_the_same_call_gets_its_cached_length():
    # Both hold max_decoder_block_num = 2 (width 8): the flag retry preempts request 0 (tie), whose
    # blocks 10 11 go back; request 1 pops 11; request 0 recovers at once with block 10.
    d = with_cached(
        batch(
            2,
            width=8,
            seq_lens_decoder=[11, 11],
            block_tables=[[0, 10, 11, -1], [1, 12, 13, -1]],
            used_list_len=[2, 2],
            step_idx=[2, 0],
        ),
        cached=[9, 9],
    )
    out = both(d)
    assert out["seq_lens_decoder"].tolist() == [9, 11]
    assert out["recover_block_list"].tolist() == [0, -1]
    assert out["block_tables"].tolist() == [[0, 10, -1, -1], [1, 12, 13, 11]]
    assert out["accept_num"].tolist() == [0, 2]  # the preemption zeroed it


def test_preemption_order_is_most_blocks_then_lowest_index():
    # Three need a block (slot (6 + 2) // 4 = 2), none free: 1 and 2 hold 2 decode blocks each, 0
    # holds 1. Request 1 (tie with 2, lower index) is preempted first: 2 blocks cover the other two.
    d = with_cached(
        batch(
            3,
            nb=5,
            width=20,
            seq_lens_decoder=[6, 10, 10],
            block_tables=[[0, 20, -1, -1, -1], [1, 21, 22, -1, -1], [2, 23, 24, -1, -1]],
            used_list_len=[1, 2, 2],
        )
    )
    out = both(d)
    assert out["step_block_list"].tolist() == [1, -1, -1]
    assert out["stop_flags"].tolist() == [False, True, False]
    assert out["block_tables"].tolist() == [
        [0, 20, 22, -1, -1],
        [1, -1, -1, -1, -1],
        [2, 23, 24, 21, -1],
    ]
    # Not recovered this call: it wants min(2 + 1, 5 - 1) = 3 blocks, none are left.
    assert out["seq_lens_decoder"].tolist() == [6, 0, 10]


def test_free_list_exhausted_raises_and_writes_nothing():
    d = with_cached(batch(2, seq_lens_decoder=[6, 6], block_tables=[[5, -1, -1, -1]] * 2))
    op_raises_and_unchanged(OP, SC_NAMES, d, "free_list")


# ------------------------------------------------------------------------------------------------
# Grid and properties
# ------------------------------------------------------------------------------------------------
def compare_or_both_raise(d, bs=4, k=2):
    if both_refuse(OP, SC_NAMES, d, bs, k):
        return None
    after = both(d, bs, k)
    check_invariants(d, after)
    plain = paddle_variant(d, bs, k)
    recovered = d["is_block_step"] & ~after["is_block_step"]
    for n in NAMES:
        want = plain[n].copy()
        if n == "seq_lens_decoder":
            want[recovered] = d["ori_seq_lens_decoder"][recovered]
        assert_same(after[n], want, n + " (vs speculate_step_paddle)")
    return after


@on_grid
def test_grid_matches_reference(bsz, bs, k):
    rng = np.random.default_rng([bsz, bs, k, 1])
    d = with_cached(random_batch(rng, bsz, nb=8, bs=bs, k=k, width=8 * bs))
    assert compare_or_both_raise(d, bs, k) is not None


@on_random_states
def test_property_matches_reference_and_conserves_blocks(bsz, nb, bs, k, tight, seed):
    rng = np.random.default_rng(seed)
    d = random_batch(rng, bsz, nb=nb, bs=bs, k=k, width=nb * bs, tight=tight)
    d = with_cached(d, rng.integers(0, 50, bsz))
    compare_or_both_raise(d, bs, k)


# ------------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument; nothing written
# ------------------------------------------------------------------------------------------------
def good():
    return with_cached(step_good())


# speculate_step_paddle's cases (on the same good() batch plus ori_seq_lens_decoder)
BAD = {
    case: STEP_BAD[case]
    for case in (
        "used_past_row",
        "need_len_nonzero",
        "recover_lens_nonzero",
        "step_lens_past_list",
        "negative_decoder",
        "input_ids_too_narrow",
        "step_idx_past_pre_ids",
    )
}


BAD_TYPES = {
    "ori_dec_int64": ("ori_seq_lens_decoder", lambda a: a.astype(np.int64)),
    "ori_dec_short": ("ori_seq_lens_decoder", lambda a: a[:1].copy()),
    "tables_int64": ("block_tables", lambda a: a.astype(np.int64)),
    "stop_int32": ("stop_flags", lambda a: a.astype(np.int32)),
}
test_bad_values, test_bad_dtypes_and_shapes = bad_input_tests(OP, SC_NAMES, good, BAD, BAD_TYPES)


def test_good_args_are_good():
    out = both(good())
    assert out["block_tables"].tolist() == [[5, 20, 30, -1], [6, -1, -1, -1]]
