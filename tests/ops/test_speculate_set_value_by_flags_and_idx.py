"""Tests of fd_mtp.ops.speculate_set_value_by_flags_and_idx (spec ops.md §5.12) against its numpy reference.

Hand cases with exact arrays (the §13 K = 1 trace, stopped / empty / step 0 requests), an odd-size
grid, Hypothesis, invariants (pre_ids written exactly at step_idx - accept_num + 1 .. step_idx) and
bad input (ValueError naming the argument, nothing written).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same

OP = "speculate_set_value_by_flags_and_idx"
MATRICES = ("pre_ids_all", "accept_tokens")
PAIR = OpPair(OP, matrices=MATRICES)
NAMES = PAIR.names
WRITTEN = ("pre_ids_all", "accept_num", "seq_lens_decoder")
LP = 8
T1, T3 = 21, 23
D1 = 31


def batch(n, wa=2, bs=None, column=False, **fields):
    bs = n if bs is None else bs
    per = (n, 1) if column else (n,)
    d = {
        "pre_ids_all": np.full((n, LP), -1, np.int64),
        "accept_tokens": np.zeros((n, wa), np.int64),
        "accept_num": np.zeros(per, np.int32),
        "stop_flags": np.zeros(per, bool),
        "seq_lens_this_time": np.ones((bs, 1) if column else (bs,), np.int32),
        "seq_lens_encoder": np.zeros(per, np.int32),
        "seq_lens_decoder": np.zeros(per, np.int32),
        "step_idx": np.zeros(per, np.int64),
    }
    return PAIR.set_fields(d, **fields)


as_like = PAIR.as_like


def run_pair(d):
    return PAIR.run(d)


def check_case(d, **expected):
    return PAIR.check(d, expected)


# ------------------------------------------------------------------------------------------------
# 1. Hand cases
# ------------------------------------------------------------------------------------------------
def test_trace_k1_prefill_writes_the_first_token_at_column_1():
    # §13 step 2 (after speculate_update): dec 4, step_idx 1, accepted [t1].
    d = batch(1, seq_lens_decoder=[4], step_idx=[1], accept_num=[1], accept_tokens=[[T1, 0]])
    check_case(d, pre_ids_all=[[-1, T1]])


def test_trace_k1_step4_writes_the_accepted_tokens_at_columns_2_and_3():
    d = batch(
        1,
        pre_ids_all=[[-1, T1]],
        seq_lens_decoder=[6],
        step_idx=[3],
        accept_num=[2],
        accept_tokens=[[D1, T3]],
    )
    check_case(d, pre_ids_all=[[-1, T1, D1, T3]])


def test_stopped_request_resets_accept_num_and_decoder_and_keeps_pre_ids():
    d = batch(
        2,
        column=True,
        stop_flags=[True, False],
        seq_lens_decoder=[9, 9],
        step_idx=[5, 5],
        accept_num=[2, 1],
        accept_tokens=[[7, 8], [9, 10]],
        pre_ids_all=[[-1, 1, 2], [-1, 1, 2]],
    )
    check_case(
        d,
        accept_num=[0, 1],
        seq_lens_decoder=[0, 9],
        pre_ids_all=[[-1, 1, 2], [-1, 1, 2, -1, -1, 9]],
    )


def test_requests_that_write_nothing():
    # 0: enc == dec == 0 (empty slot); 1: step_idx 0; 2: accept_num 0; 3: enc != 0, dec 0 -> writes.
    d = batch(
        4,
        seq_lens_encoder=[0, 0, 0, 3],
        seq_lens_decoder=[0, 4, 4, 0],
        step_idx=[3, 0, 3, 2],
        accept_num=[1, 1, 0, 2],
        accept_tokens=[[5, 6]] * 4,
    )
    check_case(d, pre_ids_all=[[], [], [], [-1, 5, 6]])


def test_rows_past_bs_are_untouched():
    d = batch(
        3,
        bs=1,
        stop_flags=[False, True, True],
        seq_lens_decoder=[2, 2, 2],
        step_idx=[1, 1, 1],
        accept_num=[1, 1, 1],
        accept_tokens=[[4, 0]] * 3,
    )
    check_case(d, pre_ids_all=[[-1, 4], [], []])  # rows 1, 2 stopped but past bs: untouched


def test_full_row_and_last_column():
    d = batch(
        1, wa=3, seq_lens_decoder=[20], step_idx=[LP - 1], accept_num=[3], accept_tokens=[[5, 6, 7]]
    )
    check_case(d, pre_ids_all=[[-1, -1, -1, -1, -1, 5, 6, 7]])


# ------------------------------------------------------------------------------------------------
# Random valid batches
# ------------------------------------------------------------------------------------------------
def random_batch(rng, n, wa=4, lp=16, bs=None, column=False):
    bs = n if bs is None else bs
    per = (n, 1) if column else (n,)
    a = rng.integers(0, wa + 1, n)
    step = np.maximum(a - 1, 0) + rng.integers(0, lp - wa, n)  # written columns inside the row
    step[rng.random(n) < 0.1] = 0
    return {
        "pre_ids_all": rng.integers(-1, 100, (n, lp)).astype(np.int64),
        "accept_tokens": rng.integers(100, 200, (n, wa)).astype(np.int64),
        "accept_num": a.astype(np.int32).reshape(per),
        "stop_flags": (rng.random(n) < 0.25).reshape(per),
        "seq_lens_this_time": rng.integers(0, 5, bs)
        .astype(np.int32)
        .reshape((bs, 1) if column else (bs,)),
        "seq_lens_encoder": np.where(rng.random(n) < 0.2, rng.integers(1, 9, n), 0)
        .astype(np.int32)
        .reshape(per),
        "seq_lens_decoder": np.where(rng.random(n) < 0.8, rng.integers(1, 50, n), 0)
        .astype(np.int32)
        .reshape(per),
        "step_idx": step.astype(np.int64).reshape(per),
    }


def check_invariants(before, got):
    bs = before["seq_lens_this_time"].size
    f = lambda src, name: src[name].reshape(-1)  # noqa: E731
    stop, enc, dec, step, a = (
        f(before, k)
        for k in ("stop_flags", "seq_lens_encoder", "seq_lens_decoder", "step_idx", "accept_num")
    )
    for b in range(stop.size):
        pre0, pre1 = before["pre_ids_all"][b], got["pre_ids_all"][b]
        writes = b < bs and not stop[b] and not (dec[b] == 0 and enc[b] == 0) and step[b] > 0
        cols = np.arange(step[b] - a[b] + 1, step[b] + 1) if writes else np.arange(0)
        assert_same(
            pre1[cols], before["accept_tokens"][b, : len(cols)], f"pre_ids_all[{b}] written columns"
        )
        others = np.setdiff1d(np.arange(pre0.size), cols)
        assert_same(pre1[others], pre0[others], f"pre_ids_all[{b}] other columns")
        if b < bs and stop[b]:
            assert f(got, "accept_num")[b] == 0 and f(got, "seq_lens_decoder")[b] == 0
        else:
            assert f(got, "accept_num")[b] == a[b] and f(got, "seq_lens_decoder")[b] == dec[b]
    for name in NAMES:
        if name not in WRITTEN:
            assert_same(got[name], before[name], f"{name} (read-only)")


@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid_op_matches_reference(n):
    rng = np.random.default_rng(5120 + n)
    for bs, column in ((n, False), (max(0, n - 3), True)):
        data = random_batch(rng, n, bs=bs, column=column)
        check_invariants(data, run_pair(data))


@st.composite
def cases(draw):
    n = draw(st.integers(1, 40))
    wa = draw(st.integers(1, 6))
    return random_batch(
        np.random.default_rng(draw(st.integers(0, 2**32 - 1))),
        n,
        wa=wa,
        lp=draw(st.integers(wa + 1, 20)),
        bs=draw(st.integers(0, n)),
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
        3,
        wa=3,
        stop_flags=[False, True, False],
        seq_lens_decoder=[5, 5, 0],
        step_idx=[4, 99, 99],
        accept_num=[3, 9, 9],
        accept_tokens=[[1, 2, 3]] * 3,
    )


expect_error = PAIR.expect_error


def test_valid_base_case_passes_although_idle_requests_hold_bad_data():
    got = run_pair(valid())
    assert got["accept_num"].tolist() == [3, 0, 9]


ROWS = [n for n in NAMES if n != "seq_lens_this_time"]  # seq_lens_this_time has bs entries


@pytest.mark.parametrize("kind, name", PAIR.shape_cases(dtype=NAMES, rank=NAMES, rows=ROWS))
def test_wrong_shape_names_the_argument(kind, name):
    PAIR.expect_shape_error(valid(), kind, name, rows=2)


@pytest.mark.parametrize("value", [-1, 4])
def test_accept_num_out_of_range(value):
    d = valid()
    d["accept_num"][0] = value
    expect_error(d, "accept_num", data=True)


@pytest.mark.parametrize(
    "step, a",
    [(LP, 1), (LP + 5, 3), (1, 3), (2, 3)],
    ids=["last=Lp", "past", "first=-1", "first=0 ok"],
)
def test_written_column_outside_the_row(step, a):
    d = valid()
    d["step_idx"][0], d["accept_num"][0] = step, a
    if step - a + 1 >= 0 and step < LP:
        run_pair(d)
    else:
        expect_error(d, "pre_ids_all", data=True)
