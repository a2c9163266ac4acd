"""Tests of fd_mtp.ops.speculate_get_token_penalty_multi_scores (spec/ops.md §5.5, §14 item 11).

Hand cases with exact arrays (the upstream quirks: the repeat-count scan rule, min length before
the penalties and the temperature, bad words from row 0 only, untouched rows), the numpy reference
against the op on an odd-size grid (float32 / float16 / bfloat16, bit-exact), a V = 100k case,
Hypothesis batches, invariants, and bad input (ValueError naming the argument, nothing written).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sampling_util import DTYPES, as_dtype, numpy_of, offsets, random_out_rows, tensor, values_of
from util import BATCH_GRID, assert_same

from fd_mtp import ops, reference
from fd_mtp.testing.op_inputs import positional

OP = ops.speculate_get_token_penalty_multi_scores
REF = reference.speculate_get_token_penalty_multi_scores
NAMES = list(positional("speculate_get_token_penalty_multi_scores"))
NEG_1E10 = {"float32": -1e10, "float16": -np.inf, "bfloat16": -9999220736.0}  # -1e10 in each dtype


def make_args(
    logits,
    pre_ids,
    *,
    dtype="float32",
    penalty=1.0,
    frequency=0.0,
    presence=0.0,
    temperature=1.0,
    bad=(),
    cur_len=None,
    min_len=None,
    eos=(0,),
    out_rows=None,
    bs=None,
    max_seq_len=16,
):
    """Positional args (numpy) for one call. out_rows: output rows per request (default 1 each)."""
    logits = np.asarray(logits, np.float32)
    pre_ids = np.asarray(pre_ids, np.int64)
    out_rows = [1] * logits.shape[0] if out_rows is None else out_rows
    n = len(out_rows)
    bs = n if bs is None else bs
    pad, cum, _ = offsets(out_rows, max_seq_len)
    per = lambda v, dt: np.broadcast_to(np.asarray(v, dt), (n,)).copy()  # noqa: E731
    return [
        pre_ids,
        as_dtype(logits, dtype),
        as_dtype(per(penalty, np.float32), dtype),
        as_dtype(per(frequency, np.float32), dtype),
        as_dtype(per(presence, np.float32), dtype),
        per(temperature, np.float32),
        np.asarray(bad, np.int64).reshape(1, -1)
        if np.ndim(bad) == 1
        else np.asarray(bad, np.int64),
        per(0 if cur_len is None else cur_len, np.int64),
        per(0 if min_len is None else min_len, np.int64),
        np.asarray(eos, np.int64).reshape(-1, 1),
        np.zeros(bs, np.int32),
        pad,
        cum,
        max_seq_len,
    ]


def run_op(args):
    """The op on paddle copies; returns (logits after as numpy, every arg after as numpy)."""
    tensors = [tensor(a) for a in args]
    out = OP(*tensors)
    assert out is tensors[1], "the op must return its logits argument"
    return numpy_of(out), [numpy_of(t) for t in tensors]


def run_both(args):
    """Op and reference on copies of args: checks every argument but logits is unchanged by both,
    and that both logits agree bit for bit; returns the op's logits."""
    got, after = run_op(args)
    ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    ret = REF(*ref_args)
    assert ret is ref_args[1]
    assert_same(got, ref_args[1], "logits (op vs reference)")
    for name, a, b, c in zip(NAMES, args, after, ref_args):
        if name != "logits" and isinstance(a, np.ndarray):
            assert_same(b, a, f"{name} (op, read-only)")
            assert_same(c, a, f"{name} (reference, read-only)")
    return got


