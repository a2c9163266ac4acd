"""Tests of fd_mtp.ops.mtp_step_paddle (spec/ops.md §6.6, §11): exact hand cases, a scripted
multi-step scenario, an odd-size grid and Hypothesis properties against the numpy reference
(fd_mtp.reference.mtp_step_paddle), block-accounting invariants, and bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mtp_step_cases import BLOCK_SIZE, CASES, K
from util import BATCH_GRID, assert_all_same, assert_same, flags, i32, run_both, to_numpy, to_paddle

from fd_mtp import ops, reference
from fd_mtp.testing.op_inputs import positional

NAMES = tuple(positional("mtp_step_paddle")[:11])  # the tensors, from the schema


def batch(**fields):
    """The 11 tensor arguments (dict, NAMES order) from lists; unspecified per-request fields default."""
    n = len(fields["seq_lens_decoder"])
    nb = len(fields["block_tables"][0])
    defaults = dict(
        base_model_stop_flags=flags([False] * n),
        stop_flags=flags([False] * n),
        batch_drop=flags([False] * n),
        seq_lens_this_time=i32([K + 1] * n),
        seq_lens_encoder=i32([0] * n),
        seq_lens_decoder=None,
        block_tables=None,
        encoder_block_lens=i32([0] * n),
        used_list_len=i32([0] * n),
        free_list=None,
        free_list_len=None,
    )
    out = {}
    for name, default in defaults.items():
        value = fields.get(name, default)
        if name in ("base_model_stop_flags", "stop_flags", "batch_drop"):
            value = flags(value)
        elif name == "block_tables":
            value = np.asarray(value, np.int32).reshape(n, nb)
        else:
            value = i32(value)
        out[name] = value
    return out


def step_both(state, block_size=BLOCK_SIZE, k=K):
    """One call of op and reference on `state` (dict); checks they agree; returns the op's state."""
    op_args, ref_args, op_res, ref_res = run_both(
        lambda *a: ops.mtp_step_paddle(*a, block_size, k),
        lambda *a: reference.mtp_step_paddle(*a, block_size, k),
        [state[n] for n in NAMES],
    )
    assert op_res is None and ref_res is None
    assert_all_same(op_args, ref_args, NAMES)
    return dict(zip(NAMES, op_args))


def expect(state, **fields):
    for name, value in fields.items():
        expected = batch(**{**{n: state[n].tolist() for n in NAMES}, name: value})[name]
        assert_same(state[name], expected.reshape(state[name].shape), name)


