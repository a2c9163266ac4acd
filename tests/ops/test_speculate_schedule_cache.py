"""Tests of fd_mtp.ops.speculate_schedule_cache (spec ops.md §5.14) against its numpy reference.

Named hand cases with exact expected arrays, the odd-size grid, Hypothesis properties with
invariants, and bad input (ValueError naming the argument, nothing written).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, assert_same, expect_fields, run_both, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.testing.op_inputs import positional

NAMES = tuple(positional("speculate_schedule_cache")[:15])  # the tensors, from the schema
WRITTEN = tuple(
    n for n in NAMES if n not in ("draft_tokens", "block_tables", "prompt_lens", "stop_nums")
)
BS, K = 4, 1  # hand cases: a decoding request needs slot (dec + 4) // 4


def batch(n, nb=3, k=K, max_bsz=None, **fields):
    """All 15 tensors for n running requests (stop_flags has max_bsz >= n entries)."""
    max_bsz = max_bsz or n
    d = {
        "draft_tokens": np.arange(max_bsz * (k + 1), dtype=np.int64).reshape(max_bsz, k + 1) + 100,
        "block_tables": np.arange(max_bsz * nb, dtype=np.int32).reshape(max_bsz, nb),
        "stop_flags": np.zeros(max_bsz, bool),
        "prompt_lens": np.full(max_bsz, 3, np.int64),
        "seq_lens_this_time": np.full(n, k + 1, np.int32),
        "seq_lens_encoder": np.zeros(max_bsz, np.int32),
        "seq_lens_decoder": np.full(max_bsz, 4, np.int32),
        "step_seq_lens_decoder": np.zeros(max_bsz, np.int32),
        "step_draft_tokens": np.zeros((max_bsz, k + 1), np.int64),
        "step_seq_lens_this_time": np.zeros(max_bsz, np.int32),
        "accept_num": np.full(max_bsz, 1, np.int32),
        "accept_tokens": np.arange(max_bsz * (k + 1), dtype=np.int64).reshape(max_bsz, k + 1) + 500,
        "is_block_step": np.zeros(max_bsz, bool),
        "not_need_stop": np.array([False]),
        "stop_nums": np.array([max_bsz], np.int64),
    }
    for name, value in fields.items():
        d[name] = np.asarray(value, dtype=d[name].dtype).reshape(np.shape(value))
    return d


def both(d, bs=BS, k=K, one_step=False):
    """Runs op and reference on copies; asserts every array equal; returns the op's arrays."""
    op_args, ref_args, _, _ = run_both(
        lambda *a: ops.speculate_schedule_cache(*a, bs, k, prefill_one_step_stop=one_step),
        lambda *a: reference.speculate_schedule_cache(*a, bs, k, prefill_one_step_stop=one_step),
        [d[n] for n in NAMES],
    )
    for n, a, e in zip(NAMES, op_args, ref_args):
        assert_same(a, e, n)
    return dict(zip(NAMES, op_args))


# ------------------------------------------------------------------------------------------------
# Hand cases
# ------------------------------------------------------------------------------------------------
def test_missing_next_block_parks_the_request():
    # request 0: slot (4 + 4) // 4 = 2 is -1 -> block step; request 1: slot 2 holds 9 -> runs.
    out = both(
        batch(
            2,
            block_tables=[[0, 1, -1], [7, 8, 9]],
            seq_lens_this_time=[2, 2],
            draft_tokens=[[11, 12], [21, 22]],
            accept_tokens=[[11, 0], [21, 22]],
            accept_num=[1, 2],
        )
    )
    expect_fields(
        out,
        is_block_step=[True, False],
        stop_flags=[True, False],
        seq_lens_this_time=[0, 2],
        step_seq_lens_this_time=[2, 0],
        seq_lens_decoder=[0, 4],
        step_seq_lens_decoder=[4, 0],
        accept_num=[0, 2],
        accept_tokens=[[-1, -1], [21, 22]],
        step_draft_tokens=[[11, 12], [0, 0]],
        seq_lens_encoder=[0, 0],
        not_need_stop=[True],
    )


def test_slot_past_the_row_is_not_a_block_step():
    # dec 9: slot (9 + 4) // 4 = 3 >= NB = 3: nothing is parked.
    out = both(batch(1, block_tables=[[0, 1, 2]], seq_lens_decoder=[9]))
    expect_fields(
        out, is_block_step=[False], stop_flags=[False], seq_lens_decoder=[9], seq_lens_this_time=[2]
    )


