"""fd_mtp's speculative-decoding ops, with FastDeploy release/2.4 signatures.

Every op takes its arguments positionally in FastDeploy's order and writes the
arguments its docstring marks "written" in place. Bad input raises ValueError
naming the argument. The compiled library is loaded on the first call.
"""
from ._loader import load
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
    "load",
    "draft_model_postprocess",
    "draft_model_preprocess",
    "draft_model_update",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "ngram_match",
    "hybrid_mtp_ngram",
]
