"""Numpy references of the fd_mtp ops, written from the spec (spec/ops.md); numpy only, no paddle."""

from .draft import (
    draft_model_postprocess,
    draft_model_preprocess,
    draft_model_update,
    eagle_get_hidden_states,
    eagle_get_self_hidden_states,
    mtp_step_paddle,
)
from .ngram import hybrid_mtp_ngram, ngram_match

__all__ = [
    "draft_model_preprocess",
    "draft_model_update",
    "draft_model_postprocess",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "ngram_match",
    "hybrid_mtp_ngram",
]
