"""Automatic prefix caching end to end: output with the cache equals output without it (greedy and
seeded sampling; plain decoding and every speculative mode), hits are counted, shared blocks
survive preemption and eviction."""

from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle")

import fd_mtp  # noqa: E402
from fd_mtp import SamplingParams  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint, write_random_checkpoint  # noqa: E402

BS = 4  # block size: a 13-token system prompt spans 3 full blocks and a partial one
L = 96


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("prefix")
    return {
        "mixed": write_exact_draft_checkpoint(root / "mixed", seed=3, context=0.3),
        "random": write_random_checkpoint(root / "random", seed=4),
        "moe": write_random_checkpoint(root / "moe", seed=5, moe_num_experts=4),
    }


def rand_ids(n, seed):
    return [int(t) for t in np.random.default_rng(seed).integers(3, 300, n)]


SYSTEM = rand_ids(13, 1)
# four requests behind one system prompt, one without it, one equal to the system prompt, two
# that share its first 12 tokens (3 full blocks) but not the 13th: the MTP draft model read the
# 13th token at position 11, so only 2 of those blocks are theirs to share
TURN1 = (
    [SYSTEM + rand_ids(n, 10 + n) for n in (5, 2, 9, 1)]
    + [rand_ids(7, 2), list(SYSTEM)]
    + [SYSTEM[:12] + rand_ids(n, 30 + n) for n in (6, 3)]
)

MTP2 = {"method": "mtp", "num_speculative_tokens": 2, "num_model_steps": 2}
SPECS = {
    "plain": None,
    "mtp_k2": MTP2,
    "mtp_k3_steps1": {"method": "mtp", "num_speculative_tokens": 1, "num_model_steps": 1},
    "hybrid_k3": {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "num_model_steps": 1,
        "mtp_strategy": "with_ngram",
    },
    "ngram_k3": {"method": "ngram", "num_speculative_tokens": 3},
    "mtp_k2_ops_stop": {**MTP2, "stop_handling": "ops"},
    "mtp_k2_adaptive": {**MTP2, "draft_policy": "adaptive"},
}


# EOS is honoured (stop_handling "ops" refuses ignore_eos): a request may end early, the same
# way with and without the cache
def greedy(n=10):
    return SamplingParams(max_tokens=n, temperature=0.0)


def sampled(seed, n=10):
    return SamplingParams(max_tokens=n, temperature=0.9, top_p=0.95, seed=seed)


def conversation(ckpt, spec, caching, params, **kw):
    """Two turns at max_num_seqs 2 (so later requests of a turn are admitted after earlier ones
    computed the shared blocks): turn 1 = `TURN1`, turn 2 = each turn-1 prompt + its output +
    three new tokens. -> (llm, outputs of both turns)."""
    llm = fd_mtp.LLM(
        str(ckpt),
        speculative_config=spec,
        max_model_len=L,
        block_size=BS,
        enable_prefix_caching=caching,
        **kw,
    )
    first = llm.generate(TURN1, [params(i) for i in range(len(TURN1))], use_tqdm=False)
    turn2 = [p + o.token_ids + rand_ids(3, 50 + i) for i, (p, o) in enumerate(zip(TURN1, first))]
    second = llm.generate(turn2, [params(10 + i) for i in range(len(turn2))], use_tqdm=False)
    return llm, first + second


def check_same(ckpt, spec, params, every_turn_hits=True, **kw):
    kw.setdefault("max_num_seqs", 2)
    _, want = conversation(ckpt, spec, False, params, **kw)
    llm, got = conversation(ckpt, spec, True, params, **kw)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.error is None and w.error is None
        assert g.token_ids == w.token_ids, f"request {i}: cached {g.token_ids} != {w.token_ids}"
        preempted = g.metrics.num_preemptions or w.metrics.num_preemptions
        if g.metrics.spec is not None and not preempted and not (spec or {}).get("draft_policy"):
            # the same drafts (the draft model's K/V from the cache equal the computed ones):
            # the same acceptance, position by position (a preemption changes the steps; the
            # adaptive policy times the steps)
            gs, ws = g.metrics.spec, w.metrics.spec
            assert (gs.drafted_per_position, gs.accepted_per_position) == (
                ws.drafted_per_position,
                ws.accepted_per_position,
            ), f"request {i}"
    stats = llm.prefix_cache_stats
    # every turn-2 request starts with its own turn-1 prompt and output (unless the blocks were
    # evicted); the system prompt's three full blocks are shared in turn 1 already
    assert stats.enabled and stats.hits > 0
    if every_turn_hits:
        assert all(o.metrics.num_cached_tokens > 0 for o in got[len(TURN1) :])
    return llm, got


