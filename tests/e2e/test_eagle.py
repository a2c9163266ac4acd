"""EAGLE / EAGLE-3 drafting end to end (fd_mtp.LLM with speculative_config method "eagle" /
"eagle3" and a head directory), on the shipped demo model and on random dense and MoE
checkpoints, with heads written by `fd_mtp.testing.eagle`.

Greedy equivalence: speculative output equals plain greedy decoding token for token, with random
heads (almost nothing accepted: the reject paths) and with exact heads on bigram targets
(`write_exact_eagle_head`: every draft accepted, so every multi-token accept path and the d2t map
run; on a "mixed" target about half). Also under chunked prefill, preemption (KV blocks running
out), prefix caching on and off, the adaptive draft policy and every forward kind. Sampling:
"target_match" reproduces plain seeded sampling token for token; "rejection" and draft sampling
(EAGLE-3: draft probabilities over the target vocabulary through d2t) match plain sampling in
distribution (the chi-square test of tests/e2e/test_speculative.py).
"""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint, write_random_checkpoint  # noqa: E402
from fd_mtp.testing.eagle import write_exact_eagle_head, write_random_eagle_head  # noqa: E402

from .test_speculative import (  # noqa: E402
    GREEDY,
    L,
    assert_same_distribution,
    llm_for,
    ops_expected,
    plain_tokens,
    prompts,
    sampled_params,
)

METHODS = ["eagle", "eagle3"]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("eagle_e2e")
    targets = {
        "random": write_random_checkpoint(root / "random", seed=4, num_hidden_layers=4),
        "moe": write_random_checkpoint(
            root / "moe", seed=6, num_hidden_layers=3, moe_num_experts=4
        ),
        "exact": write_exact_draft_checkpoint(root / "exact", seed=3),
        "mixed": write_exact_draft_checkpoint(root / "mixed", seed=3, context=0.3),
        # a second EOS id greedy decoding meets (stop_handling "ops" ends requests at it)
        "mixed_eos": write_exact_draft_checkpoint(
            root / "mixed_eos", seed=3, context=0.3, eos_token_id=[2, 133]
        ),
    }
    out = {}
    for name, t in targets.items():
        for m in METHODS:
            if name in ("exact", "mixed", "mixed_eos"):
                head = write_exact_eagle_head(root / f"{name}_{m}", t, method=m, seed=1)
            else:
                head = write_random_eagle_head(root / f"{name}_{m}", t, method=m, seed=1)
            out[name, m] = (t, head)
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from fd_mtp.assets import default_model_path

    root = tmp_path_factory.mktemp("eagle_demo")
    target = default_model_path()
    return {
        m: (target, write_random_eagle_head(root / m, target, method=m, seed=2)) for m in METHODS
    }


def eagle(method, head, k, steps=None, **kw):
    return {
        "method": method,
        "model": str(head),
        "num_speculative_tokens": k,
        "num_model_steps": k if steps is None else steps,
        **kw,
    }


def check_equal(pair, method, k, ps, max_tokens, steps=None, spec_kw=None, plain_kw=None, **kw):
    ckpt, head = pair
    params = [SamplingParams(max_tokens=n, **GREEDY) for n in max_tokens]
    llm = llm_for(ckpt, eagle(method, head, k, steps, **(spec_kw or {})), **kw)
    outs = llm.generate(ps, params, use_tqdm=False)
    want = plain_tokens(ckpt, ps, params, **(plain_kw or {}))
    for i, (o, w) in enumerate(zip(outs, want)):
        assert o.error is None and o.token_ids == w, f"request {i}: {o.token_ids} != {w}"
    return llm, outs


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k,steps", [(1, 1), (3, 3), (4, 2)])
def test_random_head_greedy_equals_plain_dense_and_moe(ckpts, method, k, steps):
    ps = prompts([5, 1, 17, 9, 30], seed=k)
    for target in ("random", "moe"):
        llm, _ = check_equal(ckpts[target, method], method, k, ps, [12, 9, 14, 6, 10], steps)
        m = llm.speculative_metrics
        assert m.num_drafted > 0
        assert m.drafted_per_position[steps:] == [0] * (k - steps)  # num_model_steps drafts


