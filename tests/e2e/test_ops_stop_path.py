"""``SpeculativeConfig(stop_handling="ops")``: FastDeploy's stop path end to end, case by case.

In "ops" mode the ops end requests as a FastDeploy server runs them: ``speculate_verify`` with
the model's EOS ids as end tokens and the real ``max_dec_len`` (min(max_tokens, max_model_len -
prompt length)), ``speculate_set_stop_value_multi_seqs`` with each stop token id as a one-token
stop sequence, ``draft_model_update`` with the EOS ids and the same max_dec_len, and the engine
finishes a request when the ops' ``stop_flags`` say so. The cases below are built by hand on the
exact drafter (every draft accepted), so the step layout is known: with K = num_model_steps = 4,
token 1 comes from the prefill and each decode step emits K + 1 = 5 tokens (2-6, 7-11, 12-16).
``S`` is the greedy stream of ``PROMPT`` (26 distinct tokens, the default EOS id 2 not among
them); the EOS ids of a case are set in the checkpoint's config (the weights do not depend on
them, so the stream stays the same).

Each divergence from "engine" mode (= plain decoding) that upstream's semantics force is pinned:

* max_dec_len counts generated tokens with step_idx: the token that reaches it is replaced by
  the first EOS id (max_tokens=n gives n-1 model tokens + EOS; max_tokens=1 gives [EOS]).
* finish_reason follows FastDeploy's serving layer: "length" iff the request has its limit of
  tokens, so an EOS (or stop token id) landing on the last allowed token finishes with "length".
* an EOS id inside an accepted run ends the request there, kept (as plain decoding), but the
  drafter stops drafting at a drafted EOS, and one token past max_dec_len (where it proposes the
  EOS id): that step verifies fewer drafts.
* a stop token id is followed by the first EOS id (set_stop_value replaces the next token), one
  step later when the stop token id was the last token of its step (the request runs one more
  step), and it is missed when verify ends the request in the step that would see it (EOS or
  max_dec_len reached in the same or the next step: the tokens after the stop token are kept).
* min_tokens is the penalty op's min_len (EOS masked): both modes give the same tokens.
* a request whose draft stopped (drafted EOS, or the draft past max_dec_len) while the target
  goes on has its drafting switched off: 2.4's stop-recovery branch of draft_model_preprocess
  rewinds by the target's seq_lens_this_time instead of accept_num (spec §14.5), which puts the
  draft's positions below zero for short sequences.
* a non-final prefill chunk the ops stop (max_tokens=1) is restarted by its next chunk.
* sampled requests under "rejection" (with draft sampling and the adaptive policy too) and
  "topp" verification end by the same rules.
* what the ops cannot do stays on the host: stop strings. ``ignore_eos`` (the ops' end tokens are
  one list for the batch) and more than 5 stop token ids (FastDeploy's FD_MAX_STOP_SEQS_NUM) are
  refused with an error naming the option.
"""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.cli import main as cli_main  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint, write_random_checkpoint  # noqa: E402

K = 4
L = 64
PROMPT = [255, 192, 154, 83, 94]
EOS = 2  # the default EOS id of the tiny checkpoints


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    """``exact(eos)``: the exact-drafter checkpoint (seed 3) with EOS id(s) ``eos``."""
    root = tmp_path_factory.mktemp("ops_stop")
    made = {}

    def ckpt(eos=EOS):
        key = tuple(eos) if isinstance(eos, list) else (eos,)
        if key not in made:
            made[key] = write_exact_draft_checkpoint(
                root / "_".join(map(str, key)), seed=3, eos_token_id=eos
            )
        return made[key]

    return ckpt


def make_llm(ckpt, mode, **kw):
    spec = None
    if mode is not None:
        spec = {
            "method": "mtp",
            "num_speculative_tokens": K,
            "num_model_steps": K,
            "verification": "greedy",
            "stop_handling": mode,
        }
    kw.setdefault("max_num_seqs", 4)
    kw.setdefault("max_model_len", L)
    kw.setdefault("block_size", 8)
    return fd_mtp.LLM(str(ckpt), speculative_config=spec, **kw)


@pytest.fixture(scope="module")
def S(exact):
    """The greedy stream of PROMPT (plain decoding, EOS ignored)."""
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    out = make_llm(exact(), None).generate([PROMPT], params, use_tqdm=False)[0].token_ids
    assert len(set(out[:26])) == 26 and EOS not in out
    return out


