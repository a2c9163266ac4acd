"""The CUDA kernels on CuPy arrays, without paddle (for GPU tests and debugging).

``fd_mtp.cuda.<op>`` has the same positional signature as ``fd_mtp.ops.<op>`` and
``fd_mtp.reference.<op>``, takes CuPy arrays on the current device (``not_need_stop`` is a
host numpy bool array of one element, as the Paddle op takes a CPU tensor) and behaves like the
Paddle binding's GPU branch: bsz and row widths are derived the same way, bad shapes/dtypes and
data-dependent problems raise ValueError naming the argument (nothing written), and CUDA errors
raise RuntimeError. Every call synchronises the current stream.

The launchers live in the pybind11 module ``fd_mtp_cuda`` (custom_ops/cuda_module/), built
into ``fd_mtp/_lib`` by ``cmake -S . -B build/gpu -DFD_MTP_WITH_PADDLE=OFF -DFD_MTP_WITH_CUDA=ON
&& cmake --build build/gpu`` (see tools/gpu_check.sh). Set ``FD_MTP_CUDA_MODULE_DIR`` to load it
from another directory (an out-of-tree build's output dir).

Importing this module needs neither CuPy nor the compiled module; both load on first use.
"""
from ._common import BUILD_HINT, MODULE_DIR_ENV, load  # noqa: F401 (public names)
from .draft import (
    draft_model_postprocess,
    draft_model_preprocess,
    draft_model_update,
    eagle_get_hidden_states,
    eagle_get_self_hidden_states,
    mtp_step_paddle,
)
from .ngram import hybrid_mtp_ngram, hybrid_mtp_ngram_host, ngram_match, ngram_match_host

__all__ = [
    "load",
    "draft_model_preprocess",
    "draft_model_update",
    "draft_model_postprocess",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "ngram_match",
    "hybrid_mtp_ngram",
    "ngram_match_host",
    "hybrid_mtp_ngram_host",
]