@pytest.mark.parametrize("method", METHODS)
def test_exact_head_accepts_every_draft(ckpts, method):
    ps = prompts([5, 1, 17, 9], seed=7)
    for k in (1, 3, 5):
        llm, _ = check_equal(ckpts["exact", method], method, k, ps, [12, 9, 14, 20])
        m = llm.speculative_metrics
        assert m.num_drafted > 20 and m.acceptance_rate == 1.0, m.summary()


@pytest.mark.parametrize("method", METHODS)
def test_mixed_head_accepts_some_drafts(ckpts, method):
    llm, _ = check_equal(
        ckpts["mixed", method], method, 3, prompts([6, 2, 11, 8], seed=9), [24, 18, 20, 30]
    )
    m = llm.speculative_metrics
    assert 0 < m.num_accepted < m.num_drafted, m.summary()


@pytest.mark.parametrize("method", METHODS)
def test_demo_model_greedy_equals_plain(demo, method):
    ps = prompts([7, 23, 2], seed=11, vocab=200)
    llm, _ = check_equal(demo[method], method, 3, ps, [16, 12, 10])
    assert llm.speculative_metrics.num_drafted > 0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("forward", ["eager", "static"])
def test_other_forwards_keep_greedy_output(ckpts, method, forward):
    """The default forward is "native"; "eager" and "static" (the target's compiled program also
    returns EAGLE-3's aux streams; the head runs eagerly) give the same tokens."""
    ps = prompts([5, 13, 8], seed=21)
    for target in ("random", "mixed"):
        check_equal(ckpts[target, method], method, 3, ps, [10, 12, 8], forward=forward)


@pytest.mark.parametrize("method", METHODS)
def test_chunked_prefill(ckpts, method):
    ps = prompts([41, 23, 3, 57], seed=80)
    for target in ("mixed", "random"):
        llm, outs = check_equal(
            ckpts[target, method], method, 3, ps, [10, 12, 9, 8], max_num_batched_tokens=8
        )
        assert outs[3].metrics.num_steps >= 57 // 8


@pytest.mark.parametrize("method", METHODS)
def test_preemption_when_kv_blocks_run_out(ckpts, method):
    ps = prompts([9, 12, 6, 10], seed=90)
    n = [14, 12, 16, 13]
    kw = dict(block_size=4, max_num_batched_tokens=16, num_gpu_blocks=18)
    for target in ("mixed", "random"):
        llm, outs = check_equal(ckpts[target, method], method, 3, ps, n, 2, **kw)
        assert llm.engine.num_preemptions > 0
        assert llm.engine.block_manager.num_free == 18


@pytest.mark.parametrize("method", METHODS)
def test_prefix_caching_on_and_off_equal(ckpts, method):
    """A shared prefix served from the cache (the target's and the head's K/V in the same
    blocks) gives the tokens of an uncached run and of plain decoding."""
    rng = np.random.default_rng(3)
    prefix = [int(t) for t in rng.integers(3, 300, 24)]
    ps = [prefix + [int(t) for t in rng.integers(3, 300, n)] for n in (3, 7, 1, 5)]
    for target in ("mixed", "random"):
        pair = ckpts[target, method]
        outs = {}
        for caching in (True, False):
            llm = llm_for(
                pair[0], eagle(method, pair[1], 3), enable_prefix_caching=caching, max_num_seqs=2
            )
            got = []
            for p in ps:  # one after another: later ones hit the first one's blocks
                got += llm.generate([p], SamplingParams(max_tokens=12, **GREEDY), use_tqdm=False)
            outs[caching] = [o.token_ids for o in got]
            if caching:
                assert llm.prefix_cache_stats.hits > 0
        assert outs[True] == outs[False]
        assert outs[True] == plain_tokens(pair[0], ps, SamplingParams(max_tokens=12, **GREEDY))


@pytest.mark.parametrize("method", METHODS)
def test_adaptive_policy_keeps_greedy_output(ckpts, method):
    for target in ("mixed", "random"):
        llm, _ = check_equal(
            ckpts[target, method],
            method,
            3,
            prompts([6, 2, 11, 8], seed=90),
            [24, 18, 20, 30],
            spec_kw={"draft_policy": "adaptive"},
        )
        assert len(llm.runner.draft_policy.metrics.history) > 0


