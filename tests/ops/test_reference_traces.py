"""Tests of the numpy references of the draft-model ops (fd_mtp/reference/draft.py) on hand cases.

The first group replays the worked traces of spec/ops.md §13 (v1, mixed role, prompt p0 p1 p2 p3)
with concrete token ids; the rest pins single behaviours of §6.1-6.6, quirks (§14) included.
Every check is exact (dtype, shape and values).
"""

import ast
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest
from mtp_step_cases import BLOCK_SIZE, CASES, K

from fd_mtp.reference import (
    draft_model_postprocess,
    draft_model_preprocess,
    draft_model_update,
    eagle_get_hidden_states,
    eagle_get_self_hidden_states,
    mtp_step_paddle,
)
from fd_mtp.testing.asserts import assert_exact

# Toy setup: max_model_len L (width of input_ids / pre_ids, and max_seq_len of the offsets).
L = 8
# Token ids of the traces. t* are target tokens, d* draft tokens (t2r / d2r: the rejected branch).
P0, P1, P2, P3 = 10, 11, 12, 13
T1, T2R, T3, T4 = 21, 22, 23, 24
D1, D2, D2R, D3 = 31, 32, 33, 34
EOS, EOS2 = 2, 3

# Fill value of the rows given as ragged lists (other row tensors must be written out in full).
ROW_FILL = {"pre_ids": -1, "input_ids": 0}


# ------------------------------------------------------------------------------------------------
# Helpers: arrays from Python lists, exact comparison, model states
# ------------------------------------------------------------------------------------------------
def rows(lists, width, fill=None, dtype=np.int64):
    """A [len(lists), width] array from ragged lists, padded with `fill` (None: rows must be full)."""
    out = np.full((len(lists), width), -1 if fill is None else fill, dtype=dtype)
    for b, row in enumerate(lists):
        assert fill is not None or len(row) == width, f"row {b} must have {width} entries: {row}"
        out[b, : len(row)] = row
    return out


def like(template, values, name):
    """`values` (Python lists) as an array of `template`'s dtype and shape.

    Per-request tensors ([B] or [B, 1]) take a flat list; row tensors ([B, W], W > 1) a list of rows.
    """
    if template.ndim == 2 and template.shape[1] > 1:
        return rows(values, template.shape[1], fill=ROW_FILL.get(name), dtype=template.dtype)
    return np.array(values, dtype=template.dtype).reshape(template.shape)


class State(SimpleNamespace):
    """One model's buffers by name."""

    def set(self, **fields):
        for name, values in fields.items():
            setattr(self, name, like(getattr(self, name), values, name))
        return self

    def expect(self, **expected):
        for name, values in expected.items():
            got = getattr(self, name)
            assert_exact(got, like(got, values, name), name)

    def snapshot(self):
        return {name: a.copy() for name, a in vars(self).items()}


