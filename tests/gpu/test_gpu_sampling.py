"""Parity of the CUDA sampling kernels (fd_mtp.cuda, on CuPy) with the numpy references.

speculate_get_token_penalty_multi_scores and top_p_candidates on seeded random batches (batch
sizes up to 1024 requests, float32 / float16 / bfloat16 as uint16 bits, vocabularies up to 100k,
long pre_ids rows that exercise the 512-lane scan rule, top-p probabilities with many exact ties):
every output must equal the reference bit for bit, and read-only inputs must be unchanged. Then the
data-dependent bad-input cases: ValueError naming the argument, nothing written.

Needs CuPy, a CUDA GPU and the fd_mtp_cuda module (tools/gpu_check.sh builds it); skipped
otherwise. Needs neither paddle nor hypothesis.
"""

import numpy as np
import pytest
from gpu_util import assert_exact, skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402
from fd_mtp.testing.op_inputs import as_dtype  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
BATCHES = [1, 7, 33, 257, 600, 1024]
K = 3


def offsets(out_rows, max_seq_len):
    cum = np.concatenate([[0], np.cumsum([max_seq_len - o for o in out_rows])[:-1]]).astype(
        np.int32
    )
    pad = np.concatenate([np.full(o, cum[b], np.int32) for b, o in enumerate(out_rows)])
    return pad.astype(np.int32), cum


def out_rows_for(rng, n):
    x = rng.random(n)
    rows = [0 if v < 0.15 else (1 if v < 0.35 else int(rng.integers(1, K + 2))) for v in x]
    rows[0] = max(rows[0], 1)
    return rows


# ------------------------------------------------------------------------------------------------
# speculate_get_token_penalty_multi_scores
# ------------------------------------------------------------------------------------------------
def penalty_args(rng, n, dtype, vocab, lp, max_seq_len=64):
    out_rows = out_rows_for(rng, n) + [2]  # the last request is beyond bs: untouched rows
    rows = sum(out_rows)
    pre_ids = np.full((n, lp), -1, np.int64)
    for b in range(n):
        k = int(rng.integers(0, lp))
        pre_ids[b, 1 : 1 + k] = rng.integers(0, min(vocab, 50), k)
        if rng.random() < 0.3:
            pre_ids[b, rng.integers(0, lp, 3)] = -1
    pad, cum = offsets(out_rows, max_seq_len)
    per = lambda lo, hi: rng.uniform(lo, hi, len(out_rows)).astype(np.float32)  # noqa: E731
    return [
        pre_ids,
        as_dtype(rng.standard_normal((rows, vocab)) * 5, dtype),
        as_dtype(per(1.0, 2.0), dtype),
        as_dtype(per(0.0, 1.0), dtype),
        as_dtype(per(0.0, 1.0), dtype),
        per(0.3, 1.5),
        rng.integers(-3, vocab + 3, (2, 5)).astype(np.int64),
        np.concatenate([rng.integers(-1, lp, n), [0]]).astype(np.int64),
        rng.integers(0, lp + 4, len(out_rows)).astype(np.int64),
        np.array([[1], [2]], np.int64),
        np.zeros(n, np.int32),
        pad,
        cum,
        max_seq_len,
    ]


def run_penalty(args):
    host = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    dev = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    out = fcuda.speculate_get_token_penalty_multi_scores(*dev)
    assert out is dev[1]
    ref.speculate_get_token_penalty_multi_scores(*host)
    assert_exact(cp.asnumpy(dev[1]), host[1], "logits")
    for i, a in enumerate(args):
        if i != 1 and isinstance(a, np.ndarray):
            assert_exact(cp.asnumpy(dev[i]), a, f"arg {i} (read-only)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", BATCHES)
def test_penalty_matches_reference(batch, dtype):
    for seed in (0, 1):
        rng = np.random.default_rng(seed * 1000 + batch)
        run_penalty(penalty_args(rng, batch, dtype, 257, 48))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 33, 257])
def test_penalty_long_rows_use_512_lanes(batch, dtype):
    rng = np.random.default_rng(batch + 7)
    run_penalty(penalty_args(rng, batch, dtype, 997, 1300))


@pytest.mark.parametrize("dtype", DTYPES)
def test_penalty_vocab_100k(dtype):
    # the realistic batch (op_inputs): 36 rows, pre_ids of 2048 columns with 16..1600 tokens
    run_penalty(op_inputs.build_penalty(9, 100_000, dtype=dtype).args)


