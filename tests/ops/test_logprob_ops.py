"""Tests of the logprob helpers speculate_get_logits, speculate_insert_first_token and
speculate_get_target_logits (spec §5.18, docs/spec/logprobs.md) against their numpy references:
hand cases with exact arrays, an odd-size grid past upstream's batch caps, Hypothesis property
tests with invariants, and bad input (ValueError naming the argument, nothing written)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, i32, i64, run_both

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.schema import get as schema_op
from fd_mtp.schema import python_signature

GET_LOGITS = "speculate_get_logits"
INSERT = "speculate_insert_first_token"
TARGET = "speculate_get_target_logits"


def names(op):
    return python_signature(schema_op(op))[0]


def run_pair(op, args):
    """Runs op and reference on copies of ``args``; every array must match exactly. Returns
    the op's arrays after the call, by name."""
    op_after, ref_after, _, _ = run_both(getattr(ops, op), getattr(reference, op), list(args))
    for name, got, want in zip(names(op), op_after, ref_after):
        assert_same(got, want, f"{op}: {name} (op vs reference)")
    return dict(zip(names(op), op_after))


def f32(values):
    return np.asarray(values, dtype=np.float32)


def rows(n, vocab, start=0.0):
    """n distinct float32 rows: row r holds start + 100 r + column."""
    return f32(start + 100.0 * np.arange(n)[:, None] + np.arange(vocab)[None, :])


# ------------------------------------------------------------------------------------------
# hand cases
# ------------------------------------------------------------------------------------------
def test_get_logits_prefill_then_decode():
    logits = rows(4, 3)  # request 0 (prefill) reads row 0; request 1 (decode, 3) rows 1..3
    first = rows(2, 3, start=0.5)
    draft = np.full((6, 3), -7.0, np.float32)  # 2 + 3 rows written, the last one untouched
    got = run_pair(
        GET_LOGITS,
        [
            draft,
            i32([9, 9]),
            i32([9, 9]),
            i32([0, 9, 9]),
            i32([0, 9, 9]),
            logits,
            first,
            i32([12, 3]),
            i32([12, 0]),
        ],
    )
    assert got["next_token_num"].tolist() == [1, 3]
    assert got["batch_token_num"].tolist() == [2, 3]
    assert got["cu_next_token_offset"].tolist() == [0, 1, 4]
    assert got["cu_batch_token_offset"].tolist() == [0, 2, 5]
    want = np.concatenate([first[:1], logits[:1], logits[1:4], np.full((1, 3), -7.0, np.float32)])
    assert_same(got["draft_logits"], want, "draft_logits")


def test_get_logits_keeps_index_zero_and_starts_request_zero_there():
    # Entry 0 of both offsets is not written: it is request 0's start (here 1 and 2); request 1
    # starts at the prefix sum of request 0's counts, which does not include entry 0.
    logits = rows(4, 2)
    draft = np.zeros((5, 2), np.float32)
    got = run_pair(
        GET_LOGITS,
        [
            draft,
            i32([0, 0]),
            i32([0, 0]),
            i32([1, 0, 0]),
            i32([2, 0, 0]),
            logits,
            rows(2, 2, 0.5),
            i32([2, 1]),
            i32([0, 0]),
        ],
    )
    assert got["cu_next_token_offset"].tolist() == [1, 2, 3]
    assert got["cu_batch_token_offset"].tolist() == [2, 2, 3]
    # request 0: logits rows 1, 2 -> draft rows 2, 3; then request 1: logits row 2 -> draft row 2
    want = np.zeros((5, 2), np.float32)
    want[2:4] = logits[1:3]
    want[2] = logits[2]
    assert_same(got["draft_logits"], want, "draft_logits")


def test_get_logits_idle_slots_and_column_vectors():
    logits = rows(2, 4)
    got = run_pair(
        GET_LOGITS,
        [
            np.zeros((2, 4), np.float32),
            i32([5, 5, 5, 5]),
            i32([5, 5, 5, 5]),
            i32([0, 0, 0, 0, 7]),
            i32([0, 0, 0, 0, 7]),
            logits,
            rows(4, 4, 0.5),
            i32([[0], [2], [0]]),
            i32([[0], [0], [0]]),
        ],
    )
    assert got["next_token_num"].tolist() == [0, 2, 0, 5]  # entry 3 is past bsz = 3
    assert got["cu_next_token_offset"].tolist() == [0, 0, 2, 2, 7]
    assert_same(got["draft_logits"], logits, "draft_logits")


def test_insert_first_token_prefill_and_decode():
    ids = i64([-1] * 6)
    acc = i64([[11, 12], [13, 14], [15, 16]])
    nxt = i64([21, 22, 23, 24])
    got = run_pair(
        INSERT, [ids, acc, nxt, i32([0, 1, 3]), i32([0, 2, 4]), i32([7, 2, 0]), i32([7, 0, 0])]
    )
    # prefill: accept_tokens[0, 0], next_tokens[0]; decode: next_tokens[1:3]; idle: nothing
    assert got["token_ids"].tolist() == [11, 21, 22, 23, -1, -1]


