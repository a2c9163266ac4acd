"""MTPProposer at the unit level (spec/ops.md §3, §4.1 step 7, §4.2, §6, §11, §13).

The target side is a real `SpeculativeModelRunner` on a tiny exact-draft checkpoint
(`fd_mtp.testing.write_exact_draft_checkpoint`, context 0): the target is a bigram model, its greedy
next token is ``f(last token)``, and the MTP head drafts ``f(next)``. So the expected tokens of
every trace come from an independent oracle, the main model's full-recompute greedy continuation
(`greedy`), and every draft is right unless a test forces a wrong one through the ``tp_broadcast``
hook.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from pathlib import Path

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp import ops  # noqa: E402
from fd_mtp.config import CacheConfig, SchedulerConfig, SpeculativeConfig  # noqa: E402
from fd_mtp.engine.runner import ModelRunner, Task, TaskKind  # noqa: E402
from fd_mtp.engine.sampling_params import SamplingParams  # noqa: E402
from fd_mtp.engine.spec_runner import SpeculativeModelRunner  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.proposer.mtp import MTPProposer  # noqa: E402
from fd_mtp.testing import naive_greedy, write_exact_draft_checkpoint  # noqa: E402
from fd_mtp.testing.tasks import prefill_task  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))  # tests/model/model_util.py
from model_util import assert_matches_reference, dense_reference, forward64, mtp_forward64  # noqa: E402
from tolerances import Float32Noise, gamma  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=20)
L, BS, NBLK = 32, 8, 16  # max_model_len, block_size, main KV blocks


# ---------------------------------------------------------------------------------------------
# fixtures and helpers
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    ckpt = write_exact_draft_checkpoint(tmp_path_factory.mktemp("exact"), seed=0)
    model, mtp, _ = load_checkpoint(ckpt)
    check_greedy_margins(model, mtp)
    return model, mtp


def logits64(model, hidden_samples, seed):
    """``(truth, bound)`` of the float32 logits of hidden rows given as Float32Noise samples
    ``[K + 1, R, H]``: their error, plus the lm_head matmul's gamma(H) |h| @ |W|."""
    w = model.lm_head.weight.numpy().astype(np.float64)
    noise = Float32Noise(seed=seed)
    logits = noise.round(
        hidden_samples @ w, gamma(w.shape[0]) * (np.abs(hidden_samples) @ np.abs(w))
    )
    return Float32Noise.bound(logits)


def check_greedy_margins(model, mtp):
    """The tests compare greedy tokens of different float32 code paths (the runner's packed forward,
    the MTP head, the dense oracle), which could differ on a near-tie between the top logits on
    another CPU. The exact-draft model is a bigram model (attention and MLP add exact zeros, the
    hidden row of a token is a function of that token only), so checking every token once covers
    every step of every test: for each token the top logit's lower bound exceeds every other
    logit's upper bound (float64 truth +- the float32 error bound), for the target and the MTP
    head alike, and the MTP's top token is the target's (the exact-draft premise), so every
    float32 path picks the same tokens on any CPU; no comparison needs to skip a position."""
    ids = np.arange(model.config.vocab_size)[:, None]  # every token as a one-token sequence
    with paddle.no_grad():
        main = forward64(model, ids, seed=0)[0][:, :, 0]  # row t: the target's hidden after token t
        draft = mtp_forward64(mtp, ids, main[:, :, None], seed=1)[
            :, :, 0
        ]  # the MTP head on token t
    tops = []
    for name, samples, seed in (("target", main, 2), ("mtp", draft, 3)):
        truth, bound = logits64(model, samples, seed)
        top = truth.argmax(-1)
        rows = np.arange(len(ids))
        low = truth[rows, top] - bound[rows, top]
        high = truth + bound
        high[rows, top] = -np.inf
        near = np.nonzero(low <= high.max(-1))[0]
        assert near.size == 0, (
            f"{name} greedy near-ties at tokens {near.tolist()}: pick another checkpoint seed"
        )
        tops.append(top)
    np.testing.assert_array_equal(tops[1], tops[0])


def runner(models, K, nms, *, B=2, num_blocks=NBLK, **proposer_options):
    model, mtp = models
    cfg = {"method": "mtp", "num_speculative_tokens": K, "num_model_steps": nms}
    cfg.update(proposer_options.pop("cfg", {}))
    return SpeculativeModelRunner(
        model,
        SpeculativeConfig.from_value(cfg),
        mtp_model=mtp,
        scheduler_config=SchedulerConfig(max_num_seqs=B, max_model_len=L),
        cache_config=CacheConfig(block_size=BS, num_gpu_blocks=num_blocks),
        proposer_options=proposer_options,
    )


greedy = naive_greedy  # the target's greedy continuation by full recompute (the oracle)


def hidden(model, ids):
    """The target's final-normed hidden rows of every position (full recompute), with their float64
    truth and float32 error bound (model_util.Reference)."""
    with paddle.no_grad():
        return dense_reference(model, ids)