# ---------------------------------------------------------------------------------------------
# Hand cases (expected arrays written from the spec)
# ---------------------------------------------------------------------------------------------
def test_docstring_example_penalises_counted_ids_then_divides_everything():
    # ids 0 (once) and 1 (twice) counted; pre_ids[0] = -1 is not. alpha 2, beta .5, gamma .25, T 2:
    # v0: ((1 / 2) - 1 * .5 - .25) / 2 = -.125; v1: ((-1 * 2) - 2 * .5 - .25) / 2 = -1.625;
    # v2: 2 / 2 = 1; v3: bad word -1e10 (after the division).
    args = make_args(
        [[1.0, -1.0, 2.0, 4.0]],
        [[-1, 0, 1, 1]],
        penalty=2.0,
        frequency=0.5,
        presence=0.25,
        temperature=2.0,
        bad=[3],
        cur_len=3,
        min_len=0,
        eos=[2],
        max_seq_len=8,
    )
    assert_same(run_both(args), np.array([[-0.125, -1.625, 1.0, -1e10]], np.float32), "logits")


def test_scan_rule_a_lane_stops_at_its_first_negative_id():
    # Lp = 600 -> bd = 512 lanes. Lane 1 visits 1 and 513 (id 5 twice); lane 0 stops at
    # position 0 (-1) so 512 (id 7) is never counted; lane 2 stops at 2 so 514 (id 8) is not.
    row = np.full(600, -1, np.int64)
    row[1], row[513], row[512], row[514] = 5, 5, 7, 8
    args = make_args([np.arange(10, dtype=np.float32)], [row], frequency=1.0, cur_len=0)
    assert_same(run_both(args), np.array([[0, 1, 2, 3, 4, 3, 6, 7, 8, 9]], np.float32), "logits")


def test_scan_rule_short_row_counts_every_non_negative_id():
    # Lp = 6 -> bd = 32: one position per lane, a -1 hides only itself.
    args = make_args(
        [np.arange(10, dtype=np.float32)],
        [[-1, 5, -1, 5, 7, 5]],
        frequency=1.0,
        presence=0.5,
        cur_len=4,
    )
    expected = np.array([[0, 1, 2, 3, 4, 1.5, 6, 5.5, 8, 9]], np.float32)  # 5 - 3 - .5, 7 - 1 - .5
    assert_same(run_both(args), expected, "logits")


@pytest.mark.parametrize("dtype", DTYPES)
def test_min_length_masks_eos_before_the_temperature_division(dtype):
    # One decode request with two rows: cur_len 3, min_len 4 -> row 0 (3 + 0 < 4) masked,
    # row 1 (3 + 1) not. The sentinel is divided by the temperature like every entry.
    args = make_args(
        [[2, 4, 6, 8], [2, 4, 6, 8]],
        [[-1, -1]],
        dtype=dtype,
        temperature=2.0,
        cur_len=3,
        min_len=4,
        eos=[1, 2],
        out_rows=[2],
        max_seq_len=8,
    )
    masked = {"float32": -5e9, "float16": -5000.0, "bfloat16": -4999610368.0}[dtype]
    expected = as_dtype([[1, masked, masked, 4], [1, 2, 3, 4]], dtype)
    assert_same(run_both(args), expected, "logits")


@pytest.mark.parametrize("dtype", DTYPES)
def test_bad_words_come_from_row_zero_only_and_skip_out_of_range_ids(dtype):
    # bad_tokens row 1 ([0, 0, 0]) is ignored; -1 and 99 (>= V) are skipped; both requests get
    # column 3 set to -1e10 in the logits dtype (float16: -inf), after the division.
    args = make_args(
        [[2, 2, 2, 2, 2], [4, 4, 4, 4, 4]],
        [[-1, -1], [-1, -1]],
        dtype=dtype,
        temperature=2.0,
        bad=[[3, -1, 99], [0, 0, 0]],
        cur_len=1,
        eos=[0],
    )
    neg = NEG_1E10[dtype]
    expected = as_dtype([[1, 1, 1, neg, 1], [2, 2, 2, neg, 2]], dtype)
    assert_same(run_both(args), expected, "logits")