def run(ckpt, mode, prompt=PROMPT, llm_kw=None, **params):
    llm = make_llm(ckpt, mode, **(llm_kw or {}))
    out = llm.generate([prompt], SamplingParams(temperature=0.0, **params), use_tqdm=False)[0]
    assert out.error is None, out.error
    return out


def both(ckpt, **params):
    """(engine-mode output, ops-mode output) of one request."""
    return run(ckpt, "engine", **params), run(ckpt, "ops", **params)


def test_the_modes_wire_the_ops_differently(exact):
    e, o = make_llm(exact(), "engine"), make_llm(exact([EOS, 7]), "ops")
    assert e.runner._end_tokens.numpy().tolist() == [-1]
    assert o.runner._end_tokens.numpy().tolist() == [EOS, 7]
    for llm in (e, o):  # the drafter's end ids are verify's
        assert llm.runner.proposer.draft_end_ids is llm.runner._end_tokens
    p = SamplingParams(max_tokens=9, temperature=0.0)
    assert e.runner._max_dec_len(p, 5) == 9 + K  # past the limit by the drafts' lead
    assert o.runner._max_dec_len(p, 5) == 9
    assert o.runner._max_dec_len(p, L - 4) == 4  # max_model_len - prompt length
    assert "stop_seqs" in o.runner.share_inputs and "stop_seqs" not in e.runner.share_inputs


@pytest.mark.parametrize("n", [1, 2, 6, 7, 9, 12])
def test_the_token_at_max_tokens_becomes_the_eos_id(exact, S, n):
    engine, ops = both(exact(), max_tokens=n)
    assert engine.token_ids == S[:n] and engine.finish_reason == "length"
    assert ops.token_ids == S[: n - 1] + [EOS] and ops.finish_reason == "length"


def test_max_model_len_is_max_dec_len_too(exact, S):
    kw = {"max_model_len": len(PROMPT) + 7}
    engine = run(exact(), "engine", llm_kw=kw, max_tokens=20)
    ops = run(exact(), "ops", llm_kw=kw, max_tokens=20)
    assert engine.token_ids == S[:7] and engine.finish_reason == "length"
    assert ops.token_ids == S[:6] + [EOS] and ops.finish_reason == "length"


@pytest.mark.parametrize(
    "eos,k",
    [
        ([None], 8),  # token 8: inside the run 7-11 (an accepted draft)
        ([EOS, None], 8),  # the second of two EOS ids: kept as it is, not rewritten to EOS
        ([None], 11),  # token 11: the bonus token of its step
        ([None], 7),  # token 7: the first draft of its step
        ([None], 1),  # the prefill's token
    ],
)
def test_an_eos_id_in_the_accepted_run_ends_the_request_as_the_host_does(exact, S, eos, k):
    ids = [S[k - 1] if e is None else e for e in eos]
    engine, ops = both(exact(ids if len(ids) > 1 else ids[0]), max_tokens=20)
    assert engine.token_ids == ops.token_ids == S[:k]
    assert engine.finish_reason == ops.finish_reason == "stop"


@pytest.mark.parametrize("cause", ["eos", "max_dec_len"])
def test_the_drafter_stops_at_a_drafted_eos_and_past_max_dec_len(exact, S, cause):
    """After step 2 (tokens 2-6) the drafter drafts tokens 7-10. "eos": token 8 is an EOS id, and
    "ops" (draft_model_update's end ids) stops the draft at it: the EOS is still proposed, nothing
    after it, and the target verifies 2 drafts instead of 4. "max_dec_len": max_tokens 8, and the
    draft of token 9 (proposer step_idx 8 >= max_dec_len) becomes the EOS id, nothing after it.
    Same output in both modes ("ops": the 8th token is the EOS id there)."""
    eos, n = (S[7], 20) if cause == "eos" else (EOS, 8)
    rows = {}
    for mode in ("engine", "ops"):
        llm = make_llm(exact(eos), mode)
        engine = llm.engine
        rid = engine.add_request(PROMPT, SamplingParams(max_tokens=n, temperature=0.0))
        engine.step()
        engine.step()
        slot = engine.requests[rid].slot
        si = llm.runner.share_inputs
        rows[mode] = (
            si["draft_tokens"].numpy()[slot].tolist(),
            int(si["seq_lens_this_time"].numpy().reshape(-1)[slot]),
        )
        while engine.has_unfinished():
            engine.step()
        want = S[:7] + [EOS] if cause == "max_dec_len" and mode == "ops" else S[:8]
        assert engine.pop_output(rid).token_ids == want
    assert rows["engine"] == (S[5:10], 5)
    if cause == "eos":
        assert rows["ops"] == (S[5:8] + [-1, -1], 3)
    else:
        assert rows["ops"] == (S[5:8] + [EOS, -1], 4)