def assert_hidden(got, want):
    """The runner's rows and the oracle's: two float32 code paths, each within the float32 error
    bound of the float64 truth (tests/tolerances.py)."""
    assert_matches_reference(got.numpy(), want, "target_hidden_states")


def prefill(slot, tokens, blocks, start=0, end=None, num_output=0):
    return prefill_task(slot, tokens, blocks, GREEDY, start, end, num_output)


def col(t):
    return t.numpy().reshape(-1).tolist()


def row(t, b, n=None):
    v = t.numpy()[b].reshape(-1).tolist()
    return v if n is None else v[:n]


def chain(model, n, avoid=()):
    """A token a whose greedy chain a, f(a), ..., f^(n-1)(a) has n distinct tokens (none in avoid)."""
    for a in range(3, 300):
        c = [a] + greedy(model, [a], n - 1)
        if len(set(c)) == n and not set(c) & set(avoid):
            return c
    raise AssertionError("no distinct greedy chain")


# ---------------------------------------------------------------------------------------------
# 1. model_inputs construction (spec §3, §11)
# ---------------------------------------------------------------------------------------------
CLONES = (
    "block_tables",
    "input_ids",
    "seq_lens_encoder",
    "seq_lens_decoder",
    "step_idx",
    "stop_flags",
    "stop_nums",
    "pre_ids",
    "output_cum_offsets",
    "output_padding_offset",
    "ids_remove_padding",
    "batch_id_per_token",
    "cu_seqlens_q",
    "cu_seqlens_k",
    "encoder_block_lens",
)
ALIASES = (
    "prompt_lens",
    "top_p",
    "top_k",
    "temperature",
    "eos_token_id",
    "penalty_score",
    "frequency_score",
    "presence_score",
    "infer_seed",
    "max_dec_len",
    "min_dec_len",
    "bad_tokens",
    "accept_num",
    "accept_tokens",
)


def test_model_inputs_clones_aliases_and_new_buffers(models):
    K, nms, B = 3, 2, 2
    r = runner(models, K, nms, B=B)
    si, p = r.share_inputs, r.proposer
    mi = p.model_inputs
    for key in ALIASES:
        assert mi[key] is si[key], key
    assert mi["base_model_draft_tokens"] is si["draft_tokens"]
    for key in CLONES:
        assert mi[key] is not si[key], key
        assert mi[key].shape == si[key].shape and mi[key].dtype == si[key].dtype, key
        np.testing.assert_array_equal(mi[key].numpy(), si[key].numpy(), err_msg=key)
    # a clone is independent: writing the target's tensor leaves the proposer's alone
    si["seq_lens_decoder"][0] = 9
    assert col(mi["seq_lens_decoder"]) == [0, 0]
    # seq_lens_this_time: a clone of the target's full [B, 1] buffer, kept as an attribute
    assert mi["seq_lens_this_time"] is p.seq_lens_this_time_buffer
    assert p.seq_lens_this_time_buffer is not si["seq_lens_this_time"]
    assert p.seq_lens_this_time_buffer.shape == [B, 1]

    def new(key, shape, dtype, value, cpu=False):
        t = mi[key]
        assert t.shape == shape and t.dtype == dtype, (key, t.shape, t.dtype)
        assert (t.numpy() == value).all(), key
        if cpu:
            assert t.place.is_cpu_place(), key

    H = models[1].config.hidden_size
    new("draft_tokens", [B, K + 1], paddle.int64, -1)
    assert mi["draft_tokens"] is not si["draft_tokens"]
    new("input_ids_cpu", [B, L], paddle.int64, -1, cpu=True)
    assert mi["input_ids_cpu"] is not si["input_ids_cpu"]
    new("not_need_stop", [1], paddle.bool, False, cpu=True)
    new("recompute_token_num", [B, 1], paddle.int32, nms - 1)
    new("mask_rollback", [B, 1], paddle.int32, 0)
    assert mi["mask_rollback"] is not si["mask_rollback"]
    new("is_block_step", [B, 1], paddle.bool, False)
    new("batch_drop", [B, 1], paddle.bool, False)
    new("used_list_len", [B], paddle.int32, 0)
    new("batch_token_num", [B], paddle.int32, 0)
    new("next_token_num", [B], paddle.int32, 0)
    new("cu_batch_token_offset", [B + 1], paddle.int32, 0)
    new("cu_next_token_offset", [B + 1], paddle.int32, 0)
    new("first_token_hidden_states", [B, H], paddle.float32, -1)
    assert mi["substep"] == 0
    assert (
        p.last_seq_lens_this_time.shape == [B, 1]
        and (p.last_seq_lens_this_time.numpy() == -1).all()
    )
    assert p.input_ids_len.shape == [B, 1] and p.input_ids_len.place.is_cpu_place()
    assert p.input_ids_len.dtype == paddle.int64 and (p.input_ids_len.numpy() == 0).all()
    # num_model_steps == 1: no last_seq_lens_this_time
    assert runner(models, 1, 1).proposer.last_seq_lens_this_time is None
    # v1: the free list is empty (kv_cache_ratio 1.0, expand ratio 1)
    assert int(mi["free_list_len"][0]) == 0