def draft_state(batch, k, num_model_steps=1, **fields):
    """Proposer buffers (spec §3) with their initial values, then `fields`."""
    return State(
        draft_tokens=np.full((batch, k + 1), -1, np.int64),
        input_ids=np.zeros((batch, L), np.int64),
        stop_flags=np.ones((batch, 1), bool),
        seq_lens_this_time=np.zeros((batch, 1), np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        step_idx=np.zeros((batch, 1), np.int64),
        not_need_stop=np.zeros(1, bool),
        is_block_step=np.zeros((batch, 1), bool),
        batch_drop=np.zeros((batch, 1), bool),
        pre_ids=np.full((batch, L), -1, np.int64),
        mask_rollback=np.zeros((batch, 1), np.int32),
        recompute_token_num=np.full((batch, 1), num_model_steps - 1, np.int32),
    ).set(**fields)


def target_state(batch, k, **fields):
    """Target buffers read or written by the draft ops (spec §2), then `fields`."""
    return State(
        accept_tokens=np.zeros((batch, k + 1), np.int64),
        accept_num=np.zeros(batch, np.int32),
        seq_lens_this_time=np.zeros((batch, 1), np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        step_idx=np.zeros((batch, 1), np.int64),
        stop_flags=np.ones((batch, 1), bool),
        is_block_step=np.zeros(batch, bool),
        draft_tokens=np.zeros((batch, k + 1), np.int64),
        max_dec_len=np.full((batch, 1), 100, np.int64),
        eos_token_id=np.array([[EOS]], np.int64),
    ).set(**fields)


def output_cum_offsets(output_lens):
    """Spec §1.3: output_cum_offsets[b] = sum over j < b of (L - o_j)."""
    excl = np.concatenate([[0], np.cumsum([L - o for o in output_lens])[:-1]])
    return excl.astype(np.int32).reshape(-1, 1)


def run_preprocess(
    d, t, *, num_model_steps=1, truncate_first_token=True, splitwise_prefill=False, v1=True
):
    draft_model_preprocess(
        d.draft_tokens,
        d.input_ids,
        d.stop_flags,
        d.seq_lens_this_time,
        d.seq_lens_encoder,
        d.seq_lens_decoder,
        d.step_idx,
        d.not_need_stop,
        d.is_block_step,
        d.batch_drop,
        d.pre_ids,
        d.mask_rollback,
        d.recompute_token_num,
        t.accept_tokens,
        t.accept_num,
        t.seq_lens_this_time,
        t.seq_lens_encoder,
        t.seq_lens_decoder,
        t.step_idx,
        t.stop_flags,
        t.is_block_step,
        t.draft_tokens,
        num_model_steps,
        truncate_first_token,
        splitwise_prefill,
        v1,
    )


def run_update(d, t, next_tokens, output_lens, *, substep=0, prefill_one_step_stop=False):
    """draft_model_update with one sampled token per output row; output_lens = rows per request."""
    assert len(next_tokens) == sum(output_lens)
    draft_model_update(
        np.array(next_tokens, np.int64),
        d.draft_tokens,
        d.pre_ids,
        d.seq_lens_this_time,
        d.seq_lens_encoder,
        d.seq_lens_decoder,
        d.step_idx,
        output_cum_offsets(output_lens),
        d.stop_flags,
        d.not_need_stop,
        t.max_dec_len,
        t.eos_token_id,
        t.draft_tokens,
        L,
        substep,
        prefill_one_step_stop=prefill_one_step_stop,
    )


def run_postprocess(t):
    draft_model_postprocess(t.draft_tokens, t.seq_lens_this_time, t.seq_lens_encoder, t.stop_flags)


def run_eagle_hidden(hidden, d, t):
    return eagle_get_hidden_states(
        hidden,
        d.seq_lens_this_time,
        d.seq_lens_encoder,
        d.seq_lens_decoder,
        d.stop_flags,
        t.accept_num,
        t.seq_lens_this_time,
        t.seq_lens_encoder,
        1,
    )


def run_self_hidden(hidden, last_seq_lens_this_time, d):
    return eagle_get_self_hidden_states(
        hidden, last_seq_lens_this_time, d.seq_lens_this_time, d.step_idx
    )


def numbered_rows(n, hidden=2, dtype=np.float32):
    """[n, hidden] rows whose values say their row index: row r is (r*10, r*10 + 1, ...)."""
    return (np.arange(n)[:, None] * 10 + np.arange(hidden)[None, :]).astype(dtype)


# ------------------------------------------------------------------------------------------------
# §13 trace, K = 1, num_model_steps = 1. Slot 1 of the batch is empty (stopped everywhere).
# ------------------------------------------------------------------------------------------------
def k1_after_target_prefill():
    """State after trace step 2: the target sampled t1 from the prompt p0..p3."""
    draft = draft_state(
        2,
        k=1,
        input_ids=[[P1, P2, P3], []],
        seq_lens_encoder=[4, 0],
        seq_lens_this_time=[4, 0],
        stop_flags=[False, True],
    )
    target = target_state(
        2,
        k=1,
        accept_tokens=[[T1, 0], [0, 0]],
        accept_num=[1, 0],
        seq_lens_this_time=[4, 0],
        seq_lens_decoder=[4, 0],
        step_idx=[1, 0],
        stop_flags=[False, True],
        draft_tokens=[[T1, 0], [0, 7]],
    )
    return draft, target


def test_k1_step3_preprocess_prefill_puts_t1_in_the_last_draft_prompt_slot():
    draft, target = k1_after_target_prefill()
    run_preprocess(draft, target)
    draft.expect(
        input_ids=[[P1, P2, P3, T1], []],
        pre_ids=[[T1], []],
        seq_lens_this_time=[4, 0],
        seq_lens_encoder=[4, 0],
        seq_lens_decoder=[0, 0],
        step_idx=[0, 0],
        stop_flags=[False, True],
        draft_tokens=[[-1, -1], [-1, -1]],
        not_need_stop=[True],
    )
    # Step 1 of mode B clears the drafts of every row, the empty slot's included.
    target.expect(draft_tokens=[[T1, -1], [0, -1]])


def test_k1_step3_eagle_hidden_states_pairs_draft_position_j_with_target_row_j():
    draft, target = k1_after_target_prefill()
    run_preprocess(draft, target)
    hidden = numbered_rows(4)  # target rows of p0..p3
    assert_exact(run_eagle_hidden(hidden, draft, target), hidden, "target_hidden_states")


def test_k1_step3_substep0_update_proposes_d1_and_postprocess_sends_two_tokens():
    draft, target = k1_after_target_prefill()
    run_preprocess(draft, target)
    run_update(draft, target, [D1], output_lens=[1, 0])
    draft.expect(
        seq_lens_decoder=[4, 0],
        seq_lens_encoder=[0, 0],
        step_idx=[1, 0],
        pre_ids=[[T1, D1], []],
        draft_tokens=[[D1, -1], [-1, -1]],
        seq_lens_this_time=[1, 0],
        stop_flags=[False, True],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T1, D1], [0, -1]])
    run_postprocess(target)
    target.expect(seq_lens_this_time=[2, 0])


