"""The SentencePiece tokenizer path (no paddleformers needed) and text generation through it."""

import json
import sys

import pytest

from fd_mtp.model.loader import load_tokenizer
from fd_mtp.model.tokenizer import SentencePieceTokenizer, train_sentencepiece
from fd_mtp.testing import tokenizer_corpus, write_random_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt"), seed=3, with_tokenizer=True)


@pytest.fixture
def no_paddleformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "paddleformers", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "paddleformers.transformers", None)


def test_round_trip_and_special_ids(tmp_path):
    d = train_sentencepiece(tokenizer_corpus(), tmp_path, vocab_size=300)
    tok = SentencePieceTokenizer(d)
    assert tok.vocab_size <= 300
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2, 3)
    text = "JSON encoder and decoder."
    ids = tok.encode(text)
    assert ids and all(4 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode([tok.bos_token_id, *ids, tok.eos_token_id]) == text  # specials skipped
    assert SentencePieceTokenizer(d, add_bos_token=True).encode(text) == [1, *ids]


def test_decode_of_ids_past_the_vocabulary_and_negative_ids(tmp_path):
    tok = SentencePieceTokenizer(train_sentencepiece(tokenizer_corpus(), tmp_path, vocab_size=300))
    ids = tok.encode("encoder")
    assert tok.decode([*ids, 10_000]) == tok.decode(
        [*ids, tok.unk_token_id]
    )  # a padded model vocab
    with pytest.raises(ValueError, match="negative"):
        tok.decode([5, -1])


def test_load_tokenizer_without_paddleformers_reads_tokenizer_model(checkpoint, no_paddleformers):
    tok = load_tokenizer(checkpoint)
    assert isinstance(tok, SentencePieceTokenizer)
    assert tok.decode(tok.encode("partial function")) == "partial function"


def check_load_tokenizer_errors(directory, marker):
    """load_tokenizer (paddleformers not importable) names the problem of a missing directory, of
    one without tokenizer files, and of one whose only tokenizer file is ``marker`` (a file only
    paddleformers reads)."""
    with pytest.raises(FileNotFoundError, match="tokenizer directory not found"):
        load_tokenizer(directory / "missing")
    with pytest.raises(FileNotFoundError, match="no tokenizer files"):
        load_tokenizer(directory)
    (directory / marker).write_text("{}")
    with pytest.raises(
        ImportError, match="need paddleformers, which is not installed.*token-id lists"
    ):
        load_tokenizer(directory)


def test_load_tokenizer_errors(tmp_path, no_paddleformers):
    check_load_tokenizer_errors(tmp_path, "tokenizer.json")


def test_llm_generates_text_from_a_text_prompt(checkpoint, no_paddleformers):
    import fd_mtp

    llm = fd_mtp.LLM(str(checkpoint), max_num_seqs=2, max_model_len=64)
    params = fd_mtp.SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    (out,) = llm.generate(["The textwrap module"], params, use_tqdm=False)
    tok = SentencePieceTokenizer(checkpoint)
    assert len(out.token_ids) == 6
    assert out.text == tok.decode(out.token_ids)
    # The same prompt as ids gives the same tokens.
    (again,) = llm.generate([tok.encode("The textwrap module")], params, use_tqdm=False)
    assert again.token_ids == out.token_ids


@pytest.mark.parametrize(
    "text", ["a</s>b", "x <s> y", "<pad><pad>", "foo<unk>bar", "</s>", "<</s>>", "def f():</s>\n"]
)
def test_special_tokens_in_text_encode_as_their_ids(text):
    # As paddleformers' tokenizer (issue 17 item 5): SentencePiece alone spells "</s>" as pieces.
    from fd_mtp.assets import DEMO_MODEL

    tok = SentencePieceTokenizer(DEMO_MODEL)
    assert tok.special_tokens == {"<unk>": 0, "<s>": 1, "</s>": 2, "<pad>": 3}
    want, rest = [], text
    import re

    for part in re.split(r"(<unk>|<s>|</s>|<pad>)", rest):
        if part in tok.special_tokens:
            want.append(tok.special_tokens[part])
        elif part:
            want += tok._sp.encode(part)
    ids = tok.encode(text)
    assert ids == want
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert tok.decode(ids) == re.sub(r"<s>|</s>|<pad>|<unk>", "", text)


def test_added_tokens_of_tokenizer_config_are_special(tmp_path):
    d = train_sentencepiece(tokenizer_corpus(), tmp_path, vocab_size=300)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["added_tokens_decoder"] = {"7": {"content": "<|X|>", "special": True}}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = SentencePieceTokenizer(d)
    ids = tok.encode("json<|X|>json")
    half = tok.encode("json")
    assert ids == [*half, 7, *half]


@pytest.mark.parametrize("text", ["a</s>b", "states_<s>[<t>]", "<pad>", "x<unk>"])
def test_split_special_tokens_encodes_them_as_text(text):
    # Training data (tools/train_demo_model.py) holds code such as lib2to3's "states_<s>": its
    # special-looking strings are text there, and decode gives them back exactly.
    from fd_mtp.assets import DEMO_MODEL

    tok = SentencePieceTokenizer(DEMO_MODEL)
    ids = tok.encode(text, split_special_tokens=True)
    assert ids == [int(i) for i in tok._sp.encode(text)]
    assert not set(ids) & set(tok.special_tokens.values())
    assert tok.decode(ids) == text
