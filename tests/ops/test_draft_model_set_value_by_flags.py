"""Tests of fd_mtp.ops.draft_model_set_value_by_flags (spec §6.9) against its numpy reference:
hand cases, an odd-size grid, property tests, invariants and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from util import OpPair, assert_same, flags, grid_and_property, i32, i64, run_both

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.schema import get as schema_op
from fd_mtp.schema import python_signature

OP = "draft_model_set_value_by_flags"
NAMES = tuple(python_signature(schema_op(OP))[0])[:7]  # the tensors, from the schema


def run_pair(*args):
    op_after, ref_after, _, _ = run_both(getattr(ops, OP), getattr(reference, OP), list(args))
    for name, got, want in zip(NAMES, op_after, ref_after):
        if isinstance(want, np.ndarray):
            assert_same(got, want, f"{name} (op vs reference)")
    return op_after


def unused(n):
    return i32([0] * n)


def test_decode_step_writes_the_tokens_ending_at_step_idx():
    pre = i64([[-1, 5, 6, 0, 0, 0]])
    out = run_pair(i64([[7, 8, 9]]), pre, flags([False]), i32([2]), unused(1), unused(1), i64([4]))
    assert_same(out[1], i64([[-1, 5, 6, 7, 8, 0]]), "pre_ids_all")
    assert_same(out[3], i32([1]), "seq_lens_this_time")


def test_first_step_writes_column_one():
    out = run_pair(
        i64([[9, 4]]), i64([[-1, 0, 0]]), flags([False]), i32([3]), unused(1), unused(1), i64([1])
    )
    assert_same(out[1], i64([[-1, 9, 0]]), "pre_ids_all")
    assert_same(out[3], i32([1]), "seq_lens_this_time")


def test_stopped_idle_and_step_zero_requests():
    pre = np.zeros((3, 4), np.int64)
    out = run_pair(
        i64([[1, 2], [3, 4], [5, 6]]),
        pre,
        flags([True, False, False]),
        i32([2, 0, 2]),
        unused(3),
        unused(3),
        i64([3, 3, 0]),
    )
    assert_same(out[1], pre, "pre_ids_all")  # stopped, idle, and step 0 write no history
    assert_same(out[3], i32([2, 0, 1]), "seq_lens_this_time")  # step 0 still goes back to 1


def test_unused_arguments_take_anything():
    out = run_pair(
        i64([[7, 8]]),
        i64([[0, 0, 0, 0]]),
        flags([False]),
        i32([1]),
        np.zeros((2, 5), np.float32),
        np.zeros(1, np.int64),
        i64([2]),
    )
    assert_same(out[1], i64([[0, 0, 7, 0]]), "pre_ids_all")


def _batch(rng, n, width=16, cols=4):
    this_time = rng.integers(0, cols + 1, n).astype(np.int32)
    step = rng.integers(0, width, n).astype(np.int64)
    step = np.maximum(step, np.where(this_time > 0, this_time - 1, 0)).astype(np.int64)
    return (
        rng.integers(0, 1000, (n + 1, cols)).astype(np.int64),
        rng.integers(-1, 1000, (n + 2, width)).astype(np.int64),
        (rng.random(n + 1) < 0.2),
        this_time.reshape(-1, 1) if n % 2 else this_time,
        unused(n),
        unused(n),
        step,
    )


def check(args):
    before = [a.copy() for a in args]
    out = run_pair(*args)
    n = args[3].size
    this_time, stop = before[3].reshape(-1), before[2]
    running = (this_time != 0) & ~stop[:n]
    assert_same(out[3].reshape(-1), np.where(running, 1, this_time).astype(np.int32), "this_time")
    # rows past the batch and rows of requests that do not run keep their history
    keep = np.ones(before[1].shape[0], bool)
    keep[:n] = ~running
    assert_same(out[1][keep], before[1][keep], "pre_ids_all of rows that do not run")


test_grid, test_property = grid_and_property(check, _batch, grid_seed=69, max_n=60)


@pytest.mark.parametrize(
    "this_time, step, width, name",
    [
        (3, 5, 8, "draft_tokens"),  # reads 3 columns of a 2-column row
        (2, 8, 8, "pre_ids_all"),  # column 8 of an 8-column row
        (2, 1, 1, "pre_ids_all"),  # the first step writes column 1 of a 1-column row
    ],
)
def test_rows_too_small_are_refused_and_nothing_written(this_time, step, width, name):
    args = [i64([[1, 2]]), np.zeros((1, width), np.int64), flags([False]), i32([this_time])]
    args += [unused(1), unused(1), i64([step])]
    OpPair(OP).expect_args_error(args, rf"{name} \(request 0\)", data=True)


@pytest.mark.parametrize(
    "index, bad, name",
    [
        (0, np.zeros((3, 2), np.int32), "draft_tokens"),
        (1, np.zeros((2, 8), np.int64), "pre_ids_all"),
        (2, np.zeros(3, np.int32), "stop_flags"),
        (3, np.zeros((3, 2), np.int32), "seq_lens_this_time"),
        (6, np.zeros(3, np.int32), "step_idx"),
    ],
)
def test_bad_input_names_the_argument_and_writes_nothing(index, bad, name):
    args = [np.ones((3, 2), np.int64), np.zeros((3, 8), np.int64), flags([0, 0, 0]), i32([1] * 3)]
    args += [unused(3), unused(3), i64([3, 3, 3])]
    OpPair(OP).expect_replaced_error(args, (index, bad, name))