@pytest.mark.parametrize("ratio, blocks", [(1.0, 16), (1.5, 24), (2.0, 32)])
def test_mtp_kv_cache_has_expanded_block_count(models, ratio, blocks):
    r = runner(models, 1, 1, cfg={"num_gpu_block_expand_ratio": ratio})
    p, cfg = r.proposer, models[1].config
    assert p.num_gpu_blocks == blocks
    layer = cfg.num_hidden_layers
    assert len(p.caches) == layer + 1 and p.caches[:layer] == [None] * layer
    key, value = p.caches[layer]
    shape = [blocks, cfg.num_key_value_heads, BS, cfg.head_dim]
    assert key.shape == shape and value.shape == shape
    assert p.model_inputs["caches"] is p.caches


def test_constructor_errors(models):
    with pytest.raises(ValueError, match="num_gpu_block_expand_ratio"):
        runner(models, 1, 1, cfg={"num_gpu_block_expand_ratio": 0.5})
    # the target's draft_tokens must be [B, K + 1]
    ib = runner(models, 1, 1).input_batch
    with pytest.raises(ValueError, match="draft_tokens has 2 columns"):
        MTPProposer(
            SpeculativeConfig(method="mtp", num_speculative_tokens=2),
            models[1],
            ib,
            max_model_len=L,
            block_size=BS,
            num_main_blocks=NBLK,
        )


@pytest.mark.parametrize(
    "n_main, ratio, expected",
    [
        (16, 1.0, list(range(15, 11, -1))),  # 15 .. int(16 * 0.75) = 12
        (8, 2.0, list(range(15, 5, -1))),  # top int(8 * 2) - 1 = 15, bottom int(8 * 0.75) = 6
        (4, 1.1, [3]),  # top int(4.4) - 1 = 3, bottom int(4 * 0.75) = 3
        (9, 0.5, []),  # v0 may shrink the cache: top 3 < bottom 6, nothing free
    ],
)
def test_v0_free_list_descends_to_int_main_blocks_times_075(models, n_main, ratio, expected):
    r = runner(
        models, 1, 1, num_blocks=n_main, scheduler="v0", cfg={"num_gpu_block_expand_ratio": ratio}
    )
    mi = r.proposer.model_inputs
    n = int(mi["free_list_len"][0])
    assert n == len(expected)
    assert col(mi["free_list"])[:n] == expected and mi["free_list"].dtype == paddle.int32


# ---------------------------------------------------------------------------------------------
# 2. insert_tasks_v1 (spec §4.2 v1)
# ---------------------------------------------------------------------------------------------
def dirty(mi, b):
    """Write junk into slot b of the per-slot buffers, so an insertion's writes are visible."""
    for key in (
        "input_ids",
        "pre_ids",
        "seq_lens_encoder",
        "seq_lens_decoder",
        "step_idx",
        "block_tables",
        "mask_rollback",
    ):
        mi[key][b] = 77
    for key in ("stop_flags", "batch_drop", "is_block_step"):
        mi[key][b] = True
    mi["recompute_token_num"][b] = 5
    mi["seq_lens_this_time"][b] = 77
    mi["input_ids_cpu"][b] = 77


def test_insert_tasks_v1_prefill_first_and_final_chunk(models):
    r = runner(models, 2, 2)
    p, mi = r.proposer, r.proposer.model_inputs
    dirty(mi, 1)
    tokens = list(range(10, 20))  # 10 prompt tokens, two chunks [0, 6) and [6, 10)
    r.insert_tasks_v1([prefill(1, tokens, [4, 2], end=6)])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert mi["seq_lens_this_time"] is p.seq_lens_this_time_buffer and col(
        mi["seq_lens_this_time"]
    ) == [0, 6]
    assert row(mi["input_ids"], 1, 5) == tokens[1:6] and p.input_ids_len.numpy()[1, 0] == 5
    assert row(mi["input_ids_cpu"], 1) == tokens[1:6] + [-1] * (L - 5)
    assert row(mi["pre_ids"], 1) == [-1] * mi["pre_ids"].shape[1]
    assert row(mi["block_tables"], 1) == [4, 2] + [-1] * (mi["block_tables"].shape[1] - 2)
    assert col(mi["seq_lens_encoder"]) == [0, 6] and col(mi["seq_lens_decoder"]) == [0, 0]
    assert col(mi["step_idx"]) == [0, 0]
    assert col(mi["stop_flags"]) == [True, False] and col(mi["batch_drop"]) == [False, False]
    assert col(mi["recompute_token_num"]) == [1, 1] and col(mi["mask_rollback"]) == [0, 0]
    # slot 0 untouched by a slot-1 insert
    assert row(mi["input_ids_cpu"], 0) == [-1] * L
    # the final chunk: decoder = start, the draft prompt is the chunk shifted by one; the hybrid
    # haystack holds every token so far (not only the chunk's, as upstream)
    r.insert_tasks_v1([prefill(1, tokens, [4, 2, 9], start=6)])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["input_ids"], 1, 3) == tokens[7:10] and p.input_ids_len.numpy()[1, 0] == 9
    assert row(mi["input_ids_cpu"], 1, 10) == tokens[1:10] + [-1]
    assert col(mi["seq_lens_encoder"])[1] == 4 and col(mi["seq_lens_this_time"])[1] == 4
    assert col(mi["seq_lens_decoder"])[1] == 6 and col(mi["step_idx"])[1] == 0
    assert row(mi["block_tables"], 1, 4) == [4, 2, 9, -1]


