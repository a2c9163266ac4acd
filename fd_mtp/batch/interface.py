"""What a speculative runner calls on its drafter: the `Proposer` protocol, and `ProposerStats`.

Once per step, after the target verified and updated (spec §4.1 step 7), the runner calls
``run(full_hidden_states)``: the proposer drafts with ops on the device tensors (the MTP head, or
n-gram lookup, whose ops run on the device too) and leaves the next drafts in the target's
``draft_tokens`` and their count in ``seq_lens_this_time``; it makes no host-device transfer of
its own (the runner's `InputBatch` makes the step's one each way). On insertion,
``insert_tasks_v1(tasks)`` runs right after the target's own (spec §4.2) and writes the proposer's
buffers through the `InputBatch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .task import Task


@dataclass
class ProposerStats:
    """Wall-clock seconds spent by a proposer: ``run`` in total (both phases) and ``forward``
    inside model forwards (+ logits); ``host = run - forward`` is the proposer's own overhead (ops
    and glue). ``calls``: steps the proposer ran; ``forwards``: model forwards (MTP substeps) run."""

    calls: int = 0
    forwards: int = 0
    run: float = 0.0
    forward: float = 0.0

    @property
    def host(self) -> float:
        return self.run - self.forward


@runtime_checkable
class Proposer(Protocol):
    """A drafter as the speculative runner sees it (see the module docstring for the phases)."""

    stats: ProposerStats

    def insert_tasks_v1(self, tasks: Sequence[Task]) -> None:
        """Write the tasks into the proposer's buffers (after the target's own insertion)."""

    def run(self, full_hidden_states: Any) -> None:
        """One step: draft from the target's packed hidden states ``[sum(q), H]`` with device ops."""
