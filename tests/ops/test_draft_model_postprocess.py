"""Tests of fd_mtp.ops.draft_model_postprocess (spec/ops.md §6.5) against exact hand cases and the
numpy reference (fd_mtp.reference.draft_model_postprocess)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from util import (
    BATCH_GRID,
    OpPair,
    assert_all_same,
    assert_same,
    flags,
    i32,
    i64,
    ragged,
    run_both,
)

from fd_mtp import ops, reference

NAMES = (
    "base_model_draft_tokens",
    "base_model_seq_lens_this_time",
    "base_model_seq_lens_encoder",
    "base_model_stop_flags",
)
T1, T3, T4, D1, D2 = 21, 23, 24, 31, 32


def run(draft_rows, this_time, enc, stop, width=None):
    """Run op and reference on a batch built from lists; return the op's this_time (numpy)."""
    width = width or max(len(r) for r in draft_rows)
    args = [ragged(draft_rows, width), i32(this_time), i32(enc), flags(stop)]
    op_args, ref_args, op_res, ref_res = run_both(
        ops.draft_model_postprocess, reference.draft_model_postprocess, args
    )
    assert op_res is None and ref_res is None
    assert_all_same(op_args, ref_args, NAMES)
    assert_same(op_args[0], args[0], "base_model_draft_tokens (read only)")
    assert_same(op_args[2], args[2], "base_model_seq_lens_encoder (read only)")
    assert_same(op_args[3], args[3], "base_model_stop_flags (read only)")
    return op_args[1]


# ---------------------------------------------------------------------------------------------
# Named hand cases (§13 traces and §6.5 rules)
# ---------------------------------------------------------------------------------------------
def test_trace_k1_after_prefill_target_row_t1_d1_sends_two_tokens():
    # §13 K=1 step 3: target draft row [t1, d1], the target's prefill is over (enc 0).
    assert_same(run([[T1, D1]], [4], [0], [False]), i32([2]), "this_time")


def test_trace_k2_two_substeps_target_row_t1_d1_d2_sends_three_tokens():
    assert_same(run([[T1, D1, D2]], [4], [0], [False]), i32([3]), "this_time")


def test_trace_k2_draft_stopped_after_one_substep_sends_two_tokens():
    # The draft stopped after substep 0 (e.g. max_dec_len); substep 1 wrote -1 in column 2.
    assert_same(run([[T4, D1, -1]], [3], [0], [False]), i32([2]), "this_time")


def test_counts_every_non_minus_one_entry_of_the_row_not_a_prefix():
    this_time = run(
        [[T3, -1, D2], [T3, D1, D2], [T3, D1, -1], [T1, -1, -1]],
        [9, 9, 9, 5],
        [0, 0, 0, 5],
        [False, False, True, False],
    )
    assert_same(this_time, i32([2, 3, 0, 5]), "this_time")


def test_stopped_request_gets_zero_even_while_prefilling_and_empty_row_gives_zero():
    this_time = run([[7, 8], [-1, -1], [5, 6]], [3, 3, 4], [0, 0, 4], [False, False, True])
    assert_same(this_time, i32([2, 0, 0]), "this_time")


def test_running_prefill_keeps_its_value_whatever_the_row():
    assert_same(
        run([[1, 2, 3], [-1, -1, -1]], [17, 0], [17, 3], [False, False]), i32([17, 0]), "this_time"
    )


def test_column_shaped_per_request_tensors_and_longer_read_tensors():
    # this_time [bsz, 1] defines bsz = 2; the other tensors are longer and only read below bsz.
    draft = ragged([[1, 2], [3, -1], [4, 5]], 2)
    this_time = np.array([[9], [9]], np.int32)
    enc = i32([0, 0, 0])
    stop = flags([False, False, False])
    op_args, ref_args, _, _ = run_both(
        ops.draft_model_postprocess,
        reference.draft_model_postprocess,
        [draft, this_time, enc, stop],
    )
    assert_same(op_args[1], np.array([[2], [1]], np.int32), "this_time")
    assert_all_same(op_args, ref_args, NAMES)


