"""The demo training's corpus side (tools/train_demo_model.py): the text a file gives, the
SentencePiece tokenizer trained on the training files, and the token streams."""

from __future__ import annotations

import json
from pathlib import Path

from fd_mtp.assets.corpus import read_text, strip_comments

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
