"""What every op-family builder shares: the batch constants, the `Case` record, the per-request
roles of a mixed batch, token and hidden-state draws."""

from __future__ import annotations

import numpy as np

from ...schema import get as _schema_op
from ...schema import python_signature as _python_signature


def positional(op: str) -> list[str]:
    """The op's positional argument names, in order, from its schema (fd_mtp/schema)."""
    return _python_signature(_schema_op(op))[0]


K = 3  # draft tokens per step (num_speculative_tokens)
THINK_END_ID = 31_000  # the reasoning models' think_end_id in build_limit_thinking
L = 2048  # max_model_len: width of input_ids / pre_ids, max_seq_len of the output offsets
H = 1024  # hidden size of the eagle ops
NUM_MODEL_STEP = 1
BLOCK_SIZE = 64
EOS_IDS = (2, 3)
VOCAB = (100, 100_000)
PREFILL_TOKEN_BUDGET = 2048  # chunked-prefill tokens per step, shared by the prefill requests

SAMPLING_VOCABS = (32_000, 100_000)  # vocab sizes of the sampling-op entries
CANDIDATES = 5  # top_p_candidates' C (FastDeploy's default max_candidate_len)


class Case:
    """One op call: positional args (numpy arrays and python scalars), kwargs, the names of the
    written array args (by position), and a config string for the CSV."""

    def __init__(self, args, names, written, config, kwargs=None, returns=False):
        self.args = args
        self.names = names
        self.written = [names.index(n) for n in written]
        self.config = config
        self.kwargs = kwargs or {}
        self.returns = returns


def _seed(base, variant):
    """The seed of a builder's generator: ``base`` for variant 0 (the benchmark's batch), else
    another batch of the same shapes per variant (tests/gpu/test_gpu_capture.py's changing
    batches: other requests decoding, prefilling, stopped, block-stepped)."""
    return base if variant == 0 else [base, int(variant)]


def _roles(batch, rng):
    """Per-request role: 'decode', 'prefill', 'stopped' (empty slot / target stopped), or
    'resync' (the draft stopped, e.g. on EOS, while the target went on)."""
    roles = np.array(["decode"] * batch, dtype=object)
    if batch == 1:
        return roles
    idx = rng.permutation(batch)
    n_pf = max(1, batch // 16)
    n_stop = max(1, batch // 10)
    n_resync = batch // 32
    roles[idx[:n_pf]] = "prefill"
    roles[idx[n_pf : n_pf + n_stop]] = "stopped"
    roles[idx[n_pf + n_stop : n_pf + n_stop + n_resync]] = "resync"
    return roles


def _tokens(rng, *shape):
    return rng.integers(*VOCAB, size=shape, dtype=np.int64)


def _bf16_bits(rng, rows, hidden=H):
    """[rows, hidden] random bfloat16 values as their uint16 bit patterns (finite, |x| < 4)."""
    f = rng.standard_normal((rows, hidden), dtype=np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def _hidden_rows(rng, rows, hidden=H, dtype="bfloat16"):
    """[rows, hidden] random hidden states in ``dtype`` ("bfloat16": uint16 bit patterns)."""
    if dtype == "bfloat16":
        return _bf16_bits(rng, rows, hidden)
    return rng.standard_normal((rows, hidden), dtype=np.float32).astype(dtype)


def as_dtype(values, dtype):
    """float32 ``values`` in ``dtype``; "bfloat16": uint16 bit patterns, rounded to nearest even."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "bfloat16":
        u = values.view(np.uint32)
        return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    with np.errstate(over="ignore"):
        return values.astype(dtype)
