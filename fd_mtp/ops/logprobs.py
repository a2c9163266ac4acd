"""Logprob helpers of speculative decoding (spec ../shared/spec/ops.md §5.18,
docs/spec/logprobs.md): speculate_get_logits, speculate_insert_first_token,
speculate_get_target_logits. They gather the logits rows and token ids of the tokens a step
emits, from which the engine computes their log-probabilities."""

from __future__ import annotations

from ._loader import define_ops

# Every op of this family is declared and documented in fd_mtp/schema/logprobs.py.
__all__ = define_ops(globals(), "logprobs")
