"""Tests of fd_mtp.ops.speculate_get_seq_lens_output (spec/ops.md §5.2) and
fd_mtp.ops.speculate_get_output_padding_offset (§5.3): exact hand cases, the odd-size grid and
Hypothesis batches against fd_mtp.reference, invariants, and bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packing_cases import batches, mixed_batch, run_op, run_ref
from util import BATCH_GRID, assert_same, i32, i64

SEQ = "speculate_get_seq_lens_output"
OUT = "speculate_get_output_padding_offset"


def seq_lens_output(this_time, enc, dec=None):
    args = [i32(this_time), i32(enc), i32(np.zeros(len(enc)) if dec is None else dec)]
    (got,), after = run_op(SEQ, args)
    (expected,) = run_ref(SEQ, args)
    assert_same(got, expected, "seq_lens_output (op vs reference)")
    for a, b in zip(after, args):
        assert_same(a, b, "input (read only)")
    return got


def output_offsets(seq_lens, max_seq_len, out_token_num=None):
    o = i32(seq_lens)
    tmp = np.cumsum(max_seq_len - o.astype(np.int64)).astype(np.int32)
    args = [tmp, i64(o.sum() if out_token_num is None else out_token_num), o]
    got, after = run_op(OUT, args, max_seq_len)
    expected = run_ref(OUT, args, max_seq_len)
    for name, g, e in zip(("output_padding_offset", "output_cum_offsets"), got, expected):
        assert_same(g, e, f"{name} (op vs reference)")
    for a, b in zip(after, args):
        assert_same(a, b, "input (read only)")
    check_offsets(o, max_seq_len, *got)
    return got


def check_offsets(o, width, padding, cum):
    """Row r belongs to request (r + padding[r]) // width, requests in order, o[b] rows each, and
    request b's first row is b * width - cum[b]."""
    assert padding.shape == (int(o.sum()),) and cum.shape == o.shape
    rows = np.arange(padding.size)
    owner = (rows + padding) // width
    assert_same(owner, np.repeat(np.arange(o.size), o).astype(owner.dtype), "request of each row")
    first = np.arange(o.size) * width - cum.astype(np.int64)
    assert_same(
        first,
        np.concatenate([[0], np.cumsum(o)[:-1]]).astype(np.int64) if o.size else first,
        "first row of each request",
    )
    local = rows + padding - owner * width
    for b in range(o.size):
        assert_same(
            local[owner == b], np.arange(o[b]).astype(local.dtype), f"local rows of request {b}"
        )


# ---------------------------------------------------------------------------------------------
# speculate_get_seq_lens_output
# ---------------------------------------------------------------------------------------------
def test_seq_lens_output_rules():
    # empty, single token, prefill chunk, speculative decode, 1-token prefill chunk, decode of 2.
    got = seq_lens_output([0, 1, 4, 3, 1, 2], [0, 0, 4, 0, 1, 0])
    assert_same(got, i32([0, 1, 1, 3, 1, 2]), "seq_lens_output")


def test_seq_lens_output_traces():
    # §13 K=1: target prefill of p0..p3 -> 1 row; target verify of [t1 d1] -> 2 rows;
    # K=2: [t1 d1 d2] -> 3 rows; proposer decode with 1 accepted token -> 1 row.
    got = seq_lens_output([4, 2, 3, 1], [4, 0, 0, 0], [0, 4, 4, 5])
    assert_same(got, i32([1, 2, 3, 1]), "seq_lens_output")


def test_seq_lens_output_any_nonzero_encoder_means_one_row_and_decoder_is_unused():
    # The rule tests enc != 0 (not > 0); seq_lens_decoder does not matter.
    got = seq_lens_output([3, 3, 0], [-2, 0, 5], [0, 0, 9])
    assert_same(got, i32([1, 3, 0]), "seq_lens_output")


def test_seq_lens_output_column_shape_and_longer_encoder():
    args = [np.array([[2], [0]], np.int32), i32([0, 3, 9]), i32([1, 1, 1])]
    (got,), _ = run_op(SEQ, args)
    assert_same(got, i32([2, 0]), "seq_lens_output")


@pytest.mark.parametrize("bsz", BATCH_GRID)
def test_seq_lens_output_grid(bsz):
    b = mixed_batch(np.random.default_rng(bsz), bsz, width=32, extra_rows=2)
    seq_lens_output(
        b["seq_lens_this_time"], b["seq_lens_encoder"][:bsz], b["seq_lens_decoder"][:bsz]
    )


def test_seq_lens_output_wrong_dtype_and_short_encoder_are_refused():
    with pytest.raises(ValueError, match=rf"^{SEQ}: seq_lens_this_time\b"):
        run_op(SEQ, [i64([1, 2]), i32([0, 0]), i32([0, 0])])
    with pytest.raises(ValueError, match=rf"^{SEQ}: seq_lens_encoder\b"):
        run_op(SEQ, [i32([1, 2]), i32([0]), i32([0, 0])])


# ---------------------------------------------------------------------------------------------
# speculate_get_output_padding_offset
# ---------------------------------------------------------------------------------------------
def test_output_offsets_hand_case():
    # o = [1, 0, 3], width 8: tmp = [7, 15, 20]; request 2's rows start at 16 - 15 = 1.
    padding, cum = output_offsets([1, 0, 3], 8)
    assert_same(padding, i32([0, 15, 15, 15]), "output_padding_offset")
    assert_same(cum, i32([0, 7, 15]), "output_cum_offsets")