def k1_after_target_verify_of_d1():
    """State after trace step 4, one request per outcome: 0 accepts d1 (+ t3), 1 rejects it (t2')."""
    draft = draft_state(
        2,
        k=1,
        input_ids=[[P1, P2, P3, T1]] * 2,
        seq_lens_decoder=[4, 4],
        step_idx=[1, 1],
        seq_lens_this_time=[1, 1],
        stop_flags=[False, False],
        pre_ids=[[T1, D1]] * 2,
        draft_tokens=[[D1, -1]] * 2,
    )
    target = target_state(
        2,
        k=1,
        accept_tokens=[[D1, T3], [T2R, 0]],
        accept_num=[2, 1],
        seq_lens_this_time=[2, 2],
        seq_lens_decoder=[6, 5],
        step_idx=[3, 2],
        stop_flags=[False, False],
        draft_tokens=[[T3, D1], [T2R, D1]],
    )
    return draft, target


def test_k1_step5_preprocess_decode_takes_accepted_tokens_without_rewind():
    draft, target = k1_after_target_verify_of_d1()
    run_preprocess(draft, target)
    draft.expect(
        seq_lens_decoder=[4, 4],
        step_idx=[1, 1],
        draft_tokens=[[D1, T3], [T2R, -1]],
        pre_ids=[[T1, D1, T3], [T1, T2R]],
        seq_lens_this_time=[2, 1],
        mask_rollback=[0, 0],
        recompute_token_num=[0, 0],
        stop_flags=[False, False],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T3, -1], [T2R, -1]])


def test_k1_step5_eagle_hidden_states_keeps_the_rows_of_accepted_tokens_only():
    draft, target = k1_after_target_verify_of_d1()
    run_preprocess(draft, target)
    hidden = numbered_rows(4)  # rows: t1@4, d1@5 of request 0; t1@4, d1@5 of request 1
    assert_exact(run_eagle_hidden(hidden, draft, target), hidden[[0, 1, 2]], "target_hidden_states")


def test_k1_step5_update_decode_takes_each_requests_last_row():
    draft, target = k1_after_target_verify_of_d1()
    run_preprocess(draft, target)
    run_update(draft, target, [99, D2, D2R], output_lens=[2, 1])
    draft.expect(
        seq_lens_decoder=[6, 5],
        step_idx=[3, 2],
        pre_ids=[[T1, D1, T3, D2], [T1, T2R, D2R]],
        draft_tokens=[[D2, T3], [D2R, -1]],
        seq_lens_this_time=[1, 1],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T3, D2], [T2R, D2R]])
    run_postprocess(target)
    target.expect(seq_lens_this_time=[2, 2])