def test_penalty_vocab_above_the_bitmap():
    # above 8192 * 32 ids the kernel tests the counts workspace instead of its shared bitmap
    rng = np.random.default_rng(5)
    run_penalty(penalty_args(rng, 3, "float32", 8192 * 32 + 3, 48))


@pytest.mark.parametrize("case", ["eos", "pre_ids", "offset"])
def test_penalty_bad_input_writes_nothing(case):
    rng = np.random.default_rng(4)
    args = penalty_args(rng, 7, "float32", 64, 40)
    args[10] = np.zeros(7, np.int32)
    if case == "eos":
        args[9] = np.array([[1], [64]], np.int64)
        argument = "eos_token_id"
    elif case == "pre_ids":
        args[7][:7] = 0
        args[0][:, 1] = 70  # position 1 is counted (lane 1 starts with it)
        argument = "pre_ids"
    else:
        args[11] = args[11].copy()
        args[11][-1] = -args[11].size - 100
        argument = "output_padding_offset"
    dev = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ValueError, match=argument):
        fcuda.speculate_get_token_penalty_multi_scores(*dev)
    assert_exact(cp.asnumpy(dev[1]), args[1], "logits (unchanged)")


# ------------------------------------------------------------------------------------------------
# top_p_candidates
# ------------------------------------------------------------------------------------------------
def top_p_args(rng, n, dtype, vocab, levels=None, max_seq_len=64):
    out_rows = out_rows_for(rng, n)
    rows = sum(out_rows)
    logits = rng.standard_normal((rows, vocab)).astype(np.float32) * 3
    if levels:
        logits = np.round(logits * levels) / levels
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32)
    top_p = rng.choice([0.0, 0.3, 0.7, 0.9, 1.0], n).astype(np.float32)
    pad, _ = offsets(out_rows, max_seq_len)
    return as_dtype(probs, dtype), as_dtype(top_p, dtype), pad


def run_top_p(probs, top_p, pad, c, max_seq_len=64):
    got = fcuda.top_p_candidates(
        cp.asarray(probs), cp.asarray(top_p), cp.asarray(pad), c, max_seq_len
    )
    expected = ref.top_p_candidates(probs.copy(), top_p.copy(), pad.copy(), c, max_seq_len)
    for g, e, name in zip(
        got, expected, ["verify_scores", "verify_tokens", "actual_candidate_lens"]
    ):
        assert_exact(cp.asnumpy(g), e, name)
    values = (probs.astype(np.uint32) << 16).view(np.float32) if probs.dtype == np.uint16 else probs
    first = np.argmax(values, axis=1)
    assert_exact(cp.asnumpy(got[1])[:, 0], first.astype(np.int64), "verify_tokens[:, 0] == argmax")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", BATCHES)
def test_top_p_matches_reference(batch, dtype):
    for seed, c, levels in ((0, 1, None), (1, 10, 2), (2, 100, None), (3, 7, 1)):
        rng = np.random.default_rng(seed * 1000 + batch)
        run_top_p(*top_p_args(rng, batch, dtype, 257, levels), c)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", [1, 5, 10, 50, 100])
def test_top_p_vocab_100k(dtype, c):
    run_top_p(*op_inputs.build_top_p(17, 100_000, dtype=dtype, candidates=c).args)
    rng = np.random.default_rng(c)
    run_top_p(*top_p_args(rng, 5, dtype, 100_000, levels=1), c)  # heavy ties


def test_top_p_all_equal_row_takes_the_lowest_ids():
    probs = np.full((3, 5000), 1 / 5000, np.float32)
    got = fcuda.top_p_candidates(
        cp.asarray(probs),
        cp.asarray(np.ones(3, np.float32)),
        cp.asarray(np.array([0, 63, 126], np.int32)),
        100,
        64,
    )
    assert_exact(
        cp.asnumpy(got[1]), np.tile(np.arange(100, dtype=np.int64), (3, 1)), "verify_tokens"
    )


def test_top_p_bad_input():
    probs, top_p, pad = top_p_args(np.random.default_rng(9), 5, "float32", 64)
    with pytest.raises(ValueError, match="output_padding_offset"):
        fcuda.top_p_candidates(cp.asarray(probs), cp.asarray(top_p[:1]), cp.asarray(pad), 4, 64)
    with pytest.raises(ValueError, match="candidates_len"):
        fcuda.top_p_candidates(cp.asarray(probs), cp.asarray(top_p), cp.asarray(pad), 11, 64)
