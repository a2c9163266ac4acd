"""Tests of fd_mtp.ops.draft_model_preprocess (spec ops.md §6.1) against its numpy reference.

Pyramid (style.md item 8): named hand cases with exact expected arrays, an odd-size grid
(BATCH_GRID x K in 1, 3, 5), Hypothesis property tests, invariants on the outputs, and bad
input (ValueError naming the argument, nothing written).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, replaced, run_both, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.schema import get as schema_op
from fd_mtp.testing.op_inputs import positional

L = 8  # width of input_ids / pre_ids in the hand cases
P0, P1, P2, P3 = 10, 11, 12, 13  # prompt
T1, T3, T4 = 21, 23, 24  # target tokens
D1, D2 = 31, 32  # draft tokens

MATRICES = ("draft_tokens", "input_ids", "pre_ids", "accept_tokens", "base_model_draft_tokens")
ROW_FILL = {"input_ids": 0}  # other ragged rows are padded with -1
# the tensors, from the schema
PAIR = OpPair(
    "draft_model_preprocess", positional("draft_model_preprocess")[:22], MATRICES, ROW_FILL
)
NAMES = PAIR.names


# ------------------------------------------------------------------------------------------------
# Batch builders
# ------------------------------------------------------------------------------------------------
def batch(n, k=2, width=L, column=False, **fields):
    """Every input of the op for n requests with draft width k+1, then `fields` from lists.

    Per-request fields take a flat list; matrices take ragged rows (input_ids padded with 0, the
    others with -1). column=True makes the per-request tensors [n, 1].
    """
    per = (n, 1) if column else (n,)
    d = {
        "draft_tokens": np.full((n, k + 1), -1, np.int64),
        "input_ids": np.zeros((n, width), np.int64),
        "stop_flags": np.zeros(per, bool),
        "seq_lens_this_time": np.zeros(per, np.int32),
        "seq_lens_encoder": np.zeros(per, np.int32),
        "seq_lens_decoder": np.zeros(per, np.int32),
        "step_idx": np.zeros(per, np.int64),
        "not_need_stop": np.zeros(1, bool),
        "is_block_step": np.zeros(per, bool),
        "batch_drop": np.zeros(per, bool),
        "pre_ids": np.full((n, width), -1, np.int64),
        "mask_rollback": np.zeros(per, np.int32),
        "recompute_token_num": np.zeros(per, np.int32),
        "accept_tokens": np.zeros((n, k + 1), np.int64),
        "accept_num": np.zeros(per, np.int32),
        "base_model_seq_lens_this_time": np.zeros(per, np.int32),
        "base_model_seq_lens_encoder": np.zeros(per, np.int32),
        "base_model_seq_lens_decoder": np.zeros(per, np.int32),
        "base_model_step_idx": np.zeros(per, np.int64),
        "base_model_stop_flags": np.zeros(per, bool),
        "base_model_is_block_step": np.zeros(per, bool),
        "base_model_draft_tokens": np.full((n, k + 1), 7, np.int64),
    }
    return set_fields(d, **fields)


as_like = PAIR.as_like
set_fields = PAIR.set_fields


def args_of(d):
    return [d[n] for n in NAMES]


def attrs(num_model_step=1, truncate=True, splitwise=False, v1=True):
    return [num_model_step, truncate, splitwise, v1]


def run_pair(d, **attr):
    """Run op and reference on copies of d; assert they agree exactly; return the op's arrays."""
    return PAIR.run(d, attrs(**attr))


def check_case(d, expected, **attr):
    """op == reference, op == `expected` on the named arrays, every other array unchanged."""
    got = run_pair(d, **attr)
    PAIR.assert_expected(got, d, expected)
    return got


# ------------------------------------------------------------------------------------------------
# 1. Hand cases
# ------------------------------------------------------------------------------------------------
def prefill(**fields):
    base = dict(
        input_ids=[[P1, P2, P3]],
        seq_lens_encoder=[4],
        seq_lens_this_time=[4],
        accept_tokens=[[T1, 0, 0]],
        accept_num=[1],
        base_model_seq_lens_this_time=[4],
        base_model_seq_lens_decoder=[4],
        base_model_step_idx=[1],
        base_model_draft_tokens=[[T1, 5, 6]],
        stop_flags=[False],
    )
    base.update(fields)
    return batch(1, **base)


