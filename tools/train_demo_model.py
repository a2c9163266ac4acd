#!/usr/bin/env python
"""Train the tiny ERNIE-4.5 + MTP demo checkpoint (``fd_mtp/assets/ernie45_tiny_mtp``) on a CPU.

What it trains: a dense ERNIE-4.5 (GQA, tied embeddings, interleaved RoPE) with one MTP block
(``num_nextn_predict_layers=1``), built from `fd_mtp.model.ernie` so parameter names are exactly
the checkpoint names, with the ERNIE / DeepSeek-V3 joint MTP loss::

    loss = CE(main logits at t, x[t+1])
         + lambda1 * CE(MTP step 1 at t, x[t+2])      # MTP input: embed(x[t+1]), main hidden h_t
         + lambda2 * CE(MTP step 2 at t, x[t+3])      # MTP input: embed(x[t+2]), MTP-1 hidden at t

With ``--unlikelihood ALPHA`` the main head also gets the token-level unlikelihood term of
Welleck et al., "Neural Text Generation with Unlikelihood Training" (ICLR 2020)::

    + ALPHA * mean_t sum_{c in C_t} -log(1 - p(c | x[..t]))    # C_t: tokens of x[0..t], not x[t+1]

which lowers the probability of repeating an earlier token of the window where the data does not
repeat it: the self-reinforcing loops of greedy decoding (the same line again and again) are what
it targets; the likelihood term still raises the true next token, repeated or not.

Step 2 is the same MTP block applied to its own normed output, as at inference with
``num_model_steps > 1`` (spec §10, §4.1 7.2.j). It is trained the way inference runs it: the step-2
token sits at MTP position t+1 (RoPE angle t+1) and attends to the step-1 keys/values of
positions 0..t (those the MTP KV cache holds at inference) and to itself.
lambda1 = 0.5 / lambda2 = 0.25 (defaults): the draft's acceptance rate is what this model
demonstrates, so the MTP losses weigh more than DeepSeek-V3's 0.3 -> 0.1, while the main loss
still dominates the shared embedding / final norm / lm_head.

Corpus: the ``.py`` sources of the running interpreter's standard library
(``sysconfig.get_paths()["stdlib"]``), which every Python installation has offline. Licence: the
Python Software Foundation License (PSF-2.0). Left out: ``site-packages``, every ``test`` /
``tests`` directory (``test/``, ``lib2to3/tests``, ``unittest/test``, ...), ``idlelib/``,
``pydoc_data/`` and ``encodings/`` (generated tables), and files over 200 kB. Sorted by relative
path; a file is held out for validation when ``zlib.crc32(relpath) % 20 == 0``.
Options that widen or clean the corpus (each recorded in ``train_info.json`` and the README):
``--with-tests`` adds the standard library's own test files to the training side;
``--library-code`` adds the hand-written library code of the project's installed dependencies
(``fd_mtp.assets.corpus.library_files``: the packages of ``LIBRARY_PACKAGES`` in the interpreter's
``purelib`` directory, without tests, vendored copies, data tables, exact copies of
standard-library files or near-copies of held-out ones) to the training side, about 8M more
tokens, so a run of a few thousand steps sees most text once; ``--strip-comments`` removes the
comments (not the docstrings) from every training and validation text. The validation files stay
the held-out standard-library files. A warm start scores its starting weights on the run's own
validation windows first (``init_from.val_this_run``), so a run that changes the corpus options
still has a before / after on the same windows.

Tokenizer: SentencePiece BPE with byte fallback, identity normalisation, no whitespace folding, no
dummy prefix, whitespace-only pieces allowed and ``"\\n"`` as a user-defined piece, so
``decode(encode(text)) == text`` for any text (checked on every validation file). ids 0 unk,
1 bos, 2 eos, 3 pad (the config's ids); files are joined with eos.

Training: float32, [B, S+3] windows drawn uniformly from the training token stream by a seeded
numpy generator, AdamW (betas 0.9/0.95, weight decay 0.1 on matrices only), linear warmup +
cosine decay to 10 %, global-norm gradient clipping 1.0. Every ``--save-every`` steps the state
(``state.pdparams``, ``state.pdopt``, ``state.json`` with the step, the sampler's RNG state and the
log) is written to ``--out``; ``--resume`` continues from it exactly (same losses as an
uninterrupted run). ``--max-minutes`` stops cleanly (saves, exports) before the step budget.
Threads: ``--threads`` sets OMP/MKL and Paddle's CPU thread count (set before Paddle is imported).

Outputs (``--export``, default ``fd_mtp/assets/ernie45_tiny_mtp``): config.json +
model.safetensors (float32 by default, ``--export-dtype bfloat16`` halves it; paddleformers'
layout: ``model.*`` names, ``[out, in]`` linear weights; `fd_mtp.model.loader.load_checkpoint`
reads it back as float32 on CPU),
tokenizer.model + tokenizer_config.json, README.md, train_log.csv, loss_curve.png, train_info.json.
``--export-only --from-state DIR`` exports a snapshot of a running training.

Example (the demo checkpoint's two runs; ``--help`` lists every option)::

    python tools/train_demo_model.py --out runs/demo --export runs/stage1   # the defaults: 1500 steps
    python tools/train_demo_model.py --init-from runs/stage1 --out runs/demo3 \\
        --steps 2200 --lr 1.5e-3 --warmup 100                               # warm start: 2200 more
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(REPO))
from fd_mtp.assets.corpus import (  # noqa: E402
    LIBRARY_FILES_RULE,
    MAX_FILE_BYTES,
    SPLIT_RULE,
    TEST_DIRS,
    TEST_FILES_RULE,
    library_files,
    library_root,
    read_text,
    split_corpus,
    stdlib_root,
    strip_comments,
)

DEFAULT_EXPORT = REPO / "fd_mtp" / "assets" / "ernie45_tiny_mtp"
STATE_FILES = ("state.pdparams", "state.pdopt", "state.json")
FINAL_RESERVE_S = 60  # --max-minutes: seconds kept for the final evaluation, snapshot and export


# --------------------------------------------------------------------------- arguments
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Train the tiny ERNIE-4.5 + MTP demo model on the Python standard library's sources "
        "(CPU, float32) and export it as an fd_mtp checkpoint directory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = p.add_argument_group("run")
    g.add_argument(
        "--out",
        type=Path,
        default=REPO / "runs" / "demo",
        help="work directory: tokenizer, token cache, state snapshots, log, plot",
    )
    g.add_argument("--export", type=Path, default=DEFAULT_EXPORT, help="final checkpoint directory")
    g.add_argument("--resume", action="store_true", help="continue from the snapshot in --out")
    g.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="warm start: initial weights and tokenizer from this exported checkpoint directory "
        "(e.g. the shipped demo model) instead of a random init; a new schedule of --steps "
        "(fresh optimizer); the model options must match its config.json",
    )
    g.add_argument(
        "--export-only",
        action="store_true",
        help="no training: export the snapshot of --from-state (default --out) to --export",
    )
    g.add_argument(
        "--from-state", type=Path, default=None, help="snapshot directory for --export-only"
    )
    g.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="wall-clock budget of this invocation, from its start: training stops "
        f"{FINAL_RESERVE_S} s before it to leave time for the final evaluation, save and export",
    )
    g.add_argument(
        "--stop-after",
        type=int,
        default=None,
        help="stop cleanly (save + export) after this step, as an interruption would; "
        "--resume continues to --steps (the schedule is that of --steps)",
    )
    g.add_argument("--threads", type=int, default=2, help="CPU threads (OMP / MKL / Paddle)")
    g.add_argument("--seed", type=int, default=1234)
    g.add_argument("--save-every", type=int, default=50, help="snapshot every N steps")
    g.add_argument("--eval-every", type=int, default=50, help="validation every N steps")
    g.add_argument("--eval-windows", type=int, default=24, help="validation windows (fixed)")
    g.add_argument("--no-progress", action="store_true", help="no tqdm bar (log lines instead)")
    g.add_argument(
        "--corpus-dir",
        type=Path,
        default=None,
        help="read *.py files here instead of the standard library (tests)",
    )
    g.add_argument(
        "--with-tests",
        action="store_true",
        help="also train on the standard library's test files (test/, */tests/: "
        "fd_mtp.assets.corpus.test_files); the validation files stay the same",
    )
    g.add_argument(
        "--library-code",
        action="store_true",
        help="also train on the library code of the installed dependencies "
        "(fd_mtp.assets.corpus.library_files: LIBRARY_PACKAGES, no tests, no copies of held-out "
        "files); the validation files stay the same",
    )
    g.add_argument(
        "--strip-comments",
        action="store_true",
        help="remove comments from every training and validation text "
        "(fd_mtp.assets.corpus.strip_comments; docstrings stay)",
    )
    g = p.add_argument_group("optimisation")
    g.add_argument("--steps", type=int, default=1500)
    g.add_argument("--batch-size", type=int, default=8)
    g.add_argument("--seq-len", type=int, default=256)
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    g.add_argument("--min-lr-ratio", type=float, default=0.1, help="final lr / peak lr (cosine)")
    g.add_argument("--warmup", type=int, default=100, help="linear warmup steps")
    g.add_argument("--weight-decay", type=float, default=0.1)
    g.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip")
    g.add_argument(
        "--mtp-weight", type=float, default=0.5, help="lambda1: MTP step-1 loss (x[t+2])"
    )
    g.add_argument(
        "--mtp2-weight",
        type=float,
        default=0.25,
        help="lambda2: MTP step-2 loss (x[t+3], the block fed its own hidden); 0 disables",
    )
    g.add_argument(
        "--unlikelihood",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="weight of the main head's token-level unlikelihood term (Welleck et al. 2020: "
        "-log(1 - p) of the window's earlier tokens other than the target); 0 disables",
    )
    g = p.add_argument_group("model")
    g.add_argument("--vocab-size", type=int, default=3072)
    g.add_argument("--hidden-size", type=int, default=256)
    g.add_argument("--intermediate-size", type=int, default=704)
    g.add_argument("--layers", type=int, default=6)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--kv-heads", type=int, default=2)
    g.add_argument("--max-position-embeddings", type=int, default=2048)
    g.add_argument("--rope-theta", type=float, default=10000.0)
    g.add_argument(
        "--tokenizer-chars",
        type=int,
        default=3_000_000,
        help="characters of training files the tokenizer is trained on",
    )
    g.add_argument("--export-dtype", default="float32", choices=["bfloat16", "float32"])
    return p


def set_threads(n: int) -> None:
    """Before paddle is imported: OpenMP / MKL pools; after: Paddle's own CPU math threads."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)


