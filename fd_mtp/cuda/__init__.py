"""The CUDA kernels on CuPy arrays, without paddle (for GPU tests and debugging).

``fd_mtp.cuda.<op>`` has the same positional signature as ``fd_mtp.ops.<op>`` and
``fd_mtp.reference.<op>``, takes CuPy arrays on the current device (``not_need_stop`` is a
host numpy bool array of one element, as the Paddle op takes a CPU tensor) and behaves like the
Paddle binding's GPU branch: bsz and row widths are derived the same way, bad shapes/dtypes and
data-dependent problems raise ValueError naming the argument (nothing written), and CUDA errors
raise RuntimeError. Every call synchronises the current stream.

The launchers live in the pybind11 module ``fd_mtp_cuda`` (custom_ops/cuda_module/), built
into ``fd_mtp/_lib`` by ``make cuda-module`` (or ``python cmake/fd_mtp_build.py cuda-module`` where
there is no paddle; see tools/gpu_check.sh). Set ``FD_MTP_CUDA_MODULE_DIR`` to load it
from another directory (an out-of-tree build's output dir).

Importing this module needs neither CuPy nor the compiled module; both load on first use.
"""

from ._common import BUILD_HINT, MODULE_DIR_ENV, load
from .blocks import recover_decode_task, speculate_schedule_cache, speculate_step_paddle
from .draft import (
    draft_model_postprocess,
    draft_model_preprocess,
    draft_model_update,
    eagle_get_hidden_states,
    eagle_get_self_hidden_states,
    mtp_step_paddle,
)
from .ipc import set_data_ipc, share_external_data, unset_data_ipc
from .ngram import hybrid_mtp_ngram, hybrid_mtp_ngram_host, ngram_match, ngram_match_host
from .packing import (
    pre_process,
    rebuild_padding,
    speculate_get_output_padding_offset,
    speculate_get_padding_offset,
    speculate_get_seq_lens_output,
)
from .sampling import speculate_get_token_penalty_multi_scores, top_p_candidates
from .update import (
    speculate_clear_accept_nums,
    speculate_set_stop_value_multi_seqs,
    speculate_set_value_by_flags_and_idx,
    speculate_update,
)
from .verify import philox4x32_10, speculate_verify

__all__ = [
    "BUILD_HINT",
    "MODULE_DIR_ENV",
    "load",
    "draft_model_preprocess",
    "draft_model_update",
    "draft_model_postprocess",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "set_data_ipc",
    "share_external_data",
    "unset_data_ipc",
    "speculate_set_stop_value_multi_seqs",
    "speculate_update",
    "speculate_set_value_by_flags_and_idx",
    "speculate_clear_accept_nums",
    "recover_decode_task",
    "speculate_schedule_cache",
    "speculate_step_paddle",
    "pre_process",
    "rebuild_padding",
    "speculate_get_output_padding_offset",
    "speculate_get_padding_offset",
    "speculate_get_seq_lens_output",
    "speculate_get_token_penalty_multi_scores",
    "top_p_candidates",
    "speculate_verify",
    "philox4x32_10",
    "ngram_match",
    "hybrid_mtp_ngram",
    "ngram_match_host",
    "hybrid_mtp_ngram_host",
]
