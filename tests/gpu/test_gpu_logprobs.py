"""Parity of the CUDA kernels of the logprob helpers (fd_mtp.cuda, on CuPy) with the numpy
references (fd_mtp.reference): speculate_get_logits, speculate_insert_first_token,
speculate_get_target_logits (spec §5.18).

Seeded random valid batches (batch sizes up to 2049: several chunks of speculate_get_logits'
single-block prefix scan and several blocks of the row copies, far above upstream's 512 / 1024
caps; [B] and [B, 1] per-request shapes; per-request buffers longer than the batch) run through
fd_mtp.cuda.<op> on CuPy copies and fd_mtp.reference.<op> on numpy copies; every array must match
exactly (the ops copy float32 values, no arithmetic). Then one bad-input case per data-dependent
check: ValueError naming the argument, nothing written.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (or the simt emulator, FD_MTP_SIMT=1); skipped
otherwise. Needs neither paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import assert_parity, assert_refused, skip_module_without_gpu

skip_module_without_gpu()

from fd_mtp.schema import get as schema_op  # noqa: E402
from fd_mtp.schema import python_signature  # noqa: E402

BATCHES = [1, 7, 33, 257, 600, 2049]
SEEDS = [0, 1]


def order(op):
    return python_signature(schema_op(op))[0]


def layout(rng, bsz, extra):
    n = bsz + extra
    enc = np.where(rng.random(n) < 0.3, rng.integers(1, 60, n), 0).astype(np.int32)
    this_time = np.where(enc > 0, enc, rng.integers(0, 6, n)).astype(np.int32)
    return enc, this_time


def per(values, column):
    return values.reshape(-1, 1) if column else values


def get_logits_args(bsz, seed, vocab):
    """speculate_get_logits' arguments: bsz requests, prefill and decode, vocabulary `vocab`."""
    rng = np.random.default_rng([bsz, seed, 518])
    enc, this_time = layout(rng, bsz, 2)
    n_next = np.where(enc[:bsz] > 0, 1, this_time[:bsz])
    n_batch = np.where(enc[:bsz] > 0, 2, this_time[:bsz])
    return dict(
        draft_logits=np.full((int(n_batch.sum()) + 1, vocab), -3.0, np.float32),
        next_token_num=np.full(bsz + 2, -9, np.int32),
        batch_token_num=np.full(bsz + 2, -9, np.int32),
        cu_next_token_offset=np.full(bsz + 3, -5, np.int32) * (np.arange(bsz + 3) > 0),
        cu_batch_token_offset=np.full(bsz + 3, -5, np.int32) * (np.arange(bsz + 3) > 0),
        logits=rng.standard_normal((int(n_next.sum()), vocab)).astype(np.float32),
        first_token_logits=rng.standard_normal((bsz + 1, vocab)).astype(np.float32),
        seq_lens_this_time=per(this_time[:bsz], seed == 1),
        seq_lens_encoder=enc,
    )


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
def test_insert_first_token_parity(bsz, seed):
    rng = np.random.default_rng([bsz, seed, 519])
    enc, this_time = layout(rng, bsz, 1)
    n_next = np.where(enc[:bsz] > 0, 1, this_time[:bsz])
    n_batch = np.where(enc[:bsz] > 0, 2, this_time[:bsz])
    args = dict(
        token_ids=np.full(int(n_batch.sum()) + 2, -1, np.int64),
        accept_tokens=rng.integers(0, 1000, (bsz + 1, 4)).astype(np.int64),
        next_tokens=rng.integers(1000, 2000, int(n_next.sum())).astype(np.int64),
        cu_next_token_offset=np.concatenate([[0], np.cumsum(n_next)]).astype(np.int32),
        cu_batch_token_offset=np.concatenate([[0], np.cumsum(n_batch)]).astype(np.int32),
        seq_lens_this_time=per(this_time[:bsz], seed == 1),
        seq_lens_encoder=enc,
    )
    assert_parity("speculate_insert_first_token", args, order("speculate_insert_first_token"))


def get_target_logits_args(bsz, seed, vocab):
    """speculate_get_target_logits' arguments: bsz requests, vocabulary `vocab`."""
    rng = np.random.default_rng([bsz, seed, 520])
    enc, this_time = layout(rng, bsz, 1)
    acc = np.where(enc > 0, 1, np.minimum(this_time, rng.integers(-1, 6, enc.size)))
    acc = acc.astype(np.int32)
    verified = np.where(enc[:bsz] > 0, 1, this_time[:bsz])
    accepted = np.maximum(np.where(enc[:bsz] > 0, 1, acc[:bsz]), 0)
    return dict(
        target_logits=np.full((int(accepted.sum()) + 1, vocab), -3.0, np.float32),
        logits=rng.standard_normal((int(verified.sum()), vocab)).astype(np.float32),
        cu_batch_token_offset=np.concatenate([[0], np.cumsum(accepted)]).astype(np.int32),
        ori_cu_batch_token_offset=np.concatenate([[0], np.cumsum(verified)]).astype(np.int32),
        seq_lens_this_time=per(this_time[:bsz], seed == 1),
        seq_lens_encoder=enc,
        accept_num=acc,
    )