def test_unfinished_chunked_prefill_is_stopped_and_zeroed():
    out = both(
        batch(
            2,
            prompt_lens=[10, 3],
            seq_lens_decoder=[6, 4],
            seq_lens_encoder=[2, 0],
            block_tables=[[0, 1, -1], [3, 4, 5]],
        )
    )
    expect_fields(
        out,
        stop_flags=[True, False],
        seq_lens_this_time=[0, 2],
        seq_lens_decoder=[0, 4],
        seq_lens_encoder=[0, 0],
        accept_num=[0, 1],
        is_block_step=[False, False],
        step_seq_lens_decoder=[0, 0],
        accept_tokens=[[500, 501], [502, 503]],
    )


def test_prefill_one_step_stop_stops_every_running_request_without_block_step():
    out = both(batch(2, block_tables=[[0, 1, -1], [3, 4, 5]]), one_step=True)
    expect_fields(
        out,
        stop_flags=[True, True],
        seq_lens_this_time=[0, 0],
        seq_lens_decoder=[0, 0],
        accept_num=[0, 0],
        is_block_step=[False, False],
        step_seq_lens_this_time=[0, 0],
        not_need_stop=[False],
    )


def test_already_stopped_request_is_untouched_and_counts_as_stopped():
    out = both(
        batch(
            2,
            stop_flags=[True, False],
            seq_lens_this_time=[0, 2],
            seq_lens_decoder=[7, 4],
            block_tables=[[-1, -1, -1], [3, 4, 5]],
            stop_nums=[2],
        )
    )
    expect_fields(
        out,
        stop_flags=[True, False],
        seq_lens_decoder=[7, 4],
        is_block_step=[False, False],
        not_need_stop=[True],
    )  # 1 stopped < 2


def test_not_need_stop_counts_slots_beyond_the_running_slice():
    # bsz 1 (running slice) of max_bsz 3: slots 1, 2 count as stopped; request 0 block-steps.
    d = batch(1, max_bsz=3, block_tables=[[0, 1, -1], [0, 0, 0], [0, 0, 0]], stop_nums=[3])
    out = both(d)
    expect_fields(
        out, is_block_step=[True, False, False], not_need_stop=[False]
    )  # 3 stopped, not < 3
    d["stop_nums"][0] = 4
    expect_fields(both(d), not_need_stop=[True])


def test_column_shaped_tensors_and_wider_step_draft_tokens():
    d = batch(1, block_tables=[[0, 1, -1]], draft_tokens=[[5, 6]])
    for n in ("stop_flags", "seq_lens_this_time", "seq_lens_decoder", "prompt_lens", "accept_num"):
        d[n] = d[n].reshape(-1, 1)
    d["step_draft_tokens"] = np.full((1, 4), 9, np.int64)
    out = both(d)
    expect_fields(out, step_draft_tokens=[[5, 6, 9, 9]], is_block_step=[True])


def test_env_var_default(monkeypatch):
    d = batch(1, block_tables=[[0, 1, 2]])
    monkeypatch.setenv("PREFILL_NODE_ONE_STEP_STOP_V1", "1")
    t = [to_paddle(d[n]) for n in NAMES]
    ops.speculate_schedule_cache(*t, BS, K)
    assert to_numpy(t[NAMES.index("stop_flags")]).tolist() == [True]
    monkeypatch.setenv("PREFILL_NODE_ONE_STEP_STOP_V1", "0")
    t = [to_paddle(d[n]) for n in NAMES]
    ops.speculate_schedule_cache(*t, BS, K)
    assert to_numpy(t[NAMES.index("stop_flags")]).tolist() == [False]


# ------------------------------------------------------------------------------------------------
# Random batches: grid + Hypothesis
# ------------------------------------------------------------------------------------------------
def random_batch(rng, bsz, max_bsz, k, bs, nb):
    d = batch(bsz, nb=nb, k=k, max_bsz=max_bsz)
    d["block_tables"] = np.where(
        rng.random((max_bsz, nb)) < 0.3, -1, rng.integers(0, 10**4, (max_bsz, nb))
    ).astype(np.int32)
    d["stop_flags"] = rng.random(max_bsz) < 0.2
    d["prompt_lens"] = rng.integers(0, nb * bs + 1, max_bsz).astype(np.int64)
    d["seq_lens_decoder"] = rng.integers(0, nb * bs + 4, max_bsz).astype(np.int32)
    d["seq_lens_this_time"] = rng.integers(0, k + 2, bsz).astype(np.int32)
    d["draft_tokens"] = rng.integers(0, 1000, (max_bsz, k + 1))
    d["step_draft_tokens"] = rng.integers(-1, 1000, (max_bsz, k + 1 + int(rng.integers(0, 2))))
    d["accept_tokens"] = rng.integers(0, 1000, (max_bsz, k + 1))
    d["accept_num"] = rng.integers(0, k + 2, max_bsz).astype(np.int32)
    d["stop_nums"] = np.array([rng.integers(0, max_bsz + 2)], np.int64)
    return d