def test_rows_of_requests_beyond_bs_are_untouched():
    # Two requests have rows, but seq_lens_this_time has one entry: row 1 keeps its values.
    # Row 0: column 0 is a bad word (-1e10, after the division); eos column 1 is masked: -1e10 / 2.
    args = make_args(
        [[2, 4], [2, 4]],
        [[-1, 0], [-1, 1]],
        temperature=2.0,
        frequency=1.0,
        bad=[0],
        bs=1,
        cur_len=1,
        eos=[1],
        min_len=9,
    )
    assert_same(run_both(args), np.array([[-1e10, -5e9], [2, 4]], np.float32), "logits")


def test_negative_cur_len_skips_counts_and_min_length_but_not_the_temperature():
    args = make_args(
        [[2, 4, 6]], [[-1, 2, 2]], frequency=1.0, temperature=2.0, cur_len=-1, min_len=10, eos=[0]
    )
    assert_same(run_both(args), np.array([[1, 2, 3]], np.float32), "logits")


def test_penalised_eos_reads_the_min_length_sentinel():
    # eos 0 is masked to -1e10 and also counted twice: (-1e10 * 2 - 2 * 1 - 0) / 1 = -2e10.
    args = make_args(
        [[1, 1]], [[-1, 0, 0]], penalty=2.0, frequency=1.0, cur_len=0, min_len=5, eos=[0]
    )
    assert_same(run_both(args), np.array([[-2e10, 1]], np.float32), "logits")


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_half_precision_rounds_once_per_element(dtype):
    # 1 / 3 rounded once to the dtype (not 1/3 in float32, then again).
    args = make_args([[1, 3]], [[-1]], dtype=dtype, temperature=3.0)
    expected = {
        "float16": np.array([[0.333251953125, 1]], np.float16),
        "bfloat16": np.array([[0x3EAB, 0x3F80]], np.uint16),
    }[dtype]  # 1/3 -> 0x3EAB (0.333984375)
    assert_same(run_both(args), expected, "logits")


# ---------------------------------------------------------------------------------------------
# Grid and Hypothesis against the reference
# ---------------------------------------------------------------------------------------------
def random_args(rng, n, dtype, *, vocab=97, lp=48, holes=True, extra_request=True, max_seq_len=32):
    out_rows = random_out_rows(rng, n)
    if extra_request:  # a request beyond bs: its rows stay untouched
        out_rows = out_rows + [2]
    rows = sum(out_rows)
    logits = (rng.standard_normal((rows, vocab)) * 5).astype(np.float32)
    pre_ids = np.full((n, lp), -1, np.int64)
    cur_len = rng.integers(-1, lp, n)
    for b in range(n):
        k = int(rng.integers(0, lp))
        pre_ids[b, 1 : 1 + k] = rng.integers(0, min(vocab, 12), k)  # few ids: many repeats
        if holes and rng.random() < 0.3:
            pre_ids[b, rng.integers(0, lp, 3)] = -1
    pad, cum, _ = offsets(out_rows, max_seq_len)
    per = lambda lo, hi: rng.uniform(lo, hi, len(out_rows)).astype(np.float32)  # noqa: E731
    return [
        pre_ids,
        as_dtype(logits, dtype),
        as_dtype(per(1.0, 2.0), dtype),
        as_dtype(per(0.0, 1.0), dtype),
        as_dtype(per(0.0, 1.0), dtype),
        per(0.3, 1.5),
        rng.integers(-3, vocab + 3, (2, 4)).astype(np.int64),
        np.concatenate([cur_len, [0]]).astype(np.int64),
        rng.integers(0, lp + 4, len(out_rows)).astype(np.int64),
        np.array([[1], [2]], np.int64),
        np.zeros(n, np.int32),
        pad,
        cum,
        max_seq_len,
    ]


def dtype_name(a):
    return {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16"}.get(
        a.dtype, "bfloat16"
    )