def test_prefill_with_truncation_puts_first_token_in_last_prompt_slot():
    check_case(
        prefill(),
        dict(
            input_ids=[[P1, P2, P3, T1]],
            pre_ids=[[T1]],
            seq_lens_this_time=[4],
            base_model_draft_tokens=[[T1, -1, -1]],
            not_need_stop=[True],
        ),
    )


def test_prefill_without_truncation_appends_first_token():
    d = prefill(input_ids=[[P0, P1, P2, P3]], seq_lens_this_time=[0])
    check_case(
        d,
        dict(
            input_ids=[[P0, P1, P2, P3, T1]],
            pre_ids=[[T1]],
            seq_lens_this_time=[5],
            base_model_draft_tokens=[[T1, -1, -1]],
            not_need_stop=[True],
        ),
        truncate=False,
    )


def test_prefill_clears_a_stale_stop_flag():
    check_case(
        prefill(stop_flags=[True]),
        dict(
            input_ids=[[P1, P2, P3, T1]],
            pre_ids=[[T1]],
            stop_flags=[False],
            base_model_draft_tokens=[[T1, -1, -1]],
            not_need_stop=[True],
        ),
    )


def decode(n=1, **fields):
    """A draft decode (dec 5, step 2) whose target accepted [T3, T4] of 3 verified rows."""
    base = dict(
        seq_lens_decoder=[5] * n,
        step_idx=[2] * n,
        seq_lens_this_time=[1] * n,
        accept_tokens=[[T3, T4, 0]] * n,
        accept_num=[2] * n,
        base_model_seq_lens_this_time=[3] * n,
        base_model_seq_lens_decoder=[10] * n,
        base_model_step_idx=[6] * n,
        base_model_draft_tokens=[[T4, D1, D2]] * n,
    )
    base.update(fields)
    return batch(n, **base)


def test_decode_rewinds_by_recompute_token_num_and_mask_rollback():
    d = decode(recompute_token_num=[1], mask_rollback=[2])
    check_case(
        d,
        dict(
            seq_lens_decoder=[4],
            step_idx=[1],
            mask_rollback=[3],
            recompute_token_num=[2],
            draft_tokens=[[T3, T4, -1]],
            pre_ids=[[-1, -1, -1, -1, T3, T4]],
            seq_lens_this_time=[2],
            base_model_draft_tokens=[[T4, -1, -1]],
            not_need_stop=[True],
        ),
        num_model_step=3,
    )


def test_decode_with_zero_accepted_tokens_runs_with_zero_length():
    d = decode(accept_num=[0], recompute_token_num=[0])
    check_case(
        d,
        dict(
            seq_lens_this_time=[0],
            recompute_token_num=[1],
            base_model_draft_tokens=[[T4, -1, -1]],
            not_need_stop=[True],
        ),
        num_model_step=2,
    )


def test_stop_recovery_subtracts_base_seq_lens_this_time_not_accept_num():
    d = decode(stop_flags=[True], recompute_token_num=[1], mask_rollback=[4])
    check_case(
        d,
        dict(
            stop_flags=[False],
            seq_lens_decoder=[10 - 3],
            step_idx=[6 - 3],
            draft_tokens=[[T3, T4, -1]],
            pre_ids=[[-1, -1, -1, -1, T3, T4]],
            seq_lens_this_time=[2],
            base_model_draft_tokens=[[T4, -1, -1]],
            not_need_stop=[True],
        ),
        num_model_step=2,
    )


@pytest.mark.parametrize("v1", [True, False], ids=["v1", "v0"])
def test_block_stepped_target_stops_draft_v1_sets_is_block_step_v0_batch_drop(v1):
    d = decode(
        2,
        base_model_stop_flags=[True, False],
        base_model_is_block_step=[True, False],
        seq_lens_encoder=[3, 0],
    )
    expected = dict(
        stop_flags=[True, False],
        seq_lens_this_time=[0, 2],
        seq_lens_encoder=[0, 0],
        seq_lens_decoder=[0, 5],
        draft_tokens=[[-1, -1, -1], [T3, T4, -1]],
        pre_ids=[[], [-1, -1, -1, -1, T3, T4]],
        base_model_draft_tokens=[[T4, -1, -1]] * 2,
        not_need_stop=[True],
    )
    expected["is_block_step" if v1 else "batch_drop"] = [True, False]
    check_case(d, expected, v1=v1)


