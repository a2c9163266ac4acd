"""Tests of fd_mtp.ops.eagle_get_hidden_states (spec/ops.md §6.2) and
fd_mtp.ops.eagle_get_self_hidden_states (§6.4): exact hand cases, an odd-size grid and Hypothesis
properties against the numpy references, invariants, and bad input.

Both ops are row gathers, so every comparison is exact; bfloat16 is compared through its uint16 bits
(the reference gathers the same bits)."""

import numpy as np
import paddle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, flags, i32, i64, to_numpy, to_paddle

from fd_mtp import ops, reference
from fd_mtp.testing.op_inputs import positional

DTYPES = ("float32", "float16", "bfloat16")


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
def numbered(tin, hidden, seed=0):
    """[tin, hidden] float32 rows; column 0 holds the row index (exact in every dtype for < 256)."""
    rng = np.random.default_rng(seed)
    out = rng.standard_normal((tin, hidden)).astype(np.float32)
    out[:, 0] = np.arange(tin) % 256
    return out


def as_input(values, dtype):
    """(paddle tensor of `dtype`, the numpy array the reference gathers: same values or bf16 bits)."""
    tensor = paddle.to_tensor(values, place=paddle.CPUPlace()).astype(dtype)
    return tensor, to_numpy(tensor)


def hidden_op_and_ref(values, dtype, per_request):
    """Run eagle_get_hidden_states (op and reference) on `values` cast to `dtype`.

    per_request: [this_time, enc, accept_nums, base_this_time] (numpy). Returns (op out, ref out,
    input as numpy) and checks that no argument was written.
    """
    this_time, enc, accept, base_this_time = per_request
    bsz = this_time.size
    tensor, array = as_input(values, dtype)
    args = [
        this_time,
        enc,
        i32(np.zeros(bsz)),
        flags(np.zeros(bsz)),
        accept,
        base_this_time,
        i32(np.zeros(bsz)),
    ]
    tensors = [to_paddle(a) for a in args]
    out = ops.eagle_get_hidden_states(tensor, *tensors, 2)
    expected = reference.eagle_get_hidden_states(array, *[a.copy() for a in args], 2)
    assert out.dtype == tensor.dtype, f"dtype {out.dtype} != {tensor.dtype}"
    assert_same(to_numpy(tensor), array, "input (unchanged)")
    for t, a in zip(tensors, args):
        assert_same(to_numpy(t), a, "read-only argument")
    return to_numpy(out), expected, array


def self_op_and_ref(values, dtype, last, this_time, step_idx):
    tensor, array = as_input(values, dtype)
    args = [last, this_time, step_idx]
    tensors = [to_paddle(a) for a in args]
    out = ops.eagle_get_self_hidden_states(tensor, *tensors)
    expected = reference.eagle_get_self_hidden_states(array, *[a.copy() for a in args])
    assert out.dtype == tensor.dtype
    assert_same(to_numpy(tensor), array, "input (unchanged)")
    for t, a in zip(tensors, args):
        assert_same(to_numpy(t), a, "read-only argument")
    return to_numpy(out), expected, array


def check_gather(out, array, rows_expected):
    """Every output row is an input row, rows appear in input order, and there are rows_expected."""
    assert out.shape == (rows_expected, array.shape[1]), (
        f"shape {out.shape}, expected ({rows_expected}, {array.shape[1]})"
    )
    previous = -1
    for k, row in enumerate(out):
        matches = np.flatnonzero(np.all(array[previous + 1 :] == row, axis=1))
        assert matches.size, f"output row {k} is not an input row after input row {previous}"
        previous = previous + 1 + int(matches[0])


