"""Tests of fd_mtp.ops.speculate_get_padding_offset (spec/ops.md §1.3, §5.1): exact hand cases (§13
traces), the odd-size grid and Hypothesis batches against fd_mtp.reference, invariants on every
output, and bad input (ValueError naming the argument; inputs untouched)."""

import numpy as np
import pytest
from hypothesis import given
from packing_cases import batches, cum_offsets, mixed_batch, padding_offset_args, run_op, run_ref
from util import BATCH_GRID, assert_same, i32, i64, ragged

OP = "speculate_get_padding_offset"
P0, P1, P2, P3, T1, D1, D2 = 100, 101, 102, 103, 21, 31, 32


def run(input_ids, draft_tokens, this_time, enc, token_num=None):
    """Op and reference on the same args; asserts they agree and returns the op's outputs."""
    q = i32(this_time)
    args = [
        input_ids,
        draft_tokens,
        cum_offsets(q, input_ids.shape[1]),
        i64(q.sum() if token_num is None else token_num),
        q,
        i32(enc),
    ]
    got = gap_outputs(args)
    check_invariants(args, got)
    return got


def check_invariants(args, outs):
    input_ids, draft_tokens, _, token_num, q, enc = args
    x, batch_id, cu_q, cu_k = outs
    q = q.reshape(-1)
    t = int(token_num)
    assert x.shape == (t,) and batch_id.shape == (t,), "packed outputs have T entries"
    assert_same(cu_q, cu_k, "cu_seqlens_k == cu_seqlens_q")
    assert cu_q[0] == 0 and cu_q[-1] == t, (
        f"cu_seqlens_q runs from 0 to T, got {cu_q[0]} .. {cu_q[-1]}"
    )
    assert_same(np.diff(cu_q), q, "diff(cu_seqlens_q) == seq_len")
    assert np.all(np.diff(batch_id) >= 0), "batch_id_per_token is non-decreasing"
    assert_same(
        np.bincount(batch_id, minlength=q.size)[: q.size].astype(np.int32), q, "tokens per request"
    )
    for b in range(q.size):
        lo, hi = int(cu_q[b]), int(cu_q[b + 1])
        source = input_ids[b, : hi - lo] if enc[b] > 0 else draft_tokens[b, : hi - lo]
        assert_same(x[lo:hi], source, f"tokens of request {b}")


# ---------------------------------------------------------------------------------------------
# Named hand cases
# ---------------------------------------------------------------------------------------------
def test_trace_k1_target_prefill_packs_the_prompt():
    # §13 K=1 step 2: target input_ids [p0 p1 p2 p3], this_time = enc = 4.
    x, bid, cu_q, cu_k = run(ragged([[P0, P1, P2, P3]], 8, 0), ragged([[-1, -1]], 2), [4], [4])
    assert_same(x, i64([P0, P1, P2, P3]), "x_remove_padding")
    assert_same(bid, i32([0, 0, 0, 0]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 4]), "cu_seqlens_q")
    assert_same(cu_k, i32([0, 4]), "cu_seqlens_k")


def test_trace_k1_target_decode_packs_t1_d1_from_draft_tokens():
    # §13 K=1 step 4: draft_tokens [t1 d1], this_time 2, enc 0 (input_ids still holds the prompt).
    x, bid, cu_q, _ = run(ragged([[P0, P1, P2, P3]], 8, 0), ragged([[T1, D1]], 2), [2], [0])
    assert_same(x, i64([T1, D1]), "x_remove_padding")
    assert_same(bid, i32([0, 0]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 2]), "cu_seqlens_q")