def test_insert_first_token_prefill_tests_encoder_not_zero():
    # seq_lens_encoder != 0 (even negative) is a prefill here (unlike > 0 in the logits ops).
    got = run_pair(
        INSERT, [i64([0, 0]), i64([[5]]), i64([6]), i32([0]), i32([0]), i32([3]), i32([-1])]
    )
    assert got["token_ids"].tolist() == [5, 6]


def test_get_target_logits_prefill_and_accepted_rows():
    logits = rows(5, 3)  # request 0 prefill: row 0; request 1 verified 4 rows 1..4, accepted 2
    target = np.full((4, 3), -1.0, np.float32)
    got = run_pair(
        TARGET, [target, logits, i32([0, 1]), i32([0, 1]), i32([9, 4]), i32([9, 0]), i32([1, 2])]
    )
    want = np.concatenate([logits[0:1], logits[1:3], np.full((1, 3), -1.0, np.float32)])
    assert_same(got["target_logits"], want, "target_logits")


def test_get_target_logits_nothing_for_zero_or_negative_accept_num():
    target = np.zeros((1, 2), np.float32)
    got = run_pair(
        TARGET,
        [
            target,
            rows(3, 2),
            i32([0, 0, 0]),
            i32([0, 1, 2]),
            i32([1, 1, 1]),
            i32([0, 0, 0]),
            i32([0, -3, 1]),
        ],
    )
    assert_same(got["target_logits"], rows(3, 2)[2:3], "target_logits")


def test_docstring_examples_run():
    import fd_mtp.ops.logprobs as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3 and result.failed == 0


# ------------------------------------------------------------------------------------------
# generated batches: grid and properties
# ------------------------------------------------------------------------------------------
def logits_batch(rng, n, vocab, start0=0):
    """A valid speculate_get_logits call of n requests (~30% prefill, decodes 0..5 rows)."""
    enc = np.where(rng.random(n) < 0.3, rng.integers(1, 60, n), 0).astype(np.int32)
    this_time = np.where(enc > 0, enc, rng.integers(0, 6, n)).astype(np.int32)
    nxt = np.where(enc > 0, 1, this_time)
    bat = np.where(enc > 0, 2, this_time)
    extra = int(rng.integers(0, 3))
    t_rows = max(int(nxt.sum()), start0 + int(nxt[0]) if n else 0) + extra
    d_rows = max(int(bat.sum()), start0 + int(bat[0]) if n else 0) + extra
    cu_n = np.full(n + 1 + extra, -5, np.int32)
    cu_b = np.full(n + 1 + extra, -5, np.int32)
    cu_n[0] = cu_b[0] = start0
    return [
        np.full((d_rows, vocab), np.nan, np.float32),
        np.full(n + extra, -9, np.int32),
        np.full(n + extra, -9, np.int32),
        cu_n,
        cu_b,
        rng.standard_normal((t_rows, vocab)).astype(np.float32),
        rng.standard_normal((n + extra, vocab)).astype(np.float32),
        this_time.reshape(-1, 1) if rng.random() < 0.5 else this_time,
        enc,
    ]


def check_logits_invariants(args, got):
    this_time, enc = args[7].reshape(-1), args[8]
    n = this_time.size
    cnt = np.where(enc[:n] > 0, 2, this_time)
    assert got["cu_batch_token_offset"][1 : n + 1].tolist() == np.cumsum(cnt).tolist()
    assert got["cu_batch_token_offset"][0] == args[4][0]  # index 0 untouched
    if args[4][0] != 0:
        return  # request 0's rows overlap request 1's: the later write wins
    for b in np.flatnonzero(enc[:n] > 0):
        start = int(got["cu_batch_token_offset"][b])
        assert_same(got["draft_logits"][start], args[6][b], "first_token_logits row")


def insert_batch(rng, n, width=3):
    enc = np.where(rng.random(n) < 0.3, rng.integers(1, 60, n), 0).astype(np.int32)
    this_time = np.where(enc > 0, enc, rng.integers(0, 6, n)).astype(np.int32)
    nxt = np.where(enc > 0, 1, this_time)
    bat = np.where(enc > 0, 2, this_time)
    cu_n = np.concatenate([[0], np.cumsum(nxt)]).astype(np.int32)
    cu_b = np.concatenate([[0], np.cumsum(bat)]).astype(np.int32)
    return [
        np.full(int(bat.sum()) + 1, -1, np.int64),
        rng.integers(0, 1000, (n, width)).astype(np.int64),
        rng.integers(1000, 2000, int(nxt.sum())).astype(np.int64),
        cu_n,
        cu_b,
        this_time,
        enc,
    ]