def check_invariants(before, after, bsz, k):
    parked = after["is_block_step"] & ~before["is_block_step"]
    assert np.all(after["stop_flags"][parked]) and np.all(
        after["seq_lens_this_time"][:bsz][parked[:bsz]] == 0
    )
    assert np.all(after["step_seq_lens_decoder"][parked] == before["seq_lens_decoder"][parked])
    assert np.all(after["accept_tokens"][parked] == -1)
    d = before["draft_tokens"].shape[1]
    assert np.array_equal(after["step_draft_tokens"][parked, :d], before["draft_tokens"][parked])
    assert np.all(parked[bsz:] == False)  # noqa: E712 (slots past the running slice untouched)
    newly_stopped = after["stop_flags"] & ~before["stop_flags"]
    assert np.all(after["seq_lens_decoder"][newly_stopped] == 0) and np.all(
        after["accept_num"][newly_stopped] == 0
    )
    stopped = int(after["stop_flags"][:bsz].sum()) + after["stop_flags"].size - bsz
    assert bool(after["not_need_stop"][0]) == (stopped < int(before["stop_nums"][0]))


@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_grid_matches_reference(bsz, k):
    rng = np.random.default_rng([bsz, k])
    d = random_batch(rng, bsz, bsz + int(rng.integers(0, 3)), k, 16, 6)
    out = both(d, 16, k)
    check_invariants(d, out, bsz, k)


@given(
    bsz=st.integers(1, 40),
    extra=st.integers(0, 4),
    k=st.integers(0, 5),
    bs=st.sampled_from([1, 2, 4, 64]),
    nb=st.integers(1, 6),
    one_step=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_matches_reference(bsz, extra, k, bs, nb, one_step, seed):
    rng = np.random.default_rng(seed)
    d = random_batch(rng, bsz, bsz + extra, k, bs, nb)
    out = both(d, bs, k, one_step)
    check_invariants(d, out, bsz, k)


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------
def raises_and_unchanged(d, name, bs=BS, k=K):
    t = [to_paddle(d[n]) for n in NAMES]
    with pytest.raises(ValueError, match=f"speculate_schedule_cache: {name}"):
        ops.speculate_schedule_cache(*t, bs, k, prefill_one_step_stop=False)
    for x, n in zip(t, NAMES):
        assert_same(to_numpy(x), d[n], n + " (unchanged)")


def good():
    return batch(2, block_tables=[[0, 1, -1], [3, 4, 5]])


BAD = {
    "negative_decoder": (
        "seq_lens_decoder",
        lambda d: d.update(
            seq_lens_decoder=np.array([4, -9], np.int32), prompt_lens=np.array([3, -20], np.int64)
        ),
    ),
    "draft_int32": (
        "draft_tokens",
        lambda d: d.update(draft_tokens=d["draft_tokens"].astype(np.int32)),
    ),
    "tables_1d": ("block_tables", lambda d: d.update(block_tables=d["block_tables"].reshape(-1))),
    "stop_short": ("stop_flags", lambda d: d.update(stop_flags=d["stop_flags"][:1].copy())),
    "prompt_int32": (
        "prompt_lens",
        lambda d: d.update(prompt_lens=d["prompt_lens"].astype(np.int32)),
    ),
    "step_draft_narrow": (
        "step_draft_tokens",
        lambda d: d.update(step_draft_tokens=d["step_draft_tokens"][:, :1].copy()),
    ),
    "accept_tokens_short": (
        "accept_tokens",
        lambda d: d.update(accept_tokens=d["accept_tokens"][:1].copy()),
    ),
    "block_step_int": (
        "is_block_step",
        lambda d: d.update(is_block_step=d["is_block_step"].astype(np.int32)),
    ),
    "not_need_stop_two": (
        "not_need_stop",
        lambda d: d.update(not_need_stop=np.array([True, True])),
    ),
    "stop_nums_int32": ("stop_nums", lambda d: d.update(stop_nums=d["stop_nums"].astype(np.int32))),
    "this_time_2d": (
        "seq_lens_this_time",
        lambda d: d.update(seq_lens_this_time=np.zeros((2, 2), np.int32)),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_the_argument_and_writes_nothing(case):
    name, change = BAD[case]
    d = good()
    change(d)
    raises_and_unchanged(d, name)


def test_reference_rejects_the_negative_decoder_too():
    d = good()
    BAD["negative_decoder"][1](d)
    with pytest.raises(ValueError, match="seq_lens_decoder"):
        reference.speculate_schedule_cache(*[d[n] for n in NAMES], BS, K)


def test_bad_attributes():
    d = good()
    raises_and_unchanged(d, "block_size", bs=0)
    raises_and_unchanged(d, "max_draft_tokens", k=-1)
