"""NgramProposer (method "ngram", spec §5.17): drafts copied from the prompt into the target's
draft_tokens, through a real `SpeculativeModelRunner` on the tiny exact-draft checkpoint (its target
is a bigram model, so the continuation of a prompt that repeats a token is known)."""

from __future__ import annotations

import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp.config import CacheConfig, SchedulerConfig, SpeculativeConfig  # noqa: E402
from fd_mtp.engine.sampling_params import SamplingParams  # noqa: E402
from fd_mtp.engine.spec_runner import SpeculativeModelRunner  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.proposer.ngram import NgramProposer  # noqa: E402
from fd_mtp.testing import naive_greedy, write_exact_draft_checkpoint  # noqa: E402
from fd_mtp.testing.tasks import prefill_task  # noqa: E402

greedy = naive_greedy


def test_ngram_drafts_from_the_prompt_reach_the_target(tmp_path):
    model, _, _ = load_checkpoint(write_exact_draft_checkpoint(tmp_path, seed=0))
    for a in range(3, 300):  # a chain a, f(a), ..., f^4(a) of distinct tokens
        c = [a] + greedy(model, [a], 4)
        if len(set(c)) == 5:
            break
    prompt = c[:4] + [c[0]]  # the target continues with c1 c2 c3 c4
    r = SpeculativeModelRunner(
        model,
        SpeculativeConfig(method="ngram", num_speculative_tokens=2),
        scheduler_config=SchedulerConfig(max_num_seqs=2, max_model_len=32),
        cache_config=CacheConfig(block_size=8, num_gpu_blocks=16),
    )
    assert isinstance(r.proposer, NgramProposer)
    si = r.share_inputs
    r.insert_tasks_v1(
        [prefill_task(1, prompt, [0, 1], SamplingParams(temperature=0.0, max_tokens=10))]
    )
    assert r.execute_model([]).to_dict() == {1: [c[1]]}
    # the last token c1 is found in the prompt at index 1: the two tokens after it are the drafts
    assert si["draft_tokens"][1].tolist() == [c[1], c[2], c[3]]
    assert si["seq_lens_this_time"].numpy().reshape(-1).tolist() == [0, 3]
    assert si["draft_tokens"][0].tolist() == [-1, -1, -1]  # the empty slot gets nothing
    # they are the target's own continuation: both accepted, plus the bonus token
    assert r.execute_model([1]).to_dict() == {1: [c[2], c[3], c[4]]}
    assert r.proposer.stats.calls == 2