# ------------------------------------------------------------------------------------------------
# §13 trace, K = 2, num_model_steps = 2 (one request).
# ------------------------------------------------------------------------------------------------
def test_k2_two_substeps_after_prefill_build_target_row_t1_d1_d2():
    draft = draft_state(
        1,
        k=2,
        num_model_steps=2,
        input_ids=[[P1, P2, P3]],
        seq_lens_encoder=[4],
        seq_lens_this_time=[4],
        stop_flags=[False],
    )
    target = target_state(
        1,
        k=2,
        accept_tokens=[[T1, 0, 0]],
        accept_num=[1],
        seq_lens_this_time=[4],
        seq_lens_decoder=[4],
        step_idx=[1],
        stop_flags=[False],
        draft_tokens=[[T1, 0, 0]],
    )
    run_preprocess(draft, target, num_model_steps=2)
    draft.expect(input_ids=[[P1, P2, P3, T1]], seq_lens_this_time=[4], recompute_token_num=[1])
    target.expect(draft_tokens=[[T1, -1, -1]])

    # Substep 0 (prefill: one output row).
    last_seq_lens_this_time = draft.seq_lens_this_time.copy()
    run_update(draft, target, [D1], output_lens=[1], substep=0)
    draft.expect(seq_lens_decoder=[4], step_idx=[1], pre_ids=[[T1, D1]], seq_lens_this_time=[1])
    target.expect(draft_tokens=[[T1, D1, -1]])

    # The request "came from prefill" (step_idx == 1): its single output row is kept.
    hidden = numbered_rows(1)
    own = run_self_hidden(hidden, last_seq_lens_this_time, draft)
    assert_exact(own, hidden, "self hidden, substep 0")

    # Substep 1 feeds d1 at position 4 (decode: one row).
    run_update(draft, target, [D2], output_lens=[1], substep=1)
    draft.expect(
        seq_lens_decoder=[5],
        step_idx=[2],
        pre_ids=[[T1, D1, D2]],
        draft_tokens=[[D2, -1, -1]],
        seq_lens_this_time=[1],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T1, D1, D2]])
    run_postprocess(target)
    target.expect(seq_lens_this_time=[3])


def k2_after_target_accepts_all():
    """The target accepted d1 d2 and added the bonus t4 (acc 3, target step_idx 4, dec 7)."""
    draft = draft_state(
        1,
        k=2,
        num_model_steps=2,
        input_ids=[[P1, P2, P3, T1]],
        seq_lens_decoder=[5],
        step_idx=[2],
        seq_lens_this_time=[1],
        stop_flags=[False],
        pre_ids=[[T1, D1, D2]],
        draft_tokens=[[D2, -1, -1]],
    )
    target = target_state(
        1,
        k=2,
        accept_tokens=[[D1, D2, T4]],
        accept_num=[3],
        seq_lens_this_time=[3],
        seq_lens_decoder=[7],
        step_idx=[4],
        stop_flags=[False],
        draft_tokens=[[T4, D1, D2]],
    )
    return draft, target


def test_k2_decode_preprocess_rewinds_one_position_to_recompute_it_with_target_hidden():
    draft, target = k2_after_target_accepts_all()
    run_preprocess(draft, target, num_model_steps=2)
    draft.expect(
        seq_lens_decoder=[4],
        step_idx=[1],
        mask_rollback=[1],
        recompute_token_num=[1],
        draft_tokens=[[D1, D2, T4]],
        pre_ids=[[T1, D1, D2, T4]],
        seq_lens_this_time=[3],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T4, -1, -1]])
    hidden = numbered_rows(3)  # target rows of t1@4, d1@5, d2@6: all accepted
    assert_exact(run_eagle_hidden(hidden, draft, target), hidden, "target_hidden_states")


def test_k2_decode_substep0_then_self_hidden_takes_the_requests_last_row():
    draft, target = k2_after_target_accepts_all()
    run_preprocess(draft, target, num_model_steps=2)
    last_seq_lens_this_time = draft.seq_lens_this_time.copy()
    run_update(draft, target, [97, 98, D3], output_lens=[3], substep=0)
    draft.expect(
        seq_lens_decoder=[7], step_idx=[4], pre_ids=[[T1, D1, D2, T4, D3]], seq_lens_this_time=[1]
    )
    target.expect(draft_tokens=[[T4, D3, -1]])
    hidden = numbered_rows(3)
    own = run_self_hidden(hidden, last_seq_lens_this_time, draft)
    assert_exact(own, hidden[[2]], "self hidden")


# ------------------------------------------------------------------------------------------------
# draft_model_preprocess (§6.1)
# ------------------------------------------------------------------------------------------------
def running_decode(batch=1, k=2, num_model_steps=2, **draft_fields):
    """A draft decode request (dec 5, step 2) and its target after accepting [t3, t4] of 3 rows."""
    fields = dict(
        seq_lens_decoder=[5] * batch,
        step_idx=[2] * batch,
        seq_lens_this_time=[1] * batch,
        stop_flags=[False] * batch,
    )
    fields.update(draft_fields)
    draft = draft_state(batch, k, num_model_steps, **fields)
    target = target_state(
        batch,
        k,
        accept_tokens=[[T3, T4, 0]] * batch,
        accept_num=[2] * batch,
        seq_lens_this_time=[3] * batch,
        seq_lens_decoder=[10] * batch,
        step_idx=[6] * batch,
        stop_flags=[False] * batch,
        draft_tokens=[[T4, D1, D2]] * batch,
    )
    return draft, target


