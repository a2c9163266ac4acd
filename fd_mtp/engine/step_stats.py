"""`StepStats`: where the engine's decode steps went; `fold_drafts`: speculative histograms folded
into a `SpeculativeMetrics`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .request import SpeculativeMetrics


def fold_drafts(spec: SpeculativeMetrics, drafted, accepted, emitted: int) -> None:
    """Add histograms of drafts verified / accepted per step (index = count) to ``spec``."""
    k = np.arange(drafted.size)
    spec.num_steps += int(drafted.sum())
    spec.num_emitted += int(emitted)
    spec.num_drafted += int((k * drafted).sum())
    spec.num_accepted += int((k * accepted).sum())
    # steps that reached position i: those with more than i drafts
    reach_d = drafted[::-1].cumsum()[::-1][1:]
    reach_a = accepted[::-1].cumsum()[::-1][1:]
    n = len(spec.drafted_per_position)
    spec.drafted_per_position = [x + int(y) for x, y in zip(spec.drafted_per_position, reach_d[:n])]
    spec.accepted_per_position = [
        x + int(y) for x, y in zip(spec.accepted_per_position, reach_a[:n])
    ]


@dataclass
class StepStats:
    """Where the engine's decode steps went (cumulative; the steps where every running request
    decoded, scheduled by `LLMEngine._schedule_fast`), for the cost split ``T_step = T_target +
    substeps x T_draft + T_host`` that benchmarks print:

    * ``steps``, ``requests`` (decoding requests summed over the steps), ``fed_tokens`` (tokens
      the target verified: 1 + drafts per request);
    * ``step_seconds``: whole `LLMEngine.step` calls; ``runner_seconds``: inside
      ``execute_model``; ``proposer_seconds``: inside the proposer's ``run`` (part of the
      runner's); ``draft_seconds``: inside its MTP forwards (part of the proposer's);
      ``substeps``: MTP forwards run.

    Derived: `target` (the runner minus the proposer: forward, sampling, verification, the
    step's ops and transfers), `draft` (one MTP substep), `host` (the rest: scheduling, stop
    checks, output delivery, the proposer's own bookkeeping), each in seconds per step."""

    steps: int = 0
    requests: int = 0
    fed_tokens: int = 0
    step_seconds: float = 0.0
    runner_seconds: float = 0.0
    proposer_seconds: float = 0.0
    draft_seconds: float = 0.0
    substeps: int = 0

    def _per(self, x: float) -> float:
        return x / self.steps if self.steps else float("nan")

    @property
    def step(self) -> float:
        return self._per(self.step_seconds)

    @property
    def target(self) -> float:
        return self._per(self.runner_seconds - self.proposer_seconds)

    @property
    def draft(self) -> float:
        return self.draft_seconds / self.substeps if self.substeps else 0.0

    @property
    def host(self) -> float:
        return self._per(
            self.step_seconds - self.runner_seconds + self.proposer_seconds - self.draft_seconds
        )

    def since(self, before: StepStats) -> StepStats:
        """The difference ``self - before`` (a window of steps)."""
        return StepStats(
            *(getattr(self, f) - getattr(before, f) for f in self.__dataclass_fields__)
        )
