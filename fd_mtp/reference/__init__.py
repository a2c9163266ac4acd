"""Numpy references of the fd_mtp ops, written from the spec (spec/ops.md); numpy only, no paddle."""

from .draft import (
    draft_model_postprocess,
    draft_model_preprocess,
    draft_model_update,
    eagle_get_hidden_states,
    eagle_get_self_hidden_states,
    mtp_step_paddle,
)
from .verify import speculate_verify

__all__ = [
    "draft_model_preprocess",
    "draft_model_update",
    "draft_model_postprocess",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "speculate_verify",
]
