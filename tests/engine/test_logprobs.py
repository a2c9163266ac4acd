"""``SamplingParams(logprobs=k)``: every generated token gets the log-probabilities of its k most
likely tokens plus the sampled token (vLLM semantics), from the model's raw logits
(``log_softmax`` before penalties and temperature, FastDeploy's default).

Plain decoding and speculative decoding (MTP and n-gram drafters; the target's rows of the
accepted tokens gathered with ``speculate_get_target_logits``) must report the same values for the
same tokens. They come from different batched float32 forwards (one token per step against a
whole verified run per step), so they agree only up to float32 round-off; the tolerance is derived
below from the arithmetic, never observed. Also: requests joining mid-run, k = 0 / 1 / 5 and None
in one batch, greedy and seeded sampling, ``logprobs=None`` costing nothing, bad values.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.engine.request import Logprob  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))  # tests/model/model_util.py
from model_util import forward64  # noqa: E402
from tolerances import FUNC_REL, Float32Noise, U, gamma  # noqa: E402

L = 96
GREEDY = dict(temperature=0.0, ignore_eos=True)
SEEDED = dict(temperature=0.8, top_p=0.9, top_k=50, ignore_eos=True, repetition_penalty=1.1)
KS = [0, 1, 5, None, 5]  # one batch mixes every setting (None: off)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_exact_draft_checkpoint(
        tmp_path_factory.mktemp("lp") / "mixed", seed=3, context=0.3
    )


def prompts(lengths, seed):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, 300, n)] for n in lengths]


def llm_for(ckpt, spec=None, **kw):
    kw.setdefault("max_num_seqs", 2)  # 5 requests: three of them join while others decode
    kw.setdefault("max_model_len", L)
    kw.setdefault("block_size", 8)
    return fd_mtp.LLM(str(ckpt), speculative_config=spec, **kw)


def params_for(sampling, n_tokens=(9, 12, 7, 10, 8)):
    base = GREEDY if sampling == "greedy" else SEEDED
    out = []
    for i, (k, n) in enumerate(zip(KS, n_tokens)):
        extra = {} if sampling == "greedy" else {"seed": 40 + i}
        out.append(SamplingParams(max_tokens=n, logprobs=k, **base, **extra))
    return out


SPECS = {
    "mtp": {"method": "mtp", "num_speculative_tokens": 3, "num_model_steps": 2},
    "ngram": {"method": "ngram", "num_speculative_tokens": 3, "max_ngram_size": 3},
}


# ------------------------------------------------------------------------------------------
# the tolerance: float64 truth and float32 error bound of each reported log-probability
# ------------------------------------------------------------------------------------------
def logprob_truth(model, prompt, output):
    """``(truth, bound)`` ``[len(output), V]`` of the log-probabilities the runner reports for
    ``output`` (row n: the distribution token n was drawn from).

    Derivation. Both runners evaluate the same function in float32 along different code paths
    (paged attention over one query or over a verified run, gemm kernels for other row counts), so
    neither is exact; each is compared with the float64 truth. The network's float32 error is
    bounded as in tests/model (tolerances.Float32Noise: the model's maths in float64, every op's
    result perturbed by its worst-case float32 rounding, here also the lm_head's gamma(H) |h| |W|),
    and pushed through ``log_softmax`` in float64 per sample, so the bound of the log-probability
    itself comes out (log_softmax is 1-Lipschitz per logit and in the max norm: a logit error e
    moves a log-probability by at most 2 e; the samples measure the actual, smaller, correlated
    effect). Then the float32 ``log_softmax`` adds its own rounding: ``x - max`` (U |x - max|),
    the n exps (FUNC_REL each, and the subtraction's error U * the largest gap relative), their
    sum (gamma(V)), the log (FUNC_REL |log sum| + the sum's relative error) and the last
    subtraction (U |result|). A value within ``bound`` of the truth on both paths is within
    ``2 bound`` of the other path's."""
    ids = list(prompt) + list(output)
    with paddle.no_grad():
        hidden = forward64(model, np.asarray(ids[:-1], np.int64), seed=7)[0]  # [K+1, S-1, H]
    rows = hidden[:, len(prompt) - 1 :]  # the rows that predict output[0 ..]
    w = model.lm_head.weight.numpy().astype(np.float64)
    noise = Float32Noise(seed=8)
    z = noise.round(rows @ w, gamma(w.shape[0]) * (np.abs(rows) @ np.abs(w)))
    m = z.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
    truth, bound = Float32Noise.bound(z - lse)
    z0, m0, lse0 = z[0], m[0], lse[0]
    vocab = z0.shape[-1]
    gap = (m0 - z0).max(axis=-1, keepdims=True)
    rounding = (
        U * (m0 - z0)
        + (FUNC_REL + U * gap + gamma(vocab))
        + FUNC_REL * np.abs(lse0 - m0)
        + FUNC_REL
        + U * np.abs(truth)
    )
    return truth, bound + rounding


def check_entry(entry, token, k, truth, bound, what):
    """One token's dict: the sampled token and the k most likely (near-ties at the k-th place
    may swap), every value within ``bound`` of the float64 truth."""
    assert isinstance(entry, dict) and token in entry, what
    assert all(isinstance(v, Logprob) for v in entry.values()), what
    assert len(entry) in (k, k + 1), (what, len(entry))
    for t, lp in entry.items():
        assert abs(lp.logprob - truth[t]) <= bound[t], (
            f"{what}: token {t} logprob {lp.logprob} vs truth {truth[t]} (bound {bound[t]:.3g})"
        )
        assert lp.rank >= 1
    if k:
        order = np.argsort(-truth, kind="stable")
        kth = truth[order[k - 1]]
        top = {t for t, lp in entry.items() if lp.rank <= k}
        for t in top:  # every listed top-k token is within round-off of the true top k
            assert truth[t] + bound[t] >= kth - bound[order[k - 1]], (what, t)
        for j in order[:k]:  # every clearly-top-k token is listed
            if truth[j] - bound[j] > truth[order[k]] + bound[order[k]]:
                assert int(j) in entry, (what, int(j))


def compare(a, b, k, truth, bound, what):
    """Plain entry ``a`` and speculative entry ``b`` of one token: shared tokens within twice the
    bound (each within the bound of the truth); other tokens only near-ties at the k-th place."""
    for t in set(a) & set(b):
        assert abs(a[t].logprob - b[t].logprob) <= 2 * bound[t], (what, t)
    if set(a) != set(b):
        order = np.argsort(-truth, kind="stable")
        kth = order[k - 1]
        for t in set(a) ^ set(b):
            assert abs(truth[t] - truth[kth]) <= bound[t] + bound[kth], (what, t)


def run(ckpt, spec, params, ps, verification=None):
    if spec is not None:
        spec = {**spec, "verification": verification}
    llm = llm_for(ckpt, spec)
    return llm, llm.generate(ps, params, use_tqdm=False)


@pytest.mark.parametrize("sampling", ["greedy", "seeded"])
@pytest.mark.parametrize("method", ["mtp", "ngram"])
def test_speculative_logprobs_equal_plain_logprobs(ckpt, method, sampling):
    base = prompts([5, 7], seed=60)
    ps = [b * 3 for b in base] + prompts([9, 4, 12], seed=61)  # repeats: the n-gram drafter hits
    params = params_for(sampling)
    verification = "greedy" if sampling == "greedy" else "target_match"
    plain_llm, plain = run(ckpt, None, params, ps)
    spec_llm, spec = run(ckpt, SPECS[method], params, ps, verification)
    assert spec_llm.speculative_metrics.num_drafted > 0
    model = plain_llm.engine.runner.model
    for i, (p, s, k) in enumerate(zip(plain, spec, KS)):
        assert p.token_ids == s.token_ids, i  # lossless verification: the same tokens
        if k is None:
            assert p.logprobs is None and s.logprobs is None
            continue
        assert len(p.logprobs) == len(s.logprobs) == len(p.token_ids)
        truth, bound = logprob_truth(model, ps[i], p.token_ids)
        for n, token in enumerate(p.token_ids):
            what = f"request {i} (k={k}) token {n}"
            check_entry(p.logprobs[n], token, k, truth[n], bound[n], f"plain {what}")
            check_entry(s.logprobs[n], token, k, truth[n], bound[n], f"{method} {what}")
            compare(p.logprobs[n], s.logprobs[n], k, truth[n], bound[n], what)
        if sampling == "greedy":  # argmax of the raw logits (no penalties): rank 1
            assert all(e[t].rank == 1 for e, t in zip(p.logprobs, p.token_ids))


def test_logprobs_of_requests_joining_mid_run(ckpt):
    """Requests added while others decode (engine.add_request between steps), speculative (MTP)."""
    ps = prompts([6, 3, 11, 8], seed=62)
    params = [SamplingParams(max_tokens=8, logprobs=k, **GREEDY) for k in (2, None, 0, 5)]
    plain = llm_for(ckpt, max_num_seqs=4).generate(ps, params, use_tqdm=False)
    llm = llm_for(ckpt, {**SPECS["mtp"], "verification": "greedy"}, max_num_seqs=4)
    engine = llm.engine
    ids = [engine.add_request(ps[0], params[0])]
    steps = 0
    while engine.has_unfinished():
        engine.step()
        steps += 1
        if steps in (1, 3, 4) and len(ids) < 4:
            ids.append(engine.add_request(ps[len(ids)], params[len(ids)]))
    outs = [engine.pop_output(r) for r in ids]
    model = llm.engine.runner.model
    for i, (p, s) in enumerate(zip(plain, outs)):
        assert p.token_ids == s.token_ids
        if params[i].logprobs is None:
            assert s.logprobs is None
            continue
        truth, bound = logprob_truth(model, ps[i], p.token_ids)
        for n in range(len(p.token_ids)):
            compare(p.logprobs[n], s.logprobs[n], params[i].logprobs, truth[n], bound[n], (i, n))


def test_decoded_tokens_with_a_tokenizer():
    from .util import CharTokenizer, tiny_model

    llm = fd_mtp.LLM(tiny_model(), tokenizer=CharTokenizer(), max_num_seqs=2, max_model_len=32)
    out = llm.generate(
        [[5, 6, 7]], SamplingParams(max_tokens=3, logprobs=2, **GREEDY), use_tqdm=False
    )[0]
    assert len(out.logprobs) == 3
    for entry in out.logprobs:
        for t, lp in entry.items():
            assert lp.decoded_token == CharTokenizer().decode([t])


def test_logprobs_none_costs_nothing(ckpt, monkeypatch):
    """Without logprobs no raw-logits copy, no gather op and no log_softmax run."""
    import fd_mtp.engine.runner as runner_module

    def boom(*args, **kwargs):
        raise AssertionError("logprob work done for requests without logprobs")

    monkeypatch.setattr(runner_module, "token_logprobs", boom)
    monkeypatch.setattr(runner_module.ops, "speculate_get_target_logits", boom)
    ps = prompts([5, 9], seed=63)
    params = SamplingParams(max_tokens=6, **GREEDY)
    for spec in (None, {**SPECS["mtp"], "verification": "greedy"}):
        llm = llm_for(ckpt, spec)
        runner, calls = llm.engine.runner, []
        raw_logits = runner._raw_logits

        def recording(logits, ran):
            calls.append(raw_logits(logits, ran))
            return calls[-1]

        runner._raw_logits = recording
        outs = llm.generate(ps, params, use_tqdm=False)
        assert all(o.logprobs is None for o in outs)
        assert calls and all(c is None for c in calls)  # no copy of the logits either
        assert runner.last_logprobs == {}


@pytest.mark.parametrize("bad", [-1, 21, 1.5, True, "3"])
def test_bad_logprobs_raise_naming_the_field(bad):
    with pytest.raises(ValueError, match="SamplingParams.logprobs"):
        SamplingParams(logprobs=bad)


def test_valid_logprobs():
    assert SamplingParams(logprobs=0).logprobs == 0
    assert SamplingParams(logprobs=20).logprobs == 20
    assert SamplingParams().logprobs is None


# ------------------------------------------------------------------------------------------
# SamplingParams.prompt_logprobs: the prompt tokens' entries
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec,chunk",
    [(None, 2048), (None, 5), (SPECS["mtp"], 2048), (SPECS["mtp"], 7), (SPECS["ngram"], 2048)],
)
def test_prompt_logprobs_equal_the_float64_truth(ckpt, spec, chunk):
    """Every prompt token after the first: its log-probability and the k most likely tokens at
    its position, within the derived bound of the float64 truth; the same with chunked prefill
    (chunk 5 / 7 tokens) and speculative runners. k = None: no entries, no cost."""
    ps = prompts([9, 1, 14, 6], seed=63)
    ks = [3, 2, 0, None]
    params = [SamplingParams(max_tokens=4, prompt_logprobs=k, logprobs=1, **GREEDY) for k in ks]
    if spec is not None:
        spec = {**spec, "verification": "greedy"}
    llm = llm_for(ckpt, spec, max_num_batched_tokens=chunk)
    outs = llm.generate(ps, params, use_tqdm=False)
    model = llm.engine.runner.model
    for i, (p, o, k) in enumerate(zip(ps, outs, ks)):
        if k is None:
            assert o.prompt_logprobs is None
            continue
        assert len(o.prompt_logprobs) == len(p) and o.prompt_logprobs[0] is None, i
        if len(p) == 1:
            continue
        truth, bound = logprob_truth(model, p[:1], p[1:])
        for n in range(1, len(p)):
            what = f"request {i} (k={k}) prompt token {n}"
            check_entry(o.prompt_logprobs[n], p[n], k, truth[n - 1], bound[n - 1], what)


def test_prompt_logprobs_skip_the_prefix_cache_and_survive_preemption(ckpt):
    """A request with prompt logprobs computes its whole prompt (the cache is not read for it;
    its blocks still enter the cache); preempted and re-prefilled, it keeps one entry per token."""
    [p] = prompts([30], seed=64)
    plain = SamplingParams(max_tokens=6, **GREEDY)
    want = SamplingParams(max_tokens=6, prompt_logprobs=1, **GREEDY)
    llm = llm_for(ckpt, max_num_seqs=1)
    first, second, third = llm.generate([p, p, p], [plain, want, plain], use_tqdm=False)
    assert [o.metrics.num_cached_tokens for o in (first, second, third)] == [0, 0, 24]
    assert first.token_ids == second.token_ids == third.token_ids
    # 3 slots, too few blocks: requests are preempted and re-prefilled, entries stay complete
    tight = llm_for(ckpt, max_num_seqs=3, num_gpu_blocks=8, enable_prefix_caching=False)
    outs = tight.generate(
        [p] * 3, SamplingParams(max_tokens=20, prompt_logprobs=2, **GREEDY), use_tqdm=False
    )
    assert tight.engine.num_preemptions > 0
    truth, bound = logprob_truth(llm.engine.runner.model, p[:1], p[1:])
    for o, k in [(second, 1)] + [(o, 2) for o in outs]:
        assert len(o.prompt_logprobs) == 30 and o.prompt_logprobs[0] is None
        for n in range(1, 30):
            check_entry(o.prompt_logprobs[n], p[n], k, truth[n - 1], bound[n - 1], f"token {n}")


def test_bad_prompt_logprobs():
    for bad in (-1, 21, 1.5, True):
        with pytest.raises(
            ValueError, match="SamplingParams.prompt_logprobs must be None or an int"
        ):
            SamplingParams(prompt_logprobs=bad)