def test_preprocess_clears_target_drafts_of_every_row_even_stopped_or_dropped():
    draft, target = running_decode(3, batch_drop=[False, False, True])
    target.set(stop_flags=[False, True, False])
    run_preprocess(draft, target, num_model_steps=2)
    target.expect(draft_tokens=[[T4, -1, -1]] * 3)
    draft.expect(
        stop_flags=[False, True, True],
        seq_lens_this_time=[2, 0, 0],
        seq_lens_decoder=[4, 0, 0],
        seq_lens_encoder=[0, 0, 0],
    )


def test_preprocess_draft_stop_recovery_subtracts_target_query_length_not_accept_num():
    # The draft had stopped (it proposed EOS) while the target went on: 3 rows verified, 2 accepted.
    draft, target = running_decode(stop_flags=[True], recompute_token_num=[1], mask_rollback=[0])
    run_preprocess(draft, target, num_model_steps=2)
    draft.expect(
        stop_flags=[False],
        seq_lens_decoder=[10 - 3],
        step_idx=[6 - 3],
        recompute_token_num=[1],  # untouched on this branch
        mask_rollback=[0],
        draft_tokens=[[T3, T4, -1]],
        pre_ids=[[-1, -1, -1, -1, T3, T4]],  # at target step_idx - accept_num + i
        seq_lens_this_time=[2],
        not_need_stop=[True],
    )


def test_preprocess_reads_target_query_length_before_writing_a_shared_this_time_array():
    draft, target = running_decode(stop_flags=[True])
    draft.seq_lens_this_time[...] = 3
    target.seq_lens_this_time = (
        draft.seq_lens_this_time
    )  # the same array, as the upstream test passes
    run_preprocess(draft, target, num_model_steps=2)
    draft.expect(seq_lens_decoder=[10 - 3], step_idx=[6 - 3], seq_lens_this_time=[2])


def test_preprocess_running_decode_rewinds_by_recompute_token_num_and_resets_it():
    draft, target = running_decode(recompute_token_num=[0], mask_rollback=[2])
    run_preprocess(draft, target, num_model_steps=3)
    draft.expect(seq_lens_decoder=[5], step_idx=[2], mask_rollback=[2], recompute_token_num=[2])
    run_preprocess(draft, target, num_model_steps=3)
    draft.expect(seq_lens_decoder=[3], step_idx=[0], mask_rollback=[4], recompute_token_num=[2])


@pytest.mark.parametrize(
    "v1, draft_is_block_step, draft_batch_drop",
    [
        pytest.param(True, [True], [False], id="v1-marks-is_block_step"),
        pytest.param(False, [False], [True], id="v0-sets-batch_drop"),
    ],
)
def test_preprocess_target_block_step_stops_the_draft(v1, draft_is_block_step, draft_batch_drop):
    draft, target = running_decode()
    target.set(stop_flags=[True], is_block_step=[True])
    run_preprocess(draft, target, num_model_steps=2, v1=v1)
    draft.expect(
        stop_flags=[True],
        is_block_step=draft_is_block_step,
        batch_drop=draft_batch_drop,
        seq_lens_this_time=[0],
        seq_lens_decoder=[0],
        seq_lens_encoder=[0],
        step_idx=[2],
        not_need_stop=[False],
    )


def test_preprocess_v1_clears_draft_block_step_once_the_target_recovered():
    draft, target = running_decode(stop_flags=[True], is_block_step=[True])
    run_preprocess(draft, target, num_model_steps=2, v1=True)
    draft.expect(is_block_step=[False], stop_flags=[False], seq_lens_this_time=[2])


def test_preprocess_v0_keeps_draft_block_step_and_a_dropped_request_stays_off():
    draft, target = running_decode(
        2, stop_flags=[True, False], is_block_step=[True, False], batch_drop=[False, True]
    )
    run_preprocess(draft, target, num_model_steps=2, v1=False)
    draft.expect(
        is_block_step=[True, False],
        batch_drop=[False, True],
        stop_flags=[False, True],
        seq_lens_this_time=[2, 0],
        seq_lens_decoder=[7, 0],
    )


def test_preprocess_without_truncation_appends_the_first_token_after_the_prompt():
    draft, target = k1_after_target_prefill()
    run_preprocess(draft, target, truncate_first_token=False)
    draft.expect(input_ids=[[P1, P2, P3, 0, T1], []], seq_lens_this_time=[5, 0], pre_ids=[[T1], []])


