"""logprob helpers (speculate_logprob_utils: speculate_get_logits, speculate_insert_first_token,
speculate_get_target_logits; spec §5.18)."""

from __future__ import annotations

import numpy as np

from ._common import SAMPLING_VOCABS, Case, K, _roles, _tokens, positional


def _logprob_layout(batch, seed):
    """(seq_lens_this_time, seq_lens_encoder, accept_num) of a step with logprobs: decodes verified
    K + 1 tokens and accepted 1..K + 1 of them, prefills (~1/4) feed a chunk and get one token,
    stopped slots run nothing."""
    rng = np.random.default_rng(seed)
    roles = _roles(batch, rng)
    prefill = roles == "prefill"
    running = roles != "stopped"
    enc = np.where(prefill, rng.integers(16, 512, batch), 0).astype(np.int32)
    this_time = np.where(prefill, enc, np.where(running, K + 1, 0)).astype(np.int32)
    accept = np.where(prefill, 1, np.where(running, rng.integers(1, K + 2, batch), 0))
    return this_time, enc, accept.astype(np.int32)


def build_get_logits(batch, vocab=SAMPLING_VOCABS[0]):
    """The MTP head's first substep with draft logprobs: a decode's K + 1 rows are copied, a
    prefill's first-token row and its own row (cu offsets start at 0, as FastDeploy passes)."""
    rng = np.random.default_rng(71)
    this_time, enc, _ = _logprob_layout(batch, 71)
    n_next = np.where(enc > 0, 1, this_time)
    n_batch = np.where(enc > 0, 2, this_time)
    return Case(
        [
            np.zeros((int(n_batch.sum()), vocab), np.float32),
            np.zeros(batch, np.int32),
            np.zeros(batch, np.int32),
            np.zeros(batch + 1, np.int32),
            np.zeros(batch + 1, np.int32),
            rng.standard_normal((int(n_next.sum()), vocab)).astype(np.float32),
            rng.standard_normal((batch, vocab)).astype(np.float32),
            this_time,
            enc,
        ],
        positional("speculate_get_logits"),
        [
            "draft_logits",
            "next_token_num",
            "batch_token_num",
            "cu_next_token_offset",
            "cu_batch_token_offset",
        ],
        f"K={K};V={vocab}",
    )


def build_insert_first_token(batch):
    """Token ids matching build_get_logits' rows."""
    rng = np.random.default_rng(72)
    this_time, enc, _ = _logprob_layout(batch, 71)
    n_next = np.where(enc > 0, 1, this_time)
    n_batch = np.where(enc > 0, 2, this_time)
    return Case(
        [
            np.zeros(int(n_batch.sum()), np.int64),
            _tokens(rng, batch, K + 1),
            _tokens(rng, int(n_next.sum())),
            np.concatenate([[0], np.cumsum(n_next)]).astype(np.int32),
            np.concatenate([[0], np.cumsum(n_batch)]).astype(np.int32),
            this_time,
            enc,
        ],
        positional("speculate_insert_first_token"),
        ["token_ids"],
        f"K={K}",
    )


def build_get_target_logits(batch, vocab=SAMPLING_VOCABS[0]):
    """The target's rows of the accepted tokens (FastDeploy's speculative sampler with logprobs):
    verified rows (1 per prefill, K + 1 per decode) -> accepted rows."""
    rng = np.random.default_rng(73)
    this_time, enc, accept = _logprob_layout(batch, 73)
    verified = np.where(enc > 0, 1, this_time)
    return Case(
        [
            np.zeros((int(accept.sum()), vocab), np.float32),
            rng.standard_normal((int(verified.sum()), vocab)).astype(np.float32),
            np.concatenate([[0], np.cumsum(accept)]).astype(np.int32),
            np.concatenate([[0], np.cumsum(verified)]).astype(np.int32),
            this_time,
            enc,
            accept,
        ],
        positional("speculate_get_target_logits"),
        ["target_logits"],
        f"K={K};V={vocab}",
    )
