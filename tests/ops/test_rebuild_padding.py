"""Tests of fd_mtp.ops.rebuild_padding (spec/ops.md §5.4), speculative branch (output_padding_offset
given) and plain branch (None): exact hand cases, float32/float16/bfloat16 with any hidden size, the
odd-size grid and Hypothesis batches against fd_mtp.reference (a row copy: exact, bfloat16 compared
through its uint16 bits), the row-count pitfall, and bad input."""

import numpy as np
import paddle
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packing_cases import batches, mixed_batch
from util import BATCH_GRID, assert_same, i32, to_numpy, to_paddle

from fd_mtp import ops, reference
from fd_mtp.testing.op_inputs import reference_layout

DTYPES = ("float32", "float16", "bfloat16")
OP = "rebuild_padding"


def hidden_rows(t, hidden, dtype, seed=0):
    """([t, hidden] paddle tensor, the numpy array the reference copies: same values or bf16 bits).
    Column 0 holds the row index (exact in every dtype below 256)."""
    values = np.random.default_rng(seed).standard_normal((t, hidden)).astype(np.float32)
    if hidden:
        values[:, 0] = np.arange(t) % 256
    tensor = paddle.to_tensor(values, place=paddle.CPUPlace()).astype(dtype)
    return tensor, to_numpy(tensor)


def run(
    tmp,
    cu,
    this_time,
    dec,
    enc,
    opo,
    max_len,
    dtype="float32",
    first_token_out=None,
    enable_logprob=False,
):
    """Op and reference; returns (op output as numpy, the input rows as numpy). tmp: row count or
    (rows, hidden)."""
    rows, hidden = (tmp, 4) if isinstance(tmp, int) else tmp
    tensor, array = hidden_rows(rows, hidden, dtype)
    args = [i32(cu), i32(this_time), i32(dec), i32(enc), None if opo is None else i32(opo)]
    tensors = [to_paddle(a) for a in args]
    out = ops.rebuild_padding(tensor, *tensors, first_token_out, max_len, enable_logprob)
    expected = reference.rebuild_padding(
        array, *[None if a is None else a.copy() for a in args], None, max_len, False
    )
    assert out.dtype == tensor.dtype, f"dtype {out.dtype} != {tensor.dtype}"
    got = to_numpy(out)
    assert_same(got, expected, "out (op vs reference)")
    assert_same(to_numpy(tensor), array, "tmp_out (read only)")
    for t, a in zip(tensors, args):
        if a is not None:
            assert_same(to_numpy(t), a, "read-only argument")
    return got, array


# ---------------------------------------------------------------------------------------------
# Named hand cases
# ---------------------------------------------------------------------------------------------
def test_trace_k1_target_prefill_keeps_the_last_prompt_row():
    # §13 K=1 step 2: 4 packed prompt rows, one output row (p3's).
    out, rows = run(4, [0, 4], [4], [0], [4], [0], 8)
    assert_same(out, rows[[3]], "out")


def test_trace_k1_target_verify_keeps_both_rows():
    # §13 K=1 step 4: [t1 d1] at positions 4, 5: two output rows in order.
    out, rows = run(2, [0, 2], [2], [4], [0], [0, 0], 8)
    assert_same(out, rows[[0, 1]], "out")


def test_speculative_mixed_batch_prefill_empty_decode():
    # b0 prefills 3 tokens (rows 0-2), b1 is empty, b2 verifies 2 (rows 3-4); width 4:
    # seq_lens_output [1, 0, 2] -> output_padding_offset [0, 7, 7] (request 2 starts at 8 - 7 = 1).
    out, rows = run(5, [0, 3, 3, 5], [3, 0, 2], [0, 0, 9], [3, 0, 0], [0, 7, 7], 4)
    assert_same(out, rows[[2, 3, 4]], "out")


