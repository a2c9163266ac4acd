"""Tests of fd_mtp.ops.speculate_clear_accept_nums (spec ops.md §5.16) against its numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, assert_same, run_both, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference

OP = "speculate_clear_accept_nums"


def run_pair(accept_num, seq_lens_decoder):
    op_after, ref_after, _, _ = run_both(
        getattr(ops, OP), getattr(reference, OP), [accept_num, seq_lens_decoder]
    )
    for name, a, e in zip(("accept_num", "seq_lens_decoder"), op_after, ref_after):
        assert_same(a, e, f"{name} (op vs reference)")
    return op_after


def test_clears_where_decoder_is_zero():
    got, dec = run_pair(np.array([3, 2, 1, 4], np.int32), np.array([7, 0, 5, 0], np.int32))
    assert_same(got, np.array([3, 0, 1, 0], np.int32), "accept_num")
    assert_same(dec, np.array([7, 0, 5, 0], np.int32), "seq_lens_decoder")


def test_column_shapes_and_longer_accept_num():
    got, _ = run_pair(np.array([[3], [2], [1], [4]], np.int32), np.array([[0], [0]], np.int32))
    assert_same(got, np.array([[0], [0], [1], [4]], np.int32), "accept_num")


def test_negative_decoder_is_not_zero():
    got, _ = run_pair(np.array([3, 2], np.int32), np.array([-1, 0], np.int32))
    assert_same(got, np.array([3, 0], np.int32), "accept_num")


def check(accept_num, dec):
    got, _ = run_pair(accept_num, dec)
    n = dec.size
    assert_same(got[:n], np.where(dec == 0, 0, accept_num[:n]).astype(np.int32), "accept_num")
    assert_same(got[n:], accept_num[n:], "accept_num past bsz")


@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid(n):
    rng = np.random.default_rng(516 + n)
    check(rng.integers(-2, 6, n + 2).astype(np.int32), rng.integers(0, 3, n).astype(np.int32))


@given(st.integers(0, 50), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_property(n, extra, seed):
    rng = np.random.default_rng(seed)
    check(rng.integers(-2, 6, n + extra).astype(np.int32), rng.integers(0, 3, n).astype(np.int32))


@pytest.mark.parametrize(
    "accept_num, dec, name",
    [
        (np.zeros(3, np.int64), np.zeros(3, np.int32), "accept_num"),
        (np.zeros(3, np.int32), np.zeros(3, np.int64), "seq_lens_decoder"),
        (np.zeros((3, 2), np.int32), np.zeros(3, np.int32), "accept_num"),
        (np.zeros(3, np.int32), np.zeros((3, 2), np.int32), "seq_lens_decoder"),
        (np.zeros(2, np.int32), np.zeros(3, np.int32), "accept_num"),
    ],
)
def test_bad_input_names_the_argument_and_writes_nothing(accept_num, dec, name):
    accept_num = accept_num + 5
    t_acc, t_dec = to_paddle(accept_num), to_paddle(dec)
    with pytest.raises(ValueError, match=rf"{OP}: {name}\b"):
        getattr(ops, OP)(t_acc, t_dec)
    assert_same(to_numpy(t_acc), accept_num, "accept_num")