# --------------------------------------------------------------------------- corpus
TOKENIZER_OPTIONS = dict(
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    add_dummy_prefix=False,
    allow_whitespace_only_pieces=True,
    user_defined_symbols=["\n"],
    split_digits=True,
    byte_fallback=True,
)


def load_text(p: Path, strip: bool = False) -> str:
    """A corpus file's text as the model sees it: comments removed with ``strip``."""
    t = read_text(p)
    return strip_comments(t) if strip else t


def library_versions() -> dict[str, str]:
    """``{package: "distribution version"}`` of the installed `LIBRARY_PACKAGES`."""
    from importlib import metadata

    from fd_mtp.assets.corpus import LIBRARY_PACKAGES

    dists = metadata.packages_distributions()
    out = {}
    for pkg in LIBRARY_PACKAGES:
        for dist in dists.get(pkg, [])[:1]:
            out[pkg] = f"{dist} {metadata.version(dist)}"
    return out


def build_tokenizer(
    out: Path,
    train_files,
    vocab_size: int,
    max_chars: int,
    init_from: Path | None = None,
    strip: bool = False,
):
    """The run's tokenizer in ``out/tokenizer``: trained once (cached), or with ``init_from`` the
    warm-start checkpoint's own tokenizer, copied (its ids are the ones the weights were trained on)."""
    import shutil

    from fd_mtp.model.tokenizer import SentencePieceTokenizer, train_sentencepiece

    tok_dir = out / "tokenizer"
    settings = {
        "vocab_size": vocab_size,
        "max_chars": max_chars,
        "options": TOKENIZER_OPTIONS,
        "train_files": [r for r, _ in train_files],
    }
    if strip:
        settings["strip_comments"] = True
    if init_from is not None:
        settings["copied_from"] = str(init_from.resolve())
        if not (tok_dir / "tokenizer.model").is_file():
            tok_dir.mkdir(parents=True, exist_ok=True)
            for name in ("tokenizer.model", "tokenizer_config.json"):
                if not (init_from / name).is_file():
                    raise SystemExit(f"--init-from {init_from}: no {name}")
                shutil.copyfile(init_from / name, tok_dir / name)
            (tok_dir / "settings.json").write_text(json.dumps(settings) + "\n")
    if (tok_dir / "settings.json").is_file():
        if json.loads((tok_dir / "settings.json").read_text()) != json.loads(json.dumps(settings)):
            raise SystemExit(
                f"{tok_dir} was trained with other settings or files (vocab size, corpus); "
                "use a fresh --out"
            )
    if not (tok_dir / "tokenizer.model").is_file():
        sample, n = [], 0
        for _, p in train_files:  # sorted, deterministic: the first max_chars characters
            if n >= max_chars:
                break
            t = load_text(p, strip)
            sample.append(t)
            n += len(t)
        train_sentencepiece("\n".join(sample), tok_dir, vocab_size=vocab_size, **TOKENIZER_OPTIONS)
        (tok_dir / "settings.json").write_text(json.dumps(settings) + "\n")
    return SentencePieceTokenizer(tok_dir)