@pytest.mark.parametrize("v1", [True, False], ids=["v1", "v0"])
def test_decode_clears_is_block_step_only_on_v1(v1):
    d = decode(is_block_step=[True])
    expected = dict(
        draft_tokens=[[T3, T4, -1]],
        pre_ids=[[-1, -1, -1, -1, T3, T4]],
        seq_lens_this_time=[2],
        base_model_draft_tokens=[[T4, -1, -1]],
        not_need_stop=[True],
    )
    if v1:
        expected["is_block_step"] = [False]
    check_case(d, expected, v1=v1)


def test_target_stopped_or_dropped_requests_stop_and_not_need_stop_false():
    d = decode(2, base_model_stop_flags=[True, False], batch_drop=[False, True])
    check_case(
        d,
        dict(
            stop_flags=[True, True],
            seq_lens_this_time=[0, 0],
            seq_lens_decoder=[0, 0],
            base_model_draft_tokens=[[T4, -1, -1]] * 2,
            not_need_stop=[False],
        ),
    )


@pytest.mark.parametrize("truncate", [True, False])
def test_splitwise_prefill_runs_only_prefills_and_leaves_target_rows(truncate):
    # 0: prefill of 3; 1: decode; 2: target stopped (no encoder).
    d = decode(
        3,
        seq_lens_encoder=[3, 0, 0],
        input_ids=[[P1, P2], [5], [6]],
        accept_tokens=[[T1, 0, 0], [T3, T4, 0], [0, 0, 0]],
        base_model_stop_flags=[False, False, True],
        stop_flags=[True, False, False],
    )
    first_row = [P1, P2, T1] if truncate else [P1, P2, 0, T1]
    check_case(
        d,
        dict(
            input_ids=[first_row, [5], [6]],
            stop_flags=[False, True, True],
            seq_lens_this_time=[3 if truncate else 4, 0, 0],
            seq_lens_decoder=[5, 0, 0],
            seq_lens_encoder=[3, 0, 0],
            not_need_stop=[True],
        ),
        splitwise=True,
        truncate=truncate,
    )


def test_splitwise_prefill_without_prefills_stops_everything():
    d = decode(2)
    check_case(
        d,
        dict(
            stop_flags=[True, True],
            seq_lens_this_time=[0, 0],
            seq_lens_decoder=[0, 0],
            not_need_stop=[False],
        ),
        splitwise=True,
    )


def test_base_seq_lens_this_time_may_be_the_same_tensor_as_seq_lens_this_time():
    # Stop recovery reads the target's this_time (3) before writing accept_num (2) into it.
    d = decode(
        2,
        stop_flags=[True, True],
        seq_lens_this_time=[3, 3],
        accept_num=[2, 1],
        base_model_seq_lens_this_time=[3, 3],
    )
    op_args = [to_paddle(a) for a in args_of(d)]
    op_args[NAMES.index("base_model_seq_lens_this_time")] = op_args[
        NAMES.index("seq_lens_this_time")
    ]
    ops.draft_model_preprocess(*op_args, *attrs())
    ref_args = [a.copy() for a in args_of(d)]
    ref_args[NAMES.index("base_model_seq_lens_this_time")] = ref_args[
        NAMES.index("seq_lens_this_time")
    ]
    reference.draft_model_preprocess(*ref_args, *attrs())
    expected = dict(
        stop_flags=[False, False],
        seq_lens_decoder=[7, 7],
        step_idx=[3, 3],
        seq_lens_this_time=[2, 1],
        draft_tokens=[[T3, T4, -1], [T3, -1, -1]],
        pre_ids=[[-1, -1, -1, -1, T3, T4], [-1, -1, -1, -1, -1, T3]],
        base_model_draft_tokens=[[T4, -1, -1]] * 2,
        not_need_stop=[True],
    )
    for i, name in enumerate(NAMES):
        if name == "base_model_seq_lens_this_time":
            continue
        want = as_like(d[name], expected[name], name) if name in expected else d[name]
        assert_same(to_numpy(op_args[i]), ref_args[i], f"{name} (op vs reference)")
        assert_same(to_numpy(op_args[i]), want, name)