def check_invariants(args, after):
    """Rows beyond bs unchanged; bad-word columns hold -1e10 in the dtype; with alpha >= 1 and
    beta, gamma >= 0 no entry ends above its plain x / T (rounded): penalties only lower logits."""
    logits_in = args[1]
    kind = dtype_name(logits_in)
    pad, max_seq_len, bs = args[11], args[13], args[10].shape[0]
    rows = np.arange(logits_in.shape[0])
    owner = (rows + pad[: rows.size]) // max_seq_len
    assert_same(after[owner >= bs], logits_in[owner >= bs], "rows beyond bs")
    touched = owner < bs
    if not touched.any():
        return
    vocab = logits_in.shape[1]
    bad = args[6].reshape(-1)[: args[6].shape[-1]]
    bad = bad[(bad >= 0) & (bad < vocab)]
    if bad.size:
        assert np.all(after[np.ix_(touched, bad)] == as_dtype(np.float32(-1e10), kind)), (
            "bad-word columns"
        )
    assert (
        np.all(values_of(args[2]) >= 1)
        and np.all(values_of(args[3]) >= 0)
        and np.all(values_of(args[4]) >= 0)
    )
    temps = args[5][owner[touched]].astype(np.float32)[:, None]
    plain = as_dtype(values_of(logits_in[touched]) / temps, kind)
    assert np.all(values_of(after[touched]) <= values_of(plain)), "a penalty raised a logit"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", BATCH_GRID)
def test_grid_matches_reference(batch, dtype):
    rng = np.random.default_rng(batch * 7 + len(dtype))
    args = random_args(rng, batch, dtype)
    got = run_both(args)
    check_invariants(args, got)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", (1, 7, 33))
def test_long_pre_ids_rows_use_512_lanes_with_several_positions_each(batch, dtype):
    rng = np.random.default_rng(batch + 100)
    args = random_args(rng, batch, dtype, lp=1300, vocab=61)
    got = run_both(args)
    check_invariants(args, got)


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_vocab_100k_small_batch(dtype):
    rng = np.random.default_rng(11)
    args = random_args(rng, 3, dtype, vocab=100_000, lp=2048)
    for b in range(3):  # realistic ids over the whole vocabulary
        k = int(rng.integers(100, 2000))
        args[0][b, 1 : 1 + k] = rng.integers(0, 100_000, k)
    got = run_both(args)
    check_invariants(args, got)