def test_insert_tasks_v1_reprefill_decode_and_preempted(models):
    r = runner(models, 2, 2)
    p, mi = r.proposer, r.proposer.model_inputs
    # a preempted request comes back: 5 prompt tokens + 3 generated, in one chunk
    tokens = [21, 22, 23, 24, 25, 61, 62, 63]
    dirty(mi, 0)
    r.insert_tasks_v1([prefill(0, tokens, [3, 5], num_output=3)])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["input_ids"], 0, 7) == tokens[1:] and p.input_ids_len.numpy()[0, 0] == 7
    assert col(mi["step_idx"])[0] == 3  # generated so far, as the target
    assert col(r.share_inputs["step_idx"])[0] == 3
    assert col(mi["seq_lens_encoder"])[0] == 8 and col(mi["seq_lens_this_time"])[0] == 8
    assert col(mi["seq_lens_decoder"])[0] == 0 and not bool(mi["is_block_step"][0])
    # DECODE: only the block row changes
    before = {
        k: mi[k].numpy().copy()
        for k in ("input_ids", "seq_lens_encoder", "seq_lens_decoder", "step_idx")
    }
    r.insert_tasks_v1([Task(TaskKind.DECODE, 0, block_ids=[3, 5, 7])])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["block_tables"], 0, 4) == [3, 5, 7, -1]
    for k, v in before.items():
        np.testing.assert_array_equal(mi[k].numpy(), v, err_msg=k)
    # PREEMPTED: row -1, stopped, this_time / enc / dec 0, is_block_step False
    mi["is_block_step"][0] = True
    r.insert_tasks_v1([Task(TaskKind.PREEMPTED, 0)])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["block_tables"], 0) == [-1] * mi["block_tables"].shape[1]
    assert bool(mi["stop_flags"][0]) and not bool(mi["is_block_step"][0])
    assert col(mi["seq_lens_this_time"])[0] == 0 and col(mi["seq_lens_encoder"])[0] == 0
    assert col(mi["seq_lens_decoder"])[0] == 0


def test_insert_tasks_v1_decode_role(models):
    r = runner(models, 2, 2, role="decode")
    mi = r.proposer.model_inputs
    dirty(mi, 0)
    r.insert_tasks_v1([prefill(0, [31, 32, 33, 34], [1])])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert col(mi["seq_lens_encoder"])[0] == 0 and col(mi["recompute_token_num"])[0] == 0
    assert col(mi["mask_rollback"])[0] == 1
    assert col(mi["seq_lens_this_time"])[0] == 4 and col(mi["seq_lens_decoder"])[0] == 0
    assert row(mi["input_ids"], 0, 3) == [32, 33, 34]