def test_mixed_batch_prefill_empty_decode_decode():
    ids = ragged([[5, 6, 7], [1], [2, 2], [3, 3]], 4, 0)
    drafts = ragged([[-1, -1, -1], [-1, -1, -1], [8, 4, 9], [T1, D1, D2]], 3)
    # request 0 prefills 3 tokens, 1 is empty, 2 decodes 2 of its 3 draft slots, 3 decodes 3.
    x, bid, cu_q, cu_k = run(ids, drafts, [3, 0, 2, 3], [3, 0, 0, 0])
    assert_same(x, i64([5, 6, 7, 8, 4, T1, D1, D2]), "x_remove_padding")
    assert_same(bid, i32([0, 0, 0, 2, 2, 3, 3, 3]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 3, 3, 5, 8]), "cu_seqlens_q")
    assert_same(cu_k, i32([0, 3, 3, 5, 8]), "cu_seqlens_k")


def test_decode_with_full_draft_row_and_prefill_with_full_input_row():
    ids = ragged([[1, 2, 3, 4], [9, 9, 9, 9]], 4)
    drafts = ragged([[0, 0], [7, 8]], 2)
    x, bid, cu_q, _ = run(ids, drafts, [4, 2], [4, 0])
    assert_same(x, i64([1, 2, 3, 4, 7, 8]), "x_remove_padding")
    assert_same(bid, i32([0, 0, 0, 0, 1, 1]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 4, 6]), "cu_seqlens_q")


def test_zero_tokens_gives_empty_outputs_and_zero_cu_seqlens():
    x, bid, cu_q, cu_k = run(
        ragged([[1], [2], [3]], 4), ragged([[1], [2], [3]], 2), [0, 0, 0], [0, 0, 0]
    )
    assert_same(x, i64([]), "x_remove_padding")
    assert_same(bid, i32([]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 0, 0, 0]), "cu_seqlens_q")
    assert_same(cu_k, i32([0, 0, 0, 0]), "cu_seqlens_k")


def test_empty_batch():
    x, bid, cu_q, _ = run(np.zeros((0, 4), np.int64), np.zeros((0, 2), np.int64), [], [])
    assert x.shape == (0,) and bid.shape == (0,)
    assert_same(cu_q, i32([0]), "cu_seqlens_q")


def test_column_shaped_seq_len_int32_token_num_and_longer_buffers():
    # seq_len [bsz, 1] defines bsz = 2; the other buffers have 3 rows; token_num as int32.
    ids = ragged([[5, 6], [0], [4, 4]], 3, 0)
    drafts = ragged([[0, 0], [1, 2], [3, 3]], 2)
    q = np.array([[2], [1]], np.int32)
    args = [ids, drafts, cum_offsets(q, 3), np.array([3], np.int32), q, i32([2, 0, 7])]
    (x, bid, cu_q, cu_k), _ = run_op(OP, args)
    assert_same(x, i64([5, 6, 1]), "x_remove_padding")
    assert_same(bid, i32([0, 0, 1]), "batch_id_per_token")
    assert_same(cu_q, i32([0, 2, 3]), "cu_seqlens_q")


# ---------------------------------------------------------------------------------------------
# Grid and Hypothesis against the reference
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_grid_matches_reference(bsz, k):
    b = mixed_batch(np.random.default_rng([bsz, k]), bsz, width=48, k=k, extra_rows=k % 2)
    run(b["input_ids"], b["draft_tokens"], b["seq_lens_this_time"], b["seq_lens_encoder"])


@given(batches())
def test_hypothesis_matches_reference(b):
    run(b["input_ids"], b["draft_tokens"], b["seq_lens_this_time"], b["seq_lens_encoder"])


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
def bad_args():
    b = mixed_batch(
        np.random.default_rng(3), 9, width=16, k=3, roles=["prefill", "decode", "empty"] * 3
    )
    return padding_offset_args(b)


def expect_error(args, argument, reference_too=True):
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ValueError, match=rf"^{OP}: {argument}\b") as err:
        _, after = run_op(OP, args)
    if reference_too:
        with pytest.raises(ValueError, match=rf"^{OP}: {argument}\b"):
            run_ref(OP, args)
    for a, c in zip(args, copies):
        assert_same(a, c, "argument (unchanged)")
    return str(err.value)


def test_negative_seq_len_is_refused():
    args = bad_args()
    q = args[4]
    q[1] = -1
    args[2] = cum_offsets(q, 16)
    args[3] = i64(q.sum())
    assert "(request 1)" in expect_error(args, "seq_len")


