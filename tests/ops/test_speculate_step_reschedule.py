"""Tests of fd_mtp.ops.speculate_step_reschedule (spec ops.md §5.13, FD_DISABLED_RECOVER) against
its numpy reference: hand cases (every stopped request frees its decode blocks, preemption of the
biggest holder with no exemption, the victim handed back rather than block-stepped, several
victims, the victim leaving the need list, free-list exhaustion), the odd-size grid, Hypothesis
properties (block conservation: no block lost or owned twice; the arguments it never reads stay
untouched), unused arguments of any dtype, bad input (ValueError naming the argument, nothing
written)."""

from __future__ import annotations

import numpy as np
from test_speculate_step import (
    BS,
    ENC_DEC,
    NAMES,
    K,
    bad_input_tests,
    batch,
    checked_or_both_refuse,
    expect_of,
    live_blocks,
    on_grid,
    on_random_states,
    op_raises_and_unchanged,
    random_batch,
    run_op,
)
from util import assert_same, to_numpy, to_paddle

import fd_mtp.ops as ops
from fd_mtp.schema import written_args

OP = "speculate_step_reschedule"
WRITTEN = set(written_args(OP))  # from the schema


def both(d, bs=BS, k=K):
    out = run_op(OP, NAMES, d, bs, k)
    for n in set(NAMES) - WRITTEN:
        assert_same(out[n], d[n], n + " (never written)")
    return out


def expect(out, before, **fields):
    expect_of(NAMES, out, before, **fields)


# ------------------------------------------------------------------------------------------------
# Hand cases
# ------------------------------------------------------------------------------------------------
def test_every_stopped_request_frees_its_decode_blocks():
    # Request 0 is block-stepped but still holds 2 decode blocks: speculate_step_paddle would keep
    # them; here every stopped request returns them. Request 1 finished normally. Request 2 pops.
    d = batch(
        3,
        stop_flags=[True, True, False],
        is_block_step=[True, False, False],
        seq_lens_this_time=[0, 0, 2],
        seq_lens_decoder=[0, 0, 6],
        block_tables=[[0, 10, 11, -1], [1, 12, -1, -1], [2, 13, -1, -1]],
        used_list_len=[2, 1, 1],
        free_list=[0, 0, 0, 0],
        free_list_len=[0],
    )
    out = both(d)
    expect(
        out,
        d,
        first_token_ids=[-1, -1, 72],
        block_tables=[[0, -1, -1, -1], [1, -1, -1, -1], [2, 13, 12, -1]],
        encoder_block_lens=[0, 0, 1],
        used_list_len=[0, 0, 2],
        free_list=[10, 11, 12, 0],
        free_list_len=[2],
    )


def test_preempts_the_biggest_holder_with_no_exemption_and_hands_it_back():
    # Width 12: max_decoder_block_num = 3, which request 0 holds; speculate_step_paddle would spare
    # it. Here it is preempted: stopped, this_time / dec / encoder_block_lens / used_list_len 0,
    # NOT block-stepped, accept_num kept, step_block_list untouched. Its encoder block 0 stays in
    # the row (the scheduler owns it).
    d = batch(
        2,
        nb=5,
        width=12,
        seq_lens_decoder=[14, 6],
        block_tables=[[0, 10, 11, 12, -1], [1, 13, -1, -1, -1]],
        used_list_len=[3, 1],
        free_list=np.zeros(4, np.int32),
        free_list_len=[0],
    )
    out = both(d)
    expect(
        out,
        d,
        stop_flags=[True, False],
        seq_lens_this_time=[0, 2],
        seq_lens_decoder=[0, 6],
        block_tables=[[0, -1, -1, -1, -1], [1, 13, 12, -1, -1]],
        encoder_block_lens=[0, 1],
        used_list_len=[0, 2],
        free_list=[10, 11, 12, 0],
        free_list_len=[2],
    )


