"""Tests of fd_mtp.ops.speculate_set_stop_value_multi_seqs (spec ops.md §5.8) against its numpy reference.

Pyramid: named hand cases with exact expected arrays (stop sequence ending at idx 0 from pre_ids,
inside accept_tokens, spanning both, pre_ids index 0 refusing a match, a sequence completed by the
last accepted token seen only next step, the earliest hit winning across stop sequences), an
odd-size grid, Hypothesis, invariants, and bad input (ValueError naming the argument, nothing written).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, ragged, replaced, to_paddle

import fd_mtp.ops as ops

OP = "speculate_set_stop_value_multi_seqs"
EOS, EOS2 = 2, 3
LP = 10  # pre_ids width in the hand cases
PAIR = OpPair(OP, matrices=("accept_tokens",))  # expected accept_tokens: ragged rows
NAMES = PAIR.names
WRITTEN = ("accept_tokens", "accept_num", "stop_flags")


def batch(
    accept_tokens,
    accept_num,
    pre_ids,
    step_idx,
    stop_seqs,
    stop_flags=None,
    width=3,
    ls=3,
    column=False,
):
    """A batch from lists: accept_tokens / pre_ids rows ragged (-1 fill), stop_seqs[b] = list of sequences."""
    n = len(accept_num)
    per = (n, 1) if column else (n,)
    n_seqs = max(1, max(len(s) for s in stop_seqs))
    seqs = np.full((n, n_seqs, ls), -1, np.int64)
    lens = np.zeros((n, n_seqs), np.int32)
    for b, row in enumerate(stop_seqs):
        for s, seq in enumerate(row):
            seqs[b, s, : len(seq)] = seq
            lens[b, s] = len(seq)
    return {
        "accept_tokens": ragged(accept_tokens, width),
        "accept_num": np.asarray(accept_num, np.int32).reshape(per),
        "pre_ids": ragged(pre_ids, LP),
        "step_idx": np.asarray(step_idx, np.int64).reshape(per),
        "stop_flags": np.asarray(stop_flags or [False] * n, bool).reshape(per),
        "seq_lens": np.zeros(per, np.int32),
        "stop_seqs": seqs,
        "stop_seqs_len": lens,
        "end_ids": np.asarray([EOS, EOS2], np.int64),
    }


def run_pair(d):
    return PAIR.run(d)


def check_case(d, **expected):
    """op == reference == `expected` (lists) on the named arrays; every other array unchanged."""
    return PAIR.check(d, expected)


# ------------------------------------------------------------------------------------------------
# 1. Hand cases. pre_ids rows follow the target convention: generated token k at column k, column
#    0 unused (-1). step_idx t is after verify: this step's a tokens sit at columns t-a+1 .. t.
# ------------------------------------------------------------------------------------------------
PRE = [-1, 10, 11, 12]  # three tokens generated before this step


def test_stop_sequence_ending_at_idx_0_is_read_from_pre_ids():
    d = batch([[20, 21, 22]], [2], [PRE], [5], [[[11, 12]]])
    check_case(d, accept_tokens=[[EOS, 21, 22]], accept_num=[1], stop_flags=[True])


def test_stop_sequence_inside_accept_tokens():
    d = batch([[20, 21, 22]], [3], [PRE], [6], [[[20, 21]]])
    check_case(d, accept_tokens=[[20, 21, EOS]], accept_num=[3], stop_flags=[True])


def test_stop_sequence_spanning_pre_ids_and_accept_tokens():
    d = batch([[20, 21, 22]], [3], [PRE], [6], [[[11, 12, 20]]])
    check_case(d, accept_tokens=[[20, EOS, 22]], accept_num=[2], stop_flags=[True])


def test_pre_ids_index_0_refuses_a_match():
    # t = 2, a = 1: idx 0 compares pre_ids[1] = 10 and then index 0 -> fails, although it holds 7.
    d = batch([[20]], [1], [[7, 10]], [2], [[[7, 10]]], width=1)
    check_case(d)
    # The same sequence one column later (index 1 and 2) matches.
    d = batch([[20]], [1], [[-1, 7, 10]], [3], [[[7, 10]]], width=1)
    check_case(d, accept_tokens=[[EOS]], accept_num=[1], stop_flags=[True])


def test_sequence_completed_by_the_last_accepted_token_is_seen_only_next_step():
    d = batch([[20, 21, 22]], [2], [PRE], [5], [[[20, 21]]])
    check_case(d)  # candidate ends are before accept_tokens[0] and [1]: no hit yet
    # Next step: 20 21 are now pre_ids[4], pre_ids[5]; the hit is at idx 0.
    d = batch([[30, 31, 32]], [3], [PRE + [20, 21]], [8], [[[20, 21]]])
    check_case(d, accept_tokens=[[EOS, 31, 32]], accept_num=[1], stop_flags=[True])


def test_earliest_hit_over_all_stop_sequences_wins():
    # Sequence A ends before idx 2, sequence B before idx 1: B wins whatever their order.
    a, b = [20, 21], [12, 20]
    for seqs in ([a, b], [b, a]):
        d = batch([[20, 21, 22]], [3], [PRE], [6], [seqs])
        check_case(d, accept_tokens=[[20, EOS, 22]], accept_num=[2], stop_flags=[True])


def test_first_hit_of_one_sequence_wins():
    # [20] ends before idx 1 and idx 3 (20 repeats): the first hit wins.
    d = batch([[20, 5, 20, 6]], [4], [PRE], [7], [[[20]]], width=4)
    check_case(d, accept_tokens=[[20, EOS, 20, 6]], accept_num=[2], stop_flags=[True])


def test_candidates_needing_tokens_before_the_output_are_skipped():
    # t - a + idx + 1 < len skips every candidate: t = 0 with a = 3 (odd but valid data).
    d = batch([[20, 20, 20]], [3], [[-1]], [0], [[[20]]])
    check_case(d)


def test_stopped_requests_empty_sequences_and_padding():
    d = batch(
        [[20, 21, 22], [20, 21, 22], [20, 21, 22], [20, 21, 22]],
        [3, 3, 3, 0],
        [PRE] * 4,
        [6, 6, 6, 3],
        [[[20, 21]], [[20, 21], []], [[]], [[12]]],
        stop_flags=[True, False, False, False],
        column=True,
    )
    # 0 stopped: untouched; 1: the second (empty) sequence is ignored, the first hits at idx 2;
    # 2: no sequence; 3: accept_num 0, nothing to test.
    check_case(
        d,
        accept_tokens=[[20, 21, 22], [20, 21, EOS], [20, 21, 22], [20, 21, 22]],
        accept_num=[3, 3, 3, 0],
        stop_flags=[True, True, False, False],
    )


def test_stop_sequence_of_full_width():
    d = batch([[20, 21, 22]], [3], [PRE], [6], [[[10, 11, 12]]])
    check_case(d, accept_tokens=[[EOS, 21, 22]], accept_num=[1], stop_flags=[True])


# ------------------------------------------------------------------------------------------------
# Random valid batches: a small vocabulary so that stop sequences hit often.
# ------------------------------------------------------------------------------------------------
def random_batch(rng, n, wa=4, n_seqs=3, ls=4, lp=24, vocab=4, column=False):
    a = rng.integers(0, wa + 1, n)
    t = np.maximum(
        a - 2 + rng.integers(0, lp + 2, n), 0
    )  # t - a in [-2, lp): pre_ids reads inside the row
    per = (n, 1) if column else (n,)
    lens = rng.integers(0, ls + 1, (n, n_seqs)).astype(np.int32)
    return {
        "accept_tokens": rng.integers(0, vocab, (n, wa)).astype(np.int64),
        "accept_num": a.astype(np.int32).reshape(per),
        "pre_ids": rng.integers(-1, vocab, (n, lp)).astype(np.int64),
        "step_idx": t.astype(np.int64).reshape(per),
        "stop_flags": (rng.random(n) < 0.2).reshape(per),
        "seq_lens": np.zeros(per, np.int32),
        "stop_seqs": rng.integers(0, vocab, (n, n_seqs, ls)).astype(np.int64),
        "stop_seqs_len": lens,
        "end_ids": np.asarray([99, 98], np.int64),
    }


def check_invariants(before, got):
    n = before["accept_tokens"].shape[0]
    a0 = before["accept_num"].reshape(-1)[:n]
    a1 = got["accept_num"].reshape(-1)[:n]
    s0 = before["stop_flags"].reshape(-1)[:n]
    s1 = got["stop_flags"].reshape(-1)[:n]
    hit = s1 & ~s0
    assert (s1 | ~s0).all(), "a stopped request stays stopped"
    assert (a1[~hit] == a0[~hit]).all() and (a1[hit] >= 1).all() and (a1[hit] <= a0[hit]).all()
    eos = before["end_ids"][0]
    for b in range(n):
        changed = np.flatnonzero(got["accept_tokens"][b] != before["accept_tokens"][b])
        if hit[b]:
            assert got["accept_tokens"][b, a1[b] - 1] == eos, (
                "the token after the sequence becomes EOS"
            )
            assert set(changed) <= {a1[b] - 1}
        else:
            assert changed.size == 0
    for name in NAMES:
        if name not in WRITTEN:
            assert_same(got[name], before[name], f"{name} (read-only)")


@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid_op_matches_reference(n):
    rng = np.random.default_rng(5800 + n)
    for column in (False, True):
        d = random_batch(rng, n, column=column)
        got = run_pair(d)
        check_invariants(d, got)
        if n >= 33:
            assert (got["stop_flags"] & ~d["stop_flags"]).any(), "the grid must exercise hits"


@st.composite
def cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return random_batch(
        rng,
        draw(st.integers(1, 30)),
        wa=draw(st.integers(1, 6)),
        n_seqs=draw(st.integers(0, 4)),
        ls=draw(st.integers(1, 5)),
        lp=draw(st.integers(1, 16)),
        vocab=draw(st.integers(1, 5)),
        column=draw(st.booleans()),
    )


@given(cases())
def test_property_op_matches_reference_and_invariants_hold(d):
    check_invariants(d, run_pair(d))


# ------------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument, nothing written
# ------------------------------------------------------------------------------------------------
def valid():
    return batch(
        [[20, 21, 22], [20, 21, 22], [20, 21, 22]],
        [2, 3, 9],
        [PRE] * 3,
        [5, 6, 99],
        [[[11, 12]], [[20, 21]], [[20]]],
        stop_flags=[False, False, True],
    )


expect_error = PAIR.expect_error


def test_valid_base_case_passes_although_a_stopped_request_has_bad_data():
    got = run_pair(valid())
    assert got["stop_flags"].tolist() == [True, True, True]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "seq_lens"])
def test_wrong_dtype_names_the_argument(name):
    a = valid()[name]
    op_args = [to_paddle(valid()[n]) for n in NAMES]
    op_args[NAMES.index(name)] = to_paddle(a.astype(np.float32))
    with pytest.raises(ValueError, match=rf"{OP}: {name}\b"):
        getattr(ops, OP)(*op_args)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("accept_tokens", (3, 3, 1)),
        ("accept_num", (3, 2)),
        ("pre_ids", (3,)),
        ("step_idx", (3, 2)),
        ("stop_flags", (3, 2)),
        ("stop_seqs", (3,)),
        ("stop_seqs", (3, 1, 3, 1)),
        ("stop_seqs_len", (3, 1, 1)),
    ],
)
def test_wrong_rank_names_the_argument(name, shape):
    a = valid()[name]
    expect_error(replaced(valid(), name, np.zeros(shape, a.dtype)), name)


@pytest.mark.parametrize(
    "name", ["accept_num", "pre_ids", "step_idx", "stop_flags", "stop_seqs", "stop_seqs_len"]
)
def test_too_few_requests_names_the_argument(name):
    expect_error(replaced(valid(), name, valid()[name][:2].copy()), name)


def test_stop_seqs_len_must_have_s_columns():
    expect_error(replaced(valid(), "stop_seqs_len", np.zeros((3, 2), np.int32)), "stop_seqs_len")


def test_empty_end_ids():
    expect_error(replaced(valid(), "end_ids", np.zeros(0, np.int64)), "end_ids")


@pytest.mark.parametrize("value", [-1, 4])
def test_accept_num_out_of_range(value):
    d = valid()
    d["accept_num"][1] = value
    expect_error(d, "accept_num", data=True)


@pytest.mark.parametrize("value", [-1, 4])
def test_stop_seqs_len_out_of_range(value):
    d = valid()
    d["stop_seqs_len"][0, 0] = value
    expect_error(d, "stop_seqs_len", data=True)


def test_compared_pre_ids_column_outside_the_row():
    d = valid()
    d["step_idx"][0] = LP + 2  # t - a = LP: the idx-0 comparison reads pre_ids[LP]
    expect_error(d, "pre_ids", data=True)
    d = valid()
    d["step_idx"][0] = LP + 1  # t - a = LP - 1: inside
    run_pair(d)


def test_large_step_idx_without_a_pre_ids_read_is_fine():
    # With every stop_seqs_len 0 pre_ids is never read, so step_idx is not bounded by its width.
    d = valid()
    d["stop_seqs_len"][:] = 0
    d["step_idx"][0] = 10**6
    got = run_pair(d)
    assert_same(got["accept_num"], d["accept_num"], "accept_num")


# ------------------------------------------------------------------------------------------------
# FastDeploy's input forms (issue 16): one stop sequence per request as stop_seqs [bs, Ls] with
# stop_seqs_len [bs] (FastDeploy's own operator tests pass these); what stays refused
# ------------------------------------------------------------------------------------------------
def fastdeploy_basic():
    """FastDeploy's tests/operators/test_speculate_set_stop_value_multi_seqs.py,
    test_basic_functionality: 2-D stop_seqs, 1-D stop_seqs_len."""
    return {
        "accept_tokens": np.array([[4, 5, 0, 0, 0], [1, 2, 3, 0, 0]], np.int64),
        "accept_num": np.array([3, 4], np.int32),
        "pre_ids": np.array([[7, 8, 9, 3, 4, 5], [7, 8, 9, 1, 2, 3]], np.int64),
        "step_idx": np.array([6, 6], np.int64),
        "stop_flags": np.array([False, False]),
        "seq_lens": np.array([6, 6], np.int32),
        "stop_seqs": np.array([[3, 4, 5], [0, 0, 0]], np.int64),
        "stop_seqs_len": np.array([3, 0], np.int32),
        "end_ids": np.array([-1], np.int64),
    }


def test_fastdeploy_two_dimensional_stop_seqs_are_one_sequence_per_request():
    # Request 0: 3 4 5 ends just before accept_tokens[2] (pre_ids[3] = 3, then 4 5 accepted), so
    # that token becomes end_ids[0] = -1 and the request stops; request 1 has no stop sequence.
    d = fastdeploy_basic()
    got = check_case(
        d,
        accept_tokens=[[4, 5, -1, 0, 0], [1, 2, 3, 0, 0]],
        accept_num=[3, 4],
        stop_flags=[True, False],
    )
    # The same as the 3-D form with S = 1.
    d3 = dict(d, stop_seqs=d["stop_seqs"][:, None, :], stop_seqs_len=d["stop_seqs_len"][:, None])
    got3 = run_pair(d3)
    for name in WRITTEN:
        assert_same(got[name], got3[name], name + " (2-D vs 3-D form)")


@pytest.mark.parametrize("lens_shape", ["flat", "column"])
@pytest.mark.parametrize("bs", [1, 7, 33])
def test_two_dimensional_form_equals_three_dimensional_form(bs, lens_shape):
    rng = np.random.default_rng([bs, 5])
    ls = 4
    d = {
        "accept_tokens": rng.integers(0, 4, (bs, 5)).astype(np.int64),
        "accept_num": rng.integers(0, 6, bs).astype(np.int32),
        "pre_ids": rng.integers(0, 4, (bs, 16)).astype(np.int64),
        "step_idx": rng.integers(5, 16, bs).astype(np.int64),
        "stop_flags": rng.random(bs) < 0.2,
        "seq_lens": np.zeros(bs, np.int32),
        "stop_seqs": rng.integers(0, 4, (bs, ls)).astype(np.int64),
        "stop_seqs_len": rng.integers(0, 3, bs).astype(np.int32),
        "end_ids": np.array([EOS], np.int64),
    }
    if lens_shape == "column":
        d["stop_seqs_len"] = d["stop_seqs_len"].reshape(bs, 1)
    got = run_pair(d)
    d3 = dict(
        d,
        stop_seqs=d["stop_seqs"].reshape(bs, 1, ls),
        stop_seqs_len=d["stop_seqs_len"].reshape(bs, 1),
    )
    got3 = run_pair(d3)
    for name in WRITTEN:
        assert_same(got[name], got3[name], name + " (2-D vs 3-D form)")


def test_two_dimensional_stop_seqs_with_several_lengths_per_request_is_refused():
    d = fastdeploy_basic()
    d["stop_seqs_len"] = np.zeros((2, 2), np.int32)
    expect_error(d, "stop_seqs_len")


def test_three_dimensional_stop_seqs_with_one_length_per_request_is_refused():
    # S = 2 stop sequences per request but one length per request: upstream reads past it.
    d = fastdeploy_basic()
    d["stop_seqs"] = np.zeros((2, 2, 3), np.int64)
    expect_error(d, "stop_seqs_len")


def test_fastdeploy_no_match_case_reads_past_the_pre_ids_row_and_stays_refused():
    # FastDeploy's test_no_match: step_idx 8, accept_num 3, pre_ids rows of 5 columns: upstream
    # compares pre_ids[b, 5] (past the row: the next row, or past the tensor for the last one).
    d = fastdeploy_basic()
    d.update(
        accept_tokens=np.array([[10, 20, 30, 0, 0], [40, 50, 60, 0, 0]], np.int64),
        accept_num=np.array([3, 3], np.int32),
        pre_ids=np.array([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], np.int64),
        step_idx=np.array([8, 8], np.int64),
        stop_seqs=np.array([[11, 12, 13], [14, 15, 16]], np.int64),
        stop_seqs_len=np.array([3, 3], np.int32),
    )
    expect_error(d, "pre_ids", data=True)


def test_fastdeploy_already_stopped_case_is_accepted():
    # test_already_stopped: the same short pre_ids row, but the request is stopped: nothing read.
    d = fastdeploy_basic()
    d.update(
        accept_tokens=np.array([[10, 20, 30, 0, 0]], np.int64),
        accept_num=np.array([3], np.int32),
        pre_ids=np.array([[1, 2, 3, 4, 5]], np.int64),
        step_idx=np.array([8], np.int64),
        stop_flags=np.array([True]),
        seq_lens=np.array([10], np.int32),
        stop_seqs=np.array([[5, 4, 3]], np.int64),
        stop_seqs_len=np.array([3], np.int32),
    )
    check_case(d)