def test_prefill_longer_than_its_input_ids_row_is_refused():
    args = bad_args()
    q = args[4]
    q[3] = 17  # prefill request (roles repeat prefill, decode, empty); input_ids has 16 columns
    args[5][3] = 17
    args[2] = cum_offsets(q, 16)
    args[3] = i64(q.sum())
    msg = expect_error(args, "seq_len")
    assert "(request 3)" in msg and "input_ids row has 16 columns" in msg


def test_decode_longer_than_its_draft_tokens_row_is_refused():
    args = bad_args()
    q = args[4]
    q[4] = 5  # decode request; draft_tokens has k + 1 = 4 columns (upstream reads the next row)
    args[2] = cum_offsets(q, 16)
    args[3] = i64(q.sum())
    msg = expect_error(args, "seq_len")
    assert "(request 4)" in msg and "draft_tokens row has 4 columns" in msg


@pytest.mark.parametrize("b, delta", [(0, 1), (4, 1), (8, 3)])
def test_cum_offsets_that_make_requests_overlap_are_refused(b, delta):
    args = bad_args()
    args[2][b] += delta  # request b's slot ends after request b + 1 starts
    assert f"(request {b})" in expect_error(args, "cum_offsets")


def test_a_smaller_step_leaves_a_gap_but_the_next_request_then_overlaps():
    # cum_offsets[4] - 1: a gap after request 4, but request 5's slot shrinks below its tokens.
    args = bad_args()
    args[2][4] -= 1
    assert "(request 5)" in expect_error(args, "cum_offsets")


def test_cum_offsets_built_with_another_width_are_refused():
    args = bad_args()
    args[2] = cum_offsets(args[4], 17)  # wider than input_ids.shape[1]: requests overlap
    expect_error(args, "cum_offsets")
    args[2] = cum_offsets(args[4], 15)  # narrower: gaps, and the layout ends past token_num
    assert "ends at" in expect_error(args, "token_num")


def test_token_num_below_the_end_of_the_layout_is_refused():
    args = bad_args()
    args[3] = i64(int(args[4].sum()) - 1)
    assert "the layout of cum_offsets ends at" in expect_error(args, "token_num")


def test_negative_or_multi_element_token_num_is_refused():
    args = bad_args()
    args[3] = i64(-1)
    expect_error(args, "token_num")
    args[3] = i64([3, 4])
    expect_error(args, "token_num")


@pytest.mark.parametrize(
    "index, value, argument",
    [
        (4, lambda a: a.astype(np.int64), "seq_len"),
        (0, lambda a: a.reshape(-1), "input_ids"),
        (1, lambda a: a.astype(np.int32), "draft_tokens"),
        (1, lambda a: a[:3], "draft_tokens"),
        (2, lambda a: a[:5], "cum_offsets"),
        (5, lambda a: a[:2], "seq_lens_encoder"),
        (3, lambda a: a.astype(np.float32), "token_num"),
    ],
)
def test_wrong_dtype_rank_or_length_is_refused(index, value, argument):
    args = bad_args()
    args[index] = value(args[index])
    expect_error(args, argument, reference_too=False)


# ---------------------------------------------------------------------------------------------
# Gaps between requests (issue 16: accept what is harmless). FastDeploy's own operator test
# passes cum_offsets smaller than the prefix sum: the requests' ranges neither overlap nor leave
# [0, token_num); the entries in the gaps stay 0.
# ---------------------------------------------------------------------------------------------
def gap_outputs(args):
    """Op and reference on ``args``: every output equal, every input unchanged; -> the op's
    outputs (no invariant is assumed: `run` adds them)."""
    got, after = run_op(OP, args)
    expected = run_ref(OP, args)
    for name, g, e in zip(
        ("x_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k"), got, expected
    ):
        assert_same(g, e, f"{name} (op vs reference)")
    for a, b in zip(after, args):
        assert_same(a, b, "input (read only)")
    return got