def test_several_victims_in_order_and_a_victim_leaves_the_need_list():
    # All four need a block (slot (6 + 2) // 4 = 2 or (10 + 2) // 4 = 3), none free. Holdings
    # 1, 2, 2, 1: request 1 goes first (2 blocks, lower index), then request 2 (both were in the
    # need list, so each frees 2 and removes 1 need): after request 1, need 3 > free 2; after
    # request 2, need 2 <= free 4. Requests 0 and 3 pop 24 then 23.
    d = batch(
        4,
        nb=5,
        width=20,
        seq_lens_decoder=[6, 10, 10, 6],
        block_tables=[
            [0, 20, -1, -1, -1],
            [1, 21, 22, -1, -1],
            [2, 23, 24, -1, -1],
            [3, 25, -1, -1, -1],
        ],
        used_list_len=[1, 2, 2, 1],
        need_block_list=np.full(4, -1, np.int32),
        free_list=np.zeros(6, np.int32),
        free_list_len=[0],
    )
    out = both(d)
    expect(
        out,
        d,
        stop_flags=[False, True, True, False],
        seq_lens_this_time=[2, 0, 0, 2],
        seq_lens_decoder=[6, 0, 0, 6],
        block_tables=[
            [0, 20, 24, -1, -1],
            [1, -1, -1, -1, -1],
            [2, -1, -1, -1, -1],
            [3, 25, 23, -1, -1],
        ],
        encoder_block_lens=[1, 0, 0, 1],
        used_list_len=[2, 0, 0, 2],
        free_list=[21, 22, 23, 24, 0, 0],
        free_list_len=[2],
    )


def test_a_victim_outside_the_need_list():
    # Request 1 holds 3 decode blocks but its slot (2 + 2) // 4 = 1 is filled: it is still the
    # victim, and the need list keeps request 0, which pops the top (13).
    d = batch(
        2,
        nb=5,
        width=20,
        seq_lens_decoder=[6, 2],
        block_tables=[[0, 10, -1, -1, -1], [1, 11, 12, 13, -1]],
        used_list_len=[1, 3],
        free_list=np.zeros(4, np.int32),
        free_list_len=[0],
    )
    out = both(d)
    assert out["block_tables"].tolist() == [[0, 10, 13, -1, -1], [1, -1, -1, -1, -1]]
    assert out["free_list_len"].tolist() == [2] and out["stop_flags"].tolist() == [False, True]


def test_free_list_exhaustion_raises_where_upstream_spins():
    # Both need a block; nobody holds a decode block to hand back.
    d = batch(2, seq_lens_decoder=[6, 6], block_tables=[[5, -1, -1, -1]] * 2)
    op_raises_and_unchanged(OP, NAMES, d, "free_list")


def test_arguments_it_never_reads_may_have_any_dtype_and_shape():
    # FastDeploy passes them; the op ignores them (is_block_step as int32, the step lists as
    # int64, input_ids as float32, ...), and the result equals the reference on the usual input.
    d = good()
    want = both(d)
    odd = dict(d)
    odd["ori_seq_lens_encoder"] = np.zeros(5, np.int64)
    odd["seq_lens_encoder"] = np.zeros((1, 3), np.float32)
    odd["is_block_step"] = d["is_block_step"].astype(np.int32)
    odd["step_block_list"] = np.zeros(0, np.int64)
    odd["step_lens"] = np.zeros(3, np.int32)
    odd["recover_block_list"] = np.zeros(1, np.int64)
    odd["recover_lens"] = np.array([7], np.int32)  # not even read, so not required to be 0
    odd["input_ids"] = np.zeros((1, 2), np.float32)
    odd["pre_ids"] = np.zeros(3, np.int32)
    odd["step_idx"] = np.zeros(1, np.int32)
    odd["accept_num"] = np.zeros(2, np.int64)
    t = [to_paddle(odd[n]) for n in NAMES]
    ops.speculate_step_reschedule(*t, BS, ENC_DEC, K)
    for x, n in zip(t, NAMES):
        assert_same(to_numpy(x), want[n] if n in WRITTEN else odd[n], n)


