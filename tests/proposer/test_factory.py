"""`make_proposer` and the `Proposer` protocol: what the speculative runner builds and calls."""

from __future__ import annotations

import pytest

paddle = pytest.importorskip("paddle")

from fd_mtp.batch import Proposer, ProposerStats, TaskKind  # noqa: E402
from fd_mtp.config import CacheConfig, SchedulerConfig, SpeculativeConfig  # noqa: E402
from fd_mtp.engine.sampling_params import SamplingParams  # noqa: E402
from fd_mtp.engine.spec_runner import SpeculativeModelRunner  # noqa: E402
from fd_mtp.model.loader import load_checkpoint  # noqa: E402
from fd_mtp.proposer import MTPProposer, NgramProposer, make_proposer  # noqa: E402
from fd_mtp.testing import write_exact_draft_checkpoint  # noqa: E402
from fd_mtp.testing.tasks import prefill_task  # noqa: E402

SCHED = SchedulerConfig(max_num_seqs=2, max_model_len=32)
CACHE = CacheConfig(block_size=8, num_gpu_blocks=16)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    model, mtp, _ = load_checkpoint(
        write_exact_draft_checkpoint(tmp_path_factory.mktemp("factory"), seed=0)
    )
    return model, mtp


def test_the_factory_builds_the_method_s_proposer(models):
    model, mtp = models
    for cfg, cls in (
        (SpeculativeConfig(method="mtp", num_speculative_tokens=2, num_model_steps=2), MTPProposer),
        (SpeculativeConfig(method="ngram", num_speculative_tokens=2), NgramProposer),
    ):
        r = SpeculativeModelRunner(
            model, cfg, scheduler_config=SCHED, cache_config=CACHE, mtp_model=mtp
        )
        assert type(r.proposer) is cls and isinstance(r.proposer, Proposer)
        assert isinstance(r.proposer.stats, ProposerStats) and r.proposer.batch is r.input_batch
    with pytest.raises(
        ValueError, match="make_proposer: speculative_config must be a SpeculativeConfig"
    ):
        make_proposer(
            {"method": "mtp"}, r.input_batch, max_model_len=32, block_size=8, num_main_blocks=16
        )


def test_the_runner_calls_an_injected_factory_through_the_protocol(models):
    model, _ = models
    seen = []

    class Recording:
        """A `Proposer` wrapping the n-gram one, recording what the runner calls."""

        def __init__(self, inner):
            self.inner, self.stats = inner, inner.stats

        def insert_tasks_v1(self, tasks):
            seen.append(("insert", [t.kind for t in tasks]))
            self.inner.insert_tasks_v1(tasks)

        def run(self, full_hidden_states):
            seen.append(("run", full_hidden_states.shape[0]))
            self.inner.run(full_hidden_states)

    def factory(cfg, input_batch, **kwargs):
        return Recording(make_proposer(cfg, input_batch, **kwargs))

    cfg = SpeculativeConfig(method="ngram", num_speculative_tokens=2)
    r = SpeculativeModelRunner(
        model, cfg, scheduler_config=SCHED, cache_config=CACHE, proposer_factory=factory
    )
    assert isinstance(r.proposer, Proposer)
    prompt = [5, 6, 7, 8, 5]
    r.insert_tasks_v1(
        [prefill_task(0, prompt, [0, 1], SamplingParams(temperature=0.0, max_tokens=5))]
    )
    r.execute_model([])
    r.execute_model([0])
    assert seen[0] == ("insert", [TaskKind.PREFILL]) and [s[0] for s in seen[1:]] == ["run", "run"]
    assert seen[1][1] == len(prompt)  # the prefill's packed hidden rows
