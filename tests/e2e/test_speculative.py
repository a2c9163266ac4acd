"""Speculative decoding end to end (fd_mtp.LLM with speculative_config) on tiny checkpoints.

Greedy equivalence: with greedy verification, speculative generation equals plain greedy
generation token for token, for K = 1..5, num_model_steps = 1..K, hybrid mode on and off, batches
of 1 to 16 with mixed prompt lengths, requests joining mid-run, chunked prefill and KV blocks
running out. Three drafters: an MTP head whose drafts are always right (every accept path runs,
acceptance exactly 100%), one right about half the time, and a random one (nothing accepted).
Sampling: "target_match" verification reproduces plain seeded sampling token for token;
"rejection" (lossless speculative sampling) matches plain sampling in distribution (a bounded,
seeded chi-square test). Invariants of spec §1.4 between the target and the proposer hold after
every step.

Stop handling (``SpeculativeConfig.stop_handling``): the core greedy cases (every K and
num_model_steps, batches joining mid-run, chunked prefill, KV blocks running out, stops inside an
accepted run, random engines) run in both modes. "engine" (the host stops requests as plain
decoding does) must equal plain decoding; "ops" (FastDeploy's configuration: the ops end
requests, ``ignore_eos`` refused) must equal plain decoding's token stream under upstream's stop
rules (`ops_expected`: an EOS id ends the request and is kept; the token at the request's limit is
replaced by the first EOS id and the finish reason is "length"). "ops" runs on the same weights
with a second EOS id that greedy decoding meets (``*_eos`` checkpoints: about a quarter of the
requests end at it, often inside an accepted run). The rules themselves are tested case by case
in tests/e2e/test_ops_stop_path.py.
"""

import dataclasses

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.engine.draft_policy import (  # noqa: E402
    AdaptiveDraftPolicy,
    DraftPlan,
    FixedDraftPolicy,
    StepCostModel,
)
from fd_mtp.engine.request import SpeculativeMetrics  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint, write_random_checkpoint  # noqa: E402

GREEDY = dict(temperature=0.0, ignore_eos=True)
L = 128


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("spec")
    return {
        "exact": write_exact_draft_checkpoint(root / "exact", seed=3),
        "mixed": write_exact_draft_checkpoint(root / "mixed", seed=3, context=0.3),
        "random": write_random_checkpoint(root / "random", seed=4),
        # the same weights with a second EOS id that greedy decoding meets in some requests
        # (stop_handling "ops" then ends those requests inside accepted runs); the first EOS id
        # (2, never generated) is what verify writes at max_tokens
        "exact_eos": write_exact_draft_checkpoint(root / "exact_eos", seed=3, eos_token_id=[2, 87]),
        "mixed_eos": write_exact_draft_checkpoint(
            root / "mixed_eos", seed=3, context=0.3, eos_token_id=[2, 133]
        ),
        "random_eos": write_random_checkpoint(root / "random_eos", seed=4, eos_token_id=[2, 147]),
    }


def prompts(lengths, seed=0, vocab=300):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, vocab, n)] for n in lengths]


def llm_for(ckpt, spec=None, **kw):
    kw.setdefault("max_num_seqs", 4)
    kw.setdefault("max_model_len", L)
    kw.setdefault("block_size", 8)
    return fd_mtp.LLM(str(ckpt), speculative_config=spec, **kw)


_PLAIN: dict = {}


def plain_tokens(ckpt, ps, params, **kw):
    """Plain-decoding outputs (cached per checkpoint, prompts, params and `llm_for` keywords)."""
    key = (str(ckpt), repr(ps), repr(params), repr(sorted(kw.items())))
    if key not in _PLAIN:
        outs = llm_for(ckpt, max_num_seqs=8, **kw).generate(ps, params, use_tqdm=False)
        _PLAIN[key] = [o.token_ids for o in outs]
    return _PLAIN[key]


def mtp(k, steps=None, **kw):
    return {
        "method": "mtp",
        "num_speculative_tokens": k,
        "num_model_steps": k if steps is None else steps,
        "verification": "greedy",
        **kw,
    }


MODES = ["engine", "ops"]


def with_mode(spec, mode):
    """``spec`` (a dict) with ``stop_handling = mode``."""
    return {**spec, "stop_handling": mode}


def greedy_params(n, mode, **kw):
    """Greedy SamplingParams of ``n`` tokens: ignoring EOS in "engine" mode (as plain decoding is
    run), not in "ops" mode (which refuses ignore_eos)."""
    return SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=mode == "engine", **kw)