# ------------------------------------------------------------------------------------------------
# Grid and properties
# ------------------------------------------------------------------------------------------------
def check_invariants(before, after):
    blocks = live_blocks(after)
    values, counts = np.unique(blocks, return_counts=True)
    assert np.all(counts == 1), f"block ids owned twice: {values[counts > 1][:5]}"
    assert np.array_equal(np.sort(blocks), np.sort(live_blocks(before))), "blocks lost or created"
    assert after["need_block_len"][0] == 0 and np.all(after["need_block_list"] == -1)
    stopped = after["stop_flags"]
    assert np.all(after["used_list_len"][stopped] == 0)  # stopped requests hold no decode block
    victims = stopped & ~before["stop_flags"]
    assert np.all(after["seq_lens_this_time"][victims] == 0)
    assert np.all(after["seq_lens_decoder"][victims] == 0)
    assert np.all(after["encoder_block_lens"][victims] == 0)
    # A running request that gained a decode block holds a block in the slot it needed.
    grew = np.flatnonzero(after["used_list_len"] > before["used_list_len"])
    for b in grew:
        assert not stopped[b] and after["used_list_len"][b] == before["used_list_len"][b] + 1
        assert before["block_tables"][b].tolist().count(-1) > after["block_tables"][
            b
        ].tolist().count(-1)


def compare_or_both_raise(d, bs=4, k=2):
    return checked_or_both_refuse(OP, NAMES, both, check_invariants, d, bs, k)


def random_state(rng, bsz, nb, bs, k, width, tight=False):
    """random_batch of speculate_step_paddle, where a parked request holds no decode block (its
    used_list_len is 0: this op zeroes it when it hands a request back)."""
    d = random_batch(rng, bsz, nb=nb, bs=bs, k=k, width=width, tight=tight)
    d["used_list_len"][d["is_block_step"]] = 0
    return d


@on_grid
def test_grid_matches_reference(bsz, bs, k):
    rng = np.random.default_rng([bsz, bs, k, 2])
    d = random_state(rng, bsz, nb=8, bs=bs, k=k, width=8 * bs)
    assert compare_or_both_raise(d, bs, k) is not None


@on_random_states
def test_property_matches_reference_and_conserves_blocks(bsz, nb, bs, k, tight, seed):
    rng = np.random.default_rng(seed)
    d = random_state(rng, bsz, nb=nb, bs=bs, k=k, width=nb * bs, tight=tight)
    compare_or_both_raise(d, bs, k)


# ------------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument; nothing written
# ------------------------------------------------------------------------------------------------
def good():
    """Request 0 needs slot 2 and holds 1 decode block, 1 block is free; request 1 is stopped."""
    return batch(
        2,
        seq_lens_decoder=[6, 0],
        seq_lens_this_time=[2, 0],
        stop_flags=[False, True],
        block_tables=[[5, 20, -1, -1], [6, 21, -1, -1]],
        used_list_len=[1, 1],
        free_list=[30, 0, 0],
        free_list_len=[1],
    )


BAD = {
    "free_list_too_small": ("free_list", dict(free_list=[30], free_list_len=[1])),
    "free_list_len_negative": ("free_list_len", dict(free_list_len=[-1])),
    "free_list_len_past_list": ("free_list_len", dict(free_list_len=[4])),
    "used_past_row": ("used_list_len", dict(used_list_len=[4, 0])),
    "used_negative": ("used_list_len", dict(used_list_len=[0, -1])),
    "need_len_nonzero": ("need_block_len", dict(need_block_len=[1])),
    "negative_decoder": ("seq_lens_decoder", dict(seq_lens_decoder=[-6, 0])),
    "need_list_too_small": ("need_block_list", dict(need_block_list=np.zeros(0, np.int32))),
}


BAD_TYPES = {
    "stop_int32": ("stop_flags", lambda a: a.astype(np.int32)),
    "this_time_2d": ("seq_lens_this_time", lambda a: np.zeros((2, 2), np.int32)),
    "tables_int64": ("block_tables", lambda a: a.astype(np.int64)),
    "used_short": ("used_list_len", lambda a: a[:1].copy()),
    "free_list_int64": ("free_list", lambda a: a.astype(np.int64)),
    "first_token_short": ("first_token_ids", lambda a: a[:1].copy()),
    "need_len_two": ("need_block_len", lambda a: np.zeros(2, np.int32)),
}
test_bad_values, test_bad_dtypes_and_shapes = bad_input_tests(OP, NAMES, good, BAD, BAD_TYPES)


def test_good_args_are_good():
    # Request 1 (stopped) returns 21; request 0 pops it from the top.
    out = both(good())
    assert out["block_tables"].tolist() == [[5, 20, 21, -1], [6, -1, -1, -1]]
    assert out["free_list"].tolist() == [30, 21, 0] and out["free_list_len"].tolist() == [1]
