"""Tests of fd_mtp.ops.speculate_verify (spec ops.md §5.7, §9.1, §13, §14 items 1, 7-10).

Pyramid (style.md item 8): named hand cases with exact expected arrays for every strategy and
every §5.7 rule (including each branch of the top-2 window rule), the §13 K=1 / K=2 traces, the
op against its numpy reference on an odd-size grid and on Hypothesis batches (every strategy,
seed/offset fixed), invariants, two bounded statistical tests (TOPP follows the renormalised
top-p candidates; "rejection" emits tokens distributed as the target p), determinism and the
default counter, environment defaults, Philox4x32-10 known answers (numpy and C++), and bad input
(ValueError naming the argument, nothing written).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from util import BATCH_GRID, assert_same, to_numpy, to_paddle

import fd_mtp.ops as ops
import fd_mtp.reference as reference
from fd_mtp.ops._loader import CALLS
from fd_mtp.reference.verify import philox4x32_10, philox_uniform
from fd_mtp.testing.op_inputs import positional

L = 8  # max_seq_len of the offsets in the hand cases
EOS, EOS2 = 2, 3
NAMES = tuple(positional("speculate_verify")[:18])  # the tensors, from the schema
WRITTEN = ("accept_tokens", "accept_num", "step_idx", "stop_flags")
STRATEGY_NAMES = ("topp", "topk", "target_match", "greedy", "rejection")
STALE = 77  # initial accept_tokens entries: untouched columns keep it


# ------------------------------------------------------------------------------------------------
# Batch builders
# ------------------------------------------------------------------------------------------------
def build(reqs, C=3, width=None, V=8, probs=False, draft_probs=False, column=False):
    """Every tensor input from a list of request dicts.

    Request keys: draft (row, col 0 = last token), n (default len(draft)), enc, step, max_dec,
    stop, block, topp, accept_num; per output row: cands (verify_tokens rows), scores, acl,
    sampled, p (target_probs rows), q (draft_probs rows). Output rows: 1 for a prefill, n for a
    decode, 0 for a stopped / block-stepped request (spec §1.3 / §5.2).
    """
    bsz = len(reqs)
    width = width or max(max(len(r.get("draft", [0])) for r in reqs), 1)
    per = (bsz, 1) if column else (bsz,)
    rows, outs = [], []
    for r in reqs:
        n = r.get("n", len(r.get("draft", [0])))
        o = 0 if (r.get("stop") or r.get("block")) else (1 if r.get("enc", 0) else n)
        outs.append(o)
        for k in range(o):
            rows.append(
                dict(
                    cands=r["cands"][k],
                    scores=r.get("scores", [[1.0] + [0.0] * (C - 1)] * o)[k],
                    acl=r.get("acl", [1] * o)[k],
                    sampled=r.get("sampled", [0] * o)[k],
                    p=r["p"][k] if "p" in r else None,
                    q=r["q"][k] if "q" in r else None,
                )
            )
    T = len(rows)
    d = {
        "sampled_token_ids": np.array([[x["sampled"]] for x in rows], np.int64).reshape(T, 1),
        "accept_tokens": np.full((bsz, width), STALE, np.int64),
        "accept_num": np.array([r.get("accept_num", 9) for r in reqs], np.int32),
        "step_idx": np.array([r.get("step", 10) for r in reqs], np.int64).reshape(per),
        "stop_flags": np.array([bool(r.get("stop")) for r in reqs]).reshape(per),
        "seq_lens_encoder": np.array([r.get("enc", 0) for r in reqs], np.int32).reshape(per),
        "seq_lens_decoder": np.full(per, 5, np.int32),
        "draft_tokens": np.full((bsz, width), -1, np.int64),
        "seq_lens_this_time": np.array(
            [r.get("n", len(r.get("draft", [0]))) for r in reqs], np.int32
        ).reshape(per),
        "verify_tokens": np.zeros((T, C), np.int64),
        "verify_scores": np.zeros((T, C), np.float32),
        "max_dec_len": np.array([r.get("max_dec", 100) for r in reqs], np.int64).reshape(per),
        "end_tokens": np.array([EOS, EOS2], np.int64),
        "is_block_step": np.array([bool(r.get("block")) for r in reqs]),
        "output_cum_offsets": np.concatenate([[0], np.cumsum([L - o for o in outs])[:-1]])
        .astype(np.int32)
        .reshape(per),
        "actual_candidate_len": np.array([x["acl"] for x in rows], np.int32),
        "actual_draft_token_nums": np.full(bsz, width - 1, np.int32),
        "topp": np.array([r.get("topp", 0.5) for r in reqs], np.float32).reshape(per),
    }
    for b, r in enumerate(reqs):
        draft = r.get("draft", [])
        d["draft_tokens"][b, : len(draft)] = draft
    for t, x in enumerate(rows):
        d["verify_tokens"][t, : len(x["cands"])] = x["cands"]
        d["verify_scores"][t, : len(x["scores"])] = x["scores"]
    kw = {}
    if probs:
        kw["target_probs"] = np.array([x["p"] for x in rows], np.float32).reshape(T, V)
    if draft_probs:
        kw["draft_probs"] = np.array([x["q"] for x in rows], np.float32).reshape(T, V)
    return d, kw


def attrs(
    max_seq_len=L, verify_window=2, enable_topp=True, benchmark_mode=False, accept_all_drafts=False
):
    return [max_seq_len, verify_window, enable_topp, benchmark_mode, accept_all_drafts]


def run_op(d, attr=None, **kw):
    """Run the op on paddle copies; returns the arrays after the call (numpy)."""
    args = [to_paddle(d[n]) for n in NAMES] + (attr or attrs())
    kw = {k: to_paddle(v) for k, v in kw.items()}
    kw.setdefault("seed", 1)
    kw.setdefault("offset", 2)
    ops.speculate_verify(*args, **kw)
    return {n: to_numpy(a) for n, a in zip(NAMES, args)}


def run_ref(d, attr=None, **kw):
    d = {k: v.copy() for k, v in d.items()}
    kw = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    kw.setdefault("seed", 1)
    kw.setdefault("offset", 2)
    reference.speculate_verify(*[d[n] for n in NAMES], *(attr or attrs()), **kw)
    return d


def run_pair(d, attr=None, **kw):
    got, want = run_op(d, attr, **kw), run_ref(d, attr, **kw)
    for n in NAMES:
        assert_same(got[n], want[n], f"{n} (op vs reference)")
    return got


def check(d, expected, attr=None, **kw):
    """op == reference; op == `expected` on the named outputs; every other array unchanged."""
    got = run_pair(d, attr, **kw)
    for n in NAMES:
        want = d[n]
        if n in expected:
            want = np.asarray(expected[n], dtype=d[n].dtype).reshape(d[n].shape)
        assert_same(got[n], want, n)
    return got


S = STALE


def dec(draft, cands, **kw):
    """A decoding request with n = len(draft) output rows."""
    return dict(draft=draft, cands=cands, **kw)


# ------------------------------------------------------------------------------------------------
# 1. Hand cases: "topp" (upstream default). Candidate 0 has score 1.0 >= topp, so TOPP is
#    deterministic (candidate 0) unless a case says otherwise.
# ------------------------------------------------------------------------------------------------
def test_topp_perfect_match_accepts_all_and_adds_the_bonus():
    d, _ = build([dec([1, 11, 12, 13], [[11, 50, 51], [12, 50, 51], [13, 50, 51], [14, 50, 51]])])
    check(
        d,
        dict(accept_tokens=[[11, 12, 13, 14]], accept_num=[4], step_idx=[14]),
        verify_strategy="topp",
    )


def test_topp_early_mismatch_emits_the_correction_token():
    d, _ = build(
        [dec([1, 11, 12, 13], [[20, 21, 22], [12, 0, 0], [13, 0, 0], [14, 0, 0]], acl=[3, 1, 1, 1])]
    )
    check(
        d,
        dict(accept_tokens=[[20, S, S, S]], accept_num=[1], step_idx=[11]),
        verify_strategy="topp",
    )


def test_topp_accepts_a_draft_anywhere_in_the_top_p_candidates():
    d, _ = build([dec([1, 11, 12], [[20, 11, 22], [30, 12, 0], [40, 0, 0]], acl=[2, 1, 1])])
    # row 0: 11 is candidate 1 of 2 -> accepted; row 1: 12 is outside the top-p set (acl 1) and
    # not followed by enough top-1 matches (no drafts left) -> correction = candidate 0 of row 1.
    check(
        d, dict(accept_tokens=[[11, 30, S]], accept_num=[2], step_idx=[12]), verify_strategy="topp"
    )


def window_case(**kw):
    """Draft 11 is candidate 1 outside the top-p set (acl 1); rows 1, 2 have 12, 13 on top."""
    r = dec([1, 11, 12, 13, 14], [[20, 11, 22], [12, 0, 0], [13, 0, 0], [40, 0, 0], [50, 0, 0]])
    r.update(kw)
    return r


def test_topp_window_matched_accepts_verify_window_plus_one_drafts():
    d, _ = build([window_case()])
    check(
        d,
        dict(accept_tokens=[[11, 12, 13, 40, S]], accept_num=[4], step_idx=[14]),
        verify_strategy="topp",
    )


def test_topp_window_not_matched_emits_the_correction_of_the_first_row():
    d, _ = build(
        [window_case(cands=[[20, 11, 22], [12, 0, 0], [99, 0, 0], [40, 0, 0], [50, 0, 0]])]
    )
    check(
        d,
        dict(accept_tokens=[[20, S, S, S, S]], accept_num=[1], step_idx=[11]),
        verify_strategy="topp",
    )


def test_topp_end_token_inside_the_window_stops_and_undoes_one_count():
    # acc 1 + 3 = 4, step 10 + 3 = 13; 11 ok, EOS stops at k = 1: acc 3, step 12 (§14.9 quirk:
    # accept_num counts one token more than were written).
    d, _ = build(
        [
            window_case(
                draft=[1, 11, EOS, 13, 14],
                cands=[[20, 11, 22], [EOS, 0, 0], [13, 0, 0], [40, 0, 0], [50, 0, 0]],
            )
        ]
    )
    check(
        d,
        dict(accept_tokens=[[11, EOS, S, S, S]], accept_num=[3], step_idx=[12], stop_flags=[True]),
        verify_strategy="topp",
    )


def test_topp_max_dec_len_inside_the_window_overwrites_with_end_tokens_0():
    # step is advanced by verify_window + 1 = 3 before the walk: 13 >= 12 at the first token.
    d, _ = build([window_case(max_dec=12)])
    check(
        d,
        dict(accept_tokens=[[EOS, S, S, S, S]], accept_num=[3], step_idx=[12], stop_flags=[True]),
        verify_strategy="topp",
    )


def test_topp_window_larger_than_the_remaining_drafts_is_not_matched():
    d, _ = build([dec([1, 11, 12], [[20, 11, 22], [12, 0, 0], [30, 0, 0]])])
    check(
        d, dict(accept_tokens=[[20, S, S]], accept_num=[1], step_idx=[11]), verify_strategy="topp"
    )


def test_topp_verify_window_zero_accepts_the_top2_draft_alone():
    d, _ = build([window_case()])
    check(
        d,
        dict(accept_tokens=[[11, 12, S, S, S]], accept_num=[2], step_idx=[12]),
        attr=attrs(verify_window=0),
        verify_strategy="topp",
    )


def test_topp_window_rule_needs_two_candidates():
    d, _ = build([dec([1, 11], [[20], [30]])], C=1)
    check(d, dict(accept_tokens=[[20, S]], accept_num=[1], step_idx=[11]), verify_strategy="topp")


def test_topp_zero_candidate_length_rejects_even_the_top1_draft():
    # §14.8: top_p not reached inside C -> actual length 0: nothing is "in the candidates";
    # TOPP then returns candidate 0.
    d, _ = build([dec([1, 20, 12], [[20, 21, 22], [30, 0, 0], [40, 0, 0]], acl=[0, 1, 1])])
    check(
        d, dict(accept_tokens=[[20, S, S]], accept_num=[1], step_idx=[11]), verify_strategy="topp"
    )


def test_topp_bonus_without_enable_topp_is_candidate_0():
    # Scores make TOPP pick candidate 1 for every draw (score 0 then 1.0); enable_topp=False
    # takes candidate 0.
    r = dec([1, 99], [[20, 0, 0], [30, 31, 0]], scores=[[1.0, 0, 0], [0.0, 1.0, 0]], acl=[1, 2])
    d, _ = build([r])
    check(d, dict(accept_tokens=[[20, S]], accept_num=[1], step_idx=[11]), verify_strategy="topp")
    d, _ = build([dict(r, draft=[1, 20])])
    check(d, dict(accept_tokens=[[20, 31]], accept_num=[2], step_idx=[12]), verify_strategy="topp")
    check(
        d,
        dict(accept_tokens=[[20, 30]], accept_num=[2], step_idx=[12]),
        attr=attrs(enable_topp=False),
        verify_strategy="topp",
    )


def test_eos_inside_the_accepted_prefix_stops_there():
    d, _ = build([dec([1, 11, EOS2, 13], [[11, 0, 0], [EOS2, 0, 0], [13, 0, 0], [14, 0, 0]])])
    check(
        d,
        dict(accept_tokens=[[11, EOS2, S, S]], accept_num=[2], step_idx=[12], stop_flags=[True]),
        verify_strategy="topp",
    )


def test_max_dec_len_on_an_accepted_draft_writes_end_tokens_0():
    d, _ = build([dec([1, 11, 12], [[11, 0, 0], [12, 0, 0], [13, 0, 0]], max_dec=11)])
    check(
        d,
        dict(accept_tokens=[[EOS, S, S]], accept_num=[1], step_idx=[11], stop_flags=[True]),
        verify_strategy="topp",
    )


def test_max_dec_len_on_the_bonus_token_writes_end_tokens_0():
    d, _ = build([dec([1, 11, 12], [[11, 0, 0], [30, 0, 0], [13, 0, 0]], max_dec=12)])
    check(
        d,
        dict(accept_tokens=[[11, EOS, S]], accept_num=[2], step_idx=[12], stop_flags=[True]),
        verify_strategy="topp",
    )


def test_bonus_end_token_stops_the_request():
    d, _ = build([dec([1, 11], [[11, 0, 0], [EOS2, 0, 0]])])
    check(
        d,
        dict(accept_tokens=[[11, EOS2]], accept_num=[2], step_idx=[12], stop_flags=[True]),
        verify_strategy="topp",
    )


def test_empty_draft_emits_one_token():
    d, _ = build([dec([1], [[30, 0, 0]])], width=3)
    check(
        d, dict(accept_tokens=[[30, S, S]], accept_num=[1], step_idx=[11]), verify_strategy="topp"
    )


def test_stopped_and_block_stepped_requests_are_untouched():
    reqs = [
        dict(draft=[1, 11], stop=True, accept_num=5),
        dec([1, 11], [[11, 0, 0], [30, 0, 0]]),
        dict(draft=[1, 12], block=True, accept_num=6),
    ]
    d, _ = build(reqs)
    check(
        d,
        dict(accept_tokens=[[S, S], [11, 30], [S, S]], accept_num=[5, 2, 6], step_idx=[10, 12, 10]),
        verify_strategy="topp",
    )


def test_prefill_emits_one_token_from_its_single_row():
    d, _ = build([dict(draft=[1, 11, 12], n=5, enc=5, step=0, cands=[[30, 0, 0]])], width=3)
    check(d, dict(accept_tokens=[[30, S, S]], accept_num=[1], step_idx=[1]), verify_strategy="topp")


def test_prefill_one_step_stop_stops_after_the_first_token():
    d, _ = build([dict(draft=[1], n=4, enc=4, step=0, cands=[[30, 0, 0]])], width=2)
    check(
        d,
        dict(accept_tokens=[[30, S]], accept_num=[1], step_idx=[1], stop_flags=[True]),
        verify_strategy="topp",
        prefill_one_step_stop=True,
    )


def test_benchmark_mode_accepts_nothing():
    d, _ = build([dec([1, 11, 12], [[11, 0, 0], [12, 0, 0], [13, 0, 0]])])
    check(
        d,
        dict(accept_tokens=[[11, S, S]], accept_num=[1], step_idx=[11]),
        attr=attrs(benchmark_mode=True),
        verify_strategy="topp",
    )


def test_accept_all_drafts_accepts_mismatching_drafts():
    d, _ = build([dec([1, 11, 12], [[20, 0, 0], [21, 0, 0], [22, 0, 0]])])
    check(
        d,
        dict(accept_tokens=[[11, 12, 22]], accept_num=[3], step_idx=[13]),
        attr=attrs(accept_all_drafts=True),
        verify_strategy="topp",
    )


def test_accept_tokens_may_be_wider_than_draft_tokens():
    d, _ = build([dec([1, 11], [[11, 0, 0], [30, 0, 0]])])
    d["accept_tokens"] = np.full((1, 5), S, np.int64)
    check(
        d,
        dict(accept_tokens=[[11, 30, S, S, S]], accept_num=[2], step_idx=[12]),
        verify_strategy="topp",
    )


# ------------------------------------------------------------------------------------------------
# 2. Hand cases: "topk", "target_match", "greedy"
# ------------------------------------------------------------------------------------------------
def test_topk_rejects_a_draft_that_is_only_candidate_1():
    d, _ = build([dec([1, 11, 12], [[20, 11, 0], [12, 0, 0], [13, 0, 0]], acl=[2, 1, 1])])
    check(
        d, dict(accept_tokens=[[20, S, S]], accept_num=[1], step_idx=[11]), verify_strategy="topk"
    )
    check(
        d, dict(accept_tokens=[[11, 12, 13]], accept_num=[3], step_idx=[13]), verify_strategy="topp"
    )


def test_target_match_compares_with_the_sampled_tokens_and_emits_the_sampled_bonus():
    d, _ = build([dec([1, 11, 12], [[11, 0, 0], [12, 0, 0], [13, 0, 0]], sampled=[11, 40, 41])])
    check(
        d,
        dict(accept_tokens=[[11, 40, S]], accept_num=[2], step_idx=[12]),
        verify_strategy="target_match",
    )


def test_greedy_accepts_top1_matches_and_emits_the_argmax():
    # Row 1's candidate 0 is 30 with score 0: TOPP would pick 31, greedy takes the argmax column.
    r = dec(
        [1, 11, 12],
        [[11, 0, 0], [30, 31, 0], [13, 0, 0]],
        scores=[[1, 0, 0], [0, 1, 0], [1, 0, 0]],
        acl=[1, 2, 1],
    )
    d, _ = build([r])
    check(
        d,
        dict(accept_tokens=[[11, 30, S]], accept_num=[2], step_idx=[12]),
        verify_strategy="greedy",
    )
    check(
        d, dict(accept_tokens=[[11, 31, S]], accept_num=[2], step_idx=[12]), verify_strategy="topk"
    )


# ------------------------------------------------------------------------------------------------
# 3. Hand cases: "rejection" (V = 8)
# ------------------------------------------------------------------------------------------------
def onehot(v, V=8):
    p = [0.0] * V
    p[v] = 1.0
    return p


def test_rejection_accepts_drafts_the_target_is_sure_of_and_samples_the_bonus():
    r = dec([1, 4, 5], [[0]] * 3, p=[onehot(4), onehot(5), onehot(6)])
    d, kw = build([r], probs=True)
    check(
        d,
        dict(accept_tokens=[[4, 5, 6]], accept_num=[3], step_idx=[13]),
        verify_strategy="rejection",
        **kw,
    )


def test_rejection_corrects_from_the_residual_of_a_greedy_drafter():
    # p(draft 1) = 0 -> rejected whatever u; residual max(0, p - onehot(1)) = onehot(6).
    r = dec([1, 1, 5], [[0]] * 3, p=[onehot(6), onehot(5), onehot(6)])
    d, kw = build([r], probs=True)
    check(
        d,
        dict(accept_tokens=[[6, S, S]], accept_num=[1], step_idx=[11]),
        verify_strategy="rejection",
        **kw,
    )


def test_rejection_with_draft_probs_uses_the_residual_and_its_argmax_fallback():
    # p(1) = 0 -> rejected; p <= q everywhere -> residual sums to 0 -> argmax p = 5.
    p0 = [0.2, 0.0, 0.1, 0.0, 0.0, 0.4, 0.0, 0.0]
    q0 = [0.5] * 8
    r = dec([1, 1, 5], [[0]] * 3, p=[p0, onehot(5), onehot(6)], q=[q0, onehot(5), onehot(6)])
    d, kw = build([r], probs=True, draft_probs=True)
    check(
        d,
        dict(accept_tokens=[[5, S, S]], accept_num=[1], step_idx=[11]),
        verify_strategy="rejection",
        **kw,
    )
    # With q = p on the draft (both 0.5) the draft is always accepted; residual unused.
    p1 = [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0]
    r = dec([1, 1, 5], [[0]] * 3, p=[p1, onehot(5), onehot(6)], q=[p1, onehot(5), onehot(6)])
    d, kw = build([r], probs=True, draft_probs=True)
    check(
        d,
        dict(accept_tokens=[[1, 5, 6]], accept_num=[3], step_idx=[13]),
        verify_strategy="rejection",
        **kw,
    )


def test_rejection_prefill_samples_the_first_token_from_p():
    r = dict(draft=[1], n=6, enc=6, step=0, cands=[[0]], p=[onehot(7)])
    d, kw = build([r], probs=True, width=2)
    check(
        d,
        dict(accept_tokens=[[7, S]], accept_num=[1], step_idx=[1]),
        verify_strategy="rejection",
        **kw,
    )


def test_rejection_end_token_and_max_dec_len():
    reqs = [
        dec([1, EOS, 5], [[0]] * 3, p=[onehot(EOS), onehot(5), onehot(6)]),
        dec([1, 4, 5], [[0]] * 3, p=[onehot(4), onehot(5), onehot(6)], max_dec=12),
    ]
    d, kw = build(reqs, probs=True)
    check(
        d,
        dict(
            accept_tokens=[[EOS, S, S], [4, EOS, S]],
            accept_num=[1, 2],
            step_idx=[11, 12],
            stop_flags=[True, True],
        ),
        verify_strategy="rejection",
        **kw,
    )


def test_rejection_accept_test_uses_draw_2i():
    # p(draft) = 0.5 with a greedy drafter: accepted iff u <= 0.5, u = draw 0 of request 0.
    p0 = [0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0]
    for seed in range(6):
        u = float(philox_uniform(seed, 3, 0, 0))
        d, kw = build([dec([1, 1], [[0]] * 2, p=[p0, onehot(5)])], probs=True)
        want = [[1, 5]] if u <= 0.5 else [[6, S]]  # rejected -> residual = onehot(6)
        check(
            d,
            dict(
                accept_tokens=want,
                accept_num=[len(want[0]) - want[0].count(S)],
                step_idx=[10 + len(want[0]) - want[0].count(S)],
            ),
            verify_strategy="rejection",
            seed=seed,
            offset=3,
            **kw,
        )


# ------------------------------------------------------------------------------------------------
# 4. The §13 worked traces
# ------------------------------------------------------------------------------------------------
T1, T2, T3, T4, D1, D2 = 21, 22, 23, 24, 31, 32


def test_trace_k1():
    # Prefill of p0..p3 (enc 4, one output row) -> t1, acc 1, step 1.
    d, _ = build([dict(draft=[0, -1], n=4, enc=4, step=0, cands=[[T1, 0, 0]])], width=2)
    check(d, dict(accept_tokens=[[T1, S]], accept_num=[1], step_idx=[1]), verify_strategy="topp")
    # Step 2, draft row [t1, d1]: d1 in candidates(row 0) -> [d1, t3], acc 2, step 3.
    d, _ = build([dec([T1, D1], [[D1, 0, 0], [T3, 0, 0]], step=1)])
    check(d, dict(accept_tokens=[[D1, T3]], accept_num=[2], step_idx=[3]), verify_strategy="topp")
    # Rejected: [t2'] sampled from row 0, acc 1, step 2.
    d, _ = build([dec([T1, D1], [[T2, 0, 0], [T3, 0, 0]], step=1)])
    check(d, dict(accept_tokens=[[T2, S]], accept_num=[1], step_idx=[2]), verify_strategy="topp")


def test_trace_k2():
    d, _ = build([dec([T1, D1, D2], [[D1, 0, 0], [D2, 0, 0], [T4, 0, 0]], step=1)])
    check(
        d, dict(accept_tokens=[[D1, D2, T4]], accept_num=[3], step_idx=[4]), verify_strategy="topp"
    )


# ------------------------------------------------------------------------------------------------
# 5. Random batches: grid and Hypothesis, op == reference
# ------------------------------------------------------------------------------------------------
def random_batch(
    rng, bsz, K=3, C=3, V=8, strategy="topp", with_draft_probs=False, extra=0, column=False
):
    """A valid random batch: mixed decode / prefill / stopped / block-stepped requests, a small
    vocabulary (frequent matches and end tokens), max_dec_len often within reach."""
    reqs = []
    for _ in range(bsz):
        role = rng.choice(["decode", "prefill", "stopped", "block"], p=[0.7, 0.1, 0.12, 0.08])
        n = int(rng.integers(1, K + 2)) if role == "decode" else int(rng.integers(1, 40))
        o = {"decode": n, "prefill": 1}.get(role, 0)
        cands = [list(rng.choice(V, size=C, replace=False)) for _ in range(o)]
        draft = [int(rng.integers(0, V))]
        for k in range(1, min(n, K + 1) if role == "decode" else K + 1):
            pick = rng.random()
            if role == "decode" and pick < 0.55:
                draft.append(int(cands[k - 1][0]))
            elif role == "decode" and pick < 0.75 and C > 1:
                draft.append(int(cands[k - 1][1]))
            else:
                draft.append(int(rng.integers(0, V)))
        scores = []
        for _ in range(o):
            s = np.sort(rng.random(C).astype(np.float32))[::-1]
            scores.append(list(s / np.float32(s.sum() * rng.uniform(1.0, 1.5))))
        p = rng.dirichlet(np.full(V, 0.5), size=o).astype(np.float32) if o else np.zeros((0, V))
        p[rng.random(p.shape) < 0.2] = 0
        q = rng.dirichlet(np.full(V, 0.5), size=o).astype(np.float32) if o else np.zeros((0, V))
        step = int(rng.integers(0, 30))
        reqs.append(
            dict(
                draft=draft,
                n=n,
                enc=n if role == "prefill" else 0,
                step=step,
                max_dec=step + int(rng.integers(1, K + 3)) if rng.random() < 0.3 else 1000,
                stop=role == "stopped",
                block=role == "block",
                topp=float(rng.uniform(0.05, 1.0)),
                accept_num=int(rng.integers(0, 5)),
                cands=cands,
                scores=scores,
                acl=[int(rng.integers(0, C + 2)) for _ in range(o)],
                sampled=[
                    int(c[0]) if rng.random() < 0.6 else int(rng.integers(0, V)) for c in cands
                ],
                p=[list(x) for x in p],
                q=[list(x) for x in q],
            )
        )
    d, kw = build(
        reqs,
        C=C,
        width=K + 1,
        V=V,
        probs=strategy == "rejection",
        draft_probs=strategy == "rejection" and with_draft_probs,
        column=column,
    )
    d["accept_tokens"] = rng.integers(0, V, (bsz + extra, K + 1)).astype(np.int64)
    d["accept_num"] = np.concatenate([d["accept_num"], np.zeros(extra, np.int32)])
    return d, kw


GRID = [
    (bsz, s, K)
    for i, bsz in enumerate(BATCH_GRID)
    for j, s in enumerate(STRATEGY_NAMES)
    for K in [(1, 3, 5)[(i + j) % 3]]
]


@pytest.mark.parametrize("bsz,strategy,K", GRID)
def test_grid_matches_reference(bsz, strategy, K):
    rng = np.random.default_rng(bsz * 31 + K)
    d, kw = random_batch(
        rng,
        bsz,
        K=K,
        strategy=strategy,
        with_draft_probs=bsz % 2 == 1,
        extra=bsz % 3,
        column=bsz % 2 == 0,
    )
    got = run_pair(
        d,
        attrs(verify_window=int(rng.integers(0, 3))),
        verify_strategy=strategy,
        seed=bsz,
        offset=K,
        **kw,
    )
    check_invariants(d, got, strategy)


@pytest.mark.parametrize("V", [1, 2, 31, 32, 33, 63, 1023, 1024, 1025, 2047, 4097, 5000])
@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_rejection_vocabulary_sizes_match_reference(V, with_draft_probs):
    # The sampling sums are blockwise (chunks of 1024 ids = 32 lanes x 32 steps): vocabularies
    # below, at and just above a lane width and a chunk, and not multiples of either; the op
    # and the reference must agree bit for bit (same tokens from the same draws).
    rng = np.random.default_rng(V)
    d, kw = random_batch(
        rng, 40, K=4, C=1, V=V, strategy="rejection", with_draft_probs=with_draft_probs
    )
    got = run_pair(d, verify_strategy="rejection", seed=V, offset=1, **kw)
    check_invariants(d, got, "rejection")


def dense_rejection_batch(rng, bsz, V, with_draft_probs, K=3):
    """Decode requests whose drafts are mostly rejected (drafts drawn uniformly, dense p / q
    over a large vocabulary): many residual and bonus samples land all over the rows."""
    reqs = []
    for _ in range(bsz):
        n = int(rng.integers(1, K + 2))
        p = rng.dirichlet(np.full(V, 0.3), size=n).astype(np.float32)
        p[rng.random(p.shape) < 0.1] = 0
        q = rng.dirichlet(np.full(V, 0.3), size=n).astype(np.float32)
        reqs.append(
            dec(
                [int(x) for x in rng.integers(0, V, n)],
                [[0]] * n,
                p=list(p),
                q=list(q),
                step=int(rng.integers(0, 30)),
            )
        )
    return build(reqs, C=1, width=K + 1, V=V, probs=True, draft_probs=with_draft_probs)


@pytest.mark.parametrize("V", [31, 33, 1023, 1025, 4097])
@pytest.mark.parametrize("with_draft_probs", [False, True])
def test_rejection_dense_rows_match_reference_bit_for_bit(V, with_draft_probs):
    rng = np.random.default_rng([V, with_draft_probs])
    d, kw = dense_rejection_batch(rng, 24, V, with_draft_probs)
    for seed in range(3):
        got = run_pair(d, verify_strategy="rejection", seed=seed, offset=V, **kw)
        check_invariants(d, got, "rejection")


@given(
    seed=st.integers(0, 2**32 - 1),
    bsz=st.integers(1, 12),
    V=st.sampled_from([1, 2, 31, 32, 33, 64, 1023, 1024, 1025, 2049, 3000]),
    with_draft_probs=st.booleans(),
    accept_all=st.booleans(),
    rng_seed=st.integers(0, 2**40),
)
def test_hypothesis_rejection_vocabularies_match_reference(
    seed, bsz, V, with_draft_probs, accept_all, rng_seed
):
    # Dense rows over vocabularies around a lane and a chunk: residual and bonus samples with
    # every kind of crossing (chunk, lane, step); op == reference bit for bit.
    rng = np.random.default_rng(seed)
    d, kw = dense_rejection_batch(rng, bsz, V, with_draft_probs)
    got = run_pair(
        d,
        attrs(accept_all_drafts=accept_all),
        verify_strategy="rejection",
        seed=rng_seed,
        offset=seed,
        **kw,
    )
    check_invariants(d, got, "rejection", accept_all=accept_all)


def check_rejection_bonus(p, seed, offset, want):
    """One request with an empty draft and the target distribution ``p`` under "rejection"
    (seed, offset): the op and the reference emit the bonus token ``want``."""
    d, kw = build([dec([7], [[0]], p=[p])], C=1, V=len(p), probs=True)
    check(
        d,
        dict(accept_tokens=[[want]], accept_num=[1], step_idx=[11]),
        verify_strategy="rejection",
        seed=seed,
        offset=offset,
        **kw,
    )


def test_rejection_samples_in_the_blockwise_enumeration_order():
    # p = 0.5 on ids 33 (lane 1, step 1) and 4 (lane 4, step 0) of chunk 0: the blockwise order
    # enumerates lane 1 before lane 4, so the bonus token is 33 when the draw u <= 0.5 (the CDF
    # reaches 0.5 at id 33) and 4 otherwise, the reverse of the id order.
    V = 40
    p = np.zeros(V, np.float32)
    p[[4, 33]] = 0.5
    seen = set()
    for seed in range(12):
        u = float(philox_uniform(seed, 0, 0, 1))  # draw 1 of request 0: the bonus of an empty draft
        want = 33 if u <= 0.5 else 4
        seen.add(want)
        check_rejection_bonus(p, seed, 0, want)
    assert seen == {4, 33}


def test_rejection_sample_crosses_chunks_and_lanes():
    # One weight per chunk, in the last lane and step of each chunk (id 1024 c + 1023), equal
    # weights: the CDF after chunk c is (c + 1) / 4 of the total, so u picks chunk ceil(4 u) - 1.
    V = 4096
    p = np.zeros(V, np.float32)
    p[1023::1024] = 0.25
    for seed in range(8):
        u = float(philox_uniform(seed, 1, 0, 1))
        want = 1024 * (int(np.ceil(4 * u)) - 1) + 1023
        check_rejection_bonus(p, seed, 1, want)


@given(
    seed=st.integers(0, 2**32 - 1),
    bsz=st.integers(1, 40),
    K=st.integers(1, 5),
    C=st.integers(1, 4),
    strategy=st.sampled_from(STRATEGY_NAMES),
    verify_window=st.integers(0, 3),
    enable_topp=st.booleans(),
    flags=st.sampled_from(["none", "none", "benchmark", "accept_all", "one_step_stop"]),
    with_draft_probs=st.booleans(),
    rng_seed=st.integers(0, 2**40),
    rng_offset=st.integers(0, 2**40),
)
def test_hypothesis_matches_reference(
    seed,
    bsz,
    K,
    C,
    strategy,
    verify_window,
    enable_topp,
    flags,
    with_draft_probs,
    rng_seed,
    rng_offset,
):
    rng = np.random.default_rng(seed)
    d, kw = random_batch(
        rng, bsz, K=K, C=C, strategy=strategy, with_draft_probs=with_draft_probs, extra=seed % 2
    )
    attr = attrs(
        verify_window=verify_window,
        enable_topp=enable_topp,
        benchmark_mode=flags == "benchmark",
        accept_all_drafts=flags == "accept_all",
    )
    got = run_pair(
        d,
        attr,
        verify_strategy=strategy,
        seed=rng_seed,
        offset=rng_offset,
        prefill_one_step_stop=flags == "one_step_stop",
        **kw,
    )
    check_invariants(
        d, got, strategy, benchmark=flags == "benchmark", accept_all=flags == "accept_all"
    )


# ------------------------------------------------------------------------------------------------
# 6. Invariants
# ------------------------------------------------------------------------------------------------
def check_invariants(before, after, strategy, benchmark=False, accept_all=False):
    f = lambda k, a: a[k].reshape(-1)  # noqa: E731
    bsz = f("seq_lens_this_time", before).size
    ends = set(before["end_tokens"].tolist())
    for b in range(before["accept_tokens"].shape[0]):
        untouched = b >= bsz or f("stop_flags", before)[b] or before["is_block_step"][b]
        if untouched:
            assert_same(
                after["accept_tokens"][b], before["accept_tokens"][b], f"accept_tokens[{b}]"
            )
            for k in ("accept_num", "step_idx", "stop_flags"):
                if b < f(k, before).size:
                    assert f(k, after)[b] == f(k, before)[b], (k, b)
            continue
        n = int(f("seq_lens_this_time", before)[b])
        prefill = f("seq_lens_encoder", before)[b] != 0
        acc = int(f("accept_num", after)[b])
        limit = 1 if (prefill or benchmark) else max(n, 1)
        assert 1 <= acc <= limit, (b, acc, limit)
        # Columns at and beyond acc are stale.
        assert_same(
            after["accept_tokens"][b, acc:],
            before["accept_tokens"][b, acc:],
            f"stale accept_tokens[{b}]",
        )
        advance = int(f("step_idx", after)[b] - f("step_idx", before)[b])
        newly_stopped = bool(f("stop_flags", after)[b])
        if newly_stopped:
            assert advance in (acc, acc - 1), (b, advance, acc)  # acc - 1: the §14.9 window quirk
        else:
            assert advance == acc, (b, advance, acc)
            assert f("step_idx", after)[b] < f("max_dec_len", before)[b]
            assert not ends & set(after["accept_tokens"][b, :acc].tolist())
        if strategy == "greedy" and not newly_stopped:
            start = b * L - int(f("output_cum_offsets", before)[b])
            drafts = before["draft_tokens"][b, 1:acc]
            if not accept_all:
                assert_same(
                    drafts, before["verify_tokens"][start : start + acc - 1, 0], "greedy prefix"
                )
            assert_same(after["accept_tokens"][b, : acc - 1], drafts, "greedy accepted")
            assert after["accept_tokens"][b, acc - 1] == before["verify_tokens"][start + acc - 1, 0]


# ------------------------------------------------------------------------------------------------
# 7. Statistics, determinism, counter, environment
# ------------------------------------------------------------------------------------------------
def chi_square(counts, probs):
    n = counts.sum()
    expected = n * np.asarray(probs)
    return float(((counts - expected) ** 2 / expected).sum())


def test_topp_bonus_follows_the_renormalised_top_p_candidates():
    # 20000 one-token requests on one candidate row: TOPP picks the first k with u*topp <= cumsum:
    # P = (0.5, 0.25, 0.125) / 0.875 for candidates 10, 11, 12; 13 is outside the top-p mass.
    n = 20000
    r = dec([1], [[10, 11, 12, 13]], scores=[[0.5, 0.25, 0.125, 0.125]], acl=[3], topp=0.875)
    d, _ = build([r] * n, C=4)
    got = run_op(d, seed=12345, offset=0, verify_strategy="topp")
    tokens = got["accept_tokens"][:, 0]
    counts = np.array([(tokens == t).sum() for t in (10, 11, 12)])
    assert counts.sum() == n
    assert chi_square(counts, np.array([4, 2, 1]) / 7) < 20.0  # 2 dof; p ~ 5e-5


@pytest.mark.parametrize("drafter", ["greedy", "draft_probs"])
def test_rejection_emits_tokens_distributed_as_p(drafter):
    # One draft per request; the first emitted token (accepted draft or correction) ~ p.
    n, V = 20000, 6
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0], np.float32)
    q = np.array([0.1, 0.4, 0.1, 0.1, 0.1, 0.2], np.float32)
    rng = np.random.default_rng(7)
    drafts = np.full(n, 1) if drafter == "greedy" else rng.choice(V, size=n, p=q / q.sum())
    reqs = [dec([0, int(x)], [[0], [0]], p=[p, p], q=[q, q]) for x in drafts]
    d, kw = build(reqs, C=1, V=V, probs=True, draft_probs=drafter == "draft_probs")
    got = run_op(d, seed=99, offset=5, verify_strategy="rejection", **kw)
    tokens = got["accept_tokens"][:, 0]
    counts = np.bincount(tokens, minlength=V)
    assert counts[5] == 0  # p = 0 is never emitted
    assert chi_square(counts[:5], p[:5] / p[:5].sum()) < 30.0  # 4 dof; p ~ 5e-6
    # Not trivially p: drafts were really accepted, and corrections happened.
    accepted = got["accept_num"] == 2
    assert 0.1 * n < accepted.sum() < 0.9 * n


@pytest.mark.parametrize("drafter", ["none", "greedy", "draft_probs"])
def test_rejection_emits_tokens_distributed_as_p_across_chunks_and_lanes(drafter):
    # p on ids in three chunks and several lanes / steps of the blockwise sums (V = 2100): the
    # first emitted token (bonus, accepted draft or correction) ~ p.
    n, V = 8000, 2100
    ids = np.array([5, 1030, 37, 2090, 1023, 64])
    weights = np.array([0.3, 0.2, 0.15, 0.15, 0.1, 0.1])
    p = np.zeros(V, np.float32)
    p[ids] = weights
    q = np.full(V, 0.5 / V, np.float32)
    q[[1030, 64, 7]] += np.float32(0.5 / 3)
    rng = np.random.default_rng(11)
    if drafter == "none":
        reqs = [dec([0], [[0]]) for _ in range(n)]
    else:
        drafts = (
            np.full(n, 1030)
            if drafter == "greedy"
            else rng.choice(V, size=n, p=q.astype(np.float64) / q.astype(np.float64).sum())
        )
        reqs = [dec([0, int(x)], [[0], [0]]) for x in drafts]
    rows = sum(len(r["draft"]) for r in reqs)
    for r in reqs:
        r["p"] = [None] * len(r["draft"])
    d, _ = build(reqs, C=1, V=V)
    kw = {"target_probs": np.tile(p, (rows, 1))}
    if drafter == "draft_probs":
        kw["draft_probs"] = np.tile(q, (rows, 1))
    got = run_op(d, seed=5, offset=6, verify_strategy="rejection", **kw)
    tokens = got["accept_tokens"][:, 0]
    counts = np.array([(tokens == t).sum() for t in ids])
    assert counts.sum() == n  # nothing outside the support of p
    assert chi_square(counts, weights) < 30.0  # 5 dof; p ~ 1e-5
    if drafter != "none":
        accepted = got["accept_num"] == 2
        assert 0.05 * n < accepted.sum() < 0.95 * n


def stats_batch(n=2000):
    r = dec([1], [[10, 11, 12, 13]], scores=[[0.25] * 4], acl=[4], topp=1.0)
    return build([r] * n, C=4)[0]


def test_same_seed_and_offset_give_identical_outputs():
    d = stats_batch()
    a = run_op(d, seed=5, offset=9)
    b = run_op(d, seed=5, offset=9)
    c = run_op(d, seed=5, offset=10)
    e = run_op(d, seed=6, offset=9)
    assert_same(a["accept_tokens"], b["accept_tokens"], "same seed/offset")
    assert (a["accept_tokens"] != c["accept_tokens"]).any()
    assert (a["accept_tokens"] != e["accept_tokens"]).any()


def test_default_counter_supplies_seed_and_offset_and_advances():
    d = stats_batch()
    args = [to_paddle(d[n]) for n in NAMES]
    c0 = CALLS["speculate_verify"]
    ops.speculate_verify(*args, *attrs(), verify_strategy="topp")
    assert CALLS["speculate_verify"] == c0 + 1
    want = run_ref(d, seed=c0, offset=c0, verify_strategy="topp")
    assert_same(to_numpy(args[1]), want["accept_tokens"], "accept_tokens (counter c0)")
    args2 = [to_paddle(d[n]) for n in NAMES]
    ops.speculate_verify(*args2, *attrs(), verify_strategy="topp")
    assert CALLS["speculate_verify"] == c0 + 2
    assert (to_numpy(args2[1]) != to_numpy(args[1])).any()
    assert_same(
        to_numpy(args2[1]),
        run_ref(d, seed=c0 + 1, offset=c0 + 1, verify_strategy="topp")["accept_tokens"],
        "accept_tokens (counter c0 + 1)",
    )


def test_environment_defaults(monkeypatch):
    # Row 0: draft 11 is candidate 1 (in the top-p set), sampled = 11: topp accepts, topk rejects,
    # target_match accepts and emits sampled[1] = 40.
    d, _ = build([dec([1, 11], [[20, 11, 0], [30, 0, 0]], acl=[2, 1], sampled=[11, 40])])
    for env, want in [
        ({}, [11, 30]),
        ({"SPECULATE_VERIFY_USE_TOPK": "1"}, [20, S]),
        ({"SPECULATE_VERIFY_USE_TARGET_SAMPLING": "1", "SPECULATE_VERIFY_USE_TOPK": "1"}, [11, 40]),
    ]:
        for k in (
            "SPECULATE_VERIFY_USE_TOPK",
            "SPECULATE_VERIFY_USE_TARGET_SAMPLING",
            "PREFILL_NODE_ONE_STEP_STOP",
        ):
            monkeypatch.delenv(k, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        got = run_pair(d)
        assert_same(got["accept_tokens"], np.array([want], np.int64), f"accept_tokens with {env}")
    monkeypatch.setenv("PREFILL_NODE_ONE_STEP_STOP", "1x")
    assert run_pair(d)["stop_flags"].all()
    monkeypatch.setenv("PREFILL_NODE_ONE_STEP_STOP", "0")
    assert not run_pair(d)["stop_flags"].any()
    monkeypatch.delenv("SPECULATE_VERIFY_USE_TARGET_SAMPLING")
    monkeypatch.setenv("SPECULATE_VERIFY_USE_TOPK", "yes")
    with pytest.raises(ValueError, match="SPECULATE_VERIFY_USE_TOPK"):
        run_op(d)


# ------------------------------------------------------------------------------------------------
# 8. Philox4x32-10 known answers (Random123 kat_vectors, philox4x32 10 rounds)
# ------------------------------------------------------------------------------------------------
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


def test_philox_numpy_known_answers():
    got = philox4x32_10(
        np.array([k[0] for k in KAT], np.uint32), np.array([k[1] for k in KAT], np.uint32)
    )
    assert_same(got, np.array([k[2] for k in KAT], np.uint32), "philox4x32_10")


def test_philox_uniform_range_and_formula():
    u = philox_uniform(3, 4, np.arange(1000), 0)
    assert u.dtype == np.float32 and (u > 0).all() and (u <= 1).all()
    w0 = philox4x32_10(np.array([0, 7, 4, 0], np.uint32), np.array([3, 0], np.uint32))[0]
    assert u[7] == np.float32(((int(w0) >> 8) + 1) / 2**24)


def test_philox_cpp_known_answers(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    header_dir = Path(__file__).resolve().parents[2] / "custom_ops" / "kernels"
    src = tmp_path / "kat.cc"
    lines = ["#include <cstdio>", '#include "philox.h"', "int main() {"]
    for c, k, _ in KAT:
        lines.append(
            f"  {{ auto r = fd_mtp::philox4x32_10(fd_mtp::Philox4x32{{{{{', '.join(f'{x}u' for x in c)}}}}},"
            f' {k[0]}u, {k[1]}u); std::printf("%08x %08x %08x %08x\\n", r.v[0], r.v[1], r.v[2], r.v[3]); }}'
        )
    lines.append('  std::printf("%.9g\\n", fd_mtp::philox_uniform(3, 4, 7, 0));')
    lines.append("}")
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "kat"
    subprocess.run(
        [cxx, "-std=c++17", "-O2", f"-I{header_dir}", str(src), "-o", str(exe)], check=True
    )
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    for line, (_, _, want) in zip(out, KAT):
        assert line == " ".join(f"{w:08x}" for w in want)
    assert np.float32(out[3]) == philox_uniform(3, 4, 7, 0)


# ------------------------------------------------------------------------------------------------
# 9. Bad input: ValueError naming the argument, nothing written (op and reference)
# ------------------------------------------------------------------------------------------------
def good():
    r = dec([1, 4, 5], [[4, 0, 0], [5, 0, 0], [6, 0, 0]], p=[onehot(4), onehot(5), onehot(6)])
    return build([r, dict(r, draft=[1, 4, 5])], probs=True)


def expect_bad(d, kw, arg, attr=None, ref=True, **extra):
    args = [to_paddle(d[n]) for n in NAMES] + (attr or attrs())
    pkw = {k: to_paddle(v) for k, v in {**kw, **extra}.items()}
    with pytest.raises(ValueError, match=rf"speculate_verify: {arg}\b"):
        ops.speculate_verify(*args, seed=1, offset=1, **pkw)
    for n, a in zip(NAMES, args):
        assert_same(to_numpy(a), d[n], f"{n} after a rejected call")
    if ref:
        copies = {n: d[n].copy() for n in NAMES}
        with pytest.raises(ValueError, match=rf"speculate_verify: {arg}\b"):
            reference.speculate_verify(
                *[copies[n] for n in NAMES], *(attr or attrs()), seed=1, offset=1, **kw, **extra
            )
        for n in NAMES:
            assert_same(copies[n], d[n], f"{n} after a rejected reference call")


def bad(mutate):
    d, kw = good()
    mutate(d, kw)
    return d, kw


@pytest.mark.parametrize(
    "arg,mutate",
    [
        (
            "accept_tokens",
            lambda d, kw: d.update(accept_tokens=d["accept_tokens"].astype(np.int32)),
        ),
        ("accept_num", lambda d, kw: d.update(accept_num=d["accept_num"][:1])),
        ("step_idx", lambda d, kw: d.update(step_idx=d["step_idx"].astype(np.int32))),
        ("stop_flags", lambda d, kw: d.update(stop_flags=d["stop_flags"].reshape(1, 2))),
        ("draft_tokens", lambda d, kw: d.update(draft_tokens=d["draft_tokens"].reshape(-1))),
        ("verify_tokens", lambda d, kw: d.update(verify_tokens=d["verify_tokens"].reshape(-1))),
        ("verify_scores", lambda d, kw: d.update(verify_scores=d["verify_scores"][:, :2].copy())),
        (
            "verify_scores",
            lambda d, kw: d.update(verify_scores=d["verify_scores"].astype(np.float16)),
        ),
        ("end_tokens", lambda d, kw: d.update(end_tokens=np.zeros(0, np.int64))),
        ("topp", lambda d, kw: d.update(topp=d["topp"].astype(np.float64))),
        (
            "sampled_token_ids",
            lambda d, kw: d.update(sampled_token_ids=d["sampled_token_ids"].reshape(2, 3)),
        ),
        (
            "target_probs",
            lambda d, kw: kw.update(target_probs=kw["target_probs"].astype(np.float16)),
        ),
        ("draft_probs", lambda d, kw: kw.update(draft_probs=np.zeros((6, 5), np.float32))),
    ],
)
def test_bad_shapes_and_dtypes(arg, mutate):
    d, kw = bad(mutate)
    expect_bad(d, kw, arg, ref=False, verify_strategy="rejection")


@pytest.mark.parametrize(
    "arg,mutate",
    [
        ("draft_tokens", lambda d, kw: d.update(seq_lens_this_time=np.array([4, 3], np.int32))),
        ("accept_tokens", lambda d, kw: d.update(accept_tokens=np.zeros((2, 2), np.int64))),
        ("verify_tokens", lambda d, kw: d.update(output_cum_offsets=np.array([0, 4], np.int32))),
        (
            "output_cum_offsets",
            lambda d, kw: d.update(output_cum_offsets=np.array([1, 5], np.int32)),
        ),
        ("verify_scores", lambda d, kw: d.update(verify_scores=d["verify_scores"][:5].copy())),
        (
            "actual_candidate_len",
            lambda d, kw: d.update(actual_candidate_len=d["actual_candidate_len"][:4].copy()),
        ),
        (
            "sampled_token_ids",
            lambda d, kw: d.update(sampled_token_ids=d["sampled_token_ids"][:5].copy()),
        ),
        ("target_probs", lambda d, kw: kw.update(target_probs=kw["target_probs"][:5].copy())),
        ("draft_tokens", lambda d, kw: d["draft_tokens"].__setitem__((1, 2), 8)),
        ("draft_tokens", lambda d, kw: d["draft_tokens"].__setitem__((0, 1), -1)),
    ],
)
def test_bad_data_is_rejected_before_anything_is_written(arg, mutate):
    d, kw = bad(mutate)
    expect_bad(d, kw, arg, verify_strategy="rejection")


def test_bad_data_in_a_stopped_request_is_ignored():
    d, kw = good()
    d["stop_flags"][1] = True
    d["draft_tokens"][1, 2] = 99  # outside V, but request 1 is stopped
    run_pair(d, verify_strategy="rejection", **kw)


def test_rejection_needs_target_probs_and_others_ignore_it():
    d, kw = good()
    expect_bad(d, {}, "target_probs", verify_strategy="rejection")
    # Other strategies ignore target_probs, even a malformed one.
    run_pair(d, verify_strategy="topp", target_probs=np.zeros((1, 1), np.float32))


@pytest.mark.parametrize(
    "arg,kwargs,error",
    [
        ("verify_strategy", dict(verify_strategy="beam"), ValueError),
        ("seed", dict(seed=-1), ValueError),
        ("offset", dict(offset=2**63), ValueError),
        ("seed", dict(seed=1.5), TypeError),  # a wrong type, as every op's attributes
    ],
)
def test_bad_keyword_arguments(arg, kwargs, error):
    d, kw = good()
    args = [to_paddle(d[n]) for n in NAMES] + attrs()
    kwargs = {"seed": 1, "offset": 1, **kwargs}
    with pytest.raises(error, match=rf"speculate_verify: {arg}\b"):
        ops.speculate_verify(*args, **kwargs)
    with pytest.raises(error, match=rf"speculate_verify: {arg}\b"):
        reference.speculate_verify(*[d[n].copy() for n in NAMES], *attrs(), **kwargs)


def test_bad_attributes():
    d, kw = good()
    expect_bad(d, kw, "verify_window", attr=attrs(verify_window=-1), verify_strategy="topp")
    expect_bad(d, kw, "max_seq_len", attr=attrs(max_seq_len=0), ref=False, verify_strategy="topp")


# ------------------------------------------------------------------------------------------------
# 10. NaN / inf: refused where a running request's decision reads them (op and reference)
# ------------------------------------------------------------------------------------------------
def _set(key, index, value):
    def mutate(d, kw):
        target = kw if key in kw else d
        target[key][index] = value

    return mutate


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize(
    "arg,strategy,index",
    [
        ("topp", "topp", (1,)),
        ("verify_scores", "topp", (4, 2)),  # a column past actual_candidate_len: still refused
        ("topp", "topk", (0,)),
        ("verify_scores", "topk", (0, 0)),
        # good(): each request accepts both drafts (p = q = 1 on them) and samples its bonus
        # from its last row (2 and 5): the drafts' entries and those target rows are read.
        ("target_probs", "rejection", (5, 7)),  # request 1's bonus row
        ("target_probs", "rejection", (2, 0)),  # request 0's bonus row
        ("target_probs", "rejection", (0, 4)),  # request 0's first draft entry
        ("draft_probs", "rejection", (4, 5)),  # request 1's second draft entry
    ],
)
def test_non_finite_values_a_decision_reads_are_refused(arg, strategy, index, value):
    d, kw = good()
    kw["draft_probs"] = kw["target_probs"].copy()
    _set(arg, index, value)(d, kw)
    expect_bad(d, kw, arg, verify_strategy=strategy)


@pytest.mark.parametrize(
    "arg,strategy,attr",
    [
        ("verify_scores", "topp", attrs(enable_topp=False)),  # no TOPP sample: never read
        ("topp", "greedy", None),
        ("verify_scores", "target_match", None),
        ("target_probs", "topp", None),  # ignored by every strategy but "rejection"
        ("topp", "rejection", None),
    ],
)
def test_non_finite_values_no_decision_reads_are_accepted(arg, strategy, attr):
    d, kw = good()
    _set(arg, (1,) if arg == "topp" else (0, 0), np.nan)(d, kw)
    run_pair(d, attr, verify_strategy=strategy, **kw)


@pytest.mark.parametrize(
    "arg,index",
    [
        ("target_probs", (0, 0)),  # an accepted row: only its draft's entry (0, 4) is read
        ("target_probs", (4, 7)),
        ("draft_probs", (0, 0)),
        ("draft_probs", (2, 6)),  # the bonus samples p alone: its draft row is not read
        ("draft_probs", (5, 1)),
    ],
)
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_rejection_non_finite_values_outside_what_it_reads_are_accepted(arg, index, value):
    d, kw = good()
    kw["draft_probs"] = kw["target_probs"].copy()
    _set(arg, index, value)(d, kw)
    got = run_pair(d, verify_strategy="rejection", **kw)
    assert_same(got["accept_num"], np.array([3, 3], np.int32), "accept_num")


def rejecting_batch():
    """Request 0 rejects its first draft (p(1) = 0): it reads target_probs[0, 1] and
    draft_probs[0, 1], then samples the residual from rows 0 of both; rows 1 and 2 are never
    read. Request 1 is good()'s second request."""
    r0 = dec([1, 1, 5], [[0]] * 3, p=[onehot(6), onehot(5), onehot(6)], q=[onehot(1)] * 3)
    r1 = dec(
        [1, 4, 5],
        [[0]] * 3,
        p=[onehot(4), onehot(5), onehot(6)],
        q=[onehot(4), onehot(5), onehot(6)],
    )
    return build([r0, r1], probs=True, draft_probs=True)