def test_speculative_prefill_that_continues_a_chunk_and_a_one_token_decode():
    # b0: second chunk of 2 (dec 64), b1: decode of 1, b2: decode of 3; width 8.
    # seq_lens_output [1, 1, 3]: tmp = [7, 14, 19] -> offsets [0, 7, 14, 14, 14].
    out, rows = run(6, [0, 2, 3, 6], [2, 1, 3], [64, 5, 5], [2, 0, 0], [0, 7, 14, 14, 14], 8)
    assert_same(out, rows[[1, 2, 3, 4, 5]], "out")


def test_plain_branch_one_row_per_request_and_zero_rows_for_empty_requests():
    # b0 prefill 3 -> row 2; b1 empty (this_time 0) -> zeros; b2 decode 2 -> its first row (3);
    # b3 has tokens but dec == enc == 0 -> zeros.
    out, rows = run(6, [0, 3, 3, 5, 6], [3, 0, 2, 1], [0, 7, 9, 0], [3, 0, 0, 0], None, 4)
    want = np.zeros((4, 4), rows.dtype)
    want[0], want[2] = rows[2], rows[3]
    assert_same(out, want, "out")


def test_speculative_row_of_a_request_with_dec_and_enc_zero_is_zero():
    # b0 has one token but dec == enc == 0: its row stays zero; b1 decodes 1 (row 1).
    out, rows = run(2, [0, 1, 2], [1, 1], [0, 3], [0, 0], [0, 3], 4)
    want = np.zeros((2, 4), rows.dtype)
    want[1] = rows[1]
    assert_same(out, want, "out")


def test_first_token_out_and_enable_logprob_have_no_effect():
    first = paddle.ones([1, 4], dtype="float32")
    a, _ = run(5, [0, 3, 5], [3, 2], [0, 4], [3, 0], [0, 3, 3], 4)
    b, _ = run(
        5,
        [0, 3, 5],
        [3, 2],
        [0, 4],
        [3, 0],
        [0, 3, 3],
        4,
        first_token_out=first,
        enable_logprob=True,
    )
    assert_same(b, a, "out")


def test_no_rows():
    out, _ = run(0, [0, 0], [0], [0], [0], [], 4)
    assert out.shape == (0, 4)
    out, _ = run(0, [0], [], [], [], None, 4)
    assert out.shape == (0, 4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [1, 3, 8, 13, 64, 1024])
def test_every_dtype_and_hidden_size(dtype, hidden):
    # Upstream needs H to be a multiple of the 16-byte vector; any H works here.
    out, rows = run(
        (6, hidden), [0, 2, 3, 6], [2, 1, 3], [64, 5, 5], [2, 0, 0], [0, 7, 14, 14, 14], 8, dtype
    )
    assert_same(out, rows[[1, 2, 3, 4, 5]], "out")
    out, rows = run((6, hidden), [0, 2, 3, 6], [2, 1, 3], [64, 5, 5], [2, 0, 0], None, 8, dtype)
    assert_same(out, rows[[1, 2, 3]], "out")


# ---------------------------------------------------------------------------------------------
# The row-count pitfall: R assumes seq_len_this_time == seq_lens_encoder for prefilling requests
# ---------------------------------------------------------------------------------------------
def test_prefill_with_more_tokens_than_enc_needs_more_offsets_than_pre_process_built():
    # A non-truncating draft prefill feeds enc + 1 = 4 tokens: T = 4 + 1, R = 5 - 2 = 3, but
    # pre_process built 2 output rows (1 + 1). Upstream reads past output_padding_offset.
    tensor, _ = hidden_rows(5, 4, "float32")
    args = [
        to_paddle(a) for a in (i32([0, 4, 5]), i32([4, 1]), i32([0, 6]), i32([3, 0]), i32([0, 3]))
    ]
    with pytest.raises(
        ValueError, match=rf"^{OP}: output_padding_offset has 2 entries but the output has R = 3"
    ):
        ops.rebuild_padding(tensor, *args, None, 4, False)
    with pytest.raises(ValueError, match=rf"^{OP}: output_padding_offset has 2 entries"):
        reference.rebuild_padding(
            to_numpy(tensor),
            i32([0, 4, 5]),
            i32([4, 1]),
            i32([0, 6]),
            i32([3, 0]),
            i32([0, 3]),
            None,
            4,
            False,
        )


