"""Tests of fd_mtp.ops.recover_decode_task (spec ops.md §5.15) against its numpy reference: both
variants (speculative, non-speculative with None), the slot-past-the-row choice, the odd-size
grid, Hypothesis properties with invariants, and bad input (ValueError, nothing written)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, OpPair, assert_same, expect_fields, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.testing.op_inputs import positional

NAMES = tuple(positional("recover_decode_task")[:10])  # the tensors, from the schema
PAIR = OpPair("recover_decode_task", NAMES)
SPEC = ("draft_tokens", "step_draft_tokens", "step_seq_lens_this_time")
BS, K = 4, 1  # speculative slot (step_dec + 3) // 4; non-speculative step_dec // 4


def batch(n, nb=3, k=K, spec=True, **fields):
    d = {
        "stop_flags": np.ones(n, bool),
        "seq_lens_this_time": np.zeros(n, np.int32),
        "seq_lens_encoder": np.full(n, 7, np.int32),
        "seq_lens_decoder": np.zeros(n, np.int32),
        "step_seq_lens_decoder": np.full(n, 4, np.int32),
        "block_tables": np.full((n, nb), -1, np.int32),
        "is_block_step": np.ones(n, bool),
        "draft_tokens": np.zeros((n, k + 1), np.int64),
        "step_draft_tokens": np.arange(n * (k + 1), dtype=np.int64).reshape(n, k + 1) + 100,
        "step_seq_lens_this_time": np.full(n, k + 1, np.int32),
    }
    for name, value in fields.items():
        d[name] = np.asarray(value, dtype=d[name].dtype)
    if not spec:
        for name in SPEC:
            d[name] = None
    return d


def both(d, bs=BS, k=K):
    """Op and reference on copies of ``d`` (absent arrays None); every array agrees; -> the op's."""
    return PAIR.run(d, extra=(bs, k))


# ------------------------------------------------------------------------------------------------
# Hand cases
# ------------------------------------------------------------------------------------------------
def test_granted_block_resumes_with_parked_lengths_and_drafts():
    # slot (4 + 3) // 4 = 1: request 0 has block 9 there, request 1 still -1, request 2 is not parked.
    out = both(
        batch(
            3,
            block_tables=[[0, 9, -1], [1, -1, -1], [2, 3, -1]],
            is_block_step=[True, True, False],
            stop_flags=[True, True, False],
            seq_lens_this_time=[0, 0, 2],
            seq_lens_decoder=[0, 0, 5],
            step_seq_lens_this_time=[2, 2, 2],
            seq_lens_encoder=[7, 7, 0],
        )
    )
    expect_fields(
        out,
        is_block_step=[False, True, False],
        stop_flags=[False, True, False],
        seq_lens_this_time=[2, 0, 2],
        seq_lens_encoder=[0, 7, 0],
        seq_lens_decoder=[4, 0, 5],
        draft_tokens=[[100, 101], [0, 0], [0, 0]],
    )


def test_only_step_seq_lens_this_time_draft_tokens_are_restored():
    out = both(
        batch(
            1,
            k=3,
            block_tables=[[0, 9, -1]],
            step_seq_lens_this_time=[2],
            draft_tokens=[[-5, -5, -5, -5]],
        )
    )
    expect_fields(out, draft_tokens=[[100, 101, -5, -5]], seq_lens_this_time=[2])


def test_speculative_and_plain_slots_differ():
    # step_dec 3: speculative slot (3 + 3) // 4 = 1 (empty), plain slot 3 // 4 = 0 (held).
    d = dict(block_tables=[[5, -1, -1]], step_seq_lens_decoder=[3])
    expect_fields(both(batch(1, **d)), is_block_step=[True], stop_flags=[True])
    out = both(batch(1, spec=False, **d))
    expect_fields(
        out,
        is_block_step=[False],
        stop_flags=[False],
        seq_lens_this_time=[1],
        seq_lens_decoder=[3],
        seq_lens_encoder=[0],
    )


def test_slot_past_the_row_resumes_without_reading_outside_it():
    # step_dec 9, K 1, NB 3: slot (9 + 3) // 4 = 3 == NB. Upstream clamps to NB and reads the next
    # row's first entry; here it resumes whatever the next row holds.
    for next_row_first in (-1, 42):
        out = both(
            batch(
                2,
                block_tables=[[0, 1, 2], [next_row_first, -1, -1]],
                step_seq_lens_decoder=[9, 0],
                is_block_step=[True, False],
                stop_flags=[True, False],
            )
        )
        expect_fields(
            out, is_block_step=[False, False], stop_flags=[False, False], seq_lens_decoder=[9, 0]
        )


def test_is_block_step_column_and_stop_flags_column():
    d = batch(2, block_tables=[[0, 9, -1], [1, 8, -1]])
    d["stop_flags"] = d["stop_flags"].reshape(-1, 1)
    d["seq_lens_this_time"] = d["seq_lens_this_time"].reshape(-1, 1)
    out = both(d)
    expect_fields(out, is_block_step=[False, False], seq_lens_this_time=[2, 2])