def test_preprocess_splitwise_prefill_runs_prefills_only_and_leaves_target_drafts():
    # Request 0 prefills 3 tokens; request 1 decodes (the target runs it) but mode A stops it.
    draft = draft_state(
        2,
        k=1,
        num_model_steps=2,
        input_ids=[[P1, P2], [P1]],
        seq_lens_encoder=[3, 0],
        seq_lens_decoder=[0, 6],
        seq_lens_this_time=[3, 1],
        stop_flags=[False, False],
        step_idx=[0, 3],
        mask_rollback=[0, 1],
    )
    target = target_state(
        2,
        k=1,
        accept_tokens=[[T1, 0], [T3, T4]],
        accept_num=[1, 2],
        seq_lens_this_time=[3, 2],
        seq_lens_decoder=[3, 8],
        step_idx=[1, 5],
        stop_flags=[False, False],
        draft_tokens=[[T1, 0], [T4, D1]],
    )
    run_preprocess(draft, target, num_model_steps=2, splitwise_prefill=True)
    draft.expect(
        input_ids=[[P1, P2, T1], [P1]],
        seq_lens_this_time=[3, 0],
        seq_lens_encoder=[3, 0],
        seq_lens_decoder=[0, 0],
        step_idx=[0, 3],
        stop_flags=[False, True],
        pre_ids=[[], []],
        mask_rollback=[0, 1],
        recompute_token_num=[1, 1],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T1, 0], [T4, D1]])


def test_preprocess_not_need_stop_is_false_when_no_request_runs():
    draft, target = running_decode(2)
    draft.not_need_stop[0] = True
    target.set(stop_flags=[True, True])
    run_preprocess(draft, target, num_model_steps=2)
    draft.expect(not_need_stop=[False], stop_flags=[True, True])


# ------------------------------------------------------------------------------------------------
# draft_model_update (§6.3)
# ------------------------------------------------------------------------------------------------
def decoding(batch, k=2, q=2, step=3, **fields):
    """Draft decode requests after preprocess: q input tokens each, dec 5."""
    draft = draft_state(
        batch,
        k,
        seq_lens_decoder=[5] * batch,
        step_idx=[step] * batch,
        seq_lens_this_time=[q] * batch,
        stop_flags=[False] * batch,
        draft_tokens=[[T3, T4, -1]] * batch,
        **fields,
    )
    target = target_state(batch, k, draft_tokens=[[T4, -1, -1]] * batch)
    target.eos_token_id = np.array([[EOS], [EOS2]], np.int64)  # [E, 1], E = 2
    return draft, target


def test_update_proposed_eos_stays_in_the_draft_row_and_stops_the_request():
    draft, target = decoding(1)
    run_update(draft, target, [96, EOS2], output_lens=[2])  # EOS2: any of end_ids counts
    draft.expect(
        draft_tokens=[[EOS2, T4, -1]],
        stop_flags=[True],
        seq_lens_this_time=[0],
        seq_lens_decoder=[7],
        step_idx=[5],
        pre_ids=[[-1, -1, -1, -1, -1, EOS2]],
        not_need_stop=[False],
    )
    target.expect(draft_tokens=[[T4, EOS2, -1]])


def test_update_max_dec_len_writes_first_end_id_at_column_q_minus_1_not_0():
    draft, target = decoding(1, q=2, step=3)
    target.set(max_dec_len=[5])
    run_update(draft, target, [96, D2], output_lens=[2])
    draft.expect(
        draft_tokens=[[D2, EOS, -1]], stop_flags=[True], seq_lens_this_time=[0], step_idx=[5]
    )
    target.expect(draft_tokens=[[T4, EOS, -1]])


def test_update_request_stopped_at_entry_gets_minus_one_and_counts_as_stopped():
    # Request 0 stopped at entry (with a stale encoder length), request 1 prefills.
    draft = draft_state(
        2,
        k=1,
        seq_lens_encoder=[3, 2],
        seq_lens_this_time=[0, 2],
        stop_flags=[True, False],
        draft_tokens=[[D1, T1], [-1, -1]],
    )
    target = target_state(2, k=1, draft_tokens=[[T1, D1], [T3, -1]])
    run_update(draft, target, [D2], output_lens=[0, 1])
    draft.expect(
        draft_tokens=[[-1, T1], [D2, -1]],
        seq_lens_encoder=[0, 0],
        seq_lens_decoder=[0, 2],
        seq_lens_this_time=[0, 1],
        step_idx=[0, 1],
        pre_ids=[[], [-1, D2]],
        not_need_stop=[True],
    )
    target.expect(draft_tokens=[[T1, -1], [T3, D2]])
    # With every request stopped at entry, not_need_stop turns False.
    draft.stop_flags[1] = True
    run_update(draft, target, [], output_lens=[0, 0])
    draft.expect(not_need_stop=[False], draft_tokens=[[-1, T1], [-1, -1]])


