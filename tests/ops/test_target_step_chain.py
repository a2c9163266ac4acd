"""The target-side post-verify chain of spec ops.md §4.1 step 6 over several engine steps:

    speculate_set_stop_value_multi_seqs -> speculate_update -> (save output) ->
    speculate_set_value_by_flags_and_idx

on a small batch built from lists. Verify's effect (accept_tokens, accept_num, step_idx,
stop_flags) and the proposer's drafts are produced by a few lines of numpy from a fixed "truth"
continuation per request. Per step: every op equals its numpy reference on the same state, the
tokens streamed by save output (accept_tokens[:accept_num] after speculate_update) are recorded,
and pre_ids holds exactly the tokens emitted so far, in order, at columns 1..step_idx (target
convention: token k at column k) -- except the tokens of the step in which a request stops, which
are streamed but never written (set_value only resets a stopped request; upstream behaviour).
A stop sequence fires mid-run; step_idx is not rewound by the truncation (upstream behaviour).

Slots: 0 drafts right and ends on a drafted EOS; 1 drafts right and hits its stop sequence
[203, 204] (the token after it becomes EOS); 2 drafts wrong and reaches max_dec_len; 3 is an
empty slot past the running slice (real_bsz 3 < max_bsz 4).
"""

from __future__ import annotations

import numpy as np
from util import assert_same, ragged, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.testing.op_inputs import positional

K = 2  # draft tokens per step
D = K + 1
L = 16  # pre_ids width
EOS = 2
PROMPT = 4
MAX_BSZ, REAL_BSZ = 4, 3
TRUTH = [  # the target's greedy continuation of each slot's prompt
    [100, 101, 102, 103, 104, EOS, 106, 107, 108],
    [200, 201, 202, 203, 204, 205, 206, 207, 208],
    [300, 301, 302, 303, 304, 305, 306, 307, 308],
]
DRAFTS_RIGHT = [True, True, False]
MAX_DEC_LEN = [50, 50, 5]
STOP_SEQS = [[], [[203, 204]], []]

STOP_ARGS = (
    "accept_tokens",
    "accept_num",
    "pre_ids",
    "step_idx",
    "stop_flags",
    "seq_lens_this_time",
    "stop_seqs",
    "stop_seqs_len",
    "end_ids",
)
UPDATE_ARGS = tuple(positional("speculate_update"))
SET_VALUE_ARGS = (
    "pre_ids",
    "accept_tokens",
    "accept_num",
    "stop_flags",
    "seq_lens_this_time",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "step_idx",
)
CHAIN = (
    ("speculate_set_stop_value_multi_seqs", STOP_ARGS),
    ("speculate_update", UPDATE_ARGS),
    ("speculate_set_value_by_flags_and_idx", SET_VALUE_ARGS),
)


def inserted():
    """share_inputs right after inserting three prefill requests (spec §4.2, v1)."""
    n = MAX_BSZ
    seqs = np.full((n, 2, 3), -1, np.int64)
    lens = np.zeros((n, 2), np.int32)
    for b, rows in enumerate(STOP_SEQS):
        for s, seq in enumerate(rows):
            seqs[b, s, : len(seq)] = seq
            lens[b, s] = len(seq)
    return {
        "accept_tokens": np.zeros((n, D), np.int64),
        "accept_num": np.zeros(n, np.int32),
        "pre_ids": np.full((n, L), -1, np.int64),
        "step_idx": np.zeros((n, 1), np.int64),
        "stop_flags": np.array([[False], [False], [False], [True]]),
        # v1: the running slice of seq_lens_this_time_buffer (real_bsz = 3).
        "seq_lens_this_time": np.full((REAL_BSZ, 1), PROMPT, np.int32),
        "stop_seqs": seqs,
        "stop_seqs_len": lens,
        "end_ids": np.array([EOS], np.int64),
        "seq_lens_encoder": np.array([[PROMPT]] * REAL_BSZ + [[0]], np.int32),
        "seq_lens_decoder": np.zeros((n, 1), np.int32),
        "not_need_stop": np.array([True]),
        "draft_tokens": np.zeros((n, D), np.int64),
        "actual_draft_token_nums": np.full(n, K, np.int32),
        "is_block_step": np.zeros(n, bool),
        "stop_nums": np.array([n], np.int64),
        "mask_rollback": np.zeros((n, 1), np.int32),
    }


