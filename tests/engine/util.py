"""Shared helpers of the engine tests: a tiny random ERNIE model and the naive greedy oracle."""

from __future__ import annotations

import functools

import numpy as np
import paddle

import fd_mtp
from fd_mtp.model import Ernie4_5ForCausalLM
from fd_mtp.testing import (
    TINY_CONFIG,
    naive_greedy,  # noqa: F401  (the tests import it from here)
    tiny_config,
)

VOCAB = TINY_CONFIG["vocab_size"]  # 300
#: greedy decoding to max_tokens (SamplingParams keywords)
GREEDY = dict(temperature=0.0, ignore_eos=True)


@functools.cache
def tiny_model(eos: int = 2, seed: int = 0) -> Ernie4_5ForCausalLM:
    paddle.seed(seed)
    # TINY_CONFIG's sizes (vocab VOCAB, hidden 64, 2 layers, 4 / 2 heads), no MTP block
    cfg = tiny_config(
        max_position_embeddings=512,
        eos_token_id=eos,
        rope_theta=500000.0,
        num_nextn_predict_layers=0,
    )
    model = Ernie4_5ForCausalLM(cfg)
    model.eval()
    return model


def make_llm(**kw):
    """`fd_mtp.LLM` on `tiny_model` (4 slots, max_model_len 64, block size 8 unless ``kw`` says)."""
    kw.setdefault("max_num_seqs", 4)
    kw.setdefault("max_model_len", 64)
    kw.setdefault("block_size", 8)
    return fd_mtp.LLM(tiny_model(), **kw)


def prompts(lengths, seed=0, low=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(low, VOCAB, size=n).tolist() for n in lengths]


class CharTokenizer:
    """Token id t <-> one character chr(0x61 + t % 26) ('a'..'z'); encode maps a..z to ids 3..28."""

    def encode(self, text):
        return [3 + (ord(c) - 0x61) % 26 for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(0x61 + t % 26) for t in ids)