@pytest.mark.parametrize("method", METHODS)
def test_target_match_reproduces_plain_seeded_sampling(ckpts, method):
    ckpt, head = ckpts["mixed", method]
    ps = prompts([5, 12, 3, 8], seed=31)
    params = [
        SamplingParams(max_tokens=14, seed=50 + i, temperature=0.8, top_k=5, ignore_eos=True)
        for i in range(len(ps))
    ]
    want = plain_tokens(ckpt, ps, params)
    llm = llm_for(ckpt, eagle(method, head, 3))
    assert [o.token_ids for o in llm.generate(ps, params, use_tqdm=False)] == want
    assert llm.speculative_metrics.num_accepted > 0


@pytest.mark.parametrize(
    "method, spec_kw",
    [
        ("eagle", {"verification": "rejection"}),
        ("eagle3", {"verification": "rejection"}),
        ("eagle3", {"verification": "rejection", "draft_sampling": True}),
    ],
)
def test_rejection_sampling_matches_plain_sampling_in_distribution(ckpts, method, spec_kw):
    """Lossless speculative sampling with the head's drafts (greedy, or sampled from the head's
    distribution over the target vocabulary, -inf off EAGLE-3's draft vocabulary): the first
    three tokens of 1200 seeded requests have plain sampling's joint distribution (the bounded,
    seeded chi-square homogeneity test of test_speculative.py)."""
    ckpt, head = ckpts["mixed", method]
    n_req = 1200
    prompt = prompts([6], seed=120)[0]
    params = sampled_params(n_req, 1000, temperature=1.0)
    llm = llm_for(ckpt, eagle(method, head, 2, **spec_kw), max_num_seqs=64, seed=11)
    assert_same_distribution(ckpt, llm, prompt, params)
    m = llm.speculative_metrics
    assert m.num_accepted > 300 and m.num_drafted - m.num_accepted > 300, m.summary()


def test_llm_refuses_bad_eagle_settings(ckpts, tmp_path):
    ckpt, head = ckpts["random", "eagle3"]
    with pytest.raises(ValueError, match="SpeculativeConfig.model: method 'eagle' needs"):
        llm_for(ckpt, {"method": "eagle", "num_speculative_tokens": 2})
    with pytest.raises(ValueError, match="is a 'eagle3' head, but speculative_config.method is"):
        llm_for(ckpt, eagle("eagle", head, 2))
    with pytest.raises(FileNotFoundError, match="EAGLE head directory not found"):
        llm_for(ckpt, eagle("eagle3", tmp_path / "nope", 2))
    other = write_random_checkpoint(tmp_path / "wide", seed=1, hidden_size=128)
    with pytest.raises(
        ValueError, match="hidden_size 64 does not fit the target's hidden_size 128"
    ):
        llm_for(other, eagle("eagle3", head, 2))
    with pytest.raises(ValueError, match="not offered with tensor_parallel_size=2"):
        llm_for(ckpt, eagle("eagle3", head, 2), tensor_parallel_size=2)


