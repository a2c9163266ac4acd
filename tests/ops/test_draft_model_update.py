"""Tests of fd_mtp.ops.draft_model_update (spec ops.md §6.3) against its numpy reference.

Pyramid (style.md item 8): named hand cases with exact expected arrays, an odd-size grid
(BATCH_GRID x K in 1, 3, 5), Hypothesis property tests, invariants on the outputs, and bad
input (ValueError naming the argument, nothing written).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, replaced, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.schema import written_args
from fd_mtp.testing.op_inputs import positional

L = 8  # max_seq_len of the offsets and width of pre_ids in the hand cases
T1, T3, T4 = 21, 23, 24  # target tokens
D1, D2 = 31, 32  # draft tokens
EOS, EOS2 = 2, 3

MATRICES = ("draft_tokens", "pre_ids", "base_model_draft_tokens")
# the tensors, from the schema
PAIR = OpPair("draft_model_update", positional("draft_model_update")[:13], MATRICES)
NAMES = PAIR.names
WRITTEN = tuple(written_args("draft_model_update"))


# ------------------------------------------------------------------------------------------------
# Batch builders
# ------------------------------------------------------------------------------------------------
def cum_offsets(output_lens, max_seq_len):
    """Spec §1.3: output_cum_offsets[b] = sum over j < b of (max_seq_len - o_j)."""
    excl = np.concatenate([[0], np.cumsum([max_seq_len - o for o in output_lens])[:-1]])
    return excl.astype(np.int32)


def batch(
    n, k=2, width=L, column=False, next_tokens=(), output_lens=None, end_ids=(EOS,), **fields
):
    """Every tensor input for n requests, draft width k+1; `fields` from lists (matrices ragged, -1)."""
    per = (n, 1) if column else (n,)
    d = {
        "inter_next_tokens": np.asarray(next_tokens, np.int64),
        "draft_tokens": np.full((n, k + 1), -1, np.int64),
        "pre_ids": np.full((n, width), -1, np.int64),
        "seq_lens_this_time": np.zeros(per, np.int32),
        "seq_lens_encoder": np.zeros(per, np.int32),
        "seq_lens_decoder": np.zeros(per, np.int32),
        "step_idx": np.zeros(per, np.int64),
        "output_cum_offsets": cum_offsets(output_lens or [0] * n, L).reshape(per),
        "stop_flags": np.zeros(per, bool),
        "not_need_stop": np.zeros(1, bool),
        "max_dec_len": np.full(per, 100, np.int64),
        "end_ids": np.asarray(end_ids, np.int64),
        "base_model_draft_tokens": np.full((n, k + 1), -1, np.int64),
    }
    return set_fields(d, **fields)


as_like = PAIR.as_like
set_fields = PAIR.set_fields


def run_pair(d, max_seq_len=L, substep=0, prefill_one_step_stop=False):
    return PAIR.run(d, [max_seq_len, substep], prefill_one_step_stop=prefill_one_step_stop)


def check_case(d, expected, **kw):
    """op == reference, op == `expected` on the named arrays, every other array unchanged."""
    got = run_pair(d, **kw)
    PAIR.assert_expected(got, d, expected)
    return got


# ------------------------------------------------------------------------------------------------
# 1. Hand cases
# ------------------------------------------------------------------------------------------------
def decoding(n=1, q=2, step=3, **fields):
    """Decode requests after preprocess: q input tokens each, dec 5; q output rows each."""
    base = dict(
        seq_lens_decoder=[5] * n,
        step_idx=[step] * n,
        seq_lens_this_time=[q] * n,
        draft_tokens=[[T3, T4, -1]] * n,
        base_model_draft_tokens=[[T4, -1, -1]] * n,
        output_lens=[q] * n,
    )
    base.update(fields)
    return batch(n, **base)


def test_decode_takes_the_token_of_the_last_row_and_advances_by_q():
    d = decoding(next_tokens=[96, D2])
    check_case(
        d,
        dict(
            draft_tokens=[[D2, T4, -1]],
            seq_lens_decoder=[7],
            step_idx=[5],
            pre_ids=[[-1, -1, -1, -1, -1, D2]],
            seq_lens_this_time=[1],
            base_model_draft_tokens=[[T4, D2, -1]],
            not_need_stop=[True],
        ),
    )


def test_prefill_takes_the_first_row_and_moves_encoder_into_decoder():
    d = batch(
        1,
        seq_lens_encoder=[4],
        seq_lens_this_time=[4],
        next_tokens=[D1],
        output_lens=[1],
        base_model_draft_tokens=[[T1, -1, -1]],
    )
    check_case(
        d,
        dict(
            draft_tokens=[[D1, -1, -1]],
            seq_lens_encoder=[0],
            seq_lens_decoder=[4],
            step_idx=[1],
            pre_ids=[[-1, D1]],
            seq_lens_this_time=[1],
            base_model_draft_tokens=[[T1, D1, -1]],
            not_need_stop=[True],
        ),
    )


def test_running_request_with_enc_and_dec_zero_takes_the_prefill_branch():
    d = batch(1, seq_lens_this_time=[1], step_idx=[4], next_tokens=[D1], output_lens=[1])
    check_case(
        d,
        dict(
            draft_tokens=[[D1, -1, -1]],
            step_idx=[5],
            pre_ids=[[-1, D1]],
            seq_lens_this_time=[1],
            base_model_draft_tokens=[[-1, D1, -1]],
            not_need_stop=[True],
        ),
    )


@pytest.mark.parametrize("end_shape", ["[E]", "[E,1]"])
def test_eos_draft_stops_the_request_but_stays_proposed(end_shape):
    d = decoding(next_tokens=[96, EOS2])
    d["end_ids"] = np.array([EOS, EOS2], np.int64).reshape((2,) if end_shape == "[E]" else (2, 1))
    check_case(
        d,
        dict(
            draft_tokens=[[EOS2, T4, -1]],
            stop_flags=[True],
            seq_lens_this_time=[0],
            seq_lens_decoder=[7],
            step_idx=[5],
            pre_ids=[[-1, -1, -1, -1, -1, EOS2]],
            base_model_draft_tokens=[[T4, EOS2, -1]],
            not_need_stop=[False],
        ),
    )


def test_max_dec_len_writes_first_end_id_at_column_q_minus_1():
    d = decoding(next_tokens=[96, D2], max_dec_len=[5], end_ids=[EOS, EOS2])
    check_case(
        d,
        dict(
            draft_tokens=[[D2, EOS, -1]],
            stop_flags=[True],
            seq_lens_this_time=[0],
            seq_lens_decoder=[7],
            step_idx=[5],
            pre_ids=[[-1, -1, -1, -1, -1, D2]],
            base_model_draft_tokens=[[T4, EOS, -1]],
            not_need_stop=[False],
        ),
    )


def test_max_dec_len_with_q_1_overwrites_the_proposed_token():
    d = decoding(q=1, next_tokens=[D2], max_dec_len=[4])
    check_case(
        d,
        dict(
            draft_tokens=[[EOS, T4, -1]],
            stop_flags=[True],
            seq_lens_this_time=[0],
            seq_lens_decoder=[6],
            step_idx=[4],
            pre_ids=[[-1, -1, -1, -1, D2]],
            base_model_draft_tokens=[[T4, EOS, -1]],
            not_need_stop=[False],
        ),
    )


def test_long_prefill_chunk_hitting_max_dec_len_skips_the_out_of_row_write_op_only():
    # q = 6 > draft_tokens cols (3): upstream writes draft_tokens[b, 5], outside the row.
    d = batch(
        2,
        seq_lens_encoder=[6, 0],
        seq_lens_this_time=[6, 0],
        stop_flags=[False, True],
        max_dec_len=[1, 100],
        next_tokens=[D1],
        output_lens=[1, 0],
        draft_tokens=[[9, 9, 9], [8, 8, 8]],
    )
    op_args = [to_paddle(d[n]) for n in NAMES]
    ops.draft_model_update(*op_args, L, 0, prefill_one_step_stop=False)
    got = dict(zip(NAMES, map(to_numpy, op_args)))
    expected = dict(
        draft_tokens=[[D1, 9, 9], [-1, 8, 8]],
        seq_lens_encoder=[0, 0],
        seq_lens_decoder=[6, 0],
        step_idx=[1, 0],
        pre_ids=[[-1, D1], []],
        stop_flags=[True, True],
        seq_lens_this_time=[0, 0],
        base_model_draft_tokens=[[-1, EOS, -1], [-1, -1, -1]],
        not_need_stop=[False],
    )
    for name in NAMES:
        want = as_like(d[name], expected[name], name) if name in expected else d[name]
        assert_same(got[name], want, name)


def test_request_stopped_at_entry_gets_minus_one_and_zero_encoder():
    d = batch(
        2,
        seq_lens_encoder=[3, 2],
        seq_lens_this_time=[0, 2],
        stop_flags=[True, False],
        draft_tokens=[[D1, T1, 5], [-1, -1, -1]],
        base_model_draft_tokens=[[T1, D1, D2], [T3, -1, -1]],
        next_tokens=[D2],
        output_lens=[0, 1],
    )
    check_case(
        d,
        dict(
            draft_tokens=[[-1, T1, 5], [D2, -1, -1]],
            seq_lens_encoder=[0, 0],
            seq_lens_decoder=[0, 2],
            seq_lens_this_time=[0, 1],
            step_idx=[0, 1],
            pre_ids=[[], [-1, D2]],
            base_model_draft_tokens=[[T1, -1, D2], [T3, D2, -1]],
            not_need_stop=[True],
        ),
    )


def test_every_request_stopped_at_entry_makes_not_need_stop_false():
    d = batch(
        3,
        stop_flags=[True] * 3,
        seq_lens_this_time=[0, 1, 0],
        not_need_stop=[True],
        draft_tokens=[[5, 6, 7]] * 3,
    )
    check_case(
        d,
        dict(draft_tokens=[[-1, 6, 7]] * 3, seq_lens_this_time=[0, 0, 0], not_need_stop=[False]),
    )


def test_prefill_one_step_stop_stops_every_running_request():
    d = decoding(
        2,
        seq_lens_encoder=[4, 0],
        seq_lens_decoder=[0, 5],
        seq_lens_this_time=[4, 2],
        output_lens=[1, 2],
        next_tokens=[D1, 96, D2],
    )
    check_case(
        d,
        dict(
            draft_tokens=[[D1, T4, -1], [D2, T4, -1]],
            stop_flags=[True, True],
            seq_lens_this_time=[0, 0],
            seq_lens_encoder=[0, 0],
            seq_lens_decoder=[4, 7],
            step_idx=[4, 5],
            pre_ids=[[-1, D1], [-1, -1, -1, -1, -1, D2]],
            base_model_draft_tokens=[[T4, D1, -1], [T4, D2, -1]],
            not_need_stop=[False],
        ),
        prefill_one_step_stop=True,
    )


def test_prefill_one_step_stop_defaults_to_the_environment_variable(monkeypatch):
    d = decoding(next_tokens=[96, D2])
    monkeypatch.setenv("PREFILL_NODE_ONE_STEP_STOP", "1")
    op_args = [to_paddle(d[n]) for n in NAMES]
    ops.draft_model_update(*op_args, L, 0)
    assert to_numpy(op_args[NAMES.index("stop_flags")]).tolist() == [True]
    monkeypatch.setenv("PREFILL_NODE_ONE_STEP_STOP", "0")
    op_args = [to_paddle(d[n]) for n in NAMES]
    ops.draft_model_update(*op_args, L, 0)
    assert to_numpy(op_args[NAMES.index("stop_flags")]).tolist() == [False]


def test_substep_selects_the_target_column_and_column_shapes():
    # [B, 1] per-request tensors; request 1 is stopped; 0 and 2 decode with 1 and 2 rows.
    d = decoding(
        3,
        column=True,
        seq_lens_this_time=[1, 0, 2],
        stop_flags=[False, True, False],
        output_lens=[1, 0, 2],
        next_tokens=[D1, 96, D2],
        base_model_draft_tokens=[[T4, 40, -1]] * 3,
    )
    got = check_case(
        d,
        dict(
            draft_tokens=[[D1, T4, -1], [-1, T4, -1], [D2, T4, -1]],
            seq_lens_this_time=[1, 0, 1],
            seq_lens_decoder=[6, 5, 7],
            step_idx=[4, 3, 5],
            pre_ids=[[-1, -1, -1, -1, D1], [], [-1, -1, -1, -1, -1, D2]],
            base_model_draft_tokens=[[T4, 40, D1], [T4, 40, -1], [T4, 40, D2]],
            not_need_stop=[True],
        ),
        substep=1,
    )
    assert got["seq_lens_this_time"].shape == (3, 1)


def test_longer_buffers_are_untouched_past_bsz():
    d = decoding(4, output_lens=[2, 2, 0, 0], next_tokens=[96, D1, 97, D2])
    full = {k: v.copy() for k, v in d.items()}
    d["seq_lens_this_time"] = d["seq_lens_this_time"][:2].copy()
    got = run_pair(d)
    for name in MATRICES + ("seq_lens_encoder", "seq_lens_decoder", "step_idx", "stop_flags"):
        assert_same(got[name][2:], full[name][2:], f"{name} past bsz")
    assert_same(
        got["draft_tokens"][:2], np.array([[D1, T4, -1], [D2, T4, -1]], np.int64), "draft_tokens"
    )


# ------------------------------------------------------------------------------------------------
# Random valid batches (grid and Hypothesis)
# ------------------------------------------------------------------------------------------------
KINDS = ("decode", "prefill", "odd", "stopped")
MAX_SEQ_LEN = 16


def random_batch(rng, n, k, width=16, kinds=KINDS, column=False, n_end=2):
    """A valid random batch: rows and columns in range, no long prefill chunk hitting max_dec_len."""
    dd = k + 1
    kind = rng.choice(kinds, size=n)
    this_time, enc, dec, step, stop, max_dec, out_lens = ([0] * n for _ in range(7))
    for b in range(n):
        step[b] = int(rng.integers(0, 6))
        if kind[b] == "decode":
            q = int(rng.integers(1, dd + 1))
            step[b] = int(rng.integers(0, width - q))  # pre_ids column step + q < width
            this_time[b], dec[b], out_lens[b] = q, int(rng.integers(1, 50)), q
            max_dec[b] = step[b] + int(rng.integers(0, q + 3))
        elif kind[b] in ("prefill", "odd"):
            q = int(rng.integers(1, MAX_SEQ_LEN + 1))
            this_time[b], out_lens[b] = q, 1
            if kind[b] == "prefill":
                enc[b], dec[b] = q, int(rng.integers(0, 20))
            max_dec[b] = (
                step[b] + int(rng.integers(0, 3))
                if q <= dd
                else step[b] + 2 + int(rng.integers(0, 5))
            )
        else:
            this_time[b], enc[b], dec[b] = (
                int(rng.integers(0, 4)),
                int(rng.integers(0, 4)),
                int(rng.integers(0, 9)),
            )
            stop[b], max_dec[b] = True, int(rng.integers(0, 100))
    per = (n, 1) if column else (n,)
    d = {
        "inter_next_tokens": rng.integers(0, 12, size=sum(out_lens)).astype(np.int64),
        "draft_tokens": rng.integers(-1, 100, size=(n, dd)).astype(np.int64),
        "pre_ids": rng.integers(-1, 100, size=(n, width)).astype(np.int64),
        "seq_lens_this_time": np.array(this_time, np.int32).reshape(per),
        "seq_lens_encoder": np.array(enc, np.int32).reshape(per),
        "seq_lens_decoder": np.array(dec, np.int32).reshape(per),
        "step_idx": np.array(step, np.int64).reshape(per),
        "output_cum_offsets": cum_offsets(out_lens, MAX_SEQ_LEN).reshape(per),
        "stop_flags": np.array(stop, bool).reshape(per),
        "not_need_stop": np.array([rng.random() < 0.5]),
        "max_dec_len": np.array(max_dec, np.int64).reshape(per),
        "end_ids": rng.choice(12, size=n_end, replace=False)
        .astype(np.int64)
        .reshape((n_end,) if rng.random() < 0.5 else (n_end, 1)),
        "base_model_draft_tokens": rng.integers(-1, 100, size=(n, dd)).astype(np.int64),
    }
    return d


def check_invariants(before, got, substep):
    n = before["seq_lens_this_time"].size
    flat = {name: a.reshape(-1)[:n] for name, a in got.items() if name not in MATRICES}
    was_stopped = before["stop_flags"].reshape(-1)[:n]
    stop = flat["stop_flags"]
    assert np.isin(flat["seq_lens_this_time"], (0, 1)).all()
    assert (flat["seq_lens_this_time"] == (~stop)).all(), "running <=> this_time == 1"
    assert (flat["seq_lens_encoder"][stop] == 0).all()
    assert (stop | ~was_stopped).all(), "a stopped request stays stopped"
    assert (got["draft_tokens"][:n, 0][was_stopped] == -1).all()
    assert (got["base_model_draft_tokens"][:n, substep + 1][was_stopped] == -1).all()
    assert got["not_need_stop"][0] == (~stop).any()
    running = ~stop
    assert (
        got["draft_tokens"][:n, 0][running]
        == got["base_model_draft_tokens"][:n, substep + 1][running]
    ).all()
    assert not np.isin(got["draft_tokens"][:n, 0][running], before["end_ids"].reshape(-1)).any()
    for name in ("inter_next_tokens", "output_cum_offsets", "max_dec_len", "end_ids"):
        assert_same(got[name], before[name], f"{name} (read-only)")
    other = [c for c in range(got["base_model_draft_tokens"].shape[1]) if c != substep + 1]
    assert_same(
        got["base_model_draft_tokens"][:, other],
        before["base_model_draft_tokens"][:, other],
        "base_model_draft_tokens other columns",
    )


# ------------------------------------------------------------------------------------------------
# 2. Odd-size grid
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("n", BATCH_GRID)
def test_grid_op_matches_reference(n, k):
    rng = np.random.default_rng(7000 * n + k)
    for one_step_stop in (False, True):
        substep = int(rng.integers(0, k))
        d = random_batch(rng, n, k, column=bool(n % 2))
        got = run_pair(
            d, max_seq_len=MAX_SEQ_LEN, substep=substep, prefill_one_step_stop=one_step_stop
        )
        check_invariants(d, got, substep)


# ------------------------------------------------------------------------------------------------
# 3. Hypothesis
# ------------------------------------------------------------------------------------------------
@st.composite
def cases(draw):
    n = draw(st.integers(1, 40))
    k = draw(st.integers(1, 5))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=len(KINDS), unique=True))
    d = random_batch(
        np.random.default_rng(draw(st.integers(0, 2**32 - 1))),
        n,
        k,
        width=draw(st.integers(k + 3, 20)),
        kinds=kinds,
        column=draw(st.booleans()),
        n_end=draw(st.integers(1, 3)),
    )
    return d, draw(st.integers(0, k - 1)), draw(st.booleans())


@given(cases())
def test_property_op_matches_reference_and_invariants_hold(case):
    d, substep, one_step_stop = case
    got = run_pair(d, max_seq_len=MAX_SEQ_LEN, substep=substep, prefill_one_step_stop=one_step_stop)
    check_invariants(d, got, substep)


# ------------------------------------------------------------------------------------------------
# 5. Bad input: ValueError naming the argument, nothing written
# ------------------------------------------------------------------------------------------------
def valid():
    # 0: decode (2 rows), 1: stopped, 2: prefill (1 row), 3: decode (1 row).
    return decoding(
        4,
        seq_lens_this_time=[2, 0, 3, 1],
        seq_lens_encoder=[0, 0, 3, 0],
        stop_flags=[False, True, False, False],
        output_lens=[2, 0, 1, 1],
        next_tokens=[96, D1, D2, T1],
    )


def expect_error(d, name, max_seq_len=L, substep=0):
    PAIR.expect_error(d, name, extra=(max_seq_len, substep), prefill_one_step_stop=False)


def test_valid_base_case_passes():
    run_pair(valid())


DTYPES = [n for n in NAMES if n != "not_need_stop"]
RANKS = [n for n in DTYPES if n not in ("inter_next_tokens", "end_ids")]
ROWS = [n for n in RANKS if n != "seq_lens_this_time"]


@pytest.mark.parametrize("kind, name", PAIR.shape_cases(dtype=DTYPES, rank=RANKS, rows=ROWS))
def test_wrong_shape_names_the_argument(kind, name):
    PAIR.expect_shape_error(valid(), kind, name, rows=3, expect_error=expect_error)


@pytest.mark.parametrize(
    "bad",
    [np.zeros(1, np.int32), np.zeros(2, bool), np.zeros(0, bool)],
    ids=["int32", "2 elements", "empty"],
)
def test_not_need_stop_must_be_one_cpu_bool(bad):
    expect_error(replaced(valid(), "not_need_stop", bad), "not_need_stop")


def test_pre_ids_needs_two_columns():
    expect_error(replaced(valid(), "pre_ids", np.full((4, 1), -1, np.int64)), "pre_ids")


def test_draft_tokens_with_no_columns():
    expect_error(replaced(valid(), "draft_tokens", np.zeros((4, 0), np.int64)), "draft_tokens")


@pytest.mark.parametrize("substep", [2, 5])
def test_substep_plus_one_must_be_a_base_model_draft_tokens_column(substep):
    expect_error(valid(), "base_model_draft_tokens", substep=substep)  # 3 columns


def test_negative_substep():
    expect_error(valid(), "substep", substep=-1)


def test_empty_end_ids():
    expect_error(replaced(valid(), "end_ids", np.zeros(0, np.int64)), "end_ids")


def test_max_seq_len_below_one():
    expect_error(valid(), "max_seq_len", max_seq_len=0)


def test_running_request_with_empty_query():
    d = valid()
    d["seq_lens_this_time"][3] = 0
    expect_error(d, "seq_lens_this_time")
    d = valid()
    d["seq_lens_this_time"][1] = 0  # the stopped one: fine
    run_pair(d)


@pytest.mark.parametrize("case", ["short tokens", "bad offset", "negative row"])
def test_inter_next_tokens_row_out_of_range(case):
    d = valid()
    if case == "short tokens":
        d["inter_next_tokens"] = d["inter_next_tokens"][:3].copy()  # request 3 reads row 3
    elif case == "bad offset":
        d["output_cum_offsets"][3] -= 1  # row 4 of 4
    else:
        d["output_cum_offsets"][0] = 5  # row -4 for request 0
    expect_error(d, "inter_next_tokens")


def test_pre_ids_column_out_of_range():
    d = valid()
    d["step_idx"][0] = L - 2  # decode with q 2 writes column L
    expect_error(d, "pre_ids")


@pytest.mark.parametrize(
    "changes",
    [
        {"seq_lens_decoder": (0, 2**31 - 1)},  # decode: dec + q passes INT32_MAX
        {"seq_lens_decoder": (2, 5), "seq_lens_encoder": (2, 2**31 - 1)},  # prefill: dec + enc
    ],
    ids=["decode", "prefill"],
)
def test_seq_lens_decoder_overflowing_int32_is_refused_by_op_and_reference(changes):
    d = valid()
    for field, (index, value) in changes.items():
        d[field][index] = value
    expect_error(d, "seq_lens_decoder")
    ref_args = [d[n].copy() for n in NAMES]
    with pytest.raises(
        ValueError, match=r"draft_model_update: seq_lens_decoder \(request \d\) would become"
    ):
        reference.draft_model_update(*ref_args, L, 0, prefill_one_step_stop=False)
    for n, a in zip(NAMES, ref_args):
        assert_same(a, d[n], f"{n} (reference, unchanged)")