def test_prefill_with_fewer_tokens_than_enc_drops_trailing_rows_as_upstream():
    # b0: this_time 2 but enc 3; b1 decodes 2. T = 4, R = 4 - 2 = 2 of the 3 rows pre_process
    # built ([0, 3, 3] for width 4): rows of b0 (source 0 + 2 = row 2) and b1's first row (row 2 + 0).
    out, rows = run(4, [0, 2, 4], [2, 2], [0, 4], [3, 0], [0, 3, 3], 4)
    assert_same(out, rows[[2, 2]], "out")


# ---------------------------------------------------------------------------------------------
# Grid and Hypothesis (offsets from reference.pre_process)
# ---------------------------------------------------------------------------------------------
def run_batch(b, dtype, hidden, speculative):
    width = b["input_ids"].shape[1]
    pre = reference_layout(b)
    cu_q, opo = pre[2], pre[5]
    rows, _ = run(
        (int(cu_q[-1]), hidden),
        cu_q,
        b["seq_lens_this_time"],
        b["seq_lens_decoder"],
        b["seq_lens_encoder"],
        opo if speculative else None,
        width,
        dtype,
    )
    n_out = int(opo.size) if speculative else b["seq_lens_this_time"].size
    assert rows.shape == (n_out, hidden)


@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("dtype", DTYPES)
def test_grid_matches_reference(bsz, dtype):
    b = mixed_batch(np.random.default_rng([bsz, len(dtype)]), bsz, width=32, k=3, extra_rows=2)
    run_batch(b, dtype, 24, True)
    run_batch(b, dtype, 24, False)


@given(batches(), st.sampled_from(DTYPES), st.integers(0, 20), st.booleans())
def test_hypothesis_matches_reference(b, dtype, hidden, speculative):
    run_batch(b, dtype, hidden, speculative)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
def bad_case():
    """A valid speculative case (the mixed hand case above), as numpy arrays."""
    tmp = np.arange(20, dtype=np.float32).reshape(5, 4)
    return dict(
        tmp_out=tmp,
        cu_seqlens_q=i32([0, 3, 3, 5]),
        seq_len_this_time=i32([3, 0, 2]),
        seq_lens_decoder=i32([0, 0, 9]),
        seq_lens_encoder=i32([3, 0, 0]),
        output_padding_offset=i32([0, 7, 7]),
        first_token_out=None,
        max_input_length=4,
        enable_logprob=False,
    )


def expect_error(case, argument, reference_too=True):
    copies = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.items()}
    tensors = [to_paddle(v) for v in case.values()]
    with pytest.raises(ValueError, match=rf"^{OP}: {argument}\b") as err:
        ops.rebuild_padding(*tensors)
    if reference_too:
        with pytest.raises(ValueError, match=rf"^{OP}: {argument}\b"):
            reference.rebuild_padding(*copies.values())
    for (k, v), t in zip(case.items(), tensors):
        if isinstance(v, np.ndarray):
            assert_same(to_numpy(t), copies[k], f"{k} (unchanged)")
    return str(err.value)


def test_bad_case_is_valid():
    c = bad_case()
    out = ops.rebuild_padding(*[to_paddle(v) for v in c.values()])
    assert_same(out.numpy(), c["tmp_out"][[2, 3, 4]], "out")


def test_offset_mapping_a_row_past_the_batch_is_refused():
    c = bad_case()
    c["output_padding_offset"] = i32([0, 7, 11])  # row 2 -> position 13 -> request 3 of 3
    assert "request 3 but the batch has 3" in expect_error(c, "output_padding_offset")


def test_negative_offset_position_is_refused():
    c = bad_case()
    c["output_padding_offset"] = i32([-1, 7, 7])
    expect_error(c, "output_padding_offset")


def test_max_input_length_other_than_the_offsets_width_is_refused():
    c = bad_case()
    c["max_input_length"] = 2  # row 2 -> position 9 -> request 4
    expect_error(c, "output_padding_offset")


