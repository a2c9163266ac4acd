"""Parity of the CUDA n-gram kernels (fd_mtp.cuda.ngram_match / hybrid_mtp_ngram, on CuPy) with
the numpy references and with the CPU op's driver (fd_mtp.cuda.*_host), bit for bit.

Random valid batches (seeded; odd sizes up to 1024; per-request tensors [B] and [B, 1]) and the
production shape the kernels are designed for: batch 256 with 8k-token histories (prompt
haystack + generated tokens) and planted repeats at random positions and at the edges of the
search kernel's 256-position tiles. Small vocabularies make matches everywhere (tie-breaking
between windows, n and sources); small thresholds exercise the sequential budget. Then bad
input: ValueError naming the argument, nothing written.

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
from fd_mtp.testing.op_inputs import ngram_tensors, positional  # noqa: E402

NGRAM_ORDER = list(positional("ngram_match")[:10])  # the tensors, from the schema
HYBRID_ORDER = list(positional("hybrid_mtp_ngram")[:9])  # the tensors, from the schema
TILE = 256  # positions per tile of the search kernel (kThreads)


def make_batch(
    rng,
    bsz,
    *,
    hybrid,
    prompt,
    generated,
    vocab,
    k=3,
    max_n=3,
    plant=0.6,
    column=False,
    edge_plants=False,
    roles=True,
):
    """A valid batch: prompts of up to `prompt` tokens, `generated`-ish generated tokens, random
    tokens below `vocab`, and for a fraction `plant` of the requests the last g tokens (and what
    follows) copied to a random earlier place (prompt or history)."""
    li, lp = max(prompt, 1), generated + 8
    input_ids = rng.integers(0, vocab, (bsz, li)).astype(np.int64)
    input_ids_len = rng.integers(prompt // 2, prompt + 1, bsz).astype(np.int64)
    step = rng.integers(max(0, generated // 2), generated + 1, bsz).astype(np.int64)
    pre_ids = rng.integers(0, vocab, (bsz, lp)).astype(np.int64)
    if not hybrid:
        pre_ids[:, 0] = -1  # target convention
    role = rng.choice(3, bsz, p=[0.8, 0.1, 0.1]) if roles else np.zeros(bsz, int)
    enc = np.where(role == 1, rng.integers(1, 64, bsz), 0).astype(np.int32)
    dec = np.where(role == 2, 0, rng.integers(1, 10_000, bsz)).astype(np.int32)
    if hybrid:
        dec[role == 1] = 0
        this_time = np.where(role == 0, rng.integers(1, k + 2, bsz), 0).astype(np.int32)
    else:
        this_time = np.where(role == 1, enc, 1).astype(np.int32)
    for b in np.flatnonzero(rng.random(bsz) < plant):
        s = int(step[b])
        g = min(int(rng.integers(1, max_n + 1)), s)
        if g < 1:
            continue
        piece = np.concatenate([pre_ids[b, s - g + 1 : s + 1], rng.integers(0, vocab, k + 1)])
        if rng.random() < 0.5 and input_ids_len[b] > g + 1:
            at = int(rng.integers(0, input_ids_len[b] - g))
            seg = piece[: li - at]
            input_ids[b, at : at + len(seg)] = seg
        elif s - g >= 2:
            at = int(rng.integers(1, s - g))
            seg = piece[: s - g + 1 - at]
            pre_ids[b, at : at + len(seg)] = seg
    if edge_plants:  # window ends at the last / first position of a search tile
        for j, b in enumerate(range(0, bsz, max(1, bsz // 16))):
            s, g = int(step[b]), min(max_n, int(step[b]))
            t = TILE * (1 + j % 3) - 1 + (j // 3) % 3  # 255, 256, 257, 511, ...
            if g >= 1 and t + 2 < input_ids_len[b] and t - g + 1 >= 0:
                input_ids[b, t - g + 1 : t + 1] = pre_ids[b, s - g + 1 : s + 1]
    left = rng.integers(-1, k + 3, bsz)
    max_dec_len = np.where(rng.random(bsz) < 0.1, step + left, 1 << 40).astype(np.int64)
    num = rng.integers(0, k + 1, bsz).astype(np.int32)
    drafts = rng.integers(10**6, 2 * 10**6, (bsz, k + 1)).astype(np.int64)
    tensors = (input_ids, input_ids_len, pre_ids, step, num, drafts, this_time, enc, dec)
    return ngram_tensors(hybrid, *tensors, max_dec_len, column=column)


def run_three(d, hybrid, sizes, threshold):
    """The CUDA kernels, the CPU driver and the reference on copies of d; all must agree.
    Returns the number of requests whose seq_lens_this_time changed."""
    order = HYBRID_ORDER if hybrid else NGRAM_ORDER
    dev = {n: cp.asarray(d[n]) for n in order}
    host = {n: d[n].copy() for n in order}
    expect = {n: d[n].copy() for n in order}
    gpu_op = fcuda.hybrid_mtp_ngram if hybrid else fcuda.ngram_match
    host_op = fcuda.hybrid_mtp_ngram_host if hybrid else fcuda.ngram_match_host
    ref_op = ref.hybrid_mtp_ngram if hybrid else ref.ngram_match
    gpu_op(*[dev[n] for n in order], *sizes, threshold=threshold)
    host_op(*[host[n] for n in order], *sizes, threshold=threshold)
    ref_op(*[expect[n] for n in order], *sizes, threshold=threshold)
    for n in order:
        assert_exact(host[n], expect[n], f"{n} (CPU driver vs reference)")
        assert_exact(cp.asnumpy(dev[n]), expect[n], f"{n} (CUDA vs reference)")
    return int(np.sum(expect["seq_lens_this_time"] != d["seq_lens_this_time"]))


@pytest.mark.parametrize("bsz", [1, 7, 33, 257, 600, 1024])
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("hybrid", [False, True])
def test_random_batches(bsz, seed, hybrid):
    rng = np.random.default_rng(seed * 7919 + bsz)
    d = make_batch(
        rng, bsz, hybrid=hybrid, prompt=96, generated=64, vocab=12, k=4, max_n=4, column=bool(seed)
    )
    sizes = (4, 2, 4) if hybrid else (4, 4)
    for threshold in (1 << 30, 6 * bsz, 3):
        run_three(d, hybrid, sizes, threshold)


@pytest.mark.parametrize("hybrid", [False, True])
@pytest.mark.parametrize("vocab", [32_000, 3])
def test_batch_256_with_8k_histories(hybrid, vocab):
    """The shape the kernels are designed for: 256 requests, ~6k-token prompts + ~2k generated."""
    rng = np.random.default_rng(vocab + hybrid)
    k, max_n = 5, 5
    d = make_batch(
        rng,
        256,
        hybrid=hybrid,
        prompt=6144,
        generated=2048,
        vocab=vocab,
        k=k,
        max_n=max_n,
        plant=0.7,
        edge_plants=True,
    )
    sizes = (max_n, 2, k) if hybrid else (max_n, k)
    changed = run_three(d, hybrid, sizes, 1 << 30)
    if vocab > 100:  # planted repeats drafted (most requests; some have q <= 0 or are not decoding)
        assert changed >= 256 // 3, changed
    run_three(d, hybrid, sizes, 300 if not hybrid else 1100)  # the budget runs out mid-batch


def test_ngram_match_rows_longer_than_the_batch():
    rng = np.random.default_rng(5)
    d = make_batch(rng, 40, hybrid=False, prompt=300, generated=300, vocab=8)
    big = {
        n: (np.concatenate([v, v[:9]]) if n != "seq_lens_this_time" else v) for n, v in d.items()
    }
    run_three(big, False, (3, 3), 1 << 20)


def test_empty_batch():
    rng = np.random.default_rng(6)
    d = make_batch(rng, 4, hybrid=False, prompt=16, generated=16, vocab=8)
    d["seq_lens_this_time"] = np.zeros(0, np.int32)
    run_three(d, False, (3, 3), 100)


@pytest.mark.parametrize(
    "hybrid, field, value, arg",
    [
        (False, "input_ids_len", 10_000, "input_ids_len"),
        (False, "step_idx", 10_000, "step_idx"),
        (False, "draft_token_num", 9, "draft_tokens"),
        (True, "seq_lens_this_time", -3, "seq_lens_this_time"),
        (True, "step_idx", 10_000, "step_idx"),
    ],
)
def test_bad_input_writes_nothing(hybrid, field, value, arg):
    rng = np.random.default_rng(7)
    d = make_batch(
        rng, 300, hybrid=hybrid, prompt=64, generated=64, vocab=8, roles=False, plant=1.0
    )
    d["max_dec_len"][:] = 1 << 40
    if hybrid:
        d["seq_lens_this_time"][:] = 1
    else:
        d["draft_token_num"][:] = 3
    d[field][250] = value
    order = HYBRID_ORDER if hybrid else NGRAM_ORDER
    dev = {n: cp.asarray(d[n]) for n in order}
    op = fcuda.hybrid_mtp_ngram if hybrid else fcuda.ngram_match
    sizes = (3, 1, 3) if hybrid else (3, 3)
    with pytest.raises(ValueError, match=arg):
        op(*[dev[n] for n in order], *sizes, threshold=1 << 30)
    for n in order:
        assert_exact(cp.asnumpy(dev[n]), d[n], f"{n} after the failed call")


def test_bad_ngram_sizes():
    rng = np.random.default_rng(8)
    d = make_batch(rng, 4, hybrid=True, prompt=16, generated=16, vocab=8)
    dev = {n: cp.asarray(d[n]) for n in HYBRID_ORDER}
    with pytest.raises(ValueError, match="min_ngram_size"):
        fcuda.hybrid_mtp_ngram(*[dev[n] for n in HYBRID_ORDER], 2, 3, 3)
