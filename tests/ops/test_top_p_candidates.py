"""Tests of fd_mtp.ops.top_p_candidates (spec/ops.md §5.6, §14 item 8).

Hand cases with exact arrays (tie order by lower id, the top-p stop, length 0 when p is not reached,
C when p == 1.0 exactly), the numpy reference against the op on an odd-size grid (float32 /
float16 / bfloat16, many ties), a V = 100k case, Hypothesis batches, invariants on every output,
and bad input (ValueError naming the argument).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sampling_util import DTYPES, as_dtype, numpy_of, offsets, random_out_rows, tensor, values_of
from util import BATCH_GRID, assert_same

from fd_mtp import ops, reference
from fd_mtp.testing import op_inputs

CANDIDATE_LENS = tuple(range(1, 11)) + tuple(range(20, 101, 10))


def make(probs, top_p, out_rows=None, dtype="float32", max_seq_len=8):
    probs = np.asarray(probs, np.float32)
    out_rows = [1] * probs.shape[0] if out_rows is None else out_rows
    pad, _, _ = offsets(out_rows, max_seq_len)
    return as_dtype(probs, dtype), as_dtype(np.asarray(top_p, np.float32), dtype), pad


def run_both(probs, top_p, pad, c, max_seq_len=8):
    """Op and reference; checks they agree exactly and that the inputs are unchanged."""
    tensors = [tensor(a) for a in (probs, top_p, pad)]
    out = [numpy_of(t) for t in ops.top_p_candidates(*tensors, c, max_seq_len)]
    for t, a, name in zip(
        tensors, (probs, top_p, pad), ("probs", "top_p", "output_padding_offset")
    ):
        assert_same(numpy_of(t), a, f"{name} (read-only)")
    expected = reference.top_p_candidates(probs.copy(), top_p.copy(), pad.copy(), c, max_seq_len)
    for g, e, name in zip(
        out, expected, ("verify_scores", "verify_tokens", "actual_candidate_lens")
    ):
        assert_same(g, e, f"{name} (op vs reference)")
    check_invariants(probs, top_p, pad, c, max_seq_len, *out)
    return out


def check_invariants(probs, top_p, pad, c, max_seq_len, scores, tokens, lens):
    rows = probs.shape[0]
    assert scores.shape == (rows, c) and scores.dtype == probs.dtype
    assert tokens.shape == (rows, c) and tokens.dtype == np.int64
    assert lens.shape == (rows,) and lens.dtype == np.int32
    values = values_of(probs)
    p_all = values_of(top_p)
    for r in range(rows):
        n = int(lens[r])
        assert 0 <= n <= c, f"row {r}: actual {n} outside [0, {c}]"
        filled = n if n > 0 else c  # length 0: all C slots filled
        toks = tokens[r, :filled]
        assert np.unique(toks).size == filled, f"row {r}: repeated tokens {toks}"
        assert np.all((toks >= 0) & (toks < probs.shape[1]))
        assert_same(scores[r, :filled], probs[r, toks], f"row {r}: scores are probs[row, tokens]")
        sv = values_of(scores[r, :filled])
        assert np.all(sv[:-1] >= sv[1:]), f"row {r}: scores increase: {sv}"
        assert toks[0] == np.argmax(values[r]), f"row {r}: slot 0 is not the argmax"
        if n < c and n > 0:
            assert np.all(tokens[r, n:] == 0) and np.all(values_of(scores[r, n:]) == 0), (
                f"row {r}: tail not 0"
            )
        b = (r + int(pad[r])) // max_seq_len
        total = np.float32(0)
        first = 0
        for i in range(filled):
            total = np.float32(total + sv[i])
            if total >= p_all[b]:
                first = i + 1
                break
        assert n == (first if first else (c if p_all[b] == np.float32(1.0) else 0)), (
            f"row {r}: length {n}"
        )


# ---------------------------------------------------------------------------------------------
# Hand cases
# ---------------------------------------------------------------------------------------------
def test_docstring_example_ties_go_to_the_lower_id():
    probs, top_p, pad = make(
        [[0.1, 0.4, 0.1, 0.4], [0.5, 0.25, 0.125, 0.125]], [0.7, 0.8], out_rows=[1, 1]
    )
    scores, tokens, lens = run_both(probs, top_p, pad, 3)
    assert_same(tokens, np.array([[1, 3, 0], [0, 1, 2]], np.int64), "verify_tokens")
    assert_same(lens, np.array([2, 3], np.int32), "actual_candidate_lens")
    assert_same(
        scores, np.array([[0.4, 0.4, 0.0], [0.5, 0.25, 0.125]], np.float32), "verify_scores"
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_two_rows_of_one_request_share_its_top_p(dtype):
    # Both rows belong to request 0 (p = 0.5); request 1 (p = 1.0) has none.
    probs, top_p, pad = make(
        [[0.25, 0.5, 0.25], [0.125, 0.125, 0.75]], [0.5, 1.0], out_rows=[2, 0], dtype=dtype
    )
    scores, tokens, lens = run_both(probs, top_p, pad, 2)
    assert_same(tokens, np.array([[1, 0], [2, 0]], np.int64), "verify_tokens")
    assert_same(lens, np.array([1, 1], np.int32), "actual_candidate_lens")
    assert_same(scores, as_dtype([[0.5, 0], [0.75, 0]], dtype), "verify_scores")


@pytest.mark.parametrize("dtype", DTYPES)
def test_top_p_not_reached_gives_length_zero_and_every_slot_filled(dtype):
    probs, top_p, pad = make([[0.25, 0.125, 0.25, 0.25, 0.125]], [0.9], dtype=dtype)
    scores, tokens, lens = run_both(probs, top_p, pad, 3)  # 0.75 < 0.9 inside C = 3
    assert_same(tokens, np.array([[0, 2, 3]], np.int64), "verify_tokens")
    assert_same(lens, np.array([0], np.int32), "actual_candidate_lens")
    assert_same(scores, as_dtype([[0.25, 0.25, 0.25]], dtype), "verify_scores")


@pytest.mark.parametrize("dtype", DTYPES)
def test_top_p_one_not_reached_gives_c_and_reached_gives_the_first_slot(dtype):
    probs, top_p, pad = make(
        [[0.25, 0.125, 0.25, 0.25, 0.125], [0.5, 0.0, 0.5, 0.0, 0.0]],
        [1.0, 1.0],
        out_rows=[1, 1],
        dtype=dtype,
    )
    scores, tokens, lens = run_both(probs, top_p, pad, 3)
    assert_same(tokens, np.array([[0, 2, 3], [0, 2, 0]], np.int64), "verify_tokens")
    assert_same(
        lens, np.array([3, 2], np.int32), "actual_candidate_lens"
    )  # row 1: 0.5 + 0.5 >= 1 at slot 1


def test_all_equal_probabilities_take_the_lowest_ids_in_order():
    probs, top_p, pad = make([np.full(50, 0.02)], [0.5])
    scores, tokens, lens = run_both(probs, top_p, pad, 30)
    assert_same(tokens[0, :25], np.arange(25, dtype=np.int64), "verify_tokens")
    assert_same(
        lens, np.array([25], np.int32), "actual_candidate_lens"
    )  # float32: 25 * 0.02 = 0.50000006


def test_negative_zero_ties_with_zero():
    probs, top_p, pad = make([[0.0, -0.0, 1.0, 0.0]], [1.0])
    scores, tokens, lens = run_both(probs, top_p, pad, 4)
    assert_same(tokens, np.array([[2, 0, 0, 0]], np.int64), "verify_tokens")  # stops at slot 0
    probs, top_p, pad = make([[-0.0, 0.0, 0.5, 0.0]], [0.9])
    scores, tokens, lens = run_both(probs, top_p, pad, 4)
    assert_same(tokens, np.array([[2, 0, 1, 3]], np.int64), "verify_tokens")  # -0.0 ties: id order


def test_candidates_equal_to_vocab():
    probs, top_p, pad = make([[0.1, 0.2, 0.3, 0.4]], [0.99])
    scores, tokens, lens = run_both(probs, top_p, pad, 4)
    assert_same(tokens, np.array([[3, 2, 1, 0]], np.int64), "verify_tokens")
    assert_same(lens, np.array([4], np.int32), "actual_candidate_lens")


# ---------------------------------------------------------------------------------------------
# Grid and Hypothesis against the reference
# ---------------------------------------------------------------------------------------------
def random_case(rng, n, dtype, vocab, *, levels=None, max_seq_len=32):
    out_rows = random_out_rows(rng, n)
    if sum(out_rows) == 0:
        out_rows[0] = 1
    rows = sum(out_rows)
    logits = rng.standard_normal((rows, vocab)).astype(np.float32) * 3
    if levels:  # quantised: many exact ties
        logits = np.round(logits * levels) / levels
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32)
    top_p = rng.choice([0.0, 0.3, 0.7, 0.9, 0.95, 1.0], n).astype(np.float32)
    pad, _, _ = offsets(out_rows, max_seq_len)
    return as_dtype(probs, dtype), as_dtype(top_p, dtype), pad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", BATCH_GRID)
def test_grid_matches_reference(batch, dtype):
    rng = np.random.default_rng(batch * 3 + len(dtype))
    c = CANDIDATE_LENS[batch % len(CANDIDATE_LENS)]
    probs, top_p, pad = random_case(rng, batch, dtype, 151, levels=2 if batch % 2 else None)
    run_both(probs, top_p, pad, c, 32)


@pytest.mark.parametrize("c", CANDIDATE_LENS)
def test_every_candidates_len(c):
    rng = np.random.default_rng(c)
    probs, top_p, pad = random_case(rng, 9, "float32", 120, levels=1)
    run_both(probs, top_p, pad, c, 32)


@pytest.mark.parametrize("dtype", DTYPES)
def test_vocab_100k_small_batch(dtype):
    probs, top_p, pad, _, max_seq_len = op_inputs.build_top_p(3, 100_000, dtype=dtype).args
    run_both(probs, top_p, pad, 10, max_seq_len)
    run_both(probs, top_p, pad, 100, max_seq_len)


@given(
    n=st.integers(1, 10),
    vocab=st.integers(1, 60),
    c=st.sampled_from(CANDIDATE_LENS),
    dtype=st.sampled_from(DTYPES),
    levels=st.sampled_from([None, 1, 4]),
    seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis_batches_match_reference(n, vocab, c, dtype, levels, seed):
    c = max(x for x in CANDIDATE_LENS if x <= min(c, vocab))
    rng = np.random.default_rng(seed)
    max_seq_len = int(rng.integers(4, 40))  # >= the 4 rows a request has at most
    probs, top_p, pad = random_case(rng, n, dtype, vocab, levels=levels, max_seq_len=max_seq_len)
    run_both(probs, top_p, pad, c, max_seq_len)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
def base_bad():
    return make([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]], [0.9, 0.9], out_rows=[1, 1])


def expect_error(probs, top_p, pad, c, argument, max_seq_len=8, reference_too=True):
    with pytest.raises(ValueError, match=argument):
        ops.top_p_candidates(tensor(probs), tensor(top_p), tensor(pad), c, max_seq_len)
    if reference_too:
        with pytest.raises(ValueError, match=argument):
            reference.top_p_candidates(probs, top_p, pad, c, max_seq_len)


@pytest.mark.parametrize("c", [0, 11, 15, 101, 110, -10])
def test_candidates_len_outside_the_upstream_set(c):
    expect_error(*base_bad(), c, "candidates_len")


def test_candidates_len_above_vocab():
    expect_error(*base_bad(), 4, "candidates_len")


def test_row_of_a_request_beyond_top_p():
    probs, top_p, pad = base_bad()
    expect_error(probs, top_p[:1], pad, 2, "output_padding_offset")


def test_negative_position():
    probs, top_p, pad = base_bad()
    expect_error(probs, top_p, np.array([0, -3], np.int32), 2, "output_padding_offset")


@pytest.mark.parametrize(
    "which,value,argument",
    [
        (0, np.ones((2, 3), np.float64), "probs"),
        (0, np.ones(3, np.float32), "probs"),
        (1, np.ones(2, np.float16), "top_p"),
        (1, np.ones((2, 2), np.float32), "top_p"),
        (2, np.zeros(1, np.int32), "output_padding_offset"),
        (2, np.zeros(2, np.int64), "output_padding_offset"),
    ],
)
def test_bad_shapes_and_dtypes(which, value, argument):
    args = list(base_bad())
    args[which] = value
    expect_error(*args, 2, argument, reference_too=False)


def test_bad_max_seq_len():
    expect_error(*base_bad(), 2, "max_seq_len", max_seq_len=0, reference_too=False)


# ------------------------------------------------------------------------------------------------
# NaN / inf: refused (op and reference), the argument and the row / request named
# ------------------------------------------------------------------------------------------------
def expect_refused(probs, top_p, pad, c, pattern):
    tensors = [tensor(a) for a in (probs, top_p, pad)]
    with pytest.raises(ValueError, match=pattern):
        ops.top_p_candidates(*tensors, c, 8)
    with pytest.raises(ValueError, match=pattern):
        reference.top_p_candidates(probs.copy(), top_p.copy(), pad.copy(), c, 8)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("column", [0, 17, 39])  # first, a skipped block, the tail
def test_non_finite_probs_are_refused(dtype, value, column):
    rng = np.random.default_rng(3)
    probs = rng.random((3, 40)).astype(np.float32)
    probs[1, column] = value
    probs, top_p, pad = make(probs, [0.5, 0.9, 0.3], dtype=dtype)
    expect_refused(
        probs,
        top_p,
        pad,
        5,
        rf"^top_p_candidates: probs row 1 holds NaN or inf at column {column};",
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_top_p_of_a_row_is_refused_and_of_no_row_ignored(dtype, value):
    probs = np.full((2, 10), 0.1, np.float32)
    probs_, top_p, pad = make(probs, [0.5, value, 0.3], out_rows=[1, 1, 0], dtype=dtype)
    expect_refused(probs_, top_p, pad, 3, r"^top_p_candidates: top_p \(request 1\) is NaN")
    # Request 2 has no row: its top_p is never read.
    probs_, top_p, pad = make(probs, [0.5, 0.3, value], out_rows=[1, 1, 0], dtype=dtype)
    run_both(probs_, top_p, pad, 3)