def tokenize(out: Path, tok, files, name: str, check_roundtrip: bool, strip: bool = False):
    """One int32 stream: each file's ids followed by eos. Cached in ``out/{name}_tokens.npy``."""
    import numpy as np

    cache = out / f"{name}_tokens.npy"
    if cache.is_file():
        return np.load(cache)
    parts, bad = [], []
    for rel, p in files:
        text = load_text(p, strip)
        ids = tok.encode(text, split_special_tokens=True)  # "<s>" in code is text, not bos
        if check_roundtrip and tok.decode(ids) != text:
            bad.append(rel)
        parts.append(np.asarray(ids + [tok.eos_token_id], dtype=np.int32))
    if bad:
        raise SystemExit(f"tokenizer does not round-trip {len(bad)} {name} files, e.g. {bad[:3]}")
    arr = np.concatenate(parts)
    np.save(cache, arr)
    return arr


# --------------------------------------------------------------------------- model
def make_config(args, tok):
    from fd_mtp.model.config import ErnieConfig

    return ErnieConfig(
        vocab_size=tok.vocab_size,
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        rms_norm_eps=1e-5,
        rope_theta=args.rope_theta,
        max_position_embeddings=args.max_position_embeddings,
        tie_word_embeddings=True,
        use_bias=False,
        num_nextn_predict_layers=1,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        dtype="float32",
    )


def build_models(cfg, seed: int, trainable: bool = True):
    """Main model + MTP (fd_mtp.model.ernie classes), initialised N(0, 0.02) (output projections
    scaled by 1/sqrt(2 * layers)), norms 1; trainable (undoes ``_freeze``) when asked."""
    import numpy as np
    import paddle

    from fd_mtp.model.ernie import Ernie4_5ForCausalLM, Ernie4_5MTP

    model = Ernie4_5ForCausalLM(cfg)
    mtp = Ernie4_5MTP(cfg, model)
    rng = np.random.default_rng(seed)
    depth_scale = 1.0 / math.sqrt(2 * (cfg.num_hidden_layers + 1))
    for layer in (model, mtp):
        for name, prm in sorted(layer.named_parameters()):
            if len(prm.shape) == 1:
                val = np.ones(prm.shape, np.float32)
            else:
                std = 0.02 * (
                    depth_scale if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
                )
                val = (std * rng.standard_normal(prm.shape)).astype(np.float32)
            prm.set_value(paddle.to_tensor(val))
            prm.stop_gradient = not trainable
        layer.train() if trainable else layer.eval()
    return model, mtp


def causal_mask(s: int):
    import paddle

    m = paddle.triu(paddle.full([s, s], float("-inf"), dtype="float32"), diagonal=1)
    return m.reshape([1, 1, s, s])


def _heads(x, n, d):
    b, s = x.shape[0], x.shape[1]
    return x.reshape([b, s, n, d])


def _expand_kv(k, g):
    import paddle

    return k if g == 1 else paddle.repeat_interleave(k, g, axis=2)


def layer_forward(layer, x, cos, sin, mask, return_kv: bool = False):
    """Batched pre-norm decoder layer over ``x [B, S, H]`` with causal attention, the same maths as
    the packed path: interleaved RoPE, GQA (query head j reads kv head j // group), 1/sqrt(D)."""
    import paddle
    import paddle.nn.functional as F

    from fd_mtp.model.attention import apply_rope_interleaved

    attn = layer.self_attn
    nh, nkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    h = layer.input_layernorm(x)
    q = apply_rope_interleaved(_heads(attn.q_proj(h), nh, d), cos, sin)  # [B, S, Hq, D]
    k = apply_rope_interleaved(_heads(attn.k_proj(h), nkv, d), cos, sin)  # [B, S, Hkv, D]
    v = _heads(attn.v_proj(h), nkv, d)
    g = nh // nkv
    qh = q.transpose([0, 2, 1, 3])
    kh = _expand_kv(k, g).transpose([0, 2, 1, 3])
    vh = _expand_kv(v, g).transpose([0, 2, 1, 3])
    scores = paddle.matmul(qh, kh, transpose_y=True) * (1.0 / math.sqrt(d)) + mask
    o = paddle.matmul(F.softmax(scores, axis=-1), vh)  # [B, Hq, S, D]
    o = o.transpose([0, 2, 1, 3]).reshape([x.shape[0], x.shape[1], nh * d])
    x = x + attn.o_proj(o)
    x = x + layer.mlp(layer.post_attention_layernorm(x))
    return (x, (kh, vh)) if return_kv else x


def mtp_step2_layer(layer, x, cos_next, sin_next, kv1, mask):
    """The MTP decoder layer for recursive step 2 as inference runs it: query i is MTP position i+1
    (RoPE ``cos_next``/``sin_next`` = angles of positions 1..S), attending to the step-1 keys /
    values of positions 0..i (``kv1``, causal ``mask``) and to its own key / value."""
    import paddle
    import paddle.nn.functional as F

    from fd_mtp.model.attention import apply_rope_interleaved

    attn = layer.self_attn
    nh, nkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    g = nh // nkv
    h = layer.input_layernorm(x)
    q = apply_rope_interleaved(_heads(attn.q_proj(h), nh, d), cos_next, sin_next).transpose(
        [0, 2, 1, 3]
    )
    k = _expand_kv(apply_rope_interleaved(_heads(attn.k_proj(h), nkv, d), cos_next, sin_next), g)
    v = _expand_kv(_heads(attn.v_proj(h), nkv, d), g)
    k, v = k.transpose([0, 2, 1, 3]), v.transpose([0, 2, 1, 3])  # [B, Hq, S, D]
    k1, v1 = kv1
    scale = 1.0 / math.sqrt(d)
    cross = paddle.matmul(q, k1, transpose_y=True) * scale + mask  # keys 0..i
    own = (q * k).sum(axis=-1, keepdim=True) * scale  # [B, Hq, S, 1]
    p = F.softmax(paddle.concat([cross, own], axis=-1), axis=-1)
    o = paddle.matmul(p[..., :-1], v1) + p[..., -1:] * v
    o = o.transpose([0, 2, 1, 3]).reshape([x.shape[0], x.shape[1], nh * d])
    x = x + attn.o_proj(o)
    return x + layer.mlp(layer.post_attention_layernorm(x))