def target_batch(rng, n, vocab):
    enc = np.where(rng.random(n) < 0.3, rng.integers(1, 60, n), 0).astype(np.int32)
    this_time = np.where(enc > 0, enc, rng.integers(0, 6, n)).astype(np.int32)
    acc = np.where(enc > 0, 1, np.minimum(this_time, rng.integers(0, 6, n))).astype(np.int32)
    verified = np.where(enc > 0, 1, this_time)
    ori = np.concatenate([[0], np.cumsum(verified)]).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(acc)]).astype(np.int32)
    return [
        np.full((int(acc.sum()), vocab), np.nan, np.float32),
        rng.standard_normal((int(verified.sum()), vocab)).astype(np.float32),
        cu,
        ori,
        this_time.reshape(-1, 1),
        enc,
        acc,
    ]


@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid(n):
    rng = np.random.default_rng(5180 + n)
    args = logits_batch(rng, n, vocab=7)
    check_logits_invariants(args, run_pair(GET_LOGITS, args))
    run_pair(INSERT, insert_batch(rng, n))
    got = run_pair(TARGET, target_batch(rng, n, vocab=5))
    assert not np.isnan(got["target_logits"]).any()  # the accepted rows cover the matrix


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(1, 9), st.integers(0, 3), st.integers(0, 2**32 - 1))
def test_property(n, vocab, start0, seed):
    rng = np.random.default_rng(seed)
    args = logits_batch(rng, n, vocab, start0)
    check_logits_invariants(args, run_pair(GET_LOGITS, args))
    run_pair(INSERT, insert_batch(rng, n, width=int(rng.integers(1, 4))))
    run_pair(TARGET, target_batch(rng, n, vocab))


# ------------------------------------------------------------------------------------------
# bad input: ValueError naming the argument, nothing written
# ------------------------------------------------------------------------------------------
def _hand_logits():
    return [
        np.zeros((4, 2), np.float32),
        i32([0, 0]),
        i32([0, 0]),
        i32([0, 0, 0]),
        i32([0, 0, 0]),
        rows(3, 2),
        rows(2, 2, 0.5),
        i32([5, 2]),
        i32([5, 0]),
    ]


def _hand_insert():
    return [
        i64([0, 0, 0, 0]),
        i64([[11], [0]]),
        i64([21, 22, 23]),
        i32([0, 1]),
        i32([0, 2]),
        i32([5, 2]),
        i32([5, 0]),
    ]


def _hand_target():
    return [
        np.zeros((3, 2), np.float32),
        rows(4, 2),
        i32([0, 1]),
        i32([0, 1]),
        i32([5, 3]),
        i32([5, 0]),
        i32([1, 2]),
    ]


BAD = [
    (GET_LOGITS, _hand_logits, 7, i32([5, -1]), "seq_lens_this_time"),
    (GET_LOGITS, _hand_logits, 3, i32([0, 0]), "cu_next_token_offset"),
    (GET_LOGITS, _hand_logits, 4, i32([0, 0]), "cu_batch_token_offset"),
    (GET_LOGITS, _hand_logits, 3, i32([-1, 0, 0]), "cu_next_token_offset"),
    (GET_LOGITS, _hand_logits, 4, i32([-2, 0, 0]), "cu_batch_token_offset"),
    (GET_LOGITS, _hand_logits, 5, rows(2, 2), "logits"),
    (GET_LOGITS, _hand_logits, 0, np.zeros((3, 2), np.float32), "draft_logits"),
    (GET_LOGITS, _hand_logits, 0, np.zeros((4, 3), np.float32), "logits"),
    (GET_LOGITS, _hand_logits, 6, rows(1, 2), "first_token_logits"),
    (GET_LOGITS, _hand_logits, 5, np.zeros((3, 2), np.float64), "logits"),
    (GET_LOGITS, _hand_logits, 1, i32([0]), "next_token_num"),
    (GET_LOGITS, _hand_logits, 8, i64([5, 0]), "seq_lens_encoder"),
    (INSERT, _hand_insert, 0, i64([0, 0, 0]), "token_ids"),
    (INSERT, _hand_insert, 2, i64([21, 22]), "next_tokens"),
    (INSERT, _hand_insert, 4, i32([0, -1]), "cu_batch_token_offset"),
    (INSERT, _hand_insert, 3, i32([-1, 1]), "cu_next_token_offset"),
    (INSERT, _hand_insert, 1, i64([[11]]), "accept_tokens"),
    (INSERT, _hand_insert, 0, i32([0, 0, 0, 0]), "token_ids"),
    (TARGET, _hand_target, 0, np.zeros((2, 2), np.float32), "target_logits"),
    (TARGET, _hand_target, 1, rows(2, 2), "logits"),
    (TARGET, _hand_target, 2, i32([0, -1]), "cu_batch_token_offset"),
    (TARGET, _hand_target, 3, i32([-1, 1]), "ori_cu_batch_token_offset"),
    (TARGET, _hand_target, 6, i32([1]), "accept_num"),
    (TARGET, _hand_target, 1, np.zeros((4, 3), np.float32), "logits"),
]


@pytest.mark.parametrize(
    "op, make, index, bad, name", BAD, ids=[f"{b[0]}-{b[4]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_input_names_the_argument_and_writes_nothing(op, make, index, bad, name):
    OpPair(op, names(op)).expect_replaced_error(make(), (index, bad, name), data=True)
