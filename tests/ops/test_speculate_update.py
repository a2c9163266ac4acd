"""Tests of fd_mtp.ops.speculate_update (spec ops.md §5.10) against its numpy reference.

Pyramid: named hand cases with exact expected arrays (the §13 K = 1 trace: prefill, accepted and
rejected decode; every actual_draft_token_num branch n+2 / n+1 / D-1 / max(n-1, 1); stopped,
block-stepped and padded slots; not_need_stop against stop_nums; the accept_num == 0 difference),
an odd-size grid, Hypothesis, invariants and bad input (ValueError naming the argument, nothing
written).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, replaced

from fd_mtp.schema import written_args

OP = "speculate_update"
MATRICES = ("draft_tokens", "accept_tokens")
PAIR = OpPair(OP, matrices=MATRICES)
NAMES = PAIR.names
WRITTEN = tuple(written_args("speculate_update"))
T1, T2R, T3 = 21, 22, 23  # target tokens of the spec §13 trace
D1 = 31  # draft token


def batch(n, d=2, wa=None, real_bsz=None, column=False, stop_nums=None, **fields):
    """Every input for max_bsz n (draft width d, accept width wa); `fields` from lists."""
    real_bsz = n if real_bsz is None else real_bsz
    per = (n, 1) if column else (n,)
    out = {
        "seq_lens_encoder": np.zeros(per, np.int32),
        "seq_lens_decoder": np.zeros(per, np.int32),
        "not_need_stop": np.zeros(1, bool),
        "draft_tokens": np.full((n, d), -1, np.int64),
        "actual_draft_token_nums": np.full(per, d - 1, np.int32),
        "accept_tokens": np.zeros((n, wa or d), np.int64),
        "accept_num": np.zeros(per, np.int32),
        "stop_flags": np.zeros(per, bool),
        "seq_lens_this_time": np.zeros((real_bsz, 1) if column else (real_bsz,), np.int32),
        "is_block_step": np.zeros(n, bool),
        "stop_nums": np.array([n if stop_nums is None else stop_nums], np.int64),
        "mask_rollback": np.zeros(per, np.int32),
    }
    return set_fields(out, **fields)


as_like = PAIR.as_like
set_fields = PAIR.set_fields


def run_pair(d):
    return PAIR.run(d)


def check_case(d, **expected):
    return PAIR.check(d, expected)


# ------------------------------------------------------------------------------------------------
# 1. Hand cases
# ------------------------------------------------------------------------------------------------
def test_trace_k1_prefill_moves_encoder_into_decoder():
    # §13 step 2: verify gave t1 (acc 1); enc 4 -> dec 4, enc 0, draft_tokens[0] = t1.
    d = batch(
        1,
        seq_lens_encoder=[4],
        seq_lens_this_time=[4],
        accept_tokens=[[T1, 0]],
        accept_num=[1],
        actual_draft_token_nums=[1],
        mask_rollback=[7],
    )
    check_case(
        d,
        seq_lens_encoder=[0],
        seq_lens_decoder=[4],
        draft_tokens=[[T1, -1]],
        mask_rollback=[0],
        not_need_stop=[True],
    )


def test_trace_k1_step4_accepted():
    # §13 step 4: [t1 d1] verified, d1 accepted + bonus t3: dec 6, mask_rollback 0, actual stays 1.
    d = batch(
        1,
        seq_lens_decoder=[4],
        seq_lens_this_time=[2],
        draft_tokens=[[T1, D1]],
        accept_tokens=[[D1, T3]],
        accept_num=[2],
        actual_draft_token_nums=[1],
    )
    check_case(
        d, seq_lens_decoder=[6], mask_rollback=[0], draft_tokens=[[T3, D1]], not_need_stop=[True]
    )


def test_trace_k1_step4_rejected():
    d = batch(
        1,
        seq_lens_decoder=[4],
        seq_lens_this_time=[2],
        draft_tokens=[[T1, D1]],
        accept_tokens=[[T2R, 9]],
        accept_num=[1],
        actual_draft_token_nums=[1],
    )
    check_case(
        d, seq_lens_decoder=[5], mask_rollback=[1], draft_tokens=[[T2R, D1]], not_need_stop=[True]
    )


@pytest.mark.parametrize(
    "n, a, expected",
    [
        (2, 3, 4),  # all accepted: n + 2 <= D - 1
        (4, 5, 5),  # n + 2 > D - 1 = 5, n + 1 <= 5
        (5, 6, 5),  # n + 1 > 5: D - 1
        (7, 8, 5),  # stale n above the cap: D - 1 (accept_tokens wider than draft_tokens)
        (3, 2, 2),  # a draft rejected: n - 1
        (1, 1, 1),  # max(n - 1, 1)
        (3, 0, 2),  # nothing accepted (odd): n - 1
    ],
)
def test_actual_draft_token_num_adaptation(n, a, expected):
    d = batch(
        1,
        d=6,
        wa=9,
        seq_lens_decoder=[10],
        seq_lens_this_time=[6],
        actual_draft_token_nums=[n],
        accept_num=[a],
        accept_tokens=[list(range(40, 49))],
        draft_tokens=[[1, 2, 3, 4, 5, 6]],
    )
    check_case(
        d,
        seq_lens_decoder=[10 + a],
        mask_rollback=[6 - a],
        actual_draft_token_nums=[expected],
        draft_tokens=[[40 + a - 1 if a else 1, 2, 3, 4, 5, 6]],
        not_need_stop=[True],
    )


def test_no_adaptation_without_drafts_or_while_prefilling():
    d = batch(
        2,
        d=4,
        seq_lens_decoder=[10, 0],
        seq_lens_encoder=[0, 3],
        seq_lens_this_time=[1, 3],
        actual_draft_token_nums=[2, 2],
        accept_num=[1, 1],
        accept_tokens=[[50], [60]],
    )
    check_case(
        d,
        seq_lens_decoder=[11, 3],
        seq_lens_encoder=[0, 0],
        mask_rollback=[0, 0],
        draft_tokens=[[50, -1, -1, -1], [60, -1, -1, -1]],
        not_need_stop=[True],
    )


def test_stopped_request_counts_and_still_adapts_and_writes_draft_tokens():
    d = batch(
        2,
        d=4,
        seq_lens_decoder=[10, 8],
        seq_lens_this_time=[4, 3],
        stop_flags=[True, False],
        actual_draft_token_nums=[3, 2],
        accept_num=[2, 3],
        accept_tokens=[[50, 51], [60, 61, 62]],
        mask_rollback=[5, 5],
        stop_nums=2,
    )
    # 0 stopped: dec unchanged, rollback 0, actual 3 -> 2 (a - 1 != 3), draft[0] = 51.
    # 1 running: dec + 3, rollback 0, all 2 drafts accepted -> actual min(4, cap 3) = 3.
    check_case(
        d,
        seq_lens_decoder=[10, 11],
        mask_rollback=[0, 0],
        actual_draft_token_nums=[2, 3],
        draft_tokens=[[51, -1, -1, -1], [62, -1, -1, -1]],
        not_need_stop=[True],
    )


def test_stopped_request_with_encoder_moves_it_to_decoder():
    # Step 3 of §5.10 is not conditioned on the stop flag.
    d = batch(
        1,
        seq_lens_encoder=[5],
        seq_lens_decoder=[2],
        seq_lens_this_time=[5],
        stop_flags=[True],
        accept_num=[1],
        accept_tokens=[[70, 0]],
        mask_rollback=[3],
    )
    check_case(
        d,
        seq_lens_encoder=[0],
        seq_lens_decoder=[7],
        mask_rollback=[0],
        draft_tokens=[[70, -1]],
        not_need_stop=[False],
    )


def test_accept_num_zero_keeps_draft_tokens():
    # Deliberate difference: upstream reads accept_tokens[b, -1] (the element before the row).
    d = batch(
        2,
        stop_flags=[True, False],
        seq_lens_decoder=[0, 4],
        seq_lens_this_time=[0, 1],
        draft_tokens=[[81, 82], [83, 84]],
        accept_tokens=[[5, 6], [7, 8]],
        stop_nums=2,
    )
    check_case(d, mask_rollback=[0, 1], not_need_stop=[True])  # running: rollback = this_time - 0


def test_block_stepped_requests_are_untouched_and_count_zero():
    d = batch(
        3,
        d=3,
        seq_lens_decoder=[9, 9, 9],
        seq_lens_encoder=[0, 2, 0],
        seq_lens_this_time=[3, 3, 3],
        is_block_step=[True, True, False],
        stop_flags=[True, True, True],
        accept_num=[2, 2, 1],
        accept_tokens=[[1, 2, 3]] * 3,
        mask_rollback=[4, 4, 4],
        stop_nums=2,
    )
    # Only request 2 counts: 1 < 2.
    check_case(
        d,
        mask_rollback=[4, 4, 0],
        actual_draft_token_nums=[2, 2, 1],
        draft_tokens=[[-1, -1, -1], [-1, -1, -1], [1, -1, -1]],
        not_need_stop=[True],
    )


@pytest.mark.parametrize("stop_nums, expected", [(4, True), (3, False)])
def test_slots_past_real_bsz_count_as_stopped(stop_nums, expected):
    # max_bsz 4, real_bsz 2 (the running slice); request 1 stopped: count = 1 + 2 = 3.
    d = batch(
        4,
        real_bsz=2,
        column=True,
        seq_lens_decoder=[5, 5, 5, 5],
        seq_lens_this_time=[1, 1],
        stop_flags=[False, True, False, False],
        accept_num=[1, 1, 1, 1],
        accept_tokens=[[11], [12], [13], [14]],
        stop_nums=stop_nums,
    )
    check_case(
        d,
        seq_lens_decoder=[6, 5, 5, 5],
        draft_tokens=[[11, -1], [12, -1], [-1, -1], [-1, -1]],
        not_need_stop=[expected],
    )


def test_every_request_running_with_stop_nums_zero_stops():
    d = batch(
        2,
        seq_lens_decoder=[3, 3],
        seq_lens_this_time=[1, 1],
        accept_num=[1, 1],
        stop_nums=0,
        not_need_stop=[True],
        accept_tokens=[[5], [6]],
    )
    check_case(d, seq_lens_decoder=[4, 4], draft_tokens=[[5, -1], [6, -1]], not_need_stop=[False])


# ------------------------------------------------------------------------------------------------
# Random valid batches
# ------------------------------------------------------------------------------------------------
def random_batch(rng, n, d=4, wa=None, real_bsz=None, column=False):
    wa = wa or d
    real_bsz = n if real_bsz is None else real_bsz
    per = (n, 1) if column else (n,)
    kind = rng.integers(0, 3, n)  # 0 decode, 1 prefill, 2 stopped
    enc = np.where(
        kind == 1, rng.integers(1, 30, n), np.where(kind == 2, rng.integers(0, 2, n) * 3, 0)
    )
    this_time = np.where(kind == 1, enc, rng.integers(0, d + 1, n))
    stop_nums = int(rng.integers(0, n + 2))
    return {
        "seq_lens_encoder": enc.astype(np.int32).reshape(per),
        "seq_lens_decoder": rng.integers(0, 100, n).astype(np.int32).reshape(per),
        "not_need_stop": np.array([rng.random() < 0.5]),
        "draft_tokens": rng.integers(-1, 100, (n, d)).astype(np.int64),
        "actual_draft_token_nums": rng.integers(0, d + 2, n).astype(np.int32).reshape(per),
        "accept_tokens": rng.integers(0, 100, (n, wa)).astype(np.int64),
        "accept_num": rng.integers(0, wa + 1, n).astype(np.int32).reshape(per),
        "stop_flags": (kind == 2).reshape(per),
        "seq_lens_this_time": this_time[:real_bsz]
        .astype(np.int32)
        .reshape((real_bsz, 1) if column else (real_bsz,)),
        "is_block_step": rng.random(n) < 0.1,
        "stop_nums": np.array([stop_nums], np.int64),
        "mask_rollback": rng.integers(0, 5, n).astype(np.int32).reshape(per),
    }


def check_invariants(before, got):
    real = before["seq_lens_this_time"].size
    flat = lambda src, name: src[name].reshape(-1)  # noqa: E731
    stop, block = flat(before, "stop_flags"), flat(before, "is_block_step")
    max_bsz = stop.size
    counted = int(np.count_nonzero(stop[:real] & ~block[:real])) + (max_bsz - real)
    assert got["not_need_stop"][0] == (counted < before["stop_nums"][0]), (
        "not_need_stop vs the stopped count"
    )
    enc0, dec0 = flat(before, "seq_lens_encoder"), flat(before, "seq_lens_decoder")
    enc1, dec1 = flat(got, "seq_lens_encoder"), flat(got, "seq_lens_decoder")
    a = flat(before, "accept_num")
    q = flat(before, "seq_lens_this_time")
    roll = flat(got, "mask_rollback")
    cap = before["draft_tokens"].shape[1] - 1
    for b in range(max_bsz):
        untouched = b >= real or block[b]
        for name in WRITTEN:
            if name != "not_need_stop" and untouched:
                assert_same(got[name][b], before[name][b], f"{name}[{b}] (untouched slot)")
        if untouched:
            continue
        assert enc1[b] == 0
        expected_dec = dec0[b] + enc0[b] + (a[b] if (not stop[b] and enc0[b] == 0) else 0)
        assert dec1[b] == expected_dec
        assert roll[b] == (q[b] - a[b] if (not stop[b] and enc0[b] == 0) else 0)
        n0, n1 = flat(before, "actual_draft_token_nums")[b], flat(got, "actual_draft_token_nums")[b]
        if q[b] > 1 and enc0[b] == 0:
            if a[b] - 1 == n0:  # grow, never past the cap D - 1
                assert min(n0 + 1, cap) <= n1 <= cap
            else:
                assert n1 == max(n0 - 1, 1)
        else:
            assert n1 == n0
        if a[b] > 0:
            assert got["draft_tokens"][b, 0] == before["accept_tokens"][b, a[b] - 1]
    assert_same(
        got["draft_tokens"][:, 1:], before["draft_tokens"][:, 1:], "draft_tokens columns 1.."
    )
    for name in NAMES:
        if name not in WRITTEN:
            assert_same(got[name], before[name], f"{name} (read-only)")


@pytest.mark.parametrize("n", BATCH_GRID)
@pytest.mark.parametrize("d", [2, 4, 6])
def test_grid_op_matches_reference(n, d):
    rng = np.random.default_rng(5100 * n + d)
    for real_bsz, wa in ((n, d), (max(0, n - 5), d + 2)):
        data = random_batch(rng, n, d=d, wa=wa, real_bsz=real_bsz, column=bool(n % 2))
        check_invariants(data, run_pair(data))


@st.composite
def cases(draw):
    n = draw(st.integers(1, 40))
    d = draw(st.integers(1, 6))
    return random_batch(
        np.random.default_rng(draw(st.integers(0, 2**32 - 1))),
        n,
        d=d,
        wa=draw(st.integers(1, 8)),
        real_bsz=draw(st.integers(0, n)),
        column=draw(st.booleans()),
    )


@given(cases())
def test_property_op_matches_reference_and_invariants_hold(data):
    check_invariants(data, run_pair(data))


# ------------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument, nothing written
# ------------------------------------------------------------------------------------------------
def valid():
    return batch(
        4,
        d=3,
        real_bsz=3,
        seq_lens_decoder=[5, 5, 5, 5],
        seq_lens_this_time=[3, 3, 1],
        accept_num=[2, 3, 1, 1],
        accept_tokens=[[1, 2, 3]] * 4,
        is_block_step=[False, False, True, False],
    )


expect_error = PAIR.expect_error


def test_valid_base_case_passes():
    run_pair(valid())


DTYPES = [n for n in NAMES if n != "not_need_stop"]  # not_need_stop: its own test below
RANKS = [n for n in DTYPES if n != "stop_nums"]  # one element, like not_need_stop
ROWS = [n for n in RANKS if n != "seq_lens_this_time"]  # real_bsz entries


@pytest.mark.parametrize("kind, name", PAIR.shape_cases(dtype=DTYPES, rank=RANKS, rows=ROWS))
def test_wrong_shape_names_the_argument(kind, name):
    PAIR.expect_shape_error(valid(), kind, name, rows=2)


@pytest.mark.parametrize(
    "bad", [np.zeros(1, np.int32), np.zeros(2, bool)], ids=["int32", "2 elements"]
)
def test_not_need_stop_must_be_one_bool(bad):
    expect_error(replaced(valid(), "not_need_stop", bad), "not_need_stop")


@pytest.mark.parametrize(
    "bad", [np.zeros(1, np.int32), np.zeros(2, np.int64), np.zeros(0, np.int64)]
)
def test_stop_nums_must_be_one_int64(bad):
    expect_error(replaced(valid(), "stop_nums", bad), "stop_nums")


@pytest.mark.parametrize("value", [-1, 4])
def test_accept_num_out_of_range(value):
    d = valid()
    d["accept_num"][1] = value
    expect_error(d, "accept_num", data=True)


@pytest.mark.parametrize("value", [-1, -(2**31)])
def test_negative_this_time_of_a_running_decode_request(value):
    # mask_rollback = seq_lens_this_time - accept_num: a negative count (INT32_MIN overflowed).
    d = valid()
    d["seq_lens_this_time"][1] = value
    expect_error(d, "seq_lens_this_time", data=True)


def test_bad_accept_num_of_block_stepped_or_padded_slots_is_not_read():
    d = valid()
    d["accept_num"][2] = 99  # block-stepped
    d["accept_num"][3] = -5  # past real_bsz
    run_pair(d)