def test_example_from_the_docstring():
    assert_same(
        run([[7, 8, -1], [5, -1, 6], [1, 2, 3]], [9, 9, 9], [0, 0, 4], [False] * 3),
        i32([2, 2, 9]),
        "this_time",
    )


# ---------------------------------------------------------------------------------------------
# Odd-size grid and property tests: op == reference, plus invariants
# ---------------------------------------------------------------------------------------------
def random_batch(rng, bsz, width):
    draft = rng.integers(0, 1000, size=(bsz, width), dtype=np.int64)
    draft[rng.random((bsz, width)) < 0.4] = -1
    this_time = rng.integers(0, 20, size=bsz, dtype=np.int32)
    enc = np.where(rng.random(bsz) < 0.3, rng.integers(1, 50, size=bsz), 0).astype(np.int32)
    stop = rng.random(bsz) < 0.25
    return [draft, this_time, enc, stop]


def check_invariants(args, after):
    draft, this_before, enc, stop = args
    width = draft.shape[1]
    bsz = this_before.size
    this_after = after.reshape(-1)
    assert np.all(this_after[stop[:bsz]] == 0), "stopped => 0"
    running_decode = ~stop[:bsz] & (enc[:bsz] == 0)
    assert np.all(this_after[running_decode] <= width), "this_time <= row width"
    assert np.all(this_after[running_decode] >= 0)
    prefill = ~stop[:bsz] & (enc[:bsz] != 0)
    assert_same(this_after[prefill], this_before.reshape(-1)[prefill], "running prefill unchanged")


@pytest.mark.parametrize("width", [1, 2, 6])
@pytest.mark.parametrize("bsz", BATCH_GRID)
def test_grid_op_matches_reference(bsz, width):
    rng = np.random.default_rng(bsz * 10 + width)
    args = random_batch(rng, bsz, width)
    op_args, ref_args, _, _ = run_both(
        ops.draft_model_postprocess, reference.draft_model_postprocess, args
    )
    assert_all_same(op_args, ref_args, NAMES)
    check_invariants(args, op_args[1])


@settings(max_examples=60, deadline=None)
@given(
    bsz=st.integers(1, 40),
    width=st.integers(1, 7),
    extra=st.integers(0, 3),
    column=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_op_matches_reference(bsz, width, extra, column, seed):
    rng = np.random.default_rng(seed)
    draft, this_time, enc, stop = random_batch(
        rng, bsz + extra, width
    )  # read tensors may be longer
    this_time = this_time[:bsz].copy()
    if column:
        this_time = this_time.reshape(bsz, 1)
    args = [draft, this_time, enc, stop]
    op_args, ref_args, _, _ = run_both(
        ops.draft_model_postprocess, reference.draft_model_postprocess, args
    )
    assert_all_same(op_args, ref_args, NAMES)
    check_invariants(args, op_args[1])


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument, nothing written
# ---------------------------------------------------------------------------------------------
def good_args():
    return [
        ragged([[1, 2], [3, -1], [-1, -1]], 2),
        i32([5, 5, 5]),
        i32([0, 0, 0]),
        flags([False, False, False]),
    ]


BAD = {
    "draft_tokens_int32": (
        0,
        ragged([[1, 2], [3, -1], [-1, -1]], 2, dtype=np.int32),
        "base_model_draft_tokens",
    ),
    "draft_tokens_1d": (0, i64([1, 2, 3]), "base_model_draft_tokens"),
    "draft_tokens_too_few_rows": (0, ragged([[1, 2], [3, -1]], 2), "base_model_draft_tokens"),
    "this_time_int64": (1, i64([5, 5, 5]), "base_model_seq_lens_this_time"),
    "encoder_int64": (2, i64([0, 0, 0]), "base_model_seq_lens_encoder"),
    "encoder_too_short": (2, i32([0, 0]), "base_model_seq_lens_encoder"),
    "stop_flags_int32": (3, i32([0, 0, 0]), "base_model_stop_flags"),
    "stop_flags_too_short": (3, flags([False]), "base_model_stop_flags"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument_and_writes_nothing(case):
    OpPair("draft_model_postprocess").expect_replaced_error(good_args(), BAD[case])
