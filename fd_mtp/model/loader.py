"""Loading (and writing) ERNIE-4.5 checkpoint directories: ``config.json`` + safetensors.

A checkpoint directory holds ``config.json`` (:class:`fd_mtp.model.ErnieConfig` fields) and either
``model.safetensors`` or shards ``model-0000x-of-0000y.safetensors`` listed by
``model.safetensors.index.json`` (its ``weight_map``). :func:`load_checkpoint` builds
:class:`~fd_mtp.model.ernie.Ernie4_5ForCausalLM` and, when ``num_nextn_predict_layers >= 1`` and the
checkpoint has MTP weights, :class:`~fd_mtp.model.ernie.Ernie4_5MTP`; :func:`load_weights` copies a
``{name: array}`` mapping into either module. Nothing is downloaded, ever: paths are local.

The tensor names, layouts and fused projections accepted, and what is refused, are described in
fd_mtp.model.weights (:func:`load_weights`); reading and writing safetensors files in
fd_mtp.model.safetensors_io. Their public names are offered here too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np

from .config import ErnieConfig
from .safetensors_io import (
    SAFETENSORS_FILE,
    SAFETENSORS_INDEX_FILE,
    SafetensorsCheckpoint,
    checkpoint_files,
    save_safetensors,
)
from .weights import PROGRESS_BYTES, _canonical, _is_linear_weight, load_weights

__all__ = [
    "CONFIG_FILE",
    "SAFETENSORS_FILE",
    "SAFETENSORS_INDEX_FILE",
    "SafetensorsCheckpoint",
    "load_checkpoint",
    "load_weights",
    "load_tokenizer",
    "save_checkpoint",
    "save_safetensors",
    "checkpoint_files",
    "to_torch_layout",
]

CONFIG_FILE = "config.json"


# --------------------------------------------------------------------------- load_checkpoint
def load_checkpoint(
    path,
    *,
    dtype: str | None = None,
    attn_backend=None,
    strict: bool = True,
    layout: str = "auto",
    progress: bool | None = None,
    tp=None,
):
    """Build the models of checkpoint directory ``path``.

    Args:
        path: directory with ``config.json`` and ``model.safetensors`` (or shards + index).
        dtype: ``"float32"`` / ``"float16"`` / ``"bfloat16"`` parameters; None: the config's
            ``dtype`` (``torch_dtype``), except float32 when Paddle runs on the CPU (its CPU build
            has no half-precision matmul; the model refuses half dtypes there). The returned
            config carries the dtype used.
        attn_backend: passed to :class:`Ernie4_5ForCausalLM` (None: ``PagedAttentionCPU``).
        strict, layout, progress: see :func:`load_weights`.
        tp: a `fd_mtp.model.parallel.TensorParallel`: build this rank's shard of the models and
            load only its part of every tensor (ValueError when the group size does not divide
            the heads, kv heads, MLP widths or experts). None: the whole model.

    Returns:
        ``(model, mtp, config)``: ``mtp`` is an :class:`Ernie4_5MTP` sharing ``model``'s embedding,
        final norm and lm_head when ``config.num_nextn_predict_layers >= 1`` and the checkpoint has
        MTP weights (``ernie.mtp_*`` / ``model.mtp_*``), else None. Both in eval mode.

    Raises:
        FileNotFoundError (no directory / config / weights), ValueError naming the bad config field or
        the missing / mis-shaped / unexpected tensor.
    """
    from .ernie import Ernie4_5ForCausalLM, Ernie4_5MTP

    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {d}")
    if not (d / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{d}: no {CONFIG_FILE}")
    config = ErnieConfig.from_file(d / CONFIG_FILE)
    if dtype is None and config.dtype != "float32":
        import paddle

        if paddle.device.get_device() == "cpu":
            dtype = "float32"  # Paddle's CPU build has no half-precision matmul
    if dtype is not None:
        config = replace(config, dtype=str(dtype).replace("paddle.", ""))
    with SafetensorsCheckpoint.from_dir(d) as tensors:
        if progress is None:
            progress = tensors.nbytes() > PROGRESS_BYTES
        model = Ernie4_5ForCausalLM(config, attn_backend, tp=tp)
        load_weights(model, tensors, strict=strict, layout=layout, progress=progress)
        mtp = None
        has_mtp = any(_canonical(n).startswith("ernie.mtp_") for n in tensors)
        if config.num_nextn_predict_layers >= 1 and has_mtp:
            mtp = Ernie4_5MTP(config, model)
            load_weights(mtp, tensors, strict=strict, layout=layout, progress=progress)
            mtp.eval()
    model.eval()
    return model, mtp, config


def to_torch_layout(tensors: Mapping) -> dict:
    """``{name: value}`` of the Paddle layout (``ernie.*`` names, linear weights ``[in, out]``) in
    the layout paddleformers >= 1.0 and Hugging Face save and load: prefix ``model.`` instead of
    ``ernie.`` and linear weights ``[out, in]`` (q/k/v/o, gate/up/down, experts, shared experts,
    the router ``mlp.gate.weight``, ``mtp_linear_proj``, ``lm_head``). Embeddings, norms, biases
    and ``e_score_correction_bias`` are unchanged. Values may be numpy arrays or Paddle tensors."""
    out = {}
    for name in tensors:
        v = tensors[name]
        if _is_linear_weight(name) and len(v.shape) == 2:
            v = np.ascontiguousarray(v.T) if isinstance(v, np.ndarray) else v.T
        out["model." + name[len("ernie.") :] if name.startswith("ernie.") else name] = v
    return out


def save_checkpoint(
    directory,
    config: ErnieConfig,
    tensors: Mapping,
    *,
    shard_size: int | None = None,
    dtype: str | None = None,
    layout: str = "paddle",
) -> Path:
    """Write ``config.json`` and the safetensors file(s) of ``tensors`` (Paddle-layout names, as
    :func:`fd_mtp.model.ernie.state_dict_names`) into ``directory``. The MoE router
    (``mlp.gate.weight``) and ``e_score_correction_bias`` stay float32 whatever ``dtype``; the
    config's ``dtype`` is written as ``dtype`` when one is given (so it says what the tensors are).

    ``layout``: ``"paddle"`` writes the names and ``[in, out]`` weights as given; ``"torch"``
    writes :func:`to_torch_layout` (``model.*``, ``[out, in]``), the layout paddleformers'
    ``from_pretrained`` loads (it loads none of a ``"paddle"`` one). fd_mtp loads both."""
    if layout not in ("paddle", "torch"):
        raise ValueError(f"layout must be 'paddle' or 'torch', got {layout!r}")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    if dtype is not None:
        config = replace(config, dtype=str(dtype).replace("paddle.", ""))
    if layout == "torch":
        tensors = to_torch_layout(tensors)
    (d / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n")
    save_safetensors(
        tensors,
        d,
        shard_size=shard_size,
        dtype=dtype,
        keep_float32=(".mlp.gate.weight", "e_score_correction_bias"),
    )
    return d


# --------------------------------------------------------------------------- tokenizer
_TOKENIZER_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "spm.model",
)


def load_tokenizer(path):
    """The checkpoint's tokenizer (local files only; never downloads): paddleformers'
    ``AutoTokenizer`` when paddleformers is installed, else, for a SentencePiece ``tokenizer.model``
    (what ERNIE-4.5 checkpoints ship), `fd_mtp.model.tokenizer.SentencePieceTokenizer`, which needs
    only the ``sentencepiece`` package.

    Raises:
        FileNotFoundError: ``path`` is not a directory or has no tokenizer file
            (tokenizer_config.json, tokenizer.json, tokenizer.model, ...).
        ImportError: neither paddleformers nor (for tokenizer.model) sentencepiece is installed
            (prompts can still be token ids).
    """
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {d}")
    if not any((d / f).is_file() for f in _TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{d}: no tokenizer files (looked for {', '.join(_TOKENIZER_FILES)})"
        )
    try:
        from paddleformers.transformers import AutoTokenizer
    except ImportError as e:
        if (d / "tokenizer.model").is_file():
            from .tokenizer import SentencePieceTokenizer

            return SentencePieceTokenizer(d)
        raise ImportError(
            f"{d} has no tokenizer.model, and its tokenizer files need paddleformers, which is not "
            "installed (`pip install paddleformers`); without it, pass prompts as token-id lists"
        ) from e
    return AutoTokenizer.from_pretrained(str(d), local_files_only=True)