def mixed(column):
    # 0: prefill; 1: decode with rewind; 2: stop recovery; 3: target stopped; 4: dropped.
    return decode(
        5,
        column=column,
        seq_lens_encoder=[4, 0, 0, 0, 0],
        stop_flags=[False, False, True, False, False],
        input_ids=[[P1, P2, P3], [], [], [], []],
        recompute_token_num=[0, 1, 1, 0, 0],
        base_model_stop_flags=[False, False, False, True, False],
        batch_drop=[False, False, False, False, True],
        accept_tokens=[[T1, 0, 0]] + [[T3, T4, 0]] * 4,
    )


MIXED_EXPECTED = dict(
    input_ids=[[P1, P2, P3, T1], [], [], [], []],
    pre_ids=[[T1], [-1, -1, -1, -1, T3, T4], [-1, -1, -1, -1, T3, T4], [], []],
    draft_tokens=[[-1, -1, -1], [T3, T4, -1], [T3, T4, -1], [-1, -1, -1], [-1, -1, -1]],
    stop_flags=[False, False, False, True, True],
    seq_lens_this_time=[4, 2, 2, 0, 0],
    seq_lens_encoder=[4, 0, 0, 0, 0],
    seq_lens_decoder=[5, 4, 7, 0, 0],
    step_idx=[2, 1, 3, 2, 2],
    mask_rollback=[0, 1, 0, 0, 0],
    recompute_token_num=[0, 1, 1, 0, 0],
    base_model_draft_tokens=[[T4, -1, -1]] * 5,
    not_need_stop=[True],
)


@pytest.mark.parametrize("column", [False, True], ids=["[B]", "[B,1]"])
def test_mixed_batch_with_flat_or_column_per_request_tensors(column):
    got = check_case(mixed(column), MIXED_EXPECTED, num_model_step=2)
    if column:
        assert got["seq_lens_this_time"].shape == (5, 1)


def test_longer_per_request_buffers_are_untouched_past_bsz():
    # seq_lens_this_time has 2 entries, every other tensor 5 (max_num_seqs buffers).
    d = mixed(False)
    full = {k: v.copy() for k, v in d.items()}
    d["seq_lens_this_time"] = d["seq_lens_this_time"][:2].copy()
    got = run_pair(d, num_model_step=2)
    for name in NAMES:
        want = (
            as_like(full[name], MIXED_EXPECTED[name], name)
            if name in MIXED_EXPECTED
            else full[name]
        )
        if name == "seq_lens_this_time":
            assert_same(got[name], want[:2], name)
        elif name == "not_need_stop":
            assert_same(got[name], want, name)
        else:
            assert_same(got[name][:2], want[:2], name)
            assert_same(got[name][2:], full[name][2:], f"{name} past bsz")


# ------------------------------------------------------------------------------------------------
# Random valid batches (grid and Hypothesis)
# ------------------------------------------------------------------------------------------------
KINDS = ("prefill", "decode", "recover", "target_stopped", "block_step", "dropped")


