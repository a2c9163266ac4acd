"""Incremental detokenization: the text after every token equals the full decode of the output,
and the decode work per token is bounded (it does not grow with the output's length)."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from fd_mtp.engine import detokenizer as detok_module
from fd_mtp.engine.detokenizer import MAX_UNSETTLED, IncrementalDetokenizer


@pytest.fixture(scope="module")
def demo_tokenizer():
    pytest.importorskip("sentencepiece")
    from fd_mtp.assets import default_model_path
    from fd_mtp.model.tokenizer import SentencePieceTokenizer

    return SentencePieceTokenizer(default_model_path())


class Counting:
    """A tokenizer wrapper counting the tokens passed to ``decode``."""

    def __init__(self, tok):
        self.tok, self.tokens, self.calls = tok, 0, 0

    def encode(self, text):
        return self.tok.encode(text)

    def decode(self, ids, skip_special_tokens=True):
        self.tokens += len(ids)
        self.calls += 1
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


def random_ids(rng, tok, n):
    """Random ids, some runs rich in byte-fallback pieces (multi-byte characters split over tokens,
    invalid UTF-8) and special tokens."""
    sp = tok._sp
    byte_ids = [i for i in range(tok.vocab_size) if sp.is_byte(i)]
    mix = rng.random()
    return [
        int(rng.choice(byte_ids))
        if rng.random() < mix
        else int(rng.integers(0, tok.vocab_size + 8))
        for _ in range(n)
    ]


def test_docstring_example():
    result = doctest.testmod(detok_module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_incremental_text_equals_the_full_decode_after_every_token(
    demo_tokenizer, skip_special_tokens
):
    tok = demo_tokenizer
    rng = np.random.default_rng(7 + skip_special_tokens)
    for _ in range(80):
        ids = random_ids(rng, tok, int(rng.integers(1, 90)))
        d = IncrementalDetokenizer(tok, skip_special_tokens)
        out = []
        for t in ids:
            out.append(t)  # the engine's list grows in place
            assert d.update(out) == tok.decode(out, skip_special_tokens=skip_special_tokens), out
    # the whole text of real text, token by token
    text = "def f(x):\n    return x * 2  # ünïcödé → ✓ 😀\n"
    ids = tok.encode(text)
    d = IncrementalDetokenizer(tok)
    for k in range(1, len(ids) + 1):
        assert d.update(ids, k) == tok.decode(ids[:k])
    assert d.text == tok.decode(ids)


def test_work_per_token_is_bounded(demo_tokenizer):
    rng = np.random.default_rng(3)
    n = 1500
    ids = random_ids(rng, demo_tokenizer, n)
    tok = Counting(demo_tokenizer)
    d = IncrementalDetokenizer(tok)
    worst = 0
    for k in range(1, n + 1):
        before = tok.tokens
        d.update(ids, k)
        worst = max(worst, tok.tokens - before)
    # a window is the last settled chunk plus the unsettled tokens: a constant, whatever n is
    assert worst <= 12 * (MAX_UNSETTLED + 1), worst
    assert tok.tokens <= 8 * n, (
        tok.tokens
    )  # re-decoding the whole output every token: n * (n + 1) / 2
    assert d.text == demo_tokenizer.decode(ids)


def test_the_engine_decodes_a_window_per_token_and_stop_strings_still_cut(demo_tokenizer):
    """A generation of 120 tokens with the demo model: the text is the full decode, the decode work
    is O(tokens), and a stop string taken from that text ends a second run exactly where the
    full-decode rule (the first token whose decoded output contains it) ends it."""
    pytest.importorskip("paddle")
    import fd_mtp
    from fd_mtp import SamplingParams

    tok = Counting(demo_tokenizer)
    llm = fd_mtp.LLM(None, tokenizer=tok, max_num_seqs=2, max_model_len=256)
    prompt = "def fibonacci(n):\n"
    params = SamplingParams(max_tokens=120, temperature=0.0, ignore_eos=True)
    tok.tokens = 0
    o = llm.generate([prompt], params, use_tqdm=False)[0]
    ids = o.token_ids
    assert o.text == demo_tokenizer.decode(ids) and len(ids) == 120
    assert tok.tokens <= 8 * len(ids) + 4 * len(tok.encode(prompt)), tok.tokens
    full = o.text
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    # the full-decode rule: the first prefix of the output whose text contains the stop string
    n = next(k for k in range(1, len(ids) + 1) if stop in demo_tokenizer.decode(ids[:k]))
    want = demo_tokenizer.decode(ids[:n])
    for include in (False, True):
        o2 = llm.generate(
            [prompt],
            SamplingParams(
                max_tokens=120,
                temperature=0.0,
                ignore_eos=True,
                stop=[stop],
                include_stop_str_in_output=include,
            ),
            use_tqdm=False,
        )[0]
        cut = want.find(stop) + (len(stop) if include else 0)
        assert o2.finish_reason == "stop" and o2.token_ids == ids[:n] and o2.text == want[:cut]