def test_output_offsets_trace_prefill_then_decode():
    # §13: a prefill (1 row) next to a decode verifying [t1 d1] (2 rows), L_in = 16.
    padding, cum = output_offsets([1, 2], 16)
    assert_same(padding, i32([0, 15, 15]), "output_padding_offset")
    assert_same(cum, i32([0, 15]), "output_cum_offsets")


def test_output_offsets_full_rows_and_no_rows():
    padding, cum = output_offsets([2, 2], 2)
    assert_same(padding, i32([0, 0, 0, 0]), "output_padding_offset")
    assert_same(cum, i32([0, 0]), "output_cum_offsets")
    padding, cum = output_offsets([0, 0, 0], 5)
    assert_same(padding, i32([]), "output_padding_offset")
    assert_same(cum, i32([0, 5, 10]), "output_cum_offsets")


def test_output_offsets_int32_count_and_longer_seq_lens():
    args = [i32([3, 5]), np.array([3], np.int32), i32([1, 2, 7])]  # o = [1, 2], width 4
    (padding, cum), _ = run_op(OUT, args, 4)
    assert_same(padding, i32([0, 3, 3]), "output_padding_offset")
    assert_same(cum, i32([0, 3]), "output_cum_offsets")


@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("width", [4, 2048])
def test_output_offsets_grid(bsz, width):
    b = mixed_batch(np.random.default_rng([bsz, width]), bsz, width=min(width, 64))
    (o,) = run_ref(SEQ, [b["seq_lens_this_time"], b["seq_lens_encoder"], b["seq_lens_decoder"]])
    output_offsets(np.minimum(o, width), width)


@given(batches(), st.integers(0, 3))
def test_output_offsets_hypothesis(b, slack):
    (o,) = run_ref(SEQ, [b["seq_lens_this_time"], b["seq_lens_encoder"], b["seq_lens_decoder"]])
    width = max(int(o.max(initial=0)), 1) + slack
    output_offsets(o, width)


# Bad input ------------------------------------------------------------------------------------
def bad_args(o=(1, 3, 0, 2, 1), width=8):
    o = i32(o)
    return [np.cumsum(width - o.astype(np.int64)).astype(np.int32), i64(o.sum()), o], width


def expect_error(args, width, argument, reference_too=True):
    copies = [a.copy() for a in args]
    with pytest.raises(ValueError, match=rf"^{OUT}: {argument}\b") as err:
        run_op(OUT, args, width)
    if reference_too:
        with pytest.raises(ValueError, match=rf"^{OUT}: {argument}\b"):
            run_ref(OUT, args, width)
    for a, c in zip(args, copies):
        assert_same(a, c, "argument (unchanged)")
    return str(err.value)


def test_negative_seq_lens_output_is_refused():
    args, w = bad_args((1, -1, 2))
    assert "(request 1)" in expect_error(args, w, "seq_lens_output")


def test_seq_lens_output_above_max_seq_len_is_refused():
    args, w = bad_args((1, 9, 2))
    assert "max_seq_len = 8" in expect_error(args, w, "seq_lens_output")


@pytest.mark.parametrize("b", [0, 2, 4])
def test_tmp_that_makes_requests_overlap_is_refused(b):
    args, w = bad_args()
    args[0][b] += 1  # request b's rows would run into request b + 1's (or past the end)
    assert f"(request {b})" in expect_error(args, w, "output_cum_offsets_tmp")


def test_out_token_num_below_the_end_of_the_layout_is_refused():
    args, w = bad_args()
    args[1] = i64(int(args[2].sum()) - 1)
    expect_error(args, w, "out_token_num")


def test_bad_max_seq_len_dtype_and_length_are_refused():
    args, _ = bad_args()
    expect_error(args, 0, "max_seq_len")
    args, w = bad_args()
    args[0] = args[0].astype(np.int64)
    expect_error(args, w, "output_cum_offsets_tmp", reference_too=False)
    args, w = bad_args()
    args[2] = args[2][:3]
    expect_error(args, w, "seq_lens_output", reference_too=False)


def test_gaps_between_requests_are_accepted_and_gap_rows_hold_zero():
    # Offsets below the prefix sum (FastDeploy accepts them): request b's rows start at
    # b * 8 - tmp[b - 1] = 0, 3, 6, 7 with slots 3, 3, 1, 2 (gaps after requests 0 and 2), and two
    # more rows after the layout's end (out_token_num 11 > 9).
    o = i32([1, 3, 0, 2])
    gaps = np.array([2, 0, 1, 0])
    w = 8
    tmp = np.cumsum(w - o - gaps).astype(np.int32)
    args = [tmp, i64(11), o]
    got, after = run_op(OUT, args, w)
    expected = run_ref(OUT, args, w)
    for g, e, name in zip(got, expected, ("output_padding_offset", "output_cum_offsets")):
        assert_same(g, e, name + " (op vs reference)")
    ce = [0, 5, 10, 17]  # tmp[b - 1]
    assert got[1].tolist() == ce
    assert got[0].tolist() == [0, 0, 0, 5, 5, 5, 0, 17, 17, 0, 0]
    for a, b in zip(after, args):
        assert_same(a, b, "input (read only)")