def random_batch(rng, n, k, width=12, kinds=KINDS, column=False, num_model_step=3):
    """A valid random batch: every computed column lies inside its row."""
    d = batch(n, k, width=width, column=column)
    kind = rng.choice(kinds, size=n)
    flat = {name: a.reshape(-1) for name, a in d.items() if name not in MATRICES}
    d["input_ids"][:] = rng.integers(0, 1000, size=d["input_ids"].shape)
    d["pre_ids"][:] = rng.integers(-1, 1000, size=d["pre_ids"].shape)
    d["draft_tokens"][:] = rng.integers(-1, 1000, size=d["draft_tokens"].shape)
    d["accept_tokens"][:] = rng.integers(0, 1000, size=d["accept_tokens"].shape)
    d["base_model_draft_tokens"][:] = rng.integers(
        -1, 1000, size=d["base_model_draft_tokens"].shape
    )
    for name in (
        "seq_lens_this_time",
        "seq_lens_decoder",
        "base_model_seq_lens_this_time",
        "base_model_seq_lens_decoder",
        "base_model_seq_lens_encoder",
        "mask_rollback",
    ):
        flat[name][:] = rng.integers(0, 50, size=n)
    flat["step_idx"][:] = rng.integers(0, 50, size=n)
    flat["recompute_token_num"][:] = rng.integers(0, num_model_step, size=n)
    flat["is_block_step"][:] = rng.random(n) < 0.3
    flat["base_model_is_block_step"][:] = rng.random(n) < 0.3
    flat["stop_flags"][:] = rng.random(n) < 0.3
    flat["not_need_stop"][:] = rng.random() < 0.5
    a_max = k + 1
    for b in range(n):
        if kind[b] == "prefill":
            flat["seq_lens_encoder"][b] = rng.integers(1, width)  # enc <= width - 1
            flat["base_model_stop_flags"][b] = False
            flat["batch_drop"][b] = False
        else:
            flat["seq_lens_encoder"][b] = 0
            a = int(rng.integers(0, a_max + 1))
            flat["accept_num"][b] = a
            flat["base_model_step_idx"][b] = rng.integers(a, width + 1)
            flat["base_model_stop_flags"][b] = kind[b] in ("target_stopped", "block_step")
            flat["base_model_is_block_step"][b] = kind[b] == "block_step" or (
                kind[b] == "decode" and flat["base_model_is_block_step"][b]
            )
            flat["batch_drop"][b] = kind[b] == "dropped"
            flat["stop_flags"][b] = kind[b] == "recover" or (
                kind[b] in ("target_stopped", "block_step", "dropped") and flat["stop_flags"][b]
            )
    return d


def check_invariants(before, got, splitwise):
    n = before["seq_lens_this_time"].size
    flat = {name: a.reshape(-1)[:n] for name, a in got.items() if name not in MATRICES}
    stop = flat["stop_flags"]
    if not splitwise:
        assert (got["base_model_draft_tokens"][:n, 1:] == -1).all()
    for name in ("seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"):
        assert (flat[name][stop] == 0).all(), f"stopped requests must have {name} == 0"
    assert got["not_need_stop"][0] == (~stop).any()
    enc_in = before["seq_lens_encoder"].reshape(-1)[:n]
    decoding = ~stop & (enc_in == 0)
    if not splitwise:
        assert (
            flat["seq_lens_this_time"][decoding] == before["accept_num"].reshape(-1)[:n][decoding]
        ).all()
    else:
        assert not decoding.any(), "mode A runs only prefills"
    # Read-only tensors are never written.
    for name in (
        "accept_tokens",
        "accept_num",
        "base_model_seq_lens_encoder",
        "base_model_seq_lens_decoder",
        "base_model_step_idx",
        "base_model_stop_flags",
        "base_model_is_block_step",
    ):
        assert_same(got[name], before[name], f"{name} (read-only)")


# ------------------------------------------------------------------------------------------------
# 2. Odd-size grid
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid_op_matches_reference(n, k):
    rng = np.random.default_rng(1000 * n + k)
    for splitwise, v1, truncate in [
        (False, True, True),
        (False, False, False),
        (True, True, False),
    ]:
        d = random_batch(rng, n, k, column=bool(n % 2))
        got = run_pair(d, num_model_step=3, truncate=truncate, splitwise=splitwise, v1=v1)
        check_invariants(d, got, splitwise)


# ------------------------------------------------------------------------------------------------
# 3. Hypothesis
# ------------------------------------------------------------------------------------------------
@st.composite
def cases(draw):
    n = draw(st.integers(1, 40))
    k = draw(st.integers(1, 5))
    width = draw(st.integers(k + 2, 16))
    num_model_step = draw(st.integers(1, 4))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=len(KINDS), unique=True))
    seed = draw(st.integers(0, 2**32 - 1))
    d = random_batch(
        np.random.default_rng(seed),
        n,
        k,
        width=width,
        kinds=kinds,
        column=draw(st.booleans()),
        num_model_step=num_model_step,
    )
    attr = dict(
        num_model_step=num_model_step,
        truncate=draw(st.booleans()),
        splitwise=draw(st.booleans()),
        v1=draw(st.booleans()),
    )
    return d, attr