# the logits copies: op -> (its batch of bsz requests, seed and vocabulary; the vocabulary per seed)
LOGITS_COPIES = {
    "speculate_get_logits": (get_logits_args, (9, 130)),
    "speculate_get_target_logits": (get_target_logits_args, (7, 129)),
}


@pytest.mark.parametrize("bsz", BATCHES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", sorted(LOGITS_COPIES))
def test_logits_copy_parity(op, bsz, seed):
    make, vocabs = LOGITS_COPIES[op]
    assert_parity(op, make(bsz, seed, vocabs[seed]), order(op))


# Rows wider than one column slice of the copy (4096 columns): 4100 keeps every row 16-byte
# aligned (vectorised copies, a 4-column last slice), 8195 misaligns most rows (scalar copies).
@pytest.mark.parametrize("vocab", [4100, 8195])
@pytest.mark.parametrize("bsz", [1, 7])
@pytest.mark.parametrize("op", sorted(LOGITS_COPIES))
def test_logits_copy_wide_rows(op, bsz, vocab):
    make, _ = LOGITS_COPIES[op]
    assert_parity(op, make(bsz, 1, vocab), order(op))


def _i32(v):
    return np.asarray(v, np.int32)


def _rows(n, v):
    return (100.0 * np.arange(n)[:, None] + np.arange(v)[None, :]).astype(np.float32)


BAD = [
    (
        "speculate_get_logits",
        dict(
            draft_logits=np.zeros((4, 2), np.float32),
            next_token_num=_i32([0, 0]),
            batch_token_num=_i32([0, 0]),
            cu_next_token_offset=_i32([0, 0, 0]),
            cu_batch_token_offset=_i32([0, 0, 0]),
            logits=_rows(3, 2),
            first_token_logits=_rows(2, 2),
            seq_lens_this_time=_i32([5, 2]),
            seq_lens_encoder=_i32([5, 0]),
        ),
        [
            ("seq_lens_this_time", _i32([5, -1])),
            ("cu_next_token_offset", _i32([0, 0])),
            ("cu_batch_token_offset", _i32([-1, 0, 0])),
            ("logits", _rows(2, 2)),
            ("draft_logits", np.zeros((3, 2), np.float32)),
        ],
    ),
    (
        "speculate_insert_first_token",
        dict(
            token_ids=np.zeros(4, np.int64),
            accept_tokens=np.array([[11], [0]], np.int64),
            next_tokens=np.array([21, 22, 23], np.int64),
            cu_next_token_offset=_i32([0, 1]),
            cu_batch_token_offset=_i32([0, 2]),
            seq_lens_this_time=_i32([5, 2]),
            seq_lens_encoder=_i32([5, 0]),
        ),
        [
            ("token_ids", np.zeros(3, np.int64)),
            ("next_tokens", np.array([21, 22], np.int64)),
            ("cu_batch_token_offset", _i32([0, -1])),
        ],
    ),
    (
        "speculate_get_target_logits",
        dict(
            target_logits=np.zeros((3, 2), np.float32),
            logits=_rows(4, 2),
            cu_batch_token_offset=_i32([0, 1]),
            ori_cu_batch_token_offset=_i32([0, 1]),
            seq_lens_this_time=_i32([5, 3]),
            seq_lens_encoder=_i32([5, 0]),
            accept_num=_i32([1, 2]),
        ),
        [
            ("target_logits", np.zeros((2, 2), np.float32)),
            ("logits", _rows(2, 2)),
            ("ori_cu_batch_token_offset", _i32([-1, 1])),
        ],
    ),
]


@pytest.mark.parametrize(
    "op, good, name, bad",
    [(op, good, name, bad) for op, good, cases in BAD for name, bad in cases],
    ids=[f"{op}-{name}" for op, _, cases in BAD for name, _ in cases],
)
def test_bad_input_names_the_argument_and_writes_nothing(op, good, name, bad):
    args = dict(good)
    args[name] = bad
    assert_refused(op, args, order(op), rf"{op}: {name}\b")