@given(
    n=st.integers(1, 12),
    vocab=st.integers(1, 40),
    lp=st.integers(1, 80),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis_batches_match_reference(n, vocab, lp, dtype, seed):
    rng = np.random.default_rng(seed)
    args = random_args(rng, n, dtype, vocab=vocab, lp=lp, max_seq_len=int(rng.integers(4, 40)))
    args[9] = np.array([[0]], np.int64)  # an eos id valid for every vocab
    got = run_both(args)
    check_invariants(args, got)


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument, nothing written
# ---------------------------------------------------------------------------------------------
def base_bad_args():
    return make_args(
        [[1, 2, 3, 4], [1, 2, 3, 4]],
        [[-1, 0, 1], [-1, 2, 3]],
        temperature=2.0,
        eos=[1],
        cur_len=1,
        min_len=3,
    )


def expect_error(args, argument, *, reference_too=True):
    """The op raises ValueError naming `argument` and writes nothing; so does the reference
    (data-dependent errors only: the reference assumes valid shapes and dtypes)."""
    tensors = [tensor(a) for a in args]
    with pytest.raises(ValueError, match=argument):
        OP(*tensors)
    for name, a, t in zip(NAMES, args, tensors):
        if isinstance(a, np.ndarray):
            assert_same(numpy_of(t), a, f"{name} (must be unchanged)")
    ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    if reference_too:
        with pytest.raises(ValueError, match=argument):
            REF(*ref_args)
        assert_same(ref_args[1], args[1], "logits (reference, unchanged)")


@pytest.mark.parametrize("eos", [4, 100, -1])
def test_eos_id_outside_vocab(eos):
    args = base_bad_args()
    args[9] = np.array([[1], [eos]], np.int64)
    expect_error(args, "eos_token_id")


def test_counted_pre_ids_id_at_least_vocab():
    args = base_bad_args()
    args[0][1, 2] = 4
    expect_error(args, "pre_ids")


def test_uncounted_pre_ids_id_beyond_vocab_is_accepted():
    # Lp = 600: position 512 is in lane 0, which stops at position 0 (-1): never read.
    row = np.full(600, -1, np.int64)
    row[512] = 10**9
    args = make_args([[1, 2]], [row], cur_len=0)
    assert_same(run_both(args), np.array([[1, 2]], np.float32), "logits")


def test_negative_position_in_output_padding_offset():
    args = base_bad_args()
    args[11] = np.array([0, -5], np.int32)
    expect_error(args, "output_padding_offset")


@pytest.mark.parametrize(
    "index,value,argument",
    [
        (1, np.ones((2, 4), np.float64), "logits"),
        (1, np.ones(4, np.float32), "logits"),
        (2, np.ones(2, np.float16), "penalty_scores"),
        (3, np.ones(1, np.float32), "frequency_scores"),
        (5, np.ones(2, np.float64), "temperatures"),
        (0, np.zeros((1, 3), np.int64), "pre_ids"),
        (0, np.zeros((2, 3), np.int32), "pre_ids"),
        (6, np.zeros((1, 1, 1), np.int64), "bad_tokens"),
        (7, np.zeros(2, np.int32), "cur_len"),
        (8, np.zeros(1, np.int64), "min_len"),
        (9, np.zeros((1, 2), np.int64), "eos_token_id"),
        (10, np.zeros(2, np.int64), "seq_lens_this_time"),
        (11, np.zeros(1, np.int32), "output_padding_offset"),
        (12, np.zeros(1, np.int32), "output_cum_offsets"),
        (13, 0, "max_seq_len"),
    ],
)
def test_bad_shapes_dtypes_and_attributes(index, value, argument):
    args = base_bad_args()
    args[index] = value
    expect_error(args, argument, reference_too=False)


# ---------------------------------------------------------------------------------------------
# NaN / inf
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_logits_pass_through_the_arithmetic_like_the_reference(dtype):
    """Logits are only transformed elementwise: NaN stays NaN, inf stays inf (or NaN where IEEE
    says so); op and reference agree element for element."""
    logits = np.array(
        [[np.nan, 1.0, np.inf, -np.inf, 2.0], [np.inf, -np.inf, np.nan, 3.0, -1.0]], np.float32
    )
    # Every id counted, so the penalty path (x * alpha / x / alpha, - count * beta - gamma) runs.
    args = make_args(
        logits,
        [[-1, 0, 2, 3, 4], [-1, 0, 1, 2, 3]],
        dtype=dtype,
        penalty=1.5,
        frequency=0.5,
        presence=0.25,
        temperature=0.7,
        cur_len=5,
    )
    got, _ = run_op(args)
    ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    REF(*ref_args)
    g, e = values_of(got), values_of(ref_args[1])
    assert np.array_equal(g, e, equal_nan=True), f"op {g} != reference {e}"
    assert np.isnan(g[0, 0]) and np.isnan(g[1, 2]) and g[0, 2] == np.inf and g[1, 1] == -np.inf


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(
    "index,argument",
    [
        (2, "penalty_scores"),
        (3, "frequency_scores"),
        (4, "presence_scores"),
        (5, "temperatures"),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_per_request_scalars_are_refused(index, argument, value, dtype):
    args = make_args(
        [[1, 2, 3, 4], [1, 2, 3, 4]], [[-1, 0, 1], [-1, 2, 3]], dtype=dtype, temperature=2.0
    )
    args[index] = args[index].copy()
    args[index][1] = as_dtype([value], dtype)[0] if index != 5 else value
    expect_error(args, rf"^speculate_get_token_penalty_multi_scores: {argument} \(request 1\)")


def test_non_finite_scalars_of_a_request_without_rows_are_ignored():
    # Request 1 owns no logits row: its scalars are never read.
    args = make_args([[1, 2, 3, 4]], [[-1, 0, 1], [-1, 2, 3]], out_rows=[1, 0], temperature=2.0)
    for index in (2, 3, 4, 5):
        args[index][1] = np.nan
    run_both(args)
