"""Test and benchmark helpers: tiny ERNIE-4.5 checkpoints with random weights, written offline.

No tokenizer is written: producing a tokenizer paddleformers can load needs sentencepiece /
paddleformers, which are not dependencies (paddleformers 1.2.0 pins numpy <= 1.26.4 through
fast_dataindex, against our numpy 2.x). Tests and benchmarks on these checkpoints use token ids.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

__all__ = [
    "TINY_CONFIG",
    "TINY_MOE",
    "tiny_config",
    "random_weights",
    "write_random_checkpoint",
    "exact_draft_weights",
    "write_exact_draft_checkpoint",
    "naive_greedy",
]

#: The default tiny dense config (with an MTP block): hidden 64, 2 layers, vocab 300.
TINY_CONFIG = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    num_nextn_predict_layers=1,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    dtype="float32",
)
#: Defaults filled in when an override asks for experts (``moe_num_experts > 0``): layer 0 dense,
#: later layers MoE (as ERNIE-4.5-MoE), one shared expert, router correction bias (``moe_use_aux_free``).
TINY_MOE = dict(
    moe_k=2,
    moe_intermediate_size=32,
    moe_num_shared_experts=1,
    moe_layer_start_index=1,
    moe_use_aux_free=True,
)


def tiny_config(**overrides):
    """:class:`ErnieConfig` of :data:`TINY_CONFIG` with ``overrides`` (bad values: ValueError naming the
    field)."""
    from ..model.config import ErnieConfig

    fields = dict(TINY_CONFIG)
    if overrides.get("moe_num_experts", 0):
        fields.update(TINY_MOE)
    fields.update(overrides)
    return ErnieConfig(**fields)


def random_weights(config, *, seed: int = 0, mtp: bool = True) -> dict[str, np.ndarray]:
    """float32 weights for every name of :func:`state_dict_names` (Paddle layout), deterministic per
    ``seed``: linear weights ``N(0, 1/in)``, embedding ``N(0, 0.25)``, norm weights ``1 + N(0, 0.04)``,
    biases ``N(0, 0.0004)``, correction biases ``N(0, 0.0025)``. Each tensor has its own generator
    seeded by ``(seed, crc32(name))``, so a tensor's values do not depend on which others exist."""
    from ..model.ernie import state_dict_names

    names = state_dict_names(config, mtp=mtp)
    out: dict[str, np.ndarray] = {}
    for name in sorted(names):
        shape = names[name]
        z = np.random.default_rng([seed, zlib.crc32(name.encode())]).standard_normal(shape)
        if name.endswith("norm.weight") or "_norm." in name:
            v = 1.0 + 0.2 * z
        elif "e_score_correction_bias" in name:
            v = 0.05 * z
        elif name.endswith(".bias"):
            v = 0.02 * z
        elif "embed_tokens" in name:
            v = 0.5 * z
        else:
            v = z / np.sqrt(shape[0])
        out[name] = v.astype(np.float32)
    return out


def write_random_checkpoint(
    path,
    *,
    seed: int = 0,
    shard_size: int | None = None,
    with_mtp: bool = True,
    with_tokenizer: bool = False,
    layout: str = "paddle",
    **config_overrides,
) -> Path:
    """Write a tiny ERNIE-4.5 checkpoint directory: ``config.json`` + ``model.safetensors`` with random
    weights, MTP weights included (``num_nextn_predict_layers=1`` by default), deterministic per
    ``seed``. Dense by default; MoE with e.g. ``moe_num_experts=4``. Weights are stored in the config's
    ``dtype`` (float32 by default; the MoE router and correction bias stay float32). ``shard_size``
    (bytes) writes ``model-0000x-of-0000y.safetensors`` shards + ``model.safetensors.index.json``.
    ``with_mtp=False`` leaves the MTP weights out and writes ``num_nextn_predict_layers: 0`` (unless
    ``num_nextn_predict_layers`` is passed). ``layout="torch"`` writes the paddleformers / Hugging
    Face layout (``model.*`` names, ``[out, in]`` linear weights; see
    :func:`fd_mtp.model.loader.to_torch_layout`). ``with_tokenizer=True`` also writes a SentencePiece
    ``tokenizer.model`` (+ tokenizer_config.json) trained on a few standard-library docstrings, with
    at most ``vocab_size`` pieces (needs the sentencepiece package). Returns ``Path(path)``.

    >>> import tempfile
    >>> d = write_random_checkpoint(tempfile.mkdtemp(), seed=1)
    >>> sorted(p.name for p in d.iterdir())
    ['config.json', 'model.safetensors']
    """
    from ..model.loader import save_checkpoint

    if not with_mtp:
        # no MTP weights: the config says so too, unless the caller asks for the mismatch
        config_overrides.setdefault("num_nextn_predict_layers", 0)
    config = tiny_config(**config_overrides)
    weights = random_weights(config, seed=seed, mtp=with_mtp)
    dtype = None if config.dtype == "float32" else config.dtype
    out = save_checkpoint(
        Path(path), config, weights, shard_size=shard_size, dtype=dtype, layout=layout
    )
    if with_tokenizer:
        from ..model.tokenizer import train_sentencepiece

        train_sentencepiece(tokenizer_corpus(), out, vocab_size=config.vocab_size)
    return out