def test_cli_generate_with_an_eagle3_head(ckpts, capsys):
    from fd_mtp.cli import main

    ckpt, head = ckpts["mixed", "eagle3"]
    argv = ["generate", "--model", str(ckpt), "--prompt-ids", "5 9 33 7", "--max-tokens", "12"]
    argv += ["--temperature", "0", "--ignore-eos", "--no-progress"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    rc = main(
        argv
        + ["--speculative-method", "eagle3", "--speculative-model", str(head)]
        + ["--num-speculative-tokens", "3", "--num-model-steps", "3"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "speculative (eagle3, K=3, model steps 3" in out
    first = next(line for line in plain.splitlines() if line.startswith("[0] token_ids: "))
    assert first in out.splitlines()
    assert main(argv + ["--speculative-model", str(head)]) == 2
    assert "--speculative-model needs --speculative-method" in capsys.readouterr().err


@pytest.mark.parametrize("method", METHODS)
def test_hybrid_ngram_extension_keeps_greedy_output(ckpts, method):
    """``mtp_strategy="with_ngram"`` with K > num_model_steps: the head's drafts extended by
    n-gram matches (``hybrid_mtp_ngram``), as with MTP."""
    rng = np.random.default_rng(5)
    base = [int(t) for t in rng.integers(3, 300, 12)]
    ps = [base * 3, base[:7] * 4, prompts([9], seed=3)[0]]  # repeats give n-gram matches
    hybrid = {"mtp_strategy": "with_ngram"}
    for target in ("mixed", "random"):
        llm, _ = check_equal(ckpts[target, method], method, 4, ps, [20, 16, 12], 2, hybrid)
        m = llm.speculative_metrics
        assert llm.speculative_config.hybrid_mode
        if target == "mixed":  # the bigram target repeats itself: n-gram drafts past the head's
            assert m.drafted_per_position[2] > 0, m.summary()


@pytest.mark.parametrize("method", METHODS)
def test_ops_stop_handling_follows_upstream_rules(ckpts, method):
    """``stop_handling="ops"``: the ops end requests (an EOS id inside an accepted run, the token
    at max_tokens replaced by the first EOS id), as with MTP (`ops_expected`)."""
    ckpt, head = ckpts["mixed_eos", method]
    ps = prompts([5, 1, 17, 9, 3, 30], seed=4)
    n = [12, 9, 14, 6, 11, 10]
    stream = plain_tokens(ckpt, ps, [SamplingParams(max_tokens=k, **GREEDY) for k in n])
    llm = llm_for(ckpt, eagle(method, head, 3, stop_handling="ops"))
    params = [SamplingParams(max_tokens=k, temperature=0.0) for k in n]
    outs = llm.generate(ps, params, use_tqdm=False)
    reasons = []
    for i, (o, w, k, p) in enumerate(zip(outs, stream, n, ps)):
        tokens, reason = ops_expected(w, min(k, L - len(p)), [2, 133])
        assert (o.token_ids, o.finish_reason) == (tokens, reason), i
        reasons.append(reason)
    assert "stop" in reasons and "length" in reasons
    assert llm.speculative_metrics.num_accepted > 0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("verification", ["greedy", "topp", "topk"])
def test_other_verification_strategies(ckpts, method, verification):
    """ "greedy" (argmax acceptance) and FastDeploy's candidate rules: greedy requests give plain
    greedy output; sampled requests under "topp" / "topk" (not lossless) give valid tokens."""
    ps = prompts([6, 15, 2], seed=140)
    llm, _ = check_equal(
        ckpts["mixed", method], method, 3, ps, [12] * 3, 2, {"verification": verification}
    )
    assert llm.speculative_metrics.num_accepted > 0
    if verification != "greedy":
        sampled = [
            SamplingParams(max_tokens=12, seed=s, temperature=0.8, top_p=0.9, ignore_eos=True)
            for s in (1, 2, 3)
        ]
        outs = llm.generate(ps, sampled, use_tqdm=False)
        assert all(len(o.token_ids) == 12 and 0 <= min(o.token_ids) for o in outs)
        assert all(max(o.token_ids) < 300 for o in outs)


@pytest.mark.parametrize("method", METHODS)
def test_a_head_with_its_own_attention_geometry_runs_natively(ckpts, tmp_path, method):
    """A head whose decoder layer has other heads / head_dim / MLP width than the target (its
    own KV-cache shape and RoPE width) runs its layer in the native kernel by default, and the
    output is plain's; the eager head gives the same tokens."""
    target = ckpts["random", method][0]
    head = write_random_eagle_head(
        tmp_path / method,
        target,
        method=method,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=48,
        intermediate_size=96,
        seed=8,
    )
    ps = prompts([5, 19, 2], seed=12)
    params = SamplingParams(max_tokens=6, **GREEDY)
    outputs = {}
    for forward in ("native", "eager"):
        llm, _ = check_equal((target, head), method, 3, ps, [12, 10, 14], forward=forward)
        model = llm.runner.proposer.model
        if forward == "native":
            assert model._compiled.calls > 0 and model._compiled.fallbacks == 0
            assert list(llm.runner.proposer.caches[-1][0].shape)[1:] == [1, 8, 48]
        else:
            assert model._compiled is None
        # the head's outputs over a fresh run: the kernel's within float32 rounding of eager's
        seen = []
        forward_fn = model.forward

        def record(ids, prev, meta, forward_fn=forward_fn, seen=seen):
            out = forward_fn(ids, prev, meta)
            seen.append(out.numpy())
            return out

        model.forward = record
        llm.generate(ps, params, use_tqdm=False)
        outputs[forward] = seen
    assert len(outputs["native"]) == len(outputs["eager"]) > 3
    for a, b in zip(outputs["native"], outputs["eager"]):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