# ---------------------------------------------------------------------------------------------
# eagle_get_hidden_states: named hand cases
# ---------------------------------------------------------------------------------------------
def hidden_case(dtype, tin, this_time, enc, accept, base_this_time, hidden=8):
    values = numbered(tin, hidden)
    out, expected, array = hidden_op_and_ref(
        values, dtype, [i32(this_time), i32(enc), i32(accept), i32(base_this_time)]
    )
    assert_same(out, expected, "op vs reference")
    return out, array


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_trace_k1_prefill_maps_the_four_target_rows_one_to_one(dtype):
    # §13 K=1 step 3: draft prefill of 4 (input [p1 p2 p3 t1]) over the target's 4 prompt rows.
    out, array = hidden_case(dtype, 4, [4], [4], [1], [4])
    assert_same(out, array[[0, 1, 2, 3]], "target_hidden_states")


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_trace_k1_decode_accepted_keeps_both_rows(dtype):
    # §13 K=1 step 5: target verified [t1 d1] (2 rows), accepted 2: rows of t1@4 and d1@5.
    out, array = hidden_case(dtype, 2, [2], [0], [2], [2])
    assert_same(out, array[[0, 1]], "target_hidden_states")


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_trace_k1_decode_rejected_keeps_the_first_row_only(dtype):
    out, array = hidden_case(dtype, 2, [1], [0], [1], [2])
    assert_same(out, array[[0]], "target_hidden_states")


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_trace_k2_all_accepted_keeps_three_rows(dtype):
    # §13 K=2: target row [t1 d1 d2], acc 3 (d1 d2 t4): draft recomputes position 4 onwards.
    out, array = hidden_case(dtype, 3, [3], [0], [3], [3])
    assert_same(out, array[[0, 1, 2]], "target_hidden_states")


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_mixed_batch_gathers_prefill_and_accepted_rows_and_skips_the_rest(dtype):
    # 0: draft prefill of 3; 1: target ran 2 rows, draft does not run (skip 2); 2: empty slot;
    # 3: decode, 1 of 3 accepted; 4: decode, 2 of 2 accepted.
    out, array = hidden_case(
        dtype, 10, [3, 0, 0, 1, 2], [3, 0, 0, 0, 0], [1, 1, 0, 1, 2], [3, 2, 0, 3, 2]
    )
    assert_same(out, array[[0, 1, 2, 5, 8, 9]], "target_hidden_states")


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_prefill_takes_enc_rows_not_the_targets_count(dtype):
    # The draft's enc decides how many rows a prefill takes, whatever base_this_time says.
    out, array = hidden_case(dtype, 6, [2, 1], [2, 0], [0, 1], [5, 1])
    assert_same(out, array[[0, 1, 2]], "target_hidden_states")


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_no_rows_gives_an_empty_result_of_the_input_dtype(dtype):
    out, array = hidden_case(dtype, 4, [0, 0], [0, 0], [2, 1], [2, 2])
    assert out.shape == (0, 8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_accept_zero_decode_takes_nothing_but_skips_its_rows(dtype):
    out, array = hidden_case(dtype, 5, [1, 1], [0, 0], [0, 2], [3, 2])
    assert_same(out, array[[3, 4]], "target_hidden_states")


def test_hidden_extra_input_rows_beyond_the_batch_are_ignored():
    out, array = hidden_case("float32", 9, [1], [0], [1], [2])
    assert_same(out, array[[0]], "target_hidden_states")


def test_hidden_bfloat16_special_values_are_copied_bit_exactly():
    bits = np.array(
        [[0x3F80, 0x4000], [0x7F80, 0xFF80], [0x7FC1, 0x8000], [0x0001, 0x8001]], np.uint16
    )
    tensor = paddle.to_tensor(bits, place=paddle.CPUPlace()).view(paddle.bfloat16)
    args = [
        i32([0, 3]),
        i32([0, 3]),
        i32([0, 0]),
        flags([0, 0]),
        i32([1, 0]),
        i32([1, 0]),
        i32([0, 0]),
    ]
    out = ops.eagle_get_hidden_states(tensor, *[to_paddle(a) for a in args], 1)
    assert_same(to_numpy(out), bits[[1, 2, 3]], "bf16 bits")


# ---------------------------------------------------------------------------------------------
# eagle_get_self_hidden_states: named hand cases
# ---------------------------------------------------------------------------------------------
def self_case(dtype, tin, last, this_time, step_idx, hidden=8):
    values = numbered(tin, hidden, seed=1)
    out, expected, array = self_op_and_ref(values, dtype, i32(last), i32(this_time), i64(step_idx))
    assert_same(out, expected, "op vs reference")
    return out, array


@pytest.mark.parametrize("dtype", DTYPES)
def test_self_trace_k2_after_prefill_takes_the_single_row(dtype):
    # §13 K=2: substep 0 after the prefill produced one row (rebuild_padding); step_idx is now 1.
    out, array = self_case(dtype, 1, [4], [1], [1])
    assert_same(out, array[[0]], "self hidden")


@pytest.mark.parametrize("dtype", DTYPES)
def test_self_trace_k2_decode_takes_the_requests_last_row(dtype):
    # §13 K=2 decode: draft fed [d1 d2 t4] (3 rows), update advanced step_idx to 4.
    out, array = self_case(dtype, 3, [3], [1], [4])
    assert_same(out, array[[2]], "self hidden")


@pytest.mark.parametrize("dtype", DTYPES)
def test_self_mixed_batch_takes_one_row_per_running_request(dtype):
    # 0 from prefill (1 row); 1 decode of 3; 2 stopped after prefill (1 row); 3 empty slot;
    # 4 stopped right after insertion (step 1, no rows); 5 stopped decode of 2; 6 decode of 2.
    out, array = self_case(
        dtype, 9, [5, 3, 4, 0, 0, 2, 2], [1, 1, 0, 0, 0, 0, 1], [1, 6, 1, 0, 1, 7, 9]
    )
    assert_same(out, array[[0, 3, 8]], "self hidden")


def test_self_quirk_decode_with_step_idx_1_is_read_as_one_prefill_row():
    out, array = self_case("float32", 3, [2, 1], [1, 1], [1, 5])
    assert_same(out, array[[0, 1]], "self hidden (misaligned, as upstream)")


def test_self_column_shaped_tensors_and_all_stopped_gives_empty():
    values = numbered(4, 8)
    out, expected, _ = self_op_and_ref(
        values,
        "float32",
        np.array([[2], [2]], np.int32),
        np.array([[0], [0]], np.int32),
        np.array([[3], [4]], np.int64),
    )
    assert out.shape == (0, 8)
    assert_same(out, expected, "op vs reference")


# ---------------------------------------------------------------------------------------------
# Random valid batches
# ---------------------------------------------------------------------------------------------
def random_hidden_batch(rng, bsz):
    """Per-request arrays for eagle_get_hidden_states and the number of rows they consume / output."""
    kind = rng.integers(0, 4, size=bsz)  # 0 prefill, 1 target-only, 2 empty, 3 decode
    this_time = np.zeros(bsz, np.int32)
    enc = np.zeros(bsz, np.int32)
    accept = rng.integers(0, 4, size=bsz).astype(np.int32)  # stale values for non-decodes
    base = np.zeros(bsz, np.int32)
    consumed = produced = 0
    for b in range(bsz):
        if kind[b] == 0:
            enc[b] = this_time[b] = rng.integers(1, 6)
            base[b] = rng.integers(0, 6)
            consumed += enc[b]
            produced += enc[b]
        elif kind[b] == 1:
            base[b] = rng.integers(1, 5)
            consumed += base[b]
        elif kind[b] == 3:
            base[b] = rng.integers(0, 5)
            accept[b] = rng.integers(0, base[b] + 1)
            this_time[b] = max(int(accept[b]), 1)
            consumed += base[b]
            produced += accept[b]
    return [this_time, enc, accept, base], int(consumed), int(produced)


def random_self_batch(rng, bsz):
    kind = rng.integers(
        0, 4, size=bsz
    )  # 0 from prefill, 1 decode, 2 stopped after prefill, 3 stopped
    last = np.zeros(bsz, np.int32)
    this_time = np.zeros(bsz, np.int32)
    step = rng.integers(2, 100, size=bsz).astype(np.int64)
    consumed = produced = 0
    for b in range(bsz):
        if kind[b] == 0:
            step[b], this_time[b], last[b] = 1, 1, rng.integers(0, 6)
            consumed += 1
            produced += 1
        elif kind[b] == 1:
            this_time[b], last[b] = 1, rng.integers(1, 6)
            consumed += last[b]
            produced += 1
        elif kind[b] == 2:
            step[b], last[b] = 1, rng.integers(0, 4)
            consumed += 1 if last[b] > 0 else 0
        else:
            last[b] = rng.integers(0, 4)
            consumed += last[b]
    return [last, this_time, step], int(consumed), int(produced)


def hidden_check(seed, bsz, hidden, dtype, slack=0):
    rng = np.random.default_rng(seed)
    per_request, consumed, produced = random_hidden_batch(rng, bsz)
    values = numbered(consumed + slack, hidden, seed)
    out, expected, array = hidden_op_and_ref(values, dtype, per_request)
    assert_same(out, expected, "op vs reference")
    return out, array, produced


def self_check(seed, bsz, hidden, dtype, slack=0):
    rng = np.random.default_rng(seed)
    per_request, consumed, produced = random_self_batch(rng, bsz)
    values = numbered(consumed + slack, hidden, seed)
    out, expected, array = self_op_and_ref(values, dtype, *per_request)
    assert_same(out, expected, "op vs reference")
    return out, array, produced


GRID = [(bsz, hidden, dtype) for bsz in BATCH_GRID for hidden in (8, 64, 129) for dtype in DTYPES]


@pytest.mark.parametrize("bsz, hidden, dtype", GRID)
def test_hidden_grid_op_matches_reference(bsz, hidden, dtype):
    hidden_check(bsz * 1000 + hidden, bsz, hidden, dtype)


@pytest.mark.parametrize("bsz, hidden, dtype", GRID)
def test_self_grid_op_matches_reference(bsz, hidden, dtype):
    self_check(bsz * 1000 + hidden, bsz, hidden, dtype)


@pytest.mark.parametrize("bsz", BATCH_GRID)
def test_hidden_invariants(bsz):
    out, array, produced = hidden_check(bsz, bsz, 129, "float32", slack=3)
    check_gather(out, array, produced)


@pytest.mark.parametrize("bsz", BATCH_GRID)
def test_self_invariants(bsz):
    out, array, produced = self_check(bsz, bsz, 129, "float32", slack=3)
    check_gather(out, array, produced)


def on_random_gathers(test):
    """Hypothesis batches of both gathers: sizes, hidden widths, dtypes, slack rows, seeds."""
    strategies = given(
        bsz=st.integers(1, 50),
        hidden=st.sampled_from([1, 3, 8, 129]),
        dtype=st.sampled_from(DTYPES),
        slack=st.integers(0, 3),
        seed=st.integers(0, 2**32 - 1),
    )
    return settings(max_examples=50, deadline=None)(strategies(test))


def check_random_gather(check, bsz, hidden, dtype, slack, seed):
    """``check`` (hidden_check / self_check: op == reference) on a random batch, then the
    invariants (float32: the exact gather; other dtypes: the row count)."""
    out, array, produced = check(seed, bsz, hidden, dtype, slack)
    if dtype == "float32":
        check_gather(out, array, produced)
    else:
        assert out.shape[0] == produced


@on_random_gathers
def test_hidden_property_op_matches_reference_and_invariants(bsz, hidden, dtype, slack, seed):
    check_random_gather(hidden_check, bsz, hidden, dtype, slack, seed)


@on_random_gathers
def test_self_property_op_matches_reference_and_invariants(bsz, hidden, dtype, slack, seed):
    check_random_gather(self_check, bsz, hidden, dtype, slack, seed)


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument; inputs unchanged
# ---------------------------------------------------------------------------------------------
# the array arguments (eagle_get_hidden_states' attribute, actual_draft_token_num, comes after)
HIDDEN = OpPair("eagle_get_hidden_states", names=positional("eagle_get_hidden_states")[:8])
SELF = OpPair("eagle_get_self_hidden_states")


def hidden_good():
    # 0 prefill of 2; 1 decode accepting 1 of 3 rows -> 5 rows consumed.
    return [
        numbered(5, 4),
        i32([2, 1]),
        i32([2, 0]),
        i32([0, 0]),
        flags([0, 0]),
        i32([0, 1]),
        i32([2, 3]),
        i32([0, 0]),
    ]


HIDDEN_BAD = {
    "too_few_rows": (0, numbered(4, 4), "input"),
    "input_1d": (0, np.zeros(20, np.float32), "input"),
    "input_3d": (0, np.zeros((5, 2, 2), np.float32), "input"),
    "input_float64": (0, numbered(5, 4).astype(np.float64), "input"),
    "input_int32": (0, np.zeros((5, 4), np.int32), "input"),
    "accept_over_base": (5, i32([0, 4]), "accept_nums"),
    "accept_negative": (5, i32([0, -1]), "accept_nums"),
    "this_time_int64": (1, i64([2, 1]), "seq_lens_this_time"),
    "encoder_too_short": (2, i32([2]), "seq_lens_encoder"),
    "accept_int64": (5, i64([0, 1]), "accept_nums"),
    "base_this_time_too_short": (6, i32([2]), "base_model_seq_lens_this_time"),
}


@pytest.mark.parametrize("case", sorted(HIDDEN_BAD))
def test_hidden_bad_input(case):
    HIDDEN.expect_replaced_error(hidden_good(), HIDDEN_BAD[case], extra=[2])


def test_hidden_good_args_are_good():
    out, expected, _ = hidden_op_and_ref(
        hidden_good()[0], "float32", [i32([2, 1]), i32([2, 0]), i32([0, 1]), i32([2, 3])]
    )
    assert_same(out, expected, "op vs reference")
    assert out.shape == (3, 4)


def self_good():
    return [numbered(4, 4), i32([1, 3]), i32([1, 1]), i64([1, 5])]


SELF_BAD = {
    "too_few_rows": (0, numbered(3, 4), "input"),
    "input_1d": (0, np.zeros(16, np.float32), "input"),
    "input_float64": (0, numbered(4, 4).astype(np.float64), "input"),
    "running_decode_with_last_0": (1, i32([1, 0]), "last_seq_lens_this_time"),
    "last_int64": (1, i64([1, 3]), "last_seq_lens_this_time"),
    "last_too_short": (1, i32([1]), "last_seq_lens_this_time"),
    "this_time_int64": (2, i64([1, 1]), "seq_lens_this_time"),
    "step_idx_int32": (3, i32([1, 5]), "step_idx"),
    "step_idx_too_short": (3, i64([1]), "step_idx"),
}


@pytest.mark.parametrize("case", sorted(SELF_BAD))
def test_self_bad_input(case):
    SELF.expect_replaced_error(self_good(), SELF_BAD[case])


def test_self_good_args_are_good():
    good = self_good()
    out, expected, array = self_op_and_ref(good[0], "float32", *good[1:])
    assert_same(out, array[[0, 3]], "self hidden")


# ---------------------------------------------------------------------------------------------
# NaN / inf: pure row copies, values never inspected (bit for bit, op and reference)
# ---------------------------------------------------------------------------------------------
def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.itemsize])