def mtp_project(mtp, ids, prev_hidden):
    import paddle

    e = mtp.embed_tokens(ids)
    return mtp.eh_proj(paddle.concat([mtp.enorm(e), mtp.hnorm(prev_hidden)], axis=-1))


def batched_forward(model, mtp, window, *, steps: int = 2):
    """Training forward of ``window [B, S+1+steps]`` int64 tokens. Returns final-normed hidden
    states, each ``[B, S, H]``: ``main`` (position t, predicts x[t+1]), ``mtp1`` (MTP at position t
    on embed(x[t+1]) and main hidden t, predicts x[t+2]) and, when ``steps == 2``, ``mtp2`` (MTP
    position t+1 on embed(x[t+2]) and mtp1 hidden t, predicts x[t+3])."""
    import paddle

    from fd_mtp.model.attention import rope_cos_sin

    cfg = model.config
    s = window.shape[1] - 1 - steps
    pos = paddle.arange(0, s + 1, dtype="int64")
    cos_all, sin_all = rope_cos_sin(pos, cfg.head_dim, cfg.rope_theta)
    cos, sin = cos_all[:s], sin_all[:s]
    mask = causal_mask(s)
    x = model.embed_tokens(window[:, :s])
    for layer in model.layers:
        x = layer_forward(layer, x, cos, sin, mask)
    out = {"main": model.norm(x)}
    x = mtp_project(mtp, window[:, 1 : s + 1], out["main"])
    x, kv1 = layer_forward(mtp.mtp_block, x, cos, sin, mask, return_kv=True)
    out["mtp1"] = model.norm(x)
    if steps >= 2:
        x = mtp_project(mtp, window[:, 2 : s + 2], out["mtp1"])
        x = mtp_step2_layer(mtp.mtp_block, x, cos_all[1:], sin_all[1:], kv1, mask)
        out["mtp2"] = model.norm(x)
    return out


def unlikelihood(logits, window):
    """Token-level unlikelihood of the main head (Welleck et al. 2020): the mean over positions t
    of ``sum_{c in C_t} -log(1 - p(c))``, ``C_t`` the distinct tokens of ``window[:, :t+1]``
    other than the target ``window[:, t+1]``; ``logits [B, S, V]``."""
    import paddle
    import paddle.nn.functional as F

    b, s, v = logits.shape
    seen = F.one_hot(window[:, :s], v).cumsum(axis=1) > 0  # token in x[0..t]
    target = F.one_hot(window[:, 1 : s + 1], v) > 0
    cand = paddle.logical_and(seen, paddle.logical_not(target)).astype(logits.dtype)
    p = F.softmax(logits, axis=-1)
    return -(paddle.log(paddle.clip(1.0 - p, min=1e-5)) * cand).sum(axis=-1).mean()


def losses(model, mtp, window, steps: int, ul: bool = False):
    """``{"main", "mtp1"[, "mtp2"]}`` mean cross-entropies and top-1 correct counts, targets
    ``x[t+1]``, ``x[t+2]``, ``x[t+3]``; with ``ul`` also ``"ul"``, the main head's `unlikelihood`."""
    import paddle
    import paddle.nn.functional as F

    hidden = batched_forward(model, mtp, window, steps=steps)
    s = window.shape[1] - 1 - steps
    out = {}
    for k, (name, h) in enumerate(hidden.items()):
        logits = model.compute_logits(h)
        target = window[:, 1 + k : s + 1 + k]
        out[name] = F.cross_entropy(
            logits.reshape([-1, logits.shape[-1]]), target.reshape([-1, 1])
        ).mean()
        out[name + "_correct"] = (paddle.argmax(logits, axis=-1) == target).astype("float32").sum()
        if ul and name == "main":
            out["ul"] = unlikelihood(logits, window)
    return out


# --------------------------------------------------------------------------- training state
def lr_at(step: int, args) -> float:
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
    return args.lr * (
        args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))
    )


def all_parameters(model, mtp):
    return list(model.parameters()) + list(mtp.parameters())


def make_optimizer(args, model, mtp):
    import paddle

    params = all_parameters(model, mtp)
    decay = {p.name for p in params if len(p.shape) >= 2}
    return paddle.optimizer.AdamW(
        learning_rate=args.lr,
        parameters=params,
        beta1=0.9,
        beta2=0.95,
        epsilon=1e-8,
        weight_decay=args.weight_decay,
        apply_decay_param_fun=lambda n: n in decay,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(args.clip),
    )


def checkpoint_tensors(model, mtp) -> dict:
    sd = {k: v for k, v in model.state_dict().items()}
    sd.update(mtp.state_dict())
    return sd


def _param_names(model, mtp) -> dict[str, str]:
    """Paddle's generated parameter name (``linear_3.w_0``, different in every process that built
    other layers first) -> checkpoint name."""
    out = {p.name: k for k, p in model.named_parameters()}
    out.update({p.name: k for k, p in mtp.named_parameters()})
    return out


def optimizer_state(opt, model, mtp) -> dict:
    """The optimizer's state with accumulators keyed ``checkpoint_name/suffix``, so a snapshot loads
    into models built anywhere (Paddle keys them by generated names)."""
    names = _param_names(model, mtp)
    out = {}
    for key, v in opt.state_dict().items():
        owner = next((n for n in names if key.startswith(n + "_")), None)
        out[f"{names[owner]}/{key[len(owner) + 1 :]}" if owner else key] = v
    return out


def load_optimizer_state(opt, model, mtp, state: dict) -> None:
    by_ckpt = {k: n for n, k in _param_names(model, mtp).items()}
    fixed = {}
    for key, v in state.items():
        if "/" in key:
            ckpt, suffix = key.split("/", 1)
            key = f"{by_ckpt[ckpt]}_{suffix}"
        fixed[key] = v
    opt.set_state_dict(fixed)