@pytest.mark.parametrize("prompt", [[7], [11]])
def test_a_stopped_draft_is_switched_off_not_recovered(tmp_path, prompt):
    """K = num_model_steps = 3, a one-token prompt, max_tokens 3 and a drafter that is wrong: after
    the prefill the draft of token 4 (one past max_dec_len) is the EOS id and the draft stops;
    the target rejects the first draft and goes on. 2.4's draft_model_preprocess would then
    rewind the draft by the target's seq_lens_this_time (4) instead of accept_num (1) (spec
    §14.5): seq_lens_decoder 2 - 4 < 0, which fd_mtp's attention refuses (upstream reads outside
    the KV cache). The runner switches the request's drafting off instead (`MTPProposer.drop`),
    and the output is plain decoding's under upstream's rules."""
    ckpt = write_random_checkpoint(tmp_path / "random", seed=4)
    params = SamplingParams(max_tokens=3, temperature=0.0)
    plain = make_llm(ckpt, None).generate([prompt], params, use_tqdm=False)[0].token_ids
    spec = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3}
    spec.update(verification="greedy", stop_handling="ops")

    def llm():
        return fd_mtp.LLM(str(ckpt), speculative_config=spec, max_model_len=L, block_size=4)

    ops = llm()
    out = ops.generate([prompt], params, use_tqdm=False)[0]
    assert out.token_ids == plain[:2] + [EOS] and out.finish_reason == "length"
    assert ops.runner.num_draft_stop_drops == 1
    recovering = llm()
    recovering.runner._drop_stopped_drafts = lambda *args: None  # upstream's recovery
    with pytest.raises(ValueError, match="seq_lens_decoder must be non-negative"):
        recovering.generate([prompt], params, use_tqdm=False)


def test_an_eos_on_the_last_allowed_token_finishes_with_length(exact, S):
    engine, ops = both(exact(S[8]), max_tokens=9)
    assert engine.token_ids == ops.token_ids == S[:9]
    assert engine.finish_reason == "stop" and ops.finish_reason == "length"


@pytest.mark.parametrize(
    "stop_ids,ops_tokens,extra_steps",
    [
        ([8], 9, 0),  # token 9 inside the run 7-11: token 10 becomes the EOS id
        ([5], 6, 1),  # token 6 ends its step: seen at the next step, whose token 7 becomes EOS
        ([0], 1, 1),  # the prefill's token: the next step's first token becomes EOS
        ([12, 8], 9, 0),  # several stop ids: the earliest hit wins
    ],
)
def test_a_stop_token_id_is_followed_by_the_eos_id(exact, S, stop_ids, ops_tokens, extra_steps):
    ids = [S[i] for i in stop_ids]
    engine, ops = both(exact(), max_tokens=20, stop_token_ids=ids)
    assert engine.token_ids == S[:ops_tokens] and engine.finish_reason == "stop"
    assert ops.token_ids == S[:ops_tokens] + [EOS] and ops.finish_reason == "stop"
    assert ops.metrics.num_steps == engine.metrics.num_steps + extra_steps


@pytest.mark.parametrize(
    "stop,eos,max_tokens,ops_out,ops_reason",
    [
        # token 6 ends step 2; step 3 reaches max_dec_len 8 first: tokens 7-8 are kept
        (5, None, 8, lambda S: S[:7] + [EOS], "length"),
        # token 6 ends step 2; step 3 ends at the EOS id (token 8): tokens 7-8 are kept
        (5, 7, 20, lambda S: S[:8], "stop"),
        # stop token 8 and EOS token 10 in the same step: verify ends it at the EOS
        (7, 9, 20, lambda S: S[:10], "stop"),
        # stop token 9, max_tokens 10: verify ends it at token 10 (the EOS id), reason length
        (8, None, 10, lambda S: S[:9] + [EOS], "length"),
    ],
)
def test_a_stop_token_id_is_missed_when_verify_ends_the_request_first(
    exact, S, stop, eos, max_tokens, ops_out, ops_reason
):
    ckpt = exact() if eos is None else exact(S[eos])
    engine, ops = both(ckpt, max_tokens=max_tokens, stop_token_ids=[S[stop]])
    assert engine.token_ids == S[: stop + 1] and engine.finish_reason == "stop"
    assert ops.token_ids == ops_out(S) and ops.finish_reason == ops_reason


