"""The entries of ``insert_tasks_v1`` (spec/ops.md §4.2, v1 scheduler), shared by runners and proposers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class TaskKind(enum.Enum):
    PREFILL = "prefill"  # a (chunk of a) prompt, or a preempted request's prompt + output
    DECODE = (
        "decode"  # new KV blocks granted to a decoding request: its block-table row is replaced
    )
    PREEMPTED = (
        "preempted"  # the slot is emptied (preempted or finished): row -1, stopped, no tokens
    )


@dataclass
class Task:
    """One entry of ``insert_tasks_v1`` (spec §4.2, v1 scheduler).

    PREFILL: ``token_ids`` = prompt + already generated output, ``start``/``end`` = the chunk
    ``token_ids[start:end]`` fed this step (``start`` tokens are already cached), ``num_output`` =
    how many of ``token_ids`` are generated tokens, ``params``/``seed`` = sampling of the slot
    (``params`` is a `fd_mtp.engine.sampling_params.SamplingParams`; typed loosely here so that this
    module stays below the engine).
    ``num_cached``: the leading tokens whose K/V the prefix cache supplied (their blocks lead
    ``block_ids``); the request's first chunk is the one with ``start == num_cached``
    (`first_chunk`), where a slot is set up afresh.
    DECODE and PREFILL: ``block_ids`` = the request's whole block-table row.
    """

    kind: TaskKind
    slot: int
    block_ids: list[int] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    start: int = 0
    end: int = 0
    num_output: int = 0
    params: Any = None
    seed: int = 0
    num_cached: int = 0

    @property
    def first_chunk(self) -> bool:
        """The request's first chunk since it took its slot (fresh, or after a preemption)."""
        return self.start == self.num_cached