def save_state(out: Path, model, mtp, opt, meta: dict) -> None:
    import paddle

    tmp = out / "state.tmp"
    tmp.mkdir(exist_ok=True)
    paddle.save(checkpoint_tensors(model, mtp), str(tmp / "state.pdparams"))
    paddle.save(optimizer_state(opt, model, mtp), str(tmp / "state.pdopt"))
    (tmp / "state.json").write_text(json.dumps(meta, indent=1) + "\n")
    for name in STATE_FILES:  # state.json last: a snapshot is complete once its json is in place
        os.replace(tmp / name, out / name)
    tmp.rmdir()


def load_params(state_dir: Path, model, mtp) -> None:
    import paddle

    sd = paddle.load(str(state_dir / "state.pdparams"))
    want = set(checkpoint_tensors(model, mtp))
    if set(sd) != want:
        raise SystemExit(
            f"{state_dir / 'state.pdparams'} does not match the model: missing "
            f"{sorted(want - set(sd))[:5]}, unexpected {sorted(set(sd) - want)[:5]}"
        )
    model.set_state_dict({k: v for k, v in sd.items() if not k.startswith("ernie.mtp_")})
    mtp.set_state_dict({k: v for k, v in sd.items() if k.startswith("ernie.mtp_")})


INIT_MATCH_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rope_theta",
    "rms_norm_eps",
    "tie_word_embeddings",
    "num_nextn_predict_layers",
)


def init_from_checkpoint(src: Path, cfg, model, mtp) -> dict:
    """Warm start: copy the weights of the exported checkpoint ``src`` into the trainable models
    (its shapes must be this run's: the fields of ``INIT_MATCH_FIELDS`` are compared first).
    Returns what the run records of it (its training summary)."""
    from fd_mtp.model.config import ErnieConfig
    from fd_mtp.model.loader import SafetensorsCheckpoint, load_weights

    if not (src / "config.json").is_file():
        raise SystemExit(f"--init-from {src}: no config.json (not a checkpoint directory)")
    theirs = ErnieConfig.from_file(src / "config.json")
    diff = [
        f"{f} {getattr(theirs, f)!r} (this run: {getattr(cfg, f)!r})"
        for f in INIT_MATCH_FIELDS
        if getattr(theirs, f) != getattr(cfg, f)
    ]
    if diff:
        raise SystemExit(
            f"--init-from {src}: its config differs from this run's model options: "
            + "; ".join(diff)
        )
    with SafetensorsCheckpoint.from_dir(src) as tensors:
        load_weights(model, tensors, strict=True, progress=False)
        load_weights(mtp, tensors, strict=True, progress=False)
    for layer in (model, mtp):
        for prm in layer.parameters():
            prm.stop_gradient = False
        layer.train()
    record = {"dir": str(src)}
    info_file = src / "train_info.json"
    if info_file.is_file():
        info = json.loads(info_file.read_text())
        record.update(
            {
                k: info.get(k)
                for k in (
                    "step",
                    "tokens_seen",
                    "tokens_seen_total",
                    "wall_time_s",
                    "wall_time_s_total",
                    "command",
                    "steps_planned",
                    "stopped_early",
                )
            }
        )
        record["final_val"] = info.get("final_val")
        if info.get("init_from"):
            record["init_from"] = info["init_from"]
    return record


# --------------------------------------------------------------------------- evaluation
def validation_windows(val_tokens, n: int, length: int):
    """The first ``n`` non-overlapping windows of the validation stream (fixed set)."""
    import numpy as np

    n = min(n, len(val_tokens) // length)
    return np.stack([val_tokens[i * length : (i + 1) * length] for i in range(n)]).astype(np.int64)


def evaluate(model, mtp, windows, steps: int, batch: int) -> dict:
    import paddle

    model.eval()
    mtp.eval()
    tot: dict[str, float] = {}
    n_tok = 0
    with paddle.no_grad():
        for i in range(0, len(windows), batch):
            w = paddle.to_tensor(windows[i : i + batch])
            r = losses(model, mtp, w, steps)
            s = w.shape[1] - 1 - steps
            for k, v in r.items():
                tot[k] = tot.get(k, 0.0) + float(v) * (
                    w.shape[0] * s if not k.endswith("_correct") else 1
                )
            n_tok += w.shape[0] * s
    model.train()
    mtp.train()
    res = {}
    for k, v in tot.items():
        res[("val_" + k.replace("_correct", "_acc"))] = v / n_tok
    return res


# --------------------------------------------------------------------------- outputs
LOG_FIELDS = [
    "step",
    "elapsed_s",
    "lr",
    "loss",
    "main",
    "mtp1",
    "mtp2",
    "ul",
    "val_main",
    "val_mtp1",
    "val_mtp2",
    "val_main_acc",
    "val_mtp1_acc",
    "val_mtp2_acc",
]


def write_log(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LOG_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})