def test_min_tokens_masks_the_eos_in_the_penalty_op(exact, S):
    """EOS = token 3 and min_tokens 6: the penalty op's min_len masks it in both modes, so both
    decode the same other tokens; "ops" ends at max_tokens with the EOS id."""
    engine, ops = both(exact(S[2]), max_tokens=20, min_tokens=6)
    assert engine.token_ids[:2] == S[:2] and engine.token_ids[2] != S[2]
    assert engine.finish_reason == "length" and len(engine.token_ids) == 20
    assert ops.token_ids == engine.token_ids[:19] + [S[2]] and ops.finish_reason == "length"


@pytest.mark.parametrize("n", [1, 3])
def test_a_non_final_prefill_chunk_stopped_by_the_ops_is_restarted(exact, n):
    """max_tokens 1: verify stops every chunk of a chunked prefill (step_idx 0 -> 1 >= 1); the
    next chunk's insertion restarts the request (as upstream) and only the last chunk's stop
    finishes it."""
    prompt = PROMPT + [int(t) for t in np.random.default_rng(5).integers(3, 300, 25)]
    kw = {"max_num_batched_tokens": 8}
    stream = run(exact(), "engine", prompt, llm_kw=kw, max_tokens=n + 1).token_ids
    engine = run(exact(), "engine", prompt, llm_kw=kw, max_tokens=n)
    ops = run(exact(), "ops", prompt, llm_kw=kw, max_tokens=n)
    assert engine.token_ids == stream[:n]
    assert ops.token_ids == stream[: n - 1] + [EOS] and ops.finish_reason == "length"
    assert ops.metrics.num_steps >= len(prompt) // 8
    # step by step: after the first chunk the slot is stopped by verify when max_tokens is 1
    # (step_idx 1 >= max_dec_len 1), and the request runs on
    llm = make_llm(exact(), "ops", **kw)
    rid = llm.engine.add_request(prompt, SamplingParams(max_tokens=n, temperature=0.0))
    llm.engine.step()
    req = llm.engine.requests[rid]
    assert not req.finished and not req.prefilled
    assert llm.runner.input_batch.stop[req.slot] == (n == 1)
    while llm.engine.has_unfinished():
        llm.engine.step()
    assert llm.engine.pop_output(rid).token_ids == ops.token_ids


