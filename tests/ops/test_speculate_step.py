"""Tests of fd_mtp.ops.speculate_step_paddle (spec ops.md §5.13, §11) against its numpy reference:
named hand cases with exact arrays (release, allocation, preemption, the step_max_block_flag
retry, LIFO recovery with its re-prefill), the odd-size grid, Hypothesis properties with
block-accounting invariants, and bad input (ValueError naming the argument, nothing written).
Multi-step scenarios live in test_block_scenarios.py."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, assert_same, run_both, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.testing.builders.blocks import pool_tables
from fd_mtp.testing.op_inputs import positional

OP = "speculate_step_paddle"
NAMES = tuple(positional(OP)[:23])  # the tensors, from the schema
BS, K, ENC_DEC = 4, 1, 2  # hand cases: a running request needs slot (dec + 2) // 4
I32 = (
    "seq_lens_this_time",
    "ori_seq_lens_encoder",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "block_tables",
    "encoder_block_lens",
    "step_block_list",
    "step_lens",
    "recover_block_list",
    "recover_lens",
    "need_block_list",
    "need_block_len",
    "used_list_len",
    "free_list",
    "free_list_len",
    "accept_num",
)
BOOL = ("stop_flags", "is_block_step")


def batch(n, nb=4, width=16, **fields):
    """All 23 tensors for n requests (input_ids/pre_ids width `width`); fields from lists."""
    d = {
        "stop_flags": np.zeros(n, bool),
        "seq_lens_this_time": np.full(n, K + 1, np.int32),
        "ori_seq_lens_encoder": np.full(n, 3, np.int32),
        "seq_lens_encoder": np.zeros(n, np.int32),
        "seq_lens_decoder": np.zeros(n, np.int32),
        "block_tables": np.full((n, nb), -1, np.int32),
        "encoder_block_lens": np.ones(n, np.int32),
        "is_block_step": np.zeros(n, bool),
        "step_block_list": np.full(n, -1, np.int32),
        "step_lens": np.zeros(1, np.int32),
        "recover_block_list": np.full(n, -1, np.int32),
        "recover_lens": np.zeros(1, np.int32),
        "need_block_list": np.full(n, -1, np.int32),
        "need_block_len": np.zeros(1, np.int32),
        "used_list_len": np.zeros(n, np.int32),
        "free_list": np.zeros(4, np.int32),
        "free_list_len": np.zeros(1, np.int32),
        "input_ids": np.arange(n * width, dtype=np.int64).reshape(n, width) + 1000,
        "pre_ids": np.arange(n * width, dtype=np.int64).reshape(n, width) + 5000,
        "step_idx": np.zeros(n, np.int64),
        "next_tokens": np.zeros((n, 1), np.int64),
        "first_token_ids": np.arange(n, dtype=np.int64) + 70,
        "accept_num": np.full(n, 2, np.int32),
    }
    for name, value in fields.items():
        dt = np.int32 if name in I32 else bool if name in BOOL else np.int64
        d[name] = np.asarray(value, dtype=dt)
    return d


# Helpers shared by the tests of the three v0 block managers (speculate_step_paddle here,
# test_speculate_step_system_cache.py, test_speculate_step_reschedule.py): ``op`` and its
# argument ``names`` in order.
def run_op(op, names, d, bs=BS, k=K):
    """The op and its reference on ``d``'s arrays: every argument equal; -> the op's, by name."""
    op_args, ref_args, _, _ = run_both(
        lambda *a: getattr(ops, op)(*a, bs, ENC_DEC, k),
        lambda *a: getattr(reference, op)(*a, bs, ENC_DEC, k),
        [d[n] for n in names],
    )
    for n, a, e in zip(names, op_args, ref_args):
        assert_same(a, e, n)
    return dict(zip(names, op_args))


def expect_of(names, out, before=None, **fields):
    """Exact expected values for `fields`; with `before`, every other array is unchanged."""
    for n, v in fields.items():
        assert_same(out[n], np.asarray(v, dtype=out[n].dtype).reshape(out[n].shape), n)
    if before is not None:
        for n in names:
            if n not in fields:
                assert_same(out[n], before[n], n + " (unchanged)")


def op_raises_and_unchanged(op, names, d, name, bs=BS, k=K):
    """The op raises a ValueError naming ``name`` and writes nothing."""
    t = [to_paddle(d[n]) for n in names]
    with pytest.raises(ValueError, match=f"{op}: {name}"):
        getattr(ops, op)(*t, bs, ENC_DEC, k)
    for x, n in zip(t, names):
        assert_same(to_numpy(x), d[n], n + " (unchanged)")


def both_refuse(op, names, d, bs, k):
    """True when the reference refuses ``d`` (and then the op refuses it too, naming the same
    argument, writing nothing)."""
    try:
        getattr(reference, op)(*[d[n].copy() for n in names], bs, ENC_DEC, k)
    except ValueError as exc:
        arg = str(exc).split(": ", 1)[1].split(" ", 1)[0]
        op_raises_and_unchanged(op, names, d, arg, bs, k)
        return True
    return False


def check_bad_values(op, names, d, name, fields):
    """``d`` with ``fields`` changed: the op and its reference raise naming ``name``."""
    for n, v in fields.items():
        d[n] = np.asarray(v, dtype=d[n].dtype)
    op_raises_and_unchanged(op, names, d, name)
    with pytest.raises(ValueError, match=name):
        getattr(reference, op)(*[d[n] for n in names], BS, ENC_DEC, K)


def check_bad_change(op, names, d, name, change):
    """``d`` with ``name`` replaced by ``change(d[name])``: the op raises naming ``name`` and
    writes nothing."""
    d[name] = change(d[name])
    op_raises_and_unchanged(op, names, d, name)


def bad_input_tests(op, names, good, bad, bad_types):
    """The bad-input tests of a step variant on the batch ``good()``, as the two test functions a
    module binds to ``test_bad_values`` / ``test_bad_dtypes_and_shapes``: for each case of ``bad``
    ({case: (argument, fields)}) the op and its reference raise naming the argument
    (`check_bad_values`), for each case of ``bad_types`` ({case: (argument, change)}) the op does
    (`check_bad_change`); nothing is written."""

    @pytest.mark.parametrize("case", sorted(bad))
    def bad_values(case):
        check_bad_values(op, names, good(), *bad[case])

    @pytest.mark.parametrize("case", sorted(bad_types))
    def bad_dtypes_and_shapes(case):
        check_bad_change(op, names, good(), *bad_types[case])

    return bad_values, bad_dtypes_and_shapes


def checked_or_both_refuse(op, names, run, check, d, bs, k):
    """None when the reference refuses ``d`` (and the op too, see `both_refuse`); else ``run(d,
    bs, k)`` (op == reference), whose result ``check(d, after)`` accepts; -> that result."""
    if both_refuse(op, names, d, bs, k):
        return None
    after = run(d, bs, k)
    check(d, after)
    return after


def on_grid(test):
    """The odd-size grid of the three variants: every batch size of BATCH_GRID x (bs, k)."""
    test = pytest.mark.parametrize("bs, k", [(1, 1), (4, 3), (16, 5)])(test)
    return pytest.mark.parametrize("bsz", BATCH_GRID)(test)


#: The random states of the three variants' property tests (Hypothesis).
on_random_states = given(
    bsz=st.integers(1, 24),
    nb=st.integers(2, 7),
    bs=st.sampled_from([1, 2, 4]),
    k=st.integers(0, 4),
    tight=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)


def both(d, bs=BS, k=K):
    return run_op(OP, NAMES, d, bs, k)


def expect(out, before=None, **fields):
    expect_of(NAMES, out, before, **fields)


# ------------------------------------------------------------------------------------------------
# Hand cases
# ------------------------------------------------------------------------------------------------
def test_finished_request_returns_its_decode_blocks_and_a_needy_one_pops_the_top():
    # 0 finished, holds decode blocks 20 21; 1 needs slot (6 + 2) // 4 = 2; 2's slot 0 is held.
    d = batch(
        3,
        stop_flags=[True, False, False],
        seq_lens_this_time=[0, 2, 2],
        seq_lens_decoder=[0, 6, 1],
        block_tables=[[5, 20, 21, -1], [6, 22, -1, -1], [7, -1, -1, -1]],
        used_list_len=[2, 1, 0],
        free_list=[30, 31, 0, 0, 0],
        free_list_len=[2],
    )
    out = both(d)
    expect(
        out,
        d,
        first_token_ids=[-1, 71, 72],
        encoder_block_lens=[0, 1, 1],
        used_list_len=[0, 2, 0],
        block_tables=[[5, -1, -1, -1], [6, 22, 21, -1], [7, -1, -1, -1]],
        free_list=[30, 31, 20, 21, 0],
        free_list_len=[3],
    )


def test_finished_request_without_decode_blocks_keeps_its_encoder_blocks():
    d = batch(
        1,
        stop_flags=[True],
        seq_lens_this_time=[0],
        block_tables=[[5, -1, -1, -1]],
        free_list_len=[0],
    )
    expect(both(d), d, first_token_ids=[-1])


def test_preempts_the_request_with_most_decode_blocks():
    # Both need a block (slots 3 and 2), none free: request 0 (2 decode blocks) is preempted, leaves
    # the need list, its blocks 10 11 go back; request 1 pops 11. Recovery of 0 needs
    # min(2 + 1, 16 // 4 - 1) = 3 free blocks: only 1 left, so it stays parked.
    d = batch(
        2,
        seq_lens_decoder=[10, 6],
        block_tables=[[0, 10, 11, -1], [1, 12, -1, -1]],
        used_list_len=[2, 1],
        accept_num=[2, 1],
        step_idx=[5, 2],
    )
    out = both(d)
    expect(
        out,
        d,
        stop_flags=[True, False],
        is_block_step=[True, False],
        seq_lens_this_time=[0, 2],
        seq_lens_decoder=[0, 6],
        accept_num=[0, 1],
        used_list_len=[2, 2],
        block_tables=[[0, -1, -1, -1], [1, 12, 11, -1]],
        free_list=[10, 11, 0, 0],
        free_list_len=[1],
        step_block_list=[0, -1],
        step_lens=[1],
    )


def test_preemption_tie_goes_to_the_lowest_index_and_need_list_is_batch_ordered():
    # three need a block, one free (40); 0 and 2 hold one decode block each, 1 holds none.
    # Preempt 0 (tie with 2, lowest index): frees 20 -> 2 needy, 2 free. Allocation in batch
    # order: 1 pops 20, 2 pops 40.
    d = batch(
        3,
        seq_lens_decoder=[6, 2, 6],
        block_tables=[[0, 20, -1, -1], [1, -1, -1, -1], [2, 22, -1, -1]],
        used_list_len=[1, 0, 1],
        free_list=[40, 0, 0],
        free_list_len=[1],
        width=8,
    )
    out = both(d)
    expect(
        out,
        d,
        stop_flags=[True, False, False],
        is_block_step=[True, False, False],
        seq_lens_this_time=[0, 2, 2],
        seq_lens_decoder=[0, 2, 6],
        accept_num=[0, 2, 2],
        used_list_len=[1, 1, 2],
        block_tables=[[0, -1, -1, -1], [1, 20, -1, -1], [2, 22, 40, -1]],
        free_list=[40, 20, 0],
        free_list_len=[0],
        step_block_list=[0, -1, -1],
        step_lens=[1],
    )


def test_requests_holding_max_decoder_block_num_are_spared_first():
    # width 8 -> max_decoder_block_num 2. Request 0 holds 2 (spared), request 1 holds 1: 1 goes.
    d = batch(
        2,
        width=8,
        seq_lens_decoder=[11, 5],
        block_tables=[[0, 10, 11, -1], [1, 12, -1, -1]],
        used_list_len=[2, 1],
    )
    out = both(d)
    expect(
        out,
        d,
        stop_flags=[False, True],
        is_block_step=[False, True],
        seq_lens_this_time=[2, 0],
        seq_lens_decoder=[11, 0],
        accept_num=[2, 0],
        used_list_len=[3, 1],
        block_tables=[[0, 10, 11, 12], [1, -1, -1, -1]],
        free_list=[12, 0, 0, 0],
        free_list_len=[0],
        step_block_list=[1, -1],
        step_lens=[1],
    )


def test_flag_retry_then_the_victim_is_recovered_in_the_same_call():
    # Both hold max_decoder_block_num = 2: nobody is eligible, the flag is set, request 0 (tie) is
    # preempted (10 11 back). Request 1 pops 11. Recovery of 0 wants min(2 + 1, 2 - 1) = 1 <= 1
    # free: it is re-prefilled at once with block 10, prompt 3 + step_idx 2 tokens.
    d = batch(
        2,
        width=8,
        seq_lens_decoder=[11, 11],
        block_tables=[[0, 10, 11, -1], [1, 12, 13, -1]],
        used_list_len=[2, 2],
        step_idx=[2, 0],
        ori_seq_lens_encoder=[3, 3],
    )
    out = both(d)
    ids = d["input_ids"].copy()
    ids[0, 0] = 70  # first_token_ids
    ids[0, 3:5] = d["pre_ids"][0, 1:3]
    expect(
        out,
        d,
        stop_flags=[False, False],
        is_block_step=[False, False],
        seq_lens_this_time=[5, 2],
        seq_lens_encoder=[5, 0],
        seq_lens_decoder=[0, 11],
        accept_num=[0, 2],
        used_list_len=[1, 3],
        block_tables=[[0, 10, -1, -1], [1, 12, 13, 11]],
        free_list=[10, 11, 0, 0],
        free_list_len=[0],
        step_block_list=[-1, -1],
        recover_block_list=[0, -1],
        input_ids=ids,
    )


def test_lifo_recovery_re_prefills_prompt_and_generated_tokens():
    # 0 and 1 were preempted earlier (pushed 0 then 1); 2 finishes and returns 60 61 62.
    # The last pushed (1) recovers: want min(2 + 1, 16 // 4 - 1) = 3 blocks, popped 62 61 60.
    d = batch(
        3,
        nb=5,
        stop_flags=[True, True, True],
        is_block_step=[True, True, False],
        seq_lens_this_time=[0, 0, 0],
        block_tables=[[3, -1, -1, -1, -1], [4, -1, -1, -1, -1], [6, 60, 61, 62, -1]],
        used_list_len=[1, 2, 3],
        ori_seq_lens_encoder=[3, 2, 4],
        step_idx=[4, 3, 0],
        step_block_list=[0, 1, -1],
        step_lens=[2],
        free_list=[40, 41, 0, 0, 0, 0],
        free_list_len=[2],
    )
    out = both(d)
    ids = d["input_ids"].copy()
    ids[1, 0] = 71
    ids[1, 2:5] = d["pre_ids"][1, 1:4]
    expect(
        out,
        d,
        stop_flags=[True, False, True],
        is_block_step=[True, False, False],
        seq_lens_this_time=[0, 5, 0],
        seq_lens_encoder=[0, 5, 0],
        first_token_ids=[70, 71, -1],
        encoder_block_lens=[1, 1, 0],
        used_list_len=[1, 3, 0],
        block_tables=[[3, -1, -1, -1, -1], [4, 62, 61, 60, -1], [6, -1, -1, -1, -1]],
        free_list=[40, 41, 60, 61, 62, 0],
        free_list_len=[2],
        step_block_list=[0, -1, -1],
        step_lens=[1],
        recover_block_list=[1, -1, -1],
        input_ids=ids,
    )


def test_recovery_waits_when_too_few_blocks_are_free():
    d = batch(
        1,
        stop_flags=[True],
        is_block_step=[True],
        seq_lens_this_time=[0],
        block_tables=[[3, -1, -1, -1]],
        used_list_len=[2],
        step_block_list=[0],
        step_lens=[1],
        free_list=[40, 41, 0],
        free_list_len=[2],
    )
    expect(both(d), d)  # want 3 > 2 free: nothing changes at all


def test_slot_past_the_row_and_zero_this_time_need_nothing():
    # 0: slot (14 + 2) // 4 = 4 >= NB; 1: this_time 0 (not stopped) is not examined.
    d = batch(
        2,
        seq_lens_decoder=[14, 6],
        seq_lens_this_time=[2, 0],
        block_tables=[[0, 1, 2, 3], [4, 5, -1, -1]],
        encoder_block_lens=[1, 1],
        used_list_len=[3, 1],
    )
    expect(both(d), d)


# ------------------------------------------------------------------------------------------------
# Random consistent pools
# ------------------------------------------------------------------------------------------------
def random_batch(rng, bsz, nb=6, bs=4, k=2, width=24, tight=False):
    """Unique block ids across tables and the live free list; block-stepped requests hold no
    decode blocks (they gave them back) and sit on step_block_list in some order."""
    ids = iter(rng.permutation(bsz * nb + 200).astype(np.int32))
    enc = rng.integers(0, 3, bsz).astype(np.int32)
    used = np.zeros(bsz, np.int32)
    bstep = rng.random(bsz) < 0.2
    stop = bstep | (rng.random(bsz) < 0.15)
    for b in range(bsz):
        used[b] = (
            rng.integers(0, min(nb - enc[b], width // bs - enc[b]) + 1)
            if width // bs > enc[b]
            else 0
        )
    tables, step_list = pool_tables(rng, ids, enc, used, bstep, nb)
    free_len = int(rng.integers(0, 3 if tight else 12))
    free = np.zeros(free_len + int(used.sum()) + int(rng.integers(0, 3)), np.int32)
    free[:free_len] = [next(ids) for _ in range(free_len)]
    filled = enc + used
    dec = np.maximum(0, (filled + rng.integers(-2, 2, bsz)) * bs - k - 1 + rng.integers(0, bs, bsz))
    ori = rng.integers(1, max(2, width // 2), bsz).astype(np.int32)
    step_idx = (rng.random(bsz) * (width - ori + 1)).astype(
        np.int64
    )  # prompt + generated fit the row
    return batch(
        bsz,
        nb=nb,
        width=width,
        stop_flags=stop,
        is_block_step=bstep,
        seq_lens_this_time=np.where(stop, 0, rng.integers(1, k + 2, bsz)),
        ori_seq_lens_encoder=ori,
        seq_lens_decoder=np.where(bstep, 0, dec),
        block_tables=tables,
        encoder_block_lens=enc,
        used_list_len=used,
        step_block_list=step_list,
        step_lens=[int(bstep.sum())],
        free_list=free,
        free_list_len=[free_len],
        step_idx=step_idx,
        input_ids=rng.integers(0, 100, (bsz, width)),
        pre_ids=rng.integers(0, 100, (bsz, width)),
        accept_num=rng.integers(0, k + 2, bsz),
    )


def live_blocks(s):
    return np.concatenate(
        [s["block_tables"][s["block_tables"] != -1], s["free_list"][: int(s["free_list_len"][0])]]
    )


def check_invariants(before, after):
    values, counts = np.unique(live_blocks(after), return_counts=True)
    assert np.all(counts == 1), f"block ids owned twice: {values[counts > 1][:5]}"
    assert np.array_equal(np.sort(live_blocks(after)), np.sort(live_blocks(before))), (
        "blocks lost or created"
    )
    assert after["need_block_len"][0] == 0 and after["recover_lens"][0] == 0
    assert np.all(after["need_block_list"] == -1)
    n = int(after["step_lens"][0])
    parked = np.flatnonzero(after["is_block_step"])
    assert sorted(after["step_block_list"][:n].tolist()) == sorted(parked.tolist())
    assert np.all(after["stop_flags"][parked]) and np.all(after["seq_lens_this_time"][parked] == 0)
    preempted = after["is_block_step"] & ~before["is_block_step"]
    assert np.all(after["seq_lens_decoder"][preempted] == 0) and np.all(
        after["accept_num"][preempted] == 0
    )
    recovered = before["is_block_step"] & ~after["is_block_step"]
    assert recovered.sum() <= 1
    for r in np.flatnonzero(recovered):
        o, s = int(before["ori_seq_lens_encoder"][r]), int(before["step_idx"][r])
        assert after["seq_lens_encoder"][r] == o + s and not after["stop_flags"][r]
        assert np.array_equal(after["input_ids"][r, o : o + s], before["pre_ids"][r, 1 : s + 1])


def compare_or_both_raise(d, bs=4, k=2):
    return checked_or_both_refuse(OP, NAMES, both, check_invariants, d, bs, k)


@on_grid
def test_grid_matches_reference(bsz, bs, k):
    rng = np.random.default_rng([bsz, bs, k])
    d = random_batch(rng, bsz, nb=8, bs=bs, k=k, width=8 * bs)
    assert compare_or_both_raise(d, bs, k) is not None


@on_random_states
def test_property_matches_reference(bsz, nb, bs, k, tight, seed):
    d = random_batch(
        np.random.default_rng(seed), bsz, nb=nb, bs=bs, k=k, width=nb * bs, tight=tight
    )
    compare_or_both_raise(d, bs, k)


# ------------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument; nothing written
# ------------------------------------------------------------------------------------------------
def good():
    """Valid: request 0 needs slot 2 and holds 1 decode block, 1 free block; request 1 is parked."""
    return batch(
        2,
        seq_lens_decoder=[6, 0],
        seq_lens_this_time=[2, 0],
        stop_flags=[False, True],
        is_block_step=[False, True],
        block_tables=[[5, 20, -1, -1], [6, -1, -1, -1]],
        used_list_len=[1, 0],
        step_block_list=[1, -1],
        step_lens=[1],
        free_list=[30, 0, 0],
        free_list_len=[1],
        step_idx=[3, 4],
    )


BAD = {
    # nothing preemptible: request 0 needs a block and nobody holds one
    "exhausted": (
        "free_list",
        dict(
            used_list_len=[0, 0], block_tables=[[5, -1, -1, -1], [6, -1, -1, -1]], free_list_len=[0]
        ),
    ),
    "free_list_too_small": (
        "free_list",
        dict(
            stop_flags=[True, True], is_block_step=[False, True], free_list=[30], free_list_len=[1]
        ),
    ),
    "free_list_len_negative": ("free_list_len", dict(free_list_len=[-1])),
    "free_list_len_past_list": ("free_list_len", dict(free_list_len=[4])),
    "used_past_row": ("used_list_len", dict(used_list_len=[4, 0])),
    "used_negative": ("used_list_len", dict(used_list_len=[0, -1])),
    "step_lens_past_list": ("step_lens", dict(step_lens=[3])),
    "need_len_nonzero": ("need_block_len", dict(need_block_len=[1])),
    "recover_lens_nonzero": ("recover_lens", dict(recover_lens=[1])),
    "negative_decoder": ("seq_lens_decoder", dict(seq_lens_decoder=[-6, 0])),
    "step_list_entry_out_of_range": ("step_block_list", dict(step_block_list=[7, -1])),
    "step_list_full": (
        "step_block_list",
        dict(free_list_len=[0], step_block_list=[1], step_lens=[1]),
    ),
    "need_list_too_small": ("need_block_list", dict(need_block_list=np.zeros(0, np.int32))),
    "recover_list_empty": (
        "recover_block_list",
        dict(recover_block_list=np.zeros(0, np.int32), free_list=[30, 31, 0], free_list_len=[2]),
    ),
    "encoder_blocks_above_max": (
        "encoder_block_lens",
        dict(  # width 12: max_decoder_block_num 3 < 4
            encoder_block_lens=[1, 4],
            block_tables=[[5, 20, -1, -1], [6, 1, 2, 3]],
            input_ids=np.zeros((2, 12), np.int64),
            pre_ids=np.zeros((2, 12), np.int64),
        ),
    ),
    "ori_negative": (
        "ori_seq_lens_encoder",
        dict(ori_seq_lens_encoder=[3, -1], free_list=[30, 31, 32], free_list_len=[3]),
    ),
    "step_idx_past_pre_ids": (
        "step_idx",
        dict(step_idx=[3, 16], free_list=[30, 31, 32], free_list_len=[3]),
    ),
    "input_ids_too_narrow": (
        "input_ids",
        dict(ori_seq_lens_encoder=[3, 13], free_list=[30, 31, 32], free_list_len=[3]),
    ),
}


def test_good_args_are_good():
    # request 0 pops 30; the parked request 1 wants min(0 + 1, 4 - 1) = 1 block, none left.
    d = good()
    out = both(d)
    expect(
        out,
        d,
        block_tables=[[5, 20, 30, -1], [6, -1, -1, -1]],
        used_list_len=[2, 0],
        free_list_len=[0],
    )


BAD_TYPES = {
    "stop_int32": ("stop_flags", lambda a: a.astype(np.int32)),
    "this_time_2d": ("seq_lens_this_time", lambda a: np.zeros((2, 2), np.int32)),
    "ori_short": ("ori_seq_lens_encoder", lambda a: a[:1].copy()),
    "tables_int64": ("block_tables", lambda a: a.astype(np.int64)),
    "tables_1d": ("block_tables", lambda a: a.reshape(-1)),
    "block_step_short": ("is_block_step", lambda a: a[:1].copy()),
    "step_list_int64": ("step_block_list", lambda a: a.astype(np.int64)),
    "step_lens_two": ("step_lens", lambda a: np.zeros(2, np.int32)),
    "recover_lens_int64": ("recover_lens", lambda a: a.astype(np.int64)),
    "need_len_two": ("need_block_len", lambda a: np.zeros(2, np.int32)),
    "used_short": ("used_list_len", lambda a: a[:1].copy()),
    "free_list_int64": ("free_list", lambda a: a.astype(np.int64)),
    "input_ids_int32": ("input_ids", lambda a: a.astype(np.int32)),
    "pre_ids_1d": ("pre_ids", lambda a: a.reshape(-1)),
    "step_idx_int32": ("step_idx", lambda a: a.astype(np.int32)),
    "first_token_short": ("first_token_ids", lambda a: a[:1].copy()),
    "accept_num_int64": ("accept_num", lambda a: a.astype(np.int64)),
}


test_bad_values, test_bad_dtypes_and_shapes = bad_input_tests(OP, NAMES, good, BAD, BAD_TYPES)


def test_bad_attributes():
    op_raises_and_unchanged(OP, NAMES, good(), "block_size", bs=0)
    op_raises_and_unchanged(OP, NAMES, good(), "max_draft_tokens", k=-1)


def test_docstring_examples_of_the_block_managers():
    import doctest

    import fd_mtp.ops.blocks

    result = doctest.testmod(fd_mtp.ops.blocks)
    assert result.attempted >= 20 and result.failed == 0, result


def test_message_is_the_schema_message_whole():
    # The recovery target is -1. The message ends in a half-open range, which the loader's
    # stripping of Paddle's "[file.cc:N]" suffix once took for that suffix and cut off.
    from fd_mtp import schema

    d = good()
    d["step_block_list"] = np.asarray([-1, -1], np.int32)
    with pytest.raises(ValueError) as err:
        ops.speculate_step_paddle(*[to_paddle(d[n]) for n in NAMES], BS, ENC_DEC, K)
    assert str(err.value) == schema.get("speculate_step_paddle").format_status(7, -1, -1, 2)
    assert str(err.value).endswith("it must be in [0, 2)")