def ops_expected(stream, limit, eos_ids):
    """Upstream's stop rules (stop_handling "ops", no stop token ids) applied to a greedy token
    stream: ``(tokens, finish_reason)``. Token k (1-based) ends the request when k == limit
    (speculate_verify's ``step_idx >= max_dec_len``: the token becomes ``eos_ids[0]``, reason
    "length", FastDeploy's "token count == max_tokens") or when it is an EOS id (kept; "stop")."""
    out = []
    for k, t in enumerate(stream[:limit], 1):
        if k == limit:
            return out + [eos_ids[0]], "length"
        out.append(t)
        if t in eos_ids:
            return out, "stop"
    raise AssertionError(f"the stream has {len(stream)} tokens, fewer than the limit {limit}")


def expected_outputs(ckpt, ps, max_tokens, mode, eos_ids):
    """What speculative greedy generation must give per mode: plain decoding's output ("engine"),
    or `ops_expected` of plain decoding's stream ("ops")."""
    stream = plain_tokens(ckpt, ps, [SamplingParams(max_tokens=n, **GREEDY) for n in max_tokens])
    if mode == "engine":
        return [(w, "length") for w in stream]
    # every LLM of this module has max_model_len L
    return [ops_expected(w, min(n, L - len(p)), eos_ids) for w, n, p in zip(stream, max_tokens, ps)]


def check_equal(ckpt, spec, ps, max_tokens, mode="engine", **llm_kw):
    params = [greedy_params(n, mode) for n in max_tokens]
    llm = llm_for(ckpt, with_mode(spec, mode), **llm_kw)
    outs = llm.generate(ps, params, use_tqdm=False)
    want = expected_outputs(ckpt, ps, max_tokens, mode, llm.runner.eos_token_ids)
    for i, (o, (w, reason)) in enumerate(zip(outs, want)):
        assert o.error is None and o.finish_reason == reason, (i, o.error, o.finish_reason)
        assert o.token_ids == w, f"request {i} ({mode}): speculative {o.token_ids} != {w}"
    return llm, outs