@pytest.mark.parametrize(
    "arg,index,refused",
    [
        ("target_probs", (0, 7), True),  # the residual's target row
        ("draft_probs", (0, 0), True),  # the residual's draft row
        ("target_probs", (1, 5), False),  # after the rejection: never read
        ("draft_probs", (2, 3), False),
    ],
)
def test_rejection_reads_the_residual_rows_and_nothing_after(arg, index, refused):
    d, kw = rejecting_batch()
    run_pair(d, verify_strategy="rejection", **kw)  # valid as built: request 0 emits 6
    _set(arg, index, np.inf)(d, kw)
    if refused:
        expect_bad(d, kw, arg, verify_strategy="rejection")
    else:
        got = run_pair(d, verify_strategy="rejection", **kw)
        assert_same(got["accept_tokens"][0, :1], np.array([6]), "correction token")


def test_rejection_reports_the_first_non_finite_column_of_the_sampled_row():
    d, kw = good()
    kw["target_probs"][2, [6, 3, 5]] = [np.nan, np.inf, -np.inf]
    args = [to_paddle(d[n]) for n in NAMES] + attrs()
    with pytest.raises(
        ValueError, match=r"target_probs \(request 0\) holds NaN or inf at row 2, column 3"
    ):
        ops.speculate_verify(
            *args,
            seed=1,
            offset=1,
            verify_strategy="rejection",
            target_probs=to_paddle(kw["target_probs"]),
        )


def test_non_finite_values_of_a_stopped_request_are_ignored():
    d, kw = good()
    d["stop_flags"][1] = True
    d["topp"][1] = np.nan
    d["verify_scores"][3:] = np.nan  # request 1's rows
    kw["target_probs"][3:] = np.inf
    run_pair(d, verify_strategy="topp", **kw)
    run_pair(d, verify_strategy="rejection", **kw)


def test_draft_probs_without_rows_is_refused_not_read_as_a_greedy_drafter():
    d, kw = good()
    V = kw["target_probs"].shape[1]
    # Paddle would hand a [0, V] optional input to the op as absent (a greedy drafter).
    expect_bad(
        d, kw, "draft_probs", verify_strategy="rejection", draft_probs=np.zeros((0, V), np.float32)
    )
    # Other strategies ignore it; no rows at all (target_probs [0, V], every request stopped) is
    # consistent and accepted.
    run_pair(d, verify_strategy="topp", draft_probs=np.zeros((0, V), np.float32), **kw)
    d["stop_flags"][:] = True
    empty = np.zeros((0, V), np.float32)
    run_pair(d, verify_strategy="rejection", target_probs=empty, draft_probs=empty)