@pytest.mark.parametrize("name", list(SPECS))
def test_greedy_output_equals_the_uncached_output(ckpts, name):
    ckpt = ckpts["random" if name == "plain" else "mixed"]
    llm, got = check_same(ckpt, SPECS[name], lambda i: greedy())
    # request 1 waits for request 0 to compute the system prompt's first 3 blocks (12 tokens;
    # the 13th is part of the third block's key) and shares them, as do 2, 3 and 5; 6 and 7 share
    # two of them
    assert [o.metrics.num_cached_tokens for o in got[:8]] == [0, 12, 12, 12, 0, 12, 8, 8]


@pytest.mark.parametrize(
    "name,verification",
    [
        ("plain", None),
        ("mtp_k2", "target_match"),
        ("mtp_k2", "rejection"),
        ("hybrid_k3", "rejection"),
    ],
)
def test_seeded_sampling_equals_the_uncached_output(ckpts, name, verification):
    """target_match draws by (seed, token index): any schedule gives the same samples.
    Rejection sampling draws by (slot, step) as upstream, so a request that waits a step to share
    a prefix draws other numbers (the same distribution): with one slot the schedules agree."""
    spec = SPECS[name]
    if spec is not None:
        spec = {**spec, "verification": verification}
    kw = dict(max_num_seqs=1, num_gpu_blocks=200) if verification == "rejection" else {}
    check_same(ckpts["mixed"], spec, lambda i: sampled(100 + i), **kw)


def test_moe_checkpoint(ckpts):
    check_same(ckpts["moe"], MTP2, lambda i: greedy(8))


@pytest.mark.parametrize("name", ["plain", "mtp_k2"])
def test_preemption_and_eviction_with_shared_blocks(ckpts, name):
    """A cache of 24 blocks of 4 for 3 slots: requests are preempted (re-prefilled from the
    cache where their blocks survived) and cached blocks are evicted to serve allocations."""
    ckpt = ckpts["random" if name == "plain" else "mixed"]
    kw = dict(max_num_seqs=3, num_gpu_blocks=24)
    llm, got = check_same(ckpt, SPECS[name], lambda i: greedy(14), every_turn_hits=False, **kw)
    assert llm.engine.num_preemptions > 0
    assert llm.prefix_cache_stats.evictions > 0


def test_hits_skip_the_cached_tokens_and_the_counters_add_up(ckpts):
    llm = fd_mtp.LLM(str(ckpts["random"]), max_model_len=L, block_size=BS, max_num_seqs=1)
    first, second = llm.generate([TURN1[0], TURN1[1]], greedy(4), use_tqdm=False)
    assert first.metrics.num_cached_tokens == 0 and second.metrics.num_cached_tokens == 12
    s = llm.prefix_cache_stats
    assert (s.queries, s.hits) == (len(TURN1[0]) + len(TURN1[1]), 12)
    assert s.hit_rate == pytest.approx(12 / s.queries)
    assert "hit rate" in s.summary()
    # the second request's prefill fed only its uncached tokens: 15 - 12 = 3 of them
    assert llm.engine.block_manager.num_used == 0 and s.cached_blocks > 0
    assert llm.engine.reset_prefix_cache() == s.cached_blocks
    assert llm.prefix_cache_stats.cached_blocks == 0


@pytest.mark.parametrize("name", ["plain", "mtp_k2"])
def test_a_burst_behind_one_prefix_computes_it_once(ckpts, name):
    """n samples of one prompt (or requests behind one system prompt) arriving together: the
    first is admitted, the others wait one step and share its blocks; seeded samples equal the
    uncached ones."""
    ckpt = ckpts["random" if name == "plain" else "mixed"]
    prompt = SYSTEM + rand_ids(6, 7)  # 19 tokens: 4 full blocks shareable (the 5th is partial)
    params = [sampled(200 + i, n=8) for i in range(4)]
    outs = {}
    for caching in (False, True):
        llm = fd_mtp.LLM(
            str(ckpt),
            speculative_config=SPECS[name],
            max_model_len=L,
            block_size=BS,
            max_num_seqs=4,
            enable_prefix_caching=caching,
        )
        outs[caching] = llm.generate([prompt] * 4, params, use_tqdm=False)
    assert [o.token_ids for o in outs[True]] == [o.token_ids for o in outs[False]]
    assert [o.metrics.num_cached_tokens for o in outs[True]] == [0, 16, 16, 16]
    assert llm.prefix_cache_stats.hits == 48


def test_caching_off_finds_nothing(ckpts):
    llm = fd_mtp.LLM(
        str(ckpts["random"]), max_model_len=L, block_size=BS, enable_prefix_caching=False
    )
    llm.generate([TURN1[0], TURN1[0]], greedy(4), use_tqdm=False)
    s = llm.prefix_cache_stats
    assert not s.enabled and (s.queries, s.hits, s.cached_blocks) == (0, 0, 0)
    assert s.summary() == "off"


def test_enable_prefix_caching_must_be_a_bool(ckpts):
    with pytest.raises(ValueError, match="enable_prefix_caching must be a bool, got 1"):
        fd_mtp.LLM(str(ckpts["random"]), enable_prefix_caching=1)