def tokenizer_corpus() -> str:
    """A small English text that is on every machine: docstrings of a few standard modules."""
    import collections
    import functools
    import json
    import textwrap

    return "\n".join(m.__doc__ or "" for m in (json, textwrap, collections, functools))


def exact_draft_weights(config, *, seed: int = 0, context: float = 0.0) -> dict[str, np.ndarray]:
    """Weights of a dense model whose MTP head always drafts what the target will emit (greedy).

    Every decoder layer's ``o_proj`` and ``down_proj`` are zero, so attention and MLP add nothing:
    the main model's hidden state at a token is ``norm(embed(token))`` and its greedy next token
    is a fixed function ``f(token)`` of the last token (a bigram model; attention and the KV cache
    still run, their output is just not used). The MTP block's ``eh_proj`` keeps only the
    embedding half of ``[enorm(embed(next)), hnorm(hidden)]`` (``[I; 0]``) and its layer adds
    nothing either, so it predicts ``f(next)``: exactly the target's token after ``next``. Greedy
    speculative decoding with this head accepts every draft at every position (acceptance 100%),
    which runs every multi-token accept path of the ops. Dense configs only.

    ``context > 0`` scales the main layers' ``o_proj`` to ``context`` times its random value
    instead of zero: the target then also depends on earlier tokens and the (still bigram)
    drafts are right only part of the time (a mix of accepted and rejected drafts).
    """
    if config.moe_num_experts:
        raise ValueError("exact_draft_weights: dense configs only (moe_num_experts = 0)")
    w = random_weights(config, seed=seed, mtp=True)
    for name in w:
        if name.endswith("self_attn.o_proj.weight") and name.startswith("ernie.layers."):
            w[name] = (context * w[name]).astype(np.float32)
        elif (
            name.endswith("self_attn.o_proj.weight")
            or name.endswith("mlp.down_proj.weight")
            or name.endswith("o_proj.bias")
            or name.endswith("down_proj.bias")
        ):
            w[name] = np.zeros_like(w[name])
        if name.endswith("mtp_emb_norm.0.weight"):
            w[name] = np.ones_like(w[name])
    h = config.hidden_size
    proj = np.zeros([2 * h, h], np.float32)
    proj[:h] = np.eye(h, dtype=np.float32)
    w["ernie.mtp_linear_proj.0.weight"] = proj
    return w


def write_exact_draft_checkpoint(
    path, *, seed: int = 0, context: float = 0.0, **config_overrides
) -> Path:
    """Write a checkpoint with :func:`exact_draft_weights` (tiny dense config + ``overrides``; the
    lm_head is not tied to the embedding by default, so that ``f`` is not the identity)."""
    from ..model.loader import save_checkpoint

    config = tiny_config(**{"tie_word_embeddings": False, **config_overrides})
    return save_checkpoint(
        Path(path), config, exact_draft_weights(config, seed=seed, context=context)
    )


def naive_greedy(model, prompt, max_tokens: int, stop_ids=()) -> list[int]:
    """The target's greedy continuation of ``prompt`` by full recompute (the tests' oracle):
    ``model.dense_forward`` over prompt + output for every token, argmax of the last row; stops
    after a token of ``stop_ids``."""
    import paddle

    ids, out = list(prompt), []
    with paddle.no_grad():
        for _ in range(max_tokens):
            h = model.dense_forward(paddle.to_tensor(ids, dtype="int64"))
            tok = int(model.compute_logits(h[-1:]).numpy()[0].argmax())
            out.append(tok)
            ids.append(tok)
            if tok in stop_ids:
                break
    return out
