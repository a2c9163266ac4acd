"""Tests of fd_mtp.ops.speculate_calcu_accept_ratio (spec §5.16) against its numpy
reference: hand cases, an odd-size grid past upstream's 512-request cap, property tests, the
int32 limit of the totals and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, flags, i32, run_both, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.schema import get as schema_op
from fd_mtp.schema import python_signature

OP = "speculate_calcu_accept_ratio"
NAMES = tuple(python_signature(schema_op(OP))[0])[:6]  # the tensors, from the schema


def run_pair(*args):
    """Runs op and reference on copies of ``args``; returns the op's (drafted, accepted)."""
    op_after, ref_after, _, _ = run_both(getattr(ops, OP), getattr(reference, OP), list(args))
    for name, got, want in zip(NAMES, op_after, ref_after):
        assert_same(got, want, f"{name} (op vs reference)")
    return int(op_after[0][0]), int(op_after[1][0])


def test_verified_request_counts_drafts_without_the_bonus_token():
    # 4 tokens verified (3 drafts), 3 emitted: 2 drafts accepted + the correction token.
    assert run_pair(i32([0]), i32([0]), i32([3]), i32([4]), i32([20]), flags([False])) == (3, 2)


def test_stopped_request_counts_every_emitted_token():
    # this_time == seq_lens_decoder (not the verify rule), stopped: accepted = accept_nums.
    assert run_pair(i32([1]), i32([1]), i32([2]), i32([3]), i32([3]), flags([True])) == (3, 3)


def test_prefill_and_idle_requests_do_not_count():
    # decoder 0 and not stopped (prefill); this_time 0 (idle).
    got = run_pair(i32([5]), i32([4]), i32([1, 0]), i32([7, 0]), i32([0, 0]), flags([False, False]))
    assert got == (5, 4)


def test_nothing_drafted_leaves_both_totals_alone():
    # Request 0 verifies one token (no draft): 0 drafted, 0 accepted; request 1 stops with one
    # token: 0 drafted, 1 accepted. The step drafted nothing, so its accepted sum of 1 is not
    # added either (upstream's rule).
    got = run_pair(i32([9]), i32([7]), i32([1, 1]), i32([1, 1]), i32([5, 1]), flags([False, True]))
    assert got == (9, 7)


def test_column_vectors_and_longer_per_request_tensors():
    got = run_pair(
        i32([0]),
        i32([0]),
        i32([[3], [2], [9]]),
        i32([[4], [3]]),
        i32([[10], [11], [12]]),
        flags([[False], [False], [True]]),
    )
    assert got == (5, 3)  # the third entries are past bsz = 2


def _batch(rng, n):
    this_time = rng.integers(0, 6, n).astype(np.int32)
    dec = np.where(rng.random(n) < 0.2, 0, rng.integers(1, 300, n)).astype(np.int32)
    dec = np.where(rng.random(n) < 0.1, this_time, dec).astype(np.int32)
    acc = rng.integers(0, 6, n).astype(np.int32)
    stop = rng.random(n) < 0.2
    return i32([rng.integers(0, 1000)]), i32([rng.integers(0, 1000)]), acc, this_time, dec, stop


def check_invariants(before, after, args):
    """Totals never decrease by more than the batch could remove; accepted <= drafted + bsz."""
    d0, a0 = before
    d1, a1 = after
    n = args[3].size
    assert d1 - d0 >= -n and a1 - a0 >= -n
    assert (d1 - d0) <= 5 * n


@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid(n):
    rng = np.random.default_rng(1600 + n)
    args = _batch(rng, n)
    before = int(args[0][0]), int(args[1][0])
    check_invariants(before, run_pair(*args), args)


@given(st.integers(0, 80), st.integers(0, 2**32 - 1))
def test_property(n, seed):
    rng = np.random.default_rng(seed)
    args = _batch(rng, n)
    before = int(args[0][0]), int(args[1][0])
    check_invariants(before, run_pair(*args), args)


@pytest.mark.parametrize(
    "totals, name",
    [((2**31 - 2, 0), "sum_draft_num"), ((0, 2**31 - 1), "sum_accept_num")],
)
def test_a_total_past_int32_is_refused_and_nothing_written(totals, name):
    args = [i32([totals[0]]), i32([totals[1]]), i32([4]), i32([4]), i32([9]), flags([False])]
    tensors = [to_paddle(a) for a in args]
    with pytest.raises(ValueError, match=rf"{OP}: {name} would become \d+, outside int32"):
        getattr(ops, OP)(*tensors)
    with pytest.raises(ValueError, match=rf"{OP}: {name} would become"):
        getattr(reference, OP)(*[a.copy() for a in args])
    for got, want in zip(tensors, args):
        assert_same(to_numpy(got), want, "argument")


@pytest.mark.parametrize(
    "index, bad, name",
    [
        (0, np.zeros(2, np.int32), "sum_draft_num"),
        (1, np.zeros(1, np.int64), "sum_accept_num"),
        (2, np.zeros(1, np.int32), "accept_nums"),
        (3, np.zeros((3, 2), np.int32), "seq_lens_this_time"),
        (4, np.zeros(3, np.float32), "seq_lens_decoder"),
        (5, np.zeros(3, np.int32), "stop_flags"),
    ],
)
def test_bad_input_names_the_argument_and_writes_nothing(index, bad, name):
    args = [i32([7]), i32([5]), i32([3, 3, 3]), i32([4, 4, 4]), i32([9, 9, 9]), flags([0, 0, 0])]
    OpPair(OP).expect_replaced_error(args, (index, bad, name))
