"""Tests of fd_mtp.ops.speculate_update_input_ids_cpu (spec §5.16), a host op, against its
numpy reference: hand cases, a grid of slots and lengths, property tests and refusals."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import assert_same, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference

OP = "speculate_update_input_ids_cpu"


def run_pair(buf, ids, bid, max_seq_len):
    t = to_paddle(buf)
    getattr(ops, OP)(t, ids, bid, max_seq_len)
    want = buf.copy()
    getattr(reference, OP)(want, ids, bid, max_seq_len)
    assert_same(to_numpy(t), want, "input_ids_cpu (op vs reference)")
    return want


def test_copies_the_prompt_into_the_slot():
    got = run_pair(np.zeros((3, 4), np.int64), [7, 8, 9], 1, 4)
    assert got.tolist() == [[0, 0, 0, 0], [7, 8, 9, 0], [0, 0, 0, 0]]


def test_flat_indexing_with_a_stride_other_than_the_row_width():
    got = run_pair(np.zeros((2, 6), np.int64), [1, 2, 3, 4], 1, 5)  # starts at flat 5
    assert got.reshape(-1).tolist() == [0, 0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0]


def test_an_empty_prompt_writes_nothing_anywhere():
    got = run_pair(np.full((2, 3), -1, np.int64), [], 99, 99)  # no element is touched
    assert (got == -1).all()


@pytest.mark.parametrize("bid", [0, 1, 6])
@pytest.mark.parametrize("length", [1, 7, 33])
def test_grid(bid, length):
    rng = np.random.default_rng(bid * 100 + length)
    buf = rng.integers(-5, 5, (7, 40)).astype(np.int64)
    run_pair(buf, rng.integers(0, 1000, length).tolist(), bid, 40)


@given(st.integers(1, 8), st.integers(1, 20), st.integers(0, 30), st.integers(0, 2**32 - 1))
def test_property(rows, width, length, seed):
    rng = np.random.default_rng(seed)
    bid = int(rng.integers(0, rows))
    length = min(length, width)
    buf = rng.integers(-5, 5, (rows, width)).astype(np.int64)
    got = run_pair(buf, rng.integers(0, 10**6, length).tolist(), bid, width)
    untouched = np.ones(buf.size, bool)
    untouched[bid * width : bid * width + length] = False
    assert_same(got.reshape(-1)[untouched], buf.reshape(-1)[untouched], "other elements")


@pytest.mark.parametrize(
    "bid, max_seq_len, ids, name",
    [
        (2, 4, [1, 2, 3, 4, 5], "input_ids_cpu"),  # runs past the 12 elements
        (-1, 4, [1], "bid"),
        (0, -4, [1], "max_seq_len"),
    ],
)
def test_refusals_name_the_argument_and_write_nothing(bid, max_seq_len, ids, name):
    buf = np.zeros((3, 4), np.int64)
    t = to_paddle(buf)
    with pytest.raises(ValueError, match=rf"{OP}: {name}\b"):
        getattr(ops, OP)(t, ids, bid, max_seq_len)
    with pytest.raises(ValueError, match=rf"{OP}: {name}\b"):
        getattr(reference, OP)(buf.copy(), ids, bid, max_seq_len)
    assert_same(to_numpy(t), buf, "input_ids_cpu")


def test_wrong_dtype_is_refused():
    t = paddle.zeros([2, 4], dtype="int32")
    with pytest.raises(ValueError, match=rf"{OP}: input_ids_cpu\b"):
        getattr(ops, OP)(t, [1], 0, 4)