@given(cases())
def test_property_op_matches_reference_and_invariants_hold(case):
    d, attr = case
    got = run_pair(d, **attr)
    check_invariants(d, got, attr["splitwise"])


# ------------------------------------------------------------------------------------------------
# 5. Bad input: ValueError naming the argument, nothing written
# ------------------------------------------------------------------------------------------------
def expect_error(d, name, **attr):
    PAIR.expect_error(d, name, extra=attrs(**attr))


def valid():
    return mixed(False)


# Arguments the op never reads (FastDeploy passes them): any dtype and shape is accepted.
UNUSED = {t.name for t in schema_op("draft_model_preprocess").tensors if t.role == "unused"}
CHECKED = [n for n in NAMES if n != "not_need_stop" and n not in UNUSED]


def test_unused_arguments_accept_any_dtype_and_shape():
    assert UNUSED == {"base_model_seq_lens_encoder"}
    d = valid()
    want = run_both(
        ops.draft_model_preprocess, reference.draft_model_preprocess, args_of(d) + attrs()
    )[0]
    d["base_model_seq_lens_encoder"] = np.zeros((2, 3), np.float32)
    got = run_both(
        ops.draft_model_preprocess, reference.draft_model_preprocess, args_of(d) + attrs()
    )[0]
    for name, a, b in zip(NAMES, got, want):
        if name != "base_model_seq_lens_encoder":
            assert_same(a, b, f"{name} with a float unused argument")


ROWS = [n for n in CHECKED if n != "seq_lens_this_time"]


@pytest.mark.parametrize("kind, name", PAIR.shape_cases(dtype=CHECKED, rank=CHECKED, rows=ROWS))
def test_wrong_shape_names_the_argument(kind, name):
    PAIR.expect_shape_error(valid(), kind, name, rows=4, expect_error=expect_error)


@pytest.mark.parametrize(
    "name", ["draft_tokens", "input_ids", "pre_ids", "accept_tokens", "base_model_draft_tokens"]
)
def test_zero_columns_name_the_argument(name):
    # A [B, 0] matrix; draft_tokens/accept_tokens are also caught through accept_num otherwise.
    expect_error(
        replaced(valid(), name, np.zeros((5, 0), np.int64)),
        name if name != "accept_tokens" else "accept_(tokens|num)",
    )


@pytest.mark.parametrize(
    "bad",
    [np.zeros(1, np.int32), np.zeros(2, bool), np.zeros(0, bool)],
    ids=["int32", "2 elements", "empty"],
)
def test_not_need_stop_must_be_one_cpu_bool(bad):
    d = valid()
    d["not_need_stop"] = bad
    expect_error(d, "not_need_stop")


@pytest.mark.parametrize("a", [-1, 4])
def test_accept_num_outside_rows(a):
    d = valid()
    d["accept_num"][1] = a  # request 1 decodes; rows have 3 columns
    expect_error(d, "accept_num")


def test_accept_num_bounded_by_the_narrower_of_draft_tokens_and_accept_tokens():
    d = valid()
    d["accept_tokens"] = np.zeros((5, 2), np.int64)  # Wa = 2 < Dd = 3
    d["accept_num"][1] = 3
    expect_error(d, "accept_num")


def test_accept_num_of_a_stopped_or_prefilling_request_is_not_checked():
    d = valid()
    d["accept_num"][[0, 3, 4]] = 99  # prefill, target stopped, dropped
    run_pair(d, num_model_step=2)


@pytest.mark.parametrize("truncate", [True, False])
def test_first_token_column_outside_input_ids(truncate):
    d = valid()
    d["seq_lens_encoder"][0] = L + 1 if truncate else L  # column enc-1 / enc == L
    expect_error(d, "input_ids", truncate=truncate)
    expect_error(d, "input_ids", truncate=truncate, splitwise=True)


@pytest.mark.parametrize("base_step", [1, L + 1], ids=["before row", "past row"])
def test_pre_ids_write_column_out_of_range(base_step):
    d = valid()
    d["base_model_step_idx"][1] = base_step  # accept_num 2: columns base_step-2, base_step-1
    expect_error(d, "pre_ids")


def test_num_model_step_below_one():
    expect_error(valid(), "num_model_step", num_model_step=0)