class WordTokenizer:
    """Token i decodes to ``"w<i> "``."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(f"w{i} " for i in ids if not (skip_special_tokens and i == EOS))


def test_stop_strings_stay_on_the_host(exact, S):
    stop = f"w{S[4]} "
    outs = {}
    for mode in ("engine", "ops"):
        llm = make_llm(exact(), mode, tokenizer=WordTokenizer())
        p = SamplingParams(max_tokens=20, temperature=0.0, stop=[stop])
        outs[mode] = llm.generate([PROMPT], p, use_tqdm=False)[0]
        assert llm.engine.block_manager.num_free == llm.runner.num_blocks
    for o in outs.values():
        assert o.token_ids == S[:5] and o.finish_reason == "stop"
        assert o.text == "".join(f"w{t} " for t in S[:4])


def test_requests_the_ops_cannot_serve_are_refused(exact, S):
    llm = make_llm(exact(), "ops")
    params = [
        SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=5, temperature=0.0, stop_token_ids=[3, 4, 5, 6, 7, 8]),
        SamplingParams(max_tokens=5, temperature=0.0, stop_token_ids=[3, 4, 5, 6, 7]),
    ]
    outs = llm.generate([PROMPT] * 3, params, use_tqdm=False)
    assert outs[0].finish_reason == "error" and "ignore_eos=True" in outs[0].error
    assert "stop_handling='engine'" in outs[0].error
    assert outs[1].finish_reason == "error" and "6 stop_token_ids" in outs[1].error
    assert outs[2].error is None and outs[2].token_ids == S[:4] + [EOS]
    # "engine" mode serves both
    outs = make_llm(exact(), "engine").generate([PROMPT] * 2, params[:2], use_tqdm=False)
    assert [o.token_ids for o in outs] == [S[:5], S[:5]]


def test_a_batch_mixing_the_cases_gives_each_its_own_result(exact, S):
    """Stop token ids, limits and EOS stops are per request (stop_seqs rows, max_dec_len), with
    requests of one batch ending at different steps."""
    cases = [
        dict(max_tokens=20, stop_token_ids=[S[8]]),
        dict(max_tokens=7),
        dict(max_tokens=20, stop_token_ids=[S[5]]),
        dict(max_tokens=1),
        dict(max_tokens=12, stop_token_ids=[S[20]]),
        dict(max_tokens=20, stop_token_ids=[S[0], S[3]]),
    ]
    ckpt = exact()
    alone = [run(ckpt, "ops", **c).token_ids for c in cases]
    llm = make_llm(ckpt, "ops", max_num_seqs=3)  # requests join as others finish
    params = [SamplingParams(temperature=0.0, **c) for c in cases]
    outs = llm.generate([PROMPT] * len(cases), params, use_tqdm=False)
    assert [o.token_ids for o in outs] == alone
    assert alone[1] == S[:6] + [EOS] and alone[3] == [EOS] and alone[4] == S[:11] + [EOS]
    assert llm.engine.block_manager.num_free == llm.runner.num_blocks


def test_a_limit_the_ops_miss_is_an_error_not_a_silent_stop(exact):
    llm = make_llm(exact(), "ops")
    limit = llm.runner._max_dec_len
    llm.runner._max_dec_len = lambda p, n: limit(p, n) + 3  # a broken runner
    with pytest.raises(RuntimeError, match="the ops did not stop it"):
        llm.generate([PROMPT], SamplingParams(max_tokens=6, temperature=0.0), use_tqdm=False)


def test_cli_stop_handling_flag(exact, S, capsys):
    args = ["generate", "--model", str(exact()), "--prompt-ids", " ".join(map(str, PROMPT))]
    args += ["--max-tokens", "4", "--no-progress", "--max-model-len", str(L)]
    spec = ["--speculative-method", "mtp", "--num-speculative-tokens", "4"]
    assert cli_main(args + spec + ["--stop-handling", "ops"]) == 0
    out = capsys.readouterr().out
    assert f"token_ids: {S[:3] + [EOS]}" in out and "finish_reason: length" in out
    assert cli_main(args + spec + ["--stop-handling", "ops", "--ignore-eos"]) == 1
    assert "ignore_eos=True" in capsys.readouterr().out
    assert cli_main(args + ["--stop-handling", "ops"]) == 2
    assert "--stop-handling needs --speculative-method" in capsys.readouterr().err


@pytest.mark.parametrize(
    "spec",
    [
        dict(verification="rejection"),
        dict(verification="rejection", draft_sampling=True, draft_policy="adaptive"),
        dict(verification="topp"),
    ],
    ids=["rejection", "draft_sampling_adaptive", "topp"],
)
def test_sampled_requests_end_by_upstream_rules(tmp_path, spec):
    """Sampled requests (stop token ids, EOS ids [2, 133] that sampling meets, max_tokens 1..19)
    under every sampling verifier: each output ends with an EOS id and holds none before it (an
    EOS id, the EOS id written at max_tokens, or the one after a stop token id), and the finish
    reason is "length" exactly when it has max_tokens tokens."""
    ckpt = write_exact_draft_checkpoint(tmp_path / "m", seed=3, context=0.3, eos_token_id=[2, 133])
    rng = np.random.default_rng(1)
    ps = [[int(t) for t in rng.integers(3, 300, n)] for n in rng.integers(1, 20, 32)]
    params = [
        SamplingParams(
            max_tokens=int(n), temperature=0.9, top_k=20, seed=i, stop_token_ids=[int(s)]
        )
        for i, (n, s) in enumerate(zip(rng.integers(1, 20, 32), rng.integers(3, 300, 32)))
    ]
    full = {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 3, **spec}
    llm = fd_mtp.LLM(
        str(ckpt),
        speculative_config={**full, "stop_handling": "ops"},
        max_num_seqs=8,
        max_model_len=L,
        block_size=4,
        max_num_batched_tokens=32,
    )
    outs = llm.generate(ps, params, use_tqdm=False)
    reasons = [o.finish_reason for o in outs]
    assert "stop" in reasons and "length" in reasons
    for o, p in zip(outs, params):
        assert o.token_ids[-1] in (2, 133) and not {2, 133} & set(o.token_ids[:-1])
        assert (o.finish_reason == "length") == (len(o.token_ids) == p.max_tokens)
    assert llm.speculative_metrics.num_drafted > 0
    assert llm.engine.block_manager.num_free == llm.runner.num_blocks