# ---------------------------------------------------------------------------------------------
# Named hand cases
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("inputs, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hand_case(inputs, expected):
    expect(step_both(batch(**inputs)), **expected)


def test_column_shaped_per_request_tensors():
    state = batch(
        seq_lens_decoder=[2, 0],
        block_tables=[[1, -1], [2, -1]],
        encoder_block_lens=[1, 1],
        free_list=[7, 8],
        free_list_len=[2],
    )
    for name in (
        "base_model_stop_flags",
        "stop_flags",
        "batch_drop",
        "seq_lens_this_time",
        "seq_lens_decoder",
    ):
        state[name] = state[name].reshape(-1, 1)
    s = step_both(state)
    expect(s, block_tables=[[1, 8], [2, -1]], used_list_len=[1, 0], free_list_len=[1])


def test_scripted_scenario_blocks_run_out_one_request_is_dropped_the_others_continue():
    # block_size 4, K 1, NB 4. Requests hold encoder blocks 0, 1, 2; request 2 already has decode
    # blocks 7 8. Free list 12 11 10 (popped from the end). Each step every running request
    # advances seq_lens_decoder by 2.
    s = batch(
        seq_lens_decoder=[2, 1, 9],
        block_tables=[[0, -1, -1, -1], [1, -1, -1, -1], [2, 7, 8, -1]],
        encoder_block_lens=[1, 1, 1],
        used_list_len=[0, 0, 2],
        free_list=[12, 11, 10, 0, 0, 0],
        free_list_len=[3],
    )
    held = lambda st: int(st["free_list_len"][0]) + int(st["used_list_len"].sum())  # noqa: E731
    total = held(s)

    def advance(st):
        running = ~st["stop_flags"].reshape(-1) & ~st["base_model_stop_flags"].reshape(-1)
        st["seq_lens_decoder"][running] += 2

    # Step 1: only request 0 reaches a new block (slot 1): it pops 10.
    s = step_both(s)
    expect(
        s,
        block_tables=[[0, 10, -1, -1], [1, -1, -1, -1], [2, 7, 8, -1]],
        used_list_len=[1, 0, 2],
        free_list_len=[2],
    )
    advance(s)
    # Step 2 (dec 4 3 11): requests 1 and 2 need slots 1 and 3: 11 then 12; the free list is empty.
    s = step_both(s)
    expect(
        s,
        block_tables=[[0, 10, -1, -1], [1, 11, -1, -1], [2, 7, 8, 12]],
        used_list_len=[1, 1, 3],
        free_list_len=[0],
    )
    assert held(s) == total
    advance(s)
    # Step 3 (dec 6 5 13): request 0 needs slot 2, nothing is free: request 2 (3 blocks) is
    # dropped, its blocks 7 8 12 go back, request 0 pops 12; request 1 is untouched.
    s = step_both(s)
    expect(
        s,
        stop_flags=[False, False, True],
        batch_drop=[False, False, True],
        seq_lens_this_time=[2, 2, 0],
        seq_lens_decoder=[6, 5, 0],
        block_tables=[[0, 10, 12, -1], [1, 11, -1, -1], [2, -1, -1, -1]],
        encoder_block_lens=[1, 1, 1],
        used_list_len=[2, 1, 0],
        free_list=[7, 8, 12, 0, 0, 0],
        free_list_len=[2],
    )
    assert held(s) == total
    advance(s)
    # Step 4 (dec 8 7 0): the target stops request 1: its block 11 is returned; request 0's slot 2
    # is filled; the dropped request 2 stays off.
    s["base_model_stop_flags"][1] = True
    s = step_both(s)
    expect(
        s,
        stop_flags=[False, False, True],
        batch_drop=[False, False, True],
        block_tables=[[0, 10, 12, -1], [1, -1, -1, -1], [2, -1, -1, -1]],
        encoder_block_lens=[1, 0, 1],
        used_list_len=[2, 0, 0],
        free_list=[7, 8, 11, 0, 0, 0],
        free_list_len=[3],
    )
    assert held(s) == total
    advance(s)
    # Step 5 (dec 10): request 0 needs slot 3 and pops 11. Step 6 (dec 12): slot 3 filled.
    # Step 7 (dec 14): slot 4 is past the row: no need, nothing changes.
    s = step_both(s)
    expect(
        s,
        block_tables=[[0, 10, 12, 11], [1, -1, -1, -1], [2, -1, -1, -1]],
        used_list_len=[3, 0, 0],
        free_list_len=[2],
    )
    for _ in range(2):
        advance(s)
        before = {n: a.copy() for n, a in s.items()}
        s = step_both(s)
        for n in NAMES:
            assert_same(s[n], before[n], n)
    assert held(s) == total
    check_invariants(s, s, total)


# ---------------------------------------------------------------------------------------------
# Random valid batches
# ---------------------------------------------------------------------------------------------
def random_batch(rng, bsz, nb, block_size, k, spare_ids=8, tight=False):
    """A consistent pool: unique block ids among tables and the live free list."""
    ids = iter(rng.permutation(bsz * nb + spare_ids + 64).astype(np.int32))
    block_tables = np.full((bsz, nb), -1, np.int32)
    enc_len = rng.integers(0, nb + 1, size=bsz).astype(np.int32)
    used = np.zeros(bsz, np.int32)
    for b in range(bsz):
        used[b] = rng.integers(0, nb - enc_len[b] + 1)
        for j in range(enc_len[b] + used[b]):
            block_tables[b, j] = next(ids)
    free_len = int(rng.integers(0, 3 if tight else spare_ids + 1))
    size = free_len + int(used.sum()) + int(rng.integers(0, 3))
    free_list = np.zeros(size, np.int32)
    for j in range(free_len):
        free_list[j] = next(ids)
    # decoder lengths around the filled part of each row (some slots filled, some empty, some past NB)
    filled = enc_len + used
    dec = np.maximum(
        0,
        (filled + rng.integers(-2, 2, size=bsz)) * block_size
        - k
        - 1
        + rng.integers(0, block_size, size=bsz),
    )
    base_stop = rng.random(bsz) < 0.15
    drop = rng.random(bsz) < 0.1
    stop = base_stop | drop | (rng.random(bsz) < 0.05)
    this_time = np.where(stop, 0, rng.integers(1, k + 2, size=bsz)).astype(np.int32)
    return dict(
        base_model_stop_flags=base_stop,
        stop_flags=stop,
        batch_drop=drop,
        seq_lens_this_time=this_time,
        seq_lens_encoder=np.zeros(bsz, np.int32),
        seq_lens_decoder=dec.astype(np.int32),
        block_tables=block_tables,
        encoder_block_lens=enc_len,
        used_list_len=used,
        free_list=free_list,
        free_list_len=i32([free_len]),
    )


def conserved(state):
    return int(state["free_list_len"][0]) + int(state["used_list_len"].sum())


def check_invariants(before, after, total):
    assert conserved(after) == total, "free_list_len + decode blocks held is conserved"
    live = np.concatenate(
        [
            after["block_tables"][after["block_tables"] != -1],
            after["free_list"][: int(after["free_list_len"][0])],
        ]
    )
    values, counts = np.unique(live, return_counts=True)
    assert np.all(counts == 1), f"block ids appear twice: {values[counts > 1][:5]}"
    newly_dropped = after["batch_drop"].reshape(-1) & ~before["batch_drop"].reshape(-1)
    dropped = after["batch_drop"].reshape(-1)
    assert np.all(after["stop_flags"].reshape(-1)[newly_dropped])
    assert np.all(after["seq_lens_this_time"].reshape(-1)[newly_dropped] == 0)
    assert np.all(after["seq_lens_decoder"].reshape(-1)[newly_dropped] == 0)
    assert np.all(after["used_list_len"][dropped | after["base_model_stop_flags"].reshape(-1)] == 0)


def compare_or_both_raise(state, block_size, k):
    """op == reference; where the reference refuses (nothing to preempt), the op raises ValueError
    naming free_list and writes nothing."""
    try:
        reference.mtp_step_paddle(*[state[n].copy() for n in NAMES], block_size, k)
    except ValueError:
        tensors = [to_paddle(state[n]) for n in NAMES]
        with pytest.raises(ValueError, match="free_list"):
            ops.mtp_step_paddle(*tensors, block_size, k)
        for t, n in zip(tensors, NAMES):
            assert_same(to_numpy(t), state[n], n + " (unchanged)")
        return None
    after = step_both(state, block_size, k)
    check_invariants(state, after, conserved(state))
    return after


@pytest.mark.parametrize("bsz", BATCH_GRID)
@pytest.mark.parametrize("block_size, k, nb", [(1, 1, 3), (4, 3, 5), (64, 5, 9)])
def test_grid_op_matches_reference(bsz, block_size, k, nb):
    rng = np.random.default_rng(bsz * 7 + block_size)
    state = random_batch(rng, bsz, nb, block_size, k, spare_ids=bsz)
    compare_or_both_raise(state, block_size, k)


@settings(max_examples=80, deadline=None)
@given(
    bsz=st.integers(1, 30),
    nb=st.integers(1, 6),
    block_size=st.sampled_from([1, 2, 4, 64]),
    k=st.integers(1, 5),
    tight=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_op_matches_reference_and_invariants(bsz, nb, block_size, k, tight, seed):
    rng = np.random.default_rng(seed)
    compare_or_both_raise(random_batch(rng, bsz, nb, block_size, k, tight=tight), block_size, k)


@settings(max_examples=20, deadline=None)
@given(bsz=st.integers(1, 12), steps=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_property_multi_step_runs_keep_the_pool_consistent(bsz, steps, seed):
    rng = np.random.default_rng(seed)
    state = random_batch(rng, bsz, 6, 4, 2, tight=True)
    total = conserved(state)
    for _ in range(steps):
        # The random walk below only grows seq_lens_decoder; once a request's decode blocks
        # no longer fit its block-table row the state is outside the op's contract (the op
        # rejects it naming used_list_len), so the walk ends there.
        nb = state["block_tables"].shape[1]
        if np.any(
            state["encoder_block_lens"].reshape(-1) + state["used_list_len"].reshape(-1) > nb
        ):
            return
        after = compare_or_both_raise(state, 4, 2)
        if after is None:
            return
        assert conserved(after) == total
        running = ~after["stop_flags"] & ~after["base_model_stop_flags"]
        after["seq_lens_decoder"][running] += rng.integers(1, 4, size=int(running.sum())).astype(
            np.int32
        )
        state = after


# ---------------------------------------------------------------------------------------------
# Bad input: ValueError naming the argument; nothing written
# ---------------------------------------------------------------------------------------------
def good():
    return batch(
        seq_lens_decoder=[6, 1],
        block_tables=[[5, 20, -1, -1], [6, -1, -1, -1]],
        encoder_block_lens=[1, 1],
        used_list_len=[1, 0],
        free_list=[30, 0, 0],
        free_list_len=[1],
    )


BAD = {
    "exhausted_nothing_to_preempt": (
        dict(
            used_list_len=[0, 0],
            block_tables=[[5, -1, -1, -1], [6, -1, -1, -1]],
            free_list_len=[0],
            seq_lens_decoder=[2, 2],
        ),
        "free_list",
    ),
    "free_list_too_small_for_returned_blocks": (
        dict(base_model_stop_flags=[True, False], free_list=[30], free_list_len=[1]),
        "free_list",
    ),
    "used_negative": (dict(used_list_len=[-1, 0]), "used_list_len"),
    "used_past_the_row": (dict(used_list_len=[4, 0]), "used_list_len"),
    "free_list_len_negative": (dict(free_list_len=[-1]), "free_list_len"),
    "free_list_len_past_free_list": (dict(free_list_len=[4]), "free_list_len"),
    # A running request needs slot (dec + K + 1) // block_size: negative dec has none (C++ division
    # truncates, Python's floors: they would disagree on the slot, and a negative slot is outside
    # the row).
    "decoder_negative": (dict(seq_lens_decoder=[-5, 1]), "seq_lens_decoder"),
    "decoder_int32_min": (dict(seq_lens_decoder=[6, -(2**31)]), "seq_lens_decoder"),
}
BAD_TYPES = {
    "block_tables_int64": ("block_tables", lambda a: a.astype(np.int64)),
    "block_tables_1d": ("block_tables", lambda a: a.reshape(-1)),
    "block_tables_too_few_rows": ("block_tables", lambda a: a[:1].copy()),
    "stop_flags_int32": ("stop_flags", lambda a: a.astype(np.int32)),
    "base_stop_too_short": ("base_model_stop_flags", lambda a: a[:1].copy()),
    "batch_drop_too_short": ("batch_drop", lambda a: a[:1].copy()),
    "decoder_int64": ("seq_lens_decoder", lambda a: a.astype(np.int64)),
    "encoder_block_lens_too_short": ("encoder_block_lens", lambda a: a[:1].copy()),
    "used_list_len_too_short": ("used_list_len", lambda a: a[:1].copy()),
    "free_list_int64": ("free_list", lambda a: a.astype(np.int64)),
    # FastDeploy's free list is [F] (paddle.to_tensor of a list): [F, 1] is refused too.
    "free_list_column": ("free_list", lambda a: a.reshape(-1, 1)),
    "free_list_2d": ("free_list", lambda a: np.stack([a, a], axis=1)),
    "free_list_scalar": ("free_list", lambda a: a[:1].reshape(())),
    "free_list_len_int64": ("free_list_len", lambda a: a.astype(np.int64)),
}


def raises_and_unchanged(state, name, block_size=BLOCK_SIZE, k=K):
    tensors = [to_paddle(state[n]) for n in NAMES]
    with pytest.raises(ValueError, match=name):
        ops.mtp_step_paddle(*tensors, block_size, k)
    for t, n in zip(tensors, NAMES):
        assert_same(to_numpy(t), state[n], n + " (unchanged)")


def test_good_args_are_good():
    s = step_both(good())
    expect(
        s, block_tables=[[5, 20, 30, -1], [6, -1, -1, -1]], used_list_len=[2, 0], free_list_len=[0]
    )


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_values(case):
    fields, name = BAD[case]
    base = {n: a.tolist() for n, a in good().items()}
    raises_and_unchanged(batch(**{**base, **fields}), name)


@pytest.mark.parametrize("case", ["decoder_negative", "decoder_int32_min"])
def test_reference_refuses_a_negative_decoder_too(case):
    fields, name = BAD[case]
    base = {n: a.tolist() for n, a in good().items()}
    state = batch(**{**base, **fields})
    before = {n: a.copy() for n, a in state.items()}
    with pytest.raises(ValueError, match=name):
        reference.mtp_step_paddle(*[state[n] for n in NAMES], BLOCK_SIZE, K)
    for n in NAMES:
        assert_same(state[n], before[n], n + " (reference, unchanged)")


def test_negative_decoder_of_a_stopped_request_is_ignored():
    base = {n: a.tolist() for n, a in good().items()}
    step_both(
        batch(**{**base, "seq_lens_decoder": [6, -5], "base_model_stop_flags": [False, True]})
    )


@pytest.mark.parametrize("case", sorted(BAD_TYPES))
def test_bad_dtypes_and_shapes(case):
    name, change = BAD_TYPES[case]
    state = good()
    state[name] = change(state[name])
    raises_and_unchanged(state, name)


@pytest.mark.parametrize("block_size", [0, -4])
def test_bad_block_size(block_size):
    raises_and_unchanged(good(), "block_size", block_size=block_size)


@pytest.mark.parametrize("shape", [(-1, 1), (1, -1), (-1, 1, 1)])
def test_reference_refuses_a_free_list_that_is_not_1d(shape):
    state = good()
    state["free_list"] = state["free_list"].reshape(shape)
    copies = {n: state[n].copy() for n in NAMES}
    with pytest.raises(ValueError, match=r"^mtp_step_paddle: free_list must have shape \[F\]"):
        reference.mtp_step_paddle(*[copies[n] for n in NAMES], BLOCK_SIZE, K)
    for n in NAMES:
        assert_same(copies[n], state[n], n + " (unchanged)")