# ---------------------------------------------------------------------------------------------
# 3. run() against the worked traces (spec §13)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reject", [False, True], ids=["accepted", "rejected"])
def test_trace_k1_nms1(models, reject):
    model = models[0]
    prompt = [5, 6, 7, 8]
    t = greedy(
        model, prompt, 4
    )  # t1 t2 t3 t4: the target's tokens; the drafts are f(t_k) = t_(k+1)
    w = t[1] + 1  # a draft the target rejects (!= t2)
    forced = {"on": reject}

    def hook(next_tokens):
        if forced["on"]:
            next_tokens[:] = w

    r = runner(models, 1, 1, B=1, tp_broadcast=hook)
    si, mi = r.share_inputs, r.proposer.model_inputs
    r.insert_tasks_v1([prefill(0, prompt, [0, 1])])
    r.input_batch.flush()  # the tensors get host writes with a step's transfer; show them now
    # trace step 1: the draft prompt is the prompt shifted by one
    assert row(mi["input_ids"], 0, 3) == prompt[1:] and r.proposer.input_ids_len.numpy()[0, 0] == 3
    assert col(mi["seq_lens_encoder"]) == [4] and col(mi["seq_lens_this_time"]) == [4]
    assert r.execute_model([]).to_dict() == {0: [t[0]]}
    forced["on"] = False
    d1 = w if reject else t[1]
    # steps 2-3: pre_ids[0] = t1, pre_ids[1] = d1 (proposer convention), dec 4, step_idx 1
    assert (
        col(mi["seq_lens_decoder"]) == [4]
        and col(mi["step_idx"]) == [1]
        and col(mi["seq_lens_encoder"]) == [0]
    )
    assert row(mi["pre_ids"], 0, 3) == [t[0], d1, -1]
    assert row(mi["input_ids"], 0, 4) == prompt[1:] + [t[0]]
    assert row(si["draft_tokens"], 0) == [t[0], d1] and col(si["seq_lens_this_time"]) == [2]
    # eagle_get_hidden_states handed the draft the target's hidden rows of the 4 prompt positions
    assert_hidden(mi["target_hidden_states"], hidden(model, prompt)[0:4])
    if not reject:
        # steps 4-5, accepted: acc 2 -> [d1, t3]; the proposer rewinds r = 0 (dec 4, step_idx 1),
        # computes positions 4, 5: dec 6, step_idx 3, pre_ids[1..3] = d1 t3 d2
        assert r.execute_model([0]).to_dict() == {0: [t[1], t[2]]}
        assert col(mi["seq_lens_decoder"]) == [6] and col(mi["step_idx"]) == [3]
        assert row(mi["pre_ids"], 0, 5) == [t[0], t[1], t[2], t[3], -1]
        assert row(si["draft_tokens"], 0) == [t[2], t[3]]
        assert_hidden(
            mi["target_hidden_states"], hidden(model, prompt + t[:2])[4:6]
        )  # both accepted rows
    else:
        # rejected: the target emits t2 only; draft_tokens [t2], this_time 1, dec 4 -> 5, step_idx 2
        assert r.execute_model([0]).to_dict() == {0: [t[1]]}
        assert col(mi["seq_lens_decoder"]) == [5] and col(mi["step_idx"]) == [2]
        assert row(mi["pre_ids"], 0, 4) == [t[0], t[1], t[2], -1]  # w overwritten by t2
        assert row(si["draft_tokens"], 0) == [t[1], t[2]]
        assert_hidden(
            mi["target_hidden_states"], hidden(model, prompt + [t[0], w])[4:5]
        )  # the accepted row only
    assert col(si["seq_lens_this_time"]) == [2] and col(mi["mask_rollback"]) == [0]


def test_trace_k2_nms2(models):
    model = models[0]
    prompt = [5, 6, 7, 8]
    t = greedy(model, prompt, 7)
    r = runner(models, 2, 2, B=1)
    si, mi, p = r.share_inputs, r.proposer.model_inputs, r.proposer
    r.insert_tasks_v1([prefill(0, prompt, [0, 1])])
    assert r.execute_model([]).to_dict() == {0: [t[0]]}
    # substep 0 gives d1 (dec 4, step_idx 1); substep 1 feeds d1 at position 4 -> d2 (dec 5, step_idx 2)
    assert col(mi["seq_lens_decoder"]) == [5] and col(mi["step_idx"]) == [2]
    assert row(mi["pre_ids"], 0, 4) == [t[0], t[1], t[2], -1]
    assert row(si["draft_tokens"], 0) == [t[0], t[1], t[2]] and col(si["seq_lens_this_time"]) == [3]
    assert col(p.last_seq_lens_this_time) == [1]  # this_time before the last substep
    # all accepted + bonus t4 (target step_idx 4, dec 7); the proposer rewinds r = 1 (dec 4,
    # step_idx 1, mask_rollback 1), feeds [d1 d2 t4] at positions 4..6, then one more substep
    assert r.execute_model([0]).to_dict() == {0: t[1:4]}
    assert col(si["step_idx"]) == [4] and col(si["seq_lens_decoder"]) == [7]
    assert col(mi["mask_rollback"]) == [1] and col(mi["recompute_token_num"]) == [1]
    assert col(mi["seq_lens_decoder"]) == [8] and col(mi["step_idx"]) == [5]
    assert row(mi["pre_ids"], 0, 7) == t[:6] + [-1]
    assert row(si["draft_tokens"], 0) == [t[3], t[4], t[5]] and col(si["seq_lens_this_time"]) == [3]


# ---------------------------------------------------------------------------------------------
# 4. tp_broadcast hook
# ---------------------------------------------------------------------------------------------
def test_tp_broadcast_called_per_substep_and_in_place_edits_reach_the_target(models):
    model = models[0]
    calls = []
    forced = {"token": None}

    def hook(next_tokens):
        calls.append((next_tokens.dtype, next_tokens.numpy().copy()))
        if forced["token"] is not None:
            next_tokens[:] = forced["token"]

    r = runner(models, 3, 3, tp_broadcast=hook)
    si = r.share_inputs
    a, b = [5, 6, 7, 8], [40, 41, 42]
    ta, tb = greedy(model, a, 4), greedy(model, b, 4)
    r.insert_tasks_v1([prefill(0, a, [0, 1]), prefill(1, b, [2, 3])])
    r.execute_model([])
    assert len(calls) == 3  # one per substep
    for k, (dtype, toks) in enumerate(calls):
        assert dtype == paddle.int64
        assert toks.tolist() == [ta[k + 1], tb[k + 1]]  # one draft per output row (per request)
    assert row(si["draft_tokens"], 0) == ta[:4] and row(si["draft_tokens"], 1) == tb[:4]
    # a hook that sets every draft to one token id: that is what the target sees and verifies
    calls.clear()
    forced["token"] = 7
    r.execute_model([0, 1])
    assert len(calls) == 3
    assert row(si["draft_tokens"], 0)[1:] == [7, 7, 7] and row(si["draft_tokens"], 1)[1:] == [
        7,
        7,
        7,
    ]
    assert col(si["seq_lens_this_time"]) == [4, 4]
    # substep 0 of a decoding request outputs one row per fed token: the hook sees all of them
    assert [c[1].size for c in calls] == [8, 2, 2]


