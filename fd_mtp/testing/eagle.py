"""Random-init EAGLE / EAGLE-3 heads for a target checkpoint (tests, and to try the option).

The layout written is `fd_mtp.model.eagle`'s (config.json + model.safetensors). A random head
drafts badly (low acceptance) but exercises every path: speculative output still equals plain
decoding.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

__all__ = ["random_eagle_head_weights", "write_exact_eagle_head", "write_random_eagle_head"]


def _target_config(target):
    from ..model.config import ErnieConfig
    from ..model.loader import CONFIG_FILE

    if isinstance(target, ErnieConfig):
        return target
    return ErnieConfig.from_file(Path(target) / CONFIG_FILE)


def random_eagle_head_weights(cfg, *, seed: int = 0, own_embedding=False, own_lm_head=False):
    """float32 tensors (``d2t`` int64) of every name of `fd_mtp.model.eagle.eagle_tensor_shapes`,
    deterministic per ``(seed, name)``, scaled as `fd_mtp.testing.random_weights`. EAGLE-3's
    draft vocabulary is a sorted random subset of the target ids (``d2t`` = offsets to them)."""
    from ..model.eagle import eagle_tensor_shapes

    shapes = eagle_tensor_shapes(cfg, own_embedding=own_embedding, own_lm_head=own_lm_head)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        if name == "d2t":
            ids = np.sort(rng.choice(cfg.vocab_size, cfg.draft_vocab_size, replace=False))
            out[name] = (ids - np.arange(cfg.draft_vocab_size)).astype(np.int64)
            continue
        z = rng.standard_normal(shape)
        if name.endswith("norm.weight"):
            v = 1.0 + 0.2 * z
        elif "embed_tokens" in name:
            v = 0.5 * z
        else:
            v = z / np.sqrt(shape[0])
        out[name] = v.astype(np.float32)
    return out


def write_random_eagle_head(
    path,
    target,
    *,
    method: str = "eagle3",
    seed: int = 0,
    aux_layer_ids=None,
    draft_vocab_size: int | None = None,
    intermediate_size: int | None = None,
    num_attention_heads: int | None = None,
    num_key_value_heads: int | None = None,
    head_dim: int | None = None,
    own_embedding: bool = False,
    own_lm_head: bool = False,
    config_overrides: dict | None = None,
) -> Path:
    """Write a random EAGLE (``method="eagle"``) or EAGLE-3 (``"eagle3"``) head for ``target`` (a
    checkpoint directory or an `ErnieConfig`) into ``path``; returns ``Path(path)``.

    The decoder layer's sizes default to the target's; EAGLE-3's layers to
    `fd_mtp.model.eagle.default_aux_layer_ids` and its draft vocabulary to half the target's.
    ``config_overrides`` are written into config.json as given, after the rest (tests use it to
    write heads that do not fit; nothing is checked here: `load_eagle_head` checks).

    >>> import tempfile
    >>> from fd_mtp.testing import tiny_config
    >>> d = write_random_eagle_head(tempfile.mkdtemp(), tiny_config(), method="eagle3")
    >>> sorted(p.name for p in d.iterdir())
    ['config.json', 'model.safetensors']
    """
    from ..model.eagle import EAGLE_METHODS, EagleHeadConfig, default_aux_layer_ids

    if method not in EAGLE_METHODS:
        raise ValueError(f"method must be one of {list(EAGLE_METHODS)}, got {method!r}")
    t = _target_config(target)
    d = {
        "model_type": {"eagle": "ernie4_5_eagle", "eagle3": "ernie4_5_eagle3"}[method],
        "hidden_size": t.hidden_size,
        "vocab_size": t.vocab_size,
        "intermediate_size": intermediate_size or t.intermediate_size,
        "num_attention_heads": num_attention_heads or t.num_attention_heads,
        "num_key_value_heads": num_key_value_heads or t.num_key_value_heads,
        "head_dim": head_dim or t.head_dim,
        "rms_norm_eps": t.rms_norm_eps,
        "rope_theta": t.rope_theta,
    }
    if method == "eagle3":
        d["draft_vocab_size"] = draft_vocab_size or max(1, t.vocab_size // 2)
        d["eagle_aux_hidden_state_layer_ids"] = (
            default_aux_layer_ids(t.num_hidden_layers)
            if aux_layer_ids is None
            else list(aux_layer_ids)
        )
    cfg = EagleHeadConfig.from_dict(d, t, method)
    weights = random_eagle_head_weights(
        cfg, seed=seed, own_embedding=own_embedding, own_lm_head=own_lm_head
    )
    return _save(path, cfg, weights, config_overrides)


def _save(path, cfg, weights, config_overrides=None) -> Path:
    from ..model.safetensors_io import save_safetensors

    d = cfg.to_dict()
    d.update(config_overrides or {})
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    save_safetensors(weights, out)
    return out


def write_exact_eagle_head(path, target_dir, *, method: str = "eagle3", seed: int = 0) -> Path:
    """A head for a `fd_mtp.testing.write_exact_draft_checkpoint` target (a bigram model: its
    greedy next token is ``f(token)``) that drafts ``f(token)``: the head's layer adds nothing
    (``o_proj``, ``down_proj`` zero), its input projection keeps only the embedding half
    (EAGLE-1 ``fc``, EAGLE-3 ``eh_proj`` = ``[I; 0]``), its final norm is the target's, and it
    reads the target's lm_head (EAGLE-3: the target lm_head's columns of its draft vocabulary,
    which is the image of ``f`` plus random ids up to half the vocabulary). With an ``context=0``
    target every draft is accepted (up to float rounding near ties); with ``context > 0`` part
    of them."""
    from ..model.safetensors_io import SafetensorsCheckpoint

    t = _target_config(target_dir)
    with SafetensorsCheckpoint.from_dir(target_dir) as w:
        embed = np.asarray(w["ernie.embed_tokens.weight"], np.float64)
        norm = np.asarray(w["ernie.norm.weight"], np.float64)
        head = embed.T if t.tie_word_embeddings else np.asarray(w["lm_head.weight"], np.float64)
    x = embed / np.sqrt(np.mean(embed * embed, axis=-1, keepdims=True) + t.rms_norm_eps)
    image = np.unique(np.argmax((x * norm) @ head, axis=-1))
    rng = np.random.default_rng(seed)
    size = max(image.size, t.vocab_size // 2)
    rest = np.setdiff1d(np.arange(t.vocab_size), image)
    ids = np.sort(np.concatenate([image, rng.choice(rest, size - image.size, replace=False)]))
    path = write_random_eagle_head(
        path, t, method=method, seed=seed, draft_vocab_size=int(ids.size) or None
    )
    from ..model.eagle import EagleHeadConfig

    cfg = EagleHeadConfig.from_file(Path(path) / "config.json", t, method)
    weights = random_eagle_head_weights(cfg, seed=seed)
    h = t.hidden_size
    eye = np.zeros([2 * h, h], np.float32)
    eye[:h] = np.eye(h, dtype=np.float32)
    for name in weights:
        if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            weights[name] = np.zeros_like(weights[name])
    weights["norm.weight"] = norm.astype(np.float32)
    if method == "eagle":
        weights["fc.weight"] = eye
    else:
        weights["eh_proj.weight"] = eye
        weights["enorm.weight"] = np.ones([h], np.float32)
        weights["lm_head.weight"] = head[:, ids].astype(np.float32)
        weights["d2t"] = (ids - np.arange(ids.size)).astype(np.int64)
    return _save(path, cfg, weights)


def main(argv=None) -> int:
    """``python -m fd_mtp.testing.eagle OUT_DIR [--target CKPT_DIR] [--method eagle|eagle3]
    [--seed N]``: write a random head for the target (default: the demo model); prints its path."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m fd_mtp.testing.eagle",
        description="write a random-init EAGLE / EAGLE-3 head for a target checkpoint",
    )
    p.add_argument("out", help="the head's directory (created)")
    p.add_argument("--target", default=None, help="the target checkpoint (default: the demo model)")
    p.add_argument("--method", choices=("eagle", "eagle3"), default="eagle3")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.target is None:
        from ..assets import default_model_path

        args.target = default_model_path()
    print(write_random_eagle_head(args.out, args.target, method=args.method, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