GRID = [(k, s) for k in range(1, 6) for s in range(1, k + 1)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k,steps", GRID)
def test_greedy_equals_plain_for_every_k_and_num_model_steps(ckpts, k, steps, mode):
    ps = prompts([5, 1, 17, 9, 3, 30], seed=k)
    ckpt = ckpts["mixed" if mode == "engine" else "mixed_eos"]
    llm, outs = check_equal(ckpt, mtp(k, steps), ps, [12, 9, 14, 6, 11, 10], mode)
    m = llm.speculative_metrics
    assert m.num_drafted > 0 and 0 < m.num_accepted < m.num_drafted  # both paths ran
    assert m.drafted_per_position[steps:] == [0] * (k - steps)  # no hybrid: num_model_steps drafts
    assert SpeculativeMetrics.total(outs).num_emitted == m.num_emitted


@pytest.mark.parametrize("which", ["mixed", "exact"])
@pytest.mark.parametrize("k,steps", [(2, 1), (3, 1), (4, 2), (5, 3), (5, 1)])
def test_hybrid_ngram_extension_keeps_greedy_output(ckpts, which, k, steps):
    # prompts that contain the model's own continuation (q + plain(q) + q), so that the n-gram
    # extension finds matches for the drafts' history
    ckpt = ckpts[which]
    qs = prompts([6, 4, 8], seed=20 + k)
    cont = plain_tokens(ckpt, qs, [SamplingParams(max_tokens=12, **GREEDY)] * 3)
    ps = [q + c + q for q, c in zip(qs, cont)] + prompts([7], seed=30)
    llm, _ = check_equal(ckpt, mtp(k, steps, mtp_strategy="with_ngram"), ps, [16, 12, 18, 10])
    m = llm.speculative_metrics
    assert llm.runner.proposer.hybrid_mode
    assert sum(m.drafted_per_position[steps:]) > 0  # n-gram drafts were proposed after the MTP's
    if which == "exact":
        assert sum(m.accepted_per_position[steps:]) > 0


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_exact_drafts_are_all_accepted(ckpts, k):
    ps = prompts([4, 11, 2, 25], seed=40 + k)
    llm, outs = check_equal(ckpts["exact"], mtp(k), ps, [20, 17, 23, 15])
    m = llm.speculative_metrics
    assert m.num_accepted == m.num_drafted > 0
    assert m.acceptance_per_position == [1.0] * k
    # every decode step accepts all K drafts except where a request ends inside its last step
    assert m.mean_accepted_length > 1 + k - 1.0
    for o in outs:
        assert o.metrics.spec.acceptance_rate == 1.0


def test_random_drafter_changes_nothing(ckpts):
    llm, _ = check_equal(ckpts["random"], mtp(3, 2), prompts([6, 13, 2], seed=50), [10, 8, 12])
    assert llm.speculative_metrics.num_drafted > 0


@pytest.mark.parametrize("mode", MODES)
def test_ngram_method_equals_plain(ckpts, mode):
    base = prompts([5, 7], seed=60)
    ps = [b * 3 for b in base] + prompts([9], seed=61)
    spec = {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "verification": "greedy",
        "max_ngram_size": 3,
    }
    ckpt = ckpts["mixed" if mode == "engine" else "mixed_eos"]
    llm, _ = check_equal(ckpt, spec, ps, [14, 12, 9], mode)
    assert llm.speculative_metrics.num_drafted > 0


@pytest.mark.parametrize("mode", MODES)
def test_batches_of_1_to_16_with_requests_joining_mid_run(ckpts, mode):
    ckpt = ckpts["mixed" if mode == "engine" else "mixed_eos"]
    ps = prompts([3, 8, 1, 21, 5, 13, 2, 9, 17, 4, 6, 30, 11, 7, 1, 15], seed=70)
    n = [9, 12, 7, 10, 14, 6, 11, 8, 13, 9, 5, 12, 10, 7, 11, 8]
    params = [greedy_params(k, mode) for k in n]
    want = [w for w, _ in expected_outputs(ckpt, ps, n, mode, [2, 133])]
    spec = with_mode(mtp(3, 2), mode)
    # batch of one
    single = llm_for(ckpt, spec, max_num_seqs=1).generate(ps[:3], params[:3], use_tqdm=False)
    assert [o.token_ids for o in single] == want[:3]
    # 16 slots, requests arriving while others decode
    llm = llm_for(ckpt, spec, max_num_seqs=16, max_num_batched_tokens=64)
    engine = llm.engine
    ids = [engine.add_request(ps[i], params[i]) for i in range(4)]
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        if steps in (1, 2, 4, 7) and len(ids) < 16:
            ids += [
                engine.add_request(ps[i], params[i]) for i in range(len(ids), min(len(ids) + 3, 16))
            ]
    while len(ids) < 16:  # late arrivals into an idle engine
        ids.append(engine.add_request(ps[len(ids)], params[len(ids)]))
        while engine.has_unfinished():
            engine.step()
    assert [engine.pop_output(r).token_ids for r in ids] == want


@pytest.mark.parametrize("mode", MODES)
def test_chunked_prefill(ckpts, mode):
    ps = prompts([41, 23, 3, 57], seed=80)
    # 8 tokens per step: the long prompts are prefilled in chunks, and decodes (4 tokens each with
    # K = 3) leave the chunked prefills some steps with no budget at all (they sit those out)
    eos = "" if mode == "engine" else "_eos"
    llm, outs = check_equal(
        ckpts["mixed" + eos], mtp(3, 3), ps, [10, 12, 9, 8], mode, max_num_batched_tokens=8
    )
    assert outs[3].metrics.num_steps >= 57 // 8
    check_equal(ckpts["exact" + eos], mtp(2, 2), ps, [10, 12, 9, 8], mode, max_num_batched_tokens=5)


@pytest.mark.parametrize("mode", MODES)
def test_kv_blocks_running_out(ckpts, mode):
    ps = prompts([9, 12, 6, 10], seed=90)
    n = [14, 12, 16, 13]
    # block_size 4: each request needs up to 8 blocks (+ draft lookahead); 18 blocks for 4 slots
    kw = dict(block_size=4, max_num_batched_tokens=16)
    eos = "" if mode == "engine" else "_eos"
    llm, outs = check_equal(ckpts["mixed" + eos], mtp(3, 2), ps, n, mode, num_gpu_blocks=18, **kw)
    assert llm.engine.num_preemptions > 0
    assert sum(o.metrics.num_preemptions for o in outs) == llm.engine.num_preemptions
    assert llm.engine.block_manager.num_free == 18
    kw = dict(block_size=4, max_num_batched_tokens=32)
    llm, _ = check_equal(ckpts["exact" + eos], mtp(4, 4), ps, n, mode, num_gpu_blocks=12, **kw)
    assert llm.engine.num_preemptions > 0


def test_proposer_agrees_with_the_target_after_every_step(ckpts):
    """Spec §1.4 / §13: after a step, a running request's proposer state is the target's advanced by
    the draft substeps: step_idx and seq_lens_decoder are num_model_steps - 1 ahead, its pre_ids
    hold the generated tokens one column to the left of the target's (proposer token k at k - 1)
    followed by the drafts, and the target's draft row is [last token, drafts].
    """
    steps = 3
    llm = llm_for(ckpts["mixed"], mtp(3, steps), max_num_seqs=6, max_num_batched_tokens=32)
    engine, runner = llm.engine, llm.runner
    mi, si = runner.proposer.model_inputs, runner.share_inputs
    ps = prompts([7, 19, 3, 12, 26], seed=100)
    rids = [engine.add_request(p, SamplingParams(max_tokens=18, **GREEDY)) for p in ps]
    checked = 0
    while engine.has_unfinished():
        engine.step()
        t_step, t_dec = si["step_idx"].numpy().ravel(), si["seq_lens_decoder"].numpy().ravel()
        t_pre, t_draft = si["pre_ids"].numpy(), si["draft_tokens"].numpy()
        t_this = si["seq_lens_this_time"].numpy().ravel()
        d_step, d_dec = mi["step_idx"].numpy().ravel(), mi["seq_lens_decoder"].numpy().ravel()
        d_pre, d_stop = mi["pre_ids"].numpy(), mi["stop_flags"].numpy().ravel()
        d_this = mi["seq_lens_this_time"].numpy().ravel()
        for req in engine.running:
            b = req.slot
            if not req.prefilled or d_stop[b]:
                continue
            n = int(t_step[b])
            assert n == len(req.output_token_ids)
            assert t_dec[b] == req.num_computed == req.num_tokens - 1
            assert d_step[b] == n + steps - 1 and d_dec[b] == t_dec[b] + steps - 1
            assert list(t_pre[b, 1 : n + 1]) == req.output_token_ids
            assert list(d_pre[b, :n]) == req.output_token_ids
            drafts = list(d_pre[b, n : n + steps - 1]) + [int(t_draft[b, steps])]
            assert list(t_draft[b, : steps + 1]) == [req.output_token_ids[-1]] + drafts
            assert t_this[b] == 1 + steps and d_this[b] == 1
            checked += 1
    assert checked > 20
    assert all(engine.pop_output(r).finish_reason == "length" for r in rids)


SAMPLED = dict(temperature=0.9, top_p=0.95, top_k=40, ignore_eos=True)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("which,k,steps", [("mixed", 3, 3), ("exact", 2, 1), ("random", 2, 2)])
def test_target_match_reproduces_plain_seeded_sampling(ckpts, which, k, steps, mode):
    """ "ops": the plain seeded stream under upstream's stop rules (sampled tokens may be EOS)."""
    ps = prompts([6, 15, 2, 9], seed=110)
    params = [
        SamplingParams(max_tokens=12, seed=s, repetition_penalty=1.0, **SAMPLED)
        for s in (5, 6, 7, 8)
    ]
    want = plain_tokens(ckpts[which], ps, params)
    spec = with_mode(mtp(k, steps, verification="target_match"), mode)
    llm = llm_for(ckpts[which], spec, block_size=4, num_gpu_blocks=22, max_num_batched_tokens=12)
    if mode == "ops":
        want = [ops_expected(w, 12, [2])[0] for w in want]
        params = [dataclasses.replace(p, ignore_eos=False) for p in params]
    assert [o.token_ids for o in llm.generate(ps, params, use_tqdm=False)] == want
    assert llm.speculative_metrics.num_drafted > 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("verification", ["topp", "topk"])
def test_candidate_verification(ckpts, verification, mode):
    """FastDeploy's candidate rules: greedy requests keep only the argmax candidate (greedy output);
    sampled requests accept drafts among the top-p candidates (not lossless: only validity is
    checked; "ops": a request ends at an EOS id or with the EOS id as its 12th token)."""
    ps = prompts([6, 15, 2], seed=140)
    ckpt = ckpts["mixed" if mode == "engine" else "mixed_eos"]
    llm = llm_for(ckpt, with_mode(mtp(3, 2, verification=verification), mode), seed=5)
    want = expected_outputs(ckpt, ps, [12] * 3, mode, [2, 133])
    greedy = [greedy_params(12, mode)] * 3
    outs = llm.generate(ps, greedy, use_tqdm=False)
    assert [(o.token_ids, o.finish_reason) for o in outs] == want
    sampled = [
        SamplingParams(max_tokens=12, seed=s, **{**SAMPLED, "ignore_eos": mode == "engine"})
        for s in (1, 2, 3)
    ]
    outs = llm.generate(ps, sampled, use_tqdm=False)
    assert all(0 <= t < 300 for o in outs for t in o.token_ids)
    for o in outs:
        if mode == "engine":
            assert o.finish_reason == "length" and len(o.token_ids) == 12
        else:  # ends at its first EOS id, or with the EOS id written at max_tokens
            assert not {2, 133} & set(o.token_ids[:-1])
            if o.finish_reason == "length":
                assert len(o.token_ids) == 12 and o.token_ids[-1] == 2
            else:
                assert o.finish_reason == "stop" and o.token_ids[-1] in (2, 133)
                assert len(o.token_ids) < 12
    assert llm.speculative_metrics.num_accepted > 0


def _chi2_homogeneity(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """Two-sample chi-square statistic over the union of categories (rare ones pooled)."""
    keys, counts = {}, []
    for arr, col in ((a, 0), (b, 1)):
        for x in map(tuple, arr):
            if x not in keys:
                keys[x] = len(counts)
                counts.append([0, 0])
            counts[keys[x]][col] += 1
    c = np.array(counts, dtype=np.float64)
    big = c.sum(axis=1) >= 10
    c = np.vstack([c[big], c[~big].sum(axis=0, keepdims=True)]) if (~big).any() else c[big]
    c = c[c.sum(axis=1) > 0]
    expected = c.sum(axis=1, keepdims=True) * c.sum(axis=0, keepdims=True) / c.sum()
    return float(((c - expected) ** 2 / expected).sum()), c.shape[0] - 1


def sampled_params(n, first_seed, **kw):
    """``n`` seeded sampling requests of 3 tokens (top-k 3, EOS ignored; seeds ``first_seed``,
    ``first_seed + 1``, ...; ``kw``: temperature, top_p)."""
    return [
        SamplingParams(max_tokens=3, seed=first_seed + i, top_k=3, ignore_eos=True, **kw)
        for i in range(n)
    ]


def assert_same_distribution(ckpt, llm, prompt, params):
    """``params`` on ``prompt`` (repeated) with plain decoding of ``ckpt`` and with ``llm``: the
    outputs have the same joint distribution (seeded chi-square homogeneity: the statistic is below
    dof + 3.1 sqrt(2 dof) + 10, above chi-square's 99.9% quantile for these dof); -> (plain rows,
    llm's rows)."""
    n = len(params)
    plain = llm_for(ckpt, max_num_seqs=64).generate([prompt] * n, params, use_tqdm=False)
    out = llm.generate([prompt] * n, params, use_tqdm=False)
    a = np.array([o.token_ids for o in plain])
    b = np.array([o.token_ids for o in out])
    stat, dof = _chi2_homogeneity(a, b)
    assert dof >= 8 and stat < dof + 3.1 * np.sqrt(2 * dof) + 10, (stat, dof)
    return a, b


def test_rejection_sampling_matches_plain_sampling_in_distribution(ckpts):
    """Lossless speculative sampling: the first three generated tokens of 1200 seeded requests have
    the same joint distribution with and without speculation (chi-square homogeneity, seeded, so
    the outcome is fixed). Some drafts are accepted and more are rejected: both the accept and the
    resample branches of the verifier shape the output."""
    ckpt = ckpts["mixed"]
    n_req = 1200
    prompt = prompts([6], seed=120)[0]
    params = sampled_params(n_req, 1000, temperature=1.0)
    llm = llm_for(ckpt, mtp(2, 2, verification="rejection"), max_num_seqs=64, seed=11)
    a, _ = assert_same_distribution(ckpt, llm, prompt, params)
    m = llm.speculative_metrics
    assert m.num_accepted > 300 and m.num_drafted - m.num_accepted > 300, m.summary()
    # the same test tells a different distribution apart: greedy tokens
    greedy = llm_for(ckpt, max_num_seqs=64).generate(
        [prompt] * 50, SamplingParams(max_tokens=3, **GREEDY), use_tqdm=False
    )
    g = np.array([o.token_ids for o in greedy] * (n_req // 50))
    stat_g, dof_g = _chi2_homogeneity(a, g)
    assert stat_g > dof_g + 3.1 * np.sqrt(2 * dof_g) + 10


def test_bad_speculative_settings(ckpts, tmp_path):
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        llm_for(ckpts["mixed"], {"method": "mtp", "num_speculative_tokens": 6})
    with pytest.raises(ValueError, match="num_gpu_block_expand_ratio"):
        llm_for(ckpts["mixed"], {"method": "mtp", "num_gpu_block_expand_ratio": 0.5})
    with pytest.raises(ValueError, match="unknown fields"):
        llm_for(ckpts["mixed"], {"method": "mtp", "num_speculative_token": 2})
    no_mtp = write_random_checkpoint(
        tmp_path / "nomtp", seed=1, with_mtp=False, num_nextn_predict_layers=0
    )
    with pytest.raises(ValueError, match="needs an MTP block"):
        llm_for(no_mtp, {"method": "mtp"})
    # greedy verification refuses a sampled request (its output would silently be greedy)
    llm = llm_for(ckpts["mixed"], mtp(2))
    outs = llm.generate(
        [[5, 6], [7, 8]],
        [SamplingParams(max_tokens=3, temperature=0.7), SamplingParams(max_tokens=3, **GREEDY)],
        use_tqdm=False,
    )
    assert outs[0].finish_reason == "error" and "verification='greedy'" in outs[0].error
    assert outs[1].finish_reason == "length" and len(outs[1].token_ids) == 3


@pytest.mark.parametrize("mode", MODES)
def test_stops_inside_an_accepted_run(ckpts, mode):
    """A stop token id, EOS or max_tokens reached in the middle of a step's accepted drafts ends the
    request there: later tokens of that step are dropped, as plain decoding never produces them.
    "ops": speculate_set_stop_value_multi_seqs replaces the token after the stop token id by the
    EOS id, and verify the 13th token of request 1 (its max_tokens) by the EOS id."""
    ckpt = ckpts["exact"]
    ps = prompts([5, 8], seed=130)
    plain = plain_tokens(ckpt, ps, [SamplingParams(max_tokens=24, **GREEDY)] * 2)
    stop_tok = plain[0][9]  # the 10th token of request 0 (inside the third step's run of 5)
    params = [
        SamplingParams(max_tokens=24, temperature=0.0, stop_token_ids=[stop_tok]),
        greedy_params(13, mode),
    ]
    want = plain_tokens(ckpt, ps, [params[0], SamplingParams(max_tokens=13, **GREEDY)])
    llm = llm_for(ckpt, with_mode(mtp(4), mode))
    outs = llm.generate(ps, params, use_tqdm=False)
    if mode == "engine":
        assert [o.token_ids for o in outs] == want
    else:
        assert outs[0].token_ids == want[0] + [2]  # the EOS id replaces the token after the stop
        assert outs[1].token_ids == want[1][:12] + [2]
    assert want[0][-1] == stop_tok
    assert outs[0].finish_reason == "stop"
    assert len(outs[1].token_ids) == 13 and outs[1].finish_reason == "length"
    assert llm.engine.block_manager.num_free == llm.runner.num_blocks


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _random_engine_equals_plain(ckpts, data, mode):
    k = data.draw(st.integers(1, 5), label="K")
    steps = data.draw(st.integers(1, k), label="num_model_steps")
    hybrid = data.draw(st.booleans(), label="hybrid") and k > steps
    which = data.draw(st.sampled_from(["mixed", "exact", "random"]), label="checkpoint")
    n = data.draw(st.integers(1, 7), label="requests")
    lengths = data.draw(
        st.lists(st.integers(1, 40), min_size=n, max_size=n), label="prompt lengths"
    )
    max_tokens = data.draw(st.lists(st.integers(1, 20), min_size=n, max_size=n), label="max_tokens")
    slots = data.draw(st.integers(1, 4), label="max_num_seqs")
    budget = data.draw(st.integers(4, 64), label="max_num_batched_tokens")
    block_size = data.draw(st.sampled_from([1, 4, 8, 16]), label="block_size")
    lookahead = k + steps
    need = max(-(-(ln + m + lookahead) // block_size) for ln, m in zip(lengths, max_tokens))
    blocks = data.draw(st.integers(need, need * slots + 2), label="num_gpu_blocks")
    ps = prompts(lengths, seed=data.draw(st.integers(0, 10**6), label="prompt seed"))
    spec = mtp(k, steps, mtp_strategy="with_ngram" if hybrid else "default")
    llm, _ = check_equal(
        ckpts[which if mode == "engine" else which + "_eos"],
        spec,
        ps,
        max_tokens,
        mode,
        max_num_seqs=slots,
        max_num_batched_tokens=budget,
        block_size=block_size,
        num_gpu_blocks=blocks,
    )
    assert llm.engine.block_manager.num_free == blocks and not llm.engine.running


_HYPOTHESIS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(max_examples=40, **_HYPOTHESIS)
@given(data=st.data())
def test_random_engines_equal_plain_greedy(ckpts, data):
    """Property: for random K, num_model_steps, hybrid mode, drafter, batch composition, token budget,
    block size and KV-cache size, greedy speculative generation equals plain greedy generation
    (stop_handling "engine")."""
    _random_engine_equals_plain(ckpts, data, "engine")


@settings(max_examples=20, **_HYPOTHESIS)
@given(data=st.data())
def test_random_engines_ops_stop_path_follow_upstream_rules(ckpts, data):
    """The same property with stop_handling "ops" (fewer examples): the output is plain greedy
    decoding's stream under upstream's stop rules (`ops_expected`)."""
    _random_engine_equals_plain(ckpts, data, "ops")


# -- draft length policies, per-request control, draft sampling (issue 18) --------------------------


class ShufflingPolicy(FixedDraftPolicy):
    """A draft policy that draws, every step, the substep count, every slot's cap and a few
    switch-offs at random (seeded): greedy output must not depend on any of it."""

    def __init__(self, B, K, steps, seed, drop_p=0.04):
        super().__init__(B, K, steps)
        self.rng = np.random.default_rng(seed)
        self.drop_p = drop_p

    def plan(self, decoding):
        rng = self.rng
        steps = int(rng.integers(1, self.num_model_steps + 1))
        caps = np.minimum(
            rng.integers(0, self.K + 1, self.cap.size), np.where(self.off, 0, self.cap)
        )
        drop = []
        for b in np.flatnonzero(decoding & ~self.off):
            if rng.random() < self.drop_p:
                drop.append((int(b), "low_acceptance"))
                self.off[b] = True
                caps[b] = 0
                self.metrics.off_reasons["low_acceptance"] += 1
        self._record(caps, decoding, steps)
        return DraftPlan(steps, caps, drop)


def shuffled(llm, seed):
    """Give ``llm``'s runner a `ShufflingPolicy`; returns it."""
    r = llm.runner
    r.draft_policy = ShufflingPolicy(
        r.max_num_seqs, r.num_speculative_tokens, r.spec_config.num_model_steps, seed
    )
    return r.draft_policy


@pytest.mark.parametrize(
    "spec",
    [
        mtp(2),
        mtp(3),
        mtp(5, 4),
        mtp(3, 1, mtp_strategy="with_ngram"),
        mtp(3, verification="rejection", draft_sampling=True),
    ],
    ids=["k2", "k3", "k5s4", "hybrid3", "draft_sampling"],
)
def test_greedy_equals_plain_whatever_the_draft_plan(ckpts, spec):
    ckpt = ckpts["mixed"]
    ps = prompts([5, 1, 17, 9, 3, 30, 4], seed=80)
    params = [SamplingParams(max_tokens=n, **GREEDY) for n in [20, 14, 22, 9, 18, 16, 25]]
    llm = llm_for(ckpt, spec)
    policy = shuffled(llm, seed=7)
    outs = llm.generate(ps, params, use_tqdm=False)
    for i, (o, w) in enumerate(zip(outs, plain_tokens(ckpt, ps, params))):
        assert o.token_ids == w, f"request {i}: speculative {o.token_ids} != plain {w}"
    m = policy.metrics
    assert sum(1 for n in m.k_histogram if n) >= 3  # caps varied
    assert len(m.steps_histogram) == spec["num_model_steps"]  # every substep count ran
    assert m.off_reasons["low_acceptance"] > 0  # and slots were switched off mid-request
    assert llm.speculative_metrics.num_accepted > 0


@pytest.mark.parametrize("steps", [2, 3])
@pytest.mark.parametrize("chunk", [None, 6])
def test_exact_drafts_stay_exact_whatever_the_substeps(ckpts, steps, chunk):
    """The draft model's state (positions, KV cache, hidden states, rewinds) stays right when the
    substeps change every step and slots are switched off: the exact head's drafts are then all
    accepted, also with chunked prefill and requests joining mid-run."""
    ckpt = ckpts["exact"]
    ps = prompts([5, 1, 17, 9, 3, 30], seed=85)
    params = [SamplingParams(max_tokens=n, **GREEDY) for n in [24, 20, 26, 12, 22, 18]]
    kw = {} if chunk is None else {"max_num_batched_tokens": chunk}
    llm = llm_for(ckpt, mtp(3, steps), **kw)
    policy = shuffled(llm, seed=steps)
    outs = llm.generate(ps, params, use_tqdm=False)
    for i, (o, w) in enumerate(zip(outs, plain_tokens(ckpt, ps, params))):
        assert o.token_ids == w, f"request {i}"
    m = llm.speculative_metrics
    assert m.num_drafted > 50 and m.acceptance_rate == 1.0, m.summary()
    assert len(policy.metrics.steps_histogram) == steps


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("which", ["mixed", "exact", "random"])
def test_adaptive_policy_keeps_greedy_output(ckpts, which, mode):
    """The adaptive policy on measured costs (whatever it chooses, greedy output is plain's)."""
    spec = mtp(3, draft_policy="adaptive")
    ckpt = ckpts[which if mode == "engine" else which + "_eos"]
    llm, outs = check_equal(ckpt, spec, prompts([6, 2, 11, 8], seed=90), [24, 18, 20, 30], mode)
    m = llm.runner.draft_policy.metrics
    steps = llm.speculative_metrics.num_steps
    assert sum(m.k_histogram) >= steps - 4 and len(m.history) > 0
    if which == "exact" and llm.speculative_metrics.num_drafted:
        assert llm.speculative_metrics.acceptance_rate == 1.0


class FrozenCosts(StepCostModel):
    """A cost model measured once and then deaf to the clock: the policy's choices are a pure
    function of the acceptance it sees."""

    def __init__(self, alpha, beta, substep):
        super().__init__(window=1)
        for n in range(1, 65):
            super().observe_target(n, alpha + beta * n)
        for _ in range(4):
            super().observe_proposer(1, substep, 1.1 * substep)

    def observe_target(self, tokens, seconds):
        pass

    def observe_proposer(self, substeps, forward_seconds, run_seconds):
        pass


@pytest.mark.parametrize(
    "which,substep,drafting",
    [("exact", 0.0005, True), ("random", 0.0005, False), ("exact", 0.5, False)],
)
def test_adaptive_choices_follow_acceptance_and_costs(ckpts, which, substep, drafting):
    """With costs fixed (injected), the policy keeps drafting when drafts are right and cheap, and
    switches speculation off when they are never right or too expensive; output stays plain."""
    llm = llm_for(ckpts[which], mtp(3, draft_policy="adaptive"))
    r = llm.runner
    # windows of 2 steps: a switch-off needs 2 x 2 losing steps in a row (the requests are short)
    r.draft_policy = AdaptiveDraftPolicy(
        r.max_num_seqs, 3, 3, cost_model=FrozenCosts(0.01, 0.0005, substep), window=2
    )
    ps = prompts([6, 2, 11, 8], seed=91)
    params = [SamplingParams(max_tokens=n, **GREEDY) for n in [24, 18, 20, 30]]
    outs = llm.generate(ps, params, use_tqdm=False)
    assert [o.token_ids for o in outs] == plain_tokens(ckpts[which], ps, params)
    m = r.draft_policy.metrics
    if drafting:
        assert sum(m.k_histogram[2:]) > 2 * m.k_histogram[0] and not m.off_reasons
        assert llm.speculative_metrics.acceptance_rate == 1.0
    else:
        assert sum(m.off_reasons.values()) >= 4 and m.k_histogram[0] > sum(m.k_histogram[1:])


def test_per_request_speculation_off_and_caps(ckpts):
    ckpt = ckpts["exact"]
    ps = prompts([5, 8, 3, 10], seed=95)
    params = [SamplingParams(max_tokens=16, max_draft_tokens=n, **GREEDY) for n in (0, 1, None, 2)]
    llm = llm_for(ckpt, mtp(3))
    outs = llm.generate(ps, params, use_tqdm=False)
    for i, (o, w) in enumerate(zip(outs, plain_tokens(ckpt, ps, params))):
        assert o.token_ids == w, f"request {i}"
    specs = [o.metrics.spec for o in outs]
    assert specs[0].num_drafted == 0 and specs[0].mean_accepted_length == 1.0
    assert specs[1].drafted_per_position[1:] == [0, 0] and specs[1].drafted_per_position[0] > 0
    assert specs[2].drafted_per_position[2] > 0
    assert specs[3].drafted_per_position[2] == 0 and specs[3].drafted_per_position[1] > 0
    assert all(s.num_accepted == s.num_drafted for s in specs)  # the exact head: all accepted
    assert llm.runner.draft_policy.metrics.off_reasons == {"request": 1}
    # every request off: the proposer is skipped altogether, output still plain decoding's
    off = [SamplingParams(max_tokens=16, max_draft_tokens=0, **GREEDY)] * 4
    llm = llm_for(ckpt, mtp(3))
    outs = llm.generate(ps, off, use_tqdm=False)
    assert [o.token_ids for o in outs] == plain_tokens(ckpt, ps, off)
    assert llm.proposer_stats.calls == 0 and llm.speculative_metrics.num_drafted == 0


def test_draft_sampling_with_varying_draft_length_matches_plain_sampling(ckpts):
    """Drafts sampled from the MTP head (temperature 0.8, top-p 0.9) and verified with their
    probabilities (top-k 3 keeps the joint distribution small enough to test): the first three
    tokens of 1200 seeded requests have the same joint
    distribution as plain sampling (chi-square homogeneity, seeded), with the draft length,
    substeps and switch-offs drawn at random every step. Sampling the drafts accepts more of them
    than the argmax drafter does on the same requests."""
    ckpt = ckpts["mixed"]
    n_req = 1200
    prompt = prompts([6], seed=121)[0]
    params = sampled_params(n_req, 3000, temperature=0.8, top_p=0.9)
    spec = mtp(3, verification="rejection", draft_sampling=True)
    llm = llm_for(ckpt, spec, max_num_seqs=64, seed=13)
    policy = shuffled(llm, seed=5)
    assert_same_distribution(ckpt, llm, prompt, params)
    m = llm.speculative_metrics
    assert m.num_accepted > 300 and m.num_drafted - m.num_accepted > 300, m.summary()
    assert sum(1 for n in policy.metrics.k_histogram if n) == 4
    # the argmax drafter on the first 300 requests, same caps: fewer drafts accepted
    few = params[:300]
    argmax = llm_for(ckpt, mtp(3, verification="rejection"), max_num_seqs=64, seed=13)
    sampled = llm_for(ckpt, spec, max_num_seqs=64, seed=13)
    for x in (argmax, sampled):
        x.runner.draft_policy = FixedDraftPolicy(64, 3, 3)
        x.generate([prompt] * 300, few, use_tqdm=False)
    rate = [x.speculative_metrics.acceptance_per_position[0] for x in (argmax, sampled)]
    assert rate[1] > rate[0] + 0.05, rate


def test_adaptive_sampled_requests_match_plain_sampling(ckpts):
    """The adaptive policy (real costs, real acceptance) with draft sampling: same distribution
    as plain sampling (seeded chi-square), and the policy records its choices."""
    ckpt = ckpts["mixed"]
    n_req = 800
    prompt = prompts([5], seed=122)[0]
    params = sampled_params(n_req, 5000, temperature=0.8, top_p=0.9)
    spec = mtp(2, verification="rejection", draft_sampling=True, draft_policy="adaptive")
    llm = llm_for(ckpt, spec, max_num_seqs=64, seed=17)
    assert_same_distribution(ckpt, llm, prompt, params)
    assert sum(llm.runner.draft_policy.metrics.k_histogram) > 0
