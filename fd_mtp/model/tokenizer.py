"""A SentencePiece tokenizer for ERNIE-4.5 checkpoints, usable without paddleformers.

ERNIE-4.5 checkpoints ship their tokenizer as a SentencePiece model (``tokenizer.model``) plus
``tokenizer_config.json`` / ``special_tokens_map.json``. paddleformers' ``AutoTokenizer`` reads them
(`fd_mtp.model.loader.load_tokenizer` prefers it when installed), but paddleformers 1.2 pulls in
about 70 packages and pins numpy <= 1.26.4, so fd_mtp does not require it: this class reads the same
``tokenizer.model`` with the ``sentencepiece`` package alone and offers what the engine uses
(``encode``, ``decode``, special token ids).

Special tokens in the text (``<s>``, ``</s>``, ``<pad>``, ``<unk>``, any SentencePiece control piece,
and ``tokenizer_config.json``'s ``added_tokens_decoder``) encode as their ids, the text between them
with SentencePiece, as paddleformers' tokenizer does (issue 17: SentencePiece alone spells ``</s>``
as the pieces ``</``, ``s``, ``>``); ``decode(..., skip_special_tokens=False)`` writes them back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

SPECIAL_FILES = ("tokenizer_config.json", "special_tokens_map.json")


class SentencePieceTokenizer:
    """``tokenizer.model`` of a checkpoint directory.

    Args:
        path: the checkpoint directory (or the ``.model`` file itself).
        add_bos_token: prepend the BOS id in `encode` (default: ``add_bos_token`` of
            tokenizer_config.json, else False, as ERNIE-4.5's tokenizer config sets it).

    >>> tok = SentencePieceTokenizer(path)          # doctest: +SKIP
    >>> tok.decode(tok.encode("hello world"))       # doctest: +SKIP
    'hello world'
    """

    def __init__(self, path, *, add_bos_token: bool | None = None):
        try:
            import sentencepiece
        except ImportError as exc:
            raise ImportError(
                "SentencePieceTokenizer needs the sentencepiece package (pip install sentencepiece)"
            ) from exc
        p = Path(path)
        model = p / "tokenizer.model" if p.is_dir() else p
        if not model.is_file():
            raise FileNotFoundError(f"{model}: no SentencePiece model")
        self.path = model
        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(model))
        settings = {}
        for name in SPECIAL_FILES:
            f = model.parent / name
            if f.is_file():
                try:
                    settings.update(json.loads(f.read_text()))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{f}: not valid JSON ({exc})") from None
        if add_bos_token is None:
            add_bos_token = bool(settings.get("add_bos_token", False))
        self.add_bos_token = add_bos_token
        self.bos_token_id = self._special(settings.get("bos_token"), self._sp.bos_id())
        self.eos_token_id = self._special(settings.get("eos_token"), self._sp.eos_id())
        self.pad_token_id = self._special(settings.get("pad_token"), self._sp.pad_id())
        self.unk_token_id = self._sp.unk_id()
        # Special tokens written in the text are the tokens, as paddleformers' (Hugging Face's)
        # tokenizer reads them: its added tokens are the SentencePiece control and unknown pieces
        # (<unk>, <s>, </s>, <pad>) plus tokenizer_config.json's added_tokens_decoder.
        special: dict[str, int] = {}
        for i in range(self._sp.get_piece_size()):
            if self._sp.is_control(i) or self._sp.is_unknown(i):
                special[self._sp.id_to_piece(i)] = i
        for key, tok in (settings.get("added_tokens_decoder") or {}).items():
            content = tok.get("content") if isinstance(tok, dict) else tok
            if isinstance(content, str) and content and str(key).isdigit():
                special[content] = int(key)
        self.special_tokens: dict[str, int] = special
        self._special_re = (
            re.compile("|".join(re.escape(t) for t in sorted(special, key=len, reverse=True)))
            if special
            else None
        )
        self._special_text = {i: t for t, i in special.items()}

    def _special(self, token, default: int) -> int:
        if isinstance(token, dict):  # {"content": "</s>", ...}
            token = token.get("content")
        if isinstance(token, str):
            i = self._sp.piece_to_id(token)
            if i != self._sp.unk_id() or token == self._sp.id_to_piece(self._sp.unk_id()):
                return int(i)
        return int(default)

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str, split_special_tokens: bool = False) -> list[int]:
        """Ids of ``text``. Special tokens written in the text (``</s>``, ...) encode as their
        ids, as paddleformers does; with ``split_special_tokens`` (Hugging Face's name) they are
        ordinary text, e.g. for training data that contains them."""
        if not isinstance(text, str):
            raise ValueError(f"encode: text must be a str, got {type(text).__name__}")
        ids: list[int] = []
        start = 0
        special_re = None if split_special_tokens else self._special_re
        for m in special_re.finditer(text) if special_re is not None else ():
            if m.start() > start:
                ids += [int(i) for i in self._sp.encode(text[start : m.start()])]
            ids.append(self.special_tokens[m.group()])
            start = m.end()
        if start < len(text):
            ids += [int(i) for i in self._sp.encode(text[start:])]
        return [self.bos_token_id, *ids] if self.add_bos_token and self.bos_token_id >= 0 else ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``. ``skip_special_tokens`` leaves out every special token (``<unk>``
        included, as paddleformers); otherwise they are written as their text. Ids at or above
        `vocab_size` (a model vocabulary padded past the tokenizer's) count as ``<unk>``; negative
        ids raise ValueError."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if i < 0]
        if bad:
            raise ValueError(f"decode: ids {bad[:5]} are negative")
        ids = [i if i < self.vocab_size else self.unk_token_id for i in ids]
        if skip_special_tokens:
            # every special token, <unk> included, as paddleformers' skip_special_tokens
            special = {self.bos_token_id, self.eos_token_id, self.pad_token_id, *self._special_text}
            ids = [i for i in ids if i not in special and not self._sp.is_control(i)]
            return self._sp.decode(ids)
        # special tokens kept: written as their text (SentencePiece alone decodes a control piece
        # as nothing), the runs between them decoded by SentencePiece
        parts, run = [], []
        for i in ids:
            if i in self._special_text:
                parts.append(self._sp.decode(run))
                parts.append(self._special_text[i])
                run = []
            else:
                run.append(i)
        parts.append(self._sp.decode(run))
        return "".join(parts)


def train_sentencepiece(
    text: str,
    directory,
    *,
    vocab_size: int,
    model_type: str = "bpe",
    byte_fallback: bool | None = None,
    **trainer_options,
) -> Path:
    """Train a SentencePiece model on ``text`` (offline, a second or so for small texts) and write
    ``tokenizer.model`` + ``tokenizer_config.json`` into ``directory``. ids: 0 unk, 1 bos, 2 eos, 3 pad
    (ERNIE-4.5's special-token order). ``byte_fallback`` (default: when ``vocab_size >= 1024``)
    spells unseen characters as bytes instead of unk; it needs 256 ids. ``trainer_options`` are
    passed to ``SentencePieceTrainer.train`` over the defaults (e.g. ``normalization_rule_name=
    "identity"``, ``remove_extra_whitespaces=False``, ``add_dummy_prefix=False``,
    ``user_defined_symbols=["\\n"]`` for a tokenizer whose ``decode(encode(text)) == text``,
    whitespace included). Returns the directory."""
    if byte_fallback is None:
        byte_fallback = vocab_size >= 1024
    import io

    import sentencepiece

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("train_sentencepiece: text has no non-empty line")
    buf = io.BytesIO()
    options = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        byte_fallback=byte_fallback,
    )
    options.update(trainer_options)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buf, **options
    )
    (d / "tokenizer.model").write_bytes(buf.getvalue())
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "Ernie4_5_Tokenizer",
                "add_bos_token": False,
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
            },
            indent=2,
        )
        + "\n"
    )
    return d


def encode_prompt(tokenizer, text: str, add_special_tokens: bool | None = None) -> list[int]:
    """The token ids of a text prompt, as `LLMEngine.encode` computes them (same calls, same
    errors), with ``tokenizer``. ``add_special_tokens``: None (the tokenizer's default, what the
    engine uses), True or False: passed to a tokenizer whose ``encode`` takes it (Hugging Face's);
    for one that does not (`fd_mtp.model.tokenizer.SentencePieceTokenizer`), False drops the BOS
    id that its ``add_bos_token`` setting put in front. ValueError for text the tokenizer cannot
    encode, or no tokenizer."""
    if tokenizer is None:
        raise ValueError(
            "a text prompt needs a tokenizer; pass token ids or give the LLM a tokenizer"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"the prompt is not valid Unicode text: {exc.reason} {text[exc.start : exc.end]!r} "
            f"at character {exc.start}"
        ) from None
    try:
        if hasattr(tokenizer, "encode"):
            kw = {}
            if add_special_tokens is not None and not hasattr(tokenizer, "add_bos_token"):
                kw["add_special_tokens"] = add_special_tokens
            ids = tokenizer.encode(text, **kw)
            if isinstance(ids, dict):
                ids = ids["input_ids"]
        else:
            ids = tokenizer(text)["input_ids"]
        ids = [int(i) for i in ids]
    except Exception as exc:  # a tokenizer failing on this text fails this request only
        raise ValueError(
            f"the tokenizer could not encode the prompt: {type(exc).__name__}: {exc}"
        ) from exc
    if (
        add_special_tokens is False
        and getattr(tokenizer, "add_bos_token", False)
        and ids
        and ids[0] == getattr(tokenizer, "bos_token_id", None)
    ):
        ids = ids[1:]
    return ids