def test_update_prefill_one_step_stop_stops_after_the_first_draft_token():
    draft, target = k1_after_target_prefill()
    run_preprocess(draft, target)
    run_update(draft, target, [D1], output_lens=[1, 0], prefill_one_step_stop=True)
    draft.expect(
        draft_tokens=[[D1, -1], [-1, -1]],
        stop_flags=[True, True],
        seq_lens_this_time=[0, 0],
        not_need_stop=[False],
    )
    target.expect(draft_tokens=[[T1, D1], [0, -1]])


def test_update_mixed_batch_finds_each_requests_rows_through_output_cum_offsets():
    # Requests: decode q=3, empty slot, prefill of 4, decode q=1.
    draft = draft_state(
        4,
        k=2,
        seq_lens_this_time=[3, 0, 4, 1],
        seq_lens_encoder=[0, 0, 4, 0],
        seq_lens_decoder=[5, 0, 0, 9],
        step_idx=[3, 0, 0, 4],
        stop_flags=[False, True, False, False],
    )
    target = target_state(4, k=2, draft_tokens=[[-1, -1, -1]] * 4)
    run_update(draft, target, [90, 91, 92, 93, 94], output_lens=[3, 0, 1, 1], substep=1)
    draft.expect(
        draft_tokens=[[92, -1, -1], [-1, -1, -1], [93, -1, -1], [94, -1, -1]],
        seq_lens_decoder=[8, 0, 4, 10],
        step_idx=[6, 0, 1, 5],
        seq_lens_this_time=[1, 0, 1, 1],
    )
    target.expect(draft_tokens=[[-1, -1, 92], [-1, -1, -1], [-1, -1, 93], [-1, -1, 94]])


# ------------------------------------------------------------------------------------------------
# draft_model_postprocess (§6.5)
# ------------------------------------------------------------------------------------------------
def test_postprocess_counts_every_non_minus_one_entry_of_the_row_not_a_prefix():
    target = target_state(
        4,
        k=2,
        draft_tokens=[[T3, -1, D2], [T3, D1, D2], [T3, D1, -1], [T1, -1, -1]],
        stop_flags=[False, False, True, False],
        seq_lens_encoder=[0, 0, 0, 5],
        seq_lens_this_time=[9, 9, 9, 5],
    )
    run_postprocess(target)
    target.expect(seq_lens_this_time=[2, 3, 0, 5])


# ------------------------------------------------------------------------------------------------
# eagle_get_hidden_states (§6.2) / eagle_get_self_hidden_states (§6.4)
# ------------------------------------------------------------------------------------------------
def test_eagle_hidden_states_mixed_batch_gathers_prefill_and_accepted_rows():
    # 0: draft prefill of 3; 1: target ran 2 rows (accepting 1), draft does not run: all 2 skipped;
    # 2: empty slot; 3: decode, 1 of 3 rows accepted; 4: decode, 2 of 2 accepted.
    draft = draft_state(
        5, k=2, seq_lens_encoder=[3, 0, 0, 0, 0], seq_lens_this_time=[3, 0, 0, 1, 2]
    )
    target = target_state(5, k=2, seq_lens_this_time=[3, 2, 0, 3, 2], accept_num=[1, 1, 0, 1, 2])
    hidden = numbered_rows(10, hidden=4, dtype=np.float16)
    assert_exact(
        run_eagle_hidden(hidden, draft, target), hidden[[0, 1, 2, 5, 8, 9]], "target_hidden_states"
    )


def test_eagle_hidden_states_is_a_dtype_agnostic_gather_and_may_be_empty():
    draft = draft_state(2, k=1, seq_lens_this_time=[0, 2])
    target = target_state(2, k=1, seq_lens_this_time=[2, 2], accept_num=[2, 1])
    bf16_bits = np.array(
        [[0x3F80, 0x4000], [0x4040, 0x4080], [0xBF80, 0x0000], [0x7F80, 0xFF80]], np.uint16
    )
    assert_exact(run_eagle_hidden(bf16_bits, draft, target), bf16_bits[[2]], "uint16 rows")
    draft.set(seq_lens_this_time=[0, 0])
    assert_exact(run_eagle_hidden(bf16_bits, draft, target), np.zeros((0, 2), np.uint16), "no rows")