def plot(path: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    train = [r for r in rows if "main" in r]
    for key, label in (
        ("main", "train main CE (x[t+1])"),
        ("mtp1", "train MTP CE (x[t+2])"),
        ("mtp2", "train MTP step-2 CE (x[t+3])"),
    ):
        pts = [(r["step"], r[key]) for r in train if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), lw=0.8, alpha=0.8, label=label)
    for key, label in (("val_main", "val main CE"), ("val_mtp1", "val MTP CE")):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            ax.plot(*zip(*pts), "o-", ms=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("ERNIE-4.5 tiny + MTP on the Python standard library")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def count_params(sd: dict) -> int:
    return int(sum(math.prod(v.shape) for v in sd.values()))


def export(args, state_dir: Path, dest: Path, meta: dict) -> dict:
    """Write the checkpoint directory ``dest`` from the snapshot in ``state_dir``."""
    import shutil

    from fd_mtp.model.config import ErnieConfig
    from fd_mtp.model.loader import save_checkpoint

    cfg = ErnieConfig.from_dict(meta["config"])
    model, mtp = build_models(cfg, 0, trainable=False)
    load_params(state_dir, model, mtp)
    sd = checkpoint_tensors(model, mtp)
    dest.mkdir(parents=True, exist_ok=True)
    for stale in dest.glob("model*.safetensors*"):
        stale.unlink()
    save_checkpoint(
        dest,
        cfg,
        sd,
        dtype=None if args.export_dtype == "float32" else args.export_dtype,
        layout="torch",  # the layout paddleformers' from_pretrained loads (fd_mtp loads both)
    )
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(state_dir / "tokenizer" / name, dest / name)
    rows = meta["log"]
    write_log(dest / "train_log.csv", rows)
    plot(dest / "loss_curve.png", rows)
    last_val = next((r for r in reversed(rows) if "val_main" in r), {})
    last_train = next((r for r in reversed(rows) if "main" in r), {})
    n_main = count_params(model.state_dict())
    n_mtp = count_params(mtp.state_dict())
    size = sum(f.stat().st_size for f in dest.glob("model*.safetensors"))
    info = {
        "step": meta["step"],
        "steps_planned": meta["args"]["steps"],
        "seed": meta["args"]["seed"],
        "wall_time_s": round(meta["elapsed_s"], 1),
        "threads": meta["args"]["threads"],
        "command": meta["command"],
        "python_version_of_corpus": meta["python_version"],
        "corpus": meta["corpus"],
        "tokenizer": meta["tokenizer"],
        "batch_size": meta["args"]["batch_size"],
        "seq_len": meta["args"]["seq_len"],
        "tokens_seen": meta["step"] * meta["args"]["batch_size"] * meta["args"]["seq_len"],
        "init_from": meta.get("init_from"),
        "lr": meta["args"]["lr"],
        "warmup": meta["args"]["warmup"],
        "mtp_weight": meta["args"]["mtp_weight"],
        "mtp2_weight": meta["args"]["mtp2_weight"],
        "unlikelihood": meta["args"].get("unlikelihood", 0.0),
        "params_main": n_main,
        "params_mtp": n_mtp,
        "weights_dtype": args.export_dtype,
        "weights_bytes": size,
        "final_train": {k: last_train.get(k) for k in ("main", "mtp1", "mtp2")},
        "final_val": {k: v for k, v in last_val.items() if k.startswith("val_")},
        "stopped_early": meta.get("stopped_early", False),
        "finished": meta.get("finished", False),
        "paddle_version": meta.get("paddle_version"),
        "platform": meta.get("platform"),
    }
    prior = info["init_from"] or {}
    info["tokens_seen_total"] = info["tokens_seen"] + (
        prior.get("tokens_seen_total") or prior.get("tokens_seen") or 0
    )
    info["wall_time_s_total"] = round(
        info["wall_time_s"] + (prior.get("wall_time_s_total") or prior.get("wall_time_s") or 0), 1
    )
    (dest / "train_info.json").write_text(json.dumps(info, indent=2) + "\n")
    (dest / "README.md").write_text(readme(cfg, info))
    return info


def _fmt(v, pct=False):
    if v is None:
        return "n/a"
    return f"{100 * v:.1f} %" if pct else f"{v:.3f}"


def _warm_start_chain(info: dict) -> list[dict]:
    """The runs this export was warm-started from, oldest first (each ``init_from`` record nests
    the one before it)."""
    chain, rec = [], info.get("init_from")
    while rec:
        chain.append(rec)
        rec = rec.get("init_from")
    return chain[::-1]


def _steps_option(command: str | None) -> int | None:
    """The ``--steps`` value of a recorded command line (None when absent or unparsable)."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word.startswith("--steps="):
            value = word.split("=", 1)[1]
        elif word == "--steps" and i + 1 < len(words):
            value = words[i + 1]
        else:
            continue
        return int(value) if value.isdigit() else None
    return None


def _warm_start_note(info: dict) -> str:
    """README paragraph: every run of the warm-start chain with its command, so the export can be
    reproduced from scratch."""
    chain = _warm_start_chain(info)
    prior = chain[-1]
    pv = prior.get("final_val") or {}
    lines = []
    for i, rec in enumerate(chain, 1):
        wall = rec.get("wall_time_s")
        minutes = f"{wall / 60:.1f} minutes" if wall is not None else "minutes not recorded"
        tokens = rec.get("tokens_seen")
        tokens = f"{tokens:,} tokens" if tokens is not None else "tokens not recorded"
        ce = _fmt((rec.get("final_val") or {}).get("val_main"))
        planned = rec.get("steps_planned") or _steps_option(rec.get("command"))
        stopped = (
            f" (stopped at its time budget: add `--stop-after {rec.get('step')}` without "
            "`--max-minutes` to stop at the same step)"
            if rec.get("stopped_early")
            or (
                planned is not None
                and planned != rec.get("step")
                and "--stop-after" not in (rec.get("command") or "")
            )
            else ""
        )
        lines.append(
            f"{i}. {rec.get('step')} steps{stopped}, {tokens}, {minutes}, held-out main CE {ce}:\n\n"
            f"   ```\n   {rec.get('command')}\n   ```\n"
        )
    return (
        "\nWarm start: this run began from the weights of an earlier export of this model "
        f"(`--init-from`; held-out main CE {_fmt(pv.get('val_main'))}"
        + (
            f"; {_fmt(prior['val_this_run']['val_main'])} on this run's validation windows"
            if prior.get("val_this_run")
            else ""
        )
        + "). The runs before this one, oldest first, each started from the export of the one "
        "before it:\n\n" + "\n".join(lines) + "\n"
        f"In all ({len(chain) + 1} runs): {info['tokens_seen_total']:,} training tokens, "
        f"{info['wall_time_s_total'] / 60:.1f} minutes. The steps, tokens and minutes at the top are "
        "this run's own. To reproduce from scratch, run the commands in order with `--export DIR` "
        "added to each and `--init-from` pointing at the previous run's `DIR`, then this run's "
        "command (above) the same way.\n"
    )


def readme(cfg, info: dict) -> str:
    v, t = info["final_val"], info["final_train"]
    c = info["corpus"]
    tests = c.get("test_files")
    ul_note = (
        f" + {info['unlikelihood']:g} x the main head's token-level unlikelihood of the window's "
        "earlier tokens (Welleck et al. 2020; ul in the log)"
        if info.get("unlikelihood")
        else ""
    )
    tests_note = (
        f" Of the training files, {tests['train_files']} are the standard library's own tests "
        f"({tests['rule']})."
        if tests
        else ""
    )
    lib = c.get("library_files")
    if lib:
        pk = ", ".join(lib["packages"].values()) or "none found"
        tests_note += (
            f" Of the training files, {lib['train_files']} are library code of the project's "
            f"installed dependencies ({pk}; each under its own licence): {lib['rule']}."
        )
    if c.get("strip_comments"):
        tests_note += f" Every text, training and validation, has its comments removed ({c['strip_comments']})."
    stop_note = (
        "\nThe run stopped at its time budget (`--max-minutes`) after step "
        f"{info['step']} of the {info['steps_planned']} planned; on another machine it stops at another "
        f"step: add `--steps {info['steps_planned']} --stop-after {info['step']}` without `--max-minutes` "
        "to stop at the same one.\n"
        if info.get("stopped_early")
        else ""
    )
    prior = info.get("init_from")
    if prior:
        stop_note += _warm_start_note(info)
    stop_note += (
        "\nThe same weights need the same corpus (this Python version's standard library"
        + (", and the library packages at the versions above" if c.get("library_files") else "")
        + "), seed and Paddle build; the loss curve should match closely elsewhere.\n"
    )
    return f"""# ernie45_tiny_mtp: a tiny ERNIE-4.5 with an MTP block, trained on Python code

A dense ERNIE-4.5 ({cfg.num_hidden_layers} decoder layers, hidden {cfg.hidden_size}, intermediate
{cfg.intermediate_size}, {cfg.num_attention_heads} query / {cfg.num_key_value_heads} key-value heads,
head_dim {cfg.head_dim}, interleaved RoPE theta {cfg.rope_theta:g}, tied embeddings, vocabulary
{cfg.vocab_size}) plus one ERNIE MTP block (`num_nextn_predict_layers = 1`), saved as paddleformers
saves ERNIE-4.5 (`config.json`, `model.safetensors` with `model.*` names and `[out, in]` linear
weights, `tokenizer.model`): paddleformers' `from_pretrained` loads it, and so does `fd_mtp`. It exists to
demonstrate MTP speculative decoding on a CPU with `fd_mtp`: the MTP block was trained jointly with
the main model so that its drafts are accepted. It is a toy: it writes plausible-looking Python,
not correct programs.

* Parameters: {info["params_main"]:,} main model + {info["params_mtp"]:,} MTP block; weights stored as
  {info["weights_dtype"]} ({info["weights_bytes"] / 1e6:.1f} MB; `fd_mtp.model.load_checkpoint` loads them as
  float32 on CPU).
* Corpus: the `.py` sources of the Python {info["python_version_of_corpus"]} standard library
  ({c["train_files"]} training files, {c["train_tokens"]:,} tokens; {c["val_files"]} validation files,
  {c["val_tokens"]:,} tokens), licensed under the Python Software Foundation License (PSF-2.0).
  Left out: {c["excluded"]}. Validation split: `{c["split_rule"]}`.{tests_note}
* Tokenizer: SentencePiece BPE, {cfg.vocab_size} pieces, byte fallback, identity normalisation (whitespace
  and newlines round-trip exactly); ids 0 `<unk>`, 1 `<s>`, 2 `</s>` (eos, also between files), 3 `<pad>`.
* Training: {info["step"]} steps of {info["batch_size"]} x {info["seq_len"]} tokens ({info["tokens_seen"]:,} tokens),
  AdamW, peak lr {info["lr"]:g}, {info["warmup"]} warmup steps, cosine decay, float32, seed {info["seed"]},
  {info["threads"]} CPU thread(s), {info["wall_time_s"] / 60:.1f} minutes.
  Loss = CE(x[t+1]) + {info["mtp_weight"]:g} CE_MTP(x[t+2]) + {info["mtp2_weight"]:g} CE_MTP-step-2(x[t+3]) (the
  MTP block applied a second time to its own output hidden state, as with `num_model_steps > 1`){ul_note}.
* Final training losses (nats/token): main {_fmt(t.get("main"))}, MTP {_fmt(t.get("mtp1"))},
  MTP step 2 {_fmt(t.get("mtp2"))}.
* Validation (held-out stdlib files): main CE {_fmt(v.get("val_main"))} (top-1 {_fmt(v.get("val_main_acc"), True)}),
  MTP CE {_fmt(v.get("val_mtp1"))} (top-1 of x[t+2] {_fmt(v.get("val_mtp1_acc"), True)}),
  MTP step 2 CE {_fmt(v.get("val_mtp2"))} (top-1 of x[t+3] {_fmt(v.get("val_mtp2_acc"), True)}).

Files: `train_log.csv` (per-step losses, periodic validation), `loss_curve.png`, `train_info.json`.

Reproduce (from the repository root; `--help` lists the options):

```
{info["command"]}
```
{stop_note}"""


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    t_start = time.time()
    args = build_parser().parse_args(argv)
    set_threads(args.threads)
    import numpy as np
    import paddle

    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(args.threads)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    if args.export_only:
        state_dir = args.from_state or out
        if not (state_dir / "state.json").is_file():
            raise SystemExit(f"{state_dir}: no state.json snapshot to export")
        meta = json.loads((state_dir / "state.json").read_text())
        info = export(args, state_dir, args.export, meta)
        print(json.dumps(info, indent=2))
        return 0

    root = args.corpus_dir or stdlib_root()
    train_files, val_files = split_corpus(root, with_tests=args.with_tests)
    n_std_train = len(train_files)
    if args.library_code:
        lib = library_files(library_root(), stdlib=root)
        print(f"library code: {len(lib)} files from {library_root()}", flush=True)
        train_files = train_files + lib  # after the standard library's (the tokenizer sample)
    strip = args.strip_comments
    tok = build_tokenizer(
        out,
        train_files,
        args.vocab_size,
        args.tokenizer_chars,
        init_from=args.init_from,
        strip=strip,
    )
    train_tokens = tokenize(out, tok, train_files, "train", check_roundtrip=False, strip=strip)
    val_tokens = tokenize(out, tok, val_files, "val", check_roundtrip=True, strip=strip)
    cfg = make_config(args, tok)
    steps_ahead = 2 if args.mtp2_weight > 0 else 1
    win = args.seq_len + 1 + steps_ahead
    if len(train_tokens) <= win:
        raise SystemExit(
            f"training stream has {len(train_tokens)} tokens, fewer than one window ({win})"
        )
    val_windows = validation_windows(val_tokens, args.eval_windows, win)

    paddle.seed(args.seed)
    np.random.seed(args.seed)
    model, mtp = build_models(cfg, args.seed)
    init_record = None
    if args.init_from is not None and not (args.resume and (out / "state.json").is_file()):
        init_record = init_from_checkpoint(args.init_from, cfg, model, mtp)
        # the warm-start weights on this run's validation windows (its corpus options may differ)
        init_record["val_this_run"] = evaluate(
            model, mtp, val_windows, steps_ahead, args.batch_size
        )
        print(
            f"warm start from {args.init_from} (its step {init_record.get('step')}); "
            f"on this run's validation: {init_record['val_this_run']}",
            flush=True,
        )
    opt = make_optimizer(args, model, mtp)
    sampler = np.random.default_rng(args.seed)
    rows: list[dict] = []
    step, elapsed0 = 0, 0.0
    command = " ".join(
        [
            f"OMP_NUM_THREADS={args.threads} MKL_NUM_THREADS={args.threads}",
            "python",
            "tools/train_demo_model.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )
    if args.resume and (out / "state.json").is_file():
        meta = json.loads((out / "state.json").read_text())
        load_params(out, model, mtp)
        load_optimizer_state(opt, model, mtp, paddle.load(str(out / "state.pdopt")))
        sampler.bit_generator.state = meta["sampler_state"]
        step, elapsed0, rows = meta["step"], meta["elapsed_s"], meta["log"]
        command = meta["command"]
        init_record = meta.get("init_from")
        print(f"resumed from {out} at step {step}", flush=True)
    elif args.resume:
        print(f"--resume: no snapshot in {out}, starting from step 0", flush=True)

    corpus = {
        "train_files": len(train_files),
        "val_files": len(val_files),
        "train_tokens": int(len(train_tokens)),
        "val_tokens": int(len(val_tokens)),
        "split_rule": SPLIT_RULE,
        "root": str(root),
        "excluded": "site-packages, "
        + ("" if args.with_tests else "test/tests directories (test/, lib2to3/tests, ...), ")
        + f"idlelib/, pydoc_data/, encodings/, files over {MAX_FILE_BYTES // 1000} kB",
    }
    if args.with_tests:
        n_test = sum(1 for r, _ in train_files if TEST_DIRS.intersection(r.split("/")[:-1]))
        corpus["test_files"] = {"train_files": n_test, "rule": TEST_FILES_RULE}
    if args.library_code:
        corpus["library_files"] = {
            "train_files": len(train_files) - n_std_train,
            "root": str(library_root()),
            "packages": library_versions(),
            "rule": LIBRARY_FILES_RULE,
        }
    if strip:
        corpus["strip_comments"] = (
            "comments removed from every training and validation text "
            "(fd_mtp.assets.corpus.strip_comments; docstrings kept)"
        )
    tokenizer = {
        "type": "SentencePiece BPE",
        "vocab_size": tok.vocab_size,
        "options": TOKENIZER_OPTIONS,
        "trained_on_chars": args.tokenizer_chars,
        "chars_per_token_val": round(
            sum(len(load_text(p, strip)) for _, p in val_files) / len(val_tokens), 3
        ),
    }

    def snapshot(finished=False, stopped_early=False):
        meta = {
            "step": step,
            "elapsed_s": elapsed0 + time.time() - t0,
            "sampler_state": sampler.bit_generator.state,
            "log": rows,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "config": cfg.to_dict(),
            "command": command,
            "python_version": platform.python_version(),
            "corpus": corpus,
            "tokenizer": tokenizer,
            "finished": finished,
            "stopped_early": stopped_early,
            "paddle_version": paddle.__version__,
            "platform": platform.platform(),
            "init_from": init_record,
        }
        save_state(out, model, mtp, opt, meta)
        return meta

    n_params = count_params(checkpoint_tensors(model, mtp))
    print(
        f"corpus: {len(train_files)} train files ({len(train_tokens):,} tokens), {len(val_files)} val files "
        f"({len(val_tokens):,} tokens); vocab {tok.vocab_size}; params {n_params:,}; threads {args.threads}",
        flush=True,
    )
    t0 = time.time()
    deadline = (
        None if args.max_minutes is None else t_start + 60 * args.max_minutes - FINAL_RESERVE_S
    )
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(
            total=args.steps,
            initial=step,
            desc="train",
            dynamic_ncols=True,
            file=sys.stdout,
            mininterval=5,
        )
    stopped_early = False
    model.train()
    mtp.train()
    while step < args.steps:
        if (deadline is not None and time.time() >= deadline) or (
            args.stop_after is not None and step >= args.stop_after
        ):
            stopped_early = True
            break
        starts = sampler.integers(0, len(train_tokens) - win, size=args.batch_size)
        batch = np.stack([train_tokens[s : s + win] for s in starts]).astype(np.int64)
        lr = lr_at(step, args)
        opt.set_lr(lr)
        r = losses(model, mtp, paddle.to_tensor(batch), steps_ahead, ul=args.unlikelihood > 0)
        loss = r["main"] + args.mtp_weight * r["mtp1"]
        if steps_ahead == 2:
            loss = loss + args.mtp2_weight * r["mtp2"]
        if args.unlikelihood > 0:
            loss = loss + args.unlikelihood * r["ul"]
        loss.backward()
        opt.step()
        opt.clear_grad()
        step += 1
        row = {
            "step": step,
            "elapsed_s": round(elapsed0 + time.time() - t0, 2),
            "lr": lr,
            "loss": float(loss),
            "main": float(r["main"]),
            "mtp1": float(r["mtp1"]),
        }
        if steps_ahead == 2:
            row["mtp2"] = float(r["mtp2"])
        if args.unlikelihood > 0:
            row["ul"] = float(r["ul"])
        if not math.isfinite(row["loss"]):
            raise SystemExit(f"step {step}: loss is {row['loss']}")
        if step % args.eval_every == 0 or step == args.steps:
            row.update(evaluate(model, mtp, val_windows, steps_ahead, args.batch_size))
        rows.append(row)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(
                loss=f"{row['loss']:.3f}", main=f"{row['main']:.3f}", mtp=f"{row['mtp1']:.3f}"
            )
        if "val_main" in row or bar is None and step % 10 == 0:
            msg = " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
            (bar.write if bar is not None else print)(msg)
        if step % args.save_every == 0:
            snapshot()
    if bar is not None:
        bar.close()
    if rows and "val_main" not in rows[-1]:
        rows[-1].update(evaluate(model, mtp, val_windows, steps_ahead, args.batch_size))
    meta = snapshot(finished=step >= args.steps, stopped_early=stopped_early)
    write_log(out / "train_log.csv", rows)
    plot(out / "loss_curve.png", rows)
    info = export(args, out, args.export, meta)
    summary = (
        f"done: step {step}/{args.steps}{' (stopped early)' if stopped_early else ''}, "
        f"{info['wall_time_s'] / 60:.1f} min, {info['tokens_seen']:,} tokens; final train "
        f"{info['final_train']}; validation {info['final_val']}; exported to {args.export}"
    )
    print(summary, flush=True)
    (out / "summary.txt").write_text(summary + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