def verify(s):
    """speculate_verify's effect in plain numpy (greedy, top-1 = TRUTH): returns the slots it ran."""
    ran = []
    for b in range(REAL_BSZ):
        if s["stop_flags"][b, 0]:
            continue
        ran.append(b)
        t = int(s["step_idx"][b, 0])
        n = int(s["seq_lens_this_time"][b, 0])
        acc = 1
        if s["seq_lens_encoder"][b, 0] == 0:  # decode: accept the drafts that match, plus one token
            while acc < n and s["draft_tokens"][b, acc] == TRUTH[b][t + acc - 1]:
                acc += 1
        tokens = list(TRUTH[b][t : t + acc])
        for i, token in enumerate(tokens):
            if token == EOS or t + i + 1 >= MAX_DEC_LEN[b]:
                tokens = tokens[:i] + [EOS]
                s["stop_flags"][b, 0] = True
                break
        s["accept_tokens"][b, : len(tokens)] = tokens
        s["accept_num"][b] = len(tokens)
        s["step_idx"][b, 0] = t + len(tokens)
    return ran


def propose(s):
    """The proposer's effect: K drafts after the last accepted token; this_time = D (0 when stopped)."""
    for b in range(REAL_BSZ):
        if s["stop_flags"][b, 0]:
            s["seq_lens_this_time"][b, 0] = 0
            continue
        t = int(s["step_idx"][b, 0])
        s["draft_tokens"][b, 1:] = TRUTH[b][t : t + K] if DRAFTS_RIGHT[b] else [999] * K
        s["seq_lens_this_time"][b, 0] = D


def run_chain(s):
    """Run the chain through fd_mtp.ops and fd_mtp.reference on copies of s; compare after every op.
    Returns the new state and the tokens save output streams (recorded after speculate_update)."""
    op_state = {k: to_paddle(v) for k, v in s.items()}
    ref_state = {k: v.copy() for k, v in s.items()}
    streamed = None
    for name, args in CHAIN:
        getattr(ops, name)(*[op_state[a] for a in args])
        getattr(reference, name)(*[ref_state[a] for a in args])
        for key in s:
            assert_same(
                to_numpy(op_state[key]), ref_state[key], f"{key} after {name} (op vs reference)"
            )
        if name == "speculate_update":
            streamed = [
                list(ref_state["accept_tokens"][b, : ref_state["accept_num"][b]])
                for b in range(MAX_BSZ)
            ]
    return ref_state, streamed


def test_chain_of_target_ops_over_several_steps():
    s = inserted()
    emitted = [[] for _ in range(REAL_BSZ)]  # every token streamed, per slot
    in_pre_ids = [
        [] for _ in range(REAL_BSZ)
    ]  # tokens of the steps the slot was still running after
    stopped_at = {}
    for step in range(1, 7):
        ran = verify(s)
        s, streamed = run_chain(s)
        for b in ran:
            emitted[b] += streamed[b]
            if s["stop_flags"][b, 0]:
                stopped_at.setdefault(b, step)
            else:
                in_pre_ids[b] += streamed[b]
        # pre_ids holds exactly the tokens emitted while running, in order, at columns 1..step_idx;
        # a request that stops writes nothing more (set_value only resets it).
        for b in range(REAL_BSZ):
            row = s["pre_ids"][b]
            assert row[0] == -1
            assert_same(
                row[1 : 1 + len(in_pre_ids[b])],
                np.array(in_pre_ids[b], np.int64),
                f"pre_ids[{b}] at step {step}",
            )
            assert (row[1 + len(in_pre_ids[b]) :] == -1).all(), (
                f"pre_ids[{b}] past the emitted tokens at step {step}"
            )
            if not s["stop_flags"][b, 0]:
                assert s["step_idx"][b, 0] == len(in_pre_ids[b])
                # KV positions: the prompt plus every token but the newest (computed next step).
                assert s["seq_lens_decoder"][b, 0] == PROMPT + len(in_pre_ids[b]) - 1
            else:
                assert s["accept_num"][b] == 0 and s["seq_lens_decoder"][b, 0] == 0
        n_stopped = int(s["stop_flags"][:REAL_BSZ].sum()) + (MAX_BSZ - REAL_BSZ)
        assert s["not_need_stop"][0] == (n_stopped < MAX_BSZ)
        propose(s)

    # Hand-written outcome. Slot 1: the stop sequence 203 204 ends before the third token of step 3
    # ([204, 205, 206] accepted after [.., 203]): 204 stays, 205 becomes EOS, 206 is dropped.
    assert emitted == [
        [100, 101, 102, 103, 104, EOS],
        [200, 201, 202, 203, 204, EOS],
        [300, 301, 302, 303, EOS],
    ]
    assert stopped_at == {0: 3, 1: 3, 2: 5}
    assert_same(
        s["pre_ids"][:, :6],
        np.array(
            ragged(
                [[-1, 100, 101, 102, 103], [-1, 200, 201, 202, 203], [-1, 300, 301, 302, 303], []],
                6,
            )
        ),
        "final pre_ids",
    )
    assert not s["not_need_stop"][0]
    assert s["stop_flags"].ravel().tolist() == [True] * MAX_BSZ
    # step_idx stays where verify put it (set_stop_value does not rewind it).
    assert s["step_idx"].ravel().tolist() == [6, 7, 5, 0]