def test_self_hidden_states_mixed_batch_takes_one_row_per_running_request():
    # this_time / step_idx after the update, last = this_time before it:
    # 0 came from prefill (1 row); 1 decode of 3 rows; 2 stopped after prefill (1 row);
    # 3 empty slot; 4 stopped right after insertion (step 1, no rows); 5 stopped decode of 2 rows;
    # 6 decode of 2 rows.
    last = np.array([[5], [3], [4], [0], [0], [2], [2]], np.int32)
    this_time = np.array([[1], [1], [0], [0], [0], [0], [1]], np.int32)
    step_idx = np.array([[1], [6], [1], [0], [1], [7], [9]], np.int64)
    hidden = numbered_rows(9)
    own = eagle_get_self_hidden_states(hidden, last, this_time, step_idx)
    assert_exact(own, hidden[[0, 3, 8]], "self hidden")


def test_self_hidden_states_quirk_decode_with_step_idx_1_is_read_as_one_prefill_row():
    last = np.array([2, 1], np.int32)
    this_time = np.array([1, 1], np.int32)
    step_idx = np.array([1, 5], np.int64)
    hidden = numbered_rows(3)
    own = eagle_get_self_hidden_states(hidden, last, this_time, step_idx)
    assert_exact(own, hidden[[0, 1]], "self hidden (misaligned, as upstream)")


# ------------------------------------------------------------------------------------------------
# mtp_step_paddle (§6.6): the hand cases of mtp_step_cases.py, then two refusals (NB = 4).
# ------------------------------------------------------------------------------------------------


def mtp_state(**fields):
    batch = len(fields["seq_lens_decoder"])
    state = State(
        base_model_stop_flags=np.zeros((batch, 1), bool),
        stop_flags=np.zeros((batch, 1), bool),
        batch_drop=np.zeros((batch, 1), bool),
        seq_lens_this_time=np.full((batch, 1), K + 1, np.int32),
        seq_lens_encoder=np.zeros((batch, 1), np.int32),
        seq_lens_decoder=np.zeros((batch, 1), np.int32),
        block_tables=np.full((batch, len(fields["block_tables"][0])), -1, np.int32),
        encoder_block_lens=np.zeros(batch, np.int32),
        used_list_len=np.zeros(batch, np.int32),
        free_list=np.zeros(len(fields["free_list"]), np.int32),
        free_list_len=np.zeros(1, np.int32),
    )
    return state.set(**fields)


def run_mtp_step(s):
    mtp_step_paddle(
        s.base_model_stop_flags,
        s.stop_flags,
        s.batch_drop,
        s.seq_lens_this_time,
        s.seq_lens_encoder,
        s.seq_lens_decoder,
        s.block_tables,
        s.encoder_block_lens,
        s.used_list_len,
        s.free_list,
        s.free_list_len,
        BLOCK_SIZE,
        K,
    )


@pytest.mark.parametrize("inputs, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_mtp_step_hand_case(inputs, expected):
    s = mtp_state(**inputs)
    run_mtp_step(s)
    s.expect(**expected)


def assert_mtp_step_refuses_free_list(s):
    """mtp_step_paddle on state ``s`` raises a ValueError naming free_list and changes nothing."""
    before = s.snapshot()
    with pytest.raises(ValueError, match="free_list"):
        run_mtp_step(s)
    for name, array in before.items():
        assert_exact(getattr(s, name), array, name)


def test_mtp_step_raises_instead_of_spinning_when_nothing_is_preemptible_and_changes_nothing():
    # Phase 1 would free one block, two requests need one, and no running request holds any.
    s = mtp_state(
        base_model_stop_flags=[True, False, False],
        seq_lens_decoder=[0, 2, 2],
        block_tables=[[5, 20, -1, -1], [6, -1, -1, -1], [7, -1, -1, -1]],
        encoder_block_lens=[1, 1, 1],
        used_list_len=[1, 0, 0],
        free_list=[0, 0],
        free_list_len=[0],
    )
    assert_mtp_step_refuses_free_list(s)


def test_mtp_step_raises_when_freed_blocks_do_not_fit_in_the_free_list_and_changes_nothing():
    s = mtp_state(
        base_model_stop_flags=[True],
        seq_lens_decoder=[0],
        block_tables=[[5, 20, -1, -1]],
        encoder_block_lens=[1],
        used_list_len=[1],
        free_list=[40, 41],
        free_list_len=[2],
    )
    assert_mtp_step_refuses_free_list(s)


# ------------------------------------------------------------------------------------------------
# Module hygiene
# ------------------------------------------------------------------------------------------------
def test_reference_modules_import_only_numpy():
    package = pathlib.Path(__file__).resolve().parents[2] / "fd_mtp" / "reference"
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level > 0 else [node.module]
            else:
                continue
            assert all(name.split(".")[0] == "numpy" for name in names), (
                f"{path.name} imports {names}"
            )