def test_fastdeploy_cum_offsets_with_gaps():
    # FastDeploy's tests/operators/test_speculate_get_padding_offset.py: L_in 10, cum_offsets
    # [2, 5, 8, 12] (the prefix sum of 10 - seq_len would be [2, 7, 10, 14]), token_num 32 for
    # 26 tokens. Request b starts at b * 10 - cum_offsets[b - 1]: 0, 8, 15, 22 (gaps 13..14 and
    # 28..31). Upstream's test has 4 draft columns for decodes of 5 and 6 tokens (reads past the
    # draft row, refused below); here the draft rows are 8 wide.
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, (4, 10)).astype(np.int64)
    drafts = rng.integers(0, 1000, (4, 8)).astype(np.int64)
    cum = i32([2, 5, 8, 12])
    q = i32([8, 5, 7, 6])
    enc = i32([1, 0, 1, 0])
    x, batch_id, cu_q, cu_k = gap_outputs([ids, drafts, cum, i64(32), q, enc])
    assert cu_q.tolist() == [0, 8, 15, 22, 28] and cu_k.tolist() == cu_q.tolist()
    want_bid = np.zeros(32, np.int32)
    want_x = np.zeros(32, np.int64)
    for b, start in enumerate([0, 8, 15, 22]):
        want_bid[start : start + q[b]] = b
        want_x[start : start + q[b]] = (ids if enc[b] > 0 else drafts)[b, : q[b]]
    assert_same(batch_id, want_bid, "batch_id_per_token (gaps 0)")
    assert_same(x, want_x, "x_remove_padding (gaps 0)")


def test_fastdeploy_cum_offsets_with_a_draft_row_too_short_stay_refused():
    # The same input with upstream's 4 draft columns: request 1 decodes 5 tokens from a row of 4
    # (upstream reads into the next row). Refused, naming seq_len.
    rng = np.random.default_rng(0)
    args = [
        rng.integers(0, 1000, (4, 10)).astype(np.int64),
        rng.integers(0, 1000, (4, 4)).astype(np.int64),
        i32([2, 5, 8, 12]),
        i64(32),
        i32([8, 5, 7, 6]),
        i32([1, 0, 1, 0]),
    ]
    assert "draft_tokens row has 4 columns" in expect_error(args, "seq_len")


def test_trailing_gap_when_token_num_exceeds_the_layout():
    args = bad_args()
    t = int(args[4].sum())
    args[3] = i64(t + 3)
    x, batch_id, cu_q, _ = gap_outputs(args)
    assert x.shape == (t + 3,) and cu_q[-1] == t
    assert np.all(x[t:] == 0) and np.all(batch_id[t:] == 0)


@pytest.mark.parametrize("bsz", BATCH_GRID)
def test_random_gaps_match_the_reference_and_keep_every_token(bsz):
    rng = np.random.default_rng([bsz, 16])
    b = mixed_batch(rng, bsz, width=16, k=3)
    args = padding_offset_args(b)
    q = args[4].astype(np.int64)
    gaps = rng.integers(0, 3, q.size) * (rng.random(q.size) < 0.5)
    args[2] = np.cumsum(16 - q - gaps).astype(np.int32)  # slot b = q[b] + gaps[b]
    args[3] = i64(int((q + gaps).sum()) + int(rng.integers(0, 3)))
    x, batch_id, cu_q, cu_k = gap_outputs(args)
    starts = np.concatenate([[0], np.cumsum(q + gaps)])
    assert_same(cu_q, starts.astype(np.int32), "cu_seqlens_q = slot starts")
    enc = args[5]
    for r in range(q.size):
        lo = int(starts[r])
        src = args[0] if enc[r] > 0 else args[1]
        assert_same(x[lo : lo + q[r]], src[r, : q[r]], f"tokens of request {r}")
        assert np.all(batch_id[lo : lo + q[r]] == r)
        assert np.all(x[lo + q[r] : int(starts[r + 1])] == 0), "gap entries stay 0"