# ------------------------------------------------------------------------------------------------
# Random batches
# ------------------------------------------------------------------------------------------------
def random_batch(rng, n, nb, k, bs, spec=True):
    d = batch(n, nb=nb, k=k, spec=spec)
    d["block_tables"] = np.where(
        rng.random((n, nb)) < 0.5, -1, rng.integers(0, 999, (n, nb))
    ).astype(np.int32)
    d["is_block_step"] = rng.random(n) < 0.6
    d["stop_flags"] = d["is_block_step"] | (rng.random(n) < 0.2)
    d["step_seq_lens_decoder"] = rng.integers(0, nb * bs + 2 * k + 2, n).astype(np.int32)
    d["seq_lens_decoder"] = rng.integers(0, 50, n).astype(np.int32)
    d["seq_lens_this_time"] = rng.integers(0, 5, n).astype(np.int32)
    if spec:
        d["step_seq_lens_this_time"] = rng.integers(0, k + 2, n).astype(np.int32)
        d["draft_tokens"] = rng.integers(0, 999, (n, k + 1))
        d["step_draft_tokens"] = rng.integers(0, 999, (n, k + 1))
    return d


def check_invariants(before, after, spec):
    resumed = before["is_block_step"] & ~after["is_block_step"]
    assert not np.any(after["is_block_step"] & ~before["is_block_step"])
    assert not np.any(after["stop_flags"].reshape(-1)[resumed])
    assert np.array_equal(
        after["seq_lens_decoder"].reshape(-1)[resumed], before["step_seq_lens_decoder"][resumed]
    )
    if spec:
        assert np.array_equal(
            after["seq_lens_this_time"].reshape(-1)[resumed],
            before["step_seq_lens_this_time"][resumed],
        )
    else:
        assert np.all(after["seq_lens_this_time"].reshape(-1)[resumed] == 1)
    untouched = ~resumed
    for n in ("stop_flags", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"):
        assert np.array_equal(after[n].reshape(-1)[untouched], before[n].reshape(-1)[untouched]), n


@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("k", [1, 3, 5])
@pytest.mark.parametrize("spec", [True, False])
def test_grid_matches_reference(bsz, k, spec):
    rng = np.random.default_rng([bsz, k, spec])
    d = random_batch(rng, bsz, 5, k, 16, spec)
    check_invariants(d, both(d, 16, k), spec)


@given(
    n=st.integers(1, 40),
    nb=st.integers(1, 6),
    k=st.integers(0, 5),
    bs=st.sampled_from([1, 2, 4, 64]),
    spec=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_matches_reference(n, nb, k, bs, spec, seed):
    d = random_batch(np.random.default_rng(seed), n, nb, k, bs, spec)
    check_invariants(d, both(d, bs, k), spec)


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------
def raises_and_unchanged(d, name, bs=BS, k=K):
    t = [to_paddle(d[n]) for n in NAMES]
    with pytest.raises(ValueError, match=f"recover_decode_task: {name}"):
        ops.recover_decode_task(*t, bs, k)
    for x, n in zip(t, NAMES):
        if d[n] is not None:
            assert_same(to_numpy(x), d[n], n + " (unchanged)")


def good():
    return batch(2, block_tables=[[0, 9, -1], [1, 8, -1]])


BAD = {
    "draft_row_too_long": ("step_seq_lens_this_time", dict(step_seq_lens_this_time=[2, 3])),
    "draft_row_negative": ("step_seq_lens_this_time", dict(step_seq_lens_this_time=[-1, 2])),
    "negative_step_decoder": ("step_seq_lens_decoder", dict(step_seq_lens_decoder=[4, -1])),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values(case):
    name, fields = BAD[case]
    d = good()
    d.update({n: np.asarray(v, np.int32) for n, v in fields.items()})
    raises_and_unchanged(d, name)
    with pytest.raises(ValueError, match=name):
        reference.recover_decode_task(*[d[n] for n in NAMES], BS, K)


def test_not_parked_request_is_not_validated():
    # a bad step_seq_lens_this_time of a request that does not resume is never read
    d = good()
    d["is_block_step"][1] = False
    d["step_seq_lens_this_time"][1] = 99
    both(d)


BAD_TYPES = {
    "tables_int64": (
        "block_tables",
        lambda d: d.update(block_tables=d["block_tables"].astype(np.int64)),
    ),
    "block_step_short": (
        "is_block_step",
        lambda d: d.update(is_block_step=d["is_block_step"][:1].copy()),
    ),
    "step_dec_int64": (
        "step_seq_lens_decoder",
        lambda d: d.update(step_seq_lens_decoder=d["step_seq_lens_decoder"].astype(np.int64)),
    ),
    "draft_int32": (
        "draft_tokens",
        lambda d: d.update(draft_tokens=d["draft_tokens"].astype(np.int32)),
    ),
    "step_draft_1d": (
        "step_draft_tokens",
        lambda d: d.update(step_draft_tokens=d["step_draft_tokens"].reshape(-1)),
    ),
    "only_draft_given": (
        "draft_tokens",
        lambda d: d.update(step_draft_tokens=None, step_seq_lens_this_time=None),
    ),
    "draft_missing": ("draft_tokens", lambda d: d.update(draft_tokens=None)),
}


@pytest.mark.parametrize("case", sorted(BAD_TYPES))
def test_bad_dtypes_shapes_and_optional_mix(case):
    name, change = BAD_TYPES[case]
    d = good()
    change(d)
    raises_and_unchanged(d, name)