def test_source_row_past_tmp_out_is_refused():
    c = bad_case()
    c["cu_seqlens_q"] = i32(
        [0, 3, 4, 5]
    )  # request 2 starts at 4: its second row would be row 5 of 5
    msg = expect_error(c, "cu_seqlens_q")
    assert "(request 2)" in msg and "tmp_out row 5" in msg
    c = bad_case()
    c["output_padding_offset"] = None
    c["cu_seqlens_q"] = i32([0, 5, 5, 5])  # plain branch: request 0 -> row 5 + 2
    expect_error(c, "cu_seqlens_q")


def test_prefill_tokens_beyond_tmp_out_are_refused():
    c = bad_case()
    c["seq_lens_encoder"] = i32([9, 0, 0])  # R = 5 - 8 < 0
    expect_error(c, "seq_lens_encoder")


def test_short_output_padding_offset_is_refused():
    c = bad_case()
    c["output_padding_offset"] = i32([0, 7])
    assert "R = 3" in expect_error(c, "output_padding_offset")


@pytest.mark.parametrize(
    "key, value, argument",
    [
        ("tmp_out", lambda v: v.astype(np.int32), "tmp_out"),
        ("tmp_out", lambda v: v.reshape(-1), "tmp_out"),
        ("cu_seqlens_q", lambda v: v.reshape(2, 2), "cu_seqlens_q"),
        ("cu_seqlens_q", lambda v: v.astype(np.int64), "cu_seqlens_q"),
        ("seq_len_this_time", lambda v: v[:2], "seq_len_this_time"),
        ("seq_lens_decoder", lambda v: v.astype(np.int64), "seq_lens_decoder"),
        ("output_padding_offset", lambda v: v.astype(np.int64), "output_padding_offset"),
        ("max_input_length", lambda v: 0, "max_input_length"),
    ],
)
def test_wrong_dtype_shape_or_attribute_is_refused(key, value, argument):
    c = bad_case()
    c[key] = value(c[key])
    expect_error(c, argument, reference_too=argument == "max_input_length")


def test_empty_output_padding_offset_stays_on_the_speculative_branch():
    # Paddle passes a zero-size tensor to an optional input as "none"; the op must still take the
    # speculative branch (R rows), not the plain one (bsz rows).
    c = bad_case()
    c["seq_len_this_time"] = i32([0, 0, 0])
    c["seq_lens_encoder"] = i32([0, 0, 0])
    c["tmp_out"] = c["tmp_out"][:0]
    c["cu_seqlens_q"] = i32([0, 0, 0, 0])
    c["output_padding_offset"] = i32([])
    out = ops.rebuild_padding(*[to_paddle(v) for v in c.values()])
    assert tuple(out.shape) == (0, 4)
    c = bad_case()
    c["output_padding_offset"] = i32([])
    assert "has 0 entries but the output has R = 3" in expect_error(c, "output_padding_offset")


# ---------------------------------------------------------------------------------------------
# NaN / inf: a pure copy, values never inspected (bit for bit, op and reference)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_nan_and_inf_rows_are_copied_bit_for_bit(dtype):
    values = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    values[3, 1], values[4, 0], values[5, 7] = np.nan, np.inf, -np.inf
    tensor = paddle.to_tensor(values, place=paddle.CPUPlace()).astype(dtype)
    array = to_numpy(tensor)
    # A prefill of 4 (its last row, 3) and a decode of 2 (rows 4 and 5).
    args = [i32([0, 4, 6]), i32([4, 2]), i32([0, 9]), i32([4, 0]), i32([0, 2047, 2047])]
    out = ops.rebuild_padding(tensor, *[to_paddle(a) for a in args], None, 2048, False)
    expected = reference.rebuild_padding(array.copy(), *[a.copy() for a in args], None, 2048, False)
    bits = {2: np.uint16, 4: np.uint32}[array.itemsize]
    got = to_numpy(out).view(bits)
    assert_same(got, np.asarray(expected).view(bits), "op vs reference (bits)")
    assert_same(got, array[[3, 4, 5]].view(bits), "out == rows 3, 4, 5 (bits)")