def _non_finite_rows(tin, hidden=8):
    values = numbered(tin, hidden)
    values[0, 1], values[1, 3], values[2, 5] = -np.inf, np.nan, np.inf
    return values


@pytest.mark.parametrize("dtype", DTYPES)
def test_hidden_copies_nan_and_inf_bit_for_bit(dtype):
    tensor, array = as_input(_non_finite_rows(4), dtype)
    args = [i32([4]), i32([4]), i32([0]), flags([False]), i32([1]), i32([4]), i32([0])]
    out = ops.eagle_get_hidden_states(tensor, *[to_paddle(a) for a in args], 2)
    expected = reference.eagle_get_hidden_states(array.copy(), *[a.copy() for a in args], 2)
    assert_same(_bits(to_numpy(out)), _bits(expected), "op vs reference (bits)")
    assert_same(_bits(to_numpy(out)), _bits(array), "out == input rows (bits)")


@pytest.mark.parametrize("dtype", DTYPES)
def test_self_hidden_copies_nan_and_inf_bit_for_bit(dtype):
    # Two decoding requests of 2 rows each: the last row of each is kept (rows 1 and 3).
    values = _non_finite_rows(4)
    values[3, 2] = np.nan
    tensor, array = as_input(values, dtype)
    args = [i32([2, 2]), i32([1, 1]), i64([5, 7])]
    out = ops.eagle_get_self_hidden_states(tensor, *[to_paddle(a) for a in args])
    expected = reference.eagle_get_self_hidden_states(array.copy(), *[a.copy() for a in args])
    assert_same(_bits(to_numpy(out)), _bits(expected), "op vs reference (bits)")
    assert_same(_bits(to_numpy(out)), _bits(array[[1, 3]]), "out == input rows 1, 3 (bits)")