# ---------------------------------------------------------------------------------------------
# 5. role "prefill": mtp_save_first_token over a real SysV queue (spec §6.8)
# ---------------------------------------------------------------------------------------------
IPC_CREAT, IPC_EXCL = 0o1000, 0o2000


def fresh_queue_id(directory) -> int:
    """An id whose queue ftok(directory, id) did not exist (created now, exclusively)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.ftok.restype, libc.ftok.argtypes = ctypes.c_int, (ctypes.c_char_p, ctypes.c_int)
    libc.msgget.restype, libc.msgget.argtypes = ctypes.c_int, (ctypes.c_int, ctypes.c_int)
    for qid in range(1 + os.getpid() % 200, 256):
        key = libc.ftok(os.fsencode(str(directory)), qid)
        if libc.msgget(key, IPC_CREAT | IPC_EXCL | 0o600) != -1:
            return qid
        assert ctypes.get_errno() == errno.EEXIST
    pytest.skip("no free SysV queue key")


def test_prefill_role_sends_first_token_and_draft_then_stops(models, tmp_path, monkeypatch):
    model = models[0]
    monkeypatch.chdir(tmp_path)  # the proposer keys its queue with ftok("./", id)
    monkeypatch.delenv("INFERENCE_MSG_ID", raising=False)
    qid = fresh_queue_id(tmp_path)
    try:
        calls = []
        r = runner(
            models,
            2,
            2,
            role="prefill",
            msg_queue_id=qid,
            tp_broadcast=lambda x: calls.append(x.shape),
        )
        mi = r.proposer.model_inputs
        a, b = [5, 6, 7, 8], [40, 41, 42]
        ta, tb = greedy(model, a, 2), greedy(model, b, 2)
        r.insert_tasks_v1([prefill(0, a, [0, 1]), prefill(1, b, [2, 3])])
        r.execute_model([])
        out = paddle.zeros([ops.MESSAGE_INTS], dtype="int64")
        ops.speculate_get_output(out, 0, False, False, msg_queue_id=qid, ftok_path=str(tmp_path))
        m = out.numpy()
        # header -1: the draft's not_need_stop is False (every request stopped); bs = B = 2
        assert m[:4].tolist() == [-1, 2, 2, 2]
        assert m[258:260].tolist() == ta and m[264:266].tolist() == tb
        ops.speculate_get_output(out, 0, False, False, msg_queue_id=qid, ftok_path=str(tmp_path))
        assert out.numpy()[0] == -2  # exactly one message: the second substep did not run
        assert len(calls) == 1
        assert col(mi["stop_flags"]) == [True, True]  # prefill_one_step_stop
        assert col(mi["step_idx"]) == [0, 0]  # zeroed for stopped requests after sending
        assert row(r.share_inputs["draft_tokens"], 0) == ta + [-1]
    finally:
        ops.remove_queue(qid, ftok_path=str(tmp_path))


# ---------------------------------------------------------------------------------------------
# 6. v0 scheduler: insert_prefill_inputs, update_task_chunk_prefill, mtp_step_paddle (§4.2, §6.6)
# ---------------------------------------------------------------------------------------------
def test_v0_insert_prefill_inputs_unchunked(models):
    r = runner(models, 1, 1, scheduler="v0")
    p, mi = r.proposer, r.proposer.model_inputs
    dirty(mi, 1)
    mi["encoder_block_lens"][1] = 7
    mi["used_list_len"][1] = 3
    keep = {
        k: mi[k].numpy().copy()
        for k in ("is_block_step", "mask_rollback", "recompute_token_num", "draft_tokens")
    }
    prompt = [11, 12, 13, 14, 15, 16]
    p.insert_prefill_inputs(1, prompt, block_ids=[6, 2], seq_lens_decoder=0)
    p.batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["input_ids"], 1, 5) == prompt[1:] and row(mi["input_ids_cpu"], 1) == prompt[
        1:
    ] + [-1] * (L - 5)
    assert p.input_ids_len.numpy()[1, 0] == 5
    assert row(mi["pre_ids"], 1) == [-1] * mi["pre_ids"].shape[1]
    assert col(mi["step_idx"])[1] == 0 and col(mi["seq_lens_encoder"])[1] == 6
    assert col(mi["seq_lens_this_time"])[1] == 6 and col(mi["seq_lens_decoder"])[1] == 0
    assert not bool(mi["stop_flags"][1]) and not bool(mi["batch_drop"][1])
    assert row(mi["block_tables"], 1, 3) == [6, 2, -1]
    assert col(mi["encoder_block_lens"])[1] == 2 and col(mi["used_list_len"])[1] == 0
    assert bool(mi["not_need_stop"][0])
    # not written by v0 insertion (is_block_step: the §6.1 quirk, never cleared on v0)
    for k, v in keep.items():
        np.testing.assert_array_equal(mi[k].numpy(), v, err_msg=k)


def test_v0_chunked_prefill_fields(models):
    r = runner(models, 1, 1, scheduler="v0")
    p, mi = r.proposer, r.proposer.model_inputs
    prompt = list(range(50, 60))  # chunks 4, 3, 3
    p.insert_prefill_inputs(0, prompt, block_ids=[1, 2], chunk_sizes=[4, 3, 3])
    p.batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["input_ids"], 0, 4) == prompt[1:5] and row(mi["input_ids_cpu"], 0, 10) == prompt[
        1:
    ] + [-1]
    assert col(mi["seq_lens_encoder"])[0] == 4 and col(mi["seq_lens_this_time"])[0] == 4
    assert p.input_ids_len.numpy()[0, 0] == 9 and col(mi["seq_lens_decoder"])[0] == 0
    p.update_task_chunk_prefill(0)  # chunk 2 of 3: [4, 7)
    p.batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert row(mi["input_ids"], 0, 3) == prompt[5:8]
    assert col(mi["seq_lens_encoder"])[0] == 3 and col(mi["seq_lens_this_time"])[0] == 3
    assert col(mi["seq_lens_decoder"])[0] == 4 and col(mi["step_idx"])[0] == 0
    mi["step_idx"][0] = 1  # as after a step
    p.update_task_chunk_prefill(0, seq_lens_decoder=0)  # the final chunk [7, 10): 2 draft tokens
    p.batch.flush()  # the tensors get host writes with a step's transfer; show them now
    ids = row(mi["input_ids"], 0, 3)
    assert (
        ids[:2] == prompt[8:10] and ids[2] == prompt[7]
    )  # position 2 keeps the previous chunk's value
    assert col(mi["seq_lens_encoder"])[0] == 3 and col(mi["seq_lens_decoder"])[0] == 7
    assert col(mi["step_idx"])[0] == 0
    p.update_task_chunk_prefill(0)  # the last chunk ran: decode from here
    p.batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert col(mi["seq_lens_encoder"])[0] == 0 and col(mi["step_idx"])[0] == 1
    assert col(mi["seq_lens_decoder"])[0] == 10
    mi["seq_lens_decoder"][0] = 12
    p.update_task_chunk_prefill(0)  # nothing pending: no change
    p.batch.flush()  # the tensors get host writes with a step's transfer; show them now
    assert col(mi["seq_lens_decoder"])[0] == 12
    with pytest.raises(ValueError, match="chunk_sizes"):
        p.insert_prefill_inputs(0, prompt, block_ids=[1], chunk_sizes=[4, 4])


def test_v0_run_allocates_and_frees_mtp_decode_blocks(models):
    K = 1
    r = runner(models, K, 1, scheduler="v0")
    p, mi = r.proposer, r.proposer.model_inputs
    assert col(mi["free_list"]) == [15, 14, 13, 12] and col(mi["free_list_len"]) == [4]
    a, b = [5, 6, 7, 8, 9, 10], [40, 41, 42, 43, 44, 45]
    # the target gets its rows through the plain insertion; the proposer through v0's
    ModelRunner.insert_tasks_v1(r, [prefill(0, a, [0, 2]), prefill(1, b, [1, 3])])
    p.insert_prefill_inputs(0, a, block_ids=[0])
    p.insert_prefill_inputs(1, b, block_ids=[1])
    r.execute_model([])
    # after the draft prefill dec = 6: slot (6 + K + 1) // 8 = 1 is -1 for both -> two blocks popped
    # from the end of the free list
    assert col(mi["seq_lens_decoder"]) == [6, 6]
    assert col(mi["free_list_len"]) == [2] and col(mi["used_list_len"]) == [1, 1]
    got = [int(mi["block_tables"][0, 1]), int(mi["block_tables"][1, 1])]
    assert sorted(got) == [12, 13]
    assert int(mi["block_tables"][0, 2]) == -1 and col(mi["encoder_block_lens"]) == [1, 1]
    # the target stops slot 1: the proposer returns its decode block (not the encoder block)
    ModelRunner.insert_tasks_v1(r, [Task(TaskKind.PREEMPTED, 1)])
    r.execute_model([0])
    assert col(mi["free_list_len"]) == [3] and col(mi["free_list"])[2] == got[1]
    assert row(mi["block_tables"], 1, 3) == [1, -1, -1]
    assert col(mi["used_list_len"]) == [1, 0] and col(mi["encoder_block_lens"])[1] == 0
    assert int(mi["block_tables"][0, 1]) == got[0]  # slot 0 (dec 8, slot 1) keeps its block
    assert bool(mi["stop_flags"][1]) and col(mi["seq_lens_this_time"])[1] == 0


# ---------------------------------------------------------------------------------------------
# 7. hybrid mode (mtp_strategy with_ngram, K > num_model_steps; spec §6.7)
# ---------------------------------------------------------------------------------------------
def test_hybrid_appends_ngram_drafts_after_the_mtp_draft(models):
    model = models[0]
    c = chain(model, 8)  # a, f(a), ..., f^7(a), all distinct
    prompt = c[:7] + [c[0]]  # the target continues with f(a) = c[1], c[2], ...
    r = runner(models, 3, 1, B=1, cfg={"mtp_strategy": "with_ngram"})
    assert r.proposer.hybrid_mode
    si = r.share_inputs
    r.insert_tasks_v1([prefill(0, prompt, [0, 1])])
    assert r.execute_model([]).to_dict() == {0: [c[1]]}
    # proposer step_idx 1 < min_ngram_size 2: no n-gram query yet, the MTP draft only
    assert row(si["draft_tokens"], 0) == [c[1], c[2], -1, -1] and col(si["seq_lens_this_time"]) == [
        2
    ]
    assert r.execute_model([0]).to_dict() == {0: [c[2], c[3]]}
    # the proposer's history ends with [c2 c3 | draft c4]; the 3-gram is found in the prompt, followed
    # by c5 c6: target row [last accepted c3, MTP draft c4, n-gram c5 c6], this_time 1 + 1 + 2
    assert row(si["draft_tokens"], 0) == [c[3], c[4], c[5], c[6]] and col(
        si["seq_lens_this_time"]
    ) == [4]
    # the n-gram drafts are the target's own continuation: all accepted
    assert r.execute_model([0]).to_dict() == {0: [c[4], c[5], c[6], greedy(model, [c[6]], 1)[0]]}


def test_no_hybrid_without_with_ngram(models):
    model = models[0]
    c = chain(model, 8)
    r = runner(models, 3, 1, B=1)
    assert not r.proposer.hybrid_mode
    r.insert_tasks_v1([prefill(0, c[:7] + [c[0]], [0, 1])])
    r.execute_model([])
    r.execute_model([0])
    assert row(r.share_inputs["draft_tokens"], 0) == [c[3], c[4], -1, -1]
    assert col(r.share_inputs["seq_lens_this_time"]) == [2]


def test_prefill_role_without_one_step_stop_keeps_drafting_the_others(
    models, tmp_path, monkeypatch
):
    # request 0's first draft is an end token (the eos list is an alias of the target's): it stops in
    # substep 0 and its step_idx is zeroed; request 1 drafts on in substep 1. The hidden-state gather
    # between the substeps must still walk request 0 as a one-row prefill.
    model = models[0]
    monkeypatch.chdir(tmp_path)
    qid = fresh_queue_id(tmp_path)
    try:
        # draft_end_ids=None: the draft stops on the target's eos list (FastDeploy's behaviour; the
        # runner's default is an end list that matches nothing)
        r = runner(
            models,
            2,
            2,
            role="prefill",
            msg_queue_id=qid,
            prefill_one_step_stop=False,
            draft_end_ids=None,
        )
        si, mi = r.share_inputs, r.proposer.model_inputs
        a, b = [5, 6, 7, 8], [40, 41, 42]
        ta, tb = greedy(model, a, 2), greedy(model, b, 3)
        assert ta[1] not in tb[1:]
        si["eos_token_id"][0, 0] = ta[1]
        r.insert_tasks_v1([prefill(0, a, [0, 1]), prefill(1, b, [2, 3])])
        r.execute_model([])
        assert col(mi["stop_flags"]) == [True, False] and col(mi["step_idx"]) == [0, 2]
        assert row(si["draft_tokens"], 0) == ta + [-1] and row(si["draft_tokens"], 1) == tb
        assert col(si["seq_lens_this_time"]) == [2, 3]
        out = paddle.zeros([ops.MESSAGE_INTS], dtype="int64")
        ops.speculate_get_output(out, 0, False, False, msg_queue_id=qid, ftok_path=str(tmp_path))
        m = out.numpy()  # substep 0: both requests at step_idx 1
        assert (
            m[1:4].tolist() == [2, 2, 2]
            and m[258:260].tolist() == ta
            and m[264:266].tolist() == tb[:2]
        )
        ops.speculate_get_output(out, 0, False, False, msg_queue_id=qid, ftok_path=str(tmp_path))
        m = out.numpy()  # substep 1: request 0 zeroed, request 1 at step_idx 2: nothing to send
        assert m[1:4].tolist() == [2, 0, 0]
    finally:
        ops.remove_queue(qid, ftok_path=str(tmp_path))
