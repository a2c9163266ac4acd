"""Scheduler tasks for runner and proposer tests (imports paddle only when called)."""

from __future__ import annotations

__all__ = ["prefill_task"]


def prefill_task(slot, tokens, blocks, params, start=0, end=None, num_output=0, seed=0):
    """A PREFILL `fd_mtp.batch.Task` for ``slot``: ``tokens`` (prompt, then ``num_output``
    generated tokens) on the block-table row ``blocks``, the chunk ``tokens[start:end]`` fed this
    step (``end`` None: to the end), sampled with ``params`` and ``seed``."""
    from ..batch import Task, TaskKind

    return Task(
        TaskKind.PREFILL,
        slot,
        block_ids=list(blocks),
        token_ids=list(tokens),
        start=start,
        end=len(tokens) if end is None else end,
        num_output=num_output,
        params=params,
        seed=seed,
    )
